/*
 * record.c - the replay recorder behind the HTML report.
 *
 * Algorithm. cm_replay_recorder_observe runs after every replayed event. On
 * the first call it learns the manager's pools (dynamic pools + the
 * persistent one, last) and allocates the per-pool arrays. Each call then
 * reads the storage's bytes_held and every pool's report (reserved, in use,
 * padding). Events are grouped into runs of ceil(events / points); a sample
 * keeps the maxima of live and reserved bytes over its run and the per-pool
 * breakdown at the run's reserved maximum, so sampling hides no peak. A new
 * storage maximum snapshots the breakdown as "the peak".
 *
 * Allocations: a successful ALLOC is located through public calls only
 * (cm_manager_find for the pool, cm_manager_get_storage for the storage range
 * and offset); the slice's padding is the growth of its pool's padding bytes
 * over the event. Storage ranges get dense indices through a small
 * open-addressing table keyed by storage id, and each range remembers the
 * highest byte any slice reached in it, so the report can lay a pool's ranges
 * end to end on one address axis. FREE closes the allocation live in the
 * event's slot.
 *
 * Errors. The observer cannot fail: an allocation failure sets status to
 * CM_ENOMEM and the recorder stops recording (the report refuses it).
 *
 * Exports cm_replay_recorder_create/_observe/_status/_free.
 */
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "cubemem/replay.h"
#include "replay/record.h"

int cm_replay_recorder_create(const cm_trace_t *trace, size_t points, cm_replay_recorder_t **out,
                              cm_diag_t *diag) {
  if (!trace || !out) return cm__diag_set(diag, CM_EINVAL, "cm_replay_recorder_create: NULL argument");
  *out = NULL;
  cm_replay_recorder_t *r = calloc(1, sizeof *r);
  if (!r) return cm__diag_set(diag, CM_ENOMEM, "out of memory creating a recorder");
  r->events = trace->count;
  r->duration_us = trace->duration_us;
  r->points = points ? points : 2000;
  r->bucket = trace->count / r->points + (trace->count % r->points != 0);
  if (r->bucket == 0) r->bucket = 1;
  r->slots = trace->slots;
  r->alloc_cap = trace->allocs ? (size_t)trace->allocs : 1;
  r->allocs = calloc(r->alloc_cap, sizeof *r->allocs);
  r->open = calloc(trace->slots ? trace->slots : 1, sizeof *r->open);
  r->samples = calloc(r->points + 2, sizeof *r->samples);
  if (!r->allocs || !r->open || !r->samples) {
    cm_replay_recorder_free(r);
    return cm__diag_set(diag, CM_ENOMEM, "out of memory creating a recorder");
  }
  *out = r;
  return CM_OK;
}

void cm_replay_recorder_free(cm_replay_recorder_t *r) {
  if (!r) return;
  free(r->opts);
  free(r->samples);
  free(r->sample_pools);
  free(r->peak_pools);
  free(r->allocs);
  free(r->open);
  free(r->ranges);
  cm__u64map_free(&r->range_index);
  free(r->run_pools);
  free(r->now_pools);
  free(r->prev_pools);
  free(r);
}

int cm_replay_recorder_status(const cm_replay_recorder_t *r) { return r ? r->status : CM_EINVAL; }

/* First step: size the per-pool arrays from the manager. */
static int start(cm_replay_recorder_t *r, cm_manager_t *m) {
  size_t np = cm_manager_pool_count(m) + 1;
  r->pool_count = np;
  r->opts = calloc(np, sizeof *r->opts);
  r->sample_pools = calloc((r->points + 2) * np, sizeof *r->sample_pools);
  r->peak_pools = calloc(np, sizeof *r->peak_pools);
  r->run_pools = calloc(np, sizeof *r->run_pools);
  r->now_pools = calloc(np, sizeof *r->now_pools);
  r->prev_pools = calloc(np, sizeof *r->prev_pools);
  if (!r->opts || !r->sample_pools || !r->peak_pools || !r->run_pools || !r->now_pools ||
      !r->prev_pools)
    return CM_ENOMEM;
  cm_pool_report_t rep;
  for (size_t j = 0; j + 1 < np; j++)
    if (cm_manager_pool_report(m, j, &rep) == CM_OK) r->opts[j] = rep.options;
  /* The sample at event 0: nothing live yet. */
  r->samples[0] = (cm__rec_sample_t){0, 0, 0, 0};
  r->sample_count = 1;
  return CM_OK;
}

/* The dense index of storage range `id` (created on first sight), or
 * CM__REC_FAILED when out of memory. The index is base's u64 map from
 * id + 1 (never 0) to the range's index + 1 (never NULL). */
static uint32_t range_of(cm_replay_recorder_t *r, uint64_t id, uint32_t pool) {
  if (id == UINT64_MAX) return CM__REC_FAILED; /* ids count up from 1: never reached */
  void *hit = cm__u64map_get(&r->range_index, id + 1);
  if (hit) return (uint32_t)((uintptr_t)hit - 1);
  if (r->range_count == r->range_cap) {
    size_t cap = r->range_cap ? r->range_cap * 2 : 16;
    cm__rec_range_t *nr = realloc(r->ranges, cap * sizeof *nr);
    if (!nr) return CM__REC_FAILED;
    r->ranges = nr;
    r->range_cap = cap;
  }
  uint32_t k = (uint32_t)r->range_count;
  if (cm__u64map_put(&r->range_index, id + 1, (void *)((uintptr_t)k + 1)) != CM_OK)
    return CM__REC_FAILED;
  r->range_count++;
  r->ranges[k] = (cm__rec_range_t){id, 0, pool};
  return k;
}

/* Place a successful allocation: pool, range, offset, padding. */
static void place(cm_replay_recorder_t *r, cm_manager_t *m, cm_handle_t h, cm__rec_alloc_t *a) {
  cm_binding_t b = cm_handle_binding(h);
  cm_location_t loc;
  cm_storage_handle_t sh;
  if (cm_manager_find(m, b, &loc, NULL) != CM_OK ||
      cm_manager_get_storage(m, b, &sh, NULL) != CM_OK) {
    cm_binding_release(b);
    return; /* not locatable: drawn nowhere */
  }
  cm_binding_release(b);
  uint32_t pool = loc.pool == CM_PERSISTENT_POOL ? (uint32_t)(r->pool_count - 1) : loc.pool;
  if (pool >= r->pool_count) return;
  uint32_t k = range_of(r, sh.id, pool);
  if (k == CM__REC_FAILED) {
    r->status = CM_ENOMEM;
    return;
  }
  a->pool = pool;
  a->range = k;
  a->offset = sh.offset;
  const cm__rec_pool_t *now = &r->now_pools[pool], *prev = &r->prev_pools[pool];
  a->padding = now->padding > prev->padding ? now->padding - prev->padding : 0;
  uint64_t end = sh.offset + sh.size + a->padding;
  if (end == sh.offset) end++; /* zero-byte slices still take a place */
  if (end > r->ranges[k].extent) r->ranges[k].extent = end;
}

void cm_replay_recorder_observe(void *arg, const cm_replay_step_t *st) {
  cm_replay_recorder_t *r = arg;
  if (!r || !st || r->status) return;
  if (!r->pool_count && start(r, st->manager) != CM_OK) {
    r->status = CM_ENOMEM;
    return;
  }
  const size_t np = r->pool_count;
  cm_manager_t *m = st->manager;
  const cm_trace_event_t *e = st->event;

  /* where the memory is now */
  cm__rec_pool_t *tmp = r->prev_pools;
  r->prev_pools = r->now_pools;
  r->now_pools = tmp;
  cm_pool_report_t rep;
  for (size_t j = 0; j < np; j++) {
    size_t idx = j + 1 == np ? CM_PERSISTENT_POOL : j;
    if (cm_manager_pool_report(m, idx, &rep) == CM_OK)
      r->now_pools[j] = (cm__rec_pool_t){rep.usage.bytes_reserved, rep.usage.bytes_in_use,
                                         rep.usage.bytes_padding,
                                         rep.has_cached ? rep.bytes_cached : UINT64_MAX};
    else
      memset(&r->now_pools[j], 0, sizeof r->now_pools[j]);
  }
  cm_storage_stats_t ss;
  cm_storage_stats(cm_manager_storage(m), &ss);
  uint64_t held = ss.bytes_held;

  /* the allocation table */
  if (e->action == CM_TRACE_ALLOC) {
    if (r->alloc_count == r->alloc_cap) { /* more ALLOC events than the trace said */
      r->status = CM_ENOMEM;
      return;
    }
    cm__rec_alloc_t *a = &r->allocs[r->alloc_count++];
    *a = (cm__rec_alloc_t){.e0 = st->index, .e1 = CM__REC_NO_EVENT, .t0 = e->time_us,
                           .size = e->size, .range = CM__REC_FAILED};
    if (e->slot < r->slots) r->open[e->slot] = (uint32_t)r->alloc_count;
    if (!st->failed && st->handle.d) place(r, m, st->handle, a);
    if (r->status) return;
  } else if (e->slot < r->slots && r->open[e->slot]) {
    cm__rec_alloc_t *a = &r->allocs[r->open[e->slot] - 1];
    a->e1 = st->index;
    a->t1 = e->time_us;
    r->open[e->slot] = 0;
  }

  /* the peak */
  if (held > r->peak_reserved) {
    r->peak_reserved = held;
    r->peak_event = st->index + 1;
    r->peak_time_us = e->time_us;
    r->peak_live = st->live_bytes;
    memcpy(r->peak_pools, r->now_pools, np * sizeof *r->peak_pools);
  }

  /* the timeline run */
  uint64_t pos = st->index - (st->index / r->bucket) * r->bucket; /* index within the run */
  if (pos == 0 || held > r->run_reserved) {
    if (pos == 0) r->run_live = 0;
    r->run_reserved = held;
    memcpy(r->run_pools, r->now_pools, np * sizeof *r->run_pools);
  }
  if (st->live_bytes > r->run_live) r->run_live = st->live_bytes;
  if (pos + 1 == r->bucket || st->index + 1 == r->events) {
    if (r->sample_count < r->points + 2) {
      size_t s = r->sample_count++;
      r->samples[s] = (cm__rec_sample_t){st->index + 1, e->time_us, r->run_live, r->run_reserved};
      memcpy(&r->sample_pools[s * np], r->run_pools, np * sizeof *r->run_pools);
    }
  }
}
