/*
 * arena_reloc.c - the arena's relocation plan (pool.h's reloc_plan):
 * compaction of live blocks out of sparsely used physical objects into free
 * room of other held objects, so the emptied objects can be unmapped.
 *
 * Units are the physical objects of VM regions (unmapped only whole; one
 * granule each near the device's capacity). A used block is movable when it
 * lies inside one object, is mapped, backed (not a dry run's virtual
 * granule) and unguarded; an object holding any other used block (a block
 * across objects, a guarded one) is not a source, and one holding a guarded
 * block is no target either. Candidates are objects at most half used, the
 * sparsest first, taken while the live bytes chosen fit in the free room of
 * the objects not chosen. Each block of a chosen object gets a target: the
 * tightest free block (bins upward, a bounded scan) with a range of its
 * span on mapped, backed granules of objects that are neither sources nor
 * guarded; an object whose blocks do not all find one keeps them all (its
 * targets are freed again). Targets use only held room (mapped granules);
 * the arena never grows for a relocation. Segments (no VM) do not relocate.
 */
#include "core/arena.h"

#define F_BLOCKED 1u  /* holds a block that cannot move: not a source */
#define F_NOTARGET 2u /* holds a guarded block: no target either */
#define F_SOURCE 4u   /* chosen to be emptied */
#define TARGET_SCAN 512 /* free blocks examined for one target */

typedef struct unit_info {
  uint64_t live; /* bytes of movable blocks in the object */
  uint64_t used; /* bytes of any used block overlapping the object */
  uint8_t flags;
} unit_info;

typedef struct cand {
  uint32_t region;
  uint64_t start; /* the object's first granule */
  uint64_t live, free;
} cand;

/* Per region, per granule (meaningful at object starts). */
typedef struct plan_ctx {
  arena *a;
  unit_info **u; /* [region][granule] */
} plan_ctx;

static uint64_t obj_of(const region *r, uint64_t g) { return r->ostart[g]; }

static void mark_range(plan_ctx *c, const region *r, uint32_t ri, uint64_t g0, uint64_t g1,
                       uint8_t f) {
  for (uint64_t g = g0; g <= g1; g++)
    if (bit(r->mapped, g)) c->u[ri][obj_of(r, g)].flags |= f;
}

/* Bytes of [off, off+len) inside granule g. */
static uint64_t overlap(const arena *a, uint64_t off, uint64_t len, uint64_t g) {
  uint64_t lo = g << a->gshift, hi = lo + a->gran;
  uint64_t s = off > lo ? off : lo, e = off + len < hi ? off + len : hi;
  return e > s ? e - s : 0;
}

static bool movable(const arena *a, const region *r, const ablk *b) {
  uint64_t g0 = b->s.offset >> a->gshift, g1 = (b->s.offset + b->s.span - 1) >> a->gshift;
  return !b->s.guards && b->s.mapped && bit(r->mapped, g0) && bit(r->mapped, g1) &&
         obj_of(r, g0) == obj_of(r, g1) && !virt_in(a, r, g0, g1);
}

/* Fill the per-object figures of region ri. */
static void survey(plan_ctx *c, uint32_t ri) {
  arena *a = c->a;
  region *r = a->regs[ri];
  for (ablk *b = r->first; b; b = b->next) {
    if (b->free) continue;
    uint64_t g0 = b->s.offset >> a->gshift, g1 = (b->s.offset + b->s.span - 1) >> a->gshift;
    for (uint64_t g = g0; g <= g1; g++)
      if (bit(r->mapped, g)) c->u[ri][obj_of(r, g)].used += overlap(a, b->s.offset, b->s.span, g);
    if (movable(a, r, b)) {
      c->u[ri][obj_of(r, g0)].live += b->s.span;
      continue;
    }
    mark_range(c, r, ri, g0, g1, F_BLOCKED);
    if (b->s.guards) mark_range(c, r, ri, g0, g1, F_NOTARGET);
  }
}

static int cand_cmp(const void *x, const void *y) {
  const cand *p = x, *q = y;
  if (p->live != q->live) return p->live < q->live ? -1 : 1;
  if (p->region != q->region) return p->region < q->region ? -1 : 1;
  return p->start < q->start ? -1 : p->start > q->start;
}

/* Candidates (sparse movable objects) into *out, and the free room of every
 * mapped object into *room. */
static int candidates(plan_ctx *c, cand **out, size_t *n, uint64_t *room) {
  arena *a = c->a;
  size_t cap = 0;
  *out = NULL;
  *n = 0;
  *room = 0;
  for (uint32_t ri = 0; ri < a->nregs; ri++) {
    region *r = a->regs[ri];
    if (!r || !r->vm || !c->u[ri]) continue;
    for (uint64_t g = 0; g < r->top; g++) {
      if (!bit(r->mapped, g) || obj_of(r, g) != g) continue;
      unit_info *u = &c->u[ri][g];
      uint64_t bytes = (uint64_t)r->olen[g] << a->gshift;
      uint64_t fr = bytes > u->used ? bytes - u->used : 0;
      if (!(u->flags & F_NOTARGET) && !virt_in(a, r, g, g + r->olen[g] - 1)) *room += fr;
      if ((u->flags & F_BLOCKED) || u->live == 0 || u->live > bytes / 2 ||
          virt_in(a, r, g, g + r->olen[g] - 1))
        continue;
      if (*n == cap) {
        size_t nc = cap ? cap * 2 : 64;
        cand *nv = realloc(*out, nc * sizeof *nv);
        if (!nv) return CM_ENOMEM;
        *out = nv;
        cap = nc;
      }
      (*out)[(*n)++] = (cand){ri, g, u->live, fr};
    }
  }
  qsort(*out, *n, sizeof **out, cand_cmp);
  return CM_OK;
}

/* May a target lie on granule g of region ri? */
static bool target_ok(const plan_ctx *c, const region *r, uint32_t ri, uint64_t g) {
  if (g >= r->top || !backed(r, g)) return false;
  return !(c->u[ri][obj_of(r, g)].flags & (F_SOURCE | F_NOTARGET));
}

/* The lowest offset in free block b where span s lies on allowed granules,
 * or UINT64_MAX. */
static uint64_t fit_in(const plan_ctx *c, const ablk *b, uint64_t s) {
  const arena *a = c->a;
  const region *r = b->rg;
  if (!r->vm || !c->u[b->region]) return UINT64_MAX;
  uint64_t o = b->s.offset, end = b->s.offset + b->s.span;
  while (o + s <= end) {
    uint64_t g0 = o >> a->gshift, g1 = (o + s - 1) >> a->gshift, bad = UINT64_MAX;
    for (uint64_t g = g0; g <= g1 && bad == UINT64_MAX; g++)
      if (!target_ok(c, r, b->region, g)) bad = g;
    if (bad == UINT64_MAX) return o;
    o = (bad + 1) << a->gshift;
  }
  return UINT64_MAX;
}

/* Reserve a target of span s: the tightest allowed fit among the first
 * TARGET_SCAN free blocks of bins from s's upward. NULL if none. */
static ablk *target_for(plan_ctx *c, uint64_t s) {
  arena *a = c->a;
  ablk *best = NULL;
  uint64_t best_off = 0;
  int seen = 0;
  for (uint32_t i = bin_of(s); i < NBINS && seen < TARGET_SCAN; i = next_bin(a, i)) {
    for (ablk *b = a->heads[i]; b && seen < TARGET_SCAN; b = b->fnext, seen++) {
      if (b->s.span < s || (best && b->s.span >= best->s.span)) continue;
      uint64_t o = fit_in(c, b, s);
      if (o == UINT64_MAX) continue;
      best = b;
      best_off = o;
      if (b->s.span == s) break;
    }
    if (best) break; /* bins upward: a later bin has only larger blocks */
  }
  return best ? cm__arena_place_at(a, best, s, best_off) : NULL;
}

/* Move every movable block of object (ri, start): targets appended to out;
 * on failure the object keeps all of them (targets freed). */
static int move_object(plan_ctx *c, uint32_t ri, uint64_t start, cm__moves *out) {
  arena *a = c->a;
  region *r = a->regs[ri];
  uint64_t lo = start << a->gshift, hi = (start + r->olen[start]) << a->gshift;
  size_t from = out->n;
  int rc = CM_OK;
  ablk *b = r->first;
  while (b && b->s.offset + b->s.span <= lo) b = b->next;
  for (; b && b->s.offset < hi && rc == CM_OK; b = b->next) {
    if (b->free) continue;
    ablk *t = target_for(c, b->s.span);
    if (!t) {
      rc = CM_EBUSY;
      break;
    }
    rc = cm__moves_push(out, &b->s, &t->s);
    if (rc != CM_OK) a->base.vt->on_free(&a->base, &t->s);
  }
  if (rc == CM_OK) return CM_OK;
  for (size_t k = out->n; k-- > from;) a->base.vt->on_free(&a->base, out->v[k].dst);
  out->n = from;
  c->u[ri][start].flags &= (uint8_t)~F_SOURCE; /* it keeps its blocks: a target again */
  return rc == CM_ENOMEM ? CM_ENOMEM : CM_OK;
}

static int plan_run(plan_ctx *c, cm__moves *out) {
  arena *a = c->a;
  for (uint32_t ri = 0; ri < a->nregs; ri++) {
    region *r = a->regs[ri];
    if (!r || !r->vm || r->top == 0) continue;
    c->u[ri] = calloc(r->top, sizeof **c->u);
    if (!c->u[ri]) return CM_ENOMEM;
    survey(c, ri);
  }
  cand *cv = NULL;
  size_t n = 0;
  uint64_t room = 0, need = 0;
  int rc = candidates(c, &cv, &n, &room);
  size_t chosen = 0;
  for (; rc == CM_OK && chosen < n; chosen++) { /* sparsest first, while they fit */
    cand *k = &cv[chosen];
    if (need + k->live > room - k->free) break;
    need += k->live;
    room -= k->free;
    c->u[k->region][k->start].flags |= F_SOURCE;
  }
  for (size_t i = 0; rc == CM_OK && i < chosen; i++)
    rc = move_object(c, cv[i].region, cv[i].start, out);
  free(cv);
  return rc;
}

int cm__arena_reloc_plan(cm__pool *p, bool may_grow, cm__moves *out) {
  arena *a = AR(p);
  (void)may_grow; /* the arena moves into held room only: growing would spend what it frees */
  if (!a->vm || a->nregs == 0) return CM_OK;
  plan_ctx c = {a, calloc(a->nregs, sizeof(unit_info *))};
  if (!c.u) return CM_ENOMEM;
  int rc = plan_run(&c, out);
  for (uint32_t ri = 0; ri < a->nregs; ri++) free(c.u[ri]);
  free(c.u);
  return rc;
}
