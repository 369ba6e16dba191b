/*
 * cubemem/costs.h - a model of the time spent in the GPU driver: a cost per
 * kind of driver call, applied to the calls a replay counted
 * (cm_storage_stats_t), so that a replay on the simulated device says how
 * long a real device would spend in cuMemCreate, cuMemMap and the rest.
 *
 * Built-in cost sets (microseconds per call, 2 MiB granules; the published
 * figures are from kvcached's bench_vmm, one thread, 4,096 pages):
 *
 *   kind                         a100 (default)   fast (a 25 GB GPU)
 *   cuMemCreate                  193.0 (p99 381)  7.6      published
 *   cuMemMap                       1.45           1.05     published
 *   cuMemSetAccess                36.0           20.8      published
 *   cuMemUnmap                    25.6           11.5      published
 *   cuMemAddressReserve           19.0            9.0      published
 *   cuMemRelease                  25.6           11.5      assumed: = unmap
 *   cuMemAddressFree              19.0            9.0      assumed: = reserve
 *   cuMemAlloc (plain segment)   230.45          29.45     assumed: create +
 *                                                          map + set-access
 *                                                          of one granule
 *   cuMemFree (plain segment)     51.2           23.0      assumed: unmap +
 *                                                          release of one granule
 *   cuMemGetInfo                   1.0            1.0      assumed
 *   stream wait before an unmap    5.0            5.0      assumed (idle stream)
 *
 * The model is a cost per call, not per byte: the driver's work is per
 * physical chunk (PyTorch's expandable segments note the same). Plain
 * allocations of large segments cost more than the constant on real devices,
 * so the model underestimates them. Stream waits are counted as one per VM
 * unmap operation (the CUDA storage waits for its stream before each one);
 * the model charges an idle stream, not the GPU work a real run would wait
 * for. An alias (storage.h's vm_alias) is counted as a map per object plus
 * one set-access, its removal as an unmap per object; the retain of the
 * handle and the release of that reference have no published cost, touch
 * no memory and are not counted.
 *
 * A cost file is TOML with one table:
 *
 *     [driver_costs]
 *     name = "h100"          # optional; default: the file's path
 *     base = "a100"          # optional: the set missing keys come from
 *     create_us = 120.0      # any of the keys below, >= 0, finite
 *
 * Keys: create_us, map_us, set_access_us, unmap_us, release_us, reserve_us,
 * address_free_us, alloc_us, free_us, mem_query_us, sync_us. Unknown keys
 * and tables, and values that are not non-negative finite numbers, are
 * errors naming the line.
 *
 * Ownership: every type here is a plain value the caller owns.
 * Thread-safety: every function is reentrant (no global state).
 */
#ifndef CUBEMEM_COSTS_H
#define CUBEMEM_COSTS_H

#include "cubemem/common.h"
#include "cubemem/storage.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Microseconds per driver call, by kind. */
typedef struct cm_driver_costs {
  char name[128]; /* "a100", "fast", or the cost file's name (or path) */
  double create_us, map_us, set_access_us;
  double unmap_us, release_us;
  double reserve_us, address_free_us;
  double alloc_us, free_us;
  double mem_query_us;
  double sync_us;
} cm_driver_costs_t;

/* Modelled time by kind, in nanoseconds (rounded to the nearest ns). */
typedef struct cm_driver_time {
  uint64_t create_ns, map_ns, set_access_ns;
  uint64_t unmap_ns, release_ns;
  uint64_t reserve_ns, address_free_ns;
  uint64_t alloc_ns, free_ns;
  uint64_t mem_query_ns;
  uint64_t sync_ns;
  uint64_t total_ns; /* the sum of the above */
} cm_driver_time_t;

/* The built-in set `name` ("a100" or "fast", case-sensitive) into *out.
 * Errors: CM_EINVAL (NULL), CM_ENOTFOUND (no such set). Reentrant. */
CM_API CM_NODISCARD int cm_driver_costs_builtin(const char *name, cm_driver_costs_t *out);

/* Parse a cost file's text (len bytes; see the head of this header) into
 * *out; `name` names the set when the file gives none (NULL: "file").
 * *out is written only on success. Errors: CM_EINVAL (NULL args), CM_EPARSE
 * (not TOML, no [driver_costs] table, an unknown key or table, a bad value;
 * diag has the line and a message naming the key), CM_ENOMEM. Reentrant. */
CM_API CM_NODISCARD int cm_driver_costs_parse(const char *text, size_t len, const char *name,
                                              cm_driver_costs_t *out, cm_diag_t *diag);

/* A built-in set's name, else a cost file's path, into *out (the file's
 * set is named by its `name` key, else by the path). Errors: as
 * cm_driver_costs_parse, plus CM_EIO (the file cannot be read; diag->file
 * is the path). Reentrant. */
CM_API CM_NODISCARD int cm_driver_costs_resolve(const char *spec, cm_driver_costs_t *out,
                                                cm_diag_t *diag);

/* The modelled time of the driver calls counted in *s (the differences over
 * a replay: creates, map_calls, set_access, unmap_calls, releases, reserves,
 * address_frees, allocs, deallocs, mem_queries, and one stream wait per VM
 * unmap operation, `unmaps`) under *c into *out. Never fails (NULL args
 * zero *out when out is not NULL). Reentrant. */
CM_API void cm_driver_time_model(const cm_driver_costs_t *c, const cm_storage_stats_t *s,
                                 cm_driver_time_t *out);

/* The time the backend measured in each kind of driver call (s->call_ns,
 * zeros on the simulated device), summed. Never fails (0 for NULL). */
CM_API uint64_t cm_driver_time_measured(const cm_storage_stats_t *s);

#ifdef __cplusplus
}
#endif
#endif
