/*
 * test_dedicated.c - the dedicated allocation mode (memory.h,
 * CM_MODE_DEDICATED): each reservation its own storage allocation outside
 * every pool, never reused, given back at the first cleanup or reservation
 * after it is freed whatever mode is open then; window nesting with
 * persistent windows (the innermost decides), the fixed persistent
 * settings, captures, dry runs, refusals, reports and the invariant check.
 * Exports: main (the test runner).
 */
#include <stdlib.h>
#include <string.h>

#include "cm_test.h"
#include "cubemem/memory.h"

#include "cm_scenario.h"
#include "core/manager_internal.h"

#define HEALTHY(m) healthy_((m), __LINE__)
static void healthy_(cm_manager_t *m, int line) {
  cm_diag_t d = {0};
  size_t bad = cm_manager_check(m, &d);
  if (bad) cm_test_fail(__FILE__, line, "%zu invariant violation(s): %s", bad, d.message);
}

static cm_manager_t *mk_sim(cm_preset_t preset, uint64_t capacity, cm_persistent_memory_t pm) {
  return mk_full(sim(capacity, true), D, NULL, 0, preset, pm);
}

static uint64_t dedicated_reserved(cm_manager_t *m) {
  return report(m, CM_DEDICATED_POOL).usage.bytes_reserved;
}

static void own_allocation_each(void) {
  cm_manager_t *m = mk_sim(CM_PRESET_SUBSLICES, 0, CM_PERSISTENT_ENABLED);
  cm_manager_set_mode(m, CM_MODE_DEDICATED);
  EXPECT_EQ(cm_manager_mode(m), CM_MODE_DEDICATED);
  cm_handle_t a = RSV(m, 1000);
  cm_handle_t b = RSV(m, 1000);
  cm_handle_t z = RSV(m, 0);
  cm_manager_set_mode(m, CM_MODE_AUTO);
  EXPECT_EQ(cm_manager_mode(m), CM_MODE_AUTO);
  EXPECT_EQ(loc_of(m, a).pool, CM_DEDICATED_POOL);
  EXPECT_EQ(loc_of(m, z).pool, CM_DEDICATED_POOL);
  EXPECT(storage_of(m, a).id != storage_of(m, b).id);
  EXPECT_EQ(storage_of(m, a).offset, 0);
  EXPECT_EQ(sstats(m).allocs, 3);
  cm_pool_report_t r = report(m, CM_DEDICATED_POOL);
  EXPECT_EQ(r.options.kind, CM_POOL_DEDICATED);
  EXPECT_EQ(r.pages, 3);
  EXPECT_EQ(r.usage.number_allocs, 3);
  EXPECT_EQ(r.usage.bytes_in_use, 2000);
  EXPECT_EQ(r.usage.bytes_reserved, 2 * 1024); /* effective sizes (alignment 32) */
  for (size_t i = 0; i < cm_manager_pool_count(m); i++) EXPECT_EQ(pages(m, i), 0);
  EXPECT_EQ(usage(m).bytes_reserved, 2 * 1024);
  char buf[8192];
  cm_manager_display(m, buf, sizeof buf);
  EXPECT(strstr(buf, "## Dedicated") != NULL);
  HEALTHY(m);
  drop(&a);
  drop(&b);
  drop(&z);
  cm_manager_destroy(m);
}

static void never_reused_given_back_on_the_tick(void) {
  cm_manager_t *m = mk_sim(CM_PRESET_SUBSLICES, 0, CM_PERSISTENT_ENABLED);
  cm_manager_set_mode(m, CM_MODE_DEDICATED);
  cm_handle_t a = RSV(m, 4096);
  uint64_t id = storage_of(m, a).id;
  drop(&a);
  /* freed, not yet given back: a report is no tick */
  EXPECT_EQ(usage(m).number_allocs, 0);
  EXPECT_EQ(dedicated_reserved(m), 4096);
  EXPECT_EQ(report(m, CM_DEDICATED_POOL).bytes_cached, 4096);
  EXPECT_EQ(sstats(m).deallocs, 0);
  HEALTHY(m);
  /* the next reservation gives it back first and takes a new allocation */
  cm_handle_t b = RSV(m, 4096);
  EXPECT(storage_of(m, b).id != id);
  EXPECT_EQ(sstats(m).allocs, 2);
  EXPECT_EQ(sstats(m).deallocs, 1);
  EXPECT_EQ(dedicated_reserved(m), 4096);
  /* a periodic cleanup is a tick too, whatever mode is open then */
  cm_manager_set_mode(m, CM_MODE_PERSISTENT);
  drop(&b);
  cm_manager_cleanup(m, false);
  EXPECT_EQ(dedicated_reserved(m), 0);
  EXPECT_EQ(report(m, CM_DEDICATED_POOL).pages, 0);
  EXPECT_EQ(sstats(m).deallocs, 2);
  EXPECT_EQ(usage(m).bytes_reserved, 0);
  HEALTHY(m);
  cm_manager_destroy(m);
}

static void windows_nest(void) {
  cm_manager_t *m = mk_sim(CM_PRESET_SUBSLICES, 0, CM_PERSISTENT_ENABLED);
  cm_manager_set_mode(m, CM_MODE_PERSISTENT);
  cm_manager_set_mode(m, CM_MODE_DEDICATED); /* dedicated inside persistent */
  EXPECT_EQ(cm_manager_mode(m), CM_MODE_DEDICATED);
  cm_handle_t d = RSV(m, 100);
  cm_manager_set_mode(m, CM_MODE_PERSISTENT); /* persistent inside that */
  EXPECT_EQ(cm_manager_mode(m), CM_MODE_PERSISTENT);
  cm_handle_t p = RSV(m, 100);
  cm_manager_set_mode(m, CM_MODE_AUTO);
  EXPECT_EQ(cm_manager_mode(m), CM_MODE_DEDICATED);
  cm_manager_set_mode(m, CM_MODE_DEDICATED);
  cm_manager_set_mode(m, CM_MODE_AUTO);
  EXPECT_EQ(cm_manager_mode(m), CM_MODE_DEDICATED);
  cm_manager_set_mode(m, CM_MODE_AUTO);
  EXPECT_EQ(cm_manager_mode(m), CM_MODE_PERSISTENT);
  cm_manager_set_mode(m, CM_MODE_AUTO);
  EXPECT_EQ(cm_manager_mode(m), CM_MODE_AUTO);
  cm_manager_set_mode(m, CM_MODE_AUTO); /* closing with none open: nothing */
  EXPECT_EQ(cm_manager_mode(m), CM_MODE_AUTO);
  cm_manager_set_mode(m, (cm_alloc_mode_t)7); /* unknown: ignored */
  EXPECT_EQ(cm_manager_mode(m), CM_MODE_AUTO);
  cm_handle_t a = RSV(m, 100);
  EXPECT_EQ(loc_of(m, d).pool, CM_DEDICATED_POOL);
  EXPECT_EQ(loc_of(m, p).pool, CM_PERSISTENT_POOL);
  EXPECT(loc_of(m, a).pool < CM_DEDICATED_POOL);
  HEALTHY(m);
  drop(&d);
  drop(&p);
  drop(&a);
  cm_manager_destroy(m);
}

static void many_alternations(void) {
  cm_manager_t *m = mk_sim(CM_PRESET_SUBSLICES, 0, CM_PERSISTENT_ENABLED);
  uint64_t warnings = cm_manager_warnings(m);
  for (int i = 0; i < 70; i++) {
    cm_alloc_mode_t k = i % 2 ? CM_MODE_PERSISTENT : CM_MODE_DEDICATED;
    cm_manager_set_mode(m, k);
    /* up to 64 alternations the innermost decides; deeper ones keep the 64th */
    EXPECT_EQ(cm_manager_mode(m), i < 64 ? k : CM_MODE_PERSISTENT);
  }
  EXPECT_EQ(cm_manager_warnings(m), warnings + 1);
  for (int i = 69; i >= 0; i--) {
    EXPECT_EQ(cm_manager_mode(m), i < 64 ? (i % 2 ? CM_MODE_PERSISTENT : CM_MODE_DEDICATED)
                                         : CM_MODE_PERSISTENT);
    cm_manager_set_mode(m, CM_MODE_AUTO);
  }
  EXPECT_EQ(cm_manager_mode(m), CM_MODE_AUTO);
  cm_manager_destroy(m);
}

static void fixed_persistent_settings(void) {
  /* disabled: persistent windows change nothing, dedicated ones apply */
  cm_manager_t *m = mk_sim(CM_PRESET_SUBSLICES, 0, CM_PERSISTENT_DISABLED);
  cm_manager_set_mode(m, CM_MODE_PERSISTENT);
  EXPECT_EQ(cm_manager_mode(m), CM_MODE_AUTO);
  cm_manager_set_mode(m, CM_MODE_DEDICATED);
  EXPECT_EQ(cm_manager_mode(m), CM_MODE_DEDICATED);
  cm_manager_set_mode(m, CM_MODE_PERSISTENT);
  EXPECT_EQ(cm_manager_mode(m), CM_MODE_AUTO);
  cm_manager_set_mode(m, CM_MODE_AUTO);
  EXPECT_EQ(cm_manager_mode(m), CM_MODE_DEDICATED);
  cm_handle_t d = RSV(m, 64);
  EXPECT_EQ(loc_of(m, d).pool, CM_DEDICATED_POOL);
  cm_manager_set_mode(m, CM_MODE_AUTO);
  EXPECT_EQ(cm_manager_mode(m), CM_MODE_AUTO);
  cm_manager_set_mode(m, CM_MODE_AUTO); /* closes the first (uncounted) window: nothing */
  EXPECT_EQ(cm_manager_mode(m), CM_MODE_AUTO);
  drop(&d);
  HEALTHY(m);
  cm_manager_destroy(m);
  /* enforced: persistent throughout, except inside a dedicated window */
  m = mk_sim(CM_PRESET_SUBSLICES, 0, CM_PERSISTENT_ENFORCED);
  EXPECT_EQ(cm_manager_mode(m), CM_MODE_PERSISTENT);
  cm_manager_set_mode(m, CM_MODE_AUTO);
  EXPECT_EQ(cm_manager_mode(m), CM_MODE_PERSISTENT);
  cm_manager_set_mode(m, CM_MODE_DEDICATED);
  cm_handle_t e = RSV(m, 64);
  EXPECT_EQ(loc_of(m, e).pool, CM_DEDICATED_POOL);
  cm_manager_set_mode(m, CM_MODE_AUTO);
  EXPECT_EQ(cm_manager_mode(m), CM_MODE_PERSISTENT);
  cm_handle_t p = RSV(m, 64);
  EXPECT_EQ(loc_of(m, p).pool, CM_PERSISTENT_POOL);
  drop(&e);
  drop(&p);
  HEALTHY(m);
  cm_manager_destroy(m);
}

static void capture_keeps_persistent(void) {
  cm_manager_t *m = mk_sim(CM_PRESET_SUBSLICES, 0, CM_PERSISTENT_ENABLED);
  cm_manager_set_mode(m, CM_MODE_DEDICATED);
  cm_handle_t a = RSV(m, 64);
  cm_manager_capture_begin(m);
  EXPECT_EQ(cm_manager_mode(m), CM_MODE_PERSISTENT);
  drop(&a); /* freed during the capture: kept until it ends */
  cm_handle_t c = RSV(m, 64);
  EXPECT_EQ(loc_of(m, c).pool, CM_PERSISTENT_POOL);
  cm_manager_cleanup(m, true);
  EXPECT_EQ(dedicated_reserved(m), 64);
  cm_pins_t *pins = NULL;
  ASSERT_OK(cm_manager_capture_end(m, &pins));
  EXPECT_EQ(cm_manager_mode(m), CM_MODE_DEDICATED);
  cm_manager_cleanup(m, false);
  EXPECT_EQ(dedicated_reserved(m), 0);
  cm_pins_release(pins);
  drop(&c);
  cm_manager_set_mode(m, CM_MODE_AUTO);
  HEALTHY(m);
  cm_manager_destroy(m);
}

static void refused_and_retried(void) {
  cm_manager_t *m = mk_sim(CM_PRESET_SUBSLICES, 1 * MiB, CM_PERSISTENT_ENABLED);
  cm_manager_set_mode(m, CM_MODE_DEDICATED);
  cm_handle_t a = RSV(m, 768 * KiB);
  RSV_FAIL(m, 512 * KiB, CM_EOOM); /* the device refuses: nothing changes */
  EXPECT_EQ(usage(m).bytes_reserved, 768 * KiB);
  EXPECT_EQ(usage(m).number_allocs, 1);
  HEALTHY(m);
  /* freed and not yet given back: the reservation gives it back first */
  drop(&a);
  cm_handle_t b = RSV(m, 1 * MiB);
  EXPECT_EQ(usage(m).bytes_reserved, 1 * MiB);
  HEALTHY(m);
  drop(&b);
  cm_manager_destroy(m);
}

static void dry_run_is_lazy(void) {
  cm_manager_t *m = mk_sim(CM_PRESET_ADAPTIVE, 0, CM_PERSISTENT_ENABLED);
  cm_manager_set_mode(m, CM_MODE_DEDICATED);
  cm_manager_dry_run_begin(m);
  cm_handle_t a = RSV(m, 4096);
  cm_manager_dry_run_end(m);
  EXPECT_EQ(sstats(m).allocs, 0);
  EXPECT_EQ(report(m, CM_DEDICATED_POOL).pages_unmapped, 1);
  (void)storage_of(m, a);
  EXPECT_EQ(sstats(m).allocs, 1);
  EXPECT_EQ(report(m, CM_DEDICATED_POOL).pages_unmapped, 0);
  HEALTHY(m);
  drop(&a);
  cm_manager_cleanup(m, true);
  EXPECT_EQ(sstats(m).deallocs, 1);
  cm_manager_set_mode(m, CM_MODE_AUTO);
  cm_manager_destroy(m);
}

static void check_sees_the_dedicated_pool(void) {
  cm_manager_t *m = mk_sim(CM_PRESET_SUBSLICES, 0, CM_PERSISTENT_ENABLED);
  cm_manager_set_mode(m, CM_MODE_DEDICATED);
  cm_handle_t a = RSV(m, 4096);
  HEALTHY(m);
  m->dedicated->usage.bytes_in_use += 1;
  cm_diag_t d = {0};
  EXPECT(cm_manager_check(m, &d) > 0);
  EXPECT(strstr(d.message, "dedicated") != NULL);
  m->dedicated->usage.bytes_in_use -= 1;
  HEALTHY(m);
  drop(&a);
  cm_manager_destroy(m);
}

int main(void) {
  CM_RUN(own_allocation_each);
  CM_RUN(never_reused_given_back_on_the_tick);
  CM_RUN(windows_nest);
  CM_RUN(many_alternations);
  CM_RUN(fixed_persistent_settings);
  CM_RUN(capture_keeps_persistent);
  CM_RUN(refused_and_retried);
  CM_RUN(dry_run_is_lazy);
  CM_RUN(check_sees_the_dedicated_pool);
  return cm_test_finish();
}
