/*
 * test_direct.c - the Direct pool (spec §4.4; scenarios T30-T36 of §14),
 * through the public manager API.
 *
 * A direct pool makes one storage allocation per slice of exactly the
 * effective size and reuses a free slice only for a request of the same
 * effective size. `reclaim_at` is a watermark: before growing, free slices
 * are released in index order until the new slice fits under it, but an
 * allocation is served even when it cannot. Explicit cleanup releases every
 * free slice. The "pages" of a direct pool's report are its live slices.
 *
 * cubemem stores the bind cursor in direct slices too ([REC], spec §15.1
 * item 4), so T36 expects 7 where the reference gives 0.
 * Exports: main (the test runner).
 */
#include <stdlib.h>
#include <string.h>

#include "cm_test.h"
#include "cubemem/memory.h"

#include "cm_scenario.h"

/* T30 (R): one slice of the effective size. */
static void t30_effective_size(void) {
  cm_pool_options_t p = direct();
  cm_manager_t *m = mk(D, &p, 1);
  cm_handle_t h = RSV(m, 716817);
  cm_usage_t u = usage(m);
  EXPECT_EQ(u.bytes_in_use, 716817);
  EXPECT_EQ(u.bytes_reserved, 716832);
  EXPECT_EQ(u.bytes_padding, 15);
  EXPECT_EQ(u.number_allocs, 1);
  EXPECT_EQ(sstats(m).bytes_held, 716832);
  EXPECT_EQ(storage_of(m, h).size, 716817);
  EXPECT_EQ(storage_of(m, h).offset, 0);
  cm_pool_report_t r = report(m, 0);
  EXPECT_EQ(r.options.kind, CM_POOL_DIRECT);
  EXPECT_EQ(r.pages, 1);
  EXPECT_EQ(r.largest_alloc, 716817);
  drop(&h);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* T31 (R): reserve/drop rounds of one size reuse one slice. */
static void t31_exact_reuse(void) {
  cm_pool_options_t p = direct_at(8 * MiB);
  cm_manager_t *m = mk(D, &p, 1);
  for (int i = 0; i < 4; i++) {
    cm_handle_t h = RSV(m, 300 * KiB);
    drop(&h);
  }
  cm_pool_report_t r = report(m, 0);
  EXPECT_EQ(r.pages_peak, 1);
  EXPECT_EQ(r.pages, 1);
  EXPECT_EQ(sstats(m).allocs, 1);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* T32 (M): a larger free slice is never used for a smaller request. */
static void t32_no_best_fit(void) {
  cm_pool_options_t p = direct();
  cm_manager_t *m = mk(D, &p, 1);
  cm_handle_t a = RSV(m, 2 * MiB);
  drop(&a);
  cm_handle_t b = RSV(m, 1 * MiB);
  EXPECT_EQ(pages(m, 0), 2);
  EXPECT_USAGE(m, 1, 1 * MiB, 0, 3 * MiB);
  /* Same effective size (1 MiB - 5 rounds up to 1 MiB) does reuse. */
  drop(&b);
  cm_handle_t c = RSV(m, 1 * MiB - 5);
  EXPECT_EQ(pages(m, 0), 2);
  EXPECT_USAGE(m, 1, 1 * MiB - 5, 5, 3 * MiB);
  drop(&c);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* T33 (R): reclaim_at releases free slices in index order until the new one
 * fits under the watermark. */
static void t33_reclaim_in_index_order(void) {
  cm_pool_options_t p = direct_at(7 * MiB);
  cm_manager_t *m = mk(D, &p, 1);
  for (uint64_t s = 1; s <= 3; s++) {
    cm_handle_t h = RSV(m, s * MiB);
    drop(&h);
  }
  EXPECT_EQ(pages(m, 0), 3);
  EXPECT_EQ(usage(m).bytes_reserved, 6 * MiB);
  cm_handle_t h = RSV(m, 4 * MiB);
  EXPECT_EQ(pages(m, 0), 2);
  EXPECT_EQ(usage(m).bytes_reserved, 7 * MiB);
  EXPECT_EQ(sstats(m).deallocs, 2);
  /* The survivor is the 3 MiB slice: a 3 MiB request reuses it. */
  cm_handle_t t = RSV(m, 3 * MiB);
  EXPECT_EQ(pages(m, 0), 2);
  EXPECT_EQ(sstats(m).allocs, 4);
  drop(&t);
  drop(&h);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* T34 (M): the watermark is not a budget. */
static void t34_watermark_not_budget(void) {
  cm_pool_options_t p = direct_at(1 * MiB);
  cm_manager_t *m = mk(D, &p, 1);
  cm_handle_t a = RSV(m, 2 * MiB), b = RSV(m, 2 * MiB);
  EXPECT_EQ(usage(m).bytes_reserved, 4 * MiB);
  EXPECT_EQ(pages(m, 0), 2);
  drop(&a);
  drop(&b);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* T35 (R): explicit cleanup releases every free slice; periodic does not. */
static void t35_cleanup_releases_free(void) {
  cm_pool_options_t p = direct_at(64 * MiB);
  cm_manager_t *m = mk(D, &p, 1);
  cm_handle_t a = RSV(m, 1 * MiB), b = RSV(m, 2 * MiB);
  drop(&b);
  cm_manager_cleanup(m, false);
  EXPECT_EQ(pages(m, 0), 2);
  cm_manager_cleanup(m, true);
  EXPECT_EQ(pages(m, 0), 1);
  EXPECT_USAGE(m, 1, 1 * MiB, 0, 1 * MiB);
  EXPECT_EQ(sstats(m).bytes_held, 1 * MiB);
  EXPECT_EQ(storage_of(m, a).size, 1 * MiB);
  drop(&a);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* T36 ([REC]; the reference returns 0): the direct pool stores the cursor. */
static void t36_bind_cursor_stored(void) {
  cm_pool_options_t p = direct();
  cm_manager_t *m = mk(D, &p, 1);
  cm_handle_t r = RSV(m, 1000);
  cm_handle_t a = {0};
  ASSERT_OK(cm_handle_new(&a));
  ASSERT_OK(cm_manager_bind(m, r, a, 7, NULL));
  cm_binding_t b = cm_handle_binding(a);
  uint64_t cursor = 0;
  EXPECT_OK(cm_manager_get_cursor(m, b, &cursor, NULL));
  EXPECT_EQ(cursor, 7);
  cm_location_t loc;
  EXPECT_OK(cm_manager_find(m, b, &loc, NULL));
  EXPECT_EQ(loc.pool, 0);
  cm_binding_release(b);
  cm_handle_release(a);
  EXPECT_USAGE(m, 0, 0, 0, 1024);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* Released slots become vacant and are reused (last-in-first-out) before any
 * new slot index is created; live slots keep their index. */
static void direct_vacant_slots_reused(void) {
  cm_pool_options_t p = direct();
  cm_manager_t *m = mk(D, &p, 1);
  cm_handle_t a = RSV(m, 64), b = RSV(m, 128), c = RSV(m, 256);
  EXPECT_EQ(loc_of(m, a).slice, 0);
  EXPECT_EQ(loc_of(m, b).slice, 1);
  EXPECT_EQ(loc_of(m, c).slice, 2);
  drop(&a);
  drop(&b);
  cm_manager_cleanup(m, true); /* slots 0 and 1 become vacant */
  EXPECT_EQ(pages(m, 0), 1);
  cm_handle_t d = RSV(m, 512);
  cm_handle_t e = RSV(m, 1024);
  /* LIFO over the vacant stack: whichever slot was pushed last goes first;
   * both are reused and no new index is created. */
  uint32_t sd = loc_of(m, d).slice, se = loc_of(m, e).slice;
  EXPECT(sd <= 1 && se <= 1 && sd != se);
  EXPECT_EQ(loc_of(m, c).slice, 2);
  drop(&c);
  drop(&d);
  drop(&e);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* A direct pool accepts anything the storage can give; zero bytes included. */
static void direct_zero_and_large(void) {
  cm_pool_options_t p = direct();
  cm_manager_t *m = mk_full(sim(0, false), D, &p, 1, CM_PRESET_DEFAULT, CM_PERSISTENT_ENABLED);
  cm_handle_t z = RSV(m, 0);
  cm_handle_t big = RSV(m, 64 * GiB + 1);
  EXPECT_USAGE(m, 2, 64 * GiB + 1, 31, 64 * GiB + 32);
  EXPECT_EQ(storage_of(m, z).size, 0);
  drop(&z);
  drop(&big);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

int main(void) {
  CM_RUN(t30_effective_size);
  CM_RUN(t31_exact_reuse);
  CM_RUN(t32_no_best_fit);
  CM_RUN(t33_reclaim_in_index_order);
  CM_RUN(t34_watermark_not_budget);
  CM_RUN(t35_cleanup_releases_free);
  CM_RUN(t36_bind_cursor_stored);
  CM_RUN(direct_vacant_slots_reused);
  CM_RUN(direct_zero_and_large);
  return cm_test_finish();
}
