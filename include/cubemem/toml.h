/*
 * cubemem/toml.h - a strict TOML 1.0.0 reader.
 *
 * cm_toml_parse() turns a byte buffer into an immutable tree owned by a
 * cm_toml_doc_t. Every node of the tree is a cm_toml_value_t (opaque); the
 * root is a table. Tables keep their keys in document order and can be
 * looked up by key. Every value remembers where it was defined (the line and
 * column of its key for table members, of the value itself for array
 * elements) so that callers can report "file:line:col" for bad keys.
 *
 * Ownership: all pointers handed out (values, strings, keys) point into the
 * document and stay valid until cm_toml_doc_free(). Callers never free them.
 *
 * Thread-safety: parsing is reentrant (no global state). A parsed document is
 * never modified, so any number of threads may read one document at once;
 * cm_toml_doc_free() must not race with readers of the same document.
 *
 * Errors: functions return CM_OK or a negative CM_E* code (see common.h):
 *   CM_EINVAL    NULL argument, or the value is not of the requested type
 *   CM_ENOTFOUND key absent / index out of range
 *   CM_EPARSE    the document is not valid TOML 1.0 (parse only)
 *   CM_ENOMEM    allocation failed (parse only)
 *   CM_EOVERFLOW an output buffer was too small
 *   CM_EIO       reading a file or writing output failed
 * Out-parameters are written only on success.
 *
 * Strings and keys are UTF-8 and may contain U+0000 (via "\u0000"), so they
 * are returned as pointer + length. They are additionally NUL-terminated, so
 * code that does not care about embedded NULs may use them as C strings.
 */
#ifndef CUBEMEM_TOML_H
#define CUBEMEM_TOML_H

#include <stdio.h>
#include "cubemem/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Maximum nesting of arrays / inline tables (and table-header depth) accepted
 * by the parser; deeper input fails with CM_EPARSE. */
#define CM_TOML_MAX_DEPTH 128

/* Buffer size large enough for any cm_toml_datetime_format() output. */
#define CM_TOML_DATETIME_BUFSZ 48

typedef struct cm_toml_doc cm_toml_doc_t;
typedef struct cm_toml_value cm_toml_value_t;

typedef enum cm_toml_type {
  CM_TOML_STRING = 1,
  CM_TOML_INTEGER,
  CM_TOML_FLOAT,
  CM_TOML_BOOL,
  CM_TOML_OFFSET_DATETIME, /* 1979-05-27T07:32:00-07:00 */
  CM_TOML_LOCAL_DATETIME,  /* 1979-05-27T07:32:00       */
  CM_TOML_LOCAL_DATE,      /* 1979-05-27                */
  CM_TOML_LOCAL_TIME,      /* 07:32:00                  */
  CM_TOML_ARRAY,
  CM_TOML_TABLE
} cm_toml_type_t;

/* How a table came into existence. */
typedef enum cm_toml_table_kind {
  CM_TOML_TABLE_ROOT = 1,  /* the document root */
  CM_TOML_TABLE_EXPLICIT,  /* [a.b] header, or an element of [[a.b]] */
  CM_TOML_TABLE_IMPLICIT,  /* super-table created by a header: "a" in [a.b] */
  CM_TOML_TABLE_DOTTED,    /* created by a dotted key: "a" in a.b = 1 */
  CM_TOML_TABLE_INLINE     /* { ... } */
} cm_toml_table_kind_t;

/* Broken-down date/time. Fields not meaningful for the type are 0. */
typedef struct cm_toml_datetime {
  cm_toml_type_t type;   /* one of the four datetime types */
  int year, month, day;  /* date part (not for LOCAL_TIME) */
  int hour, minute, second; /* time part (not for LOCAL_DATE) */
  uint32_t nanosecond;   /* 0..999999999; extra digits are truncated */
  int frac_digits;       /* fractional digits written in the source, 0..9 */
  bool has_offset;       /* true only for CM_TOML_OFFSET_DATETIME */
  int offset_minutes;    /* UTC offset in minutes (-1439..1439), "Z" is 0 */
} cm_toml_datetime_t;

/* ---- documents -------------------------------------------------------- */

/* Parse len bytes at data (need not be NUL-terminated; a NUL byte in the
 * input is an error; an optional UTF-8 BOM is skipped) as TOML 1.0.0.
 * On success *out receives a new document owned by the caller (free with
 * cm_toml_doc_free). On failure *out is untouched and, if diag is non-NULL,
 * diag gets code, line, column (1-based, counted in characters) and a message
 * such as "line 3, column 7: expected '=' after key".
 * Errors: CM_EINVAL (data NULL with len > 0, or out NULL), CM_EPARSE,
 * CM_ENOMEM. Thread-safe (reentrant). */
CM_API CM_NODISCARD int cm_toml_parse(const char *data, size_t len, cm_toml_doc_t **out,
                                      cm_diag_t *diag);

/* Read the file at path and parse it as cm_toml_parse() does; diag->file is
 * set to path on failure. Errors: as cm_toml_parse, plus CM_EIO when the file
 * cannot be read. Thread-safe. */
CM_API CM_NODISCARD int cm_toml_parse_file(const char *path, cm_toml_doc_t **out,
                                           cm_diag_t *diag);

/* Release a document and everything it owns. NULL is a no-op. Never fails.
 * Must not run concurrently with readers of the same document. */
CM_API void cm_toml_doc_free(cm_toml_doc_t *doc);

/* The root table of doc (never NULL for a non-NULL doc; NULL for NULL).
 * Thread-safe. */
CM_API const cm_toml_value_t *cm_toml_doc_root(const cm_toml_doc_t *doc);

/* ---- any value -------------------------------------------------------- */

/* Type of v; 0 if v is NULL. Thread-safe, never fails. */
CM_API cm_toml_type_t cm_toml_type(const cm_toml_value_t *v);

/* Static lower-case name of a type ("string", "integer", "float", "bool",
 * "offset datetime", "local datetime", "local date", "local time", "array",
 * "table"; "invalid" otherwise). Thread-safe, never fails. */
CM_API const char *cm_toml_type_name(cm_toml_type_t type);

/* Where v was defined: for a table member, the 1-based line/column of its
 * key (for a dotted key or header, of that key segment); for an array
 * element, of the value itself; the root is 1:1. Either out pointer may be
 * NULL. Errors: CM_EINVAL if v is NULL. Thread-safe. */
CM_API int cm_toml_position(const cm_toml_value_t *v, uint32_t *line, uint32_t *column);

/* ---- scalars (CM_EINVAL when v is NULL or of another type) ------------- */

/* String value: *s points into the document (NUL-terminated), *len is its
 * length in bytes (the string may contain NUL). len may be NULL. */
CM_API int cm_toml_get_string(const cm_toml_value_t *v, const char **s, size_t *len);
/* Integer value. */
CM_API int cm_toml_get_int(const cm_toml_value_t *v, int64_t *out);
/* Float value. An INTEGER is also accepted and converted to double. */
CM_API int cm_toml_get_double(const cm_toml_value_t *v, double *out);
/* Boolean value. */
CM_API int cm_toml_get_bool(const cm_toml_value_t *v, bool *out);
/* Any of the four datetime types. */
CM_API int cm_toml_get_datetime(const cm_toml_value_t *v, cm_toml_datetime_t *out);

/* Render dt as RFC 3339 text (toml-test form): "YYYY-MM-DDTHH:MM:SS[.frac]"
 * followed by "Z" (offset 0) or "+HH:MM" for offset date-times; only the
 * date or only the time for local dates/times. frac has dt->frac_digits
 * digits (none when 0). buf receives a NUL-terminated string; use
 * CM_TOML_DATETIME_BUFSZ bytes. Errors: CM_EINVAL (NULL, bad type),
 * CM_EOVERFLOW (cap too small). Thread-safe. */
CM_API int cm_toml_datetime_format(const cm_toml_datetime_t *dt, char *buf, size_t cap);

/* ---- arrays (CM_EINVAL when v is NULL or not an array) ----------------- */

/* Number of elements. */
CM_API int cm_toml_array_len(const cm_toml_value_t *v, size_t *len);
/* Element i (0-based); CM_ENOTFOUND when i >= length. */
CM_API int cm_toml_array_at(const cm_toml_value_t *v, size_t i, const cm_toml_value_t **elem);
/* Whether the array was built by [[header]] sections (array of tables). */
CM_API int cm_toml_array_is_table_array(const cm_toml_value_t *v, bool *out);

/* ---- tables (CM_EINVAL when v is NULL or not a table) ------------------ */

/* Number of keys. */
CM_API int cm_toml_table_len(const cm_toml_value_t *t, size_t *len);
/* Entry i in document order (0-based): key (NUL-terminated, may contain NUL,
 * length in *key_len) and value. Any out pointer may be NULL. CM_ENOTFOUND
 * when i >= length. */
CM_API int cm_toml_table_at(const cm_toml_value_t *t, size_t i, const char **key,
                            size_t *key_len, const cm_toml_value_t **value);
/* Look up a NUL-terminated key (a single key, not a dotted path).
 * CM_ENOTFOUND if absent. */
CM_API int cm_toml_table_get(const cm_toml_value_t *t, const char *key,
                             const cm_toml_value_t **value);
/* Same with an explicit key length (keys may contain NUL). */
CM_API int cm_toml_table_getn(const cm_toml_value_t *t, const char *key, size_t key_len,
                              const cm_toml_value_t **value);
/* Look up key and require a table: CM_ENOTFOUND if absent, CM_EINVAL if the
 * value is not a table. */
CM_API int cm_toml_table_get_table(const cm_toml_value_t *t, const char *key,
                                   const cm_toml_value_t **sub);
/* How the table was defined (see cm_toml_table_kind_t). */
CM_API int cm_toml_table_kind(const cm_toml_value_t *t, cm_toml_table_kind_t *kind);

/* ---- output ----------------------------------------------------------- */

/* Write doc as toml-test "tagged JSON" (one document, trailing newline) to
 * out. Errors: CM_EINVAL (NULL), CM_EIO (write failed). Thread-safe for
 * distinct streams. */
CM_API int cm_toml_to_json(const cm_toml_doc_t *doc, FILE *out);


#ifdef __cplusplus
}
#endif
#endif
