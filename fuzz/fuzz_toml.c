/*
 * fuzz_toml.c - libFuzzer target for the TOML reader (cubemem/toml.h) and,
 * when it exists, the configuration binder (cubemem/config.h).
 *
 * Each input is parsed as a TOML document. A parse may fail (CM_EPARSE, with
 * line and column inside the input) or succeed; a successful document is
 * walked completely through every accessor - types, positions, scalars,
 * datetimes (formatted), arrays, tables (by index and by key lookup of the
 * same key, which must find the same value) - and written as tagged JSON to
 * a memory stream. The same bytes then go through the configuration binder
 * (cm_config_load_buffer, whole document and as burn.toml's [cubecl]
 * section): it must fail with CM_EPARSE exactly when the reader did, leave
 * the config untouched on failure, and on success give values that format
 * and copy. The target aborts on any contract violation, so the fuzzer
 * reports it; memory errors are caught by the sanitizers.
 *
 * Exports: LLVMFuzzerTestOneInput.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cubemem/config.h"
#include "cubemem/toml.h"
#include "fuzz.h"


#define FUZZ_CHECK(c)                                                            \
  do {                                                                           \
    if (!(c)) {                                                                  \
      fprintf(stderr, "fuzz_toml: %s:%d: check failed: %s\n", __FILE__, __LINE__, #c); \
      abort();                                                                   \
    }                                                                            \
  } while (0)

static void walk(const cm_toml_value_t *v, int depth) {
  FUZZ_CHECK(depth <= CM_TOML_MAX_DEPTH + 2);
  cm_toml_type_t t = cm_toml_type(v);
  FUZZ_CHECK(strcmp(cm_toml_type_name(t), "invalid") != 0);
  uint32_t line = 0, col = 0;
  FUZZ_CHECK(cm_toml_position(v, &line, &col) == CM_OK);
  FUZZ_CHECK(line >= 1 && col >= 1);
  switch (t) {
  case CM_TOML_STRING: {
    const char *s = NULL;
    size_t len = 0;
    FUZZ_CHECK(cm_toml_get_string(v, &s, &len) == CM_OK);
    FUZZ_CHECK(s != NULL && s[len] == '\0');
    int64_t i;
    FUZZ_CHECK(cm_toml_get_int(v, &i) == CM_EINVAL);
    break;
  }
  case CM_TOML_INTEGER: {
    int64_t i;
    double d;
    FUZZ_CHECK(cm_toml_get_int(v, &i) == CM_OK);
    FUZZ_CHECK(cm_toml_get_double(v, &d) == CM_OK);
    break;
  }
  case CM_TOML_FLOAT: {
    double d;
    FUZZ_CHECK(cm_toml_get_double(v, &d) == CM_OK);
    break;
  }
  case CM_TOML_BOOL: {
    bool b;
    FUZZ_CHECK(cm_toml_get_bool(v, &b) == CM_OK);
    break;
  }
  case CM_TOML_OFFSET_DATETIME:
  case CM_TOML_LOCAL_DATETIME:
  case CM_TOML_LOCAL_DATE:
  case CM_TOML_LOCAL_TIME: {
    cm_toml_datetime_t dt;
    char buf[CM_TOML_DATETIME_BUFSZ];
    FUZZ_CHECK(cm_toml_get_datetime(v, &dt) == CM_OK);
    FUZZ_CHECK(dt.type == t);
    FUZZ_CHECK(dt.nanosecond <= 999999999u);
    FUZZ_CHECK(cm_toml_datetime_format(&dt, buf, sizeof buf) == CM_OK);
    FUZZ_CHECK(memchr(buf, '\0', sizeof buf) != NULL);
    break;
  }
  case CM_TOML_ARRAY: {
    size_t n = 0;
    bool ta;
    FUZZ_CHECK(cm_toml_array_len(v, &n) == CM_OK);
    FUZZ_CHECK(cm_toml_array_is_table_array(v, &ta) == CM_OK);
    for (size_t i = 0; i < n; i++) {
      const cm_toml_value_t *e = NULL;
      FUZZ_CHECK(cm_toml_array_at(v, i, &e) == CM_OK && e != NULL);
      if (ta) FUZZ_CHECK(cm_toml_type(e) == CM_TOML_TABLE);
      walk(e, depth + 1);
    }
    const cm_toml_value_t *e = NULL;
    FUZZ_CHECK(cm_toml_array_at(v, n, &e) == CM_ENOTFOUND);
    break;
  }
  case CM_TOML_TABLE: {
    size_t n = 0;
    cm_toml_table_kind_t kind;
    FUZZ_CHECK(cm_toml_table_len(v, &n) == CM_OK);
    FUZZ_CHECK(cm_toml_table_kind(v, &kind) == CM_OK);
    for (size_t i = 0; i < n; i++) {
      const char *key = NULL;
      size_t klen = 0;
      const cm_toml_value_t *val = NULL, *again = NULL;
      FUZZ_CHECK(cm_toml_table_at(v, i, &key, &klen, &val) == CM_OK);
      FUZZ_CHECK(key != NULL && val != NULL && key[klen] == '\0');
      FUZZ_CHECK(cm_toml_table_getn(v, key, klen, &again) == CM_OK);
      FUZZ_CHECK(again == val);
      walk(val, depth + 1);
    }
    FUZZ_CHECK(cm_toml_table_at(v, n, NULL, NULL, NULL) == CM_ENOTFOUND);
    break;
  }
  default:
    FUZZ_CHECK(0 && "unknown type");
  }
}

static void bind_config(const uint8_t *data, size_t size, bool toml_ok) {
  static const char *const k_sections[] = {NULL, "cubecl"};
  for (int i = 0; i < 2; i++) {
    cm_config_t cfg;
    cm_config_init(&cfg);
    cm_diag_t d;
    cm_diag_clear(&d);
    int rc = cm_config_load_buffer(&cfg, (const char *)data, size, "fuzz.toml", k_sections[i], &d);
    if (!toml_ok) FUZZ_CHECK(rc == CM_EPARSE || rc == CM_ENOMEM);
    if (rc != CM_OK) {
      FUZZ_CHECK(rc == CM_EPARSE || rc == CM_ECONFIG || rc == CM_ENOTFOUND || rc == CM_ENOMEM);
      FUZZ_CHECK(toml_ok || rc != CM_ECONFIG);
      if (toml_ok) FUZZ_CHECK(rc != CM_EPARSE);
      FUZZ_CHECK(memchr(d.message, '\0', sizeof d.message) != NULL);
      /* unchanged on failure: still the defaults */
      FUZZ_CHECK(cfg.path == NULL && cfg.logger.file == NULL);
      FUZZ_CHECK(cfg.persistent_memory == CM_PERSISTENT_ENABLED);
      cm_config_free(&cfg);
      continue;
    }
    char buf[512];
    for (int f = 0; f < (int)CM_CFG_FIELD_COUNT; f++) {
      FUZZ_CHECK(cm_config_field_key((cm_config_field_t)f) != NULL);
      size_t need = cm_config_value_format(&cfg, (cm_config_field_t)f, buf, sizeof buf);
      FUZZ_CHECK(need > 0 && memchr(buf, '\0', sizeof buf) != NULL);
      cm_config_source_format(&cfg, (cm_config_field_t)f, buf, sizeof buf);
      FUZZ_CHECK(memchr(buf, '\0', sizeof buf) != NULL);
    }
    cm_config_t copy;
    cm_config_init(&copy);
    if (cm_config_copy(&copy, &cfg) == CM_OK) {
      FUZZ_CHECK(copy.persistent_memory == cfg.persistent_memory);
      FUZZ_CHECK(copy.logger.level == cfg.logger.level);
      FUZZ_CHECK((copy.logger.file == NULL) == (cfg.logger.file == NULL));
      if (cfg.logger.file) FUZZ_CHECK(strcmp(copy.logger.file, cfg.logger.file) == 0);
    }
    cm_config_free(&copy);
    cm_config_free(&cfg);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  cm_toml_doc_t *doc = NULL;
  cm_diag_t diag;
  cm_diag_clear(&diag);
  int rc = cm_toml_parse((const char *)data, size, &doc, &diag);
  if (rc != CM_OK) {
    FUZZ_CHECK(rc == CM_EPARSE || rc == CM_ENOMEM);
    FUZZ_CHECK(doc == NULL);
    FUZZ_CHECK(diag.code == rc);
    FUZZ_CHECK(memchr(diag.message, '\0', sizeof diag.message) != NULL);
    bind_config(data, size, false);
    return 0;
  }
  FUZZ_CHECK(doc != NULL);
  const cm_toml_value_t *root = cm_toml_doc_root(doc);
  FUZZ_CHECK(root != NULL && cm_toml_type(root) == CM_TOML_TABLE);
  walk(root, 0);

  char *json = NULL;
  size_t json_len = 0;
  FILE *mem = open_memstream(&json, &json_len);
  if (mem) {
    FUZZ_CHECK(cm_toml_to_json(doc, mem) == CM_OK);
    fclose(mem);
    FUZZ_CHECK(json_len > 0 && json[json_len - 1] == '\n');
    free(json);
  }
  cm_toml_doc_free(doc);
  bind_config(data, size, true);
  return 0;
}
