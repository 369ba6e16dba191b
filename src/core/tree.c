/*
 * tree.c - treap implementation for tree.h (ordered by (k1, k2, k3), heap by
 * prio with the largest priority at the root). Rotations keep parent links so
 * a node can be removed and iterated from without a search.
 */
#include "core/tree.h"

#include "base/debug.h"

static int cmp(const cm__tnode *a, uint64_t k1, uint64_t k2, uint64_t k3) {
  if (a->k1 != k1) return a->k1 < k1 ? -1 : 1;
  if (a->k2 != k2) return a->k2 < k2 ? -1 : 1;
  if (a->k3 != k3) return a->k3 < k3 ? -1 : 1;
  return 0;
}

void cm__tree_init(cm__tree *t) {
  t->root = NULL;
  t->count = 0;
  t->seed = 0x9e3779b9u;
}

static uint32_t next_prio(cm__tree *t) {
  uint32_t x = t->seed;
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  t->seed = x;
  return x;
}

static void replace_child(cm__tree *t, cm__tnode *parent, cm__tnode *old, cm__tnode *n) {
  if (!parent) t->root = n;
  else if (parent->l == old) parent->l = n;
  else parent->r = n;
  if (n) n->parent = parent;
}

/* Rotate n up over its parent. */
static void rotate_up(cm__tree *t, cm__tnode *n) {
  CM_ASSERT(n->parent != NULL);
  cm__tnode *p = n->parent, *g = p->parent;
  if (p->l == n) {
    p->l = n->r;
    if (n->r) n->r->parent = p;
    n->r = p;
  } else {
    p->r = n->l;
    if (n->l) n->l->parent = p;
    n->l = p;
  }
  p->parent = n;
  replace_child(t, g, p, n);
}

void cm__tree_insert(cm__tree *t, cm__tnode *n) {
  n->l = n->r = NULL;
  n->prio = next_prio(t);
  cm__tnode *p = NULL, **link = &t->root;
  while (*link) {
    p = *link;
    link = cmp(p, n->k1, n->k2, n->k3) > 0 ? &p->l : &p->r;
  }
  *link = n;
  n->parent = p;
  while (n->parent && n->parent->prio < n->prio) rotate_up(t, n);
  t->count++;
}

void cm__tree_remove(cm__tree *t, cm__tnode *n) {
  CM_ASSERT(t->count > 0);
  while (n->l && n->r) rotate_up(t, (n->l->prio > n->r->prio) ? n->l : n->r);
  cm__tnode *c = n->l ? n->l : n->r;
  replace_child(t, n->parent, n, c);
  n->l = n->r = n->parent = NULL;
  t->count--;
}

cm__tnode *cm__tree_lower_bound(const cm__tree *t, uint64_t k1, uint64_t k2, uint64_t k3) {
  cm__tnode *n = t->root, *best = NULL;
  while (n) {
    if (cmp(n, k1, k2, k3) >= 0) {
      best = n;
      n = n->l;
    } else {
      n = n->r;
    }
  }
  return best;
}

cm__tnode *cm__tree_first(const cm__tree *t) {
  cm__tnode *n = t->root;
  if (!n) return NULL;
  while (n->l) n = n->l;
  return n;
}

cm__tnode *cm__tree_next(const cm__tnode *n) {
  if (n->r) {
    n = n->r;
    while (n->l) n = n->l;
    return (cm__tnode *)n;
  }
  while (n->parent && n->parent->r == n) n = n->parent;
  return n->parent;
}

static size_t check_rec(const cm__tnode *n, const cm__tnode *lo, const cm__tnode *hi,
                        size_t *count) {
  if (!n) return 0;
  size_t bad = 0;
  (*count)++;
  if (lo && cmp(n, lo->k1, lo->k2, lo->k3) < 0) bad++;
  if (hi && cmp(n, hi->k1, hi->k2, hi->k3) > 0) bad++;
  if (n->l && n->l->parent != n) bad++;
  if (n->r && n->r->parent != n) bad++;
  return bad + check_rec(n->l, lo, n, count) + check_rec(n->r, n, hi, count);
}

size_t cm__tree_check(const cm__tree *t) {
  size_t count = 0;
  size_t bad = check_rec(t->root, NULL, NULL, &count);
  if (t->root && t->root->parent) bad++;
  if (count != t->count) bad++;
  return bad;
}
