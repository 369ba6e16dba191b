/*
 * cuda_internal.h - what the CUDA storage's files share (not installed;
 * nothing here is exported from the library):
 *   cuda.c          driver loading, the entry-point table, devices, contexts,
 *                   stream identity and the events on any stream;
 *   cuda_entries.c  the allocation records (the entry table), freeing an
 *                   entry's memory, unmapping VM records, retried releases;
 *   cuda_storage.c  the device and pinned-host storages: the dealloc queue,
 *                   events, copies, creation and counters;
 *   cuda_vm.c       the virtual memory operations and peer access grants.
 * Calls go one way: cuda_storage.c -> cuda_vm.c -> cuda_entries.c -> cuda.c
 * (cuda_storage.c also calls cuda_entries.c and cuda.c directly).
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
 *   cuMemMap, cuMemUnmap, cuMemSetAccess, cuMemGetAllocationGranularity;
 *   aliases (optional: without it the storage has no vm_alias):
 *   cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *h, void *addr)
 *   (CUDA >= 11.0: the handle mapped at addr, with one more reference);
 *   copies (optional): cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr
 *   src, size_t ByteCount, CUstream).
 *   CUmemAllocationProp = {int type; int requestedHandleTypes;
 *   {int type; int id} location; void *win32HandleMetaData; {u8
 *   compressionType; u8 gpuDirectRDMACapable; u16 usage; u8 reserved[4]}
 *   allocFlags} (32 bytes); CUmemAccessDesc = {location; int flags}.
 *   CU_MEM_ALLOCATION_TYPE_PINNED 1, CU_MEM_LOCATION_TYPE_DEVICE 1,
 *   CU_MEM_ACCESS_FLAGS_PROT_READWRITE 3, CU_MEM_ALLOC_GRANULARITY_MINIMUM 0,
 *   CU_EVENT_DISABLE_TIMING 2.
 */
#ifndef CM_STORAGE_CUDA_INTERNAL_H
#define CM_STORAGE_CUDA_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#include "base/util.h"
#include "cubemem/cuda.h"
#include "base/u64map.h"

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
  /* aliases (vm_alias; optional: without it the storage has no vm_alias) */
  CUresult (*MemRetainAllocationHandle)(CUmemGenericAllocationHandle *h, void *addr);
  /* copies (relocation; optional: without it the storage cannot copy) */
  CUresult (*MemcpyDtoDAsync)(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s);
} cu_api;

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

/* ---- storages ---------------------------------------------------------------- */

typedef enum entry_kind { K_ZERO, K_SYNC, K_ASYNC, K_VM, K_HOST } entry_kind;

/* One mapping of a reservation. An alias (vm_alias) maps, a second time,
 * the object that vm_map mapped at src_off of reservation src_id: unmapping
 * it releases nothing (the handle is the original mapping's, released when
 * that one goes). */
typedef struct vm_mapping {
  uint64_t offset, size;
  CUmemGenericAllocationHandle handle;
  bool alias;
  uint64_t src_id, src_off; /* aliases: the original mapping */
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

/* Kinds of timed driver calls (cm_call_times_t's fields, in its order). */
typedef enum cu_call {
  CU_CREATE, CU_MAP, CU_SET_ACCESS, CU_UNMAP, CU_RELEASE, CU_ALLOC, CU_FREE, CU_RESERVE,
  CU_ADDRESS_FREE, CU_SYNC, CU_MEM_QUERY, CU_NCALLS
} cu_call;

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
  _Atomic bool timing;              /* time each driver call (cm_storage_set_timing) */
  _Atomic uint64_t call_ns[CU_NCALLS]; /* time by kind of call (cu_call), while timing */
  /* Handles whose cuMemRelease failed after their mapping went: kept and
   * released again at the next map or unmap and when the storage goes
   * (cm__cuda_retry_releases), so a transient failure leaks nothing. */
  CUmemGenericAllocationHandle *unreleased;
  size_t nunreleased, capunreleased;
  CUevent copy_event; /* recorded after the copies, waited on by copy_wait (lazily created) */
  /* Alias mappings live in this storage's reservations (dev->lock): while
   * it is 0, no check looks for aliases. */
  uint64_t naliases;
} cuda_storage;

/* Run `expr` (one driver call of kind k on storage s), adding the time it
 * took to s->call_ns[k] when timing is on. */
#define CU_TIMED(s, k, expr)                                                              \
  do {                                                                                    \
    uint64_t dt__;                                                                        \
    CM__TIME_NS(atomic_load_explicit(&(s)->timing, memory_order_relaxed), dt__, expr);    \
    if (dt__) atomic_fetch_add_explicit(&(s)->call_ns[k], dt__, memory_order_relaxed);    \
  } while (0)

/* cuda.c */

/* "CUDA_ERROR_X (text)" for a driver result. */
void cm__cuda_describe(const cu_api *api, CUresult r, char *buf, size_t cap);
/* Set diag to "<what> failed: <driver's description>" with `code`, keep the
 * CUresult in diag->native; returns code. */
int cm__cuda_driver_error(const cu_api *api, cm_diag_t *diag, int code, CUresult r,
                          const char *what);
/* Make the device's primary context current on this thread; CM_ESTORAGE
 * (diag set) when the driver refuses. */
int cm__cuda_ctx_push(cm_cuda_device_t *d, cm_diag_t *diag);
/* Undo cm__cuda_ctx_push. */
void cm__cuda_ctx_pop(cm_cuda_device_t *d);
/* Take one more reference on the device (one per storage). */
void cm__cuda_device_ref(cm_cuda_device_t *d);
/* Drop one reference; the last releases the primary context and frees d. */
void cm__cuda_device_unref(cm_cuda_device_t *d);

/* cuda_entries.c: the allocation records */

/* Wait for the work that may still use this storage's memory (context
 * pushed): its stream, or the whole context once the stream is retired. */
CUresult cm__cuda_wait_idle(cuda_storage *s);
/* Give e the storage's next id and put it in the entry map; CM_ENOMEM on
 * host OOM (nothing changed). */
int cm__cuda_add_entry(cuda_storage *s, entry *e, uint64_t *out_id);
/* Take entry `id` out of the entry map (NULL when unknown). */
entry *cm__cuda_remove_entry(cuda_storage *s, uint64_t id);
/* Free the memory of one entry (context pushed by the caller). Returns
 * CM_ESTORAGE when the driver refused a synchronous free. */
int cm__cuda_free_entry_memory(cuda_storage *s, entry *e);
/* Free an entry record (not its memory). */
void cm__cuda_destroy_entry(entry *e);

/* Unmap and release mappings [i, i+n) of e (context pushed; aliases are
 * unmapped only, not released); the failures are counted in free_errors.
 * Returns the number that failed; those stay recorded. */
size_t cm__cuda_unmap_records(cuda_storage *s, entry *e, size_t i, size_t n);
/* Release the handles whose cuMemRelease failed before (dev->lock held or
 * the storage going, context pushed); those that fail again stay. Returns
 * how many stay. */
size_t cm__cuda_retry_releases(cuda_storage *s);
/* Remember a handle whose cuMemRelease failed, for cm__cuda_retry_releases
 * (without host memory for the record it is lost to this storage). */
void cm__cuda_keep_unreleased(cuda_storage *s, CUmemGenericAllocationHandle h);

/* cuda_vm.c: the device storage's vm_* ops (cm_storage_ops_t) */

uint64_t cm__cuda_vm_granularity(void *ctx);
int cm__cuda_vm_reserve(void *ctx, uint64_t size, uint64_t *out_id, cm_diag_t *diag);
int cm__cuda_vm_map(void *ctx, uint64_t id, uint64_t offset, uint64_t size, uint64_t piece,
                    cm_diag_t *diag);
int cm__cuda_vm_unmap(void *ctx, uint64_t id, uint64_t offset, uint64_t size, uint64_t piece,
                      cm_diag_t *diag);
int cm__cuda_vm_release(void *ctx, uint64_t id, cm_diag_t *diag);
int cm__cuda_vm_alias(void *ctx, uint64_t dst_id, uint64_t dst_off, uint64_t src_id,
                      uint64_t src_off, uint64_t size, uint64_t piece, cm_diag_t *diag);

#endif
