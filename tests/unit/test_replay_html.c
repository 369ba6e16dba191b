/*
 * test_replay_html.c - the replay observer hook, the recorder behind the HTML
 * report (cm_replay_recorder_*) and the HTML writer (cm_replay_html).
 *
 * The recorder is checked against the manager's own invariants: slices live
 * at the same time never overlap inside a storage range, every slice lies in
 * its range's recorded extent, the timeline's maxima equal the replay's
 * peaks, and the per-pool bytes at the peak add up to the peak. The writer
 * is checked for escaping (nothing in a label or in caller JSON can close the
 * data's script element), for down-sampling and for its errors.
 */
#include <stdlib.h>
#include <string.h>

#include "cm_test.h"
#include "cubemem/cubemem.h"
#include "cubemem/replay.h"
#include "replay/record.h"

static cm_trace_t *parse_str(const char *s) {
  cm_trace_t *t = NULL;
  cm_diag_t d;
  cm_diag_clear(&d);
  if (cm_trace_parse(s, strlen(s), NULL, &t, &d) != CM_OK) {
    cm_test_fail(__FILE__, __LINE__, "parse: %s", d.message);
    return NULL;
  }
  return t;
}

static cm_manager_t *make_manager(uint64_t capacity, const char *layout) {
  cm_device_props_t props = {capacity / 4, 512};
  cm_pool_options_t pools[CM_MAX_DYNAMIC_POOLS];
  size_t n = 0;
  cm_diag_t d;
  cm_diag_clear(&d);
  if (cm_pools_parse(layout, props, pools, CM_MAX_DYNAMIC_POOLS, &n, &d) != CM_OK) return NULL;
  cm_storage_t *st = NULL;
  if (cm_storage_sim_create(capacity, true, 0, &st) != CM_OK) return NULL;
  cm_manager_config_t mc;
  cm_manager_config_init(&mc);
  mc.props = props;
  mc.pools = pools;
  mc.pool_count = n;
  cm_manager_t *m = NULL;
  if (cm_manager_create(st, &mc, &m, &d) != CM_OK) {
    cm_storage_destroy(st);
    return NULL;
  }
  return m;
}

typedef struct buf {
  char *p;
  size_t n;
} buf_t;

static int collect(void *arg, const char *data, size_t len) {
  buf_t *b = arg;
  char *np = realloc(b->p, b->n + len + 1);
  if (!np) return 1;
  memcpy(np + b->n, data, len);
  b->n += len;
  np[b->n] = '\0';
  b->p = np;
  return 0;
}

static int refuse(void *arg, const char *data, size_t len) {
  (void)arg, (void)data, (void)len;
  return 1;
}

static size_t count(const char *hay, const char *needle) {
  size_t n = 0;
  for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle)) n++;
  return n;
}

/* ---- the observer ------------------------------------------------------------ */

typedef struct seen {
  uint64_t calls, allocs_ok, failed, last_index, live, bad;
} seen_t;

static void observe(void *arg, const cm_replay_step_t *st) {
  seen_t *s = arg;
  if (s->calls != st->index) s->bad++;
  s->calls++;
  s->last_index = st->index;
  s->live = st->live_bytes;
  if (st->event->action == CM_TRACE_ALLOC) {
    if (st->failed) s->failed++;
    else if (st->handle.d) s->allocs_ok++;
    else s->bad++;
  } else if (st->handle.d) {
    s->bad++;
  }
}

static const char *k_small =
    "Thread,Time,Action,Pointer,Size,Stream\n"
    "1,00:00:00.000000,allocate,0x1000,100,0x0\n"
    "1,00:00:00.000010,allocate,0x2000,300,0x0\n"
    "1,00:00:00.000020,free,0x1000,100,0x0\n"
    "1,00:00:00.000030,allocate,0x1000,50,0x0\n"
    "1,00:00:01.500000,free,0x2000,300,0x0\n"
    "1,00:01:00.000000,allocate,0x3000,1000,0x0\n";

static void observer_hook(void) {
  cm_trace_t *t = parse_str("1,0,allocate,0x1,4096,0x0\n"
                            "1,1,allocate,0x2,999999999999,0x0\n" /* larger than the device */
                            "1,2,free,0x2,0,0x0\n"
                            "1,3,free,0x1,0,0x0\n"
                            "1,4,allocate,0x3,100,0x0\n");
  ASSERT(t != NULL);
  cm_manager_t *m = make_manager(64ull << 20, "default");
  ASSERT(m != NULL);
  seen_t s = {0};
  cm_replay_options_t o = {.observe = observe, .observe_arg = &s};
  cm_replay_result_t r;
  cm_diag_t d;
  ASSERT_OK(cm_replay_run(t, m, &o, &r, &d));
  EXPECT_EQ(s.calls, 5);
  EXPECT_EQ(s.last_index, 4);
  EXPECT_EQ(s.allocs_ok, 2);
  EXPECT_EQ(s.failed, 1);
  EXPECT_EQ(s.bad, 0);
  EXPECT_EQ(s.live, 100);
  EXPECT_EQ(r.failed_allocs, 1);
  cm_replay_result_free(&r);
  cm_manager_destroy(m);
  cm_trace_free(t);
}

/* ---- the recorder -------------------------------------------------------------- */

/* A deterministic trace of `n` allocations with overlapping lifetimes and
 * sizes from 1 byte to a few MiB. */
static char *make_trace(unsigned n) {
  size_t cap = (size_t)n * 2 * 64 + 64, len = 0;
  char *s = malloc(cap);
  if (!s) return NULL;
  len += (size_t)snprintf(s + len, cap - len, "Thread,Time,Action,Pointer,Size,Stream\n");
  uint64_t x = 88172645463325252ull, us = 0;
  unsigned live[64], nlive = 0, next = 1;
  for (unsigned i = 0; i < n; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    if (nlive == 64 || (nlive && x % 3 == 0)) { /* free one */
      unsigned k = (unsigned)(x >> 20) % nlive;
      len += (size_t)snprintf(s + len, cap - len, "1,%llu.%06llu,free,0x%x,0,0x0\n",
                              (unsigned long long)(us / 1000000), (unsigned long long)(us % 1000000),
                              live[k]);
      live[k] = live[--nlive];
    }
    uint64_t size = 1 + (x >> 11) % ((x & 1) ? 4096 : (3u << 20));
    us += 1 + (x >> 40) % 500;
    live[nlive++] = next;
    len += (size_t)snprintf(s + len, cap - len, "1,%llu.%06llu,allocate,0x%x,%llu,0x0\n",
                            (unsigned long long)(us / 1000000), (unsigned long long)(us % 1000000),
                            next++, (unsigned long long)size);
  }
  return s;
}

static void check_recording(const cm_trace_t *t, const cm_replay_result_t *res,
                            const cm_replay_recorder_t *r, const char *layout) {
  EXPECT_OK(cm_replay_recorder_status(r));
  EXPECT_EQ(r->alloc_count, t->allocs);
  EXPECT_EQ(r->events, t->count);
  EXPECT_EQ(r->pool_count, res->pool_count + 1);
  /* timeline: ordered, ends at the last event, maxima equal the peaks */
  ASSERT(r->sample_count >= 2);
  uint64_t maxlive = 0, maxres = 0, prev = 0;
  for (size_t i = 0; i < r->sample_count; i++) {
    EXPECT_GE(r->samples[i].event, prev);
    prev = r->samples[i].event;
    if (r->samples[i].live > maxlive) maxlive = r->samples[i].live;
    if (r->samples[i].reserved > maxres) maxres = r->samples[i].reserved;
    uint64_t pools = 0;
    for (size_t j = 0; j < r->pool_count; j++) {
      const cm__rec_pool_t *p = &r->sample_pools[i * r->pool_count + j];
      pools += p->reserved;
      EXPECT_LE(p->in_use + p->padding, p->reserved);
    }
    EXPECT_EQ(pools, r->samples[i].reserved);
  }
  EXPECT_EQ(prev, t->count);
  EXPECT_EQ(maxlive, t->peak_live_bytes);
  EXPECT_EQ(maxres, res->peak_reserved_bytes);
  EXPECT_EQ(r->peak_reserved, res->peak_reserved_bytes);
  uint64_t sum = 0;
  for (size_t j = 0; j < r->pool_count; j++) sum += r->peak_pools[j].reserved;
  EXPECT_EQ(sum, r->peak_reserved);
  /* allocations: placed in a range of their pool, inside its extent, and
   * never overlapping another slice live at the same time in that range */
  size_t bad_place = 0, overlaps = 0, failed = 0;
  for (size_t i = 0; i < r->alloc_count; i++) {
    const cm__rec_alloc_t *a = &r->allocs[i];
    if (a->range == CM__REC_FAILED) {
      failed++;
      continue;
    }
    const cm__rec_range_t *g = &r->ranges[a->range];
    if (g->pool != a->pool || a->offset + a->size > g->extent) bad_place++;
    for (size_t k = i + 1; k < r->alloc_count; k++) {
      const cm__rec_alloc_t *b = &r->allocs[k];
      if (b->range != a->range || b->size == 0 || a->size == 0) continue;
      if (a->e1 != CM__REC_NO_EVENT && a->e1 < b->e0) continue; /* a freed before b */
      if (b->offset < a->offset + a->size && a->offset < b->offset + b->size) overlaps++;
    }
  }
  if (bad_place || overlaps || failed)
    cm_test_fail(__FILE__, __LINE__, "%s: %zu misplaced, %zu overlapping, %zu failed", layout,
                 bad_place, overlaps, failed);
}

static void recorder_layouts(void) {
  char *text = make_trace(600);
  ASSERT(text != NULL);
  cm_trace_t *t = parse_str(text);
  free(text);
  ASSERT(t != NULL);
  static const char *const layouts[] = {"default", "subslices", "exclusive-pages",
                                        "sliced:page=8MiB,max-slice=2MiB;direct"};
  for (size_t l = 0; l < sizeof layouts / sizeof layouts[0]; l++) {
    cm_manager_t *m = make_manager(8ull << 30, layouts[l]);
    ASSERT(m != NULL);
    cm_replay_recorder_t *rec = NULL;
    cm_diag_t d;
    ASSERT_OK(cm_replay_recorder_create(t, 50, &rec, &d));
    cm_replay_options_t o = {.observe = cm_replay_recorder_observe, .observe_arg = rec};
    cm_replay_result_t res;
    ASSERT_OK(cm_replay_run(t, m, &o, &res, &d));
    EXPECT_LE(rec->sample_count, 52);
    check_recording(t, &res, rec, layouts[l]);
    cm_replay_result_free(&res);
    cm_replay_recorder_free(rec);
    cm_manager_destroy(m);
  }
  cm_trace_free(t);
  EXPECT_STATUS(cm_replay_recorder_create(NULL, 0, NULL, NULL), CM_EINVAL);
  EXPECT_STATUS(cm_replay_recorder_status(NULL), CM_EINVAL);
  cm_replay_recorder_free(NULL);
}

/* The recorder keeps the small trace's allocations exactly. */
static void recorder_small(void) {
  cm_trace_t *t = parse_str(k_small);
  ASSERT(t != NULL);
  cm_manager_t *m = make_manager(1ull << 30, "default");
  ASSERT(m != NULL);
  cm_replay_recorder_t *rec = NULL;
  ASSERT_OK(cm_replay_recorder_create(t, 0, &rec, NULL));
  cm_replay_options_t o = {.observe = cm_replay_recorder_observe, .observe_arg = rec};
  cm_replay_result_t res;
  ASSERT_OK(cm_replay_run(t, m, &o, &res, NULL));
  ASSERT_EQ(rec->alloc_count, 4);
  EXPECT_EQ(rec->allocs[0].size, 100);
  EXPECT_EQ(rec->allocs[0].e0, 0);
  EXPECT_EQ(rec->allocs[0].e1, 2);
  EXPECT_EQ(rec->allocs[0].t1, 20);
  EXPECT_EQ(rec->allocs[1].e1, 4);
  EXPECT_EQ(rec->allocs[1].t1, 1500000);
  EXPECT_EQ(rec->allocs[2].size, 50);
  EXPECT_EQ(rec->allocs[2].e1, CM__REC_NO_EVENT); /* live at the end */
  EXPECT_EQ(rec->allocs[3].t0, 60000000);
  EXPECT_EQ(rec->sample_count, 7); /* event 0 + one per event (6 < 2000 points) */
  EXPECT_EQ(rec->samples[6].time_us, 60000000);
  check_recording(t, &res, rec, "default");

  /* ---- the HTML page ---- */
  const char *label = "odd </script><script>alert(1)</script> & <!-- label";
  const char *json = "{\"layout\":\"x</script>\",\"peak_reserved_bytes\":1,\"fit_bytes\":42}";
  cm_replay_html_series_t s[2] = {{label, &res, rec, json}, {"plain", &res, NULL, NULL}};
  static const char *const frames[] = {"[\"train.py:10 step\",\"</script>\"]", NULL, "[0,1]"};
  cm_replay_html_panel_t p = {"trace </SCRIPT> name", s, 2,
                              "{\"torch_reserved_bytes\":7,\"n\":\"<b>\",\"frames\":[\"a\",\"b\"]}",
                              frames, 3};
  buf_t b = {0};
  ASSERT_OK(cm_replay_html(&p, 1, NULL, collect, &b));
  ASSERT(b.p != NULL);
  EXPECT(strncmp(b.p, "<!DOCTYPE html>", 15) == 0);
  EXPECT_CONTAINS(b.p, "<script type=\"application/json\" id=\"cubemem-data\">{\"format\":\"cubemem-report\"");
  EXPECT(strstr(b.p, "@CUBEMEM_DATA@") == NULL);
  /* the template's own two script elements close; nothing else does */
  EXPECT_EQ(count(b.p, "</script>"), 2);
  EXPECT(strstr(b.p, "</SCRIPT>") == NULL);
  EXPECT(strstr(b.p, "<!-- label") == NULL);
  EXPECT_CONTAINS(b.p, "odd \\u003c/script\\u003e\\u003cscript\\u003ealert(1)");
  EXPECT_CONTAINS(b.p, "\"fit_bytes\":42");
  EXPECT_CONTAINS(b.p, "\"extra\":{\"torch_reserved_bytes\":7,\"n\":\"\\u003cb\\u003e\",\"frames\":[\"a\",\"b\"]}");
  EXPECT_CONTAINS(b.p, "\"total\":4,\"shown\":4,\"min_size\":0");
  EXPECT_CONTAINS(b.p, "\"size\":[100,300,50,1000]");
  EXPECT_CONTAINS(b.p, "\"free_event\":[2,4,-1,-1]");
  /* frames per allocation, aligned with the allocations written */
  EXPECT_CONTAINS(b.p, "\"frames\":[[\"train.py:10 step\",\"\\u003c/script\\u003e\"],null,[0,1],null]");
  /* the layout without a recording is summarised from its result */
  EXPECT_CONTAINS(b.p, "{\"label\":\"plain\",\"report\":{\"layout\":\"plain\",\"events\":6");
  EXPECT_CONTAINS(b.p, "\"timeline\":null");
  EXPECT(strstr(b.p, "http://") == NULL && strstr(b.p, "https://") == NULL);
  free(b.p);

  /* down-sampling: the two largest allocations stay */
  cm_replay_html_options_t ho = {.max_allocations = 2};
  b = (buf_t){0};
  ASSERT_OK(cm_replay_html(&p, 1, &ho, collect, &b));
  EXPECT_CONTAINS(b.p, "\"total\":4,\"shown\":2,\"min_size\":300");
  EXPECT_CONTAINS(b.p, "\"size\":[300,1000]");
  EXPECT_CONTAINS(b.p, "\"frames\":[null,null]");
  free(b.p);

  /* errors */
  EXPECT_STATUS(cm_replay_html(&p, 1, NULL, refuse, NULL), CM_EIO);
  EXPECT_STATUS(cm_replay_html(&p, 1, NULL, NULL, NULL), CM_EINVAL);
  EXPECT_STATUS(cm_replay_html(NULL, 1, NULL, collect, &b), CM_EINVAL);
  b = (buf_t){0};
  ASSERT_OK(cm_replay_html(NULL, 0, NULL, collect, &b)); /* an empty report is a page */
  EXPECT_CONTAINS(b.p, "\"traces\":[]");
  free(b.p);

  cm_replay_result_free(&res);
  cm_replay_recorder_free(rec);
  cm_manager_destroy(m);
  cm_trace_free(t);
}

/* A reserve that fails is recorded as an allocation in no pool (-1). */
static void recorder_failure(void) {
  cm_trace_t *t = parse_str("1,0,allocate,0x1,4096,0x0\n"
                            "1,0,allocate,0x2,999999999999,0x0\n"
                            "1,0,free,0x2,0,0x0\n");
  ASSERT(t != NULL);
  cm_manager_t *m = make_manager(64ull << 20, "default");
  ASSERT(m != NULL);
  cm_replay_recorder_t *rec = NULL;
  ASSERT_OK(cm_replay_recorder_create(t, 10, &rec, NULL));
  cm_replay_options_t o = {.observe = cm_replay_recorder_observe, .observe_arg = rec};
  cm_replay_result_t res;
  ASSERT_OK(cm_replay_run(t, m, &o, &res, NULL));
  ASSERT_EQ(rec->alloc_count, 2);
  EXPECT(rec->allocs[0].range != CM__REC_FAILED);
  EXPECT(rec->allocs[1].range == CM__REC_FAILED);
  EXPECT_EQ(rec->allocs[1].e1, 2);
  cm_replay_html_series_t s = {"default", &res, rec, NULL};
  cm_replay_html_panel_t p = {.title = "t", .series = &s, .series_count = 1};
  buf_t b = {0};
  ASSERT_OK(cm_replay_html(&p, 1, NULL, collect, &b));
  EXPECT_CONTAINS(b.p, "\"allocations\":{\"pool\":[0,-1]");
  EXPECT_CONTAINS(b.p, "\"failed_allocs\":1");
  free(b.p);
  cm_replay_result_free(&res);
  cm_replay_recorder_free(rec);
  cm_manager_destroy(m);
  cm_trace_free(t);
}

int main(void) {
  CM_RUN(observer_hook);
  CM_RUN(recorder_small);
  CM_RUN(recorder_layouts);
  CM_RUN(recorder_failure);
  return cm_test_finish();
}
