/*
 * test_subslices.c - the reference presets (spec §5.3) and SubSlices routing
 * (scenarios T46-T50 of §14).
 *
 * The preset ladders are checked row by row against the "Worked SubSlices
 * ladders" table of §5.3, and the ExclusivePages bucket lists against both
 * examples there, through cm_pools_preset. Routing is checked at every
 * boundary of the 128 MiB / 32 routing table with a manager over the sim
 * storage (no memory behind the 128 MiB pages); the usage scenarios use the
 * host storage. Exports: main (the test runner).
 */
#include <stdlib.h>
#include <string.h>

#include "cm_test.h"
#include "cubemem/memory.h"

#include "cm_scenario.h"

/* ---- preset lists ---------------------------------------------------------------- */

#define NONE UINT64_MAX /* "no dealloc period" in the expectations below */

typedef struct want {
  cm_pool_kind_t kind;
  uint64_t a;      /* sliced: page; exclusive: max_alloc_size */
  uint64_t b;      /* sliced: max_slice_size */
  uint64_t period; /* NONE = no period */
} want;

#define EXCL(max, period) \
  { CM_POOL_EXCLUSIVE, (max), 0, (period) }
#define SL(page, slice) \
  { CM_POOL_SLICED, (page), (slice), NONE }

static void expect_list(const cm_pool_options_t *got, size_t n, const want *w, size_t wn,
                        const char *what) {
  EXPECT_EQ(n, wn);
  if (n != wn) {
    cm_test_fail(__FILE__, __LINE__, "%s: %zu pools, expected %zu", what, n, wn);
    return;
  }
  for (size_t i = 0; i < n; i++) {
    const cm_pool_options_t *o = &got[i];
    bool ok = o->kind == w[i].kind;
    if (w[i].kind == CM_POOL_SLICED) {
      ok = ok && o->page_size == w[i].a && o->has_max_slice_size && o->max_slice_size == w[i].b &&
           !o->has_max_pool_size;
    } else {
      ok = ok && o->max_alloc_size == w[i].a;
    }
    if (w[i].period == NONE)
      ok = ok && !o->has_dealloc_period;
    else
      ok = ok && o->has_dealloc_period && o->dealloc_period == w[i].period;
    if (!ok)
      cm_test_fail(__FILE__, __LINE__,
                   "%s pool %zu: kind %d page %" PRIu64 " slice %" PRIu64 " max %" PRIu64
                   " period %s%" PRIu64 "; expected kind %d a=%" PRIu64 " b=%" PRIu64
                   " period %" PRIu64,
                   what, i, (int)o->kind, o->page_size, o->max_slice_size, o->max_alloc_size,
                   o->has_dealloc_period ? "" : "(none) ", o->dealloc_period, (int)w[i].kind,
                   w[i].a, w[i].b, w[i].period);
  }
}

static void check_preset(cm_preset_t preset, cm_device_props_t props, const want *w, size_t wn,
                         const char *what) {
  cm_pool_options_t out[64];
  size_t n = 0;
  ASSERT_OK(cm_pools_preset(preset, props, out, 64, &n));
  expect_list(out, n, w, wn, what);
}

#define CHECK_PRESET(preset, props, ...)                                   \
  do {                                                                     \
    static const want w_[] = {__VA_ARGS__};                                \
    check_preset((preset), (props), w_, sizeof w_ / sizeof w_[0], #props); \
  } while (0)

/* Every row of the "Worked SubSlices ladders" table. */
static void subslices_ladders(void) {
  cm_device_props_t p128_32 = {128 * MiB, 32}, p128_256 = {128 * MiB, 256},
                    p1g_256 = {1 * GiB, 256}, p2g_512 = {2 * GiB, 512}, p6g_512 = {6 * GiB, 512},
                    p20g_512 = {20 * GiB, 512};
  CHECK_PRESET(CM_PRESET_SUBSLICES, p128_32, EXCL(0, NONE), SL(8 * MiB, 2 * MiB),
               SL(32 * MiB, 16 * MiB), EXCL(128 * MiB, 5000));
  CHECK_PRESET(CM_PRESET_SUBSLICES, p128_256, EXCL(0, NONE), SL(8 * MiB, 2 * MiB),
               SL(32 * MiB, 16 * MiB), EXCL(128 * MiB, 5000));
  CHECK_PRESET(CM_PRESET_SUBSLICES, p1g_256, EXCL(0, NONE), SL(16 * MiB, 2 * MiB),
               SL(64 * MiB, 16 * MiB), SL(256 * MiB, 128 * MiB), EXCL(1 * GiB, 10000));
  CHECK_PRESET(CM_PRESET_SUBSLICES, p2g_512, EXCL(0, NONE), SL(8 * MiB, 512 * KiB),
               SL(32 * MiB, 4 * MiB), SL(128 * MiB, 32 * MiB), SL(512 * MiB, 256 * MiB),
               EXCL(2 * GiB, 15000));
  CHECK_PRESET(CM_PRESET_SUBSLICES, p6g_512, EXCL(0, NONE), SL(24 * MiB, 1536 * KiB),
               SL(96 * MiB, 12 * MiB), SL(384 * MiB, 96 * MiB), SL(1536 * MiB, 768 * MiB),
               EXCL(6 * GiB, 35000));
  CHECK_PRESET(CM_PRESET_SUBSLICES, p20g_512, EXCL(0, NONE), SL(20 * MiB, 640 * KiB),
               SL(80 * MiB, 5 * MiB), SL(320 * MiB, 40 * MiB), SL(1280 * MiB, 320 * MiB),
               SL(5 * GiB, 2560 * MiB), EXCL(20 * GiB, 105000));
}

/* Both ExclusivePages examples of §5.3 (24 buckets each, periods). */
static void exclusive_pages_buckets(void) {
  static const uint64_t b128[24] = {32768,    47072,    67552,    96992,    139232,   199872,
                                    286976,   411968,   591456,   849152,   1219136,  1750272,
                                    2512832,  3607616,  5179392,  7435968,  10675712, 15326944,
                                    22004640, 31591744, 45355776, 65116608, 93486912, 134217728};
  static const uint64_t b6g[24] = {
      32768,     55808,     94720,     160768,    273408,     463872,     787968,     1338368,
      2273792,   3862528,   6561792,   11147776,  18937856,   32172544,   54657024,   92853760,
      157745152, 267985920, 455269376, 773436928, 1313957888, 2232225280, 3792229376, 6442450944};
  want w[24];
  for (int i = 0; i < 24; i++) w[i] = (want){CM_POOL_EXCLUSIVE, b128[i], 0, 5000};
  check_preset(CM_PRESET_EXCLUSIVE_PAGES, D, w, 24, "ExclusivePages 128 MiB / 32");
  static const uint64_t per6g[24] = {5000, 5000, 5000, 5000,  5000,  5000,  5000,  5000,
                                     5000, 5000, 5000, 5000,  5000,  5000,  5000,  5000,
                                     5000, 5000, 5000, 10000, 10000, 15000, 25000, 35000};
  for (int i = 0; i < 24; i++) w[i] = (want){CM_POOL_EXCLUSIVE, b6g[i], 0, per6g[i]};
  cm_device_props_t p6g = {6 * GiB, 512};
  check_preset(CM_PRESET_EXCLUSIVE_PAGES, p6g, w, 24, "ExclusivePages 6 GiB / 512");
}

/* cm_pools_preset reports the count also when the buffer is too small. */
static void preset_small_buffer(void) {
  cm_pool_options_t out[2];
  memset(out, 0xAB, sizeof out);
  size_t n = 0;
  EXPECT_STATUS(cm_pools_preset(CM_PRESET_SUBSLICES, D, out, 2, &n), CM_EINVAL);
  EXPECT_EQ(n, 4);
  EXPECT_STATUS(cm_pools_preset(CM_PRESET_EXCLUSIVE_PAGES, D, NULL, 0, &n), CM_EINVAL);
  EXPECT_EQ(n, 24);
  /* The default preset is valid for D and fits a manager. */
  cm_pool_options_t big[CM_MAX_DYNAMIC_POOLS];
  ASSERT_OK(cm_pools_preset(CM_PRESET_DEFAULT, D, big, CM_MAX_DYNAMIC_POOLS, &n));
  EXPECT_GE(n, 1);
  EXPECT_LE(n, CM_MAX_DYNAMIC_POOLS);
}

/* A manager built from the preset carries exactly the preset's list. */
static void manager_uses_preset(void) {
  cm_manager_t *m = mk_preset(D, CM_PRESET_SUBSLICES);
  ASSERT_EQ(cm_manager_pool_count(m), 4);
  EXPECT_EQ(report(m, 0).options.kind, CM_POOL_EXCLUSIVE);
  EXPECT_EQ(report(m, 0).options.max_alloc_size, 0);
  EXPECT_EQ(report(m, 1).options.page_size, 8 * MiB);
  EXPECT_EQ(report(m, 1).options.max_slice_size, 2 * MiB);
  EXPECT_EQ(report(m, 2).options.page_size, 32 * MiB);
  EXPECT_EQ(report(m, 2).options.max_slice_size, 16 * MiB);
  EXPECT_EQ(report(m, 3).options.max_alloc_size, 128 * MiB);
  cm_pool_report_t r;
  EXPECT_STATUS(cm_manager_pool_report(m, 4, &r), CM_EINVAL);
  cm_manager_destroy(m);
}

/* ---- T46-T48: routing ------------------------------------------------------------- */

/* T46 (M): the routing table of §5.3 at every listed boundary. */
static void t46_routing_table(void) {
  static const struct {
    uint64_t size;
    int pool;
  } rows[] = {
      {0, 0},        {1, 1},        {2097152, 1},  {2097153, 2},  {6710886, 2},
      {6710887, 1},  {8388608, 1},  {8388609, 2},  {16777216, 2}, {16777217, 3},
      {26843545, 3}, {26843546, 2}, {33554432, 2}, {33554433, 3}, {134217728, 3},
  };
  cm_manager_t *m = mk_full(sim(0, false), D, NULL, 0, CM_PRESET_SUBSLICES, CM_PERSISTENT_ENABLED);
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    cm_handle_t h = RSV(m, rows[i].size);
    cm_location_t loc = loc_of(m, h);
    if (loc.pool != rows[i].pool)
      cm_test_fail(__FILE__, __LINE__, "size %" PRIu64 " went to pool %u, expected %d",
                   rows[i].size, loc.pool, rows[i].pool);
    drop(&h);
  }
  RSV_FAIL(m, 134217729, CM_ETOOBIG);
  EXPECT_EQ(usage(m).number_allocs, 0);
  EXPECT_EQ(usage(m).bytes_in_use, 0);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* T47 (M): zero bytes go to pool 0 and each makes a (zero-byte) page. */
static void t47_zero_bytes(void) {
  cm_manager_t *m = mk_preset(D, CM_PRESET_SUBSLICES);
  cm_handle_t a = RSV(m, 0);
  EXPECT_EQ(loc_of(m, a).pool, 0);
  EXPECT_EQ(sstats(m).allocs, 1);
  EXPECT_USAGE(m, 1, 0, 0, 0);
  cm_handle_t b = RSV(m, 0);
  EXPECT_EQ(loc_of(m, b).pool, 0);
  EXPECT_EQ(pages(m, 0), 2);
  EXPECT_USAGE(m, 2, 0, 0, 0);
  EXPECT_EQ(storage_of(m, b).size, 0);
  drop(&a);
  drop(&b);
  EXPECT_USAGE(m, 0, 0, 0, 0);
  /* A freed zero-byte page is reused. */
  a = RSV(m, 0);
  EXPECT_EQ(pages(m, 0), 2);
  EXPECT_EQ(sstats(m).allocs, 2);
  drop(&a);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* T48 (M): one byte over max_page_size is too big for every pool. */
static void t48_too_big(void) {
  cm_manager_t *m = mk_preset(D, CM_PRESET_SUBSLICES);
  cm_handle_t h = {0};
  cm_diag_t diag = {0};
  EXPECT_STATUS(cm_manager_reserve(m, 134217729, &h, &diag), CM_ETOOBIG);
  EXPECT(h.d == NULL);
  EXPECT_CONTAINS(diag.message, "134217729");
  EXPECT_USAGE(m, 0, 0, 0, 0);
  EXPECT_EQ(sstats(m).allocs, 0);
  cm_manager_destroy(m);
}

/* ---- T49-T50: reuse ---------------------------------------------------------------- */

/* T49 (R+M): same sizes again after a drop: same counts, no growth. */
static void t49_reuse_same_sizes(void) {
  cm_manager_t *m = mk_preset(D, CM_PRESET_SUBSLICES);
  cm_handle_t h[5];
  for (int i = 0; i < 5; i++) h[i] = RSV(m, 1000 * (uint64_t)(i + 1));
  EXPECT_USAGE(m, 5, 15000, 72, 8388608);
  cm_usage_t before = usage(m);
  for (int i = 0; i < 5; i++) drop(&h[i]);
  for (int i = 0; i < 5; i++) h[i] = RSV(m, 1000 * (uint64_t)(i + 1));
  cm_usage_t after = usage(m);
  EXPECT_EQ(after.number_allocs, before.number_allocs);
  EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
  EXPECT_LE(after.bytes_reserved, before.bytes_reserved);
  EXPECT_USAGE(m, 5, 15000, 72, 8388608);
  for (int i = 0; i < 5; i++) drop(&h[i]);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* T50 (R): more small allocations without freeing stay in the same page. */
static void t50_no_growth_for_small(void) {
  cm_manager_t *m = mk_preset(D, CM_PRESET_SUBSLICES);
  static const uint64_t first[7] = {50, 1000, 100, 5000, 200, 10000, 300};
  static const uint64_t again[3] = {50, 1000, 100};
  cm_handle_t h[10];
  for (int i = 0; i < 7; i++) h[i] = RSV(m, first[i]);
  uint64_t r1 = usage(m).bytes_reserved;
  EXPECT_EQ(r1, 8388608);
  for (int i = 0; i < 3; i++) h[7 + i] = RSV(m, again[i]);
  uint64_t r2 = usage(m).bytes_reserved;
  EXPECT_LE(r2 * 10, r1 * 11);
  EXPECT_EQ(r2, 8388608);
  for (int i = 0; i < 10; i++) drop(&h[i]);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

int main(void) {
  CM_RUN(subslices_ladders);
  CM_RUN(exclusive_pages_buckets);
  CM_RUN(preset_small_buffer);
  CM_RUN(manager_uses_preset);
  CM_RUN(t46_routing_table);
  CM_RUN(t47_zero_bytes);
  CM_RUN(t48_too_big);
  CM_RUN(t49_reuse_same_sizes);
  CM_RUN(t50_no_growth_for_small);
  return cm_test_finish();
}
