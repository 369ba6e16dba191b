/*
 * cmd_replay.c - `cubemem replay TRACE...`: replay allocation traces (RMM CSV)
 * through the memory manager and report what it reserved.
 *
 * Flow. Options are parsed once; every --pools layout is parsed with
 * cm_pools_parse against the device properties (max page = capacity / 4,
 * alignment 512 unless --alignment). Each trace is parsed once
 * (cm_trace_load); then for each layout it is replayed on a fresh storage and
 * manager per run: with --svg or --html one instrumented run records the
 * timeline and the per-pool snapshot at the peak (with --html also through a
 * cm_replay_recorder_t observer: per-pool breakdown over time, every
 * allocation's place), then --repeat timed runs give the median time.
 * Statistics are deterministic, so they are taken from one run.
 *
 * Device hook: make_storage() is the ONE place that creates the storage for a
 * `--device` name (and may adjust the device capacity from the real device).
 * Add a backend there.
 *
 * Output (written by cmd_replay_report.c): a side-by-side text report per
 * trace (one column per layout) with a per-pool table per layout, or with
 * --json one JSON object per (trace, layout) line; --html writes one page for
 * every trace and layout (cm_replay_html) embedding those same JSON objects.
 * A progress line goes to stderr for long replays when stderr is a
 * terminal. Exit codes: 0 ok, 1 a trace, the SVG or the HTML could not be
 * read / written or a run failed, 2 usage errors, 3 a reservation failed (the
 * trace does not fit) or the device refused a call.
 *
 * Exports cm_cli_replay (cli.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "cmd_replay.h"
#include "cubemem/config.h"
#include "cubemem/cuda.h"
#include "cubemem/cubemem.h"
#include "cubemem/replay.h"
#include "cubemem/vulkan.h"

#define TIMELINE_POINTS 2000

static void usage(FILE *out) {
  fprintf(out,
          "usage: cubemem replay [options] TRACE...\n"
          "\n"
          "Replay allocation logs in RAPIDS RMM's CSV layout\n"
          "(Thread,Time,Action,Pointer,Size,Stream) or PyTorch memory snapshots\n"
          "(torch.cuda.memory._dump_snapshot pickles, detected by content) through the\n"
          "memory manager. TRACE may be '-' for standard input.\n"
          "\n"
          "options:\n"
          "  --device-memory SIZE   simulated device capacity (default 80GiB); presets use\n"
          "                         max page = SIZE / 4 and alignment 512, as on CUDA\n"
          "  --alignment N          pool alignment in bytes, a power of two (default 512)\n"
          "  --pools LAYOUT         default | subslices | exclusive-pages | adaptive | an\n"
          "                         explicit list,\n"
          "                         e.g. 'sliced:page=8MiB,max-slice=2MiB;exclusive:max=128MiB,\n"
          "                         period=5000;direct'; or PyTorch's caching allocator:\n"
          "                         pytorch | pytorch-expandable[:CONF]. Repeat to compare.\n"
          "  --torch-conf CONF      PYTORCH_CUDA_ALLOC_CONF for the PyTorch layouts, e.g.\n"
          "                         'max_split_size_mb:128,roundup_power2_divisions:4'\n"
          "  --config PATH          the configuration ([memory] of a cubecl.toml, [cubecl.memory]\n"
          "                         of a burn.toml); default: cubecl.toml / burn.toml found\n"
          "                         from the current directory upward, as check-config does\n"
          "  --no-config            use no configuration file (the defaults)\n"
          "  --persistent-memory M  enabled | size-match | disabled | enforced\n"
          "  --repeat N             replay N times (fresh manager each), report the median time\n"
          "  --runs N               also replay the trace N times through ONE manager and\n"
          "                         device (what the trace left live is freed between runs,\n"
          "                         like a second epoch) and report each run's driver calls\n"
          "                         and modelled driver time (default 1)\n"
          "  --relocate             model a handle-based runtime: the managers relocate live\n"
          "                         data (docs/relocation.md); reports moves, bytes copied\n"
          "                         and the modelled copy time\n"
          "  --copy-bandwidth GBPS  device memory bandwidth for that copy time, in GB/s\n"
          "                         (default 2039, an A100 80GB; H100 SXM: 3350); a copy of\n"
          "                         N bytes moves 2N bytes (read and write)\n"
          "  --driver-costs C       the driver-time model: a100 (default), fast, or a TOML\n"
          "                         file with a [driver_costs] table (see docs/replay.md)\n"
          "  --json                 one JSON object per (trace, layout) line\n"
          "  --svg FILE             write a timeline of live and reserved bytes and a per-pool\n"
          "                         breakdown\n"
          "  --fit                  also find the smallest device each layout fits on (as\n"
          "                         'cubemem fit'; shown in the report, JSON and HTML)\n"
          "  --html FILE            write an interactive, self-contained HTML report\n"
          "                         (timeline, per-pool breakdown, address space, summary)\n"
          "  --skip-bad-lines       skip (and count) malformed lines instead of stopping\n"
          "  --device NAME          storage backend: sim (default), cuda (allocator from\n"
          "                         [memory.cuda] in --config), cuda:sync or cuda:async,\n"
          "                         vulkan or vulkan:N (physical device N; CM_VULKAN_VALIDATION=1\n"
          "                         enables the validation layer and fails on its messages)\n"
          "  --snapshot-device N    the device of a PyTorch snapshot to replay (default: the\n"
          "                         first with trace entries)\n"
          "  --snapshot-free-on E   completed (default) | requested: the snapshot entry that\n"
          "                         frees a block\n"
          "  --snapshot-start S     empty (default) | state: the PyTorch layouts replay a\n"
          "                         snapshot from PyTorch's own segments and live blocks when\n"
          "                         its history begins (compare 'reserved at end' with\n"
          "                         PyTorch's reserved at dump; see docs/replay.md)\n"
          "  --merge-streams        replay every stream through one set of pools (default:\n"
          "                         a trace with several streams gives each stream its own\n"
          "                         pools on the one device, and is reported per stream)\n"
          "  --no-progress          never print the progress line\n"
          "\n" CLI_SIZE_HELP);
}

/* ---- device hook ------------------------------------------------------------ */

/* Create the storage for `device` (the --device value). `*capacity` is the
 * device memory used for the presets and the simulated capacity; a real
 * backend may replace it with the device's total memory. This is the single
 * place to add a backend (e.g. "cuda" through cubemem/cuda.h). A CUDA device
 * is opened once, so one primary context serves the whole run, and closed at
 * exit. */
static cm_cuda_device_t *g_cuda_device;
static void close_cuda_device(void) { cm_cuda_device_close(g_cuda_device); }

static int make_storage(const char *device, uint64_t *capacity, cm_cuda_allocator_t cuda_default,
                        cm_storage_t **out, cm_diag_t *diag) {
  if (!strcmp(device, "sim")) {
    int rc = cm_storage_sim_create(*capacity, true, 0, out);
    if (rc && diag) snprintf(diag->message, sizeof diag->message, "cannot create the simulated device: %s", cm_strerror(rc));
    return rc;
  }
  if (!strcmp(device, "cuda") || !strncmp(device, "cuda:", 5)) {
    cm_cuda_allocator_t kind = cuda_default;
    if (device[4] == ':' && cm_cuda_allocator_parse(device + 5, &kind) != CM_OK) {
      if (diag)
        snprintf(diag->message, sizeof diag->message,
                 "unknown CUDA allocator '%s' (use cuda, cuda:sync or cuda:async)", device + 5);
      return CM_EINVAL;
    }
    if (!g_cuda_device) {
      int rc = cm_cuda_device_open_default(&g_cuda_device, diag);
      if (rc != CM_OK) return rc;
      atexit(close_cuda_device);
    }
    int rc = cm_cuda_storage_create(g_cuda_device, NULL, kind, out, diag);
    if (rc == CM_OK) {
      *capacity = cm_cuda_device_total_memory(g_cuda_device);
      cm_storage_set_timing(*out, true); /* report the time spent in driver calls */
    }
    return rc;
  }
  if (!strcmp(device, "vulkan") || !strncmp(device, "vulkan:", 7)) {
    char *end = NULL;
    long index = device[6] == ':' ? strtol(device + 7, &end, 10) : -1;
    if (device[6] == ':' && (end == device + 7 || *end || index < 0 || index > 1024)) {
      if (diag)
        snprintf(diag->message, sizeof diag->message,
                 "bad Vulkan device '%s' (use vulkan or vulkan:N, N a device index)", device + 7);
      return CM_EINVAL;
    }
    int rc = cm_vulkan_storage_open_default((int)index, out, NULL, diag);
    uint64_t total = 0;
    if (rc == CM_OK && cm_storage_mem_info(*out, NULL, &total) == CM_OK && total)
      *capacity = total; /* the device-local heap */
    return rc;
  }
  if (diag) {
    static const char *const names[] = {"sim", "cuda", "cuda:sync", "cuda:async", "vulkan"};
    const char *s = cli_suggest(device, names, 5);
    snprintf(diag->message, sizeof diag->message,
             "unknown device '%s'%s%s%s (use sim, cuda, cuda:sync, cuda:async, vulkan or "
             "vulkan:N)",
             device, s ? "; did you mean '" : "", s ? s : "", s ? "'?" : "");
  }
  return CM_ENOTSUP;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

typedef struct progress_ctx {
  const char *trace, *layout;
} progress_ctx_t;

static void on_progress(void *arg, uint64_t done, uint64_t total) {
  progress_ctx_t *p = arg;
  if (done >= total) fprintf(stderr, "\r\033[K");
  else
    fprintf(stderr, "\r\033[Kreplay %s [%s]: %" PRIu64 "/%" PRIu64 " events (%.0f%%)", p->trace,
            p->layout, done, total, 100.0 * (double)done / (double)(total ? total : 1));
  fflush(stderr);
}

/* ---- one replay ---------------------------------------------------------------- */

/* The manager configuration of layout `lay` on the replayed device (no logger). */
static cm_manager_config_t layout_config(const env_t *env, const layout_t *lay) {
  cm_manager_config_t mc;
  cm_manager_config_init(&mc);
  mc.name = "replay";
  mc.props = env->props;
  mc.pools = lay->pools;
  mc.pool_count = lay->count;
  mc.persistent_memory = env->cfg->persistent_memory;
  mc.relocate = env->o->relocate;
  return mc;
}

/* A manager of layout `lay` on storage `st`, with the replay's logger; it
 * owns `st` (destroyed here when the manager cannot be made). */
static int manager_on(const env_t *env, const layout_t *lay, cm_storage_t *st, cm_manager_t **m,
                      cm_diag_t *d) {
  cm_manager_config_t mc = layout_config(env, lay);
  mc.logger = env->logger;
  int rc = cm_manager_create(st, &mc, m, d);
  if (rc) cm_storage_destroy(st);
  return rc;
}

/* Whether `t` is replayed with one set of pools per stream. */
static bool per_stream(const env_t *env, const cm_trace_t *t) {
  return !env->o->merge_streams && t->stream_count > 1;
}

/* A replay with one manager per stream of `t` on storage `st` (destroyed
 * here). */
static int replay_streams(const env_t *env, const layout_t *lay, const cm_trace_t *t,
                          cm_storage_t *st, const cm_replay_options_t *ro, cm_replay_result_t *res,
                          cm_diag_t *d) {
  cm_manager_config_t mc = layout_config(env, lay);
  mc.logger = env->logger;
  int rc = cm_replay_run_streams(t, st, &mc, ro, res, d);
  cm_storage_destroy(st);
  return rc;
}

/* One replay of `t` under `lay` on a fresh device; *unplaced: for a PyTorch
 * layout from a snapshot's starting state, its blocks that found no room. */
static int replay_once(const env_t *env, const layout_t *lay, const cm_trace_t *t,
                       const cm_replay_options_t *ro, cm_replay_result_t *res,
                       uint64_t *unplaced, cm_relocate_stats_t *rel, cm_diag_t *d) {
  cm_storage_t *st = NULL;
  uint64_t cap = env->capacity;
  int rc = make_storage(env->o->device, &cap, env->cfg->cuda_allocator, &st, d);
  if (rc) return rc;
  if (lay->torch) {
    cm_replay_options_t tro = *ro;
    tro.per_stream = per_stream(env, t);
    return cm_torch_replay_from(t, st, &lay->torch_opts, env->state, &tro, res, NULL, unplaced,
                                d);
  }
  if (per_stream(env, t)) {
    rc = replay_streams(env, lay, t, st, ro, res, d);
    if (rc == CM_OK && rel) *rel = res->relocation;
    return rc;
  }
  cm_manager_t *m = NULL;
  rc = manager_on(env, lay, st, &m, d);
  if (rc) return rc;
  rc = cm_replay_run(t, m, ro, res, d);
  if (rel) cm_manager_relocate_totals(m, rel);
  cm_manager_destroy(m);
  return rc;
}

static int replay_layout(const env_t *env, const layout_t *lay, const char *tname,
                         const cm_trace_t *t, run_t *out, cm_diag_t *d) {
  const opts_t *o = env->o;
  memset(out, 0, sizeof *out);
  progress_ctx_t pc = {tname, lay->text};
  cm_replay_options_t ro;
  memset(&ro, 0, sizeof ro);
  if (o->progress && t->count >= 200000) {
    ro.progress = on_progress;
    ro.progress_arg = &pc;
    ro.progress_every = 1u << 16;
  }
  bool have = false;
  int rc;
  if (o->svg || o->html) {
    cm_replay_options_t ri = ro;
    ri.timeline_points = TIMELINE_POINTS;
    /* the model has no manager to record; per-stream replays have several */
    if (o->html && !lay->torch && !per_stream(env, t)) {
      if ((rc = cm_replay_recorder_create(t, TIMELINE_POINTS, &out->rec, d))) return rc;
      ri.observe = cm_replay_recorder_observe;
      ri.observe_arg = out->rec;
      if (o->relocate && (out->marks = calloc(1, sizeof *out->marks))) {
        out->marks->rec = out->rec; /* the marks' observer feeds the recorder too */
        ri.observe = cli_reloc_observe;
        ri.observe_arg = out->marks;
      }
    }
    if ((rc = replay_once(env, lay, t, &ri, &out->res, &out->start_unplaced, &out->reloc, d)))
      return rc;
    if (out->rec && (rc = cm_replay_recorder_status(out->rec))) {
      snprintf(d->message, sizeof d->message, "out of memory recording the replay for --html");
      cm_replay_result_free(&out->res);
      return rc;
    }
    have = true;
  }
  uint64_t *times = calloc(o->repeat, sizeof *times);
  if (!times) return CM_ENOMEM;
  for (unsigned r = 0; r < o->repeat; r++) {
    cm_replay_result_t tmp;
    if ((rc = replay_once(env, lay, t, &ro, &tmp, &out->start_unplaced, have ? NULL : &out->reloc,
                          d))) {
      free(times);
      if (have) cm_replay_result_free(&out->res);
      return rc;
    }
    times[r] = tmp.elapsed_ns;
    if (!have) {
      out->res = tmp;
      have = true;
    } else {
      cm_replay_result_free(&tmp);
    }
  }
  qsort(times, o->repeat, sizeof *times, cmp_u64);
  uint64_t med = o->repeat % 2 ? times[o->repeat / 2]
                               : (times[o->repeat / 2 - 1] + times[o->repeat / 2]) / 2;
  free(times);
  out->median_ns = med;
  out->from_state = lay->torch && env->state;
  uint64_t ops = out->res.allocs + out->res.frees;
  out->ns_per_op = ops ? (double)med / (double)ops : 0.0;
  return CM_OK;
}

/* --runs: replay `t` o->runs times through one storage and manager (each
 * cm_replay_run frees what the trace left live before returning) and keep
 * each run's counters and failed reserves in out. */
static int replay_runs(const env_t *env, const layout_t *lay, const cm_trace_t *t, run_t *out,
                       cm_diag_t *d) {
  unsigned n = env->o->runs;
  out->run_stats = calloc(n, sizeof *out->run_stats);
  out->run_failed = calloc(n, sizeof *out->run_failed);
  if (!out->run_stats || !out->run_failed) return CM_ENOMEM;
  cm_storage_t *st = NULL;
  uint64_t cap = env->capacity;
  int rc = make_storage(env->o->device, &cap, env->cfg->cuda_allocator, &st, d);
  if (rc) return rc;
  cm_manager_t *m = NULL;
  rc = manager_on(env, lay, st, &m, d);
  if (rc) return rc;
  cm_storage_stats_t before, after;
  cm_storage_stats(st, &before);
  for (unsigned k = 0; k < n && rc == CM_OK; k++) {
    cm_replay_result_t r;
    rc = cm_replay_run(t, m, NULL, &r, d);
    if (rc) break;
    cm_storage_stats(st, &after);
    out->run_stats[k] = cm_storage_stats_diff(&before, &after);
    out->run_failed[k] = r.failed_allocs;
    before = after;
    cm_replay_result_free(&r);
    out->nruns = k + 1;
  }
  cm_manager_destroy(m);
  return rc;
}

/* --fit: the smallest simulated device on which `t` replays under `lay` with
 * no failed reservation (cm_replay_fit; each probed capacity C resolves the
 * layout as --device-memory C would, so the figure is a replay that fits).
 * 0 when the trace does not fit even on a much larger device. */
static uint64_t fit_layout(const env_t *env, const layout_t *lay, const cm_trace_t *t) {
  if (lay->torch) {
    cm_fit_result_t tr;
    cm_fit_options_t tfo;
    cm_fit_options_init(&tfo);
    tfo.per_stream = !env->o->merge_streams;
    return cm_torch_fit(t, &lay->torch_opts, &tfo, &tr, NULL) == CM_OK ? tr.fit_bytes : 0;
  }
  cm_manager_config_t mc = layout_config(env, lay);
  cli_fit_layout_t resolve = {.text = lay->text, .alignment = env->o->alignment};
  cm_fit_options_t fo;
  cm_fit_options_init(&fo);
  fo.per_stream = !env->o->merge_streams;
  fo.configure = cli_fit_configure;
  fo.configure_arg = &resolve;
  fo.unconstrained_capacity = env->capacity;
  cm_fit_result_t fr;
  return cm_replay_fit(t, &mc, &fo, &fr, NULL) == CM_OK ? fr.fit_bytes : 0;
}

/* ---- main ------------------------------------------------------------------- */

/* Whether argv[*i] is an option that takes a value (--opt VALUE or
 * --opt=VALUE): then *name is the option and *val its value (NULL when
 * missing; *i moves past a separate value). */
static bool value_option(int argc, char **argv, int *i, const char **name, const char **val) {
  static const char *const with_value[] = {"--device-memory", "--alignment", "--pools",
                                           "--config", "--persistent-memory", "--repeat",
                                           "--runs", "--driver-costs",
                                           "--svg", "--device", "--html", "--snapshot-device",
                                           "--snapshot-free-on", "--torch-conf",
                                           "--snapshot-start", "--copy-bandwidth"};
  const char *a = argv[*i];
  *name = NULL;
  *val = NULL;
  for (size_t k = 0; k < sizeof with_value / sizeof with_value[0]; k++) {
    size_t L = strlen(with_value[k]);
    if (!strncmp(a, with_value[k], L) && (a[L] == '\0' || a[L] == '=')) {
      *name = with_value[k];
      if (a[L] == '=') *val = a + L + 1;
      else if (*i + 1 < argc) *val = argv[++*i];
      return true;
    }
  }
  return false;
}

/* Whether --device names a backend (sim, cuda, cuda:ALLOCATOR, vulkan,
 * vulkan:N); prints the usage error when not. Opens nothing. */
static bool device_name_ok(const char *device) {
  if (!strcmp(device, "sim") || !strcmp(device, "cuda") || !strcmp(device, "vulkan")) return true;
  cm_cuda_allocator_t kind;
  if (!strncmp(device, "cuda:", 5)) {
    if (cm_cuda_allocator_parse(device + 5, &kind) == CM_OK) return true;
    fprintf(stderr, "cubemem replay: --device %s: unknown CUDA allocator '%s' (use cuda, "
            "cuda:sync or cuda:async)\n", device, device + 5);
    return false;
  }
  if (!strncmp(device, "vulkan:", 7)) {
    char *end = NULL;
    long index = strtol(device + 7, &end, 10);
    if (end != device + 7 && !*end && index >= 0 && index <= 1024 && device[7] != '-' &&
        device[7] != '+' && device[7] != ' ')
      return true;
    fprintf(stderr, "cubemem replay: --device %s: bad Vulkan device '%s' (use vulkan or "
            "vulkan:N, N a device index 0, 1, ...)\n", device, device + 7);
    return false;
  }
  static const char *const names[] = {"sim", "cuda", "cuda:sync", "cuda:async", "vulkan"};
  const char *s = cli_suggest(device, names, 5);
  fprintf(stderr, "cubemem replay: --device %s: unknown device '%s'%s%s%s (use sim, cuda, "
          "cuda:sync, cuda:async, vulkan or vulkan:N)\n", device, device,
          s ? "; did you mean '" : "", s ? s : "", s ? "'?" : "");
  return false;
}

/* Apply option `name` with its value. Returns 0, or 2 with the reason on stderr. */
static int set_value_option(opts_t *o, const char *name, const char *val) {
  if (!strcmp(name, "--device-memory")) {
    if (cli_device_memory_option("replay", val, &o->capacity)) return 2;
  } else if (!strcmp(name, "--alignment")) {
    if (cli_alignment_option("replay", val, &o->alignment)) return 2;
  } else if (!strcmp(name, "--pools")) {
    if (o->layout_count == MAX_LAYOUTS) {
      fprintf(stderr, "cubemem replay: at most %d --pools\n", MAX_LAYOUTS);
      return 2;
    }
    o->layouts[o->layout_count++] = val;
  } else if (!strcmp(name, "--config")) {
    o->config_path = val;
  } else if (!strcmp(name, "--persistent-memory")) {
    o->persistent_memory = val;
  } else if (!strcmp(name, "--repeat")) {
    char *end;
    unsigned long r = strtoul(val, &end, 10);
    if (*end || r == 0 || r > 100000 || val[0] == '-') {
      fprintf(stderr, "cubemem replay: bad --repeat '%s' (1..100000)\n", val);
      return 2;
    }
    o->repeat = (unsigned)r;
  } else if (!strcmp(name, "--runs")) {
    char *end;
    unsigned long r = strtoul(val, &end, 10);
    if (!*val || *end || r == 0 || r > 1000 || val[0] == '-') {
      fprintf(stderr, "cubemem replay: bad --runs '%s' (1..1000)\n", val);
      return 2;
    }
    o->runs = (unsigned)r;
    o->runs_given = true;
  } else if (!strcmp(name, "--copy-bandwidth")) {
    char *end;
    double g = strtod(val, &end);
    if (end == val || *end || !(g > 0) || g > 1e6) {
      fprintf(stderr, "cubemem replay: bad --copy-bandwidth '%s' (GB/s of device memory, e.g. 2039)\n", val);
      return 2;
    }
    o->copy_gbps = g;
  } else if (!strcmp(name, "--driver-costs")) {
    if (cli_driver_costs_option("replay", val, &o->costs)) return 2;
  } else if (!strcmp(name, "--svg")) {
    o->svg = val;
  } else if (!strcmp(name, "--html")) {
    o->html = val;
  } else if (!strcmp(name, "--device")) {
    if (!device_name_ok(val)) return 2;
    o->device = val;
  } else if (!strcmp(name, "--torch-conf")) {
    o->torch_conf = val;
  } else if (!strcmp(name, "--snapshot-device")) {
    char *end;
    long dv = strtol(val, &end, 10);
    if (!*val || *end || dv < 0 || dv > 65535) {
      fprintf(stderr, "cubemem replay: bad --snapshot-device '%s' (a device index: 0, 1, ...)\n", val);
      return 2;
    }
    o->snapshot_device = (int)dv;
  } else if (!strcmp(name, "--snapshot-start")) {
    if (strcmp(val, "state") && strcmp(val, "empty")) {
      fprintf(stderr, "cubemem replay: bad --snapshot-start '%s' (empty or state)\n", val);
      return 2;
    }
    o->snapshot_state = !strcmp(val, "state");
  } else if (!strcmp(name, "--snapshot-free-on")) {
    if (strcmp(val, "completed") && strcmp(val, "requested")) {
      fprintf(stderr, "cubemem replay: bad --snapshot-free-on '%s' (completed or requested)\n", val);
      return 2;
    }
    o->free_on_requested = !strcmp(val, "requested");
  }
  return 0;
}

static int parse_args(int argc, char **argv, opts_t *o) {
  static const char *trace_buf[1024];
  o->capacity = 80ull << 30;
  o->device = "sim";
  o->repeat = 1;
  o->runs = 1;
  o->copy_gbps = 2039; /* an A100 80GB's HBM2e */
  if (cm_driver_costs_builtin("a100", &o->costs) != CM_OK) return 1;
  o->progress = true;
  o->snapshot_device = -1;
  o->traces = trace_buf;
  bool only_files = false;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (only_files || a[0] != '-' || !strcmp(a, "-")) {
      if (o->trace_count == sizeof trace_buf / sizeof trace_buf[0]) {
        fprintf(stderr, "cubemem replay: too many traces\n");
        return 2;
      }
      o->traces[o->trace_count++] = a;
      continue;
    }
    if (!strcmp(a, "--")) {
      only_files = true;
      continue;
    }
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      /* main leaves replay's stdout to replay: a failed write of the help
       * is reported here (a reader that stopped early is not an error) */
      errno = 0;
      usage(stdout);
      if ((fflush(stdout) == 0 && !ferror(stdout)) || errno == EPIPE) return -1;
      fprintf(stderr, "cubemem replay: cannot write the output: %s\n", strerror(errno ? errno : EIO));
      return 1;
    }
    if (!strcmp(a, "--json")) { o->json = true; continue; }
    if (!strcmp(a, "--fit")) { o->fit = true; continue; }
    if (!strcmp(a, "--relocate")) { o->relocate = true; continue; }
    if (!strcmp(a, "--skip-bad-lines")) { o->skip_bad = true; continue; }
    if (!strcmp(a, "--no-progress")) { o->progress = false; continue; }
    if (!strcmp(a, "--no-config")) { o->no_config = true; continue; }
    if (!strcmp(a, "--merge-streams")) { o->merge_streams = true; continue; }
    const char *name, *val;
    if (!value_option(argc, argv, &i, &name, &val)) {
      static const char *const all[] = {
          "--device-memory", "--alignment", "--pools", "--config", "--persistent-memory",
          "--repeat", "--runs", "--driver-costs", "--svg", "--html", "--fit", "--relocate", "--copy-bandwidth", "--device", "--snapshot-device", "--snapshot-free-on", "--json", "--torch-conf",
          "--skip-bad-lines", "--no-progress", "--no-config", "--merge-streams", "--snapshot-start", "--help"};
      return cli_unknown_option("replay", a, all, sizeof all / sizeof all[0]);
    }
    if (!val) {
      fprintf(stderr, "cubemem replay: %s needs a value\n", name);
      return 2;
    }
    if (set_value_option(o, name, val)) return 2;
  }
  if (o->trace_count == 0) {
    fprintf(stderr, "cubemem replay: no trace given\n\n");
    usage(stderr);
    return 2;
  }
  if (o->layout_count == 0) o->layouts[o->layout_count++] = "default";
  if (!isatty(STDERR_FILENO)) o->progress = false;
  int orc = 0; /* the output files, before the work */
  if (o->svg) orc = cli_output_check("replay", "--svg", o->svg);
  if (!orc && o->html) orc = cli_output_check("replay", "--html", o->html);
  return orc;
}

/* The memory logger of the configuration belongs to the application: it
 * must not write into this tool's stdout (--json is JSON only) nor create
 * files wherever the tool runs. A discovered configuration's logger is
 * ignored; one given with --config is used with its stdout sink sent to
 * stderr, and the log file named. Each case is a note on stderr. */
static void app_logger(const opts_t *o, cm_config_t *cfg) {
  if (!o->config_path) {
    fprintf(stderr, "cubemem replay: note: the memory logger of %s is the application's and is "
            "not used here (give --config to use it; its stdout output then goes to stderr)\n",
            o->config_used);
    cfg->logger.level = CM_LOG_DISABLED;
    return;
  }
  if (cfg->logger.to_stdout) {
    cfg->logger.to_stdout = false;
    cfg->logger.to_stderr = true;
    fprintf(stderr, "cubemem replay: note: the memory logger writes to stderr, not stdout\n");
  }
  if (cfg->logger.file) {
    char *abs = cfg->logger.file[0] == '/' ? NULL : realpath(".", NULL);
    fprintf(stderr, "cubemem replay: note: the memory log goes to %s%s%s\n", abs ? abs : "",
            abs ? "/" : "", cfg->logger.file);
    free(abs);
  }
}

/* The configuration (--config, discovered or none) with --persistent-memory
 * applied, and the logger it asks for (NULL when disabled) into *logger;
 * o->config_used names the file. Returns the exit status; on failure *cfg
 * is freed. */
static int load_setup(opts_t *o, cm_config_t *cfg, cm_logger_t **logger) {
  cm_diag_t d;
  cm_diag_clear(&d);
  cm_config_init(cfg);
  if (cli_config_load("replay", o->config_path, o->no_config, cfg, o->config_used,
                      sizeof o->config_used)) {
    cm_config_free(cfg);
    return 1;
  }
  if (o->persistent_memory &&
      cm_config_set(cfg, "memory.persistent_memory", o->persistent_memory, &d) != CM_OK) {
    fprintf(stderr, "cubemem replay: --persistent-memory: %s\n", d.message);
    cm_config_free(cfg);
    return 2;
  }
  *logger = NULL;
  if (cfg->logger.level != CM_LOG_DISABLED) app_logger(o, cfg);
  if (cfg->logger.level != CM_LOG_DISABLED &&
      cm_config_make_logger(cfg, NULL, NULL, logger, &d) != CM_OK) {
    fprintf(stderr, "cubemem replay: logger: %s\n", d.message);
    cm_config_free(cfg);
    return 1;
  }
  return 0;
}

/* The name of the real device --device names (CUDA: the device opened;
 * Vulkan: the physical device, opened and closed again) into buf; "" when
 * unknown. */
static void device_name(const char *device, char *buf, size_t cap) {
  buf[0] = '\0';
  if (!strncmp(device, "cuda", 4) && g_cuda_device) {
    const char *nm = cm_cuda_device_name(g_cuda_device);
    if (nm) snprintf(buf, cap, "%s", nm);
  } else if (!strncmp(device, "vulkan", 6)) {
    cm_vulkan_open_options_t vo;
    cm_vulkan_open_options_init(&vo);
    if (device[6] == ':') vo.device_index = atoi(device + 7);
    vo.validation = false;
    vo.print_messages = false;
    cm_vulkan_device_t *dev = NULL;
    if (cm_vulkan_device_open(&vo, &dev, NULL) == CM_OK) {
      const char *nm = cm_vulkan_device_name(dev);
      if (nm) snprintf(buf, cap, "%s", nm);
      cm_vulkan_device_close(dev);
    }
  }
}

/* A real device (--device other than sim): open it once so that its total
 * memory drives the presets (max page = total / 4). Returns the exit status. */
static int probe_device(env_t *env) {
  const opts_t *o = env->o;
  if (strcmp(o->device, "sim") == 0) return 0;
  cm_storage_t *probe = NULL;
  uint64_t cap = o->capacity;
  cm_diag_t d;
  cm_diag_clear(&d);
  if (make_storage(o->device, &cap, env->cfg->cuda_allocator, &probe, &d) != CM_OK) {
    fprintf(stderr, "cubemem replay: --device %s: %s\n", o->device,
            d.message[0] ? d.message : cm_strerror(d.code));
    return 1;
  }
  cm_storage_destroy(probe);
  env->capacity = cap;
  device_name(o->device, env->device_name, sizeof env->device_name);
  return 0;
}

/* What a run over every trace and layout holds. */
typedef struct job {
  layout_t *lays;             /* one per --pools */
  run_t *runs;                /* runs[trace * layout_count + layout] */
  cm_replay_panel_t *panels;  /* --svg: one per trace */
  cm_replay_series_t *series; /* the panels' series, indexed as runs */
  bool *done;                 /* the trace's runs hold results */
  cli_trace_info_t tinfo;     /* the trace being replayed (env->tinfo) */
  uint64_t failed_total;      /* failed reserves, every run */
  uint64_t refused_total;     /* calls the device refused, every run */
  int stdout_errno;           /* the first failed write of the report */
} job_t;

/* Allocate the job's arrays and parse every --pools layout. Returns the
 * exit status. */
static int job_prepare(job_t *job, const env_t *env) {
  const opts_t *o = env->o;
  job->lays = calloc(o->layout_count, sizeof *job->lays);
  job->runs = calloc(o->layout_count * o->trace_count, sizeof *job->runs);
  job->panels = calloc(o->trace_count, sizeof *job->panels);
  job->series = calloc(o->layout_count * o->trace_count, sizeof *job->series);
  job->done = calloc(o->trace_count, sizeof *job->done);
  if (!job->lays || !job->runs || !job->panels || !job->series || !job->done) {
    fprintf(stderr, "cubemem replay: out of memory\n");
    return 1;
  }
  if (cli_torch_check_conf("replay", o->torch_conf, o->layouts, o->layout_count)) return 2;
  for (size_t l = 0; l < o->layout_count; l++) {
    job->lays[l].text = o->layouts[l];
    if ((job->lays[l].torch = cli_torch_is_layout(o->layouts[l]))) {
      int trc = cli_torch_options("replay", o->layouts[l], o->torch_conf, env->capacity,
                                  &job->lays[l].torch_opts);
      if (trc) return trc;
      continue;
    }
    if (cli_torch_check_name("replay", o->layouts[l])) return 2;
    int lrc = cli_parse_layout("replay", o->layouts[l], env->props, job->lays[l].pools,
                               CM_MAX_DYNAMIC_POOLS, &job->lays[l].count);
    if (lrc) return lrc;
  }
  return 0;
}

/* Free what the job holds (any part may be missing). */
static void job_free(job_t *job, const opts_t *o) {
  if (job->runs && job->done)
    for (size_t ti = 0; ti < o->trace_count; ti++)
      if (job->done[ti])
        for (size_t l = 0; l < o->layout_count; l++)
          cm_replay_result_free(&job->runs[ti * o->layout_count + l].res);
  if (job->runs)
    for (size_t k = 0; k < o->layout_count * o->trace_count; k++) {
      cm_replay_recorder_free(job->runs[k].rec);
      cli_reloc_marks_free(job->runs[k].marks);
      free(job->runs[k].json);
      free(job->runs[k].run_stats);
      free(job->runs[k].run_failed);
    }
  free(job->done);
  free(job->series);
  free(job->panels);
  free(job->runs);
  free(job->lays);
}

/* Replay trace `t` under every layout into tr[]. False (message on stderr,
 * the results so far freed) when a run fails. */
static bool replay_trace(const env_t *env, const layout_t *lays, const char *tname,
                         const cm_trace_t *t, run_t *tr) {
  const opts_t *o = env->o;
  cm_diag_t d;
  for (size_t l = 0; l < o->layout_count; l++) {
    cm_diag_clear(&d);
    int rc = replay_layout(env, &lays[l], tname, t, &tr[l], &d);
    if (rc == CM_OK && o->runs_given && !lays[l].torch) { /* the PyTorch model replays once */
      rc = replay_runs(env, &lays[l], t, &tr[l], &d);
      if (rc != CM_OK) cm_replay_result_free(&tr[l].res);
    }
    if (rc == CM_OK && o->fit) tr[l].fit_bytes = fit_layout(env, &lays[l], t);
    if (rc != CM_OK) {
      fprintf(stderr, "cubemem replay: %s [%s]: %s\n", tname, lays[l].text,
              d.message[0] ? d.message : cm_strerror(rc));
      for (size_t k = 0; k <= l; k++) cm_replay_result_free(&tr[k].res);
      return false;
    }
  }
  return true;
}

/* Report trace number ti (text or --json), keep its --html objects, and
 * make its --svg panel. */
static void report_trace(const env_t *env, job_t *job, size_t ti, const char *tname,
                         const cm_trace_t *t) {
  const opts_t *o = env->o;
  size_t nl = o->layout_count;
  run_t *tr = &job->runs[ti * nl];
  for (size_t l = 0; l < nl; l++) {
    job->failed_total += tr[l].res.failed_allocs;
    job->refused_total += tr[l].res.storage.violations;
    for (unsigned k = 1; k < tr[l].nruns; k++) { /* --runs: run 1 is the replay above */
      job->failed_total += tr[l].run_failed[k];
      job->refused_total += tr[l].run_stats[k].violations;
    }
  }
  if (o->json)
    for (size_t l = 0; l < nl; l++)
      cli_replay_print_json(stdout, tname, &job->lays[l], t, &tr[l], env);
  else
    cli_replay_print_text(tname, t, job->lays, tr, nl, env);
  if ((fflush(stdout) != 0 || ferror(stdout)) && !job->stdout_errno)
    job->stdout_errno = errno ? errno : EIO;
  if (o->html) /* the report embeds the objects --json prints */
    for (size_t l = 0; l < nl; l++)
      tr[l].json = cli_replay_json_object(tname, &job->lays[l], t, &tr[l], env);
  job->done[ti] = true;
  job->panels[ti].title = tname;
  job->panels[ti].series = &job->series[ti * nl];
  job->panels[ti].series_count = nl;
  for (size_t l = 0; l < nl; l++)
    job->series[ti * nl + l] = (cm_replay_series_t){job->lays[l].text, &tr[l].res};
}

/* Load, replay and report every trace in turn. Returns the exit status. */
static int replay_all(env_t *env, job_t *job) {
  const opts_t *o = env->o;
  cli_trace_options_t to = {.skip_bad = o->skip_bad, .snapshot_device = o->snapshot_device,
                            .free_on_requested = o->free_on_requested};
  env->tinfo = &job->tinfo;
  /* A reader that stops early (| head) must not cost the requested files:
   * writes to a closed pipe fail with EPIPE instead of killing the process,
   * the report stops, and the SVG is still written. */
  signal(SIGPIPE, SIG_IGN);
  for (size_t ti = 0; ti < o->trace_count; ti++) {
    const char *tname = o->traces[ti];
    cm_trace_t *t = NULL;
    if (cli_trace_load("replay", tname, &to, &t, &job->tinfo)) return 1;
    cm_snapshot_state_t state;
    memset(&state, 0, sizeof state);
    env->state = NULL;
    if (o->snapshot_state && job->tinfo.is_snapshot) {
      if (cli_snapshot_state_load("replay", tname, o, &state)) {
        cm_trace_free(t);
        return 1;
      }
      env->state = &state;
    }
    for (size_t l = 0; l < o->layout_count; l++) /* a snapshot's recorded PyTorch options */
      if (job->lays[l].torch &&
          cli_torch_options_for("replay", job->lays[l].text,
                                job->tinfo.is_snapshot ? job->tinfo.snap.alloc_conf : NULL,
                                o->torch_conf, env->capacity, &job->lays[l].torch_opts)) {
        cm_trace_free(t);
        cm_snapshot_state_free(&state);
        env->state = NULL;
        return 2;
      }
    bool ok = replay_trace(env, job->lays, tname, t, &job->runs[ti * o->layout_count]);
    if (ok) report_trace(env, job, ti, tname, t);
    cm_trace_free(t);
    cm_snapshot_state_free(&state);
    env->state = NULL;
    if (!ok) return 1;
  }
  return 0;
}

/* After the replays (status so far): the SVG, a failed report, the HTML,
 * then exit 3 when a reservation failed or the device refused a call. */
static int finish(const env_t *env, const job_t *job, int status) {
  const opts_t *o = env->o;
  if (o->svg && status == 0) status = cli_replay_write_svg(o->svg, job->panels, o->trace_count);
  if (job->stdout_errno && job->stdout_errno != EPIPE) {
    fprintf(stderr, "cubemem replay: cannot write the report: %s\n", strerror(job->stdout_errno));
    if (!status) status = 1;
  }
  if (o->html && status == 0)
    status = cli_replay_write_html(o->html, o->traces, o->trace_count, job->lays, job->runs,
                                   o->layout_count, o);
  if (status == 0 && (job->failed_total || job->refused_total)) {
    /* exit 3: the job does not fit (or the device refused a call) */
    if (job->failed_total)
      fprintf(stderr, "cubemem replay: %" PRIu64 " reservation%s failed: the trace does not fit "
              "this device with this layout (try 'cubemem fit')\n",
              job->failed_total, job->failed_total == 1 ? "" : "s");
    if (job->refused_total)
      fprintf(stderr, "cubemem replay: the device refused %" PRIu64 " call%s as violations of "
              "its rules\n", job->refused_total, job->refused_total == 1 ? "" : "s");
    status = 3;
  }
  return status;
}

int cm_cli_replay(int argc, char **argv) {
  opts_t o;
  memset(&o, 0, sizeof o);
  int prc = parse_args(argc, argv, &o);
  if (prc) return prc < 0 ? 0 : prc;

  /* configuration: file, then the command line */
  cm_config_t cfg;
  cm_logger_t *logger = NULL;
  int status = load_setup(&o, &cfg, &logger);
  if (status) return status;

  env_t env = {.o = &o, .capacity = o.capacity, .cfg = &cfg, .logger = logger};
  if (probe_device(&env)) {
    cm_logger_destroy(logger);
    cm_config_free(&cfg);
    return 1;
  }
  env.props.max_page_size = env.capacity / 4;
  env.props.alignment = o.alignment ? o.alignment : 512;

  job_t job;
  memset(&job, 0, sizeof job);
  status = job_prepare(&job, &env);
  if (status == 0) status = finish(&env, &job, replay_all(&env, &job));

  if (cm_vulkan_messages_total() > 0) { /* only with CM_VULKAN_VALIDATION=1 */
    fprintf(stderr, "cubemem replay: %" PRIu64 " Vulkan validation message(s), shown above\n",
            cm_vulkan_messages_total());
    if (status == 0) status = 1;
  }
  job_free(&job, &o);
  cm_logger_destroy(logger);
  cm_config_free(&cfg);
  return status;
}
