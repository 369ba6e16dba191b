/*
 * test_arena.c - the arena pool (CM_POOL_ARENA, pool_arena.c) and the
 * default layout (CM_PRESET_DEFAULT), through the public manager API.
 *
 * Storages: the simulated device (virtual memory with a small granule, so
 * that granule accounting is exercised with few bytes) and "plain", a
 * minimal backend without VM operations (the fixture), which forces the
 * arena's segment fallback and can be told to fail allocations.
 *
 * Scenarios: randomized model checks (random sizes and lifetimes; after
 * every operation cm_manager_check() must be clean, live ranges must not
 * overlap and the usage must equal the model's), placement (best fit, low
 * addresses, determinism, the end of a free block that fills touched granules), mapping (reserved = mapped granules, unmapping of
 * free memory, hysteresis: a steady loop maps nothing after its first
 * iteration), physical objects, caps, zero-byte and
 * size-limited requests, storage failures leaving the manager unchanged,
 * segment release, and the default preset itself. Dry runs are in
 * test_arena_dry.c; the helpers in tests/harness/cm_arena_fixture.h.
 * Exports: main (the test runner).
 */
#include "cm_arena_fixture.h"

/* ---- randomized model checks --------------------------------------------------- */

typedef struct live {
  cm_handle_t h;
  uint64_t size, addr;
} live_t;

static void model_run(cm_manager_t *m, int ops, uint64_t large, bool check_each) {
  enum { N = 160 };
  live_t v[N];
  memset(v, 0, sizeof v);
  uint64_t in_use = 0, count = 0;
  for (int i = 0; i < ops; i++) {
    size_t k = (size_t)(rnd() % N);
    if (v[k].h.d) {
      cm_handle_release(v[k].h);
      in_use -= v[k].size;
      count--;
      v[k].h.d = NULL;
    } else {
      uint64_t size = rnd_size(large);
      v[k].h = res(m, size);
      ASSERT(v[k].h.d != NULL);
      v[k].size = size;
      in_use += size;
      count++;
      cm_resource_t r = {0};
      cm_binding_t b = cm_handle_binding(v[k].h);
      ASSERT_OK(cm_manager_get_resource(m, b, 0, 0, &r, NULL));
      cm_binding_release(b);
      v[k].addr = r.addr;
      for (size_t j = 0; j < N; j++) { /* live ranges never overlap */
        if (j == k || !v[j].h.d || !size || !v[j].size) continue;
        bool apart = v[j].addr + v[j].size <= r.addr || r.addr + size <= v[j].addr;
        if (!apart) cm_test_fail(__FILE__, __LINE__, "op %d: overlap of slots %zu and %zu", i, k, j);
      }
    }
    if (check_each || i % 97 == 0) {
      CHECK_CLEAN(m);
      cm_usage_t u;
      cm_manager_usage(m, &u);
      EXPECT_EQ(u.bytes_in_use, in_use);
      EXPECT_EQ(u.number_allocs, count);
      EXPECT_EQ(u.bytes_reserved, held(m));
      EXPECT_GE(u.bytes_reserved, in_use);
    }
    if (i % 1000 == 999) cm_manager_cleanup(m, (rnd() & 1) != 0);
  }
  for (size_t j = 0; j < N; j++)
    if (v[j].h.d) cm_handle_release(v[j].h);
  CHECK_CLEAN(m);
}

static void random_vm_small_granule(void) {
  cm_manager_t *m = mk_arena(sim(0, false, 64 * KiB));
  ASSERT(m != NULL);
  model_run(m, 6000, 3 * MiB, true);
  cm_manager_cleanup(m, true);
  EXPECT_EQ(held(m), 0); /* everything free: every granule unmapped */
  EXPECT_EQ(reserved(m), 0);
  CHECK_CLEAN(m);
  cm_manager_destroy(m);
}

static void random_vm_default_granule(void) {
  cm_manager_t *m = mk_arena(sim(0, false, 0));
  ASSERT(m != NULL);
  model_run(m, 6000, 24 * MiB, false);
  cm_manager_destroy(m);
}

static void random_segments(void) {
  cm_manager_t *m = mk_arena(plain_storage(NULL));
  ASSERT(m != NULL);
  model_run(m, 6000, 6 * MiB, true);
  cm_manager_cleanup(m, true);
  EXPECT_EQ(held(m), 0); /* idle segments released */
  CHECK_CLEAN(m);
  cm_manager_destroy(m);
}

static void random_segments_fixed_page(void) {
  cm_pool_options_t o = arena();
  o.page_size = 4 * MiB; /* requests above it get a segment of their own */
  cm_manager_t *m = mk(plain_storage(NULL), &o, 1);
  ASSERT(m != NULL);
  model_run(m, 4000, 6 * MiB, true);
  cm_manager_destroy(m);
}

/* ---- placement ------------------------------------------------------------------- */

static void placement_low_end_and_best_fit(void) {
  cm_manager_t *m = mk_arena(sim(0, false, 0));
  ASSERT(m != NULL);
  cm_handle_t a = res(m, 1000), x = res(m, 100), b = res(m, 5000), c = res(m, 3000),
              d = res(m, 100);
  cm_storage_handle_t wa = where(m, a), wx = where(m, x), wb = where(m, b), wc = where(m, c),
                      wd = where(m, d);
  /* carved in order from the low end, each padded to the alignment (512) */
  EXPECT_EQ(wa.offset, 0);
  EXPECT_EQ(wx.offset, 1024);
  EXPECT_EQ(wb.offset, 1536);
  EXPECT_EQ(wc.offset, 1536 + 5120);
  EXPECT_EQ(wd.offset, 1536 + 5120 + 3072);
  EXPECT_EQ(wa.id, wd.id);
  /* two holes: [0, 1024) and [1536, 6656); 3000 bytes take the only one that
   * fits, then 900 bytes take the smallest fitting hole, a's */
  cm_handle_release(b);
  cm_handle_release(a);
  cm_handle_t e = res(m, 3000), f = res(m, 900);
  EXPECT_EQ(where(m, e).offset, 1536);
  EXPECT_EQ(where(m, f).offset, 0);
  CHECK_CLEAN(m);
  /* freeing everything coalesces: the next request starts at 0 again */
  cm_handle_release(x);
  cm_handle_release(c);
  cm_handle_release(d);
  cm_handle_release(e);
  cm_handle_release(f);
  cm_handle_t g = res(m, 64 * KiB);
  EXPECT_EQ(where(m, g).offset, 0);
  cm_handle_release(g);
  CHECK_CLEAN(m);
  cm_manager_destroy(m);
}

static void placement_exact_reuse(void) {
  cm_manager_t *m = mk_arena(sim(0, false, 0));
  ASSERT(m != NULL);
  cm_handle_t h[8];
  for (int i = 0; i < 8; i++) h[i] = res(m, 4096);
  uint64_t off5 = where(m, h[5]).offset;
  cm_handle_release(h[5]);
  cm_handle_t x = res(m, 4000); /* same effective size as the hole */
  EXPECT_EQ(where(m, x).offset, off5);
  cm_handle_release(x);
  for (int i = 0; i < 8; i++)
    if (i != 5) cm_handle_release(h[i]);
  CHECK_CLEAN(m);
  cm_manager_destroy(m);
}

static void placement_deterministic(void) {
  uint64_t offs[2][400];
  for (int run = 0; run < 2; run++) {
    rng_state = 12345;
    cm_manager_t *m = mk_arena(sim(0, false, 0));
    ASSERT(m != NULL);
    cm_handle_t v[64];
    memset(v, 0, sizeof v);
    for (int i = 0; i < 400; i++) {
      size_t k = (size_t)(rnd() % 64);
      if (v[k].d) cm_handle_release(v[k]);
      v[k] = res(m, rnd_size(8 * MiB));
      offs[run][i] = where(m, v[k]).offset;
    }
    for (int k = 0; k < 64; k++) cm_handle_release(v[k]);
    cm_manager_destroy(m);
  }
  EXPECT(memcmp(offs[0], offs[1], sizeof offs[0]) == 0);
}

/* A span of whole granules starts on a granule boundary when its free block
 * allows (the part below stays free for smaller requests); other spans are
 * carved from the low end. So freeing it frees whole granules: a trim gives
 * them back although the neighbours stay. */
static void placement_whole_granules(void) {
  cm_manager_t *m = mk_arena(sim(0, false, 0)); /* 2 MiB granules */
  ASSERT(m != NULL);
  cm_handle_t a = res(m, 4096);
  cm_handle_t b = res(m, 4 * MiB);
  EXPECT_EQ(offset_of(m, a), 0);
  EXPECT_EQ(offset_of(m, b), 2 * MiB);
  cm_handle_t c = res(m, 4096); /* best fit: the free part below b */
  EXPECT_EQ(offset_of(m, c), 4096);
  cm_handle_t d = res(m, 3 * MiB); /* not whole granules: right after b */
  EXPECT_EQ(offset_of(m, d), 6 * MiB);
  CHECK_CLEAN(m);
  uint64_t before = held(m);
  cm_handle_release(b);
  cm_manager_cleanup(m, true);
  EXPECT_EQ(held(m), before - 4 * MiB); /* both of b's granules went back */
  CHECK_CLEAN(m);
  cm_handle_release(a);
  cm_handle_release(c);
  cm_handle_release(d);
  cm_manager_destroy(m);
}

/* A span that is not a whole number of granules goes to the end of its free
 * block whose end granules cost less: one a block in use touches already
 * before a mapped free one (before an unmapped one), the low end on a tie.
 * So it fills granules pinned anyway, and a later span of whole granules
 * finds a whole free granule. Only once the arena maps without holding (here
 * a device that does not report its memory; the default holds while the
 * device stays more than half free, and then nothing goes back anyway), and
 * not with relocation on (the manager's packing keeps data compact): there
 * placement stays at the low end. */
static void placement_fills_touched_granules(void) {
  for (int mode = 0; mode < 3; mode++) { /* 0: no holding, 1: relocation, 2: holding */
    cm_pool_options_t o = arena();
    cm_manager_config_t cfg;
    cm_manager_config_init(&cfg);
    cfg.props = P;
    cfg.pools = &o;
    cfg.pool_count = 1;
    cfg.relocate = mode == 1;
    cm_manager_t *m = NULL; /* 2 MiB granules; mode 2: a roomy 64 GiB device */
    ASSERT_OK(cm_manager_create(sim(mode == 2 ? 64 * GiB : 0, mode == 2, 0), &cfg, &m, NULL));
    cm_handle_t a = res(m, 4 * MiB); /* granules 0-1 */
    cm_handle_t b = res(m, 3 * MiB); /* [4, 7) MiB: granules 2-3 */
    cm_handle_t c = res(m, 1 * MiB); /* [7, 8): granule 3, which b touches: the low end */
    cm_handle_t d = res(m, 1 * MiB); /* [8, 9) */
    EXPECT_EQ(offset_of(m, a), 0);
    EXPECT_EQ(offset_of(m, b), 4 * MiB);
    EXPECT_EQ(offset_of(m, c), 7 * MiB);
    EXPECT_EQ(offset_of(m, d), 8 * MiB);
    cm_handle_release(b); /* hole [4, 7): granule 2 mapped and free, granule 3 touched by c */
    uint64_t before = held(m);
    cm_handle_t e = res(m, 1 * MiB);
    cm_handle_t f = res(m, 2 * MiB);
    if (mode == 0) {
      EXPECT_EQ(offset_of(m, e), 6 * MiB); /* the high end: granule 3, touched by c */
      EXPECT_EQ(offset_of(m, f), 4 * MiB); /* granule 2 whole */
    } else {
      EXPECT_EQ(offset_of(m, e), 4 * MiB); /* the low end */
      EXPECT_EQ(offset_of(m, f), 5 * MiB); /* across granules 2 and 3 */
    }
    EXPECT_EQ(held(m), before); /* both in mapped granules: nothing mapped */
    CHECK_CLEAN(m);
    cm_handle_release(a);
    cm_handle_release(c);
    cm_handle_release(d);
    cm_handle_release(e);
    cm_handle_release(f);
    CHECK_CLEAN(m);
    cm_manager_destroy(m);
  }
}

/* A tie at cost 1 for a span under two granules (at either end of the hole
 * one end granule is touched by a block in use and the other is mapped and
 * free): the span goes to the end whose partial granule has more free room,
 * so it fills more of the memory blocks in use pin anyway. */
static void placement_tie_fills_larger_room(void) {
  for (int high = 0; high < 2; high++) {
    cm_pool_options_t o = arena();
    cm_manager_t *m = mk(sim(0, false, 0), &o, 1); /* 2 MiB granules, no holding */
    ASSERT(m != NULL);
    uint64_t xs = high ? 1 * MiB + 768 * KiB : 1 * MiB + 256 * KiB;
    cm_handle_t a = res(m, 4 * MiB);                 /* granules 0-1 */
    cm_handle_t x = res(m, xs);                      /* [4, 4 + xs): granule 2 */
    cm_handle_t f = res(m, 8 * MiB + 512 * KiB - 4 * MiB - xs); /* up to 8.5 MiB */
    cm_handle_t y = res(m, 1 * MiB);                 /* [8.5, 9.5): granule 4 */
    EXPECT_EQ(offset_of(m, x), 4 * MiB);
    EXPECT_EQ(offset_of(m, y), 8 * MiB + 512 * KiB);
    /* hole [4 + xs, 8.5): room in granule 2 above its start 0.25 MiB (high) or
     * 0.75 MiB (low), in granule 4 below its end 0.5 MiB; granule 3 mapped */
    cm_handle_release(f);
    uint64_t before = held(m);
    cm_handle_t e = res(m, 1 * MiB);
    EXPECT_EQ(offset_of(m, e), high ? 7 * MiB + 512 * KiB : 4 * MiB + xs);
    EXPECT_EQ(held(m), before); /* nothing mapped either way */
    CHECK_CLEAN(m);
    cm_handle_release(a);
    cm_handle_release(x);
    cm_handle_release(y);
    cm_handle_release(e);
    CHECK_CLEAN(m);
    cm_manager_destroy(m);
  }
}

/* Under pressure a span under PIN_SPAN_MAX granules goes to the end of its
 * hole where it touches fewer granules that no block in use touches yet,
 * even when the end costs tie (1 each way) and the span is too large for the
 * room rule: a 5 MiB span (2.5 granules) in the hole [5.75, 15.5) MiB takes
 * granules 2-5 at the low end (three new) but 5-7 at the high end (two
 * new); in the hole [4.5, 16.25) it takes 2-4 low (two new), 5-8 high
 * (three). */
static void placement_fewer_new_granules(void) {
  for (int high = 0; high < 2; high++) {
    cm_pool_options_t o = arena();
    cm_manager_t *m = mk(sim(0, false, 0), &o, 1); /* 2 MiB granules, no holding */
    ASSERT(m != NULL);
    uint64_t lo = high ? 5 * MiB + 768 * KiB : 4 * MiB + 512 * KiB; /* the hole's start */
    uint64_t hi = high ? 15 * MiB + 512 * KiB : 16 * MiB + 256 * KiB; /* ... and end */
    cm_handle_t a = res(m, 4 * MiB);      /* granules 0-1 */
    cm_handle_t x = res(m, lo - 4 * MiB); /* [4, lo): granule 2 */
    cm_handle_t f = res(m, hi - lo);      /* the hole-to-be */
    cm_handle_t y = res(m, 1 * MiB);      /* [hi, hi + 1): touches the hole's last granule */
    EXPECT_EQ(offset_of(m, f), lo);
    EXPECT_EQ(offset_of(m, y), hi);
    cm_handle_release(f);
    uint64_t before = held(m);
    cm_handle_t e = res(m, 5 * MiB);
    EXPECT_EQ(offset_of(m, e), high ? hi - 5 * MiB : lo);
    EXPECT_EQ(held(m), before); /* within mapped granules either way */
    CHECK_CLEAN(m);
    cm_handle_release(a);
    cm_handle_release(x);
    cm_handle_release(y);
    cm_handle_release(e);
    CHECK_CLEAN(m);
    cm_manager_destroy(m);
  }
}

static void zero_and_limits(void) {
  cm_pool_options_t o = arena();
  o.max_alloc_size = 1 * MiB;
  cm_manager_t *m = mk(sim(0, false, 0), &o, 1);
  ASSERT(m != NULL);
  cm_handle_t z1 = res(m, 0), z2 = res(m, 0);
  EXPECT(where(m, z1).offset != where(m, z2).offset); /* distinct slices */
  cm_handle_t h = {NULL};
  cm_diag_t d;
  memset(&d, 0, sizeof d);
  EXPECT_STATUS(cm_manager_reserve(m, 1 * MiB + 1, &h, &d), CM_ETOOBIG);
  EXPECT(h.d == NULL);
  cm_handle_t ok = res(m, 1 * MiB);
  cm_usage_t u;
  cm_manager_usage(m, &u);
  EXPECT_EQ(u.number_allocs, 3);
  EXPECT_EQ(u.bytes_in_use, 1 * MiB);
  cm_handle_release(z1);
  cm_handle_release(z2);
  cm_handle_release(ok);
  CHECK_CLEAN(m);
  cm_manager_destroy(m);
}

/* ---- virtual memory ---------------------------------------------------------------- */

static void vm_reserved_is_mapped_granules(void) {
  cm_manager_t *m = mk_arena(sim(0, false, 0)); /* 2 MiB granules */
  ASSERT(m != NULL);
  cm_handle_t a = res(m, 100);
  EXPECT_EQ(held(m), 2 * MiB); /* one granule for a tiny request */
  EXPECT_EQ(reserved(m), 2 * MiB);
  cm_handle_t b = res(m, 5 * MiB); /* [512, 512 + 5 MiB) spans granules 0..2 */
  EXPECT_EQ(held(m), 6 * MiB);
  EXPECT_EQ(stats(m).allocs, 0); /* nothing but maps */
  EXPECT_GE(stats(m).maps, 2);
  cm_pool_report_t r;
  ASSERT_OK(cm_manager_pool_report(m, 0, &r));
  EXPECT_EQ(r.pages, 1); /* one address range */
  EXPECT_EQ(r.usage.bytes_reserved, 6 * MiB);
  cm_handle_release(a);
  cm_handle_release(b);
  CHECK_CLEAN(m);
  cm_manager_cleanup(m, true);
  EXPECT_EQ(held(m), 0);
  CHECK_CLEAN(m);
  cm_manager_destroy(m);
}

static void vm_unmaps_before_growing(void) {
  /* Phase 1 holds 64 blocks of 4 MiB, every other one freed: 128 MiB of
   * free mapped holes that a 16 MiB request cannot use. Mapping for phase 2
   * unmaps them first, so bytes held stay near the live bytes. */
  cm_manager_t *m = mk_arena(sim(0, false, 0));
  ASSERT(m != NULL);
  cm_handle_t h[64];
  for (int i = 0; i < 64; i++) h[i] = res(m, 4 * MiB);
  for (int i = 0; i < 64; i += 2) cm_handle_release(h[i]);
  uint64_t live = 32 * 4 * MiB;
  cm_handle_t big[8];
  for (int i = 0; i < 8; i++) big[i] = res(m, 16 * MiB);
  live += 8 * 16 * MiB;
  CHECK_CLEAN(m);
  EXPECT_LE(held(m), live + live / 16);
  EXPECT_GT(stats(m).unmaps, 0);
  for (int i = 1; i < 64; i += 2) cm_handle_release(h[i]);
  for (int i = 0; i < 8; i++) cm_handle_release(big[i]);
  CHECK_CLEAN(m);
  cm_manager_destroy(m);
}

static void vm_steady_loop_maps_once(void) {
  /* A training-step-like loop: persistent weights, then activations of
   * varied sizes allocated and freed in a fixed pattern. Granules trimmed in
   * the first iteration and re-mapped in the second raise the hysteresis
   * budget; from then on the driver is never called again. */
  cm_manager_t *m = mk_arena(sim(0, false, 0));
  ASSERT(m != NULL);
  cm_handle_t w[16];
  for (int i = 0; i < 16; i++) w[i] = res(m, (uint64_t)(i + 1) * 3 * MiB + 1000);
  uint64_t maps_after_first = 0, unmaps_after_first = 0;
  for (int it = 0; it < 10; it++) {
    cm_handle_t act[40];
    for (int i = 0; i < 40; i++) act[i] = res(m, (uint64_t)((i * 7) % 13 + 1) * MiB + 4096 * (uint64_t)i);
    for (int i = 0; i < 40; i += 3) cm_handle_release(act[i]);
    cm_handle_t g[10];
    for (int i = 0; i < 10; i++) g[i] = res(m, (uint64_t)(i + 2) * 2 * MiB);
    for (int i = 0; i < 40; i++)
      if (i % 3) cm_handle_release(act[i]);
    for (int i = 0; i < 10; i++) cm_handle_release(g[i]);
    if (it == 1) { /* warm-up: the first iteration trims what the second re-maps */
      maps_after_first = stats(m).maps;
      unmaps_after_first = stats(m).unmaps;
    }
    CHECK_CLEAN(m);
  }
  EXPECT_EQ(stats(m).maps, maps_after_first);
  EXPECT_EQ(stats(m).unmaps, unmaps_after_first);
  for (int i = 0; i < 16; i++) cm_handle_release(w[i]);
  CHECK_CLEAN(m);
  cm_manager_destroy(m);
}

static void vm_growth_batches_maps(void) {
  /* 2000 small requests in a row: far fewer map calls than requests */
  cm_manager_t *m = mk_arena(sim(0, false, 0));
  ASSERT(m != NULL);
  static cm_handle_t h[2000];
  for (int i = 0; i < 2000; i++) h[i] = res(m, 300 * KiB + (uint64_t)i);
  EXPECT_LE(stats(m).maps, 2000 / 4);
  cm_usage_t u;
  cm_manager_usage(m, &u);
  EXPECT_LE(held(m), u.bytes_in_use + u.bytes_in_use / 32 + 4 * MiB);
  for (int i = 0; i < 2000; i++) cm_handle_release(h[i]);
  CHECK_CLEAN(m);
  cm_manager_destroy(m);
}

/* The default object size: a block of whole granules on a granule boundary
 * is one object while the device stays more than half free (it is freed with
 * the block, so it can go back whole); everything else, and everything near
 * the capacity, one object per granule. */
static void vm_default_objects(void) {
  cm_manager_t *m = mk_arena(sim(256 * MiB, true, 0)); /* 2 MiB granules */
  ASSERT(m != NULL);
  cm_handle_t a = res(m, 40 * MiB); /* whole granules, room: one object */
  EXPECT_EQ(stats(m).creates, 1);
  cm_handle_t b = res(m, 3 * MiB); /* not whole granules: one object per granule */
  EXPECT_EQ(stats(m).creates, 1 + 2);
  cm_handle_t c = res(m, 100 * MiB); /* under half would stay free: per granule */
  EXPECT_GE(stats(m).creates, 3 + 49);
  EXPECT_EQ(stats(m).violations, 0);
  CHECK_CLEAN(m);
  cm_handle_release(a);
  uint64_t before = held(m);
  cm_manager_cleanup(m, true); /* a's object is all free: it goes back whole */
  EXPECT_EQ(held(m), before - 40 * MiB);
  EXPECT_GE(stats(m).releases, 1);
  CHECK_CLEAN(m);
  cm_handle_release(b);
  cm_handle_release(c);
  cm_manager_destroy(m);
}

/* While the device stays more than half free the default holds what it
 * maps: it grows by steps (64 MiB at least, one object each), trims nothing
 * before a map or periodically, and a second run of the same reservations
 * makes no driver call. The explicit cleanup still gives everything free
 * back. */
static void vm_default_holds_while_room(void) {
  cm_pool_options_t o = arena();
  o.dealloc_period = 1; /* a periodic cleanup at every call */
  o.has_dealloc_period = true;
  cm_manager_t *m = mk(sim(80 * GiB, true, 0), &o, 1);
  ASSERT(m != NULL);
  cm_handle_t h[32];
  for (int run = 0; run < 2; run++) { /* the second run maps nothing */
    for (int i = 0; i < 16; i++) h[i] = res(m, 4 * MiB); /* one step covers all 16 */
    EXPECT_EQ(held(m), run ? 128 * MiB : 64 * MiB);
    EXPECT_EQ(stats(m).creates, run ? 2 : 1);
    EXPECT_EQ(stats(m).map_calls, run ? 2 : 1);
    EXPECT_EQ(stats(m).set_access, run ? 2 : 1);
    for (int i = 16; i < 24; i++) h[i] = res(m, 3 * MiB + 512); /* the next step */
    EXPECT_EQ(held(m), 128 * MiB);
    EXPECT_EQ(stats(m).creates, 2);
    CHECK_CLEAN(m);
    for (int i = 0; i < 24; i++) cm_handle_release(h[i]);
    cm_manager_cleanup(m, false); /* the periodic cleanup keeps it */
    EXPECT_EQ(held(m), 128 * MiB);
    EXPECT_EQ(stats(m).releases, 0);
    EXPECT_EQ(stats(m).unmap_calls, 0);
  }
  cm_manager_cleanup(m, true); /* asked for: everything free goes back */
  EXPECT_EQ(held(m), 0);
  EXPECT_EQ(stats(m).releases, 2);
  EXPECT_EQ(stats(m).violations, 0);
  CHECK_CLEAN(m);
  cm_manager_destroy(m);
}

/* A release threshold (layout key keep=, release_threshold) gives free memory
 * back beyond it while the device has room: before a map and at the
 * periodic cleanup. keep=0 keeps nothing free mapped. */
static void vm_release_threshold(void) {
  for (int keep = 0; keep < 3; keep++) { /* 64 MiB, 0, none */
    cm_pool_options_t o = arena();
    o.release_threshold = keep == 0 ? 64 * MiB : 0;
    o.has_release_threshold = keep < 2;
    cm_manager_t *m = mk(sim(80 * GiB, true, 0), &o, 1);
    ASSERT(m != NULL);
    cm_handle_t a = res(m, 128 * MiB), c = res(m, 64 * MiB); /* objects of their own */
    cm_handle_release(a);
    cm_handle_t b = res(m, 256 * MiB); /* does not fit a's hole */
    if (keep < 2) { /* 128 MiB free > the threshold: a's object goes before the map */
      EXPECT_EQ(held(m), 64 * MiB + 256 * MiB);
      EXPECT_EQ(stats(m).releases, 1);
    } else { /* held */
      EXPECT_EQ(held(m), 128 * MiB + 64 * MiB + 256 * MiB);
      EXPECT_EQ(stats(m).releases, 0);
    }
    EXPECT_EQ(stats(m).violations, 0);
    CHECK_CLEAN(m);
    cm_handle_release(b);
    cm_handle_release(c);
    cm_manager_destroy(m);
  }
  /* the layout key */
  cm_pool_options_t p[2];
  size_t n = 0;
  cm_device_props_t props = {.max_page_size = 1 * GiB, .alignment = 512};
  ASSERT_OK(cm_pools_parse("arena:keep=64MiB", props, p, 2, &n, NULL));
  EXPECT(p[0].has_release_threshold);
  EXPECT_EQ(p[0].release_threshold, 64 * MiB);
}

/* A block of whole granules of at least a quarter step is its own object
 * (freed with it, so it can go back whole) and nothing grows beyond it; a
 * smaller block starts a step. With the device half used, growth is exact
 * and objects are single granules again. */
static void vm_default_objects_large_device(void) {
  cm_manager_t *m = mk_arena(sim(64 * GiB, true, 0)); /* 2 MiB granules */
  ASSERT(m != NULL);
  cm_handle_t a = res(m, 40 * MiB); /* 40 >= 64 / 4: its own object, exactly */
  EXPECT_EQ(stats(m).creates, 1);
  EXPECT_EQ(held(m), 40 * MiB);
  cm_handle_t b = res(m, 3 * MiB); /* a step of 64 MiB, one object */
  EXPECT_EQ(stats(m).creates, 2);
  EXPECT_EQ(held(m), 104 * MiB);
  cm_handle_release(a);
  cm_manager_cleanup(m, true); /* a's object is all free: it goes back whole */
  EXPECT_EQ(held(m), 64 * MiB);
  EXPECT_EQ(stats(m).releases, 1);
  cm_handle_release(b);
  cm_manager_cleanup(m, true);
  EXPECT_EQ(held(m), 0);
  EXPECT_EQ(stats(m).releases, 2);
  EXPECT_EQ(stats(m).violations, 0);
  CHECK_CLEAN(m);
  /* more than half of the device in use: one object per granule again */
  cm_handle_t big = res(m, 40 * GiB);
  uint64_t c0 = stats(m).creates, h0 = held(m);
  cm_handle_t d = res(m, 3 * MiB);
  EXPECT_EQ(stats(m).creates, c0 + 2);
  EXPECT_EQ(held(m), h0 + 4 * MiB);
  EXPECT_EQ(stats(m).violations, 0);
  CHECK_CLEAN(m);
  cm_handle_release(d);
  cm_handle_release(big);
  cm_manager_destroy(m);
}

/* A block that is not whole granules, while the device has room but is not
 * roomy: its granules are pieces of about a sixteenth of the block, unless
 * the block is more than a sixteenth of the free memory above half the
 * device; then single granules, so a later neighbour touching one of them
 * keeps no other granule from a trim. */
static void vm_default_pieces_against_room(void) {
  for (int small = 0; small < 2; small++) {
    cm_manager_t *m = mk_arena(sim(small ? 1 * GiB : 64 * GiB, true, 0)); /* 2 MiB granules */
    ASSERT(m != NULL);
    cm_handle_t a = res(m, small ? 100 * MiB : 5 * GiB); /* whole granules: one object */
    EXPECT_EQ(stats(m).creates, 1);
    cm_handle_t b = res(m, 65 * MiB); /* 33 granules, no growth beyond them */
    /* 64 GiB: 27 GiB above half, pieces of 2 granules; 1 GiB: 173 MiB
     * above half, less than 16 x 66 MiB: one object per granule */
    EXPECT_EQ(stats(m).creates, 1 + (small ? 33 : 17));
    EXPECT_EQ(stats(m).violations, 0);
    CHECK_CLEAN(m);
    cm_handle_release(b);
    cm_handle_release(a);
    cm_manager_destroy(m);
  }
}

/* Under pressure memory is given back: on a device the first run filled,
 * a request that fits nowhere mapped makes the arena give back the free
 * objects (the refused map's fallback), then map only what it needs. */
static void vm_default_gives_back_under_pressure(void) {
  cm_manager_t *m = mk_arena(sim(256 * MiB, true, 0));
  ASSERT(m != NULL);
  cm_handle_t a = res(m, 100 * MiB), b = res(m, 100 * MiB);
  cm_handle_release(a);
  uint64_t r0 = stats(m).releases;
  cm_handle_t c = res(m, 150 * MiB); /* 100 MiB free cannot hold it: a's memory goes back */
  EXPECT_GT(stats(m).releases, r0);
  EXPECT_LE(held(m), 256 * MiB);
  EXPECT_EQ(stats(m).violations, 0);
  CHECK_CLEAN(m);
  cm_handle_release(b);
  cm_handle_release(c);
  cm_manager_destroy(m);
}

static void vm_periodic_trim(void) {
  cm_pool_options_t o = arena();
  o.dealloc_period = 50;
  o.has_dealloc_period = true;
  cm_manager_t *m = mk(sim(0, false, 0), &o, 1);
  ASSERT(m != NULL);
  cm_handle_t big = res(m, 256 * MiB);
  cm_handle_release(big);
  uint64_t before = held(m);
  EXPECT_GE(before, 256 * MiB);
  /* small traffic for two periods: the idle 256 MiB are given back */
  for (int i = 0; i < 200; i++) cm_handle_release(res(m, 4096));
  EXPECT_LT(held(m), 16 * MiB);
  CHECK_CLEAN(m);
  cm_manager_destroy(m);
}

static void vm_cap(void) {
  cm_pool_options_t o = arena();
  o.max_pool_size = 16 * MiB;
  o.has_max_pool_size = true;
  cm_manager_t *m = mk(sim(0, false, 0), &o, 1);
  ASSERT(m != NULL);
  cm_handle_t a = res(m, 10 * MiB);
  cm_handle_t b = {NULL};
  cm_diag_t d;
  memset(&d, 0, sizeof d);
  EXPECT_STATUS(cm_manager_reserve(m, 7 * MiB, &b, &d), CM_ECAPACITY);
  EXPECT_CONTAINS(d.message, "capacity");
  EXPECT(b.d == NULL);
  CHECK_CLEAN(m);
  cm_handle_t c = res(m, 5 * MiB); /* fits under the cap */
  EXPECT_LE(held(m), 16 * MiB);
  cm_handle_release(a);
  /* the freed granules count against the cap only until they are reused */
  cm_handle_t e = res(m, 10 * MiB);
  EXPECT_LE(held(m), 16 * MiB);
  cm_handle_release(c);
  cm_handle_release(e);
  CHECK_CLEAN(m);
  cm_manager_destroy(m);
}

static void vm_map_failure_leaves_state(void) {
  /* the device holds 8 MiB: a request that needs more fails with CM_EOOM
   * and the manager is unchanged */
  cm_manager_t *m = mk_arena(sim(8 * MiB, true, 0));
  ASSERT(m != NULL);
  cm_handle_t a = res(m, 3 * MiB);
  cm_usage_t u0;
  cm_manager_usage(m, &u0);
  cm_handle_t b = {NULL};
  cm_diag_t d;
  memset(&d, 0, sizeof d);
  EXPECT_STATUS(cm_manager_reserve(m, 6 * MiB, &b, &d), CM_EOOM);
  EXPECT(b.d == NULL);
  cm_usage_t u1;
  cm_manager_usage(m, &u1);
  EXPECT_EQ(u1.number_allocs, u0.number_allocs);
  EXPECT_EQ(u1.bytes_in_use, u0.bytes_in_use);
  EXPECT_EQ(u1.bytes_reserved, held(m));
  CHECK_CLEAN(m);
  cm_handle_t c = res(m, 4 * MiB); /* what fits still works */
  EXPECT(c.d != NULL);
  cm_handle_release(a);
  cm_handle_release(c);
  CHECK_CLEAN(m);
  cm_manager_destroy(m);
}

/* ---- segments (no VM) ----------------------------------------------------------- */

static void segments_grow_and_release(void) {
  plain *ctx;
  cm_manager_t *m = mk_arena(plain_storage(&ctx));
  ASSERT(m != NULL);
  cm_handle_t a = res(m, 1000);
  EXPECT_EQ(stats(m).allocs, 1);
  EXPECT_EQ(held(m), 2 * MiB); /* the smallest segment */
  cm_handle_t b = res(m, 1000);
  EXPECT_EQ(stats(m).allocs, 1); /* same segment */
  EXPECT_EQ(where(m, b).offset, 1024);
  cm_handle_t big = res(m, 5 * MiB); /* does not fit: a segment of its own */
  EXPECT_EQ(stats(m).allocs, 2);
  EXPECT_NE(where(m, big).id, where(m, a).id);
  CHECK_CLEAN(m);
  cm_handle_release(big);
  cm_manager_cleanup(m, true);
  EXPECT_EQ(held(m), 2 * MiB); /* the idle segment went back */
  EXPECT_EQ(stats(m).deallocs, 1);
  /* a failing device: the error comes back and nothing changes */
  ctx->fail_next = 1;
  cm_handle_t c = {NULL};
  EXPECT_STATUS(cm_manager_reserve(m, 8 * MiB, &c, NULL), CM_EOOM);
  EXPECT(c.d == NULL);
  CHECK_CLEAN(m);
  cm_handle_release(a);
  cm_handle_release(b);
  cm_manager_cleanup(m, true);
  EXPECT_EQ(held(m), 0);
  CHECK_CLEAN(m);
  cm_manager_destroy(m);
}

static void segments_cap(void) {
  cm_pool_options_t o = arena();
  o.max_pool_size = 6 * MiB;
  o.has_max_pool_size = true;
  cm_manager_t *m = mk(plain_storage(NULL), &o, 1);
  ASSERT(m != NULL);
  cm_handle_t a = res(m, 3 * MiB);
  cm_handle_t b = res(m, 3 * MiB);
  cm_handle_t c = {NULL};
  EXPECT_STATUS(cm_manager_reserve(m, 1 * MiB, &c, NULL), CM_ECAPACITY);
  EXPECT_LE(held(m), 6 * MiB);
  cm_handle_release(a);
  cm_handle_release(b);
  CHECK_CLEAN(m);
  cm_manager_destroy(m);
}

/* ---- the default layout ----------------------------------------------------------- */

static void default_preset_is_one_arena(void) {
  cm_pool_options_t pools[8];
  size_t n = 0;
  cm_device_props_t props = {20 * GiB, 512};
  ASSERT_OK(cm_pools_preset(CM_PRESET_DEFAULT, props, pools, 8, &n));
  ASSERT_EQ(n, 1);
  EXPECT_EQ(pools[0].kind, CM_POOL_ARENA);
  EXPECT_EQ(pools[0].max_alloc_size, 0); /* every size */
  EXPECT(!pools[0].has_max_pool_size);
  /* cap too small: count reported, CM_EINVAL */
  EXPECT_STATUS(cm_pools_preset(CM_PRESET_DEFAULT, props, pools, 0, &n), CM_EINVAL);
  EXPECT_EQ(n, 1);
  /* a manager built without a pool list gets it */
  cm_manager_config_t cfg;
  cm_manager_config_init(&cfg);
  cfg.props = props;
  cm_manager_t *m = NULL;
  ASSERT_OK(cm_manager_create(sim(0, false, 0), &cfg, &m, NULL));
  EXPECT_EQ(cm_manager_pool_count(m), 1);
  cm_handle_t h = res(m, 0), g = res(m, 3 * GiB);
  CHECK_CLEAN(m);
  cm_handle_release(h);
  cm_handle_release(g);
  cm_manager_destroy(m);
}

static void destroy_with_live_handles(void) {
  cm_manager_t *m = mk_arena(sim(0, false, 0));
  ASSERT(m != NULL);
  cm_handle_t a = res(m, 1000), b = res(m, 3 * MiB);
  cm_manager_destroy(m); /* handles outlive the manager as objects */
  cm_handle_release(a);
  cm_handle_release(b);
}

static void install_replaces_arena(void) {
  cm_manager_t *m = mk_arena(sim(0, false, 0));
  ASSERT(m != NULL);
  cm_handle_t a = res(m, 1000);
  cm_pool_options_t o = arena();
  EXPECT_STATUS(cm_manager_install_pools(m, &o, 1, NULL), CM_EBUSY);
  cm_handle_release(a);
  ASSERT_OK(cm_manager_install_pools(m, &o, 1, NULL));
  EXPECT_EQ(held(m), 0);
  EXPECT_EQ(reserved(m), 0);
  cm_handle_t b = res(m, 1000);
  EXPECT_EQ(where(m, b).offset, 0);
  cm_handle_release(b);
  CHECK_CLEAN(m);
  cm_manager_destroy(m);
}

static void display_mentions_regions(void) {
  cm_manager_t *m = mk_arena(sim(0, false, 0));
  ASSERT(m != NULL);
  cm_handle_t a = res(m, 1000);
  char buf[4096];
  size_t n = cm_manager_display(m, buf, sizeof buf);
  EXPECT_GT(n, 0);
  EXPECT_CONTAINS(buf, "Arena Pool");
  EXPECT_CONTAINS(buf, "Region");
  cm_handle_release(a);
  cm_manager_destroy(m);
}

/* A reservation the device refuses for good says where the arena's held
 * memory that is not live lies: the free parts of partly filled granules
 * (fragmentation) and free granules inside physical objects a live block
 * still holds, with the option that gives the latter back. */
/* A reservation the device refuses at the best fit is served at the
 * placement that needs the fewest granules the device does not hold yet:
 * the hole [0, 4) MiB (unmapped: two granules) is the best fit for 3 MiB,
 * but the device has one granule left; the top block starts in granule 8,
 * which z touches, so [16.5, 19.5) MiB needs one. */
static void oom_tries_tighter_placement(void) {
  cm_pool_options_t o = arena();
  o.max_object_size = 2 * MiB; /* single-granule objects: every free granule can go */
  cm_manager_t *m = mk(sim(16 * MiB, true, 0), &o, 1);
  ASSERT(m != NULL);
  cm_handle_t a = res(m, 4 * MiB); /* [0, 4): granules 0-1 */
  cm_handle_t x = res(m, 1 * MiB); /* [4, 5): granule 2 */
  cm_handle_release(a);
  cm_manager_cleanup(m, true); /* granules 0-1 go back */
  cm_handle_t z = res(m, 11 * MiB + 512 * KiB); /* [5, 16.5): granules 2-8 */
  EXPECT_EQ(offset_of(m, z), 5 * MiB);
  EXPECT_EQ(held(m), 14 * MiB); /* granules 2-8: one granule of the device left */
  cm_handle_t e = res(m, 3 * MiB);
  EXPECT_EQ(offset_of(m, e), 16 * MiB + 512 * KiB);
  EXPECT_EQ(held(m), 16 * MiB);
  EXPECT_EQ(stats(m).violations, 0);
  CHECK_CLEAN(m);
  /* nothing needs less than the device has: the error stands, state intact */
  cm_handle_t f = {NULL};
  cm_diag_t d;
  memset(&d, 0, sizeof d);
  EXPECT_EQ(cm_manager_reserve(m, 3 * MiB, &f, &d), CM_EOOM);
  EXPECT_CONTAINS(d.message, "out of memory");
  EXPECT_EQ(held(m), 16 * MiB);
  CHECK_CLEAN(m);
  cm_handle_release(x);
  cm_handle_release(z);
  cm_handle_release(e);
  CHECK_CLEAN(m);
  cm_manager_destroy(m);
}

/* The last resort (arena_stitch.c): a request the device refuses at every
 * placement is served by mapping the objects of two partly used granules a
 * second time around new granules. Ten 1.5 MiB blocks, every other one
 * freed: holes [1.5, 3), [4.5, 6), [7.5, 9), [10.5, 12) and the top from
 * 13.5 MiB; granules 0-6 held, one granule of the 16 MiB device left. */
static void oom_stitches_partly_used_granules(void) {
  cm_pool_options_t o = arena();
  o.max_object_size = 2 * MiB; /* single-granule objects: each can be aliased */
  cm_manager_t *m = mk(sim(16 * MiB, true, 0), &o, 1);
  ASSERT(m != NULL);
  cm_handle_t h[10];
  for (int i = 0; i < 10; i++) h[i] = res(m, 3 * MiB / 2);
  for (int i = 1; i < 10; i += 2) cm_handle_release(h[i]);
  cm_manager_cleanup(m, true);
  EXPECT_EQ(held(m), 14 * MiB);
  cm_storage_stats_t before = stats(m);
  /* 4 MiB at the top would map two granules (14-18 -> 7, 8); stitched: the
   * 1.5 MiB tail of granule 5 (hole [10.5, 12): the smallest tail that
   * reaches one new granule, first in its bin), one new granule, and
   * 0.5 MiB of a 1 MiB head (the smallest head that is enough) */
  cm_handle_t x = res(m, 4 * MiB);
  ASSERT(x.d != NULL);
  EXPECT_EQ(held(m), 16 * MiB);
  cm_storage_stats_t st = stats(m);
  EXPECT_EQ(st.creates - before.creates, 1);        /* the new granule only */
  EXPECT_EQ(st.map_calls - before.map_calls, 3);    /* it, and the two aliases */
  EXPECT_EQ(st.set_access - before.set_access, 3);
  EXPECT_EQ(st.violations, 0);
  cm_location_t loc;
  memset(&loc, 0, sizeof loc);
  cm_binding_t b = cm_handle_binding(x);
  EXPECT_EQ(cm_manager_find(m, b, &loc, NULL), CM_OK);
  cm_binding_release(b);
  EXPECT_EQ(loc.page, UINT32_MAX); /* a reservation of its own */
  EXPECT_EQ(loc.offset, 512 * KiB); /* it starts 1.5 MiB before its first granule's end */
  cm_storage_handle_t sh = where(m, x);
  EXPECT(sh.id != where(m, h[0]).id);
  EXPECT_EQ(sh.offset, 512 * KiB);
  CHECK_CLEAN(m);
  /* the aliased bytes are taken: a 1.5 MiB request no longer fits in the
   * donor hole [10.5, 12) (it goes to [4.5, 6), the other such hole) */
  cm_handle_t y = res(m, 3 * MiB / 2);
  EXPECT_EQ(offset_of(m, y), 4 * MiB + 512 * KiB);
  CHECK_CLEAN(m);
  cm_handle_release(y);
  /* the donor granules stay while the slice lives, whatever is trimmed */
  cm_manager_cleanup(m, true);
  EXPECT_EQ(held(m), 16 * MiB);
  CHECK_CLEAN(m);
  /* freeing it gives back the new granule, the aliases and the reservation,
   * and the donor parts are free again */
  cm_handle_release(x);
  cm_manager_cleanup(m, true);
  EXPECT_EQ(held(m), 14 * MiB);
  st = stats(m);
  EXPECT_EQ(st.vm_reserved, before.vm_reserved);
  EXPECT_EQ(st.violations, 0);
  CHECK_CLEAN(m);
  cm_handle_t z = res(m, 3 * MiB / 2);
  EXPECT_EQ(offset_of(m, z) % (3 * MiB), 3 * MiB / 2); /* back in a hole */
  CHECK_CLEAN(m);
  /* a live stitched slice at destroy: everything goes back (no leak, no
   * mapping left: the sim refuses to drop a reservation with mappings) */
  cm_handle_t w = res(m, 4 * MiB);
  EXPECT_EQ(held(m), 16 * MiB);
  CHECK_CLEAN(m);
  cm_handle_release(w);
  cm_handle_release(z);
  for (int i = 0; i < 10; i += 2) cm_handle_release(h[i]);
  cm_manager_destroy(m);
}

/* No stitch when no granule is partly used (blocks of whole granules), or
 * when the partly used ones save no new granule. */
static void stitch_only_when_it_maps_less(void) {
  cm_pool_options_t o = arena();
  o.max_object_size = 2 * MiB;
  cm_manager_t *m = mk(sim(16 * MiB, true, 0), &o, 1);
  ASSERT(m != NULL);
  /* blocks of whole granules: no partly used granule, no donor */
  cm_handle_t h[7];
  for (int i = 0; i < 7; i++) h[i] = res(m, 2 * MiB);
  for (int i = 1; i < 7; i += 2) cm_handle_release(h[i]);
  cm_manager_cleanup(m, true);
  cm_storage_stats_t before = stats(m);
  cm_handle_t x = {NULL};
  cm_diag_t d;
  memset(&d, 0, sizeof d);
  EXPECT_EQ(cm_manager_reserve(m, 9 * MiB, &x, &d), CM_EOOM);
  cm_storage_stats_t st = stats(m);
  EXPECT_EQ(st.violations, 0);
  EXPECT_EQ(st.reserves, before.reserves); /* no stitch was even tried */
  EXPECT_EQ(st.map_calls, before.map_calls);
  EXPECT_EQ(held(m), 8 * MiB);
  CHECK_CLEAN(m);
  /* granule 1 half used: the 1 MiB tail of hole [3, 4) saves a granule for
   * 9 MiB (four new ones, not five: tried, and refused by the device with
   * three left), not for 9.5 MiB (five either way: not tried) */
  cm_handle_t t = res(m, 1 * MiB); /* [2, 3) */
  before = stats(m);
  memset(&d, 0, sizeof d);
  EXPECT_EQ(cm_manager_reserve(m, 9 * MiB, &x, &d), CM_EOOM);
  st = stats(m);
  EXPECT_EQ(st.reserves, before.reserves + 1);
  EXPECT_EQ(st.address_frees, before.address_frees + 1); /* given back at once */
  EXPECT_EQ(held(m), 10 * MiB);
  CHECK_CLEAN(m);
  before = stats(m);
  memset(&d, 0, sizeof d);
  EXPECT_EQ(cm_manager_reserve(m, 9 * MiB + 512 * KiB, &x, &d), CM_EOOM);
  EXPECT_EQ(stats(m).reserves, before.reserves);
  CHECK_CLEAN(m);
  cm_handle_release(t);
  for (int i = 0; i < 7; i += 2) cm_handle_release(h[i]);
  cm_manager_destroy(m);
}

static void oom_explains_held_memory(void) {
  /* single-granule objects: fragmentation only. Ten 1.5 MiB blocks, every
   * other one freed: granules 0-6 keep 7.5 MiB live in 14 MiB. */
  cm_pool_options_t o = arena();
  o.max_object_size = 2 * MiB;
  cm_manager_t *m = mk(sim(16 * MiB, true, 0), &o, 1);
  ASSERT(m != NULL);
  cm_handle_t h[10];
  for (int i = 0; i < 10; i++) h[i] = res(m, 3 * MiB / 2);
  for (int i = 1; i < 10; i += 2) cm_handle_release(h[i]);
  cm_handle_t x = {NULL};
  cm_diag_t d;
  memset(&d, 0, sizeof d);
  /* 6 MiB: even stitched (a 1.5 MiB tail, two new granules, a 0.5 MiB
   * head) it needs two granules, and the device has one */
  EXPECT_EQ(cm_manager_reserve(m, 6 * MiB, &x, &d), CM_EOOM);
  EXPECT_EQ(held(m), 14 * MiB);
  EXPECT_CONTAINS(d.message, "out of memory");
  EXPECT_CONTAINS(d.message, "the arena holds 14.68 MB for 7.86 MB of live data");
  EXPECT_CONTAINS(d.message, "6.82 MB are the free parts of granules"); /* 6.5 MiB */
  EXPECT(strstr(d.message, "physical objects") == NULL);
  CHECK_CLEAN(m);
  for (int i = 0; i < 10; i += 2) cm_handle_release(h[i]);
  cm_manager_destroy(m);

  /* the default's objects: each 40 MiB block is one object; 1 MiB of the
   * first stays live after it is freed, so its other 19 granules cannot go
   * back, and 200 MiB do not fit in the 176 MiB left (with single-granule
   * objects they would: the second half of the test) */
  for (int single = 0; single < 2; single++) {
    o = arena();
    if (single) o.max_object_size = 2 * MiB;
    m = mk(sim(256 * MiB, true, 0), &o, 1);
    ASSERT(m != NULL);
    cm_handle_t a = res(m, 40 * MiB), b = res(m, 40 * MiB);
    EXPECT_EQ(stats(m).creates, single ? 40 : 2);
    cm_handle_release(a);
    cm_handle_t small = res(m, 1 * MiB);
    EXPECT_EQ(stats(m).creates, single ? 40 : 2); /* in a's free granules */
    memset(&d, 0, sizeof d);
    int rc = cm_manager_reserve(m, 200 * MiB, &x, &d);
    if (single) {
      EXPECT_EQ(rc, CM_OK);
      cm_handle_release(x);
    } else {
      EXPECT_EQ(rc, CM_EOOM);
      EXPECT_CONTAINS(d.message, "1.05 MB are the free parts of granules"); /* granule 0 */
      EXPECT_CONTAINS(d.message, "39.85 MB are free granules inside physical objects"); /* 38 MiB */
      EXPECT_CONTAINS(d.message, "object=2MiB");
    }
    CHECK_CLEAN(m);
    cm_handle_release(small);
    cm_handle_release(b);
    cm_manager_destroy(m);
  }
}

int main(void) {
  CM_RUN(random_vm_small_granule);
  CM_RUN(random_vm_default_granule);
  CM_RUN(random_segments);
  CM_RUN(random_segments_fixed_page);
  CM_RUN(placement_low_end_and_best_fit);
  CM_RUN(placement_exact_reuse);
  CM_RUN(placement_deterministic);
  CM_RUN(placement_whole_granules);
  CM_RUN(placement_fills_touched_granules);
  CM_RUN(zero_and_limits);
  CM_RUN(vm_reserved_is_mapped_granules);
  CM_RUN(vm_unmaps_before_growing);
  CM_RUN(vm_steady_loop_maps_once);
  CM_RUN(vm_growth_batches_maps);
  CM_RUN(vm_default_objects);
  CM_RUN(vm_default_holds_while_room);
  CM_RUN(vm_release_threshold);
  CM_RUN(vm_default_objects_large_device);
  CM_RUN(vm_default_pieces_against_room);
  CM_RUN(placement_tie_fills_larger_room);
  CM_RUN(placement_fewer_new_granules);
  CM_RUN(vm_default_gives_back_under_pressure);
  CM_RUN(oom_tries_tighter_placement);
  CM_RUN(vm_periodic_trim);
  CM_RUN(vm_cap);
  CM_RUN(vm_map_failure_leaves_state);
  CM_RUN(segments_grow_and_release);
  CM_RUN(segments_cap);
  CM_RUN(default_preset_is_one_arena);
  CM_RUN(destroy_with_live_handles);
  CM_RUN(install_replaces_arena);
  CM_RUN(display_mentions_regions);
  CM_RUN(oom_explains_held_memory);
  CM_RUN(oom_stitches_partly_used_granules);
  CM_RUN(stitch_only_when_it_maps_less);
  return cm_test_finish();
}
