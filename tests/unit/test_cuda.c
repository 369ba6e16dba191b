/*
 * test_cuda.c - the CUDA storages (cubemem/cuda.h) without a driver and on a
 * real GPU. The same storages on the strict fake driver are in
 * test_cuda_fake.c.
 *
 * Two groups:
 *  1. No driver: opening a device with a bogus CM_CUDA_LIBRARY, a library
 *     that is not a driver, and (when libcuda.so.1 is absent, as on CI) the
 *     default path must fail with CM_ENODEV and a message naming the cause.
 *  2. Real GPU: the same operations against libcuda.so.1, checking that the
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

/* ===== 2. real GPU ========================================================= */

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

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
  const char *lib = getenv("CM_CUDA_LIBRARY");
  void *probe = dlopen(lib && *lib ? lib : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  bool fake = probe && dlsym(probe, "fakecuda_report") != NULL;
  if (probe) dlclose(probe);
  if (fake) CM_SKIP("CM_CUDA_LIBRARY is the fake driver; these tests need real memory");
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

/* Fill n bytes at `to` with v on the device and read n bytes back from
 * `from` (the same bytes at another address, or `to` itself): all v? */
static bool real_write_read(uint64_t to, uint64_t from, size_t n, unsigned char v) {
  unsigned char *buf = malloc(n);
  if (!buf) return false;
  bool ok = R.Push(R.ctx) == 0;
  ok = ok && R.MemsetD8(to, v, n) == 0 && R.CtxSync() == 0 && R.DtoH(buf, from, n) == 0;
  void *c;
  R.Pop(&c);
  for (size_t i = 0; ok && i < n; i++) ok = buf[i] == v;
  free(buf);
  return ok;
}

/* Fill n bytes at addr with v on the device and read them back. */
static bool real_roundtrip(uint64_t addr, size_t n, unsigned char v) {
  return real_write_read(addr, addr, n, v);
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

/* Aliases (vm_alias) on the real driver: the alias shows the original's
 * bytes both ways, holds no memory, and survives nothing it should not: the
 * original goes only after its alias. */
static void test_gpu_aliases(void) {
  cm_cuda_device_t *dev = real_open();
  cm_storage_t *st = NULL;
  ASSERT_OK(cm_cuda_storage_create(dev, NULL, CM_CUDA_SYNC, &st, NULL));
  if (!cm__storage_has_alias(st)) {
    cm_storage_destroy(st);
    cm_cuda_device_close(dev);
    CM_SKIP("the device or driver has no virtual memory management or no "
            "cuMemRetainAllocationHandle");
  }
  uint64_t g = cm__storage_vm_granularity(st), a, b;
  cm_diag_t d = {0};
  ASSERT_OK(cm__storage_vm_reserve(st, 4 * g, &a, &d));
  ASSERT_OK(cm__storage_vm_reserve(st, 4 * g, &b, &d));
  ASSERT_OK(cm__storage_vm_map(st, a, 0, 2 * g, g, &d));
  ASSERT_OK(cm__storage_vm_alias(st, b, g, a, 0, 2 * g, g, &d));
  ASSERT_OK(cm__storage_vm_alias(st, a, 2 * g, a, g, g, g, &d)); /* a second alias of A[g, 2g) */
  EXPECT_EQ(cm_storage_bytes_held(st), 2 * g);
  cm_resource_t ra, rb;
  ASSERT_OK(cm_storage_get(st, a, 0, 4 * g, &ra, &d));
  ASSERT_OK(cm_storage_get(st, b, 0, 4 * g, &rb, &d));
  EXPECT(real_write_read(ra.addr, rb.addr + g, 2 * g, 0x3c));     /* original -> alias */
  EXPECT(real_write_read(rb.addr + 2 * g, ra.addr + g, g, 0xc3)); /* alias -> original */
  EXPECT(real_write_read(ra.addr + 2 * g, rb.addr + 2 * g, g, 0x77)); /* alias -> alias */
  EXPECT_STATUS(cm__storage_vm_unmap(st, a, 0, 2 * g, g, &d), CM_EINVAL);
  ASSERT_OK(cm__storage_vm_unalias(st, b, g, 2 * g, g, &d));
  ASSERT_OK(cm__storage_vm_unalias(st, a, 2 * g, g, g, &d));
  ASSERT_OK(cm__storage_vm_unmap(st, a, 0, 2 * g, g, &d));
  ASSERT_OK(cm__storage_vm_release(st, a, 4 * g, &d));
  ASSERT_OK(cm__storage_vm_release(st, b, 4 * g, &d));
  cm_cuda_storage_counters_t cc;
  cm_cuda_storage_counters(st, &cc);
  EXPECT_EQ(cc.free_errors, 0);
  EXPECT_EQ(cm_storage_bytes_held(st), 0);
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
  CM_RUN(test_gpu_sync_and_async);
  CM_RUN(test_gpu_oom_is_not_toobig);
  CM_RUN(test_gpu_events);
  CM_RUN(test_gpu_vm);
  CM_RUN(test_gpu_aliases);
  CM_RUN(test_gpu_pinned);
  CM_RUN(test_gpu_open_default);
  CM_RUN(test_gpu_ptr);
  if (R.lib) {
    R.Release(R.dev);
  }
  return cm_test_finish();
}
