/*
 * test_handles.c - handles, bindings and the reserve/bind protocol
 * (spec §3, scenarios T01-T05 of §14), through the public API only.
 *
 * Each test builds a manager over an immediate-free host storage, drives it
 * with reserve/clone/bind/release and checks can_mut, the usage tuple
 * u = (number_allocs, bytes_in_use, bytes_padding, bytes_reserved), and the
 * error reasons of stale and never-initialised lookups. Every test releases
 * all it holds and destroys its manager, so the file runs clean under
 * valgrind/ASan. Exports: main (the test runner).
 */
#include <stdlib.h>
#include <string.h>

#include "cm_scenario.h"

/* ---- T01 ------------------------------------------------------------------------ */

/* T01 (R): clone makes can_mut false; dropping the clone makes it true again. */
static void t01_clone_blocks_can_mut(void) {
  cm_manager_t *m = mk_preset(D, CM_PRESET_SUBSLICES);
  cm_handle_t h = RSV(m, 10);
  EXPECT(cm_handle_can_mut(h));
  cm_handle_t c = cm_handle_clone(h);
  EXPECT(!cm_handle_can_mut(h));
  EXPECT(!cm_handle_can_mut(c));
  EXPECT_EQ(cm_handle_id(c), cm_handle_id(h));
  cm_handle_release(c);
  EXPECT(cm_handle_can_mut(h));
  cm_handle_release(h);
  EXPECT_EQ(cm_manager_check(m, NULL), 0);
  cm_manager_destroy(m);
}

/* ---- T02 ------------------------------------------------------------------------ */

/* T02 (M): bindings keep the slice live but do not affect can_mut. */
static void t02_binding_keeps_slice_live(void) {
  cm_pool_options_t p = sliced(2048, 2048);
  cm_manager_t *m = mk(D, &p, 1);
  cm_handle_t h = RSV(m, 512);
  cm_binding_t b = cm_handle_into_binding(cm_handle_clone(h));
  EXPECT(cm_handle_can_mut(h));
  EXPECT_EQ(cm_binding_id(b), cm_handle_id(h));
  EXPECT_USAGE(m, 1, 512, 0, 2048);

  cm_handle_release(h);
  EXPECT_USAGE(m, 1, 512, 0, 2048);

  cm_binding_release(b);
  EXPECT_USAGE(m, 0, 0, 0, 2048);

  cm_handle_t h2 = RSV(m, 512);
  EXPECT_EQ(report(m, 0).pages, 1);
  EXPECT_USAGE(m, 1, 512, 0, 2048);
  cm_handle_release(h2);
  EXPECT_EQ(cm_manager_check(m, NULL), 0);
  cm_manager_destroy(m);
}

/* A binding obtained with cm_handle_binding (non-consuming) and a cloned
 * binding both count as references; the slice is free only after all go. */
static void t02b_binding_clone_counts(void) {
  cm_pool_options_t p = sliced(2048, 2048);
  cm_manager_t *m = mk(D, &p, 1);
  cm_handle_t h = RSV(m, 100);
  cm_binding_t b1 = cm_handle_binding(h);
  cm_binding_t b2 = cm_binding_clone(b1);
  EXPECT(cm_handle_can_mut(h));
  cm_handle_release(h);
  cm_binding_release(b1);
  EXPECT_USAGE(m, 1, 100, 28, 2048);
  cm_location_t loc;
  EXPECT_OK(cm_manager_find(m, b2, &loc, NULL));
  EXPECT(loc.init);
  EXPECT_EQ(loc.pool, 0);
  cm_binding_release(b2);
  EXPECT_USAGE(m, 0, 0, 0, 2048);
  EXPECT_EQ(cm_manager_check(m, NULL), 0);
  cm_manager_destroy(m);
}

/* ---- T03 / T04 ------------------------------------------------------------------ */

/* T03 (R): after bind, the assigned handle carries the cursor and the
 * reserved descriptor is stale ("points to a different allocation"). */
static void t03_bind_makes_reserved_stale(void) {
  cm_pool_options_t p = sliced(2048, 2048);
  cm_manager_t *m = mk(D, &p, 1);
  cm_handle_t r = RSV(m, 512);
  cm_handle_t stale = cm_handle_clone(r);
  cm_handle_t a = {0};
  ASSERT_OK(cm_handle_new(&a));
  cm_diag_t diag = {0};
  ASSERT_OK(cm_manager_bind(m, r, a, 7, &diag));

  cm_binding_t ba = cm_handle_binding(a);
  uint64_t cursor = 0;
  EXPECT_OK(cm_manager_get_cursor(m, ba, &cursor, NULL));
  EXPECT_EQ(cursor, 7);
  cm_storage_handle_t sh;
  EXPECT_OK(cm_manager_get_storage(m, ba, &sh, NULL));
  EXPECT_EQ(sh.size, 512);

  cm_binding_t bs = cm_handle_binding(stale);
  cm_diag_clear(&diag);
  EXPECT_STATUS(cm_manager_get_cursor(m, bs, &cursor, &diag), CM_ENOTFOUND);
  EXPECT_STATUS(diag.code, CM_ENOTFOUND);
  EXPECT_CONTAINS(diag.message, "points to a different allocation");
  cm_location_t loc;
  cm_diag_clear(&diag);
  EXPECT_STATUS(cm_manager_find(m, bs, &loc, &diag), CM_ENOTFOUND);
  EXPECT_CONTAINS(diag.message, "points to a different allocation");
  cm_diag_clear(&diag);
  EXPECT_STATUS(cm_manager_get_storage(m, bs, &sh, &diag), CM_ENOTFOUND);

  /* The stale reference does not keep the slice: only a (and ba) do. */
  EXPECT_USAGE(m, 1, 512, 0, 2048);
  cm_binding_release(bs);
  cm_handle_release(stale);
  EXPECT_USAGE(m, 1, 512, 0, 2048);
  cm_binding_release(ba);
  EXPECT(cm_handle_can_mut(a));
  cm_handle_release(a);
  EXPECT_USAGE(m, 0, 0, 0, 2048);
  EXPECT_EQ(cm_manager_check(m, NULL), 0);
  cm_manager_destroy(m);
}

/* T04 (R): a handle that was never reserved reports "never initialized". */
static void t04_never_initialized(void) {
  cm_pool_options_t p = sliced(2048, 2048);
  cm_manager_t *m = mk(D, &p, 1);
  cm_handle_t live = RSV(m, 512);
  cm_handle_t fresh = {0};
  ASSERT_OK(cm_handle_new(&fresh));
  cm_binding_t b = cm_handle_binding(fresh);
  uint64_t cursor = 123;
  cm_diag_t diag = {0};
  EXPECT_STATUS(cm_manager_get_cursor(m, b, &cursor, &diag), CM_ENOTFOUND);
  EXPECT_CONTAINS(diag.message, "never initialized");
  cm_location_t loc;
  cm_diag_clear(&diag);
  EXPECT_STATUS(cm_manager_find(m, b, &loc, &diag), CM_ENOTFOUND);
  EXPECT_CONTAINS(diag.message, "never initialized");
  cm_storage_handle_t sh;
  cm_diag_clear(&diag);
  EXPECT_STATUS(cm_manager_get_storage(m, b, &sh, &diag), CM_ENOTFOUND);
  EXPECT_CONTAINS(diag.message, "never initialized");
  EXPECT_USAGE(m, 1, 512, 0, 2048);
  cm_binding_release(b);
  cm_handle_release(fresh);
  cm_handle_release(live);
  EXPECT_EQ(cm_manager_check(m, NULL), 0);
  cm_manager_destroy(m);
}

/* Binding a reserved handle whose location is uninitialised fails with
 * "Reserved memory isn't initialized" (spec §3.3) and consumes it. */
static void t04b_bind_uninitialized_reserved(void) {
  cm_pool_options_t p = sliced(2048, 2048);
  cm_manager_t *m = mk(D, &p, 1);
  cm_handle_t r = {0}, a = {0};
  ASSERT_OK(cm_handle_new(&r));
  ASSERT_OK(cm_handle_new(&a));
  cm_diag_t diag = {0};
  EXPECT_STATUS(cm_manager_bind(m, r, a, 1, &diag), CM_ENOTFOUND);
  EXPECT_CONTAINS(diag.message, "isn't initialized");
  cm_handle_release(a);
  EXPECT_USAGE(m, 0, 0, 0, 0);
  cm_manager_destroy(m);
}

/* ---- T05 ------------------------------------------------------------------------ */

/* T05 (R): a binding survives cleanup; compaction renumbers its page to 0. */
static void t05_binding_survives_cleanup(void) {
  cm_pool_options_t p = exclusive(1024); /* no dealloc period */
  cm_manager_t *m = mk(D, &p, 1);
  cm_handle_t a = RSV(m, 1024), b = RSV(m, 1024), c = RSV(m, 1024);
  cm_binding_t bb = cm_handle_into_binding(b);
  cm_location_t loc;
  ASSERT_OK(cm_manager_find(m, bb, &loc, NULL));
  EXPECT_EQ(loc.page, 1);
  cm_handle_release(a);
  cm_handle_release(c);
  cm_manager_cleanup(m, true);

  uint64_t cursor = 99;
  EXPECT_OK(cm_manager_get_cursor(m, bb, &cursor, NULL));
  EXPECT_EQ(cursor, 0);
  cm_storage_handle_t sh;
  EXPECT_OK(cm_manager_get_storage(m, bb, &sh, NULL));
  EXPECT_EQ(sh.size, 1024);
  cm_resource_t res;
  EXPECT_OK(cm_manager_get_resource(m, bb, 0, 0, &res, NULL));
  EXPECT_EQ(res.size, 1024);
  EXPECT(res.host != NULL);
  EXPECT_USAGE(m, 1, 1024, 0, 1024);
  ASSERT_OK(cm_manager_find(m, bb, &loc, NULL));
  EXPECT_EQ(loc.page, 0);
  EXPECT_EQ(report(m, 0).pages, 1);
  EXPECT_EQ(cm_manager_check(m, NULL), 0);
  cm_binding_release(bb);
  cm_manager_destroy(m);
}

/* Ids: a freed slice reused by the next reservation hands out the id of the
 * handle it held before (spec §3.3, step 1). */
static void t05b_ids_reused_with_slice(void) {
  cm_pool_options_t p = exclusive(2048);
  cm_manager_t *m = mk(D, &p, 1);
  cm_handle_t h = RSV(m, 2048);
  uint64_t id = cm_handle_id(h);
  EXPECT_NE(id, 0);
  cm_handle_release(h);
  h = RSV(m, 2048);
  EXPECT_EQ(cm_handle_id(h), id);
  cm_handle_release(h);
  cm_manager_destroy(m);
}

/* Handles outlive their manager as objects: releasing them afterwards is safe. */
static void t05c_handles_outlive_manager(void) {
  cm_pool_options_t p = sliced(2048, 2048);
  cm_manager_t *m = mk(D, &p, 1);
  cm_handle_t h = RSV(m, 64);
  cm_binding_t b = cm_handle_binding(h);
  cm_manager_destroy(m);
  EXPECT(cm_handle_can_mut(h));
  cm_binding_release(b);
  cm_handle_release(h);
}

int main(void) {
  CM_RUN(t01_clone_blocks_can_mut);
  CM_RUN(t02_binding_keeps_slice_live);
  CM_RUN(t02b_binding_clone_counts);
  CM_RUN(t03_bind_makes_reserved_stale);
  CM_RUN(t04_never_initialized);
  CM_RUN(t04b_bind_uninitialized_reserved);
  CM_RUN(t05_binding_survives_cleanup);
  CM_RUN(t05b_ids_reused_with_slice);
  CM_RUN(t05c_handles_outlive_manager);
  return cm_test_finish();
}
