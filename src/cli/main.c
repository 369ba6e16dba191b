/*
 * main.c - entry point of the `cubemem` tool: dispatches to subcommands.
 * The tool links only the public API of libcubemem.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "cubemem/cubemem.h"

static const struct {
  const char *name;
  int (*fn)(int, char **);
  const char *help;
} k_commands[] = {
    {"replay", cm_cli_replay, "replay allocation traces (RMM CSV, PyTorch snapshots) through the memory manager"},
    {"fit", cm_cli_fit, "the smallest device memory each trace fits in, per layout"},
    {"plan", cm_cli_plan, "dry-run a trace and print a measured pool layout"},
    {"check-config", cm_cli_check_config, "validate a cubecl.toml and print the memory settings"},
    {"toml2json", cm_cli_toml2json, "read TOML (a file or stdin), print toml-test tagged JSON"},
    {"demo", cm_cli_demo, "a short tour of the API with a memory report"},
};

/* Make sure what was printed reached stdout: a full disk must not pass for
 * success. `name` is the command ("cubemem NAME: cannot write ..."). A reader
 * that stopped early (EPIPE, replay ignores SIGPIPE) is not an error, and a
 * command that failed already (rc != 0) keeps its status and message. replay
 * reports a failed write of its report itself (the error flag is then set). */
static int check_stdout(const char *name, int rc) {
  if (name && !strcmp(name, "replay") && ferror(stdout)) return rc;
  errno = 0;
  int flushed = fflush(stdout);
  int err = errno;
  if (rc != 0 || (flushed == 0 && !ferror(stdout)) || err == EPIPE) return rc;
  fprintf(stderr, "cubemem%s%s: cannot write the output: %s\n", name ? " " : "", name ? name : "",
          err ? strerror(err) : "write error");
  return 1;
}

static void usage(FILE *out) {
  fprintf(out, "usage: cubemem <command> [options]\n\ncommands:\n");
  for (size_t i = 0; i < sizeof k_commands / sizeof k_commands[0]; i++)
    fprintf(out, "  %-13s %s\n", k_commands[i].name, k_commands[i].help);
  fprintf(out, "\nRun 'cubemem <command> --help' or 'cubemem help <command>' for the options of a\n"
               "command.\n");
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  if (!strcmp(argv[1], "help") && argc > 2) { /* cubemem help CMD = cubemem CMD --help */
    for (size_t i = 0; i < sizeof k_commands / sizeof k_commands[0]; i++)
      if (!strcmp(argv[2], k_commands[i].name)) {
        static char help[] = "--help";
        char *args[] = {argv[2], help, NULL};
        return check_stdout(k_commands[i].name, k_commands[i].fn(2, args));
      }
    fprintf(stderr, "cubemem help: unknown command '%s'\n\n", argv[2]);
    usage(stderr);
    return 2;
  }
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
    usage(stdout);
    return check_stdout(NULL, 0);
  }
  if (!strcmp(argv[1], "--version")) {
    int v = cm_version();
    printf("cubemem %d.%d.%d\n", v / 10000, (v / 100) % 100, v % 100);
    return check_stdout(NULL, 0);
  }
  for (size_t i = 0; i < sizeof k_commands / sizeof k_commands[0]; i++)
    if (!strcmp(argv[1], k_commands[i].name))
      return check_stdout(k_commands[i].name, k_commands[i].fn(argc - 1, argv + 1));
  const char *names[sizeof k_commands / sizeof k_commands[0]];
  for (size_t i = 0; i < sizeof k_commands / sizeof k_commands[0]; i++) names[i] = k_commands[i].name;
  const char *s = cli_suggest(argv[1], names, sizeof names / sizeof names[0]);
  if (s) fprintf(stderr, "cubemem: unknown command '%s'; did you mean '%s'?\n\n", argv[1], s);
  else fprintf(stderr, "cubemem: unknown command '%s'\n\n", argv[1]);
  usage(stderr);
  return 2;
}
