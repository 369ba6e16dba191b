/*
 * test_arena_check.c - the arena's invariant checker (arena_check.c) names
 * the invariant of each violation: a bin and a granule count are corrupted
 * by hand (white box: core/arena.h), each is reported with its id (R3, R7),
 * and once restored the manager checks clean again.
 * Exports: main (the test runner).
 */
#include <stdlib.h>
#include <string.h>

#include "cm_test.h"
#include "core/arena.h"
#include "core/manager_internal.h"
#include "cubemem/memory.h"

#define MiB (1024ull * 1024ull)

static cm_manager_t *mk_sim_arena(void) {
  cm_storage_t *s = NULL;
  if (cm_storage_sim_create(256 * MiB, true, 2 * MiB, &s) != CM_OK) return NULL;
  cm_pool_options_t o;
  memset(&o, 0, sizeof o);
  o.kind = CM_POOL_ARENA;
  cm_manager_config_t cfg;
  cm_manager_config_init(&cfg);
  cfg.props = (cm_device_props_t){128 * MiB, 512};
  cfg.pools = &o;
  cfg.pool_count = 1;
  cm_manager_t *m = NULL;
  cm_diag_t d;
  cm_diag_clear(&d);
  if (cm_manager_create(s, &cfg, &m, &d) != CM_OK) return NULL;
  return m;
}

static cm_handle_t res(cm_manager_t *m, uint64_t size) {
  cm_handle_t h = {NULL};
  cm_diag_t d;
  cm_diag_clear(&d);
  if (cm_manager_reserve(m, size, &h, &d) != CM_OK)
    cm_test_fail(__FILE__, __LINE__, "reserve(%llu): %s", (unsigned long long)size, d.message);
  return h;
}

/* The number of violations cm_manager_check reports; *named: whether its
 * message holds `id`. */
static size_t check(cm_manager_t *m, const char *id, bool *named) {
  cm_diag_t d;
  cm_diag_clear(&d);
  size_t bad = cm_manager_check(m, &d);
  *named = id && strstr(d.message, id) != NULL;
  return bad;
}

static void checker_names_invariants(void) {
  cm_manager_t *m = mk_sim_arena();
  ASSERT(m != NULL);
  cm_handle_t a = res(m, 3 * MiB), b = res(m, 1 * MiB), c = res(m, 5 * MiB);
  cm_handle_release(b); /* a free block between two used ones */
  bool named = false;
  EXPECT_EQ(check(m, NULL, &named), 0); /* drains the release */
  arena *ar = AR(m->pools[0]);
  region *r = ar->regs[0];
  ablk *fb = NULL;
  for (ablk *x = r->first; x && !fb; x = x->next)
    if (x->free && x->next) fb = x; /* the freed block, not the region's free tail */
  ASSERT(fb != NULL);
  uint32_t bin = fb->bin;
  fb->bin = bin + 1; /* R3: a free block in the wrong bin */
  EXPECT_GT(check(m, "R3 free block in the wrong bin", &named), 0);
  EXPECT(named);
  fb->bin = bin;
  EXPECT_EQ(check(m, NULL, &named), 0);
  uint64_t g = r->first->s.offset >> ar->gshift; /* a's first granule */
  r->cnt[g]++; /* R7: a granule count one too high */
  EXPECT_GT(check(m, "R7 granule", &named), 0);
  EXPECT(named);
  r->cnt[g]--;
  EXPECT_EQ(check(m, NULL, &named), 0);
  cm_handle_release(a);
  cm_handle_release(c);
  cm_manager_destroy(m);
}

int main(void) {
  CM_RUN(checker_names_invariants);
  return cm_test_finish();
}
