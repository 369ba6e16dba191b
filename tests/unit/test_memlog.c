/*
 * test_memlog.c - the memory manager's log messages per level (spec §10.1,
 * scenario T83), delivered through a logger with a callback sink.
 */
#include <stdlib.h>
#include <string.h>

#include "cm_test.h"
#include "cubemem/cubemem.h"

#define MiB (1024ull * 1024ull)

typedef struct sink {
  char msgs[64][4096];
  int levels[64];
  int n;
} sink;

static void collect(void *arg, int level, const char *message) {
  sink *s = arg;
  if (s->n >= 64) return;
  snprintf(s->msgs[s->n], sizeof s->msgs[0], "%s", message);
  s->levels[s->n] = level;
  s->n++;
}

static int count_in(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle)) n++;
  return n;
}

static cm_manager_t *mk(cm_log_level_t level, sink *s, cm_logger_t **lg) {
  cm_logger_config_t lc;
  cm_logger_config_init(&lc);
  lc.level = level;
  lc.callback = collect;
  lc.callback_arg = s;
  if (cm_logger_create(&lc, lg, NULL) != CM_OK) return NULL;
  cm_storage_t *st = NULL;
  if (cm_storage_host_create(0, &st) != CM_OK) return NULL;
  cm_manager_config_t cfg;
  cm_manager_config_init(&cfg);
  cfg.name = "Main GPU Memory";
  cfg.props = (cm_device_props_t){128 * MiB, 32};
  cfg.preset = CM_PRESET_SUBSLICES;
  cfg.logger = *lg;
  cm_manager_t *m = NULL;
  if (cm_manager_create(st, &cfg, &m, NULL) != CM_OK) {
    cm_storage_destroy(st);
    return NULL;
  }
  return m;
}

/* T83 at level basic. */
static void t83_basic(void) {
  static sink s;
  memset(&s, 0, sizeof s);
  cm_logger_t *lg = NULL;
  cm_manager_t *m = mk(CM_LOG_BASIC, &s, &lg);
  ASSERT(m != NULL);
  /* construction: ONE message with the four SubSlices pools of D */
  ASSERT_EQ(s.n, 1);
  EXPECT_EQ(count_in(s.msgs[0], "[Main GPU Memory] Using memory pool: "), 4);
  cm_manager_set_mode(m, CM_MODE_PERSISTENT);
  ASSERT_EQ(s.n, 2);
  EXPECT_CONTAINS(s.msgs[1], "[Main GPU Memory] Setting memory allocation mode: from Auto => Persistent");
  cm_manager_set_mode(m, CM_MODE_AUTO);
  ASSERT_EQ(s.n, 3);
  EXPECT_CONTAINS(s.msgs[2], "from Persistent => Auto");
  /* a dynamic reserve logs nothing at basic, even when it creates a page */
  cm_handle_t h;
  ASSERT_OK(cm_manager_reserve(m, 1000, &h, NULL));
  EXPECT_EQ(s.n, 3);
  cm_handle_release(h);
  cm_manager_cleanup(m, true);
  ASSERT_EQ(s.n, 4);
  EXPECT_STR(s.msgs[3], "Manual memory cleanup ...");
  /* a new persistent page is logged at basic, with the display */
  cm_manager_set_mode(m, CM_MODE_PERSISTENT);
  ASSERT_OK(cm_manager_reserve(m, 4096, &h, NULL));
  ASSERT_EQ(s.n, 6);
  EXPECT_CONTAINS(s.msgs[5], "[Main GPU Memory] Allocated a new memory page using persistent memory, \n");
  EXPECT_CONTAINS(s.msgs[5], "# MemoryManagement");
  cm_handle_release(h);
  /* reusing it is logged at full only */
  ASSERT_OK(cm_manager_reserve(m, 4096, &h, NULL));
  EXPECT_EQ(s.n, 6);
  cm_handle_release(h);
  cm_manager_destroy(m);
  cm_logger_destroy(lg);
}

/* T83 at level full. */
static void t83_full(void) {
  static sink s;
  memset(&s, 0, sizeof s);
  cm_logger_t *lg = NULL;
  cm_manager_t *m = mk(CM_LOG_FULL, &s, &lg);
  ASSERT(m != NULL);
  int base = s.n;
  cm_handle_t h;
  ASSERT_OK(cm_manager_reserve(m, 1000, &h, NULL)); /* creates a page */
  ASSERT_EQ(s.n, base + 2);
  EXPECT_CONTAINS(s.msgs[base], "[Main GPU Memory] Reserved memory 1.00 KB using dynamic pool");
  EXPECT_CONTAINS(s.msgs[base + 1], "[Main GPU Memory], Allocated a new memory page, current usage: \n");
  cm_handle_release(h);
  ASSERT_OK(cm_manager_reserve(m, 1000, &h, NULL)); /* reuse: only the routing message */
  ASSERT_EQ(s.n, base + 3);
  EXPECT_CONTAINS(s.msgs[base + 2], "Reserved memory 1.00 KB using dynamic pool");
  cm_handle_release(h);
  cm_manager_set_mode(m, CM_MODE_PERSISTENT);
  ASSERT_OK(cm_manager_reserve(m, 4096, &h, NULL));
  cm_handle_release(h);
  int before = s.n;
  ASSERT_OK(cm_manager_reserve(m, 4096, &h, NULL)); /* persistent reuse, raw bytes */
  ASSERT_EQ(s.n, before + 1);
  EXPECT_CONTAINS(s.msgs[before], "[Main GPU Memory] Reserved memory 4096 using persistent memory");
  cm_handle_release(h);
  cm_manager_destroy(m);
  cm_logger_destroy(lg);
}

/* Disabled: nothing at all, even with a sink. */
static void disabled_logs_nothing(void) {
  static sink s;
  memset(&s, 0, sizeof s);
  cm_logger_t *lg = NULL;
  cm_manager_t *m = mk(CM_LOG_DISABLED, &s, &lg);
  ASSERT(m != NULL);
  cm_manager_set_mode(m, CM_MODE_PERSISTENT);
  cm_handle_t h;
  ASSERT_OK(cm_manager_reserve(m, 1000, &h, NULL));
  cm_handle_release(h);
  cm_manager_cleanup(m, true);
  EXPECT_EQ(s.n, 0);
  cm_manager_destroy(m);
  cm_logger_destroy(lg);
}

/* The spill warning (§5.4) reaches the callback once per pool per layout,
 * whatever the level. */
static void spill_warning_once(void) {
  static sink s;
  memset(&s, 0, sizeof s);
  cm_logger_t *lg = NULL;
  cm_logger_config_t lc;
  cm_logger_config_init(&lc);
  lc.callback = collect;
  lc.callback_arg = &s;
  ASSERT_OK(cm_logger_create(&lc, &lg, NULL));
  cm_storage_t *st = NULL;
  ASSERT_OK(cm_storage_host_create(0, &st));
  cm_pool_options_t pools[2] = {{0}, {0}};
  pools[0].kind = pools[1].kind = CM_POOL_SLICED;
  pools[0].page_size = pools[1].page_size = 1024;
  pools[0].has_max_pool_size = true;
  pools[0].max_pool_size = 1024;
  cm_manager_config_t cfg;
  cm_manager_config_init(&cfg);
  cfg.name = "M";
  cfg.pools = pools;
  cfg.pool_count = 2;
  cfg.logger = lg;
  cm_manager_t *m = NULL;
  ASSERT_OK(cm_manager_create(st, &cfg, &m, NULL));
  cm_handle_t h[3];
  for (int i = 0; i < 3; i++) ASSERT_OK(cm_manager_reserve(m, 1024, &h[i], NULL));
  ASSERT_EQ(s.n, 1);
  EXPECT_EQ(s.levels[0], -1);
  EXPECT_CONTAINS(s.msgs[0], "[M] memory pool 0 is at capacity (first hit at an allocation of 1024 B)");
  EXPECT_EQ(cm_manager_warnings(m), 1);
  for (int i = 0; i < 3; i++) cm_handle_release(h[i]);
  cm_manager_destroy(m);
  cm_logger_destroy(lg);
}

int main(void) {
  CM_RUN(t83_basic);
  CM_RUN(t83_full);
  CM_RUN(disabled_logs_nothing);
  CM_RUN(spill_warning_once);
  return cm_test_finish();
}
