/* sbuf.c - the text appenders of every text output (sbuf.h).
 * Exports: cm__sb_reserve, cm__sb_add, cm__sb_printf, cm__sb_xml_text, cm__bprintf, cm__vbprintf,
 * cm__utf8_char. */
#include "base/sbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

bool cm__sb_reserve(cm__sbuf *b, size_t extra) {
  if (extra > SIZE_MAX - b->n - 1) return false;
  if (b->n + extra + 1 <= b->cap) return true;
  size_t ncap = b->cap ? b->cap : 64;
  while (ncap < b->n + extra + 1) {
    if (ncap > SIZE_MAX / 2) {
      ncap = b->n + extra + 1;
      break;
    }
    ncap *= 2;
  }
  char *np = realloc(b->p, ncap);
  if (!np) return false;
  b->p = np;
  b->cap = ncap;
  return true;
}

bool cm__sb_add(cm__sbuf *b, const void *s, size_t n) {
  if (!cm__sb_reserve(b, n)) return false;
  if (n) memcpy(b->p + b->n, s, n);
  b->n += n;
  return true;
}

void cm__sb_printf(cm__sbuf *b, const char *fmt, ...) {
  if (b->oom) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? b->cap - b->n : 0, fmt, ap);
    va_end(ap);
    if (k < 0) {
      b->oom = true;
      return;
    }
    if (b->p && (size_t)k < b->cap - b->n) {
      b->n += (size_t)k;
      return;
    }
    size_t ncap = b->cap ? b->cap * 2 : 1 << 16;
    while (ncap < b->n + (size_t)k + 1) ncap *= 2;
    char *np = realloc(b->p, ncap);
    if (!np) {
      b->oom = true;
      return;
    }
    b->p = np;
    b->cap = ncap;
  }
}

size_t cm__vbprintf(char *buf, size_t cap, size_t len, const char *fmt, va_list ap) {
  size_t room = len < cap ? cap - len : 0;
  int n = vsnprintf(room ? buf + len : NULL, room, fmt, ap);
  return n > 0 ? len + (size_t)n : len;
}

size_t cm__bprintf(char *buf, size_t cap, size_t len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  len = cm__vbprintf(buf, cap, len, fmt, ap);
  va_end(ap);
  return len;
}

size_t cm__utf8_char(const char *s, unsigned *cp) {
  const unsigned char *u = (const unsigned char *)s;
  unsigned c = u[0];
  if (c < 0x80) {
    *cp = c;
    return 1;
  }
  size_t n;
  unsigned min;
  if (c >= 0xc2 && c <= 0xdf) n = 2, min = 0x80, c &= 0x1f;
  else if (c >= 0xe0 && c <= 0xef) n = 3, min = 0x800, c &= 0x0f;
  else if (c >= 0xf0 && c <= 0xf4) n = 4, min = 0x10000, c &= 0x07;
  else return 0; /* a continuation byte, 0xc0/0xc1 (overlong) or 0xf5.. */
  for (size_t i = 1; i < n; i++) {
    if ((u[i] & 0xc0) != 0x80) return 0; /* truncated (a NUL stops here too) */
    c = (c << 6) | (u[i] & 0x3f);
  }
  if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)) return 0;
  *cp = c;
  return n;
}

void cm__sb_xml_text(cm__sbuf *b, const char *s) {
  static const char repl[] = "\xef\xbf\xbd"; /* U+FFFD */
  while (s && *s) {
    unsigned cp = 0;
    size_t n = cm__utf8_char(s, &cp);
    if (n == 0 || cp < 0x20 || cp == 0xfffe || cp == 0xffff) {
      cm__sb_printf(b, "%s", repl);
      s += n ? n : 1;
      continue;
    }
    switch (cp) {
      case '&': cm__sb_printf(b, "&amp;"); break;
      case '<': cm__sb_printf(b, "&lt;"); break;
      case '>': cm__sb_printf(b, "&gt;"); break;
      case '"': cm__sb_printf(b, "&quot;"); break;
      case '\'': cm__sb_printf(b, "&#39;"); break;
      default: cm__sb_printf(b, "%.*s", (int)n, s);
    }
    s += n;
  }
}
