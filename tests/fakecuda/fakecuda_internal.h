/*
 * fakecuda_internal.h - what the two files of libfakecuda.so share (tests
 * only; never installed): the driver ABI as the fake declares it, the state
 * tables, the locking macros and the rule checks. fakecuda.c holds the CUDA
 * entry points, fakecuda_state.c the state, the checks and the control
 * interface of fakecuda.h. Only FX symbols are exported (the library is built
 * with hidden visibility), so nothing here is visible outside the library.
 *
 * Storage: small dynamic arrays scanned linearly (the fake serves tests and
 * replays with at most a few thousand live objects). One global mutex.
 * The checks declared below expect their caller to hold G.lock.
 */
#ifndef FAKECUDA_INTERNAL_H
#define FAKECUDA_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "fakecuda.h"

/* An exported entry point. */
#define FX __attribute__((visibility("default")))

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUstream;
typedef void *CUevent;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long CUhandle;

enum {
  R_OK = 0,
  R_INVALID_VALUE = 1,
  R_OOM = 2,
  R_NOT_INITIALIZED = 3,
  R_NO_DEVICE = 100,
  R_INVALID_DEVICE = 101,
  R_INVALID_CONTEXT = 201,
  R_PEER_UNSUPPORTED = 217,
  R_INVALID_HANDLE = 400,
  R_NOT_READY = 600,
  R_NOT_SUPPORTED = 801,
  R_UNKNOWN = 999,
};

typedef struct fk_loc {
  int type, id;
} fk_loc;
typedef struct fk_prop {
  int type, handle_types;
  fk_loc loc;
  void *win32;
  unsigned char flags[8];
} fk_prop;
typedef struct fk_access {
  fk_loc loc;
  int flags;
} fk_access;

#define MAXDEV 8
#define DEV_BASE 40 /* CUdevice handle = ordinal + DEV_BASE */
#define STREAM_BASE 0x50000000ull
#define EVENT_BASE 0xe0000000ull

enum { A_SYNC = 1, A_ASYNC = 2 };

typedef struct alloc_rec {
  CUdeviceptr ptr;
  uint64_t size;
  int kind, dev;
} alloc_rec;
typedef struct host_rec {
  void *p;
  uint64_t size;
} host_rec;
typedef struct resv_rec {
  CUdeviceptr base;
  uint64_t size;
} resv_rec;
typedef struct handle_rec {
  CUhandle h;
  uint64_t size;
  int dev;
  int maps; /* live mappings of it (the same handle may be mapped at several addresses) */
  int refs; /* references: cuMemCreate's and one per cuMemRetainAllocationHandle, each
               dropped by one cuMemRelease; the handle is live while refs > 0, and the
               memory goes when refs and maps are both 0 */
} handle_rec;
typedef struct map_rec {
  CUdeviceptr va;
  uint64_t size;
  CUhandle h;
  int dev;
  unsigned access; /* bit per device with read-write access */
} map_rec;
typedef struct stream_rec {
  bool live;
  uint64_t uid, seq;
} stream_rec;
typedef struct event_rec {
  bool live, recorded;
  uint64_t uid, seq;
} event_rec;
typedef struct work_rec {
  uint64_t uid, seq;
  CUdeviceptr ptr;
  uint64_t size;
  bool orphan; /* its stream was destroyed */
} work_rec;

#define VEC(T)      \
  struct {          \
    T *v;           \
    size_t n, cap;  \
  }
typedef struct fk_state {
  pthread_mutex_t lock;
  fakecuda_config_t cfg;
  bool initialized;
  int retains[MAXDEV];
  int ctx_obj[MAXDEV]; /* a context handle is &ctx_obj[d] */
  CUdeviceptr next_va;
  uint64_t next_handle, next_uid;
  uint64_t host_used;
  VEC(alloc_rec) allocs;
  VEC(host_rec) hosts;
  VEC(resv_rec) resvs;
  VEC(handle_rec) handles;
  VEC(map_rec) maps; /* sorted by va */
  VEC(stream_rec) streams;
  VEC(event_rec) events;
  VEC(work_rec) work;
  uint64_t legacy_seq;
  fakecuda_counts_t c;
  char last[8][256];
  unsigned nlast;
} fk_state;

/* The whole fake driver (fakecuda_state.c). */
extern fk_state G;
/* The current context stack of this thread: contexts are &G.ctx_obj[d]. */
extern __thread void *tls_stack[64];
extern __thread int tls_depth;

#define PUSH(vec, val)                                                       \
  do {                                                                       \
    if ((vec).n == (vec).cap) {                                              \
      size_t nc = (vec).cap ? (vec).cap * 2 : 16;                            \
      void *nv = realloc((vec).v, nc * sizeof *(vec).v);                     \
      if (!nv) abort();                                                      \
      (vec).v = nv;                                                          \
      (vec).cap = nc;                                                        \
    }                                                                        \
    (vec).v[(vec).n++] = (val);                                              \
  } while (0)
#define DROP(vec, i) ((vec).v[i] = (vec).v[--(vec).n])

#define LOCK() pthread_mutex_lock(&G.lock)
#define UNLOCK() pthread_mutex_unlock(&G.lock)
#define RET(x)          \
  do {                  \
    CUresult r__ = (x); \
    UNLOCK();           \
    return r__;         \
  } while (0)

/* Count and remember a violation (printf-style message); returns code. */
CUresult violation(CUresult code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Ordinal of the current context's device, or -1 without one. */
int current_dev(void);
/* Common preamble: initialised, and (when need_ctx) a current context. */
CUresult check_init(const char *fn, bool need_ctx);
/* Whether d is a device ordinal. */
bool ordinal_ok(int d);
/* Device memory per device. */
uint64_t dev_capacity(void);
/* Count n more bytes used on device dev (and its peak). */
void use(int dev, uint64_t n);
/* A fresh virtual address range of size bytes, aligned, with a guard gap. */
CUdeviceptr bump_va(uint64_t size, uint64_t align);
/* The record of a created stream; NULL with *legacy for the built-in ones. */
stream_rec *stream_of(CUstream s, bool *legacy);
/* A live stream's uid and work sequence counter, or a violation. */
CUresult check_stream(const char *fn, CUstream s, uint64_t *uid, uint64_t **seq);
/* The record of a live event, or NULL. */
event_rec *event_of(CUevent e);
/* Whether [a, a+an) and [b, b+bn) overlap. */
bool overlaps(CUdeviceptr a, uint64_t an, CUdeviceptr b, uint64_t bn);
/* Pending work other than stream uid that uses [p, p+n). */
work_rec *pending_on(CUdeviceptr p, uint64_t n, uint64_t uid, bool orphans_only);
/* Complete (drop) the pending work for which pred holds. */
void complete_where(bool (*pred)(const work_rec *, const void *), const void *arg);
/* complete_where predicates: all work, one stream's (arg: uint64_t uid), the
 * work an event covers (arg: event_rec), the work on a range (arg: {ptr, size}). */
bool w_all(const work_rec *w, const void *a);
bool w_stream(const work_rec *w, const void *a);
bool w_event(const work_rec *w, const void *a);
bool w_range(const work_rec *w, const void *a);
/* The live allocation starting at p (its index in *idx), or NULL. */
alloc_rec *find_alloc(CUdeviceptr p, size_t *idx);
/* The reservation holding all of [p, p+n), or NULL. */
resv_rec *resv_containing(CUdeviceptr p, uint64_t n);
/* The memory handle h (its index in *idx), or NULL. */
handle_rec *find_handle(CUhandle h, size_t *idx);
/* First mapping whose end is above va. */
size_t map_lower(CUdeviceptr va);
/* Whether [p, p+n) is mapped without gaps; the mappings in [*first, +*count). */
bool fully_mapped(CUdeviceptr p, uint64_t n, size_t *first, size_t *count);
/* Drop handle idx (and its memory) once every reference is released and
 * it is no longer mapped anywhere. */
void handle_drop_if_done(size_t idx);
/* May work on `stream` read and write [p, p+size): allocated, or mapped with
 * read-write access for the current device, and no pending work of a
 * destroyed stream on it? R_OK (uid and sequence counter of the stream set),
 * or the violation. Queues nothing. */
CUresult check_work(const char *fn, void *stream, CUdeviceptr p, size_t size, uint64_t *uid,
                    uint64_t **seq);
/* Queue work that check_work allowed. */
void queue_work(uint64_t uid, uint64_t *seq, CUdeviceptr p, size_t size);

#endif
