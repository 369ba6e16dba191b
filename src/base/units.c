/*
 * units.c - sizes and bytes (units.h): the one size grammar and the byte
 * formats, among them the public BytesFormat of spec §9.3 (cm_format_bytes,
 * cubemem/common.h).
 *
 * Invariants: nothing here allocates, prints or keeps state; a failed parse
 * leaves its output untouched.
 *
 * Exports: cm_format_bytes, cm__size_parse,
 * cm__fmt_size_exact, cm__fmt_iec.
 */
#include "base/units.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cubemem/common.h"

/* ---- the size grammar ------------------------------------------------------ */

static const struct {
  const char *u;
  uint64_t m;
} k_units[] = {{"", 1},           {"B", 1},          {"KiB", 1ull << 10}, {"MiB", 1ull << 20},
               {"GiB", 1ull << 30}, {"TiB", 1ull << 40}, {"KB", 1000},       {"MB", 1000000},
               {"GB", 1000000000}, {"TB", 1000000000000}};

static int why_set(char *why, size_t cap, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int why_set(char *why, size_t cap, int rc, const char *fmt, ...) {
  if (why && cap) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, cap, fmt, ap);
    va_end(ap);
  }
  return rc;
}

/* The multiplier of the unit text u, or 0 when it is none. */
static uint64_t unit_of(const char *u) {
  for (size_t i = 0; i < sizeof k_units / sizeof k_units[0]; i++)
    if (!strcasecmp(u, k_units[i].u)) return k_units[i].m;
  return 0;
}

static int unit_error(const char *u, char *why, size_t cap) {
  char c = (char)(*u >= 'a' && *u <= 'z' ? *u - 32 : *u);
  if (strlen(u) == 1 && strchr("KMGT", c))
    return why_set(why, cap, -1,
                   "unit '%s' is ambiguous: write %ciB (powers of 1024) or %cB (powers of 1000)",
                   u, c, c);
  return why_set(why, cap, -1, "unknown unit '%s'", u);
}

/* value = number * m, with the number's text in num[0..n) (digits and at most
 * one '.'): exact for integers, through double for fractions. */
static int scale(const char *num, size_t n, uint64_t m, uint64_t *out, char *why, size_t cap) {
  if (!memchr(num, '.', n)) {
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
      unsigned d = (unsigned)(num[i] - '0');
      if (v > (UINT64_MAX - d) / 10) return why_set(why, cap, -1, "too large");
      v = v * 10 + d;
    }
    if (v > UINT64_MAX / m) return why_set(why, cap, -1, "too large");
    *out = v * m;
    return 0;
  }
  double b = strtod(num, NULL) * (double)m;
  if (b >= 18446744073709549568.0) return why_set(why, cap, -1, "too large");
  if (b != floor(b)) return why_set(why, cap, -1, "not a whole number of bytes");
  *out = (uint64_t)b;
  return 0;
}

int cm__size_parse(const char *s, size_t len, uint64_t *out, char *why, size_t cap) {
  char text[128];
  if (why && cap) why[0] = '\0';
  if (!s || len == 0 || len >= sizeof text || memchr(s, '\0', len) ||
      !((*s >= '0' && *s <= '9') || *s == '.'))
    return why_set(why, cap, -1, "expected a number with an optional unit");
  memcpy(text, s, len);
  text[len] = '\0';
  char *end;
  errno = 0;
  double v = strtod(text, &end);
  if (errno || end == text || !(v >= 0) || isinf(v))
    return why_set(why, cap, -1, "expected a number with an optional unit");
  /* strtod reads hex and exponents: the grammar is plain decimals only */
  for (const char *c = text; c < end; c++)
    if (!((*c >= '0' && *c <= '9') || *c == '.'))
      return why_set(why, cap, -1, "expected a plain decimal number");
  const char *u = end;
  while (*u == ' ') u++;
  uint64_t m = unit_of(u);
  if (!m) return unit_error(u, why, cap);
  *end = '\0';
  return scale(text, (size_t)(end - text), m, out, why, cap);
}

/* ---- byte formats ---------------------------------------------------------- */

void cm__fmt_size_exact(char *buf, size_t cap, uint64_t v) {
  static const char *const u[] = {"TiB", "GiB", "MiB", "KiB"};
  static const unsigned sh[] = {40, 30, 20, 10};
  for (int i = 0; i < 4; i++)
    if (v && v % (1ull << sh[i]) == 0) {
      snprintf(buf, cap, "%" PRIu64 "%s", v >> sh[i], u[i]);
      return;
    }
  snprintf(buf, cap, "%" PRIu64, v);
}

void cm__fmt_iec(uint64_t b, char *buf, size_t cap) {
  static const char *const u[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int e = 0;
  double v = (double)b;
  while (e < 5 && v >= 1024) v /= 1024, e++;
  if (e == 0 || v == floor(v)) snprintf(buf, cap, "%.0f %s", v, u[e]);
  else snprintf(buf, cap, "%.2f %s", v, u[e]);
}

size_t cm_format_bytes(uint64_t b, char *buf, size_t cap) {
  int n;
  if (b < 1000) {
    n = snprintf(buf, cap, "%" PRIu64 " B", b);
  } else {
    int e = (int)floor(log((double)b) / log(1000.0));
    if (e < 1) e = 1;
    if (e > 8) e = 8;
    double v = (double)b / pow(1000.0, e);
    n = snprintf(buf, cap, "%.2f %cB", v, "KMGTPEZY"[e - 1]);
  }
  return n > 0 ? (size_t)n : 0;
}
