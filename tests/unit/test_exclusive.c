/*
 * test_exclusive.c - the Exclusive pool (spec §4.3; scenarios T37-T45 of
 * §14), through the public manager API.
 *
 * An exclusive page holds one slice. cubemem applies the [REC] fixes of spec
 * §15.1 item 5 and 6, so several numbers differ from the reference on
 * purpose:
 *  - pages are exact-size: a new page is round_up(size, alignment) bytes; the
 *    running average no longer inflates it (T37-T40, T42, T45 numbers);
 *  - a free page is chosen by best fit on its size (smallest fitting page,
 *    earliest on ties), not by the lowest free_count (T40);
 *  - the periodic release check skips free pages that would serve the
 *    request being made, so a page is not released and re-allocated for the
 *    same request (T41: 1 allocation, 0 deallocations).
 * Storage traffic is observed through the storage wrapper's counters.
 * Exports: main (the test runner).
 */
#include <stdlib.h>
#include <string.h>

#include "cm_test.h"
#include "cubemem/memory.h"

#include "cm_scenario.h"

/* T37 (R, exact-size): page = round_up(100, 32) = 128 ([REF] 256). Reuse
 * gives the same usage. */

static void t37_exact_page(void) {
  cm_pool_options_t p = exclusive(512);
  cm_manager_t *m = mk(D, &p, 1);
  cm_handle_t h = RSV(m, 100);
  EXPECT_USAGE(m, 1, 100, 28, 128);
  drop(&h);
  EXPECT_USAGE(m, 0, 0, 0, 128);
  h = RSV(m, 100);
  EXPECT_USAGE(m, 1, 100, 28, 128);
  EXPECT_EQ(pages(m, 0), 1);
  EXPECT_EQ(sstats(m).allocs, 1);
  cm_pool_report_t r = report(m, 0);
  EXPECT_EQ(r.options.kind, CM_POOL_EXCLUSIVE);
  EXPECT_EQ(r.options.max_alloc_size, 512);
  EXPECT_EQ(r.pages_unmapped, 0);
  EXPECT_EQ(r.largest_alloc, 100);
  drop(&h);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* T38 (R, exact-size): alignment 50, two 40-byte requests: padding 20,
 * reserved 2 x 50 = 100 ([REF] 1000, two pages of the 500-byte average). */
static void t38_alignment_50(void) {
  cm_device_props_t props = {128 * MiB, 50};
  cm_pool_options_t p = exclusive(1000);
  cm_manager_t *m = mk(props, &p, 1);
  cm_handle_t a = RSV(m, 40), b = RSV(m, 40);
  EXPECT_USAGE(m, 2, 80, 20, 100);
  EXPECT_EQ(pages(m, 0), 2);
  EXPECT_NE(storage_of(m, a).id, storage_of(m, b).id);
  drop(&a);
  drop(&b);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* T39 (M, exact-size): ExclusivePages buckets; bucket 0 page for 100 bytes
 * is 128 ([REF] 16224), bucket 1 page for 40000 is 40000. */
static void t39_exclusive_pages_buckets(void) {
  cm_manager_t *m = mk_preset(D, CM_PRESET_EXCLUSIVE_PAGES);
  EXPECT_EQ(cm_manager_pool_count(m), 24);
  cm_handle_t a = RSV(m, 100), b = RSV(m, 40000);
  EXPECT_EQ(loc_of(m, a).pool, 0);
  EXPECT_EQ(loc_of(m, b).pool, 1);
  EXPECT_EQ(report(m, 1).options.max_alloc_size, 47072);
  EXPECT_POOL_USAGE(m, 0, 1, 100, 28, 128);
  EXPECT_POOL_USAGE(m, 1, 1, 40000, 0, 40000);
  EXPECT_USAGE(m, 2, 40100, 28, 40128);
  drop(&a);
  drop(&b);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* T40 (M, [REC] best fit + exact-size): A = 4096 gets a 4096 page, B = 100 a
 * 128 page. After both are freed, C = 100 takes the 128 page (best fit; the
 * reference takes the 4096 page by free_count), so reserve(3000) reuses the
 * 4096 page: no new page ([REF] allocates a 3008-byte third page). */
static void t40_best_fit_by_size(void) {
  cm_pool_options_t p = exclusive(4096);
  cm_manager_t *m = mk(D, &p, 1);
  cm_handle_t a = RSV(m, 4096), b = RSV(m, 100);
  EXPECT_USAGE(m, 2, 4196, 28, 4096 + 128);
  uint64_t id_a = storage_of(m, a).id, id_b = storage_of(m, b).id;
  drop(&a);
  drop(&b);
  cm_handle_t c = RSV(m, 100);
  EXPECT_EQ(storage_of(m, c).id, id_b);
  cm_handle_t d = RSV(m, 3000);
  EXPECT_EQ(storage_of(m, d).id, id_a);
  EXPECT_EQ(pages(m, 0), 2);
  EXPECT_EQ(sstats(m).allocs, 2);
  EXPECT_USAGE(m, 2, 3100, 28 + 8, 4096 + 128);
  drop(&c);
  drop(&d);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* Best fit among several free pages: the smallest page that fits wins. */
static void exclusive_best_fit_smallest(void) {
  cm_pool_options_t p = exclusive(8192);
  cm_manager_t *m = mk(D, &p, 1);
  cm_handle_t h8 = RSV(m, 8192), h2 = RSV(m, 2048), h4 = RSV(m, 4096);
  uint64_t i8 = storage_of(m, h8).id, i2 = storage_of(m, h2).id, i4 = storage_of(m, h4).id;
  drop(&h8);
  drop(&h2);
  drop(&h4);
  cm_handle_t x = RSV(m, 3000); /* 4096 is the smallest page >= 3000 */
  EXPECT_EQ(storage_of(m, x).id, i4);
  cm_handle_t y = RSV(m, 100); /* 2048 */
  EXPECT_EQ(storage_of(m, y).id, i2);
  cm_handle_t z = RSV(m, 5000); /* 8192 */
  EXPECT_EQ(storage_of(m, z).id, i8);
  cm_handle_t w = RSV(m, 64); /* nothing free: a new exact page */
  EXPECT_EQ(pages(m, 0), 4);
  EXPECT_EQ(usage(m).bytes_reserved, 8192 + 2048 + 4096 + 64);
  drop(&x);
  drop(&y);
  drop(&z);
  drop(&w);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* T41 (M, [REC] §15.1 item 6): with period 5 (a check every reservation),
 * the freed page would be released at the next check, but it fits the
 * request being served, so it is reused: 1 allocation, 0 deallocations
 * ([REF]: 2 allocations, 1 deallocation). */
static void t41_check_skips_page_that_fits(void) {
  cm_pool_options_t p = exclusive_p(4096, 5);
  cm_manager_t *m = mk(D, &p, 1);
  cm_handle_t h = RSV(m, 1024);
  drop(&h);
  h = RSV(m, 1024);
  cm_storage_stats_t st = sstats(m);
  EXPECT_EQ(st.allocs, 1);
  EXPECT_EQ(st.deallocs, 0);
  EXPECT_EQ(pages(m, 0), 1);
  drop(&h);

  /* Requests the 1024 page cannot serve leave it to the periodic checks:
   * within a few checks it is released. */
  for (int i = 0; i < 10; i++) {
    cm_handle_t x = RSV(m, 2048);
    drop(&x);
  }
  st = sstats(m);
  EXPECT_EQ(st.allocs, 2);
  EXPECT_EQ(st.deallocs, 1);
  EXPECT_EQ(pages(m, 0), 1);
  EXPECT_EQ(usage(m).bytes_reserved, 2048);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* T42 (M, exact-size tail): SubSlices/D. The 40 MiB tail page is exactly
 * 40 MiB ([REF] 66857216). With period 5000 the tail checks every 1000
 * reservations; the page freed at count 1 survives the 998 small rounds and
 * is released at the check of count 1000 (the 16-byte request routes to the
 * 8 MiB sliced pool, so the tail page is not serving it). */
static void t42_tail_period(void) {
  cm_manager_t *m = mk_preset(D, CM_PRESET_SUBSLICES);
  ASSERT_EQ(cm_manager_pool_count(m), 4);
  cm_handle_t big = RSV(m, 40 * MiB);
  EXPECT_EQ(loc_of(m, big).pool, 3);
  EXPECT_EQ(storage_of(m, big).size, 40 * MiB);
  EXPECT_POOL_USAGE(m, 3, 1, 40 * MiB, 0, 40 * MiB);
  drop(&big);
  for (int i = 0; i < 998; i++) { /* counts 2 .. 999 */
    cm_handle_t s = RSV(m, 16);
    drop(&s);
  }
  EXPECT_EQ(pages(m, 3), 1);
  EXPECT_EQ(usage(m).bytes_reserved, 40 * MiB + 8 * MiB);
  cm_handle_t s = RSV(m, 16); /* count 1000 */
  EXPECT_EQ(pages(m, 3), 0);
  EXPECT_EQ(usage(m).bytes_reserved, 8388608);
  drop(&s);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* T42 step 4 ([REC] §15.1 item 6): had the 1000th request been 40 MiB again,
 * the page that would serve it is kept and reused: no release followed by
 * a new allocation. */
static void t42b_tail_reused_at_check(void) {
  cm_manager_t *m = mk_preset(D, CM_PRESET_SUBSLICES);
  cm_handle_t big = RSV(m, 40 * MiB);
  drop(&big);
  for (int i = 0; i < 998; i++) {
    cm_handle_t s = RSV(m, 16);
    drop(&s);
  }
  cm_storage_stats_t before = sstats(m);
  big = RSV(m, 40 * MiB); /* count 1000 */
  cm_storage_stats_t after = sstats(m);
  EXPECT_EQ(after.allocs, before.allocs);
  EXPECT_EQ(after.deallocs, before.deallocs);
  EXPECT_EQ(pages(m, 3), 1);
  drop(&big);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* T43 (C): explicit cleanup releases every free page whatever its period. */
static void t43_explicit_cleanup_releases_all_free(void) {
  for (int with_period = 0; with_period < 2; with_period++) {
    cm_pool_options_t p = with_period ? exclusive_p(4096, 1000000) : exclusive(4096);
    cm_manager_t *m = mk(D, &p, 1);
    cm_handle_t a = RSV(m, 100), b = RSV(m, 200), c = RSV(m, 4096);
    drop(&a);
    drop(&c);
    cm_manager_cleanup(m, false);
    EXPECT_EQ(pages(m, 0), 3);
    cm_manager_cleanup(m, true);
    EXPECT_EQ(pages(m, 0), 1);
    EXPECT_USAGE(m, 1, 200, 24, 224);
    EXPECT_EQ(loc_of(m, b).page, 0);
    drop(&b);
    cm_manager_cleanup(m, true);
    EXPECT_EQ(pages(m, 0), 0);
    EXPECT_EQ(sstats(m).bytes_held, 0);
    EXPECT_HEALTHY(m);
    cm_manager_destroy(m);
  }
}

/* T44 (M): without a period, pages are released only by explicit cleanup,
 * however many reservations pass. */
static void t44_no_period_keeps_page(void) {
  cm_pool_options_t p[2] = {exclusive(1024), sliced(1 * MiB, 1 * MiB)};
  cm_manager_t *m = mk(D, p, 2);
  cm_handle_t h = RSV(m, 1024);
  EXPECT_EQ(loc_of(m, h).pool, 0);
  drop(&h);
  for (int i = 0; i < 20000; i++) {
    cm_handle_t x = RSV(m, 2048);
    drop(&x);
  }
  EXPECT_EQ(pages(m, 0), 1);
  EXPECT_EQ(pages(m, 1), 1);
  cm_manager_cleanup(m, true);
  EXPECT_EQ(pages(m, 0), 0);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* T45 (R+M, exact-size): reserve 1000..5000 in ExclusivePages bucket 0,
 * drop, reserve again: best fit hands each size its own page back, so u is
 * identical: (5, 15000, 72, 15072) ([REF] 79904 reserved). */
static void t45_reuse_identical(void) {
  cm_manager_t *m = mk_preset(D, CM_PRESET_EXCLUSIVE_PAGES);
  cm_handle_t h[5];
  uint64_t ids[5];
  for (int i = 0; i < 5; i++) {
    h[i] = RSV(m, 1000 * (uint64_t)(i + 1));
    EXPECT_EQ(loc_of(m, h[i]).pool, 0);
    ids[i] = storage_of(m, h[i]).id;
  }
  EXPECT_USAGE(m, 5, 15000, 72, 15072);
  for (int i = 0; i < 5; i++) drop(&h[i]);
  for (int i = 0; i < 5; i++) {
    h[i] = RSV(m, 1000 * (uint64_t)(i + 1));
    EXPECT_EQ(storage_of(m, h[i]).id, ids[i]);
  }
  EXPECT_USAGE(m, 5, 15000, 72, 15072);
  EXPECT_EQ(pages(m, 0), 5);
  for (int i = 0; i < 5; i++) drop(&h[i]);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* An exclusive pool with max 0 accepts only zero-byte requests. */
static void exclusive_zero_pool(void) {
  cm_pool_options_t p[2] = {exclusive(0), direct()};
  cm_manager_t *m = mk(D, p, 2);
  cm_handle_t z = RSV(m, 0), one = RSV(m, 1);
  EXPECT_EQ(loc_of(m, z).pool, 0);
  EXPECT_EQ(loc_of(m, one).pool, 1);
  EXPECT_POOL_USAGE(m, 0, 1, 0, 0, 0);
  drop(&z);
  drop(&one);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* A live page is never released by a periodic check. */
static void exclusive_live_page_survives_checks(void) {
  cm_pool_options_t p[2] = {exclusive_p(1024, 5), direct()};
  cm_manager_t *m = mk(D, p, 2);
  cm_handle_t h = RSV(m, 1000);
  for (int i = 0; i < 100; i++) {
    cm_handle_t x = RSV(m, 4096);
    drop(&x);
  }
  EXPECT_EQ(pages(m, 0), 1);
  EXPECT_EQ(storage_of(m, h).size, 1000);
  drop(&h);
  for (int i = 0; i < 100; i++) {
    cm_handle_t x = RSV(m, 4096);
    drop(&x);
  }
  EXPECT_EQ(pages(m, 0), 0);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

int main(void) {
  CM_RUN(t37_exact_page);
  CM_RUN(t38_alignment_50);
  CM_RUN(t39_exclusive_pages_buckets);
  CM_RUN(t40_best_fit_by_size);
  CM_RUN(exclusive_best_fit_smallest);
  CM_RUN(t41_check_skips_page_that_fits);
  CM_RUN(t42_tail_period);
  CM_RUN(t42b_tail_reused_at_check);
  CM_RUN(t43_explicit_cleanup_releases_all_free);
  CM_RUN(t44_no_period_keeps_page);
  CM_RUN(t45_reuse_identical);
  CM_RUN(exclusive_zero_pool);
  CM_RUN(exclusive_live_page_survives_checks);
  return cm_test_finish();
}
