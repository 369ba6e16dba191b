/*
 * record.h - the recorder's data, shared by record.c (which fills it while a
 * replay runs) and html.c (which writes it into the report). Private to the
 * library.
 */
#ifndef CM_REPLAY_RECORD_H
#define CM_REPLAY_RECORD_H

#include <stdint.h>

#include "base/u64map.h"
#include "cubemem/replay.h"

/* One pool's bytes at a moment. */
typedef struct cm__rec_pool {
  uint64_t reserved, in_use, padding;
  uint64_t cached; /* UINT64_MAX: the pool does not report it */
} cm__rec_pool_t;

/* One timeline sample: the maxima over a run of events ending at `event`. */
typedef struct cm__rec_sample {
  uint64_t event;   /* events replayed when the run ended */
  uint64_t time_us; /* time of the run's last event */
  uint64_t live, reserved;
} cm__rec_sample_t;

#define CM__REC_NO_EVENT UINT64_MAX
#define CM__REC_FAILED 0xffffffffu

/* One allocation of the trace (in ALLOC order). */
typedef struct cm__rec_alloc {
  uint64_t e0, e1;     /* alloc and free event (e1 = CM__REC_NO_EVENT: never freed) */
  uint64_t t0, t1;     /* their times in microseconds (t1 = 0 when never freed) */
  uint64_t size;       /* requested bytes */
  uint64_t offset;     /* slice offset inside its storage range */
  uint64_t padding;    /* growth of its pool's padding bytes when placed */
  uint32_t range;      /* index into ranges, CM__REC_FAILED when the reserve failed */
  uint32_t pool;       /* pool index (the persistent pool is pool_count - 1) */
} cm__rec_alloc_t;

/* A storage range (page, segment, VM reservation) some slice was placed in. */
typedef struct cm__rec_range {
  uint64_t id;     /* storage id */
  uint64_t extent; /* highest offset + size of any slice placed in it */
  uint32_t pool;
} cm__rec_range_t;

struct cm_replay_recorder {
  int status;
  uint64_t events; /* events of the trace */
  uint64_t duration_us;
  size_t points, bucket;
  uint32_t slots;
  size_t pool_count; /* dynamic pools + 1 (persistent last); 0 before the first step */
  cm_pool_options_t *opts; /* pool_count entries (the persistent one is zeroed) */

  /* timeline: samples[i] with pools[i * pool_count ...] */
  cm__rec_sample_t *samples;
  cm__rec_pool_t *sample_pools;
  size_t sample_count;

  /* the storage peak */
  uint64_t peak_reserved, peak_event, peak_time_us, peak_live;
  cm__rec_pool_t *peak_pools;

  /* allocations in ALLOC order; open[slot] = index + 1 of the live one */
  cm__rec_alloc_t *allocs;
  size_t alloc_count, alloc_cap;
  uint32_t *open;

  /* ranges, with an index storage id + 1 -> range + 1 (base/u64map.h) */
  cm__rec_range_t *ranges;
  size_t range_count, range_cap;
  cm__u64map range_index;

  /* scratch for the current run of events */
  uint64_t run_live, run_reserved, run_end_time;
  cm__rec_pool_t *run_pools, *now_pools, *prev_pools;
};

#endif
