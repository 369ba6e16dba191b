/*
 * cuda_vm.c - virtual memory of the CUDA device storage (cm_storage_ops_t
 * vm_*; cubemem/cuda.h): address reservations, mappings of physical objects
 * with access for the device and its peers, unmapping after the storage's
 * stream is idle, aliases (a second mapping of an object, vm_alias), and
 * peer access grants over the existing mappings.
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

/* Read-write access to [p, p+size) for this device and every peer granted
 * access, in one call (dev->lock held, context pushed). */
static CUresult set_access(cuda_storage *s, CUdeviceptr p, uint64_t size) {
  cu_access_desc acc[CM_CUDA_MAX_PEERS + 1];
  size_t nacc = 0;
  acc[nacc++] = (cu_access_desc){.location = {CU_MEM_LOCATION_TYPE_DEVICE, s->dev->ordinal},
                                 .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  for (int q = 0; q < CM_CUDA_MAX_PEERS; q++)
    if (s->dev->peers & (1ull << q))
      acc[nacc++] = (cu_access_desc){.location = {CU_MEM_LOCATION_TYPE_DEVICE, q},
                                     .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  CUresult r;
  CU_TIMED(s, CU_SET_ACCESS, r = s->dev->api.MemSetAccess(p, (size_t)size, acc, nacc));
  return r;
}

/* Room for `more` mapping records in e (dev->lock held); false on host OOM. */
static bool maps_room(entry *e, size_t more) {
  if (e->nmaps + more <= e->capmaps) return true;
  size_t ncap = e->capmaps ? e->capmaps : 4;
  while (ncap < e->nmaps + more) ncap *= 2;
  vm_mapping *nm = realloc(e->maps, ncap * sizeof *nm);
  if (!nm) return false;
  e->maps = nm;
  e->capmaps = ncap;
  return true;
}

/* Before a call that records n more mappings in e: take the device's lock
 * (the records change: see cm_cuda_device_enable_peer_access), make room
 * for the records first (recording must not fail later) and make the
 * device's context current. On failure the lock is released again. */
static int record_begin(cuda_storage *s, entry *e, size_t n, cm_diag_t *diag) {
  pthread_mutex_lock(&s->dev->lock);
  if (!maps_room(e, n)) {
    pthread_mutex_unlock(&s->dev->lock);
    return cm__diag_set(diag, CM_ENOMEM, "out of host memory for a mapping record");
  }
  int rc = cm__cuda_ctx_push(s->dev, diag);
  if (rc != CM_OK) pthread_mutex_unlock(&s->dev->lock);
  return rc;
}

/* The run of whole mappings of `piece` bytes that tiles [offset,
 * offset+size) of e exactly: its first index in *at and its length in *n;
 * false when there is none. */
static bool whole_run(const entry *e, uint64_t offset, uint64_t size, uint64_t piece, size_t *at,
                      size_t *n) {
  size_t i = map_lower(e, offset), k = 0;
  uint64_t end = offset;
  while (i + k < e->nmaps && end < offset + size && e->maps[i + k].offset == end &&
         e->maps[i + k].size == piece) {
    end += piece;
    k++;
  }
  *at = i;
  *n = k;
  return size != 0 && piece != 0 && end == offset + size;
}

/* An alias of a mapping in [off, off+size) of reservation id, or NULL
 * (dev->lock held; scans every mapping, so only while aliases exist). */
static const vm_mapping *alias_of(const cuda_storage *s, uint64_t id, uint64_t off,
                                  uint64_t size, uint64_t *alias_id) {
  for (size_t i = 0; i < s->entries.cap; i++) {
    const entry *e = s->entries.slots[i].value;
    if (!s->entries.slots[i].key || !e || e->kind != K_VM) continue;
    for (size_t k = 0; k < e->nmaps; k++) {
      const vm_mapping *m = &e->maps[k];
      if (m->alias && m->src_id == id && m->src_off >= off && m->src_off - off < size) {
        *alias_id = e->id;
        return m;
      }
    }
  }
  return NULL;
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
  int rc = record_begin(s, e, n, diag);
  if (rc != CM_OK) return rc;
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
    e->maps[at + done] = (vm_mapping){.offset = off, .size = piece, .handle = h};
  }
  if (!what) {
    r = set_access(s, e->ptr + offset, size);
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
  size_t at, n;
  if (!whole_run(e, offset, size, piece, &at, &n))
    return cm__diag_set(diag, CM_EINVAL,
                        "cannot unmap [%" PRIu64 ", +%" PRIu64 "): it is not exactly a run of whole "
                        "mappings of %" PRIu64 " bytes",
                        offset, size, piece);
  pthread_mutex_lock(&s->dev->lock);
  if (s->naliases) { /* one kind per call, and no original unmapped under its alias */
    size_t na = 0;
    for (size_t k = at; k < at + n; k++) na += e->maps[k].alias;
    uint64_t alias_id = 0;
    const vm_mapping *m = na ? NULL : alias_of(s, id, offset, size, &alias_id);
    if ((na && na != n) || m) {
      pthread_mutex_unlock(&s->dev->lock);
      if (m)
        return cm__diag_set(diag, CM_EINVAL,
                            "cannot unmap [%" PRIu64 ", +%" PRIu64 ") of StorageId(%" PRIu64
                            "): the mapping at offset %" PRIu64 " has an alias at [%" PRIu64
                            ", +%" PRIu64 ") of StorageId(%" PRIu64 "); unmap the alias first",
                            offset, size, id, m->src_off, m->offset, m->size, alias_id);
      return cm__diag_set(diag, CM_EINVAL,
                          "cannot unmap [%" PRIu64 ", +%" PRIu64 ") of StorageId(%" PRIu64
                          "): it holds %zu aliases and %zu original mappings, and one call "
                          "unmaps one kind",
                          offset, size, id, na, n - na);
    }
  }
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
/* A second mapping of existing objects (storage.h's vm_alias): for each
 * original mapping of the source range, cuMemRetainAllocationHandle on its
 * address (its handle, with one more reference), cuMemMap of that handle at
 * the destination and cuMemRelease of the retained reference (the new
 * mapping keeps the object alive); then one cuMemSetAccess over the whole
 * destination. On a failure the pieces this call mapped are unmapped (never
 * released: they are the originals' objects). The retain and the release of
 * the retained reference are not timed by kind (call_times): they are not
 * counted calls (storage.h), and their time would skew the time per counted
 * map or release; the wrapper's time_map_ns includes them. */
int cm__cuda_vm_alias(void *ctx, uint64_t dst_id, uint64_t dst_off, uint64_t src_id,
                      uint64_t src_off, uint64_t size, uint64_t piece, cm_diag_t *diag) {
  cuda_storage *s = ctx;
  const cu_api *a = &s->dev->api;
  if (!s->granularity || !a->MemRetainAllocationHandle)
    return cm__diag_set(diag, CM_ENOTSUP,
                        "this CUDA driver has no cuMemRetainAllocationHandle: no aliases");
  entry *d = vm_entry(s, dst_id, diag);
  if (!d) return CM_EHANDLE;
  entry *src = vm_entry(s, src_id, diag);
  if (!src) return CM_EHANDLE;
  uint64_t g = s->granularity;
  size_t sat, sn;
  if (piece == 0 || piece % g || !whole_run(src, src_off, size, piece, &sat, &sn))
    return cm__diag_set(diag, CM_EINVAL,
                        "cannot alias [%" PRIu64 ", +%" PRIu64 ") of StorageId(%" PRIu64
                        "): it is not exactly a run of whole mappings of %" PRIu64
                        " bytes (granule %" PRIu64 ")",
                        src_off, size, src_id, piece, g);
  for (size_t k = sat; k < sat + sn; k++)
    if (src->maps[k].alias)
      return cm__diag_set(diag, CM_EINVAL,
                          "cannot alias [%" PRIu64 ", +%" PRIu64 ") of StorageId(%" PRIu64
                          "): offset %" PRIu64 " is itself an alias (of offset %" PRIu64
                          " of StorageId(%" PRIu64 ")), and an alias is not aliased",
                          src_off, size, src_id, src->maps[k].offset, src->maps[k].src_off,
                          src->maps[k].src_id);
  if (dst_off % g || dst_off > d->reserved || size > d->reserved - dst_off)
    return cm__diag_set(diag, CM_EINVAL,
                        "cannot alias into [%" PRIu64 ", +%" PRIu64 ") of a %" PRIu64
                        "-byte reservation (granule %" PRIu64 ")",
                        dst_off, size, d->reserved, g);
  size_t at = map_lower(d, dst_off);
  if (at < d->nmaps && d->maps[at].offset < dst_off + size)
    return cm__diag_set(diag, CM_EINVAL,
                        "cannot alias into [%" PRIu64 ", +%" PRIu64 ") of StorageId(%" PRIu64
                        "): it is already mapped",
                        dst_off, size, dst_id);
  size_t n = sn;
  int rc = record_begin(s, d, n, diag);
  if (rc != CM_OK) return rc;
  /* d may be src: the source records are read through their offsets, which
   * the insertion below does not change, not through indices */
  memmove(d->maps + at + n, d->maps + at, (d->nmaps - at) * sizeof *d->maps);
  size_t done = 0;
  CUresult r = CUDA_SUCCESS;
  const char *what = NULL;
  for (; done < n; done++) {
    uint64_t so = src_off + done * piece, off = dst_off + done * piece;
    CUmemGenericAllocationHandle h = 0;
    r = a->MemRetainAllocationHandle(&h, (void *)(uintptr_t)(src->ptr + so));
    if (r != CUDA_SUCCESS) {
      what = "cuMemRetainAllocationHandle";
      break;
    }
    CUresult mr;
    CU_TIMED(s, CU_MAP, mr = a->MemMap(d->ptr + off, (size_t)piece, 0, h, 0));
    CUresult rr = a->MemRelease(h); /* the retained reference; a mapping holds the object */
    if (rr != CUDA_SUCCESS) { /* released again later: the reference is not lost */
      atomic_fetch_add(&s->free_errors, 1);
      cm__cuda_keep_unreleased(s, h);
    }
    if (mr != CUDA_SUCCESS) {
      r = mr;
      what = "cuMemMap";
      break;
    }
    d->maps[at + done] = (vm_mapping){.offset = off, .size = piece, .handle = h, .alias = true,
                                      .src_id = src_id, .src_off = so};
    s->naliases++;
  }
  if (!what) {
    r = set_access(s, d->ptr + dst_off, size);
    if (r != CUDA_SUCCESS) what = "cuMemSetAccess";
  }
  if (done < n) /* close the gap left by the pieces that were not mapped */
    memmove(d->maps + at + done, d->maps + at + n, (d->nmaps - at) * sizeof *d->maps);
  d->nmaps += done;
  if (what) { /* undo what this call mapped: unmap only (alias records release nothing) */
    (void)cm__cuda_unmap_records(s, d, at, done);
    cm__cuda_ctx_pop(s->dev);
    pthread_mutex_unlock(&s->dev->lock);
    return cm__cuda_driver_error(a, diag, CM_ESTORAGE, r, what);
  }
  cm__cuda_ctx_pop(s->dev);
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
