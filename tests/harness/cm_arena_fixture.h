/*
 * cm_arena_fixture.h - helpers shared by the arena tests (tests/unit/
 * test_arena*.c): "plain", a minimal storage without VM operations that can
 * be told to fail allocations (the arena's segment fallback), the simulated
 * device, managers with arena pools, reservations that fail the test, the
 * storage's figures, a deterministic random source, pool 0's report and a
 * slice's offset (cm_manager_find: it does not materialize).
 * Header only; everything is static and may go unused in a given file.
 */
#ifndef CM_ARENA_FIXTURE_H
#define CM_ARENA_FIXTURE_H

#include <stdlib.h>
#include <string.h>

#include "cm_test.h"
#include "cubemem/memory.h"

#ifndef UNUSED
#define UNUSED __attribute__((unused))
#endif

#define KiB (1024ull)
#define MiB (1024ull * 1024ull)
#define GiB (1024ull * MiB)

static UNUSED const cm_device_props_t P = {128 * MiB, 512};

/* ---- a storage without virtual memory ---------------------------------------- */

typedef struct plain {
  uint64_t next_id;
  uint64_t sizes[4096]; /* by id; 0 = not live */
  int fail_next;        /* > 0: that many allocations fail with CM_EOOM */
} plain;

static UNUSED int plain_alloc(void *ctx, uint64_t size, uint64_t *out, cm_diag_t *diag) {
  plain *p = ctx;
  (void)diag;
  if (p->fail_next > 0) {
    p->fail_next--;
    return CM_EOOM;
  }
  if (p->next_id >= 4096) return CM_EOOM;
  uint64_t id = p->next_id++;
  p->sizes[id] = size ? size : 1;
  *out = id;
  return CM_OK;
}

static UNUSED void plain_dealloc(void *ctx, uint64_t id) {
  plain *p = ctx;
  if (id < 4096) p->sizes[id] = 0;
}

static UNUSED int plain_get(void *ctx, uint64_t id, uint64_t offset, uint64_t size, cm_resource_t *out,
                     cm_diag_t *diag) {
  plain *p = ctx;
  (void)diag;
  if (id >= 4096 || !p->sizes[id]) return CM_EHANDLE;
  if (offset > p->sizes[id] || size > p->sizes[id] - offset) return CM_EINVAL;
  out->addr = (id << 40) + offset;
  out->host = NULL;
  out->size = size;
  return CM_OK;
}

static UNUSED void plain_release(void *ctx) { free(ctx); }

static UNUSED const cm_storage_ops_t k_plain_ops = {
    .name = "plain",
    .alloc = plain_alloc,
    .dealloc = plain_dealloc,
    .get = plain_get,
    .release = plain_release,
};

static UNUSED cm_storage_t *plain_storage(plain **ctx) {
  plain *p = calloc(1, sizeof *p);
  p->next_id = 1;
  cm_storage_t *s = NULL;
  if (cm_storage_create(&k_plain_ops, p, &s) != CM_OK) free(p);
  if (ctx) *ctx = p;
  return s;
}

static UNUSED cm_storage_t *sim(uint64_t capacity, bool fail, uint64_t gran) {
  cm_storage_t *s = NULL;
  if (cm_storage_sim_create(capacity, fail, gran, &s) != CM_OK) return NULL;
  return s;
}

/* ---- helpers ------------------------------------------------------------------- */

static UNUSED cm_pool_options_t arena(void) {
  cm_pool_options_t o;
  memset(&o, 0, sizeof o);
  o.kind = CM_POOL_ARENA;
  return o;
}

static UNUSED cm_manager_t *mk(cm_storage_t *s, const cm_pool_options_t *pools, size_t n) {
  cm_manager_config_t cfg;
  cm_manager_config_init(&cfg);
  cfg.props = P;
  cfg.pools = pools;
  cfg.pool_count = n;
  cm_manager_t *m = NULL;
  cm_diag_t d;
  memset(&d, 0, sizeof d);
  if (cm_manager_create(s, &cfg, &m, &d) != CM_OK) return NULL;
  return m;
}

static UNUSED cm_manager_t *mk_arena(cm_storage_t *s) {
  cm_pool_options_t o = arena();
  return mk(s, &o, 1);
}

static UNUSED cm_handle_t res(cm_manager_t *m, uint64_t size) {
  cm_handle_t h = {NULL};
  cm_diag_t d;
  memset(&d, 0, sizeof d);
  int rc = cm_manager_reserve(m, size, &h, &d);
  if (rc != CM_OK) cm_test_fail(__FILE__, __LINE__, "reserve(%llu): %s", (unsigned long long)size,
                                d.message);
  return h;
}

static UNUSED cm_storage_handle_t where(cm_manager_t *m, cm_handle_t h) {
  cm_storage_handle_t sh;
  memset(&sh, 0, sizeof sh);
  cm_binding_t b = cm_handle_binding(h);
  if (cm_manager_get_storage(m, b, &sh, NULL) != CM_OK) sh.id = UINT64_MAX;
  cm_binding_release(b);
  return sh;
}

static UNUSED uint64_t held(cm_manager_t *m) {
  cm_storage_stats_t st;
  cm_storage_stats(cm_manager_storage(m), &st);
  return st.bytes_held;
}

static UNUSED cm_storage_stats_t stats(cm_manager_t *m) {
  cm_storage_stats_t st;
  cm_storage_stats(cm_manager_storage(m), &st);
  return st;
}

static UNUSED uint64_t reserved(cm_manager_t *m) {
  cm_usage_t u;
  cm_manager_usage(m, &u);
  return u.bytes_reserved;
}

#define CHECK_CLEAN(m)                                                    \
  do {                                                                    \
    cm_diag_t cd__;                                                       \
    memset(&cd__, 0, sizeof cd__);                                        \
    size_t bad__ = cm_manager_check((m), &cd__);                          \
    if (bad__) cm_test_fail(__FILE__, __LINE__, "check: %zu violations: %s", bad__, cd__.message); \
  } while (0)

static UNUSED uint64_t rng_state = 0x243f6a8885a308d3ull;
static UNUSED uint64_t rnd(void) {
  uint64_t x = rng_state;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return rng_state = x;
}

/* A size drawn from a skewed mix: mostly small, some medium, a few large. */
static UNUSED uint64_t rnd_size(uint64_t large) {
  uint64_t k = rnd() % 100;
  if (k < 5) return 0;
  if (k < 60) return 1 + rnd() % (8 * KiB);
  if (k < 90) return 1 + rnd() % (256 * KiB);
  return 1 + rnd() % large;
}

static UNUSED cm_pool_report_t report0(cm_manager_t *m) {
  cm_pool_report_t r;
  memset(&r, 0, sizeof r);
  if (cm_manager_pool_report(m, 0, &r) != CM_OK) cm_test_fail(__FILE__, __LINE__, "pool report");
  return r;
}

static UNUSED uint64_t offset_of(cm_manager_t *m, cm_handle_t h) { /* find: does not materialize */
  cm_location_t loc;
  memset(&loc, 0, sizeof loc);
  cm_binding_t b = cm_handle_binding(h);
  if (cm_manager_find(m, b, &loc, NULL) != CM_OK) loc.offset = UINT64_MAX;
  cm_binding_release(b);
  return loc.offset;
}

#endif
