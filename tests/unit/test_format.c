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
