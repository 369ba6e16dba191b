/*
 * fuzz_snapshot.c - libFuzzer target for the restricted pickle reader and the
 * PyTorch snapshot conversion (cubemem/replay.h, src/replay/pickle.h).
 *
 * Each input goes through cm__pickle_parse: on success the value graph is
 * walked (bounded: the memo can make it a DAG or a cycle) checking that
 * every string lies inside the input and every container's items are
 * non-NULL; on failure the status must be CM_EPARSE with a message. Then
 * cm_snapshot_to_csv with device -1, 0 and 1 and both free rules: on success
 * the CSV must start with the RMM header and parse with cm_trace_parse
 * (strictly: the converter only writes valid rows), with as many allocation
 * failures as the info counts `oom` entries; on failure the status is one of
 * CM_EPARSE, CM_ENOTFOUND, CM_ENOMEM with a message.
 *
 * Exports: LLVMFuzzerTestOneInput.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cubemem/cubemem.h"
#include "cubemem/replay.h"
#include "fuzz.h"
#include "replay/pickle.h"

#define FUZZ_CHECK(c)                                                                   \
  do {                                                                                  \
    if (!(c)) {                                                                         \
      fprintf(stderr, "fuzz_snapshot: %s:%d: check failed: %s\n", __FILE__, __LINE__, #c); \
      abort();                                                                          \
    }                                                                                   \
  } while (0)

static size_t walk(const cm_pv_t *v, const char *lo, const char *hi, int depth, size_t budget) {
  if (!budget) return 0;
  budget--;
  FUZZ_CHECK(v != NULL);
  if (v->kind == CM_PV_STR || v->kind == CM_PV_BYTES)
    FUZZ_CHECK(v->n == 0 || (v->s >= lo && v->s + v->n <= hi));
  if (v->kind == CM_PV_DICT) FUZZ_CHECK(v->n % 2 == 0);
  if (depth > 64) return budget;
  if (v->kind == CM_PV_LIST || v->kind == CM_PV_TUPLE || v->kind == CM_PV_DICT || v->kind == CM_PV_SET)
    for (size_t i = 0; i < v->n && budget; i++) budget = walk(v->items[i], lo, hi, depth + 1, budget);
  return budget;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *buf = (const char *)data;
  cm_pickle_t *doc = NULL;
  const cm_pv_t *root = NULL;
  cm_diag_t d;
  cm_diag_clear(&d);
  int rc = cm__pickle_parse(buf, size, &doc, &root, &d);
  if (rc == CM_OK) {
    FUZZ_CHECK(root != NULL);
    walk(root, buf, buf + size, 0, 100000);
    cm__pickle_free(doc);
  } else {
    FUZZ_CHECK(rc == CM_EPARSE || rc == CM_ENOMEM);
    FUZZ_CHECK(d.message[0] != '\0');
    FUZZ_CHECK(doc == NULL && root == NULL);
  }
  for (int dev = -1; dev <= 1; dev++) {
    for (int req = 0; req < 2; req++) {
      cm_snapshot_options_t o;
      cm_snapshot_options_init(&o);
      o.device = dev;
      o.free_on_requested = req;
      char *csv = NULL;
      size_t n = 0;
      cm_snapshot_info_t info;
      cm_diag_clear(&d);
      rc = cm_snapshot_to_csv(data, size, &o, &csv, &n, &info, &d);
      if (rc != CM_OK) {
        FUZZ_CHECK(rc == CM_EPARSE || rc == CM_ENOTFOUND || rc == CM_ENOMEM);
        FUZZ_CHECK(d.message[0] != '\0');
        FUZZ_CHECK(csv == NULL);
        continue;
      }
      FUZZ_CHECK(n >= 39 && !memcmp(csv, "Thread,Time,Action,Pointer,Size,Stream\n", 39));
      FUZZ_CHECK(csv[n] == '\0' && strlen(csv) == n);
      FUZZ_CHECK(info.has_history);
      cm_trace_t *t = NULL;
      cm_diag_clear(&d);
      int prc = cm_trace_parse(csv, n, NULL, &t, &d);
      if (prc == CM_EPARSE) {
        /* sizes whose live sum overflows 64 bits are the only rows refused */
        FUZZ_CHECK(strstr(d.message, "overflows") != NULL);
      } else {
        FUZZ_CHECK(prc == CM_OK || prc == CM_ENOMEM);
      }
      if (prc == CM_OK) {
        FUZZ_CHECK(t->alloc_failures == info.oom_entries);
        FUZZ_CHECK(t->allocs >= info.preexisting);
        cm_trace_free(t);
      }
      free(csv);
    }
  }
  return 0;
}
