/* cmd_replay.h - what cmd_replay.c (options, runs) and cmd_replay_report.c
 * (the text, JSON, SVG and HTML reports) share. Internal to the tool. */
#ifndef CM_CLI_CMD_REPLAY_H
#define CM_CLI_CMD_REPLAY_H

#include "cli.h"
#include "cli_torch.h"

#define MAX_LAYOUTS 16

/* One --pools layout, parsed against the device. */
typedef struct layout {
  const char *text; /* as given on the command line */
  cm_pool_options_t pools[CM_MAX_DYNAMIC_POOLS];
  size_t count;
  bool torch;                    /* a PyTorch layout (cli_torch.h): torch_opts, no pools */
  cm_torch_options_t torch_opts;
} layout_t;

/* The command line. */
typedef struct opts {
  uint64_t capacity;
  uint64_t alignment; /* 0 = the device's */
  const char *device;
  const char *layouts[MAX_LAYOUTS];
  size_t layout_count;
  const char *config_path;
  const char *persistent_memory;
  unsigned repeat;
  unsigned runs;              /* --runs: replays of the trace through one manager (1) */
  bool runs_given;            /* --runs was given: report every run */
  cm_driver_costs_t costs;    /* --driver-costs (default: the a100 set) */
  bool json, skip_bad, progress;
  bool no_config;         /* --no-config: no discovery */
  int snapshot_device;    /* --snapshot-device, -1 = first with history */
  bool free_on_requested; /* --snapshot-free-on requested */
  char config_used[600];  /* the configuration the report names */
  const char *svg;
  const char *html; /* --html FILE */
  bool fit;         /* --fit: also search the smallest device per layout */
  bool relocate;    /* --relocate: managers relocate live data (handle-based runtime) */
  double copy_gbps; /* --copy-bandwidth: GB/s of device memory for the copy-time model */
  const char *torch_conf; /* --torch-conf: PYTORCH_CUDA_ALLOC_CONF of the PyTorch layouts */
  bool merge_streams;     /* --merge-streams: every stream through one set of pools */
  bool snapshot_state;    /* --snapshot-start state: the PyTorch layouts start from the
                             snapshot's segments and live blocks */
  const char **traces;
  size_t trace_count;
} opts_t;

/* The outcome of one (trace, layout). */
typedef struct run {
  cm_replay_result_t res; /* statistics; timeline when --svg */
  uint64_t median_ns;
  double ns_per_op;
  cm_replay_recorder_t *rec; /* with --html: what the report draws */
  uint64_t fit_bytes;        /* with --fit: the smallest device (0: not found) */
  char *json;                /* with --html: the --json object of this run */
  /* With --runs: each run's storage counters over the run (its events and
   * the release of what the trace left live) and its failed reserves. */
  cm_storage_stats_t *run_stats;
  uint64_t *run_failed;
  unsigned nruns;
  /* --snapshot-start state, PyTorch layouts: the starting state was used and
   * this many of its blocks found no free space where PyTorch had them */
  bool from_state;
  uint64_t start_unplaced;
  cm_relocate_stats_t reloc; /* with --relocate: what the replay's manager relocated */
  struct cli_reloc_marks *marks; /* with --relocate --html: when (cli_relocate.c) */
} run_t;

/* The events at which a replay relocated (cli_relocate.c): each relocating
 * step's event count, time, moves and bytes copied. */
typedef struct cli_reloc_marks {
  cm_replay_recorder_t *rec; /* the report's recorder, fed too (may be NULL) */
  uint64_t moves, bytes;     /* the manager's totals at the last step */
  uint64_t (*v)[4];
  size_t n, cap;
} cli_reloc_marks_t;
/* A cm_replay_options_t observer (arg: a cli_reloc_marks_t). */
void cli_reloc_observe(void *arg, const cm_replay_step_t *step);
/* ,"events":[[event,time_us,moves,bytes],...] */
void cli_reloc_marks_json(FILE *f, const cli_reloc_marks_t *m);
void cli_reloc_marks_free(cli_reloc_marks_t *m); /* NULL ok */

/* The modelled time of relocation copies: each byte copied is read once and
 * written once, 2 x bytes of memory traffic at `gbps` GB/s. */
static inline double cli_copy_time_ns(uint64_t bytes, double gbps) {
  return gbps > 0 ? 2.0 * (double)bytes / gbps : 0.0;
}

/* What every run of the command shares: options, device, configuration. */
typedef struct env {
  const opts_t *o;
  cm_device_props_t props;
  uint64_t capacity;
  const cm_config_t *cfg;
  cm_logger_t *logger;
  const cli_trace_info_t *tinfo; /* the trace being reported */
  char device_name[256];         /* a real device's name ("llvmpipe (LLVM ...)"), or "" */
  const cm_snapshot_state_t *state; /* --snapshot-start state on a snapshot, else NULL */
} env_t;

/* --snapshot-start state: the starting state of the snapshot at `path`
 * (read again, with o's snapshot options) into *out. 0, or 1 with a message
 * on stderr (out then holds nothing to free). */
int cli_snapshot_state_load(const char *cmd, const char *path, const opts_t *o,
                            cm_snapshot_state_t *out);

/* The text report of one trace: one column per layout (n runs). */
void cli_replay_print_text(const char *tname, const cm_trace_t *t, const layout_t *lays,
                           const run_t *runs, size_t n, const env_t *env);
/* One --json object (and a newline) for a run of trace tname under lay. */
void cli_replay_print_json(FILE *f, const char *tname, const layout_t *lay, const cm_trace_t *t,
                           const run_t *run, const env_t *env);
/* The --json object of a run as a string (malloc'd, no newline), or NULL. */
char *cli_replay_json_object(const char *tname, const layout_t *lay, const cm_trace_t *t,
                             const run_t *run, const env_t *env);
/* --svg: write every trace's panel to path. Returns the exit status. */
int cli_replay_write_svg(const char *path, const cm_replay_panel_t *panels, size_t n);
/* --html: one page for every trace and layout, with the stack frames of the
 * snapshots among the traces (read again with o's snapshot options; a
 * snapshot that cannot be read again is shown without). Returns the exit
 * status. */
int cli_replay_write_html(const char *path, const char *const *traces, size_t nt,
                          const layout_t *lays, const run_t *runs, size_t nl, const opts_t *o);

#endif
