/*
 * test_device.c - the per-stream runtime (spec §8.1, §8.2, §7.3, §5.8):
 * lazy stream creation with slot = id % max_streams, usage summed over the
 * streams, per-stream reports, explicit cleanup of every stream (main,
 * pinned, drop queue), layouts installed for later streams, typed install
 * errors, per-stream modes, capture windows, deferred release of pinned
 * staging buffers, and the retry-once-after-failure rule (none for
 * CM_ETOOBIG).
 */
#include <stdlib.h>
#include <string.h>

#include "cm_test.h"
#include "cubemem/device.h"

#define KiB (1024ull)
#define MiB (1024ull * 1024ull)

/* ---- helpers ------------------------------------------------------------------------- */

typedef struct warnings {
  int count;
  char last[600];
} warnings_t;

static void on_log(void *arg, int level, const char *message) {
  warnings_t *w = arg;
  if (level != -1) return;
  w->count++;
  snprintf(w->last, sizeof w->last, "%s", message);
}

static cm_logger_t *make_logger(warnings_t *w) {
  cm_logger_config_t lc;
  cm_logger_config_init(&lc);
  lc.callback = on_log;
  lc.callback_arg = w;
  cm_logger_t *lg = NULL;
  if (cm_logger_create(&lc, &lg, NULL) != CM_OK) return NULL;
  return lg;
}

/* factory that records the stream ids it was called with */
static uint64_t factory_calls[16];
static int nfactory;
static int counting_factory(void *arg, uint64_t stream, cm_storage_t **out, cm_diag_t *diag) {
  if (nfactory < 16) factory_calls[nfactory] = stream;
  nfactory++;
  return cm_storage_factory_sim(arg, stream, out, diag);
}

static cm_device_t *make_device(const char *layout, uint32_t max_streams, cm_logger_t *lg,
                                const cm_sim_factory_t *sim) {
  static cm_pool_options_t pools[CM_MAX_DYNAMIC_POOLS];
  cm_device_config_t cfg;
  cm_device_config_init(&cfg);
  cfg.storage = counting_factory;
  cfg.storage_arg = (void *)sim;
  cfg.props.max_page_size = 256 * MiB;
  cfg.props.alignment = 512;
  cfg.max_streams = max_streams;
  cfg.manager.logger = lg;
  if (layout) {
    size_t n = 0;
    if (cm_pools_parse(layout, cfg.props, pools, CM_MAX_DYNAMIC_POOLS, &n, NULL) != CM_OK)
      return NULL;
    cfg.manager.pools = pools;
    cfg.manager.pool_count = n;
  }
  cm_device_t *dev = NULL;
  nfactory = 0;
  if (cm_device_create(&cfg, &dev, NULL) != CM_OK) return NULL;
  return dev;
}

static size_t pool_count(cm_device_t *dev, uint64_t stream, bool pinned) {
  cm_manager_t *m = NULL;
  if (cm_device_manager(dev, stream, pinned, &m, NULL) != CM_OK) return 0;
  return cm_manager_pool_count(m);
}

static size_t default_pool_count(uint64_t max_page, uint64_t align) {
  cm_pool_options_t p[CM_MAX_DYNAMIC_POOLS];
  size_t n = 0;
  cm_device_props_t pr = {max_page, align};
  if (cm_pools_preset(CM_PRESET_DEFAULT, pr, p, CM_MAX_DYNAMIC_POOLS, &n) != CM_OK) return 0;
  return n;
}

/* ---- tests ------------------------------------------------------------------------------ */

static void create_errors(void) {
  cm_device_config_t cfg;
  cm_device_config_init(&cfg);
  cm_device_t *dev = NULL;
  cm_diag_t d;
  cm_diag_clear(&d);
  EXPECT_STATUS(cm_device_create(&cfg, &dev, &d), CM_EINVAL); /* no factory */
  EXPECT_CONTAINS(d.message, "storage factory");
  EXPECT(dev == NULL);
  EXPECT_STATUS(cm_device_create(NULL, &dev, NULL), CM_EINVAL);
  cm_device_destroy(NULL);
}

static void lazy_streams(void) {
  cm_device_t *dev = make_device(NULL, 0, NULL, NULL);
  ASSERT(dev != NULL);
  EXPECT_EQ(cm_device_stream_count(dev), 0);
  EXPECT_EQ(nfactory, 0);
  EXPECT_EQ(cm_device_slot(dev, 3), 3);
  EXPECT_EQ(cm_device_slot(dev, 131), 3); /* default max 128 */
  EXPECT(!cm_device_has_stream(dev, 3));

  cm_handle_t h;
  ASSERT_OK(cm_device_reserve(dev, 3, 1000, &h, NULL));
  EXPECT_EQ(cm_device_stream_count(dev), 1);
  EXPECT_EQ(nfactory, 1);
  EXPECT_EQ(factory_calls[0], 3);
  EXPECT(cm_device_has_stream(dev, 3));
  EXPECT(cm_device_has_stream(dev, 131)); /* same slot */
  EXPECT(!cm_device_has_stream(dev, 4));

  /* stream 131 is stream 3's slot: no new stream, same manager */
  cm_handle_t h2;
  ASSERT_OK(cm_device_reserve(dev, 131, 1000, &h2, NULL));
  EXPECT_EQ(cm_device_stream_count(dev), 1);
  cm_manager_t *m3, *m131;
  ASSERT_OK(cm_device_manager(dev, 3, false, &m3, NULL));
  ASSERT_OK(cm_device_manager(dev, 131, false, &m131, NULL));
  EXPECT(m3 == m131);
  EXPECT_STR(cm_manager_name(m3), "Main GPU Memory");
  cm_manager_t *p3;
  ASSERT_OK(cm_device_manager(dev, 3, true, &p3, NULL));
  EXPECT(p3 != m3);
  EXPECT_STR(cm_manager_name(p3), "Pinned CPU Memory");
  EXPECT_EQ(cm_manager_mode(p3), CM_MODE_AUTO);

  /* the handle was bound: it resolves on its stream */
  cm_binding_t b = cm_handle_binding(h);
  cm_resource_t r;
  EXPECT_OK(cm_device_resource(dev, 3, b, &r, NULL));
  EXPECT_EQ(r.size, 1000);
  cm_binding_release(b);

  /* statistics do not create streams */
  cm_usage_t u;
  cm_device_memory_usage(dev, &u);
  cm_device_cleanup(dev);
  EXPECT_EQ(cm_device_stream_count(dev), 1);
  EXPECT_EQ(cm_device_pins(dev, 7), 0);
  EXPECT(!cm_device_has_stream(dev, 7));

  cm_handle_release(h);
  cm_handle_release(h2);
  cm_device_destroy(dev);

  /* a small slot table: 5 and 1 share slot 1 of 4 */
  dev = make_device(NULL, 4, NULL, NULL);
  ASSERT(dev != NULL);
  EXPECT_EQ(cm_device_slot(dev, 5), 1);
  ASSERT_OK(cm_device_reserve(dev, 5, 64, &h, NULL));
  EXPECT(cm_device_has_stream(dev, 1));
  ASSERT_OK(cm_device_reserve(dev, 2, 64, &h2, NULL));
  EXPECT_EQ(cm_device_stream_count(dev), 2);
  EXPECT_EQ(nfactory, 2);
  cm_handle_release(h);
  cm_handle_release(h2);
  cm_device_destroy(dev);
}

static void usage_sums_and_reports(void) {
  cm_device_t *dev = make_device(NULL, 0, NULL, NULL);
  ASSERT(dev != NULL);
  cm_handle_t a, b, c;
  ASSERT_OK(cm_device_reserve(dev, 0, 1000, &a, NULL));
  ASSERT_OK(cm_device_reserve(dev, 1, 2000, &b, NULL));
  ASSERT_OK(cm_device_reserve(dev, 1, 3000, &c, NULL));
  cm_usage_t u;
  cm_device_memory_usage(dev, &u);
  EXPECT_EQ(u.number_allocs, 3);
  EXPECT_EQ(u.bytes_in_use, 6000);
  EXPECT_GE(u.bytes_reserved, 6000);

  /* pinned memory is not included */
  cm_handle_t p;
  ASSERT_OK(cm_device_reserve_pinned(dev, 0, 4096, &p, NULL, NULL));
  cm_usage_t u2;
  cm_device_memory_usage(dev, &u2);
  EXPECT_EQ(u2.bytes_in_use, 6000);
  cm_usage_t pu;
  ASSERT_OK(cm_device_pinned_usage(dev, 0, &pu, NULL));
  EXPECT_EQ(pu.bytes_in_use, 4096);

  /* per-stream reports */
  cm_usage_t r0, r1;
  cm_pool_report_t pools[CM_MAX_DYNAMIC_POOLS], pers;
  size_t n = 0;
  ASSERT_OK(cm_device_memory_report(dev, 0, &r0, pools, CM_MAX_DYNAMIC_POOLS, &n, &pers, NULL));
  EXPECT_EQ(r0.bytes_in_use, 1000);
  EXPECT_EQ(r0.number_allocs, 1);
  EXPECT_EQ(n, default_pool_count(256 * MiB, 512));
  uint64_t sum = 0;
  for (size_t i = 0; i < n; i++) sum += pools[i].usage.bytes_in_use;
  EXPECT_EQ(sum + pers.usage.bytes_in_use, 1000);
  ASSERT_OK(cm_device_memory_report(dev, 1, &r1, NULL, 0, NULL, NULL, NULL));
  EXPECT_EQ(r1.bytes_in_use, 5000);
  EXPECT_EQ(r1.number_allocs, 2);
  EXPECT_EQ(r0.bytes_reserved + r1.bytes_reserved, u.bytes_reserved);

  cm_handle_release(a);
  cm_handle_release(b);
  cm_handle_release(c);
  cm_handle_release(p);
  cm_device_destroy(dev);
}

static int freed_buffers;
static void count_free(void *arg, void *ptr, uint64_t size) {
  (void)arg;
  (void)size;
  free(ptr);
  freed_buffers++;
}

static void cleanup_every_stream(void) {
  cm_device_t *dev = make_device(NULL, 0, NULL, NULL);
  ASSERT(dev != NULL);
  for (uint64_t s = 0; s < 3; s++) {
    cm_handle_t h, p;
    ASSERT_OK(cm_device_reserve(dev, s, 100 * KiB, &h, NULL));
    ASSERT_OK(cm_device_reserve_pinned(dev, s, 10 * KiB, &p, NULL, NULL));
    cm_handle_release(h);
    cm_handle_release(p);
    ASSERT_OK(cm_device_defer_free(dev, s, malloc(16), 16, count_free, NULL, NULL));
  }
  cm_usage_t u;
  cm_device_memory_usage(dev, &u);
  EXPECT_EQ(u.bytes_in_use, 0);
  EXPECT_GT(u.bytes_reserved, 0);
  cm_usage_t pu;
  ASSERT_OK(cm_device_pinned_usage(dev, 2, &pu, NULL));
  EXPECT_GT(pu.bytes_reserved, 0);
  EXPECT_EQ(cm_device_dropped(dev, 1), 1);
  freed_buffers = 0;

  cm_device_cleanup(dev);
  cm_device_memory_usage(dev, &u);
  EXPECT_EQ(u.bytes_reserved, 0);
  for (uint64_t s = 0; s < 3; s++) {
    ASSERT_OK(cm_device_pinned_usage(dev, s, &pu, NULL));
    EXPECT_EQ(pu.bytes_reserved, 0);
    EXPECT_EQ(cm_device_dropped(dev, s), 0); /* drop queues flushed twice */
  }
  EXPECT_EQ(freed_buffers, 3);
  cm_device_destroy(dev);
}

static void install_applies_to_later_streams(void) {
  /* the configured default: three pools */
  cm_device_t *dev = make_device("sliced:page=1MiB;exclusive:max=64MiB;direct", 0, NULL, NULL);
  ASSERT(dev != NULL);
  size_t ndef = 3;
  EXPECT_EQ(pool_count(dev, 9, false), ndef); /* stream 9 exists before the install */

  cm_device_props_t props = {256 * MiB, 512};
  cm_pool_options_t lay[4];
  size_t n = 0;
  ASSERT_OK(cm_pools_parse("sliced:page=1MiB;exclusive:max=64MiB", props, lay, 4, &n, NULL));
  cm_handle_t h;
  ASSERT_OK(cm_device_reserve(dev, 0, 1000, &h, NULL));
  cm_diag_t d;
  cm_diag_clear(&d);
  /* a live allocation keeps the old layout on the calling stream ... */
  EXPECT_STATUS(cm_device_install_pools(dev, 0, lay, n, &d), CM_EBUSY);
  EXPECT_EQ(pool_count(dev, 0, false), ndef);
  /* ... but the layout is stored for streams created later */
  EXPECT_EQ(pool_count(dev, 1, false), 2);
  EXPECT_EQ(pool_count(dev, 1, true), ndef); /* pinned always uses the default */
  cm_handle_release(h);
  ASSERT_OK(cm_device_install_pools(dev, 0, lay, n, NULL));
  EXPECT_EQ(pool_count(dev, 0, false), 2);
  EXPECT_EQ(pool_count(dev, 9, false), ndef); /* other existing streams keep theirs */
  EXPECT_EQ(pool_count(dev, 100, false), 2);

  /* an invalid layout: typed error, nothing stored */
  cm_pool_options_t bad = lay[0];
  bad.max_slice_size = 4 * MiB; /* larger than the page */
  cm_diag_clear(&d);
  EXPECT_STATUS(cm_device_install_pools(dev, 0, &bad, 1, &d), CM_ECONFIG);
  EXPECT_CONTAINS(d.message, "max_slice_size");
  EXPECT_STATUS(cm_device_install_pools(dev, 0, NULL, 0, NULL), CM_ECONFIG);
  EXPECT_EQ(pool_count(dev, 101, false), 2);

  /* a stream in an error state: CM_ESTREAM, the layout still applies later */
  ASSERT_OK(cm_device_report_error(dev, 5, CM_ESTORAGE, "launch failed"));
  cm_diag_t first;
  EXPECT_EQ(cm_device_errors(dev, 5, &first), 1);
  EXPECT_CONTAINS(first.message, "launch failed");
  ASSERT_OK(cm_pools_parse("exclusive:max=64MiB", props, lay, 4, &n, NULL));
  cm_diag_clear(&d);
  EXPECT_STATUS(cm_device_install_pools(dev, 5, lay, n, &d), CM_ESTREAM);
  EXPECT_CONTAINS(d.message, "error state");
  EXPECT_EQ(pool_count(dev, 5, false), 2);
  EXPECT_EQ(pool_count(dev, 102, false), 1);
  cm_device_clear_errors(dev, 5);
  EXPECT_EQ(cm_device_errors(dev, 5, NULL), 0);
  EXPECT_OK(cm_device_install_pools(dev, 5, lay, n, NULL));
  EXPECT_EQ(pool_count(dev, 5, false), 1);
  cm_device_destroy(dev);
}

static void mode_per_stream(void) {
  cm_device_t *dev = make_device(NULL, 0, NULL, NULL);
  ASSERT(dev != NULL);
  ASSERT_OK(cm_device_set_mode(dev, 0, CM_MODE_PERSISTENT, NULL));
  EXPECT_STATUS(cm_device_set_mode(dev, 0, (cm_alloc_mode_t)7, NULL), CM_EINVAL);
  cm_handle_t a, b;
  ASSERT_OK(cm_device_reserve(dev, 0, 4096, &a, NULL));
  ASSERT_OK(cm_device_reserve(dev, 1, 4096, &b, NULL));
  cm_pool_report_t p0, p1;
  ASSERT_OK(cm_device_memory_report(dev, 0, NULL, NULL, 0, NULL, &p0, NULL));
  ASSERT_OK(cm_device_memory_report(dev, 1, NULL, NULL, 0, NULL, &p1, NULL));
  EXPECT_EQ(p0.usage.bytes_in_use, 4096); /* persistent on stream 0 only */
  EXPECT_EQ(p1.usage.bytes_in_use, 0);
  ASSERT_OK(cm_device_set_mode(dev, 0, CM_MODE_AUTO, NULL));
  cm_manager_t *m;
  ASSERT_OK(cm_device_manager(dev, 0, false, &m, NULL));
  EXPECT_EQ(cm_manager_mode(m), CM_MODE_AUTO);
  cm_handle_release(a);
  cm_handle_release(b);
  cm_device_destroy(dev);
}

/* §8.2: one retry after a failure, with a warning; none for CM_ETOOBIG */
static void retry_once_with_warning(void) {
  warnings_t w = {0};
  cm_logger_t *lg = make_logger(&w);
  ASSERT(lg != NULL);
  cm_sim_factory_t sim = {1 * MiB, true, 0};
  cm_device_t *dev = make_device("exclusive:max=1MiB", 0, lg, &sim);
  ASSERT(dev != NULL);
  cm_handle_t h;
  ASSERT_OK(cm_device_reserve(dev, 0, 600 * KiB, &h, NULL));
  cm_handle_release(h); /* its page stays cached in the pool */
  EXPECT_EQ(w.count, 0);
  /* 900 KiB does not fit the cached 600 KiB page and 1.5 MiB exceeds the
   * device: the manager itself gives the cached page back and retries (out
   * of memory is met where it happens), so the device sees a success */
  cm_diag_t d;
  cm_diag_clear(&d);
  ASSERT_OK(cm_device_reserve(dev, 0, 900 * KiB, &h, &d));
  EXPECT_EQ(w.count, 0);
  EXPECT_EQ(cm_device_retries(dev), 0);
  cm_usage_t u;
  cm_device_memory_usage(dev, &u);
  EXPECT_EQ(u.bytes_in_use, 900 * KiB);

  /* nothing cached to give: the device retries once with its warning, and
   * the retry's result is final */
  cm_handle_t h2;
  cm_diag_clear(&d);
  EXPECT_STATUS(cm_device_reserve(dev, 0, 800 * KiB, &h2, &d), CM_EOOM);
  EXPECT(h2.d == NULL);
  EXPECT_EQ(w.count, 1);
  EXPECT_CONTAINS(w.last, "device allocation of 819200 B failed (");
  EXPECT_CONTAINS(w.last, "); reclaiming and retrying");
  EXPECT_EQ(cm_device_retries(dev), 1);
  cm_handle_release(h);
  cm_device_destroy(dev);

  /* CM_ETOOBIG: no retry, no warning */
  w.count = 0;
  dev = make_device("sliced:page=1MiB,max-slice=1MiB", 0, lg, NULL);
  ASSERT(dev != NULL);
  cm_diag_clear(&d);
  EXPECT_STATUS(cm_device_reserve(dev, 0, 2 * MiB, &h, &d), CM_ETOOBIG);
  EXPECT_EQ(w.count, 0);
  EXPECT_EQ(cm_device_retries(dev), 0);
  cm_device_destroy(dev);
  cm_logger_destroy(lg);
}

/* a storage whose allocations always fail: the device tries exactly twice */
typedef struct failing {
  int allocs;
} failing_t;
static int fl_alloc(void *ctx, uint64_t size, uint64_t *out_id, cm_diag_t *diag) {
  (void)size;
  (void)out_id;
  ((failing_t *)ctx)->allocs++;
  if (diag) snprintf(diag->message, sizeof diag->message, "injected failure");
  return CM_EOOM;
}
static void fl_dealloc(void *ctx, uint64_t id) {
  (void)ctx;
  (void)id;
}
static int fl_get(void *ctx, uint64_t id, uint64_t off, uint64_t size, cm_resource_t *out,
                  cm_diag_t *diag) {
  (void)ctx; (void)id; (void)off; (void)size; (void)out; (void)diag;
  return CM_EHANDLE;
}
static void fl_release(void *ctx) {
  (void)ctx; /* owned by the test */
}
static const cm_storage_ops_t fl_ops = {
    .name = "failing", .alloc = fl_alloc, .dealloc = fl_dealloc, .get = fl_get,
    .release = fl_release};
static int failing_factory(void *arg, uint64_t stream, cm_storage_t **out, cm_diag_t *diag) {
  (void)stream;
  (void)diag;
  return cm_storage_create(&fl_ops, arg, out);
}

static void retry_exactly_once(void) {
  warnings_t w = {0};
  cm_logger_t *lg = make_logger(&w);
  ASSERT(lg != NULL);
  failing_t f = {0};
  cm_device_config_t cfg;
  cm_device_config_init(&cfg);
  cfg.storage = failing_factory;
  cfg.storage_arg = &f;
  cfg.manager.logger = lg;
  cm_pool_options_t one = {0};
  one.kind = CM_POOL_EXCLUSIVE;
  one.max_alloc_size = 1 * MiB;
  cfg.manager.pools = &one;
  cfg.manager.pool_count = 1;
  cm_device_t *dev = NULL;
  ASSERT_OK(cm_device_create(&cfg, &dev, NULL));
  cm_handle_t h;
  cm_diag_t d;
  cm_diag_clear(&d);
  EXPECT_STATUS(cm_device_reserve(dev, 0, 4096, &h, &d), CM_EOOM);
  EXPECT_CONTAINS(d.message, "injected failure");
  EXPECT_EQ(f.allocs, 2);
  EXPECT_EQ(w.count, 1);
  EXPECT_CONTAINS(w.last, "device allocation of 4096 B failed (injected failure)");
  cm_device_destroy(dev);
  cm_logger_destroy(lg);
}

static void capture_window(void) {
  cm_device_t *dev = make_device("exclusive:max=1MiB", 0, NULL, NULL);
  ASSERT(dev != NULL);
  freed_buffers = 0;
  ASSERT_OK(cm_device_defer_free(dev, 0, malloc(8), 8, count_free, NULL, NULL));
  ASSERT_OK(cm_device_capture_begin(dev, 0, NULL)); /* drains the queue */
  EXPECT_EQ(freed_buffers, 1);
  EXPECT(cm_device_capturing(dev, 0));
  ASSERT_OK(cm_device_defer_free(dev, 0, malloc(8), 8, count_free, NULL, NULL));
  cm_handle_t h;
  ASSERT_OK(cm_device_reserve(dev, 0, 1024, &h, NULL));
  cm_handle_release(h);
  cm_device_cleanup(dev); /* no queue flush, no free while capturing */
  EXPECT_EQ(freed_buffers, 1);
  cm_pins_t *pins = NULL;
  ASSERT_OK(cm_device_capture_end(dev, 0, &pins, NULL));
  EXPECT_EQ(cm_pins_count(pins), 1);
  EXPECT_EQ(freed_buffers, 2); /* flushed twice after the window */
  EXPECT(!cm_device_capturing(dev, 0));
  cm_device_cleanup(dev);
  cm_usage_t u;
  cm_device_memory_usage(dev, &u);
  EXPECT_EQ(u.number_allocs, 1); /* the pinned slice survives cleanup */
  cm_pins_release(pins);
  cm_device_cleanup(dev);
  cm_device_memory_usage(dev, &u);
  EXPECT_EQ(u.number_allocs, 0);
  EXPECT_EQ(u.bytes_reserved, 0);
  /* ending with no capture: no pins */
  ASSERT_OK(cm_device_capture_end(dev, 0, &pins, NULL));
  EXPECT(pins == NULL);
  cm_device_destroy(dev);
}

/* §7.3: a pinned staging buffer's slice returns to the pool only when the
 * drop queue frees it, at the second flush */
static void staging_buffer_through_drop_queue(void) {
  cm_device_t *dev = make_device(NULL, 0, NULL, NULL);
  ASSERT(dev != NULL);
  cm_handle_t p;
  cm_resource_t r;
  ASSERT_OK(cm_device_reserve_pinned(dev, 0, 1000, &p, &r, NULL));
  ASSERT(r.host != NULL);
  memset(r.host, 0xab, 1000);
  ASSERT_OK(cm_device_defer_release(dev, 0, p, 1000, NULL));
  cm_usage_t u;
  ASSERT_OK(cm_device_pinned_usage(dev, 0, &u, NULL));
  EXPECT_EQ(u.bytes_in_use, 1000);
  ASSERT_OK(cm_device_flush(dev, 0, NULL));
  ASSERT_OK(cm_device_pinned_usage(dev, 0, &u, NULL));
  EXPECT_EQ(u.bytes_in_use, 1000);
  ASSERT_OK(cm_device_flush(dev, 0, NULL));
  ASSERT_OK(cm_device_pinned_usage(dev, 0, &u, NULL));
  EXPECT_EQ(u.bytes_in_use, 0);

  /* the policy flushes on its own: 64 buffers by default */
  freed_buffers = 0;
  for (int i = 0; i < 64; i++)
    ASSERT_OK(cm_device_defer_free(dev, 0, malloc(1), 1, count_free, NULL, NULL));
  EXPECT_EQ(cm_device_dropped(dev, 0), 64); /* flushed into `pending` */
  for (int i = 0; i < 64; i++)
    ASSERT_OK(cm_device_defer_free(dev, 0, malloc(1), 1, count_free, NULL, NULL));
  EXPECT_EQ(freed_buffers, 64);
  cm_device_destroy(dev); /* frees the rest */
  EXPECT_EQ(freed_buffers, 128);
}

static void submit_and_cursor(void) {
  cm_device_t *dev = make_device(NULL, 0, NULL, NULL);
  ASSERT(dev != NULL);
  uint64_t c;
  ASSERT_OK(cm_device_cursor(dev, 0, &c, NULL));
  EXPECT_EQ(c, 0);
  cm_handle_t h0, h1;
  ASSERT_OK(cm_device_reserve(dev, 0, 100, &h0, NULL));
  ASSERT_OK(cm_device_submit(dev, 0, NULL));
  ASSERT_OK(cm_device_submit(dev, 0, NULL));
  ASSERT_OK(cm_device_reserve(dev, 0, 100, &h1, NULL));
  ASSERT_OK(cm_device_cursor(dev, 0, &c, NULL));
  EXPECT_EQ(c, 2);
  cm_manager_t *m;
  ASSERT_OK(cm_device_manager(dev, 0, false, &m, NULL));
  cm_binding_t b0 = cm_handle_binding(h0), b1 = cm_handle_binding(h1);
  uint64_t k0 = 99, k1 = 99;
  ASSERT_OK(cm_manager_get_cursor(m, b0, &k0, NULL));
  ASSERT_OK(cm_manager_get_cursor(m, b1, &k1, NULL));
  EXPECT_EQ(k0, 0); /* bound at the stream's cursor */
  EXPECT_EQ(k1, 2);
  ASSERT_OK(cm_device_sync(dev, 0, NULL));
  EXPECT_EQ(cm_device_last_synced(dev, 0), 2);
  cm_binding_release(b0);
  cm_binding_release(b1);
  cm_handle_release(h0);
  cm_handle_release(h1);
  cm_device_destroy(dev);
}

int main(void) {
  CM_RUN(create_errors);
  CM_RUN(lazy_streams);
  CM_RUN(usage_sums_and_reports);
  CM_RUN(cleanup_every_stream);
  CM_RUN(install_applies_to_later_streams);
  CM_RUN(mode_per_stream);
  CM_RUN(retry_once_with_warning);
  CM_RUN(retry_exactly_once);
  CM_RUN(capture_window);
  CM_RUN(staging_buffer_through_drop_queue);
  CM_RUN(submit_and_cursor);
  return cm_test_finish();
}
