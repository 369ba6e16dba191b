/*
 * layout.c - pool layouts: the reference presets SubSlices and ExclusivePages
 * computed exactly as spec §5.3 shows, the newer Adaptive preset (memory.h), resolution and validation of explicit
 * lists (§11.5, with its error texts), and the command-line syntax
 *   "sliced:page=8MiB,max-slice=2MiB,cap=64MiB;exclusive:max=128MiB,period=5000;direct"
 * Exports: cm_pools_preset, cm_pools_resolve, cm_pools_parse, cm_pools_format,
 * cm_pools_keys.
 */
#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "base/sbuf.h"
#include "base/suggest.h"
#include "base/units.h"
#include "core/layout.h"

#define MIB (1ull << 20)

static uint64_t period_for(uint64_t bytes) {
  /* 5000 * round(1 + bytes / 2^30), round half away from zero */
  double x = 1.0 + (double)bytes / 1073741824.0;
  return 5000ull * (uint64_t)llround(x);
}

static uint64_t rup(uint64_t n, uint64_t a) {
  uint64_t r;
  return cm__round_up(n, a, &r) ? r : UINT64_MAX;
}

static int emit(cm_pool_options_t *out, size_t cap, size_t *n, cm_pool_options_t o) {
  if (*n < cap) out[*n] = o;
  (*n)++;
  return CM_OK;
}

static cm_pool_options_t exclusive(uint64_t max, bool has_period, uint64_t period) {
  cm_pool_options_t o = {0};
  o.kind = CM_POOL_EXCLUSIVE;
  o.max_alloc_size = max;
  o.has_dealloc_period = has_period;
  o.dealloc_period = period;
  return o;
}

static cm_pool_options_t sliced(uint64_t page, uint64_t max_slice) {
  cm_pool_options_t o = {0};
  o.kind = CM_POOL_SLICED;
  o.page_size = page;
  o.max_slice_size = max_slice;
  o.has_max_slice_size = true;
  return o;
}

static void subslices(cm_device_props_t pr, cm_pool_options_t *out, size_t cap, size_t *n) {
  uint64_t A = pr.alignment ? pr.alignment : 1, M = pr.max_page_size;
  emit(out, cap, n, exclusive(0, false, 0));
  uint64_t pages[64], slices[64];
  size_t k = 0;
  uint64_t cur = M;
  unsigned shift = 1;
  while (cur >= 32 * MIB && k < 64) {
    cur = rup(cur / 4, A);
    pages[k] = cur;
    slices[k] = shift < 64 ? cur >> shift : 0;
    k++;
    shift++;
  }
  while (k > 0) {
    k--;
    emit(out, cap, n, sliced(pages[k], slices[k]));
  }
  uint64_t tail = (M / A) * A;
  emit(out, cap, n, exclusive(tail, true, period_for(tail)));
}

static void exclusive_pages(cm_device_props_t pr, cm_pool_options_t *out, size_t cap,
                            size_t *n) {
  uint64_t A = pr.alignment ? pr.alignment : 1;
  double lo = log(32768.0), hi = log((double)(pr.max_page_size ? pr.max_page_size : 1));
  uint64_t prev = 0;
  for (int i = 0; i < 24; i++) {
    double v = exp(lo + (hi - lo) * (double)i / 23.0);
    uint64_t sz = rup((uint64_t)trunc(v), A);
    if (i > 0 && sz == prev) continue;
    prev = sz;
    emit(out, cap, n, exclusive(sz, true, period_for(sz)));
  }
}

/* Adaptive (memory.h): zero-byte exclusive pages, the 8 MiB / 64 KiB
 * metadata pool (serving nothing above 64 KiB: without the limit the
 * near-page rule would give each request of 6.4..8 MiB an 8 MiB metadata
 * page of its own), then the adaptive pages. */
static void adaptive(cm_device_props_t pr, cm_pool_options_t *out, size_t cap, size_t *n) {
  uint64_t A = pr.alignment ? pr.alignment : 1;
  emit(out, cap, n, exclusive(0, false, 0));
  cm_pool_options_t meta = sliced(rup(8 * MIB, A), rup(64 * 1024, A));
  meta.max_alloc_size = meta.max_slice_size; /* tiny buffers only: no near-page rule */
  emit(out, cap, n, meta);
  cm_pool_options_t o = {0};
  o.kind = CM_POOL_ADAPTIVE;
  cm__adaptive_bounds(A, pr.max_page_size, 0, 0, &o.page_size, &o.max_alloc_size);
  emit(out, cap, n, o);
}

int cm_pools_preset(cm_preset_t preset, cm_device_props_t props, cm_pool_options_t *out,
                    size_t cap, size_t *out_count) {
  size_t n = 0;
  switch (preset) {
    case CM_PRESET_SUBSLICES: subslices(props, out, cap, &n); break;
    case CM_PRESET_EXCLUSIVE_PAGES: exclusive_pages(props, out, cap, &n); break;
    case CM_PRESET_ADAPTIVE: adaptive(props, out, cap, &n); break;
    case CM_PRESET_DEFAULT: {
      int rc = cm__preset_default(props, out, cap, &n);
      if (rc) return rc;
      break;
    }
    default: return CM_EINVAL;
  }
  if (out_count) *out_count = n;
  return n > cap ? CM_EINVAL : CM_OK;
}

int cm_pools_resolve(const cm_pool_options_t *in, size_t n, cm_device_props_t props,
                     cm_pool_options_t *out, cm_diag_t *diag) {
  uint64_t A = props.alignment ? props.alignment : 1;
  if (!in || n == 0) return cm__diag_set(diag, CM_ECONFIG, "the pool list is empty");
  if (n >= 255)
    return cm__diag_set(diag, CM_ECONFIG,
                        "the pool list has %zu entries, exceeding the maximum of 254 dynamic pools",
                        n);
  for (size_t i = 0; i < n; i++) {
    cm_pool_options_t o = in[i];
    switch (o.kind) {
      case CM_POOL_EXCLUSIVE:
        if (!cm__round_up(o.max_alloc_size, A, &o.max_alloc_size))
          return cm__diag_set(diag, CM_ECONFIG, "`max_alloc_size` overflows when aligned");
        break;
      case CM_POOL_DIRECT:
        o.has_dealloc_period = false;
        o.dealloc_period = 0;
        break;
      case CM_POOL_SLICED:
      case CM_POOL_ARENA: {
        if (o.kind == CM_POOL_ARENA && o.page_size == 0) break; /* auto-sized arena */
        if (o.page_size == 0) return cm__diag_set(diag, CM_ECONFIG, "`page_size` must be non-zero");
        if (!cm__round_up(o.page_size, A, &o.page_size))
          return cm__diag_set(diag, CM_ECONFIG, "`page_size` overflows when aligned");
        if (o.kind == CM_POOL_ARENA) break;
        if (!cm__round_up(o.max_alloc_size, A, &o.max_alloc_size))
          return cm__diag_set(diag, CM_ECONFIG, "`max_alloc_size` overflows when aligned");
        if (o.has_max_slice_size) {
          if (o.max_slice_size == 0)
            return cm__diag_set(diag, CM_ECONFIG, "`max_slice_size` must be non-zero");
          if (!cm__round_up(o.max_slice_size, A, &o.max_slice_size))
            return cm__diag_set(diag, CM_ECONFIG, "`max_slice_size` overflows when aligned");
        } else {
          o.max_slice_size = o.page_size;
          o.has_max_slice_size = true;
        }
        if (o.max_slice_size > o.page_size)
          return cm__diag_set(diag, CM_ECONFIG,
                              "`max_slice_size` (%" PRIu64 ") exceeds `page_size` (%" PRIu64
                              "); a slice can never span pages",
                              o.max_slice_size, o.page_size);
        if (o.has_max_pool_size) {
          if (o.max_pool_size == 0)
            return cm__diag_set(diag, CM_ECONFIG, "`max_pool_size` must be non-zero");
          if (o.max_pool_size < o.page_size)
            return cm__diag_set(diag, CM_ECONFIG,
                                "`max_pool_size` (%" PRIu64 ") is smaller than `page_size` (%" PRIu64
                                "); the cap can't fit a single page",
                                o.max_pool_size, o.page_size);
          uint64_t pages = o.max_pool_size / o.page_size;
          if (pages > 65535)
            return cm__diag_set(diag, CM_ECONFIG,
                                "`max_pool_size` spans %" PRIu64
                                " pages of `page_size`, exceeding the maximum of 65535; increase "
                                "`page_size` or lower the cap",
                                pages);
        }
        break;
      }
      case CM_POOL_ADAPTIVE:
        /* 0 means the default; a floor above the largest page is capped */
        cm__adaptive_bounds(A, props.max_page_size, o.page_size, o.max_alloc_size, &o.page_size,
                            &o.max_alloc_size);
        break;
      case CM_POOL_PERSISTENT:
        return cm__diag_set(diag, CM_ECONFIG,
                            "pool %zu: the persistent pool is not a dynamic pool kind (weights go "
                            "to it through persistent windows)", i);
      case CM_POOL_DEDICATED:
        return cm__diag_set(diag, CM_ECONFIG,
                            "pool %zu: the dedicated pool is not a dynamic pool kind (reservations "
                            "go to it in the dedicated allocation mode)", i);
      default: return cm__diag_set(diag, CM_ECONFIG, "pool %zu has an unknown kind", i);
    }
    out[i] = o;
  }
  return CM_OK;
}

/* ---- command-line syntax ---- */

static bool key_is(const char *k, size_t kl, const char *name) {
  return strlen(name) == kl && !strncmp(k, name, kl);
}

/* The option keys of the syntax and, at the same index, the cm_pool_options_t
 * field each sets (accepted as a synonym). The one list: cm_pools_parse,
 * cm_pools_format and its messages use it, and cm_pools_keys hands it out. */
enum { K_PAGE, K_SLICE, K_CAP, K_MAX, K_PERIOD, K_RECLAIM, K_OBJECT, K_KEEP, K_COUNT };
static const char *const k_keys[K_COUNT] = {"page",   "max-slice", "cap",    "max",
                                            "period", "reclaim",   "object", "keep"};
static const char *const k_fields[K_COUNT] = {"page_size",      "max_slice_size", "max_pool_size",
                                              "max_alloc_size", "dealloc_period", "reclaim_at",
                                              "max_object_size", "release_threshold"};

const char *const *cm_pools_keys(size_t *count, const char *const **fields) {
  if (count) *count = K_COUNT;
  if (fields) *fields = k_fields;
  return k_keys;
}

/* The preset a whole layout text names, or -1. */
static int preset_named(const char *text) {
  if (!strcmp(text, "default")) return CM_PRESET_DEFAULT;
  if (!strcmp(text, "subslices") || !strcmp(text, "sub-slices")) return CM_PRESET_SUBSLICES;
  if (!strcmp(text, "exclusive-pages") || !strcmp(text, "exclusive"))
    return CM_PRESET_EXCLUSIVE_PAGES;
  if (!strcmp(text, "adaptive")) return CM_PRESET_ADAPTIVE;
  return -1;
}

/* Index in k_keys of the key (or field name) k[0..kl), or K_COUNT. */
static int key_index(const char *k, size_t kl) {
  for (int i = 0; i < K_COUNT; i++)
    if (key_is(k, kl, k_keys[i]) || key_is(k, kl, k_fields[i])) return i;
  return K_COUNT;
}

/* Store value v of key k_keys[key] in o. */
static void key_set(cm_pool_options_t *o, int key, uint64_t v) {
  switch (key) {
    case K_PAGE: o->page_size = v; break;
    case K_SLICE:
      o->max_slice_size = v;
      o->has_max_slice_size = true;
      break;
    case K_CAP:
      o->max_pool_size = v;
      o->has_max_pool_size = true;
      break;
    case K_MAX: o->max_alloc_size = v; break;
    case K_PERIOD:
      o->dealloc_period = v;
      o->has_dealloc_period = true;
      break;
    case K_RECLAIM:
      o->reclaim_at = v;
      o->has_reclaim_at = true;
      break;
    case K_OBJECT: o->max_object_size = v; break;
    case K_KEEP:
      o->release_threshold = v;
      o->has_release_threshold = true;
      break;
    default: break;
  }
}

/* "page, max-slice, ... or keep", each key followed by `suffix`, into buf. */
static void key_list(char *buf, size_t cap, const char *suffix) {
  size_t w = 0;
  buf[0] = '\0';
  for (int k = 0; k < K_COUNT && w < cap; k++)
    w += (size_t)snprintf(buf + w, cap - w, "%s%s%s", k == 0 ? "" : k + 1 == K_COUNT ? " or " : ", ",
                          k_keys[k], suffix);
}

/* The value v[0..vl) of key number `key` (pool idx of kind `kind`): a size
 * in the one grammar (base/units.c), or a whole number of reservations for
 * period=. */
static int parse_value(const char *v, size_t vl, int key, size_t idx, const char *kind,
                       uint64_t *out, cm_diag_t *diag) {
  char why[160];
  if (key == K_PERIOD) {
    uint64_t r = 0;
    size_t i = 0;
    for (; i < vl && isdigit((unsigned char)v[i]); i++) {
      unsigned d = (unsigned)(v[i] - '0');
      if (r > (UINT64_MAX - d) / 10) break; /* too large: an error below */
      r = r * 10 + d;
    }
    if (vl > 0 && i == vl) {
      *out = r;
      return CM_OK;
    }
    return cm__diag_set(diag, CM_EPARSE,
                        "pool %zu (%s): bad period=%.*s: expected a whole number of reservations",
                        idx, kind, (int)(vl < 95 ? vl : 95), v);
  }
  if (cm__size_parse(v, vl, out, why, sizeof why) == 0) return CM_OK;
  return cm__diag_set(diag, CM_EPARSE, "pool %zu (%s): bad %s=%.*s: %s (%s)", idx, kind,
                      k_keys[key], (int)(vl < 95 ? vl : 95), v, why, CM__SIZE_EXAMPLES);
}

/* Parse one "key=value" item q[0..iend) of pool number idx (of kind `kind`)
 * into o. */
static int parse_option(const char *q, const char *iend, size_t idx, const char *kind,
                        cm_pool_options_t *o, cm_diag_t *diag) {
  const char *eq = memchr(q, '=', (size_t)(iend - q));
  char list[200];
  if (!eq) {
    key_list(list, sizeof list, "");
    return cm__diag_set(diag, CM_EPARSE, "pool %zu (%s): expected key=value, got '%.*s' (keys: %s)",
                        idx, kind, (int)(iend - q), q, list);
  }
  size_t klen = (size_t)(eq - q);
  int key = key_index(q, klen);
  if (key == K_COUNT) {
    char name[64], hint[96] = "";
    snprintf(name, sizeof name, "%.*s", (int)(klen < 63 ? klen : 63), q);
    const char *s = cm__suggest(name, k_keys, K_COUNT);
    if (s) snprintf(hint, sizeof hint, "did you mean '%s='? ", s);
    key_list(list, sizeof list, "=");
    return cm__diag_set(diag, CM_EPARSE, "pool %zu (%s): unknown option '%s='; %sexpected %s", idx,
                        kind, name, hint, list);
  }
  uint64_t v;
  int rc = parse_value(eq + 1, (size_t)(iend - eq - 1), key, idx, kind, &v, diag);
  if (rc == CM_OK) key_set(o, key, v);
  return rc;
}

/* The pool kinds, in the order of cm_pool_kind_t's messages. */
static const struct {
  const char *name;
  cm_pool_kind_t kind;
} k_kinds[] = {{"sliced", CM_POOL_SLICED},
               {"exclusive", CM_POOL_EXCLUSIVE},
               {"direct", CM_POOL_DIRECT},
               {"arena", CM_POOL_ARENA},
               {"adaptive", CM_POOL_ADAPTIVE}};

/* The message for an unknown kind p[0..kl); `single`: the whole text is one
 * word (no ';' or ':'), so it may have meant a preset. */
static int unknown_kind(const char *p, size_t kl, size_t idx, bool single, cm_diag_t *diag) {
  static const char *const names[] = {"default", "subslices", "exclusive-pages", "adaptive",
                                      "sliced",  "exclusive", "direct",          "arena"};
  char kind[64], hint[96] = "";
  snprintf(kind, sizeof kind, "%.*s", (int)(kl < 63 ? kl : 63), p);
  const char *s = cm__suggest(kind, names, sizeof names / sizeof names[0]);
  if (s) snprintf(hint, sizeof hint, "did you mean '%s'? ", s);
  if (single)
    return cm__diag_set(diag, CM_EPARSE,
                        "unknown layout '%s'; %sexpected a preset (default, subslices, "
                        "exclusive-pages, adaptive) or a pool list of sliced, exclusive, direct, "
                        "arena and adaptive pools, e.g. 'sliced:page=8MiB;direct'",
                        kind, hint);
  return cm__diag_set(diag, CM_EPARSE,
                      "pool %zu: unknown kind '%s'; %sexpected sliced, exclusive, direct, arena or "
                      "adaptive (presets default, subslices, exclusive-pages and adaptive stand "
                      "alone)",
                      idx, kind, hint);
}

/* Parse one pool "kind[:key=value,...]" p[0..len), number idx, into o. */
static int parse_pool(const char *p, size_t len, size_t idx, bool single, cm_pool_options_t *o,
                      cm_diag_t *diag) {
  memset(o, 0, sizeof *o);
  const char *colon = memchr(p, ':', len);
  size_t kl = colon ? (size_t)(colon - p) : len;
  const char *kind = NULL;
  for (size_t k = 0; k < sizeof k_kinds / sizeof k_kinds[0] && !kind; k++)
    if (key_is(p, kl, k_kinds[k].name)) o->kind = k_kinds[k].kind, kind = k_kinds[k].name;
  if (!kind) return unknown_kind(p, kl, idx, single, diag);
  const char *q = colon ? colon + 1 : p + len;
  const char *qend = p + len;
  while (q < qend) {
    const char *comma = memchr(q, ',', (size_t)(qend - q));
    const char *iend = comma ? comma : qend;
    int rc = parse_option(q, iend, idx, kind, o, diag);
    if (rc != CM_OK) return rc;
    q = comma ? comma + 1 : qend;
  }
  return CM_OK;
}

int cm_pools_parse(const char *text, cm_device_props_t props, cm_pool_options_t *out, size_t cap,
                   size_t *out_count, cm_diag_t *diag) {
  if (!text || !out_count) return cm__diag_set(diag, CM_EINVAL, "no layout given");
  int pre = preset_named(text);
  if (pre >= 0) {
    int rc = cm_pools_preset((cm_preset_t)pre, props, out, cap, out_count);
    if (rc) return cm__diag_set(diag, rc, "the preset has %zu pools; room for %zu", *out_count, cap);
    return CM_OK;
  }
  if (!*text)
    return cm__diag_set(diag, CM_ECONFIG,
                        "the pool list is empty: expected a preset (default, subslices, "
                        "exclusive-pages, adaptive) or a pool list of sliced, exclusive, direct, "
                        "arena and adaptive pools, e.g. 'sliced:page=8MiB;direct'");
  bool single = !strchr(text, ';') && !strchr(text, ':');
  cm_pool_options_t tmp[CM_MAX_DYNAMIC_POOLS + 1];
  size_t n = 0;
  const char *p = text;
  while (*p) {
    const char *end = strchr(p, ';');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (n > CM_MAX_DYNAMIC_POOLS)
      return cm__diag_set(diag, CM_ECONFIG, "the pool list has more than 254 entries");
    int rc = parse_pool(p, len, n + 1, single, &tmp[n], diag);
    if (rc != CM_OK) return rc;
    n++;
    p = end ? end + 1 : p + len;
  }
  if (n == 0) return cm__diag_set(diag, CM_ECONFIG, "the pool list is empty");
  *out_count = n;
  if (n > cap) return cm__diag_set(diag, CM_EINVAL, "room for %zu pools, %zu given", cap, n);
  return cm_pools_resolve(tmp, n, props, out, diag);
}

static void fmt_size(char *b, size_t cap, uint64_t v) { cm__fmt_size_exact(b, cap, v); }

/* Append ",key=value" (or ":key=value" for the first option of a pool). */
static int fmt_opt(char *tmp, size_t cap, int w, const char *key, const char *val) {
  bool first = !memchr(tmp, ':', (size_t)w);
  int k = snprintf(tmp + w, cap - (size_t)w, "%s%s=%s", first ? ":" : ",", key, val);
  return k > 0 ? w + k : w;
}

/* fmt_opt with a size value, formatted as fmt_size does. */
static int fmt_size_opt(char *tmp, size_t cap, int w, const char *key, uint64_t size) {
  char v[32];
  fmt_size(v, sizeof v, size);
  return fmt_opt(tmp, cap, w, key, v);
}

size_t cm_pools_format(const cm_pool_options_t *pools, size_t n, char *buf, size_t cap) {
  size_t len = 0;
  char tmp[512];
  for (size_t i = 0; i < n; i++) {
    const cm_pool_options_t *o = &pools[i];
    char v[32];
    int w = 0;
    switch (o->kind) {
      case CM_POOL_SLICED:
        w = snprintf(tmp, sizeof tmp, "sliced");
        w = fmt_size_opt(tmp, sizeof tmp, w, k_keys[K_PAGE], o->page_size);
        w = fmt_size_opt(tmp, sizeof tmp, w, k_keys[K_SLICE],
                         o->has_max_slice_size ? o->max_slice_size : o->page_size);
        if (o->max_alloc_size) {
          w = fmt_size_opt(tmp, sizeof tmp, w, k_keys[K_MAX], o->max_alloc_size);
        }
        break;
      case CM_POOL_EXCLUSIVE:
        w = snprintf(tmp, sizeof tmp, "exclusive");
        w = fmt_size_opt(tmp, sizeof tmp, w, k_keys[K_MAX], o->max_alloc_size);
        break;
      case CM_POOL_DIRECT:
        w = snprintf(tmp, sizeof tmp, "direct");
        if (o->has_reclaim_at) {
          w = fmt_size_opt(tmp, sizeof tmp, w, k_keys[K_RECLAIM], o->reclaim_at);
        }
        break;
      case CM_POOL_ARENA:
        w = snprintf(tmp, sizeof tmp, "arena");
        if (o->page_size) {
          w = fmt_size_opt(tmp, sizeof tmp, w, k_keys[K_PAGE], o->page_size);
        }
        if (o->max_alloc_size) {
          w = fmt_size_opt(tmp, sizeof tmp, w, k_keys[K_MAX], o->max_alloc_size);
        }
        if (o->max_object_size) {
          w = fmt_size_opt(tmp, sizeof tmp, w, k_keys[K_OBJECT], o->max_object_size);
        }
        if (o->has_release_threshold) {
          w = fmt_size_opt(tmp, sizeof tmp, w, k_keys[K_KEEP], o->release_threshold);
        }
        break;
      case CM_POOL_ADAPTIVE:
        w = snprintf(tmp, sizeof tmp, "adaptive");
        if (o->page_size) {
          w = fmt_size_opt(tmp, sizeof tmp, w, k_keys[K_PAGE], o->page_size);
        }
        if (o->max_alloc_size) {
          w = fmt_size_opt(tmp, sizeof tmp, w, k_keys[K_MAX], o->max_alloc_size);
        }
        break;
      case CM_POOL_PERSISTENT: w = snprintf(tmp, sizeof tmp, "persistent"); break;
      case CM_POOL_DEDICATED: w = snprintf(tmp, sizeof tmp, "dedicated"); break;
      default: w = snprintf(tmp, sizeof tmp, "unknown"); break;
    }
    if (o->has_max_pool_size && (o->kind == CM_POOL_SLICED || o->kind == CM_POOL_ARENA)) {
      w = fmt_size_opt(tmp, sizeof tmp, w, k_keys[K_CAP], o->max_pool_size);
    }
    if (o->has_dealloc_period && o->kind != CM_POOL_DIRECT) {
      snprintf(v, sizeof v, "%" PRIu64, o->dealloc_period);
      w = fmt_opt(tmp, sizeof tmp, w, k_keys[K_PERIOD], v);
    }
    len = cm__bprintf(buf, cap, len, "%s%s", i ? ";" : "", tmp);
  }
  if (n == 0 && cap) buf[0] = 0;
  return len;
}
