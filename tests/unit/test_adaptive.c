/*
 * test_adaptive.c - the Adaptive preset and its adaptive-pages pool
 * (memory.h, CM_PRESET_ADAPTIVE / CM_POOL_ADAPTIVE): the preset's pools and
 * routing, the first page size, growth (size + 1 MiB rounded to 1 MiB and
 * to the alignment, clamped), no shrinking, BufferTooBig above the largest
 * page, no growth on a refused page, outdated pools (serve nothing, give each
 * page back as it empties, dropped with the last page, release their empty
 * pages before the new pool allocates), persistent and dedicated
 * reservations leaving the page size alone, reports and displays, and the
 * invariant check (it must see a broken pool). Every scenario checks the
 * manager's invariants after each step. Exports: main (the test runner).
 */
#include <stdlib.h>
#include <string.h>

#include "cm_test.h"
#include "cubemem/memory.h"

#include "cm_scenario.h"
#include "core/manager_internal.h"

/* A device like the replay's default (80 GiB: max page 20 GiB, alignment
 * 512) and a small one whose largest page is 16 MiB. */
static const cm_device_props_t BIG = {20 * GiB, 512};
static const cm_device_props_t SMALL = {16 * MiB, 512};

/* The manager's invariants hold (the first violation's message if not). */
#define HEALTHY(m) healthy_((m), __LINE__)
static void healthy_(cm_manager_t *m, int line) {
  cm_diag_t d = {0};
  size_t bad = cm_manager_check(m, &d);
  if (bad) cm_test_fail(__FILE__, line, "%zu invariant violation(s): %s", bad, d.message);
}

#define ADAPTIVE_POOL 2 /* routing position of the adaptive pages in the preset */

/* An Adaptive-preset manager over an unbacked simulated device of
 * `capacity` bytes (0 = unlimited) that refuses what does not fit. */
static cm_manager_t *mk_adaptive(cm_device_props_t props, uint64_t capacity) {
  return mk_full(sim(capacity, true), props, NULL, 0, CM_PRESET_ADAPTIVE, CM_PERSISTENT_ENABLED);
}

static uint64_t page_size(cm_manager_t *m) { return report(m, ADAPTIVE_POOL).options.page_size; }
static uint64_t outdated_pools(cm_manager_t *m) { return report(m, ADAPTIVE_POOL).outdated_pools; }
static uint64_t outdated_pages(cm_manager_t *m) { return report(m, ADAPTIVE_POOL).outdated_pages; }

/* ---- the preset ---------------------------------------------------------------------- */

static void preset_pools(void) {
  cm_pool_options_t o[8];
  size_t n = 0;
  ASSERT_OK(cm_pools_preset(CM_PRESET_ADAPTIVE, BIG, o, 8, &n));
  ASSERT_EQ(n, 3);
  EXPECT_EQ(o[0].kind, CM_POOL_EXCLUSIVE);
  EXPECT_EQ(o[0].max_alloc_size, 0);
  EXPECT(!o[0].has_dealloc_period);
  EXPECT_EQ(o[1].kind, CM_POOL_SLICED);
  EXPECT_EQ(o[1].page_size, 8 * MiB);
  EXPECT_EQ(o[1].max_slice_size, 64 * KiB);
  EXPECT_EQ(o[1].max_alloc_size, 64 * KiB);
  EXPECT(!o[1].has_max_pool_size);
  EXPECT_EQ(o[2].kind, CM_POOL_ADAPTIVE);
  EXPECT_EQ(o[2].page_size, 2 * MiB);
  EXPECT_EQ(o[2].max_alloc_size, 20 * GiB);
  char buf[128];
  cm_pools_format(o, 3, buf, sizeof buf);
  EXPECT_STR(buf, "exclusive:max=0;sliced:page=8MiB,max-slice=64KiB,max=64KiB;"
                  "adaptive:page=2MiB,max=20GiB");
  /* sizes rounded up to the alignment; the floor capped by the largest page */
  cm_device_props_t odd = {1 * MiB + 100, 3000};
  ASSERT_OK(cm_pools_preset(CM_PRESET_ADAPTIVE, odd, o, 8, &n));
  EXPECT_EQ(o[1].page_size, 8 * MiB + 3000 - (8 * MiB) % 3000);
  EXPECT_EQ(o[1].max_slice_size, 66000);
  EXPECT_EQ(o[2].max_alloc_size, (1 * MiB + 100) / 3000 * 3000); /* whole alignments */
  EXPECT_EQ(o[2].page_size, o[2].max_alloc_size);
  /* the name parses to the same list, and an explicit adaptive pool formats
   * back to what parses */
  cm_pool_options_t p[8];
  size_t pn = 0;
  cm_diag_t d = {0};
  ASSERT_OK(cm_pools_parse("adaptive", BIG, p, 8, &pn, &d));
  ASSERT_EQ(pn, 3);
  EXPECT_EQ(p[2].kind, CM_POOL_ADAPTIVE);
  EXPECT_EQ(p[2].page_size, 2 * MiB);
  ASSERT_OK(cm_pools_parse("adaptive:page=3MiB,max=64MiB;direct", BIG, p, 8, &pn, &d));
  ASSERT_EQ(pn, 2);
  EXPECT_EQ(p[0].page_size, 3 * MiB);
  EXPECT_EQ(p[0].max_alloc_size, 64 * MiB);
  cm_pools_format(p, pn, buf, sizeof buf);
  EXPECT_STR(buf, "adaptive:page=3MiB,max=64MiB;direct");
  ASSERT_OK(cm_pools_parse("adaptive:page=1GiB,max=64MiB", BIG, p, 8, &pn, &d));
  EXPECT_EQ(p[0].page_size, 64 * MiB); /* the floor is capped by the largest page */
  /* an unknown kind names the adaptive one among the expected */
  EXPECT_STATUS(cm_pools_parse("adaptiv:page=2MiB", BIG, p, 8, &pn, &d), CM_EPARSE);
  EXPECT(strstr(d.message, "adaptive") != NULL);
}

static void routing(void) {
  cm_manager_t *m = mk_adaptive(BIG, 0);
  cm_handle_t h[6];
  h[0] = RSV(m, 0);
  h[1] = RSV(m, 1);
  h[2] = RSV(m, 64 * KiB);
  h[3] = RSV(m, 64 * KiB + 1);
  h[4] = RSV(m, 7 * MiB); /* near a metadata page: still the adaptive pool */
  h[5] = RSV(m, 8 * MiB);
  EXPECT_EQ(loc_of(m, h[0]).pool, 0);
  EXPECT_EQ(loc_of(m, h[1]).pool, 1);
  EXPECT_EQ(loc_of(m, h[2]).pool, 1);
  EXPECT_EQ(loc_of(m, h[3]).pool, ADAPTIVE_POOL);
  EXPECT_EQ(loc_of(m, h[4]).pool, ADAPTIVE_POOL);
  EXPECT_EQ(loc_of(m, h[5]).pool, ADAPTIVE_POOL);
  EXPECT_EQ(report(m, 1).pages, 1);
  HEALTHY(m);
  for (int i = 0; i < 6; i++) drop(&h[i]);
  HEALTHY(m);
  cm_manager_destroy(m);
}

/* ---- page size ------------------------------------------------------------------------- */

static void first_page_is_the_floor(void) {
  cm_manager_t *m = mk_adaptive(BIG, 0);
  EXPECT_EQ(page_size(m), 2 * MiB);
  EXPECT_EQ(report(m, ADAPTIVE_POOL).pages, 0);
  cm_handle_t a = RSV(m, 100 * KiB);
  cm_handle_t b = RSV(m, 2 * MiB - 100 * KiB); /* fills the page exactly */
  EXPECT_EQ(page_size(m), 2 * MiB);
  EXPECT_POOL_USAGE(m, ADAPTIVE_POOL, 2, 2 * MiB, 0, 2 * MiB);
  EXPECT_EQ(storage_of(m, a).id, storage_of(m, b).id);
  cm_handle_t c = RSV(m, 2 * MiB); /* fits a page (no padding): a new page, no growth */
  EXPECT_EQ(page_size(m), 2 * MiB);
  EXPECT_EQ(report(m, ADAPTIVE_POOL).pages, 2);
  EXPECT_EQ(outdated_pools(m), 0);
  HEALTHY(m);
  drop(&a);
  drop(&b);
  drop(&c);
  cm_manager_destroy(m);
}

static void growth_rule(void) {
  cm_manager_t *m = mk_adaptive(BIG, 0);
  cm_handle_t a = RSV(m, 2 * MiB + 1); /* padding makes it 2 MiB + 512: grows */
  EXPECT_EQ(page_size(m), 4 * MiB);    /* 3 MiB + 1 rounded up to 1 MiB */
  cm_handle_t b = RSV(m, 5 * MiB);
  EXPECT_EQ(page_size(m), 6 * MiB); /* exactly 6 MiB: already a whole MiB */
  cm_handle_t c = RSV(m, 6 * MiB);  /* fits: no growth */
  EXPECT_EQ(page_size(m), 6 * MiB);
  cm_handle_t d = RSV(m, 6 * MiB + 100);
  EXPECT_EQ(page_size(m), 8 * MiB);
  HEALTHY(m);
  drop(&a);
  drop(&b);
  drop(&c);
  drop(&d);
  cm_manager_cleanup(m, true);
  EXPECT_EQ(report(m, ADAPTIVE_POOL).pages, 0);
  cm_handle_t e = RSV(m, 1 * MiB); /* never shrinks, not even when empty */
  EXPECT_EQ(page_size(m), 8 * MiB);
  EXPECT_EQ(report(m, ADAPTIVE_POOL).usage.bytes_reserved, 8 * MiB);
  HEALTHY(m);
  drop(&e);
  cm_manager_destroy(m);
}

static void growth_rounds_to_the_alignment(void) {
  /* an alignment that does not divide 1 MiB: the page is a whole number of
   * alignments after rounding to 1 MiB */
  cm_device_props_t odd = {64 * MiB, 3 * MiB};
  cm_manager_t *m = mk_adaptive(odd, 0);
  EXPECT_EQ(page_size(m), 3 * MiB); /* 2 MiB rounded up to the alignment */
  cm_handle_t a = RSV(m, 4 * MiB);  /* 5 MiB -> 6 MiB */
  EXPECT_EQ(page_size(m), 6 * MiB);
  cm_handle_t b = RSV(m, 6 * MiB + 1); /* 7 MiB + 1 -> 8 MiB -> 9 MiB */
  EXPECT_EQ(page_size(m), 9 * MiB);
  HEALTHY(m);
  drop(&a);
  drop(&b);
  cm_manager_destroy(m);
}

static void clamped_and_too_big(void) {
  cm_manager_t *m = mk_adaptive(SMALL, 0);
  cm_handle_t a = RSV(m, 15 * MiB + 512); /* 16.5 MiB -> clamped to 16 MiB */
  EXPECT_EQ(page_size(m), 16 * MiB);
  cm_handle_t b = RSV(m, 16 * MiB);
  EXPECT_EQ(page_size(m), 16 * MiB);
  uint64_t reserved = usage(m).bytes_reserved;
  RSV_FAIL(m, 16 * MiB + 1, CM_ETOOBIG);
  RSV_FAIL(m, 1 * GiB, CM_ETOOBIG);
  EXPECT_EQ(page_size(m), 16 * MiB);
  EXPECT_EQ(usage(m).bytes_reserved, reserved);
  HEALTHY(m);
  drop(&a);
  drop(&b);
  cm_manager_destroy(m);
  /* a custom layout can send what is too big for the adaptive pages on */
  cm_pool_options_t two[2];
  size_t n = 0;
  cm_diag_t d = {0};
  ASSERT_OK(cm_pools_parse("adaptive:max=4MiB;direct", SMALL, two, 2, &n, &d));
  m = mk(SMALL, two, n);
  cm_handle_t c = RSV(m, 5 * MiB);
  EXPECT_EQ(loc_of(m, c).pool, 1);
  EXPECT_EQ(report(m, 0).options.page_size, 2 * MiB);
  HEALTHY(m);
  drop(&c);
  cm_manager_destroy(m);
}

static void refused_page_does_not_grow(void) {
  cm_manager_t *m = mk_adaptive(BIG, 10 * MiB);
  cm_handle_t small = RSV(m, 100 * KiB); /* a 2 MiB page */
  RSV_FAIL(m, 9 * MiB, CM_EOOM);         /* a 10 MiB page would not fit beside it */
  EXPECT_EQ(page_size(m), 2 * MiB);
  EXPECT_EQ(outdated_pools(m), 0);
  EXPECT_EQ(report(m, ADAPTIVE_POOL).pages, 1);
  EXPECT_EQ(loc_of(m, small).pool, ADAPTIVE_POOL);
  HEALTHY(m);
  cm_handle_t again = RSV(m, 1 * MiB); /* the pool still serves at its size */
  EXPECT_EQ(storage_of(m, again).id, storage_of(m, small).id);
  drop(&again);
  /* Once the small page is empty, growing gives it back before the new
   * page is allocated: the 10 MiB page then fits the device. */
  drop(&small);
  EXPECT_EQ(usage(m).bytes_reserved, 2 * MiB); /* the current pool keeps its empty page */
  cm_handle_t big = RSV(m, 9 * MiB);
  EXPECT_EQ(page_size(m), 10 * MiB);
  EXPECT_EQ(outdated_pools(m), 0); /* the old pool held no page: dropped */
  EXPECT_EQ(usage(m).bytes_reserved, 10 * MiB);
  HEALTHY(m);
  drop(&big);
  cm_manager_destroy(m);
}

/* ---- outdated pools ---------------------------------------------------------------------- */

static void outdated_serves_nothing_and_drains(void) {
  cm_manager_t *m = mk_adaptive(BIG, 0);
  cm_handle_t old1 = RSV(m, 100 * KiB);
  cm_handle_t old2 = RSV(m, 100 * KiB);
  uint64_t old_id = storage_of(m, old1).id;
  cm_storage_stats_t st0 = sstats(m);
  cm_handle_t grow = RSV(m, 3 * MiB); /* page 4 MiB; the 2 MiB pool is outdated */
  EXPECT_EQ(page_size(m), 4 * MiB);
  EXPECT_EQ(outdated_pools(m), 1);
  EXPECT_EQ(outdated_pages(m), 1);
  EXPECT_EQ(sstats(m).allocs, st0.allocs + 1);
  /* room on the outdated page (1.8 MiB) serves nothing new */
  cm_handle_t n1 = RSV(m, 500 * KiB);
  EXPECT(storage_of(m, n1).id != old_id);
  EXPECT_EQ(storage_of(m, n1).id, storage_of(m, grow).id);
  cm_handle_t n2 = RSV(m, 1 * MiB); /* no room on the current page: a new one */
  EXPECT(storage_of(m, n2).id != old_id);
  EXPECT_EQ(report(m, ADAPTIVE_POOL).pages, 3);
  EXPECT_EQ(usage(m).bytes_reserved, 2 * MiB + 4 * MiB + 4 * MiB);
  /* freeing part of the outdated page keeps it */
  drop(&old1);
  EXPECT_EQ(outdated_pages(m), 1);
  HEALTHY(m);
  /* its last allocation goes: the page goes back at once, without a
   * cleanup, and the pool with it */
  uint64_t frees = sstats(m).deallocs;
  drop(&old2);
  EXPECT_EQ(outdated_pools(m), 0);
  EXPECT_EQ(outdated_pages(m), 0);
  EXPECT_EQ(sstats(m).deallocs, frees + 1);
  EXPECT_EQ(usage(m).bytes_reserved, 4 * MiB + 4 * MiB);
  HEALTHY(m);
  /* pages of the current pool stay when they empty (no period) */
  drop(&n2);
  EXPECT_EQ(report(m, ADAPTIVE_POOL).pages, 2);
  drop(&grow);
  drop(&n1);
  HEALTHY(m);
  cm_manager_destroy(m);
}

static void several_generations(void) {
  cm_manager_t *m = mk_adaptive(BIG, 0);
  cm_handle_t g2a = RSV(m, 1 * MiB);     /* 2 MiB pages */
  cm_handle_t g2b = RSV(m, 1 * MiB + 1); /* second 2 MiB page */
  cm_handle_t g4 = RSV(m, 3 * MiB);      /* 4 MiB pages */
  cm_handle_t g8 = RSV(m, 7 * MiB);      /* 8 MiB pages */
  EXPECT_EQ(page_size(m), 8 * MiB);
  EXPECT_EQ(outdated_pools(m), 2);
  EXPECT_EQ(outdated_pages(m), 3);
  /* locations: the current pool's pages first, then the outdated ones */
  EXPECT_EQ(loc_of(m, g8).page, 0);
  EXPECT_EQ(loc_of(m, g4).page, 1);
  EXPECT(loc_of(m, g2a).page >= 2 && loc_of(m, g2b).page >= 2);
  EXPECT(loc_of(m, g2a).page != loc_of(m, g2b).page);
  char buf[4096];
  cm_manager_display(m, buf, sizeof buf);
  EXPECT(strstr(buf, "Adaptive Pool page_size=8388608") != NULL);
  EXPECT(strstr(buf, "outdated_pools=2 outdated_pages=3") != NULL);
  HEALTHY(m);
  drop(&g4); /* the 4 MiB pool empties first: dropped, the older one stays */
  EXPECT_EQ(outdated_pools(m), 1);
  EXPECT_EQ(outdated_pages(m), 2);
  drop(&g2a);
  EXPECT_EQ(outdated_pages(m), 1);
  EXPECT_EQ(loc_of(m, g2b).page, 1); /* renumbered */
  HEALTHY(m);
  drop(&g2b);
  EXPECT_EQ(outdated_pools(m), 0);
  EXPECT_EQ(usage(m).bytes_reserved, 8 * MiB);
  cm_pool_report_t r = report(m, ADAPTIVE_POOL);
  EXPECT_EQ(r.pages_peak, 4);
  EXPECT_EQ(r.bytes_reserved_peak, 2 * MiB + 2 * MiB + 4 * MiB + 8 * MiB);
  EXPECT_EQ(cm_manager_reserved_peak(m), r.bytes_reserved_peak);
  drop(&g8);
  HEALTHY(m);
  cm_manager_destroy(m);
}

/* The old pool's empty pages go back before the new pool allocates (seen
 * in the device's own peak) and a growth with the old pool's pages all
 * empty drops it. */
static void empty_pages_released_before_growth(void) {
  cm_storage_t *s = sim(0, true);
  cm_manager_t *m = mk_full(s, BIG, NULL, 0, CM_PRESET_ADAPTIVE, CM_PERSISTENT_ENABLED);
  cm_handle_t a = RSV(m, 2 * MiB);
  cm_handle_t b = RSV(m, 2 * MiB);
  cm_handle_t keep = RSV(m, 1 * MiB);
  drop(&a);
  drop(&b); /* two empty 2 MiB pages on the current pool */
  EXPECT_EQ(usage(m).bytes_reserved, 6 * MiB);
  cm_handle_t big = RSV(m, 7 * MiB); /* 8 MiB pages */
  EXPECT_EQ(usage(m).bytes_reserved, 2 * MiB + 8 * MiB);
  cm_sim_state_t st;
  ASSERT_OK(cm_storage_sim_state(cm_manager_storage(m), &st));
  EXPECT_EQ(st.bytes_used_peak, 10 * MiB + 0); /* never 6 + 8 MiB */
  EXPECT_EQ(outdated_pages(m), 1);
  HEALTHY(m);
  drop(&keep);
  drop(&big);
  cm_manager_destroy(m);
}

/* ---- what does not move the page size ------------------------------------------------------- */

static void persistent_and_dedicated_leave_it(void) {
  cm_manager_t *m = mk_adaptive(BIG, 0);
  cm_manager_set_mode(m, CM_MODE_PERSISTENT);
  cm_handle_t w = RSV(m, 64 * MiB);
  cm_manager_set_mode(m, CM_MODE_AUTO);
  cm_manager_set_mode(m, CM_MODE_DEDICATED);
  cm_handle_t p = RSV(m, 32 * MiB);
  cm_manager_set_mode(m, CM_MODE_AUTO);
  EXPECT_EQ(loc_of(m, w).pool, CM_PERSISTENT_POOL);
  EXPECT_EQ(loc_of(m, p).pool, CM_DEDICATED_POOL);
  cm_handle_t a = RSV(m, 100 * KiB);
  EXPECT_EQ(page_size(m), 2 * MiB);
  EXPECT_EQ(report(m, ADAPTIVE_POOL).largest_alloc, 100 * KiB);
  HEALTHY(m);
  drop(&w);
  drop(&p);
  drop(&a);
  cm_manager_destroy(m);
}

/* ---- reports and the check ----------------------------------------------------------------- */

static void report_names_page_size(void) {
  cm_manager_t *m = mk_adaptive(BIG, 0);
  cm_handle_t a = RSV(m, 1 * MiB);
  cm_handle_t b = RSV(m, 40 * MiB);
  cm_pool_report_t r = report(m, ADAPTIVE_POOL);
  EXPECT_EQ(r.options.kind, CM_POOL_ADAPTIVE);
  EXPECT_EQ(r.options.page_size, 41 * MiB);
  EXPECT_EQ(r.outdated_pools, 1);
  EXPECT_EQ(r.outdated_pages, 1);
  EXPECT_EQ(r.pages, 2);
  char buf[128];
  cm_pools_format(&r.options, 1, buf, sizeof buf);
  EXPECT_STR(buf, "adaptive:page=41MiB,max=20GiB");
  EXPECT_EQ(r.usage.bytes_in_use, 41 * MiB);
  EXPECT_EQ(r.usage.bytes_reserved, 43 * MiB);
  drop(&a);
  drop(&b);
  cm_manager_destroy(m);
}

static void dry_run_pages(void) {
  cm_manager_t *m = mk_adaptive(BIG, 0);
  cm_manager_dry_run_begin(m);
  cm_handle_t a = RSV(m, 1 * MiB);
  cm_handle_t b = RSV(m, 5 * MiB);
  cm_manager_dry_run_end(m);
  cm_pool_report_t r = report(m, ADAPTIVE_POOL);
  EXPECT_EQ(r.pages_unmapped, 2);
  EXPECT_EQ(sstats(m).allocs, 0);
  (void)storage_of(m, b); /* materialises the current pool's page */
  EXPECT_EQ(report(m, ADAPTIVE_POOL).pages_unmapped, 1);
  EXPECT_EQ(sstats(m).allocs, 1);
  HEALTHY(m);
  drop(&a); /* an unmapped outdated page goes without a device call */
  EXPECT_EQ(report(m, ADAPTIVE_POOL).pages_unmapped, 0);
  EXPECT_EQ(sstats(m).deallocs, 0);
  HEALTHY(m);
  drop(&b);
  cm_manager_destroy(m);
}

static void check_sees_a_broken_pool(void) {
  cm_manager_t *m = mk_adaptive(BIG, 0);
  cm_handle_t a = RSV(m, 1 * MiB);
  cm_handle_t b = RSV(m, 3 * MiB);
  HEALTHY(m);
  cm__pool *p = m->pools[ADAPTIVE_POOL];
  cm_diag_t d = {0};
  uint64_t saved = p->opts.page_size;
  p->opts.page_size = 2 * MiB; /* the report's page size no longer the pool's */
  EXPECT(cm_manager_check(m, &d) > 0);
  EXPECT(strstr(d.message, "adaptive") != NULL);
  p->opts.page_size = saved;
  p->usage.bytes_in_use += 1; /* usage no longer the generations' sum */
  cm_diag_clear(&d);
  EXPECT(cm_manager_check(m, &d) > 0);
  p->usage.bytes_in_use -= 1;
  HEALTHY(m);
  drop(&a);
  drop(&b);
  cm_manager_destroy(m);
}

int main(void) {
  CM_RUN(preset_pools);
  CM_RUN(routing);
  CM_RUN(first_page_is_the_floor);
  CM_RUN(growth_rule);
  CM_RUN(growth_rounds_to_the_alignment);
  CM_RUN(clamped_and_too_big);
  CM_RUN(refused_page_does_not_grow);
  CM_RUN(outdated_serves_nothing_and_drains);
  CM_RUN(several_generations);
  CM_RUN(empty_pages_released_before_growth);
  CM_RUN(persistent_and_dedicated_leave_it);
  CM_RUN(report_names_page_size);
  CM_RUN(dry_run_pages);
  CM_RUN(check_sees_a_broken_pool);
  return cm_test_finish();
}
