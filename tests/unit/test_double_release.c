/*
 * test_double_release.c - releasing a handle or binding more often than it
 * was obtained (outside the contract, memory.h "misuse detection"): the
 * extra release of a slice's last reference is ignored, counted and reported
 * by cm_manager_check; a wrapped handle count is seen by the checker; the
 * debug level logs each one (and level 2 aborts).
 *
 * Regression: a second cm_handle_release of the same handle used to wrap the
 * descriptor's count around and leak the slice in silence (usage kept
 * counting it, cm_manager_check reported 0).
 */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cm_scenario.h"
#include "cubemem/log.h"

static cm_manager_t *mk_layout(int layout) {
  static const cm_preset_t presets[3] = {CM_PRESET_DEFAULT, CM_PRESET_SUBSLICES,
                                         CM_PRESET_EXCLUSIVE_PAGES};
  return mk_preset(D, presets[layout]);
}

/* The second release comes before the manager drained the first one. */
static void double_release_before_drain(void) {
  for (int layout = 0; layout < 3; layout++) {
    cm_manager_t *m = mk_layout(layout);
    uint64_t before = cm_debug_double_releases();
    cm_handle_t h = RSV(m, 1000);
    cm_handle_release(h);
    cm_handle_release(h); /* misuse */
    EXPECT_EQ(cm_debug_double_releases(), before + 1);
    cm_usage_t u = usage(m);
    EXPECT_EQ(u.number_allocs, 0); /* the slice is free, not leaked */
    EXPECT_EQ(u.bytes_in_use, 0);
    cm_diag_t d;
    cm_diag_clear(&d);
    EXPECT_GE(cm_manager_check(m, &d), 1);
    EXPECT_CONTAINS(d.message, "1 double release(s)");
    /* the manager keeps working */
    cm_handle_t h2 = RSV(m, 1000);
    EXPECT_EQ(usage(m).number_allocs, 1);
    cm_handle_release(h2);
    EXPECT_EQ(usage(m).number_allocs, 0);
    cm_manager_destroy(m);
  }
}

/* The second release comes after the drain freed the slice. */
static void double_release_after_drain(void) {
  cm_manager_t *m = mk_layout(0);
  cm_handle_t h = RSV(m, 4096);
  cm_binding_t b = cm_handle_binding(h);
  cm_handle_release(h);
  cm_binding_release(b);
  EXPECT_EQ(usage(m).number_allocs, 0); /* drained */
  EXPECT_EQ(cm_manager_check(m, NULL), 0);
  cm_binding_release(b); /* misuse */
  cm_diag_t d;
  cm_diag_clear(&d);
  EXPECT_EQ(cm_manager_check(m, &d), 1);
  EXPECT_CONTAINS(d.message, "double release");
  /* the slice is reused and its new owner's release frees it */
  cm_handle_t h2 = RSV(m, 4096);
  cm_handle_release(h2);
  EXPECT_EQ(usage(m).number_allocs, 0);
  EXPECT_EQ(usage(m).bytes_in_use, 0);
  cm_manager_destroy(m);
}

/* A handle released twice while bindings keep the slice used: not
 * detectable at the release (one binding's reference is dropped), but the
 * handle count wrapped around and the checker sees it while the slice lives. */
static void double_handle_release_with_bindings(void) {
  for (int layout = 0; layout < 3; layout++) {
    cm_manager_t *m = mk_layout(layout);
    cm_handle_t h = RSV(m, 512);
    cm_binding_t b1 = cm_handle_binding(h), b2 = cm_handle_binding(h);
    cm_handle_release(h);
    EXPECT_EQ(cm_manager_check(m, NULL), 0);
    cm_handle_release(h); /* misuse: takes one of the bindings' references */
    cm_diag_t d;
    cm_diag_clear(&d);
    EXPECT_EQ(cm_manager_check(m, &d), 1);
    EXPECT_CONTAINS(d.message, "M4: 1 slice(s) with a reference count that wrapped around");
    EXPECT_EQ(usage(m).number_allocs, 1);
    cm_binding_release(b1); /* the last reference left */
    EXPECT_EQ(usage(m).number_allocs, 0);
    (void)b2; /* its reference was the one the misuse took */
    cm_manager_destroy(m);
  }
}

typedef struct seen {
  int n;
  char last[512];
} seen_t;

static void on_log(void *arg, int level, const char *message) {
  seen_t *s = arg;
  (void)level;
  if (strstr(message, "double release")) {
    s->n++;
    snprintf(s->last, sizeof s->last, "%s", message);
  }
}

static void debug_level_logs(void) {
  seen_t seen = {0, ""};
  cm_logger_config_t lc;
  cm_logger_config_init(&lc);
  lc.callback = on_log;
  lc.callback_arg = &seen;
  cm_logger_t *lg;
  ASSERT_OK(cm_logger_create(&lc, &lg, NULL));
  cm_storage_t *s;
  ASSERT_OK(cm_storage_host_create(0, &s));
  cm_manager_config_t cfg;
  cm_manager_config_init(&cfg);
  cfg.props = D;
  cfg.logger = lg;
  cfg.name = "dbg";
  cm_manager_t *m;
  ASSERT_OK(cm_manager_create(s, &cfg, &m, NULL));

  int old = cm_debug_level();
  cm_debug_set_level(0);
  cm_handle_t h = RSV(m, 64);
  cm_handle_release(h);
  cm_handle_release(h);
  EXPECT_EQ(seen.n, 0); /* level 0: counted, not logged */
  cm_debug_set_level(1);
  EXPECT_EQ(cm_debug_level(), 1);
  h = RSV(m, 64);
  cm_handle_release(h);
  cm_handle_release(h);
  EXPECT_EQ(seen.n, 1);
  EXPECT_CONTAINS(seen.last, "manager 'dbg'");
  EXPECT_CONTAINS(seen.last, "ignored");
  cm_diag_t d;
  cm_diag_clear(&d);
  EXPECT_GE(cm_manager_check(m, &d), 1);
  EXPECT_CONTAINS(d.message, "2 double release(s)");
  cm_debug_set_level(old);
  cm_manager_destroy(m);
  cm_logger_destroy(lg);
}

/* Level 2 aborts at the misuse (in a child process). */
static void debug_level_2_aborts(void) {
  fflush(NULL);
  pid_t pid = fork();
  ASSERT(pid >= 0);
  if (pid == 0) {
    cm_debug_set_level(2);
    if (!freopen("/dev/null", "w", stderr)) _exit(3);
    cm_storage_t *s;
    if (cm_storage_host_create(0, &s)) _exit(3);
    cm_manager_config_t cfg;
    cm_manager_config_init(&cfg);
    cm_manager_t *m;
    if (cm_manager_create(s, &cfg, &m, NULL)) _exit(3);
    cm_handle_t h;
    if (cm_manager_reserve(m, 64, &h, NULL)) _exit(3);
    cm_handle_release(h);
    cm_handle_release(h);
    _exit(0); /* not reached */
  }
  int st = 0;
  ASSERT(waitpid(pid, &st, 0) == pid);
  EXPECT(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
}

int main(void) {
  /* these tests make double releases on purpose and set the level they test
   * themselves: a level from the environment (CI runs the suite at
   * CM_DEBUG=3) would abort the first of them */
  cm_debug_set_level(0);
  CM_RUN(double_release_before_drain);
  CM_RUN(double_release_after_drain);
  CM_RUN(double_handle_release_with_bindings);
  CM_RUN(debug_level_logs);
  CM_RUN(debug_level_2_aborts);
  return cm_test_finish();
}
