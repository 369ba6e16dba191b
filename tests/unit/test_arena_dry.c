/*
 * test_arena_dry.c - lazy reservations in the arena (spec section 6),
 * through the public manager API: a dry run of the default layout counts,
 * trims and places exactly as an eager run of the same sequence without a
 * storage call (the default's room-dependent objects included: it decides
 * room as the eager run does); get_storage backs a slice; eager memory placed on what a dry run
 * counted is backed; segments are counted whole and allocated when first
 * needed. Helpers: tests/harness/cm_arena_fixture.h.
 * Exports: main (the test runner).
 */
#include "cm_arena_fixture.h"

static void vm_lazy_dry_run(void) {
  cm_manager_t *m = mk_arena(sim(0, false, 0));
  ASSERT(m != NULL);
  cm_manager_dry_run_begin(m);
  cm_handle_t a = res(m, 6 * MiB);
  cm_manager_dry_run_end(m);
  EXPECT_EQ(held(m), 0); /* placed, not mapped */
  cm_pool_report_t r;
  ASSERT_OK(cm_manager_pool_report(m, 0, &r));
  EXPECT_EQ(r.pages_unmapped, 1);
  CHECK_CLEAN(m);
  cm_storage_handle_t w = where(m, a); /* materializes */
  EXPECT_EQ(w.offset, 0);
  EXPECT_EQ(held(m), 6 * MiB);
  ASSERT_OK(cm_manager_pool_report(m, 0, &r));
  EXPECT_EQ(r.pages_unmapped, 0);
  CHECK_CLEAN(m);
  cm_handle_release(a);
  CHECK_CLEAN(m);
  cm_manager_destroy(m);
}

/* The default layout on a VM device: a dry run counts, trims and places
 * exactly as an eager run of the same sequence, without a storage call. */
static void vm_dry_run_counts_like_eager(void) {
  enum { N = 96, OPS = 3000 };
  cm_manager_t *eager = mk(sim(0, false, 64 * KiB), NULL, 0);
  cm_manager_t *dry = mk(sim(0, false, 64 * KiB), NULL, 0);
  ASSERT(eager != NULL && dry != NULL);
  cm_manager_dry_run_begin(dry);
  cm_handle_t ve[N], vd[N];
  memset(ve, 0, sizeof ve);
  memset(vd, 0, sizeof vd);
  uint64_t live = 0;
  rng_state = 777;
  for (int i = 0; i < OPS; i++) {
    size_t k = (size_t)(rnd() % N);
    if (ve[k].d) {
      cm_handle_release(ve[k]);
      cm_handle_release(vd[k]);
      ve[k].d = vd[k].d = NULL;
      live--;
    } else {
      uint64_t size = rnd_size(4 * MiB);
      ve[k] = res(eager, size);
      vd[k] = res(dry, size);
      ASSERT(ve[k].d && vd[k].d);
      live++;
      if (offset_of(eager, ve[k]) != offset_of(dry, vd[k]))
        cm_test_fail(__FILE__, __LINE__, "op %d: placed at %llu (eager) vs %llu (dry)", i,
                     (unsigned long long)offset_of(eager, ve[k]),
                     (unsigned long long)offset_of(dry, vd[k]));
    }
    if (reserved(eager) != reserved(dry))
      cm_test_fail(__FILE__, __LINE__, "op %d: reserved %llu (eager) vs %llu (dry)", i,
                   (unsigned long long)reserved(eager), (unsigned long long)reserved(dry));
    if (i % 500 == 499) {
      bool ex = (i / 500) % 2 == 0;
      cm_manager_cleanup(eager, ex);
      cm_manager_cleanup(dry, ex);
      EXPECT_EQ(reserved(eager), reserved(dry));
    }
    if (i % 50 == 0) {
      EXPECT_EQ(cm_manager_check(dry, NULL), 0);
      EXPECT_EQ(cm_manager_check(eager, NULL), 0);
    }
  }
  CHECK_CLEAN(dry);
  CHECK_CLEAN(eager);
  cm_pool_report_t re = report0(eager), rd = report0(dry);
  EXPECT_GT(re.bytes_reserved_peak, 0);
  EXPECT_EQ(rd.bytes_reserved_peak, re.bytes_reserved_peak);
  EXPECT_EQ(rd.usage.bytes_reserved, re.usage.bytes_reserved);
  EXPECT_EQ(rd.pages_peak, re.pages_peak);
  /* nothing was mapped or unmapped in the storage */
  cm_storage_stats_t st = stats(dry);
  EXPECT_EQ(st.bytes_held, 0);
  EXPECT_EQ(st.maps, 0);
  EXPECT_EQ(st.unmaps, 0);
  EXPECT_EQ(st.allocs, 0);
  EXPECT_GT(stats(eager).maps, 0);
  EXPECT_EQ(rd.pages_unmapped, live); /* every live slice waits to be materialized */

  /* get_storage materializes one slice: the storage maps it, the counts stay */
  size_t k = 0;
  while (k < N && !(vd[k].d && where(eager, ve[k]).size >= 64 * KiB)) k++;
  ASSERT(k < N);
  uint64_t res_before = reserved(dry);
  cm_storage_handle_t w = where(dry, vd[k]);
  EXPECT_EQ(w.offset, offset_of(eager, ve[k]));
  st = stats(dry);
  EXPECT_GT(st.maps, 0);
  EXPECT_GE(st.bytes_held, w.size);
  EXPECT_EQ(report0(dry).pages_unmapped, live - 1);
  EXPECT_EQ(reserved(dry), res_before);
  CHECK_CLEAN(dry);
  uint64_t maps1 = st.maps;
  (void)where(dry, vd[k]); /* materialized once only */
  EXPECT_EQ(stats(dry).maps, maps1);

  /* releasing unmaterialized slices makes no storage call */
  cm_storage_stats_t s0 = stats(dry);
  for (size_t j = 0; j < N; j++)
    if (vd[j].d && j != k) {
      cm_handle_release(vd[j]);
      vd[j].d = NULL;
    }
  cm_storage_stats_t s1 = stats(dry);
  EXPECT_EQ(s1.maps, s0.maps);
  EXPECT_EQ(s1.unmaps, s0.unmaps);
  EXPECT_EQ(s1.bytes_held, s0.bytes_held);
  EXPECT_EQ(report0(dry).pages_unmapped, 0);
  CHECK_CLEAN(dry);
  cm_manager_dry_run_end(dry);

  /* an eager reservation on granules the dry run counted is backed */
  uint64_t held0 = held(dry), res0 = reserved(dry), maps0 = stats(dry).maps;
  ASSERT(res0 > held0 + 2 * MiB); /* virtual granules are left */
  cm_handle_t e = res(dry, 2 * MiB);
  EXPECT_EQ(report0(dry).pages_unmapped, 0);
  EXPECT_GT(stats(dry).maps, maps0);
  EXPECT_GT(held(dry), held0); /* the virtual objects it lands on are backed whole */
  uint64_t maps2 = stats(dry).maps;
  cm_storage_handle_t we = where(dry, e); /* nothing left to materialize */
  EXPECT_EQ(we.size, 2 * MiB);
  EXPECT_EQ(stats(dry).maps, maps2);
  CHECK_CLEAN(dry);
  /* an explicit cleanup unmaps only what is backed; the counts drop to what is used */
  cm_handle_release(e);
  cm_handle_release(vd[k]);
  cm_manager_cleanup(dry, true);
  EXPECT_EQ(reserved(dry), 0);
  EXPECT_EQ(held(dry), 0);
  CHECK_CLEAN(dry);
  for (size_t j = 0; j < N; j++)
    if (ve[j].d) cm_handle_release(ve[j]);
  cm_manager_destroy(eager);
  cm_manager_destroy(dry);
}

/* A dry run on an arena that is partly backed: slices on backed memory are
 * mapped, slices on new memory are not, and destroy unmaps only what is
 * backed. */
static void vm_dry_run_after_eager(void) {
  cm_manager_t *m = mk_arena(sim(0, false, 64 * KiB));
  ASSERT(m != NULL);
  cm_handle_t a = res(m, 1 * MiB);
  cm_handle_release(a); /* 1 MiB stays mapped and free */
  uint64_t maps0 = stats(m).maps;
  cm_manager_dry_run_begin(m);
  cm_handle_t b = res(m, 512 * KiB); /* on backed memory */
  EXPECT_EQ(report0(m).pages_unmapped, 0);
  cm_handle_t c = res(m, 3 * MiB); /* beyond it: counted, virtual */
  EXPECT_EQ(report0(m).pages_unmapped, 1);
  EXPECT_EQ(stats(m).maps, maps0);
  EXPECT_EQ(held(m), 1 * MiB);
  EXPECT_GE(reserved(m), 3 * MiB + 512 * KiB);
  CHECK_CLEAN(m);
  cm_manager_dry_run_end(m);
  cm_handle_release(b);
  cm_manager_destroy(m); /* with c unmaterialized: only backed granules are unmapped */
  cm_handle_release(c);
}

/* Object sizes that depend on the device's free memory (the default's
 * objects of whole granules) under a dry run: what it counted
 * without mapping is taken off the device's free memory, so it decides room,
 * places and counts exactly as an eager run of the same sequence. */
static void room_dry_run_like_eager(uint64_t max_object_size) {
  enum { N = 48, OPS = 2000 };
  cm_pool_options_t o = arena();
  o.max_object_size = max_object_size;
  cm_pool_options_t o1 = arena();
  o1.max_object_size = 64 * KiB; /* the same sequence, one object per granule */
  cm_manager_t *eager = mk(sim(36 * MiB, true, 64 * KiB), &o, 1);
  cm_manager_t *dry = mk(sim(36 * MiB, true, 64 * KiB), &o, 1);
  cm_manager_t *single = mk(sim(36 * MiB, true, 64 * KiB), &o1, 1);
  ASSERT(eager != NULL && dry != NULL && single != NULL);
  cm_manager_dry_run_begin(dry);
  cm_handle_t ve[N], vd[N], vs[N];
  memset(ve, 0, sizeof ve);
  memset(vd, 0, sizeof vd);
  memset(vs, 0, sizeof vs);
  rng_state = 4242;
  for (int i = 0; i < OPS; i++) {
    size_t k = (size_t)(rnd() % N);
    if (ve[k].d) {
      cm_handle_release(ve[k]);
      cm_handle_release(vd[k]);
      cm_handle_release(vs[k]);
      ve[k].d = vd[k].d = vs[k].d = NULL;
      continue;
    }
    uint64_t size = rnd_size(4 * MiB);
    if (i % 3 == 0) size = (size / (64 * KiB) + 1) * 64 * KiB; /* whole granules */
    ve[k] = res(eager, size);
    vd[k] = res(dry, size);
    vs[k] = res(single, size);
    ASSERT(ve[k].d && vd[k].d);
    if (offset_of(eager, ve[k]) != offset_of(dry, vd[k]) || reserved(eager) != reserved(dry))
      cm_test_fail(__FILE__, __LINE__, "op %d: placed at %llu / %llu, reserved %llu / %llu", i,
                   (unsigned long long)offset_of(eager, ve[k]),
                   (unsigned long long)offset_of(dry, vd[k]), (unsigned long long)reserved(eager),
                   (unsigned long long)reserved(dry));
  }
  /* both regimes were met: some objects span several granules (fewer creates
   * than with single granules), and the device was more than half full */
  EXPECT_LT(stats(eager).creates, stats(single).creates);
  EXPECT_GT(report0(eager).bytes_reserved_peak, 18 * MiB);
  EXPECT_EQ(report0(dry).bytes_reserved_peak, report0(eager).bytes_reserved_peak);
  EXPECT_EQ(stats(dry).maps, 0);
  CHECK_CLEAN(eager);
  CHECK_CLEAN(dry);
  for (size_t k = 0; k < N; k++)
    if (ve[k].d) {
      cm_handle_release(ve[k]);
      cm_handle_release(vd[k]);
      cm_handle_release(vs[k]);
    }
  cm_manager_dry_run_end(dry);
  cm_manager_destroy(eager);
  cm_manager_destroy(dry);
  cm_manager_destroy(single);
}

static void vm_default_dry_run_like_eager(void) { room_dry_run_like_eager(0); }

/* Segments (no VM): a dry run counts whole segments without allocating them. */
static void segments_dry_run(void) {
  plain *ctx;
  cm_manager_t *m = mk_arena(plain_storage(&ctx));
  ASSERT(m != NULL);
  cm_manager_dry_run_begin(m);
  cm_handle_t a = res(m, 1000);
  cm_handle_t b = res(m, 1000);
  EXPECT_EQ(stats(m).allocs, 0);
  EXPECT_EQ(held(m), 0);
  EXPECT_EQ(reserved(m), 2 * MiB); /* the smallest segment, counted */
  cm_pool_report_t r = report0(m);
  EXPECT_EQ(r.bytes_reserved_peak, 2 * MiB);
  EXPECT_EQ(r.pages_unmapped, 2);
  EXPECT_EQ(offset_of(m, b), 1024);
  CHECK_CLEAN(m);
  /* get_storage allocates the segment: both slices are backed */
  cm_storage_handle_t w = where(m, b);
  EXPECT_EQ(w.offset, 1024);
  EXPECT_EQ(stats(m).allocs, 1);
  EXPECT_EQ(held(m), 2 * MiB);
  EXPECT_EQ(report0(m).pages_unmapped, 0);
  EXPECT_EQ(where(m, a).id, w.id);
  CHECK_CLEAN(m);
  /* an unmaterialized segment goes back without a storage call */
  cm_handle_t big = res(m, 5 * MiB);
  EXPECT_EQ(stats(m).allocs, 1);
  EXPECT_EQ(reserved(m), 7 * MiB);
  EXPECT_EQ(report0(m).bytes_reserved_peak, 7 * MiB);
  cm_handle_release(big);
  cm_manager_cleanup(m, true);
  EXPECT_EQ(stats(m).deallocs, 0);
  EXPECT_EQ(reserved(m), 2 * MiB);
  EXPECT_EQ(report0(m).bytes_reserved_peak, 7 * MiB);
  CHECK_CLEAN(m);
  /* an eager reservation in a segment the dry run counted allocates it */
  cm_handle_t c = res(m, 5 * MiB);
  cm_handle_release(c);
  cm_manager_dry_run_end(m);
  EXPECT_EQ(stats(m).allocs, 1);
  cm_handle_t d = res(m, 4 * MiB);
  EXPECT_EQ(stats(m).allocs, 2);
  EXPECT_EQ(report0(m).pages_unmapped, 0);
  EXPECT_EQ(reserved(m), 7 * MiB);
  CHECK_CLEAN(m);
  /* ... and reports a failing device, leaving the manager unchanged */
  cm_manager_dry_run_begin(m);
  cm_handle_t e = res(m, 6 * MiB);
  cm_handle_release(e);
  cm_manager_dry_run_end(m);
  /* try_reserve, then alloc, try to allocate the segment; the manager then
   * releases the cached (dry-run) segment and tries once more */
  ctx->fail_next = 3;
  cm_handle_t f = {NULL};
  EXPECT_STATUS(cm_manager_reserve(m, 6 * MiB, &f, NULL), CM_EOOM);
  EXPECT_EQ(ctx->fail_next, 0);
  EXPECT(f.d == NULL);
  CHECK_CLEAN(m);
  f = res(m, 6 * MiB); /* the device works again */
  EXPECT_EQ(stats(m).allocs, 3);
  cm_handle_release(f);
  cm_handle_release(a);
  cm_handle_release(b);
  cm_handle_release(d);
  cm_manager_cleanup(m, true);
  EXPECT_EQ(held(m), 0);
  EXPECT_EQ(reserved(m), 0);
  CHECK_CLEAN(m);
  cm_manager_destroy(m);
}

int main(void) {
  CM_RUN(vm_lazy_dry_run);
  CM_RUN(vm_dry_run_counts_like_eager);
  CM_RUN(vm_dry_run_after_eager);
  CM_RUN(vm_default_dry_run_like_eager);
  CM_RUN(segments_dry_run);
  return cm_test_finish();
}
