/*
 * cuda_vm.c - virtual memory of the CUDA device storage (cm_storage_ops_t
 * vm_*; cubemem/cuda.h): address reservations, mappings of physical objects
 * with access for the device and its peers, unmapping after the storage's
 * stream is idle, and peer access grants over the existing mappings.
 * Records change under the device's lock (cuda_internal.h).
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "storage/cuda/cuda_internal.h"

uint64_t cm__cuda_vm_granularity(void *ctx) { return ((cuda_storage *)ctx)->granularity; }

int cm__cuda_vm_reserve(void *ctx, uint64_t size, uint64_t *out_id, cm_diag_t *diag) {
  cuda_storage *s = ctx;
  const cu_api *a = &s->dev->api;
  if (!s->granularity)
    return cm__diag_set(diag, CM_ENOTSUP, "this CUDA driver or device has no virtual memory API");
  /* cuMemAddressReserve takes a non-zero multiple of the granule only. */
  uint64_t rsize = size;
  if (size == 0 || size % s->granularity || (uint64_t)(size_t)rsize != rsize)
    return cm__diag_set(diag, CM_EINVAL,
                        "cannot reserve %" PRIu64 " bytes of address space: not a non-zero multiple "
                        "of the granule (%" PRIu64 " bytes)",
                        size, s->granularity);
  entry *e = calloc(1, sizeof *e);
  if (!e) return cm__diag_set(diag, CM_ENOMEM, "out of host memory for a reservation record");
  int rc = cm__cuda_ctx_push(s->dev, diag);
  if (rc != CM_OK) {
    free(e);
    return rc;
  }
  CUresult r;
  CU_TIMED(s, CU_RESERVE,
           r = a->MemAddressReserve(&e->ptr, (size_t)rsize, (size_t)s->granularity, 0, 0));
  if (r != CUDA_SUCCESS) {
    cm__cuda_ctx_pop(s->dev);
    free(e);
    return cm__cuda_driver_error(a, diag, r == CUDA_ERROR_OUT_OF_MEMORY ? CM_EOOM : CM_ESTORAGE, r,
                                 "cuMemAddressReserve");
  }
  e->kind = K_VM;
  e->size = size;
  e->reserved = rsize;
  rc = cm__cuda_add_entry(s, e, out_id);
  if (rc != CM_OK) {
    CU_TIMED(s, CU_ADDRESS_FREE, (void)a->MemAddressFree(e->ptr, (size_t)rsize));
    cm__cuda_ctx_pop(s->dev);
    free(e);
    return cm__diag_set(diag, CM_ENOMEM, "out of host memory for a reservation record");
  }
  cm__cuda_ctx_pop(s->dev);
  return CM_OK;
}

static entry *vm_entry(cuda_storage *s, uint64_t id, cm_diag_t *diag) {
  entry *e = cm__u64map_get(&s->entries, id);
  if (!e || e->kind != K_VM || e->pending) {
    cm__diag_set(diag, CM_EHANDLE, "StorageId(%" PRIu64 ") is not a reservation in the cuda storage",
                 id);
    return NULL;
  }
  return e;
}

/* Index of the first mapping of e whose end is above `off` (mappings are kept
 * sorted by offset and never overlap). */
static size_t map_lower(const entry *e, uint64_t off) {
  size_t lo = 0, hi = e->nmaps;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (e->maps[mid].offset + e->maps[mid].size <= off) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

int cm__cuda_vm_map(void *ctx, uint64_t id, uint64_t offset, uint64_t size, uint64_t piece,
                    cm_diag_t *diag) {
  cuda_storage *s = ctx;
  const cu_api *a = &s->dev->api;
  entry *e = vm_entry(s, id, diag);
  if (!e) return CM_EHANDLE;
  uint64_t g = s->granularity;
  if (size == 0 || piece == 0 || piece % g || size % piece || offset % g ||
      offset > e->reserved || size > e->reserved - offset)
    return cm__diag_set(diag, CM_EINVAL,
                        "cannot map [%" PRIu64 ", +%" PRIu64 ") of a %" PRIu64
                        "-byte reservation in objects of %" PRIu64 " bytes (granule %" PRIu64 ")",
                        offset, size, e->reserved, piece, g);
  size_t at = map_lower(e, offset);
  if (at < e->nmaps && e->maps[at].offset < offset + size)
    return cm__diag_set(diag, CM_EINVAL, "[%" PRIu64 ", +%" PRIu64 ") is already mapped", offset,
                        size);
  size_t n = (size_t)(size / piece);
  pthread_mutex_lock(&s->dev->lock); /* the records change: see cm_cuda_device_enable_peer_access */
  if (e->nmaps + n > e->capmaps) { /* make room first: recording must not fail later */
    size_t ncap = e->capmaps ? e->capmaps : 4;
    while (ncap < e->nmaps + n) ncap *= 2;
    vm_mapping *nm = realloc(e->maps, ncap * sizeof *nm);
    if (!nm) {
      pthread_mutex_unlock(&s->dev->lock);
      return cm__diag_set(diag, CM_ENOMEM, "out of host memory for a mapping record");
    }
    e->maps = nm;
    e->capmaps = ncap;
  }
  int rc = cm__cuda_ctx_push(s->dev, diag);
  if (rc != CM_OK) {
    pthread_mutex_unlock(&s->dev->lock);
    return rc;
  }
  if (s->nunreleased) (void)cm__cuda_retry_releases(s); /* before asking for more memory */
  memmove(e->maps + at + n, e->maps + at, (e->nmaps - at) * sizeof *e->maps);
  size_t done = 0;
  CUresult r = CUDA_SUCCESS;
  const char *what = NULL;
  for (; done < n; done++) {
    CUmemGenericAllocationHandle h = 0;
    uint64_t off = offset + done * piece;
    CU_TIMED(s, CU_CREATE, r = a->MemCreate(&h, (size_t)piece, &s->prop, 0));
    if (r != CUDA_SUCCESS) {
      what = "cuMemCreate";
      break;
    }
    CU_TIMED(s, CU_MAP, r = a->MemMap(e->ptr + off, (size_t)piece, 0, h, 0));
    if (r != CUDA_SUCCESS) {
      CUresult rr;
      CU_TIMED(s, CU_RELEASE, rr = a->MemRelease(h));
      if (rr != CUDA_SUCCESS) {
        atomic_fetch_add(&s->free_errors, 1);
        cm__cuda_keep_unreleased(s, h);
      }
      what = "cuMemMap";
      break;
    }
    e->maps[at + done] = (vm_mapping){off, piece, h};
  }
  if (!what) {
    /* One call for the whole range: this device and every peer granted access. */
    cu_access_desc acc[CM_CUDA_MAX_PEERS + 1];
    size_t nacc = 0;
    acc[nacc++] = (cu_access_desc){.location = {CU_MEM_LOCATION_TYPE_DEVICE, s->dev->ordinal},
                                   .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    for (int p = 0; p < CM_CUDA_MAX_PEERS; p++)
      if (s->dev->peers & (1ull << p))
        acc[nacc++] = (cu_access_desc){.location = {CU_MEM_LOCATION_TYPE_DEVICE, p},
                                       .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CU_TIMED(s, CU_SET_ACCESS, r = a->MemSetAccess(e->ptr + offset, (size_t)size, acc, nacc));
    if (r != CUDA_SUCCESS) what = "cuMemSetAccess";
  }
  if (done < n) /* close the gap left by the pieces that were not mapped */
    memmove(e->maps + at + done, e->maps + at + n, (e->nmaps - at) * sizeof *e->maps);
  e->nmaps += done;
  if (what) { /* undo what this call mapped */
    (void)cm__cuda_unmap_records(s, e, at, done);
    cm__cuda_ctx_pop(s->dev);
    pthread_mutex_unlock(&s->dev->lock);
    if (r == CUDA_ERROR_OUT_OF_MEMORY) {
      cm__diag_set(diag, CM_EOOM, "device out of memory mapping %" PRIu64 " bytes (%s)", size, what);
      if (diag) diag->native = r;
      return CM_EOOM;
    }
    return cm__cuda_driver_error(a, diag, CM_ESTORAGE, r, what);
  }
  cm__cuda_ctx_pop(s->dev);
  pthread_mutex_unlock(&s->dev->lock);
  return CM_OK;
}

int cm__cuda_vm_unmap(void *ctx, uint64_t id, uint64_t offset, uint64_t size, uint64_t piece,
                      cm_diag_t *diag) {
  cuda_storage *s = ctx;
  entry *e = vm_entry(s, id, diag);
  if (!e) return CM_EHANDLE;
  size_t at = map_lower(e, offset), n = 0;
  uint64_t end = offset;
  while (at + n < e->nmaps && end < offset + size && e->maps[at + n].offset == end &&
         e->maps[at + n].size == piece) {
    end += piece;
    n++;
  }
  if (size == 0 || piece == 0 || end != offset + size)
    return cm__diag_set(diag, CM_EINVAL,
                        "cannot unmap [%" PRIu64 ", +%" PRIu64 "): it is not exactly a run of whole "
                        "mappings of %" PRIu64 " bytes",
                        offset, size, piece);
  pthread_mutex_lock(&s->dev->lock);
  int rc = cm__cuda_ctx_push(s->dev, diag);
  if (rc != CM_OK) {
    pthread_mutex_unlock(&s->dev->lock);
    return rc;
  }
  CUresult r;
  CU_TIMED(s, CU_SYNC, r = cm__cuda_wait_idle(s)); /* queued work may still use the pages */
  if (r != CUDA_SUCCESS) {
    cm__cuda_ctx_pop(s->dev);
    pthread_mutex_unlock(&s->dev->lock);
    return cm__cuda_driver_error(&s->dev->api, diag, CM_ESTORAGE, r,
                                 s->retired ? "cuCtxSynchronize before cuMemUnmap"
                                            : "cuStreamSynchronize before cuMemUnmap");
  }
  size_t failed = cm__cuda_unmap_records(s, e, at, n);
  if (s->nunreleased) (void)cm__cuda_retry_releases(s);
  cm__cuda_ctx_pop(s->dev);
  pthread_mutex_unlock(&s->dev->lock);
  if (failed)
    return cm__diag_set(diag, CM_ESTORAGE, "cuMemUnmap failed for %zu of %zu mappings", failed, n);
  return CM_OK;
}

int cm__cuda_vm_release(void *ctx, uint64_t id, cm_diag_t *diag) {
  cuda_storage *s = ctx;
  entry *e = vm_entry(s, id, diag);
  if (!e) return CM_EHANDLE;
  if (e->nmaps)
    return cm__diag_set(diag, CM_EINVAL, "cannot free a reservation with %zu mappings in it",
                        e->nmaps);
  pthread_mutex_lock(&s->dev->lock);
  int rc = cm__cuda_ctx_push(s->dev, diag);
  if (rc != CM_OK) {
    pthread_mutex_unlock(&s->dev->lock);
    return rc;
  }
  rc = cm__cuda_free_entry_memory(s, e);
  cm__cuda_ctx_pop(s->dev);
  if (rc != CM_OK) {
    pthread_mutex_unlock(&s->dev->lock);
    return cm__diag_set(diag, rc, "cuMemAddressFree failed");
  }
  (void)cm__u64map_remove(&s->entries, id);
  cm__cuda_destroy_entry(e);
  pthread_mutex_unlock(&s->dev->lock);
  return CM_OK;
}
/* ---- peers -------------------------------------------------------------------- */

/* Grant `peer` read-write access to every mapping of `s` (dev->lock held,
 * context pushed). Returns the first driver failure, or CUDA_SUCCESS. */
static CUresult grant_storage(cuda_storage *s, int peer) {
  cu_access_desc acc = {.location = {CU_MEM_LOCATION_TYPE_DEVICE, peer},
                        .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  for (size_t i = 0; i < s->entries.cap; i++) {
    entry *e = s->entries.slots[i].value;
    if (!s->entries.slots[i].key || !e || e->kind != K_VM) continue;
    for (size_t k = 0; k < e->nmaps; k++) {
      CUresult r = s->dev->api.MemSetAccess(e->ptr + e->maps[k].offset, (size_t)e->maps[k].size,
                                            &acc, 1);
      if (r != CUDA_SUCCESS) return r;
    }
  }
  return CUDA_SUCCESS;
}

int cm_cuda_device_enable_peer_access(cm_cuda_device_t *dev, int peer, cm_diag_t *diag) {
  if (!dev) return cm__diag_set(diag, CM_EINVAL, "cm_cuda_device_enable_peer_access: device is NULL");
  if (peer < 0 || peer >= CM_CUDA_MAX_PEERS || peer == dev->ordinal)
    return cm__diag_set(diag, CM_EINVAL, "CUDA device %d cannot be a peer of device %d", peer,
                        dev->ordinal);
  const cu_api *a = &dev->api;
  if (!a->DeviceCanAccessPeer)
    return cm__diag_set(diag, CM_ENOTSUP, "this CUDA driver has no cuDeviceCanAccessPeer");
  CUdevice pd = 0;
  CUresult r = a->DeviceGet(&pd, peer);
  if (r != CUDA_SUCCESS)
    return cm__cuda_driver_error(a, diag, CM_EINVAL, r, "cuDeviceGet (peer device)");
  int can = 0;
  r = a->DeviceCanAccessPeer(&can, pd, dev->dev);
  if (r != CUDA_SUCCESS)
    return cm__cuda_driver_error(a, diag, CM_ESTORAGE, r, "cuDeviceCanAccessPeer");
  if (!can)
    return cm__diag_set(diag, CM_ENOTSUP, "CUDA device %d cannot access the memory of device %d",
                        peer, dev->ordinal);
  pthread_mutex_lock(&dev->lock);
  if (dev->peers & (1ull << peer)) {
    pthread_mutex_unlock(&dev->lock);
    return CM_OK;
  }
  int rc = cm__cuda_ctx_push(dev, diag);
  if (rc == CM_OK) {
    /* Mappings made from now on include the peer (vm_map); grant the existing ones. */
    for (cuda_storage *s = dev->storages; s && r == CUDA_SUCCESS; s = s->st_next)
      r = grant_storage(s, peer);
    cm__cuda_ctx_pop(dev);
    if (r != CUDA_SUCCESS)
      rc = cm__cuda_driver_error(a, diag, CM_ESTORAGE, r, "cuMemSetAccess (peer grant)");
    else dev->peers |= 1ull << peer;
  }
  pthread_mutex_unlock(&dev->lock);
  return rc;
}
