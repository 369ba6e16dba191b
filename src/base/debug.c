/*
 * debug.c - the run-time debug level (read from CM_DEBUG on first use) and
 * the report of a failed internal assertion; the levels and CM_ASSERT are
 * described in base/debug.h.
 * Exports cm_debug_level, cm_debug_set_level and the internal cm__assert_fail.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/debug.h"
#include "cubemem/common.h"

static _Atomic int g_debug_level = -1; /* -1: CM_DEBUG not read yet */

int cm_debug_level(void) {
  int lvl = atomic_load_explicit(&g_debug_level, memory_order_relaxed);
  if (lvl >= 0) return lvl;
  const char *env = getenv("CM_DEBUG");
  lvl = env && env[0] >= '0' && env[0] <= '9' ? atoi(env) : 0;
  int unread = -1; /* a concurrent cm_debug_set_level wins */
  atomic_compare_exchange_strong(&g_debug_level, &unread, lvl);
  return atomic_load_explicit(&g_debug_level, memory_order_relaxed);
}

void cm_debug_set_level(int level) {
  atomic_store_explicit(&g_debug_level, level < 0 ? 0 : level, memory_order_relaxed);
}

void cm__assert_fail(const char *file, int line, const char *expr) {
  fprintf(stderr, "cubemem: internal assertion failed: %s:%d: %s\n", file, line, expr);
  abort();
}
