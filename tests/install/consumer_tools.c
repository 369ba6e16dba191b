/*
 * consumer_tools.c - a tiny program built against an installed cubemem's
 * tools library (pkg-config cubemem-tools, CMake cubemem::cubemem_tools), by
 * check.sh. It parses a three-line trace, replays it on the simulated device
 * and checks the figures. Exits 0 on success and prints one line per
 * failure otherwise.
 */
#include <stdio.h>
#include <string.h>

#include <cubemem/tools.h>

static const char k_trace[] =
    "Thread,Time,Action,Pointer,Size,Stream\n"
    "0,1,allocate,0x10,1000,0\n"
    "0,2,allocate,0x20,3000,0\n"
    "0,3,free,0x10,1000,0\n";

int main(void) {
  cm_trace_t *t = NULL;
  cm_diag_t diag = {0};
  if (cm_trace_parse(k_trace, strlen(k_trace), NULL, &t, &diag) != CM_OK) {
    fprintf(stderr, "cm_trace_parse: %s\n", diag.message);
    return 1;
  }
  cm_storage_t *st = NULL;
  cm_manager_t *m = NULL;
  cm_manager_config_t cfg;
  cm_manager_config_init(&cfg);
  int failed = 1;
  cm_replay_result_t r;
  memset(&r, 0, sizeof r);
  if (cm_storage_sim_create(1ull << 30, true, 0, &st) == CM_OK &&
      cm_manager_create(st, &cfg, &m, &diag) == CM_OK &&
      cm_replay_run(t, m, NULL, &r, &diag) == CM_OK) {
    failed = r.allocs != 2 || r.frees != 1 || r.peak_live_bytes != 4000 || r.failed_allocs != 0;
    if (failed)
      fprintf(stderr, "replay: allocs %llu frees %llu peak %llu\n", (unsigned long long)r.allocs,
              (unsigned long long)r.frees, (unsigned long long)r.peak_live_bytes);
  } else {
    fprintf(stderr, "replay setup: %s\n", diag.message);
  }
  cm_replay_result_free(&r);
  if (m) cm_manager_destroy(m);
  else if (st) cm_storage_destroy(st);
  if (!failed) printf("tools consumer ok: replayed %zu events\n", t->count);
  cm_trace_free(t);
  return failed;
}
