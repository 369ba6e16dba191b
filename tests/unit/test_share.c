/*
 * test_share.c - cm_storage_share_create (cubemem/storage.h): a share of a
 * device storage forwards every operation to the device's backend, counts
 * its own calls (the device's counters do not move), offers what the device
 * offers (virtual memory, copies) and nothing more, and its release frees
 * the share only, leaving the device and what it holds intact.
 */
#include <stdlib.h>
#include <string.h>

#include "cm_test.h"
#include "cubemem/memory.h"
#include "cubemem/storage.h"
#include "storage/storage_internal.h"

/* ---- a minimal backend: alloc / dealloc / get only ---------------------------- */

typedef struct tiny {
  uint64_t next, live;
} tiny;

static int tiny_alloc(void *c, uint64_t size, uint64_t *id, cm_diag_t *d) {
  tiny *t = c;
  *id = ++t->next;
  t->live++;
  return CM_OK;
}
static void tiny_dealloc(void *c, uint64_t id) { ((tiny *)c)->live--; }
static int tiny_get(void *c, uint64_t id, uint64_t off, uint64_t size, cm_resource_t *out,
                    cm_diag_t *d) {
  out->addr = id << 20 | off;
  out->host = NULL;
  out->size = size;
  return CM_OK;
}
static void tiny_release(void *c) { free(c); }
static const cm_storage_ops_t tiny_ops = {.name = "tiny", .alloc = tiny_alloc,
                                          .dealloc = tiny_dealloc, .get = tiny_get,
                                          .release = tiny_release};

/* ---- tests ---------------------------------------------------------------------- */

static void share_forwards_and_counts_its_own(void) {
  cm_storage_t *dev = NULL, *sh = NULL;
  ASSERT_OK(cm_storage_host_create(0, &dev));
  ASSERT_OK(cm_storage_share_create(dev, &sh, NULL));
  EXPECT_STR(cm_storage_name(sh), "share");
  EXPECT(cm_storage_has_vm(sh));
  EXPECT(cm_storage_can_copy(sh));
  uint64_t a, b;
  ASSERT_OK(cm_storage_alloc(sh, 1000, &a, NULL));
  ASSERT_OK(cm_storage_alloc(sh, 1000, &b, NULL));
  cm_resource_t ra, rb, rd;
  ASSERT_OK(cm_storage_get(sh, a, 0, 1000, &ra, NULL));
  ASSERT_OK(cm_storage_get(sh, b, 0, 1000, &rb, NULL));
  ASSERT_OK(cm_storage_get(dev, a, 0, 1000, &rd, NULL)); /* the device's own id */
  EXPECT(ra.host != NULL && ra.host == rd.host);
  memset(ra.host, 0x3c, 1000);
  ASSERT_OK(cm_storage_copy(sh, b, 0, a, 0, 600, NULL));
  ASSERT_OK(cm_storage_copy_wait(sh, NULL));
  EXPECT_EQ(((unsigned char *)rb.host)[599], 0x3c);
  EXPECT_EQ(((unsigned char *)rb.host)[600], 0);
  /* virtual memory through the share */
  uint64_t g = cm__storage_vm_granularity(sh), r;
  ASSERT(g > 0);
  EXPECT_EQ(g, cm__storage_vm_granularity(dev));
  ASSERT_OK(cm__storage_vm_reserve(sh, 4 * g, &r, NULL));
  ASSERT_OK(cm__storage_vm_map(sh, r, g, 2 * g, g, NULL));
  EXPECT_STATUS(cm__storage_vm_map(sh, r, 0, 2 * g, g, NULL), CM_EINVAL); /* overlaps */
  ASSERT_OK(cm__storage_vm_unmap(sh, r, g, 2 * g, g, NULL));
  ASSERT_OK(cm__storage_vm_release(sh, r, 4 * g, NULL));
  uint64_t fr = 0, tot = 0;
  int mi = cm_storage_mem_info(sh, &fr, &tot);
  EXPECT_EQ(mi, cm_storage_mem_info(dev, &fr, &tot));
  cm_storage_stats_t s, d;
  cm_storage_stats(sh, &s);
  cm_storage_stats(dev, &d);
  EXPECT_EQ(s.allocs, 2);
  EXPECT_EQ(s.bytes_held, 2000);
  EXPECT_EQ(cm_storage_bytes_held(sh), 2000);
  EXPECT_EQ(s.copies, 1);
  EXPECT_EQ(s.bytes_copied, 600);
  EXPECT_EQ(s.copy_waits, 1);
  EXPECT_EQ(s.reserves, 1);
  EXPECT_EQ(s.maps, 1);
  EXPECT_EQ(s.map_calls, 2);
  EXPECT_EQ(s.unmaps, 1);
  EXPECT_EQ(s.violations, 1);
  EXPECT_EQ(s.gets, 2);
  /* the device's wrapper saw only its own get */
  EXPECT_EQ(d.allocs, 0);
  EXPECT_EQ(d.bytes_held, 0);
  EXPECT_EQ(cm_storage_bytes_held(dev), 0);
  EXPECT_EQ(d.copies, 0);
  EXPECT_EQ(d.reserves, 0);
  EXPECT_EQ(d.gets, 1);
  cm_storage_dealloc(sh, a, 1000);
  cm_storage_dealloc(sh, b, 1000);
  EXPECT_EQ(cm_storage_bytes_held(sh), 0);
  cm_storage_destroy(sh);
  cm_storage_destroy(dev);
}

static void share_offers_only_what_the_device_has(void) {
  tiny *t = calloc(1, sizeof *t);
  ASSERT(t != NULL);
  cm_storage_t *dev = NULL, *sh = NULL;
  ASSERT_OK(cm_storage_create(&tiny_ops, t, &dev));
  ASSERT_OK(cm_storage_share_create(dev, &sh, NULL));
  EXPECT(!cm_storage_has_vm(sh));
  EXPECT(!cm__storage_has_alias(sh));
  EXPECT(!cm_storage_can_copy(sh));
  EXPECT_STATUS(cm_storage_copy(sh, 1, 0, 2, 0, 8, NULL), CM_ENOTSUP);
  uint64_t f, tot;
  EXPECT_STATUS(cm_storage_mem_info(sh, &f, &tot), CM_ENOTSUP);
  void *ev = (void *)1;
  ASSERT_OK(cm_storage_event_record(sh, &ev, NULL));
  EXPECT(ev == NULL);
  EXPECT_EQ(cm_storage_event_query(sh, ev), 1);
  uint64_t id;
  ASSERT_OK(cm_storage_alloc(sh, 64, &id, NULL));
  EXPECT_EQ(t->live, 1);
  cm_resource_t r;
  ASSERT_OK(cm_storage_get(sh, id, 8, 16, &r, NULL));
  EXPECT_EQ(r.addr, id << 20 | 8);
  cm_storage_dealloc(sh, id, 64);
  EXPECT_EQ(t->live, 0);
  cm_storage_destroy(sh);
  cm_storage_destroy(dev);
}

/* Aliases through a share: offered when the device's backend has them, made
 * on the device (one capacity, one set of mappings), counted by the share
 * alone. */
static void share_forwards_aliases(void) {
  cm_storage_t *dev = NULL, *sh = NULL;
  ASSERT_OK(cm_storage_sim_create(0, false, 0, &dev));
  ASSERT_OK(cm_storage_share_create(dev, &sh, NULL));
  ASSERT(cm__storage_has_alias(sh));
  uint64_t g = cm__storage_vm_granularity(sh), r = 0;
  ASSERT_OK(cm__storage_vm_reserve(sh, 4 * g, &r, NULL));
  ASSERT_OK(cm__storage_vm_map(sh, r, 0, 2 * g, g, NULL));
  ASSERT_OK(cm__storage_vm_alias(sh, r, 2 * g, r, 0, 2 * g, g, NULL));
  cm_sim_state_t ss;
  ASSERT_OK(cm_storage_sim_state(dev, &ss));
  EXPECT_EQ(ss.aliases, 2);
  EXPECT_EQ(ss.bytes_used, 2 * g);
  cm_storage_stats_t st, ds;
  cm_storage_stats(sh, &st);
  cm_storage_stats(dev, &ds);
  EXPECT_EQ(st.map_calls, 4);
  EXPECT_EQ(st.set_access, 2);
  EXPECT_EQ(st.bytes_held, 2 * g);
  EXPECT_EQ(ds.map_calls, 0);
  EXPECT_STATUS(cm__storage_vm_unmap(sh, r, 0, 2 * g, g, NULL), CM_EINVAL); /* aliased */
  ASSERT_OK(cm__storage_vm_unalias(sh, r, 2 * g, 2 * g, g, NULL));
  ASSERT_OK(cm__storage_vm_unmap(sh, r, 0, 2 * g, g, NULL));
  ASSERT_OK(cm__storage_vm_release(sh, r, 4 * g, NULL));
  ASSERT_OK(cm_storage_sim_state(dev, &ss));
  EXPECT_EQ(ss.aliases, 0);
  EXPECT_EQ(ss.bytes_used, 0);
  cm_storage_stats(sh, &st);
  EXPECT_EQ(st.unmap_calls, 4);
  EXPECT_EQ(st.releases, 2);
  EXPECT_EQ(st.bytes_held, 0);
  cm_storage_destroy(sh);
  cm_storage_destroy(dev);
}

static void release_leaves_device_intact(void) {
  cm_storage_t *dev = NULL, *sh = NULL;
  ASSERT_OK(cm_storage_host_create(0, &dev));
  uint64_t mine;
  ASSERT_OK(cm_storage_alloc(dev, 256, &mine, NULL));
  cm_resource_t r0;
  ASSERT_OK(cm_storage_get(dev, mine, 0, 256, &r0, NULL));
  memset(r0.host, 0x77, 256);
  /* a manager owns the share: destroying it destroys the share only */
  ASSERT_OK(cm_storage_share_create(dev, &sh, NULL));
  cm_manager_config_t mc;
  cm_manager_config_init(&mc);
  cm_manager_t *m = NULL;
  ASSERT_OK(cm_manager_create(sh, &mc, &m, NULL));
  cm_handle_t h;
  ASSERT_OK(cm_manager_reserve(m, 5000, &h, NULL));
  EXPECT_GT(cm_storage_bytes_held(sh), 0);
  cm_handle_release(h);
  cm_manager_destroy(m);
  cm_storage_stats_t d;
  cm_storage_stats(dev, &d);
  EXPECT_EQ(d.allocs, 1);
  EXPECT_EQ(d.bytes_held, 256);
  cm_resource_t r1;
  ASSERT_OK(cm_storage_get(dev, mine, 0, 256, &r1, NULL));
  EXPECT(r1.host == r0.host);
  EXPECT_EQ(((unsigned char *)r1.host)[255], 0x77);
  uint64_t more;
  ASSERT_OK(cm_storage_alloc(dev, 128, &more, NULL)); /* the device still works */
  cm_storage_dealloc(dev, more, 128);
  cm_storage_dealloc(dev, mine, 256);
  cm_storage_destroy(dev);
}

static void share_refuses_null(void) {
  cm_storage_t *dev = NULL, *sh = (cm_storage_t *)1;
  cm_diag_t d;
  cm_diag_clear(&d);
  EXPECT_STATUS(cm_storage_share_create(NULL, &sh, &d), CM_EINVAL);
  EXPECT(sh == NULL);
  EXPECT_CONTAINS(d.message, "device is NULL");
  ASSERT_OK(cm_storage_host_create(0, &dev));
  EXPECT_STATUS(cm_storage_share_create(dev, NULL, NULL), CM_EINVAL);
  EXPECT_EQ(cm_storage_bytes_held(NULL), 0);
  cm_storage_destroy(dev);
}

static void share_starts_timing_with_the_device(void) {
  cm_storage_t *dev = NULL, *sh = NULL;
  ASSERT_OK(cm_storage_sim_create(0, false, 0, &dev));
  cm_storage_set_timing(dev, true);
  ASSERT_OK(cm_storage_share_create(dev, &sh, NULL));
  uint64_t id;
  cm_storage_stats_t s;
  for (int i = 0; i < 1000; i++) {
    ASSERT_OK(cm_storage_alloc(sh, 4096, &id, NULL));
    cm_storage_dealloc(sh, id, 4096);
  }
  cm_storage_stats(sh, &s);
  EXPECT_GT(s.time_ns, 0);
  cm_storage_destroy(sh);
  cm_storage_destroy(dev);
}

int main(void) {
  CM_RUN(share_forwards_and_counts_its_own);
  CM_RUN(share_offers_only_what_the_device_has);
  CM_RUN(share_forwards_aliases);
  CM_RUN(release_leaves_device_intact);
  CM_RUN(share_refuses_null);
  CM_RUN(share_starts_timing_with_the_device);
  return cm_test_finish();
}
