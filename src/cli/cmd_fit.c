/*
 * cmd_fit.c - `cubemem fit TRACE... [--pools L]...`: the smallest device
 * memory on which each trace replays with no failed reservation, per layout
 * ("which GPU does this job need"), through cm_replay_fit.
 *
 * The device is the simulated one, refusing to go over its capacity and
 * enforcing the CUDA driver's virtual-memory rules, so the figure predicts a
 * real device with that much free memory. Every probe of capacity C builds
 * exactly what `cubemem replay --device-memory C` builds (the layout
 * resolved for C: presets use max page = C / 4; the same simulated device,
 * configuration and persistent-memory mode; cli_fit_configure), so a fit
 * of C bytes is a replay that succeeds on C bytes. The unconstrained figure
 * is the replay on the --device-memory device (80 GiB by default), the one
 * `cubemem replay` reports, with its modelled driver time (--driver-costs).
 * Without --pools, cubemem's default and PyTorch's two modes answer side by
 * side. Then "fits on": per layout, the GPUs of a list (built in, or
 * --gpus) whose reported memory, less --reserve for the CUDA context and
 * libraries, holds the smallest device (cli_gpus.c).
 * Output: a table (text) or one JSON object per (trace, layout) line. Exit codes: 0 ok, 1 a trace could not be read or
 * does not replay even without a limit, 2 usage errors.
 * Exports cm_cli_fit (cli.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cli.h"
#include "cli_torch.h"
#include "cubemem/config.h"
#include "cubemem/cubemem.h"
#include "cubemem/replay.h"

#define FIT_MAX_LAYOUTS 16

typedef struct fit_opts {
  uint64_t capacity, alignment, grid;
  cm_driver_costs_t costs;  /* --driver-costs */
  unsigned confirmations;
  const char *layouts[FIT_MAX_LAYOUTS];
  size_t layout_count;
  const char *persistent_memory;
  const char *torch_conf;   /* --torch-conf: PYTORCH_CUDA_ALLOC_CONF of the PyTorch layouts */
  const char *config_path;  /* --config */
  bool no_config;           /* --no-config */
  bool merge_streams;       /* --merge-streams: every stream through one set of pools */
  int snapshot_device;      /* --snapshot-device, -1 = first with history */
  bool free_on_requested;   /* --snapshot-free-on requested */
  bool json, skip_bad, progress;
  bool side_by_side;        /* no --pools: default, pytorch, pytorch-expandable */
  bool relocate;            /* --relocate: the managers relocate live data */
  uint64_t reserve;         /* --reserve: kept back on every GPU */
  cli_gpu_list_t gpus;      /* --gpus, or the built-in list */
  const char **traces;
  size_t trace_count;
} fit_opts_t;

static void fit_usage(FILE *out) {
  fprintf(out,
          "usage: cubemem fit [options] TRACE...\n"
          "\n"
          "The smallest device memory on which each trace replays with no failed\n"
          "reservation, per layout: which GPU a job needs. Found by bisection on the\n"
          "simulated device (which refuses to go over its capacity and follows the CUDA\n"
          "driver's rules) between the trace's peak live bytes and its unconstrained peak,\n"
          "then confirmed at larger sizes (fitting need not be monotone).\n"
          "\n"
          "Without --pools, three allocators answer side by side: cubemem's default\n"
          "layout, PyTorch's caching allocator (pytorch) and its expandable segments\n"
          "(pytorch-expandable). Then, for each, the GPUs it fits on: those of a list\n"
          "(T4, L4, A10, RTX 4090, A100 40GB/80GB, H100 80GB, H200, B200 with the memory\n"
          "they report, or --gpus) with room for the smallest device plus --reserve.\n"
          "\n"
          "options:\n"
          "  --pools LAYOUT         default | subslices | exclusive-pages | adaptive | an\n"
          "                         explicit list\n"
          "                         (as for replay), or PyTorch's caching allocator: pytorch |\n"
          "                         pytorch-expandable[:CONF]. Repeat to compare layouts.\n"
          "                         Default: default, pytorch and pytorch-expandable\n"
          "  --gpus LIST|FILE       the GPUs of 'fits on': NAME=SIZE,... (the memory each\n"
          "                         reports, e.g. \"T4=15102MiB,L4=22558MiB\") or a file of\n"
          "                         such entries, one a line ('#' comments)\n"
          "  --reserve SIZE         kept back on every GPU for the CUDA context and libraries\n"
          "                         (cuBLAS/cuDNN workspaces; default 500MiB)\n"
          "  --torch-conf CONF      PYTORCH_CUDA_ALLOC_CONF for the PyTorch layouts\n"
          "  --device-memory SIZE   the device of the unconstrained replay, the figure\n"
          "                         'cubemem replay' reports (default 80GiB); every probed\n"
          "                         capacity C resolves the layout as 'replay --device-memory C'\n"
          "                         does (presets use max page = C / 4)\n"
          "  --driver-costs C       the driver-time model of the unconstrained replay: a100\n"
          "                         (default), fast, or a TOML file ([driver_costs])\n"
          "  --alignment N          pool alignment in bytes, a power of two (default 512)\n"
          "  --persistent-memory M  enabled | size-match | disabled | enforced\n"
          "  --config PATH          the configuration (cubecl.toml, or burn.toml's [cubecl]);\n"
          "                         default: discovered from the current directory upward\n"
          "  --no-config            use no configuration file\n"
          "  --merge-streams        replay every stream through one set of pools (default:\n"
          "                         each stream of a trace gets its own pools, as in replay)\n"
          "  --snapshot-device N    the device of a PyTorch snapshot (default: the first with\n"
          "                         trace entries)\n"
          "  --snapshot-free-on E   completed (default) | requested\n"
          "  --grid SIZE            search grid (default 2MiB)\n"
          "  --confirm N            larger capacities replayed to confirm (default 7)\n"
          "  --relocate             model a handle-based runtime: the managers relocate live\n"
          "                         data when the device refuses memory (docs/relocation.md)\n"
          "  --json                 one JSON object per (trace, layout) line\n"
          "  --skip-bad-lines       skip (and count) malformed trace lines\n"
          "  --no-progress          never print the progress line\n"
          "\nTRACE is an RMM CSV log or a PyTorch memory snapshot (pickle).\n"
          CLI_SIZE_HELP);
}

static int fit_parse_args(int argc, char **argv, fit_opts_t *o) {
  o->capacity = 80ull << 30;
  o->grid = 2ull << 20;
  o->confirmations = 7;
  if (cm_driver_costs_builtin("a100", &o->costs) != CM_OK) return 1;
  o->progress = isatty(2);
  o->snapshot_device = -1;
  o->reserve = CLI_DEFAULT_RESERVE;
  cli_gpus_builtin(&o->gpus);
  o->traces = calloc((size_t)argc, sizeof *o->traces);
  if (!o->traces) return 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      fit_usage(stdout);
      return -1;
    } else if (!strcmp(a, "--json")) {
      o->json = true;
    } else if (!strcmp(a, "--relocate")) {
      o->relocate = true;
    } else if (!strcmp(a, "--skip-bad-lines")) {
      o->skip_bad = true;
    } else if (!strcmp(a, "--no-progress")) {
      o->progress = false;
    } else if (!strcmp(a, "--no-config")) {
      o->no_config = true;
    } else if (!strcmp(a, "--merge-streams")) {
      o->merge_streams = true;
    } else if (!strcmp(a, "--gpus") || !strcmp(a, "--reserve")) {
      if (!v) {
        fprintf(stderr, "cubemem fit: %s needs a value\n", a);
        return 2;
      }
      i++;
      int grc = !strcmp(a, "--gpus") ? cli_gpus_option("fit", v, &o->gpus)
                                     : cli_size_option("fit", "--reserve", v, true, &o->reserve);
      if (grc) return grc;
    } else if (!strcmp(a, "--driver-costs") || !strcmp(a, "--torch-conf")) {
      if (!v) {
        fprintf(stderr, "cubemem fit: %s needs a value\n", a);
        return 2;
      }
      i++;
      if (!strcmp(a, "--torch-conf")) o->torch_conf = v;
      else if (cli_driver_costs_option("fit", v, &o->costs)) return 2;
    } else if (!strcmp(a, "--config") || !strcmp(a, "--snapshot-device") ||
               !strcmp(a, "--snapshot-free-on")) {
      if (!v) {
        fprintf(stderr, "cubemem fit: %s needs a value\n", a);
        return 2;
      }
      i++;
      char *end;
      long dv = strtol(v, &end, 10);
      if (!strcmp(a, "--config")) {
        o->config_path = v;
      } else if (!strcmp(a, "--snapshot-device")) {
        if (!*v || *end || dv < 0 || dv > 65535) {
          fprintf(stderr, "cubemem fit: bad --snapshot-device '%s' (a device index: 0, 1, ...)\n", v);
          return 2;
        }
        o->snapshot_device = (int)dv;
      } else if (strcmp(v, "completed") && strcmp(v, "requested")) {
        fprintf(stderr, "cubemem fit: bad --snapshot-free-on '%s' (completed or requested)\n", v);
        return 2;
      } else {
        o->free_on_requested = !strcmp(v, "requested");
      }
    } else if (!strcmp(a, "--pools") || !strcmp(a, "--device-memory") ||
               !strcmp(a, "--alignment") || !strcmp(a, "--persistent-memory") ||
               !strcmp(a, "--grid") || !strcmp(a, "--confirm")) {
      if (!v) {
        fprintf(stderr, "cubemem fit: %s needs a value\n", a);
        return 2;
      }
      i++;
      uint64_t n = 0;
      if (!strcmp(a, "--pools")) {
        if (o->layout_count == FIT_MAX_LAYOUTS) {
          fprintf(stderr, "cubemem fit: at most %d layouts\n", FIT_MAX_LAYOUTS);
          return 2;
        }
        o->layouts[o->layout_count++] = v;
      } else if (!strcmp(a, "--persistent-memory")) {
        o->persistent_memory = v;
      } else if (!strcmp(a, "--device-memory")) {
        if (cli_device_memory_option("fit", v, &o->capacity)) return 2;
      } else if (!strcmp(a, "--alignment")) {
        if (cli_alignment_option("fit", v, &o->alignment)) return 2;
      } else if (!strcmp(a, "--grid")) {
        if (cli_size_option("fit", "--grid", v, false, &o->grid)) return 2;
      } else {
        char *end;
        n = strtoull(v, &end, 10);
        if (!*v || *end || v[0] < '0' || v[0] > '9' || n > 1000) {
          fprintf(stderr, "cubemem fit: bad --confirm '%s' (a count of capacities, 0..1000)\n", v);
          return 2;
        }
        o->confirmations = (unsigned)n;
      }
    } else if (a[0] == '-' && a[1]) {
      static const char *const all[] = {
          "--pools", "--device-memory", "--alignment", "--persistent-memory", "--grid",
          "--confirm", "--driver-costs", "--config", "--no-config", "--merge-streams", "--snapshot-device", "--snapshot-free-on",
          "--torch-conf", "--gpus", "--reserve", "--json", "--skip-bad-lines", "--no-progress",
          "--relocate", "--help"};
      return cli_unknown_option("fit", a, all, sizeof all / sizeof all[0]);
    } else {
      o->traces[o->trace_count++] = a;
    }
  }
  if (!o->trace_count) {
    fprintf(stderr, "cubemem fit: no trace given\n\n");
    fit_usage(stderr);
    return 2;
  }
  if (!o->layout_count) {
    o->side_by_side = true;
    o->layouts[o->layout_count++] = "default";
    o->layouts[o->layout_count++] = "pytorch";
    o->layouts[o->layout_count++] = "pytorch-expandable";
  }
  return 0;
}


typedef struct fit_progress {
  const char *trace, *layout;
} fit_progress_t;

static void on_fit_progress(void *arg, unsigned replays, uint64_t lo, uint64_t hi) {
  fit_progress_t *p = arg;
  char a[32], b[32];
  cm_format_bytes(lo, a, sizeof a);
  cm_format_bytes(hi, b, sizeof b);
  fprintf(stderr, "\r\033[Kfit %s [%s]: %u replays, between %s and %s", p->trace, p->layout,
          replays, a, b);
  fflush(stderr);
}

/* The modelled driver time by kind, on one line under a layout's row. */
static void print_kinds(const cm_driver_time_t *t) {
  const struct {
    const char *name;
    uint64_t ns;
  } k[] = {{"create", t->create_ns},   {"map", t->map_ns},
           {"set access", t->set_access_ns}, {"unmap", t->unmap_ns},
           {"release", t->release_ns}, {"stream wait", t->sync_ns},
           {"alloc", t->alloc_ns},     {"free", t->free_ns},
           {"reserve VA", t->reserve_ns}, {"free VA", t->address_free_ns},
           {"memory query", t->mem_query_ns}};
  printf("  %-40s   driver time by kind:", "");
  bool any = false;
  for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
    if (!k[i].ns) continue;
    char ms[32];
    cli_fmt_ms(k[i].ns, ms, sizeof ms);
    printf("%s %s %s", any ? "," : "", k[i].name, ms);
    any = true;
  }
  printf("%s\n", any ? "" : " none");
}

/* Which allocator a layout's figure assumes, in a few words. */
static const char *allocator_label(const char *layout, const cm_torch_options_t *t) {
  if (!cli_torch_is_layout(layout)) return "cubemem";
  return t->expandable_segments ? "PyTorch, expandable" : "PyTorch";
}

/* "fits on" of one layout in JSON (no leading comma). */
/* The replay on one grid step under the fit (cm_fit_result_t's below_*):
 * "below_fit" in the JSON, null when it was not run. */
static void below_json(const cm_fit_result_t *fr) {
  if (!fr->below_capacity) {
    fputs(",\"below_fit\":null", stdout);
    return;
  }
  printf(",\"below_fit\":{\"device_memory\":%" PRIu64 ",\"failed_allocs\":%" PRIu64,
         fr->below_capacity, fr->below_failed);
  if (fr->below_failed) {
    printf(",\"status\":\"%s\",\"event\":%" PRIu64 ",\"size\":%" PRIu64
           ",\"live_bytes\":%" PRIu64 ",\"reserved_bytes\":%" PRIu64 ",\"message\":",
           cm_err_name(fr->below_status), fr->below_event, fr->below_size, fr->below_live_bytes,
           fr->below_reserved_bytes);
    cli_json_string(stdout, fr->below_message);
  }
  fputc('}', stdout);
}

/* ... and in the text report, under the layout's row. */
static void print_below(const cm_fit_result_t *fr, uint64_t grid) {
  if (!fr->below_capacity) return;
  char g[32], sz[32], live[32], res[32];
  if (grid % (1u << 20) == 0) snprintf(g, sizeof g, "%" PRIu64 " MiB", grid >> 20);
  else snprintf(g, sizeof g, "%" PRIu64 " bytes", grid);
  if (!fr->below_failed) {
    printf("  %-40s on %s less (%" PRIu64 " bytes) it fits too: fitting is not monotone there\n",
           "", g, fr->below_capacity);
    return;
  }
  cm_format_bytes(fr->below_size, sz, sizeof sz);
  cm_format_bytes(fr->below_live_bytes, live, sizeof live);
  cm_format_bytes(fr->below_reserved_bytes, res, sizeof res);
  printf("  %-40s on %s less (%" PRIu64 " bytes): %s reserving %s at event %" PRIu64
         " with %s live and %s reserved: %s\n",
         "", g, fr->below_capacity, cm_err_name(fr->below_status), sz, fr->below_event, live,
         res, fr->below_message);
}

static void fits_json(const fit_opts_t *o, uint64_t fit_bytes) {
  size_t order[CLI_MAX_GPUS];
  bool fits[CLI_MAX_GPUS];
  uint64_t needs = fit_bytes + o->reserve;
  cli_gpus_fits(&o->gpus, needs, order, fits);
  printf("\"reserve_bytes\":%" PRIu64 ",\"needs_bytes\":%" PRIu64 ",\"smallest_gpu\":",
         o->reserve, needs);
  size_t first = o->gpus.count;
  for (size_t i = 0; i < o->gpus.count && first == o->gpus.count; i++)
    if (fits[i]) first = i;
  if (first < o->gpus.count) cli_json_string(stdout, o->gpus.gpu[order[first]].name);
  else fputs("null", stdout);
  fputs(",\"fits_on\":[", stdout);
  bool any = false;
  for (size_t i = 0; i < o->gpus.count; i++) {
    if (!fits[i]) continue;
    if (any) fputc(',', stdout);
    cli_json_string(stdout, o->gpus.gpu[order[i]].name);
    any = true;
  }
  fputs("],\"gpus\":[", stdout);
  for (size_t i = 0; i < o->gpus.count; i++) {
    fputs(i ? ",{\"name\":" : "{\"name\":", stdout);
    cli_json_string(stdout, o->gpus.gpu[order[i]].name);
    printf(",\"memory_bytes\":%" PRIu64 "}", o->gpus.gpu[order[i]].bytes);
  }
  fputc(']', stdout);
}

/* The "fits on" table: per (trace, layout) that fitted, the smallest GPU
 * of the list and every GPU it fits on. */
static void print_fits_on(const fit_opts_t *o, const uint64_t *fit_bytes, const bool *done,
                          const cm_torch_options_t *torch) {
  char r[32];
  cli_fmt_iec(o->reserve, r, sizeof r);
  printf("\nfits on: the GPUs whose memory (as the card reports it) holds the smallest device\n"
         "plus %s kept for the CUDA context and libraries (--reserve)\n\n", r);
  printf("  %-40s %-18s %-19s %12s  %-22s %s\n", "trace", "layout", "allocator", "needs",
         "smallest GPU", "fits on");
  for (size_t ti = 0; ti < o->trace_count; ti++) {
    const char *base = strrchr(o->traces[ti], '/');
    for (size_t l = 0; l < o->layout_count; l++) {
      size_t k = ti * o->layout_count + l;
      if (!done[k]) continue;
      size_t order[CLI_MAX_GPUS];
      bool fits[CLI_MAX_GPUS];
      uint64_t needs = fit_bytes[k] + o->reserve;
      size_t n = cli_gpus_fits(&o->gpus, needs, order, fits);
      char nb[32], smallest[96] = "none of the list", list[CLI_MAX_GPUS * 52] = "";
      cli_fmt_iec(needs, nb, sizeof nb);
      size_t len = 0;
      for (size_t i = 0; i < o->gpus.count; i++) {
        if (!fits[i]) continue;
        const cli_gpu_t *g = &o->gpus.gpu[order[i]];
        if (!len) {
          char gb[32];
          cli_fmt_iec(g->bytes, gb, sizeof gb);
          snprintf(smallest, sizeof smallest, "%s (%s)", g->name, gb);
        }
        int w = snprintf(list + len, sizeof list - len, "%s%s", len ? ", " : "", g->name);
        if (w > 0 && (size_t)w < sizeof list - len) len += (size_t)w;
      }
      if (!n && o->gpus.count) {
        char gb[32];
        const cli_gpu_t *g = &o->gpus.gpu[order[o->gpus.count - 1]];
        cli_fmt_iec(g->bytes, gb, sizeof gb);
        snprintf(list, sizeof list, "(the largest, %s, has %s)", g->name, gb);
      }
      printf("  %-40.40s %-18.18s %-19s %12s  %-22s %s\n", base ? base + 1 : o->traces[ti],
             o->layouts[l], allocator_label(o->layouts[l], &torch[l]), nb, smallest, list);
    }
  }
}

int cm_cli_fit(int argc, char **argv) {
  fit_opts_t o;
  memset(&o, 0, sizeof o);
  int prc = fit_parse_args(argc, argv, &o);
  if (prc) {
    free(o.traces);
    return prc < 0 ? 0 : prc;
  }
  int status = 0;
  cm_diag_t d;
  cm_diag_clear(&d);
  cm_config_t cfg;
  cm_config_init(&cfg);
  char config_used[600];
  if (cli_config_load("fit", o.config_path, o.no_config, &cfg, config_used, sizeof config_used)) {
    cm_config_free(&cfg);
    free(o.traces);
    return 1;
  }
  if (o.persistent_memory &&
      cm_config_set(&cfg, "memory.persistent_memory", o.persistent_memory, &d) != CM_OK) {
    fprintf(stderr, "cubemem fit: --persistent-memory: %s\n", d.message);
    cm_config_free(&cfg);
    free(o.traces);
    return 2;
  }
  cm_device_props_t props = {.max_page_size = o.capacity / 4,
                             .alignment = o.alignment ? o.alignment : 512};
  static cm_pool_options_t pools[FIT_MAX_LAYOUTS][CM_MAX_DYNAMIC_POOLS];
  static cli_fit_layout_t resolve[FIT_MAX_LAYOUTS];
  size_t counts[FIT_MAX_LAYOUTS];
  cm_torch_options_t torch[FIT_MAX_LAYOUTS]; /* PyTorch layouts (counts[l] == 0) */
  if (cli_torch_check_conf("fit", o.torch_conf, o.layouts, o.layout_count)) {
    cm_config_free(&cfg);
    free(o.traces);
    return 2;
  }
  for (size_t l = 0; l < o.layout_count; l++) { /* checked once, with its messages */
    resolve[l].text = o.layouts[l];
    resolve[l].alignment = o.alignment;
    counts[l] = 0;
    int lrc = cli_torch_check_name("fit", o.layouts[l]);
    if (!lrc)
      lrc = cli_torch_is_layout(o.layouts[l])
                ? cli_torch_options("fit", o.layouts[l], o.torch_conf, o.capacity, &torch[l])
                : cli_parse_layout("fit", o.layouts[l], props, pools[l], CM_MAX_DYNAMIC_POOLS,
                                   &counts[l]);
    if (lrc) {
      cm_config_free(&cfg);
      free(o.traces);
      return lrc;
    }
  }
  uint64_t *fit_bytes = calloc(o.trace_count * o.layout_count, sizeof *fit_bytes);
  bool *fit_done = calloc(o.trace_count * o.layout_count, sizeof *fit_done);
  if (!fit_bytes || !fit_done) {
    fprintf(stderr, "cubemem fit: out of memory\n");
    free(fit_bytes);
    free(fit_done);
    cm_config_free(&cfg);
    free(o.traces);
    return 1;
  }
  if (!o.json) {
    char cap[64];
    cli_fmt_device(o.capacity, cap, sizeof cap);
    printf("smallest device on which each trace replays with no failed reservation\n"
           "(simulated device; each capacity C resolves the layouts as 'cubemem replay\n"
           "--device-memory C' does; 'on device' is the replay on %s, as 'cubemem replay'\n"
           "reports it, with its modelled driver time (%s); grid ", cap, o.costs.name);
    cli_fmt_iec(o.grid, cap, sizeof cap);
    printf("%s, config %s)\n\n", cap, config_used);
    if (o.side_by_side)
      printf("no --pools: cubemem's default layout and PyTorch's caching allocator in its two\n"
             "modes, side by side.\n");
    printf("  the allocator each layout assumes:\n");
    for (size_t l = 0; l < o.layout_count; l++) {
      char what[320];
      if (cli_torch_is_layout(o.layouts[l])) cli_torch_describe(&torch[l], what, sizeof what);
      else snprintf(what, sizeof what, "cubemem, --pools %s", o.layouts[l]);
      printf("  %-24.24s %s\n", o.layouts[l], what);
    }
    printf("\n");
    printf("  %-40s %-18s %12s %12s %8s %12s %8s %7s %12s\n", "trace", "layout",
           "peak live", "on device", "ratio", "fits in", "ratio", "replays", "driver time");
  }
  cli_trace_options_t to = {.skip_bad = o.skip_bad, .snapshot_device = o.snapshot_device,
                            .free_on_requested = o.free_on_requested};
  for (size_t ti = 0; ti < o.trace_count && status != 1; ti++) {
    const char *tname = o.traces[ti];
    cm_trace_t *t = NULL;
    cli_trace_info_t tinfo;
    memset(&tinfo, 0, sizeof tinfo);
    if (cli_trace_load("fit", tname, &to, &t, &tinfo)) { /* CSV or snapshot; prints warnings */
      status = 1;
      break;
    }
    for (size_t l = 0; l < o.layout_count; l++) /* a snapshot's recorded PyTorch options */
      if (cli_torch_is_layout(o.layouts[l]) &&
          cli_torch_options_for("fit", o.layouts[l], tinfo.is_snapshot ? tinfo.snap.alloc_conf : NULL,
                                o.torch_conf, o.capacity, &torch[l]))
        status = 2;
    if (status == 2) {
      cm_trace_free(t);
      break;
    }
    for (size_t l = 0; l < o.layout_count; l++) {
      cm_manager_config_t mc;
      cm_manager_config_init(&mc);
      mc.name = "fit";
      mc.props = props;
      mc.pools = pools[l];
      mc.pool_count = counts[l];
      mc.persistent_memory = cfg.persistent_memory;
      mc.relocate = o.relocate;
      cm_fit_options_t fo;
      cm_fit_options_init(&fo);
      fo.grid = o.grid;
      fo.confirmations = o.confirmations;
      fo.configure = cli_fit_configure;
      fo.configure_arg = &resolve[l];
      fo.unconstrained_capacity = o.capacity;
      fo.per_stream = !o.merge_streams;
      fo.explain_below = true; /* what keeps it off one grid step less */
      fit_progress_t pc = {tname, o.layouts[l]};
      if (o.progress) {
        fo.progress = on_fit_progress;
        fo.progress_arg = &pc;
      }
      cm_fit_result_t fr;
      cm_diag_clear(&d);
      bool is_torch = cli_torch_is_layout(o.layouts[l]);
      int rc = is_torch ? cm_torch_fit(t, &torch[l], &fo, &fr, &d)
                        : cm_replay_fit(t, &mc, &fo, &fr, &d);
      if (o.progress) fprintf(stderr, "\r\033[K");
      if (rc != CM_OK) {
        fprintf(stderr, "cubemem fit: %s [%s]: %s\n", tname, o.layouts[l],
                d.message[0] ? d.message : cm_strerror(rc));
        status = 1;
        continue;
      }
      fit_bytes[ti * o.layout_count + l] = fr.fit_bytes;
      fit_done[ti * o.layout_count + l] = true;
      double unl = fr.peak_live_bytes ? (double)fr.unconstrained_peak / (double)fr.peak_live_bytes : 0;
      if (o.json) {
        fputs("{\"trace\":", stdout);
        cli_json_string(stdout, tname);
        fputs(",\"layout\":", stdout);
        cli_json_string(stdout, o.layouts[l]);
        printf(",\"allocator\":\"%s\"", is_torch ? "pytorch" : "cubemem");
        if (is_torch) {
          char conf[256];
          cm_torch_options_format(&torch[l], conf, sizeof conf);
          fputs(",\"torch_conf\":", stdout);
          cli_json_string(stdout, conf);
        }
        printf(",\"device_memory\":%" PRIu64 ",\"grid\":%" PRIu64 ",\"peak_live_bytes\":%" PRIu64
               ",\"unconstrained_peak_reserved\":%" PRIu64 ",\"unconstrained_over_live\":%.6f"
               ",\"unconstrained_device_memory\":%" PRIu64
               ",\"unconstrained_failed_allocs\":%" PRIu64
               ",\"fit_bytes\":%" PRIu64 ",\"fit_over_live\":%.6f,\"replays\":%u"
               ",\"nonmonotone\":%u,\"first_nonmonotone\":%" PRIu64 ",\"config\":",
               o.capacity, o.grid, fr.peak_live_bytes, fr.unconstrained_peak, unl,
               fr.unconstrained_capacity, fr.unconstrained_failed, fr.fit_bytes,
               fr.ratio, fr.replays, fr.nonmonotone, fr.first_nonmonotone);
        cli_json_string(stdout, config_used);
        fputc(',', stdout);
        cli_driver_time_json(stdout, &o.costs, &fr.unconstrained_storage, false);
        fputc(',', stdout);
        fits_json(&o, fr.fit_bytes);
        below_json(&fr);
        fputs("}\n", stdout);
      } else {
        char a[32], b[32], c[32];
        cm_format_bytes(fr.peak_live_bytes, a, sizeof a);
        cm_format_bytes(fr.unconstrained_peak, b, sizeof b);
        cm_format_bytes(fr.fit_bytes, c, sizeof c);
        const char *base = strrchr(tname, '/');
        cm_driver_time_t dt;
        cm_driver_time_model(&o.costs, &fr.unconstrained_storage, &dt);
        char ms[32];
        cli_fmt_ms(dt.total_ns, ms, sizeof ms);
        printf("  %-40.40s %-18.18s %12s %12s %8.4f %12s %8.4f %7u %12s\n",
               base ? base + 1 : tname, o.layouts[l], a, b, unl, c, fr.ratio, fr.replays, ms);
        printf("  %-40s %-18s %12" PRIu64 " %12" PRIu64 " %8s %12" PRIu64 "\n", "", "  (bytes)",
               fr.peak_live_bytes, fr.unconstrained_peak, "", fr.fit_bytes);
        print_kinds(&dt);
        if (fr.unconstrained_failed)
          printf("  %-40s note: %" PRIu64 " reservations failed on the --device-memory device;"
                 " the search went above it\n", "", fr.unconstrained_failed);
        if (fr.nonmonotone) {
          cm_format_bytes(fr.first_nonmonotone, a, sizeof a);
          printf("  %-40s note: %u larger capacities failed (first %s); the result is the "
                 "smallest from which every confirmed capacity fits\n",
                 "", fr.nonmonotone, a);
        }
        print_below(&fr, o.grid);
      }
      fflush(stdout);
    }
    cm_trace_free(t);
  }
  if (!o.json && status != 2) print_fits_on(&o, fit_bytes, fit_done, torch);
  free(fit_bytes);
  free(fit_done);
  cm_config_free(&cfg);
  free(o.traces);
  return status;
}
