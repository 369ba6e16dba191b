/*
 * test_persistent.c - the persistent pool, allocation modes and the four
 * PersistentMemory settings (spec §4.5, §5.6, §5.7; scenarios T51-T59 of
 * §14), through the public manager API.
 *
 * The reference drives a PersistentPool directly in T53/T54; here the same
 * facts are observed through a manager in persistent mode: "try_reserve
 * gives none" shows up as a new persistent slice, "gives a slice" as reuse
 * with an unchanged slice count. The persistent pool's report is read with
 * cm_manager_pool_report(m, CM_PERSISTENT_POOL).
 *
 * cubemem sets the padding when it reuses a persistent slice ([REC], spec
 * §15.1 item 2), so T59 expects (1,120,8,128) and the slot stays keyed under
 * its effective size 128.
 * Exports: main (the test runner).
 */
#include <stdlib.h>
#include <string.h>

#include "cm_test.h"
#include "cubemem/memory.h"

/* ---- shared helpers (each test file carries its own copy) ------------------- */

#define UNUSED __attribute__((unused))
#define KiB (1024ull)
#define MiB (1024ull * 1024ull)
#define GiB (1024ull * MiB)

/* The spec's test constant D. */
static const cm_device_props_t D = {128 * MiB, 32};

static UNUSED cm_pool_options_t sliced(uint64_t page, uint64_t max_slice) {
  cm_pool_options_t o;
  memset(&o, 0, sizeof o);
  o.kind = CM_POOL_SLICED;
  o.page_size = page;
  o.max_slice_size = max_slice;
  o.has_max_slice_size = true;
  return o;
}

static UNUSED cm_pool_options_t sliced_cap(uint64_t page, uint64_t max_slice, uint64_t cap) {
  cm_pool_options_t o = sliced(page, max_slice);
  o.max_pool_size = cap;
  o.has_max_pool_size = true;
  return o;
}

static UNUSED cm_pool_options_t exclusive(uint64_t max_alloc) {
  cm_pool_options_t o;
  memset(&o, 0, sizeof o);
  o.kind = CM_POOL_EXCLUSIVE;
  o.max_alloc_size = max_alloc;
  return o;
}

static UNUSED cm_pool_options_t exclusive_p(uint64_t max_alloc, uint64_t period) {
  cm_pool_options_t o = exclusive(max_alloc);
  o.dealloc_period = period;
  o.has_dealloc_period = true;
  return o;
}

static UNUSED cm_pool_options_t direct(void) {
  cm_pool_options_t o;
  memset(&o, 0, sizeof o);
  o.kind = CM_POOL_DIRECT;
  return o;
}

static UNUSED cm_pool_options_t direct_at(uint64_t reclaim_at) {
  cm_pool_options_t o = direct();
  o.reclaim_at = reclaim_at;
  o.has_reclaim_at = true;
  return o;
}

/* A manager over `s` (NULL = a new immediate-free host storage). */
static UNUSED cm_manager_t *mk_full(cm_storage_t *s, cm_device_props_t props,
                                    const cm_pool_options_t *pools, size_t n, cm_preset_t preset,
                                    cm_persistent_memory_t pm) {
  if (!s) ASSERT_OK(cm_storage_host_create(0, &s));
  cm_manager_config_t cfg;
  cm_manager_config_init(&cfg);
  cfg.props = props;
  cfg.pools = pools;
  cfg.pool_count = n;
  cfg.preset = preset;
  cfg.persistent_memory = pm;
  cm_manager_t *m = NULL;
  cm_diag_t diag = {0};
  int rc = cm_manager_create(s, &cfg, &m, &diag);
  if (rc != CM_OK) {
    cm_storage_destroy(s);
    CM__FAIL_AND(1, "cm_manager_create: %d %s", rc, diag.message);
  }
  return m;
}

static UNUSED cm_manager_t *mk(cm_device_props_t props, const cm_pool_options_t *pools, size_t n) {
  return mk_full(NULL, props, pools, n, CM_PRESET_DEFAULT, CM_PERSISTENT_ENABLED);
}

static UNUSED cm_manager_t *mk_preset(cm_device_props_t props, cm_preset_t preset) {
  return mk_full(NULL, props, NULL, 0, preset, CM_PERSISTENT_ENABLED);
}

static UNUSED cm_storage_t *sim(uint64_t capacity, bool fail) {
  cm_storage_t *s = NULL;
  ASSERT_OK(cm_storage_sim_create(capacity, fail, 0, &s));
  return s;
}

#define EXPECT_USAGE(m, n, in_use, pad, reserved) \
  do {                                            \
    cm_usage_t u_;                                \
    cm_manager_usage((m), &u_);                   \
    EXPECT_EQ(u_.number_allocs, (n));             \
    EXPECT_EQ(u_.bytes_in_use, (in_use));         \
    EXPECT_EQ(u_.bytes_padding, (pad));           \
    EXPECT_EQ(u_.bytes_reserved, (reserved));     \
  } while (0)

#define EXPECT_POOL_USAGE(m, pool, n, in_use, pad, reserved) \
  do {                                                       \
    cm_pool_report_t r_;                                     \
    ASSERT_OK(cm_manager_pool_report((m), (pool), &r_));     \
    EXPECT_EQ(r_.usage.number_allocs, (n));                  \
    EXPECT_EQ(r_.usage.bytes_in_use, (in_use));              \
    EXPECT_EQ(r_.usage.bytes_padding, (pad));                \
    EXPECT_EQ(r_.usage.bytes_reserved, (reserved));          \
  } while (0)

#define EXPECT_HEALTHY(m) EXPECT_EQ(cm_manager_check((m), NULL), 0)

/* reserve that must succeed (stops the test otherwise). */
#define RSV(m, size) rsv_((m), (size), __LINE__)
static UNUSED cm_handle_t rsv_(cm_manager_t *m, uint64_t size, int line) {
  cm_handle_t h = {0};
  cm_diag_t diag = {0};
  int rc = cm_manager_reserve(m, size, &h, &diag);
  if (rc != CM_OK)
    CM__FAIL_AND(1, "line %d: reserve(%" PRIu64 "): %s %s", line, size, cm_err_name(rc),
                 diag.message);
  if (!h.d) CM__FAIL_AND(1, "line %d: reserve(%" PRIu64 ") gave an empty handle", line, size);
  return h;
}

/* reserve that must fail with `code`; checks the handle stays empty. */
#define RSV_FAIL(m, size, status)                                       \
  do {                                                                  \
    cm_handle_t hf_ = {0};                                              \
    cm_diag_t df_ = {0};                                                \
    EXPECT_STATUS(cm_manager_reserve((m), (size), &hf_, &df_), status); \
    EXPECT(hf_.d == NULL);                                              \
    EXPECT_STATUS(df_.code, status);                                    \
    EXPECT(df_.message[0] != '\0');                                     \
    cm_handle_release(hf_);                                             \
  } while (0)

static UNUSED cm_pool_report_t report(cm_manager_t *m, size_t pool) {
  cm_pool_report_t r;
  memset(&r, 0, sizeof r);
  ASSERT_OK(cm_manager_pool_report(m, pool, &r));
  return r;
}

static UNUSED uint64_t pages(cm_manager_t *m, size_t pool) { return report(m, pool).pages; }

static UNUSED cm_location_t loc_of(cm_manager_t *m, cm_handle_t h) {
  cm_location_t loc;
  memset(&loc, 0, sizeof loc);
  cm_binding_t b = cm_handle_binding(h);
  cm_diag_t diag = {0};
  int rc = cm_manager_find(m, b, &loc, &diag);
  cm_binding_release(b);
  if (rc != CM_OK) CM__FAIL_AND(1, "find: %s %s", cm_err_name(rc), diag.message);
  return loc;
}

static UNUSED cm_storage_handle_t storage_of(cm_manager_t *m, cm_handle_t h) {
  cm_storage_handle_t sh;
  memset(&sh, 0, sizeof sh);
  cm_binding_t b = cm_handle_binding(h);
  cm_diag_t diag = {0};
  int rc = cm_manager_get_storage(m, b, &sh, &diag);
  cm_binding_release(b);
  if (rc != CM_OK) CM__FAIL_AND(1, "get_storage: %s %s", cm_err_name(rc), diag.message);
  return sh;
}

static UNUSED cm_storage_stats_t sstats(cm_manager_t *m) {
  cm_storage_stats_t st;
  cm_storage_stats(cm_manager_storage(m), &st);
  return st;
}

static UNUSED cm_usage_t usage(cm_manager_t *m) {
  cm_usage_t u;
  cm_manager_usage(m, &u);
  return u;
}

static UNUSED void drop(cm_handle_t *h) {
  cm_handle_release(*h);
  h->d = NULL;
}

#define P CM_PERSISTENT_POOL

static uint64_t ppages(cm_manager_t *m) { return report(m, P).pages; }

/* T51 (R): windows nest; the inner close keeps the outer window open. */
static void t51_nested_windows(void) {
  cm_pool_options_t p = sliced(4096, 4096);
  cm_manager_t *m = mk(D, &p, 1);
  EXPECT_EQ(cm_manager_mode(m), CM_MODE_AUTO);
  cm_manager_set_mode(m, CM_MODE_PERSISTENT);
  cm_manager_set_mode(m, CM_MODE_PERSISTENT);
  cm_manager_set_mode(m, CM_MODE_AUTO);
  EXPECT_EQ(cm_manager_mode(m), CM_MODE_PERSISTENT);
  cm_handle_t a = RSV(m, 1024);
  EXPECT_EQ(loc_of(m, a).pool, P);
  EXPECT_EQ(report(m, P).usage.bytes_in_use, 1024);
  EXPECT_EQ(report(m, 0).pages_peak, 0);
  cm_manager_set_mode(m, CM_MODE_AUTO);
  EXPECT_EQ(cm_manager_mode(m), CM_MODE_AUTO);
  cm_handle_t b = RSV(m, 1024);
  EXPECT_EQ(loc_of(m, b).pool, 0);
  EXPECT_EQ(report(m, 0).pages_peak, 1);
  /* An unbalanced Auto is a no-op (saturates at 0). */
  cm_manager_set_mode(m, CM_MODE_AUTO);
  cm_manager_set_mode(m, CM_MODE_PERSISTENT);
  EXPECT_EQ(cm_manager_mode(m), CM_MODE_PERSISTENT);
  cm_manager_set_mode(m, CM_MODE_AUTO);
  EXPECT_EQ(cm_manager_mode(m), CM_MODE_AUTO);
  drop(&a);
  drop(&b);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* T52 (M): exact-size reuse; a different effective size makes a new slice. */
static void t52_exact_size_reuse(void) {
  cm_manager_t *m = mk_preset(D, CM_PRESET_SUBSLICES);
  cm_manager_set_mode(m, CM_MODE_PERSISTENT);
  cm_handle_t a = RSV(m, 1024);
  drop(&a);
  a = RSV(m, 1024);
  EXPECT_EQ(ppages(m), 1);
  cm_handle_t b = RSV(m, 1025);
  EXPECT_EQ(ppages(m), 2);
  EXPECT_POOL_USAGE(m, P, 2, 2049, 31, 2080);
  cm_usage_t u = usage(m);
  EXPECT_EQ(u.bytes_reserved, 2080); /* the dynamic pools hold nothing */
  drop(&a);
  drop(&b);
  cm_manager_set_mode(m, CM_MODE_AUTO);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* T53 (R, through a manager; alignment 4): a live slice is not reused; a
 * freed one is. */
static void t53_live_slice_not_reused(void) {
  cm_device_props_t props = {128 * MiB, 4};
  cm_pool_options_t p = sliced(4096, 4096);
  cm_manager_t *m = mk(props, &p, 1);
  cm_manager_set_mode(m, CM_MODE_PERSISTENT);
  cm_handle_t a = RSV(m, 1025);
  EXPECT_EQ(ppages(m), 1);
  cm_handle_t b = RSV(m, 1025);
  EXPECT_EQ(ppages(m), 2);
  uint64_t ida = storage_of(m, a).id;
  drop(&a);
  cm_handle_t c = RSV(m, 1025);
  EXPECT_EQ(ppages(m), 2);
  EXPECT_EQ(storage_of(m, c).id, ida);
  EXPECT_POOL_USAGE(m, P, 2, 2050, 6, 2056);
  drop(&b);
  drop(&c);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* T54 (R, through a manager; alignment 4): buckets by effective size. */
static void t54_buckets(void) {
  cm_device_props_t props = {128 * MiB, 4};
  cm_pool_options_t p = sliced(4096, 4096);
  cm_manager_t *m = mk(props, &p, 1);
  cm_manager_set_mode(m, CM_MODE_PERSISTENT);
  cm_handle_t h1 = RSV(m, 1024);
  EXPECT_POOL_USAGE(m, P, 1, 1024, 0, 1024);
  cm_handle_t h2 = RSV(m, 1024); /* h1 is live: a second slice */
  EXPECT_POOL_USAGE(m, P, 2, 2048, 0, 2048);
  drop(&h1);
  EXPECT_POOL_USAGE(m, P, 1, 1024, 0, 2048);
  cm_handle_t h3 = RSV(m, 1025); /* effective 1028: the free 1024 slot does not serve it */
  EXPECT_EQ(ppages(m), 3);
  EXPECT_POOL_USAGE(m, P, 2, 2049, 3, 3076);
  drop(&h3);
  cm_handle_t h4 = RSV(m, 1024); /* reuses the free 1024 slot */
  EXPECT_EQ(ppages(m), 3);
  EXPECT_POOL_USAGE(m, P, 2, 2048, 0, 3076);
  drop(&h2);
  drop(&h4);
  EXPECT_POOL_USAGE(m, P, 0, 0, 0, 3076);
  cm_manager_cleanup(m, true);
  EXPECT_POOL_USAGE(m, P, 0, 0, 0, 0);
  EXPECT_EQ(ppages(m), 0);
  EXPECT_EQ(report(m, P).pages_peak, 3);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* T55 (M): enforced: mode() is ignored, everything is persistent, with no
 * size limit (256 MiB > max_page_size). Sim storage: no memory behind it. */
static void t55_enforced(void) {
  cm_manager_t *m = mk_full(sim(0, false), D, NULL, 0, CM_PRESET_SUBSLICES, CM_PERSISTENT_ENFORCED);
  EXPECT_EQ(cm_manager_mode(m), CM_MODE_PERSISTENT);
  cm_manager_set_mode(m, CM_MODE_AUTO);
  EXPECT_EQ(cm_manager_mode(m), CM_MODE_PERSISTENT);
  cm_handle_t a = RSV(m, 1024), b = RSV(m, 256 * MiB);
  EXPECT_EQ(loc_of(m, a).pool, P);
  EXPECT_EQ(loc_of(m, b).pool, P);
  EXPECT_USAGE(m, 2, 268436480, 0, 268436480);
  for (size_t i = 0; i < cm_manager_pool_count(m); i++) EXPECT_EQ(pages(m, i), 0);
  drop(&a);
  drop(&b);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* An auxiliary manager (initial_mode AUTO) under enforced stays Auto. */
static void t55b_enforced_auxiliary_stays_auto(void) {
  cm_storage_t *s = NULL;
  ASSERT_OK(cm_storage_host_create(0, &s));
  cm_manager_config_t cfg;
  cm_manager_config_init(&cfg);
  cfg.name = "Pinned CPU Memory";
  cfg.persistent_memory = CM_PERSISTENT_ENFORCED;
  cfg.initial_mode = CM_MODE_AUTO;
  cm_manager_t *m = NULL;
  ASSERT_OK(cm_manager_create(s, &cfg, &m, NULL));
  EXPECT_EQ(cm_manager_mode(m), CM_MODE_AUTO);
  cm_manager_set_mode(m, CM_MODE_PERSISTENT); /* ignored under enforced */
  EXPECT_EQ(cm_manager_mode(m), CM_MODE_AUTO);
  cm_handle_t h = RSV(m, 1024);
  EXPECT(loc_of(m, h).pool != P);
  EXPECT_STR(cm_manager_name(m), "Pinned CPU Memory");
  drop(&h);
  cm_manager_destroy(m);
}

/* T56 (M): disabled: mode(P) is ignored. */
static void t56_disabled(void) {
  cm_manager_t *m = mk_full(NULL, D, NULL, 0, CM_PRESET_SUBSLICES, CM_PERSISTENT_DISABLED);
  cm_manager_set_mode(m, CM_MODE_PERSISTENT);
  EXPECT_EQ(cm_manager_mode(m), CM_MODE_AUTO);
  cm_handle_t h = RSV(m, 1024);
  EXPECT_EQ(loc_of(m, h).pool, 1);
  EXPECT_EQ(ppages(m), 0);
  drop(&h);
  cm_manager_destroy(m);
}

/* T57 (M): size-match routes Auto allocations to persistent buckets that
 * exist. */
static void t57_size_match(void) {
  cm_pool_options_t p = sliced(4096, 4096);
  cm_manager_t *m = mk_full(NULL, D, &p, 1, CM_PRESET_DEFAULT, CM_PERSISTENT_SIZE_MATCH);
  /* 1. no bucket yet: dynamic */
  cm_handle_t act = RSV(m, 1024);
  EXPECT_EQ(loc_of(m, act).pool, 0);
  /* 2. a weight of 1024 in a window */
  cm_manager_set_mode(m, CM_MODE_PERSISTENT);
  cm_handle_t w = RSV(m, 1024);
  cm_manager_set_mode(m, CM_MODE_AUTO);
  EXPECT_EQ(loc_of(m, w).pool, P);
  /* 3. the bucket exists (busy): a new persistent slice */
  cm_handle_t x = RSV(m, 1024);
  EXPECT_EQ(loc_of(m, x).pool, P);
  EXPECT_EQ(report(m, P).usage.bytes_in_use, 2048);
  EXPECT_EQ(ppages(m), 2);
  /* 4. freed: reused */
  drop(&x);
  x = RSV(m, 1024);
  EXPECT_EQ(loc_of(m, x).pool, P);
  EXPECT_EQ(ppages(m), 2);
  /* 5. effective 2016 has no bucket: dynamic */
  cm_handle_t y = RSV(m, 2000);
  EXPECT_EQ(loc_of(m, y).pool, 0);
  /* A size of the same effective size (1000 -> 1024) matches too. */
  drop(&x);
  cm_handle_t z = RSV(m, 1000);
  EXPECT_EQ(loc_of(m, z).pool, P);
  EXPECT_EQ(ppages(m), 2);
  drop(&act);
  drop(&w);
  drop(&y);
  drop(&z);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* T58 (M): explicit cleanup compacts the persistent pool; a new dynamic
 * layout leaves persistent slices intact. */
static void t58_cleanup_and_install(void) {
  cm_manager_t *m = mk_preset(D, CM_PRESET_SUBSLICES);
  cm_manager_set_mode(m, CM_MODE_PERSISTENT);
  cm_handle_t a = RSV(m, 100), b = RSV(m, 200), c = RSV(m, 300);
  cm_manager_set_mode(m, CM_MODE_AUTO);
  cm_binding_t bb = cm_handle_into_binding(b);
  drop(&a);
  drop(&c);
  cm_manager_cleanup(m, true);
  EXPECT_EQ(ppages(m), 1);
  EXPECT_POOL_USAGE(m, P, 1, 200, 24, 224);
  cm_storage_handle_t sh;
  ASSERT_OK(cm_manager_get_storage(m, bb, &sh, NULL));
  EXPECT_EQ(sh.size, 200);
  cm_location_t loc;
  ASSERT_OK(cm_manager_find(m, bb, &loc, NULL));
  EXPECT_EQ(loc.pool, P);
  EXPECT_EQ(loc.slice, 0);

  cm_pool_options_t q = sliced(1 * MiB, 1 * MiB);
  ASSERT_OK(cm_manager_install_pools(m, &q, 1, NULL));
  cm_storage_handle_t sh2;
  ASSERT_OK(cm_manager_get_storage(m, bb, &sh2, NULL));
  EXPECT_EQ(sh2.id, sh.id);
  EXPECT_EQ(sh2.offset, sh.offset);
  EXPECT_EQ(sh2.size, 200);
  EXPECT_POOL_USAGE(m, P, 1, 200, 24, 224);
  cm_binding_release(bb);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* T59 ([REC]; [REF] gives (1,120,28,148)): reuse updates the padding, and
 * after an explicit cleanup the slot is still keyed under 128, so a later
 * 100-byte request reuses it. */
static void t59_reuse_updates_padding(void) {
  cm_manager_t *m = mk_preset(D, CM_PRESET_SUBSLICES);
  cm_manager_set_mode(m, CM_MODE_PERSISTENT);
  cm_handle_t a = RSV(m, 100);
  EXPECT_USAGE(m, 1, 100, 28, 128);
  drop(&a);
  a = RSV(m, 120);
  EXPECT_USAGE(m, 1, 120, 8, 128);
  EXPECT_EQ(ppages(m), 1);
  cm_manager_cleanup(m, true);
  EXPECT_USAGE(m, 1, 120, 8, 128);
  drop(&a);
  a = RSV(m, 100);
  EXPECT_EQ(ppages(m), 1);
  EXPECT_USAGE(m, 1, 100, 28, 128);
  drop(&a);
  cm_manager_set_mode(m, CM_MODE_AUTO);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* The persistent pool's report: kind/peaks, and zero-byte slices. */
static void persistent_report_and_zero(void) {
  cm_manager_t *m = mk_preset(D, CM_PRESET_SUBSLICES);
  cm_manager_set_mode(m, CM_MODE_PERSISTENT);
  cm_handle_t z = RSV(m, 0), a = RSV(m, 5000);
  EXPECT_EQ(loc_of(m, z).pool, P);
  cm_pool_report_t r = report(m, P);
  EXPECT_EQ(r.pages, 2);
  EXPECT_EQ(r.pages_peak, 2);
  EXPECT_EQ(r.pages_unmapped, 0);
  EXPECT_EQ(r.largest_alloc, 5000);
  EXPECT_EQ(r.usage.number_allocs, 2);
  EXPECT_EQ(r.usage.bytes_in_use, 5000);
  drop(&z);
  drop(&a);
  cm_manager_set_mode(m, CM_MODE_AUTO);
  cm_manager_cleanup(m, true);
  r = report(m, P);
  EXPECT_EQ(r.pages, 0);
  EXPECT_EQ(r.pages_peak, 2);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* Persistent storage errors go straight back (no fallback to dynamic). */
static void persistent_storage_error_no_fallback(void) {
  cm_manager_t *m =
      mk_full(sim(4096, true), D, NULL, 0, CM_PRESET_SUBSLICES, CM_PERSISTENT_ENABLED);
  cm_manager_set_mode(m, CM_MODE_PERSISTENT);
  cm_handle_t h = {0};
  cm_diag_t diag = {0};
  EXPECT_STATUS(cm_manager_reserve(m, 8192, &h, &diag), CM_EOOM);
  EXPECT(h.d == NULL);
  EXPECT_USAGE(m, 0, 0, 0, 0);
  cm_manager_set_mode(m, CM_MODE_AUTO);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

int main(void) {
  CM_RUN(t51_nested_windows);
  CM_RUN(t52_exact_size_reuse);
  CM_RUN(t53_live_slice_not_reused);
  CM_RUN(t54_buckets);
  CM_RUN(t55_enforced);
  CM_RUN(t55b_enforced_auxiliary_stays_auto);
  CM_RUN(t56_disabled);
  CM_RUN(t57_size_match);
  CM_RUN(t58_cleanup_and_install);
  CM_RUN(t59_reuse_updates_padding);
  CM_RUN(persistent_report_and_zero);
  CM_RUN(persistent_storage_error_no_fallback);
  return cm_test_finish();
}
