/*
 * test_sliced.c - sliced pages and sliced pools (spec §4.1, §4.2; scenarios
 * T06-T18 of §14), through the public manager API.
 *
 * Every scenario runs on a manager whose pool list is given directly
 * ("Custom[...]") over an immediate-free host storage. Placement is observed
 * through cm_manager_get_storage (storage id + byte offset), page counts
 * through the pool report, and u = (number_allocs, bytes_in_use,
 * bytes_padding, bytes_reserved) through cm_manager_usage.
 *
 * cubemem's sliced pool differs from the reference on purpose (spec §15.1):
 *  - slices fit and split on the EFFECTIVE size, so pages always tile
 *    exactly (T18 follows [REC]);
 *  - a slice is placed by best fit over the free ranges of all pages (lowest
 *    address on ties) and free neighbours are coalesced as soon as they are
 *    released, instead of the reference's lazy first-fit scan. T10 is
 *    rewritten accordingly (a 9 MiB request succeeds as soon as the 8 MiB
 *    neighbour is freed);
 *  - a sliced pool with a dealloc_period releases free pages after the period.
 * cm_manager_check() must report no violation after each scenario.
 * Exports: main (the test runner).
 */
#include <stdlib.h>
#include <string.h>

#include "cm_test.h"
#include "cubemem/memory.h"

#include "cm_scenario.h"

/* ---- helpers of this file ----------------------------------------------- */

static uint64_t off(cm_manager_t *m, cm_handle_t h) { return storage_of(m, h).offset; }


/* ---- T06-T09: basic carving ------------------------------------------------------ */

/* T06 (R): two 512-byte slices share one 2048-byte page. */
static void t06_two_slices_one_page(void) {
  cm_pool_options_t p = sliced(2048, 2048);
  cm_manager_t *m = mk(D, &p, 1);
  cm_handle_t a = RSV(m, 512), b = RSV(m, 512);
  EXPECT_USAGE(m, 2, 1024, 0, 2048);
  EXPECT_EQ(pages(m, 0), 1);
  cm_storage_handle_t sa = storage_of(m, a), sb = storage_of(m, b);
  EXPECT_EQ(sa.id, sb.id);
  EXPECT_EQ(sa.size, 512);
  EXPECT(sa.offset + 512 <= sb.offset || sb.offset + 512 <= sa.offset);
  EXPECT_HEALTHY(m);
  drop(&a);
  drop(&b);
  EXPECT_USAGE(m, 0, 0, 0, 2048);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* T07 (R): a freed whole-page slice is reused. */
static void t07_reuse_whole_page(void) {
  cm_pool_options_t p = sliced(512, 512);
  cm_manager_t *m = mk(D, &p, 1);
  cm_handle_t a = RSV(m, 512);
  drop(&a);
  a = RSV(m, 512);
  EXPECT_USAGE(m, 1, 512, 0, 512);
  EXPECT_EQ(pages(m, 0), 1);
  EXPECT_EQ(sstats(m).allocs, 1);
  drop(&a);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* T08 (R): two 768-byte slices cannot share a 1024-byte page. */
static void t08_second_page(void) {
  cm_pool_options_t p = sliced(1024, 1024);
  cm_manager_t *m = mk(D, &p, 1);
  cm_handle_t a = RSV(m, 768), b = RSV(m, 768);
  EXPECT_USAGE(m, 2, 1536, 0, 2048);
  EXPECT_EQ(pages(m, 0), 2);
  EXPECT_NE(storage_of(m, a).id, storage_of(m, b).id);
  cm_pool_report_t r = report(m, 0);
  EXPECT_EQ(r.pages_peak, 2);
  EXPECT_EQ(r.largest_alloc, 768);
  drop(&a);
  drop(&b);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* T09 (R): padding to the alignment (50): the second slice starts at 50. */
static void t09_padding(void) {
  cm_device_props_t props = {500, 50};
  cm_pool_options_t p = sliced(500, 500);
  cm_manager_t *m = mk(props, &p, 1);
  cm_handle_t a = RSV(m, 40), b = RSV(m, 40);
  EXPECT_USAGE(m, 2, 80, 20, 500);
  EXPECT_EQ(off(m, a), 0);
  EXPECT_EQ(off(m, b), 50);
  EXPECT_EQ(storage_of(m, b).size, 40);
  drop(&a);
  drop(&b);
  EXPECT_USAGE(m, 0, 0, 0, 500);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* ---- T10: a 32 MiB page driven step by step ----------------------------------------- */

/* T10 (R, adapted). The reference drives one page directly; here one capped
 * pool (cap = one page) stands for it, so "fails" is PoolCapacityExceeded.
 * Alignment 4; sizes in MiB. OUR pool coalesces free neighbours at once and
 * places by best fit, so step 4 differs from the reference: after the 8 MiB
 * slice is dropped, 9 MiB fits at once (the reference needs a coalesce
 * first). The final layout is the reference's: [F4, U9, U9, F10]. */
static void t10_page_walkthrough(void) {
  cm_device_props_t props = {128 * MiB, 4};
  cm_pool_options_t p = sliced_cap(32 * MiB, 32 * MiB, 32 * MiB);
  cm_manager_t *m = mk(props, &p, 1);

  /* 1. [U4, U15, U8, U4, F1] */
  cm_handle_t a4 = RSV(m, 4 * MiB), b15 = RSV(m, 15 * MiB), c8 = RSV(m, 8 * MiB),
              d4 = RSV(m, 4 * MiB);
  EXPECT_EQ(off(m, a4), 0);
  EXPECT_EQ(off(m, b15), 4 * MiB);
  EXPECT_EQ(off(m, c8), 19 * MiB);
  EXPECT_EQ(off(m, d4), 27 * MiB);
  EXPECT_USAGE(m, 4, 31 * MiB, 0, 32 * MiB);
  EXPECT_HEALTHY(m);

  /* 2. 8 MiB does not fit (1 MiB free) and the cap forbids a second page. */
  RSV_FAIL(m, 8 * MiB, CM_ECAPACITY);
  EXPECT_EQ(pages(m, 0), 1);

  /* 3. Drop the 15 MiB slice: 9 MiB takes offset 4 MiB. */
  drop(&b15);
  cm_handle_t e9 = RSV(m, 9 * MiB);
  EXPECT_EQ(off(m, e9), 4 * MiB);
  EXPECT_HEALTHY(m);

  /* 4. Another 9 MiB fails (6 + 1 MiB free). Drop the 8 MiB slice: its
   * range merges with the free 6 MiB at once, so 9 MiB now succeeds at
   * 13 MiB (the reference fails here until the page is coalesced). */
  RSV_FAIL(m, 9 * MiB, CM_ECAPACITY);
  drop(&c8);
  EXPECT_HEALTHY(m);
  cm_handle_t f9 = RSV(m, 9 * MiB);
  EXPECT_EQ(off(m, f9), 13 * MiB);

  /* 5. The last 4 MiB slice never moved: offset 27 MiB. */
  EXPECT_EQ(off(m, d4), 27 * MiB);
  EXPECT_USAGE(m, 4, 26 * MiB, 0, 32 * MiB);

  /* 6. Drop the first and last 4 MiB slices: [F4, U9, U9, F10]. The free
   * 10 MiB at 22 MiB is one range (5 + 4 + 1 merged): a 10 MiB request fits
   * there, and the 4 MiB hole at 0 takes exactly 4 MiB; then the page is full. */
  drop(&a4);
  drop(&d4);
  EXPECT_USAGE(m, 2, 18 * MiB, 0, 32 * MiB);
  EXPECT_HEALTHY(m);
  cm_handle_t g10 = RSV(m, 10 * MiB);
  EXPECT_EQ(off(m, g10), 22 * MiB);
  cm_handle_t h4 = RSV(m, 4 * MiB);
  EXPECT_EQ(off(m, h4), 0);
  RSV_FAIL(m, 1, CM_ECAPACITY);
  EXPECT_USAGE(m, 4, 32 * MiB, 0, 32 * MiB);
  EXPECT_EQ(pages(m, 0), 1);
  EXPECT_HEALTHY(m);

  drop(&e9);
  drop(&f9);
  drop(&g10);
  drop(&h4);
  EXPECT_USAGE(m, 0, 0, 0, 32 * MiB);
  /* Everything merged back into one free range: the whole page fits. */
  cm_handle_t all = RSV(m, 32 * MiB);
  EXPECT_EQ(off(m, all), 0);
  drop(&all);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* ---- T11-T13 ------------------------------------------------------------------------ */

/* T11 (M): same result as the reference's first fit: 64 bytes go to the
 * 96-byte hole at 0 (best fit too), 300 to the merged [320,1024). */
static void t11_hole_reuse_and_merge(void) {
  cm_pool_options_t p = sliced(1024, 1024);
  cm_manager_t *m = mk(D, &p, 1);
  cm_handle_t a = RSV(m, 96), b = RSV(m, 224), c = RSV(m, 320);
  EXPECT_EQ(off(m, a), 0);
  EXPECT_EQ(off(m, b), 96);
  EXPECT_EQ(off(m, c), 320);
  EXPECT_USAGE(m, 3, 640, 0, 1024);
  drop(&a);
  drop(&c);
  cm_handle_t d = RSV(m, 64);
  EXPECT_EQ(off(m, d), 0);
  cm_handle_t e = RSV(m, 300);
  EXPECT_EQ(off(m, e), 320);
  EXPECT_USAGE(m, 3, 588, 20, 1024);
  EXPECT_EQ(pages(m, 0), 1);
  EXPECT_HEALTHY(m);
  drop(&b);
  drop(&d);
  drop(&e);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* T12 (R): a small freed slice does not prevent a larger one in the page. */
static void t12_small_then_large(void) {
  cm_pool_options_t p = sliced(1 * MiB, 1 * MiB);
  cm_manager_t *m = mk(D, &p, 1);
  cm_handle_t a = RSV(m, 4 * KiB);
  drop(&a);
  a = RSV(m, 512 * KiB);
  EXPECT_EQ(pages(m, 0), 1);
  EXPECT_USAGE(m, 1, 524288, 0, 1048576);
  drop(&a);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* T13 (R): four pools, page = max slice; one allocation lands in each. */
static void t13_one_per_pool(void) {
  cm_device_props_t props = {128 * MiB, 10};
  cm_pool_options_t p[4] = {sliced(100, 100), sliced(200, 200), sliced(300, 300), sliced(400, 400)};
  cm_manager_t *m = mk(props, p, 4);
  cm_handle_t h[4];
  uint64_t sizes[4] = {50, 150, 250, 350};
  for (int i = 0; i < 4; i++) h[i] = RSV(m, sizes[i]);
  for (int i = 0; i < 4; i++) {
    EXPECT_EQ(loc_of(m, h[i]).pool, i);
    EXPECT_EQ(pages(m, (size_t)i), 1);
  }
  cm_usage_t u = usage(m);
  EXPECT_EQ(u.bytes_in_use, 800);
  EXPECT_EQ(u.bytes_reserved, 1000);
  EXPECT_EQ(u.number_allocs, 4);
  for (int i = 0; i < 4; i++) drop(&h[i]);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* ---- T14-T15: accept rules ------------------------------------------------------------- */

/* T14 (M): max slice 64 KiB, plus the near-page rule ((page - size)*5 < page)
 * for an uncapped pool. */
static void t14_near_page_rule(void) {
  cm_pool_options_t p = sliced(1 * MiB, 64 * KiB);
  cm_manager_t *m = mk(D, &p, 1);
  cm_handle_t a = RSV(m, 921600);
  EXPECT_EQ(pages(m, 0), 1);
  cm_handle_t b = RSV(m, 838861);
  RSV_FAIL(m, 838860, CM_ETOOBIG);
  cm_handle_t c = RSV(m, 65536);
  RSV_FAIL(m, 65537, CM_ETOOBIG);
  /* 65536 fits in page 0's remaining 126976 bytes (best fit). */
  EXPECT_EQ(loc_of(m, c).page, 0);
  EXPECT_EQ(pages(m, 0), 2);
  EXPECT_USAGE(m, 3, 921600 + 838861 + 65536, 0 + 19 + 0, 2 * MiB);
  drop(&a);
  drop(&b);
  drop(&c);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* T15 (R): capped pools skip the near-page rule, so 1 MiB requests go to the
 * second pool; a small one then opens a page in the first. The list goes
 * through cm_pools_resolve (programmatic path). */
static void t15_capped_skips_near_page(void) {
  cm_pool_options_t in[2];
  in[0] = sliced_cap(1 * MiB, 64 * KiB, 2 * MiB);
  memset(&in[1], 0, sizeof in[1]);
  in[1].kind = CM_POOL_SLICED;
  in[1].page_size = 16 * MiB;
  in[1].max_pool_size = 32 * MiB;
  in[1].has_max_pool_size = true;
  cm_pool_options_t out[2];
  cm_diag_t diag = {0};
  ASSERT_OK(cm_pools_resolve(in, 2, D, out, &diag));
  EXPECT_EQ(out[1].max_slice_size, 16 * MiB);
  cm_manager_t *m = mk(D, out, 2);
  cm_handle_t h[5];
  for (int i = 0; i < 4; i++) {
    h[i] = RSV(m, 1 * MiB);
    EXPECT_EQ(loc_of(m, h[i]).pool, 1);
  }
  EXPECT_EQ(usage(m).bytes_reserved, 16 * MiB);
  EXPECT_EQ(pages(m, 0), 0);
  h[4] = RSV(m, 4096);
  EXPECT_EQ(loc_of(m, h[4]).pool, 0);
  EXPECT_EQ(usage(m).bytes_reserved, 17 * MiB);
  for (int i = 0; i < 5; i++) drop(&h[i]);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* ---- T16-T18: page choice, cleanup, tiling ------------------------------------------- */

/* T16 (M): 200 bytes fit in page 0's remaining 256; best fit ties between
 * the two pages' equal holes go to the lower page. */
static void t16_lower_page_first(void) {
  cm_pool_options_t p = sliced(1024, 1024);
  cm_manager_t *m = mk(D, &p, 1);
  cm_handle_t a = RSV(m, 768), b = RSV(m, 768), c = RSV(m, 200);
  EXPECT_EQ(pages(m, 0), 2);
  EXPECT_EQ(loc_of(m, a).page, 0);
  EXPECT_EQ(loc_of(m, b).page, 1);
  EXPECT_EQ(loc_of(m, c).page, 0);
  EXPECT_EQ(storage_of(m, c).id, storage_of(m, a).id);
  EXPECT_EQ(off(m, c), 768);
  drop(&a);
  drop(&b);
  drop(&c);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* T17 (M): explicit cleanup releases free pages and renumbers survivors. */
static void t17_cleanup_compacts(void) {
  cm_pool_options_t p = sliced(1024, 1024);
  cm_manager_t *m = mk(D, &p, 1);
  cm_handle_t a = RSV(m, 1024), b = RSV(m, 1024), c = RSV(m, 512);
  EXPECT_EQ(loc_of(m, b).page, 1);
  EXPECT_EQ(loc_of(m, c).page, 2);
  drop(&a);
  drop(&c);
  /* A periodic cleanup releases nothing from a pool without a period. */
  cm_manager_cleanup(m, false);
  EXPECT_EQ(pages(m, 0), 3);
  cm_manager_cleanup(m, true);
  EXPECT_EQ(pages(m, 0), 1);
  EXPECT_EQ(loc_of(m, b).page, 0);
  cm_storage_handle_t sh = storage_of(m, b);
  EXPECT_EQ(sh.size, 1024);
  EXPECT_USAGE(m, 1, 1024, 0, 1024);
  cm_storage_stats_t st = sstats(m);
  EXPECT_EQ(st.bytes_held, 1024);
  EXPECT_EQ(st.deallocs, 2);
  EXPECT_EQ(report(m, 0).pages_peak, 3);
  EXPECT_HEALTHY(m);
  drop(&b);
  cm_manager_destroy(m);
}

/* T18 ([REC], not the reference's quirk): fit on the effective size, so the
 * page tiles exactly: bytes_reserved stays 1024, the emptied page is
 * released by cleanup, and reserve(1024) needs no second page. */
static void t18_effective_size_tiling(void) {
  cm_pool_options_t p = sliced(1024, 1024);
  cm_manager_t *m = mk(D, &p, 1);
  cm_handle_t a = RSV(m, 100), b = RSV(m, 896);
  EXPECT_EQ(off(m, b), 128);
  drop(&a);
  cm_handle_t c = RSV(m, 32);
  EXPECT_EQ(off(m, c), 0);
  EXPECT_USAGE(m, 2, 928, 0, 1024); /* [REF] would report 996 reserved */
  EXPECT_HEALTHY(m);
  drop(&b);
  drop(&c);
  EXPECT_USAGE(m, 0, 0, 0, 1024);
  cm_manager_cleanup(m, true);
  EXPECT_USAGE(m, 0, 0, 0, 0); /* [REF]: the page survives with 996 */
  EXPECT_EQ(pages(m, 0), 0);
  cm_handle_t d = RSV(m, 1024);
  EXPECT_EQ(pages(m, 0), 1);
  EXPECT_USAGE(m, 1, 1024, 0, 1024);
  drop(&d);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* T18b ([REC], spec §4.1 quirk (c)): a slot freed from 100 bytes (effective
 * 128) hosts a 110-byte request (effective 128) in place. */
static void t18b_slot_reuse_same_effective_size(void) {
  cm_pool_options_t p = sliced(1024, 1024);
  cm_manager_t *m = mk(D, &p, 1);
  cm_handle_t a = RSV(m, 100), b = RSV(m, 896);
  drop(&a);
  cm_handle_t c = RSV(m, 110);
  EXPECT_EQ(off(m, c), 0);
  EXPECT_EQ(pages(m, 0), 1);
  EXPECT_USAGE(m, 2, 1006, 18, 1024);
  drop(&b);
  drop(&c);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* ---- cubemem's own placement rules --------------------------------------------------- */

/* Best fit: the smallest free range that fits wins, not the first one. */
static void sliced_best_fit(void) {
  cm_pool_options_t p = sliced(1024, 1024);
  cm_manager_t *m = mk(D, &p, 1);
  cm_handle_t a = RSV(m, 256), b = RSV(m, 64), c = RSV(m, 128), d = RSV(m, 64);
  EXPECT_EQ(off(m, a), 0);
  EXPECT_EQ(off(m, c), 320);
  EXPECT_EQ(off(m, d), 448);
  drop(&a); /* free [0,256) */
  drop(&c); /* free [320,448) */
  /* free: [0,256) 256, [320,448) 128, [512,1024) 512 */
  cm_handle_t e = RSV(m, 100); /* best fit: the 128-byte hole */
  EXPECT_EQ(off(m, e), 320);
  cm_handle_t f = RSV(m, 200); /* best fit: the 256-byte hole */
  EXPECT_EQ(off(m, f), 0);
  cm_handle_t g = RSV(m, 500); /* only the tail fits */
  EXPECT_EQ(off(m, g), 512);
  EXPECT_EQ(pages(m, 0), 1);
  EXPECT_HEALTHY(m);
  drop(&b);
  drop(&d);
  drop(&e);
  drop(&f);
  drop(&g);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* Ties between equal free ranges go to the lowest address. */
static void sliced_best_fit_ties_lowest_address(void) {
  cm_pool_options_t p = sliced(1024, 1024);
  cm_manager_t *m = mk(D, &p, 1);
  cm_handle_t h[8];
  for (int i = 0; i < 8; i++) h[i] = RSV(m, 128);
  drop(&h[5]);
  drop(&h[1]);
  drop(&h[3]);
  cm_handle_t x = RSV(m, 128);
  EXPECT_EQ(off(m, x), 128);
  cm_handle_t y = RSV(m, 64);
  EXPECT_EQ(off(m, y), 384);
  drop(&x);
  drop(&y);
  for (int i = 0; i < 8; i++) cm_handle_release(h[i]);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* Immediate coalescing: two freed neighbours serve a request of their sum
 * without a cleanup and without a new page. */
static void sliced_immediate_coalesce(void) {
  cm_pool_options_t p = sliced(1024, 1024);
  cm_manager_t *m = mk(D, &p, 1);
  cm_handle_t h[4];
  for (int i = 0; i < 4; i++) h[i] = RSV(m, 256);
  drop(&h[1]);
  drop(&h[2]);
  cm_handle_t big = RSV(m, 512);
  EXPECT_EQ(off(m, big), 256);
  EXPECT_EQ(pages(m, 0), 1);
  EXPECT_HEALTHY(m);
  drop(&big);
  drop(&h[0]);
  drop(&h[3]);
  cm_handle_t whole = RSV(m, 1024);
  EXPECT_EQ(off(m, whole), 0);
  EXPECT_EQ(pages(m, 0), 1);
  drop(&whole);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* A page is released by cleanup only when it is entirely free; a page with a
 * live slice survives it. */
static void sliced_cleanup_keeps_used_pages(void) {
  cm_pool_options_t p = sliced(1024, 1024);
  cm_manager_t *m = mk(D, &p, 1);
  cm_handle_t a = RSV(m, 32), b = RSV(m, 992);
  drop(&b);
  cm_manager_cleanup(m, true);
  EXPECT_EQ(pages(m, 0), 1);
  EXPECT_USAGE(m, 1, 32, 0, 1024);
  drop(&a);
  cm_manager_cleanup(m, true);
  EXPECT_EQ(pages(m, 0), 0);
  EXPECT_USAGE(m, 0, 0, 0, 0);
  EXPECT_EQ(sstats(m).bytes_held, 0);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* cubemem honours dealloc_period on sliced pools (spec §15.1 item 7; the
 * reference ignores it): a freed page is released by the periodic checks
 * once the period has passed. The pool without a period keeps its page. The
 * exact release tick follows the exclusive pool's counting; this test only
 * asserts the outcome after ten periods of reservations. */
static void sliced_dealloc_period(void) {
  for (int with_period = 0; with_period < 2; with_period++) {
    cm_pool_options_t p[2];
    p[0] = sliced(1024, 1024);
    if (with_period) {
      p[0].dealloc_period = 10;
      p[0].has_dealloc_period = true;
    }
    p[1] = direct();
    cm_manager_t *m = mk(D, p, 2);
    cm_handle_t a = RSV(m, 1024);
    drop(&a);
    for (int i = 0; i < 100; i++) {
      cm_handle_t x = RSV(m, 4096); /* served by the direct pool, exact reuse */
      EXPECT_EQ(loc_of(m, x).pool, 1);
      drop(&x);
    }
    EXPECT_EQ(pages(m, 0), with_period ? 0u : 1u);
    EXPECT_EQ(pages(m, 1), 1);
    EXPECT_HEALTHY(m);
    cm_manager_destroy(m);
  }
}

/* A live slice is never released by periodic checks of a sliced pool. */
static void sliced_dealloc_period_keeps_live(void) {
  cm_pool_options_t p[2];
  p[0] = sliced(1024, 1024);
  p[0].dealloc_period = 5;
  p[0].has_dealloc_period = true;
  p[1] = direct();
  cm_manager_t *m = mk(D, p, 2);
  cm_handle_t a = RSV(m, 512);
  for (int i = 0; i < 50; i++) {
    cm_handle_t x = RSV(m, 4096);
    drop(&x);
  }
  EXPECT_EQ(pages(m, 0), 1);
  EXPECT_EQ(storage_of(m, a).size, 512);
  EXPECT_POOL_USAGE(m, 0, 1, 512, 0, 1024);
  drop(&a);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* The report carries the effective options and the high-water marks. */
static void sliced_report(void) {
  cm_pool_options_t p = sliced(4096, 1024);
  cm_manager_t *m = mk(D, &p, 1);
  cm_handle_t a = RSV(m, 1000), b = RSV(m, 3500); /* 3500: near-page rule */
  cm_pool_report_t r = report(m, 0);
  EXPECT_EQ(r.options.kind, CM_POOL_SLICED);
  EXPECT_EQ(r.options.page_size, 4096);
  EXPECT_EQ(r.options.max_slice_size, 1024);
  EXPECT(!r.options.has_max_pool_size);
  EXPECT_EQ(r.pages, 2);
  EXPECT_EQ(r.pages_peak, 2);
  EXPECT_EQ(r.pages_unmapped, 0);
  EXPECT_EQ(r.largest_alloc, 3500);
  EXPECT_EQ(r.usage.bytes_reserved, 8192);
  drop(&a);
  drop(&b);
  cm_manager_cleanup(m, true);
  r = report(m, 0);
  EXPECT_EQ(r.pages, 0);
  EXPECT_EQ(r.pages_peak, 2);
  EXPECT_EQ(r.largest_alloc, 3500);
  EXPECT_GE(cm_manager_reserved_peak(m), 8192);
  cm_manager_destroy(m);
}

int main(void) {
  CM_RUN(t06_two_slices_one_page);
  CM_RUN(t07_reuse_whole_page);
  CM_RUN(t08_second_page);
  CM_RUN(t09_padding);
  CM_RUN(t10_page_walkthrough);
  CM_RUN(t11_hole_reuse_and_merge);
  CM_RUN(t12_small_then_large);
  CM_RUN(t13_one_per_pool);
  CM_RUN(t14_near_page_rule);
  CM_RUN(t15_capped_skips_near_page);
  CM_RUN(t16_lower_page_first);
  CM_RUN(t17_cleanup_compacts);
  CM_RUN(t18_effective_size_tiling);
  CM_RUN(t18b_slot_reuse_same_effective_size);
  CM_RUN(sliced_best_fit);
  CM_RUN(sliced_best_fit_ties_lowest_address);
  CM_RUN(sliced_immediate_coalesce);
  CM_RUN(sliced_cleanup_keeps_used_pages);
  CM_RUN(sliced_dealloc_period);
  CM_RUN(sliced_dealloc_period_keeps_live);
  CM_RUN(sliced_report);
  return cm_test_finish();
}
