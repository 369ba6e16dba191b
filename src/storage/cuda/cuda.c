/*
 * cuda.c - CUDA device and pinned-host storages over the driver API, loaded
 * at run time (spec §2.1, §2.2; cubemem/cuda.h): driver loading, the
 * entry-point table, devices, contexts, stream identity and the events on
 * any stream. The storages are in cuda_storage.c, their records in
 * cuda_entries.c, their virtual memory in cuda_vm.c; the driver ABI and the
 * shared layout in cuda_internal.h. The entry-point table is the bottom of
 * the CUDA files: the three others call into it, it calls none of them.
 *
 * Loading. A device owns a table of driver entry points, resolved by name
 * from dlopen(CM_CUDA_LIBRARY or "libcuda.so.1") or from a caller's resolver.
 * There is no process-global table: each device resolves its own (dlopen is
 * reference counted by the loader, so this costs one lookup per symbol per
 * device open). The library is never dlclose'd once cuInit has run, because
 * the driver registers process-exit handlers inside itself.
 *
 * Exports: cm_cuda_* (cubemem/cuda.h), with cuda_storage.c and cuda_vm.c.
 */
#include "cubemem/cuda.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "storage/cuda/cuda_internal.h"

/* ---- entry-point table ------------------------------------------------------ */

typedef struct sym_def {
  const char *name;     /* exported name */
  const char *fallback; /* older name with the same signature, or NULL */
  size_t offset;        /* where in cu_api */
  bool required;
} sym_def;

#define SYM(field, name, fb, req) {name, fb, offsetof(cu_api, field), req}
static const sym_def k_syms[] = {
    SYM(Init, "cuInit", NULL, true),
    SYM(GetErrorName, "cuGetErrorName", NULL, true),
    SYM(GetErrorString, "cuGetErrorString", NULL, true),
    SYM(DeviceGetCount, "cuDeviceGetCount", NULL, true),
    SYM(DeviceGet, "cuDeviceGet", NULL, true),
    SYM(DeviceGetName, "cuDeviceGetName", NULL, true),
    SYM(DeviceTotalMem, "cuDeviceTotalMem_v2", NULL, true),
    SYM(PrimaryCtxRetain, "cuDevicePrimaryCtxRetain", NULL, true),
    SYM(PrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease", true),
    SYM(CtxPushCurrent, "cuCtxPushCurrent_v2", NULL, true),
    SYM(CtxPopCurrent, "cuCtxPopCurrent_v2", NULL, true),
    SYM(MemAlloc, "cuMemAlloc_v2", NULL, true),
    SYM(MemFree, "cuMemFree_v2", NULL, true),
    SYM(MemGetInfo, "cuMemGetInfo_v2", NULL, true),
    SYM(MemAllocHost, "cuMemAllocHost_v2", NULL, true),
    SYM(MemFreeHost, "cuMemFreeHost", NULL, true),
    SYM(EventCreate, "cuEventCreate", NULL, true),
    SYM(EventRecord, "cuEventRecord", NULL, true),
    SYM(EventQuery, "cuEventQuery", NULL, true),
    SYM(EventSynchronize, "cuEventSynchronize", NULL, true),
    SYM(EventDestroy, "cuEventDestroy_v2", NULL, true),
    SYM(StreamSynchronize, "cuStreamSynchronize", NULL, true),
    SYM(DeviceGetAttribute, "cuDeviceGetAttribute", NULL, true),
    SYM(CtxSynchronize, "cuCtxSynchronize", NULL, true),
    SYM(DeviceCanAccessPeer, "cuDeviceCanAccessPeer", NULL, false),
    SYM(StreamGetId, "cuStreamGetId", NULL, false),
    SYM(MemAllocAsync, "cuMemAllocAsync", NULL, false),
    SYM(MemFreeAsync, "cuMemFreeAsync", NULL, false),
    SYM(MemAddressReserve, "cuMemAddressReserve", NULL, false),
    SYM(MemAddressFree, "cuMemAddressFree", NULL, false),
    SYM(MemCreate, "cuMemCreate", NULL, false),
    SYM(MemRelease, "cuMemRelease", NULL, false),
    SYM(MemMap, "cuMemMap", NULL, false),
    SYM(MemUnmap, "cuMemUnmap", NULL, false),
    SYM(MemSetAccess, "cuMemSetAccess", NULL, false),
    SYM(MemGetAllocationGranularity, "cuMemGetAllocationGranularity", NULL, false),
    SYM(MemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2", NULL, false),
    SYM(MemRetainAllocationHandle, "cuMemRetainAllocationHandle", NULL, false),
};
#undef SYM

/* ---- device ---------------------------------------------------------------- */

#define CM_CUDA_DEFAULT_LIBRARY "libcuda.so.1"

static void *dl_resolve(void *lib, const char *name) { return dlsym(lib, name); }

static const char *library_path(const char *library) {
  if (library && *library) return library;
  const char *env = secure_getenv("CM_CUDA_LIBRARY");
  return (env && *env) ? env : CM_CUDA_DEFAULT_LIBRARY;
}

/* "CUDA_ERROR_X (text)" for a driver result. */
void cm__cuda_describe(const cu_api *api, CUresult r, char *buf, size_t cap) {
  const char *name = NULL, *text = NULL;
  if (!api->GetErrorName || api->GetErrorName(r, &name) != CUDA_SUCCESS || !name)
    name = "CUDA_ERROR_UNKNOWN";
  if (!api->GetErrorString || api->GetErrorString(r, &text) != CUDA_SUCCESS || !text)
    text = "unrecognised error code";
  snprintf(buf, cap, "%s (%s, CUresult %d)", name, text, r);
}

int cm__cuda_driver_error(const cu_api *api, cm_diag_t *diag, int code, CUresult r,
                          const char *what) {
  char d[256];
  cm__cuda_describe(api, r, d, sizeof d);
  cm__diag_set(diag, code, "%s failed: %s", what, d);
  if (diag) diag->native = r;
  return code;
}

/* Fill api from resolve(); returns the first missing required name or NULL. */
static const char *resolve_all(cu_api *api, cm_cuda_symbol_fn resolve, void *arg) {
  memset(api, 0, sizeof *api);
  for (size_t i = 0; i < sizeof k_syms / sizeof k_syms[0]; i++) {
    void *f = resolve(arg, k_syms[i].name);
    if (!f && k_syms[i].fallback) f = resolve(arg, k_syms[i].fallback);
    if (!f && k_syms[i].required) return k_syms[i].name;
    memcpy((char *)api + k_syms[i].offset, &f, sizeof f);
  }
  return NULL;
}

static int device_init(cm_cuda_device_t *d, int ordinal, const char *origin, cm_diag_t *diag) {
  cu_api *a = &d->api;
  CUresult r = a->Init(0);
  if (r != CUDA_SUCCESS) {
    char buf[256];
    cm__cuda_describe(a, r, buf, sizeof buf);
    cm__diag_set(diag, CM_ENODEV, "no usable CUDA device: cuInit failed in %s: %s", origin, buf);
    if (diag) diag->native = r;
    return CM_ENODEV;
  }
  int count = 0;
  r = a->DeviceGetCount(&count);
  if (r != CUDA_SUCCESS) return cm__cuda_driver_error(a, diag, CM_ENODEV, r, "cuDeviceGetCount");
  if (ordinal >= count)
    return cm__diag_set(diag, CM_ENODEV, "CUDA device %d not found: the driver sees %d device(s)",
                        ordinal, count);
  r = a->DeviceGet(&d->dev, ordinal);
  if (r != CUDA_SUCCESS) return cm__cuda_driver_error(a, diag, CM_ENODEV, r, "cuDeviceGet");
  size_t total = 0;
  r = a->DeviceTotalMem(&total, d->dev);
  if (r != CUDA_SUCCESS) return cm__cuda_driver_error(a, diag, CM_ENODEV, r, "cuDeviceTotalMem_v2");
  d->total = total;
  r = a->DeviceGetName(d->name, (int)sizeof d->name - 1, d->dev);
  if (r != CUDA_SUCCESS) snprintf(d->name, sizeof d->name, "CUDA device %d", ordinal);
  d->name[sizeof d->name - 1] = '\0';
  /* Feature probing: a device without virtual memory management or memory
   * pools gets plain allocations (cuMemAlloc) instead. A driver older than
   * the attribute answers CUDA_ERROR_INVALID_VALUE: the feature is absent.
   * Any other failure is an error (it would be guessing). */
  int v = 0;
  r = a->DeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, d->dev);
  if (r != CUDA_SUCCESS && r != CUDA_ERROR_INVALID_VALUE)
    return cm__cuda_driver_error(a, diag, CM_ENODEV, r,
                                 "cuDeviceGetAttribute(VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)");
  d->vmm = r == CUDA_SUCCESS && v != 0;
  v = 0;
  r = a->DeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, d->dev);
  if (r != CUDA_SUCCESS && r != CUDA_ERROR_INVALID_VALUE)
    return cm__cuda_driver_error(a, diag, CM_ENODEV, r,
                                 "cuDeviceGetAttribute(MEMORY_POOLS_SUPPORTED)");
  d->mempool = r == CUDA_SUCCESS && v != 0;
  r = a->PrimaryCtxRetain(&d->ctx, d->dev);
  if (r != CUDA_SUCCESS)
    return cm__cuda_driver_error(a, diag, CM_ENODEV, r, "cuDevicePrimaryCtxRetain");
  if (pthread_mutex_init(&d->lock, NULL) != 0) {
    (void)a->PrimaryCtxRelease(d->dev);
    return cm__diag_set(diag, CM_ENOMEM, "cannot create the CUDA device's mutex");
  }
  d->ordinal = ordinal;
  atomic_init(&d->refs, 1);
  return CM_OK;
}

int cm_cuda_device_open_resolver(cm_cuda_symbol_fn resolve, void *arg, int ordinal,
                                 cm_cuda_device_t **out, cm_diag_t *diag) {
  if (!out) return cm__diag_set(diag, CM_EINVAL, "cm_cuda_device_open: out is NULL");
  *out = NULL;
  if (!resolve) return cm__diag_set(diag, CM_EINVAL, "cm_cuda_device_open: resolver is NULL");
  if (ordinal < 0) return cm__diag_set(diag, CM_EINVAL, "CUDA device ordinal %d is negative", ordinal);
  cm_cuda_device_t *d = calloc(1, sizeof *d);
  if (!d) return cm__diag_set(diag, CM_ENOMEM, "out of host memory opening a CUDA device");
  const char *missing = resolve_all(&d->api, resolve, arg);
  if (missing) {
    free(d);
    return cm__diag_set(diag, CM_ENODEV,
                        "the CUDA driver entry point %s is missing (driver too old?)", missing);
  }
  int rc = device_init(d, ordinal, "the supplied driver", diag);
  if (rc != CM_OK) {
    free(d);
    return rc;
  }
  *out = d;
  return CM_OK;
}

int cm_cuda_device_open_library(const char *library, int ordinal, cm_cuda_device_t **out,
                                cm_diag_t *diag) {
  if (!out) return cm__diag_set(diag, CM_EINVAL, "cm_cuda_device_open: out is NULL");
  *out = NULL;
  if (ordinal < 0) return cm__diag_set(diag, CM_EINVAL, "CUDA device ordinal %d is negative", ordinal);
  const char *path = library_path(library);
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char *e = dlerror();
    return cm__diag_set(diag, CM_ENODEV,
                        "CUDA driver not available: %s (set CM_CUDA_LIBRARY to the driver "
                        "library's path if it is installed elsewhere)",
                        e ? e : path);
  }
  cm_cuda_device_t *d = calloc(1, sizeof *d);
  if (!d) {
    dlclose(lib);
    return cm__diag_set(diag, CM_ENOMEM, "out of host memory opening a CUDA device");
  }
  const char *missing = resolve_all(&d->api, dl_resolve, lib);
  if (missing) {
    free(d);
    dlclose(lib); /* cuInit never ran: unloading is safe */
    return cm__diag_set(diag, CM_ENODEV, "%s is not a usable CUDA driver: it lacks %s", path,
                        missing);
  }
  d->lib = lib;
  int rc = device_init(d, ordinal, path, diag);
  if (rc != CM_OK) {
    free(d); /* the library stays loaded: cuInit may have run */
    return rc;
  }
  *out = d;
  return CM_OK;
}

int cm_cuda_device_open(int ordinal, cm_cuda_device_t **out, cm_diag_t *diag) {
  return cm_cuda_device_open_library(NULL, ordinal, out, diag);
}

void cm__cuda_device_unref(cm_cuda_device_t *d) {
  if (!d) return;
  if (atomic_fetch_sub(&d->refs, 1) != 1) return;
  (void)d->api.PrimaryCtxRelease(d->dev); /* nothing to do about a refusal at teardown */
  pthread_mutex_destroy(&d->lock);
  free(d); /* d->lib stays loaded: see the header comment */
}

void cm__cuda_device_ref(cm_cuda_device_t *d) { atomic_fetch_add(&d->refs, 1); }

void cm_cuda_device_close(cm_cuda_device_t *dev) { cm__cuda_device_unref(dev); }

int cm_cuda_device_ordinal(const cm_cuda_device_t *dev) { return dev ? dev->ordinal : -1; }
uint64_t cm_cuda_device_total_memory(const cm_cuda_device_t *dev) { return dev ? dev->total : 0; }
const char *cm_cuda_device_name(const cm_cuda_device_t *dev) { return dev ? dev->name : ""; }

cm_device_props_t cm_cuda_device_props(const cm_cuda_device_t *dev) {
  cm_device_props_t p = {.max_page_size = dev ? dev->total / 4 : 0, .alignment = 512};
  return p;
}

int cm__cuda_ctx_push(cm_cuda_device_t *d, cm_diag_t *diag) {
  CUresult r = d->api.CtxPushCurrent(d->ctx);
  if (r != CUDA_SUCCESS)
    return cm__cuda_driver_error(&d->api, diag, CM_ESTORAGE, r, "cuCtxPushCurrent_v2");
  return CM_OK;
}

void cm__cuda_ctx_pop(cm_cuda_device_t *d) {
  CUcontext c;
  (void)d->api.CtxPopCurrent(&c);
}

int cm_cuda_device_mem_info(cm_cuda_device_t *dev, uint64_t *free_bytes, uint64_t *total_bytes,
                            cm_diag_t *diag) {
  if (!dev) return cm__diag_set(diag, CM_EINVAL, "cm_cuda_device_mem_info: device is NULL");
  int rc = cm__cuda_ctx_push(dev, diag);
  if (rc != CM_OK) return rc;
  size_t f = 0, t = 0;
  CUresult r = dev->api.MemGetInfo(&f, &t);
  cm__cuda_ctx_pop(dev);
  if (r != CUDA_SUCCESS)
    return cm__cuda_driver_error(&dev->api, diag, CM_ESTORAGE, r, "cuMemGetInfo_v2");
  if (free_bytes) *free_bytes = f;
  if (total_bytes) *total_bytes = t;
  return CM_OK;
}

int cm_cuda_device_count(int *out, cm_diag_t *diag) {
  if (!out) return cm__diag_set(diag, CM_EINVAL, "cm_cuda_device_count: out is NULL");
  *out = 0;
  const char *path = library_path(NULL);
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char *e = dlerror();
    return cm__diag_set(diag, CM_ENODEV, "CUDA driver not available: %s", e ? e : path);
  }
  cu_api api;
  const char *missing = resolve_all(&api, dl_resolve, lib);
  if (missing) {
    dlclose(lib);
    return cm__diag_set(diag, CM_ENODEV, "%s is not a usable CUDA driver: it lacks %s", path,
                        missing);
  }
  CUresult r = api.Init(0);
  if (r != CUDA_SUCCESS) return cm__cuda_driver_error(&api, diag, CM_ENODEV, r, "cuInit");
  int n = 0;
  r = api.DeviceGetCount(&n);
  if (r != CUDA_SUCCESS) return cm__cuda_driver_error(&api, diag, CM_ENODEV, r, "cuDeviceGetCount");
  *out = n;
  return CM_OK;
}

int cm_cuda_device_open_default(cm_cuda_device_t **out, cm_diag_t *diag) {
  if (!out) return cm__diag_set(diag, CM_EINVAL, "cm_cuda_device_open_default: out is NULL");
  *out = NULL;
  int ordinal = 0;
  const char *env = secure_getenv("CM_CUDA_DEVICE");
  if (env && *env) {
    char *end = NULL;
    long v = strtol(env, &end, 10);
    if (*end != '\0' || v < 0 || v > 1024)
      return cm__diag_set(diag, CM_EINVAL, "CM_CUDA_DEVICE=\"%s\" is not a device ordinal", env);
    ordinal = (int)v;
  }
  return cm_cuda_device_open(ordinal, out, diag);
}

/* ---- features, stream identity ------------------------------------------------ */

bool cm_cuda_device_has_vmm(const cm_cuda_device_t *dev) { return dev && dev->vmm; }
bool cm_cuda_device_has_mempool(const cm_cuda_device_t *dev) { return dev && dev->mempool; }

int cm_cuda_stream_identity(cm_cuda_device_t *dev, void *stream, uint64_t *out, cm_diag_t *diag) {
  if (!dev || !out) return cm__diag_set(diag, CM_EINVAL, "cm_cuda_stream_identity: NULL argument");
  if (!dev->api.StreamGetId)
    return cm__diag_set(diag, CM_ENOTSUP, "this CUDA driver has no cuStreamGetId (CUDA < 12.0)");
  int rc = cm__cuda_ctx_push(dev, diag);
  if (rc != CM_OK) return rc;
  unsigned long long id = 0;
  CUresult r = dev->api.StreamGetId((CUstream)stream, &id);
  cm__cuda_ctx_pop(dev);
  if (r != CUDA_SUCCESS)
    return cm__cuda_driver_error(&dev->api, diag, CM_ESTREAM, r, "cuStreamGetId");
  *out = id;
  return CM_OK;
}

int cm_cuda_stream_identity_fn(void *arg, void *stream, uint64_t *out, cm_diag_t *diag) {
  const cm_cuda_factory_t *f = arg;
  if (!f) return cm__diag_set(diag, CM_EINVAL, "cm_cuda_stream_identity_fn: arg is NULL");
  return cm_cuda_stream_identity(f->device, stream, out, diag);
}

/* ---- events on any stream (cm_ptr_config_t event hooks) ----------------------- */

int cm_cuda_event_record_fn(void *arg, void *stream, void **out, cm_diag_t *diag) {
  const cm_cuda_factory_t *f = arg;
  if (!f || !f->device || !out) return cm__diag_set(diag, CM_EINVAL, "cm_cuda_event_record_fn: NULL");
  cm_cuda_device_t *dev = f->device;
  const cu_api *a = &dev->api;
  int rc = cm__cuda_ctx_push(dev, diag);
  if (rc != CM_OK) return rc;
  CUevent ev = NULL;
  CUresult r = a->EventCreate(&ev, CU_EVENT_DISABLE_TIMING);
  if (r != CUDA_SUCCESS) {
    cm__cuda_ctx_pop(dev);
    return cm__cuda_driver_error(a, diag, CM_ESTORAGE, r, "cuEventCreate");
  }
  r = a->EventRecord(ev, (CUstream)stream);
  if (r != CUDA_SUCCESS) {
    (void)a->EventDestroy(ev);
    cm__cuda_ctx_pop(dev);
    return cm__cuda_driver_error(a, diag, CM_ESTREAM, r, "cuEventRecord");
  }
  cm__cuda_ctx_pop(dev);
  *out = ev;
  return CM_OK;
}

int cm_cuda_event_query_fn(void *arg, void *event) {
  const cm_cuda_factory_t *f = arg;
  if (!f || !f->device || !event) return CM_EINVAL;
  if (cm__cuda_ctx_push(f->device, NULL) != CM_OK) return CM_ESTORAGE;
  CUresult r = f->device->api.EventQuery((CUevent)event);
  cm__cuda_ctx_pop(f->device);
  if (r == CUDA_SUCCESS) return 1;
  if (r == CUDA_ERROR_NOT_READY) return 0;
  return CM_ESTORAGE;
}

void cm_cuda_event_destroy_fn(void *arg, void *event) {
  const cm_cuda_factory_t *f = arg;
  if (!f || !f->device || !event) return;
  if (cm__cuda_ctx_push(f->device, NULL) != CM_OK) return;
  (void)f->device->api.EventDestroy((CUevent)event); /* nothing to do about a refusal */
  cm__cuda_ctx_pop(f->device);
}
