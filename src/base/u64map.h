/* u64map.h - a small open-addressing hash map from non-zero uint64 keys to
 * pointers (not installed). Used by the pointer layer (pointer -> handle) and
 * by the CUDA storage (storage id -> allocation record).
 *
 * Linear probing over a power-of-two table, load factor <= 1/2, deletion by
 * backward shift (no tombstones), so lookups stay short after churn.
 * Key 0 is reserved as "empty" and is never stored. Not thread-safe: callers
 * serialise access. */
#ifndef CM_BASE_U64MAP_H
#define CM_BASE_U64MAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct cm__u64map_slot {
  uint64_t key; /* 0 = empty */
  void *value;
} cm__u64map_slot;

typedef struct cm__u64map {
  cm__u64map_slot *slots;
  size_t cap;   /* power of two, or 0 before the first insert */
  size_t count; /* occupied slots */
} cm__u64map;

/* Zero-initialised struct is an empty map; this does the same. */
void cm__u64map_init(cm__u64map *m);
/* Free the table (values are not touched). */
void cm__u64map_free(cm__u64map *m);
/* Value for key, or NULL when absent (key 0: NULL). */
void *cm__u64map_get(const cm__u64map *m, uint64_t key);
/* Insert or replace. Returns 0, or CM_ENOMEM / CM_EINVAL (key 0, NULL value);
 * the map is unchanged on error. */
int cm__u64map_put(cm__u64map *m, uint64_t key, void *value);
/* Remove key; returns its value, or NULL when absent. */
void *cm__u64map_remove(cm__u64map *m, uint64_t key);
/* Visit every entry (the map must not change during the walk). Stops early
 * when fn returns non-zero, and returns that value. */
int cm__u64map_each(const cm__u64map *m, int (*fn)(void *arg, uint64_t key, void *value),
                    void *arg);

#endif
