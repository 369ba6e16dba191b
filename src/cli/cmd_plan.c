/*
 * cmd_plan.c - `cubemem plan TRACE`: measure a pool plan (spec §6).
 *
 * Flow. The trace is replayed once through a manager with the given layout
 * (default: the library's default) under a dry run
 * (cm_manager_dry_run_begin): sliced pages, direct and persistent slices
 * and arena memory are reserved lazily, so no device memory is paid for, yet
 * placement, coalescing and the peaks are exactly those of a real run
 * (placement is deterministic first-fit). Each dynamic pool's measured peak
 * is then read from its report: pages_peak x page size for sliced pools,
 * bytes_reserved_peak otherwise.
 *
 * The plan is the same pool list with the cappable pools (sliced, arena)
 * capped at their measured peak (max_pool_size / cap=); exclusive and direct
 * pools have no cap and are kept as given. If the last pool ends up capped,
 * an uncapped copy of it is appended, so a workload larger than the one
 * measured spills there instead of failing. Replaying the same trace with the
 * plan places every request exactly as the measuring run did (a pool never
 * needs more than its peak), so it never reserves more. The plan is replayed
 * once more (dry) as a check, parsed back from its text.
 *
 * Output: a human summary, then - always as the LAST line - the planned
 * layout in the syntax `cubemem replay --pools` and cm_pools_parse accept.
 * Exit codes: 0 ok, 3 a reservation failed (the trace does not fit the
 * device with this layout), 1 the trace could not be read or a replay failed,
 * 2 usage errors.
 *
 * Exports cm_cli_plan (cli.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli.h"
#include "cubemem/cubemem.h"
#include "cubemem/replay.h"

typedef struct plan_opts {
  uint64_t capacity;
  uint64_t alignment;
  const char *layout;
  const char *trace;
  bool skip_bad;
  const char *config_path;
  bool no_config;
  int snapshot_device;
  bool free_on_requested;
  cm_driver_costs_t costs; /* --driver-costs */
} plan_opts_t;

static void usage(FILE *out) {
  fprintf(out,
          "usage: cubemem plan [options] TRACE\n"
          "\n"
          "Replay an allocation trace (RMM CSV or a PyTorch snapshot) under a dry run - no device memory is\n"
          "reserved - measure the peak of every pool, and print a layout whose pools are\n"
          "capped at those peaks. The LAST line of the output is that layout, ready for\n"
          "`cubemem replay --pools` (or cm_pools_parse / install_pools).\n"
          "\n"
          "options:\n"
          "  --device-memory SIZE   simulated device capacity (default 80GiB); presets use\n"
          "                         max page = SIZE / 4 and alignment 512, as `replay` does\n"
          "  --alignment N          pool alignment in bytes (default 512)\n"
          "  --pools LAYOUT         the layout to measure (default: default)\n"
          "  --config PATH          the configuration (cubecl.toml, or burn.toml's [cubecl]);\n"
          "                         default: discovered from the current directory upward\n"
          "  --no-config            use no configuration file\n"
          "  --snapshot-device N    the device of a PyTorch snapshot (default: the first with\n"
          "                         trace entries)\n"
          "  --snapshot-free-on E   completed (default) | requested\n"
          "  --driver-costs C       the driver-time model of the layout and the plan (each\n"
          "                         replayed once more, not dry): a100 (default), fast, or a\n"
          "                         TOML file ([driver_costs])\n"
          "  --skip-bad-lines       skip (and count) malformed trace lines\n"
          "\n" CLI_SIZE_HELP);
}

static int parse_args(int argc, char **argv, plan_opts_t *o) {
  o->capacity = 80ull << 30;
  o->alignment = 512;
  o->layout = "default";
  if (cm_driver_costs_builtin("a100", &o->costs) != CM_OK) return 1;
  o->snapshot_device = -1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      return -1;
    }
    if (!strcmp(a, "--skip-bad-lines")) {
      o->skip_bad = true;
      continue;
    }
    if (!strcmp(a, "--no-config")) {
      o->no_config = true;
      continue;
    }
    if (a[0] != '-' || !strcmp(a, "-")) {
      if (o->trace) {
        fprintf(stderr, "cubemem plan: one trace at a time ('%s' and '%s' given)\n", o->trace, a);
        return 2;
      }
      o->trace = a;
      continue;
    }
    static const char *const names[] = {"--device-memory", "--alignment", "--pools", "--config",
                                        "--snapshot-device", "--snapshot-free-on",
                                        "--driver-costs"};
    const char *name = NULL, *val = NULL;
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
      size_t L = strlen(names[k]);
      if (strncmp(a, names[k], L) || (a[L] != '\0' && a[L] != '=')) continue;
      name = names[k];
      val = a[L] == '=' ? a + L + 1 : (i + 1 < argc ? argv[++i] : NULL);
      break;
    }
    if (!name) {
      static const char *const all[] = {"--device-memory", "--alignment", "--pools", "--config",
                                        "--snapshot-device", "--snapshot-free-on",
                                        "--driver-costs", "--no-config",
                                        "--skip-bad-lines", "--help"};
      return cli_unknown_option("plan", a, all, sizeof all / sizeof all[0]);
    }
    if (!val) {
      fprintf(stderr, "cubemem plan: %s needs a value\n", name);
      return 2;
    }
    if (!strcmp(name, "--pools")) {
      o->layout = val;
    } else if (!strcmp(name, "--driver-costs")) {
      if (cli_driver_costs_option("plan", val, &o->costs)) return 2;
    } else if (!strcmp(name, "--config")) {
      o->config_path = val;
    } else if (!strcmp(name, "--snapshot-device")) {
      char *end;
      long dv = strtol(val, &end, 10);
      if (!*val || *end || dv < 0 || dv > 65535) {
        fprintf(stderr, "cubemem plan: bad --snapshot-device '%s' (a device index: 0, 1, ...)\n", val);
        return 2;
      }
      o->snapshot_device = (int)dv;
    } else if (!strcmp(name, "--snapshot-free-on")) {
      if (strcmp(val, "completed") && strcmp(val, "requested")) {
        fprintf(stderr, "cubemem plan: bad --snapshot-free-on '%s' (completed or requested)\n", val);
        return 2;
      }
      o->free_on_requested = !strcmp(val, "requested");
    } else if (!strcmp(name, "--alignment")) {
      if (cli_alignment_option("plan", val, &o->alignment)) return 2;
    } else {
      if (cli_device_memory_option("plan", val, &o->capacity)) return 2;
    }
  }
  if (!o->trace) {
    fprintf(stderr, "cubemem plan: no trace given\n\n");
    usage(stderr);
    return 2;
  }
  return 0;
}

/* One replay of `t` through a fresh simulated device and manager (pm:
 * persistent_memory of the configuration in force), dry unless `real`. */
static int replay_on_sim(const cm_trace_t *t, const cm_pool_options_t *pools, size_t n,
                         cm_device_props_t props, uint64_t capacity, cm_persistent_memory_t pm,
                         bool real, cm_replay_result_t *res, cm_diag_t *d) {
  cm_storage_t *st = NULL;
  int rc = cm_storage_sim_create(capacity, true, 0, &st);
  if (rc) {
    snprintf(d->message, sizeof d->message, "cannot create the simulated device: %s",
             cm_strerror(rc));
    return rc;
  }
  cm_manager_config_t mc;
  cm_manager_config_init(&mc);
  mc.name = "plan";
  mc.props = props;
  mc.pools = pools;
  mc.pool_count = n;
  mc.persistent_memory = pm;
  cm_manager_t *m = NULL;
  rc = cm_manager_create(st, &mc, &m, d);
  if (rc) {
    cm_storage_destroy(st);
    return rc;
  }
  if (!real) cm_manager_dry_run_begin(m);
  rc = cm_replay_run(t, m, NULL, res, d);
  if (!real) cm_manager_dry_run_end(m);
  cm_manager_destroy(m);
  return rc;
}

static bool cappable(cm_pool_kind_t k) { return k == CM_POOL_SLICED || k == CM_POOL_ARENA; }

/* The measured peak of a pool in bytes (sliced: whole pages). */
static uint64_t measured_peak(const cm_pool_report_t *r) {
  if (r->options.kind == CM_POOL_SLICED) return r->pages_peak * r->options.page_size;
  return r->bytes_reserved_peak;
}

/* Build the planned list into out (room for CM_MAX_DYNAMIC_POOLS). */
static size_t make_plan(const cm_pool_options_t *in, size_t n, const cm_pool_report_t *rep,
                        cm_pool_options_t *out) {
  for (size_t i = 0; i < n; i++) {
    cm_pool_options_t o = in[i];
    if (cappable(o.kind)) {
      uint64_t cap = measured_peak(&rep[i]);
      if (o.kind == CM_POOL_SLICED && cap < o.page_size) cap = o.page_size; /* smallest legal */
      if (!o.has_max_pool_size || cap < o.max_pool_size) o.max_pool_size = cap;
      o.has_max_pool_size = true;
    }
    out[i] = o;
  }
  size_t m = n;
  if (n && out[n - 1].has_max_pool_size) {
    cm_pool_options_t tail = in[n - 1];
    tail.has_max_pool_size = false;
    tail.max_pool_size = 0;
    if (m < CM_MAX_DYNAMIC_POOLS) out[m++] = tail;
    else out[m - 1] = tail;
  }
  return m;
}

static void fmt_b(uint64_t v, char *buf, size_t cap) { cm_format_bytes(v, buf, cap); }

/* What the summary shows: the inputs, the measuring run, the plan and the
 * check of the plan. */
typedef struct plan_report {
  const plan_opts_t *o;
  const cm_trace_t *t;
  const cli_trace_info_t *tinfo;
  cm_device_props_t props;
  cm_persistent_memory_t pm;
  const char *config_used;
  const cm_pool_options_t *pools, *plan; /* measured layout (n pools), plan (m pools) */
  size_t n, m;
  const cm_replay_result_t *base, *check; /* the measuring run, the plan's replay */
  const char *text;                       /* the plan in the --pools syntax */
  /* the layout and the plan replayed for real (driver calls), or NULL */
  const cm_replay_result_t *base_real, *plan_real;
} plan_report_t;

/* The persistent_memory of the configuration (--config, discovered or
 * none) into *pm, its name into config_used. Returns the exit status. */
static int load_config(const plan_opts_t *o, cm_persistent_memory_t *pm, char *config_used,
                       size_t cap) {
  cm_config_t cfg;
  cm_config_init(&cfg);
  if (cli_config_load("plan", o->config_path, o->no_config, &cfg, config_used, cap)) {
    cm_config_free(&cfg);
    return 1;
  }
  *pm = cfg.persistent_memory;
  cm_config_free(&cfg);
  return 0;
}

/* Write the plan (m pools) as text into *text (malloc'd), check that it
 * parses back (into back) and replay it dry into *check. Returns the exit
 * status, with the reason on stderr. */
static int check_plan(const plan_opts_t *o, const cm_trace_t *t, cm_device_props_t props,
                      cm_persistent_memory_t pm, const cm_pool_options_t *plan, size_t m,
                      cm_pool_options_t *back, cm_replay_result_t *check, char **text) {
  size_t need = cm_pools_format(plan, m, NULL, 0);
  *text = malloc(need + 1);
  if (!*text) {
    fprintf(stderr, "cubemem plan: out of memory\n");
    return 1;
  }
  cm_pools_format(plan, m, *text, need + 1);

  /* the plan must read back as itself, and replay without failures */
  size_t nb = 0;
  cm_diag_t d;
  cm_diag_clear(&d);
  if (cm_pools_parse(*text, props, back, CM_MAX_DYNAMIC_POOLS, &nb, &d) != CM_OK) {
    fprintf(stderr, "cubemem plan: the planned layout '%s' does not parse back: %s\n", *text,
            d.message);
    return 1;
  }
  cm_diag_clear(&d);
  int rc = replay_on_sim(t, back, nb, props, o->capacity, pm, false, check, &d);
  if (rc) {
    fprintf(stderr, "cubemem plan: %s [planned]: %s\n", o->trace,
            d.message[0] ? d.message : cm_strerror(rc));
    return 1;
  }
  return 0;
}

/* The summary's head: trace, device, configuration, layout, measured peak. */
static void print_head(const plan_report_t *r) {
  char a[32], b[32], c[96];
  const cm_replay_result_t *base = r->base;
  printf("plan    %s\n", r->o->trace);
  cli_print_trace_summary(stdout, r->t);
  if (r->tinfo->is_snapshot) {
    fmt_b(r->tinfo->snap.reserved_bytes, a, sizeof a);
    char conf[300];
    cli_alloc_conf_text(&r->tinfo->snap, conf, sizeof conf);
    printf("        PyTorch snapshot, device %d of %d: PyTorch reserved %s in %" PRIu64
           " segments at dump, with\n        PYTORCH_CUDA_ALLOC_CONF %s (allocator_settings at "
           "dump)\n", r->tinfo->snap.device, r->tinfo->snap.device_count, a,
           r->tinfo->snap.segments, conf);
  }
  snprintf(c, sizeof c, "persistent memory %s (dry run: no device memory reserved)",
           cm_config_persistent_memory_name(r->pm));
  cli_print_device(stdout, "sim", r->o->capacity, r->props, c);
  printf("config  %s\n", r->config_used);
  printf("layout  %s\n", r->o->layout);
  fmt_b(base->manager_reserved_peak, a, sizeof a);
  cli_fmt_grouped(base->manager_reserved_peak, b, sizeof b);
  printf("        measured peak reserved %s (%s bytes), %.3f x the live peak\n", a, b,
         r->t->peak_live_bytes ? (double)base->manager_reserved_peak / (double)r->t->peak_live_bytes
                               : 0.0);
  if (base->failed_allocs)
    printf("        %" PRIu64 " reserves failed under this layout (first: %s, %" PRIu64
           " bytes: %s); their frees were skipped\n",
           base->failed_allocs, cm_err_name(base->first_failure), base->first_failure_size,
           base->first_failure_message);
}

/* The table of pools: measured peak and what the plan does with each. */
static void print_pools(const plan_report_t *r) {
  char a[32], b[32], c[96];
  size_t n = r->n;
  printf("\n  %4s  %-40s %10s %14s  %s\n", "#", "pool", "pages peak", "peak reserved",
         "planned");
  for (size_t i = 0; i <= n; i++) {
    const cm_pool_report_t *pr = &r->base->pool_reports[i];
    char desc[200];
    if (i == n) {
      if (!pr->pages_peak && !pr->largest_alloc) continue; /* unused persistent pool */
      snprintf(desc, sizeof desc, "persistent");
    } else {
      cm_pools_format(&r->pools[i], 1, desc, sizeof desc);
    }
    fmt_b(measured_peak(pr), a, sizeof a);
    if (i == n) snprintf(c, sizeof c, "(not part of the layout)");
    else if (cappable(r->pools[i].kind)) {
      fmt_b(r->plan[i].max_pool_size, b, sizeof b);
      snprintf(c, sizeof c, "cap %s", b);
    } else snprintf(c, sizeof c, "kept (no cap)");
    char idx[8];
    if (i == n) snprintf(idx, sizeof idx, "P");
    else snprintf(idx, sizeof idx, "%zu", i);
    printf("  %4s  %-40.40s %10" PRIu64 " %14s  %s\n", idx, desc, pr->pages_peak, a, c);
  }
  if (r->m > n) printf("  %4zu  %-40s %10s %14s  %s\n", n, "(uncapped copy of the last pool)",
                       "-", "-", "takes what exceeds the plan");
}

/* One line of modelled driver time: total, calls, then by kind. */
static void driver_line(const char *label, const cm_driver_costs_t *c, const cm_replay_result_t *r) {
  cm_driver_time_t t;
  cm_driver_time_model(c, &r->storage, &t);
  char ms[32], n[32];
  cli_fmt_ms(t.total_ns, ms, sizeof ms);
  cli_fmt_grouped(r->driver_calls, n, sizeof n);
  printf("        %-7s %s in %s driver calls", label, ms, n);
  const struct {
    const char *name;
    uint64_t ns;
  } k[] = {{"create", t.create_ns},   {"map", t.map_ns},         {"set access", t.set_access_ns},
           {"unmap", t.unmap_ns},     {"release", t.release_ns}, {"stream wait", t.sync_ns},
           {"alloc", t.alloc_ns},     {"free", t.free_ns},       {"reserve VA", t.reserve_ns},
           {"free VA", t.address_free_ns}, {"memory query", t.mem_query_ns}};
  bool any = false;
  for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
    if (!k[i].ns) continue;
    cli_fmt_ms(k[i].ns, ms, sizeof ms);
    printf("%s %s %s", any ? "," : ":", k[i].name, ms);
    any = true;
  }
  printf("\n");
}

/* The modelled driver time of the layout and of the plan (--driver-costs). */
static void print_driver_time(const plan_report_t *r) {
  if (!r->base_real || !r->plan_real) return;
  printf("\ndriver  modelled time in the driver (%s costs; each replayed once more on the\n"
         "        simulated device, not dry):\n", r->o->costs.name);
  driver_line("layout", &r->o->costs, r->base_real);
  driver_line("plan", &r->o->costs, r->plan_real);
}

/* The check line and the planned layout (the last line). Returns the exit
 * status: 1 when the plan did worse than measured, 3 when reserves failed. */
static int print_check(const plan_report_t *r) {
  char a[32], b[32];
  const cm_replay_result_t *base = r->base, *check = r->check;
  int status = 0;
  fmt_b(check->manager_reserved_peak, a, sizeof a);
  cli_fmt_grouped(check->manager_reserved_peak, b, sizeof b);
  printf("\ncheck   the plan replays with %" PRIu64 " failed reserve%s, peak reserved %s (%s"
         " bytes)%s\n",
         check->failed_allocs, check->failed_allocs == 1 ? "" : "s", a, b,
         check->manager_reserved_peak <= base->manager_reserved_peak ? "" : "  [MORE than measured]");
  print_driver_time(r);
  bool fewer_calls = r->base_real && r->plan_real &&
                     r->plan_real->driver_calls < r->base_real->driver_calls;
  if (check->failed_allocs == 0 && !fewer_calls &&
      check->manager_reserved_peak >= base->manager_reserved_peak) {
    fmt_b(base->manager_reserved_peak, a, sizeof a);
    printf("\nnothing to plan: layout '%s' already sits at its measured peak (%s); the planned"
           "\n        layout below reserves the same with no fewer driver calls: it only caps the"
           "\n        pools at their peaks\n",
           r->o->layout, a);
  }
  printf("\nplanned layout (cubemem replay --pools '...', or cm_pools_parse):\n");
  printf("%s\n", r->text);
  if (check->failed_allocs > base->failed_allocs ||
      check->manager_reserved_peak > base->manager_reserved_peak)
    status = 1;
  if (status == 0 && (base->failed_allocs || check->failed_allocs)) {
    fprintf(stderr, "cubemem plan: %" PRIu64 " reservation%s failed in the dry run and %" PRIu64
            " in the check: the trace does not fit this device with this layout (try 'cubemem "
            "fit')\n",
            base->failed_allocs, base->failed_allocs == 1 ? "" : "s", check->failed_allocs);
    status = 3;
  }
  return status;
}

int cm_cli_plan(int argc, char **argv) {
  plan_opts_t o;
  memset(&o, 0, sizeof o);
  int prc = parse_args(argc, argv, &o);
  if (prc) return prc < 0 ? 0 : prc;

  cm_device_props_t props = {o.capacity / 4, o.alignment};
  static cm_pool_options_t pools[CM_MAX_DYNAMIC_POOLS], plan[CM_MAX_DYNAMIC_POOLS],
      back[CM_MAX_DYNAMIC_POOLS];
  size_t n = 0;
  int lrc = cli_parse_layout("plan", o.layout, props, pools, CM_MAX_DYNAMIC_POOLS, &n);
  if (lrc) return lrc;

  cm_persistent_memory_t pm = CM_PERSISTENT_ENABLED;
  char config_used[600];
  if (load_config(&o, &pm, config_used, sizeof config_used)) return 1;

  cli_trace_options_t to = {.skip_bad = o.skip_bad, .snapshot_device = o.snapshot_device,
                            .free_on_requested = o.free_on_requested};
  cli_trace_info_t tinfo;
  cm_trace_t *t = NULL;
  if (cli_trace_load("plan", o.trace, &to, &t, &tinfo)) return 1;

  cm_replay_result_t base, check;
  memset(&base, 0, sizeof base);
  memset(&check, 0, sizeof check);
  cm_diag_t d;
  cm_diag_clear(&d);
  int rc = replay_on_sim(t, pools, n, props, o.capacity, pm, false, &base, &d);
  if (rc) {
    fprintf(stderr, "cubemem plan: %s [%s]: %s\n", o.trace, o.layout,
            d.message[0] ? d.message : cm_strerror(rc));
    cm_trace_free(t);
    return 1;
  }
  size_t m = make_plan(pools, n, base.pool_reports, plan);
  char *text = NULL;
  int status = check_plan(&o, t, props, pm, plan, m, back, &check, &text);
  cm_replay_result_t base_real, plan_real;
  memset(&base_real, 0, sizeof base_real);
  memset(&plan_real, 0, sizeof plan_real);
  bool have_real = false;
  if (status == 0) { /* the driver calls: dry runs make none */
    cm_diag_clear(&d);
    have_real =
        replay_on_sim(t, pools, n, props, o.capacity, pm, true, &base_real, &d) == CM_OK &&
        replay_on_sim(t, plan, m, props, o.capacity, pm, true, &plan_real, &d) == CM_OK;
  }
  if (status == 0) {
    plan_report_t r = {&o,    t, &tinfo, props, pm,     config_used, pools,
                       plan,  n, m,      &base, &check, text,
                       have_real ? &base_real : NULL, have_real ? &plan_real : NULL};
    print_head(&r);
    print_pools(&r);
    status = print_check(&r);
  }
  free(text);
  cm_replay_result_free(&base);
  cm_replay_result_free(&check);
  cm_replay_result_free(&base_real);
  cm_replay_result_free(&plan_real);
  cm_trace_free(t);
  return status;
}
