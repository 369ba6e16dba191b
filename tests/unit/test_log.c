/*
 * test_log.c - the memory logger (spec §10, T84, §15.1 item 10).
 *
 * Covers: level filtering, every sink alone and combined, the callback's
 * arguments, warnings, file append vs truncate, parent directory creation,
 * unopenable paths (CM_EIO with path and reason), long and multi-line
 * messages, and whole lines from 4 concurrent writers.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cm_test.h"
#include "cubemem/log.h"

static char g_tmp[256];

static void make_tmp(void) {
  snprintf(g_tmp, sizeof g_tmp, "/tmp/cm_test_log_XXXXXX");
  if (!mkdtemp(g_tmp)) CM__FAIL_AND(1, "mkdtemp: %s", strerror(errno));
}

static void rm_rf(const char *path) {
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
  if (system(cmd) != 0) fprintf(stderr, "cleanup of %s failed\n", path);
}

/* Read a whole file into a malloc'd NUL-terminated buffer (NULL if absent). */
static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 4096, len = 0;
  char *buf = malloc(cap);
  size_t n;
  while (buf && (n = fread(buf + len, 1, cap - len - 1, f)) > 0) {
    len += n;
    if (cap - len < 2) {
      cap *= 2;
      buf = realloc(buf, cap);
    }
  }
  fclose(f);
  if (buf) buf[len] = '\0';
  return buf;
}

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  ASSERT(f != NULL);
  fputs(text, f);
  fclose(f);
}

static bool exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

/* ---- callback sink recorder ---- */
typedef struct {
  int n;
  int levels[16];
  char msgs[16][256];
} rec_t;

static void rec_fn(void *arg, int level, const char *message) {
  rec_t *r = arg;
  if (r->n < 16) {
    r->levels[r->n] = level;
    snprintf(r->msgs[r->n], sizeof r->msgs[r->n], "%s", message);
  }
  r->n++;
}

static void test_config_defaults(void) {
  cm_logger_config_t c;
  memset(&c, 0x5a, sizeof c);
  cm_logger_config_init(&c);
  EXPECT_EQ(c.level, CM_LOG_DISABLED);
  EXPECT(c.append);
  EXPECT(!c.to_stdout);
  EXPECT(!c.to_stderr);
  EXPECT(c.file == NULL);
  EXPECT(c.callback == NULL);
  cm_logger_config_init(NULL); /* no crash */
}

static void test_enabled_truth_table(void) {
  EXPECT(!cm_logger_enabled(NULL, CM_LOG_BASIC));
  EXPECT_EQ(cm_logger_level(NULL), CM_LOG_DISABLED);
  cm_log_level_t levels[] = {CM_LOG_DISABLED, CM_LOG_BASIC, CM_LOG_FULL};
  /* expected[logger level][message level] */
  bool expected[3][3] = {{false, false, false}, {false, true, false}, {false, true, true}};
  for (int i = 0; i < 3; i++) {
    cm_logger_config_t c;
    cm_logger_config_init(&c);
    c.level = levels[i];
    cm_logger_t *lg = NULL;
    ASSERT_OK(cm_logger_create(&c, &lg, NULL));
    EXPECT_EQ(cm_logger_level(lg), levels[i]);
    for (int j = 0; j < 3; j++) EXPECT_EQ(cm_logger_enabled(lg, levels[j]), expected[i][j]);
    cm_logger_destroy(lg);
  }
  cm_logger_destroy(NULL);
}

static void test_invalid_args(void) {
  cm_logger_t *lg = NULL;
  cm_diag_t d = {0};
  cm_logger_config_t c;
  cm_logger_config_init(&c);
  EXPECT_STATUS(cm_logger_create(NULL, &lg, &d), CM_EINVAL);
  EXPECT_STATUS(cm_logger_create(&c, NULL, &d), CM_EINVAL);
  c.level = (cm_log_level_t)7;
  EXPECT_STATUS(cm_logger_create(&c, &lg, &d), CM_EINVAL);
  c.level = CM_LOG_BASIC;
  c.file = "";
  EXPECT_STATUS(cm_logger_create(&c, &lg, &d), CM_EINVAL);
  EXPECT(lg == NULL);
  /* NULL loggers swallow everything */
  cm_logger_write(NULL, CM_LOG_BASIC, "x");
  cm_logger_printf(NULL, CM_LOG_BASIC, "%d", 1);
  cm_logger_warn(NULL, "x");
  uint64_t a = 9, b = 9;
  cm_logger_counts(NULL, &a, &b);
  EXPECT_EQ(a, 0);
  EXPECT_EQ(b, 0);
}

/* T84 (a): level disabled with sinks writes nothing and touches no file. */
static void test_t84_disabled_with_sinks(void) {
  make_tmp();
  char path[400];
  snprintf(path, sizeof path, "%s/sub/m.log", g_tmp);
  rec_t r = {0};
  cm_logger_config_t c;
  cm_logger_config_init(&c);
  c.level = CM_LOG_DISABLED;
  c.to_stdout = true;
  c.file = path;
  c.callback = rec_fn;
  c.callback_arg = &r;
  cm_logger_t *lg = NULL;
  ASSERT_OK(cm_logger_create(&c, &lg, NULL));
  cm_logger_write(lg, CM_LOG_BASIC, "basic");
  cm_logger_write(lg, CM_LOG_FULL, "full");
  cm_logger_printf(lg, CM_LOG_BASIC, "n=%d", 3);
  uint64_t delivered = 1, failed = 1;
  cm_logger_counts(lg, &delivered, &failed);
  EXPECT_EQ(delivered, 0);
  EXPECT_EQ(failed, 0);
  EXPECT_EQ(r.n, 0);
  EXPECT(!exists(path));
  cm_logger_destroy(lg);
  rm_rf(g_tmp);
}

/* T84 (b): level basic with no sink at all: nothing written, no error. */
static void test_t84_basic_without_sinks(void) {
  cm_logger_config_t c;
  cm_logger_config_init(&c);
  c.level = CM_LOG_BASIC;
  cm_logger_t *lg = NULL;
  ASSERT_OK(cm_logger_create(&c, &lg, NULL));
  EXPECT(cm_logger_enabled(lg, CM_LOG_BASIC));
  cm_logger_write(lg, CM_LOG_BASIC, "goes nowhere");
  cm_logger_warn(lg, "nor this");
  uint64_t delivered = 1, failed = 1;
  cm_logger_counts(lg, &delivered, &failed);
  EXPECT_EQ(delivered, 0);
  EXPECT_EQ(failed, 0);
  cm_logger_destroy(lg);
}

/* T84 (c): basic + file + append: parent dirs created, one line per message,
 * full-level messages dropped, a second logger appends. */
static void test_t84_file_append(void) {
  make_tmp();
  char path[400];
  snprintf(path, sizeof path, "%s/a/b/c/m.log", g_tmp);
  cm_logger_config_t c;
  cm_logger_config_init(&c);
  c.level = CM_LOG_BASIC;
  c.file = path;
  c.append = true;
  cm_logger_t *lg = NULL;
  ASSERT_OK(cm_logger_create(&c, &lg, NULL));
  EXPECT(exists(path));
  cm_logger_write(lg, CM_LOG_BASIC, "one");
  cm_logger_write(lg, CM_LOG_FULL, "dropped");
  cm_logger_printf(lg, CM_LOG_BASIC, "two %d", 2);
  cm_logger_destroy(lg);
  char *got = slurp(path);
  EXPECT_STR(got, "one\ntwo 2\n");
  free(got);
  ASSERT_OK(cm_logger_create(&c, &lg, NULL));
  cm_logger_write(lg, CM_LOG_BASIC, "three");
  uint64_t delivered = 0;
  cm_logger_counts(lg, &delivered, NULL);
  EXPECT_EQ(delivered, 1);
  cm_logger_destroy(lg);
  got = slurp(path);
  EXPECT_STR(got, "one\ntwo 2\nthree\n");
  free(got);
  rm_rf(g_tmp);
}

/* §15.1 item 10: append=false truncates (no stale tail). */
static void test_file_truncate(void) {
  make_tmp();
  char path[400];
  snprintf(path, sizeof path, "%s/m.log", g_tmp);
  write_text(path, "a long line of old content that must disappear\nold 2\n");
  cm_logger_config_t c;
  cm_logger_config_init(&c);
  c.level = CM_LOG_FULL;
  c.file = path;
  c.append = false;
  cm_logger_t *lg = NULL;
  ASSERT_OK(cm_logger_create(&c, &lg, NULL));
  cm_logger_write(lg, CM_LOG_FULL, "new");
  cm_logger_destroy(lg);
  char *got = slurp(path);
  EXPECT_STR(got, "new\n");
  free(got);
  /* append=true on the same file keeps it */
  c.append = true;
  ASSERT_OK(cm_logger_create(&c, &lg, NULL));
  cm_logger_write(lg, CM_LOG_BASIC, "more");
  cm_logger_destroy(lg);
  got = slurp(path);
  EXPECT_STR(got, "new\nmore\n");
  free(got);
  rm_rf(g_tmp);
}

static void test_file_open_failures(void) {
  make_tmp();
  char blocker[400], path[500];
  snprintf(blocker, sizeof blocker, "%s/plainfile", g_tmp);
  write_text(blocker, "x");
  cm_logger_config_t c;
  cm_logger_config_init(&c);
  c.level = CM_LOG_BASIC;
  cm_logger_t *lg = NULL;
  cm_diag_t d = {0};

  /* a parent that is a regular file: mkdir fails with ENOTDIR */
  snprintf(path, sizeof path, "%s/sub/m.log", blocker);
  c.file = path;
  EXPECT_STATUS(cm_logger_create(&c, &lg, &d), CM_EIO);
  EXPECT(lg == NULL);
  EXPECT_STATUS(d.code, CM_EIO);
  EXPECT_CONTAINS(d.message, path);
  EXPECT_CONTAINS(d.message, strerror(ENOTDIR));
  EXPECT_STR(d.file, path);

  /* the path is a directory: open fails with EISDIR */
  cm_diag_clear(&d);
  c.file = g_tmp;
  EXPECT_STATUS(cm_logger_create(&c, &lg, &d), CM_EIO);
  EXPECT_CONTAINS(d.message, g_tmp);
  EXPECT_CONTAINS(d.message, strerror(EISDIR));

  /* unwritable directory (only meaningful when not running as root) */
  if (geteuid() != 0) {
    char ro[400];
    snprintf(ro, sizeof ro, "%s/ro", g_tmp);
    ASSERT(mkdir(ro, 0500) == 0);
    snprintf(path, sizeof path, "%s/m.log", ro);
    c.file = path;
    cm_diag_clear(&d);
    EXPECT_STATUS(cm_logger_create(&c, &lg, &d), CM_EIO);
    EXPECT_CONTAINS(d.message, strerror(EACCES));
    chmod(ro, 0700);
  }
  rm_rf(g_tmp);
}

/* Redirect a standard fd to a file for the duration of a logger's writes. */
static void test_stdout_stderr_sinks(void) {
  make_tmp();
  char out_path[400], err_path[400];
  snprintf(out_path, sizeof out_path, "%s/out", g_tmp);
  snprintf(err_path, sizeof err_path, "%s/err", g_tmp);
  fflush(stdout);
  fflush(stderr);
  int saved_out = dup(1), saved_err = dup(2);
  int fo = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  int fe = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT(saved_out >= 0 && saved_err >= 0 && fo >= 0 && fe >= 0);
  dup2(fo, 1);
  dup2(fe, 2);

  cm_logger_config_t c;
  cm_logger_config_init(&c);
  c.level = CM_LOG_FULL;
  c.to_stdout = true;
  cm_logger_t *a = NULL, *b = NULL, *both = NULL;
  int rc1 = cm_logger_create(&c, &a, NULL);
  c.to_stdout = false;
  c.to_stderr = true;
  int rc2 = cm_logger_create(&c, &b, NULL);
  c.to_stdout = true;
  c.level = CM_LOG_BASIC;
  int rc3 = cm_logger_create(&c, &both, NULL);
  cm_logger_write(a, CM_LOG_FULL, "to stdout");
  cm_logger_write(b, CM_LOG_BASIC, "to stderr");
  cm_logger_write(both, CM_LOG_BASIC, "to both");
  cm_logger_write(both, CM_LOG_FULL, "to neither");
  cm_logger_warn(both, "warned");
  fflush(stdout);
  fflush(stderr);
  dup2(saved_out, 1);
  dup2(saved_err, 2);
  close(saved_out);
  close(saved_err);
  close(fo);
  close(fe);
  cm_logger_destroy(a);
  cm_logger_destroy(b);
  cm_logger_destroy(both);
  EXPECT_OK(rc1);
  EXPECT_OK(rc2);
  EXPECT_OK(rc3);
  char *o = slurp(out_path), *e = slurp(err_path);
  EXPECT_STR(o, "to stdout\nto both\nwarned\n");
  EXPECT_STR(e, "to stderr\nto both\nwarned\n");
  free(o);
  free(e);
  rm_rf(g_tmp);
}

static void test_callback_and_combined(void) {
  make_tmp();
  char path[400];
  snprintf(path, sizeof path, "%s/m.log", g_tmp);
  rec_t r = {0};
  cm_logger_config_t c;
  cm_logger_config_init(&c);
  c.level = CM_LOG_FULL;
  c.file = path;
  c.callback = rec_fn;
  c.callback_arg = &r;
  cm_logger_t *lg = NULL;
  ASSERT_OK(cm_logger_create(&c, &lg, NULL));
  cm_logger_write(lg, CM_LOG_BASIC, "b");
  cm_logger_write(lg, CM_LOG_FULL, "f");
  cm_logger_write(lg, CM_LOG_DISABLED, "never");
  cm_logger_warn(lg, "w");
  cm_logger_write(lg, CM_LOG_FULL, "line1\nline2"); /* one message */
  cm_logger_destroy(lg);
  ASSERT_EQ(r.n, 4);
  EXPECT_EQ(r.levels[0], CM_LOG_BASIC);
  EXPECT_STR(r.msgs[0], "b");
  EXPECT_EQ(r.levels[1], CM_LOG_FULL);
  EXPECT_STR(r.msgs[1], "f");
  EXPECT_STATUS(r.levels[2], -1);
  EXPECT_STR(r.msgs[2], "w");
  EXPECT_STR(r.msgs[3], "line1\nline2");
  char *got = slurp(path);
  EXPECT_STR(got, "b\nf\nw\nline1\nline2\n");
  free(got);
  rm_rf(g_tmp);
}

/* Warnings reach the callback even when the level is disabled (log.h). */
/* A sink that cannot be written (a full disk): every failure is counted and
 * the first is reported to the callback as a warning naming the file. */
static void test_write_failure_reported(void) {
  if (access("/dev/full", W_OK) != 0) CM_SKIP("no writable /dev/full");
  rec_t r = {0};
  cm_logger_config_t c;
  cm_logger_config_init(&c);
  c.level = CM_LOG_FULL;
  c.file = "/dev/full";
  c.callback = rec_fn;
  c.callback_arg = &r;
  cm_logger_t *lg = NULL;
  ASSERT_OK(cm_logger_create(&c, &lg, NULL));
  for (int i = 0; i < 3; i++) cm_logger_write(lg, CM_LOG_BASIC, "m");
  uint64_t delivered = 0, failed = 0;
  cm_logger_counts(lg, &delivered, &failed);
  cm_logger_destroy(lg);
  EXPECT_EQ(delivered, 3);
  EXPECT_EQ(failed, 3);
  ASSERT_EQ(r.n, 4); /* one report, then the three messages */
  EXPECT_STATUS(r.levels[0], -1);
  EXPECT_CONTAINS(r.msgs[0], "cannot write the log to file '/dev/full'");
  EXPECT_CONTAINS(r.msgs[0], strerror(ENOSPC));
  EXPECT_STR(r.msgs[1], "m");
  EXPECT_STR(r.msgs[3], "m");
}

static void test_warn_disabled_callback_only(void) {
  rec_t r = {0};
  cm_logger_config_t c;
  cm_logger_config_init(&c);
  c.callback = rec_fn;
  c.callback_arg = &r;
  cm_logger_t *lg = NULL;
  ASSERT_OK(cm_logger_create(&c, &lg, NULL));
  cm_logger_write(lg, CM_LOG_BASIC, "no");
  cm_logger_warn(lg, "spilled");
  cm_logger_destroy(lg);
  ASSERT_EQ(r.n, 1);
  EXPECT_STATUS(r.levels[0], -1);
  EXPECT_STR(r.msgs[0], "spilled");
}

static void test_long_messages(void) {
  make_tmp();
  char path[400];
  snprintf(path, sizeof path, "%s/m.log", g_tmp);
  cm_logger_config_t c;
  cm_logger_config_init(&c);
  c.level = CM_LOG_BASIC;
  c.file = path;
  cm_logger_t *lg = NULL;
  ASSERT_OK(cm_logger_create(&c, &lg, NULL));
  size_t n = 100000;
  char *big = malloc(n + 1);
  ASSERT(big != NULL);
  memset(big, 'x', n);
  big[n] = '\0';
  cm_logger_write(lg, CM_LOG_BASIC, big);
  cm_logger_printf(lg, CM_LOG_BASIC, "%s|%s", big, "end");
  cm_logger_write(lg, CM_LOG_BASIC, NULL); /* an empty line, no crash */
  cm_logger_destroy(lg);
  char *got = slurp(path);
  ASSERT(got != NULL);
  EXPECT_EQ(strlen(got), (n + 1) + (n + 5) + 1);
  EXPECT(got[n] == '\n');
  EXPECT(strncmp(got + n + 1 + n, "|end\n\n", 6) == 0);
  free(got);
  free(big);
  rm_rf(g_tmp);
}

/* 4 threads x 2000 lines into one file and one stdout-less callback: every
 * line whole, counts exact. */
#define THREADS 4
#define PER_THREAD 2000
typedef struct {
  cm_logger_t *lg;
  int id;
} worker_t;

static void *worker(void *arg) {
  worker_t *w = arg;
  for (int i = 0; i < PER_THREAD; i++)
    cm_logger_printf(w->lg, CM_LOG_FULL, "thread %d message %05d %s", w->id, i,
                     "payload-payload-payload-payload-payload-payload-payload");
  return NULL;
}

static int g_cb_count; /* protected by the logger lock */
static void count_fn(void *arg, int level, const char *message) {
  (void)arg;
  (void)level;
  (void)message;
  g_cb_count++;
}

static void test_concurrent_writers(void) {
  make_tmp();
  char path[400];
  snprintf(path, sizeof path, "%s/m.log", g_tmp);
  cm_logger_config_t c;
  cm_logger_config_init(&c);
  c.level = CM_LOG_FULL;
  c.file = path;
  c.callback = count_fn;
  g_cb_count = 0;
  cm_logger_t *lg = NULL;
  ASSERT_OK(cm_logger_create(&c, &lg, NULL));
  pthread_t th[THREADS];
  worker_t w[THREADS];
  for (int i = 0; i < THREADS; i++) {
    w[i].lg = lg;
    w[i].id = i;
    ASSERT(pthread_create(&th[i], NULL, worker, &w[i]) == 0);
  }
  for (int i = 0; i < THREADS; i++) pthread_join(th[i], NULL);
  uint64_t delivered = 0, failed = 1;
  cm_logger_counts(lg, &delivered, &failed);
  cm_logger_destroy(lg);
  EXPECT_EQ(delivered, THREADS * PER_THREAD);
  EXPECT_EQ(failed, 0);
  EXPECT_EQ(g_cb_count, THREADS * PER_THREAD);

  char *got = slurp(path);
  ASSERT(got != NULL);
  int next[THREADS] = {0};
  int lines = 0, bad = 0;
  for (char *line = got, *nl; *line; line = nl + 1) {
    nl = strchr(line, '\n');
    ASSERT(nl != NULL);
    *nl = '\0';
    int id = -1, seq = -1;
    char tail[128];
    if (sscanf(line, "thread %d message %d %127s", &id, &seq, tail) != 3 || id < 0 ||
        id >= THREADS || seq != next[id] ||
        strcmp(tail, "payload-payload-payload-payload-payload-payload-payload") != 0) {
      bad++;
    } else {
      next[id]++;
    }
    lines++;
  }
  EXPECT_EQ(lines, THREADS * PER_THREAD);
  EXPECT_EQ(bad, 0);
  for (int i = 0; i < THREADS; i++) EXPECT_EQ(next[i], PER_THREAD);
  free(got);
  rm_rf(g_tmp);
}

int main(void) {
  CM_RUN(test_config_defaults);
  CM_RUN(test_enabled_truth_table);
  CM_RUN(test_invalid_args);
  CM_RUN(test_t84_disabled_with_sinks);
  CM_RUN(test_t84_basic_without_sinks);
  CM_RUN(test_t84_file_append);
  CM_RUN(test_file_truncate);
  CM_RUN(test_file_open_failures);
  CM_RUN(test_stdout_stderr_sinks);
  CM_RUN(test_callback_and_combined);
  CM_RUN(test_write_failure_reported);
  CM_RUN(test_warn_disabled_callback_only);
  CM_RUN(test_long_messages);
  CM_RUN(test_concurrent_writers);
  return cm_test_finish();
}
