/*
 * test_snapshot_start.c - replaying the PyTorch model from a snapshot's
 * starting state: seeding segments and blocks (placement, splitting, the
 * remainder PyTorch would not split off, overlaps, no room), the state read
 * from a synthetic history's segment entries being undone, and on the shared
 * snapshots: the state's figures, the replay's reserved bytes at the end
 * against PyTorch's total at dump, and the history's allocations landing at
 * the addresses PyTorch gave them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_test.h"
#include "cubemem/cubemem.h"
#include "cubemem/replay.h"
#include "cubemem/torchalloc.h"

#define MiB (1ull << 20)
#define A0 0x7000000000ull

static cm_torch_t *model(void) {
  cm_storage_t *st = NULL;
  if (cm_storage_sim_create(0, true, 0, &st) != CM_OK) return NULL;
  cm_torch_t *m = NULL;
  return cm_torch_create(st, NULL, &m, NULL) == CM_OK ? m : NULL;
}

/* A seeded segment is one free block; a seeded block splits it. */
static void seed_and_place(void) {
  cm_torch_t *m = model();
  ASSERT(m);
  ASSERT_OK(cm_torch_seed_segment(m, A0, 20 * MiB, false, 0, NULL));
  EXPECT_STATUS(cm_torch_seed_segment(m, A0 + 10 * MiB, 20 * MiB, false, 0, NULL), CM_EINVAL);
  EXPECT_STATUS(cm_torch_seed_segment(m, A0 + 64 * MiB, 1000, false, 0, NULL), CM_EINVAL);
  cm_torch_block_t *b = NULL, *c = NULL;
  ASSERT_OK(cm_torch_seed_block(m, A0 + 2 * MiB, 4 * MiB, 4 * MiB, true, &b, NULL));
  EXPECT_EQ(cm_torch_block_addr(b), A0 + 2 * MiB);
  EXPECT_EQ(cm_torch_check(m), 0);
  EXPECT_STATUS(cm_torch_seed_block(m, A0 + 3 * MiB, 1 * MiB, 1 * MiB, true, &c, NULL),
                CM_ENOTFOUND); /* inside the allocated block */
  EXPECT_STATUS(cm_torch_seed_block(m, A0 + 40 * MiB, 1 * MiB, 1 * MiB, true, &c, NULL),
                CM_ENOTFOUND); /* in no segment */
  /* best fit: the 2 MiB hole before the block, not the 14 MiB after it */
  ASSERT_OK(cm_torch_malloc(m, 2 * MiB, 0, &c, NULL));
  EXPECT_EQ(cm_torch_block_addr(c), A0);
  cm_torch_stats_t s;
  cm_torch_stats(m, &s);
  EXPECT_EQ(s.reserved, 20 * MiB);
  EXPECT_EQ(s.cuda_mallocs, 0); /* the seeded segment is not the model's cudaMalloc */
  cm_torch_free(m, b);
  cm_torch_free(m, c);
  EXPECT_EQ(cm_torch_check(m), 0);
  ASSERT_OK(cm_torch_empty_cache(m, NULL)); /* a seeded segment is released like any other */
  cm_torch_stats(m, &s);
  EXPECT_EQ(s.reserved, 0);
  cm_torch_destroy(m);
}

/* An estimated size takes the remainder PyTorch would not split off (a
 * large-pool remainder of at most 1 MiB); an exact size does not. */
static void estimated_size_absorbs(void) {
  cm_torch_t *m = model();
  ASSERT(m);
  ASSERT_OK(cm_torch_seed_segment(m, A0, 20 * MiB, false, 0, NULL));
  cm_torch_block_t *b = NULL;
  ASSERT_OK(cm_torch_seed_block(m, A0, 19 * MiB + 512 * 1024, 19 * MiB, false, &b, NULL));
  EXPECT_EQ(cm_torch_block_size(b), 20 * MiB);
  EXPECT_EQ(cm_torch_check(m), 0);
  cm_torch_destroy(m);
  m = model();
  ASSERT(m);
  ASSERT_OK(cm_torch_seed_segment(m, A0, 20 * MiB, false, 0, NULL));
  ASSERT_OK(cm_torch_seed_block(m, A0, 19 * MiB + 512 * 1024, 19 * MiB, true, &b, NULL));
  EXPECT_EQ(cm_torch_block_size(b), 19 * MiB + 512 * 1024);
  EXPECT_EQ(cm_torch_check(m), 0);
  cm_torch_destroy(m);
}

/* Expandable segments have no starting state. */
static void expandable_refused(void) {
  cm_storage_t *st = NULL;
  ASSERT_OK(cm_storage_sim_create(0, true, 0, &st));
  cm_torch_options_t o;
  cm_torch_options_init(&o);
  o.expandable_segments = true;
  cm_torch_t *m = NULL;
  ASSERT_OK(cm_torch_create(st, &o, &m, NULL));
  EXPECT_STATUS(cm_torch_seed_segment(m, A0, 20 * MiB, false, 0, NULL), CM_ENOTSUP);
  cm_torch_destroy(m);
}

/* Read a shared snapshot into *buf (NULL when absent). */
static char *read_snapshot(const char *name, size_t *len) {
  const char *dir = cm_test_shared_dir();
  if (!dir) return NULL;
  char path[600];
  snprintf(path, sizeof path, "%s/traces/snapshots/%s", dir, name);
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = malloc(8 << 20);
  *len = buf ? fread(buf, 1, 8 << 20, f) : 0;
  fclose(f);
  return buf;
}

/* The small compiled training snapshot: cold, the model lands 1.6% under
 * PyTorch's reserved total; from the starting state, on it exactly. */
static void shared_snapshot_totals(void) {
  size_t len = 0;
  char *buf = read_snapshot("cs336-small-compiled-training.pickle", &len);
  if (!buf) CM_SKIP("../shared is absent");
  cm_snapshot_state_t state;
  ASSERT_OK(cm_snapshot_start_state(buf, len, NULL, &state, NULL));
  cm_snapshot_info_t info;
  cm_trace_t *t = NULL;
  ASSERT_OK(cm_trace_parse_snapshot(buf, len, NULL, &t, &info, NULL));
  EXPECT_EQ(state.segment_count, info.segments);
  EXPECT_EQ(state.reserved_bytes, info.reserved_bytes);
  EXPECT_EQ(state.block_count, info.preexisting);
  EXPECT_EQ(state.segment_events, 0); /* the history has no segment entries */
  cm_storage_t *st = NULL;
  ASSERT_OK(cm_storage_sim_create(0, true, 0, &st));
  cm_replay_result_t r;
  uint64_t unplaced = 1;
  ASSERT_OK(cm_torch_replay_from(t, st, NULL, &state, NULL, &r, NULL, &unplaced, NULL));
  EXPECT_EQ(unplaced, 0);
  EXPECT_EQ(r.reserved_at_end, info.reserved_bytes);
  EXPECT_EQ(r.reserved_at_end, 4238344192ull);
  cm_replay_result_free(&r);
  ASSERT_OK(cm_storage_sim_create(0, true, 0, &st));
  ASSERT_OK(cm_torch_replay(t, st, NULL, NULL, &r, NULL, NULL));
  EXPECT_EQ(r.reserved_at_end, 4169138176ull); /* cold: -1.633% */
  cm_replay_result_free(&r);
  cm_trace_free(t);
  cm_snapshot_state_free(&state);
  free(buf);
}

/* One row of the converted CSV: action ('a' allocate, 'f' free), pointer, size. */
typedef struct row {
  char action;
  uint64_t ptr, size;
} row;

static size_t csv_rows(const char *csv, size_t len, row *out, size_t cap) {
  size_t n = 0;
  const char *p = memchr(csv, '\n', len); /* past the header */
  while (p && (size_t)(p - csv) + 1 < len && n < cap) {
    p++;
    const char *f = p;
    for (int k = 0; k < 2 && f; k++) f = memchr(f, ',', len - (size_t)(f - csv)), f = f ? f + 1 : f;
    if (!f) break;
    row r = {f[0] == 'f' ? 'f' : (strncmp(f, "allocate,", 9) ? 'x' : 'a'), 0, 0};
    const char *q = memchr(f, ',', len - (size_t)(f - csv));
    if (!q) break;
    r.ptr = strtoull(q + 1, NULL, 16);
    q = memchr(q + 1, ',', len - (size_t)(q + 1 - csv));
    if (!q) break;
    r.size = strtoull(q + 1, NULL, 10);
    out[n++] = r;
    p = memchr(p, '\n', len - (size_t)(p - csv));
  }
  return n;
}

/* Replay the rows from the state by hand and count the history's
 * allocations that land at PyTorch's address. */
static void count_landings(const cm_snapshot_state_t *state, const row *rows, size_t n,
                           size_t *hist, size_t *landed) {
  cm_torch_t *m = model();
  ASSERT(m);
  for (size_t k = 0; k < state->segment_count; k++)
    ASSERT_OK(cm_torch_seed_segment(m, state->segments[k].addr, state->segments[k].size,
                                    state->segments[k].small, 0, NULL));
  uint64_t *ptr = calloc(n, sizeof *ptr);
  cm_torch_block_t **blk = calloc(n, sizeof *blk);
  ASSERT(ptr && blk);
  size_t allocs = 0, live = 0;
  for (size_t i = 0; i < n; i++) {
    if (rows[i].action == 'a') {
      cm_torch_block_t *b = NULL;
      if (allocs < state->block_count) {
        const cm_snapshot_block_t *sb = &state->blocks[allocs];
        uint64_t size = sb->size_known ? sb->size : cm_torch_round_size(NULL, sb->requested);
        ASSERT_OK(cm_torch_seed_block(m, sb->addr, size, sb->requested, sb->size_known, &b, NULL));
      } else {
        ASSERT_OK(cm_torch_malloc(m, rows[i].size, 0, &b, NULL));
        (*hist)++;
        *landed += cm_torch_block_addr(b) == rows[i].ptr;
      }
      allocs++;
      ptr[live] = rows[i].ptr;
      blk[live++] = b;
    } else if (rows[i].action == 'f') {
      for (size_t k = live; k-- > 0;)
        if (ptr[k] == rows[i].ptr) {
          cm_torch_free(m, blk[k]);
          ptr[k] = ptr[--live];
          blk[k] = blk[live];
          break;
        }
    }
  }
  EXPECT_EQ(cm_torch_check(m), 0);
  free(ptr);
  free(blk);
  cm_torch_destroy(m);
}

static void shared_snapshot_addresses(void) {
  static const char *const names[] = {"cs336-small-compiled-training.pickle",
                                      "cs336-medium-ctx128-inference.pickle"};
  for (size_t s = 0; s < 2; s++) {
    size_t len = 0;
    char *buf = read_snapshot(names[s], &len);
    if (!buf) CM_SKIP("../shared is absent");
    cm_snapshot_state_t state;
    ASSERT_OK(cm_snapshot_start_state(buf, len, NULL, &state, NULL));
    char *csv = NULL;
    size_t clen = 0;
    ASSERT_OK(cm_snapshot_to_csv(buf, len, NULL, &csv, &clen, NULL, NULL));
    size_t cap = clen / 20 + 16;
    row *rows = calloc(cap, sizeof *rows);
    ASSERT(rows);
    size_t n = csv_rows(csv, clen, rows, cap), hist = 0, landed = 0;
    count_landings(&state, rows, n, &hist, &landed);
    printf("# %s: %zu of %zu allocations of the history at PyTorch's address\n", names[s], landed,
           hist);
    EXPECT_EQ(landed, hist);
    free(rows);
    free(csv);
    cm_snapshot_state_free(&state);
    free(buf);
  }
}

int main(void) {
  CM_RUN(seed_and_place);
  CM_RUN(estimated_size_absorbs);
  CM_RUN(expandable_refused);
  CM_RUN(shared_snapshot_totals);
  CM_RUN(shared_snapshot_addresses);
  return cm_test_finish();
}
