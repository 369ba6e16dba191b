/*
 * test_config_special.c - configuration discovery and cm_config_load_file
 * meet files that are not regular files: a FIFO nobody writes (which used to
 * block discovery forever), a directory, a Unix socket, a character device
 * (/dev/zero, through a symlink) and an unreadable file (when not root: root
 * reads everything, so there the file must simply load).
 *
 * For each, under the name cubecl.toml in a subdirectory whose parent holds a
 * valid cubecl.toml:
 *   - strict discovery returns CM_EIO naming the path and its kind, at once;
 *   - lenient discovery reports it to on_skip and loads the parent's file;
 *   - cm_config_load_file and cm_config_lint_file return CM_EIO.
 * An alarm turns a hang into a failure (SIGALRM after 20 s).
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "cm_config_fixture.h"
#include "cm_test.h"
#include "cubemem/config.h"

#define VALID "[memory]\npersistent_memory = \"disabled\"\n"

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "test_config_special: blocked for 20 s (a FIFO was opened?)\n";
  ssize_t w = write(2, msg, sizeof msg - 1);
  (void)w;
  _exit(1);
}

typedef struct {
  int n;
  char path[PATH_MAX];
  char message[512];
  int code;
} skip_t;

static void skip_fn(void *arg, const char *path, const char *section, const cm_diag_t *err) {
  skip_t *s = arg;
  (void)section;
  if (!s->n) {
    snprintf(s->path, sizeof s->path, "%s", path);
    snprintf(s->message, sizeof s->message, "%s", err->message);
    s->code = err->code;
  }
  s->n++;
}

static void lint_fn(void *arg, const cm_diag_t *w) {
  (void)arg;
  (void)w;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* g_root/valid.toml-holding parent "p", the special file at p/s/cubecl.toml */
typedef int (*make_fn)(const char *path);

static int make_fifo(const char *path) { return mkfifo(path, 0644); }
static int make_dir(const char *path) { return mkdir(path, 0755); }
static int make_dev(const char *path) { return symlink("/dev/zero", path); }
static int make_socket(const char *path) {
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  struct sockaddr_un a;
  memset(&a, 0, sizeof a);
  a.sun_family = AF_UNIX;
  if (strlen(path) >= sizeof a.sun_path) {
    close(fd);
    errno = ENAMETOOLONG;
    return -1;
  }
  snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
  int rc = bind(fd, (struct sockaddr *)&a, sizeof a);
  close(fd); /* the socket file stays */
  return rc;
}
static int make_unreadable(const char *path) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  fputs(VALID, f);
  fclose(f);
  return chmod(path, 0);
}

static void one_kind(const char *what, make_fn make, const char *kind_text) {
  make_root();
  mk("p");
  mk("p/s");
  put_file(in_root("p"), "cubecl.toml", VALID);
  char special[PATH_MAX];
  snprintf(special, sizeof special, "%s", in_root("p/s/cubecl.toml"));
  if (make(special) != 0) {
    fprintf(stderr, "cannot make %s (%s): %s\n", what, special, strerror(errno));
    rm_rf(g_root);
    CM_SKIP("cannot create the special file here");
  }
  bool root_reads = make == make_unreadable && geteuid() == 0;
  double t0 = now_s();

  /* strict: an error that names the file and what it is */
  cm_config_t c;
  cm_config_init(&c);
  cm_diag_t d = {0};
  int rc = cm_config_discover(&c, in_root("p/s"), NULL, &d);
  if (root_reads) {
    EXPECT_OK(rc); /* root can read a mode-0 file: it loads */
    EXPECT_STR(c.path, special);
  } else {
    EXPECT_STATUS(rc, CM_EIO);
    EXPECT_CONTAINS(d.message, special);
    EXPECT_CONTAINS(d.message, kind_text);
    EXPECT_STR(d.file, special);
    EXPECT(c.path == NULL); /* unchanged */
  }
  cm_config_free(&c);

  /* lenient: skipped with a note, the parent's file loads */
  cm_config_init(&c);
  skip_t sk = {0};
  cm_config_discover_options_t o = {.lenient = true, .on_skip = skip_fn, .on_skip_arg = &sk};
  memset(&d, 0, sizeof d);
  EXPECT_OK(cm_config_discover(&c, in_root("p/s"), &o, &d));
  if (root_reads) {
    EXPECT_STR(c.path, special);
    EXPECT_EQ(sk.n, 0);
  } else {
    EXPECT_STR(c.path, in_root("p/cubecl.toml"));
    EXPECT_EQ(sk.n, 1);
    EXPECT_STR(sk.path, special);
    EXPECT_STATUS(sk.code, CM_EIO);
    EXPECT_CONTAINS(sk.message, kind_text);
  }
  cm_config_free(&c);

  /* loading or linting it by name */
  cm_config_init(&c);
  memset(&d, 0, sizeof d);
  rc = cm_config_load_file(&c, special, NULL, &d);
  if (root_reads) {
    EXPECT_OK(rc);
  } else {
    EXPECT_STATUS(rc, CM_EIO);
    EXPECT_CONTAINS(d.message, kind_text);
  }
  cm_config_free(&c);
  size_t count = 0;
  rc = cm_config_lint_file(special, NULL, lint_fn, NULL, &count);
  EXPECT(root_reads ? rc == CM_OK : rc == CM_EIO);

  double dt = now_s() - t0;
  printf("%s: %s in %.3f s\n", what, root_reads ? "read (running as root)" : "refused", dt);
  EXPECT_LT(dt * 1000, 5000);
  chmod(special, 0644);
  rm_rf(g_root);
}

static void fifo(void) { one_kind("FIFO", make_fifo, "a FIFO"); }
static void directory(void) { one_kind("directory", make_dir, "a directory"); }
static void socket_file(void) { one_kind("socket", make_socket, "a socket"); }
static void char_device(void) {
  if (access("/dev/zero", R_OK) != 0) CM_SKIP("no /dev/zero");
  one_kind("character device", make_dev, "a character device");
}
static void unreadable(void) { one_kind("unreadable file", make_unreadable, "Permission denied"); }

int main(void) {
  signal(SIGALRM, on_alarm);
  alarm(20);
  CM_RUN(fifo);
  CM_RUN(directory);
  CM_RUN(socket_file);
  CM_RUN(char_device);
  CM_RUN(unreadable);
  return cm_test_finish();
}
