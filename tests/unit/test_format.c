/*
 * test_format.c - human-readable output (spec §5.11, §9.1, §9.3; scenario
 * T82 of §14): cm_format_bytes (BytesFormat), cm_usage_display and
 * cm_manager_display.
 *
 * BytesFormat is checked on every example of §9.3. The usage display is
 * checked line by line (BytesFormat values, 2-decimal percentages, NaN% for a
 * zero denominator as in the reference). The manager display is checked for
 * its content and order: the headings, the name, the persistent buckets, one
 * block per dynamic pool kind (sliced pages, exclusive pages, direct slices)
 * and the summary, plus the rules for empty pools. All three functions
 * follow snprintf semantics. Exports: main (the test runner).
 */
#include <stdlib.h>
#include <string.h>

#include "cm_test.h"
#include "cubemem/memory.h"

#include "cm_scenario.h"

/* ---- helpers of this file ----------------------------------------------- */

static const char *fmt(uint64_t b) {
  static char buf[64];
  size_t n = cm_format_bytes(b, buf, sizeof buf);
  if (n != strlen(buf)) cm_test_fail(__FILE__, __LINE__, "length %zu for \"%s\"", n, buf);
  return buf;
}

/* T82 (C): the BytesFormat examples of §9.3. */

static void t82_format_bytes(void) {
  EXPECT_STR(fmt(0), "0 B");
  EXPECT_STR(fmt(999), "999 B");
  EXPECT_STR(fmt(1000), "1.00 KB");
  EXPECT_STR(fmt(1024), "1.02 KB");
  EXPECT_STR(fmt(999999), "1000.00 KB");
  EXPECT_STR(fmt(1048576), "1.05 MB");
  EXPECT_STR(fmt(134217728), "134.22 MB");
  EXPECT_STR(fmt(6442450944ull), "6.44 GB");
  EXPECT_STR(fmt(1500000000000ull), "1.50 TB");
  EXPECT_STR(fmt(UINT64_MAX), "18.45 EB");
  /* snprintf semantics */
  char small[4];
  EXPECT_EQ(cm_format_bytes(134217728, small, sizeof small), strlen("134.22 MB"));
  EXPECT_STR(small, "134");
  EXPECT_EQ(cm_format_bytes(999, NULL, 0), 5);
}

static const char *usage_text(uint64_t n, uint64_t in_use, uint64_t pad, uint64_t res) {
  static char buf[1024];
  cm_usage_t u = {n, in_use, pad, res};
  size_t len = cm_usage_display(&u, buf, sizeof buf);
  if (len != strlen(buf)) cm_test_fail(__FILE__, __LINE__, "length %zu", len);
  return buf;
}

/* T82 (C): the usage display; all zeros gives NaN% for both ratios [REF]. */
static void t82_usage_display_zero(void) {
  const char *t = usage_text(0, 0, 0, 0);
  EXPECT_CONTAINS(t, "Memory Usage Report:");
  EXPECT_CONTAINS(t, "  Number of allocations: 0\n");
  EXPECT_CONTAINS(t, "  Bytes in use: 0 B\n");
  EXPECT_CONTAINS(t, "  Bytes used for padding: 0 B\n");
  EXPECT_CONTAINS(t, "  Total bytes reserved: 0 B\n");
  EXPECT_CONTAINS(t, "  Usage efficiency: NaN%");
  EXPECT_CONTAINS(t, "  Padding overhead: NaN%");
}

static void usage_display_values(void) {
  const char *t = usage_text(3, 1048576, 28, 4194304);
  EXPECT_CONTAINS(t, "  Number of allocations: 3\n");
  EXPECT_CONTAINS(t, "  Bytes in use: 1.05 MB\n");
  EXPECT_CONTAINS(t, "  Bytes used for padding: 28 B\n");
  EXPECT_CONTAINS(t, "  Total bytes reserved: 4.19 MB\n");
  EXPECT_CONTAINS(t, "  Usage efficiency: 25.00%");
  EXPECT_CONTAINS(t, "  Padding overhead: 0.00%");
  t = usage_text(1, 100, 28, 300);
  EXPECT_CONTAINS(t, "  Usage efficiency: 33.33%");
  EXPECT_CONTAINS(t, "  Padding overhead: 28.00%");
  /* in use but nothing reserved (padding over in_use still defined) */
  t = usage_text(1, 0, 0, 128);
  EXPECT_CONTAINS(t, "  Usage efficiency: 0.00%");
  EXPECT_CONTAINS(t, "  Padding overhead: NaN%");
  /* lines appear in the order of §9.1 */
  t = usage_text(2, 2, 2, 2);
  const char *order[] = {"Memory Usage Report:",   "Number of allocations", "Bytes in use",
                         "Bytes used for padding", "Total bytes reserved",  "Usage efficiency",
                         "Padding overhead"};
  const char *prev = t;
  for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
    const char *at = strstr(t, order[i]);
    EXPECT(at != NULL && at >= prev);
    if (at) prev = at;
  }
  char small[10];
  cm_usage_t u = {0, 0, 0, 0};
  size_t need = cm_usage_display(&u, NULL, 0);
  EXPECT_EQ(cm_usage_display(&u, small, sizeof small), need);
  EXPECT_EQ(strlen(small), sizeof small - 1);
}

static char *display(cm_manager_t *m) {
  size_t need = cm_manager_display(m, NULL, 0);
  char *buf = malloc(need + 1);
  ASSERT(buf != NULL);
  EXPECT_EQ(cm_manager_display(m, buf, need + 1), need);
  EXPECT_EQ(strlen(buf), need);
  return buf;
}

/* Content of `t` in the given order. */
static void expect_in_order(const char *t, const char *const *parts, size_t n, int line) {
  const char *at = t;
  for (size_t i = 0; i < n; i++) {
    const char *hit = strstr(at, parts[i]);
    if (!hit) {
      cm_test_fail(__FILE__, line, "missing (or out of order) \"%s\" in:\n%s", parts[i], t);
      return;
    }
    at = hit + strlen(parts[i]);
  }
}
#define EXPECT_IN_ORDER(t, ...)                                               \
  do {                                                                        \
    static const char *const parts_[] = {__VA_ARGS__};                        \
    expect_in_order((t), parts_, sizeof parts_ / sizeof parts_[0], __LINE__); \
  } while (0)

/* §5.11: the manager display with one pool of each kind in use. */
static void manager_display_content(void) {
  cm_pool_options_t p[3] = {sliced(1024, 1024), exclusive(4096), direct()};
  cm_storage_t *s = NULL;
  ASSERT_OK(cm_storage_host_create(0, &s));
  cm_manager_config_t cfg;
  cm_manager_config_init(&cfg);
  cfg.name = "Main GPU Memory";
  cfg.props = D;
  cfg.pools = p;
  cfg.pool_count = 3;
  cm_manager_t *m = NULL;
  ASSERT_OK(cm_manager_create(s, &cfg, &m, NULL));
  EXPECT_STR(cm_manager_name(m), "Main GPU Memory");

  cm_manager_set_mode(m, CM_MODE_PERSISTENT);
  cm_handle_t w1 = RSV(m, 100), w2 = RSV(m, 128), w3 = RSV(m, 5000);
  cm_manager_set_mode(m, CM_MODE_AUTO);
  drop(&w2);
  cm_handle_t a = RSV(m, 100), b = RSV(m, 2000), c = RSV(m, 10000);
  EXPECT_EQ(loc_of(m, a).pool, 0);
  EXPECT_EQ(loc_of(m, b).pool, 1);
  EXPECT_EQ(loc_of(m, c).pool, 2);
  char id[192];
  snprintf(id, sizeof id,
           "   - Page StorageId(%" PRIu64
           ") num_slices=2 => 896 free - 128 full - "
           "1024 total",
           storage_of(m, a).id);

  char *t = display(m);
  EXPECT_IN_ORDER(
      t, "\n# MemoryManagement\n", " - name: \"Main GPU Memory\"", "## Persistent",
      "  - Slices 128 =>  1 free - 1 full - 2 total",
      "  - Slices 5024 =>  0 free - 1 full - 1 total", "Memory Usage Report:", "## Dynamic",
      " - Sliced Pool page_size=1024 max_alloc_size=1024", "Page StorageId(",
      "Memory Usage Report:", " - Exclusive Pool max_alloc_size=4096",
      "   - Page 2016 is_free=false", "Memory Usage Report:", "  - Direct: 1 slices, largest 10000",
      "Memory Usage Report:", "## Summary", "Memory Usage Report:", "  Number of allocations: 5");
  EXPECT_CONTAINS(t, id);
  free(t);

  /* The summary equals the manager's usage. */
  drop(&b);
  t = display(m);
  EXPECT_CONTAINS(t, "   - Page 2016 is_free=true");
  const char *sum = strstr(t, "## Summary");
  ASSERT(sum != NULL);
  char want[1024];
  cm_usage_t u = usage(m);
  cm_usage_display(&u, want, sizeof want);
  EXPECT_CONTAINS(sum, want);
  free(t);

  drop(&w1);
  drop(&w3);
  drop(&a);
  drop(&c);
  cm_manager_destroy(m);
}

/* §5.11: empty sliced and direct pools print nothing; an exclusive pool
 * always prints its heading; a capped sliced pool shows its cap. */
static void manager_display_empty_pools(void) {
  cm_pool_options_t p[3] = {sliced_cap(1024, 1024, 4096), exclusive(4096), direct()};
  cm_manager_t *m = mk(D, p, 3);
  char *t = display(m);
  EXPECT(strstr(t, "Sliced Pool") == NULL);
  EXPECT(strstr(t, "Direct:") == NULL);
  EXPECT(strstr(t, "Slices ") == NULL);
  EXPECT_IN_ORDER(t, "# MemoryManagement", " - name: \"Memory\"", "## Persistent", "## Dynamic",
                  " - Exclusive Pool max_alloc_size=4096", "## Summary",
                  "  Number of allocations: 0", "  Usage efficiency: NaN%");
  free(t);
  cm_handle_t h = RSV(m, 10);
  t = display(m);
  EXPECT_CONTAINS(t, " - Sliced Pool page_size=1024 max_alloc_size=1024 max_pool_size=4096");
  free(t);
  drop(&h);
  /* snprintf semantics on a short buffer */
  char small[16];
  size_t need = cm_manager_display(m, NULL, 0);
  EXPECT_EQ(cm_manager_display(m, small, sizeof small), need);
  EXPECT_EQ(strlen(small), sizeof small - 1);
  cm_manager_destroy(m);
}

int main(void) {
  CM_RUN(t82_format_bytes);
  CM_RUN(t82_usage_display_zero);
  CM_RUN(usage_display_values);
  CM_RUN(manager_display_content);
  CM_RUN(manager_display_empty_pools);
  return cm_test_finish();
}
