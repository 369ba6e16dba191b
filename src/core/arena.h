/*
 * arena.h - the arena pool's internals (pool_arena.c), shared by its parts:
 * pool_arena.c (regions, placement, the pool interface), arena_map.c
 * (physical objects, mapping, trimming, the out-of-memory fallback),
 * arena_stitch.c (stitched slices, the last resort when the device refuses
 * memory) and arena_check.c (the invariant checker and the display). pool_arena.c's
 * header comment describes the design.
 */
#ifndef CM_CORE_ARENA_H
#define CM_CORE_ARENA_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/bitmap.h"
#include "base/debug.h"
#include "core/pool.h"

/* Bins (TLSF-style): each power-of-two group of sizes is split into SLN
 * linear sub-bins (SLB bits); NFL groups cover every 64-bit size. */
#define SLB 3u
#define SLN (1u << SLB)
#define NFL (64u - SLB + 1u)
#define NBINS (NFL * SLN)
#define SCAN_LIMIT 8       /* entries of the request's own bin examined */
#define SCAN_NEXT 1        /* entries of the next non-empty bin examined */
#define ALT_LIMIT 64       /* blocks examined for an already mapped fit */
#define KEEP_MIN 1         /* free mapped granules kept: KEEP_MIN + mapped >> KEEP_SHIFT */
#define KEEP_SHIFT 8       /* ... so the kept part is 1/256 of what is mapped */
#define REGRET_WINDOW 4096 /* a trim undone within this many reservations raises the budget */
#define REGRET_DECAY 3      /* a map without regret shrinks it by 1/8 */
#define REGRET_GAIN 1       /* it grows by half the re-mapped granules */
#define REGRET_CAP 4        /* up to mapped >> REGRET_CAP granules */
#define EXT_SHIFT 9        /* growth maps for requests under a granule extend by up to
                              mapped >> EXT_SHIFT granules */
#define SPARE_MAX 4096     /* recycled block nodes kept */
/* Largest VM region, in granules (4 TiB at 2 MiB): bounds the per-granule
 * metadata, so an absurd request fails before any host allocation. */
#define MAX_REGION_GRANULES (1ull << 21)
#define DEFAULT_PERIOD 5000 /* reservations between periodic trims */
/* Default VM region: twice the device memory, at least 2^17 granules (256 GiB
 * at 2 MiB), at most 2^19 granules (1 TiB at 2 MiB): metadata is 16 bytes a
 * granule. Larger requests open larger regions, up to MAX_REGION_GRANULES. */
#define REGION_DEFAULT_GRANULES (1ull << 17)
#define REGION_DEFAULT_MAX_GRANULES (1ull << 19)
/* Largest physical object without max_object_size, in bytes (rounded up to
 * whole granules): one granule, so any free granule can be given back. */
#define OBJECT_MAX_DEFAULT 1
/* The default's objects, while the device stays more than half free, outside
 * the blocks of whole granules (one object each): up to total >> 14 bytes,
 * whole granules (2 granules on an 80 GiB device, 1 below 32 GiB), so one
 * object partly in use keeps at most 1/16384 of the device from a trim. */
#define OBJECT_ROOM_SHIFT 14
/* The default holds what it maps while the device stays more than half free
 * after a map (no trim before a map, no periodic trim), and grows by steps:
 * held >> HOLD_STEP_SHIFT bytes, at least HOLD_STEP_MIN, at most the free
 * memory above half the device >> HOLD_STEP_MAX_SHIFT (so the steps shrink
 * to one granule as the device fills). One step is one physical object
 * (one cuMemCreate, one cuMemMap, one cuMemSetAccess). Near the half-free
 * line a block's granules that it shares with its neighbours are small
 * objects, so a trim under pressure can give them back; while the device
 * stays more than 1 - 2^-ROOMY_SHIFT free the whole growth is one object. */
#define HOLD_STEP_SHIFT 4
#define HOLD_STEP_MIN (64ull << 20)
#define HOLD_STEP_MAX_SHIFT 7
#define ROOMY_SHIFT 4
/* ... and a block's granules in objects of up to 1/2^PIECES_SHIFT of them
 * (at most about 16 objects a block, however large). A block more than
 * 1/2^PIECES_ROOM_SHIFT of the free memory above half the device (after the
 * map) takes objects of the configured size instead, unless the owner
 * relocates (its moves empty pieces whole): such a block is a large part of
 * what the device has left; once it is freed its range is carved again for
 * other blocks, and under pressure a neighbour that touches one granule of a
 * larger object keeps the whole object from a trim. */
#define PIECES_SHIFT 4
#define PIECES_ROOM_SHIFT 4
/* Under pressure a span under PIN_SPAN_MAX granules (not a whole number of
 * them) goes to the end of its hole where it touches fewer granules that no
 * block in use touches yet (place_end). */
#define PIN_SPAN_MAX 8
#define SEG_MIN (2ull << 20)
#define ROOM_REFRESH 64      /* has_room decisions between two queries of the device's memory */
#define ROOM_MARGIN_SHIFT 3  /* ... and one whenever the answer is within total/8 of half free */

#define OUT(buf, cap, len, ...)                                                               \
  do {                                                                                        \
    int n__ = snprintf((len) < (cap) ? (buf) + (len) : NULL, (len) < (cap) ? (cap) - (len) : 0, \
                       __VA_ARGS__);                                                          \
    if (n__ > 0) (len) += (size_t)n__;                                                        \
  } while (0)

typedef struct ablk {
  cm__slice s;                /* s.offset / s.span: the block's range in its region */
  struct ablk *prev, *next;   /* address neighbours in the region */
  struct ablk *fprev, *fnext; /* bin list while free; spare list link */
  struct region *rg;          /* its region */
  uint32_t region;            /* index of rg in arena.regs */
  uint32_t bin;
  uint8_t free;
} ablk;

typedef struct region {
  uint64_t id, size;
  ablk *first;
  bool vm;
  bool lazy;           /* segment: counted, but not allocated in the storage yet (dry run) */
  uint64_t idle_since; /* segment: alloc_nr when it became all free, 0 = in use */
  /* VM only */
  uint64_t ngran, nwords, mapped_gran, top; /* top: 1 + highest granule ever mapped */
  uint64_t *mapped, *fm;
  uint64_t *virt; /* counted as mapped (in `mapped`) but not mapped in the storage;
                   * allocated by the first dry run that maps in the region */
  uint32_t *cnt;
  uint32_t *trimmed; /* per granule: reservation count (low bits) when trimmed, 0 = never */
  uint64_t cnt_top;  /* 1 + the highest granule whose count was ever raised (the checker's bound) */
  uint32_t *ostart;  /* per mapped granule: the first granule of its object */
  uint32_t *olen;    /* per object start: its length in granules (0 elsewhere) */
  uint32_t *gcnt;    /* per granule: guards held on the blocks touching it (arena_guard.c; NULL: none yet) */
} region;

typedef struct arena {
  cm__pool base;
  cm_storage_t *st;
  /* geometry: VM regions of granules of `gran` bytes (2^gshift), else segments */
  bool vm;
  unsigned gshift;
  uint64_t gran;
  /* object policy, fixed at creation (map_for in arena_map.c decides each map) */
  uint64_t ocfg;      /* the configured largest object, in granules */
  bool owned;         /* default object size: a block's whole granules are one object
                         while the device has room */
  uint64_t keep;      /* holding: free mapped granules kept (the release threshold), UINT64_MAX: all */
  bool ends;          /* place spans sharing granules at the cheaper end (place_off): set by
                         the last map (map_for) that did not hold, unless the owner
                         relocates (its packing keeps data compact) */
  uint64_t room_omax; /* the default's other objects while the device has room, in granules:
                         the device's memory >> OBJECT_ROOM_SHIFT (0 when unknown) */
  /* the device's room, as has_room sees it: its free and total memory at the
   * last query, the storage's bytes_held then, decisions left until the next,
   * and the last answer (free memory after the map above half the device) */
  uint64_t room_free, room_total, room_held;
  uint32_t room_uses;
  uint64_t room_above;
  /* regions */
  region **regs;
  uint32_t nregs, capregs;
  /* placement: the free blocks' bins (two-level bitmaps) and spare nodes */
  ablk *heads[NBINS];
  uint64_t flmap;
  uint32_t slmap[NFL];
  ablk *spare;
  size_t nspare;
  /* accounting */
  uint64_t held;        /* bytes held: mapped granules + segments */
  uint64_t free_mapped; /* VM: free mapped granules, all regions */
  /* Memory counted but not backed by the storage (dry runs): VM: virtual
   * granules, all regions; segments: segments not allocated yet. */
  uint64_t unbacked;
  uint64_t lazy_bytes;  /* segments: bytes of the lazy segments */
  /* trims: the periodic cleanup and the hysteresis budget's feedback */
  uint64_t low_free;    /* low-water of free_mapped since the last periodic trim */
  uint64_t last_trim;   /* alloc_nr of the last periodic cleanup */
  uint64_t period;      /* reservations between periodic trims */
  uint32_t ops;         /* reservations seen (wraps), stamps trims */
  uint64_t regret;      /* granules re-mapped soon after a trim: raises the budget */
  /* guards (relocation enabled; arena_guard.c): the guards held, and the
   * entry tables: the arena's own, and the one used while a guard is held */
  uint64_t guarded;
  /* stitched blocks in use (arena_stitch.c): their list and count */
  struct stitch *stitches;
  uint64_t nstitches, stitches_made;
  const cm__pool_vt *plain_vt;
  cm__pool_vt gvt;
} arena;

/* The objects one map makes (map_for's plan, executed by map_range): runs of
 * unmapped granules cut every `omax` granules, except granules [own_lo,
 * own_hi] (empty when own_lo > own_hi), which are one object of their own. */
typedef struct objects {
  uint64_t omax, own_lo, own_hi;
} objects;

static inline arena *AR(cm__pool *p) { return (arena *)p; }
static inline ablk *BLK(cm__slice *s) { return CM__CONTAINER(s, ablk, s); }
/* Is a dry run open (spec §6; the context's dry-run depth)? */
static inline bool dry_run(const arena *a) { return *a->base.ctx.dry_runs > 0; }

/* ---- bins -------------------------------------------------------------------- */

static inline uint32_t bin_of(uint64_t size) {
  if (size < SLN) return (uint32_t)size;
  unsigned fl = 63u - (unsigned)__builtin_clzll(size);
  uint32_t sl = (uint32_t)(size >> (fl - SLB)) - SLN;
  return (fl - SLB + 1u) * SLN + sl;
}

/* Bins. CM_ASSERT (debug and sanitizer builds; nothing in release builds)
 * the invariants R2-R3 of arena_check.c where they change. */
static inline void bin_insert_at(arena *a, ablk *b, uint32_t i) {
  CM_ASSERT(i < NBINS && i == bin_of(b->s.span)); /* R3: the bin of its span */
  CM_ASSERT(!b->s.used);                           /* R3: only free blocks */
  b->bin = i;
  b->free = 1;
  b->fprev = NULL;
  b->fnext = a->heads[i];
  if (b->fnext) b->fnext->fprev = b;
  a->heads[i] = b;
  a->slmap[i / SLN] |= 1u << (i % SLN);
  a->flmap |= 1ull << (i / SLN);
}

static inline void bin_insert(arena *a, ablk *b) { bin_insert_at(a, b, bin_of(b->s.span)); }

static inline void bin_remove(arena *a, ablk *b) {
  uint32_t i = b->bin;
  CM_ASSERT(b->free && i < NBINS && a->heads[i] != NULL); /* R3: it is in bin i */
  CM_ASSERT(b->fprev ? b->fprev->fnext == b : a->heads[i] == b);
  if (b->fprev) b->fprev->fnext = b->fnext;
  else a->heads[i] = b->fnext;
  if (b->fnext) b->fnext->fprev = b->fprev;
  if (!a->heads[i]) {
    a->slmap[i / SLN] &= ~(1u << (i % SLN));
    if (!a->slmap[i / SLN]) a->flmap &= ~(1ull << (i / SLN));
  }
  b->free = 0;
}

/* A free block's span changed: move it if its bin did. */
static inline void rebin(arena *a, ablk *b) {
  uint32_t i = bin_of(b->s.span);
  if (i == b->bin) return;
  bin_remove(a, b);
  bin_insert_at(a, b, i);
}

/* Better of two candidate blocks: smaller span, then lower region/offset. */
static inline bool better(const ablk *x, const ablk *best) {
  if (!best) return true;
  if (x->s.span != best->s.span) return x->s.span < best->s.span;
  if (x->region != best->region) return x->region < best->region;
  return x->s.offset < best->s.offset;
}

/* The first non-empty bin above bin i, or NBINS: the one bin search, shared
 * by the best fit and the search for an already mapped fit. */
static inline uint32_t next_bin(const arena *a, uint32_t i) {
  uint32_t g = i / SLN, sl = i % SLN;
  uint32_t m = sl + 1 < SLN ? a->slmap[g] & (~0u << (sl + 1)) : 0;
  if (!m) {
    uint64_t fm = g + 1 < 64 ? a->flmap & (~0ull << (g + 1)) : 0;
    if (!fm) return NBINS;
    g = (uint32_t)__builtin_ctzll(fm);
    m = a->slmap[g];
  }
  return g * SLN + (uint32_t)__builtin_ctz(m);
}

/* Best fit for span s: scan the own bin, then the next non-empty bin. */
static inline __attribute__((always_inline)) ablk *find_fit(arena *a, uint64_t s) {
  uint32_t i = bin_of(s);
  ablk *best = NULL;
  int n = 0;
  for (ablk *b = a->heads[i]; b && n < SCAN_LIMIT; b = b->fnext, n++) {
    if (b->s.span == s) return b;
    if (b->s.span > s && better(b, best)) best = b;
  }
  if (best) return best;
  uint32_t j = next_bin(a, i);
  if (j == NBINS) return NULL;
  n = 0;
  for (ablk *b = a->heads[j]; b && n < SCAN_NEXT; b = b->fnext, n++)
    if (better(b, best)) best = b;
  return best;
}

/* What placing a block with an end in granule g of r costs, for a span that
 * shares its end granules with neighbours: 0 when a used block touches g
 * already, 1 when g is mapped and free (a trim could give it back), 3 when g
 * is not mapped (a map). */
static inline unsigned end_cost(const region *r, uint64_t g) {
  return r->cnt[g] ? 0u : cm__bit(r->mapped, g) ? 1u : 3u;
}

/* The cost of the end granules of span s placed at offset o of r. */
static inline unsigned ends_cost(const arena *a, const region *r, uint64_t o, uint64_t s) {
  uint64_t g0 = o >> a->gshift, g1 = (o + s - 1) >> a->gshift;
  return end_cost(r, g0) + (g1 != g0 ? end_cost(r, g1) : 0u);
}

/* The granules span s placed at offset o of r would touch that no block in
 * use touches yet: the granules it newly keeps from a trim. Only the end
 * granules of a free block can be touched by a neighbour in use. */
static inline uint64_t new_pins(const arena *a, const region *r, uint64_t o, uint64_t s) {
  uint64_t g0 = o >> a->gshift, g1 = (o + s - 1) >> a->gshift;
  return g1 - g0 + 1 - (r->cnt[g0] ? 1u : 0u) - (g1 != g0 && r->cnt[g1] ? 1u : 0u);
}

/* Where span s goes in free block b. A span that is a whole number of
 * granules in a VM region starts at the first granule boundary in b when it
 * still fits after it, so such a block owns whole granules and freeing it
 * frees them for any placement or for a trim. Any other span in a VM region
 * shares its end granules with its neighbours: it goes to the end of b
 * (the low end, or the high end) whose granules cost less by ends_cost (the
 * low end on a tie), so it fills granules that blocks in use keep mapped
 * anyway before it pins a free mapped granule, and that before one it must
 * map. Under pressure every granule a block in use touches is memory the
 * device cannot get back; filling those first is what keeps the smallest
 * device small. Otherwise the low end: when s fills b, in the region's last
 * free block (its high end is the region's end, not mapped short of a full
 * region), while the pool holds what it maps (a->ends false: nothing goes
 * back then, so blocks pack from the low end as the unconstrained peak
 * wants), and when the owner relocates (its packing toward the low end keeps
 * data compact, and measured better without the end choice).
 *
 * `tie` (place_off; the best fit's placement), the default object size
 * (a->owned: a->ends then means pressure): a span under two granules
 * whose two ends cost 1 each way (one end granule touched by a block in use,
 * the other mapped and free) goes to the end of b whose partial granule has
 * more free room: the room between b's start and the end of its granule
 * (low), or between the start of its last granule and b's end (high). The
 * span then fills more of the memory that blocks in use pin anyway and
 * leaves the smaller sliver at the other end of the hole, where a small
 * block fits it later or nothing is lost. Measured on the shared traces
 * under pressure: gpt-train 5 -> 3 granules over the floor, pangu 36 -> 33,
 * no fit worse; the same choice for larger spans cost small-compiled (its
 * 4.5-granule blocks) and ctx128-training a granule each, and the same
 * rule in the search for an already mapped fit cost pangu five granules
 * (find_mapped_fit passes false). With a configured object size the end
 * choice is on at any device size (nothing is held), and the rule there
 * measured worse: gpt-train's fit with object=8MiB 1.0132 -> 1.0167.
 *
 * Before both, with `tie` and the default object size: a span under
 * PIN_SPAN_MAX granules goes to the end of b where it touches fewer
 * granules that no block in use touches yet (new_pins), ahead of the end
 * costs (the low end is taken at once when both its end granules are
 * touched already, place_off_at): a granule a placement newly touches is
 * memory no trim can give back while the block lives, and the end whose
 * partial granule has room for more of the span's odd part can save a whole
 * one (a 2.5-granule span takes four granules after a nearly full one,
 * three before a half-empty one). Equal counts fall through to the cost and
 * room rules. Measured on the shared traces under pressure: train-then-eval
 * 3 -> 2 granules over the floor (its 2- to 8-granule blocks), no fit
 * worse, with any bound from 5 to 16 granules; from 20 granules up (and for
 * all spans) it cost ctx128-training a granule (its 19-granule blocks), and
 * in the search for an already mapped fit it changed nothing. */
static __attribute__((noinline, unused)) uint64_t place_end(const arena *a, const ablk *b, uint64_t s,
                                                     unsigned lo, bool tie) {
  uint64_t o = b->s.offset, h = o + b->s.span - s, m = a->gran - 1;
  bool rules = tie && a->owned; /* the two rules below: best fit, default objects */
  if (rules && s < PIN_SPAN_MAX * a->gran) {
    uint64_t pl = new_pins(a, b->rg, o, s), ph = new_pins(a, b->rg, h, s);
    if (pl != ph) return ph < pl ? h : o;
  }
  unsigned hc = ends_cost(a, b->rg, h, s);
  if (!rules || hc != lo || lo != 1 || s >= 2 * a->gran) return hc < lo ? h : o;
  /* a tie at 1 for a span under two granules: the end of b whose granule
   * has more room below b's end (high) or above its start (low) */
  uint64_t room_lo = a->gran - (o & m), e = (o + b->s.span) & m;
  return (e ? e : a->gran) > room_lo ? h : o;
}

static inline __attribute__((always_inline)) uint64_t place_off_at(const arena *a, const ablk *b,
                                                                   uint64_t s, bool tie) {
  uint64_t o = b->s.offset;
  if (__builtin_expect(!b->rg->vm || b->s.span == s, 0)) return o;
  if (__builtin_expect((s & (a->gran - 1)) != 0, 1)) {
    unsigned lo = ends_cost(a, b->rg, o, s);
    if (__builtin_expect(lo == 0 || !a->ends || !b->next, 1)) return o;
    return place_end(a, b, s, lo, tie); /* under pressure: the end choice (out of line) */
  }
  uint64_t al = (o + a->gran - 1) & ~(a->gran - 1);
  return al - o <= b->s.span - s ? al : o;
}

/* Where span s goes in free block b, the best fit (place_off_at with the tie rule). */
static inline uint64_t place_off(const arena *a, const ablk *b, uint64_t s) {
  return place_off_at(a, b, s, true);
}

/* ---- bitmaps --------------------------------------------------------------------- */

/* Mask of bits [lo, hi] inside word w (bit indices absolute). */
static inline uint64_t wmask(uint64_t w, uint64_t lo, uint64_t hi) {
  uint64_t b0 = w * 64, m = ~0ull;
  if (lo > b0) m &= ~0ull << (lo - b0);
  if (hi < b0 + 63) m &= ~0ull >> (63 - (hi - b0));
  return m;
}

static inline bool bits_all(const uint64_t *bm, uint64_t lo, uint64_t hi) {
  if (__builtin_expect(lo / 64 == hi / 64, 1)) {
    uint64_t m = (~0ull << (lo % 64)) & (~0ull >> (63 - hi % 64));
    return (bm[lo / 64] & m) == m;
  }
  for (uint64_t w = lo / 64; w <= hi / 64; w++) {
    uint64_t m = wmask(w, lo, hi);
    if ((bm[w] & m) != m) return false;
  }
  return true;
}

static inline bool bits_none(const uint64_t *bm, uint64_t lo, uint64_t hi) {
  for (uint64_t w = lo / 64; w <= hi / 64; w++)
    if (bm[w] & wmask(w, lo, hi)) return false;
  return true;
}

/* Clear bits [lo, hi]; return how many were set. */
static inline uint64_t bits_clear(uint64_t *bm, uint64_t lo, uint64_t hi) {
  uint64_t n = 0;
  for (uint64_t w = lo / 64; w <= hi / 64; w++) {
    uint64_t m = wmask(w, lo, hi);
    n += (uint64_t)__builtin_popcountll(bm[w] & m);
    bm[w] &= ~m;
  }
  return n;
}

/* dst |= src over [lo, hi]; return how many dst bits became set. */
static inline uint64_t bits_or(uint64_t *dst, const uint64_t *src, uint64_t lo, uint64_t hi) {
  uint64_t n = 0;
  for (uint64_t w = lo / 64; w <= hi / 64; w++) {
    uint64_t add = src[w] & ~dst[w] & wmask(w, lo, hi);
    n += (uint64_t)__builtin_popcountll(add);
    dst[w] |= add;
  }
  return n;
}

static inline bool bit(const uint64_t *bm, uint64_t i) { return cm__bit(bm, i); }
static inline void bit_set(uint64_t *bm, uint64_t i) { cm__bit_set(bm, i); }
static inline void bit_clr(uint64_t *bm, uint64_t i) { cm__bit_clr(bm, i); }

/* ---- granule accounting (VM regions) ---------------------------------------------- */

/* Block [off, off+len) of r becomes used. CM_ASSERTs: R7 of arena_check.c
 * where the granule counts change (debug and sanitizer builds). */
static inline __attribute__((always_inline)) void used_add(arena *a, region *r, uint64_t off, uint64_t len) {
  uint64_t g0 = off >> a->gshift, g1 = (off + len - 1) >> a->gshift;
  CM_ASSERT(len > 0 && g1 < r->ngran);
  CM_ASSERT(r->cnt[g0] < UINT32_MAX && r->cnt[g1] < UINT32_MAX); /* R7: counts stay exact */
  if (__builtin_expect(g1 >= r->cnt_top, 0)) r->cnt_top = g1 + 1;
  if (__builtin_expect(g0 == g1, 1)) {
    if (r->cnt[g0]++ == 0 && bit(r->fm, g0)) {
      bit_clr(r->fm, g0);
      if (--a->free_mapped < a->low_free) a->low_free = a->free_mapped;
    }
    return;
  }
  if (r->cnt[g0]++ == 0 && bit(r->fm, g0)) {
    bit_clr(r->fm, g0);
    a->free_mapped--;
  }
  if (g1 != g0 && r->cnt[g1]++ == 0 && bit(r->fm, g1)) {
    bit_clr(r->fm, g1);
    a->free_mapped--;
  }
  if (g1 > g0 + 1) a->free_mapped -= bits_clear(r->fm, g0 + 1, g1 - 1);
  if (a->free_mapped < a->low_free) a->low_free = a->free_mapped;
}

/* Block [off, off+len) of r becomes free (before merging). */
static inline __attribute__((always_inline)) void used_remove(arena *a, region *r, uint64_t off, uint64_t len) {
  uint64_t g0 = off >> a->gshift, g1 = (off + len - 1) >> a->gshift;
  CM_ASSERT(len > 0 && g1 < r->ngran);
  CM_ASSERT(r->cnt[g0] > 0 && r->cnt[g1] > 0); /* R7: a used block counts its end granules */
  if (__builtin_expect(g0 == g1, 1)) {
    if (--r->cnt[g0] == 0 && bit(r->mapped, g0)) {
      bit_set(r->fm, g0);
      a->free_mapped++;
    }
    return;
  }
  if (--r->cnt[g0] == 0 && bit(r->mapped, g0)) {
    bit_set(r->fm, g0);
    a->free_mapped++;
  }
  if (g1 != g0 && --r->cnt[g1] == 0 && bit(r->mapped, g1)) {
    bit_set(r->fm, g1);
    a->free_mapped++;
  }
  if (g1 > g0 + 1) a->free_mapped += bits_or(r->fm, r->mapped, g0 + 1, g1 - 1);
}

static inline bool range_mapped(arena *a, region *r, uint64_t off, uint64_t len) {
  return bits_all(r->mapped, off >> a->gshift, (off + len - 1) >> a->gshift);
}

/* Is granule g of r backed by the storage (mapped and not virtual)? */
static inline bool backed(const region *r, uint64_t g) {
  return bit(r->mapped, g) && !(r->virt && bit(r->virt, g));
}

/* n virtual granules were backed or unmapped. */
static inline void virt_sub(arena *a, uint64_t n) {
  a->unbacked -= n;
  *a->base.ctx.dry_ledger -= n << a->gshift;
}

/* Any virtual granule in [lo, hi] of r? */
static inline bool virt_in(const arena *a, const region *r, uint64_t lo, uint64_t hi) {
  return a->unbacked && r->virt && !bits_none(r->virt, lo, hi);
}

static inline uint64_t span_of(const arena *a, uint64_t eff) {
  uint64_t al = a->base.alignment;
  return eff < al ? al : eff;
}

static inline bool capped(const arena *a) { return a->base.opts.has_max_pool_size; }

/* Hysteresis budget: free mapped granules kept for reuse. */
static inline uint64_t keep_budget(const arena *a) {
  return KEEP_MIN + ((a->held >> a->gshift) >> KEEP_SHIFT) + a->regret;
}

/* Would adding `add` bytes exceed the cap? */
static inline bool over_cap(const arena *a, uint64_t add) {
  uint64_t cap = a->base.opts.max_pool_size;
  return capped(a) && (add > cap || a->held > cap - add);
}

static inline uint64_t unmapped_in(const region *r, uint64_t lo, uint64_t hi) {
  uint64_t n = 0;
  for (uint64_t w = lo / 64; w <= hi / 64; w++)
    n += (uint64_t)__builtin_popcountll(~r->mapped[w] & wmask(w, lo, hi));
  return n;
}

static inline uint64_t fm_in(const region *r, uint64_t lo, uint64_t hi) {
  uint64_t n = 0;
  for (uint64_t w = lo / 64; w <= hi / 64; w++)
    n += (uint64_t)__builtin_popcountll(r->fm[w] & wmask(w, lo, hi));
  return n;
}

/* Storage calls are batched: consecutive objects of one size go to the
 * storage in one vm_map (or vm_unmap) of `piece`-sized objects, so access is
 * set once per run. */
typedef struct batch {
  uint64_t s, n, piece; /* granules [s, s+n) pending, objects of `piece` granules; n == 0: none */
} batch;

/* The configured objects: omax = the configured limit, no block-owned granules. */
static inline objects objects_default(const arena *a) { return (objects){a->ocfg, 1, 0}; }

/* ---- nodes (pool_arena.c, arena_reloc.c) ------------------------------------------ */

static __attribute__((noinline, cold, unused)) ablk *node_new(arena *a) {
  ablk *n = calloc(1, sizeof *n);
  if (!n) return NULL;
  if (!cm__slice_new_desc(&a->base, &n->s)) {
    free(n);
    return NULL;
  }
  return n;
}

static inline __attribute__((always_inline)) ablk *node_get(arena *a) {
  ablk *n = a->spare;
  if (__builtin_expect(n != NULL, 1)) {
    a->spare = n->fnext;
    a->nspare--;
    n->s.size = n->s.padding = n->s.cursor = 0;
    n->s.index = 0;
    n->s.used = n->s.touched = 0;
  } else {
    n = node_new(a);
    if (!n) return NULL;
  }
  n->s.pool = a->base.position;
  n->s.mapped = 1;
  return n;
}

static __attribute__((unused)) void node_drop(ablk *n) {
  if (n->s.desc) cm__desc_detach(n->s.desc);
  free(n);
}

static inline __attribute__((always_inline)) void node_put(arena *a, ablk *n) {
  if (a->nspare >= SPARE_MAX || !n->s.desc || n->s.desc->slice != &n->s) {
    node_drop(n);
    return;
  }
  n->fnext = a->spare;
  a->spare = n;
  a->nspare++;
}

/* ---- placement (pool_arena.c, arena_reloc.c) -------------------------------------- */

/* Node n covers [off, off + span) of free block b's region (its links and
 * free flag are the caller's). */
static inline void node_cover(ablk *n, const ablk *b, uint64_t off, uint64_t span) {
  n->s.storage_id = b->s.storage_id;
  n->s.offset = off;
  n->s.span = span;
  n->region = b->region;
  n->rg = b->rg;
}

static __attribute__((noinline, unused)) ablk *place_inside(arena *a, ablk *b, uint64_t s, uint64_t off);

/* Carve span s from the low end of free block b (in the bins): the used part
 * gets a (recycled) node; the free rest keeps b's node and its bin position
 * when its bin does not change. */
static inline __attribute__((always_inline)) ablk *place_low(arena *a, ablk *b, uint64_t s) {
  region *r = b->rg;
  ablk *u = b->s.span > s ? node_get(a) : NULL;
  if (u) {
    node_cover(u, b, b->s.offset, s);
    u->free = 0;
    u->prev = b->prev;
    u->next = b;
    if (b->prev) b->prev->next = u;
    else r->first = u;
    b->prev = u;
    b->s.offset += s;
    b->s.span -= s;
    rebin(a, b);
  } else { /* exact fit, or host OOM: the whole block is handed out */
    bin_remove(a, b);
    u = b;
  }
  if (r->vm) used_add(a, r, u->s.offset, u->s.span);
  else r->idle_since = 0;
  u->s.mapped = 1;
  return u;
}

/* Place span s at offset `off` inside free block b (VM region, off above b's
 * low end): b keeps the free part below, a new free node takes the part
 * above (if any). Without host memory for the nodes the whole block is handed
 * out, as place_low does. */
static __attribute__((noinline, unused)) ablk *place_inside(arena *a, ablk *b, uint64_t s, uint64_t off) {
  region *r = b->rg;
  uint64_t end = b->s.offset + b->s.span;
  ablk *u = node_get(a), *t = NULL;
  if (u && off + s < end && !(t = node_get(a))) {
    node_put(a, u);
    u = NULL;
  }
  if (!u) {
    bin_remove(a, b);
    used_add(a, r, b->s.offset, b->s.span);
    b->s.mapped = 1;
    return b;
  }
  ablk *after = b->next;
  node_cover(u, b, off, s);
  u->free = 0;
  u->prev = b;
  u->next = after;
  b->next = u;
  ablk *last = u;
  if (t) {
    node_cover(t, b, off + s, end - off - s);
    t->prev = u;
    t->next = after;
    u->next = t;
    bin_insert(a, t);
    last = t;
  }
  if (after) after->prev = last;
  b->s.span = off - b->s.offset;
  rebin(a, b);
  used_add(a, r, off, s);
  u->s.mapped = 1;
  return u;
}

/* Carve span s at offset off of free block b (off + s inside b; a VM region,
 * or b's low end in a segment); returns the used block (mapped, counted in the
 * granules, not in usage). */
static inline __attribute__((always_inline, unused)) ablk *cm__arena_place_at(arena *a, ablk *b,
                                                                             uint64_t s, uint64_t off) {
  if (__builtin_expect(off != b->s.offset, 0)) return place_inside(a, b, s, off);
  return place_low(a, b, s);
}

static inline void unlink_blk(region *r, ablk *x) {
  if (x->prev) x->prev->next = x->next;
  else r->first = x->next;
  if (x->next) x->next->prev = x->prev;
}

/* Free used block b (on_free's work, after the manager's unmarking; a
 * stitched slice's donor blocks): its granules, the merge with free
 * neighbours, the bins. */
static inline __attribute__((always_inline)) void cm__arena_free_block(arena *a, ablk *b) {
  cm__pool *p = &a->base;
  region *r = b->rg;
  if (__builtin_expect(!b->s.mapped, 0)) p->pages_unmapped--;
  if (r->vm) used_remove(a, r, b->s.offset, b->s.span);
  b->s.mapped = 1;
  ablk *pv = b->prev, *nx = b->next;
  ablk *keep; /* the free block that survives */
  if (nx && nx->free) {
    keep = nx;
    nx->s.offset = b->s.offset;
    nx->s.span += b->s.span;
    unlink_blk(r, b);
    node_put(a, b);
    if (pv && pv->free) {
      bin_remove(a, pv);
      nx->s.offset = pv->s.offset;
      nx->s.span += pv->s.span;
      unlink_blk(r, pv);
      node_put(a, pv);
    }
    rebin(a, nx);
  } else if (pv && pv->free) {
    keep = pv;
    pv->s.span += b->s.span;
    unlink_blk(r, b);
    node_put(a, b);
    rebin(a, pv);
  } else {
    keep = b;
    bin_insert(a, b);
  }
  if (!r->vm && !keep->prev && !keep->next) {
    uint64_t now = *a->base.ctx.reserve_clock;
    r->idle_since = now ? now : 1;
  }
}

/* ---- arena_map.c --------------------------------------------------------------------- */

/* Add object [s, s+n) of r to unmap batch b, flushing what cannot join. */
void cm__arena_unmap_add(arena *a, region *r, batch *b, uint64_t s, uint64_t n);
/* Storage-unmap a batch (failures are counted by the storage). */
void cm__arena_unmap_flush(arena *a, region *r, batch *b);
/* Unmap free objects, highest first, until `want` granules went (see there). */
uint64_t cm__arena_trim(arena *a, uint64_t want, const region *ex, uint64_t ex_lo, uint64_t ex_hi);
/* Map every unmapped granule of [lo, hi] in r (see there). */
int cm__arena_map_range(arena *a, region *r, uint64_t lo, uint64_t hi, bool covered, bool lazy,
                        cm_diag_t *diag);
/* Map what placing span s at offset o (place_off's) of free block b needs (see there). */
int cm__arena_map_for(arena *a, ablk *b, uint64_t s, uint64_t o, bool lazy, cm_diag_t *diag);
/* Dry run: would `add` more bytes exceed the device's free memory? */
bool cm__arena_dry_short(const arena *a, uint64_t add);
/* Would the device stay more than half free after mapping `need` more
 * granules (the default's holding and growth; see there)? */
bool cm__arena_has_room(arena *a, uint64_t need);
/* CM_ECAPACITY with the pool's figures. */
int cm__arena_cap_error(arena *a, uint64_t size, cm_diag_t *diag);

/* ---- arena_stitch.c ----------------------------------------------------------------- */

/* cm__slice.index marks (an arena's blocks have index 0 otherwise): a
 * stitched slice (not a block of any region; arena_stitch.c) and a donor
 * range (a used block that no one was handed: the bytes of a partly used
 * granule a stitched slice uses through a second mapping). */
#define STITCH_MARK CM__SLICE_STITCHED
#define DONOR_MARK 0xFFFFFFFEu

/* A stitched slice: a reservation of its own, where the objects behind up
 * to two granules that live blocks only partly use are mapped a second time
 * (an alias each: the first granule, whose free tail the slice starts in,
 * and the last, whose free head it ends in) around `fresh` new granules.
 * The donor blocks keep the aliased bytes from every other placement and
 * the donor granules from every trim while the slice lives. */
typedef struct stitch {
  cm__slice s;              /* handed out (s.index == STITCH_MARK) */
  ablk *donor[2];           /* the donor blocks: tail (first granule), head (last); NULL: none */
  uint64_t id, size;        /* the reservation */
  uint64_t fresh_off, fresh; /* the new granules: offset in the reservation, count */
  struct stitch *prev, *next;
} stitch;

/* pool.h's alloc_tight's last resort (see arena_stitch.c): serve span s
 * from a stitched slice when that maps fewer new granules than `bneed`.
 * CM_EOOM (diag untouched) when no stitch needs fewer or the device refuses
 * them; CM_ENOMEM; storage errors. Nothing changes on failure. */
int cm__arena_stitch(arena *a, uint64_t s, uint64_t bneed, cm__slice **out, cm_diag_t *diag);
/* Free stitched slice sl (on_free): its mappings, its reservation, its donors. */
void cm__arena_stitch_free(arena *a, cm__slice *sl);
/* Unmap and give back every stitched slice (destroy; before the regions go). */
void cm__arena_stitch_destroy(arena *a);

/* ---- arena_guard.c --------------------------------------------------------------------- */

/* Used block s gained (delta > 0) or lost guards (pool.h's guard entry):
 * while any is held, reservations avoid the granules guarded blocks touch. */
void cm__arena_guard(cm__pool *p, cm__slice *s, int64_t delta);

/* ---- arena_reloc.c --------------------------------------------------------------------- */

/* The arena's relocation plan (pool.h's reloc_plan; arena_reloc.c). */
int cm__arena_reloc_plan(cm__pool *p, cm_relocate_reason_t why, cm__moves *out);

/* ---- arena_check.c ------------------------------------------------------------------- */

size_t cm__arena_check(cm__pool *p, cm_diag_t *diag);
size_t cm__arena_display(cm__pool *p, char *buf, size_t cap);
/* pool.h's explain_oom (arena_check.c). */
size_t cm__arena_explain_oom(cm__pool *p, char *buf, size_t cap);

#endif
