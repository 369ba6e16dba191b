/*
 * pool_arena.c - the arena pool (CM_POOL_ARENA), cubemem's default: one
 * offset allocator over large storage regions, with physical memory mapped
 * only where live data is.
 *
 * Regions. With a storage that has virtual memory (power-of-two granule G),
 * a region is one reserved address range (page_size when given, else twice
 * the device memory - 8 x max_page_size - and at least 2^17 granules, 256 GiB
 * at 2 MiB: address space is cheap, so only physical memory limits a
 * request; at most 2^19 granules) whose granules
 * are mapped on demand; reserved bytes are the mapped granules. Without VM
 * support a region is a segment obtained with cm_storage_alloc and counts
 * whole. A request that fits no region opens a new one. Caps (max_pool_size)
 * bound the mapped or allocated bytes; max_alloc_size (0 = none) bounds
 * requests; zero-byte requests take one alignment unit.
 *
 * Physical objects (storage.h's contract, the CUDA driver's). Memory is
 * mapped as physical objects that are unmapped only whole: each run mapped is
 * cut into objects as the map's plan says (arena_map.c's map_plan: objects of
 * at most max_object_size, a strict cap when given). The default is one granule, so any free granule can be given back,
 * except while the device stays more than half free after the map: then the
 * default HOLDS what it maps (no trim before a map, no periodic trim: a
 * second run of the same job makes no driver call) and grows by steps of
 * held/16 (at least 64 MiB, at most 1/128 of the free memory above half the
 * device, so steps shrink to a granule as the device fills; arena.h,
 * HOLD_STEP_*): a block of whole granules of at least a quarter step is one
 * object of its own (freed with it, so it goes back whole), and nothing is
 * mapped beyond it; a smaller block maps a whole step, one object (one
 * create, one map, one set-access). Near the half-free line the granules a
 * block shares with its neighbours are objects of up to total >>
 * OBJECT_ROOM_SHIFT bytes, so a trim under pressure can give them back (a
 * block's other granules: pieces of about a sixteenth of it, or single
 * granules when the block is more than a sixteenth of the free memory
 * above half the device and the manager does not relocate: its range is
 * carved again once it is freed, and a piece one later neighbour touches
 * could not go back);
 * while the device stays more than 1 - 2^-ROOMY_SHIFT free the whole growth
 * is one object. Whether the device stays more than half free is asked of the device every 64 such decisions and when
 * the answer is close to the line; in between, what the storage took since
 * is counted (has_room in arena_map.c). Under pressure (a map the device
 * refuses) every free object is given back before the request maps again.
 * Near the capacity, and when the device refuses memory, objects are the
 * configured size. Objects are recorded per granule
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
 * keeps its node and list position unless its bin changes. A span that is a
 * whole number of granules (VM regions) starts instead at the block's first
 * granule boundary when it still fits there (the part below stays free): it
 * then owns whole granules, so its free frees them for any later placement or
 * trim instead of leaving two boundary granules shared with its neighbours.
 * Any other span (VM regions) shares its end granules with its neighbours: it
 * is carved from the end of the block (low or high) whose end granules cost
 * less - already touched by a block in use (0), mapped and free (1), not
 * mapped (3); the low end on a tie (place_off), except, with the default
 * object size under pressure: a span under eight granules goes first to
 * the end where it touches fewer granules no block in use touches yet, and
 * one under two granules whose ends cost 1 either way to the end whose
 * partial granule has more free room.
 * So it fills the granules that
 * blocks in use pin anyway before it pins a free granule: under pressure
 * those partly used granules are the memory no trim can give back, and the
 * smallest device is decided there. Not while the pool holds what it maps
 * (the default on a device with room: nothing goes back then, and packing
 * from the low end keeps the unconstrained peak), so the choice is on from
 * the first map that does not hold until one that does (map_for sets
 * a->ends); and not when the manager relocates live data (its packing keeps
 * data compact from the low end, and placing low measured better with it).
 * The offset is decided once per
 * reservation: try_reserve and alloc pass it on to map_for and the carving.
 * Lists are LIFO, so placement depends only on the sequence of calls
 * (deterministic).
 *
 * Mapping (VM regions). Per granule: `mapped` and `fm` (free and mapped)
 * bits, and `cnt` = used blocks having the granule as their first or last
 * granule. A used block owns its interior granules alone, so only boundary
 * granules need counts: placing or freeing a block is O(1) counter updates
 * plus word-wide bit operations over its range. try_reserve succeeds only
 * with memory that is mapped already (the best fit, else a fitting block
 * whose range is mapped among the next ALT_LIMIT candidates); otherwise alloc
 * maps the best fit's missing runs (one call per run; for requests under a
 * granule extended by up to mapped/512 granules ahead inside the same free
 * block to batch growth: larger requests map exactly what they need).
 * Hysteresis: before mapping, free mapped granules beyond a budget are
 * unmapped, highest addresses first, whole free objects (the last may take
 * more than the excess), so the mapped total does not grow while
 * unused mapped memory sits elsewhere. The budget is 1 + mapped/256 granules
 * plus a feedback term: granules mapped again within REGRET_WINDOW
 * reservations of being trimmed raise it (capped at mapped/16), maps without
 * such regret let it decay; so a steady loop stops calling the driver once
 * its second iteration has re-mapped what the first trimmed. When the device
 * refuses a map (CM_EOOM), every other free mapped object is given back and
 * only the request's own granules are mapped again (then the manager gives
 * back the other pools' cached memory and retries once; when the device
 * still refuses, alloc_tight places the request where it needs the fewest
 * granules not mapped yet, a free block's low or high end, so a request that
 * fits next to a granule live blocks only partly fill is served rather than
 * refused; when no such placement saves a granule, a stitched slice maps the
 * memory of partly used granules a second time around new granules:
 * arena_stitch.c). The periodic
 * cleanup unmaps what stayed free for a whole period (low-water mark of the
 * free mapped count); the explicit cleanup unmaps everything free and gives
 * back address ranges with nothing in use.
 *
 * Dry runs (spec §6). A dry run meets the device's limit where an eager run
 * would: what it counted without mapping (the dry-run ledger of the pool
 * context, every pool of the manager) plus
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
 * from cm__pool_lazy_id; `unbacked` counts them): its slices are unmapped
 * until one is materialized or an eager reservation lands in it, which
 * allocates the segment and rewrites the id of every block (offsets stay).
 * A lazy segment is given back without a storage call.
 *
 * Descriptors. Each block keeps its descriptor; a block merged away goes to a
 * bounded spare list with its (unreferenced, owned) descriptor, and splits
 * reuse spares, so the steady state allocates no host memory.
 *
 * Invariants: R1-R10 (arena_check.c, docs/design.md): blocks tile each
 * region; no two adjacent free blocks; a free block is in the bin of its
 * span; usage and reserved bytes equal their recomputation; fm == mapped &
 * ~used, cnt matches the used blocks, mapped used blocks have every granule
 * mapped and none virtual; objects tile the mapped granules; virt is a subset
 * of mapped; `unbacked` equals the virtual granules / lazy segments.
 *
 * Files: arena.h (internals), pool_arena.c (regions, placement, the pool
 * interface), arena_map.c (objects, mapping, trims), arena_check.c (checker),
 * arena_stitch.c (stitched slices), arena_guard.c (guards), arena_reloc.c
 * (relocation plans).
 * Exports: cm__pool_arena_new.
 */
#include "core/arena.h"

/* ---- regions ---------------------------------------------------------------------- */


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
  free(r->gcnt);
  free(r);
}

/* Address space of a VM region when page_size is not given: generously more
 * than the device (address space is cheap; only physical memory should limit
 * a request): twice the device memory (max_page_size is a quarter of it),
 * at least REGION_DEFAULT. */
static uint64_t region_default(const arena *a) {
  uint64_t dev = a->base.ctx.max_page_size;
  uint64_t floor_ = REGION_DEFAULT_GRANULES << a->gshift;
  uint64_t size = dev <= floor_ / 8 ? floor_ : dev * 8;
  uint64_t cap = REGION_DEFAULT_MAX_GRANULES << a->gshift; /* bounds the per-granule metadata */
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
      *a->base.ctx.dry_ledger -= r->size;
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
        rc = cm__arena_cap_error(a, s, diag);
        goto fail;
      }
    }
    if (lazy) { /* dry run: counted now, allocated when first needed */
      if (cm__arena_dry_short(a, size) && size > s) size = s; /* as the eager fallback below */
      if (cm__arena_dry_short(a, size)) {
        rc = cm__diag_set(diag, CM_EOOM,
                          "the device would be out of memory: a %" PRIu64 " bytes segment for a "
                          "dry-run reservation of %" PRIu64 " bytes",
                          size, s);
        goto fail;
      }
      r->id = cm__pool_lazy_id(&a->base);
      r->lazy = true;
      a->unbacked++;
      a->lazy_bytes += size;
      *a->base.ctx.dry_ledger += size;
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

/* A fit whose placement (place_off_at, without the tie rule) is mapped already: scan up to `limit`
 * blocks of span >= s, bins upward; smallest such block wins, its offset in
 * *off. NULL if none was seen. */
static ablk *find_mapped_fit(arena *a, uint64_t s, int limit, uint64_t *off) {
  uint32_t i = bin_of(s);
  ablk *best = NULL;
  int n = 0;
  while (n < limit) {
    for (ablk *b = a->heads[i]; b && n < limit; b = b->fnext, n++) {
      if (b->s.span < s || (best && !better(b, best))) continue;
      region *r = b->rg;
      uint64_t o = place_off_at(a, b, s, false);
      if (!r->vm || range_mapped(a, r, o, s)) {
        best = b;
        *off = o;
      }
    }
    if (best) return best;
    i = next_bin(a, i);
    if (i == NBINS) return NULL;
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
  *a->base.ctx.dry_ledger -= r->size;
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
static __attribute__((noinline)) cm__slice *reserve_virt(arena *a, ablk *b, uint64_t s,
                                                          uint64_t o) {
  region *r = b->rg;
  if (!r->vm) {
    if (r->lazy && !dry_run(a) && seg_back(a, r, NULL) != CM_OK) return NULL;
    ablk *u = cm__arena_place_at(a, b, s, o);
    if (r->lazy) seg_placed(a, r, u);
    return &u->s;
  }
  uint64_t g0 = o >> a->gshift, g1 = (o + s - 1) >> a->gshift;
  bool unbacked = false;
  if (virt_in(a, r, g0, g1)) {
    if (dry_run(a)) unbacked = true;
    else if (cm__arena_map_range(a, r, g0, g1, false, false, NULL) != CM_OK) return NULL;
  }
  ablk *u = cm__arena_place_at(a, b, s, o);
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
  uint64_t off = place_off(a, b, s);
  if (r->vm && !range_mapped(a, r, off, s)) {
    if (!(b = find_mapped_fit(a, s, ALT_LIMIT, &off))) return NULL;
  }
  if (__builtin_expect(a->unbacked != 0, 0)) return reserve_virt(a, b, s, off);
  return &cm__arena_place_at(a, b, s, off)->s;
}

/* A request larger than the whole device can never be served: CM_EOOM at
 * once, without opening a region (whose metadata is proportional to its
 * size). Devices that do not report their memory are asked as before. */
static int beyond_device(const arena *a, uint64_t s, cm_diag_t *diag) {
  uint64_t free_b = 0, total = 0;
  if (cm_storage_mem_info(a->st, &free_b, &total) != CM_OK || total == 0 || s <= total)
    return CM_OK;
  return cm__diag_set(diag, CM_EOOM,
                      "device out of memory: %" PRIu64 " bytes requested from a device of %" PRIu64
                      " bytes",
                      s, total);
}

/* Carve span s at offset off of free block b, whose range is mapped (or
 * counted as mapped by a dry run): a slice on virtual granules (lazy) or in
 * a lazy segment stays unmapped until materialized. */
static cm__slice *place_mapped(arena *a, ablk *b, uint64_t s, uint64_t off, bool lazy) {
  region *r = b->rg;
  ablk *u = cm__arena_place_at(a, b, s, off);
  if (r->vm ? lazy && virt_in(a, r, u->s.offset >> a->gshift,
                              (u->s.offset + u->s.span - 1) >> a->gshift)
            : r->lazy) {
    u->s.mapped = 0;
    a->base.pages_unmapped++;
  }
  return &u->s;
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
    int rc = beyond_device(a, s, diag); /* before any metadata is made for it */
    if (rc == CM_OK) rc = region_open(a, s, lazy, &b, diag);
    if (rc != CM_OK) return rc;
  }
  region *r = b->rg;
  uint64_t off = place_off(a, b, s); /* once: mapping changes what place_off sees */
  if (r->vm) {
    int rc = cm__arena_map_for(a, b, s, off, lazy, diag);
    if (rc != CM_OK) {
      if (region_idle(r) && r->mapped_gran == 0 && r->first == b && b->s.span == r->size)
        region_release(a, b->region); /* a region opened for this call */
      return rc;
    }
  } else if (r->lazy && !lazy) {
    int rc = seg_back(a, r, diag); /* eager memory is always backed */
    if (rc != CM_OK) return rc;
  }
  *out = place_mapped(a, b, s, off, lazy);
  (void)size;
  return CM_OK;
}

/* pool.h's alloc_tight. Every free block of span >= s in a VM region is a
 * candidate at its low end and at its high end (and, for a whole number of
 * granules, at its first granule boundary); the one whose range has the
 * fewest granules not mapped yet wins (ties: the first seen, bins upward,
 * so the smaller block), when it has fewer than alloc's own placement. A
 * cold path: it scans every free block once. Not while guards are held
 * (arena_guard.c leaves it out of the guarded entries: it would ignore
 * them). */
static int alloc_tight(cm__pool *p, uint64_t size, uint64_t eff, bool lazy, cm__slice **out,
                       cm_diag_t *diag) {
  arena *a = AR(p);
  (void)size;
  if (!a->vm) return CM_EOOM;
  uint64_t s = span_of(a, eff), m = a->gran - 1, boff = 0, bneed = UINT64_MAX;
  ablk *best = NULL, *b0 = find_fit(a, s);
  if (b0 && b0->rg->vm) {
    uint64_t o = place_off(a, b0, s);
    bneed = unmapped_in(b0->rg, o >> a->gshift, (o + s - 1) >> a->gshift);
  }
  for (uint32_t i = bin_of(s); i != NBINS; i = next_bin(a, i)) {
    for (ablk *b = a->heads[i]; b; b = b->fnext) {
      if (b->s.span < s || !b->rg->vm) continue;
      uint64_t cand[3] = {b->s.offset, b->s.offset + b->s.span - s, 0};
      uint64_t al = (b->s.offset + m) & ~m;
      int n = 2;
      if (!(s & m) && al - b->s.offset <= b->s.span - s) cand[n++] = al;
      for (int k = 0; k < n; k++) {
        uint64_t o = cand[k];
        uint64_t need = unmapped_in(b->rg, o >> a->gshift, (o + s - 1) >> a->gshift);
        if (need < bneed) {
          bneed = need;
          best = b;
          boff = o;
        }
      }
    }
  }
  if (!lazy) { /* a stitched slice, when it maps fewer (dry runs: never, nothing is mapped) */
    int rc = cm__arena_stitch(a, s, bneed, out, diag);
    if (rc != CM_EOOM || !best) return rc;
  }
  if (!best) return CM_EOOM;
  int rc = cm__arena_map_for(a, best, s, boff, lazy, diag);
  if (rc != CM_OK) return rc;
  *out = place_mapped(a, best, s, boff, lazy);
  return CM_OK;
}

static void on_free(cm__pool *p, cm__slice *sl) {
  arena *a = AR(p);
  if (__builtin_expect(sl->index == STITCH_MARK, 0)) {
    cm__arena_stitch_free(a, sl);
    return;
  }
  cm__arena_free_block(a, BLK(sl));
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
      if (cm__arena_map_range(a, r, g0, g1, true, lazy, NULL) != CM_OK) {
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
      cm__arena_trim(a, UINT64_MAX, NULL, 1, 0);
    } else if (a->owned && cm__arena_has_room(a, 0)) {
      /* the default holds while it can: down to its release threshold, if set */
      if (a->keep != UINT64_MAX && a->free_mapped > a->keep)
        cm__arena_trim(a, a->free_mapped - a->keep, NULL, 1, 0);
    } else { /* what stayed free a whole period, beyond the hysteresis budget */
      uint64_t budget = keep_budget(a);
      if (a->low_free > budget) cm__arena_trim(a, a->low_free - budget, NULL, 1, 0);
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
  if (add && over_cap(a, add)) cm__arena_trim(a, UINT64_MAX, r, g0, g1);
  int rc = add && over_cap(a, add) ? cm__arena_cap_error(a, b->s.span, diag)
                                   : cm__arena_map_range(a, r, g0, g1, true, false, diag);
  if (rc != CM_OK)
    return cm__diag_set(diag, CM_EMAPPING, "cannot map %" PRIu64 " bytes for a lazily reserved "
                        "slice (StorageMappingFailed): %s", b->s.span, cm_strerror(rc));
  b->s.mapped = 1;
  p->pages_unmapped--;
  return CM_OK;
}

/* Free mapped granules (VM), or segments with nothing in use. */
static uint64_t cached(const cm__pool *p) {
  const arena *a = (const arena *)p;
  if (a->vm) return a->free_mapped << a->gshift;
  uint64_t n = 0;
  for (uint32_t i = 0; i < a->nregs; i++)
    if (a->regs[i] && !a->regs[i]->vm && region_idle(a->regs[i])) n += a->regs[i]->size;
  return n;
}

static void report(cm__pool *p, cm_pool_report_t *out) {
  const arena *a = AR(p);
  out->stitched = a->nstitches;
  out->stitched_made = a->stitches_made;
}

static void locate(const cm__pool *p, const cm__slice *s, cm_location_t *out) {
  (void)p;
  out->page = s->index == STITCH_MARK ? UINT32_MAX : BLK((cm__slice *)s)->region;
  out->slice = 0;
}

/* Every slice: the regions' blocks (donor blocks left out: no one holds
 * them), then the stitched slices. */
static void for_each(cm__pool *p, void (*fn)(cm__slice *, void *), void *arg) {
  arena *a = AR(p);
  for (uint32_t i = 0; i < a->nregs; i++) {
    region *r = a->regs[i];
    if (!r) continue;
    for (ablk *b = r->first, *n; b; b = n) {
      n = b->next;
      if (b->s.index != DONOR_MARK) fn(&b->s, arg);
    }
  }
  for (stitch *t = a->stitches, *n; t; t = n) {
    n = t->next;
    fn(&t->s, arg);
  }
}

static void destroy(cm__pool *p) {
  arena *a = AR(p);
  cm__arena_stitch_destroy(a); /* their aliases go before the objects they alias */
  *a->base.ctx.dry_ledger -= a->vm ? a->unbacked << a->gshift : a->lazy_bytes; /* they vanish */
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
        if (backed(r, g)) cm__arena_unmap_add(a, r, &ub, g, n);
        g += n ? n : 1;
      }
      cm__arena_unmap_flush(a, r, &ub);
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
    .cached = cached,
    .report = report,
    .check = cm__arena_check,
    .display = cm__arena_display,
    .for_each = for_each,
    .destroy = destroy,
    .reloc_plan = cm__arena_reloc_plan,
    .guard = cm__arena_guard,
    .explain_oom = cm__arena_explain_oom,
    .alloc_tight = alloc_tight,
};

int cm__pool_arena_new(const cm__pool_ctx *ctx, const cm_pool_options_t *o, uint8_t pos,
                       cm__pool **out) {
  arena *a = calloc(1, sizeof *a);
  if (!a) return CM_ENOMEM;
  cm__pool_base_init(&a->base, &k_arena_vt, ctx, pos);
  a->base.opts = *o;
  a->base.opts.kind = CM_POOL_ARENA;
  /* accept's bound (max_alloc_size + 1 wraps to 0 at UINT64_MAX: asked) */
  a->base.accept_below = o->max_alloc_size ? o->max_alloc_size + 1 : UINT64_MAX;
  a->st = ctx->storage;
  uint64_t g = cm__storage_vm_granularity(a->st);
  if (g && (g & (g - 1)) == 0) {
    a->vm = true;
    a->gran = g;
    a->gshift = (unsigned)__builtin_ctzll(g);
    /* the largest physical object, in granules (0 = OBJECT_MAX_DEFAULT) */
    uint64_t om = o->max_object_size ? o->max_object_size : OBJECT_MAX_DEFAULT;
    om = (om >> a->gshift) + ((om & (g - 1)) != 0); /* rounded up, without overflow */
    a->ocfg = om == 0 ? 1 : om > UINT32_MAX ? UINT32_MAX : om;
    a->owned = o->max_object_size == 0;
    a->keep = o->has_release_threshold ? o->release_threshold >> a->gshift : UINT64_MAX;
    uint64_t free_b = 0, total = 0;
    if (a->owned && cm_storage_mem_info(a->st, &free_b, &total) == CM_OK) {
      uint64_t n = (total >> OBJECT_ROOM_SHIFT) >> a->gshift;
      a->room_omax = n < UINT32_MAX ? n : UINT32_MAX;
    }
  }
  a->period = o->has_dealloc_period ? o->dealloc_period : DEFAULT_PERIOD;
  if (a->period == 0) a->period = UINT64_MAX;
  *out = &a->base;
  return CM_OK;
}
