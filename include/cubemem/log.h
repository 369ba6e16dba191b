/*
 * cubemem/log.h - the memory logger (spec §10): levels, combinable sinks.
 *
 * A logger is created from a cm_logger_config_t (usually bound from the
 * `[memory.logger]` table of cubecl.toml, see cubemem/config.h) and handed to
 * memory managers, which borrow it: it must outlive them.
 *
 * Thread-safety: every function except create/destroy may be called from any
 * thread; each message is written whole (one write per line, under a lock).
 * When the level is CM_LOG_DISABLED, cm_logger_enabled() is one load and a
 * compare and nothing else runs.
 */
#ifndef CUBEMEM_LOG_H
#define CUBEMEM_LOG_H

#include <stdio.h>
#include "cubemem/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cm_log_level {
  CM_LOG_DISABLED = 0, /* nothing is logged (default) */
  CM_LOG_BASIC = 1,    /* pools built, mode changes, explicit cleanup, new persistent pages */
  CM_LOG_FULL = 2,     /* everything, including per-reservation messages */
} cm_log_level_t;

/* Callback sink: the C counterpart of the reference's `log` key. `level` is the
 * message's level (CM_LOG_BASIC/CM_LOG_FULL, or -1 for a warning); `message`
 * is NUL-terminated and has no trailing newline. Called with the logger's lock
 * held: it must not call back into the same logger. */
typedef void (*cm_log_fn)(void *arg, int level, const char *message);

typedef struct cm_logger_config {
  cm_log_level_t level; /* default CM_LOG_DISABLED */
  const char *file;     /* path of a log file, or NULL; parent dirs are created */
  bool append;          /* default true; false truncates the file when opened */
  bool to_stdout;       /* default false */
  bool to_stderr;       /* default false */
  cm_log_fn callback;   /* optional callback sink */
  void *callback_arg;
} cm_logger_config_t;

typedef struct cm_logger cm_logger_t;

/* Fill the defaults (level disabled, append true, no sinks). */
CM_API void cm_logger_config_init(cm_logger_config_t *cfg);
/* Create a logger; copies cfg (strings included). Opens the file now, so an
 * unwritable path is reported here: CM_EIO with the path and strerror in diag.
 * Errors: CM_EINVAL, CM_ENOMEM, CM_EIO. */
CM_API CM_NODISCARD int cm_logger_create(const cm_logger_config_t *cfg, cm_logger_t **out,
                                         cm_diag_t *diag);
/* Close the file and free the logger. NULL ok. Not concurrent with writes. */
CM_API void cm_logger_destroy(cm_logger_t *logger);
/* The configured level (CM_LOG_DISABLED for a NULL logger). */
CM_API cm_log_level_t cm_logger_level(const cm_logger_t *logger);
/* True when a message of `level` would be delivered. NULL logger: false. */
CM_API bool cm_logger_enabled(const cm_logger_t *logger, cm_log_level_t level);
/* Deliver a message at `level` (dropped when not enabled) to every sink. A
 * message containing newlines is delivered as one message. Write errors are
 * counted (cm_logger_counts); the first one is also reported to the callback
 * sink, when there is one, as a warning (level -1) naming the sink and the
 * reason ("cannot write the log to file 'PATH': No space left on device;
 * ..."). */
CM_API void cm_logger_write(cm_logger_t *logger, cm_log_level_t level, const char *message);
/* printf-style convenience over cm_logger_write. */
CM_API void cm_logger_printf(cm_logger_t *logger, cm_log_level_t level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A warning (spill past a capped pool, retry after a failure). Delivered to
 * the sinks whenever the level is not disabled, and always to the callback.
 * NULL logger: dropped. */
CM_API void cm_logger_warn(cm_logger_t *logger, const char *message);
/* Number of messages delivered and of write failures so far. */
CM_API void cm_logger_counts(const cm_logger_t *logger, uint64_t *delivered, uint64_t *failed);

#ifdef __cplusplus
}
#endif
#endif
