/*
 * dropqueue.c - deferred release of host buffers (spec §7): the flushing
 * policy and the double-buffered fence queue.
 *
 * Algorithm. Two vectors of buffers, `staged` (pushed since the last flush)
 * and `pending` (the batch behind `fence`). flush(): sync the fence of the
 * previous flush and free `pending`; if `pending` is still non-empty (no
 * fence could be made for it) make one, sync it at once and free it; swap the
 * vectors so `pending` holds the staged batch; record a new fence; reset the
 * policy. A buffer is therefore freed at the second flush after its push.
 *
 * Invariants: `fence_valid` implies the fence covers every buffer in
 * `pending`; `staged` is empty right after a successful flush; the policy
 * state counts exactly the buffers pushed since the last flush.
 *
 * Exports: cm_flush_policy_*, cm_drop_queue_* (cubemem/dropqueue.h).
 */
#include <stdlib.h>
#include <string.h>

#include "cubemem/dropqueue.h"

typedef struct buf {
  void *ptr;
  uint64_t size;
  cm_drop_free_fn free_fn;
  void *arg;
} buf_t;

typedef struct vec {
  buf_t *v;
  size_t n, cap;
} vec_t;

struct cm_drop_queue {
  cm_flush_policy_t policy;
  vec_t staged, pending;
  bool fence_valid;      /* a fence from the previous flush is outstanding */
  void *fence;           /* may be NULL (always complete) even when valid */
  cm_fence_ops_t fence_ops; /* the ops that made `fence` */
};

/* ---- policy ------------------------------------------------------------------- */

void cm_flush_policy_init(cm_flush_policy_t *p, uint64_t max_count, uint64_t max_bytes) {
  if (!p) return;
  p->max_count = max_count ? max_count : CM_DROP_DEFAULT_MAX_COUNT;
  p->max_bytes = max_bytes ? max_bytes : CM_DROP_DEFAULT_MAX_BYTES;
  p->count = 0;
  p->bytes = 0;
}

void cm_flush_policy_register(cm_flush_policy_t *p, uint64_t len) {
  if (!p) return;
  if (p->count < UINT64_MAX) p->count++;
  p->bytes = len > UINT64_MAX - p->bytes ? UINT64_MAX : p->bytes + len;
}

bool cm_flush_policy_should_flush(const cm_flush_policy_t *p) {
  if (!p) return false;
  return p->count >= p->max_count || p->bytes >= p->max_bytes;
}

void cm_flush_policy_reset(cm_flush_policy_t *p) {
  if (!p) return;
  p->count = 0;
  p->bytes = 0;
}

/* ---- queue -------------------------------------------------------------------- */

static void free_all(vec_t *v) {
  for (size_t i = 0; i < v->n; i++)
    if (v->v[i].free_fn) v->v[i].free_fn(v->v[i].arg, v->v[i].ptr, v->v[i].size);
  v->n = 0;
}

static void fence_drop(cm_drop_queue_t *q) {
  if (q->fence_valid && q->fence && q->fence_ops.destroy)
    q->fence_ops.destroy(q->fence_ops.arg, q->fence);
  q->fence_valid = false;
  q->fence = NULL;
}

static int fence_make(const cm_fence_ops_t *ops, void **out) {
  *out = NULL;
  if (!ops || !ops->make) return CM_OK;
  return ops->make(ops->arg, out);
}

static int fence_sync(const cm_fence_ops_t *ops, void *fence) {
  if (!fence || !ops || !ops->sync) return CM_OK;
  return ops->sync(ops->arg, fence);
}

int cm_drop_queue_create(const cm_flush_policy_t *policy, cm_drop_queue_t **out) {
  if (!out) return CM_EINVAL;
  *out = NULL;
  cm_drop_queue_t *q = calloc(1, sizeof *q);
  if (!q) return CM_ENOMEM;
  cm_flush_policy_init(&q->policy, policy ? policy->max_count : 0,
                       policy ? policy->max_bytes : 0);
  *out = q;
  return CM_OK;
}

void cm_drop_queue_destroy(cm_drop_queue_t *q) {
  if (!q) return;
  if (q->fence_valid) (void)fence_sync(&q->fence_ops, q->fence);
  fence_drop(q);
  free_all(&q->pending);
  free_all(&q->staged);
  free(q->pending.v);
  free(q->staged.v);
  free(q);
}

int cm_drop_queue_push(cm_drop_queue_t *q, void *ptr, uint64_t size, cm_drop_free_fn free_fn,
                       void *arg) {
  if (!q) return CM_EINVAL;
  vec_t *v = &q->staged;
  if (v->n == v->cap) {
    size_t nc = v->cap ? v->cap * 2 : 16;
    buf_t *nv = realloc(v->v, nc * sizeof *nv);
    if (!nv) return CM_ENOMEM;
    v->v = nv;
    v->cap = nc;
  }
  v->v[v->n++] = (buf_t){ptr, size, free_fn, arg};
  cm_flush_policy_register(&q->policy, size);
  return CM_OK;
}

bool cm_drop_queue_should_flush(const cm_drop_queue_t *q) {
  return q ? cm_flush_policy_should_flush(&q->policy) : false;
}

int cm_drop_queue_flush(cm_drop_queue_t *q, const cm_fence_ops_t *ops) {
  if (!q) return CM_EINVAL;
  /* 1. the previous flush's fence covers `pending` */
  if (q->fence_valid) {
    int rc = fence_sync(&q->fence_ops, q->fence);
    if (rc < 0) return rc; /* keep everything; the buffers may still be read */
    fence_drop(q);
    free_all(&q->pending);
  }
  /* 2. safety net: a batch whose fence could not be made */
  if (q->pending.n) {
    void *f = NULL;
    int rc = fence_make(ops, &f);
    if (rc < 0) return rc;
    rc = fence_sync(ops, f);
    if (f && ops && ops->destroy) ops->destroy(ops->arg, f);
    if (rc < 0) return rc;
    free_all(&q->pending);
  }
  /* 3. swap: pending (now empty) takes the staged batch */
  vec_t t = q->pending;
  q->pending = q->staged;
  q->staged = t;
  /* 5 (before 4 so that a failing make still leaves a consistent policy) */
  cm_flush_policy_reset(&q->policy);
  /* 4. a new fence after the batch; not synced now */
  void *f = NULL;
  int rc = fence_make(ops, &f);
  if (rc < 0) return rc; /* no fence: step 2 of the next flush covers `pending` */
  q->fence_valid = true;
  q->fence = f;
  if (ops) q->fence_ops = *ops;
  else memset(&q->fence_ops, 0, sizeof q->fence_ops);
  return CM_OK;
}

size_t cm_drop_queue_staged(const cm_drop_queue_t *q) { return q ? q->staged.n : 0; }
size_t cm_drop_queue_pending(const cm_drop_queue_t *q) { return q ? q->pending.n : 0; }
const cm_flush_policy_t *cm_drop_queue_policy(const cm_drop_queue_t *q) {
  return q ? &q->policy : NULL;
}
