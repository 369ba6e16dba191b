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

#include "cm_scenario.h"

/* ---- helpers of this file ----------------------------------------------- */

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
  EXPECT_EQ(r.options.kind, CM_POOL_PERSISTENT); /* its own kind, not "direct" */
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
