/*
 * schema.c - strict binding of the `[memory]` table of cubecl.toml (spec
 * §11.2, §11.3, seed-memory.rs) to a cm_config_t, plus the config object's
 * own functions (init/free/copy, setters, formatting).
 *
 * Algorithm. cm_config_load_buffer parses the text with the TOML reader,
 * picks the configuration table (the root, or `[cubecl]` of a burn.toml),
 * then walks `memory` key by key in document order. Every key is matched
 * against a fixed schema; the first problem stops the walk with CM_ECONFIG
 * and a diagnostic: "<file>:<line>:<col>: <reason>", the dotted key in
 * diag->key, and a "did you mean" hint chosen by optimal-string-alignment
 * edit distance (case-insensitive equality always counts as a match).
 * Values are bound into a scratch config which replaces the caller's only
 * when the whole table is valid (all-or-nothing, as the reference).
 *
 * Invariants. A cm_config_t owns logger.file, path and section (malloc'd or
 * NULL). source[f] is CM_CFG_SRC_FILE exactly for the keys the loaded
 * document set. Nothing here prints.
 *
 * Exports: cm_config_init/free/copy, cm_config_load_buffer, cm_config_set*,
 * cm_config_field_key, cm_config_source_format, cm_config_value_format, the
 * cm_config_*_name functions, and cm_config_lint_buffer (cm_config_make_logger is in
 * src/runtime/config_logger.c: config does not call the logger).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/sbuf.h"
#include "base/suggest.h"
#include "base/util.h"
#include "cubemem/config.h"
#include "cubemem/toml.h"

/* ---- names ------------------------------------------------------------------- */

static const char *const k_persistent_names[] = {"enabled", "size-match", "disabled",
                                                 "enforced"};
static const cm_persistent_memory_t k_persistent_values[] = {
    CM_PERSISTENT_ENABLED, CM_PERSISTENT_SIZE_MATCH, CM_PERSISTENT_DISABLED,
    CM_PERSISTENT_ENFORCED};
static const char *const k_level_names[] = {"disabled", "basic", "full"};
static const char *const k_alloc_names[] = {"sync", "async"};
static const char *const k_hostlog_names[] = {"info", "debug", "trace"};

static const char *const k_memory_keys[] = {"logger", "persistent_memory", "cuda"};
static const char *const k_logger_keys[] = {"level", "file", "append", "stdout", "stderr", "log"};
static const char *const k_cuda_keys[] = {"allocator"};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static const char *const k_field_keys[CM_CFG_FIELD_COUNT] = {
    "memory.persistent_memory", "memory.logger.level",  "memory.logger.file",
    "memory.logger.append",     "memory.logger.stdout", "memory.logger.stderr",
    "memory.logger.log",        "memory.cuda.allocator"};

const char *cm_config_persistent_memory_name(cm_persistent_memory_t v) {
  for (size_t i = 0; i < COUNT(k_persistent_values); i++)
    if (k_persistent_values[i] == v) return k_persistent_names[i];
  return "?";
}

const char *cm_config_log_level_name(cm_log_level_t v) {
  return (unsigned)v < COUNT(k_level_names) ? k_level_names[v] : "?";
}

const char *cm_config_cuda_allocator_name(cm_cuda_allocator_t v) {
  return (unsigned)v < COUNT(k_alloc_names) ? k_alloc_names[v] : "?";
}

const char *cm_config_host_log_name(cm_host_log_t v) {
  if (v == CM_HOST_LOG_NONE) return "none";
  return (unsigned)v - 1u < COUNT(k_hostlog_names) ? k_hostlog_names[v - 1] : "?";
}

const char *cm_config_field_key(cm_config_field_t field) {
  return (unsigned)field < CM_CFG_FIELD_COUNT ? k_field_keys[field] : NULL;
}

/* ---- object ------------------------------------------------------------------ */

void cm_config_init(cm_config_t *cfg) {
  if (!cfg) return;
  memset(cfg, 0, sizeof *cfg);
  cfg->persistent_memory = CM_PERSISTENT_ENABLED;
  cfg->logger.level = CM_LOG_DISABLED;
  cfg->logger.append = true;
  cfg->logger.log = CM_HOST_LOG_NONE;
  cfg->cuda_allocator = CM_CUDA_SYNC;
}

void cm_config_free(cm_config_t *cfg) {
  if (!cfg) return;
  free(cfg->logger.file);
  free(cfg->path);
  free(cfg->section);
  cm_config_init(cfg);
}

static int dup_opt(const char *s, char **out) {
  *out = NULL;
  if (!s) return CM_OK;
  *out = strdup(s);
  return *out ? CM_OK : CM_ENOMEM;
}

int cm_config_copy(cm_config_t *dst, const cm_config_t *src) {
  if (!dst || !src) return CM_EINVAL;
  if (dst == src) return CM_OK;
  cm_config_t tmp = *src;
  char *file = NULL, *path = NULL, *section = NULL;
  if (dup_opt(src->logger.file, &file) || dup_opt(src->path, &path) ||
      dup_opt(src->section, &section)) {
    free(file);
    free(path);
    free(section);
    return CM_ENOMEM;
  }
  tmp.logger.file = file;
  tmp.path = path;
  tmp.section = section;
  cm_config_free(dst);
  *dst = tmp;
  return CM_OK;
}

/* ---- small text helpers -------------------------------------------------------- */

/* A growable string for building messages; on allocation failure it stays
 * truncated (messages are best-effort, diag buffers are fixed-size anyway). */
typedef struct {
  char buf[1024];
  size_t len;
} text_t;

static void text_add(text_t *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void text_add(text_t *t, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  size_t n = cm__vbprintf(t->buf, sizeof t->buf, t->len, fmt, ap);
  va_end(ap);
  t->len = n < sizeof t->buf - 1 ? n : sizeof t->buf - 1;
}

static bool is_bare_key(const char *k, size_t n) {
  if (n == 0) return false;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)k[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
          c == '_' || c == '-'))
      return false;
  }
  return true;
}

/* Append s (n bytes) as a TOML basic string body, escaping quotes,
 * backslashes and control characters; at most `max` source bytes. */
static void text_add_escaped(text_t *t, const char *s, size_t n, size_t max) {
  size_t lim = n < max ? n : max;
  for (size_t i = 0; i < lim; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c == '"' || c == '\\')
      text_add(t, "\\%c", c);
    else if (c < 0x20 || c == 0x7f)
      text_add(t, "\\u%04X", c);
    else
      text_add(t, "%c", c);
  }
  if (n > lim) text_add(t, "...");
}

/* A dotted key path: prefix + "." + key, with the key quoted when not bare. */
static void key_path(text_t *t, const char *prefix, const char *key, size_t key_len) {
  t->len = 0;
  t->buf[0] = '\0';
  text_add(t, "%s", prefix);
  if (!key) return;
  text_add(t, ".");
  if (is_bare_key(key, key_len) && key_len < 200) {
    text_add(t, "%.*s", (int)key_len, key);
  } else {
    text_add(t, "\"");
    text_add_escaped(t, key, key_len, 80);
    text_add(t, "\"");
  }
}

static char lower(char c) { return (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c; }

/* The edit distance of base/suggest.c, case-sensitive (SIZE_MAX for long input:
 * no suggestion for 10 MB keys). */
static size_t osa_distance(const char *a, size_t n, const char *b, size_t m) {
  return cm__osa_distance(a, n, b, m, false);
}

/* The candidate closest to s, or NULL when none is close enough: a
 * case-insensitive equal, else distance <= max(1, longest/3). */
static const char *closest(const char *s, size_t n, const char *const *cands, size_t count) {
  for (size_t i = 0; i < count; i++) {
    size_t m = strlen(cands[i]);
    if (m != n) continue;
    size_t j = 0;
    while (j < n && lower(s[j]) == lower(cands[i][j])) j++;
    if (j == n) return cands[i];
  }
  const char *best = NULL;
  size_t best_d = (size_t)-1;
  for (size_t i = 0; i < count; i++) {
    size_t m = strlen(cands[i]);
    size_t d = osa_distance(s, n, cands[i], m);
    size_t longest = n > m ? n : m;
    size_t limit = longest / 3 > 1 ? longest / 3 : 1;
    if (d <= limit && d < best_d) {
      best = cands[i];
      best_d = d;
    }
  }
  return best;
}

static const char *article(const char *noun) {
  return strchr("aeiou", noun[0]) ? "an" : "a";
}

/* snprintf into a fixed buffer where truncation is acceptable (messages). */
static void fmt_into(char *dst, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fmt_into(char *dst, size_t cap, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(dst, cap, fmt, ap);
  va_end(ap);
}

/* ---- binding ------------------------------------------------------------------- */

typedef struct {
  const char *name;    /* file name for messages */
  const char *prefix;  /* "memory" or "cubecl.memory" */
  cm_diag_t *diag;
  cm_config_t *cfg;    /* scratch being filled */
} binder_t;

/* Record an error at v's position: message "<name>:<line>:<col>: <reason>". */
static int fail_at(binder_t *b, const cm_toml_value_t *v, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail_at(binder_t *b, const cm_toml_value_t *v, const char *key, const char *fmt, ...) {
  cm_diag_t *d = b->diag;
  if (!d) return CM_ECONFIG;
  uint32_t line = 0, col = 0;
  if (v) (void)cm_toml_position(v, &line, &col);
  char reason[900];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(reason, sizeof reason, fmt, ap);
  va_end(ap);
  memset(d, 0, sizeof *d);
  d->code = CM_ECONFIG;
  d->line = line;
  d->column = col;
  snprintf(d->file, sizeof d->file, "%s", b->name);
  snprintf(d->key, sizeof d->key, "%s", key ? key : "");
  if (line)
    fmt_into(d->message, sizeof d->message, "%s:%u:%u: %s", b->name, line, col, reason);
  else
    fmt_into(d->message, sizeof d->message, "%s: %s", b->name, reason);
  return CM_ECONFIG;
}

static void list_names(text_t *t, const char *const *names, size_t count, bool quoted) {
  for (size_t i = 0; i < count; i++)
    text_add(t, quoted ? "%s\"%s\"" : "%s%s", i ? ", " : "", names[i]);
}

static int fail_unknown_key(binder_t *b, const cm_toml_value_t *v, const char *path,
                            const char *key, size_t key_len, const char *const *allowed,
                            size_t count) {
  text_t exp = {.len = 0};
  exp.buf[0] = '\0';
  list_names(&exp, allowed, count, false);
  const char *hint = closest(key, key_len, allowed, count);
  if (hint)
    return fail_at(b, v, path, "unknown key '%s'; expected one of %s; did you mean '%s'?", path,
                   exp.buf, hint);
  return fail_at(b, v, path, "unknown key '%s'; expected one of %s", path, exp.buf);
}

static int fail_type(binder_t *b, const cm_toml_value_t *v, const char *path,
                     const char *expected) {
  const char *found = cm_toml_type_name(cm_toml_type(v));
  return fail_at(b, v, path, "wrong type for '%s': expected %s, found %s %s", path, expected,
                 article(found), found);
}

static int fail_pools(binder_t *b, const cm_toml_value_t *v, const char *path) {
  return fail_at(b, v, path,
                 "'%s' is not accepted in configuration files: pool layouts are set through "
                 "the API (cm_manager_install_pools) or on the command line "
                 "(cubemem replay --pools)",
                 path);
}

/* Match a string value against enum names. Returns the index or -1 (error set). */
static int bind_enum(binder_t *b, const cm_toml_value_t *v, const char *path,
                     const char *const *names, size_t count, int *out) {
  const char *s = NULL;
  size_t n = 0;
  if (cm_toml_type(v) != CM_TOML_STRING || cm_toml_get_string(v, &s, &n) != CM_OK) {
    text_t exp = {.len = 0};
    exp.buf[0] = '\0';
    text_add(&exp, "a string (one of ");
    list_names(&exp, names, count, true);
    text_add(&exp, ")");
    return fail_type(b, v, path, exp.buf);
  }
  for (size_t i = 0; i < count; i++) {
    if (strlen(names[i]) == n && memcmp(names[i], s, n) == 0) {
      *out = (int)i;
      return CM_OK;
    }
  }
  text_t val = {.len = 0}, exp = {.len = 0};
  val.buf[0] = exp.buf[0] = '\0';
  text_add_escaped(&val, s, n, 60);
  list_names(&exp, names, count, true);
  const char *hint = closest(s, n, names, count);
  if (hint)
    return fail_at(b, v, path,
                   "invalid value \"%s\" for '%s': expected one of %s; did you mean \"%s\"? "
                   "(values are case-sensitive)",
                   val.buf, path, exp.buf, hint);
  return fail_at(b, v, path, "invalid value \"%s\" for '%s': expected one of %s", val.buf, path,
                 exp.buf);
}

static int bind_bool(binder_t *b, const cm_toml_value_t *v, const char *path, bool *out) {
  if (cm_toml_type(v) != CM_TOML_BOOL) return fail_type(b, v, path, "a bool (true or false)");
  return cm_toml_get_bool(v, out);
}

static void mark(binder_t *b, cm_config_field_t f, const cm_toml_value_t *v) {
  cm_config_source_t *s = &b->cfg->source[f];
  s->kind = CM_CFG_SRC_FILE;
  (void)cm_toml_position(v, &s->line, &s->column);
}

static bool key_is(const char *key, size_t n, const char *name) {
  return strlen(name) == n && memcmp(key, name, n) == 0;
}

static int bind_logger(binder_t *b, const cm_toml_value_t *tab, const char *tpath) {
  size_t len = 0;
  (void)cm_toml_table_len(tab, &len);
  for (size_t i = 0; i < len; i++) {
    const char *key;
    size_t kn;
    const cm_toml_value_t *v;
    if (cm_toml_table_at(tab, i, &key, &kn, &v) != CM_OK) return CM_ECORRUPT;
    text_t p;
    key_path(&p, tpath, key, kn);
    int rc, idx = 0;
    cm_config_logger_t *lg = &b->cfg->logger;
    if (key_is(key, kn, "level")) {
      if ((rc = bind_enum(b, v, p.buf, k_level_names, COUNT(k_level_names), &idx))) return rc;
      lg->level = (cm_log_level_t)idx;
      mark(b, CM_CFG_LOGGER_LEVEL, v);
    } else if (key_is(key, kn, "file")) {
      const char *s = NULL;
      size_t n = 0;
      if (cm_toml_type(v) != CM_TOML_STRING) return fail_type(b, v, p.buf, "a string (a path)");
      (void)cm_toml_get_string(v, &s, &n);
      if (n == 0) return fail_at(b, v, p.buf, "'%s' must not be empty", p.buf);
      if (memchr(s, '\0', n))
        return fail_at(b, v, p.buf, "'%s' must not contain a NUL character", p.buf);
      char *copy = strdup(s);
      if (!copy) return cm__diag_set(b->diag, CM_ENOMEM, "out of memory binding the config");
      free(lg->file);
      lg->file = copy;
      mark(b, CM_CFG_LOGGER_FILE, v);
    } else if (key_is(key, kn, "append")) {
      if ((rc = bind_bool(b, v, p.buf, &lg->append))) return rc;
      mark(b, CM_CFG_LOGGER_APPEND, v);
    } else if (key_is(key, kn, "stdout")) {
      if ((rc = bind_bool(b, v, p.buf, &lg->to_stdout))) return rc;
      mark(b, CM_CFG_LOGGER_STDOUT, v);
    } else if (key_is(key, kn, "stderr")) {
      if ((rc = bind_bool(b, v, p.buf, &lg->to_stderr))) return rc;
      mark(b, CM_CFG_LOGGER_STDERR, v);
    } else if (key_is(key, kn, "log")) {
      if ((rc = bind_enum(b, v, p.buf, k_hostlog_names, COUNT(k_hostlog_names), &idx)))
        return rc;
      lg->log = (cm_host_log_t)(idx + 1);
      mark(b, CM_CFG_LOGGER_LOG, v);
    } else {
      return fail_unknown_key(b, v, p.buf, key, kn, k_logger_keys, COUNT(k_logger_keys));
    }
  }
  return CM_OK;
}

static int bind_cuda(binder_t *b, const cm_toml_value_t *tab, const char *tpath) {
  size_t len = 0;
  (void)cm_toml_table_len(tab, &len);
  for (size_t i = 0; i < len; i++) {
    const char *key;
    size_t kn;
    const cm_toml_value_t *v;
    if (cm_toml_table_at(tab, i, &key, &kn, &v) != CM_OK) return CM_ECORRUPT;
    text_t p;
    key_path(&p, tpath, key, kn);
    if (key_is(key, kn, "allocator")) {
      int idx = 0, rc = bind_enum(b, v, p.buf, k_alloc_names, COUNT(k_alloc_names), &idx);
      if (rc) return rc;
      b->cfg->cuda_allocator = (cm_cuda_allocator_t)idx;
      mark(b, CM_CFG_CUDA_ALLOCATOR, v);
    } else {
      return fail_unknown_key(b, v, p.buf, key, kn, k_cuda_keys, COUNT(k_cuda_keys));
    }
  }
  return CM_OK;
}

static int bind_memory(binder_t *b, const cm_toml_value_t *mem) {
  size_t len = 0;
  (void)cm_toml_table_len(mem, &len);
  for (size_t i = 0; i < len; i++) {
    const char *key;
    size_t kn;
    const cm_toml_value_t *v;
    if (cm_toml_table_at(mem, i, &key, &kn, &v) != CM_OK) return CM_ECORRUPT;
    text_t p;
    key_path(&p, b->prefix, key, kn);
    int rc;
    if (key_is(key, kn, "pools")) return fail_pools(b, v, p.buf);
    if (key_is(key, kn, "logger")) {
      if (cm_toml_type(v) != CM_TOML_TABLE) return fail_type(b, v, p.buf, "a table");
      if ((rc = bind_logger(b, v, p.buf))) return rc;
    } else if (key_is(key, kn, "cuda")) {
      if (cm_toml_type(v) != CM_TOML_TABLE) return fail_type(b, v, p.buf, "a table");
      if ((rc = bind_cuda(b, v, p.buf))) return rc;
    } else if (key_is(key, kn, "persistent_memory")) {
      int idx = 0;
      rc = bind_enum(b, v, p.buf, k_persistent_names, COUNT(k_persistent_names), &idx);
      if (rc) return rc;
      b->cfg->persistent_memory = k_persistent_values[idx];
      mark(b, CM_CFG_PERSISTENT_MEMORY, v);
    } else {
      return fail_unknown_key(b, v, p.buf, key, kn, k_memory_keys, COUNT(k_memory_keys));
    }
  }
  return CM_OK;
}

/* Rewrite the parser's "line L, column C: reason" as "<name>:L:C: reason". */
static void relabel_parse_error(cm_diag_t *d, const char *name) {
  if (!d) return;
  char reason[512];
  const char *msg = d->message;
  unsigned l, c;
  int consumed = 0;
  if (sscanf(msg, "line %u, column %u: %n", &l, &c, &consumed) == 2 && consumed > 0)
    msg += consumed;
  snprintf(reason, sizeof reason, "%s", msg);
  snprintf(d->file, sizeof d->file, "%s", name);
  d->key[0] = '\0';
  if (d->line)
    fmt_into(d->message, sizeof d->message, "%s:%u:%u: %s", name, d->line, d->column, reason);
  else
    fmt_into(d->message, sizeof d->message, "%s: %s", name, reason);
}

int cm_config_load_buffer(cm_config_t *cfg, const char *data, size_t len, const char *name,
                          const char *section, cm_diag_t *diag) {
  if (!cfg || (!data && len > 0))
    return cm__diag_set(diag, CM_EINVAL, "cm_config_load_buffer: NULL argument");
  if (!name) name = "<buffer>";
  if (!data) data = "";
  cm_toml_doc_t *doc = NULL;
  cm_diag_t pd;
  memset(&pd, 0, sizeof pd);
  int rc = cm_toml_parse(data, len, &doc, &pd);
  if (rc != CM_OK) {
    if (rc == CM_EPARSE) relabel_parse_error(&pd, name);
    if (diag) *diag = pd;
    return rc;
  }

  cm_config_t scratch;
  cm_config_init(&scratch);
  binder_t b = {.name = name, .prefix = "memory", .diag = diag, .cfg = &scratch};
  const cm_toml_value_t *root = cm_toml_doc_root(doc), *top = root, *mem = NULL;
  char prefix[160];
  if (section) {
    const cm_toml_value_t *sec = NULL;
    if (cm_toml_table_get(root, section, &sec) != CM_OK) {
      cm__diag_set(diag, CM_ENOTFOUND, "%s: no [%s] table", name, section);
      if (diag) snprintf(diag->file, sizeof diag->file, "%s", name);
      rc = CM_ENOTFOUND;
      goto out;
    }
    if (cm_toml_type(sec) != CM_TOML_TABLE) {
      rc = fail_type(&b, sec, section, "a table");
      goto out;
    }
    top = sec;
    snprintf(prefix, sizeof prefix, "%s.memory", section);
    b.prefix = prefix;
  }
  if (cm_toml_table_get(top, "memory", &mem) == CM_OK) {
    if (cm_toml_type(mem) != CM_TOML_TABLE) {
      rc = fail_type(&b, mem, b.prefix, "a table");
      goto out;
    }
    rc = bind_memory(&b, mem);
    if (rc == CM_ECORRUPT) cm__diag_set(diag, rc, "%s: internal error walking the document", name);
    if (rc != CM_OK) goto out;
  }
  if (dup_opt(name, &scratch.path) != CM_OK || dup_opt(section, &scratch.section) != CM_OK) {
    rc = cm__diag_set(diag, CM_ENOMEM, "out of memory binding the config");
    goto out;
  }
  cm_config_free(cfg);
  *cfg = scratch;
  cm_config_init(&scratch);
  rc = CM_OK;
out:
  cm_config_free(&scratch);
  cm_toml_doc_free(doc);
  return rc;
}

/* ---- setters --------------------------------------------------------------------- */

static void mark_api(cm_config_t *cfg, cm_config_field_t f) {
  cfg->source[f].kind = CM_CFG_SRC_API;
  cfg->source[f].line = cfg->source[f].column = 0;
}

void cm_config_set_persistent_memory(cm_config_t *cfg, cm_persistent_memory_t v) {
  if (!cfg) return;
  cfg->persistent_memory = v;
  mark_api(cfg, CM_CFG_PERSISTENT_MEMORY);
}

void cm_config_set_logger_level(cm_config_t *cfg, cm_log_level_t level) {
  if (!cfg) return;
  cfg->logger.level = level;
  mark_api(cfg, CM_CFG_LOGGER_LEVEL);
}

void cm_config_set_cuda_allocator(cm_config_t *cfg, cm_cuda_allocator_t a) {
  if (!cfg) return;
  cfg->cuda_allocator = a;
  mark_api(cfg, CM_CFG_CUDA_ALLOCATOR);
}

int cm_config_set_logger_file(cm_config_t *cfg, const char *path) {
  if (!cfg) return CM_EINVAL;
  char *copy = NULL;
  if (dup_opt(path, &copy) != CM_OK) return CM_ENOMEM;
  free(cfg->logger.file);
  cfg->logger.file = copy;
  mark_api(cfg, CM_CFG_LOGGER_FILE);
  return CM_OK;
}

static int api_fail(cm_diag_t *diag, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int api_fail(cm_diag_t *diag, const char *key, const char *fmt, ...) {
  if (!diag) return CM_ECONFIG;
  memset(diag, 0, sizeof *diag);
  va_list ap;
  va_start(ap, fmt);
  cm__diag_vset(diag, CM_ECONFIG, fmt, ap);
  va_end(ap);
  snprintf(diag->key, sizeof diag->key, "%s", key);
  return CM_ECONFIG;
}

static int api_enum(const char *key, const char *value, const char *const *names, size_t count,
                    int *out, cm_diag_t *diag) {
  for (size_t i = 0; i < count; i++)
    if (!strcmp(value, names[i])) {
      *out = (int)i;
      return CM_OK;
    }
  text_t exp = {.len = 0}, val = {.len = 0};
  exp.buf[0] = val.buf[0] = '\0';
  list_names(&exp, names, count, true);
  text_add_escaped(&val, value, strlen(value), 60);
  const char *hint = closest(value, strlen(value), names, count);
  if (hint)
    return api_fail(diag, key,
                    "invalid value \"%s\" for '%s': expected one of %s; did you mean \"%s\"? "
                    "(values are case-sensitive)",
                    val.buf, key, exp.buf, hint);
  return api_fail(diag, key, "invalid value \"%s\" for '%s': expected one of %s", val.buf, key,
                  exp.buf);
}

int cm_config_set(cm_config_t *cfg, const char *key, const char *value, cm_diag_t *diag) {
  if (!cfg || !key || !value) return cm__diag_set(diag, CM_EINVAL, "cm_config_set: NULL argument");
  const char *k = strncmp(key, "memory.", 7) == 0 ? key + 7 : key;
  char full[160];
  snprintf(full, sizeof full, "memory.%s", k);
  int field = -1;
  for (int f = 0; f < CM_CFG_FIELD_COUNT; f++)
    if (!strcmp(full, k_field_keys[f])) field = f;
  if (field < 0) {
    if (!strcmp(k, "pools") || !strncmp(k, "pools.", 6))
      return api_fail(diag, full,
                      "'%s' is not a configuration setting: pool layouts are set with "
                      "cm_manager_install_pools or `cubemem replay --pools`",
                      full);
    const char *hint = closest(full, strlen(full), k_field_keys, CM_CFG_FIELD_COUNT);
    if (hint)
      return api_fail(diag, full, "unknown key '%s'; did you mean '%s'?", full, hint);
    return api_fail(diag, full, "unknown key '%s'", full);
  }
  int idx = 0, rc;
  bool bv = false;
  switch ((cm_config_field_t)field) {
    case CM_CFG_PERSISTENT_MEMORY:
      if ((rc = api_enum(full, value, k_persistent_names, COUNT(k_persistent_names), &idx, diag)))
        return rc;
      cfg->persistent_memory = k_persistent_values[idx];
      break;
    case CM_CFG_LOGGER_LEVEL:
      if ((rc = api_enum(full, value, k_level_names, COUNT(k_level_names), &idx, diag))) return rc;
      cfg->logger.level = (cm_log_level_t)idx;
      break;
    case CM_CFG_LOGGER_LOG:
      if ((rc = api_enum(full, value, k_hostlog_names, COUNT(k_hostlog_names), &idx, diag)))
        return rc;
      cfg->logger.log = (cm_host_log_t)(idx + 1);
      break;
    case CM_CFG_CUDA_ALLOCATOR:
      if ((rc = api_enum(full, value, k_alloc_names, COUNT(k_alloc_names), &idx, diag))) return rc;
      cfg->cuda_allocator = (cm_cuda_allocator_t)idx;
      break;
    case CM_CFG_LOGGER_FILE:
      if (!value[0]) return api_fail(diag, full, "'%s' must not be empty", full);
      if (cm_config_set_logger_file(cfg, value) != CM_OK)
        return cm__diag_set(diag, CM_ENOMEM, "out of memory");
      break;
    case CM_CFG_LOGGER_APPEND:
    case CM_CFG_LOGGER_STDOUT:
    case CM_CFG_LOGGER_STDERR:
      if (!strcmp(value, "true"))
        bv = true;
      else if (strcmp(value, "false") != 0)
        return api_fail(diag, full, "wrong type for '%s': expected a bool (true or false), got \"%s\"",
                        full, value);
      if (field == CM_CFG_LOGGER_APPEND) cfg->logger.append = bv;
      if (field == CM_CFG_LOGGER_STDOUT) cfg->logger.to_stdout = bv;
      if (field == CM_CFG_LOGGER_STDERR) cfg->logger.to_stderr = bv;
      break;
    default:
      return CM_EINVAL;
  }
  mark_api(cfg, (cm_config_field_t)field);
  return CM_OK;
}

/* ---- formatting ---------------------------------------------------------------- */

size_t cm_config_source_format(const cm_config_t *cfg, cm_config_field_t field, char *buf,
                               size_t cap) {
  int n;
  if (!cfg || (unsigned)field >= CM_CFG_FIELD_COUNT) {
    n = snprintf(buf, cap, "?");
  } else {
    const cm_config_source_t *s = &cfg->source[field];
    switch (s->kind) {
      case CM_CFG_SRC_FILE:
        if (cfg->section)
          n = snprintf(buf, cap, "%s:%u [%s]", cfg->path ? cfg->path : "<buffer>", s->line,
                       cfg->section);
        else
          n = snprintf(buf, cap, "%s:%u", cfg->path ? cfg->path : "<buffer>", s->line);
        break;
      case CM_CFG_SRC_API: n = snprintf(buf, cap, "api"); break;
      default: n = snprintf(buf, cap, "default"); break;
    }
  }
  return n < 0 ? 0 : (size_t)n;
}

size_t cm_config_value_format(const cm_config_t *cfg, cm_config_field_t field, char *buf,
                              size_t cap) {
  int n;
  if (!cfg) return (size_t)snprintf(buf, cap, "?");
  switch (field) {
    case CM_CFG_PERSISTENT_MEMORY:
      n = snprintf(buf, cap, "\"%s\"", cm_config_persistent_memory_name(cfg->persistent_memory));
      break;
    case CM_CFG_LOGGER_LEVEL:
      n = snprintf(buf, cap, "\"%s\"", cm_config_log_level_name(cfg->logger.level));
      break;
    case CM_CFG_LOGGER_FILE: {
      if (!cfg->logger.file) {
        n = snprintf(buf, cap, "(unset)");
        break;
      }
      /* quote as a TOML basic string; cap the working text at a few KiB */
      size_t fl = strlen(cfg->logger.file);
      text_t t = {.len = 0};
      t.buf[0] = '\0';
      text_add(&t, "\"");
      text_add_escaped(&t, cfg->logger.file, fl, sizeof t.buf - 16);
      text_add(&t, "\"");
      n = snprintf(buf, cap, "%s", t.buf);
      break;
    }
    case CM_CFG_LOGGER_APPEND: n = snprintf(buf, cap, cfg->logger.append ? "true" : "false"); break;
    case CM_CFG_LOGGER_STDOUT:
      n = snprintf(buf, cap, cfg->logger.to_stdout ? "true" : "false");
      break;
    case CM_CFG_LOGGER_STDERR:
      n = snprintf(buf, cap, cfg->logger.to_stderr ? "true" : "false");
      break;
    case CM_CFG_LOGGER_LOG:
      if (cfg->logger.log == CM_HOST_LOG_NONE)
        n = snprintf(buf, cap, "(unset)");
      else
        n = snprintf(buf, cap, "\"%s\"", cm_config_host_log_name(cfg->logger.log));
      break;
    case CM_CFG_CUDA_ALLOCATOR:
      n = snprintf(buf, cap, "\"%s\"", cm_config_cuda_allocator_name(cfg->cuda_allocator));
      break;
    default: n = snprintf(buf, cap, "?"); break;
  }
  return n < 0 ? 0 : (size_t)n;
}

/* ---- lint: what the loader ignores in silence ------------------------------------ */

typedef struct linter {
  const char *name;
  cm_config_warn_fn warn;
  void *arg;
  size_t count;
} linter_t;

static void lint_warn(linter_t *l, const cm_toml_value_t *v, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void lint_warn(linter_t *l, const cm_toml_value_t *v, const char *key, const char *fmt, ...) {
  cm_diag_t w;
  memset(&w, 0, sizeof w);
  w.code = CM_ECONFIG;
  (void)cm_toml_position(v, &w.line, &w.column);
  snprintf(w.file, sizeof w.file, "%s", l->name);
  snprintf(w.key, sizeof w.key, "%s", key);
  char what[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  fmt_into(w.message, sizeof w.message, "%s:%u:%u: %s", l->name, w.line, w.column, what);
  l->count++;
  l->warn(l->arg, &w);
}

/* Findings in the table `top` whose dotted name is `prefix` ("" = root). */
static void lint_top(linter_t *l, const cm_toml_value_t *top, const char *prefix) {
  static const char *const memory[] = {"memory"};
  size_t len = 0;
  (void)cm_toml_table_len(top, &len);
  for (size_t i = 0; i < len; i++) {
    const char *key;
    size_t kn;
    const cm_toml_value_t *v;
    if (cm_toml_table_at(top, i, &key, &kn, &v) != CM_OK) return;
    if (key_is(key, kn, "memory")) continue;
    char full[200];
    snprintf(full, sizeof full, "%s%s%.*s", prefix, *prefix ? "." : "", (int)(kn > 120 ? 120 : kn), key);
    bool table = cm_toml_type(v) == CM_TOML_TABLE;
    if (table && closest(key, kn, memory, 1)) {
      lint_warn(l, v, full,
                "table [%s] is not read: did you mean [%s%smemory]? (table names are "
                "case-sensitive)", full, prefix, *prefix ? "." : "");
      continue;
    }
    const char *mk = closest(key, kn, k_memory_keys, COUNT(k_memory_keys));
    if (mk && key_is(key, kn, mk)) {
      lint_warn(l, v, full,
                "'%s' is outside [%s%smemory] and is not read: move it under [%s%smemory]",
                full, prefix, *prefix ? "." : "", prefix, *prefix ? "." : "");
    } else if (!table && mk) {
      lint_warn(l, v, full,
                "'%s' is not read: did you mean '%s' under [%s%smemory]?", full, mk, prefix,
                *prefix ? "." : "");
    }
  }
}

int cm_config_lint_buffer(const char *data, size_t len, const char *name, const char *section,
                          cm_config_warn_fn warn, void *arg, size_t *count) {
  if ((!data && len > 0) || !warn) return CM_EINVAL;
  if (count) *count = 0;
  if (!name) name = "<buffer>";
  cm_toml_doc_t *doc = NULL;
  int rc = cm_toml_parse(data ? data : "", len, &doc, NULL);
  if (rc == CM_ENOMEM) return rc;
  if (rc != CM_OK) return CM_OK; /* the loader reports parse errors */
  linter_t l = {name, warn, arg, 0};
  const cm_toml_value_t *root = cm_toml_doc_root(doc), *sec = NULL, *mem = NULL;
  if (section) {
    if (cm_toml_table_get(root, section, &sec) == CM_OK && cm_toml_type(sec) == CM_TOML_TABLE)
      lint_top(&l, sec, section);
    if (cm_toml_table_get(root, "memory", &mem) == CM_OK && cm_toml_type(mem) == CM_TOML_TABLE)
      lint_warn(&l, mem, "memory",
                "[memory] at the top of %s is not read: write [%s.memory] (this file's "
                "configuration is its [%s] table)", name, section, section);
  } else {
    lint_top(&l, root, "");
    if (cm_toml_table_get(root, "cubecl", &sec) == CM_OK && cm_toml_type(sec) == CM_TOML_TABLE &&
        cm_toml_table_get(sec, "memory", &mem) == CM_OK)
      lint_warn(&l, mem, "cubecl.memory",
                "[cubecl.memory] is read from burn.toml only: in %s write [memory]", name);
  }
  cm_toml_doc_free(doc);
  if (count) *count = l.count;
  return CM_OK;
}
