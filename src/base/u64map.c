/*
 * u64map.c - open-addressing hash map from uint64 keys to pointers.
 *
 * Algorithm: linear probing in a power-of-two table indexed by a 64-bit mix
 * (the splitmix64 finaliser) of the key. The table doubles when it would pass
 * half full. Removal shifts later members of the probe run back into the hole
 * (each moves only if its home slot does not lie cyclically between the hole
 * and its current slot), so no tombstones exist.
 * Invariants: count < cap/2 + 1 after every insert; every stored key is
 * reachable from its home slot without crossing an empty slot; key 0 and NULL
 * values are never stored.
 * Exports (internal): cm__u64map_init/free/get/put/remove/each.
 */
#include "base/u64map.h"

#include <stdlib.h>
#include <string.h>

#include "base/debug.h"
#include "cubemem/common.h"

static uint64_t mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

void cm__u64map_init(cm__u64map *m) { memset(m, 0, sizeof *m); }

void cm__u64map_free(cm__u64map *m) {
  free(m->slots);
  memset(m, 0, sizeof *m);
}

static size_t find_slot(const cm__u64map_slot *slots, size_t cap, uint64_t key) {
  size_t mask = cap - 1, i = (size_t)mix(key) & mask;
  while (slots[i].key != 0 && slots[i].key != key) i = (i + 1) & mask;
  return i;
}

void *cm__u64map_get(const cm__u64map *m, uint64_t key) {
  if (key == 0 || m->cap == 0) return NULL;
  size_t i = find_slot(m->slots, m->cap, key);
  return m->slots[i].key == key ? m->slots[i].value : NULL;
}

static int grow(cm__u64map *m) {
  size_t ncap = m->cap ? m->cap * 2 : 16;
  if (ncap < m->cap) return CM_ENOMEM;
  cm__u64map_slot *ns = calloc(ncap, sizeof *ns);
  if (!ns) return CM_ENOMEM;
  for (size_t i = 0; i < m->cap; i++) {
    if (m->slots[i].key == 0) continue;
    ns[find_slot(ns, ncap, m->slots[i].key)] = m->slots[i];
  }
  free(m->slots);
  m->slots = ns;
  m->cap = ncap;
  return CM_OK;
}

int cm__u64map_put(cm__u64map *m, uint64_t key, void *value) {
  if (key == 0 || !value) return CM_EINVAL;
  if (m->cap) {
    size_t i = find_slot(m->slots, m->cap, key);
    if (m->slots[i].key == key) {
      m->slots[i].value = value;
      return CM_OK;
    }
  }
  if ((m->count + 1) * 2 > m->cap) {
    int rc = grow(m);
    if (rc != CM_OK) return rc;
  }
  size_t i = find_slot(m->slots, m->cap, key);
  m->slots[i].key = key;
  m->slots[i].value = value;
  m->count++;
  CM_ASSERT(m->count * 2 <= m->cap); /* at most half full: probe runs end */
  return CM_OK;
}

void *cm__u64map_remove(cm__u64map *m, uint64_t key) {
  if (key == 0 || m->cap == 0) return NULL;
  size_t mask = m->cap - 1;
  size_t hole = find_slot(m->slots, m->cap, key);
  if (m->slots[hole].key != key) return NULL;
  void *value = m->slots[hole].value;
  m->slots[hole].key = 0;
  m->slots[hole].value = NULL;
  m->count--;
  /* Backward shift: pull later run members into the hole when allowed. */
  size_t j = hole;
  for (;;) {
    j = (j + 1) & mask;
    if (m->slots[j].key == 0) break;
    size_t home = (size_t)mix(m->slots[j].key) & mask;
    /* Leave slot j alone when its home lies cyclically in (hole, j]. */
    bool stays = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
    if (stays) continue;
    m->slots[hole] = m->slots[j];
    m->slots[j].key = 0;
    m->slots[j].value = NULL;
    hole = j;
  }
  return value;
}

int cm__u64map_each(const cm__u64map *m, int (*fn)(void *arg, uint64_t key, void *value),
                    void *arg) {
  for (size_t i = 0; i < m->cap; i++) {
    if (m->slots[i].key == 0) continue;
    int rc = fn(arg, m->slots[i].key, m->slots[i].value);
    if (rc) return rc;
  }
  return 0;
}
