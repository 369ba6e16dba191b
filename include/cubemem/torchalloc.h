/*
 * cubemem/torchalloc.h - a model of PyTorch's CUDA caching allocator
 * (c10/cuda/CUDACachingAllocator.cpp, native backend), so that `cubemem
 * replay` and `cubemem fit` can answer for PyTorch's allocator what they
 * answer for cubemem's layouts (`--pools pytorch`, `--pools
 * pytorch-expandable`).
 *
 * The model follows the allocator's documented rules, block by block:
 *  - requests are rounded up to 512 bytes, or with roundup_power2_divisions
 *    to the next of N equal divisions of their power-of-two interval;
 *  - requests of at most 1 MiB come from the small pool, whose segments are
 *    2 MiB; larger ones from the large pool, whose segments are 20 MiB for
 *    requests under 10 MiB and the request rounded up to 2 MiB otherwise;
 *  - a request takes the best-fitting cached free block of its pool, ordered
 *    by (stream, size, address); with max_split_size, blocks of at least that
 *    size serve only requests of at least that size, and only when they are
 *    less than max_non_split_rounding (20 MiB) larger than the request;
 *  - a block is split when what remains is at least 512 bytes (small pool, or
 *    any pool with expandable segments), or more than 1 MiB (large pool, when
 *    the request is under max_split_size); a freed block merges with free
 *    neighbours of its segment;
 *  - when no cached block fits, a new segment is allocated (cudaMalloc); when
 *    the device refuses it, oversize cached blocks are released first (with
 *    max_split_size), then every cached segment that is entirely free, and
 *    the allocation is retried once; if it still fails the request is out of
 *    memory;
 *  - expandable segments: one virtual range per pool and stream (9/8 of the
 *    device memory, as PyTorch reserves), mapped at its end in pages of
 *    2 MiB (small pool) or 20 MiB (large pool) as requests need them; a
 *    free block followed by unmapped space counts, for best fit, as the size
 *    it can grow to; on out-of-memory the pages entirely inside free blocks
 *    are unmapped and the allocation retried, and a range with nothing mapped
 *    is given back.
 * Not modelled: CUDA graphs and private pools, the per-process memory
 * fraction and with it garbage_collection_threshold (which PyTorch applies
 * only under a fraction; the option is read and has no effect), events and
 * cross-stream uses (a block is free as soon as it is freed), and IPC.
 *
 * The device is a cm_storage_t: segments are plain allocations
 * (cm_storage_alloc / cm_storage_dealloc: cudaMalloc / cudaFree), expandable
 * pages are virtual-memory mappings (a reservation per range; one vm_map per
 * run of pages: creates + maps + one set-access, as PyTorch's
 * ExpandableSegment::map; one vm_unmap per run: unmaps + releases), so the
 * storage's statistics (cm_storage_stats) count PyTorch's driver calls by
 * kind, and its bytes_held / bytes_held_peak are PyTorch's reserved bytes.
 *
 * Ownership: a model owns the storage given to cm_torch_create and
 * destroys it. Blocks returned by cm_torch_malloc belong to the model and
 * are valid until freed or until the model is destroyed.
 * Thread-safety: a model is used by one thread at a time; options and traces
 * may be shared. cm_torch_fit is thread-safe for distinct outputs.
 */
#ifndef CUBEMEM_TORCHALLOC_H
#define CUBEMEM_TORCHALLOC_H

#include "cubemem/common.h"
#include "cubemem/replay.h"
#include "cubemem/storage.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Power-of-two intervals of roundup_power2_divisions: [0, 2 MiB), [2 MiB,
 * 4 MiB), ... the last one from 32 GiB up (PyTorch's 16 intervals from 1 MiB). */
#define CM_TORCH_ROUNDUP_INTERVALS 16

/* PYTORCH_CUDA_ALLOC_CONF options (the ones that change where memory goes). */
typedef struct cm_torch_options {
  bool expandable_segments;          /* expandable_segments:True */
  uint64_t max_split_size;           /* bytes; UINT64_MAX (default): unlimited */
  uint64_t max_non_split_rounding;   /* bytes (default 20 MiB) */
  /* roundup_power2_divisions per interval (0 or 1: plain 512-byte rounding) */
  uint32_t roundup_divisions[CM_TORCH_ROUNDUP_INTERVALS];
  double garbage_collection_threshold; /* read and kept; not modelled (see above) */
  /* Device memory PyTorch sees (cudaGetDeviceProperties: totalGlobalMem),
   * which sizes the virtual range of an expandable segment (9/8 of it).
   * 0 = 80 GiB. The capacity the device enforces is the storage's. */
  uint64_t device_memory;
} cm_torch_options_t;

/* Fill *o with PyTorch's defaults (no option set). NULL ok. */
CM_API void cm_torch_options_init(cm_torch_options_t *o);

/* Apply a PYTORCH_CUDA_ALLOC_CONF string to *o (fields not named keep their
 * value): comma-separated key:value pairs, keys as PyTorch names them:
 * expandable_segments:True|False, max_split_size_mb:N (N > 20),
 * max_non_split_rounding_mb:N, roundup_power2_divisions:N (a power of two)
 * or [A:N,B:M,>:K] (A, B: interval starts in MiB, powers of two),
 * garbage_collection_threshold:F (0 < F < 1), backend:native. Keys that do
 * not change placement (release_lock_on_cudamalloc, pinned_*) are accepted
 * and ignored; "backend:cudaMallocAsync" and unknown keys are refused.
 * Errors: CM_EINVAL with a message naming the key and what it accepts (*o
 * unchanged). Thread-safe. */
CM_API CM_NODISCARD int cm_torch_options_parse(const char *conf, cm_torch_options_t *o,
                                               cm_diag_t *diag);

/* The options as a PYTORCH_CUDA_ALLOC_CONF string ("" for the defaults)
 * into buf (truncated to cap). Returns the length it needed. */
CM_API size_t cm_torch_options_format(const cm_torch_options_t *o, char *buf, size_t cap);

/* The size a request of `size` bytes is rounded to (round_size). */
CM_API uint64_t cm_torch_round_size(const cm_torch_options_t *o, uint64_t size);

/* ---- the model ------------------------------------------------------------ */

typedef struct cm_torch cm_torch_t;
typedef struct cm_torch_block cm_torch_block_t;

/* What the model did, beyond the storage's counters. */
typedef struct cm_torch_stats {
  uint64_t allocated;         /* bytes of allocated blocks (rounded sizes) now */
  uint64_t reserved;          /* segment bytes + mapped pages now */
  uint64_t reserved_peak;
  uint64_t reserved_small_peak, reserved_large_peak; /* per pool */
  uint64_t segments, segments_peak;   /* cudaMalloc'd segments now, at most */
  uint64_t cuda_mallocs, cuda_frees;  /* segments allocated and freed */
  uint64_t expandable_ranges;         /* virtual ranges reserved now */
  uint64_t pages_mapped, pages_unmapped; /* expandable pages, cumulative */
  uint64_t alloc_retries;     /* allocations retried after freeing cached memory */
  uint64_t ooms;              /* requests that failed */
} cm_torch_stats_t;

/* Create a model on `storage` (taken over: destroyed with the model, also on
 * failure). Expandable segments need a storage with virtual memory whose
 * granularity divides 2 MiB. opts NULL: the defaults.
 * Errors: CM_EINVAL (NULL storage, expandable segments without VM support or
 * with a granularity that does not divide 2 MiB), CM_ENOMEM. */
CM_API CM_NODISCARD int cm_torch_create(cm_storage_t *storage, const cm_torch_options_t *opts,
                                        cm_torch_t **out, cm_diag_t *diag);
/* Destroy the model, its blocks and segments, and the storage. NULL ok. */
CM_API void cm_torch_destroy(cm_torch_t *m);

/* Allocate `size` bytes on `stream` (PyTorch's malloc; size 0 allocates
 * nothing and gives a block of size 0). *out: the block.
 * Errors: CM_EOOM (the device refused even after freeing cached memory;
 * diag says what was reserved and allocated, as PyTorch's message does),
 * CM_ESTORAGE or the storage's status for other device failures, CM_ENOMEM. */
CM_API CM_NODISCARD int cm_torch_malloc(cm_torch_t *m, uint64_t size, uint64_t stream,
                                        cm_torch_block_t **out, cm_diag_t *diag);
/* Free a block from cm_torch_malloc (merging it with free neighbours; its
 * memory stays cached). NULL ok. */
CM_API void cm_torch_free(cm_torch_t *m, cm_torch_block_t *b);
/* torch.cuda.empty_cache(): release every entirely free segment and unmap
 * every free page. Errors: the storage's status. */
CM_API CM_NODISCARD int cm_torch_empty_cache(cm_torch_t *m, cm_diag_t *diag);
/* A starting state (a snapshot's segments when its history begins, see
 * cm_snapshot_start_state): a segment PyTorch already held, of `size` bytes
 * at PyTorch's address `addr`, in the small or the large pool, for `stream`,
 * as one free block. It is allocated from the storage (counted as a device
 * allocation); later segments are placed above it. Not with expandable
 * segments. Errors: CM_EINVAL (NULL, a size that is 0 or not a multiple of
 * 512, an overlap with another segment), CM_ENOTSUP (expandable segments),
 * the storage's status (the device refused), CM_ENOMEM. Nothing changes on
 * failure. */
CM_API CM_NODISCARD int cm_torch_seed_segment(cm_torch_t *m, uint64_t addr, uint64_t size,
                                              bool small, uint64_t stream, cm_diag_t *diag);
/* A block that was allocated before the history began: [addr, addr+size)
 * (size rounded as the block's, 0 counts as 512) taken out of the free block
 * of a seeded segment that holds it, the rest staying free. exact false: the
 * size is an estimate (the requested size rounded), and a remainder after it
 * that PyTorch would not have split off joins the block. *out: the block
 * (freed with cm_torch_free like any other). Errors: CM_EINVAL (NULL),
 * CM_ENOTFOUND (no free space there in a segment), CM_ENOMEM. Nothing changes
 * on failure. */
CM_API CM_NODISCARD int cm_torch_seed_block(cm_torch_t *m, uint64_t addr, uint64_t size,
                                            uint64_t requested, bool exact,
                                            cm_torch_block_t **out, cm_diag_t *diag);
/* The device address and the (rounded) size of a block. */
CM_API uint64_t cm_torch_block_addr(const cm_torch_block_t *b);
CM_API uint64_t cm_torch_block_size(const cm_torch_block_t *b);
/* The model's figures. */
CM_API void cm_torch_stats(const cm_torch_t *m, cm_torch_stats_t *out);
/* The bytes the segments and mapped pages made for `stream` hold now
 * (*now) and held at most (*peak); 0 for a stream never used. Past 256
 * streams, the 256th counts every later one. Either pointer may be NULL. */
CM_API void cm_torch_stream_reserved(const cm_torch_t *m, uint64_t stream, uint64_t *now,
                                     uint64_t *peak);
/* The storage (owned by the model). */
CM_API cm_storage_t *cm_torch_storage(const cm_torch_t *m);
/* Check the model's invariants (blocks tile their segments, free blocks are
 * in the right set, neighbours are merged, counters add up). Returns the
 * number of violations (0 when consistent). */
CM_API size_t cm_torch_check(const cm_torch_t *m);

/* ---- replay and fit --------------------------------------------------------- */

/* Replay `trace` through a model on `storage` (taken over and destroyed,
 * also on failure; a fresh storage, so its counters are the replay's): each
 * ALLOC is cm_torch_malloc, on stream 0 or, with opts->per_stream, on its
 * trace stream's id (then out->streams has each stream's figures: its
 * segments' reserved bytes), each FREE cm_torch_free (the block returns to
 * the pool of the stream it was allocated on). Fills *out as cm_replay_run does (peaks from the
 * storage, driver calls by kind, failures with PyTorch's out-of-memory
 * message, a timeline when asked; pool_count 0: the report has no cubemem
 * pools), and *tstats when not NULL (after the last event, before the live
 * blocks are freed). The observer (opts->observe) is not supported: it
 * needs a manager (CM_ENOTSUP when set). opts may be NULL.
 * Errors: CM_EINVAL, CM_ENOTSUP, cm_torch_create's, CM_ENOMEM. */
CM_API CM_NODISCARD int cm_torch_replay(const cm_trace_t *trace, cm_storage_t *storage,
                                        const cm_torch_options_t *topts,
                                        const cm_replay_options_t *opts,
                                        cm_replay_result_t *out, cm_torch_stats_t *tstats,
                                        cm_diag_t *diag);
/* cm_torch_replay from a snapshot's starting state (state may be NULL: the
 * same as cm_torch_replay): the model first holds the state's segments (at
 * PyTorch's addresses, counted as device allocations), and the trace's
 * first state->block_count ALLOC events (the snapshot's allocations live
 * before recording, cm_trace_parse_snapshot's time-zero rows) take their
 * blocks where PyTorch had them. A block that finds no free space there is
 * allocated as any other and counted in *unplaced (may be NULL). The trace
 * and the state must come from the same snapshot with the same options.
 * Errors: as cm_torch_replay, CM_ENOTSUP (expandable segments in the state,
 * or expandable_segments in topts), cm_torch_seed_segment's. */
CM_API CM_NODISCARD int cm_torch_replay_from(const cm_trace_t *trace, cm_storage_t *storage,
                                             const cm_torch_options_t *topts,
                                             const cm_snapshot_state_t *state,
                                             const cm_replay_options_t *opts,
                                             cm_replay_result_t *out, cm_torch_stats_t *tstats,
                                             uint64_t *unplaced, cm_diag_t *diag);

/* The smallest device memory on which `trace` replays through the model
 * with no out-of-memory (PyTorch's recovery modelled): the search of
 * cm_replay_fit (bisection on the grid between the peak live bytes and the
 * unconstrained peak, then confirmations above) over simulated devices
 * (cm_storage_sim_create, granularity opts->granularity) of each probed
 * capacity; each probe's device is what PyTorch sees (topts->device_memory
 * is the probed capacity; the unlimited probe keeps topts->device_memory,
 * 0 = 80 GiB); opts->per_stream replays a trace of several streams with
 * per-stream pools (cm_torch_replay's per_stream). opts may be NULL.
 * Errors: CM_EINVAL, CM_EOOM when the trace does not replay even on an
 * unlimited device, CM_ENOMEM. */
CM_API CM_NODISCARD int cm_torch_fit(const cm_trace_t *trace, const cm_torch_options_t *topts,
                                     const cm_fit_options_t *opts, cm_fit_result_t *out,
                                     cm_diag_t *diag);

#ifdef __cplusplus
}
#endif
#endif
