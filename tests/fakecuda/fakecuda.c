/*
 * fakecuda.c - libfakecuda.so: the CUDA driver entry points cubemem uses,
 * with the driver's rules enforced and no GPU behind them (fakecuda.h).
 *
 * Rules, as the CUDA Driver API reference documents them for each call:
 *  - Everything but cuInit, cuGetErrorName/String and cuDriverGetVersion
 *    fails with CUDA_ERROR_NOT_INITIALIZED before cuInit(0); cuInit takes
 *    flags 0 only.
 *  - cuDeviceGet: ordinal in [0, count) (CUDA_ERROR_INVALID_DEVICE); the
 *    CUdevice handle is not the ordinal, so code that confuses them fails.
 *  - Primary contexts are reference counted: a release without a retain is
 *    CUDA_ERROR_INVALID_CONTEXT; pushing a context that is not retained, or
 *    popping an empty stack, is CUDA_ERROR_INVALID_CONTEXT.
 *  - cuMemAlloc/Free, cuMemAllocAsync/FreeAsync, cuMemGetInfo,
 *    cuMemAllocHost/FreeHost, cuEvent*, cuStreamCreate and cuCtxSynchronize
 *    need a current context (CUDA_ERROR_INVALID_CONTEXT). The VM calls take
 *    their device from the allocation properties and need none.
 *  - cuMemAlloc(0) and cuMemAllocAsync(0) are CUDA_ERROR_INVALID_VALUE;
 *    freeing an address that is not the start of a live allocation is
 *    CUDA_ERROR_INVALID_VALUE; cuMemFreeAsync is for cuMemAllocAsync memory
 *    only; cuMemAllocAsync on a device without memory pools is
 *    CUDA_ERROR_NOT_SUPPORTED. Device memory beyond the capacity is
 *    CUDA_ERROR_OUT_OF_MEMORY (not a violation).
 *  - cuMemGetAllocationGranularity: pinned device allocations of a valid
 *    device, option MINIMUM (0) or RECOMMENDED (1).
 *  - cuMemAddressReserve: size a non-zero multiple of the granule, alignment
 *    0 or a power of two, flags 0. cuMemAddressFree: exactly a reservation
 *    (start and size), with no mapping left in it.
 *  - cuMemCreate: size a non-zero multiple of the granule, type PINNED,
 *    location DEVICE with a valid ordinal, flags 0. A handle holds one
 *    reference from cuMemCreate and one more per cuMemRetainAllocationHandle;
 *    cuMemRelease drops one reference of a live handle (one with a reference
 *    left). The memory goes when the last reference is dropped and the last
 *    mapping of it is unmapped, in either order; until then it counts
 *    against the capacity once, however many times it is mapped.
 *  - cuMemRetainAllocationHandle: addr lies inside a live mapping (any
 *    address of it, not only its start); it returns the handle mapped
 *    there, with one more reference to be dropped by cuMemRelease. An
 *    address no mapping covers is CUDA_ERROR_INVALID_VALUE.
 *  - cuMemMap: ptr, size and offset multiples of the granule, offset + size
 *    within the handle, the range inside one reservation, overlapping no
 *    mapping, flags 0, a live handle (which may be mapped already elsewhere:
 *    one object at several addresses). cuMemUnmap: the range is exactly whole
 *    mappings. cuMemSetAccess: every byte of the range mapped, descriptors of
 *    valid devices with valid flags; a device other than the memory's needs
 *    peer capability.
 *  - Events and streams: handles must be live (CUDA_ERROR_INVALID_HANDLE
 *    after destroy); NULL, CU_STREAM_LEGACY and CU_STREAM_PER_THREAD are
 *    always valid streams.
 *  - cuMemcpyDtoDAsync: both ranges allocated or mapped with read-write
 *    access for the current device, not overlapping; the copy is queued
 *    work on both ranges until a synchronisation covers it.
 *  - Unmapping memory, or freeing it on another stream, while queued work
 *    still uses it is a violation; so is queueing work on memory that a
 *    destroyed stream's pending work still uses.
 * Each violation returns the driver's code, is counted and remembered.
 *
 * The state, the shared checks and the control interface (fakecuda.h) are in
 * fakecuda_state.c; fakecuda_internal.h declares what the two share.
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "fakecuda_internal.h"

/* ---- error strings, init, devices ---------------------------------------------- */

#define API(ret, name, args) FX ret name args; ret name args

static const struct {
  CUresult r;
  const char *name, *text;
} k_errors[] = {
    {R_OK, "CUDA_SUCCESS", "no error"},
    {R_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {R_OOM, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {R_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {R_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {R_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {R_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {R_PEER_UNSUPPORTED, "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED", "peer access is not supported between these two devices"},
    {R_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {R_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {R_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {R_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

API(CUresult, cuGetErrorName, (CUresult e, const char **s)) {
  if (!s) return R_INVALID_VALUE;
  for (size_t i = 0; i < sizeof k_errors / sizeof k_errors[0]; i++)
    if (k_errors[i].r == e) {
      *s = k_errors[i].name;
      return R_OK;
    }
  *s = NULL;
  return R_INVALID_VALUE;
}

API(CUresult, cuGetErrorString, (CUresult e, const char **s)) {
  if (!s) return R_INVALID_VALUE;
  for (size_t i = 0; i < sizeof k_errors / sizeof k_errors[0]; i++)
    if (k_errors[i].r == e) {
      *s = k_errors[i].text;
      return R_OK;
    }
  *s = NULL;
  return R_INVALID_VALUE;
}

API(CUresult, cuDriverGetVersion, (int *v)) {
  if (!v) return R_INVALID_VALUE;
  *v = 13000;
  return R_OK;
}

API(CUresult, cuInit, (unsigned int flags)) {
  LOCK();
  if (flags) RET(violation(R_INVALID_VALUE, "cuInit(flags=%u): flags must be 0", flags));
  if (G.cfg.init_result) RET(G.cfg.init_result);
  if (G.cfg.devices == 0) RET(R_NO_DEVICE);
  G.initialized = true;
  RET(R_OK);
}

API(CUresult, cuDeviceGetCount, (int *n)) {
  LOCK();
  CUresult r = check_init("cuDeviceGetCount", false);
  if (r) RET(r);
  if (!n) RET(violation(R_INVALID_VALUE, "cuDeviceGetCount(NULL)"));
  *n = G.cfg.devices;
  RET(R_OK);
}

API(CUresult, cuDeviceGet, (CUdevice *d, int ordinal)) {
  LOCK();
  CUresult r = check_init("cuDeviceGet", false);
  if (r) RET(r);
  if (!d) RET(violation(R_INVALID_VALUE, "cuDeviceGet(NULL)"));
  if (!ordinal_ok(ordinal))
    RET(violation(R_INVALID_DEVICE, "cuDeviceGet: ordinal %d of %d devices", ordinal, G.cfg.devices));
  *d = ordinal + DEV_BASE;
  RET(R_OK);
}

/* CUdevice handle -> ordinal, or -1. */
static int dev_ord(CUdevice d) { return ordinal_ok(d - DEV_BASE) ? d - DEV_BASE : -1; }

API(CUresult, cuDeviceGetName, (char *name, int len, CUdevice d)) {
  LOCK();
  CUresult r = check_init("cuDeviceGetName", false);
  if (r) RET(r);
  if (dev_ord(d) < 0) RET(violation(R_INVALID_DEVICE, "cuDeviceGetName: CUdevice %d is not a device", d));
  if (!name || len <= 0) RET(violation(R_INVALID_VALUE, "cuDeviceGetName: no buffer"));
  snprintf(name, (size_t)len, "Fake CUDA GPU %d", dev_ord(d));
  RET(R_OK);
}

API(CUresult, cuDeviceTotalMem_v2, (size_t *bytes, CUdevice d)) {
  LOCK();
  CUresult r = check_init("cuDeviceTotalMem_v2", false);
  if (r) RET(r);
  if (dev_ord(d) < 0) RET(violation(R_INVALID_DEVICE, "cuDeviceTotalMem: CUdevice %d is not a device", d));
  if (!bytes) RET(violation(R_INVALID_VALUE, "cuDeviceTotalMem(NULL)"));
  *bytes = (size_t)dev_capacity();
  RET(R_OK);
}

API(CUresult, cuDeviceGetAttribute, (int *pi, int attrib, CUdevice d)) {
  LOCK();
  CUresult r = check_init("cuDeviceGetAttribute", false);
  if (r) RET(r);
  G.c.get_attribute++;
  if (dev_ord(d) < 0) RET(violation(R_INVALID_DEVICE, "cuDeviceGetAttribute: CUdevice %d is not a device", d));
  if (!pi || attrib <= 0 || attrib >= 200)
    RET(violation(R_INVALID_VALUE, "cuDeviceGetAttribute: attribute %d", attrib));
  if (G.cfg.attribute_limit && attrib >= G.cfg.attribute_limit)
    RET(R_INVALID_VALUE); /* an older driver: the attribute does not exist yet */
  switch (attrib) {
    case 102: *pi = G.cfg.vmm; break;     /* VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED */
    case 115: *pi = G.cfg.mempool; break; /* MEMORY_POOLS_SUPPORTED */
    case 16: *pi = 132; break;            /* MULTIPROCESSOR_COUNT */
    case 75: *pi = 9; break;              /* COMPUTE_CAPABILITY_MAJOR */
    case 76: *pi = 0; break;
    case 41: *pi = 1; break;              /* UNIFIED_ADDRESSING */
    default: *pi = 0; break;
  }
  RET(R_OK);
}

API(CUresult, cuDeviceCanAccessPeer, (int *can, CUdevice d, CUdevice peer)) {
  LOCK();
  CUresult r = check_init("cuDeviceCanAccessPeer", false);
  if (r) RET(r);
  if (dev_ord(d) < 0 || dev_ord(peer) < 0)
    RET(violation(R_INVALID_DEVICE, "cuDeviceCanAccessPeer: CUdevice %d / %d", d, peer));
  if (!can) RET(violation(R_INVALID_VALUE, "cuDeviceCanAccessPeer(NULL)"));
  *can = d != peer && G.cfg.peer;
  RET(R_OK);
}

/* ---- contexts ------------------------------------------------------------------- */

API(CUresult, cuDevicePrimaryCtxRetain, (CUcontext *ctx, CUdevice d)) {
  LOCK();
  CUresult r = check_init("cuDevicePrimaryCtxRetain", false);
  if (r) RET(r);
  int o = dev_ord(d);
  if (o < 0) RET(violation(R_INVALID_DEVICE, "cuDevicePrimaryCtxRetain: CUdevice %d", d));
  if (!ctx) RET(violation(R_INVALID_VALUE, "cuDevicePrimaryCtxRetain(NULL)"));
  G.retains[o]++;
  G.c.retains++;
  *ctx = &G.ctx_obj[o];
  RET(R_OK);
}

API(CUresult, cuDevicePrimaryCtxRelease_v2, (CUdevice d)) {
  LOCK();
  CUresult r = check_init("cuDevicePrimaryCtxRelease", false);
  if (r) RET(r);
  int o = dev_ord(d);
  if (o < 0) RET(violation(R_INVALID_DEVICE, "cuDevicePrimaryCtxRelease: CUdevice %d", d));
  if (G.retains[o] <= 0)
    RET(violation(R_INVALID_CONTEXT, "cuDevicePrimaryCtxRelease of device %d, which is not retained", o));
  G.retains[o]--;
  G.c.releases++;
  RET(R_OK);
}

API(CUresult, cuDevicePrimaryCtxRelease, (CUdevice d)) { return cuDevicePrimaryCtxRelease_v2(d); }

static int ctx_index(CUcontext c) {
  for (int i = 0; i < MAXDEV; i++)
    if (c == &G.ctx_obj[i]) return i;
  return -1;
}

API(CUresult, cuCtxPushCurrent_v2, (CUcontext ctx)) {
  LOCK();
  CUresult r = check_init("cuCtxPushCurrent", false);
  if (r) RET(r);
  int i = ctx_index(ctx);
  if (i < 0 || G.retains[i] <= 0)
    RET(violation(R_INVALID_CONTEXT, "cuCtxPushCurrent(%p): not a retained primary context", ctx));
  if (tls_depth >= 64) RET(violation(R_INVALID_VALUE, "cuCtxPushCurrent: stack deeper than 64"));
  tls_stack[tls_depth++] = ctx;
  G.c.ctx_push++;
  G.c.contexts_pushed++;
  RET(R_OK);
}

API(CUresult, cuCtxPopCurrent_v2, (CUcontext *ctx)) {
  LOCK();
  CUresult r = check_init("cuCtxPopCurrent", false);
  if (r) RET(r);
  if (tls_depth <= 0) RET(violation(R_INVALID_CONTEXT, "cuCtxPopCurrent with no current context"));
  void *c = tls_stack[--tls_depth];
  if (ctx) *ctx = c;
  G.c.ctx_pop++;
  G.c.contexts_pushed--;
  RET(R_OK);
}

API(CUresult, cuCtxGetCurrent, (CUcontext *ctx)) {
  LOCK();
  CUresult r = check_init("cuCtxGetCurrent", false);
  if (r) RET(r);
  if (!ctx) RET(violation(R_INVALID_VALUE, "cuCtxGetCurrent(NULL)"));
  *ctx = tls_depth > 0 ? tls_stack[tls_depth - 1] : NULL;
  RET(R_OK);
}

API(CUresult, cuCtxSynchronize, (void)) {
  LOCK();
  CUresult r = check_init("cuCtxSynchronize", true);
  if (r) RET(r);
  G.c.ctx_sync++;
  complete_where(w_all, NULL);
  RET(R_OK);
}

/* ---- plain allocations ------------------------------------------------------------ */

API(CUresult, cuMemAlloc_v2, (CUdeviceptr *p, size_t n)) {
  LOCK();
  CUresult r = check_init("cuMemAlloc", true);
  if (r) RET(r);
  if (!p) RET(violation(R_INVALID_VALUE, "cuMemAlloc(NULL, %zu)", n));
  if (n == 0) RET(violation(R_INVALID_VALUE, "cuMemAlloc of 0 bytes"));
  if (G.cfg.force_alloc_error) RET(G.cfg.force_alloc_error);
  int d = current_dev();
  if (G.c.used[d] + n > dev_capacity()) RET(R_OOM);
  *p = bump_va(n, 512);
  PUSH(G.allocs, ((alloc_rec){*p, n, A_SYNC, d}));
  use(d, n);
  G.c.mem_alloc++;
  RET(R_OK);
}

static CUresult free_common(const char *fn, CUdeviceptr p, bool async, CUstream s) {
  CUresult r = check_init(fn, true);
  if (r) return r;
  size_t i;
  alloc_rec *a = find_alloc(p, &i);
  if (!a) return violation(R_INVALID_VALUE, "%s(0x%llx): not a live allocation", fn, p);
  if (async) {
    uint64_t uid, *seq;
    r = check_stream(fn, s, &uid, &seq);
    if (r) return r;
    if (a->kind != A_ASYNC)
      return violation(R_INVALID_VALUE, "%s(0x%llx): memory from cuMemAlloc, not stream-ordered", fn, p);
    work_rec *w = pending_on(a->ptr, a->size, uid, false);
    if (w)
      violation(R_INVALID_VALUE, "%s(0x%llx) on stream %llu while work of stream %llu still uses it",
                fn, p, (unsigned long long)uid, (unsigned long long)w->uid);
  } else {
    uint64_t range[2] = {a->ptr, a->size};
    complete_where(w_range, range); /* cuMemFree synchronises with the device */
  }
  G.c.used[a->dev] -= a->size;
  DROP(G.allocs, i);
  return R_OK;
}

API(CUresult, cuMemFree_v2, (CUdeviceptr p)) {
  LOCK();
  CUresult r = free_common("cuMemFree", p, false, NULL);
  if (!r) G.c.mem_free++;
  RET(r);
}

API(CUresult, cuMemAllocAsync, (CUdeviceptr *p, size_t n, CUstream s)) {
  LOCK();
  CUresult r = check_init("cuMemAllocAsync", true);
  if (r) RET(r);
  uint64_t uid, *seq;
  r = check_stream("cuMemAllocAsync", s, &uid, &seq);
  if (r) RET(r);
  int d = current_dev();
  if (!G.cfg.mempool)
    RET(violation(R_NOT_SUPPORTED, "cuMemAllocAsync on device %d, which has no memory pools "
                                   "(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED = 0)", d));
  if (!p) RET(violation(R_INVALID_VALUE, "cuMemAllocAsync(NULL)"));
  if (n == 0) RET(violation(R_INVALID_VALUE, "cuMemAllocAsync of 0 bytes"));
  if (G.cfg.async_fails) RET(R_NOT_SUPPORTED);
  if (G.c.used[d] + n > dev_capacity()) RET(R_OOM);
  *p = bump_va(n, 512);
  PUSH(G.allocs, ((alloc_rec){*p, n, A_ASYNC, d}));
  use(d, n);
  G.c.mem_alloc_async++;
  RET(R_OK);
}

API(CUresult, cuMemFreeAsync, (CUdeviceptr p, CUstream s)) {
  LOCK();
  CUresult r = free_common("cuMemFreeAsync", p, true, s);
  if (!r) G.c.mem_free_async++;
  RET(r);
}

API(CUresult, cuMemGetInfo_v2, (size_t *fr, size_t *tot)) {
  LOCK();
  CUresult r = check_init("cuMemGetInfo", true);
  if (r) RET(r);
  if (!fr || !tot) RET(violation(R_INVALID_VALUE, "cuMemGetInfo(NULL)"));
  int d = current_dev();
  *tot = (size_t)dev_capacity();
  *fr = (size_t)(dev_capacity() - G.c.used[d]);
  G.c.mem_get_info++;
  RET(R_OK);
}

API(CUresult, cuMemAllocHost_v2, (void **p, size_t n)) {
  LOCK();
  CUresult r = check_init("cuMemAllocHost", true);
  if (r) RET(r);
  if (!p) RET(violation(R_INVALID_VALUE, "cuMemAllocHost(NULL)"));
  if (n == 0) RET(violation(R_INVALID_VALUE, "cuMemAllocHost of 0 bytes"));
  if (G.host_used + n > G.cfg.host_capacity) RET(R_OOM);
  void *m = aligned_alloc(64, (n + 63) & ~(size_t)63);
  if (!m) RET(R_OOM);
  PUSH(G.hosts, ((host_rec){m, n}));
  G.host_used += n;
  G.c.mem_alloc_host++;
  *p = m;
  RET(R_OK);
}

API(CUresult, cuMemFreeHost, (void *p)) {
  LOCK();
  CUresult r = check_init("cuMemFreeHost", true);
  if (r) RET(r);
  for (size_t i = 0; i < G.hosts.n; i++)
    if (G.hosts.v[i].p == p) {
      free(p);
      G.host_used -= G.hosts.v[i].size;
      DROP(G.hosts, i);
      G.c.mem_free_host++;
      RET(R_OK);
    }
  RET(violation(R_INVALID_VALUE, "cuMemFreeHost(%p): not pinned memory from cuMemAllocHost", p));
}

/* ---- events and streams ------------------------------------------------------------------ */

/* ---- copies ------------------------------------------------------------------------ */

/* cuMemcpyDtoDAsync: both ranges allocated, or mapped with read-write access
 * for the current device (work on them, as fakecuda_launch's), ByteCount > 0
 * here (the driver accepts 0 as a no-op; cubemem never asks for one, so it is
 * refused to catch a bug), and the ranges must not overlap (the driver's
 * result is undefined for overlapping copies). */
API(CUresult, cuMemcpyDtoDAsync_v2, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)) {
  LOCK();
  CUresult r = check_init("cuMemcpyDtoDAsync", true);
  if (r) RET(r);
  if (n == 0) RET(violation(R_INVALID_VALUE, "cuMemcpyDtoDAsync of 0 bytes"));
  if (overlaps(dst, n, src, n))
    RET(violation(R_INVALID_VALUE, "cuMemcpyDtoDAsync(0x%llx, 0x%llx, %zu): overlapping ranges", dst,
                  src, n));
  uint64_t uid = 0, *seq = NULL, uid2 = 0, *seq2 = NULL;
  r = check_work("cuMemcpyDtoDAsync (source)", s, src, n, &uid, &seq);
  if (r) RET(r);
  r = check_work("cuMemcpyDtoDAsync (destination)", s, dst, n, &uid2, &seq2);
  if (r) RET(r);
  queue_work(uid, seq, src, n);
  queue_work(uid, seq, dst, n);
  G.c.memcpy_dtod++;
  RET(R_OK);
}

API(CUresult, cuEventCreate, (CUevent *e, unsigned int flags)) {
  LOCK();
  CUresult r = check_init("cuEventCreate", true);
  if (r) RET(r);
  if (!e) RET(violation(R_INVALID_VALUE, "cuEventCreate(NULL)"));
  if (flags & ~7u) RET(violation(R_INVALID_VALUE, "cuEventCreate: flags 0x%x", flags));
  PUSH(G.events, ((event_rec){.live = true}));
  *e = (CUevent)(uintptr_t)(EVENT_BASE + 16 * (G.events.n - 1));
  G.c.event_create++;
  RET(R_OK);
}

API(CUresult, cuEventRecord, (CUevent e, CUstream s)) {
  LOCK();
  CUresult r = check_init("cuEventRecord", true);
  if (r) RET(r);
  event_rec *ev = event_of(e);
  if (!ev) RET(violation(R_INVALID_HANDLE, "cuEventRecord(%p): not a live event", e));
  uint64_t uid, *seq;
  r = check_stream("cuEventRecord", s, &uid, &seq);
  if (r) RET(r);
  ev->recorded = true;
  ev->uid = uid;
  ev->seq = *seq;
  G.c.event_record++;
  RET(R_OK);
}

static bool event_done(const event_rec *ev) {
  for (size_t i = 0; i < G.work.n; i++)
    if (w_event(&G.work.v[i], ev)) return false;
  return true;
}

API(CUresult, cuEventQuery, (CUevent e)) {
  LOCK();
  CUresult r = check_init("cuEventQuery", false);
  if (r) RET(r);
  event_rec *ev = event_of(e);
  if (!ev) RET(violation(R_INVALID_HANDLE, "cuEventQuery(%p): not a live event", e));
  G.c.event_query++;
  RET(event_done(ev) ? R_OK : R_NOT_READY);
}

API(CUresult, cuEventSynchronize, (CUevent e)) {
  LOCK();
  CUresult r = check_init("cuEventSynchronize", false);
  if (r) RET(r);
  event_rec *ev = event_of(e);
  if (!ev) RET(violation(R_INVALID_HANDLE, "cuEventSynchronize(%p): not a live event", e));
  complete_where(w_event, ev);
  G.c.event_sync++;
  RET(R_OK);
}

API(CUresult, cuEventDestroy_v2, (CUevent e)) {
  LOCK();
  CUresult r = check_init("cuEventDestroy", false);
  if (r) RET(r);
  event_rec *ev = event_of(e);
  if (!ev) RET(violation(R_INVALID_HANDLE, "cuEventDestroy(%p): not a live event (destroyed twice?)", e));
  ev->live = false;
  G.c.event_destroy++;
  RET(R_OK);
}

API(CUresult, cuStreamCreate, (CUstream *s, unsigned int flags)) {
  LOCK();
  CUresult r = check_init("cuStreamCreate", true);
  if (r) RET(r);
  if (!s) RET(violation(R_INVALID_VALUE, "cuStreamCreate(NULL)"));
  if (flags & ~1u) RET(violation(R_INVALID_VALUE, "cuStreamCreate: flags 0x%x", flags));
  size_t slot = G.streams.n;
  if (G.cfg.reuse_streams) /* the driver may hand out a destroyed stream's handle again */
    for (size_t i = G.streams.n; i-- > 0;)
      if (!G.streams.v[i].live) {
        slot = i;
        break;
      }
  stream_rec rec = {.live = true, .uid = G.next_uid++};
  if (slot == G.streams.n) PUSH(G.streams, rec);
  else G.streams.v[slot] = rec;
  *s = (CUstream)(uintptr_t)(STREAM_BASE + 16 * slot);
  G.c.stream_create++;
  RET(R_OK);
}

API(CUresult, cuStreamDestroy_v2, (CUstream s)) {
  LOCK();
  CUresult r = check_init("cuStreamDestroy", false);
  if (r) RET(r);
  bool legacy;
  stream_rec *st = stream_of(s, &legacy);
  if (!st) RET(violation(R_INVALID_HANDLE, "cuStreamDestroy(%p): not a created, live stream", s));
  st->live = false;
  for (size_t i = 0; i < G.work.n; i++) /* its queued work still runs */
    if (G.work.v[i].uid == st->uid) G.work.v[i].orphan = true;
  G.c.stream_destroy++;
  RET(R_OK);
}

API(CUresult, cuStreamSynchronize, (CUstream s)) {
  LOCK();
  CUresult r = check_init("cuStreamSynchronize", false);
  if (r) RET(r);
  uint64_t uid, *seq;
  r = check_stream("cuStreamSynchronize", s, &uid, &seq);
  if (r) RET(r);
  complete_where(w_stream, &uid);
  G.c.stream_sync++;
  RET(R_OK);
}

API(CUresult, cuStreamGetId, (CUstream s, unsigned long long *id)) {
  LOCK();
  CUresult r = check_init("cuStreamGetId", false);
  if (r) RET(r);
  if (!id) RET(violation(R_INVALID_VALUE, "cuStreamGetId(NULL)"));
  uint64_t uid, *seq;
  r = check_stream("cuStreamGetId", s, &uid, &seq);
  if (r) RET(r);
  *id = uid;
  RET(R_OK);
}

/* ---- virtual memory ------------------------------------------------------------------------ */

static CUresult check_vm(const char *fn) {
  CUresult r = check_init(fn, false);
  if (r) return r;
  if (!G.cfg.vmm)
    return violation(R_NOT_SUPPORTED, "%s on a device without virtual memory management "
                                      "(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 0)", fn);
  return R_OK;
}

static CUresult check_prop(const char *fn, const fk_prop *prop) {
  if (!prop) return violation(R_INVALID_VALUE, "%s: no allocation properties", fn);
  if (prop->type != 1) return violation(R_INVALID_VALUE, "%s: allocation type %d is not PINNED", fn, prop->type);
  if (prop->loc.type != 1)
    return violation(R_INVALID_VALUE, "%s: location type %d is not DEVICE", fn, prop->loc.type);
  if (!ordinal_ok(prop->loc.id))
    return violation(R_INVALID_DEVICE, "%s: location id %d is not a device ordinal", fn, prop->loc.id);
  return R_OK;
}

API(CUresult, cuMemGetAllocationGranularity, (size_t *g, const fk_prop *prop, int option)) {
  LOCK();
  CUresult r = check_vm("cuMemGetAllocationGranularity");
  if (r) RET(r);
  r = check_prop("cuMemGetAllocationGranularity", prop);
  if (r) RET(r);
  if (!g || (option != 0 && option != 1))
    RET(violation(R_INVALID_VALUE, "cuMemGetAllocationGranularity: option %d", option));
  *g = (size_t)G.cfg.granularity;
  RET(R_OK);
}

API(CUresult, cuMemAddressReserve, (CUdeviceptr *p, size_t size, size_t align, CUdeviceptr addr,
                                     unsigned long long flags)) {
  LOCK();
  CUresult r = check_vm("cuMemAddressReserve");
  if (r) RET(r);
  uint64_t g = G.cfg.granularity;
  if (!p) RET(violation(R_INVALID_VALUE, "cuMemAddressReserve(NULL)"));
  if (size == 0 || size % g)
    RET(violation(R_INVALID_VALUE, "cuMemAddressReserve: size %zu is not a non-zero multiple of the granule %llu",
                  size, (unsigned long long)g));
  if (align & (align - 1))
    RET(violation(R_INVALID_VALUE, "cuMemAddressReserve: alignment %zu is not a power of two", align));
  if (flags) RET(violation(R_INVALID_VALUE, "cuMemAddressReserve: flags 0x%llx", flags));
  (void)addr; /* a hint; the fake never honours it */
  *p = bump_va(size, align > g ? align : g);
  PUSH(G.resvs, ((resv_rec){*p, size}));
  G.c.address_reserve++;
  RET(R_OK);
}

API(CUresult, cuMemAddressFree, (CUdeviceptr p, size_t size)) {
  LOCK();
  CUresult r = check_vm("cuMemAddressFree");
  if (r) RET(r);
  for (size_t i = 0; i < G.resvs.n; i++) {
    if (G.resvs.v[i].base != p) continue;
    if (G.resvs.v[i].size != size)
      RET(violation(R_INVALID_VALUE, "cuMemAddressFree(0x%llx, %zu): the reservation is %llu bytes", p,
                    size, (unsigned long long)G.resvs.v[i].size));
    size_t k = map_lower(p);
    if (k < G.maps.n && G.maps.v[k].va < p + size)
      RET(violation(R_INVALID_VALUE, "cuMemAddressFree(0x%llx): mappings remain in the range", p));
    DROP(G.resvs, i);
    G.c.address_free++;
    RET(R_OK);
  }
  RET(violation(R_INVALID_VALUE, "cuMemAddressFree(0x%llx, %zu): not a reservation", p, size));
}

API(CUresult, cuMemCreate, (CUhandle *h, size_t size, const fk_prop *prop, unsigned long long flags)) {
  LOCK();
  if (G.cfg.create_delay_ns) { /* a driver's latency: spin, so the time is the caller's */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do clock_gettime(CLOCK_MONOTONIC, &t1);
    while ((uint64_t)(t1.tv_sec - t0.tv_sec) * 1000000000u + (uint64_t)(t1.tv_nsec - t0.tv_nsec) <
           G.cfg.create_delay_ns);
  }
  CUresult r = check_vm("cuMemCreate");
  if (r) RET(r);
  r = check_prop("cuMemCreate", prop);
  if (r) RET(r);
  uint64_t g = G.cfg.granularity;
  if (!h) RET(violation(R_INVALID_VALUE, "cuMemCreate(NULL)"));
  if (size == 0 || size % g)
    RET(violation(R_INVALID_VALUE, "cuMemCreate: size %zu is not a non-zero multiple of the granule %llu",
                  size, (unsigned long long)g));
  if (flags) RET(violation(R_INVALID_VALUE, "cuMemCreate: flags 0x%llx", flags));
  int d = prop->loc.id;
  if (G.c.used[d] + size > dev_capacity()) RET(R_OOM);
  *h = G.next_handle++;
  PUSH(G.handles, ((handle_rec){.h = *h, .size = size, .dev = d, .maps = 0, .refs = 1}));
  use(d, size);
  G.c.create++;
  RET(R_OK);
}

API(CUresult, cuMemRelease, (CUhandle h)) {
  LOCK();
  CUresult r = check_vm("cuMemRelease");
  if (r) RET(r);
  size_t i;
  handle_rec *hr = find_handle(h, &i);
  if (!hr || hr->refs == 0)
    RET(violation(R_INVALID_VALUE, "cuMemRelease(%llu): not a live memory handle", h));
  if (G.cfg.fail_releases > 0) { /* an injected driver failure: nothing changes */
    G.cfg.fail_releases--;
    RET(999);
  }
  hr->refs--;
  handle_drop_if_done(i);
  G.c.release++;
  RET(R_OK);
}

API(CUresult, cuMemRetainAllocationHandle, (CUhandle *h, void *addr)) {
  LOCK();
  CUresult r = check_vm("cuMemRetainAllocationHandle");
  if (r) RET(r);
  if (!h) RET(violation(R_INVALID_VALUE, "cuMemRetainAllocationHandle(NULL)"));
  CUdeviceptr p = (CUdeviceptr)(uintptr_t)addr;
  size_t k = map_lower(p);
  if (k >= G.maps.n || G.maps.v[k].va > p)
    RET(violation(R_INVALID_VALUE, "cuMemRetainAllocationHandle(0x%llx): no mapping covers the address",
                  p));
  handle_rec *hr = find_handle(G.maps.v[k].h, NULL);
  if (!hr) abort(); /* a mapped handle always has its record: the fake is broken */
  hr->refs++;
  *h = hr->h;
  G.c.mem_retain++;
  RET(R_OK);
}

API(CUresult, cuMemMap, (CUdeviceptr p, size_t size, size_t offset, CUhandle h,
                          unsigned long long flags)) {
  LOCK();
  CUresult r = check_vm("cuMemMap");
  if (r) RET(r);
  uint64_t g = G.cfg.granularity;
  handle_rec *hr = find_handle(h, NULL);
  if (!hr || hr->refs == 0) RET(violation(R_INVALID_VALUE, "cuMemMap: handle %llu is not live", h));
  if (flags) RET(violation(R_INVALID_VALUE, "cuMemMap: flags 0x%llx", flags));
  if (size == 0 || size % g || p % g || offset % g)
    RET(violation(R_INVALID_VALUE, "cuMemMap(0x%llx, %zu, offset %zu): not multiples of the granule %llu", p,
                  size, offset, (unsigned long long)g));
  if (offset > hr->size || size > hr->size - offset)
    RET(violation(R_INVALID_VALUE, "cuMemMap: offset %zu + size %zu exceed the %llu-byte handle", offset, size,
                  (unsigned long long)hr->size));
  if (!resv_containing(p, size))
    RET(violation(R_INVALID_VALUE, "cuMemMap(0x%llx, %zu): not inside one reservation", p, size));
  size_t k = map_lower(p);
  if (k < G.maps.n && G.maps.v[k].va < p + size)
    RET(violation(R_INVALID_VALUE, "cuMemMap(0x%llx, %zu): overlaps the mapping at 0x%llx", p, size,
                  G.maps.v[k].va));
  map_rec m = {p, size, h, hr->dev, 0};
  PUSH(G.maps, m); /* keep sorted: shift into place */
  memmove(G.maps.v + k + 1, G.maps.v + k, (G.maps.n - 1 - k) * sizeof m);
  G.maps.v[k] = m;
  hr->maps++;
  G.c.map++;
  RET(R_OK);
}

API(CUresult, cuMemUnmap, (CUdeviceptr p, size_t size)) {
  LOCK();
  CUresult r = check_vm("cuMemUnmap");
  if (r) RET(r);
  size_t first, n;
  if (!fully_mapped(p, size, &first, &n) || G.maps.v[first].va != p ||
      G.maps.v[first + n - 1].va + G.maps.v[first + n - 1].size != p + size)
    RET(violation(R_INVALID_VALUE, "cuMemUnmap(0x%llx, %zu): not exactly whole mappings", p, size));
  for (size_t i = 0; i < G.work.n; i++)
    if (overlaps(G.work.v[i].ptr, G.work.v[i].size, p, size)) {
      violation(R_INVALID_VALUE, "cuMemUnmap(0x%llx, %zu) while work of stream %llu still uses it", p,
                size, (unsigned long long)G.work.v[i].uid);
      break;
    }
  for (size_t i = first; i < first + n; i++) {
    size_t hi;
    handle_rec *hr = find_handle(G.maps.v[i].h, &hi);
    if (hr) {
      hr->maps--;
      handle_drop_if_done(hi);
    }
  }
  memmove(G.maps.v + first, G.maps.v + first + n, (G.maps.n - first - n) * sizeof *G.maps.v);
  G.maps.n -= n;
  G.c.unmap++;
  RET(R_OK);
}

API(CUresult, cuMemSetAccess, (CUdeviceptr p, size_t size, const fk_access *desc, size_t count)) {
  LOCK();
  CUresult r = check_vm("cuMemSetAccess");
  if (r) RET(r);
  size_t first, n;
  if (!desc || count == 0) RET(violation(R_INVALID_VALUE, "cuMemSetAccess: no descriptors"));
  if (!fully_mapped(p, size, &first, &n))
    RET(violation(R_INVALID_VALUE, "cuMemSetAccess(0x%llx, %zu): the range is not entirely mapped", p, size));
  for (size_t k = 0; k < count; k++) {
    if (desc[k].loc.type != 1 || !ordinal_ok(desc[k].loc.id))
      RET(violation(R_INVALID_DEVICE, "cuMemSetAccess: descriptor %zu names location %d/%d", k,
                    desc[k].loc.type, desc[k].loc.id));
    if (desc[k].flags != 0 && desc[k].flags != 1 && desc[k].flags != 3)
      RET(violation(R_INVALID_VALUE, "cuMemSetAccess: flags %d", desc[k].flags));
    for (size_t i = first; i < first + n; i++)
      if (desc[k].loc.id != G.maps.v[i].dev && !G.cfg.peer)
        RET(violation(R_INVALID_DEVICE, "cuMemSetAccess: device %d cannot access memory of device %d "
                                        "(no peer capability)", desc[k].loc.id, G.maps.v[i].dev));
  }
  for (size_t k = 0; k < count; k++)
    for (size_t i = first; i < first + n; i++) {
      unsigned bit = 1u << desc[k].loc.id;
      if (desc[k].flags == 3) G.maps.v[i].access |= bit;
      else G.maps.v[i].access &= ~bit;
    }
  G.c.set_access++;
  RET(R_OK);
}
