/*
 * test_caps.c - capped sliced pools, spilling and install_pools (spec §4.2,
 * §5.4, §5.9; scenarios T19-T29 of §14), through the public manager API.
 *
 * Scenarios use pool lists given directly ("Custom[...]") over an
 * immediate-free host storage, except T25, which needs a storage that fails:
 * a small counting storage defined below (cm_storage_create with our own
 * ops) fails every allocation after the first N.
 *
 * cubemem follows the [REC] fixes of spec §15.1 where they apply here:
 *  - install_pools is gated on the live COUNT of the dynamic pools (a live
 *    zero-byte slice blocks it) and releases every page of the old pools;
 *  - exclusive pages are exact-size (round_up(size, alignment)), so T25's
 *    tail would not ask for 2048 bytes; the storage there fails by call
 *    count instead, which keeps the point of the scenario: the capacity
 *    error of the capped pool wins over the tail's storage error.
 * Exports: main (the test runner).
 */
#include <stdlib.h>
#include <string.h>

#include "cm_test.h"
#include "cubemem/memory.h"

#include "cm_scenario.h"

/* ---- a storage that fails on demand ----------------------------------------------- */

typedef struct fail_ctx {
  uint64_t next_id;   /* next id to mint (ids start at 1) */
  uint64_t ok_allocs; /* allocations that succeed before every later one fails */
  uint64_t done;      /* successful allocations so far */
} fail_ctx;

static int fail_alloc(void *ctx, uint64_t size, uint64_t *out_id, cm_diag_t *diag) {
  fail_ctx *c = ctx;
  if (c->done >= c->ok_allocs) {
    if (diag) {
      diag->code = CM_EOOM;
      snprintf(diag->message, sizeof diag->message, "failing storage: refused %" PRIu64 " bytes",
               size);
    }
    return CM_EOOM;
  }
  c->done++;
  *out_id = c->next_id++;
  return CM_OK;
}

static void fail_dealloc(void *ctx, uint64_t id) { (void)ctx, (void)id; }

static int fail_get(void *ctx, uint64_t id, uint64_t offset, uint64_t size, cm_resource_t *out,
                    cm_diag_t *diag) {
  (void)ctx, (void)diag;
  out->addr = (id << 32) + offset;
  out->host = NULL;
  out->size = size;
  return CM_OK;
}

static void fail_release(void *ctx) { free(ctx); }

static const cm_storage_ops_t fail_ops = {
    .name = "failing",
    .alloc = fail_alloc,
    .dealloc = fail_dealloc,
    .get = fail_get,
    .release = fail_release,
};

static cm_storage_t *failing_storage(uint64_t ok_allocs) {
  fail_ctx *c = calloc(1, sizeof *c);
  ASSERT(c != NULL);
  c->next_id = 1;
  c->ok_allocs = ok_allocs;
  cm_storage_t *s = NULL;
  int rc = cm_storage_create(&fail_ops, c, &s);
  if (rc != CM_OK) free(c);
  ASSERT_OK(rc);
  return s;
}

/* ---- a logger that records warnings ----------------------------------------------- */

typedef struct warn_log {
  int warnings;
  char last[512];
} warn_log;

static void on_log(void *arg, int level, const char *message) {
  warn_log *w = arg;
  if (level == -1) {
    w->warnings++;
    snprintf(w->last, sizeof w->last, "%s", message);
  }
}

static cm_manager_t *mk_logged(const cm_pool_options_t *pools, size_t n, cm_logger_t **out_log,
                               warn_log *w) {
  cm_logger_config_t lc;
  cm_logger_config_init(&lc);
  lc.callback = on_log;
  lc.callback_arg = w;
  ASSERT_OK(cm_logger_create(&lc, out_log, NULL));
  cm_storage_t *s = NULL;
  ASSERT_OK(cm_storage_host_create(0, &s));
  cm_manager_config_t cfg;
  cm_manager_config_init(&cfg);
  cfg.name = "Main GPU Memory";
  cfg.props = D;
  cfg.pools = pools;
  cfg.pool_count = n;
  cfg.logger = *out_log;
  cm_manager_t *m = NULL;
  int rc = cm_manager_create(s, &cfg, &m, NULL);
  if (rc != CM_OK) {
    cm_storage_destroy(s);
    cm_logger_destroy(*out_log);
  }
  ASSERT_OK(rc);
  return m;
}

/* ---- T19-T23: caps ------------------------------------------------------------------ */

/* T19 (R): a cap of two pages is a hard budget when nothing follows. */
static void t19_cap_is_budget(void) {
  cm_pool_options_t p = sliced_cap(1024, 1024, 2048);
  cm_manager_t *m = mk(D, &p, 1);
  cm_handle_t a = RSV(m, 1024), b = RSV(m, 1024);
  cm_handle_t c = {0};
  cm_diag_t diag = {0};
  EXPECT_STATUS(cm_manager_reserve(m, 1024, &c, &diag), CM_ECAPACITY);
  EXPECT(c.d == NULL);
  EXPECT_STATUS(diag.code, CM_ECAPACITY);
  EXPECT_CONTAINS(diag.message, "2048"); /* capacity (and in_use) */
  EXPECT_EQ(usage(m).bytes_reserved, 2048);
  EXPECT_EQ(pages(m, 0), 2);
  cm_pool_report_t r = report(m, 0);
  EXPECT(r.options.has_max_pool_size);
  EXPECT_EQ(r.options.max_pool_size, 2048);
  EXPECT_HEALTHY(m);

  /* T20 (R): free one, and the next reservation reuses its page. */
  drop(&a);
  a = RSV(m, 1024);
  EXPECT_EQ(usage(m).bytes_reserved, 2048);
  EXPECT_USAGE(m, 2, 2048, 0, 2048);
  drop(&a);
  drop(&b);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* T21 (R): after a full release and cleanup, the cap applies again. */
static void t21_cap_after_cleanup(void) {
  cm_pool_options_t p = sliced_cap(1024, 1024, 2048);
  cm_manager_t *m = mk(D, &p, 1);
  cm_handle_t a = RSV(m, 1024), b = RSV(m, 1024);
  drop(&a);
  drop(&b);
  cm_manager_cleanup(m, true);
  EXPECT_EQ(usage(m).bytes_reserved, 0);
  a = RSV(m, 1024);
  b = RSV(m, 1024);
  RSV_FAIL(m, 1024, CM_ECAPACITY);
  EXPECT_EQ(usage(m).bytes_reserved, 2048);
  drop(&a);
  drop(&b);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* T22 (R): a cap below the page shrinks the page to the cap (Custom list,
 * no resolve); a request above it is not accepted at all. */
static void t22_cap_shrinks_page(void) {
  cm_pool_options_t p = sliced_cap(2048, 2048, 512);
  cm_manager_t *m = mk(D, &p, 1);
  cm_handle_t a = RSV(m, 256);
  EXPECT_EQ(usage(m).bytes_reserved, 512);
  RSV_FAIL(m, 1024, CM_ETOOBIG);
  EXPECT_EQ(usage(m).bytes_reserved, 512);
  cm_pool_report_t r = report(m, 0);
  EXPECT_EQ(r.options.page_size, 512);
  EXPECT_EQ(r.pages, 1);
  drop(&a);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* T23 (R): a cap below the alignment allows no page at all. */
static void t23_cap_below_alignment(void) {
  cm_pool_options_t p = sliced_cap(1024, 1024, 16);
  cm_manager_t *m = mk(D, &p, 1);
  cm_handle_t h = {0};
  cm_diag_t diag = {0};
  EXPECT_STATUS(cm_manager_reserve(m, 8, &h, &diag), CM_ECAPACITY);
  EXPECT(h.d == NULL);
  EXPECT_EQ(usage(m).bytes_reserved, 0);
  EXPECT_EQ(sstats(m).allocs, 0);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* ---- T24-T25: spill ------------------------------------------------------------------ */

/* T24 (R+M): a full capped pool spills to the next accepting pool, with one
 * warning per pool per layout. */
static void t24_spill_warns_once(void) {
  cm_pool_options_t p[2] = {sliced_cap(1024, 1024, 1024), sliced(1024, 1024)};
  warn_log w = {0};
  cm_logger_t *log = NULL;
  cm_manager_t *m = mk_logged(p, 2, &log, &w);
  cm_handle_t a = RSV(m, 1024), b = RSV(m, 1024);
  EXPECT_EQ(loc_of(m, a).pool, 0);
  EXPECT_EQ(loc_of(m, b).pool, 1);
  EXPECT_EQ(usage(m).bytes_reserved, 2048);
  EXPECT_EQ(report(m, 0).pages_peak, 1);
  EXPECT_EQ(report(m, 1).pages_peak, 1);
  EXPECT_EQ(cm_manager_warnings(m), 1);
  EXPECT_EQ(w.warnings, 1);
  EXPECT_CONTAINS(w.last, "memory pool 0 is at capacity");
  EXPECT_CONTAINS(w.last, "1024");
  EXPECT_CONTAINS(w.last, "Main GPU Memory");

  cm_handle_t c = RSV(m, 1024);
  EXPECT_EQ(loc_of(m, c).pool, 1);
  EXPECT_EQ(report(m, 1).pages_peak, 2);
  EXPECT_EQ(cm_manager_warnings(m), 1);
  EXPECT_EQ(w.warnings, 1);
  drop(&a);
  drop(&b);
  drop(&c);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
  cm_logger_destroy(log);
}

/* T25 (M, adapted): the tail's storage failure does not hide the capacity
 * error of the capped pool before it. */
static void t25_capacity_error_wins(void) {
  cm_pool_options_t p[2] = {sliced_cap(1024, 1024, 1024), exclusive(4096)};
  cm_manager_t *m = mk_full(failing_storage(1), D, p, 2, CM_PRESET_DEFAULT, CM_PERSISTENT_ENABLED);
  cm_handle_t a = RSV(m, 1024);
  EXPECT_EQ(loc_of(m, a).pool, 0);
  cm_usage_t before = usage(m);
  cm_handle_t b = {0};
  cm_diag_t diag = {0};
  EXPECT_STATUS(cm_manager_reserve(m, 1024, &b, &diag), CM_ECAPACITY);
  EXPECT(b.d == NULL);
  cm_storage_stats_t st = sstats(m);
  EXPECT_EQ(st.failed_allocs, 1); /* the tail did try */
  EXPECT_EQ(st.allocs, 1);
  cm_usage_t after = usage(m);
  EXPECT(memcmp(&before, &after, sizeof before) == 0);
  EXPECT_EQ(pages(m, 1), 0);
  drop(&a);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* Without a capacity error in hand, the storage error goes straight back. */
static void t25b_storage_error_passes_through(void) {
  cm_pool_options_t p = exclusive(4096);
  cm_manager_t *m = mk_full(failing_storage(0), D, &p, 1, CM_PRESET_DEFAULT, CM_PERSISTENT_ENABLED);
  RSV_FAIL(m, 100, CM_EOOM);
  EXPECT_USAGE(m, 0, 0, 0, 0);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* ---- T26-T29: install_pools ----------------------------------------------------------- */

static void t26_workload(cm_manager_t *m) {
  cm_handle_t a = RSV(m, 600 * KiB), b = RSV(m, 600 * KiB);
  drop(&a);
  cm_handle_t c = RSV(m, 900 * KiB);
  drop(&b);
  drop(&c);
}

/* T26 (R): measure a plan, install it capped, replay: same peak. */
static void t26_measured_plan(void) {
  cm_pool_options_t p = sliced(1 * MiB, 1 * MiB);
  cm_manager_t *m = mk(D, &p, 1);
  t26_workload(m);
  cm_pool_report_t r = report(m, 0);
  EXPECT_EQ(r.largest_alloc, 921600);
  EXPECT_EQ(r.pages_peak, 2);
  cm_manager_cleanup(m, true);
  cm_pool_options_t capped = sliced_cap(1 * MiB, 1 * MiB, r.pages_peak * MiB);
  cm_diag_t diag = {0};
  ASSERT_OK(cm_manager_install_pools(m, &capped, 1, &diag));
  r = report(m, 0);
  EXPECT_EQ(r.pages_peak, 0);
  EXPECT_EQ(r.largest_alloc, 0);
  t26_workload(m);
  r = report(m, 0);
  EXPECT_EQ(r.pages_peak, 2);
  EXPECT_EQ(r.largest_alloc, 921600);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* T27 (R): a live allocation keeps the old layout; freeing it lets the
 * install through. */
static void t27_install_refused_while_live(void) {
  cm_pool_options_t p = sliced_cap(1 * MiB, 1 * MiB, 2 * MiB);
  cm_manager_t *m = mk(D, &p, 1);
  cm_handle_t live = RSV(m, 1 * MiB);
  cm_pool_options_t q = sliced_cap(4 * MiB, 4 * MiB, 8 * MiB);
  cm_diag_t diag = {0};
  EXPECT_STATUS(cm_manager_install_pools(m, &q, 1, &diag), CM_EBUSY);
  EXPECT_CONTAINS(diag.message,
                  "the dynamic pools kept their layout: 1048576 bytes are still live in them");
  EXPECT_EQ(report(m, 0).options.page_size, 1 * MiB);
  RSV_FAIL(m, 2 * MiB, CM_ETOOBIG);
  EXPECT_EQ(storage_of(m, live).size, 1 * MiB);
  drop(&live);
  cm_diag_clear(&diag);
  ASSERT_OK(cm_manager_install_pools(m, &q, 1, &diag));
  EXPECT_EQ(report(m, 0).options.page_size, 4 * MiB);
  cm_handle_t h = RSV(m, 2 * MiB);
  EXPECT_EQ(loc_of(m, h).pool, 0);
  drop(&h);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* T28 (M): the cleanup before the decision runs even when the install is
 * refused: y's emptied page is released (3 pages become 2). */
static void t28_refused_install_still_cleans(void) {
  cm_pool_options_t p = sliced(4096, 4096);
  cm_manager_t *m = mk(D, &p, 1);
  cm_handle_t a = RSV(m, 100), x = RSV(m, 4096), y = RSV(m, 4096);
  EXPECT_EQ(pages(m, 0), 3);
  drop(&y);
  cm_pool_options_t q = sliced(8192, 8192);
  cm_diag_t diag = {0};
  EXPECT_STATUS(cm_manager_install_pools(m, &q, 1, &diag), CM_EBUSY);
  EXPECT_CONTAINS(diag.message, "4196 bytes are still live");
  EXPECT_EQ(pages(m, 0), 2);
  EXPECT_USAGE(m, 2, 4196, 28, 8192);
  drop(&a);
  drop(&x);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* T29 (R): install resets the dynamic peaks and re-arms the spill warning;
 * persistent slices are untouched and still resolve. */
static void t29_install_resets_and_keeps_persistent(void) {
  cm_pool_options_t p[2] = {sliced_cap(1024, 1024, 1024), sliced(1024, 1024)};
  warn_log w = {0};
  cm_logger_t *log = NULL;
  cm_manager_t *m = mk_logged(p, 2, &log, &w);
  cm_manager_set_mode(m, CM_MODE_PERSISTENT);
  cm_handle_t weight = RSV(m, 512);
  cm_manager_set_mode(m, CM_MODE_AUTO);
  EXPECT_EQ(loc_of(m, weight).pool, CM_PERSISTENT_POOL);
  cm_storage_handle_t before = storage_of(m, weight);

  cm_handle_t a = RSV(m, 1024), b = RSV(m, 1024);
  EXPECT_EQ(cm_manager_warnings(m), 1);
  drop(&a);
  drop(&b);
  cm_diag_t diag = {0};
  ASSERT_OK(cm_manager_install_pools(m, p, 2, &diag));
  EXPECT_EQ(report(m, 0).pages_peak, 0);
  EXPECT_EQ(report(m, 1).pages_peak, 0);

  a = RSV(m, 1024);
  b = RSV(m, 1024);
  EXPECT_EQ(loc_of(m, b).pool, 1);
  EXPECT_EQ(cm_manager_warnings(m), 2);
  EXPECT_EQ(w.warnings, 2);

  cm_storage_handle_t after = storage_of(m, weight);
  EXPECT_EQ(after.id, before.id);
  EXPECT_EQ(after.offset, before.offset);
  EXPECT_EQ(after.size, 512);
  EXPECT_EQ(loc_of(m, weight).pool, CM_PERSISTENT_POOL);
  EXPECT_POOL_USAGE(m, CM_PERSISTENT_POOL, 1, 512, 0, 512);
  drop(&a);
  drop(&b);
  drop(&weight);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
  cm_logger_destroy(log);
}

/* [REC] §15.1 item 3: the install gate counts live slices, so a live
 * zero-byte allocation blocks it (the reference lets it through and loses
 * the slice). */
static void install_gated_on_count(void) {
  cm_pool_options_t p[2] = {exclusive(0), sliced(1024, 1024)};
  cm_manager_t *m = mk(D, p, 2);
  cm_handle_t z = RSV(m, 0);
  EXPECT_EQ(loc_of(m, z).pool, 0);
  EXPECT_USAGE(m, 1, 0, 0, 0);
  cm_pool_options_t q = sliced(2048, 2048);
  cm_diag_t diag = {0};
  EXPECT_STATUS(cm_manager_install_pools(m, &q, 1, &diag), CM_EBUSY);
  EXPECT_EQ(cm_manager_pool_count(m), 2);
  EXPECT_EQ(storage_of(m, z).size, 0);
  drop(&z);
  ASSERT_OK(cm_manager_install_pools(m, &q, 1, &diag));
  EXPECT_EQ(cm_manager_pool_count(m), 1);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* [REC] §15.1 item 3: the old pools' pages are released when they are
 * discarded, even where the cleanup before the decision frees nothing (a
 * capture suppresses cleanup). */
static void install_releases_old_pages(void) {
  cm_pool_options_t p = sliced(4096, 4096);
  cm_manager_t *m = mk(D, &p, 1);
  cm_handle_t a = RSV(m, 100);
  drop(&a);
  EXPECT_EQ(sstats(m).bytes_held, 4096);
  cm_manager_capture_begin(m);
  cm_pool_options_t q = sliced(8192, 8192);
  cm_diag_t diag = {0};
  ASSERT_OK(cm_manager_install_pools(m, &q, 1, &diag));
  cm_pins_t *pins = NULL;
  ASSERT_OK(cm_manager_capture_end(m, &pins));
  EXPECT_EQ(pins ? cm_pins_count(pins) : 0, 0);
  cm_pins_release(pins);
  cm_storage_stats_t st = sstats(m);
  EXPECT_EQ(st.bytes_held, 0);
  EXPECT_EQ(st.deallocs, 1);
  EXPECT_USAGE(m, 0, 0, 0, 0);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* A refused or invalid install leaves the layout and the usage as they were. */
static void install_invalid_lists(void) {
  cm_pool_options_t p = sliced(4096, 4096);
  cm_manager_t *m = mk(D, &p, 1);
  cm_handle_t a = RSV(m, 100);
  cm_usage_t before = usage(m);
  cm_diag_t diag = {0};
  EXPECT_STATUS(cm_manager_install_pools(m, NULL, 0, &diag), CM_EINVAL);
  cm_usage_t mid = usage(m);
  EXPECT(memcmp(&before, &mid, sizeof before) == 0);
  EXPECT_EQ(cm_manager_pool_count(m), 1);
  static cm_pool_options_t many[CM_MAX_DYNAMIC_POOLS + 1];
  for (size_t i = 0; i < CM_MAX_DYNAMIC_POOLS + 1; i++) many[i] = exclusive(1024);
  drop(&a);
  cm_manager_cleanup(m, true);
  before = usage(m);
  cm_diag_clear(&diag);
  EXPECT_STATUS(cm_manager_install_pools(m, many, CM_MAX_DYNAMIC_POOLS + 1, &diag), CM_EINVAL);
  EXPECT_EQ(cm_manager_pool_count(m), 1);
  cm_usage_t after = usage(m);
  EXPECT(memcmp(&before, &after, sizeof before) == 0);
  /* The maximum itself is fine. */
  ASSERT_OK(cm_manager_install_pools(m, many, CM_MAX_DYNAMIC_POOLS, &diag));
  EXPECT_EQ(cm_manager_pool_count(m), CM_MAX_DYNAMIC_POOLS);
  a = RSV(m, 100);
  EXPECT_EQ(loc_of(m, a).pool, 0);
  drop(&a);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

int main(void) {
  CM_RUN(t19_cap_is_budget);
  CM_RUN(t21_cap_after_cleanup);
  CM_RUN(t22_cap_shrinks_page);
  CM_RUN(t23_cap_below_alignment);
  CM_RUN(t24_spill_warns_once);
  CM_RUN(t25_capacity_error_wins);
  CM_RUN(t25b_storage_error_passes_through);
  CM_RUN(t26_measured_plan);
  CM_RUN(t27_install_refused_while_live);
  CM_RUN(t28_refused_install_still_cleans);
  CM_RUN(t29_install_resets_and_keeps_persistent);
  CM_RUN(install_gated_on_count);
  CM_RUN(install_releases_old_pages);
  CM_RUN(install_invalid_lists);
  return cm_test_finish();
}
