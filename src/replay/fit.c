/*
 * fit.c - cm_replay_fit: the smallest device memory on which a trace replays
 * with no failed reservation ("which GPU does this job need").
 *
 * Each probe replays the trace on a fresh simulated device of the probed
 * capacity that refuses to go over it (and enforces the driver's virtual-
 * memory rules), through a fresh manager whose configuration the caller may
 * resolve for that capacity (opts->configure: then a probe is exactly the
 * replay a tool runs on that device); a probe stops at its first failed
 * reservation. The search: one reference replay (on an unlimited device, or
 * on opts->unconstrained_capacity) gives the upper end (hi: its peak
 * rounded up to the grid, replayed again when the configuration depends on
 * the capacity, else the reference device itself) and the trace's peak live
 * bytes the lower end (nothing fits below it);
 * bisection on the grid finds the smallest passing capacity c; then
 * `confirmations` capacities spread evenly over (c, hi) are replayed. Fitting
 * need not be monotone (what is cached, trimmed or grown depends on when the
 * device refuses), so if one of them fails the search goes on above the
 * highest failing capacity, until every confirmation passes.
 * The search takes its probe as a callback (cm__fit_search, fitsearch.h), so
 * a model of another allocator (torchreplay.c) is searched the same way.
 * Exports: cm_fit_options_init, cm_replay_fit.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/util.h"
#include "cubemem/replay.h"
#include "replay/fitsearch.h"

void cm_fit_options_init(cm_fit_options_t *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->grid = 2ull << 20;
  o->confirmations = 7;
}

/* What every probe shares: the trace, the options, and how to replay. */
typedef struct search {
  const cm_trace_t *t;
  const cm_fit_options_t *o;
  cm__fit_probe_fn fn;
  void *arg;
} search;

static int probe(const search *sr, uint64_t capacity, bool *fits, uint64_t *peak,
                 cm_replay_result_t *keep, cm_diag_t *diag) {
  return sr->fn(sr->arg, capacity, fits, peak, keep, diag);
}

/* What a probe of cm_replay_fit replays. */
typedef struct manager_probe {
  const cm_trace_t *t;
  const cm_manager_config_t *cfg;
  const cm_fit_options_t *o;
} manager_probe;

/* A probe of manager_probe_fn with one manager per stream on device st
 * (destroyed here). */
static int streams_probe(const cm_trace_t *t, cm_storage_t *st, const cm_manager_config_t *cfg,
                         bool *fits, uint64_t *peak, cm_replay_result_t *keep, cm_diag_t *diag) {
  cm_replay_options_t ro;
  memset(&ro, 0, sizeof ro);
  ro.stop_on_failure = keep == NULL;
  cm_replay_result_t r;
  int rc = cm_replay_run_streams(t, st, cfg, &ro, &r, diag);
  cm_storage_destroy(st);
  if (rc != CM_OK) return rc;
  *fits = r.failed_allocs == 0 && r.storage.violations == 0;
  *peak = r.peak_reserved_bytes;
  if (keep) *keep = r;
  else cm_replay_result_free(&r);
  return CM_OK;
}

/* One replay on a device of `capacity` bytes (0 = unlimited), with the
 * configuration resolved for it when o->configure is set. *fits says
 * whether every reservation succeeded (false, with no error, when the layout
 * does not exist on that device); *peak gets the peak reserved; keep (may be
 * NULL) gets the whole result, then the replay does not stop at a failure. */
static int manager_probe_fn(void *arg, uint64_t capacity, bool *fits, uint64_t *peak,
                            cm_replay_result_t *keep, cm_diag_t *diag) {
  const manager_probe *sr = arg;
  cm_manager_config_t cfg = *sr->cfg;
  *fits = false;
  *peak = 0;
  if (sr->o->configure) {
    cm_diag_t cd;
    cm_diag_clear(&cd);
    if (sr->o->configure(sr->o->configure_arg, capacity, &cfg, &cd) != CM_OK) {
      if (keep) { /* reported as one failed reservation with the reason */
        memset(keep, 0, sizeof *keep);
        keep->failed_allocs = 1;
        keep->first_failure = cd.code ? cd.code : CM_EINVAL;
        snprintf(keep->first_failure_message, sizeof keep->first_failure_message, "%.500s",
                 cd.message);
      }
      return CM_OK;
    }
  }
  cm_storage_t *st = NULL;
  int rc = cm_storage_sim_create(capacity, true, sr->o->granularity, &st);
  if (rc != CM_OK) return cm__diag_set(diag, rc, "cannot create the simulated device: %s", cm_strerror(rc));
  if (sr->o->per_stream && sr->t->stream_count > 1)
    return streams_probe(sr->t, st, &cfg, fits, peak, keep, diag);
  cm_manager_t *m = NULL;
  rc = cm_manager_create(st, &cfg, &m, diag);
  if (rc != CM_OK) {
    cm_storage_destroy(st);
    return rc;
  }
  cm_replay_options_t ro;
  memset(&ro, 0, sizeof ro);
  ro.stop_on_failure = keep == NULL;
  cm_replay_result_t r;
  rc = cm_replay_run(sr->t, m, &ro, &r, diag);
  cm_manager_destroy(m);
  if (rc != CM_OK) return rc;
  *fits = r.failed_allocs == 0 && r.storage.violations == 0;
  *peak = r.peak_reserved_bytes;
  if (keep) *keep = r;
  else cm_replay_result_free(&r);
  return CM_OK;
}

static uint64_t down(uint64_t x, uint64_t g) { return x / g * g; }
static uint64_t up(uint64_t x, uint64_t g) { return (x / g + (x % g != 0)) * g; }

/* The unconstrained run into out (unconstrained_*), and the smallest
 * capacity known to fit into *top. */
static int reference_run(const search *sr, cm_fit_result_t *out, uint64_t *top, cm_diag_t *diag) {
  const cm_fit_options_t *o = sr->o;
  uint64_t cap = o->unconstrained_capacity;
  cm_replay_result_t free_run;
  bool fits = false;
  uint64_t peak = 0;
  int rc = probe(sr, cap, &fits, &peak, &free_run, diag);
  if (rc != CM_OK) return rc;
  out->replays = 1;
  out->unconstrained_capacity = cap;
  out->unconstrained_failed = free_run.failed_allocs;
  out->unconstrained_storage = free_run.storage;
  out->unconstrained_peak = peak;
  if (!fits && cap) { /* a bounded device that is too small: go above it */
    for (unsigned k = 1; k <= 10 && !fits && cap <= UINT64_MAX / 4; k++) {
      cap *= 2;
      uint64_t p2 = 0;
      rc = probe(sr, cap, &fits, &p2, NULL, diag);
      if (rc != CM_OK) break;
      out->replays++;
    }
    if (rc == CM_OK && fits) {
      cm_replay_result_free(&free_run);
      *top = cap;
      return CM_OK;
    }
  }
  if (!fits) {
    if (rc == CM_OK)
      rc = cm__diag_set(diag, free_run.first_failure ? free_run.first_failure : CM_EOOM,
                        "the trace does not replay even on %s device: %" PRIu64
                        " reservations failed, the first with %s (%s)",
                        o->unconstrained_capacity ? "a 1024 times larger" : "an unlimited",
                        free_run.failed_allocs, cm_err_name(free_run.first_failure),
                        free_run.first_failure_message);
    cm_replay_result_free(&free_run);
    return rc;
  }
  cm_replay_result_free(&free_run);
  *top = up(peak ? peak : o->grid, o->grid);
  if (cap && *top > cap) *top = cap;
  if (o->configure && *top != cap) {
    /* with per-capacity layouts the peak's capacity must be replayed too */
    rc = probe(sr, *top, &fits, &peak, NULL, diag);
    if (rc != CM_OK) return rc;
    out->replays++;
    if (!fits) *top = cap ? cap : *top;
    if (!fits && !cap)
      return cm__diag_set(diag, CM_EOOM, "the trace does not fit the unconstrained peak's device");
  }
  return CM_OK;
}

void cm__fit_options_resolve(const cm_fit_options_t *opts, cm_fit_options_t *o) {
  cm_fit_options_init(o);
  if (opts) {
    *o = *opts;
    if (!o->grid) o->grid = 2ull << 20;
    if (!o->confirmations) o->confirmations = 7;
  }
}

int cm_replay_fit(const cm_trace_t *trace, const cm_manager_config_t *cfg,
                  const cm_fit_options_t *opts, cm_fit_result_t *out, cm_diag_t *diag) {
  if (!trace || !cfg || !out) return cm__diag_set(diag, CM_EINVAL, "cm_replay_fit: NULL argument");
  cm_fit_options_t o;
  cm__fit_options_resolve(opts, &o);
  manager_probe mp = {trace, cfg, &o};
  return cm__fit_search(trace, &o, manager_probe_fn, &mp, out, diag);
}

/* opts->explain_below: the run on one grid step under the fit, kept whole,
 * and its first failure into out->below_*. */
static int explain_below(const search *sr, cm_fit_result_t *out, cm_diag_t *diag) {
  cm_replay_result_t r;
  bool fits = false;
  uint64_t peak = 0, cap = out->fit_bytes - sr->o->grid;
  int rc = probe(sr, cap, &fits, &peak, &r, diag);
  if (rc != CM_OK) return rc;
  out->replays++;
  out->below_capacity = cap;
  out->below_failed = r.failed_allocs;
  out->below_status = r.failed_allocs ? (r.first_failure ? r.first_failure : CM_EOOM) : 0;
  out->below_event = r.first_failure_event;
  out->below_size = r.first_failure_size;
  out->below_live_bytes = r.first_failure_live_bytes;
  out->below_reserved_bytes = r.first_failure_reserved_bytes;
  snprintf(out->below_message, sizeof out->below_message, "%s", r.first_failure_message);
  cm_replay_result_free(&r);
  return CM_OK;
}

int cm__fit_search(const cm_trace_t *trace, const cm_fit_options_t *resolved, cm__fit_probe_fn fn,
                   void *arg, cm_fit_result_t *out, cm_diag_t *diag) {
  const cm_fit_options_t o = *resolved;
  memset(out, 0, sizeof *out);
  out->peak_live_bytes = trace->peak_live_bytes;
  search sr = {trace, &o, fn, arg};

  uint64_t top = 0;
  int rc = reference_run(&sr, out, &top, diag);
  if (rc != CM_OK) return rc;
  bool fits = false;
  uint64_t peak = 0;
  uint64_t lo = down(trace->peak_live_bytes, o.grid); /* below the peak live: must fail */
  uint64_t hi = top;                                  /* fits */
  if (lo >= hi) lo = hi > o.grid ? down(hi - 1, o.grid) : 0;
  for (;;) {
    while (hi - lo > o.grid) { /* invariant: hi fits; lo fails (or is the floor) */
      uint64_t mid = down(lo + (hi - lo) / 2, o.grid);
      if (mid <= lo) mid = lo + o.grid;
      rc = probe(&sr, mid, &fits, &peak, NULL, diag);
      if (rc != CM_OK) return rc;
      out->replays++;
      if (fits) hi = mid;
      else lo = mid;
      if (o.progress) o.progress(o.progress_arg, out->replays, lo, hi);
    }
    /* confirm above */
    uint64_t bad = 0;
    for (unsigned k = 1; k <= o.confirmations && hi < top; k++) {
      uint64_t c = down(hi + (top - hi) * k / (o.confirmations + 1), o.grid);
      if (c <= hi || c <= bad) continue;
      rc = probe(&sr, c, &fits, &peak, NULL, diag);
      if (rc != CM_OK) return rc;
      out->replays++;
      if (o.progress) o.progress(o.progress_arg, out->replays, lo, hi);
      if (!fits) {
        if (!out->nonmonotone) out->first_nonmonotone = c;
        out->nonmonotone++;
        bad = c;
      }
    }
    if (!bad) break;
    lo = bad; /* search again above the highest failing capacity */
    hi = top;
  }
  out->fit_bytes = hi;
  out->ratio = trace->peak_live_bytes ? (double)hi / (double)trace->peak_live_bytes : 0.0;
  if (o.explain_below && hi > o.grid) return explain_below(&sr, out, diag);
  return CM_OK;
}
