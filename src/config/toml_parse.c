/*
 * toml_parse.c - strict TOML 1.0.0 parser (cm_toml_parse): the document
 * structure. toml_lex.c validates the encoding first and reads every key and
 * scalar value; this file builds the tree from them.
 *
 * Algorithm: after the encoding pass (toml_lex.c), a hand-written
 * recursive-descent parser walks the buffer once, building the tree of
 * toml_internal.h. Recursion happens only for nested arrays and inline
 * tables; every container gets a depth (root 0) and creating one deeper than
 * CM_TOML_MAX_DEPTH is an error, which bounds both the parser's recursion and
 * every later walk over the tree.
 *
 * Table definition rules (TOML 1.0 "tables" / "array of tables"), enforced
 * through each table's kind:
 *  - [h] may pass through any table except an inline one, and through the
 *    last element of an array of tables; its final key may be new, or an
 *    IMPLICIT table (which then becomes EXPLICIT); anything else is a
 *    redefinition;
 *  - [[h]] navigates like [h]; its final key must be new or an array made by
 *    [[...]] (a static array is immutable);
 *  - a dotted key a.b = v may only pass through tables that were themselves
 *    created by dotted keys (DOTTED); the final key must be new;
 *  - inline tables and static arrays are never extended afterwards.
 *
 * Invariants: on error the first failure is recorded in the diag and
 * propagated as a negative status; partially built trees are freed by the
 * caller (cm_toml_parse) through the root.
 *
 * Exports: cm_toml_parse.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/debug.h"
#include "toml_parser.h"

/* Human-readable, escaped, truncated rendering of a key for messages. */
static const char *keyname(const parser_t *p, const seg_t *sg, char *buf, size_t cap) {
  size_t o = 0;
  const char *k = p->kbuf.p + sg->start;
  for (size_t j = 0; j < sg->len && o + 8 < cap; j++) {
    unsigned char c = (unsigned char)k[j];
    if (c < 0x20 || c == 0x7F || c == '\'' || c == '\\') {
      o += (size_t)snprintf(buf + o, cap - o, "\\x%02X", c);
    } else {
      buf[o++] = (char)c;
    }
  }
  if (o + 8 >= cap) {
    memcpy(buf + o, "...", 3);
    o += 3;
  }
  buf[o] = '\0';
  return buf;
}

/* ---- values ----------------------------------------------------------- */

static int parse_value(parser_t *p, uint32_t depth, cm_toml_value_t **out);
static int parse_keyval(parser_t *p, cm_toml_value_t *table);

static int check_depth(parser_t *p, size_t off, uint32_t depth) {
  if (depth > CM_TOML_MAX_DEPTH) {
    return cm__toml_perr(p, off, "nesting too deep (more than %d levels of tables/arrays)",
                         CM_TOML_MAX_DEPTH);
  }
  return CM_OK;
}

static int parse_array(parser_t *p, uint32_t depth, cm_toml_value_t **out) {
  char wbuf[16];
  size_t start = p->i;
  int rc = check_depth(p, start, depth);
  if (rc != CM_OK) return rc;
  cm_toml_value_t *a = cm__toml_new(CM_TOML_ARRAY);
  if (!a) return CM_ENOMEM;
  a->u.arr.depth = depth;
  p->i++;
  for (;;) {
    skip_ws_nl_comments(p);
    if (peek(p) == ']') {
      p->i++;
      break;
    }
    uint32_t line, col;
    cm_toml_value_t *v = NULL;
    cm__toml_pos_of(p, p->i, &line, &col);
    if (peek(p) < 0) {
      rc = cm__toml_perr(p, start, "unterminated array (missing ']')");
      goto fail;
    }
    rc = parse_value(p, depth + 1, &v);
    if (rc != CM_OK) goto fail;
    v->line = line;
    v->column = col;
    if (cm__toml_array_push(a, v) != CM_OK) {
      cm__toml_free(v);
      rc = CM_ENOMEM;
      goto fail;
    }
    skip_ws_nl_comments(p);
    int c = peek(p);
    if (c == ',') {
      p->i++;
    } else if (c == ']') {
      p->i++;
      break;
    } else if (c < 0) {
      rc = cm__toml_perr(p, start, "unterminated array (missing ']')");
      goto fail;
    } else {
      rc = cm__toml_perr(p, p->i, "expected ',' or ']' in array, found %s", WHAT(p));
      goto fail;
    }
  }
  *out = a;
  return CM_OK;
fail:
  cm__toml_free(a);
  return rc;
}

static int parse_inline_table(parser_t *p, uint32_t depth, cm_toml_value_t **out) {
  char wbuf[16];
  size_t start = p->i;
  int rc = check_depth(p, start, depth);
  if (rc != CM_OK) return rc;
  cm_toml_value_t *t = cm__toml_new(CM_TOML_TABLE);
  if (!t) return CM_ENOMEM;
  t->u.tab.depth = depth;
  t->u.tab.kind = CM_TOML_TABLE_INLINE;
  p->i++;
  skip_ws(p);
  if (peek(p) == '}') {
    p->i++;
    *out = t;
    return CM_OK;
  }
  for (;;) {
    skip_ws(p);
    if (peek(p) == '}') {
      rc = cm__toml_perr(p, p->i, "trailing comma is not allowed in an inline table");
      goto fail;
    }
    if (nl_at(p, p->i)) {
      rc = cm__toml_perr(p, p->i, "newline is not allowed inside an inline table");
      goto fail;
    }
    rc = parse_keyval(p, t);
    if (rc != CM_OK) goto fail;
    skip_ws(p);
    int c = peek(p);
    if (c == ',') {
      p->i++;
    } else if (c == '}') {
      p->i++;
      break;
    } else if (c == '\n' || c == '\r') {
      rc = cm__toml_perr(p, p->i, "newline is not allowed inside an inline table");
      goto fail;
    } else if (c < 0) {
      rc = cm__toml_perr(p, start, "unterminated inline table (missing '}')");
      goto fail;
    } else {
      rc = cm__toml_perr(p, p->i, "expected ',' or '}' in inline table, found %s", WHAT(p));
      goto fail;
    }
  }
  *out = t;
  return CM_OK;
fail:
  cm__toml_free(t);
  return rc;
}

/* depth: the depth a container value would get. On success *out is set. */
static int parse_value(parser_t *p, uint32_t depth, cm_toml_value_t **out) {
  switch (peek(p)) {
    case '[':
      return parse_array(p, depth, out);
    case '{':
      return parse_inline_table(p, depth, out);
    default:
      return cm__toml_parse_scalar(p, out);
  }
}

static const char *kind_text(const cm_toml_value_t *v) {
  if (v->type != CM_TOML_TABLE) {
    return v->type == CM_TOML_ARRAY ? (v->u.arr.table_array ? "an array of tables" : "an array")
                                    : "a value";
  }
  switch (v->u.tab.kind) {
    case CM_TOML_TABLE_INLINE: return "an inline table";
    case CM_TOML_TABLE_EXPLICIT: return "a table defined by a [header]";
    case CM_TOML_TABLE_IMPLICIT: return "a table created implicitly by a [header] of a sub-table";
    case CM_TOML_TABLE_DOTTED: return "a table defined by dotted keys";
    default: return "a table";
  }
}

static int new_table(parser_t *p, const seg_t *sg, cm_toml_value_t *parent,
                     cm_toml_table_kind_t kind, cm_toml_value_t **out) {
  int rc = check_depth(p, sg->off, parent->u.tab.depth + 1);
  if (rc != CM_OK) return rc;
  cm_toml_value_t *t = cm__toml_new(CM_TOML_TABLE);
  if (!t) return CM_ENOMEM;
  t->u.tab.depth = parent->u.tab.depth + 1;
  t->u.tab.kind = kind;
  t->line = sg->line;
  t->column = sg->col;
  if (cm__toml_table_add(parent, p->kbuf.p + sg->start, sg->len, t) != CM_OK) {
    cm__toml_free(t);
    return CM_ENOMEM;
  }
  *out = t;
  return CM_OK;
}

/* key = value, inserted into table (the current table or an inline one). */
static int parse_keyval(parser_t *p, cm_toml_value_t *table) {
  char wbuf[16], kb[96];
  size_t base = p->nsegs, kbase = p->kbuf.n;
  int rc = cm__toml_parse_key(p);
  if (rc != CM_OK) return rc;
  size_t nseg = p->nsegs - base;
  cm_toml_value_t *t = table;
  for (size_t k = 0; k + 1 < nseg; k++) {
    const seg_t *sg = &p->segs[base + k];
    cm_toml_value_t *child = cm__toml_table_find(t, p->kbuf.p + sg->start, sg->len);
    if (!child) {
      rc = new_table(p, sg, t, CM_TOML_TABLE_DOTTED, &child);
      if (rc != CM_OK) return rc;
    } else if (child->type == CM_TOML_TABLE && child->u.tab.kind == CM_TOML_TABLE_IMPLICIT) {
      /* TOML 1.0: dotted keys define the tables before their last part only
       * if those tables were not created before; [x.y.z] created this one */
      return cm__toml_perr(
          p, sg->off,
          "cannot use dotted key to add to '%s': it is already a table, created "
          "implicitly by a [header] of one of its sub-tables (line %u); dotted keys "
          "can only extend tables that dotted keys defined; give it its own [header]",
          keyname(p, sg, kb, sizeof kb), (unsigned)child->line);
    } else if (child->type != CM_TOML_TABLE || child->u.tab.kind != CM_TOML_TABLE_DOTTED) {
      return cm__toml_perr(p, sg->off, "cannot use dotted key to add to '%s': it is already %s",
                           keyname(p, sg, kb, sizeof kb), kind_text(child));
    }
    t = child;
  }
  const seg_t *last = &p->segs[base + nseg - 1];
  if (cm__toml_table_find(t, p->kbuf.p + last->start, last->len)) {
    return cm__toml_perr(p, last->off, "duplicate key '%s'", keyname(p, last, kb, sizeof kb));
  }
  if (peek(p) != '=') return cm__toml_perr(p, p->i, "expected '=' after key, found %s", WHAT(p));
  p->i++;
  skip_ws(p);
  cm_toml_value_t *v = NULL;
  rc = parse_value(p, t->u.tab.depth + 1, &v);
  if (rc != CM_OK) return rc;
  last = &p->segs[base + nseg - 1]; /* segs may have been reallocated */
  v->line = last->line;
  v->column = last->col;
  if (cm__toml_table_add(t, p->kbuf.p + last->start, last->len, v) != CM_OK) {
    cm__toml_free(v);
    return CM_ENOMEM;
  }
  p->nsegs = base;
  p->kbuf.n = kbase;
  return CM_OK;
}

/* Walk a header's segments before the last one from the root, creating
 * IMPLICIT tables and entering the last element of arrays of tables; the
 * table reached goes to *out. */
static int header_walk(parser_t *p, size_t base, size_t nseg, cm_toml_value_t **out) {
  char kb[96];
  cm_toml_value_t *t = p->root;
  for (size_t k = 0; k + 1 < nseg; k++) {
    const seg_t *sg = &p->segs[base + k];
    cm_toml_value_t *child = cm__toml_table_find(t, p->kbuf.p + sg->start, sg->len);
    if (!child) {
      int rc = new_table(p, sg, t, CM_TOML_TABLE_IMPLICIT, &child);
      if (rc != CM_OK) return rc;
    } else if (child->type == CM_TOML_TABLE) {
      if (child->u.tab.kind == CM_TOML_TABLE_INLINE) {
        return cm__toml_perr(p, sg->off, "cannot add to inline table '%s'",
                             keyname(p, sg, kb, sizeof kb));
      }
    } else if (child->type == CM_TOML_ARRAY && child->u.arr.table_array) {
      CM_ASSERT(child->u.arr.len > 0); /* [[h]] always adds an element */
      child = child->u.arr.items[child->u.arr.len - 1];
    } else {
      return cm__toml_perr(p, sg->off, "key '%s' is already defined as %s",
                           keyname(p, sg, kb, sizeof kb), kind_text(child));
    }
    t = child;
  }
  *out = t;
  return CM_OK;
}

/* [h]: define table `last` in t (new, or an IMPLICIT one made EXPLICIT)
 * and make it the current table. */
static int header_table(parser_t *p, cm_toml_value_t *t, const seg_t *last) {
  char kb[96];
  cm_toml_value_t *child = cm__toml_table_find(t, p->kbuf.p + last->start, last->len);
  if (!child) {
    int rc = new_table(p, last, t, CM_TOML_TABLE_EXPLICIT, &child);
    if (rc != CM_OK) return rc;
  } else if (child->type == CM_TOML_TABLE && child->u.tab.kind == CM_TOML_TABLE_IMPLICIT) {
    child->u.tab.kind = CM_TOML_TABLE_EXPLICIT;
    child->line = last->line;
    child->column = last->col;
  } else if (child->type == CM_TOML_TABLE) {
    return cm__toml_perr(p, last->off, "table '%s' is already defined (as %s)",
                         keyname(p, last, kb, sizeof kb), kind_text(child));
  } else {
    return cm__toml_perr(p, last->off, "key '%s' is already defined as %s",
                         keyname(p, last, kb, sizeof kb), kind_text(child));
  }
  p->cur = child;
  return CM_OK;
}

/* [[h]]: append a table to the array of tables `last` in t (created when
 * new) and make it the current table. */
static int header_array(parser_t *p, cm_toml_value_t *t, const seg_t *last) {
  char kb[96];
  int rc;
  cm_toml_value_t *arr = cm__toml_table_find(t, p->kbuf.p + last->start, last->len);
  if (!arr) {
    rc = check_depth(p, last->off, t->u.tab.depth + 2);
    if (rc != CM_OK) return rc;
    arr = cm__toml_new(CM_TOML_ARRAY);
    if (!arr) return CM_ENOMEM;
    arr->u.arr.depth = t->u.tab.depth + 1;
    arr->u.arr.table_array = true;
    arr->line = last->line;
    arr->column = last->col;
    if (cm__toml_table_add(t, p->kbuf.p + last->start, last->len, arr) != CM_OK) {
      cm__toml_free(arr);
      return CM_ENOMEM;
    }
  } else if (arr->type != CM_TOML_ARRAY || !arr->u.arr.table_array) {
    return cm__toml_perr(p, last->off, "cannot define array of tables '%s': key is already %s",
                         keyname(p, last, kb, sizeof kb), kind_text(arr));
  }
  rc = check_depth(p, last->off, arr->u.arr.depth + 1);
  if (rc != CM_OK) return rc;
  cm_toml_value_t *elem = cm__toml_new(CM_TOML_TABLE);
  if (!elem) return CM_ENOMEM;
  elem->u.tab.depth = arr->u.arr.depth + 1;
  elem->u.tab.kind = CM_TOML_TABLE_EXPLICIT;
  elem->line = last->line;
  elem->column = last->col;
  if (cm__toml_array_push(arr, elem) != CM_OK) {
    cm__toml_free(elem);
    return CM_ENOMEM;
  }
  p->cur = elem;
  return CM_OK;
}

/* [a.b] or [[a.b]] */
static int parse_header(parser_t *p) {
  char wbuf[16];
  bool aot = at(p, 1) == '[';
  p->i += aot ? 2 : 1;
  size_t base = p->nsegs, kbase = p->kbuf.n;
  int rc = cm__toml_parse_key(p);
  if (rc != CM_OK) return rc;
  if (peek(p) != ']' || (aot && at(p, 1) != ']')) {
    return cm__toml_perr(p, p->i, "expected '%s' to close the table header, found %s",
                         aot ? "]]" : "]", WHAT(p));
  }
  p->i += aot ? 2 : 1;
  size_t nseg = p->nsegs - base;
  cm_toml_value_t *t = NULL;
  rc = header_walk(p, base, nseg, &t);
  if (rc != CM_OK) return rc;
  const seg_t *last = &p->segs[base + nseg - 1];
  rc = aot ? header_array(p, t, last) : header_table(p, t, last);
  if (rc != CM_OK) return rc;
  p->nsegs = base;
  p->kbuf.n = kbase;
  return CM_OK;
}

/* After a key/value pair or header: optional comment, then newline or EOF. */
static int end_of_line(parser_t *p, const char *after) {
  char wbuf[16];
  skip_ws(p);
  skip_comment(p);
  if (p->i >= p->n) return CM_OK;
  if (nl_at(p, p->i)) {
    p->i += nl_len(p, p->i);
    return CM_OK;
  }
  return cm__toml_perr(p, p->i, "expected end of line after %s, found %s", after, WHAT(p));
}

static int parse_document(parser_t *p) {
  int rc = cm__toml_validate(p);
  if (rc != CM_OK) return rc;
  if (p->n >= 3 && memcmp(p->s, "\xEF\xBB\xBF", 3) == 0) p->i = 3;
  for (;;) {
    skip_ws(p);
    int c = peek(p);
    if (c < 0) return CM_OK;
    if (c == '#') {
      skip_comment(p);
    } else if (nl_at(p, p->i)) {
      p->i += nl_len(p, p->i);
    } else if (c == '[') {
      rc = parse_header(p);
      if (rc == CM_OK) rc = end_of_line(p, "table header");
    } else {
      rc = parse_keyval(p, p->cur);
      if (rc == CM_OK) rc = end_of_line(p, "value");
    }
    if (rc != CM_OK) return rc;
  }
}

int cm_toml_parse(const char *data, size_t len, cm_toml_doc_t **out, cm_diag_t *diag) {
  if (!out || (!data && len)) return CM_EINVAL;
  parser_t p;
  memset(&p, 0, sizeof p);
  p.s = data ? data : "";
  p.n = len;
  p.diag = diag;
  p.c_line = 1;
  p.c_col = 1;
  cm_toml_doc_t *doc = calloc(1, sizeof *doc);
  p.root = cm__toml_new(CM_TOML_TABLE);
  int rc = CM_ENOMEM;
  if (doc && p.root) {
    p.root->u.tab.kind = CM_TOML_TABLE_ROOT;
    p.root->line = 1;
    p.root->column = 1;
    p.cur = p.root;
    /* pre-size the buffers so their pointers are never NULL */
    rc = cm__sb_reserve(&p.buf, 64) && cm__sb_reserve(&p.kbuf, 64)
             ? parse_document(&p)
             : CM_ENOMEM;
  }
  free(p.buf.p);
  free(p.kbuf.p);
  free(p.segs);
  if (rc != CM_OK) {
    if (rc == CM_ENOMEM && diag) {
      memset(diag, 0, sizeof *diag);
      diag->code = CM_ENOMEM;
      snprintf(diag->message, sizeof diag->message, "out of memory while parsing TOML");
    }
    cm__toml_free(p.root);
    free(doc);
    return rc;
  }
  doc->root = p.root;
  *out = doc;
  return CM_OK;
}
