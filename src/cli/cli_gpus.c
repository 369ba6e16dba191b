/*
 * cli_gpus.c - the GPUs `cubemem fit` answers "fits on" with: a built-in
 * list of common cards and the memory each reports, or the user's own
 * (--gpus NAME=SIZE,... or a file of such entries).
 *
 * The built-in figures are the total memory the driver reports for the card
 * (cudaMemGetInfo's total, torch.cuda.get_device_properties(i).total_memory,
 * the "total capacity" of PyTorch's out-of-memory message), rounded down to
 * MiB, on current drivers with ECC as shipped. They are a few percent below
 * the marketing size (an "80 GB" H100 reports 79.11 GiB) and move by tens of
 * MiB with the driver version, ECC and MIG; docs/fit.md lists them with the
 * published reports each was checked against.
 *
 * Exports cli_gpus_builtin, cli_gpus_option, cli_gpus_fits (cli.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

#define MIB (1ull << 20)

void cli_gpus_builtin(cli_gpu_list_t *l) {
  static const struct {
    const char *name;
    uint64_t mib;
  } cards[] = {
      {"T4", 15102},         /* 16 GB GDDR6, reports 14.75 GiB */
      {"L4", 22558},         /* 24 GB GDDR6, reports 22.03 GiB */
      {"A10", 22515},        /* 24 GB GDDR6 (A10 / A10G), reports 21.99 GiB */
      {"RTX 4090", 24217},   /* 24 GB GDDR6X, reports 23.65 GiB */
      {"A100 40GB", 40536},  /* 40 GB HBM2, reports 39.59 GiB */
      {"A100 80GB", 81152},  /* 80 GB HBM2e, reports 79.25 GiB */
      {"H100 80GB", 81008},  /* 80 GB HBM3 (SXM), reports 79.11 GiB */
      {"H200", 143166},      /* 141 GB HBM3e, reports 139.81 GiB */
      {"B200", 182630},      /* 180 GB HBM3e, reports 178.35 GiB */
  };
  memset(l, 0, sizeof *l);
  for (size_t i = 0; i < sizeof cards / sizeof cards[0]; i++) {
    snprintf(l->gpu[i].name, sizeof l->gpu[i].name, "%s", cards[i].name);
    l->gpu[i].bytes = cards[i].mib * MIB;
  }
  l->count = sizeof cards / sizeof cards[0];
}

/* One "NAME=SIZE" entry (trimmed, non-empty) into l; 0 or 2 with a message. */
static int add_entry(const char *cmd, const char *src, char *e, cli_gpu_list_t *l) {
  char *eq = strchr(e, '=');
  char *name = e, *size = eq ? eq + 1 : NULL;
  if (eq) *eq = '\0';
  while (*name == ' ' || *name == '\t') name++;
  size_t n = strlen(name);
  while (n && (name[n - 1] == ' ' || name[n - 1] == '\t')) name[--n] = '\0';
  if (!size || !n) {
    fprintf(stderr, "cubemem %s: --gpus %s: '%s' is not NAME=SIZE (e.g. \"T4=15102MiB,L4=22558MiB\")\n",
            cmd, src, e);
    return 2;
  }
  if (n >= sizeof l->gpu[0].name) {
    fprintf(stderr, "cubemem %s: --gpus %s: name '%s' is longer than %zu characters\n", cmd, src,
            name, sizeof l->gpu[0].name - 1);
    return 2;
  }
  if (l->count == CLI_MAX_GPUS) {
    fprintf(stderr, "cubemem %s: --gpus %s: at most %d GPUs\n", cmd, src, CLI_MAX_GPUS);
    return 2;
  }
  while (*size == ' ' || *size == '\t') size++;
  char why[160] = "";
  uint64_t v = 0;
  if (cli_parse_size(size, &v, why, sizeof why) || v == 0) {
    fprintf(stderr, "cubemem %s: --gpus %s: bad size '%s' for %s: %s (%s)\n", cmd, src, size,
            name, v == 0 && !why[0] ? "must be more than zero bytes" : why, CLI_SIZE_EXAMPLES);
    return 2;
  }
  snprintf(l->gpu[l->count].name, sizeof l->gpu[0].name, "%s", name);
  l->gpu[l->count++].bytes = v;
  return 0;
}

int cli_gpus_option(const char *cmd, const char *val, cli_gpu_list_t *l) {
  char *text = NULL;
  struct stat st;
  const char *src = "list";
  if (stat(val, &st) == 0 && S_ISREG(st.st_mode)) { /* a file of entries */
    FILE *f = fopen(val, "rb");
    if (!f) {
      fprintf(stderr, "cubemem %s: --gpus %s: %s\n", cmd, val, strerror(errno));
      return 2;
    }
    if (st.st_size > (1 << 20)) {
      fclose(f);
      fprintf(stderr, "cubemem %s: --gpus %s: larger than 1 MiB\n", cmd, val);
      return 2;
    }
    text = calloc(1, (size_t)st.st_size + 1);
    size_t got = text ? fread(text, 1, (size_t)st.st_size, f) : 0;
    fclose(f);
    if (!text) {
      fprintf(stderr, "cubemem %s: out of memory\n", cmd);
      return 1;
    }
    text[got] = '\0';
    src = val;
  } else {
    text = strdup(val);
    if (!text) {
      fprintf(stderr, "cubemem %s: out of memory\n", cmd);
      return 1;
    }
  }
  memset(l, 0, sizeof *l);
  int rc = 0;
  char *p = text;
  while (!rc && *p) {
    size_t len = strcspn(p, ",\n");
    char *next = p[len] ? p + len + 1 : p + len;
    p[len] = '\0';
    char *hash = strchr(p, '#'); /* comments in files */
    if (hash) *hash = '\0';
    size_t n = strlen(p);
    while (n && (p[n - 1] == ' ' || p[n - 1] == '\t' || p[n - 1] == '\r')) p[--n] = '\0';
    char *q = p;
    while (*q == ' ' || *q == '\t') q++;
    if (*q) rc = add_entry(cmd, src, q, l);
    p = next;
  }
  free(text);
  if (!rc && !l->count) {
    fprintf(stderr, "cubemem %s: --gpus %s: no GPU given (NAME=SIZE, ...)\n", cmd,
            src == val ? val : "list");
    rc = 2;
  }
  return rc;
}

size_t cli_gpus_fits(const cli_gpu_list_t *l, uint64_t needs, size_t *order, bool *fits) {
  size_t n = 0;
  for (size_t i = 0; i < l->count; i++) order[i] = i;
  for (size_t i = 1; i < l->count; i++) { /* stable: by memory, then as listed */
    size_t v = order[i], j = i;
    while (j && l->gpu[order[j - 1]].bytes > l->gpu[v].bytes) {
      order[j] = order[j - 1];
      j--;
    }
    order[j] = v;
  }
  for (size_t i = 0; i < l->count; i++) {
    fits[i] = needs <= l->gpu[order[i]].bytes;
    n += fits[i];
  }
  return n;
}
