/*
 * cm_config_fixture.h - helpers shared by the configuration tests
 * (tests/unit/test_config*.c): loading a text, temporary directory trees
 * (a fresh realpath'd root, directories and files in it, removal), reading a
 * file back, and the assertion that a configuration holds the defaults.
 * Header only; every function is static and may go unused in a given file.
 */
#ifndef CM_CONFIG_FIXTURE_H
#define CM_CONFIG_FIXTURE_H

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cm_test.h"
#include "cubemem/config.h"

#ifndef UNUSED
#define UNUSED __attribute__((unused))
#endif

/* The hint of every error about [memory] pools. */
#define POOLS_HINT "pool layouts are set through the API (cm_manager_install_pools)"

static UNUSED int load_text(cm_config_t *cfg, const char *text, cm_diag_t *d) {
  return cm_config_load_buffer(cfg, text, strlen(text), "cubecl.toml", NULL, d);
}

static UNUSED void rm_rf(const char *path) {
  char cmd[PATH_MAX + 32];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
  if (system(cmd) != 0) fprintf(stderr, "cleanup of %s failed\n", path);
}

static UNUSED void put_file(const char *dir, const char *name, const char *text) {
  char p[PATH_MAX];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  FILE *f = fopen(p, "wb");
  if (!f) CM__FAIL_AND(1, "cannot create %s: %s", p, strerror(errno));
  fputs(text, f);
  fclose(f);
}

static UNUSED void put_bytes(const char *path, const char *data, size_t len) {
  FILE *f = fopen(path, "wb");
  if (!f) CM__FAIL_AND(1, "cannot create %s", path);
  fwrite(data, 1, len, f);
  fclose(f);
}

static UNUSED char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = calloc(1, 1 << 16);
  size_t n = buf ? fread(buf, 1, (1 << 16) - 1, f) : 0;
  if (buf) buf[n] = '\0';
  fclose(f);
  return buf;
}

/* A fresh temporary tree root (realpath'd so comparisons are exact). */
static UNUSED char g_root[512];
static UNUSED void make_root(void) {
  char tmpl[] = "/tmp/cm_test_cfg_XXXXXX";
  if (!mkdtemp(tmpl)) CM__FAIL_AND(1, "mkdtemp: %s", strerror(errno));
  char *real = realpath(tmpl, NULL);
  if (!real) CM__FAIL_AND(1, "realpath: %s", strerror(errno));
  snprintf(g_root, sizeof g_root, "%s", real);
  free(real);
}

static UNUSED void mk(const char *rel) {
  char p[PATH_MAX];
  snprintf(p, sizeof p, "%s/%s", g_root, rel);
  if (mkdir(p, 0755) != 0) CM__FAIL_AND(1, "mkdir %s: %s", p, strerror(errno));
}

static UNUSED const char *in_root(const char *rel) {
  static char p[4][PATH_MAX];
  static int k;
  k = (k + 1) % 4;
  snprintf(p[k], sizeof p[k], "%s/%s", g_root, rel);
  return p[k];
}

/* True when no directory above g_root holds a config candidate, so that
 * "nothing found: defaults" can be asserted. */
static UNUSED bool ancestors_clean(void) {
  static const char *names[] = {"cubecl.toml", "CubeCL.toml", "burn.toml", "Burn.toml"};
  char dir[PATH_MAX];
  snprintf(dir, sizeof dir, "%s", g_root);
  for (;;) {
    char *slash = strrchr(dir, '/');
    if (!slash) break;
    if (slash == dir) dir[1] = '\0';
    else *slash = '\0';
    for (int i = 0; i < 4; i++) {
      char p[PATH_MAX + 16];
      snprintf(p, sizeof p, "%s%s%s", dir, strcmp(dir, "/") ? "/" : "", names[i]);
      if (access(p, F_OK) == 0) return false;
    }
    if (!strcmp(dir, "/")) break;
  }
  return true;
}

static UNUSED void expect_defaults(const cm_config_t *c) {
  EXPECT_EQ(c->persistent_memory, CM_PERSISTENT_ENABLED);
  EXPECT_EQ(c->logger.level, CM_LOG_DISABLED);
  EXPECT(c->logger.file == NULL);
  EXPECT(c->logger.append);
  EXPECT(!c->logger.to_stdout);
  EXPECT(!c->logger.to_stderr);
  EXPECT_EQ(c->logger.log, CM_HOST_LOG_NONE);
  EXPECT_EQ(c->cuda_allocator, CM_CUDA_SYNC);
  for (int f = 0; f < CM_CFG_FIELD_COUNT; f++) EXPECT_EQ(c->source[f].kind, CM_CFG_SRC_DEFAULT);
}

#endif
