/*
 * pool_persistent.c - the persistent pool (spec §4.5), routing position 255:
 * exact-size slices for weights. A slice is reused only by a request of the
 * same effective size (first free one by index); reuse sets the padding as
 * well as the size (§15.1 item 2). Two treaps keyed (effective size, index):
 * free slices, and all slices (for size-match's has_size). Explicit cleanup
 * releases every free slice, compacts and renumbers the rest, then flushes.
 * No size limit applies; only the storage can refuse.
 */
#include "core/pool_slots.h"

typedef struct pers_pool {
  cm__slot_pool sp; /* sp.slots: every slice */
  cm__tree all;     /* all slices keyed (effective size, index) */
} pers_pool;

static pers_pool *PP(cm__pool *p) { return (pers_pool *)p; }

bool cm__persistent_has_size(cm__pool *p, uint64_t eff) {
  cm__tnode *n = cm__tree_lower_bound(&PP(p)->all, eff, 0, 0);
  return n && n->k1 == eff;
}

static bool accept(const cm__pool *p, uint64_t size) {
  (void)p;
  (void)size;
  return true;
}

static cm__slice *try_reserve(cm__pool *p, uint64_t size, uint64_t eff) {
  (void)size;
  return cm__slots_take_exact(p, eff);
}

static int alloc(cm__pool *p, uint64_t size, uint64_t eff, bool lazy, cm__slice **out,
                 cm_diag_t *diag) {
  pers_pool *pp = PP(p);
  (void)size;
  cm__slot *s = NULL;
  int rc = cm__slot_new(p, eff, lazy, &s, diag);
  if (rc) return rc;
  s->s.index = (uint32_t)pp->sp.slots.n;
  if (cm__slots_push(&pp->sp.slots, s) != CM_OK) {
    if (s->s.mapped) cm_storage_dealloc(cm__pool_storage(p), s->s.storage_id, eff);
    else p->pages_unmapped--;
    free(s);
    return cm__diag_set(diag, CM_ENOMEM, "out of host memory");
  }
  s->all.k1 = eff;
  s->all.k2 = s->s.index;
  s->all.k3 = 0;
  cm__tree_insert(&pp->all, &s->all);
  cm__pool_pages_add(p, 1);
  cm__pool_reserved_add(p, (int64_t)eff);
  *out = &s->s;
  return CM_OK;
}

static void cleanup(cm__pool *p, uint64_t alloc_nr, bool explicit_cleanup, uint64_t serving) {
  pers_pool *pp = PP(p);
  (void)alloc_nr;
  (void)serving;
  p->next_cleanup = UINT64_MAX;
  if (!explicit_cleanup) return;
  bool released = false;
  for (size_t i = 0; i < pp->sp.slots.n; i++) {
    cm__slot *s = pp->sp.slots.v[i];
    if (s->s.used) continue;
    cm__tree_remove(&pp->sp.slots.free, &s->node);
    cm__tree_remove(&pp->all, &s->all);
    cm__slot_release(p, s);
    pp->sp.slots.v[i] = NULL;
    released = true;
  }
  if (released) cm__slots_compact(&pp->sp.slots);
  cm_storage_flush(cm__pool_storage(p));
}

static void locate(const cm__pool *p, const cm__slice *s, cm_location_t *out) {
  (void)p;
  out->page = 0;
  out->slice = s->index;
}

static size_t check(cm__pool *p, cm_diag_t *diag) {
  pers_pool *pp = PP(p);
  size_t bad = cm__slots_check(p, &pp->sp.slots);
  if (pp->all.count != pp->sp.slots.n) bad++;
  bad += cm__tree_check(&pp->all);
  if (bad && diag && !diag->message[0])
    cm__diag_set(diag, CM_ECORRUPT, "persistent pool: %zu invariant violations", bad);
  return bad;
}

static size_t display(cm__pool *p, char *buf, size_t cap) {
  pers_pool *pp = PP(p);
  size_t len = 0;
  /* one line per effective size, in size order (walk the all-slices tree) */
  cm__tnode *n = cm__tree_first(&pp->all);
  while (n) {
    uint64_t sz = n->k1, fr = 0, full = 0, tot = 0;
    for (; n && n->k1 == sz; n = cm__tree_next(n)) {
      cm__slot *s = CM__CONTAINER(n, cm__slot, all);
      tot++;
      if (s->s.used) full++;
      else fr++;
    }
    CM__OUT(buf, cap, len, "  - Slices %" PRIu64 " =>  %" PRIu64 " free - %" PRIu64
            " full - %" PRIu64 " total\n", sz, fr, full, tot);
  }
  if (pp->sp.slots.n) len = cm__slots_display_usage(p, buf, cap, len, "");
  return len;
}

static void destroy(cm__pool *p) {
  cm__slots_destroy(p, cm__slots_of(p));
  free(p);
}

static const cm__pool_vt k_pers_vt = {
    .name = "persistent",
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

int cm__pool_persistent_new(const cm__pool_ctx *ctx, cm__pool **out) {
  pers_pool *pp = calloc(1, sizeof *pp);
  if (!pp) return CM_ENOMEM;
  cm__slot_pool_init(&pp->sp, &k_pers_vt, ctx, CM_PERSISTENT_POOL);
  pp->sp.base.opts.kind = CM_POOL_PERSISTENT;
  pp->sp.base.opts.max_alloc_size = ctx->max_page_size;
  cm__tree_init(&pp->all);
  *out = &pp->sp.base;
  return CM_OK;
}
