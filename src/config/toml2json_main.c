/*
 * toml2json_main.c - the "cubemem toml2json" command (cm_toml2json_main):
 * reads a whole TOML document from a stream, writes toml-test tagged JSON.
 *
 * Algorithm: slurp the input into a growing buffer (bytes kept exactly,
 * NULs included), cm_toml_parse() it, cm_toml_to_json() the result.
 * Exit codes follow the toml-test decoder contract: 0 valid (JSON on out,
 * nothing on err), 1 invalid TOML (one "toml2json: ..." line on err),
 * 2 for I/O or memory failures.
 *
 * Exports: cm_toml2json_main.
 */
#include "toml_internal.h"

#include <stdlib.h>

int cm_toml2json_main(FILE *in, FILE *out, FILE *err) {
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
  rc = cm_toml_to_json(doc, out);
  cm_toml_doc_free(doc);
  if (rc != CM_OK) {
    fprintf(err, "toml2json: error writing output\n");
    return 2;
  }
  return 0;
}
