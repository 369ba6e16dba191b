/*
 * desc.c - descriptors, handles and bindings (spec §3), and the freed inbox.
 *
 * Algorithm: see desc.h for the state word. Releases from any thread use one
 * CAS; the manager learns about freed slices by draining its inbox on its own
 * thread, so reserve/release never scan slices (O(1) per release).
 * Exports: every cm_handle_* / cm_binding_* function, cm_debug_double_releases,
 * cm__desc_* helpers. The debug level itself lives in base/debug.c.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/desc.h"

static _Atomic uint64_t g_next_desc_id = 1; /* ids only: never reused state */
static _Atomic uint64_t g_dead_releases;    /* double releases, process-wide */

uint64_t cm_debug_double_releases(void) {
  return atomic_load_explicit(&g_dead_releases, memory_order_relaxed);
}

/* A release found rc == 0 already (`old` is the state it saw): the count
 * was left alone; undo the handle count, count the misuse, report it at a
 * debug level. */
static void dead_release(cm_desc_t *d, uint64_t old, bool handle) {
  if (handle) atomic_fetch_add_explicit(&d->hc, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&g_dead_releases, 1, memory_order_relaxed);
  cm__inbox *in = (old & CM__OWNED) ? atomic_load_explicit(&d->inbox, memory_order_acquire) : NULL;
  if (in) atomic_fetch_add_explicit(&in->dead_releases, 1, memory_order_relaxed);
  int lvl = cm_debug_level();
  if (lvl <= 0) return;
  char msg[256];
  snprintf(msg, sizeof msg,
           "cubemem: double release: %s of descriptor %" PRIu64
           " released after its last reference was gone%s%s%s; the release was ignored",
           handle ? "a handle" : "a binding", d->id, in ? " (manager '" : "",
           in ? in->owner_name : "", in ? "')" : "");
  if (in && in->logger) cm_logger_warn(in->logger, msg);
  else fprintf(stderr, "%s\n", msg); /* asked for by the debug level */
  if (lvl >= 2) abort();
}

static cm_desc_t *desc_alloc(void) {
  cm_desc_t *d = calloc(1, sizeof *d);
  if (!d) return NULL;
  d->id = atomic_fetch_add_explicit(&g_next_desc_id, 1, memory_order_relaxed);
  return d;
}

cm_desc_t *cm__desc_new_owned(cm__inbox *inbox) {
  cm_desc_t *d = desc_alloc();
  if (!d) return NULL;
  atomic_init(&d->state, CM__OWNED);
  atomic_init(&d->hc, 0);
  atomic_init(&d->inbox, inbox);
  return d;
}

int cm_handle_new(cm_handle_t *out) {
  if (!out) return CM_EINVAL;
  cm_desc_t *d = desc_alloc();
  if (!d) {
    out->d = NULL;
    return CM_ENOMEM;
  }
  atomic_init(&d->state, CM__RC_ONE);
  atomic_init(&d->hc, 1);
  atomic_init(&d->inbox, NULL);
  out->d = d;
  return CM_OK;
}

void cm__desc_free(cm_desc_t *d) { free(d); }

static void push_inbox(cm_desc_t *d) {
  cm__inbox *in = atomic_load_explicit(&d->inbox, memory_order_acquire);
  cm_desc_t *head = atomic_load_explicit(&in->head, memory_order_relaxed);
  do {
    d->next = head;
  } while (!atomic_compare_exchange_weak_explicit(&in->head, &head, d, memory_order_release,
                                                  memory_order_relaxed));
}

/* A test seam: runs after a release made an owned descriptor's count zero
 * and before it is pushed (tests widen that window with it). */
#ifndef CM__DESC_AFTER_LAST_UNREF
#define CM__DESC_AFTER_LAST_UNREF(d) ((void)0)
#endif

/* Drop one user reference: one compare-and-swap. The release that takes an
 * owned descriptor's count to zero sets QUEUED in the same swap, so from
 * then until the manager drains it nobody frees the descriptor: not a
 * detach (it sees QUEUED), not a second release after the owner took a new
 * reference in between (it sees QUEUED and leaves the push to this one).
 * A count that is already zero is a double release: left as it is. */
static inline void desc_unref(cm_desc_t *d, bool handle) {
  uint64_t old = atomic_load_explicit(&d->state, memory_order_relaxed);
  uint64_t now;
  do {
    if (old < CM__RC_ONE) { /* none was left: misuse */
      dead_release(d, old, handle);
      return;
    }
    now = old - CM__RC_ONE;
    if (now == CM__OWNED) now |= CM__QUEUED; /* owned, last reference, not queued */
  } while (!atomic_compare_exchange_weak_explicit(&d->state, &old, now, memory_order_acq_rel,
                                                  memory_order_relaxed));
  if (old == CM__RC_ONE) { /* unowned, unqueued: this was the last reference */
    free(d);
    return;
  }
  if (now == (CM__OWNED | CM__QUEUED) && !(old & CM__QUEUED)) {
    CM__DESC_AFTER_LAST_UNREF(d);
    push_inbox(d);
  }
}

/* The inbox pointer stays: a release that queued the descriptor just before
 * this detach still pushes it there, and the drain frees it. */
void cm__desc_detach(cm_desc_t *d) {
  d->slice = NULL;
  uint64_t old = atomic_fetch_and_explicit(&d->state, ~CM__OWNED, memory_order_acq_rel);
  if ((old & ~CM__OWNED) == 0) free(d);
}

void cm__desc_attach(cm_desc_t *d, cm__inbox *inbox) {
  atomic_store_explicit(&d->inbox, inbox, memory_order_release);
  atomic_fetch_or_explicit(&d->state, CM__OWNED, memory_order_acq_rel);
}

cm_handle_t cm_handle_clone(cm_handle_t h) {
  if (h.d) {
    atomic_fetch_add_explicit(&h.d->state, CM__RC_ONE, memory_order_relaxed);
    atomic_fetch_add_explicit(&h.d->hc, 1, memory_order_relaxed);
  }
  return h;
}

void cm_handle_release(cm_handle_t h) {
  if (!h.d) return;
  atomic_fetch_sub_explicit(&h.d->hc, 1, memory_order_relaxed);
  desc_unref(h.d, true);
}

bool cm_handle_can_mut(cm_handle_t h) {
  if (!h.d) return false;
  return atomic_load_explicit(&h.d->hc, memory_order_acquire) <= 1;
}

uint64_t cm_handle_id(cm_handle_t h) { return h.d ? h.d->id : 0; }

cm_binding_t cm_handle_into_binding(cm_handle_t h) {
  if (h.d) atomic_fetch_sub_explicit(&h.d->hc, 1, memory_order_relaxed);
  return (cm_binding_t){h.d};
}

cm_binding_t cm_handle_binding(cm_handle_t h) {
  if (h.d) atomic_fetch_add_explicit(&h.d->state, CM__RC_ONE, memory_order_relaxed);
  return (cm_binding_t){h.d};
}

cm_binding_t cm_binding_clone(cm_binding_t b) {
  if (b.d) atomic_fetch_add_explicit(&b.d->state, CM__RC_ONE, memory_order_relaxed);
  return b;
}

void cm_binding_release(cm_binding_t b) {
  if (b.d) desc_unref(b.d, false);
}

uint64_t cm_binding_id(cm_binding_t b) { return b.d ? b.d->id : 0; }
