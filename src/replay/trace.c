/*
 * trace.c - parser for allocation traces in RMM's CSV layout
 * (`Thread,Time,Action,Pointer,Size,Stream`).
 *
 * Algorithm. One pass over the buffer, line by line (memchr for '\n'). Each
 * line is split at commas into at most CM__MAX_FIELDS fields and the fields
 * the column map names are decoded by small hand-written parsers (no sscanf,
 * no NUL termination needed: every field is a (pointer, length) pair, so any
 * byte sequence, NULs included, is handled). Live pointers are kept in
 * base's u64 map (base/u64map.h) from the pointer to its slot; the requested
 * size and stream of each live allocation sit in an array indexed by slot.
 * Slots are dense indices reused LIFO through a free stack, so a replay needs
 * only `slots` handles.
 *
 * Invariants. After every line: `live` equals the sum of the sizes of the
 * live slots, table->n is the number of live pointers, and every slot is
 * either live or on the free stack, never both. A line that does not parse
 * changes nothing (every field is decoded and checked before any state
 * changes); running out of memory ends the parse.
 *
 * Exports cm_trace_parse, cm_trace_load, cm_trace_free.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/u64map.h"
#include "base/util.h"
#include "cubemem/replay.h"

#define CM__MAX_FIELDS 16

enum { COL_THREAD, COL_TIME, COL_ACTION, COL_POINTER, COL_SIZE, COL_STREAM, COL_COUNT };

typedef struct field {
  const char *p;
  size_t n;
} field_t;

/* What the parser keeps of a live allocation, indexed by its slot. */
typedef struct live {
  uint64_t size;
  uint32_t stream; /* index in the trace's streams */
} live_t;

/* The live allocations: pointer -> slot + 1 in base's u64 map (keys are
 * pointer ^ K_SALT, never 0 but for the one pointer K_SALT, kept aside), and
 * what each slot holds. */
typedef struct table {
  cm__u64map map;
  uint64_t salt_slot; /* slot + 1 of pointer K_SALT, 0 when not live */
  live_t *slot;       /* [slot_cap] */
  size_t slot_cap;
  size_t n; /* live allocations */
} table_t;

typedef struct parser {
  cm_trace_t *t;
  size_t ev_cap;
  table_t tab;
  uint32_t *free_slots;
  size_t free_n, free_cap;
  uint64_t live;
  int col[COL_COUNT]; /* field index of each column, -1 if absent */
  size_t nfields;     /* fields a data line must have; 0 = 5 or 6 (no header) */
  char msg[160];
  /* times: RMM logs carry the time of day; event times count from the
   * first timed row, and a time more than 12 h before the previous one is
   * the next day (a run across midnight) */
  bool have_t0;
  uint64_t t0, prev, day;
} parser_t;

#define DAY_US (86400ull * 1000000ull)

/* The time of a row relative to the first timed row of the trace. */
static uint64_t relative_time(parser_t *ps, uint64_t tod) {
  if (!ps->have_t0) {
    ps->have_t0 = true;
    ps->t0 = ps->prev = tod;
  }
  if (tod < ps->prev && ps->prev - tod > DAY_US / 2 && ps->day <= UINT64_MAX - DAY_US)
    ps->day += DAY_US; /* wrapped past midnight */
  ps->prev = tod;
  uint64_t abs = tod > UINT64_MAX - ps->day ? UINT64_MAX : tod + ps->day;
  return abs > ps->t0 ? abs - ps->t0 : 0;
}

/* ---- small helpers ---------------------------------------------------------- */

static int lower(int c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

static field_t trim(field_t f) {
  while (f.n && (f.p[0] == ' ' || f.p[0] == '\t')) f.p++, f.n--;
  while (f.n && (f.p[f.n - 1] == ' ' || f.p[f.n - 1] == '\t' || f.p[f.n - 1] == '\r')) f.n--;
  return f;
}

static bool field_is(field_t f, const char *word) {
  size_t n = strlen(word);
  if (f.n != n) return false;
  for (size_t i = 0; i < n; i++)
    if (lower((unsigned char)f.p[i]) != word[i]) return false;
  return true;
}

/* Quote a field for a message: at most 40 bytes, unprintable bytes as '?'. */
static void quote(field_t f, char *out, size_t cap) {
  size_t n = f.n > 40 ? 40 : f.n, j = 0;
  for (size_t i = 0; i < n && j + 1 < cap; i++) {
    unsigned char c = (unsigned char)f.p[i];
    out[j++] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
  }
  if (f.n > 40 && j + 4 < cap) out[j++] = '.', out[j++] = '.', out[j++] = '.';
  out[j < cap ? j : cap - 1] = '\0';
}

static bool parse_dec(field_t f, uint64_t *out) {
  if (f.n == 0) return false;
  uint64_t v = 0;
  for (size_t i = 0; i < f.n; i++) {
    unsigned c = (unsigned char)f.p[i] - '0';
    if (c > 9) return false;
    if (v > (UINT64_MAX - c) / 10) return false;
    v = v * 10 + c;
  }
  *out = v;
  return true;
}

/* A pointer is a key only: "0x..." hex, or bare hex digits (RMM writes 0x).
 * A null pointer as glibc's %p prints it, "(nil)" (RMM's `allocate failure`
 * rows), is 0. */
static bool parse_ptr(field_t f, uint64_t *out) {
  if (field_is(f, "(nil)")) {
    *out = 0;
    return true;
  }
  if (f.n >= 2 && f.p[0] == '0' && (f.p[1] == 'x' || f.p[1] == 'X')) f.p += 2, f.n -= 2;
  if (f.n == 0 || f.n > 16) return false;
  uint64_t v = 0;
  for (size_t i = 0; i < f.n; i++) {
    int c = lower((unsigned char)f.p[i]), d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else return false;
    v = (v << 4) | (uint64_t)d;
  }
  *out = v;
  return true;
}

/* "HH:MM:SS.ffffff" (up to 12 hour digits, fraction optional; digits past
 * the sixth are dropped), "MM:SS.ffffff" or plain seconds "SSS.ffffff" ->
 * microseconds. An empty field is time 0. False (a bad time) on any other
 * form, minutes or seconds of 60 or more, or a value whose microseconds
 * exceed 64 bits. */
static bool parse_time(field_t f, uint64_t *out_us) {
  if (f.n == 0) {
    *out_us = 0;
    return true;
  }
  uint64_t parts[3] = {0, 0, 0};
  size_t np = 0, i = 0;
  for (;;) {
    size_t start = i;
    uint64_t v = 0;
    while (i < f.n && f.p[i] >= '0' && f.p[i] <= '9') {
      if (i - start >= 12) return false;
      v = v * 10 + (uint64_t)(f.p[i] - '0');
      i++;
    }
    if (i == start || np >= 3) return false;
    parts[np++] = v;
    if (i < f.n && f.p[i] == ':') {
      i++;
      continue;
    }
    break;
  }
  uint64_t frac = 0;
  if (i < f.n && f.p[i] == '.') {
    i++;
    size_t start = i, digits = 0;
    while (i < f.n && f.p[i] >= '0' && f.p[i] <= '9') {
      if (digits < 6) frac = frac * 10 + (uint64_t)(f.p[i] - '0'), digits++;
      i++;
    }
    if (i == start) return false;
    while (digits < 6) frac *= 10, digits++;
  }
  if (i != f.n) return false;
  /* Every step is checked: a time whose microseconds do not fit in 64 bits is
   * a bad time, not a wrapped number. */
  uint64_t secs = parts[0], us;
  if (np >= 2) {
    if (parts[np - 1] >= 60 || (np == 3 && parts[1] >= 60)) return false;
    if (__builtin_mul_overflow(secs, 60u, &secs) || __builtin_add_overflow(secs, parts[1], &secs))
      return false;
  }
  if (np == 3 &&
      (__builtin_mul_overflow(secs, 60u, &secs) || __builtin_add_overflow(secs, parts[2], &secs)))
    return false;
  if (__builtin_mul_overflow(secs, 1000000u, &us) || __builtin_add_overflow(us, frac, &us))
    return false;
  *out_us = us;
  return true;
}

/* ---- live allocations -------------------------------------------------------- */

#define K_SALT 0x9E3779B97F4A7C15ull

/* The slot of live pointer ptr, or SIZE_MAX. */
static size_t table_find(const table_t *t, uint64_t ptr) {
  if (ptr == K_SALT) return t->salt_slot ? (size_t)(t->salt_slot - 1) : SIZE_MAX;
  void *v = cm__u64map_get(&t->map, ptr ^ K_SALT);
  return v ? (size_t)((uintptr_t)v - 1) : SIZE_MAX;
}

/* Room for slot `slot` in t->slot; false when out of memory. */
static bool table_room(table_t *t, uint32_t slot) {
  if (slot < t->slot_cap) return true;
  size_t ncap = t->slot_cap ? t->slot_cap * 2 : 1024;
  while (ncap <= slot) ncap *= 2;
  if (ncap > SIZE_MAX / sizeof(live_t)) return false;
  live_t *n = realloc(t->slot, ncap * sizeof *n);
  if (!n) return false;
  t->slot = n;
  t->slot_cap = ncap;
  return true;
}

/* Make ptr live in `slot`; false when out of memory (nothing changed). */
static bool table_insert(table_t *t, uint64_t ptr, uint64_t size, uint32_t slot,
                         uint32_t stream) {
  if (!table_room(t, slot)) return false;
  if (ptr == K_SALT) t->salt_slot = (uint64_t)slot + 1;
  else if (cm__u64map_put(&t->map, ptr ^ K_SALT, (void *)((uintptr_t)slot + 1)) != CM_OK)
    return false;
  t->slot[slot] = (live_t){size, stream};
  t->n++;
  return true;
}

static void table_remove(table_t *t, uint64_t ptr) {
  if (ptr == K_SALT) t->salt_slot = 0;
  else (void)cm__u64map_remove(&t->map, ptr ^ K_SALT);
  t->n--;
}

static void table_free(table_t *t) {
  cm__u64map_free(&t->map);
  free(t->slot);
}

/* ---- events ------------------------------------------------------------------- */

static bool reserve_events(parser_t *ps, size_t more) {
  cm_trace_t *t = ps->t;
  if (t->count + more <= ps->ev_cap) return true;
  size_t ncap = ps->ev_cap ? ps->ev_cap : 4096;
  while (ncap < t->count + more) {
    if (ncap > SIZE_MAX / 2 / sizeof(cm_trace_event_t)) return false;
    ncap *= 2;
  }
  cm_trace_event_t *ne = realloc(t->events, ncap * sizeof *ne);
  if (!ne) return false;
  t->events = ne;
  uint8_t *ns = realloc(t->event_streams, ncap * sizeof *ns);
  if (!ns) return false; /* the larger event array is kept; its capacity is not recorded */
  t->event_streams = ns;
  ps->ev_cap = ncap;
  return true;
}

static void push_event(parser_t *ps, uint32_t action, uint32_t slot, uint64_t size,
                       uint64_t time_us, uint32_t stream) {
  cm_trace_t *t = ps->t;
  t->event_streams[t->count] = (uint8_t)stream;
  t->events[t->count++] = (cm_trace_event_t){size, time_us, slot, action};
  if (time_us > t->duration_us) t->duration_us = time_us;
}

/* Free the live allocation of pointer ptr, in slot `slot` (event already
 * reserved). */
static int free_at(parser_t *ps, uint64_t ptr, size_t slot, uint64_t time_us) {
  live_t e = ps->tab.slot[slot];
  ps->t->streams[e.stream].live_bytes -= e.size;
  if (ps->free_n == ps->free_cap) {
    size_t ncap = ps->free_cap ? ps->free_cap * 2 : 1024;
    uint32_t *nf = realloc(ps->free_slots, ncap * sizeof *nf);
    if (!nf) return CM_ENOMEM;
    ps->free_slots = nf;
    ps->free_cap = ncap;
  }
  table_remove(&ps->tab, ptr);
  ps->free_slots[ps->free_n++] = (uint32_t)slot;
  ps->live -= e.size;
  ps->t->frees++;
  push_event(ps, CM_TRACE_FREE, (uint32_t)slot, e.size, time_us, e.stream);
  return CM_OK;
}

/* ---- lines ---------------------------------------------------------------------- */

static size_t split(const char *p, size_t n, field_t *f, size_t cap) {
  size_t nf = 0, start = 0;
  for (size_t i = 0; i <= n; i++) {
    if (i == n || p[i] == ',') {
      if (nf == cap) return cap + 1;
      f[nf++] = trim((field_t){p + start, i - start});
      start = i + 1;
    }
  }
  return nf;
}

static bool is_header(const field_t *f, size_t nf) {
  for (size_t i = 0; i < nf; i++)
    if (field_is(f[i], "action")) return true;
  return false;
}

static int read_header(parser_t *ps, const field_t *f, size_t nf) {
  static const char *const names[COL_COUNT] = {"thread", "time", "action",
                                               "pointer", "size", "stream"};
  int col[COL_COUNT];
  for (int c = 0; c < COL_COUNT; c++) col[c] = -1;
  for (size_t i = 0; i < nf; i++)
    for (int c = 0; c < COL_COUNT; c++)
      if (col[c] < 0 && field_is(f[i], names[c])) col[c] = (int)i;
  static const char *const required[] = {"Action", "Pointer", "Size"};
  static const int req_col[] = {COL_ACTION, COL_POINTER, COL_SIZE};
  for (int r = 0; r < 3; r++)
    if (col[req_col[r]] < 0) {
      snprintf(ps->msg, sizeof ps->msg, "the header has no '%s' column", required[r]);
      return CM_EPARSE; /* the RMM order stays in force */
    }
  memcpy(ps->col, col, sizeof col);
  ps->nfields = nf;
  return CM_OK;
}

/* The index of stream `id` in t->streams, added when new; SIZE_MAX when out
 * of memory. Past CM_TRACE_MAX_STREAMS streams the last one takes the rest. */
static size_t stream_index(cm_trace_t *t, uint64_t id) {
  for (size_t k = t->stream_count; k-- > 0;)
    if (t->streams[k].id == id) return k;
  if (t->stream_count == CM_TRACE_MAX_STREAMS) return t->stream_count - 1;
  cm_trace_stream_t *n = realloc(t->streams, (t->stream_count + 1) * sizeof *n);
  if (!n) return SIZE_MAX;
  t->streams = n;
  memset(&n[t->stream_count], 0, sizeof n[0]);
  n[t->stream_count].id = id;
  return t->stream_count++;
}

/* Decode one data line and apply it. Returns CM_OK, CM_EPARSE (ps->msg set;
 * nothing changed), CM_ENOMEM or CM_EOVERFLOW. */
static int data_line(parser_t *ps, const field_t *f, size_t nf) {
  char q[64];
  if (ps->nfields ? nf != ps->nfields : (nf != 5 && nf != 6)) {
    snprintf(ps->msg, sizeof ps->msg, "expected %zu fields, got %zu",
             ps->nfields ? ps->nfields : (size_t)6, nf);
    return CM_EPARSE;
  }
  field_t act = f[ps->col[COL_ACTION]];
  int kind; /* 0 alloc, 1 free, 2 allocate failure */
  if (field_is(act, "allocate")) kind = 0;
  else if (field_is(act, "free") || field_is(act, "deallocate")) kind = 1; /* RMM docs: deallocate */
  else if (field_is(act, "allocate failure") || field_is(act, "allocate_failure")) kind = 2;
  else {
    quote(act, q, sizeof q);
    snprintf(ps->msg, sizeof ps->msg, "bad action '%s' (expected allocate, free, deallocate or allocate failure)", q);
    return CM_EPARSE;
  }
  uint64_t ptr, size, time_us = 0;
  if (!parse_ptr(f[ps->col[COL_POINTER]], &ptr)) {
    quote(f[ps->col[COL_POINTER]], q, sizeof q);
    snprintf(ps->msg, sizeof ps->msg, "bad pointer '%s'", q);
    return CM_EPARSE;
  }
  if (!parse_dec(f[ps->col[COL_SIZE]], &size)) {
    quote(f[ps->col[COL_SIZE]], q, sizeof q);
    snprintf(ps->msg, sizeof ps->msg, "bad size '%s'", q);
    return CM_EPARSE;
  }
  if (ps->col[COL_TIME] >= 0 && !parse_time(f[ps->col[COL_TIME]], &time_us)) {
    quote(f[ps->col[COL_TIME]], q, sizeof q);
    snprintf(ps->msg, sizeof ps->msg, "bad time '%s' (expected HH:MM:SS.ffffff)", q);
    return CM_EPARSE;
  }
  if (ps->col[COL_TIME] >= 0 && f[ps->col[COL_TIME]].n) time_us = relative_time(ps, time_us);
  cm_trace_t *t = ps->t;
  if (kind == 2) {
    if (t->alloc_failures++ == 0) {
      t->first_failure_line = t->lines;
      t->first_failure_size = size;
      t->first_failure_time_us = time_us;
      t->first_failure_live_bytes = ps->live;
    }
    return CM_OK;
  }
  size_t at = table_find(&ps->tab, ptr);
  if (kind == 1) {
    if (at == SIZE_MAX) {
      t->unknown_frees++;
      return CM_OK;
    }
    if (!reserve_events(ps, 1)) return CM_ENOMEM;
    return free_at(ps, ptr, at, time_us);
  }
  /* allocate: check everything before changing state */
  uint64_t live_after = ps->live + size;
  if (at != SIZE_MAX) live_after -= ps->tab.slot[at].size;
  if (live_after < size) {
    snprintf(ps->msg, sizeof ps->msg, "size %llu overflows the live byte total",
             (unsigned long long)size);
    return CM_EPARSE;
  }
  if (!reserve_events(ps, 2)) return CM_ENOMEM;
  /* the stream (a Stream column that does not parse counts as stream 0) */
  uint64_t sid = 0;
  int sc = ps->col[COL_STREAM];
  if (sc >= 0 && (size_t)sc < nf && !parse_ptr(f[sc], &sid)) sid = 0;
  size_t si = stream_index(t, sid);
  if (si == SIZE_MAX) return CM_ENOMEM;
  if (at == SIZE_MAX && ps->free_n == 0 && t->slots == UINT32_MAX) return CM_EOVERFLOW;
  if (at != SIZE_MAX) {
    t->duplicate_allocs++;
    int rc = free_at(ps, ptr, at, time_us);
    if (rc) return rc;
  }
  uint32_t slot = ps->free_n ? ps->free_slots[--ps->free_n] : t->slots++;
  if (!table_insert(&ps->tab, ptr, size, slot, (uint32_t)si)) return CM_ENOMEM;
  cm_trace_stream_t *st = &t->streams[si];
  st->allocs++;
  st->live_bytes += size;
  if (st->live_bytes > st->peak_live_bytes) st->peak_live_bytes = st->live_bytes;
  ps->live += size;
  t->allocs++;
  t->total_alloc_bytes = (t->total_alloc_bytes > UINT64_MAX - size) ? UINT64_MAX
                                                                     : t->total_alloc_bytes + size;
  if (size > t->max_alloc_size) t->max_alloc_size = size;
  push_event(ps, CM_TRACE_ALLOC, slot, size, time_us, (uint32_t)si);
  if (ps->live > t->peak_live_bytes) {
    t->peak_live_bytes = ps->live;
    t->peak_live_event = t->count - 1;
  }
  if (ps->tab.n > t->peak_live_count) t->peak_live_count = ps->tab.n;
  return CM_OK;
}

int cm_trace_parse(const char *buf, size_t len, const cm_trace_parse_options_t *opts,
                   cm_trace_t **out, cm_diag_t *diag) {
  if (!out || (!buf && len)) return cm__diag_set(diag, CM_EINVAL, "cm_trace_parse: NULL argument");
  *out = NULL;
  bool skip = opts && opts->skip_bad_lines;
  parser_t ps;
  memset(&ps, 0, sizeof ps);
  ps.t = calloc(1, sizeof *ps.t);
  if (!ps.t) return cm__diag_set(diag, CM_ENOMEM, "out of memory reading the trace");
  for (int c = 0; c < COL_COUNT; c++) ps.col[c] = c; /* RMM order until a header says else */
  bool first = true;
  int rc = CM_OK;
  uint64_t lineno = 0;
  size_t pos = 0;
  field_t f[CM__MAX_FIELDS];
  while (pos < len) {
    const char *p = buf + pos;
    const char *nl = memchr(p, '\n', len - pos);
    size_t n = nl ? (size_t)(nl - p) : len - pos;
    pos += n + (nl ? 1 : 0);
    ps.t->lines = ++lineno; /* the line being read (data_line notes it) */
    field_t whole = trim((field_t){p, n});
    if (whole.n == 0) continue;
    size_t nf = split(whole.p, whole.n, f, CM__MAX_FIELDS);
    int lrc;
    ps.msg[0] = '\0';
    if (nf > CM__MAX_FIELDS) {
      snprintf(ps.msg, sizeof ps.msg, "too many fields (more than %d)", CM__MAX_FIELDS);
      lrc = CM_EPARSE;
    } else if (is_header(f, nf)) {
      /* A header repeated later (concatenated logs) is skipped. */
      lrc = first ? read_header(&ps, f, nf) : CM_OK;
    } else {
      lrc = data_line(&ps, f, nf);
    }
    first = false;
    if (lrc == CM_EPARSE && skip) {
      if (ps.t->bad_lines++ == 0) {
        ps.t->first_bad_line = lineno;
        snprintf(ps.t->first_bad_message, sizeof ps.t->first_bad_message, "%s", ps.msg);
      }
      continue;
    }
    if (lrc != CM_OK) {
      if (lrc == CM_EPARSE) cm__diag_set(diag, lrc, "%s", ps.msg);
      else if (lrc == CM_EOVERFLOW) cm__diag_set(diag, lrc, "more than 2^32-1 allocations live at once");
      else cm__diag_set(diag, lrc, "out of memory reading the trace");
      if (diag) diag->line = (uint32_t)(lineno > UINT32_MAX ? UINT32_MAX : lineno);
      rc = lrc;
      break;
    }
  }
  ps.t->lines = lineno;
  ps.t->live_at_end = ps.tab.n;
  ps.t->live_bytes_at_end = ps.live;
  table_free(&ps.tab);
  free(ps.free_slots);
  if (rc != CM_OK) {
    cm_trace_free(ps.t);
    return rc;
  }
  *out = ps.t;
  return CM_OK;
}

void cm_trace_free(cm_trace_t *trace) {
  if (!trace) return;
  free(trace->streams);
  free(trace->event_streams);
  free(trace->events);
  free(trace);
}

int cm_trace_load(const char *path, const cm_trace_parse_options_t *opts, cm_trace_t **out,
                  cm_diag_t *diag) {
  if (!path || !out) return cm__diag_set(diag, CM_EINVAL, "cm_trace_load: NULL argument");
  *out = NULL;
  bool use_stdin = strcmp(path, "-") == 0;
  int fd = use_stdin ? STDIN_FILENO : open(path, O_RDONLY | O_CLOEXEC);
  int rc;
  if (fd < 0) {
    rc = cm__diag_set(diag, CM_EIO, "cannot open: %s", strerror(errno));
    goto fail;
  }
  struct stat st;
  size_t cap = 1 << 16, len = 0;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
    if ((uint64_t)st.st_size >= SIZE_MAX) {
      if (!use_stdin) close(fd);
      rc = cm__diag_set(diag, CM_ENOMEM, "file too large");
      goto fail;
    }
    cap = (size_t)st.st_size + 1;
  }
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 && !use_stdin) {
    /* Regular file: map it (no copy); fall back to read() if mapping fails. */
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map != MAP_FAILED) {
      close(fd);
      madvise(map, (size_t)st.st_size, MADV_SEQUENTIAL);
      rc = cm_trace_parse(map, (size_t)st.st_size, opts, out, diag);
      munmap(map, (size_t)st.st_size);
      if (rc == CM_OK) return CM_OK;
      goto fail;
    }
  }
  if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    if (!use_stdin) close(fd);
    rc = cm__diag_set(diag, CM_EIO, "cannot read: is a directory");
    goto fail;
  }
  char *buf = malloc(cap);
  if (!buf) {
    if (!use_stdin) close(fd);
    rc = cm__diag_set(diag, CM_ENOMEM, "out of memory reading the trace");
    goto fail;
  }
  for (;;) {
    if (len == cap) {
      size_t ncap = cap * 2;
      char *nb = ncap > cap ? realloc(buf, ncap) : NULL;
      if (!nb) {
        free(buf);
        if (!use_stdin) close(fd);
        rc = cm__diag_set(diag, CM_ENOMEM, "out of memory reading the trace");
        goto fail;
      }
      buf = nb;
      cap = ncap;
    }
    ssize_t r = read(fd, buf + len, cap - len);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int e = errno;
      free(buf);
      if (!use_stdin) close(fd);
      rc = cm__diag_set(diag, CM_EIO, "cannot read: %s", strerror(e));
      goto fail;
    }
    if (r == 0) break;
    len += (size_t)r;
  }
  if (!use_stdin) close(fd);
  rc = cm_trace_parse(buf, len, opts, out, diag);
  free(buf);
  if (rc == CM_OK) return CM_OK;
fail:
  if (diag) snprintf(diag->file, sizeof diag->file, "%s", path);
  return rc;
}
