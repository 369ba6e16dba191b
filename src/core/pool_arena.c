/*
 * pool_arena.c - the arena pool (CM_POOL_ARENA), cubemem's default: one
 * offset allocator over large storage regions, with physical memory mapped
 * only where live data is.
 *
 * Regions. With a storage that has virtual memory (power-of-two granule G),
 * a region is one reserved address range (page_size when given, else twice
 * the device memory - 8 x max_page_size - and at least 256 GiB: address
 * space is cheap, so only physical memory limits a request) whose granules
 * are mapped on demand; reserved bytes are the mapped granules. Without VM
 * support a region is a segment obtained with cm_storage_alloc and counts
 * whole. A request that fits no region opens a new one. Caps (max_pool_size)
 * bound the mapped or allocated bytes; max_alloc_size (0 = none) bounds
 * requests; zero-byte requests take one alignment unit.
 *
 * Physical objects (storage.h's contract, the CUDA driver's). Memory is
 * mapped as physical objects that are unmapped only whole: each run mapped is
 * cut into objects of at most `omax` granules (max_object_size; default one
 * granule, so any free granule can be given back: bench/results/objects.md
 * measures the trade-off against driver calls), recorded per granule
 * (ostart, olen). Consecutive objects of one size go to the storage in one
 * vm_map / vm_unmap, so access is set once per run. Trims unmap only objects
 * whose granules are all free.
 *
 * Placement. Every region is tiled by blocks (used and free) linked in
 * address order; free neighbours are merged at once. Free blocks sit in
 * segregated lists: 62 power-of-two groups x 8 linear sub-bins (TLSF-style,
 * two-level bitmaps). A request of span s scans the first entries of its own
 * bin for the best fit (an exact fit stops the scan; ties go to the lower
 * address), else takes the next non-empty bin's head, and is carved from the
 * low end of the block: the used part gets a recycled node, the free rest
 * keeps its node and list position unless its bin changes. Lists are LIFO, so
 * placement depends only on the sequence of calls (deterministic).
 *
 * Mapping (VM regions). Per granule: `mapped` and `fm` (free and mapped)
 * bits, and `cnt` = used blocks having the granule as their first or last
 * granule. A used block owns its interior granules alone, so only boundary
 * granules need counts: placing or freeing a block is O(1) counter updates
 * plus word-wide bit operations over its range. try_reserve succeeds only
 * with memory that is mapped already (the best fit, else a fitting block
 * whose range is mapped among the next ALT_LIMIT candidates); otherwise alloc
 * maps the best fit's missing runs (one call per run, extended by up to
 * mapped/512 granules ahead inside the same free block to batch growth).
 * Hysteresis: before mapping, free mapped granules beyond a budget are
 * unmapped, highest addresses first, so the mapped total does not grow while
 * unused mapped memory sits elsewhere. The budget is 1 + mapped/256 granules
 * plus a feedback term: granules mapped again within REGRET_WINDOW
 * reservations of being trimmed raise it (capped at mapped/16), maps without
 * such regret let it decay; so a steady loop stops calling the driver once
 * its second iteration has re-mapped what the first trimmed. When the device
 * refuses a map (CM_EOOM), every other free mapped object is given back and
 * only the request's own granules are mapped again (then the manager gives
 * back the other pools' cached memory and retries once). The periodic
 * cleanup unmaps what stayed free for a whole period (low-water mark of the
 * free mapped count); the explicit cleanup unmaps everything free and gives
 * back address ranges with nothing in use.
 *
 * Dry runs (spec §6). A dry run meets the device's limit where an eager run
 * would: what it counted without mapping (storage dry_bytes, all pools) plus
 * what it asks for must fit the storage's free memory (mem_info). Under a dry
 * run granules are mapped "virtually": set in
 * `mapped` and in a per-region `virt` bitmap, counted in reserved bytes, the
 * peaks, the hysteresis budget, the cap and the trims exactly as real ones,
 * but never mapped in the storage; so a dry run places, trims and peaks
 * exactly as an eager run of the same sequence. A slice covering a virtual
 * granule is unmapped (pages_unmapped) until materialize, which maps the
 * virtual granules it covers through the storage (one call per run) without
 * changing any count. Unmapping a virtual granule (trim, destroy) makes no
 * storage call. Outside a dry run, a slice placed on virtual granules has
 * them mapped for real first, so eager memory is always backed. `unbacked`
 * counts the virtual granules; while it is 0 (every eager-only run) the
 * reservation fast path pays a single test for all this.
 *
 * Segments (no VM). A new segment is max(request, held/4 clamped to
 * [2 MiB, 1 GiB]) or page_size when given, or the request's own size when the
 * device refuses the larger one; entirely free segments are given
 * back before growing, by the explicit cleanup, and by the periodic cleanup
 * once idle for a whole period. A segment opened under a dry run is counted
 * whole (reserved bytes, peaks, cap) but not allocated ("lazy", with an id
 * from cm__manager_lazy_id; `unbacked` counts them): its slices are unmapped
 * until one is materialized or an eager reservation lands in it, which
 * allocates the segment and rewrites the id of every block (offsets stay).
 * A lazy segment is given back without a storage call.
 *
 * Descriptors. Each block keeps its descriptor; a block merged away goes to a
 * bounded spare list with its (unreferenced, owned) descriptor, and splits
 * reuse spares, so the steady state allocates no host memory.
 *
 * Invariants (check()): blocks tile each region; no two adjacent free
 * blocks; a free block is in the bin of its span; bitmaps match the lists;
 * usage and reserved bytes equal their recomputation; fm == mapped & ~used,
 * cnt matches the used blocks, mapped used blocks have every granule mapped
 * and none virtual; virt is a subset of mapped; `unbacked` equals the virtual
 * granules / lazy segments; a segment's used blocks are unmapped iff it is
 * lazy.
 *
 * Exports: cm__pool_arena_new.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/manager_internal.h"
#include "storage/storage_internal.h"

#define SLB 3u
#define SLN (1u << SLB)
#define NFL (64u - SLB + 1u)
#define NBINS (NFL * SLN)
#define SCAN_LIMIT 8       /* entries of the request's own bin examined */
#define SCAN_NEXT 1        /* entries of the next non-empty bin examined */
#define ALT_LIMIT 64       /* blocks examined for an already mapped fit */
#define KEEP_MIN 1         /* free mapped granules kept: KEEP_MIN + mapped >> KEEP_SHIFT */
#define KEEP_SHIFT 8
#define REGRET_WINDOW 4096 /* a trim undone within this many reservations raises the budget */
#define REGRET_DECAY 3      /* a map without regret shrinks it by 1/8 */
#define REGRET_GAIN 1       /* it grows by half the re-mapped granules */
#define REGRET_CAP 4        /* up to mapped >> REGRET_CAP granules */
#define EXT_SHIFT 9        /* growth maps extend by up to mapped >> EXT_SHIFT granules */
#define SPARE_MAX 4096     /* recycled block nodes kept */
/* Largest VM region, in granules (4 TiB at 2 MiB): bounds the per-granule
 * metadata, so an absurd request fails before any host allocation. */
#define MAX_REGION_GRANULES (1ull << 21)
#define DEFAULT_PERIOD 5000 /* reservations between periodic trims */
#define REGION_DEFAULT (256ull << 30) /* smallest default VM region */
#ifndef OBJECT_MAX_DEFAULT
#define OBJECT_MAX_DEFAULT 1 /* largest physical object: one granule (see the header) */
#endif
#define SEG_MIN (2ull << 20)

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
  uint32_t *ostart;  /* per mapped granule: the first granule of its object */
  uint32_t *olen;    /* per object start: its length in granules (0 elsewhere) */
} region;

typedef struct arena {
  cm__pool base;
  cm_storage_t *st;
  bool vm;
  unsigned gshift;
  uint64_t gran;
  uint64_t omax; /* largest physical object, in granules */
  region **regs;
  uint32_t nregs, capregs;
  ablk *heads[NBINS];
  uint64_t flmap;
  uint32_t slmap[NFL];
  ablk *spare;
  size_t nspare;
  uint64_t held;        /* bytes held: mapped granules + segments */
  uint64_t free_mapped; /* VM: free mapped granules, all regions */
  /* Memory counted but not backed by the storage (dry runs): VM: virtual
   * granules, all regions; segments: segments not allocated yet. */
  uint64_t unbacked;
  uint64_t lazy_bytes;  /* segments: bytes of the lazy segments */
  uint64_t low_free;    /* low-water of free_mapped since the last periodic trim */
  uint64_t last_trim;   /* alloc_nr of the last periodic cleanup */
  uint64_t period;
  uint64_t alloc_nr;    /* last alloc_nr seen in cleanup */
  uint32_t ops;         /* reservations seen (wraps), stamps trims */
  uint64_t regret;      /* granules re-mapped soon after a trim: raises the budget */
} arena;

static arena *AR(cm__pool *p) { return (arena *)p; }
static bool dry_short(const arena *a, uint64_t add);
static ablk *BLK(cm__slice *s) { return CM__CONTAINER(s, ablk, s); }
/* Is a dry run open on the manager (spec §6)? */
static bool dry_run(const arena *a) { return a->base.m->dry_runs > 0; }

/* ---- bins -------------------------------------------------------------------- */

static inline uint32_t bin_of(uint64_t size) {
  if (size < SLN) return (uint32_t)size;
  unsigned fl = 63u - (unsigned)__builtin_clzll(size);
  uint32_t sl = (uint32_t)(size >> (fl - SLB)) - SLN;
  return (fl - SLB + 1u) * SLN + sl;
}

static inline void bin_insert_at(arena *a, ablk *b, uint32_t i) {
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
  uint32_t g = i / SLN, sl = i % SLN;
  uint32_t m = sl + 1 < SLN ? a->slmap[g] & (~0u << (sl + 1)) : 0;
  if (!m) {
    uint64_t fm = g + 1 < 64 ? a->flmap & (~0ull << (g + 1)) : 0;
    if (!fm) return NULL;
    g = (uint32_t)__builtin_ctzll(fm);
    m = a->slmap[g];
  }
  n = 0;
  for (ablk *b = a->heads[g * SLN + (uint32_t)__builtin_ctz(m)]; b && n < SCAN_NEXT; b = b->fnext, n++)
    if (better(b, best)) best = b;
  return best;
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

static bool bits_none(const uint64_t *bm, uint64_t lo, uint64_t hi) {
  for (uint64_t w = lo / 64; w <= hi / 64; w++)
    if (bm[w] & wmask(w, lo, hi)) return false;
  return true;
}

/* Clear bits [lo, hi]; return how many were set. */
static uint64_t bits_clear(uint64_t *bm, uint64_t lo, uint64_t hi) {
  uint64_t n = 0;
  for (uint64_t w = lo / 64; w <= hi / 64; w++) {
    uint64_t m = wmask(w, lo, hi);
    n += (uint64_t)__builtin_popcountll(bm[w] & m);
    bm[w] &= ~m;
  }
  return n;
}

/* dst |= src over [lo, hi]; return how many dst bits became set. */
static uint64_t bits_or(uint64_t *dst, const uint64_t *src, uint64_t lo, uint64_t hi) {
  uint64_t n = 0;
  for (uint64_t w = lo / 64; w <= hi / 64; w++) {
    uint64_t add = src[w] & ~dst[w] & wmask(w, lo, hi);
    n += (uint64_t)__builtin_popcountll(add);
    dst[w] |= add;
  }
  return n;
}

static inline bool bit(const uint64_t *bm, uint64_t i) { return (bm[i / 64] >> (i % 64)) & 1; }
static inline void bit_set(uint64_t *bm, uint64_t i) { bm[i / 64] |= 1ull << (i % 64); }
static inline void bit_clr(uint64_t *bm, uint64_t i) { bm[i / 64] &= ~(1ull << (i % 64)); }

/* ---- granule accounting (VM regions) ---------------------------------------------- */

/* Block [off, off+len) of r becomes used. */
static inline __attribute__((always_inline)) void used_add(arena *a, region *r, uint64_t off, uint64_t len) {
  uint64_t g0 = off >> a->gshift, g1 = (off + len - 1) >> a->gshift;
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

static bool range_mapped(arena *a, region *r, uint64_t off, uint64_t len) {
  return bits_all(r->mapped, off >> a->gshift, (off + len - 1) >> a->gshift);
}

/* Is granule g of r backed by the storage (mapped and not virtual)? */
static inline bool backed(const region *r, uint64_t g) {
  return bit(r->mapped, g) && !(r->virt && bit(r->virt, g));
}

/* n virtual granules were backed or unmapped. */
static inline void virt_sub(arena *a, uint64_t n) {
  a->unbacked -= n;
  a->st->dry_bytes -= n << a->gshift;
}

/* Any virtual granule in [lo, hi] of r? */
static inline bool virt_in(const arena *a, const region *r, uint64_t lo, uint64_t hi) {
  return a->unbacked && r->virt && !bits_none(r->virt, lo, hi);
}

/* ---- physical memory objects (VM regions) --------------------------------------------
 * Every mapped granule belongs to one object: a run of granules mapped by one
 * storage vm_map (one physical object, one mapping), recorded at its first
 * granule (olen) and in every granule (ostart). The driver unmaps mappings
 * only whole, so an object is unmapped only when all its granules are free.
 * A map creates one object per run of unmapped granules, cut every omax
 * granules. Under a dry run the same objects are recorded but stay virtual;
 * backing one maps it whole, so an object is either all virtual or all real. */

/* Storage calls are batched: consecutive objects of one size go to the
 * storage in one vm_map (or vm_unmap) of `piece`-sized objects, so access is
 * set once per run. */
typedef struct batch {
  uint64_t s, n, piece; /* granules [s, s+n) pending, objects of `piece` granules; n == 0: none */
} batch;

/* Storage-unmap a batch of objects. A failure is counted by the storage
 * (stats.errors) and the granules are taken as unmapped here: memory the
 * driver may still hold is never handed out again (mapping it anew would fail
 * instead of aliasing), and the storage frees what it holds when destroyed. */
static void unmap_flush(arena *a, region *r, batch *b) {
  if (!b->n) return;
  (void)cm__storage_vm_unmap(a->st, r->id, b->s << a->gshift, b->n << a->gshift,
                             b->piece << a->gshift, NULL);
  b->n = 0;
}

/* Add object [s, s+n) to an unmap batch of r, flushing what cannot join. */
static void unmap_add(arena *a, region *r, batch *b, uint64_t s, uint64_t n) {
  if (b->n && !((b->s + b->n == s || s + n == b->s) && b->piece == n)) unmap_flush(a, r, b);
  if (!b->n) *b = (batch){s, 0, n};
  if (s < b->s) b->s = s;
  b->n += n;
}

/* Unmap object s of r (all its granules free and mapped) through batch b (the
 * caller flushes it). A virtual object is only uncounted. */
static void unmap_object(arena *a, region *r, uint64_t s, batch *b) {
  uint64_t n = r->olen[s], hi = s + n - 1;
  if (__builtin_expect(!(a->unbacked && r->virt && bit(r->virt, s)), 1)) {
    unmap_add(a, r, b, s, n);
  } else {
    virt_sub(a, bits_clear(r->virt, s, hi));
  }
  uint32_t stamp = a->ops ? a->ops : 1;
  for (uint64_t g = s; g <= hi; g++) r->trimmed[g] = stamp;
  r->olen[s] = 0;
  bits_clear(r->mapped, s, hi);
  bits_clear(r->fm, s, hi);
  r->mapped_gran -= n;
  a->free_mapped -= n;
  a->held -= n << a->gshift;
  cm__pool_reserved_add(&a->base, -(int64_t)(n << a->gshift));
}

/* Unmap free objects, highest addresses first, until `want` granules went
 * (UINT64_MAX: every free object). `strict`: an object larger than what is
 * still wanted is kept (trims that only bound the cache before a map);
 * otherwise the last object may go beyond `want` (cleanups: what stayed idle
 * goes). Objects meeting granules [ex_lo, ex_hi] of region ex stay. Returns
 * how many granules were unmapped. */
static uint64_t trim_objects(arena *a, uint64_t want, bool strict, const region *ex,
                             uint64_t ex_lo, uint64_t ex_hi) {
  uint64_t done = 0;
  for (uint32_t ri = a->nregs; ri-- > 0 && done < want;) {
    region *r = a->regs[ri];
    if (!r || !r->vm || !r->mapped_gran) continue;
    uint64_t g = r->top;
    batch b = {0, 0, 0};
    while (g > 0 && done < want) {
      /* find the highest fm bit below g */
      uint64_t w = (g - 1) / 64;
      uint64_t bits = r->fm[w] & (((g - 1) % 64 == 63) ? ~0ull : ((1ull << ((g - 1) % 64 + 1)) - 1));
      while (!bits && w > 0) bits = r->fm[--w];
      if (!bits) break;
      uint64_t hi = w * 64 + 63 - (uint64_t)__builtin_clzll(bits);
      uint64_t os = r->ostart[hi], oe = os + r->olen[os] - 1;
      g = os;
      if (r == ex && os <= ex_hi && oe >= ex_lo) continue; /* meets the excluded range */
      if (!bits_all(r->fm, os, oe)) continue;              /* partly in use */
      if (strict && want != UINT64_MAX && oe - os + 1 > want - done) continue;
      done += oe - os + 1;
      unmap_object(a, r, os, &b);
    }
    unmap_flush(a, r, &b);
    if (r->mapped_gran == 0) r->top = 0;
  }
  return done;
}

static uint64_t trim(arena *a, uint64_t want, const region *ex, uint64_t ex_lo, uint64_t ex_hi) {
  return trim_objects(a, want, true, ex, ex_lo, ex_hi);
}

/* End of the object that a map starting at unmapped granule g creates inside
 * [g, hi]: the run of unmapped granules, cut after omax of them. */
static inline uint64_t object_end(const arena *a, const region *r, uint64_t g, uint64_t hi) {
  uint64_t e = g, lim = hi - g + 1 < a->omax ? hi : g + a->omax - 1;
  while (e < lim && !bit(r->mapped, e + 1)) e++;
  return e;
}

/* Walk the storage work of mapping [lo, hi]: for each object to map, in
 * address order, call fn(a, r, s, n, arg) (n granules from s); stop at the
 * first non-zero return (returned) or after the object starting at or above
 * `stop` (UINT64_MAX: none). Virtual objects meeting the range are mapped
 * whole; unmapped runs become new objects. Bits are not read as changed in
 * between, so two walks over the same state see the same objects. */
typedef int (*object_fn)(arena *a, region *r, uint64_t s, uint64_t n, void *arg);

static int walk_objects(arena *a, region *r, uint64_t lo, uint64_t hi, bool anyv, uint64_t stop,
                        object_fn fn, void *arg) {
  for (uint64_t g = lo; g <= hi && g < stop;) {
    if (bit(r->mapped, g)) {
      if (!(anyv && bit(r->virt, g))) { /* backed */
        g++;
        continue;
      }
      uint64_t s = r->ostart[g], n = r->olen[s]; /* a virtual object: backed whole */
      int rc = fn(a, r, s, n, arg);
      if (rc) return rc;
      g = s + n;
      continue;
    }
    uint64_t e = object_end(a, r, g, hi);
    int rc = fn(a, r, g, e - g + 1, arg);
    if (rc) return rc;
    g = e + 1;
  }
  return 0;
}

typedef struct map_arg {
  cm_diag_t *diag;
  batch b;
  uint64_t failed_at; /* start of the batch whose map failed */
  int rc;
} map_arg;

static int map_flush(arena *a, region *r, map_arg *m) {
  if (!m->b.n) return 0;
  int rc = cm__storage_vm_map(a->st, r->id, m->b.s << a->gshift, m->b.n << a->gshift,
                              m->b.piece << a->gshift, m->diag);
  if (rc != CM_OK) {
    m->failed_at = m->b.s;
    m->rc = rc;
    return 1;
  }
  m->b.n = 0;
  return 0;
}

static int map_one(arena *a, region *r, uint64_t s, uint64_t n, void *arg) {
  map_arg *m = arg;
  if (m->b.n && (m->b.s + m->b.n != s || m->b.piece != n) && map_flush(a, r, m)) return 1;
  if (!m->b.n) m->b = (batch){s, 0, n};
  m->b.n += n;
  return 0;
}

static int unmap_one(arena *a, region *r, uint64_t s, uint64_t n, void *arg) {
  unmap_add(a, r, arg, s, n);
  return 0;
}

/* Map every unmapped granule of [lo, hi] in r. `covered`: the range lies
 * inside a used block (else the new granules are free until the caller
 * places a block). `lazy` (dry run): the granules are counted exactly as
 * mapped ones, in the same objects, but only marked virtual, with no storage
 * call. Otherwise every object meeting the range that is not backed yet
 * (virtual ones included, whole) is mapped in the storage; virtual granules
 * were counted already, so backing them changes no accounting. On failure
 * every object mapped here is unmapped again and nothing changes. */
static int map_range(arena *a, region *r, uint64_t lo, uint64_t hi, bool covered, bool lazy,
                     cm_diag_t *diag) {
  uint64_t regret = 0;
  bool anyv = virt_in(a, r, lo, hi);
  if (!lazy) {
    map_arg m = {diag, {0, 0, 0}, 0, CM_OK};
    if (walk_objects(a, r, lo, hi, anyv, UINT64_MAX, map_one, &m) || map_flush(a, r, &m)) {
      batch u = {0, 0, 0}; /* bits are unchanged: the same walk finds what was mapped */
      (void)walk_objects(a, r, lo, hi, anyv, m.failed_at, unmap_one, &u);
      unmap_flush(a, r, &u);
      return m.rc;
    }
    if (anyv) /* backed virtual objects: no longer virtual, whole */
      for (uint64_t g = lo; g <= hi;) {
        if (!bit(r->mapped, g) || !bit(r->virt, g)) {
          g++;
          continue;
        }
        uint64_t s = r->ostart[g], n = r->olen[s];
        virt_sub(a, bits_clear(r->virt, s, s + n - 1));
        g = s + n;
      }
  } else if (!r->virt && !(r->virt = calloc(r->nwords, sizeof(uint64_t)))) {
    return cm__diag_set(diag, CM_ENOMEM, "out of host memory");
  }
  uint64_t n = 0;
  for (uint64_t g = lo; g <= hi;) {
    if (bit(r->mapped, g)) {
      g++;
      continue;
    }
    uint64_t e = object_end(a, r, g, hi); /* the object the storage walk made */
    r->olen[g] = (uint32_t)(e - g + 1);
    for (uint64_t x = g; x <= e; x++) {
      r->ostart[x] = (uint32_t)g;
      bit_set(r->mapped, x);
      if (lazy) bit_set(r->virt, x);
      n++;
      if (r->trimmed[x] && (uint32_t)(a->ops - r->trimmed[x]) <= REGRET_WINDOW) regret++;
      if (!covered && r->cnt[x] == 0) {
        bit_set(r->fm, x);
        a->free_mapped++;
      }
    }
    g = e + 1;
  }
  if (n == 0) return CM_OK; /* only virtual granules were backed */
  if (lazy) {
    a->unbacked += n;
    a->st->dry_bytes += n << a->gshift;
  }
  r->mapped_gran += n;
  /* feedback: re-mapping what was just trimmed raises the budget, a map
   * without regret lets it decay */
  if (regret) {
    a->regret += (regret + 1) >> REGRET_GAIN;
    uint64_t cap = (a->held >> a->gshift) >> REGRET_CAP;
    if (a->regret > cap) a->regret = cap;
  } else {
    a->regret -= a->regret >> REGRET_DECAY;
  }
  if (hi + 1 > r->top) r->top = hi + 1;
  a->held += n << a->gshift;
  cm__pool_reserved_add(&a->base, (int64_t)(n << a->gshift));
  return CM_OK;
}

static uint64_t unmapped_in(const region *r, uint64_t lo, uint64_t hi) {
  uint64_t n = 0;
  for (uint64_t w = lo / 64; w <= hi / 64; w++)
    n += (uint64_t)__builtin_popcountll(~r->mapped[w] & wmask(w, lo, hi));
  return n;
}

static uint64_t fm_in(const region *r, uint64_t lo, uint64_t hi) {
  uint64_t n = 0;
  for (uint64_t w = lo / 64; w <= hi / 64; w++)
    n += (uint64_t)__builtin_popcountll(r->fm[w] & wmask(w, lo, hi));
  return n;
}

/* ---- nodes ------------------------------------------------------------------------ */

static __attribute__((noinline, cold)) ablk *node_new(arena *a) {
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
    n->s.page = n->s.index = 0;
    n->s.used = n->s.touched = 0;
  } else {
    n = node_new(a);
    if (!n) return NULL;
  }
  n->s.pool = a->base.position;
  n->s.mapped = 1;
  return n;
}

static void node_drop(ablk *n) {
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

/* ---- regions ---------------------------------------------------------------------- */

static uint64_t span_of(const arena *a, uint64_t eff) {
  uint64_t al = a->base.alignment;
  return eff < al ? al : eff;
}

static int region_slot(arena *a, uint32_t *out) {
  for (uint32_t i = 0; i < a->nregs; i++)
    if (!a->regs[i]) {
      *out = i;
      return CM_OK;
    }
  if (a->nregs == a->capregs) {
    uint32_t nc = a->capregs ? a->capregs * 2 : 4;
    region **nv = realloc(a->regs, nc * sizeof *nv);
    if (!nv) return CM_ENOMEM;
    a->regs = nv;
    a->capregs = nc;
  }
  a->regs[a->nregs] = NULL;
  *out = a->nregs++;
  return CM_OK;
}

static void region_free_mem(region *r) {
  free(r->mapped);
  free(r->fm);
  free(r->virt);
  free(r->cnt);
  free(r->trimmed);
  free(r->ostart);
  free(r->olen);
  free(r);
}

/* Address space of a VM region when page_size is not given: generously more
 * than the device (address space is cheap; only physical memory should limit
 * a request): twice the device memory (max_page_size is a quarter of it),
 * at least REGION_DEFAULT. */
static uint64_t region_default(const arena *a) {
  uint64_t dev = a->base.m->props.max_page_size;
  uint64_t size = dev <= (REGION_DEFAULT / 8) ? REGION_DEFAULT : dev * 8;
  uint64_t cap = MAX_REGION_GRANULES << a->gshift;
  return size < cap ? size : cap;
}

/* Segment size for a request of span s (no VM). */
static uint64_t seg_size(const arena *a, uint64_t s) {
  uint64_t want = a->base.opts.page_size;
  if (!want) {
    want = a->held / 4;
    if (want < SEG_MIN) want = SEG_MIN;
    if (want > (1ull << 30)) want = 1ull << 30;
    uint64_t r;
    if (cm__round_up(want, SEG_MIN, &r)) want = r;
  }
  if (want < s) want = s;
  uint64_t r;
  return cm__round_up(want, a->base.alignment, &r) ? r : s;
}

static bool capped(const arena *a) { return a->base.opts.has_max_pool_size; }

static int cap_error(arena *a, uint64_t size, cm_diag_t *diag) {
  return cm__diag_set(diag, CM_ECAPACITY,
                      "arena pool %u is at capacity: %" PRIu64 " bytes requested, %" PRIu64
                      " of %" PRIu64 " bytes reserved, %" PRIu64 " in use (PoolCapacityExceeded)",
                      (unsigned)a->base.position, size, a->held, a->base.opts.max_pool_size,
                      a->base.usage.bytes_in_use);
}

/* Release region ri, which holds a single free block and no mapping. */
static void region_release(arena *a, uint32_t ri) {
  region *r = a->regs[ri];
  ablk *b = r->first;
  bin_remove(a, b);
  node_put(a, b);
  if (r->vm) {
    (void)cm__storage_vm_release(a->st, r->id, r->size, NULL); /* a failure is counted there */
  } else {
    if (r->lazy) {
      a->unbacked--;
      a->lazy_bytes -= r->size;
      a->st->dry_bytes -= r->size;
    } else {
      cm_storage_dealloc(a->st, r->id, r->size);
    }
    a->held -= r->size;
    cm__pool_reserved_add(&a->base, -(int64_t)r->size);
  }
  cm__pool_pages_add(&a->base, -1);
  region_free_mem(r);
  a->regs[ri] = NULL;
  while (a->nregs && !a->regs[a->nregs - 1]) a->nregs--;
}

static bool region_idle(const region *r) { return r->first->free && !r->first->next; }

/* Open a region able to hold span s; its single free block goes to the bins. */
static int region_open(arena *a, uint64_t s, bool lazy, ablk **out, cm_diag_t *diag) {
  uint32_t ri;
  if (region_slot(a, &ri) != CM_OK) return cm__diag_set(diag, CM_ENOMEM, "out of host memory");
  region *r = calloc(1, sizeof *r);
  ablk *b = node_get(a);
  if (!r || !b) {
    free(r);
    if (b) node_put(a, b);
    return cm__diag_set(diag, CM_ENOMEM, "out of host memory");
  }
  int rc = CM_OK;
  if (a->vm) {
    uint64_t size = a->base.opts.page_size ? a->base.opts.page_size : region_default(a);
    if (size < s) size = s;
    if (!cm__round_up(size, a->gran, &size) || (size >> a->gshift) > MAX_REGION_GRANULES) {
      rc = cm__diag_set(diag, CM_ETOOBIG,
                        "an allocation of %" PRIu64 " bytes exceeds the largest address range the "
                        "arena reserves (%" PRIu64 " bytes)",
                        s, (uint64_t)MAX_REGION_GRANULES << a->gshift);
      goto fail;
    }
    r->vm = true;
    r->ngran = size >> a->gshift;
    r->nwords = (r->ngran + 63) / 64;
    r->mapped = calloc(r->nwords, sizeof(uint64_t));
    r->fm = calloc(r->nwords, sizeof(uint64_t));
    r->cnt = calloc(r->ngran, sizeof(uint32_t));
    r->trimmed = calloc(r->ngran, sizeof(uint32_t));
    r->ostart = calloc(r->ngran, sizeof(uint32_t));
    r->olen = calloc(r->ngran, sizeof(uint32_t));
    if (!r->mapped || !r->fm || !r->cnt || !r->trimmed || !r->ostart || !r->olen) {
      rc = cm__diag_set(diag, CM_ENOMEM, "out of host memory");
      goto fail;
    }
    rc = cm__storage_vm_reserve(a->st, size, &r->id, diag);
    if (rc != CM_OK) goto fail;
    r->size = size;
  } else {
    uint64_t size = seg_size(a, s);
    if (capped(a) && (size > a->base.opts.max_pool_size ||
                      a->held > a->base.opts.max_pool_size - size)) {
      size = s; /* exact fit may still pass the cap */
      if (size > a->base.opts.max_pool_size || a->held > a->base.opts.max_pool_size - size) {
        rc = cap_error(a, s, diag);
        goto fail;
      }
    }
    if (lazy) { /* dry run: counted now, allocated when first needed */
      if (dry_short(a, size) && size > s) size = s; /* as the eager fallback below */
      if (dry_short(a, size)) {
        rc = cm__diag_set(diag, CM_EOOM,
                          "the device would be out of memory: a %" PRIu64 " bytes segment for a "
                          "dry-run reservation of %" PRIu64 " bytes",
                          size, s);
        goto fail;
      }
      r->id = cm__manager_lazy_id(a->base.m);
      r->lazy = true;
      a->unbacked++;
      a->lazy_bytes += size;
      a->st->dry_bytes += size;
    } else {
      rc = cm_storage_alloc(a->st, size, &r->id, diag);
      if (rc == CM_EOOM && size > s) { /* the device is short: the request's own size may fit */
        if (diag) cm_diag_clear(diag);
        size = s;
        rc = cm_storage_alloc(a->st, size, &r->id, diag);
      }
      if (rc != CM_OK) goto fail;
    }
    r->size = size;
    a->held += size;
    cm__pool_reserved_add(&a->base, (int64_t)size);
  }
  b->s.storage_id = r->id;
  b->s.offset = 0;
  b->s.span = r->size;
  b->region = ri;
  b->rg = r;
  b->prev = b->next = NULL;
  r->first = b;
  a->regs[ri] = r;
  cm__pool_pages_add(&a->base, 1);
  bin_insert(a, b);
  *out = b;
  return CM_OK;
fail:
  node_put(a, b);
  region_free_mem(r);
  if (ri + 1 == a->nregs) a->nregs--;
  return rc;
}

/* ---- placement ---------------------------------------------------------------------- */

/* Carve span s from the low end of free block b (in the bins). The used part
 * gets a (recycled) node; the free rest keeps b's node and its bin position
 * when its bin does not change. */
static inline __attribute__((always_inline)) ablk *place(arena *a, ablk *b, uint64_t s) {
  region *r = b->rg;
  ablk *u = b->s.span > s ? node_get(a) : NULL;
  if (u) {
    u->s.storage_id = b->s.storage_id;
    u->s.offset = b->s.offset;
    u->s.span = s;
    u->region = b->region;
    u->rg = b->rg;
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

static inline void unlink_blk(region *r, ablk *x) {
  if (x->prev) x->prev->next = x->next;
  else r->first = x->next;
  if (x->next) x->next->prev = x->prev;
}

/* A fit whose low end is mapped already: scan up to `limit` blocks of span
 * >= s, bins upward; smallest such block wins. NULL if none was seen. */
static ablk *find_mapped_fit(arena *a, uint64_t s, int limit) {
  uint32_t i = bin_of(s);
  ablk *best = NULL;
  int n = 0;
  while (n < limit) {
    for (ablk *b = a->heads[i]; b && n < limit; b = b->fnext, n++) {
      if (b->s.span < s || (best && !better(b, best))) continue;
      region *r = b->rg;
      if (!r->vm || range_mapped(a, r, b->s.offset, s)) best = b;
    }
    if (best) return best;
    /* next non-empty bin above i */
    uint32_t g = i / SLN, sl = i % SLN;
    uint32_t m = sl + 1 < SLN ? a->slmap[g] & (~0u << (sl + 1)) : 0;
    if (!m) {
      uint64_t fm = g + 1 < 64 ? a->flmap & (~0ull << (g + 1)) : 0;
      if (!fm) return NULL;
      g = (uint32_t)__builtin_ctzll(fm);
      m = a->slmap[g];
    }
    i = g * SLN + (uint32_t)__builtin_ctz(m);
  }
  return NULL;
}

static bool accept(const cm__pool *p, uint64_t size) {
  return p->opts.max_alloc_size == 0 || size <= p->opts.max_alloc_size;
}

/* Allocate lazy segment r in the storage: the region and every block in it
 * take the new id (offsets stay) and its used blocks become mapped. On
 * failure nothing changes. */
static int seg_back(arena *a, region *r, cm_diag_t *diag) {
  uint64_t id;
  int rc = cm_storage_alloc(a->st, r->size, &id, diag);
  if (rc != CM_OK) return rc;
  r->id = id;
  r->lazy = false;
  a->unbacked--;
  a->lazy_bytes -= r->size;
  a->st->dry_bytes -= r->size;
  for (ablk *b = r->first; b; b = b->next) {
    b->s.storage_id = id;
    if (!b->free && !b->s.mapped) {
      b->s.mapped = 1;
      a->base.pages_unmapped--;
    }
  }
  return CM_OK;
}

/* Block u, just placed in lazy segment r: unmapped under a dry run, else the
 * segment is allocated now (on failure u stays unmapped until materialized). */
static void seg_placed(arena *a, region *r, ablk *u) {
  if (dry_run(a) || seg_back(a, r, NULL) != CM_OK) {
    u->s.mapped = 0;
    a->base.pages_unmapped++;
  }
}

/* try_reserve on a fit whose range is counted as mapped while some granules
 * are virtual anywhere: memory counted by a dry run stays virtual under a dry
 * run (the slice is unmapped until materialized) and is backed now otherwise
 * (on failure NULL: alloc then reports the error). */
static __attribute__((noinline)) cm__slice *reserve_virt(arena *a, ablk *b, uint64_t s) {
  region *r = b->rg;
  if (!r->vm) {
    if (r->lazy && !dry_run(a) && seg_back(a, r, NULL) != CM_OK) return NULL;
    ablk *u = place(a, b, s);
    if (r->lazy) seg_placed(a, r, u);
    return &u->s;
  }
  uint64_t g0 = b->s.offset >> a->gshift, g1 = (b->s.offset + s - 1) >> a->gshift;
  bool unbacked = false;
  if (virt_in(a, r, g0, g1)) {
    if (dry_run(a)) unbacked = true;
    else if (map_range(a, r, g0, g1, false, false, NULL) != CM_OK) return NULL;
  }
  ablk *u = place(a, b, s);
  if (unbacked) {
    u->s.mapped = 0;
    a->base.pages_unmapped++;
  }
  return &u->s;
}

static cm__slice *try_reserve(cm__pool *p, uint64_t size, uint64_t eff) {
  arena *a = AR(p);
  (void)size;
  a->ops++;
  uint64_t s = span_of(a, eff);
  ablk *b = find_fit(a, s);
  if (!b) return NULL;
  region *r = b->rg;
  if (r->vm && !range_mapped(a, r, b->s.offset, s)) {
    if (!(b = find_mapped_fit(a, s, ALT_LIMIT))) return NULL;
  }
  if (__builtin_expect(a->unbacked != 0, 0)) return reserve_virt(a, b, s);
  return &place(a, b, s)->s;
}

/* Hysteresis budget: free mapped granules kept for reuse. */
static uint64_t keep_budget(const arena *a) { return KEEP_MIN + ((a->held >> a->gshift) >> KEEP_SHIFT) + a->regret; }

/* Dry run: would virtually mapping (or counting) `add` more bytes exceed the
 * device's free memory, as the storage reports it (unknown: never)? Memory a
 * dry run counted but did not map is not in the storage's figure. */
static bool dry_short(const arena *a, uint64_t add) {
  uint64_t free_b = 0, total = 0;
  if (cm_storage_mem_info(a->st, &free_b, &total) != CM_OK || total == 0) return false;
  uint64_t pending = a->st->dry_bytes; /* of every pool on this storage */
  return add > free_b || pending > free_b - add;
}

/* Would adding `add` bytes exceed the cap? */
static bool over_cap(const arena *a, uint64_t add) {
  uint64_t cap = a->base.opts.max_pool_size;
  return capped(a) && (add > cap || a->held > cap - add);
}

/* Map what placing span s at the low end of free block b needs; `lazy`: count
 * the granules as mapped without mapping them (dry run), with the very same
 * trimming and batching decisions, so a dry run places as an eager run does. */
static int map_for(arena *a, ablk *b, uint64_t s, bool lazy, cm_diag_t *diag) {
  region *r = b->rg;
  uint64_t g0 = b->s.offset >> a->gshift, g1 = (b->s.offset + s - 1) >> a->gshift;
  if (bits_all(r->mapped, g0, g1)) {
    if (!lazy && virt_in(a, r, g0, g1)) return map_range(a, r, g0, g1, false, false, diag);
    return CM_OK;
  }
  /* growth batching: extend over unmapped granules wholly inside this free block */
  uint64_t ext_max = (a->held >> a->gshift) >> EXT_SHIFT;
  uint64_t end = (b->s.offset + b->s.span) >> a->gshift; /* granules below `end` are inside */
  uint64_t hi = g1;
  while (hi - g1 < ext_max && hi + 1 < end && !bit(r->mapped, hi + 1)) hi++;
  /* free mapped granules that stay free after the placement, beyond the budget, go first */
  uint64_t fm_out = a->free_mapped - fm_in(r, g0, g1);
  uint64_t budget = keep_budget(a);
  if (fm_out + (hi - g1) > budget) trim(a, fm_out + (hi - g1) - budget, r, g0, hi);
  uint64_t need = unmapped_in(r, g0, g1);
  if (over_cap(a, (need + hi - g1) << a->gshift)) {
    hi = g1;
    if (over_cap(a, need << a->gshift)) trim(a, UINT64_MAX, r, g0, g1);
    if (over_cap(a, need << a->gshift)) return cap_error(a, s, diag);
  }
  if (lazy && dry_short(a, (need + hi - g1) << a->gshift)) {
    /* a dry run meets the device's limit where an eager run would: the same
     * fallback as below, then the same error */
    hi = g1;
    if (dry_short(a, need << a->gshift)) trim(a, UINT64_MAX, r, g0, g1);
    if (dry_short(a, need << a->gshift))
      return cm__diag_set(diag, CM_EOOM,
                          "the device would be out of memory: %" PRIu64 " bytes to map for a "
                          "dry-run reservation of %" PRIu64 " bytes",
                          need << a->gshift, s);
  }
  int rc = map_range(a, r, g0, hi, false, lazy, diag);
  if (rc == CM_EOOM && !lazy) {
    /* The device is short. Growth ahead of the request and cached memory are
     * what can give: give back every other free mapped chunk, then map only
     * what the request needs. */
    uint64_t freed = trim(a, UINT64_MAX, r, g0, g1);
    if (freed || hi > g1) {
      if (diag) cm_diag_clear(diag);
      rc = map_range(a, r, g0, g1, false, false, diag);
    }
  }
  return rc;
}

static int alloc(cm__pool *p, uint64_t size, uint64_t eff, bool lazy, cm__slice **out,
                 cm_diag_t *diag) {
  arena *a = AR(p);
  uint64_t s = span_of(a, eff);
  ablk *b = find_fit(a, s);
  if (!b) {
    if (!a->vm) {
      /* segments that are entirely free cannot serve s: give them back first */
      for (uint32_t i = a->nregs; i-- > 0;)
        if (a->regs[i] && region_idle(a->regs[i])) region_release(a, i);
    }
    int rc = region_open(a, s, lazy, &b, diag);
    if (rc != CM_OK) return rc;
  }
  region *r = b->rg;
  if (r->vm) {
    int rc = map_for(a, b, s, lazy, diag);
    if (rc != CM_OK) {
      if (region_idle(r) && r->mapped_gran == 0 && r->first == b && b->s.span == r->size)
        region_release(a, b->region); /* a region opened for this call */
      return rc;
    }
  } else if (r->lazy && !lazy) {
    int rc = seg_back(a, r, diag); /* eager memory is always backed */
    if (rc != CM_OK) return rc;
  }
  ablk *u = place(a, b, s);
  if (r->vm ? lazy && virt_in(a, r, u->s.offset >> a->gshift,
                              (u->s.offset + u->s.span - 1) >> a->gshift)
            : r->lazy) {
    u->s.mapped = 0;
    p->pages_unmapped++;
  }
  (void)size;
  *out = &u->s;
  return CM_OK;
}

static void on_free(cm__pool *p, cm__slice *sl) {
  arena *a = AR(p);
  ablk *b = BLK(sl);
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
    uint64_t now = a->base.m->alloc_reserve_count;
    r->idle_since = now ? now : 1;
  }
}

static void take_free(cm__pool *p, cm__slice *sl) {
  arena *a = AR(p);
  ablk *b = BLK(sl);
  if (!b->free) return;
  bin_remove(a, b);
  region *r = b->rg;
  if (r->vm) {
    used_add(a, r, b->s.offset, b->s.span);
    uint64_t g0 = b->s.offset >> a->gshift, g1 = (b->s.offset + b->s.span - 1) >> a->gshift;
    bool lazy = dry_run(a);
    if (!bits_all(r->mapped, g0, g1) || (!lazy && virt_in(a, r, g0, g1))) {
      if (map_range(a, r, g0, g1, true, lazy, NULL) != CM_OK) {
        b->s.mapped = 0;
        p->pages_unmapped++;
      }
    }
    if (lazy && b->s.mapped && virt_in(a, r, g0, g1)) {
      b->s.mapped = 0;
      p->pages_unmapped++;
    }
  } else {
    r->idle_since = 0;
    if (r->lazy) seg_placed(a, r, b);
  }
}

static __attribute__((noinline)) void cleanup_slow(arena *a, uint64_t alloc_nr,
                                                  bool explicit_cleanup, uint64_t serving) {
  if (a->vm) {
    if (explicit_cleanup) {
      trim(a, UINT64_MAX, NULL, 1, 0);
    } else {
      uint64_t budget = keep_budget(a);
      if (a->low_free > budget) trim_objects(a, a->low_free - budget, false, NULL, 1, 0);
    }
  }
  for (uint32_t i = a->nregs; i-- > 0;) {
    region *r = a->regs[i];
    if (!r || !region_idle(r)) continue;
    if (r->vm) {
      if (explicit_cleanup && r->mapped_gran == 0) region_release(a, i);
    } else if (explicit_cleanup || (r->idle_since && r->idle_since <= a->last_trim &&
                                    (serving == UINT64_MAX || r->size < serving))) {
      region_release(a, i);
    }
  }
  if (!explicit_cleanup) a->last_trim = alloc_nr;
  a->low_free = a->free_mapped;
}

static void cleanup(cm__pool *p, uint64_t alloc_nr, bool explicit_cleanup, uint64_t serving) {
  arena *a = AR(p);
  a->alloc_nr = alloc_nr;
  if (explicit_cleanup || alloc_nr - a->last_trim >= a->period)
    cleanup_slow(a, alloc_nr, explicit_cleanup, serving);
  p->next_cleanup = a->period == UINT64_MAX ? UINT64_MAX : a->last_trim + a->period;
}

static int materialize(cm__pool *p, cm__slice *sl, cm_diag_t *diag) {
  arena *a = AR(p);
  ablk *b = BLK(sl);
  if (b->s.mapped) return CM_OK;
  region *r = b->rg;
  if (!r->vm) {
    int rc = r->lazy ? seg_back(a, r, diag) : CM_OK;
    if (rc != CM_OK)
      return cm__diag_set(diag, CM_EMAPPING, "cannot allocate a %" PRIu64 " bytes segment for a "
                          "lazily reserved slice (StorageMappingFailed): %s", r->size,
                          cm_strerror(rc));
    return CM_OK;
  }
  uint64_t g0 = b->s.offset >> a->gshift, g1 = (b->s.offset + b->s.span - 1) >> a->gshift;
  /* granules counted already (virtual) are only backed now; any that are
   * not counted (a failed map while pinning) must pass the cap first */
  uint64_t add = unmapped_in(r, g0, g1) << a->gshift;
  if (add && over_cap(a, add)) trim(a, UINT64_MAX, r, g0, g1);
  int rc = add && over_cap(a, add) ? cap_error(a, b->s.span, diag)
                                   : map_range(a, r, g0, g1, true, false, diag);
  if (rc != CM_OK)
    return cm__diag_set(diag, CM_EMAPPING, "cannot map %" PRIu64 " bytes for a lazily reserved "
                        "slice (StorageMappingFailed): %s", b->s.span, cm_strerror(rc));
  b->s.mapped = 1;
  p->pages_unmapped--;
  return CM_OK;
}

static void locate(const cm__pool *p, const cm__slice *s, cm_location_t *out) {
  (void)p;
  out->page = BLK((cm__slice *)s)->region;
  out->slice = 0;
}

/* ---- check ------------------------------------------------------------------------- */

#define BAD(...)                                                          \
  do {                                                                    \
    if (bad++ == 0 && diag && !diag->message[0])                          \
      cm__diag_set(diag, CM_ECORRUPT, "arena pool: " __VA_ARGS__);        \
  } while (0)

static size_t check(cm__pool *p, cm_diag_t *diag) {
  arena *a = AR(p);
  size_t bad = 0;
  cm_usage_t u = {0};
  uint64_t held = 0, nfree = 0, fmapped = 0, unmapped_used = 0, regions = 0, virt = 0,
           lazy_segs = 0;
  for (uint32_t ri = 0; ri < a->nregs; ri++) {
    region *r = a->regs[ri];
    if (!r) continue;
    regions++;
    lazy_segs += r->lazy;
    uint32_t *cnt = NULL;
    uint64_t *cover = NULL;
    /* Granules at or above `lim` hold no used block and lie above `top`: they
     * are checked with word-level scans below, so a check costs the live part
     * of the region, not its whole reserved range. */
    uint64_t lim = 0;
    if (r->vm) {
      lim = r->top < r->ngran ? r->top : r->ngran;
      for (ablk *b = r->first; b; b = b->next)
        if (!b->free) {
          uint64_t g1 = (b->s.offset + b->s.span - 1) >> a->gshift;
          if (g1 + 1 > lim) lim = g1 + 1 < r->ngran ? g1 + 1 : r->ngran;
        }
      cnt = calloc(lim ? lim : 1, sizeof *cnt);
      cover = calloc((lim + 63) / 64 + 1, sizeof *cover);
      if (!cnt || !cover) {
        free(cnt);
        free(cover);
        return bad;
      }
    }
    uint64_t off = 0;
    ablk *prev = NULL;
    for (ablk *b = r->first; b; prev = b, b = b->next) {
      if (b->prev != prev) BAD("broken address links in region %u", ri);
      if (b->region != ri) BAD("block in region %u says region %u", ri, b->region);
      if (b->s.offset != off) BAD("gap or overlap at offset %" PRIu64 " in region %u", off, ri);
      if (b->s.storage_id != r->id) BAD("block storage id differs from its region");
      if (b->s.span == 0) BAD("empty block");
      if (!b->s.desc || b->s.desc->slice != &b->s) BAD("descriptor does not point at its block");
      off = b->s.offset + b->s.span;
      if (b->free) {
        nfree++;
        if (b->s.used) BAD("free block marked used");
        if (prev && prev->free) BAD("two adjacent free blocks at %" PRIu64, b->s.offset);
        if (b->bin != bin_of(b->s.span)) BAD("free block in the wrong bin");
      } else if (!b->s.used) {
        BAD("block neither free nor used");
      } else {
        u.number_allocs++;
        u.bytes_in_use += b->s.size;
        u.bytes_padding += b->s.padding;
        if (b->s.size + b->s.padding > b->s.span) BAD("slice larger than its block");
        if (!b->s.mapped) unmapped_used++;
        if (!r->vm && b->s.mapped == r->lazy)
          BAD("used block mapped state differs from its segment's");
        if (r->vm) {
          uint64_t g0 = b->s.offset >> a->gshift, g1 = (off - 1) >> a->gshift;
          cnt[g0]++;
          if (g1 != g0) cnt[g1]++;
          for (uint64_t g = g0; g <= g1; g++) cover[g / 64] |= 1ull << (g % 64);
          if (b->s.mapped && !bits_all(r->mapped, g0, g1)) BAD("used block not mapped");
          if (b->s.mapped && r->virt && !bits_none(r->virt, g0, g1))
            BAD("used block on virtual granules");
        }
      }
    }
    if (off != r->size) BAD("blocks cover %" PRIu64 " of %" PRIu64 " bytes", off, r->size);
    if (r->vm) {
      uint64_t mg = 0;
      if (lim < r->ngran) {
        if (!bits_none(r->mapped, lim, r->ngran - 1)) BAD("mapped granule above top");
        if (!bits_none(r->fm, lim, r->ngran - 1)) BAD("fm bit above top");
        if (r->virt && !bits_none(r->virt, lim, r->ngran - 1)) BAD("virtual granule above top");
        for (uint64_t g = lim; g < r->ngran; g++)
          if (r->cnt[g]) BAD("granule %" PRIu64 " above the last used block has count %u", g,
                             r->cnt[g]);
      }
      for (uint64_t g = 0; g < lim; g++) {
        bool m = bit(r->mapped, g), c = (cover[g / 64] >> (g % 64)) & 1;
        mg += m;
        if (r->virt && bit(r->virt, g)) {
          virt++;
          if (!m) BAD("virtual granule %" PRIu64 " not counted as mapped", g);
        }
        if (bit(r->fm, g) != (m && !c)) BAD("fm bit of granule %" PRIu64 " wrong", g);
        fmapped += bit(r->fm, g);
        if (cnt[g] != r->cnt[g]) BAD("granule %" PRIu64 " count %u, expected %u", g, r->cnt[g],
                                     cnt[g]);
        if (m && g >= r->top) BAD("mapped granule above top");
      }
      for (uint64_t g = 0; g < lim;) { /* objects tile the mapped granules, all real or all virtual */
        if (!bit(r->mapped, g)) {
          if (r->olen[g]) BAD("object recorded at unmapped granule %" PRIu64, g);
          g++;
          continue;
        }
        uint64_t n = r->olen[g];
        if (n == 0 || g + n > r->ngran) {
          BAD("mapped granule %" PRIu64 " starts no object", g);
          g++;
          continue;
        }
        if (n > a->omax) BAD("object at %" PRIu64 " larger than the object limit", g);
        bool v = r->virt && bit(r->virt, g);
        for (uint64_t x = g; x < g + n; x++) {
          if (!bit(r->mapped, x) || r->ostart[x] != g || (x > g && r->olen[x]))
            BAD("object at granule %" PRIu64 " broken at %" PRIu64, g, x);
          if ((r->virt && bit(r->virt, x)) != v) BAD("object at %" PRIu64 " partly virtual", g);
        }
        g += n;
      }
      if (mg != r->mapped_gran) BAD("mapped granule count");
      held += mg << a->gshift;
    } else {
      held += r->size;
    }
    free(cnt);
    free(cover);
  }
  uint64_t inbins = 0;
  for (uint32_t i = 0; i < NBINS; i++) {
    bool has = a->heads[i] != NULL;
    if (has != (((a->slmap[i / SLN] >> (i % SLN)) & 1) != 0)) BAD("bin bitmap mismatch");
    for (ablk *b = a->heads[i]; b; b = b->fnext) {
      inbins++;
      if (!b->free || b->bin != i) BAD("bin list holds a wrong block");
      if (b->fnext && b->fnext->fprev != b) BAD("broken bin links");
    }
  }
  for (uint32_t g = 0; g < NFL; g++)
    if (((a->flmap >> g) & 1) != (a->slmap[g] != 0)) BAD("first-level bitmap mismatch");
  if (inbins != nfree) BAD("%" PRIu64 " free blocks, %" PRIu64 " in bins", nfree, inbins);
  if (fmapped != a->free_mapped) BAD("free mapped %" PRIu64 ", counted %" PRIu64, a->free_mapped,
                                     fmapped);
  if ((a->vm ? virt : lazy_segs) != a->unbacked)
    BAD("unbacked %" PRIu64 ", counted %" PRIu64 " virtual granules, %" PRIu64 " lazy segments",
        a->unbacked, virt, lazy_segs);
  if (held != a->held) BAD("held %" PRIu64 ", recomputed %" PRIu64, a->held, held);
  if (held != p->usage.bytes_reserved) BAD("bytes_reserved %" PRIu64 ", recomputed %" PRIu64,
                                           p->usage.bytes_reserved, held);
  if (u.number_allocs != p->usage.number_allocs || u.bytes_in_use != p->usage.bytes_in_use ||
      u.bytes_padding != p->usage.bytes_padding)
    BAD("usage differs from the blocks (%" PRIu64 " allocs, %" PRIu64 " bytes)", u.number_allocs,
        u.bytes_in_use);
  if (unmapped_used != p->pages_unmapped) BAD("pages_unmapped mismatch");
  if (regions != p->pages) BAD("pages %" PRIu64 ", regions %" PRIu64, p->pages, regions);
  return bad;
}

static size_t display(cm__pool *p, char *buf, size_t cap) {
  arena *a = AR(p);
  size_t len = 0;
  if (p->pages == 0) return 0;
  char b1[32], b2[32];
  OUT(buf, cap, len, " - Arena Pool %s", a->vm ? "vm" : "segments");
  if (p->opts.max_alloc_size) OUT(buf, cap, len, " max_alloc_size=%" PRIu64, p->opts.max_alloc_size);
  if (p->opts.has_max_pool_size) OUT(buf, cap, len, " max_pool_size=%" PRIu64, p->opts.max_pool_size);
  OUT(buf, cap, len, "\n");
  for (uint32_t i = 0; i < a->nregs; i++) {
    region *r = a->regs[i];
    if (!r) continue;
    uint64_t used = 0, nfree = 0, n = 0;
    for (ablk *b = r->first; b; b = b->next) {
      n++;
      if (b->free) nfree++;
      else used += b->s.span;
    }
    cm_format_bytes(r->vm ? r->mapped_gran << a->gshift : r->size, b1, sizeof b1);
    cm_format_bytes(used, b2, sizeof b2);
    OUT(buf, cap, len,
        "   - Region StorageId(%" PRIu64 ") blocks=%" PRIu64 " (%" PRIu64
        " free) => %s used - %s reserved\n",
        r->id, n, nfree, b2, b1);
  }
  char tmp[512];
  cm_usage_display(&p->usage, tmp, sizeof tmp);
  OUT(buf, cap, len, "\n%s", tmp);
  return len;
}

static void for_each(cm__pool *p, void (*fn)(cm__slice *, void *), void *arg) {
  arena *a = AR(p);
  for (uint32_t i = 0; i < a->nregs; i++) {
    region *r = a->regs[i];
    if (!r) continue;
    for (ablk *b = r->first, *n; b; b = n) {
      n = b->next;
      fn(&b->s, arg);
    }
  }
}

static void destroy(cm__pool *p) {
  arena *a = AR(p);
  a->st->dry_bytes -= a->vm ? a->unbacked << a->gshift : a->lazy_bytes; /* they vanish */
  for (uint32_t i = 0; i < a->nregs; i++) {
    region *r = a->regs[i];
    if (!r) continue;
    for (ablk *b = r->first, *n; b; b = n) {
      n = b->next;
      node_drop(b);
    }
    if (r->vm) {
      batch ub = {0, 0, 0};
      for (uint64_t g = 0; g < r->top;) { /* object by object; virtual ones were never mapped */
        if (!bit(r->mapped, g)) {
          g++;
          continue;
        }
        uint64_t n = r->olen[g];
        if (backed(r, g)) unmap_add(a, r, &ub, g, n);
        g += n ? n : 1;
      }
      unmap_flush(a, r, &ub);
      (void)cm__storage_vm_release(a->st, r->id, r->size, NULL); /* failures counted there */
    } else if (!r->lazy) {
      cm_storage_dealloc(a->st, r->id, r->size);
    }
    region_free_mem(r);
  }
  cm__pool_reserved_add(p, -(int64_t)a->held);
  cm__pool_pages_add(p, -(int64_t)p->pages);
  while (a->spare) {
    ablk *n = a->spare;
    a->spare = n->fnext;
    node_drop(n);
  }
  free(a->regs);
  free(a);
}

static const cm__pool_vt k_arena_vt = {
    .name = "arena",
    .accept = accept,
    .try_reserve = try_reserve,
    .alloc = alloc,
    .on_free = on_free,
    .take_free = take_free,
    .cleanup = cleanup,
    .materialize = materialize,
    .locate = locate,
    .check = check,
    .display = display,
    .for_each = for_each,
    .destroy = destroy,
};

int cm__pool_arena_new(struct cm_manager *m, const cm_pool_options_t *o, uint8_t pos,
                       cm__pool **out) {
  arena *a = calloc(1, sizeof *a);
  if (!a) return CM_ENOMEM;
  a->base.vt = &k_arena_vt;
  a->base.m = m;
  a->base.position = pos;
  a->base.opts = *o;
  a->base.opts.kind = CM_POOL_ARENA;
  a->base.alignment = m->props.alignment ? m->props.alignment : 1;
  a->st = m->storage;
  uint64_t g = cm__storage_vm_granularity(a->st);
  if (g && (g & (g - 1)) == 0) {
    a->vm = true;
    a->gran = g;
    a->gshift = (unsigned)__builtin_ctzll(g);
    /* the largest physical object, in granules (0 = OBJECT_MAX_DEFAULT) */
    uint64_t om = o->max_object_size ? o->max_object_size : OBJECT_MAX_DEFAULT;
    om = (om + g - 1) >> a->gshift;
    a->omax = om == 0 ? 1 : om > UINT32_MAX ? UINT32_MAX : om;
  }
  a->period = o->has_dealloc_period ? o->dealloc_period : DEFAULT_PERIOD;
  if (a->period == 0) a->period = UINT64_MAX;
  *out = &a->base;
  return CM_OK;
}
