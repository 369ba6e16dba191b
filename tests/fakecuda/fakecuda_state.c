/*
 * fakecuda_state.c - the state of libfakecuda.so (fakecuda_internal.h): the
 * configuration, the tables of live objects, the rule checks the entry points
 * in fakecuda.c share, and the control interface of fakecuda.h (reset,
 * counts, report, launching work).
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fakecuda_internal.h"

fk_state G = {.lock = PTHREAD_MUTEX_INITIALIZER};

__thread void *tls_stack[64];
__thread int tls_depth;

/* ---- configuration -------------------------------------------------------- */

static uint64_t env_size(const char *name, uint64_t def) {
  const char *s = getenv(name);
  if (!s || !*s) return def;
  char *end = NULL;
  unsigned long long v = strtoull(s, &end, 10);
  switch (*end) {
    case 'k': case 'K': v <<= 10; break;
    case 'm': case 'M': v <<= 20; break;
    case 'g': case 'G': v <<= 30; break;
    case 't': case 'T': v <<= 40; break;
    default: break;
  }
  return v;
}

static void load_config(void) {
  fakecuda_config_t *c = &G.cfg;
  memset(c, 0, sizeof *c);
  c->devices = (int)env_size("FAKECUDA_DEVICES", 1);
  if (c->devices < 0) c->devices = 0;
  if (c->devices > MAXDEV) c->devices = MAXDEV;
  c->capacity = env_size("FAKECUDA_CAPACITY", 80ull << 30);
  c->host_capacity = env_size("FAKECUDA_HOST_CAPACITY", 64ull << 30);
  c->granularity = env_size("FAKECUDA_GRANULARITY", 2ull << 20);
  if (!c->granularity || (c->granularity & (c->granularity - 1))) c->granularity = 2ull << 20;
  c->vmm = (int)env_size("FAKECUDA_VMM", 1) != 0;
  c->mempool = (int)env_size("FAKECUDA_MEMPOOL", 1) != 0;
  c->peer = (int)env_size("FAKECUDA_PEER", 1) != 0;
  c->reuse_streams = 1;
  c->verbose = (int)env_size("FAKECUDA_VERBOSE", 0) != 0;
  c->create_delay_ns = env_size("FAKECUDA_CREATE_DELAY_NS", 0);
}

static void clear_state(void) {
  free(G.allocs.v);
  for (size_t i = 0; i < G.hosts.n; i++) free(G.hosts.v[i].p);
  free(G.hosts.v);
  free(G.resvs.v);
  free(G.handles.v);
  free(G.maps.v);
  free(G.streams.v);
  free(G.events.v);
  free(G.work.v);
  memset(&G.allocs, 0, sizeof G.allocs);
  memset(&G.hosts, 0, sizeof G.hosts);
  memset(&G.resvs, 0, sizeof G.resvs);
  memset(&G.handles, 0, sizeof G.handles);
  memset(&G.maps, 0, sizeof G.maps);
  memset(&G.streams, 0, sizeof G.streams);
  memset(&G.events, 0, sizeof G.events);
  memset(&G.work, 0, sizeof G.work);
  memset(&G.c, 0, sizeof G.c);
  memset(G.retains, 0, sizeof G.retains);
  memset(G.last, 0, sizeof G.last);
  G.nlast = 0;
  G.initialized = false;
  G.next_va = 0x7f0000000000ull;
  G.next_handle = 0x1000;
  G.next_uid = 100;
  G.host_used = 0;
  G.legacy_seq = 0;
  tls_depth = 0;
}

static void write_report_at_exit(void);

__attribute__((constructor)) static void fk_load(void) {
  clear_state();
  load_config();
  atexit(write_report_at_exit);
}

/* ---- helpers (caller holds the lock) ------------------------------------------ */

CUresult violation(CUresult code, const char *fmt, ...) {
  char *slot = G.last[G.nlast++ % 8];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(slot, sizeof G.last[0], fmt, ap);
  va_end(ap);
  G.c.violations++;
  if (G.cfg.verbose) fprintf(stderr, "fakecuda: violation: %s\n", slot);
  return code;
}

int current_dev(void) {
  if (tls_depth <= 0) return -1;
  int *obj = tls_stack[tls_depth - 1];
  return (int)(obj - G.ctx_obj);
}

/* Common preamble: initialised, and (when need_ctx) a current context. */
CUresult check_init(const char *fn, bool need_ctx) {
  if (!G.initialized) return violation(R_NOT_INITIALIZED, "%s before cuInit", fn);
  if (need_ctx && current_dev() < 0)
    return violation(R_INVALID_CONTEXT, "%s without a current context", fn);
  return R_OK;
}

bool ordinal_ok(int d) { return d >= 0 && d < G.cfg.devices; }

uint64_t dev_capacity(void) { return G.cfg.capacity; }

void use(int dev, uint64_t n) {
  G.c.used[dev] += n;
  if (G.c.used[dev] > G.c.used_peak[dev]) G.c.used_peak[dev] = G.c.used[dev];
}

CUdeviceptr bump_va(uint64_t size, uint64_t align) {
  if (align < 4096) align = 4096;
  CUdeviceptr p = (G.next_va + align - 1) & ~(CUdeviceptr)(align - 1);
  G.next_va = p + ((size + 4095) & ~(uint64_t)4095) + 4096; /* a guard gap */
  return p;
}

/* Streams: 0 (NULL) and 1 (CU_STREAM_LEGACY) are the legacy stream, 2 is
 * CU_STREAM_PER_THREAD; created streams are STREAM_BASE + 16 * slot. Returns
 * the stream record, or NULL with *legacy set for the built-in ones; NULL
 * with *legacy false means an invalid handle. */
stream_rec *stream_of(CUstream s, bool *legacy) {
  uintptr_t v = (uintptr_t)s;
  *legacy = false;
  if (v <= 2) {
    *legacy = true;
    return NULL;
  }
  if (v < STREAM_BASE || (v - STREAM_BASE) % 16) return NULL;
  size_t i = (size_t)((v - STREAM_BASE) / 16);
  if (i >= G.streams.n || !G.streams.v[i].live) return NULL;
  return &G.streams.v[i];
}

CUresult check_stream(const char *fn, CUstream s, uint64_t *uid, uint64_t **seq) {
  bool legacy;
  stream_rec *r = stream_of(s, &legacy);
  if (legacy) {
    *uid = (uintptr_t)s == 2 ? 2 : 1;
    *seq = &G.legacy_seq;
    return R_OK;
  }
  if (!r) return violation(R_INVALID_HANDLE, "%s: stream %p is not a live stream", fn, s);
  *uid = r->uid;
  *seq = &r->seq;
  return R_OK;
}

event_rec *event_of(CUevent e) {
  uintptr_t v = (uintptr_t)e;
  if (v < EVENT_BASE || (v - EVENT_BASE) % 16) return NULL;
  size_t i = (size_t)((v - EVENT_BASE) / 16);
  if (i >= G.events.n || !G.events.v[i].live) return NULL;
  return &G.events.v[i];
}

bool overlaps(CUdeviceptr a, uint64_t an, CUdeviceptr b, uint64_t bn) {
  return a < b + bn && b < a + an;
}

/* Pending work other than stream `uid` that uses [p, p+n); `orphans_only`
 * restricts to destroyed streams. */
work_rec *pending_on(CUdeviceptr p, uint64_t n, uint64_t uid, bool orphans_only) {
  for (size_t i = 0; i < G.work.n; i++) {
    work_rec *w = &G.work.v[i];
    if (w->uid == uid || (orphans_only && !w->orphan)) continue;
    if (overlaps(w->ptr, w->size, p, n)) return w;
  }
  return NULL;
}

void complete_where(bool (*pred)(const work_rec *, const void *), const void *arg) {
  for (size_t i = 0; i < G.work.n;) {
    if (pred(&G.work.v[i], arg)) DROP(G.work, i);
    else i++;
  }
}
bool w_all(const work_rec *w, const void *a) {
  (void)w;
  (void)a;
  return true;
}
bool w_stream(const work_rec *w, const void *a) { return w->uid == *(const uint64_t *)a; }
bool w_event(const work_rec *w, const void *a) {
  const event_rec *e = a;
  return w->uid == e->uid && w->seq <= e->seq;
}
bool w_range(const work_rec *w, const void *a) {
  const uint64_t *r = a;
  return overlaps(w->ptr, w->size, r[0], r[1]);
}

alloc_rec *find_alloc(CUdeviceptr p, size_t *idx) {
  for (size_t i = 0; i < G.allocs.n; i++)
    if (G.allocs.v[i].ptr == p) {
      if (idx) *idx = i;
      return &G.allocs.v[i];
    }
  return NULL;
}

resv_rec *resv_containing(CUdeviceptr p, uint64_t n) {
  for (size_t i = 0; i < G.resvs.n; i++) {
    resv_rec *r = &G.resvs.v[i];
    if (p >= r->base && n <= r->size && p - r->base <= r->size - n) return r;
  }
  return NULL;
}

handle_rec *find_handle(CUhandle h, size_t *idx) {
  for (size_t i = 0; i < G.handles.n; i++)
    if (G.handles.v[i].h == h) {
      if (idx) *idx = i;
      return &G.handles.v[i];
    }
  return NULL;
}

/* First mapping whose end is above va. */
size_t map_lower(CUdeviceptr va) {
  size_t lo = 0, hi = G.maps.n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (G.maps.v[mid].va + G.maps.v[mid].size <= va) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/* Whether [p, p+n) is covered by mappings without gaps; on success [*first,
 * *first + *count) are those mappings. */
bool fully_mapped(CUdeviceptr p, uint64_t n, size_t *first, size_t *count) {
  size_t i = map_lower(p), k = 0;
  CUdeviceptr at = p;
  while (at < p + n) {
    if (i + k >= G.maps.n) return false;
    map_rec *m = &G.maps.v[i + k];
    if (m->va > at) return false;
    at = m->va + m->size;
    k++;
  }
  *first = i;
  *count = k;
  return n > 0;
}

void handle_drop_if_done(size_t idx) {
  handle_rec *h = &G.handles.v[idx];
  if (h->refs == 0 && h->maps == 0) {
    G.c.used[h->dev] -= h->size;
    DROP(G.handles, idx);
  }
}
/* ---- test hooks -------------------------------------------------------------------------------- */

/* May work on `stream` read and write [p, p+size) (see fakecuda_launch)?
 * R_OK with the stream's uid and sequence counter, or the violation. Lock
 * held; queues nothing. */
CUresult check_work(const char *fn, void *stream, CUdeviceptr p, size_t size, uint64_t *uid,
                    uint64_t **seq) {
  CUresult r = check_stream(fn, stream, uid, seq);
  if (r) return r;
  int d = current_dev();
  bool ok = false;
  for (size_t i = 0; i < G.allocs.n && !ok; i++) {
    alloc_rec *a = &G.allocs.v[i];
    ok = p >= a->ptr && size <= a->size && p - a->ptr <= a->size - size;
  }
  size_t first, n;
  if (!ok && fully_mapped(p, size, &first, &n)) {
    ok = true;
    for (size_t i = first; i < first + n; i++)
      if (!(G.maps.v[i].access & (1u << d)))
        return violation(R_INVALID_VALUE, "%s on device %d touches 0x%llx, mapped without access for it",
                         fn, d, G.maps.v[i].va);
  }
  if (!ok) return violation(R_INVALID_VALUE, "%s touches [0x%llx, +%zu), which is not allocated", fn, p, size);
  work_rec *w = pending_on(p, size, *uid, true);
  if (w)
    return violation(R_INVALID_VALUE, "%s on stream %llu reuses [0x%llx, +%zu) while pending work of the "
                                      "destroyed stream %llu still uses it",
                     fn, (unsigned long long)*uid, p, size, (unsigned long long)w->uid);
  return R_OK;
}

void queue_work(uint64_t uid, uint64_t *seq, CUdeviceptr p, size_t size) {
  PUSH(G.work, ((work_rec){uid, ++*seq, p, size, false}));
}

FX int fakecuda_launch(void *stream, unsigned long long p, size_t size) {
  LOCK();
  CUresult r = check_init("fakecuda_launch", true);
  if (r) RET(r);
  uint64_t uid = 0, *seq = NULL; /* set by check_work on success */
  r = check_work("work", stream, p, size, &uid, &seq);
  if (r) RET(r);
  queue_work(uid, seq, p, size);
  RET(R_OK);
}

FX void fakecuda_reset(void) {
  LOCK();
  clear_state();
  load_config();
  UNLOCK();
}

FX fakecuda_config_t *fakecuda_config(void) { return &G.cfg; }

static void counts_locked(fakecuda_counts_t *out) {
  *out = G.c;
  out->allocations = G.allocs.n;
  out->allocation_bytes = 0;
  for (size_t i = 0; i < G.allocs.n; i++) out->allocation_bytes += G.allocs.v[i].size;
  out->reservations = G.resvs.n;
  out->mappings = G.maps.n;
  out->handles = 0;
  for (size_t i = 0; i < G.handles.n; i++) out->handles += (uint64_t)G.handles.v[i].refs;
  out->events = 0;
  for (size_t i = 0; i < G.events.n; i++) out->events += G.events.v[i].live;
  out->streams = 0;
  for (size_t i = 0; i < G.streams.n; i++) out->streams += G.streams.v[i].live;
  out->host_allocations = G.hosts.n;
  out->contexts_retained = 0;
  for (int i = 0; i < MAXDEV; i++) out->contexts_retained += (uint64_t)G.retains[i];
  out->pending_work = G.work.n;
}

FX void fakecuda_counts(fakecuda_counts_t *out) {
  LOCK();
  counts_locked(out);
  UNLOCK();
}

FX uint64_t fakecuda_violations(void) {
  LOCK();
  uint64_t v = G.c.violations;
  UNLOCK();
  return v;
}

static uint64_t held_of(const fakecuda_counts_t *c) {
  return c->allocations + c->reservations + c->mappings + c->handles + c->events + c->streams +
         c->contexts_retained + c->contexts_pushed + c->host_allocations;
}

FX uint64_t fakecuda_held(void) {
  fakecuda_counts_t c;
  fakecuda_counts(&c);
  return held_of(&c);
}

FX const char *fakecuda_last_violation(void) {
  LOCK();
  const char *s = G.nlast ? G.last[(G.nlast - 1) % 8] : "";
  UNLOCK();
  return s;
}

FX size_t fakecuda_report(char *buf, size_t cap) {
  LOCK();
  fakecuda_counts_t c;
  counts_locked(&c);
  size_t len = 0;
#define OUT(...)                                                                  \
  do {                                                                            \
    size_t room__ = len < cap ? cap - len : 0;                                    \
    int n__ = snprintf(room__ ? buf + len : NULL, room__, __VA_ARGS__);           \
    if (n__ > 0) len += (size_t)n__;                                              \
  } while (0)
  if (buf && cap) buf[0] = '\0';
  OUT("violations=%llu\nheld=%llu\n", (unsigned long long)c.violations,
      (unsigned long long)held_of(&c));
#define F(name) OUT(#name "=%llu\n", (unsigned long long)c.name)
  F(allocations); F(allocation_bytes); F(reservations); F(mappings); F(handles); F(events);
  F(streams); F(host_allocations); F(contexts_retained); F(contexts_pushed); F(pending_work);
  F(mem_alloc); F(mem_free); F(mem_alloc_async); F(mem_free_async); F(mem_alloc_host);
  F(mem_free_host); F(address_reserve); F(address_free); F(create); F(release); F(map); F(unmap);
  F(set_access); F(event_create); F(event_record); F(event_query); F(event_sync); F(event_destroy);
  F(stream_create); F(stream_destroy); F(stream_sync); F(ctx_sync); F(ctx_push); F(ctx_pop);
  F(retains); F(releases); F(get_attribute); F(mem_get_info); F(memcpy_dtod); F(mem_retain);
#undef F
  for (int d = 0; d < G.cfg.devices; d++)
    OUT("device%d_peak_bytes=%llu\n", d, (unsigned long long)c.used_peak[d]);
  unsigned shown = G.nlast < 8 ? G.nlast : 8;
  for (unsigned i = 0; i < shown; i++) OUT("violation: %s\n", G.last[(G.nlast - shown + i) % 8]);
#undef OUT
  UNLOCK();
  return len;
}

static void write_report_at_exit(void) {
  const char *path = getenv("FAKECUDA_REPORT");
  if (!path || !*path) return;
  size_t n = fakecuda_report(NULL, 0);
  char *buf = malloc(n + 1);
  if (!buf) return;
  fakecuda_report(buf, n + 1);
  FILE *f = fopen(path, "w");
  if (f) {
    fputs(buf, f);
    fclose(f);
  }
  free(buf);
}
