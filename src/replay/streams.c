/*
 * streams.c - cm_replay_run_streams: a trace replayed with one manager per
 * stream on one device, as cubemem's runtime layer (device.c) and PyTorch
 * give every stream its own pools.
 *
 * Sharing the device. Each stream's manager owns a share of the caller's
 * device storage (cm_storage_share_create, cubemem/storage.h): all streams
 * draw on the same memory (one capacity, one address space), with the
 * device's virtual memory and copies (relocation), while each share keeps
 * that stream's own counters. A share's release frees the share only; the
 * device and what it holds stay the caller's.
 *
 * Algorithm. One handle per trace slot, as cm_replay_run. An ALLOC reserves
 * through the manager of its event's stream (trace->event_streams); a FREE
 * releases its slot's handle, which goes back to the manager that made it,
 * whatever stream the free was recorded on (PyTorch returns a block to the
 * pool of the stream it was allocated on). After every event the device
 * total is the sum of the shares' bytes held; its maximum is the replay's
 * peak reserved, and each stream's bytes at that moment are kept.
 *
 * Invariants. Every handle is released before returning; the managers and
 * shares are destroyed before returning; the caller's device is left with
 * what the managers gave back (nothing, once they are destroyed).
 *
 * Exports cm_replay_run_streams.
 */
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "cubemem/replay.h"

/* ---- the managers ------------------------------------------------------------ */

/* One manager per stream of the trace, each on its own share of `dev`. */
typedef struct fleet {
  size_t n;
  cm_manager_t **m;
  cm_storage_t **st;        /* m[k]'s share (owned by m[k]) */
  cm_storage_stats_t *s0;   /* each share's counters before the replay */
  uint64_t *held;           /* each share's bytes held after the last event */
  uint64_t *at_peak;        /* each share's bytes held at the device peak */
} fleet;

static void fleet_free(fleet *f) {
  for (size_t k = 0; k < f->n; k++)
    if (f->m && f->m[k]) cm_manager_destroy(f->m[k]);
  free(f->m);
  free(f->st);
  free(f->s0);
  free(f->held);
  free(f->at_peak);
  memset(f, 0, sizeof *f);
}

static int fleet_create(fleet *f, size_t n, cm_storage_t *dev, const cm_manager_config_t *cfg,
                        cm_diag_t *diag) {
  memset(f, 0, sizeof *f);
  f->n = n;
  f->m = calloc(n, sizeof *f->m);
  f->st = calloc(n, sizeof *f->st);
  f->s0 = calloc(n, sizeof *f->s0);
  f->held = calloc(n, sizeof *f->held);
  f->at_peak = calloc(n, sizeof *f->at_peak);
  if (!f->m || !f->st || !f->s0 || !f->held || !f->at_peak) {
    fleet_free(f);
    return cm__diag_set(diag, CM_ENOMEM, "out of memory preparing the replay");
  }
  for (size_t k = 0; k < n; k++) {
    cm_storage_t *st = NULL;
    int rc = cm_storage_share_create(dev, &st, diag);
    if (rc == CM_OK) {
      rc = cm_manager_create(st, cfg, &f->m[k], diag);
      if (rc != CM_OK) cm_storage_destroy(st);
    }
    if (rc != CM_OK) {
      fleet_free(f);
      return rc;
    }
    f->st[k] = st;
    cm_storage_stats(st, &f->s0[k]);
    f->held[k] = f->s0[k].bytes_held;
  }
  return CM_OK;
}

/* ---- the result ------------------------------------------------------------------ */

/* Add pool report b into a (the same pool of another stream's manager). */
static void report_add(cm_pool_report_t *a, const cm_pool_report_t *b) {
  a->usage.number_allocs += b->usage.number_allocs;
  a->usage.bytes_in_use += b->usage.bytes_in_use;
  a->usage.bytes_padding += b->usage.bytes_padding;
  a->usage.bytes_reserved += b->usage.bytes_reserved;
  a->pages += b->pages;
  a->pages_peak += b->pages_peak;
  a->pages_unmapped += b->pages_unmapped;
  if (b->largest_alloc > a->largest_alloc) a->largest_alloc = b->largest_alloc;
  a->bytes_reserved_peak += b->bytes_reserved_peak;
  a->bytes_cached += b->bytes_cached;
  a->outdated_pools += b->outdated_pools;
  a->outdated_pages += b->outdated_pages;
  a->stitched += b->stitched;
  a->stitched_made += b->stitched_made;
}

/* The pool reports of every manager summed by pool (np dynamic pools, then
 * the persistent one) into rep (np + 1 entries, zeroed). */
static void reports_sum(const fleet *f, size_t np, cm_pool_report_t *rep) {
  for (size_t k = 0; k < f->n; k++)
    for (size_t j = 0; j <= np; j++) {
      cm_pool_report_t r;
      if (cm_manager_pool_report(f->m[k], j < np ? j : CM_PERSISTENT_POOL, &r) != CM_OK) continue;
      if (k == 0) {
        rep[j] = r;
        continue;
      }
      report_add(&rep[j], &r);
    }
}

/* Each pool's reserved bytes over every manager, into out (np + 1). */
static void pools_at_peak(const fleet *f, size_t np, uint64_t *out) {
  memset(out, 0, (np + 1) * sizeof *out);
  for (size_t k = 0; k < f->n; k++)
    for (size_t j = 0; j <= np; j++) {
      cm_pool_report_t r;
      if (cm_manager_pool_report(f->m[k], j < np ? j : CM_PERSISTENT_POOL, &r) == CM_OK)
        out[j] += r.usage.bytes_reserved;
    }
}

/* Counters of b minus those of a, added into sum (levels added as they are;
 * peaks left alone). */
static void counters_add(cm_storage_stats_t *sum, const cm_storage_stats_t *a,
                         const cm_storage_stats_t *b) {
  cm_storage_stats_t d = cm_storage_stats_diff(a, b);
#define ADD(f, ...) sum->f += d.f;
  CM_STORAGE_CALLS(ADD)
  CM_STORAGE_COUNTS(ADD)
  CM_STORAGE_LEVELS(ADD)
#undef ADD
#define ADD(f, key) sum->call_ns.f += d.call_ns.f;
  CM_CALL_TIMES(ADD)
#undef ADD
}

/* Add relocation totals b into a (another stream's manager). */
static void relocation_add(cm_relocate_stats_t *a, const cm_relocate_stats_t *b) {
  a->runs += b->runs;
  a->moves += b->moves;
  a->bytes_copied += b->bytes_copied;
  a->abandoned += b->abandoned;
  a->skipped += b->skipped;
  a->bytes_released += b->bytes_released;
}

/* The device-wide storage figures of out from every share's counters, and
 * the relocation totals of every stream's manager. */
static void fill_device(cm_replay_result_t *out, const fleet *f, uint64_t peak) {
  cm_storage_stats_t d;
  memset(&d, 0, sizeof d);
  for (size_t k = 0; k < f->n; k++) {
    cm_storage_stats_t s1;
    cm_storage_stats(f->st[k], &s1);
    counters_add(&d, &f->s0[k], &s1);
    out->streams[k].peak_reserved_bytes = s1.bytes_held_peak;
    out->streams[k].reserved_at_end = s1.bytes_held;
    out->streams[k].reserved_at_device_peak = f->at_peak[k];
  }
  d.bytes_held_peak = peak;
  out->storage = d;
  for (size_t k = 0; k < f->n; k++) {
    cm_relocate_stats_t r;
    cm_manager_relocate_totals(f->m[k], &r);
    relocation_add(&out->relocation, &r);
  }
  out->peak_reserved_bytes = peak;
  out->manager_reserved_peak = peak;
  out->reserved_at_end = d.bytes_held;
  out->device_maps = d.maps;
  out->device_unmaps = d.unmaps;
  out->device_allocs = d.allocs + d.maps;
  out->device_frees = d.deallocs + d.unmaps;
  out->device_time_ns = d.time_ns;
  out->driver_calls = cm_storage_stats_driver_calls(&d);
}

/* ---- the replay ---------------------------------------------------------------------- */

/* What the event loop keeps besides the result. */
typedef struct loop {
  cm_handle_t *h;
  uint64_t total, peak; /* device bytes held now, at most */
  uint64_t live;        /* requested bytes the replay holds */
  size_t np;            /* dynamic pools of every manager */
  cm_replay_sample_t *tl;
  size_t ntl, bucket;
  uint64_t run_live, run_res;
} loop;

/* After event i (of n) on stream k: the device total, its peak and the
 * timeline. */
static void account(loop *l, fleet *f, cm_replay_result_t *out, size_t k, size_t i, size_t n) {
  uint64_t held = cm_storage_bytes_held(f->st[k]);
  l->total = l->total - f->held[k] + held;
  f->held[k] = held;
  if (l->total > l->peak) {
    l->peak = l->total;
    memcpy(f->at_peak, f->held, f->n * sizeof *f->held);
    if (out->pool_reserved_at_peak) pools_at_peak(f, l->np, out->pool_reserved_at_peak);
  }
  if (!l->tl) return;
  if (l->live > l->run_live) l->run_live = l->live;
  if (l->total > l->run_res) l->run_res = l->total;
  if ((i + 1) % l->bucket == 0 || i + 1 == n) {
    l->tl[l->ntl++] = (cm_replay_sample_t){i + 1, l->run_live, l->run_res};
    l->run_live = l->live;
    l->run_res = l->total;
  }
}

/* The first failed reserve, at event i (e). */
static void first_failure(cm_replay_result_t *out, const loop *l, int rc, const cm_diag_t *fd,
                          const cm_trace_event_t *e, size_t i) {
  out->first_failure = rc;
  out->first_failure_size = e->size;
  snprintf(out->first_failure_message, sizeof out->first_failure_message, "%.511s",
           fd->message[0] ? fd->message : cm_strerror(rc));
  out->first_failure_event = i;
  out->first_failure_time_us = e->time_us;
  out->first_failure_live_bytes = l->live;
  out->first_failure_reserved_bytes = l->total;
}

/* Event i (e) on stream k: reserve or release. False when the replay stops
 * (a failure with stop_on_failure). */
static bool step(loop *l, fleet *f, const cm_replay_options_t *o, cm_replay_result_t *out,
                 const cm_trace_event_t *e, size_t k, size_t i) {
  cm_replay_stream_result_t *sr = &out->streams[k];
  if (e->action == CM_TRACE_ALLOC) {
    out->allocs++;
    sr->allocs++;
    cm_diag_t fd;
    cm_diag_clear(&fd);
    int rc = cm_manager_reserve(f->m[k], e->size, &l->h[e->slot], out->failed_allocs ? NULL : &fd);
    if (rc != CM_OK) {
      l->h[e->slot].d = NULL;
      sr->failed_allocs++;
      if (out->failed_allocs++ == 0) first_failure(out, l, rc, &fd, e, i);
      return !o->stop_on_failure;
    }
    l->live += e->size;
  } else if (l->h[e->slot].d) {
    out->frees++;
    l->live -= e->size;
    cm_handle_release(l->h[e->slot]);
    l->h[e->slot].d = NULL;
  }
  return true;
}

static void observe(const cm_replay_options_t *o, const loop *l, cm_manager_t *m,
                    const cm_trace_event_t *e, size_t i, uint64_t *obs_live) {
  *obs_live = e->action == CM_TRACE_ALLOC ? *obs_live + e->size : *obs_live - e->size;
  cm_replay_step_t st = {.index = i, .event = e, .manager = m, .live_bytes = *obs_live};
  if (e->action == CM_TRACE_ALLOC) {
    st.handle = l->h[e->slot];
    st.failed = l->h[e->slot].d == NULL;
  }
  o->observe(o->observe_arg, &st);
}

/* Allocate what the result and the loop hold. CM_ENOMEM: nothing kept. */
static int prepare(const cm_trace_t *t, size_t np, const cm_replay_options_t *o, loop *l,
                   cm_replay_result_t *out) {
  size_t ns = t->stream_count ? t->stream_count : 1;
  l->h = calloc(t->slots ? t->slots : 1, sizeof *l->h);
  out->streams = calloc(ns, sizeof *out->streams);
  out->pool_reports = calloc(np + 1, sizeof *out->pool_reports);
  l->bucket = 1;
  if (o->timeline_points) {
    l->bucket = t->count / o->timeline_points + (t->count % o->timeline_points != 0);
    if (!l->bucket) l->bucket = 1;
    l->tl = calloc(o->timeline_points + 2, sizeof *l->tl);
    out->pool_reserved_at_peak = calloc(np + 1, sizeof *out->pool_reserved_at_peak);
  }
  if (l->h && out->streams && out->pool_reports &&
      (!o->timeline_points || (l->tl && out->pool_reserved_at_peak)))
    return CM_OK;
  free(l->h);
  free(l->tl);
  cm_replay_result_free(out);
  return CM_ENOMEM;
}

static void stream_figures(const cm_trace_t *t, cm_replay_result_t *out, size_t ns) {
  out->stream_count = ns;
  for (size_t k = 0; k < ns && k < t->stream_count; k++) {
    out->streams[k].id = t->streams[k].id;
    out->streams[k].peak_live_bytes = t->streams[k].peak_live_bytes;
  }
}

/* The event loop over every stream's manager. */
static void run_events(const cm_trace_t *t, fleet *f, const cm_replay_options_t *o, loop *l,
                       cm_replay_result_t *out) {
  const size_t n = t->count;
  uint64_t every = o->progress ? o->progress_every : 0, countdown = every, obs_live = 0;
  out->events = n;
  for (size_t i = 0; i < n; i++) {
    const cm_trace_event_t *e = &t->events[i];
    size_t k = t->event_streams[i] < f->n ? t->event_streams[i] : 0;
    bool go = step(l, f, o, out, e, k, i);
    if (o->observe) observe(o, l, f->m[k], e, i, &obs_live);
    account(l, f, out, k, i, n);
    if (!go) {
      out->events = i + 1;
      break;
    }
    if (every && --countdown == 0) {
      countdown = every;
      o->progress(o->progress_arg, i + 1, n);
    }
  }
}

int cm_replay_run_streams(const cm_trace_t *trace, cm_storage_t *device,
                          const cm_manager_config_t *cfg, const cm_replay_options_t *opts,
                          cm_replay_result_t *out, cm_diag_t *diag) {
  if (!trace || !device || !cfg || !out)
    return cm__diag_set(diag, CM_EINVAL, "cm_replay_run_streams: NULL argument");
  memset(out, 0, sizeof *out);
  cm_replay_options_t o;
  memset(&o, 0, sizeof o);
  if (opts) o = *opts;
  size_t ns = trace->stream_count ? trace->stream_count : 1;
  fleet f;
  int rc = fleet_create(&f, ns, device, cfg, diag);
  if (rc != CM_OK) return rc;
  loop l;
  memset(&l, 0, sizeof l);
  l.np = cm_manager_pool_count(f.m[0]);
  for (size_t k = 0; k < ns; k++) l.total += f.held[k];
  l.peak = l.total;
  if (prepare(trace, l.np, &o, &l, out) != CM_OK) {
    fleet_free(&f);
    return cm__diag_set(diag, CM_ENOMEM, "out of memory preparing the replay");
  }
  stream_figures(trace, out, ns);
  if (l.tl) l.tl[l.ntl++] = (cm_replay_sample_t){0, 0, l.total};
  uint64_t t0 = cm__now_ns();
  run_events(trace, &f, &o, &l, out);
  uint64_t t1 = cm__now_ns();
  reports_sum(&f, l.np, out->pool_reports);
  fill_device(out, &f, l.peak);
  for (uint32_t s = 0; s < trace->slots; s++)
    if (l.h[s].d) cm_handle_release(l.h[s]);
  if (o.progress) o.progress(o.progress_arg, trace->count, trace->count);
  out->elapsed_ns = t1 - t0;
  uint64_t ops = out->allocs + out->frees;
  out->ns_per_op = ops ? (double)(t1 - t0) / (double)ops : 0.0;
  out->peak_live_bytes = trace->peak_live_bytes;
  out->pool_count = l.np;
  out->timeline = l.tl;
  out->timeline_count = l.ntl;
  free(l.h);
  fleet_free(&f);
  return CM_OK;
}
