/*
 * pool_direct.c - the direct pool (spec §4.4): one storage allocation per
 * slice, reused only by exact effective size (lowest index first); freed slots
 * become tombstones reused last-in-first-out. `reclaim_at` is a watermark:
 * before growing past it, free slices are released in index order until the
 * new allocation fits (served anyway if it never does). The cursor is stored
 * at bind (§15.1 item 4, in manager.c). Free slots sit in a treap keyed
 * (effective size, index), so reuse is O(log n).
 */
#include "core/pool_slots.h"

typedef struct direct_pool {
  cm__slot_pool sp; /* sp.slots: NULL entries are tombstones */
  uint32_t *vacant;
  size_t nvacant, capvacant;
} direct_pool;

static direct_pool *DP(cm__pool *p) { return (direct_pool *)p; }

static bool accept(const cm__pool *p, uint64_t size) {
  (void)p;
  (void)size;
  return true;
}

static cm__slice *try_reserve(cm__pool *p, uint64_t size, uint64_t eff) {
  (void)size;
  return cm__slots_take_exact(p, eff);
}

static void release_slot(direct_pool *dp, size_t i) {
  cm__slot *s = dp->sp.slots.v[i];
  cm__tree_remove(&dp->sp.slots.free, &s->node);
  cm__slot_release(&dp->sp.base, s);
  dp->sp.slots.v[i] = NULL;
  if (dp->nvacant < dp->capvacant) dp->vacant[dp->nvacant++] = (uint32_t)i;
}

static int vacant_reserve(direct_pool *dp) {
  if (dp->capvacant >= dp->sp.slots.cap + 1) return CM_OK;
  size_t nc = dp->sp.slots.cap + 16;
  uint32_t *nv = realloc(dp->vacant, nc * sizeof *nv);
  if (!nv) return CM_ENOMEM;
  dp->vacant = nv;
  dp->capvacant = nc;
  return CM_OK;
}

static void release_free(direct_pool *dp, uint64_t headroom) {
  cm__pool *p = &dp->sp.base;
  if (!p->opts.has_reclaim_at) return;
  if (*p->ctx.page_updates != CM_PAGES_ALLOW) return; /* the call may give nothing back */
  uint64_t limit = p->opts.reclaim_at;
  for (size_t i = 0; i < dp->sp.slots.n; i++) {
    if (p->usage.bytes_reserved + headroom <= limit) return;
    cm__slot *s = dp->sp.slots.v[i];
    if (s && !s->s.used) release_slot(dp, i);
  }
}

static int alloc(cm__pool *p, uint64_t size, uint64_t eff, bool lazy, cm__slice **out,
                 cm_diag_t *diag) {
  direct_pool *dp = DP(p);
  (void)size;
  if (vacant_reserve(dp) != CM_OK) return cm__diag_set(diag, CM_ENOMEM, "out of host memory");
  release_free(dp, eff);
  cm__slot *s = NULL;
  int rc = cm__slot_new(p, eff, lazy, &s, diag);
  if (rc) return rc;
  if (dp->nvacant) {
    uint32_t i = dp->vacant[--dp->nvacant];
    s->s.index = i;
    dp->sp.slots.v[i] = s;
  } else {
    s->s.index = (uint32_t)dp->sp.slots.n;
    if (cm__slots_push(&dp->sp.slots, s) != CM_OK) {
      if (s->s.mapped) cm_storage_dealloc(cm__pool_storage(p), s->s.storage_id, eff);
      else p->pages_unmapped--;
      free(s);
      return cm__diag_set(diag, CM_ENOMEM, "out of host memory");
    }
  }
  cm__pool_pages_add(p, 1);
  cm__pool_reserved_add(p, (int64_t)eff);
  *out = &s->s;
  return CM_OK;
}

static void cleanup(cm__pool *p, uint64_t alloc_nr, bool explicit_cleanup, uint64_t serving) {
  direct_pool *dp = DP(p);
  (void)alloc_nr;
  (void)serving;
  p->next_cleanup = UINT64_MAX;
  if (!explicit_cleanup) return;
  for (size_t i = 0; i < dp->sp.slots.n; i++) {
    cm__slot *s = dp->sp.slots.v[i];
    if (s && !s->s.used) release_slot(dp, i);
  }
}

static void locate(const cm__pool *p, const cm__slice *s, cm_location_t *out) {
  (void)p;
  out->page = 0;
  out->slice = s->index;
}

static size_t check(cm__pool *p, cm_diag_t *diag) {
  size_t bad = cm__slots_check(p, cm__slots_of(p));
  if (bad && diag && !diag->message[0])
    cm__diag_set(diag, CM_ECORRUPT, "direct pool %u: %zu invariant violations", p->position, bad);
  return bad;
}

static size_t display(cm__pool *p, char *buf, size_t cap) {
  size_t len = 0;
  if (p->pages == 0) return 0;
  CM__OUT(buf, cap, len, "  - Direct: %" PRIu64 " slices, largest %" PRIu64 "\n", p->pages,
          p->largest_alloc);
  return cm__slots_display_usage(p, buf, cap, len, "");
}

static void destroy(cm__pool *p) {
  cm__slots_destroy(p, cm__slots_of(p));
  free(DP(p)->vacant);
  free(p);
}

static const cm__pool_vt k_direct_vt = {
    .name = "direct",
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

int cm__pool_direct_new(const cm__pool_ctx *ctx, const cm_pool_options_t *o, uint8_t pos,
                        cm__pool **out) {
  direct_pool *dp = calloc(1, sizeof *dp);
  if (!dp) return CM_ENOMEM;
  *out = cm__slot_pool_init(&dp->sp, &k_direct_vt, ctx, pos);
  dp->sp.base.opts = *o;
  return CM_OK;
}
