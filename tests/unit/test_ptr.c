/*
 * test_ptr.c - the pointer API (cubemem/ptr.h) over the simulated device and
 * the host storage: allocation, reuse after free, per-stream managers, zero
 * sizes, usage accounting, errors (unknown pointer, double free, too big,
 * out of memory with cleanup-and-retry), and alloc/free from 4 threads.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cm_test.h"
#include "cubemem/ptr.h"
#include "base/u64map.h"

static cm_ptr_allocator_t *make(cm_ptr_sim_t *sim) {
  cm_ptr_config_t cfg;
  cm_ptr_config_init(&cfg);
  cfg.factory = cm_ptr_sim_factory;
  cfg.factory_arg = sim;
  cfg.props.max_page_size = 64ull << 20;
  cfg.props.alignment = 512;
  cm_ptr_allocator_t *a = NULL;
  cm_diag_t d = {0};
  int rc = cm_ptr_allocator_create(&cfg, &a, &d);
  if (rc != CM_OK) cm_test_fail(__FILE__, __LINE__, "create: %s", d.message);
  return a;
}

static void test_u64map(void) {
  cm__u64map m;
  cm__u64map_init(&m);
  EXPECT(cm__u64map_get(&m, 5) == NULL);
  EXPECT_STATUS(cm__u64map_put(&m, 0, &m), CM_EINVAL);
  /* churn with a reference array */
  enum { N = 5000 };
  static bool present[N];
  memset(present, 0, sizeof present);
  uint64_t x = 88172645463325252ull;
  for (int step = 0; step < 40000; step++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    uint64_t k = x % N;
    if (k == 0) continue;
    void *v = (void *)(uintptr_t)(k * 16);
    if (present[k]) {
      ASSERT(cm__u64map_remove(&m, k) == v);
      present[k] = false;
    } else {
      ASSERT_OK(cm__u64map_put(&m, k, v));
      present[k] = true;
    }
  }
  size_t n = 0;
  for (uint64_t k = 1; k < N; k++) {
    void *v = cm__u64map_get(&m, k);
    if (present[k]) {
      n++;
      EXPECT(v == (void *)(uintptr_t)(k * 16));
    } else {
      EXPECT(v == NULL);
    }
  }
  EXPECT_EQ(m.count, n);
  cm__u64map_free(&m);
}

static void test_basic(void) {
  cm_ptr_allocator_t *a = make(NULL);
  ASSERT(a != NULL);
  void *p = NULL, *q = NULL;
  ASSERT_OK(cm_ptr_alloc(a, 1000, NULL, &p, NULL));
  ASSERT_OK(cm_ptr_alloc(a, 3000, NULL, &q, NULL));
  EXPECT(p != NULL && q != NULL && p != q);
  EXPECT((uintptr_t)p >= 0x100000000u); /* simulated addresses */
  EXPECT_EQ((uintptr_t)p % 512, 0);
  uint64_t sz = 0;
  EXPECT_OK(cm_ptr_size(a, p, &sz));
  EXPECT_EQ(sz, 1000);
  EXPECT_OK(cm_ptr_size(a, q, &sz));
  EXPECT_EQ(sz, 3000);
  cm_ptr_usage_t u;
  ASSERT_OK(cm_ptr_usage(a, &u));
  EXPECT_EQ(u.streams, 1);
  EXPECT_EQ(u.live_pointers, 2);
  EXPECT_EQ(u.total.number_allocs, 2);
  EXPECT_EQ(u.total.bytes_in_use, 4000);
  EXPECT(u.total.bytes_reserved >= 4000);
  EXPECT(u.bytes_reserved_peak >= u.total.bytes_reserved);
  EXPECT_EQ(u.allocs, 2);
  EXPECT_EQ(u.bytes_in_use_peak, 4000);

  /* zero bytes: NULL, no manager involvement; freeing NULL is fine */
  void *z = (void *)0x1;
  EXPECT_OK(cm_ptr_alloc(a, 0, NULL, &z, NULL));
  EXPECT(z == NULL);
  EXPECT_OK(cm_ptr_free(a, NULL, NULL));

  EXPECT_OK(cm_ptr_free(a, p, NULL));
  /* double free and unknown pointers: an error, nothing changes */
  EXPECT_STATUS(cm_ptr_free(a, p, NULL), CM_ENOTFOUND);
  EXPECT_STATUS(cm_ptr_free(a, (void *)0xdeadbeef, NULL), CM_ENOTFOUND);
  EXPECT_STATUS(cm_ptr_free(a, (char *)q + 8, NULL), CM_ENOTFOUND); /* interior */
  EXPECT_STATUS(cm_ptr_size(a, p, &sz), CM_ENOTFOUND);
  ASSERT_OK(cm_ptr_usage(a, &u));
  EXPECT_EQ(u.live_pointers, 1);
  EXPECT_EQ(u.frees, 1);
  EXPECT_EQ(u.bytes_in_use_peak, 4000); /* the peak stays after a free */
  void *big = NULL;                       /* 3000 live + 2000 = 5000: a new peak */
  ASSERT_OK(cm_ptr_alloc(a, 2000, NULL, &big, NULL));
  EXPECT_OK(cm_ptr_free(a, big, NULL));
  ASSERT_OK(cm_ptr_usage(a, &u));
  EXPECT_EQ(u.bytes_in_use_peak, 5000);

  /* the freed slice is reused by the next request of that size */
  void *r = NULL;
  ASSERT_OK(cm_ptr_alloc(a, 1000, NULL, &r, NULL));
  EXPECT(r == p);
  ASSERT_OK(cm_ptr_usage(a, &u));
  EXPECT_EQ(u.total.bytes_in_use, 4000);

  char rep[4096];
  size_t need = cm_ptr_report(a, rep, sizeof rep);
  EXPECT(need > 0);
  EXPECT_CONTAINS(rep, "1 stream(s), 2 live pointer(s)");
  EXPECT_EQ(cm_ptr_report(a, NULL, 0), need);

  /* destroy with live pointers releases them */
  cm_ptr_allocator_destroy(a);
}

static void test_streams(void) {
  cm_ptr_allocator_t *a = make(NULL);
  ASSERT(a != NULL);
  void *s1 = (void *)0x1111, *s2 = (void *)0x2222;
  void *p1 = NULL, *p2 = NULL;
  ASSERT_OK(cm_ptr_alloc(a, 4096, s1, &p1, NULL));
  ASSERT_OK(cm_ptr_alloc(a, 4096, s2, &p2, NULL));
  cm_ptr_usage_t u;
  ASSERT_OK(cm_ptr_usage(a, &u));
  EXPECT_EQ(u.streams, 2); /* one manager per stream */
  /* each stream has its own simulated device, so the fake addresses of the
   * two streams coincide; frees are resolved on their own stream */
  EXPECT(p1 == p2);
  EXPECT_OK(cm_ptr_free(a, p2, s2));
  uint64_t sz;
  EXPECT_OK(cm_ptr_size(a, p1, &sz)); /* s1's pointer survived */
  /* a free on the wrong stream still finds the pointer on its own stream */
  EXPECT_OK(cm_ptr_free(a, p1, (void *)0x3333));
  EXPECT_STATUS(cm_ptr_free(a, p1, s1), CM_ENOTFOUND);
  ASSERT_OK(cm_ptr_usage(a, &u));
  EXPECT_EQ(u.live_pointers, 0);
  cm_ptr_allocator_destroy(a);

  /* stream limit */
  cm_ptr_config_t cfg;
  cm_ptr_config_init(&cfg);
  cfg.factory = cm_ptr_sim_factory;
  cfg.max_streams = 1;
  ASSERT_OK(cm_ptr_allocator_create(&cfg, &a, NULL));
  ASSERT_OK(cm_ptr_alloc(a, 10, s1, &p1, NULL));
  cm_diag_t d = {0};
  EXPECT_STATUS(cm_ptr_alloc(a, 10, s2, &p2, &d), CM_ESTREAM);
  EXPECT(p2 == NULL);
  EXPECT_CONTAINS(d.message, "limit of 1 streams");
  cm_ptr_allocator_destroy(a);
}

static void test_errors(void) {
  cm_ptr_config_t cfg;
  cm_ptr_config_init(&cfg);
  cm_ptr_allocator_t *a = NULL;
  cm_diag_t d = {0};
  EXPECT_STATUS(cm_ptr_allocator_create(&cfg, &a, &d), CM_EINVAL); /* no factory */
  EXPECT_CONTAINS(d.message, "factory");
  EXPECT_STATUS(cm_ptr_allocator_create(NULL, &a, NULL), CM_EINVAL);
  void *p = (void *)0x1;
  EXPECT_STATUS(cm_ptr_alloc(NULL, 10, NULL, &p, NULL), CM_EINVAL);
  EXPECT(p == NULL);
  EXPECT_STATUS(cm_ptr_free(NULL, (void *)0x10, NULL), CM_EINVAL);
  cm_ptr_usage_t u;
  EXPECT_STATUS(cm_ptr_usage(NULL, &u), CM_EINVAL);
  cm_ptr_allocator_destroy(NULL);
  cm_ptr_empty_cache(NULL);

  /* out of device memory: an error with a message, and the allocator still
   * works; after freeing, the same request succeeds (cleanup + retry) */
  cm_ptr_sim_t sim = {.capacity = 256ull << 20, .fail_over_capacity = true};
  a = make(&sim);
  ASSERT(a != NULL);
  void *big[4] = {0};
  int got = 0;
  for (int i = 0; i < 4; i++) {
    cm_diag_clear(&d);
    int rc = cm_ptr_alloc(a, 100ull << 20, NULL, &big[i], &d);
    if (rc == CM_OK) {
      got++;
      continue;
    }
    EXPECT(rc == CM_EOOM || rc == CM_ECAPACITY);
    EXPECT(big[i] == NULL);
    EXPECT(d.message[0] != '\0');
  }
  EXPECT(got >= 1);
  EXPECT(got <= 2);
  ASSERT_OK(cm_ptr_usage(a, &u));
  EXPECT(u.failed_allocs >= 2);
  EXPECT(u.retries >= 1);
  for (int i = 0; i < 4; i++) EXPECT_OK(cm_ptr_free(a, big[i], NULL));
  void *again[2] = {0};
  EXPECT_OK(cm_ptr_alloc(a, 100ull << 20, NULL, &again[0], &d));
  EXPECT_OK(cm_ptr_alloc(a, 100ull << 20, NULL, &again[1], &d));
  cm_ptr_empty_cache(a);
  for (int i = 0; i < 2; i++) EXPECT_OK(cm_ptr_free(a, again[i], NULL));
  cm_ptr_empty_cache(a);
  ASSERT_OK(cm_ptr_usage(a, &u));
  EXPECT_EQ(u.live_pointers, 0);
  EXPECT_EQ(u.total.bytes_in_use, 0);
  cm_ptr_allocator_destroy(a);
}

static int failing_factory(void *arg, void *stream, cm_storage_t **out, cm_diag_t *diag) {
  (void)arg;
  (void)stream;
  *out = NULL;
  if (diag) {
    diag->code = CM_ENODEV;
    snprintf(diag->message, sizeof diag->message, "no device here");
  }
  return CM_ENODEV;
}

static void test_factory_failure(void) {
  cm_ptr_config_t cfg;
  cm_ptr_config_init(&cfg);
  cfg.factory = failing_factory;
  cm_ptr_allocator_t *a = NULL;
  ASSERT_OK(cm_ptr_allocator_create(&cfg, &a, NULL));
  void *p = (void *)0x1;
  cm_diag_t d = {0};
  EXPECT_STATUS(cm_ptr_alloc(a, 100, NULL, &p, &d), CM_ENODEV);
  EXPECT(p == NULL);
  EXPECT_CONTAINS(d.message, "no device here");
  cm_ptr_usage_t u;
  ASSERT_OK(cm_ptr_usage(a, &u));
  EXPECT_EQ(u.streams, 0);
  cm_ptr_allocator_destroy(a);
}

static int host_factory(void *arg, void *stream, cm_storage_t **out, cm_diag_t *diag) {
  (void)arg;
  (void)stream;
  (void)diag;
  return cm_storage_host_create(64, out);
}

static void test_host_memory_is_usable(void) {
  /* over the host storage the pointers are real memory */
  cm_ptr_config_t cfg;
  cm_ptr_config_init(&cfg);
  cfg.factory = host_factory;
  cfg.props.max_page_size = 8ull << 20;
  cfg.props.alignment = 64;
  cm_ptr_allocator_t *a = NULL;
  ASSERT_OK(cm_ptr_allocator_create(&cfg, &a, NULL));
  char *p[32];
  for (int i = 0; i < 32; i++) {
    ASSERT_OK(cm_ptr_alloc(a, (uint64_t)(i * 977 + 1), NULL, (void **)&p[i], NULL));
    memset(p[i], i, (size_t)(i * 977 + 1));
  }
  for (int i = 0; i < 32; i++) {
    for (int j = 0; j < i * 977 + 1; j += 97) EXPECT_EQ((unsigned char)p[i][j], i);
    EXPECT_OK(cm_ptr_free(a, p[i], NULL));
  }
  cm_ptr_allocator_destroy(a);
}

typedef struct worker {
  cm_ptr_allocator_t *a;
  int index;
  int failures;
} worker;

static void *work(void *arg) {
  worker *w = arg;
  void *live[64] = {0};
  uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(w->index + 1);
  void *stream = (w->index % 2) ? (void *)0x5000 : NULL; /* two threads per stream */
  for (int step = 0; step < 4000; step++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    int slot = (int)(x % 64);
    if (live[slot]) {
      if (cm_ptr_free(w->a, live[slot], stream) != CM_OK) w->failures++;
      live[slot] = NULL;
    } else {
      uint64_t size = 1 + (x >> 20) % (1u << 20);
      if (cm_ptr_alloc(w->a, size, stream, &live[slot], NULL) != CM_OK) w->failures++;
    }
  }
  for (int i = 0; i < 64; i++)
    if (live[i] && cm_ptr_free(w->a, live[i], stream) != CM_OK) w->failures++;
  return NULL;
}

static void test_threads(void) {
  cm_ptr_allocator_t *a = make(NULL);
  ASSERT(a != NULL);
  pthread_t t[4];
  worker w[4];
  for (int i = 0; i < 4; i++) {
    w[i] = (worker){a, i, 0};
    ASSERT(pthread_create(&t[i], NULL, work, &w[i]) == 0);
  }
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < 4; i++) EXPECT_EQ(w[i].failures, 0);
  cm_ptr_usage_t u;
  ASSERT_OK(cm_ptr_usage(a, &u));
  EXPECT_EQ(u.live_pointers, 0);
  EXPECT_EQ(u.streams, 2);
  EXPECT_EQ(u.allocs, u.frees);
  EXPECT(u.allocs > 1000);
  EXPECT_EQ(u.total.bytes_in_use, 0);
  cm_ptr_allocator_destroy(a);
}

/* Regression: a pointer is identified by stream and address. Every simulated
 * stream hands out the same first address, so a double free (or a free of a
 * pointer of another known stream) used to find the equal address of another
 * stream and free that live pointer instead of failing. */
static void test_double_and_foreign_frees(void) {
  cm_ptr_allocator_t *a = make(NULL);
  ASSERT(a != NULL);
  void *s1 = (void *)0x1111, *s2 = (void *)0x2222, *unknown = (void *)0x4444;
  void *p1 = NULL, *p2 = NULL, *q1 = NULL;
  ASSERT_OK(cm_ptr_alloc(a, 4096, s1, &p1, NULL));
  ASSERT_OK(cm_ptr_alloc(a, 4096, s2, &p2, NULL));
  ASSERT(p1 == p2); /* the precondition of the bug */
  ASSERT_OK(cm_ptr_alloc(a, 8192, s1, &q1, NULL)); /* an address only s1 holds */
  cm_ptr_usage_t u0, u;
  ASSERT_OK(cm_ptr_usage(a, &u0));
  EXPECT_EQ(u0.live_pointers, 3);

  /* an address held by two streams, freed with an unknown stream: ambiguous */
  EXPECT_STATUS(cm_ptr_free(a, p1, unknown), CM_ENOTFOUND);
  uint64_t sz = 0;
  EXPECT_STATUS(cm_ptr_size(a, p1, &sz), CM_ENOTFOUND); /* ambiguous as well */
  /* s1's pointer freed on s2's known stream: refused, s2's equal address kept */
  EXPECT_STATUS(cm_ptr_free(a, q1, s2), CM_ENOTFOUND);
  ASSERT_OK(cm_ptr_usage(a, &u));
  EXPECT_EQ(u.live_pointers, 3);
  EXPECT_EQ(u.total.bytes_in_use, u0.total.bytes_in_use);

  /* double free on s1 */
  EXPECT_OK(cm_ptr_free(a, p1, s1));
  EXPECT_STATUS(cm_ptr_free(a, p1, s1), CM_ENOTFOUND);
  EXPECT_STATUS(cm_ptr_free(a, p1, s1), CM_ENOTFOUND);
  ASSERT_OK(cm_ptr_usage(a, &u));
  EXPECT_EQ(u.live_pointers, 2); /* s2's pointer at the same address is alive */
  EXPECT_EQ(u.frees, 1);
  EXPECT_OK(cm_ptr_size(a, p2, &sz)); /* unique again */
  EXPECT_EQ(sz, 4096);

  /* foreign pointers: never allocated, interior, NULL stream never used */
  EXPECT_STATUS(cm_ptr_free(a, (void *)0xdeadbeef, s2), CM_ENOTFOUND);
  EXPECT_STATUS(cm_ptr_free(a, (char *)p2 + 512, s2), CM_ENOTFOUND);
  EXPECT_STATUS(cm_ptr_free(a, (void *)0x7000, NULL), CM_ENOTFOUND);
  ASSERT_OK(cm_ptr_usage(a, &u));
  EXPECT_EQ(u.live_pointers, 2);

  /* an unknown stream still frees an address only one stream holds */
  EXPECT_OK(cm_ptr_free(a, q1, unknown));
  EXPECT_STATUS(cm_ptr_free(a, q1, s1), CM_ENOTFOUND);
  EXPECT_OK(cm_ptr_free(a, p2, s2));
  EXPECT_STATUS(cm_ptr_free(a, p2, s2), CM_ENOTFOUND);
  ASSERT_OK(cm_ptr_usage(a, &u));
  EXPECT_EQ(u.live_pointers, 0);
  EXPECT_EQ(u.total.bytes_in_use, 0);
  EXPECT_EQ(u.frees, 3);
  cm_ptr_allocator_destroy(a);
}

int main(void) {
  CM_RUN(test_u64map);
  CM_RUN(test_basic);
  CM_RUN(test_streams);
  CM_RUN(test_double_and_foreign_frees);
  CM_RUN(test_errors);
  CM_RUN(test_factory_failure);
  CM_RUN(test_host_memory_is_usable);
  CM_RUN(test_threads);
  return cm_test_finish();
}
