/*
 * torchalloc.c - a model of PyTorch's CUDA caching allocator on a cubemem
 * storage (cubemem/torchalloc.h says which rules it follows).
 *
 * Data. Every block (allocated, free, or an unmapped part of an expandable
 * range) belongs to one segment and is linked to its address neighbours in
 * that segment (prev / next). Each of the two pools (small: requests up to
 * 1 MiB; large) keeps its free mapped blocks in a tree ordered by (stream,
 * size, address), the best-fit order, and the unmapped blocks of its
 * expandable ranges in a tree ordered by (stream, address). A block is in at
 * most one tree; `where` says which.
 *
 * Segments are plain storage allocations (cudaMalloc); an expandable range is
 * a storage reservation whose pages are mapped with one vm_map per run of
 * pages (cuMemCreate + cuMemMap per page, one cuMemSetAccess) and unmapped
 * with one vm_unmap per run (cuMemUnmap + cuMemRelease per page). Freed
 * memory is given back to the storage at once (flush), as cudaFree is
 * synchronous.
 *
 * Exports: cm_torch_* (cubemem/torchalloc.h) except replay and fit
 * (torchreplay.c).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/util.h"
#include "core/tree.h"
#include "cubemem/torchalloc.h"
#include "storage/storage_internal.h"

#define MiB ((uint64_t)1 << 20)
#define K_MIN_BLOCK 512ull           /* kMinBlockSize */
#define K_SMALL_SIZE (1ull * MiB)    /* kSmallSize: largest small-pool request */
#define K_SMALL_BUFFER (2ull * MiB)  /* kSmallBuffer: small segments and pages */
#define K_LARGE_BUFFER (20ull * MiB) /* kLargeBuffer: large segments and pages */
#define K_MIN_LARGE_ALLOC (10ull * MiB) /* kMinLargeAlloc */
#define K_ROUND_LARGE (2ull * MiB)   /* kRoundLarge */

enum { IN_NONE = 0, IN_FREE = 1, IN_UNMAPPED = 2 };

typedef struct tseg {
  uint64_t id, addr, size; /* storage id, device address, bytes (range size if expandable) */
  uint64_t page;           /* expandable: page size; 0: a plain segment */
  int pool;                /* 0 small, 1 large */
  uint64_t stream;         /* the stream it was made for (its blocks' stream) */
  struct cm_torch_block *head; /* the block at the lowest address */
  struct tseg *prev_seg, *next_seg; /* every segment of the model */
} tseg;

struct cm_torch_block {
  cm__tnode node; /* in pools[pool].free (k: stream, size, addr) or .unmapped (stream, addr) */
  uint64_t stream, addr, size, requested;
  cm_torch_block_t *prev, *next; /* address neighbours in the segment */
  tseg *seg;
  int pool;
  bool allocated, mapped;
  int where;
};

typedef struct tpool {
  cm__tree free;     /* free mapped blocks */
  cm__tree unmapped; /* unmapped blocks of expandable ranges */
  uint64_t reserved, reserved_peak;
} tpool;

/* Where cudaMalloc puts segments: the lowest-addressed hole left by cudaFree
 * that is large enough, else above everything (2 MiB aligned). Real drivers
 * reuse freed ranges like this, and the address decides best-fit ties. */
typedef struct hole {
  uint64_t addr, size;
} hole;

typedef struct vaspace {
  uint64_t top;  /* everything from here up is unused */
  hole *h;       /* unused ranges below top, by address, not adjacent */
  size_t n, cap;
} vaspace;

/* Reserved bytes of one stream: its segments and mapped pages. */
typedef struct tstream {
  uint64_t id, reserved, peak;
} tstream;

#define MAX_STREAMS 256 /* past this many streams, the last entry takes the rest */

struct cm_torch {
  cm_storage_t *st;
  tstream streams[MAX_STREAMS];
  size_t nstreams;
  vaspace va;
  cm_torch_options_t o;
  tpool pools[2];
  tseg *segs; /* list of every segment */
  cm_torch_block_t zero; /* what a 0-byte request gets */
  cm_torch_stats_t s;
  int last_rc; /* the storage's status of the last failed device call */
};

/* ---- options ------------------------------------------------------------------ */

void cm_torch_options_init(cm_torch_options_t *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->max_split_size = UINT64_MAX;
  o->max_non_split_rounding = K_LARGE_BUFFER;
}

static bool is_pow2(uint64_t v) { return v && !(v & (v - 1)); }

static int floor_log2(uint64_t v) { return 63 - __builtin_clzll(v); }

/* A whole number in [lo, hi] from text s of length n. */
static bool parse_uint(const char *s, size_t n, uint64_t lo, uint64_t hi, uint64_t *out) {
  if (n == 0 || n > 19) return false;
  uint64_t v = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9') return false;
    v = v * 10 + (uint64_t)(s[i] - '0');
  }
  if (v < lo || v > hi) return false;
  *out = v;
  return true;
}

/* roundup_power2_divisions' list form "[A:N,B:M,>:K]" (text between the
 * brackets, already split off) into div[]. */
static int parse_divisions_list(const char *s, size_t n, uint32_t *div, cm_diag_t *diag) {
  size_t last = 0, i = 0;
  bool any = false;
  while (i < n) {
    size_t j = i;
    while (j < n && s[j] != ',') j++;
    const char *colon = memchr(s + i, ':', j - i);
    uint64_t start = 0, val = 0;
    if (!colon)
      return cm__diag_set(diag, CM_EINVAL,
                          "roundup_power2_divisions: '%.*s' is not INTERVAL:DIVISIONS (e.g. "
                          "[256:1,512:2,>:4])", (int)(j - i), s + i);
    size_t klen = (size_t)(colon - (s + i)), vlen = j - i - klen - 1;
    if (!parse_uint(colon + 1, vlen, 0, 1u << 30, &val) || (val && !is_pow2(val)))
      return cm__diag_set(diag, CM_EINVAL,
                          "roundup_power2_divisions: divisions '%.*s' must be 0 or a power of "
                          "two", (int)vlen, colon + 1);
    if (klen == 1 && s[i] == '>') { /* every interval above the last one named */
      for (size_t k = any ? last + 1 : 0; k < CM_TORCH_ROUNDUP_INTERVALS; k++)
        div[k] = (uint32_t)val;
    } else {
      if (!parse_uint(s + i, klen, 1, 1ull << 40, &start) || !is_pow2(start))
        return cm__diag_set(diag, CM_EINVAL,
                            "roundup_power2_divisions: interval '%.*s' must be a power of two "
                            "in MiB, or '>'", (int)klen, s + i);
      size_t idx = (size_t)floor_log2(start);
      if (idx > CM_TORCH_ROUNDUP_INTERVALS - 1) idx = CM_TORCH_ROUNDUP_INTERVALS - 1;
      if (!any)
        for (size_t k = 0; k < idx; k++) div[k] = (uint32_t)val;
      div[idx] = (uint32_t)val;
      last = idx;
    }
    any = true;
    i = j + 1;
  }
  return CM_OK;
}

/* One key:value pair of the configuration into *o. */
static int parse_pair(const char *k, size_t kn, const char *v, size_t vn, cm_torch_options_t *o,
                      cm_diag_t *diag) {
#define KEY(name) (kn == sizeof(name) - 1 && !strncmp(k, name, kn))
#define VAL(text) (vn == sizeof(text) - 1 && !strncasecmp(v, text, vn))
  uint64_t n;
  if (KEY("expandable_segments")) {
    if (VAL("true") || VAL("1")) o->expandable_segments = true;
    else if (VAL("false") || VAL("0")) o->expandable_segments = false;
    else
      return cm__diag_set(diag, CM_EINVAL, "expandable_segments: '%.*s' is not True or False",
                          (int)vn, v);
  } else if (KEY("max_split_size_mb")) {
    if (!parse_uint(v, vn, 21, 1ull << 40, &n))
      return cm__diag_set(diag, CM_EINVAL,
                          "max_split_size_mb: '%.*s' must be a whole number of MiB above 20",
                          (int)vn, v);
    o->max_split_size = n * MiB;
  } else if (KEY("max_non_split_rounding_mb")) {
    if (!parse_uint(v, vn, 0, 1ull << 40, &n))
      return cm__diag_set(diag, CM_EINVAL,
                          "max_non_split_rounding_mb: '%.*s' must be a whole number of MiB",
                          (int)vn, v);
    o->max_non_split_rounding = n * MiB;
  } else if (KEY("roundup_power2_divisions")) {
    if (vn >= 2 && v[0] == '[' && v[vn - 1] == ']')
      return parse_divisions_list(v + 1, vn - 2, o->roundup_divisions, diag);
    if (!parse_uint(v, vn, 1, 1u << 30, &n) || !is_pow2(n))
      return cm__diag_set(diag, CM_EINVAL,
                          "roundup_power2_divisions: '%.*s' must be a power of two, or a list "
                          "such as [256:1,512:2,>:4]", (int)vn, v);
    for (size_t i = 0; i < CM_TORCH_ROUNDUP_INTERVALS; i++) o->roundup_divisions[i] = (uint32_t)n;
  } else if (KEY("garbage_collection_threshold")) {
    char buf[32];
    char *end;
    snprintf(buf, sizeof buf, "%.*s", (int)(vn < 31 ? vn : 31), v);
    double t = strtod(buf, &end);
    if (vn == 0 || vn > 31 || *end || !(t > 0.0 && t < 1.0))
      return cm__diag_set(diag, CM_EINVAL,
                          "garbage_collection_threshold: '%.*s' must be between 0 and 1 "
                          "(exclusive)", (int)vn, v);
    o->garbage_collection_threshold = t;
  } else if (KEY("backend")) {
    if (!VAL("native"))
      return cm__diag_set(diag, CM_EINVAL,
                          "backend: '%.*s' is not modelled (only backend:native, the caching "
                          "allocator; cudaMallocAsync leaves placement to the driver)",
                          (int)vn, v);
  } else if (KEY("release_lock_on_cudamalloc") || KEY("pinned_use_cuda_host_register") ||
             KEY("pinned_num_register_threads") || KEY("pinned_use_background_threads") ||
             KEY("graph_capture_record_stream_reuse")) {
    /* no effect on where device memory goes */
  } else {
    return cm__diag_set(diag, CM_EINVAL,
                        "unknown PYTORCH_CUDA_ALLOC_CONF key '%.*s' (known: expandable_segments, "
                        "max_split_size_mb, max_non_split_rounding_mb, roundup_power2_divisions, "
                        "garbage_collection_threshold, backend)", (int)kn, k);
  }
  return CM_OK;
#undef KEY
#undef VAL
}

int cm_torch_options_parse(const char *conf, cm_torch_options_t *o, cm_diag_t *diag) {
  if (!conf || !o) return cm__diag_set(diag, CM_EINVAL, "cm_torch_options_parse: NULL argument");
  cm_torch_options_t t = *o;
  const char *p = conf;
  while (*p) {
    while (*p == ' ' || *p == ',') p++;
    if (!*p) break;
    const char *start = p;
    int depth = 0; /* commas inside [...] belong to the value */
    while (*p && (depth || *p != ',')) {
      if (*p == '[') depth++;
      else if (*p == ']' && depth) depth--;
      p++;
    }
    size_t len = (size_t)(p - start);
    while (len && start[len - 1] == ' ') len--;
    const char *colon = memchr(start, ':', len);
    if (!colon)
      return cm__diag_set(diag, CM_EINVAL, "'%.*s' is not key:value (e.g. "
                          "expandable_segments:True,max_split_size_mb:128)", (int)len, start);
    size_t kn = (size_t)(colon - start);
    int rc = parse_pair(start, kn, colon + 1, len - kn - 1, &t, diag);
    if (rc != CM_OK) return rc;
  }
  *o = t;
  return CM_OK;
}

size_t cm_torch_options_format(const cm_torch_options_t *o, char *buf, size_t cap) {
  char tmp[512];
  size_t n = 0;
  tmp[0] = '\0';
#define ADD(...) n += (size_t)snprintf(tmp + n, n < sizeof tmp ? sizeof tmp - n : 0, __VA_ARGS__)
  if (!o) o = &(cm_torch_options_t){0};
  if (o->expandable_segments) ADD("%sexpandable_segments:True", n ? "," : "");
  if (o->max_split_size != UINT64_MAX && o->max_split_size)
    ADD("%smax_split_size_mb:%" PRIu64, n ? "," : "", o->max_split_size / MiB);
  if (o->max_non_split_rounding != K_LARGE_BUFFER)
    ADD("%smax_non_split_rounding_mb:%" PRIu64, n ? "," : "", o->max_non_split_rounding / MiB);
  bool same = true, any = false;
  for (size_t i = 0; i < CM_TORCH_ROUNDUP_INTERVALS; i++) {
    same &= o->roundup_divisions[i] == o->roundup_divisions[0];
    any |= o->roundup_divisions[i] != 0;
  }
  if (any && same) {
    ADD("%sroundup_power2_divisions:%u", n ? "," : "", o->roundup_divisions[0]);
  } else if (any) {
    ADD("%sroundup_power2_divisions:[", n ? "," : "");
    for (size_t i = 0; i < CM_TORCH_ROUNDUP_INTERVALS; i++)
      ADD("%s%llu:%u", i ? "," : "", 1ull << i, o->roundup_divisions[i]);
    ADD("]");
  }
  if (o->garbage_collection_threshold > 0)
    ADD("%sgarbage_collection_threshold:%g", n ? "," : "", o->garbage_collection_threshold);
#undef ADD
  if (n >= sizeof tmp) n = sizeof tmp - 1;
  if (buf && cap) snprintf(buf, cap, "%s", tmp);
  return n;
}

/* roundup_power2_next_division: size rounded up to the next of `div` equal
 * divisions of its power-of-two interval. */
static uint64_t next_division(uint64_t size, uint64_t div) {
  if (is_pow2(size)) return size;
  uint64_t floor2 = 1ull << floor_log2(size);
  uint64_t step = floor2 >> floor_log2(div);
  if (step == 0) return floor2 << 1;
  uint64_t down = size & ~(step - 1);
  return down == size ? size : down + step;
}

uint64_t cm_torch_round_size(const cm_torch_options_t *o, uint64_t size) {
  if (size < K_MIN_BLOCK) return K_MIN_BLOCK;
  uint64_t div = 0;
  if (o) {
    int idx = floor_log2(size) - 20; /* intervals from 1 MiB */
    if (idx < 0) idx = 0;
    if (idx > CM_TORCH_ROUNDUP_INTERVALS - 1) idx = CM_TORCH_ROUNDUP_INTERVALS - 1;
    div = o->roundup_divisions[idx];
  }
  if (div > 1 && size > K_MIN_BLOCK * div) return next_division(size, div);
  return (size + K_MIN_BLOCK - 1) / K_MIN_BLOCK * K_MIN_BLOCK;
}

/* get_allocation_size: the segment a new block of `size` (rounded) gets. */
static uint64_t allocation_size(uint64_t size) {
  if (size <= K_SMALL_SIZE) return K_SMALL_BUFFER;
  if (size < K_MIN_LARGE_ALLOC) return K_LARGE_BUFFER;
  return (size + K_ROUND_LARGE - 1) / K_ROUND_LARGE * K_ROUND_LARGE;
}

/* ---- sets ------------------------------------------------------------------------ */

static cm_torch_block_t *of_node(cm__tnode *n) {
  return n ? CM__CONTAINER(n, cm_torch_block_t, node) : NULL;
}

static void set_insert(cm_torch_t *m, cm_torch_block_t *b) {
  tpool *p = &m->pools[b->pool];
  if (b->mapped) {
    b->node.k1 = b->stream;
    b->node.k2 = b->size;
    b->node.k3 = b->addr;
    cm__tree_insert(&p->free, &b->node);
    b->where = IN_FREE;
  } else {
    b->node.k1 = b->stream;
    b->node.k2 = b->addr;
    b->node.k3 = 0;
    cm__tree_insert(&p->unmapped, &b->node);
    b->where = IN_UNMAPPED;
  }
}

static void set_remove(cm_torch_t *m, cm_torch_block_t *b) {
  tpool *p = &m->pools[b->pool];
  if (b->where == IN_FREE) cm__tree_remove(&p->free, &b->node);
  else if (b->where == IN_UNMAPPED) cm__tree_remove(&p->unmapped, &b->node);
  b->where = IN_NONE;
}

static cm_torch_block_t *new_block(cm_torch_t *m, tseg *seg, uint64_t stream, uint64_t addr,
                                   uint64_t size, bool mapped) {
  (void)m;
  cm_torch_block_t *b = calloc(1, sizeof *b);
  if (!b) return NULL;
  b->seg = seg;
  b->pool = seg->pool;
  b->stream = stream;
  b->addr = addr;
  b->size = size;
  b->mapped = mapped;
  return b;
}

/* ---- reserved-bytes accounting ------------------------------------------------------ */

/* The reserved-bytes entry of `stream` (added on first use). */
static tstream *stream_entry(cm_torch_t *m, uint64_t stream) {
  for (size_t k = 0; k < m->nstreams; k++)
    if (m->streams[k].id == stream) return &m->streams[k];
  if (m->nstreams == MAX_STREAMS) return &m->streams[MAX_STREAMS - 1];
  tstream *t = &m->streams[m->nstreams++];
  t->id = stream;
  return t;
}

static void reserve_add(cm_torch_t *m, const tseg *g, uint64_t bytes) {
  int pool = g->pool;
  tstream *ts = stream_entry(m, g->stream);
  ts->reserved += bytes;
  if (ts->reserved > ts->peak) ts->peak = ts->reserved;
  tpool *p = &m->pools[pool];
  p->reserved += bytes;
  if (p->reserved > p->reserved_peak) p->reserved_peak = p->reserved;
  m->s.reserved += bytes;
  if (m->s.reserved > m->s.reserved_peak) m->s.reserved_peak = m->s.reserved;
}

static void reserve_sub(cm_torch_t *m, const tseg *g, uint64_t bytes) {
  int pool = g->pool;
  stream_entry(m, g->stream)->reserved -= bytes;
  m->pools[pool].reserved -= bytes;
  m->s.reserved -= bytes;
}

static void seg_link(cm_torch_t *m, tseg *g) {
  g->next_seg = m->segs;
  if (m->segs) m->segs->prev_seg = g;
  m->segs = g;
}

static void seg_unlink(cm_torch_t *m, tseg *g) {
  if (g->prev_seg) g->prev_seg->next_seg = g->next_seg;
  else m->segs = g->next_seg;
  if (g->next_seg) g->next_seg->prev_seg = g->prev_seg;
}

/* ---- merging ---------------------------------------------------------------------------- */

/* try_merge_blocks: fold src (a neighbour of dst) into dst when src is free
 * and in the same mapped state. Returns the bytes taken over. */
static uint64_t try_merge(cm_torch_t *m, cm_torch_block_t *dst, cm_torch_block_t *src) {
  if (!src || src->allocated || src->mapped != dst->mapped) return 0;
  if (dst->prev == src) { /* [src dst] */
    dst->addr = src->addr;
    dst->prev = src->prev;
    if (dst->prev) dst->prev->next = dst;
    else dst->seg->head = dst;
  } else { /* [dst src] */
    dst->next = src->next;
    if (dst->next) dst->next->prev = dst;
  }
  uint64_t n = src->size;
  dst->size += n;
  set_remove(m, src);
  free(src);
  return n;
}

/* ---- plain segments (cudaMalloc) ------------------------------------------------------- */

#define VA_BASE 0x7f0000000000ull /* where the modelled cudaMalloc ranges start */

static uint64_t va_alloc(vaspace *v, uint64_t size) {
  size = (size + K_SMALL_BUFFER - 1) / K_SMALL_BUFFER * K_SMALL_BUFFER;
  for (size_t i = 0; i < v->n; i++)
    if (v->h[i].size >= size) {
      uint64_t a = v->h[i].addr;
      v->h[i].addr += size;
      v->h[i].size -= size;
      if (!v->h[i].size) {
        memmove(&v->h[i], &v->h[i + 1], (v->n - i - 1) * sizeof *v->h);
        v->n--;
      }
      return a;
    }
  uint64_t a = v->top;
  v->top += size;
  return a;
}

/* Give [addr, addr+size) back, merging with the holes around it and with
 * the unused top. False when out of host memory (the range is then lost,
 * which only moves later addresses up). */
static bool va_free(vaspace *v, uint64_t addr, uint64_t size) {
  size = (size + K_SMALL_BUFFER - 1) / K_SMALL_BUFFER * K_SMALL_BUFFER;
  size_t i = 0;
  while (i < v->n && v->h[i].addr < addr) i++;
  bool left = i > 0 && v->h[i - 1].addr + v->h[i - 1].size == addr;
  bool right = i < v->n && addr + size == v->h[i].addr;
  if (left && right) {
    v->h[i - 1].size += size + v->h[i].size;
    memmove(&v->h[i], &v->h[i + 1], (v->n - i - 1) * sizeof *v->h);
    v->n--;
    i--;
  } else if (left) {
    v->h[i - 1].size += size;
    i--;
  } else if (right) {
    v->h[i].addr = addr;
    v->h[i].size += size;
  } else {
    if (v->n == v->cap) {
      size_t nc = v->cap ? v->cap * 2 : 16;
      hole *nh = realloc(v->h, nc * sizeof *nh);
      if (!nh) return false;
      v->h = nh;
      v->cap = nc;
    }
    memmove(&v->h[i + 1], &v->h[i], (v->n - i) * sizeof *v->h);
    v->h[i] = (hole){addr, size};
    v->n++;
  }
  if (v->h[i].addr + v->h[i].size == v->top && i == v->n - 1) { /* the top hole */
    v->top = v->h[i].addr;
    v->n--;
  }
  return true;
}

/* alloc_block without expandable segments: a new segment of alloc_size bytes
 * as one free block (in no set). NULL when the device refused (m->last_rc). */
static cm_torch_block_t *alloc_segment(cm_torch_t *m, int pool, uint64_t stream,
                                       uint64_t alloc_size) {
  tseg *g = calloc(1, sizeof *g);
  if (!g) {
    m->last_rc = CM_ENOMEM;
    return NULL;
  }
  int rc = cm_storage_alloc(m->st, alloc_size, &g->id, NULL);
  if (rc != CM_OK) {
    m->last_rc = rc;
    free(g);
    return NULL;
  }
  g->addr = va_alloc(&m->va, alloc_size);
  g->size = alloc_size;
  g->pool = pool;
  g->stream = stream;
  cm_torch_block_t *b = new_block(m, g, stream, g->addr, alloc_size, true);
  if (!b) {
    cm_storage_dealloc(m->st, g->id, alloc_size);
    (void)cm_storage_flush(m->st);
    (void)va_free(&m->va, g->addr, alloc_size);
    free(g);
    m->last_rc = CM_ENOMEM;
    return NULL;
  }
  g->head = b;
  seg_link(m, g);
  reserve_add(m, g, alloc_size);
  m->s.cuda_mallocs++;
  if (++m->s.segments > m->s.segments_peak) m->s.segments_peak = m->s.segments;
  return b;
}

/* release_block: cudaFree a free, unsplit plain segment. */
static void release_segment_block(cm_torch_t *m, cm_torch_block_t *b) {
  tseg *g = b->seg;
  set_remove(m, b);
  cm_storage_dealloc(m->st, g->id, g->size);
  (void)cm_storage_flush(m->st);
  (void)va_free(&m->va, g->addr, g->size);
  reserve_sub(m, g, g->size);
  m->s.cuda_frees++;
  m->s.segments--;
  seg_unlink(m, g);
  free(g);
  free(b);
}

/* ---- expandable segments -------------------------------------------------------------- */

/* map_block: map the pages covering the first `size` bytes of unmapped block
 * b; the mapped part becomes a free block merged with its free neighbours
 * and inserted in the free set (*b may be merged away: *out is the block).
 * False when the device refused (nothing mapped). */
static bool map_block(cm_torch_t *m, cm_torch_block_t *b, uint64_t size,
                      cm_torch_block_t **out) {
  tseg *g = b->seg;
  uint64_t off = b->addr - g->addr;
  uint64_t pages = (size + g->page - 1) / g->page;
  uint64_t bytes = pages * g->page;
  if (bytes > b->size) bytes = b->size; /* ranges are whole pages, so this is exact */
  cm_torch_block_t *rest = NULL; /* made first, so that no failure follows the mapping */
  if (bytes < b->size &&
      !(rest = new_block(m, g, b->stream, b->addr + bytes, b->size - bytes, false))) {
    m->last_rc = CM_ENOMEM;
    return false;
  }
  int rc = cm__storage_vm_map(m->st, g->id, off, bytes, g->page, NULL);
  if (rc != CM_OK) {
    free(rest);
    m->last_rc = rc;
    return false;
  }
  set_remove(m, b);
  b->mapped = true;
  if (rest) {
    rest->prev = b;
    rest->next = b->next;
    if (b->next) b->next->prev = rest;
    b->next = rest;
    b->size = bytes;
    set_insert(m, rest);
  }
  try_merge(m, b, b->prev);
  try_merge(m, b, b->next);
  set_insert(m, b);
  reserve_add(m, g, bytes);
  m->s.pages_mapped += bytes / g->page;
  *out = b;
  return true;
}

/* unmap_block: unmap the pages entirely inside free mapped block b; the
 * mapped remnants before and after stay free blocks. Returns the block that
 * is now unmapped (merged with unmapped neighbours), or b when no page was
 * entirely inside it. */
static cm_torch_block_t *unmap_block(cm_torch_t *m, cm_torch_block_t *b, int *rc) {
  tseg *g = b->seg;
  uint64_t rel = b->addr - g->addr;
  uint64_t first = (rel + g->page - 1) / g->page, end = (rel + b->size) / g->page;
  *rc = CM_OK;
  if (first >= end) return b;
  uint64_t ustart = g->addr + first * g->page, ubytes = (end - first) * g->page;
  uint64_t before = ustart - b->addr, after = b->size - before - ubytes;
  /* the remnants are made first, so that no failure follows the unmapping */
  cm_torch_block_t *x = before ? new_block(m, g, b->stream, b->addr, before, true) : NULL;
  cm_torch_block_t *y = after ? new_block(m, g, b->stream, ustart + ubytes, after, true) : NULL;
  int r = (before && !x) || (after && !y)
              ? CM_ENOMEM
              : cm__storage_vm_unmap(m->st, g->id, first * g->page, ubytes, g->page, NULL);
  if (r != CM_OK) {
    free(x);
    free(y);
    *rc = r;
    return b;
  }
  (void)cm_storage_flush(m->st);
  set_remove(m, b);
  if (x) {
    x->prev = b->prev;
    x->next = b;
    if (b->prev) b->prev->next = x;
    else g->head = x;
    b->prev = x;
    set_insert(m, x);
  }
  if (y) {
    y->next = b->next;
    y->prev = b;
    if (b->next) b->next->prev = y;
    b->next = y;
    set_insert(m, y);
  }
  b->addr = ustart;
  b->size = ubytes;
  b->mapped = false;
  try_merge(m, b, b->prev);
  try_merge(m, b, b->next);
  set_insert(m, b);
  reserve_sub(m, g, ubytes);
  m->s.pages_unmapped += ubytes / g->page;
  return b;
}

/* release_expandable_segment: give back a range with nothing mapped (b is
 * its one unmapped block). */
static void release_range(cm_torch_t *m, cm_torch_block_t *b) {
  tseg *g = b->seg;
  set_remove(m, b);
  (void)cm__storage_vm_release(m->st, g->id, g->size, NULL);
  m->s.expandable_ranges--;
  seg_unlink(m, g);
  free(g);
  free(b);
}

/* A new expandable range for (pool, stream): 9/8 of the device memory in
 * whole pages, one unmapped block. NULL when the storage refused. */
static cm_torch_block_t *new_range(cm_torch_t *m, int pool, uint64_t stream) {
  uint64_t page = pool == 0 ? K_SMALL_BUFFER : K_LARGE_BUFFER;
  uint64_t dm = m->o.device_memory ? m->o.device_memory : 80ull << 30;
  uint64_t space = dm / 8 * 9;
  uint64_t size = (space + page - 1) / page * page;
  tseg *g = calloc(1, sizeof *g);
  if (!g) {
    m->last_rc = CM_ENOMEM;
    return NULL;
  }
  int rc = cm__storage_vm_reserve(m->st, size, &g->id, NULL);
  cm_resource_t r = {0};
  if (rc == CM_OK) {
    rc = cm_storage_get(m->st, g->id, 0, size, &r, NULL);
    if (rc != CM_OK) (void)cm__storage_vm_release(m->st, g->id, size, NULL);
  }
  if (rc != CM_OK) {
    m->last_rc = rc;
    free(g);
    return NULL;
  }
  g->addr = r.addr;
  g->size = size;
  g->page = page;
  g->pool = pool;
  g->stream = stream;
  cm_torch_block_t *b = new_block(m, g, stream, g->addr, size, false);
  if (!b) {
    (void)cm__storage_vm_release(m->st, g->id, size, NULL);
    free(g);
    m->last_rc = CM_ENOMEM;
    return NULL;
  }
  g->head = b;
  seg_link(m, g);
  set_insert(m, b);
  m->s.expandable_ranges++;
  return b;
}

static bool allocatable(const cm_torch_block_t *b) { return b && !b->allocated; }

/* find_expandable_block: the first unmapped block (by address) of the
 * stream that, with the free block before it and what follows, has `size`
 * bytes of free or unmapped space; else a new range. */
static cm_torch_block_t *find_expandable(cm_torch_t *m, int pool, uint64_t stream,
                                         uint64_t size) {
  for (cm__tnode *n = cm__tree_lower_bound(&m->pools[pool].unmapped, stream, 0, 0);
       n && n->k1 == stream; n = cm__tree_next(n)) {
    cm_torch_block_t *c = of_node(n);
    if (allocatable(c->prev)) c = c->prev;
    uint64_t bytes = 0;
    for (cm_torch_block_t *b = c; bytes < size && allocatable(b); b = b->next) bytes += b->size;
    if (bytes >= size) return c;
  }
  return new_range(m, pool, stream);
}

/* try_allocate_expandable_block: map what `size` bytes need at the start of
 * the candidate; the result is a free block of at least size bytes, out of
 * the free set. NULL when the device refused (what was mapped stays, free). */
static cm_torch_block_t *alloc_expandable(cm_torch_t *m, int pool, uint64_t stream,
                                          uint64_t size) {
  cm_torch_block_t *c = find_expandable(m, pool, stream, size);
  if (!c) return NULL;
  if (!c->mapped && !map_block(m, c, c->size < size ? c->size : size, &c)) return NULL;
  while (c->size < size) { /* c free and mapped, followed by unmapped space */
    cm_torch_block_t *nx = c->next;
    uint64_t want = size - c->size;
    if (!map_block(m, nx, nx->size < want ? nx->size : want, &c)) return NULL;
  }
  set_remove(m, c);
  return c;
}

/* ---- the allocator ------------------------------------------------------------------------ */

/* The size, for best fit, of a free block of an expandable range: what it can
 * grow to with the unmapped space after it. */
static uint64_t expandable_size(const cm_torch_block_t *b) {
  return b->size + (b->next && !b->next->mapped ? b->next->size : 0);
}

/* get_free_block: the best-fitting cached block (out of the free set), or NULL. */
static cm_torch_block_t *get_free_block(cm_torch_t *m, int pool, uint64_t stream,
                                        uint64_t size) {
  cm__tnode *n = cm__tree_lower_bound(&m->pools[pool].free, stream, size, 0);
  if (!n || n->k1 != stream) return NULL;
  cm_torch_block_t *b = of_node(n);
  if (b->seg->page) {
    for (cm__tnode *x = cm__tree_next(n); x && x->k1 == stream; x = cm__tree_next(x)) {
      cm_torch_block_t *nb = of_node(x);
      if (!(expandable_size(nb) < expandable_size(b))) break;
      b = nb;
    }
  }
  uint64_t mss = m->o.max_split_size;
  if (size < mss && b->size >= mss) return NULL; /* no oversize block for a small request */
  if (size >= mss && b->size >= size + m->o.max_non_split_rounding) return NULL;
  set_remove(m, b);
  return b;
}

/* alloc_block: a new segment, or pages of an expandable range. */
static cm_torch_block_t *alloc_block(cm_torch_t *m, int pool, uint64_t stream, uint64_t size,
                                     uint64_t alloc_size) {
  if (m->o.expandable_segments) return alloc_expandable(m, pool, stream, size);
  return alloc_segment(m, pool, stream, alloc_size);
}

/* release_available_cached_blocks (max_split_size only): release one cached
 * oversize block that fits, or oversize blocks from the largest down until
 * the request's size is freed. True when enough was released. */
static bool release_available(cm_torch_t *m, int pool, uint64_t stream, uint64_t size) {
  uint64_t mss = m->o.max_split_size;
  if (mss == UINT64_MAX) return false;
  uint64_t key = size < mss ? mss : size;
  cm__tree *t = &m->pools[pool].free;
  cm__tnode *n = cm__tree_lower_bound(t, stream, key, 0);
  if (n && n->k1 == stream && !of_node(n)->seg->page) {
    release_segment_block(m, of_node(n));
    return true;
  }
  /* No single block is large enough: free oversize blocks, largest first. */
  size_t cnt = 0, cap = 0;
  cm_torch_block_t **v = NULL;
  for (cm__tnode *x = cm__tree_lower_bound(t, stream, mss, 0); x && x->k1 == stream;
       x = cm__tree_next(x)) {
    if (cnt == cap) {
      cap = cap ? cap * 2 : 16;
      cm_torch_block_t **nv = realloc(v, cap * sizeof *nv);
      if (!nv) break;
      v = nv;
    }
    v[cnt++] = of_node(x);
  }
  uint64_t released = 0;
  for (size_t i = cnt; i-- > 0 && released < key;) {
    if (v[i]->seg->page) continue;
    released += v[i]->size;
    release_segment_block(m, v[i]);
  }
  free(v);
  return released >= key;
}

/* release_blocks of one pool: free every cached plain segment that is
 * entirely free, unmap the free pages of expandable ranges and give back
 * ranges with nothing mapped. */
static int release_pool(cm_torch_t *m, int pool) {
  cm__tree *t = &m->pools[pool].free;
  size_t cnt = t->count, k = 0;
  if (!cnt) return CM_OK;
  cm_torch_block_t **v = malloc(cnt * sizeof *v);
  if (!v) return CM_ENOMEM;
  for (cm__tnode *x = cm__tree_first(t); x; x = cm__tree_next(x)) v[k++] = of_node(x);
  int first_rc = CM_OK;
  for (size_t i = 0; i < k; i++) { /* plain segments: only whole free ones go */
    if (v[i]->seg->page) continue;
    if (!v[i]->prev && !v[i]->next) release_segment_block(m, v[i]);
    v[i] = NULL;
  }
  for (size_t i = 0; i < k; i++) {
    if (!v[i]) continue;
    int rc;
    cm_torch_block_t *b = unmap_block(m, v[i], &rc);
    if (rc != CM_OK && first_rc == CM_OK) first_rc = rc;
    if (!b->mapped && !b->prev && !b->next) release_range(m, b);
  }
  free(v);
  return first_rc;
}

/* release_cached_blocks: the large pool, then the small one. */
static int release_cached(cm_torch_t *m) {
  int a = release_pool(m, 1), b = release_pool(m, 0);
  return a != CM_OK ? a : b;
}

int cm_torch_empty_cache(cm_torch_t *m, cm_diag_t *diag) {
  if (!m) return cm__diag_set(diag, CM_EINVAL, "cm_torch_empty_cache: NULL model");
  int rc = release_cached(m);
  if (rc != CM_OK) return cm__diag_set(diag, rc, "empty_cache: the device failed: %s", cm_strerror(rc));
  return CM_OK;
}

static bool should_split(const cm_torch_t *m, const cm_torch_block_t *b, uint64_t size) {
  uint64_t remaining = b->size - size;
  if (b->pool == 0 || m->o.expandable_segments) return remaining >= K_MIN_BLOCK;
  return size < m->o.max_split_size && remaining > K_SMALL_SIZE;
}

int cm_torch_malloc(cm_torch_t *m, uint64_t orig, uint64_t stream, cm_torch_block_t **out,
                    cm_diag_t *diag) {
  if (!m || !out) return cm__diag_set(diag, CM_EINVAL, "cm_torch_malloc: NULL argument");
  *out = NULL;
  if (orig == 0) {
    *out = &m->zero;
    return CM_OK;
  }
  if (orig > (1ull << 62)) {
    m->s.ooms++;
    return cm__diag_set(diag, CM_EOOM, "out of memory: %" PRIu64 " bytes cannot be allocated", orig);
  }
  uint64_t size = cm_torch_round_size(&m->o, orig);
  int pool = size <= K_SMALL_SIZE ? 0 : 1;
  uint64_t alloc_size = allocation_size(size);
  m->last_rc = CM_OK;
  cm_torch_block_t *b = get_free_block(m, pool, stream, size);
  if (!b) b = alloc_block(m, pool, stream, size, alloc_size);
  if (!b && m->last_rc == CM_EOOM && release_available(m, pool, stream, size))
    b = alloc_block(m, pool, stream, size, alloc_size);
  if (!b && m->last_rc == CM_EOOM) {
    m->s.alloc_retries++;
    int rc = release_cached(m);
    if (rc == CM_OK) b = alloc_block(m, pool, stream, size, alloc_size);
    else m->last_rc = rc;
  }
  if (!b) {
    int rc = m->last_rc ? m->last_rc : CM_EOOM;
    if (rc != CM_EOOM)
      return cm__diag_set(diag, rc, "the device failed allocating %" PRIu64 " bytes: %s", orig,
                          cm_strerror(rc));
    m->s.ooms++;
    char a[32], r[32], c[32];
    cm_format_bytes(size, a, sizeof a);
    cm_format_bytes(m->s.reserved, r, sizeof r);
    cm_format_bytes(m->s.allocated, c, sizeof c);
    return cm__diag_set(diag, CM_EOOM,
                        "out of memory: tried to allocate %s (%" PRIu64 " bytes); %s reserved, "
                        "of which %s allocated, after freeing the cache",
                        a, orig, r, c);
  }
  if (should_split(m, b, size)) {
    cm_torch_block_t *rest = new_block(m, b->seg, b->stream, b->addr + size, b->size - size, true);
    if (!rest) {
      set_insert(m, b);
      return cm__diag_set(diag, CM_ENOMEM, "out of host memory");
    }
    rest->prev = b;
    rest->next = b->next;
    if (b->next) b->next->prev = rest;
    b->next = rest;
    b->size = size;
    set_insert(m, rest);
  }
  b->stream = stream;
  b->allocated = true;
  b->requested = orig;
  m->s.allocated += b->size;
  *out = b;
  return CM_OK;
}

void cm_torch_free(cm_torch_t *m, cm_torch_block_t *b) {
  if (!m || !b || b == &m->zero || !b->allocated) return;
  b->allocated = false;
  m->s.allocated -= b->size;
  try_merge(m, b, b->prev);
  try_merge(m, b, b->next);
  set_insert(m, b);
}

/* ---- a starting state ------------------------------------------------------------------------ */

static tseg *segment_at(const cm_torch_t *m, uint64_t addr) {
  for (tseg *g = m->segs; g; g = g->next_seg)
    if (addr >= g->addr && addr - g->addr < g->size) return g;
  return NULL;
}

int cm_torch_seed_segment(cm_torch_t *m, uint64_t addr, uint64_t size, bool small,
                          uint64_t stream, cm_diag_t *diag) {
  if (!m) return cm__diag_set(diag, CM_EINVAL, "cm_torch_seed_segment: NULL model");
  if (m->o.expandable_segments)
    return cm__diag_set(diag, CM_ENOTSUP, "a starting state of expandable segments is not modelled");
  if (!size || size % K_MIN_BLOCK || addr > UINT64_MAX - size)
    return cm__diag_set(diag, CM_EINVAL, "bad segment of %" PRIu64 " bytes at 0x%" PRIx64, size, addr);
  for (tseg *g = m->segs; g; g = g->next_seg)
    if (addr < g->addr + g->size && g->addr < addr + size)
      return cm__diag_set(diag, CM_EINVAL, "the segment at 0x%" PRIx64 " overlaps another", addr);
  tseg *g = calloc(1, sizeof *g);
  if (!g) return cm__diag_set(diag, CM_ENOMEM, "out of host memory");
  int rc = cm_storage_alloc(m->st, size, &g->id, NULL);
  if (rc != CM_OK) {
    free(g);
    return cm__diag_set(diag, rc, "the device refused the starting segment of %" PRIu64 " bytes: %s",
                        size, cm_strerror(rc));
  }
  g->addr = addr;
  g->size = size;
  g->pool = small ? 0 : 1;
  g->stream = stream;
  cm_torch_block_t *b = new_block(m, g, stream, addr, size, true);
  if (!b) {
    cm_storage_dealloc(m->st, g->id, size);
    (void)cm_storage_flush(m->st);
    free(g);
    return cm__diag_set(diag, CM_ENOMEM, "out of host memory");
  }
  g->head = b;
  seg_link(m, g);
  set_insert(m, b);
  reserve_add(m, g, size);
  if (++m->s.segments > m->s.segments_peak) m->s.segments_peak = m->s.segments;
  uint64_t end = (addr + size + K_SMALL_BUFFER - 1) / K_SMALL_BUFFER * K_SMALL_BUFFER;
  if (end > m->va.top) m->va.top = end; /* later segments go above it */
  return CM_OK;
}

/* The free block of segment g that holds [addr, addr+size), or NULL. */
static cm_torch_block_t *free_block_holding(const tseg *g, uint64_t addr, uint64_t size) {
  for (cm_torch_block_t *b = g->head; b; b = b->next)
    if (addr >= b->addr && addr - b->addr < b->size)
      return !b->allocated && b->mapped && size <= b->size - (addr - b->addr) ? b : NULL;
  return NULL;
}

/* Link a new block x just before (before) or after b, in b's free set. */
static void link_beside(cm_torch_t *m, cm_torch_block_t *b, cm_torch_block_t *x, bool before) {
  if (before) {
    x->prev = b->prev;
    x->next = b;
    if (b->prev) b->prev->next = x;
    else b->seg->head = x;
    b->prev = x;
  } else {
    x->next = b->next;
    x->prev = b;
    if (b->next) b->next->prev = x;
    b->next = x;
  }
  set_insert(m, x);
}

int cm_torch_seed_block(cm_torch_t *m, uint64_t addr, uint64_t size, uint64_t requested,
                        bool exact, cm_torch_block_t **out, cm_diag_t *diag) {
  if (!m || !out) return cm__diag_set(diag, CM_EINVAL, "cm_torch_seed_block: NULL argument");
  *out = NULL;
  if (!size) size = K_MIN_BLOCK;
  tseg *g = segment_at(m, addr);
  cm_torch_block_t *b = g ? free_block_holding(g, addr, size) : NULL;
  if (!b)
    return cm__diag_set(diag, CM_ENOTFOUND,
                        "no free space of %" PRIu64 " bytes at 0x%" PRIx64 " in a starting segment",
                        size, addr);
  uint64_t before = addr - b->addr, after = b->size - before - size;
  /* a remainder PyTorch would not have split off stays in the block */
  if (!exact && after && !should_split(m, &(cm_torch_block_t){.pool = b->pool, .size = size + after}, size))
    size += after, after = 0;
  cm_torch_block_t *x = before ? new_block(m, g, b->stream, b->addr, before, true) : NULL;
  cm_torch_block_t *y = after ? new_block(m, g, b->stream, addr + size, after, true) : NULL;
  if ((before && !x) || (after && !y)) {
    free(x);
    free(y);
    return cm__diag_set(diag, CM_ENOMEM, "out of host memory");
  }
  set_remove(m, b);
  if (x) link_beside(m, b, x, true);
  if (y) link_beside(m, b, y, false);
  b->addr = addr;
  b->size = size;
  b->allocated = true;
  b->requested = requested;
  m->s.allocated += size;
  *out = b;
  return CM_OK;
}

/* ---- lifetime and queries -------------------------------------------------------------------- */

int cm_torch_create(cm_storage_t *storage, const cm_torch_options_t *opts, cm_torch_t **out,
                    cm_diag_t *diag) {
  if (out) *out = NULL;
  if (!storage || !out) {
    cm_storage_destroy(storage);
    return cm__diag_set(diag, CM_EINVAL, "cm_torch_create: NULL argument");
  }
  cm_torch_options_t o;
  cm_torch_options_init(&o);
  if (opts) o = *opts;
  if (o.expandable_segments) {
    uint64_t g = cm__storage_vm_granularity(storage);
    if (!g || K_SMALL_BUFFER % g) {
      int rc = cm__diag_set(diag, CM_EINVAL,
                            "expandable segments need a device with virtual memory whose "
                            "granularity divides 2 MiB (the '%s' storage has %s)",
                            cm_storage_name(storage), g ? "another granularity" : "none");
      cm_storage_destroy(storage);
      return rc;
    }
  }
  if (!o.max_split_size) o.max_split_size = UINT64_MAX;
  cm_torch_t *m = calloc(1, sizeof *m);
  if (!m) {
    cm_storage_destroy(storage);
    return cm__diag_set(diag, CM_ENOMEM, "out of host memory");
  }
  m->st = storage;
  m->o = o;
  m->va.top = VA_BASE;
  for (int p = 0; p < 2; p++) {
    cm__tree_init(&m->pools[p].free);
    cm__tree_init(&m->pools[p].unmapped);
  }
  *out = m;
  return CM_OK;
}

void cm_torch_destroy(cm_torch_t *m) {
  if (!m) return;
  for (tseg *g = m->segs; g;) { /* blocks, allocated ones included, then the segment */
    tseg *nx = g->next_seg;
    for (cm_torch_block_t *b = g->head; b;) {
      cm_torch_block_t *bn = b->next;
      free(b);
      b = bn;
    }
    free(g);
    g = nx;
  }
  cm_storage_destroy(m->st); /* gives back what the segments still hold */
  free(m->va.h);
  free(m);
}

uint64_t cm_torch_block_addr(const cm_torch_block_t *b) { return b ? b->addr : 0; }
uint64_t cm_torch_block_size(const cm_torch_block_t *b) { return b ? b->size : 0; }

void cm_torch_stats(const cm_torch_t *m, cm_torch_stats_t *out) {
  if (!out) return;
  memset(out, 0, sizeof *out);
  if (!m) return;
  *out = m->s;
  out->reserved_small_peak = m->pools[0].reserved_peak;
  out->reserved_large_peak = m->pools[1].reserved_peak;
}

cm_storage_t *cm_torch_storage(const cm_torch_t *m) { return m ? m->st : NULL; }

void cm_torch_stream_reserved(const cm_torch_t *m, uint64_t stream, uint64_t *now,
                              uint64_t *peak) {
  uint64_t n = 0, p = 0;
  for (size_t k = 0; m && k < m->nstreams; k++)
    if (m->streams[k].id == stream) {
      n = m->streams[k].reserved;
      p = m->streams[k].peak;
    }
  if (now) *now = n;
  if (peak) *peak = p;
}

size_t cm_torch_check(const cm_torch_t *m) {
  if (!m) return 1;
  size_t bad = 0;
  uint64_t reserved = 0, allocated = 0, in_sets = 0;
  for (int p = 0; p < 2; p++) {
    for (cm__tnode *x = cm__tree_first(&m->pools[p].free); x; x = cm__tree_next(x)) {
      const cm_torch_block_t *b = of_node(x);
      bad += b->allocated || !b->mapped || b->where != IN_FREE || b->pool != p ||
             x->k2 != b->size || x->k3 != b->addr;
    }
    for (cm__tnode *x = cm__tree_first(&m->pools[p].unmapped); x; x = cm__tree_next(x)) {
      const cm_torch_block_t *b = of_node(x);
      bad += b->allocated || b->mapped || b->where != IN_UNMAPPED || b->pool != p ||
             x->k2 != b->addr;
    }
    bad += cm__tree_check(&m->pools[p].free) + cm__tree_check(&m->pools[p].unmapped);
    in_sets += m->pools[p].free.count + m->pools[p].unmapped.count;
  }
  uint64_t free_blocks = 0;
  for (const tseg *g = m->segs; g; g = g->next_seg) {
    /* the blocks tile the segment; free neighbours in the same state are merged;
     * mapped and unmapped parts meet at page boundaries */
    uint64_t at = g->addr;
    bad += !g->head || g->head->prev;
    for (const cm_torch_block_t *b = g->head; b; b = b->next) {
      bad += b->seg != g || b->addr != at || !b->size || (b->next && b->next->prev != b);
      bad += !b->mapped && (!g->page || b->allocated || (b->addr - g->addr) % g->page ||
                            b->size % g->page);
      bad += !g->page && !b->mapped;
      if (b->next && !b->allocated && !b->next->allocated && b->mapped == b->next->mapped) bad++;
      if (b->mapped) reserved += b->size;
      if (b->allocated) allocated += b->size;
      else free_blocks++;
      bad += !b->allocated && b->where == IN_NONE;
      at += b->size;
    }
    bad += at != g->addr + g->size;
  }
  bad += reserved != m->s.reserved || m->pools[0].reserved + m->pools[1].reserved != reserved;
  uint64_t by_stream = 0;
  for (size_t k = 0; k < m->nstreams; k++) by_stream += m->streams[k].reserved;
  bad += by_stream != reserved;
  bad += allocated != m->s.allocated || free_blocks != in_sets;
  return bad;
}
