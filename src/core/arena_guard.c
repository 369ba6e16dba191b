/*
 * arena_guard.c - guarded granules serve no new reservation (the arena,
 * with relocation enabled; docs/relocation.md, Guards).
 *
 * The manager reports guards to the pool only when relocation is enabled in
 * its config (pool.h's guard entry). Each VM region then counts, per
 * granule, the guarded blocks that touch it (gcnt, made at the first
 * guard). While any guard is held, the arena's entries for reservations are
 * those below: they place a request only where none of the granules it
 * touches is guarded, so that a guarded granule can empty once its guards
 * drop. When no guard is held, the arena's own entries serve, untouched:
 * the switch is a change of the pool's entry table (a->plain_vt, a->gvt),
 * so a run without guards pays nothing for the rule.
 * Segments (no VM) do not relocate and keep serving as before. A dry run
 * (lazy or virtual granules) is served by the plain entries too.
 */
#include "core/arena.h"

/* The first backed granule of r in [g, lim), or UINT64_MAX when there is
 * none. A word of the bitmaps at a time, so an unmapped stretch costs a word
 * per 64 granules, and nothing is read from r->top up (no granule there was
 * ever mapped): the free end of a region that spans the device is free. */
static uint64_t next_backed(const region *r, uint64_t g, uint64_t lim) {
  if (lim > r->top) lim = r->top;
  while (g < lim) {
    uint64_t w = g / 64;
    uint64_t m = r->mapped[w] & (r->virt ? ~r->virt[w] : ~0ull) & (~0ull << (g % 64));
    if (m) {
      uint64_t h = w * 64 + (uint64_t)__builtin_ctzll(m);
      return h < lim ? h : UINT64_MAX;
    }
    g = (w + 1) * 64;
  }
  return UINT64_MAX;
}

/* The lowest offset in free block b (from where the arena would place span
 * s) where s touches no guarded granule (and, with mapped_only, only
 * mapped, backed granules), or UINT64_MAX. */
static uint64_t clear_in(const arena *a, const ablk *b, uint64_t s, bool mapped_only) {
  const region *r = b->rg;
  uint64_t o = place_off(a, b, s), end = b->s.offset + b->s.span;
  uint64_t gend = (end + a->gran - 1) >> a->gshift;
  while (o < end && s <= end - o) {
    uint64_t g0 = o >> a->gshift, g1 = (o + s - 1) >> a->gshift, bad = UINT64_MAX;
    bool unbacked = false;
    for (uint64_t g = g0; g <= g1 && bad == UINT64_MAX; g++) {
      if (mapped_only && !backed(r, g)) bad = g, unbacked = true;
      else if (r->gcnt && r->gcnt[g]) bad = g;
    }
    if (bad == UINT64_MAX) return o;
    /* the next start: past a guarded granule, or at the next backed one */
    uint64_t next = unbacked ? next_backed(r, bad + 1, gend) : bad + 1;
    if (next == UINT64_MAX) return UINT64_MAX;
    o = next << a->gshift;
  }
  return UINT64_MAX;
}

/* The tightest free block of a VM region with room for span s clear of
 * guarded granules (bins from s's upward; the first bin with one wins, as
 * a later bin holds only larger blocks); its offset into *off. */
static ablk *clear_fit(arena *a, uint64_t s, bool mapped_only, uint64_t *off) {
  ablk *best = NULL;
  for (uint32_t i = bin_of(s); i < NBINS && !best; i = next_bin(a, i)) {
    for (ablk *b = a->heads[i]; b; b = b->fnext) {
      if (b->s.span < s || !b->rg->vm || (best && b->s.span >= best->s.span)) continue;
      uint64_t o = clear_in(a, b, s, mapped_only);
      if (o == UINT64_MAX) continue;
      best = b;
      *off = o;
    }
  }
  return best;
}

static cm__slice *guarded_try_reserve(cm__pool *p, uint64_t size, uint64_t eff) {
  arena *a = AR(p);
  if (a->unbacked) return a->plain_vt->try_reserve(p, size, eff);
  a->ops++;
  uint64_t s = span_of(a, eff), off = 0;
  ablk *b = clear_fit(a, s, true, &off);
  return b ? &cm__arena_place_at(a, b, s, off)->s : NULL;
}

static int guarded_alloc(cm__pool *p, uint64_t size, uint64_t eff, bool lazy, cm__slice **out,
                         cm_diag_t *diag) {
  arena *a = AR(p);
  if (lazy || a->unbacked) return a->plain_vt->alloc(p, size, eff, lazy, out, diag);
  uint64_t s = span_of(a, eff), off = 0;
  ablk *b = clear_fit(a, s, false, &off);
  if (!b) /* no room clear of guards in the regions: a new region's, as without guards */
    return a->plain_vt->alloc(p, size, eff, lazy, out, diag);
  region *r = b->rg;
  uint64_t g0 = off >> a->gshift, g1 = (off + s - 1) >> a->gshift;
  uint64_t need = unmapped_in(r, g0, g1);
  if (need && over_cap(a, need << a->gshift)) cm__arena_trim(a, UINT64_MAX, r, g0, g1);
  if (need && over_cap(a, need << a->gshift)) return cm__arena_cap_error(a, s, diag);
  if (need || virt_in(a, r, g0, g1)) {
    int rc = cm__arena_map_range(a, r, g0, g1, false, false, diag);
    if (rc != CM_OK) return rc;
  }
  *out = &cm__arena_place_at(a, b, s, off)->s;
  return CM_OK;
}

void cm__arena_guard(cm__pool *p, cm__slice *sl, int64_t delta) {
  arena *a = AR(p);
  ablk *b = BLK(sl);
  region *r = b->rg;
  if (!r->vm || delta == 0) return;
  if (!r->gcnt) {
    if (delta < 0) return; /* never counted (no memory for the counts) */
    r->gcnt = calloc(r->ngran, sizeof *r->gcnt);
    if (!r->gcnt) return; /* the rule lapses for this region; nothing else changes */
  }
  uint64_t g0 = b->s.offset >> a->gshift, g1 = (b->s.offset + b->s.span - 1) >> a->gshift;
  for (uint64_t g = g0; g <= g1; g++) r->gcnt[g] = (uint32_t)((int64_t)r->gcnt[g] + delta);
  a->guarded = (uint64_t)((int64_t)a->guarded + delta);
  if (!a->plain_vt) {
    a->plain_vt = p->vt;
    a->gvt = *p->vt;
    a->gvt.try_reserve = guarded_try_reserve;
    a->gvt.alloc = guarded_alloc;
    /* the last-resort placement knows nothing of guards: none while any is held */
    a->gvt.alloc_tight = NULL;
  }
  p->vt = a->guarded ? &a->gvt : a->plain_vt;
}
