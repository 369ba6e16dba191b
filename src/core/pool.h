/*
 * pool.h - the internal pool interface (spec §4.0) shared by the manager and
 * every pool kind (sliced, exclusive, direct, persistent, arena).
 *
 * Layers: manager -> pool -> storage. The manager (manager.c) builds each
 * pool with a cm__pool_ctx and calls it through its vtable; a pool sees only
 * that context, the storage and the descriptors (desc.h), never the manager:
 * no pool file includes the manager's state header or calls a cm__manager_*
 * function.
 *
 * Division of labour:
 *  - The MANAGER owns routing, handles and the freed inbox. It hands a slice
 *    out with cm__pool_mark_used and takes a released one back with
 *    cm__pool_mark_free before vt->on_free() (the helpers below).
 *  - A POOL owns its pages/slices, its free structures and its accounting:
 *    usage, pages, bytes_reserved and their peaks live in cm__pool and only
 *    pool code (the pool's file and the helpers below) changes them.
 *    try_reserve/alloc return a slice that is NOT in any free structure and
 *    whose storage_id/offset are final; the manager then marks it used with
 *    the requested size.
 *  - The manager's totals (reserved bytes over all pools and their peak) are
 *    read from the pools: after each pool call that may change reserved
 *    bytes (see the vtable) the manager takes the change with
 *    cm__pool_reserved_take, whose high-water mark keeps the peak exact.
 * All functions run on the thread driving the manager.
 */
#ifndef CM_CORE_POOL_H
#define CM_CORE_POOL_H

#include "core/desc.h"
#include "core/tree.h"
#include "base/util.h"
#include "cubemem/memory.h"
#include "storage/storage_internal.h"

typedef struct cm__pool cm__pool;

/* What a pool uses of its owner, given at construction (the pool keeps a
 * copy). The pointers point into owner state that outlives the pool; the
 * pool only reads them, except lazy_ids, from which it mints ids. */
typedef struct cm__pool_ctx {
  cm_storage_t *storage;         /* borrowed: where the pool's memory comes from */
  uint64_t alignment;            /* device alignment (>= 1) */
  uint64_t max_page_size;        /* the device's max_page_size (persistent, arena regions) */
  cm__inbox *inbox;              /* the owner's freed inbox: slices' descriptors belong to it */
  uint64_t *lazy_ids;            /* next id for lazily reserved memory (counts down, shared) */
  const uint64_t *dry_runs;      /* open dry runs (spec §6); > 0: memory is reserved lazily */
  /* the cm_page_updates_t of the reservation in progress: under
   * CM_PAGES_ADD_ONLY an alloc gives nothing back (CM_PAGES_FORBIDDEN calls
   * no alloc) */
  const uint8_t *page_updates;
  const uint64_t *reserve_clock; /* reservations made so far (the cleanup's alloc_nr) */
  /* The dry-run ledger: bytes dry runs counted without asking the storage
   * for them (the arenas' virtual granules and lazy segments), shared by the
   * owner's pools; what a dry run adds to the device's used memory when it
   * checks the device's limit. */
  uint64_t *dry_ledger;
  /* The owner relocates live data when the device refuses memory
   * (cm_manager_config_t.relocate): its packing, not placement, then keeps
   * live data compact (the arena places low; pool_arena.c, "Placement"). */
  bool relocate;
} cm__pool_ctx;

typedef struct cm__slice {
  cm_desc_t *desc;     /* owned descriptor (its OWNED bit is set) */
  uint64_t storage_id; /* storage allocation or VM range id */
  uint64_t offset;     /* offset inside that allocation */
  uint64_t size;       /* requested bytes (valid while used) */
  uint64_t padding;    /* alignment padding (valid while used) */
  uint64_t span;       /* bytes this slice occupies (>= size + padding) */
  uint64_t cursor;     /* stream cursor stored at bind */
  uint32_t index;      /* slot index (direct/persistent/exclusive), 0 otherwise */
  uint8_t pool;        /* routing position; CM_PERSISTENT_POOL for persistent */
  uint8_t used;        /* handed out (non-free): 1, with CM__USED_GUARDED while guarded */
  uint8_t mapped;      /* backed by storage (false while lazily reserved) */
  uint8_t touched;     /* capture: handed out during the current window */
  /* raw addresses handed out (cm_manager_get_resource) and not yet released
   * (cm_manager_unguard): relocation never moves the slice nor anything on
   * its page (granules); 0 on a free slice (the release that frees a
   * guarded slice drops its guards) */
  uint32_t guards;
} cm__slice;

/* cm__slice.index of a stitched slice (an arena's last resort when the
 * device refuses memory: arena_stitch.c); the manager only reads it to say
 * so in its log. */
#define CM__SLICE_STITCHED 0xFFFFFFFFu

/* cm__slice.used: also set while the slice holds guards (so the release
 * that frees it tests one byte it reads anyway). */
#define CM__USED_GUARDED 2u

/* Relocation (relocate.c): one planned move of a live slice to a target
 * slice the pool reserved for it (taken out of the free structures, not
 * counted as used by the pool: the manager marks it). */
typedef struct cm__move {
  cm__slice *src, *dst;
} cm__move;

typedef struct cm__moves {
  cm__move *v;
  size_t n, cap;
} cm__moves;

/* Append a move; CM_ENOMEM on host OOM (nothing appended). */
int cm__moves_push(cm__moves *mv, cm__slice *src, cm__slice *dst);

/* Pool entries. Only alloc, on_free (giving back a page that emptied, as an
 * adaptive pool's outdated pages do), take_free, cleanup, materialize and
 * destroy may change bytes_reserved; the manager takes the change after each
 * of them (cm__pool_reserved_take), so the other entries must leave it
 * alone. */
typedef struct cm__pool_vt {
  const char *name;
  /* Whether this pool serves `size` (never called for the persistent pool). */
  bool (*accept)(const cm__pool *p, uint64_t size);
  /* Reuse memory for `size` (effective size `eff`), or NULL. */
  cm__slice *(*try_reserve)(cm__pool *p, uint64_t size, uint64_t eff);
  /* Grow the pool for `size`; lazy = reserve address space only.
   * Errors: CM_ECAPACITY (with diag), storage errors, CM_ENOMEM. */
  int (*alloc)(cm__pool *p, uint64_t size, uint64_t eff, bool lazy, cm__slice **out,
               cm_diag_t *diag);
  /* A handed-out slice became free (already unmarked by the manager). */
  void (*on_free)(cm__pool *p, cm__slice *s);
  /* A FREE slice is being taken again without a reservation (capture pins):
   * remove it from the free structures. */
  void (*take_free)(cm__pool *p, cm__slice *s);
  /* Periodic (explicit=false) or explicit cleanup. `alloc_nr` counts
   * reservations; `serving` is the size being reserved (periodic release skips
   * memory that would serve it), UINT64_MAX when none. Must set
   * p->next_cleanup. */
  void (*cleanup)(cm__pool *p, uint64_t alloc_nr, bool explicit_cleanup, uint64_t serving);
  /* Back a lazily reserved slice with storage (spec §6). */
  int (*materialize)(cm__pool *p, cm__slice *s, cm_diag_t *diag);
  /* Page/slot index of a slice for locations. */
  void (*locate)(const cm__pool *p, const cm__slice *s, cm_location_t *out);
  /* Count invariant violations (recompute usage from the structures). */
  size_t (*check)(cm__pool *p, cm_diag_t *diag);
  /* Append the pool's display (spec §5.11). Returns bytes needed. */
  size_t (*display)(cm__pool *p, char *buf, size_t cap);
  /* Optional: reserved bytes in wholly free units (see cm_pool_report_t's
   * bytes_cached); O(1) or O(pages). NULL: not kept. */
  uint64_t (*cached)(const cm__pool *p);
  /* Optional: fill the kind's own report fields (after the common ones). */
  void (*report)(cm__pool *p, cm_pool_report_t *out);
  /* Visit every slice (used and free), e.g. for capture retention. */
  void (*for_each)(cm__pool *p, void (*fn)(cm__slice *s, void *arg), void *arg);
  /* Release every storage allocation and detach every descriptor. */
  void (*destroy)(cm__pool *p);
  /* Optional (NULL: the pool's slices never move). Relocation's plan: pick
   * the pool's sparse units (arena granules, outdated pages) whose live,
   * mapped, unguarded slices can all be moved to room outside them, reserve
   * a target slice of each one's span and append (source, target) to `out`.
   * A unit whose slices cannot all find a target keeps all of them (its
   * targets are given back at once). `why` says where targets may go
   * (cm_relocate_reason_t: growth only for ARENA_FULL and CAPTURE; a pool
   * may stay in held room anyway) and how eager the plan is. Errors:
   * CM_ENOMEM (the moves appended so far stay valid). May change
   * bytes_reserved (growth). */
  int (*reloc_plan)(cm__pool *p, cm_relocate_reason_t why, cm__moves *out);
  /* Optional: used slice s gained (delta > 0) or lost guards (raw addresses
   * handed out); a pool whose guarded pages serve no new reservation counts
   * them. NULL: guards only keep relocation away. */
  void (*guard)(cm__pool *p, cm__slice *s, int64_t delta);
  /* Optional: after a reservation the device refused even once the pools
   * gave back what they could, write into buf (cap bytes, NUL-terminated
   * when cap > 0) a sentence on where the pool's held memory that is not
   * live lies; returns its length (0: nothing to say). Cold: may scan. */
  size_t (*explain_oom)(cm__pool *p, char *buf, size_t cap);
  /* Optional: after a reservation the device refused even once the pools
   * gave back what they could (and relocation, when enabled, moved what it
   * could), grow the pool at the placement that needs the least new memory,
   * when that is less than alloc's placement needed (the arena: a free
   * block's end, or a stitched slice, whose index is CM__SLICE_STITCHED:
   * arena_stitch.c). Only ever called where
   * the reservation would fail otherwise, so it changes nothing on a device
   * that serves every reservation. Errors as alloc's; CM_EOOM (diag
   * untouched) when no placement needs less. Cold: may scan. */
  int (*alloc_tight)(cm__pool *p, uint64_t size, uint64_t eff, bool lazy, cm__slice **out,
                     cm_diag_t *diag);
} cm__pool_vt;

struct cm__pool {
  const cm__pool_vt *vt;
  cm__pool_ctx ctx;       /* what the pool may use of its owner */
  uint8_t position;       /* routing position / CM_PERSISTENT_POOL */
  cm_pool_options_t opts; /* effective options */
  uint64_t alignment;     /* pool alignment (>= 1) */
  cm_usage_t usage;       /* kept incrementally */
  uint64_t pages, pages_peak, pages_unmapped, largest_alloc, reserved_peak;
  /* bytes_reserved at the last cm__pool_reserved_take, and the highest value
   * it reached since */
  uint64_t reserved_mark, reserved_high;
  /* Reservation count at which this pool's periodic cleanup is next due
   * (UINT64_MAX: never). Each cleanup() call updates it; the manager calls
   * the periodic cleanup only once the earliest pool is due. */
  uint64_t next_cleanup;
  /* Every size below it is accepted (vt->accept is asked only from it up;
   * 0: always asked). A pool whose accept is a size bound sets it, so the
   * routing tests it inline. */
  uint64_t accept_below;
};

/* Does pool p accept a request of `size` bytes (vt->accept, with the
 * inline test of accept_below first)? */
static inline bool cm__pool_accepts(const cm__pool *p, uint64_t size) {
  return size < p->accept_below || p->vt->accept(p, size);
}

/* ---- constructors (one per kind; each copies *ctx) ---- */

/* Fill the head every pool shares (entry table, a copy of *ctx, routing
 * position, alignment >= 1) of a freshly calloc'ed pool; the constructor
 * sets its options and the rest. */
static inline void cm__pool_base_init(cm__pool *p, const cm__pool_vt *vt, const cm__pool_ctx *ctx,
                                      uint8_t pos) {
  p->vt = vt;
  p->ctx = *ctx;
  p->position = pos;
  p->alignment = ctx->alignment ? ctx->alignment : 1;
}
int cm__pool_sliced_new(const cm__pool_ctx *ctx, const cm_pool_options_t *o, uint8_t pos,
                        cm__pool **out);
int cm__pool_exclusive_new(const cm__pool_ctx *ctx, const cm_pool_options_t *o, uint8_t pos,
                           cm__pool **out);
int cm__pool_direct_new(const cm__pool_ctx *ctx, const cm_pool_options_t *o, uint8_t pos,
                        cm__pool **out);
int cm__pool_persistent_new(const cm__pool_ctx *ctx, cm__pool **out);
/* Has the persistent pool a slice of effective size eff (the size-match rule)? */
bool cm__persistent_has_size(cm__pool *p, uint64_t eff);
/* An adaptive-pages pool (pool_adaptive.c): sliced pools whose page size
 * follows the largest allocation, older sizes kept as outdated pools. */
int cm__pool_adaptive_new(const cm__pool_ctx *ctx, const cm_pool_options_t *o, uint8_t pos,
                          cm__pool **out);
/* The dedicated pool (pool_dedicated.c), position CM_DEDICATED_POOL: one
 * storage allocation per reservation, given back at the next cleanup after
 * it is freed. */
int cm__pool_dedicated_new(const cm__pool_ctx *ctx, cm__pool **out);
/* Sliced-pool internals the adaptive pool builds on (pool_sliced.c):
 * the pool holding slice s (s was handed out by a sliced pool); its page
 * size; free slice s (already unmarked) and give its page back to the
 * storage at once if that emptied it (pages are renumbered; returns whether
 * a page went); the number of entirely free pages (O(pages)). */
cm__pool *cm__sliced_owner(const cm__slice *s);
uint64_t cm__sliced_page_size(const cm__pool *p);
bool cm__sliced_free_release(cm__pool *p, cm__slice *s);
size_t cm__sliced_empty_pages(const cm__pool *p);
/* The pages of sliced pool p, and their slices in address order (relocation
 * walks an outdated pool page by page): the number of pages, the first
 * slice of page i (NULL past the end), the slice after s in its page (NULL
 * at its end). */
size_t cm__sliced_pages(const cm__pool *p);
/* The sliced pool's guard entry (pool.h's vt->guard), for the adaptive pool. */
void cm__sliced_guard(cm__pool *p, cm__slice *s, int64_t delta);
cm__slice *cm__sliced_page_head(cm__pool *p, size_t i);
cm__slice *cm__sliced_next(cm__slice *s);
int cm__pool_arena_new(const cm__pool_ctx *ctx, const cm_pool_options_t *o, uint8_t pos,
                       cm__pool **out);

/* ---- helpers of every pool (the pool's own state and context only) ---- */

/* The storage the pool allocates from. */
static inline cm_storage_t *cm__pool_storage(cm__pool *p) { return p->ctx.storage; }

/* Mint an id for lazily reserved memory (unique across the owner's pools). */
static inline uint64_t cm__pool_lazy_id(cm__pool *p) { return (*p->ctx.lazy_ids)--; }

/* New owned descriptor for slice s, owned through the context's inbox (sets
 * desc->slice/owner/init and s->desc). NULL on host OOM (s unchanged). */
static inline cm_desc_t *cm__slice_new_desc(cm__pool *p, cm__slice *s) {
  cm_desc_t *d = cm__desc_new_owned(p->ctx.inbox);
  if (!d) return NULL;
  d->slice = s;
  d->owner = p->ctx.inbox;
  d->init = true;
  s->desc = d;
  return d;
}

/* bytes_reserved += delta (may be negative), with the peak and the
 * high-water mark since the last cm__pool_reserved_take. */
static inline void cm__pool_reserved_add(cm__pool *p, int64_t delta) {
  p->usage.bytes_reserved += (uint64_t)delta;
  if (p->usage.bytes_reserved > p->reserved_peak) p->reserved_peak = p->usage.bytes_reserved;
  if (p->usage.bytes_reserved > p->reserved_high) p->reserved_high = p->usage.bytes_reserved;
}

/* pages += delta with pages_peak. */
static inline void cm__pool_pages_add(cm__pool *p, int64_t delta) {
  p->pages += (uint64_t)delta;
  if (p->pages > p->pages_peak) p->pages_peak = p->pages;
}

/* The pool's reserved bytes since the previous take: then, the highest
 * meanwhile (>= both ends) and now. */
typedef struct cm__reserved_change {
  uint64_t before, high, now;
} cm__reserved_change;

/* Take the change of bytes_reserved since the previous take (for the
 * owner's totals) and start the next one. */
static inline cm__reserved_change cm__pool_reserved_take(cm__pool *p) {
  cm__reserved_change c = {p->reserved_mark, p->reserved_high, p->usage.bytes_reserved};
  p->reserved_mark = p->reserved_high = p->usage.bytes_reserved;
  return c;
}

/* Under ASan: the first n bytes of slice s become addressable (poison =
 * false) or not, through the storage's optional poison op (the host
 * storage's). Release builds make no call. */
static inline void cm__pool_asan_mark(cm__pool *p, const cm__slice *s, uint64_t n, bool poison) {
#ifdef CM_ASAN
  if (s->mapped && n)
    cm__storage_poison(cm__pool_storage(p), s->storage_id, s->offset, n, poison);
#else
  (void)p;
  (void)s;
  (void)n;
  (void)poison;
#endif
}

/* Slice s of p is handed out for `size` bytes: count it in the usage. */
static inline void cm__pool_mark_used(cm__pool *p, cm__slice *s, uint64_t size) {
  uint64_t pad = cm__pad(size, p->alignment);
  s->size = size;
  s->padding = pad;
  s->used = 1;
  cm__pool_asan_mark(p, s, size, false);
  p->usage.number_allocs++;
  p->usage.bytes_in_use += size;
  p->usage.bytes_padding += pad;
  if (size > p->largest_alloc) p->largest_alloc = size;
}

/* Handed-out slice s of p was released: take it out of the usage (before
 * vt->on_free). */
static inline void cm__pool_mark_free(cm__pool *p, cm__slice *s) {
  s->used = 0;
  cm__pool_asan_mark(p, s, s->span, true);
  p->usage.number_allocs--;
  p->usage.bytes_in_use -= s->size;
  p->usage.bytes_padding -= s->padding;
}

#endif
