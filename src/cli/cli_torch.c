/*
 * cli_torch.c - the PyTorch layouts of `replay` and `fit`: the layout names,
 * their options (--torch-conf and the layout's own ":CONF"), and the words
 * the reports use for them.
 * Exports the functions of cli_torch.h.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "cli_torch.h"

#define PLAIN "pytorch"
#define EXPANDABLE "pytorch-expandable"

/* Length of the layout's name (before ':'), 0 when it is not a PyTorch one. */
static size_t name_len(const char *text) {
  size_t n = strcspn(text, ":");
  if (n == strlen(PLAIN) && !strncmp(text, PLAIN, n)) return n;
  if (n == strlen(EXPANDABLE) && !strncmp(text, EXPANDABLE, n)) return n;
  return 0;
}

bool cli_torch_is_layout(const char *text) { return text && name_len(text) != 0; }

int cli_torch_check_name(const char *cmd, const char *text) {
  static const char *const cubemem_names[] = {"default", "subslices", "exclusive-pages", "sliced",
                                              "exclusive", "direct", "arena"};
  static const char *const torch_names[] = {PLAIN, EXPANDABLE};
  if (!text || strchr(text, ';') || cli_torch_is_layout(text)) return 0;
  char name[64];
  snprintf(name, sizeof name, "%.*s", (int)strcspn(text, ":"), text);
  for (size_t i = 0; i < sizeof cubemem_names / sizeof *cubemem_names; i++)
    if (!strcmp(name, cubemem_names[i])) return 0;
  if (cli_suggest(name, cubemem_names, sizeof cubemem_names / sizeof *cubemem_names)) return 0;
  const char *s = cli_suggest(name, torch_names, 2);
  if (!s) return 0;
  fprintf(stderr, "cubemem %s: --pools '%s': unknown layout '%s'; did you mean '%s' (PyTorch's "
          "caching allocator)?\n", cmd, text, name, s);
  return 2;
}

int cli_torch_check_conf(const char *cmd, const char *conf, const char *const *layouts, size_t n) {
  if (!conf) return 0;
  cm_torch_options_t o;
  cm_torch_options_init(&o);
  cm_diag_t d;
  cm_diag_clear(&d);
  if (cm_torch_options_parse(conf, &o, &d) != CM_OK) {
    fprintf(stderr, "cubemem %s: --torch-conf '%s': %s\n", cmd, conf, d.message);
    return 2;
  }
  for (size_t i = 0; i < n; i++)
    if (cli_torch_is_layout(layouts[i])) return 0;
  fprintf(stderr, "cubemem %s: warning: --torch-conf applies to the PyTorch layouts only "
          "(--pools pytorch or pytorch-expandable); none was given\n", cmd);
  return 0;
}

int cli_torch_options(const char *cmd, const char *text, const char *conf, uint64_t device_memory,
                      cm_torch_options_t *out) {
  return cli_torch_options_for(cmd, text, NULL, conf, device_memory, out);
}

int cli_torch_options_for(const char *cmd, const char *text, const char *recorded,
                          const char *conf, uint64_t device_memory, cm_torch_options_t *out) {
  cm_torch_options_init(out);
  cm_diag_t d;
  cm_diag_clear(&d);
  if (recorded && recorded[0] && cm_torch_options_parse(recorded, out, &d) != CM_OK) {
    fprintf(stderr, "cubemem %s: warning: the snapshot's PYTORCH_CUDA_ALLOC_CONF '%s' is not "
            "used (%s); the PyTorch layouts start from PyTorch's defaults\n", cmd, recorded,
            d.message);
    cm_torch_options_init(out);
  }
  if (conf && cm_torch_options_parse(conf, out, &d) != CM_OK) {
    fprintf(stderr, "cubemem %s: --torch-conf '%s': %s\n", cmd, conf, d.message);
    return 2;
  }
  size_t n = name_len(text);
  if (text[n] == ':' && cm_torch_options_parse(text + n + 1, out, &d) != CM_OK) {
    fprintf(stderr, "cubemem %s: --pools '%s': %s\n", cmd, text, d.message);
    return 2;
  }
  if (n == strlen(EXPANDABLE)) out->expandable_segments = true;
  out->device_memory = device_memory;
  return 0;
}

void cli_torch_describe(const cm_torch_options_t *o, char *buf, size_t cap) {
  char conf[256];
  cm_torch_options_format(o, conf, sizeof conf);
  snprintf(buf, cap, "PyTorch's CUDA caching allocator (model), PYTORCH_CUDA_ALLOC_CONF=%s",
           conf[0] ? conf : "(defaults)");
}
