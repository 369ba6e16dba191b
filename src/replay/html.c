/*
 * html.c - the interactive HTML report: one self-contained page.
 *
 * The page is a template (src/replay/report.html.in, embedded into the
 * library at build time by cmake/embed.cmake as cm__report_html) with one
 * marker, @CUBEMEM_DATA@, inside
 * <script type="application/json" id="cubemem-data">. This file writes the
 * template up to the marker, the report's data as JSON, then the rest; the
 * page's own script reads and draws that JSON. No external resources.
 *
 * JSON layout (docs/replay.md describes every field):
 *   {"format":"cubemem-report","version":1,"traces":[{
 *      "trace", "events", "duration_us", "extra" (the panel's extra_json or null),
 *      "allocations": {"total","shown","min_size","alloc_event","free_event",
 *                      "alloc_us","free_us","size", optional "frames"}
 *                                                  trace-level columns
 *      "layouts":[{"label","report" (the --json object),"pools":[...],
 *                  "timeline":{"event","time_us","live","reserved",
 *                              "pools":[{"reserved","in_use","padding","cached"}]},
 *                  "peak":{...},"allocations":{"pool","addr","padding"},
 *                  "pool_extent":[...]}]}]}
 * Columns are plain integer arrays (one entry per sample or per shown
 * allocation) to keep a 100k-event report small. free_event is -1 for an
 * allocation never freed; pool is -1 for a reserve that failed.
 *
 * Safety: every '<', '>' and '&' inside the embedded JSON is written as a
 * \u00XX escape (JSON text only has them inside strings, where the escape is
 * equivalent), so no label and no caller-supplied JSON can end the script
 * element or open a comment.
 *
 * Down-sampling: at most max_allocations (default 100000) allocations per
 * trace are written; when there are more, the smallest are left out (ties by
 * allocation order), and "min_size" says below which size.
 *
 * Output goes through a 64 KiB buffer to the caller's write callback; nothing
 * is printed. Exports cm_replay_html.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "cubemem/replay.h"
#include "replay/record.h"
#include "base/sbuf.h"

extern const unsigned char cm__report_html[];
extern const size_t cm__report_html_len;

#define MARKER "@CUBEMEM_DATA@"

typedef struct out {
  cm_replay_write_fn write;
  void *arg;
  char buf[1 << 16];
  size_t n;
  int err;
} out_t;

static void flush(out_t *o) {
  if (!o->err && o->n && o->write(o->arg, o->buf, o->n) != 0) o->err = CM_EIO;
  o->n = 0;
}

static void put(out_t *o, const char *s, size_t len) {
  while (len && !o->err) {
    size_t k = sizeof o->buf - o->n;
    if (k > len) k = len;
    memcpy(o->buf + o->n, s, k);
    o->n += k;
    s += k;
    len -= k;
    if (o->n == sizeof o->buf) flush(o);
  }
}

static void puts_(out_t *o, const char *s) { put(o, s, strlen(s)); }

/* Copy JSON text, escaping the characters that matter to the HTML parser. */
static void put_json_text(out_t *o, const char *s) {
  const char *run = s;
  for (; *s; s++) {
    if (*s != '<' && *s != '>' && *s != '&') continue;
    put(o, run, (size_t)(s - run));
    char esc[8];
    snprintf(esc, sizeof esc, "\\u%04x", (unsigned)(unsigned char)*s);
    puts_(o, esc);
    run = s + 1;
  }
  put(o, run, (size_t)(s - run));
}

/* A JSON string from arbitrary bytes (control characters and HTML
 * metacharacters escaped; well-formed UTF-8 passes through, any other byte
 * >= 0x80 becomes \ufffd, so the page is valid UTF-8 whatever a name holds). */
static void put_string(out_t *o, const char *s) {
  puts_(o, "\"");
  for (; s && *s; s++) {
    unsigned char c = (unsigned char)*s;
    char esc[8];
    unsigned cp;
    size_t n = c >= 0x80 ? cm__utf8_char(s, &cp) : 1;
    if (n != 1) {
      if (n) put(o, s, n);
      else puts_(o, "\\ufffd");
      s += n ? n - 1 : 0;
    } else if (c == '"' || c == '\\') {
      esc[0] = '\\', esc[1] = (char)c, esc[2] = 0;
      puts_(o, esc);
    } else if (c < 0x20 || c == '<' || c == '>' || c == '&') {
      snprintf(esc, sizeof esc, "\\u%04x", c);
      puts_(o, esc);
    } else {
      put(o, (const char *)&c, 1);
    }
  }
  puts_(o, "\"");
}

static void put_u64(out_t *o, uint64_t v) {
  char b[24];
  int k = snprintf(b, sizeof b, "%" PRIu64, v);
  put(o, b, (size_t)k);
}

static void put_key_u64(out_t *o, const char *key, uint64_t v) {
  puts_(o, "\"");
  puts_(o, key);
  puts_(o, "\":");
  put_u64(o, v);
}

/* ---- columns --------------------------------------------------------------- */

typedef enum col {
  COL_E0, COL_E1, COL_T0, COL_T1, COL_SIZE, COL_POOL, COL_ADDR, COL_PAD
} col_t;

/* One allocation's value in a column; -1 encodes "none". */
static void put_cell(out_t *o, const cm_replay_recorder_t *r, const uint64_t *bases, size_t i,
                     col_t c) {
  const cm__rec_alloc_t *a = &r->allocs[i];
  bool placed = a->range != CM__REC_FAILED;
  switch (c) {
  case COL_E0: put_u64(o, a->e0); break;
  case COL_E1: if (a->e1 == CM__REC_NO_EVENT) puts_(o, "-1"); else put_u64(o, a->e1); break;
  case COL_T0: put_u64(o, a->t0); break;
  case COL_T1: if (a->e1 == CM__REC_NO_EVENT) puts_(o, "-1"); else put_u64(o, a->t1); break;
  case COL_SIZE: put_u64(o, a->size); break;
  case COL_POOL: if (placed) put_u64(o, a->pool); else puts_(o, "-1"); break;
  case COL_ADDR: put_u64(o, placed ? bases[a->range] + a->offset : 0); break;
  case COL_PAD: put_u64(o, placed ? a->padding : 0); break;
  }
}

static void put_column(out_t *o, const char *key, const cm_replay_recorder_t *r,
                       const uint64_t *bases, const uint32_t *shown, size_t nshown, col_t c) {
  puts_(o, "\"");
  puts_(o, key);
  puts_(o, "\":[");
  for (size_t k = 0; k < nshown; k++) {
    if (k) puts_(o, ",");
    put_cell(o, r, bases, shown[k], c);
  }
  puts_(o, "]");
}

static int cmp_desc_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x > y ? -1 : x < y;
}

/* Choose the allocations to draw: all, or the `max` largest. */
static int choose(const cm_replay_recorder_t *r, size_t max, uint32_t **shown, size_t *nshown,
                  uint64_t *min_size) {
  size_t n = r->alloc_count;
  *shown = malloc((n ? n : 1) * sizeof **shown);
  if (!*shown) return CM_ENOMEM;
  *min_size = 0;
  uint64_t threshold = 0;
  size_t equal_quota = n;
  if (n > max) {
    uint64_t *sizes = malloc(n * sizeof *sizes);
    if (!sizes) return CM_ENOMEM;
    for (size_t i = 0; i < n; i++) sizes[i] = r->allocs[i].size;
    qsort(sizes, n, sizeof *sizes, cmp_desc_u64);
    threshold = sizes[max - 1];
    size_t above = 0;
    while (above < max && sizes[above] > threshold) above++;
    equal_quota = max - above;
    free(sizes);
    *min_size = threshold;
  }
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    uint64_t s = r->allocs[i].size;
    if (n > max) {
      if (s < threshold) continue;
      if (s == threshold) {
        if (equal_quota == 0) continue;
        equal_quota--;
      }
    }
    (*shown)[k++] = (uint32_t)i;
  }
  *nshown = k;
  return CM_OK;
}

/* ---- one layout ---------------------------------------------------------------- */

static const char *kind_name(cm_pool_kind_t k) {
  switch (k) {
  case CM_POOL_SLICED: return "sliced";
  case CM_POOL_EXCLUSIVE: return "exclusive";
  case CM_POOL_DIRECT: return "direct";
  case CM_POOL_ARENA: return "arena";
  case CM_POOL_PERSISTENT: return "persistent";
  case CM_POOL_ADAPTIVE: return "adaptive";
  case CM_POOL_DEDICATED: return "dedicated";
  }
  return "pool";
}

/* A pool's cached bytes, or -1 when the pool does not report them. */
static void put_cached(out_t *o, uint64_t v) {
  if (v == UINT64_MAX) puts_(o, "-1");
  else put_u64(o, v);
}

static void put_pool_bytes(out_t *o, const cm__rec_pool_t *p) {
  puts_(o, "{");
  put_key_u64(o, "reserved", p->reserved);
  puts_(o, ",");
  put_key_u64(o, "in_use", p->in_use);
  puts_(o, ",");
  put_key_u64(o, "padding", p->padding);
  puts_(o, ",\"cached\":");
  put_cached(o, p->cached);
  puts_(o, "}");
}

static void put_minimal_report(out_t *o, const cm_replay_html_series_t *s) {
  const cm_replay_result_t *r = s->result;
  puts_(o, "{\"layout\":");
  put_string(o, s->label);
  if (r) {
    puts_(o, ",");
    put_key_u64(o, "events", r->events);
    puts_(o, ",");
    put_key_u64(o, "peak_live_bytes", r->peak_live_bytes);
    puts_(o, ",");
    put_key_u64(o, "peak_reserved_bytes", r->peak_reserved_bytes);
    puts_(o, ",");
    put_key_u64(o, "device_allocs", r->device_allocs);
    puts_(o, ",");
    put_key_u64(o, "device_frees", r->device_frees);
    puts_(o, ",");
    put_key_u64(o, "device_maps", r->device_maps);
    puts_(o, ",");
    put_key_u64(o, "device_unmaps", r->device_unmaps);
    puts_(o, ",");
    put_key_u64(o, "failed_allocs", r->failed_allocs);
    char b[64];
    snprintf(b, sizeof b, ",\"reserved_over_live\":%.6f",
             r->peak_live_bytes ? (double)r->peak_reserved_bytes / (double)r->peak_live_bytes : 0.0);
    puts_(o, b);
  }
  puts_(o, "}");
}

static int put_layout(out_t *o, const cm_replay_html_series_t *s, const uint32_t *shown,
                      size_t nshown) {
  const cm_replay_recorder_t *r = s->recorder;
  puts_(o, "{\"label\":");
  put_string(o, s->label);
  puts_(o, ",\"report\":");
  if (s->json) put_json_text(o, s->json);
  else put_minimal_report(o, s);
  if (!r || !r->pool_count) {
    puts_(o, ",\"pools\":[],\"timeline\":null,\"peak\":null,\"allocations\":null}");
    return CM_OK;
  }
  const size_t np = r->pool_count;

  /* pools: kind and options from the recorder */
  puts_(o, ",\"pools\":[");
  for (size_t j = 0; j < np; j++) {
    if (j) puts_(o, ",");
    bool persistent = j + 1 == np;
    char desc[256];
    if (persistent) snprintf(desc, sizeof desc, "persistent");
    else cm_pools_format(&r->opts[j], 1, desc, sizeof desc);
    puts_(o, "{\"index\":");
    if (persistent) puts_(o, "\"P\"");
    else put_u64(o, j);
    puts_(o, ",\"kind\":");
    put_string(o, persistent ? "persistent" : kind_name(r->opts[j].kind));
    puts_(o, ",\"options\":");
    put_string(o, desc);
    puts_(o, "}");
  }
  puts_(o, "]");

  /* timeline */
  puts_(o, ",\"timeline\":{");
  static const char *const keys[] = {"event", "time_us", "live", "reserved"};
  for (size_t k = 0; k < 4; k++) {
    if (k) puts_(o, ",");
    puts_(o, "\"");
    puts_(o, keys[k]);
    puts_(o, "\":[");
    for (size_t i = 0; i < r->sample_count; i++) {
      const cm__rec_sample_t *sm = &r->samples[i];
      uint64_t v = k == 0 ? sm->event : k == 1 ? sm->time_us : k == 2 ? sm->live : sm->reserved;
      if (i) puts_(o, ",");
      put_u64(o, v);
    }
    puts_(o, "]");
  }
  puts_(o, ",\"pools\":[");
  for (size_t j = 0; j < np; j++) {
    if (j) puts_(o, ",");
    static const char *const pk[] = {"reserved", "in_use", "padding", "cached"};
    puts_(o, "{");
    for (size_t k = 0; k < 4; k++) {
      if (k) puts_(o, ",");
      puts_(o, "\"");
      puts_(o, pk[k]);
      puts_(o, "\":[");
      for (size_t i = 0; i < r->sample_count; i++) {
        const cm__rec_pool_t *p = &r->sample_pools[i * np + j];
        if (i) puts_(o, ",");
        if (k == 3) put_cached(o, p->cached);
        else put_u64(o, k == 0 ? p->reserved : k == 1 ? p->in_use : p->padding);
      }
      puts_(o, "]");
    }
    puts_(o, "}");
  }
  puts_(o, "]}");

  /* the peak */
  puts_(o, ",\"peak\":{");
  put_key_u64(o, "event", r->peak_event);
  puts_(o, ",");
  put_key_u64(o, "time_us", r->peak_time_us);
  puts_(o, ",");
  put_key_u64(o, "live", r->peak_live);
  puts_(o, ",");
  put_key_u64(o, "reserved", r->peak_reserved);
  puts_(o, ",\"pools\":[");
  for (size_t j = 0; j < np; j++) {
    if (j) puts_(o, ",");
    put_pool_bytes(o, &r->peak_pools[j]);
  }
  puts_(o, "]}");

  /* address axis: each pool's ranges end to end, in order of first use */
  uint64_t *bases = calloc(r->range_count ? r->range_count : 1, sizeof *bases);
  uint64_t *extent = calloc(np, sizeof *extent);
  if (!bases || !extent) {
    free(bases);
    free(extent);
    return CM_ENOMEM;
  }
  for (size_t k = 0; k < r->range_count; k++) {
    const cm__rec_range_t *g = &r->ranges[k];
    bases[k] = extent[g->pool];
    extent[g->pool] += g->extent;
  }
  puts_(o, ",\"pool_extent\":[");
  for (size_t j = 0; j < np; j++) {
    if (j) puts_(o, ",");
    put_u64(o, extent[j]);
  }
  puts_(o, "],\"pool_ranges\":[");
  for (size_t j = 0; j < np; j++) {
    if (j) puts_(o, ",");
    size_t cnt = 0;
    for (size_t k = 0; k < r->range_count; k++) cnt += r->ranges[k].pool == j;
    put_u64(o, cnt);
  }
  puts_(o, "],\"allocations\":{");
  put_column(o, "pool", r, bases, shown, nshown, COL_POOL);
  puts_(o, ",");
  put_column(o, "addr", r, bases, shown, nshown, COL_ADDR);
  puts_(o, ",");
  put_column(o, "padding", r, bases, shown, nshown, COL_PAD);
  puts_(o, "}}");
  free(bases);
  free(extent);
  return CM_OK;
}

/* ---- one trace ------------------------------------------------------------------ */

static int put_trace(out_t *o, const cm_replay_html_panel_t *p, size_t max_allocs) {
  const cm_replay_recorder_t *first = NULL;
  for (size_t l = 0; l < p->series_count; l++)
    if (p->series[l].recorder && p->series[l].recorder->pool_count) {
      first = p->series[l].recorder;
      break;
    }
  uint32_t *shown = NULL;
  size_t nshown = 0;
  uint64_t min_size = 0;
  if (first && choose(first, max_allocs, &shown, &nshown, &min_size) != CM_OK) {
    free(shown);
    return CM_ENOMEM;
  }
  puts_(o, "{\"trace\":");
  put_string(o, p->title);
  if (first) {
    puts_(o, ",");
    put_key_u64(o, "events", first->events);
    puts_(o, ",");
    put_key_u64(o, "duration_us", first->duration_us);
  }
  puts_(o, ",\"extra\":");
  if (p->extra_json) put_json_text(o, p->extra_json);
  else puts_(o, "null");
  puts_(o, ",\"allocations\":");
  if (first) {
    puts_(o, "{");
    put_key_u64(o, "total", first->alloc_count);
    puts_(o, ",");
    put_key_u64(o, "shown", nshown);
    puts_(o, ",");
    put_key_u64(o, "min_size", min_size);
    puts_(o, ",");
    put_column(o, "alloc_event", first, NULL, shown, nshown, COL_E0);
    puts_(o, ",");
    put_column(o, "free_event", first, NULL, shown, nshown, COL_E1);
    puts_(o, ",");
    put_column(o, "alloc_us", first, NULL, shown, nshown, COL_T0);
    puts_(o, ",");
    put_column(o, "free_us", first, NULL, shown, nshown, COL_T1);
    puts_(o, ",");
    put_column(o, "size", first, NULL, shown, nshown, COL_SIZE);
    if (p->alloc_frames && p->alloc_frames_count) {
      puts_(o, ",\"frames\":[");
      for (size_t k = 0; k < nshown; k++) {
        if (k) puts_(o, ",");
        size_t a = shown[k];
        const char *f = a < p->alloc_frames_count ? p->alloc_frames[a] : NULL;
        if (f && *f) put_json_text(o, f);
        else puts_(o, "null");
      }
      puts_(o, "]");
    }
    puts_(o, "}");
  } else {
    puts_(o, "null");
  }
  puts_(o, ",\"layouts\":[");
  int rc = CM_OK;
  for (size_t l = 0; l < p->series_count && rc == CM_OK; l++) {
    if (l) puts_(o, ",");
    const cm_replay_recorder_t *r = p->series[l].recorder;
    /* every recorder of a trace saw the same allocations; draw the same subset */
    bool same = r && first && r->alloc_count == first->alloc_count;
    cm_replay_html_series_t s = p->series[l];
    if (r && !same) s.recorder = NULL;
    rc = put_layout(o, &s, shown, nshown);
  }
  puts_(o, "]}");
  free(shown);
  return rc;
}

int cm_replay_html(const cm_replay_html_panel_t *panels, size_t panel_count,
                   const cm_replay_html_options_t *opts, cm_replay_write_fn write, void *arg) {
  if ((!panels && panel_count) || !write) return CM_EINVAL;
  for (size_t i = 0; i < panel_count; i++) {
    if (!panels[i].series && panels[i].series_count) return CM_EINVAL;
    for (size_t l = 0; l < panels[i].series_count; l++)
      if (panels[i].series[l].recorder && panels[i].series[l].recorder->status) return CM_EINVAL;
  }
  size_t max_allocs = opts && opts->max_allocations ? opts->max_allocations : 100000;
  const char *tpl = (const char *)cm__report_html;
  size_t len = cm__report_html_len, ml = strlen(MARKER), at = len;
  for (size_t i = 0; i + ml <= len; i++)
    if (!memcmp(tpl + i, MARKER, ml)) {
      at = i;
      break;
    }
  if (at == len) return CM_EINVAL; /* a template without its marker: a build error */
  out_t *o = calloc(1, sizeof *o);
  if (!o) return CM_ENOMEM;
  o->write = write;
  o->arg = arg;
  put(o, tpl, at);
  puts_(o, "{\"format\":\"cubemem-report\",\"version\":1,\"traces\":[");
  int rc = CM_OK;
  for (size_t i = 0; i < panel_count && rc == CM_OK && !o->err; i++) {
    if (i) puts_(o, ",");
    rc = put_trace(o, &panels[i], max_allocs);
  }
  puts_(o, "]}");
  put(o, tpl + at + ml, len - at - ml);
  flush(o);
  if (rc == CM_OK) rc = o->err;
  free(o);
  return rc;
}
