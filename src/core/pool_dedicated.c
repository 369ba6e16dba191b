/*
 * pool_dedicated.c - the dedicated pool (the reference's newer Dedicated
 * allocation mode), position CM_DEDICATED_POOL: each reservation made in the
 * dedicated mode is its own storage allocation of its effective size,
 * outside every other pool, and is never reused: a freed one waits for the
 * next cleanup (periodic, explicit, or the one each reservation starts
 * with; see manager.c), which gives it back to the storage whatever mode is
 * open then. Free slots sit in the slot pool's free tree only until then.
 * Cost: O(1) per reservation; O(slots) per cleanup that has freed slots to
 * give back (a counter tells when there are none).
 */
#include "core/pool_slots.h"

typedef struct dedicated_pool {
  cm__slot_pool sp; /* sp.slots: every live or freed-not-yet-returned slot */
} dedicated_pool;

static dedicated_pool *DDP(cm__pool *p) { return (dedicated_pool *)p; }

static bool accept(const cm__pool *p, uint64_t size) {
  (void)p;
  (void)size;
  return true;
}

/* Never reused: every reservation is its own allocation. */
static cm__slice *try_reserve(cm__pool *p, uint64_t size, uint64_t eff) {
  (void)p;
  (void)size;
  (void)eff;
  return NULL;
}

static int alloc(cm__pool *p, uint64_t size, uint64_t eff, bool lazy, cm__slice **out,
                 cm_diag_t *diag) {
  dedicated_pool *dp = DDP(p);
  (void)size;
  cm__slot *s = NULL;
  int rc = cm__slot_new(p, eff, lazy, &s, diag);
  if (rc) return rc;
  s->s.index = (uint32_t)dp->sp.slots.n;
  if (cm__slots_push(&dp->sp.slots, s) != CM_OK) {
    if (s->s.mapped) cm_storage_dealloc(cm__pool_storage(p), s->s.storage_id, eff);
    else p->pages_unmapped--;
    free(s);
    return cm__diag_set(diag, CM_ENOMEM, "out of host memory");
  }
  cm__pool_pages_add(p, 1);
  cm__pool_reserved_add(p, (int64_t)eff);
  *out = &s->s;
  return CM_OK;
}

/* A freed slot waits for the next cleanup: mark it due (next_cleanup 0). */
static void on_free(cm__pool *p, cm__slice *s) {
  cm__slots_on_free(p, s);
  p->next_cleanup = 0;
}

/* Every cleanup gives back every freed slot (no period). */
static void cleanup(cm__pool *p, uint64_t alloc_nr, bool explicit_cleanup, uint64_t serving) {
  dedicated_pool *dp = DDP(p);
  (void)alloc_nr;
  (void)explicit_cleanup;
  (void)serving;
  p->next_cleanup = UINT64_MAX;
  if (dp->sp.slots.free.count == 0) return;
  for (size_t i = 0; i < dp->sp.slots.n; i++) {
    cm__slot *s = dp->sp.slots.v[i];
    if (s->s.used) continue;
    cm__tree_remove(&dp->sp.slots.free, &s->node);
    cm__slot_release(p, s);
    dp->sp.slots.v[i] = NULL;
  }
  cm__slots_compact(&dp->sp.slots);
}

static void locate(const cm__pool *p, const cm__slice *s, cm_location_t *out) {
  (void)p;
  out->page = 0;
  out->slice = s->index;
}

static size_t check(cm__pool *p, cm_diag_t *diag) {
  size_t bad = cm__slots_check(p, cm__slots_of(p));
  if (bad && diag && !diag->message[0])
    cm__diag_set(diag, CM_ECORRUPT, "dedicated pool: %zu invariant violations", bad);
  return bad;
}

static size_t display(cm__pool *p, char *buf, size_t cap) {
  dedicated_pool *dp = DDP(p);
  size_t len = 0;
  if (dp->sp.slots.n == 0) return 0;
  CM__OUT(buf, cap, len, "  - Dedicated: %zu allocations, %zu freed awaiting cleanup\n",
          dp->sp.slots.n, dp->sp.slots.free.count);
  return cm__slots_display_usage(p, buf, cap, len, "");
}

static uint64_t cached(const cm__pool *p) {
  const dedicated_pool *dp = (const dedicated_pool *)p;
  uint64_t n = 0;
  for (size_t i = 0; i < dp->sp.slots.n; i++)
    if (!dp->sp.slots.v[i]->s.used) n += dp->sp.slots.v[i]->s.span;
  return n;
}

static void destroy(cm__pool *p) {
  cm__slots_destroy(p, cm__slots_of(p));
  free(p);
}

static const cm__pool_vt k_dedicated_vt = {
    .name = "dedicated",
    .accept = accept,
    .try_reserve = try_reserve,
    .alloc = alloc,
    .on_free = on_free,
    .take_free = cm__slots_take_free,
    .cleanup = cleanup,
    .materialize = cm__slots_materialize,
    .locate = locate,
    .check = check,
    .display = display,
    .cached = cached,
    .for_each = cm__slots_visit,
    .destroy = destroy,
};

int cm__pool_dedicated_new(const cm__pool_ctx *ctx, cm__pool **out) {
  dedicated_pool *dp = calloc(1, sizeof *dp);
  if (!dp) return CM_ENOMEM;
  cm__slot_pool_init(&dp->sp, &k_dedicated_vt, ctx, CM_DEDICATED_POOL);
  dp->sp.base.opts.kind = CM_POOL_DEDICATED;
  dp->sp.base.next_cleanup = UINT64_MAX;
  *out = &dp->sp.base;
  return CM_OK;
}
