/*
 * device.c - the per-stream runtime (spec §8.1, §8.2, §8.4, §5.8, §7.3):
 * lazily created streams, each with a main and a pinned memory manager, a
 * drop queue, cross-stream pins, a capture flag and an error list; the
 * device-level calls (usage summed over streams, cleanup of every stream,
 * install_pools stored for later streams, retry after a failed reservation).
 *
 * Locking. `slots` is an array of atomic stream pointers, filled once (under
 * the device mutex `lock`, which also guards the installed layout) and never
 * cleared before destroy. Each stream has its own mutex; every operation on
 * a stream runs under it; no path holds two stream locks, and the device
 * mutex is never taken while a stream lock is held, so there is no lock
 * order to get wrong. Stream ids map to slot id % max_streams.
 *
 * Cross-stream pins (§8.4). use_binding(b, A, B): under A's lock read b's
 * cursor (lookup failure = UINT64_MAX) and, if cursor >= last_synced[A],
 * record an event on A and sync it (last_synced[A] = A's cursor); then under
 * B's lock append a clone of b to B's `pending` pins. submit(B) records an
 * event on B and moves `pending` into an in-flight batch tied to it. Every
 * call taking a stream's lock first polls that stream's in-flight batches
 * and releases those whose event completed. Storages without event ops give
 * NULL events, which count as complete.
 *
 * Invariants: a stream's managers, storage and queue are created together
 * and live until cm_device_destroy; pins are released exactly once (poll,
 * sync, or destroy); `cursor` only grows; last_synced <= cursor.
 *
 * Exports: cm_device_*, cm_storage_factory_sim/host (cubemem/device.h).
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "cubemem/device.h"
#include "cubemem/log.h"

typedef struct pin_batch {
  void *event; /* NULL: complete */
  cm_binding_t *b;
  size_t n;
  struct pin_batch *next;
} pin_batch_t;

typedef struct stream {
  pthread_mutex_t lock;
  uint64_t id; /* the id that created the slot */
  cm_manager_t *main, *pinned;
  cm_storage_t *st; /* main storage (owned by main) */
  cm_drop_queue_t *dq;
  uint64_t cursor, last_synced;
  cm_binding_t *pending; /* pins for work not yet submitted */
  size_t npending, cappending;
  pin_batch_t *head, *tail; /* in-flight batches, oldest first */
  size_t inflight;          /* bindings in in-flight batches */
  bool capturing;
  size_t nerrors;
  cm_diag_t first_error;
} stream_t;

struct cm_device {
  cm_device_config_t cfg;
  cm_pool_options_t *defaults; /* copy of the template's pools (NULL: preset) */
  size_t ndefaults;
  pthread_mutex_t lock; /* slot creation, installed layout */
  cm_pool_options_t *installed;
  size_t ninstalled;
  uint32_t max_streams;
  _Atomic(stream_t *) *slots;
  _Atomic uint32_t nstreams;
  _Atomic uint64_t retries;
};

/* ---- factories ----------------------------------------------------------------------- */

int cm_storage_factory_sim(void *arg, uint64_t stream, cm_storage_t **out, cm_diag_t *diag) {
  (void)stream;
  const cm_sim_factory_t *f = arg;
  int rc = cm_storage_sim_create(f ? f->capacity : 0, f ? f->fail_over_capacity : false,
                                 f ? f->granularity : 0, out);
  if (rc) return cm__diag_set(diag, rc, "cannot create a simulated device: %s", cm_strerror(rc));
  return CM_OK;
}

int cm_storage_factory_host(void *arg, uint64_t stream, cm_storage_t **out, cm_diag_t *diag) {
  (void)stream;
  const uint64_t *align = arg;
  int rc = cm_storage_host_create(align ? *align : 16, out);
  if (rc) return cm__diag_set(diag, rc, "cannot create host storage: %s", cm_strerror(rc));
  return CM_OK;
}

/* ---- events (optional storage ops; absent = always complete) ------------------------- */

static int ev_record(stream_t *s, void **ev, cm_diag_t *diag) {
  cm_diag_t d;
  cm_diag_clear(&d);
  int rc = cm_storage_event_record(s->st, ev, &d);
  if (rc < 0)
    return cm__diag_set(diag, rc, "event record on stream %" PRIu64 " failed: %s", s->id,
                        d.message[0] ? d.message : cm_strerror(rc));
  return CM_OK;
}

static int ev_query(stream_t *s, void *ev) { return cm_storage_event_query(s->st, ev); }
static int ev_sync(stream_t *s, void *ev) { return cm_storage_event_sync(s->st, ev); }
static void ev_destroy(stream_t *s, void *ev) { cm_storage_event_destroy(s->st, ev); }

/* fence ops of the drop queue: events on the stream's main storage */
static int fence_make(void *arg, void **out) { return ev_record(arg, out, NULL); }
static int fence_sync(void *arg, void *f) { return ev_sync(arg, f); }
static void fence_destroy(void *arg, void *f) { ev_destroy(arg, f); }

/* ---- stream internals (all *_locked run under s->lock) --------------------------------- */

static void record_error_locked(stream_t *s, int status, const char *message) {
  if (s->nerrors++ == 0) {
    cm_diag_clear(&s->first_error);
    cm__diag_set(&s->first_error, status, "%s", message ? message : cm_strerror(status));
  }
  cm_manager_cleanup(s->main, false);
}

static void batch_free(pin_batch_t *b) {
  for (size_t i = 0; i < b->n; i++) cm_binding_release(b->b[i]);
  free(b->b);
  free(b);
}

/* Release the in-flight batches whose event completed. With `wait`, sync each
 * event first (errors are recorded and the batch is released anyway only when
 * `force`). */
static void pins_collect_locked(stream_t *s, bool wait, bool force) {
  pin_batch_t **pp = &s->head, *prev = NULL;
  while (*pp) {
    pin_batch_t *b = *pp;
    int done = wait ? (ev_sync(s, b->event) == CM_OK ? 1 : -1) : ev_query(s, b->event);
    if (done < 0) {
      record_error_locked(s, done, "event query or sync failed");
      done = force ? 1 : 0;
    }
    if (done == 1) {
      *pp = b->next;
      if (s->tail == b) s->tail = prev;
      s->inflight -= b->n;
      ev_destroy(s, b->event);
      batch_free(b);
    } else {
      prev = b;
      pp = &b->next;
    }
  }
}

static void poll_locked(stream_t *s) {
  if (s->head) pins_collect_locked(s, false, false);
}

static int dq_flush_locked(stream_t *s) {
  cm_fence_ops_t ops = {fence_make, fence_sync, fence_destroy, s};
  int rc = cm_drop_queue_flush(s->dq, &ops);
  if (rc < 0) record_error_locked(s, rc, "drop queue flush failed");
  return rc;
}

/* The full cleanup of §8.2 for one stream. */
static void cleanup_locked(stream_t *s) {
  if (!s->capturing) {
    (void)dq_flush_locked(s);
    (void)dq_flush_locked(s);
  }
  poll_locked(s);
  cm_manager_cleanup(s->main, true);
  cm_manager_cleanup(s->pinned, true);
}

static void stream_free(stream_t *s) {
  if (!s) return;
  /* wait for every outstanding event, then drop all pins */
  pins_collect_locked(s, true, true);
  for (size_t i = 0; i < s->npending; i++) cm_binding_release(s->pending[i]);
  free(s->pending);
  cm_drop_queue_destroy(s->dq); /* syncs its fence on the main storage */
  cm_manager_destroy(s->pinned);
  cm_manager_destroy(s->main);
  pthread_mutex_destroy(&s->lock);
  free(s);
}

/* Create the stream of `id` (device lock held). */
static int stream_new_locked(cm_device_t *dev, uint64_t id, stream_t **out, cm_diag_t *diag) {
  stream_t *s = calloc(1, sizeof *s);
  if (!s) return cm__diag_set(diag, CM_ENOMEM, "out of memory creating stream %" PRIu64, id);
  s->id = id;
  if (pthread_mutex_init(&s->lock, NULL) != 0) {
    free(s);
    return cm__diag_set(diag, CM_ENOMEM, "cannot create the lock of stream %" PRIu64, id);
  }
  int rc = cm_drop_queue_create(&dev->cfg.drop, &s->dq);
  if (rc) goto fail_nomem;

  cm_storage_t *st = NULL;
  rc = dev->cfg.storage(dev->cfg.storage_arg, id, &st, diag);
  if (rc == CM_OK && !st) rc = cm__diag_set(diag, CM_ESTORAGE, "the storage factory gave no storage");
  if (rc) goto fail;
  cm_manager_config_t mc = dev->cfg.manager;
  mc.name = "Main GPU Memory";
  mc.props = dev->cfg.props;
  mc.pools = dev->installed ? dev->installed : dev->defaults;
  mc.pool_count = dev->installed ? dev->ninstalled : dev->ndefaults;
  rc = cm_manager_create(st, &mc, &s->main, diag);
  if (rc) {
    cm_storage_destroy(st);
    goto fail;
  }
  s->st = st;

  cm_storage_t *pst = NULL;
  cm_storage_factory_fn pf = dev->cfg.pinned ? dev->cfg.pinned : cm_storage_factory_host;
  rc = pf(dev->cfg.pinned ? dev->cfg.pinned_arg : NULL, id, &pst, diag);
  if (rc == CM_OK && !pst) rc = cm__diag_set(diag, CM_ESTORAGE, "the pinned factory gave no storage");
  if (rc) goto fail;
  cm_manager_config_t pc = dev->cfg.manager;
  pc.name = "Pinned CPU Memory";
  pc.props.max_page_size = dev->cfg.props.max_page_size;
  pc.props.alignment = 16;
  pc.pools = dev->defaults;
  pc.pool_count = dev->ndefaults;
  pc.initial_mode = CM_MODE_AUTO;
  rc = cm_manager_create(pst, &pc, &s->pinned, diag);
  if (rc) {
    cm_storage_destroy(pst);
    goto fail;
  }
  *out = s;
  return CM_OK;

fail_nomem:
  rc = cm__diag_set(diag, CM_ENOMEM, "out of memory creating stream %" PRIu64, id);
fail:
  cm_drop_queue_destroy(s->dq);
  cm_manager_destroy(s->main);
  pthread_mutex_destroy(&s->lock);
  free(s);
  return rc;
}

/* The stream of `id`: created when `create` (and *created set). NULL when it
 * does not exist and create is false. */
static int get_stream(cm_device_t *dev, uint64_t id, bool create, stream_t **out, bool *created,
                      cm_diag_t *diag) {
  if (created) *created = false;
  *out = NULL;
  if (!dev) return cm__diag_set(diag, CM_EINVAL, "device is NULL");
  uint32_t slot = (uint32_t)(id % dev->max_streams);
  stream_t *s = atomic_load_explicit(&dev->slots[slot], memory_order_acquire);
  if (s || !create) {
    *out = s;
    return CM_OK;
  }
  pthread_mutex_lock(&dev->lock);
  s = atomic_load_explicit(&dev->slots[slot], memory_order_acquire);
  int rc = CM_OK;
  if (!s) {
    rc = stream_new_locked(dev, id, &s, diag);
    if (rc == CM_OK) {
      atomic_store_explicit(&dev->slots[slot], s, memory_order_release);
      atomic_fetch_add_explicit(&dev->nstreams, 1, memory_order_relaxed);
      if (created) *created = true;
    }
  }
  pthread_mutex_unlock(&dev->lock);
  *out = s;
  return rc;
}

/* Get (creating) and lock a stream, polling its pins. */
static int lock_stream(cm_device_t *dev, uint64_t id, stream_t **out, cm_diag_t *diag) {
  int rc = get_stream(dev, id, true, out, NULL, diag);
  if (rc) return rc;
  pthread_mutex_lock(&(*out)->lock);
  poll_locked(*out);
  return CM_OK;
}

static void unlock_stream(stream_t *s) { pthread_mutex_unlock(&s->lock); }

/* ---- device ------------------------------------------------------------------------------ */

void cm_device_config_init(cm_device_config_t *cfg) {
  if (!cfg) return;
  memset(cfg, 0, sizeof *cfg);
  cfg->props.max_page_size = 128ull << 20;
  cfg->props.alignment = 512;
  cm_manager_config_init(&cfg->manager);
  cfg->max_streams = CM_DEVICE_DEFAULT_MAX_STREAMS;
  cm_flush_policy_init(&cfg->drop, 0, 0);
}

int cm_device_create(const cm_device_config_t *cfg, cm_device_t **out, cm_diag_t *diag) {
  if (!out) return cm__diag_set(diag, CM_EINVAL, "out is NULL");
  *out = NULL;
  if (!cfg || !cfg->storage)
    return cm__diag_set(diag, CM_EINVAL, "a device needs a storage factory");
  if (cfg->manager.pools && cfg->manager.pool_count == 0)
    return cm__diag_set(diag, CM_EINVAL, "the manager template has an empty pool list");
  if (cfg->manager.pool_count > CM_MAX_DYNAMIC_POOLS)
    return cm__diag_set(diag, CM_EINVAL, "the manager template has more than %u pools",
                        CM_MAX_DYNAMIC_POOLS);
  cm_device_t *dev = calloc(1, sizeof *dev);
  if (!dev) return cm__diag_set(diag, CM_ENOMEM, "out of memory");
  dev->cfg = *cfg;
  dev->max_streams = cfg->max_streams ? cfg->max_streams : CM_DEVICE_DEFAULT_MAX_STREAMS;
  dev->slots = calloc(dev->max_streams, sizeof *dev->slots);
  if (cfg->manager.pools) {
    dev->ndefaults = cfg->manager.pool_count;
    dev->defaults = malloc(dev->ndefaults * sizeof *dev->defaults);
    if (dev->defaults) memcpy(dev->defaults, cfg->manager.pools, dev->ndefaults * sizeof *dev->defaults);
  }
  if (!dev->slots || (cfg->manager.pools && !dev->defaults) ||
      pthread_mutex_init(&dev->lock, NULL) != 0) {
    free(dev->slots);
    free(dev->defaults);
    free(dev);
    return cm__diag_set(diag, CM_ENOMEM, "out of memory");
  }
  dev->cfg.manager.pools = NULL; /* never read: defaults/installed are used */
  for (uint32_t i = 0; i < dev->max_streams; i++) atomic_init(&dev->slots[i], NULL);
  atomic_init(&dev->nstreams, 0);
  atomic_init(&dev->retries, 0);
  *out = dev;
  return CM_OK;
}

void cm_device_destroy(cm_device_t *dev) {
  if (!dev) return;
  for (uint32_t i = 0; i < dev->max_streams; i++) {
    stream_t *s = atomic_load_explicit(&dev->slots[i], memory_order_acquire);
    if (!s) continue;
    pthread_mutex_lock(&s->lock);
    (void)dq_flush_locked(s);
    (void)dq_flush_locked(s);
    pthread_mutex_unlock(&s->lock);
  }
  /* pins of one stream may hold slices of another: release every pin before
   * destroying any manager */
  for (uint32_t i = 0; i < dev->max_streams; i++) {
    stream_t *s = atomic_load_explicit(&dev->slots[i], memory_order_acquire);
    if (!s) continue;
    pins_collect_locked(s, true, true);
    for (size_t k = 0; k < s->npending; k++) cm_binding_release(s->pending[k]);
    s->npending = 0;
  }
  for (uint32_t i = 0; i < dev->max_streams; i++)
    stream_free(atomic_load_explicit(&dev->slots[i], memory_order_acquire));
  pthread_mutex_destroy(&dev->lock);
  free(dev->slots);
  free(dev->defaults);
  free(dev->installed);
  free(dev);
}

uint32_t cm_device_slot(const cm_device_t *dev, uint64_t stream) {
  return dev ? (uint32_t)(stream % dev->max_streams) : 0;
}

uint32_t cm_device_stream_count(const cm_device_t *dev) {
  return dev ? atomic_load_explicit(&((cm_device_t *)dev)->nstreams, memory_order_relaxed) : 0;
}

bool cm_device_has_stream(const cm_device_t *dev, uint64_t stream) {
  if (!dev) return false;
  return atomic_load_explicit(&((cm_device_t *)dev)->slots[stream % dev->max_streams],
                              memory_order_acquire) != NULL;
}

/* ---- reservations -------------------------------------------------------------------------- */

int cm_device_reserve(cm_device_t *dev, uint64_t stream, uint64_t size, cm_handle_t *out,
                      cm_diag_t *diag) {
  if (!out) return cm__diag_set(diag, CM_EINVAL, "out is NULL");
  out->d = NULL;
  stream_t *s;
  int rc = lock_stream(dev, stream, &s, diag);
  if (rc) return rc;
  cm_handle_t r = {NULL};
  cm_diag_t d1;
  cm_diag_clear(&d1);
  rc = cm_manager_reserve(s->main, size, &r, &d1);
  if (rc != CM_OK && rc != CM_ETOOBIG) {
    char msg[768];
    snprintf(msg, sizeof msg,
             "device allocation of %" PRIu64 " B failed (%s); reclaiming and retrying", size,
             d1.message[0] ? d1.message : cm_strerror(rc));
    cm_logger_warn(dev->cfg.manager.logger, msg);
    atomic_fetch_add_explicit(&dev->retries, 1, memory_order_relaxed);
    cleanup_locked(s);
    cm_diag_clear(&d1);
    rc = cm_manager_reserve(s->main, size, &r, &d1);
  }
  if (rc != CM_OK) {
    unlock_stream(s);
    if (diag) *diag = d1;
    return rc;
  }
  cm_handle_t a;
  rc = cm_handle_new(&a);
  if (rc != CM_OK) {
    cm_handle_release(r);
    unlock_stream(s);
    return cm__diag_set(diag, rc, "out of memory creating a handle");
  }
  rc = cm_manager_bind(s->main, r, a, s->cursor, diag); /* consumes r */
  unlock_stream(s);
  if (rc != CM_OK) {
    cm_handle_release(a);
    return rc;
  }
  *out = a;
  return CM_OK;
}

int cm_device_reserve_pinned(cm_device_t *dev, uint64_t stream, uint64_t size, cm_handle_t *out,
                             cm_resource_t *res, cm_diag_t *diag) {
  if (!out) return cm__diag_set(diag, CM_EINVAL, "out is NULL");
  out->d = NULL;
  stream_t *s;
  int rc = lock_stream(dev, stream, &s, diag);
  if (rc) return rc;
  cm_handle_t h;
  rc = cm_manager_reserve(s->pinned, size, &h, diag);
  if (rc == CM_OK && res) {
    cm_binding_t b = cm_handle_binding(h);
    rc = cm_manager_get_resource(s->pinned, b, 0, 0, res, diag);
    cm_binding_release(b);
    if (rc) cm_handle_release(h);
  }
  unlock_stream(s);
  if (rc == CM_OK) *out = h;
  return rc;
}

int cm_device_resource(cm_device_t *dev, uint64_t stream, cm_binding_t b, cm_resource_t *out,
                       cm_diag_t *diag) {
  stream_t *s;
  int rc = lock_stream(dev, stream, &s, diag);
  if (rc) return rc;
  rc = cm_manager_get_resource(s->main, b, 0, 0, out, diag);
  unlock_stream(s);
  return rc;
}

/* ---- statistics ------------------------------------------------------------------------------ */

void cm_device_memory_usage(cm_device_t *dev, cm_usage_t *out) {
  if (!out) return;
  memset(out, 0, sizeof *out);
  if (!dev) return;
  for (uint32_t i = 0; i < dev->max_streams; i++) {
    stream_t *s = atomic_load_explicit(&dev->slots[i], memory_order_acquire);
    if (!s) continue;
    cm_usage_t u;
    pthread_mutex_lock(&s->lock);
    cm_manager_usage(s->main, &u);
    pthread_mutex_unlock(&s->lock);
    out->number_allocs += u.number_allocs;
    out->bytes_in_use += u.bytes_in_use;
    out->bytes_padding += u.bytes_padding;
    out->bytes_reserved += u.bytes_reserved;
  }
}

int cm_device_memory_report(cm_device_t *dev, uint64_t stream, cm_usage_t *usage,
                            cm_pool_report_t *dynamic, size_t cap, size_t *dynamic_count,
                            cm_pool_report_t *persistent, cm_diag_t *diag) {
  stream_t *s;
  int rc = lock_stream(dev, stream, &s, diag);
  if (rc) return rc;
  if (usage) cm_manager_usage(s->main, usage);
  size_t n = cm_manager_pool_count(s->main);
  if (dynamic_count) *dynamic_count = n;
  for (size_t i = 0; dynamic && i < n && i < cap && rc == CM_OK; i++)
    rc = cm_manager_pool_report(s->main, i, &dynamic[i]);
  if (persistent && rc == CM_OK) rc = cm_manager_pool_report(s->main, CM_PERSISTENT_POOL, persistent);
  unlock_stream(s);
  return rc ? cm__diag_set(diag, rc, "pool report failed") : CM_OK;
}

int cm_device_pinned_usage(cm_device_t *dev, uint64_t stream, cm_usage_t *out, cm_diag_t *diag) {
  if (!out) return cm__diag_set(diag, CM_EINVAL, "out is NULL");
  stream_t *s;
  int rc = lock_stream(dev, stream, &s, diag);
  if (rc) return rc;
  cm_manager_usage(s->pinned, out);
  unlock_stream(s);
  return CM_OK;
}

uint64_t cm_device_retries(const cm_device_t *dev) {
  return dev ? atomic_load_explicit(&((cm_device_t *)dev)->retries, memory_order_relaxed) : 0;
}

/* ---- cleanup, layouts, modes ------------------------------------------------------------------ */

void cm_device_cleanup(cm_device_t *dev) {
  if (!dev) return;
  for (uint32_t i = 0; i < dev->max_streams; i++) {
    stream_t *s = atomic_load_explicit(&dev->slots[i], memory_order_acquire);
    if (!s) continue;
    pthread_mutex_lock(&s->lock);
    cleanup_locked(s);
    pthread_mutex_unlock(&s->lock);
  }
}

int cm_device_cleanup_stream(cm_device_t *dev, uint64_t stream, cm_diag_t *diag) {
  stream_t *s;
  int rc = lock_stream(dev, stream, &s, diag);
  if (rc) return rc;
  cleanup_locked(s);
  unlock_stream(s);
  return CM_OK;
}

int cm_device_install_pools(cm_device_t *dev, uint64_t stream, const cm_pool_options_t *pools,
                            size_t n, cm_diag_t *diag) {
  if (!dev) return cm__diag_set(diag, CM_EINVAL, "device is NULL");
  if (!pools || n == 0) return cm__diag_set(diag, CM_ECONFIG, "the pool list is empty");
  if (n > CM_MAX_DYNAMIC_POOLS)
    return cm__diag_set(diag, CM_ECONFIG,
                        "the pool list has %zu entries, exceeding the maximum of 254 dynamic pools",
                        n);
  cm_pool_options_t *res = malloc(n * sizeof *res);
  if (!res) return cm__diag_set(diag, CM_ENOMEM, "out of memory");
  int rc = cm_pools_resolve(pools, n, dev->cfg.props, res, diag);
  if (rc) {
    free(res);
    return rc;
  }
  /* The device keeps its own copy for streams created later; `res` stays
   * private to this call. (Sharing one array let a concurrent install on
   * another stream free it while this call still read it.) */
  cm_pool_options_t *keep = malloc(n * sizeof *keep);
  if (!keep) {
    free(res);
    return cm__diag_set(diag, CM_ENOMEM, "out of memory");
  }
  memcpy(keep, res, n * sizeof *keep);
  pthread_mutex_lock(&dev->lock);
  free(dev->installed);
  dev->installed = keep;
  dev->ninstalled = n;
  pthread_mutex_unlock(&dev->lock);

  stream_t *s;
  bool created;
  rc = get_stream(dev, stream, true, &s, &created, diag);
  if (rc || created) { /* created: built with the installed layout already */
    free(res);
    return rc;
  }
  pthread_mutex_lock(&s->lock);
  poll_locked(s);
  if (s->nerrors) {
    rc = cm__diag_set(diag, CM_ESTREAM,
                      "stream %" PRIu64 " is in an error state (%zu error%s; first: %s); the "
                      "layout applies to streams created later",
                      stream, s->nerrors, s->nerrors == 1 ? "" : "s", s->first_error.message);
  } else {
    rc = cm_manager_install_pools(s->main, res, n, diag);
  }
  unlock_stream(s);
  free(res);
  return rc;
}

int cm_device_set_mode(cm_device_t *dev, uint64_t stream, cm_alloc_mode_t mode, cm_diag_t *diag) {
  if (mode != CM_MODE_AUTO && mode != CM_MODE_PERSISTENT && mode != CM_MODE_DEDICATED)
    return cm__diag_set(diag, CM_EINVAL, "unknown allocation mode %d", (int)mode);
  stream_t *s;
  int rc = lock_stream(dev, stream, &s, diag);
  if (rc) return rc;
  cm_manager_set_mode(s->main, mode);
  unlock_stream(s);
  return CM_OK;
}

/* ---- work, events, cross-stream pins ------------------------------------------------------------ */

int cm_device_cursor(cm_device_t *dev, uint64_t stream, uint64_t *out, cm_diag_t *diag) {
  if (!out) return cm__diag_set(diag, CM_EINVAL, "out is NULL");
  stream_t *s;
  int rc = lock_stream(dev, stream, &s, diag);
  if (rc) return rc;
  *out = s->cursor;
  unlock_stream(s);
  return CM_OK;
}

int cm_device_submit(cm_device_t *dev, uint64_t stream, cm_diag_t *diag) {
  stream_t *s;
  int rc = lock_stream(dev, stream, &s, diag);
  if (rc) return rc;
  if (s->npending) {
    pin_batch_t *b = calloc(1, sizeof *b);
    if (!b) {
      unlock_stream(s);
      return cm__diag_set(diag, CM_ENOMEM, "out of memory");
    }
    rc = ev_record(s, &b->event, diag);
    if (rc) {
      free(b);
      record_error_locked(s, rc, diag ? diag->message : "event record failed");
      unlock_stream(s);
      return rc;
    }
    b->b = s->pending;
    b->n = s->npending;
    s->pending = NULL;
    s->npending = s->cappending = 0;
    if (s->tail) s->tail->next = b;
    else s->head = b;
    s->tail = b;
    s->inflight += b->n;
  }
  s->cursor++;
  if (!s->capturing && cm_drop_queue_should_flush(s->dq)) rc = dq_flush_locked(s);
  poll_locked(s);
  unlock_stream(s);
  return rc < 0 ? cm__diag_set(diag, rc, "drop queue flush failed") : CM_OK;
}

/* Wait for everything enqueued on s so far (lock held). */
static int sync_locked(stream_t *s, cm_diag_t *diag) {
  void *ev;
  int rc = ev_record(s, &ev, diag);
  if (rc == CM_OK) {
    rc = ev_sync(s, ev);
    ev_destroy(s, ev);
    if (rc) cm__diag_set(diag, rc, "event sync on stream %" PRIu64 " failed", s->id);
  }
  if (rc) {
    record_error_locked(s, rc, diag ? diag->message : "sync failed");
    return rc;
  }
  s->last_synced = s->cursor;
  return CM_OK;
}

int cm_device_sync(cm_device_t *dev, uint64_t stream, cm_diag_t *diag) {
  stream_t *s;
  int rc = lock_stream(dev, stream, &s, diag);
  if (rc) return rc;
  rc = sync_locked(s, diag);
  if (rc == CM_OK) pins_collect_locked(s, true, false);
  unlock_stream(s);
  return rc;
}

int cm_device_use_binding(cm_device_t *dev, cm_binding_t b, uint64_t origin, uint64_t user,
                          cm_resource_t *res, bool *waited, cm_diag_t *diag) {
  if (waited) *waited = false;
  if (!b.d) return cm__diag_set(diag, CM_EINVAL, "empty binding");
  stream_t *a, *u;
  int rc = lock_stream(dev, origin, &a, diag);
  if (rc) return rc;
  if (res) {
    rc = cm_manager_get_resource(a->main, b, 0, 0, res, diag);
    if (rc) {
      unlock_stream(a);
      return rc;
    }
  }
  if (cm_device_slot(dev, origin) == cm_device_slot(dev, user)) {
    unlock_stream(a);
    return CM_OK;
  }
  uint64_t cursor;
  if (cm_manager_get_cursor(a->main, b, &cursor, NULL) != CM_OK) cursor = UINT64_MAX;
  if (cursor >= a->last_synced) {
    rc = sync_locked(a, diag);
    if (rc) {
      unlock_stream(a);
      return rc;
    }
    if (waited) *waited = true;
  }
  unlock_stream(a);

  rc = lock_stream(dev, user, &u, diag);
  if (rc) return rc;
  if (u->npending == u->cappending) {
    size_t nc = u->cappending ? u->cappending * 2 : 8;
    cm_binding_t *nv = realloc(u->pending, nc * sizeof *nv);
    if (!nv) {
      unlock_stream(u);
      return cm__diag_set(diag, CM_ENOMEM, "out of memory pinning a binding");
    }
    u->pending = nv;
    u->cappending = nc;
  }
  u->pending[u->npending++] = cm_binding_clone(b);
  unlock_stream(u);
  return CM_OK;
}

size_t cm_device_pins(cm_device_t *dev, uint64_t stream) {
  stream_t *s = NULL;
  if (get_stream(dev, stream, false, &s, NULL, NULL) || !s) return 0;
  pthread_mutex_lock(&s->lock);
  poll_locked(s);
  size_t n = s->npending + s->inflight;
  pthread_mutex_unlock(&s->lock);
  return n;
}

uint64_t cm_device_last_synced(cm_device_t *dev, uint64_t stream) {
  stream_t *s = NULL;
  if (get_stream(dev, stream, false, &s, NULL, NULL) || !s) return 0;
  pthread_mutex_lock(&s->lock);
  uint64_t v = s->last_synced;
  pthread_mutex_unlock(&s->lock);
  return v;
}

/* ---- drop queue ---------------------------------------------------------------------------------- */

int cm_device_defer_free(cm_device_t *dev, uint64_t stream, void *ptr, uint64_t size,
                         cm_drop_free_fn free_fn, void *arg, cm_diag_t *diag) {
  stream_t *s;
  int rc = lock_stream(dev, stream, &s, diag);
  if (rc) return rc;
  rc = cm_drop_queue_push(s->dq, ptr, size, free_fn, arg);
  if (rc) {
    unlock_stream(s);
    return cm__diag_set(diag, rc, "cannot queue a buffer for release");
  }
  if (!s->capturing && cm_drop_queue_should_flush(s->dq)) (void)dq_flush_locked(s);
  unlock_stream(s);
  return CM_OK;
}

static void release_handle(void *arg, void *ptr, uint64_t size) {
  (void)ptr;
  (void)size;
  cm_handle_release((cm_handle_t){(cm_desc_t *)arg});
}

int cm_device_defer_release(cm_device_t *dev, uint64_t stream, cm_handle_t h, uint64_t size,
                            cm_diag_t *diag) {
  if (!h.d) return cm__diag_set(diag, CM_EINVAL, "empty handle");
  int rc = cm_device_defer_free(dev, stream, NULL, size, release_handle, h.d, diag);
  if (rc) cm_handle_release(h);
  return rc;
}

int cm_device_flush(cm_device_t *dev, uint64_t stream, cm_diag_t *diag) {
  stream_t *s;
  int rc = lock_stream(dev, stream, &s, diag);
  if (rc) return rc;
  rc = dq_flush_locked(s);
  int frc = cm_storage_flush(s->st);
  if (frc < 0) record_error_locked(s, frc, "storage flush failed");
  unlock_stream(s);
  if (rc < 0) return cm__diag_set(diag, rc, "drop queue flush failed");
  if (frc < 0) return cm__diag_set(diag, frc, "storage flush failed");
  return CM_OK;
}

size_t cm_device_dropped(cm_device_t *dev, uint64_t stream) {
  stream_t *s = NULL;
  if (get_stream(dev, stream, false, &s, NULL, NULL) || !s) return 0;
  pthread_mutex_lock(&s->lock);
  size_t n = cm_drop_queue_staged(s->dq) + cm_drop_queue_pending(s->dq);
  pthread_mutex_unlock(&s->lock);
  return n;
}

/* ---- capture --------------------------------------------------------------------------------------- */

int cm_device_capture_begin(cm_device_t *dev, uint64_t stream, cm_diag_t *diag) {
  stream_t *s;
  int rc = lock_stream(dev, stream, &s, diag);
  if (rc) return rc;
  if (!s->capturing) {
    (void)dq_flush_locked(s);
    (void)dq_flush_locked(s);
  }
  s->capturing = true;
  cm_manager_capture_begin(s->main);
  unlock_stream(s);
  return CM_OK;
}

int cm_device_capture_priming_end(cm_device_t *dev, uint64_t stream, cm_diag_t *diag) {
  stream_t *s;
  int rc = lock_stream(dev, stream, &s, diag);
  if (rc) return rc;
  cm_manager_capture_priming_end(s->main);
  unlock_stream(s);
  return CM_OK;
}

int cm_device_capture_end(cm_device_t *dev, uint64_t stream, cm_pins_t **pins, cm_diag_t *diag) {
  if (pins) *pins = NULL;
  stream_t *s;
  int rc = lock_stream(dev, stream, &s, diag);
  if (rc) return rc;
  cm_pins_t *p = NULL;
  rc = cm_manager_capture_end(s->main, &p);
  if (rc) {
    unlock_stream(s);
    return cm__diag_set(diag, rc, "capture end failed");
  }
  bool was = s->capturing;
  s->capturing = false;
  if (was) {
    (void)dq_flush_locked(s);
    (void)dq_flush_locked(s);
  }
  unlock_stream(s);
  if (pins) *pins = p;
  else cm_pins_release(p);
  return CM_OK;
}

bool cm_device_capturing(cm_device_t *dev, uint64_t stream) {
  stream_t *s = NULL;
  if (get_stream(dev, stream, false, &s, NULL, NULL) || !s) return false;
  pthread_mutex_lock(&s->lock);
  bool c = s->capturing;
  pthread_mutex_unlock(&s->lock);
  return c;
}

/* ---- errors ------------------------------------------------------------------------------------------ */

int cm_device_report_error(cm_device_t *dev, uint64_t stream, int status, const char *message) {
  stream_t *s;
  int rc = lock_stream(dev, stream, &s, NULL);
  if (rc) return rc;
  record_error_locked(s, status < 0 ? status : CM_ESTORAGE, message);
  unlock_stream(s);
  return CM_OK;
}

size_t cm_device_errors(cm_device_t *dev, uint64_t stream, cm_diag_t *first) {
  stream_t *s = NULL;
  if (get_stream(dev, stream, false, &s, NULL, NULL) || !s) return 0;
  pthread_mutex_lock(&s->lock);
  size_t n = s->nerrors;
  if (n && first) *first = s->first_error;
  pthread_mutex_unlock(&s->lock);
  return n;
}

void cm_device_clear_errors(cm_device_t *dev, uint64_t stream) {
  stream_t *s = NULL;
  if (get_stream(dev, stream, false, &s, NULL, NULL) || !s) return;
  pthread_mutex_lock(&s->lock);
  s->nerrors = 0;
  cm_diag_clear(&s->first_error);
  pthread_mutex_unlock(&s->lock);
}

/* ---- advanced ------------------------------------------------------------------------------------------ */

int cm_device_manager(cm_device_t *dev, uint64_t stream, bool pinned, cm_manager_t **out,
                      cm_diag_t *diag) {
  if (!out) return cm__diag_set(diag, CM_EINVAL, "out is NULL");
  *out = NULL;
  stream_t *s;
  int rc = get_stream(dev, stream, true, &s, NULL, diag);
  if (rc) return rc;
  *out = pinned ? s->pinned : s->main;
  return CM_OK;
}
