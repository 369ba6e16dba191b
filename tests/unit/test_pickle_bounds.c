/*
 * test_pickle_bounds.c - what a hostile pickle can cost the readers
 * (src/replay/pickle.c, src/replay/snapshot.c): memory per input byte, time
 * per input byte, and 64-bit edge values (run under UBSan by `make asan`).
 *
 *   memo_is_sparse          PUTs stepping the memo index by 2^20 (and up to
 *                           2^32 - 1) parse within a few MiB of peak RSS and
 *                           read back by GET; MEMOIZE stores at the memo's size
 *   dict_lookup_is_bounded  one dict of 20,000 keys shared through the memo by
 *                           20,000 trace entries, and a dict binding one key
 *                           20,000 times, convert in well under a second
 *   dict_keeps_one_binding  a rebound str key is stored once, last value wins,
 *                           first position kept (Python's order)
 *   shared_segments_walked_once  one segment dict of 2,000 blocks referenced
 *                           2,000 times (and its blocks list by another
 *                           segment): 2,000 rows, not 4 million
 *   snapshot_edge_values    time_us, addr, size and segment block addresses
 *                           at 0, 2^62, INT64_MAX, INT64_MIN: converted or
 *                           refused with CM_EPARSE, never undefined behaviour
 */
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "cm_test.h"
#include "cubemem/replay.h"
#include "replay/pickle.h"

typedef struct buf {
  char *p;
  size_t n, cap;
} buf_t;

static void put(buf_t *b, const void *data, size_t n) {
  if (b->n + n > b->cap) {
    size_t nc = b->cap ? b->cap : 256;
    while (nc < b->n + n) nc *= 2;
    char *np = realloc(b->p, nc);
    ASSERT(np != NULL);
    b->p = np;
    b->cap = nc;
  }
  memcpy(b->p + b->n, data, n);
  b->n += n;
}
static void put_s(buf_t *b, const char *s) { put(b, s, strlen(s)); }
static void put_u32(buf_t *b, char op, uint32_t v) {
  unsigned char x[5] = {(unsigned char)op, (unsigned char)v, (unsigned char)(v >> 8),
                        (unsigned char)(v >> 16), (unsigned char)(v >> 24)};
  put(b, x, 5);
}
/* SHORT_BINUNICODE */
static void put_str(buf_t *b, const char *s) {
  unsigned char h[2] = {0x8c, (unsigned char)strlen(s)};
  put(b, h, 2);
  put_s(b, s);
}
/* an int64 as LONG1 with 8 bytes */
static void put_i64(buf_t *b, int64_t v) {
  unsigned char x[10] = {0x8a, 8};
  for (int i = 0; i < 8; i++) x[2 + i] = (unsigned char)((uint64_t)v >> (8 * i));
  put(b, x, 10);
}

static long peak_rss_kib(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void memo_is_sparse(void) {
  /* None, then 64 LONG_BINPUTs at k * 2^20 (the old guard let each one grow
   * the memo by 2^20 entries: 512 MiB for 340 bytes), then 2^32 - 1, and GETs */
  buf_t b = {0};
  put_s(&b, "\x80\x02N");
  for (uint32_t k = 1; k <= 64; k++) put_u32(&b, 'r', k << 20);
  put_u32(&b, 'r', UINT32_MAX);
  put_s(&b, "0");           /* POP the None */
  put_u32(&b, 'j', 64u << 20); /* LONG_BINGET */
  put_u32(&b, 'j', UINT32_MAX);
  put_s(&b, "\x86.");       /* TUPLE2 */
  long before = peak_rss_kib();
  cm_pickle_t *doc = NULL;
  const cm_pv_t *r = NULL;
  cm_diag_t d;
  cm_diag_clear(&d);
  ASSERT_OK(cm__pickle_parse(b.p, b.n, &doc, &r, &d));
  long grew = peak_rss_kib() - before;
  printf("memo: %zu-byte pickle, peak RSS grew %ld KiB\n", b.n, grew);
  EXPECT_LT(grew, 8 * 1024); /* bytes, not 2^20 entries per PUT */
  ASSERT(r->kind == CM_PV_TUPLE && r->n == 2);
  EXPECT(r->items[0]->kind == CM_PV_NONE && r->items[1] == r->items[0]);
  cm__pickle_free(doc);

  /* an index never stored is still refused */
  b.n = 0;
  put_s(&b, "\x80\x02N");
  put_u32(&b, 'r', 5u << 20);
  put_u32(&b, 'j', (5u << 20) + 1);
  put_s(&b, ".");
  cm_diag_clear(&d);
  EXPECT_STATUS(cm__pickle_parse(b.p, b.n, &doc, &r, &d), CM_EPARSE);
  EXPECT_CONTAINS(d.message, "not set");

  /* MEMOIZE stores at the memo's size: after PUT 7, it stores index 1 */
  b.n = 0;
  put(&b, "\x80\x04K\x01q\x07K\x02\x94h\x01h\x07\x86.", 15);
  cm_diag_clear(&d);
  ASSERT_OK(cm__pickle_parse(b.p, b.n, &doc, &r, &d));
  ASSERT(r->kind == CM_PV_TUPLE && r->n == 2);
  EXPECT_EQ(r->items[0]->i, 2);
  EXPECT_EQ(r->items[1]->i, 1);
  cm__pickle_free(doc);

  /* 20 KB of PUTs (the old reader asked for 32 GiB) */
  b.n = 0;
  put_s(&b, "\x80\x02N");
  for (uint32_t k = 1; k <= 4000; k++) put_u32(&b, 'r', k << 20);
  put_s(&b, ".");
  before = peak_rss_kib();
  cm_diag_clear(&d);
  int rc = cm__pickle_parse(b.p, b.n, &doc, &r, &d);
  grew = peak_rss_kib() - before;
  printf("memo: %zu-byte pickle, peak RSS grew %ld KiB\n", b.n, grew);
  EXPECT_OK(rc);
  EXPECT_LT(grew, 8 * 1024);
  cm__pickle_free(doc);
  free(b.p);
}

/* {'device_traces': [[D, D, ...]]} with D memoized: 'action': 'alloc', the
 * other fields, and `extra` more keys (distinct, or one key bound `extra`
 * times). */
static void build_shared_dict(buf_t *b, int extra, int entries, bool distinct) {
  b->n = 0;
  put_s(b, "\x80\x04}(");
  put_str(b, "device_traces");
  put_s(b, "](](");
  put_s(b, "}("); /* D */
  put_str(b, "action");
  put_str(b, "alloc");
  put_str(b, "addr");
  put(b, "M\x00\x10", 3);
  put_str(b, "size");
  put_s(b, "K\x10");
  char key[32];
  for (int i = 0; i < extra; i++) {
    snprintf(key, sizeof key, distinct ? "key-%d" : "key", i);
    put_str(b, key);
    put_s(b, "K\x01");
  }
  put_s(b, "u\x94"); /* SETITEMS, MEMOIZE as 0 */
  for (int i = 1; i < entries; i++) put(b, "h\x00", 2);
  put_s(b, "ee");
  put_str(b, "segments");
  put_s(b, "]u.");
}

static void dict_lookup_is_bounded(void) {
  buf_t b = {0};
  for (int distinct = 1; distinct >= 0; distinct--) {
    build_shared_dict(&b, 20000, 20000, distinct);
    cm_diag_t d;
    cm_diag_clear(&d);
    char *csv = NULL;
    size_t n = 0;
    cm_snapshot_info_t info;
    double t0 = now_s();
    int rc = cm_snapshot_to_csv(b.p, b.n, NULL, &csv, &n, &info, &d);
    double dt = now_s() - t0;
    printf("shared dict (%s): %zu bytes, converted in %.3f s\n",
           distinct ? "20000 distinct keys" : "one key bound 20000 times", b.n, dt);
    if (rc) fprintf(stderr, "%s\n", d.message);
    EXPECT_OK(rc);
    EXPECT_EQ(info.trace_entries, 20000);
    EXPECT_LT(dt * 1000, 1500); /* ms; linear search took minutes */
    free(csv);
  }
  free(b.p);
}

/* {'device_traces': [[one alloc]], 'segments': [S, S, ..., S2]}: S is one
 * segment dict (memoized) whose 'blocks' list holds `blocks` active blocks,
 * referenced `refs` times; S2 is another segment sharing that list. */
static void build_shared_segments(buf_t *b, int blocks, int refs) {
  b->n = 0;
  put_s(b, "\x80\x04}(");
  put_str(b, "device_traces");
  put_s(b, "](](}(");
  put_str(b, "action");
  put_str(b, "alloc");
  put_str(b, "addr");
  put(b, "K\x01", 2);
  put_s(b, "uee");
  put_str(b, "segments");
  put_s(b, "](}("); /* S */
  put_str(b, "device");
  put(b, "K\x00", 2);
  put_str(b, "address");
  put_u32(b, 'J', 1u << 20);
  put_str(b, "blocks");
  put_s(b, "](");
  for (int i = 0; i < blocks; i++) {
    put_s(b, "}(");
    put_str(b, "address");
    put_u32(b, 'J', (1u << 20) + (uint32_t)i * 512u);
    put_str(b, "size");
    put(b, "M\x00\x02", 3);
    put_str(b, "state");
    put_str(b, "active_allocated");
    put_s(b, "u");
  }
  put_s(b, "e\x94u\x94"); /* MEMOIZE the list as 0 and S as 1 */
  for (int i = 1; i < refs; i++) put(b, "h\x01", 2);
  put_s(b, "}("); /* S2: same list */
  put_str(b, "device");
  put(b, "K\x00", 2);
  put_str(b, "blocks");
  put(b, "h\x00", 2);
  put_s(b, "ueu.");
}

static void shared_segments_walked_once(void) {
  buf_t b = {0};
  build_shared_segments(&b, 2000, 2000);
  cm_diag_t d;
  cm_diag_clear(&d);
  char *csv = NULL;
  size_t n = 0;
  cm_snapshot_info_t info;
  long before = peak_rss_kib();
  double t0 = now_s();
  int rc = cm_snapshot_to_csv(b.p, b.n, NULL, &csv, &n, &info, &d);
  double dt = now_s() - t0;
  long grew = peak_rss_kib() - before;
  printf("shared segments: %zu bytes, %zu preexisting blocks, %zu CSV bytes, %.3f s, "
         "peak RSS +%ld KiB\n", b.n, (size_t)info.preexisting, n, dt, grew);
  if (rc) fprintf(stderr, "%s\n", d.message);
  EXPECT_OK(rc);
  EXPECT_EQ(info.preexisting, 2000); /* not 2000 x 2001 */
  EXPECT_LT(n, 200 * 1024);
  EXPECT_LT(dt * 1000, 1500);
  free(csv);
  free(b.p);
}

static void dict_keeps_one_binding(void) {
  /* {'a': 1, 'b': 2, 'a': 3} via DICT, then SETITEM 'b': 4 */
  buf_t b = {0};
  put_s(&b, "\x80\x02(");
  put_str(&b, "a");
  put_s(&b, "K\x01");
  put_str(&b, "b");
  put_s(&b, "K\x02");
  put_str(&b, "a");
  put_s(&b, "K\x03");
  put_s(&b, "d");
  put_str(&b, "b");
  put_s(&b, "K\x04s.");
  cm_pickle_t *doc = NULL;
  const cm_pv_t *r = NULL;
  cm_diag_t d;
  cm_diag_clear(&d);
  ASSERT_OK(cm__pickle_parse(b.p, b.n, &doc, &r, &d));
  ASSERT(r->kind == CM_PV_DICT);
  EXPECT_EQ(r->n, 4);
  EXPECT(cm__pv_str_is(r->items[0], "a") && r->items[1]->i == 3);
  EXPECT(cm__pv_str_is(r->items[2], "b") && r->items[3]->i == 4);
  EXPECT_EQ(cm__pv_get(r, "a")->i, 3);
  EXPECT_EQ(cm__pv_get(r, "b")->i, 4);
  EXPECT(cm__pv_get(r, "c") == NULL);
  EXPECT(cm__pv_get(r, "") == NULL);
  cm__pickle_free(doc);
  free(b.p);
}

/* One snapshot: entries alloc(t1, addr, size) and free_completed(t2, addr),
 * one segment at seg_addr with two blocks of block_size (first active). */
static int edge_snapshot(int64_t t1, int64_t t2, int64_t addr, int64_t size, int64_t seg_addr,
                         int64_t block_size, cm_diag_t *d) {
  buf_t b = {0};
  put_s(&b, "\x80\x04}(");
  put_str(&b, "device_traces");
  put_s(&b, "](](}(");
  put_str(&b, "action");
  put_str(&b, "alloc");
  put_str(&b, "time_us");
  put_i64(&b, t1);
  put_str(&b, "addr");
  put_i64(&b, addr);
  put_str(&b, "size");
  put_i64(&b, size);
  put_s(&b, "u}(");
  put_str(&b, "action");
  put_str(&b, "free_completed");
  put_str(&b, "time_us");
  put_i64(&b, t2);
  put_str(&b, "addr");
  put_i64(&b, addr);
  put_s(&b, "uee");
  put_str(&b, "segments");
  put_s(&b, "](}(");
  put_str(&b, "device");
  put(&b, "K\x00", 2);
  put_str(&b, "address");
  put_i64(&b, seg_addr);
  put_str(&b, "total_size");
  put_i64(&b, block_size);
  put_str(&b, "blocks");
  put_s(&b, "](}(");
  put_str(&b, "size");
  put_i64(&b, block_size);
  put_str(&b, "state");
  put_str(&b, "active_allocated");
  put_s(&b, "u}(");
  put_str(&b, "size");
  put_i64(&b, block_size);
  put_str(&b, "state");
  put_str(&b, "inactive");
  put_s(&b, "ueueu.");
  cm_diag_clear(d);
  char *csv = NULL;
  size_t n = 0;
  int rc = cm_snapshot_to_csv(b.p, b.n, NULL, &csv, &n, NULL, d);
  if (rc == CM_OK) {
    cm_trace_t *t = NULL;
    cm_diag_t pd;
    cm_diag_clear(&pd);
    int prc = cm_trace_parse(csv, n, NULL, &t, &pd);
    EXPECT(prc == CM_OK || prc == CM_EPARSE);
    cm_trace_free(t);
  }
  free(csv);
  free(b.p);
  return rc;
}

static void snapshot_edge_values(void) {
  static const int64_t edges[] = {0, 1, (int64_t)1 << 62, INT64_MAX - 1, INT64_MAX, -1, INT64_MIN};
  size_t ne = sizeof edges / sizeof edges[0], ok = 0, refused = 0;
  cm_diag_t d;
  /* times: the first entry at edges[i], the second at edges[j] */
  for (size_t i = 0; i < ne; i++)
    for (size_t j = 0; j < ne; j++) {
      int rc = edge_snapshot(edges[i], edges[j], 4096, 16, 8192, 512, &d);
      EXPECT_OK(rc);
      ok += rc == CM_OK;
    }
  /* addresses and sizes of entries and segment blocks (negative ones are refused) */
  for (size_t i = 0; i < ne; i++)
    for (size_t j = 0; j < ne; j++) {
      int64_t a = edges[i], s = edges[j] < 0 ? 0 : edges[j];
      int rc = edge_snapshot(0, 1, a, s, a < 0 ? 0 : a, s, &d);
      if (a < 0) {
        EXPECT_STATUS(rc, CM_EPARSE);
        EXPECT_CONTAINS(d.message, "addr");
      } else {
        EXPECT_OK(rc);
      }
      ok += rc == CM_OK;
      refused += rc != CM_OK;
    }
  printf("edge snapshots: %zu converted, %zu refused\n", ok, refused);
  /* the widest span: INT64_MIN to INT64_MAX microseconds */
  EXPECT_OK(edge_snapshot(INT64_MIN, INT64_MAX, 4096, 16, INT64_MAX - 100, INT64_MAX, &d));
}

int main(void) {
  CM_RUN(memo_is_sparse);
  CM_RUN(dict_lookup_is_bounded);
  CM_RUN(dict_keeps_one_binding);
  CM_RUN(shared_segments_walked_once);
  CM_RUN(snapshot_edge_values);
  return cm_test_finish();
}
