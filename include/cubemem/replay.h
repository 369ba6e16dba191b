/*
 * cubemem/replay.h - allocation traces and their replay through a memory
 * manager (the engine behind `cubemem replay`, usable from tests and benches).
 *
 * Traces are CSV files in the layout of RAPIDS RMM's logging adaptor:
 *
 *     Thread,Time,Action,Pointer,Size,Stream
 *     1,00:00:00.000226,allocate,0x39b43000,1008,0x0
 *     1,00:00:00.000411,free,0x39b43000,1008,0x0
 *
 * Actions are `allocate`, `free` (RMM's documentation calls it `deallocate`:
 * both are read) and `allocate failure`, whose pointer is null: `0x0` or
 * `(nil)`, as glibc prints a null %p.
 *
 * Parsing turns the text into a compact event array once; pointers are
 * resolved to dense "slots" at parse time (a slot is reused after the free of
 * its allocation), so a replay only indexes an array of handles. Rows that
 * cannot be replayed are counted in the trace, not kept as events:
 *  - `allocate failure` rows (the recorded allocator failed),
 *  - frees of a pointer that is not live (unknown pointer),
 *  - an `allocate` of a pointer that is already live counts as a duplicate:
 *    the earlier allocation is freed implicitly (an event is emitted for it).
 *
 * The trace's live bytes (sum of the requested sizes of live allocations) and
 * their exact peak are computed while parsing.
 *
 * Ownership: a cm_trace_t comes from cm_trace_parse / cm_trace_load and is
 * freed with cm_trace_free; its fields are read-only to callers. A
 * cm_replay_result_t is filled by cm_replay_run and its arrays are freed with
 * cm_replay_result_free.
 *
 * Thread-safety: traces are immutable after parsing and may be read (and
 * replayed) from several threads at once. cm_replay_run drives the manager
 * it is given from the calling thread: the manager rules of memory.h apply.
 */
#ifndef CUBEMEM_REPLAY_H
#define CUBEMEM_REPLAY_H

#include "cubemem/common.h"
#include "cubemem/memory.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- traces ------------------------------------------------------------- */

typedef enum cm_trace_action {
  CM_TRACE_ALLOC = 0, /* reserve `size` bytes into slot */
  CM_TRACE_FREE = 1,  /* release the handle in slot (size = its requested size) */
} cm_trace_action_t;

typedef struct cm_trace_event {
  uint64_t size;    /* requested bytes (for a free: the size of the allocation freed) */
  uint64_t time_us; /* microseconds since the first timed row (RMM logs carry the time of
                       day: it counts from the first event, across midnight) */
  uint32_t slot;    /* dense slot index; an allocation and its free share it */
  uint32_t action;  /* cm_trace_action_t */
} cm_trace_event_t;

/* One stream of a trace (RMM's `Stream` column, a snapshot entry's
 * `stream`): its allocations and live bytes. cm_replay_run_streams (and the
 * PyTorch model with per_stream) gives each its own pools; cm_replay_run
 * merges them. */
typedef struct cm_trace_stream {
  uint64_t id;              /* the stream's value in the trace (0 when absent) */
  uint64_t allocs;          /* allocations made on it */
  uint64_t peak_live_bytes; /* peak of the bytes live on it (freed where allocated) */
  uint64_t live_bytes;      /* bytes live on it at the end */
} cm_trace_stream_t;

/* At most this many streams are told apart; the last takes any others. */
#define CM_TRACE_MAX_STREAMS 256

typedef struct cm_trace {
  cm_trace_event_t *events; /* replayable events, in file order */
  size_t count;             /* number of events */
  uint32_t slots;           /* slots used (the most allocations live at once + reuse) */

  uint64_t lines;            /* lines read, header and blank lines included */
  uint64_t allocs;           /* CM_TRACE_ALLOC events */
  uint64_t frees;            /* CM_TRACE_FREE events (implicit frees included) */
  uint64_t unknown_frees;    /* free rows naming a pointer that was not live (dropped) */
  uint64_t alloc_failures;   /* `allocate failure` rows (dropped) */
  uint64_t duplicate_allocs; /* allocate rows naming a live pointer */
  uint64_t bad_lines;        /* malformed lines skipped (skip_bad_lines only) */
  uint64_t first_bad_line;   /* 1-based line of the first skipped line, 0 if none */
  char first_bad_message[160]; /* its message, e.g. "bad size 'abc'" */

  uint64_t peak_live_bytes;  /* exact peak of the sum of live requested bytes */
  uint64_t peak_live_event;  /* index of the event at which the peak was first reached */
  uint64_t peak_live_count;  /* most allocations live at once */
  uint64_t live_at_end;      /* allocations still live after the last event */
  uint64_t live_bytes_at_end;
  uint64_t total_alloc_bytes; /* sum of every allocation's size */
  uint64_t max_alloc_size;
  uint64_t duration_us;      /* time of the last event */

  /* The first `allocate failure` row: the recorded run's out-of-memory (a
   * snapshot's `oom` entries become such rows). Zero when none. */
  uint64_t first_failure_line;       /* its 1-based line */
  uint64_t first_failure_size;       /* the bytes it asked for */
  uint64_t first_failure_time_us;    /* its time (as the events' time_us) */
  uint64_t first_failure_live_bytes; /* live requested bytes of the trace then */

  /* The streams allocations were made on, in order of first use (owned by
   * the trace; all stream 0 when the trace has no Stream column; none when
   * it has no allocation). */
  cm_trace_stream_t *streams;
  size_t stream_count;
  /* The stream of every event, as an index in `streams` (count entries;
   * for a FREE the stream its allocation was made on, so memory goes back
   * to the pools it came from). NULL only when count is 0. */
  uint8_t *event_streams;
} cm_trace_t;

typedef struct cm_trace_parse_options {
  /* false (default): the first malformed line fails the parse with CM_EPARSE
   * and diag->line set. true: malformed lines are counted and skipped. */
  bool skip_bad_lines;
} cm_trace_parse_options_t;

/* Parse `len` bytes of CSV (need not be NUL-terminated; any bytes are
 * accepted: invalid input yields an error, never a crash). A first line whose
 * fields name the columns (`Action`, `Pointer`, `Size`, optional `Thread`,
 * `Time`, `Stream`, in any order, case-insensitive) is a header; without one
 * the RMM order is assumed. Blank lines are ignored; CRLF is accepted.
 * opts may be NULL (defaults).
 * Errors: CM_EPARSE (message like "bad size 'abc'", diag->line = the 1-based
 * line), CM_ENOMEM, CM_EOVERFLOW (more than 2^32-1 live allocations), CM_EINVAL.
 * Thread-safe. */
CM_API CM_NODISCARD int cm_trace_parse(const char *buf, size_t len,
                                       const cm_trace_parse_options_t *opts, cm_trace_t **out,
                                       cm_diag_t *diag);
/* Read the file at `path` and parse it. diag->file receives the path on
 * errors. Errors: as cm_trace_parse, plus CM_EIO (with strerror). */
CM_API CM_NODISCARD int cm_trace_load(const char *path, const cm_trace_parse_options_t *opts,
                                      cm_trace_t **out, cm_diag_t *diag);
/* Free a trace. NULL ok. */
CM_API void cm_trace_free(cm_trace_t *trace);

/* ---- PyTorch memory snapshots ------------------------------------------- */

/* A snapshot is the pickle written by torch.cuda.memory._dump_snapshot()
 * (recorded with torch.cuda.memory._record_memory_history()). It is read by
 * a restricted pickle reader that refuses every global and every object
 * construction, so a file can only yield plain data. Conversion rules (the
 * same as tools/torch_snapshot_to_csv.py):
 *  - `alloc` trace entries are allocations of the requested size;
 *    `free_completed` entries (or `free_requested` with free_on_requested)
 *    are frees; `oom` entries are `allocate failure` rows;
 *    segment events are the caching allocator's own traffic and are dropped;
 *  - memory live before recording began becomes allocations at time zero, in
 *    address order: the active blocks of the device's segments that the trace
 *    did not allocate, and pointers the trace frees without allocating them;
 *  - times are relative to the first trace entry. */

typedef struct cm_snapshot_options {
  int device;             /* device index; -1 = the first device with trace
                             entries (0 when none has) */
  bool free_on_requested; /* free at `free_requested` instead of `free_completed` */
  cm_trace_parse_options_t parse; /* for the converted rows */
} cm_snapshot_options_t;

typedef struct cm_snapshot_info {
  int device;                /* the device converted */
  int device_count;          /* devices named by the traces or the segments */
  bool has_history;          /* some device has trace entries */
  uint64_t trace_entries;    /* entries in that device's trace (all actions) */
  uint64_t preexisting;      /* allocations at time zero (live before recording) */
  uint64_t freed_unallocated; /* of which: freed by the trace without an alloc */
  uint64_t oom_entries;      /* `oom` entries */
  uint64_t segments;         /* that device's segments at dump */
  uint64_t reserved_bytes;   /* their total size: PyTorch's reserved bytes at dump */
  /* allocator_settings' PYTORCH_CUDA_ALLOC_CONF (PyTorch 2.4 and later), the
   * caching allocator's options when the snapshot was recorded ("" when
   * none were set); has_alloc_conf is false when the snapshot does not say. */
  bool has_alloc_conf;
  char alloc_conf[256];
} cm_snapshot_info_t;

/* The caching allocator's state when a snapshot's history begins, for
 * replaying the PyTorch model from it (cm_torch_replay_from): the device's
 * segments then (those at dump, with the history's segment_alloc /
 * segment_map entries taken out and its segment_free / segment_unmap
 * entries put back, last first) and the blocks live then (the snapshot's
 * preexisting allocations, in the order the converted trace allocates them
 * at time zero: its first block_count ALLOC events). */
typedef struct cm_snapshot_segment {
  uint64_t addr, size; /* PyTorch's address and total_size */
  uint64_t stream;
  bool small;          /* segment_type "small" (the pool of requests up to 1 MiB) */
  bool expandable;     /* is_expandable */
} cm_snapshot_segment_t;

typedef struct cm_snapshot_block {
  uint64_t addr;       /* PyTorch's address */
  uint64_t size;       /* the block's size when it is live at dump, else `requested` */
  uint64_t requested;  /* the requested size (the trace's) */
  uint64_t stream;
  bool size_known;     /* size is the block's own (from the segments at dump) */
} cm_snapshot_block_t;

typedef struct cm_snapshot_state {
  cm_snapshot_segment_t *segments; /* by address; owned */
  size_t segment_count, segment_cap;
  uint64_t reserved_bytes;         /* the segments' total */
  cm_snapshot_block_t *blocks;     /* owned */
  size_t block_count;
  uint64_t segment_events;         /* segment entries of the history undone */
  bool expandable;                 /* some segment is expandable */
} cm_snapshot_state_t;

/* Initialise options to the defaults (device -1, free_completed). */
CM_API void cm_snapshot_options_init(cm_snapshot_options_t *opts);
/* True when the bytes look like a pickle (protocol 2 or later), i.e. a
 * snapshot rather than a CSV trace. Thread-safe; never fails. */
CM_API bool cm_snapshot_detect(const void *buf, size_t len);
/* Convert a snapshot to RMM CSV text (header included) in *csv (malloc'd,
 * NUL-terminated; the caller frees it) of *csv_len bytes. info may be NULL.
 * Errors: CM_EPARSE (not a pickle, a refused opcode, not a memory snapshot,
 * a bad field), CM_ENOTFOUND (the requested device has no trace entries and
 * no live blocks, or the snapshot was recorded without history: the message
 * says which), CM_ENOMEM, CM_EINVAL. Thread-safe. */
CM_API CM_NODISCARD int cm_snapshot_to_csv(const void *buf, size_t len,
                                           const cm_snapshot_options_t *opts, char **csv,
                                           size_t *csv_len, cm_snapshot_info_t *info,
                                           cm_diag_t *diag);
/* The starting state of the snapshot's device (opts->device as for
 * cm_snapshot_to_csv) into *out (zeroed first; free with
 * cm_snapshot_state_free, also after a failure). The state and the trace
 * of cm_trace_parse_snapshot with the same options belong together.
 * Errors: as cm_snapshot_to_csv. Thread-safe. */
CM_API CM_NODISCARD int cm_snapshot_start_state(const void *buf, size_t len,
                                                const cm_snapshot_options_t *opts,
                                                cm_snapshot_state_t *out, cm_diag_t *diag);
/* Free the arrays of a state and zero it. NULL ok. */
CM_API void cm_snapshot_state_free(cm_snapshot_state_t *s);
/* Convert a snapshot and parse the rows into a trace (see cm_trace_parse).
 * Errors: as cm_snapshot_to_csv and cm_trace_parse. Thread-safe. */
CM_API CM_NODISCARD int cm_trace_parse_snapshot(const void *buf, size_t len,
                                                const cm_snapshot_options_t *opts,
                                                cm_trace_t **out, cm_snapshot_info_t *info,
                                                cm_diag_t *diag);
/* Read `path` ('-' = standard input) and load it as a trace: a snapshot when
 * cm_snapshot_detect says so (then *is_snapshot is true and info is filled),
 * else RMM CSV (a file named *.pickle or *.pkl that is not a protocol 2-5
 * pickle is CM_EPARSE, not read as CSV). snap_opts may be NULL (defaults, with parse options `opts`);
 * info and is_snapshot may be NULL. diag->file receives the path on errors.
 * A FIFO or pipe is read whole like standard input, the content deciding
 * between pickle and CSV (opening a FIFO waits for its writer, as cat
 * does); a directory, device or socket is CM_EIO ("not read: a character
 * device, not a trace file ...") without being opened.
 * Errors: as cm_trace_load and cm_trace_parse_snapshot. Thread-safe. */
CM_API CM_NODISCARD int cm_trace_load_any(const char *path, const cm_trace_parse_options_t *opts,
                                          const cm_snapshot_options_t *snap_opts,
                                          cm_trace_t **out, bool *is_snapshot,
                                          cm_snapshot_info_t *info, cm_diag_t *diag);

/* The stack frames of a snapshot's allocations (recorded with
 * _record_memory_history(stacks="python" or "all")), in the order of the
 * ALLOC events of the trace cm_trace_parse_snapshot builds from the same
 * bytes and options: alloc_frames[k] belongs to the k-th ALLOC event, as a
 * JSON array of indices into table_json's "frames" ({"frames":["file:line
 * name", ...]}, innermost frame first), or NULL (live before recording, or
 * recorded without a stack). The shape cm_replay_html_panel_t takes. */
typedef struct cm_snapshot_frames {
  char **alloc_frames; /* count entries, each malloc'd or NULL */
  size_t count;        /* 0 when the snapshot has no frames */
  char *table_json;    /* malloc'd; NULL when count is 0 */
} cm_snapshot_frames_t;
/* Collect the frames of a snapshot into *out (owned by the caller, freed with
 * cm_snapshot_frames_free; count 0 when it has none). Errors: as
 * cm_snapshot_to_csv (*out is then empty). Thread-safe. */
CM_API CM_NODISCARD int cm_snapshot_frames(const void *buf, size_t len,
                                           const cm_snapshot_options_t *opts,
                                           cm_snapshot_frames_t *out, cm_diag_t *diag);
/* Free what cm_snapshot_frames collected and empty *f. NULL ok. */
CM_API void cm_snapshot_frames_free(cm_snapshot_frames_t *f);

/* ---- replay ------------------------------------------------------------- */

/* What an observer sees after each replayed event (cm_replay_options_t.observe). */
typedef struct cm_replay_step {
  uint64_t index;                /* index of the event just replayed */
  const cm_trace_event_t *event; /* that event (borrowed from the trace) */
  cm_manager_t *manager;         /* the manager being replayed (borrowed) */
  /* ALLOC whose reserve succeeded: the new handle (borrowed, valid during the
   * call only; clone a binding to keep it). Empty (d == NULL) otherwise. */
  cm_handle_t handle;
  bool failed;         /* ALLOC whose reserve failed */
  uint64_t live_bytes; /* live requested bytes of the trace after the event */
} cm_replay_step_t;

/* One timeline point: the maxima over a run of consecutive events. */
typedef struct cm_replay_sample {
  uint64_t event;          /* index of the last event the sample covers (+1) */
  uint64_t live_bytes;     /* max live requested bytes (from the trace) in the run */
  uint64_t reserved_bytes; /* max bytes held from the storage in the run */
} cm_replay_sample_t;

typedef struct cm_replay_options {
  /* > 0: record a timeline of at most this many samples after the starting
   * sample at event 0 (so timeline_count <= timeline_points + 1), and a per-pool
   * snapshot of reserved bytes at the storage peak. This queries the storage
   * statistics after every event, so the measured time includes it: time a
   * separate run without it. 0 (default): no timeline. */
  size_t timeline_points;
  /* Called every `progress_every` events (0 = never) from the replay thread,
   * and once at the end with done == total. */
  void (*progress)(void *arg, uint64_t done, uint64_t total);
  void *progress_arg;
  uint64_t progress_every;
  /* Stop at the first failed reservation (the rest of the trace is not
   * replayed; `events` says how far it went). For searches such as
   * cm_replay_fit that only ask whether a trace fits. */
  bool stop_on_failure;
  /* Optional observer, called from the replay thread after every event (for a
   * FREE after the release). It may read the manager (reports, find,
   * get_storage) but must not reserve or release through it. The event loop's
   * measured time includes it. NULL (default): none. */
  void (*observe)(void *arg, const cm_replay_step_t *step);
  void *observe_arg;
  /* cm_torch_replay only: give every stream of the trace its own pools, as
   * PyTorch does (a free block is reused by its own stream only), and report
   * per stream. false (default): every event on one stream (the merged
   * view). cm_replay_run always replays through the one manager it is given;
   * cm_replay_run_streams always per stream. */
  bool per_stream;
} cm_replay_options_t;

/* One stream of a per-stream replay: its own pools' figures. */
typedef struct cm_replay_stream_result {
  uint64_t id;                      /* the stream's value in the trace */
  uint64_t allocs;                  /* reserve calls on it */
  uint64_t failed_allocs;           /* of which failed */
  uint64_t peak_live_bytes;         /* the trace's peak of bytes live on it */
  uint64_t peak_reserved_bytes;     /* the most its pools held from the device */
  uint64_t reserved_at_end;         /* what they held after the last event */
  uint64_t reserved_at_device_peak; /* what they held when the device total peaked */
} cm_replay_stream_result_t;

typedef struct cm_replay_result {
  uint64_t events;        /* events replayed */
  uint64_t allocs;        /* reserve calls */
  uint64_t frees;         /* handle releases */
  uint64_t failed_allocs; /* reserve calls that failed (their frees are skipped) */
  int first_failure;      /* status of the first failed reserve, 0 if none */
  uint64_t first_failure_size;  /* its requested size */
  char first_failure_message[512];
  uint64_t first_failure_event;    /* its index in trace->events */
  uint64_t first_failure_time_us;  /* its event's time_us */
  uint64_t first_failure_live_bytes;     /* requested bytes the replay held live then */
  uint64_t first_failure_reserved_bytes; /* device bytes the storage held then */

  uint64_t peak_live_bytes;       /* the trace's exact peak of live requested bytes */
  uint64_t peak_reserved_bytes;   /* storage bytes_held_peak over the replay */
  uint64_t manager_reserved_peak; /* cm_manager_reserved_peak after the replay */
  uint64_t reserved_at_end;       /* storage bytes_held after the last event */
  uint64_t device_allocs;         /* storage allocs + VM maps during the replay */
  uint64_t device_frees;          /* storage deallocs + VM unmaps during the replay */
  uint64_t device_maps;           /* of which VM maps */
  uint64_t device_unmaps;         /* of which VM unmaps */
  uint64_t device_time_ns;        /* time inside backend calls (alloc, free, map, unmap,
                                     flush) when the storage measures it
                                     (cm_storage_set_timing), else 0 */
  /* The storage's counters over the replay (differences; bytes_held,
   * bytes_held_peak and vm_reserved as at the end): driver calls by kind,
   * time by operation, errors and contract violations. */
  cm_storage_stats_t storage;
  uint64_t driver_calls;          /* every driver call of `storage`, all kinds together */

  uint64_t elapsed_ns; /* wall time of the event loop only */
  double ns_per_op;    /* elapsed_ns / (allocs + frees) */

  /* Pool reports after the last event (before live allocations are released),
   * dynamic pools in routing order; pool_reports[pool_count] is the persistent
   * pool. Owned by the result. */
  size_t pool_count;
  cm_pool_report_t *pool_reports;
  /* With a timeline: usage.bytes_reserved of every dynamic pool (and the
   * persistent one last) when the storage peak was first reached; else NULL. */
  uint64_t *pool_reserved_at_peak;

  cm_replay_sample_t *timeline; /* NULL without a timeline */
  size_t timeline_count;

  /* A per-stream replay (cm_replay_run_streams, cm_torch_replay with
   * opts->per_stream): one entry per stream of the trace, in its order
   * (owned by the result). Then peak_reserved_bytes, reserved_at_end and the
   * timeline are the device's total over every stream's pools. NULL and 0
   * for a replay through one set of pools (the merged view). */
  cm_replay_stream_result_t *streams;
  size_t stream_count;

  /* A per-stream replay (cm_replay_run_streams): the relocation totals
   * (cm_manager_relocate_totals) summed over every stream's manager; zeros
   * without cfg->relocate. Zeros for cm_replay_run, whose caller owns the
   * manager and asks it. */
  cm_relocate_stats_t relocation;
} cm_replay_result_t;

/* Replay `trace` through `m` from the calling thread: each ALLOC calls
 * cm_manager_reserve, each FREE releases the handle of its slot. Handles
 * still live after the last event are released before returning. A reserve
 * that fails is counted (the replay goes on). The manager should be fresh
 * (statistics are differences over the run, but peaks are the storage's).
 * `out` is overwritten (release a previous result first). opts may be NULL.
 * Errors: CM_EINVAL (NULL args), CM_ENOMEM (then out holds nothing to free).
 * The caller keeps ownership of the trace and the manager. */
CM_API CM_NODISCARD int cm_replay_run(const cm_trace_t *trace, cm_manager_t *m,
                                      const cm_replay_options_t *opts, cm_replay_result_t *out,
                                      cm_diag_t *diag);
/* Replay `trace` with one manager per stream of the trace (trace->streams),
 * all on `device`, as cubemem's runtime layer gives every stream its own
 * pools: each manager, configured by `cfg` (its name and logger used as
 * given), owns a share of the device that forwards every call to the
 * device's backend, so the streams draw on one capacity and address space
 * while each keeps its own pools and counters. An ALLOC reserves through its
 * stream's manager; a FREE releases the handle of its slot, which goes back
 * to the pools of the stream it was allocated on (PyTorch frees a block into
 * its allocating stream's pool, whatever stream the free is recorded on).
 * out->streams gets each stream's figures; peak_reserved_bytes is the peak
 * of the sum of the streams' bytes held, read after every event;
 * pool_reports are summed over the streams, pool by pool (peaks: sums of
 * each stream's peak); the storage counters are the sums over the shares
 * (call_ns: zero); out->relocation sums the managers' relocation totals
 * (with cfg->relocate, the shares copy through the device's backend, which
 * must then support copies for anything to move). opts->observe is called with the manager of the event's
 * stream. A trace with one stream gives one manager, as cm_replay_run on a
 * fresh manager over `device` would (the peak is read after each event
 * rather than inside calls). The managers are destroyed before returning;
 * `device` stays the caller's (no manager may own it) and must support what
 * cfg's pools need. Errors: CM_EINVAL (NULL args), cm_manager_create's,
 * CM_ENOMEM. Thread-safe for distinct devices and outputs. */
CM_API CM_NODISCARD int cm_replay_run_streams(const cm_trace_t *trace, cm_storage_t *device,
                                              const cm_manager_config_t *cfg,
                                              const cm_replay_options_t *opts,
                                              cm_replay_result_t *out, cm_diag_t *diag);
/* Free the arrays of a result and zero it. NULL ok. */
CM_API void cm_replay_result_free(cm_replay_result_t *r);

/* ---- fit: the smallest device a trace runs on ------------------------------ */

typedef struct cm_fit_options {
  /* Search grid in bytes (0 = 2 MiB): the result is a multiple of it. */
  uint64_t grid;
  /* Capacities above the result that are replayed to confirm it, spread
   * evenly up to the unconstrained peak (0 = 7). Fitting need not be monotone
   * in the capacity: a capacity that fails makes the search continue above
   * it, so every confirmed capacity fits. */
  unsigned confirmations;
  /* Simulated device granularity (0 = 2 MiB, as on CUDA). */
  uint64_t granularity;
  /* Called after each replay from the calling thread (may be NULL). */
  void (*progress)(void *arg, unsigned replays, uint64_t lo, uint64_t hi);
  void *progress_arg;
  /* Optional: resolve the manager configuration for a device of `capacity`
   * bytes before each replay on it (e.g. presets whose page sizes follow the
   * device), so that each probe is the replay a tool would run on that
   * device. It receives a copy of the caller's configuration and may change
   * its props and pools (pools must stay valid until the next call or the
   * end of the search); a non-zero return means the layout does not exist on
   * that device, which then counts as not fitting. NULL (default): the
   * configuration is used unchanged for every capacity. */
  int (*configure)(void *arg, uint64_t capacity, cm_manager_config_t *cfg, cm_diag_t *diag);
  void *configure_arg;
  /* The device of the unconstrained run: 0 (default) = an unlimited device;
   * else a device of this capacity (resolved by `configure`), whose run is
   * then the reference figure (unconstrained_peak). When the trace does not
   * fit there, capacities of twice, four times... as much are tried (up to
   * 1024 times) to bound the search. */
  uint64_t unconstrained_capacity;
  /* true: every probe replays with one manager per stream of the trace
   * (cm_replay_run_streams on the probed device), so that the answer is the
   * per-stream replay's at that capacity; false (default): one manager
   * (cm_replay_run). Traces with one stream replay the same either way. */
  bool per_stream;
  /* true: once the smallest device is found, replay once more on one grid
   * step less and keep that run's first failure in the result (below_*):
   * what keeps the trace off a smaller device. One more replay, run to the
   * end. false (default): not run. */
  bool explain_below;
} cm_fit_options_t;

typedef struct cm_fit_result {
  uint64_t fit_bytes;            /* smallest device memory with no failed reservation */
  uint64_t peak_live_bytes;      /* the trace's peak of live requested bytes */
  uint64_t unconstrained_peak;   /* peak reserved on an unlimited device */
  double ratio;                  /* fit_bytes / peak_live_bytes (0 when no live bytes) */
  unsigned replays;              /* replays the search ran */
  unsigned nonmonotone;          /* capacities above a passing one that failed */
  uint64_t first_nonmonotone;    /* the first such capacity, 0 if none */
  /* The unconstrained run: its device (0 = unlimited), its failed reserves
   * (non-zero only when the trace does not fit on a bounded device; the
   * search then went above it) and its storage counters (driver calls by
   * kind, for the driver-time model). */
  uint64_t unconstrained_capacity;
  uint64_t unconstrained_failed;
  cm_storage_stats_t unconstrained_storage;
  /* With opts->explain_below, the replay on fit_bytes - grid (below_capacity;
   * 0 when it was not run: the option is off, or fit_bytes is one grid step)
   * and its first failed reservation: status (0 when that run failed none:
   * fitting is not monotone there), event index, requested size, live and
   * reserved bytes then, and the error's message, which for cubemem's arena
   * says where the held memory that is not live lies. */
  uint64_t below_capacity;
  int below_status;
  uint64_t below_event, below_size, below_live_bytes, below_reserved_bytes, below_failed;
  char below_message[512];
} cm_fit_result_t;

/* Fill *o with the defaults. */
CM_API void cm_fit_options_init(cm_fit_options_t *o);

/* The smallest device memory (on the simulated device, which enforces the
 * CUDA driver's rules and refuses to go over its capacity) on which `trace`
 * replays with no failed reservation, through managers configured by `cfg`
 * (its pools, props and persistent-memory mode; its name and logger are
 * used as given; without opts->configure cfg->props is kept fixed whatever
 * the capacity, with it each capacity gets its own configuration). Binary
 * search on the grid between the trace's peak live bytes and the
 * unconstrained peak, then confirmations above (see cm_fit_options_t); the
 * result is always a capacity that was replayed and fitted. opts may be
 * NULL. Errors:
 * CM_EINVAL (NULL args), the first failure's status when the trace does not replay even on an
 * unlimited device (e.g. a request no pool accepts; diag says why), the
 * manager's creation errors, CM_ENOMEM. Thread-safe for distinct outputs. */
CM_API CM_NODISCARD int cm_replay_fit(const cm_trace_t *trace, const cm_manager_config_t *cfg,
                                      const cm_fit_options_t *opts, cm_fit_result_t *out,
                                      cm_diag_t *diag);

/* ---- SVG rendering -------------------------------------------------------- */

/* Receives the SVG text in pieces; returns 0, or non-zero to stop. */
typedef int (*cm_replay_write_fn)(void *arg, const char *data, size_t len);

/* One replay to draw: a label (the layout) and its result (with a timeline). */
typedef struct cm_replay_series {
  const char *label;
  const cm_replay_result_t *result;
} cm_replay_series_t;

/* One panel per trace: a timeline chart of live bytes and of every series'
 * reserved bytes (x: events, y: bytes with units), then a stacked bar per
 * series of the per-pool reserved bytes at the storage peak. */
typedef struct cm_replay_panel {
  const char *title; /* the trace name */
  const cm_replay_series_t *series;
  size_t series_count;
} cm_replay_panel_t;

/* Render the panels as one standalone SVG document through `write`.
 * Series without a timeline are drawn as their peak only.
 * Errors: CM_EINVAL (NULL args), CM_EIO (write returned non-zero), CM_ENOMEM.
 * Thread-safe. */
CM_API CM_NODISCARD int cm_replay_svg(const cm_replay_panel_t *panels, size_t panel_count,
                                      cm_replay_write_fn write, void *arg);

/* ---- recording a replay for the HTML report -------------------------------- */

/* A recorder is an observer (cm_replay_recorder_observe) that keeps what the
 * HTML report draws for one (trace, layout) replay:
 *  - a timeline of at most `points` samples (+ one at event 0): per run of
 *    events the time, the maxima of live and reserved (storage bytes_held)
 *    bytes, and each pool's reserved, in-use and padding bytes at the run's
 *    reserved maximum;
 *  - the same per-pool breakdown at the storage peak;
 *  - every allocation: alloc and free event and time, requested size, pool,
 *    the slice's place (storage range and offset, from cm_manager_get_storage)
 *    and its padding (the growth of its pool's padding bytes).
 * It reads the manager after every event, so replay with it only for the
 * report, never for timing.
 *
 * Ownership: create with cm_replay_recorder_create, pass the recorder as
 * observe_arg with observe = cm_replay_recorder_observe to ONE cm_replay_run
 * of the same trace, free with cm_replay_recorder_free. The recorder copies
 * what it needs; the trace may be freed after the run.
 * Thread-safety: one replay thread at a time; read-only afterwards. */
typedef struct cm_replay_recorder cm_replay_recorder_t;

/* Create a recorder for `trace` (timeline of at most `points` samples; 0 =
 * 2000). Errors: CM_EINVAL (NULL args), CM_ENOMEM. */
CM_API CM_NODISCARD int cm_replay_recorder_create(const cm_trace_t *trace, size_t points,
                                                  cm_replay_recorder_t **out, cm_diag_t *diag);
/* The observer function (arg = the recorder). Never fails: an allocation
 * failure inside marks the recorder (cm_replay_recorder_status). */
CM_API void cm_replay_recorder_observe(void *recorder, const cm_replay_step_t *step);
/* CM_OK, or CM_ENOMEM when the recorder ran out of memory while observing
 * (its data is then incomplete and the report refuses it). NULL: CM_EINVAL. */
CM_API int cm_replay_recorder_status(const cm_replay_recorder_t *r);
/* Free a recorder. NULL ok. */
CM_API void cm_replay_recorder_free(cm_replay_recorder_t *r);

/* ---- HTML report ------------------------------------------------------------ */

/* One replay in the report: the layout, its result, its recording (NULL: the
 * layout appears in the summary table only) and the JSON object `--json`
 * prints for it (one complete object; NULL: a minimal one is made from the
 * result). Optional members of that object the page shows when present:
 * `fit_bytes` (smallest device), `driver_calls` (an object of counts by
 * kind), `torch_reserved_bytes` (PyTorch's recorded reserved bytes). */
typedef struct cm_replay_html_series {
  const char *label;
  const cm_replay_result_t *result;
  const cm_replay_recorder_t *recorder;
  const char *json;
} cm_replay_html_series_t;

/* One trace: its name, its replays (same trace, one per layout), an
 * optional JSON object of trace-level extras (written as the trace's "extra",
 * e.g. {"torch_reserved_bytes":N,"frames":["file:line fn", ...]}; NULL:
 * none) and optional stack frames per allocation: alloc_frames[k] is the
 * JSON array of the k-th allocation of the trace (ALLOC order), of strings or
 * of indices into extra's "frames", or NULL; alloc_frames_count entries
 * (0: no frames). The page shows them in the allocation's hover card. */
typedef struct cm_replay_html_panel {
  const char *title;
  const cm_replay_html_series_t *series;
  size_t series_count;
  const char *extra_json;
  const char *const *alloc_frames;
  size_t alloc_frames_count;
} cm_replay_html_panel_t;

typedef struct cm_replay_html_options {
  /* Most allocations drawn per trace in the address-space chart; when a trace
   * has more, the smallest are left out (the page says how many and below
   * which size). 0 = 100000 (a report of three layouts stays near 10 MB). */
  size_t max_allocations;
} cm_replay_html_options_t;

/* Write one self-contained HTML page (the template built into the library,
 * no external resources) through `write`, with the report's data as JSON in
 * <script type="application/json" id="cubemem-data"> (every '<' inside it
 * is written as \u003c, so no text can close the script element). The JSON
 * strings given in series/panels must be valid JSON objects. opts may be NULL.
 * Errors: CM_EINVAL (NULL args, a recorder that failed), CM_EIO (write
 * returned non-zero), CM_ENOMEM. Thread-safe. */
CM_API CM_NODISCARD int cm_replay_html(const cm_replay_html_panel_t *panels, size_t panel_count,
                                       const cm_replay_html_options_t *opts,
                                       cm_replay_write_fn write, void *arg);

#ifdef __cplusplus
}
#endif
#endif
