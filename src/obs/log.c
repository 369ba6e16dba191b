/*
 * log.c - the memory logger (spec §10): one level, up to four sinks.
 *
 * Purpose. Memory managers report what they do (pools built, mode changes,
 * page creation, cleanup) through a cm_logger_t. The logger owns its sinks:
 * a file (opened once at creation), stdout, stderr and a callback. Any subset
 * may be active at once.
 *
 * Algorithm. A message is formatted once into "text\n" and, under the
 * logger's mutex, handed to every active sink with one write each: write(2)
 * (looped over short writes) for the file, fwrite+fflush for stdout/stderr,
 * one call for the callback (which gets the text without the newline).
 * Holding the mutex across all sinks keeps lines whole and keeps the order
 * of messages the same in every sink.
 *
 * Invariants.
 *  - `level` never changes after creation, so cm_logger_enabled() reads it
 *    without the lock: one load and one compare.
 *  - When the level is CM_LOG_DISABLED no file is opened (nor created, nor
 *    truncated) and nothing is ever written, whatever the sinks.
 *  - append=false truncates the file when it is opened (spec §15.1 item 10:
 *    the reference leaves stale bytes behind; we do not).
 *  - The counters are atomics so cm_logger_counts() needs no lock.
 *
 * Exports: everything declared in cubemem/log.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/util.h"
#include "cubemem/log.h"

struct cm_logger {
  cm_log_level_t level; /* immutable after create */
  pthread_mutex_t lock;
  int fd; /* log file, -1 when none */
  char *path;
  bool to_stdout;
  bool to_stderr;
  cm_log_fn callback;
  void *callback_arg;
  _Atomic uint64_t delivered;
  _Atomic uint64_t failed;
  bool failure_reported; /* the first sink write failure went to the callback; under lock */
};

void cm_logger_config_init(cm_logger_config_t *cfg) {
  if (!cfg) return;
  memset(cfg, 0, sizeof *cfg);
  cfg->level = CM_LOG_DISABLED;
  cfg->append = true;
}

/* mkdir -p for every directory above the file at `path`. On failure returns
 * CM_EIO and names the directory that could not be created. */
static int make_parent_dirs(const char *path, cm_diag_t *diag) {
  size_t n = strlen(path);
  char *buf = malloc(n + 1);
  if (!buf) return cm__diag_set(diag, CM_ENOMEM, "out of memory creating log directories");
  memcpy(buf, path, n + 1);
  char *slash = strrchr(buf, '/');
  if (!slash || slash == buf) {
    free(buf);
    return CM_OK; /* relative file in cwd, or a file directly under / */
  }
  *slash = '\0';
  /* Walk the components left to right; mkdir each, tolerating EEXIST. */
  for (char *p = buf + 1;; p++) {
    if (*p == '/' || *p == '\0') {
      char saved = *p;
      *p = '\0';
      if (mkdir(buf, 0777) != 0 && errno != EEXIST) {
        int e = errno;
        int rc = cm__diag_set(diag, CM_EIO, "cannot create directory '%s' for log file '%s': %s",
                              buf, path, strerror(e));
        free(buf);
        return rc;
      }
      *p = saved;
      if (saved == '\0') break;
    }
  }
  free(buf);
  return CM_OK;
}

int cm_logger_create(const cm_logger_config_t *cfg, cm_logger_t **out, cm_diag_t *diag) {
  if (!cfg || !out) return cm__diag_set(diag, CM_EINVAL, "cm_logger_create: NULL argument");
  if ((int)cfg->level < CM_LOG_DISABLED || (int)cfg->level > CM_LOG_FULL)
    return cm__diag_set(diag, CM_EINVAL, "cm_logger_create: invalid level %d", (int)cfg->level);
  if (cfg->file && cfg->file[0] == '\0')
    return cm__diag_set(diag, CM_EINVAL, "cm_logger_create: empty log file path");

  cm_logger_t *lg = calloc(1, sizeof *lg);
  if (!lg) return cm__diag_set(diag, CM_ENOMEM, "out of memory creating a logger");
  lg->level = cfg->level;
  lg->fd = -1;
  lg->to_stdout = cfg->to_stdout;
  lg->to_stderr = cfg->to_stderr;
  lg->callback = cfg->callback;
  lg->callback_arg = cfg->callback_arg;
  atomic_init(&lg->delivered, 0);
  atomic_init(&lg->failed, 0);
  if (cfg->file) {
    lg->path = strdup(cfg->file);
    if (!lg->path) {
      free(lg);
      return cm__diag_set(diag, CM_ENOMEM, "out of memory creating a logger");
    }
  }
  if (pthread_mutex_init(&lg->lock, NULL) != 0) {
    free(lg->path);
    free(lg);
    return cm__diag_set(diag, CM_ENOMEM, "cannot initialise the logger lock");
  }

  /* A disabled logger never touches the file system. */
  if (lg->path && lg->level != CM_LOG_DISABLED) {
    int rc = make_parent_dirs(lg->path, diag);
    if (rc == CM_OK) {
      int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (cfg->append ? O_APPEND : O_TRUNC);
      lg->fd = open(lg->path, flags, 0666);
      if (lg->fd < 0) {
        int e = errno;
        rc = cm__diag_set(diag, CM_EIO, "cannot open log file '%s': %s", lg->path, strerror(e));
      }
    }
    if (rc != CM_OK) {
      if (diag && rc == CM_EIO) snprintf(diag->file, sizeof diag->file, "%s", lg->path);
      pthread_mutex_destroy(&lg->lock);
      free(lg->path);
      free(lg);
      return rc;
    }
  }
  *out = lg;
  return CM_OK;
}

void cm_logger_destroy(cm_logger_t *logger) {
  if (!logger) return;
  if (logger->fd >= 0) close(logger->fd);
  pthread_mutex_destroy(&logger->lock);
  free(logger->path);
  free(logger);
}

cm_log_level_t cm_logger_level(const cm_logger_t *logger) {
  return logger ? logger->level : CM_LOG_DISABLED;
}

bool cm_logger_enabled(const cm_logger_t *logger, cm_log_level_t level) {
  /* 1 <= level <= logger->level, in one unsigned compare. */
  return logger && (unsigned)level - 1u < (unsigned)logger->level;
}

/* Write all of buf to fd, retrying short writes and EINTR. Returns 0 or
 * the errno of the failure. */
static int write_all(int fd, const char *buf, size_t len) {
  while (len > 0) {
    ssize_t w = write(fd, buf, len);
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno ? errno : EIO;
    }
    buf += w;
    len -= (size_t)w;
  }
  return 0;
}

static int write_stream(FILE *f, const char *buf, size_t len) {
  errno = 0;
  bool ok = fwrite(buf, 1, len, f) == len;
  if (fflush(f) != 0) ok = false;
  return ok ? 0 : errno ? errno : EIO;
}

/* The first failed write to a sink is reported once to the callback, as a
 * warning naming the sink and the reason (later ones are only counted).
 * Caller holds the lock. */
static void report_failure(cm_logger_t *lg, const char *sink, int err) {
  if (lg->failure_reported || !lg->callback) return;
  lg->failure_reported = true;
  char msg[600];
  snprintf(msg, sizeof msg,
           "cannot write the log to %s: %s; messages to it are lost (later failures are only "
           "counted, see cm_logger_counts)",
           sink, strerror(err));
  lg->callback(lg->callback_arg, -1, msg);
}

/* Deliver `line` (len bytes, ending in '\n', NUL after it) to the sinks.
 * `to_sinks` selects the file/stdout/stderr sinks; the callback always runs.
 * `cb_level` is what the callback receives. */
static void deliver(cm_logger_t *lg, char *line, size_t len, bool to_sinks, int cb_level) {
  bool any = false;
  uint64_t failures = 0;
  pthread_mutex_lock(&lg->lock);
  int err;
  char sink[520];
  if (to_sinks && lg->fd >= 0) {
    any = true;
    if ((err = write_all(lg->fd, line, len))) {
      failures++;
      snprintf(sink, sizeof sink, "file '%s'", lg->path);
      report_failure(lg, sink, err);
    }
  }
  if (to_sinks && lg->to_stdout) {
    any = true;
    if ((err = write_stream(stdout, line, len))) {
      failures++;
      report_failure(lg, "stdout", err);
    }
  }
  if (to_sinks && lg->to_stderr) {
    any = true;
    if ((err = write_stream(stderr, line, len))) {
      failures++;
      report_failure(lg, "stderr", err);
    }
  }
  if (lg->callback) {
    any = true;
    line[len - 1] = '\0'; /* the callback gets the text without the newline */
    lg->callback(lg->callback_arg, cb_level, line);
    line[len - 1] = '\n';
  }
  pthread_mutex_unlock(&lg->lock);
  if (any) atomic_fetch_add_explicit(&lg->delivered, 1, memory_order_relaxed);
  if (failures) atomic_fetch_add_explicit(&lg->failed, failures, memory_order_relaxed);
}

/* Copy message + '\n' into a buffer (stack for short messages) and deliver. */
static void deliver_text(cm_logger_t *lg, const char *message, bool to_sinks, int cb_level) {
  if (!message) message = "";
  size_t n = strlen(message);
  char small[512];
  char *buf = small;
  if (n + 2 > sizeof small) {
    buf = malloc(n + 2);
    if (!buf) {
      atomic_fetch_add_explicit(&lg->failed, 1, memory_order_relaxed);
      return;
    }
  }
  memcpy(buf, message, n);
  buf[n] = '\n';
  buf[n + 1] = '\0';
  deliver(lg, buf, n + 1, to_sinks, cb_level);
  if (buf != small) free(buf);
}

void cm_logger_write(cm_logger_t *logger, cm_log_level_t level, const char *message) {
  if (!cm_logger_enabled(logger, level)) return;
  deliver_text(logger, message, true, (int)level);
}

void cm_logger_printf(cm_logger_t *logger, cm_log_level_t level, const char *fmt, ...) {
  if (!cm_logger_enabled(logger, level) || !fmt) return;
  char small[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0) {
    atomic_fetch_add_explicit(&logger->failed, 1, memory_order_relaxed);
    return;
  }
  if ((size_t)n < sizeof small) {
    deliver_text(logger, small, true, (int)level);
    return;
  }
  char *big = malloc((size_t)n + 1);
  if (!big) {
    atomic_fetch_add_explicit(&logger->failed, 1, memory_order_relaxed);
    return;
  }
  va_start(ap, fmt);
  vsnprintf(big, (size_t)n + 1, fmt, ap);
  va_end(ap);
  deliver_text(logger, big, true, (int)level);
  free(big);
}

void cm_logger_warn(cm_logger_t *logger, const char *message) {
  if (!logger) return;
  bool to_sinks = logger->level != CM_LOG_DISABLED;
  if (!to_sinks && !logger->callback) return;
  deliver_text(logger, message, to_sinks, -1);
}

void cm_logger_counts(const cm_logger_t *logger, uint64_t *delivered, uint64_t *failed) {
  /* atomic_load on a const-qualified object is fine in C17; cast for C11 */
  cm_logger_t *lg = (cm_logger_t *)logger;
  if (delivered) *delivered = lg ? atomic_load_explicit(&lg->delivered, memory_order_relaxed) : 0;
  if (failed) *failed = lg ? atomic_load_explicit(&lg->failed, memory_order_relaxed) : 0;
}
