/*
 * fuzz_main.c - corpus replay driver for the libFuzzer targets.
 *
 * Linked with one fuzz_<target>.c (which defines LLVMFuzzerTestOneInput and
 * optionally LLVMFuzzerInitialize) when the real libFuzzer is not used, so
 * every corpus - seeds and saved crash reproducers alike - runs as an
 * ordinary test with any compiler and under any sanitizer.
 *
 * Usage: fuzz_replay_<target> PATH...   Each PATH is a file or a directory;
 * the files of a directory are run in name order (not recursively). Prints
 * the number of inputs run. Exit status 0 when every input returned (a
 * target signals a bug by crashing or aborting), 2 on an unreadable path,
 * 77 (skip) when no input was found.
 *
 * Exports: main (and weak LLVMFuzzerInitialize).
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

/* Targets without an initialiser leave this weak reference NULL. */
#pragma weak LLVMFuzzerInitialize

int cm_fuzz_replaying = 1;

static int run_file(const char *path, size_t *count) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "fuzz replay: cannot open %s\n", path);
    return 2;
  }
  size_t cap = 4096, len = 0;
  uint8_t *buf = malloc(cap);
  if (!buf) {
    fclose(f);
    return 2;
  }
  for (;;) {
    if (len == cap) {
      uint8_t *nb = realloc(buf, cap * 2);
      if (!nb) {
        free(buf);
        fclose(f);
        return 2;
      }
      buf = nb;
      cap *= 2;
    }
    size_t n = fread(buf + len, 1, cap - len, f);
    if (n == 0) break;
    len += n;
  }
  int err = ferror(f);
  fclose(f);
  if (err) {
    free(buf);
    fprintf(stderr, "fuzz replay: read error on %s\n", path);
    return 2;
  }
  /* Hand the target an exact-size copy so overreads trip the sanitizers. */
  uint8_t *exact = malloc(len ? len : 1);
  if (!exact) {
    free(buf);
    return 2;
  }
  memcpy(exact, buf, len);
  free(buf);
  if (getenv("CM_FUZZ_VERBOSE")) fprintf(stderr, "fuzz replay: %s (%zu bytes)\n", path, len);
  LLVMFuzzerTestOneInput(exact, len);
  free(exact);
  (*count)++;
  return 0;
}

static int cmp_names(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int run_dir(const char *dir, size_t *count) {
  DIR *d = opendir(dir);
  if (!d) {
    fprintf(stderr, "fuzz replay: cannot open directory %s\n", dir);
    return 2;
  }
  char **names = NULL;
  size_t n = 0, cap = 0;
  int rc = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    if (n == cap) {
      size_t nc = cap ? cap * 2 : 64;
      char **nn = realloc(names, nc * sizeof *nn);
      if (!nn) {
        rc = 2;
        break;
      }
      names = nn;
      cap = nc;
    }
    size_t need = strlen(dir) + strlen(e->d_name) + 2;
    names[n] = malloc(need);
    if (!names[n]) {
      rc = 2;
      break;
    }
    snprintf(names[n], need, "%s/%s", dir, e->d_name);
    n++;
  }
  closedir(d);
  if (names) qsort(names, n, sizeof *names, cmp_names);
  for (size_t i = 0; i < n; i++) {
    struct stat st;
    if (rc == 0 && stat(names[i], &st) == 0 && S_ISREG(st.st_mode)) rc = run_file(names[i], count);
    free(names[i]);
  }
  free(names);
  return rc;
}

int main(int argc, char **argv) {
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  size_t count = 0;
  for (int i = 1; i < argc; i++) {
    struct stat st;
    if (stat(argv[i], &st) != 0) {
      fprintf(stderr, "fuzz replay: no such path %s\n", argv[i]);
      return 2;
    }
    int rc = S_ISDIR(st.st_mode) ? run_dir(argv[i], &count) : run_file(argv[i], &count);
    if (rc) return rc;
  }
  printf("fuzz replay: %zu inputs ran cleanly\n", count);
  return count ? 0 : 77;
}
