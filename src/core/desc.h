/*
 * desc.h - descriptors: the shared, reference-counted identity of a slice
 * (spec §3), and the lock-free "freed" inbox through which releases made on
 * any thread reach the manager.
 *
 * State word (one atomic u64):  rc << 2 | QUEUED | OWNED
 *   rc      user references: handles + bindings (the pool's own copy is NOT
 *           counted; it is the OWNED bit)
 *   OWNED   a slice of some manager owns this descriptor
 *   QUEUED  the descriptor sits in (or is being pushed to) its owner's inbox
 * Transitions (each user release is one compare-and-swap):
 *   user release, rc 1 -> 0, OWNED, !QUEUED : set QUEUED in the same swap,
 *                                      then push to the inbox (any thread)
 *   user release, rc 1 -> 0, OWNED, QUEUED  : nothing more (the owner took a
 *                                      new reference while it was queued)
 *   user release, rc 1 -> 0, !OWNED  : free the descriptor (unless QUEUED)
 *   drain (device thread)            : clear QUEUED; OWNED && rc == 0 -> the
 *                                      slice is free; !OWNED && rc == 0 -> free
 *   detach (device thread)           : clear OWNED; state == 0 -> free. The
 *                                      inbox pointer stays, for a push that
 *                                      may still be on its way.
 * A descriptor is therefore freed exactly once, by whoever makes the state 0,
 * and never while a push is pending: QUEUED is set before the push starts.
 * The owner may take a new reference to a used slice whose count a release
 * just made zero (capture pins do): that is safe because of the above.
 * `hc` counts user handles only (can_mut iff hc <= 1).
 * Misuse: a release that finds rc == 0 (a double release) must not wrap rc
 * around, which would leave the slice used forever. desc_unref sees it
 * before it swaps: the count is left as it is, the owner inbox's
 * dead_releases and a process-wide counter are incremented, and, with a
 * debug level (cm_debug_set_level / CM_DEBUG; see base/debug.h),
 * it is logged or aborts. A release of a reference to a descriptor already
 * freed (unowned, last reference gone) is a use-after-free that cannot be
 * detected here.
 * Fields below `id` are touched only by the thread driving the owner manager.
 */
#ifndef CM_CORE_DESC_H
#define CM_CORE_DESC_H

#include <stdatomic.h>

#include "cubemem/memory.h"

#define CM__OWNED 1ull
#define CM__QUEUED 2ull
#define CM__RC_ONE 4ull

struct cm__slice;

/* One per manager: its address is the manager's identity in descriptors. */
typedef struct cm__inbox {
  _Atomic(cm_desc_t *) head; /* Treiber stack of descriptors whose rc reached 0 */
  /* releases of a reference whose descriptor had rc 0 already (double
   * releases), ignored and counted; cm_manager_check reports them */
  _Atomic uint64_t dead_releases;
  /* set before any descriptor is owned, immutable after: for messages */
  const char *owner_name; /* the manager's name */
  cm_logger_t *logger;    /* borrowed: the manager's logger, NULL: none */
} cm__inbox;

struct cm_desc {
  _Atomic uint64_t state;           /* see above */
  _Atomic uint32_t hc;              /* user handles */
  _Atomic(cm__inbox *) inbox;       /* owner's inbox (the last one, once detached) */
  cm_desc_t *next;                  /* inbox link (written before publication) */
  uint64_t id;                      /* descriptor id (process-wide counter) */
  /* --- owner-thread fields --- */
  struct cm__slice *slice;          /* owning slice, NULL when stale/unplaced */
  const cm__inbox *owner;           /* owning manager's inbox, NULL when never placed */
  bool init;                        /* ever placed */
};

/* Allocate a descriptor with rc = 0 (no user reference) and OWNED, for a pool
 * slice. NULL on host OOM. */
cm_desc_t *cm__desc_new_owned(cm__inbox *inbox);
/* Give the pool's descriptor a user handle (rc and hc + 1). */
static inline cm_handle_t cm__desc_take_handle(cm_desc_t *d) {
  atomic_fetch_add_explicit(&d->state, CM__RC_ONE, memory_order_relaxed);
  atomic_fetch_add_explicit(&d->hc, 1, memory_order_relaxed);
  return (cm_handle_t){d};
}
/* Owner thread drops ownership; frees the descriptor if nothing refers to it. */
void cm__desc_detach(cm_desc_t *d);
/* Make an unowned descriptor owned (bind); rc unchanged. */
void cm__desc_attach(cm_desc_t *d, cm__inbox *inbox);
/* Pop everything queued, in release order. Each returned descriptor has had
 * QUEUED cleared; the caller checks cm__desc_is_free / frees stale ones via
 * cm__desc_drained. */
static inline cm_desc_t *cm__inbox_take(cm__inbox *in) {
  if (!atomic_load_explicit(&in->head, memory_order_relaxed)) return NULL;
  cm_desc_t *list = atomic_exchange_explicit(&in->head, NULL, memory_order_acquire);
  cm_desc_t *rev = NULL; /* reverse: release order */
  while (list) {
    cm_desc_t *n = list->next;
    list->next = rev;
    rev = list;
    list = n;
  }
  return rev;
}
/* Handle one drained descriptor: returns true if it is owned and free (the
 * caller marks its slice free); frees unowned unreferenced ones. */
void cm__desc_free(cm_desc_t *d);
static inline bool cm__desc_drained(cm_desc_t *d) {
  uint64_t old = atomic_fetch_and_explicit(&d->state, ~CM__QUEUED, memory_order_acq_rel);
  uint64_t now = old & ~CM__QUEUED;
  if (now == 0) { /* detached while queued and unreferenced */
    cm__desc_free(d);
    return false;
  }
  return now == CM__OWNED; /* owned, rc 0 */
}
static inline uint64_t cm__desc_rc(const cm_desc_t *d) {
  return atomic_load_explicit(&((cm_desc_t *)d)->state, memory_order_acquire) >> 2;
}

#endif
