/*
 * test_page_updates.c - per-reservation page-update restrictions
 * (cm_manager_reserve_restricted: CM_PAGES_ALLOW, CM_PAGES_ADD_ONLY,
 * CM_PAGES_FORBIDDEN): FORBIDDEN serves only held room (dynamic, persistent)
 * and refuses otherwise without a device call; restricted calls take in no
 * queued release, run no periodic cleanup, give no dedicated allocation
 * back, retry nothing after an out-of-memory device, keep a direct pool's
 * free slots past its watermark and an adaptive pool's empty pages across a
 * growth; the next unrestricted call does what was held back. Every step
 * checks the manager's invariants. Exports: main (the test runner).
 */
#include <stdlib.h>
#include <string.h>

#include "cm_test.h"
#include "cubemem/memory.h"

#include "cm_scenario.h"

#define HEALTHY(m) healthy_((m), __LINE__)
static void healthy_(cm_manager_t *m, int line) {
  cm_diag_t d = {0};
  size_t bad = cm_manager_check(m, &d);
  if (bad) cm_test_fail(__FILE__, line, "%zu invariant violation(s): %s", bad, d.message);
}

static const cm_device_props_t P = {64 * MiB, 512};

/* A restricted reservation expected to succeed. */
#define RSV_R(m, size, up) rsv_r_((m), (size), (up), __LINE__)
static cm_handle_t rsv_r_(cm_manager_t *m, uint64_t size, cm_page_updates_t up, int line) {
  cm_handle_t h = {0};
  cm_diag_t d = {0};
  int rc = cm_manager_reserve_restricted(m, size, up, &h, &d);
  if (rc != CM_OK)
    CM__FAIL_AND(1, "line %d: reserve_restricted(%" PRIu64 ", %d): %s %s", line, size, (int)up,
                 cm_err_name(rc), d.message);
  return h;
}

/* A restricted reservation expected to fail with `status`. */
static void rsv_r_fail(cm_manager_t *m, uint64_t size, cm_page_updates_t up, int status) {
  cm_handle_t h = {0};
  cm_diag_t d = {0};
  EXPECT_STATUS(cm_manager_reserve_restricted(m, size, up, &h, &d), status);
  EXPECT(h.d == NULL);
  EXPECT(d.message[0] != '\0');
  if (status == CM_EBUSY) EXPECT(strstr(d.message, "CM_PAGES_FORBIDDEN") != NULL);
}

static cm_manager_t *mk_layout(const char *text, uint64_t capacity) {
  cm_pool_options_t o[8];
  size_t n = 0;
  cm_diag_t d = {0};
  if (cm_pools_parse(text, P, o, 8, &n, &d) != CM_OK) CM__FAIL_AND(1, "parse: %s", d.message);
  return mk_full(sim(capacity, true), P, o, n, CM_PRESET_DEFAULT, CM_PERSISTENT_ENABLED);
}

static void bad_value(void) {
  cm_manager_t *m = mk_preset(P, CM_PRESET_ADAPTIVE);
  cm_handle_t h = {(cm_desc_t *)1};
  cm_diag_t d = {0};
  EXPECT_STATUS(cm_manager_reserve_restricted(m, 64, (cm_page_updates_t)3, &h, &d), CM_EINVAL);
  EXPECT(h.d == NULL);
  EXPECT(strstr(d.message, "CM_PAGES_ADD_ONLY") != NULL);
  EXPECT_STATUS(cm_manager_reserve_restricted(NULL, 64, CM_PAGES_ALLOW, &h, &d), CM_EINVAL);
  cm_handle_t a = RSV_R(m, 64, CM_PAGES_ALLOW); /* ALLOW is a plain reservation */
  EXPECT_EQ(usage(m).number_allocs, 1);
  drop(&a);
  HEALTHY(m);
  cm_manager_destroy(m);
}

static void forbidden_only_held_room(void) {
  cm_manager_t *m = mk_full(sim(0, true), P, NULL, 0, CM_PRESET_ADAPTIVE, CM_PERSISTENT_ENABLED);
  rsv_r_fail(m, 100 * KiB, CM_PAGES_FORBIDDEN, CM_EBUSY); /* nothing held yet */
  EXPECT_EQ(sstats(m).allocs, 0);
  EXPECT_EQ(usage(m).number_allocs, 0);
  cm_handle_t a = RSV(m, 100 * KiB); /* a 2 MiB page */
  cm_handle_t b = RSV_R(m, 1 * MiB, CM_PAGES_FORBIDDEN);
  EXPECT_EQ(storage_of(m, b).id, storage_of(m, a).id);
  EXPECT_EQ(sstats(m).allocs, 1);
  rsv_r_fail(m, 1 * MiB, CM_PAGES_FORBIDDEN, CM_EBUSY); /* 0.9 MiB left */
  rsv_r_fail(m, 4 * MiB, CM_PAGES_FORBIDDEN, CM_EBUSY); /* would grow the page size */
  EXPECT_EQ(report(m, 2).options.page_size, 2 * MiB);
  /* a release waits for an unrestricted call before it is room */
  drop(&b);
  rsv_r_fail(m, 1 * MiB, CM_PAGES_FORBIDDEN, CM_EBUSY);
  EXPECT_EQ(usage(m).number_allocs, 1); /* a manager call: takes the release in */
  cm_handle_t c = RSV_R(m, 1 * MiB, CM_PAGES_FORBIDDEN);
  EXPECT_EQ(storage_of(m, c).id, storage_of(m, a).id);
  HEALTHY(m);
  drop(&a);
  drop(&c);
  cm_manager_destroy(m);
  /* a later accepting pool's held room serves it too */
  m = mk_layout("sliced:page=64KiB,cap=64KiB;direct", 0);
  cm_handle_t s0 = RSV(m, 60 * KiB); /* the capped sliced pool's one page */
  cm_handle_t d0 = RSV(m, 48 * KiB); /* spills to the direct pool */
  EXPECT_EQ(loc_of(m, d0).pool, 1);
  drop(&d0);
  (void)usage(m);
  cm_handle_t d1 = RSV_R(m, 48 * KiB, CM_PAGES_FORBIDDEN); /* the direct pool's free slot */
  EXPECT_EQ(loc_of(m, d1).pool, 1);
  EXPECT_EQ(sstats(m).allocs, 2);
  HEALTHY(m);
  drop(&d1);
  drop(&s0);
  cm_manager_destroy(m);
}

static void forbidden_in_windows(void) {
  cm_manager_t *m = mk_preset(P, CM_PRESET_ADAPTIVE);
  cm_handle_t dyn = RSV(m, 100 * KiB); /* dynamic room exists */
  cm_manager_set_mode(m, CM_MODE_PERSISTENT);
  rsv_r_fail(m, 4096, CM_PAGES_FORBIDDEN, CM_EBUSY); /* no persistent slice: not dynamic */
  cm_handle_t w = RSV(m, 4096);
  drop(&w);
  (void)usage(m);
  cm_handle_t w2 = RSV_R(m, 4096, CM_PAGES_FORBIDDEN);
  EXPECT_EQ(loc_of(m, w2).pool, CM_PERSISTENT_POOL);
  cm_manager_set_mode(m, CM_MODE_AUTO);
  cm_manager_set_mode(m, CM_MODE_DEDICATED);
  rsv_r_fail(m, 4096, CM_PAGES_FORBIDDEN, CM_EBUSY); /* a dedicated one always allocates */
  EXPECT_EQ(report(m, CM_DEDICATED_POOL).pages, 0);
  cm_manager_set_mode(m, CM_MODE_AUTO);
  HEALTHY(m);
  drop(&w2);
  drop(&dyn);
  cm_manager_destroy(m);
}

static void add_only_skips_the_cleanup(void) {
  cm_manager_t *m = mk_layout("exclusive:max=0;sliced:page=64KiB,period=5", 0);
  cm_handle_t a = RSV(m, 1 * KiB);
  drop(&a);
  EXPECT_EQ(pages(m, 1), 1);
  EXPECT_EQ(usage(m).number_allocs, 0); /* taken in: the page is empty now */
  cm_handle_t z[12];
  for (int i = 0; i < 12; i++) z[i] = RSV_R(m, 0, CM_PAGES_ADD_ONLY);
  EXPECT_EQ(pages(m, 1), 1); /* the due periodic release did not run */
  cm_handle_t y = RSV(m, 0);
  EXPECT_EQ(pages(m, 1), 0); /* it runs in the next unrestricted reservation */
  HEALTHY(m);
  for (int i = 0; i < 12; i++) drop(&z[i]);
  drop(&y);
  cm_manager_destroy(m);
}

static void add_only_no_release_and_retry(void) {
  cm_manager_t *m = mk_layout("direct", 1 * MiB);
  cm_handle_t a = RSV(m, 512 * KiB);
  drop(&a);
  (void)usage(m); /* a free 512 KiB slot stays held */
  cm_handle_t h = {0};
  cm_diag_t d = {0};
  EXPECT_STATUS(cm_manager_reserve_restricted(m, 768 * KiB, CM_PAGES_ADD_ONLY, &h, &d), CM_EOOM);
  EXPECT_EQ(usage(m).bytes_reserved, 512 * KiB);
  HEALTHY(m);
  cm_handle_t b = RSV(m, 768 * KiB); /* unrestricted: released and retried */
  EXPECT_EQ(usage(m).bytes_reserved, 768 * KiB);
  drop(&b);
  cm_manager_destroy(m);
  /* the reclaim watermark waits as well */
  m = mk_layout("direct:reclaim=1MiB", 0);
  a = RSV(m, 512 * KiB);
  drop(&a);
  (void)usage(m);
  cm_handle_t c = RSV_R(m, 768 * KiB, CM_PAGES_ADD_ONLY);
  EXPECT_EQ(usage(m).bytes_reserved, 512 * KiB + 768 * KiB);
  drop(&c);
  (void)usage(m);
  cm_handle_t e = RSV(m, 600 * KiB); /* unrestricted: the watermark gives slots back */
  EXPECT_LE(usage(m).bytes_reserved, 1 * MiB);
  HEALTHY(m);
  drop(&e);
  cm_manager_destroy(m);
}

static void add_only_keeps_adaptive_pages(void) {
  cm_manager_t *m = mk_preset(P, CM_PRESET_ADAPTIVE);
  cm_handle_t a = RSV(m, 100 * KiB);
  cm_handle_t full = RSV(m, 2 * MiB);
  drop(&full);
  EXPECT_EQ(usage(m).bytes_reserved, 4 * MiB); /* one page empty */
  cm_handle_t g = RSV_R(m, 3 * MiB, CM_PAGES_ADD_ONLY); /* grows to 4 MiB pages */
  cm_pool_report_t r = report(m, 2);
  EXPECT_EQ(r.options.page_size, 4 * MiB);
  EXPECT_EQ(r.outdated_pages, 2); /* the empty page was kept */
  EXPECT_EQ(usage(m).bytes_reserved, 2 * MiB + 2 * MiB + 4 * MiB);
  HEALTHY(m);
  cm_manager_cleanup(m, false); /* an unrestricted call gives it back */
  EXPECT_EQ(report(m, 2).outdated_pages, 1);
  EXPECT_EQ(usage(m).bytes_reserved, 2 * MiB + 4 * MiB);
  HEALTHY(m);
  drop(&a);
  drop(&g);
  cm_manager_destroy(m);
}

static void add_only_keeps_dedicated(void) {
  cm_manager_t *m = mk_full(sim(0, true), P, NULL, 0, CM_PRESET_ADAPTIVE, CM_PERSISTENT_ENABLED);
  cm_manager_set_mode(m, CM_MODE_DEDICATED);
  cm_handle_t a = RSV(m, 4096);
  drop(&a);
  (void)usage(m);
  cm_handle_t b = RSV_R(m, 4096, CM_PAGES_ADD_ONLY); /* allocates, gives nothing back */
  EXPECT_EQ(sstats(m).allocs, 2);
  EXPECT_EQ(sstats(m).deallocs, 0);
  cm_handle_t c = RSV(m, 4096);
  EXPECT_EQ(sstats(m).deallocs, 1);
  cm_manager_set_mode(m, CM_MODE_AUTO);
  HEALTHY(m);
  drop(&b);
  drop(&c);
  cm_manager_destroy(m);
}

int main(void) {
  CM_RUN(bad_value);
  CM_RUN(forbidden_only_held_room);
  CM_RUN(forbidden_in_windows);
  CM_RUN(add_only_skips_the_cleanup);
  CM_RUN(add_only_no_release_and_retry);
  CM_RUN(add_only_keeps_adaptive_pages);
  CM_RUN(add_only_keeps_dedicated);
  return cm_test_finish();
}
