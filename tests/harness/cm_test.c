/*
 * cm_test.c - runner for the in-house harness (see cm_test.h).
 * Counts passed/failed/skipped tests and prints the closing line that CI reads.
 */
#include "cm_test.h"

#include <stdarg.h>
#include <stdlib.h>
#include <sys/stat.h>

jmp_buf *cm_test_jmp;
static int g_passed, g_failed, g_skipped;
static int g_cur_failed, g_cur_skipped;
static const char *g_cur_name;

void cm_test_fail(const char *file, int line, const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "  FAIL %s (%s:%d): ", g_cur_name ? g_cur_name : "?", file, line);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  g_cur_failed = 1;
}

void cm_test_skip(const char *reason) {
  printf("  SKIP %s: %s\n", g_cur_name, reason);
  g_cur_skipped = 1;
}

void cm_test_run(const char *name, void (*fn)(void)) {
  const char *only = getenv("CM_TEST_NAME");
  if (only && *only && strcmp(only, name) != 0) return;
  jmp_buf jb;
  jmp_buf *saved = cm_test_jmp;
  cm_test_jmp = &jb;
  g_cur_name = name;
  g_cur_failed = 0;
  g_cur_skipped = 0;
  if (setjmp(jb) == 0) fn();
  cm_test_jmp = saved;
  if (g_cur_failed) {
    g_failed++;
    printf("not ok %s\n", name);
  } else if (g_cur_skipped) {
    g_skipped++;
  } else {
    g_passed++;
    printf("ok %s\n", name);
  }
  fflush(stdout);
}

int cm_test_finish(void) {
  printf("%d passed, %d failed, %d skipped\n", g_passed, g_failed, g_skipped);
  if (g_failed) {
    fprintf(stderr, "rerun one test with CM_TEST_NAME=<name>\n");
    return 1;
  }
  if (g_passed == 0 && g_skipped > 0) return 77;
  return 0;
}

const char *cm_test_shared_dir(void) {
  static char buf[4096];
  const char *env = getenv("CM_SHARED_DIR");
  const char *dir = (env && *env) ? env : CM_SHARED_DIR;
  struct stat st;
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) return NULL;
  snprintf(buf, sizeof buf, "%s", dir);
  return buf;
}
