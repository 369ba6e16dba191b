/*
 * test_torch_log.cpp - the CUBEMEM_LOG recorder of libcubemem_torch.so under
 * concurrency and with bad sinks, on the fake driver. The log state is
 * process-wide and set at the first allocation, so each case is its own
 * process: `test_torch_log CASE`.
 *
 *   consistent  4 threads x 50,000 malloc/free pairs of one size (so
 *               addresses are reused at once by other threads): the log must
 *               be a consistent trace - no address allocated twice without a
 *               free between, no free of an address that is not live - with
 *               every event in it, and `cubemem replay` must read it.
 *   slow        the log is a FIFO whose reader opens it 300 ms late, while 4
 *               threads allocate: no event may be lost while the open blocks.
 *   full        the log is /dev/full: cubemem_torch_last_error() names the
 *               log and the reason once a write fails; allocations go on.
 *   zero        malloc(0) returns NULL and clears an earlier error, so
 *               last_error does not describe another call.
 * Written in the C subset of C++ and built with the C++ compiler, as
 * test_torch_oom is: under TSan the plugin (partly C++) needs the C++
 * compiler's sanitizer runtime, which dlopen cannot add to a program built
 * by another compiler.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int g_failures;
#define CHECK(cond)                                                    \
  do {                                                                 \
    if (!(cond)) {                                                     \
      fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);  \
      g_failures++;                                                    \
    }                                                                  \
  } while (0)

typedef void *(*malloc_fn)(ssize_t, int, void *);
typedef void (*free_fn)(void *, ssize_t, int, void *);
static malloc_fn p_malloc;
static free_fn p_free;
static void (*p_empty)(void);
static const char *(*p_last)(void);

static int load(void) {
  setenv("CM_CUDA_LIBRARY", CMT_FAKECUDA, 1);
  setenv("FAKECUDA_DEVICES", "1", 1);
  void *lib = dlopen(CMT_PLUGIN, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "cannot load %s: %s\n", CMT_PLUGIN, dlerror());
    return -1;
  }
  p_malloc = (malloc_fn)dlsym(lib, "cubemem_torch_try_malloc");
  p_free = (free_fn)dlsym(lib, "cubemem_torch_try_free");
  p_empty = (void (*)(void))dlsym(lib, "cubemem_torch_empty_cache");
  p_last = (const char *(*)(void))dlsym(lib, "cubemem_torch_last_error");
  return p_malloc && p_free && p_empty && p_last ? 0 : -1;
}

static char *read_all(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 1 << 16, n = 0;
  char *b = (char *)malloc(cap);
  for (size_t r; b && (r = fread(b + n, 1, cap - n - 1, f)) > 0;) {
    n += r;
    if (cap - n < 2) {
      char *nb = (char *)realloc(b, cap * 2);
      if (!nb) break;
      b = nb;
      cap *= 2;
    }
  }
  fclose(f);
  if (b) b[n] = '\0';
  *len = n;
  return b;
}

/* Check that `text` is a consistent trace; returns the number of rows and
 * counts the inconsistencies. Live addresses in a small open-addressing set. */
typedef struct check {
  size_t rows, allocs, frees, fails, bad;
} check_t;

static check_t check_log(char *text) {
  check_t c;
  memset(&c, 0, sizeof c);
  size_t cap = 1 << 16;
  uint64_t *set = (uint64_t *)calloc(cap, sizeof *set); /* 0 = empty; tombstone = UINT64_MAX */
  char *save = NULL;
  char *line = strtok_r(text, "\n", &save);
  if (!line || strcmp(line, "Thread,Time,Action,Pointer,Size,Stream") != 0) c.bad++;
  while ((line = strtok_r(NULL, "\n", &save))) {
    c.rows++;
    char action[32];
    unsigned long long ptr = 0, size = 0;
    if (sscanf(line, "%*d,%*[^,],%31[^,],%llx,%llu", action, &ptr, &size) != 3) {
      c.bad++;
      continue;
    }
    if (!strcmp(action, "allocate failure")) {
      c.fails++;
      continue;
    }
    bool alloc = !strcmp(action, "allocate");
    if (alloc) c.allocs++;
    else c.frees++;
    size_t i = (size_t)((ptr * 0x9e3779b97f4a7c15ull) >> 40) & (cap - 1), tomb = SIZE_MAX;
    bool found = false;
    for (;; i = (i + 1) & (cap - 1)) {
      if (set[i] == ptr) {
        found = true;
        break;
      }
      if (set[i] == UINT64_MAX && tomb == SIZE_MAX) tomb = i;
      if (!set[i]) break;
    }
    if (alloc) {
      if (found) c.bad++; /* allocated twice without a free between */
      else set[tomb != SIZE_MAX ? tomb : i] = ptr;
    } else {
      if (!found) c.bad++; /* free of an address that is not live */
      else set[i] = UINT64_MAX;
    }
  }
  free(set);
  return c;
}

/* ---- consistent ---------------------------------------------------------- */

enum { THREADS = 4 };
static int g_pairs = 50000;
static pthread_barrier_t g_start;

static void *pairs_thread(void *arg) {
  (void)arg;
  pthread_barrier_wait(&g_start);
  for (int i = 0; i < g_pairs; i++) {
    void *p = p_malloc(4096, 0, NULL);
    if (!p) {
      fprintf(stderr, "allocation failed: %s\n", p_last());
      g_failures++;
      break;
    }
    p_free(p, 4096, 0, NULL);
  }
  return NULL;
}

static void run_threads(void) {
  pthread_t t[THREADS];
  pthread_barrier_init(&g_start, NULL, THREADS);
  for (int i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, pairs_thread, NULL);
  for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  pthread_barrier_destroy(&g_start);
}

static int case_consistent(const char *dir) {
  char log[512];
  snprintf(log, sizeof log, "%s/cubemem-log-consistent-%d.csv", dir, (int)getpid());
  setenv("CUBEMEM_LOG", log, 1);
  if (load()) return 1;
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  run_threads();
  clock_gettime(CLOCK_MONOTONIC, &b);
  p_empty(); /* flushes the log */
  size_t len = 0;
  char *text = read_all(log, &len);
  CHECK(text != NULL);
  if (!text) return 1;
  check_t c = check_log(text);
  printf("consistent: %d threads x %d pairs in %.2f s, %zu rows (%zu allocations, %zu frees), "
         "%zu inconsistencies\n",
         THREADS, g_pairs, (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9,
         c.rows, c.allocs, c.frees, c.bad);
  CHECK(c.bad == 0);
  CHECK(c.allocs == (size_t)THREADS * (size_t)g_pairs && c.frees == c.allocs && c.fails == 0);
  free(text);
  char cmd[1100];
  snprintf(cmd, sizeof cmd, "%s replay --no-progress %s > /dev/null", CMT_CLI, log);
  CHECK(system(cmd) == 0);
  unlink(log);
  return 0;
}

/* ---- slow ---------------------------------------------------------------- */

static int case_slow(const char *dir) {
  char fifo[512];
  snprintf(fifo, sizeof fifo, "%s/cubemem-log-fifo-%d", dir, (int)getpid());
  unlink(fifo);
  if (mkfifo(fifo, 0600) != 0) {
    fprintf(stderr, "skip: mkfifo %s: %s\n", fifo, strerror(errno));
    return 77;
  }
  g_pairs = 5;
  pid_t child = fork();
  if (child == 0) { /* the recording process: exits, which closes the log */
    setenv("CUBEMEM_LOG", fifo, 1);
    if (load()) _exit(1);
    run_threads();
    exit(g_failures ? 1 : 0); /* exit, not _exit: atexit closes the log */
  }
  usleep(300 * 1000); /* the reader comes late: the child's open blocks until then */
  /* non-blocking, so that a child that dies without opening cannot hang
   * the test: read until the child has exited and nothing is left */
  int fd = open(fifo, O_RDONLY | O_NONBLOCK);
  CHECK(fd >= 0);
  size_t cap = 1 << 16, n = 0;
  char *text = (char *)malloc(cap);
  int status = 0;
  bool exited = false;
  for (int idle = 0; fd >= 0 && n + 1 < cap && idle < 3000;) {
    ssize_t r = read(fd, text + n, cap - n - 1);
    if (r > 0) {
      n += (size_t)r;
      idle = 0;
      continue;
    }
    if (r < 0 && errno != EAGAIN && errno != EINTR) break;
    if (exited) break; /* drained after the exit */
    exited = waitpid(child, &status, WNOHANG) == child;
    if (!exited) usleep(10 * 1000), idle++;
  }
  text[n] = '\0';
  if (fd >= 0) close(fd);
  if (!exited) waitpid(child, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  unlink(fifo);
  check_t c = check_log(text);
  printf("slow sink: %zu of %d events logged, %zu inconsistencies\n", c.rows, THREADS * g_pairs * 2,
         c.bad);
  CHECK(c.rows == (size_t)THREADS * (size_t)g_pairs * 2);
  CHECK(c.bad == 0);
  free(text);
  return 0;
}

/* ---- full ---------------------------------------------------------------- */

static int case_full(void) {
  if (access("/dev/full", W_OK) != 0) {
    fprintf(stderr, "skip: no writable /dev/full\n");
    return 77;
  }
  setenv("CUBEMEM_LOG", "/dev/full", 1);
  if (load()) return 1;
  int ok = 0;
  for (int i = 0; i < 20000; i++) {
    void *p = p_malloc(4096, 0, NULL);
    if (p) ok++;
    p_free(p, 4096, 0, NULL);
  }
  p_empty(); /* flushes: whatever is buffered fails too */
  const char *e = p_last();
  printf("full sink: %d allocations, last error: %s\n", ok, e);
  CHECK(ok == 20000); /* the allocator is not affected */
  CHECK(strstr(e, "CUBEMEM_LOG=/dev/full") != NULL);
  CHECK(strstr(e, strerror(ENOSPC)) != NULL);
  CHECK(strstr(e, "logging stopped") != NULL);
  return 0;
}

/* ---- zero ---------------------------------------------------------------- */

static int case_zero(void) {
  unsetenv("CUBEMEM_LOG");
  if (load()) return 1;
  p_free((void *)0x1234, 0, 0, NULL); /* unknown pointer: an error */
  CHECK(p_last()[0] != '\0');
  CHECK(p_malloc(0, 0, NULL) == NULL);
  CHECK(p_last()[0] == '\0');
  void *p = p_malloc(1 << 20, 0, NULL);
  CHECK(p != NULL);
  p_free(p, 0, 0, NULL);
  p_free((void *)0x1234, 0, 0, NULL);
  CHECK(p_malloc(-5, 0, NULL) == NULL);
  CHECK(p_last()[0] == '\0');
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: test_torch_log consistent|slow|full|zero\n");
    return 2;
  }
  const char *dir = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  int rc;
  if (!strcmp(argv[1], "consistent")) rc = case_consistent(dir);
  else if (!strcmp(argv[1], "slow")) rc = case_slow(dir);
  else if (!strcmp(argv[1], "full")) rc = case_full();
  else if (!strcmp(argv[1], "zero")) rc = case_zero();
  else {
    fprintf(stderr, "unknown case %s\n", argv[1]);
    return 2;
  }
  if (rc) return rc;
  if (g_failures) {
    fprintf(stderr, "%d check(s) failed\n", g_failures);
    return 1;
  }
  printf("test_torch_log %s: ok\n", argv[1]);
  return 0;
}
