/*
 * cubemem/storage.h - the storage plug-in interface (spec §2) and the built-in
 * storages.
 *
 * A storage is a raw allocator keyed by 64-bit ids that it mints itself. The
 * memory manager carves the ranges it obtains into slices. A backend fills a
 * cm_storage_ops_t (normally `static const`) and wraps its context with
 * cm_storage_create(); the resulting cm_storage_t counts every call so that
 * statistics (device allocations, bytes held, peaks) are the same for every
 * backend.
 *
 * Thread-safety: a cm_storage_t is used by one thread at a time (the thread
 * that owns the memory manager it belongs to) unless the backend says more.
 * cm_storage_stats() may be called from any thread (counters are atomic).
 */
#ifndef CUBEMEM_STORAGE_H
#define CUBEMEM_STORAGE_H

#include "cubemem/common.h"
#include "cubemem/storage_counters.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a device reports about itself; the presets size pools from it. */
typedef struct cm_device_props {
  uint64_t max_page_size; /* sizing heuristic for presets (CUDA: total memory / 4) */
  uint64_t alignment;     /* pool alignment (CUDA: 512) */
} cm_device_props_t;

/* A resolved resource: where the bytes of (id, offset, size) live. For device
 * storages `addr` is the device address and `host` is NULL; for host storage
 * both describe the same bytes. */
typedef struct cm_resource {
  uint64_t addr;  /* device (or host) address of the first byte */
  void *host;     /* host pointer when the memory is host-accessible, else NULL */
  uint64_t size;  /* bytes */
} cm_resource_t;

/* Time a backend spent in each kind of driver call, in nanoseconds, while
 * timing was on (cm_storage_set_timing). Backends that call no driver (the
 * simulated device, host memory) report zeros. */
typedef struct cm_call_times {
  uint64_t creates, maps, set_access; /* cuMemCreate, cuMemMap, cuMemSetAccess */
  uint64_t unmaps, releases;          /* cuMemUnmap, cuMemRelease */
  uint64_t allocs, frees;             /* plain allocations and frees: cuMemAlloc, cuMemAllocAsync,
                                         cuMemAllocHost; cuMemFree, cuMemFreeAsync, cuMemFreeHost */
  uint64_t reserves, address_frees;   /* cuMemAddressReserve, cuMemAddressFree */
  uint64_t syncs;                     /* waits for the storage's stream (or context) to go idle
                                         before memory it used is unmapped or freed */
  uint64_t mem_queries;               /* cuMemGetInfo */
} cm_call_times_t;

/* Backend operations. Required: alloc, dealloc, get. Others may be NULL.
 * Every callback receives the backend context given to cm_storage_create(). */
typedef struct cm_storage_ops {
  const char *name; /* short backend name used in messages, e.g. "sim" */
  /* Alignment the backend allocates with (informational; pools use the device
   * properties' alignment). NULL means 1. */
  uint64_t (*alignment)(void *ctx);
  /* Obtain `size` bytes (size may be 0). On success store a new id in *out_id
   * and return CM_OK. Errors: CM_EOOM (device out of memory), CM_ETOOBIG,
   * CM_ESTORAGE (anything else, with diag). Must not change state on failure. */
  int (*alloc)(void *ctx, uint64_t size, uint64_t *out_id, cm_diag_t *diag);
  /* Mark `id` for release; may be deferred until flush. Unknown ids ignored. */
  void (*dealloc)(void *ctx, uint64_t id);
  /* Perform deferred releases. NULL means no-op. */
  int (*flush)(void *ctx);
  /* Resolve (id, offset, size). Unknown id: CM_EHANDLE with diag
   * "StorageId(N) in the <name> storage". */
  int (*get)(void *ctx, uint64_t id, uint64_t offset, uint64_t size, cm_resource_t *out,
             cm_diag_t *diag);
  /* Destroy the context and every allocation it still holds. */
  void (*release)(void *ctx);

  /* --- optional: events, for cross-stream pins (issue: streams) ---------- */
  /* Record an event on the storage's stream; *out is an opaque event. */
  int (*event_record)(void *ctx, void **out_event, cm_diag_t *diag);
  /* 1 when complete, 0 when pending, negative status on error. */
  int (*event_query)(void *ctx, void *event);
  /* Block until complete. */
  int (*event_sync)(void *ctx, void *event);
  void (*event_destroy)(void *ctx, void *event);

  /* --- optional: virtual memory, with the CUDA driver's rules ------------
   * The contract is that of cuMemAddressReserve / cuMemCreate / cuMemMap /
   * cuMemSetAccess / cuMemUnmap / cuMemRelease, and every backend (the
   * simulated device included) refuses what the driver refuses, with
   * CM_EINVAL and a message, changing nothing:
   *  - G = vm_granularity(). A reservation is a non-zero multiple of G.
   *  - Physical memory comes in objects of `piece` bytes (a non-zero multiple
   *    of G); each object is mapped whole, once, as its own mapping.
   *  - vm_map backs [offset, offset+size) of a reservation (offset a multiple
   *    of G, size a multiple of piece) with size/piece new objects and sets
   *    read-write access on the whole range in one call. The range lies inside
   *    the reservation and overlaps no existing mapping.
   *  - vm_unmap removes mappings only whole: [offset, offset+size) must be
   *    tiled exactly by existing mappings of `piece` bytes each. Each one is
   *    unmapped and its object released (its memory is free again).
   *  - vm_release gives back a reservation that has no mapping left
   *    (aliases, below, included).
   * Driver calls, as counted in cm_storage_stats_t: vm_map = size/piece
   * creates + size/piece maps + 1 set-access; vm_unmap = size/piece unmaps +
   * size/piece releases; vm_reserve / vm_release one call each.
   * The optional vm_alias (at the end of this table) adds a second kind of
   * mapping: an alias maps objects that vm_map made a second time, at
   * another address; its rules are given there. What is said above of
   * mappings holds for aliases too unless said otherwise there. */
  /* Mapping granule in bytes; 0 or NULL callback means "no VM support". */
  uint64_t (*vm_granularity)(void *ctx);
  /* Reserve `size` bytes of address space (no physical memory); the range is
   * resolved by get() like an allocation id. Errors: CM_EINVAL (size not a
   * non-zero multiple of G), CM_EOOM (no address space), CM_ESTORAGE. */
  int (*vm_reserve)(void *ctx, uint64_t size, uint64_t *out_id, cm_diag_t *diag);
  /* See above. Errors: CM_EOOM (device out of memory), CM_EINVAL (contract),
   * CM_EHANDLE (unknown reservation), CM_ESTORAGE. On failure nothing that
   * this call created stays mapped or allocated. */
  int (*vm_map)(void *ctx, uint64_t id, uint64_t offset, uint64_t size, uint64_t piece,
                cm_diag_t *diag);
  /* See above. Errors: CM_EINVAL (not exactly whole mappings of `piece`
   * bytes; nothing changes), CM_EHANDLE, CM_ESTORAGE (the driver failed: the
   * mappings it could not remove stay, and are reported). */
  int (*vm_unmap)(void *ctx, uint64_t id, uint64_t offset, uint64_t size, uint64_t piece,
                  cm_diag_t *diag);
  /* Give back the address range. Errors: CM_EINVAL (mappings remain),
   * CM_EHANDLE, CM_ESTORAGE. */
  int (*vm_release)(void *ctx, uint64_t id, cm_diag_t *diag);

  /* --- optional: poisoning (AddressSanitizer builds) ----------------------- */
  /* Mark [offset, offset+size) of allocation or reservation `id` as not
   * addressable (poison) or addressable again: the manager calls it for the
   * bytes of slices it caches and hands out, so a use after free into cached
   * memory is reported. Only storages of host memory implement it. */
  void (*poison)(void *ctx, uint64_t id, uint64_t offset, uint64_t size, bool poison);

  /* --- optional: memory information (cuMemGetInfo) ------------------------ */
  /* Bytes of device memory free now and in total; either may be 0 when
   * unknown. Used by dry runs to hit the limits a real run would. */
  int (*mem_info)(void *ctx, uint64_t *free_bytes, uint64_t *total_bytes);

  /* --- optional: time by driver call (backends that call a driver) -------- */
  /* Start (on) or stop timing each driver call; called by
   * cm_storage_set_timing. A context starts with it off. */
  void (*set_timing)(void *ctx, bool on);
  /* The time spent in each kind of driver call so far (cumulative, zero
   * while timing never was on). Called from any thread (cm_storage_stats). */
  void (*call_times)(void *ctx, cm_call_times_t *out);

  /* --- optional: device-to-device copies (relocation of live data) --------
   * copy enqueues a copy of `size` bytes (size > 0) from [src_off,
   * src_off+size) of allocation or reservation `src_id` to [dst_off,
   * dst_off+size) of `dst_id` on the storage's copy queue (CUDA: the
   * storage's stream, cuMemcpyDtoDAsync). Every byte of both ranges must be
   * inside its allocation or reservation and mapped with read-write access,
   * and the two ranges must not overlap; else CM_EINVAL (CM_EHANDLE for an
   * unknown id) with a message, and nothing is enqueued. The copy may not
   * have happened when the call returns: copy_wait blocks until every copy
   * enqueued so far has landed (CUDA: cuEventRecord + cuEventSynchronize).
   * Errors of copy_wait: CM_ESTORAGE (the device failed; the destination
   * bytes are undefined, the sources are intact). A backend without `copy`
   * cannot relocate (cm_manager_relocate refuses with CM_ENOTSUP). */
  int (*copy)(void *ctx, uint64_t dst_id, uint64_t dst_off, uint64_t src_id, uint64_t src_off,
              uint64_t size, cm_diag_t *diag);
  int (*copy_wait)(void *ctx, cm_diag_t *diag);

  /* --- optional: a second mapping of existing physical objects -----------
   * vm_alias maps each object behind [src_off, src_off+size) of reservation
   * src_id once more, in order, at [dst_off, dst_off+size) of reservation
   * dst_id, and sets read-write access on the whole destination range in one
   * call (CUDA: per object cuMemRetainAllocationHandle on its address,
   * cuMemMap of the handle at the new address, cuMemRelease of the retained
   * reference, which the new mapping does not need; then one
   * cuMemSetAccess). No memory is created: the bytes held do not change, and
   * both addresses show the same bytes. The rules, each refused with
   * CM_EINVAL and a message, changing nothing:
   *  - the source range is tiled exactly by ORIGINAL mappings (made by
   *    vm_map) of `piece` bytes each, vm_unmap's rule; an alias cannot be
   *    aliased;
   *  - the destination follows vm_map's rules: dst_off a multiple of G, the
   *    range inside reservation dst_id, overlapping no mapping there (dst_id
   *    may be src_id: the two ranges then differ and do not overlap);
   *  - an alias is removed by vm_unmap like any mapping: whole alias mappings
   *    of `piece` bytes tiling the range exactly. That removes the alias
   *    only: no object is released, the bytes held do not change. One
   *    vm_unmap call removes either original mappings only or aliases only;
   *    a range holding both is refused;
   *  - an original mapping is not unmapped while an alias of it exists (the
   *    message names the alias). The driver itself would keep the memory
   *    until its last mapping went; the contract is stricter, and every
   *    backend enforces it the same way;
   *  - an object may have several aliases; vm_release refuses a reservation
   *    that still holds an alias, as it refuses one with any mapping.
   * Errors: CM_EINVAL (contract), CM_EHANDLE (unknown reservation),
   * CM_ESTORAGE (the driver failed: nothing this call mapped stays mapped),
   * CM_ENOMEM (host memory). On any failure nothing changes.
   * Driver calls, as counted in cm_storage_stats_t: vm_alias = size/piece
   * maps + 1 set-access (no create); vm_unmap of aliases = size/piece unmaps
   * (no release). The retain and the release of the retained reference are
   * driver calls too, but they touch no memory and no cost is published for
   * them: they are not counted. NULL means not supported (the simulated
   * device and the CUDA storage support it; host and Vulkan storage do
   * not). */
  int (*vm_alias)(void *ctx, uint64_t dst_id, uint64_t dst_off, uint64_t src_id,
                  uint64_t src_off, uint64_t size, uint64_t piece, cm_diag_t *diag);
} cm_storage_ops_t;

typedef struct cm_storage cm_storage_t;

/* Counters kept by the cm_storage_t wrapper for every backend. Bytes are
 * counted when the manager asks (alloc / dealloc / map / unmap), so they are
 * what the manager holds from the device. */
typedef struct cm_storage_stats {
  uint64_t allocs;          /* successful alloc calls (plain device allocations) */
  uint64_t deallocs;        /* dealloc calls (plain frees) */
  uint64_t failed_allocs;   /* alloc, vm_map or vm_alias calls that failed */
  uint64_t maps;            /* successful vm_map and vm_alias operations (runs of pieces) */
  uint64_t unmaps;          /* successful vm_unmap operations, of mappings or of
                               aliases (runs of pieces) */
  uint64_t bytes_held;      /* allocated + mapped bytes now */
  uint64_t bytes_held_peak; /* high-water mark of bytes_held */
  uint64_t vm_reserved;     /* bytes of address space reserved now */
  uint64_t flushes;         /* backend flushes performed (skipped when nothing was queued) */
  uint64_t gets;            /* get calls */
  uint64_t time_ns;         /* time inside backend alloc/dealloc/flush/vm_* calls (timing on) */
  /* Driver calls by kind (storage.h's VM contract says how operations map to
   * calls): plain allocations and frees are `allocs` and `deallocs`. */
  uint64_t creates;         /* physical memory objects created */
  uint64_t map_calls;       /* mappings made (one per object; aliases included) */
  uint64_t unmap_calls;     /* mappings removed (aliases included) */
  uint64_t releases;        /* physical memory objects released */
  uint64_t set_access;      /* access-setting calls (one per vm_map or vm_alias) */
  uint64_t reserves;        /* address ranges reserved */
  uint64_t address_frees;   /* address ranges given back */
  /* Time (timing on) by operation: alloc, dealloc+flush, vm_map and vm_alias
   * (create, map and set-access), vm_unmap (unmap and release, of mappings
   * and of aliases), vm_reserve+vm_release. */
  uint64_t time_alloc_ns, time_free_ns, time_map_ns, time_unmap_ns, time_reserve_ns;
  uint64_t errors;          /* backend calls that failed other than for memory (EOOM) */
  uint64_t violations;      /* of which refused as contract violations (EINVAL, EHANDLE) */
  uint64_t mem_queries;     /* cm_storage_mem_info calls (cuMemGetInfo on CUDA) */
  /* Time (timing on) by kind of driver call, from the backend's call_times
   * (zeros without one: the simulated device, host memory). */
  cm_call_times_t call_ns;
  /* Device-to-device copies (relocation): copies enqueued, their bytes (each
   * byte copied counts once, although it is read once and written once),
   * waits for them, and copy or wait calls that failed. */
  uint64_t copies, bytes_copied, copy_waits, copy_failures;
  uint64_t time_copy_ns; /* time (timing on) in copy and copy_wait calls */
} cm_storage_stats_t;

/* Counters of `after` minus those of `before` (calls and counts, and the
 * time by driver call), levels and peaks as in `after`: what happened
 * between two snapshots of one storage. NULL arguments give zeros. Pure;
 * any thread. */
CM_API cm_storage_stats_t cm_storage_stats_diff(const cm_storage_stats_t *before,
                                                const cm_storage_stats_t *after);
/* Every driver call of *s, all kinds together (CM_STORAGE_CALLS). 0 for
 * NULL. Pure; any thread. */
CM_API uint64_t cm_storage_stats_driver_calls(const cm_storage_stats_t *s);

/* Wrap a backend. `ops` must outlive the storage. On success the storage owns
 * `ctx` and calls ops->release(ctx) exactly once when destroyed; on failure the
 * caller still owns ctx. Errors: CM_EINVAL (missing required op), CM_ENOMEM. */
CM_API CM_NODISCARD int cm_storage_create(const cm_storage_ops_t *ops, void *ctx,
                                          cm_storage_t **out);
/* Destroy a storage that no manager owns (managers destroy their own). NULL ok. */
CM_API void cm_storage_destroy(cm_storage_t *storage);
/* Snapshot of the counters. Any thread. */
CM_API void cm_storage_stats(const cm_storage_t *storage, cm_storage_stats_t *out);
/* Bytes held now (stats.bytes_held) without taking the whole snapshot: one
 * atomic load, for callers that follow it after every call. 0 for NULL. Any
 * thread. */
CM_API uint64_t cm_storage_bytes_held(const cm_storage_t *storage);
/* Backend name (static or owned by the storage). */
CM_API const char *cm_storage_name(const cm_storage_t *storage);
/* The backend's context (owned by the storage). */
CM_API void *cm_storage_context(const cm_storage_t *storage);
/* Whether the backend implements the virtual-memory operations. */
CM_API bool cm_storage_has_vm(const cm_storage_t *storage);

/* Direct calls through the wrapper (these update the statistics). Same
 * contracts as the ops above. Single-threaded per storage. */
CM_API CM_NODISCARD int cm_storage_alloc(cm_storage_t *s, uint64_t size, uint64_t *out_id,
                                         cm_diag_t *diag);
CM_API void cm_storage_dealloc(cm_storage_t *s, uint64_t id, uint64_t size);
CM_API int cm_storage_flush(cm_storage_t *s);
CM_API CM_NODISCARD int cm_storage_get(cm_storage_t *s, uint64_t id, uint64_t offset,
                                       uint64_t size, cm_resource_t *out, cm_diag_t *diag);
/* Free and total device memory as the backend reports them (0 when it does
 * not know). Errors: CM_ENOTSUP (no mem_info), the backend's error. */
CM_API CM_NODISCARD int cm_storage_mem_info(cm_storage_t *s, uint64_t *free_bytes,
                                            uint64_t *total_bytes);
/* Measure the time spent in backend calls (stats.time_ns and the time_*_ns
 * by operation) and, for backends with set_timing, in each driver call
 * (stats.call_ns); off by default because it costs two clock reads per call. */
CM_API void cm_storage_set_timing(cm_storage_t *s, bool on);

/* Events (for cross-stream pins and drop-queue fences). A storage without
 * event support records NULL events, which count as complete. */
/* Record an event after the work queued so far; *out may be NULL (no events).
 * Errors: the backend's status with diag. */
CM_API CM_NODISCARD int cm_storage_event_record(cm_storage_t *s, void **out, cm_diag_t *diag);
/* 1 when complete (NULL events always are), 0 when pending, <0 on error. */
CM_API int cm_storage_event_query(cm_storage_t *s, void *event);
/* Wait for completion. CM_OK, or the backend's error. */
CM_API int cm_storage_event_sync(cm_storage_t *s, void *event);
/* Destroy an event (NULL ok). */
CM_API void cm_storage_event_destroy(cm_storage_t *s, void *event);

/* Whether the backend can copy device memory (copy and copy_wait). */
CM_API bool cm_storage_can_copy(const cm_storage_t *s);
/* Enqueue a copy and wait for every enqueued copy (see the ops' contract).
 * Counted in the statistics (copies, bytes_copied, copy_waits,
 * copy_failures). Errors: CM_ENOTSUP (no copy support), the backend's. */
CM_API CM_NODISCARD int cm_storage_copy(cm_storage_t *s, uint64_t dst_id, uint64_t dst_off,
                                        uint64_t src_id, uint64_t src_off, uint64_t size,
                                        cm_diag_t *diag);
CM_API CM_NODISCARD int cm_storage_copy_wait(cm_storage_t *s, cm_diag_t *diag);

/* ---- built-in storages --------------------------------------------------- */

/* A share of `device`: a storage whose every operation goes to device's
 * backend (its ops and context, not through device's wrapper), so that
 * several managers, one per share, draw on one device (one capacity, one
 * address space) as the streams of one GPU do, while each share counts its
 * own calls (cm_storage_stats of the share; the device's own counters do not
 * move). The share offers what the device's backend offers: virtual memory
 * when cm_storage_has_vm(device) (and aliases, vm_alias, when the device's
 * backend has them), copies (relocation) when
 * cm_storage_can_copy(device), events, poisoning, memory information and
 * timing (started on the share when the device's timing is on); not the
 * time by driver call, which is the device's. Ownership: the share does not
 * own the device, which must outlive it; destroying the share (or the
 * manager that owns it) frees the share only: what its manager held was
 * given back to the device before, and the device keeps everything else.
 * Thread-safety: as the device's backend: shares of a device used from
 * several threads need a backend that allows it (the simulated device and
 * host storage do not). Errors: CM_EINVAL (NULL argument), CM_ENOMEM (*out
 * NULL, nothing made), with diag. */
CM_API CM_NODISCARD int cm_storage_share_create(cm_storage_t *device, cm_storage_t **out,
                                                cm_diag_t *diag);

/* Host storage: real, zero-filled, `alignment`-aligned host memory (alignment
 * a power of two >= 1; 0 means 64). Deallocation is immediate. Supports VM
 * (granule 64 KiB) with real memory, under the contract above exactly as the
 * simulated device enforces it (a violating call fails with CM_EINVAL,
 * changes nothing, and the wrapper counts it in stats.violations); no
 * vm_alias (its granules are private anonymous memory, which cannot be
 * mapped at a second address). Under AddressSanitizer the bytes of free
 * and cached slices are poisoned by the manager. Errors: CM_EINVAL, CM_ENOMEM. */
CM_API CM_NODISCARD int cm_storage_host_create(uint64_t alignment, cm_storage_t **out);

/* Simulated device: hands out address ranges with no backing memory, so that
 * 80 GiB workloads replay on a laptop, and enforces the virtual-memory
 * contract above exactly as the CUDA driver does (a violating call fails with
 * CM_EINVAL, changes nothing and is counted). `capacity` bytes (0 =
 * unlimited) bound allocated plus mapped bytes; when `fail_over_capacity` is
 * true a call that would exceed it fails with CM_EOOM, else it succeeds and is
 * only counted; aliases (vm_alias) count nothing against it, as they hold no
 * new memory. `granularity` is the VM granule (0 = 2 MiB, as on CUDA; a
 * power of two, at least 512). Plain allocations are 512-aligned, reservations
 * granule-aligned, addresses start at 0x100000000 and are never reused.
 * get() returns addr with host NULL. Errors: CM_EINVAL, CM_ENOMEM. */
CM_API CM_NODISCARD int cm_storage_sim_create(uint64_t capacity, bool fail_over_capacity,
                                              uint64_t granularity, cm_storage_t **out);

/* What a simulated device holds now and what it refused. */
typedef struct cm_sim_state {
  uint64_t violations;      /* calls refused as contract violations (CM_EINVAL) */
  uint64_t allocations;     /* plain allocations live */
  uint64_t reservations;    /* address ranges reserved */
  uint64_t mappings;        /* mappings (physical objects) live; aliases not included */
  uint64_t bytes_used;      /* allocated + mapped bytes: what counts against the capacity */
  uint64_t bytes_used_peak; /* high-water mark of bytes_used */
  uint64_t capacity;        /* as created (0 = unlimited) */
  char last_violation[192]; /* the latest violation's message, "" if none */
  uint64_t aliases;         /* alias mappings live (vm_alias; one per object aliased) */
} cm_sim_state_t;

/* Fill *out for a storage made by cm_storage_sim_create (wrapped by nothing
 * else). Same thread as the storage's other calls. Errors: CM_EINVAL (NULL,
 * or not a simulated device). */
CM_API CM_NODISCARD int cm_storage_sim_state(const cm_storage_t *s, cm_sim_state_t *out);

#ifdef __cplusplus
}
#endif
#endif
