/*
 * test_units.c - the basic tools of src/base kept once for the whole tree:
 * the one size grammar (cm__size_parse: the command line's SIZE, --pools
 * values and cm_pools_parse all use it), the exact and IEC byte formats, and
 * the "did you mean" edit distance (cm__osa_distance). Exports: main.
 */
#include <stdint.h>
#include <string.h>

#include "base/suggest.h"
#include "base/units.h"
#include "cm_test.h"
#include "cubemem/memory.h"

/* ---- helpers of this file ----------------------------------------------- */

static uint64_t size_of(const char *s) {
  uint64_t v = 0xdead;
  char why[128];
  if (cm__size_parse(s, strlen(s), &v, why, sizeof why) != 0)
    cm_test_fail(__FILE__, __LINE__, "'%s' refused: %s", s, why);
  return v;
}

static const char *why_of(const char *s) {
  static char why[128];
  uint64_t v = 7;
  if (cm__size_parse(s, strlen(s), &v, why, sizeof why) == 0)
    cm_test_fail(__FILE__, __LINE__, "'%s' accepted as %llu", s, (unsigned long long)v);
  if (v != 7) cm_test_fail(__FILE__, __LINE__, "'%s': output written on failure", s);
  return why;
}

/* ---- the size grammar ------------------------------------------------------ */

static void size_grammar_accepts(void) {
  EXPECT_EQ(size_of("0"), 0);
  EXPECT_EQ(size_of("1048576"), 1048576);
  EXPECT_EQ(size_of("512B"), 512);
  EXPECT_EQ(size_of("8MiB"), 8ull << 20);
  EXPECT_EQ(size_of("8 mib"), 8ull << 20);
  EXPECT_EQ(size_of("80GiB"), 80ull << 30);
  EXPECT_EQ(size_of("2TiB"), 2ull << 40);
  EXPECT_EQ(size_of("512MB"), 512000000);
  EXPECT_EQ(size_of("1.5GiB"), 3ull << 29);
  EXPECT_EQ(size_of(".5KiB"), 512);
  /* integers are exact, beyond double's 53 bits */
  EXPECT_EQ(size_of("9007199254740993"), 9007199254740993ull);
  EXPECT_EQ(size_of("18446744073709551615"), UINT64_MAX);
}

static void size_grammar_refuses(void) {
  EXPECT_STR(why_of(""), "expected a number with an optional unit");
  EXPECT_STR(why_of("-1"), "expected a number with an optional unit");
  EXPECT_STR(why_of("MiB"), "expected a number with an optional unit");
  EXPECT_STR(why_of("0x10"), "expected a plain decimal number");
  EXPECT_STR(why_of("1e3"), "expected a plain decimal number");
  EXPECT_STR(why_of("1.3B"), "not a whole number of bytes");
  EXPECT_STR(why_of("18446744073709551616"), "too large");
  EXPECT_STR(why_of("16777216TiB"), "too large");
  EXPECT_STR(why_of("8 furlongs"), "unknown unit 'furlongs'");
  EXPECT_CONTAINS(why_of("8M"), "ambiguous: write MiB (powers of 1024) or MB");
}

/* Only the first len bytes count: cm_pools_parse hands in a slice of its text. */
static void size_grammar_reads_len_bytes(void) {
  uint64_t v = 0;
  ASSERT_OK(cm__size_parse("8MiB,cap=1", 4, &v, NULL, 0));
  EXPECT_EQ(v, 8ull << 20);
  EXPECT_NE(cm__size_parse("8MiB,cap=1", 6, &v, NULL, 0), 0);
}

/* --pools and cm_pools_parse take the same grammar as the command line. */
static void pools_use_the_grammar(void) {
  cm_device_props_t props = {.max_page_size = 1ull << 30, .alignment = 512};
  cm_pool_options_t p[4];
  size_t n = 0;
  cm_diag_t diag = {0};
  ASSERT_OK(cm_pools_parse("sliced:page=8 MiB,max-slice=1.5MiB", props, p, 4, &n, &diag));
  EXPECT_EQ(p[0].page_size, 8ull << 20);
  EXPECT_EQ(p[0].max_slice_size, 3ull << 19);
  EXPECT_NE(cm_pools_parse("sliced:page=8M", props, p, 4, &n, &diag), CM_OK);
}

/* ---- byte formats ---------------------------------------------------------- */

static void byte_formats(void) {
  char b[32];
  cm__fmt_size_exact(b, sizeof b, 8ull << 20);
  EXPECT_STR(b, "8MiB");
  cm__fmt_size_exact(b, sizeof b, 3 << 10);
  EXPECT_STR(b, "3KiB");
  cm__fmt_size_exact(b, sizeof b, 1000);
  EXPECT_STR(b, "1000");
  cm__fmt_size_exact(b, sizeof b, 0);
  EXPECT_STR(b, "0");
  cm__fmt_iec(512, b, sizeof b);
  EXPECT_STR(b, "512 B");
  cm__fmt_iec(3ull << 19, b, sizeof b);
  EXPECT_STR(b, "1.50 MiB");
  cm__fmt_iec(8ull << 30, b, sizeof b);
  EXPECT_STR(b, "8 GiB");
  /* the grammar reads back what the exact format writes */
  cm__fmt_size_exact(b, sizeof b, 1714ull << 20);
  EXPECT_EQ(size_of(b), 1714ull << 20);
}

/* ---- suggestions ----------------------------------------------------------- */

static void edit_distance(void) {
  EXPECT_EQ(cm__osa_distance("pools", 5, "pools", 5, false), 0);
  EXPECT_EQ(cm__osa_distance("pool", 4, "pools", 5, false), 1);
  EXPECT_EQ(cm__osa_distance("ploso", 5, "pools", 5, false), 3);
  EXPECT_EQ(cm__osa_distance("lpools", 6, "plools", 6, false), 1); /* one transposition */
  EXPECT_EQ(cm__osa_distance("POOLS", 5, "pools", 5, false), 5);
  EXPECT_EQ(cm__osa_distance("POOLS", 5, "pools", 5, true), 0);
  EXPECT_EQ(cm__osa_distance("-", 1, "-", 1, true), 0);
  char long_word[CM__SUGGEST_MAX + 2];
  memset(long_word, 'a', sizeof long_word - 1);
  long_word[sizeof long_word - 1] = '\0';
  EXPECT_EQ(cm__osa_distance(long_word, CM__SUGGEST_MAX + 1, "a", 1, false), SIZE_MAX);
  EXPECT_EQ(cm__osa_distance(long_word, CM__SUGGEST_MAX, "a", 1, false), CM__SUGGEST_MAX - 1);
}

int main(void) {
  CM_RUN(size_grammar_accepts);
  CM_RUN(size_grammar_refuses);
  CM_RUN(size_grammar_reads_len_bytes);
  CM_RUN(pools_use_the_grammar);
  CM_RUN(byte_formats);
  CM_RUN(edit_distance);
  return cm_test_finish();
}
