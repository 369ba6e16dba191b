/*
 * cmd_config.c - `cubemem check-config [PATH] [--lenient]`: validate the
 * memory configuration and print the effective settings with their sources.
 *
 * PATH may be a file (burn.toml / Burn.toml are read through their [cubecl]
 * table) or a directory to discover from; without PATH the search starts in
 * the current directory (spec §11.1). Strict by default: a found-but-invalid
 * file is reported and the exit status is 1. --lenient does what the runtime
 * does in lenient mode: invalid files are reported as warnings on stderr and
 * skipped (discovery goes on; an explicit file falls back to the defaults).
 *
 * Output (stdout), one setting per line, TOML-like:
 *   # configuration: <path> | none found, using the defaults
 *   memory.persistent_memory = "size-match"  # <path>:<line> | default
 * Exit: 0 valid, 1 invalid (message on stderr), 2 usage error.
 * Exports cm_cli_check_config (cli.h).
 */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "cubemem/config.h"

static void usage(FILE *out) {
  fprintf(out,
          "usage: cubemem check-config [PATH] [--lenient] [--help]\n"
          "\n"
          "Validate the [memory] configuration and print the effective settings,\n"
          "one per line, each with its source (file:line or default).\n"
          "\n"
          "  PATH       a cubecl.toml / CubeCL.toml (whole file), a burn.toml /\n"
          "             Burn.toml ([cubecl] table), or a directory to search from;\n"
          "             default: search from the current directory upward\n"
          "  --lenient  skip invalid files with a warning, as the reference runtime\n"
          "             does, instead of failing\n"
          "  --help     show this help\n"
          "\n"
          "Exit status: 0 valid, 1 invalid configuration, 2 usage error.\n");
}

static void config_warning(void *arg, const cm_diag_t *w) {
  (void)arg;
  fprintf(stderr, "check-config: warning: %s\n", w->message);
}

static void on_skip(void *arg, const char *path, const char *section, const cm_diag_t *err) {
  (void)arg;
  char prefix[600];
  if (section)
    snprintf(prefix, sizeof prefix, "check-config: warning: ignoring section [%s] of ", section);
  else
    snprintf(prefix, sizeof prefix, "check-config: warning: ignoring ");
  cli_print_located(stderr, prefix, path, err);
}

static void print_config(const cm_config_t *cfg) {
  if (cfg->path && cfg->section)
    printf("# configuration: %s [%s]\n", cfg->path, cfg->section);
  else if (cfg->path)
    printf("# configuration: %s\n", cfg->path);
  else
    printf("# configuration: none found, using the defaults\n");
  for (int f = 0; f < CM_CFG_FIELD_COUNT; f++) {
    char value[1100], source[600];
    cm_config_value_format(cfg, (cm_config_field_t)f, value, sizeof value);
    cm_config_source_format(cfg, (cm_config_field_t)f, source, sizeof source);
    printf("%s = %s  # %s\n", cm_config_field_key((cm_config_field_t)f), value, source);
  }
}

static const char *base_name(const char *p) {
  const char *s = strrchr(p, '/');
  return s ? s + 1 : p;
}

int cm_cli_check_config(int argc, char **argv) {
  const char *path = NULL;
  bool lenient = false;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(a, "--lenient")) {
      lenient = true;
    } else if (a[0] == '-' && a[1] != '\0') {
      static const char *const all[] = {"--lenient", "--help"};
      const char *s = cli_suggest(a, all, 2);
      if (s) fprintf(stderr, "check-config: unknown option '%s'; did you mean '%s'?\n\n", a, s);
      else fprintf(stderr, "check-config: unknown option '%s'\n\n", a);
      usage(stderr);
      return 2;
    } else if (path) {
      fprintf(stderr, "check-config: more than one PATH given ('%s' and '%s')\n\n", path, a);
      usage(stderr);
      return 2;
    } else {
      path = a;
    }
  }

  cm_config_t cfg;
  cm_config_init(&cfg);
  cm_diag_t diag;
  cm_diag_clear(&diag);
  int rc;
  struct stat st;
  if (path && stat(path, &st) == 0 && !S_ISDIR(st.st_mode)) {
    const char *b = base_name(path);
    const char *section = (!strcmp(b, "burn.toml") || !strcmp(b, "Burn.toml")) ? "cubecl" : NULL;
    rc = cm_config_load_file(&cfg, path, section, &diag);
    if (rc == CM_ENOTFOUND && section) {
      /* a burn.toml without [cubecl]: the runtime's silent miss */
      printf("# %s has no [%s] table\n", path, section);
      size_t c = 0;
      if (cm_config_lint_file(path, section, config_warning, NULL, &c) != CM_OK) c = 0;
      rc = CM_OK;
    } else if (rc != CM_OK && rc != CM_ENOMEM && lenient) {
      on_skip(NULL, path, section, &diag);
      cm_config_free(&cfg);
      rc = CM_OK;
    }
  } else if (path && stat(path, &st) != 0) {
    fprintf(stderr, "check-config: %s: no such file or directory\n", path);
    return 1;
  } else {
    cm_config_discover_options_t opts = {.lenient = lenient, .on_skip = on_skip};
    rc = cm_config_discover(&cfg, path, &opts, &diag);
  }
  if (rc != CM_OK) {
    fprintf(stderr, "check-config: error: %s\n", diag.message[0] ? diag.message : cm_strerror(rc));
    cm_config_free(&cfg);
    return 1;
  }
  cli_config_warnings("check-config: ", &cfg);
  if (!(path && stat(path, &st) == 0 && !S_ISDIR(st.st_mode)))
    cli_burn_warnings("check-config: ", path, &cfg); /* the burn.toml files discovery skipped */
  print_config(&cfg);
  cm_config_free(&cfg);
  if (fflush(stdout) != 0) {
    fprintf(stderr, "check-config: cannot write the output\n");
    return 1;
  }
  return 0;
}
