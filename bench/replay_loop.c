/*
 * replay_loop.c - replay one allocation trace through a fresh manager on an
 * 80 GiB simulated device and count the instructions of the event loop only.
 *
 * Usage: cm_bench_replay_loop TRACE [LAYOUT [GUARDS]]   (LAYOUT as for
 * `cubemem replay --pools`, default "default"; GUARDS > 0: relocation is
 * enabled in the config and GUARDS blocks of 4 KiB, reserved before the loop,
 * each hold a guard (cm_manager_get_resource) through the whole loop: what
 * reservations cost while a runtime keeps raw addresses). The trace is parsed and the manager built
 * before the loop; the loop (cm_manager_reserve for an allocation,
 * cm_handle_release for a free, exactly what cm_replay_run does) is bracketed
 * by CALLGRIND_START_INSTRUMENTATION / CALLGRIND_STOP_INSTRUMENTATION when
 * <valgrind/callgrind.h> is available, so
 *   valgrind --tool=callgrind --instr-atstart=no cm_bench_replay_loop TRACE
 * reports the loop's instructions; divide by the "ops" printed (reserve +
 * release calls). Without valgrind the program just prints the ops, the ratio
 * peak reserved / peak live and the loop's wall time.
 * Exports: main.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cubemem/memory.h"
#include "cubemem/replay.h"

#if defined(__has_include)
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#define HAVE_CALLGRIND 1
#endif
#endif
#ifndef HAVE_CALLGRIND
#define CALLGRIND_START_INSTRUMENTATION
#define CALLGRIND_STOP_INSTRUMENTATION
#define CALLGRIND_ZERO_STATS
#endif

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Blocks that hold a guard through the loop (GUARDS). */
typedef struct guards {
  cm_handle_t *h;
  long n;
} guards;

/* Reserve n blocks of 4 KiB and take a guard on each (out of line, so the
 * measured loop's code is the same with or without them). */
static __attribute__((noinline)) int take_guards(cm_manager_t *m, long n, guards *out) {
  cm_diag_t d;
  memset(&d, 0, sizeof d);
  out->h = calloc((size_t)n, sizeof *out->h);
  if (!out->h) return 1;
  for (; out->n < n; out->n++) {
    cm_resource_t res;
    cm_handle_t *h = &out->h[out->n];
    if (cm_manager_reserve(m, 4096, h, &d) != CM_OK) {
      fprintf(stderr, "guard %ld: %s\n", out->n, d.message);
      return 1;
    }
    if (cm_manager_get_resource(m, cm_handle_binding(*h), 0, 0, &res, &d) != CM_OK) {
      fprintf(stderr, "guard %ld: %s\n", out->n, d.message);
      cm_handle_release(*h);
      return 1;
    }
  }
  return 0;
}

static __attribute__((noinline)) void drop_guards(guards *g) {
  for (long i = 0; i < g->n; i++) cm_handle_release(g->h[i]);
  free(g->h);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s TRACE [LAYOUT [GUARDS]]\n", argv[0]);
    return 2;
  }
  const char *layout = argc > 2 ? argv[2] : "default";
  long nguards = argc > 3 ? strtol(argv[3], NULL, 10) : 0;
  if (nguards < 0 || nguards > 4096) {
    fprintf(stderr, "GUARDS: 0 to 4096\n");
    return 2;
  }
  cm_diag_t d;
  memset(&d, 0, sizeof d);
  cm_trace_t *t = NULL;
  if (cm_trace_load(argv[1], NULL, &t, &d) != CM_OK) {
    fprintf(stderr, "%s: %s\n", argv[1], d.message);
    return 1;
  }
  cm_device_props_t props = {20ull << 30, 512}; /* 80 GiB device: max page = 1/4 */
  cm_pool_options_t pools[256];
  size_t n = 0;
  if (cm_pools_parse(layout, props, pools, 256, &n, &d) != CM_OK) {
    fprintf(stderr, "layout: %s\n", d.message);
    return 1;
  }
  cm_storage_t *st = NULL;
  if (cm_storage_sim_create(80ull << 30, true, 0, &st) != CM_OK) return 1;
  cm_manager_config_t cfg;
  cm_manager_config_init(&cfg);
  cfg.props = props;
  cfg.pools = pools;
  cfg.pool_count = n;
  cfg.relocate = nguards > 0;
  cm_manager_t *m = NULL;
  if (cm_manager_create(st, &cfg, &m, &d) != CM_OK) {
    fprintf(stderr, "manager: %s\n", d.message);
    return 1;
  }
  guards gd = {NULL, 0};
  if (nguards && take_guards(m, nguards, &gd) != 0) return 1;
  cm_handle_t *h = calloc(t->slots ? t->slots : 1, sizeof *h);
  if (!h) return 1;
  uint64_t ops = 0, failed = 0;
  double t0 = now_s();
  CALLGRIND_ZERO_STATS;
  CALLGRIND_START_INSTRUMENTATION;
  for (size_t i = 0; i < t->count; i++) {
    const cm_trace_event_t *e = &t->events[i];
    if (e->action == CM_TRACE_ALLOC) {
      ops++;
      if (cm_manager_reserve(m, e->size, &h[e->slot], NULL) != CM_OK) {
        h[e->slot].d = NULL;
        failed++;
      }
    } else if (h[e->slot].d) {
      ops++;
      cm_handle_release(h[e->slot]);
      h[e->slot].d = NULL;
    }
  }
  CALLGRIND_STOP_INSTRUMENTATION;
  double t1 = now_s();
  cm_storage_stats_t s;
  cm_storage_stats(cm_manager_storage(m), &s);
  printf("trace %s layout %s guards %ld ops %llu failed %llu ratio %.4f device_calls %llu "
         "ns_per_op %.1f\n",
         argv[1], layout, gd.n, (unsigned long long)ops, (unsigned long long)failed,
         t->peak_live_bytes ? (double)s.bytes_held_peak / (double)t->peak_live_bytes : 0.0,
         (unsigned long long)(s.allocs + s.maps), (t1 - t0) * 1e9 / (double)(ops ? ops : 1));
  for (uint32_t i = 0; i < t->slots; i++)
    if (h[i].d) cm_handle_release(h[i]);
  free(h);
  drop_guards(&gd);
  cm_manager_destroy(m);
  cm_trace_free(t);
  return failed ? 1 : 0;
}
