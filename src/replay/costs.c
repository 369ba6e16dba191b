/*
 * costs.c - the driver-time model of cubemem/costs.h: built-in cost sets,
 * cost files ([driver_costs] in TOML, read with the strict TOML reader) and
 * the modelled time of counted driver calls.
 *
 * The keys of a cost file and the fields of cm_driver_costs_t are tied by
 * one table (KEYS), so the parser, the built-ins and the model cannot
 * disagree on a kind. Values are microseconds per call; the model multiplies
 * each count by its cost and rounds to whole nanoseconds per kind.
 *
 * Exports cm_driver_costs_builtin, cm_driver_costs_parse,
 * cm_driver_costs_resolve, cm_driver_time_model, cm_driver_time_measured.
 */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "base/util.h"
#include "cubemem/costs.h"
#include "cubemem/toml.h"

/* A cost file's key and the field it sets. */
static const struct {
  const char *key;
  size_t off;
} KEYS[] = {
    {"create_us", offsetof(cm_driver_costs_t, create_us)},
    {"map_us", offsetof(cm_driver_costs_t, map_us)},
    {"set_access_us", offsetof(cm_driver_costs_t, set_access_us)},
    {"unmap_us", offsetof(cm_driver_costs_t, unmap_us)},
    {"release_us", offsetof(cm_driver_costs_t, release_us)},
    {"reserve_us", offsetof(cm_driver_costs_t, reserve_us)},
    {"address_free_us", offsetof(cm_driver_costs_t, address_free_us)},
    {"alloc_us", offsetof(cm_driver_costs_t, alloc_us)},
    {"free_us", offsetof(cm_driver_costs_t, free_us)},
    {"mem_query_us", offsetof(cm_driver_costs_t, mem_query_us)},
    {"sync_us", offsetof(cm_driver_costs_t, sync_us)},
};
#define NKEYS (sizeof KEYS / sizeof KEYS[0])

/* The published A100 figures; release = unmap, address free = reserve,
 * plain alloc = create + map + set-access, plain free = unmap + release. */
static const cm_driver_costs_t A100 = {
    .name = "a100", .create_us = 193.0, .map_us = 1.45, .set_access_us = 36.0,
    .unmap_us = 25.6, .release_us = 25.6, .reserve_us = 19.0, .address_free_us = 19.0,
    .alloc_us = 193.0 + 1.45 + 36.0, .free_us = 25.6 + 25.6, .mem_query_us = 1.0,
    .sync_us = 5.0};
static const cm_driver_costs_t FAST = {
    .name = "fast", .create_us = 7.6, .map_us = 1.05, .set_access_us = 20.8,
    .unmap_us = 11.5, .release_us = 11.5, .reserve_us = 9.0, .address_free_us = 9.0,
    .alloc_us = 7.6 + 1.05 + 20.8, .free_us = 11.5 + 11.5, .mem_query_us = 1.0,
    .sync_us = 5.0};

int cm_driver_costs_builtin(const char *name, cm_driver_costs_t *out) {
  if (!name || !out) return CM_EINVAL;
  if (!strcmp(name, "a100")) *out = A100;
  else if (!strcmp(name, "fast")) *out = FAST;
  else return CM_ENOTFOUND;
  return CM_OK;
}

/* Set diag's line and column from v, then the message. Returns CM_EPARSE. */
static int bad_at(cm_diag_t *diag, const cm_toml_value_t *v, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int bad_at(cm_diag_t *diag, const cm_toml_value_t *v, const char *fmt, ...) {
  uint32_t line = 0, col = 0;
  if (v) (void)cm_toml_position(v, &line, &col);
  char msg[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  int rc = line ? cm__diag_set(diag, CM_EPARSE, "line %u: %s", line, msg)
                : cm__diag_set(diag, CM_EPARSE, "%s", msg);
  if (diag) {
    diag->line = line;
    diag->column = col;
  }
  return rc;
}

/* The [driver_costs] table of a parsed document into *out. */
static int read_table(const cm_toml_doc_t *doc, const char *name, cm_driver_costs_t *out,
                      cm_diag_t *diag) {
  const cm_toml_value_t *root = cm_toml_doc_root(doc), *tab = NULL;
  size_t n = 0;
  (void)cm_toml_table_len(root, &n);
  for (size_t i = 0; i < n; i++) {
    const char *key = NULL;
    const cm_toml_value_t *v = NULL;
    (void)cm_toml_table_at(root, i, &key, NULL, &v);
    if (strcmp(key, "driver_costs"))
      return bad_at(diag, v, "unknown key '%s' (a cost file has one table, [driver_costs])", key);
    if (cm_toml_type(v) != CM_TOML_TABLE)
      return bad_at(diag, v, "'%s' must be a table ([driver_costs])", key);
    tab = v;
  }
  if (!tab) return bad_at(diag, NULL, "no [driver_costs] table");
  cm_driver_costs_t c = A100;
  snprintf(c.name, sizeof c.name, "%s", name ? name : "file");
  const cm_toml_value_t *bv = NULL;
  if (cm_toml_table_get(tab, "base", &bv) == CM_OK) {
    const char *base = NULL;
    char keep[sizeof c.name];
    memcpy(keep, c.name, sizeof keep);
    if (cm_toml_get_string(bv, &base, NULL) != CM_OK || cm_driver_costs_builtin(base, &c) != CM_OK)
      return bad_at(diag, bv, "bad 'base' (a built-in set: \"a100\" or \"fast\")");
    memcpy(c.name, keep, sizeof c.name);
  }
  (void)cm_toml_table_len(tab, &n);
  for (size_t i = 0; i < n; i++) {
    const char *key = NULL;
    const cm_toml_value_t *v = NULL;
    (void)cm_toml_table_at(tab, i, &key, NULL, &v);
    if (!strcmp(key, "base")) continue;
    if (!strcmp(key, "name")) {
      const char *s = NULL;
      size_t len = 0;
      if (cm_toml_get_string(v, &s, &len) != CM_OK || len == 0 || len >= sizeof c.name ||
          strlen(s) != len)
        return bad_at(diag, v, "bad 'name' (a non-empty string of at most 127 bytes)");
      memcpy(c.name, s, len + 1);
      continue;
    }
    size_t k = 0;
    while (k < NKEYS && strcmp(KEYS[k].key, key)) k++;
    if (k == NKEYS)
      return bad_at(diag, v,
                    "unknown key '%s' in [driver_costs] (known: name, base, create_us, map_us, "
                    "set_access_us, unmap_us, release_us, reserve_us, address_free_us, "
                    "alloc_us, free_us, mem_query_us, sync_us)",
                    key);
    double d = 0;
    cm_toml_type_t ty = cm_toml_type(v);
    if ((ty != CM_TOML_FLOAT && ty != CM_TOML_INTEGER) || cm_toml_get_double(v, &d) != CM_OK ||
        !isfinite(d) || d < 0 || d > 1e9)
      return bad_at(diag, v, "bad '%s': microseconds per call, a number from 0 to 1e9 (got %s)",
                    key, cm_toml_type_name(ty));
    memcpy((char *)&c + KEYS[k].off, &d, sizeof d);
  }
  *out = c;
  return CM_OK;
}

int cm_driver_costs_parse(const char *text, size_t len, const char *name, cm_driver_costs_t *out,
                          cm_diag_t *diag) {
  if (!text || !out) return cm__diag_set(diag, CM_EINVAL, "cm_driver_costs_parse: NULL argument");
  cm_toml_doc_t *doc = NULL;
  int rc = cm_toml_parse(text, len, &doc, diag);
  if (rc != CM_OK) return rc;
  rc = read_table(doc, name, out, diag);
  cm_toml_doc_free(doc);
  return rc;
}

int cm_driver_costs_resolve(const char *spec, cm_driver_costs_t *out, cm_diag_t *diag) {
  if (!spec || !out || !*spec)
    return cm__diag_set(diag, CM_EINVAL, "cm_driver_costs_resolve: no cost set named");
  if (cm_driver_costs_builtin(spec, out) == CM_OK) return CM_OK;
  cm_toml_doc_t *doc = NULL;
  int rc = cm_toml_parse_file(spec, &doc, diag);
  if (rc == CM_OK) {
    rc = read_table(doc, spec, out, diag);
    cm_toml_doc_free(doc);
  }
  if (rc != CM_OK && diag) {
    snprintf(diag->file, sizeof diag->file, "%s", spec);
    if (rc == CM_EIO) { /* most likely a misspelt built-in set */
      char m[sizeof diag->message];
      snprintf(m, sizeof m, "%s (not a built-in set: a100, fast)", diag->message);
      memcpy(diag->message, m, sizeof m);
    }
  }
  return rc;
}

static uint64_t ns(double us, uint64_t calls) {
  return (uint64_t)llround(us * 1000.0 * (double)calls);
}

void cm_driver_time_model(const cm_driver_costs_t *c, const cm_storage_stats_t *s,
                          cm_driver_time_t *out) {
  if (!out) return;
  memset(out, 0, sizeof *out);
  if (!c || !s) return;
  out->create_ns = ns(c->create_us, s->creates);
  out->map_ns = ns(c->map_us, s->map_calls);
  out->set_access_ns = ns(c->set_access_us, s->set_access);
  out->unmap_ns = ns(c->unmap_us, s->unmap_calls);
  out->release_ns = ns(c->release_us, s->releases);
  out->reserve_ns = ns(c->reserve_us, s->reserves);
  out->address_free_ns = ns(c->address_free_us, s->address_frees);
  out->alloc_ns = ns(c->alloc_us, s->allocs);
  out->free_ns = ns(c->free_us, s->deallocs);
  out->mem_query_ns = ns(c->mem_query_us, s->mem_queries);
  out->sync_ns = ns(c->sync_us, s->unmaps);
  out->total_ns = out->create_ns + out->map_ns + out->set_access_ns + out->unmap_ns +
                  out->release_ns + out->reserve_ns + out->address_free_ns + out->alloc_ns +
                  out->free_ns + out->mem_query_ns + out->sync_ns;
}

uint64_t cm_driver_time_measured(const cm_storage_stats_t *s) {
  if (!s) return 0;
#define SUM(f, key) +s->call_ns.f
  return 0 CM_CALL_TIMES(SUM);
#undef SUM
}
