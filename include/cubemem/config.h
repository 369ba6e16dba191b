/*
 * cubemem/config.h - the `[memory]` configuration of cubecl.toml (spec §11):
 * loading, discovery, strict validation, and building a logger from it.
 *
 * A cm_config_t holds the memory settings with, for every value, where it
 * came from (default, a file line, or the API). Start with cm_config_init(),
 * then load a file, a buffer, or discover one from a directory upward, and/or
 * set values through the API. Release with cm_config_free().
 *
 * Validation is strict: inside `[memory]` (and `[memory.logger]`,
 * `[memory.cuda]`) every key must be known and every value of the right type
 * and spelling, otherwise the load fails with CM_ECONFIG and a diagnostic
 * naming file, line, column and the dotted key, with a "did you mean" hint.
 * A `pools` key in any form is refused: pool layouts are programmatic
 * (cm_manager_install_pools, `cubemem replay --pools`). Syntax errors are
 * CM_EPARSE. Tables other than `[memory]` are accepted unchecked.
 *
 * Ownership: a cm_config_t owns its strings (logger.file, path). The struct
 * must not be copied by assignment (two owners); use cm_config_copy().
 * Thread-safety: functions on distinct configs are thread-safe; a config is
 * not internally locked. The library never prints: files skipped during a
 * lenient discovery are reported through a callback.
 */
#ifndef CUBEMEM_CONFIG_H
#define CUBEMEM_CONFIG_H

#include "cubemem/common.h"
#include "cubemem/log.h"

#ifdef __cplusplus
extern "C" {
#endif

/* cm_cuda_allocator_t (`memory.cuda.allocator`) and cm_persistent_memory_t
 * are declared in cubemem/common.h. */

/* `memory.logger.log`: forwarding to the host's log facility. In C this is
 * the logger's callback sink, supplied through cm_config_make_logger(). */
typedef enum cm_host_log {
  CM_HOST_LOG_NONE = 0, /* key absent (default) */
  CM_HOST_LOG_INFO = 1, /* "info" */
  CM_HOST_LOG_DEBUG = 2, /* "debug" */
  CM_HOST_LOG_TRACE = 3, /* "trace" */
} cm_host_log_t;

/* Every setting, for source lookups. */
typedef enum cm_config_field {
  CM_CFG_PERSISTENT_MEMORY = 0, /* memory.persistent_memory */
  CM_CFG_LOGGER_LEVEL,          /* memory.logger.level */
  CM_CFG_LOGGER_FILE,           /* memory.logger.file */
  CM_CFG_LOGGER_APPEND,         /* memory.logger.append */
  CM_CFG_LOGGER_STDOUT,         /* memory.logger.stdout */
  CM_CFG_LOGGER_STDERR,         /* memory.logger.stderr */
  CM_CFG_LOGGER_LOG,            /* memory.logger.log */
  CM_CFG_CUDA_ALLOCATOR,        /* memory.cuda.allocator */
  CM_CFG_FIELD_COUNT
} cm_config_field_t;

typedef enum cm_config_source_kind {
  CM_CFG_SRC_DEFAULT = 0, /* never set: the built-in default */
  CM_CFG_SRC_FILE = 1,    /* from the file in cm_config_t.path, at line/column */
  CM_CFG_SRC_API = 2,     /* set by a cm_config_set* call */
} cm_config_source_kind_t;

typedef struct cm_config_source {
  cm_config_source_kind_t kind;
  uint32_t line;   /* CM_CFG_SRC_FILE: 1-based line of the key, else 0 */
  uint32_t column; /* CM_CFG_SRC_FILE: 1-based column of the key, else 0 */
} cm_config_source_t;

/* `[memory.logger]`. Strings are owned by the enclosing cm_config_t. */
typedef struct cm_config_logger {
  cm_log_level_t level; /* default CM_LOG_DISABLED */
  char *file;           /* default NULL; relative paths are relative to the process cwd */
  bool append;          /* default true (false truncates the file when opened) */
  bool to_stdout;       /* default false */
  bool to_stderr;       /* default false */
  cm_host_log_t log;    /* default CM_HOST_LOG_NONE */
} cm_config_logger_t;

typedef struct cm_config {
  cm_persistent_memory_t persistent_memory; /* default CM_PERSISTENT_ENABLED */
  cm_config_logger_t logger;
  cm_cuda_allocator_t cuda_allocator;       /* default CM_CUDA_SYNC */
  cm_config_source_t source[CM_CFG_FIELD_COUNT];
  char *path;    /* the file the settings came from, or NULL (defaults / buffer: its name) */
  char *section; /* "cubecl" when read from burn.toml's [cubecl] table, else NULL */
} cm_config_t;

/* Fill the defaults; every source CM_CFG_SRC_DEFAULT; no strings. Never fails.
 * Does not free anything: call it on fresh memory only. */
CM_API void cm_config_init(cm_config_t *cfg);
/* Free the owned strings and reset to defaults (as cm_config_init). NULL ok. */
CM_API void cm_config_free(cm_config_t *cfg);
/* Deep copy: *dst (initialised or freed) receives a copy of *src; on success
 * the old contents of *dst are freed. Errors: CM_EINVAL, CM_ENOMEM (dst unchanged). */
CM_API CM_NODISCARD int cm_config_copy(cm_config_t *dst, const cm_config_t *src);

/* ---- loading ---------------------------------------------------------------- */

/* Parse `len` bytes of TOML and bind its `[memory]` table. `name` is used in
 * diagnostics and stored as cfg->path (NULL: "<buffer>"). `section` NULL
 * means the whole document is the configuration; "cubecl" means it is the
 * `[cubecl]` table of a burn.toml (CM_ENOTFOUND when that table is absent).
 * On success the old contents of *cfg (which must be initialised) are freed
 * and replaced: defaults plus the document's values, sources CM_CFG_SRC_FILE.
 * On failure *cfg is unchanged and diag names file, line, column, key.
 * Errors: CM_EINVAL, CM_ENOMEM, CM_EPARSE (not TOML), CM_ECONFIG (schema),
 * CM_ENOTFOUND (section absent). */
CM_API CM_NODISCARD int cm_config_load_buffer(cm_config_t *cfg, const char *data, size_t len,
                                              const char *name, const char *section,
                                              cm_diag_t *diag);
/* Same for the file at path. Also CM_ENOTFOUND when the file does not exist
 * (ENOENT/ENOTDIR) and CM_EIO when it exists but cannot be read or is not a
 * regular file (a FIFO, socket, device or directory is refused by its type,
 * never opened for a blocking read: "PATH: not read: a FIFO, not a regular
 * file"). */
CM_API CM_NODISCARD int cm_config_load_file(cm_config_t *cfg, const char *path,
                                            const char *section, cm_diag_t *diag);

/* ---- warnings for likely mistakes that the strict schema cannot see ------------ */

/* Receives one warning: message "<file>:<line>:<col>: <what and the likely
 * intent>" (the location once), and file, line, column, key set. */
typedef void (*cm_config_warn_fn)(void *arg, const cm_diag_t *warning);

/* Look for configuration that a loader ignores in silence, in the same
 * document cm_config_load_buffer reads (same name and section):
 *  - a table whose name is close to `memory` ([memroy], [Memory]);
 *  - a memory key outside [memory] (persistent_memory = ... at the top);
 *  - [cubecl.memory] in a whole-document file (read from burn.toml only) and
 *    a top-level [memory] in a burn.toml (the runtime reads [cubecl.memory]).
 * Other tables are not warned about (they belong to other tools). Calls warn
 * once per finding, in document order; *count (may be NULL) receives the
 * number. A document that does not parse gives no warnings and CM_OK (the
 * loader reports it). Errors: CM_EINVAL (NULL data with len > 0 or NULL warn),
 * CM_ENOMEM. Thread-safe; never prints. */
CM_API CM_NODISCARD int cm_config_lint_buffer(const char *data, size_t len, const char *name,
                                              const char *section, cm_config_warn_fn warn,
                                              void *arg, size_t *count);
/* Same for the file at path (CM_ENOTFOUND / CM_EIO when it cannot be read). */
CM_API CM_NODISCARD int cm_config_lint_file(const char *path, const char *section,
                                            cm_config_warn_fn warn, void *arg, size_t *count);

/* Called for every file a lenient discovery skips; `err` describes why. */
typedef void (*cm_config_skip_fn)(void *arg, const char *path, const char *section,
                                  const cm_diag_t *err);

typedef struct cm_config_discover_options {
  bool lenient;               /* false (default): a found-but-invalid file is an error */
  cm_config_skip_fn on_skip;  /* lenient only: told about each skipped file; may be NULL */
  void *on_skip_arg;
} cm_config_discover_options_t;

/* Search for the configuration as spec §11.1 does: starting at start_dir
 * (NULL = the current directory) and moving up to "/", try at each level
 * cubecl.toml, CubeCL.toml, then the [cubecl] table of burn.toml, Burn.toml.
 * Missing files and a burn.toml without [cubecl] are silent misses. The first
 * file that loads wins (cfg->path and cfg->section say which). If none is
 * found, *cfg becomes the defaults (cfg->path NULL) and CM_OK is returned.
 * Strict (opts NULL or !lenient): the first found-but-invalid file stops the
 * search with its error (CM_EPARSE / CM_ECONFIG / CM_EIO; *cfg unchanged);
 * a candidate name that is not a regular file (FIFO, socket, device,
 * directory) counts as such a file, with CM_EIO naming it and its kind.
 * Lenient: such a file is reported to on_skip and the search continues.
 * When the current directory cannot be determined the defaults are used;
 * an explicit start_dir that does not exist is CM_EIO.
 * Errors: also CM_EINVAL, CM_ENOMEM. */
CM_API CM_NODISCARD int cm_config_discover(cm_config_t *cfg, const char *start_dir,
                                           const cm_config_discover_options_t *opts,
                                           cm_diag_t *diag);

/* ---- setting values from code (source becomes CM_CFG_SRC_API) ---------------- */

/* Set one value from its TOML spelling, with the same validation as a file:
 * key is a dotted name ("memory.persistent_memory", "memory.logger.level",
 * "memory.logger.append", ... ; the "memory." prefix is optional) and value
 * its text ("size-match", "basic", "true", a path). Errors: CM_EINVAL (NULL),
 * CM_ECONFIG (unknown key / bad value; diag explains), CM_ENOMEM. */
CM_API CM_NODISCARD int cm_config_set(cm_config_t *cfg, const char *key, const char *value,
                                      cm_diag_t *diag);
CM_API void cm_config_set_persistent_memory(cm_config_t *cfg, cm_persistent_memory_t v);
CM_API void cm_config_set_logger_level(cm_config_t *cfg, cm_log_level_t level);
CM_API void cm_config_set_cuda_allocator(cm_config_t *cfg, cm_cuda_allocator_t a);
/* Copies path (NULL clears it). Errors: CM_EINVAL (cfg NULL), CM_ENOMEM. */
CM_API CM_NODISCARD int cm_config_set_logger_file(cm_config_t *cfg, const char *path);

/* ---- reading ---------------------------------------------------------------- */

/* Dotted key of a field ("memory.logger.level"); NULL for an invalid field. */
CM_API const char *cm_config_field_key(cm_config_field_t field);
/* Where a value came from: "default", "api", or "<path>:<line>" (with
 * "[cubecl]" noted for burn.toml sections: "burn.toml:4 [cubecl]"). Written
 * into buf with snprintf semantics; returns the length needed. */
CM_API size_t cm_config_source_format(const cm_config_t *cfg, cm_config_field_t field, char *buf,
                                      size_t cap);
/* The value of a field in its TOML spelling ("size-match", "true", a quoted
 * path "\"m.log\"" or "none" when unset), written like cm_config_source_format. */
CM_API size_t cm_config_value_format(const cm_config_t *cfg, cm_config_field_t field, char *buf,
                                     size_t cap);
/* TOML names of the enum values (static strings; "?" when out of range). */
CM_API const char *cm_config_persistent_memory_name(cm_persistent_memory_t v);
CM_API const char *cm_config_log_level_name(cm_log_level_t v);
CM_API const char *cm_config_cuda_allocator_name(cm_cuda_allocator_t v);
CM_API const char *cm_config_host_log_name(cm_host_log_t v); /* "none" for NONE */

/* ---- using it ------------------------------------------------------------------ */

/* Create the memory logger described by cfg->logger. `callback` (may be NULL)
 * becomes the callback sink: it is how `logger.log` forwarding is done in C.
 * Opens the log file now. Errors: as cm_logger_create (CM_EIO names the path). */
CM_API CM_NODISCARD int cm_config_make_logger(const cm_config_t *cfg, cm_log_fn callback,
                                              void *callback_arg, cm_logger_t **out,
                                              cm_diag_t *diag);

#ifdef __cplusplus
}
#endif
#endif
