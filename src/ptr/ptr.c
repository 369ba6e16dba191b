/*
 * ptr.c - the pointer API (cubemem/ptr.h): malloc/free over one memory
 * manager per stream.
 *
 * Structure. An allocator holds a growable array of stream slots, each
 * {stream, manager, pointer map}. A slot is created on the first allocation
 * on its stream: the configured factory makes a storage and a manager is
 * built over it with the allocator's layout. The pointer map sends the
 * pointer's address to the descriptor of the handle that keeps the slice
 * alive (cm_handle_t is just that pointer), so no per-allocation record is
 * allocated beyond the map slot.
 *
 * Algorithm. alloc: find or create the slot; cm_manager_reserve; if that
 * fails with anything but a caller error (too big, invalid, overflow) and
 * retry is on, clean the slot's manager up (explicit cleanup + storage flush)
 * and retry, then clean up every slot and retry once more; resolve the
 * address with cm_manager_get_resource; insert it in the slot's map. After
 * each call that reached the manager, deferred storage deallocations (CUDA
 * queues them) are flushed when the storage's dealloc count moved, so
 * memory returns to the device promptly. free: look the pointer up in the
 * stream's slot (only there when the stream is known; in every slot, and
 * only if exactly one holds it, when it is not); remove it and release the
 * handle (the manager picks the freed slice up on its next call).
 *
 * Stream lifetime: with the stream_identity hook, a slot remembers the
 * identity its stream had when the slot was made; an allocation that finds a
 * different identity behind the same handle retires the slot (no more
 * allocations, cache returned, destroyed with its last pointer) and makes a
 * new one. Cross-stream use: cm_ptr_record_stream notes extra streams per
 * pointer (`uses`); freeing such a pointer moves its handle to the deferred
 * list with one event per stream, released once all have completed.
 *
 * Invariants (under the allocator mutex): each live pointer is in exactly one
 * slot's map and that map owns exactly one handle reference for it;
 * live_pointers == sum of the maps' counts; reserved_now == sum of the slots'
 * last observed bytes_reserved; a slot's `deferred` counts the deferred
 * entries of its manager, and a retired slot lives while it has pointers or
 * deferred entries; at most one live (not retired) slot per stream handle.
 *
 * Exports: cm_ptr_* (cubemem/ptr.h).
 */
#include "cubemem/ptr.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "base/sbuf.h"
#include "base/u64map.h"

typedef struct stream_slot {
  void *stream;
  cm_manager_t *m;
  cm__u64map ptrs;         /* address -> cm_desc_t* of the owning handle */
  uint64_t reserved;       /* last observed bytes_reserved of m */
  uint64_t seen_deallocs;  /* storage dealloc count at the last flush */
  uint64_t ident;          /* the stream's identity when the slot was made (0 = none) */
  bool retired;            /* its stream was destroyed: no more allocations */
  uint64_t deferred;       /* handles of its manager waiting in the deferred list */
} stream_slot;

/* Streams a live pointer was recorded on (cm_ptr_record_stream). */
typedef struct use_rec {
  size_t n, cap;
  void *streams[];
} use_rec;

/* A freed pointer whose memory waits for other streams' events. */
typedef struct deferred_free {
  void *d;          /* the handle's descriptor */
  cm_manager_t *m;  /* the manager it belongs to (slots are found by it) */
  void **events;
  size_t n;
  bool stuck; /* an event could not be recorded: released only with the allocator */
} deferred_free;

struct cm_ptr_allocator {
  pthread_mutex_t lock;
  cm_ptr_config_t cfg; /* name and pools point into the copies below */
  char *name;
  cm_pool_options_t *pools;
  size_t pool_count;
  stream_slot *slots;
  size_t nslots, capslots;
  uint64_t reserved_now, reserved_peak;
  uint64_t in_use_now, in_use_peak; /* requested bytes of live pointers */
  uint64_t live, allocs, frees, failed, retries;
  cm__u64map uses;         /* address -> use_rec* for pointers used on other streams */
  deferred_free *deferred; /* frees waiting for events */
  size_t ndeferred, capdeferred;
};

void cm_ptr_config_init(cm_ptr_config_t *cfg) {
  if (!cfg) return;
  memset(cfg, 0, sizeof *cfg);
  cfg->props.max_page_size = 128ull << 20;
  cfg->props.alignment = 512;
  cfg->preset = CM_PRESET_DEFAULT;
  cfg->retry_after_cleanup = true;
}

int cm_ptr_allocator_create(const cm_ptr_config_t *cfg, cm_ptr_allocator_t **out,
                            cm_diag_t *diag) {
  if (!out) return cm__diag_set(diag, CM_EINVAL, "cm_ptr_allocator_create: out is NULL");
  *out = NULL;
  if (!cfg) return cm__diag_set(diag, CM_EINVAL, "cm_ptr_allocator_create: config is NULL");
  if (!cfg->factory)
    return cm__diag_set(diag, CM_EINVAL, "cm_ptr_allocator_create: no storage factory given");
  if (cfg->pools == NULL && cfg->pool_count != 0)
    return cm__diag_set(diag, CM_EINVAL, "cm_ptr_allocator_create: pool_count without pools");
  cm_ptr_allocator_t *a = calloc(1, sizeof *a);
  if (!a) return cm__diag_set(diag, CM_ENOMEM, "out of host memory creating a pointer allocator");
  a->cfg = *cfg;
  const char *name = cfg->name ? cfg->name : "Main GPU Memory";
  a->name = strdup(name);
  if (!a->name) goto nomem;
  a->cfg.name = a->name;
  if (cfg->pools && cfg->pool_count) {
    if (cfg->pool_count > CM_MAX_DYNAMIC_POOLS) {
      free(a->name);
      free(a);
      return cm__diag_set(diag, CM_ECONFIG, "%zu pools given; at most %u are allowed",
                          cfg->pool_count, CM_MAX_DYNAMIC_POOLS);
    }
    a->pools = calloc(cfg->pool_count, sizeof *a->pools);
    if (!a->pools) goto nomem;
    int rc = cm_pools_resolve(cfg->pools, cfg->pool_count, cfg->props, a->pools, diag);
    if (rc != CM_OK) {
      free(a->pools);
      free(a->name);
      free(a);
      return rc;
    }
    a->pool_count = cfg->pool_count;
  }
  a->cfg.pools = a->pools;
  a->cfg.pool_count = a->pool_count;
  if ((cfg->event_record != NULL) != (cfg->event_query != NULL) ||
      (cfg->event_record != NULL) != (cfg->event_destroy != NULL)) {
    free(a->pools);
    free(a->name);
    free(a);
    return cm__diag_set(diag, CM_EINVAL,
                        "cm_ptr_allocator_create: give all three event hooks or none");
  }
  cm__u64map_init(&a->uses);
  if (pthread_mutex_init(&a->lock, NULL) != 0) goto nomem;
  *out = a;
  return CM_OK;
nomem:
  free(a->pools);
  free(a->name);
  free(a);
  return cm__diag_set(diag, CM_ENOMEM, "out of host memory creating a pointer allocator");
}

static int release_one(void *arg, uint64_t key, void *value) {
  (void)arg;
  (void)key;
  cm_handle_release((cm_handle_t){.d = value});
  return 0;
}

static int free_use(void *arg, uint64_t key, void *value) {
  (void)arg;
  (void)key;
  free(value);
  return 0;
}

void cm_ptr_allocator_destroy(cm_ptr_allocator_t *a) {
  if (!a) return;
  for (size_t i = 0; i < a->ndeferred; i++) {
    deferred_free *f = &a->deferred[i];
    for (size_t k = 0; k < f->n; k++) a->cfg.event_destroy(a->cfg.factory_arg, f->events[k]);
    free(f->events);
    cm_handle_release((cm_handle_t){.d = f->d});
  }
  free(a->deferred);
  (void)cm__u64map_each(&a->uses, free_use, NULL);
  cm__u64map_free(&a->uses);
  for (size_t i = 0; i < a->nslots; i++) {
    stream_slot *s = &a->slots[i];
    (void)cm__u64map_each(&s->ptrs, release_one, NULL);
    cm__u64map_free(&s->ptrs);
    cm_manager_destroy(s->m);
  }
  free(a->slots);
  free(a->pools);
  free(a->name);
  pthread_mutex_destroy(&a->lock);
  free(a);
}

/* The live (not retired) slot of `stream`. Caller holds the lock. */
static stream_slot *find_slot(cm_ptr_allocator_t *a, void *stream) {
  for (size_t i = 0; i < a->nslots; i++)
    if (a->slots[i].stream == stream && !a->slots[i].retired) return &a->slots[i];
  return NULL;
}

static int create_slot(cm_ptr_allocator_t *a, void *stream, stream_slot **out, cm_diag_t *diag) {
  if (a->cfg.max_streams && a->nslots >= a->cfg.max_streams)
    return cm__diag_set(diag, CM_ESTREAM, "stream %p would exceed the limit of %u streams", stream,
                        a->cfg.max_streams);
  if (a->nslots == a->capslots) {
    size_t ncap = a->capslots ? a->capslots * 2 : 4;
    stream_slot *ns = realloc(a->slots, ncap * sizeof *ns);
    if (!ns) return cm__diag_set(diag, CM_ENOMEM, "out of host memory adding a stream");
    a->slots = ns;
    a->capslots = ncap;
  }
  cm_storage_t *st = NULL;
  int rc = a->cfg.factory(a->cfg.factory_arg, stream, &st, diag);
  if (rc != CM_OK || !st) {
    if (rc == CM_OK) rc = cm__diag_set(diag, CM_ESTREAM, "the storage factory made no storage");
    return rc;
  }
  cm_manager_config_t mc;
  cm_manager_config_init(&mc);
  mc.name = a->name;
  mc.props = a->cfg.props;
  mc.pools = a->pools;
  mc.pool_count = a->pool_count;
  mc.preset = a->cfg.preset;
  mc.logger = a->cfg.logger;
  cm_manager_t *m = NULL;
  rc = cm_manager_create(st, &mc, &m, diag);
  if (rc != CM_OK) {
    cm_storage_destroy(st);
    return rc;
  }
  stream_slot *s = &a->slots[a->nslots++];
  memset(s, 0, sizeof *s);
  s->stream = stream;
  s->m = m;
  cm__u64map_init(&s->ptrs);
  *out = s;
  return CM_OK;
}

/* Flush deferred storage deallocations when there are new ones, and refresh
 * the reserved-bytes accounting. Caller holds the lock. */
static void settle(cm_ptr_allocator_t *a, stream_slot *s) {
  cm_storage_t *st = cm_manager_storage(s->m);
  cm_storage_stats_t ss;
  cm_storage_stats(st, &ss);
  if (ss.deallocs != s->seen_deallocs) {
    (void)cm_storage_flush(st);
    s->seen_deallocs = ss.deallocs;
  }
  cm_usage_t u;
  cm_manager_usage(s->m, &u);
  a->reserved_now = a->reserved_now - s->reserved + u.bytes_reserved;
  s->reserved = u.bytes_reserved;
  if (a->reserved_now > a->reserved_peak) a->reserved_peak = a->reserved_now;
}

static void cleanup_slot(cm_ptr_allocator_t *a, stream_slot *s) {
  cm_manager_cleanup(s->m, true);
  settle(a, s);
  (void)cm_storage_flush(cm_manager_storage(s->m)); /* also frees anything queued earlier */
}

/* ---- stream lifetime: retired slots (see cm_ptr_config_t.stream_identity) */

/* Destroy a retired slot that holds no pointer any more. Caller holds the lock. */
static void drop_slot_if_empty(cm_ptr_allocator_t *a, stream_slot *s) {
  if (!s->retired || s->ptrs.count || s->deferred) return;
  a->reserved_now -= s->reserved;
  cm__u64map_free(&s->ptrs);
  cm_manager_destroy(s->m); /* the retired storage waits for the context first */
  *s = a->slots[--a->nslots];
}

static void retire_slot(cm_ptr_allocator_t *a, stream_slot *s) {
  s->retired = true;
  if (a->cfg.stream_retire) a->cfg.stream_retire(a->cfg.factory_arg, cm_manager_storage(s->m));
  cleanup_slot(a, s); /* cached memory goes back (after the device is idle) */
  drop_slot_if_empty(a, s);
}

static bool builtin_stream(void *stream) { return (uintptr_t)stream <= 2; }

/* Retire the slot of `stream` if the handle now names another stream.
 * Caller holds the lock. */
static int check_identity(cm_ptr_allocator_t *a, void *stream, uint64_t *ident, cm_diag_t *diag) {
  *ident = 0;
  if (!a->cfg.stream_identity || builtin_stream(stream)) return CM_OK;
  int rc = a->cfg.stream_identity(a->cfg.factory_arg, stream, ident, diag);
  if (rc == CM_ENOTSUP) {
    *ident = 0;
    cm_diag_clear(diag);
    return CM_OK;
  }
  if (rc != CM_OK) return rc;
  stream_slot *s = find_slot(a, stream);
  if (s && s->ident != *ident) retire_slot(a, s);
  return CM_OK;
}

void cm_ptr_retire_stream(cm_ptr_allocator_t *a, void *stream) {
  if (!a) return;
  pthread_mutex_lock(&a->lock);
  stream_slot *s = find_slot(a, stream);
  if (s) retire_slot(a, s);
  pthread_mutex_unlock(&a->lock);
}

/* ---- cross-stream use: deferred frees ------------------------------------ */

static stream_slot *slot_of_manager(cm_ptr_allocator_t *a, const cm_manager_t *m) {
  for (size_t i = 0; i < a->nslots; i++)
    if (a->slots[i].m == m) return &a->slots[i];
  return NULL;
}

/* Release every deferred free whose events have all completed. Caller holds
 * the lock. */
static void process_deferred(cm_ptr_allocator_t *a) {
  for (size_t i = 0; i < a->ndeferred;) {
    deferred_free *f = &a->deferred[i];
    bool done = !f->stuck;
    for (size_t k = 0; k < f->n && done; k++)
      done = a->cfg.event_query(a->cfg.factory_arg, f->events[k]) == 1;
    if (!done) {
      i++;
      continue;
    }
    for (size_t k = 0; k < f->n; k++) a->cfg.event_destroy(a->cfg.factory_arg, f->events[k]);
    free(f->events);
    cm_handle_release((cm_handle_t){.d = f->d});
    stream_slot *s = slot_of_manager(a, f->m);
    a->deferred[i] = a->deferred[--a->ndeferred];
    if (s) {
      s->deferred--;
      if (s->retired) {
        cleanup_slot(a, s);
        drop_slot_if_empty(a, s);
      }
    }
  }
}

int cm_ptr_record_stream(cm_ptr_allocator_t *a, void *ptr, void *stream) {
  if (!a || !ptr) return CM_EINVAL;
  if (!a->cfg.event_record) return CM_ENOTSUP;
  pthread_mutex_lock(&a->lock);
  uint64_t key = (uint64_t)(uintptr_t)ptr;
  stream_slot *owner = NULL;
  for (size_t i = 0; i < a->nslots && !owner; i++)
    if (cm__u64map_get(&a->slots[i].ptrs, key)) owner = &a->slots[i];
  int rc = CM_OK;
  if (!owner) rc = CM_ENOTFOUND;
  else if (owner->stream != stream) {
    use_rec *u = cm__u64map_get(&a->uses, key);
    bool seen = false;
    for (size_t i = 0; u && i < u->n && !seen; i++) seen = u->streams[i] == stream;
    if (!seen && (!u || u->n == u->cap)) {
      size_t ncap = u ? u->cap * 2 : 2;
      use_rec *nu = realloc(u, sizeof *nu + ncap * sizeof nu->streams[0]);
      if (!nu) {
        rc = CM_ENOMEM; /* u is untouched and still in the map */
      } else {
        if (!u) nu->n = 0;
        nu->cap = ncap;
        /* replacing an existing key does not allocate; a new key may fail */
        if (cm__u64map_put(&a->uses, key, nu) != CM_OK) {
          free(nu);
          rc = CM_ENOMEM;
        } else {
          u = nu;
        }
      }
    }
    if (rc == CM_OK && !seen) u->streams[u->n++] = stream;
  }
  pthread_mutex_unlock(&a->lock);
  return rc;
}

/* Hand the handle of a freed pointer recorded on other streams to the
 * deferred list, with an event on each of them. Returns false when it must
 * be released at once (no recorded streams). Caller holds the lock. */
static bool defer_free(cm_ptr_allocator_t *a, stream_slot *s, uint64_t key, void *d) {
  use_rec *u = cm__u64map_remove(&a->uses, key);
  if (!u) return false;
  if (a->ndeferred == a->capdeferred) {
    size_t ncap = a->capdeferred ? a->capdeferred * 2 : 8;
    deferred_free *nd = realloc(a->deferred, ncap * sizeof *nd);
    if (!nd) { /* no room to track it: never reuse the slice (it goes with the allocator) */
      free(u);
      return true;
    }
    a->deferred = nd;
    a->capdeferred = ncap;
  }
  void **events = calloc(u->n, sizeof *events);
  size_t n = 0;
  bool stuck = events == NULL;
  for (size_t i = 0; !stuck && i < u->n; i++) {
    void *ev = NULL;
    if (a->cfg.event_record(a->cfg.factory_arg, u->streams[i], &ev, NULL) == CM_OK) events[n++] = ev;
    else stuck = true; /* cannot prove the stream done: keep the slice out of reuse */
  }
  free(u);
  a->deferred[a->ndeferred++] = (deferred_free){d, s->m, events, n, stuck};
  s->deferred++;
  return true;
}

static bool retryable(int rc) {
  return rc != CM_ETOOBIG && rc != CM_EINVAL && rc != CM_EOVERFLOW && rc != CM_ENOMEM;
}

static int alloc_locked(cm_ptr_allocator_t *a, uint64_t size, void *stream, void **out,
                        cm_diag_t *diag) {
  if (a->ndeferred) process_deferred(a);
  uint64_t ident = 0;
  int irc = check_identity(a, stream, &ident, diag);
  if (irc != CM_OK) return irc;
  stream_slot *s = find_slot(a, stream);
  if (!s) {
    int rc = create_slot(a, stream, &s, diag);
    if (rc != CM_OK) return rc;
    s->ident = ident;
  }
  cm_handle_t h = {0};
  int rc = cm_manager_reserve(s->m, size, &h, diag);
  if (rc != CM_OK && a->cfg.retry_after_cleanup && retryable(rc)) {
    a->retries++;
    cleanup_slot(a, s);
    rc = cm_manager_reserve(s->m, size, &h, diag);
    if (rc != CM_OK && retryable(rc) && a->nslots > 1) {
      for (size_t i = 0; i < a->nslots; i++) cleanup_slot(a, &a->slots[i]);
      rc = cm_manager_reserve(s->m, size, &h, diag);
    }
  }
  if (rc != CM_OK) {
    settle(a, s);
    return rc;
  }
  cm_binding_t b = cm_handle_binding(h);
  cm_resource_t res;
  rc = cm_manager_get_resource(s->m, b, 0, 0, &res, diag);
  cm_binding_release(b);
  if (rc == CM_OK && (res.addr == 0 || (uint64_t)(uintptr_t)res.addr != res.addr))
    rc = cm__diag_set(diag, CM_ECORRUPT, "the storage resolved a slice to address 0x%" PRIx64,
                      res.addr);
  if (rc == CM_OK && cm__u64map_get(&s->ptrs, res.addr))
    rc = cm__diag_set(diag, CM_ECORRUPT,
                      "address 0x%" PRIx64 " was handed out twice on the same stream", res.addr);
  if (rc == CM_OK) {
    rc = cm__u64map_put(&s->ptrs, res.addr, h.d);
    if (rc != CM_OK) cm__diag_set(diag, rc, "out of host memory recording a pointer");
  }
  if (rc != CM_OK) {
    cm_handle_release(h);
    settle(a, s);
    return rc;
  }
  settle(a, s);
  *out = (void *)(uintptr_t)res.addr;
  a->live++;
  a->allocs++;
  a->in_use_now += size;
  if (a->in_use_now > a->in_use_peak) a->in_use_peak = a->in_use_now;
  return CM_OK;
}

int cm_ptr_alloc(cm_ptr_allocator_t *a, uint64_t size, void *stream, void **out, cm_diag_t *diag) {
  if (out) *out = NULL;
  if (!a || !out) return cm__diag_set(diag, CM_EINVAL, "cm_ptr_alloc: NULL allocator or out");
  if (size == 0) return CM_OK;
  pthread_mutex_lock(&a->lock);
  int rc = alloc_locked(a, size, stream, out, diag);
  if (rc != CM_OK) a->failed++;
  pthread_mutex_unlock(&a->lock);
  return rc;
}

/* The slot holding ptr. A pointer is identified by its stream and address:
 * addresses of different streams may coincide (each stream has its own
 * storage, and simulated storages all start at the same base), so when
 * `stream` has a slot, only that slot (and the retired slots of earlier
 * streams with the same handle) is asked - a pointer absent there was not
 * allocated on it or was freed already (a double free must not find an
 * equal address that another stream handed out). When `stream` has no slot (or
 * `any_stream`), the pointer is looked up on every stream and
 * found only if exactly one stream holds that address. Caller holds the lock. */
static stream_slot *owner_of(cm_ptr_allocator_t *a, void *ptr, void *stream, bool any_stream) {
  uint64_t key = (uint64_t)(uintptr_t)ptr;
  stream_slot *s = any_stream ? NULL : find_slot(a, stream);
  if (s) {
    if (cm__u64map_get(&s->ptrs, key)) return s;
    /* an earlier stream that had the same handle (retired, see
     * stream_identity) may hold it: only those are asked, and only an
     * unambiguous match counts */
    stream_slot *found = NULL;
    for (size_t i = 0; i < a->nslots; i++) {
      stream_slot *r = &a->slots[i];
      if (!r->retired || r->stream != stream || !cm__u64map_get(&r->ptrs, key)) continue;
      if (found) return NULL;
      found = r;
    }
    return found;
  }
  stream_slot *found = NULL;
  for (size_t i = 0; i < a->nslots; i++) {
    if (!cm__u64map_get(&a->slots[i].ptrs, key)) continue;
    if (found) return NULL; /* ambiguous: several streams hold this address */
    found = &a->slots[i];
  }
  return found;
}

int cm_ptr_free(cm_ptr_allocator_t *a, void *ptr, void *stream) {
  if (!a) return CM_EINVAL;
  if (!ptr) return CM_OK;
  pthread_mutex_lock(&a->lock);
  stream_slot *s = owner_of(a, ptr, stream, false);
  if (!s) {
    pthread_mutex_unlock(&a->lock);
    return CM_ENOTFOUND;
  }
  void *d = cm__u64map_get(&s->ptrs, (uint64_t)(uintptr_t)ptr);
  cm_binding_t b = cm_handle_binding((cm_handle_t){.d = d});
  cm_storage_handle_t sh;
  if (cm_manager_get_storage(s->m, b, &sh, NULL) == CM_OK)
    a->in_use_now -= sh.size < a->in_use_now ? sh.size : a->in_use_now;
  cm_binding_release(b);
  d = cm__u64map_remove(&s->ptrs, (uint64_t)(uintptr_t)ptr);
  if (!a->uses.count || !defer_free(a, s, (uint64_t)(uintptr_t)ptr, d))
    cm_handle_release((cm_handle_t){.d = d});
  a->live--;
  a->frees++;
  if (s->retired) { /* memory of a destroyed stream never returns to a cache */
    cleanup_slot(a, s);
    drop_slot_if_empty(a, s);
  }
  pthread_mutex_unlock(&a->lock);
  return CM_OK;
}

int cm_ptr_size(cm_ptr_allocator_t *a, void *ptr, uint64_t *out) {
  if (!a || !out) return CM_EINVAL;
  pthread_mutex_lock(&a->lock);
  int rc = CM_ENOTFOUND;
  stream_slot *s = ptr ? owner_of(a, ptr, NULL, true) : NULL;
  if (s) {
    cm_handle_t h = {.d = cm__u64map_get(&s->ptrs, (uint64_t)(uintptr_t)ptr)};
    cm_binding_t b = cm_handle_binding(h);
    cm_storage_handle_t sh;
    rc = cm_manager_get_storage(s->m, b, &sh, NULL);
    cm_binding_release(b);
    if (rc == CM_OK) *out = sh.size;
  }
  pthread_mutex_unlock(&a->lock);
  return rc;
}

static void usage_locked(cm_ptr_allocator_t *a, cm_ptr_usage_t *out) {
  memset(out, 0, sizeof *out);
  for (size_t i = 0; i < a->nslots; i++) {
    cm_usage_t u;
    cm_manager_usage(a->slots[i].m, &u);
    out->total.number_allocs += u.number_allocs;
    out->total.bytes_in_use += u.bytes_in_use;
    out->total.bytes_padding += u.bytes_padding;
    out->total.bytes_reserved += u.bytes_reserved;
    cm_storage_stats_t ss;
    cm_storage_stats(cm_manager_storage(a->slots[i].m), &ss);
    out->storage_allocs += ss.allocs + ss.maps;
    out->storage_time_ns += ss.time_ns;
  }
  if (out->total.bytes_reserved > a->reserved_peak) a->reserved_peak = out->total.bytes_reserved;
  out->streams = a->nslots;
  out->live_pointers = a->live;
  out->bytes_reserved_peak = a->reserved_peak;
  out->bytes_in_use_peak = a->in_use_peak;
  out->allocs = a->allocs;
  out->frees = a->frees;
  out->failed_allocs = a->failed;
  out->retries = a->retries;
  out->pending_frees = a->ndeferred;
}

int cm_ptr_usage(cm_ptr_allocator_t *a, cm_ptr_usage_t *out) {
  if (!a || !out) return CM_EINVAL;
  pthread_mutex_lock(&a->lock);
  usage_locked(a, out);
  pthread_mutex_unlock(&a->lock);
  return CM_OK;
}

void cm_ptr_empty_cache(cm_ptr_allocator_t *a) {
  if (!a) return;
  pthread_mutex_lock(&a->lock);
  if (a->ndeferred) process_deferred(a);
  for (size_t i = 0; i < a->nslots; i++) cleanup_slot(a, &a->slots[i]);
  pthread_mutex_unlock(&a->lock);
}

/* snprintf-style appender that keeps counting past the end of buf. */
typedef struct outbuf {
  char *buf;
  size_t cap, len;
} outbuf;

static void put(outbuf *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(outbuf *o, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  o->len = cm__vbprintf(o->buf, o->cap, o->len, fmt, ap); /* base/sbuf.c */
  va_end(ap);
}

size_t cm_ptr_report(cm_ptr_allocator_t *a, char *buf, size_t cap) {
  outbuf o = {buf, buf ? cap : 0, 0};
  if (o.cap) buf[0] = '\0';
  if (!a) return 0;
  pthread_mutex_lock(&a->lock);
  cm_ptr_usage_t u;
  usage_locked(a, &u);
  char in_use[32], reserved[32], peak[32];
  cm_format_bytes(u.total.bytes_in_use, in_use, sizeof in_use);
  cm_format_bytes(u.total.bytes_reserved, reserved, sizeof reserved);
  cm_format_bytes(u.bytes_reserved_peak, peak, sizeof peak);
  put(&o,
      "cubemem: %" PRIu64 " stream(s), %" PRIu64 " live pointer(s), in use %s, reserved %s "
      "(peak %s), %" PRIu64 " allocs, %" PRIu64 " frees, %" PRIu64 " failed, %" PRIu64
      " retries, %" PRIu64 " storage allocs, %.3f ms in storage\n",
      u.streams, u.live_pointers, in_use, reserved, peak, u.allocs, u.frees, u.failed_allocs,
      u.retries, u.storage_allocs, (double)u.storage_time_ns / 1e6);
  for (size_t i = 0; i < a->nslots; i++) {
    put(&o, "stream %p:\n", a->slots[i].stream);
    size_t room = o.len < o.cap ? o.cap - o.len : 0;
    o.len += cm_manager_display(a->slots[i].m, room ? o.buf + o.len : NULL, room);
    put(&o, "\n");
  }
  pthread_mutex_unlock(&a->lock);
  return o.len;
}

int cm_ptr_sim_factory(void *arg, void *stream, cm_storage_t **out, cm_diag_t *diag) {
  (void)stream;
  const cm_ptr_sim_t *sim = arg;
  int rc = cm_storage_sim_create(sim ? sim->capacity : 0, sim ? sim->fail_over_capacity : false,
                                 sim ? sim->granularity : 0, out);
  if (rc != CM_OK) return cm__diag_set(diag, rc, "cannot create a simulated device: %s",
                                       cm_strerror(rc));
  return CM_OK;
}
