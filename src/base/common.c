/*
 * common.c - status-code names and texts, diagnostics, version, clock.
 * Exports cm_strerror, cm_err_name, cm_diag_clear, cm_version and the
 * internal cm__diag_set / cm__now_ns.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/util.h"

const char *cm_strerror(int status) {
  switch (status) {
    case CM_OK: return "success";
#define XX(name, val, text) \
  case CM_##name: return text;
    CM_ERRNO_MAP(XX)
#undef XX
    default: return "unknown error";
  }
}

const char *cm_err_name(int status) {
  switch (status) {
    case CM_OK: return "CM_OK";
#define XX(name, val, text) \
  case CM_##name: return "CM_" #name;
    CM_ERRNO_MAP(XX)
#undef XX
    default: return "CM_EUNKNOWN";
  }
}

void cm_diag_clear(cm_diag_t *diag) {
  if (diag) memset(diag, 0, sizeof *diag);
}

int cm_version(void) { return CM_VERSION_NUMBER; }

int cm__diag_vset(cm_diag_t *diag, int code, const char *fmt, va_list ap) {
  if (!diag) return code;
  diag->code = code;
  vsnprintf(diag->message, sizeof diag->message, fmt, ap);
  return code;
}

int cm__diag_set(cm_diag_t *diag, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  cm__diag_vset(diag, code, fmt, ap);
  va_end(ap);
  return code;
}

uint64_t cm__now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
