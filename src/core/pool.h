/*
 * pool.h - the internal pool interface (spec §4.0) shared by the manager and
 * every pool kind (sliced, exclusive, direct, persistent, arena).
 *
 * Division of labour:
 *  - The MANAGER owns routing, handles, the freed inbox and the usage counters
 *    of handed-out slices: it marks a slice used when it hands it out and
 *    free before vt->on_free() (mark_used / mark_free in manager.c).
 *  - A POOL owns its pages/slices and free structures. try_reserve/alloc return
 *    a slice that is NOT in any free structure and whose storage_id/offset are
 *    final; the manager then marks it used with the requested size.
 *  - Pools report storage traffic through the cm__pool_* helpers below, which
 *    keep bytes_reserved, pages and their peaks (and the manager's totals).
 * All functions run on the thread driving the manager.
 */
#ifndef CM_CORE_POOL_H
#define CM_CORE_POOL_H

#include "core/desc.h"
#include "core/tree.h"
#include "base/util.h"
#include "cubemem/memory.h"

struct cm_manager;
typedef struct cm__pool cm__pool;

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
  uint8_t used;        /* handed out (non-free) */
  uint8_t mapped;      /* backed by storage (false while lazily reserved) */
  uint8_t touched;     /* capture: handed out during the current window */
} cm__slice;

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
  /* Visit every slice (used and free), e.g. for capture retention. */
  void (*for_each)(cm__pool *p, void (*fn)(cm__slice *s, void *arg), void *arg);
  /* Release every storage allocation and detach every descriptor. */
  void (*destroy)(cm__pool *p);
} cm__pool_vt;

struct cm__pool {
  const cm__pool_vt *vt;
  struct cm_manager *m;
  uint8_t position;       /* routing position / CM_PERSISTENT_POOL */
  cm_pool_options_t opts; /* effective options */
  uint64_t alignment;     /* pool alignment (>= 1) */
  cm_usage_t usage;       /* kept incrementally */
  uint64_t pages, pages_peak, pages_unmapped, largest_alloc, reserved_peak;
  /* Reservation count at which this pool's periodic cleanup is next due
   * (UINT64_MAX: never). Each cleanup() call updates it; the manager calls
   * the periodic cleanup only once the earliest pool is due. */
  uint64_t next_cleanup;
};

/* ---- constructors (one per kind) ---- */
int cm__pool_sliced_new(struct cm_manager *m, const cm_pool_options_t *o, uint8_t pos,
                        cm__pool **out);
int cm__pool_exclusive_new(struct cm_manager *m, const cm_pool_options_t *o, uint8_t pos,
                           cm__pool **out);
int cm__pool_direct_new(struct cm_manager *m, const cm_pool_options_t *o, uint8_t pos,
                        cm__pool **out);
int cm__pool_persistent_new(struct cm_manager *m, cm__pool **out);
int cm__pool_arena_new(struct cm_manager *m, const cm_pool_options_t *o, uint8_t pos,
                       cm__pool **out);

/* ---- helpers provided by the manager (manager.c) ---- */
cm_storage_t *cm__pool_storage(cm__pool *p);
/* New owned descriptor for slice s (sets desc->slice/mgr/init). NULL on OOM. */
cm_desc_t *cm__slice_new_desc(cm__pool *p, cm__slice *s);
/* bytes_reserved += delta (may be negative), with peaks. */
void cm__pool_reserved_add(cm__pool *p, int64_t delta);
/* pages += delta with pages_peak. */
void cm__pool_pages_add(cm__pool *p, int64_t delta);

#endif
