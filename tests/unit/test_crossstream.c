/*
 * test_crossstream.c - cross-stream safety (spec §8.4) over a test storage
 * whose events the test completes by hand: a binding of stream A used on
 * stream B is pinned until an event recorded on B after the work completes;
 * the wait decision compares last_synced[A] with the slice's bind cursor
 * (lookup failure = UINT64_MAX, forcing the wait); Direct slices carry their
 * cursor (§15.1 item 4); the drop queue's fences are the storage's events;
 * destroy waits for outstanding events.
 */
#include <stdlib.h>
#include <string.h>

#include "cm_test.h"
#include "cubemem/device.h"

#define KiB (1024ull)
#define MiB (1024ull * 1024ull)

/* ---- a storage with controllable events -------------------------------------------- */

typedef struct tev {
  bool done;
  struct tev *next; /* all events ever recorded, for the test to complete */
} tev_t;

typedef struct evstore {
  uint64_t next_id;
  int recorded, queried, synced, destroyed, live;
  tev_t *all;
  bool auto_complete; /* record complete events */
} evstore_t;

/* every test storage, by stream (the factory registers them) */
static evstore_t *stores[8];

static int es_alloc(void *ctx, uint64_t size, uint64_t *out_id, cm_diag_t *diag) {
  (void)size;
  (void)diag;
  *out_id = ++((evstore_t *)ctx)->next_id;
  return CM_OK;
}
static void es_dealloc(void *ctx, uint64_t id) {
  (void)ctx;
  (void)id;
}
static int es_get(void *ctx, uint64_t id, uint64_t off, uint64_t size, cm_resource_t *out,
                  cm_diag_t *diag) {
  (void)ctx;
  (void)diag;
  out->addr = (id << 32) + off;
  out->host = NULL;
  out->size = size;
  return CM_OK;
}
static void es_release(void *ctx) {
  evstore_t *s = ctx;
  while (s->all) {
    tev_t *n = s->all->next;
    free(s->all);
    s->all = n;
  }
  for (int i = 0; i < 8; i++)
    if (stores[i] == s) stores[i] = NULL;
  free(s);
}
static int es_record(void *ctx, void **out, cm_diag_t *diag) {
  (void)diag;
  evstore_t *s = ctx;
  tev_t *e = calloc(1, sizeof *e);
  if (!e) return CM_ENOMEM;
  e->done = s->auto_complete;
  e->next = s->all;
  s->all = e;
  s->recorded++;
  s->live++;
  *out = e;
  return CM_OK;
}
static int es_query(void *ctx, void *ev) {
  ((evstore_t *)ctx)->queried++;
  return ((tev_t *)ev)->done ? 1 : 0;
}
static int es_sync(void *ctx, void *ev) {
  ((evstore_t *)ctx)->synced++;
  ((tev_t *)ev)->done = true; /* the host waited for it */
  return CM_OK;
}
static void es_destroy(void *ctx, void *ev) {
  evstore_t *s = ctx;
  s->destroyed++;
  s->live--;
  /* unlink and free */
  for (tev_t **pp = &s->all; *pp; pp = &(*pp)->next)
    if (*pp == ev) {
      *pp = ((tev_t *)ev)->next;
      free(ev);
      return;
    }
}
static const cm_storage_ops_t es_ops = {
    .name = "events",
    .alloc = es_alloc,
    .dealloc = es_dealloc,
    .get = es_get,
    .release = es_release,
    .event_record = es_record,
    .event_query = es_query,
    .event_sync = es_sync,
    .event_destroy = es_destroy,
};

static int es_factory(void *arg, uint64_t stream, cm_storage_t **out, cm_diag_t *diag) {
  (void)arg;
  (void)diag;
  evstore_t *s = calloc(1, sizeof *s);
  if (!s) return CM_ENOMEM;
  int rc = cm_storage_create(&es_ops, s, out);
  if (rc) {
    free(s);
    return rc;
  }
  if (stream < 8) stores[stream] = s;
  return CM_OK;
}

/* complete every event recorded so far on a stream's storage */
static void complete_all(uint64_t stream) {
  for (tev_t *e = stores[stream]->all; e; e = e->next) e->done = true;
}

static cm_device_t *make_device(const char *layout) {
  static cm_pool_options_t pools[8];
  cm_device_config_t cfg;
  cm_device_config_init(&cfg);
  cfg.storage = es_factory;
  cfg.props.max_page_size = 64 * MiB;
  cfg.props.alignment = 512;
  if (layout) {
    size_t n = 0;
    if (cm_pools_parse(layout, cfg.props, pools, 8, &n, NULL) != CM_OK) return NULL;
    cfg.manager.pools = pools;
    cfg.manager.pool_count = n;
  }
  cm_device_t *dev = NULL;
  memset(stores, 0, sizeof stores);
  if (cm_device_create(&cfg, &dev, NULL) != CM_OK) return NULL;
  return dev;
}

static uint64_t live_allocs(cm_device_t *dev, uint64_t stream) {
  cm_usage_t u;
  if (cm_device_memory_report(dev, stream, &u, NULL, 0, NULL, NULL, NULL) != CM_OK) return 999;
  return u.number_allocs;
}

/* ---- tests --------------------------------------------------------------------------------- */

static void pinned_until_event_completes(void) {
  cm_device_t *dev = make_device("exclusive:max=1MiB");
  ASSERT(dev != NULL);
  cm_handle_t h;
  ASSERT_OK(cm_device_reserve(dev, 0, 4096, &h, NULL)); /* stream A = 0 */
  ASSERT_OK(cm_device_submit(dev, 0, NULL));            /* A writes it */
  ASSERT(stores[0] != NULL);
  cm_binding_t b = cm_handle_binding(h);
  bool waited = false;
  cm_resource_t r;
  ASSERT_OK(cm_device_use_binding(dev, b, 0, 1, &r, &waited, NULL)); /* read on B = 1 */
  EXPECT(waited);                  /* cursor 0 >= last_synced 0: A's work awaited */
  EXPECT_EQ(stores[0]->synced, 1);
  EXPECT_EQ(cm_device_last_synced(dev, 0), 1);
  EXPECT_EQ(r.size, 4096);
  EXPECT_EQ(cm_device_pins(dev, 1), 1); /* pinned for B's next work */
  EXPECT_EQ(cm_device_pins(dev, 0), 0);

  /* the user drops every reference: the slice stays busy on A */
  cm_binding_release(b);
  cm_handle_release(h);
  EXPECT_EQ(live_allocs(dev, 0), 1);

  ASSERT_OK(cm_device_submit(dev, 1, NULL)); /* B's kernel; event E recorded after it */
  ASSERT(stores[1] != NULL);
  EXPECT_EQ(stores[1]->recorded, 1);
  EXPECT_EQ(cm_device_pins(dev, 1), 1); /* E pending */
  cm_device_cleanup(dev); /* polls the pin's event, does not wait for it */
  EXPECT_EQ(live_allocs(dev, 0), 1);
  EXPECT_EQ(cm_device_pins(dev, 1), 1);

  complete_all(1); /* B's work finished */
  EXPECT_EQ(cm_device_pins(dev, 1), 0);
  EXPECT_EQ(stores[1]->live, 1); /* only the drop queue's last fence is left */
  EXPECT_EQ(live_allocs(dev, 0), 0); /* back to A's pool */
  cm_device_cleanup(dev);
  cm_usage_t u;
  cm_device_memory_usage(dev, &u);
  EXPECT_EQ(u.bytes_reserved, 0);
  cm_device_destroy(dev);
}

static void sync_releases_pins(void) {
  cm_device_t *dev = make_device("exclusive:max=1MiB");
  ASSERT(dev != NULL);
  cm_handle_t h;
  ASSERT_OK(cm_device_reserve(dev, 0, 100, &h, NULL));
  cm_binding_t b = cm_handle_into_binding(h);
  ASSERT_OK(cm_device_use_binding(dev, b, 0, 1, NULL, NULL, NULL));
  ASSERT_OK(cm_device_use_binding(dev, b, 0, 1, NULL, NULL, NULL));
  EXPECT_EQ(cm_device_pins(dev, 1), 2);
  ASSERT_OK(cm_device_sync(dev, 1, NULL)); /* nothing submitted yet: pending pins stay */
  EXPECT_EQ(cm_device_pins(dev, 1), 2);
  ASSERT_OK(cm_device_submit(dev, 1, NULL));
  cm_binding_release(b);
  EXPECT_EQ(live_allocs(dev, 0), 1);
  ASSERT_OK(cm_device_sync(dev, 1, NULL)); /* blocks on the events: pins go */
  EXPECT_EQ(cm_device_pins(dev, 1), 0);
  EXPECT_EQ(live_allocs(dev, 0), 0);
  EXPECT_EQ(cm_device_last_synced(dev, 1), 1);
  cm_device_destroy(dev);
}

static void wait_decision(void) {
  cm_device_t *dev = make_device("exclusive:max=1MiB");
  ASSERT(dev != NULL);
  cm_handle_t h0, h1;
  ASSERT_OK(cm_device_reserve(dev, 0, 100, &h0, NULL)); /* cursor 0 */
  ASSERT_OK(cm_device_submit(dev, 0, NULL));
  ASSERT_OK(cm_device_submit(dev, 0, NULL)); /* A's cursor 2 */
  cm_binding_t b0 = cm_handle_binding(h0);
  bool waited = false;
  ASSERT_OK(cm_device_use_binding(dev, b0, 0, 1, NULL, &waited, NULL));
  EXPECT(waited);
  EXPECT_EQ(cm_device_last_synced(dev, 0), 2);
  int synced = stores[0]->synced;

  /* already covered by the sync: no wait */
  ASSERT_OK(cm_device_use_binding(dev, b0, 0, 1, NULL, &waited, NULL));
  EXPECT(!waited);
  EXPECT_EQ(stores[0]->synced, synced);

  /* bound at cursor 2 >= last_synced 2: its writer may still run */
  ASSERT_OK(cm_device_reserve(dev, 0, 100, &h1, NULL));
  ASSERT_OK(cm_device_submit(dev, 0, NULL));
  cm_binding_t b1 = cm_handle_binding(h1);
  ASSERT_OK(cm_device_use_binding(dev, b1, 0, 2, NULL, &waited, NULL));
  EXPECT(waited);
  EXPECT_EQ(cm_device_last_synced(dev, 0), 3);

  /* a binding A does not know: cursor = UINT64_MAX forces the wait */
  cm_handle_t hc;
  ASSERT_OK(cm_device_reserve(dev, 3, 100, &hc, NULL));
  cm_binding_t bc = cm_handle_binding(hc);
  ASSERT_OK(cm_device_use_binding(dev, bc, 0, 1, NULL, &waited, NULL));
  EXPECT(waited);
  /* ... and asking for its resource through A fails, pinning nothing */
  size_t pins = cm_device_pins(dev, 1);
  cm_resource_t r;
  cm_diag_t d;
  cm_diag_clear(&d);
  EXPECT_STATUS(cm_device_use_binding(dev, bc, 0, 1, &r, &waited, &d), CM_ENOTFOUND);
  EXPECT_EQ(cm_device_pins(dev, 1), pins);

  /* same stream (or same slot): resolves, no pin, no wait */
  ASSERT_OK(cm_device_use_binding(dev, b0, 0, 0, &r, &waited, NULL));
  EXPECT(!waited);
  EXPECT_EQ(cm_device_pins(dev, 0), 0);
  ASSERT_OK(cm_device_use_binding(dev, b0, 0, 128, NULL, &waited, NULL)); /* 128 % 128 == 0 */
  EXPECT_EQ(cm_device_pins(dev, 0), 0);

  cm_binding_release(b0);
  cm_binding_release(b1);
  cm_binding_release(bc);
  cm_handle_release(h0);
  cm_handle_release(h1);
  cm_handle_release(hc);
  cm_device_destroy(dev); /* pins with pending events: destroy waits, then frees */
}

/* §15.1 item 4: the Direct pool stores the bind cursor, so the wait is not skipped */
static void direct_pool_cursor(void) {
  cm_device_t *dev = make_device("direct");
  ASSERT(dev != NULL);
  ASSERT_OK(cm_device_submit(dev, 0, NULL));
  ASSERT_OK(cm_device_submit(dev, 0, NULL));
  ASSERT_OK(cm_device_sync(dev, 0, NULL)); /* last_synced 2 */
  cm_handle_t h;
  ASSERT_OK(cm_device_reserve(dev, 0, 100, &h, NULL)); /* bound at cursor 2 */
  ASSERT_OK(cm_device_submit(dev, 0, NULL));
  cm_manager_t *m;
  ASSERT_OK(cm_device_manager(dev, 0, false, &m, NULL));
  cm_binding_t b = cm_handle_binding(h);
  uint64_t c = 0;
  ASSERT_OK(cm_manager_get_cursor(m, b, &c, NULL));
  EXPECT_EQ(c, 2);
  bool waited = false;
  ASSERT_OK(cm_device_use_binding(dev, b, 0, 1, NULL, &waited, NULL));
  EXPECT(waited);
  cm_binding_release(b);
  cm_handle_release(h);
  cm_device_destroy(dev);
}

/* destroy waits for events still pending and frees every pin */
static void destroy_waits(void) {
  cm_device_t *dev = make_device("exclusive:max=1MiB");
  ASSERT(dev != NULL);
  cm_handle_t h;
  ASSERT_OK(cm_device_reserve(dev, 0, 100, &h, NULL));
  cm_binding_t b = cm_handle_into_binding(h);
  ASSERT_OK(cm_device_use_binding(dev, b, 0, 1, NULL, NULL, NULL));
  ASSERT_OK(cm_device_submit(dev, 1, NULL));
  ASSERT_OK(cm_device_use_binding(dev, b, 0, 1, NULL, NULL, NULL)); /* never submitted */
  cm_binding_release(b);
  EXPECT_EQ(cm_device_pins(dev, 1), 2);
  evstore_t *s1 = stores[1];
  int synced = s1->synced;
  (void)synced;
  cm_device_destroy(dev); /* would leak or use-after-free under ASan if wrong */
  EXPECT(stores[1] == NULL); /* its storage is gone */
}

/* the drop queue's fences are events on the stream's storage */
static int freed;
static void on_free(void *arg, void *ptr, uint64_t size) {
  (void)arg;
  (void)ptr;
  (void)size;
  freed++;
}
static void drop_queue_fences_are_events(void) {
  cm_device_t *dev = make_device("exclusive:max=1MiB");
  ASSERT(dev != NULL);
  freed = 0;
  ASSERT_OK(cm_device_defer_free(dev, 0, NULL, 10, on_free, NULL, NULL));
  int rec = stores[0]->recorded;
  ASSERT_OK(cm_device_flush(dev, 0, NULL));
  EXPECT_EQ(stores[0]->recorded, rec + 1);
  EXPECT_EQ(stores[0]->synced, 0); /* the first flush never syncs */
  EXPECT_EQ(freed, 0);
  ASSERT_OK(cm_device_flush(dev, 0, NULL));
  EXPECT_EQ(stores[0]->synced, 1);
  EXPECT_EQ(freed, 1);
  cm_device_destroy(dev);
}

int main(void) {
  CM_RUN(pinned_until_event_completes);
  CM_RUN(sync_releases_pins);
  CM_RUN(wait_decision);
  CM_RUN(direct_pool_cursor);
  CM_RUN(destroy_waits);
  CM_RUN(drop_queue_fences_are_events);
  return cm_test_finish();
}
