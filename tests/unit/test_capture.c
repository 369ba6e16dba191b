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

/* ---- shared helpers (each test file carries its own copy) ------------------- */

#define UNUSED __attribute__((unused))
#define KiB (1024ull)
#define MiB (1024ull * 1024ull)
#define GiB (1024ull * MiB)

/* The spec's test constant D. */
static const cm_device_props_t D = {128 * MiB, 32};

static UNUSED cm_pool_options_t sliced(uint64_t page, uint64_t max_slice) {
  cm_pool_options_t o;
  memset(&o, 0, sizeof o);
  o.kind = CM_POOL_SLICED;
  o.page_size = page;
  o.max_slice_size = max_slice;
  o.has_max_slice_size = true;
  return o;
}

static UNUSED cm_pool_options_t sliced_cap(uint64_t page, uint64_t max_slice, uint64_t cap) {
  cm_pool_options_t o = sliced(page, max_slice);
  o.max_pool_size = cap;
  o.has_max_pool_size = true;
  return o;
}

static UNUSED cm_pool_options_t exclusive(uint64_t max_alloc) {
  cm_pool_options_t o;
  memset(&o, 0, sizeof o);
  o.kind = CM_POOL_EXCLUSIVE;
  o.max_alloc_size = max_alloc;
  return o;
}

static UNUSED cm_pool_options_t exclusive_p(uint64_t max_alloc, uint64_t period) {
  cm_pool_options_t o = exclusive(max_alloc);
  o.dealloc_period = period;
  o.has_dealloc_period = true;
  return o;
}

static UNUSED cm_pool_options_t direct(void) {
  cm_pool_options_t o;
  memset(&o, 0, sizeof o);
  o.kind = CM_POOL_DIRECT;
  return o;
}

static UNUSED cm_pool_options_t direct_at(uint64_t reclaim_at) {
  cm_pool_options_t o = direct();
  o.reclaim_at = reclaim_at;
  o.has_reclaim_at = true;
  return o;
}

/* A manager over `s` (NULL = a new immediate-free host storage). */
static UNUSED cm_manager_t *mk_full(cm_storage_t *s, cm_device_props_t props,
                                    const cm_pool_options_t *pools, size_t n, cm_preset_t preset,
                                    cm_persistent_memory_t pm) {
  if (!s) ASSERT_OK(cm_storage_host_create(0, &s));
  cm_manager_config_t cfg;
  cm_manager_config_init(&cfg);
  cfg.props = props;
  cfg.pools = pools;
  cfg.pool_count = n;
  cfg.preset = preset;
  cfg.persistent_memory = pm;
  cm_manager_t *m = NULL;
  cm_diag_t diag = {0};
  int rc = cm_manager_create(s, &cfg, &m, &diag);
  if (rc != CM_OK) {
    cm_storage_destroy(s);
    CM__FAIL_AND(1, "cm_manager_create: %d %s", rc, diag.message);
  }
  return m;
}

static UNUSED cm_manager_t *mk(cm_device_props_t props, const cm_pool_options_t *pools, size_t n) {
  return mk_full(NULL, props, pools, n, CM_PRESET_DEFAULT, CM_PERSISTENT_ENABLED);
}

static UNUSED cm_manager_t *mk_preset(cm_device_props_t props, cm_preset_t preset) {
  return mk_full(NULL, props, NULL, 0, preset, CM_PERSISTENT_ENABLED);
}

static UNUSED cm_storage_t *sim(uint64_t capacity, bool fail) {
  cm_storage_t *s = NULL;
  ASSERT_OK(cm_storage_sim_create(capacity, fail, 0, &s));
  return s;
}

#define EXPECT_USAGE(m, n, in_use, pad, reserved) \
  do {                                            \
    cm_usage_t u_;                                \
    cm_manager_usage((m), &u_);                   \
    EXPECT_EQ(u_.number_allocs, (n));             \
    EXPECT_EQ(u_.bytes_in_use, (in_use));         \
    EXPECT_EQ(u_.bytes_padding, (pad));           \
    EXPECT_EQ(u_.bytes_reserved, (reserved));     \
  } while (0)

#define EXPECT_POOL_USAGE(m, pool, n, in_use, pad, reserved) \
  do {                                                       \
    cm_pool_report_t r_;                                     \
    ASSERT_OK(cm_manager_pool_report((m), (pool), &r_));     \
    EXPECT_EQ(r_.usage.number_allocs, (n));                  \
    EXPECT_EQ(r_.usage.bytes_in_use, (in_use));              \
    EXPECT_EQ(r_.usage.bytes_padding, (pad));                \
    EXPECT_EQ(r_.usage.bytes_reserved, (reserved));          \
  } while (0)

#define EXPECT_HEALTHY(m) EXPECT_EQ(cm_manager_check((m), NULL), 0)

/* reserve that must succeed (stops the test otherwise). */
#define RSV(m, size) rsv_((m), (size), __LINE__)
static UNUSED cm_handle_t rsv_(cm_manager_t *m, uint64_t size, int line) {
  cm_handle_t h = {0};
  cm_diag_t diag = {0};
  int rc = cm_manager_reserve(m, size, &h, &diag);
  if (rc != CM_OK)
    CM__FAIL_AND(1, "line %d: reserve(%" PRIu64 "): %s %s", line, size, cm_err_name(rc),
                 diag.message);
  if (!h.d) CM__FAIL_AND(1, "line %d: reserve(%" PRIu64 ") gave an empty handle", line, size);
  return h;
}

/* reserve that must fail with `code`; checks the handle stays empty. */
#define RSV_FAIL(m, size, status)                                       \
  do {                                                                  \
    cm_handle_t hf_ = {0};                                              \
    cm_diag_t df_ = {0};                                                \
    EXPECT_STATUS(cm_manager_reserve((m), (size), &hf_, &df_), status); \
    EXPECT(hf_.d == NULL);                                              \
    EXPECT_STATUS(df_.code, status);                                    \
    EXPECT(df_.message[0] != '\0');                                     \
    cm_handle_release(hf_);                                             \
  } while (0)

static UNUSED cm_pool_report_t report(cm_manager_t *m, size_t pool) {
  cm_pool_report_t r;
  memset(&r, 0, sizeof r);
  ASSERT_OK(cm_manager_pool_report(m, pool, &r));
  return r;
}

static UNUSED uint64_t pages(cm_manager_t *m, size_t pool) { return report(m, pool).pages; }

static UNUSED cm_location_t loc_of(cm_manager_t *m, cm_handle_t h) {
  cm_location_t loc;
  memset(&loc, 0, sizeof loc);
  cm_binding_t b = cm_handle_binding(h);
  cm_diag_t diag = {0};
  int rc = cm_manager_find(m, b, &loc, &diag);
  cm_binding_release(b);
  if (rc != CM_OK) CM__FAIL_AND(1, "find: %s %s", cm_err_name(rc), diag.message);
  return loc;
}

static UNUSED cm_storage_handle_t storage_of(cm_manager_t *m, cm_handle_t h) {
  cm_storage_handle_t sh;
  memset(&sh, 0, sizeof sh);
  cm_binding_t b = cm_handle_binding(h);
  cm_diag_t diag = {0};
  int rc = cm_manager_get_storage(m, b, &sh, &diag);
  cm_binding_release(b);
  if (rc != CM_OK) CM__FAIL_AND(1, "get_storage: %s %s", cm_err_name(rc), diag.message);
  return sh;
}

static UNUSED cm_storage_stats_t sstats(cm_manager_t *m) {
  cm_storage_stats_t st;
  cm_storage_stats(cm_manager_storage(m), &st);
  return st;
}

static UNUSED cm_usage_t usage(cm_manager_t *m) {
  cm_usage_t u;
  cm_manager_usage(m, &u);
  return u;
}

static UNUSED void drop(cm_handle_t *h) {
  cm_handle_release(*h);
  h->d = NULL;
}

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
