/*
 * pool_adaptive.c - adaptive pages (the reference's newer Adaptive preset,
 * see memory.h): a sliced pool whose page size follows the largest
 * allocation it has served.
 *
 * Algorithm. The pool is a list of GENERATIONS, each an ordinary sliced pool
 * (pool_sliced.c) with one page size: the current generation serves every
 * reservation; older ones are OUTDATED, newest first. A request that fits
 * the current page (effective size <= page size) is served by the current
 * generation as a plain sliced pool would. A larger one grows the page size
 * to size + 1 MiB, rounded up to 1 MiB and to the alignment, clamped to
 * [floor, max page]: the current generation's empty pages go back to the
 * storage, a new generation of the new size allocates the page, and only
 * when that succeeded does the old generation become outdated (a refused
 * page leaves the page size and the generations as they were). An outdated
 * generation serves nothing; a release on it gives its page back as soon as
 * the page empties, and the generation is dropped with its last page. The
 * manager sees one pool: it marks slices used/free on this pool; each
 * generation keeps its own usage too (marked here), so its own check holds.
 * Cost: as the sliced pool per reservation and release, plus a walk over the
 * outdated generations to find a released slice's generation (they are few:
 * one per growth whose allocations are still live).
 *
 * Invariants (check): A1 every generation passes the sliced checks; A2 the
 * current page size is a multiple of the alignment in [floor, max page] and
 * the generations' page sizes strictly decrease from the current one through
 * the outdated ones (the page size only grows); A3 an outdated generation
 * holds at least one page and no entirely free page (except those a growth
 * under CM_PAGES_ADD_ONLY kept, until the next unrestricted call); A4 the pool's usage,
 * pages and unmapped pages are the sums over the generations; A5 no served
 * request was larger than the current page.
 * Exports: cm__pool_adaptive_new (pool.h), cm__adaptive_bounds (layout.h).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/sbuf.h"
#include "core/layout.h"
#include "core/pool.h"

#define MIB (1ull << 20)
#define FLOOR_DEFAULT (2 * MIB)

/* One generation: a sliced pool and what was last folded into the totals. */
typedef struct gen {
  cm__pool *p;
  uint64_t pages_mark, unmapped_mark;
} gen;

typedef struct adaptive_pool {
  cm__pool base;
  uint64_t floor, max_page, page_size;
  uint64_t largest_eff; /* largest effective size served (A5) */
  uint64_t growths;     /* page size changes so far */
  /* a growth under CM_PAGES_ADD_ONLY kept empty pages on outdated pools;
   * the pool's next unrestricted page allocation or cleanup gives them back */
  bool kept_empty;
  gen cur;
  gen *old; /* outdated generations, newest first */
  size_t nold, capold;
} adaptive_pool;

static adaptive_pool *AP(cm__pool *p) { return (adaptive_pool *)p; }

static uint64_t rup(uint64_t n, uint64_t a) {
  uint64_t r;
  return cm__round_up(n, a, &r) ? r : UINT64_MAX;
}

void cm__adaptive_bounds(uint64_t alignment, uint64_t device_max_page, uint64_t page,
                         uint64_t max, uint64_t *floor_out, uint64_t *max_out) {
  uint64_t A = alignment ? alignment : 1;
  uint64_t M = max ? max : device_max_page;
  M = (M / A) * A; /* the largest page: a whole number of alignments */
  if (M < A) M = A;
  uint64_t F = page ? page : FLOOR_DEFAULT;
  if (F > M) F = M; /* the floor is capped by the largest page ... */
  F = rup(F, A);    /* ... and rounded to the alignment (still <= M) */
  *floor_out = F;
  *max_out = M;
}

/* The page size a request of `size` bytes grows the pool to. */
static uint64_t grown_size(const adaptive_pool *ap, uint64_t size) {
  uint64_t n = rup(rup(size + MIB, MIB), ap->base.alignment); /* size <= max_page: no overflow */
  if (n < ap->floor) n = ap->floor;
  if (n > ap->max_page) n = ap->max_page;
  return n;
}

/* Fold generation g's changes since the last fold into the pool's totals:
 * reserved bytes (with the high-water mark, so peaks stay exact), pages and
 * unmapped pages. Called after every generation call that may change them. */
static void fold(adaptive_pool *ap, gen *g) {
  cm__pool *b = &ap->base;
  cm__reserved_change c = cm__pool_reserved_take(g->p);
  cm__pool_reserved_add(b, (int64_t)(c.high - c.before));
  cm__pool_reserved_add(b, (int64_t)c.now - (int64_t)c.high);
  cm__pool_pages_add(b, (int64_t)g->p->pages - (int64_t)g->pages_mark);
  g->pages_mark = g->p->pages;
  b->pages_unmapped += g->p->pages_unmapped - g->unmapped_mark;
  g->unmapped_mark = g->p->pages_unmapped;
}

/* The generation holding slice s. */
static gen *gen_of(adaptive_pool *ap, const cm__slice *s, size_t *old_index) {
  cm__pool *owner = cm__sliced_owner(s);
  if (owner == ap->cur.p) return &ap->cur;
  for (size_t i = 0; i < ap->nold; i++)
    if (ap->old[i].p == owner) {
      if (old_index) *old_index = i;
      return &ap->old[i];
    }
  return NULL; /* not ours: cannot happen (check reports slices by generation) */
}

static int gen_new(adaptive_pool *ap, uint64_t page_size, cm__pool **out) {
  cm_pool_options_t o;
  memset(&o, 0, sizeof o);
  o.kind = CM_POOL_SLICED;
  o.page_size = page_size;
  o.max_slice_size = page_size;
  o.has_max_slice_size = true;
  o.has_dealloc_period = ap->base.opts.has_dealloc_period;
  o.dealloc_period = ap->base.opts.dealloc_period;
  return cm__pool_sliced_new(&ap->base.ctx, &o, ap->base.position, out);
}

static bool accept(const cm__pool *p, uint64_t size) {
  const adaptive_pool *ap = (const adaptive_pool *)p;
  return size <= ap->max_page && rup(size, p->alignment) <= ap->max_page;
}

/* Slice s of generation g is handed out for `size`: count it there too. */
static cm__slice *served(adaptive_pool *ap, gen *g, cm__slice *s, uint64_t size, uint64_t eff) {
  cm__pool_mark_used(g->p, s, size);
  if (eff > ap->largest_eff) ap->largest_eff = eff;
  return s;
}

static cm__slice *try_reserve(cm__pool *p, uint64_t size, uint64_t eff) {
  adaptive_pool *ap = AP(p);
  if (eff > ap->page_size) return NULL;
  cm__slice *s = ap->cur.p->vt->try_reserve(ap->cur.p, size, eff);
  return s ? served(ap, &ap->cur, s, size, eff) : NULL;
}

/* Make room for one more outdated generation (before any state changes). */
static int old_reserve(adaptive_pool *ap) {
  if (ap->nold < ap->capold) return CM_OK;
  size_t nc = ap->capold ? ap->capold * 2 : 4;
  gen *nv = realloc(ap->old, nc * sizeof *nv);
  if (!nv) return CM_ENOMEM;
  ap->old = nv;
  ap->capold = nc;
  return CM_OK;
}

static void old_remove(adaptive_pool *ap, size_t i) {
  memmove(&ap->old[i], &ap->old[i + 1], (ap->nold - i - 1) * sizeof ap->old[0]);
  ap->nold--;
}

/* May the call in progress give pages back (not CM_PAGES_ADD_ONLY)? */
static bool may_release(const adaptive_pool *ap) {
  return *ap->base.ctx.page_updates == CM_PAGES_ALLOW;
}

/* Give back the empty pages a restricted growth left on outdated pools
 * (dropping pools that held nothing else). */
static void release_kept(adaptive_pool *ap) {
  if (!ap->kept_empty) return;
  ap->kept_empty = false;
  for (size_t i = ap->nold; i-- > 0;) {
    gen *g = &ap->old[i];
    g->p->vt->cleanup(g->p, *ap->base.ctx.reserve_clock, true, UINT64_MAX);
    fold(ap, g);
    if (g->p->pages == 0) {
      g->p->vt->destroy(g->p);
      old_remove(ap, i);
    }
  }
}

static int grow(adaptive_pool *ap, uint64_t size, uint64_t eff, bool lazy, cm__slice **out,
                cm_diag_t *diag) {
  cm__pool *p = &ap->base;
  uint64_t next = grown_size(ap, size);
  cm__pool *np = NULL;
  if (old_reserve(ap) != CM_OK || gen_new(ap, next, &np) != CM_OK)
    return cm__diag_set(diag, CM_ENOMEM, "out of host memory growing the adaptive pool");
  /* The generation about to be outdated gives its empty pages back first
   * (unless the call may give nothing back: then they wait). */
  bool keep = !may_release(ap);
  if (!keep) {
    ap->cur.p->vt->cleanup(ap->cur.p, *p->ctx.reserve_clock, true, UINT64_MAX);
    fold(ap, &ap->cur);
  }
  gen ng = {np, 0, 0};
  int rc = np->vt->alloc(np, size, eff, lazy, out, diag);
  fold(ap, &ng);
  if (rc != CM_OK) {
    np->vt->destroy(np); /* holds nothing: the page was refused */
    return rc;
  }
  if (ap->cur.p->pages) {
    memmove(&ap->old[1], &ap->old[0], ap->nold * sizeof ap->old[0]);
    ap->old[0] = ap->cur;
    ap->nold++;
    if (keep && cm__sliced_empty_pages(ap->old[0].p)) ap->kept_empty = true;
  } else {
    ap->cur.p->vt->destroy(ap->cur.p);
  }
  ap->cur = ng;
  ap->page_size = next;
  ap->growths++;
  p->opts.page_size = next;
  served(ap, &ap->cur, *out, size, eff);
  return CM_OK;
}

static int alloc(cm__pool *p, uint64_t size, uint64_t eff, bool lazy, cm__slice **out,
                 cm_diag_t *diag) {
  adaptive_pool *ap = AP(p);
  if (eff > ap->max_page)
    return cm__diag_set(diag, CM_ETOOBIG,
                        "an allocation of %" PRIu64 " bytes (%" PRIu64
                        " with alignment) exceeds the adaptive pool's largest page of %" PRIu64
                        " bytes (BufferTooBig); raise max_page_size",
                        size, eff, ap->max_page);
  if (may_release(ap)) release_kept(ap);
  if (eff > ap->page_size) return grow(ap, size, eff, lazy, out, diag);
  int rc = ap->cur.p->vt->alloc(ap->cur.p, size, eff, lazy, out, diag);
  fold(ap, &ap->cur);
  if (rc == CM_OK) served(ap, &ap->cur, *out, size, eff);
  return rc;
}

static void on_free(cm__pool *p, cm__slice *s) {
  adaptive_pool *ap = AP(p);
  size_t i = 0;
  gen *g = gen_of(ap, s, &i);
  if (!g) return;
  cm__pool_mark_free(g->p, s);
  if (g == &ap->cur) {
    g->p->vt->on_free(g->p, s);
    return;
  }
  /* outdated: the page goes back as soon as it empties, the generation with
   * its last page */
  if (!cm__sliced_free_release(g->p, s)) return;
  fold(ap, g);
  if (g->p->pages == 0) {
    g->p->vt->destroy(g->p);
    old_remove(ap, i);
  }
}

static void take_free(cm__pool *p, cm__slice *s) {
  gen *g = gen_of(AP(p), s, NULL);
  if (!g) return;
  g->p->vt->take_free(g->p, s);
  cm__pool_mark_used(g->p, s, s->size);
}

static void cleanup(cm__pool *p, uint64_t alloc_nr, bool explicit_cleanup, uint64_t serving) {
  adaptive_pool *ap = AP(p);
  uint64_t fits = serving != UINT64_MAX && rup(serving, p->alignment) <= ap->page_size
                      ? serving
                      : UINT64_MAX;
  ap->cur.p->vt->cleanup(ap->cur.p, alloc_nr, explicit_cleanup, fits);
  fold(ap, &ap->cur);
  release_kept(ap); /* cleanups run in unrestricted calls only */
  p->next_cleanup = ap->cur.p->next_cleanup;
}

static int materialize(cm__pool *p, cm__slice *s, cm_diag_t *diag) {
  adaptive_pool *ap = AP(p);
  gen *g = gen_of(ap, s, NULL);
  if (!g) return cm__diag_set(diag, CM_ECORRUPT, "the slice is not in the adaptive pool");
  int rc = g->p->vt->materialize(g->p, s, diag);
  fold(ap, g);
  return rc;
}

/* Pages are numbered through the current generation, then the outdated
 * ones, newest first (numbers change as outdated pages go). */
static void locate(const cm__pool *p, const cm__slice *s, cm_location_t *out) {
  adaptive_pool *ap = (adaptive_pool *)p;
  cm__pool *owner = cm__sliced_owner(s);
  owner->vt->locate(owner, s, out);
  if (owner == ap->cur.p) return;
  uint64_t before = ap->cur.p->pages;
  for (size_t i = 0; i < ap->nold && ap->old[i].p != owner; i++) before += ap->old[i].p->pages;
  out->page += (uint32_t)before;
}

#define BAD(...)                                                                 \
  do {                                                                           \
    bad++;                                                                       \
    if (diag && !diag->message[0]) cm__diag_set(diag, CM_ECORRUPT, __VA_ARGS__); \
  } while (0)

static size_t check(cm__pool *p, cm_diag_t *diag) {
  adaptive_pool *ap = AP(p);
  size_t bad = 0;
  unsigned pos = p->position;
  cm_usage_t u = {0};
  uint64_t pages = 0, unmapped = 0;
  uint64_t prev = UINT64_MAX;
  for (size_t i = 0; i <= ap->nold; i++) {
    gen *g = i == 0 ? &ap->cur : &ap->old[i - 1];
    size_t b = g->p->vt->check(g->p, diag); /* A1 */
    bad += b;
    uint64_t ps = cm__sliced_page_size(g->p);
    if (ps >= prev) /* A2: page sizes strictly decrease into the past */
      BAD("adaptive pool %u: generation %zu has pages of %" PRIu64
          " bytes, not smaller than the newer generation's %" PRIu64, pos, i, ps, prev);
    prev = ps;
    if (i > 0) { /* A3 */
      if (g->p->pages == 0) BAD("adaptive pool %u: outdated generation %zu holds no page", pos, i);
      size_t empty = cm__sliced_empty_pages(g->p);
      if (empty && !ap->kept_empty)
        BAD("adaptive pool %u: outdated generation %zu keeps %zu empty page(s)", pos, i, empty);
    }
    if (g->pages_mark != g->p->pages || g->unmapped_mark != g->p->pages_unmapped ||
        g->p->reserved_mark != g->p->usage.bytes_reserved)
      BAD("adaptive pool %u: generation %zu changed without being counted", pos, i);
    u.number_allocs += g->p->usage.number_allocs;
    u.bytes_in_use += g->p->usage.bytes_in_use;
    u.bytes_padding += g->p->usage.bytes_padding;
    u.bytes_reserved += g->p->usage.bytes_reserved;
    pages += g->p->pages;
    unmapped += g->p->pages_unmapped;
  }
  if (ap->page_size != cm__sliced_page_size(ap->cur.p) || ap->page_size < ap->floor ||
      ap->page_size > ap->max_page || ap->page_size % p->alignment != 0 ||
      p->opts.page_size != ap->page_size) /* A2 */
    BAD("adaptive pool %u: page size %" PRIu64 " (current generation %" PRIu64
        ") outside [%" PRIu64 ", %" PRIu64 "] or not aligned", pos, ap->page_size,
        cm__sliced_page_size(ap->cur.p), ap->floor, ap->max_page);
  if (u.number_allocs != p->usage.number_allocs || u.bytes_in_use != p->usage.bytes_in_use ||
      u.bytes_padding != p->usage.bytes_padding || u.bytes_reserved != p->usage.bytes_reserved ||
      pages != p->pages || unmapped != p->pages_unmapped) /* A4 */
    BAD("adaptive pool %u: usage (%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ") pages %" PRIu64
        " are not the generations' sums (%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64
        ") pages %" PRIu64, pos, p->usage.number_allocs, p->usage.bytes_in_use,
        p->usage.bytes_padding, p->usage.bytes_reserved, p->pages, u.number_allocs,
        u.bytes_in_use, u.bytes_padding, u.bytes_reserved, pages);
  if (ap->largest_eff > ap->page_size) /* A5 */
    BAD("adaptive pool %u: served %" PRIu64 " bytes, more than its page of %" PRIu64, pos,
        ap->largest_eff, ap->page_size);
  return bad;
}
#undef BAD

static uint64_t outdated_pages(const adaptive_pool *ap) {
  uint64_t n = 0;
  for (size_t i = 0; i < ap->nold; i++) n += ap->old[i].p->pages;
  return n;
}

static size_t display(cm__pool *p, char *buf, size_t cap) {
  adaptive_pool *ap = AP(p);
  size_t len = 0;
#define OUT(...) (len = cm__bprintf(buf, cap, len, __VA_ARGS__)) /* base/sbuf.c */
#define SUB(q) len += (q)->vt->display((q), len < cap ? buf + len : NULL, len < cap ? cap - len : 0)
  OUT(" - Adaptive Pool page_size=%" PRIu64 " min_page_size=%" PRIu64 " max_page_size=%" PRIu64
      " outdated_pools=%zu outdated_pages=%" PRIu64 "\n",
      ap->page_size, ap->floor, ap->max_page, ap->nold, outdated_pages(ap));
  SUB(ap->cur.p);
  for (size_t i = 0; i < ap->nold; i++) {
    OUT("   outdated:\n");
    SUB(ap->old[i].p);
  }
#undef SUB
#undef OUT
  return len;
}

static void report(cm__pool *p, cm_pool_report_t *out) {
  adaptive_pool *ap = AP(p);
  out->outdated_pools = ap->nold;
  out->outdated_pages = outdated_pages(ap);
}

static void for_each(cm__pool *p, void (*fn)(cm__slice *, void *), void *arg) {
  adaptive_pool *ap = AP(p);
  ap->cur.p->vt->for_each(ap->cur.p, fn, arg);
  for (size_t i = 0; i < ap->nold; i++) ap->old[i].p->vt->for_each(ap->old[i].p, fn, arg);
}

static void destroy(cm__pool *p) {
  adaptive_pool *ap = AP(p);
  ap->cur.p->vt->destroy(ap->cur.p);
  for (size_t i = 0; i < ap->nold; i++) ap->old[i].p->vt->destroy(ap->old[i].p);
  free(ap->old);
  free(ap);
}

/* ---- relocation (relocate.c): outdated pages emptied into the current pool ---- */

/* May page i of generation g move (live slices, none guarded or lazily
 * reserved)? */
static bool page_movable(cm__pool *gp, size_t i) {
  bool live = false;
  for (cm__slice *s = cm__sliced_page_head(gp, i); s; s = cm__sliced_next(s)) {
    if (!s->used) continue;
    if (s->guards || !s->mapped) return false;
    live = true;
  }
  return live;
}

/* A target in the current generation for slice s: held room, or a new page
 * when the reason allows growth. */
static cm__slice *target_for(adaptive_pool *ap, const cm__slice *s, bool may_grow) {
  uint64_t eff = s->size + s->padding;
  if (eff == 0) eff = ap->base.alignment;
  cm__pool *cp = ap->cur.p;
  cm__slice *t = cp->vt->try_reserve(cp, s->size, eff);
  if (!t && may_grow && cp->vt->alloc(cp, s->size, eff, false, &t, NULL) != CM_OK) t = NULL;
  fold(ap, &ap->cur);
  return t ? served(ap, &ap->cur, t, s->size, eff) : NULL;
}

/* Plan the moves of page i of generation g: all its live slices, or none. */
static int plan_page(adaptive_pool *ap, cm__pool *gp, size_t i, bool may_grow, cm__moves *out) {
  size_t from = out->n;
  int rc = CM_OK;
  for (cm__slice *s = cm__sliced_page_head(gp, i); s && rc == CM_OK; s = cm__sliced_next(s)) {
    if (!s->used) continue;
    cm__slice *t = target_for(ap, s, may_grow);
    if (!t) {
      rc = CM_EBUSY;
      break;
    }
    rc = cm__moves_push(out, s, t);
    if (rc != CM_OK) on_free(&ap->base, t);
  }
  if (rc == CM_OK) return CM_OK;
  for (size_t k = out->n; k-- > from;) on_free(&ap->base, out->v[k].dst);
  out->n = from;
  return rc == CM_ENOMEM ? CM_ENOMEM : CM_OK;
}

/* Every outdated page, oldest generation first: its live slices move to the
 * current generation (held room only, unless `why` allows growth), so the
 * page goes back when they are committed. */
static int reloc_plan(cm__pool *p, cm_relocate_reason_t why, cm__moves *out) {
  adaptive_pool *ap = AP(p);
  bool may_grow = why == CM_RELOCATE_ARENA_FULL || why == CM_RELOCATE_CAPTURE;
  int rc = CM_OK;
  for (size_t g = ap->nold; g-- > 0 && rc == CM_OK;) {
    cm__pool *gp = ap->old[g].p;
    for (size_t i = 0; i < cm__sliced_pages(gp) && rc == CM_OK; i++)
      if (page_movable(gp, i)) rc = plan_page(ap, gp, i, may_grow, out);
  }
  return rc;
}

static void guard(cm__pool *p, cm__slice *s, int64_t delta) {
  gen *g = gen_of(AP(p), s, NULL);
  if (g) cm__sliced_guard(g->p, s, delta);
}

static const cm__pool_vt k_adaptive_vt = {
    .name = "adaptive",
    .accept = accept,
    .try_reserve = try_reserve,
    .alloc = alloc,
    .on_free = on_free,
    .take_free = take_free,
    .cleanup = cleanup,
    .materialize = materialize,
    .locate = locate,
    .check = check,
    .display = display,
    .report = report,
    .for_each = for_each,
    .destroy = destroy,
    .reloc_plan = reloc_plan,
    .guard = guard,
};

int cm__pool_adaptive_new(const cm__pool_ctx *ctx, const cm_pool_options_t *o, uint8_t pos,
                          cm__pool **out) {
  adaptive_pool *ap = calloc(1, sizeof *ap);
  if (!ap) return CM_ENOMEM;
  cm__pool_base_init(&ap->base, &k_adaptive_vt, ctx, pos);
  ap->base.opts = *o;
  ap->base.next_cleanup = UINT64_MAX;
  cm__adaptive_bounds(ap->base.alignment, ctx->max_page_size, o->page_size, o->max_alloc_size,
                      &ap->floor, &ap->max_page);
  ap->page_size = ap->floor;
  ap->base.opts.kind = CM_POOL_ADAPTIVE;
  ap->base.opts.page_size = ap->floor;
  ap->base.opts.max_alloc_size = ap->max_page;
  if (gen_new(ap, ap->floor, &ap->cur.p) != CM_OK) {
    free(ap);
    return CM_ENOMEM;
  }
  ap->base.next_cleanup = ap->cur.p->next_cleanup;
  *out = &ap->base;
  return CM_OK;
}
