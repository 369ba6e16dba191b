/*
 * cubemem/faulty.h - a fault-injecting storage decorator for tests.
 *
 * cm_storage_faulty_create() wraps any storage and forwards every call to it,
 * except that the calls that obtain memory or mappings - alloc, vm_map and
 * vm_alias, plus vm_reserve, copy and copy_wait when asked - fail according
 * to a plan: only the Nth such call, the Nth and
 * every later one, or each call at random with a fixed seed. An injected
 * failure returns the configured status (CM_EOOM or CM_ESTORAGE; always
 * CM_ESTORAGE for vm_alias, which makes no memory and so is never out of
 * it), fills diag
 * with a message naming the call number, and does not reach the inner
 * storage, so the failed call changes nothing - exactly the contract a real
 * backend keeps on failure. Everything else (dealloc, flush, get, events,
 * vm_unmap, vm_release) always reaches the inner storage.
 *
 * Calls are numbered from 1 across all the counted operations, in the order
 * they happen. Tests sweep fault points by running a scenario once to learn
 * how many calls it makes, then once per k = 1..calls with CM_FAULT_NTH.
 *
 * Ownership: on success the decorator owns `inner` and destroys it with
 * itself; on failure the caller still owns `inner`. Like every storage, the
 * decorator is driven by one thread at a time; cm_storage_faulty_calls() and
 * cm_storage_faulty_injected() may be read from any thread (atomic counters).
 */
#ifndef CUBEMEM_FAULTY_H
#define CUBEMEM_FAULTY_H

#include "cubemem/storage.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cm_fault_mode {
  CM_FAULT_NONE = 0,    /* never fail; only count calls */
  CM_FAULT_NTH = 1,     /* fail call number `nth` only */
  CM_FAULT_FROM_NTH = 2, /* fail call `nth` and every call after it */
  CM_FAULT_RANDOM = 3,  /* fail each call with probability `ppm` / 1e6, seeded */
} cm_fault_mode_t;

/* Which operations are counted (and may fail). */
#define CM_FAULT_OP_ALLOC 0x1u
#define CM_FAULT_OP_VM_MAP 0x2u
#define CM_FAULT_OP_VM_RESERVE 0x4u
/* Device-to-device copies (relocation): a refused copy, a failed wait. Not
 * in the default mask: ask for them. */
#define CM_FAULT_OP_COPY 0x8u
#define CM_FAULT_OP_COPY_WAIT 0x10u
/* A second mapping of existing objects (vm_alias; made by the arena only
 * when the device is out of memory). In the default mask, as vm_map is. */
#define CM_FAULT_OP_VM_ALIAS 0x20u
#define CM_FAULT_OP_DEFAULT (CM_FAULT_OP_ALLOC | CM_FAULT_OP_VM_MAP | CM_FAULT_OP_VM_ALIAS)

typedef struct cm_fault_plan {
  cm_fault_mode_t mode;
  uint64_t nth;  /* NTH / FROM_NTH: 1-based call number (0 = never) */
  uint32_t ppm;  /* RANDOM: failure chance per call, parts per million (<= 1000000) */
  uint64_t seed; /* RANDOM: generator seed (same seed, same failures) */
  int error;     /* status to inject: CM_EOOM or CM_ESTORAGE; 0 = CM_EOOM */
  unsigned ops;  /* CM_FAULT_OP_* mask of counted operations; 0 = CM_FAULT_OP_DEFAULT */
} cm_fault_plan_t;

/* A plan that never fails (mode NONE, default error and ops). */
CM_API void cm_fault_plan_init(cm_fault_plan_t *plan);

/* Wrap `inner` in a fault-injecting storage (named "faulty"). `plan` is
 * copied; NULL means "never fail". The decorator offers the same optional
 * operations (VM, aliases, events, copies) as `inner`.
 * Errors: CM_EINVAL (NULL inner/out, error not CM_EOOM/CM_ESTORAGE, ppm >
 * 1000000, unknown mode), CM_ENOMEM. On failure the caller keeps `inner`. */
CM_API CM_NODISCARD int cm_storage_faulty_create(cm_storage_t *inner, const cm_fault_plan_t *plan,
                                                 cm_storage_t **out);

/* Replace the plan and reset both counters to 0 (calls are numbered afresh).
 * Same thread as the storage's other calls. Errors: CM_EINVAL (not a faulty
 * storage, bad plan). */
CM_API CM_NODISCARD int cm_storage_faulty_set_plan(cm_storage_t *s, const cm_fault_plan_t *plan);

/* Counted calls seen so far (failed ones included); 0 for a storage that is
 * not a faulty one. Any thread. */
CM_API uint64_t cm_storage_faulty_calls(const cm_storage_t *s);
/* Failures injected so far; 0 for a storage that is not a faulty one. Any thread. */
CM_API uint64_t cm_storage_faulty_injected(const cm_storage_t *s);

#ifdef __cplusplus
}
#endif
#endif
