/*
 * cubemem/storage_counters.h - the storage wrapper's counters, listed once.
 *
 * cm_storage_stats_t (cubemem/storage.h) documents each counter; the lists
 * below name every one of its uint64_t fields by kind, so that the code that
 * walks them (differences over a replay, sums over streams, the driver-call
 * total, the JSON of `cubemem replay`) is generated from one place. storage.h
 * checks at compile time that the lists cover the struct. Each list is an
 * X-macro: CM_STORAGE_CALLS(X) expands X(field, "json key") per entry.
 *
 *   CM_STORAGE_CALLS(X)   driver calls by kind, X(field, key): summed into a
 *                         replay's driver_calls, printed in this order as
 *                         `"driver_calls":{"total":...,key:...}`;
 *   CM_STORAGE_COUNTS(X)  the other cumulative counts and times, X(field):
 *                         differenced over a replay like the calls;
 *   CM_STORAGE_LEVELS(X)  levels (bytes now), X(field): a replay reports the
 *                         value at its end, a sum over streams adds them;
 *   CM_STORAGE_PEAKS(X)   high-water marks, X(field): taken as they are;
 *   CM_CALL_TIMES(X)      the fields of cm_call_times_t (time by driver
 *                         call), X(field, "json key"), in its order.
 *
 * Thread-safety: declarations only.
 */
#ifndef CUBEMEM_STORAGE_COUNTERS_H
#define CUBEMEM_STORAGE_COUNTERS_H

#define CM_STORAGE_CALLS(X)                                                                 \
  X(allocs, "allocs")                                                                       \
  X(deallocs, "frees")                                                                      \
  X(creates, "creates")                                                                     \
  X(map_calls, "maps")                                                                      \
  X(set_access, "set_access")                                                               \
  X(unmap_calls, "unmaps")                                                                  \
  X(releases, "releases")                                                                   \
  X(reserves, "reserves")                                                                   \
  X(address_frees, "address_frees")                                                         \
  X(mem_queries, "mem_queries")

#define CM_STORAGE_COUNTS(X)                                                                \
  X(failed_allocs) X(maps) X(unmaps) X(flushes) X(gets) X(time_ns) X(time_alloc_ns)         \
  X(time_free_ns) X(time_map_ns) X(time_unmap_ns) X(time_reserve_ns) X(errors)              \
  X(violations) X(copies) X(bytes_copied) X(copy_waits) X(copy_failures) X(time_copy_ns)

#define CM_STORAGE_LEVELS(X) X(bytes_held) X(vm_reserved)

#define CM_STORAGE_PEAKS(X) X(bytes_held_peak)

#define CM_CALL_TIMES(X)                                                                    \
  X(creates, "creates")                                                                     \
  X(maps, "maps")                                                                           \
  X(set_access, "set_access")                                                               \
  X(unmaps, "unmaps")                                                                       \
  X(releases, "releases")                                                                   \
  X(allocs, "allocs")                                                                       \
  X(frees, "frees")                                                                         \
  X(reserves, "reserves")                                                                   \
  X(address_frees, "address_frees")                                                         \
  X(syncs, "syncs")                                                                         \
  X(mem_queries, "mem_queries")

#endif
