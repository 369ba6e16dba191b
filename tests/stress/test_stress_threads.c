/*
 * test_stress_threads.c - concurrency stress: references released on many
 * threads while each manager's owner thread keeps reserving, resolving and
 * cleaning up.
 *
 * Setup: NSTREAMS managers over host storage (real memory), each driven by
 * its own owner thread (the "stream"), and CM_STRESS_THREADS releaser threads
 * shared by all streams. An owner reserves a slice (mixed sizes, some zero, some in
 * persistent windows, some through bind of a fresh handle), resolves it to a
 * host pointer with cm_manager_get_resource, writes a pattern unique to the
 * reservation into every byte, then splits its reference into 1..3
 * references (the handle, clones, bindings, into_binding) and hands each to a
 * queue. Releasers pop items, clone some of them once more and release the
 * clone, check that every byte still holds the item's pattern (the slice
 * must stay live and untouched while any reference exists), and release the
 * reference. Owners also keep a few references themselves and release them
 * later, run periodic and explicit cleanups, and call cm_manager_check.
 *
 * What failure looks like: a pattern mismatch (memory reused while still
 * referenced, or two live slices overlapping), a non-zero cm_manager_check,
 * usage not back to zero once every reference is gone, or a data race /
 * use-after-free report from TSan / ASan.
 *
 * Time-bounded by CM_STRESS_SECONDS (default 3); CM_STRESS_THREADS sets the
 * number of releaser threads (default 4). The seed is fixed (override with
 * CM_STRESS_SEED) and printed on failure; thread timing still varies.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cm_test.h"
#include "cubemem/cubemem.h"

enum { NSTREAMS = 3, MAX_RELEASERS = 64, QCAP = 4096, OWNER_KEEP = 16 };

typedef struct item {
  bool is_handle;
  cm_handle_t h;
  cm_binding_t b;
  const uint8_t *mem; /* host bytes of the slice (NULL for size 0) */
  uint64_t size;
  uint8_t pattern;
} item;

/* Bounded MPMC queue (mutex + condition variables). */
typedef struct queue {
  pthread_mutex_t mu;
  pthread_cond_t not_empty, not_full;
  item v[QCAP];
  size_t head, len;
  bool closed;
} queue;

static queue g_q;
static uint64_t g_seed = 20240531;
static double g_seconds = 3.0;
static int g_releasers = 4; /* CM_STRESS_THREADS */
static _Atomic uint64_t g_failures, g_ops_reserve, g_ops_release, g_ops_checked_bytes,
    g_ops_cleanup, g_ops_bind, g_ops_clone;
static pthread_mutex_t g_msg_mu = PTHREAD_MUTEX_INITIALIZER;
static char g_first_msg[256];

static void fail_msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail_msg(const char *fmt, ...) {
  if (atomic_fetch_add(&g_failures, 1) == 0) {
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&g_msg_mu);
    vsnprintf(g_first_msg, sizeof g_first_msg, fmt, ap);
    pthread_mutex_unlock(&g_msg_mu);
    va_end(ap);
  }
}

#define U(x) ((unsigned long long)(x))

static uint64_t rng_next(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void q_init(queue *q) {
  pthread_mutex_init(&q->mu, NULL);
  pthread_cond_init(&q->not_empty, NULL);
  pthread_cond_init(&q->not_full, NULL);
  q->head = q->len = 0;
  q->closed = false;
}
static void q_destroy(queue *q) {
  pthread_mutex_destroy(&q->mu);
  pthread_cond_destroy(&q->not_empty);
  pthread_cond_destroy(&q->not_full);
}
static void q_push(queue *q, item it) {
  pthread_mutex_lock(&q->mu);
  while (q->len == QCAP) pthread_cond_wait(&q->not_full, &q->mu);
  q->v[(q->head + q->len) % QCAP] = it;
  q->len++;
  pthread_cond_signal(&q->not_empty);
  pthread_mutex_unlock(&q->mu);
}
/* false when the queue is closed and empty */
static bool q_pop(queue *q, item *out) {
  pthread_mutex_lock(&q->mu);
  while (q->len == 0 && !q->closed) pthread_cond_wait(&q->not_empty, &q->mu);
  if (q->len == 0) {
    pthread_mutex_unlock(&q->mu);
    return false;
  }
  *out = q->v[q->head];
  q->head = (q->head + 1) % QCAP;
  q->len--;
  pthread_cond_signal(&q->not_full);
  pthread_mutex_unlock(&q->mu);
  return true;
}
static void q_close(queue *q) {
  pthread_mutex_lock(&q->mu);
  q->closed = true;
  pthread_cond_broadcast(&q->not_empty);
  pthread_mutex_unlock(&q->mu);
}

static void check_pattern(const item *it, const char *who) {
  for (uint64_t i = 0; i < it->size; i++)
    if (it->mem[i] != it->pattern) {
      fail_msg("%s: byte %llu of a live slice changed (pattern %u)", who, U(i), it->pattern);
      return;
    }
  atomic_fetch_add_explicit(&g_ops_checked_bytes, it->size, memory_order_relaxed);
}

static void release_item(item *it, const char *who) {
  check_pattern(it, who);
  if (it->is_handle)
    cm_handle_release(it->h);
  else
    cm_binding_release(it->b);
  atomic_fetch_add_explicit(&g_ops_release, 1, memory_order_relaxed);
}

static void *releaser_main(void *arg) {
  uint64_t rng = g_seed ^ (0xABCDull * (uintptr_t)arg);
  item it;
  while (q_pop(&g_q, &it)) {
    /* Sometimes make and drop an extra reference from this thread. */
    if (rng_next(&rng) % 4 == 0) {
      if (it.is_handle) {
        cm_handle_t c = cm_handle_clone(it.h);
        if (cm_handle_id(c) != cm_handle_id(it.h)) fail_msg("releaser: clone id %llu vs %llu", U(cm_handle_id(c)),
                                   U(cm_handle_id(it.h)));
        cm_binding_t b = cm_handle_binding(c);
        cm_handle_release(c);
        cm_binding_release(b);
      } else {
        cm_binding_release(cm_binding_clone(it.b));
      }
      atomic_fetch_add_explicit(&g_ops_clone, 1, memory_order_relaxed);
    }
    release_item(&it, "releaser");
  }
  return NULL;
}

typedef struct owner {
  int index;
  cm_manager_t *m;
  uint64_t rng;
  item keep[OWNER_KEEP];
  int nkeep;
  uint8_t next_pattern;
} owner;

static uint64_t pick_size(owner *o) {
  uint64_t r = rng_next(&o->rng) % 100;
  if (r < 5) return 0;
  if (r < 60) return 1 + rng_next(&o->rng) % 1024;
  if (r < 95) return 1 + rng_next(&o->rng) % (64u << 10);
  return 1 + rng_next(&o->rng) % (1u << 20);
}

/* Reserve one slice (maybe through bind), fill it, hand out references. */
static void owner_step(owner *o) {
  cm_manager_t *m = o->m;
  uint64_t size = pick_size(o);
  bool window = rng_next(&o->rng) % 8 == 0;
  if (window) cm_manager_set_mode(m, CM_MODE_PERSISTENT);
  cm_handle_t h = {NULL};
  cm_diag_t d;
  cm_diag_clear(&d);
  int rc = cm_manager_reserve(m, size, &h, &d);
  if (window) cm_manager_set_mode(m, CM_MODE_AUTO);
  if (rc != CM_OK) {
    fail_msg("owner: reserve failed: %s (size %llu)", d.message, U(size));
    return;
  }
  atomic_fetch_add_explicit(&g_ops_reserve, 1, memory_order_relaxed);
  if (rng_next(&o->rng) % 4 == 0) { /* the server-side bind protocol */
    cm_handle_t assigned;
    if (cm_handle_new(&assigned) != CM_OK) {
      cm_handle_release(h);
      fail_msg("owner: cm_handle_new failed");
      return;
    }
    rc = cm_manager_bind(m, h, assigned, rng_next(&o->rng) % 1000, &d); /* consumes h */
    if (rc != CM_OK) {
      cm_handle_release(assigned);
      fail_msg("owner: bind failed: %s", d.message);
      return;
    }
    h = assigned;
    atomic_fetch_add_explicit(&g_ops_bind, 1, memory_order_relaxed);
  }
  item it = {.is_handle = true, .h = h, .size = size};
  if (!cm_handle_can_mut(h)) fail_msg("owner: a fresh handle is not can_mut");
  cm_binding_t probe = cm_handle_binding(h);
  cm_resource_t res;
  rc = cm_manager_get_resource(m, probe, 0, 0, &res, &d);
  cm_binding_release(probe);
  if (rc != CM_OK || res.size != size || (size && !res.host)) {
    fail_msg("owner: get_resource: rc %d %s (size %llu vs %llu)", rc, d.message, U(res.size), U(size));
    cm_handle_release(h);
    return;
  }
  it.mem = res.host;
  it.pattern = (uint8_t)(++o->next_pattern | 1u);
  if (size) memset(res.host, it.pattern, size);

  /* Split into 1..3 references and give them away (or keep one). */
  int nref = 1 + (int)(rng_next(&o->rng) % 3);
  item refs[3];
  refs[0] = it;
  for (int i = 1; i < nref; i++) {
    refs[i] = it;
    if (rng_next(&o->rng) & 1) {
      refs[i].h = cm_handle_clone(h);
    } else {
      refs[i].is_handle = false;
      refs[i].b = cm_handle_binding(h);
    }
  }
  if (nref > 1 && rng_next(&o->rng) % 3 == 0) { /* the original becomes a binding */
    refs[0].is_handle = false;
    refs[0].b = cm_handle_into_binding(refs[0].h);
    refs[0].h.d = NULL;
  }
  for (int i = 0; i < nref; i++) {
    if (o->nkeep < OWNER_KEEP && rng_next(&o->rng) % 5 == 0)
      o->keep[o->nkeep++] = refs[i];
    else
      q_push(&g_q, refs[i]);
  }
  /* Release some kept references on the owner thread. */
  if (o->nkeep && rng_next(&o->rng) % 3 == 0) {
    int k = (int)(rng_next(&o->rng) % (uint64_t)o->nkeep);
    release_item(&o->keep[k], "owner");
    o->keep[k] = o->keep[--o->nkeep];
  }
}

static void *owner_main(void *arg) {
  owner *o = arg;
  double end = now_s() + g_seconds;
  uint64_t n = 0;
  while (now_s() < end && atomic_load(&g_failures) == 0) {
    owner_step(o);
    n++;
    uint64_t r = rng_next(&o->rng) % 64;
    if (r == 0) {
      cm_manager_cleanup(o->m, true);
      atomic_fetch_add_explicit(&g_ops_cleanup, 1, memory_order_relaxed);
    } else if (r < 4) {
      cm_manager_cleanup(o->m, false);
      atomic_fetch_add_explicit(&g_ops_cleanup, 1, memory_order_relaxed);
    }
    if (n % 256 == 0) {
      cm_diag_t d;
      cm_diag_clear(&d);
      size_t bad = cm_manager_check(o->m, &d);
      if (bad) fail_msg("owner: cm_manager_check: %s (%zu violations, op %llu)", d.message, bad, U(n));
    }
  }
  while (o->nkeep) release_item(&o->keep[--o->nkeep], "owner");
  return NULL;
}

static void threads_release_while_owner_reserves(void) {
  const char *env = getenv("CM_STRESS_SECONDS");
  if (env && *env) g_seconds = atof(env);
  if (g_seconds <= 0) g_seconds = 3.0;
  env = getenv("CM_STRESS_THREADS");
  if (env && *env) g_releasers = atoi(env);
  if (g_releasers < 1) g_releasers = 1;
  if (g_releasers > MAX_RELEASERS) g_releasers = MAX_RELEASERS;
  env = getenv("CM_STRESS_SEED");
  if (env && *env) g_seed = strtoull(env, NULL, 0);

  q_init(&g_q);
  owner owners[NSTREAMS];
  memset(owners, 0, sizeof owners);
  for (int i = 0; i < NSTREAMS; i++) {
    cm_storage_t *st = NULL;
    ASSERT_OK(cm_storage_host_create(0, &st));
    cm_manager_config_t cfg;
    cm_manager_config_init(&cfg);
    cfg.name = "stress";
    cfg.props.max_page_size = 8u << 20;
    cfg.props.alignment = 256;
    cfg.preset = (cm_preset_t)(i % 3); /* each stream a different layout */
    cm_diag_t d;
    cm_diag_clear(&d);
    int rc = cm_manager_create(st, &cfg, &owners[i].m, &d);
    if (rc != CM_OK) cm_storage_destroy(st);
    ASSERT_OK(rc);
    owners[i].index = i;
    owners[i].rng = g_seed + 1000003ull * (uint64_t)i;
  }
  pthread_t rel[MAX_RELEASERS], own[NSTREAMS];
  for (int i = 0; i < g_releasers; i++)
    ASSERT_OK(pthread_create(&rel[i], NULL, releaser_main, (void *)(uintptr_t)(i + 1)));
  for (int i = 0; i < NSTREAMS; i++)
    ASSERT_OK(pthread_create(&own[i], NULL, owner_main, &owners[i]));
  for (int i = 0; i < NSTREAMS; i++) pthread_join(own[i], NULL);
  q_close(&g_q);
  for (int i = 0; i < g_releasers; i++) pthread_join(rel[i], NULL);
  q_destroy(&g_q);

  /* Every reference is gone: each manager must be empty after a cleanup. */
  for (int i = 0; i < NSTREAMS; i++) {
    cm_manager_cleanup(owners[i].m, true);
    cm_diag_t d;
    cm_diag_clear(&d);
    EXPECT_EQ(cm_manager_check(owners[i].m, &d), 0);
    cm_usage_t u;
    cm_manager_usage(owners[i].m, &u);
    EXPECT_EQ(u.number_allocs, 0);
    EXPECT_EQ(u.bytes_in_use, 0);
    cm_manager_destroy(owners[i].m);
  }
  uint64_t fails = atomic_load(&g_failures);
  if (fails) {
    fprintf(stderr, "stress: %llu failures; first: %s\n", (unsigned long long)fails, g_first_msg);
    fprintf(stderr, "stress: seed %llu (rerun with CM_STRESS_SEED=%llu)\n",
            (unsigned long long)g_seed, (unsigned long long)g_seed);
  }
  EXPECT_EQ(fails, 0);
  uint64_t reserves = atomic_load(&g_ops_reserve), releases = atomic_load(&g_ops_release);
  EXPECT_GT(reserves, 0);
  EXPECT_GE(releases, reserves);
  printf("stress: %.1fs, %d streams, %d releaser threads: %llu reserves (%llu via bind), "
         "%llu releases, %llu extra clones, %llu cleanups, %llu bytes pattern-checked\n",
         g_seconds, NSTREAMS, g_releasers, (unsigned long long)reserves,
         (unsigned long long)atomic_load(&g_ops_bind), (unsigned long long)releases,
         (unsigned long long)atomic_load(&g_ops_clone),
         (unsigned long long)atomic_load(&g_ops_cleanup),
         (unsigned long long)atomic_load(&g_ops_checked_bytes));
}

int main(void) {
  CM_RUN(threads_release_while_owner_reserves);
  return cm_test_finish();
}
