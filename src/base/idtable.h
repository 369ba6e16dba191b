/* idtable.h - id -> entry table shared by the built-in storages: ids are
 * minted sequentially from 1 and looked up by direct index (O(1)). */
#ifndef CM_STORAGE_IDTABLE_H
#define CM_STORAGE_IDTABLE_H

#include <stdlib.h>
#include "cubemem/storage.h"

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

/* Append a new entry; returns its id, or 0 on host OOM. */
static inline uint64_t cm__id_new(cm__id_table *t) {
  if (t->len == 0) t->len = 1;
  if (t->len >= t->cap) {
    uint64_t nc = t->cap ? t->cap * 2 : 1024;
    cm__id_entry *nv = realloc(t->v, nc * sizeof *nv);
    if (!nv) return 0;
    t->v = nv;
    t->cap = nc;
  }
  uint64_t id = t->len++;
  t->v[id] = (cm__id_entry){0, 0, NULL, NULL, 0};
  return id;
}
static inline cm__id_entry *cm__id_get(cm__id_table *t, uint64_t id) {
  return (id > 0 && id < t->len && t->v[id].live) ? &t->v[id] : NULL;
}
#endif
