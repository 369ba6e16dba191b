/*
 * arena_check.c - the arena's invariant checker (cm_manager_check) and its
 * display. Each violation names its invariant (docs/design.md lists them):
 *  R1 blocks tile each region in address order (links, region index,
 *     storage id, no gap, overlap or empty block);
 *  R2 every block is free or used, never both; no two adjacent free blocks;
 *  R3 a free block is in the bin of its span; the bin lists hold exactly the
 *     free blocks, with consistent links; the two-level bitmaps match them;
 *  R4 usage and unmapped pages equal the sums over the used blocks (a slice
 *     fits its block); pages equal the regions;
 *  R5 held and bytes_reserved equal the mapped granules plus the segments;
 *  R6 fm == mapped & ~used granules; free_mapped counts the fm bits; nothing
 *     is mapped above a region's top;
 *  R7 a granule's count is the number of used blocks having it as their
 *     first or last granule;
 *  R8 a mapped used block has every granule mapped and none virtual; a
 *     segment's used blocks are unmapped iff the segment is lazy;
 *  R9 objects tile the mapped granules, each all real or all virtual, none
 *     larger than the configured limit unless the default's own objects;
 *  R10 virtual granules are counted as mapped; unbacked equals the virtual
 *     granules (VM) or the lazy segments;
 *  R11 stitched slices (arena_stitch.c) are used and counted in the usage,
 *     their new granules in held; their donor blocks are used blocks of VM
 *     regions, each inside one backed single-granule object, with no usage
 *     of their own, and each belongs to exactly one stitched slice;
 *  M3 (the manager's) every block's descriptor points back at it.
 * CM_ASSERTs check R2, R3, R7 and R9 where bins and granules change (arena.h,
 * arena_map.c) in debug and sanitizer builds.
 */
#include "core/arena.h"

/* ---- check ------------------------------------------------------------------------- */

#define BAD(...)                                                          \
  do {                                                                    \
    if (bad++ == 0 && diag && !diag->message[0])                          \
      cm__diag_set(diag, CM_ECORRUPT, "arena pool: " __VA_ARGS__);        \
  } while (0)

size_t cm__arena_check(cm__pool *p, cm_diag_t *diag) {
  arena *a = AR(p);
  size_t bad = 0;
  cm_usage_t u = {0};
  uint64_t held = 0, nfree = 0, fmapped = 0, unmapped_used = 0, regions = 0, virt = 0,
           lazy_segs = 0, donors = 0;
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
      if (!cnt || !cover) { /* a check that cannot run must not say "healthy" */
        free(cnt);
        free(cover);
        if (diag && !diag->message[0])
          cm__diag_set(diag, CM_ENOMEM, "arena pool: the checker is out of host memory for "
                       "region %u; nothing was checked", ri);
        return bad + 1;
      }
    }
    uint64_t off = 0;
    ablk *prev = NULL;
    for (ablk *b = r->first; b; prev = b, b = b->next) {
      if (b->prev != prev) BAD("R1 broken address links in region %u", ri);
      if (b->region != ri) BAD("R1 block in region %u says region %u", ri, b->region);
      if (b->s.offset != off) BAD("R1 gap or overlap at offset %" PRIu64 " in region %u", off, ri);
      if (b->s.storage_id != r->id) BAD("R1 block storage id differs from its region");
      if (b->s.span == 0) BAD("R1 empty block");
      if (!b->s.desc || b->s.desc->slice != &b->s) BAD("M3 descriptor does not point at its block");
      off = b->s.offset + b->s.span;
      if (b->free) {
        nfree++;
        if (b->s.used) BAD("R2 free block marked used");
        if (prev && prev->free) BAD("R2 two adjacent free blocks at %" PRIu64, b->s.offset);
        if (b->bin != bin_of(b->s.span)) BAD("R3 free block in the wrong bin");
      } else if (!b->s.used) {
        BAD("R2 block neither free nor used");
      } else if (b->s.index == DONOR_MARK) { /* no one was handed it: no usage */
        donors++;
        if (!r->vm || b->s.size || b->s.padding) BAD("R11 donor block outside a VM region or sized");
        if (r->vm) {
          uint64_t g0 = b->s.offset >> a->gshift, g1 = (off - 1) >> a->gshift;
          if (g0 != g1 || !backed(r, g0) || r->ostart[g0] != g0 || r->olen[g0] != 1)
            BAD("R11 donor block at %" PRIu64 " not inside one granule object", b->s.offset);
          cnt[g0]++;
          if (g1 != g0) cnt[g1]++;
          for (uint64_t g = g0; g <= g1; g++) cover[g / 64] |= 1ull << (g % 64);
        }
      } else {
        u.number_allocs++;
        u.bytes_in_use += b->s.size;
        u.bytes_padding += b->s.padding;
        if (b->s.size + b->s.padding > b->s.span) BAD("R4 slice larger than its block");
        if (!b->s.mapped) unmapped_used++;
        if (!r->vm && b->s.mapped == r->lazy)
          BAD("R8 used block mapped state differs from its segment's");
        if (r->vm) {
          uint64_t g0 = b->s.offset >> a->gshift, g1 = (off - 1) >> a->gshift;
          cnt[g0]++;
          if (g1 != g0) cnt[g1]++;
          for (uint64_t g = g0; g <= g1; g++) cover[g / 64] |= 1ull << (g % 64);
          if (b->s.mapped && !bits_all(r->mapped, g0, g1)) BAD("R8 used block not mapped");
          if (b->s.mapped && r->virt && !bits_none(r->virt, g0, g1))
            BAD("R8 used block on virtual granules");
        }
      }
    }
    if (off != r->size) BAD("R1 blocks cover %" PRIu64 " of %" PRIu64 " bytes", off, r->size);
    if (r->vm) {
      uint64_t mg = 0;
      if (lim < r->ngran) {
        if (!bits_none(r->mapped, lim, r->ngran - 1)) BAD("R6 mapped granule above top");
        if (!bits_none(r->fm, lim, r->ngran - 1)) BAD("R6 fm bit above top");
        if (r->virt && !bits_none(r->virt, lim, r->ngran - 1)) BAD("R10 virtual granule above top");
        for (uint64_t g = lim; g < r->cnt_top && g < r->ngran; g++) /* above: never counted */
          if (r->cnt[g]) BAD("R7 granule %" PRIu64 " above the last used block has count %u", g,
                             r->cnt[g]);
      }
      for (uint64_t g = 0; g < lim; g++) {
        bool m = bit(r->mapped, g), c = (cover[g / 64] >> (g % 64)) & 1;
        mg += m;
        if (r->virt && bit(r->virt, g)) {
          virt++;
          if (!m) BAD("R10 virtual granule %" PRIu64 " not counted as mapped", g);
        }
        if (bit(r->fm, g) != (m && !c)) BAD("R6 fm bit of granule %" PRIu64 " wrong", g);
        fmapped += bit(r->fm, g);
        if (cnt[g] != r->cnt[g]) BAD("R7 granule %" PRIu64 " count %u, expected %u", g, r->cnt[g],
                                     cnt[g]);
        if (m && g >= r->top) BAD("R6 mapped granule above top");
      }
      for (uint64_t g = 0; g < lim;) { /* objects tile the mapped granules, all real or all virtual */
        if (!bit(r->mapped, g)) {
          if (r->olen[g]) BAD("R9 object recorded at unmapped granule %" PRIu64, g);
          g++;
          continue;
        }
        uint64_t n = r->olen[g];
        if (n == 0 || g + n > r->ngran) {
          BAD("R9 mapped granule %" PRIu64 " starts no object", g);
          g++;
          continue;
        }
        if (n > a->ocfg && !a->owned) BAD("R9 object at %" PRIu64 " larger than the object limit", g);
        bool v = r->virt && bit(r->virt, g);
        for (uint64_t x = g; x < g + n; x++) {
          if (!bit(r->mapped, x) || r->ostart[x] != g || (x > g && r->olen[x]))
            BAD("R9 object at granule %" PRIu64 " broken at %" PRIu64, g, x);
          if ((r->virt && bit(r->virt, x)) != v) BAD("R9 object at %" PRIu64 " partly virtual", g);
        }
        g += n;
      }
      if (mg != r->mapped_gran) BAD("R5 mapped granule count");
      held += mg << a->gshift;
    } else {
      held += r->size;
    }
    free(cnt);
    free(cover);
  }
  /* R11: each stitched slice is used, its donors are donor blocks of the
   * regions, each counted once; its new granules are held */
  uint64_t nst = 0, sdonors = 0;
  for (const stitch *t = a->stitches; t; t = t->next) {
    nst++;
    if (t->s.index != STITCH_MARK || !t->s.used || !t->s.mapped)
      BAD("R11 stitched slice not marked, used and mapped");
    if (!t->s.desc || t->s.desc->slice != &t->s) BAD("M3 descriptor does not point at its slice");
    if (t->next && t->next->prev != t) BAD("R11 broken stitch links");
    u.number_allocs++;
    u.bytes_in_use += t->s.size;
    u.bytes_padding += t->s.padding;
    if (t->s.size + t->s.padding > t->s.span) BAD("R4 slice larger than its block");
    if (t->s.offset + t->s.span > t->size) BAD("R11 stitched slice beyond its reservation");
    for (int i = 0; i < 2; i++) {
      const ablk *d = t->donor[i];
      if (!d) continue;
      sdonors++;
      if (d->free || d->s.index != DONOR_MARK) BAD("R11 stitch donor is not a donor block");
    }
    held += t->fresh << a->gshift;
  }
  if (nst != a->nstitches)
    BAD("R11 %" PRIu64 " stitched slices, %" PRIu64 " counted", nst, a->nstitches);
  if (sdonors != donors)
    BAD("R11 %" PRIu64 " donor blocks, %" PRIu64 " held by stitches", donors, sdonors);
  uint64_t inbins = 0;
  for (uint32_t i = 0; i < NBINS; i++) {
    bool has = a->heads[i] != NULL;
    if (has != (((a->slmap[i / SLN] >> (i % SLN)) & 1) != 0)) BAD("R3 bin bitmap mismatch");
    for (ablk *b = a->heads[i]; b; b = b->fnext) {
      inbins++;
      if (!b->free || b->bin != i) BAD("R3 bin list holds a wrong block");
      if (b->fnext && b->fnext->fprev != b) BAD("R3 broken bin links");
    }
  }
  for (uint32_t g = 0; g < NFL; g++)
    if (((a->flmap >> g) & 1) != (a->slmap[g] != 0)) BAD("R3 first-level bitmap mismatch");
  if (inbins != nfree) BAD("R3 %" PRIu64 " free blocks, %" PRIu64 " in bins", nfree, inbins);
  if (fmapped != a->free_mapped) BAD("R6 free mapped %" PRIu64 ", counted %" PRIu64, a->free_mapped,
                                     fmapped);
  if ((a->vm ? virt : lazy_segs) != a->unbacked)
    BAD("R10 unbacked %" PRIu64 ", counted %" PRIu64 " virtual granules, %" PRIu64 " lazy segments",
        a->unbacked, virt, lazy_segs);
  if (held != a->held) BAD("R5 held %" PRIu64 ", recomputed %" PRIu64, a->held, held);
  if (held != p->usage.bytes_reserved) BAD("R5 bytes_reserved %" PRIu64 ", recomputed %" PRIu64,
                                           p->usage.bytes_reserved, held);
  if (u.number_allocs != p->usage.number_allocs || u.bytes_in_use != p->usage.bytes_in_use ||
      u.bytes_padding != p->usage.bytes_padding)
    BAD("R4 usage differs from the blocks (%" PRIu64 " allocs, %" PRIu64 " bytes)", u.number_allocs,
        u.bytes_in_use);
  if (unmapped_used != p->pages_unmapped) BAD("R4 pages_unmapped mismatch");
  if (regions != p->pages) BAD("R4 pages %" PRIu64 ", regions %" PRIu64, p->pages, regions);
  return bad;
}

size_t cm__arena_display(cm__pool *p, char *buf, size_t cap) {
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
  for (const stitch *t = a->stitches; t; t = t->next) {
    cm_format_bytes(t->s.span, b2, sizeof b2);
    cm_format_bytes(t->fresh << a->gshift, b1, sizeof b1);
    OUT(buf, cap, len,
        "   - Stitched StorageId(%" PRIu64 ") => %s used - %s reserved, %d aliased granule%s\n",
        t->id, b2, b1, (t->donor[0] != NULL) + (t->donor[1] != NULL),
        (t->donor[0] != NULL) + (t->donor[1] != NULL) == 1 ? "" : "s");
  }
  char tmp[512];
  cm_usage_display(&p->usage, tmp, sizeof tmp);
  OUT(buf, cap, len, "\n%s", tmp);
  return len;
}

/* ---- why the device was short (pool.h's explain_oom) ------------------------------ */

/* The held bytes the live data does not use, in the two parts a trim cannot
 * give back: *partial, the free bytes of granules that used blocks only
 * partly fill (fragmentation: the mapped granules that are not free mapped,
 * fm, less the used blocks' spans), and *pinned, the free mapped granules of
 * physical objects that a used block still touches (an object goes back only
 * whole). VM regions; one pass over the blocks and one over the objects. */
static void held_unused(const arena *a, uint64_t *partial, uint64_t *pinned) {
  uint64_t touched = 0, used = 0, pin = 0;
  for (uint32_t ri = 0; ri < a->nregs; ri++) {
    const region *r = a->regs[ri];
    if (!r || !r->vm || r->top == 0) continue;
    touched += r->mapped_gran - fm_in(r, 0, r->top - 1);
    for (const ablk *b = r->first; b; b = b->next)
      if (!b->free && b->s.mapped) used += b->s.span;
    for (uint64_t g = 0; g < r->top;) {
      if (!cm__bit(r->mapped, g)) {
        g++;
        continue;
      }
      uint64_t o = r->ostart[g], n = r->olen[o] ? r->olen[o] : 1, fre = fm_in(r, o, o + n - 1);
      if (fre < n) pin += fre; /* a used block touches the object */
      g = o + n > g ? o + n : g + 1;
    }
  }
  *partial = (touched << a->gshift) - used;
  *pinned = pin << a->gshift;
}

size_t cm__arena_explain_oom(cm__pool *p, char *buf, size_t cap) {
  arena *a = AR(p);
  uint64_t partial = 0, pinned = 0;
  if (!a->vm || cap == 0) return 0;
  held_unused(a, &partial, &pinned);
  char h[32], l[32], f[32], o[32];
  cm_format_bytes(a->held, h, sizeof h);
  cm_format_bytes(p->usage.bytes_in_use, l, sizeof l);
  cm_format_bytes(partial, f, sizeof f);
  cm_format_bytes(pinned, o, sizeof o);
  size_t len = 0;
  OUT(buf, cap, len,
      "the arena holds %s for %s of live data: %s are the free parts of granules that live "
      "blocks only partly fill (fragmentation: %s)",
      h, l, f,
      a->base.ctx.relocate ? "relocation found no move that frees them"
                           : "allocations that cannot move keep them");
  if (pinned) {
    bool mib = (a->gran & ((1u << 20) - 1)) == 0;
    OUT(buf, cap, len,
        ", %s are free granules inside physical objects a live block still holds (the arena "
        "option object=%" PRIu64 "%s, max_object_size, lets every free granule go back)",
        o, a->gran >> (mib ? 20 : 10), mib ? "MiB" : "KiB");
  }
  return len;
}
