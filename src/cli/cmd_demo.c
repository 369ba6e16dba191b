/*
 * cmd_demo.c - `cubemem demo`: a short tour of the API on the simulated
 * device (reserve, bind, persistent window, release, cleanup) ending with the
 * manager's memory report.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cubemem/cubemem.h"

static int fail(const char *what, int rc, const cm_diag_t *d) {
  fprintf(stderr, "cubemem demo: %s: %s (%s)\n", what, d->message[0] ? d->message : cm_strerror(rc),
          cm_err_name(rc));
  return 1;
}

int cm_cli_demo(int argc, char **argv) {
  if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
    printf("usage: cubemem demo\nRuns a few reservations on a simulated 80 GiB device and prints "
           "the memory report.\n");
    return 0;
  }
  cm_diag_t d;
  cm_diag_clear(&d);
  cm_storage_t *s;
  int rc = cm_storage_sim_create(80ull << 30, true, 0, &s);
  if (rc) return fail("creating the simulated device", rc, &d);
  cm_manager_config_t cfg;
  cm_manager_config_init(&cfg);
  cfg.name = "Main GPU Memory";
  cfg.props.max_page_size = 20ull << 30;
  cfg.props.alignment = 512;
  cm_manager_t *m;
  rc = cm_manager_create(s, &cfg, &m, &d);
  if (rc) {
    cm_storage_destroy(s);
    return fail("creating the manager", rc, &d);
  }
  cm_handle_t weights[4], acts[16];
  cm_manager_set_mode(m, CM_MODE_PERSISTENT);
  for (int i = 0; i < 4; i++)
    if ((rc = cm_manager_reserve(m, 64ull << 20, &weights[i], &d))) goto out;
  cm_manager_set_mode(m, CM_MODE_AUTO);
  for (int step = 0; step < 3; step++) {
    for (int i = 0; i < 16; i++)
      if ((rc = cm_manager_reserve(m, (uint64_t)(i + 1) * 1000003u, &acts[i], &d))) goto out;
    for (int i = 0; i < 16; i++) cm_handle_release(acts[i]);
  }
  cm_manager_cleanup(m, true);
  size_t need = cm_manager_display(m, NULL, 0);
  char *buf = malloc(need + 1);
  if (buf) {
    cm_manager_display(m, buf, need + 1);
    fputs(buf, stdout);
    free(buf);
  }
  cm_storage_stats_t st;
  cm_storage_stats(cm_manager_storage(m), &st);
  printf("\ndevice allocations: %" PRIu64 ", device frees: %" PRIu64 ", peak reserved: %" PRIu64
         " bytes\n",
         st.allocs + st.maps, st.deallocs + st.unmaps, cm_manager_reserved_peak(m));
out:
  for (int i = 0; i < 4; i++) cm_handle_release(weights[i]);
  cm_manager_destroy(m);
  if (rc) return fail("reserving", rc, &d);
  return 0;
}
