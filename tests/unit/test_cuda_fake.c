/*
 * test_cuda_fake.c - the CUDA storages (cubemem/cuda.h) on the strict fake
 * driver (tests/fakecuda/libfakecuda.so, loaded with dlopen): the driver
 * refuses what the real one refuses, and every test ends with no violation
 * and nothing held. Covered: sync/async allocation and the per-id free kind,
 * the dealloc queue and flush, zero-byte ids, OOM -> CM_EOOM vs other ->
 * CM_ESTORAGE, events with work in flight, virtual memory (granule-exact
 * reservations, whole mappings, aliases and the fake's
 * cuMemRetainAllocationHandle), pinned memory, feature probing (no VMM, no
 * memory pools), stream-handle reuse after destroy, peer access on a second
 * device, reference counting and context balance. Runs everywhere. The paths
 * without a driver and on a real GPU are in test_cuda.c.
 */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "cm_test.h"
#include "cubemem/cuda.h"
#include "cubemem/faulty.h"
#include "cubemem/memory.h"
#include "cubemem/ptr.h"
/* The event and VM ops are reached as the manager reaches them: through the
 * storage's ops table, read from the internal wrapper layout. */
#include "storage/storage_internal.h"

/* ===== the strict fake driver (tests/fakecuda/libfakecuda.so) ============= */

#include "../fakecuda/fakecuda.h"

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
enum {
  F_SUCCESS = 0,
  F_INVALID_VALUE = 1,
  F_OOM = 2,
  F_NO_DEVICE = 100,
  F_INVALID_CONTEXT = 201,
  F_INVALID_HANDLE = 400,
  F_NOT_READY = 600,
};

/* The fake is loaded once and shared with the storages (dlopen of the same
 * path returns the same handle); tests reach its control functions and a few
 * driver calls of their own (streams, contexts, work) through dlsym. */
static struct fk {
  void *lib;
  void (*reset)(void);
  fakecuda_config_t *(*config)(void);
  void (*counts)(fakecuda_counts_t *);
  uint64_t (*held)(void);
  const char *(*last)(void);
  size_t (*report)(char *, size_t);
  int (*launch)(void *, unsigned long long, size_t);
  CUresult (*stream_create)(void **, unsigned);
  CUresult (*stream_destroy)(void *);
  CUresult (*device_get)(int *, int);
  CUresult (*retain)(void **, int);
  CUresult (*release)(int);
  CUresult (*push)(void *);
  CUresult (*pop)(void **);
  CUresult (*mem_alloc)(CUdeviceptr *, size_t);
  CUresult (*mem_free)(CUdeviceptr);
  CUresult (*init)(unsigned);
  CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
  CUresult (*map)(CUdeviceptr, size_t, size_t, unsigned long long, unsigned long long);
  CUresult (*unmap)(CUdeviceptr, size_t);
  CUresult (*event_create)(void **, unsigned);
  CUresult (*event_destroy)(void *);
  CUresult (*free_async)(CUdeviceptr, void *);
  CUresult (*stream_sync)(void *);
  CUresult (*mem_create)(unsigned long long *, size_t, const void *, unsigned long long);
  CUresult (*mem_release)(unsigned long long);
  CUresult (*mem_retain)(unsigned long long *, void *);
  CUresult (*address_free)(CUdeviceptr, size_t);
  bool hide_async, hide_vm, hide_alloc, hide_retain;
} FK;

static void fk_load(void) {
  if (FK.lib) return;
  FK.lib = dlopen(CM_FAKECUDA_LIBRARY, RTLD_NOW | RTLD_LOCAL);
  if (!FK.lib) cm_test_fail(__FILE__, __LINE__, "cannot load %s: %s", CM_FAKECUDA_LIBRARY, dlerror());
  ASSERT(FK.lib != NULL);
#define FKSYM(field, name) *(void **)&FK.field = dlsym(FK.lib, name); ASSERT(FK.field != NULL)
  FKSYM(reset, "fakecuda_reset");
  FKSYM(config, "fakecuda_config");
  FKSYM(counts, "fakecuda_counts");
  FKSYM(held, "fakecuda_held");
  FKSYM(last, "fakecuda_last_violation");
  FKSYM(report, "fakecuda_report");
  FKSYM(launch, "fakecuda_launch");
  FKSYM(stream_create, "cuStreamCreate");
  FKSYM(stream_destroy, "cuStreamDestroy_v2");
  FKSYM(device_get, "cuDeviceGet");
  FKSYM(retain, "cuDevicePrimaryCtxRetain");
  FKSYM(release, "cuDevicePrimaryCtxRelease_v2");
  FKSYM(push, "cuCtxPushCurrent_v2");
  FKSYM(pop, "cuCtxPopCurrent_v2");
  FKSYM(mem_alloc, "cuMemAlloc_v2");
  FKSYM(mem_free, "cuMemFree_v2");
  FKSYM(init, "cuInit");
  FKSYM(reserve, "cuMemAddressReserve");
  FKSYM(map, "cuMemMap");
  FKSYM(unmap, "cuMemUnmap");
  FKSYM(event_create, "cuEventCreate");
  FKSYM(event_destroy, "cuEventDestroy_v2");
  FKSYM(free_async, "cuMemFreeAsync");
  FKSYM(stream_sync, "cuStreamSynchronize");
  FKSYM(mem_create, "cuMemCreate");
  FKSYM(mem_release, "cuMemRelease");
  FKSYM(mem_retain, "cuMemRetainAllocationHandle");
  FKSYM(address_free, "cuMemAddressFree");
#undef FKSYM
}

/* Fresh fake state with test defaults: one device of 64 MiB, 2 MiB granule. */
static fakecuda_config_t *fake_reset(void) {
  fk_load();
  FK.reset();
  FK.hide_async = FK.hide_vm = FK.hide_alloc = FK.hide_retain = false;
  fakecuda_config_t *c = FK.config();
  c->devices = 1;
  c->capacity = 64ull << 20;
  c->granularity = 2ull << 20;
  c->vmm = c->mempool = c->peer = 1;
  return c;
}

static fakecuda_counts_t fk_counts(void) {
  fakecuda_counts_t c;
  FK.counts(&c);
  return c;
}

/* No violation so far and (when `idle`) nothing held. */
static void fk_expect_clean(const char *file, int line, bool idle) {
  fakecuda_counts_t c = fk_counts();
  if (c.violations)
    cm_test_fail(file, line, "the fake driver saw %llu violation(s); last: %s",
                 (unsigned long long)c.violations, FK.last());
  if (idle && FK.held()) {
    char rep[4096];
    FK.report(rep, sizeof rep);
    cm_test_fail(file, line, "the fake driver still holds %llu object(s):\n%s",
                 (unsigned long long)FK.held(), rep);
  }
}
#define EXPECT_CLEAN() fk_expect_clean(__FILE__, __LINE__, true)
#define EXPECT_NO_VIOLATION() fk_expect_clean(__FILE__, __LINE__, false)

static void *fake_resolve(void *arg, const char *name) {
  (void)arg;
  if (FK.hide_async && strstr(name, "Async")) return NULL;
  if (FK.hide_vm && (strstr(name, "cuMemAddress") || strcmp(name, "cuMemMap") == 0)) return NULL;
  if (FK.hide_alloc && strcmp(name, "cuMemAlloc_v2") == 0) return NULL;
  if (FK.hide_retain && strcmp(name, "cuMemRetainAllocationHandle") == 0) return NULL;
  return dlsym(FK.lib, name);
}

static cm_cuda_device_t *fake_open_ordinal(int ordinal) {
  cm_cuda_device_t *dev = NULL;
  cm_diag_t d = {0};
  int rc = cm_cuda_device_open_resolver(fake_resolve, NULL, ordinal, &dev, &d);
  if (rc != CM_OK) cm_test_fail(__FILE__, __LINE__, "fake open: %s", d.message);
  return dev;
}
static cm_cuda_device_t *fake_open(void) { return fake_open_ordinal(0); }

/* Run `fn` with device `ordinal`'s primary context current (as a framework
 * thread would have it). */
static void *g_ctx[8];
static void ctx_enter(int ordinal) {
  int d = 0;
  ASSERT_OK(FK.device_get(&d, ordinal));
  ASSERT_OK(FK.retain(&g_ctx[ordinal], d));
  ASSERT_OK(FK.push(g_ctx[ordinal]));
}
static void ctx_leave(int ordinal) {
  int d = 0;
  void *c;
  ASSERT_OK(FK.pop(&c));
  ASSERT_OK(FK.device_get(&d, ordinal));
  ASSERT_OK(FK.release(d));
}
static void *fk_stream_create(void) {
  void *s = NULL;
  ctx_enter(0);
  EXPECT_OK(FK.stream_create(&s, 0));
  ctx_leave(0);
  return s;
}
static int fk_launch(int ordinal, void *stream, const void *p, size_t n) {
  ctx_enter(ordinal);
  int r = FK.launch(stream, (unsigned long long)(uintptr_t)p, n);
  ctx_leave(ordinal);
  return r;
}

static void test_fake_driver_refuses(void) {
  /* The fake itself: each rule the storages must follow is enforced. */
  fake_reset();
  const uint64_t G = 2u << 20;
  CUdeviceptr p = 0;
  EXPECT_EQ(FK.mem_alloc(&p, 100), 3); /* before cuInit: CUDA_ERROR_NOT_INITIALIZED */
  ASSERT_OK(FK.init(0));
  EXPECT_EQ(FK.mem_alloc(&p, 100), F_INVALID_CONTEXT); /* no current context */
  ctx_enter(0);
  EXPECT_EQ(FK.mem_alloc(&p, 0), F_INVALID_VALUE);
  EXPECT_EQ(FK.mem_alloc(&p, 128ull << 20), F_OOM); /* beyond capacity: not a violation */
  ASSERT_OK(FK.mem_alloc(&p, 1000));
  EXPECT_EQ(FK.mem_free(p + 8), F_INVALID_VALUE);    /* not the start of an allocation */
  EXPECT_EQ(FK.free_async(p, NULL), F_INVALID_VALUE); /* not stream-ordered memory */
  ASSERT_OK(FK.mem_free(p));
  EXPECT_EQ(FK.mem_free(p), F_INVALID_VALUE); /* twice */
  CUdeviceptr va = 0;
  EXPECT_EQ(FK.reserve(&va, G + 4096, 0, 0, 0), F_INVALID_VALUE); /* not a granule multiple */
  ASSERT_OK(FK.reserve(&va, 2 * G, 0, 0, 0));
  EXPECT_EQ(FK.map(va + 2 * G, G, 0, 0x1000, 0), F_INVALID_VALUE); /* no such handle */
  EXPECT_EQ(FK.unmap(va, G), F_INVALID_VALUE);                     /* nothing mapped */
  void *ev = NULL;
  ASSERT_OK(FK.event_create(&ev, 2));
  ASSERT_OK(FK.event_destroy(ev));
  EXPECT_EQ(FK.event_destroy(ev), F_INVALID_HANDLE); /* used after destroy */
  EXPECT_EQ(FK.launch((void *)0xdead0, va, 16), F_INVALID_HANDLE); /* not a stream */
  ctx_leave(0);
  void *c = NULL;
  EXPECT_EQ(FK.pop(&c), F_INVALID_CONTEXT); /* empty stack */
  EXPECT_EQ(FK.release(40), F_INVALID_CONTEXT); /* not retained */
  fakecuda_counts_t k = fk_counts();
  EXPECT_EQ(k.violations, 13);
  EXPECT_EQ(k.reservations, 1);
  EXPECT(FK.held() > 0); /* the reservation is still held: a teardown check would fail */
  char rep[4096];
  FK.report(rep, sizeof rep);
  EXPECT_CONTAINS(rep, "violations=13\n");
  EXPECT_CONTAINS(rep, "reservations=1\n");
  EXPECT_CONTAINS(rep, "cuEventDestroy");
  fake_reset();
}

static void test_fake_device_open(void) {
  fake_reset();
  cm_cuda_device_t *dev = fake_open();
  ASSERT(dev != NULL);
  EXPECT_EQ(cm_cuda_device_total_memory(dev), 64ull << 20);
  cm_device_props_t p = cm_cuda_device_props(dev);
  EXPECT_EQ(p.max_page_size, 16ull << 20);
  EXPECT_EQ(p.alignment, 512);
  EXPECT_STR(cm_cuda_device_name(dev), "Fake CUDA GPU 0");
  EXPECT_EQ(cm_cuda_device_ordinal(dev), 0);
  EXPECT(cm_cuda_device_has_vmm(dev));
  EXPECT(cm_cuda_device_has_mempool(dev));
  uint64_t fr = 0, tot = 0;
  EXPECT_OK(cm_cuda_device_mem_info(dev, &fr, &tot, NULL));
  EXPECT_EQ(tot, 64ull << 20);
  EXPECT_EQ(fr, 64ull << 20);
  EXPECT_EQ(fk_counts().retains, 1);
  cm_cuda_device_close(dev);
  EXPECT_EQ(fk_counts().releases, 1);
  EXPECT_CLEAN();

  /* the same through dlopen, as the CLI and the plugin load it */
  cm_diag_t d = {0};
  ASSERT_OK(cm_cuda_device_open_library(CM_FAKECUDA_LIBRARY, 0, &dev, &d));
  EXPECT_STR(cm_cuda_device_name(dev), "Fake CUDA GPU 0");
  cm_cuda_device_close(dev);
  EXPECT_CLEAN();
}

static void test_fake_open_failures(void) {
  cm_cuda_device_t *dev = NULL;
  cm_diag_t d = {0};
  fake_reset()->init_result = F_NO_DEVICE;
  EXPECT_STATUS(cm_cuda_device_open_resolver(fake_resolve, NULL, 0, &dev, &d), CM_ENODEV);
  EXPECT(dev == NULL);
  EXPECT_CONTAINS(d.message, "cuInit failed");
  EXPECT_CONTAINS(d.message, "CUDA_ERROR_NO_DEVICE");
  EXPECT_CONTAINS(d.message, "no CUDA-capable device is detected");
  EXPECT_EQ(d.native, F_NO_DEVICE);

  fake_reset();
  cm_diag_clear(&d);
  EXPECT_STATUS(cm_cuda_device_open_resolver(fake_resolve, NULL, 3, &dev, &d), CM_ENODEV);
  EXPECT_CONTAINS(d.message, "CUDA device 3 not found: the driver sees 1 device(s)");

  fake_reset();
  FK.hide_alloc = true;
  cm_diag_clear(&d);
  EXPECT_STATUS(cm_cuda_device_open_resolver(fake_resolve, NULL, 0, &dev, &d), CM_ENODEV);
  EXPECT_CONTAINS(d.message, "cuMemAlloc_v2 is missing");
  EXPECT_EQ(fk_counts().retains, 0);
  EXPECT_CLEAN();
}

static void test_fake_sync_storage(void) {
  fake_reset();
  cm_cuda_device_t *dev = fake_open();
  ASSERT(dev != NULL);
  cm_storage_t *st = NULL;
  ASSERT_OK(cm_cuda_storage_create(dev, NULL, CM_CUDA_SYNC, &st, NULL));
  EXPECT_STR(cm_storage_name(st), "cuda");
  uint64_t a = 0, b = 0, z = 0;
  ASSERT_OK(cm_storage_alloc(st, 1000, &a, NULL));
  ASSERT_OK(cm_storage_alloc(st, 4096, &b, NULL));
  ASSERT_OK(cm_storage_alloc(st, 0, &z, NULL)); /* no driver call for zero bytes */
  EXPECT(a != b && b != z && a != z);
  EXPECT_EQ(fk_counts().mem_alloc, 2);
  cm_resource_t r, r0;
  ASSERT_OK(cm_storage_get(st, a, 0, 1000, &r0, NULL));
  ASSERT_OK(cm_storage_get(st, a, 24, 100, &r, NULL));
  EXPECT(r0.addr != 0 && r0.addr % 512 == 0);
  EXPECT_EQ(r.addr, r0.addr + 24);
  EXPECT(r.host == NULL);
  EXPECT_EQ(r.size, 100);
  ASSERT_OK(cm_storage_get(st, z, 0, 0, &r, NULL));
  cm_diag_t d = {0};
  EXPECT_STATUS(cm_storage_get(st, 999, 0, 0, &r, &d), CM_EHANDLE);
  EXPECT_CONTAINS(d.message, "StorageId(999) in the cuda storage");
  EXPECT_STATUS(cm_storage_get(st, a, 900, 200, &r, NULL), CM_EINVAL);

  /* dealloc only queues; flush frees with the matching call */
  cm_storage_dealloc(st, a, 1000);
  cm_storage_dealloc(st, a, 0); /* a second dealloc of a queued id is ignored */
  cm_storage_dealloc(st, z, 0);
  cm_storage_dealloc(st, 12345, 0); /* unknown: ignored */
  EXPECT_EQ(fk_counts().mem_free, 0);
  cm_cuda_storage_counters_t c;
  cm_cuda_storage_counters(st, &c);
  EXPECT_EQ(c.pending, 2);
  EXPECT_EQ(c.sync_allocs, 2);
  EXPECT_EQ(c.vm_granularity, 2u << 20);
  ASSERT_OK(cm_storage_get(st, a, 0, 1000, &r, NULL)); /* still valid until flush */
  EXPECT_OK(cm_storage_flush(st));
  EXPECT_EQ(fk_counts().mem_free, 1);
  EXPECT_EQ(fk_counts().allocations, 1);
  EXPECT_STATUS(cm_storage_get(st, a, 0, 0, &r, NULL), CM_EHANDLE);
  cm_cuda_storage_counters(st, &c);
  EXPECT_EQ(c.pending, 0);
  EXPECT_OK(cm_storage_flush(st)); /* empty flush */

  cm_storage_stats_t ss;
  cm_storage_stats(st, &ss);
  EXPECT_EQ(ss.allocs, 3);
  EXPECT_EQ(ss.bytes_held, 4096);

  /* the device may be closed first: the storage holds a reference */
  cm_cuda_device_close(dev);
  EXPECT_EQ(fk_counts().releases, 0);
  cm_storage_destroy(st); /* frees b */
  fakecuda_counts_t k = fk_counts();
  EXPECT_EQ(k.allocations, 0);
  EXPECT_EQ(k.releases, 1);
  EXPECT_EQ(k.ctx_push, k.ctx_pop);
  EXPECT_CLEAN();
}

/* Copies (relocation): cuMemcpyDtoDAsync on the storage's stream, then an
 * event; the driver refuses a copy touching unmapped memory, the storage
 * refuses overlapping or out-of-bounds ranges before calling it. */
static void test_fake_copies(void) {
  fake_reset();
  cm_cuda_device_t *dev = fake_open();
  ASSERT(dev != NULL);
  cm_storage_t *st = NULL;
  ASSERT_OK(cm_cuda_storage_create(dev, NULL, CM_CUDA_SYNC, &st, NULL));
  ASSERT(cm_storage_can_copy(st));
  const uint64_t G = 2u << 20;
  uint64_t a = 0, b = 0, v = 0;
  ASSERT_OK(cm_storage_alloc(st, 4096, &a, NULL));
  ASSERT_OK(cm_storage_alloc(st, 4096, &b, NULL));
  ASSERT_OK(cm_storage_copy(st, b, 0, a, 0, 4096, NULL));
  ASSERT_OK(cm_storage_copy_wait(st, NULL));
  fakecuda_counts_t k = fk_counts();
  EXPECT_EQ(k.memcpy_dtod, 1);
  EXPECT_EQ(k.event_record, 1);
  EXPECT_EQ(k.event_sync, 1);
  EXPECT_EQ(k.pending_work, 0); /* the wait completed the copy */
  EXPECT_STATUS(cm_storage_copy(st, a, 100, a, 0, 1000, NULL), CM_EINVAL); /* overlapping */
  EXPECT_STATUS(cm_storage_copy(st, b, 4000, a, 0, 1000, NULL), CM_EINVAL); /* out of bounds */
  EXPECT_EQ(fk_counts().violations, 0); /* refused before the driver */
  /* a reservation with one granule mapped: a copy into the unmapped one
   * reaches the driver, which refuses it */
  ASSERT_OK(cm__storage_vm_reserve(st, 2 * G, &v, NULL));
  ASSERT_OK(cm__storage_vm_map(st, v, 0, G, G, NULL));
  ASSERT_OK(cm_storage_copy(st, v, 0, a, 0, 4096, NULL));
  cm_diag_t d = {0};
  EXPECT_STATUS(cm_storage_copy(st, v, G, a, 0, 4096, &d), CM_EINVAL);
  EXPECT_CONTAINS(d.message, "cuMemcpyDtoDAsync");
  EXPECT_EQ(fk_counts().violations, 1);
  ASSERT_OK(cm_storage_copy_wait(st, NULL));
  cm_storage_stats_t ss;
  cm_storage_stats(st, &ss);
  EXPECT_EQ(ss.copies, 2);
  EXPECT_EQ(ss.bytes_copied, 8192);
  EXPECT_EQ(ss.copy_waits, 2);
  EXPECT_EQ(ss.copy_failures, 3);
  ASSERT_OK(cm__storage_vm_unmap(st, v, 0, G, G, NULL));
  ASSERT_OK(cm__storage_vm_release(st, v, 2 * G, NULL));
  cm_storage_destroy(st);
  cm_cuda_device_close(dev);
  k = fk_counts();
  EXPECT_EQ(k.events, 0); /* the copy event went with the storage */
  EXPECT_EQ(FK.held(), 0);
  fake_reset();
}

static void test_fake_errors(void) {
  fakecuda_config_t *cfg = fake_reset();
  cm_cuda_device_t *dev = fake_open();
  ASSERT(dev != NULL);
  cm_storage_t *st = NULL;
  ASSERT_OK(cm_cuda_storage_create(dev, NULL, CM_CUDA_SYNC, &st, NULL));
  uint64_t id = 77;
  cm_diag_t d = {0};
  /* out of memory: CM_EOOM with the size, not CM_ETOOBIG */
  EXPECT_STATUS(cm_storage_alloc(st, 100ull << 20, &id, &d), CM_EOOM);
  EXPECT_STR(d.message, "device out of memory allocating 104857600 bytes");
  EXPECT_EQ(d.native, F_OOM);
  /* any other driver error: CM_ESTORAGE with the driver's name and text */
  cfg->force_alloc_error = F_INVALID_VALUE;
  cm_diag_clear(&d);
  EXPECT_STATUS(cm_storage_alloc(st, 100, &id, &d), CM_ESTORAGE);
  EXPECT_CONTAINS(d.message, "CUDA_ERROR_INVALID_VALUE");
  EXPECT_CONTAINS(d.message, "invalid argument");
  EXPECT_EQ(d.native, F_INVALID_VALUE);
  /* an unnamed code still produces a message */
  cfg->force_alloc_error = 9999;
  cm_diag_clear(&d);
  EXPECT_STATUS(cm_storage_alloc(st, 100, &id, &d), CM_ESTORAGE);
  EXPECT_CONTAINS(d.message, "CUresult 9999");
  cfg->force_alloc_error = 0;
  /* failures change nothing */
  cm_storage_stats_t ss;
  cm_storage_stats(st, &ss);
  EXPECT_EQ(ss.allocs, 0);
  EXPECT_EQ(ss.failed_allocs, 3);
  EXPECT_EQ(fk_counts().allocations, 0);
  ASSERT_OK(cm_storage_alloc(st, 100, &id, NULL));
  EXPECT_EQ(id, 1); /* failed calls minted no id */
  cm_storage_destroy(st);
  cm_cuda_device_close(dev);
  EXPECT_CLEAN();
}

static void test_fake_async_and_fallback(void) {
  fakecuda_config_t *cfg = fake_reset();
  cm_cuda_device_t *dev = fake_open();
  ASSERT(dev != NULL);
  void *stream = fk_stream_create();
  cm_storage_t *st = NULL;
  ASSERT_OK(cm_cuda_storage_create(dev, stream, CM_CUDA_ASYNC, &st, NULL));
  uint64_t a, b;
  ASSERT_OK(cm_storage_alloc(st, 5000, &a, NULL));
  EXPECT_EQ(fk_counts().mem_alloc_async, 1);
  cfg->async_fails = 1; /* the next async call fails: fall back to cuMemAlloc */
  ASSERT_OK(cm_storage_alloc(st, 6000, &b, NULL));
  EXPECT_EQ(fk_counts().mem_alloc, 1);
  cm_cuda_storage_counters_t c;
  cm_cuda_storage_counters(st, &c);
  EXPECT_EQ(c.async_allocs, 1);
  EXPECT_EQ(c.sync_allocs, 1);
  EXPECT_EQ(c.async_fallbacks, 1);
  EXPECT(c.async_supported);
  /* both OOM: CM_EOOM */
  uint64_t x;
  cfg->async_fails = 0;
  EXPECT_STATUS(cm_storage_alloc(st, 1ull << 30, &x, NULL), CM_EOOM);
  /* each pointer is freed the way it was allocated */
  cm_storage_dealloc(st, a, 5000);
  cm_storage_dealloc(st, b, 6000);
  EXPECT_OK(cm_storage_flush(st));
  fakecuda_counts_t k = fk_counts();
  EXPECT_EQ(k.mem_free_async, 1);
  EXPECT_EQ(k.mem_free, 1);
  EXPECT_EQ(k.allocations, 0);
  /* release with a live async allocation frees it and waits for the stream */
  ASSERT_OK(cm_storage_alloc(st, 7000, &a, NULL));
  uint64_t syncs = fk_counts().stream_sync;
  cm_storage_destroy(st);
  EXPECT_EQ(fk_counts().allocations, 0);
  EXPECT_EQ(fk_counts().stream_sync, syncs + 1);
  cm_cuda_device_close(dev);
  EXPECT_OK(FK.stream_destroy(stream));
  EXPECT_CLEAN();

  /* a driver without the stream-ordered API: every allocation falls back */
  fake_reset();
  FK.hide_async = true;
  dev = fake_open();
  ASSERT(dev != NULL);
  ASSERT_OK(cm_cuda_storage_create(dev, NULL, CM_CUDA_ASYNC, &st, NULL));
  ASSERT_OK(cm_storage_alloc(st, 100, &a, NULL));
  cm_cuda_storage_counters(st, &c);
  EXPECT_EQ(c.async_fallbacks, 1);
  EXPECT(!c.async_supported);
  EXPECT_EQ(fk_counts().mem_alloc, 1);
  cm_storage_destroy(st);
  cm_cuda_device_close(dev);
  EXPECT_CLEAN();
}

static void test_fake_feature_probing(void) {
  /* A device without memory pools: async storages never call cuMemAllocAsync
   * (the strict driver would count a violation). */
  fakecuda_config_t *cfg = fake_reset();
  cfg->mempool = 0;
  cm_cuda_device_t *dev = fake_open();
  ASSERT(dev != NULL);
  EXPECT(!cm_cuda_device_has_mempool(dev));
  EXPECT(cm_cuda_device_has_vmm(dev));
  cm_storage_t *st = NULL;
  ASSERT_OK(cm_cuda_storage_create(dev, NULL, CM_CUDA_ASYNC, &st, NULL));
  uint64_t a;
  ASSERT_OK(cm_storage_alloc(st, 4096, &a, NULL));
  EXPECT_EQ(fk_counts().mem_alloc, 1);
  EXPECT_EQ(fk_counts().mem_alloc_async, 0);
  cm_storage_destroy(st);
  cm_cuda_device_close(dev);
  EXPECT_CLEAN();

  /* A device without virtual memory management: no VM support, and the
   * default layout still serves allocations from whole cuMemAlloc pages. */
  cfg = fake_reset();
  cfg->vmm = 0;
  cfg->capacity = 1ull << 30;
  dev = fake_open();
  ASSERT(dev != NULL);
  EXPECT(!cm_cuda_device_has_vmm(dev));
  ASSERT_OK(cm_cuda_storage_create(dev, NULL, CM_CUDA_SYNC, &st, NULL));
  EXPECT(!cm_storage_has_vm(st));
  cm_diag_t d = {0};
  uint64_t id;
  EXPECT_STATUS(st->ops->vm_reserve(st->ctx, 2u << 20, &id, &d), CM_ENOTSUP);
  cm_storage_destroy(st);
  cm_cuda_factory_t fac = {dev, CM_CUDA_SYNC};
  cm_ptr_config_t pc;
  cm_ptr_config_init(&pc);
  pc.factory = cm_cuda_storage_factory;
  pc.factory_arg = &fac;
  pc.props = cm_cuda_device_props(dev);
  cm_ptr_allocator_t *pa = NULL;
  ASSERT_OK(cm_ptr_allocator_create(&pc, &pa, &d));
  void *p[8];
  for (int i = 0; i < 8; i++) ASSERT_OK(cm_ptr_alloc(pa, (uint64_t)(i + 1) << 20, NULL, &p[i], &d));
  EXPECT(fk_counts().mem_alloc > 0);
  EXPECT_EQ(fk_counts().create, 0);
  for (int i = 0; i < 8; i++) EXPECT_OK(cm_ptr_free(pa, p[i], NULL));
  cm_ptr_allocator_destroy(pa);
  cm_cuda_device_close(dev);
  EXPECT_CLEAN();
}

static void test_fake_old_driver_attributes(void) {
  /* A driver that predates both attributes answers CUDA_ERROR_INVALID_VALUE:
   * the device still opens, without VMM and memory pools. */
  fake_reset()->attribute_limit = 100;
  cm_cuda_device_t *dev = fake_open();
  ASSERT(dev != NULL);
  EXPECT(!cm_cuda_device_has_vmm(dev));
  EXPECT(!cm_cuda_device_has_mempool(dev));
  cm_storage_t *st = NULL;
  ASSERT_OK(cm_cuda_storage_create(dev, NULL, CM_CUDA_ASYNC, &st, NULL));
  EXPECT(!cm_storage_has_vm(st));
  uint64_t a;
  ASSERT_OK(cm_storage_alloc(st, 4096, &a, NULL));
  EXPECT_EQ(fk_counts().mem_alloc, 1);
  cm_storage_destroy(st);
  cm_cuda_device_close(dev);
  EXPECT_CLEAN();
}

static void test_fake_event_ops(void) {
  fake_reset();
  cm_cuda_device_t *dev = fake_open();
  ASSERT(dev != NULL);
  void *stream = fk_stream_create();
  cm_storage_t *st = NULL;
  ASSERT_OK(cm_cuda_storage_create(dev, stream, CM_CUDA_SYNC, &st, NULL));
  const cm_storage_ops_t *ops = st->ops;
  ASSERT(ops->event_record && ops->event_query && ops->event_sync && ops->event_destroy);
  uint64_t id;
  cm_resource_t r;
  ASSERT_OK(cm_storage_alloc(st, 4096, &id, NULL));
  ASSERT_OK(cm_storage_get(st, id, 0, 4096, &r, NULL));
  EXPECT_OK(fk_launch(0, stream, (void *)(uintptr_t)r.addr, 4096)); /* work in flight */
  void *ev = NULL;
  ASSERT_OK(ops->event_record(st->ctx, &ev, NULL));
  EXPECT(ev != NULL);
  EXPECT_EQ(ops->event_query(st->ctx, ev), 0); /* pending */
  EXPECT_OK(ops->event_sync(st->ctx, ev));
  EXPECT_EQ(ops->event_query(st->ctx, ev), 1); /* complete */
  ops->event_destroy(st->ctx, ev);
  fakecuda_counts_t k = fk_counts();
  EXPECT_EQ(k.events, 0);
  EXPECT_EQ(k.event_create, 1);
  EXPECT_EQ(k.pending_work, 0);
  cm_storage_destroy(st);
  cm_cuda_device_close(dev);
  EXPECT_OK(FK.stream_destroy(stream));
  EXPECT_CLEAN();
}

static void test_fake_vm(void) {
  fakecuda_config_t *cfg = fake_reset();
  cm_cuda_device_t *dev = fake_open();
  ASSERT(dev != NULL);
  void *stream = fk_stream_create();
  cm_storage_t *st = NULL;
  ASSERT_OK(cm_cuda_storage_create(dev, stream, CM_CUDA_SYNC, &st, NULL));
  ASSERT(cm_storage_has_vm(st));
  const cm_storage_ops_t *ops = st->ops;
  void *c = st->ctx;
  const uint64_t G = 2u << 20;
  EXPECT_EQ(ops->vm_granularity(c), G);
  uint64_t id = 0;
  cm_diag_t d = {0};
  /* cuMemAddressReserve takes granule multiples only: no rounding up */
  EXPECT_STATUS(ops->vm_reserve(c, 5u << 20, &id, &d), CM_EINVAL);
  EXPECT_CONTAINS(d.message, "not a non-zero multiple of the granule");
  EXPECT_STATUS(ops->vm_reserve(c, 0, &id, &d), CM_EINVAL);
  EXPECT_EQ(fk_counts().address_reserve, 0);
  ASSERT_OK(ops->vm_reserve(c, 3 * G, &id, NULL));
  EXPECT_EQ(fk_counts().address_reserve, 1);
  cm_resource_t r, base;
  ASSERT_OK(cm_storage_get(st, id, 0, 3 * G, &base, NULL));
  ASSERT_OK(cm_storage_get(st, id, G, G, &r, NULL));
  EXPECT_EQ(r.addr, base.addr + G);
  EXPECT_EQ(base.addr % G, 0);
  ASSERT_OK(ops->vm_map(c, id, 0, G, G, NULL));
  ASSERT_OK(ops->vm_map(c, id, 2 * G, G, G, NULL));
  EXPECT_EQ(fk_counts().map, 2);
  EXPECT_EQ(fk_counts().set_access, 2);
  EXPECT_EQ(fk_counts().used[0], 2 * G);
  EXPECT_OK(fk_launch(0, stream, (void *)(uintptr_t)base.addr, (size_t)G)); /* accessible */
  EXPECT_STATUS(ops->vm_map(c, id, 1000, G, G, &d), CM_EINVAL);     /* misaligned */
  EXPECT_STATUS(ops->vm_map(c, id, 0, G, G, &d), CM_EINVAL);        /* already mapped */
  EXPECT_STATUS(ops->vm_map(c, id, 2 * G, 2 * G, G, &d), CM_EINVAL); /* past the end */
  EXPECT_STATUS(ops->vm_map(c, 4242, 0, G, G, &d), CM_EHANDLE);
  cfg->capacity = 2 * G; /* physical memory exhausted */
  cm_diag_clear(&d);
  EXPECT_STATUS(ops->vm_map(c, id, G, G, G, &d), CM_EOOM);
  EXPECT_CONTAINS(d.message, "device out of memory mapping 2097152 bytes");
  cfg->capacity = 64u << 20;
  uint64_t syncs = fk_counts().stream_sync;
  ASSERT_OK(ops->vm_unmap(c, id, 0, G, G, NULL)); /* a whole mapping: goes, after the stream */
  EXPECT_EQ(fk_counts().stream_sync, syncs + 1);
  EXPECT_EQ(fk_counts().unmap, 1);
  EXPECT_EQ(fk_counts().release, 1);
  EXPECT_STATUS(ops->vm_unmap(c, id, 2 * G, G / 2, G / 2, NULL), CM_EINVAL); /* partial: refused */
  EXPECT_EQ(fk_counts().unmap, 1);
  ASSERT_OK(ops->vm_map(c, id, 0, 2 * G, G, NULL)); /* two objects, one set-access call */
  EXPECT_EQ(fk_counts().create, 4);
  EXPECT_EQ(fk_counts().set_access, 3);
  EXPECT_STATUS(ops->vm_release(c, id, NULL), CM_EINVAL); /* mappings remain */
  EXPECT_STATUS(ops->vm_unmap(c, id, 0, 2 * G, 2 * G, NULL), CM_EINVAL); /* not 2G pieces */
  ASSERT_OK(ops->vm_unmap(c, id, 0, 3 * G, G, NULL));
  ASSERT_OK(ops->vm_release(c, id, NULL));
  fakecuda_counts_t k = fk_counts();
  EXPECT_EQ(k.unmap, 4);
  EXPECT_EQ(k.release, 4);
  EXPECT_EQ(k.create, 4);
  EXPECT_EQ(k.address_free, 1);
  EXPECT_EQ(k.used[0], 0);
  EXPECT_STATUS(cm_storage_get(st, id, 0, 0, &r, NULL), CM_EHANDLE);
  /* a live reservation is released with the storage */
  ASSERT_OK(ops->vm_reserve(c, G, &id, NULL));
  ASSERT_OK(ops->vm_map(c, id, 0, G, G, NULL));
  cm_storage_destroy(st);
  k = fk_counts();
  EXPECT_EQ(k.address_free, 2);
  EXPECT_EQ(k.create, k.release);
  cm_cuda_device_close(dev);
  EXPECT_OK(FK.stream_destroy(stream));
  EXPECT_CLEAN();

  /* a driver without the VM API: no VM, plain allocations still work */
  fake_reset();
  FK.hide_vm = true;
  dev = fake_open();
  ASSERT(dev != NULL);
  ASSERT_OK(cm_cuda_storage_create(dev, NULL, CM_CUDA_SYNC, &st, NULL));
  EXPECT(!cm_storage_has_vm(st));
  cm_diag_clear(&d);
  EXPECT_STATUS(st->ops->vm_reserve(st->ctx, G, &id, &d), CM_ENOTSUP);
  cm_storage_destroy(st);
  cm_cuda_device_close(dev);
  EXPECT_CLEAN();
}

/* A map of several pieces that runs out of memory part way, below existing
 * mappings: the pieces it mapped are undone and the records of the mappings
 * above stay exact, so they unmap (and nothing leaks) afterwards. */
static void test_fake_vm_partial_map(void) {
  fakecuda_config_t *cfg = fake_reset();
  cm_cuda_device_t *dev = fake_open();
  ASSERT(dev != NULL);
  void *stream = fk_stream_create();
  cm_storage_t *st = NULL;
  ASSERT_OK(cm_cuda_storage_create(dev, stream, CM_CUDA_SYNC, &st, NULL));
  const cm_storage_ops_t *ops = st->ops;
  void *c = st->ctx;
  const uint64_t G = 2u << 20;
  uint64_t id = 0;
  ASSERT_OK(ops->vm_reserve(c, 16 * G, &id, NULL));
  ASSERT_OK(ops->vm_map(c, id, 8 * G, G, G, NULL));  /* above the insertion point */
  ASSERT_OK(ops->vm_map(c, id, 10 * G, G, G, NULL));
  ASSERT_OK(ops->vm_map(c, id, 12 * G, 2 * G, G, NULL));
  cfg->capacity = 6 * G; /* 4 held: a map of 5 pieces fails after 2 */
  cm_diag_t d = {0};
  EXPECT_STATUS(ops->vm_map(c, id, 0, 5 * G, G, &d), CM_EOOM);
  fakecuda_counts_t k = fk_counts();
  EXPECT_EQ(k.create, 6u);   /* 4 + the 2 that fit */
  EXPECT_EQ(k.release, 2u);  /* ... undone */
  EXPECT_EQ(k.used[0], 4 * G);
  cfg->capacity = 64u << 20;
  /* the mappings above are still recorded exactly */
  ASSERT_OK(ops->vm_unmap(c, id, 8 * G, G, G, NULL));
  ASSERT_OK(ops->vm_unmap(c, id, 12 * G, 2 * G, G, NULL));
  ASSERT_OK(ops->vm_map(c, id, 0, 5 * G, G, NULL)); /* the range is free again */
  ASSERT_OK(ops->vm_unmap(c, id, 0, 5 * G, G, NULL));
  ASSERT_OK(ops->vm_unmap(c, id, 10 * G, G, G, NULL));
  ASSERT_OK(ops->vm_release(c, id, NULL));
  k = fk_counts();
  EXPECT_EQ(k.create, k.release);
  EXPECT_EQ(k.used[0], 0u);
  cm_storage_destroy(st);
  cm_cuda_device_close(dev);
  EXPECT_OK(FK.stream_destroy(stream));
  EXPECT_CLEAN();
}

/* A cuMemRelease that fails after its mapping went: the handle is kept and
 * released at the next map or unmap (or when the storage goes), so nothing
 * stays allocated; the failure is counted. */
static void test_fake_release_retried(void) {
  fakecuda_config_t *cfg = fake_reset();
  cm_cuda_device_t *dev = fake_open();
  ASSERT(dev != NULL);
  void *stream = fk_stream_create();
  cm_storage_t *st = NULL;
  ASSERT_OK(cm_cuda_storage_create(dev, stream, CM_CUDA_SYNC, &st, NULL));
  const cm_storage_ops_t *ops = st->ops;
  void *c = st->ctx;
  const uint64_t G = 2u << 20;
  uint64_t id = 0;
  ASSERT_OK(ops->vm_reserve(c, 8 * G, &id, NULL));
  ASSERT_OK(ops->vm_map(c, id, 0, 2 * G, G, NULL));
  cfg->fail_releases = 1;
  ASSERT_OK(ops->vm_unmap(c, id, 0, 2 * G, G, NULL)); /* unmapped; one release failed, then retried */
  fakecuda_counts_t k = fk_counts();
  EXPECT_EQ(k.mappings, 0u);
  EXPECT_EQ(k.handles, 0u); /* the retry at the end of the unmap released it */
  EXPECT_EQ(k.used[0], 0u);
  cfg->fail_releases = 2; /* fails at the unmap and at its retry: kept until the next map */
  ASSERT_OK(ops->vm_map(c, id, 0, G, G, NULL));
  ASSERT_OK(ops->vm_unmap(c, id, 0, G, G, NULL));
  EXPECT_EQ(fk_counts().handles, 1u);
  ASSERT_OK(ops->vm_map(c, id, 2 * G, G, G, NULL)); /* retried first */
  EXPECT_EQ(fk_counts().handles, 1u);                /* only the new one */
  cfg->fail_releases = 2;
  ASSERT_OK(ops->vm_unmap(c, id, 2 * G, G, G, NULL));
  EXPECT_EQ(fk_counts().handles, 1u);
  ASSERT_OK(ops->vm_release(c, id, NULL));
  cm_storage_destroy(st); /* released when the storage goes */
  k = fk_counts();
  EXPECT_EQ(k.handles, 0u);
  EXPECT_EQ(k.create, k.release);
  cm_cuda_device_close(dev);
  EXPECT_OK(FK.stream_destroy(stream));
  EXPECT_CLEAN();
}

/* The fake's cuMemRetainAllocationHandle, as the driver documents it: any
 * address inside a live mapping gives the handle mapped there with one more
 * reference; an address no mapping covers is refused; one object mapped at
 * two addresses counts once, and its memory goes only when every reference
 * is released and every mapping of it is gone. */
static void test_fake_retain_handle(void) {
  fake_reset();
  const uint64_t G = 2u << 20;
  ASSERT_OK(FK.init(0));
  struct {
    int type, handle_types, loc_type, loc_id;
    void *win32;
    unsigned char flags[8];
  } prop = {.type = 1, .loc_type = 1, .loc_id = 0}; /* PINNED on device 0 */
  CUdeviceptr va = 0;
  ASSERT_OK(FK.reserve(&va, 4 * G, 0, 0, 0));
  unsigned long long h = 0, r = 0, r2 = 0;
  ASSERT_OK(FK.mem_create(&h, (size_t)G, &prop, 0));
  ASSERT_OK(FK.map(va, G, 0, h, 0));
  EXPECT_EQ(fk_counts().handles, 1);
  ASSERT_OK(FK.mem_retain(&r, (void *)(uintptr_t)(va + 12345))); /* any address of the mapping */
  EXPECT_EQ(r, h);
  EXPECT_EQ(fk_counts().handles, 2); /* one more reference */
  EXPECT_EQ(fk_counts().mem_retain, 1);
  EXPECT_EQ(FK.mem_retain(&r2, (void *)(uintptr_t)(va + G)), F_INVALID_VALUE); /* not mapped */
  EXPECT_EQ(FK.mem_retain(&r2, (void *)(uintptr_t)(va + 4 * G + 1)), F_INVALID_VALUE);
  EXPECT_EQ(fk_counts().violations, 2);
  EXPECT_CONTAINS(FK.last(), "no mapping covers the address");
  ASSERT_OK(FK.map(va + 2 * G, G, 0, r, 0)); /* the same object at a second address */
  fakecuda_counts_t k = fk_counts();
  EXPECT_EQ(k.mappings, 2);
  EXPECT_EQ(k.used[0], G); /* counted once */
  ASSERT_OK(FK.mem_release(h)); /* cuMemCreate's reference */
  ASSERT_OK(FK.mem_release(r)); /* the retained one */
  k = fk_counts();
  EXPECT_EQ(k.handles, 0);
  EXPECT_EQ(k.used[0], G); /* still mapped twice: the memory stays */
  EXPECT_EQ(FK.mem_release(h), F_INVALID_VALUE); /* no reference left */
  ASSERT_OK(FK.unmap(va, G));
  EXPECT_EQ(fk_counts().used[0], G); /* the second mapping keeps it */
  ASSERT_OK(FK.mem_retain(&r2, (void *)(uintptr_t)(va + 3 * G - 1))); /* through that mapping */
  EXPECT_EQ(r2, h);
  ASSERT_OK(FK.mem_release(r2));
  ASSERT_OK(FK.unmap(va + 2 * G, G)); /* the last mapping: the memory goes */
  k = fk_counts();
  EXPECT_EQ(k.used[0], 0);
  EXPECT_EQ(k.mappings, 0);
  EXPECT_EQ(k.handles, 0);
  EXPECT_EQ(FK.map(va, G, 0, h, 0), F_INVALID_VALUE); /* the handle is gone */
  ASSERT_OK(FK.address_free(va, 4 * G));
  EXPECT_EQ(fk_counts().violations, 4);
  EXPECT_EQ(FK.held(), 0);
  fake_reset();
}

/* Aliases (storage.h's vm_alias) on the fake driver, through the wrapper as
 * the manager calls them: retain + map per object and one set-access, no
 * create, no memory; the contract's refusals with no driver call; an unmap
 * of aliases releases nothing; teardown with aliases live; a release of the
 * retained reference that fails is retried; a set-access failure undoes the
 * pieces mapped; a driver without cuMemRetainAllocationHandle gives a
 * storage without aliases. */
static void test_fake_aliases(void) {
  fakecuda_config_t *cfg = fake_reset();
  cfg->devices = 2;
  cm_cuda_device_t *dev = fake_open();
  ASSERT(dev != NULL);
  void *stream = fk_stream_create();
  cm_storage_t *st = NULL;
  ASSERT_OK(cm_cuda_storage_create(dev, stream, CM_CUDA_SYNC, &st, NULL));
  ASSERT(cm__storage_has_alias(st));
  const uint64_t G = 2u << 20;
  uint64_t a = 0, b = 0;
  ASSERT_OK(cm__storage_vm_reserve(st, 4 * G, &a, NULL));
  ASSERT_OK(cm__storage_vm_reserve(st, 4 * G, &b, NULL));
  ASSERT_OK(cm__storage_vm_map(st, a, 0, 2 * G, G, NULL));
  ASSERT_OK(cm__storage_vm_map(st, b, 2 * G, G, G, NULL));
  cm_resource_t ra, rb;
  ASSERT_OK(cm_storage_get(st, a, 0, 4 * G, &ra, NULL));
  ASSERT_OK(cm_storage_get(st, b, 0, 4 * G, &rb, NULL));
  fakecuda_counts_t k0 = fk_counts();
  cm_storage_stats_t s0, s1;
  cm_storage_stats(st, &s0);

  ASSERT_OK(cm__storage_vm_alias(st, b, 0, a, 0, 2 * G, G, NULL));
  fakecuda_counts_t k = fk_counts();
  EXPECT_EQ(k.mem_retain - k0.mem_retain, 2);
  EXPECT_EQ(k.map - k0.map, 2);
  EXPECT_EQ(k.set_access - k0.set_access, 1);
  EXPECT_EQ(k.create, k0.create);
  EXPECT_EQ(k.release - k0.release, 2); /* the retained references, dropped at once */
  EXPECT_EQ(k.handles, 3);              /* the three objects' own references */
  EXPECT_EQ(k.used[0], 3 * G);          /* no new memory */
  EXPECT_EQ(k.mappings, 5);
  cm_storage_stats(st, &s1);
  EXPECT_EQ(s1.map_calls - s0.map_calls, 2);
  EXPECT_EQ(s1.set_access - s0.set_access, 1);
  EXPECT_EQ(s1.creates, s0.creates);
  EXPECT_EQ(s1.bytes_held, 3 * G);
  /* the alias is accessible from the device; work on it is waited for at unalias */
  EXPECT_OK(fk_launch(0, stream, (void *)(uintptr_t)rb.addr, (size_t)(2 * G)));

  /* the contract's refusals: no driver call, nothing changed */
  cm_diag_t d;
  cm_diag_clear(&d);
  EXPECT_STATUS(cm__storage_vm_unmap(st, a, 0, G, G, &d), CM_EINVAL);
  EXPECT_CONTAINS(d.message, "has an alias at [0, +2097152)");
  cm_diag_clear(&d);
  EXPECT_STATUS(cm__storage_vm_unalias(st, b, G, 2 * G, G, &d), CM_EINVAL);
  EXPECT_CONTAINS(d.message, "one kind");
  cm_diag_clear(&d);
  EXPECT_STATUS(cm__storage_vm_alias(st, a, 2 * G, b, 0, G, G, &d), CM_EINVAL);
  EXPECT_CONTAINS(d.message, "itself an alias");
  EXPECT_STATUS(cm__storage_vm_alias(st, b, G, a, 0, G, G, NULL), CM_EINVAL); /* dst mapped */
  EXPECT_STATUS(cm__storage_vm_alias(st, a, 2 * G, a, 0, G, 2 * G, NULL), CM_EINVAL); /* pieces */
  EXPECT_STATUS(cm__storage_vm_alias(st, a, G / 2, a, 0, G, G, NULL), CM_EINVAL); /* unaligned */
  EXPECT_STATUS(cm__storage_vm_alias(st, 4242, 0, a, 0, G, G, NULL), CM_EHANDLE);
  EXPECT_STATUS(cm__storage_vm_release(st, b, 4 * G, NULL), CM_EINVAL);
  fakecuda_counts_t k1 = fk_counts();
  EXPECT_EQ(k1.map, k.map);
  EXPECT_EQ(k1.unmap, k.unmap);
  EXPECT_EQ(k1.mem_retain, k.mem_retain);
  EXPECT_EQ(k1.mappings, k.mappings);
  EXPECT_NO_VIOLATION();

  /* unaliasing: an unmap per object after the stream, no release, no bytes */
  uint64_t syncs = k1.stream_sync;
  ASSERT_OK(cm__storage_vm_unalias(st, b, 0, 2 * G, G, NULL));
  k = fk_counts();
  EXPECT_EQ(k.stream_sync, syncs + 1);
  EXPECT_EQ(k.unmap - k1.unmap, 2);
  EXPECT_EQ(k.release, k1.release);
  EXPECT_EQ(k.used[0], 3 * G);
  EXPECT_EQ(cm_storage_bytes_held(st), 3 * G);
  ASSERT_OK(cm__storage_vm_unmap(st, a, 0, 2 * G, G, NULL)); /* free to go now */
  EXPECT_EQ(fk_counts().used[0], G);

  /* a release of the retained reference that fails: the alias stands, the
   * reference is released again at the next unmap */
  ASSERT_OK(cm__storage_vm_map(st, a, 0, G, G, NULL));
  cfg->fail_releases = 1;
  ASSERT_OK(cm__storage_vm_alias(st, a, 3 * G, a, 0, G, G, NULL));
  cm_cuda_storage_counters_t cc;
  cm_cuda_storage_counters(st, &cc);
  EXPECT_EQ(cc.free_errors, 1);
  EXPECT_EQ(fk_counts().handles, 3); /* two objects' references and the kept one */
  ASSERT_OK(cm__storage_vm_unalias(st, a, 3 * G, G, G, NULL));
  EXPECT_EQ(fk_counts().handles, 2); /* retried */

  /* a set-access that fails (device 1 granted access, then unreachable):
   * the pieces mapped are unmapped, nothing else moves */
  ASSERT_OK(cm_cuda_device_enable_peer_access(dev, 1, NULL));
  cfg->peer = 0;
  k0 = fk_counts();
  cm_storage_stats(st, &s0);
  cm_diag_clear(&d);
  EXPECT_STATUS(cm__storage_vm_alias(st, b, 0, a, 0, G, G, &d), CM_ESTORAGE);
  EXPECT_CONTAINS(d.message, "cuMemSetAccess");
  k = fk_counts();
  EXPECT_EQ(k.violations, 1); /* the driver's refusal, caused on purpose */
  EXPECT_EQ(k.map - k0.map, 1);
  EXPECT_EQ(k.unmap - k0.unmap, 1);
  EXPECT_EQ(k.mappings, k0.mappings);
  EXPECT_EQ(k.handles, k0.handles);
  EXPECT_EQ(k.used[0], k0.used[0]);
  cm_storage_stats(st, &s1);
  EXPECT_EQ(s1.map_calls, s0.map_calls);
  EXPECT_EQ(s1.failed_allocs, s0.failed_allocs + 1);
  cfg->peer = 1;
  ASSERT_OK(cm__storage_vm_unmap(st, a, 0, G, G, NULL)); /* no alias was left behind */

  /* the storage goes with aliases live: everything is unmapped and released */
  ASSERT_OK(cm__storage_vm_map(st, a, 0, 2 * G, 2 * G, NULL));
  ASSERT_OK(cm__storage_vm_alias(st, b, 0, a, 0, 2 * G, 2 * G, NULL));
  ASSERT_OK(cm__storage_vm_alias(st, a, 2 * G, a, 0, 2 * G, 2 * G, NULL));
  EXPECT_EQ(fk_counts().used[0], 3 * G);
  cm_storage_destroy(st);
  k = fk_counts();
  EXPECT_EQ(k.create, k.release - k.mem_retain); /* every object and every retained reference */
  EXPECT_EQ(k.used[0], 0);
  cm_cuda_device_close(dev);
  EXPECT_OK(FK.stream_destroy(stream));
  EXPECT_EQ(fk_counts().violations, 1);
  EXPECT_EQ(FK.held(), 0);

  /* a driver without cuMemRetainAllocationHandle: VM, but no aliases */
  fake_reset();
  FK.hide_retain = true;
  dev = fake_open();
  ASSERT(dev != NULL);
  ASSERT_OK(cm_cuda_storage_create(dev, NULL, CM_CUDA_SYNC, &st, NULL));
  EXPECT(cm_storage_has_vm(st));
  EXPECT(!cm__storage_has_alias(st));
  cm_cuda_storage_counters(st, &cc);
  EXPECT_EQ(cc.vm_granularity, G);
  cm_diag_clear(&d);
  EXPECT_STATUS(cm__storage_vm_alias(st, 1, 0, 1, 0, G, G, &d), CM_ENOTSUP);
  cm_storage_destroy(st);
  cm_cuda_device_close(dev);
  EXPECT_CLEAN();
}

/* Time by kind of driver call (cm_storage_stats_t.call_ns): measured only
 * while timing is on, each call's time in its own kind. The fake's cuMemCreate
 * is made slow, so its time must land in `creates` and nowhere else. */
static void test_fake_call_times(void) {
  fakecuda_config_t *cfg = fake_reset();
  const uint64_t delay = 4000000; /* 4 ms per cuMemCreate */
  cm_cuda_device_t *dev = fake_open();
  ASSERT(dev != NULL);
  cm_storage_t *st = NULL;
  ASSERT_OK(cm_cuda_storage_create(dev, NULL, CM_CUDA_SYNC, &st, NULL));
  const uint64_t G = 2u << 20;
  uint64_t id = 0;
  cm_storage_stats_t s;
  cm_storage_set_timing(st, false); /* a CUDA storage times from its creation: off first */
  ASSERT_OK(cm__storage_vm_reserve(st, 8 * G, &id, NULL));
  cfg->create_delay_ns = delay;
  ASSERT_OK(cm__storage_vm_map(st, id, 0, G, G, NULL)); /* timing off: nothing measured */
  cm_storage_stats(st, &s);
  EXPECT_EQ(s.call_ns.creates, 0);
  EXPECT_EQ(s.call_ns.maps + s.call_ns.set_access + s.call_ns.reserves, 0);

  cm_storage_set_timing(st, true);
  ASSERT_OK(cm__storage_vm_map(st, id, G, 3 * G, G, NULL)); /* 3 creates + 3 maps + 1 access */
  cm_storage_stats(st, &s);
  EXPECT(s.call_ns.creates >= 3 * delay);
  EXPECT(s.call_ns.maps < delay); /* the slow call's time went to its own kind only */
  EXPECT(s.call_ns.set_access < delay);
  EXPECT(s.call_ns.creates + s.call_ns.maps + s.call_ns.set_access <= s.time_map_ns);
  EXPECT_EQ(s.call_ns.reserves, 0); /* reserved before timing was on */
  uint64_t creates = s.call_ns.creates;
  ASSERT_OK(cm__storage_vm_unmap(st, id, G, 3 * G, G, NULL));
  cm_storage_stats(st, &s);
  EXPECT_EQ(s.call_ns.creates, creates);
  EXPECT(s.call_ns.unmaps > 0 && s.call_ns.releases > 0 && s.call_ns.syncs > 0);
  EXPECT(s.call_ns.unmaps + s.call_ns.releases + s.call_ns.syncs <= s.time_unmap_ns);
  EXPECT_EQ(s.call_ns.mem_queries, 0);
  uint64_t f = 0, tot = 0;
  ASSERT_OK(cm_storage_mem_info(st, &f, &tot));
  cm_storage_stats(st, &s);
  EXPECT(s.call_ns.mem_queries > 0); /* cuMemGetInfo, with its context push and pop */

  cm_storage_set_timing(st, false); /* off again: slow creates are not counted */
  ASSERT_OK(cm__storage_vm_map(st, id, G, G, G, NULL));
  cm_storage_stats(st, &s);
  EXPECT_EQ(s.call_ns.creates, creates);
  ASSERT_OK(cm__storage_vm_unmap(st, id, 0, 2 * G, G, NULL));

  /* the fault-injecting decorator passes timing through to the CUDA storage */
  cm_storage_t *fs = NULL;
  ASSERT_OK(cm_storage_faulty_create(st, NULL, &fs));
  cm_storage_set_timing(fs, true);
  ASSERT_OK(cm__storage_vm_map(fs, id, 0, G, G, NULL));
  cm_storage_stats(fs, &s);
  EXPECT(s.call_ns.creates >= creates + delay);
  ASSERT_OK(cm__storage_vm_unmap(fs, id, 0, G, G, NULL));
  ASSERT_OK(cm__storage_vm_release(fs, id, 8 * G, NULL));
  cfg->create_delay_ns = 0;
  cm_storage_destroy(fs); /* destroys st with it */
  cm_cuda_device_close(dev);
  EXPECT_CLEAN();

  /* the simulated device calls no driver: timing on, no call times */
  cm_storage_t *sim = NULL;
  ASSERT_OK(cm_storage_sim_create(0, true, 0, &sim));
  cm_storage_set_timing(sim, true);
  ASSERT_OK(cm__storage_vm_reserve(sim, 4 * G, &id, NULL));
  ASSERT_OK(cm__storage_vm_map(sim, id, 0, 2 * G, G, NULL));
  cm_storage_stats(sim, &s);
  EXPECT_EQ(s.call_ns.creates + s.call_ns.maps + s.call_ns.set_access + s.call_ns.reserves, 0);
  EXPECT_EQ(s.creates, 2);
  cm_storage_destroy(sim);
}

static void test_fake_pinned(void) {
  fake_reset();
  cm_cuda_device_t *dev = fake_open();
  ASSERT(dev != NULL);
  fakecuda_config_t *cfg = FK.config();
  cfg->host_capacity = 64u << 20;
  cm_storage_t *st = NULL;
  ASSERT_OK(cm_cuda_pinned_storage_create(dev, &st, NULL));
  EXPECT_STR(cm_storage_name(st), "cuda-pinned");
  EXPECT(!cm_storage_has_vm(st));
  EXPECT_EQ(st->ops->alignment(st->ctx), 16);
  uint64_t a, z;
  ASSERT_OK(cm_storage_alloc(st, 100, &a, NULL));
  ASSERT_OK(cm_storage_alloc(st, 0, &z, NULL));
  EXPECT_EQ(fk_counts().mem_alloc_host, 1);
  cm_resource_t r;
  ASSERT_OK(cm_storage_get(st, a, 16, 84, &r, NULL));
  ASSERT(r.host != NULL);
  EXPECT_EQ((uint64_t)(uintptr_t)r.host, r.addr);
  EXPECT_EQ(((uintptr_t)r.host - 16) % 16, 0);
  memset(r.host, 0xab, 84); /* real host memory */
  cm_storage_dealloc(st, a, 100); /* immediate */
  EXPECT_EQ(fk_counts().mem_free_host, 1);
  EXPECT_STATUS(cm_storage_get(st, a, 0, 0, &r, NULL), CM_EHANDLE);
  cm_diag_t d = {0};
  EXPECT_STATUS(cm_storage_alloc(st, 1ull << 30, &a, &d), CM_EOOM);
  EXPECT_CONTAINS(d.message, "pinned host memory exhausted allocating 1073741824 bytes");
  ASSERT_OK(cm_storage_alloc(st, 64, &a, NULL));
  cm_storage_destroy(st); /* frees the live one */
  EXPECT_EQ(fk_counts().mem_free_host, 2);
  cm_cuda_device_close(dev);
  EXPECT_CLEAN();
}

static void test_fake_manager_and_ptr(void) {
  /* The whole stack over the strict driver: pointer allocator -> manager
   * -> CUDA storage, with the CUDA factory. */
  fakecuda_config_t *cfg = fake_reset();
  cfg->capacity = 1ull << 30;
  cm_cuda_device_t *dev = fake_open();
  ASSERT(dev != NULL);
  void *stream = fk_stream_create();
  cm_cuda_factory_t fac = {dev, CM_CUDA_ASYNC};
  cm_ptr_config_t pc;
  cm_ptr_config_init(&pc);
  pc.factory = cm_cuda_storage_factory;
  pc.factory_arg = &fac;
  pc.props = cm_cuda_device_props(dev);
  cm_ptr_allocator_t *pa = NULL;
  cm_diag_t d = {0};
  ASSERT_OK(cm_ptr_allocator_create(&pc, &pa, &d));
  void *p[16] = {0};
  for (int i = 0; i < 16; i++) {
    ASSERT_OK(cm_ptr_alloc(pa, (uint64_t)(i + 1) * 10000, stream, &p[i], &d));
    ASSERT(p[i] != NULL);
    EXPECT_OK(fk_launch(0, stream, p[i], (size_t)(i + 1) * 10000)); /* the memory is usable */
  }
  /* memory came from the driver: cuMemAllocAsync, or cuMemCreate/cuMemMap
   * when the layout's pools use the virtual-memory operations */
  fakecuda_counts_t k = fk_counts();
  EXPECT(k.mem_alloc_async + k.map > 0);
  EXPECT_EQ(k.mem_alloc, 0);
  cm_ptr_usage_t u;
  ASSERT_OK(cm_ptr_usage(pa, &u));
  EXPECT_EQ(u.live_pointers, 16);
  EXPECT(u.total.bytes_reserved >= u.total.bytes_in_use);
  EXPECT(u.storage_allocs > 0);
  for (int i = 0; i < 16; i++) EXPECT_OK(cm_ptr_free(pa, p[i], stream));
  EXPECT_STATUS(cm_ptr_free(pa, p[0], stream), CM_ENOTFOUND);
  cm_ptr_empty_cache(pa);
  ASSERT_OK(cm_ptr_usage(pa, &u));
  EXPECT_EQ(u.live_pointers, 0);
  cm_ptr_allocator_destroy(pa);
  EXPECT_EQ(fk_counts().allocations, 0);
  cm_cuda_device_close(dev);
  EXPECT_EQ(fk_counts().contexts_retained, 0);
  EXPECT_OK(FK.stream_destroy(stream));
  EXPECT_CLEAN();
}

/* Stream lifetime: work queued on a stream keeps reading its memory after
 * the program frees the memory and destroys the stream; the driver then
 * hands the same CUstream handle to a new stream. Without the identity
 * hooks the new stream reuses the freed (cached) memory at once. */
static uint64_t stream_reuse_scenario(bool hooks) {
  fakecuda_config_t *cfg = fake_reset();
  cfg->capacity = 1ull << 30;
  cm_cuda_device_t *dev = fake_open();
  if (!dev) return ~0ull;
  cm_cuda_factory_t fac = {dev, CM_CUDA_SYNC};
  cm_ptr_config_t pc;
  cm_ptr_config_init(&pc);
  pc.factory = cm_cuda_storage_factory;
  pc.factory_arg = &fac;
  pc.props = cm_cuda_device_props(dev);
  if (hooks) {
    pc.stream_identity = cm_cuda_stream_identity_fn;
    pc.stream_retire = cm_cuda_storage_retire_fn;
  }
  cm_ptr_allocator_t *pa = NULL;
  cm_diag_t d = {0};
  if (cm_ptr_allocator_create(&pc, &pa, &d) != CM_OK) return ~0ull;
  void *s1 = fk_stream_create();
  void *p = NULL, *q = NULL, *keep = NULL;
  EXPECT_OK(cm_ptr_alloc(pa, 1 << 20, s1, &p, &d));
  EXPECT_OK(cm_ptr_alloc(pa, 4096, s1, &keep, &d)); /* still live when s1 goes */
  EXPECT_OK(fk_launch(0, s1, p, 1 << 20)); /* a kernel still running on s1 ... */
  EXPECT_OK(cm_ptr_free(pa, p, s1));       /* ... when the program frees p */
  EXPECT_OK(FK.stream_destroy(s1));        /* and destroys s1 */
  void *s2 = fk_stream_create();
  EXPECT(s2 == s1); /* the driver reused the handle */
  EXPECT_OK(cm_ptr_alloc(pa, 1 << 20, s2, &q, &d));
  (void)fk_launch(0, s2, q, 1 << 20); /* a violation if q overlaps the pending work */
  uint64_t v = fk_counts().violations;
  EXPECT_OK(cm_ptr_free(pa, q, s2));
  EXPECT_OK(cm_ptr_free(pa, keep, s2)); /* found in the retired manager */
  cm_ptr_usage_t u;
  EXPECT_OK(cm_ptr_usage(pa, &u));
  EXPECT_EQ(u.live_pointers, 0);
  if (hooks) EXPECT_EQ(u.streams, 1); /* the retired manager is gone with its last pointer */
  cm_ptr_allocator_destroy(pa);
  cm_cuda_device_close(dev);
  EXPECT_OK(FK.stream_destroy(s2));
  return v;
}

static void test_fake_stream_reuse(void) {
  uint64_t v = stream_reuse_scenario(false); /* the hazard is real */
  EXPECT(v > 0);
  char rep[8192];
  FK.report(rep, sizeof rep);
  EXPECT_CONTAINS(rep, "while pending work of the destroyed stream");
  v = stream_reuse_scenario(true);
  EXPECT_EQ(v, 0);
  EXPECT(fk_counts().ctx_sync > 0); /* the retired storage waited for the context */
  EXPECT_CLEAN();
}

static void test_fake_record_stream(void) {
  /* p is allocated on s1, used by work on s2 (record_stream), freed on s1:
   * its memory must not serve s1 again before s2's work completes. */
  fakecuda_config_t *cfg = fake_reset();
  cfg->capacity = 1ull << 30;
  cm_cuda_device_t *dev = fake_open();
  ASSERT(dev != NULL);
  cm_cuda_factory_t fac = {dev, CM_CUDA_SYNC};
  cm_ptr_config_t pc;
  cm_ptr_config_init(&pc);
  pc.factory = cm_cuda_storage_factory;
  pc.factory_arg = &fac;
  pc.props = cm_cuda_device_props(dev);
  cm_ptr_allocator_t *pa = NULL;
  cm_diag_t d = {0};
  ASSERT_OK(cm_ptr_allocator_create(&pc, &pa, &d));
  void *s1 = fk_stream_create(), *s2 = fk_stream_create();
  void *p = NULL, *q = NULL;
  ASSERT_OK(cm_ptr_alloc(pa, 1 << 20, s1, &p, &d));
  EXPECT_STATUS(cm_ptr_record_stream(pa, p, s2), CM_ENOTSUP); /* no event hooks */
  cm_ptr_allocator_destroy(pa);

  pc.event_record = cm_cuda_event_record_fn;
  pc.event_query = cm_cuda_event_query_fn;
  pc.event_destroy = cm_cuda_event_destroy_fn;
  ASSERT_OK(cm_ptr_allocator_create(&pc, &pa, &d));
  ASSERT_OK(cm_ptr_alloc(pa, 1 << 20, s1, &p, &d));
  EXPECT_STATUS(cm_ptr_record_stream(pa, (char *)p + 1, s2), CM_ENOTFOUND);
  EXPECT_OK(cm_ptr_record_stream(pa, p, s1)); /* its own stream: no-op */
  EXPECT_OK(cm_ptr_record_stream(pa, p, s2));
  EXPECT_OK(cm_ptr_record_stream(pa, p, s2)); /* twice: once */
  EXPECT_OK(fk_launch(0, s2, p, 1 << 20));    /* s2 still reads p ... */
  EXPECT_OK(cm_ptr_free(pa, p, s1));          /* ... when it is freed */
  cm_ptr_usage_t u;
  ASSERT_OK(cm_ptr_usage(pa, &u));
  EXPECT_EQ(u.pending_frees, 1);
  EXPECT_EQ(u.live_pointers, 0);
  ASSERT_OK(cm_ptr_alloc(pa, 1 << 20, s1, &q, &d));
  EXPECT(q != p); /* s2's event is pending: p's memory is not reused */
  EXPECT_OK(cm_ptr_free(pa, q, s1));
  EXPECT_OK(FK.stream_sync(s2)); /* s2's work completes */
  ASSERT_OK(cm_ptr_alloc(pa, 1 << 20, s1, &q, &d));
  ASSERT_OK(cm_ptr_usage(pa, &u));
  EXPECT_EQ(u.pending_frees, 0); /* released at this allocation */
  EXPECT_OK(cm_ptr_free(pa, q, s1));
  /* a pointer recorded and still pending when the allocator goes */
  ASSERT_OK(cm_ptr_alloc(pa, 4096, s1, &p, &d));
  EXPECT_OK(cm_ptr_record_stream(pa, p, s2));
  EXPECT_OK(fk_launch(0, s2, p, 4096));
  EXPECT_OK(cm_ptr_free(pa, p, s1));
  EXPECT_OK(FK.stream_sync(s2));
  cm_ptr_allocator_destroy(pa);
  cm_cuda_device_close(dev);
  EXPECT_OK(FK.stream_destroy(s1));
  EXPECT_OK(FK.stream_destroy(s2));
  EXPECT_CLEAN();
}

static void test_fake_peer_access(void) {
  /* Two devices; memory of device 1, used from device 0 after a peer grant. */
  fakecuda_config_t *cfg = fake_reset();
  cfg->devices = 2;
  cm_cuda_device_t *dev1 = fake_open_ordinal(1);
  ASSERT(dev1 != NULL);
  EXPECT_EQ(cm_cuda_device_ordinal(dev1), 1);
  EXPECT_STR(cm_cuda_device_name(dev1), "Fake CUDA GPU 1");
  cm_storage_t *st = NULL;
  ASSERT_OK(cm_cuda_storage_create(dev1, NULL, CM_CUDA_SYNC, &st, NULL));
  const uint64_t G = 2u << 20;
  uint64_t id, a;
  ASSERT_OK(st->ops->vm_reserve(st->ctx, 4 * G, &id, NULL));
  ASSERT_OK(st->ops->vm_map(st->ctx, id, 0, G, G, NULL));
  ASSERT_OK(cm_storage_alloc(st, 4096, &a, NULL));
  fakecuda_counts_t k = fk_counts();
  EXPECT_EQ(k.used[1], G + 4096); /* on device 1, not 0 */
  EXPECT_EQ(k.used[0], 0);
  cm_resource_t r;
  ASSERT_OK(cm_storage_get(st, id, 0, 4 * G, &r, NULL));
  void *va = (void *)(uintptr_t)r.addr;
  EXPECT_OK(fk_launch(1, NULL, va, (size_t)G));
  EXPECT_EQ(fk_launch(0, NULL, va, (size_t)G), F_INVALID_VALUE); /* no access for device 0 yet */
  uint64_t before = fk_counts().violations;
  EXPECT_EQ(before, 1);
  cm_diag_t d = {0};
  EXPECT_STATUS(cm_cuda_device_enable_peer_access(dev1, 1, &d), CM_EINVAL);
  ASSERT_OK(cm_cuda_device_enable_peer_access(dev1, 0, &d)); /* existing mapping granted */
  EXPECT_OK(cm_cuda_device_enable_peer_access(dev1, 0, &d)); /* idempotent */
  EXPECT_OK(fk_launch(0, NULL, va, (size_t)G));
  ASSERT_OK(st->ops->vm_map(st->ctx, id, G, 2 * G, G, NULL)); /* new ones include the peer */
  EXPECT_OK(fk_launch(0, NULL, (char *)va + G, (size_t)(2 * G)));
  EXPECT_EQ(fk_counts().violations, before);
  ASSERT_OK(st->ops->vm_unmap(st->ctx, id, 0, 3 * G, G, NULL));
  ASSERT_OK(st->ops->vm_release(st->ctx, id, NULL));
  cm_storage_destroy(st);
  cm_cuda_device_close(dev1);
  EXPECT_EQ(FK.held(), 0);
  EXPECT_EQ(fk_counts().violations, 1); /* only the deliberate one above */

  /* devices that cannot reach each other: refused, nothing changes */
  cfg = fake_reset();
  cfg->devices = 2;
  cfg->peer = 0;
  dev1 = fake_open_ordinal(1);
  ASSERT(dev1 != NULL);
  cm_diag_clear(&d);
  EXPECT_STATUS(cm_cuda_device_enable_peer_access(dev1, 0, &d), CM_ENOTSUP);
  EXPECT_CONTAINS(d.message, "CUDA device 0 cannot access the memory of device 1");
  cm_cuda_device_close(dev1);
  EXPECT_CLEAN();
}

int main(void) {
  CM_RUN(test_fake_driver_refuses);
  CM_RUN(test_fake_device_open);
  CM_RUN(test_fake_open_failures);
  CM_RUN(test_fake_sync_storage);
  CM_RUN(test_fake_errors);
  CM_RUN(test_fake_async_and_fallback);
  CM_RUN(test_fake_feature_probing);
  CM_RUN(test_fake_old_driver_attributes);
  CM_RUN(test_fake_event_ops);
  CM_RUN(test_fake_vm);
  CM_RUN(test_fake_vm_partial_map);
  CM_RUN(test_fake_retain_handle);
  CM_RUN(test_fake_aliases);
  CM_RUN(test_fake_release_retried);
  CM_RUN(test_fake_call_times);
  CM_RUN(test_fake_pinned);
  CM_RUN(test_fake_manager_and_ptr);
  CM_RUN(test_fake_stream_reuse);
  CM_RUN(test_fake_record_stream);
  CM_RUN(test_fake_peer_access);
  CM_RUN(test_fake_copies);
  return cm_test_finish();
}
