/*
 * cuda.c - CUDA device and pinned-host storages over the driver API, loaded
 * at run time (spec §2.1, §2.2; cubemem/cuda.h).
 *
 * Loading. A device owns a table of driver entry points, resolved by name
 * from dlopen(CM_CUDA_LIBRARY or "libcuda.so.1") or from a caller's resolver.
 * There is no process-global table: each device resolves its own (dlopen is
 * reference counted by the loader, so this costs one lookup per symbol per
 * device open). The library is never dlclose'd once cuInit has run, because
 * the driver registers process-exit handlers inside itself.
 *
 * Driver ABI. Declared here by hand (no CUDA headers needed to build); the
 * signatures and constants follow NVIDIA's CUDA Driver API reference and
 * cuda.h (CUDA 11/12):
 *   CUresult is an int enum: CUDA_SUCCESS 0, CUDA_ERROR_OUT_OF_MEMORY 2,
 *   CUDA_ERROR_NOT_READY 600. CUdevice is int; CUcontext/CUstream/CUevent are
 *   opaque pointers; CUdeviceptr and CUmemGenericAllocationHandle are
 *   unsigned long long on 64-bit platforms.
 *   Versioned exports (the plain names are the pre-v2 ABI and must not be
 *   used): cuDeviceTotalMem_v2, cuCtxPushCurrent_v2, cuCtxPopCurrent_v2,
 *   cuMemAlloc_v2, cuMemFree_v2, cuMemGetInfo_v2, cuMemAllocHost_v2,
 *   cuEventDestroy_v2, cuDevicePrimaryCtxRelease_v2 (CUDA >= 11; falls back
 *   to cuDevicePrimaryCtxRelease). Unversioned: cuInit, cuDeviceGet,
 *   cuDeviceGetCount, cuDeviceGetName, cuDevicePrimaryCtxRetain,
 *   cuMemFreeHost, cuEventCreate, cuEventRecord, cuEventQuery,
 *   cuEventSynchronize, cuStreamSynchronize, cuGetErrorName,
 *   cuGetErrorString, cuDeviceGetAttribute (VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
 *   102, MEMORY_POOLS_SUPPORTED 115), cuCtxSynchronize; optional:
 *   cuDeviceCanAccessPeer, cuStreamGetId (CUDA >= 12.0); stream-ordered
 *   (CUDA >= 11.2, optional here):
 *   cuMemAllocAsync, cuMemFreeAsync; virtual memory (CUDA >= 10.2, optional):
 *   cuMemAddressReserve, cuMemAddressFree, cuMemCreate, cuMemRelease,
 *   cuMemMap, cuMemUnmap, cuMemSetAccess, cuMemGetAllocationGranularity.
 *   CUmemAllocationProp = {int type; int requestedHandleTypes;
 *   {int type; int id} location; void *win32HandleMetaData; {u8
 *   compressionType; u8 gpuDirectRDMACapable; u16 usage; u8 reserved[4]}
 *   allocFlags} (32 bytes); CUmemAccessDesc = {location; int flags}.
 *   CU_MEM_ALLOCATION_TYPE_PINNED 1, CU_MEM_LOCATION_TYPE_DEVICE 1,
 *   CU_MEM_ACCESS_FLAGS_PROT_READWRITE 3, CU_MEM_ALLOC_GRANULARITY_MINIMUM 0,
 *   CU_EVENT_DISABLE_TIMING 2.
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
 *
 * Exports: cm_cuda_* (cubemem/cuda.h).
 */
#include "cubemem/cuda.h"

#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/util.h"
#include "ptr/u64map.h"
#include "storage/storage_internal.h"

/* ---- driver ABI (see the header comment for the source) ------------------ */

typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long CUmemGenericAllocationHandle;

#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_OUT_OF_MEMORY 2
#define CUDA_ERROR_NOT_READY 600
#define CU_EVENT_DISABLE_TIMING 2u
#define CU_MEM_ALLOCATION_TYPE_PINNED 1
#define CU_MEM_LOCATION_TYPE_DEVICE 1
#define CU_MEM_ACCESS_FLAGS_PROT_READWRITE 3
#define CU_MEM_ALLOC_GRANULARITY_MINIMUM 0
#define CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED 102
#define CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED 115
#define CM_CUDA_MAX_PEERS 64

typedef struct cu_mem_location {
  int type;
  int id;
} cu_mem_location;

typedef struct cu_alloc_prop {
  int type;
  int requested_handle_types;
  cu_mem_location location;
  void *win32_handle_metadata;
  struct {
    unsigned char compression_type;
    unsigned char gpu_direct_rdma_capable;
    unsigned short usage;
    unsigned char reserved[4];
  } alloc_flags;
} cu_alloc_prop;

typedef struct cu_access_desc {
  cu_mem_location location;
  int flags;
} cu_access_desc;

_Static_assert(sizeof(cu_alloc_prop) == 32, "CUmemAllocationProp is 32 bytes on LP64");
_Static_assert(sizeof(cu_access_desc) == 12, "CUmemAccessDesc is 12 bytes");

typedef struct cu_api {
  CUresult (*Init)(unsigned int flags);
  CUresult (*GetErrorName)(CUresult e, const char **s);
  CUresult (*GetErrorString)(CUresult e, const char **s);
  CUresult (*DeviceGetCount)(int *n);
  CUresult (*DeviceGet)(CUdevice *d, int ordinal);
  CUresult (*DeviceGetName)(char *name, int len, CUdevice d);
  CUresult (*DeviceTotalMem)(size_t *bytes, CUdevice d);
  CUresult (*PrimaryCtxRetain)(CUcontext *ctx, CUdevice d);
  CUresult (*PrimaryCtxRelease)(CUdevice d);
  CUresult (*CtxPushCurrent)(CUcontext ctx);
  CUresult (*CtxPopCurrent)(CUcontext *ctx);
  CUresult (*MemAlloc)(CUdeviceptr *p, size_t n);
  CUresult (*MemFree)(CUdeviceptr p);
  CUresult (*MemGetInfo)(size_t *free_b, size_t *total_b);
  CUresult (*MemAllocHost)(void **p, size_t n);
  CUresult (*MemFreeHost)(void *p);
  CUresult (*EventCreate)(CUevent *e, unsigned int flags);
  CUresult (*EventRecord)(CUevent e, CUstream s);
  CUresult (*EventQuery)(CUevent e);
  CUresult (*EventSynchronize)(CUevent e);
  CUresult (*EventDestroy)(CUevent e);
  CUresult (*StreamSynchronize)(CUstream s);
  CUresult (*DeviceGetAttribute)(int *v, int attrib, CUdevice d);
  CUresult (*CtxSynchronize)(void);
  /* optional */
  CUresult (*DeviceCanAccessPeer)(int *can, CUdevice d, CUdevice peer);
  CUresult (*StreamGetId)(CUstream s, unsigned long long *id);
  CUresult (*MemAllocAsync)(CUdeviceptr *p, size_t n, CUstream s);
  CUresult (*MemFreeAsync)(CUdeviceptr p, CUstream s);
  CUresult (*MemAddressReserve)(CUdeviceptr *p, size_t size, size_t align, CUdeviceptr addr,
                                unsigned long long flags);
  CUresult (*MemAddressFree)(CUdeviceptr p, size_t size);
  CUresult (*MemCreate)(CUmemGenericAllocationHandle *h, size_t size, const cu_alloc_prop *prop,
                        unsigned long long flags);
  CUresult (*MemRelease)(CUmemGenericAllocationHandle h);
  CUresult (*MemMap)(CUdeviceptr p, size_t size, size_t offset, CUmemGenericAllocationHandle h,
                     unsigned long long flags);
  CUresult (*MemUnmap)(CUdeviceptr p, size_t size);
  CUresult (*MemSetAccess)(CUdeviceptr p, size_t size, const cu_access_desc *desc, size_t count);
  CUresult (*MemGetAllocationGranularity)(size_t *g, const cu_alloc_prop *prop, int option);
} cu_api;

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
};
#undef SYM

/* ---- device ---------------------------------------------------------------- */

struct cuda_storage;

struct cm_cuda_device {
  _Atomic long refs; /* caller's reference + one per storage */
  void *lib;         /* dlopen handle, or NULL with a resolver */
  cu_api api;
  CUdevice dev;
  CUcontext ctx;
  int ordinal;
  uint64_t total;
  bool vmm;     /* CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED */
  bool mempool; /* CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED */
  char name[256];
  /* Peer access to VM mappings. `lock` guards peers, the list of device
   * storages and, while held, their VM records (vm_map / vm_unmap /
   * vm_release / release take it, so a grant never races a mapping change). */
  pthread_mutex_t lock;
  uint64_t peers;                /* bit per peer ordinal granted access */
  struct cuda_storage *storages; /* live device storages of this device */
};

#define CM_CUDA_DEFAULT_LIBRARY "libcuda.so.1"

static void *dl_resolve(void *lib, const char *name) { return dlsym(lib, name); }

static const char *library_path(const char *library) {
  if (library && *library) return library;
  const char *env = secure_getenv("CM_CUDA_LIBRARY");
  return (env && *env) ? env : CM_CUDA_DEFAULT_LIBRARY;
}

/* "CUDA_ERROR_X (text)" for a driver result. */
static void describe(const cu_api *api, CUresult r, char *buf, size_t cap) {
  const char *name = NULL, *text = NULL;
  if (!api->GetErrorName || api->GetErrorName(r, &name) != CUDA_SUCCESS || !name)
    name = "CUDA_ERROR_UNKNOWN";
  if (!api->GetErrorString || api->GetErrorString(r, &text) != CUDA_SUCCESS || !text)
    text = "unrecognised error code";
  snprintf(buf, cap, "%s (%s, CUresult %d)", name, text, r);
}

static int driver_error(const cu_api *api, cm_diag_t *diag, int code, CUresult r,
                        const char *what) {
  char d[256];
  describe(api, r, d, sizeof d);
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
    describe(a, r, buf, sizeof buf);
    cm__diag_set(diag, CM_ENODEV, "no usable CUDA device: cuInit failed in %s: %s", origin, buf);
    if (diag) diag->native = r;
    return CM_ENODEV;
  }
  int count = 0;
  r = a->DeviceGetCount(&count);
  if (r != CUDA_SUCCESS) return driver_error(a, diag, CM_ENODEV, r, "cuDeviceGetCount");
  if (ordinal >= count)
    return cm__diag_set(diag, CM_ENODEV, "CUDA device %d not found: the driver sees %d device(s)",
                        ordinal, count);
  r = a->DeviceGet(&d->dev, ordinal);
  if (r != CUDA_SUCCESS) return driver_error(a, diag, CM_ENODEV, r, "cuDeviceGet");
  size_t total = 0;
  r = a->DeviceTotalMem(&total, d->dev);
  if (r != CUDA_SUCCESS) return driver_error(a, diag, CM_ENODEV, r, "cuDeviceTotalMem_v2");
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
    return driver_error(a, diag, CM_ENODEV, r,
                        "cuDeviceGetAttribute(VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)");
  d->vmm = r == CUDA_SUCCESS && v != 0;
  v = 0;
  r = a->DeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, d->dev);
  if (r != CUDA_SUCCESS && r != CUDA_ERROR_INVALID_VALUE)
    return driver_error(a, diag, CM_ENODEV, r, "cuDeviceGetAttribute(MEMORY_POOLS_SUPPORTED)");
  d->mempool = r == CUDA_SUCCESS && v != 0;
  r = a->PrimaryCtxRetain(&d->ctx, d->dev);
  if (r != CUDA_SUCCESS) return driver_error(a, diag, CM_ENODEV, r, "cuDevicePrimaryCtxRetain");
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

static void device_unref(cm_cuda_device_t *d) {
  if (!d) return;
  if (atomic_fetch_sub(&d->refs, 1) != 1) return;
  (void)d->api.PrimaryCtxRelease(d->dev); /* nothing to do about a refusal at teardown */
  pthread_mutex_destroy(&d->lock);
  free(d); /* d->lib stays loaded: see the header comment */
}

static void device_ref(cm_cuda_device_t *d) { atomic_fetch_add(&d->refs, 1); }

void cm_cuda_device_close(cm_cuda_device_t *dev) { device_unref(dev); }

int cm_cuda_device_ordinal(const cm_cuda_device_t *dev) { return dev ? dev->ordinal : -1; }
uint64_t cm_cuda_device_total_memory(const cm_cuda_device_t *dev) { return dev ? dev->total : 0; }
const char *cm_cuda_device_name(const cm_cuda_device_t *dev) { return dev ? dev->name : ""; }

cm_device_props_t cm_cuda_device_props(const cm_cuda_device_t *dev) {
  cm_device_props_t p = {.max_page_size = dev ? dev->total / 4 : 0, .alignment = 512};
  return p;
}

static int ctx_push(cm_cuda_device_t *d, cm_diag_t *diag) {
  CUresult r = d->api.CtxPushCurrent(d->ctx);
  if (r != CUDA_SUCCESS) return driver_error(&d->api, diag, CM_ESTORAGE, r, "cuCtxPushCurrent_v2");
  return CM_OK;
}

static void ctx_pop(cm_cuda_device_t *d) {
  CUcontext c;
  (void)d->api.CtxPopCurrent(&c);
}

int cm_cuda_device_mem_info(cm_cuda_device_t *dev, uint64_t *free_bytes, uint64_t *total_bytes,
                            cm_diag_t *diag) {
  if (!dev) return cm__diag_set(diag, CM_EINVAL, "cm_cuda_device_mem_info: device is NULL");
  int rc = ctx_push(dev, diag);
  if (rc != CM_OK) return rc;
  size_t f = 0, t = 0;
  CUresult r = dev->api.MemGetInfo(&f, &t);
  ctx_pop(dev);
  if (r != CUDA_SUCCESS) return driver_error(&dev->api, diag, CM_ESTORAGE, r, "cuMemGetInfo_v2");
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
  if (r != CUDA_SUCCESS) return driver_error(&api, diag, CM_ENODEV, r, "cuInit");
  int n = 0;
  r = api.DeviceGetCount(&n);
  if (r != CUDA_SUCCESS) return driver_error(&api, diag, CM_ENODEV, r, "cuDeviceGetCount");
  *out = n;
  return CM_OK;
}

/* ---- storages ---------------------------------------------------------------- */

typedef enum entry_kind { K_ZERO, K_SYNC, K_ASYNC, K_VM, K_HOST } entry_kind;

typedef struct vm_mapping {
  uint64_t offset, size;
  CUmemGenericAllocationHandle handle;
} vm_mapping;

typedef struct entry {
  uint64_t id;
  CUdeviceptr ptr;   /* base (device address, or host address for K_HOST) */
  uint64_t size;     /* requested bytes */
  uint64_t reserved; /* K_VM: bytes of address space reserved */
  entry_kind kind;
  bool pending;          /* dealloc'ed, waiting for flush */
  struct entry *next;    /* pending list link */
  vm_mapping *maps;      /* K_VM mappings */
  size_t nmaps, capmaps;
} entry;

typedef struct cuda_storage {
  cm_cuda_device_t *dev;
  CUstream stream;
  cm_cuda_allocator_t kind;
  bool pinned;
  uint64_t next_id;
  cm__u64map entries;
  entry *pending;         /* intrusive list of dealloc'ed entries */
  uint64_t granularity;   /* VM granule, 0 = no VM */
  cu_alloc_prop prop;     /* VM physical allocation properties */
  bool async_ok;          /* the device has memory pools and the driver the async calls */
  bool retired;           /* the stream is gone: wait with cuCtxSynchronize, free with cuMemFree */
  struct cuda_storage *st_prev, *st_next; /* the device's list of storages (dev->lock) */
  _Atomic uint64_t async_allocs, sync_allocs, async_fallbacks, free_errors, npending;
} cuda_storage;

/* Wait for the work that may still use this storage's memory (context
 * pushed): the storage's stream, or, once its stream was destroyed, the
 * whole context (work queued on a destroyed stream still runs). */
static CUresult wait_idle(cuda_storage *s) {
  return s->retired ? s->dev->api.CtxSynchronize() : s->dev->api.StreamSynchronize(s->stream);
}

static uint64_t dev_alignment(void *ctx) {
  (void)ctx;
  return 512;
}
static uint64_t host_alignment(void *ctx) {
  (void)ctx;
  return 16;
}

/* The entry map of a device storage changes under dev->lock, so that a peer
 * grant (cm_cuda_device_enable_peer_access) can walk it from another thread. */
static void entries_lock(cuda_storage *s) {
  if (!s->pinned) pthread_mutex_lock(&s->dev->lock);
}
static void entries_unlock(cuda_storage *s) {
  if (!s->pinned) pthread_mutex_unlock(&s->dev->lock);
}

static entry *remove_entry(cuda_storage *s, uint64_t id) {
  entries_lock(s);
  entry *e = cm__u64map_remove(&s->entries, id);
  entries_unlock(s);
  return e;
}

static int add_entry(cuda_storage *s, entry *e, uint64_t *out_id) {
  e->id = s->next_id;
  entries_lock(s);
  int rc = cm__u64map_put(&s->entries, e->id, e);
  entries_unlock(s);
  if (rc != CM_OK) return rc;
  s->next_id++;
  *out_id = e->id;
  return CM_OK;
}

/* Free the memory of one entry (context pushed by the caller). Returns
 * CM_ESTORAGE when the driver refused a synchronous free. */
static int free_entry_memory(cuda_storage *s, entry *e) {
  const cu_api *a = &s->dev->api;
  CUresult r = CUDA_SUCCESS;
  switch (e->kind) {
    case K_ZERO: break;
    case K_SYNC: r = a->MemFree(e->ptr); break;
    case K_ASYNC:
      /* Stream-ordered free; errors are ignored as the reference does, but
       * counted. A retired storage's stream is gone: its callers waited for
       * the context, so a plain free is safe. */
      if (s->retired) r = a->MemFree(e->ptr);
      else if (a->MemFreeAsync(e->ptr, s->stream) != CUDA_SUCCESS)
        atomic_fetch_add(&s->free_errors, 1);
      break;
    case K_HOST: r = a->MemFreeHost((void *)(uintptr_t)e->ptr); break;
    case K_VM:
      if (wait_idle(s) != CUDA_SUCCESS) atomic_fetch_add(&s->free_errors, 1);
      for (size_t i = 0; i < e->nmaps; i++) {
        if (a->MemUnmap(e->ptr + e->maps[i].offset, e->maps[i].size) != CUDA_SUCCESS ||
            a->MemRelease(e->maps[i].handle) != CUDA_SUCCESS)
          atomic_fetch_add(&s->free_errors, 1);
      }
      e->nmaps = 0;
      r = a->MemAddressFree(e->ptr, e->reserved);
      break;
  }
  if (r != CUDA_SUCCESS) {
    atomic_fetch_add(&s->free_errors, 1);
    return CM_ESTORAGE;
  }
  return CM_OK;
}

static void destroy_entry(entry *e) {
  free(e->maps);
  free(e);
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
    int rc = ctx_push(s->dev, diag);
    if (rc != CM_OK) {
      free(e);
      return rc;
    }
    CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
    bool done = false;
    if (s->kind == CM_CUDA_ASYNC) {
      if (s->async_ok && !s->retired) {
        r = a->MemAllocAsync(&e->ptr, (size_t)size, s->stream);
        if (r == CUDA_SUCCESS) {
          e->kind = K_ASYNC;
          done = true;
          atomic_fetch_add(&s->async_allocs, 1);
        }
      }
      if (!done) atomic_fetch_add(&s->async_fallbacks, 1);
    }
    if (!done) {
      r = a->MemAlloc(&e->ptr, (size_t)size);
      if (r == CUDA_SUCCESS) {
        e->kind = K_SYNC;
        done = true;
        atomic_fetch_add(&s->sync_allocs, 1);
      }
    }
    ctx_pop(s->dev);
    if (!done) {
      free(e);
      if (r == CUDA_ERROR_OUT_OF_MEMORY) {
        cm__diag_set(diag, CM_EOOM, "device out of memory allocating %" PRIu64 " bytes", size);
        if (diag) diag->native = r;
        return CM_EOOM;
      }
      char what[96];
      snprintf(what, sizeof what, "CUDA allocation of %" PRIu64 " bytes (cuMemAlloc_v2)", size);
      return driver_error(a, diag, CM_ESTORAGE, r, what);
    }
  }
  int rc = add_entry(s, e, out_id);
  if (rc != CM_OK) {
    if (e->kind != K_ZERO && ctx_push(s->dev, NULL) == CM_OK) {
      (void)free_entry_memory(s, e);
      ctx_pop(s->dev);
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
  int pushed = ctx_push(s->dev, NULL);
  int rc = CM_OK;
  if (pushed == CM_OK && s->retired && s->dev->api.CtxSynchronize() != CUDA_SUCCESS) {
    /* Work of the destroyed stream may still use this memory: keep it queued. */
    ctx_pop(s->dev);
    atomic_fetch_add(&s->free_errors, 1);
    return CM_ESTORAGE;
  }
  entry *e = s->pending;
  s->pending = NULL;
  while (e) {
    entry *next = e->next;
    (void)remove_entry(s, e->id);
    if (e->kind != K_ZERO) {
      if (pushed != CM_OK) {
        atomic_fetch_add(&s->free_errors, 1);
        rc = CM_ESTORAGE;
      } else if (free_entry_memory(s, e) != CM_OK) {
        rc = CM_ESTORAGE;
      }
    }
    destroy_entry(e);
    atomic_fetch_sub(&s->npending, 1);
    e = next;
  }
  if (pushed == CM_OK) ctx_pop(s->dev);
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
  int pushed = ctx_push(s->dev, NULL);
  if (pushed == CM_OK && s->retired && s->dev->api.CtxSynchronize() != CUDA_SUCCESS)
    atomic_fetch_add(&s->free_errors, 1);
  bool any_async = false;
  for (size_t i = 0; i < s->entries.cap; i++) {
    entry *e = s->entries.slots[i].value;
    if (!s->entries.slots[i].key || !e) continue;
    if (pushed == CM_OK && e->kind != K_ZERO) {
      any_async |= e->kind == K_ASYNC;
      (void)free_entry_memory(s, e);
    }
    destroy_entry(e);
  }
  cm__u64map_free(&s->entries);
  /* Let stream-ordered frees complete so the memory is back when we return. */
  if (pushed == CM_OK) {
    if (any_async && !s->retired && s->dev->api.StreamSynchronize(s->stream) != CUDA_SUCCESS)
      atomic_fetch_add(&s->free_errors, 1);
    ctx_pop(s->dev);
  }
  device_unref(s->dev);
  free(s);
}

/* events */
static int dev_event_record(void *ctx, void **out_event, cm_diag_t *diag) {
  cuda_storage *s = ctx;
  const cu_api *a = &s->dev->api;
  if (!out_event) return cm__diag_set(diag, CM_EINVAL, "event_record: out_event is NULL");
  int rc = ctx_push(s->dev, diag);
  if (rc != CM_OK) return rc;
  CUevent ev = NULL;
  CUresult r = a->EventCreate(&ev, CU_EVENT_DISABLE_TIMING);
  if (r != CUDA_SUCCESS) {
    ctx_pop(s->dev);
    return driver_error(a, diag, CM_ESTORAGE, r, "cuEventCreate");
  }
  r = a->EventRecord(ev, s->stream);
  if (r != CUDA_SUCCESS) {
    (void)a->EventDestroy(ev);
    ctx_pop(s->dev);
    return driver_error(a, diag, CM_ESTORAGE, r, "cuEventRecord");
  }
  ctx_pop(s->dev);
  *out_event = ev;
  return CM_OK;
}

static int dev_event_query(void *ctx, void *event) {
  cuda_storage *s = ctx;
  if (!event) return CM_EINVAL;
  if (ctx_push(s->dev, NULL) != CM_OK) return CM_ESTORAGE;
  CUresult r = s->dev->api.EventQuery((CUevent)event);
  ctx_pop(s->dev);
  if (r == CUDA_SUCCESS) return 1;
  if (r == CUDA_ERROR_NOT_READY) return 0;
  return CM_ESTORAGE;
}

static int dev_event_sync(void *ctx, void *event) {
  cuda_storage *s = ctx;
  if (!event) return CM_EINVAL;
  if (ctx_push(s->dev, NULL) != CM_OK) return CM_ESTORAGE;
  CUresult r = s->dev->api.EventSynchronize((CUevent)event);
  ctx_pop(s->dev);
  return r == CUDA_SUCCESS ? CM_OK : CM_ESTORAGE;
}

static void dev_event_destroy(void *ctx, void *event) {
  cuda_storage *s = ctx;
  if (!event) return;
  if (ctx_push(s->dev, NULL) != CM_OK) return;
  (void)s->dev->api.EventDestroy((CUevent)event);
  ctx_pop(s->dev);
}

/* virtual memory */
static uint64_t dev_vm_granularity(void *ctx) { return ((cuda_storage *)ctx)->granularity; }

static int dev_vm_reserve(void *ctx, uint64_t size, uint64_t *out_id, cm_diag_t *diag) {
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
  int rc = ctx_push(s->dev, diag);
  if (rc != CM_OK) {
    free(e);
    return rc;
  }
  CUresult r = a->MemAddressReserve(&e->ptr, (size_t)rsize, (size_t)s->granularity, 0, 0);
  if (r != CUDA_SUCCESS) {
    ctx_pop(s->dev);
    free(e);
    return driver_error(a, diag, r == CUDA_ERROR_OUT_OF_MEMORY ? CM_EOOM : CM_ESTORAGE, r,
                        "cuMemAddressReserve");
  }
  e->kind = K_VM;
  e->size = size;
  e->reserved = rsize;
  rc = add_entry(s, e, out_id);
  if (rc != CM_OK) {
    (void)a->MemAddressFree(e->ptr, (size_t)rsize);
    ctx_pop(s->dev);
    free(e);
    return cm__diag_set(diag, CM_ENOMEM, "out of host memory for a reservation record");
  }
  ctx_pop(s->dev);
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

/* Unmap and release mappings [i, i+n) of e (context pushed). Returns the
 * number that failed; those stay recorded. */
static size_t unmap_records(cuda_storage *s, entry *e, size_t i, size_t n) {
  const cu_api *a = &s->dev->api;
  size_t failed = 0, w = i;
  for (size_t k = i; k < i + n; k++) {
    vm_mapping m = e->maps[k];
    if (a->MemUnmap(e->ptr + m.offset, (size_t)m.size) != CUDA_SUCCESS) {
      failed++;
      e->maps[w++] = m; /* still mapped: keep the record */
      continue;
    }
    if (a->MemRelease(m.handle) != CUDA_SUCCESS) atomic_fetch_add(&s->free_errors, 1);
  }
  memmove(e->maps + w, e->maps + i + n, (e->nmaps - i - n) * sizeof *e->maps);
  e->nmaps -= i + n - w;
  if (failed) atomic_fetch_add(&s->free_errors, failed);
  return failed;
}

static int dev_vm_map(void *ctx, uint64_t id, uint64_t offset, uint64_t size, uint64_t piece,
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
  int rc = ctx_push(s->dev, diag);
  if (rc != CM_OK) {
    pthread_mutex_unlock(&s->dev->lock);
    return rc;
  }
  memmove(e->maps + at + n, e->maps + at, (e->nmaps - at) * sizeof *e->maps);
  size_t done = 0;
  CUresult r = CUDA_SUCCESS;
  const char *what = NULL;
  for (; done < n; done++) {
    CUmemGenericAllocationHandle h = 0;
    uint64_t off = offset + done * piece;
    r = a->MemCreate(&h, (size_t)piece, &s->prop, 0);
    if (r != CUDA_SUCCESS) {
      what = "cuMemCreate";
      break;
    }
    r = a->MemMap(e->ptr + off, (size_t)piece, 0, h, 0);
    if (r != CUDA_SUCCESS) {
      (void)a->MemRelease(h);
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
    r = a->MemSetAccess(e->ptr + offset, (size_t)size, acc, nacc);
    if (r != CUDA_SUCCESS) what = "cuMemSetAccess";
  }
  e->nmaps += done;
  if (what) { /* undo what this call mapped */
    (void)unmap_records(s, e, at, done);
    ctx_pop(s->dev);
    pthread_mutex_unlock(&s->dev->lock);
    if (r == CUDA_ERROR_OUT_OF_MEMORY) {
      cm__diag_set(diag, CM_EOOM, "device out of memory mapping %" PRIu64 " bytes (%s)", size, what);
      if (diag) diag->native = r;
      return CM_EOOM;
    }
    return driver_error(a, diag, CM_ESTORAGE, r, what);
  }
  ctx_pop(s->dev);
  pthread_mutex_unlock(&s->dev->lock);
  return CM_OK;
}

static int dev_vm_unmap(void *ctx, uint64_t id, uint64_t offset, uint64_t size, uint64_t piece,
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
  int rc = ctx_push(s->dev, diag);
  if (rc != CM_OK) {
    pthread_mutex_unlock(&s->dev->lock);
    return rc;
  }
  CUresult r = wait_idle(s); /* queued work may still use the pages */
  if (r != CUDA_SUCCESS) {
    ctx_pop(s->dev);
    pthread_mutex_unlock(&s->dev->lock);
    return driver_error(&s->dev->api, diag, CM_ESTORAGE, r,
                        s->retired ? "cuCtxSynchronize before cuMemUnmap"
                                   : "cuStreamSynchronize before cuMemUnmap");
  }
  size_t failed = unmap_records(s, e, at, n);
  ctx_pop(s->dev);
  pthread_mutex_unlock(&s->dev->lock);
  if (failed)
    return cm__diag_set(diag, CM_ESTORAGE, "cuMemUnmap failed for %zu of %zu mappings", failed, n);
  return CM_OK;
}

static int dev_vm_release(void *ctx, uint64_t id, cm_diag_t *diag) {
  cuda_storage *s = ctx;
  entry *e = vm_entry(s, id, diag);
  if (!e) return CM_EHANDLE;
  if (e->nmaps)
    return cm__diag_set(diag, CM_EINVAL, "cannot free a reservation with %zu mappings in it",
                        e->nmaps);
  pthread_mutex_lock(&s->dev->lock);
  int rc = ctx_push(s->dev, diag);
  if (rc != CM_OK) {
    pthread_mutex_unlock(&s->dev->lock);
    return rc;
  }
  rc = free_entry_memory(s, e);
  ctx_pop(s->dev);
  if (rc != CM_OK) {
    pthread_mutex_unlock(&s->dev->lock);
    return cm__diag_set(diag, rc, "cuMemAddressFree failed");
  }
  (void)cm__u64map_remove(&s->entries, id);
  destroy_entry(e);
  pthread_mutex_unlock(&s->dev->lock);
  return CM_OK;
}

static int dev_mem_info(void *ctx, uint64_t *free_bytes, uint64_t *total_bytes) {
  cuda_storage *s = ctx;
  return cm_cuda_device_mem_info(s->dev, free_bytes, total_bytes, NULL);
}

static const cm_storage_ops_t k_cuda_ops = {
    .name = "cuda",
    .mem_info = dev_mem_info,
    .alignment = dev_alignment,
    .alloc = dev_alloc,
    .dealloc = dev_dealloc,
    .flush = dev_flush,
    .get = storage_get,
    .release = storage_release,
    .event_record = dev_event_record,
    .event_query = dev_event_query,
    .event_sync = dev_event_sync,
    .event_destroy = dev_event_destroy,
    .vm_granularity = dev_vm_granularity,
    .vm_reserve = dev_vm_reserve,
    .vm_map = dev_vm_map,
    .vm_unmap = dev_vm_unmap,
    .vm_release = dev_vm_release,
};

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
    int rc = ctx_push(s->dev, diag);
    if (rc != CM_OK) {
      free(e);
      return rc;
    }
    void *p = NULL;
    CUresult r = a->MemAllocHost(&p, (size_t)size);
    ctx_pop(s->dev);
    if (r != CUDA_SUCCESS) {
      free(e);
      if (r == CUDA_ERROR_OUT_OF_MEMORY) {
        cm__diag_set(diag, CM_EOOM, "pinned host memory exhausted allocating %" PRIu64 " bytes",
                     size);
        if (diag) diag->native = r;
        return CM_EOOM;
      }
      char d[256];
      describe(a, r, d, sizeof d);
      cm__diag_set(diag, CM_ESTORAGE, "cuMemAllocHost_v2 failed with error code: %s", d);
      if (diag) diag->native = r;
      return CM_ESTORAGE;
    }
    e->ptr = (CUdeviceptr)(uintptr_t)p;
    e->kind = K_HOST;
  }
  int rc = add_entry(s, e, out_id);
  if (rc != CM_OK) {
    if (e->kind == K_HOST && ctx_push(s->dev, NULL) == CM_OK) {
      (void)a->MemFreeHost((void *)(uintptr_t)e->ptr);
      ctx_pop(s->dev);
    }
    free(e);
    return cm__diag_set(diag, CM_ENOMEM, "out of host memory for an allocation record");
  }
  return CM_OK;
}

static void host_dealloc(void *ctx, uint64_t id) {
  cuda_storage *s = ctx;
  entry *e = remove_entry(s, id);
  if (!e) return;
  if (e->kind == K_HOST) {
    if (ctx_push(s->dev, NULL) == CM_OK) {
      (void)free_entry_memory(s, e);
      ctx_pop(s->dev);
    } else {
      atomic_fetch_add(&s->free_errors, 1);
    }
  }
  destroy_entry(e);
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
        return driver_error(a, diag, CM_ESTORAGE, r, "cuMemGetAllocationGranularity");
      }
      if (g && !(g & (g - 1))) s->granularity = g; /* else: no usable VM granule, no VM */
    }
  }
  cm_storage_t *st = NULL;
  int rc = cm_storage_create(pinned ? &k_pinned_ops : &k_cuda_ops, s, &st);
  if (rc != CM_OK) {
    free(s);
    return cm__diag_set(diag, rc, "cannot wrap the CUDA storage: %s", cm_strerror(rc));
  }
  cm_storage_set_timing(st, true); /* report time spent in the driver (stats time_ns) */
  device_ref(dev);
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
  if (!storage || storage->ops != &k_cuda_ops) return;
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

/* ---- features, peers, stream lifetime ----------------------------------------- */

bool cm_cuda_device_has_vmm(const cm_cuda_device_t *dev) { return dev && dev->vmm; }
bool cm_cuda_device_has_mempool(const cm_cuda_device_t *dev) { return dev && dev->mempool; }

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
  if (r != CUDA_SUCCESS) return driver_error(a, diag, CM_EINVAL, r, "cuDeviceGet (peer device)");
  int can = 0;
  r = a->DeviceCanAccessPeer(&can, pd, dev->dev);
  if (r != CUDA_SUCCESS) return driver_error(a, diag, CM_ESTORAGE, r, "cuDeviceCanAccessPeer");
  if (!can)
    return cm__diag_set(diag, CM_ENOTSUP, "CUDA device %d cannot access the memory of device %d",
                        peer, dev->ordinal);
  pthread_mutex_lock(&dev->lock);
  if (dev->peers & (1ull << peer)) {
    pthread_mutex_unlock(&dev->lock);
    return CM_OK;
  }
  int rc = ctx_push(dev, diag);
  if (rc == CM_OK) {
    /* Mappings made from now on include the peer (vm_map); grant the existing ones. */
    for (cuda_storage *s = dev->storages; s && r == CUDA_SUCCESS; s = s->st_next)
      r = grant_storage(s, peer);
    ctx_pop(dev);
    if (r != CUDA_SUCCESS) rc = driver_error(a, diag, CM_ESTORAGE, r, "cuMemSetAccess (peer grant)");
    else dev->peers |= 1ull << peer;
  }
  pthread_mutex_unlock(&dev->lock);
  return rc;
}

int cm_cuda_stream_identity(cm_cuda_device_t *dev, void *stream, uint64_t *out, cm_diag_t *diag) {
  if (!dev || !out) return cm__diag_set(diag, CM_EINVAL, "cm_cuda_stream_identity: NULL argument");
  if (!dev->api.StreamGetId)
    return cm__diag_set(diag, CM_ENOTSUP, "this CUDA driver has no cuStreamGetId (CUDA < 12.0)");
  int rc = ctx_push(dev, diag);
  if (rc != CM_OK) return rc;
  unsigned long long id = 0;
  CUresult r = dev->api.StreamGetId((CUstream)stream, &id);
  ctx_pop(dev);
  if (r != CUDA_SUCCESS) return driver_error(&dev->api, diag, CM_ESTREAM, r, "cuStreamGetId");
  *out = id;
  return CM_OK;
}

int cm_cuda_stream_identity_fn(void *arg, void *stream, uint64_t *out, cm_diag_t *diag) {
  const cm_cuda_factory_t *f = arg;
  if (!f) return cm__diag_set(diag, CM_EINVAL, "cm_cuda_stream_identity_fn: arg is NULL");
  return cm_cuda_stream_identity(f->device, stream, out, diag);
}

void cm_cuda_storage_retire(cm_storage_t *storage) {
  if (!storage || storage->ops != &k_cuda_ops) return;
  cuda_storage *s = storage->ctx;
  s->retired = true;
}

void cm_cuda_storage_retire_fn(void *arg, cm_storage_t *storage) {
  (void)arg;
  cm_cuda_storage_retire(storage);
}

/* ---- events on any stream (cm_ptr_config_t event hooks) ----------------------- */

int cm_cuda_event_record_fn(void *arg, void *stream, void **out, cm_diag_t *diag) {
  const cm_cuda_factory_t *f = arg;
  if (!f || !f->device || !out) return cm__diag_set(diag, CM_EINVAL, "cm_cuda_event_record_fn: NULL");
  cm_cuda_device_t *dev = f->device;
  const cu_api *a = &dev->api;
  int rc = ctx_push(dev, diag);
  if (rc != CM_OK) return rc;
  CUevent ev = NULL;
  CUresult r = a->EventCreate(&ev, CU_EVENT_DISABLE_TIMING);
  if (r != CUDA_SUCCESS) {
    ctx_pop(dev);
    return driver_error(a, diag, CM_ESTORAGE, r, "cuEventCreate");
  }
  r = a->EventRecord(ev, (CUstream)stream);
  if (r != CUDA_SUCCESS) {
    (void)a->EventDestroy(ev);
    ctx_pop(dev);
    return driver_error(a, diag, CM_ESTREAM, r, "cuEventRecord");
  }
  ctx_pop(dev);
  *out = ev;
  return CM_OK;
}

int cm_cuda_event_query_fn(void *arg, void *event) {
  const cm_cuda_factory_t *f = arg;
  if (!f || !f->device || !event) return CM_EINVAL;
  if (ctx_push(f->device, NULL) != CM_OK) return CM_ESTORAGE;
  CUresult r = f->device->api.EventQuery((CUevent)event);
  ctx_pop(f->device);
  if (r == CUDA_SUCCESS) return 1;
  if (r == CUDA_ERROR_NOT_READY) return 0;
  return CM_ESTORAGE;
}

void cm_cuda_event_destroy_fn(void *arg, void *event) {
  const cm_cuda_factory_t *f = arg;
  if (!f || !f->device || !event) return;
  if (ctx_push(f->device, NULL) != CM_OK) return;
  (void)f->device->api.EventDestroy((CUevent)event); /* nothing to do about a refusal */
  ctx_pop(f->device);
}
