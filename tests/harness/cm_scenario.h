/*
 * cm_scenario.h - helpers shared by the scenario test files (tests/unit):
 * the spec's test constant D, pool-option builders, manager construction on
 * host/sim storages, reserve/drop shorthands and usage assertions. Header
 * only; every function is static and may go unused in a given file.
 */
#ifndef CM_SCENARIO_H
#define CM_SCENARIO_H

#include <stdlib.h>
#include <string.h>

#include "cm_test.h"
#include "cubemem/memory.h"

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

#endif
