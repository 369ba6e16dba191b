/*
 * discover.c - finding and reading the configuration file (spec §11.1).
 *
 * Algorithm. cm_config_load_file reads the whole file (type check, then a
 * non-blocking open + fstat + read loop; ENOENT/ENOTDIR mean "not there" =
 * CM_ENOTFOUND; anything but a regular file - FIFO, socket, device,
 * directory - is CM_EIO naming the path and its kind) and hands the bytes
 * to cm_config_load_buffer. cm_config_discover starts at an absolute,
 * canonical directory and walks up to "/": at each level it tries
 * cubecl.toml, CubeCL.toml (whole document), then burn.toml, Burn.toml
 * (their [cubecl] table). A miss (no file, or no [cubecl] table) continues
 * silently. The first file that binds wins. A file that exists but does not
 * bind stops the search (strict, the default) or is reported to the
 * caller's on_skip callback and skipped (lenient, the reference's rule).
 * Names that resolve to the same inode within one directory (case-
 * insensitive file systems) are tried once.
 *
 * Invariants. *cfg changes only on success. Nothing is printed.
 *
 * Exports: cm_config_load_file, cm_config_discover, cm_config_lint_file.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/util.h"
#include "cubemem/config.h"

/* Refuse absurd inputs instead of exhausting memory. */
#define CM_CONFIG_MAX_FILE (256u * 1024u * 1024u)

static int io_fail(cm_diag_t *diag, int code, const char *path, const char *what, int e) {
  if (!diag) return code;
  memset(diag, 0, sizeof *diag);
  diag->code = code;
  snprintf(diag->file, sizeof diag->file, "%s", path);
  snprintf(diag->message, sizeof diag->message, "%s: %s: %s", path, what, strerror(e));
  return code;
}

static const char *file_kind(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  return "not a regular file";
}

/* Read all of path. CM_ENOTFOUND when absent, CM_EIO when unreadable or not
 * a regular file (a FIFO, socket, device or directory: refused by type
 * before any read, so a FIFO nobody writes cannot block discovery; the open
 * is non-blocking and the type is taken from the opened file, so a file
 * swapped in between cannot either). On success *data (malloc'd,
 * NUL-terminated) and *len; st gets fstat. */
static int read_file(const char *path, char **data, size_t *len, struct stat *st,
                     cm_diag_t *diag) {
  struct stat pre;
  if (stat(path, &pre) == 0 && !S_ISREG(pre.st_mode)) {
    if (diag) {
      memset(diag, 0, sizeof *diag);
      diag->code = CM_EIO;
      snprintf(diag->file, sizeof diag->file, "%s", path);
      snprintf(diag->message, sizeof diag->message, "%s: not read: %s, not a regular file", path,
               file_kind(pre.st_mode));
    }
    return CM_EIO;
  }
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    int e = errno;
    if (e == ENOENT || e == ENOTDIR) {
      if (diag) {
        memset(diag, 0, sizeof *diag);
        diag->code = CM_ENOTFOUND;
        snprintf(diag->file, sizeof diag->file, "%s", path);
        snprintf(diag->message, sizeof diag->message, "%s: no such file", path);
      }
      return CM_ENOTFOUND;
    }
    return io_fail(diag, CM_EIO, path, "cannot open", e);
  }
  if (fstat(fd, st) != 0) {
    int e = errno;
    close(fd);
    return io_fail(diag, CM_EIO, path, "cannot stat", e);
  }
  if (!S_ISREG(st->st_mode)) {
    close(fd);
    if (diag) {
      memset(diag, 0, sizeof *diag);
      diag->code = CM_EIO;
      snprintf(diag->file, sizeof diag->file, "%s", path);
      snprintf(diag->message, sizeof diag->message, "%s: not read: %s, not a regular file", path,
               file_kind(st->st_mode));
    }
    return CM_EIO;
  }
  int fl = fcntl(fd, F_GETFL);
  if (fl >= 0) (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK); /* a regular file: ordinary reads */
  size_t cap = st->st_size > 0 && (uint64_t)st->st_size < CM_CONFIG_MAX_FILE
                   ? (size_t)st->st_size + 1
                   : 4096;
  size_t n = 0;
  char *buf = malloc(cap);
  if (!buf) {
    close(fd);
    return cm__diag_set(diag, CM_ENOMEM, "out of memory reading %s", path);
  }
  for (;;) {
    if (n + 1 >= cap) {
      if (cap >= CM_CONFIG_MAX_FILE) {
        free(buf);
        close(fd);
        return io_fail(diag, CM_EIO, path, "file too large", EFBIG);
      }
      char *nb = realloc(buf, cap * 2);
      if (!nb) {
        free(buf);
        close(fd);
        return cm__diag_set(diag, CM_ENOMEM, "out of memory reading %s", path);
      }
      buf = nb;
      cap *= 2;
    }
    ssize_t r = read(fd, buf + n, cap - n - 1);
    if (r < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      free(buf);
      close(fd);
      return io_fail(diag, CM_EIO, path, "cannot read", e);
    }
    if (r == 0) break;
    n += (size_t)r;
  }
  close(fd);
  buf[n] = '\0';
  *data = buf;
  *len = n;
  return CM_OK;
}

static int load_file_stat(cm_config_t *cfg, const char *path, const char *section,
                          struct stat *st, cm_diag_t *diag) {
  char *data = NULL;
  size_t len = 0;
  int rc = read_file(path, &data, &len, st, diag);
  if (rc != CM_OK) return rc;
  rc = cm_config_load_buffer(cfg, data, len, path, section, diag);
  free(data);
  return rc;
}

int cm_config_load_file(cm_config_t *cfg, const char *path, const char *section,
                        cm_diag_t *diag) {
  if (!cfg || !path) return cm__diag_set(diag, CM_EINVAL, "cm_config_load_file: NULL argument");
  struct stat st;
  return load_file_stat(cfg, path, section, &st, diag);
}

/* The candidates tried at each directory level, in order. */
static const struct {
  const char *name;
  const char *section;
} k_candidates[] = {
    {"cubecl.toml", NULL},
    {"CubeCL.toml", NULL},
    {"burn.toml", "cubecl"},
    {"Burn.toml", "cubecl"},
};
#define NCAND (sizeof k_candidates / sizeof k_candidates[0])

int cm_config_discover(cm_config_t *cfg, const char *start_dir,
                       const cm_config_discover_options_t *opts, cm_diag_t *diag) {
  if (!cfg) return cm__diag_set(diag, CM_EINVAL, "cm_config_discover: NULL argument");
  bool lenient = opts && opts->lenient;

  char *dir = NULL;
  if (start_dir) {
    dir = realpath(start_dir, NULL);
    if (!dir) return io_fail(diag, CM_EIO, start_dir, "cannot open the start directory", errno);
  } else {
    dir = getcwd(NULL, 0);
    if (!dir) {
      /* spec §11.1 step 1: an unreadable cwd means the defaults */
      cm_config_free(cfg);
      return CM_OK;
    }
  }

  size_t dlen = strlen(dir);
  char *path = malloc(dlen + 32);
  if (!path) {
    free(dir);
    return cm__diag_set(diag, CM_ENOMEM, "out of memory during discovery");
  }

  int rc = CM_OK;
  bool found = false;
  for (;;) {
    dev_t seen_dev[NCAND];
    ino_t seen_ino[NCAND];
    size_t nseen = 0;
    for (size_t i = 0; i < NCAND && !found; i++) {
      snprintf(path, dlen + 32, "%s%s%s", dir, (dlen == 1 && dir[0] == '/') ? "" : "/",
               k_candidates[i].name);
      struct stat st;
      if (stat(path, &st) == 0) {
        bool dup = false;
        for (size_t s = 0; s < nseen; s++)
          if (seen_dev[s] == st.st_dev && seen_ino[s] == st.st_ino) dup = true;
        if (dup) continue; /* same file under another spelling */
        seen_dev[nseen] = st.st_dev;
        seen_ino[nseen] = st.st_ino;
        nseen++;
      }
      cm_diag_t local;
      memset(&local, 0, sizeof local);
      int r = load_file_stat(cfg, path, k_candidates[i].section, &st, &local);
      if (r == CM_OK) {
        found = true;
      } else if (r == CM_ENOTFOUND) {
        continue; /* silent miss: no file, or no [cubecl] table */
      } else if (r == CM_ENOMEM || !lenient) {
        if (diag) *diag = local;
        rc = r;
        goto done;
      } else if (opts->on_skip) {
        opts->on_skip(opts->on_skip_arg, path, k_candidates[i].section, &local);
      }
    }
    if (found) break;
    if (dlen <= 1) break; /* "/" done */
    char *slash = strrchr(dir, '/');
    if (!slash) break;
    if (slash == dir)
      dir[1] = '\0';
    else
      *slash = '\0';
    dlen = strlen(dir);
  }
  if (!found) cm_config_free(cfg); /* nothing loaded: the defaults */
done:
  free(path);
  free(dir);
  return rc;
}

int cm_config_lint_file(const char *path, const char *section, cm_config_warn_fn warn, void *arg,
                        size_t *count) {
  if (!path || !warn) return CM_EINVAL;
  char *data = NULL;
  size_t len = 0;
  struct stat st;
  int rc = read_file(path, &data, &len, &st, NULL);
  if (rc != CM_OK) return rc;
  rc = cm_config_lint_buffer(data, len, path, section, warn, arg, count);
  free(data);
  return rc;
}
