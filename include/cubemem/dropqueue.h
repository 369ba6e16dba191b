/*
 * cubemem/dropqueue.h - deferred release of host buffers behind a fence
 * (spec §7): the flushing policy and the double-buffered queue.
 *
 * A host buffer that is the source of an asynchronous host-to-device copy
 * must live until the device has read it. The queue holds such buffers:
 * push() stages a buffer; flush() moves the staged batch to `pending` and
 * records a fence after it; the NEXT flush syncs that fence and frees the
 * batch. So a buffer is freed at the second flush after it was pushed, and
 * flushing twice drains the queue.
 *
 * A buffer is (pointer, size, free callback, callback argument). The
 * callback is whatever releases it: free(), a storage release, or - for a
 * pinned staging buffer - releasing the cm_binding_t that keeps its pinned
 * slice busy (the slice returns to the pinned pool only then).
 *
 * Thread-safety: a queue is used by one thread at a time (callers serialise;
 * the device does so with its per-stream lock). The policy functions are pure
 * on the struct given.
 */
#ifndef CUBEMEM_DROPQUEUE_H
#define CUBEMEM_DROPQUEUE_H

#include "cubemem/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- flushing policy (spec §7.1, with u64 counters: §15.1 item 9) -------- */

#define CM_DROP_DEFAULT_MAX_COUNT 64u
#define CM_DROP_DEFAULT_MAX_BYTES (64ull << 20)

typedef struct cm_flush_policy {
  uint64_t max_count; /* flush when this many buffers are staged (default 64) */
  uint64_t max_bytes; /* ... or when this many bytes are staged (default 64 MiB) */
  uint64_t count;     /* buffers registered since the last reset */
  uint64_t bytes;     /* bytes registered since the last reset (saturating) */
} cm_flush_policy_t;

/* Set the thresholds (0 means the default) and zero the state. NULL ok. */
CM_API void cm_flush_policy_init(cm_flush_policy_t *p, uint64_t max_count, uint64_t max_bytes);
/* Count one buffer of `len` bytes. NULL ok. */
CM_API void cm_flush_policy_register(cm_flush_policy_t *p, uint64_t len);
/* count >= max_count || bytes >= max_bytes (whichever comes first). NULL: false. */
CM_API bool cm_flush_policy_should_flush(const cm_flush_policy_t *p);
/* Zero the state (thresholds kept). NULL ok. */
CM_API void cm_flush_policy_reset(cm_flush_policy_t *p);

/* ---- fences ---------------------------------------------------------------- */

/* How the queue obtains and waits for a fence. `make` records a fence after
 * the work enqueued so far (*out may be set to NULL: a fence that is always
 * complete); `sync` blocks until it completes; `destroy` frees it. Any
 * callback may be NULL: a NULL make gives NULL fences, a NULL sync is a
 * no-op. A fence is only synced/destroyed with the ops that made it (the
 * queue keeps a copy of this struct beside the fence). */
typedef struct cm_fence_ops {
  int (*make)(void *arg, void **out_fence);
  int (*sync)(void *arg, void *fence);
  void (*destroy)(void *arg, void *fence);
  void *arg;
} cm_fence_ops_t;

/* ---- the queue (spec §7.2) --------------------------------------------------- */

/* Releases a buffer; called exactly once per pushed buffer, from the thread
 * that flushes or destroys the queue. */
typedef void (*cm_drop_free_fn)(void *arg, void *ptr, uint64_t size);

typedef struct cm_drop_queue cm_drop_queue_t;

/* Create an empty queue. policy may be NULL (defaults); its state is ignored.
 * Errors: CM_EINVAL (out NULL), CM_ENOMEM. */
CM_API CM_NODISCARD int cm_drop_queue_create(const cm_flush_policy_t *policy,
                                             cm_drop_queue_t **out);
/* Sync the outstanding fence (errors ignored), destroy it, and free every
 * buffer still held (pending and staged). NULL ok. */
CM_API void cm_drop_queue_destroy(cm_drop_queue_t *q);
/* Stage a buffer and count it in the policy. On success the queue owns it
 * (free_fn(arg, ptr, size) runs later; free_fn may be NULL for "nothing to
 * do"). Errors: CM_EINVAL (q NULL), CM_ENOMEM - then the caller keeps the
 * buffer. */
CM_API CM_NODISCARD int cm_drop_queue_push(cm_drop_queue_t *q, void *ptr, uint64_t size,
                                           cm_drop_free_fn free_fn, void *arg);
/* The policy's verdict for the staged buffers. NULL: false. */
CM_API bool cm_drop_queue_should_flush(const cm_drop_queue_t *q);
/* One flush (spec §7.2): 1. sync the previous fence and free `pending`;
 * 2. if `pending` is still non-empty (its fence could not be made), make a
 * fence, sync it at once and free it; 3. move `staged` to `pending`; 4. make
 * a new fence (not synced); 5. reset the policy. ops may be NULL (fences
 * that are always complete). Flushing an empty queue is safe.
 * Errors: a failing sync returns its status and leaves `pending` held (its
 * buffers may still be in use; the next flush retries); a failing make
 * returns its status after step 3 (the next flush syncs a fresh fence
 * instead). CM_EINVAL for q NULL. */
CM_API int cm_drop_queue_flush(cm_drop_queue_t *q, const cm_fence_ops_t *ops);
/* Buffers staged (pushed since the last flush) / pending (behind the fence). */
CM_API size_t cm_drop_queue_staged(const cm_drop_queue_t *q);
CM_API size_t cm_drop_queue_pending(const cm_drop_queue_t *q);
/* The policy (thresholds and state). NULL: NULL. */
CM_API const cm_flush_policy_t *cm_drop_queue_policy(const cm_drop_queue_t *q);

#ifdef __cplusplus
}
#endif
#endif
