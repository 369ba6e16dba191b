/*
 * cli_fit.c - what makes `cubemem fit` predict `cubemem replay`: the layout
 * of every probed capacity is resolved as `replay --device-memory C` resolves
 * it (device properties max page = C / 4 and the alignment of --alignment,
 * then cm_pools_parse of the --pools text), so a fit of C bytes is a
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
  size_t n = 0;
  int rc = cm_pools_parse(l->text, props, l->pools, CM_MAX_DYNAMIC_POOLS, &n, diag);
  if (rc != CM_OK) return rc;
  cfg->props = props;
  cfg->pools = l->pools;
  cfg->pool_count = n;
  return CM_OK;
}
