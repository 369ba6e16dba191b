/*
 * test_dryrun.c - lazy mapping under a dry run (spec §6; scenarios T67-T70 of
 * §14), through the public manager API.
 *
 * While a dry run is open, sliced pages, direct slices and persistent slices
 * are reserved without storage (counted as unmapped) and carve, coalesce and
 * count towards the peaks exactly like mapped ones; get_storage and
 * get_resource materialise them (one storage allocation of the page or
 * slice, offsets unchanged); find and get_cursor do not. Releasing an
 * unmapped page drops it without a storage dealloc. The exclusive pool
 * ignores lazy mapping. Storage traffic is read from the storage counters.
 * Exports: main (the test runner).
 */
#include <stdlib.h>
#include <string.h>

#include "cm_test.h"
#include "cubemem/memory.h"

#include "cm_scenario.h"

/* ---- helpers of this file ----------------------------------------------- */

#define P CM_PERSISTENT_POOL

/* T67 (R): one lazily reserved page, materialised by get_storage. */

static void t67_lazy_page(void) {
  cm_pool_options_t p = sliced(1 * MiB, 1 * MiB);
  cm_manager_t *m = mk(D, &p, 1);
  cm_manager_dry_run_begin(m);
  cm_handle_t h = RSV(m, 600 * KiB);
  cm_pool_report_t r = report(m, 0);
  EXPECT_EQ(r.pages, 1);
  EXPECT_EQ(r.pages_peak, 1);
  EXPECT_EQ(r.pages_unmapped, 1);
  EXPECT_EQ(sstats(m).allocs, 0);
  EXPECT_USAGE(m, 1, 614400, 0, 1 * MiB);
  /* find and get_cursor do not materialise */
  cm_location_t loc = loc_of(m, h);
  EXPECT(loc.init);
  cm_binding_t b = cm_handle_binding(h);
  uint64_t cursor = 1;
  EXPECT_OK(cm_manager_get_cursor(m, b, &cursor, NULL));
  cm_binding_release(b);
  EXPECT_EQ(report(m, 0).pages_unmapped, 1);

  cm_storage_handle_t sh = storage_of(m, h);
  EXPECT_EQ(sh.size, 614400);
  EXPECT_EQ(sh.offset, 0);
  EXPECT_EQ(report(m, 0).pages_unmapped, 0);
  EXPECT_EQ(sstats(m).allocs, 1);
  EXPECT_EQ(sstats(m).bytes_held, 1 * MiB);
  /* The materialised memory is real host memory. */
  cm_binding_t b2 = cm_handle_binding(h);
  cm_resource_t res;
  EXPECT_OK(cm_manager_get_resource(m, b2, 0, 0, &res, NULL));
  EXPECT(res.host != NULL);
  EXPECT_EQ(res.size, 614400);
  if (res.host) memset(res.host, 0x5A, (size_t)res.size);
  cm_binding_release(b2);

  drop(&h);
  cm_manager_dry_run_end(m);
  cm_manager_cleanup(m, true);
  EXPECT_EQ(report(m, 0).pages, 0);
  EXPECT_EQ(sstats(m).bytes_held, 0);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* T68 (R): two lazy pages; resolving only the second maps only it. An
 * unmapped page is released without a storage dealloc. */
static void t68_two_lazy_pages(void) {
  cm_pool_options_t p = sliced(1 * MiB, 1 * MiB);
  cm_manager_t *m = mk(D, &p, 1);
  cm_manager_dry_run_begin(m);
  cm_handle_t a = RSV(m, 600 * KiB), b = RSV(m, 600 * KiB);
  cm_pool_report_t r = report(m, 0);
  EXPECT_EQ(r.pages, 2);
  EXPECT_EQ(r.pages_unmapped, 2);
  (void)storage_of(m, b);
  EXPECT_EQ(report(m, 0).pages_unmapped, 1);
  EXPECT_EQ(sstats(m).allocs, 1);
  drop(&a);
  drop(&b);
  cm_manager_dry_run_end(m);
  cm_manager_cleanup(m, true);
  cm_storage_stats_t st = sstats(m);
  EXPECT_EQ(report(m, 0).pages, 0);
  EXPECT_EQ(report(m, 0).pages_unmapped, 0);
  EXPECT_EQ(st.deallocs, 1);
  EXPECT_EQ(st.bytes_held, 0);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* Materialising a page rewrites the id of every slice in it; offsets stay. */
static void lazy_page_shared_by_slices(void) {
  cm_pool_options_t p = sliced(1 * MiB, 1 * MiB);
  cm_manager_t *m = mk(D, &p, 1);
  cm_manager_dry_run_begin(m);
  cm_handle_t a = RSV(m, 300 * KiB), b = RSV(m, 300 * KiB);
  EXPECT_EQ(report(m, 0).pages, 1);
  cm_storage_handle_t sa = storage_of(m, a);
  cm_storage_handle_t sb = storage_of(m, b);
  EXPECT_EQ(sa.id, sb.id);
  EXPECT_EQ(sa.offset, 0);
  EXPECT_EQ(sb.offset, 300 * KiB);
  EXPECT_EQ(sstats(m).allocs, 1);
  /* A slice placed after materialisation lands in the (now mapped) page. */
  cm_handle_t c = RSV(m, 100 * KiB);
  EXPECT_EQ(storage_of(m, c).id, sa.id);
  EXPECT_EQ(sstats(m).allocs, 1);
  drop(&a);
  drop(&b);
  drop(&c);
  cm_manager_dry_run_end(m);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* T69 (R): a persistent slice under a dry run is lazy too. */
static void t69_lazy_persistent(void) {
  cm_manager_t *m = mk_preset(D, CM_PRESET_SUBSLICES);
  cm_manager_dry_run_begin(m);
  cm_manager_set_mode(m, CM_MODE_PERSISTENT);
  cm_handle_t h = RSV(m, 512 * KiB);
  cm_manager_set_mode(m, CM_MODE_AUTO);
  cm_pool_report_t r = report(m, P);
  EXPECT_EQ(r.pages, 1);
  EXPECT_EQ(r.pages_unmapped, 1);
  EXPECT_EQ(sstats(m).allocs, 0);
  cm_storage_handle_t sh = storage_of(m, h);
  EXPECT_EQ(sh.size, 512 * KiB);
  EXPECT_EQ(report(m, P).pages_unmapped, 0);
  EXPECT_EQ(sstats(m).allocs, 1);
  cm_manager_dry_run_end(m);
  drop(&h);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* T70 (R): a plan measured in a dry run; install resets the peaks; pass 2
 * alone peaks at 1. */
static void t70_measure_install_replay(void) {
  cm_pool_options_t p = sliced(1 * MiB, 1 * MiB);
  cm_manager_t *m = mk(D, &p, 1);
  cm_manager_dry_run_begin(m);
  cm_handle_t a = RSV(m, 600 * KiB);
  cm_handle_t tuning = RSV(m, 600 * KiB);
  EXPECT_EQ(report(m, 0).pages_peak, 2);
  drop(&tuning);
  drop(&a);
  cm_manager_dry_run_end(m);
  ASSERT_OK(cm_manager_install_pools(m, &p, 1, NULL));
  EXPECT_EQ(report(m, 0).pages_peak, 0);
  EXPECT_EQ(report(m, 0).pages, 0);
  cm_manager_dry_run_begin(m);
  a = RSV(m, 600 * KiB);
  drop(&a);
  cm_manager_dry_run_end(m);
  EXPECT_EQ(report(m, 0).pages_peak, 1);
  EXPECT_EQ(sstats(m).allocs, 0);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* Dry runs nest: lazy until the last one ends. */
static void dry_runs_nest(void) {
  cm_pool_options_t p = sliced(1 * MiB, 1 * MiB);
  cm_manager_t *m = mk(D, &p, 1);
  cm_manager_dry_run_begin(m);
  cm_manager_dry_run_begin(m);
  cm_manager_dry_run_end(m);
  cm_handle_t a = RSV(m, 800 * KiB);
  EXPECT_EQ(report(m, 0).pages_unmapped, 1);
  cm_manager_dry_run_end(m);
  cm_handle_t b = RSV(m, 800 * KiB);
  EXPECT_EQ(report(m, 0).pages, 2);
  EXPECT_EQ(report(m, 0).pages_unmapped, 1);
  EXPECT_EQ(sstats(m).allocs, 1);
  drop(&a);
  drop(&b);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* The exclusive pool ignores lazy mapping; the direct pool honours it. */
static void lazy_exclusive_and_direct(void) {
  cm_pool_options_t p[2] = {exclusive(4096), direct()};
  cm_manager_t *m = mk(D, p, 2);
  cm_manager_dry_run_begin(m);
  cm_handle_t e = RSV(m, 1000), d = RSV(m, 10000);
  EXPECT_EQ(loc_of(m, e).pool, 0);
  EXPECT_EQ(loc_of(m, d).pool, 1);
  EXPECT_EQ(report(m, 0).pages_unmapped, 0);
  EXPECT_EQ(report(m, 1).pages_unmapped, 1);
  EXPECT_EQ(sstats(m).allocs, 1);
  cm_binding_t b = cm_handle_binding(d);
  cm_resource_t res;
  EXPECT_OK(cm_manager_get_resource(m, b, 16, 16, &res, NULL));
  EXPECT_EQ(res.size, 10000 - 32);
  cm_binding_release(b);
  EXPECT_EQ(report(m, 1).pages_unmapped, 0);
  EXPECT_EQ(sstats(m).allocs, 2);
  cm_manager_dry_run_end(m);
  drop(&e);
  drop(&d);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* A lazy page that cannot be backed at resolution reports CM_EMAPPING and
 * stays unmapped; the handle stays valid. */
static void lazy_mapping_failure(void) {
  cm_pool_options_t p = sliced(2 * MiB, 2 * MiB);
  cm_manager_t *m = mk_full(sim(1 * MiB, true), D, &p, 1, CM_PRESET_DEFAULT, CM_PERSISTENT_ENABLED);
  cm_manager_dry_run_begin(m);
  cm_handle_t h = RSV(m, 1 * MiB);
  cm_binding_t b = cm_handle_binding(h);
  cm_storage_handle_t sh;
  cm_diag_t diag = {0};
  EXPECT_STATUS(cm_manager_get_storage(m, b, &sh, &diag), CM_EMAPPING);
  EXPECT(diag.message[0] != '\0');
  EXPECT_EQ(report(m, 0).pages_unmapped, 1);
  cm_location_t loc;
  EXPECT_OK(cm_manager_find(m, b, &loc, NULL));
  cm_binding_release(b);
  cm_manager_dry_run_end(m);
  drop(&h);
  cm_manager_cleanup(m, true);
  EXPECT_EQ(report(m, 0).pages, 0);
  EXPECT_EQ(sstats(m).deallocs, 0);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

int main(void) {
  CM_RUN(t67_lazy_page);
  CM_RUN(t68_two_lazy_pages);
  CM_RUN(lazy_page_shared_by_slices);
  CM_RUN(t69_lazy_persistent);
  CM_RUN(t70_measure_install_replay);
  CM_RUN(dry_runs_nest);
  CM_RUN(lazy_exclusive_and_direct);
  CM_RUN(lazy_mapping_failure);
  return cm_test_finish();
}
