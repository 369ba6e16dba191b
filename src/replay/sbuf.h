/* sbuf.h - a growing string buffer for the replay layer's text outputs (the
 * SVG, the CSV of a snapshot): printf appends, a failed growth sets `oom` and
 * makes later appends no-ops, so callers check once at the end. Free `p`. */
#ifndef CM_REPLAY_SBUF_H
#define CM_REPLAY_SBUF_H

#include <stdbool.h>
#include <stddef.h>

typedef struct cm__sbuf {
  char *p;         /* NUL-terminated text, owned (NULL until the first append) */
  size_t n, cap;   /* bytes used (without the NUL), bytes allocated */
  bool oom;        /* an append ran out of host memory */
} cm__sbuf;

/* Append printf-formatted text. */
void cm__sb_printf(cm__sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
