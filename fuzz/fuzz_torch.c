/*
 * fuzz_torch.c - libFuzzer target for the model of PyTorch's caching
 * allocator (cubemem/torchalloc.h) and its PYTORCH_CUDA_ALLOC_CONF reader.
 *
 * The input's first line is a PYTORCH_CUDA_ALLOC_CONF string (any bytes: a
 * refused one must leave the options unchanged, with a message); the rest is
 * an allocation trace (RMM CSV). Traces that parse are replayed through the
 * model on a small simulated device (so the out-of-memory path runs), with
 * and without expandable segments, checking the model's invariants
 * (cm_torch_check) after every event, that the device is never asked for
 * more than its capacity nor refuses a call as a violation of its rules, and
 * that empty_cache after freeing everything gives every byte back.
 *
 * Exports: LLVMFuzzerTestOneInput.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cubemem/cubemem.h"
#include "cubemem/torchalloc.h"
#include "fuzz.h"

#define FUZZ_CHECK(c)                                                                \
  do {                                                                               \
    if (!(c)) {                                                                      \
      fprintf(stderr, "fuzz_torch: %s:%d: check failed: %s\n", __FILE__, __LINE__, #c); \
      abort();                                                                       \
    }                                                                                \
  } while (0)

#define CAPACITY (256ull << 20)

static void run(const cm_trace_t *t, const cm_torch_options_t *o) {
  cm_storage_t *st = NULL;
  FUZZ_CHECK(cm_storage_sim_create(CAPACITY, true, 0, &st) == CM_OK);
  cm_torch_t *m = NULL;
  FUZZ_CHECK(cm_torch_create(st, o, &m, NULL) == CM_OK);
  cm_torch_block_t **blk = calloc(t->slots ? t->slots : 1, sizeof *blk);
  FUZZ_CHECK(blk != NULL);
  for (size_t i = 0; i < t->count; i++) {
    const cm_trace_event_t *e = &t->events[i];
    if (e->action == CM_TRACE_ALLOC) {
      int rc = cm_torch_malloc(m, e->size, 0, &blk[e->slot], NULL);
      FUZZ_CHECK(rc == CM_OK || rc == CM_EOOM);
      if (rc != CM_OK) blk[e->slot] = NULL;
    } else {
      cm_torch_free(m, blk[e->slot]);
      blk[e->slot] = NULL;
    }
    FUZZ_CHECK(cm_torch_check(m) == 0);
  }
  for (uint32_t s = 0; s < t->slots; s++) cm_torch_free(m, blk[s]);
  free(blk);
  FUZZ_CHECK(cm_torch_empty_cache(m, NULL) == CM_OK);
  FUZZ_CHECK(cm_torch_check(m) == 0);
  cm_storage_stats_t s;
  cm_storage_stats(cm_torch_storage(m), &s);
  FUZZ_CHECK(s.bytes_held == 0);
  FUZZ_CHECK(s.bytes_held_peak <= CAPACITY);
  FUZZ_CHECK(s.violations == 0);
  cm_torch_stats_t ts;
  cm_torch_stats(m, &ts);
  FUZZ_CHECK(ts.reserved == 0 && ts.allocated == 0 && ts.segments == 0);
  cm_torch_destroy(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *p = (const char *)data;
  const char *nl = memchr(p, '\n', size);
  size_t first = nl ? (size_t)(nl - p) : size;
  char *conf = malloc(first + 1);
  if (!conf) return 0;
  memcpy(conf, p, first);
  conf[first] = '\0';
  cm_torch_options_t o, before;
  cm_torch_options_init(&o);
  before = o;
  cm_diag_t d = {0};
  if (cm_torch_options_parse(conf, &o, &d) != CM_OK) {
    FUZZ_CHECK(memcmp(&o, &before, sizeof o) == 0);
    FUZZ_CHECK(d.message[0] != '\0');
  } else {
    char buf[512];
    cm_torch_options_format(&o, buf, sizeof buf);
    cm_torch_options_t back;
    cm_torch_options_init(&back);
    FUZZ_CHECK(cm_torch_options_parse(buf, &back, NULL) == CM_OK);
    FUZZ_CHECK(back.expandable_segments == o.expandable_segments);
    FUZZ_CHECK(back.max_split_size == o.max_split_size);
  }
  free(conf);
  if (!nl) return 0;
  cm_trace_t *t = NULL;
  cm_trace_parse_options_t po = {.skip_bad_lines = true};
  if (cm_trace_parse(nl + 1, size - first - 1, &po, &t, NULL) != CM_OK) return 0;
  if (t->count <= 20000) {
    run(t, &o);
    o.expandable_segments = !o.expandable_segments;
    run(t, &o);
  }
  cm_trace_free(t);
  return 0;
}
