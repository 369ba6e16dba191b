/*
 * fakecuda.h - control interface of libfakecuda.so, a stand-in for the CUDA
 * driver (libcuda.so.1) that refuses what the real driver refuses.
 *
 * libfakecuda.so exports the driver entry points cubemem uses (cuInit,
 * cuMemAlloc_v2, cuMemCreate, cuMemMap, cuStreamCreate, ...) with the
 * driver's signatures, so it can be loaded wherever libcuda.so.1 would be:
 * CM_CUDA_LIBRARY=/path/libfakecuda.so for the CLI, the PyTorch/CuPy plugin
 * and the Python module, or cm_cuda_device_open_library() in tests. No GPU
 * memory exists: device addresses are fake (never dereference them); pinned
 * host memory is real.
 *
 * Every call checks the documented rules of the CUDA driver API (granularity
 * of reservation, creation and mapping sizes and offsets, mappings only inside
 * one reservation and never overlapping, unmapping whole mappings only,
 * access set only on mapped ranges, a current context for the calls that
 * need one, live handles for events and streams, frees of known pointers
 * only, cuMemFreeAsync for stream-ordered memory only, ...). A call that
 * breaks a rule returns the driver's error code and is counted as a
 * violation; running out of device memory is not a violation
 * (CUDA_ERROR_OUT_OF_MEMORY). Work queued on streams (fakecuda_launch) stays
 * pending until a synchronisation completes it, so reusing memory that a
 * destroyed stream's pending work still reads is caught too.
 *
 * Configuration (read at load and by fakecuda_reset(); sizes accept K/M/G
 * suffixes, powers of 1024):
 *   FAKECUDA_DEVICES      number of devices (default 1, at most 8)
 *   FAKECUDA_CAPACITY     device memory per device (default 80G); also the
 *                         total cuDeviceTotalMem reports
 *   FAKECUDA_GRANULARITY  VM granule (default 2M)
 *   FAKECUDA_VMM          0: no virtual memory management (attribute 102 = 0,
 *                         the VM calls fail with CUDA_ERROR_NOT_SUPPORTED)
 *   FAKECUDA_MEMPOOL      0: no stream-ordered allocator (attribute 115 = 0,
 *                         cuMemAllocAsync fails with CUDA_ERROR_NOT_SUPPORTED)
 *   FAKECUDA_PEER         0: devices cannot access each other's memory
 *   FAKECUDA_CREATE_DELAY_NS  cuMemCreate takes at least this long (default 0),
 *                         so time measured per kind of call can be checked
 *   FAKECUDA_REPORT=PATH  write fakecuda_report() to PATH at process exit
 *   FAKECUDA_VERBOSE=1    print each violation to stderr as it happens
 *
 * Threading: every entry point is thread-safe (one mutex); the current
 * context stack is per thread, as in the driver.
 */
#ifndef FAKECUDA_H
#define FAKECUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Knobs; fakecuda_config() returns the live copy, changes apply at once. */
typedef struct fakecuda_config {
  int devices;
  uint64_t capacity;     /* per device */
  uint64_t host_capacity;
  uint64_t granularity;
  int vmm, mempool, peer;
  int init_result;       /* what cuInit returns (0 = success) */
  int force_alloc_error; /* non-zero: cuMemAlloc_v2 returns it (not a violation) */
  int async_fails;       /* non-zero: cuMemAllocAsync returns CUDA_ERROR_NOT_SUPPORTED */
  int reuse_streams;     /* cuStreamCreate reuses the handle of the last destroyed stream (default 1) */
  int attribute_limit;   /* non-zero: attributes >= it are unknown (an older driver) */
  uint64_t create_delay_ns; /* cuMemCreate takes at least this long (a driver's latency) */
  int verbose;
  int fail_releases; /* the next N cuMemRelease calls fail with CUDA_ERROR_UNKNOWN (999), changing
                        nothing (not a violation) */
} fakecuda_config_t;

/* Driver calls made, by entry point, and what the fake holds. */
typedef struct fakecuda_counts {
  uint64_t mem_alloc, mem_free, mem_alloc_async, mem_free_async, mem_alloc_host, mem_free_host;
  uint64_t address_reserve, address_free, create, release, map, unmap, set_access;
  uint64_t event_create, event_record, event_query, event_sync, event_destroy;
  uint64_t stream_create, stream_destroy, stream_sync, ctx_sync, ctx_push, ctx_pop;
  uint64_t retains, releases, get_attribute, mem_get_info;
  uint64_t memcpy_dtod; /* cuMemcpyDtoDAsync calls that passed */
  uint64_t mem_retain;  /* cuMemRetainAllocationHandle calls that passed */
  uint64_t violations;
  /* held now */
  uint64_t allocations, allocation_bytes, reservations, mappings, handles, events, streams;
  uint64_t host_allocations, contexts_retained, contexts_pushed, pending_work;
  uint64_t used[8], used_peak[8]; /* device bytes allocated + created, per device */
} fakecuda_counts_t;

/* Forget everything (no leak checks) and re-read the environment. */
void fakecuda_reset(void);
fakecuda_config_t *fakecuda_config(void);
/* Snapshot of the counters. */
void fakecuda_counts(fakecuda_counts_t *out);
uint64_t fakecuda_violations(void);
/* Objects still held: allocations + reservations + mappings + unreleased
 * memory handle references (`handles`: one per cuMemCreate and per
 * cuMemRetainAllocationHandle not yet matched by a cuMemRelease) + events +
 * streams + retained primary contexts + pushed contexts + pinned host
 * allocations. 0 after a clean teardown. */
uint64_t fakecuda_held(void);
/* The latest violation's message ("" if none). */
const char *fakecuda_last_violation(void);
/* A text report (key=value lines: violations, held, every count, the last
 * violations); snprintf semantics, returns the length needed. */
size_t fakecuda_report(char *buf, size_t cap);
/* Queue work on `stream` (a CUstream) that reads and writes [ptr, ptr+size)
 * on the current context's device: the range must be allocated, or mapped
 * with access for that device, and no pending work of a destroyed stream may
 * still use it. The work completes at the next stream, event or context
 * synchronisation that covers it. Returns a CUresult. */
int fakecuda_launch(void *stream, unsigned long long ptr, size_t size);

#ifdef __cplusplus
}
#endif
#endif
