/*
 * snapshot.c - PyTorch memory snapshots (torch.cuda.memory._dump_snapshot)
 * as allocation traces.
 *
 * Algorithm. The pickle is read by the restricted reader (pickle.c) into
 * plain values. The chosen device's trace entries are walked once in order,
 * keeping the live pointers (pointer -> requested size) in a hash map; frees
 * of pointers the trace never allocated are remembered as "live before
 * recording". Then the device's segments give the active blocks at dump;
 * those the trace does not account for are live before recording too. The
 * pre-existing allocations are sorted by address (stably) and emitted at
 * time zero, followed by the trace's rows, as RMM CSV text. The text is then
 * parsed by cm_trace_parse, so a snapshot and the CSV that
 * tools/torch_snapshot_to_csv.py writes for it give the same trace.
 *
 * Exports cm_snapshot_options_init, cm_snapshot_detect, cm_snapshot_to_csv,
 * cm_trace_parse_snapshot, cm_trace_load_any.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/util.h"
#include "cubemem/replay.h"
#include "base/u64map.h"
#include "replay/pickle.h"
#include "base/sbuf.h"

enum { ROW_ALLOC, ROW_FREE, ROW_FAIL };

typedef struct row {
  uint64_t time_us;
  uint64_t addr, size, stream;
  size_t seq; /* for a stable sort */
  int action;
  uint64_t block_size; /* a block live at dump: its size; else 0 (unknown) */
} row_t;

typedef struct rows {
  row_t *r;
  size_t n, cap;
} rows_t;

static bool rows_push(rows_t *v, row_t r) {
  if (v->n == v->cap) {
    size_t nc = v->cap ? v->cap * 2 : 256;
    row_t *nr = realloc(v->r, nc * sizeof *nr);
    if (!nr) return false;
    v->r = nr;
    v->cap = nc;
  }
  r.seq = v->n;
  v->r[v->n++] = r;
  return true;
}

void cm_snapshot_options_init(cm_snapshot_options_t *opts) {
  if (!opts) return;
  memset(opts, 0, sizeof *opts);
  opts->device = -1;
}

bool cm_snapshot_detect(const void *buf, size_t len) {
  const unsigned char *p = buf;
  return p && len >= 2 && p[0] == 0x80 && p[1] >= 2 && p[1] <= 5;
}

/* An integer field: absent or None -> dflt; int, bool or float -> its value.
 * Returns false for anything else or a value outside int64. */
static bool num(const cm_pv_t *v, int64_t dflt, int64_t *out) {
  if (!v || v->kind == CM_PV_NONE) {
    *out = dflt;
    return true;
  }
  if ((v->kind == CM_PV_INT || v->kind == CM_PV_BOOL) && !v->big) {
    *out = v->i;
    return true;
  }
  if (v->kind == CM_PV_FLOAT && v->f > -9.2e18 && v->f < 9.2e18) {
    *out = (int64_t)v->f;
    return true;
  }
  return false;
}

static int bad_field(cm_diag_t *diag, const char *what, const char *field, size_t index) {
  return cm__diag_set(diag, CM_EPARSE,
                      "not a memory snapshot: %s %zu has a bad '%s' (expected a non-negative "
                      "integer)", what, index, field);
}

static int cmp_addr(const void *a, const void *b) {
  const row_t *x = a, *y = b;
  if (x->addr != y->addr) return x->addr < y->addr ? -1 : 1;
  return x->seq < y->seq ? -1 : x->seq > y->seq;
}


static void emit(cm__sbuf *b, const row_t *r) {
  static const char *const names[] = {"allocate", "free", "allocate failure"};
  uint64_t us = r->time_us, s = us / 1000000u, frac = us % 1000000u;
  cm__sb_printf(b, "1,%02" PRIu64 ":%02" PRIu64 ":%02" PRIu64 ".%06" PRIu64 ",%s,0x%" PRIx64
               ",%" PRIu64 ",0x%" PRIx64 "\n",
            s / 3600, (s / 60) % 60, s % 60, frac, names[r->action], r->addr, r->size, r->stream);
}

/* key in the maps: address + 1 (addresses are < 2^63, key 0 is reserved) */
#define KEY(a) ((a) + 1)
#define SIZE_VAL(s) ((void *)(uintptr_t)((s) + 1))

/* allocator_settings["PYTORCH_CUDA_ALLOC_CONF"] (PyTorch 2.4 and later) into
 * info->alloc_conf; left empty when absent, not a string, or too long. */
static void allocator_conf(const cm_pv_t *snap, cm_snapshot_info_t *info) {
  info->alloc_conf[0] = '\0';
  if (snap->kind != CM_PV_DICT) return;
  const cm_pv_t *set = cm__pv_get(snap, "allocator_settings");
  const cm_pv_t *c = set && set->kind == CM_PV_DICT ? cm__pv_get(set, "PYTORCH_CUDA_ALLOC_CONF") : NULL;
  if (!c || c->kind != CM_PV_STR || c->n >= sizeof info->alloc_conf) return;
  memcpy(info->alloc_conf, c->s, c->n);
  info->alloc_conf[c->n] = '\0';
  info->has_alloc_conf = true;
}

/* ---- the starting state (cm_snapshot_start_state) ------------------------ */

static bool state_push_segment(cm_snapshot_state_t *st, cm_snapshot_segment_t g) {
  if (st->segment_count == st->segment_cap) {
    size_t nc = st->segment_cap ? st->segment_cap * 2 : 64;
    cm_snapshot_segment_t *ns = realloc(st->segments, nc * sizeof *ns);
    if (!ns) return false;
    st->segments = ns;
    st->segment_cap = nc;
  }
  st->segments[st->segment_count++] = g;
  st->reserved_bytes += g.size;
  return true;
}

/* A segment of the chosen device at dump into st. */
static bool state_segment(cm_snapshot_state_t *st, const cm_pv_t *seg, uint64_t addr,
                          uint64_t total) {
  int64_t stream = 0;
  if (!num(cm__pv_get(seg, "stream"), 0, &stream) || stream < 0) stream = 0;
  const cm_pv_t *ex = cm__pv_get(seg, "is_expandable");
  cm_snapshot_segment_t g = {addr, total, (uint64_t)stream,
                             cm__pv_str_is(cm__pv_get(seg, "segment_type"), "small"),
                             ex && ex->kind == CM_PV_BOOL && ex->i != 0};
  if (g.expandable) st->expandable = true;
  return state_push_segment(st, g);
}

/* Is `action` one of the caching allocator's segment entries; *made: it
 * made the segment (segment_alloc, segment_map) rather than gave it back. */
static bool segment_action(const cm_pv_t *action, bool *made) {
  *made = cm__pv_str_is(action, "segment_alloc") || cm__pv_str_is(action, "segment_map");
  return *made || cm__pv_str_is(action, "segment_free") || cm__pv_str_is(action, "segment_unmap");
}

/* Undo the history's segment entries (ev, in order; action 0: made, 1:
 * given back) on the segments at dump, last first: a segment made during
 * the history did not exist at its start, one given back did. */
static bool state_undo_segments(cm_snapshot_state_t *st, const rows_t *ev) {
  for (size_t i = ev->n; i-- > 0;) {
    const row_t *r = &ev->r[i];
    st->segment_events++;
    if (r->action == 0) {
      for (size_t k = 0; k < st->segment_count; k++)
        if (st->segments[k].addr == r->addr) {
          st->reserved_bytes -= st->segments[k].size;
          st->segments[k] = st->segments[--st->segment_count];
          break;
        }
    } else {
      cm_snapshot_segment_t g = {r->addr, r->size, r->stream, r->size == 2ull << 20, false};
      if (!state_push_segment(st, g)) return false;
    }
  }
  return true;
}

/* The allocations live before recording (pre, in the trace's order) as the
 * starting state's blocks. */
static bool state_blocks(cm_snapshot_state_t *st, const rows_t *pre) {
  st->blocks = pre->n ? calloc(pre->n, sizeof *st->blocks) : NULL;
  if (pre->n && !st->blocks) return false;
  st->block_count = pre->n;
  for (size_t i = 0; i < pre->n; i++) {
    const row_t *r = &pre->r[i];
    st->blocks[i] = (cm_snapshot_block_t){r->addr, r->block_size ? r->block_size : r->size, r->size,
                                          r->stream, r->block_size != 0};
  }
  return true;
}

static int cmp_segment(const void *a, const void *b) {
  const cm_snapshot_segment_t *x = a, *y = b;
  return x->addr < y->addr ? -1 : x->addr > y->addr;
}

static int convert(const cm_pv_t *snap, const cm_snapshot_options_t *o, cm__sbuf *out,
                   cm_snapshot_info_t *info, cm_snapshot_state_t *state, cm_diag_t *diag) {
  const cm_pv_t *segs = NULL, *traces = NULL;
  if (snap->kind == CM_PV_DICT) {
    segs = cm__pv_get(snap, "segments");
    traces = cm__pv_get(snap, "device_traces");
    if (!segs && !traces)
      return cm__diag_set(diag, CM_EPARSE,
                          "not a memory snapshot: the dict has neither 'segments' nor "
                          "'device_traces' (write it with torch.cuda.memory._dump_snapshot)");
  } else if (snap->kind == CM_PV_LIST) {
    segs = snap; /* very old snapshots: a bare segment list */
  } else {
    return cm__diag_set(diag, CM_EPARSE, "not a memory snapshot: expected a dict with 'segments'");
  }
  if (segs && segs->kind == CM_PV_NONE) segs = NULL;
  if (traces && traces->kind == CM_PV_NONE) traces = NULL;
  if ((segs && segs->kind != CM_PV_LIST) || (traces && traces->kind != CM_PV_LIST))
    return cm__diag_set(diag, CM_EPARSE,
                        "not a memory snapshot: 'segments' and 'device_traces' must be lists");
  size_t ntraces = traces ? traces->n : 0;
  int device = o->device;
  bool history = false;
  for (size_t i = 0; i < ntraces; i++) {
    const cm_pv_t *t = traces->items[i];
    if (t->kind == CM_PV_LIST && t->n > 0) {
      if (!history && device < 0) device = (int)i;
      history = true;
    }
  }
  if (device < 0) device = 0;
  int device_count = (int)ntraces;
  for (size_t i = 0; segs && i < segs->n; i++) {
    int64_t d;
    if (segs->items[i]->kind == CM_PV_DICT && num(cm__pv_get(segs->items[i], "device"), 0, &d) &&
        d >= 0 && d < 1 << 20 && d + 1 > device_count)
      device_count = (int)d + 1;
  }
  info->device = device;
  info->device_count = device_count;
  info->has_history = history;
  allocator_conf(snap, info);

  const cm_pv_t *trace = (size_t)device < ntraces ? traces->items[device] : NULL;
  if (trace && trace->kind != CM_PV_LIST)
    return cm__diag_set(diag, CM_EPARSE, "not a memory snapshot: device_traces[%d] is not a list",
                        device);
  const char *free_action = o->free_on_requested ? "free_requested" : "free_completed";
  rows_t ev = {0}, pre = {0}, segev = {0};
  cm__u64map live = {0}, pre_seen = {0};
  int rc = CM_OK;
  bool have_t0 = false;
  int64_t t0 = 0;
  size_t n = trace ? trace->n : 0;
  info->trace_entries = n;
  for (size_t i = 0; i < n && rc == CM_OK; i++) {
    const cm_pv_t *e = trace->items[i];
    if (e->kind != CM_PV_DICT) continue;
    const cm_pv_t *action = cm__pv_get(e, "action");
    int64_t t = 0, addr = 0, size = 0, stream = 0;
    bool made = false;
    const cm_pv_t *tv = cm__pv_get(e, "time_us");
    bool has_t = tv && tv->kind != CM_PV_NONE;
    if (!num(tv, 0, &t)) {
      rc = bad_field(diag, "trace entry", "time_us", i);
      break;
    }
    if (has_t && !have_t0) t0 = t, have_t0 = true;
    /* time since the first entry, 0 before it; unsigned so that any two
     * int64 values subtract without overflow */
    uint64_t rel = has_t && t > t0 ? (uint64_t)t - (uint64_t)t0 : 0;
    if (!num(cm__pv_get(e, "addr"), 0, &addr) || addr < 0) rc = bad_field(diag, "trace entry", "addr", i);
    else if (!num(cm__pv_get(e, "size"), 0, &size) || size < 0) rc = bad_field(diag, "trace entry", "size", i);
    else if (!num(cm__pv_get(e, "stream"), 0, &stream) || stream < 0) rc = bad_field(diag, "trace entry", "stream", i);
    if (rc) break;
    row_t r = {rel, (uint64_t)addr, (uint64_t)size, (uint64_t)stream, 0, ROW_ALLOC, 0};
    if (cm__pv_str_is(action, "alloc")) {
      if (cm__u64map_put(&live, KEY(r.addr), SIZE_VAL(r.size)) || !rows_push(&ev, r)) rc = CM_ENOMEM;
    } else if (cm__pv_str_is(action, free_action)) {
      void *sv = cm__u64map_remove(&live, KEY(r.addr));
      r.action = ROW_FREE;
      if (sv) {
        r.size = (uint64_t)(uintptr_t)sv - 1;
      } else if (!cm__u64map_get(&pre_seen, KEY(r.addr))) {
        if (cm__u64map_put(&pre_seen, KEY(r.addr), SIZE_VAL(0))) rc = CM_ENOMEM;
        row_t p = {0, r.addr, r.size, r.stream, 0, ROW_ALLOC, 0};
        if (!rc && !rows_push(&pre, p)) rc = CM_ENOMEM;
        info->freed_unallocated++;
      } else {
        continue; /* a second free of an unknown pointer: nothing to free */
      }
      if (!rc && !rows_push(&ev, r)) rc = CM_ENOMEM;
    } else if (state && segment_action(action, &made)) {
      r.action = made ? 0 : 1;
      if (!rows_push(&segev, r)) rc = CM_ENOMEM;
    } else if (cm__pv_str_is(action, "oom")) {
      r.action = ROW_FAIL;
      r.addr = 0;
      info->oom_entries++;
      if (!rows_push(&ev, r)) rc = CM_ENOMEM;
    }
  }
  /* active blocks at dump that the trace does not account for. The memo
   * lets one segment dict or blocks list appear many times for two bytes
   * each: each is walked once (seen), and a block address is taken once
   * (pre_seen), so the work and the rows stay proportional to the input. */
  cm__u64map seen = {0};
  for (size_t i = 0; rc == CM_OK && segs && i < segs->n; i++) {
    const cm_pv_t *seg = segs->items[i];
    int64_t d = 0, addr = 0, total = 0;
    if (seg->kind != CM_PV_DICT) continue;
    if (cm__u64map_get(&seen, (uint64_t)(uintptr_t)seg)) continue;
    if (cm__u64map_put(&seen, (uint64_t)(uintptr_t)seg, (void *)seg)) {
      rc = CM_ENOMEM;
      break;
    }
    if (!num(cm__pv_get(seg, "device"), 0, &d)) {
      rc = bad_field(diag, "segment", "device", i);
      break;
    }
    if (d != device) continue;
    if (!num(cm__pv_get(seg, "address"), 0, &addr) || addr < 0) {
      rc = bad_field(diag, "segment", "address", i);
      break;
    }
    if (!num(cm__pv_get(seg, "total_size"), 0, &total) || total < 0) {
      rc = bad_field(diag, "segment", "total_size", i);
      break;
    }
    info->segments++;
    info->reserved_bytes += (uint64_t)total;
    if (state && !state_segment(state, seg, (uint64_t)addr, (uint64_t)total)) {
      rc = CM_ENOMEM;
      break;
    }
    const cm_pv_t *blocks = cm__pv_get(seg, "blocks");
    if (!blocks || blocks->kind == CM_PV_NONE) continue;
    if (blocks->kind != CM_PV_LIST) {
      rc = cm__diag_set(diag, CM_EPARSE, "not a memory snapshot: segment %zu 'blocks' is not a list", i);
      break;
    }
    if (cm__u64map_get(&seen, (uint64_t)(uintptr_t)blocks)) continue; /* shared with a segment seen */
    if (cm__u64map_put(&seen, (uint64_t)(uintptr_t)blocks, (void *)blocks)) {
      rc = CM_ENOMEM;
      break;
    }
    for (size_t j = 0; j < blocks->n; j++) {
      const cm_pv_t *b = blocks->items[j];
      if (b->kind != CM_PV_DICT) continue;
      int64_t size = 0, baddr = 0, req = 0;
      if (!num(cm__pv_get(b, "size"), 0, &size) || size < 0 || !num(cm__pv_get(b, "address"), addr, &baddr) ||
          baddr < 0) {
        rc = bad_field(diag, "block of segment", "size' or 'address", i);
        break;
      }
      if (cm__pv_str_starts(cm__pv_get(b, "state"), "active_allocated")) {
        if (!num(cm__pv_get(b, "requested_size"), size, &req) || req < 0) {
          rc = bad_field(diag, "block of segment", "requested_size", i);
          break;
        }
        if (!cm__u64map_get(&live, KEY((uint64_t)baddr)) && !cm__u64map_get(&pre_seen, KEY((uint64_t)baddr))) {
          row_t p = {0, (uint64_t)baddr, (uint64_t)req, 0, 0, ROW_ALLOC, (uint64_t)size};
          if (cm__u64map_put(&pre_seen, KEY((uint64_t)baddr), SIZE_VAL(0)) || !rows_push(&pre, p)) {
            rc = CM_ENOMEM;
            break;
          }
        }
      }
      /* the next block's default address; saturated: both are int64 >= 0 */
      addr = size > INT64_MAX - baddr ? INT64_MAX : baddr + size;
    }
  }
  cm__u64map_free(&seen);
  if (rc == CM_OK) {
    info->preexisting = pre.n;
    if (!history)
      rc = cm__diag_set(diag, CM_ENOTFOUND,
                        "the snapshot has no allocation history (%" PRIu64 " live block%s at dump "
                        "only): record it with torch.cuda.memory._record_memory_history() before "
                        "torch.cuda.memory._dump_snapshot()",
                        (uint64_t)pre.n, pre.n == 1 ? "" : "s");
    else if (n == 0 && pre.n == 0)
      rc = cm__diag_set(diag, CM_ENOTFOUND,
                        "device %d has no trace entries and no live blocks in the snapshot "
                        "(it has %d device%s; choose another)", device, device_count,
                        device_count == 1 ? "" : "s");
  }
  if (rc == CM_OK) {
    if (pre.n) qsort(pre.r, pre.n, sizeof *pre.r, cmp_addr);
    if (state && (!state_blocks(state, &pre) || !state_undo_segments(state, &segev)))
      rc = CM_ENOMEM;
    if (state && state->segment_count)
      qsort(state->segments, state->segment_count, sizeof *state->segments, cmp_segment);
    cm__sb_printf(out, "Thread,Time,Action,Pointer,Size,Stream\n");
    for (size_t i = 0; i < pre.n; i++) emit(out, &pre.r[i]);
    for (size_t i = 0; i < ev.n; i++) emit(out, &ev.r[i]);
    if (out->oom) rc = CM_ENOMEM;
  }
  if (rc == CM_ENOMEM) cm__diag_set(diag, rc, "out of memory converting the snapshot");
  free(ev.r);
  free(pre.r);
  free(segev.r);
  cm__u64map_free(&live);
  cm__u64map_free(&pre_seen);
  return rc;
}

/* The pickle in buf, parsed (*doc to be freed with cm__pickle_free), or
 * CM_EPARSE when it does not start as one. */
static int open_pickle(const void *buf, size_t len, cm_pickle_t **doc, const cm_pv_t **root,
                       cm_diag_t *diag) {
  if (!cm_snapshot_detect(buf, len))
    return cm__diag_set(diag, CM_EPARSE,
                        "not a pickle (a snapshot starts with the PROTO opcode, protocol 2 to 5)");
  return cm__pickle_parse(buf, len, doc, root, diag);
}

int cm_snapshot_to_csv(const void *buf, size_t len, const cm_snapshot_options_t *opts, char **csv,
                       size_t *csv_len, cm_snapshot_info_t *info, cm_diag_t *diag) {
  if (!csv || !csv_len || (!buf && len))
    return cm__diag_set(diag, CM_EINVAL, "cm_snapshot_to_csv: NULL argument");
  *csv = NULL;
  *csv_len = 0;
  cm_snapshot_options_t def;
  cm_snapshot_options_init(&def);
  if (!opts) opts = &def;
  cm_snapshot_info_t tmp;
  memset(&tmp, 0, sizeof tmp);
  cm_pickle_t *doc = NULL;
  const cm_pv_t *root = NULL;
  int rc = open_pickle(buf, len, &doc, &root, diag);
  if (rc) return rc;
  cm__sbuf out = {0};
  rc = convert(root, opts, &out, &tmp, NULL, diag);
  cm__pickle_free(doc);
  if (info) *info = tmp;
  if (rc) {
    free(out.p);
    return rc;
  }
  *csv = out.p;
  *csv_len = out.n;
  return CM_OK;
}

int cm_snapshot_start_state(const void *buf, size_t len, const cm_snapshot_options_t *opts,
                            cm_snapshot_state_t *out, cm_diag_t *diag) {
  if (!out || (!buf && len))
    return cm__diag_set(diag, CM_EINVAL, "cm_snapshot_start_state: NULL argument");
  memset(out, 0, sizeof *out);
  cm_snapshot_options_t def;
  cm_snapshot_options_init(&def);
  if (!opts) opts = &def;
  cm_pickle_t *doc = NULL;
  const cm_pv_t *root = NULL;
  int rc = open_pickle(buf, len, &doc, &root, diag);
  if (rc) return rc;
  cm__sbuf text = {0};
  cm_snapshot_info_t info;
  memset(&info, 0, sizeof info);
  rc = convert(root, opts, &text, &info, out, diag);
  cm__pickle_free(doc);
  free(text.p);
  return rc;
}

void cm_snapshot_state_free(cm_snapshot_state_t *s) {
  if (!s) return;
  free(s->segments);
  free(s->blocks);
  memset(s, 0, sizeof *s);
}

int cm_trace_parse_snapshot(const void *buf, size_t len, const cm_snapshot_options_t *opts,
                            cm_trace_t **out, cm_snapshot_info_t *info, cm_diag_t *diag) {
  if (!out) return cm__diag_set(diag, CM_EINVAL, "cm_trace_parse_snapshot: NULL argument");
  *out = NULL;
  char *csv;
  size_t n;
  int rc = cm_snapshot_to_csv(buf, len, opts, &csv, &n, info, diag);
  if (rc) return rc;
  rc = cm_trace_parse(csv, n, opts ? &opts->parse : NULL, out, diag);
  free(csv);
  return rc;
}

/* Read all of fd into a malloc'd buffer. */
static int slurp(int fd, char **data, size_t *len, cm_diag_t *diag) {
  size_t cap = 1 << 16, n = 0;
  char *b = malloc(cap);
  if (!b) return cm__diag_set(diag, CM_ENOMEM, "out of memory reading the trace");
  for (;;) {
    if (n == cap) {
      char *nb = cap * 2 > cap ? realloc(b, cap * 2) : NULL;
      if (!nb) {
        free(b);
        return cm__diag_set(diag, CM_ENOMEM, "out of memory reading the trace");
      }
      b = nb;
      cap *= 2;
    }
    ssize_t r = read(fd, b + n, cap - n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int e = errno;
      free(b);
      return cm__diag_set(diag, CM_EIO, "cannot read: %s", strerror(e));
    }
    if (r == 0) break;
    n += (size_t)r;
  }
  *data = b;
  *len = n;
  return CM_OK;
}

int cm_trace_load_any(const char *path, const cm_trace_parse_options_t *opts,
                      const cm_snapshot_options_t *snap_opts, cm_trace_t **out,
                      bool *is_snapshot, cm_snapshot_info_t *info, cm_diag_t *diag) {
  if (!path || !out) return cm__diag_set(diag, CM_EINVAL, "cm_trace_load_any: NULL argument");
  *out = NULL;
  if (is_snapshot) *is_snapshot = false;
  cm_snapshot_options_t so;
  if (snap_opts) so = *snap_opts;
  else {
    cm_snapshot_options_init(&so);
    if (opts) so.parse = *opts;
  }
  bool use_stdin = strcmp(path, "-") == 0;
  int rc;
  char *data = NULL;
  size_t len = 0;
  if (!use_stdin) {
    /* A device or socket is refused before it is opened (reading /dev/zero
     * never ends; opening a terminal or tape has effects); a directory gets
     * a clear error too. A FIFO or pipe (`<(zcat trace.csv.gz)`) is read
     * like stdin, the content telling a pickle from CSV; like cat, opening a
     * FIFO waits for its writer. */
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode)) {
      const char *kind = S_ISDIR(st.st_mode)    ? "a directory"
                         : S_ISCHR(st.st_mode)  ? "a character device"
                         : S_ISBLK(st.st_mode)  ? "a block device"
                         : S_ISSOCK(st.st_mode) ? "a socket"
                                                : "not a regular file";
      cm__diag_set(diag, CM_EIO,
                   "not read: %s, not a trace file (give a regular file, a pipe, or - for "
                   "standard input)", kind);
      if (diag) snprintf(diag->file, sizeof diag->file, "%s", path);
      return CM_EIO;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) return cm_trace_load(path, opts, out, diag); /* its message */
    if (fstat(fd, &st) == 0 && !S_ISREG(st.st_mode)) {
      if (S_ISFIFO(st.st_mode)) {
        rc = slurp(fd, &data, &len, diag);
      } else {
        rc = cm__diag_set(diag, CM_EIO, "not read: not a regular file or a pipe");
      }
      close(fd);
      goto parse;
    }
    unsigned char head[2];
    ssize_t k = pread(fd, head, 2, 0);
    size_t pl = strlen(path);
    bool pickle_name = (pl > 7 && !strcmp(path + pl - 7, ".pickle")) ||
                       (pl > 4 && !strcmp(path + pl - 4, ".pkl"));
    if (k >= 1 && pickle_name && !cm_snapshot_detect(head, (size_t)k)) {
      close(fd);
      cm__diag_set(diag, CM_EPARSE,
                   "not a pickle of protocol 2 to 5 (torch.cuda.memory._dump_snapshot writes "
                   "those; protocols 0 and 1 are not read)");
      if (diag) snprintf(diag->file, sizeof diag->file, "%s", path);
      return CM_EPARSE;
    }
    if (k != 2 || !cm_snapshot_detect(head, 2)) {
      close(fd);
      return cm_trace_load(path, opts, out, diag); /* CSV: mapped, not copied */
    }
    rc = slurp(fd, &data, &len, diag);
    close(fd);
  } else {
    rc = slurp(STDIN_FILENO, &data, &len, diag);
  }
parse:
  if (rc == CM_OK) {
    if (cm_snapshot_detect(data, len)) {
      if (is_snapshot) *is_snapshot = true;
      rc = cm_trace_parse_snapshot(data, len, &so, out, info, diag);
    } else {
      rc = cm_trace_parse(data, len, opts, out, diag);
    }
  }
  free(data);
  if (rc != CM_OK && diag) snprintf(diag->file, sizeof diag->file, "%s", path);
  return rc;
}
