/*
 * cm_test.h - the in-house test harness.
 *
 * A test file defines `static void name(void)` functions and a main() that
 * runs them with CM_RUN(name) and ends with `return cm_test_finish();`.
 * EXPECT_* record a failure and continue; ASSERT_* record it and leave the
 * test (longjmp). CM_SKIP(reason) skips the current test. The binary prints
 * "N passed, N failed, N skipped" last and exits 0 (all passed), 1 (any
 * failure) or 77 (everything skipped). CM_TEST_NAME=foo runs one test.
 */
#ifndef CM_TEST_H
#define CM_TEST_H

#include <inttypes.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

void cm_test_run(const char *name, void (*fn)(void));
int cm_test_finish(void);
void cm_test_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void cm_test_skip(const char *reason);
/* Directory of ../shared, or NULL when it is absent (tests that need it skip). */
const char *cm_test_shared_dir(void);
extern jmp_buf *cm_test_jmp;

#define CM_RUN(fn) cm_test_run(#fn, fn)

#define CM__FAIL_AND(stop, ...)            \
  do {                                     \
    cm_test_fail(__FILE__, __LINE__, __VA_ARGS__); \
    if (stop) longjmp(*cm_test_jmp, 1);    \
  } while (0)

#define CM__CHECK(stop, cond)                                 \
  do {                                                        \
    if (!(cond)) CM__FAIL_AND(stop, "check failed: %s", #cond); \
  } while (0)

#define CM__CHECK_U64(stop, a, op, b)                                                  \
  do {                                                                                 \
    uint64_t cm__a = (uint64_t)(a), cm__b = (uint64_t)(b);                             \
    if (!(cm__a op cm__b))                                                             \
      CM__FAIL_AND(stop, "%s %s %s: %" PRIu64 " vs %" PRIu64, #a, #op, #b, cm__a, cm__b); \
  } while (0)

#define CM__CHECK_I64(stop, a, op, b)                                                  \
  do {                                                                                 \
    int64_t cm__a = (int64_t)(a), cm__b = (int64_t)(b);                                \
    if (!(cm__a op cm__b))                                                             \
      CM__FAIL_AND(stop, "%s %s %s: %" PRId64 " vs %" PRId64, #a, #op, #b, cm__a, cm__b); \
  } while (0)

#define CM__CHECK_STR(stop, a, b)                                                        \
  do {                                                                                   \
    const char *cm__a = (a), *cm__b = (b);                                               \
    if (!cm__a || !cm__b || strcmp(cm__a, cm__b) != 0)                                   \
      CM__FAIL_AND(stop, "%s == %s: \"%s\" vs \"%s\"", #a, #b, cm__a ? cm__a : "(null)", \
                   cm__b ? cm__b : "(null)");                                            \
  } while (0)

#define CM__CHECK_CONTAINS(stop, hay, needle)                                             \
  do {                                                                                    \
    const char *cm__h = (hay), *cm__n = (needle);                                         \
    if (!cm__h || !strstr(cm__h, cm__n))                                                  \
      CM__FAIL_AND(stop, "%s contains \"%s\": got \"%s\"", #hay, cm__n, cm__h ? cm__h : "(null)"); \
  } while (0)

#define EXPECT(c) CM__CHECK(0, c)
#define ASSERT(c) CM__CHECK(1, c)
#define EXPECT_EQ(a, b) CM__CHECK_U64(0, a, ==, b)
#define ASSERT_EQ(a, b) CM__CHECK_U64(1, a, ==, b)
#define EXPECT_NE(a, b) CM__CHECK_U64(0, a, !=, b)
#define EXPECT_LE(a, b) CM__CHECK_U64(0, a, <=, b)
#define EXPECT_LT(a, b) CM__CHECK_U64(0, a, <, b)
#define EXPECT_GE(a, b) CM__CHECK_U64(0, a, >=, b)
#define EXPECT_GT(a, b) CM__CHECK_U64(0, a, >, b)
#define EXPECT_STATUS(a, b) CM__CHECK_I64(0, a, ==, b)
#define ASSERT_STATUS(a, b) CM__CHECK_I64(1, a, ==, b)
#define ASSERT_OK(a) CM__CHECK_I64(1, a, ==, 0)
#define EXPECT_OK(a) CM__CHECK_I64(0, a, ==, 0)
#define EXPECT_STR(a, b) CM__CHECK_STR(0, a, b)
#define EXPECT_CONTAINS(h, n) CM__CHECK_CONTAINS(0, h, n)
#define CM_SKIP(reason)      \
  do {                       \
    cm_test_skip(reason);    \
    longjmp(*cm_test_jmp, 2); \
  } while (0)

#endif
