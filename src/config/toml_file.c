/*
 * toml_file.c - cm_toml_parse_file: reads a whole file into memory and hands
 * it to the parser (cm_toml_parse, toml_parse.c).
 *
 * Invariants: the buffer is freed on every path; a failure to open or read
 * is CM_EIO with the path and the system's reason in the diag, and the
 * diag's file names the path whatever failed.
 *
 * Exports: cm_toml_parse_file.
 */
#include "toml_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Thread-safe strerror. */
static const char *errno_text(int e, char *buf, size_t n) {
#if defined(__GLIBC__) && defined(_GNU_SOURCE)
  return strerror_r(e, buf, n);
#else
  snprintf(buf, n, "errno %d", e);
  return buf;
#endif
}

int cm_toml_parse_file(const char *path, cm_toml_doc_t **out, cm_diag_t *diag) {
  if (!path || !out) return CM_EINVAL;
  FILE *f = fopen(path, "rb");
  char *buf = NULL;
  size_t len = 0, cap = 0;
  int rc = CM_OK;
  int saved_errno = 0;
  if (!f) {
    saved_errno = errno;
    rc = CM_EIO;
  } else {
    for (;;) {
      if (len == cap) {
        size_t ncap = cap ? cap * 2 : 65536;
        char *n = realloc(buf, ncap);
        if (!n) {
          rc = CM_ENOMEM;
          break;
        }
        buf = n;
        cap = ncap;
      }
      size_t got = fread(buf + len, 1, cap - len, f);
      len += got;
      if (got == 0) {
        if (ferror(f)) {
          saved_errno = errno;
          rc = CM_EIO;
        }
        break;
      }
    }
    fclose(f);
  }
  if (rc == CM_OK) {
    rc = cm_toml_parse(buf, len, out, diag);
  } else if (diag) {
    memset(diag, 0, sizeof *diag);
    diag->code = rc;
    char ebuf[128];
    snprintf(diag->message, sizeof diag->message, "cannot read '%s': %s", path,
             rc == CM_ENOMEM ? "out of memory" : errno_text(saved_errno, ebuf, sizeof ebuf));
  }
  if (rc != CM_OK && diag) {
    size_t n = strlen(path);
    if (n >= sizeof diag->file) n = sizeof diag->file - 1;
    memcpy(diag->file, path, n);
    diag->file[n] = '\0';
  }
  free(buf);
  return rc;
}
