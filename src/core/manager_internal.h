/*
 * manager_internal.h - the memory manager's state (see manager.c), for the
 * files that are the manager: manager.c and format.c (its display).
 *
 * Boundary: the manager sits above the pools (pool.h) and the storage. It
 * gives every pool a cm__pool_ctx (pool_ctx below: the storage, the device
 * alignment and max page size, the freed inbox, and pointers to its lazy-id
 * counter, its dry-run depth, its reservation clock and the page-update
 * restriction of the reservation in progress) and nothing else; no
 * pool includes this header or calls back into the manager. The pools keep
 * their own accounting; reserved_total / reserved_peak here are derived from
 * it after each pool call that may change reserved bytes (take_reserved in
 * manager.c).
 */
#ifndef CM_CORE_MANAGER_INTERNAL_H
#define CM_CORE_MANAGER_INTERNAL_H

#include "core/pool.h"

struct cm_manager {
  char name[128];
  bool debug_checks;           /* debug level 3: check invariants after mutating calls */
  cm_storage_t *storage;       /* owned */
  cm_device_props_t props;     /* alignment >= 1 */
  cm__pool_ctx pool_ctx;       /* what every pool is built with (see pool.h) */
  cm__pool *pools[CM_MAX_DYNAMIC_POOLS];
  size_t npools;
  cm__pool *persistent;        /* always present, position 255 */
  cm__pool *dedicated;         /* always present, position 254 (CM_MODE_DEDICATED) */
  cm__inbox inbox;             /* descriptors released from any thread */
  uint64_t alloc_reserve_count; /* reservations so far; the pools read it (pool_ctx) */
  cm_alloc_mode_t mode;        /* effective mode */
  cm_alloc_mode_t base_mode;   /* the mode while no window is open */
  /* open windows (cm_manager_set_mode), innermost last, run-length coded:
   * runs of windows of one kind; windows past the 64th run are `overflow`
   * (they keep the enclosing mode) */
  struct {
    cm_alloc_mode_t kind;
    uint64_t count;
  } runs[64];
  size_t nruns;
  uint64_t overflow;
  bool overflow_warned;
  cm_persistent_memory_t pm;
  cm_logger_t *logger;         /* borrowed */
  cm_log_level_t log_level;    /* cached: the logger's level is immutable */
  uint64_t next_cleanup;       /* min of the dynamic pools' next_cleanup */
  uint8_t capacity_warned[32]; /* bitset over pool positions */
  uint64_t warnings;
  /* capture (spec §5.8) */
  bool capturing, priming;
  cm_alloc_mode_t restore_mode;
  cm_handle_t *primed;
  size_t nprimed, capprimed;
  /* dry runs (spec §6) */
  uint64_t dry_runs;     /* open dry runs; the pools read it (pool_ctx) */
  uint64_t dry_ledger;   /* bytes dry runs counted without the storage (pool_ctx) */
  uint8_t page_updates;  /* the reservation in progress's cm_page_updates_t (pool_ctx) */
  uint64_t lazy_next_id; /* ids for lazily reserved memory, counting down; pools mint them */
  /* totals: the sum of the pools' bytes_reserved and its peak (take_reserved) */
  uint64_t reserved_total, reserved_peak;
  /* relocation (relocate.c): enabled by the config; what it did so far; and
   * the pools' shape when the last relocation moved nothing (no replanning
   * until it changes; reloc_idle false: plan at the next trigger) */
  bool relocate;
  bool reloc_idle;
  uint64_t reloc_shape;
  uint64_t guards; /* raw-address guards held now (cm_manager_unguard releases) */
  cm_relocate_stats_t reloc;
};

/* relocate.c: plan, copy and commit a relocation for trigger `why` (see
 * cm_manager_relocate); adds to m->reloc and, when out is non-NULL, reports
 * this run there. The caller (manager.c) has checked the reason, that no
 * capture or dry run is open and that the storage can copy, and drained the
 * freed inbox. */
int cm__relocate(struct cm_manager *m, cm_relocate_reason_t why, cm_relocate_stats_t *out,
                 cm_diag_t *diag);

/* The pool holding slice s. */
static inline cm__pool *cm__manager_pool_of(struct cm_manager *m, const cm__slice *s) {
  if (s->pool == CM_PERSISTENT_POOL) return m->persistent;
  if (s->pool == CM_DEDICATED_POOL) return m->dedicated;
  return m->pools[s->pool];
}

/* Fold pool p's reserved-bytes change since the last take into the totals;
 * called after every pool call that may change them (pool.h's vtable). The
 * other pools did not change meanwhile, so the pool's high-water mark gives
 * the highest total reached during the call: the peak stays exact. Out of
 * line, so the reservation fast path keeps its registers. */
static __attribute__((noinline, unused)) void cm__manager_take_reserved(struct cm_manager *m,
                                                                       cm__pool *p) {
  cm__reserved_change c = cm__pool_reserved_take(p);
  uint64_t others = m->reserved_total - c.before;
  if (others + c.high > m->reserved_peak) m->reserved_peak = others + c.high;
  m->reserved_total = others + c.now;
}

/* Is logging at level lvl on for manager m? */
#define LOG_ON(m, lvl) ((m)->log_level >= (lvl) && (lvl) != CM_LOG_DISABLED)

/* Drain the freed inbox: mark freed slices free and give them to their pools. */
void cm__manager_drain(struct cm_manager *m);
/* The display of cm_manager_display without draining the inbox first
 * (format.c; snprintf semantics: returns the length needed). */
size_t cm__manager_render(struct cm_manager *m, char *buf, size_t cap);

#endif
