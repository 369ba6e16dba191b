/*
 * test_vm_contract.c - the driver's virtual-memory rules on the simulated
 * device (aliases, vm_alias, included: on the device, through a share and the
 * fault injector), and the default layout living by them: real traces replayed under
 * every layout with no violation and nothing left mapped, out-of-memory met
 * by giving back cached memory (issue: fit under pressure), dry runs meeting
 * the device's limit, and cm_replay_fit.
 */
#include <stdlib.h>
#include <string.h>

#include "cm_scenario.h"
#include "cm_test.h"
#include "cubemem/cubemem.h"
#include "cubemem/faulty.h"
#include "cubemem/replay.h"
#include "storage/storage_internal.h"

#define MiB (1024ull * 1024ull)
#define GiB (1024ull * MiB)
#define G (2 * MiB)

static cm_sim_state_t state(cm_storage_t *s) {
  cm_sim_state_t st;
  memset(&st, 0, sizeof st);
  if (cm_storage_sim_state(s, &st) != CM_OK) cm_test_fail(__FILE__, __LINE__, "not a sim storage");
  return st;
}

/* The refusals every storage with the driver's rules makes, on storage s of
 * granule g: ten refused calls (each must change nothing), around three
 * objects mapped in reservation *id of 8 granules: [0, 2g) as two objects of
 * one granule and [4g, 6g) as one object of two. */
static void refusals(cm_storage_t *s, uint64_t g, uint64_t *id) {
  cm_diag_t d;
  cm_diag_clear(&d);
  EXPECT_STATUS(cm__storage_vm_reserve(s, g + 512, id, &d), CM_EINVAL); /* not granular */
  EXPECT_CONTAINS(d.message, "multiple of the granularity");
  ASSERT_OK(cm__storage_vm_reserve(s, 8 * g, id, NULL));
  ASSERT_OK(cm__storage_vm_map(s, *id, 0, 2 * g, g, NULL)); /* two objects of one granule */
  cm_diag_clear(&d);
  EXPECT_STATUS(cm__storage_vm_map(s, *id, g, 2 * g, g, &d), CM_EINVAL); /* overlaps */
  EXPECT_CONTAINS(d.message, "mapped already");
  EXPECT_STATUS(cm__storage_vm_map(s, *id, 7 * g, 2 * g, g, NULL), CM_EINVAL);     /* past the end */
  EXPECT_STATUS(cm__storage_vm_map(s, *id, g / 2, g, g, NULL), CM_EINVAL);         /* offset */
  EXPECT_STATUS(cm__storage_vm_map(s, *id, 4 * g, 3 * g, 2 * g, NULL), CM_EINVAL); /* pieces */
  EXPECT_STATUS(cm__storage_vm_map(s, *id, 4 * g, g, g / 2, NULL), CM_EINVAL);     /* sub-granule */
  EXPECT_STATUS(cm__storage_vm_map(s, 999, 0, g, g, NULL), CM_EHANDLE);
  ASSERT_OK(cm__storage_vm_map(s, *id, 4 * g, 2 * g, 2 * g, NULL)); /* one object of two */
  cm_diag_clear(&d);
  EXPECT_STATUS(cm__storage_vm_unmap(s, *id, 4 * g, g, g, &d), CM_EINVAL); /* half a mapping */
  EXPECT_CONTAINS(d.message, "unmapped whole");
  EXPECT_STATUS(cm__storage_vm_unmap(s, *id, 0, 3 * g, g, NULL), CM_EINVAL); /* runs past */
  cm_diag_clear(&d);
  EXPECT_STATUS(cm__storage_vm_release(s, *id, 8 * g, &d), CM_EINVAL); /* still mapped */
  EXPECT_CONTAINS(d.message, "mappings remain");
}

/* Every rule of storage.h's contract is enforced, counted, and changes nothing. */
static void sim_refuses_what_the_driver_refuses(void) {
  cm_storage_t *s = NULL;
  ASSERT_OK(cm_storage_sim_create(64 * MiB, true, 0, &s));
  uint64_t id = 0, other = 0;
  cm_diag_t d;
  refusals(s, G, &id);
  cm_sim_state_t st = state(s);
  EXPECT_EQ(st.violations, 10);
  EXPECT_EQ(st.mappings, 3);
  EXPECT_EQ(st.bytes_used, 4 * G); /* nothing refused changed anything */
  cm_storage_stats_t ss;
  cm_storage_stats(s, &ss);
  EXPECT_EQ(ss.violations, 10);
  EXPECT_EQ(ss.creates, 3);
  EXPECT_EQ(ss.map_calls, 3);
  EXPECT_EQ(ss.set_access, 2);
  /* over capacity: out of memory, not a violation */
  ASSERT_OK(cm__storage_vm_reserve(s, 64 * G, &other, NULL));
  cm_diag_clear(&d);
  EXPECT_STATUS(cm__storage_vm_map(s, other, 0, 32 * G, G, &d), CM_EOOM);
  EXPECT_EQ(state(s).violations, 10);
  /* whole mappings go, in one call for a run of them */
  ASSERT_OK(cm__storage_vm_unmap(s, id, 0, 2 * G, G, NULL));
  ASSERT_OK(cm__storage_vm_unmap(s, id, 4 * G, 2 * G, 2 * G, NULL));
  ASSERT_OK(cm__storage_vm_release(s, id, 8 * G, NULL));
  ASSERT_OK(cm__storage_vm_release(s, other, 64 * G, NULL));
  cm_storage_stats(s, &ss);
  EXPECT_EQ(ss.unmap_calls, 3);
  EXPECT_EQ(ss.releases, 3);
  EXPECT_EQ(ss.address_frees, 2);
  st = state(s);
  EXPECT_EQ(st.mappings, 0);
  EXPECT_EQ(st.reservations, 0);
  EXPECT_EQ(st.bytes_used, 0);
  cm_storage_dealloc(s, 4242, 1); /* a free of an unknown id is a violation too */
  EXPECT_EQ(state(s).violations, 11);
  EXPECT_STATUS(cm_storage_sim_state(NULL, &st), CM_EINVAL);
  cm_storage_destroy(s);
}

/* The host storage (real memory) refuses the same calls, changes nothing on
 * a refused call, and its mapped granules are real, writable memory. */
static void host_refuses_what_the_driver_refuses(void) {
  cm_storage_t *s = NULL;
  ASSERT_OK(cm_storage_host_create(0, &s));
  const uint64_t H = cm__storage_vm_granularity(s); /* 64 KiB */
  ASSERT(H == 64 * 1024);
  uint64_t id = 0;
  refusals(s, H, &id);
  cm_storage_stats_t ss;
  cm_storage_stats(s, &ss);
  EXPECT_EQ(ss.violations, 10);
  EXPECT_EQ(ss.creates, 3);
  /* nothing refused changed anything: the mapped memory is still there, and
   * what was refused is still unmapped (a map of it now succeeds) */
  cm_resource_t r;
  ASSERT_OK(cm_storage_get(s, id, 0, 8 * H, &r, NULL));
  ASSERT(r.host != NULL);
  memset(r.host, 0xab, (size_t)(2 * H));
  memset((char *)r.host + 4 * H, 0xcd, (size_t)(2 * H));
  EXPECT_EQ(((unsigned char *)r.host)[2 * H - 1], 0xab);
  ASSERT_OK(cm__storage_vm_map(s, id, 2 * H, 2 * H, H, NULL));
  memset((char *)r.host + 2 * H, 0xef, (size_t)(2 * H));
  ASSERT_OK(cm__storage_vm_unmap(s, id, 0, 4 * H, H, NULL));
  ASSERT_OK(cm__storage_vm_unmap(s, id, 4 * H, 2 * H, 2 * H, NULL));
  ASSERT_OK(cm__storage_vm_release(s, id, 8 * H, NULL));
  cm_storage_stats(s, &ss);
  EXPECT_EQ(ss.violations, 10);
  EXPECT_EQ(ss.unmap_calls, 5);
  EXPECT_EQ(ss.address_frees, 1);
  cm_storage_destroy(s);
}

/* Bytes held, map and unmap calls, creates, releases, set-access calls and
 * violations of s, for the "nothing changed" checks. */
typedef struct vm_counts {
  uint64_t held, map_calls, unmap_calls, creates, releases, set_access, violations;
} vm_counts;
static vm_counts counts(cm_storage_t *s) {
  cm_storage_stats_t st;
  cm_storage_stats(s, &st);
  return (vm_counts){st.bytes_held, st.map_calls, st.unmap_calls, st.creates, st.releases,
                     st.set_access, st.violations};
}
#define EXPECT_COUNTS(now, was, dviolations)                                  \
  do {                                                                        \
    vm_counts n__ = (now), w__ = (was);                                       \
    EXPECT_EQ(n__.held, w__.held);                                            \
    EXPECT_EQ(n__.map_calls, w__.map_calls);                                  \
    EXPECT_EQ(n__.unmap_calls, w__.unmap_calls);                              \
    EXPECT_EQ(n__.creates, w__.creates);                                      \
    EXPECT_EQ(n__.releases, w__.releases);                                    \
    EXPECT_EQ(n__.set_access, w__.set_access);                                \
    EXPECT_EQ(n__.violations, w__.violations + (dviolations));                \
  } while (0)

/* Aliases (storage.h's vm_alias) on storage s of granule g, through the
 * wrapper: what the contract allows, counted as it says, and every refusal
 * changing nothing. `sim` is the simulated device itself (its state is
 * checked too); `copies`: s checks access through cm_storage_copy. Leaves
 * nothing reserved or mapped. */
static void alias_contract(cm_storage_t *s, uint64_t g, bool sim, bool copies) {
  ASSERT(cm__storage_has_alias(s));
  cm_diag_t d;
  uint64_t a = 0, b = 0;
  /* A: [0, 2g) two objects of g, [4g, 6g) one object of 2g; B: [2g, 3g) one object of g */
  ASSERT_OK(cm__storage_vm_reserve(s, 8 * g, &a, NULL));
  ASSERT_OK(cm__storage_vm_reserve(s, 4 * g, &b, NULL));
  ASSERT_OK(cm__storage_vm_map(s, a, 0, 2 * g, g, NULL));
  ASSERT_OK(cm__storage_vm_map(s, a, 4 * g, 2 * g, 2 * g, NULL));
  ASSERT_OK(cm__storage_vm_map(s, b, 2 * g, g, g, NULL));
  vm_counts c0 = counts(s);
  EXPECT_EQ(c0.held, 5 * g);

  /* B[0, 2g) shows A's two objects: two maps and one set-access, no create, no bytes */
  ASSERT_OK(cm__storage_vm_alias(s, b, 0, a, 0, 2 * g, g, NULL));
  vm_counts c1 = counts(s);
  EXPECT_EQ(c1.held, c0.held);
  EXPECT_EQ(c1.creates, c0.creates);
  EXPECT_EQ(c1.map_calls, c0.map_calls + 2);
  EXPECT_EQ(c1.set_access, c0.set_access + 1);
  EXPECT_EQ(c1.violations, c0.violations);
  cm_storage_stats_t st;
  cm_storage_stats(s, &st);
  EXPECT_EQ(st.bytes_held_peak, 5 * g);
  if (sim) {
    cm_sim_state_t ss = state(s);
    EXPECT_EQ(ss.aliases, 2);
    EXPECT_EQ(ss.mappings, 4); /* objects: an alias is not one */
    EXPECT_EQ(ss.bytes_used, 5 * g);
  }
  if (copies) { /* the aliased range is mapped with access; B[3g, 4g) is not */
    EXPECT_OK(cm_storage_copy(s, b, 0, a, 4 * g, 2 * g, NULL));
    EXPECT_OK(cm_storage_copy(s, a, 4 * g, b, g, g, NULL));
    EXPECT_OK(cm_storage_copy_wait(s, NULL));
    EXPECT_STATUS(cm_storage_copy(s, b, 3 * g, a, 4 * g, g, NULL), CM_EINVAL);
    c1 = counts(s);
  }

  /* refusals: each CM_EINVAL (CM_EHANDLE for an unknown id), nothing changes */
  uint64_t refused = 0;
#define REFUSE(call, code, needle)                        \
  do {                                                    \
    cm_diag_clear(&d);                                    \
    EXPECT_STATUS(call, code);                            \
    if (*(needle)) EXPECT_CONTAINS(d.message, needle);    \
    refused++;                                            \
  } while (0)
  REFUSE(cm__storage_vm_alias(s, b, g / 2, a, 4 * g, 2 * g, 2 * g, &d), CM_EINVAL, "");
  REFUSE(cm__storage_vm_alias(s, b, g, a, 4 * g, 2 * g, 2 * g, &d), CM_EINVAL, "");  /* overlaps */
  REFUSE(cm__storage_vm_alias(s, b, 3 * g, a, 4 * g, 2 * g, 2 * g, &d), CM_EINVAL, ""); /* past end */
  REFUSE(cm__storage_vm_alias(s, a, 6 * g, a, 4 * g, g, g, &d), CM_EINVAL, "alias"); /* half an object */
  REFUSE(cm__storage_vm_alias(s, a, 6 * g, a, 2 * g, g, g, &d), CM_EINVAL, "alias"); /* not mapped */
  REFUSE(cm__storage_vm_alias(s, a, 6 * g, a, 0, 3 * g, g, &d), CM_EINVAL, "alias"); /* runs past */
  REFUSE(cm__storage_vm_alias(s, a, 0, a, 4 * g, 2 * g, 2 * g, &d), CM_EINVAL, ""); /* dst mapped */
  REFUSE(cm__storage_vm_alias(s, a, 6 * g, b, 0, g, g, &d), CM_EINVAL, "itself an alias");
  REFUSE(cm__storage_vm_alias(s, a, 6 * g, b, g / 2, g, g / 2, &d), CM_EINVAL, "");
  REFUSE(cm__storage_vm_alias(s, 999, 0, a, 0, g, g, &d), CM_EHANDLE, "");
  REFUSE(cm__storage_vm_alias(s, b, 3 * g, 999, 0, g, g, &d), CM_EHANDLE, "");
  /* the originals under a live alias stay, whole or in part */
  REFUSE(cm__storage_vm_unmap(s, a, 0, 2 * g, g, &d), CM_EINVAL, "has an alias at");
  REFUSE(cm__storage_vm_unmap(s, a, g, g, g, &d), CM_EINVAL, "has an alias at");
  /* B[g, 3g) is an alias and an original: one call unmaps one kind */
  REFUSE(cm__storage_vm_unalias(s, b, g, 2 * g, g, &d), CM_EINVAL, "one kind");
  REFUSE(cm__storage_vm_unmap(s, b, g, 2 * g, g, &d), CM_EINVAL, "one kind");
  REFUSE(cm__storage_vm_unalias(s, b, 0, g / 2, g, &d), CM_EINVAL, ""); /* part of an alias */
  REFUSE(cm__storage_vm_unalias(s, b, 0, 2 * g, 2 * g, &d), CM_EINVAL, ""); /* other pieces */
  REFUSE(cm__storage_vm_release(s, b, 4 * g, &d), CM_EINVAL, ""); /* aliases remain */
  REFUSE(cm__storage_vm_release(s, a, 8 * g, &d), CM_EINVAL, "");
#undef REFUSE
  vm_counts c2 = counts(s);
  EXPECT_COUNTS(c2, c1, refused);
  if (sim) {
    cm_sim_state_t ss = state(s);
    EXPECT_EQ(ss.aliases, 2);
    EXPECT_EQ(ss.mappings, 4);
    EXPECT_EQ(ss.bytes_used, 5 * g);
    EXPECT_EQ(ss.violations, refused + (copies ? 1 : 0));
  }
  cm_storage_stats(s, &st);
  EXPECT_EQ(st.failed_allocs, 11); /* the vm_alias calls refused */

  /* an alias in the same reservation as its source (A's [4g, 6g) at A[6g, 8g)) */
  ASSERT_OK(cm__storage_vm_alias(s, a, 6 * g, a, 4 * g, 2 * g, 2 * g, NULL));
  EXPECT_EQ(counts(s).held, 5 * g);
  cm_diag_clear(&d);
  EXPECT_STATUS(cm__storage_vm_unmap(s, a, 4 * g, 2 * g, 2 * g, &d), CM_EINVAL);
  EXPECT_CONTAINS(d.message, "has an alias at [");
  ASSERT_OK(cm__storage_vm_unalias(s, a, 6 * g, 2 * g, 2 * g, NULL));
  /* an object with two aliases at once: A[0, g) at B[0, g) and at A[6g, 7g) */
  ASSERT_OK(cm__storage_vm_alias(s, a, 6 * g, a, 0, g, g, NULL));
  if (sim) EXPECT_EQ(state(s).aliases, 3);

  /* an alias goes piece by piece: its original is free to go once its own alias went */
  vm_counts c3 = counts(s);
  ASSERT_OK(cm__storage_vm_unalias(s, b, g, g, g, NULL));
  vm_counts c4 = counts(s);
  EXPECT_EQ(c4.unmap_calls, c3.unmap_calls + 1);
  EXPECT_EQ(c4.releases, c3.releases);
  EXPECT_EQ(c4.held, c3.held);
  ASSERT_OK(cm__storage_vm_unmap(s, a, g, g, g, NULL)); /* its alias is gone */
  cm_diag_clear(&d);
  EXPECT_STATUS(cm__storage_vm_unmap(s, a, 0, g, g, &d), CM_EINVAL); /* two aliases of it */
  EXPECT_CONTAINS(d.message, "has an alias at [");
  ASSERT_OK(cm__storage_vm_unalias(s, b, 0, g, g, NULL));
  cm_diag_clear(&d);
  EXPECT_STATUS(cm__storage_vm_unmap(s, a, 0, g, g, &d), CM_EINVAL); /* one left */
  EXPECT_CONTAINS(d.message, "has an alias at [");
  ASSERT_OK(cm__storage_vm_unalias(s, a, 6 * g, g, g, NULL));
  if (sim) EXPECT_EQ(state(s).aliases, 0);
  ASSERT_OK(cm__storage_vm_unmap(s, a, 0, g, g, NULL));
  ASSERT_OK(cm__storage_vm_unmap(s, a, 4 * g, 2 * g, 2 * g, NULL));
  ASSERT_OK(cm__storage_vm_unmap(s, b, 2 * g, g, g, NULL));
  ASSERT_OK(cm__storage_vm_release(s, a, 8 * g, NULL));
  ASSERT_OK(cm__storage_vm_release(s, b, 4 * g, NULL));
  vm_counts c5 = counts(s);
  EXPECT_EQ(c5.held, 0);
  EXPECT_EQ(c5.creates - c0.creates, 0);
  EXPECT_EQ(c5.releases + 0, c0.creates); /* every object made was released once */
  EXPECT_EQ(c5.map_calls - c0.map_calls, 4);   /* aliases of 2 + 1 + 1 objects */
  EXPECT_EQ(c5.set_access - c0.set_access, 3); /* one per vm_alias */
  EXPECT_EQ(c5.unmap_calls, 4 + 4);            /* 4 aliases and 4 originals */
  EXPECT_EQ(c5.violations, c2.violations + 3);
  cm_storage_stats(s, &st);
  EXPECT_EQ(st.vm_reserved, 0);
  if (sim) {
    cm_sim_state_t ss = state(s);
    EXPECT_EQ(ss.aliases, 0);
    EXPECT_EQ(ss.mappings, 0);
    EXPECT_EQ(ss.reservations, 0);
    EXPECT_EQ(ss.bytes_used, 0);
    EXPECT_EQ(ss.bytes_used_peak, 5 * g);
  }
}

/* The simulated device aliases under the contract; so does it through a
 * share and through the fault injector, which fails an alias on its turn
 * (CM_ESTORAGE, nothing changed). Host storage has no aliases. */
static void aliases_follow_the_contract(void) {
  cm_storage_t *s = NULL;
  ASSERT_OK(cm_storage_sim_create(64 * MiB, true, 0, &s));
  alias_contract(s, G, true, true);
  /* aliases take no capacity: a full device still aliases */
  uint64_t a = 0, b = 0;
  ASSERT_OK(cm__storage_vm_reserve(s, 32 * G, &a, NULL));
  ASSERT_OK(cm__storage_vm_reserve(s, 32 * G, &b, NULL));
  ASSERT_OK(cm__storage_vm_map(s, a, 0, 32 * G, G, NULL)); /* 64 MiB: all of it */
  EXPECT_STATUS(cm__storage_vm_map(s, b, 0, G, G, NULL), CM_EOOM);
  ASSERT_OK(cm__storage_vm_alias(s, b, 0, a, 0, 32 * G, G, NULL));
  EXPECT_EQ(state(s).bytes_used, 64 * MiB);
  EXPECT_EQ(state(s).aliases, 32);
  cm_storage_destroy(s); /* with aliases and mappings live: nothing leaks */

  /* through a share of the device, counted by the share */
  cm_storage_t *dev = NULL, *sh = NULL;
  ASSERT_OK(cm_storage_sim_create(0, false, 0, &dev));
  ASSERT_OK(cm_storage_share_create(dev, &sh, NULL));
  alias_contract(sh, G, false, true);
  EXPECT_EQ(state(dev).aliases, 0);
  EXPECT_EQ(state(dev).bytes_used, 0);
  cm_storage_destroy(sh);
  cm_storage_destroy(dev);

  /* through the fault injector: with no plan it passes everything */
  cm_storage_t *inner = NULL, *f = NULL;
  ASSERT_OK(cm_storage_sim_create(0, false, 0, &inner));
  ASSERT_OK(cm_storage_faulty_create(inner, NULL, &f));
  alias_contract(f, G, false, true);
  cm_fault_plan_t p;
  cm_fault_plan_init(&p);
  p.mode = CM_FAULT_NTH;
  p.nth = 2;
  p.ops = CM_FAULT_OP_VM_ALIAS;
  ASSERT_OK(cm_storage_faulty_set_plan(f, &p));
  ASSERT_OK(cm__storage_vm_reserve(f, 4 * G, &a, NULL));
  ASSERT_OK(cm__storage_vm_map(f, a, 0, G, G, NULL));
  ASSERT_OK(cm__storage_vm_alias(f, a, G, a, 0, G, G, NULL)); /* call 1 */
  vm_counts before = counts(f);
  cm_diag_t d;
  cm_diag_clear(&d);
  EXPECT_STATUS(cm__storage_vm_alias(f, a, 2 * G, a, 0, G, G, &d), CM_ESTORAGE); /* call 2 */
  EXPECT_CONTAINS(d.message, "vm_alias call 2");
  vm_counts after = counts(f);
  EXPECT_EQ(after.held, before.held);
  EXPECT_EQ(after.map_calls, before.map_calls);
  EXPECT_EQ(after.violations, before.violations);
  EXPECT_EQ(cm_storage_faulty_injected(f), 1);
  EXPECT_EQ(cm_storage_faulty_calls(f), 2);
  ASSERT_OK(cm__storage_vm_alias(f, a, 2 * G, a, 0, G, G, NULL)); /* call 3: it was not made */
  ASSERT_OK(cm__storage_vm_unalias(f, a, G, 2 * G, G, NULL));
  ASSERT_OK(cm__storage_vm_unmap(f, a, 0, G, G, NULL));
  ASSERT_OK(cm__storage_vm_release(f, a, 4 * G, NULL));
  EXPECT_EQ(cm_storage_bytes_held(f), 0);
  cm_storage_destroy(f);

  /* host storage: VM, but no aliases */
  cm_storage_t *h = NULL;
  ASSERT_OK(cm_storage_host_create(0, &h));
  EXPECT(cm_storage_has_vm(h));
  EXPECT(!cm__storage_has_alias(h));
  cm_diag_clear(&d);
  EXPECT_STATUS(cm__storage_vm_alias(h, 1, 0, 1, 0, 64 * 1024, 64 * 1024, &d), CM_ENOTSUP);
  EXPECT_CONTAINS(d.message, "second time");
  cm_storage_t *hs = NULL;
  ASSERT_OK(cm_storage_share_create(h, &hs, NULL));
  EXPECT(cm_storage_has_vm(hs));
  EXPECT(!cm__storage_has_alias(hs));
  cm_storage_destroy(hs);
  cm_storage_destroy(h);
}

/* Replay a trace through `layout` on a strict sim of `capacity`; expect no
 * violation, and nothing left on the device once every handle is released
 * and the manager cleaned up. Returns the result's failed reservations. */
static uint64_t replay_strict(const cm_trace_t *t, const char *layout, uint64_t capacity) {
  cm_device_props_t props = {.max_page_size = (80 * GiB) / 4, .alignment = 512};
  static cm_pool_options_t pools[CM_MAX_DYNAMIC_POOLS];
  size_t n = 0;
  if (cm_pools_parse(layout, props, pools, CM_MAX_DYNAMIC_POOLS, &n, NULL) != CM_OK) {
    cm_test_fail(__FILE__, __LINE__, "bad layout %s", layout);
    return 1;
  }
  cm_storage_t *s = NULL;
  if (cm_storage_sim_create(capacity, true, 0, &s) != CM_OK) return 1;
  cm_manager_config_t mc;
  cm_manager_config_init(&mc);
  mc.props = props;
  mc.pools = pools;
  mc.pool_count = n;
  cm_manager_t *m = NULL;
  if (cm_manager_create(s, &mc, &m, NULL) != CM_OK) {
    cm_storage_destroy(s);
    return 1;
  }
  cm_replay_result_t r;
  if (cm_replay_run(t, m, NULL, &r, NULL) != CM_OK) {
    cm_manager_destroy(m);
    return 1;
  }
  EXPECT_EQ(r.storage.violations, 0);
  EXPECT_EQ(r.storage.errors, 0);
  cm_manager_cleanup(m, true);
  cm_sim_state_t st = state(s);
  EXPECT_EQ(st.violations, 0);
  if (st.violations) printf("  %s: %s\n", layout, st.last_violation);
  EXPECT_EQ(st.mappings, 0);
  EXPECT_EQ(st.bytes_used, 0);
  EXPECT_EQ(cm_manager_check(m, NULL), 0);
  uint64_t failed = r.failed_allocs;
  cm_replay_result_free(&r);
  cm_manager_destroy(m);
  return failed;
}

static const char *const k_layouts[] = {"default", "subslices", "exclusive-pages", "arena:object=8MiB",
                                        "sliced:page=64MiB;exclusive:max=1GiB;direct"};

static void replays_follow_the_rules(void) {
  char path[4096];
  snprintf(path, sizeof path, "%s/examples/torch-cpu-gpt-train.csv", CM_SOURCE_DIR);
  cm_trace_t *t = NULL;
  ASSERT_OK(cm_trace_load(path, NULL, &t, NULL));
  for (size_t i = 0; i < sizeof k_layouts / sizeof k_layouts[0]; i++) {
    EXPECT_EQ(replay_strict(t, k_layouts[i], 0), 0);
    /* under pressure too: a device barely larger than the peak */
    (void)replay_strict(t, k_layouts[i], t->peak_live_bytes + t->peak_live_bytes / 50);
  }
  cm_trace_free(t);
}

static void shared_traces_follow_the_rules(void) {
  const char *sh = cm_test_shared_dir();
  if (!sh) CM_SKIP("../shared is absent: the shared traces are not replayed");
  static const char *const traces[] = {"gpu/cs336-medium-ctx128-training.csv",
                                       "cpu/torch-cpu-lstm-varlen-train.csv",
                                       "plans/mindspore-pangu2.6b-plan.csv"};
  for (size_t k = 0; k < 3; k++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/traces/%s", sh, traces[k]);
    cm_trace_t *t = NULL;
    ASSERT_OK(cm_trace_load(path, NULL, &t, NULL));
    for (size_t i = 0; i < sizeof k_layouts / sizeof k_layouts[0]; i++)
      EXPECT_EQ(replay_strict(t, k_layouts[i], 0), 0);
    cm_trace_free(t);
  }
}

static cm_manager_t *default_manager(cm_storage_t *s, uint64_t device) {
  cm_manager_config_t mc;
  cm_manager_config_init(&mc);
  mc.props = (cm_device_props_t){.max_page_size = device / 4, .alignment = 512};
  cm_manager_t *m = NULL;
  if (cm_manager_create(s, &mc, &m, NULL) != CM_OK) return NULL;
  return m;
}

/* Reservations that fit are served: growth ahead of a request and cached
 * memory give way when the device is short. */
static void oom_means_out_of_memory(void) {
  static const struct {
    uint64_t device, first, second;
  } cases[] = {{80 * GiB, 81870 * MiB, 2 * MiB}, {4 * GiB, 3 * GiB, 1020 * MiB}};
  for (size_t i = 0; i < 2; i++) {
    cm_storage_t *s = NULL;
    ASSERT_OK(cm_storage_sim_create(cases[i].device, true, 0, &s));
    cm_manager_t *m = default_manager(s, cases[i].device);
    ASSERT(m != NULL);
    cm_handle_t a, b, c;
    ASSERT_OK(cm_manager_reserve(m, cases[i].first, &a, NULL));
    cm_diag_t d;
    cm_diag_clear(&d);
    EXPECT_OK(cm_manager_reserve(m, cases[i].second, &b, &d));
    if (d.message[0]) printf("  %s\n", d.message);
    /* a request that does not fit fails with CM_EOOM */
    EXPECT_STATUS(cm_manager_reserve(m, 64 * MiB, &c, NULL), CM_EOOM);
    EXPECT_EQ(state(s).violations, 0);
    cm_handle_release(a);
    cm_handle_release(b);
    EXPECT_EQ(cm_manager_check(m, NULL), 0);
    cm_manager_destroy(m);
  }
}

/* Cached memory is given back and the request retried before it fails. */
static void pressure_releases_cached_memory(void) {
  cm_storage_t *s = NULL;
  ASSERT_OK(cm_storage_sim_create(64 * MiB, true, 0, &s));
  cm_manager_t *m = default_manager(s, 64 * MiB);
  ASSERT(m != NULL);
  cm_handle_t h[8];
  for (int i = 0; i < 8; i++) ASSERT_OK(cm_manager_reserve(m, 6 * MiB, &h[i], NULL));
  for (int i = 0; i < 8; i += 2) cm_handle_release(h[i]); /* holes of 6 MiB, cached */
  cm_handle_t big;
  ASSERT_OK(cm_manager_reserve(m, 30 * MiB, &big, NULL)); /* needs the cached chunks back */
  EXPECT_EQ(state(s).violations, 0);
  EXPECT_LE(state(s).bytes_used, 64 * MiB);
  cm_handle_release(big);
  for (int i = 1; i < 8; i += 2) cm_handle_release(h[i]);
  EXPECT_EQ(cm_manager_check(m, NULL), 0);
  cm_manager_destroy(m);
}

/* A storage without virtual memory over a strict sim: the arena grows by
 * segments, and falls back to the request's own size when the device is short. */
static int nv_alloc(void *c, uint64_t n, uint64_t *id, cm_diag_t *d) {
  return cm_storage_alloc(c, n, id, d);
}
static void nv_dealloc(void *c, uint64_t id) { cm_storage_dealloc(c, id, 0); }
static int nv_get(void *c, uint64_t id, uint64_t off, uint64_t n, cm_resource_t *o, cm_diag_t *d) {
  return cm_storage_get(c, id, off, n, o, d);
}
static int nv_mem_info(void *c, uint64_t *f, uint64_t *t) { return cm_storage_mem_info(c, f, t); }
static void nv_release(void *c) { cm_storage_destroy(c); }
static const cm_storage_ops_t k_novm = {.name = "novm", .alloc = nv_alloc, .dealloc = nv_dealloc,
                                        .get = nv_get, .release = nv_release,
                                        .mem_info = nv_mem_info};

static void segments_fall_back_to_the_request(void) {
  cm_storage_t *inner = NULL, *s = NULL;
  ASSERT_OK(cm_storage_sim_create(1 * GiB, true, 0, &inner));
  ASSERT_OK(cm_storage_create(&k_novm, inner, &s));
  cm_manager_t *m = default_manager(s, 1 * GiB);
  ASSERT(m != NULL);
  cm_handle_t a, b, c;
  ASSERT_OK(cm_manager_reserve(m, 600 * MiB, &a, NULL));
  ASSERT_OK(cm_manager_reserve(m, 300 * MiB, &b, NULL));
  EXPECT_OK(cm_manager_reserve(m, 100 * MiB, &c, NULL)); /* 124 MiB are free */
  cm_handle_release(a);
  cm_handle_release(b);
  cm_handle_release(c);
  EXPECT_EQ(cm_manager_check(m, NULL), 0);
  cm_manager_destroy(m);
}

/* A device shared with another process: a VM storage over a strict sim whose
 * free memory (mem_info) is what the sim has less `external` bytes. */
typedef struct shared_dev {
  cm_storage_t *inner;
  uint64_t external;
} shared_dev;
static uint64_t sd_gran(void *c) { return cm__storage_vm_granularity(((shared_dev *)c)->inner); }
static int sd_reserve(void *c, uint64_t n, uint64_t *id, cm_diag_t *d) {
  return cm__storage_vm_reserve(((shared_dev *)c)->inner, n, id, d);
}
static int sd_map(void *c, uint64_t id, uint64_t off, uint64_t n, uint64_t piece, cm_diag_t *d) {
  return cm__storage_vm_map(((shared_dev *)c)->inner, id, off, n, piece, d);
}
static int sd_unmap(void *c, uint64_t id, uint64_t off, uint64_t n, uint64_t piece, cm_diag_t *d) {
  return cm__storage_vm_unmap(((shared_dev *)c)->inner, id, off, n, piece, d);
}
static int sd_release(void *c, uint64_t id, cm_diag_t *d) {
  return cm__storage_vm_release(((shared_dev *)c)->inner, id, 0, d);
}
static int sd_mem_info(void *c, uint64_t *f, uint64_t *t) {
  shared_dev *s = c;
  int rc = cm_storage_mem_info(s->inner, f, t);
  *f = *f > s->external ? *f - s->external : 0;
  return rc;
}
static void sd_destroy(void *c) { cm_storage_destroy(((shared_dev *)c)->inner); }
static int sd_alloc(void *c, uint64_t n, uint64_t *id, cm_diag_t *d) {
  return cm_storage_alloc(((shared_dev *)c)->inner, n, id, d);
}
static void sd_dealloc(void *c, uint64_t id) { cm_storage_dealloc(((shared_dev *)c)->inner, id, 0); }
static int sd_get(void *c, uint64_t id, uint64_t off, uint64_t n, cm_resource_t *o, cm_diag_t *d) {
  return cm_storage_get(((shared_dev *)c)->inner, id, off, n, o, d);
}
static const cm_storage_ops_t k_shared = {
    .name = "shared", .alloc = sd_alloc, .dealloc = sd_dealloc, .get = sd_get,
    .release = sd_destroy, .mem_info = sd_mem_info, .vm_granularity = sd_gran,
    .vm_reserve = sd_reserve, .vm_map = sd_map, .vm_unmap = sd_unmap, .vm_release = sd_release};

/* The default arena's larger objects while the device has room: the device's
 * free memory is asked only now and then (not once per growth), what this
 * process maps in between is counted exactly, and memory another process
 * takes is seen within ROOM_REFRESH (64) decisions. */
static void room_is_asked_rarely(void) {
  shared_dev sd = {NULL, 0};
  cm_storage_t *s = NULL;
  ASSERT_OK(cm_storage_sim_create(64 * GiB, true, 0, &sd.inner));
  ASSERT_OK(cm_storage_create(&k_shared, &sd, &s));
  cm_manager_t *m = default_manager(s, 64 * GiB);
  ASSERT(m != NULL);
  enum { N = 200, MORE = 80 };
  cm_handle_t h[N + MORE];
  cm_storage_stats_t st;
  /* 64 MiB blocks are larger than a quarter of a growth step (64 MiB at
   * least, at most 1/128 of the free memory above half the device): growth
   * is exact, one object per block */
  cm_storage_stats(s, &st);
  uint64_t before = st.creates, q0 = st.mem_queries;
  for (int i = 0; i < N; i++) ASSERT_OK(cm_manager_reserve(m, 64 * MiB, &h[i], NULL));
  cm_storage_stats(s, &st);
  EXPECT_EQ(st.creates - before, N); /* room: each 64 MiB block is one object */
  /* one query per 64 decisions (one per growth before), one more at most for
   * the decision that found the cached answer spent */
  EXPECT_GE(st.mem_queries - q0, 1);
  EXPECT_LE(st.mem_queries - q0, 1 + (N + 63) / 64);
  /* another process takes 40 GiB: the device is no longer half free */
  sd.external = 40 * GiB;
  int first_split = -1;
  for (int i = N; i < N + MORE; i++) {
    uint64_t c0 = st.creates;
    ASSERT_OK(cm_manager_reserve(m, 64 * MiB, &h[i], NULL));
    cm_storage_stats(s, &st);
    if (st.creates - c0 == 32 && first_split < 0) first_split = i - N;
    if (first_split >= 0) EXPECT_EQ(st.creates - c0, 32); /* one object per granule from then on */
  }
  EXPECT_GE(first_split, 0);
  EXPECT_LE(first_split, 64);
  EXPECT_EQ(st.violations, 0);
  for (int i = 0; i < N + MORE; i++) cm_handle_release(h[i]);
  EXPECT_EQ(cm_manager_check(m, NULL), 0);
  cm_manager_destroy(m); /* and the storage it owns */
}

/* A dry run meets the device's limit where an eager run would. */
static void dry_run_meets_the_capacity(void) {
  cm_storage_t *s = NULL;
  ASSERT_OK(cm_storage_sim_create(80 * GiB, true, 0, &s));
  cm_manager_t *m = default_manager(s, 80 * GiB);
  ASSERT(m != NULL);
  cm_manager_dry_run_begin(m);
  cm_handle_t h[3];
  ASSERT_OK(cm_manager_reserve(m, 32 * GiB, &h[0], NULL));
  ASSERT_OK(cm_manager_reserve(m, 32 * GiB, &h[1], NULL));
  cm_diag_t d;
  cm_diag_clear(&d);
  EXPECT_STATUS(cm_manager_reserve(m, 32 * GiB, &h[2], &d), CM_EOOM);
  EXPECT_CONTAINS(d.message, "would be out of memory");
  cm_manager_dry_run_end(m);
  EXPECT_EQ(state(s).bytes_used, 0); /* nothing was mapped for real */
  cm_handle_release(h[0]);
  cm_handle_release(h[1]);
  EXPECT_EQ(cm_manager_check(m, NULL), 0);
  cm_manager_destroy(m);
}

/* cm_replay_fit: the result fits, one grid step below does not, and it lies
 * between the peak live bytes and the unconstrained peak. */
static void fit_finds_the_smallest_device(void) {
  char path[4096];
  snprintf(path, sizeof path, "%s/examples/torch-cpu-gpt-train.csv", CM_SOURCE_DIR);
  cm_trace_t *t = NULL;
  ASSERT_OK(cm_trace_load(path, NULL, &t, NULL));
  cm_manager_config_t mc;
  cm_manager_config_init(&mc);
  mc.props = (cm_device_props_t){.max_page_size = 20 * GiB, .alignment = 512};
  cm_fit_result_t fr;
  ASSERT_OK(cm_replay_fit(t, &mc, NULL, &fr, NULL));
  EXPECT_GE(fr.fit_bytes, t->peak_live_bytes);
  EXPECT_LE(fr.fit_bytes, fr.unconstrained_peak + G);
  EXPECT_EQ(fr.fit_bytes % G, 0);
  EXPECT(fr.ratio < 1.02);
  EXPECT_GE(fr.replays, 3);
  /* check both sides of the result directly */
  EXPECT_EQ(replay_strict(t, "default", fr.fit_bytes), 0);
  EXPECT_GT(replay_strict(t, "default", fr.fit_bytes - G), 0);
  EXPECT_EQ(fr.below_capacity, 0); /* not asked for */
  /* explain_below: one more replay, on one grid step less, and its first
   * failure, which says where the arena's memory beyond the live data lies */
  cm_fit_options_t fo;
  cm_fit_options_init(&fo);
  fo.explain_below = true;
  cm_fit_result_t fb;
  ASSERT_OK(cm_replay_fit(t, &mc, &fo, &fb, NULL));
  EXPECT_EQ(fb.fit_bytes, fr.fit_bytes);
  EXPECT_EQ(fb.replays, fr.replays + 1);
  EXPECT_EQ(fb.below_capacity, fr.fit_bytes - G);
  EXPECT_EQ(fb.below_status, CM_EOOM);
  EXPECT_GT(fb.below_failed, 0);
  EXPECT_GT(fb.below_size, 0);
  EXPECT_GT(fb.below_event, 0);
  EXPECT_LE(fb.below_reserved_bytes, fb.below_capacity);
  EXPECT_CONTAINS(fb.below_message, "out of memory");
  EXPECT_CONTAINS(fb.below_message, "of live data");
  EXPECT_CONTAINS(fb.below_message, "are the free parts of granules");
  EXPECT_STATUS(cm_replay_fit(NULL, &mc, NULL, &fr, NULL), CM_EINVAL);
  cm_trace_free(t);
}

/* The arena reports its cached bytes: whole free granules, apart from the
 * free parts of granules that live data uses. */
static void arena_reports_cached_bytes(void) {
  cm_storage_t *s = NULL;
  ASSERT_OK(cm_storage_sim_create(0, true, 0, &s));
  cm_manager_t *m = default_manager(s, 80 * GiB);
  ASSERT(m != NULL);
  cm_handle_t a, b;
  ASSERT_OK(cm_manager_reserve(m, 1 * MiB, &a, NULL)); /* half of granule 0 */
  ASSERT_OK(cm_manager_reserve(m, 6 * MiB, &b, NULL)); /* the rest of granule 0 and more */
  cm_pool_report_t r;
  ASSERT_OK(cm_manager_pool_report(m, 0, &r));
  EXPECT(r.has_cached);
  uint64_t free_b = r.usage.bytes_reserved - r.usage.bytes_in_use - r.usage.bytes_padding;
  EXPECT_LE(r.bytes_cached, free_b);
  EXPECT_EQ(r.bytes_cached % G, 0);
  uint64_t cached0 = r.bytes_cached;
  cm_handle_release(b); /* its whole granules become cached; granule 0 keeps a */
  ASSERT_OK(cm_manager_pool_report(m, 0, &r));
  EXPECT_GE(r.bytes_cached, cached0 + 2 * G);
  EXPECT_LT(r.bytes_cached, r.usage.bytes_reserved); /* granule 0 is partly used: a hole */
  cm_handle_release(a);
  ASSERT_OK(cm_manager_pool_report(m, 0, &r));
  EXPECT_EQ(r.bytes_cached, r.usage.bytes_reserved); /* everything free is cached */
  ASSERT_OK(cm_manager_pool_report(m, CM_PERSISTENT_POOL, &r));
  EXPECT(!r.has_cached); /* not kept by the slot pools */
  cm_manager_destroy(m);
}

/* A request larger than the whole device fails at once, in eager and dry
 * runs alike, without reserving address space or making region metadata. */
static void larger_than_the_device_fails_fast(void) {
  cm_storage_t *s = NULL;
  ASSERT_OK(cm_storage_sim_create(80 * GiB, true, 0, &s));
  cm_manager_t *m = default_manager(s, 80 * GiB);
  ASSERT(m != NULL);
  cm_handle_t h;
  cm_diag_t d;
  for (int dry = 0; dry < 2; dry++) {
    if (dry) cm_manager_dry_run_begin(m);
    for (int i = 0; i < 100; i++) {
      cm_diag_clear(&d);
      EXPECT_STATUS(cm_manager_reserve(m, 1ull << 40, &h, &d), CM_EOOM);
    }
    EXPECT_CONTAINS(d.message, "from a device of 85899345920 bytes");
    if (dry) cm_manager_dry_run_end(m);
  }
  cm_storage_stats_t st;
  cm_storage_stats(s, &st);
  EXPECT_EQ(st.reserves, 0);
  EXPECT_EQ(st.creates, 0);
  cm_pool_report_t r;
  ASSERT_OK(cm_manager_pool_report(m, 0, &r));
  EXPECT_EQ(r.pages_peak, 0);
  cm_manager_destroy(m);
}

int main(void) {
  CM_RUN(sim_refuses_what_the_driver_refuses);
  CM_RUN(host_refuses_what_the_driver_refuses);
  CM_RUN(aliases_follow_the_contract);
  CM_RUN(replays_follow_the_rules);
  CM_RUN(shared_traces_follow_the_rules);
  CM_RUN(oom_means_out_of_memory);
  CM_RUN(pressure_releases_cached_memory);
  CM_RUN(segments_fall_back_to_the_request);
  CM_RUN(room_is_asked_rarely);
  CM_RUN(dry_run_meets_the_capacity);
  CM_RUN(fit_finds_the_smallest_device);
  CM_RUN(arena_reports_cached_bytes);
  CM_RUN(larger_than_the_device_fails_fast);
  return cm_test_finish();
}
