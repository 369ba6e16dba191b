/* storage_internal.h - the cm_storage_t wrapper's layout and internal calls. */
#ifndef CM_STORAGE_INTERNAL_H
#define CM_STORAGE_INTERNAL_H

#include <stdatomic.h>

#include "cubemem/storage.h"

struct cm_storage {
  const cm_storage_ops_t *ops;
  void *ctx;
  bool timing; /* measure time_ns */
  uint64_t unflushed; /* dealloc/unmap calls since the last backend flush */
  _Atomic uint64_t allocs, deallocs, failed, maps, unmaps, bytes_held, bytes_held_peak,
      vm_reserved, flushes, gets, time_ns;
  _Atomic uint64_t creates, map_calls, unmap_calls, releases, set_access, reserves,
      address_frees, errors, violations, mem_queries;
  _Atomic uint64_t copies, bytes_copied, copy_waits, copy_failures, time_copy_ns;
  _Atomic uint64_t time_alloc_ns, time_free_ns, time_map_ns, time_unmap_ns, time_reserve_ns;
};

/* Poison or unpoison bytes through the backend's optional poison op (no-op
 * without one). */
void cm__storage_poison(cm_storage_t *s, uint64_t id, uint64_t off, uint64_t size, bool poison);
/* Bytes the storage holds now (allocations and mapped memory), read-only. */
static inline uint64_t cm__storage_held(const cm_storage_t *s) {
  return atomic_load_explicit(&s->bytes_held, memory_order_relaxed);
}
/* Deferred releases (dealloc / unmap) not flushed to the backend yet. */
static inline uint64_t cm__storage_pending(const cm_storage_t *s) { return s->unflushed; }
uint64_t cm__storage_vm_granularity(cm_storage_t *s);
int cm__storage_vm_reserve(cm_storage_t *s, uint64_t size, uint64_t *out_id, cm_diag_t *diag);
/* The VM operations of storage.h's contract, counted. `piece` is the size of
 * each physical object. Errors as the ops. */
int cm__storage_vm_map(cm_storage_t *s, uint64_t id, uint64_t off, uint64_t size, uint64_t piece,
                       cm_diag_t *diag);
int cm__storage_vm_unmap(cm_storage_t *s, uint64_t id, uint64_t off, uint64_t size,
                         uint64_t piece, cm_diag_t *diag);
int cm__storage_vm_release(cm_storage_t *s, uint64_t id, uint64_t size, cm_diag_t *diag);

/* Aliases (storage.h's vm_alias): a second mapping of objects vm_map made.
 * Does the storage support vm_alias (and VM at all)? */
bool cm__storage_has_alias(const cm_storage_t *s);
/* vm_alias, counted: maps += 1, map_calls += size/piece, set_access += 1,
 * time in time_map_ns; no create, bytes_held unchanged. A failure is counted
 * as vm_map's are (failed_allocs, errors, violations). Errors as the op's,
 * and CM_ENOTSUP (diag set, nothing counted) without cm__storage_has_alias. */
int cm__storage_vm_alias(cm_storage_t *s, uint64_t dst_id, uint64_t dst_off, uint64_t src_id,
                         uint64_t src_off, uint64_t size, uint64_t piece, cm_diag_t *diag);
/* Remove alias mappings (the backend's vm_unmap on a range of aliases),
 * counted: unmaps += 1, unmap_calls += size/piece, no release, bytes_held
 * unchanged, time in time_unmap_ns. Nothing is released, so no flush is
 * owed (cm__storage_pending does not move). The caller knows the range holds
 * aliases: cm__storage_vm_unmap on aliases would count releases and bytes
 * that are not there (the backend cannot tell the wrapper). Errors as
 * vm_unmap's. */
int cm__storage_vm_unalias(cm_storage_t *s, uint64_t id, uint64_t off, uint64_t size,
                           uint64_t piece, cm_diag_t *diag);

#endif
