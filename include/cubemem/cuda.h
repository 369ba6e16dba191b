/*
 * cubemem/cuda.h - real device memory through the CUDA driver API (spec §2.1,
 * §2.2), loaded at run time.
 *
 * Nothing here links against CUDA. The driver library is opened with dlopen
 * when a device is opened: the path is `library` where a function takes one,
 * else the environment variable CM_CUDA_LIBRARY, else "libcuda.so.1". On a
 * machine without a driver (or without a GPU) opening a device fails cleanly
 * with CM_ENODEV and a message naming the library and the loader's error, or
 * the driver's error name and text; nothing else in this header can then be
 * reached, and nothing crashes.
 *
 * Objects:
 *  - cm_cuda_device_t: one opened device: the driver's entry points, the
 *    device's retained primary context, its name and memory size. Reference
 *    counted: every storage created from a device holds a reference, so
 *    cm_cuda_device_close() may be called before the storages are destroyed.
 *  - device storage (cm_cuda_storage_create): cuMemAlloc / cuMemFree (SYNC,
 *    the default) or stream-ordered cuMemAllocAsync / cuMemFreeAsync (ASYNC,
 *    falling back to a synchronous allocation for an allocation whose async
 *    call fails; each pointer is freed the way it was allocated). dealloc
 *    queues the id; flush frees the queue. Zero-byte allocations get an id and
 *    no driver call. Also events and virtual memory (cuMemAddressReserve /
 *    cuMemCreate / cuMemMap ...), with aliases (storage.h's vm_alias:
 *    cuMemRetainAllocationHandle + cuMemMap) when the driver has
 *    cuMemRetainAllocationHandle, alignment 512.
 *  - pinned host storage (cm_cuda_pinned_storage_create): cuMemAllocHost /
 *    cuMemFreeHost, freed at once, alignment 16; get() returns a host pointer.
 *
 * Errors from the driver: CUDA_ERROR_OUT_OF_MEMORY becomes CM_EOOM ("device
 * out of memory allocating N bytes"); any other failure becomes CM_ESTORAGE
 * with the driver's error name and text in diag->message and the CUresult in
 * diag->native. Neither is CM_ETOOBIG (which only the manager returns).
 *
 * Threading: device open/close and the property getters are thread-safe. A
 * storage follows the cm_storage_t rule (one thread at a time). Each driver
 * call is made with the device's primary context pushed on the calling thread
 * and popped afterwards, so callers need not manage CUDA contexts and the
 * thread's current context is left as it was.
 */
#ifndef CUBEMEM_CUDA_H
#define CUBEMEM_CUDA_H

#include "cubemem/common.h"
#include "cubemem/storage.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cm_cuda_device cm_cuda_device_t;

/* cm_cuda_allocator_t (CM_CUDA_SYNC, CM_CUDA_ASYNC) comes from cubemem/common.h. */

/* Open device `ordinal`: load the driver (CM_CUDA_LIBRARY or libcuda.so.1),
 * cuInit(0), and retain the device's primary context. *out receives a device
 * the caller closes with cm_cuda_device_close.
 * Errors: CM_EINVAL (NULL out, negative ordinal), CM_ENODEV (library missing,
 * entry point missing, cuInit failed, no such device; the message names the
 * cause and diag->native holds the CUresult when the driver gave one),
 * CM_ENOMEM. Thread-safe. */
CM_API CM_NODISCARD int cm_cuda_device_open(int ordinal, cm_cuda_device_t **out, cm_diag_t *diag);
/* The same with an explicit driver library path (NULL = CM_CUDA_LIBRARY or
 * libcuda.so.1). Thread-safe. */
CM_API CM_NODISCARD int cm_cuda_device_open_library(const char *library, int ordinal,
                                                    cm_cuda_device_t **out, cm_diag_t *diag);
/* Open device `ordinal` through a caller-supplied symbol resolver instead of
 * dlopen: resolve(arg, name) returns the driver entry point called `name`
 * (the versioned names, e.g. "cuMemAlloc_v2", "cuDeviceTotalMem_v2",
 * "cuEventDestroy_v2"), or NULL when it has none. Useful to embed cubemem in a
 * program that already holds the driver's entry points, and to test the
 * storages against a simulated driver. `arg` must outlive the device.
 * Errors: as cm_cuda_device_open. Thread-safe. */
typedef void *(*cm_cuda_symbol_fn)(void *arg, const char *name);
CM_API CM_NODISCARD int cm_cuda_device_open_resolver(cm_cuda_symbol_fn resolve, void *arg,
                                                     int ordinal, cm_cuda_device_t **out,
                                                     cm_diag_t *diag);
/* Drop the caller's reference. The primary context is released and the
 * library closed when the last storage made from the device is gone as well.
 * NULL ok. Thread-safe. */
CM_API void cm_cuda_device_close(cm_cuda_device_t *dev);

/* Properties (fixed at open; thread-safe; dev must be non-NULL). */
CM_API int cm_cuda_device_ordinal(const cm_cuda_device_t *dev);
CM_API uint64_t cm_cuda_device_total_memory(const cm_cuda_device_t *dev);
/* {max_page_size = total memory / 4, alignment = 512} (spec §2.2). */
CM_API cm_device_props_t cm_cuda_device_props(const cm_cuda_device_t *dev);
/* Device name as reported by cuDeviceGetName (static storage of the device). */
CM_API const char *cm_cuda_device_name(const cm_cuda_device_t *dev);
/* Free and total device memory now (cuMemGetInfo). Errors: CM_ESTORAGE. */
CM_API CM_NODISCARD int cm_cuda_device_mem_info(cm_cuda_device_t *dev, uint64_t *free_bytes,
                                                uint64_t *total_bytes, cm_diag_t *diag);
/* Number of devices the driver sees (0 with CM_ENODEV when there is no
 * driver). Thread-safe. */
CM_API CM_NODISCARD int cm_cuda_device_count(int *out, cm_diag_t *diag);

/* Device storage on `stream` (a CUstream, or NULL for the legacy default
 * stream; a given stream must outlive the storage). The storage holds a
 * reference to dev. Its statistics measure time spent in the driver from
 * the start (cm_storage_stats time_ns, and call_ns by kind of driver call;
 * cm_storage_set_timing turns it off). Errors: CM_EINVAL, CM_ENOMEM.
 * Thread-safe. */
CM_API CM_NODISCARD int cm_cuda_storage_create(cm_cuda_device_t *dev, void *stream,
                                               cm_cuda_allocator_t kind, cm_storage_t **out,
                                               cm_diag_t *diag);
/* Pinned (page-locked) host storage. Holds a reference to dev. Errors as
 * above. Thread-safe. */
CM_API CM_NODISCARD int cm_cuda_pinned_storage_create(cm_cuda_device_t *dev, cm_storage_t **out,
                                                      cm_diag_t *diag);

/* Open device 0, or the ordinal in CM_CUDA_DEVICE. Errors: CM_EINVAL (a bad
 * CM_CUDA_DEVICE), as cm_cuda_device_open. Thread-safe. */
CM_API CM_NODISCARD int cm_cuda_device_open_default(cm_cuda_device_t **out, cm_diag_t *diag);
/* Convenience for tools: open device 0 (or the ordinal in CM_CUDA_DEVICE),
 * create a device storage of `kind` on the default stream, and fill *props
 * (may be NULL) with the device's properties. The storage owns the device.
 * Errors: as cm_cuda_device_open and cm_cuda_storage_create. Thread-safe. */
CM_API CM_NODISCARD int cm_cuda_storage_open_default(cm_cuda_allocator_t kind, cm_storage_t **out,
                                                     cm_device_props_t *props, cm_diag_t *diag);

/* Parse "sync" / "async" (case-insensitive). Errors: CM_EINVAL. */
CM_API CM_NODISCARD int cm_cuda_allocator_parse(const char *text, cm_cuda_allocator_t *out);
/* "sync" / "async". */
CM_API const char *cm_cuda_allocator_name(cm_cuda_allocator_t kind);

/* Counters of one CUDA device storage (any thread; NULL-safe: zeros). */
typedef struct cm_cuda_storage_counters {
  uint64_t async_allocs;    /* allocations served by cuMemAllocAsync */
  uint64_t sync_allocs;     /* allocations served by cuMemAlloc */
  uint64_t async_fallbacks; /* async calls that failed and fell back to cuMemAlloc */
  uint64_t free_errors;     /* frees the driver refused (ignored, counted) */
  uint64_t pending;         /* ids queued for the next flush */
  uint64_t vm_granularity;  /* VM granule in use (0: no virtual memory on this device) */
  bool async_supported;     /* the device has memory pools (cuMemAllocAsync is used) */
  bool retired;             /* cm_cuda_storage_retire was called */
} cm_cuda_storage_counters_t;
/* Fill *out for a storage made by cm_cuda_storage_create (zeros for any other
 * storage). Same thread as the storage's user. */
CM_API void cm_cuda_storage_counters(const cm_storage_t *storage, cm_cuda_storage_counters_t *out);

/* ---- features, peers, stream lifetime ------------------------------------ */

/* Probed at open with cuDeviceGetAttribute: virtual memory management
 * (CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED) and memory pools
 * (CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED). Without VMM a device storage
 * reports no VM support (pools fall back to whole allocations); without
 * memory pools an ASYNC storage allocates with cuMemAlloc (counted as
 * async_fallbacks). false for NULL. Thread-safe. */
CM_API bool cm_cuda_device_has_vmm(const cm_cuda_device_t *dev);
CM_API bool cm_cuda_device_has_mempool(const cm_cuda_device_t *dev);

/* Let device `peer` read and write the virtual-memory mappings of `dev`
 * (what PyTorch does for its expandable segments when peer access is
 * enabled): every existing mapping of every device storage of `dev` gets
 * cuMemSetAccess for the peer, and later mappings include it in their one
 * cuMemSetAccess call. Plain allocations (cuMemAlloc) are not affected; for
 * those the caller enables peer access on the context (cuCtxEnablePeerAccess)
 * as usual. Idempotent. Errors: CM_EINVAL (NULL, peer == dev, out of range),
 * CM_ENOTSUP (cuDeviceCanAccessPeer says no, or the driver lacks it; nothing
 * changes), CM_ESTORAGE (a grant failed; later mappings do not include the
 * peer). Thread-safe, also against the storages' own calls. */
CM_API CM_NODISCARD int cm_cuda_device_enable_peer_access(cm_cuda_device_t *dev, int peer,
                                                          cm_diag_t *diag);

/* The driver's unique id of `stream` (cuStreamGetId, CUDA >= 12.0): unlike
 * the CUstream handle it is never reused by a later stream, so it tells a new
 * stream from a destroyed one that had the same handle. Errors: CM_EINVAL,
 * CM_ENOTSUP (driver too old), CM_ESTREAM (not a live stream). Thread-safe. */
CM_API CM_NODISCARD int cm_cuda_stream_identity(cm_cuda_device_t *dev, void *stream,
                                                uint64_t *out, cm_diag_t *diag);
/* Tell a device storage that its stream was destroyed. From then on it never
 * uses the stream handle again: it waits with cuCtxSynchronize (work queued
 * on a destroyed stream still runs) before it unmaps or frees anything, and
 * frees stream-ordered memory with cuMemFree. Other storages: no-op. Same
 * thread as the storage's user. */
CM_API void cm_cuda_storage_retire(cm_storage_t *storage);
/* The two above in the shape of cm_ptr_config_t's stream_identity /
 * stream_retire hooks; `arg` is the cm_cuda_factory_t given as factory_arg. */
CM_API CM_NODISCARD int cm_cuda_stream_identity_fn(void *arg, void *stream, uint64_t *out,
                                                   cm_diag_t *diag);
CM_API void cm_cuda_storage_retire_fn(void *arg, cm_storage_t *storage);

/* Event hooks of cm_ptr_config_t (cross-stream use, cm_ptr_record_stream);
 * `arg` is the cm_cuda_factory_t given as factory_arg. record: an event
 * (timing disabled) recorded on `stream` (CM_ESTREAM when the driver refuses
 * the stream); query: 1 complete, 0 pending, negative on error; destroy:
 * NULL ok. Thread-safe. */
CM_API CM_NODISCARD int cm_cuda_event_record_fn(void *arg, void *stream, void **out,
                                                cm_diag_t *diag);
CM_API int cm_cuda_event_query_fn(void *arg, void *event);
CM_API void cm_cuda_event_destroy_fn(void *arg, void *event);

/* Storage factory for the pointer layer (cubemem/ptr.h): `arg` is a
 * cm_cuda_factory_t that must outlive the pointer allocator; each call makes
 * a device storage of arg->kind on `stream`. */
typedef struct cm_cuda_factory {
  cm_cuda_device_t *device;
  cm_cuda_allocator_t kind;
} cm_cuda_factory_t;
CM_API CM_NODISCARD int cm_cuda_storage_factory(void *arg, void *stream, cm_storage_t **out,
                                                cm_diag_t *diag);

#ifdef __cplusplus
}
#endif
#endif
