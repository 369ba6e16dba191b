/*
 * tree.h - an intrusive ordered tree (treap) keyed by (k1, k2, k3).
 *
 * Used for best-fit searches: the free slices of a sliced/arena pool keyed by
 * (size, page, offset), free exclusive pages by (alloc_size, page), free
 * direct/persistent slots by (effective size, index). Insert, remove and
 * lower_bound are O(log n) expected. Priorities come from a per-tree xorshift
 * generator, so the shape is deterministic and results depend only on keys.
 * Keys must not change while a node is in the tree, except k2 renumbering that
 * preserves relative order (page compaction).
 */
#ifndef CM_CORE_TREE_H
#define CM_CORE_TREE_H

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>

typedef struct cm__tnode {
  struct cm__tnode *l, *r, *parent;
  uint64_t k1, k2, k3;
  uint32_t prio;
} cm__tnode;

typedef struct cm__tree {
  cm__tnode *root;
  size_t count;
  uint32_t seed;
} cm__tree;

void cm__tree_init(cm__tree *t);
void cm__tree_insert(cm__tree *t, cm__tnode *n); /* keys set by the caller */
void cm__tree_remove(cm__tree *t, cm__tnode *n);
/* Smallest node with key >= (k1, k2, k3), or NULL. */
cm__tnode *cm__tree_lower_bound(const cm__tree *t, uint64_t k1, uint64_t k2, uint64_t k3);
cm__tnode *cm__tree_first(const cm__tree *t);
cm__tnode *cm__tree_next(const cm__tnode *n);
/* Check the ordering and parent links; returns the number of violations. */
size_t cm__tree_check(const cm__tree *t);

#define CM__CONTAINER(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

#endif
