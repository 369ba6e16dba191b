/*
 * test_model.c - randomized operation sequences checked against a trivial
 * model, over several pool layouts, with fixed seeds.
 *
 * Algorithm. For each (layout, seed) a deterministic PRNG (xorshift64*)
 * drives 1500 operations (CM_MODEL_OPS=N for more) on one manager: reserve
 * of random sizes (zero, small, medium, large, absurd and overflowing),
 * release of a random live reference, turning a handle into a binding,
 * bind of a client handle with a cursor, clone-and-release, persistent windows
 * (and, for some layouts, dedicated windows nested with them), periodic and
 * explicit cleanup, and install_pools. The model is the list of live
 * references with their requested sizes (and, on host storages, a tag byte
 * written into the first and last bytes of each range).
 *
 * Checked after every mutation: cm_manager_check(m, NULL) == 0 and
 * number_allocs / bytes_in_use / bytes_padding equal the model's totals;
 * a failed reserve returns a known error code with a diag message and an
 * empty handle, and leaves those totals unchanged; install_pools succeeds
 * iff no live reference is in a dynamic pool. Checked every few operations
 * and at the end: every live reference resolves (get_storage) to its
 * requested size, live ranges never overlap within one storage id, the tag
 * bytes are intact (host storages) and bind cursors read back.
 * A failure message names the layout, the seed and the operation index.
 * Exports: main (the test runner).
 */
#include <stdlib.h>
#include <string.h>

#include "cm_test.h"
#include "cubemem/memory.h"

#include "cm_scenario.h"

/* ---- PRNG ------------------------------------------------------------------------- */

static uint64_t g_rng;
static bool g_trace; /* CM_MODEL_TRACE=1 prints every operation to stderr */
#define TRACE(...)                             \
  do {                                         \
    if (g_trace) fprintf(stderr, __VA_ARGS__); \
  } while (0)
static uint64_t rnd(void) {
  g_rng ^= g_rng >> 12;
  g_rng ^= g_rng << 25;
  g_rng ^= g_rng >> 27;
  return g_rng * 2685821657736338717ull;
}
static uint64_t rnd_below(uint64_t n) { return n ? rnd() % n : 0; }

/* ---- layouts ------------------------------------------------------------------------ */

typedef struct layout {
  const char *name;
  const char *pools;     /* cm_pools_parse text */
  const char *alt_pools; /* installed alternately */
  bool host;             /* host storage (real memory, tags) vs sim */
  cm_persistent_memory_t pm;
  bool check_padding; /* padding = pad(size, alignment) for every live slice */
  bool dedicated;     /* half the windows opened are dedicated ones */
} layout;

static const layout k_layouts[] = {
    /* 8 and 32 MiB pages: on the sim storage, so no zero-filling */
    {"subslices", "subslices", "sliced:page=1MiB;direct", false, CM_PERSISTENT_ENABLED, true,
     false},
    {"exclusive-pages", "exclusive-pages", "exclusive:max=4MiB,period=20", true,
     CM_PERSISTENT_ENABLED, true, false},
    {"default", "default", "default", true, CM_PERSISTENT_ENABLED, false, true},
    {"sliced+capped+direct",
     "sliced:page=64KiB,max-slice=16KiB;sliced:page=1MiB,cap=4MiB;direct:reclaim=2MiB", "direct",
     false, CM_PERSISTENT_ENABLED, true, false},
    {"periods", "exclusive:max=0;sliced:page=4KiB,period=50;exclusive:max=64KiB,period=100",
     "sliced:page=2MiB,cap=8MiB", true, CM_PERSISTENT_SIZE_MATCH, true, false},
    {"hard-budget", "sliced:page=1MiB,cap=2MiB", "sliced:page=512KiB,max-slice=256KiB,cap=1MiB",
     true, CM_PERSISTENT_ENABLED, true, false},
    {"direct-only", "direct", "direct:reclaim=1MiB", false, CM_PERSISTENT_SIZE_MATCH, true, false},
    /* adaptive pages: growth, outdated pools draining on release */
    {"adaptive", "adaptive", "adaptive:page=64KiB,max=8MiB;direct", false, CM_PERSISTENT_ENABLED,
     true, true},
    {"adaptive-host", "exclusive:max=0;adaptive:page=4KiB,max=4MiB;direct",
     "sliced:page=64KiB,max-slice=4KiB,max=4KiB,period=40;adaptive:max=2MiB,period=30;direct",
     true, CM_PERSISTENT_SIZE_MATCH, true, true},
};

/* ---- model ------------------------------------------------------------------------- */

typedef struct entry {
  bool is_binding;
  cm_handle_t h;
  cm_binding_t b;
  uint64_t size;
  uint64_t cursor;
  uint8_t tag;
} entry;

typedef struct model {
  entry *v;
  size_t n, cap;
  const layout *lay;
  uint64_t seed, op;
  cm_manager_t *m;
  cm_pool_options_t pools[CM_MAX_DYNAMIC_POOLS], alt[CM_MAX_DYNAMIC_POOLS];
  size_t npools, nalt;
  bool alt_installed;
  int windows;
  cm_alloc_mode_t window_kind[4]; /* open windows, innermost last */
} model;

#define MFAIL(md, ...)                                                                      \
  do {                                                                                      \
    char m__[400];                                                                          \
    snprintf(m__, sizeof m__, __VA_ARGS__);                                                 \
    CM__FAIL_AND(1, "[%s seed %" PRIu64 " op %" PRIu64 "] %s", (md)->lay->name, (md)->seed, \
                 (md)->op, m__);                                                            \
  } while (0)

static cm_binding_t entry_binding(entry *e) {
  return e->is_binding ? cm_binding_clone(e->b) : cm_handle_binding(e->h);
}

static void release_entry(entry *e) {
  if (e->is_binding)
    cm_binding_release(e->b);
  else
    cm_handle_release(e->h);
}

static uint64_t padding_of(uint64_t size) {
  uint64_t a = D.alignment;
  return (a - size % a) % a;
}

static void check_totals(model *md) {
  cm_usage_t u = usage(md->m);
  uint64_t in_use = 0, pad = 0;
  for (size_t i = 0; i < md->n; i++) {
    in_use += md->v[i].size;
    pad += padding_of(md->v[i].size);
  }
  cm_diag_t diag = {0};
  size_t bad = cm_manager_check(md->m, &diag);
  if (bad) MFAIL(md, "cm_manager_check: %zu violations: %s", bad, diag.message);
  if (u.number_allocs != md->n)
    MFAIL(md, "number_allocs %" PRIu64 ", model %zu", u.number_allocs, md->n);
  if (u.bytes_in_use != in_use)
    MFAIL(md, "bytes_in_use %" PRIu64 ", model %" PRIu64, u.bytes_in_use, in_use);
  if (md->lay->check_padding && u.bytes_padding != pad)
    MFAIL(md, "bytes_padding %" PRIu64 ", model %" PRIu64, u.bytes_padding, pad);
}

/* Tag bytes: the first and last (up to) 64 bytes of a host range. */
static void tag_range(model *md, entry *e, bool verify) {
  if (!md->lay->host || e->size == 0) return;
  cm_binding_t b = entry_binding(e);
  cm_resource_t res;
  cm_diag_t diag = {0};
  int rc = cm_manager_get_resource(md->m, b, 0, 0, &res, &diag);
  cm_binding_release(b);
  if (rc != CM_OK) MFAIL(md, "get_resource: %s %s", cm_err_name(rc), diag.message);
  if (!res.host || res.size != e->size)
    MFAIL(md, "resource host %p size %" PRIu64, res.host, res.size);
  uint8_t *p = res.host;
  size_t k = e->size < 64 ? (size_t)e->size : 64;
  for (size_t i = 0; i < k; i++) {
    size_t j = (size_t)e->size - 1 - i;
    if (verify) {
      if (p[i] != e->tag || p[j] != e->tag)
        MFAIL(md, "tag of a %" PRIu64 "-byte slice overwritten (%u/%u, want %u)", e->size, p[i],
              p[j], e->tag);
    } else {
      p[i] = e->tag;
      p[j] = e->tag;
    }
  }
}

typedef struct span {
  uint64_t id, off, size;
} span;

static int span_cmp(const void *a, const void *b) {
  const span *x = a, *y = b;
  if (x->id != y->id) return x->id < y->id ? -1 : 1;
  if (x->off != y->off) return x->off < y->off ? -1 : 1;
  return 0;
}

static void check_all(model *md) {
  span *sp = calloc(md->n + 1, sizeof *sp);
  ASSERT(sp != NULL);
  size_t ns = 0;
  for (size_t i = 0; i < md->n; i++) {
    entry *e = &md->v[i];
    cm_binding_t b = entry_binding(e);
    cm_storage_handle_t sh;
    cm_diag_t diag = {0};
    int rc = cm_manager_get_storage(md->m, b, &sh, &diag);
    uint64_t cursor = 0;
    int rc2 = cm_manager_get_cursor(md->m, b, &cursor, NULL);
    cm_binding_release(b);
    if (rc != CM_OK) {
      free(sp);
      MFAIL(md, "live entry %zu does not resolve: %s %s", i, cm_err_name(rc), diag.message);
    }
    /* Only bound entries have a known cursor: a reused slice keeps the cursor
     * of its previous binding until it is bound again (as in the reference). */
    if (sh.size != e->size || rc2 != CM_OK || (e->cursor && cursor != e->cursor)) {
      free(sp);
      MFAIL(md,
            "entry %zu: size %" PRIu64 " (want %" PRIu64 "), cursor %" PRIu64 " (want %" PRIu64 ")",
            i, sh.size, e->size, cursor, e->cursor);
    }
    if (sh.size) sp[ns++] = (span){sh.id, sh.offset, sh.size};
    tag_range(md, e, true);
  }
  qsort(sp, ns, sizeof *sp, span_cmp);
  for (size_t i = 1; i < ns; i++)
    if (sp[i].id == sp[i - 1].id && sp[i - 1].off + sp[i - 1].size > sp[i].off) {
      span a = sp[i - 1], c = sp[i];
      free(sp);
      MFAIL(md,
            "overlap in storage %" PRIu64 ": [%" PRIu64 "+%" PRIu64 ") and [%" PRIu64 "+%" PRIu64
            ")",
            a.id, a.off, a.size, c.off, c.size);
    }
  free(sp);
  /* Bytes held from the storage equal the pools' bytes_reserved. */
  cm_usage_t u = usage(md->m);
  cm_storage_stats_t st = sstats(md->m);
  if (st.bytes_held != u.bytes_reserved)
    MFAIL(md, "storage holds %" PRIu64 " bytes, pools report %" PRIu64, st.bytes_held,
          u.bytes_reserved);
}

static void push(model *md, entry e) {
  if (md->n == md->cap) {
    size_t nc = md->cap ? md->cap * 2 : 64;
    entry *v = realloc(md->v, nc * sizeof *v);
    ASSERT(v != NULL);
    md->v = v;
    md->cap = nc;
  }
  md->v[md->n++] = e;
}

static void remove_at(model *md, size_t i) { md->v[i] = md->v[--md->n]; }

static uint64_t random_size(model *md) {
  uint64_t r = rnd_below(100);
  if (r < 5) return 0;
  if (r < 35) return 1 + rnd_below(512);
  if (r < 70) return 513 + rnd_below(64 * KiB);
  /* Host storages zero-fill real memory: keep their large sizes moderate. */
  if (r < 88) return 64 * KiB + rnd_below(md->lay->host ? 1 * MiB : 4 * MiB);
  if (r < 92)
    return (md->lay->host ? 1 * MiB : 4 * MiB) + rnd_below(md->lay->host ? 3 * MiB : 24 * MiB);
  if (r < 95) { /* boundaries */
    static const uint64_t b[] = {32,      33,      4096,        16 * KiB, 64 * KiB,
                                 1 * MiB, 2 * MiB, 2 * MiB + 1, 8 * MiB,  128 * MiB + 1};
    return b[rnd_below(sizeof b / sizeof b[0])];
  }
  /* absurd: only sizes that fail before any host allocation is attempted */
  static const uint64_t host_huge[] = {UINT64_MAX, UINT64_MAX - 30, UINT64_MAX - 31, 1ull << 63,
                                       (1ull << 63) + 12345};
  static const uint64_t sim_huge[] = {UINT64_MAX, UINT64_MAX - 31, 1ull << 50, 1ull << 40, 3 * GiB};
  if (md->lay->host) return host_huge[rnd_below(5)];
  return sim_huge[rnd_below(5)];
}

static bool known_reserve_error(int rc) {
  return rc == CM_ETOOBIG || rc == CM_ECAPACITY || rc == CM_EOOM || rc == CM_ESTORAGE ||
         rc == CM_EOVERFLOW || rc == CM_ENOMEM;
}

static void op_reserve(model *md, bool then_bind) {
  uint64_t size = random_size(md);
  cm_usage_t before = usage(md->m);
  cm_handle_t h = {0};
  cm_diag_t diag = {0};
  int rc = cm_manager_reserve(md->m, size, &h, &diag);
  TRACE("op %" PRIu64 ": reserve(%" PRIu64 ")%s -> %s\n", md->op, size, then_bind ? "+bind" : "",
        cm_err_name(rc));
  if (rc != CM_OK) {
    if (!known_reserve_error(rc)) MFAIL(md, "reserve(%" PRIu64 "): unexpected %d", size, rc);
    if (h.d) MFAIL(md, "failed reserve left a handle");
    if (diag.code != rc || !diag.message[0]) MFAIL(md, "failed reserve without a diag message");
    cm_usage_t after = usage(md->m);
    if (after.number_allocs != before.number_allocs || after.bytes_in_use != before.bytes_in_use ||
        after.bytes_padding != before.bytes_padding)
      MFAIL(md, "failed reserve(%" PRIu64 ") changed the usage", size);
    return;
  }
  if (!h.d) MFAIL(md, "reserve(%" PRIu64 ") gave an empty handle", size);
  entry e = {false, h, {0}, size, 0, (uint8_t)(1 + rnd_below(255))};
  if (then_bind) {
    cm_handle_t a = {0};
    ASSERT_OK(cm_handle_new(&a));
    e.cursor = 1 + rnd_below(1000);
    rc = cm_manager_bind(md->m, h, a, e.cursor, &diag);
    if (rc != CM_OK) {
      cm_handle_release(a);
      MFAIL(md, "bind: %s %s", cm_err_name(rc), diag.message);
    }
    e.h = a;
  }
  push(md, e);
  tag_range(md, &md->v[md->n - 1], false);
}

static void op_release(model *md) {
  if (!md->n) return;
  size_t i = (size_t)rnd_below(md->n);
  TRACE("op %" PRIu64 ": release size %" PRIu64 "%s\n", md->op, md->v[i].size,
        md->v[i].is_binding ? " (binding)" : "");
  tag_range(md, &md->v[i], true);
  release_entry(&md->v[i]);
  remove_at(md, i);
}

static void op_to_binding(model *md) {
  if (!md->n) return;
  entry *e = &md->v[rnd_below(md->n)];
  if (e->is_binding) return;
  if (!cm_handle_can_mut(e->h)) MFAIL(md, "sole user handle reports can_mut false");
  e->b = cm_handle_into_binding(e->h);
  e->h.d = NULL;
  e->is_binding = true;
}

static void op_clone_swap(model *md) {
  if (!md->n) return;
  entry *e = &md->v[rnd_below(md->n)];
  if (e->is_binding) {
    cm_binding_t c = cm_binding_clone(e->b);
    cm_binding_release(e->b);
    e->b = c;
  } else {
    cm_handle_t c = cm_handle_clone(e->h);
    if (cm_handle_can_mut(e->h)) MFAIL(md, "can_mut with two user handles");
    cm_handle_release(e->h);
    e->h = c;
  }
}

static size_t live_dynamic(model *md) {
  size_t k = 0;
  for (size_t i = 0; i < md->n; i++) {
    cm_binding_t b = entry_binding(&md->v[i]);
    cm_location_t loc;
    int rc = cm_manager_find(md->m, b, &loc, NULL);
    cm_binding_release(b);
    if (rc != CM_OK) MFAIL(md, "find failed on a live entry");
    if (loc.pool != CM_PERSISTENT_POOL && loc.pool != CM_DEDICATED_POOL) k++;
  }
  return k;
}

static void op_install(model *md) {
  size_t dyn = live_dynamic(md);
  const cm_pool_options_t *list = md->alt_installed ? md->pools : md->alt;
  size_t n = md->alt_installed ? md->npools : md->nalt;
  cm_diag_t diag = {0};
  int rc = cm_manager_install_pools(md->m, list, n, &diag);
  TRACE("op %" PRIu64 ": install (%zu dynamic live) -> %s\n", md->op, dyn, cm_err_name(rc));
  if (dyn == 0) {
    if (rc != CM_OK)
      MFAIL(md, "install with no dynamic live slice: %s %s", cm_err_name(rc), diag.message);
    md->alt_installed = !md->alt_installed;
    if (cm_manager_pool_count(md->m) != n) MFAIL(md, "pool count after install");
  } else {
    if (rc != CM_EBUSY) MFAIL(md, "install with %zu dynamic live slices: %d", dyn, rc);
  }
}

/* Persistent (and dedicated) windows: opened rarely, closed soon, sometimes
 * nested, so that about a quarter of the reservations are in a window; the
 * innermost one sets the mode. */
static void op_mode(model *md) {
  uint64_t r = rnd_below(100);
  if (md->windows > 0 && r < 70) {
    cm_manager_set_mode(md->m, CM_MODE_AUTO);
    md->windows--;
  } else if ((md->windows == 0 && r < 25) || (md->windows > 0 && md->windows < 3)) {
    cm_alloc_mode_t k =
        md->lay->dedicated && rnd_below(2) ? CM_MODE_DEDICATED : CM_MODE_PERSISTENT;
    cm_manager_set_mode(md->m, k);
    md->window_kind[md->windows++] = k;
  } else {
    return;
  }
  TRACE("op %" PRIu64 ": mode -> %d windows\n", md->op, md->windows);
  cm_alloc_mode_t want = md->windows > 0 ? md->window_kind[md->windows - 1] : CM_MODE_AUTO;
  if (cm_manager_mode(md->m) != want) MFAIL(md, "mode with %d windows open", md->windows);
}

static void parse_layout(model *md, const char *text, cm_pool_options_t *out, size_t *n) {
  cm_diag_t diag = {0};
  int rc = cm_pools_parse(text, D, out, CM_MAX_DYNAMIC_POOLS, n, &diag);
  if (rc != CM_OK) MFAIL(md, "parse \"%s\": %s", text, diag.message);
}

static void run_one(const layout *lay, uint64_t seed, int ops) {
  model md;
  memset(&md, 0, sizeof md);
  md.lay = lay;
  md.seed = seed;
  g_rng = seed * 0x9E3779B97F4A7C15ull + 1;
  parse_layout(&md, lay->pools, md.pools, &md.npools);
  parse_layout(&md, lay->alt_pools, md.alt, &md.nalt);
  cm_storage_t *s = lay->host ? NULL : sim(1 * GiB, true);
  md.m = mk_full(s, D, md.pools, md.npools, CM_PRESET_DEFAULT, lay->pm);
  for (md.op = 0; md.op < (uint64_t)ops; md.op++) {
    uint64_t r = rnd_below(1000);
    if (r < 380)
      op_reserve(&md, false);
    else if (r < 430)
      op_reserve(&md, true);
    else if (r < 780)
      op_release(&md);
    else if (r < 820)
      op_to_binding(&md);
    else if (r < 860)
      op_clone_swap(&md);
    else if (r < 900)
      op_mode(&md);
    else if (r < 940) {
      TRACE("op %" PRIu64 ": cleanup\n", md.op);
      cm_manager_cleanup(md.m, false);
    } else if (r < 960) {
      TRACE("op %" PRIu64 ": cleanup(explicit)\n", md.op);
      cm_manager_cleanup(md.m, true);
    } else if (r < 975)
      op_install(&md);
    else { /* drain: release many, so installs get a chance */
      while (md.n && rnd_below(8)) op_release(&md);
    }
    check_totals(&md);
    if (md.op % 16 == 0) check_all(&md);
  }
  check_all(&md);
  while (md.n) {
    op_release(&md);
    check_totals(&md);
  }
  while (md.windows-- > 0) cm_manager_set_mode(md.m, CM_MODE_AUTO);
  cm_manager_cleanup(md.m, true);
  check_totals(&md);
  /* Everything released and cleaned: nothing is held from the storage. */
  cm_usage_t u = usage(md.m);
  if (u.bytes_reserved != sstats(md.m).bytes_held)
    MFAIL(&md, "after cleanup: reserved %" PRIu64 " vs held %" PRIu64, u.bytes_reserved,
          sstats(md.m).bytes_held);
  free(md.v);
  cm_manager_destroy(md.m);
}

/* Operations per (layout, seed); CM_MODEL_OPS=N runs longer sequences. */
static int g_ops = 1500;
static const uint64_t k_seeds[] = {1, 2, 0xC0FFEE, 20260821};

#define LAYOUT_TEST(fn, idx)                                        \
  static void fn(void) {                                            \
    for (size_t s = 0; s < sizeof k_seeds / sizeof k_seeds[0]; s++) \
      run_one(&k_layouts[idx], k_seeds[s], g_ops);                  \
  }

LAYOUT_TEST(model_subslices, 0)
LAYOUT_TEST(model_exclusive_pages, 1)
LAYOUT_TEST(model_default, 2)
LAYOUT_TEST(model_sliced_capped_direct, 3)
LAYOUT_TEST(model_periods, 4)
LAYOUT_TEST(model_hard_budget, 5)
LAYOUT_TEST(model_direct_only, 6)
LAYOUT_TEST(model_adaptive, 7)
LAYOUT_TEST(model_adaptive_host, 8)

int main(void) {
  const char *t = getenv("CM_MODEL_TRACE");
  g_trace = t && *t && *t != '0';
  const char *ops = getenv("CM_MODEL_OPS");
  if (ops && atoi(ops) > 0) g_ops = atoi(ops);
  CM_RUN(model_subslices);
  CM_RUN(model_exclusive_pages);
  CM_RUN(model_default);
  CM_RUN(model_sliced_capped_direct);
  CM_RUN(model_periods);
  CM_RUN(model_hard_budget);
  CM_RUN(model_direct_only);
  CM_RUN(model_adaptive);
  CM_RUN(model_adaptive_host);
  return cm_test_finish();
}
