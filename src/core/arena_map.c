/*
 * arena_map.c - the arena's physical memory (pool_arena.c's header comment,
 * "Physical objects" and "Mapping"): objects, batched storage calls, trims,
 * mapping a range (eager or virtual), and what a placement maps, with the
 * out-of-memory fallback and the dry run's device limit.
 */
#include "core/arena.h"

int cm__arena_cap_error(arena *a, uint64_t size, cm_diag_t *diag) {
  return cm__diag_set(diag, CM_ECAPACITY,
                      "arena pool %u is at capacity: %" PRIu64 " bytes requested, %" PRIu64
                      " of %" PRIu64 " bytes reserved, %" PRIu64 " in use (PoolCapacityExceeded)",
                      (unsigned)a->base.position, size, a->held, a->base.opts.max_pool_size,
                      a->base.usage.bytes_in_use);
}

/* ---- physical memory objects (VM regions) --------------------------------------------
 * Every mapped granule belongs to one object: a run of granules mapped by one
 * storage vm_map (one physical object, one mapping), recorded at its first
 * granule (olen) and in every granule (ostart). The driver unmaps mappings
 * only whole, so an object is unmapped only when all its granules are free.
 * A map creates one object per run of unmapped granules, cut as its plan
 * says (objects: every omax granules, block-owned granules apart). Under a
 * dry run the same objects are recorded but stay virtual;
 * backing one maps it whole, so an object is either all virtual or all real. */


/* Storage-unmap a batch of objects. A failure is counted by the storage
 * (stats.errors) and the granules are taken as unmapped here: memory the
 * driver may still hold is never handed out again (mapping it anew would fail
 * instead of aliasing), and the storage frees what it holds when destroyed. */
void cm__arena_unmap_flush(arena *a, region *r, batch *b) {
  if (!b->n) return;
  (void)cm__storage_vm_unmap(a->st, r->id, b->s << a->gshift, b->n << a->gshift,
                             b->piece << a->gshift, NULL);
  b->n = 0;
}

/* Add object [s, s+n) to an unmap batch of r, flushing what cannot join. */
void cm__arena_unmap_add(arena *a, region *r, batch *b, uint64_t s, uint64_t n) {
  if (b->n && !((b->s + b->n == s || s + n == b->s) && b->piece == n)) cm__arena_unmap_flush(a, r, b);
  if (!b->n) *b = (batch){s, 0, n};
  if (s < b->s) b->s = s;
  b->n += n;
}

/* Unmap object s of r (all its granules free and mapped) through batch b (the
 * caller flushes it). A virtual object is only uncounted. */
static void unmap_object(arena *a, region *r, uint64_t s, batch *b) {
  uint64_t n = r->olen[s], hi = s + n - 1;
  CM_ASSERT(n > 0 && bits_all(r->fm, s, hi)); /* R9: only whole free objects go */
  if (__builtin_expect(!(a->unbacked && r->virt && bit(r->virt, s)), 1)) {
    cm__arena_unmap_add(a, r, b, s, n);
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
 * (UINT64_MAX: every free object); the last object may go beyond `want`, so a
 * trim that bounds the cache before a map gives back a free object larger
 * than the excess whole rather than keep it (what a loop needs again raises
 * the budget instead). Objects meeting granules [ex_lo, ex_hi] of region ex
 * stay. Returns how many granules were unmapped. */
uint64_t cm__arena_trim(arena *a, uint64_t want, const region *ex, uint64_t ex_lo, uint64_t ex_hi) {
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
      done += oe - os + 1;
      unmap_object(a, r, os, &b);
    }
    cm__arena_unmap_flush(a, r, &b);
    if (r->mapped_gran == 0) r->top = 0;
  }
  return done;
}

/* End of the object that a map starting at unmapped granule g creates inside
 * [g, hi]: the run of unmapped granules, cut after ob->omax of them; granules
 * [own_lo, own_hi] (those a block being placed covers whole, while the device
 * has room) form one object of their own. */
static inline uint64_t object_end(const objects *ob, const region *r, uint64_t g, uint64_t hi) {
  uint64_t e = g, lim;
  if (__builtin_expect(g >= ob->own_lo && g <= ob->own_hi, 0)) {
    lim = hi < ob->own_hi ? hi : ob->own_hi; /* granules one block owns: one object */
  } else {
    lim = hi - g + 1 < ob->omax ? hi : g + ob->omax - 1;
    if (g < ob->own_lo && lim >= ob->own_lo && ob->own_lo <= ob->own_hi) lim = ob->own_lo - 1;
  }
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

static int walk_objects(arena *a, region *r, const objects *ob, uint64_t lo, uint64_t hi,
                        bool anyv, uint64_t stop, object_fn fn, void *arg) {
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
    uint64_t e = object_end(ob, r, g, hi);
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
  cm__arena_unmap_add(a, r, arg, s, n);
  return 0;
}

/* Map every unmapped granule of [lo, hi] in r, in the objects `ob` says. `covered`: the range lies
 * inside a used block (else the new granules are free until the caller
 * places a block). `lazy` (dry run): the granules are counted exactly as
 * mapped ones, in the same objects, but only marked virtual, with no storage
 * call. Otherwise every object meeting the range that is not backed yet
 * (virtual ones included, whole) is mapped in the storage; virtual granules
 * were counted already, so backing them changes no accounting. On failure
 * every object mapped here is unmapped again and nothing changes. */
static int map_range(arena *a, region *r, const objects *ob, uint64_t lo, uint64_t hi,
                     bool covered, bool lazy, cm_diag_t *diag) {
  uint64_t regret = 0;
  bool anyv = virt_in(a, r, lo, hi);
  if (!lazy) {
    map_arg m = {diag, {0, 0, 0}, 0, CM_OK};
    if (walk_objects(a, r, ob, lo, hi, anyv, UINT64_MAX, map_one, &m) || map_flush(a, r, &m)) {
      batch u = {0, 0, 0}; /* bits are unchanged: the same walk finds what was mapped */
      (void)walk_objects(a, r, ob, lo, hi, anyv, m.failed_at, unmap_one, &u);
      cm__arena_unmap_flush(a, r, &u);
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
    uint64_t e = object_end(ob, r, g, hi); /* the object the storage walk made */
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
    *a->base.ctx.dry_ledger += n << a->gshift;
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

int cm__arena_map_range(arena *a, region *r, uint64_t lo, uint64_t hi, bool covered, bool lazy,
                        cm_diag_t *diag) {
  objects ob = objects_default(a);
  return map_range(a, r, &ob, lo, hi, covered, lazy, diag);
}

/* Does `add` more bytes fit free_b bytes of free device memory, less what dry
 * runs counted without mapping? *left: free memory after `add` (0 if not). */
static bool fits_free(const arena *a, uint64_t free_b, uint64_t add, uint64_t *left) {
  uint64_t pending = *a->base.ctx.dry_ledger;
  bool fits = pending <= free_b && add <= free_b - pending;
  *left = fits ? free_b - pending - add : 0;
  return fits;
}

/* Does `add` more bytes fit the device's free memory, as the storage reports
 * it less what dry runs counted without mapping (the dry-run ledger, every
 * pool of the manager)? So an eager and a dry run of one sequence see the same
 * figure. Returns false when the storage does not report its memory;
 * otherwise *fits, *left (free memory after `add`) and *total. */
static bool device_fits(const arena *a, uint64_t add, bool *fits, uint64_t *left, uint64_t *total) {
  uint64_t free_b = 0;
  if (cm_storage_mem_info(a->st, &free_b, total) != CM_OK || *total == 0) return false;
  *fits = fits_free(a, free_b, add, left);
  return true;
}

/* Dry run: would virtually mapping (or counting) `add` more bytes exceed the
 * device's free memory (unknown: never)? */
bool cm__arena_dry_short(const arena *a, uint64_t add) {
  bool fits;
  uint64_t left, total;
  return device_fits(a, add, &fits, &left, &total) && !fits;
}

/* Would the device stay more than half free after mapping `need` more
 * granules (the default's larger objects)? Unknown
 * capacity: no. The device's memory is asked (cuMemGetInfo on CUDA) once every
 * ROOM_REFRESH decisions, and again whenever the answer lies within
 * total >> ROOM_MARGIN_SHIFT of the half-free line; in between, the last
 * answer less what this storage has taken since (its bytes_held: every pool
 * on it). That is exact for memory this process takes through the storage, so
 * on the simulated device every decision is the one a query would give, and
 * eager and dry runs decide alike; what other processes take is seen at the
 * next query, and near the line at once. */
bool cm__arena_has_room(arena *a, uint64_t need) {
  uint64_t held = cm__storage_held(a->st);
  bool fresh = false;
  for (;;) {
    if (a->room_uses == 0) {
      uint64_t f = 0, t = 0;
      if (cm_storage_mem_info(a->st, &f, &t) != CM_OK) t = 0;
      a->room_free = f;
      a->room_total = t;
      a->room_held = held;
      a->room_uses = ROOM_REFRESH;
      fresh = true;
    }
    a->room_uses--;
    uint64_t total = a->room_total, free_b = a->room_free;
    if (total == 0) return false; /* the storage does not report its memory */
    if (held >= a->room_held) { /* taken since the query: less free */
      uint64_t took = held - a->room_held;
      free_b = took < free_b ? free_b - took : 0;
    } else {
      free_b += a->room_held - held; /* given back since */
    }
    uint64_t left, half = total / 2, margin = total >> ROOM_MARGIN_SHIFT;
    bool fits = fits_free(a, free_b, need << a->gshift, &left);
    a->room_above = fits && left > half ? left - half : 0;
    bool near = left > half ? left - half <= margin : half - left <= margin;
    if (fresh || !near) return fits && left > half;
    a->room_uses = 0; /* close to the line: ask the device */
  }
}

/* The default's growth while it holds (the device has room): held >> 
 * HOLD_STEP_SHIFT bytes, at least HOLD_STEP_MIN, at most the device's memory
 * >> HOLD_STEP_MAX_SHIFT, in granules. So the number of growths is
 * logarithmic in the peak, and what one partly used growth keeps from a trim
 * near the capacity stays a sliver of the device. */
static uint64_t hold_step(const arena *a) {
  uint64_t s = a->held >> HOLD_STEP_SHIFT, mx = a->room_above >> HOLD_STEP_MAX_SHIFT;
  if (s < HOLD_STEP_MIN) s = HOLD_STEP_MIN;
  if (s > mx) s = mx;
  s >>= a->gshift;
  return s ? s : 1;
}

/* What map_for decides for a placement of span s at offset o (granules
 * [g0, g1], `need` of them unmapped), and then executes. */
typedef struct map_plan {
  objects ob;    /* the objects the map makes */
  uint64_t step; /* growth: map up to g0 + step - 1 when the free block allows (0: none) */
  bool hold;     /* the default holds: the trim budget is the release threshold */
} map_plan;

/* The policy. While the device has room the default holds what it maps (no
 * trim before a map) and grows by whole steps (hold_step): one object per
 * growth, or a block of whole granules of at least a quarter step as its own
 * object. Otherwise (and near the capacity) objects of the configured size,
 * with the hysteresis trim. */
static map_plan plan_map(arena *a, uint64_t o, uint64_t s, uint64_t g0, uint64_t g1,
                         uint64_t need) {
  map_plan p = {objects_default(a), 0, false};
  if (!a->owned || !cm__arena_has_room(a, need)) return p;
  p.hold = true;
  p.step = hold_step(a);
  bool whole = s >= a->gran && !((o | s) & (a->gran - 1)); /* on a granule boundary */
  bool large = (g1 - g0 + 1) * 4 >= p.step;                 /* no growth beyond it */
  if (large) p.step = 0;
  if (whole) { /* the block's granules (and the growth beyond a small one): one object */
    p.ob.own_lo = g0;
    p.ob.own_hi = large ? g1 : UINT64_MAX - 1;
  } else if (a->room_above >= (a->room_total >> 1) - (a->room_total >> ROOMY_SHIFT)) {
    p.ob.omax = UINT32_MAX; /* 1 - 2^-ROOMY_SHIFT stays free: the growth is one object */
  } else { /* granules shared with neighbours: small objects; the growth: one object */
    if (a->room_omax > p.ob.omax) p.ob.omax = a->room_omax;
    uint64_t n = g1 - g0 + 1, q = n >> PIECES_SHIFT; /* at most ~2^PIECES_SHIFT objects a block */
    /* a block large against the room left: objects of the configured size,
     * so none is kept whole later by a neighbour touching one of its granules
     * (not when the owner relocates: its moves empty pieces whole, and
     * measured better with them) */
    if ((n << PIECES_ROOM_SHIFT) > (a->room_above >> a->gshift) && !a->base.ctx.relocate) q = 0;
    if (q > p.ob.omax) p.ob.omax = q;
    if (!large) {
      p.ob.own_lo = g1 + 1;
      p.ob.own_hi = UINT64_MAX - 1;
    }
  }
  return p;
}

/* Map what placing span s in free block b at offset o (place_off's) needs, as plan_map
 * decides; `lazy`: count the granules as mapped without mapping them (dry
 * run), with the very same trimming and batching decisions, so a dry run
 * places as an eager run does. */
int cm__arena_map_for(arena *a, ablk *b, uint64_t s, uint64_t o, bool lazy, cm_diag_t *diag) {
  region *r = b->rg;
  uint64_t g0 = o >> a->gshift, g1 = (o + s - 1) >> a->gshift;
  if (bits_all(r->mapped, g0, g1)) {
    if (!lazy && virt_in(a, r, g0, g1)) return cm__arena_map_range(a, r, g0, g1, false, false, diag);
    return CM_OK;
  }
  uint64_t need = unmapped_in(r, g0, g1); /* the trims below keep [g0, hi] */
  map_plan p = plan_map(a, o, s, g0, g1, need);
  /* placement's end choice (place_off) from here on: while the pool holds
   * what it maps nothing goes back, so blocks pack from the low end */
  a->ends = !p.hold && !a->base.ctx.relocate;
  /* growth batching (requests under a granule: a run of them would map one
   * granule each): extend over unmapped granules wholly inside this free block */
  uint64_t ext_max = s >= a->gran ? 0 : (a->held >> a->gshift) >> EXT_SHIFT;
  uint64_t end = (b->s.offset + b->s.span) >> a->gshift; /* granules below `end` are inside */
  uint64_t hi = g1;
  while (hi - g1 < ext_max && hi + 1 < end && !bit(r->mapped, hi + 1)) hi++;
  if (p.step) { /* growth by whole steps: the default holding */
    uint64_t want = g0 + p.step - 1;
    while (hi < want && hi + 1 < end && !bit(r->mapped, hi + 1)) hi++;
  }
  /* free mapped granules that stay free after the placement, beyond the budget,
   * go first (while holding: beyond the release threshold, when one is set) */
  uint64_t budget = p.hold ? a->keep : keep_budget(a);
  if (budget != UINT64_MAX) {
    uint64_t fm_out = a->free_mapped - fm_in(r, g0, g1);
    if (fm_out + (hi - g1) > budget) cm__arena_trim(a, fm_out + (hi - g1) - budget, r, g0, hi);
  }
  if (over_cap(a, (need + hi - g1) << a->gshift)) {
    hi = g1;
    if (over_cap(a, need << a->gshift)) cm__arena_trim(a, UINT64_MAX, r, g0, g1);
    if (over_cap(a, need << a->gshift)) return cm__arena_cap_error(a, s, diag);
  }
  if (lazy && cm__arena_dry_short(a, (need + hi - g1) << a->gshift)) {
    /* a dry run meets the device's limit where an eager run would: the same
     * fallback as below, then the same error */
    hi = g1;
    if (cm__arena_dry_short(a, need << a->gshift)) cm__arena_trim(a, UINT64_MAX, r, g0, g1);
    if (cm__arena_dry_short(a, need << a->gshift))
      return cm__diag_set(diag, CM_EOOM,
                          "the device would be out of memory: %" PRIu64 " bytes to map for a "
                          "dry-run reservation of %" PRIu64 " bytes",
                          need << a->gshift, s);
  }
  int rc = map_range(a, r, &p.ob, g0, hi, false, lazy, diag);
  if (rc == CM_EOOM && !lazy) {
    /* The device is short. Growth ahead of the request and cached memory are
     * what can give: give back every other free mapped object, then map only
     * what the request needs, in objects of the configured size (ones that
     * can be given back granule by granule). */
    uint64_t freed = cm__arena_trim(a, UINT64_MAX, r, g0, g1);
    if (freed || hi > g1) {
      if (diag) cm_diag_clear(diag);
      rc = cm__arena_map_range(a, r, g0, g1, false, false, diag);
    }
  }
  return rc;
}
