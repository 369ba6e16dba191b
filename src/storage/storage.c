/*
 * storage.c - the cm_storage_t wrapper around a backend's cm_storage_ops_t.
 *
 * Every call goes through here so the statistics (device allocations, bytes
 * held, peaks, time in the backend) are kept the same way for every backend.
 * Sizes are tracked per call: dealloc and unmap take the size from the caller
 * (the pools know it), so the wrapper needs no per-id table.
 * Exports: cm_storage_* (public), cm__storage_vm_* and cm__storage_has_alias (internal,
 * storage_internal.h).
 */
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "storage/storage_internal.h"

/* The lists of cubemem/storage_counters.h name every field of
 * cm_storage_stats_t, and CM_CALL_TIMES every field of cm_call_times_t. */
#define ONE(...) +1
_Static_assert(sizeof(cm_call_times_t) == (0 CM_CALL_TIMES(ONE)) * sizeof(uint64_t),
               "CM_CALL_TIMES lists every field of cm_call_times_t");
_Static_assert(sizeof(cm_storage_stats_t) ==
                   (0 CM_STORAGE_CALLS(ONE) CM_STORAGE_COUNTS(ONE) CM_STORAGE_LEVELS(ONE)
                        CM_STORAGE_PEAKS(ONE)) * sizeof(uint64_t) + sizeof(cm_call_times_t),
               "the lists of cubemem/storage_counters.h name every field of cm_storage_stats_t");
#undef ONE

int cm_storage_create(const cm_storage_ops_t *ops, void *ctx, cm_storage_t **out) {
  if (!out) return CM_EINVAL;
  *out = NULL;
  if (!ops || !ops->alloc || !ops->dealloc || !ops->get) return CM_EINVAL;
  cm_storage_t *s = calloc(1, sizeof *s);
  if (!s) return CM_ENOMEM;
  s->ops = ops;
  s->ctx = ctx;
  *out = s;
  return CM_OK;
}

void cm_storage_destroy(cm_storage_t *s) {
  if (!s) return;
  if (s->ops->release) s->ops->release(s->ctx);
  free(s);
}

void cm_storage_stats(const cm_storage_t *s, cm_storage_stats_t *out) {
  if (!out) return;
  memset(out, 0, sizeof *out);
  if (!s) return;
  out->allocs = atomic_load(&s->allocs);
  out->deallocs = atomic_load(&s->deallocs);
  out->failed_allocs = atomic_load(&s->failed);
  out->maps = atomic_load(&s->maps);
  out->unmaps = atomic_load(&s->unmaps);
  out->bytes_held = atomic_load(&s->bytes_held);
  out->bytes_held_peak = atomic_load(&s->bytes_held_peak);
  out->vm_reserved = atomic_load(&s->vm_reserved);
  out->flushes = atomic_load(&s->flushes);
  out->gets = atomic_load(&s->gets);
  out->time_ns = atomic_load(&s->time_ns);
  out->creates = atomic_load(&s->creates);
  out->map_calls = atomic_load(&s->map_calls);
  out->unmap_calls = atomic_load(&s->unmap_calls);
  out->releases = atomic_load(&s->releases);
  out->set_access = atomic_load(&s->set_access);
  out->reserves = atomic_load(&s->reserves);
  out->address_frees = atomic_load(&s->address_frees);
  out->time_alloc_ns = atomic_load(&s->time_alloc_ns);
  out->time_free_ns = atomic_load(&s->time_free_ns);
  out->time_map_ns = atomic_load(&s->time_map_ns);
  out->time_unmap_ns = atomic_load(&s->time_unmap_ns);
  out->time_reserve_ns = atomic_load(&s->time_reserve_ns);
  out->errors = atomic_load(&s->errors);
  out->violations = atomic_load(&s->violations);
  out->mem_queries = atomic_load(&s->mem_queries);
  out->copies = atomic_load(&s->copies);
  out->bytes_copied = atomic_load(&s->bytes_copied);
  out->copy_waits = atomic_load(&s->copy_waits);
  out->copy_failures = atomic_load(&s->copy_failures);
  out->time_copy_ns = atomic_load(&s->time_copy_ns);
  if (s->ops->call_times) s->ops->call_times(s->ctx, &out->call_ns);
}

cm_storage_stats_t cm_storage_stats_diff(const cm_storage_stats_t *before,
                                         const cm_storage_stats_t *after) {
  cm_storage_stats_t d;
  memset(&d, 0, sizeof d);
  if (!before || !after) return d;
  d = *after;
#define DIFF(f, ...) d.f = after->f - before->f;
  CM_STORAGE_CALLS(DIFF)
  CM_STORAGE_COUNTS(DIFF)
#undef DIFF
#define DIFF(f, key) d.call_ns.f = after->call_ns.f - before->call_ns.f;
  CM_CALL_TIMES(DIFF)
#undef DIFF
  return d;
}

uint64_t cm_storage_stats_driver_calls(const cm_storage_stats_t *s) {
  if (!s) return 0;
#define SUM(f, key) +s->f
  return 0 CM_STORAGE_CALLS(SUM);
#undef SUM
}

uint64_t cm_storage_bytes_held(const cm_storage_t *s) {
  return s ? atomic_load_explicit(&s->bytes_held, memory_order_relaxed) : 0;
}

const char *cm_storage_name(const cm_storage_t *s) {
  return (s && s->ops->name) ? s->ops->name : "storage";
}
void *cm_storage_context(const cm_storage_t *s) { return s ? s->ctx : NULL; }

bool cm_storage_has_vm(const cm_storage_t *s) {
  return s && s->ops->vm_granularity && s->ops->vm_reserve && s->ops->vm_map &&
         s->ops->vm_unmap && s->ops->vm_release && s->ops->vm_granularity(s->ctx) > 0;
}

static void held_add(cm_storage_t *s, uint64_t n) {
  uint64_t now = atomic_fetch_add_explicit(&s->bytes_held, n, memory_order_relaxed) + n;
  uint64_t peak = atomic_load_explicit(&s->bytes_held_peak, memory_order_relaxed);
  while (now > peak && !atomic_compare_exchange_weak(&s->bytes_held_peak, &peak, now)) {
  }
}

/* Time measurement is on only when asked (it costs two clock reads per call);
 * `bucket` is the per-operation counter the time is also added to. */
#define TIMED(s, bucket, expr)                                                            \
  do {                                                                                    \
    uint64_t dt__;                                                                        \
    CM__TIME_NS((s)->timing, dt__, expr);                                                 \
    if (dt__) {                                                                           \
      atomic_fetch_add_explicit(&(s)->time_ns, dt__, memory_order_relaxed);               \
      atomic_fetch_add_explicit(&(s)->bucket, dt__, memory_order_relaxed);                \
    }                                                                                     \
  } while (0)

#define BUMP(s, field, n) atomic_fetch_add_explicit(&(s)->field, (n), memory_order_relaxed)

/* A backend call failed with rc: count it (memory exhaustion is not an error
 * of the call; a contract violation - a refused argument or an unknown id - is
 * also counted as one). */
static void count_failure(cm_storage_t *s, int rc) {
  if (rc == CM_EOOM) return;
  BUMP(s, errors, 1);
  if (rc == CM_EINVAL || rc == CM_EHANDLE) BUMP(s, violations, 1);
}

int cm_storage_alloc(cm_storage_t *s, uint64_t size, uint64_t *out_id, cm_diag_t *diag) {
  if (!s || !out_id) return CM_EINVAL;
  int rc;
  TIMED(s, time_alloc_ns, rc = s->ops->alloc(s->ctx, size, out_id, diag));
  if (rc != CM_OK) {
    atomic_fetch_add_explicit(&s->failed, 1, memory_order_relaxed);
    count_failure(s, rc);
    return rc;
  }
  atomic_fetch_add_explicit(&s->allocs, 1, memory_order_relaxed);
  held_add(s, size);
  return CM_OK;
}

void cm_storage_dealloc(cm_storage_t *s, uint64_t id, uint64_t size) {
  if (!s) return;
  TIMED(s, time_free_ns, s->ops->dealloc(s->ctx, id));
  if (s->ops->flush) s->unflushed++;
  atomic_fetch_add_explicit(&s->deallocs, 1, memory_order_relaxed);
  atomic_fetch_sub_explicit(&s->bytes_held, size, memory_order_relaxed);
}

int cm_storage_flush(cm_storage_t *s) {
  if (!s) return CM_EINVAL;
  if (s->unflushed == 0) return CM_OK;
  s->unflushed = 0;
  if (!s->ops->flush) return CM_OK;
  atomic_fetch_add_explicit(&s->flushes, 1, memory_order_relaxed);
  int rc;
  TIMED(s, time_free_ns, rc = s->ops->flush(s->ctx));
  if (rc != CM_OK) count_failure(s, rc);
  return rc;
}

int cm_storage_get(cm_storage_t *s, uint64_t id, uint64_t offset, uint64_t size,
                   cm_resource_t *out, cm_diag_t *diag) {
  if (!s || !out) return CM_EINVAL;
  atomic_fetch_add_explicit(&s->gets, 1, memory_order_relaxed);
  return s->ops->get(s->ctx, id, offset, size, out, diag);
}

void cm__storage_poison(cm_storage_t *s, uint64_t id, uint64_t off, uint64_t size, bool poison) {
  if (s && s->ops->poison) s->ops->poison(s->ctx, id, off, size, poison);
}

int cm_storage_mem_info(cm_storage_t *s, uint64_t *free_bytes, uint64_t *total_bytes) {
  uint64_t f = 0, t = 0;
  if (free_bytes) *free_bytes = 0;
  if (total_bytes) *total_bytes = 0;
  if (!s) return CM_EINVAL;
  if (!s->ops->mem_info) return CM_ENOTSUP;
  atomic_fetch_add_explicit(&s->mem_queries, 1, memory_order_relaxed);
  int rc = s->ops->mem_info(s->ctx, &f, &t);
  if (rc != CM_OK) return rc;
  if (free_bytes) *free_bytes = f;
  if (total_bytes) *total_bytes = t;
  return CM_OK;
}

void cm_storage_set_timing(cm_storage_t *s, bool on) {
  if (!s) return;
  s->timing = on;
  if (s->ops->set_timing) s->ops->set_timing(s->ctx, on);
}

uint64_t cm__storage_vm_granularity(cm_storage_t *s) {
  return cm_storage_has_vm(s) ? s->ops->vm_granularity(s->ctx) : 0;
}

int cm__storage_vm_reserve(cm_storage_t *s, uint64_t size, uint64_t *out_id, cm_diag_t *diag) {
  int rc;
  TIMED(s, time_reserve_ns, rc = s->ops->vm_reserve(s->ctx, size, out_id, diag));
  if (rc != CM_OK) {
    count_failure(s, rc);
    return rc;
  }
  BUMP(s, reserves, 1);
  atomic_fetch_add_explicit(&s->vm_reserved, size, memory_order_relaxed);
  return CM_OK;
}

/* Count a vm_map (alias false) or vm_alias call that returned rc: a failure,
 * or one operation of size/piece maps and one set-access; only vm_map
 * creates objects and holds their bytes. */
static int map_counted(cm_storage_t *s, int rc, uint64_t size, uint64_t piece, bool alias) {
  if (rc != CM_OK) {
    atomic_fetch_add_explicit(&s->failed, 1, memory_order_relaxed);
    count_failure(s, rc);
    return rc;
  }
  uint64_t n = piece ? size / piece : 0;
  BUMP(s, maps, 1);
  BUMP(s, map_calls, n);
  BUMP(s, set_access, 1);
  if (alias) return CM_OK; /* the objects exist already: no create, no bytes */
  BUMP(s, creates, n);
  held_add(s, size);
  return CM_OK;
}

int cm__storage_vm_map(cm_storage_t *s, uint64_t id, uint64_t off, uint64_t size, uint64_t piece,
                       cm_diag_t *diag) {
  int rc;
  TIMED(s, time_map_ns, rc = s->ops->vm_map(s->ctx, id, off, size, piece, diag));
  return map_counted(s, rc, size, piece, false);
}

/* vm_unmap, counted: an original mapping releases its object (and its bytes,
 * and owes a flush); an alias releases nothing. */
static int unmap_counted(cm_storage_t *s, uint64_t id, uint64_t off, uint64_t size, uint64_t piece,
                         bool alias, cm_diag_t *diag) {
  int rc;
  TIMED(s, time_unmap_ns, rc = s->ops->vm_unmap(s->ctx, id, off, size, piece, diag));
  if (rc != CM_OK) {
    count_failure(s, rc);
    return rc;
  }
  uint64_t n = piece ? size / piece : 0;
  BUMP(s, unmaps, 1);
  BUMP(s, unmap_calls, n);
  if (alias) return CM_OK; /* no release, no bytes: the objects stay mapped where vm_map put them */
  if (s->ops->flush) s->unflushed++;
  BUMP(s, releases, n);
  atomic_fetch_sub_explicit(&s->bytes_held, size, memory_order_relaxed);
  return CM_OK;
}

int cm__storage_vm_unmap(cm_storage_t *s, uint64_t id, uint64_t off, uint64_t size,
                         uint64_t piece, cm_diag_t *diag) {
  return unmap_counted(s, id, off, size, piece, false, diag);
}

bool cm__storage_has_alias(const cm_storage_t *s) {
  return cm_storage_has_vm(s) && s->ops->vm_alias;
}

int cm__storage_vm_alias(cm_storage_t *s, uint64_t dst_id, uint64_t dst_off, uint64_t src_id,
                         uint64_t src_off, uint64_t size, uint64_t piece, cm_diag_t *diag) {
  if (!cm__storage_has_alias(s))
    return cm__diag_set(diag, CM_ENOTSUP, "the %s storage cannot map memory a second time",
                        cm_storage_name(s));
  int rc;
  TIMED(s, time_map_ns,
        rc = s->ops->vm_alias(s->ctx, dst_id, dst_off, src_id, src_off, size, piece, diag));
  return map_counted(s, rc, size, piece, true);
}

int cm__storage_vm_unalias(cm_storage_t *s, uint64_t id, uint64_t off, uint64_t size,
                           uint64_t piece, cm_diag_t *diag) {
  return unmap_counted(s, id, off, size, piece, true, diag);
}

int cm__storage_vm_release(cm_storage_t *s, uint64_t id, uint64_t size, cm_diag_t *diag) {
  int rc;
  TIMED(s, time_reserve_ns, rc = s->ops->vm_release(s->ctx, id, diag));
  if (rc != CM_OK) {
    count_failure(s, rc);
    return rc;
  }
  BUMP(s, address_frees, 1);
  atomic_fetch_sub_explicit(&s->vm_reserved, size, memory_order_relaxed);
  return CM_OK;
}

int cm_storage_event_record(cm_storage_t *s, void **out, cm_diag_t *diag) {
  if (!s || !out) return CM_EINVAL;
  *out = NULL;
  if (!s->ops->event_record) return CM_OK;
  int rc = s->ops->event_record(s->ctx, out, diag);
  if (rc < 0) *out = NULL;
  return rc < 0 ? rc : CM_OK;
}

int cm_storage_event_query(cm_storage_t *s, void *event) {
  if (!s || !event) return 1;
  if (s->ops->event_query) return s->ops->event_query(s->ctx, event);
  if (s->ops->event_sync) {
    int rc = s->ops->event_sync(s->ctx, event);
    return rc < 0 ? rc : 1;
  }
  return 1;
}

int cm_storage_event_sync(cm_storage_t *s, void *event) {
  if (!s || !event || !s->ops->event_sync) return CM_OK;
  int rc = s->ops->event_sync(s->ctx, event);
  return rc < 0 ? rc : CM_OK;
}

void cm_storage_event_destroy(cm_storage_t *s, void *event) {
  if (s && event && s->ops->event_destroy) s->ops->event_destroy(s->ctx, event);
}

bool cm_storage_can_copy(const cm_storage_t *s) {
  return s && s->ops->copy && s->ops->copy_wait;
}

int cm_storage_copy(cm_storage_t *s, uint64_t dst_id, uint64_t dst_off, uint64_t src_id,
                    uint64_t src_off, uint64_t size, cm_diag_t *diag) {
  if (!s) return CM_EINVAL;
  if (!cm_storage_can_copy(s))
    return cm__diag_set(diag, CM_ENOTSUP, "the %s storage cannot copy device memory",
                        cm_storage_name(s));
  int rc;
  TIMED(s, time_copy_ns,
        rc = s->ops->copy(s->ctx, dst_id, dst_off, src_id, src_off, size, diag));
  if (rc != CM_OK) {
    BUMP(s, copy_failures, 1);
    count_failure(s, rc);
    return rc;
  }
  BUMP(s, copies, 1);
  BUMP(s, bytes_copied, size);
  return CM_OK;
}

int cm_storage_copy_wait(cm_storage_t *s, cm_diag_t *diag) {
  if (!s) return CM_EINVAL;
  if (!cm_storage_can_copy(s))
    return cm__diag_set(diag, CM_ENOTSUP, "the %s storage cannot copy device memory",
                        cm_storage_name(s));
  int rc;
  TIMED(s, time_copy_ns, rc = s->ops->copy_wait(s->ctx, diag));
  if (rc != CM_OK) {
    BUMP(s, copy_failures, 1);
    count_failure(s, rc);
    return rc;
  }
  BUMP(s, copy_waits, 1);
  return CM_OK;
}
