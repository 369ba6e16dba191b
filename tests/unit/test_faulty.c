/*
 * test_faulty.c - the fault-injecting storage decorator (cubemem/faulty.h).
 *
 * Covers: pass-through with no plan; NTH, FROM_NTH and seeded RANDOM plans on
 * alloc; vm_map and vm_alias (and vm_reserve on request) through the VM interface; the
 * injected status and diag text; that an injected failure never reaches the
 * inner backend (ids are not consumed, statistics unchanged); set_plan
 * resetting the counters; argument checks and ownership on failure; and that
 * host memory obtained through the decorator is real and writable.
 */
#include <stdlib.h>
#include <string.h>

#include "cm_test.h"
#include "cubemem/faulty.h"
#include "cubemem/storage.h"
#include "storage/storage_internal.h"

static cm_storage_t *make_faulty(const cm_fault_plan_t *plan) {
  cm_storage_t *inner = NULL, *s = NULL;
  if (cm_storage_sim_create(0, false, 0, &inner) != CM_OK) return NULL;
  if (cm_storage_faulty_create(inner, plan, &s) != CM_OK) {
    cm_storage_destroy(inner);
    return NULL;
  }
  return s;
}

static void no_plan_passes_through(void) {
  cm_storage_t *s = make_faulty(NULL);
  ASSERT(s != NULL);
  EXPECT_STR(cm_storage_name(s), "faulty");
  EXPECT(cm_storage_has_vm(s));
  uint64_t ids[10];
  for (int i = 0; i < 10; i++) {
    ASSERT_OK(cm_storage_alloc(s, 1000 + (uint64_t)i, &ids[i], NULL));
    cm_resource_t r;
    ASSERT_OK(cm_storage_get(s, ids[i], 0, 1000, &r, NULL));
    EXPECT_EQ(r.size, 1000);
    EXPECT(r.addr != 0);
  }
  EXPECT_EQ(cm_storage_faulty_calls(s), 10);
  EXPECT_EQ(cm_storage_faulty_injected(s), 0);
  for (int i = 0; i < 10; i++) cm_storage_dealloc(s, ids[i], 1000 + (uint64_t)i);
  EXPECT_OK(cm_storage_flush(s));
  cm_storage_stats_t st;
  cm_storage_stats(s, &st);
  EXPECT_EQ(st.allocs, 10);
  EXPECT_EQ(st.deallocs, 10);
  EXPECT_EQ(st.bytes_held, 0);
  /* get/dealloc/flush are never counted */
  EXPECT_EQ(cm_storage_faulty_calls(s), 10);
  cm_storage_destroy(s);
}

static void nth_fails_exactly_once(void) {
  cm_fault_plan_t p;
  cm_fault_plan_init(&p);
  p.mode = CM_FAULT_NTH;
  p.nth = 3;
  cm_storage_t *s = make_faulty(&p);
  ASSERT(s != NULL);
  uint64_t ids[6] = {0};
  for (int i = 0; i < 6; i++) {
    cm_diag_t d;
    cm_diag_clear(&d);
    int rc = cm_storage_alloc(s, 512, &ids[i], &d);
    if (i == 2) {
      EXPECT_STATUS(rc, CM_EOOM);
      EXPECT_STATUS(d.code, CM_EOOM);
      EXPECT_CONTAINS(d.message, "injected");
      EXPECT_CONTAINS(d.message, "alloc call 3");
      EXPECT_EQ(ids[i], 0); /* out-parameter untouched */
    } else {
      EXPECT_OK(rc);
    }
  }
  /* The failed call did not reach the backend: the sim mints ids 1..5. */
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 2);
  EXPECT_EQ(ids[3], 3);
  EXPECT_EQ(ids[5], 5);
  EXPECT_EQ(cm_storage_faulty_calls(s), 6);
  EXPECT_EQ(cm_storage_faulty_injected(s), 1);
  cm_storage_stats_t st;
  cm_storage_stats(s, &st);
  EXPECT_EQ(st.allocs, 5);
  EXPECT_EQ(st.failed_allocs, 1);
  EXPECT_EQ(st.bytes_held, 5 * 512);
  cm_storage_destroy(s); /* frees the 5 live allocations with the inner sim */
}

static void from_nth_fails_every_later_call(void) {
  cm_fault_plan_t p;
  cm_fault_plan_init(&p);
  p.mode = CM_FAULT_FROM_NTH;
  p.nth = 4;
  p.error = CM_ESTORAGE;
  cm_storage_t *s = make_faulty(&p);
  ASSERT(s != NULL);
  for (int i = 1; i <= 10; i++) {
    uint64_t id;
    int rc = cm_storage_alloc(s, 64, &id, NULL);
    if (i < 4)
      EXPECT_OK(rc);
    else
      EXPECT_STATUS(rc, CM_ESTORAGE);
  }
  EXPECT_EQ(cm_storage_faulty_calls(s), 10);
  EXPECT_EQ(cm_storage_faulty_injected(s), 7);
  cm_storage_destroy(s);
}

static void nth_zero_never_fails(void) {
  cm_fault_plan_t p;
  cm_fault_plan_init(&p);
  p.mode = CM_FAULT_FROM_NTH;
  p.nth = 0;
  cm_storage_t *s = make_faulty(&p);
  ASSERT(s != NULL);
  for (int i = 0; i < 5; i++) {
    uint64_t id;
    EXPECT_OK(cm_storage_alloc(s, 1, &id, NULL));
  }
  EXPECT_EQ(cm_storage_faulty_injected(s), 0);
  cm_storage_destroy(s);
}

/* Run n allocations under a random plan; bit i of out is 1 if call i failed. */
static void random_pattern(uint64_t seed, uint32_t ppm, int n, unsigned char *out) {
  cm_fault_plan_t p;
  cm_fault_plan_init(&p);
  p.mode = CM_FAULT_RANDOM;
  p.seed = seed;
  p.ppm = ppm;
  cm_storage_t *s = make_faulty(&p);
  ASSERT(s != NULL);
  for (int i = 0; i < n; i++) {
    uint64_t id;
    out[i] = cm_storage_alloc(s, 8, &id, NULL) != CM_OK;
  }
  EXPECT_EQ(cm_storage_faulty_calls(s), (uint64_t)n);
  cm_storage_destroy(s);
}

static void random_is_seeded_and_proportional(void) {
  enum { N = 2000 };
  static unsigned char a[N], b[N], c[N];
  random_pattern(42, 500000, N, a);
  random_pattern(42, 500000, N, b);
  random_pattern(43, 500000, N, c);
  EXPECT(memcmp(a, b, N) == 0); /* same seed, same failures */
  EXPECT(memcmp(a, c, N) != 0); /* another seed, another pattern */
  int fails = 0;
  for (int i = 0; i < N; i++) fails += a[i];
  EXPECT_GT(fails, N * 4 / 10);
  EXPECT_LT(fails, N * 6 / 10);

  random_pattern(7, 0, N, a);
  fails = 0;
  for (int i = 0; i < N; i++) fails += a[i];
  EXPECT_EQ(fails, 0);
  random_pattern(7, 1000000, 100, a);
  fails = 0;
  for (int i = 0; i < 100; i++) fails += a[i];
  EXPECT_EQ(fails, 100);
}

static void vm_map_is_counted_and_fails(void) {
  cm_fault_plan_t p;
  cm_fault_plan_init(&p);
  p.mode = CM_FAULT_NTH;
  p.nth = 2;
  cm_storage_t *s = make_faulty(&p);
  ASSERT(s != NULL);
  ASSERT(cm_storage_has_vm(s));
  uint64_t g = cm__storage_vm_granularity(s);
  ASSERT(g > 0);
  uint64_t range;
  ASSERT_OK(cm__storage_vm_reserve(s, 4 * g, &range, NULL)); /* not counted by default */
  EXPECT_EQ(cm_storage_faulty_calls(s), 0);
  EXPECT_OK(cm__storage_vm_map(s, range, 0, g, g, NULL));      /* call 1 */
  cm_diag_t d;
  cm_diag_clear(&d);
  EXPECT_STATUS(cm__storage_vm_map(s, range, g, g, g, &d), CM_EOOM); /* call 2 */
  EXPECT_CONTAINS(d.message, "vm_map call 2");
  EXPECT_OK(cm__storage_vm_map(s, range, g, g, g, NULL)); /* call 3 */
  cm_storage_stats_t st;
  cm_storage_stats(s, &st);
  EXPECT_EQ(st.maps, 2);
  EXPECT_EQ(st.failed_allocs, 1);
  EXPECT_EQ(st.bytes_held, 2 * g);
  EXPECT_OK(cm__storage_vm_unmap(s, range, 0, 2 * g, g, NULL));
  EXPECT_OK(cm__storage_vm_release(s, range, 4 * g, NULL));
  cm_storage_stats(s, &st);
  EXPECT_EQ(st.violations, 0);
  EXPECT_EQ(cm_storage_faulty_calls(s), 3);

  /* vm_reserve is counted (and may fail) only when asked. */
  p.ops = CM_FAULT_OP_VM_RESERVE;
  p.nth = 1;
  ASSERT_OK(cm_storage_faulty_set_plan(s, &p));
  EXPECT_STATUS(cm__storage_vm_reserve(s, g, &range, NULL), CM_EOOM);
  EXPECT_OK(cm__storage_vm_reserve(s, g, &range, NULL));
  uint64_t id;
  EXPECT_OK(cm_storage_alloc(s, 10, &id, NULL)); /* alloc not counted now */
  EXPECT_EQ(cm_storage_faulty_calls(s), 2);
  EXPECT_EQ(cm_storage_faulty_injected(s), 1);
  EXPECT_OK(cm__storage_vm_release(s, range, g, NULL));
  cm_storage_destroy(s);
}

/* vm_alias is counted with the default mask, like vm_map, and an injected
 * failure is always CM_ESTORAGE (an alias makes no memory, so it is never out
 * of it) and never reaches the inner storage. */
static void vm_alias_is_counted_and_fails(void) {
  cm_fault_plan_t p;
  cm_fault_plan_init(&p);
  p.mode = CM_FAULT_NTH;
  p.nth = 3;
  p.error = CM_EOOM;
  cm_storage_t *s = make_faulty(&p);
  ASSERT(s != NULL);
  ASSERT(cm__storage_has_alias(s));
  uint64_t g = cm__storage_vm_granularity(s), range;
  ASSERT_OK(cm__storage_vm_reserve(s, 4 * g, &range, NULL));
  EXPECT_OK(cm__storage_vm_map(s, range, 0, g, g, NULL));            /* call 1 */
  EXPECT_OK(cm__storage_vm_alias(s, range, g, range, 0, g, g, NULL)); /* call 2 */
  cm_diag_t d;
  cm_diag_clear(&d);
  EXPECT_STATUS(cm__storage_vm_alias(s, range, 2 * g, range, 0, g, g, &d), CM_ESTORAGE);
  EXPECT_CONTAINS(d.message, "vm_alias call 3");
  cm_storage_stats_t st;
  cm_storage_stats(s, &st);
  EXPECT_EQ(st.maps, 2);
  EXPECT_EQ(st.map_calls, 2);
  EXPECT_EQ(st.failed_allocs, 1);
  EXPECT_EQ(st.errors, 1);
  EXPECT_EQ(st.violations, 0);
  EXPECT_EQ(st.bytes_held, g);
  EXPECT_OK(cm__storage_vm_alias(s, range, 2 * g, range, 0, g, g, NULL)); /* call 4 */
  EXPECT_OK(cm__storage_vm_unalias(s, range, g, 2 * g, g, NULL));
  EXPECT_OK(cm__storage_vm_unmap(s, range, 0, g, g, NULL));
  EXPECT_OK(cm__storage_vm_release(s, range, 4 * g, NULL));
  EXPECT_EQ(cm_storage_faulty_calls(s), 4);
  EXPECT_EQ(cm_storage_faulty_injected(s), 1);
  cm_storage_stats(s, &st);
  EXPECT_EQ(st.bytes_held, 0);
  EXPECT_EQ(st.violations, 0);
  /* not counted when the mask leaves it out */
  p.ops = CM_FAULT_OP_VM_MAP;
  p.nth = 1;
  ASSERT_OK(cm_storage_faulty_set_plan(s, &p));
  ASSERT_OK(cm__storage_vm_reserve(s, 2 * g, &range, NULL));
  EXPECT_STATUS(cm__storage_vm_map(s, range, 0, g, g, NULL), CM_EOOM);
  EXPECT_OK(cm__storage_vm_map(s, range, 0, g, g, NULL));
  EXPECT_OK(cm__storage_vm_alias(s, range, g, range, 0, g, g, NULL));
  EXPECT_EQ(cm_storage_faulty_calls(s), 2);
  EXPECT_OK(cm__storage_vm_unalias(s, range, g, g, g, NULL));
  EXPECT_OK(cm__storage_vm_unmap(s, range, 0, g, g, NULL));
  EXPECT_OK(cm__storage_vm_release(s, range, 2 * g, NULL));
  cm_storage_destroy(s);
}

static void set_plan_resets_counters(void) {
  cm_storage_t *s = make_faulty(NULL);
  ASSERT(s != NULL);
  uint64_t id;
  for (int i = 0; i < 3; i++) ASSERT_OK(cm_storage_alloc(s, 1, &id, NULL));
  EXPECT_EQ(cm_storage_faulty_calls(s), 3);
  cm_fault_plan_t p;
  cm_fault_plan_init(&p);
  p.mode = CM_FAULT_NTH;
  p.nth = 1;
  ASSERT_OK(cm_storage_faulty_set_plan(s, &p));
  EXPECT_EQ(cm_storage_faulty_calls(s), 0);
  EXPECT_STATUS(cm_storage_alloc(s, 1, &id, NULL), CM_EOOM);
  EXPECT_OK(cm_storage_alloc(s, 1, &id, NULL));
  EXPECT_EQ(cm_storage_faulty_calls(s), 2);
  EXPECT_EQ(cm_storage_faulty_injected(s), 1);
  p.error = CM_EINVAL; /* not an allocation failure status */
  EXPECT_STATUS(cm_storage_faulty_set_plan(s, &p), CM_EINVAL);
  EXPECT_EQ(cm_storage_faulty_calls(s), 2); /* unchanged on failure */
  cm_storage_destroy(s);
}

static void argument_checks_and_ownership(void) {
  cm_storage_t *inner = NULL, *s = (cm_storage_t *)1;
  ASSERT_OK(cm_storage_sim_create(0, false, 0, &inner));
  EXPECT_STATUS(cm_storage_faulty_create(NULL, NULL, &s), CM_EINVAL);
  EXPECT(s == NULL);
  EXPECT_STATUS(cm_storage_faulty_create(inner, NULL, NULL), CM_EINVAL);
  cm_fault_plan_t p;
  cm_fault_plan_init(&p);
  p.error = CM_ENOTFOUND;
  EXPECT_STATUS(cm_storage_faulty_create(inner, &p, &s), CM_EINVAL);
  cm_fault_plan_init(&p);
  p.ppm = 1000001;
  EXPECT_STATUS(cm_storage_faulty_create(inner, &p, &s), CM_EINVAL);
  cm_fault_plan_init(&p);
  p.mode = (cm_fault_mode_t)9;
  EXPECT_STATUS(cm_storage_faulty_create(inner, &p, &s), CM_EINVAL);
  cm_fault_plan_init(&p);
  p.ops = 0x80;
  EXPECT_STATUS(cm_storage_faulty_create(inner, &p, &s), CM_EINVAL);
  /* error 0 and ops 0 mean the defaults */
  cm_fault_plan_init(&p);
  p.error = 0;
  p.ops = 0;
  p.mode = CM_FAULT_NTH;
  p.nth = 1;
  /* the caller still owns inner after every failure above: use it */
  uint64_t id;
  EXPECT_OK(cm_storage_alloc(inner, 16, &id, NULL));
  ASSERT_OK(cm_storage_faulty_create(inner, &p, &s));
  EXPECT_STATUS(cm_storage_alloc(s, 16, &id, NULL), CM_EOOM);
  /* a storage that is not a faulty one */
  cm_storage_t *plain = NULL;
  ASSERT_OK(cm_storage_sim_create(0, false, 0, &plain));
  EXPECT_EQ(cm_storage_faulty_calls(plain), 0);
  EXPECT_EQ(cm_storage_faulty_injected(plain), 0);
  EXPECT_STATUS(cm_storage_faulty_set_plan(plain, NULL), CM_EINVAL);
  EXPECT_EQ(cm_storage_faulty_calls(NULL), 0);
  cm_storage_destroy(plain);
  cm_storage_destroy(s); /* destroys inner too */
}

static void host_memory_through_decorator(void) {
  cm_storage_t *inner = NULL, *s = NULL;
  ASSERT_OK(cm_storage_host_create(64, &inner));
  ASSERT_OK(cm_storage_faulty_create(inner, NULL, &s));
  uint64_t id;
  ASSERT_OK(cm_storage_alloc(s, 4096, &id, NULL));
  cm_resource_t r;
  ASSERT_OK(cm_storage_get(s, id, 128, 256, &r, NULL));
  ASSERT(r.host != NULL);
  EXPECT_EQ(r.size, 256);
  EXPECT_EQ((uintptr_t)r.host % 64, 0);
  unsigned char *mem = r.host;
  for (int i = 0; i < 256; i++) EXPECT_EQ(mem[i], 0); /* zero-filled */
  memset(mem, 0xA5, 256);
  cm_diag_t d;
  cm_diag_clear(&d);
  EXPECT_STATUS(cm_storage_get(s, id + 1000, 0, 1, &r, &d), CM_EHANDLE);
  EXPECT_CONTAINS(d.message, "StorageId");
  cm_storage_dealloc(s, id, 4096);
  cm_storage_destroy(s);
}

int main(void) {
  CM_RUN(no_plan_passes_through);
  CM_RUN(nth_fails_exactly_once);
  CM_RUN(from_nth_fails_every_later_call);
  CM_RUN(nth_zero_never_fails);
  CM_RUN(random_is_seeded_and_proportional);
  CM_RUN(vm_map_is_counted_and_fails);
  CM_RUN(vm_alias_is_counted_and_fails);
  CM_RUN(set_plan_resets_counters);
  CM_RUN(argument_checks_and_ownership);
  CM_RUN(host_memory_through_decorator);
  return cm_test_finish();
}
