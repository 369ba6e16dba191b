/*
 * test_reports_see_releases.c - what memory.h says may run concurrently with
 * the driving thread, run concurrently: one thread drives the manager
 * (reserves, and reads cm_manager_usage / cm_manager_pool_report between
 * them) while others release handles and bindings and read
 * cm_storage_stats. Every report taken after a batch of releases has been
 * handed back (a barrier) must include all of them: the reports take in the
 * freed inbox. Meant to run clean under ThreadSanitizer (`make tsan`).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "cm_test.h"
#include "cubemem/cubemem.h"

#define RELEASERS 3
#define BATCH 300
#define ROUNDS 40

static cm_handle_t g_handles[RELEASERS][BATCH];
static cm_binding_t g_bindings[RELEASERS][BATCH];
static pthread_barrier_t g_start, g_done;
static cm_storage_t *g_storage;
static _Atomic uint64_t g_stats_reads;

static void *releaser(void *arg) {
  size_t k = (size_t)(uintptr_t)arg;
  for (int round = 0; round < ROUNDS; round++) {
    pthread_barrier_wait(&g_start); /* the driving thread filled our row */
    for (size_t i = 0; i < BATCH; i++) {
      cm_binding_release(g_bindings[k][i]);
      cm_handle_release(g_handles[k][i]);
      if (i % 64 == 0) {
        cm_storage_stats_t st;
        cm_storage_stats(g_storage, &st); /* any thread */
        atomic_fetch_add(&g_stats_reads, 1);
      }
    }
    pthread_barrier_wait(&g_done);
  }
  return NULL;
}

static void reports_include_every_release(void) {
  ASSERT_OK(cm_storage_sim_create(0, false, 0, &g_storage));
  cm_manager_config_t mc;
  cm_manager_config_init(&mc);
  mc.props = (cm_device_props_t){.max_page_size = 1ull << 30, .alignment = 512};
  cm_manager_t *m = NULL;
  ASSERT_OK(cm_manager_create(g_storage, &mc, &m, NULL));
  ASSERT(pthread_barrier_init(&g_start, NULL, RELEASERS + 1) == 0);
  ASSERT(pthread_barrier_init(&g_done, NULL, RELEASERS + 1) == 0);
  pthread_t t[RELEASERS];
  for (size_t k = 0; k < RELEASERS; k++)
    ASSERT(pthread_create(&t[k], NULL, releaser, (void *)(uintptr_t)k) == 0);
  cm_handle_t keep[ROUNDS];
  for (int round = 0; round < ROUNDS; round++) {
    for (size_t k = 0; k < RELEASERS; k++)
      for (size_t i = 0; i < BATCH; i++) {
        ASSERT_OK(cm_manager_reserve(m, 512 + 64 * ((i + k) % 97), &g_handles[k][i], NULL));
        g_bindings[k][i] = cm_handle_binding(g_handles[k][i]);
      }
    pthread_barrier_wait(&g_start);
    /* while the others release: the driving thread keeps working */
    ASSERT_OK(cm_manager_reserve(m, 4096, &keep[round], NULL));
    cm_usage_t mid;
    cm_manager_usage(m, &mid);
    EXPECT_GE(mid.number_allocs, (uint64_t)round + 1);
    pthread_barrier_wait(&g_done);
    /* every release of the round happened before these calls */
    cm_usage_t u;
    cm_manager_usage(m, &u);
    EXPECT_EQ(u.number_allocs, (uint64_t)round + 1);
    EXPECT_EQ(u.bytes_in_use, 4096ull * (uint64_t)(round + 1));
    cm_pool_report_t r;
    ASSERT_OK(cm_manager_pool_report(m, 0, &r));
    EXPECT_EQ(r.usage.number_allocs, (uint64_t)round + 1);
  }
  for (size_t k = 0; k < RELEASERS; k++) pthread_join(t[k], NULL);
  EXPECT_GT(atomic_load(&g_stats_reads), 0);
  for (int round = 0; round < ROUNDS; round++) cm_handle_release(keep[round]);
  cm_usage_t u;
  cm_manager_usage(m, &u);
  EXPECT_EQ(u.number_allocs, 0);
  EXPECT_EQ(cm_manager_check(m, NULL), 0);
  pthread_barrier_destroy(&g_start);
  pthread_barrier_destroy(&g_done);
  cm_manager_destroy(m);
}

int main(void) {
  CM_RUN(reports_include_every_release);
  return cm_test_finish();
}
