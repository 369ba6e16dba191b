/* sbuf.c - the replay layer's growing string buffer (sbuf.h).
 * Exports: cm__sb_printf. */
#include "replay/sbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

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
