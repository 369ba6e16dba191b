/*
 * test_config.c - the [memory] configuration (spec §11, T75, T77-T79, T84 through
 * the config): strict binding (table of valid and invalid texts with exact
 * values / error positions, keys and hints), burn.toml sections, loading
 * files, the API setters and formatting, and building the logger. Discovery
 * is in test_config_discover.c, hostile input in test_config_hostile.c.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_config_fixture.h"
#include "cm_test.h"
#include "cubemem/config.h"

/* ---- valid documents ------------------------------------------------------------ */

#define D -1 /* "default" in the table below */
typedef struct {
  const char *text;
  int pm, level, append, out, err, log, alloc;
  const char *file; /* NULL: unset */
  /* source line of persistent_memory and logger.level (0 = default) */
  unsigned pm_line, level_line;
} valid_case_t;

static const valid_case_t k_valid[] = {
    {"", D, D, D, D, D, D, D, NULL, 0, 0},
    {"# only a comment\n", D, D, D, D, D, D, D, NULL, 0, 0},
    {"[memory]\n", D, D, D, D, D, D, D, NULL, 0, 0},
    {"[memory]\npersistent_memory = \"enabled\"\n", CM_PERSISTENT_ENABLED, D, D, D, D, D, D, NULL,
     2, 0},
    {"[memory]\npersistent_memory = \"size-match\"\n", CM_PERSISTENT_SIZE_MATCH, D, D, D, D, D, D,
     NULL, 2, 0},
    {"[memory]\npersistent_memory = \"disabled\"\n", CM_PERSISTENT_DISABLED, D, D, D, D, D, D,
     NULL, 2, 0},
    {"[memory]\n\n\npersistent_memory = 'enforced'\n", CM_PERSISTENT_ENFORCED, D, D, D, D, D, D,
     NULL, 4, 0},
    /* T78: inline logger table, append defaults to true */
    {"[memory]\nlogger = { level = \"basic\", stdout = true }\n", D, CM_LOG_BASIC, D, 1, D, D, D,
     NULL, 0, 2},
    {"[memory.logger]\nlevel = \"full\"\nfile = \"m.log\"\nappend = false\nstdout = true\n"
     "stderr = true\nlog = \"debug\"\n",
     D, CM_LOG_FULL, 0, 1, 1, CM_HOST_LOG_DEBUG, D, "m.log", 0, 2},
    {"[memory.logger]\nlog = \"info\"\n", D, D, D, D, D, CM_HOST_LOG_INFO, D, NULL, 0, 0},
    {"[memory.logger]\nlog = \"trace\"\nlevel = \"disabled\"\n", D, CM_LOG_DISABLED, D, D, D,
     CM_HOST_LOG_TRACE, D, NULL, 0, 3},
    /* T79 */
    {"[memory.cuda]\nallocator = \"async\"\n", D, D, D, D, D, D, CM_CUDA_ASYNC, NULL, 0, 0},
    {"[memory.cuda]\nallocator = \"sync\"\n", D, D, D, D, D, D, CM_CUDA_SYNC, NULL, 0, 0},
    {"[memory]\ncuda = { allocator = \"async\" }\n", D, D, D, D, D, D, CM_CUDA_ASYNC, NULL,
     0, 0},
    /* dotted keys at the root and inside [memory] */
    {"memory.persistent_memory = \"disabled\"\nmemory.logger.level = \"full\"\n",
     CM_PERSISTENT_DISABLED, CM_LOG_FULL, D, D, D, D, D, NULL, 1, 2},
    {"[memory]\nlogger.level = \"basic\"\nlogger.file = \"dir/x.log\"\ncuda.allocator = "
     "\"async\"\n",
     D, CM_LOG_BASIC, D, D, D, D, CM_CUDA_ASYNC, "dir/x.log", 0, 2},
    /* other top-level tables are not checked */
    {"[profiling]\nlogger = { level = \"medium\", whatever = 1 }\n[autotune]\nlevel = 3\n"
     "[compilation.logger]\nlevel = \"full\"\nunknown = true\n[streaming]\nmax = 4\n"
     "[environment]\nx = [1, 2]\n[memory]\npersistent_memory = \"size-match\"\n",
     CM_PERSISTENT_SIZE_MATCH, D, D, D, D, D, D, NULL, 13, 0},
    {"[memory.logger]\nfile = \"\xe6\x97\xa5\xe6\x9c\xac/m.log\"\n", D, D, D, D, D, D, D,
     "\xe6\x97\xa5\xe6\x9c\xac/m.log", 0, 0},
    {"\xef\xbb\xbf[memory]\npersistent_memory = \"enforced\"\n", CM_PERSISTENT_ENFORCED, D, D, D,
     D, D, D, NULL, 2, 0},
};

static void test_valid_table(void) {
  for (size_t i = 0; i < sizeof k_valid / sizeof k_valid[0]; i++) {
    const valid_case_t *c = &k_valid[i];
    cm_config_t cfg;
    cm_config_init(&cfg);
    cm_diag_t d = {0};
    int rc = load_text(&cfg, c->text, &d);
    if (rc != CM_OK) {
      cm_test_fail(__FILE__, __LINE__, "valid case %zu: rc %d: %s", i, rc, d.message);
      cm_config_free(&cfg);
      continue;
    }
    EXPECT_EQ(cfg.persistent_memory, c->pm == D ? CM_PERSISTENT_ENABLED : c->pm);
    EXPECT_EQ(cfg.logger.level, c->level == D ? CM_LOG_DISABLED : c->level);
    EXPECT_EQ(cfg.logger.append, c->append == D ? 1 : c->append);
    EXPECT_EQ(cfg.logger.to_stdout, c->out == D ? 0 : c->out);
    EXPECT_EQ(cfg.logger.to_stderr, c->err == D ? 0 : c->err);
    EXPECT_EQ(cfg.logger.log, c->log == D ? CM_HOST_LOG_NONE : c->log);
    EXPECT_EQ(cfg.cuda_allocator, c->alloc == D ? CM_CUDA_SYNC : c->alloc);
    if (c->file)
      EXPECT_STR(cfg.logger.file, c->file);
    else
      EXPECT(cfg.logger.file == NULL);
    EXPECT_EQ(cfg.source[CM_CFG_PERSISTENT_MEMORY].kind,
              c->pm == D ? CM_CFG_SRC_DEFAULT : CM_CFG_SRC_FILE);
    EXPECT_EQ(cfg.source[CM_CFG_PERSISTENT_MEMORY].line, c->pm_line);
    EXPECT_EQ(cfg.source[CM_CFG_LOGGER_LEVEL].line, c->level_line);
    EXPECT_STR(cfg.path, "cubecl.toml");
    EXPECT(cfg.section == NULL);
    cm_config_free(&cfg);
  }
}

/* ---- invalid documents ---------------------------------------------------------- */

typedef struct {
  const char *text;
  int rc;
  unsigned line, col;
  const char *key;  /* exact diag->key ("" for parse errors) */
  const char *sub1; /* substrings of diag->message */
  const char *sub2;
} invalid_case_t;

static const invalid_case_t k_invalid[] = {
    /* T75 and every other spelling of pools */
    {"[memory]\npools = \"sub-slices\"\n", CM_ECONFIG, 2, 1, "memory.pools", POOLS_HINT,
     "cubemem replay --pools"},
    {"[[memory.pools]]\ntype = \"sliced\"\npage_size = \"1MiB\"\n", CM_ECONFIG, 1, 10,
     "memory.pools", POOLS_HINT, "'memory.pools'"},
    {"[memory.pools]\nx = 1\n", CM_ECONFIG, 1, 9, "memory.pools", POOLS_HINT, NULL},
    {"[memory]\npools.x = 1\n", CM_ECONFIG, 2, 1, "memory.pools", POOLS_HINT, NULL},
    {"memory.pools = []\n", CM_ECONFIG, 1, 8, "memory.pools", POOLS_HINT, NULL},
    {"[memory]\n\"pools\" = { preset = \"subslices\" }\n", CM_ECONFIG, 2, 1, "memory.pools",
     POOLS_HINT, NULL},
    {"[memory]\npersistent_memory = \"enabled\"\npools = \"x\"\n", CM_ECONFIG, 3, 1,
     "memory.pools", POOLS_HINT, NULL},
    /* T78: names are case-sensitive */
    {"[memory]\npersistent_memory = \"Enabled\"\n", CM_ECONFIG, 2, 1, "memory.persistent_memory",
     "invalid value \"Enabled\" for 'memory.persistent_memory': expected one of \"enabled\", "
     "\"size-match\", \"disabled\", \"enforced\"",
     "did you mean \"enabled\"?"},
    {"[memory]\npersistent_memory = \"size_match\"\n", CM_ECONFIG, 2, 1,
     "memory.persistent_memory", "did you mean \"size-match\"?", NULL},
    {"[memory]\npersistent_memory = \"sometimes\"\n", CM_ECONFIG, 2, 1,
     "memory.persistent_memory", "expected one of \"enabled\"", NULL},
    {"[memory]\npersistent_memory = true\n", CM_ECONFIG, 2, 1, "memory.persistent_memory",
     "expected a string (one of \"enabled\", \"size-match\", \"disabled\", \"enforced\")",
     "found a bool"},
    {"[memory]\npersistent_memory = 1\n", CM_ECONFIG, 2, 1, "memory.persistent_memory",
     "found an integer", NULL},
    /* logger */
    {"[memory.logger]\nlevle = \"basic\"\n", CM_ECONFIG, 2, 1, "memory.logger.levle",
     "unknown key 'memory.logger.levle'; expected one of level, file, append, stdout, stderr",
     "did you mean 'level'?"},
    {"[memory.logger]\nlevel = \"Basic\"\n", CM_ECONFIG, 2, 1, "memory.logger.level",
     "did you mean \"basic\"?", "\"disabled\", \"basic\", \"full\""},
    {"[memory.logger]\nlevel = \"verbose\"\n", CM_ECONFIG, 2, 1, "memory.logger.level",
     "expected one of \"disabled\", \"basic\", \"full\"", NULL},
    {"[memory.logger]\nlevel = 2\n", CM_ECONFIG, 2, 1, "memory.logger.level",
     "expected a string", "found an integer"},
    {"[memory.logger]\nappend = \"yes\"\n", CM_ECONFIG, 2, 1, "memory.logger.append",
     "expected a bool", "found a string"},
    {"[memory.logger]\nstdout = 1\n", CM_ECONFIG, 2, 1, "memory.logger.stdout", "expected a bool",
     "found an integer"},
    {"[memory.logger]\n  stderr = [true]\n", CM_ECONFIG, 2, 3, "memory.logger.stderr",
     "expected a bool", "found an array"},
    {"[memory.logger]\nfile = 3\n", CM_ECONFIG, 2, 1, "memory.logger.file", "expected a string",
     NULL},
    {"[memory.logger]\nfile = \"\"\n", CM_ECONFIG, 2, 1, "memory.logger.file",
     "must not be empty", NULL},
    {"[memory.logger]\nfile = \"a\\u0000b\"\n", CM_ECONFIG, 2, 1, "memory.logger.file", "NUL",
     NULL},
    {"[memory.logger]\nlog = \"warn\"\n", CM_ECONFIG, 2, 1, "memory.logger.log",
     "expected one of \"info\", \"debug\", \"trace\"", NULL},
    {"[memory.logger]\nstdot = true\n", CM_ECONFIG, 2, 1, "memory.logger.stdot",
     "did you mean 'stdout'?", NULL},
    {"[memory]\nlogger = { level = \"basic\", levle = 1 }\n", CM_ECONFIG, 2, 29,
     "memory.logger.levle", "did you mean 'level'?", NULL},
    {"[memory]\nlogger = \"basic\"\n", CM_ECONFIG, 2, 1, "memory.logger",
     "expected a table, found a string", NULL},
    {"[memory.logger.sub]\nx = 1\n", CM_ECONFIG, 1, 16, "memory.logger.sub", "unknown key", NULL},
    /* cuda */
    {"[memory.cuda]\nallocator = \"asynch\"\n", CM_ECONFIG, 2, 1, "memory.cuda.allocator",
     "did you mean \"async\"?", "expected one of \"sync\", \"async\""},
    {"[memory.cuda]\nallocator = \"pooled\"\n", CM_ECONFIG, 2, 1, "memory.cuda.allocator",
     "expected one of \"sync\", \"async\"", NULL},
    {"[memory.cuda]\nalocator = \"async\"\n", CM_ECONFIG, 2, 1, "memory.cuda.alocator",
     "did you mean 'allocator'?", "expected one of allocator"},
    {"[memory]\ncuda = 1\n", CM_ECONFIG, 2, 1, "memory.cuda", "expected a table", NULL},
    /* [memory] itself */
    {"[memory]\npersistent-memory = \"enabled\"\n", CM_ECONFIG, 2, 1, "memory.persistent-memory",
     "did you mean 'persistent_memory'?", "expected one of logger, persistent_memory, cuda"},
    {"[memory]\nfoo = 1\n", CM_ECONFIG, 2, 1, "memory.foo",
     "unknown key 'memory.foo'; expected one of logger, persistent_memory, cuda", NULL},
    {"[memory]\n\"per sistent\" = 1\n", CM_ECONFIG, 2, 1, "memory.\"per sistent\"",
     "unknown key 'memory.\"per sistent\"'", NULL},
    {"[memory.Logger]\nlevel = \"basic\"\n", CM_ECONFIG, 1, 9, "memory.Logger",
     "did you mean 'logger'?", NULL},
    {"memory = 5\n", CM_ECONFIG, 1, 1, "memory", "expected a table, found an integer", NULL},
    {"[[memory]]\n", CM_ECONFIG, 1, 3, "memory", "expected a table, found an array", NULL},
    /* not TOML at all */
    {"[memory\n", CM_EPARSE, 1, 8, "", "cubecl.toml:1:8:", NULL},
    {"[memory]\npersistent_memory = \"enabled\"\npersistent_memory = \"disabled\"\n", CM_EPARSE,
     3, 1, "", "cubecl.toml:3:", NULL},
    {"[memory]\npersistent_memory = enabled\n", CM_EPARSE, 2, 21, "", "cubecl.toml:2:", NULL},
    {"x = \"\xff\"\n", CM_EPARSE, 1, 6, "", "UTF-8", NULL},
};

static void test_invalid_table(void) {
  for (size_t i = 0; i < sizeof k_invalid / sizeof k_invalid[0]; i++) {
    const invalid_case_t *c = &k_invalid[i];
    cm_config_t cfg;
    cm_config_init(&cfg);
    cm_config_set_persistent_memory(&cfg, CM_PERSISTENT_DISABLED); /* must survive */
    cm_diag_t d = {0};
    int rc = load_text(&cfg, c->text, &d);
    if (rc != c->rc || d.line != c->line || d.column != c->col || strcmp(d.key, c->key) != 0 ||
        !strstr(d.message, c->sub1) || (c->sub2 && !strstr(d.message, c->sub2)) ||
        d.code != c->rc || strcmp(d.file, "cubecl.toml") != 0) {
      cm_test_fail(__FILE__, __LINE__,
                   "invalid case %zu (%s): rc %d (want %d) at %u:%u (want %u:%u) key '%s' "
                   "(want '%s') file '%s' message: %s",
                   i, c->text, rc, c->rc, d.line, d.column, c->line, c->col, d.key, c->key,
                   d.file, d.message);
    }
    /* the message starts with the location */
    char loc[64];
    snprintf(loc, sizeof loc, "cubecl.toml:%u:%u: ", c->line, c->col);
    if (strncmp(d.message, loc, strlen(loc)) != 0)
      cm_test_fail(__FILE__, __LINE__, "case %zu: message lacks '%s': %s", i, loc, d.message);
    /* a failed load changes nothing */
    EXPECT_EQ(cfg.persistent_memory, CM_PERSISTENT_DISABLED);
    EXPECT_EQ(cfg.source[CM_CFG_PERSISTENT_MEMORY].kind, CM_CFG_SRC_API);
    EXPECT(cfg.path == NULL);
    cm_config_free(&cfg);
  }
}

/* T77: wrong type in a burn.toml section; missing section is a quiet miss. */
static void test_burn_section(void) {
  cm_config_t cfg;
  cm_config_init(&cfg);
  cm_diag_t d = {0};
  const char *ok = "[package]\nname = \"x\"\n[cubecl.memory]\npersistent_memory = \"enforced\"\n"
                   "[cubecl.memory.logger]\nlevel = \"basic\"\n";
  ASSERT_OK(cm_config_load_buffer(&cfg, ok, strlen(ok), "burn.toml", "cubecl", &d));
  EXPECT_EQ(cfg.persistent_memory, CM_PERSISTENT_ENFORCED);
  EXPECT_EQ(cfg.logger.level, CM_LOG_BASIC);
  EXPECT_STR(cfg.section, "cubecl");
  EXPECT_STR(cfg.path, "burn.toml");
  char src[128];
  cm_config_source_format(&cfg, CM_CFG_PERSISTENT_MEMORY, src, sizeof src);
  EXPECT_STR(src, "burn.toml:4 [cubecl]");

  const char *none = "[package]\nname = \"x\"\n";
  EXPECT_STATUS(cm_config_load_buffer(&cfg, none, strlen(none), "burn.toml", "cubecl", &d),
                CM_ENOTFOUND);
  EXPECT_EQ(cfg.persistent_memory, CM_PERSISTENT_ENFORCED); /* unchanged */

  const char *bad = "[cubecl.memory.logger]\nlevle = \"basic\"\n";
  EXPECT_STATUS(cm_config_load_buffer(&cfg, bad, strlen(bad), "burn.toml", "cubecl", &d),
                CM_ECONFIG);
  EXPECT_STR(d.key, "cubecl.memory.logger.levle");
  EXPECT_EQ(d.line, 2);

  const char *wrong = "[cubecl.memory]\npersistent_memory = 3\n";
  EXPECT_STATUS(cm_config_load_buffer(&cfg, wrong, strlen(wrong), "burn.toml", "cubecl", &d),
                CM_ECONFIG);
  EXPECT_STR(d.key, "cubecl.memory.persistent_memory");

  const char *notab = "cubecl = 1\n";
  EXPECT_STATUS(cm_config_load_buffer(&cfg, notab, strlen(notab), "burn.toml", "cubecl", &d),
                CM_ECONFIG);
  EXPECT_CONTAINS(d.message, "expected a table, found an integer");

  /* the [cubecl] table without [memory]: defaults, from burn.toml */
  const char *empty = "[cubecl.profiling]\nx = 1\n";
  ASSERT_OK(cm_config_load_buffer(&cfg, empty, strlen(empty), "burn.toml", "cubecl", &d));
  EXPECT_EQ(cfg.persistent_memory, CM_PERSISTENT_ENABLED);
  EXPECT_STR(cfg.path, "burn.toml");
  /* a top-level [memory] in a burn.toml is not ours when reading [cubecl] */
  const char *top = "[memory]\nbogus = 1\n[cubecl]\n";
  EXPECT_OK(cm_config_load_buffer(&cfg, top, strlen(top), "burn.toml", "cubecl", &d));
  cm_config_free(&cfg);
}

static void test_load_args_and_files(void) {
  cm_config_t cfg;
  cm_config_init(&cfg);
  cm_diag_t d = {0};
  EXPECT_STATUS(cm_config_load_buffer(NULL, "", 0, NULL, NULL, &d), CM_EINVAL);
  EXPECT_STATUS(cm_config_load_buffer(&cfg, NULL, 3, NULL, NULL, &d), CM_EINVAL);
  EXPECT_OK(cm_config_load_buffer(&cfg, NULL, 0, NULL, NULL, &d));
  EXPECT_STR(cfg.path, "<buffer>");
  EXPECT_STATUS(cm_config_load_file(&cfg, NULL, NULL, &d), CM_EINVAL);
  EXPECT_STATUS(cm_config_load_file(&cfg, "/nonexistent/dir/cubecl.toml", NULL, &d),
                CM_ENOTFOUND);
  make_root();
  EXPECT_STATUS(cm_config_load_file(&cfg, g_root, NULL, &d), CM_EIO); /* a directory */
  EXPECT_CONTAINS(d.message, g_root);
  put_file(g_root, "cubecl.toml", "[memory]\npersistent_memory = \"disabled\"\n");
  ASSERT_OK(cm_config_load_file(&cfg, in_root("cubecl.toml"), NULL, &d));
  EXPECT_STR(cfg.path, in_root("cubecl.toml"));
  char src[PATH_MAX + 32], want[PATH_MAX + 32];
  cm_config_source_format(&cfg, CM_CFG_PERSISTENT_MEMORY, src, sizeof src);
  snprintf(want, sizeof want, "%s:2", in_root("cubecl.toml"));
  EXPECT_STR(src, want);
  put_file(g_root, "bad.toml", "[memory]\nnope = 1\n");
  EXPECT_STATUS(cm_config_load_file(&cfg, in_root("bad.toml"), NULL, &d), CM_ECONFIG);
  EXPECT_STR(d.file, in_root("bad.toml"));
  EXPECT_EQ(cfg.persistent_memory, CM_PERSISTENT_DISABLED);
  cm_config_free(&cfg);
  expect_defaults(&cfg);
  rm_rf(g_root);
}

/* ---- API ------------------------------------------------------------------------ */

static void test_init_free_copy(void) {
  cm_config_t a, b;
  memset(&a, 0x77, sizeof a);
  cm_config_init(&a);
  expect_defaults(&a);
  EXPECT(a.path == NULL && a.section == NULL);
  cm_config_free(NULL);
  cm_config_init(NULL);
  ASSERT_OK(load_text(&a, "[memory.logger]\nfile = \"x.log\"\nlevel = \"full\"\n", NULL));
  cm_config_init(&b);
  ASSERT_OK(cm_config_copy(&b, &a));
  EXPECT(b.logger.file != a.logger.file);
  EXPECT_STR(b.logger.file, "x.log");
  EXPECT_STR(b.path, "cubecl.toml");
  EXPECT_EQ(b.logger.level, CM_LOG_FULL);
  EXPECT_EQ(b.source[CM_CFG_LOGGER_FILE].line, 2);
  EXPECT_OK(cm_config_copy(&b, &b));
  EXPECT_STATUS(cm_config_copy(NULL, &a), CM_EINVAL);
  cm_config_free(&a);
  EXPECT_STR(b.logger.file, "x.log");
  cm_config_free(&b);
}

static void test_set_api(void) {
  cm_config_t c;
  cm_config_init(&c);
  cm_diag_t d = {0};
  EXPECT_OK(cm_config_set(&c, "memory.persistent_memory", "size-match", &d));
  EXPECT_EQ(c.persistent_memory, CM_PERSISTENT_SIZE_MATCH);
  EXPECT_EQ(c.source[CM_CFG_PERSISTENT_MEMORY].kind, CM_CFG_SRC_API);
  EXPECT_OK(cm_config_set(&c, "logger.level", "full", &d));
  EXPECT_EQ(c.logger.level, CM_LOG_FULL);
  EXPECT_OK(cm_config_set(&c, "logger.append", "false", &d));
  EXPECT(!c.logger.append);
  EXPECT_OK(cm_config_set(&c, "memory.logger.stdout", "true", &d));
  EXPECT(c.logger.to_stdout);
  EXPECT_OK(cm_config_set(&c, "memory.logger.stderr", "true", &d));
  EXPECT(c.logger.to_stderr);
  EXPECT_OK(cm_config_set(&c, "memory.logger.log", "trace", &d));
  EXPECT_EQ(c.logger.log, CM_HOST_LOG_TRACE);
  EXPECT_OK(cm_config_set(&c, "memory.logger.file", "/tmp/x.log", &d));
  EXPECT_STR(c.logger.file, "/tmp/x.log");
  EXPECT_OK(cm_config_set(&c, "cuda.allocator", "async", &d));
  EXPECT_EQ(c.cuda_allocator, CM_CUDA_ASYNC);
  for (int f = 0; f < CM_CFG_FIELD_COUNT; f++) EXPECT_EQ(c.source[f].kind, CM_CFG_SRC_API);

  EXPECT_STATUS(cm_config_set(&c, "memory.logger.level", "Full", &d), CM_ECONFIG);
  EXPECT_CONTAINS(d.message, "did you mean \"full\"?");
  EXPECT_STR(d.key, "memory.logger.level");
  EXPECT_EQ(c.logger.level, CM_LOG_FULL);
  EXPECT_STATUS(cm_config_set(&c, "memory.logger.levle", "full", &d), CM_ECONFIG);
  EXPECT_CONTAINS(d.message, "did you mean 'memory.logger.level'?");
  EXPECT_STATUS(cm_config_set(&c, "memory.pools", "subslices", &d), CM_ECONFIG);
  EXPECT_CONTAINS(d.message, "cm_manager_install_pools");
  EXPECT_STATUS(cm_config_set(&c, "pools.page", "1", &d), CM_ECONFIG);
  EXPECT_CONTAINS(d.message, "pool layouts");
  EXPECT_STATUS(cm_config_set(&c, "logger.append", "yes", &d), CM_ECONFIG);
  EXPECT_CONTAINS(d.message, "expected a bool");
  EXPECT_STATUS(cm_config_set(&c, "logger.file", "", &d), CM_ECONFIG);
  EXPECT_STATUS(cm_config_set(&c, "zzzzzzzzzz", "1", &d), CM_ECONFIG);
  EXPECT_STATUS(cm_config_set(NULL, "a", "b", &d), CM_EINVAL);
  EXPECT_STATUS(cm_config_set(&c, NULL, "b", &d), CM_EINVAL);

  cm_config_set_logger_level(&c, CM_LOG_BASIC);
  cm_config_set_persistent_memory(&c, CM_PERSISTENT_ENFORCED);
  cm_config_set_cuda_allocator(&c, CM_CUDA_SYNC);
  EXPECT_OK(cm_config_set_logger_file(&c, NULL));
  EXPECT(c.logger.file == NULL);
  EXPECT_STATUS(cm_config_set_logger_file(NULL, "x"), CM_EINVAL);
  EXPECT_EQ(c.logger.level, CM_LOG_BASIC);
  EXPECT_EQ(c.persistent_memory, CM_PERSISTENT_ENFORCED);
  cm_config_free(&c);
}

static void test_format(void) {
  cm_config_t c;
  cm_config_init(&c);
  ASSERT_OK(load_text(&c,
                      "[memory]\npersistent_memory = \"size-match\"\n[memory.logger]\n"
                      "file = \"a\\\"b.log\"\nlog = \"info\"\n",
                      NULL));
  cm_config_set_logger_level(&c, CM_LOG_FULL);
  static const char *want_value[CM_CFG_FIELD_COUNT] = {
      "\"size-match\"", "\"full\"", "\"a\\\"b.log\"", "true", "false", "false", "\"info\"",
      "\"sync\""};
  static const char *want_source[CM_CFG_FIELD_COUNT] = {
      "cubecl.toml:2", "api",     "cubecl.toml:4", "default",
      "default",       "default", "cubecl.toml:5", "default"};
  for (int f = 0; f < CM_CFG_FIELD_COUNT; f++) {
    char v[256], s[256];
    size_t n = cm_config_value_format(&c, (cm_config_field_t)f, v, sizeof v);
    EXPECT_EQ(n, strlen(v));
    cm_config_source_format(&c, (cm_config_field_t)f, s, sizeof s);
    EXPECT_STR(v, want_value[f]);
    EXPECT_STR(s, want_source[f]);
  }
  /* snprintf semantics: a short buffer still reports the needed length */
  char tiny[4];
  EXPECT_EQ(cm_config_value_format(&c, CM_CFG_PERSISTENT_MEMORY, tiny, sizeof tiny), 12);
  EXPECT_STR(tiny, "\"si");
  EXPECT_EQ(cm_config_source_format(&c, CM_CFG_PERSISTENT_MEMORY, NULL, 0), 13);
  cm_config_free(&c);
  char v[32];
  cm_config_value_format(&c, CM_CFG_LOGGER_FILE, v, sizeof v);
  EXPECT_STR(v, "(unset)");
  cm_config_value_format(&c, CM_CFG_LOGGER_LOG, v, sizeof v);
  EXPECT_STR(v, "(unset)");
  EXPECT_STR(cm_config_field_key(CM_CFG_CUDA_ALLOCATOR), "memory.cuda.allocator");
  EXPECT(cm_config_field_key(CM_CFG_FIELD_COUNT) == NULL);
  EXPECT_STR(cm_config_persistent_memory_name(CM_PERSISTENT_SIZE_MATCH), "size-match");
  EXPECT_STR(cm_config_persistent_memory_name((cm_persistent_memory_t)42), "?");
  EXPECT_STR(cm_config_log_level_name(CM_LOG_FULL), "full");
  EXPECT_STR(cm_config_cuda_allocator_name(CM_CUDA_ASYNC), "async");
  EXPECT_STR(cm_config_host_log_name(CM_HOST_LOG_NONE), "none");
  EXPECT_STR(cm_config_host_log_name(CM_HOST_LOG_DEBUG), "debug");
}

/* ---- logger from the config (T84) ------------------------------------------------ */

typedef struct {
  int n;
  char last[128];
} cb_t;
static void cb_fn(void *arg, int level, const char *msg) {
  cb_t *c = arg;
  (void)level;
  c->n++;
  snprintf(c->last, sizeof c->last, "%s", msg);
}

static void test_t84_logger_from_config(void) {
  make_root();
  char text[PATH_MAX * 2];
  cm_diag_t d = {0};
  cm_config_t c;
  cm_config_init(&c);
  cm_logger_t *lg = NULL;

  /* disabled + stdout (and a file): nothing written, no file created */
  snprintf(text, sizeof text,
           "[memory.logger]\nlevel = \"disabled\"\nstdout = true\nfile = \"%s/off/m.log\"\n",
           g_root);
  ASSERT_OK(load_text(&c, text, &d));
  ASSERT_OK(cm_config_make_logger(&c, NULL, NULL, &lg, &d));
  EXPECT(!cm_logger_enabled(lg, CM_LOG_BASIC));
  cm_logger_write(lg, CM_LOG_BASIC, "x");
  uint64_t delivered = 9;
  cm_logger_counts(lg, &delivered, NULL);
  EXPECT_EQ(delivered, 0);
  cm_logger_destroy(lg);
  EXPECT(access(in_root("off/m.log"), F_OK) != 0);

  /* basic without any sink: nothing, no error */
  ASSERT_OK(load_text(&c, "[memory.logger]\nlevel = \"basic\"\n", &d));
  ASSERT_OK(cm_config_make_logger(&c, NULL, NULL, &lg, &d));
  cm_logger_write(lg, CM_LOG_BASIC, "x");
  cm_logger_counts(lg, &delivered, NULL);
  EXPECT_EQ(delivered, 0);
  cm_logger_destroy(lg);

  /* basic + file + append: dirs created, one line per message, appends */
  snprintf(text, sizeof text,
           "[memory]\nlogger = { level = \"basic\", file = \"%s/x/y/m.log\", append = true }\n",
           g_root);
  ASSERT_OK(load_text(&c, text, &d));
  for (int round = 0; round < 2; round++) {
    cb_t cb = {0};
    ASSERT_OK(cm_config_make_logger(&c, cb_fn, &cb, &lg, &d));
    cm_logger_printf(lg, CM_LOG_BASIC, "round %d", round);
    cm_logger_write(lg, CM_LOG_FULL, "dropped at basic");
    cm_logger_destroy(lg);
    EXPECT_EQ(cb.n, 1);
    EXPECT_STR(cb.last, round ? "round 1" : "round 0");
  }
  char *got = slurp(in_root("x/y/m.log"));
  EXPECT_STR(got, "round 0\nround 1\n");
  free(got);

  /* append = false truncates */
  snprintf(text, sizeof text,
           "[memory.logger]\nlevel = \"full\"\nfile = \"%s/x/y/m.log\"\nappend = false\n", g_root);
  ASSERT_OK(load_text(&c, text, &d));
  ASSERT_OK(cm_config_make_logger(&c, NULL, NULL, &lg, &d));
  cm_logger_write(lg, CM_LOG_FULL, "fresh");
  cm_logger_destroy(lg);
  got = slurp(in_root("x/y/m.log"));
  EXPECT_STR(got, "fresh\n");
  free(got);

  /* unopenable file: CM_EIO naming the path */
  put_file(g_root, "blocker", "x");
  snprintf(text, sizeof text, "[memory.logger]\nlevel = \"basic\"\nfile = \"%s/blocker/m.log\"\n",
           g_root);
  ASSERT_OK(load_text(&c, text, &d));
  lg = NULL;
  EXPECT_STATUS(cm_config_make_logger(&c, NULL, NULL, &lg, &d), CM_EIO);
  EXPECT(lg == NULL);
  EXPECT_CONTAINS(d.message, "blocker");
  EXPECT_STATUS(cm_config_make_logger(NULL, NULL, NULL, &lg, &d), CM_EINVAL);
  cm_config_free(&c);
  rm_rf(g_root);
}

int main(void) {
  CM_RUN(test_valid_table);
  CM_RUN(test_invalid_table);
  CM_RUN(test_burn_section);
  CM_RUN(test_load_args_and_files);
  CM_RUN(test_init_free_copy);
  CM_RUN(test_set_api);
  CM_RUN(test_format);
  CM_RUN(test_t84_logger_from_config);
  return cm_test_finish();
}
