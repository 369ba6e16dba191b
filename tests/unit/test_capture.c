/*
 * test_capture.c - graph capture support on the memory side (spec §5.8;
 * scenarios T60-T66 of §14), through the public manager API.
 *
 * All scenarios use ExclusivePages/D over an immediate-free host storage.
 * A capture forces persistent mode, records every persistent slice handed
 * out in the window, and capture_end returns pins (handle clones) for those
 * slices; pins keep them non-free until released. While priming, handed-out
 * slices are also kept so warmup cannot recycle them. Nothing is freed by
 * cleanup while a capture is active. Exports: main (the test runner).
 */
#include <stdlib.h>
#include <string.h>

#include "cm_test.h"
#include "cubemem/memory.h"

#include "cm_scenario.h"

/* ---- helpers of this file ----------------------------------------------- */

#define P CM_PERSISTENT_POOL

static cm_manager_t *mk_cap(void) { return mk_preset(D, CM_PRESET_EXCLUSIVE_PAGES); }

static cm_pins_t *end_capture(cm_manager_t *m) {
  cm_pins_t *pins = NULL;
  ASSERT_OK(cm_manager_capture_end(m, &pins));
  return pins;
}

static size_t npins(const cm_pins_t *p) { return p ? cm_pins_count(p) : 0; }

/* T60 (R): a slice reused in a window is pinned; pinned memory is not
 * handed out again, so a later reservation grows the reservation. */

static void t60_reused_slice_pinned(void) {
  cm_manager_t *m = mk_cap();
  cm_manager_capture_begin(m);
  EXPECT_EQ(cm_manager_mode(m), CM_MODE_PERSISTENT);
  cm_handle_t h = RSV(m, 1024);
  EXPECT_EQ(loc_of(m, h).pool, P);
  drop(&h);
  cm_pins_t *pins = end_capture(m);
  EXPECT_EQ(cm_manager_mode(m), CM_MODE_AUTO);
  cm_pins_release(pins);

  cm_manager_capture_begin(m);
  h = RSV(m, 1024);
  EXPECT_EQ(report(m, P).pages, 1); /* reused */
  drop(&h);
  pins = end_capture(m);
  EXPECT_EQ(npins(pins), 1);
  EXPECT_POOL_USAGE(m, P, 1, 1024, 0, 1024); /* the pin keeps it live */

  uint64_t before = usage(m).bytes_reserved;
  cm_handle_t later = RSV(m, 1024);
  EXPECT_GT(usage(m).bytes_reserved, before);
  EXPECT(loc_of(m, later).pool != P);
  drop(&later);
  cm_pins_release(pins);
  EXPECT_POOL_USAGE(m, P, 0, 0, 0, 1024);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* T61 (R): a live slice from an earlier capture, freed inside a new window
 * and reused there, is pinned. */
static void t61_freed_and_reused_in_window(void) {
  cm_manager_t *m = mk_cap();
  cm_manager_capture_begin(m);
  cm_handle_t h = RSV(m, 1024);
  cm_pins_t *pins = end_capture(m);
  cm_pins_release(pins);
  EXPECT_POOL_USAGE(m, P, 1, 1024, 0, 1024);

  cm_manager_capture_begin(m);
  drop(&h);
  h = RSV(m, 1024);
  EXPECT_EQ(report(m, P).pages, 1);
  pins = end_capture(m);
  EXPECT_EQ(npins(pins), 1);
  drop(&h);
  EXPECT_POOL_USAGE(m, P, 1, 1024, 0, 1024);
  cm_pins_release(pins);
  EXPECT_POOL_USAGE(m, P, 0, 0, 0, 1024);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* T62 (R): an idle slot not touched in the window is not pinned. */
static void t62_untouched_slot_not_pinned(void) {
  cm_manager_t *m = mk_cap();
  cm_manager_capture_begin(m);
  cm_handle_t h = RSV(m, 1024);
  drop(&h);
  cm_pins_release(end_capture(m));

  cm_manager_capture_begin(m);
  h = RSV(m, 2048);
  drop(&h);
  cm_pins_t *pins = end_capture(m);
  EXPECT_EQ(npins(pins), 1);
  EXPECT_EQ(report(m, P).pages, 2);
  EXPECT_POOL_USAGE(m, P, 1, 2048, 0, 3072);
  /* The idle 1024 slot is free: a window reserving 1024 reuses it. */
  cm_manager_set_mode(m, CM_MODE_PERSISTENT);
  h = RSV(m, 1024);
  EXPECT_EQ(report(m, P).pages, 2);
  drop(&h);
  cm_manager_set_mode(m, CM_MODE_AUTO);
  cm_pins_release(pins);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* T63 (R): cleanup inside a capture frees nothing; the pin survives. */
static void t63_cleanup_in_capture(void) {
  cm_manager_t *m = mk_cap();
  cm_manager_capture_begin(m);
  cm_handle_t h = RSV(m, 1024);
  drop(&h);
  cm_manager_cleanup(m, true);
  EXPECT_EQ(report(m, P).pages, 1);
  EXPECT_EQ(sstats(m).deallocs, 0);
  cm_pins_t *pins = end_capture(m);
  EXPECT_EQ(npins(pins), 1);
  cm_manager_cleanup(m, true); /* pinned: still kept */
  EXPECT_EQ(report(m, P).pages, 1);
  cm_pins_release(pins);
  cm_manager_cleanup(m, true);
  EXPECT_EQ(report(m, P).pages, 0);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* T64 (R): a re-entrant begin keeps the earlier state; a second end
 * returns nothing. */
static void t64_reentrant_begin(void) {
  cm_manager_t *m = mk_cap();
  cm_manager_capture_begin(m);
  cm_handle_t a = RSV(m, 1024);
  drop(&a);
  cm_manager_capture_begin(m);
  cm_handle_t b = RSV(m, 2048);
  drop(&b);
  cm_pins_t *pins = end_capture(m);
  EXPECT_EQ(npins(pins), 2);
  EXPECT_EQ(cm_manager_mode(m), CM_MODE_AUTO);
  cm_pins_t *again = end_capture(m);
  EXPECT_EQ(npins(again), 0);
  cm_pins_release(again);
  cm_pins_release(pins);
  EXPECT_POOL_USAGE(m, P, 0, 0, 0, 3072);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* T65 (R): a pre-existing live buffer is not pinned and keeps can_mut. */
static void t65_preexisting_not_pinned(void) {
  cm_manager_t *m = mk_cap();
  cm_manager_set_mode(m, CM_MODE_PERSISTENT);
  cm_handle_t weight = RSV(m, 4096);
  cm_manager_set_mode(m, CM_MODE_AUTO);
  cm_handle_t act = RSV(m, 512);
  cm_manager_capture_begin(m);
  cm_handle_t t = RSV(m, 1024);
  drop(&t);
  cm_pins_t *pins = end_capture(m);
  EXPECT_EQ(npins(pins), 1);
  EXPECT(cm_handle_can_mut(weight));
  EXPECT(cm_handle_can_mut(act));
  drop(&weight);
  EXPECT_POOL_USAGE(m, P, 1, 1024, 0, 5120); /* only the pinned slice is live */
  cm_pins_release(pins);
  drop(&act);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* The mode set inside a capture becomes the restore mode. */
static void capture_restores_mode(void) {
  cm_manager_t *m = mk_cap();
  cm_manager_capture_begin(m);
  cm_manager_set_mode(m, CM_MODE_PERSISTENT); /* stored for after the capture */
  EXPECT_EQ(cm_manager_mode(m), CM_MODE_PERSISTENT);
  cm_pins_release(end_capture(m));
  EXPECT_EQ(cm_manager_mode(m), CM_MODE_PERSISTENT);
  cm_manager_set_mode(m, CM_MODE_AUTO);
  EXPECT_EQ(cm_manager_mode(m), CM_MODE_AUTO);
  /* priming_end and end without a capture do nothing. */
  cm_manager_capture_priming_end(m);
  cm_pins_t *none = end_capture(m);
  EXPECT_EQ(npins(none), 0);
  cm_pins_release(none);
  EXPECT_EQ(cm_manager_mode(m), CM_MODE_AUTO);
  cm_manager_destroy(m);
}

/* T66 (R), part 1: priming grows the pool to the warmup's working set; after
 * priming_end, simultaneous reservations fit without growth. */
static void t66_priming_working_set(void) {
  cm_manager_t *m = mk_cap();
  cm_manager_capture_begin(m);
  for (int i = 0; i < 3; i++) {
    cm_handle_t h = RSV(m, 1024);
    drop(&h);
  }
  EXPECT_EQ(report(m, P).pages, 3);
  EXPECT_EQ(usage(m).bytes_reserved, 3072);
  cm_manager_capture_priming_end(m);
  cm_handle_t h[3];
  for (int i = 0; i < 3; i++) h[i] = RSV(m, 1024);
  EXPECT_EQ(usage(m).bytes_reserved, 3072);
  for (int i = 0; i < 3; i++) drop(&h[i]);
  cm_pins_t *pins = end_capture(m);
  EXPECT_EQ(npins(pins), 3);
  cm_pins_release(pins);
  EXPECT_POOL_USAGE(m, P, 0, 0, 0, 3072);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* T66 (R), part 2: during priming a dropped slice is not reused; after
 * priming_end it is. */
static void t66_priming_no_reuse(void) {
  cm_manager_t *m = mk_cap();
  cm_manager_capture_begin(m);
  cm_handle_t a = RSV(m, 1024);
  drop(&a);
  uint64_t r1 = usage(m).bytes_reserved;
  cm_handle_t b = RSV(m, 1024);
  EXPECT_GT(usage(m).bytes_reserved, r1);
  drop(&b);
  cm_manager_capture_priming_end(m);
  uint64_t r2 = usage(m).bytes_reserved;
  cm_handle_t c = RSV(m, 1024);
  EXPECT_EQ(usage(m).bytes_reserved, r2);
  drop(&c);
  cm_pins_release(end_capture(m));
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* T66 (R), part 3: without priming_end, capture_end releases the primed
 * slices itself: only the pins keep them, and once those go in_use is 0. */
static void t66_end_releases_primed(void) {
  cm_manager_t *m = mk_cap();
  cm_manager_capture_begin(m);
  cm_handle_t a = RSV(m, 1024);
  drop(&a);
  cm_handle_t b = RSV(m, 2048);
  drop(&b);
  EXPECT_EQ(usage(m).number_allocs, 2); /* primed: kept live */
  cm_pins_t *pins = end_capture(m);
  EXPECT_EQ(npins(pins), 2);
  cm_pins_release(pins);
  EXPECT_EQ(usage(m).bytes_in_use, 0);
  EXPECT_EQ(usage(m).number_allocs, 0);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* A handle bound to a persistent slice inside a window is recorded as
 * touched (spec §5.8): the slice, now identified by the assigned handle, is
 * pinned by capture_end and stays live after the user releases it. */
static void capture_bound_handle_is_touched(void) {
  cm_manager_t *m = mk_cap();
  cm_manager_capture_begin(m);
  cm_handle_t r = RSV(m, 1024);
  cm_handle_t a = {0};
  ASSERT_OK(cm_handle_new(&a));
  ASSERT_OK(cm_manager_bind(m, r, a, 3, NULL));
  cm_pins_t *pins = end_capture(m);
  EXPECT_EQ(npins(pins), 1);
  cm_handle_release(a);
  EXPECT_POOL_USAGE(m, P, 1, 1024, 0, 1024);
  cm_pins_release(pins);
  EXPECT_POOL_USAGE(m, P, 0, 0, 0, 1024);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

int main(void) {
  CM_RUN(t60_reused_slice_pinned);
  CM_RUN(t61_freed_and_reused_in_window);
  CM_RUN(t62_untouched_slot_not_pinned);
  CM_RUN(t63_cleanup_in_capture);
  CM_RUN(t64_reentrant_begin);
  CM_RUN(t65_preexisting_not_pinned);
  CM_RUN(capture_restores_mode);
  CM_RUN(t66_priming_working_set);
  CM_RUN(t66_priming_no_reuse);
  CM_RUN(t66_end_releases_primed);
  CM_RUN(capture_bound_handle_is_touched);
  return cm_test_finish();
}
