/*
 * moves.c - the list of moves a relocation plan builds (pool.h's cm__moves):
 * the pools with a reloc_plan entry append to it, relocate.c copies and
 * commits it. A leaf: it calls nothing of the manager or the pools.
 * Exports: cm__moves_push (pool.h).
 */
#include <stdlib.h>

#include "core/pool.h"

int cm__moves_push(cm__moves *mv, cm__slice *src, cm__slice *dst) {
  if (mv->n == mv->cap) {
    size_t nc = mv->cap ? mv->cap * 2 : 64;
    cm__move *nv = realloc(mv->v, nc * sizeof *nv);
    if (!nv) return CM_ENOMEM;
    mv->v = nv;
    mv->cap = nc;
  }
  mv->v[mv->n++] = (cm__move){src, dst};
  return CM_OK;
}
