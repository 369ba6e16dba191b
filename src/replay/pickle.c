/*
 * pickle.c - restricted pickle reader (see pickle.h).
 *
 * Algorithm. One pass over the opcodes with the pickle machine's stack and
 * mark stack (growable pointer arrays) and memo (a sparse hash map from
 * index to value, so an entry costs memory only when a PUT stores it, never
 * for the indexes it skips). Values are allocated from chunks of the
 * document (freed together); container item arrays are malloc'd per value
 * and freed with the document. Strings are not copied: they point into the
 * input. Every length is checked against the bytes left before it is used,
 * so any input yields a value or an error, and everything allocated is
 * proportional to the opcodes read.
 *
 * Dicts: each dict with str keys carries an open-addressing index (item
 * position by key hash, seeded per document so that no input can choose
 * colliding keys). A str key bound again replaces its value in place, as
 * Python's dict does, so a dict never holds duplicate str keys and a lookup
 * costs the same however the pickle was built (one big dict shared through
 * the memo by every trace entry included).
 *
 * Exports cm__pickle_parse, cm__pickle_free, cm__pv_get, cm__pv_str_is,
 * cm__pv_str_starts.
 */
#include "replay/pickle.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <time.h>

#include "base/util.h"
#include "base/u64map.h"

#define CHUNK_VALUES 4096

typedef struct chunk {
  struct chunk *next;
  size_t used;
  cm_pv_t v[CHUNK_VALUES];
} chunk_t;

struct cm_pickle {
  chunk_t *chunks;
  uint64_t seed; /* of the dict key hash */
};

/* A dict's str-key index: slots hold item position / 2 + 1 (0 = empty). */
struct cm_pv_index {
  uint64_t seed;
  size_t *slots;
  size_t cap;   /* power of two */
  size_t count; /* str keys indexed */
};

typedef struct vec {
  cm_pv_t **p;
  size_t n, cap;
} vec_t;

static bool vec_push(vec_t *v, cm_pv_t *x) {
  if (v->n == v->cap) {
    size_t nc = v->cap ? v->cap * 2 : 64;
    if (nc > SIZE_MAX / sizeof *v->p) return false;
    cm_pv_t **np = realloc(v->p, nc * sizeof *np);
    if (!np) return false;
    v->p = np;
    v->cap = nc;
  }
  v->p[v->n++] = x;
  return true;
}

static cm_pv_t *new_value(cm_pickle_t *doc, cm_pv_kind_t kind) {
  if (!doc->chunks || doc->chunks->used == CHUNK_VALUES) {
    chunk_t *c = malloc(sizeof *c);
    if (!c) return NULL;
    c->next = doc->chunks;
    c->used = 0;
    doc->chunks = c;
  }
  cm_pv_t *v = &doc->chunks->v[doc->chunks->used++];
  memset(v, 0, sizeof *v);
  v->kind = kind;
  return v;
}

static bool add_item(cm_pv_t *c, cm_pv_t *x) {
  if (c->n == c->cap) {
    size_t nc = c->cap ? c->cap * 2 : 8;
    if (nc > SIZE_MAX / sizeof *c->items) return false;
    cm_pv_t **np = realloc(c->items, nc * sizeof *np);
    if (!np) return false;
    c->items = np;
    c->cap = nc;
  }
  c->items[c->n++] = x;
  return true;
}

void cm__pickle_free(cm_pickle_t *doc) {
  if (!doc) return;
  for (chunk_t *c = doc->chunks, *next; c; c = next) {
    next = c->next;
    for (size_t i = 0; i < c->used; i++) {
      free(c->v[i].items);
      if (c->v[i].index) free(c->v[i].index->slots);
      free(c->v[i].index);
    }
    free(c);
  }
  free(doc);
}

static uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* Seeded hash of a key's bytes: 8 bytes at a time through the splitmix
 * finaliser, the seed folded into every step. */
static uint64_t key_hash(uint64_t seed, const char *s, size_t n) {
  uint64_t h = mix64(seed ^ (uint64_t)n);
  while (n >= 8) {
    uint64_t w;
    memcpy(&w, s, 8);
    h = mix64(h ^ w ^ seed);
    s += 8;
    n -= 8;
  }
  uint64_t w = 0;
  for (size_t i = 0; i < n; i++) w |= (uint64_t)(unsigned char)s[i] << (8 * i);
  return mix64(h ^ w ^ (seed >> 1) ^ 0x9e3779b97f4a7c15ull);
}

static bool same_str(const cm_pv_t *a, const char *s, size_t n) {
  return a->kind == CM_PV_STR && a->n == n && (n == 0 || memcmp(a->s, s, n) == 0);
}

/* Slot of str key (s, n) in d's index: its position, or the empty slot
 * where it would go. */
static size_t *index_slot(const cm_pv_t *d, const char *s, size_t n) {
  const struct cm_pv_index *x = d->index;
  size_t mask = x->cap - 1, i = (size_t)key_hash(x->seed, s, n) & mask;
  for (;;) {
    size_t *slot = &x->slots[i];
    if (!*slot || same_str(d->items[(*slot - 1) * 2], s, n)) return slot;
    i = (i + 1) & mask;
  }
}

static bool index_grow(cm_pv_t *d, uint64_t seed) {
  struct cm_pv_index *x = d->index;
  if (!x) {
    x = calloc(1, sizeof *x);
    if (!x) return false;
    x->seed = seed;
    d->index = x;
  }
  if (x->slots && (x->count + 1) * 2 <= x->cap) return true;
  size_t nc = x->cap ? x->cap * 2 : 16;
  if (nc > SIZE_MAX / sizeof *x->slots) return false;
  size_t *ns = calloc(nc, sizeof *ns);
  if (!ns) return false;
  size_t *old = x->slots, oc = x->cap;
  x->slots = ns;
  x->cap = nc;
  for (size_t i = 0; i < oc; i++) {
    if (!old[i]) continue;
    const cm_pv_t *k = d->items[(old[i] - 1) * 2];
    *index_slot(d, k->s, k->n) = old[i];
  }
  free(old);
  return true;
}

/* d[k] = v: a str key already present gets the new value in place (Python's
 * rule); anything else is appended. False when out of memory. */
static bool dict_set(cm_pickle_t *doc, cm_pv_t *d, cm_pv_t *k, cm_pv_t *v) {
  size_t *slot = NULL;
  if (k->kind == CM_PV_STR) {
    if (!index_grow(d, doc->seed)) return false;
    slot = index_slot(d, k->s, k->n);
    if (*slot) {
      d->items[(*slot - 1) * 2 + 1] = v;
      return true;
    }
  }
  if (!add_item(d, k) || !add_item(d, v)) return false;
  if (slot) {
    *slot = d->n / 2; /* (position / 2) + 1 of the key just added */
    d->index->count++;
  }
  return true;
}

static uint64_t le(const unsigned char *p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

static const char *refused_name(unsigned char op) {
  switch (op) {
  case 'c': return "GLOBAL";
  case 0x93: return "STACK_GLOBAL";
  case 'R': return "REDUCE";
  case 'b': return "BUILD";
  case 'i': return "INST";
  case 'o': return "OBJ";
  case 0x81: return "NEWOBJ";
  case 0x92: return "NEWOBJ_EX";
  case 0x82: return "EXT1";
  case 0x83: return "EXT2";
  case 0x84: return "EXT4";
  case 'P': return "PERSID";
  case 'Q': return "BINPERSID";
  case 0x97: return "NEXT_BUFFER";
  case 0x98: return "READONLY_BUFFER";
  default: return NULL;
  }
}

/* Decode a little-endian two's complement integer of n bytes (LONG1/LONG4). */
static void set_long(cm_pv_t *v, const unsigned char *p, size_t n) {
  if (n == 0) return; /* 0 */
  bool neg = p[n - 1] & 0x80;
  /* strip redundant sign bytes */
  while (n > 1 && p[n - 1] == (neg ? 0xff : 0x00) && ((p[n - 2] & 0x80) != 0) == neg) n--;
  if (n > 8) {
    v->big = true;
    return;
  }
  uint64_t u = le(p, n);
  if (neg && n < 8) u |= ~0ull << (8 * n);
  v->i = (int64_t)u;
}

int cm__pickle_parse(const char *buf, size_t len, cm_pickle_t **out, const cm_pv_t **root,
                    cm_diag_t *diag) {
  if (!out || !root || (!buf && len))
    return cm__diag_set(diag, CM_EINVAL, "cm__pickle_parse: NULL argument");
  *out = NULL;
  *root = NULL;
  cm_pickle_t *doc = calloc(1, sizeof *doc);
  if (!doc) return cm__diag_set(diag, CM_ENOMEM, "out of memory reading the pickle");
  {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    doc->seed = mix64((uint64_t)(uintptr_t)doc ^ ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)ts.tv_nsec);
  }
  vec_t stack = {0};
  cm__u64map memo = {0}; /* key: index ^ memo_salt (never 0: the salt has bit 63 set) */
  const uint64_t memo_salt = mix64(doc->seed + 1) | (1ull << 63);
  size_t *marks = NULL, nmarks = 0, capmarks = 0;
  const unsigned char *p = (const unsigned char *)buf;
  size_t pos = 0;
  int rc = CM_OK;
  char msg[160] = "";
  bool done = false;

#define FAIL(...)                                  \
  do {                                             \
    snprintf(msg, sizeof msg, __VA_ARGS__);        \
    rc = CM_EPARSE;                                \
    goto out;                                      \
  } while (0)
#define NOMEM()        \
  do {                 \
    rc = CM_ENOMEM;    \
    goto out;          \
  } while (0)
#define NEED(k)                                                                            \
  do {                                                                                     \
    if ((uint64_t)(k) > len - pos) FAIL("truncated pickle at byte %zu (opcode 0x%02x)", at, op); \
  } while (0)
#define PUSH(x)                                 \
  do {                                          \
    cm_pv_t *px_ = (x);                         \
    if (!px_ || !vec_push(&stack, px_)) NOMEM(); \
  } while (0)
#define TOP_NEEDED(k)                                                                   \
  do {                                                                                  \
    size_t base_ = nmarks ? marks[nmarks - 1] : 0;                                      \
    if (stack.n < base_ + (k)) FAIL("stack underflow at byte %zu (opcode 0x%02x)", at, op); \
  } while (0)

  while (!done) {
    if (pos >= len) FAIL("truncated pickle: no STOP opcode after %zu bytes", len);
    size_t at = pos;
    unsigned char op = p[pos++];
    const char *bad = refused_name(op);
    if (bad)
      FAIL("refusing opcode %s at byte %zu: it would import a global or construct an object; "
           "a memory snapshot holds only plain data", bad, at);
    switch (op) {
    case 0x80: /* PROTO */
      NEED(1);
      if (p[pos] < 2 || p[pos] > 5) FAIL("unsupported pickle protocol %u (2 to 5 are read)", p[pos]);
      pos++;
      break;
    case 0x95: /* FRAME: framing is only a hint */
      NEED(8);
      pos += 8;
      break;
    case '.': /* STOP */
      if (stack.n == 0) FAIL("STOP with an empty stack at byte %zu", at);
      if (nmarks) FAIL("STOP with an open MARK at byte %zu", at);
      *root = stack.p[stack.n - 1];
      done = true;
      break;
    case '(': /* MARK */
      if (nmarks == capmarks) {
        size_t nc = capmarks ? capmarks * 2 : 16;
        size_t *nm = realloc(marks, nc * sizeof *nm);
        if (!nm) NOMEM();
        marks = nm;
        capmarks = nc;
      }
      marks[nmarks++] = stack.n;
      break;
    case '0': /* POP */
      if (nmarks && marks[nmarks - 1] == stack.n) nmarks--; /* pops the mark */
      else {
        TOP_NEEDED(1);
        stack.n--;
      }
      break;
    case '1': /* POP_MARK */
      if (!nmarks) FAIL("POP_MARK without MARK at byte %zu", at);
      stack.n = marks[--nmarks];
      break;
    case '2': /* DUP */
      TOP_NEEDED(1);
      PUSH(stack.p[stack.n - 1]);
      break;
    case 'N': PUSH(new_value(doc, CM_PV_NONE)); break;
    case 0x88:
    case 0x89: {
      cm_pv_t *v = new_value(doc, CM_PV_BOOL);
      if (v) v->i = op == 0x88;
      PUSH(v);
      break;
    }
    case 'J':
    case 'K':
    case 'M': {
      size_t k = op == 'J' ? 4 : op == 'K' ? 1 : 2;
      NEED(k);
      cm_pv_t *v = new_value(doc, CM_PV_INT);
      if (v) v->i = op == 'J' ? (int64_t)(int32_t)(uint32_t)le(p + pos, 4) : (int64_t)le(p + pos, k);
      pos += k;
      PUSH(v);
      break;
    }
    case 0x8a:
    case 0x8b: { /* LONG1, LONG4 */
      size_t k = op == 0x8a ? 1 : 4;
      NEED(k);
      uint64_t n = le(p + pos, k);
      pos += k;
      NEED(n);
      cm_pv_t *v = new_value(doc, CM_PV_INT);
      if (v) set_long(v, p + pos, (size_t)n);
      pos += (size_t)n;
      PUSH(v);
      break;
    }
    case 'G': { /* BINFLOAT, big-endian */
      NEED(8);
      uint64_t u = 0;
      for (int k = 0; k < 8; k++) u = (u << 8) | p[pos + (size_t)k];
      pos += 8;
      cm_pv_t *v = new_value(doc, CM_PV_FLOAT);
      if (v) memcpy(&v->f, &u, sizeof v->f);
      PUSH(v);
      break;
    }
    case 'X': case 0x8c: case 0x8d: /* BINUNICODE, SHORT_BINUNICODE, BINUNICODE8 */
    case 'B': case 'C': case 0x8e: case 0x96: /* BINBYTES, SHORT_BINBYTES, BINBYTES8, BYTEARRAY8 */
    case 'T': case 'U': { /* BINSTRING, SHORT_BINSTRING (protocol 1 str) */
      size_t k = (op == 0x8c || op == 'C' || op == 'U') ? 1 : (op == 'X' || op == 'B' || op == 'T') ? 4 : 8;
      NEED(k);
      uint64_t n = le(p + pos, k);
      pos += k;
      NEED(n);
      bool text = op == 'X' || op == 0x8c || op == 0x8d || op == 'T' || op == 'U';
      cm_pv_t *v = new_value(doc, text ? CM_PV_STR : CM_PV_BYTES);
      if (v) {
        v->s = buf + pos;
        v->n = (size_t)n;
      }
      pos += (size_t)n;
      PUSH(v);
      break;
    }
    case '}': PUSH(new_value(doc, CM_PV_DICT)); break;
    case ']': PUSH(new_value(doc, CM_PV_LIST)); break;
    case ')': PUSH(new_value(doc, CM_PV_TUPLE)); break;
    case 0x8f: PUSH(new_value(doc, CM_PV_SET)); break;
    case 0x85: case 0x86: case 0x87: { /* TUPLE1..3 */
      size_t k = (size_t)(op - 0x84);
      TOP_NEEDED(k);
      cm_pv_t *v = new_value(doc, CM_PV_TUPLE);
      if (!v) NOMEM();
      for (size_t j = stack.n - k; j < stack.n; j++)
        if (!add_item(v, stack.p[j])) NOMEM();
      stack.n -= k;
      PUSH(v);
      break;
    }
    case 't': case 'l': case 'd': case 0x91: { /* TUPLE, LIST, DICT, FROZENSET from MARK */
      if (!nmarks) FAIL("opcode '%c' without MARK at byte %zu", op < 0x80 ? op : '?', at);
      size_t base = marks[--nmarks];
      if (op == 'd' && (stack.n - base) % 2) FAIL("DICT with an odd number of items at byte %zu", at);
      cm_pv_t *v = new_value(doc, op == 't' ? CM_PV_TUPLE : op == 'l' ? CM_PV_LIST
                                  : op == 'd' ? CM_PV_DICT : CM_PV_SET);
      if (!v) NOMEM();
      if (op == 'd') {
        for (size_t j = base; j < stack.n; j += 2)
          if (!dict_set(doc, v, stack.p[j], stack.p[j + 1])) NOMEM();
      } else {
        for (size_t j = base; j < stack.n; j++)
          if (!add_item(v, stack.p[j])) NOMEM();
      }
      stack.n = base;
      PUSH(v);
      break;
    }
    case 'a': { /* APPEND */
      TOP_NEEDED(2);
      cm_pv_t *l = stack.p[stack.n - 2];
      if (l->kind != CM_PV_LIST) FAIL("APPEND to a non-list at byte %zu", at);
      if (!add_item(l, stack.p[stack.n - 1])) NOMEM();
      stack.n--;
      break;
    }
    case 's': { /* SETITEM */
      TOP_NEEDED(3);
      cm_pv_t *d = stack.p[stack.n - 3];
      if (d->kind != CM_PV_DICT) FAIL("SETITEM on a non-dict at byte %zu", at);
      if (!dict_set(doc, d, stack.p[stack.n - 2], stack.p[stack.n - 1])) NOMEM();
      stack.n -= 2;
      break;
    }
    case 'e': case 'u': case 0x90: { /* APPENDS, SETITEMS, ADDITEMS */
      if (!nmarks) FAIL("opcode 0x%02x without MARK at byte %zu", op, at);
      size_t base = marks[--nmarks];
      if (base == 0) FAIL("opcode 0x%02x with no container at byte %zu", op, at);
      cm_pv_t *c = stack.p[base - 1];
      cm_pv_kind_t want = op == 'e' ? CM_PV_LIST : op == 'u' ? CM_PV_DICT : CM_PV_SET;
      if (c->kind != want) FAIL("opcode 0x%02x on the wrong container type at byte %zu", op, at);
      if (op == 'u' && (stack.n - base) % 2) FAIL("SETITEMS with an odd number of items at byte %zu", at);
      if (op == 'u') {
        for (size_t j = base; j < stack.n; j += 2)
          if (!dict_set(doc, c, stack.p[j], stack.p[j + 1])) NOMEM();
      } else {
        for (size_t j = base; j < stack.n; j++)
          if (!add_item(c, stack.p[j])) NOMEM();
      }
      stack.n = base;
      break;
    }
    case 0x94: /* MEMOIZE: stores at the memo's size, as Python does */
      TOP_NEEDED(1);
      if ((uint64_t)memo.count > UINT32_MAX) FAIL("memo full at byte %zu", at);
      if (cm__u64map_put(&memo, (uint64_t)memo.count ^ memo_salt, stack.p[stack.n - 1])) NOMEM();
      break;
    case 'q': case 'r': { /* BINPUT, LONG_BINPUT */
      size_t k = op == 'q' ? 1 : 4;
      NEED(k);
      uint64_t idx = le(p + pos, k);
      pos += k;
      TOP_NEEDED(1);
      if (cm__u64map_put(&memo, idx ^ memo_salt, stack.p[stack.n - 1])) NOMEM();
      break;
    }
    case 'h': case 'j': { /* BINGET, LONG_BINGET */
      size_t k = op == 'h' ? 1 : 4;
      NEED(k);
      uint64_t idx = le(p + pos, k);
      pos += k;
      cm_pv_t *mv = cm__u64map_get(&memo, idx ^ memo_salt);
      if (!mv) FAIL("memo index %llu not set at byte %zu", (unsigned long long)idx, at);
      PUSH(mv);
      break;
    }
    case 'I': case 'L': case 'S': case 'V': case 'F': case 'p': case 'g':
      FAIL("text-protocol opcode '%c' at byte %zu is not read: save with protocol 2 or later", op, at);
    default:
      FAIL("unknown pickle opcode 0x%02x at byte %zu", op, at);
    }
  }
out:
  free(stack.p);
  cm__u64map_free(&memo);
  free(marks);
  if (rc != CM_OK) {
    cm__pickle_free(doc);
    *root = NULL;
    if (rc == CM_ENOMEM) return cm__diag_set(diag, rc, "out of memory reading the pickle");
    return cm__diag_set(diag, rc, "%s", msg);
  }
  *out = doc;
  return CM_OK;
#undef FAIL
#undef NOMEM
#undef NEED
#undef PUSH
#undef TOP_NEEDED
}

bool cm__pv_str_is(const cm_pv_t *v, const char *s) {
  size_t n = strlen(s);
  return v && v->kind == CM_PV_STR && v->n == n && memcmp(v->s, s, n) == 0;
}

bool cm__pv_str_starts(const cm_pv_t *v, const char *prefix) {
  size_t n = strlen(prefix);
  return v && v->kind == CM_PV_STR && v->n >= n && memcmp(v->s, prefix, n) == 0;
}

const cm_pv_t *cm__pv_get(const cm_pv_t *d, const char *key) {
  if (!d || d->kind != CM_PV_DICT || !d->index || !key) return NULL;
  size_t slot = *index_slot(d, key, strlen(key));
  return slot ? d->items[(slot - 1) * 2 + 1] : NULL;
}
