/*
 * vmtrack.c - per-granule mappings of a reservation and the contract checks
 * (vmtrack.h). Exports: cm__vmtrack_*.
 */
#include "storage/vmtrack.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/bitmap.h"
#include "cubemem/common.h"

static int bit(const uint64_t *bm, uint64_t i) { return cm__bit(bm, i); }

int cm__vmtrack_check_reserve(uint64_t size, unsigned gshift, char *why, size_t cap) {
  uint64_t G = 1ull << gshift;
  if (size != 0 && size % G == 0) return CM_OK;
  snprintf(why, cap,
           "cannot reserve %" PRIu64 " bytes: a reservation is a non-zero multiple of the "
           "granularity (%" PRIu64 " bytes)",
           size, G);
  return CM_EINVAL;
}

int cm__vmtrack_check_release(const cm__vmtrack *t, uint64_t id, char *why, size_t cap) {
  if (!t->nmaps) return CM_OK;
  snprintf(why, cap,
           "cannot free the address range StorageId(%" PRIu64 "): %" PRIu64
           " mappings remain in it",
           id, t->nmaps);
  return CM_EINVAL;
}

void cm__vmtrack_init(cm__vmtrack *t, uint64_t size, unsigned gshift) {
  memset(t, 0, sizeof *t);
  t->size = size;
  t->gshift = gshift;
}

void cm__vmtrack_free(cm__vmtrack *t) {
  free(t->mapped);
  free(t->start);
  t->mapped = NULL;
  t->start = NULL;
  t->ngran = 0;
  t->nmaps = 0;
}

/* Grow the arrays to cover granules below n. */
static int grow(cm__vmtrack *t, uint64_t n) {
  if (n <= t->ngran) return CM_OK;
  uint64_t nn = t->ngran ? t->ngran : 64;
  while (nn < n) nn *= 2;
  uint64_t *nm = realloc(t->mapped, ((nn + 63) / 64) * sizeof *nm);
  if (!nm) return CM_ENOMEM;
  t->mapped = nm;
  uint32_t *ns = realloc(t->start, nn * sizeof *ns);
  if (!ns) return CM_ENOMEM;
  t->start = ns;
  memset(nm + (t->ngran + 63) / 64, 0, ((nn + 63) / 64 - (t->ngran + 63) / 64) * sizeof *nm);
  memset(ns + t->ngran, 0, (nn - t->ngran) * sizeof *ns);
  t->ngran = nn;
  return CM_OK;
}

int cm__vmtrack_check_map(const cm__vmtrack *t, uint64_t off, uint64_t size, uint64_t piece,
                          char *why, size_t cap) {
  uint64_t G = 1ull << t->gshift;
  if (piece == 0 || piece % G || piece >> t->gshift > UINT32_MAX) {
    snprintf(why, cap,
             "a physical object of %" PRIu64 " bytes is not a multiple of the granularity (%" PRIu64
             " bytes)",
             piece, G);
    return CM_EINVAL;
  }
  if (size == 0 || size % piece || off % G) {
    snprintf(why, cap,
             "cannot map [%" PRIu64 ", +%" PRIu64 ") in objects of %" PRIu64
             " bytes: the offset must be granular and the size a multiple of the object size",
             off, size, piece);
    return CM_EINVAL;
  }
  if (off > t->size || size > t->size - off) {
    snprintf(why, cap,
             "cannot map [%" PRIu64 ", +%" PRIu64 ") outside a reservation of %" PRIu64 " bytes",
             off, size, t->size);
    return CM_EINVAL;
  }
  uint64_t g0 = off >> t->gshift, n = size >> t->gshift;
  for (uint64_t g = g0; g < g0 + n && g < t->ngran; g++)
    if (bit(t->mapped, g)) {
      snprintf(why, cap,
               "cannot map [%" PRIu64 ", +%" PRIu64 "): granule at offset %" PRIu64
               " is mapped already",
               off, size, g << t->gshift);
      return CM_EINVAL;
    }
  return CM_OK;
}

int cm__vmtrack_commit_map(cm__vmtrack *t, uint64_t off, uint64_t size, uint64_t piece,
                           uint64_t *objects) {
  uint64_t g0 = off >> t->gshift, n = size >> t->gshift;
  if (grow(t, g0 + n) != CM_OK) return CM_ENOMEM;
  uint32_t pg = (uint32_t)(piece >> t->gshift);
  for (uint64_t g = g0; g < g0 + n; g++) {
    cm__bit_set(t->mapped, g);
    t->start[g] = (g - g0) % pg == 0 ? pg : 0;
  }
  t->nmaps += n / pg;
  if (objects) *objects = n / pg;
  return CM_OK;
}

/* Is [off, off+size) tiled exactly by mappings of `piece` bytes? `verb`
 * and `rule` word the reason. */
static int check_tiled(const cm__vmtrack *t, uint64_t off, uint64_t size, uint64_t piece,
                       const char *verb, const char *rule, char *why, size_t cap) {
  uint64_t G = 1ull << t->gshift;
  if (piece == 0 || piece % G || size == 0 || size % piece || off % G || off > t->size ||
      size > t->size - off) {
    snprintf(why, cap, "cannot %s [%" PRIu64 ", +%" PRIu64 ") in objects of %" PRIu64 " bytes",
             verb, off, size, piece);
    return CM_EINVAL;
  }
  uint64_t g0 = off >> t->gshift, n = size >> t->gshift, pg = piece >> t->gshift;
  for (uint64_t g = g0; g < g0 + n; g += pg)
    if (g >= t->ngran || t->start[g] != pg || !bit(t->mapped, g)) {
      snprintf(why, cap,
               "cannot %s [%" PRIu64 ", +%" PRIu64 "): offset %" PRIu64
               " is not the start of a mapping of %" PRIu64 " bytes (%s)",
               verb, off, size, g << t->gshift, piece, rule);
      return CM_EINVAL;
    }
  return CM_OK;
}

int cm__vmtrack_check_unmap(const cm__vmtrack *t, uint64_t off, uint64_t size, uint64_t piece,
                            char *why, size_t cap) {
  return check_tiled(t, off, size, piece, "unmap", "a mapping is unmapped whole, never in part",
                     why, cap);
}

int cm__vmtrack_check_alias_source(const cm__vmtrack *t, uint64_t off, uint64_t size,
                                   uint64_t piece, char *why, size_t cap) {
  return check_tiled(t, off, size, piece, "alias",
                     "only whole mappings are mapped a second time", why, cap);
}

uint64_t cm__vmtrack_commit_unmap(cm__vmtrack *t, uint64_t off, uint64_t size, uint64_t piece) {
  uint64_t g0 = off >> t->gshift, n = size >> t->gshift, pg = piece >> t->gshift;
  for (uint64_t g = g0; g < g0 + n; g++) {
    cm__bit_clr(t->mapped, g);
    t->start[g] = 0;
  }
  t->nmaps -= n / pg;
  return n / pg;
}

int cm__vmtrack_check_access(const cm__vmtrack *t, uint64_t off, uint64_t size, char *why,
                             size_t cap) {
  if (size == 0 || off > t->size || size > t->size - off) {
    snprintf(why, cap,
             "[%" PRIu64 ", +%" PRIu64 ") is empty or outside a reservation of %" PRIu64 " bytes",
             off, size, t->size);
    return CM_EINVAL;
  }
  uint64_t g0 = off >> t->gshift, g1 = (off + size - 1) >> t->gshift;
  for (uint64_t g = g0; g <= g1; g++)
    if (g >= t->ngran || !bit(t->mapped, g)) {
      snprintf(why, cap,
               "[%" PRIu64 ", +%" PRIu64 "): the granule at offset %" PRIu64 " is not mapped",
               off, size, g << t->gshift);
      return CM_EINVAL;
    }
  return CM_OK;
}
