/*
 * test_assert.c - CM_ASSERT (base/debug.h): in debug builds a false
 * expression reports file:line and the expression on stderr and aborts; in
 * other builds the expression is not evaluated at all. The test is compiled
 * with the library's build type, so it sees the library's CM_DEBUG_BUILD.
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/debug.h"
#include "cm_test.h"

/* Increment *n and return the new value (a side effect to observe). */
static __attribute__((unused)) int bump(int *n) { return ++*n; }

/* A true expression passes; it is evaluated exactly when assertions are on. */
static void true_passes(void) {
  int n = 0;
  CM_ASSERT(bump(&n) == 1);
  EXPECT_EQ(n, CM_DEBUG_BUILD ? 1 : 0);
}

/* A false one aborts with "file:line: expression" (debug builds), or does
 * nothing (other builds); checked in a child process. */
static void false_aborts_in_debug_builds(void) {
  int fds[2];
  ASSERT(pipe(fds) == 0);
  fflush(NULL);
  pid_t pid = fork();
  ASSERT(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    if (dup2(fds[1], STDERR_FILENO) < 0) _exit(3);
    int zero = 0;
    CM_ASSERT(zero == 1);
    _exit(0);
  }
  close(fds[1]);
  char out[512];
  size_t len = 0;
  ssize_t k;
  while (len + 1 < sizeof out && (k = read(fds[0], out + len, sizeof out - 1 - len)) > 0)
    len += (size_t)k;
  out[len] = '\0';
  close(fds[0]);
  int st = 0;
  ASSERT(waitpid(pid, &st, 0) == pid);
  if (CM_DEBUG_BUILD) {
    EXPECT(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
    EXPECT_CONTAINS(out, "cubemem: internal assertion failed: ");
    EXPECT_CONTAINS(out, "test_assert.c:");
    EXPECT_CONTAINS(out, ": zero == 1\n");
  } else {
    EXPECT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    EXPECT_STR(out, "");
  }
}

int main(void) {
  CM_RUN(true_passes);
  CM_RUN(false_aborts_in_debug_builds);
  return cm_test_finish();
}
