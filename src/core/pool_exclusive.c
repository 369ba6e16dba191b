/*
 * pool_exclusive.c - exclusive pages (spec §4.3) with the §15.1 fixes: one
 * allocation per page; a freed page is reused by BEST FIT on its size (the
 * smallest free page that holds the request, earliest on ties: item 5) and
 * new pages are exact-size (the effective size of the request; the reference's
 * running average is not used). Periodic release (dealloc_period, counted in
 * reservations) marks free pages and releases them after 5 checks, but never
 * the page that would serve the request being reserved (item 6).
 * Cost: O(log n) reserve/release via a treap of free pages keyed
 * (alloc_size, page index); periodic checks are O(pages) every period/5.
 */
#include "core/pool_slots.h"

typedef struct excl_pool {
  cm__slot_pool sp; /* sp.slots: the pages */
  uint64_t last_check;
} excl_pool;

static excl_pool *XP(cm__pool *p) { return (excl_pool *)p; }

static bool accept(const cm__pool *p, uint64_t size) { return size <= p->opts.max_alloc_size; }

static cm__slice *try_reserve(cm__pool *p, uint64_t size, uint64_t eff) {
  excl_pool *xp = XP(p);
  (void)eff;
  cm__tnode *n = cm__tree_lower_bound(&xp->sp.slots.free, size, 0, 0);
  if (!n) return NULL;
  cm__tree_remove(&xp->sp.slots.free, n);
  cm__slot *s = CM__CONTAINER(n, cm__slot, node);
  if (s->free_count) s->free_count--;
  return &s->s;
}

static int alloc(cm__pool *p, uint64_t size, uint64_t eff, bool lazy, cm__slice **out,
                 cm_diag_t *diag) {
  excl_pool *xp = XP(p);
  (void)lazy; /* exclusive pages are always eager (spec §6) */
  if (size > p->opts.max_alloc_size)
    return cm__diag_set(diag, CM_ETOOBIG, "an allocation of %" PRIu64
                        " bytes exceeds the exclusive pool's maximum of %" PRIu64,
                        size, p->opts.max_alloc_size);
  cm__slot *s = NULL;
  int rc = cm__slot_new(p, eff, false, &s, diag);
  if (rc) return rc;
  s->s.index = (uint32_t)xp->sp.slots.n;
  if (cm__slots_push(&xp->sp.slots, s) != CM_OK) {
    cm_storage_dealloc(cm__pool_storage(p), s->s.storage_id, eff);
    free(s);
    return cm__diag_set(diag, CM_ENOMEM, "out of host memory");
  }
  s->free_count = 4;
  cm__pool_pages_add(p, 1);
  cm__pool_reserved_add(p, (int64_t)eff);
  *out = &s->s;
  return CM_OK;
}

static void cleanup(cm__pool *p, uint64_t alloc_nr, bool explicit_cleanup, uint64_t serving) {
  excl_pool *xp = XP(p);
  uint64_t check = p->opts.has_dealloc_period ? p->opts.dealloc_period / 5 : 0;
  if (!explicit_cleanup) {
    if (!p->opts.has_dealloc_period) {
      p->next_cleanup = UINT64_MAX;
      return;
    }
    p->next_cleanup = xp->last_check + (check ? check : 1);
    if (alloc_nr - xp->last_check < check) return;
  }
  xp->last_check = alloc_nr;
  if (p->opts.has_dealloc_period) p->next_cleanup = alloc_nr + (check ? check : 1);
  cm__tnode *keep = NULL;
  if (!explicit_cleanup && serving != UINT64_MAX && accept(p, serving))
    keep = cm__tree_lower_bound(&xp->sp.slots.free, serving, 0, 0);
  bool released = false;
  for (size_t i = 0; i < xp->sp.slots.n; i++) {
    cm__slot *s = xp->sp.slots.v[i];
    if (s->s.used) continue;
    s->free_count++;
    if ((s->free_count >= 5 || explicit_cleanup) && &s->node != keep) {
      cm__tree_remove(&xp->sp.slots.free, &s->node);
      cm__slot_release(p, s);
      xp->sp.slots.v[i] = NULL;
      released = true;
    }
  }
  if (released) cm__slots_compact(&xp->sp.slots);
}

static void locate(const cm__pool *p, const cm__slice *s, cm_location_t *out) {
  (void)p;
  out->page = s->index;
  out->slice = 0;
}

static size_t check(cm__pool *p, cm_diag_t *diag) {
  size_t bad = cm__slots_check(p, cm__slots_of(p));
  if (bad && diag && !diag->message[0])
    cm__diag_set(diag, CM_ECORRUPT, "exclusive pool %u: %zu invariant violations", p->position, bad);
  return bad;
}

static size_t display(cm__pool *p, char *buf, size_t cap) {
  excl_pool *xp = XP(p);
  size_t len = 0;
  CM__OUT(buf, cap, len, " - Exclusive Pool max_alloc_size=%" PRIu64 "\n", p->opts.max_alloc_size);
  for (size_t i = 0; i < xp->sp.slots.n; i++)
    CM__OUT(buf, cap, len, "   - Page %" PRIu64 " is_free=%s\n", xp->sp.slots.v[i]->s.span,
            xp->sp.slots.v[i]->s.used ? "false" : "true");
  if (xp->sp.slots.n) len = cm__slots_display_usage(p, buf, cap, len, "\n");
  return len;
}

static void destroy(cm__pool *p) {
  cm__slots_destroy(p, cm__slots_of(p));
  free(p);
}

static const cm__pool_vt k_excl_vt = {
    .name = "exclusive",
    .accept = accept,
    .try_reserve = try_reserve,
    .alloc = alloc,
    .on_free = cm__slots_on_free,
    .take_free = cm__slots_take_free,
    .cleanup = cleanup,
    .materialize = cm__slots_materialize,
    .locate = locate,
    .check = check,
    .display = display,
    .for_each = cm__slots_visit,
    .destroy = destroy,
};

int cm__pool_exclusive_new(const cm__pool_ctx *ctx, const cm_pool_options_t *o, uint8_t pos,
                           cm__pool **out) {
  excl_pool *xp = calloc(1, sizeof *xp);
  if (!xp) return CM_ENOMEM;
  *out = cm__slot_pool_init(&xp->sp, &k_excl_vt, ctx, pos);
  xp->sp.base.opts = *o;
  return CM_OK;
}
