/*
 * cubemem/ptr.h - a malloc-style pointer API over memory managers, for
 * frameworks that want `void *p = alloc(size, stream); free(p, stream);`
 * (PyTorch's pluggable allocator, CuPy, custom runtimes).
 *
 * Model. One cm_manager per stream, created lazily on the first allocation on
 * that stream through the configured storage factory; memory freed on a
 * stream is reused by later allocations on the same stream only (stream
 * order makes that safe without synchronisation, as in spec §1). Each live
 * pointer maps to the manager handle that keeps its slice alive; freeing the
 * pointer releases the handle. The pointer is the storage's address of the
 * slice (cm_manager_get_resource): a device address for CUDA, a host address
 * for host storage, a fake address (never dereference it) for the simulated
 * storage.
 *
 * Zero-byte requests return NULL with CM_OK and touch no manager; freeing
 * NULL is a no-op.
 *
 * On an allocation failure other than "too big" the allocator cleans the
 * stream's manager up (returning cached pages to the storage), retries, and
 * then does the same over every stream before giving up (spec §8.2).
 *
 * Threading: every function is thread-safe (one mutex per allocator), except
 * cm_ptr_allocator_destroy, which must not race with other calls.
 */
#ifndef CUBEMEM_PTR_H
#define CUBEMEM_PTR_H

#include "cubemem/common.h"
#include "cubemem/log.h"
#include "cubemem/memory.h"
#include "cubemem/storage.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Makes the storage for a new stream. `arg` is the config's factory_arg;
 * `stream` is the caller's stream handle (NULL = default stream). On success
 * *out is a storage the caller (the pointer allocator) owns. */
typedef int (*cm_ptr_storage_factory_fn)(void *arg, void *stream, cm_storage_t **out,
                                         cm_diag_t *diag);

typedef struct cm_ptr_config {
  cm_ptr_storage_factory_fn factory; /* required */
  void *factory_arg;                 /* passed to factory; must outlive the allocator */
  const char *name;                  /* manager name, copied; NULL = "Main GPU Memory" */
  cm_device_props_t props;           /* pool sizing and alignment */
  cm_preset_t preset;                /* layout when pools is NULL */
  const cm_pool_options_t *pools;    /* explicit layout (resolved against props), copied */
  size_t pool_count;
  cm_logger_t *logger;               /* borrowed, may be NULL; must outlive the allocator */
  bool retry_after_cleanup;          /* clean up and retry once on failure (default true) */
  uint32_t max_streams;              /* 0 = unlimited; beyond it: CM_ESTREAM */
  /* Stream lifetime (optional, both with factory_arg). A stream handle can
   * be reused by a new stream after the old one is destroyed, while work
   * queued on the old one still reads memory it freed. When stream_identity
   * is set, each allocation on a stream other than NULL, 0x1 (legacy) and
   * 0x2 (per-thread) asks for the stream's unique identity; when it differs
   * from the one the stream's manager was created for, that manager is
   * retired: it serves no more allocations, stream_retire (when set) tells
   * its storage the stream is gone, its cached memory goes back to the
   * device, and it is destroyed once its last pointer is freed. The new
   * stream gets a fresh manager. An identity call that fails with
   * CM_ENOTSUP is ignored (keyed by handle, as without the hook); any other
   * failure fails the allocation. cm_cuda_stream_identity_fn and
   * cm_cuda_storage_retire_fn (cubemem/cuda.h) implement them for CUDA. */
  int (*stream_identity)(void *arg, void *stream, uint64_t *out, cm_diag_t *diag);
  void (*stream_retire)(void *arg, cm_storage_t *storage);
  /* Cross-stream use (cm_ptr_record_stream; optional, all three or none,
   * with factory_arg): record an event on `stream` after the work queued so
   * far; query it (1 complete, 0 pending, negative on error); destroy it.
   * cm_cuda_event_record_fn & co. (cubemem/cuda.h) implement them. */
  int (*event_record)(void *arg, void *stream, void **out, cm_diag_t *diag);
  int (*event_query)(void *arg, void *event);
  void (*event_destroy)(void *arg, void *event);
} cm_ptr_config_t;

/* Defaults: no factory, name NULL, props {128 MiB, 512}, preset default, no
 * pools, no logger, retry on, unlimited streams. */
CM_API void cm_ptr_config_init(cm_ptr_config_t *cfg);

typedef struct cm_ptr_allocator cm_ptr_allocator_t;

/* Create an allocator (no stream is set up yet). cfg is copied.
 * Errors: CM_EINVAL (NULL args, no factory), CM_ECONFIG (bad pool layout,
 * message in diag), CM_ENOMEM. Thread-safe. */
CM_API CM_NODISCARD int cm_ptr_allocator_create(const cm_ptr_config_t *cfg,
                                                cm_ptr_allocator_t **out, cm_diag_t *diag);
/* Destroy the allocator, every manager and storage. Pointers still live are
 * released with it (they become invalid). NULL ok. Not concurrent with any
 * other call on the allocator. */
CM_API void cm_ptr_allocator_destroy(cm_ptr_allocator_t *a);

/* Allocate `size` bytes for use on `stream`. *out gets the pointer (NULL for
 * size 0). Errors: CM_EINVAL, CM_ETOOBIG, CM_ECAPACITY, CM_EOOM, CM_ESTORAGE,
 * CM_ESTREAM (stream limit, or the factory failed: then the factory's own
 * status, e.g. CM_ENODEV), CM_ENOMEM, with a message in diag (may be NULL).
 * On error *out is NULL. Thread-safe. */
CM_API CM_NODISCARD int cm_ptr_alloc(cm_ptr_allocator_t *a, uint64_t size, void *stream,
                                     void **out, cm_diag_t *diag);
/* Free a pointer from cm_ptr_alloc. A pointer is identified by its stream
 * and its address (addresses of different streams may coincide, see
 * cm_ptr_sim_factory): when `stream` is a stream the allocator has set up,
 * the pointer must have been allocated on it; when `stream` is unknown to the
 * allocator, the pointer is looked up on every stream and freed only if
 * exactly one stream holds that address. NULL ptr: no-op.
 * Errors: CM_ENOTFOUND (unknown pointer, double free, a pointer of another
 * known stream, or an address held by several streams with an unknown
 * `stream`; nothing changes), CM_EINVAL (NULL allocator). Thread-safe. */
CM_API int cm_ptr_free(cm_ptr_allocator_t *a, void *ptr, void *stream);
/* Note that `ptr` (live) is also used by work on `stream`, as PyTorch's
 * Tensor.record_stream does: when ptr is freed, an event is recorded on
 * every such stream and the memory is reused only once all of them have
 * completed (checked at later allocations and by cm_ptr_empty_cache).
 * Recording the allocation's own stream, or a stream twice, is a no-op.
 * Errors: CM_EINVAL, CM_ENOTFOUND (not a live pointer), CM_ENOTSUP (no event
 * hooks configured), CM_ENOMEM. Thread-safe. */
CM_API CM_NODISCARD int cm_ptr_record_stream(cm_ptr_allocator_t *a, void *ptr, void *stream);
/* Retire `stream`'s manager now (call it before destroying a stream when
 * the stream_identity hook cannot be used): as described under
 * cm_ptr_config_t.stream_identity. Unknown stream: no-op. Thread-safe. */
CM_API void cm_ptr_retire_stream(cm_ptr_allocator_t *a, void *stream);
/* Requested size of a live pointer, looked up on every stream. Errors:
 * CM_ENOTFOUND (unknown, or the address is live on several streams),
 * CM_EINVAL. Thread-safe. */
CM_API CM_NODISCARD int cm_ptr_size(cm_ptr_allocator_t *a, void *ptr, uint64_t *out);

typedef struct cm_ptr_usage {
  cm_usage_t total;             /* summed over every stream's manager */
  uint64_t streams;             /* managers created */
  uint64_t live_pointers;       /* pointers allocated and not freed (size > 0) */
  uint64_t bytes_reserved_peak; /* high-water mark of total.bytes_reserved */
  uint64_t allocs;              /* successful non-zero allocations */
  uint64_t frees;               /* successful frees of non-NULL pointers */
  uint64_t failed_allocs;       /* allocations that returned an error */
  uint64_t retries;             /* allocations retried after a cleanup */
  uint64_t storage_allocs;      /* storage allocations + VM mappings, summed */
  uint64_t storage_time_ns;     /* time inside the storages, summed */
  uint64_t pending_frees;       /* freed pointers waiting for other streams' events */
  uint64_t bytes_in_use_peak;   /* high-water mark of the requested bytes of live pointers
                                   (counted at cm_ptr_alloc / cm_ptr_free) */
} cm_ptr_usage_t;

/* Snapshot of the usage. Errors: CM_EINVAL. Thread-safe. */
CM_API int cm_ptr_usage(cm_ptr_allocator_t *a, cm_ptr_usage_t *out);
/* Return every cached page of every stream to its storage (explicit cleanup
 * + storage flush), like torch.cuda.empty_cache(). Thread-safe. */
CM_API void cm_ptr_empty_cache(cm_ptr_allocator_t *a);
/* Human-readable report (usage summary, then each stream's manager display)
 * into buf with snprintf semantics; returns the length needed. Thread-safe. */
CM_API size_t cm_ptr_report(cm_ptr_allocator_t *a, char *buf, size_t cap);

/* Built-in factory over the simulated device (cm_storage_sim_create): `arg`
 * is a cm_ptr_sim_t (or NULL for unlimited capacity, 2 MiB granule). Each
 * stream gets its own simulated device, so fake addresses of different
 * streams coincide: free such pointers with their own stream (cm_ptr_free). */
typedef struct cm_ptr_sim {
  uint64_t capacity;       /* 0 = unlimited */
  bool fail_over_capacity; /* fail with CM_EOOM past the capacity */
  uint64_t granularity;    /* 0 = 2 MiB */
} cm_ptr_sim_t;
CM_API CM_NODISCARD int cm_ptr_sim_factory(void *arg, void *stream, cm_storage_t **out,
                                           cm_diag_t *diag);

#ifdef __cplusplus
}
#endif
#endif
