/*
 * replay.c - drive a memory manager with a parsed allocation trace.
 *
 * Algorithm. The trace already maps every allocation to a dense slot, so the
 * replay keeps one cm_handle_t per slot: ALLOC reserves into handles[slot],
 * FREE releases handles[slot] and empties it. A failed reserve leaves the
 * slot empty, so its later free is a no-op (counted as skipped). The time is
 * measured around the event loop only (monotonic clock). Peak live bytes come
 * from the trace (exact); reserved bytes come from the storage counters
 * (bytes_held / bytes_held_peak), which are what the manager holds from the
 * device whatever the backend.
 *
 * With a timeline requested, the storage counters are read after every event:
 * events are grouped into runs of ceil(count / points) and each sample keeps
 * the maxima of live and reserved bytes over its run, so no peak is lost by
 * sampling. When reserved bytes reach a new maximum, the per-pool reserved
 * bytes are snapshotted (this happens at most once per device allocation).
 *
 * An optional observer (opts->observe) is called after every event with the
 * event, the manager, the new handle of a successful ALLOC and the live bytes;
 * the recorder of record.c is one.
 *
 * Invariants. After the loop every handle is empty (live ones are released
 * before returning); the trace is never modified.
 *
 * Exports cm_replay_run and cm_replay_result_free.
 */
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "cubemem/replay.h"

static void snapshot_pools(cm_manager_t *m, size_t np, uint64_t *out) {
  cm_pool_report_t r;
  for (size_t j = 0; j < np; j++)
    out[j] = cm_manager_pool_report(m, j, &r) == CM_OK ? r.usage.bytes_reserved : 0;
  out[np] = cm_manager_pool_report(m, CM_PERSISTENT_POOL, &r) == CM_OK ? r.usage.bytes_reserved : 0;
}

/* What one run allocates: a handle per trace slot, the pool reports, and
 * with a timeline its samples and the per-pool bytes at the reserved peak. */
typedef struct run_bufs {
  cm_handle_t *h;
  cm_pool_report_t *reports;
  cm_replay_sample_t *tl;
  uint64_t *at_peak;
  size_t bucket; /* events per timeline sample */
} run_bufs;

/* Allocate the buffers of a run over `trace` with np dynamic pools and
 * `points` timeline samples (0: none). CM_ENOMEM (nothing kept) on failure. */
static int bufs_alloc(const cm_trace_t *trace, size_t np, size_t points, run_bufs *b) {
  b->h = calloc(trace->slots ? trace->slots : 1, sizeof *b->h);
  b->reports = calloc(np + 1, sizeof *b->reports);
  b->tl = NULL;
  b->at_peak = NULL;
  b->bucket = 1;
  if (points) {
    size_t pts = points;
    b->bucket = trace->count / pts + (trace->count % pts != 0);
    if (b->bucket == 0) b->bucket = 1;
    b->tl = calloc(pts + 2, sizeof *b->tl);
    b->at_peak = calloc(np + 1, sizeof *b->at_peak);
  }
  if (!b->h || !b->reports || (points && (!b->tl || !b->at_peak))) {
    free(b->h);
    free(b->reports);
    free(b->tl);
    free(b->at_peak);
    return CM_ENOMEM;
  }
  return CM_OK;
}

/* Timeline sampling state: live bytes, the maxima of the current run of
 * events, the largest reserved bytes seen. */
typedef struct timeline {
  size_t ntl;
  uint64_t live, run_live, run_res, best_res;
} timeline;

/* Account event i (e) in the timeline: track the maxima of its run, snapshot
 * the pools at a new reserved maximum, close the run every `bucket` events. */
static inline void timeline_step(timeline *tv, const run_bufs *b, cm_manager_t *m,
                                 cm_storage_t *st, size_t np, const cm_trace_event_t *e, size_t i,
                                 size_t n) {
  tv->live = e->action == CM_TRACE_ALLOC ? tv->live + e->size : tv->live - e->size;
  cm_storage_stats_t s;
  cm_storage_stats(st, &s);
  if (tv->live > tv->run_live) tv->run_live = tv->live;
  if (s.bytes_held > tv->run_res) tv->run_res = s.bytes_held;
  if (s.bytes_held > tv->best_res) {
    tv->best_res = s.bytes_held;
    snapshot_pools(m, np, b->at_peak);
  }
  if ((i + 1) % b->bucket == 0 || i + 1 == n) {
    b->tl[tv->ntl++] = (cm_replay_sample_t){i + 1, tv->run_live, tv->run_res};
    tv->run_live = tv->live;
    tv->run_res = s.bytes_held;
  }
}

/* Call the observer after event i (e): the live bytes it has seen so far
 * and, for an ALLOC, the new handle or that the reserve failed. */
static inline void observe_step(const cm_replay_options_t *o, cm_manager_t *m,
                                const cm_handle_t *h, const cm_trace_event_t *e, size_t i,
                                uint64_t *obs_live) {
  *obs_live = e->action == CM_TRACE_ALLOC ? *obs_live + e->size : *obs_live - e->size;
  cm_replay_step_t step = {.index = i, .event = e, .manager = m, .live_bytes = *obs_live};
  if (e->action == CM_TRACE_ALLOC) {
    step.handle = h[e->slot];
    step.failed = h[e->slot].d == NULL;
  }
  o->observe(o->observe_arg, &step);
}

/* Record the first failed reserve (status, size, message) in out. */
static void note_first_failure(cm_replay_result_t *out, int rc, uint64_t size,
                               const cm_diag_t *fail_diag) {
  out->first_failure = rc;
  out->first_failure_size = size;
  snprintf(out->first_failure_message, sizeof out->first_failure_message, "%.511s",
           fail_diag->message[0] ? fail_diag->message : cm_strerror(rc));
}

/* Read the pool reports (zeroed where unavailable) into b->reports. */
static void read_reports(cm_manager_t *m, size_t np, const run_bufs *b) {
  for (size_t j = 0; j < np; j++)
    if (cm_manager_pool_report(m, j, &b->reports[j]) != CM_OK)
      memset(&b->reports[j], 0, sizeof b->reports[j]);
  if (cm_manager_pool_report(m, CM_PERSISTENT_POOL, &b->reports[np]) != CM_OK)
    memset(&b->reports[np], 0, sizeof b->reports[np]);
}

/* Fill the event counts and the timing of out (elapsed: ns in the event loop). */
static void fill_counts(cm_replay_result_t *out, size_t n_done, uint64_t allocs, uint64_t frees,
                        uint64_t failed, uint64_t elapsed) {
  out->events = n_done;
  out->allocs = allocs;
  out->frees = frees;
  out->failed_allocs = failed;
  out->elapsed_ns = elapsed;
  out->ns_per_op = (allocs + frees) ? (double)elapsed / (double)(allocs + frees) : 0.0;
}

/* Fill the storage figures of out from the counters before (s0) and after (s1). */
static void fill_storage(cm_replay_result_t *out, const cm_storage_stats_t *s0,
                         const cm_storage_stats_t *s1) {
  out->peak_reserved_bytes = s1->bytes_held_peak;
  out->reserved_at_end = s1->bytes_held;
  out->device_maps = s1->maps - s0->maps;
  out->device_unmaps = s1->unmaps - s0->unmaps;
  out->device_allocs = s1->allocs - s0->allocs + out->device_maps;
  out->device_frees = s1->deallocs - s0->deallocs + out->device_unmaps;
  out->device_time_ns = s1->time_ns - s0->time_ns;
  out->storage = cm_storage_stats_diff(s0, s1);
  out->driver_calls = cm_storage_stats_driver_calls(&out->storage);
}

int cm_replay_run(const cm_trace_t *trace, cm_manager_t *m, const cm_replay_options_t *opts,
                  cm_replay_result_t *out, cm_diag_t *diag) {
  if (!trace || !m || !out) return cm__diag_set(diag, CM_EINVAL, "cm_replay_run: NULL argument");
  memset(out, 0, sizeof *out);
  cm_replay_options_t o;
  memset(&o, 0, sizeof o);
  if (opts) o = *opts;

  cm_storage_t *st = cm_manager_storage(m);
  size_t np = cm_manager_pool_count(m);
  run_bufs b;
  if (bufs_alloc(trace, np, o.timeline_points, &b) != CM_OK)
    return cm__diag_set(diag, CM_ENOMEM, "out of memory preparing the replay");
  cm_handle_t *h = b.h;

  cm_storage_stats_t s0, s1;
  cm_storage_stats(st, &s0);

  const cm_trace_event_t *ev = trace->events;
  const size_t n = trace->count;
  size_t n_done = n;
  uint64_t allocs = 0, frees = 0, failed = 0;
  cm_diag_t fail_diag;
  memset(&fail_diag, 0, sizeof fail_diag);
  cm_diag_t *fdp = &fail_diag;
  uint64_t every = o.progress ? o.progress_every : 0, countdown = every;

  timeline tv = {0, 0, 0, 0, 0};
  uint64_t obs_live = 0, live = 0; /* live: requested bytes the replay holds */
  if (b.tl) b.tl[tv.ntl++] = (cm_replay_sample_t){0, 0, s0.bytes_held};

  uint64_t t0 = cm__now_ns();
  for (size_t i = 0; i < n; i++) {
    const cm_trace_event_t *e = &ev[i];
    if (e->action == CM_TRACE_ALLOC) {
      allocs++;
      int rc = cm_manager_reserve(m, e->size, &h[e->slot], fdp);
      if (rc != CM_OK) {
        h[e->slot].d = NULL;
        if (failed++ == 0) {
          note_first_failure(out, rc, e->size, &fail_diag);
          cm_storage_stats_t sf;
          cm_storage_stats(st, &sf);
          out->first_failure_event = i;
          out->first_failure_time_us = e->time_us;
          out->first_failure_live_bytes = live;
          out->first_failure_reserved_bytes = sf.bytes_held;
          fdp = NULL;
        }
        if (o.stop_on_failure) {
          n_done = i + 1;
          break;
        }
      }
      else live += e->size;
    } else if (h[e->slot].d) {
      frees++;
      live -= e->size;
      cm_handle_release(h[e->slot]);
      h[e->slot].d = NULL;
    }
    if (o.observe) observe_step(&o, m, h, e, i, &obs_live);
    if (b.tl) timeline_step(&tv, &b, m, st, np, e, i, n);
    if (every && --countdown == 0) {
      countdown = every;
      o.progress(o.progress_arg, i + 1, n);
    }
  }
  uint64_t t1 = cm__now_ns();

  cm_storage_stats(st, &s1);
  read_reports(m, np, &b);
  for (uint32_t s = 0; s < trace->slots; s++)
    if (h[s].d) cm_handle_release(h[s]);
  free(h);
  if (o.progress) o.progress(o.progress_arg, n, n);

  fill_counts(out, n_done, allocs, frees, failed, t1 - t0);
  out->peak_live_bytes = trace->peak_live_bytes;
  out->manager_reserved_peak = cm_manager_reserved_peak(m);
  fill_storage(out, &s0, &s1);
  out->pool_count = np;
  out->pool_reports = b.reports;
  out->pool_reserved_at_peak = b.at_peak;
  out->timeline = b.tl;
  out->timeline_count = tv.ntl;
  return CM_OK;
}

void cm_replay_result_free(cm_replay_result_t *r) {
  if (!r) return;
  free(r->pool_reports);
  free(r->pool_reserved_at_peak);
  free(r->timeline);
  free(r->streams);
  memset(r, 0, sizeof *r);
}
