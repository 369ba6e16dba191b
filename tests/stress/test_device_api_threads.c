/*
 * test_device_api_threads.c - every function that device.h documents as
 * callable from any thread, called concurrently on one device.
 *
 * THREADS threads each run a random mix of every thread-safe cm_device_*
 * call (everything but create/destroy) over a small set of streams, so most
 * calls collide with a call of another thread on the same stream or on the
 * device-wide state (slot creation, the installed layout, usage sums,
 * cleanup of every stream). Handles are passed between threads and released
 * anywhere. Status codes are checked against what each call may return; the
 * point of the test is what the sanitizers see: it runs under ASan in
 * `make asan` and under TSan in `make tsan` (label stress). It found the
 * use-after-free of cm_device_install_pools (two threads installing layouts
 * on different streams shared one array that the second install freed).
 *
 * Time-bounded by CM_STRESS_SECONDS (default 2); at least MIN_ROUNDS rounds
 * per thread whatever the time.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cm_test.h"
#include "cubemem/device.h"

#define THREADS 6
#define STREAMS 5
#define BAG 256
#define MIN_ROUNDS 2000

typedef struct bag {
  pthread_mutex_t lock;
  cm_handle_t h[BAG];
  uint64_t stream[BAG];
  size_t n;
} bag_t;

static bag_t bag = {.lock = PTHREAD_MUTEX_INITIALIZER};
static cm_device_t *dev;
static double seconds = 2.0;
static cm_pool_options_t layouts[3][32];
static size_t nlayout[3];
static _Atomic uint64_t calls, unexpected;
static _Atomic int first_unexpected_op, first_unexpected_rc;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t rnd(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

static void bad(int op, int rc) {
  atomic_fetch_add(&unexpected, 1);
  int zero = 0;
  if (atomic_compare_exchange_strong(&first_unexpected_op, &zero, op + 1))
    atomic_store(&first_unexpected_rc, rc);
}

/* Put (h, stream) in the bag; take out a random entry (maybe another thread's). */
static bool bag_swap(cm_handle_t h, uint64_t st, uint64_t r, cm_handle_t *out, uint64_t *ost) {
  bool got = false;
  pthread_mutex_lock(&bag.lock);
  if (h.d && bag.n < BAG) {
    bag.h[bag.n] = h;
    bag.stream[bag.n++] = st;
    h.d = NULL;
  }
  if (bag.n && (r & 1)) {
    size_t k = (size_t)(r >> 1) % bag.n;
    *out = bag.h[k];
    *ost = bag.stream[k];
    bag.h[k] = bag.h[bag.n - 1];
    bag.stream[k] = bag.stream[bag.n - 1];
    bag.n--;
    got = true;
  }
  pthread_mutex_unlock(&bag.lock);
  if (h.d) cm_handle_release(h); /* bag full */
  return got;
}

static void on_free(void *arg, void *ptr, uint64_t size) {
  (void)arg;
  (void)size;
  free(ptr);
}

#define NOPS 27

static void one_call(uint64_t r, uint64_t *seed) {
  uint64_t st = (r >> 8) % STREAMS;
  uint64_t other = (r >> 16) % STREAMS;
  int op = (int)(r % NOPS);
  int rc = CM_OK;
  cm_diag_t d;
  cm_diag_clear(&d);
  switch (op) {
  case 0:
  case 1: { /* reserve, keep in the bag */
    cm_handle_t h;
    uint64_t size = (r >> 24) % 200000;
    rc = cm_device_reserve(dev, st, size, &h, &d);
    if (rc) bad(op, rc);
    else {
      cm_handle_t o;
      uint64_t ost;
      if (bag_swap(h, st, rnd(seed), &o, &ost)) cm_handle_release(o);
    }
    break;
  }
  case 2: { /* release one, maybe from another thread */
    cm_handle_t o = {NULL};
    uint64_t ost;
    if (bag_swap(o, 0, rnd(seed) | 1, &o, &ost)) cm_handle_release(o);
    break;
  }
  case 3: { /* pinned staging, then the drop queue */
    cm_handle_t p;
    cm_resource_t res;
    rc = cm_device_reserve_pinned(dev, st, 64, &p, &res, &d);
    if (rc) bad(op, rc);
    else {
      memset(res.host, 7, 64);
      rc = cm_device_defer_release(dev, st, p, 64, &d);
      if (rc) bad(op, rc);
    }
    break;
  }
  case 4: { /* resolve and use a bag entry on its stream and on another */
    cm_handle_t o;
    uint64_t ost;
    if (!bag_swap((cm_handle_t){NULL}, 0, rnd(seed) | 1, &o, &ost)) break;
    cm_binding_t b = cm_handle_binding(o);
    cm_resource_t res;
    rc = cm_device_resource(dev, ost, b, &res, &d);
    if (rc) bad(op, rc);
    bool waited;
    rc = cm_device_use_binding(dev, b, ost, other, (r >> 40) & 1 ? &res : NULL, &waited, &d);
    if (rc) bad(op, rc);
    cm_binding_release(b);
    cm_handle_t back;
    if (bag_swap(o, ost, 0, &back, &ost)) cm_handle_release(back);
    break;
  }
  case 5: {
    cm_usage_t u;
    cm_device_memory_usage(dev, &u);
    if (u.bytes_in_use > u.bytes_reserved) bad(op, -1000);
    break;
  }
  case 6: {
    cm_usage_t u;
    cm_pool_report_t dyn[8], pers;
    size_t n;
    rc = cm_device_memory_report(dev, st, &u, dyn, 8, &n, &pers, &d);
    if (rc) bad(op, rc);
    break;
  }
  case 7: {
    cm_usage_t u;
    rc = cm_device_pinned_usage(dev, st, &u, &d);
    if (rc) bad(op, rc);
    break;
  }
  case 8:
    (void)cm_device_retries(dev);
    (void)cm_device_stream_count(dev);
    (void)cm_device_has_stream(dev, st);
    (void)cm_device_slot(dev, st);
    break;
  case 9:
    if ((r >> 32) % 8 == 0) cm_device_cleanup(dev);
    break;
  case 10:
    rc = cm_device_cleanup_stream(dev, st, &d);
    if (rc) bad(op, rc);
    break;
  case 11:
  case 12: { /* install a layout: busy or in error is fine */
    size_t k = (size_t)(r >> 24) % 3;
    rc = cm_device_install_pools(dev, st, layouts[k], nlayout[k], &d);
    if (rc && rc != CM_EBUSY && rc != CM_ESTREAM) bad(op, rc);
    break;
  }
  case 13:
    rc = cm_device_set_mode(dev, st, (r >> 24) & 1 ? CM_MODE_PERSISTENT : CM_MODE_AUTO, &d);
    if (rc) bad(op, rc);
    break;
  case 14: {
    uint64_t c;
    rc = cm_device_cursor(dev, st, &c, &d);
    if (rc) bad(op, rc);
    break;
  }
  case 15:
    rc = cm_device_submit(dev, st, &d);
    if (rc) bad(op, rc);
    break;
  case 16:
    rc = cm_device_sync(dev, st, &d);
    if (rc) bad(op, rc);
    break;
  case 17:
    (void)cm_device_pins(dev, st);
    (void)cm_device_last_synced(dev, st);
    (void)cm_device_dropped(dev, st);
    (void)cm_device_capturing(dev, st);
    break;
  case 18: {
    void *p = malloc(16);
    if (!p) break;
    rc = cm_device_defer_free(dev, st, p, 16, on_free, NULL, &d);
    if (rc) {
      free(p);
      bad(op, rc);
    }
    break;
  }
  case 19:
    rc = cm_device_flush(dev, st, &d);
    if (rc) bad(op, rc);
    break;
  case 20:
    rc = cm_device_capture_begin(dev, st, &d);
    if (rc) bad(op, rc);
    break;
  case 21:
    rc = cm_device_capture_priming_end(dev, st, &d);
    if (rc) bad(op, rc);
    break;
  case 22:
  case 23: {
    cm_pins_t *pins = NULL;
    rc = cm_device_capture_end(dev, st, (r >> 24) & 1 ? &pins : NULL, &d);
    if (rc) bad(op, rc);
    cm_pins_release(pins);
    break;
  }
  case 24:
    if ((r >> 24) % 4 == 0) {
      rc = cm_device_report_error(dev, st, CM_ESTORAGE, "injected by the test");
      if (rc) bad(op, rc);
    }
    break;
  case 25: {
    cm_diag_t first;
    if (cm_device_errors(dev, st, &first)) cm_device_clear_errors(dev, st);
    break;
  }
  case 26: {
    cm_manager_t *m;
    rc = cm_device_manager(dev, st, (r >> 24) & 1, &m, &d); /* only the call */
    if (rc || !m) bad(op, rc);
    break;
  }
  }
  atomic_fetch_add(&calls, 1);
}

static void *worker(void *arg) {
  uint64_t me = (uint64_t)(uintptr_t)arg;
  uint64_t seed = 0x2545f4914f6cdd1dull * (me + 1);
  double end = now() + seconds;
  for (unsigned i = 0; i < MIN_ROUNDS || ((i & 63) || now() < end); i++)
    one_call(rnd(&seed), &seed);
  return NULL;
}

static void every_threadsafe_call_concurrently(void) {
  const char *env = getenv("CM_STRESS_SECONDS");
  if (env && atof(env) > 0) seconds = atof(env);
  cm_device_props_t props = {64u << 20, 512};
  const char *text[3] = {"sliced:page=1MiB;exclusive:max=32MiB;direct", "exclusive-pages",
                         "arena:page=4MiB;direct"};
  for (int k = 0; k < 3; k++)
    ASSERT_OK(cm_pools_parse(text[k], props, layouts[k], 32, &nlayout[k], NULL));
  cm_device_config_t cfg;
  cm_device_config_init(&cfg);
  cfg.storage = cm_storage_factory_sim;
  cfg.props = props;
  cfg.max_streams = 8;
  ASSERT_OK(cm_device_create(&cfg, &dev, NULL));

  pthread_t th[THREADS];
  for (uintptr_t i = 0; i < THREADS; i++)
    ASSERT(pthread_create(&th[i], NULL, worker, (void *)i) == 0);
  for (int i = 0; i < THREADS; i++) pthread_join(th[i], NULL);

  EXPECT_EQ(atomic_load(&unexpected), 0);
  if (atomic_load(&unexpected))
    fprintf(stderr, "first unexpected status: op %d gave %d\n",
            atomic_load(&first_unexpected_op) - 1, atomic_load(&first_unexpected_rc));

  /* drain: every handle released, every capture ended, then empty */
  for (size_t i = 0; i < bag.n; i++) cm_handle_release(bag.h[i]);
  bag.n = 0;
  for (uint64_t s = 0; s < STREAMS; s++) {
    EXPECT_OK(cm_device_capture_end(dev, s, NULL, NULL));
    cm_device_clear_errors(dev, s);
    EXPECT_OK(cm_device_submit(dev, s, NULL));
    EXPECT_OK(cm_device_sync(dev, s, NULL));
  }
  cm_device_cleanup(dev);
  cm_usage_t u;
  cm_device_memory_usage(dev, &u);
  EXPECT_EQ(u.number_allocs, 0);
  EXPECT_EQ(u.bytes_in_use, 0);
  for (uint64_t s = 0; s < STREAMS; s++) {
    EXPECT_EQ(cm_device_pins(dev, s), 0);
    EXPECT_EQ(cm_device_dropped(dev, s), 0);
    for (int pinned = 0; pinned < 2; pinned++) {
      cm_manager_t *m;
      cm_diag_t d;
      cm_diag_clear(&d);
      ASSERT_OK(cm_device_manager(dev, s, pinned, &m, NULL));
      EXPECT_EQ(cm_manager_check(m, &d), 0);
    }
  }
  cm_device_destroy(dev);
  printf("%" PRIu64 " device calls from %d threads on %d streams\n", atomic_load(&calls), THREADS,
         STREAMS);
}

int main(void) {
  CM_RUN(every_threadsafe_call_concurrently);
  return cm_test_finish();
}
