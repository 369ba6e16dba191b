/*
 * cuda_storage.c - the CUDA device and pinned-host storages (cubemem/cuda.h):
 * the dealloc queue, events, copies, creation and counters. The allocation
 * records are in cuda_entries.c, the virtual memory operations in cuda_vm.c,
 * the device in cuda.c.
 *
 * Storage model. Ids are minted per storage from 1. Each id maps (hash map)
 * to an entry {pointer, size, kind}; kind says how it was obtained: ZERO (a
 * zero-byte allocation, no driver call), SYNC (cuMemAlloc), ASYNC
 * (cuMemAllocAsync), VM (an address reservation with its mappings), HOST
 * (cuMemAllocHost). Device dealloc only marks the entry and links it into an
 * intrusive pending list (so dealloc never allocates and never fails); flush
 * frees the list, each entry the way it was allocated. Pinned dealloc frees at
 * once. Unmapping VM memory first synchronises the storage's stream, because
 * work queued on it may still read the pages.
 * Invariants: every entry is in the map exactly once; pending entries are in
 * the pending list exactly once; an entry's memory is freed exactly once,
 * when it leaves the map.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/util.h"
#include "storage/cuda/cuda_internal.h"
#include "storage/storage_internal.h"

static uint64_t dev_alignment(void *ctx) {
  (void)ctx;
  return 512;
}
static uint64_t host_alignment(void *ctx) {
  (void)ctx;
  return 16;
}

static int dev_alloc(void *ctx, uint64_t size, uint64_t *out_id, cm_diag_t *diag) {
  cuda_storage *s = ctx;
  const cu_api *a = &s->dev->api;
  entry *e = calloc(1, sizeof *e);
  if (!e) return cm__diag_set(diag, CM_ENOMEM, "out of host memory for an allocation record");
  e->size = size;
  if (size == 0) {
    e->kind = K_ZERO; /* cuMemAlloc(0) fails: a zero-byte allocation needs no memory */
  } else {
    if ((uint64_t)(size_t)size != size) {
      free(e);
      return cm__diag_set(diag, CM_EOOM, "device out of memory allocating %" PRIu64 " bytes", size);
    }
    int rc = cm__cuda_ctx_push(s->dev, diag);
    if (rc != CM_OK) {
      free(e);
      return rc;
    }
    CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
    bool done = false;
    if (s->kind == CM_CUDA_ASYNC) {
      if (s->async_ok && !s->retired) {
        CU_TIMED(s, CU_ALLOC, r = a->MemAllocAsync(&e->ptr, (size_t)size, s->stream));
        if (r == CUDA_SUCCESS) {
          e->kind = K_ASYNC;
          done = true;
          atomic_fetch_add(&s->async_allocs, 1);
        }
      }
      if (!done) atomic_fetch_add(&s->async_fallbacks, 1);
    }
    if (!done) {
      CU_TIMED(s, CU_ALLOC, r = a->MemAlloc(&e->ptr, (size_t)size));
      if (r == CUDA_SUCCESS) {
        e->kind = K_SYNC;
        done = true;
        atomic_fetch_add(&s->sync_allocs, 1);
      }
    }
    cm__cuda_ctx_pop(s->dev);
    if (!done) {
      free(e);
      if (r == CUDA_ERROR_OUT_OF_MEMORY) {
        cm__diag_set(diag, CM_EOOM, "device out of memory allocating %" PRIu64 " bytes", size);
        if (diag) diag->native = r;
        return CM_EOOM;
      }
      char what[96];
      snprintf(what, sizeof what, "CUDA allocation of %" PRIu64 " bytes (cuMemAlloc_v2)", size);
      return cm__cuda_driver_error(a, diag, CM_ESTORAGE, r, what);
    }
  }
  int rc = cm__cuda_add_entry(s, e, out_id);
  if (rc != CM_OK) {
    if (e->kind != K_ZERO && cm__cuda_ctx_push(s->dev, NULL) == CM_OK) {
      (void)cm__cuda_free_entry_memory(s, e);
      cm__cuda_ctx_pop(s->dev);
    }
    free(e);
    return cm__diag_set(diag, CM_ENOMEM, "out of host memory for an allocation record");
  }
  return CM_OK;
}

static void dev_dealloc(void *ctx, uint64_t id) {
  cuda_storage *s = ctx;
  entry *e = cm__u64map_get(&s->entries, id);
  if (!e || e->pending) return; /* unknown ids are ignored (spec §2) */
  e->pending = true;
  e->next = s->pending;
  s->pending = e;
  atomic_fetch_add(&s->npending, 1);
}

static int dev_flush(void *ctx) {
  cuda_storage *s = ctx;
  if (!s->pending) return CM_OK;
  int pushed = cm__cuda_ctx_push(s->dev, NULL);
  int rc = CM_OK;
  CUresult sr = CUDA_SUCCESS;
  if (pushed == CM_OK && s->retired) CU_TIMED(s, CU_SYNC, sr = s->dev->api.CtxSynchronize());
  if (sr != CUDA_SUCCESS) {
    /* Work of the destroyed stream may still use this memory: keep it queued. */
    cm__cuda_ctx_pop(s->dev);
    atomic_fetch_add(&s->free_errors, 1);
    return CM_ESTORAGE;
  }
  entry *e = s->pending;
  s->pending = NULL;
  while (e) {
    entry *next = e->next;
    (void)cm__cuda_remove_entry(s, e->id);
    if (e->kind != K_ZERO) {
      if (pushed != CM_OK) {
        atomic_fetch_add(&s->free_errors, 1);
        rc = CM_ESTORAGE;
      } else if (cm__cuda_free_entry_memory(s, e) != CM_OK) {
        rc = CM_ESTORAGE;
      }
    }
    cm__cuda_destroy_entry(e);
    atomic_fetch_sub(&s->npending, 1);
    e = next;
  }
  if (pushed == CM_OK) cm__cuda_ctx_pop(s->dev);
  return rc;
}

static int storage_get(void *ctx, uint64_t id, uint64_t offset, uint64_t size, cm_resource_t *out,
                       cm_diag_t *diag) {
  cuda_storage *s = ctx;
  entry *e = cm__u64map_get(&s->entries, id);
  if (!e)
    return cm__diag_set(diag, CM_EHANDLE, "StorageId(%" PRIu64 ") in the %s storage", id,
                        s->pinned ? "cuda-pinned" : "cuda");
  uint64_t limit = e->kind == K_VM ? e->reserved : e->size;
  if (offset > limit || size > limit - offset)
    return cm__diag_set(diag, CM_EINVAL,
                        "range [%" PRIu64 ", +%" PRIu64 ") is outside StorageId(%" PRIu64
                        ") of %" PRIu64 " bytes",
                        offset, size, id, limit);
  out->addr = e->ptr + offset;
  out->host = e->kind == K_HOST ? (void *)(uintptr_t)(e->ptr + offset) : NULL;
  out->size = size;
  return CM_OK;
}

static void storage_release(void *ctx) {
  cuda_storage *s = ctx;
  if (!s->pinned) {
    pthread_mutex_lock(&s->dev->lock);
    if (s->st_prev) s->st_prev->st_next = s->st_next;
    else s->dev->storages = s->st_next;
    if (s->st_next) s->st_next->st_prev = s->st_prev;
    pthread_mutex_unlock(&s->dev->lock);
  }
  int pushed = cm__cuda_ctx_push(s->dev, NULL);
  if (pushed == CM_OK && s->retired && s->dev->api.CtxSynchronize() != CUDA_SUCCESS)
    atomic_fetch_add(&s->free_errors, 1);
  bool any_async = false;
  for (size_t i = 0; i < s->entries.cap; i++) {
    entry *e = s->entries.slots[i].value;
    if (!s->entries.slots[i].key || !e) continue;
    if (pushed == CM_OK && e->kind != K_ZERO) {
      any_async |= e->kind == K_ASYNC;
      (void)cm__cuda_free_entry_memory(s, e);
    }
    cm__cuda_destroy_entry(e);
  }
  cm__u64map_free(&s->entries);
  if (pushed == CM_OK && s->nunreleased && cm__cuda_retry_releases(s))
    atomic_fetch_add(&s->free_errors, 1); /* still refused: the driver keeps them */
  free(s->unreleased);
  /* Let stream-ordered frees complete so the memory is back when we return. */
  if (pushed == CM_OK) {
    if (s->copy_event) (void)s->dev->api.EventDestroy(s->copy_event);
    if (any_async && !s->retired && s->dev->api.StreamSynchronize(s->stream) != CUDA_SUCCESS)
      atomic_fetch_add(&s->free_errors, 1);
    cm__cuda_ctx_pop(s->dev);
  }
  cm__cuda_device_unref(s->dev);
  free(s);
}

/* ---- copies (relocation) ------------------------------------------------------ */

/* The device address of [off, off+size) of id, or the status with diag (the
 * driver checks the mapping itself: its refusal is reported as CM_EINVAL). */
static int copy_addr(cuda_storage *s, uint64_t id, uint64_t off, uint64_t size,
                     CUdeviceptr *out, cm_diag_t *diag) {
  cm_resource_t r = {0, NULL, 0};
  int rc = storage_get(s, id, off, size, &r, diag);
  if (rc == CM_OK) *out = (CUdeviceptr)r.addr;
  return rc;
}

/* cuMemcpyDtoDAsync on the storage's stream (the context's null stream once
 * the stream is retired). */
static int dev_copy(void *ctx, uint64_t dst_id, uint64_t dst_off, uint64_t src_id,
                    uint64_t src_off, uint64_t size, cm_diag_t *diag) {
  cuda_storage *s = ctx;
  const cu_api *a = &s->dev->api;
  if (!a->MemcpyDtoDAsync)
    return cm__diag_set(diag, CM_ENOTSUP, "this CUDA driver has no cuMemcpyDtoDAsync_v2");
  if (size == 0) return cm__diag_set(diag, CM_EINVAL, "a copy of 0 bytes");
  CUdeviceptr dst = 0, src = 0;
  int rc = copy_addr(s, src_id, src_off, size, &src, diag);
  if (rc == CM_OK) rc = copy_addr(s, dst_id, dst_off, size, &dst, diag);
  if (rc != CM_OK) return rc;
  if (src < dst + size && dst < src + size)
    return cm__diag_set(diag, CM_EINVAL, "a copy of %" PRIu64 " bytes between overlapping ranges",
                        size);
  rc = cm__cuda_ctx_push(s->dev, diag);
  if (rc != CM_OK) return rc;
  CUresult r = a->MemcpyDtoDAsync(dst, src, (size_t)size, s->retired ? NULL : s->stream);
  cm__cuda_ctx_pop(s->dev);
  if (r != CUDA_SUCCESS)
    return cm__cuda_driver_error(a, diag, r == CUDA_ERROR_INVALID_VALUE ? CM_EINVAL : CM_ESTORAGE,
                                 r, "cuMemcpyDtoDAsync");
  return CM_OK;
}

/* Record the storage's copy event after the copies and wait for it
 * (cuEventRecord + cuEventSynchronize); a retired storage waits for the
 * whole context. */
static int dev_copy_wait(void *ctx, cm_diag_t *diag) {
  cuda_storage *s = ctx;
  const cu_api *a = &s->dev->api;
  int rc = cm__cuda_ctx_push(s->dev, diag);
  if (rc != CM_OK) return rc;
  CUresult r = CUDA_SUCCESS;
  const char *what = "cuCtxSynchronize";
  if (s->retired) {
    r = a->CtxSynchronize();
  } else {
    if (!s->copy_event) {
      what = "cuEventCreate";
      r = a->EventCreate(&s->copy_event, CU_EVENT_DISABLE_TIMING);
      if (r != CUDA_SUCCESS) s->copy_event = NULL;
    }
    if (r == CUDA_SUCCESS) {
      what = "cuEventRecord";
      r = a->EventRecord(s->copy_event, s->stream);
    }
    if (r == CUDA_SUCCESS) {
      what = "cuEventSynchronize";
      r = a->EventSynchronize(s->copy_event);
    }
  }
  cm__cuda_ctx_pop(s->dev);
  return r == CUDA_SUCCESS ? CM_OK : cm__cuda_driver_error(a, diag, CM_ESTORAGE, r, what);
}

/* events */
static int dev_event_record(void *ctx, void **out_event, cm_diag_t *diag) {
  cuda_storage *s = ctx;
  const cu_api *a = &s->dev->api;
  if (!out_event) return cm__diag_set(diag, CM_EINVAL, "event_record: out_event is NULL");
  int rc = cm__cuda_ctx_push(s->dev, diag);
  if (rc != CM_OK) return rc;
  CUevent ev = NULL;
  CUresult r = a->EventCreate(&ev, CU_EVENT_DISABLE_TIMING);
  if (r != CUDA_SUCCESS) {
    cm__cuda_ctx_pop(s->dev);
    return cm__cuda_driver_error(a, diag, CM_ESTORAGE, r, "cuEventCreate");
  }
  r = a->EventRecord(ev, s->stream);
  if (r != CUDA_SUCCESS) {
    (void)a->EventDestroy(ev);
    cm__cuda_ctx_pop(s->dev);
    return cm__cuda_driver_error(a, diag, CM_ESTORAGE, r, "cuEventRecord");
  }
  cm__cuda_ctx_pop(s->dev);
  *out_event = ev;
  return CM_OK;
}

static int dev_event_query(void *ctx, void *event) {
  cuda_storage *s = ctx;
  if (!event) return CM_EINVAL;
  if (cm__cuda_ctx_push(s->dev, NULL) != CM_OK) return CM_ESTORAGE;
  CUresult r = s->dev->api.EventQuery((CUevent)event);
  cm__cuda_ctx_pop(s->dev);
  if (r == CUDA_SUCCESS) return 1;
  if (r == CUDA_ERROR_NOT_READY) return 0;
  return CM_ESTORAGE;
}

static int dev_event_sync(void *ctx, void *event) {
  cuda_storage *s = ctx;
  if (!event) return CM_EINVAL;
  if (cm__cuda_ctx_push(s->dev, NULL) != CM_OK) return CM_ESTORAGE;
  CUresult r = s->dev->api.EventSynchronize((CUevent)event);
  cm__cuda_ctx_pop(s->dev);
  return r == CUDA_SUCCESS ? CM_OK : CM_ESTORAGE;
}

static void dev_event_destroy(void *ctx, void *event) {
  cuda_storage *s = ctx;
  if (!event) return;
  if (cm__cuda_ctx_push(s->dev, NULL) != CM_OK) return;
  (void)s->dev->api.EventDestroy((CUevent)event);
  cm__cuda_ctx_pop(s->dev);
}

static int dev_mem_info(void *ctx, uint64_t *free_bytes, uint64_t *total_bytes) {
  cuda_storage *s = ctx;
  int rc;
  CU_TIMED(s, CU_MEM_QUERY, rc = cm_cuda_device_mem_info(s->dev, free_bytes, total_bytes, NULL));
  return rc;
}

static void set_timing(void *ctx, bool on) {
  atomic_store_explicit(&((cuda_storage *)ctx)->timing, on, memory_order_relaxed);
}

#define ONE(...) +1
_Static_assert(CU_NCALLS == 0 CM_CALL_TIMES(ONE), "one timed kind of call per cm_call_times_t field");
#undef ONE

static void call_times(void *ctx, cm_call_times_t *out) {
  cuda_storage *s = ctx;
  uint64_t v[CU_NCALLS];
  for (int k = 0; k < CU_NCALLS; k++)
    v[k] = atomic_load_explicit(&s->call_ns[k], memory_order_relaxed);
  *out = (cm_call_times_t){.creates = v[CU_CREATE],
                           .maps = v[CU_MAP],
                           .set_access = v[CU_SET_ACCESS],
                           .unmaps = v[CU_UNMAP],
                           .releases = v[CU_RELEASE],
                           .allocs = v[CU_ALLOC],
                           .frees = v[CU_FREE],
                           .reserves = v[CU_RESERVE],
                           .address_frees = v[CU_ADDRESS_FREE],
                           .syncs = v[CU_SYNC],
                           .mem_queries = v[CU_MEM_QUERY]};
}

/* The device storage's operations: with vm_alias when the driver has
 * cuMemRetainAllocationHandle (and the device VM), without otherwise, so
 * that cm__storage_has_alias answers for the driver at hand. */
#define CUDA_OPS(ALIAS)                                                                        \
  {.name = "cuda", .mem_info = dev_mem_info, .alignment = dev_alignment, .alloc = dev_alloc,   \
   .dealloc = dev_dealloc, .flush = dev_flush, .get = storage_get, .release = storage_release, \
   .event_record = dev_event_record, .event_query = dev_event_query,                           \
   .event_sync = dev_event_sync, .event_destroy = dev_event_destroy,                           \
   .vm_granularity = cm__cuda_vm_granularity, .vm_reserve = cm__cuda_vm_reserve,               \
   .vm_map = cm__cuda_vm_map, .vm_unmap = cm__cuda_vm_unmap, .vm_release = cm__cuda_vm_release, \
   .set_timing = set_timing, .call_times = call_times, .copy = dev_copy,                       \
   .copy_wait = dev_copy_wait, .vm_alias = (ALIAS) ? cm__cuda_vm_alias : NULL}
static const cm_storage_ops_t k_cuda_ops[2] = {CUDA_OPS(0), CUDA_OPS(1)};
#undef CUDA_OPS

/* Is `storage` a CUDA device storage (either table)? */
static bool is_device_storage(const cm_storage_t *storage) {
  return storage && (storage->ops == &k_cuda_ops[0] || storage->ops == &k_cuda_ops[1]);
}

/* pinned host memory */
static int host_alloc(void *ctx, uint64_t size, uint64_t *out_id, cm_diag_t *diag) {
  cuda_storage *s = ctx;
  const cu_api *a = &s->dev->api;
  entry *e = calloc(1, sizeof *e);
  if (!e) return cm__diag_set(diag, CM_ENOMEM, "out of host memory for an allocation record");
  e->size = size;
  e->kind = K_ZERO;
  if (size > 0) {
    if ((uint64_t)(size_t)size != size) {
      free(e);
      return cm__diag_set(diag, CM_EOOM, "pinned host memory exhausted allocating %" PRIu64 " bytes",
                          size);
    }
    int rc = cm__cuda_ctx_push(s->dev, diag);
    if (rc != CM_OK) {
      free(e);
      return rc;
    }
    void *p = NULL;
    CUresult r;
    CU_TIMED(s, CU_ALLOC, r = a->MemAllocHost(&p, (size_t)size));
    cm__cuda_ctx_pop(s->dev);
    if (r != CUDA_SUCCESS) {
      free(e);
      if (r == CUDA_ERROR_OUT_OF_MEMORY) {
        cm__diag_set(diag, CM_EOOM, "pinned host memory exhausted allocating %" PRIu64 " bytes",
                     size);
        if (diag) diag->native = r;
        return CM_EOOM;
      }
      char d[256];
      cm__cuda_describe(a, r, d, sizeof d);
      cm__diag_set(diag, CM_ESTORAGE, "cuMemAllocHost_v2 failed with error code: %s", d);
      if (diag) diag->native = r;
      return CM_ESTORAGE;
    }
    e->ptr = (CUdeviceptr)(uintptr_t)p;
    e->kind = K_HOST;
  }
  int rc = cm__cuda_add_entry(s, e, out_id);
  if (rc != CM_OK) {
    if (e->kind == K_HOST && cm__cuda_ctx_push(s->dev, NULL) == CM_OK) {
      CU_TIMED(s, CU_FREE, (void)a->MemFreeHost((void *)(uintptr_t)e->ptr));
      cm__cuda_ctx_pop(s->dev);
    }
    free(e);
    return cm__diag_set(diag, CM_ENOMEM, "out of host memory for an allocation record");
  }
  return CM_OK;
}

static void host_dealloc(void *ctx, uint64_t id) {
  cuda_storage *s = ctx;
  entry *e = cm__cuda_remove_entry(s, id);
  if (!e) return;
  if (e->kind == K_HOST) {
    if (cm__cuda_ctx_push(s->dev, NULL) == CM_OK) {
      (void)cm__cuda_free_entry_memory(s, e);
      cm__cuda_ctx_pop(s->dev);
    } else {
      atomic_fetch_add(&s->free_errors, 1);
    }
  }
  cm__cuda_destroy_entry(e);
}

static const cm_storage_ops_t k_pinned_ops = {
    .name = "cuda-pinned",
    .alignment = host_alignment,
    .alloc = host_alloc,
    .dealloc = host_dealloc,
    .flush = NULL,
    .get = storage_get,
    .release = storage_release,
};

static int make_storage(cm_cuda_device_t *dev, void *stream, cm_cuda_allocator_t kind, bool pinned,
                        cm_storage_t **out, cm_diag_t *diag) {
  if (!out) return cm__diag_set(diag, CM_EINVAL, "CUDA storage: out is NULL");
  *out = NULL;
  if (!dev) return cm__diag_set(diag, CM_EINVAL, "CUDA storage: device is NULL");
  if (kind != CM_CUDA_SYNC && kind != CM_CUDA_ASYNC)
    return cm__diag_set(diag, CM_EINVAL, "CUDA storage: unknown allocator kind %d", (int)kind);
  cuda_storage *s = calloc(1, sizeof *s);
  if (!s) return cm__diag_set(diag, CM_ENOMEM, "out of host memory creating a CUDA storage");
  s->dev = dev;
  s->stream = (CUstream)stream;
  s->kind = kind;
  s->pinned = pinned;
  s->next_id = 1;
  cm__u64map_init(&s->entries);
  if (!pinned) {
    const cu_api *a = &dev->api;
    s->prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    s->prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    s->prop.location.id = dev->ordinal; /* a device ordinal, as CUmemLocation requires */
    s->async_ok = dev->mempool && a->MemAllocAsync && a->MemFreeAsync;
    if (dev->vmm && a->MemAddressReserve && a->MemAddressFree && a->MemCreate && a->MemRelease &&
        a->MemMap && a->MemUnmap && a->MemSetAccess && a->MemGetAllocationGranularity) {
      size_t g = 0;
      CUresult r = a->MemGetAllocationGranularity(&g, &s->prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
      if (r != CUDA_SUCCESS) {
        free(s);
        return cm__cuda_driver_error(a, diag, CM_ESTORAGE, r, "cuMemGetAllocationGranularity");
      }
      if (g && !(g & (g - 1))) s->granularity = g; /* else: no usable VM granule, no VM */
    }
  }
  cm_storage_t *st = NULL;
  bool alias = s->granularity && dev->api.MemRetainAllocationHandle;
  int rc = cm_storage_create(pinned ? &k_pinned_ops : &k_cuda_ops[alias], s, &st);
  if (rc != CM_OK) {
    free(s);
    return cm__diag_set(diag, rc, "cannot wrap the CUDA storage: %s", cm_strerror(rc));
  }
  cm_storage_set_timing(st, true); /* report time spent in the driver (stats time_ns) */
  cm__cuda_device_ref(dev);
  if (!pinned) {
    pthread_mutex_lock(&dev->lock);
    s->st_next = dev->storages;
    if (dev->storages) dev->storages->st_prev = s;
    dev->storages = s;
    pthread_mutex_unlock(&dev->lock);
  }
  *out = st;
  return CM_OK;
}

int cm_cuda_storage_create(cm_cuda_device_t *dev, void *stream, cm_cuda_allocator_t kind,
                           cm_storage_t **out, cm_diag_t *diag) {
  return make_storage(dev, stream, kind, false, out, diag);
}

int cm_cuda_pinned_storage_create(cm_cuda_device_t *dev, cm_storage_t **out, cm_diag_t *diag) {
  return make_storage(dev, NULL, CM_CUDA_SYNC, true, out, diag);
}

int cm_cuda_storage_factory(void *arg, void *stream, cm_storage_t **out, cm_diag_t *diag) {
  const cm_cuda_factory_t *f = arg;
  if (!f) return cm__diag_set(diag, CM_EINVAL, "cm_cuda_storage_factory: arg is NULL");
  return cm_cuda_storage_create(f->device, stream, f->kind, out, diag);
}
int cm_cuda_storage_open_default(cm_cuda_allocator_t kind, cm_storage_t **out,
                                 cm_device_props_t *props, cm_diag_t *diag) {
  if (!out) return cm__diag_set(diag, CM_EINVAL, "cm_cuda_storage_open_default: out is NULL");
  *out = NULL;
  cm_cuda_device_t *dev = NULL;
  int rc = cm_cuda_device_open_default(&dev, diag);
  if (rc != CM_OK) return rc;
  rc = cm_cuda_storage_create(dev, NULL, kind, out, diag);
  if (rc == CM_OK && props) *props = cm_cuda_device_props(dev);
  cm_cuda_device_close(dev); /* the storage keeps its own reference */
  return rc;
}

int cm_cuda_allocator_parse(const char *text, cm_cuda_allocator_t *out) {
  if (!text || !out) return CM_EINVAL;
  if (strcasecmp(text, "sync") == 0) {
    *out = CM_CUDA_SYNC;
    return CM_OK;
  }
  if (strcasecmp(text, "async") == 0) {
    *out = CM_CUDA_ASYNC;
    return CM_OK;
  }
  return CM_EINVAL;
}

const char *cm_cuda_allocator_name(cm_cuda_allocator_t kind) {
  return kind == CM_CUDA_ASYNC ? "async" : "sync";
}

void cm_cuda_storage_counters(const cm_storage_t *storage, cm_cuda_storage_counters_t *out) {
  if (!out) return;
  memset(out, 0, sizeof *out);
  if (!is_device_storage(storage)) return;
  const cuda_storage *s = storage->ctx;
  out->async_allocs = atomic_load(&s->async_allocs);
  out->sync_allocs = atomic_load(&s->sync_allocs);
  out->async_fallbacks = atomic_load(&s->async_fallbacks);
  out->free_errors = atomic_load(&s->free_errors);
  out->pending = atomic_load(&s->npending);
  out->vm_granularity = s->granularity;
  out->async_supported = s->async_ok;
  out->retired = s->retired;
}

/* ---- stream lifetime ---------------------------------------------------------- */

void cm_cuda_storage_retire(cm_storage_t *storage) {
  if (!is_device_storage(storage)) return;
  cuda_storage *s = storage->ctx;
  s->retired = true;
}

void cm_cuda_storage_retire_fn(void *arg, cm_storage_t *storage) {
  (void)arg;
  cm_cuda_storage_retire(storage);
}
