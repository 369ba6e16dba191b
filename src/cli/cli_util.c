/*
 * cli_util.c - pieces shared by the subcommands (replay, plan, fit): the unit
 * grammar for sizes, "did you mean" suggestions, the --pools checker, byte
 * formatting, configuration discovery and trace loading (CSV or PyTorch
 * snapshot) with the trace's warnings. See cli.h for the contracts.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/sbuf.h"
#include "base/suggest.h"
#include "base/units.h"
#include "cli.h"

/* ---- sizes ------------------------------------------------------------------ */

int cli_parse_size(const char *s, uint64_t *out, char *why, size_t cap) {
  return cm__size_parse(s, s ? strlen(s) : 0, out, why, cap); /* the library's grammar */
}

int cli_size_option(const char *cmd, const char *opt, const char *val, bool allow_zero,
                    uint64_t *out) {
  char why[160];
  uint64_t v;
  if (cli_parse_size(val, &v, why, sizeof why)) {
    fprintf(stderr, "cubemem %s: bad %s '%s': %s (%s)\n", cmd, opt, val, why, CLI_SIZE_EXAMPLES);
    return 2;
  }
  if (!allow_zero && v == 0) {
    fprintf(stderr, "cubemem %s: bad %s '%s': must be more than zero bytes\n", cmd, opt, val);
    return 2;
  }
  *out = v;
  return 0;
}

int cli_alignment_option(const char *cmd, const char *val, uint64_t *out) {
  uint64_t v;
  int rc = cli_size_option(cmd, "--alignment", val, false, &v);
  if (rc) return rc;
  if (v & (v - 1)) {
    uint64_t lo = 1;
    while (lo <= v / 2) lo <<= 1;
    fprintf(stderr, "cubemem %s: bad --alignment '%s': must be a power of two (e.g. %" PRIu64
            " or %" PRIu64 ")\n", cmd, val, lo, lo * 2);
    return 2;
  }
  *out = v;
  return 0;
}

int cli_device_memory_option(const char *cmd, const char *val, uint64_t *out) {
  char why[160];
  uint64_t v;
  if (cli_parse_size(val, &v, why, sizeof why)) {
    fprintf(stderr, "cubemem %s: bad --device-memory '%s': %s (%s)\n", cmd, val, why,
            CLI_SIZE_EXAMPLES);
    return 2;
  }
  if (v < 4096) {
    fprintf(stderr, "cubemem %s: bad --device-memory '%s': the simulated device needs at least "
            "4096 bytes (the presets use pages of a quarter of it), e.g. 80GiB\n", cmd, val);
    return 2;
  }
  *out = v;
  return 0;
}

/* ---- suggestions ---------------------------------------------------------------- */

const char *cli_suggest(const char *word, const char *const *cands, size_t n) {
  return cm__suggest(word, cands, n); /* base/suggest.c: one rule everywhere */
}

int cli_unknown_option(const char *cmd, const char *arg, const char *const *options, size_t n) {
  char name[128];
  snprintf(name, sizeof name, "%s", arg);
  char *eq = strchr(name, '=');
  if (eq) *eq = '\0';
  const char *s = cli_suggest(name, options, n);
  if (s)
    fprintf(stderr, "cubemem %s: unknown option '%s'; did you mean '%s'? (see cubemem %s --help)\n",
            cmd, name, s, cmd);
  else
    fprintf(stderr, "cubemem %s: unknown option '%s' (see cubemem %s --help)\n", cmd, name, cmd);
  return 2;
}

/* ---- --pools ---------------------------------------------------------------------- */

/* The layout language (presets, kinds, keys, sizes) is the library's: the
 * command line hands --pools to cm_pools_parse and prints its message. */

void cli_pool_message(char *msg, size_t cap) {
  size_t nk;
  const char *const *fields;
  const char *const *keys = cm_pools_keys(&nk, &fields);
  for (size_t k = 0; k < nk; k++) {
    char from[40], to[40];
    snprintf(from, sizeof from, "`%s`", fields[k]);
    snprintf(to, sizeof to, "%s=", keys[k]);
    char *hit;
    while ((hit = strstr(msg, from))) {
      size_t fl = strlen(from), tl = strlen(to), ml = strlen(msg);
      if (ml - fl + tl + 1 > cap) break;
      memmove(hit + tl, hit + fl, ml - (size_t)(hit - msg) - fl + 1);
      memcpy(hit, to, tl);
    }
  }
}

int cli_parse_layout(const char *cmd, const char *text, cm_device_props_t props,
                     cm_pool_options_t *pools, size_t cap, size_t *count) {
  cm_diag_t d;
  cm_diag_clear(&d);
  int rc = cm_pools_parse(text, props, pools, cap, count, &d);
  if (rc == CM_OK) return 0;
  if (rc == CM_ENOMEM) {
    fprintf(stderr, "cubemem %s: out of memory\n", cmd);
    return 1;
  }
  cli_pool_message(d.message, sizeof d.message);
  fprintf(stderr, "cubemem %s: --pools '%s': %s\n", cmd, text,
          d.message[0] ? d.message : cm_strerror(d.code));
  return 2;
}

/* ---- formatting ---------------------------------------------------------------------- */

void cli_fmt_iec(uint64_t b, char *buf, size_t cap) { cm__fmt_iec(b, buf, cap); }

/* Length of the well-formed UTF-8 character at s (a lead byte >= 0x80),
 * or 0 when it is not one: base/sbuf.c's decoder. */
static size_t utf8_len(const unsigned char *s) {
  unsigned cp;
  return cm__utf8_char((const char *)s, &cp);
}

void cli_json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
    else if (c < 0x20) fprintf(f, "\\u%04x", c);
    else if (c < 0x80) fputc(c, f);
    else {
      size_t n = utf8_len((const unsigned char *)s); /* JSON is UTF-8: others become U+FFFD */
      if (n) fwrite(s, 1, n, f), s += n - 1;
      else fputs("\\ufffd", f);
    }
  }
  fputc('"', f);
}

void cli_fmt_grouped(uint64_t v, char *buf, size_t cap) {
  char tmp[32];
  int n = snprintf(tmp, sizeof tmp, "%" PRIu64, v);
  size_t j = 0;
  for (int i = 0; i < n && j + 2 < cap; i++) {
    buf[j++] = tmp[i];
    int left = n - i - 1;
    if (left > 0 && left % 3 == 0) buf[j++] = ',';
  }
  buf[j] = '\0';
}

void cli_fmt_device(uint64_t b, char *buf, size_t cap) {
  char a[32], c[32];
  cli_fmt_iec(b, a, sizeof a);
  cm_format_bytes(b, c, sizeof c);
  if (b % 1024 == 0 && b >= 1024) snprintf(buf, cap, "%s (%s)", a, c);
  else snprintf(buf, cap, "%s", c);
}

/* ---- configuration ------------------------------------------------------------------- */

static const char *base_name(const char *p) {
  const char *s = strrchr(p, '/');
  return s ? s + 1 : p;
}

static bool is_burn(const char *path) {
  const char *b = base_name(path);
  return !strcmp(b, "burn.toml") || !strcmp(b, "Burn.toml");
}

void cli_print_located(FILE *f, const char *prefix, const char *path, const cm_diag_t *d) {
  const char *file = d->file[0] ? d->file : path;
  const char *msg = d->message[0] ? d->message : cm_strerror(d->code);
  size_t fl = file ? strlen(file) : 0;
  /* the library's messages already start with "file:line:col:" - name it once */
  if ((fl && !strncmp(msg, file, fl) && msg[fl] == ':') || !file)
    fprintf(f, "%s%s\n", prefix, msg);
  else if (d->line)
    fprintf(f, "%s%s:%u:%u: %s\n", prefix, file, d->line, d->column, msg);
  else
    fprintf(f, "%s%s: %s\n", prefix, file, msg);
}

static void print_config_error(const char *cmd, const char *path, const cm_diag_t *d) {
  char prefix[64];
  snprintf(prefix, sizeof prefix, "cubemem %s: ", cmd);
  cli_print_located(stderr, prefix, path, d);
}

static void on_warning(void *arg, const cm_diag_t *w) {
  fprintf(stderr, "%swarning: %s\n", (const char *)arg, w->message);
}

size_t cli_config_warnings(const char *prefix, const cm_config_t *cfg) {
  size_t n = 0;
  if (!cfg->path) return 0;
  if (cm_config_lint_file(cfg->path, cfg->section, on_warning, (void *)prefix, &n) != CM_OK) return 0;
  return n;
}

/* The directory part of path into buf ("." when none). */
static void dir_of(const char *path, char *buf, size_t cap) {
  const char *slash = strrchr(path, '/');
  if (!slash) snprintf(buf, cap, ".");
  else if (slash == path) snprintf(buf, cap, "/");
  else snprintf(buf, cap, "%.*s", (int)(slash - path), path);
}

size_t cli_burn_warnings(const char *prefix, const char *start, const cm_config_t *cfg) {
  static const char *const names[] = {"burn.toml", "Burn.toml"};
  char dir[4096], stop[4096] = "", file[4200];
  if (start) snprintf(dir, sizeof dir, "%s", start);
  else if (!getcwd(dir, sizeof dir)) return 0;
  char *real = realpath(dir, NULL);
  if (!real) return 0;
  snprintf(dir, sizeof dir, "%s", real);
  free(real);
  if (cfg && cfg->path) { /* the directories searched before the file found */
    dir_of(cfg->path, file, sizeof file);
    real = realpath(file, NULL);
    if (real) snprintf(stop, sizeof stop, "%s", real);
    free(real);
  }
  size_t n = 0;
  for (;;) {
    if (stop[0] && !strcmp(dir, stop)) break;
    for (size_t k = 0; k < 2; k++) {
      snprintf(file, sizeof file, "%s%s%s", dir, strcmp(dir, "/") ? "/" : "", names[k]);
      struct stat st;
      size_t c = 0;
      if (stat(file, &st) == 0 && S_ISREG(st.st_mode) &&
          cm_config_lint_file(file, "cubecl", on_warning, (void *)prefix, &c) == CM_OK)
        n += c;
    }
    char *slash = strrchr(dir, '/');
    if (!slash || !strcmp(dir, "/")) break;
    if (slash == dir) dir[1] = '\0';
    else *slash = '\0';
  }
  return n;
}

int cli_config_load(const char *cmd, const char *path, bool no_config, cm_config_t *cfg,
                    char *used, size_t used_cap) {
  cm_diag_t d;
  cm_diag_clear(&d);
  if (used && used_cap) snprintf(used, used_cap, "none (defaults)");
  if (path) {
    struct stat st;
    if (stat(path, &st) != 0) {
      fprintf(stderr, "cubemem %s: --config %s: no such file\n", cmd, path);
      return 1;
    }
    const char *section = is_burn(path) ? "cubecl" : NULL;
    int rc = cm_config_load_file(cfg, path, section, &d);
    if (rc == CM_ENOTFOUND && section) {
      fprintf(stderr, "cubemem %s: warning: %s has no [cubecl] table; using the defaults\n", cmd,
              path);
      char prefix[64];
      snprintf(prefix, sizeof prefix, "cubemem %s: ", cmd);
      size_t c = 0;
      if (cm_config_lint_file(path, section, on_warning, prefix, &c) != CM_OK) c = 0;
      if (used && used_cap) snprintf(used, used_cap, "none (%s has no [cubecl] table)", path);
      return 0;
    }
    if (rc != CM_OK) {
      print_config_error(cmd, path, &d);
      return 1;
    }
  } else if (!no_config) {
    if (cm_config_discover(cfg, NULL, NULL, &d) != CM_OK) {
      print_config_error(cmd, d.file[0] ? d.file : "configuration", &d);
      fprintf(stderr, "cubemem %s: (found by discovery from the current directory; pass "
              "--no-config to ignore it)\n", cmd);
      return 1;
    }
  }
  char prefix[64];
  snprintf(prefix, sizeof prefix, "cubemem %s: ", cmd);
  cli_config_warnings(prefix, cfg);
  if (!path && !no_config) cli_burn_warnings(prefix, NULL, cfg);
  if (used && used_cap && cfg->path) {
    if (cfg->section) snprintf(used, used_cap, "%s [%s]", cfg->path, cfg->section);
    else snprintf(used, used_cap, "%s", cfg->path);
  }
  return 0;
}

/* ---- output files ----------------------------------------------------------------------- */

int cli_output_check(const char *cmd, const char *opt, const char *path) {
  struct stat st;
  if (!path[0]) {
    fprintf(stderr, "cubemem %s: %s needs a file name\n", cmd, opt);
    return 2;
  }
  if (stat(path, &st) == 0) {
    if (S_ISDIR(st.st_mode)) {
      fprintf(stderr, "cubemem %s: %s %s: is a directory\n", cmd, opt, path);
      return 1;
    }
    if (access(path, W_OK) != 0) {
      fprintf(stderr, "cubemem %s: %s %s: cannot write: %s\n", cmd, opt, path, strerror(errno));
      return 1;
    }
    return 0;
  }
  /* a new file: its directory must exist and be writable */
  size_t n = strlen(path);
  char *dir = malloc(n + 2);
  if (!dir) return 1;
  memcpy(dir, path, n + 1);
  char *slash = strrchr(dir, '/');
  if (!slash) strcpy(dir, ".");
  else if (slash == dir) dir[1] = '\0';
  else *slash = '\0';
  int rc = 0;
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
    fprintf(stderr, "cubemem %s: %s %s: cannot write: the directory %s does not exist\n", cmd,
            opt, path, dir);
    rc = 1;
  } else if (access(dir, W_OK | X_OK) != 0) {
    fprintf(stderr, "cubemem %s: %s %s: cannot write in %s: %s\n", cmd, opt, path, dir,
            strerror(errno));
    rc = 1;
  }
  free(dir);
  return rc;
}

/* ---- traces --------------------------------------------------------------------------- */

int cli_trace_load(const char *cmd, const char *path, const cli_trace_options_t *o,
                   cm_trace_t **out, cli_trace_info_t *info) {
  cm_trace_parse_options_t po = {.skip_bad_lines = o && o->skip_bad};
  cm_snapshot_options_t so;
  cm_snapshot_options_init(&so);
  so.parse = po;
  if (o) {
    so.device = o->snapshot_device;
    so.free_on_requested = o->free_on_requested;
  }
  cli_trace_info_t tmp;
  memset(&tmp, 0, sizeof tmp);
  if (info) *info = tmp;
  char what[300];
  if (cli_sniff_trace(path, what, sizeof what)) { /* before reading it whole */
    fprintf(stderr, "%s: not a trace: this is %s\n", path, what);
    return 1;
  }
  cm_diag_t d;
  cm_diag_clear(&d);
  int rc = cm_trace_load_any(path, &po, &so, out, &tmp.is_snapshot, &tmp.snap, &d);
  if (info) *info = tmp;
  if (rc != CM_OK) {
    if (d.line) fprintf(stderr, "%s:%u: %s\n", path, d.line, d.message);
    else fprintf(stderr, "%s: %s\n", path, d.message[0] ? d.message : cm_strerror(rc));
    return 1;
  }
  const cm_trace_t *t = *out;
  if (tmp.is_snapshot) {
    const cm_snapshot_info_t *s = &tmp.snap;
    if (s->trace_entries == 0)
      fprintf(stderr, "%s: warning: device %d has no trace entries; only its %" PRIu64
              " live block%s at dump are replayed (--snapshot-device chooses another of %d)\n",
              path, s->device, s->preexisting, s->preexisting == 1 ? "" : "s", s->device_count);
    if (s->freed_unallocated)
      fprintf(stderr, "%s: %" PRIu64 " pointer%s freed by the trace without being allocated in it "
              "(recorded before the history began): allocated at time zero\n", path,
              s->freed_unallocated, s->freed_unallocated == 1 ? "" : "s");
  }
  if (t->bad_lines)
    fprintf(stderr, "%s: skipped %" PRIu64 " malformed line%s (first: %s:%" PRIu64 ": %s)\n",
            path, t->bad_lines, t->bad_lines == 1 ? "" : "s", path, t->first_bad_line,
            t->first_bad_message);
  if (t->unknown_frees)
    fprintf(stderr, "%s: %" PRIu64 " free%s of unknown pointers ignored\n", path,
            t->unknown_frees, t->unknown_frees == 1 ? "" : "s");
  if (t->alloc_failures) {
    char oom[200];
    cli_recorded_oom(t, oom, sizeof oom);
    if (tmp.is_snapshot)
      fprintf(stderr, "%s: %s (its `oom` entries are not replayed)\n", path, oom);
    else
      fprintf(stderr, "%s:%" PRIu64 ": %s ('allocate failure' rows are not replayed)\n", path,
              t->first_failure_line, oom);
  }
  if (t->duplicate_allocs)
    fprintf(stderr, "%s: %" PRIu64 " allocation%s of an already live pointer (the earlier "
            "one was freed first)\n", path, t->duplicate_allocs,
            t->duplicate_allocs == 1 ? "" : "s");
  if (t->count == 0)
    fprintf(stderr, "%s: warning: the trace %s; there is nothing to replay\n", path,
            t->lines == 0 ? "is empty" : "has no allocations");
  else if (t->allocs == 0)
    fprintf(stderr, "%s: warning: the trace has no allocations\n", path);
  return 0;
}

/* ---- report pieces ------------------------------------------------------------------------ */

void cli_print_trace_summary(FILE *f, const cm_trace_t *t) {
  cli_print_trace_summary_streams(f, t, false);
}

void cli_print_trace_summary_streams(FILE *f, const cm_trace_t *t, bool per_stream) {
  char a[32], b[32];
  cli_fmt_grouped(t->count, b, sizeof b);
  fprintf(f, "        %s events: %" PRIu64 " allocations, %" PRIu64 " frees, %" PRIu64
             " live at the end; peak %" PRIu64 " live at once\n",
          b, t->allocs, t->frees, t->live_at_end, t->peak_live_count);
  cm_format_bytes(t->peak_live_bytes, a, sizeof a);
  cli_fmt_grouped(t->peak_live_bytes, b, sizeof b);
  fprintf(f, "        peak live %s (%s bytes), largest allocation ", a, b);
  cm_format_bytes(t->max_alloc_size, a, sizeof a);
  fprintf(f, "%s\n", a);
  if (t->count == 0)
    fprintf(f, "        the trace %s: nothing was replayed\n",
            t->lines == 0 ? "is empty" : "has no allocations");
  if (t->alloc_failures) {
    char what[200];
    cli_recorded_oom(t, what, sizeof what);
    fprintf(f, "        %s\n", what);
  }
  if (t->stream_count > 1) {
    fprintf(f, "        %zu streams, %s (allocations, peak live):\n", t->stream_count,
            per_stream ? "each replayed with its own pools" : "merged into one by this replay");
    size_t shown = t->stream_count > 8 ? 7 : t->stream_count;
    for (size_t k = 0; k < shown; k++) {
      char n[32];
      cli_fmt_grouped(t->streams[k].allocs, n, sizeof n);
      cm_format_bytes(t->streams[k].peak_live_bytes, a, sizeof a);
      fprintf(f, "          stream 0x%" PRIx64 ": %s allocations, peak live %s\n",
              t->streams[k].id, n, a);
    }
    if (shown < t->stream_count)
      fprintf(f, "          and %zu more streams (--json lists them all)\n",
              t->stream_count - shown);
  }
}

void cli_alloc_conf_text(const cm_snapshot_info_t *s, char *buf, size_t cap) {
  if (!s->has_alloc_conf) snprintf(buf, cap, "not recorded (PyTorch before 2.4)");
  else if (!s->alloc_conf[0]) snprintf(buf, cap, "none set (the defaults)");
  else snprintf(buf, cap, "%s", s->alloc_conf);
}

void cli_recorded_oom(const cm_trace_t *t, char *buf, size_t cap) {
  char sz[32], live[32], at[48] = "";
  cm_format_bytes(t->first_failure_size, sz, sizeof sz);
  cm_format_bytes(t->first_failure_live_bytes, live, sizeof live);
  if (t->first_failure_time_us)
    snprintf(at, sizeof at, " at %.6f s", (double)t->first_failure_time_us / 1e6);
  snprintf(buf, cap, "out of memory in the recorded run: %" PRIu64 " allocation%s failed; the "
           "first asked for %s (%" PRIu64 " bytes)%s with %s live",
           t->alloc_failures, t->alloc_failures == 1 ? "" : "s", sz, t->first_failure_size, at,
           live);
}

void cli_print_device(FILE *f, const char *device, uint64_t capacity, cm_device_props_t props,
                      const char *extra) {
  char a[64], b[32];
  cli_fmt_device(capacity, a, sizeof a);
  cli_fmt_iec(props.max_page_size, b, sizeof b);
  fprintf(f, "device  %s, %s, max page %s, alignment %" PRIu64 "%s%s\n", device, a, b,
          props.alignment, extra && *extra ? ", " : "", extra ? extra : "");
}
