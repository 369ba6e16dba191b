/*
 * fuzz_trace.c - libFuzzer target for the allocation-trace parser and the
 * replay engine (cubemem/replay.h).
 *
 * Each input is parsed twice: strictly (the first bad line fails the parse
 * with CM_EPARSE and a 1-based line) and with skip_bad_lines. Every parsed
 * trace is checked against its own summary by recomputing it from the
 * events: alloc / free counts, every slot below `slots`, every free naming a
 * live slot with the size it was allocated with, the exact peak of live bytes
 * and where it was first reached, the live count and bytes at the end, total
 * (saturating) and maximum allocation sizes; peak and live bytes are not
 * compared once the live sum overflows 64 bits. Small traces are then
 * replayed through a manager over the simulated device, which must account
 * for every event and end with cm_manager_check() == 0.
 *
 * Exports: LLVMFuzzerTestOneInput.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cubemem/cubemem.h"
#include "cubemem/replay.h"
#include "fuzz.h"

#define FUZZ_CHECK(c)                                                                \
  do {                                                                               \
    if (!(c)) {                                                                      \
      fprintf(stderr, "fuzz_trace: %s:%d: check failed: %s\n", __FILE__, __LINE__, #c); \
      abort();                                                                       \
    }                                                                                \
  } while (0)

static void check_trace(const cm_trace_t *t) {
  FUZZ_CHECK(t->allocs + t->frees == t->count);
  uint64_t *live = calloc(t->slots ? t->slots : 1, sizeof *live); /* size + 1, 0 = free */
  FUZZ_CHECK(live != NULL);
  uint64_t allocs = 0, frees = 0, bytes = 0, peak = 0, peak_ev = 0, n = 0, peak_n = 0;
  uint64_t total = 0, maxsz = 0;
  bool wrapped = false; /* live bytes overflowed u64: peak figures unspecified */
  for (size_t e = 0; e < t->count; e++) {
    const cm_trace_event_t *ev = &t->events[e];
    FUZZ_CHECK(ev->slot < t->slots);
    if (ev->action == CM_TRACE_ALLOC) {
      FUZZ_CHECK(live[ev->slot] == 0);
      live[ev->slot] = ev->size + 1;
      allocs++;
      n++;
      if (bytes > UINT64_MAX - ev->size) wrapped = true;
      bytes += ev->size;
      total = total > UINT64_MAX - ev->size ? UINT64_MAX : total + ev->size; /* saturates */
      if (ev->size > maxsz) maxsz = ev->size;
      if (n > peak_n) peak_n = n;
      if (bytes > peak) {
        peak = bytes;
        peak_ev = e;
      }
    } else {
      FUZZ_CHECK(ev->action == CM_TRACE_FREE);
      FUZZ_CHECK(live[ev->slot] == ev->size + 1);
      live[ev->slot] = 0;
      frees++;
      n--;
      bytes -= ev->size;
    }
  }
  FUZZ_CHECK(allocs == t->allocs && frees == t->frees);
  if (!wrapped) {
    FUZZ_CHECK(peak == t->peak_live_bytes);
    if (peak) FUZZ_CHECK(peak_ev == t->peak_live_event);
    FUZZ_CHECK(bytes == t->live_bytes_at_end);
  }
  FUZZ_CHECK(peak_n == t->peak_live_count);
  FUZZ_CHECK(n == t->live_at_end);
  FUZZ_CHECK(total == t->total_alloc_bytes && maxsz == t->max_alloc_size);
  FUZZ_CHECK(memchr(t->first_bad_message, '\0', sizeof t->first_bad_message) != NULL);
  free(live);
}

static void replay(const cm_trace_t *t) {
  if (t->count > 4096) return;
  cm_storage_t *st = NULL;
  FUZZ_CHECK(cm_storage_sim_create(1ull << 34, true, 0, &st) == CM_OK);
  cm_manager_config_t cfg;
  cm_manager_config_init(&cfg);
  cm_manager_t *m = NULL;
  if (cm_manager_create(st, &cfg, &m, NULL) != CM_OK) {
    cm_storage_destroy(st);
    return;
  }
  cm_replay_result_t res;
  memset(&res, 0, sizeof res);
  cm_replay_options_t opts;
  memset(&opts, 0, sizeof opts);
  opts.timeline_points = 16;
  int rc = cm_replay_run(t, m, &opts, &res, NULL);
  FUZZ_CHECK(rc == CM_OK || rc == CM_ENOMEM);
  if (rc == CM_OK) {
    FUZZ_CHECK(res.events == t->count);
    FUZZ_CHECK(res.allocs == t->allocs);
    FUZZ_CHECK(res.failed_allocs <= res.allocs);
    FUZZ_CHECK(res.peak_live_bytes == t->peak_live_bytes);
    /* The engine stores the starting point (event 0) before the at most
     * timeline_points samples of the run. */
    FUZZ_CHECK(res.timeline_count <= 16 + 1);
  }
  cm_replay_result_free(&res);
  FUZZ_CHECK(cm_manager_check(m, NULL) == 0);
  cm_usage_t u;
  cm_manager_usage(m, &u);
  FUZZ_CHECK(u.number_allocs == 0);
  cm_manager_destroy(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  for (int skip = 0; skip < 2; skip++) {
    cm_trace_parse_options_t opts = {.skip_bad_lines = skip != 0};
    cm_trace_t *t = NULL;
    cm_diag_t d;
    cm_diag_clear(&d);
    int rc = cm_trace_parse((const char *)data, size, &opts, &t, &d);
    if (rc != CM_OK) {
      FUZZ_CHECK(t == NULL);
      FUZZ_CHECK(rc == CM_EPARSE || rc == CM_ENOMEM || rc == CM_EOVERFLOW);
      if (rc == CM_EPARSE) FUZZ_CHECK(d.line >= 1);
      FUZZ_CHECK(!skip || rc != CM_EPARSE); /* skipping never fails on bad lines */
      continue;
    }
    FUZZ_CHECK(t != NULL);
    if (!skip) FUZZ_CHECK(t->bad_lines == 0);
    if (t->bad_lines) FUZZ_CHECK(t->first_bad_line >= 1);
    check_trace(t);
    replay(t);
    cm_trace_free(t);
  }
  return 0;
}
