/*
 * snapframes.c - the stack frames of a PyTorch snapshot's allocations, for
 * the reports (cm_snapshot_frames).
 *
 * A snapshot recorded with torch.cuda.memory._record_memory_history() keeps,
 * for each trace entry, the stack that made it ("frames": a list of
 * {"filename","line","name"} dicts, innermost first). The trace that
 * cm_trace_parse_snapshot builds has one ALLOC event per allocation row of
 * the converted CSV: first the allocations live before recording (info
 * .preexisting of them, with no stack), then one per `alloc` entry of the
 * chosen device's trace, in order. This file walks the same entries in the
 * same order and gives each ALLOC event its frames, so the k-th ALLOC event
 * of the trace has alloc_frames[k]. Frames are written "file:line name" once
 * each into a table (the strings repeat across allocations) and each
 * allocation is a JSON array of indices into it.
 *
 * Exports cm_snapshot_frames, cm_snapshot_frames_free.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "cubemem/replay.h"
#include "replay/pickle.h"
#include "base/sbuf.h"

typedef struct table {
  char **s;         /* the distinct frame strings */
  size_t n, cap;
  uint32_t *slot;   /* open addressing: index + 1, 0 = empty */
  size_t nslots;    /* a power of two, at least twice n */
} table_t;

static uint64_t hash_str(const char *s) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

static bool table_grow(table_t *t) {
  size_t ns = t->nslots ? t->nslots * 2 : 1024;
  uint32_t *sl = calloc(ns, sizeof *sl);
  if (!sl) return false;
  for (size_t i = 0; i < t->n; i++) {
    size_t j = (size_t)hash_str(t->s[i]) & (ns - 1);
    while (sl[j]) j = (j + 1) & (ns - 1);
    sl[j] = (uint32_t)i + 1;
  }
  free(t->slot);
  t->slot = sl;
  t->nslots = ns;
  return true;
}

/* The index of s in the table, adding a copy when absent; -1 when out of memory. */
static int64_t table_index(table_t *t, const char *s) {
  if ((t->n + 1) * 2 > t->nslots && !table_grow(t)) return -1;
  size_t j = (size_t)hash_str(s) & (t->nslots - 1);
  while (t->slot[j]) {
    if (!strcmp(t->s[t->slot[j] - 1], s)) return t->slot[j] - 1;
    j = (j + 1) & (t->nslots - 1);
  }
  if (t->n == t->cap) {
    size_t nc = t->cap ? t->cap * 2 : 256;
    char **ns = realloc(t->s, nc * sizeof *ns);
    if (!ns) return -1;
    t->s = ns;
    t->cap = nc;
  }
  char *copy = strdup(s);
  if (!copy || t->n >= UINT32_MAX - 1) {
    free(copy);
    return -1;
  }
  t->s[t->n] = copy;
  t->slot[j] = (uint32_t)t->n + 1;
  return (int64_t)t->n++;
}

/* "file:line name" of one frame dict into buf (the text as recorded). */
static void frame_text(const cm_pv_t *f, char *buf, size_t cap) {
  const cm_pv_t *file = cm__pv_get(f, "filename"), *line = cm__pv_get(f, "line"),
                *name = cm__pv_get(f, "name");
  int fl = file && file->kind == CM_PV_STR ? (int)(file->n < 400 ? file->n : 400) : 0;
  int nl = name && name->kind == CM_PV_STR ? (int)(name->n < 200 ? name->n : 200) : 0;
  long long ln = line && line->kind == CM_PV_INT && !line->big ? (long long)line->i : 0;
  snprintf(buf, cap, "%.*s:%lld %.*s", fl, fl ? file->s : "", ln, nl, nl ? name->s : "");
}

/* The JSON string of s into b. */
static void json_str(cm__sbuf *b, const char *s) {
  cm__sb_printf(b, "\"");
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\') cm__sb_printf(b, "\\%c", *p);
    else if (*p < 0x20) cm__sb_printf(b, "\\u%04x", *p);
    else cm__sb_printf(b, "%c", *p);
  }
  cm__sb_printf(b, "\"");
}

void cm_snapshot_frames_free(cm_snapshot_frames_t *f) {
  if (!f) return;
  for (size_t i = 0; i < f->count; i++) free(f->alloc_frames[i]);
  free(f->alloc_frames);
  free(f->table_json);
  memset(f, 0, sizeof *f);
}

int cm_snapshot_frames(const void *buf, size_t len, const cm_snapshot_options_t *opts,
                       cm_snapshot_frames_t *out, cm_diag_t *diag) {
  if (!out || (!buf && len)) return cm__diag_set(diag, CM_EINVAL, "cm_snapshot_frames: NULL argument");
  memset(out, 0, sizeof *out);
  /* the device and the allocations live before recording, as the trace has them */
  char *csv = NULL;
  size_t csv_len = 0;
  cm_snapshot_info_t info;
  int rc = cm_snapshot_to_csv(buf, len, opts, &csv, &csv_len, &info, diag);
  free(csv);
  if (rc != CM_OK) return rc;
  cm_pickle_t *doc = NULL;
  const cm_pv_t *root = NULL;
  rc = cm__pickle_parse(buf, len, &doc, &root, diag);
  if (rc != CM_OK) return rc;
  const cm_pv_t *traces = root->kind == CM_PV_DICT ? cm__pv_get(root, "device_traces") : NULL;
  const cm_pv_t *trace = traces && traces->kind == CM_PV_LIST && (size_t)info.device < traces->n
                             ? traces->items[info.device]
                             : NULL;
  size_t n = trace && trace->kind == CM_PV_LIST ? trace->n : 0;
  size_t allocs = (size_t)info.preexisting;
  for (size_t i = 0; i < n; i++)
    if (trace->items[i]->kind == CM_PV_DICT && cm__pv_str_is(cm__pv_get(trace->items[i], "action"), "alloc"))
      allocs++;
  table_t t = {0};
  out->alloc_frames = calloc(allocs ? allocs : 1, sizeof *out->alloc_frames);
  if (!out->alloc_frames) rc = cm__diag_set(diag, CM_ENOMEM, "out of memory collecting frames");
  out->count = rc == CM_OK ? allocs : 0;
  size_t k = (size_t)info.preexisting;
  bool any = false;
  for (size_t i = 0; i < n && rc == CM_OK; i++) {
    const cm_pv_t *e = trace->items[i];
    if (e->kind != CM_PV_DICT || !cm__pv_str_is(cm__pv_get(e, "action"), "alloc")) continue;
    const cm_pv_t *fr = cm__pv_get(e, "frames");
    if (fr && fr->kind == CM_PV_LIST && fr->n) {
      cm__sbuf b = {0};
      cm__sb_printf(&b, "[");
      size_t w = 0;
      for (size_t j = 0; j < fr->n && rc == CM_OK; j++) {
        if (fr->items[j]->kind != CM_PV_DICT) continue;
        char text[640];
        frame_text(fr->items[j], text, sizeof text);
        int64_t idx = table_index(&t, text);
        if (idx < 0) rc = cm__diag_set(diag, CM_ENOMEM, "out of memory collecting frames");
        else cm__sb_printf(&b, "%s%" PRId64, w++ ? "," : "", idx);
      }
      cm__sb_printf(&b, "]");
      if (b.oom && rc == CM_OK) rc = cm__diag_set(diag, CM_ENOMEM, "out of memory collecting frames");
      if (w && rc == CM_OK) {
        out->alloc_frames[k] = b.p;
        any = true;
      } else {
        free(b.p);
      }
    }
    k++;
  }
  cm__pickle_free(doc);
  if (rc == CM_OK && any) {
    cm__sbuf b = {0};
    cm__sb_printf(&b, "{\"frames\":[");
    for (size_t i = 0; i < t.n; i++) {
      if (i) cm__sb_printf(&b, ",");
      json_str(&b, t.s[i]);
    }
    cm__sb_printf(&b, "]}");
    if (b.oom) {
      free(b.p);
      rc = cm__diag_set(diag, CM_ENOMEM, "out of memory collecting frames");
    } else {
      out->table_json = b.p;
    }
  }
  for (size_t i = 0; i < t.n; i++) free(t.s[i]);
  free(t.s);
  free(t.slot);
  if (rc != CM_OK || !any) cm_snapshot_frames_free(out); /* no frames: count 0 */
  return rc;
}
