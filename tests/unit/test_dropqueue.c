/*
 * test_dropqueue.c - the drop queue (spec §7, scenarios T80 and T81): the
 * flushing policy, the double buffer behind a fence (a buffer is freed at the
 * second flush after its push), u64 counters, fence errors, destroy.
 */
#include <stdlib.h>

#include "cm_test.h"
#include "cubemem/dropqueue.h"

typedef struct fences {
  int made, synced, destroyed;
  int fail_sync; /* >0: the next sync fails */
  int fail_make;
} fences_t;

static int f_make(void *arg, void **out) {
  fences_t *f = arg;
  if (f->fail_make > 0) {
    f->fail_make--;
    return CM_ESTORAGE;
  }
  f->made++;
  *out = malloc(1);
  return *out ? CM_OK : CM_ENOMEM;
}
static int f_sync(void *arg, void *fence) {
  fences_t *f = arg;
  (void)fence;
  if (f->fail_sync > 0) {
    f->fail_sync--;
    return CM_ESTORAGE;
  }
  f->synced++;
  return CM_OK;
}
static void f_destroy(void *arg, void *fence) {
  fences_t *f = arg;
  f->destroyed++;
  free(fence);
}

static int freed;
static void count_free(void *arg, void *ptr, uint64_t size) {
  (void)arg;
  (void)ptr;
  (void)size;
  freed++;
}

/* T80 */
static void t80_policy(void) {
  cm_flush_policy_t p;
  cm_flush_policy_init(&p, 4, 100);
  EXPECT(!cm_flush_policy_should_flush(&p)); /* empty */
  for (int i = 0; i < 4; i++) cm_flush_policy_register(&p, 1);
  EXPECT(cm_flush_policy_should_flush(&p)); /* 4 one-byte pushes */
  cm_flush_policy_reset(&p);
  cm_flush_policy_register(&p, 101);
  EXPECT(cm_flush_policy_should_flush(&p)); /* one 101-byte push */
  cm_flush_policy_reset(&p);
  cm_flush_policy_register(&p, 60);
  EXPECT(!cm_flush_policy_should_flush(&p));
  cm_flush_policy_register(&p, 60);
  EXPECT(cm_flush_policy_should_flush(&p)); /* two 60-byte pushes */
  cm_flush_policy_reset(&p);
  EXPECT(!cm_flush_policy_should_flush(&p)); /* after a reset */
  EXPECT_EQ(p.max_count, 4);
  EXPECT_EQ(p.max_bytes, 100);
}

static void policy_defaults_and_u64(void) {
  cm_flush_policy_t p;
  cm_flush_policy_init(&p, 0, 0);
  EXPECT_EQ(p.max_count, 64);
  EXPECT_EQ(p.max_bytes, 64ull << 20);
  /* §15.1 item 9: a 5 GiB buffer is not truncated to 1 GiB by a u32 */
  cm_flush_policy_init(&p, 1000, 6ull << 30);
  cm_flush_policy_register(&p, 5ull << 30);
  EXPECT_EQ(p.bytes, 5ull << 30);
  EXPECT(!cm_flush_policy_should_flush(&p));
  cm_flush_policy_register(&p, 1ull << 30);
  EXPECT(cm_flush_policy_should_flush(&p));
  cm_flush_policy_register(&p, UINT64_MAX); /* saturates, no wrap */
  EXPECT_EQ(p.bytes, UINT64_MAX);
  EXPECT(cm_flush_policy_should_flush(&p));
}

/* T81 */
static void t81_queue(void) {
  cm_flush_policy_t pol;
  cm_flush_policy_init(&pol, 2048, 8);
  cm_drop_queue_t *q;
  ASSERT_OK(cm_drop_queue_create(&pol, &q));
  fences_t f = {0};
  cm_fence_ops_t ops = {f_make, f_sync, f_destroy, &f};

  for (int i = 0; i < 2048; i++) ASSERT_OK(cm_drop_queue_push(q, NULL, 0, count_free, NULL));
  EXPECT(cm_drop_queue_should_flush(q)); /* 2048 pushes */
  cm_drop_queue_destroy(q);

  ASSERT_OK(cm_drop_queue_create(&pol, &q));
  ASSERT_OK(cm_drop_queue_push(q, NULL, 9, NULL, NULL));
  EXPECT(cm_drop_queue_should_flush(q)); /* a single 9-byte push */
  cm_drop_queue_destroy(q);

  /* first flush: 0 syncs; push and flush twice: 1 sync */
  ASSERT_OK(cm_drop_queue_create(&pol, &q));
  ASSERT_OK(cm_drop_queue_push(q, NULL, 1, NULL, NULL));
  ASSERT_OK(cm_drop_queue_flush(q, &ops));
  EXPECT_EQ(f.synced, 0);
  ASSERT_OK(cm_drop_queue_flush(q, &ops));
  EXPECT_EQ(f.synced, 1);
  cm_drop_queue_destroy(q);

  /* ten push+flush cycles: 9 syncs */
  f = (fences_t){0};
  ASSERT_OK(cm_drop_queue_create(&pol, &q));
  for (int i = 0; i < 10; i++) {
    ASSERT_OK(cm_drop_queue_push(q, NULL, 1, NULL, NULL));
    ASSERT_OK(cm_drop_queue_flush(q, &ops));
  }
  EXPECT_EQ(f.synced, 9);
  cm_drop_queue_destroy(q);

  /* 5 pushes and a flush: staged empty, pending 5; one more push+flush: pending 1 */
  ASSERT_OK(cm_drop_queue_create(&pol, &q));
  for (int i = 0; i < 5; i++) ASSERT_OK(cm_drop_queue_push(q, NULL, 1, NULL, NULL));
  ASSERT_OK(cm_drop_queue_flush(q, &ops));
  EXPECT_EQ(cm_drop_queue_staged(q), 0);
  EXPECT_EQ(cm_drop_queue_pending(q), 5);
  ASSERT_OK(cm_drop_queue_push(q, NULL, 1, NULL, NULL));
  ASSERT_OK(cm_drop_queue_flush(q, &ops));
  EXPECT_EQ(cm_drop_queue_pending(q), 1);
  /* should_flush is false after a flush; three flushes on an empty queue are safe */
  EXPECT(!cm_drop_queue_should_flush(q));
  cm_drop_queue_destroy(q);
  ASSERT_OK(cm_drop_queue_create(&pol, &q));
  for (int i = 0; i < 3; i++) EXPECT_OK(cm_drop_queue_flush(q, &ops));
  EXPECT_EQ(cm_drop_queue_pending(q), 0);
  cm_drop_queue_destroy(q);
  EXPECT_EQ(f.made, f.destroyed); /* every fence freed */
}

/* A buffer is freed exactly at the second flush after its push. */
static void freed_at_second_flush(void) {
  cm_drop_queue_t *q;
  ASSERT_OK(cm_drop_queue_create(NULL, &q));
  fences_t f = {0};
  cm_fence_ops_t ops = {f_make, f_sync, f_destroy, &f};
  freed = 0;
  ASSERT_OK(cm_drop_queue_push(q, NULL, 10, count_free, NULL));
  ASSERT_OK(cm_drop_queue_flush(q, &ops));
  EXPECT_EQ(freed, 0);
  ASSERT_OK(cm_drop_queue_push(q, NULL, 10, count_free, NULL));
  ASSERT_OK(cm_drop_queue_flush(q, &ops));
  EXPECT_EQ(freed, 1); /* the first, not the second */
  ASSERT_OK(cm_drop_queue_flush(q, &ops));
  EXPECT_EQ(freed, 2); /* two flushes drain */
  ASSERT_OK(cm_drop_queue_push(q, NULL, 10, count_free, NULL));
  cm_drop_queue_destroy(q); /* destroy frees what is left */
  EXPECT_EQ(freed, 3);
  EXPECT_EQ(f.made, f.destroyed);
}

/* NULL fence ops: fences that are always complete. */
static void null_fences(void) {
  cm_drop_queue_t *q;
  ASSERT_OK(cm_drop_queue_create(NULL, &q));
  freed = 0;
  ASSERT_OK(cm_drop_queue_push(q, NULL, 1, count_free, NULL));
  ASSERT_OK(cm_drop_queue_flush(q, NULL));
  ASSERT_OK(cm_drop_queue_flush(q, NULL));
  EXPECT_EQ(freed, 1);
  cm_drop_queue_destroy(q);
  EXPECT_STATUS(cm_drop_queue_flush(NULL, NULL), CM_EINVAL);
  EXPECT_STATUS(cm_drop_queue_push(NULL, NULL, 0, NULL, NULL), CM_EINVAL);
  EXPECT(!cm_drop_queue_should_flush(NULL));
  cm_drop_queue_destroy(NULL);
}

/* A failing sync keeps the batch (it may still be read); a failing make is
 * covered by the safety net of the next flush. */
static void fence_errors(void) {
  cm_drop_queue_t *q;
  ASSERT_OK(cm_drop_queue_create(NULL, &q));
  fences_t f = {0};
  cm_fence_ops_t ops = {f_make, f_sync, f_destroy, &f};
  freed = 0;
  ASSERT_OK(cm_drop_queue_push(q, NULL, 1, count_free, NULL));
  ASSERT_OK(cm_drop_queue_flush(q, &ops));
  f.fail_sync = 1;
  EXPECT_STATUS(cm_drop_queue_flush(q, &ops), CM_ESTORAGE);
  EXPECT_EQ(freed, 0);
  EXPECT_EQ(cm_drop_queue_pending(q), 1);
  ASSERT_OK(cm_drop_queue_flush(q, &ops)); /* retried */
  EXPECT_EQ(freed, 1);

  ASSERT_OK(cm_drop_queue_push(q, NULL, 1, count_free, NULL));
  f.fail_make = 1;
  EXPECT_STATUS(cm_drop_queue_flush(q, &ops), CM_ESTORAGE); /* old fence synced; new one fails */
  ASSERT_OK(cm_drop_queue_push(q, NULL, 1, count_free, NULL));
  f.fail_make = 1;
  EXPECT_STATUS(cm_drop_queue_flush(q, &ops), CM_ESTORAGE); /* safety net needs a fence */
  EXPECT_EQ(cm_drop_queue_pending(q), 1);
  int synced = f.synced;
  ASSERT_OK(cm_drop_queue_flush(q, &ops)); /* safety net: make + sync at once */
  EXPECT_EQ(f.synced, synced + 1);
  EXPECT_EQ(freed, 2);
  EXPECT_EQ(cm_drop_queue_pending(q), 1);
  cm_drop_queue_destroy(q);
  EXPECT_EQ(freed, 3);
  EXPECT_EQ(f.made, f.destroyed);
}

int main(void) {
  CM_RUN(t80_policy);
  CM_RUN(policy_defaults_and_u64);
  CM_RUN(t81_queue);
  CM_RUN(freed_at_second_flush);
  CM_RUN(null_fences);
  CM_RUN(fence_errors);
  return cm_test_finish();
}
