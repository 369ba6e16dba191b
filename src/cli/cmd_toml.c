/* cmd_toml.c - `cubemem toml2json [FILE]`: TOML (FILE, or standard input when
 * FILE is absent or '-') to toml-test tagged JSON on stdout. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "cubemem/toml.h"

static void usage(FILE *out) {
  fprintf(out, "usage: cubemem toml2json [FILE]\n"
               "Reads a TOML 1.0 document from FILE (default: standard input; '-' too) and\n"
               "prints the toml-test tagged JSON.\n"
               "Exit 0 when valid; 1 with the error (line and column) on stderr otherwise;\n"
               "2 for usage errors.\n");
}

int cm_cli_toml2json(int argc, char **argv) {
  const char *path = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return 0;
    }
    if (a[0] == '-' && a[1] != '\0') {
      static const char *const all[] = {"--help"};
      cli_unknown_option("toml2json", a, all, 1);
      usage(stderr);
      return 2;
    }
    if (path) {
      fprintf(stderr, "cubemem toml2json: one FILE at a time ('%s' and '%s' given)\n", path, a);
      return 2;
    }
    path = a;
  }
  if (!path || !strcmp(path, "-")) return cm_toml2json_main(stdin, stdout, stderr);
  FILE *in = fopen(path, "rb");
  if (!in) {
    fprintf(stderr, "cubemem toml2json: %s: %s\n", path, strerror(errno));
    return 1;
  }
  int rc = cm_toml2json_main(in, stdout, stderr);
  fclose(in);
  return rc;
}
