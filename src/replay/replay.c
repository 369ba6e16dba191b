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

static cm_storage_stats_t stats_delta(const cm_storage_stats_t *a, const cm_storage_stats_t *b);

int cm_replay_run(const cm_trace_t *trace, cm_manager_t *m, const cm_replay_options_t *opts,
                  cm_replay_result_t *out, cm_diag_t *diag) {
  if (!trace || !m || !out) return cm__diag_set(diag, CM_EINVAL, "cm_replay_run: NULL argument");
  memset(out, 0, sizeof *out);
  cm_replay_options_t o;
  memset(&o, 0, sizeof o);
  if (opts) o = *opts;

  cm_storage_t *st = cm_manager_storage(m);
  size_t np = cm_manager_pool_count(m);
  cm_handle_t *h = calloc(trace->slots ? trace->slots : 1, sizeof *h);
  cm_pool_report_t *reports = calloc(np + 1, sizeof *reports);
  cm_replay_sample_t *tl = NULL;
  uint64_t *at_peak = NULL;
  size_t bucket = 1;
  if (o.timeline_points) {
    size_t pts = o.timeline_points;
    bucket = trace->count / pts + (trace->count % pts != 0);
    if (bucket == 0) bucket = 1;
    tl = calloc(pts + 2, sizeof *tl);
    at_peak = calloc(np + 1, sizeof *at_peak);
  }
  if (!h || !reports || (o.timeline_points && (!tl || !at_peak))) {
    free(h);
    free(reports);
    free(tl);
    free(at_peak);
    return cm__diag_set(diag, CM_ENOMEM, "out of memory preparing the replay");
  }

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

  /* timeline state */
  size_t ntl = 0;
  uint64_t live = 0, run_live = 0, run_res = 0, best_res = 0, obs_live = 0;
  if (tl) tl[ntl++] = (cm_replay_sample_t){0, 0, s0.bytes_held};

  uint64_t t0 = cm__now_ns();
  for (size_t i = 0; i < n; i++) {
    const cm_trace_event_t *e = &ev[i];
    if (e->action == CM_TRACE_ALLOC) {
      allocs++;
      int rc = cm_manager_reserve(m, e->size, &h[e->slot], fdp);
      if (rc != CM_OK) {
        h[e->slot].d = NULL;
        if (failed++ == 0) {
          out->first_failure = rc;
          out->first_failure_size = e->size;
          snprintf(out->first_failure_message, sizeof out->first_failure_message, "%.159s",
                   fail_diag.message[0] ? fail_diag.message : cm_strerror(rc));
          fdp = NULL;
        }
        if (o.stop_on_failure) {
          n_done = i + 1;
          break;
        }
      }
    } else if (h[e->slot].d) {
      frees++;
      cm_handle_release(h[e->slot]);
      h[e->slot].d = NULL;
    }
    if (o.observe) {
      obs_live = e->action == CM_TRACE_ALLOC ? obs_live + e->size : obs_live - e->size;
      cm_replay_step_t step = {.index = i, .event = e, .manager = m, .live_bytes = obs_live};
      if (e->action == CM_TRACE_ALLOC) {
        step.handle = h[e->slot];
        step.failed = h[e->slot].d == NULL;
      }
      o.observe(o.observe_arg, &step);
    }
    if (tl) {
      live = e->action == CM_TRACE_ALLOC ? live + e->size : live - e->size;
      cm_storage_stats_t s;
      cm_storage_stats(st, &s);
      if (live > run_live) run_live = live;
      if (s.bytes_held > run_res) run_res = s.bytes_held;
      if (s.bytes_held > best_res) {
        best_res = s.bytes_held;
        snapshot_pools(m, np, at_peak);
      }
      if ((i + 1) % bucket == 0 || i + 1 == n) {
        tl[ntl++] = (cm_replay_sample_t){i + 1, run_live, run_res};
        run_live = live;
        run_res = s.bytes_held;
      }
    }
    if (every && --countdown == 0) {
      countdown = every;
      o.progress(o.progress_arg, i + 1, n);
    }
  }
  uint64_t t1 = cm__now_ns();

  cm_storage_stats(st, &s1);
  for (size_t j = 0; j < np; j++)
    if (cm_manager_pool_report(m, j, &reports[j]) != CM_OK) memset(&reports[j], 0, sizeof reports[j]);
  if (cm_manager_pool_report(m, CM_PERSISTENT_POOL, &reports[np]) != CM_OK)
    memset(&reports[np], 0, sizeof reports[np]);
  for (uint32_t s = 0; s < trace->slots; s++)
    if (h[s].d) cm_handle_release(h[s]);
  free(h);
  if (o.progress) o.progress(o.progress_arg, n, n);

  out->events = n_done;
  out->allocs = allocs;
  out->frees = frees;
  out->failed_allocs = failed;
  out->peak_live_bytes = trace->peak_live_bytes;
  out->peak_reserved_bytes = s1.bytes_held_peak;
  out->manager_reserved_peak = cm_manager_reserved_peak(m);
  out->reserved_at_end = s1.bytes_held;
  out->device_maps = s1.maps - s0.maps;
  out->device_unmaps = s1.unmaps - s0.unmaps;
  out->device_allocs = s1.allocs - s0.allocs + out->device_maps;
  out->device_frees = s1.deallocs - s0.deallocs + out->device_unmaps;
  out->device_time_ns = s1.time_ns - s0.time_ns;
  out->storage = stats_delta(&s0, &s1);
  const cm_storage_stats_t *d = &out->storage;
  out->driver_calls = d->allocs + d->deallocs + d->creates + d->map_calls + d->set_access +
                      d->unmap_calls + d->releases + d->reserves + d->address_frees;
  out->elapsed_ns = t1 - t0;
  out->ns_per_op = (allocs + frees) ? (double)(t1 - t0) / (double)(allocs + frees) : 0.0;
  out->pool_count = np;
  out->pool_reports = reports;
  out->pool_reserved_at_peak = at_peak;
  out->timeline = tl;
  out->timeline_count = ntl;
  return CM_OK;
}

/* Counters of b minus those of a; levels and peaks as in b. */
static cm_storage_stats_t stats_delta(const cm_storage_stats_t *a, const cm_storage_stats_t *b) {
  cm_storage_stats_t d = *b;
#define D(f) d.f = b->f - a->f
  D(allocs); D(deallocs); D(failed_allocs); D(maps); D(unmaps); D(flushes); D(gets); D(time_ns);
  D(creates); D(map_calls); D(unmap_calls); D(releases); D(set_access); D(reserves);
  D(address_frees); D(time_alloc_ns); D(time_free_ns); D(time_map_ns); D(time_unmap_ns);
  D(time_reserve_ns); D(errors); D(violations);
#undef D
  return d;
}

void cm_replay_result_free(cm_replay_result_t *r) {
  if (!r) return;
  free(r->pool_reports);
  free(r->pool_reserved_at_peak);
  free(r->timeline);
  memset(r, 0, sizeof *r);
}
