/*
 * test_replay_streams.c - traces with several streams: the trace keeps each
 * event's stream (a free carries its allocation's stream), per-stream
 * replays give each stream its own pools (cm_replay_run_streams, the PyTorch
 * model with per_stream, the fit with per_stream), a block freed on stream
 * A is not reused by stream B but is in the merged view, a free recorded on
 * another stream goes back to the allocating stream's pools, and the device
 * capacity is shared by every stream.
 */
#include <stdlib.h>
#include <string.h>

#include "cm_test.h"
#include "cubemem/cubemem.h"
#include "cubemem/replay.h"
#include "cubemem/torchalloc.h"

#define MiB (1ull << 20)

/* Stream 1 allocates and frees 8 MiB; stream 2 then asks for 8 MiB. */
static const char two_streams[] =
    "Thread,Time,Action,Pointer,Size,Stream\n"
    "1,00:00:00.000100,allocate,0x10000,8388608,0x1\n"
    "1,00:00:00.000200,free,0x10000,8388608,0x1\n"
    "1,00:00:00.000300,allocate,0x20000,8388608,0x2\n"
    "1,00:00:00.000400,free,0x20000,8388608,0x2\n";

/* Stream 1's 12 MiB block is freed on stream 2, then stream 1 and stream 2
 * each ask for 12 MiB (PyTorch: the free goes to stream 1's pool). */
static const char cross_free[] =
    "Thread,Time,Action,Pointer,Size,Stream\n"
    "1,00:00:00.000100,allocate,0xa000,12582912,0x1\n"
    "1,00:00:00.000200,free,0xa000,12582912,0x2\n"
    "1,00:00:00.000300,allocate,0xb000,12582912,0x1\n"
    "1,00:00:00.000400,free,0xb000,12582912,0x1\n"
    "1,00:00:00.000500,allocate,0xc000,12582912,0x2\n"
    "1,00:00:00.000600,free,0xc000,12582912,0x2\n";

static cm_trace_t *parse(const char *csv) {
  cm_trace_t *t = NULL;
  return cm_trace_parse(csv, strlen(csv), NULL, &t, NULL) == CM_OK ? t : NULL;
}

static cm_manager_config_t config(void) {
  cm_manager_config_t mc;
  cm_manager_config_init(&mc);
  return mc;
}

/* The events' streams: index in t->streams; a free carries its allocation's. */
static void event_streams(void) {
  cm_trace_t *t = parse(cross_free);
  ASSERT(t);
  ASSERT_EQ(t->stream_count, 2);
  ASSERT(t->event_streams);
  static const uint8_t want[] = {0, 0, 0, 0, 1, 1};
  ASSERT_EQ(t->count, 6);
  for (size_t i = 0; i < 6; i++) EXPECT_EQ(t->event_streams[i], want[i]);
  cm_trace_free(t);
}

/* cubemem's layouts: per stream, stream 2 cannot reuse stream 1's page. */
static void own_pools_per_stream(void) {
  cm_trace_t *t = parse(two_streams);
  ASSERT(t);
  cm_manager_config_t mc = config();
  cm_storage_t *dev = NULL;
  ASSERT_OK(cm_storage_sim_create(0, true, 0, &dev));
  cm_replay_result_t per;
  ASSERT_OK(cm_replay_run_streams(t, dev, &mc, NULL, &per, NULL));
  ASSERT_EQ(per.stream_count, 2);
  EXPECT_EQ(per.streams[0].id, 1);
  EXPECT_EQ(per.streams[1].id, 2);
  EXPECT_EQ(per.streams[0].allocs, 1);
  EXPECT_GT(per.streams[0].peak_reserved_bytes, 0);
  EXPECT_GT(per.streams[1].peak_reserved_bytes, 0);
  EXPECT_EQ(per.peak_reserved_bytes,
            per.streams[0].peak_reserved_bytes + per.streams[1].peak_reserved_bytes);
  EXPECT_EQ(per.reserved_at_end, per.streams[0].reserved_at_end + per.streams[1].reserved_at_end);
  EXPECT_EQ(per.failed_allocs, 0);

  cm_storage_t *st = NULL;
  ASSERT_OK(cm_storage_sim_create(0, true, 0, &st));
  cm_manager_t *m = NULL;
  ASSERT_OK(cm_manager_create(st, &mc, &m, NULL));
  cm_replay_result_t merged;
  ASSERT_OK(cm_replay_run(t, m, NULL, &merged, NULL));
  EXPECT_EQ(merged.stream_count, 0);
  EXPECT(merged.streams == NULL);
  EXPECT_EQ(merged.peak_reserved_bytes, per.streams[0].peak_reserved_bytes); /* reused */
  EXPECT_LT(merged.peak_reserved_bytes, per.peak_reserved_bytes);
  cm_manager_destroy(m);
  cm_replay_result_free(&merged);
  cm_replay_result_free(&per);
  cm_sim_state_t s;
  ASSERT_OK(cm_storage_sim_state(dev, &s));
  EXPECT_EQ(s.bytes_used, 0); /* the managers gave everything back */
  cm_storage_destroy(dev);
  cm_trace_free(t);
}

/* The streams share the device's capacity: on a device that holds one
 * stream's page only, the second stream's reserve fails. */
static void shared_capacity(void) {
  cm_trace_t *t = parse(two_streams);
  ASSERT(t);
  cm_manager_config_t mc = config();
  cm_storage_t *dev = NULL;
  ASSERT_OK(cm_storage_sim_create(0, true, 0, &dev));
  cm_replay_result_t r;
  ASSERT_OK(cm_replay_run_streams(t, dev, &mc, NULL, &r, NULL));
  uint64_t one = r.streams[0].peak_reserved_bytes;
  cm_replay_result_free(&r);
  cm_storage_destroy(dev);
  ASSERT_OK(cm_storage_sim_create(one, true, 0, &dev));
  ASSERT_OK(cm_replay_run_streams(t, dev, &mc, NULL, &r, NULL));
  EXPECT_EQ(r.failed_allocs, 1);
  EXPECT_EQ(r.streams[1].failed_allocs, 1);
  EXPECT_EQ(r.first_failure_event, 2);
  EXPECT_EQ(r.first_failure_reserved_bytes, one);
  cm_replay_result_free(&r);
  cm_storage_destroy(dev);
  cm_trace_free(t);
}

/* A timeline and per-pool bytes at the device peak, summed over streams. */
static void timeline_over_streams(void) {
  cm_trace_t *t = parse(two_streams);
  ASSERT(t);
  cm_manager_config_t mc = config();
  cm_storage_t *dev = NULL;
  ASSERT_OK(cm_storage_sim_create(0, true, 0, &dev));
  cm_replay_options_t o = {.timeline_points = 4};
  cm_replay_result_t r;
  ASSERT_OK(cm_replay_run_streams(t, dev, &mc, &o, &r, NULL));
  ASSERT(r.timeline && r.pool_reserved_at_peak);
  uint64_t best = 0, pools = 0;
  for (size_t i = 0; i < r.timeline_count; i++)
    if (r.timeline[i].reserved_bytes > best) best = r.timeline[i].reserved_bytes;
  EXPECT_EQ(best, r.peak_reserved_bytes);
  for (size_t j = 0; j <= r.pool_count; j++) pools += r.pool_reserved_at_peak[j];
  EXPECT_EQ(pools, r.peak_reserved_bytes);
  cm_replay_result_free(&r);
  cm_storage_destroy(dev);
  cm_trace_free(t);
}

/* The PyTorch model per stream (torchsim gives 25,165,824 bytes per stream,
 * 12,582,912 merged): the free recorded on stream 2 goes back to stream 1. */
static void torch_per_stream(void) {
  cm_trace_t *t = parse(cross_free);
  ASSERT(t);
  cm_storage_t *st = NULL;
  ASSERT_OK(cm_storage_sim_create(0, true, 0, &st));
  cm_replay_options_t o = {.per_stream = true};
  cm_replay_result_t r;
  ASSERT_OK(cm_torch_replay(t, st, NULL, &o, &r, NULL, NULL));
  EXPECT_EQ(r.peak_reserved_bytes, 24 * MiB);
  ASSERT_EQ(r.stream_count, 2);
  EXPECT_EQ(r.streams[0].peak_reserved_bytes, 12 * MiB); /* reused its own block */
  EXPECT_EQ(r.streams[1].peak_reserved_bytes, 12 * MiB);
  EXPECT_EQ(r.streams[0].allocs, 2);
  EXPECT_EQ(r.storage.allocs, 2); /* two cudaMallocs */
  cm_replay_result_free(&r);
  ASSERT_OK(cm_storage_sim_create(0, true, 0, &st));
  o.per_stream = false;
  ASSERT_OK(cm_torch_replay(t, st, NULL, &o, &r, NULL, NULL));
  EXPECT_EQ(r.peak_reserved_bytes, 12 * MiB);
  EXPECT(r.streams == NULL);
  cm_replay_result_free(&r);
  cm_trace_free(t);
}

/* The model's per-stream reserved bytes and invariants. */
static void torch_stream_counters(void) {
  cm_storage_t *st = NULL;
  ASSERT_OK(cm_storage_sim_create(0, true, 0, &st));
  cm_torch_t *m = NULL;
  ASSERT_OK(cm_torch_create(st, NULL, &m, NULL));
  cm_torch_block_t *a = NULL, *b = NULL;
  ASSERT_OK(cm_torch_malloc(m, 4 * MiB, 7, &a, NULL));
  ASSERT_OK(cm_torch_malloc(m, 100, 9, &b, NULL));
  uint64_t now = 0, peak = 0;
  cm_torch_stream_reserved(m, 7, &now, &peak);
  EXPECT_EQ(now, 20 * MiB);
  EXPECT_EQ(peak, 20 * MiB);
  cm_torch_stream_reserved(m, 9, &now, NULL);
  EXPECT_EQ(now, 2 * MiB);
  cm_torch_stream_reserved(m, 3, &now, &peak);
  EXPECT_EQ(now + peak, 0);
  EXPECT_EQ(cm_torch_check(m), 0);
  cm_torch_free(m, a);
  cm_torch_free(m, b);
  ASSERT_OK(cm_torch_empty_cache(m, NULL));
  cm_torch_stream_reserved(m, 7, &now, &peak);
  EXPECT_EQ(now, 0);
  EXPECT_EQ(peak, 20 * MiB);
  EXPECT_EQ(cm_torch_check(m), 0);
  cm_torch_destroy(m);
}

/* fit with per_stream answers the per-stream replay's question. */
static void fit_per_stream(void) {
  cm_trace_t *t = parse(cross_free);
  ASSERT(t);
  cm_fit_options_t fo;
  cm_fit_options_init(&fo);
  cm_fit_result_t fr;
  fo.per_stream = true;
  ASSERT_OK(cm_torch_fit(t, NULL, &fo, &fr, NULL));
  EXPECT_EQ(fr.unconstrained_peak, 24 * MiB);
  EXPECT_EQ(fr.fit_bytes, 14 * MiB); /* torchsim's mincap.py: 14,680,064 */
  fo.per_stream = false;
  ASSERT_OK(cm_torch_fit(t, NULL, &fo, &fr, NULL));
  EXPECT_EQ(fr.unconstrained_peak, 12 * MiB);
  cm_manager_config_t mc = config();
  cm_fit_options_init(&fo);
  fo.per_stream = true;
  ASSERT_OK(cm_replay_fit(t, &mc, &fo, &fr, NULL));
  uint64_t per = fr.unconstrained_peak;
  fo.per_stream = false;
  ASSERT_OK(cm_replay_fit(t, &mc, &fo, &fr, NULL));
  EXPECT_LT(fr.unconstrained_peak, per);
  cm_trace_free(t);
}

static void bad_arguments(void) {
  cm_trace_t *t = parse(two_streams);
  ASSERT(t);
  cm_manager_config_t mc = config();
  cm_replay_result_t r;
  EXPECT_STATUS(cm_replay_run_streams(NULL, NULL, &mc, NULL, &r, NULL), CM_EINVAL);
  EXPECT_STATUS(cm_replay_run_streams(t, NULL, &mc, NULL, &r, NULL), CM_EINVAL);
  cm_trace_free(t);
}

int main(void) {
  CM_RUN(event_streams);
  CM_RUN(own_pools_per_stream);
  CM_RUN(shared_capacity);
  CM_RUN(timeline_over_streams);
  CM_RUN(torch_per_stream);
  CM_RUN(torch_stream_counters);
  CM_RUN(fit_per_stream);
  CM_RUN(bad_arguments);
  return cm_test_finish();
}
