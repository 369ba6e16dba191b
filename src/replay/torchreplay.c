/*
 * torchreplay.c - traces through the model of PyTorch's caching allocator
 * (torchalloc.c): cm_torch_replay fills the cm_replay_result_t that
 * cm_replay_run fills for a manager, so the reports of `cubemem replay` serve
 * both; cm_torch_fit is cm_replay_fit's search with the model in place of a
 * manager.
 *
 * The replay keeps one block per trace slot. Reserved bytes and driver calls
 * are the storage's counters (a fresh storage per replay, so they are the
 * replay's); the timeline, when asked, samples them after every event in runs
 * of ceil(count / points) events, keeping each run's maxima.
 *
 * Exports cm_torch_replay and cm_torch_fit (cubemem/torchalloc.h).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "cubemem/torchalloc.h"
#include "replay/fitsearch.h"

/* The result's storage figures from the storage's counters (a fresh storage:
 * the counters are the replay's), as cm_replay_run reports them. */
static void fill_storage(cm_replay_result_t *out, const cm_storage_stats_t *s) {
  out->peak_reserved_bytes = s->bytes_held_peak;
  out->manager_reserved_peak = s->bytes_held_peak;
  out->reserved_at_end = s->bytes_held;
  out->device_maps = s->maps;
  out->device_unmaps = s->unmaps;
  out->device_allocs = s->allocs + s->maps;
  out->device_frees = s->deallocs + s->unmaps;
  out->device_time_ns = s->time_ns;
  out->storage = *s;
  out->driver_calls = cm_storage_stats_driver_calls(s);
}

/* Per-stream figures (opts->per_stream): the streams of the trace, each
 * with its model figures; at_peak[k]: stream k's reserved bytes when the
 * model's total last reached a new peak. */
typedef struct per_stream {
  size_t n;
  cm_replay_stream_result_t *sr;
  uint64_t *at_peak;
  uint64_t best;
} per_stream;

static int per_stream_init(per_stream *ps, const cm_trace_t *t, bool on) {
  memset(ps, 0, sizeof *ps);
  if (!on) return CM_OK;
  ps->n = t->stream_count ? t->stream_count : 1;
  ps->sr = calloc(ps->n, sizeof *ps->sr);
  ps->at_peak = calloc(ps->n, sizeof *ps->at_peak);
  if (!ps->sr || !ps->at_peak) {
    free(ps->sr);
    free(ps->at_peak);
    return CM_ENOMEM;
  }
  for (size_t k = 0; k < ps->n && k < t->stream_count; k++) {
    ps->sr[k].id = t->streams[k].id;
    ps->sr[k].peak_live_bytes = t->streams[k].peak_live_bytes;
  }
  return CM_OK;
}

/* The stream event i runs on: its trace stream's id per stream, else 0. */
static uint64_t event_stream(const per_stream *ps, const cm_trace_t *t, size_t i) {
  if (!ps->sr) return 0;
  size_t k = t->event_streams[i];
  return ps->sr[k < ps->n ? k : 0].id;
}

/* After an event: the streams' reserved bytes at a new peak of the total. */
static void per_stream_step(per_stream *ps, const cm_torch_t *m) {
  if (!ps->sr) return;
  cm_torch_stats_t ts;
  cm_torch_stats(m, &ts);
  if (ts.reserved <= ps->best) return;
  ps->best = ts.reserved;
  for (size_t k = 0; k < ps->n; k++) cm_torch_stream_reserved(m, ps->sr[k].id, &ps->at_peak[k], NULL);
}

/* Move the per-stream figures into out (after the last event). */
static void per_stream_finish(per_stream *ps, const cm_torch_t *m, cm_replay_result_t *out) {
  if (!ps->sr) return;
  for (size_t k = 0; k < ps->n; k++) {
    cm_replay_stream_result_t *r = &ps->sr[k];
    cm_torch_stream_reserved(m, r->id, &r->reserved_at_end, &r->peak_reserved_bytes);
    r->reserved_at_device_peak = ps->at_peak[k];
  }
  free(ps->at_peak);
  out->streams = ps->sr;
  out->stream_count = ps->n;
  ps->sr = NULL;
  ps->at_peak = NULL;
}

/* The starting state's segments into the model. */
static int seed_segments(cm_torch_t *m, const cm_snapshot_state_t *state, cm_diag_t *diag) {
  if (state->expandable)
    return cm__diag_set(diag, CM_ENOTSUP,
                        "the snapshot has expandable segments: a starting state of expandable "
                        "segments is not modelled (replay it from an empty device)");
  for (size_t k = 0; k < state->segment_count; k++) {
    const cm_snapshot_segment_t *g = &state->segments[k];
    int rc = cm_torch_seed_segment(m, g->addr, g->size, g->small, g->stream, diag);
    if (rc != CM_OK) return rc;
  }
  return CM_OK;
}

/* The k-th ALLOC of the trace when it is a block of the starting state:
 * placed where PyTorch had it, or (no free space there: *unplaced counted)
 * allocated as any other. */
static int seeded_malloc(cm_torch_t *m, const cm_torch_options_t *to,
                         const cm_snapshot_block_t *b, uint64_t stream, cm_torch_block_t **out,
                         uint64_t *unplaced, cm_diag_t *diag) {
  if (b->requested) {
    uint64_t size = b->size_known ? b->size : cm_torch_round_size(to, b->requested);
    int rc = cm_torch_seed_block(m, b->addr, size, b->requested, b->size_known, out, NULL);
    if (rc != CM_ENOTFOUND) return rc;
    (*unplaced)++;
  }
  return cm_torch_malloc(m, b->requested, stream, out, diag);
}

int cm_torch_replay(const cm_trace_t *trace, cm_storage_t *storage,
                    const cm_torch_options_t *topts, const cm_replay_options_t *opts,
                    cm_replay_result_t *out, cm_torch_stats_t *tstats, cm_diag_t *diag) {
  return cm_torch_replay_from(trace, storage, topts, NULL, opts, out, tstats, NULL, diag);
}

int cm_torch_replay_from(const cm_trace_t *trace, cm_storage_t *storage,
                         const cm_torch_options_t *topts, const cm_snapshot_state_t *state,
                         const cm_replay_options_t *opts, cm_replay_result_t *out,
                         cm_torch_stats_t *tstats, uint64_t *unplaced, cm_diag_t *diag) {
  if (out) memset(out, 0, sizeof *out);
  uint64_t nplaced_not = 0;
  if (unplaced) *unplaced = 0;
  if (!trace || !storage || !out) {
    cm_storage_destroy(storage);
    return cm__diag_set(diag, CM_EINVAL, "cm_torch_replay: NULL argument");
  }
  cm_replay_options_t o;
  memset(&o, 0, sizeof o);
  if (opts) o = *opts;
  if (o.observe) {
    cm_storage_destroy(storage);
    return cm__diag_set(diag, CM_ENOTSUP,
                        "the PyTorch allocator model has no manager to observe (the HTML "
                        "report's recording is for cubemem's layouts)");
  }
  cm_torch_t *m = NULL;
  int rc = cm_torch_create(storage, topts, &m, diag);
  if (rc != CM_OK) return rc;
  cm_torch_options_t to;
  cm_torch_options_init(&to);
  if (topts) to = *topts;
  if (state && (rc = seed_segments(m, state, diag)) != CM_OK) {
    cm_torch_destroy(m);
    return rc;
  }

  per_stream ps;
  if (per_stream_init(&ps, trace, o.per_stream) != CM_OK) {
    cm_torch_destroy(m);
    return cm__diag_set(diag, CM_ENOMEM, "out of memory preparing the replay");
  }
  cm_torch_block_t **blk = calloc(trace->slots ? trace->slots : 1, sizeof *blk);
  cm_pool_report_t *reports = calloc(1, sizeof *reports); /* the (unused) persistent pool */
  size_t bucket = 1, ntl = 0;
  cm_replay_sample_t *tl = NULL;
  if (o.timeline_points) {
    bucket = trace->count / o.timeline_points + (trace->count % o.timeline_points != 0);
    if (!bucket) bucket = 1;
    tl = calloc(o.timeline_points + 2, sizeof *tl);
  }
  if (!blk || !reports || (o.timeline_points && !tl)) {
    free(blk);
    free(reports);
    free(tl);
    free(ps.sr);
    free(ps.at_peak);
    cm_torch_destroy(m);
    return cm__diag_set(diag, CM_ENOMEM, "out of memory preparing the replay");
  }
  if (tl) tl[ntl++] = (cm_replay_sample_t){0, 0, 0};

  const size_t n = trace->count;
  size_t n_done = n;
  uint64_t allocs = 0, frees = 0, failed = 0, live = 0, run_live = 0, run_res = 0;
  uint64_t every = o.progress ? o.progress_every : 0, countdown = every;
  cm_diag_t fd;
  cm_torch_stats_t ts;
  int hard = CM_OK; /* a device failure other than out-of-memory stops the replay */
  uint64_t t0 = cm__now_ns();
  for (size_t i = 0; i < n; i++) {
    const cm_trace_event_t *e = &trace->events[i];
    cm_replay_stream_result_t *sr = ps.sr ? &ps.sr[trace->event_streams[i] < ps.n ? trace->event_streams[i] : 0] : NULL;
    if (e->action == CM_TRACE_ALLOC) {
      allocs++;
      if (sr) sr->allocs++;
      live += e->size;
      cm_diag_clear(&fd);
      uint64_t stream = event_stream(&ps, trace, i);
      if (state && allocs <= state->block_count)
        rc = seeded_malloc(m, &to, &state->blocks[allocs - 1], stream, &blk[e->slot],
                           &nplaced_not, &fd);
      else
        rc = cm_torch_malloc(m, e->size, stream, &blk[e->slot], &fd);
      if (rc != CM_OK) {
        blk[e->slot] = NULL;
        if (sr) sr->failed_allocs++;
        if (failed++ == 0) {
          out->first_failure = rc;
          out->first_failure_size = e->size;
          out->first_failure_event = i;
          out->first_failure_time_us = e->time_us;
          out->first_failure_live_bytes = live - e->size;
          cm_torch_stats(m, &ts);
          out->first_failure_reserved_bytes = ts.reserved;
          snprintf(out->first_failure_message, sizeof out->first_failure_message, "%.511s",
                   fd.message[0] ? fd.message : cm_strerror(rc));
        }
        if (rc != CM_EOOM) hard = rc;
        if (o.stop_on_failure || hard) {
          n_done = i + 1;
          break;
        }
      }
    } else {
      live -= e->size;
      if (blk[e->slot]) {
        frees++;
        cm_torch_free(m, blk[e->slot]);
        blk[e->slot] = NULL;
      }
    }
    per_stream_step(&ps, m);
    if (tl) {
      cm_torch_stats(m, &ts);
      if (live > run_live) run_live = live;
      if (ts.reserved > run_res) run_res = ts.reserved;
      if ((i + 1) % bucket == 0 || i + 1 == n) {
        tl[ntl++] = (cm_replay_sample_t){i + 1, run_live, run_res};
        run_live = live;
        run_res = ts.reserved;
      }
    }
    if (every && --countdown == 0) {
      countdown = every;
      o.progress(o.progress_arg, i + 1, n);
    }
  }
  uint64_t t1 = cm__now_ns();
  if (o.progress) o.progress(o.progress_arg, n, n);

  cm_storage_stats_t s;
  cm_storage_stats(cm_torch_storage(m), &s);
  if (tstats) cm_torch_stats(m, tstats);
  if (unplaced) *unplaced = nplaced_not;
  per_stream_finish(&ps, m, out);
  free(blk); /* the blocks go with the model */
  cm_torch_destroy(m);

  out->events = n_done;
  out->allocs = allocs;
  out->frees = frees;
  out->failed_allocs = failed;
  out->elapsed_ns = t1 - t0;
  out->ns_per_op = allocs + frees ? (double)(t1 - t0) / (double)(allocs + frees) : 0.0;
  out->peak_live_bytes = trace->peak_live_bytes;
  fill_storage(out, &s);
  out->pool_count = 0;
  out->pool_reports = reports;
  out->timeline = tl;
  out->timeline_count = ntl;
  if (hard) {
    cm_replay_result_free(out);
    return cm__diag_set(diag, hard, "the device failed: %s", cm_strerror(hard));
  }
  return CM_OK;
}

/* What a probe of cm_torch_fit replays. */
typedef struct torch_probe {
  const cm_trace_t *t;
  const cm_torch_options_t *to;
  uint64_t granularity;
  bool per_stream;
} torch_probe;

/* One replay of the model on a simulated device of `capacity` bytes
 * (0 = unlimited), PyTorch seeing that device (cm__fit_probe_fn). */
static int probe(void *arg, uint64_t capacity, bool *fits, uint64_t *peak,
                 cm_replay_result_t *keep, cm_diag_t *diag) {
  const torch_probe *tp = arg;
  cm_storage_t *st = NULL;
  int rc = cm_storage_sim_create(capacity, true, tp->granularity, &st);
  if (rc != CM_OK)
    return cm__diag_set(diag, rc, "cannot create the simulated device: %s", cm_strerror(rc));
  cm_replay_options_t ro;
  memset(&ro, 0, sizeof ro);
  ro.stop_on_failure = keep == NULL;
  ro.per_stream = tp->per_stream;
  cm_torch_options_t po = *tp->to;
  if (capacity) po.device_memory = capacity; /* the device PyTorch sees is the probed one */
  cm_replay_result_t r;
  rc = cm_torch_replay(tp->t, st, &po, &ro, &r, NULL, diag);
  if (rc != CM_OK) return rc;
  *fits = r.failed_allocs == 0 && r.storage.violations == 0;
  *peak = r.peak_reserved_bytes;
  if (keep) *keep = r;
  else cm_replay_result_free(&r);
  return CM_OK;
}

int cm_torch_fit(const cm_trace_t *trace, const cm_torch_options_t *topts,
                 const cm_fit_options_t *opts, cm_fit_result_t *out, cm_diag_t *diag) {
  if (!trace || !out) return cm__diag_set(diag, CM_EINVAL, "cm_torch_fit: NULL argument");
  cm_fit_options_t o;
  cm__fit_options_resolve(opts, &o);
  o.configure = NULL; /* the model takes no manager configuration */
  cm_torch_options_t to;
  cm_torch_options_init(&to);
  if (topts) to = *topts;
  if (!to.device_memory) to.device_memory = 80ull << 30;
  torch_probe tp = {trace, &to, o.granularity, o.per_stream && trace->stream_count > 1};
  return cm__fit_search(trace, &o, probe, &tp, out, diag);
}
