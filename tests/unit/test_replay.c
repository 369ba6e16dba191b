/*
 * test_replay.c - the trace parser (cm_trace_parse), the replay engine
 * (cm_replay_run) and the SVG renderer (cm_replay_svg).
 *
 * The peak of live bytes is checked against an independent computation (a
 * naive strtoull parser with a chained hash) on every trace under
 * ../shared/traces (skipped when shared is absent). Malformed input is fed
 * byte-mutated and random to check the parser never crashes and reports
 * line numbers.
 */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "cm_test.h"
#include "cubemem/cubemem.h"
#include "cubemem/replay.h"

static cm_trace_t *parse_str(const char *s, bool skip, int *rc, cm_diag_t *d) {
  cm_trace_t *t = NULL;
  cm_trace_parse_options_t o = {.skip_bad_lines = skip};
  cm_diag_clear(d);
  *rc = cm_trace_parse(s, strlen(s), &o, &t, d);
  return t;
}

static const char *k_small =
    "Thread,Time,Action,Pointer,Size,Stream\n"
    "1,00:00:00.000000,allocate,0x1000,100,0x0\n"
    "1,00:00:00.000010,allocate,0x2000,300,0x0\n"
    "1,00:00:00.000020,free,0x1000,100,0x0\n"
    "1,00:00:00.000030,allocate,0x1000,50,0x0\n"
    "1,00:00:01.500000,free,0x2000,300,0x0\n"
    "1,00:01:00.000000,allocate,0x3000,1000,0x0\n";

static void parse_basic(void) {
  int rc;
  cm_diag_t d;
  cm_trace_t *t = parse_str(k_small, false, &rc, &d);
  ASSERT_OK(rc);
  ASSERT(t != NULL);
  EXPECT_EQ(t->count, 6);
  EXPECT_EQ(t->allocs, 4);
  EXPECT_EQ(t->frees, 2);
  EXPECT_EQ(t->peak_live_bytes, 1050); /* 50 + 1000 at the end */
  EXPECT_EQ(t->peak_live_event, 5);
  EXPECT_EQ(t->peak_live_count, 2);
  EXPECT_EQ(t->live_at_end, 2);
  EXPECT_EQ(t->live_bytes_at_end, 1050);
  EXPECT_EQ(t->max_alloc_size, 1000);
  EXPECT_EQ(t->total_alloc_bytes, 1450);
  EXPECT_EQ(t->duration_us, 60000000);
  EXPECT_EQ(t->events[4].time_us, 1500000);
  EXPECT_EQ(t->lines, 7);
  EXPECT_LE(t->slots, 2); /* slots are reused */
  /* an allocation and its free share a slot; the free carries the size */
  EXPECT_EQ(t->events[2].action, CM_TRACE_FREE);
  EXPECT_EQ(t->events[2].slot, t->events[0].slot);
  EXPECT_EQ(t->events[2].size, 100);
  EXPECT_EQ(t->events[4].slot, t->events[1].slot);
  EXPECT_EQ(t->unknown_frees + t->alloc_failures + t->duplicate_allocs + t->bad_lines, 0);
  cm_trace_free(t);
}

static void parse_variants(void) {
  int rc;
  cm_diag_t d;
  /* no header, CRLF, blank lines, spaces, 5 columns, plain-seconds time */
  cm_trace_t *t = parse_str("\r\n1,0.5,allocate,0xA,10\r\n\n 1 , 1.25 , free , 0xa , 10 \r\n", false,
                            &rc, &d);
  ASSERT_OK(rc);
  EXPECT_EQ(t->allocs, 1);
  EXPECT_EQ(t->frees, 1);
  EXPECT_EQ(t->events[1].time_us, 750000); /* from the first event */
  cm_trace_free(t);
  /* header in another order, case-insensitive, no Time column */
  t = parse_str("size,POINTER,action\n64,0x10,allocate\n32,0x20,ALLOCATE\n0,0x10,Free\n", false,
                &rc, &d);
  ASSERT_OK(rc);
  EXPECT_EQ(t->allocs, 2);
  EXPECT_EQ(t->frees, 1);
  EXPECT_EQ(t->peak_live_bytes, 96);
  EXPECT_EQ(t->events[2].size, 64); /* the free's size comes from the allocation */
  cm_trace_free(t);
  /* empty input and header only */
  t = parse_str("", false, &rc, &d);
  ASSERT_OK(rc);
  EXPECT_EQ(t->count, 0);
  cm_trace_free(t);
  t = parse_str("Thread,Time,Action,Pointer,Size,Stream\n", false, &rc, &d);
  ASSERT_OK(rc);
  EXPECT_EQ(t->count, 0);
  cm_trace_free(t);
  /* a repeated header (concatenated logs) is skipped */
  t = parse_str("Thread,Time,Action,Pointer,Size,Stream\n1,0,allocate,0x1,8,0x0\n"
                "Thread,Time,Action,Pointer,Size,Stream\n1,0,free,0x1,8,0x0\n", false, &rc, &d);
  ASSERT_OK(rc);
  EXPECT_EQ(t->count, 2);
  cm_trace_free(t);
}

static void parse_anomalies(void) {
  int rc;
  cm_diag_t d;
  cm_trace_t *t = parse_str("Thread,Time,Action,Pointer,Size,Stream\n"
                            "1,00:00:00.1,free,0x99,8,0x0\n"             /* unknown pointer */
                            "1,00:00:00.2,allocate failure,0x0,1000,0x0\n" /* recorded failure */
                            "1,00:00:00.3,allocate,0x1,100,0x0\n"
                            "1,00:00:00.4,allocate,0x1,200,0x0\n" /* duplicate: frees the first */
                            "1,00:00:00.5,free,0x1,200,0x0\n"
                            "1,00:00:00.6,free,0x1,200,0x0\n", /* now unknown */
                            false, &rc, &d);
  ASSERT_OK(rc);
  EXPECT_EQ(t->unknown_frees, 2);
  EXPECT_EQ(t->alloc_failures, 1);
  EXPECT_EQ(t->duplicate_allocs, 1);
  EXPECT_EQ(t->allocs, 2);
  EXPECT_EQ(t->frees, 2);
  EXPECT_EQ(t->count, 4);
  EXPECT_EQ(t->peak_live_bytes, 200);
  EXPECT_EQ(t->live_at_end, 0);
  cm_trace_free(t);
}

static void parse_errors(void) {
  static const struct {
    const char *text;
    uint32_t line;
    const char *msg;
  } cases[] = {
      {"Thread,Time,Action,Pointer,Size,Stream\n1,0,allocate,0x1,8,0x0\n1,0,allocate,0x2,abc,0x0\n",
       3, "bad size 'abc'"},
      {"1,0,allocate,0x1,,0x0\n", 1, "bad size ''"},
      {"1,0,allocate,0x1,-5,0x0\n", 1, "bad size '-5'"},
      {"1,0,allocate,0x1,99999999999999999999,0x0\n", 1, "bad size"},
      {"1,0,alloc,0x1,8,0x0\n", 1, "bad action 'alloc'"},
      {"1,0,allocate,0xZZ,8,0x0\n", 1, "bad pointer '0xZZ'"},
      {"1,0,allocate,0x11112222333344445,8,0x0\n", 1, "bad pointer"},
      {"1,00:61:00,allocate,0x1,8,0x0\n", 1, "bad time '00:61:00'"},
      /* times whose microseconds exceed 64 bits used to wrap around */
      {"1,0,allocate,0x1,8,0x0\n1,999999999999:59:59,free,0x1,8,0x0\n", 2,
       "bad time '999999999999:59:59'"},
      {"1,999999999999:00,allocate,0x1,8,0x0\n", 1, "bad time '999999999999:00'"},
      {"1,5124095576:01:49.551616,allocate,0x1,8,0x0\n", 1, "bad time"},
      {"1,5124095576:01:50,allocate,0x1,8,0x0\n", 1, "bad time"},
      {"1,0,allocate,0x1\n", 1, "expected 6 fields, got 4"},
      {"Thread,Time,Action,Pointer,Size,Stream\n\n1,0,allocate,0x1,8\n", 3, "expected 6 fields, got 5"},
      {"Thread,Time,Action,Pointer\n", 1, "no 'Size' column"},
      {"1,0,allocate,0x1,18446744073709551615,0x0\n1,0,allocate,0x2,1,0x0\n", 2, "overflows"},
      {"1,0,allocate,0x1,8,0x0,,,,,,,,,,,,,,,,,,,,,,,\n", 1, "too many fields"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int rc;
    cm_diag_t d;
    cm_trace_t *t = parse_str(cases[i].text, false, &rc, &d);
    EXPECT_STATUS(rc, CM_EPARSE);
    EXPECT(t == NULL);
    EXPECT_EQ(d.line, cases[i].line);
    EXPECT_CONTAINS(d.message, cases[i].msg);
    /* with skip_bad_lines the same input parses, the line is counted */
    t = parse_str(cases[i].text, true, &rc, &d);
    EXPECT_OK(rc);
    if (t) {
      EXPECT_GE(t->bad_lines, 1);
      EXPECT_EQ(t->first_bad_line, cases[i].line);
      EXPECT_CONTAINS(t->first_bad_message, cases[i].msg);
    }
    cm_trace_free(t);
  }
}

/* The largest time that fits: UINT64_MAX microseconds, and the longest plain
 * seconds; one microsecond more is a bad time (parse_errors). */
static void time_limits(void) {
  int rc;
  cm_diag_t d;
  cm_trace_t *t = parse_str("1,0,allocate,0x1,8,0x0\n"
                            "1,5124095576:01:49.551615,free,0x1,8,0x0\n",
                            false, &rc, &d);
  ASSERT_OK(rc);
  ASSERT(t != NULL);
  ASSERT_EQ(t->count, 2);
  EXPECT_EQ(t->events[1].time_us, UINT64_MAX);
  cm_trace_free(t);
  t = parse_str("1,0,allocate,0x1,8,0x0\n1,999999999999.9999999,free,0x1,8,0x0\n", false, &rc, &d);
  ASSERT_OK(rc);
  EXPECT_EQ(t->events[1].time_us, 999999999999999999ull); /* 7th digit dropped */
  cm_trace_free(t);
}

/* RMM logs carry the time of day: times count from the first event, and a
 * run across midnight keeps counting. */
static void time_of_day(void) {
  int rc;
  cm_diag_t d;
  cm_trace_t *t = parse_str("1,23:59:59.000000,allocate,0x1,8,0x0\n"
                            "1,23:59:59.500000,allocate,0x2,8,0x0\n"
                            "1,00:00:00.250000,free,0x1,8,0x0\n"
                            "1,00:00:02.000000,free,0x2,8,0x0\n",
                            false, &rc, &d);
  ASSERT_OK(rc);
  ASSERT_EQ(t->count, 4);
  EXPECT_EQ(t->events[0].time_us, 0);
  EXPECT_EQ(t->events[1].time_us, 500000);
  EXPECT_EQ(t->events[2].time_us, 1250000);
  EXPECT_EQ(t->events[3].time_us, 3000000);
  EXPECT_EQ(t->duration_us, 3000000);
  cm_trace_free(t);
  /* a small step back (threads' rows out of order) is not a new day */
  t = parse_str("1,10:00:01.000000,allocate,0x1,8,0x0\n1,10:00:00.900000,free,0x1,8,0x0\n", false,
                &rc, &d);
  ASSERT_OK(rc);
  EXPECT_EQ(t->events[1].time_us, 0);
  EXPECT_EQ(t->duration_us, 0);
  cm_trace_free(t);
}

static uint64_t rng_state = 0x123456789abcdefull;
static uint64_t rng(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

/* Mutated and random inputs: never crash; on success the counters agree. */
static void parse_fuzz(void) {
  size_t base_len = strlen(k_small);
  char *buf = malloc(base_len + 64);
  ASSERT(buf != NULL);
  for (int iter = 0; iter < 20000; iter++) {
    size_t len;
    if (iter % 4 == 3) {
      len = rng() % 200;
      for (size_t i = 0; i < len; i++) {
        static const char alpha[] = "0123456789abcdefx,:.\n\r allocatefreAF\x00\xff";
        buf[i] = alpha[rng() % (sizeof alpha - 1)];
      }
    } else {
      memcpy(buf, k_small, base_len);
      len = base_len;
      int muts = 1 + (int)(rng() % 4);
      for (int m = 0; m < muts; m++) {
        size_t at = rng() % len;
        switch (rng() % 3) {
          case 0: buf[at] = (char)(rng() & 0xff); break;
          case 1: memmove(buf + at, buf + at + 1, len - at - 1), len--; break;
          default:
            if (len < base_len + 60) {
              memmove(buf + at + 1, buf + at, len - at);
              buf[at] = ",\n0x9"[rng() % 5];
              len++;
            }
        }
      }
    }
    for (int skip = 0; skip < 2; skip++) {
      cm_trace_t *t = NULL;
      cm_diag_t d;
      cm_trace_parse_options_t o = {.skip_bad_lines = skip != 0};
      int rc = cm_trace_parse(buf, len, &o, &t, &d);
      if (rc == CM_OK) {
        ASSERT(t != NULL);
        EXPECT_EQ(t->count, t->allocs + t->frees);
        uint64_t live = 0, peak = 0;
        for (size_t i = 0; i < t->count; i++) {
          EXPECT_LT(t->events[i].slot, t->slots);
          live = t->events[i].action == CM_TRACE_ALLOC ? live + t->events[i].size
                                                       : live - t->events[i].size;
          if (live > peak) peak = live;
        }
        EXPECT_EQ(peak, t->peak_live_bytes);
        EXPECT_EQ(live, t->live_bytes_at_end);
        cm_trace_free(t);
      } else {
        EXPECT(t == NULL);
        EXPECT(rc == CM_EPARSE);
        EXPECT_GE(d.line, 1);
      }
    }
  }
  free(buf);
}

static void load_errors(void) {
  cm_trace_t *t = NULL;
  cm_diag_t d;
  cm_diag_clear(&d);
  EXPECT_STATUS(cm_trace_load("/nonexistent/trace.csv", NULL, &t, &d), CM_EIO);
  EXPECT_STR(d.file, "/nonexistent/trace.csv");
  EXPECT_CONTAINS(d.message, "cannot open");
  EXPECT(t == NULL);
  EXPECT_STATUS(cm_trace_parse(NULL, 5, NULL, &t, &d), CM_EINVAL);
}

/* ---- independent reference: peak live bytes of a CSV file ------------------ */

typedef struct node {
  unsigned long long key, size;
  struct node *next;
} node_t;

static int naive_peak(const char *path, uint64_t *peak_out, uint64_t *events_out) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  enum { NB = 1 << 16 };
  node_t **b = calloc(NB, sizeof *b);
  char line[512];
  unsigned long long live = 0, peak = 0, ev = 0;
  while (fgets(line, sizeof line, f)) {
    char *save = NULL, *fld[6] = {0};
    int n = 0;
    for (char *tok = strtok_r(line, ",\r\n", &save); tok && n < 6; tok = strtok_r(NULL, ",\r\n", &save))
      fld[n++] = tok;
    if (n < 5 || !strcmp(fld[2], "Action")) continue;
    unsigned long long key = strtoull(fld[3], NULL, 16), size = strtoull(fld[4], NULL, 10);
    unsigned h = (unsigned)((key >> 4) ^ (key >> 20)) & (NB - 1);
    if (!strcmp(fld[2], "allocate")) {
      node_t *nd = malloc(sizeof *nd);
      nd->key = key;
      nd->size = size;
      nd->next = b[h];
      b[h] = nd;
      live += size;
      if (live > peak) peak = live;
      ev++;
    } else if (!strcmp(fld[2], "free")) {
      for (node_t **pp = &b[h]; *pp; pp = &(*pp)->next)
        if ((*pp)->key == key) {
          node_t *dead = *pp;
          live -= dead->size;
          *pp = dead->next;
          free(dead);
          ev++;
          break;
        }
    }
  }
  fclose(f);
  for (int i = 0; i < NB; i++)
    while (b[i]) {
      node_t *nx = b[i]->next;
      free(b[i]);
      b[i] = nx;
    }
  free(b);
  *peak_out = peak;
  *events_out = ev;
  return 0;
}

typedef void (*trace_fn)(const char *path, const char *name);

static int for_each_trace(trace_fn fn) {
  const char *shared = cm_test_shared_dir();
  if (!shared) return -1;
  static const char *const dirs[] = {"cpu", "gpu", "plans"};
  int n = 0;
  for (size_t k = 0; k < 3; k++) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/traces/%s", shared, dirs[k]);
    DIR *dp = opendir(dir);
    if (!dp) continue;
    struct dirent *de;
    while ((de = readdir(dp))) {
      size_t L = strlen(de->d_name);
      if (L < 5 || strcmp(de->d_name + L - 4, ".csv")) continue;
      char path[2048];
      snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
      fn(path, de->d_name);
      n++;
    }
    closedir(dp);
  }
  return n;
}

static void check_peak(const char *path, const char *name) {
  uint64_t want = 0, ev = 0;
  if (naive_peak(path, &want, &ev) != 0) {
    cm_test_fail(__FILE__, __LINE__, "cannot read %s", path);
    return;
  }
  cm_trace_t *t = NULL;
  cm_diag_t d;
  cm_diag_clear(&d);
  int rc = cm_trace_load(path, NULL, &t, &d);
  if (rc != CM_OK) {
    cm_test_fail(__FILE__, __LINE__, "%s:%u: %s", name, d.line, d.message);
    return;
  }
  if (t->peak_live_bytes != want || t->count != ev)
    cm_test_fail(__FILE__, __LINE__, "%s: peak %llu events %zu, expected %llu and %llu", name,
                 (unsigned long long)t->peak_live_bytes, t->count, (unsigned long long)want,
                 (unsigned long long)ev);
  EXPECT_EQ(t->unknown_frees, 0);
  EXPECT_EQ(t->bad_lines, 0);
  cm_trace_free(t);
}

static void shared_traces_peak_live(void) {
  int n = for_each_trace(check_peak);
  if (n < 0) CM_SKIP("../shared is absent");
  if (n == 0) CM_SKIP("no traces under ../shared/traces");
}

/* ---- replay --------------------------------------------------------------------- */

static cm_manager_t *make_manager(uint64_t capacity, const char *layout) {
  cm_device_props_t props = {capacity / 4, 512};
  cm_pool_options_t pools[CM_MAX_DYNAMIC_POOLS];
  size_t n = 0;
  cm_diag_t d;
  cm_diag_clear(&d);
  if (cm_pools_parse(layout, props, pools, CM_MAX_DYNAMIC_POOLS, &n, &d) != CM_OK) {
    cm_test_fail(__FILE__, __LINE__, "cm_pools_parse(%s): %s", layout, d.message);
    return NULL;
  }
  cm_storage_t *st = NULL;
  if (cm_storage_sim_create(capacity, true, 0, &st) != CM_OK) return NULL;
  cm_manager_config_t mc;
  cm_manager_config_init(&mc);
  mc.props = props;
  mc.pools = pools;
  mc.pool_count = n;
  cm_manager_t *m = NULL;
  if (cm_manager_create(st, &mc, &m, &d) != CM_OK) {
    cm_test_fail(__FILE__, __LINE__, "cm_manager_create: %s", d.message);
    cm_storage_destroy(st);
    return NULL;
  }
  return m;
}

static void check_result(const cm_trace_t *t, const cm_replay_result_t *r) {
  EXPECT_EQ(r->events, t->count);
  EXPECT_EQ(r->allocs, t->allocs);
  EXPECT_EQ(r->peak_live_bytes, t->peak_live_bytes);
  EXPECT_EQ(r->failed_allocs, 0);
  EXPECT_EQ(r->frees, t->frees);
  EXPECT_GE(r->peak_reserved_bytes, r->peak_live_bytes);
  EXPECT_GE(r->device_allocs, 1);
  EXPECT(r->pool_reports != NULL);
}

static void replay_small(void) {
  int rc;
  cm_diag_t d;
  cm_trace_t *t = parse_str(k_small, false, &rc, &d);
  ASSERT_OK(rc);
  static const char *const layouts[] = {"default", "subslices", "exclusive-pages"};
  for (size_t l = 0; l < 3; l++) {
    cm_manager_t *m = make_manager(1ull << 30, layouts[l]);
    ASSERT(m != NULL);
    cm_replay_result_t r;
    cm_replay_options_t o = {.timeline_points = 4};
    ASSERT_OK(cm_replay_run(t, m, &o, &r, &d));
    check_result(t, &r);
    EXPECT_LE(r.timeline_count, 6);
    EXPECT_GE(r.timeline_count, 2);
    uint64_t maxlive = 0, maxres = 0, prev = 0;
    for (size_t i = 0; i < r.timeline_count; i++) {
      EXPECT_GE(r.timeline[i].event, prev);
      prev = r.timeline[i].event;
      if (r.timeline[i].live_bytes > maxlive) maxlive = r.timeline[i].live_bytes;
      if (r.timeline[i].reserved_bytes > maxres) maxres = r.timeline[i].reserved_bytes;
    }
    EXPECT_EQ(prev, t->count);
    EXPECT_EQ(maxlive, t->peak_live_bytes);
    EXPECT_EQ(maxres, r.peak_reserved_bytes);
    ASSERT(r.pool_reserved_at_peak != NULL);
    uint64_t sum = 0;
    for (size_t j = 0; j <= r.pool_count; j++) sum += r.pool_reserved_at_peak[j];
    EXPECT_EQ(sum, r.peak_reserved_bytes);
    cm_replay_result_free(&r);
    EXPECT(r.pool_reports == NULL);
    cm_manager_destroy(m);
  }
  cm_trace_free(t);
}

/* A reserve that fails is counted and its free skipped; the replay goes on. */
static void replay_failures(void) {
  int rc;
  cm_diag_t d;
  cm_trace_t *t = parse_str("1,0,allocate,0x1,4096,0x0\n"
                            "1,0,allocate,0x2,999999999999,0x0\n" /* larger than the device */
                            "1,0,free,0x2,0,0x0\n"
                            "1,0,free,0x1,0,0x0\n"
                            "1,0,allocate,0x3,100,0x0\n",
                            false, &rc, &d);
  ASSERT_OK(rc);
  cm_manager_t *m = make_manager(64ull << 20, "default");
  ASSERT(m != NULL);
  cm_replay_result_t r;
  ASSERT_OK(cm_replay_run(t, m, NULL, &r, &d));
  EXPECT_EQ(r.allocs, 3);
  EXPECT_EQ(r.failed_allocs, 1);
  EXPECT_EQ(r.frees, 1);
  EXPECT(r.first_failure < 0);
  EXPECT_EQ(r.first_failure_size, 999999999999ull);
  EXPECT(r.first_failure_message[0] != '\0');
  EXPECT(r.timeline == NULL);
  cm_replay_result_free(&r);
  cm_manager_destroy(m);
  cm_trace_free(t);
}

static void replay_one_shared(const char *path, const char *name) {
  cm_trace_t *t = NULL;
  cm_diag_t d;
  if (cm_trace_load(path, NULL, &t, &d) != CM_OK) {
    cm_test_fail(__FILE__, __LINE__, "%s: %s", name, d.message);
    return;
  }
  cm_manager_t *m = make_manager(80ull << 30, "default");
  if (m) {
    cm_replay_result_t r;
    if (cm_replay_run(t, m, NULL, &r, &d) == CM_OK) {
      check_result(t, &r);
      cm_replay_result_free(&r);
    } else {
      cm_test_fail(__FILE__, __LINE__, "%s: replay: %s", name, d.message);
    }
    cm_manager_destroy(m);
  }
  cm_trace_free(t);
}

static void shared_traces_replay(void) {
  int n = for_each_trace(replay_one_shared);
  if (n < 0) CM_SKIP("../shared is absent");
}

static int collect(void *arg, const char *data, size_t len) {
  char **acc = arg;
  size_t old = *acc ? strlen(*acc) : 0;
  char *p = realloc(*acc, old + len + 1);
  if (!p) return 1;
  memcpy(p + old, data, len);
  p[old + len] = '\0';
  *acc = p;
  return 0;
}

static int refuse(void *arg, const char *data, size_t len) {
  (void)arg, (void)data, (void)len;
  return 1;
}

static void svg_render(void) {
  int rc;
  cm_diag_t d;
  cm_trace_t *t = parse_str(k_small, false, &rc, &d);
  ASSERT_OK(rc);
  cm_manager_t *m = make_manager(1ull << 30, "default");
  ASSERT(m != NULL);
  cm_replay_result_t r;
  cm_replay_options_t o = {.timeline_points = 100};
  ASSERT_OK(cm_replay_run(t, m, &o, &r, &d));
  cm_replay_series_t s[2] = {{"default", &r}, {"a <quoted> & \"odd\" label", &r}};
  cm_replay_panel_t p = {"small & trace", s, 2};
  char *svg = NULL;
  ASSERT_OK(cm_replay_svg(&p, 1, collect, &svg));
  ASSERT(svg != NULL);
  EXPECT(strncmp(svg, "<svg", 4) == 0);
  size_t L = strlen(svg);
  EXPECT(L > 7 && strcmp(svg + L - 7, "</svg>\n") == 0);
  EXPECT_CONTAINS(svg, "events replayed");
  EXPECT_CONTAINS(svg, "memory (");
  EXPECT_CONTAINS(svg, "small &amp; trace");
  EXPECT_CONTAINS(svg, "&lt;quoted&gt;");
  EXPECT(strstr(svg, "<quoted>") == NULL);
  free(svg);
  EXPECT_STATUS(cm_replay_svg(&p, 1, refuse, NULL), CM_EIO);
  EXPECT_STATUS(cm_replay_svg(&p, 1, NULL, NULL), CM_EINVAL);
  cm_replay_result_free(&r);
  cm_manager_destroy(m);
  cm_trace_free(t);
}

int main(void) {
  CM_RUN(parse_basic);
  CM_RUN(parse_variants);
  CM_RUN(parse_anomalies);
  CM_RUN(parse_errors);
  CM_RUN(time_limits);
  CM_RUN(time_of_day);
  CM_RUN(parse_fuzz);
  CM_RUN(load_errors);
  CM_RUN(shared_traces_peak_live);
  CM_RUN(replay_small);
  CM_RUN(replay_failures);
  CM_RUN(shared_traces_replay);
  CM_RUN(svg_render);
  return cm_test_finish();
}
