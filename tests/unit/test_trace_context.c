/*
 * test_trace_context.c - what a trace and a replay tell about themselves:
 * the streams of a trace (cm_trace_t.streams: allocations and peak live per
 * stream, a free counted on its allocation's stream), the recorded run's
 * first out-of-memory (cm_trace_t.first_failure_*), and a replay's first
 * failed reservation (cm_replay_result_t.first_failure_*: event, time, size,
 * live and reserved bytes then).
 */
#include <string.h>

#include "cm_test.h"
#include "cubemem/cubemem.h"
#include "cubemem/replay.h"

static cm_trace_t *parse(const char *s) {
  cm_trace_t *t = NULL;
  cm_diag_t d;
  cm_diag_clear(&d);
  if (cm_trace_parse(s, strlen(s), NULL, &t, &d) != CM_OK) {
    cm_test_fail(__FILE__, __LINE__, "cm_trace_parse: %s", d.message);
    return NULL;
  }
  return t;
}

static void streams_counted(void) {
  cm_trace_t *t = parse("Thread,Time,Action,Pointer,Size,Stream\n"
                        "1,00:00:00.000001,allocate,0x1000,1000,0x0\n"
                        "1,00:00:00.000002,allocate,0x2000,10,0x7f01\n"
                        "1,00:00:00.000003,allocate,0x3000,20,0x7f01\n"
                        "1,00:00:00.000004,free,0x1000,1000,0x0\n"
                        "1,00:00:00.000005,free,0x2000,10,0x0\n" /* freed elsewhere */
                        "1,00:00:00.000006,allocate,0x4000,15,0x7f01\n");
  ASSERT(t != NULL);
  ASSERT_EQ(t->stream_count, 2);
  EXPECT_EQ(t->streams[0].id, 0);
  EXPECT_EQ(t->streams[0].allocs, 1);
  EXPECT_EQ(t->streams[0].peak_live_bytes, 1000);
  EXPECT_EQ(t->streams[0].live_bytes, 0);
  EXPECT_EQ(t->streams[1].id, 0x7f01);
  EXPECT_EQ(t->streams[1].allocs, 3);
  EXPECT_EQ(t->streams[1].peak_live_bytes, 35); /* 20 + 15: the free of 10 counts here */
  EXPECT_EQ(t->streams[1].live_bytes, 35);
  cm_trace_free(t);

  /* no Stream column: one stream 0; no allocation: none */
  t = parse("1,00:00:00.000001,allocate,0x1000,64\n1,00:00:00.000002,allocate,0x2000,64\n");
  ASSERT(t != NULL);
  ASSERT_EQ(t->stream_count, 1);
  EXPECT_EQ(t->streams[0].allocs, 2);
  cm_trace_free(t);
  t = parse("Thread,Time,Action,Pointer,Size,Stream\n");
  ASSERT(t != NULL);
  EXPECT_EQ(t->stream_count, 0);
  cm_trace_free(t);
}

static void recorded_oom(void) {
  cm_trace_t *t = parse("Thread,Time,Action,Pointer,Size,Stream\n"
                        "1,00:00:01.000000,allocate,0x1000,4096,0x0\n"
                        "1,00:00:02.500000,allocate failure,(nil),1099511627776,0x0\n"
                        "1,00:00:03.000000,allocate failure,(nil),77,0x0\n");
  ASSERT(t != NULL);
  EXPECT_EQ(t->alloc_failures, 2);
  EXPECT_EQ(t->first_failure_line, 3);
  EXPECT_EQ(t->first_failure_size, 1099511627776ull);
  EXPECT_EQ(t->first_failure_time_us, 1500000); /* times count from the first event */
  EXPECT_EQ(t->first_failure_live_bytes, 4096);
  cm_trace_free(t);
}

static void replay_first_failure(void) {
  cm_trace_t *t = parse("Thread,Time,Action,Pointer,Size,Stream\n"
                        "1,00:00:01.000000,allocate,0x1000,1048576,0x0\n"
                        "1,00:00:02.000000,allocate,0x2000,1048576,0x0\n"
                        "1,00:00:03.000000,allocate,0x3000,67108864,0x0\n" /* too big */
                        "1,00:00:04.000000,free,0x3000,67108864,0x0\n");
  ASSERT(t != NULL);
  uint64_t capacity = 16ull << 20;
  cm_device_props_t props = {capacity / 4, 512};
  cm_pool_options_t pools[CM_MAX_DYNAMIC_POOLS];
  size_t n = 0;
  cm_diag_t d;
  cm_diag_clear(&d);
  ASSERT_OK(cm_pools_parse("default", props, pools, CM_MAX_DYNAMIC_POOLS, &n, &d));
  cm_storage_t *st = NULL;
  ASSERT_OK(cm_storage_sim_create(capacity, true, 0, &st));
  cm_manager_config_t mc;
  cm_manager_config_init(&mc);
  mc.props = props;
  mc.pools = pools;
  mc.pool_count = n;
  cm_manager_t *m = NULL;
  ASSERT_OK(cm_manager_create(st, &mc, &m, &d));
  cm_replay_result_t r;
  ASSERT_OK(cm_replay_run(t, m, NULL, &r, &d));
  EXPECT_EQ(r.failed_allocs, 1);
  EXPECT(r.first_failure != CM_OK);
  EXPECT_EQ(r.first_failure_size, 67108864);
  EXPECT_EQ(r.first_failure_event, 2);
  EXPECT_EQ(r.first_failure_time_us, 2000000); /* from the first event */
  EXPECT_EQ(r.first_failure_live_bytes, 2u << 20);
  EXPECT_GE(r.first_failure_reserved_bytes, 2u << 20);
  EXPECT_LE(r.first_failure_reserved_bytes, capacity);
  cm_replay_result_free(&r);
  cm_manager_destroy(m);
  cm_trace_free(t);
}

int main(void) {
  CM_RUN(streams_counted);
  CM_RUN(recorded_oom);
  CM_RUN(replay_first_failure);
  return cm_test_finish();
}
