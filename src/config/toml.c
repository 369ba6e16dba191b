/*
 * toml.c - the TOML document tree: node allocation, tables with
 * document-ordered entries plus a hash index, arrays, the public read-only
 * accessors of cubemem/toml.h and datetime rendering. It calls no other
 * file of the parser (toml_lex.c and toml_parse.c build trees with it;
 * toml_file.c reads files).
 *
 * Algorithm: tables keep entries in a growable array (document order). Once a
 * table holds CM__INDEX_MIN entries, an open-addressing hash index (linear
 * probing, FNV-1a, load <= 1/2) maps keys to entry positions so lookups stay
 * O(1) on huge documents. Small tables are searched linearly.
 *
 * Invariants: see toml_internal.h. The accessors never modify the tree, which
 * is what makes concurrent reads of one document safe.
 *
 * Exports: the cm_toml_* accessors, cm_toml_doc_free/root,
 * cm_toml_datetime_format, and the cm__toml_* tree
 * helpers used by toml_lex.c and toml_parse.c.
 */
#include "toml_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define CM__INDEX_MIN 8

cm_toml_value_t *cm__toml_new(cm_toml_type_t type) {
  cm_toml_value_t *v = calloc(1, sizeof *v);
  if (v) v->type = type;
  return v;
}

void cm__toml_free(cm_toml_value_t *v) {
  if (!v) return;
  switch (v->type) {
    case CM_TOML_STRING:
      free(v->u.str.ptr);
      break;
    case CM_TOML_ARRAY:
      for (size_t i = 0; i < v->u.arr.len; i++) cm__toml_free(v->u.arr.items[i]);
      free(v->u.arr.items);
      break;
    case CM_TOML_TABLE:
      for (size_t i = 0; i < v->u.tab.len; i++) {
        free(v->u.tab.items[i].key);
        cm__toml_free(v->u.tab.items[i].value);
      }
      free(v->u.tab.items);
      free(v->u.tab.index);
      break;
    default:
      break;
  }
  free(v);
}

static uint64_t key_hash(const char *key, size_t len) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < len; i++) {
    h ^= (unsigned char)key[i];
    h *= 1099511628211ull;
  }
  return h;
}

/* Insert entry number idx into the hash index (which has room). */
static void index_put(cm_toml_value_t *t, size_t idx) {
  const cm__toml_entry_t *e = &t->u.tab.items[idx];
  size_t mask = t->u.tab.index_cap - 1;
  size_t s = (size_t)key_hash(e->key, e->key_len) & mask;
  while (t->u.tab.index[s]) s = (s + 1) & mask;
  t->u.tab.index[s] = (uint32_t)(idx + 1);
}

/* Rebuild the index so that it can hold at least `need` entries. */
static int index_grow(cm_toml_value_t *t, size_t need) {
  size_t cap = t->u.tab.index_cap ? t->u.tab.index_cap : 16;
  while (cap < need * 2) cap *= 2;
  uint32_t *idx = calloc(cap, sizeof *idx);
  if (!idx) return CM_ENOMEM;
  free(t->u.tab.index);
  t->u.tab.index = idx;
  t->u.tab.index_cap = cap;
  for (size_t i = 0; i < t->u.tab.len; i++) index_put(t, i);
  return CM_OK;
}

cm_toml_value_t *cm__toml_table_find(const cm_toml_value_t *t, const char *key, size_t len) {
  if (t->u.tab.index) {
    size_t mask = t->u.tab.index_cap - 1;
    size_t s = (size_t)key_hash(key, len) & mask;
    while (t->u.tab.index[s]) {
      const cm__toml_entry_t *e = &t->u.tab.items[t->u.tab.index[s] - 1];
      if (e->key_len == len && memcmp(e->key, key, len) == 0) return e->value;
      s = (s + 1) & mask;
    }
    return NULL;
  }
  for (size_t i = 0; i < t->u.tab.len; i++) {
    const cm__toml_entry_t *e = &t->u.tab.items[i];
    if (e->key_len == len && memcmp(e->key, key, len) == 0) return e->value;
  }
  return NULL;
}

int cm__toml_table_add(cm_toml_value_t *t, const char *key, size_t len, cm_toml_value_t *v) {
  if (t->u.tab.len >= UINT32_MAX - 1) return CM_ENOMEM;
  if (t->u.tab.len == t->u.tab.cap) {
    size_t ncap = t->u.tab.cap ? t->u.tab.cap * 2 : 4;
    cm__toml_entry_t *n = realloc(t->u.tab.items, ncap * sizeof *n);
    if (!n) return CM_ENOMEM;
    t->u.tab.items = n;
    t->u.tab.cap = ncap;
  }
  char *k = malloc(len + 1);
  if (!k) return CM_ENOMEM;
  if (len) memcpy(k, key, len);
  k[len] = '\0';
  size_t idx = t->u.tab.len;
  if (idx + 1 >= CM__INDEX_MIN && (idx + 1) * 2 > t->u.tab.index_cap) {
    /* grow before inserting so a failure leaves the table unchanged */
    if (index_grow(t, idx + 1) != CM_OK) {
      free(k);
      return CM_ENOMEM;
    }
  }
  t->u.tab.items[idx].key = k;
  t->u.tab.items[idx].key_len = len;
  t->u.tab.items[idx].value = v;
  t->u.tab.len++;
  if (t->u.tab.index) index_put(t, idx);
  return CM_OK;
}

int cm__toml_array_push(cm_toml_value_t *a, cm_toml_value_t *v) {
  if (a->u.arr.len == a->u.arr.cap) {
    size_t ncap = a->u.arr.cap ? a->u.arr.cap * 2 : 4;
    cm_toml_value_t **n = realloc(a->u.arr.items, ncap * sizeof *n);
    if (!n) return CM_ENOMEM;
    a->u.arr.items = n;
    a->u.arr.cap = ncap;
  }
  a->u.arr.items[a->u.arr.len++] = v;
  return CM_OK;
}

/* ---- documents -------------------------------------------------------- */

void cm_toml_doc_free(cm_toml_doc_t *doc) {
  if (!doc) return;
  cm__toml_free(doc->root);
  free(doc);
}

const cm_toml_value_t *cm_toml_doc_root(const cm_toml_doc_t *doc) {
  return doc ? doc->root : NULL;
}

/* ---- accessors -------------------------------------------------------- */

cm_toml_type_t cm_toml_type(const cm_toml_value_t *v) {
  return v ? v->type : (cm_toml_type_t)0;
}

const char *cm_toml_type_name(cm_toml_type_t type) {
  switch (type) {
    case CM_TOML_STRING: return "string";
    case CM_TOML_INTEGER: return "integer";
    case CM_TOML_FLOAT: return "float";
    case CM_TOML_BOOL: return "bool";
    case CM_TOML_OFFSET_DATETIME: return "offset datetime";
    case CM_TOML_LOCAL_DATETIME: return "local datetime";
    case CM_TOML_LOCAL_DATE: return "local date";
    case CM_TOML_LOCAL_TIME: return "local time";
    case CM_TOML_ARRAY: return "array";
    case CM_TOML_TABLE: return "table";
  }
  return "invalid";
}

int cm_toml_position(const cm_toml_value_t *v, uint32_t *line, uint32_t *column) {
  if (!v) return CM_EINVAL;
  if (line) *line = v->line;
  if (column) *column = v->column;
  return CM_OK;
}

int cm_toml_get_string(const cm_toml_value_t *v, const char **s, size_t *len) {
  if (!v || !s || v->type != CM_TOML_STRING) return CM_EINVAL;
  *s = v->u.str.ptr;
  if (len) *len = v->u.str.len;
  return CM_OK;
}

int cm_toml_get_int(const cm_toml_value_t *v, int64_t *out) {
  if (!v || !out || v->type != CM_TOML_INTEGER) return CM_EINVAL;
  *out = v->u.i;
  return CM_OK;
}

int cm_toml_get_double(const cm_toml_value_t *v, double *out) {
  if (!v || !out) return CM_EINVAL;
  if (v->type == CM_TOML_FLOAT) {
    *out = v->u.f;
  } else if (v->type == CM_TOML_INTEGER) {
    *out = (double)v->u.i;
  } else {
    return CM_EINVAL;
  }
  return CM_OK;
}

int cm_toml_get_bool(const cm_toml_value_t *v, bool *out) {
  if (!v || !out || v->type != CM_TOML_BOOL) return CM_EINVAL;
  *out = v->u.b;
  return CM_OK;
}

static bool is_datetime_type(cm_toml_type_t t) {
  return t == CM_TOML_OFFSET_DATETIME || t == CM_TOML_LOCAL_DATETIME ||
         t == CM_TOML_LOCAL_DATE || t == CM_TOML_LOCAL_TIME;
}

int cm_toml_get_datetime(const cm_toml_value_t *v, cm_toml_datetime_t *out) {
  if (!v || !out || !is_datetime_type(v->type)) return CM_EINVAL;
  *out = v->u.dt;
  return CM_OK;
}

int cm_toml_datetime_format(const cm_toml_datetime_t *dt, char *buf, size_t cap) {
  if (!dt || !buf || !is_datetime_type(dt->type)) return CM_EINVAL;
  char tmp[CM_TOML_DATETIME_BUFSZ + 32];
  size_t n = 0;
  bool has_date = dt->type != CM_TOML_LOCAL_TIME;
  bool has_time = dt->type != CM_TOML_LOCAL_DATE;
  /* Clamp to printable ranges so a hand-built struct cannot overflow tmp. */
  int year = dt->year < 0 ? 0 : dt->year > 9999 ? 9999 : dt->year;
  if (has_date) {
    n += (size_t)snprintf(tmp + n, sizeof tmp - n, "%04d-%02d-%02d", year,
                          (dt->month % 100 + 100) % 100, (dt->day % 100 + 100) % 100);
  }
  if (has_time) {
    if (has_date) tmp[n++] = 'T';
    n += (size_t)snprintf(tmp + n, sizeof tmp - n, "%02d:%02d:%02d",
                          (dt->hour % 100 + 100) % 100, (dt->minute % 100 + 100) % 100,
                          (dt->second % 100 + 100) % 100);
    int digits = dt->frac_digits < 0 ? 0 : dt->frac_digits > 9 ? 9 : dt->frac_digits;
    if (digits > 0) {
      char frac[16];
      snprintf(frac, sizeof frac, "%09u", (unsigned)(dt->nanosecond % 1000000000u));
      tmp[n++] = '.';
      memcpy(tmp + n, frac, (size_t)digits);
      n += (size_t)digits;
    }
    if (dt->type == CM_TOML_OFFSET_DATETIME) {
      int off = dt->offset_minutes % (24 * 60);
      if (off == 0) {
        tmp[n++] = 'Z';
      } else {
        char sign = off < 0 ? '-' : '+';
        if (off < 0) off = -off;
        n += (size_t)snprintf(tmp + n, sizeof tmp - n, "%c%02d:%02d", sign, off / 60, off % 60);
      }
    }
  }
  tmp[n] = '\0';
  if (n + 1 > cap) return CM_EOVERFLOW;
  memcpy(buf, tmp, n + 1);
  return CM_OK;
}

int cm_toml_array_len(const cm_toml_value_t *v, size_t *len) {
  if (!v || !len || v->type != CM_TOML_ARRAY) return CM_EINVAL;
  *len = v->u.arr.len;
  return CM_OK;
}

int cm_toml_array_at(const cm_toml_value_t *v, size_t i, const cm_toml_value_t **elem) {
  if (!v || !elem || v->type != CM_TOML_ARRAY) return CM_EINVAL;
  if (i >= v->u.arr.len) return CM_ENOTFOUND;
  *elem = v->u.arr.items[i];
  return CM_OK;
}

int cm_toml_array_is_table_array(const cm_toml_value_t *v, bool *out) {
  if (!v || !out || v->type != CM_TOML_ARRAY) return CM_EINVAL;
  *out = v->u.arr.table_array;
  return CM_OK;
}

int cm_toml_table_len(const cm_toml_value_t *t, size_t *len) {
  if (!t || !len || t->type != CM_TOML_TABLE) return CM_EINVAL;
  *len = t->u.tab.len;
  return CM_OK;
}

int cm_toml_table_at(const cm_toml_value_t *t, size_t i, const char **key, size_t *key_len,
                     const cm_toml_value_t **value) {
  if (!t || t->type != CM_TOML_TABLE) return CM_EINVAL;
  if (i >= t->u.tab.len) return CM_ENOTFOUND;
  const cm__toml_entry_t *e = &t->u.tab.items[i];
  if (key) *key = e->key;
  if (key_len) *key_len = e->key_len;
  if (value) *value = e->value;
  return CM_OK;
}

int cm_toml_table_getn(const cm_toml_value_t *t, const char *key, size_t key_len,
                       const cm_toml_value_t **value) {
  if (!t || !value || (!key && key_len) || t->type != CM_TOML_TABLE) return CM_EINVAL;
  const cm_toml_value_t *v = cm__toml_table_find(t, key ? key : "", key_len);
  if (!v) return CM_ENOTFOUND;
  *value = v;
  return CM_OK;
}

int cm_toml_table_get(const cm_toml_value_t *t, const char *key, const cm_toml_value_t **value) {
  if (!key) return CM_EINVAL;
  return cm_toml_table_getn(t, key, strlen(key), value);
}

int cm_toml_table_get_table(const cm_toml_value_t *t, const char *key,
                            const cm_toml_value_t **sub) {
  const cm_toml_value_t *v = NULL;
  if (!sub) return CM_EINVAL;
  int rc = cm_toml_table_get(t, key, &v);
  if (rc != CM_OK) return rc;
  if (v->type != CM_TOML_TABLE) return CM_EINVAL;
  *sub = v;
  return CM_OK;
}

int cm_toml_table_kind(const cm_toml_value_t *t, cm_toml_table_kind_t *kind) {
  if (!t || !kind || t->type != CM_TOML_TABLE) return CM_EINVAL;
  *kind = t->u.tab.kind;
  return CM_OK;
}
