/*
 * test_storage_counters.c - the counter lists of cubemem/storage_counters.h
 * and the helpers generated from them: cm_storage_stats_diff differences
 * every call, count and time by driver call and keeps levels and peaks;
 * cm_storage_stats_driver_calls sums the driver calls of every kind and
 * nothing else; the lists name each field once.
 */
#include <string.h>

#include "cm_test.h"
#include "cubemem/storage.h"

/* A snapshot whose every uint64_t field holds base + its index. */
static cm_storage_stats_t numbered(uint64_t base) {
  cm_storage_stats_t s;
  uint64_t v[sizeof s / sizeof(uint64_t)];
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) v[i] = base + i;
  memcpy(&s, v, sizeof s);
  return s;
}

static void diff_differences_counts_and_keeps_levels(void) {
  cm_storage_stats_t a = numbered(100), b = numbered(1000);
  cm_storage_stats_t d = cm_storage_stats_diff(&a, &b);
#define CHECK_DIFF(f, ...) EXPECT_EQ(d.f, 900);
  CM_STORAGE_CALLS(CHECK_DIFF)
  CM_STORAGE_COUNTS(CHECK_DIFF)
#undef CHECK_DIFF
#define CHECK_DIFF(f, key) EXPECT_EQ(d.call_ns.f, 900);
  CM_CALL_TIMES(CHECK_DIFF)
#undef CHECK_DIFF
#define CHECK_KEPT(f) EXPECT_EQ(d.f, b.f);
  CM_STORAGE_LEVELS(CHECK_KEPT)
  CM_STORAGE_PEAKS(CHECK_KEPT)
#undef CHECK_KEPT
  EXPECT_EQ(d.bytes_held, b.bytes_held);
  EXPECT_EQ(d.bytes_held_peak, b.bytes_held_peak);
  EXPECT_EQ(d.copies, 900);
  EXPECT_EQ(d.call_ns.syncs, 900);
  cm_storage_stats_t z = cm_storage_stats_diff(NULL, &b);
  EXPECT_EQ(z.allocs, 0);
  EXPECT_EQ(z.bytes_held, 0);
}

static void lists_name_each_field_once(void) {
  /* every field differenced or kept: a snapshot minus itself is zero except
   * for the levels and peaks, which are 1 here */
  cm_storage_stats_t one;
  uint64_t v[sizeof one / sizeof(uint64_t)];
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) v[i] = 1;
  memcpy(&one, v, sizeof one);
  cm_storage_stats_t d = cm_storage_stats_diff(&one, &one);
  memcpy(v, &d, sizeof d);
  uint64_t ones = 0;
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) ones += v[i];
#define ONE(...) +1
  EXPECT_EQ(ones, 0 CM_STORAGE_LEVELS(ONE) CM_STORAGE_PEAKS(ONE));
  EXPECT_EQ(0 CM_STORAGE_CALLS(ONE), 10);
  EXPECT_EQ(0 CM_CALL_TIMES(ONE), 11);
#undef ONE
}

static void driver_calls_sum_the_calls_only(void) {
  cm_storage_stats_t s;
  memset(&s, 0, sizeof s);
  s.allocs = 1;
  s.deallocs = 2;
  s.creates = 4;
  s.map_calls = 8;
  s.set_access = 16;
  s.unmap_calls = 32;
  s.releases = 64;
  s.reserves = 128;
  s.address_frees = 256;
  s.mem_queries = 512;
  s.maps = 1000; /* operations, not calls */
  s.gets = 1000;
  s.copies = 1000;
  s.call_ns.creates = 1000;
  EXPECT_EQ(cm_storage_stats_driver_calls(&s), 1023);
  EXPECT_EQ(cm_storage_stats_driver_calls(NULL), 0);
}

static void real_storage_diff(void) {
  cm_storage_t *st = NULL;
  ASSERT_OK(cm_storage_sim_create(0, false, 0, &st));
  uint64_t id;
  ASSERT_OK(cm_storage_alloc(st, 4096, &id, NULL));
  cm_storage_stats_t a, b;
  cm_storage_stats(st, &a);
  uint64_t id2;
  ASSERT_OK(cm_storage_alloc(st, 8192, &id2, NULL));
  cm_storage_dealloc(st, id, 4096);
  cm_storage_stats(st, &b);
  cm_storage_stats_t d = cm_storage_stats_diff(&a, &b);
  EXPECT_EQ(d.allocs, 1);
  EXPECT_EQ(d.deallocs, 1);
  EXPECT_EQ(d.bytes_held, 8192);
  EXPECT_EQ(d.bytes_held_peak, 12288);
  EXPECT_EQ(cm_storage_stats_driver_calls(&d), 2);
  cm_storage_dealloc(st, id2, 8192);
  cm_storage_destroy(st);
}

int main(void) {
  CM_RUN(diff_differences_counts_and_keeps_levels);
  CM_RUN(lists_name_each_field_once);
  CM_RUN(driver_calls_sum_the_calls_only);
  CM_RUN(real_storage_diff);
  return cm_test_finish();
}
