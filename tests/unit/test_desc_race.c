/*
 * test_desc_race.c - a release that stalls right after it made a
 * descriptor's count zero, while the owner thread keeps working.
 *
 * The interleaving (seen under ASan in the threaded device test): a user
 * thread drops the last handle of a persistent slice touched in a capture;
 * before its release has queued the descriptor, the owner ends the capture
 * (the pin takes a new reference to the still-used slice), the pin is
 * released, and a cleanup runs. The owner must not see the slice free and
 * free its descriptor under the stalled release.
 *
 * This file compiles desc.c itself with its test seam defined, so the stall
 * runs the owner's side on this thread at the exact point of the window;
 * the static library's copy of desc.c is then not linked. Exports: main.
 */
#include <stdlib.h>

#include "cm_test.h"
#include "cubemem/memory.h"

#include "cm_scenario.h"

struct cm_desc;
static void in_window(struct cm_desc *d);
#define CM__DESC_AFTER_LAST_UNREF(d) in_window(d)
#include "core/desc.c"

#define P CM_PERSISTENT_POOL

static struct {
  cm_manager_t *m;
  cm_desc_t *target; /* the descriptor whose release stalls */
  int fired;         /* times the stall ran the owner's side */
  size_t pins;       /* pins capture_end returned in the window */
  cm_usage_t during; /* the persistent pool's usage after the owner's side */
} g;

/* The owner's side, run while the user's release is stalled. */
static void in_window(struct cm_desc *d) {
  if (d != g.target || g.fired) return;
  g.fired++;
  cm_pins_t *pins = NULL;
  if (cm_manager_capture_end(g.m, &pins) != CM_OK) return;
  g.pins = pins ? cm_pins_count(pins) : 0;
  cm_pins_release(pins);         /* the new reference goes again */
  cm_manager_cleanup(g.m, true); /* drains, gives back free persistent pages */
  g.during = report(g.m, P).usage;
}

static void stalled_release_survives_pin_and_cleanup(void) {
  g.m = mk_preset(D, CM_PRESET_EXCLUSIVE_PAGES);
  cm_manager_capture_begin(g.m);
  cm_manager_capture_priming_end(g.m); /* priming would keep a reference */
  cm_handle_t h = RSV(g.m, 1024);
  EXPECT_EQ(loc_of(g.m, h).pool, P);
  EXPECT_EQ(cm__desc_rc(h.d), 1); /* the user's handle is the only one */
  g.target = h.d;
  cm_handle_release(h); /* stalls: in_window runs the owner's side */
  EXPECT_EQ(g.fired, 1);
  EXPECT_EQ(g.pins, 1);
  /* The release had not reached the inbox: the slice is still in use and
   * its page was not given back. */
  EXPECT_EQ(g.during.number_allocs, 1);
  EXPECT_EQ(g.during.bytes_reserved, 1024);
  /* Now it has: a cleanup frees the slice and gives its page back. */
  cm_manager_cleanup(g.m, true);
  cm_usage_t after = report(g.m, P).usage;
  EXPECT_EQ(after.number_allocs, 0);
  EXPECT_EQ(after.bytes_reserved, 0);
  EXPECT_EQ(cm_debug_double_releases(), 0);
  EXPECT_HEALTHY(g.m);
  cm_manager_destroy(g.m);
}

int main(void) {
  CM_RUN(stalled_release_survives_pin_and_cleanup);
  return cm_test_finish();
}
