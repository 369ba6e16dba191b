/* manager_internal.h - the memory manager's state (see manager.c). */
#ifndef CM_CORE_MANAGER_INTERNAL_H
#define CM_CORE_MANAGER_INTERNAL_H

#include "core/pool.h"

struct cm_manager {
  char name[128];
  bool debug_checks;           /* debug level 3: check invariants after mutating calls */
  cm_storage_t *storage;       /* owned */
  cm_device_props_t props;     /* alignment >= 1 */
  cm__pool *pools[CM_MAX_DYNAMIC_POOLS];
  size_t npools;
  cm__pool *persistent;        /* always present, position 255 */
  cm__inbox inbox;             /* descriptors released from any thread */
  uint64_t alloc_reserve_count;
  cm_alloc_mode_t mode;        /* effective mode */
  uint64_t windows;            /* open persistent windows */
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
  uint64_t dry_runs;
  uint64_t lazy_next_id; /* ids for lazily reserved memory, counting down */
  /* totals: the sum of the pools' bytes_reserved and its peak (take_reserved) */
  uint64_t reserved_total, reserved_peak;
};

/* Drain the freed inbox: mark freed slices free and give them to their pools. */
void cm__manager_drain(struct cm_manager *m);
/* Mint an id for lazily reserved memory. */
uint64_t cm__manager_lazy_id(struct cm_manager *m);

#endif
