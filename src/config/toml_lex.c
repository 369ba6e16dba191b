/*
 * toml_lex.c - the lexical half of the TOML 1.0.0 parser (toml_parse.c has
 * the document structure): encoding validation, positions and error
 * messages, and every value that is not a container - strings, keys,
 * integers, floats, booleans, dates and times.
 *
 * Algorithm:
 *  1. One pass over the raw bytes validates the encoding: well-formed UTF-8
 *     (no overlongs, surrogates or code points above U+10FFFF), no control
 *     characters except TAB/LF, CR only as part of CRLF, no NUL. TOML forbids
 *     these everywhere (comments and all string kinds included), so the
 *     grammar code never has to re-check them.
 *  2. Scalars are read where they start (p->i), decoded into the parser's
 *     scratch buffers and turned into tree nodes; numbers and dates are
 *     first delimited as one token, then checked digit by digit.
 *
 * Positions: byte offsets are turned into 1-based line/column (column counts
 * UTF-8 characters) through a forward-moving cache, so recording the position
 * of every key costs O(total input) overall.
 *
 * Exports (internal, toml_parser.h): cm__toml_pos_of,
 * cm__toml_perr, cm__toml_what, cm__toml_validate, cm__toml_parse_key,
 * cm__toml_parse_scalar.
 */
#include <locale.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "toml_parser.h"

/* ---- small helpers ---------------------------------------------------- */

static int sb_add(cm__sbuf *b, const char *s, size_t n) {
  return cm__sb_add(b, s, n) ? CM_OK : CM_ENOMEM;
}

static int sb_addc(cm__sbuf *b, char c) {
  return sb_add(b, &c, 1);
}

void cm__toml_pos_of(parser_t *p, size_t off, uint32_t *line, uint32_t *col) {
  if (off > p->n) off = p->n;
  if (off < p->c_off) {
    p->c_off = 0;
    p->c_line = 1;
    p->c_col = 1;
  }
  uint32_t l = p->c_line, c = p->c_col;
  for (size_t k = p->c_off; k < off; k++) {
    unsigned char ch = (unsigned char)p->s[k];
    if (ch == '\n') {
      l++;
      c = 1;
    } else if ((ch & 0xC0) != 0x80) {
      c++;
    }
  }
  p->c_off = off;
  p->c_line = l;
  p->c_col = c;
  *line = l;
  *col = c;
}

__attribute__((format(printf, 3, 4))) int cm__toml_perr(parser_t *p, size_t off, const char *fmt,
                                                        ...) {
  if (p->diag) {
    uint32_t line, col;
    char msg[400];
    va_list ap;
    cm__toml_pos_of(p, off, &line, &col);
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    memset(p->diag, 0, sizeof *p->diag);
    p->diag->code = CM_EPARSE;
    p->diag->line = line;
    p->diag->column = col;
    snprintf(p->diag->message, sizeof p->diag->message, "line %u, column %u: %s",
             (unsigned)line, (unsigned)col, msg);
  }
  return CM_EPARSE;
}

/* Printable description of the character at the current position. */
const char *cm__toml_what(const parser_t *p, char *buf, size_t cap) {
  int c = peek(p);
  if (c < 0) return "end of input";
  if (c == '\n' || c == '\r') return "end of line";
  if (c == '\t') return "a tab";
  if (c < 0x80) {
    snprintf(buf, cap, "'%c'", c);
  } else {
    size_t k = 1;
    while (k < 4 && p->i + k < p->n && ((unsigned char)p->s[p->i + k] & 0xC0) == 0x80) k++;
    snprintf(buf, cap, "'%.*s'", (int)k, p->s + p->i);
  }
  return buf;
}

/* ---- encoding validation ---------------------------------------------- */

int cm__toml_validate(parser_t *p) {
  const unsigned char *s = (const unsigned char *)p->s;
  size_t n = p->n;
  for (size_t i = 0; i < n;) {
    unsigned char c = s[i];
    if (c < 0x80) {
      if ((c >= 0x20 && c != 0x7F) || c == '\t' || c == '\n') {
        i++;
        continue;
      }
      if (c == '\r') {
        if (i + 1 < n && s[i + 1] == '\n') {
          i += 2;
          continue;
        }
        return cm__toml_perr(p, i, "carriage return not followed by a line feed");
      }
      if (c == 0) return cm__toml_perr(p, i, "NUL byte is not allowed in TOML");
      return cm__toml_perr(p, i, "control character U+%04X is not allowed", (unsigned)c);
    }
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      need = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      need = 2;
      if (c == 0xE0) lo = 0xA0; /* overlong */
      if (c == 0xED) hi = 0x9F; /* surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
      need = 3;
      if (c == 0xF0) lo = 0x90; /* overlong */
      if (c == 0xF4) hi = 0x8F; /* > U+10FFFF */
    } else {
      return cm__toml_perr(p, i, "invalid UTF-8 byte 0x%02X", (unsigned)c);
    }
    for (size_t k = 1; k <= need; k++) {
      if (i + k >= n) return cm__toml_perr(p, i, "truncated UTF-8 sequence");
      unsigned char cc = s[i + k];
      unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
      if (cc < l || cc > h) return cm__toml_perr(p, i, "invalid UTF-8 sequence");
    }
    i += need + 1;
  }
  return CM_OK;
}

/* ---- strings ---------------------------------------------------------- */

static int hexval(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static int add_utf8(cm__sbuf *b, uint32_t cp) {
  char u[4];
  size_t n;
  if (cp < 0x80) {
    u[0] = (char)cp;
    n = 1;
  } else if (cp < 0x800) {
    u[0] = (char)(0xC0 | (cp >> 6));
    u[1] = (char)(0x80 | (cp & 0x3F));
    n = 2;
  } else if (cp < 0x10000) {
    u[0] = (char)(0xE0 | (cp >> 12));
    u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    u[2] = (char)(0x80 | (cp & 0x3F));
    n = 3;
  } else {
    u[0] = (char)(0xF0 | (cp >> 18));
    u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    u[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    u[3] = (char)(0x80 | (cp & 0x3F));
    n = 4;
  }
  return sb_add(b, u, n);
}

/* At a backslash inside a basic string: decode one escape into b. */
static int parse_escape(parser_t *p, cm__sbuf *b) {
  size_t start = p->i;
  int c = at(p, 1);
  char out;
  switch (c) {
    case 'b': out = '\b'; break;
    case 't': out = '\t'; break;
    case 'n': out = '\n'; break;
    case 'f': out = '\f'; break;
    case 'r': out = '\r'; break;
    case '"': out = '"'; break;
    case '\\': out = '\\'; break;
    case 'u':
    case 'U': {
      size_t digits = c == 'u' ? 4 : 8;
      uint32_t cp = 0;
      for (size_t k = 0; k < digits; k++) {
        int h = hexval(at(p, 2 + k));
        if (h < 0) {
          return cm__toml_perr(p, start, "\\%c escape needs exactly %zu hexadecimal digits", c,
                               digits);
        }
        cp = (cp << 4) | (uint32_t)h;
      }
      if ((cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) {
        return cm__toml_perr(p, start, "escape \\%c%.*s is not a Unicode scalar value", c,
                             (int)digits, p->s + start + 2);
      }
      p->i += 2 + digits;
      return add_utf8(b, cp);
    }
    case -1:
      return cm__toml_perr(p, start, "unterminated string");
    default:
      if (c < 0x80 && c > 0x20) return cm__toml_perr(p, start, "invalid escape sequence '\\%c'", c);
      return cm__toml_perr(p, start, "invalid escape sequence after '\\'");
  }
  p->i += 2;
  return sb_addc(b, out);
}

/* p->i at the opening quote of a one-line basic string. */
static int parse_basic(parser_t *p, cm__sbuf *b) {
  size_t start = p->i++;
  for (;;) {
    size_t run = p->i;
    while (p->i < p->n) {
      char c = p->s[p->i];
      if (c == '"' || c == '\\' || c == '\n' || c == '\r') break;
      p->i++;
    }
    if (sb_add(b, p->s + run, p->i - run) != CM_OK) return CM_ENOMEM;
    int c = peek(p);
    if (c < 0 || c == '\n' || c == '\r') {
      return cm__toml_perr(p, start, "unterminated string (missing closing '\"' on this line)");
    }
    if (c == '"') {
      p->i++;
      return CM_OK;
    }
    int rc = parse_escape(p, b);
    if (rc != CM_OK) return rc;
  }
}

/* p->i at the opening quote of a one-line literal string. */
static int parse_literal(parser_t *p, cm__sbuf *b) {
  size_t start = p->i++;
  size_t run = p->i;
  while (p->i < p->n && p->s[p->i] != '\'' && p->s[p->i] != '\n' && p->s[p->i] != '\r') p->i++;
  if (p->i >= p->n || p->s[p->i] != '\'') {
    return cm__toml_perr(p, start,
                         "unterminated literal string (missing closing \"'\" on this line)");
  }
  if (sb_add(b, p->s + run, p->i - run) != CM_OK) return CM_ENOMEM;
  p->i++;
  return CM_OK;
}

/* p->i at the first of three opening delimiters q ('"' or '\''). */
static int parse_multiline(parser_t *p, cm__sbuf *b, char q) {
  size_t start = p->i;
  p->i += 3;
  if (nl_at(p, p->i)) p->i += nl_len(p, p->i);
  for (;;) {
    size_t run = p->i;
    while (p->i < p->n) {
      char c = p->s[p->i];
      if (c == q || c == '\r' || (q == '"' && c == '\\')) break;
      p->i++;
    }
    if (sb_add(b, p->s + run, p->i - run) != CM_OK) return CM_ENOMEM;
    int c = peek(p);
    if (c < 0) {
      return cm__toml_perr(p, start, "unterminated multi-line string (missing closing %c%c%c)", q,
                           q, q);
    }
    if (c == '\r') { /* CRLF -> LF */
      if (sb_addc(b, '\n') != CM_OK) return CM_ENOMEM;
      p->i += 2;
      continue;
    }
    if (c == q) {
      size_t k = 0;
      while (p->i + k < p->n && p->s[p->i + k] == q) k++;
      if (k < 3) {
        if (sb_add(b, p->s + p->i, k) != CM_OK) return CM_ENOMEM;
        p->i += k;
        continue;
      }
      if (k > 5) return cm__toml_perr(p, p->i, "too many quotes at the end of a multi-line string");
      if (sb_add(b, p->s + p->i, k - 3) != CM_OK) return CM_ENOMEM;
      p->i += k;
      return CM_OK;
    }
    /* backslash in a basic string: line-ending backslash or escape */
    size_t j = p->i + 1;
    while (j < p->n && (p->s[j] == ' ' || p->s[j] == '\t')) j++;
    if (nl_at(p, j)) {
      p->i = j;
      while (p->i < p->n &&
             (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r'))
        p->i++;
      continue;
    }
    int rc = parse_escape(p, b);
    if (rc != CM_OK) return rc;
  }
}

/* ---- keys ------------------------------------------------------------- */

static bool is_bare(int c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

static int push_seg(parser_t *p, seg_t **out) {
  if (p->nsegs == p->segcap) {
    size_t ncap = p->segcap ? p->segcap * 2 : 16;
    seg_t *n = realloc(p->segs, ncap * sizeof *n);
    if (!n) return CM_ENOMEM;
    p->segs = n;
    p->segcap = ncap;
  }
  *out = &p->segs[p->nsegs++];
  return CM_OK;
}

/* Parse a (possibly dotted) key; its segments are pushed on p->segs. */
int cm__toml_parse_key(parser_t *p) {
  char wbuf[16];
  for (;;) {
    skip_ws(p);
    seg_t *sg;
    if (push_seg(p, &sg) != CM_OK) return CM_ENOMEM;
    sg->off = p->i;
    sg->start = p->kbuf.n;
    cm__toml_pos_of(p, p->i, &sg->line, &sg->col);
    int c = peek(p);
    int rc = CM_OK;
    if (c == '"' || c == '\'') {
      if (at(p, 1) == c && at(p, 2) == c) {
        return cm__toml_perr(p, p->i, "a multi-line string cannot be used as a key");
      }
      rc = c == '"' ? parse_basic(p, &p->kbuf) : parse_literal(p, &p->kbuf);
    } else if (is_bare(c)) {
      size_t s = p->i;
      while (is_bare(peek(p))) p->i++;
      rc = sb_add(&p->kbuf, p->s + s, p->i - s);
    } else {
      return cm__toml_perr(p, p->i, "expected a key, found %s", WHAT(p));
    }
    if (rc != CM_OK) return rc;
    /* sg may have moved if segs was reallocated by a nested call: re-fetch */
    p->segs[p->nsegs - 1].len = p->kbuf.n - p->segs[p->nsegs - 1].start;
    skip_ws(p);
    if (peek(p) != '.') return CM_OK;
    p->i++;
  }
}

/* ---- dates, times, numbers -------------------------------------------- */

static bool digits_at(const char *t, size_t len, size_t pos, size_t count, int *val) {
  int v = 0;
  if (pos + count > len) return false;
  for (size_t k = 0; k < count; k++) {
    char c = t[pos + k];
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  *val = v;
  return true;
}

static int days_in_month(int y, int m) {
  static const int d[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  if (m == 2 && ((y % 4 == 0 && y % 100 != 0) || y % 400 == 0)) return 29;
  return d[m - 1];
}

/* HH:MM:SS[.frac] at t[pos..]; advances *pos. */
static bool parse_time_part(const char *t, size_t len, size_t *pos, cm_toml_datetime_t *dt) {
  size_t k = *pos;
  if (!digits_at(t, len, k, 2, &dt->hour) || k + 2 >= len || t[k + 2] != ':' ||
      !digits_at(t, len, k + 3, 2, &dt->minute) || k + 5 >= len || t[k + 5] != ':' ||
      !digits_at(t, len, k + 6, 2, &dt->second))
    return false;
  if (dt->hour > 23 || dt->minute > 59 || dt->second > 60) return false;
  k += 8;
  if (k < len && t[k] == '.') {
    k++;
    size_t d = 0;
    uint32_t ns = 0;
    while (k < len && t[k] >= '0' && t[k] <= '9') {
      if (d < 9) ns = ns * 10 + (uint32_t)(t[k] - '0');
      d++;
      k++;
    }
    if (d == 0) return false;
    dt->frac_digits = d > 9 ? 9 : (int)d;
    for (size_t z = d; z < 9; z++) ns *= 10;
    dt->nanosecond = ns;
  }
  *pos = k;
  return true;
}

static bool parse_datetime(const char *t, size_t len, cm_toml_datetime_t *dt) {
  memset(dt, 0, sizeof *dt);
  size_t pos = 0;
  if (len >= 3 && t[2] == ':') {
    if (!parse_time_part(t, len, &pos, dt) || pos != len) return false;
    dt->type = CM_TOML_LOCAL_TIME;
    return true;
  }
  if (!digits_at(t, len, 0, 4, &dt->year) || len < 10 || t[4] != '-' ||
      !digits_at(t, len, 5, 2, &dt->month) || t[7] != '-' || !digits_at(t, len, 8, 2, &dt->day))
    return false;
  if (dt->month < 1 || dt->month > 12 || dt->day < 1 ||
      dt->day > days_in_month(dt->year, dt->month))
    return false;
  if (len == 10) {
    dt->type = CM_TOML_LOCAL_DATE;
    return true;
  }
  if (t[10] != 'T' && t[10] != 't') return false;
  pos = 11;
  if (!parse_time_part(t, len, &pos, dt)) return false;
  if (pos == len) {
    dt->type = CM_TOML_LOCAL_DATETIME;
    return true;
  }
  dt->type = CM_TOML_OFFSET_DATETIME;
  dt->has_offset = true;
  if ((t[pos] == 'Z' || t[pos] == 'z') && pos + 1 == len) return true;
  if (t[pos] != '+' && t[pos] != '-') return false;
  int oh, om;
  if (pos + 6 != len || !digits_at(t, len, pos + 1, 2, &oh) || t[pos + 3] != ':' ||
      !digits_at(t, len, pos + 4, 2, &om) || oh > 23 || om > 59)
    return false;
  dt->offset_minutes = (oh * 60 + om) * (t[pos] == '-' ? -1 : 1);
  return true;
}

/* Digits with single underscores between digits, starting at *pos. Returns
 * the number of digits (0 = none or malformed underscores -> *ok false). */
static size_t scan_digits(const char *t, size_t len, size_t *pos, int base, bool *ok) {
  size_t k = *pos, nd = 0;
  *ok = true;
  for (;;) {
    if (k >= len) break;
    char c = t[k];
    int v = hexval((unsigned char)c);
    if (v >= 0 && v < base && (base == 16 || (c >= '0' && c <= '9'))) {
      nd++;
      k++;
      continue;
    }
    if (c == '_') {
      if (nd == 0 || k + 1 >= len) {
        *ok = false;
        break;
      }
      int w = hexval((unsigned char)t[k + 1]);
      if (w < 0 || w >= base || (base != 16 && !(t[k + 1] >= '0' && t[k + 1] <= '9'))) {
        *ok = false;
        break;
      }
      k++;
      continue;
    }
    break;
  }
  if (nd == 0) *ok = false;
  *pos = k;
  return nd;
}

/* inf or nan after an optional sign (t + pos, 3 bytes): a FLOAT into *out. */
static int special_float(const char *t, size_t pos, bool neg, cm_toml_value_t **out) {
  cm_toml_value_t *v = cm__toml_new(CM_TOML_FLOAT);
  if (!v) return CM_ENOMEM;
  if (t[pos] == 'i') {
    v->u.f = neg ? -INFINITY : INFINITY;
  } else {
    v->u.f = neg ? -NAN : NAN;
  }
  *out = v;
  return CM_OK;
}

/* 0x / 0o / 0b integer t[0..len) (pos: 1 when a sign came first, an error). */
static int radix_integer(parser_t *p, size_t off, const char *t, size_t len, size_t pos,
                         cm_toml_value_t **out) {
  bool ok;
  if (pos)
    return cm__toml_perr(p, off, "a sign is not allowed on hexadecimal, octal or binary integers");
  int base = t[1] == 'x' ? 16 : t[1] == 'o' ? 8 : 2;
  size_t k = 2;
  scan_digits(t, len, &k, base, &ok);
  if (!ok || k != len)
    return cm__toml_perr(p, off, "invalid %s integer '%.*s'",
                         base == 16  ? "hexadecimal"
                         : base == 8 ? "octal"
                                     : "binary",
                         (int)(len > 64 ? 64 : len), t);
  uint64_t v = 0;
  for (k = 2; k < len; k++) {
    if (t[k] == '_') continue;
    uint64_t d = (uint64_t)hexval((unsigned char)t[k]);
    if (v > ((uint64_t)INT64_MAX - d) / (uint64_t)base) {
      return cm__toml_perr(p, off, "integer '%.*s' does not fit in 64 bits",
                           (int)(len > 64 ? 64 : len), t);
    }
    v = v * (uint64_t)base + d;
  }
  cm_toml_value_t *nv = cm__toml_new(CM_TOML_INTEGER);
  if (!nv) return CM_ENOMEM;
  nv->u.i = (int64_t)v;
  *out = nv;
  return CM_OK;
}

/* A decimal float t[0..len) already checked: underscores dropped, the
 * decimal point spelt the locale's way, converted by strtod. */
static int decimal_float(parser_t *p, const char *t, size_t len, cm_toml_value_t **out) {
  /* strtod honours LC_NUMERIC: spell the decimal point the locale's way */
  const char *dp = localeconv()->decimal_point;
  if (!dp || !*dp) dp = ".";
  p->buf.n = 0;
  for (size_t k = 0; k < len; k++) {
    if (t[k] == '_') continue;
    int arc = t[k] == '.' ? sb_add(&p->buf, dp, strlen(dp)) : sb_addc(&p->buf, t[k]);
    if (arc != CM_OK) return CM_ENOMEM;
  }
  p->buf.p[p->buf.n] = '\0';
  cm_toml_value_t *v = cm__toml_new(CM_TOML_FLOAT);
  if (!v) return CM_ENOMEM;
  v->u.f = strtod(p->buf.p, NULL);
  *out = v;
  return CM_OK;
}

/* A decimal integer whose digits start at t + int_start, already checked. */
static int decimal_integer(parser_t *p, size_t off, const char *t, size_t len, size_t int_start,
                           bool neg, cm_toml_value_t **out) {
  uint64_t v = 0, lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
  for (size_t k = int_start; k < len; k++) {
    if (t[k] == '_') continue;
    uint64_t d = (uint64_t)(t[k] - '0');
    if (v > (lim - d) / 10) {
      return cm__toml_perr(p, off, "integer '%.*s' does not fit in 64 bits",
                           (int)(len > 64 ? 64 : len), t);
    }
    v = v * 10 + d;
  }
  cm_toml_value_t *nv = cm__toml_new(CM_TOML_INTEGER);
  if (!nv) return CM_ENOMEM;
  nv->u.i = neg ? (int64_t)(0 - v) : (int64_t)v;
  *out = nv;
  return CM_OK;
}

/* A number token t[0..len) at source offset off: integer (any base) or float. */
static int parse_number(parser_t *p, size_t off, const char *t, size_t len,
                        cm_toml_value_t **out) {
  size_t pos = 0;
  bool neg = false, ok;
  if (len && (t[0] == '+' || t[0] == '-')) {
    neg = t[0] == '-';
    pos = 1;
  }
  if (len - pos == 3 && (memcmp(t + pos, "inf", 3) == 0 || memcmp(t + pos, "nan", 3) == 0))
    return special_float(t, pos, neg, out);
  if (len - pos >= 2 && t[pos] == '0' &&
      (t[pos + 1] == 'x' || t[pos + 1] == 'o' || t[pos + 1] == 'b'))
    return radix_integer(p, off, t, len, pos, out);
  size_t int_start = pos;
  size_t nd = scan_digits(t, len, &pos, 10, &ok);
  if (!ok) goto invalid;
  if (t[int_start] == '0' && nd > 1) {
    return cm__toml_perr(p, off, "leading zeros are not allowed in '%.*s'",
                         (int)(len > 64 ? 64 : len), t);
  }
  bool is_float = false;
  if (pos < len && t[pos] == '.') {
    pos++;
    is_float = true;
    scan_digits(t, len, &pos, 10, &ok);
    if (!ok) goto invalid;
  }
  if (pos < len && (t[pos] == 'e' || t[pos] == 'E')) {
    pos++;
    is_float = true;
    if (pos < len && (t[pos] == '+' || t[pos] == '-')) pos++;
    scan_digits(t, len, &pos, 10, &ok);
    if (!ok) goto invalid;
  }
  if (pos != len) goto invalid;
  if (is_float) return decimal_float(p, t, len, out);
  return decimal_integer(p, off, t, len, int_start, neg, out);
invalid:
  return cm__toml_perr(p, off, "invalid number '%.*s'", (int)(len > 64 ? 64 : len), t);
}

static bool is_tok(int c) {
  return is_bare(c) || c == '+' || c == '.' || c == ':';
}

/* Numbers, inf/nan, dates and times. */
/* "True", "FALSE": a boolean in the wrong case (not a bare string). */
static bool is_bool_word(const char *w, size_t n) {
  const char *t = n == 4 ? "true" : n == 5 ? "false" : NULL;
  if (!t) return false;
  for (size_t i = 0; i < n; i++)
    if ((w[i] | 0x20) != t[i]) return false;
  return true;
}

/* A bare word where a value belongs (level = basic): strings need quotes. */
static int bare_word(parser_t *p, size_t s) {
  int n = (int)(p->i - s > 64 ? 64 : p->i - s);
  return cm__toml_perr(p, s, "invalid value '%.*s': strings need quotes (write \"%.*s\")", n,
                       p->s + s, n, p->s + s);
}

static int parse_scalar_token(parser_t *p, cm_toml_value_t **out) {
  size_t start = p->i;
  while (p->i < p->n && is_tok((unsigned char)p->s[p->i])) p->i++;
  const char *t = p->s + start;
  size_t len = p->i - start;
  char dbuf[64], *joined = NULL;
  bool date_like = len >= 5 && t[4] == '-' && t[0] >= '0' && t[0] <= '9' && t[1] >= '0' &&
                   t[1] <= '9' && t[2] >= '0' && t[2] <= '9' && t[3] >= '0' && t[3] <= '9';
  if (date_like && len == 10 && peek(p) == ' ' && at(p, 1) >= '0' && at(p, 1) <= '9') {
    /* "YYYY-MM-DD HH:MM:SS..." - a space may separate date and time. The
     * time part has no length limit (extra fraction digits are truncated),
     * so a long one is joined on the heap. */
    size_t s2 = ++p->i;
    while (p->i < p->n && is_tok((unsigned char)p->s[p->i])) p->i++;
    size_t l2 = p->i - s2;
    char *buf = dbuf;
    if (l2 > sizeof dbuf - 11) {
      buf = joined = malloc(11 + l2);
      if (!joined) return CM_ENOMEM;
    }
    memcpy(buf, t, 10);
    buf[10] = 'T';
    memcpy(buf + 11, p->s + s2, l2);
    t = buf;
    len = 11 + l2;
  }
  if (date_like || (len >= 3 && t[2] == ':')) {
    cm_toml_datetime_t dt;
    bool ok = parse_datetime(t, len, &dt);
    int rc =
        ok ? CM_OK
           : cm__toml_perr(p, start, "invalid date/time '%.*s'", (int)(len > 64 ? 64 : len), t);
    free(joined);
    if (rc != CM_OK) return rc;
    cm_toml_value_t *v = cm__toml_new(dt.type);
    if (!v) return CM_ENOMEM;
    v->u.dt = dt;
    *out = v;
    return CM_OK;
  }
  if (len == 0) {
    char wbuf[16];
    return cm__toml_perr(p, start, "expected a value, found %s", WHAT(p));
  }
  return parse_number(p, start, t, len, out);
}

/* ---- values ----------------------------------------------------------- */

static int new_string(parser_t *p, cm_toml_value_t **out) {
  cm_toml_value_t *v = cm__toml_new(CM_TOML_STRING);
  char *s = malloc(p->buf.n + 1);
  if (!v || !s) {
    free(v);
    free(s);
    return CM_ENOMEM;
  }
  if (p->buf.n) memcpy(s, p->buf.p, p->buf.n);
  s[p->buf.n] = '\0';
  v->u.str.ptr = s;
  v->u.str.len = p->buf.n;
  *out = v;
  return CM_OK;
}

/* Strings, booleans, numbers, dates and times; anything else is an error
 * that names what was found. */
int cm__toml_parse_scalar(parser_t *p, cm_toml_value_t **out) {
  char wbuf[16];
  int c = peek(p);
  int rc;
  switch (c) {
    case '"':
    case '\'':
      p->buf.n = 0;
      if (at(p, 1) == c && at(p, 2) == c) {
        rc = parse_multiline(p, &p->buf, (char)c);
      } else {
        rc = c == '"' ? parse_basic(p, &p->buf) : parse_literal(p, &p->buf);
      }
      return rc != CM_OK ? rc : new_string(p, out);
    case 't':
    case 'f': {
      bool val = c == 't';
      size_t wl = val ? 4 : 5;
      if (p->n - p->i < wl || memcmp(p->s + p->i, val ? "true" : "false", wl) != 0 ||
          is_tok(at(p, wl))) {
        size_t s = p->i;
        while (p->i < p->n && is_tok((unsigned char)p->s[p->i])) p->i++;
        if (!is_bool_word(p->s + s, p->i - s)) return bare_word(p, s);
        return cm__toml_perr(p, s, "invalid value '%.*s' (booleans are lower-case true/false)",
                             (int)(p->i - s > 64 ? 64 : p->i - s), p->s + s);
      }
      cm_toml_value_t *v = cm__toml_new(CM_TOML_BOOL);
      if (!v) return CM_ENOMEM;
      v->u.b = val;
      p->i += wl;
      *out = v;
      return CM_OK;
    }
    default:
      if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
        size_t s = p->i, k = p->i;
        while (k < p->n && is_tok((unsigned char)p->s[k])) k++;
        bool special = (k - s == 3 && (!memcmp(p->s + s, "inf", 3) || !memcmp(p->s + s, "nan", 3)));
        if (!special) {
          p->i = k;
          if (is_bool_word(p->s + s, k - s))
            return cm__toml_perr(p, s, "invalid value '%.*s' (booleans are lower-case true/false)",
                                 (int)(k - s), p->s + s);
          return bare_word(p, s);
        }
      }
      if ((c >= '0' && c <= '9') || c == '+' || c == '-' || c == 'i' || c == 'n') {
        return parse_scalar_token(p, out);
      }
      if (c < 0 || c == '\n' || c == '\r' || c == '#') {
        return cm__toml_perr(p, p->i, "expected a value, found %s", WHAT(p));
      }
      return cm__toml_perr(p, p->i, "invalid value starting with %s", WHAT(p));
  }
}

