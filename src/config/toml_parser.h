/*
 * toml_parser.h - the parser state and the lexical helpers shared by the two
 * halves of the TOML parser: toml_lex.c (encoding validation, positions and
 * errors, strings, keys, numbers, dates/times, booleans) and toml_parse.c
 * (arrays, inline tables, key/value pairs, table headers, the document).
 * Not installed; nothing here is exported from the library.
 */
#ifndef CM_CONFIG_TOML_PARSER_H
#define CM_CONFIG_TOML_PARSER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/sbuf.h"
#include "toml_internal.h"


/* One segment of a dotted key. */
typedef struct {
  size_t start, len; /* decoded bytes in parser.kbuf */
  size_t off;        /* source offset of the segment */
  uint32_t line, col;
} seg_t;

/* The parser: input, position, diagnostics, scratch buffers, the key
 * segment stack and the tree being built (cur: the table of the last header). */
typedef struct {
  const char *s;
  size_t n, i;
  cm_diag_t *diag;
  size_t c_off; /* line/column cache: position of c_off */
  uint32_t c_line, c_col;
  cm__sbuf buf;  /* scratch for string values and numbers */
  cm__sbuf kbuf; /* decoded key segments (a stack, see segs) */
  seg_t *segs; /* key segments of the keys being parsed (a stack) */
  size_t nsegs, segcap;
  cm_toml_value_t *root, *cur;
} parser_t;

/* 1-based line and column (in UTF-8 characters) of byte offset off. */
void cm__toml_pos_of(parser_t *p, size_t off, uint32_t *line, uint32_t *col);
/* Record a parse error at offset off ("line L, column C: message") in the
 * diag, if any; returns CM_EPARSE. */
__attribute__((format(printf, 3, 4))) int cm__toml_perr(parser_t *p, size_t off,
                                                        const char *fmt, ...);
/* Printable description of the character at the current position (buf
 * holds it when it is quoted). */
const char *cm__toml_what(const parser_t *p, char *buf, size_t cap);
#define WHAT(p) cm__toml_what((p), wbuf, sizeof wbuf)
/* Validate the encoding of the whole input (step 1 of toml_lex.c). */
int cm__toml_validate(parser_t *p);
/* Parse a (possibly dotted) key; its segments are pushed on p->segs. */
int cm__toml_parse_key(parser_t *p);
/* Parse a value that is not an array or inline table at the current
 * position: a string, boolean, number or date/time. On success *out is set. */
int cm__toml_parse_scalar(parser_t *p, cm_toml_value_t **out);

/* The byte at the current position, or -1 at the end. */
static inline int peek(const parser_t *p) {
  return p->i < p->n ? (unsigned char)p->s[p->i] : -1;
}

/* The byte k after the current position, or -1 past the end. */
static inline int at(const parser_t *p, size_t k) {
  return p->i + k < p->n ? (unsigned char)p->s[p->i + k] : -1;
}

/* Newline at offset k (LF, or CRLF; a bare CR never survives validation). */
static inline bool nl_at(const parser_t *p, size_t k) {
  return k < p->n && (p->s[k] == '\n' || p->s[k] == '\r');
}

/* Length of the newline at offset k (2 for CRLF). */
static inline size_t nl_len(const parser_t *p, size_t k) {
  return p->s[k] == '\r' ? 2 : 1;
}

/* Spaces and tabs. */
static inline void skip_ws(parser_t *p) {
  while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t')) p->i++;
}

/* A comment up to (not including) the end of its line. */
static inline void skip_comment(parser_t *p) {
  if (peek(p) != '#') return;
  while (p->i < p->n && p->s[p->i] != '\n' && p->s[p->i] != '\r') p->i++;
}

/* Whitespace, newlines and comments (inside arrays). */
static inline void skip_ws_nl_comments(parser_t *p) {
  for (;;) {
    skip_ws(p);
    if (peek(p) == '#') skip_comment(p);
    if (nl_at(p, p->i)) {
      p->i += nl_len(p, p->i);
      continue;
    }
    return;
  }
}

#endif
