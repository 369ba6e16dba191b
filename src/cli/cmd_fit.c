/*
 * cmd_fit.c - `cubemem fit TRACE... [--pools L]...`: the smallest device
 * memory on which each trace replays with no failed reservation, per layout
 * ("which GPU does this job need"), through cm_replay_fit.
 *
 * The device is the simulated one, refusing to go over its capacity and
 * enforcing the CUDA driver's virtual-memory rules, so the figure predicts a
 * real device with that much free memory. Layouts are resolved once for the
 * device given by --device-memory (presets use max page = SIZE / 4), and the
 * search varies only the capacity. Output: a table (text) or one JSON object
 * per (trace, layout) line. Exit codes: 0 ok, 1 a trace could not be read or
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
#include "cubemem/config.h"
#include "cubemem/cubemem.h"
#include "cubemem/replay.h"

#define FIT_MAX_LAYOUTS 16

typedef struct fit_opts {
  uint64_t capacity, alignment, grid;
  unsigned confirmations;
  const char *layouts[FIT_MAX_LAYOUTS];
  size_t layout_count;
  const char *persistent_memory;
  const char *config_path;  /* --config */
  bool no_config;           /* --no-config */
  int snapshot_device;      /* --snapshot-device, -1 = first with history */
  bool free_on_requested;   /* --snapshot-free-on requested */
  bool json, skip_bad, progress;
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
          "options:\n"
          "  --pools LAYOUT         default | subslices | exclusive-pages | adaptive | an\n"
          "                         explicit list\n"
          "                         (as for replay). Repeat to compare layouts.\n"
          "  --device-memory SIZE   the device the layouts are resolved for (default 80GiB;\n"
          "                         presets use max page = SIZE / 4)\n"
          "  --alignment N          pool alignment in bytes, a power of two (default 512)\n"
          "  --persistent-memory M  enabled | size-match | disabled | enforced\n"
          "  --config PATH          the configuration (cubecl.toml, or burn.toml's [cubecl]);\n"
          "                         default: discovered from the current directory upward\n"
          "  --no-config            use no configuration file\n"
          "  --snapshot-device N    the device of a PyTorch snapshot (default: the first with\n"
          "                         trace entries)\n"
          "  --snapshot-free-on E   completed (default) | requested\n"
          "  --grid SIZE            search grid (default 2MiB)\n"
          "  --confirm N            larger capacities replayed to confirm (default 7)\n"
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
  o->progress = isatty(2);
  o->snapshot_device = -1;
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
    } else if (!strcmp(a, "--skip-bad-lines")) {
      o->skip_bad = true;
    } else if (!strcmp(a, "--no-progress")) {
      o->progress = false;
    } else if (!strcmp(a, "--no-config")) {
      o->no_config = true;
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
      } else if (cli_size_option("fit", "--confirm", v, true, &n)) {
        return 2;
      } else {
        if (n > 1000) {
          fprintf(stderr, "cubemem fit: --confirm %s: at most 1000\n", v);
          return 2;
        }
        o->confirmations = (unsigned)n;
      }
    } else if (a[0] == '-' && a[1]) {
      static const char *const all[] = {
          "--pools", "--device-memory", "--alignment", "--persistent-memory", "--grid",
          "--confirm", "--config", "--no-config", "--snapshot-device", "--snapshot-free-on",
          "--json", "--skip-bad-lines", "--no-progress", "--help"};
      return cli_unknown_option("fit", a, all, sizeof all / sizeof all[0]);
    } else {
      o->traces[o->trace_count++] = a;
    }
  }
  if (!o->trace_count) {
    fit_usage(stderr);
    return 2;
  }
  if (!o->layout_count) o->layouts[o->layout_count++] = "default";
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
  size_t counts[FIT_MAX_LAYOUTS];
  for (size_t l = 0; l < o.layout_count; l++) {
    int lrc = cli_parse_layout("fit", o.layouts[l], props, pools[l], CM_MAX_DYNAMIC_POOLS,
                               &counts[l]);
    if (lrc) {
      cm_config_free(&cfg);
      free(o.traces);
      return lrc;
    }
  }
  if (!o.json) {
    char cap[64];
    cli_fmt_device(o.capacity, cap, sizeof cap);
    printf("smallest device on which each trace replays with no failed reservation\n"
           "(simulated device, layouts resolved for %s, grid ", cap);
    cli_fmt_iec(o.grid, cap, sizeof cap);
    printf("%s, config %s)\n\n", cap, config_used);
    printf("  %-40s %-16s %12s %12s %8s %12s %8s %7s\n", "trace", "layout",
           "peak live", "unlimited", "ratio", "fits in", "ratio", "replays");
  }
  cli_trace_options_t to = {.skip_bad = o.skip_bad, .snapshot_device = o.snapshot_device,
                            .free_on_requested = o.free_on_requested};
  for (size_t ti = 0; ti < o.trace_count && status != 1; ti++) {
    const char *tname = o.traces[ti];
    cm_trace_t *t = NULL;
    if (cli_trace_load("fit", tname, &to, &t, NULL)) { /* CSV or snapshot; prints warnings */
      status = 1;
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
      cm_fit_options_t fo;
      cm_fit_options_init(&fo);
      fo.grid = o.grid;
      fo.confirmations = o.confirmations;
      fit_progress_t pc = {tname, o.layouts[l]};
      if (o.progress) {
        fo.progress = on_fit_progress;
        fo.progress_arg = &pc;
      }
      cm_fit_result_t fr;
      cm_diag_clear(&d);
      int rc = cm_replay_fit(t, &mc, &fo, &fr, &d);
      if (o.progress) fprintf(stderr, "\r\033[K");
      if (rc != CM_OK) {
        fprintf(stderr, "cubemem fit: %s [%s]: %s\n", tname, o.layouts[l],
                d.message[0] ? d.message : cm_strerror(rc));
        status = 1;
        continue;
      }
      double unl = fr.peak_live_bytes ? (double)fr.unconstrained_peak / (double)fr.peak_live_bytes : 0;
      if (o.json) {
        fputs("{\"trace\":", stdout);
        cli_json_string(stdout, tname);
        fputs(",\"layout\":", stdout);
        cli_json_string(stdout, o.layouts[l]);
        printf(",\"device_memory\":%" PRIu64 ",\"grid\":%" PRIu64 ",\"peak_live_bytes\":%" PRIu64
               ",\"unconstrained_peak_reserved\":%" PRIu64 ",\"unconstrained_over_live\":%.6f"
               ",\"fit_bytes\":%" PRIu64 ",\"fit_over_live\":%.6f,\"replays\":%u"
               ",\"nonmonotone\":%u,\"first_nonmonotone\":%" PRIu64 ",\"config\":",
               o.capacity, o.grid, fr.peak_live_bytes, fr.unconstrained_peak, unl, fr.fit_bytes,
               fr.ratio, fr.replays, fr.nonmonotone, fr.first_nonmonotone);
        cli_json_string(stdout, config_used);
        fputs("}\n", stdout);
      } else {
        char a[32], b[32], c[32];
        cm_format_bytes(fr.peak_live_bytes, a, sizeof a);
        cm_format_bytes(fr.unconstrained_peak, b, sizeof b);
        cm_format_bytes(fr.fit_bytes, c, sizeof c);
        const char *base = strrchr(tname, '/');
        printf("  %-40.40s %-16.16s %12s %12s %8.4f %12s %8.4f %7u\n", base ? base + 1 : tname,
               o.layouts[l], a, b, unl, c, fr.ratio, fr.replays);
        printf("  %-40s %-16s %12" PRIu64 " %12" PRIu64 " %8s %12" PRIu64 "\n", "", "  (bytes)",
               fr.peak_live_bytes, fr.unconstrained_peak, "", fr.fit_bytes);
        if (fr.nonmonotone) {
          cm_format_bytes(fr.first_nonmonotone, a, sizeof a);
          printf("  %-40s note: %u larger capacities failed (first %s); the result is the "
                 "smallest from which every confirmed capacity fits\n",
                 "", fr.nonmonotone, a);
        }
      }
      fflush(stdout);
    }
    cm_trace_free(t);
  }
  cm_config_free(&cfg);
  free(o.traces);
  return status;
}
