/*
 * test_layout.c - programmatic pool layouts (spec §11.5; scenarios T71-T74 of
 * §14): cm_pools_resolve, cm_pools_parse and cm_pools_format.
 *
 * Checks resolution (rounding to the alignment, filled-in max_slice_size,
 * unrounded caps and reclaim watermarks, dropped direct periods), every
 * error text of §11.5 that applies to this build, the first-error-wins rule,
 * the command-line syntax (presets by name, sizes with suffixes, errors that
 * name the bad part), that cm_pools_format writes text cm_pools_parse
 * reads back to the same list, and that cm_pools_keys lists its keys.
 *
 * T74 (an exclusive-memory-only build) has no counterpart: cubemem has no
 * such build configuration, so its two texts ("the `sub-slices` preset is
 * not available in this build", "sliced pools are not available in this
 * build (exclusive memory only)") cannot occur; the test is a skip saying so.
 * Exports: main (the test runner).
 */
#include <stdlib.h>
#include <string.h>

#include "cm_test.h"
#include "cubemem/memory.h"

#include "cm_scenario.h"

/* ---- helpers of this file ----------------------------------------------- */

static bool same_pool(const cm_pool_options_t *a, const cm_pool_options_t *b) {
  if (a->kind != b->kind) return false;
  if (a->has_dealloc_period != b->has_dealloc_period) return false;
  if (a->has_dealloc_period && a->dealloc_period != b->dealloc_period) return false;
  switch (a->kind) {
    case CM_POOL_SLICED:
      return a->page_size == b->page_size && a->max_slice_size == b->max_slice_size &&
             a->has_max_pool_size == b->has_max_pool_size &&
             (!a->has_max_pool_size || a->max_pool_size == b->max_pool_size);
    case CM_POOL_EXCLUSIVE:
      return a->max_alloc_size == b->max_alloc_size;
    case CM_POOL_DIRECT:
      return a->has_reclaim_at == b->has_reclaim_at &&
             (!a->has_reclaim_at || a->reclaim_at == b->reclaim_at);
    case CM_POOL_ARENA:
      return a->page_size == b->page_size && a->max_alloc_size == b->max_alloc_size &&
             a->has_max_pool_size == b->has_max_pool_size &&
             (!a->has_max_pool_size || a->max_pool_size == b->max_pool_size) &&
             a->max_object_size == b->max_object_size;
    case CM_POOL_ADAPTIVE:
      return a->page_size == b->page_size && a->max_alloc_size == b->max_alloc_size;
    case CM_POOL_PERSISTENT:
    case CM_POOL_DEDICATED:
      return true; /* never in a resolved layout */
  }
  return false;
}


/* ---- T71: presets by name ---------------------------------------------------------- */

/* T71 (R): a preset by name resolves to exactly the preset's list. */
static void t71_presets_by_name(void) {
  static const struct {
    const char *name;
    cm_preset_t preset;
  } rows[] = {{"subslices", CM_PRESET_SUBSLICES},
              {"sub-slices", CM_PRESET_SUBSLICES},
              {"exclusive-pages", CM_PRESET_EXCLUSIVE_PAGES},
              {"default", CM_PRESET_DEFAULT}};
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    cm_pool_options_t a[64], b[64];
    size_t na = 0, nb = 0;
    cm_diag_t diag = {0};
    int rc = cm_pools_parse(rows[i].name, D, a, 64, &na, &diag);
    if (rc != CM_OK) {
      cm_test_fail(__FILE__, __LINE__, "parse \"%s\": %s %s", rows[i].name, cm_err_name(rc),
                   diag.message);
      continue;
    }
    ASSERT_OK(cm_pools_preset(rows[i].preset, D, b, 64, &nb));
    EXPECT_EQ(na, nb);
    for (size_t k = 0; k < na && k < nb; k++)
      if (!same_pool(&a[k], &b[k]))
        cm_test_fail(__FILE__, __LINE__, "\"%s\" pool %zu differs from the preset", rows[i].name,
                     k);
  }
  /* The presets differ (ExclusivePages over SubSlices replaces the list). */
  cm_pool_options_t s[64], e[64];
  size_t ns = 0, ne = 0;
  ASSERT_OK(cm_pools_preset(CM_PRESET_SUBSLICES, D, s, 64, &ns));
  ASSERT_OK(cm_pools_preset(CM_PRESET_EXCLUSIVE_PAGES, D, e, 64, &ne));
  EXPECT_EQ(ns, 4);
  EXPECT_EQ(ne, 24);
}

/* Every preset is already resolved: resolving it again changes nothing. */
static void presets_are_resolved(void) {
  cm_preset_t ps[3] = {CM_PRESET_DEFAULT, CM_PRESET_SUBSLICES, CM_PRESET_EXCLUSIVE_PAGES};
  cm_device_props_t props[3] = {D, {1 * GiB, 256}, {20 * GiB, 512}};
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++) {
      cm_pool_options_t a[64], b[64];
      size_t n = 0;
      ASSERT_OK(cm_pools_preset(ps[i], props[j], a, 64, &n));
      cm_diag_t diag = {0};
      int rc = cm_pools_resolve(a, n, props[j], b, &diag);
      if (rc != CM_OK) {
        cm_test_fail(__FILE__, __LINE__, "preset %d props %d: %s", i, j, diag.message);
        continue;
      }
      for (size_t k = 0; k < n; k++)
        if (!same_pool(&a[k], &b[k]))
          cm_test_fail(__FILE__, __LINE__, "preset %d props %d pool %zu changed", i, j, k);
    }
}

/* ---- T72: resolution ------------------------------------------------------------------ */

/* T72 (R): rounding and filled-in defaults. */
static void t72_resolve(void) {
  cm_pool_options_t in[2];
  in[0] = exclusive_p(8 * KiB, 10000);
  memset(&in[1], 0, sizeof in[1]);
  in[1].kind = CM_POOL_SLICED;
  in[1].page_size = 1000;
  in[1].max_pool_size = 4096;
  in[1].has_max_pool_size = true;
  cm_pool_options_t out[2];
  cm_diag_t diag = {0};
  ASSERT_OK(cm_pools_resolve(in, 2, D, out, &diag));
  EXPECT_EQ(out[0].kind, CM_POOL_EXCLUSIVE);
  EXPECT_EQ(out[0].max_alloc_size, 8192);
  EXPECT(out[0].has_dealloc_period);
  EXPECT_EQ(out[0].dealloc_period, 10000);
  EXPECT_EQ(out[1].kind, CM_POOL_SLICED);
  EXPECT_EQ(out[1].page_size, 1024);
  EXPECT(out[1].has_max_slice_size);
  EXPECT_EQ(out[1].max_slice_size, 1024);
  EXPECT(out[1].has_max_pool_size);
  EXPECT_EQ(out[1].max_pool_size, 4096);
  EXPECT(!out[1].has_dealloc_period);

  /* The same through the command-line syntax. */
  cm_pool_options_t parsed[4];
  size_t n = 0;
  ASSERT_OK(cm_pools_parse("exclusive:max=8KiB,period=10000;sliced:page=1000,cap=4096", D, parsed,
                           4, &n, &diag));
  ASSERT_EQ(n, 2);
  EXPECT(same_pool(&parsed[0], &out[0]));
  EXPECT(same_pool(&parsed[1], &out[1]));
}

/* Further resolution rules of §11.5. */
static void resolve_rules(void) {
  cm_pool_options_t in[6], out[6];
  in[0] = exclusive(0);     /* 0 stays 0 */
  in[1] = exclusive(33);    /* rounded up to 64 */
  in[2] = direct_at(1000);  /* reclaim_at unrounded */
  in[2].dealloc_period = 7; /* forced to none */
  in[2].has_dealloc_period = true;
  in[3] = sliced(1000, 100);            /* max slice rounded to 128 */
  in[4] = sliced_cap(1024, 1024, 5000); /* cap unrounded: effectively 4 pages */
  in[5] = sliced(1 * GiB, 1 * GiB);     /* page not limited by max_page_size */
  cm_diag_t diag = {0};
  ASSERT_OK(cm_pools_resolve(in, 6, D, out, &diag));
  EXPECT_EQ(out[0].max_alloc_size, 0);
  EXPECT_EQ(out[1].max_alloc_size, 64);
  EXPECT(out[2].has_reclaim_at);
  EXPECT_EQ(out[2].reclaim_at, 1000);
  EXPECT(!out[2].has_dealloc_period);
  EXPECT_EQ(out[3].page_size, 1024);
  EXPECT_EQ(out[3].max_slice_size, 128);
  EXPECT_EQ(out[4].max_pool_size, 5000);
  EXPECT_EQ(out[5].page_size, 1 * GiB);
  /* Alignment 0 is treated as 1. */
  cm_device_props_t a0 = {128 * MiB, 0};
  cm_pool_options_t one = sliced(1000, 999), r1;
  ASSERT_OK(cm_pools_resolve(&one, 1, a0, &r1, &diag));
  EXPECT_EQ(r1.page_size, 1000);
  EXPECT_EQ(r1.max_slice_size, 999);
}

/* ---- T73: errors -------------------------------------------------------------------- */

static void expect_resolve_error(const cm_pool_options_t *in, size_t n, const char *text,
                                 int line) {
  cm_pool_options_t *out = calloc(n ? n : 1, sizeof *out);
  cm_diag_t diag = {0};
  int rc = cm_pools_resolve(in, n, D, out, &diag);
  if (rc != CM_ECONFIG)
    cm_test_fail(__FILE__, line, "expected CM_ECONFIG, got %s", cm_err_name(rc));
  if (diag.code != CM_ECONFIG) cm_test_fail(__FILE__, line, "diag.code %d", diag.code);
  if (!strstr(diag.message, text))
    cm_test_fail(__FILE__, line, "message \"%s\" lacks \"%s\"", diag.message, text);
  free(out);
}
#define EXPECT_RESOLVE_ERROR(in, n, text) expect_resolve_error((in), (n), (text), __LINE__)

/* T73 (R): every error of §11.5 with its text. */
static void t73_resolve_errors(void) {
  cm_pool_options_t p;
  EXPECT_RESOLVE_ERROR(NULL, 0, "the pool list is empty");
  p = exclusive(1);
  EXPECT_RESOLVE_ERROR(&p, 0, "the pool list is empty");

  memset(&p, 0, sizeof p);
  p.kind = CM_POOL_SLICED;
  EXPECT_RESOLVE_ERROR(&p, 1, "`page_size` must be non-zero");
  p = sliced(1024, 0);
  EXPECT_RESOLVE_ERROR(&p, 1, "`max_slice_size` must be non-zero");
  p = sliced_cap(1024, 1024, 0);
  EXPECT_RESOLVE_ERROR(&p, 1, "`max_pool_size` must be non-zero");
  p = sliced(1024, 2048);
  EXPECT_RESOLVE_ERROR(&p, 1,
                       "`max_slice_size` (2048) exceeds `page_size` (1024); a slice can never "
                       "span pages");
  /* compared after rounding: 1000 -> 1024, 1030 -> 1056 */
  p = sliced(1000, 1030);
  EXPECT_RESOLVE_ERROR(&p, 1, "`max_slice_size` (1056) exceeds `page_size` (1024)");
  p = sliced_cap(2048, 2048, 1024);
  EXPECT_RESOLVE_ERROR(&p, 1,
                       "`max_pool_size` (1024) is smaller than `page_size` (2048); the cap can't "
                       "fit a single page");
  p = sliced_cap(1 * KiB, 1 * KiB, 64 * GiB);
  EXPECT_RESOLVE_ERROR(&p, 1,
                       "`max_pool_size` spans 67108864 pages of `page_size`, exceeding the "
                       "maximum of 65535; increase `page_size` or lower the cap");
  /* 65535 pages exactly is fine. */
  p = sliced_cap(1 * KiB, 1 * KiB, 65535 * KiB);
  cm_pool_options_t out;
  EXPECT_OK(cm_pools_resolve(&p, 1, D, &out, NULL));

  static cm_pool_options_t many[255];
  for (int i = 0; i < 255; i++) many[i] = exclusive(1024);
  EXPECT_RESOLVE_ERROR(many, 255,
                       "the pool list has 255 entries, exceeding the maximum of 254 dynamic "
                       "pools");
  static cm_pool_options_t out254[254];
  EXPECT_OK(cm_pools_resolve(many, 254, D, out254, NULL));
}

/* The first error in list order wins. */
static void t73_first_error_wins(void) {
  cm_pool_options_t in[3];
  in[0] = exclusive(100);
  in[1] = sliced(1024, 2048);        /* slice > page */
  in[2] = sliced_cap(1024, 1024, 0); /* zero cap */
  EXPECT_RESOLVE_ERROR(in, 3, "`max_slice_size` (2048) exceeds");
  in[1] = sliced_cap(0, 0, 0); /* page_size is checked first */
  EXPECT_RESOLVE_ERROR(in, 3, "`page_size` must be non-zero");
}

/* A failed resolve leaves the output and the diag's success state alone;
 * a successful one leaves the diag untouched. */
static void resolve_success_keeps_diag(void) {
  cm_pool_options_t p = sliced(1024, 1024), out;
  cm_diag_t diag;
  memset(&diag, 0, sizeof diag);
  snprintf(diag.message, sizeof diag.message, "untouched");
  ASSERT_OK(cm_pools_resolve(&p, 1, D, &out, &diag));
  EXPECT_STR(diag.message, "untouched");
  EXPECT_EQ(diag.code, 0);
}

/* T74 (R): not applicable to cubemem (no exclusive-memory-only build). */
static void t74_exclusive_only_build(void) {
  CM_SKIP(
      "cubemem has no exclusive-memory-only build; PresetUnavailable and "
      "SlicedPoolsUnavailable cannot occur");
}

/* ---- command-line syntax ------------------------------------------------------------- */

static void parse_syntax(void) {
  cm_pool_options_t out[8];
  size_t n = 0;
  cm_diag_t diag = {0};
  ASSERT_OK(
      cm_pools_parse("sliced:page=8MiB,max-slice=2MiB;exclusive:max=128MiB,period=5000;direct", D,
                     out, 8, &n, &diag));
  ASSERT_EQ(n, 3);
  EXPECT_EQ(out[0].kind, CM_POOL_SLICED);
  EXPECT_EQ(out[0].page_size, 8 * MiB);
  EXPECT_EQ(out[0].max_slice_size, 2 * MiB);
  EXPECT(!out[0].has_max_pool_size);
  EXPECT_EQ(out[1].kind, CM_POOL_EXCLUSIVE);
  EXPECT_EQ(out[1].max_alloc_size, 128 * MiB);
  EXPECT_EQ(out[1].dealloc_period, 5000);
  EXPECT_EQ(out[2].kind, CM_POOL_DIRECT);
  EXPECT(!out[2].has_reclaim_at);

  ASSERT_OK(cm_pools_parse("direct:reclaim=1GiB", D, out, 8, &n, &diag));
  ASSERT_EQ(n, 1);
  EXPECT(out[0].has_reclaim_at);
  EXPECT_EQ(out[0].reclaim_at, 1 * GiB);
  ASSERT_OK(cm_pools_parse("arena:object=8MiB", D, out, 8, &n, &diag));
  ASSERT_EQ(n, 1);
  EXPECT_EQ(out[0].max_object_size, 8 * MiB);
  {
    char text[256];
    cm_pools_format(out, n, text, sizeof text);
    EXPECT_CONTAINS(text, "object=8MiB");
  }
  EXPECT_STATUS(cm_pools_parse("arena:object=auto", D, out, 8, &n, &diag), CM_EPARSE);
  EXPECT_STATUS(cm_pools_parse("arena:object=automatic", D, out, 8, &n, &diag), CM_EPARSE);
  ASSERT_OK(cm_pools_parse("sliced:page=1TiB,cap=2TiB;exclusive:max=100B", D, out, 8, &n, &diag));
  EXPECT_EQ(out[0].page_size, 1024 * GiB);
  EXPECT_EQ(out[1].max_alloc_size, 128); /* 100 rounded up to 32 */

  /* A parsed list builds a working manager. */
  ASSERT_OK(cm_pools_parse("sliced:page=4KiB;direct", D, out, 8, &n, &diag));
  cm_manager_t *m = mk(D, out, n);
  cm_handle_t a = RSV(m, 100), b = RSV(m, 8000);
  EXPECT_EQ(loc_of(m, a).pool, 0);
  EXPECT_EQ(loc_of(m, b).pool, 1);
  drop(&a);
  drop(&b);
  cm_manager_destroy(m);
}

static void expect_parse_error(const char *text, const char *needle, int line) {
  cm_pool_options_t out[8];
  size_t n = 0;
  cm_diag_t diag = {0};
  int rc = cm_pools_parse(text, D, out, 8, &n, &diag);
  if (rc != CM_ECONFIG && rc != CM_EPARSE)
    cm_test_fail(__FILE__, line, "\"%s\": expected CM_ECONFIG/CM_EPARSE, got %s", text,
                 cm_err_name(rc));
  if (diag.code != rc) cm_test_fail(__FILE__, line, "\"%s\": diag.code %d", text, diag.code);
  if (!strstr(diag.message, needle))
    cm_test_fail(__FILE__, line, "\"%s\": message \"%s\" lacks \"%s\"", text, diag.message, needle);
}
#define EXPECT_PARSE_ERROR(text, needle) expect_parse_error((text), (needle), __LINE__)

/* The messages of the one layout parser (the command line prints them as
 * they are): suggestions for kinds, presets and keys, the size grammar's
 * reason, whole periods. */
static void parse_messages(void) {
  EXPECT_PARSE_ERROR("subslice", "unknown layout 'subslice'; did you mean 'subslices'?");
  EXPECT_PARSE_ERROR("slized:page=1MiB", "pool 1: unknown kind 'slized'; did you mean 'sliced'?");
  EXPECT_PARSE_ERROR("direct;;sliced", "pool 2: unknown kind ''; expected sliced");
  EXPECT_PARSE_ERROR("sliced:pge=1MiB", "pool 1 (sliced): unknown option 'pge='; did you mean "
                                        "'page='?");
  EXPECT_PARSE_ERROR("sliced:page=8M", "pool 1 (sliced): bad page=8M: unit 'M' is ambiguous");
  EXPECT_PARSE_ERROR("sliced:page=1.3B", "not a whole number of bytes (e.g. 80GiB");
  EXPECT_PARSE_ERROR("exclusive:period=5KiB",
                     "pool 1 (exclusive): bad period=5KiB: expected a whole number of reservations");
  EXPECT_PARSE_ERROR("exclusive:period=18446744073709551616", "bad period=");
  cm_pool_options_t out[2];
  size_t n = 0;
  ASSERT_OK(cm_pools_parse("sliced:page=1.5 mib,max-slice=1MB;exclusive:period=7", D, out, 2, &n,
                           NULL));
  EXPECT_EQ(out[0].page_size, 3 * MiB / 2);
  EXPECT_EQ(out[0].max_slice_size, 1000000);
  EXPECT_EQ(out[1].dealloc_period, 7);
}

static void parse_errors(void) {
  EXPECT_PARSE_ERROR("", "the pool list is empty");
  EXPECT_PARSE_ERROR("slized:page=1MiB", "slized");
  EXPECT_PARSE_ERROR("sliced:page=1MiB,colour=red", "colour");
  EXPECT_PARSE_ERROR("sliced:page=12XB", "12XB");
  EXPECT_PARSE_ERROR("sliced:page", "page");
  EXPECT_PARSE_ERROR("sliced:page=-5", "-5");
  EXPECT_PARSE_ERROR("sliced:page=99999999999999999999", "99999999999999999999");
  EXPECT_PARSE_ERROR("sliced:page=20000000TiB", "20000000TiB");
  /* validation errors come back with the §11.5 texts */
  EXPECT_PARSE_ERROR("sliced:page=0", "`page_size` must be non-zero");
  EXPECT_PARSE_ERROR("sliced:page=1KiB,max-slice=2KiB",
                     "`max_slice_size` (2048) exceeds `page_size` (1024)");
  EXPECT_PARSE_ERROR("sliced:page=2KiB,cap=1KiB",
                     "`max_pool_size` (1024) is smaller than `page_size` (2048)");
  EXPECT_PARSE_ERROR("sliced:page=1KiB,cap=64GiB", "spans 67108864 pages");
  /* 255 entries: a configuration error even with room for them all */
  char *big = malloc(255 * 10 + 1);
  ASSERT(big != NULL);
  big[0] = 0;
  for (int i = 0; i < 255; i++) strcat(big, i ? ";direct" : "direct");
  static cm_pool_options_t room[256];
  size_t n = 0;
  cm_diag_t diag = {0};
  EXPECT_STATUS(cm_pools_parse(big, D, room, 256, &n, &diag), CM_ECONFIG);
  EXPECT_CONTAINS(diag.message,
                  "the pool list has 255 entries, exceeding the maximum of 254 dynamic pools");
  /* 254 are fine */
  big[strlen(big) - strlen(";direct")] = 0;
  EXPECT_OK(cm_pools_parse(big, D, room, 256, &n, &diag));
  EXPECT_EQ(n, 254);
  free(big);
  /* Too little room for a valid list: CM_EINVAL, with the count. */
  cm_pool_options_t two[2];
  cm_diag_clear(&diag);
  EXPECT_STATUS(cm_pools_parse("direct;direct;direct", D, two, 2, &n, &diag), CM_EINVAL);
  EXPECT_EQ(n, 3);
}

/* Every option field of a pool, has_* flags included, equal in a and b. */
static bool same_fields(const cm_pool_options_t *a, const cm_pool_options_t *b) {
  return a->kind == b->kind && a->page_size == b->page_size &&
         a->max_slice_size == b->max_slice_size && a->has_max_slice_size == b->has_max_slice_size &&
         a->max_pool_size == b->max_pool_size && a->has_max_pool_size == b->has_max_pool_size &&
         a->max_alloc_size == b->max_alloc_size && a->dealloc_period == b->dealloc_period &&
         a->has_dealloc_period == b->has_dealloc_period && a->reclaim_at == b->reclaim_at &&
         a->has_reclaim_at == b->has_reclaim_at && a->max_object_size == b->max_object_size &&
         a->release_threshold == b->release_threshold &&
         a->has_release_threshold == b->has_release_threshold;
}

/* cm_pools_keys lists exactly what cm_pools_parse accepts: every key sets an
 * option, its field name sets the same one, and the message for an unknown
 * key lists them all ("page=, ..."), in the order of the list. */
static void keys_list(void) {
  size_t nk = 0;
  const char *const *fields = NULL;
  const char *const *keys = cm_pools_keys(&nk, &fields);
  ASSERT(keys != NULL && fields != NULL);
  EXPECT_EQ(nk, 8);
  EXPECT(cm_pools_keys(NULL, NULL) == keys);
  cm_pool_options_t plain[1], by_key[1], by_field[1];
  size_t n = 0;
  cm_diag_t diag = {0};
  ASSERT_OK(cm_pools_parse("arena", D, plain, 1, &n, &diag));
  char expected[256] = "expected ";
  for (size_t k = 0; k < nk; k++) {
    char text[96];
    snprintf(text, sizeof text, "arena:%s=4096", keys[k]); /* a size, and a whole period */
    int rc = cm_pools_parse(text, D, by_key, 1, &n, &diag);
    if (rc != CM_OK) cm_test_fail(__FILE__, __LINE__, "\"%s\": %s", text, diag.message);
    snprintf(text, sizeof text, "arena:%s=4096", fields[k]);
    rc = cm_pools_parse(text, D, by_field, 1, &n, &diag);
    if (rc != CM_OK) cm_test_fail(__FILE__, __LINE__, "\"%s\": %s", text, diag.message);
    if (same_fields(plain, by_key)) cm_test_fail(__FILE__, __LINE__, "%s= set nothing", keys[k]);
    if (!same_fields(by_key, by_field))
      cm_test_fail(__FILE__, __LINE__, "%s= and %s= differ", keys[k], fields[k]);
    size_t w = strlen(expected);
    snprintf(expected + w, sizeof expected - w, "%s%s=",
             k == 0 ? "" : k + 1 == nk ? " or " : ", ", keys[k]);
  }
  EXPECT_PARSE_ERROR("arena:colour=1", expected);
}

/* parse(format(list)) == list, for every kind and option. */
static void format_round_trip(void) {
  cm_pool_options_t in[7];
  in[0] = sliced(8 * MiB, 2 * MiB);
  in[1] = sliced_cap(1 * MiB, 64 * KiB, 3 * MiB + 5);
  in[1].dealloc_period = 100;
  in[1].has_dealloc_period = true;
  in[2] = exclusive_p(128 * MiB, 5000);
  in[3] = exclusive(0);
  in[4] = direct();
  in[5] = direct_at(12345);
  memset(&in[6], 0, sizeof in[6]);
  in[6].kind = CM_POOL_ARENA;
  in[6].dealloc_period = 50;
  in[6].has_dealloc_period = true;
  cm_pool_options_t res[7];
  cm_diag_t diag = {0};
  ASSERT_OK(cm_pools_resolve(in, 7, D, res, &diag));
  char buf[1024];
  size_t need = cm_pools_format(res, 7, buf, sizeof buf);
  ASSERT(need < sizeof buf);
  EXPECT_EQ(strlen(buf), need);
  cm_pool_options_t back[8];
  size_t n = 0;
  int rc = cm_pools_parse(buf, D, back, 8, &n, &diag);
  if (rc != CM_OK) cm_test_fail(__FILE__, __LINE__, "parse \"%s\": %s", buf, diag.message);
  ASSERT_OK(rc);
  ASSERT_EQ(n, 7);
  for (size_t i = 0; i < 7; i++)
    if (!same_pool(&res[i], &back[i]))
      cm_test_fail(__FILE__, __LINE__, "pool %zu changed through \"%s\"", i, buf);
  /* snprintf semantics: a short buffer gets a terminated prefix, same length. */
  char small[8];
  EXPECT_EQ(cm_pools_format(res, 7, small, sizeof small), need);
  EXPECT_EQ(strlen(small), sizeof small - 1);
  EXPECT_EQ(cm_pools_format(res, 7, NULL, 0), need);
}

int main(void) {
  CM_RUN(t71_presets_by_name);
  CM_RUN(presets_are_resolved);
  CM_RUN(t72_resolve);
  CM_RUN(resolve_rules);
  CM_RUN(t73_resolve_errors);
  CM_RUN(t73_first_error_wins);
  CM_RUN(resolve_success_keeps_diag);
  CM_RUN(t74_exclusive_only_build);
  CM_RUN(parse_syntax);
  CM_RUN(parse_errors);
  CM_RUN(parse_messages);
  CM_RUN(format_round_trip);
  CM_RUN(keys_list);
  return cm_test_finish();
}
