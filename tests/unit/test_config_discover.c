/*
 * test_config_discover.c - discovery of the configuration file (spec §11.1,
 * T75, T76) in temporary directory trees: which file wins, burn.toml with
 * and without its [cubecl] section, malformed files, strict vs lenient
 * (skipped files reported), and nothing found.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_config_fixture.h"
#include "cm_test.h"
#include "cubemem/config.h"

/* ---- discovery (§11.1, T75, T76) ------------------------------------------------- */

#define VALID_A "[memory]\npersistent_memory = \"disabled\"\n"
#define VALID_B "[memory]\npersistent_memory = \"enforced\"\n"
#define VALID_BURN "[package]\nname = \"p\"\n[cubecl.memory]\npersistent_memory = \"size-match\"\n"
#define BAD_POOLS "[memory]\npools = \"sub-slices\"\n"
#define MALFORMED "[memory\npersistent_memory = \n"

typedef struct {
  int n;
  char paths[8][PATH_MAX];
  int codes[8];
} skips_t;

static void skip_fn(void *arg, const char *path, const char *section, const cm_diag_t *err) {
  skips_t *s = arg;
  (void)section;
  if (s->n < 8) {
    snprintf(s->paths[s->n], PATH_MAX, "%s", path);
    s->codes[s->n] = err->code;
  }
  s->n++;
}

static int discover(cm_config_t *c, const char *rel, bool lenient, skips_t *sk, cm_diag_t *d) {
  cm_config_discover_options_t o = {.lenient = lenient, .on_skip = skip_fn, .on_skip_arg = sk};
  return cm_config_discover(c, in_root(rel), &o, d);
}

/* T76 case 1: b/burn.toml without [cubecl], a/cubecl.toml valid: a's file. */
static void test_t76_burn_without_section(void) {
  make_root();
  mk("a");
  mk("a/b");
  put_file(in_root("a/b"), "burn.toml", "[package]\nname = \"x\"\n");
  put_file(in_root("a"), "cubecl.toml", VALID_A);
  cm_config_t c;
  cm_config_init(&c);
  cm_diag_t d = {0};
  skips_t sk = {0};
  for (int lenient = 0; lenient < 2; lenient++) {
    ASSERT_OK(discover(&c, "a/b", lenient, &sk, &d));
    EXPECT_STR(c.path, in_root("a/cubecl.toml"));
    EXPECT(c.section == NULL);
    EXPECT_EQ(c.persistent_memory, CM_PERSISTENT_DISABLED);
  }
  EXPECT_EQ(sk.n, 0);
  cm_config_free(&c);
  rm_rf(g_root);
}

/* T76 case 2: b/cubecl.toml and b/CubeCL.toml: cubecl.toml wins. */
static void test_t76_lowercase_first(void) {
  make_root();
  mk("a");
  mk("a/b");
  put_file(in_root("a/b"), "cubecl.toml", VALID_A);
  put_file(in_root("a/b"), "CubeCL.toml", VALID_B);
  cm_config_t c;
  cm_config_init(&c);
  cm_diag_t d = {0};
  skips_t sk = {0};
  ASSERT_OK(discover(&c, "a/b", false, &sk, &d));
  EXPECT_STR(c.path, in_root("a/b/cubecl.toml"));
  EXPECT_EQ(c.persistent_memory, CM_PERSISTENT_DISABLED);
  cm_config_free(&c);
  rm_rf(g_root);
}

/* T76 case 3: b/cubecl.toml malformed, b/burn.toml with a valid [cubecl].
 * Lenient (the reference): burn.toml is used and the bad file is reported.
 * Strict (our default): the malformed file is the error. */
static void test_t76_malformed_then_burn(void) {
  make_root();
  mk("a");
  mk("a/b");
  put_file(in_root("a/b"), "cubecl.toml", MALFORMED);
  put_file(in_root("a/b"), "burn.toml", VALID_BURN);
  cm_config_t c;
  cm_config_init(&c);
  cm_diag_t d = {0};
  skips_t sk = {0};
  ASSERT_OK(discover(&c, "a/b", true, &sk, &d));
  EXPECT_STR(c.path, in_root("a/b/burn.toml"));
  EXPECT_STR(c.section, "cubecl");
  EXPECT_EQ(c.persistent_memory, CM_PERSISTENT_SIZE_MATCH);
  ASSERT_EQ(sk.n, 1);
  EXPECT_STR(sk.paths[0], in_root("a/b/cubecl.toml"));
  EXPECT_STATUS(sk.codes[0], CM_EPARSE);

  cm_config_t before;
  cm_config_init(&before);
  ASSERT_OK(cm_config_copy(&before, &c));
  EXPECT_STATUS(discover(&c, "a/b", false, &sk, &d), CM_EPARSE);
  EXPECT_STR(d.file, in_root("a/b/cubecl.toml"));
  EXPECT_EQ(d.line, 1);
  EXPECT_CONTAINS(d.message, in_root("a/b/cubecl.toml"));
  EXPECT_EQ(sk.n, 1); /* strict reports through the return value only */
  EXPECT_STR(c.path, before.path); /* unchanged */
  EXPECT_EQ(c.persistent_memory, before.persistent_memory);
  cm_config_free(&before);
  cm_config_free(&c);
  rm_rf(g_root);
}

/* T75 as a whole file: pools in cubecl.toml. Lenient moves on to
 * CubeCL.toml, then burn.toml, then the parent; strict stops. */
static void test_t75_pools_file_chain(void) {
  make_root();
  mk("a");
  mk("a/b");
  put_file(in_root("a/b"), "cubecl.toml", BAD_POOLS);
  put_file(in_root("a/b"), "CubeCL.toml", "[[memory.pools]]\ntype = \"sliced\"\n");
  put_file(in_root("a/b"), "burn.toml", "[cubecl.memory]\npools = \"exclusive-pages\"\n");
  put_file(in_root("a/b"), "Burn.toml", "[package]\n"); /* no [cubecl]: silent */
  put_file(in_root("a"), "cubecl.toml", VALID_B);
  cm_config_t c;
  cm_config_init(&c);
  cm_diag_t d = {0};
  skips_t sk = {0};
  ASSERT_OK(discover(&c, "a/b", true, &sk, &d));
  EXPECT_STR(c.path, in_root("a/cubecl.toml"));
  EXPECT_EQ(c.persistent_memory, CM_PERSISTENT_ENFORCED);
  ASSERT_EQ(sk.n, 3);
  EXPECT_STR(sk.paths[0], in_root("a/b/cubecl.toml"));
  EXPECT_STR(sk.paths[1], in_root("a/b/CubeCL.toml"));
  EXPECT_STR(sk.paths[2], in_root("a/b/burn.toml"));
  for (int i = 0; i < 3; i++) EXPECT_STATUS(sk.codes[i], CM_ECONFIG);

  EXPECT_STATUS(discover(&c, "a/b", false, &sk, &d), CM_ECONFIG);
  EXPECT_STR(d.key, "memory.pools");
  EXPECT_STR(d.file, in_root("a/b/cubecl.toml"));
  EXPECT_CONTAINS(d.message, POOLS_HINT);

  /* everything bad, nothing above: lenient falls back to the defaults */
  rm_rf(in_root("a/cubecl.toml"));
  sk.n = 0;
  if (ancestors_clean()) {
    ASSERT_OK(discover(&c, "a/b", true, &sk, &d));
    EXPECT(c.path == NULL);
    expect_defaults(&c);
    EXPECT_EQ(sk.n, 3);
  }
  cm_config_free(&c);
  rm_rf(g_root);
}

static void test_discover_names(void) {
  make_root();
  mk("x");
  mk("x/y");
  mk("x/y/z");
  cm_config_t c;
  cm_config_init(&c);
  cm_diag_t d = {0};
  skips_t sk = {0};
  /* CubeCL.toml alone */
  put_file(in_root("x/y"), "CubeCL.toml", VALID_A);
  ASSERT_OK(discover(&c, "x/y/z", false, &sk, &d));
  EXPECT_STR(c.path, in_root("x/y/CubeCL.toml"));
  /* Burn.toml with [cubecl] in a nearer directory wins over a farther file */
  put_file(in_root("x/y/z"), "Burn.toml", VALID_BURN);
  ASSERT_OK(discover(&c, "x/y/z", false, &sk, &d));
  EXPECT_STR(c.path, in_root("x/y/z/Burn.toml"));
  EXPECT_STR(c.section, "cubecl");
  EXPECT_EQ(c.persistent_memory, CM_PERSISTENT_SIZE_MATCH);
  /* burn.toml is tried before Burn.toml */
  put_file(in_root("x/y/z"), "burn.toml", "[cubecl.memory]\npersistent_memory = \"enforced\"\n");
  ASSERT_OK(discover(&c, "x/y/z", false, &sk, &d));
  EXPECT_STR(c.path, in_root("x/y/z/burn.toml"));
  /* cubecl.toml beats burn.toml at the same level */
  put_file(in_root("x/y/z"), "cubecl.toml", "");
  ASSERT_OK(discover(&c, "x/y/z", false, &sk, &d));
  EXPECT_STR(c.path, in_root("x/y/z/cubecl.toml"));
  expect_defaults(&c); /* an empty file is a valid, all-default config */
  /* start directory given as the start itself, and relative paths */
  char cwd[PATH_MAX];
  ASSERT(getcwd(cwd, sizeof cwd) != NULL);
  ASSERT(chdir(in_root("x/y/z")) == 0);
  int rc1 = cm_config_discover(&c, NULL, NULL, &d);
  char *p1 = c.path ? strdup(c.path) : NULL;
  int rc2 = cm_config_discover(&c, "..", NULL, &d);
  char *p2 = c.path ? strdup(c.path) : NULL;
  ASSERT(chdir(cwd) == 0);
  EXPECT_OK(rc1);
  EXPECT_STR(p1, in_root("x/y/z/cubecl.toml"));
  EXPECT_OK(rc2);
  EXPECT_STR(p2, in_root("x/y/CubeCL.toml"));
  free(p1);
  free(p2);
  /* a start directory that does not exist */
  EXPECT_STATUS(cm_config_discover(&c, in_root("nope"), NULL, &d), CM_EIO);
  EXPECT_STATUS(cm_config_discover(NULL, NULL, NULL, &d), CM_EINVAL);
  cm_config_free(&c);
  rm_rf(g_root);
}

/* Misses never stop the search; strict stops at a bad file found higher up. */
static void test_discover_strict_higher_up(void) {
  make_root();
  mk("p");
  mk("p/q");
  put_file(in_root("p/q"), "burn.toml", "[package]\n");
  put_file(in_root("p"), "Burn.toml", "[cubecl.memory.logger]\nlevel = \"loud\"\n");
  put_file(g_root, "cubecl.toml", VALID_B);
  cm_config_t c;
  cm_config_init(&c);
  cm_diag_t d = {0};
  skips_t sk = {0};
  EXPECT_STATUS(discover(&c, "p/q", false, &sk, &d), CM_ECONFIG);
  EXPECT_STR(d.file, in_root("p/Burn.toml"));
  EXPECT_STR(d.key, "cubecl.memory.logger.level");
  EXPECT_EQ(d.line, 2);
  EXPECT(c.path == NULL);
  ASSERT_OK(discover(&c, "p/q", true, &sk, &d));
  EXPECT_STR(c.path, in_root("cubecl.toml"));
  EXPECT_EQ(sk.n, 1);
  /* an unreadable candidate (a directory named cubecl.toml) is an error too */
  mk("p/q/cubecl.toml");
  EXPECT_STATUS(discover(&c, "p/q", false, &sk, &d), CM_EIO);
  EXPECT_STR(d.file, in_root("p/q/cubecl.toml"));
  cm_config_free(&c);
  rm_rf(g_root);
}

/* Nothing anywhere: defaults, CM_OK, path NULL. */
static void test_discover_nothing(void) {
  make_root();
  mk("e");
  if (!ancestors_clean()) {
    rm_rf(g_root);
    CM_SKIP("a directory above /tmp holds a config file");
  }
  cm_config_t c;
  cm_config_init(&c);
  cm_config_set_logger_level(&c, CM_LOG_FULL);
  cm_diag_t d = {0};
  skips_t sk = {0};
  ASSERT_OK(discover(&c, "e", false, &sk, &d));
  EXPECT(c.path == NULL);
  expect_defaults(&c);
  cm_config_free(&c);
  rm_rf(g_root);
}

int main(void) {
  CM_RUN(test_t76_burn_without_section);
  CM_RUN(test_t76_lowercase_first);
  CM_RUN(test_t76_malformed_then_burn);
  CM_RUN(test_t75_pools_file_chain);
  CM_RUN(test_discover_names);
  CM_RUN(test_discover_strict_higher_up);
  CM_RUN(test_discover_nothing);
  return cm_test_finish();
}
