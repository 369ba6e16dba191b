/*
 * torch_cubemem.c - libcubemem_torch.so: cubemem as PyTorch's CUDA allocator
 * (torch.cuda.memory.CUDAPluggableAllocator) and as CuPy's (through ctypes,
 * plugins/cupy_cubemem.py).
 *
 * PyTorch loads two functions by name from this library:
 *   void *cubemem_torch_malloc(ssize_t size, int device, cudaStream_t stream)
 *   void  cubemem_torch_free(void *ptr, ssize_t size, int device, cudaStream_t stream)
 * (signatures from PyTorch's CUDAPluggableAllocator documentation; cudaStream_t
 * is the driver's CUstream, passed here as void *).
 *
 * Design. One cm_ptr allocator per CUDA device ordinal, created on the
 * device's first allocation over a cm_cuda device storage (one manager per
 * stream inside cm_ptr). Process-wide state is this plugin's table of
 * per-device allocators behind one mutex; libcubemem itself keeps none.
 * Settings come from the environment, read once per device:
 *   CUBEMEM_CUDA_ALLOCATOR  sync (default) | async
 *   CUBEMEM_POOLS           a layout for cm_pools_parse, e.g. "subslices",
 *                           "exclusive-pages" or
 *                           "sliced:page=8MiB,max-slice=2MiB;exclusive:max=1GiB"
 *                           (default: cubemem's default layout)
 *   CM_CUDA_LIBRARY         path of the driver library (default libcuda.so.1)
 * A failed allocation returns NULL after printing one line to stderr (PyTorch
 * offers a C allocator no other way to report it); a size of 0 returns NULL.
 *
 * Exports (only these; the linked-in libcubemem is hidden): cubemem_torch_malloc,
 * cubemem_torch_free, cubemem_torch_report, cubemem_torch_reserved,
 * cubemem_torch_peak_reserved, cubemem_torch_in_use, cubemem_torch_empty_cache,
 * cubemem_torch_last_error.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "cubemem/cuda.h"
#include "cubemem/memory.h"
#include "cubemem/ptr.h"

#define CMT_EXPORT __attribute__((visibility("default")))
#define CMT_MAX_DEVICES 64

typedef struct device_slot {
  bool tried;
  cm_cuda_device_t *dev;
  cm_cuda_factory_t factory;
  cm_ptr_allocator_t *alloc;
} device_slot;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static device_slot g_devices[CMT_MAX_DEVICES];
static char g_last_error[600];

CMT_EXPORT void *cubemem_torch_malloc(ssize_t size, int device, void *stream);
CMT_EXPORT void cubemem_torch_free(void *ptr, ssize_t size, int device, void *stream);
CMT_EXPORT size_t cubemem_torch_report(char *buf, size_t cap);
CMT_EXPORT unsigned long long cubemem_torch_reserved(int device);
CMT_EXPORT unsigned long long cubemem_torch_peak_reserved(int device);
CMT_EXPORT unsigned long long cubemem_torch_in_use(int device);
CMT_EXPORT void cubemem_torch_empty_cache(void);
CMT_EXPORT const char *cubemem_torch_last_error(void);

/* Record and print one error line. Caller holds g_lock. */
static void set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void set_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_last_error, sizeof g_last_error, fmt, ap);
  va_end(ap);
  fprintf(stderr, "cubemem_torch: %s\n", g_last_error);
}

/* Caller holds g_lock. Returns the device's allocator, creating it once. */
static cm_ptr_allocator_t *allocator_locked(int device) {
  if (device < 0 || device >= CMT_MAX_DEVICES) return NULL;
  device_slot *s = &g_devices[device];
  if (s->tried) return s->alloc;
  s->tried = true;
  cm_diag_t d = {0};
  cm_cuda_allocator_t kind = CM_CUDA_SYNC;
  const char *k = getenv("CUBEMEM_CUDA_ALLOCATOR");
  if (k && *k && cm_cuda_allocator_parse(k, &kind) != CM_OK) {
    set_error("CUBEMEM_CUDA_ALLOCATOR=%s is not \"sync\" or \"async\"", k);
    return NULL;
  }
  if (cm_cuda_device_open(device, &s->dev, &d) != CM_OK) {
    set_error("cannot open CUDA device %d: %s", device, d.message);
    return NULL;
  }
  cm_ptr_config_t cfg;
  cm_ptr_config_init(&cfg);
  cfg.props = cm_cuda_device_props(s->dev);
  s->factory.device = s->dev;
  s->factory.kind = kind;
  cfg.factory = cm_cuda_storage_factory;
  cfg.factory_arg = &s->factory;
  static cm_pool_options_t pools[CM_MAX_DYNAMIC_POOLS];
  const char *layout = getenv("CUBEMEM_POOLS");
  if (layout && *layout) {
    size_t n = 0;
    if (cm_pools_parse(layout, cfg.props, pools, CM_MAX_DYNAMIC_POOLS, &n, &d) != CM_OK) {
      set_error("CUBEMEM_POOLS: %s", d.message);
      cm_cuda_device_close(s->dev);
      s->dev = NULL;
      return NULL;
    }
    cfg.pools = pools;
    cfg.pool_count = n;
  }
  if (cm_ptr_allocator_create(&cfg, &s->alloc, &d) != CM_OK) {
    set_error("cannot create the allocator: %s", d.message);
    cm_cuda_device_close(s->dev);
    s->dev = NULL;
    s->alloc = NULL;
  }
  return s->alloc;
}

static cm_ptr_allocator_t *existing(int device) {
  if (device < 0 || device >= CMT_MAX_DEVICES) return NULL;
  pthread_mutex_lock(&g_lock);
  cm_ptr_allocator_t *a = g_devices[device].alloc;
  pthread_mutex_unlock(&g_lock);
  return a;
}

void *cubemem_torch_malloc(ssize_t size, int device, void *stream) {
  if (size <= 0) return NULL;
  pthread_mutex_lock(&g_lock);
  cm_ptr_allocator_t *a = allocator_locked(device);
  pthread_mutex_unlock(&g_lock);
  if (!a) return NULL; /* the reason was printed when the device was first tried */
  void *p = NULL;
  cm_diag_t d = {0};
  int rc = cm_ptr_alloc(a, (uint64_t)size, stream, &p, &d);
  if (rc != CM_OK) {
    pthread_mutex_lock(&g_lock);
    set_error("cannot allocate %zd bytes on cuda:%d: %s", size, device,
              d.message[0] ? d.message : cm_strerror(rc));
    pthread_mutex_unlock(&g_lock);
    return NULL;
  }
  return p;
}

void cubemem_torch_free(void *ptr, ssize_t size, int device, void *stream) {
  (void)size;
  if (!ptr) return;
  cm_ptr_allocator_t *a = existing(device);
  if (!a || cm_ptr_free(a, ptr, stream) != CM_OK) {
    pthread_mutex_lock(&g_lock);
    set_error("free of a pointer cubemem did not allocate (or freed twice): %p on cuda:%d", ptr,
              device);
    pthread_mutex_unlock(&g_lock);
  }
}

size_t cubemem_torch_report(char *buf, size_t cap) {
  size_t len = 0;
  if (buf && cap) buf[0] = '\0';
  for (int i = 0; i < CMT_MAX_DEVICES; i++) {
    cm_ptr_allocator_t *a = existing(i);
    if (!a) continue;
    size_t room = len < cap ? cap - len : 0;
    int n = snprintf(room ? buf + len : NULL, room, "cuda:%d (%s):\n", i,
                     cm_cuda_device_name(g_devices[i].dev));
    if (n > 0) len += (size_t)n;
    room = len < cap ? cap - len : 0;
    len += cm_ptr_report(a, room ? buf + len : NULL, room);
  }
  return len;
}

unsigned long long cubemem_torch_reserved(int device) {
  cm_ptr_usage_t u;
  cm_ptr_allocator_t *a = existing(device);
  return (a && cm_ptr_usage(a, &u) == CM_OK) ? u.total.bytes_reserved : 0;
}

unsigned long long cubemem_torch_peak_reserved(int device) {
  cm_ptr_usage_t u;
  cm_ptr_allocator_t *a = existing(device);
  return (a && cm_ptr_usage(a, &u) == CM_OK) ? u.bytes_reserved_peak : 0;
}

unsigned long long cubemem_torch_in_use(int device) {
  cm_ptr_usage_t u;
  cm_ptr_allocator_t *a = existing(device);
  return (a && cm_ptr_usage(a, &u) == CM_OK) ? u.total.bytes_in_use : 0;
}

void cubemem_torch_empty_cache(void) {
  for (int i = 0; i < CMT_MAX_DEVICES; i++) cm_ptr_empty_cache(existing(i));
}

const char *cubemem_torch_last_error(void) { return g_last_error; }
