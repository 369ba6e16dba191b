/*
 * pool_slots.h - shared machinery of the pools that hold one storage
 * allocation per slice (exclusive, direct, persistent): a growable vector of
 * slot pointers, a treap of free slots for best/exact fit, and display/check
 * helpers. Internal to pool_exclusive.c, pool_direct.c, pool_persistent.c.
 */
#ifndef CM_CORE_POOL_SLOTS_H
#define CM_CORE_POOL_SLOTS_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/pool.h"

typedef struct cm__slot {
  cm__slice s;         /* s.span = bytes allocated from the storage */
  cm__tnode node;      /* in the free tree while free */
  cm__tnode all;       /* persistent: in the all-slices tree */
  uint32_t free_count; /* exclusive: survival counter */
} cm__slot;

typedef struct cm__slots {
  cm__slot **v; /* NULL entries are tombstones (direct) */
  size_t n, cap;
  cm__tree free; /* keyed (span, index, 0) */
} cm__slots;

/* The common head of exclusive, direct and persistent pools. */
typedef struct cm__slot_pool {
  cm__pool base;
  cm__slots slots;
} cm__slot_pool;

static inline cm__slots *cm__slots_of(cm__pool *p) { return &((cm__slot_pool *)p)->slots; }

/* Fill the common head of a freshly calloc'ed slot pool; returns &sp->base. */
static inline cm__pool *cm__slot_pool_init(cm__slot_pool *sp, const cm__pool_vt *vt,
                                           const cm__pool_ctx *ctx, uint8_t pos) {
  cm__pool_base_init(&sp->base, vt, ctx, pos);
  cm__tree_init(&sp->slots.free);
  return &sp->base;
}

/* Shared vtable entries of the slot pools (pool_slots.c). */
void cm__slots_on_free(cm__pool *p, cm__slice *s);   /* into the free tree */
void cm__slots_take_free(cm__pool *p, cm__slice *s); /* out of the free tree */
int cm__slots_materialize(cm__pool *p, cm__slice *s, cm_diag_t *diag);
void cm__slots_visit(cm__pool *p, void (*fn)(cm__slice *, void *), void *arg);
/* The free slot of exactly `eff` bytes with the lowest index, removed from
 * the free tree, or NULL. */
cm__slice *cm__slots_take_exact(cm__pool *p, uint64_t eff);
/* Usage line for a display when the pool holds anything. */
size_t cm__slots_display_usage(cm__pool *p, char *buf, size_t cap, size_t len, const char *sep);

static inline int cm__slots_push(cm__slots *v, cm__slot *s) {
  if (v->n == v->cap) {
    size_t nc = v->cap ? v->cap * 2 : 16;
    cm__slot **nv = realloc(v->v, nc * sizeof *nv);
    if (!nv) return CM_ENOMEM;
    v->v = nv;
    v->cap = nc;
  }
  v->v[v->n++] = s;
  return CM_OK;
}

static inline void cm__slots_free_put(cm__slots *v, cm__slot *s) {
  s->node.k1 = s->s.span;
  s->node.k2 = s->s.index;
  s->node.k3 = 0;
  cm__tree_insert(&v->free, &s->node);
}

/* Remove nulls and renumber indices (order preserved). */
static inline void cm__slots_compact(cm__slots *v) {
  size_t w = 0;
  for (size_t i = 0; i < v->n; i++) {
    cm__slot *s = v->v[i];
    if (!s) continue;
    s->s.index = (uint32_t)w;
    s->node.k2 = w;
    s->all.k2 = w;
    v->v[w++] = s;
  }
  v->n = w;
}

/* Release one slot's storage and descriptor (caller removed it from trees). */
static inline void cm__slot_release(cm__pool *p, cm__slot *s) {
  if (s->s.desc) cm__desc_detach(s->s.desc);
  if (s->s.mapped) cm_storage_dealloc(cm__pool_storage(p), s->s.storage_id, s->s.span);
  else p->pages_unmapped--;
  cm__pool_reserved_add(p, -(int64_t)s->s.span);
  cm__pool_pages_add(p, -1);
  free(s);
}

/* Recompute usage over the slots; count mismatches. */
static inline size_t cm__slots_check(cm__pool *p, cm__slots *v) {
  size_t bad = 0, nfree = 0, live = 0;
  cm_usage_t u = {0};
  for (size_t i = 0; i < v->n; i++) {
    cm__slot *s = v->v[i];
    if (!s) continue;
    live++;
    if (s->s.index != i) bad++;
    u.bytes_reserved += s->s.span;
    if (s->s.used) {
      u.number_allocs++;
      u.bytes_in_use += s->s.size;
      u.bytes_padding += s->s.padding;
      if (!s->s.desc || s->s.desc->slice != &s->s) bad++;
    } else {
      nfree++;
      if (s->node.k1 != s->s.span || s->node.k2 != i) bad++;
    }
  }
  if (nfree != v->free.count) bad++;
  if (live != p->pages) bad++;
  bad += cm__tree_check(&v->free);
  if (u.number_allocs != p->usage.number_allocs || u.bytes_in_use != p->usage.bytes_in_use ||
      u.bytes_padding != p->usage.bytes_padding || u.bytes_reserved != p->usage.bytes_reserved)
    bad++;
  return bad;
}

static inline void cm__slots_destroy(cm__pool *p, cm__slots *v) {
  for (size_t i = 0; i < v->n; i++) {
    cm__slot *s = v->v[i];
    if (!s) continue;
    if (s->s.desc) cm__desc_detach(s->s.desc);
    if (s->s.mapped) cm_storage_dealloc(cm__pool_storage(p), s->s.storage_id, s->s.span);
    cm__pool_reserved_add(p, -(int64_t)s->s.span);
    free(s);
  }
  free(v->v);
}

static inline void cm__slots_for_each(cm__slots *v, void (*fn)(cm__slice *, void *), void *arg) {
  for (size_t i = 0; i < v->n; i++)
    if (v->v[i]) fn(&v->v[i]->s, arg);
}

/* Allocate a new slot of `span` bytes from the storage (or lazily). */
static inline int cm__slot_new(cm__pool *p, uint64_t span, bool lazy, cm__slot **out,
                               cm_diag_t *diag) {
  cm__slot *s = calloc(1, sizeof *s);
  if (!s) return cm__diag_set(diag, CM_ENOMEM, "out of host memory");
  if (lazy) {
    s->s.storage_id = cm__pool_lazy_id(p);
    s->s.mapped = 0;
    p->pages_unmapped++;
  } else {
    int rc = cm_storage_alloc(cm__pool_storage(p), span, &s->s.storage_id, diag);
    if (rc) {
      free(s);
      return rc;
    }
    s->s.mapped = 1;
  }
  s->s.span = span;
  s->s.pool = p->position;
  *out = s;
  return CM_OK;
}

#define CM__OUT(buf, cap, len, ...)                                                           \
  do {                                                                                        \
    int n__ = snprintf((len) < (cap) ? (buf) + (len) : NULL, (len) < (cap) ? (cap) - (len) : 0, \
                       __VA_ARGS__);                                                          \
    if (n__ > 0) (len) += (size_t)n__;                                                        \
  } while (0)

#endif
