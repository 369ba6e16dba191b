/*
 * cli_fit.c - what makes `cubemem fit` predict `cubemem replay`: the layout
 * of every probed capacity is resolved as `replay --device-memory C` resolves
 * it (device properties max page = C / 4 and the alignment of --alignment,
 * then cm_pools_parse of the checked --pools text), so a fit of C bytes is a
 * replay that succeeds on C bytes.
 *
 * Exports cli_fit_configure (cli.h).
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int cli_fit_configure(void *arg, uint64_t capacity, cm_manager_config_t *cfg, cm_diag_t *diag) {
  cli_fit_layout_t *l = arg;
  cm_device_props_t props = {.max_page_size = capacity / 4,
                             .alignment = l->alignment ? l->alignment : 512};
  char err[256];
  char *norm = NULL;
  int rc = cli_layout_check(l->text, &norm, err, sizeof err);
  if (rc != 0) {
    if (diag) {
      diag->code = rc < 0 ? CM_ENOMEM : CM_EINVAL;
      snprintf(diag->message, sizeof diag->message, "%s", rc < 0 ? "out of memory" : err);
    }
    return rc < 0 ? CM_ENOMEM : CM_EINVAL;
  }
  size_t n = 0;
  rc = cm_pools_parse(norm, props, l->pools, CM_MAX_DYNAMIC_POOLS, &n, diag);
  free(norm);
  if (rc != CM_OK) return rc;
  cfg->props = props;
  cfg->pools = l->pools;
  cfg->pool_count = n;
  return CM_OK;
}
