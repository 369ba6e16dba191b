/*
 * toml_json.c - writes a parsed TOML document as toml-test "tagged JSON"
 * (cm_toml_to_json).
 *
 * Algorithm: a recursive walk over the tree. Tables become JSON objects (keys
 * in document order), arrays become JSON arrays, every scalar becomes
 * {"type": T, "value": V} with V a string: decimal integers, the shortest
 * round-tripping "%.*g" text for floats ("inf", "-inf", "nan"), and RFC 3339
 * text for datetimes (cm_toml_datetime_format).
 *
 * Invariants: recursion depth is bounded by the parser's depth limit
 * (CM_TOML_MAX_DEPTH), so the walk cannot exhaust the stack. Strings may
 * contain NUL and are escaped as JSON \u00XX; other UTF-8 passes through.
 *
 * Exports: cm_toml_to_json.
 */
#include "toml_internal.h"

#include <inttypes.h>
#include <locale.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static void put_json_string(FILE *out, const char *s, size_t len) {
  fputc('"', out);
  size_t run = 0;
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c >= 0x20 && c != '"' && c != '\\' && c != 0x7F) continue;
    fwrite(s + run, 1, i - run, out);
    run = i + 1;
    switch (c) {
      case '"': fputs("\\\"", out); break;
      case '\\': fputs("\\\\", out); break;
      case '\n': fputs("\\n", out); break;
      case '\t': fputs("\\t", out); break;
      case '\r': fputs("\\r", out); break;
      case '\b': fputs("\\b", out); break;
      case '\f': fputs("\\f", out); break;
      default: fprintf(out, "\\u%04x", c); break;
    }
  }
  fwrite(s + run, 1, len - run, out);
  fputc('"', out);
}

static void put_leaf(FILE *out, const char *type, const char *value) {
  fprintf(out, "{\"type\":\"%s\",\"value\":", type);
  put_json_string(out, value, strlen(value));
  fputc('}', out);
}

static void format_float(double f, char *buf, size_t cap) {
  if (isnan(f)) {
    snprintf(buf, cap, "nan");
    return;
  }
  if (isinf(f)) {
    snprintf(buf, cap, f < 0 ? "-inf" : "inf");
    return;
  }
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(buf, cap, "%.*g", prec, f);
    if (strtod(buf, NULL) == f) break;
  }
  /* printf honours LC_NUMERIC: turn the locale's decimal point into '.' */
  const char *dp = localeconv()->decimal_point;
  if (dp && *dp && strcmp(dp, ".") != 0) {
    char *at = strstr(buf, dp);
    if (at) {
      size_t dl = strlen(dp);
      *at = '.';
      memmove(at + 1, at + dl, strlen(at + dl) + 1);
    }
  }
  /* make sure it reads as a float ("1" -> "1.0") */
  if (!strpbrk(buf, ".eEn")) {
    size_t n = strlen(buf);
    if (n + 3 <= cap) memcpy(buf + n, ".0", 3);
  }
}

static void put_value(FILE *out, const cm_toml_value_t *v) {
  char buf[64];
  switch (v->type) {
    case CM_TOML_TABLE:
      fputc('{', out);
      for (size_t i = 0; i < v->u.tab.len; i++) {
        if (i) fputc(',', out);
        put_json_string(out, v->u.tab.items[i].key, v->u.tab.items[i].key_len);
        fputc(':', out);
        put_value(out, v->u.tab.items[i].value);
      }
      fputc('}', out);
      break;
    case CM_TOML_ARRAY:
      fputc('[', out);
      for (size_t i = 0; i < v->u.arr.len; i++) {
        if (i) fputc(',', out);
        put_value(out, v->u.arr.items[i]);
      }
      fputc(']', out);
      break;
    case CM_TOML_STRING:
      fputs("{\"type\":\"string\",\"value\":", out);
      put_json_string(out, v->u.str.ptr, v->u.str.len);
      fputc('}', out);
      break;
    case CM_TOML_INTEGER:
      snprintf(buf, sizeof buf, "%" PRId64, v->u.i);
      put_leaf(out, "integer", buf);
      break;
    case CM_TOML_FLOAT:
      format_float(v->u.f, buf, sizeof buf);
      put_leaf(out, "float", buf);
      break;
    case CM_TOML_BOOL:
      put_leaf(out, "bool", v->u.b ? "true" : "false");
      break;
    case CM_TOML_OFFSET_DATETIME:
    case CM_TOML_LOCAL_DATETIME:
    case CM_TOML_LOCAL_DATE:
    case CM_TOML_LOCAL_TIME: {
      static const char *const names[] = {"datetime", "datetime-local", "date-local",
                                          "time-local"};
      if (cm_toml_datetime_format(&v->u.dt, buf, sizeof buf) != CM_OK) buf[0] = '\0';
      put_leaf(out, names[v->type - CM_TOML_OFFSET_DATETIME], buf);
      break;
    }
  }
}

int cm_toml_to_json(const cm_toml_doc_t *doc, FILE *out) {
  if (!doc || !out || !doc->root) return CM_EINVAL;
  put_value(out, doc->root);
  fputc('\n', out);
  if (fflush(out) != 0 || ferror(out)) return CM_EIO;
  return CM_OK;
}
