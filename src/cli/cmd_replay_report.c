/*
 * cmd_replay_report.c - the reports of `cubemem replay` (cmd_replay.c runs
 * the replays): the side-by-side text report per trace with a per-pool table
 * per layout, the --json objects (also embedded in the --html page), the
 * --svg timeline and the --html page.
 *
 * Exports cli_replay_print_text, cli_replay_print_json,
 * cli_replay_json_object, cli_replay_write_svg and cli_replay_write_html
 * (cmd_replay.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd_replay.h"

/* ---- helpers --------------------------------------------------------------- */

static void fmt_bytes(uint64_t b, char *buf, size_t cap) { cm_format_bytes(b, buf, cap); }

static void fmt_grouped(uint64_t v, char *buf, size_t cap) { cli_fmt_grouped(v, buf, cap); }

static void json_string(FILE *f, const char *s) { cli_json_string(f, s); }

static int write_file(void *arg, const char *data, size_t len) {
  return fwrite(data, 1, len, (FILE *)arg) == len ? 0 : 1;
}

/* ---- reports ----------------------------------------------------------------- */

static double ratio(const cm_replay_result_t *r) {
  return r->peak_live_bytes ? (double)r->peak_reserved_bytes / (double)r->peak_live_bytes : 0.0;
}

/* "driver_calls":{kind: count} of *d (no leading comma), kinds in the order
 * of CM_STORAGE_CALLS. */
static void print_calls_json(FILE *f, const cm_storage_stats_t *d) {
  fprintf(f, "\"driver_calls\":{\"total\":%" PRIu64, cm_storage_stats_driver_calls(d));
#define CALL(field, key) fprintf(f, ",\"" key "\":%" PRIu64, d->field);
  CM_STORAGE_CALLS(CALL)
#undef CALL
  fputc('}', f);
}

/* --runs: "runs":[{"run":k,"failed_allocs":N,"driver_calls":{...},
 * "driver_time_model":{...}}, ...] (no leading comma). */
static void print_runs_json(FILE *f, const run_t *run, const env_t *env) {
  bool measured = strcmp(env->o->device, "sim") != 0;
  fputs("\"runs\":[", f);
  for (unsigned k = 0; k < run->nruns; k++) {
    fprintf(f, "%s{\"run\":%u,\"failed_allocs\":%" PRIu64 ",", k ? "," : "", k + 1,
            run->run_failed[k]);
    print_calls_json(f, &run->run_stats[k]);
    fputc(',', f);
    cli_driver_time_json(f, &env->o->costs, &run->run_stats[k], measured);
    fputc('}', f);
  }
  fputc(']', f);
}

/* "driver_calls": {kind: count}, "driver_time_ns": {operation: ns},
 * "driver_call_time_ns": {kind: ns} (zeros on sim), and the storage's errors
 * and contract violations. */
static void print_driver_json(FILE *f, const cm_replay_result_t *r) {
  const cm_storage_stats_t *d = &r->storage;
  fputc(',', f);
  print_calls_json(f, d);
  fprintf(f,
          ",\"driver_time_ns\":{\"alloc\":%" PRIu64 ",\"free\":%" PRIu64 ",\"map\":%" PRIu64
          ",\"unmap\":%" PRIu64 ",\"reserve\":%" PRIu64 "}",
          d->time_alloc_ns, d->time_free_ns, d->time_map_ns, d->time_unmap_ns, d->time_reserve_ns);
  fputs(",\"driver_call_time_ns\":{", f);
  const char *sep = "";
#define TIME(field, key) fprintf(f, "%s\"" key "\":%" PRIu64, sep, d->call_ns.field), sep = ",";
  CM_CALL_TIMES(TIME)
#undef TIME
  fputc('}', f);
  fprintf(f, ",\"storage_errors\":%" PRIu64 ",\"violations\":%" PRIu64, d->errors,
          d->violations);
}

/* "streams_merged" and "streams": the trace's streams, with each one's own
 * pools' figures when the replay was per stream (r->streams). */
static void print_streams_json(FILE *f, const cm_trace_t *t, const cm_replay_result_t *r) {
  fprintf(f, ",\"streams_merged\":%s,\"streams\":[",
          t->stream_count > 1 && !r->streams ? "true" : "false");
  for (size_t k = 0; k < t->stream_count; k++) {
    fprintf(f, "%s{\"stream\":%" PRIu64 ",\"allocs\":%" PRIu64 ",\"peak_live_bytes\":%" PRIu64,
            k ? "," : "", t->streams[k].id, t->streams[k].allocs, t->streams[k].peak_live_bytes);
    if (r->streams && k < r->stream_count) {
      const cm_replay_stream_result_t *s = &r->streams[k];
      fprintf(f, ",\"peak_reserved_bytes\":%" PRIu64 ",\"reserved_at_device_peak\":%" PRIu64
              ",\"reserved_at_end\":%" PRIu64 ",\"failed_allocs\":%" PRIu64,
              s->peak_reserved_bytes, s->reserved_at_device_peak, s->reserved_at_end,
              s->failed_allocs);
    }
    fputc('}', f);
  }
  fputc(']', f);
}

void cli_replay_print_json(FILE *f, const char *tname, const layout_t *lay, const cm_trace_t *t,
                           const run_t *run, const env_t *env) {
  const cm_replay_result_t *r = &run->res;
  fputs("{\"trace\":", f);
  json_string(f, tname);
  fputs(",\"layout\":", f);
  json_string(f, lay->text);
  fprintf(f, ",\"allocator\":\"%s\"", lay->torch ? "pytorch" : "cubemem");
  if (lay->torch) {
    char conf[256];
    cm_torch_options_format(&lay->torch_opts, conf, sizeof conf);
    fputs(",\"torch_conf\":", f);
    json_string(f, conf);
  }
  fprintf(f,
          ",\"device\":\"%s\",\"device_memory\":%" PRIu64 ",\"events\":%" PRIu64
          ",\"allocs\":%" PRIu64 ",\"frees\":%" PRIu64 ",\"peak_live_bytes\":%" PRIu64
          ",\"peak_reserved_bytes\":%" PRIu64 ",\"reserved_over_live\":%.6f"
          ",\"manager_reserved_peak\":%" PRIu64 ",\"reserved_at_end\":%" PRIu64
          ",\"device_allocs\":%" PRIu64 ",\"device_frees\":%" PRIu64
          ",\"device_maps\":%" PRIu64 ",\"device_unmaps\":%" PRIu64
          ",\"device_time_ns\":%" PRIu64 ",\"failed_allocs\":%" PRIu64,
          env->o->device, env->capacity, r->events, r->allocs, r->frees, r->peak_live_bytes,
          r->peak_reserved_bytes, ratio(r), r->manager_reserved_peak, r->reserved_at_end,
          r->device_allocs, r->device_frees, r->device_maps, r->device_unmaps, r->device_time_ns,
          r->failed_allocs);
  if (env->device_name[0]) {
    fputs(",\"device_name\":", f);
    json_string(f, env->device_name);
  }
  fputs(",\"config\":", f);
  json_string(f, env->o->config_used);
  if (env->tinfo && env->tinfo->is_snapshot)
    fprintf(f, ",\"snapshot_device\":%d,\"torch_reserved_bytes\":%" PRIu64
               ",\"torch_segments\":%" PRIu64 ",\"preexisting_allocs\":%" PRIu64,
            env->tinfo->snap.device, env->tinfo->snap.reserved_bytes, env->tinfo->snap.segments,
            env->tinfo->snap.preexisting);
  if (env->tinfo && env->tinfo->is_snapshot) { /* allocator_settings, null when not recorded */
    fputs(",\"torch_alloc_conf_at_dump\":", f);
    if (env->tinfo->snap.has_alloc_conf) json_string(f, env->tinfo->snap.alloc_conf);
    else fputs("null", f);
  }
  print_driver_json(f, r);
  fputc(',', f);
  cli_driver_time_json(f, &env->o->costs, &r->storage, strcmp(env->o->device, "sim") != 0);
  if (run->nruns) {
    fputc(',', f);
    print_runs_json(f, run, env);
  }
  if (env->o->relocate)
    fprintf(f, ",\"relocation\":{\"runs\":%" PRIu64 ",\"moves\":%" PRIu64
            ",\"bytes_copied\":%" PRIu64 ",\"abandoned\":%" PRIu64 ",\"skipped\":%" PRIu64
            ",\"copy_bandwidth_gbps\":%.1f,\"copy_time_ns\":%.0f",
            run->reloc.runs, run->reloc.moves, run->reloc.bytes_copied, run->reloc.abandoned,
            run->reloc.skipped, env->o->copy_gbps,
            cli_copy_time_ns(run->reloc.bytes_copied, env->o->copy_gbps));
  if (env->o->relocate) { /* with --html: when it relocated, for the timeline */
    if (run->marks) cli_reloc_marks_json(f, run->marks);
    fputc('}', f);
  }
  if (env->o->fit)
    fprintf(f, ",\"fit_bytes\":%" PRIu64 ",\"fit_over_live\":%.6f", run->fit_bytes,
            r->peak_live_bytes ? (double)run->fit_bytes / (double)r->peak_live_bytes : 0.0);
  if (r->failed_allocs) {
    fprintf(f, ",\"first_failure\":{\"status\":\"%s\",\"size\":%" PRIu64 ",\"event\":%" PRIu64
            ",\"time_us\":%" PRIu64 ",\"live_bytes\":%" PRIu64 ",\"reserved_bytes\":%" PRIu64
            ",\"message\":",
            cm_err_name(r->first_failure), r->first_failure_size, r->first_failure_event,
            r->first_failure_time_us, r->first_failure_live_bytes,
            r->first_failure_reserved_bytes);
    json_string(f, r->first_failure_message);
    fputc('}', f);
  }
  print_streams_json(f, t, r);
  if (run->from_state && env->state)
    fprintf(f, ",\"snapshot_start\":\"state\",\"start_segments\":%zu,\"start_reserved_bytes\":%" PRIu64
            ",\"start_blocks\":%zu,\"start_unplaced\":%" PRIu64,
            env->state->segment_count, env->state->reserved_bytes, env->state->block_count,
            run->start_unplaced);
  if (t->alloc_failures)
    fprintf(f, ",\"trace_first_failure\":{\"size\":%" PRIu64 ",\"time_us\":%" PRIu64
            ",\"live_bytes\":%" PRIu64 ",\"line\":%" PRIu64 "}",
            t->first_failure_size, t->first_failure_time_us, t->first_failure_live_bytes,
            t->first_failure_line);
  fprintf(f,
          ",\"unknown_frees\":%" PRIu64 ",\"trace_alloc_failures\":%" PRIu64
          ",\"duplicate_allocs\":%" PRIu64 ",\"bad_lines\":%" PRIu64 ",\"live_at_end\":%" PRIu64
          ",\"repeat\":%u,\"time_ns\":%" PRIu64 ",\"ns_per_op\":%.2f,\"pools\":[",
          t->unknown_frees, t->alloc_failures, t->duplicate_allocs, t->bad_lines, t->live_at_end,
          env->o->repeat, run->median_ns, run->ns_per_op);
  for (size_t j = 0; j <= r->pool_count; j++) {
    const cm_pool_report_t *p = &r->pool_reports[j];
    char desc[160];
    if (j == r->pool_count) snprintf(desc, sizeof desc, "persistent");
    else cm_pools_format(&p->options, 1, desc, sizeof desc);
    if (j) fputc(',', f);
    fputs("{\"pool\":", f);
    json_string(f, desc);
    fprintf(f,
            ",\"pages\":%" PRIu64 ",\"pages_peak\":%" PRIu64 ",\"reserved\":%" PRIu64
            ",\"reserved_peak\":%" PRIu64 ",\"largest_alloc\":%" PRIu64,
            p->pages, p->pages_peak, p->usage.bytes_reserved, p->bytes_reserved_peak,
            p->largest_alloc);
    if (p->options.kind == CM_POOL_ADAPTIVE)
      fprintf(f, ",\"outdated_pools\":%" PRIu64 ",\"outdated_pages\":%" PRIu64, p->outdated_pools,
              p->outdated_pages);
    if (p->options.kind == CM_POOL_ARENA)
      fprintf(f, ",\"stitched\":%" PRIu64, p->stitched_made);
    if (r->pool_reserved_at_peak)
      fprintf(f, ",\"reserved_at_device_peak\":%" PRIu64, r->pool_reserved_at_peak[j]);
    fputc('}', f);
  }
  fputs("]}\n", f);
}

char *cli_replay_json_object(const char *tname, const layout_t *lay, const cm_trace_t *t,
                             const run_t *run, const env_t *env) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f) return NULL;
  cli_replay_print_json(f, tname, lay, t, run, env);
  if (fclose(f) != 0) {
    free(buf);
    return NULL;
  }
  while (len && buf[len - 1] == '\n') buf[--len] = '\0';
  return buf;
}

/* The stack frames of trace file `path` when it is a snapshot (count 0 otherwise). */
static void snapshot_frames(const char *path, const opts_t *o, cm_snapshot_frames_t *fr) {
  memset(fr, 0, sizeof *fr);
  if (!strcmp(path, "-")) return; /* standard input cannot be read twice */
  FILE *f = fopen(path, "rb");
  if (!f) return;
  unsigned char head[2];
  size_t got = fread(head, 1, 2, f);
  long size = got == 2 && cm_snapshot_detect(head, 2) && !fseek(f, 0, SEEK_END) ? ftell(f) : -1;
  char *buf = size > 0 && !fseek(f, 0, SEEK_SET) ? malloc((size_t)size) : NULL;
  if (buf && fread(buf, 1, (size_t)size, f) == (size_t)size) {
    cm_snapshot_options_t so;
    cm_snapshot_options_init(&so);
    so.device = o->snapshot_device;
    so.free_on_requested = o->free_on_requested;
    if (cm_snapshot_frames(buf, (size_t)size, &so, fr, NULL) != CM_OK) memset(fr, 0, sizeof *fr);
  }
  free(buf);
  fclose(f);
}

int cli_replay_write_html(const char *path, const char *const *traces, size_t nt,
                          const layout_t *lays, const run_t *runs, size_t nl, const opts_t *o) {
  cm_replay_html_panel_t *panels = calloc(nt ? nt : 1, sizeof *panels);
  cm_snapshot_frames_t *frames = calloc(nt ? nt : 1, sizeof *frames);
  size_t ns = nt * nl;
  cm_replay_html_series_t *series = calloc(ns ? ns : 1, sizeof *series);
  int rc = panels && series && frames ? CM_OK : CM_ENOMEM;
  for (size_t ti = 0; ti < nt && rc == CM_OK; ti++) {
    snapshot_frames(traces[ti], o, &frames[ti]);
    panels[ti] = (cm_replay_html_panel_t){.title = traces[ti], .series = &series[ti * nl],
                                          .series_count = nl,
                                          .extra_json = frames[ti].table_json,
                                          .alloc_frames = (const char *const *)frames[ti].alloc_frames,
                                          .alloc_frames_count = frames[ti].count};
    for (size_t l = 0; l < nl; l++) {
      const run_t *r = &runs[ti * nl + l];
      series[ti * nl + l] = (cm_replay_html_series_t){lays[l].text, &r->res, r->rec, r->json};
    }
  }
  FILE *f = rc == CM_OK ? fopen(path, "w") : NULL;
  if (rc == CM_OK && !f) {
    fprintf(stderr, "cubemem replay: cannot write %s: %s\n", path, strerror(errno));
    rc = CM_EIO;
  } else if (f) {
    rc = cm_replay_html(panels, nt, NULL, write_file, f);
    if (fclose(f) != 0 && rc == CM_OK) rc = CM_EIO;
    if (rc != CM_OK) fprintf(stderr, "cubemem replay: cannot write %s: %s\n", path, cm_strerror(rc));
  } else {
    fprintf(stderr, "cubemem replay: out of memory writing %s\n", path);
  }
  for (size_t ti = 0; frames && ti < nt; ti++) cm_snapshot_frames_free(&frames[ti]);
  free(frames);
  free(series);
  free(panels);
  return rc == CM_OK ? 0 : 1;
}

/* "A / B" into a 64-byte table cell. */
static void fmt_pair(char *cell, uint64_t a, uint64_t b) {
  snprintf(cell, 64, "%" PRIu64 " / %" PRIu64, a, b);
}

/* A row of the side-by-side table: label, then one cell per layout. */
static void row(const char *label, char cells[][64], size_t n, size_t width) {
  printf("  %-20s", label);
  for (size_t i = 0; i < n; i++) printf("  %*s", (int)width, cells[i]);
  printf("\n");
}

/* The report's head: trace summary, snapshot and anomaly lines, device and
 * configuration. */
static void print_text_head(const char *tname, const cm_trace_t *t, const env_t *env) {
  char a[32], b[32];
  printf("trace   %s\n", tname);
  cli_print_trace_summary_streams(stdout, t, t->stream_count > 1 && !env->o->merge_streams);
  if (env->tinfo && env->tinfo->is_snapshot) {
    const cm_snapshot_info_t *si = &env->tinfo->snap;
    fmt_bytes(si->reserved_bytes, a, sizeof a);
    char conf[300];
    cli_alloc_conf_text(si, conf, sizeof conf);
    printf("        PyTorch snapshot, device %d of %d: %" PRIu64 " allocations live before "
           "recording; PyTorch reserved %s in %" PRIu64 " segments at dump, with\n"
           "        PYTORCH_CUDA_ALLOC_CONF %s (allocator_settings at dump)\n",
           si->device, si->device_count, si->preexisting, a, si->segments, conf);
    if (env->state) {
      fmt_bytes(env->state->reserved_bytes, a, sizeof a);
      printf("        the PyTorch layouts start from PyTorch's state when the history begins: %zu "
             "segments (%s), %zu blocks live (--snapshot-start state)\n",
             env->state->segment_count, a, env->state->block_count);
    }
  }
  if (t->unknown_frees || t->alloc_failures || t->duplicate_allocs || t->bad_lines)
    printf("        anomalies: %" PRIu64 " frees of unknown pointers, %" PRIu64
           " 'allocate failure' rows, %" PRIu64 " re-allocated live pointers, %" PRIu64
           " malformed lines skipped\n",
           t->unknown_frees, t->alloc_failures, t->duplicate_allocs, t->bad_lines);
  snprintf(b, sizeof b, "persistent memory %s",
           cm_config_persistent_memory_name(env->cfg->persistent_memory));
  char dev[320];
  if (env->device_name[0]) snprintf(dev, sizeof dev, "%s (%s)", env->o->device, env->device_name);
  else snprintf(dev, sizeof dev, "%s", env->o->device);
  cli_print_device(stdout, dev, env->capacity, env->props, b);
  printf("config  %s\n\n", env->o->config_used);
}

/* The table's first rows: layout names (width: the widest cell, set here),
 * live and reserved bytes, the ratio and what is reserved at the end. */
static void rows_bytes(const layout_t *lays, const run_t *runs, size_t n, size_t *width) {
  char c[MAX_LAYOUTS][64];
  *width = 12;
  for (size_t i = 0; i < n; i++) {
    size_t L = strlen(lays[i].text);
    if (L > 24) snprintf(c[i], 64, "%.21s...", lays[i].text);
    else snprintf(c[i], 64, "%s", lays[i].text);
    if (strlen(c[i]) > *width) *width = strlen(c[i]);
  }
  row("layout", c, n, *width);
  for (size_t i = 0; i < n; i++) fmt_bytes(runs[i].res.peak_live_bytes, c[i], 64);
  row("peak live", c, n, *width);
  for (size_t i = 0; i < n; i++) fmt_bytes(runs[i].res.peak_reserved_bytes, c[i], 64);
  row("peak reserved", c, n, *width);
  for (size_t i = 0; i < n; i++) fmt_grouped(runs[i].res.peak_reserved_bytes, c[i], 64);
  row("  (bytes)", c, n, *width);
  for (size_t i = 0; i < n; i++) {
    if (runs[i].res.failed_allocs) snprintf(c[i], 64, "run failed"); /* not a figure */
    else if (runs[i].res.peak_live_bytes) snprintf(c[i], 64, "%.3f", ratio(&runs[i].res));
    else snprintf(c[i], 64, "-");
  }
  row("reserved / live", c, n, *width);
  for (size_t i = 0; i < n; i++) fmt_bytes(runs[i].res.reserved_at_end, c[i], 64);
  row("reserved at end", c, n, *width);
}

/* The time in each kind of driver call, as the backend measured it: a row
 * per kind that took any time in some layout (none for a backend without
 * call_times). */
static void rows_call_times(const run_t *runs, size_t n, size_t width) {
  static const struct {
    const char *label;
    size_t off;
  } kinds[] = {
      {"  create", offsetof(cm_call_times_t, creates)},
      {"  map", offsetof(cm_call_times_t, maps)},
      {"  set access", offsetof(cm_call_times_t, set_access)},
      {"  unmap", offsetof(cm_call_times_t, unmaps)},
      {"  release", offsetof(cm_call_times_t, releases)},
      {"  wait for stream", offsetof(cm_call_times_t, syncs)},
      {"  alloc", offsetof(cm_call_times_t, allocs)},
      {"  free", offsetof(cm_call_times_t, frees)},
      {"  reserve VA", offsetof(cm_call_times_t, reserves)},
      {"  free VA", offsetof(cm_call_times_t, address_frees)},
      {"  memory queries", offsetof(cm_call_times_t, mem_queries)},
  };
  char c[MAX_LAYOUTS][64];
  for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
    bool any = false;
    for (size_t i = 0; i < n; i++) {
      uint64_t ns;
      memcpy(&ns, (const char *)&runs[i].res.storage.call_ns + kinds[k].off, sizeof ns);
      any |= ns != 0;
      snprintf(c[i], 64, "%.3f ms", (double)ns / 1e6);
    }
    if (any) row(kinds[k].label, c, n, width);
  }
}

/* The device rows: allocations and frees, driver calls by kind, what
 * PyTorch reserved, refused calls, time in the driver. */
static void rows_device(const run_t *runs, size_t n, size_t width, const env_t *env) {
  char c[MAX_LAYOUTS][64];
  for (size_t i = 0; i < n; i++) { /* VM maps and unmaps are counted below, not here */
    const cm_replay_result_t *r = &runs[i].res;
    fmt_pair(c[i], r->device_allocs - r->device_maps, r->device_frees - r->device_unmaps);
  }
  row("device allocs/frees", c, n, width);
  for (size_t i = 0; i < n; i++) fmt_grouped(runs[i].res.driver_calls, c[i], 64);
  row("driver calls", c, n, width);
  for (size_t i = 0; i < n; i++) fmt_pair(c[i], runs[i].res.storage.creates, runs[i].res.storage.map_calls);
  row("  create / map", c, n, width);
  for (size_t i = 0; i < n; i++) fmt_pair(c[i], runs[i].res.storage.unmap_calls, runs[i].res.storage.releases);
  row("  unmap / release", c, n, width);
  for (size_t i = 0; i < n; i++) snprintf(c[i], 64, "%" PRIu64, runs[i].res.storage.set_access);
  row("  set access", c, n, width);
  for (size_t i = 0; i < n; i++) fmt_pair(c[i], runs[i].res.storage.allocs, runs[i].res.storage.deallocs);
  row("  alloc / free", c, n, width);
  for (size_t i = 0; i < n; i++) fmt_pair(c[i], runs[i].res.storage.reserves, runs[i].res.storage.address_frees);
  row("  reserve / free VA", c, n, width);
  for (size_t i = 0; i < n; i++) snprintf(c[i], 64, "%" PRIu64, runs[i].res.storage.mem_queries);
  row("  memory queries", c, n, width);
  if (env->tinfo && env->tinfo->is_snapshot) {
    for (size_t i = 0; i < n; i++) fmt_bytes(env->tinfo->snap.reserved_bytes, c[i], 64);
    printf("  PyTorch at dump\n");
    row("  reserved", c, n, width);
    char conf[300];
    cli_alloc_conf_text(&env->tinfo->snap, conf, sizeof conf);
    printf("  %-20s  %s\n", "  settings", conf); /* one for every layout */
  }
  bool refused = false;
  for (size_t i = 0; i < n; i++) refused |= runs[i].res.storage.errors != 0;
  if (refused) {
    for (size_t i = 0; i < n; i++)
      snprintf(c[i], 64, "%" PRIu64 " (%" PRIu64 " violations)", runs[i].res.storage.errors,
               runs[i].res.storage.violations);
    row("driver errors", c, n, width);
  }
  if (strcmp(env->o->device, "sim") != 0) { /* real devices: time spent in driver calls */
    for (size_t i = 0; i < n; i++)
      snprintf(c[i], 64, "%.3f ms", (double)runs[i].res.device_time_ns / 1e6);
    row("time in driver calls", c, n, width);
    rows_call_times(runs, n, width);
  }
}

/* The modelled driver time (--driver-costs): the total per layout, then a
 * row per kind that costs time in some layout; with --runs, each run's
 * driver calls and modelled time. */
static void rows_model(const run_t *runs, size_t n, size_t width, const env_t *env) {
  static const struct {
    const char *label;
    size_t off;
  } kinds[] = {
      {"  create", offsetof(cm_driver_time_t, create_ns)},
      {"  map", offsetof(cm_driver_time_t, map_ns)},
      {"  set access", offsetof(cm_driver_time_t, set_access_ns)},
      {"  unmap", offsetof(cm_driver_time_t, unmap_ns)},
      {"  release", offsetof(cm_driver_time_t, release_ns)},
      {"  wait for stream", offsetof(cm_driver_time_t, sync_ns)},
      {"  alloc", offsetof(cm_driver_time_t, alloc_ns)},
      {"  free", offsetof(cm_driver_time_t, free_ns)},
      {"  reserve VA", offsetof(cm_driver_time_t, reserve_ns)},
      {"  free VA", offsetof(cm_driver_time_t, address_free_ns)},
      {"  memory queries", offsetof(cm_driver_time_t, mem_query_ns)},
  };
  const cm_driver_costs_t *costs = &env->o->costs;
  char c[MAX_LAYOUTS][64], label[64];
  cm_driver_time_t t[MAX_LAYOUTS];
  for (size_t i = 0; i < n; i++) {
    cm_driver_time_model(costs, &runs[i].res.storage, &t[i]);
    cli_fmt_ms(t[i].total_ns, c[i], 64);
  }
  snprintf(label, sizeof label, "model time (%.11s)", costs->name);
  row(label, c, n, width);
  for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
    bool any = false;
    for (size_t i = 0; i < n; i++) {
      uint64_t ns;
      memcpy(&ns, (const char *)&t[i] + kinds[k].off, sizeof ns);
      any |= ns != 0;
      cli_fmt_ms(ns, c[i], 64);
    }
    if (any) row(kinds[k].label, c, n, width);
  }
  unsigned most = 0;
  for (size_t i = 0; i < n; i++)
    if (runs[i].nruns > most) most = runs[i].nruns;
  for (unsigned k = 0; k < most; k++) {
    for (size_t i = 0; i < n; i++) {
      if (k < runs[i].nruns) fmt_grouped(cm_storage_stats_driver_calls(&runs[i].run_stats[k]), c[i], 64);
      else snprintf(c[i], 64, "-");
    }
    snprintf(label, sizeof label, "run %u driver calls", k + 1);
    row(label, c, n, width);
    for (size_t i = 0; i < n; i++) {
      cm_driver_time_t rt;
      if (k < runs[i].nruns) {
        cm_driver_time_model(costs, &runs[i].run_stats[k], &rt);
        cli_fmt_ms(rt.total_ns, c[i], 64);
      } else {
        snprintf(c[i], 64, "-");
      }
    }
    snprintf(label, sizeof label, "  model time");
    row(label, c, n, width);
    if (strcmp(env->o->device, "sim") != 0) {
      for (size_t i = 0; i < n; i++) {
        if (k < runs[i].nruns) cli_fmt_ms(cm_driver_time_measured(&runs[i].run_stats[k]), c[i], 64);
        else snprintf(c[i], 64, "-");
      }
      row("  measured", c, n, width);
    }
  }
}

/* --relocate: moves, bytes copied and the modelled copy time per layout. */
static void rows_relocation(const run_t *runs, size_t n, size_t width, const env_t *env) {
  char c[MAX_LAYOUTS][64];
  for (size_t i = 0; i < n; i++) snprintf(c[i], 64, "%" PRIu64, runs[i].reloc.moves);
  row("relocated allocations", c, n, width);
  for (size_t i = 0; i < n; i++) fmt_bytes(runs[i].reloc.bytes_copied, c[i], 64);
  row("bytes copied", c, n, width);
  for (size_t i = 0; i < n; i++)
    snprintf(c[i], 64, "%.3f ms",
             cli_copy_time_ns(runs[i].reloc.bytes_copied, env->o->copy_gbps) / 1e6);
  row("copy time (model)", c, n, width);
}

/* The last rows: --fit's smallest device, failed reserves, time, ns per
 * operation; then each layout's first failure. */
static void rows_outcome(const layout_t *lays, const run_t *runs, size_t n, size_t width,
                         const env_t *env) {
  char c[MAX_LAYOUTS][64];
  if (env->o->fit) {
    for (size_t i = 0; i < n; i++) {
      if (runs[i].fit_bytes) fmt_bytes(runs[i].fit_bytes, c[i], 64);
      else snprintf(c[i], 64, "-");
    }
    row("smallest device", c, n, width);
    for (size_t i = 0; i < n; i++)
      snprintf(c[i], 64, "%.4f",
               runs[i].res.peak_live_bytes
                   ? (double)runs[i].fit_bytes / (double)runs[i].res.peak_live_bytes : 0.0);
    row("  / peak live", c, n, width);
  }
  for (size_t i = 0; i < n; i++) snprintf(c[i], 64, "%" PRIu64, runs[i].res.failed_allocs);
  row("failed reserves", c, n, width);
  if (env->o->relocate) rows_relocation(runs, n, width, env);
  for (size_t i = 0; i < n; i++) {
    double ms = (double)runs[i].median_ns / 1e6;
    if (ms >= 1000) snprintf(c[i], 64, "%.3f s", ms / 1000);
    else snprintf(c[i], 64, "%.3f ms", ms);
  }
  row(env->o->repeat > 1 ? "time (median)" : "time", c, n, width);
  for (size_t i = 0; i < n; i++) snprintf(c[i], 64, "%.1f", runs[i].ns_per_op);
  row("ns / op", c, n, width);
  for (size_t i = 0; i < n; i++) {
    const cm_replay_result_t *r = &runs[i].res;
    if (!r->failed_allocs) continue;
    char sz[32], live[32], res[32], ev[32], at[48] = "";
    cm_format_bytes(r->first_failure_size, sz, sizeof sz);
    cm_format_bytes(r->first_failure_live_bytes, live, sizeof live);
    cm_format_bytes(r->first_failure_reserved_bytes, res, sizeof res);
    fmt_grouped(r->first_failure_event, ev, sizeof ev);
    if (r->first_failure_time_us)
      snprintf(at, sizeof at, " (%.6f s)", (double)r->first_failure_time_us / 1e6);
    printf("  the run failed; first failure [%s]: %s reserving %s (%" PRIu64 " bytes) at event "
           "%s%s with %s live and %s reserved: %s\n",
           lays[i].text, cm_err_name(r->first_failure), sz, r->first_failure_size, ev, at, live,
           res, r->first_failure_message);
  }
}

/* One table of pools per layout, at the end of the trace. */
static void print_pool_tables(const layout_t *lays, const run_t *runs, size_t n) {
  for (size_t i = 0; i < n; i++) {
    const cm_replay_result_t *r = &runs[i].res;
    if (lays[i].torch) { /* no cubemem pools: say which allocator it is */
      char what[320];
      cli_torch_describe(&lays[i].torch_opts, what, sizeof what);
      printf("\n  layout '%s': %s\n", lays[i].text, what);
      if (runs[i].from_state)
        printf("    from the snapshot's starting state; %" PRIu64 " of its blocks found no room "
               "where PyTorch had them (allocated as new)\n", runs[i].start_unplaced);
      continue;
    }
    printf("\n  pools of layout '%s' (at the end of the trace):\n", lays[i].text);
    printf("  %4s  %-44s %7s %7s %12s %12s %12s\n", "#", "kind / options", "pages", "peak",
           "reserved", "reserved max", "largest");
    for (size_t j = 0; j <= r->pool_count; j++) {
      const cm_pool_report_t *p = &r->pool_reports[j];
      char desc[160], r1[32], r2[32], r3[32];
      if (j == r->pool_count) {
        if (!p->pages_peak && !p->largest_alloc) continue; /* unused persistent pool */
        snprintf(desc, sizeof desc, "persistent");
      } else {
        size_t k = cm_pools_format(&p->options, 1, desc, sizeof desc);
        if (p->options.kind == CM_POOL_ADAPTIVE && k < sizeof desc)
          snprintf(desc + k, sizeof desc - k, " outdated=%" PRIu64, p->outdated_pages);
      }
      fmt_bytes(p->usage.bytes_reserved, r1, sizeof r1);
      fmt_bytes(p->bytes_reserved_peak, r2, sizeof r2);
      fmt_bytes(p->largest_alloc, r3, sizeof r3);
      char idx[8];
      if (j == r->pool_count) snprintf(idx, sizeof idx, "P");
      else snprintf(idx, sizeof idx, "%zu", j);
      printf("  %4s  %-44.44s %7" PRIu64 " %7" PRIu64 " %12s %12s %12s\n", idx, desc, p->pages,
             p->pages_peak, r1, r2, r3);
    }
  }
}

/* Per-stream replays: each stream's own pools, per layout. */
static void print_stream_tables(const layout_t *lays, const run_t *runs, size_t n) {
  for (size_t i = 0; i < n; i++) {
    const cm_replay_result_t *r = &runs[i].res;
    if (!r->streams) continue;
    char tot[32];
    fmt_bytes(r->peak_reserved_bytes, tot, sizeof tot);
    printf("\n  streams of layout '%s' (each with its own pools; device total at its peak %s):\n",
           lays[i].text, tot);
    printf("  %-20s %10s %12s %14s %14s %12s\n", "stream", "allocs", "peak live",
           "peak reserved", "at dev. peak", "at end");
    for (size_t k = 0; k < r->stream_count; k++) {
      const cm_replay_stream_result_t *s = &r->streams[k];
      char id[24], a[32], b[32], c[32], d[32], na[32];
      snprintf(id, sizeof id, "0x%" PRIx64, s->id);
      fmt_grouped(s->allocs, na, sizeof na);
      fmt_bytes(s->peak_live_bytes, a, sizeof a);
      fmt_bytes(s->peak_reserved_bytes, b, sizeof b);
      fmt_bytes(s->reserved_at_device_peak, c, sizeof c);
      fmt_bytes(s->reserved_at_end, d, sizeof d);
      printf("  %-20s %10s %12s %14s %14s %12s%s\n", id, na, a, b, c, d,
             s->failed_allocs ? "  (reservations failed)" : "");
    }
  }
}

void cli_replay_print_text(const char *tname, const cm_trace_t *t, const layout_t *lays,
                           const run_t *runs, size_t n, const env_t *env) {
  size_t width;
  print_text_head(tname, t, env);
  rows_bytes(lays, runs, n, &width);
  rows_device(runs, n, width, env);
  rows_model(runs, n, width, env);
  rows_outcome(lays, runs, n, width, env);
  print_pool_tables(lays, runs, n);
  print_stream_tables(lays, runs, n);
  printf("\n");
}

int cli_replay_write_svg(const char *path, const cm_replay_panel_t *panels, size_t n) {
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "cubemem replay: cannot write %s: %s\n", path, strerror(errno));
    return 1;
  }
  int rc = cm_replay_svg(panels, n, write_file, f);
  if (fclose(f) != 0 || rc != CM_OK) {
    fprintf(stderr, "cubemem replay: cannot write %s: %s\n", path, cm_strerror(rc ? rc : CM_EIO));
    return 1;
  }
  return 0;
}
