/*
 * arena_stitch.c - stitched slices: the arena's last resort when the device
 * refuses memory (pool.h's alloc_tight, after the best fit, the pools'
 * release, relocation when on, and the placement that maps the fewest
 * granules all failed).
 *
 * Why. Under pressure the memory that stands between a job and a smaller
 * device is the free part of granules that live blocks only partly fill
 * (bench/results/below_fit.md): a hole that starts in the middle of a
 * granule after a live block has that granule's free tail, one that ends in
 * the middle of a granule before a live block has its free head. A request
 * larger than the hole cannot use them where they lie. But the physical
 * object behind such a granule can be mapped a second time at another
 * address (the CUDA driver allows any number of mappings of one physical
 * allocation: cuMemRetainAllocationHandle, cuMemMap, cuMemSetAccess;
 * storage.h's vm_alias), and there the tail can start a new slice and the
 * head end it.
 *
 * What. A stitched slice of span s gets a reservation of its own: granule 0
 * aliases a donor granule whose free tail of t bytes the slice starts in
 * (at offset G - t), then `fresh` new granules are mapped (one object), and
 * the last granule aliases a donor granule whose free head the slice ends
 * in. Either alias may be missing. The bytes the slice uses in each donor
 * granule become a donor block in the donor's region: a used block no one
 * was handed (cm__slice.index == DONOR_MARK), so no other placement takes
 * them, the granule's count keeps it from every trim, and the checker's
 * granule counts hold as for any used block. Freeing the slice removes the
 * aliases, unmaps the new granules, gives the reservation back and frees the
 * donor blocks (which merge with their free neighbours as any block does).
 *
 * Choice. Donors are the free blocks of VM regions whose low end lies
 * inside a granule that a live block touches (a tail) or whose high end
 * does (a head); the granule must be a physical object of its own, backed
 * (not virtual), so one alias maps exactly it. With the largest tail and
 * the largest head the fewest new granules is computed; the slice is made
 * only when that is fewer than every placement inside a region needs
 * (`bneed`), with the fewest aliases that reach it, and then from the
 * smallest donors that reach it (the larger free parts stay for later).
 * Cold: one scan of the free blocks.
 *
 * Not made: in dry runs (nothing is mapped there), when the storage has no
 * vm_alias, while relocation guards are held (alloc_tight is not in the
 * guarded entries). A stitched slice never moves: relocation skips donor
 * blocks (arena_reloc.c's movable), and stitched slices are not blocks of
 * any region.
 */
#include "core/arena.h"

/* The donor granule g of r can be aliased: touched by a live block, backed,
 * a physical object of exactly one granule, not guarded. */
static bool donor_ok(const region *r, uint64_t g) {
  return r->cnt[g] && backed(r, g) && r->ostart[g] == g && r->olen[g] == 1 &&
         !(r->gcnt && r->gcnt[g]);
}

/* The free tail (bytes from b's start to the end of its granule) of free
 * block b when b can donate it, else 0. */
static uint64_t tail_of(const arena *a, const ablk *b) {
  uint64_t m = a->gran - 1, o = b->s.offset;
  if (!(o & m)) return 0;
  uint64_t t = a->gran - (o & m);
  return b->s.span >= t && donor_ok(b->rg, o >> a->gshift) ? t : 0;
}

/* The free head (bytes from the start of the granule of b's end to that
 * end) of free block b when b can donate it, else 0. */
static uint64_t head_of(const arena *a, const ablk *b) {
  uint64_t m = a->gran - 1, e = b->s.offset + b->s.span;
  if (!(e & m)) return 0;
  uint64_t h = e & m;
  return b->s.span >= h && donor_ok(b->rg, e >> a->gshift) ? h : 0;
}

/* New granules a slice of span s needs with a tail of t bytes and a head of
 * up to h bytes (0: none); *hp = the bytes it then uses of the head (0: the
 * head is not needed). UINT64_MAX when the pair cannot serve s. */
static uint64_t fresh_for(const arena *a, uint64_t s, uint64_t t, uint64_t h, uint64_t *hp) {
  *hp = 0;
  if (s <= t) return UINT64_MAX; /* it fits in the hole itself: not a stitch */
  uint64_t rest = s - t, m = a->gran - 1;
  if (!h) return (rest >> a->gshift) + ((rest & m) != 0);
  if (rest <= h) { /* the two aliases alone */
    *hp = rest;
    return 0;
  }
  uint64_t k = ((rest - h) >> a->gshift) + (((rest - h) & m) != 0);
  *hp = rest - (k << a->gshift); /* in (0, h] unless whole granules cover the rest */
  return k;
}

typedef struct pick {
  ablk *tb, *hb;  /* donor free blocks (NULL: none) */
  uint64_t t, hp; /* bytes used of the tail, of the head */
  uint64_t fresh;
} pick;

/* Choose the donors for span s (see the header); false when no stitch maps
 * fewer than bneed new granules. */
static bool choose(arena *a, uint64_t s, uint64_t bneed, pick *out) {
  uint64_t tmax = 0, hmax = 0;
  for (uint32_t i = 0; i < NBINS; i = next_bin(a, i)) {
    for (ablk *b = a->heads[i]; b; b = b->fnext) {
      if (!b->rg->vm) continue;
      uint64_t t = tail_of(a, b), h = head_of(a, b);
      if (t > tmax) tmax = t;
      if (h > hmax) hmax = h;
    }
  }
  if (!tmax && !hmax) return false;
  /* the fewest new granules, then the fewest aliases: tail only, head only, both */
  uint64_t hp, kt = tmax ? fresh_for(a, s, tmax, 0, &hp) : UINT64_MAX;
  uint64_t kh = hmax ? fresh_for(a, s, 0, hmax, &hp) : UINT64_MAX;
  if (kh != UINT64_MAX && !hp) kh = UINT64_MAX; /* no head used: no stitch at all */
  uint64_t kb = tmax && hmax ? fresh_for(a, s, tmax, hmax, &hp) : UINT64_MAX;
  if (kb != UINT64_MAX && !hp) kb = UINT64_MAX; /* the head is not needed: tail only */
  uint64_t k = kt < kh ? kt : kh;
  if (kb < k) k = kb;
  if (k == UINT64_MAX || k >= bneed) return false;
  bool use_t = k == kt || (k != kh && k == kb), use_h = k != kt;
  /* the smallest donors that still reach k: the tail first (with the
   * largest head when both), then the smallest head for what is left */
  pick p = {NULL, NULL, 0, 0, k};
  for (uint32_t i = 0; i < NBINS; i = next_bin(a, i)) {
    for (ablk *b = a->heads[i]; b; b = b->fnext) {
      if (!b->rg->vm) continue;
      uint64_t t = use_t ? tail_of(a, b) : 0;
      if (t && (!p.tb || t < p.t) && fresh_for(a, s, t, use_h ? hmax : 0, &hp) == k &&
          (!use_h || hp)) {
        p.tb = b;
        p.t = t;
      }
    }
  }
  if (use_h) {
    (void)fresh_for(a, s, p.t, hmax, &p.hp);
    uint64_t hbest = 0;
    for (uint32_t i = 0; i < NBINS; i = next_bin(a, i)) {
      for (ablk *b = a->heads[i]; b; b = b->fnext) {
        if (!b->rg->vm) continue;
        uint64_t h = head_of(a, b);
        bool same = p.tb && b->rg == p.tb->rg &&
                    (b->s.offset + b->s.span) >> a->gshift == p.tb->s.offset >> a->gshift;
        if (h >= p.hp && !same && (!p.hb || h < hbest)) {
          p.hb = b;
          hbest = h;
        }
      }
    }
  }
  if ((use_t && !p.tb) || (use_h && !p.hb)) return false; /* cannot happen: tmax/hmax qualify */
  *out = p;
  return true;
}

/* Carve the donor block [off, off+len) from free block b; NULL when the
 * host is out of memory for a node (nothing changes then). */
static ablk *carve_donor(arena *a, ablk *b, uint64_t off, uint64_t len) {
  ablk *u = cm__arena_place_at(a, b, len, off);
  if (u->s.offset != off || u->s.span != len) { /* host OOM: the whole block was taken */
    cm__arena_free_block(a, u);
    return NULL;
  }
  u->s.index = DONOR_MARK;
  u->s.used = 1;
  u->s.size = u->s.padding = 0;
  return u;
}

static void donor_free(arena *a, ablk *d) {
  d->s.index = 0;
  d->s.used = 0;
  cm__arena_free_block(a, d);
}

int cm__arena_stitch(arena *a, uint64_t s, uint64_t bneed, cm__slice **out, cm_diag_t *diag) {
  if (!a->vm || !cm__storage_has_alias(a->st)) return CM_EOOM;
  /* a request no device or region could hold keeps its error */
  uint64_t free_b = 0, total = 0;
  if (s > (MAX_REGION_GRANULES << a->gshift) - 2 * a->gran ||
      (cm_storage_mem_info(a->st, &free_b, &total) == CM_OK && total && s > total))
    return CM_EOOM;
  pick p;
  if (!choose(a, s, bneed, &p) || over_cap(a, p.fresh << a->gshift)) return CM_EOOM;
  uint64_t G = a->gran;
  stitch *st = calloc(1, sizeof *st);
  if (!st) return cm__diag_set(diag, CM_ENOMEM, "out of host memory");
  if (!cm__slice_new_desc(&a->base, &st->s)) {
    free(st);
    return cm__diag_set(diag, CM_ENOMEM, "out of host memory");
  }
  uint64_t ng = p.fresh + (p.tb ? 1 : 0) + (p.hb ? 1 : 0);
  st->size = ng << a->gshift;
  st->fresh_off = p.tb ? G : 0;
  st->fresh = p.fresh;
  uint64_t head_at = st->fresh_off + (p.fresh << a->gshift);
  uint64_t tg = p.tb ? p.tb->s.offset >> a->gshift : 0;
  uint64_t hg = p.hb ? (p.hb->s.offset + p.hb->s.span) >> a->gshift : 0;
  int rc = cm__storage_vm_reserve(a->st, st->size, &st->id, diag);
  if (rc != CM_OK) goto fail;
  bool fresh_on = false, tail_on = false, head_on = false;
  if (p.fresh) {
    rc = cm__storage_vm_map(a->st, st->id, st->fresh_off, p.fresh << a->gshift,
                            p.fresh << a->gshift, diag);
    if (rc != CM_OK) goto undo;
    fresh_on = true;
  }
  if (p.tb) {
    rc = cm__storage_vm_alias(a->st, st->id, 0, p.tb->rg->id, tg << a->gshift, G, G, diag);
    if (rc != CM_OK) goto undo;
    tail_on = true;
  }
  if (p.hb) {
    rc = cm__storage_vm_alias(a->st, st->id, head_at, p.hb->rg->id, hg << a->gshift, G, G, diag);
    if (rc != CM_OK) goto undo;
    head_on = true;
  }
  /* the donor blocks: the tail from the hole's start, the head from its granule's start */
  if (p.tb && !(st->donor[0] = carve_donor(a, p.tb, p.tb->s.offset, p.t))) goto nomem;
  if (p.hb) {
    /* when both lie in one hole, the tail's carving (from its low end) left
     * the hole's free rest in the same node */
    uint64_t off = hg << a->gshift;
    ablk *b = p.hb;
    CM_ASSERT(b->free && b->s.offset <= off && b->s.offset + b->s.span >= off + p.hp);
    if (!(st->donor[1] = carve_donor(a, b, off, p.hp))) goto nomem;
  }
  a->held += p.fresh << a->gshift;
  cm__pool_reserved_add(&a->base, (int64_t)(p.fresh << a->gshift));
  st->s.storage_id = st->id;
  st->s.offset = p.tb ? G - p.t : 0;
  st->s.span = s;
  st->s.pool = a->base.position;
  st->s.mapped = 1;
  st->s.index = STITCH_MARK;
  st->next = a->stitches;
  if (st->next) st->next->prev = st;
  a->stitches = st;
  a->nstitches++;
  a->stitches_made++;
  *out = &st->s;
  return CM_OK;
nomem:
  if (st->donor[0]) donor_free(a, st->donor[0]);
  rc = cm__diag_set(diag, CM_ENOMEM, "out of host memory");
undo:
  if (head_on) (void)cm__storage_vm_unalias(a->st, st->id, head_at, G, G, NULL);
  if (tail_on) (void)cm__storage_vm_unalias(a->st, st->id, 0, G, G, NULL);
  if (fresh_on)
    (void)cm__storage_vm_unmap(a->st, st->id, st->fresh_off, p.fresh << a->gshift,
                               p.fresh << a->gshift, NULL);
  (void)cm__storage_vm_release(a->st, st->id, st->size, NULL); /* failures are counted there */
fail:
  cm__desc_detach(st->s.desc);
  free(st);
  return rc;
}

/* Remove st's mappings and give back its reservation (failures are counted
 * by the storage). */
static void stitch_unmap(arena *a, stitch *st) {
  uint64_t G = a->gran;
  if (st->donor[1])
    (void)cm__storage_vm_unalias(a->st, st->id, st->fresh_off + (st->fresh << a->gshift), G, G,
                                 NULL);
  if (st->donor[0]) (void)cm__storage_vm_unalias(a->st, st->id, 0, G, G, NULL);
  if (st->fresh)
    (void)cm__storage_vm_unmap(a->st, st->id, st->fresh_off, st->fresh << a->gshift,
                               st->fresh << a->gshift, NULL);
  (void)cm__storage_vm_release(a->st, st->id, st->size, NULL);
  a->held -= st->fresh << a->gshift;
  cm__pool_reserved_add(&a->base, -(int64_t)(st->fresh << a->gshift));
  if (st->prev) st->prev->next = st->next;
  else a->stitches = st->next;
  if (st->next) st->next->prev = st->prev;
  a->nstitches--;
}

void cm__arena_stitch_free(arena *a, cm__slice *sl) {
  stitch *st = (stitch *)sl;
  stitch_unmap(a, st);
  for (int i = 0; i < 2; i++)
    if (st->donor[i]) donor_free(a, st->donor[i]);
  cm__desc_detach(st->s.desc);
  free(st);
}

void cm__arena_stitch_destroy(arena *a) {
  while (a->stitches) {
    stitch *st = a->stitches;
    stitch_unmap(a, st); /* the donor blocks go with their regions */
    cm__desc_detach(st->s.desc);
    free(st);
  }
}
