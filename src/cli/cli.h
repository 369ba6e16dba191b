/* cli.h - subcommands of the `cubemem` command-line tool. Each returns the
 * process exit code: 0 ok, 1 failure (message on stderr), 2 usage error,
 * 3 (replay, plan) a reservation failed or the device refused a call.
 *
 * The second half declares the helpers the subcommands share (cli_util.c):
 * the unit grammar, "did you mean", the --pools checker, byte formatting,
 * configuration discovery and trace loading. They print their messages on
 * stderr prefixed with "cubemem CMD:" and return an exit code (0, 1 or 2)
 * unless said otherwise. They are not thread-safe (they print) and keep no
 * state between calls. */
#ifndef CM_CLI_H
#define CM_CLI_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/units.h"
#include "cubemem/config.h"
#include "cubemem/costs.h"
#include "cubemem/cubemem.h"
#include "cubemem/replay.h"

int cm_cli_replay(int argc, char **argv);       /* cmd_replay.c */
int cm_cli_plan(int argc, char **argv);         /* cmd_plan.c */
int cm_cli_check_config(int argc, char **argv); /* cmd_config.c */
int cm_cli_toml2json(int argc, char **argv);    /* cmd_toml.c */
int cm_cli_demo(int argc, char **argv);         /* cmd_demo.c */
int cm_cli_fit(int argc, char **argv);          /* cmd_fit.c */

/* ---- the unit grammar (one for every size on the command line) ---------------- */

/* The grammar in one line, for --help texts. */
#define CLI_SIZE_HELP                                                                  \
  "SIZE is a number with an optional unit: B; KiB, MiB, GiB, TiB (powers of 1024);\n" \
  "KB, MB, GB, TB (powers of 1000); case-insensitive, a space is allowed, fractions\n" \
  "must give whole bytes (1.5GiB). A bare K/M/G/T is refused as ambiguous.\n"
#define CLI_SIZE_EXAMPLES CM__SIZE_EXAMPLES /* base/units.h */

/* Parse SIZE into *out. Returns 0, or -1 with the reason in why (may be NULL). */
int cli_parse_size(const char *s, uint64_t *out, char *why, size_t cap);
/* A size option: prints "cubemem CMD: bad OPT 'VAL': reason (examples)" and
 * returns 2 on a bad value (or zero when !allow_zero); 0 and *out otherwise. */
int cli_size_option(const char *cmd, const char *opt, const char *val, bool allow_zero,
                    uint64_t *out);
/* --alignment: a size that is a power of two. */
int cli_alignment_option(const char *cmd, const char *val, uint64_t *out);
/* --device-memory: at least 4096 bytes; 0 is refused with the reason. */
int cli_device_memory_option(const char *cmd, const char *val, uint64_t *out);

/* ---- suggestions ------------------------------------------------------------------ */

/* The candidate closest to word (case-insensitive edit distance, prefixes
 * count as close), or NULL when none is close. Pure. */
const char *cli_suggest(const char *word, const char *const *cands, size_t n);
/* Print "unknown option '--josn'; did you mean '--json'?" for arg (a
 * trailing =VALUE is ignored) and return 2. */
int cli_unknown_option(const char *cmd, const char *arg, const char *const *options, size_t n);

/* ---- --pools -------------------------------------------------------------------------- */

/* Rewrite internal field names in a cm_pools_* message (`max_pool_size`) to
 * the option names of --pools (cap=). In place. */
void cli_pool_message(char *msg, size_t cap);
/* cm_pools_parse (the one parser of the layout language, with its
 * suggestions and size grammar); on failure prints "cubemem CMD: --pools
 * 'TEXT': why" and returns 2 (1 when out of memory); 0 on success. */
int cli_parse_layout(const char *cmd, const char *text, cm_device_props_t props,
                     cm_pool_options_t *pools, size_t cap, size_t *count);

/* ---- formatting (the same units for the same numbers everywhere) ---------------- */

/* Binary units for configured sizes: "80 GiB", "1.50 MiB", "4096 B". */
void cli_fmt_iec(uint64_t b, char *buf, size_t cap);
/* 1234567 -> "1,234,567" */
void cli_fmt_grouped(uint64_t v, char *buf, size_t cap);
/* Write s as a JSON string (quotes, escapes) to f. */
void cli_json_string(FILE *f, const char *s);
/* A device capacity: "80 GiB (85.90 GB)", or decimal only when not a whole KiB. */
void cli_fmt_device(uint64_t b, char *buf, size_t cap);
/* Measured bytes (peaks, reserved) are cm_format_bytes: "1.18 GB". */

/* The two trace lines of every report ("N events: ...", "peak live ..."),
 * plus a line when the trace has nothing to replay. */
void cli_print_trace_summary(FILE *f, const cm_trace_t *t);
/* The same, saying whether the streams are replayed with their own pools
 * (per_stream) or merged into one set of pools. */
void cli_print_trace_summary_streams(FILE *f, const cm_trace_t *t, bool per_stream);
/* "out of memory in the recorded run: N allocations failed; the first asked
 * for SIZE (B bytes) at T s with L live" for a trace with alloc_failures. */
void cli_recorded_oom(const cm_trace_t *t, char *buf, size_t cap);
/* A snapshot's recorded PYTORCH_CUDA_ALLOC_CONF (allocator_settings) for the
 * reports: the text, "none set (the defaults)" or "not recorded (...)". */
void cli_alloc_conf_text(const cm_snapshot_info_t *s, char *buf, size_t cap);
/* "device sim, 80 GiB (85.90 GB), max page 20 GiB, alignment 512[, extra]" */
void cli_print_device(FILE *f, const char *device, uint64_t capacity, cm_device_props_t props,
                      const char *extra);

/* ---- configuration ------------------------------------------------------------------ */

/* Load the configuration into cfg (initialised by the caller): the file at
 * `path` when given (burn.toml / Burn.toml through [cubecl]), else - unless
 * no_config - discovered from the current directory upward as check-config
 * does. `used` receives what the report shows ("./cubecl.toml",
 * "burn.toml [cubecl]", "none (defaults)"). Errors name the file and
 * position once. Returns 0 or 1. */
int cli_config_load(const char *cmd, const char *path, bool no_config, cm_config_t *cfg,
                    char *used, size_t used_cap);
/* Print the warnings of cm_config_lint_file for the file cfg was loaded from
 * ("PREFIXwarning: file:line:col: ..."); returns their number. */
size_t cli_config_warnings(const char *prefix, const cm_config_t *cfg);
/* Discovery skips a burn.toml / Burn.toml without a [cubecl] table; print
 * the warnings of those files (a top-level [memory]: write [cubecl.memory])
 * in the directories searched from `start` (NULL: the current directory)
 * upward, stopping at the directory of the file cfg was loaded from (cfg
 * may be NULL: up to /). Returns their number. */
size_t cli_burn_warnings(const char *prefix, const char *start, const cm_config_t *cfg);
/* Print "PREFIXfile:line:col: message" naming the location once, whether or
 * not d->message already starts with it. */
void cli_print_located(FILE *f, const char *prefix, const char *path, const cm_diag_t *d);

/* ---- output files ----------------------------------------------------------------------- */

/* Check, before any work, that the file `path` given to option `opt` can be
 * written: an existing file must be writable and not a directory, a new
 * file's directory must exist and be writable. Creates nothing. Prints
 * "cubemem CMD: OPT PATH: why" and returns 1 (2 for an empty name); 0 when
 * the file can be written. */
int cli_output_check(const char *cmd, const char *opt, const char *path);

/* ---- traces --------------------------------------------------------------------------- */

typedef struct cli_trace_options {
  bool skip_bad;          /* --skip-bad-lines */
  int snapshot_device;    /* --snapshot-device, -1 = first with history */
  bool free_on_requested; /* --snapshot-free-on requested */
} cli_trace_options_t;

typedef struct cli_trace_info {
  bool is_snapshot;
  cm_snapshot_info_t snap; /* when is_snapshot */
} cli_trace_info_t;

/* What the file at `path` looks like when its first 64 KiB show it is not a
 * trace (cli_sniff.c): a PNG, gzip/zip/xz/... data, an ELF binary, a PDF,
 * NUL or other binary bytes, a pickle whose top-level object is not a dict.
 * Returns 1 with the description in what ("a PNG image"), 0 when it may be
 * a trace (or cannot be opened, or is "-": the reader reports). Reads at
 * most 64 KiB into a static buffer: not thread-safe. Prints nothing. */
int cli_sniff_trace(const char *path, char *what, size_t cap);

/* Load a CSV trace or a PyTorch snapshot (detected by content) and print its
 * warnings (skipped lines, unknown frees, allocation failures, pre-existing
 * memory, an empty trace) on stderr. o and info may be NULL. Returns 0 or 1
 * (the error printed as "PATH[:LINE]: message"). */
int cli_trace_load(const char *cmd, const char *path, const cli_trace_options_t *o,
                   cm_trace_t **out, cli_trace_info_t *info);

/* ---- the driver-time model (cli_costs.c) ---------------------------------------------- */

/* --driver-costs a100 | fast | FILE into *out; prints "cubemem CMD:
 * --driver-costs ...: why" (file, line) and returns 2 on a bad value. */
int cli_driver_costs_option(const char *cmd, const char *val, cm_driver_costs_t *out);
/* Write "driver_time_model":{"costs":NAME,"total_ns":N,"by_kind":{...},
 * "us_per_call":{...}} (no leading comma) for the calls counted in *s; with
 * `measured`, also "measured_ns" (the time the backend measured, every kind
 * together). */
void cli_driver_time_json(FILE *f, const cm_driver_costs_t *c, const cm_storage_stats_t *s,
                          bool measured);
/* "12.345 ms" (or "1.234 s") for ns into buf. */
void cli_fmt_ms(uint64_t ns, char *buf, size_t cap);

/* ---- fit: each probe is the replay of `replay --device-memory C` (cli_fit.c) ---------- */

/* A --pools layout to resolve for every probed capacity. */
typedef struct cli_fit_layout {
  const char *text;  /* the --pools text */
  uint64_t alignment; /* --alignment, 0 = 512 */
  cm_pool_options_t pools[CM_MAX_DYNAMIC_POOLS]; /* the last capacity's pools */
} cli_fit_layout_t;
/* cm_fit_options_t.configure for a cli_fit_layout_t (arg): props and pools
 * as `replay --device-memory capacity` resolves them (max page = capacity /
 * 4). Prints nothing; CM_EINVAL with the reason when the layout does not
 * exist on that device. */
int cli_fit_configure(void *arg, uint64_t capacity, cm_manager_config_t *cfg, cm_diag_t *diag);

/* ---- fit's "fits on": a list of GPUs and the memory each reports (cli_gpus.c) -------- */

#define CLI_MAX_GPUS 64
/* What fit keeps back from each GPU for the CUDA context and libraries
 * (cuBLAS/cuDNN workspaces) unless --reserve says otherwise. */
#define CLI_DEFAULT_RESERVE (500ull << 20)
typedef struct cli_gpu {
  char name[48];
  uint64_t bytes; /* the memory the card reports (cudaMemGetInfo's total) */
} cli_gpu_t;
typedef struct cli_gpu_list {
  cli_gpu_t gpu[CLI_MAX_GPUS];
  size_t count;
} cli_gpu_list_t;
/* The built-in list (T4 ... B200, docs/fit.md gives the figures). Pure. */
void cli_gpus_builtin(cli_gpu_list_t *l);
/* --gpus VAL: a file of NAME=SIZE entries (one a line or comma-separated,
 * '#' comments) when VAL names a regular file, else the list itself
 * ("T4=16GB,L4=24GB"). Replaces *l. 0, 1 (out of memory) or 2 (message). */
int cli_gpus_option(const char *cmd, const char *val, cli_gpu_list_t *l);
/* Order the GPUs of l by memory (ascending, stable) into order[l->count]
 * and set fits[i] for order[i] when `needs` bytes fit in it; returns how
 * many fit. Pure. */
size_t cli_gpus_fits(const cli_gpu_list_t *l, uint64_t needs, size_t *order, bool *fits);

#endif
