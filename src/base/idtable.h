/* idtable.h - id -> entry table of the storages (one for the tree): ids are
 * minted sequentially from 1 and looked up by direct index (O(1)). */
#ifndef CM_BASE_IDTABLE_H
#define CM_BASE_IDTABLE_H

#include <stdint.h>
#include <stdlib.h>

typedef struct cm__id_entry {
  uint64_t addr; /* first byte (device address or host pointer value) */
  uint64_t size; /* bytes */
  void *mem;     /* host storage: the block to free; sim: NULL */
  void *aux;     /* host storage, VM ranges: their mappings (a cm__vmtrack) */
  uint8_t live;  /* 1 allocation, 2 VM range, 0 free */
} cm__id_entry;

typedef struct cm__id_table {
  cm__id_entry *v;
  uint64_t len, cap; /* v[0] unused */
} cm__id_table;

/* The growth rule of every id table: ids from 1 (slot 0 unused), the array
 * doubled from 1024 slots when full. v is an array of *cap slots of `elem`
 * bytes, *len of them used. Returns the array to keep (v itself or its
 * reallocation) with the new id in *id and *len counting it, or NULL on
 * host OOM with v, *len and *cap unchanged. The new slot is not
 * initialised. Typed tables (this file's, the simulated device's) use it. */
static inline void *cm__id_reserve(void *v, uint64_t *len, uint64_t *cap, size_t elem,
                                   uint64_t *id) {
  uint64_t n = *len ? *len : 1;
  if (n >= *cap) {
    uint64_t nc = *cap ? *cap * 2 : 1024;
    void *nv = realloc(v, nc * elem);
    if (!nv) return NULL;
    v = nv;
    *cap = nc;
  }
  *id = n;
  *len = n + 1;
  return v;
}

/* Append a new entry; returns its id, or 0 on host OOM. */
static inline uint64_t cm__id_new(cm__id_table *t) {
  uint64_t id;
  cm__id_entry *nv = cm__id_reserve(t->v, &t->len, &t->cap, sizeof *t->v, &id);
  if (!nv) return 0;
  t->v = nv;
  t->v[id] = (cm__id_entry){0, 0, NULL, NULL, 0};
  return id;
}
static inline cm__id_entry *cm__id_get(cm__id_table *t, uint64_t id) {
  return (id > 0 && id < t->len && t->v[id].live) ? &t->v[id] : NULL;
}
#endif
