/*
 * test_cuda.c - the CUDA storages (cubemem/cuda.h).
 *
 * Three groups:
 *  1. No driver: opening a device with a bogus CM_CUDA_LIBRARY, a library
 *     that is not a driver, and (when libcuda.so.1 is absent, as on CI) the
 *     default path must fail with CM_ENODEV and a message naming the cause.
 *  2. Simulated driver: the storage logic (sync/async allocation and the
 *     per-id free kind, the dealloc queue and flush, zero-byte ids, error
 *     mapping OOM -> CM_EOOM vs other -> CM_ESTORAGE, events, virtual memory,
 *     pinned memory, device reference counting, context push/pop balance)
 *     runs against an in-process fake of the driver's entry points, handed
 *     in through cm_cuda_device_open_resolver. Runs everywhere.
 *  3. Real GPU: the same operations against libcuda.so.1, checking that the
 *     memory is real (memset/copy through the driver). These SKIP, saying
 *     why, when no driver or device is available.
 */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "cm_test.h"
#include "cubemem/cuda.h"
#include "cubemem/memory.h"
#include "cubemem/ptr.h"
/* The event and VM ops are reached as the manager reaches them: through the
 * storage's ops table, read from the internal wrapper layout. */
#include "storage/storage_internal.h"

/* ===== 1. no driver ======================================================== */

static void test_bogus_library_env(void) {
  const char *old = getenv("CM_CUDA_LIBRARY");
  char saved[4096] = "";
  if (old) snprintf(saved, sizeof saved, "%s", old);
  setenv("CM_CUDA_LIBRARY", "/nonexistent/dir/libcuda-bogus.so.1", 1);
  cm_cuda_device_t *dev = (cm_cuda_device_t *)0x1;
  cm_diag_t d = {0};
  int rc = cm_cuda_device_open(0, &dev, &d);
  if (old)
    setenv("CM_CUDA_LIBRARY", saved, 1); /* the real-GPU tests below honour it */
  else
    unsetenv("CM_CUDA_LIBRARY");
  EXPECT_STATUS(rc, CM_ENODEV);
  EXPECT(dev == NULL);
  EXPECT_STATUS(d.code, CM_ENODEV);
  EXPECT_CONTAINS(d.message, "/nonexistent/dir/libcuda-bogus.so.1");
  EXPECT_CONTAINS(d.message, "cannot open shared object file");
}

static void test_bogus_library_explicit(void) {
  cm_cuda_device_t *dev = NULL;
  cm_diag_t d = {0};
  EXPECT_STATUS(cm_cuda_device_open_library("/nonexistent/libcuda.so.1", 0, &dev, &d), CM_ENODEV);
  EXPECT(dev == NULL);
  EXPECT_CONTAINS(d.message, "/nonexistent/libcuda.so.1: cannot open shared object file");
  EXPECT_CONTAINS(d.message, "CM_CUDA_LIBRARY");
}

static void test_not_a_driver(void) {
  /* libc loads but has no cuInit: the device must not open, nothing crashes. */
  cm_cuda_device_t *dev = NULL;
  cm_diag_t d = {0};
  EXPECT_STATUS(cm_cuda_device_open_library("libc.so.6", 0, &dev, &d), CM_ENODEV);
  EXPECT(dev == NULL);
  EXPECT_CONTAINS(d.message, "libc.so.6 is not a usable CUDA driver");
  EXPECT_CONTAINS(d.message, "cuInit");
}

static bool driver_present(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h) dlclose(h);
  return h != NULL;
}

static void test_default_without_driver(void) {
  if (getenv("CM_CUDA_LIBRARY")) CM_SKIP("CM_CUDA_LIBRARY is set in the environment");
  if (driver_present()) CM_SKIP("libcuda.so.1 is installed here; the no-driver path needs none");
  cm_cuda_device_t *dev = NULL;
  cm_diag_t d = {0};
  EXPECT_STATUS(cm_cuda_device_open(0, &dev, &d), CM_ENODEV);
  EXPECT(dev == NULL);
  EXPECT_CONTAINS(d.message, "libcuda.so.1: cannot open shared object file");

  cm_storage_t *st = (cm_storage_t *)0x1;
  cm_device_props_t props = {7, 7};
  cm_diag_clear(&d);
  EXPECT_STATUS(cm_cuda_storage_open_default(CM_CUDA_SYNC, &st, &props, &d), CM_ENODEV);
  EXPECT(st == NULL);
  EXPECT_EQ(props.max_page_size, 7); /* untouched on failure */
  EXPECT_CONTAINS(d.message, "libcuda.so.1");

  int n = -1;
  EXPECT_STATUS(cm_cuda_device_count(&n, NULL), CM_ENODEV);
  EXPECT_EQ(n, 0);
}

static void test_argument_errors(void) {
  cm_diag_t d = {0};
  EXPECT_STATUS(cm_cuda_device_open(0, NULL, &d), CM_EINVAL);
  cm_cuda_device_t *dev = NULL;
  EXPECT_STATUS(cm_cuda_device_open(-1, &dev, &d), CM_EINVAL);
  cm_storage_t *st = NULL;
  EXPECT_STATUS(cm_cuda_storage_create(NULL, NULL, CM_CUDA_SYNC, &st, &d), CM_EINVAL);
  EXPECT_STATUS(cm_cuda_pinned_storage_create(NULL, &st, &d), CM_EINVAL);
  cm_cuda_allocator_t k = CM_CUDA_SYNC;
  EXPECT_OK(cm_cuda_allocator_parse("ASYNC", &k));
  EXPECT_EQ(k, CM_CUDA_ASYNC);
  EXPECT_OK(cm_cuda_allocator_parse("sync", &k));
  EXPECT_EQ(k, CM_CUDA_SYNC);
  EXPECT_STATUS(cm_cuda_allocator_parse("fast", &k), CM_EINVAL);
  EXPECT_STR(cm_cuda_allocator_name(CM_CUDA_ASYNC), "async");
  cm_cuda_device_close(NULL);
}

/* ===== 2. simulated driver ================================================= */

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
enum {
  F_SUCCESS = 0,
  F_INVALID_VALUE = 1,
  F_OOM = 2,
  F_NO_DEVICE = 100,
  F_NOT_READY = 600,
  F_NOT_SUPPORTED = 801,
};
enum { FK_SYNC = 1, FK_ASYNC = 2, FK_HOST = 3 };

typedef struct f_loc {
  int type, id;
} f_loc;
typedef struct f_prop {
  int type, handle_types;
  f_loc loc;
  void *win32;
  unsigned char flags[8];
} f_prop;
typedef struct f_access {
  f_loc loc;
  int flags;
} f_access;

#define F_MAX 256
typedef struct fake_alloc {
  CUdeviceptr ptr;
  size_t size;
  int kind;
  bool live;
} fake_alloc;

static struct fake {
  CUresult init_result;
  int devices;
  size_t total, capacity, used;
  CUresult force_alloc_error; /* returned by cuMemAlloc when non-zero */
  bool async_fails, hide_async, hide_vm, hide_alloc;
  fake_alloc a[F_MAX];
  int na;
  CUdeviceptr next;
  int ctx_depth, ctx_max, retains, releases;
  int sync_allocs, async_allocs, sync_frees, async_frees, bad_frees, host_allocs, host_frees;
  int events_live, events_created, event_ready, stream_syncs;
  int reserves, address_frees, creates, mem_releases, maps, unmaps, bad_vm;
  size_t granule;
} F;

static void fake_reset(void) {
  memset(&F, 0, sizeof F);
  F.devices = 1;
  F.total = 16ull << 30;
  F.capacity = 64ull << 20;
  F.next = 0x7f0000000000ull;
  F.granule = 2u << 20;
}

static CUdeviceptr fake_bump(size_t size) {
  CUdeviceptr p = F.next;
  F.next += (size + 4095) & ~(CUdeviceptr)4095;
  return p;
}

static CUresult f_init(unsigned flags) { return flags ? F_INVALID_VALUE : F.init_result; }
static CUresult f_err_name(CUresult e, const char **s) {
  switch (e) {
    case F_SUCCESS: *s = "CUDA_SUCCESS"; return 0;
    case F_INVALID_VALUE: *s = "CUDA_ERROR_INVALID_VALUE"; return 0;
    case F_OOM: *s = "CUDA_ERROR_OUT_OF_MEMORY"; return 0;
    case F_NO_DEVICE: *s = "CUDA_ERROR_NO_DEVICE"; return 0;
    case F_NOT_READY: *s = "CUDA_ERROR_NOT_READY"; return 0;
    case F_NOT_SUPPORTED: *s = "CUDA_ERROR_NOT_SUPPORTED"; return 0;
    default: *s = NULL; return F_INVALID_VALUE;
  }
}
static CUresult f_err_string(CUresult e, const char **s) {
  switch (e) {
    case F_INVALID_VALUE: *s = "invalid argument"; return 0;
    case F_OOM: *s = "out of memory"; return 0;
    case F_NO_DEVICE: *s = "no CUDA-capable device is detected"; return 0;
    default: *s = "some error"; return 0;
  }
}
static CUresult f_dev_count(int *n) {
  *n = F.devices;
  return 0;
}
static CUresult f_dev_get(int *d, int ord) {
  if (ord >= F.devices) return F_INVALID_VALUE;
  *d = ord + 40; /* a CUdevice handle distinct from the ordinal */
  return 0;
}
static CUresult f_dev_name(char *name, int len, int d) {
  snprintf(name, (size_t)len, "Fake GPU %d", d);
  return 0;
}
static CUresult f_total_mem(size_t *b, int d) {
  (void)d;
  *b = F.total;
  return 0;
}
static CUresult f_retain(void **ctx, int d) {
  F.retains++;
  *ctx = (void *)(uintptr_t)(0x1000 + d);
  return 0;
}
static CUresult f_release(int d) {
  (void)d;
  F.releases++;
  return 0;
}
static CUresult f_push(void *ctx) {
  if (!ctx) return F_INVALID_VALUE;
  if (++F.ctx_depth > F.ctx_max) F.ctx_max = F.ctx_depth;
  return 0;
}
static CUresult f_pop(void **ctx) {
  *ctx = NULL;
  F.ctx_depth--;
  return 0;
}
static bool in_ctx(void) { return F.ctx_depth > 0; }

static CUresult record(CUdeviceptr *p, size_t n, int kind) {
  if (F.used + n > F.capacity) return F_OOM;
  if (F.na == F_MAX) return F_OOM;
  *p = fake_bump(n);
  F.a[F.na++] = (fake_alloc){*p, n, kind, true};
  F.used += n;
  return 0;
}
static void forget(CUdeviceptr p, int kind) {
  for (int i = 0; i < F.na; i++) {
    if (F.a[i].ptr == p && F.a[i].live) {
      if (F.a[i].kind != kind) F.bad_frees++;
      F.a[i].live = false;
      F.used -= F.a[i].size;
      return;
    }
  }
  F.bad_frees++;
}
static int live_count(void) {
  int n = 0;
  for (int i = 0; i < F.na; i++) n += F.a[i].live;
  return n;
}

static CUresult f_alloc(CUdeviceptr *p, size_t n) {
  if (!in_ctx() || n == 0) return F_INVALID_VALUE;
  if (F.force_alloc_error) return F.force_alloc_error;
  CUresult r = record(p, n, FK_SYNC);
  if (!r) F.sync_allocs++;
  return r;
}
static CUresult f_free(CUdeviceptr p) {
  if (!in_ctx()) return F_INVALID_VALUE;
  forget(p, FK_SYNC);
  F.sync_frees++;
  return 0;
}
static CUresult f_alloc_async(CUdeviceptr *p, size_t n, void *stream) {
  (void)stream;
  if (!in_ctx() || n == 0) return F_INVALID_VALUE;
  if (F.async_fails) return F_NOT_SUPPORTED;
  CUresult r = record(p, n, FK_ASYNC);
  if (!r) F.async_allocs++;
  return r;
}
static CUresult f_free_async(CUdeviceptr p, void *stream) {
  (void)stream;
  forget(p, FK_ASYNC);
  F.async_frees++;
  return 0;
}
static CUresult f_mem_info(size_t *fr, size_t *t) {
  *fr = F.capacity - F.used;
  *t = F.total;
  return 0;
}
static CUresult f_alloc_host(void **p, size_t n) {
  if (F.used + n > F.capacity) return F_OOM;
  *p = aligned_alloc(16, (n + 15) & ~(size_t)15);
  if (!*p) return F_OOM;
  F.host_allocs++;
  return 0;
}
static CUresult f_free_host(void *p) {
  free(p);
  F.host_frees++;
  return 0;
}
static CUresult f_event_create(void **e, unsigned flags) {
  if (flags != 2) return F_INVALID_VALUE;
  *e = malloc(8);
  F.events_live++;
  F.events_created++;
  return 0;
}
static CUresult f_event_record(void *e, void *s) {
  (void)s;
  return e ? 0 : F_INVALID_VALUE;
}
static CUresult f_event_query(void *e) {
  (void)e;
  return F.event_ready ? 0 : F_NOT_READY;
}
static CUresult f_event_sync(void *e) {
  (void)e;
  F.event_ready = 1;
  return 0;
}
static CUresult f_event_destroy(void *e) {
  free(e);
  F.events_live--;
  return 0;
}
static CUresult f_stream_sync(void *s) {
  (void)s;
  F.stream_syncs++;
  return 0;
}
static CUresult f_addr_reserve(CUdeviceptr *p, size_t size, size_t align, CUdeviceptr addr,
                               unsigned long long flags) {
  if (size % F.granule || align != F.granule || addr || flags) F.bad_vm++;
  *p = fake_bump(size);
  F.reserves++;
  return 0;
}
static CUresult f_addr_free(CUdeviceptr p, size_t size) {
  (void)p;
  if (size % F.granule) F.bad_vm++;
  F.address_frees++;
  return 0;
}
static CUresult f_create(unsigned long long *h, size_t size, const f_prop *prop,
                         unsigned long long flags) {
  if (prop->type != 1 || prop->loc.type != 1 || prop->loc.id != 0 || flags) F.bad_vm++;
  if (F.used + size > F.capacity) return F_OOM;
  F.used += size;
  *h = 0x5000 + (unsigned long long)size; /* encodes the size for f_mem_release */
  F.creates++;
  return 0;
}
static CUresult f_mem_release(unsigned long long h) {
  F.used -= (size_t)(h - 0x5000);
  F.mem_releases++;
  return 0;
}
static CUresult f_map(CUdeviceptr p, size_t size, size_t off, unsigned long long h,
                      unsigned long long flags) {
  (void)p;
  if (off || flags || size % F.granule || !h) F.bad_vm++;
  F.maps++;
  return 0;
}
static CUresult f_unmap(CUdeviceptr p, size_t size) {
  (void)p;
  if (size % F.granule) F.bad_vm++;
  F.unmaps++;
  return 0;
}
static CUresult f_set_access(CUdeviceptr p, size_t size, const f_access *d, size_t n) {
  (void)p;
  (void)size;
  if (n != 1 || d->loc.type != 1 || d->loc.id != 0 || d->flags != 3) F.bad_vm++;
  return 0;
}
static CUresult f_granularity(size_t *g, const f_prop *prop, int option) {
  if (prop->type != 1 || prop->loc.type != 1 || option != 0) return F_INVALID_VALUE;
  *g = F.granule;
  return 0;
}

typedef struct fsym {
  const char *name;
  void *fn;
} fsym;
static const fsym k_fake[] = {
    {"cuInit", (void *)f_init},
    {"cuGetErrorName", (void *)f_err_name},
    {"cuGetErrorString", (void *)f_err_string},
    {"cuDeviceGetCount", (void *)f_dev_count},
    {"cuDeviceGet", (void *)f_dev_get},
    {"cuDeviceGetName", (void *)f_dev_name},
    {"cuDeviceTotalMem_v2", (void *)f_total_mem},
    {"cuDevicePrimaryCtxRetain", (void *)f_retain},
    {"cuDevicePrimaryCtxRelease_v2", (void *)f_release},
    {"cuCtxPushCurrent_v2", (void *)f_push},
    {"cuCtxPopCurrent_v2", (void *)f_pop},
    {"cuMemAlloc_v2", (void *)f_alloc},
    {"cuMemFree_v2", (void *)f_free},
    {"cuMemGetInfo_v2", (void *)f_mem_info},
    {"cuMemAllocHost_v2", (void *)f_alloc_host},
    {"cuMemFreeHost", (void *)f_free_host},
    {"cuEventCreate", (void *)f_event_create},
    {"cuEventRecord", (void *)f_event_record},
    {"cuEventQuery", (void *)f_event_query},
    {"cuEventSynchronize", (void *)f_event_sync},
    {"cuEventDestroy_v2", (void *)f_event_destroy},
    {"cuStreamSynchronize", (void *)f_stream_sync},
    {"cuMemAllocAsync", (void *)f_alloc_async},
    {"cuMemFreeAsync", (void *)f_free_async},
    {"cuMemAddressReserve", (void *)f_addr_reserve},
    {"cuMemAddressFree", (void *)f_addr_free},
    {"cuMemCreate", (void *)f_create},
    {"cuMemRelease", (void *)f_mem_release},
    {"cuMemMap", (void *)f_map},
    {"cuMemUnmap", (void *)f_unmap},
    {"cuMemSetAccess", (void *)f_set_access},
    {"cuMemGetAllocationGranularity", (void *)f_granularity},
};

static void *fake_resolve(void *arg, const char *name) {
  (void)arg;
  if (F.hide_async && strstr(name, "Async")) return NULL;
  if (F.hide_vm && (strstr(name, "cuMemAddress") || strcmp(name, "cuMemMap") == 0))
    return NULL;
  if (F.hide_alloc && strcmp(name, "cuMemAlloc_v2") == 0) return NULL;
  for (size_t i = 0; i < sizeof k_fake / sizeof k_fake[0]; i++)
    if (strcmp(k_fake[i].name, name) == 0) return k_fake[i].fn;
  return NULL;
}

static cm_cuda_device_t *fake_open(void) {
  cm_cuda_device_t *dev = NULL;
  cm_diag_t d = {0};
  int rc = cm_cuda_device_open_resolver(fake_resolve, NULL, 0, &dev, &d);
  if (rc != CM_OK) cm_test_fail(__FILE__, __LINE__, "fake open: %s", d.message);
  return dev;
}

static void test_fake_device_open(void) {
  fake_reset();
  cm_cuda_device_t *dev = fake_open();
  ASSERT(dev != NULL);
  EXPECT_EQ(cm_cuda_device_total_memory(dev), 16ull << 30);
  cm_device_props_t p = cm_cuda_device_props(dev);
  EXPECT_EQ(p.max_page_size, 4ull << 30);
  EXPECT_EQ(p.alignment, 512);
  EXPECT_STR(cm_cuda_device_name(dev), "Fake GPU 40");
  EXPECT_EQ(cm_cuda_device_ordinal(dev), 0);
  uint64_t fr = 0, tot = 0;
  EXPECT_OK(cm_cuda_device_mem_info(dev, &fr, &tot, NULL));
  EXPECT_EQ(tot, 16ull << 30);
  EXPECT_EQ(fr, 64ull << 20);
  EXPECT_EQ(F.retains, 1);
  cm_cuda_device_close(dev);
  EXPECT_EQ(F.releases, 1);
  EXPECT_EQ(F.ctx_depth, 0);
}

static void test_fake_open_failures(void) {
  cm_cuda_device_t *dev = NULL;
  cm_diag_t d = {0};
  fake_reset();
  F.init_result = F_NO_DEVICE;
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
  F.hide_alloc = true;
  cm_diag_clear(&d);
  EXPECT_STATUS(cm_cuda_device_open_resolver(fake_resolve, NULL, 0, &dev, &d), CM_ENODEV);
  EXPECT_CONTAINS(d.message, "cuMemAlloc_v2 is missing");
  EXPECT_EQ(F.retains, 0);
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
  EXPECT_EQ(F.sync_allocs, 2);
  cm_resource_t r;
  ASSERT_OK(cm_storage_get(st, a, 24, 100, &r, NULL));
  EXPECT_EQ(r.addr, F.a[0].ptr + 24);
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
  EXPECT_EQ(F.sync_frees, 0);
  cm_cuda_storage_counters_t c;
  cm_cuda_storage_counters(st, &c);
  EXPECT_EQ(c.pending, 2);
  EXPECT_EQ(c.sync_allocs, 2);
  ASSERT_OK(cm_storage_get(st, a, 0, 1000, &r, NULL)); /* still valid until flush */
  EXPECT_OK(cm_storage_flush(st));
  EXPECT_EQ(F.sync_frees, 1);
  EXPECT_EQ(live_count(), 1);
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
  EXPECT_EQ(F.releases, 0);
  cm_storage_destroy(st); /* frees b */
  EXPECT_EQ(live_count(), 0);
  EXPECT_EQ(F.releases, 1);
  EXPECT_EQ(F.bad_frees, 0);
  EXPECT_EQ(F.ctx_depth, 0);
  EXPECT_EQ(F.ctx_max, 1);
}

static void test_fake_errors(void) {
  fake_reset();
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
  F.force_alloc_error = F_INVALID_VALUE;
  cm_diag_clear(&d);
  EXPECT_STATUS(cm_storage_alloc(st, 100, &id, &d), CM_ESTORAGE);
  EXPECT_CONTAINS(d.message, "CUDA_ERROR_INVALID_VALUE");
  EXPECT_CONTAINS(d.message, "invalid argument");
  EXPECT_EQ(d.native, F_INVALID_VALUE);
  /* an unnamed code still produces a message */
  F.force_alloc_error = 9999;
  cm_diag_clear(&d);
  EXPECT_STATUS(cm_storage_alloc(st, 100, &id, &d), CM_ESTORAGE);
  EXPECT_CONTAINS(d.message, "CUresult 9999");
  F.force_alloc_error = 0;
  /* failures change nothing */
  cm_storage_stats_t ss;
  cm_storage_stats(st, &ss);
  EXPECT_EQ(ss.allocs, 0);
  EXPECT_EQ(ss.failed_allocs, 3);
  EXPECT_EQ(live_count(), 0);
  ASSERT_OK(cm_storage_alloc(st, 100, &id, NULL));
  EXPECT_EQ(id, 1); /* failed calls minted no id */
  cm_storage_destroy(st);
  cm_cuda_device_close(dev);
  EXPECT_EQ(F.ctx_depth, 0);
  EXPECT_EQ(live_count(), 0);
}

static void test_fake_async_and_fallback(void) {
  fake_reset();
  cm_cuda_device_t *dev = fake_open();
  ASSERT(dev != NULL);
  cm_storage_t *st = NULL;
  ASSERT_OK(cm_cuda_storage_create(dev, (void *)0xabc, CM_CUDA_ASYNC, &st, NULL));
  uint64_t a, b;
  ASSERT_OK(cm_storage_alloc(st, 5000, &a, NULL));
  EXPECT_EQ(F.async_allocs, 1);
  F.async_fails = true; /* the next async call fails: fall back to cuMemAlloc */
  ASSERT_OK(cm_storage_alloc(st, 6000, &b, NULL));
  EXPECT_EQ(F.sync_allocs, 1);
  cm_cuda_storage_counters_t c;
  cm_cuda_storage_counters(st, &c);
  EXPECT_EQ(c.async_allocs, 1);
  EXPECT_EQ(c.sync_allocs, 1);
  EXPECT_EQ(c.async_fallbacks, 1);
  /* both OOM: CM_EOOM */
  uint64_t x;
  EXPECT_STATUS(cm_storage_alloc(st, 1ull << 30, &x, NULL), CM_EOOM);
  /* each pointer is freed the way it was allocated */
  cm_storage_dealloc(st, a, 5000);
  cm_storage_dealloc(st, b, 6000);
  EXPECT_OK(cm_storage_flush(st));
  EXPECT_EQ(F.async_frees, 1);
  EXPECT_EQ(F.sync_frees, 1);
  EXPECT_EQ(F.bad_frees, 0);
  EXPECT_EQ(live_count(), 0);
  /* release with a live async allocation frees it and waits for the stream */
  F.async_fails = false;
  ASSERT_OK(cm_storage_alloc(st, 7000, &a, NULL));
  int syncs = F.stream_syncs;
  cm_storage_destroy(st);
  EXPECT_EQ(live_count(), 0);
  EXPECT_EQ(F.stream_syncs, syncs + 1);
  cm_cuda_device_close(dev);

  /* a driver without the stream-ordered API: every allocation falls back */
  fake_reset();
  F.hide_async = true;
  dev = fake_open();
  ASSERT(dev != NULL);
  ASSERT_OK(cm_cuda_storage_create(dev, NULL, CM_CUDA_ASYNC, &st, NULL));
  ASSERT_OK(cm_storage_alloc(st, 100, &a, NULL));
  cm_cuda_storage_counters(st, &c);
  EXPECT_EQ(c.async_fallbacks, 1);
  EXPECT_EQ(F.sync_allocs, 1);
  cm_storage_destroy(st);
  cm_cuda_device_close(dev);
  EXPECT_EQ(live_count(), 0);
  EXPECT_EQ(F.bad_frees, 0);
  EXPECT_EQ(F.ctx_depth, 0);
}

static void test_fake_event_ops(void) {
  fake_reset();
  cm_cuda_device_t *dev = fake_open();
  ASSERT(dev != NULL);
  cm_storage_t *st = NULL;
  ASSERT_OK(cm_cuda_storage_create(dev, NULL, CM_CUDA_SYNC, &st, NULL));
  const cm_storage_ops_t *ops = st->ops;
  ASSERT(ops->event_record && ops->event_query && ops->event_sync && ops->event_destroy);
  void *ev = NULL;
  ASSERT_OK(ops->event_record(st->ctx, &ev, NULL));
  EXPECT(ev != NULL);
  EXPECT_EQ(ops->event_query(st->ctx, ev), 0); /* pending */
  EXPECT_OK(ops->event_sync(st->ctx, ev));
  EXPECT_EQ(ops->event_query(st->ctx, ev), 1); /* complete */
  ops->event_destroy(st->ctx, ev);
  EXPECT_EQ(F.events_live, 0);
  EXPECT_EQ(F.events_created, 1);
  cm_storage_destroy(st);
  cm_cuda_device_close(dev);
  EXPECT_EQ(F.ctx_depth, 0);
}

static void test_fake_vm(void) {
  fake_reset();
  cm_cuda_device_t *dev = fake_open();
  ASSERT(dev != NULL);
  cm_storage_t *st = NULL;
  ASSERT_OK(cm_cuda_storage_create(dev, (void *)0x77, CM_CUDA_SYNC, &st, NULL));
  ASSERT(cm_storage_has_vm(st));
  const cm_storage_ops_t *ops = st->ops;
  void *c = st->ctx;
  const uint64_t G = 2u << 20;
  EXPECT_EQ(ops->vm_granularity(c), G);
  uint64_t id = 0;
  ASSERT_OK(ops->vm_reserve(c, 5u << 20, &id, NULL)); /* rounded up to 3 granules */
  EXPECT_EQ(F.reserves, 1);
  cm_resource_t r;
  ASSERT_OK(cm_storage_get(st, id, G, G, &r, NULL));
  EXPECT_EQ(r.addr - G, F.next - 3 * G); /* base of the reservation + offset */
  ASSERT_OK(ops->vm_map(c, id, 0, G, G, NULL));
  ASSERT_OK(ops->vm_map(c, id, 2 * G, G, G, NULL));
  EXPECT_EQ(F.maps, 2);
  EXPECT_EQ(F.used, 2 * G);
  cm_diag_t d = {0};
  EXPECT_STATUS(ops->vm_map(c, id, 1000, G, G, &d), CM_EINVAL); /* misaligned */
  EXPECT_STATUS(ops->vm_map(c, id, 0, G, G, &d), CM_EINVAL);    /* already mapped */
  EXPECT_STATUS(ops->vm_map(c, id, 2 * G, 2 * G, G, &d), CM_EINVAL); /* past the end */
  EXPECT_STATUS(ops->vm_map(c, 4242, 0, G, G, &d), CM_EHANDLE);
  F.capacity = 2 * G; /* physical memory exhausted */
  cm_diag_clear(&d);
  EXPECT_STATUS(ops->vm_map(c, id, G, G, G, &d), CM_EOOM);
  EXPECT_CONTAINS(d.message, "device out of memory mapping 2097152 bytes");
  F.capacity = 64u << 20;
  int syncs = F.stream_syncs;
  ASSERT_OK(ops->vm_unmap(c, id, 0, G, G, NULL)); /* a whole mapping: goes */
  EXPECT_EQ(F.stream_syncs, syncs + 1);
  EXPECT_EQ(F.unmaps, 1);
  EXPECT_EQ(F.mem_releases, 1);
  EXPECT_STATUS(ops->vm_unmap(c, id, 2 * G, G / 2, G / 2, NULL), CM_EINVAL); /* partial: refused */
  EXPECT_EQ(F.unmaps, 1);
  ASSERT_OK(ops->vm_map(c, id, 0, G, G, NULL)); /* remap after unmap */
  EXPECT_STATUS(ops->vm_release(c, id, NULL), CM_EINVAL); /* mappings remain */
  ASSERT_OK(ops->vm_unmap(c, id, 0, G, G, NULL));
  ASSERT_OK(ops->vm_unmap(c, id, 2 * G, G, G, NULL));
  ASSERT_OK(ops->vm_release(c, id, NULL));
  EXPECT_EQ(F.unmaps, 3);
  EXPECT_EQ(F.mem_releases, 3);
  EXPECT_EQ(F.creates, 3);
  EXPECT_EQ(F.address_frees, 1);
  EXPECT_EQ(F.used, 0);
  EXPECT_STATUS(cm_storage_get(st, id, 0, 0, &r, NULL), CM_EHANDLE);
  /* a live reservation is released with the storage */
  ASSERT_OK(ops->vm_reserve(c, G, &id, NULL));
  ASSERT_OK(ops->vm_map(c, id, 0, G, G, NULL));
  cm_storage_destroy(st);
  EXPECT_EQ(F.address_frees, 2);
  EXPECT_EQ(F.creates, F.mem_releases);
  EXPECT_EQ(F.bad_vm, 0);
  cm_cuda_device_close(dev);
  EXPECT_EQ(F.ctx_depth, 0);

  /* a driver without the VM API: no VM, plain allocations still work */
  fake_reset();
  F.hide_vm = true;
  dev = fake_open();
  ASSERT(dev != NULL);
  ASSERT_OK(cm_cuda_storage_create(dev, NULL, CM_CUDA_SYNC, &st, NULL));
  EXPECT(!cm_storage_has_vm(st));
  cm_diag_clear(&d);
  EXPECT_STATUS(st->ops->vm_reserve(st->ctx, G, &id, &d), CM_ENOTSUP);
  cm_storage_destroy(st);
  cm_cuda_device_close(dev);
}

static void test_fake_pinned(void) {
  fake_reset();
  cm_cuda_device_t *dev = fake_open();
  ASSERT(dev != NULL);
  cm_storage_t *st = NULL;
  ASSERT_OK(cm_cuda_pinned_storage_create(dev, &st, NULL));
  EXPECT_STR(cm_storage_name(st), "cuda-pinned");
  EXPECT(!cm_storage_has_vm(st));
  EXPECT_EQ(st->ops->alignment(st->ctx), 16);
  uint64_t a, z;
  ASSERT_OK(cm_storage_alloc(st, 100, &a, NULL));
  ASSERT_OK(cm_storage_alloc(st, 0, &z, NULL));
  EXPECT_EQ(F.host_allocs, 1);
  cm_resource_t r;
  ASSERT_OK(cm_storage_get(st, a, 16, 84, &r, NULL));
  ASSERT(r.host != NULL);
  EXPECT_EQ((uint64_t)(uintptr_t)r.host, r.addr);
  EXPECT_EQ(((uintptr_t)r.host - 16) % 16, 0);
  memset(r.host, 0xab, 84); /* real host memory */
  cm_storage_dealloc(st, a, 100); /* immediate */
  EXPECT_EQ(F.host_frees, 1);
  EXPECT_STATUS(cm_storage_get(st, a, 0, 0, &r, NULL), CM_EHANDLE);
  cm_diag_t d = {0};
  EXPECT_STATUS(cm_storage_alloc(st, 1ull << 30, &a, &d), CM_EOOM);
  EXPECT_CONTAINS(d.message, "pinned host memory exhausted allocating 1073741824 bytes");
  ASSERT_OK(cm_storage_alloc(st, 64, &a, NULL));
  cm_storage_destroy(st); /* frees the live one */
  EXPECT_EQ(F.host_frees, 2);
  cm_cuda_device_close(dev);
  EXPECT_EQ(F.ctx_depth, 0);
}

static void test_fake_manager_and_ptr(void) {
  /* The whole stack over the simulated driver: pointer allocator -> manager
   * -> CUDA storage, with the CUDA factory. */
  fake_reset();
  F.capacity = 1ull << 30;
  cm_cuda_device_t *dev = fake_open();
  ASSERT(dev != NULL);
  cm_cuda_factory_t fac = {dev, CM_CUDA_ASYNC};
  cm_ptr_config_t cfg;
  cm_ptr_config_init(&cfg);
  cfg.factory = cm_cuda_storage_factory;
  cfg.factory_arg = &fac;
  cfg.props = cm_cuda_device_props(dev);
  cm_ptr_allocator_t *pa = NULL;
  cm_diag_t d = {0};
  ASSERT_OK(cm_ptr_allocator_create(&cfg, &pa, &d));
  void *p[16] = {0};
  for (int i = 0; i < 16; i++) {
    ASSERT_OK(cm_ptr_alloc(pa, (uint64_t)(i + 1) * 10000, (void *)0x5, &p[i], &d));
    ASSERT(p[i] != NULL);
  }
  /* memory came from the driver: cuMemAllocAsync, or cuMemCreate/cuMemMap
   * when the layout's pools use the virtual-memory operations */
  EXPECT(F.async_allocs + F.maps > 0);
  EXPECT_EQ(F.sync_allocs, 0);
  cm_ptr_usage_t u;
  ASSERT_OK(cm_ptr_usage(pa, &u));
  EXPECT_EQ(u.live_pointers, 16);
  EXPECT(u.total.bytes_reserved >= u.total.bytes_in_use);
  EXPECT(u.storage_allocs > 0);
  for (int i = 0; i < 16; i++) EXPECT_OK(cm_ptr_free(pa, p[i], (void *)0x5));
  EXPECT_STATUS(cm_ptr_free(pa, p[0], (void *)0x5), CM_ENOTFOUND);
  cm_ptr_empty_cache(pa);
  ASSERT_OK(cm_ptr_usage(pa, &u));
  EXPECT_EQ(u.live_pointers, 0);
  cm_ptr_allocator_destroy(pa);
  EXPECT_EQ(live_count(), 0);
  EXPECT_EQ(F.bad_frees, 0);
  cm_cuda_device_close(dev);
  EXPECT_EQ(F.releases, 1);
  EXPECT_EQ(F.ctx_depth, 0);
}

/* ===== 3. real GPU ========================================================= */

/* A few extra driver calls the test makes itself to prove the memory is real. */
static struct real {
  void *lib;
  CUresult (*DeviceGet)(int *, int);
  CUresult (*Retain)(void **, int);
  CUresult (*Release)(int);
  CUresult (*Push)(void *);
  CUresult (*Pop)(void **);
  CUresult (*MemsetD8)(CUdeviceptr, unsigned char, size_t);
  CUresult (*DtoH)(void *, CUdeviceptr, size_t);
  CUresult (*CtxSync)(void);
  void *ctx;
  int dev;
} R;

static cm_cuda_device_t *real_open(void) {
  cm_cuda_device_t *dev = NULL;
  static char why[600];
  cm_diag_t d = {0};
  if (cm_cuda_device_open(0, &dev, &d) != CM_OK) {
    snprintf(why, sizeof why, "no CUDA device: %s", d.message);
    CM_SKIP(why);
  }
  if (!R.lib) {
    const char *path = getenv("CM_CUDA_LIBRARY");
    R.lib = dlopen(path && *path ? path : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    ASSERT(R.lib != NULL);
    *(void **)&R.DeviceGet = dlsym(R.lib, "cuDeviceGet");
    *(void **)&R.Retain = dlsym(R.lib, "cuDevicePrimaryCtxRetain");
    *(void **)&R.Release = dlsym(R.lib, "cuDevicePrimaryCtxRelease_v2");
    *(void **)&R.Push = dlsym(R.lib, "cuCtxPushCurrent_v2");
    *(void **)&R.Pop = dlsym(R.lib, "cuCtxPopCurrent_v2");
    *(void **)&R.MemsetD8 = dlsym(R.lib, "cuMemsetD8_v2");
    *(void **)&R.DtoH = dlsym(R.lib, "cuMemcpyDtoH_v2");
    *(void **)&R.CtxSync = dlsym(R.lib, "cuCtxSynchronize");
    ASSERT(R.DeviceGet && R.Retain && R.Release && R.Push && R.Pop && R.MemsetD8 && R.DtoH &&
           R.CtxSync);
    ASSERT_OK(R.DeviceGet(&R.dev, 0));
    ASSERT_OK(R.Retain(&R.ctx, R.dev));
  }
  return dev;
}

/* Fill n bytes at addr with v on the device and read them back. */
static bool real_roundtrip(uint64_t addr, size_t n, unsigned char v) {
  unsigned char *buf = malloc(n);
  if (!buf) return false;
  bool ok = R.Push(R.ctx) == 0;
  ok = ok && R.MemsetD8(addr, v, n) == 0 && R.CtxSync() == 0 && R.DtoH(buf, addr, n) == 0;
  void *c;
  R.Pop(&c);
  for (size_t i = 0; ok && i < n; i++) ok = buf[i] == v;
  free(buf);
  return ok;
}

static void test_gpu_sync_and_async(void) {
  cm_cuda_device_t *dev = real_open();
  printf("  device: %s, %llu bytes\n", cm_cuda_device_name(dev),
         (unsigned long long)cm_cuda_device_total_memory(dev));
  EXPECT(cm_cuda_device_total_memory(dev) > 0);
  EXPECT_EQ(cm_cuda_device_props(dev).alignment, 512);
  for (int k = 0; k < 2; k++) {
    cm_storage_t *st = NULL;
    cm_diag_t d = {0};
    ASSERT_OK(cm_cuda_storage_create(dev, NULL, k ? CM_CUDA_ASYNC : CM_CUDA_SYNC, &st, &d));
    uint64_t ids[8], z;
    for (int i = 0; i < 8; i++) ASSERT_OK(cm_storage_alloc(st, (1u << 20) * (i + 1), &ids[i], &d));
    ASSERT_OK(cm_storage_alloc(st, 0, &z, &d));
    for (int i = 0; i < 8; i++) {
      cm_resource_t r;
      ASSERT_OK(cm_storage_get(st, ids[i], 0, (1u << 20) * (i + 1), &r, &d));
      EXPECT(r.addr != 0);
      EXPECT_EQ(r.addr % 512, 0);
      EXPECT(real_roundtrip(r.addr, (1u << 20) * (i + 1), (unsigned char)(0x30 + i)));
    }
    cm_cuda_storage_counters_t c;
    cm_cuda_storage_counters(st, &c);
    if (k) {
      printf("  async: %llu async, %llu fallbacks\n", (unsigned long long)c.async_allocs,
             (unsigned long long)c.async_fallbacks);
      EXPECT_EQ(c.async_allocs + c.sync_allocs, 8);
    } else {
      EXPECT_EQ(c.sync_allocs, 8);
    }
    for (int i = 0; i < 8; i++) cm_storage_dealloc(st, ids[i], (1u << 20) * (i + 1));
    cm_storage_dealloc(st, z, 0);
    EXPECT_OK(cm_storage_flush(st));
    cm_cuda_storage_counters(st, &c);
    EXPECT_EQ(c.free_errors, 0);
    cm_storage_stats_t ss;
    cm_storage_stats(st, &ss);
    EXPECT(ss.time_ns > 0);
    cm_storage_destroy(st);
  }
  cm_cuda_device_close(dev);
}

static void test_gpu_oom_is_not_toobig(void) {
  cm_cuda_device_t *dev = real_open();
  uint64_t total = cm_cuda_device_total_memory(dev);
  for (int k = 0; k < 2; k++) {
    cm_storage_t *st = NULL;
    ASSERT_OK(cm_cuda_storage_create(dev, NULL, k ? CM_CUDA_ASYNC : CM_CUDA_SYNC, &st, NULL));
    uint64_t id;
    cm_diag_t d = {0};
    EXPECT_STATUS(cm_storage_alloc(st, total * 2, &id, &d), CM_EOOM);
    EXPECT_CONTAINS(d.message, "device out of memory allocating");
    EXPECT_EQ(d.native, 2);
    /* the storage still works afterwards */
    ASSERT_OK(cm_storage_alloc(st, 4096, &id, NULL));
    cm_storage_dealloc(st, id, 4096);
    EXPECT_OK(cm_storage_flush(st));

    /* through a manager: a request larger than the device is CM_EOOM, not
     * CM_ETOOBIG (the layout accepts it; the device refuses it) */
    cm_manager_config_t mc;
    cm_manager_config_init(&mc);
    mc.props = cm_cuda_device_props(dev);
    cm_manager_t *m = NULL;
    ASSERT_OK(cm_manager_create(st, &mc, &m, NULL));
    cm_handle_t h = {0};
    cm_diag_clear(&d);
    int rc = cm_manager_reserve(m, total + (1ull << 30), &h, &d);
    EXPECT(rc != CM_OK);
    EXPECT(rc != CM_ETOOBIG);
    printf("  manager: %s: %s\n", cm_err_name(rc), d.message);
    cm_manager_destroy(m);
  }
  cm_cuda_device_close(dev);
}

static void test_gpu_events(void) {
  cm_cuda_device_t *dev = real_open();
  cm_storage_t *st = NULL;
  ASSERT_OK(cm_cuda_storage_create(dev, NULL, CM_CUDA_SYNC, &st, NULL));
  void *ev = NULL;
  ASSERT_OK(st->ops->event_record(st->ctx, &ev, NULL));
  EXPECT_OK(st->ops->event_sync(st->ctx, ev));
  EXPECT_EQ(st->ops->event_query(st->ctx, ev), 1);
  st->ops->event_destroy(st->ctx, ev);
  cm_storage_destroy(st);
  cm_cuda_device_close(dev);
}

static void test_gpu_vm(void) {
  cm_cuda_device_t *dev = real_open();
  cm_storage_t *st = NULL;
  ASSERT_OK(cm_cuda_storage_create(dev, NULL, CM_CUDA_SYNC, &st, NULL));
  if (!cm_storage_has_vm(st)) {
    cm_storage_destroy(st);
    cm_cuda_device_close(dev);
    CM_SKIP("the device or driver has no virtual memory management");
  }
  void *c = st->ctx;
  uint64_t g = st->ops->vm_granularity(c);
  printf("  VM granule %llu\n", (unsigned long long)g);
  uint64_t id;
  cm_diag_t d = {0};
  ASSERT_OK(st->ops->vm_reserve(c, 8 * g, &id, &d));
  ASSERT_OK(st->ops->vm_map(c, id, 0, 2 * g, g, &d));
  ASSERT_OK(st->ops->vm_map(c, id, 4 * g, g, g, &d));
  cm_resource_t r;
  ASSERT_OK(cm_storage_get(st, id, 0, 8 * g, &r, &d));
  EXPECT(real_roundtrip(r.addr, 2 * g, 0x5a));
  EXPECT(real_roundtrip(r.addr + 4 * g, g, 0xa5));
  ASSERT_OK(st->ops->vm_unmap(c, id, 0, 2 * g, g, &d));
  ASSERT_OK(st->ops->vm_map(c, id, 0, g, g, &d)); /* remap part of it */
  EXPECT(real_roundtrip(r.addr, g, 0x11));
  ASSERT_OK(st->ops->vm_unmap(c, id, 0, g, g, &d));
  ASSERT_OK(st->ops->vm_unmap(c, id, 4 * g, g, g, &d));
  ASSERT_OK(st->ops->vm_release(c, id, &d));
  cm_cuda_storage_counters_t cc;
  cm_cuda_storage_counters(st, &cc);
  EXPECT_EQ(cc.free_errors, 0);
  cm_storage_destroy(st);
  cm_cuda_device_close(dev);
}

static void test_gpu_pinned(void) {
  cm_cuda_device_t *dev = real_open();
  cm_storage_t *st = NULL;
  ASSERT_OK(cm_cuda_pinned_storage_create(dev, &st, NULL));
  uint64_t id;
  ASSERT_OK(cm_storage_alloc(st, 1u << 20, &id, NULL));
  cm_resource_t r;
  ASSERT_OK(cm_storage_get(st, id, 0, 1u << 20, &r, NULL));
  ASSERT(r.host != NULL);
  EXPECT_EQ((uintptr_t)r.host % 16, 0);
  memset(r.host, 0x42, 1u << 20);
  EXPECT_EQ(((unsigned char *)r.host)[12345], 0x42);
  cm_storage_dealloc(st, id, 1u << 20);
  cm_storage_destroy(st);
  cm_cuda_device_close(dev);
}

static void test_gpu_open_default(void) {
  cm_cuda_device_t *probe = real_open();
  cm_cuda_device_close(probe);
  for (int k = 0; k < 2; k++) {
    cm_storage_t *st = NULL;
    cm_device_props_t props = {0, 0};
    cm_diag_t d = {0};
    ASSERT_OK(cm_cuda_storage_open_default(k ? CM_CUDA_ASYNC : CM_CUDA_SYNC, &st, &props, &d));
    EXPECT_EQ(props.alignment, 512);
    EXPECT(props.max_page_size > 0);
    cm_storage_destroy(st);
  }
}

static void test_gpu_ptr(void) {
  cm_cuda_device_t *dev = real_open();
  cm_cuda_factory_t fac = {dev, CM_CUDA_SYNC};
  cm_ptr_config_t cfg;
  cm_ptr_config_init(&cfg);
  cfg.factory = cm_cuda_storage_factory;
  cfg.factory_arg = &fac;
  cfg.props = cm_cuda_device_props(dev);
  cm_ptr_allocator_t *pa = NULL;
  ASSERT_OK(cm_ptr_allocator_create(&cfg, &pa, NULL));
  void *p[64];
  for (int i = 0; i < 64; i++) {
    ASSERT_OK(cm_ptr_alloc(pa, 1000u * (uint64_t)(i + 1), NULL, &p[i], NULL));
    EXPECT(real_roundtrip((uint64_t)(uintptr_t)p[i], 1000u * (size_t)(i + 1),
                          (unsigned char)i));
  }
  for (int i = 0; i < 64; i++) EXPECT_OK(cm_ptr_free(pa, p[i], NULL));
  char rep[4096];
  cm_ptr_report(pa, rep, sizeof rep);
  printf("%s", rep);
  cm_ptr_allocator_destroy(pa);
  cm_cuda_device_close(dev);
}

int main(void) {
  CM_RUN(test_bogus_library_env);
  CM_RUN(test_bogus_library_explicit);
  CM_RUN(test_not_a_driver);
  CM_RUN(test_default_without_driver);
  CM_RUN(test_argument_errors);
  CM_RUN(test_fake_device_open);
  CM_RUN(test_fake_open_failures);
  CM_RUN(test_fake_sync_storage);
  CM_RUN(test_fake_errors);
  CM_RUN(test_fake_async_and_fallback);
  CM_RUN(test_fake_event_ops);
  CM_RUN(test_fake_vm);
  CM_RUN(test_fake_pinned);
  CM_RUN(test_fake_manager_and_ptr);
  CM_RUN(test_gpu_sync_and_async);
  CM_RUN(test_gpu_oom_is_not_toobig);
  CM_RUN(test_gpu_events);
  CM_RUN(test_gpu_vm);
  CM_RUN(test_gpu_pinned);
  CM_RUN(test_gpu_open_default);
  CM_RUN(test_gpu_ptr);
  if (R.lib) {
    R.Release(R.dev);
  }
  return cm_test_finish();
}
