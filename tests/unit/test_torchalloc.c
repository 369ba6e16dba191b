/*
 * test_torchalloc.c - the model of PyTorch's caching allocator
 * (cubemem/torchalloc.h), rule by rule on hand-worked cases: rounding, the
 * two pools and their segment sizes, best fit, splitting, merging,
 * max_split_size, the free-cache-and-retry path, expandable segments
 * (growth at the end, the driver calls by kind, unmapping on out-of-memory),
 * the PYTORCH_CUDA_ALLOC_CONF reader, the replay and the fit; and the
 * model's invariants under a random sequence in both modes.
 */
#include <stdlib.h>

#include "cm_test.h"
#include "cubemem/cubemem.h"
#include "cubemem/torchalloc.h"

#define MiB (1ull << 20)

/* A model on a simulated device of `cap` bytes (0 = unlimited). */
static cm_torch_t *model(uint64_t cap, const char *conf) {
  cm_storage_t *st = NULL;
  if (cm_storage_sim_create(cap, true, 0, &st) != CM_OK) return NULL;
  cm_torch_options_t o;
  cm_torch_options_init(&o);
  cm_diag_t d = {0};
  if (conf && cm_torch_options_parse(conf, &o, &d) != CM_OK) {
    cm_storage_destroy(st);
    return NULL;
  }
  cm_torch_t *m = NULL;
  return cm_torch_create(st, &o, &m, &d) == CM_OK ? m : NULL;
}

static cm_storage_stats_t sstats(cm_torch_t *m) {
  cm_storage_stats_t s;
  cm_storage_stats(cm_torch_storage(m), &s);
  return s;
}

static cm_torch_block_t *get(cm_torch_t *m, uint64_t size) {
  cm_torch_block_t *b = NULL;
  cm_diag_t d = {0};
  return cm_torch_malloc(m, size, 0, &b, &d) == CM_OK ? b : NULL;
}

static void rounding(void) {
  cm_torch_options_t o;
  cm_torch_options_init(&o);
  EXPECT_EQ(cm_torch_round_size(&o, 1), 512);
  EXPECT_EQ(cm_torch_round_size(&o, 512), 512);
  EXPECT_EQ(cm_torch_round_size(&o, 513), 1024);
  EXPECT_EQ(cm_torch_round_size(&o, 1363148), 1363456); /* 1.3 MiB: to 512 B */
  cm_diag_t d = {0};
  ASSERT_OK(cm_torch_options_parse("roundup_power2_divisions:4", &o, &d));
  EXPECT_EQ(cm_torch_round_size(&o, 1363148), 1572864); /* quarters of [1 MiB, 2 MiB) */
  EXPECT_EQ(cm_torch_round_size(&o, 2 * MiB), 2 * MiB);  /* powers of two stay */
  EXPECT_EQ(cm_torch_round_size(&o, 1500), 1536);        /* not above 512 x 4: 512 B */
  EXPECT_EQ(cm_torch_round_size(&o, 3000), 3072);        /* quarters of [2 KiB, 4 KiB) */
  /* the list form: 1 MiB..2 MiB and below get 2, [4 MiB, 8 MiB) 8, from 8 MiB up 1 */
  cm_torch_options_init(&o);
  ASSERT_OK(cm_torch_options_parse("roundup_power2_divisions:[1:2,4:8,>:1]", &o, &d));
  EXPECT_EQ(o.roundup_divisions[0], 2);
  EXPECT_EQ(o.roundup_divisions[2], 8);
  EXPECT_EQ(o.roundup_divisions[3], 1);
  EXPECT_EQ(o.roundup_divisions[15], 1);
  EXPECT_EQ(cm_torch_round_size(&o, 5 * MiB + 1), 5 * MiB + MiB / 2); /* eighths of 4 MiB */
  EXPECT_EQ(cm_torch_round_size(&o, 9 * MiB + 1), 9 * MiB + 512);
}

static void options_reader(void) {
  cm_torch_options_t o;
  cm_torch_options_init(&o);
  cm_diag_t d = {0};
  ASSERT_OK(cm_torch_options_parse(
      "expandable_segments:True, max_split_size_mb:128,garbage_collection_threshold:0.6,"
      "backend:native,release_lock_on_cudamalloc:True", &o, &d));
  EXPECT(o.expandable_segments);
  EXPECT_EQ(o.max_split_size, 128 * MiB);
  char buf[256];
  cm_torch_options_format(&o, buf, sizeof buf);
  EXPECT_STR(buf, "expandable_segments:True,max_split_size_mb:128,garbage_collection_threshold:0.6");
  cm_torch_options_t back;
  cm_torch_options_init(&back);
  ASSERT_OK(cm_torch_options_parse(buf, &back, &d));
  EXPECT(back.expandable_segments && back.max_split_size == o.max_split_size);
  /* refused, with the key named and *o unchanged */
  cm_torch_options_t before = o;
  EXPECT_STATUS(cm_torch_options_parse("max_split_size_mb:20", &o, &d), CM_EINVAL);
  EXPECT_CONTAINS(d.message, "above 20");
  EXPECT_STATUS(cm_torch_options_parse("roundup_power2_divisions:3", &o, &d), CM_EINVAL);
  EXPECT_CONTAINS(d.message, "power of two");
  EXPECT_STATUS(cm_torch_options_parse("expandable_segment:True", &o, &d), CM_EINVAL);
  EXPECT_CONTAINS(d.message, "expandable_segment");
  EXPECT_STATUS(cm_torch_options_parse("backend:cudaMallocAsync", &o, &d), CM_EINVAL);
  EXPECT_STATUS(cm_torch_options_parse("expandable_segments", &o, &d), CM_EINVAL);
  EXPECT_STATUS(cm_torch_options_parse("max_split_size_mb:256,bogus:1", &o, &d), CM_EINVAL);
  EXPECT(memcmp(&before, &o, sizeof o) == 0);
  cm_torch_options_init(&o);
  cm_torch_options_format(&o, buf, sizeof buf);
  EXPECT_STR(buf, "");
}

static void small_pool(void) {
  cm_torch_t *m = model(0, NULL);
  ASSERT(m);
  cm_torch_block_t *a = get(m, 1000), *b = get(m, 1000);
  ASSERT(a && b);
  EXPECT_EQ(sstats(m).allocs, 1); /* one 2 MiB segment serves both */
  EXPECT_EQ(sstats(m).bytes_held, 2 * MiB);
  EXPECT_EQ(cm_torch_block_size(a), 1024);
  EXPECT_EQ(cm_torch_block_addr(b), cm_torch_block_addr(a) + 1024);
  cm_torch_block_t *c = get(m, MiB); /* at most 1 MiB: small pool */
  ASSERT(c);
  EXPECT_EQ(sstats(m).allocs, 1);
  EXPECT_EQ(cm_torch_block_addr(c), cm_torch_block_addr(b) + 1024);
  uint64_t a_addr = cm_torch_block_addr(a);
  cm_torch_free(m, a);
  cm_torch_block_t *d = get(m, 400); /* best fit: the 1 KiB hole, split 512 + 512 */
  EXPECT_EQ(cm_torch_block_addr(d), a_addr);
  EXPECT_EQ(cm_torch_block_size(d), 512);
  cm_torch_block_t *e = get(m, 512); /* the other half */
  EXPECT_EQ(cm_torch_block_addr(e), a_addr + 512);
  EXPECT_EQ(cm_torch_check(m), 0);
  cm_torch_destroy(m);
}

static void large_pool(void) {
  cm_torch_t *m = model(0, NULL);
  ASSERT(m);
  cm_torch_block_t *a = get(m, MiB + 1); /* a 20 MiB segment, split */
  ASSERT(a);
  EXPECT_EQ(sstats(m).bytes_held, 20 * MiB);
  EXPECT_EQ(cm_torch_block_size(a), MiB + 512);
  cm_torch_block_t *b = get(m, 10 * MiB); /* fits in what remains */
  EXPECT_EQ(sstats(m).allocs, 1);
  EXPECT_EQ(cm_torch_block_addr(b), cm_torch_block_addr(a) + MiB + 512);
  /* 11 MiB + 1: its own 12 MiB segment; remaining ~1 MiB is not above
   * kSmallSize, so the block is not split */
  cm_torch_block_t *c = get(m, 11 * MiB + 1);
  EXPECT_EQ(sstats(m).allocs, 2);
  EXPECT_EQ(sstats(m).bytes_held, 32 * MiB);
  EXPECT_EQ(cm_torch_block_size(c), 12 * MiB);
  /* freeing a and b merges the whole 20 MiB segment back */
  uint64_t a_addr = cm_torch_block_addr(a);
  cm_torch_free(m, a);
  cm_torch_free(m, b);
  cm_torch_block_t *d = get(m, 19 * MiB);
  EXPECT_EQ(sstats(m).allocs, 2);
  EXPECT_EQ(cm_torch_block_addr(d), a_addr);
  cm_torch_stats_t ts;
  cm_torch_stats(m, &ts);
  EXPECT_EQ(ts.segments, 2);
  EXPECT_EQ(ts.reserved, 32 * MiB);
  EXPECT_EQ(cm_torch_block_size(d), 20 * MiB); /* 1 MiB left is not above kSmallSize */
  EXPECT_EQ(ts.allocated, 20 * MiB + 12 * MiB);
  EXPECT_EQ(cm_torch_check(m), 0);
  cm_torch_free(m, c);
  cm_torch_free(m, d);
  ASSERT_OK(cm_torch_empty_cache(m, NULL));
  EXPECT_EQ(sstats(m).bytes_held, 0);
  EXPECT_EQ(sstats(m).deallocs, 2);
  EXPECT_EQ(cm_torch_check(m), 0);
  cm_torch_destroy(m);
}

static void oom_frees_cache_and_retries(void) {
  cm_torch_t *m = model(40 * MiB, NULL);
  ASSERT(m);
  cm_torch_block_t *a = get(m, 15 * MiB); /* 16 MiB segment */
  ASSERT(a);
  cm_torch_free(m, a); /* cached */
  cm_torch_block_t *b = get(m, 30 * MiB); /* 16 + 30 > 40: free the cache, retry */
  ASSERT(b);
  cm_torch_stats_t ts;
  cm_torch_stats(m, &ts);
  EXPECT_EQ(ts.alloc_retries, 1);
  EXPECT_EQ(ts.cuda_frees, 1);
  EXPECT_EQ(sstats(m).bytes_held, 30 * MiB);
  /* 30 + 12 > 40 with nothing cached: out of memory */
  cm_torch_block_t *c = NULL;
  cm_diag_t d = {0};
  EXPECT_STATUS(cm_torch_malloc(m, 12 * MiB, 0, &c, &d), CM_EOOM);
  EXPECT_CONTAINS(d.message, "out of memory");
  cm_torch_stats(m, &ts);
  EXPECT_EQ(ts.ooms, 1);
  EXPECT_EQ(cm_torch_check(m), 0);
  cm_torch_destroy(m);
}

static void max_split_size(void) {
  cm_torch_t *m = model(0, "max_split_size_mb:64");
  ASSERT(m);
  cm_torch_block_t *a = get(m, 100 * MiB);
  ASSERT(a);
  cm_torch_free(m, a);
  cm_torch_block_t *b = get(m, 30 * MiB); /* an oversize block never serves a small request */
  EXPECT_EQ(sstats(m).allocs, 2);
  cm_torch_block_t *c = get(m, 90 * MiB); /* within 20 MiB of 100 MiB: reused whole */
  EXPECT_EQ(sstats(m).allocs, 2);
  EXPECT_EQ(cm_torch_block_size(c), 100 * MiB);
  cm_torch_free(m, c);
  cm_torch_block_t *e = get(m, 70 * MiB); /* 100 >= 70 + 20: not reused */
  EXPECT_EQ(sstats(m).allocs, 3);
  cm_torch_free(m, b);
  cm_torch_free(m, e);
  EXPECT_EQ(cm_torch_check(m), 0);
  cm_torch_destroy(m);
  /* out of memory: the oversize cached block goes first, and only it */
  m = model(140 * MiB, "max_split_size_mb:64");
  ASSERT(m);
  cm_torch_block_t *big = get(m, 100 * MiB), *small = get(m, 2 * MiB); /* 100 + 20 */
  ASSERT(big && small);
  cm_torch_free(m, big);
  cm_torch_free(m, small); /* the 20 MiB segment is cached too */
  cm_torch_block_t *x = get(m, 80 * MiB); /* 100 >= 80 + 20: new; 120 + 80 > 140 */
  ASSERT(x);
  cm_torch_stats_t ts;
  cm_torch_stats(m, &ts);
  EXPECT_EQ(ts.cuda_frees, 1);    /* only the oversize block */
  EXPECT_EQ(ts.alloc_retries, 0); /* no full release */
  EXPECT_EQ(sstats(m).bytes_held, 100 * MiB);
  EXPECT_EQ(cm_torch_check(m), 0);
  cm_torch_destroy(m);
}

static void expandable(void) {
  cm_torch_t *m = model(0, "expandable_segments:True");
  ASSERT(m);
  cm_torch_block_t *s = get(m, 1000); /* small range: one 2 MiB page */
  ASSERT(s);
  cm_storage_stats_t st = sstats(m);
  EXPECT_EQ(st.reserves, 1);
  EXPECT_EQ(st.creates, 1);
  EXPECT_EQ(st.map_calls, 1);
  EXPECT_EQ(st.set_access, 1);
  EXPECT_EQ(st.allocs, 0);
  cm_torch_block_t *a = get(m, 10 * MiB); /* large range: one 20 MiB page */
  cm_torch_block_t *b = get(m, 15 * MiB); /* 10 MiB left + a new page at the end */
  ASSERT(a && b);
  EXPECT_EQ(cm_torch_block_addr(b), cm_torch_block_addr(a) + 10 * MiB);
  st = sstats(m);
  EXPECT_EQ(st.reserves, 2);
  EXPECT_EQ(st.creates, 3);
  EXPECT_EQ(st.set_access, 3);
  EXPECT_EQ(st.bytes_held, 42 * MiB);
  cm_torch_block_t *c = get(m, 45 * MiB); /* 15 MiB free at the end + 2 more pages, one call */
  st = sstats(m);
  EXPECT_EQ(st.creates, 5);
  EXPECT_EQ(st.set_access, 4);
  EXPECT_EQ(cm_torch_block_addr(c), cm_torch_block_addr(b) + 15 * MiB);
  EXPECT_EQ(cm_torch_check(m), 0);
  cm_torch_free(m, a);
  cm_torch_free(m, b);
  cm_torch_free(m, c);
  cm_torch_free(m, s);
  ASSERT_OK(cm_torch_empty_cache(m, NULL)); /* unmap every page, give back both ranges */
  st = sstats(m);
  EXPECT_EQ(st.bytes_held, 0);
  EXPECT_EQ(st.unmap_calls, 5);
  EXPECT_EQ(st.releases, 5);
  EXPECT_EQ(st.address_frees, 2);
  EXPECT_EQ(cm_torch_check(m), 0);
  cm_torch_destroy(m);
}

static void expandable_oom_unmaps(void) {
  cm_torch_t *m = model(60 * MiB, "expandable_segments:True");
  ASSERT(m);
  cm_torch_block_t *a = get(m, 20 * MiB), *b = get(m, 20 * MiB);
  ASSERT(a && b);
  cm_torch_free(m, a); /* a's page stays mapped and cached */
  cm_torch_block_t *c = get(m, 40 * MiB); /* 40 + 40 > 60: unmap a's page, retry */
  ASSERT(c);
  EXPECT_EQ(cm_torch_block_addr(c), cm_torch_block_addr(b) + 20 * MiB);
  cm_torch_stats_t ts;
  cm_torch_stats(m, &ts);
  EXPECT_EQ(ts.alloc_retries, 1);
  EXPECT_EQ(ts.pages_unmapped, 1);
  cm_storage_stats_t st = sstats(m);
  EXPECT_EQ(st.unmap_calls, 1);
  EXPECT_EQ(st.bytes_held, 60 * MiB);
  EXPECT_EQ(st.bytes_held_peak, 60 * MiB);
  cm_torch_block_t *d = NULL;
  EXPECT_STATUS(cm_torch_malloc(m, 1, 0, &d, NULL), CM_EOOM); /* no room for a small page */
  EXPECT_EQ(cm_torch_check(m), 0);
  cm_torch_destroy(m); /* with live blocks: the model frees them */
}

/* A trace of n events from CSV lines. */
static cm_trace_t *trace_of(const char *csv) {
  cm_trace_t *t = NULL;
  return cm_trace_parse(csv, strlen(csv), NULL, &t, NULL) == CM_OK ? t : NULL;
}

static void no_observer(void *arg, const cm_replay_step_t *step) {
  (void)arg;
  (void)step;
}

static void replay_and_fit(void) {
  cm_trace_t *t = trace_of("Thread,Time,Action,Pointer,Size,Stream\n"
                           "1,0,allocate,0x1,15728640,0x0\n"    /* 15 MiB: 16 MiB segment */
                           "1,0,free,0x1,15728640,0x0\n"
                           "1,0,allocate,0x2,31457280,0x0\n"    /* 30 MiB: a new segment */
                           "1,0,allocate,0x3,1000,0x0\n"        /* small: 2 MiB */
                           "1,0,free,0x2,31457280,0x0\n");
  ASSERT(t);
  cm_storage_t *st = NULL;
  ASSERT_OK(cm_storage_sim_create(0, true, 0, &st));
  cm_replay_options_t ro = {.timeline_points = 2};
  cm_replay_result_t r;
  cm_torch_stats_t ts;
  ASSERT_OK(cm_torch_replay(t, st, NULL, &ro, &r, &ts, NULL));
  EXPECT_EQ(r.allocs, 3);
  EXPECT_EQ(r.frees, 2);
  EXPECT_EQ(r.failed_allocs, 0);
  EXPECT_EQ(r.peak_reserved_bytes, 48 * MiB);
  EXPECT_EQ(r.storage.allocs, 3);
  EXPECT_EQ(r.driver_calls, 3);
  EXPECT_EQ(r.pool_count, 0);
  EXPECT(r.pool_reports != NULL);
  EXPECT_EQ(r.timeline_count, 3); /* event 0, then runs of 3 events */
  EXPECT_EQ(r.timeline[r.timeline_count - 1].reserved_bytes, 48 * MiB);
  EXPECT_EQ(ts.cuda_mallocs, 3);
  cm_replay_result_free(&r);
  /* fit: 30 MiB + 2 MiB live at once; 32 MiB fits once the 16 MiB cached
   * segment is given back (PyTorch's retry) */
  cm_fit_result_t fr;
  ASSERT_OK(cm_torch_fit(t, NULL, NULL, &fr, NULL));
  EXPECT_EQ(fr.unconstrained_peak, 48 * MiB);
  EXPECT_EQ(fr.fit_bytes, 32 * MiB);
  /* on a 24 MiB device the 30 MiB allocation fails, and is reported */
  ASSERT_OK(cm_storage_sim_create(24 * MiB, true, 0, &st));
  ASSERT_OK(cm_torch_replay(t, st, NULL, NULL, &r, NULL, NULL));
  EXPECT_EQ(r.failed_allocs, 1);
  EXPECT_STATUS(r.first_failure, CM_EOOM);
  EXPECT_EQ(r.first_failure_size, 31457280);
  EXPECT_CONTAINS(r.first_failure_message, "out of memory");
  cm_replay_result_free(&r);
  /* an observer needs a manager */
  ASSERT_OK(cm_storage_sim_create(0, true, 0, &st));
  ro.observe = no_observer;
  EXPECT_STATUS(cm_torch_replay(t, st, NULL, &ro, &r, NULL, NULL), CM_ENOTSUP);
  cm_trace_free(t);
}

/* Random allocations and frees in both modes, on a small device so that the
 * out-of-memory path runs: the invariants hold after every step. */
static void random_invariants(void) {
  const char *confs[] = {NULL, "expandable_segments:True", "max_split_size_mb:40",
                         "roundup_power2_divisions:4,expandable_segments:True"};
  for (size_t k = 0; k < 4; k++) {
    cm_torch_t *m = model(400 * MiB, confs[k]);
    ASSERT(m);
    cm_torch_block_t *live[64] = {0};
    uint64_t x = 88172645463325252ull + k;
    for (int i = 0; i < 3000; i++) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      size_t slot = (size_t)(x % 64);
      if (live[slot]) {
        cm_torch_free(m, live[slot]);
        live[slot] = NULL;
      } else {
        uint64_t size = (x >> 8) % 4 == 0 ? (x >> 16) % (60 * MiB) : (x >> 16) % (64 * 1024);
        cm_torch_block_t *b = NULL;
        int rc = cm_torch_malloc(m, size, 0, &b, NULL);
        EXPECT(rc == CM_OK || rc == CM_EOOM);
        if (rc == CM_OK) live[slot] = b;
      }
      if (i % 50 == 0 && cm_torch_check(m) != 0) {
        EXPECT_EQ(cm_torch_check(m), 0);
        break;
      }
    }
    EXPECT_EQ(cm_torch_check(m), 0);
    cm_storage_stats_t st = sstats(m);
    EXPECT_LE(st.bytes_held_peak, 400 * MiB);
    EXPECT_EQ(st.violations, 0);
    for (size_t s = 0; s < 64; s++) cm_torch_free(m, live[s]);
    ASSERT_OK(cm_torch_empty_cache(m, NULL));
    EXPECT_EQ(sstats(m).bytes_held, 0);
    EXPECT_EQ(cm_torch_check(m), 0);
    cm_torch_destroy(m);
  }
}

static void bad_arguments(void) {
  cm_torch_t *m = NULL;
  cm_diag_t d = {0};
  EXPECT_STATUS(cm_torch_create(NULL, NULL, &m, &d), CM_EINVAL);
  cm_storage_t *st = NULL;
  ASSERT_OK(cm_storage_sim_create(0, true, 4 * MiB, &st)); /* granularity 4 MiB */
  cm_torch_options_t o;
  cm_torch_options_init(&o);
  o.expandable_segments = true;
  EXPECT_STATUS(cm_torch_create(st, &o, &m, &d), CM_EINVAL); /* st destroyed */
  EXPECT_CONTAINS(d.message, "granularity");
  m = model(0, NULL);
  ASSERT(m);
  cm_torch_block_t *z = NULL;
  ASSERT_OK(cm_torch_malloc(m, 0, 0, &z, NULL)); /* nothing allocated */
  EXPECT_EQ(cm_torch_block_size(z), 0);
  EXPECT_EQ(sstats(m).allocs, 0);
  cm_torch_free(m, z);
  cm_torch_free(m, NULL);
  EXPECT_STATUS(cm_torch_malloc(m, 1, 0, NULL, NULL), CM_EINVAL);
  cm_torch_destroy(m);
  cm_torch_destroy(NULL);
}

/* A snapshot's allocator_settings: the recorded PYTORCH_CUDA_ALLOC_CONF
 * (empty in the shared snapshots: PyTorch's defaults). */
static void snapshot_settings(void) {
  const char *dir = cm_test_shared_dir();
  if (!dir) CM_SKIP("../shared is absent");
  char path[600];
  snprintf(path, sizeof path, "%s/traces/snapshots/cs336-medium-ctx128-inference.pickle", dir);
  FILE *f = fopen(path, "rb");
  if (!f) CM_SKIP("the snapshot is absent");
  static char buf[4 << 20]; /* the snapshot is 1.2 MB */
  size_t n = fread(buf, 1, sizeof buf, f);
  fclose(f);
  char *csv = NULL;
  size_t len = 0;
  cm_snapshot_info_t info;
  ASSERT_OK(cm_snapshot_to_csv(buf, n, NULL, &csv, &len, &info, NULL));
  free(csv);
  EXPECT(info.has_alloc_conf);
  EXPECT_STR(info.alloc_conf, "");
  EXPECT_EQ(info.reserved_bytes, 1763704832);
}

int main(void) {
  CM_RUN(rounding);
  CM_RUN(options_reader);
  CM_RUN(small_pool);
  CM_RUN(large_pool);
  CM_RUN(oom_frees_cache_and_retries);
  CM_RUN(max_split_size);
  CM_RUN(expandable);
  CM_RUN(expandable_oom_unmaps);
  CM_RUN(replay_and_fit);
  CM_RUN(random_invariants);
  CM_RUN(bad_arguments);
  CM_RUN(snapshot_settings);
  return cm_test_finish();
}
