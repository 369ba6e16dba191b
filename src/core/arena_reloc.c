/*
 * arena_reloc.c - the arena's relocation plan (pool.h's reloc_plan):
 * compaction of live blocks downwards, out of whole physical objects into
 * free room of lower held ones, so the emptied objects can be unmapped.
 *
 * Units. Physical objects of VM regions are unmapped only whole; a used
 * block that spans two objects ties them, so the unit of evacuation is a
 * component: a maximal run of mapped granules joined by shared objects or
 * by blocks across their boundary. A component holding a block that cannot
 * move (guarded, lazily reserved, on a dry run's virtual granules) is no
 * source; one holding a guarded block is no target either.
 * Plan. Components are visited from the highest address down (regions from
 * the last); each with live blocks is evacuated when every one of its blocks
 * finds a target strictly below it: the tightest free range, among the
 * first TARGET_SCAN free blocks of the bins from the block's span upward, on
 * mapped, backed granules of components that are neither guarded nor
 * evacuated. A component whose blocks do not all find one keeps them all
 * (its targets are freed at once); one that received targets is no source
 * (its blocks include planned targets). An explicit relocation takes only
 * components at most half used (the copies buy back at least as many bytes
 * as they move); under memory pressure every component is a candidate, so
 * the live data packs downwards. Targets use only held room (mapped
 * granules): the arena never grows for a relocation. Segments (no VM) do
 * not relocate.
 * Under memory pressure the plan is, in order, the first that moves
 * anything: freeing objects (a block that alone holds a physical object
 * moves where that frees granules net, into held room or granules the
 * device has room for), packing (a run of blocks to the free tail), the
 * compaction above.
 */
#include "core/arena.h"

#define F_BLOCKED 1u  /* holds a block that cannot move: not a source */
#define F_NOTARGET 2u /* holds a guarded block: no target either */
#define F_SOURCE 4u   /* evacuated */
#define F_RECEIVED 8u /* holds planned targets: not a source */
#define TARGET_SCAN 512 /* free blocks examined for one target */

typedef struct plan_ctx {
  arena *a;
  uint32_t **comp; /* [region][granule]: first granule of the granule's component */
  uint8_t **flags; /* [region][component start] */
  uint64_t **used; /* [region][component start]: bytes of its used blocks */
  bool sparse_only;
} plan_ctx;

static bool movable(const arena *a, const region *r, const ablk *b) {
  uint64_t g0 = b->s.offset >> a->gshift, g1 = (b->s.offset + b->s.span - 1) >> a->gshift;
  return !b->s.guards && b->s.index != DONOR_MARK && b->s.mapped && bits_all(r->mapped, g0, g1) &&
         !virt_in(a, r, g0, g1); /* a donor block stays: a stitched slice aliases its bytes */
}

/* Components of region ri: join[g] (g and g+1 in one component) from the
 * objects and the blocks, then each granule's component start. */
static int components(plan_ctx *c, uint32_t ri) {
  arena *a = c->a;
  region *r = a->regs[ri];
  uint8_t *join = calloc(r->top, 1);
  c->comp[ri] = calloc(r->top, sizeof **c->comp);
  c->flags[ri] = calloc(r->top, 1);
  c->used[ri] = calloc(r->top, sizeof **c->used);
  if (!join || !c->comp[ri] || !c->flags[ri] || !c->used[ri]) {
    free(join);
    return CM_ENOMEM;
  }
  for (uint64_t g = 0; g + 1 < r->top; g++)
    join[g] = bit(r->mapped, g) && bit(r->mapped, g + 1) && r->ostart[g] == r->ostart[g + 1];
  for (ablk *b = r->first; b; b = b->next) {
    if (b->free) continue;
    uint64_t g0 = b->s.offset >> a->gshift, g1 = (b->s.offset + b->s.span - 1) >> a->gshift;
    for (uint64_t g = g0; g < g1 && g + 1 < r->top; g++) join[g] = 1;
  }
  for (uint64_t g = 0; g < r->top; g++)
    c->comp[ri][g] = (uint32_t)(g > 0 && join[g - 1] ? c->comp[ri][g - 1] : g);
  free(join);
  for (ablk *b = r->first; b; b = b->next) {
    uint64_t g0 = b->s.offset >> a->gshift;
    if (b->free || g0 >= r->top) continue;
    c->used[ri][c->comp[ri][g0]] += b->s.span;
    if (movable(a, r, b)) continue;
    c->flags[ri][c->comp[ri][g0]] |= (uint8_t)(F_BLOCKED | (b->s.guards ? F_NOTARGET : 0));
  }
  return CM_OK;
}

/* May a target lie on granule g of region ri? */
static bool target_ok(const plan_ctx *c, const region *r, uint32_t ri, uint64_t g) {
  if (g >= r->top || !backed(r, g)) return false;
  return !(c->flags[ri][c->comp[ri][g]] & (F_SOURCE | F_NOTARGET));
}

/* The lowest offset in free block b where span s lies on allowed granules
 * and ends by `limit` (in region ri; blocks of later regions are above),
 * or UINT64_MAX. */
static uint64_t fit_in(const plan_ctx *c, const ablk *b, uint64_t s, uint32_t ri,
                       uint64_t limit) {
  const arena *a = c->a;
  const region *r = b->rg;
  if (!r->vm || !c->comp[b->region] || (ri != UINT32_MAX && b->region > ri)) return UINT64_MAX;
  uint64_t o = b->s.offset, end = b->s.offset + b->s.span;
  if (b->region == ri && end > limit) end = limit;
  while (o < end && s <= end - o) {
    uint64_t g0 = o >> a->gshift, g1 = (o + s - 1) >> a->gshift, bad = UINT64_MAX;
    for (uint64_t g = g0; g <= g1 && bad == UINT64_MAX; g++)
      if (!target_ok(c, r, b->region, g)) bad = g;
    if (bad == UINT64_MAX) return o;
    o = (bad + 1) << a->gshift;
  }
  return UINT64_MAX;
}

/* Reserve a target of span s below `limit` of region ri: the tightest
 * allowed fit among the first TARGET_SCAN free blocks of bins from s's
 * upward; its component is marked as receiving. NULL if none. */
static ablk *target_for(plan_ctx *c, uint64_t s, uint32_t ri, uint64_t limit) {
  arena *a = c->a;
  ablk *best = NULL;
  uint64_t best_off = 0;
  int seen = 0;
  for (uint32_t i = bin_of(s); i < NBINS && seen < TARGET_SCAN; i = next_bin(a, i)) {
    for (ablk *b = a->heads[i]; b && seen < TARGET_SCAN; b = b->fnext, seen++) {
      if (b->s.span < s || (best && b->s.span >= best->s.span)) continue;
      uint64_t o = fit_in(c, b, s, ri, limit);
      if (o == UINT64_MAX) continue;
      best = b;
      best_off = o;
      if (b->s.span == s) break;
    }
    if (best) break; /* bins upward: a later bin has only larger blocks */
  }
  if (!best) return NULL;
  uint32_t bri = best->region;
  ablk *t = cm__arena_place_at(a, best, s, best_off);
  c->flags[bri][c->comp[bri][best_off >> a->gshift]] |= F_RECEIVED;
  return t;
}

/* Evacuate component [g0, g1] of region ri: every used block gets a target
 * below it (appended to out); else the component keeps them all. */
static int evacuate(plan_ctx *c, uint32_t ri, uint64_t g0, uint64_t g1, cm__moves *out) {
  arena *a = c->a;
  region *r = a->regs[ri];
  uint64_t lo = g0 << a->gshift, hi = (g1 + 1) << a->gshift;
  size_t from = out->n;
  int rc = CM_OK;
  c->flags[ri][g0] |= F_SOURCE;
  ablk *b = r->first;
  while (b && b->s.offset + b->s.span <= lo) b = b->next;
  for (; b && b->s.offset < hi && rc == CM_OK; b = b->next) {
    if (b->free) continue;
    ablk *t = target_for(c, b->s.span, ri, lo);
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
  c->flags[ri][g0] &= (uint8_t)~F_SOURCE;
  return rc == CM_ENOMEM ? CM_ENOMEM : CM_OK;
}

/* Visit region ri's components from the top down. */
static int compact_region(plan_ctx *c, uint32_t ri, cm__moves *out) {
  arena *a = c->a;
  region *r = a->regs[ri];
  int rc = CM_OK;
  for (uint64_t g1 = r->top; g1-- > 0 && rc == CM_OK;) {
    if (!bit(r->mapped, g1)) continue;
    uint64_t g0 = c->comp[ri][g1];
    uint8_t f = c->flags[ri][g0];
    uint64_t used = 0;
    if (!(f & (F_BLOCKED | F_RECEIVED)) && !virt_in(a, r, g0, g1)) used = c->used[ri][g0];
    bool sparse = used <= ((g1 - g0 + 1) << a->gshift) / 2;
    if (used && (sparse || !c->sparse_only)) rc = evacuate(c, ri, g0, g1, out);
    g1 = g0; /* the loop steps below the component */
  }
  return rc;
}

/* ---- freeing objects (memory pressure, first) ---------------------------------------- */

/* Physical objects go back only whole. Under pressure, before packing, single
 * blocks move when the objects they alone hold outweigh what their targets
 * take: a target may lie in held room anywhere but on the block itself (in
 * the block's own unit too: a block moved within an object frees the other
 * objects it spanned), or on unmapped granules the device still has room
 * for. Each run moves small blocks first; the room they free lets a later
 * run move larger ones (the manager relocates again until the request
 * fits). */

typedef struct omove {
  uint32_t *users; /* [object start]: used blocks touching it (planned moves' sources left out) */
  uint64_t room;   /* unmapped granules targets may still map */
  uint64_t top;    /* the region's top when planning began (the components' extent) */
} omove;

/* Add d to the users of every object that range [off, off+span) of r
 * touches. */
static void objects_touch(const arena *a, const region *r, uint32_t *users, uint64_t off,
                          uint64_t span, int d) {
  uint64_t g = off >> a->gshift, g1 = (off + span - 1) >> a->gshift;
  while (g <= g1) {
    if (!bit(r->mapped, g)) {
      g++;
      continue;
    }
    uint32_t o = r->ostart[g];
    users[o] = (uint32_t)((int64_t)users[o] + d);
    g = (uint64_t)o + r->olen[o];
  }
}

/* Granules of the objects block b alone holds. */
static uint64_t alone_granules(const arena *a, const region *r, const uint32_t *users,
                               const ablk *b) {
  uint64_t n = 0, g = b->s.offset >> a->gshift, g1 = (b->s.offset + b->s.span - 1) >> a->gshift;
  while (g <= g1) {
    uint32_t o = r->ostart[g];
    if (users[o] == 1) n += r->olen[o];
    g = (uint64_t)o + r->olen[o];
  }
  return n;
}

/* Net granules freed by moving b (region r) to [o, o+s) of the same region,
 * or INT64_MIN when the target may not lie there; *map: unmapped granules
 * the target needs. */
static int64_t move_net(const plan_ctx *c, const omove *m, uint32_t ri, const ablk *b, uint64_t o,
                        uint64_t s, uint64_t *map) {
  const arena *a = c->a;
  const region *r = b->rg;
  const uint32_t *users = m->users;
  int64_t net = (int64_t)alone_granules(a, r, users, b);
  uint64_t g = o >> a->gshift, g1 = (o + s - 1) >> a->gshift;
  uint64_t b0 = b->s.offset >> a->gshift, b1 = (b->s.offset + b->s.span - 1) >> a->gshift;
  *map = 0;
  while (g <= g1) {
    if (!bit(r->mapped, g)) {
      (*map)++;
      net--;
      g++;
      continue;
    }
    if (g < m->top && !target_ok(c, r, ri, g)) return INT64_MIN; /* above: mapped for a target */
    uint32_t o2 = r->ostart[g];
    bool mine = users[o2] == 1 && o2 + r->olen[o2] > b0 && o2 <= b1;
    if (users[o2] == 0 || mine) net -= r->olen[o2]; /* kept now, or no longer freed */
    g = (uint64_t)o2 + r->olen[o2];
  }
  return net;
}

/* The best target for block b of region ri within free block f: the low
 * end, the first granule boundary, or the high end; net gain into *net. */
static uint64_t best_in(const plan_ctx *c, const omove *m, uint32_t ri, const ablk *b,
                        const ablk *f, int64_t *net, uint64_t *map) {
  const arena *a = c->a;
  uint64_t s = b->s.span, lo = f->s.offset, end = f->s.offset + f->s.span, best = UINT64_MAX;
  uint64_t al = (lo + a->gran - 1) & ~(a->gran - 1);
  uint64_t cand[3] = {lo, al, end - s};
  *net = INT64_MIN;
  for (int k = 0; k < 3; k++) {
    uint64_t o = cand[k], mp = 0;
    if (o < lo || o + s > end) continue;
    int64_t n = move_net(c, m, ri, b, o, s, &mp);
    if (n == INT64_MIN || mp > m->room || n <= *net) continue;
    *net = n;
    *map = mp;
    best = o;
  }
  return best;
}

/* Move block b of region ri to the target that frees the most granules net
 * (ties: the lowest), among the first TARGET_SCAN free blocks of the
 * region from b's bin upward; nothing when none frees any. */
static int move_one(plan_ctx *c, omove *m, uint32_t ri, ablk *b, cm__moves *out) {
  arena *a = c->a;
  region *r = a->regs[ri];
  ablk *bf = NULL;
  uint64_t bo = 0, bmap = 0;
  int64_t bnet = 0;
  int seen = 0;
  for (uint32_t i = bin_of(b->s.span); i < NBINS && seen < TARGET_SCAN; i = next_bin(a, i)) {
    for (ablk *f = a->heads[i]; f && seen < TARGET_SCAN; f = f->fnext, seen++) {
      if (f->region != ri || f->s.span < b->s.span) continue;
      int64_t net;
      uint64_t mp = 0, o = best_in(c, m, ri, b, f, &net, &mp);
      if (o == UINT64_MAX || net <= 0 || net < bnet || (net == bnet && bf && o >= bo)) continue;
      bf = f;
      bo = o;
      bnet = net;
      bmap = mp;
    }
  }
  if (!bf) return CM_OK;
  uint64_t g0 = bo >> a->gshift, g1 = (bo + b->s.span - 1) >> a->gshift;
  if (bmap && cm__arena_map_range(a, r, g0, g1, false, false, NULL) != CM_OK) return CM_OK;
  m->room -= bmap;
  ablk *t = cm__arena_place_at(a, bf, b->s.span, bo);
  objects_touch(a, r, m->users, t->s.offset, t->s.span, 1);
  objects_touch(a, r, m->users, b->s.offset, b->s.span, -1);
  int rc = cm__moves_push(out, &b->s, &t->s);
  if (rc != CM_OK) a->base.vt->on_free(&a->base, &t->s);
  return rc;
}

static int by_span(const void *x, const void *y) {
  const ablk *p = *(ablk *const *)x, *q = *(ablk *const *)y;
  if (p->s.span != q->s.span) return p->s.span < q->s.span ? -1 : 1;
  return p->s.offset < q->s.offset ? -1 : p->s.offset > q->s.offset;
}

/* The movable blocks of region ri that alone hold an object, smallest
 * first. */
static int alone_blocks(const plan_ctx *c, uint32_t ri, const uint32_t *users, ablk ***out,
                        size_t *n) {
  const arena *a = c->a;
  const region *r = a->regs[ri];
  size_t cap = 0;
  *out = NULL;
  *n = 0;
  for (ablk *b = r->first; b; b = b->next) {
    uint64_t g0 = b->s.offset >> a->gshift;
    if (b->free || g0 >= r->top || !movable(a, r, b)) continue;
    if (c->flags[ri][c->comp[ri][g0]] & F_BLOCKED) continue;
    if (!alone_granules(a, r, users, b)) continue;
    if (*n == cap) {
      size_t nc = cap ? cap * 2 : 64;
      ablk **nv = realloc(*out, nc * sizeof *nv);
      if (!nv) return CM_ENOMEM;
      *out = nv;
      cap = nc;
    }
    (*out)[(*n)++] = b;
  }
  if (*n) qsort(*out, *n, sizeof **out, by_span);
  return CM_OK;
}

/* Region ri: each block that alone holds an object, smallest first, moves
 * where that frees granules net. */
static int free_objects_in(plan_ctx *c, omove *m, uint32_t ri, cm__moves *out) {
  arena *a = c->a;
  region *r = a->regs[ri];
  m->users = calloc(r->ngran, sizeof *m->users); /* targets may map above top */
  m->top = r->top;
  if (!m->users) return CM_ENOMEM;
  for (ablk *b = r->first; b; b = b->next)
    if (!b->free && (b->s.offset >> a->gshift) < r->top)
      objects_touch(a, r, m->users, b->s.offset, b->s.span, 1);
  ablk **v = NULL;
  size_t n = 0;
  int rc = alone_blocks(c, ri, m->users, &v, &n);
  for (size_t k = 0; k < n && rc == CM_OK; k++)
    if (alone_granules(a, r, m->users, v[k])) rc = move_one(c, m, ri, v[k], out);
  free(v);
  free(m->users);
  m->users = NULL;
  return rc;
}

static uint64_t room_granules(const arena *a);

static int free_objects(plan_ctx *c, cm__moves *out) {
  arena *a = c->a;
  omove m = {NULL, room_granules(a), 0};
  int rc = CM_OK;
  for (uint32_t ri = 0; ri < a->nregs && rc == CM_OK; ri++)
    if (c->comp[ri] && a->regs[ri]->vm) rc = free_objects_in(c, &m, ri, out);
  return rc;
}

/* ---- packing (memory pressure) ----------------------------------------------------- */

/* A used block in address order, and the free room around it. */
typedef struct uref {
  ablk *b;
  bool movable;
  bool taken;          /* chosen by an earlier window */
  uint64_t lo_free;    /* end of the previous used block (0 at the region's start) */
  uint64_t hi_free;    /* start of the next used block (the region's size at its end) */
} uref;

/* The used blocks of region ri in address order. */
static int used_blocks(const plan_ctx *c, uint32_t ri, uref **out, size_t *n) {
  const arena *a = c->a;
  region *r = a->regs[ri];
  size_t cap = 0;
  *out = NULL;
  *n = 0;
  uint64_t prev_end = 0;
  for (ablk *b = r->first; b; b = b->next) {
    if (b->free) continue;
    if (*n == cap) {
      size_t nc = cap ? cap * 2 : 256;
      uref *nv = realloc(*out, nc * sizeof *nv);
      if (!nv) return CM_ENOMEM;
      *out = nv;
      cap = nc;
    }
    if (*n) (*out)[*n - 1].hi_free = b->s.offset;
    (*out)[(*n)++] = (uref){b, movable(a, r, b), false, prev_end, r->size};
    prev_end = b->s.offset + b->s.span;
  }
  return CM_OK;
}

/* Where packed blocks go in region r: right after its last used block (the
 * free tail), so successive packings leave no partial granule between
 * them. NULL when the region ends with a used block. */
static ablk *tail_of(const region *r) {
  ablk *t = r->first;
  while (t->next) t = t->next;
  return t->free ? t : NULL;
}

typedef struct window {
  size_t i, j;  /* blocks [i, j] of the region's list */
  uint64_t bytes, need;
  int64_t gain; /* granules freed - granules the packing maps */
  bool set;
} window;

/* Counts that choosing a window reads, computed once per plan (the scan
 * over the windows is then linear in the blocks, without bitmap walks):
 * mapped[g], the mapped granules of r below g (g <= top), and un[k], the
 * unmapped granules among the tail's first k granules, as far as they stay
 * within the room. */
typedef struct counts {
  uint64_t *mapped, top;
  uint64_t *un, tg0, nun; /* un[0..nun] */
  uint64_t limit;         /* the most bytes the tail packs within the room */
} counts;

static int counts_make(const arena *a, const region *r, const ablk *t, uint64_t room,
                       counts *k) {
  k->top = r->top;
  k->tg0 = t->s.offset >> a->gshift;
  k->mapped = malloc((r->top + 1) * sizeof *k->mapped);
  uint64_t most = r->ngran - k->tg0; /* the tail's granules */
  uint64_t cap = (r->top > k->tg0 ? r->top - k->tg0 : 0) + room + 1;
  if (cap > most) cap = most;
  k->un = malloc((cap + 1) * sizeof *k->un);
  if (!k->mapped || !k->un) return CM_ENOMEM;
  k->mapped[0] = 0;
  for (uint64_t g = 0; g < r->top; g++) k->mapped[g + 1] = k->mapped[g] + bit(r->mapped, g);
  k->un[0] = 0;
  k->nun = 0;
  while (k->nun < cap) {
    uint64_t g = k->tg0 + k->nun;
    uint64_t u = k->un[k->nun] + !(g < r->top && bit(r->mapped, g));
    if (u > room) break;
    k->un[++k->nun] = u;
  }
  uint64_t lim = ((k->tg0 + k->nun) << a->gshift) - t->s.offset;
  k->limit = lim < t->s.span ? lim : t->s.span;
  return CM_OK;
}

static void counts_free(counts *k) {
  free(k->mapped);
  free(k->un);
}

/* Mapped granules wholly inside [lo, hi). */
static uint64_t mapped_inside(const arena *a, const counts *k, uint64_t lo, uint64_t hi) {
  uint64_t g0 = (lo + a->gran - 1) >> a->gshift, g1 = hi >> a->gshift; /* [g0, g1) */
  if (g1 > k->top) g1 = k->top;
  if (g0 >= g1) return 0;
  return k->mapped[g1] - k->mapped[g0];
}

/* Granules the packing of `bytes` (0 < bytes <= k->limit) at the tail t
 * maps: the unmapped ones it covers. */
static uint64_t tail_need(const arena *a, const ablk *t, const counts *k, uint64_t bytes) {
  return k->un[((t->s.offset + bytes - 1) >> a->gshift) - k->tg0 + 1];
}

/* The window of region r (list v) that frees the most granules net; when
 * none frees any, the lowest one (`sweep`): packing the lowest live data at
 * the top gathers the holes below into whole granules, round after round.
 * A window starting at block i holds the consecutive movable blocks from i
 * whose packing at the tail maps at most `room` granules; as i grows its
 * end never moves back, so one pass finds them all. */
static int choose_window(const arena *a, const region *r, const uref *v, size_t n,
                         uint64_t room, bool sweep, window *best) {
  const ablk *t = tail_of(r);
  best->set = false;
  if (!t) return CM_OK;
  counts k = {0};
  int rc = counts_make(a, r, t, room, &k);
  if (rc != CM_OK) {
    counts_free(&k);
    return rc;
  }
  window lowest = {0, 0, 0, 0, 0, false};
  size_t j = 0;     /* blocks [i, j) make the window at i */
  uint64_t sum = 0; /* their bytes */
  for (size_t i = 0; i < n; i++) {
    if (j < i) {
      j = i;
      sum = 0;
    }
    while (j < n && v[j].movable && !v[j].taken && sum + v[j].b->s.span <= k.limit)
      sum += v[j++].b->s.span;
    if (j == i) continue;
    uint64_t need = tail_need(a, t, &k, sum);
    uint64_t hi = v[j - 1].hi_free < t->s.offset ? v[j - 1].hi_free : t->s.offset;
    int64_t gain = (int64_t)mapped_inside(a, &k, v[i].lo_free, hi) - (int64_t)need;
    window w = {i, j - 1, sum, need, gain, true};
    if (!lowest.set) lowest = w;
    if (!best->set || w.gain > best->gain) *best = w;
    sum -= v[i].b->s.span;
  }
  counts_free(&k);
  if (best->set && best->gain <= 0) *best = sweep ? lowest : (window){0, 0, 0, 0, 0, false};
  return CM_OK;
}

/* A hole for span s: the tightest free range on allowed granules, outside
 * [ex_lo, ex_hi) of region ri and outside the tail block, among the first
 * TARGET_SCAN free blocks of the bins from s's upward; NULL if none. */
static ablk *hole_for(plan_ctx *c, uint64_t s, uint32_t ri, uint64_t ex_lo, uint64_t ex_hi,
                      const ablk *tail) {
  arena *a = c->a;
  ablk *best = NULL;
  uint64_t best_off = 0;
  int seen = 0;
  for (uint32_t i = bin_of(s); i < NBINS && seen < TARGET_SCAN; i = next_bin(a, i)) {
    for (ablk *b = a->heads[i]; b && seen < TARGET_SCAN; b = b->fnext, seen++) {
      if (b == tail || b->s.span < s || (best && b->s.span >= best->s.span)) continue;
      if (!b->rg->vm || !c->comp[b->region]) continue;
      uint64_t lo = b->s.offset, hi = b->s.offset + b->s.span;
      if (b->region == ri && lo < ex_hi && ex_lo < hi) { /* the part outside the range */
        if (lo >= ex_lo) lo = ex_hi;
        else hi = ex_lo;
        if (lo >= hi || hi - lo < s) continue;
      }
      ablk part = *b;
      part.s.offset = lo;
      part.s.span = hi - lo;
      uint64_t o = fit_in(c, &part, s, UINT32_MAX, UINT64_MAX);
      if (o == UINT64_MAX) continue;
      best = b;
      best_off = o;
      if (b->s.span == s) break;
    }
    if (best) break;
  }
  return best ? cm__arena_place_at(a, best, s, best_off) : NULL;
}

/* Move blocks [w->i, w->j] of v out of their range: each into a hole
 * elsewhere when one fits, else end to end after the last used block of
 * region r (mapping what that covers). */
static int pack_place(plan_ctx *c, region *r, uint32_t ri, uref *v, const window *w,
                      cm__moves *out) {
  arena *a = c->a;
  ablk *fb = tail_of(r);
  if (!fb) return CM_EBUSY;
  uint64_t o = fb->s.offset;
  uint64_t g0 = o >> a->gshift, g1 = (o + w->bytes - 1) >> a->gshift;
  if (w->need && cm__arena_map_range(a, r, g0, g1, false, false, NULL) != CM_OK) return CM_EBUSY;
  uint64_t ex_lo = v[w->i].lo_free, ex_hi = v[w->j].hi_free;
  for (size_t k = w->i; k <= w->j; k++) {
    ablk *b = v[k].b;
    v[k].taken = true;
    ablk *t = hole_for(c, b->s.span, ri, ex_lo, ex_hi, fb);
    if (t) {
      int rc = cm__moves_push(out, &b->s, &t->s);
      if (rc != CM_OK) a->base.vt->on_free(&a->base, &t->s);
      if (rc != CM_OK) return rc;
      continue;
    }
    uint64_t at = o;
    if (!fb || fb->s.offset > at || fb->s.offset + fb->s.span < at + b->s.span)
      return CM_EBUSY; /* cannot happen: the tail holds them all */
    t = cm__arena_place_at(a, fb, b->s.span, at);
    o = t->s.offset + t->s.span;
    fb = t->next && t->next->free ? t->next : NULL; /* the free rest, if any */
    int rc = cm__moves_push(out, &b->s, &t->s);
    if (rc != CM_OK) {
      a->base.vt->on_free(&a->base, &t->s);
      return rc;
    }
  }
  return CM_OK;
}

/* Free device memory in granules, as far as the storage tells and the cap
 * allows (0 when unknown). */
static uint64_t room_granules(const arena *a) {
  uint64_t free_b = 0, total = 0;
  if (cm_storage_mem_info(a->st, &free_b, &total) != CM_OK || total == 0) return 0;
  uint64_t pending = *a->base.ctx.dry_ledger;
  uint64_t room = free_b > pending ? (free_b - pending) >> a->gshift : 0;
  if (capped(a)) {
    uint64_t cap = a->base.opts.max_pool_size;
    uint64_t left = cap > a->held ? (cap - a->held) >> a->gshift : 0;
    if (left < room) room = left;
  }
  return room;
}

/* Under memory pressure: pack runs of live blocks end to end after the
 * last used block of their region, mapping at most the granules the device
 * still has room for: the run that frees the most granules net, or, when
 * none frees any, the lowest run (the holes it leaves join those below;
 * the manager relocates again until the request fits). The granules left
 * go back at the cleanup that follows. */
static int pack(plan_ctx *c, cm__moves *out) {
  arena *a = c->a;
  uint64_t room = room_granules(a);
  int rc = CM_OK;
  for (uint32_t ri = 0; ri < a->nregs && rc == CM_OK; ri++) {
    region *r = a->regs[ri];
    if (!r || !r->vm) continue;
    uref *v = NULL;
    size_t n = 0;
    rc = used_blocks(c, ri, &v, &n);
    window w = {0, 0, 0, 0, 0, false};
    if (rc == CM_OK) rc = choose_window(a, r, v, n, room, true, &w);
    if (rc == CM_OK && w.set) {
      size_t from = out->n;
      rc = pack_place(c, r, ri, v, &w, out);
      if (rc != CM_OK) { /* give the targets back: nothing moves */
        for (size_t j = out->n; j-- > from;) a->base.vt->on_free(&a->base, out->v[j].dst);
        out->n = from;
        rc = rc == CM_ENOMEM ? CM_ENOMEM : CM_OK;
      }
      free(v);
      return rc; /* one run per relocation */
    }
    free(v);
  }
  return rc;
}


static int plan_run(plan_ctx *c, cm__moves *out) {
  arena *a = c->a;
  for (uint32_t ri = 0; ri < a->nregs; ri++) {
    region *r = a->regs[ri];
    if (!r || !r->vm || r->top == 0) continue;
    int rc = components(c, ri);
    if (rc != CM_OK) return rc;
  }
  if (!c->sparse_only) { /* memory pressure: free objects, else pack into fresh granules */
    size_t before = out->n;
    int rc = free_objects(c, out);
    if (rc != CM_OK || out->n > before) return rc;
    rc = pack(c, out);
    if (rc != CM_OK || out->n > before) return rc;
  }
  int rc = CM_OK;
  for (uint32_t ri = a->nregs; ri-- > 0 && rc == CM_OK;)
    if (c->comp[ri]) rc = compact_region(c, ri, out);
  return rc;
}

int cm__arena_reloc_plan(cm__pool *p, cm_relocate_reason_t why, cm__moves *out) {
  arena *a = AR(p);
  if (!a->vm || a->nregs == 0) return CM_OK;
  plan_ctx c = {a, calloc(a->nregs, sizeof(uint32_t *)), calloc(a->nregs, sizeof(uint8_t *)),
                calloc(a->nregs, sizeof(uint64_t *)),
                why == CM_RELOCATE_EXPLICIT || why == CM_RELOCATE_CAPTURE};
  int rc = c.comp && c.flags && c.used ? plan_run(&c, out) : CM_ENOMEM;
  for (uint32_t ri = 0; ri < a->nregs; ri++) {
    if (c.comp) free(c.comp[ri]);
    if (c.flags) free(c.flags[ri]);
    if (c.used) free(c.used[ri]);
  }
  free(c.comp);
  free(c.flags);
  free(c.used);
  return rc;
}
