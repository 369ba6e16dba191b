/*
 * test_config_hostile.c - the configuration reader on hostile input:
 * truncated documents, bad UTF-8 and NUL bytes (also through a file and
 * discovery), deep nesting, 10 MB lines, and random documents; every
 * outcome is a clean status with a message, never a crash.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_config_fixture.h"
#include "cm_test.h"
#include "cubemem/config.h"

/* ---- hostile input ------------------------------------------------------------- */

static bool acceptable(int rc) {
  return rc == CM_OK || rc == CM_EPARSE || rc == CM_ECONFIG || rc == CM_ENOTFOUND;
}

static void test_truncated_documents(void) {
  const char *full =
      "# header\n[memory]\npersistent_memory = \"size-match\" # tail\n"
      "logger = { level = \"basic\", file = \"d/m.log\", append = false }\n"
      "[memory.cuda]\nallocator = \"async\"\n[profiling]\nx = [1, 2.5, \"s\", 1979-05-27T07:32:00Z]\n"
      "[cubecl.memory]\npersistent_memory = 'enforced'\n";
  size_t n = strlen(full);
  int ok = 0;
  for (size_t len = 0; len <= n; len++) {
    cm_config_t c;
    cm_config_init(&c);
    cm_diag_t d = {0};
    int rc = cm_config_load_buffer(&c, full, len, "t.toml", NULL, &d);
    if (!acceptable(rc)) cm_test_fail(__FILE__, __LINE__, "prefix %zu: rc %d", len, rc);
    if (rc == CM_OK) ok++;
    if (rc != CM_OK) EXPECT(d.message[0] != '\0');
    rc = cm_config_load_buffer(&c, full, len, "burn.toml", "cubecl", &d);
    if (!acceptable(rc)) cm_test_fail(__FILE__, __LINE__, "prefix %zu (section): rc %d", len, rc);
    cm_config_free(&c);
  }
  EXPECT_GT(ok, 5);
}

static void test_bad_bytes(void) {
  static const struct {
    const char *data;
    size_t len;
  } cases[] = {
#define B(s) {s, sizeof(s) - 1}
      B("[memory]\npersistent_memory = \"en\xc3\x28\"\n"), /* invalid UTF-8 in a string */
      B("# \xff\xfe comment\n[memory]\n"),                  /* invalid UTF-8 in a comment */
      B("[mem\xe2\x82ory]\n"),                              /* truncated sequence in a key */
      B("[memory]\npersistent_memory = \"enabled\"\0\n"),    /* NUL after a value */
      B("\0"),
      B("[memory]\0persistent_memory = 1\n"),
      B("x = \"\xed\xa0\x80\"\n"), /* UTF-16 surrogate encoded in UTF-8 */
#undef B
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    cm_config_t c;
    cm_config_init(&c);
    cm_diag_t d = {0};
    int rc = cm_config_load_buffer(&c, cases[i].data, cases[i].len, "b.toml", NULL, &d);
    if (rc != CM_EPARSE)
      cm_test_fail(__FILE__, __LINE__, "bad bytes case %zu: rc %d (%s)", i, rc, d.message);
    EXPECT(d.line >= 1);
    cm_config_free(&c);
  }
  /* the same through a file, and through discovery */
  make_root();
  put_bytes(in_root("cubecl.toml"), "[memory]\0\n", 10);
  cm_config_t c;
  cm_config_init(&c);
  cm_diag_t d = {0};
  EXPECT_STATUS(cm_config_load_file(&c, in_root("cubecl.toml"), NULL, &d), CM_EPARSE);
  EXPECT_STATUS(cm_config_discover(&c, g_root, NULL, &d), CM_EPARSE);
  cm_config_free(&c);
  rm_rf(g_root);
}

static char *repeat(const char *pre, char ch, size_t n, const char *post) {
  size_t a = strlen(pre), b = strlen(post);
  char *s = malloc(a + n + b + 1);
  if (!s) return NULL;
  memcpy(s, pre, a);
  memset(s + a, ch, n);
  memcpy(s + a + n, post, b + 1);
  return s;
}

static void test_deep_nesting(void) {
  cm_config_t c;
  cm_config_init(&c);
  cm_diag_t d = {0};
  /* far beyond the parser's depth limit: a parse error, not a stack overflow */
  char *deep = repeat("x = ", '[', 200000, "");
  ASSERT(deep != NULL);
  EXPECT_STATUS(load_text(&c, deep, &d), CM_EPARSE);
  free(deep);
  /* within the limit and under [memory]: a type error naming the key */
  char text[512];
  int depth = 100;
  int n = snprintf(text, sizeof text, "[memory]\npersistent_memory = ");
  for (int i = 0; i < depth; i++) text[n++] = '[';
  for (int i = 0; i < depth; i++) text[n++] = ']';
  text[n++] = '\n';
  text[n] = '\0';
  EXPECT_STATUS(load_text(&c, text, &d), CM_ECONFIG);
  EXPECT_STR(d.key, "memory.persistent_memory");
  EXPECT_CONTAINS(d.message, "found an array");
  /* nested inline tables inside an unchecked table are fine */
  n = snprintf(text, sizeof text, "[other]\nx = ");
  for (int i = 0; i < 60; i++) n += snprintf(text + n, sizeof text - (size_t)n, "{a=");
  n += snprintf(text + n, sizeof text - (size_t)n, "1");
  for (int i = 0; i < 60; i++) text[n++] = '}';
  text[n] = '\0';
  EXPECT_OK(load_text(&c, text, &d));
  cm_config_free(&c);
}

static void test_huge_lines(void) {
  const size_t big = 10u * 1024u * 1024u;
  cm_config_t c;
  cm_config_init(&c);
  cm_diag_t d = {0};
  char *s = repeat("[memory]\npersistent_memory = \"disabled\" # ", 'c', big, "\n");
  ASSERT(s != NULL);
  EXPECT_OK(load_text(&c, s, &d));
  EXPECT_EQ(c.persistent_memory, CM_PERSISTENT_DISABLED);
  free(s);
  s = repeat("[profiling]\nx = \"", 's', big, "\"\n");
  ASSERT(s != NULL);
  EXPECT_OK(load_text(&c, s, &d));
  free(s);
  /* a 10 MB log file path is accepted and formatted without overflow */
  s = repeat("[memory.logger]\nfile = \"", 'p', big, "\"\n");
  ASSERT(s != NULL);
  EXPECT_OK(load_text(&c, s, &d));
  EXPECT_EQ(strlen(c.logger.file), big);
  char small[64];
  size_t need = cm_config_value_format(&c, CM_CFG_LOGGER_FILE, small, sizeof small);
  EXPECT_GT(need, sizeof small);
  EXPECT_EQ(strlen(small), sizeof small - 1);
  free(s);
  /* a 10 MB unknown key under [memory]: an error with a truncated key */
  s = repeat("[memory]\n", 'k', big, " = 1\n");
  ASSERT(s != NULL);
  EXPECT_STATUS(load_text(&c, s, &d), CM_ECONFIG);
  EXPECT_CONTAINS(d.message, "unknown key");
  EXPECT_LT(strlen(d.key), sizeof d.key);
  free(s);
  /* a 10 MB unknown enum value */
  s = repeat("[memory]\npersistent_memory = \"", 'v', big, "\"\n");
  ASSERT(s != NULL);
  EXPECT_STATUS(load_text(&c, s, &d), CM_ECONFIG);
  EXPECT_CONTAINS(d.message, "...");
  free(s);
  /* and a 10 MB file through discovery */
  make_root();
  s = repeat("[memory]\npersistent_memory = \"enforced\"\n# ", 'z', big, "\n");
  ASSERT(s != NULL);
  put_file(g_root, "cubecl.toml", s);
  free(s);
  ASSERT_OK(cm_config_discover(&c, g_root, NULL, &d));
  EXPECT_EQ(c.persistent_memory, CM_PERSISTENT_ENFORCED);
  cm_config_free(&c);
  rm_rf(g_root);
}

/* Random documents assembled from TOML-ish tokens and raw bytes. */
static void test_random_documents(void) {
  static const char *tokens[] = {
      "[memory]",  "[memory.logger]", "[memory.cuda]", "[[memory.pools]]", "\n", " ", "=",
      "\"",        "'",               "{",             "}",                "[",  "]", ",",
      ".",         "level",           "file",          "\"basic\"",        "true", "1",
      "persistent_memory", "\"enabled\"", "logger", "cuda", "allocator", "\"async\"", "#",
      "pools",     "\\",              "\xc3",          "\x00",             "1979-05-27", "\"\"\"",
      "inf",       "0x1F",            "append",        "stdout",           "log", "\"trace\""};
  const size_t nt = sizeof tokens / sizeof tokens[0];
  uint64_t seed = 0x9E3779B97F4A7C15ull;
  char buf[512];
  int counts[3] = {0};
  for (int iter = 0; iter < 20000; iter++) {
    size_t len = 0;
    int ntok = 1 + (int)(seed >> 60);
    for (int t = 0; t < ntok * 3 && len < sizeof buf - 32; t++) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      size_t k = (size_t)(seed >> 33) % nt;
      size_t tl = k == 30 ? 1 : strlen(tokens[k]); /* the NUL token */
      memcpy(buf + len, tokens[k], tl);
      len += tl;
    }
    cm_config_t c;
    cm_config_init(&c);
    cm_diag_t d = {0};
    int rc = cm_config_load_buffer(&c, buf, len, "r.toml", (iter & 1) ? "cubecl" : NULL, &d);
    if (!acceptable(rc)) {
      cm_test_fail(__FILE__, __LINE__, "random doc %d: rc %d", iter, rc);
      break;
    }
    counts[rc == CM_OK ? 0 : rc == CM_EPARSE ? 1 : 2]++;
    cm_config_free(&c);
  }
  EXPECT_GT(counts[0], 0);
  EXPECT_GT(counts[1], 0);
}

int main(void) {
  CM_RUN(test_truncated_documents);
  CM_RUN(test_bad_bytes);
  CM_RUN(test_deep_nesting);
  CM_RUN(test_huge_lines);
  CM_RUN(test_random_documents);
  return cm_test_finish();
}
