/* sbuf.h - the text appenders of the tree (not installed): a growing string
 * buffer for text outputs (the SVG, the CSV of a snapshot): printf appends,
 * a failed growth sets `oom` and makes later appends no-ops, so callers
 * check once at the end (free `p`); the bounded snprintf-style appender
 * cm__bprintf; and the UTF-8 decoder. Not thread-safe per buffer. */
#ifndef CM_BASE_SBUF_H
#define CM_BASE_SBUF_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct cm__sbuf {
  char *p;         /* NUL-terminated text, owned (NULL until the first append) */
  size_t n, cap;   /* bytes used (without the NUL), bytes allocated */
  bool oom;        /* an append ran out of host memory */
} cm__sbuf;

/* Make room for `extra` more bytes and a NUL (the byte appenders of the
 * TOML reader): false, with nothing changed, when host memory runs out. */
bool cm__sb_reserve(cm__sbuf *b, size_t extra);
/* Append n bytes of s (not NUL-terminated; the text is not terminated
 * either: cm__sb_reserve keeps room for a NUL). false when out of memory. */
bool cm__sb_add(cm__sbuf *b, const void *s, size_t n);

/* Append printf-formatted text. */
void cm__sb_printf(cm__sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Append arbitrary bytes `s` (NUL-terminated, NULL ok) as XML character
 * data or attribute text: & < > " ' escaped; every well-formed UTF-8
 * character that XML 1.0 allows kept; invalid UTF-8 (stray continuation
 * bytes, overlong forms, surrogates, beyond U+10FFFF, truncated sequences),
 * control characters below U+0020 and U+FFFE / U+FFFF each become U+FFFD.
 * So any file name yields well-formed XML. */
void cm__sb_xml_text(cm__sbuf *b, const char *s);

/* The bounded appender of every display with snprintf semantics (the
 * manager's and the pools' displays, the layout text, the pointer report):
 * append printf-formatted text to buf[0..cap) at offset len, writing what
 * fits (NUL-terminated when anything fits), and return len plus the full
 * formatted length, so that the last return is the length needed. buf may
 * be NULL when cap is 0. A formatting error adds nothing. */
size_t cm__bprintf(char *buf, size_t cap, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
size_t cm__vbprintf(char *buf, size_t cap, size_t len, const char *fmt, va_list ap)
    __attribute__((format(printf, 4, 0)));

/* The well-formed UTF-8 character at s (NUL-terminated): its length, 1 to
 * 4, with the code point in *cp; 0 when the bytes there are not a valid
 * UTF-8 character (a NUL is length 1, code point 0). */
size_t cm__utf8_char(const char *s, unsigned *cp);

#endif
