/*
 * pool_sliced.c - sliced pages (spec §4.1, §4.2) with the §15.1 fixes.
 *
 * Algorithm. Each page is one storage allocation carved into blocks kept in
 * offset order (a doubly linked list). Free blocks of all pages sit in one
 * treap keyed (span, page index, offset): a reservation takes the smallest
 * free block that fits the effective size (lowest page, then lowest offset on
 * ties) and splits off the remainder. A released block merges with free
 * neighbours at once, so free blocks are never adjacent. Fit and split use the
 * effective size, so pages always tile exactly ([REC] of §4.1).
 * Cost: O(log n) per reserve and release; explicit cleanup is O(pages+blocks).
 *
 * Invariants (check): S1 blocks of a page tile [0, page_size) in order;
 * S2 no two adjacent free blocks; S3 free blocks are exactly the tree's nodes,
 * with keys (span, page, offset); S4 usage equals the sums over used blocks;
 * S5 bytes_reserved == pages * page_size.
 * dealloc_period (§15.1 item 7): a page that stayed entirely free for a whole
 * period of reservations is released by the periodic cleanup.
 * max_alloc_size, when set, is the largest allocation the pool accepts: the
 * near-page rule of §4.2 (a request that fills most of a page) applies only
 * up to it (the Adaptive preset's metadata pool sets it to its slice size).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/sbuf.h"
#include "core/pool.h"

typedef struct spage spage;

typedef struct block {
  cm__slice s;
  struct block *prev, *next;
  spage *page;
  cm__tnode node;
} block;

struct spage {
  cm__pool *owner; /* the pool holding the page (cm__sliced_owner) */
  uint64_t storage_id;
  uint32_t index;
  bool mapped;
  block *head;
  uint64_t free_bytes;
  uint64_t free_since; /* reservation count when the page became entirely free */
  uint32_t guards;     /* guards of its slices (raw addresses handed out): while
                          non-zero the page serves no new reservation */
};

typedef struct sliced_pool {
  cm__pool base;
  uint64_t page_size, max_alloc, max_pages;
  bool capped;
  spage **pages;
  size_t npages, cappages;
  cm__tree free;
  block *spare;
  uint64_t last_check;
  uint64_t guarded_pages; /* pages with guards: reservations skip them */
} sliced_pool;

static sliced_pool *SP(cm__pool *p) { return (sliced_pool *)p; }

static block *block_new(sliced_pool *sp) {
  block *b = sp->spare;
  if (b) sp->spare = b->next;
  else b = malloc(sizeof *b);
  if (b) memset(b, 0, sizeof *b);
  return b;
}

static void block_recycle(sliced_pool *sp, block *b) {
  if (b->s.desc) cm__desc_detach(b->s.desc);
  b->s.desc = NULL;
  b->next = sp->spare;
  sp->spare = b;
}

/* Entirely free: one free block spans the page (free_bytes alone is not
 * enough: a live zero-byte slice occupies no bytes). */
static bool page_empty(const spage *pg) { return !pg->head->s.used && !pg->head->next; }

static void tree_put(sliced_pool *sp, block *b) {
  b->node.k1 = b->s.span;
  b->node.k2 = b->page->index;
  b->node.k3 = b->s.offset;
  cm__tree_insert(&sp->free, &b->node);
}

static bool accept(const cm__pool *p, uint64_t size) {
  const sliced_pool *sp = (const sliced_pool *)p;
  if (size <= sp->max_alloc) return true;
  if (p->opts.max_alloc_size && size > p->opts.max_alloc_size) return false; /* strict limit */
  return !sp->capped && size <= sp->page_size && (sp->page_size - size) * 5 < sp->page_size;
}

/* Take free block b for eff bytes: remove it from the tree and split. */
static cm__slice *take(sliced_pool *sp, block *b, uint64_t eff) {
  cm__tree_remove(&sp->free, &b->node);
  b->page->free_bytes -= b->s.span;
  if (b->s.span > eff) {
    block *nb = block_new(sp);
    if (nb) {
      nb->page = b->page;
      nb->s.storage_id = b->s.storage_id;
      nb->s.mapped = b->s.mapped;
      nb->s.pool = b->s.pool;
      nb->s.offset = b->s.offset + eff;
      nb->s.span = b->s.span - eff;
      nb->prev = b;
      nb->next = b->next;
      if (b->next) b->next->prev = nb;
      b->next = nb;
      b->s.span = eff;
      b->page->free_bytes += nb->s.span;
      tree_put(sp, nb);
    }
  }
  return &b->s;
}

/* The best fit for eff on a page without guards, or NULL. */
static __attribute__((noinline)) block *fit_unguarded(sliced_pool *sp, cm__tnode *n) {
  for (; n; n = cm__tree_next(n)) {
    block *b = CM__CONTAINER(n, block, node);
    if (!b->page->guards) return b;
  }
  return NULL;
}

static cm__slice *try_reserve(cm__pool *p, uint64_t size, uint64_t eff) {
  sliced_pool *sp = SP(p);
  (void)size;
  cm__tnode *n = cm__tree_lower_bound(&sp->free, eff, 0, 0);
  if (!n) return NULL;
  if (__builtin_expect(sp->guarded_pages != 0, 0)) { /* a guarded page serves nothing */
    block *b = fit_unguarded(sp, n);
    return b ? take(sp, b, eff) : NULL;
  }
  return take(sp, CM__CONTAINER(n, block, node), eff);
}

/* Slice s gained (delta > 0) or lost guards. */
static void guard(cm__pool *p, cm__slice *s, int64_t delta) {
  sliced_pool *sp = SP(p);
  spage *pg = ((block *)s)->page;
  bool was = pg->guards != 0;
  pg->guards = (uint32_t)((int64_t)pg->guards + delta);
  bool now = pg->guards != 0;
  if (now && !was) sp->guarded_pages++;
  if (was && !now) sp->guarded_pages--;
}

void cm__sliced_guard(cm__pool *p, cm__slice *s, int64_t delta) { guard(p, s, delta); }

static int alloc(cm__pool *p, uint64_t size, uint64_t eff, bool lazy, cm__slice **out,
                 cm_diag_t *diag) {
  sliced_pool *sp = SP(p);
  if (sp->capped && sp->npages >= sp->max_pages)
    return cm__diag_set(diag, CM_ECAPACITY,
                        "memory pool %u is at capacity: an allocation of %" PRIu64
                        " bytes does not fit (capacity %" PRIu64 " bytes, %" PRIu64 " in use)",
                        p->position, size, sp->max_pages * sp->page_size, p->usage.bytes_in_use);
  if (eff > sp->page_size)
    return cm__diag_set(diag, CM_EINVAL,
                        "a page of %" PRIu64 " bytes cannot hold an allocation of %" PRIu64
                        " bytes (%" PRIu64 " with alignment); use an aligned page size",
                        sp->page_size, size, eff);
  if (sp->npages == sp->cappages) {
    size_t nc = sp->cappages ? sp->cappages * 2 : 8;
    spage **nv = realloc(sp->pages, nc * sizeof *nv);
    if (!nv) return cm__diag_set(diag, CM_ENOMEM, "out of host memory");
    sp->pages = nv;
    sp->cappages = nc;
  }
  spage *pg = calloc(1, sizeof *pg);
  block *b = pg ? block_new(sp) : NULL;
  if (!b) {
    free(pg);
    return cm__diag_set(diag, CM_ENOMEM, "out of host memory");
  }
  if (lazy) {
    pg->storage_id = cm__pool_lazy_id(p);
    pg->mapped = false;
    p->pages_unmapped++;
  } else {
    int rc = cm_storage_alloc(cm__pool_storage(p), sp->page_size, &pg->storage_id, diag);
    if (rc) {
      block_recycle(sp, b);
      free(pg);
      return rc;
    }
    pg->mapped = true;
  }
  pg->owner = p;
  pg->index = (uint32_t)sp->npages;
  pg->head = b;
  pg->free_bytes = sp->page_size;
  sp->pages[sp->npages++] = pg;
  b->page = pg;
  b->s.storage_id = pg->storage_id;
  b->s.mapped = pg->mapped;
  b->s.pool = p->position;
  b->s.span = sp->page_size;
  tree_put(sp, b);
  cm__pool_pages_add(p, 1);
  cm__pool_reserved_add(p, (int64_t)sp->page_size);
  *out = take(sp, b, eff);
  return CM_OK;
}

static void on_free(cm__pool *p, cm__slice *s) {
  sliced_pool *sp = SP(p);
  block *b = (block *)s;
  spage *pg = b->page;
  pg->free_bytes += b->s.span;
  block *n = b->next;
  if (n && !n->s.used) {
    cm__tree_remove(&sp->free, &n->node);
    b->s.span += n->s.span;
    b->next = n->next;
    if (n->next) n->next->prev = b;
    block_recycle(sp, n);
  }
  block *pv = b->prev;
  if (pv && !pv->s.used) {
    cm__tree_remove(&sp->free, &pv->node);
    pv->s.span += b->s.span;
    pv->next = b->next;
    if (b->next) b->next->prev = pv;
    block_recycle(sp, b);
    b = pv;
  }
  tree_put(sp, b);
  if (page_empty(pg)) pg->free_since = *p->ctx.reserve_clock;
}

static void take_free(cm__pool *p, cm__slice *s) {
  sliced_pool *sp = SP(p);
  block *b = (block *)s;
  cm__tree_remove(&sp->free, &b->node);
  b->page->free_bytes -= b->s.span;
}

static void release_page(sliced_pool *sp, spage *pg) {
  cm__pool *p = &sp->base;
  block *b = pg->head; /* the page is empty: one free block */
  cm__tree_remove(&sp->free, &b->node);
  block_recycle(sp, b);
  if (pg->mapped) cm_storage_dealloc(cm__pool_storage(p), pg->storage_id, sp->page_size);
  else p->pages_unmapped--;
  cm__pool_reserved_add(p, -(int64_t)sp->page_size);
  cm__pool_pages_add(p, -1);
  free(pg);
}

static void compact(sliced_pool *sp) {
  size_t w = 0;
  for (size_t i = 0; i < sp->npages; i++) {
    spage *pg = sp->pages[i];
    if (!pg) continue;
    if (pg->index != w) {
      pg->index = (uint32_t)w;
      for (block *b = pg->head; b; b = b->next)
        if (!b->s.used) b->node.k2 = w; /* order preserved: the tree stays valid */
    }
    sp->pages[w++] = pg;
  }
  sp->npages = w;
}

static void cleanup(cm__pool *p, uint64_t alloc_nr, bool explicit_cleanup, uint64_t serving) {
  sliced_pool *sp = SP(p);
  if (!explicit_cleanup) {
    if (!p->opts.has_dealloc_period) {
      p->next_cleanup = UINT64_MAX;
      return;
    }
    uint64_t check = p->opts.dealloc_period / 5;
    p->next_cleanup = sp->last_check + (check ? check : 1);
    if (alloc_nr - sp->last_check < check) return;
    sp->last_check = alloc_nr;
    p->next_cleanup = alloc_nr + (check ? check : 1);
  }
  bool released = false, skipped = false;
  bool fits = serving != UINT64_MAX && accept(p, serving);
  for (size_t i = 0; i < sp->npages; i++) {
    spage *pg = sp->pages[i];
    if (!page_empty(pg)) continue;
    if (!explicit_cleanup) {
      if (alloc_nr - pg->free_since < p->opts.dealloc_period) continue;
      if (fits && !skipped) { /* keep one page for the request being served */
        skipped = true;
        continue;
      }
    }
    release_page(sp, pg);
    sp->pages[i] = NULL;
    released = true;
  }
  if (released) compact(sp);
}

static int materialize(cm__pool *p, cm__slice *s, cm_diag_t *diag) {
  sliced_pool *sp = SP(p);
  spage *pg = ((block *)s)->page;
  if (pg->mapped) return CM_OK;
  uint64_t id;
  int rc = cm_storage_alloc(cm__pool_storage(p), sp->page_size, &id, diag);
  if (rc)
    return cm__diag_set(diag, CM_EMAPPING,
                        "mapping a lazily reserved page of %" PRIu64 " bytes failed: %s",
                        sp->page_size, cm_strerror(rc));
  pg->storage_id = id;
  pg->mapped = true;
  for (block *b = pg->head; b; b = b->next) {
    b->s.storage_id = id;
    b->s.mapped = 1;
  }
  p->pages_unmapped--;
  return CM_OK;
}

static void locate(const cm__pool *p, const cm__slice *s, cm_location_t *out) {
  (void)p;
  const block *b = (const block *)s;
  out->page = b->page->index;
  uint32_t i = 0;
  for (const block *x = b->page->head; x && x != b; x = x->next) i++;
  out->slice = i;
}

#define BAD(...)                                                        \
  do {                                                                  \
    bad++;                                                              \
    if (diag && !diag->message[0]) cm__diag_set(diag, CM_ECORRUPT, __VA_ARGS__); \
  } while (0)

static size_t check(cm__pool *p, cm_diag_t *diag) {
  sliced_pool *sp = SP(p);
  size_t bad = 0, nfree = 0;
  cm_usage_t u = {0};
  unsigned pos = p->position;
  for (size_t i = 0; i < sp->npages; i++) {
    spage *pg = sp->pages[i];
    uint64_t off = 0, fb = 0;
    if (pg->index != i) BAD("sliced pool %u: page %zu has index %u", pos, i, pg->index);
    if (pg->owner != p) BAD("sliced pool %u: page %zu names another pool as its owner", pos, i);
    for (block *b = pg->head; b; b = b->next) {
      if (b->s.offset != off || b->page != pg || b->s.storage_id != pg->storage_id)
        BAD("sliced pool %u page %zu: S1 block at %" PRIu64 " expected at %" PRIu64, pos, i,
            b->s.offset, off);
      if (b->next && b->next->prev != b) BAD("sliced pool %u page %zu: broken links", pos, i);
      off += b->s.span;
      if (b->s.used) {
        u.number_allocs++;
        u.bytes_in_use += b->s.size;
        u.bytes_padding += b->s.padding;
        if (b->s.size + b->s.padding > b->s.span)
          BAD("sliced pool %u page %zu: used block at %" PRIu64 " overflows its span", pos, i,
              b->s.offset);
        if (!b->s.desc || b->s.desc->slice != &b->s)
          BAD("sliced pool %u page %zu: M3 descriptor of block %" PRIu64, pos, i, b->s.offset);
      } else {
        nfree++;
        fb += b->s.span;
        if (b->next && !b->next->s.used)
          BAD("sliced pool %u page %zu: S2 adjacent free blocks at %" PRIu64, pos, i, b->s.offset);
        if (b->node.k1 != b->s.span || b->node.k2 != pg->index || b->node.k3 != b->s.offset)
          BAD("sliced pool %u page %zu: S3 stale tree key at %" PRIu64, pos, i, b->s.offset);
      }
    }
    if (off != sp->page_size || fb != pg->free_bytes)
      BAD("sliced pool %u page %zu: S1 tiles %" PRIu64 " of %" PRIu64 ", free %" PRIu64
          " vs %" PRIu64, pos, i, off, sp->page_size, fb, pg->free_bytes);
    u.bytes_reserved += sp->page_size;
  }
  if (nfree != sp->free.count)
    BAD("sliced pool %u: S3 %zu free blocks, tree holds %zu", pos, nfree, sp->free.count);
  size_t tb = cm__tree_check(&sp->free);
  if (tb) BAD("sliced pool %u: free tree has %zu violations", pos, tb);
  if (u.number_allocs != p->usage.number_allocs || u.bytes_in_use != p->usage.bytes_in_use ||
      u.bytes_padding != p->usage.bytes_padding || u.bytes_reserved != p->usage.bytes_reserved)
    BAD("sliced pool %u: S4/S5 usage (%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64
        ") recomputed (%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ")", pos,
        p->usage.number_allocs, p->usage.bytes_in_use, p->usage.bytes_padding,
        p->usage.bytes_reserved, u.number_allocs, u.bytes_in_use, u.bytes_padding,
        u.bytes_reserved);
  if (sp->npages != p->pages) BAD("sliced pool %u: %zu pages, counter %" PRIu64, pos, sp->npages, p->pages);
  return bad;
}
#undef BAD

static size_t display(cm__pool *p, char *buf, size_t cap) {
  sliced_pool *sp = SP(p);
  size_t len = 0;
#define OUT(...) (len = cm__bprintf(buf, cap, len, __VA_ARGS__)) /* base/sbuf.c */
  if (sp->npages == 0) return 0;
  OUT(" - Sliced Pool page_size=%" PRIu64 " max_alloc_size=%" PRIu64, sp->page_size, sp->max_alloc);
  if (sp->capped) OUT(" max_pool_size=%" PRIu64, sp->max_pages * sp->page_size);
  OUT("\n");
  for (size_t i = 0; i < sp->npages; i++) {
    spage *pg = sp->pages[i];
    uint64_t n = 0;
    for (block *b = pg->head; b; b = b->next) n++;
    OUT("   - Page StorageId(%" PRIu64 ") num_slices=%" PRIu64 " => %" PRIu64 " free - %" PRIu64
        " full - %" PRIu64 " total\n",
        pg->storage_id, n, pg->free_bytes, sp->page_size - pg->free_bytes, sp->page_size);
  }
  char tmp[512];
  cm_usage_display(&p->usage, tmp, sizeof tmp);
  OUT("\n%s", tmp);
#undef OUT
  return len;
}

static void for_each(cm__pool *p, void (*fn)(cm__slice *, void *), void *arg) {
  sliced_pool *sp = SP(p);
  for (size_t i = 0; i < sp->npages; i++)
    for (block *b = sp->pages[i]->head, *n; b; b = n) {
      n = b->next;
      fn(&b->s, arg);
    }
}

static void destroy(cm__pool *p) {
  sliced_pool *sp = SP(p);
  for (size_t i = 0; i < sp->npages; i++) {
    spage *pg = sp->pages[i];
    for (block *b = pg->head, *n; b; b = n) {
      n = b->next;
      if (b->s.desc) cm__desc_detach(b->s.desc);
      free(b);
    }
    if (pg->mapped) cm_storage_dealloc(cm__pool_storage(p), pg->storage_id, sp->page_size);
    cm__pool_reserved_add(p, -(int64_t)sp->page_size);
    free(pg);
  }
  while (sp->spare) {
    block *n = sp->spare->next;
    free(sp->spare);
    sp->spare = n;
  }
  free(sp->pages);
  free(sp);
}

/* ---- for pools built of sliced pools (pool_adaptive.c; declared in pool.h) ---- */

cm__pool *cm__sliced_owner(const cm__slice *s) { return ((const block *)s)->page->owner; }

uint64_t cm__sliced_page_size(const cm__pool *p) { return ((const sliced_pool *)p)->page_size; }

bool cm__sliced_free_release(cm__pool *p, cm__slice *s) {
  sliced_pool *sp = SP(p);
  spage *pg = ((block *)s)->page; /* read first: on_free may recycle the block */
  on_free(p, s);
  if (!page_empty(pg)) return false;
  for (size_t i = 0; i < sp->npages; i++)
    if (sp->pages[i] == pg) {
      sp->pages[i] = NULL;
      break;
    }
  release_page(sp, pg);
  compact(sp);
  return true;
}

size_t cm__sliced_empty_pages(const cm__pool *p) {
  const sliced_pool *sp = (const sliced_pool *)p;
  size_t n = 0;
  for (size_t i = 0; i < sp->npages; i++) n += page_empty(sp->pages[i]);
  return n;
}

static const cm__pool_vt k_sliced_vt = {
    .name = "sliced",
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
    .for_each = for_each,
    .destroy = destroy,
    .guard = guard,
};

int cm__pool_sliced_new(const cm__pool_ctx *ctx, const cm_pool_options_t *o, uint8_t pos,
                        cm__pool **out) {
  sliced_pool *sp = calloc(1, sizeof *sp);
  if (!sp) return CM_ENOMEM;
  cm__pool_base_init(&sp->base, &k_sliced_vt, ctx, pos);
  uint64_t A = sp->base.alignment;
  sp->base.opts = *o;
  sp->page_size = o->page_size ? o->page_size : A;
  if (o->has_max_pool_size) {
    sp->capped = true;
    uint64_t C = o->max_pool_size;
    if (C < sp->page_size) {
      uint64_t pg = (C / A) * A;
      sp->page_size = pg > A ? pg : A;
    }
    uint64_t mp = C / sp->page_size;
    sp->max_pages = mp > 65535 ? 65535 : mp;
  }
  uint64_t ms = o->has_max_slice_size ? o->max_slice_size : sp->page_size;
  sp->max_alloc = ms < sp->page_size ? ms : sp->page_size;
  sp->base.opts.page_size = sp->page_size;
  sp->base.opts.max_slice_size = sp->max_alloc;
  sp->base.opts.has_max_slice_size = true;
  if (sp->capped) sp->base.opts.max_pool_size = sp->max_pages * sp->page_size;
  cm__tree_init(&sp->free);
  *out = &sp->base;
  return CM_OK;
}

size_t cm__sliced_pages(const cm__pool *p) { return ((const sliced_pool *)p)->npages; }

cm__slice *cm__sliced_page_head(cm__pool *p, size_t i) {
  sliced_pool *sp = SP(p);
  return i < sp->npages && sp->pages[i]->head ? &sp->pages[i]->head->s : NULL;
}

cm__slice *cm__sliced_next(cm__slice *s) {
  block *b = ((block *)s)->next;
  return b ? &b->s : NULL;
}
