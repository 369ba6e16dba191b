/*
 * test_streams_threads.c - several streams of one device driven from
 * several threads at once (device.h thread-safety): each thread reserves on
 * its own stream, hands handles to a shared bag from which any thread
 * releases them, uses bindings of its stream on its neighbour's stream
 * (cross-stream pins), submits work, defers host buffers through the drop
 * queue, and now and then reads the device-wide usage or cleans every
 * stream. At the end every handle is released and every manager must be
 * consistent and empty after a cleanup.
 *
 * Time-bounded by CM_STRESS_SECONDS (default 2). Meant to run clean under
 * ThreadSanitizer (`make tsan`).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cm_test.h"
#include "cubemem/device.h"

#define THREADS 4
#define BAG 512

typedef struct bag {
  pthread_mutex_t lock;
  cm_handle_t h[BAG];
  size_t n;
} bag_t;

static bag_t bag = {.lock = PTHREAD_MUTEX_INITIALIZER};
static cm_device_t *dev;
static double seconds = 2.0;
static _Atomic uint64_t reserves, releases, cross_uses, failures, freed_buffers;
static _Atomic int first_failure;

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

/* put h in the bag; returns a handle to release (possibly another's), or empty */
static cm_handle_t bag_swap(cm_handle_t h, uint64_t r) {
  cm_handle_t out = {NULL};
  pthread_mutex_lock(&bag.lock);
  if (bag.n < BAG) {
    bag.h[bag.n++] = h;
    if (r % 3 == 0 && bag.n > 1) {
      size_t k = (size_t)(r / 3 % bag.n);
      out = bag.h[k];
      bag.h[k] = bag.h[--bag.n];
    }
  } else {
    size_t k = (size_t)(r % bag.n);
    out = bag.h[k];
    bag.h[k] = h;
  }
  pthread_mutex_unlock(&bag.lock);
  return out;
}

static void on_free(void *arg, void *ptr, uint64_t size) {
  (void)arg;
  (void)size;
  free(ptr);
  atomic_fetch_add(&freed_buffers, 1);
}

static void fail_once(int rc) {
  atomic_fetch_add(&failures, 1);
  int zero = 0;
  atomic_compare_exchange_strong(&first_failure, &zero, rc);
}

static void *worker(void *arg) {
  uint64_t me = (uint64_t)(uintptr_t)arg;
  uint64_t seed = 0x9e3779b97f4a7c15ull * (me + 1);
  uint64_t next = (me + 1) % THREADS;
  double end = now() + seconds;
  unsigned iter = 0;
  while ((iter++ & 63) || now() < end) {
    uint64_t r = rnd(&seed);
    uint64_t size = (r & 7) == 0 ? (r >> 8) % (8u << 20) : (r >> 8) % 65536;
    cm_handle_t h;
    int rc = cm_device_reserve(dev, me, size, &h, NULL);
    if (rc) {
      fail_once(rc);
      continue;
    }
    atomic_fetch_add(&reserves, 1);
    if ((r >> 20) % 5 == 0) {
      cm_binding_t b = cm_handle_binding(h);
      bool waited;
      rc = cm_device_use_binding(dev, b, me, next, NULL, &waited, NULL);
      if (rc) fail_once(rc);
      else atomic_fetch_add(&cross_uses, 1);
      cm_binding_release(b);
    }
    if ((r >> 24) % 4 == 0 && cm_device_submit(dev, me, NULL) != CM_OK) fail_once(-100);
    if ((r >> 28) % 16 == 0) {
      void *p = malloc(32);
      if (p && cm_device_defer_free(dev, me, p, 32, on_free, NULL, NULL) != CM_OK) {
        free(p);
        fail_once(-101);
      }
    }
    if ((r >> 32) % 64 == 0) {
      cm_usage_t u;
      cm_device_memory_usage(dev, &u);
      if (u.bytes_in_use > u.bytes_reserved) fail_once(-102);
    }
    if ((r >> 40) % 512 == 0) cm_device_cleanup(dev);
    if ((r >> 44) % 256 == 0) {
      cm_handle_t p;
      cm_resource_t res;
      if (cm_device_reserve_pinned(dev, me, 256, &p, &res, NULL) == CM_OK) {
        memset(res.host, 1, 256);
        if (cm_device_defer_release(dev, me, p, 256, NULL) != CM_OK) fail_once(-103);
      }
    }
    cm_handle_t old = bag_swap(h, r >> 48);
    if (old.d) {
      cm_handle_release(old); /* often a handle of another thread's stream */
      atomic_fetch_add(&releases, 1);
    }
  }
  return NULL;
}

static void streams_from_threads(void) {
  const char *env = getenv("CM_STRESS_SECONDS");
  if (env && atof(env) > 0) seconds = atof(env);
  cm_device_config_t cfg;
  cm_device_config_init(&cfg);
  cfg.storage = cm_storage_factory_sim;
  cfg.props.max_page_size = 64u << 20;
  cfg.max_streams = 8;
  ASSERT_OK(cm_device_create(&cfg, &dev, NULL));

  pthread_t th[THREADS];
  for (uintptr_t i = 0; i < THREADS; i++)
    ASSERT(pthread_create(&th[i], NULL, worker, (void *)i) == 0);
  for (int i = 0; i < THREADS; i++) pthread_join(th[i], NULL);

  EXPECT_EQ(atomic_load(&failures), 0);
  if (atomic_load(&failures)) fprintf(stderr, "first failure: %d\n", atomic_load(&first_failure));
  EXPECT_GT(atomic_load(&reserves), 100);
  EXPECT_GT(atomic_load(&cross_uses), 0);
  EXPECT_EQ(cm_device_stream_count(dev), THREADS);

  for (size_t i = 0; i < bag.n; i++) cm_handle_release(bag.h[i]);
  bag.n = 0;
  for (uint64_t s = 0; s < THREADS; s++) {
    EXPECT_OK(cm_device_submit(dev, s, NULL)); /* the work that took the last pins */
    EXPECT_OK(cm_device_sync(dev, s, NULL));
  }
  cm_device_cleanup(dev);
  cm_usage_t u;
  cm_device_memory_usage(dev, &u);
  EXPECT_EQ(u.number_allocs, 0);
  EXPECT_EQ(u.bytes_in_use, 0);
  EXPECT_EQ(u.bytes_reserved, 0);
  for (uint64_t s = 0; s < THREADS; s++) {
    EXPECT_EQ(cm_device_pins(dev, s), 0);
    EXPECT_EQ(cm_device_dropped(dev, s), 0);
    cm_usage_t pu;
    EXPECT_OK(cm_device_pinned_usage(dev, s, &pu, NULL));
    EXPECT_EQ(pu.number_allocs, 0);
    cm_manager_t *m;
    cm_diag_t d;
    cm_diag_clear(&d);
    ASSERT_OK(cm_device_manager(dev, s, false, &m, NULL));
    EXPECT_EQ(cm_manager_check(m, &d), 0);
    ASSERT_OK(cm_device_manager(dev, s, true, &m, NULL));
    EXPECT_EQ(cm_manager_check(m, &d), 0);
  }
  cm_device_destroy(dev);
  printf("%" PRIu64 " reserves, %" PRIu64 " cross-thread releases, %" PRIu64
          " cross-stream uses, %" PRIu64 " deferred buffers freed\n",
          atomic_load(&reserves), atomic_load(&releases), atomic_load(&cross_uses),
          atomic_load(&freed_buffers));
}

int main(void) {
  CM_RUN(streams_from_threads);
  return cm_test_finish();
}
