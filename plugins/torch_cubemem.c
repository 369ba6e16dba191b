/*
 * torch_cubemem.c - libcubemem_torch.so: cubemem as PyTorch's CUDA allocator
 * (torch.cuda.memory.CUDAPluggableAllocator) and as CuPy's (through ctypes,
 * plugins/cupy_cubemem.py, python/cubemem).
 *
 * PyTorch loads two functions by name from this library:
 *   void *cubemem_torch_malloc(ssize_t size, int device, cudaStream_t stream)
 *   void  cubemem_torch_free(void *ptr, ssize_t size, int device, cudaStream_t stream)
 * PyTorch does not check the pointer malloc returns, so a failure must be a
 * C++ exception: those two entry points live in torch_cubemem_alloc.cpp (the
 * only C++ here), which calls cmt__alloc() below and throws what it reports.
 * Without a C++ compiler they are defined here and return NULL on failure
 * (documented as unsafe for PyTorch in docs/cuda.md). Everything else is C.
 *
 * Design. One cm_ptr allocator per CUDA device ordinal, created on the
 * device's first allocation over a cm_cuda device storage (one manager per
 * stream inside cm_ptr, with stream identity checks so a destroyed stream's
 * memory is not reused by a new stream that got its handle). A device that
 * fails to open is tried again by the next allocation; the error says why.
 * Process-wide state is this plugin's table of per-device allocators behind
 * one mutex; libcubemem itself keeps none. Settings come from the
 * environment, read when a device is opened:
 *   CUBEMEM_CUDA_ALLOCATOR  sync (default) | async
 *   CUBEMEM_POOLS           a layout for cm_pools_parse
 *   CUBEMEM_LOG             PATH: write every allocation, free and failure in
 *                           RAPIDS RMM's CSV layout (what `cubemem replay`
 *                           reads); read at the first allocation. The log is
 *                           a consistent trace (allocations and frees are
 *                           serialised with their rows while it is open); a
 *                           failed write stops it and is reported through
 *                           cubemem_torch_last_error()
 *   CM_CUDA_LIBRARY         path of the driver library (default libcuda.so.1)
 * The plugin never prints; errors are thrown (C++ entry points), returned
 * (cubemem_torch_try_malloc) and kept for cubemem_torch_last_error().
 *
 * Exports (only these; the linked-in libcubemem is hidden): see
 * plugins/torch_cubemem.h.
 */
#include <inttypes.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>

#include "cubemem/cuda.h"
#include "cubemem/memory.h"
#include "cubemem/ptr.h"
#include "torch_cubemem.h"

#define CMT_MAX_DEVICES 64

typedef struct device_slot {
  cm_cuda_device_t *dev;
  cm_cuda_factory_t factory;
  cm_ptr_allocator_t *alloc;
  cm_pool_options_t pools[CM_MAX_DYNAMIC_POOLS];
} device_slot;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static device_slot g_devices[CMT_MAX_DEVICES];
static char g_last_error[1024];

/* Record the latest error. Caller holds g_lock. */
static void set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void set_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_last_error, sizeof g_last_error, fmt, ap);
  va_end(ap);
}

/* ---- CUBEMEM_LOG: the RMM CSV log -------------------------------------------
 *
 * The log must be a consistent trace: an address is never logged as
 * allocated again before its free is logged. So while the log is open (or
 * not opened yet), every allocation and free runs together with its log
 * record under g_log_lock; otherwise a free logged after cm_ptr_free returns
 * could follow another thread's allocation of the same address. Logging is
 * a recording mode: the serialisation costs nothing without CUBEMEM_LOG,
 * where the state is "no log" and no lock is taken.
 *
 * The state is "not tried" until the open has finished (threads meanwhile
 * wait on the lock, so no event is lost however slow the open is), then
 * "open" or "no log". A write that fails (full disk, closed pipe) stops the
 * log: the file keeps a consistent prefix of the trace and
 * cubemem_torch_last_error() says where it ends and why. Lock order:
 * g_log_lock before g_lock. */

static pthread_mutex_t g_log_lock = PTHREAD_MUTEX_INITIALIZER;
static FILE *g_log;
static char g_log_path[512];
static uint64_t g_log_events; /* rows handed to stdio, under g_log_lock */
static atomic_int g_log_state; /* 0: not tried yet, 1: open, 2: no log */
static struct timespec g_log_t0;
static atomic_int g_next_thread = 1;
static __thread int t_thread_id;

/* Stop logging after a failed write, flush or close (errno e). Caller holds
 * g_log_lock; the file is already closed when `closed`. */
static void log_failed(const char *what, int e, bool closed) {
  if (!closed && g_log) (void)fclose(g_log);
  g_log = NULL;
  atomic_store(&g_log_state, 2);
  pthread_mutex_lock(&g_lock);
  set_error("CUBEMEM_LOG=%s: %s failed at event %" PRIu64 " (%s); logging stopped, the log is "
            "incomplete",
            g_log_path, what, g_log_events + 1, e ? strerror(e) : "write error");
  pthread_mutex_unlock(&g_lock);
}

/* Flush the log; caller holds g_log_lock. */
static void log_flush_locked(void) {
  if (!g_log) return;
  errno = 0;
  if (fflush(g_log) != 0 || ferror(g_log)) log_failed("writing", errno, false);
}

static void log_close(void) {
  pthread_mutex_lock(&g_log_lock);
  if (g_log) {
    errno = 0;
    bool bad = ferror(g_log) != 0;
    FILE *f = g_log;
    if (fclose(f) != 0 || bad) log_failed("closing", errno, true);
  }
  g_log = NULL;
  pthread_mutex_unlock(&g_log_lock);
}

/* Open the log on first use. Caller holds g_log_lock. */
static FILE *log_file(void) {
  int state = atomic_load(&g_log_state);
  if (state) return state == 1 ? g_log : NULL;
  const char *path = getenv("CUBEMEM_LOG");
  if (!path || !*path) {
    atomic_store(&g_log_state, 2);
    return NULL;
  }
  snprintf(g_log_path, sizeof g_log_path, "%s", path);
  g_log = fopen(path, "w");
  if (!g_log) {
    int e = errno;
    atomic_store(&g_log_state, 2);
    pthread_mutex_lock(&g_lock);
    set_error("CUBEMEM_LOG=%s cannot be opened for writing (%s); nothing is logged", path,
              strerror(e));
    pthread_mutex_unlock(&g_lock);
    return NULL;
  }
  clock_gettime(CLOCK_MONOTONIC, &g_log_t0);
  atexit(log_close);
  atomic_store(&g_log_state, 1);
  errno = 0;
  if (fputs("Thread,Time,Action,Pointer,Size,Stream\n", g_log) < 0) {
    log_failed("writing", errno, false);
    return NULL;
  }
  return g_log;
}

/* True when allocations and frees must be logged (and so serialised). No
 * lock: "no log" is final. */
static bool log_wanted(void) { return atomic_load(&g_log_state) != 2; }

/* Write one row. Caller holds g_log_lock. */
static void log_event_locked(const char *action, const void *ptr, uint64_t size, const void *stream) {
  FILE *f = log_file();
  if (!f) return;
  if (!t_thread_id) t_thread_id = atomic_fetch_add(&g_next_thread, 1);
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  int64_t us = (int64_t)(now.tv_sec - g_log_t0.tv_sec) * 1000000 +
               (now.tv_nsec - g_log_t0.tv_nsec) / 1000;
  if (us < 0) us = 0;
  errno = 0;
  int n = fprintf(f, "%d,%02" PRId64 ":%02" PRId64 ":%02" PRId64 ".%06" PRId64 ",%s,%#" PRIxPTR
                     ",%" PRIu64 ",%#" PRIxPTR "\n",
                  t_thread_id, us / 3600000000, us / 60000000 % 60, us / 1000000 % 60,
                  us % 1000000, action, (uintptr_t)ptr, size, (uintptr_t)stream);
  if (n < 0 || ferror(f)) {
    log_failed("writing", errno, false);
    return;
  }
  g_log_events++;
}

/* ---- devices -------------------------------------------------------------------- */

/* Caller holds g_lock. Returns the device's allocator, opening the device
 * when it is not open yet (again after a failure). */
static cm_ptr_allocator_t *allocator_locked(int device, cm_diag_t *d) {
  if (device < 0 || device >= CMT_MAX_DEVICES) {
    cm_diag_clear(d);
    snprintf(d->message, sizeof d->message, "CUDA device %d is out of range (0..%d)", device,
             CMT_MAX_DEVICES - 1);
    d->code = CM_EINVAL;
    return NULL;
  }
  device_slot *s = &g_devices[device];
  if (s->alloc) return s->alloc;
  cm_cuda_allocator_t kind = CM_CUDA_SYNC;
  const char *k = getenv("CUBEMEM_CUDA_ALLOCATOR");
  if (k && *k && cm_cuda_allocator_parse(k, &kind) != CM_OK) {
    snprintf(d->message, sizeof d->message, "CUBEMEM_CUDA_ALLOCATOR=%s is not \"sync\" or \"async\"", k);
    d->code = CM_ECONFIG;
    return NULL;
  }
  cm_diag_t od = {0};
  if (cm_cuda_device_open(device, &s->dev, &od) != CM_OK) {
    snprintf(d->message, sizeof d->message,
             "cannot open CUDA device %d: %s (tried again at the next allocation)", device,
             od.message);
    d->code = od.code;
    return NULL;
  }
  cm_ptr_config_t cfg;
  cm_ptr_config_init(&cfg);
  cfg.props = cm_cuda_device_props(s->dev);
  s->factory.device = s->dev;
  s->factory.kind = kind;
  cfg.factory = cm_cuda_storage_factory;
  cfg.factory_arg = &s->factory;
  cfg.stream_identity = cm_cuda_stream_identity_fn; /* streams CuPy destroys */
  cfg.stream_retire = cm_cuda_storage_retire_fn;
  cfg.event_record = cm_cuda_event_record_fn; /* record_stream */
  cfg.event_query = cm_cuda_event_query_fn;
  cfg.event_destroy = cm_cuda_event_destroy_fn;
  const char *layout = getenv("CUBEMEM_POOLS");
  cm_diag_t pd = {0};
  if (layout && *layout) {
    size_t n = 0;
    if (cm_pools_parse(layout, cfg.props, s->pools, CM_MAX_DYNAMIC_POOLS, &n, &pd) != CM_OK) {
      snprintf(d->message, sizeof d->message, "CUBEMEM_POOLS: %s", pd.message);
      d->code = CM_ECONFIG;
      cm_cuda_device_close(s->dev);
      s->dev = NULL;
      return NULL;
    }
    cfg.pools = s->pools;
    cfg.pool_count = n;
  }
  if (cm_ptr_allocator_create(&cfg, &s->alloc, &pd) != CM_OK) {
    snprintf(d->message, sizeof d->message, "cannot create the allocator: %s", pd.message);
    d->code = pd.code;
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

/* PyTorch's units: "20.00 MiB", "79.19 GiB". */
static void fmt_mib(uint64_t b, char *out, size_t cap) {
  if (b >= (1ull << 30)) snprintf(out, cap, "%.2f GiB", (double)b / (double)(1ull << 30));
  else if (b >= (1ull << 20)) snprintf(out, cap, "%.2f MiB", (double)b / (double)(1ull << 20));
  else if (b >= 1024) snprintf(out, cap, "%.2f KiB", (double)b / 1024.0);
  else snprintf(out, cap, "%" PRIu64 " bytes", b);
}

static int alloc_impl(ssize_t size, int device, void *stream, void **out, char *msg, size_t cap,
                      bool logging);

int cmt__alloc(ssize_t size, int device, void *stream, void **out, char *msg, size_t cap) {
  *out = NULL;
  if (msg && cap) msg[0] = '\0';
  if (size <= 0) {
    /* no allocation, no error: an earlier call's message must not read as
     * this one's */
    pthread_mutex_lock(&g_lock);
    g_last_error[0] = '\0';
    pthread_mutex_unlock(&g_lock);
    return CMT_OK;
  }
  if (!log_wanted()) return alloc_impl(size, device, stream, out, msg, cap, false);
  pthread_mutex_lock(&g_log_lock);
  int rc = alloc_impl(size, device, stream, out, msg, cap, true);
  pthread_mutex_unlock(&g_log_lock);
  return rc;
}

/* The allocation; with `logging`, the caller holds g_log_lock and the
 * result is logged before it is released. */
static int alloc_impl(ssize_t size, int device, void *stream, void **out, char *msg, size_t cap,
                      bool logging) {
  cm_diag_t d = {0};
  pthread_mutex_lock(&g_lock);
  cm_ptr_allocator_t *a = allocator_locked(device, &d);
  if (!a) {
    set_error("cannot allocate %zd bytes on cuda:%d: %s", size, device, d.message);
    snprintf(msg, cap, "%s", g_last_error);
    pthread_mutex_unlock(&g_lock);
    if (logging) log_event_locked("allocate failure", NULL, (uint64_t)size, stream);
    return CMT_ERROR;
  }
  pthread_mutex_unlock(&g_lock);
  int rc = cm_ptr_alloc(a, (uint64_t)size, stream, out, &d);
  if (rc == CM_OK) {
    if (logging) log_event_locked("allocate", *out, (uint64_t)size, stream);
    return CMT_OK;
  }
  if (logging) log_event_locked("allocate failure", NULL, (uint64_t)size, stream);
  bool oom = rc == CM_EOOM || rc == CM_ECAPACITY;
  char req[32], tot[32], fr[32], held[32], used[32], cached[32];
  fmt_mib((uint64_t)size, req, sizeof req);
  uint64_t free_b = 0, total_b = 0;
  cm_ptr_usage_t u = {0};
  (void)cm_ptr_usage(a, &u);
  pthread_mutex_lock(&g_lock);
  cm_diag_t md = {0};
  bool have_info = cm_cuda_device_mem_info(g_devices[device].dev, &free_b, &total_b, &md) == CM_OK;
  fmt_mib(total_b, tot, sizeof tot);
  fmt_mib(free_b, fr, sizeof fr);
  fmt_mib(u.total.bytes_reserved, held, sizeof held);
  fmt_mib(u.total.bytes_in_use, used, sizeof used);
  fmt_mib(u.total.bytes_reserved - u.total.bytes_in_use, cached, sizeof cached);
  const char *why = d.message[0] ? d.message : cm_strerror(rc);
  if (oom && have_info)
    set_error("CUDA out of memory. Tried to allocate %s. GPU %d has a total capacity of %s of "
              "which %s is free. cubemem holds %s: %s allocated and %s reserved but unallocated "
              "(cached). cubemem: %s. Try torch.cuda.empty_cache() through cubemem "
              "(cubemem.torch.empty_cache()) or a layout with less overhead (CUBEMEM_POOLS).",
              req, device, tot, fr, held, used, cached, why);
  else if (oom)
    set_error("CUDA out of memory. Tried to allocate %s on GPU %d (device memory unknown: %s). "
              "cubemem holds %s: %s allocated and %s cached. cubemem: %s.",
              req, device, md.message, held, used, cached, why);
  else
    set_error("cubemem cannot allocate %s (%zd bytes) on cuda:%d: %s", req, size, device, why);
  snprintf(msg, cap, "%s", g_last_error);
  pthread_mutex_unlock(&g_lock);
  return oom ? CMT_OOM : CMT_ERROR;
}

void cmt__free(void *ptr, int device, void *stream) {
  if (!ptr) return;
  cm_ptr_allocator_t *a = existing(device);
  /* logged before the memory can be reused: the free and its row together
   * under g_log_lock, which every logged allocation holds too */
  bool logging = log_wanted();
  if (logging) pthread_mutex_lock(&g_log_lock);
  bool ok = a && cm_ptr_free(a, ptr, stream) == CM_OK;
  if (ok && logging) log_event_locked("free", ptr, 0, stream);
  if (logging) pthread_mutex_unlock(&g_log_lock);
  if (!ok) {
    pthread_mutex_lock(&g_lock);
    set_error("free of a pointer cubemem did not allocate (or freed twice): %p on cuda:%d", ptr,
              device);
    pthread_mutex_unlock(&g_lock);
  }
}

#ifndef CMT_HAVE_CXX
/* No C++ compiler: C entry points that cannot throw. PyTorch does not check
 * for NULL; see docs/cuda.md. */
void *cubemem_torch_malloc(ssize_t size, int device, void *stream) {
  void *p = NULL;
  (void)cmt__alloc(size, device, stream, &p, NULL, 0);
  return p;
}
void cubemem_torch_free(void *ptr, ssize_t size, int device, void *stream) {
  (void)size;
  cmt__free(ptr, device, stream);
}
#endif

void *cubemem_torch_try_malloc(ssize_t size, int device, void *stream) {
  void *p = NULL;
  (void)cmt__alloc(size, device, stream, &p, NULL, 0);
  return p;
}

void cubemem_torch_try_free(void *ptr, ssize_t size, int device, void *stream) {
  (void)size;
  cmt__free(ptr, device, stream);
}

/* ---- reporting and hooks ------------------------------------------------------------ */

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

int cubemem_torch_stats(int device, cubemem_torch_stats_t *out) {
  if (!out) return -1;
  memset(out, 0, sizeof *out);
  cm_ptr_allocator_t *a = existing(device);
  if (!a) return 0;
  cm_ptr_usage_t u;
  if (cm_ptr_usage(a, &u) != CM_OK) return -1;
  out->in_use = u.total.bytes_in_use;
  out->reserved = u.total.bytes_reserved;
  out->peak_reserved = u.bytes_reserved_peak;
  out->peak_in_use = u.bytes_in_use_peak;
  out->cached = u.total.bytes_reserved - u.total.bytes_in_use;
  out->padding = u.total.bytes_padding;
  out->allocs = u.allocs;
  out->frees = u.frees;
  out->failed = u.failed_allocs;
  out->retries = u.retries;
  out->live = u.live_pointers;
  out->streams = u.streams;
  out->storage_allocs = u.storage_allocs;
  out->storage_time_ns = u.storage_time_ns;
  pthread_mutex_lock(&g_lock);
  uint64_t f = 0, t = 0;
  if (cm_cuda_device_mem_info(g_devices[device].dev, &f, &t, NULL) == CM_OK) {
    out->device_free = f;
    out->device_total = t;
  }
  pthread_mutex_unlock(&g_lock);
  return 1;
}

unsigned long long cubemem_torch_reserved(int device) {
  cubemem_torch_stats_t s;
  return cubemem_torch_stats(device, &s) > 0 ? s.reserved : 0;
}

unsigned long long cubemem_torch_peak_reserved(int device) {
  cubemem_torch_stats_t s;
  return cubemem_torch_stats(device, &s) > 0 ? s.peak_reserved : 0;
}

unsigned long long cubemem_torch_in_use(int device) {
  cubemem_torch_stats_t s;
  return cubemem_torch_stats(device, &s) > 0 ? s.in_use : 0;
}

void cubemem_torch_empty_cache(void) {
  for (int i = 0; i < CMT_MAX_DEVICES; i++) cm_ptr_empty_cache(existing(i));
  pthread_mutex_lock(&g_log_lock);
  log_flush_locked();
  pthread_mutex_unlock(&g_log_lock);
}

int cubemem_torch_record_stream(void *ptr, void *stream) {
  if (!ptr) return CM_EINVAL;
  int rc = CM_ENOTFOUND;
  for (int i = 0; i < CMT_MAX_DEVICES && rc == CM_ENOTFOUND; i++) {
    cm_ptr_allocator_t *a = existing(i);
    if (a) rc = cm_ptr_record_stream(a, ptr, stream);
  }
  if (rc != CM_OK) {
    pthread_mutex_lock(&g_lock);
    set_error("record_stream(%p, stream %p): %s", ptr, stream,
              rc == CM_ENOTFOUND ? "not a live pointer of cubemem" : cm_strerror(rc));
    pthread_mutex_unlock(&g_lock);
  }
  return rc;
}

void cubemem_torch_retire_stream(int device, void *stream) {
  cm_ptr_retire_stream(existing(device), stream);
}

int cubemem_torch_enable_peer_access(int device, int peer) {
  cm_diag_t d = {0};
  pthread_mutex_lock(&g_lock);
  int rc = CM_OK;
  if (!allocator_locked(device, &d)) rc = d.code ? d.code : CM_ENODEV;
  else rc = cm_cuda_device_enable_peer_access(g_devices[device].dev, peer, &d);
  if (rc != CM_OK) set_error("cannot give cuda:%d access to cuda:%d memory: %s", peer, device, d.message);
  pthread_mutex_unlock(&g_lock);
  return rc;
}

const char *cubemem_torch_last_error(void) { return g_last_error; }
