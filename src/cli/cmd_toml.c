/* cmd_toml.c - `cubemem toml2json [FILE]`: TOML (FILE, or standard input when
 * FILE is absent or '-') to toml-test tagged JSON on stdout. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cubemem/toml.h"

/* Read all of `in` as TOML and write the tagged JSON to `out`: exit code 0;
 * invalid TOML: one "toml2json: line L, column C: <reason>" line on `err`,
 * 1; a write error: a message on `err`, 1 (as every command); a read or
 * memory failure: a message on `err`, 2. Bytes are kept exactly, NULs included. */
static int toml2json_stream(FILE *in, FILE *out, FILE *err) {
  if (!in || !out || !err) return 2;
  char *buf = NULL;
  size_t len = 0, cap = 0;
  for (;;) {
    if (len == cap) {
      size_t ncap = cap ? cap * 2 : 65536;
      char *n = ncap > cap ? realloc(buf, ncap) : NULL;
      if (!n) {
        free(buf);
        fprintf(err, "toml2json: out of memory reading input\n");
        return 2;
      }
      buf = n;
      cap = ncap;
    }
    size_t got = fread(buf + len, 1, cap - len, in);
    len += got;
    if (got == 0) break;
  }
  if (ferror(in)) {
    free(buf);
    fprintf(err, "toml2json: error reading input\n");
    return 2;
  }
  cm_toml_doc_t *doc = NULL;
  cm_diag_t diag = {0};
  int rc = cm_toml_parse(buf, len, &doc, &diag);
  free(buf);
  if (rc == CM_EPARSE) {
    fprintf(err, "toml2json: %s\n", diag.message);
    return 1;
  }
  if (rc != CM_OK) {
    fprintf(err, "toml2json: %s\n", diag.message[0] ? diag.message : "parse failed");
    return 2;
  }
  errno = 0;
  rc = cm_toml_to_json(doc, out);
  cm_toml_doc_free(doc);
  if (rc != CM_OK) {
    fprintf(err, "cubemem toml2json: cannot write the output: %s\n",
            errno ? strerror(errno) : "write error");
    return 1;
  }
  return 0;
}

static void usage(FILE *out) {
  fprintf(out, "usage: cubemem toml2json [FILE]\n"
               "Reads a TOML 1.0 document from FILE (default: standard input; '-' too) and\n"
               "prints the toml-test tagged JSON.\n"
               "Exit 0 when valid; 1 with the error (line and column) on stderr otherwise,\n"
               "or when the output cannot be written; 2 for usage errors.\n");
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
  if (!path || !strcmp(path, "-")) return toml2json_stream(stdin, stdout, stderr);
  FILE *in = fopen(path, "rb");
  if (!in) {
    fprintf(stderr, "cubemem toml2json: %s: %s\n", path, strerror(errno));
    return 1;
  }
  int rc = toml2json_stream(in, stdout, stderr);
  fclose(in);
  return rc;
}
