/*
 * toml_internal.h - private tree representation shared by the TOML reader
 * files (toml.c: tree + accessors, toml_lex.c and toml_parse.c: parser,
 * toml_json.c: JSON output). Not installed; nothing here is exported from the
 * library.
 *
 * Tree invariants:
 *  - every node is a heap-allocated cm_toml_value_t owned by exactly one
 *    parent (table entry or array slot); the root is owned by the doc;
 *  - strings and keys are heap copies, NUL-terminated, length kept apart;
 *  - containers record their depth (root = 0); the parser never creates a
 *    container deeper than CM_TOML_MAX_DEPTH + 1, so every recursive walk
 *    over the tree is bounded;
 *  - table entries are kept in insertion (= document) order; tables with
 *    many entries also keep an open-addressing hash index over them.
 */
#ifndef CM_CONFIG_TOML_INTERNAL_H
#define CM_CONFIG_TOML_INTERNAL_H

#include "cubemem/toml.h"

typedef struct cm__toml_entry {
  char *key;
  size_t key_len;
  cm_toml_value_t *value;
} cm__toml_entry_t;

struct cm_toml_value {
  cm_toml_type_t type;
  uint32_t line, column; /* where defined (see cm_toml_position) */
  union {
    struct {
      char *ptr;
      size_t len;
    } str;
    int64_t i;
    double f;
    bool b;
    cm_toml_datetime_t dt;
    struct {
      cm_toml_value_t **items;
      size_t len, cap;
      uint32_t depth;
      bool table_array; /* built by [[header]] */
    } arr;
    struct {
      cm__toml_entry_t *items;
      size_t len, cap;
      uint32_t *index; /* hash slots holding entry index + 1; NULL while small */
      size_t index_cap; /* power of two, 0 while no index */
      uint32_t depth;
      cm_toml_table_kind_t kind;
    } tab;
  } u;
};

struct cm_toml_doc {
  cm_toml_value_t *root;
};

/* Allocate a zeroed node of the given type (NULL on OOM). */
cm_toml_value_t *cm__toml_new(cm_toml_type_t type);
/* Free a node and everything below it. NULL is a no-op. */
void cm__toml_free(cm_toml_value_t *v);
/* Find key in table t; NULL if absent. */
cm_toml_value_t *cm__toml_table_find(const cm_toml_value_t *t, const char *key, size_t len);
/* Append key (copied) -> v to table t. The caller has checked the key is
 * absent. On success t owns v. CM_ENOMEM on failure (v not taken). */
int cm__toml_table_add(cm_toml_value_t *t, const char *key, size_t len, cm_toml_value_t *v);
/* Append v to array a; on success a owns v. CM_ENOMEM on failure. */
int cm__toml_array_push(cm_toml_value_t *a, cm_toml_value_t *v);

#endif
