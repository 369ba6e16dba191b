/*
 * test_pickle.c - the restricted pickle reader (src/replay/pickle.h) and the
 * snapshot conversion (cm_snapshot_to_csv, cm_trace_parse_snapshot) on
 * hand-assembled opcode sequences, independent of Python.
 *
 * Covers: every data opcode family (ints of each width incl. negative and
 * big LONG1, BINFLOAT, strings and bytes, containers from MARK and the
 * EMPTY_* / TUPLEn forms, sets, the memo incl. a self-containing list, POP,
 * POP_MARK, DUP, FRAME); refusal of GLOBAL, STACK_GLOBAL, REDUCE, BUILD,
 * NEWOBJ, INST, OBJ, PERSID with the opcode named; malformed input
 * (truncation, protocol 0/6, stack underflow, odd dicts, APPEND to a tuple,
 * unset memo); dict lookup (last binding wins); and a minimal snapshot
 * converted to the exact RMM CSV, with the "no history" and "not a
 * snapshot" errors.
 */
#include <stdlib.h>
#include <string.h>

#include "cm_test.h"
#include "cubemem/replay.h"
#include "replay/pickle.h"

#define P(lit) lit, sizeof(lit) - 1

static int parse(const char *b, size_t n, cm_pickle_t **doc, const cm_pv_t **root, cm_diag_t *d) {
  cm_diag_clear(d);
  return cm__pickle_parse(b, n, doc, root, d);
}

static void ints_floats_strings(void) {
  cm_pickle_t *doc;
  const cm_pv_t *r;
  cm_diag_t d;
  /* {'a': 1, 'b': -1, 'c': 2**40, 'd': -1 (LONG1), 'e': 1.5, 'f': b'xy', 'g': 2**72} */
  static const char b[] =
      "\x80\x02}q\x00(X\x01\x00\x00\x00" "aK\x01X\x01\x00\x00\x00" "bJ\xff\xff\xff\xff"
      "X\x01\x00\x00\x00" "c\x8a\x06\x00\x00\x00\x00\x00\x01"
      "X\x01\x00\x00\x00" "d\x8a\x01\xff"
      "X\x01\x00\x00\x00" "eG\x3f\xf8\x00\x00\x00\x00\x00\x00"
      "X\x01\x00\x00\x00" "fC\x02xy"
      "X\x01\x00\x00\x00g\x8a\x0a\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01u.";
  ASSERT_OK(parse(P(b), &doc, &r, &d));
  ASSERT(r->kind == CM_PV_DICT);
  EXPECT_EQ(r->n, 14);
  EXPECT_EQ(cm__pv_get(r, "a")->i, 1);
  EXPECT(cm__pv_get(r, "b")->i == -1);
  EXPECT_EQ(cm__pv_get(r, "c")->i, 1ull << 40);
  EXPECT(cm__pv_get(r, "d")->i == -1 && !cm__pv_get(r, "d")->big);
  EXPECT(cm__pv_get(r, "e")->kind == CM_PV_FLOAT && cm__pv_get(r, "e")->f == 1.5);
  const cm_pv_t *f = cm__pv_get(r, "f");
  EXPECT(f->kind == CM_PV_BYTES && f->n == 2 && !memcmp(f->s, "xy", 2));
  EXPECT(cm__pv_get(r, "g")->big);
  EXPECT(cm__pv_get(r, "zz") == NULL);
  EXPECT(cm__pv_str_is(r->items[0], "a"));
  EXPECT(cm__pv_str_starts(r->items[0], ""));
  EXPECT(!cm__pv_str_is(r->items[1], "a")); /* an int is no string */
  cm__pickle_free(doc);
}

static void containers_memo_and_stack_ops(void) {
  cm_pickle_t *doc;
  const cm_pv_t *r;
  cm_diag_t d;
  /* protocol 4 with a FRAME: (None, True, (), (1,), (1, 2), (1, 2, 3), {4}, frozenset({5}), l)
   * where l = [l] (memo), built with MARK/TUPLE; POP, POP_MARK and DUP on the way */
  static const char b[] =
      "\x80\x04\x95\x40\x00\x00\x00\x00\x00\x00\x00"
      "(N\x88)K\x01\x85K\x01K\x02\x86K\x01K\x02K\x03\x87"
      "\x8f\x94(K\x04\x90"
      "(K\x05\x91"
      "]\x94(h\x01" "e"
      "K\x09" "0"       /* POP */
      "(K\x09K\x09" "1" /* POP_MARK */
      "t2" "0"          /* TUPLE, DUP, POP */
      ".";
  ASSERT_OK(parse(P(b), &doc, &r, &d));
  ASSERT(r->kind == CM_PV_TUPLE);
  ASSERT_EQ(r->n, 9);
  EXPECT(r->items[0]->kind == CM_PV_NONE);
  EXPECT(r->items[1]->kind == CM_PV_BOOL && r->items[1]->i == 1);
  EXPECT(r->items[2]->kind == CM_PV_TUPLE && r->items[2]->n == 0);
  EXPECT(r->items[3]->n == 1 && r->items[4]->n == 2 && r->items[5]->n == 3);
  EXPECT_EQ(r->items[5]->items[2]->i, 3);
  EXPECT(r->items[6]->kind == CM_PV_SET && r->items[6]->n == 1 && r->items[6]->items[0]->i == 4);
  EXPECT(r->items[7]->kind == CM_PV_SET && r->items[7]->items[0]->i == 5);
  const cm_pv_t *l = r->items[8];
  EXPECT(l->kind == CM_PV_LIST && l->n == 1 && l->items[0] == l); /* contains itself */
  cm__pickle_free(doc);

  /* the last binding of a key wins, as in Python */
  static const char dup[] = "\x80\x02}(X\x01\x00\x00\x00kK\x01X\x01\x00\x00\x00kK\x02u.";
  ASSERT_OK(parse(P(dup), &doc, &r, &d));
  EXPECT_EQ(cm__pv_get(r, "k")->i, 2);
  cm__pickle_free(doc);
}

static void refuses_code(void) {
  static const struct {
    const char *bytes;
    size_t n;
    const char *name;
  } cases[] = {
      {P("\x80\x02" "cos\nsystem\n" "."), "GLOBAL"},
      {P("\x80\x04\x8c\x02os\x8c\x06system\x93."), "STACK_GLOBAL"},
      {P("\x80\x02N)R."), "REDUCE"},
      {P("\x80\x02N}b."), "BUILD"},
      {P("\x80\x02N)\x81."), "NEWOBJ"},
      {P("\x80\x02(ios\nsystem\n."), "INST"},
      {P("\x80\x02(No."), "OBJ"},
      {P("\x80\x02N" "Q."), "BINPERSID"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    cm_pickle_t *doc = (cm_pickle_t *)1;
    const cm_pv_t *r = (const cm_pv_t *)1;
    cm_diag_t d;
    EXPECT_STATUS(parse(cases[i].bytes, cases[i].n, &doc, &r, &d), CM_EPARSE);
    EXPECT(doc == NULL && r == NULL);
    char want[64];
    snprintf(want, sizeof want, "refusing opcode %s", cases[i].name);
    EXPECT_CONTAINS(d.message, want);
    EXPECT_CONTAINS(d.message, "plain data");
  }
}

static void malformed(void) {
  static const struct {
    const char *bytes;
    size_t n;
    const char *msg;
  } cases[] = {
      {P(""), "no STOP"},
      {P("\x80\x02X\x05\x00\x00\x00" "ab"), "truncated"},
      {P("\x80\x02\x8a\x08\x01"), "truncated"},
      {P("\x80\x06N."), "protocol 6"},
      {P("(lp0\n."), "text-protocol"},
      {P("\x80\x02."), "empty stack"},
      {P("\x80\x02\xff"), "unknown pickle opcode 0xff"},
      {P("\x80\x02)K\x01" "a."), "APPEND to a non-list"},
      {P("\x80\x02(K\x01" "d."), "odd number"},
      {P("\x80\x02h\x03."), "memo index 3 not set"},
      {P("\x80\x02" "a."), "stack underflow"},
      {P("\x80\x02(N."), "open MARK"},
      {P("\x80\x02" "1."), "POP_MARK without MARK"},
      {P("\x80\x02(\x85."), "stack underflow"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    cm_pickle_t *doc;
    const cm_pv_t *r;
    cm_diag_t d;
    EXPECT_STATUS(parse(cases[i].bytes, cases[i].n, &doc, &r, &d), CM_EPARSE);
    EXPECT_CONTAINS(d.message, cases[i].msg);
  }
  cm_pickle_t *doc;
  const cm_pv_t *r;
  EXPECT_STATUS(cm__pickle_parse(NULL, 1, &doc, &r, NULL), CM_EINVAL);
}

/* {'device_traces': [[{'action': 'alloc', 'addr': 4096, 'size': 16, 'time_us': 5},
 *                     {'action': 'free_completed', 'addr': 4096, 'time_us': 9},
 *                     {'action': 'oom', 'size': 64, 'time_us': 9}]],
 *  'segments': [{'device': 0, 'address': 8192, 'total_size': 1024, 'blocks': [
 *                {'address': 8192, 'size': 512, 'state': 'active_allocated', 'requested_size': 500}]}]} */
static const char k_snap[] =
    "\x80\x02}(\x8c\x0d" "device_traces" "](](}("
    "\x8c\x06" "action" "\x8c\x05" "alloc" "\x8c\x04" "addr" "M\x00\x10" "\x8c\x04" "size" "K\x10"
    "\x8c\x07" "time_us" "K\x05" "u}("
    "\x8c\x06" "action" "\x8c\x0e" "free_completed" "\x8c\x04" "addr" "M\x00\x10"
    "\x8c\x07" "time_us" "K\x09" "u}("
    "\x8c\x06" "action" "\x8c\x03" "oom" "\x8c\x04" "size" "K\x40" "\x8c\x07" "time_us" "K\x09" "u"
    "ee"
    "\x8c\x08" "segments" "](}(" "\x8c\x06" "device" "K\x00" "\x8c\x07" "address" "M\x00\x20"
    "\x8c\x0a" "total_size" "M\x00\x04" "\x8c\x06" "blocks" "](}("
    "\x8c\x07" "address" "M\x00\x20" "\x8c\x04" "size" "M\x00\x02" "\x8c\x05" "state"
    "\x8c\x10" "active_allocated" "\x8c\x0e" "requested_size" "M\xf4\x01" "u"
    "eue"
    "u.";

static void snapshot_to_csv(void) {
  char *csv = NULL;
  size_t n = 0;
  cm_snapshot_info_t info;
  cm_diag_t d;
  cm_diag_clear(&d);
  EXPECT(cm_snapshot_detect(k_snap, sizeof k_snap - 1));
  EXPECT(!cm_snapshot_detect("Thread,Time", 11));
  int crc = cm_snapshot_to_csv(k_snap, sizeof k_snap - 1, NULL, &csv, &n, &info, &d);
  if (crc) fprintf(stderr, "snapshot: %s\n", d.message);
  ASSERT_OK(crc);
  EXPECT_STR(csv, "Thread,Time,Action,Pointer,Size,Stream\n"
                  "1,00:00:00.000000,allocate,0x2000,500,0x0\n"
                  "1,00:00:00.000000,allocate,0x1000,16,0x0\n"
                  "1,00:00:00.000004,free,0x1000,16,0x0\n"
                  "1,00:00:00.000004,allocate failure,0x0,64,0x0\n");
  EXPECT_EQ(n, strlen(csv));
  EXPECT(info.has_history);
  EXPECT_EQ(info.device, 0);
  EXPECT_EQ(info.device_count, 1);
  EXPECT_EQ(info.trace_entries, 3);
  EXPECT_EQ(info.preexisting, 1);
  EXPECT_EQ(info.oom_entries, 1);
  EXPECT_EQ(info.segments, 1);
  EXPECT_EQ(info.reserved_bytes, 1024);
  free(csv);

  cm_trace_t *t = NULL;
  ASSERT_OK(cm_trace_parse_snapshot(k_snap, sizeof k_snap - 1, NULL, &t, NULL, &d));
  EXPECT_EQ(t->allocs, 2);
  EXPECT_EQ(t->frees, 1);
  EXPECT_EQ(t->alloc_failures, 1);
  EXPECT_EQ(t->peak_live_bytes, 516);
  cm_trace_free(t);

  /* device 1 has nothing */
  cm_snapshot_options_t o;
  cm_snapshot_options_init(&o);
  o.device = 1;
  cm_diag_clear(&d);
  EXPECT_STATUS(cm_snapshot_to_csv(k_snap, sizeof k_snap - 1, &o, &csv, &n, &info, &d), CM_ENOTFOUND);
  EXPECT_CONTAINS(d.message, "device 1 has no trace entries");
  EXPECT(csv == NULL);

  /* no history: only segments */
  static const char nohist[] = "\x80\x02}(\x8c\x08" "segments" "]\x8c\x0d" "device_traces" "]u.";
  cm_diag_clear(&d);
  EXPECT_STATUS(cm_snapshot_to_csv(nohist, sizeof nohist - 1, NULL, &csv, &n, &info, &d), CM_ENOTFOUND);
  EXPECT_CONTAINS(d.message, "no allocation history");
  EXPECT_CONTAINS(d.message, "_record_memory_history");

  /* not a snapshot */
  static const char other[] = "\x80\x02}(\x8c\x01" "x" "K\x01u.";
  cm_diag_clear(&d);
  EXPECT_STATUS(cm_snapshot_to_csv(other, sizeof other - 1, NULL, &csv, &n, &info, &d), CM_EPARSE);
  EXPECT_CONTAINS(d.message, "not a memory snapshot");
  static const char num[] = "\x80\x02K\x01.";
  cm_diag_clear(&d);
  EXPECT_STATUS(cm_snapshot_to_csv(num, sizeof num - 1, NULL, &csv, &n, &info, &d), CM_EPARSE);
  cm_diag_clear(&d);
  EXPECT_STATUS(cm_snapshot_to_csv("abc", 3, NULL, &csv, &n, &info, &d), CM_EPARSE);
  EXPECT_CONTAINS(d.message, "not a pickle");
}

/* Frames: {'device_traces': [[
 *   {'action': 'alloc', 'addr': 4096, 'size': 16, 'time_us': 5, 'frames': [
 *      {'filename': 'train.py', 'line': 12, 'name': 'forward'}, {'filename': 'lib.py', 'line': 3, 'name': 'f'}]},
 *   {'action': 'free_completed', 'addr': 20480, 'time_us': 5},   (live before recording)
 *   {'action': 'alloc', 'addr': 8192, 'size': 32, 'time_us': 6},  (no stack)
 *   {'action': 'alloc', 'addr': 12288, 'size': 8, 'time_us': 7, 'frames': [train.py:12 forward]}]],
 *  'segments': []} */
#define FRAME_TRAIN "}(\x8c\x08" "filename" "\x8c\x08" "train.py" "\x8c\x04" "line" "K\x0c" "\x8c\x04" "name" "\x8c\x07" "forward" "u"
#define FRAME_LIB "}(\x8c\x08" "filename" "\x8c\x06" "lib.py" "\x8c\x04" "line" "K\x03" "\x8c\x04" "name" "\x8c\x01" "f" "u"
static const char k_frames[] =
    "\x80\x02}(\x8c\x0d" "device_traces" "](](}("
    "\x8c\x06" "action" "\x8c\x05" "alloc" "\x8c\x04" "addr" "M\x00\x10" "\x8c\x04" "size" "K\x10"
    "\x8c\x07" "time_us" "K\x05" "\x8c\x06" "frames" "](" FRAME_TRAIN FRAME_LIB "e" "u}("
    "\x8c\x06" "action" "\x8c\x0e" "free_completed" "\x8c\x04" "addr" "M\x00\x50"
    "\x8c\x07" "time_us" "K\x05" "u}("
    "\x8c\x06" "action" "\x8c\x05" "alloc" "\x8c\x04" "addr" "M\x00\x20" "\x8c\x04" "size" "K\x20"
    "\x8c\x07" "time_us" "K\x06" "u}("
    "\x8c\x06" "action" "\x8c\x05" "alloc" "\x8c\x04" "addr" "M\x00\x30" "\x8c\x04" "size" "K\x08"
    "\x8c\x07" "time_us" "K\x07" "\x8c\x06" "frames" "](" FRAME_TRAIN "e" "u"
    "ee"
    "\x8c\x08" "segments" "]"
    "u.";

static void snapshot_frames(void) {
  cm_diag_t d;
  cm_diag_clear(&d);
  cm_snapshot_frames_t f;
  int rc = cm_snapshot_frames(k_frames, sizeof k_frames - 1, NULL, &f, &d);
  if (rc) fprintf(stderr, "frames: %s\n", d.message);
  ASSERT_OK(rc);
  /* the trace's ALLOC events: 0x5000 (live before recording), 0x1000, 0x2000, 0x3000 */
  cm_trace_t *t = NULL;
  ASSERT_OK(cm_trace_parse_snapshot(k_frames, sizeof k_frames - 1, NULL, &t, NULL, &d));
  EXPECT_EQ(t->allocs, 4);
  cm_trace_free(t);
  ASSERT(f.count == 4);
  EXPECT(f.alloc_frames[0] == NULL);
  EXPECT_STR(f.alloc_frames[1], "[0,1]");
  EXPECT(f.alloc_frames[2] == NULL);
  EXPECT_STR(f.alloc_frames[3], "[0]");
  EXPECT_STR(f.table_json, "{\"frames\":[\"train.py:12 forward\",\"lib.py:3 f\"]}");
  cm_snapshot_frames_free(&f);
  EXPECT(f.count == 0 && f.alloc_frames == NULL && f.table_json == NULL);
  cm_snapshot_frames_free(NULL);

  /* no frames recorded: count 0 */
  ASSERT_OK(cm_snapshot_frames(k_snap, sizeof k_snap - 1, NULL, &f, &d));
  EXPECT(f.count == 0 && f.table_json == NULL);
  /* not a snapshot: the conversion's error, nothing to free */
  EXPECT_STATUS(cm_snapshot_frames("abc", 3, NULL, &f, &d), CM_EPARSE);
  EXPECT(f.count == 0);
  EXPECT_STATUS(cm_snapshot_frames(k_snap, sizeof k_snap - 1, NULL, NULL, &d), CM_EINVAL);
}

int main(void) {
  CM_RUN(ints_floats_strings);
  CM_RUN(containers_memo_and_stack_ops);
  CM_RUN(refuses_code);
  CM_RUN(malformed);
  CM_RUN(snapshot_to_csv);
  CM_RUN(snapshot_frames);
  return cm_test_finish();
}
