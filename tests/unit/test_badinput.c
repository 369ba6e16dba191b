/*
 * test_badinput.c - bad input gets a clear status code and message and leaves
 * the manager unchanged.
 *
 * Covered: sizes whose rounding to the alignment overflows (UINT64_MAX and
 * neighbours), absurd sizes, zero sizes in every pool kind, empty handles
 * and bindings, stale and foreign handles, bind misuse, resource trims
 * larger than the slice, invalid pool lists and configurations, bad report
 * indices, bad storage arguments, and a storage that refuses to allocate.
 * After each failed call the manager's usage (cm_manager_usage) is compared
 * with a snapshot taken before it, and cm_manager_check must stay 0. Absurd
 * sizes that would reach a real host allocation are given to the sim
 * storage instead (a host allocation of 2^50 bytes would trip sanitizers'
 * allocation limits, not the library). Exports: main (the test runner).
 */
#include <stdlib.h>
#include <string.h>

#include "cm_test.h"
#include "cubemem/memory.h"

#include "cm_scenario.h"

/* ---- helpers of this file ----------------------------------------------- */

#define EXPECT_SAME_USAGE(m, before)                         \
  do {                                                       \
    cm_usage_t now_ = usage(m);                              \
    EXPECT_EQ(now_.number_allocs, (before).number_allocs);   \
    EXPECT_EQ(now_.bytes_in_use, (before).bytes_in_use);     \
    EXPECT_EQ(now_.bytes_padding, (before).bytes_padding);   \
    EXPECT_EQ(now_.bytes_reserved, (before).bytes_reserved); \
    EXPECT_HEALTHY(m);                                       \
  } while (0)

/* A failed reserve: status `want` (or `alt` when not 0), empty handle, diag
 * filled, usage unchanged. */
static void expect_reserve_fails(cm_manager_t *m, uint64_t size, int want, int alt, int line) {
  cm_usage_t before = usage(m);
  cm_storage_stats_t sb = sstats(m);
  cm_handle_t h = {0};
  cm_diag_t diag = {0};
  int rc = cm_manager_reserve(m, size, &h, &diag);
  if (rc != want && !(alt && rc == alt))
    cm_test_fail(__FILE__, line, "reserve(%" PRIu64 "): %s, expected %s", size, cm_err_name(rc),
                 cm_err_name(want));
  if (h.d) {
    cm_test_fail(__FILE__, line, "failed reserve returned a handle");
    cm_handle_release(h);
  }
  if (diag.code != rc || !diag.message[0])
    cm_test_fail(__FILE__, line, "diag: code %d message \"%s\"", diag.code, diag.message);
  EXPECT_SAME_USAGE(m, before);
  EXPECT_EQ(sstats(m).bytes_held, sb.bytes_held);
}
#define EXPECT_RESERVE_FAILS(m, size, want) expect_reserve_fails((m), (size), (want), 0, __LINE__)
#define EXPECT_RESERVE_FAILS2(m, size, want, alt) \
  expect_reserve_fails((m), (size), (want), (alt), __LINE__)


/* ---- sizes ---------------------------------------------------------------------------- */

/* Rounding UINT64_MAX-ish sizes to the alignment overflows: CM_EOVERFLOW
 * where a pool would accept the size (direct, persistent); never a wrap. */
static void size_overflow(void) {
  cm_pool_options_t p = direct();
  cm_manager_t *m = mk_full(sim(1 * GiB, true), D, &p, 1, CM_PRESET_DEFAULT, CM_PERSISTENT_ENABLED);
  cm_handle_t keep = RSV(m, 100);
  EXPECT_RESERVE_FAILS(m, UINT64_MAX, CM_EOVERFLOW);
  EXPECT_RESERVE_FAILS(m, UINT64_MAX - 1, CM_EOVERFLOW);
  EXPECT_RESERVE_FAILS(m, UINT64_MAX - 30, CM_EOVERFLOW);
  /* aligned: no overflow, the storage refuses it */
  EXPECT_RESERVE_FAILS(m, UINT64_MAX - 31, CM_EOOM);
  cm_manager_set_mode(m, CM_MODE_PERSISTENT);
  EXPECT_RESERVE_FAILS(m, UINT64_MAX, CM_EOVERFLOW);
  EXPECT_RESERVE_FAILS(m, UINT64_MAX - 30, CM_EOVERFLOW);
  cm_manager_set_mode(m, CM_MODE_AUTO);
  EXPECT_EQ(storage_of(m, keep).size, 100);
  drop(&keep);
  cm_manager_destroy(m);

  /* Presets: nothing accepts such sizes (too big) or the rounding overflows. */
  cm_preset_t ps[3] = {CM_PRESET_SUBSLICES, CM_PRESET_EXCLUSIVE_PAGES, CM_PRESET_DEFAULT};
  for (int i = 0; i < 3; i++) {
    m = mk_full(sim(1 * GiB, true), D, NULL, 0, ps[i], CM_PERSISTENT_ENABLED);
    keep = RSV(m, 1000);
    EXPECT_RESERVE_FAILS2(m, UINT64_MAX, CM_EOVERFLOW, CM_ETOOBIG);
    EXPECT_RESERVE_FAILS2(m, UINT64_MAX - 30, CM_EOVERFLOW, CM_ETOOBIG);
    drop(&keep);
    cm_manager_destroy(m);
  }
}

/* Absurd sizes: too big for every pool, or refused by the storage. */
static void absurd_sizes(void) {
  cm_manager_t *m = mk_preset(D, CM_PRESET_SUBSLICES);
  EXPECT_RESERVE_FAILS(m, 1ull << 62, CM_ETOOBIG);
  EXPECT_RESERVE_FAILS(m, 128 * MiB + 1, CM_ETOOBIG);
  cm_manager_destroy(m);

  m = mk_preset(D, CM_PRESET_EXCLUSIVE_PAGES);
  EXPECT_RESERVE_FAILS(m, 1ull << 40, CM_ETOOBIG);
  cm_manager_destroy(m);

  cm_pool_options_t capped = sliced_cap(1 * MiB, 1 * MiB, 2 * MiB);
  m = mk(D, &capped, 1);
  EXPECT_RESERVE_FAILS(m, 2 * MiB, CM_ETOOBIG);
  cm_manager_destroy(m);

  /* A catch-all pool hands absurd sizes to the storage, which refuses. */
  cm_pool_options_t p = direct();
  m = mk_full(sim(1 * GiB, true), D, &p, 1, CM_PRESET_DEFAULT, CM_PERSISTENT_ENABLED);
  cm_handle_t keep = RSV(m, 4096);
  EXPECT_RESERVE_FAILS(m, 1ull << 50, CM_EOOM);
  EXPECT_RESERVE_FAILS(m, 1ull << 62, CM_EOOM);
  EXPECT_EQ(sstats(m).failed_allocs, 2);
  drop(&keep);
  cm_manager_destroy(m);

  /* Host storage: sizes beyond what the host can address are refused
   * before any allocation is attempted. */
  m = mk(D, &p, 1);
  EXPECT_RESERVE_FAILS2(m, (1ull << 63) + 32, CM_ETOOBIG, CM_EOOM);
  cm_manager_destroy(m);
}

/* cubemem's default layout (one arena over a VM storage) with absurd sizes:
 * a clear "too big" or "out of device memory", not "out of host memory",
 * and no host allocation proportional to the request (under a sanitizer
 * such an allocation aborts the process). Runs last in main for that
 * reason. */
static void absurd_sizes_default_arena(void) {
  static const uint64_t sizes[] = {1ull << 50, 1ull << 62, (1ull << 63) + 32, UINT64_MAX - 31};
  for (int k = 0; k < 2; k++) {
    cm_manager_t *m = mk_full(k ? sim(1 * GiB, true) : NULL, D, NULL, 0, CM_PRESET_DEFAULT,
                              CM_PERSISTENT_ENABLED);
    cm_handle_t keep = RSV(m, 1000);
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
      EXPECT_RESERVE_FAILS2(m, sizes[i], CM_ETOOBIG, CM_EOOM);
    drop(&keep);
    cm_manager_destroy(m);
  }
}

/* Zero-byte requests work in every pool kind: counted, resolvable, released. */
static void zero_sizes(void) {
  cm_pool_options_t lists[5][2] = {
      {sliced(1024, 1024), direct()},
      {exclusive(0), direct()},
      {exclusive(4096), direct()},
      {direct(), direct()},
      {sliced_cap(1024, 1024, 1024), direct()},
  };
  for (int i = 0; i < 5; i++) {
    cm_manager_t *m = mk(D, lists[i], 2);
    cm_handle_t z1 = RSV(m, 0), z2 = RSV(m, 0), one = RSV(m, 1);
    EXPECT_EQ(loc_of(m, z1).pool, 0);
    EXPECT_EQ(usage(m).number_allocs, 3);
    EXPECT_EQ(usage(m).bytes_in_use, 1);
    EXPECT_EQ(storage_of(m, z1).size, 0);
    cm_binding_t b = cm_handle_binding(z2);
    cm_resource_t res;
    EXPECT_OK(cm_manager_get_resource(m, b, 0, 0, &res, NULL));
    EXPECT_EQ(res.size, 0);
    cm_binding_release(b);
    EXPECT_HEALTHY(m);
    /* An explicit cleanup keeps live zero-byte slices valid. */
    cm_manager_cleanup(m, true);
    EXPECT_HEALTHY(m);
    EXPECT_EQ(usage(m).number_allocs, 3);
    EXPECT_EQ(storage_of(m, z2).size, 0);
    cm_handle_t big = RSV(m, 1000);
    EXPECT_HEALTHY(m);
    EXPECT_EQ(usage(m).bytes_reserved, sstats(m).bytes_held);
    drop(&big);
    drop(&z1);
    drop(&z2);
    drop(&one);
    EXPECT_USAGE(m, 0, 0, 0, usage(m).bytes_reserved);
    cm_manager_cleanup(m, true);
    EXPECT_USAGE(m, 0, 0, 0, 0);
    EXPECT_HEALTHY(m);
    cm_manager_destroy(m);
  }
  /* persistent and the default arena */
  cm_manager_t *m = mk_preset(D, CM_PRESET_DEFAULT);
  cm_handle_t z = RSV(m, 0);
  cm_manager_set_mode(m, CM_MODE_PERSISTENT);
  cm_handle_t pz = RSV(m, 0);
  cm_manager_set_mode(m, CM_MODE_AUTO);
  EXPECT_EQ(loc_of(m, pz).pool, CM_PERSISTENT_POOL);
  EXPECT_EQ(usage(m).number_allocs, 2);
  cm_manager_cleanup(m, true);
  EXPECT_HEALTHY(m);
  EXPECT_EQ(storage_of(m, z).size, 0);
  EXPECT_EQ(storage_of(m, pz).size, 0);
  drop(&z);
  drop(&pz);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* A sliced page whose only live slice is zero bytes long is not free: an
 * explicit cleanup must keep the page (and its accounting) intact. */
static void zero_size_alone_in_sliced_page(void) {
  cm_pool_options_t p = sliced(1024, 1024);
  cm_manager_t *m = mk(D, &p, 1);
  cm_handle_t z = RSV(m, 0);
  EXPECT_USAGE(m, 1, 0, 0, 1024);
  cm_manager_cleanup(m, true);
  EXPECT_HEALTHY(m);
  EXPECT_USAGE(m, 1, 0, 0, 1024);
  EXPECT_EQ(pages(m, 0), 1);
  EXPECT_EQ(storage_of(m, z).size, 0);
  cm_handle_t a = RSV(m, 1024);
  EXPECT_HEALTHY(m);
  EXPECT_EQ(usage(m).bytes_reserved, sstats(m).bytes_held);
  drop(&a);
  drop(&z);
  cm_manager_cleanup(m, true);
  EXPECT_USAGE(m, 0, 0, 0, 0);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* ---- handles -------------------------------------------------------------------------- */

/* Empty handles and bindings: ignored by release, rejected by lookups. */
static void empty_handles(void) {
  cm_handle_t e = {0};
  cm_binding_t eb = {0};
  cm_handle_release(e);
  cm_binding_release(eb);
  EXPECT(!cm_handle_can_mut(e));
  EXPECT_EQ(cm_handle_id(e), 0);
  EXPECT_EQ(cm_binding_id(eb), 0);

  cm_pool_options_t p = sliced(4096, 4096);
  cm_manager_t *m = mk(D, &p, 1);
  cm_handle_t keep = RSV(m, 100);
  cm_usage_t before = usage(m);
  cm_diag_t diag = {0};
  cm_location_t loc;
  int rc = cm_manager_find(m, eb, &loc, &diag);
  EXPECT(rc == CM_EINVAL || rc == CM_ENOTFOUND);
  EXPECT(diag.message[0] != '\0');
  uint64_t cursor;
  cm_diag_clear(&diag);
  rc = cm_manager_get_cursor(m, eb, &cursor, &diag);
  EXPECT(rc == CM_EINVAL || rc == CM_ENOTFOUND);
  EXPECT(diag.message[0] != '\0');
  cm_storage_handle_t sh;
  cm_diag_clear(&diag);
  rc = cm_manager_get_storage(m, eb, &sh, &diag);
  EXPECT(rc == CM_EINVAL || rc == CM_ENOTFOUND);
  EXPECT(diag.message[0] != '\0');
  cm_resource_t res;
  cm_diag_clear(&diag);
  rc = cm_manager_get_resource(m, eb, 0, 0, &res, &diag);
  EXPECT(rc == CM_EINVAL || rc == CM_ENOTFOUND);
  EXPECT(diag.message[0] != '\0');
  EXPECT_SAME_USAGE(m, before);

  /* bind with an empty reserved handle */
  cm_handle_t a = {0};
  ASSERT_OK(cm_handle_new(&a));
  cm_diag_clear(&diag);
  rc = cm_manager_bind(m, e, a, 1, &diag);
  EXPECT(rc == CM_EINVAL || rc == CM_ENOTFOUND);
  EXPECT(diag.message[0] != '\0');
  EXPECT_SAME_USAGE(m, before);
  EXPECT(cm_handle_can_mut(a));

  /* bind with an empty assigned handle: fails, and consumes the reserved
   * handle, so its slice is free again */
  cm_handle_t r = RSV(m, 200);
  cm_diag_clear(&diag);
  rc = cm_manager_bind(m, r, e, 1, &diag);
  EXPECT(rc == CM_EINVAL || rc == CM_ENOTFOUND);
  EXPECT(diag.message[0] != '\0');
  EXPECT_SAME_USAGE(m, before);

  cm_handle_release(a);
  drop(&keep);
  cm_manager_destroy(m);
}

/* Stale descriptors: a bind on a stale reserved handle fails and changes
 * nothing; the slice keeps its assigned identity and cursor. */
static void stale_handles(void) {
  cm_pool_options_t p = sliced(4096, 4096);
  cm_manager_t *m = mk(D, &p, 1);
  cm_handle_t r = RSV(m, 300);
  cm_handle_t stale = cm_handle_clone(r);
  cm_handle_t a = {0}, a2 = {0};
  ASSERT_OK(cm_handle_new(&a));
  ASSERT_OK(cm_handle_new(&a2));
  ASSERT_OK(cm_manager_bind(m, r, a, 5, NULL));
  cm_usage_t before = usage(m);
  cm_diag_t diag = {0};
  EXPECT_STATUS(cm_manager_bind(m, stale, a2, 9, &diag), CM_ENOTFOUND); /* consumes stale */
  EXPECT_CONTAINS(diag.message, "different allocation");
  EXPECT_SAME_USAGE(m, before);
  cm_binding_t ba = cm_handle_binding(a);
  uint64_t cursor = 0;
  EXPECT_OK(cm_manager_get_cursor(m, ba, &cursor, NULL));
  EXPECT_EQ(cursor, 5);
  cm_binding_release(ba);
  cm_binding_t b2 = cm_handle_binding(a2);
  cm_location_t loc;
  EXPECT_STATUS(cm_manager_find(m, b2, &loc, NULL), CM_ENOTFOUND);
  cm_binding_release(b2);
  /* binding the same reserved handle twice: the second fails (stale) */
  cm_handle_t r2 = RSV(m, 64);
  cm_handle_t r2c = cm_handle_clone(r2);
  cm_handle_t a3 = {0}, a4 = {0};
  ASSERT_OK(cm_handle_new(&a3));
  ASSERT_OK(cm_handle_new(&a4));
  ASSERT_OK(cm_manager_bind(m, r2, a3, 1, NULL));
  before = usage(m);
  EXPECT_STATUS(cm_manager_bind(m, r2c, a4, 2, NULL), CM_ENOTFOUND);
  EXPECT_SAME_USAGE(m, before);
  cm_handle_release(a);
  cm_handle_release(a2);
  cm_handle_release(a3);
  cm_handle_release(a4);
  EXPECT_USAGE(m, 0, 0, 0, 4096);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* Handles of one manager are not found in another (never another's data). */
static void foreign_handles(void) {
  cm_pool_options_t p = sliced(4096, 4096);
  cm_manager_t *m1 = mk(D, &p, 1);
  cm_manager_t *m2 = mk(D, &p, 1);
  cm_handle_t h1 = RSV(m1, 128);
  cm_handle_t h2 = RSV(m2, 128); /* same pool/page/offset in m2 */
  cm_usage_t before = usage(m2);
  cm_binding_t b1 = cm_handle_binding(h1);
  cm_location_t loc;
  cm_diag_t diag = {0};
  EXPECT_STATUS(cm_manager_find(m2, b1, &loc, &diag), CM_ENOTFOUND);
  EXPECT(diag.message[0] != '\0');
  cm_storage_handle_t sh;
  EXPECT_STATUS(cm_manager_get_storage(m2, b1, &sh, NULL), CM_ENOTFOUND);
  cm_resource_t res;
  EXPECT_STATUS(cm_manager_get_resource(m2, b1, 0, 0, &res, NULL), CM_ENOTFOUND);
  cm_binding_release(b1);
  /* bind of a foreign reserved handle fails; it is consumed (m1's slice is
   * free again) */
  cm_handle_t a = {0};
  ASSERT_OK(cm_handle_new(&a));
  EXPECT_STATUS(cm_manager_bind(m2, h1, a, 1, NULL), CM_ENOTFOUND);
  EXPECT_SAME_USAGE(m2, before);
  EXPECT_EQ(usage(m1).number_allocs, 0);
  cm_handle_release(a);
  drop(&h2);
  EXPECT_HEALTHY(m1);
  cm_manager_destroy(m1);
  cm_manager_destroy(m2);
}

/* Trims larger than the slice are rejected. */
static void bad_trims(void) {
  cm_pool_options_t p = sliced(4096, 4096);
  cm_manager_t *m = mk(D, &p, 1);
  cm_handle_t h = RSV(m, 100);
  cm_binding_t b = cm_handle_binding(h);
  cm_resource_t res;
  cm_diag_t diag = {0};
  EXPECT_STATUS(cm_manager_get_resource(m, b, 101, 0, &res, &diag), CM_EINVAL);
  EXPECT(diag.message[0] != '\0');
  EXPECT_STATUS(cm_manager_get_resource(m, b, 0, 101, &res, NULL), CM_EINVAL);
  EXPECT_STATUS(cm_manager_get_resource(m, b, 60, 41, &res, NULL), CM_EINVAL);
  EXPECT_STATUS(cm_manager_get_resource(m, b, UINT64_MAX, 2, &res, NULL), CM_EINVAL);
  EXPECT_STATUS(cm_manager_get_resource(m, b, 2, UINT64_MAX, &res, NULL), CM_EINVAL);
  EXPECT_OK(cm_manager_get_resource(m, b, 60, 40, &res, NULL));
  EXPECT_EQ(res.size, 0);
  EXPECT_OK(cm_manager_get_resource(m, b, 10, 20, &res, NULL));
  EXPECT_EQ(res.size, 70);
  cm_resource_t whole;
  EXPECT_OK(cm_manager_get_resource(m, b, 0, 0, &whole, NULL));
  EXPECT_EQ(res.addr, whole.addr + 10); /* offset_end trims the end only */
  cm_binding_release(b);
  drop(&h);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

/* ---- configuration and arguments ------------------------------------------------------ */

/* Invalid manager configurations fail; the caller keeps the storage. */
static void bad_manager_config(void) {
  cm_storage_t *s = NULL;
  ASSERT_OK(cm_storage_host_create(0, &s));
  cm_manager_t *m = NULL;
  cm_diag_t diag = {0};
  EXPECT_STATUS(cm_manager_create(s, NULL, &m, &diag), CM_EINVAL);
  EXPECT(m == NULL);
  cm_manager_config_t cfg;
  cm_manager_config_init(&cfg);
  EXPECT_STATUS(cm_manager_create(NULL, &cfg, &m, NULL), CM_EINVAL);
  static cm_pool_options_t many[CM_MAX_DYNAMIC_POOLS + 1];
  for (size_t i = 0; i < CM_MAX_DYNAMIC_POOLS + 1; i++) many[i] = exclusive(1024);
  cfg.pools = many;
  cfg.pool_count = CM_MAX_DYNAMIC_POOLS + 1;
  cm_diag_clear(&diag);
  EXPECT_STATUS(cm_manager_create(s, &cfg, &m, &diag), CM_EINVAL);
  EXPECT(diag.message[0] != '\0');
  EXPECT(m == NULL);
  /* the storage is still ours and usable */
  uint64_t id = 0;
  ASSERT_OK(cm_storage_alloc(s, 64, &id, NULL));
  cm_storage_dealloc(s, id, 64);
  cfg.pool_count = CM_MAX_DYNAMIC_POOLS;
  ASSERT_OK(cm_manager_create(s, &cfg, &m, &diag)); /* now the manager owns s */
  EXPECT_EQ(cm_manager_pool_count(m), CM_MAX_DYNAMIC_POOLS);
  cm_manager_destroy(m);
}

/* Unresolved lists that the reference would panic on: cubemem fails
 * cleanly or serves them, never corrupting its state. */
static void unresolved_lists_never_corrupt(void) {
  cm_pool_options_t lists[4];
  lists[0] = sliced(0, 0);     /* zero page */
  lists[1] = sliced(100, 100); /* page not aligned (align 32) */
  lists[2] = exclusive(1000);  /* max not aligned */
  memset(&lists[3], 0, sizeof lists[3]);
  lists[3].kind = (cm_pool_kind_t)99; /* unknown kind */
  for (int i = 0; i < 4; i++) {
    cm_storage_t *s = NULL;
    ASSERT_OK(cm_storage_host_create(0, &s));
    cm_manager_config_t cfg;
    cm_manager_config_init(&cfg);
    cfg.pools = &lists[i];
    cfg.pool_count = 1;
    cm_manager_t *m = NULL;
    cm_diag_t diag = {0};
    int rc = cm_manager_create(s, &cfg, &m, &diag);
    if (rc != CM_OK) {
      EXPECT(rc == CM_EINVAL || rc == CM_ECONFIG);
      EXPECT(diag.message[0] != '\0');
      cm_storage_destroy(s);
      continue;
    }
    EXPECT(i != 3); /* an unknown kind cannot be served */
    for (uint64_t size = 0; size <= 1000; size += 100) {
      cm_handle_t h = {0};
      cm_diag_clear(&diag);
      rc = cm_manager_reserve(m, size, &h, &diag);
      if (rc == CM_OK) {
        EXPECT_EQ(storage_of(m, h).size, size);
        drop(&h);
      } else {
        EXPECT(h.d == NULL);
        EXPECT(diag.message[0] != '\0');
      }
      EXPECT_HEALTHY(m);
    }
    cm_manager_destroy(m);
  }
}

/* install_pools with lists that fail validation keeps everything as it was. */
static void bad_install(void) {
  cm_pool_options_t p = sliced(4096, 4096);
  cm_manager_t *m = mk(D, &p, 1);
  cm_handle_t h = RSV(m, 100);
  drop(&h);
  cm_manager_cleanup(m, true);
  h = RSV(m, 100);
  drop(&h);
  cm_usage_t before = usage(m);
  cm_pool_options_t bad;
  memset(&bad, 0, sizeof bad);
  bad.kind = (cm_pool_kind_t)99;
  cm_diag_t diag = {0};
  EXPECT_STATUS(cm_manager_install_pools(m, &bad, 1, &diag), CM_EINVAL);
  EXPECT(diag.message[0] != '\0');
  EXPECT_EQ(cm_manager_pool_count(m), 1);
  EXPECT_EQ(report(m, 0).options.page_size, 4096);
  cm_usage_t after = usage(m);
  EXPECT_EQ(after.number_allocs, before.number_allocs);
  EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
  EXPECT_HEALTHY(m);
  h = RSV(m, 100);
  EXPECT_EQ(loc_of(m, h).pool, 0);
  drop(&h);
  cm_manager_destroy(m);
}

/* Bad indices, presets and texts. */
static void bad_arguments(void) {
  cm_manager_t *m = mk_preset(D, CM_PRESET_SUBSLICES);
  cm_pool_report_t r;
  EXPECT_STATUS(cm_manager_pool_report(m, 4, &r), CM_EINVAL);
  EXPECT_STATUS(cm_manager_pool_report(m, 253, &r), CM_EINVAL);
  EXPECT_STATUS(cm_manager_pool_report(m, 256, &r), CM_EINVAL);
  EXPECT_OK(cm_manager_pool_report(m, CM_PERSISTENT_POOL, &r));
  EXPECT_OK(cm_manager_pool_report(m, CM_DEDICATED_POOL, &r));
  EXPECT_EQ(r.options.kind, CM_POOL_DEDICATED);
  cm_manager_destroy(m);
  cm_manager_destroy(NULL);

  cm_pool_options_t out[4];
  size_t n = 0;
  EXPECT_STATUS(cm_pools_preset((cm_preset_t)42, D, out, 4, &n), CM_EINVAL);
  cm_diag_t diag = {0};
  EXPECT_STATUS(cm_pools_parse(NULL, D, out, 4, &n, &diag), CM_EINVAL);
  EXPECT(diag.message[0] != '\0');
  EXPECT_STATUS(cm_pools_resolve(NULL, 0, D, out, NULL), CM_ECONFIG);

  EXPECT_STR(cm_err_name(CM_ETOOBIG), "CM_ETOOBIG");
  EXPECT(cm_strerror(-12345) != NULL);
}

/* Storage arguments. */
static void bad_storage_arguments(void) {
  cm_storage_t *s = NULL;
  EXPECT_STATUS(cm_storage_host_create(3, &s), CM_EINVAL);
  EXPECT(s == NULL);
  static const cm_storage_ops_t no_alloc = {.name = "broken"};
  int ctx = 0;
  EXPECT_STATUS(cm_storage_create(&no_alloc, &ctx, &s), CM_EINVAL);
  EXPECT_STATUS(cm_storage_create(NULL, &ctx, &s), CM_EINVAL);
  cm_storage_destroy(NULL);
}

/* A storage that refuses: clean error, nothing changed, and the manager
 * works again once memory is available. */
static void storage_refuses(void) {
  cm_pool_options_t p = sliced(4096, 4096);
  cm_manager_t *m = mk_full(sim(8192, true), D, &p, 1, CM_PRESET_DEFAULT, CM_PERSISTENT_ENABLED);
  cm_handle_t a = RSV(m, 4096), b = RSV(m, 4096);
  EXPECT_RESERVE_FAILS(m, 100, CM_EOOM);
  EXPECT_EQ(sstats(m).failed_allocs, 1);
  drop(&b);
  cm_handle_t c = RSV(m, 100);
  drop(&a);
  drop(&c);
  EXPECT_HEALTHY(m);
  cm_manager_destroy(m);
}

int main(void) {
  CM_RUN(size_overflow);
  CM_RUN(absurd_sizes);
  CM_RUN(zero_sizes);
  CM_RUN(zero_size_alone_in_sliced_page);
  CM_RUN(empty_handles);
  CM_RUN(stale_handles);
  CM_RUN(foreign_handles);
  CM_RUN(bad_trims);
  CM_RUN(bad_manager_config);
  CM_RUN(unresolved_lists_never_corrupt);
  CM_RUN(bad_install);
  CM_RUN(bad_arguments);
  CM_RUN(bad_storage_arguments);
  CM_RUN(storage_refuses);
  CM_RUN(absurd_sizes_default_arena);
  return cm_test_finish();
}
