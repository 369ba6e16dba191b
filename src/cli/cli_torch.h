/* cli_torch.h - the PyTorch layouts of `replay` and `fit` (`--pools pytorch`,
 * `--pools pytorch-expandable`, `--torch-conf`), kept apart from the
 * commands so that they hook in with a few lines. Internal to the tool; the
 * functions print their messages on stderr prefixed with "cubemem CMD:",
 * return an exit code (0 or 2) unless said otherwise, and are not
 * thread-safe (they print). */
#ifndef CM_CLI_TORCH_H
#define CM_CLI_TORCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cubemem/torchalloc.h"

/* The names a --pools value may start with to mean PyTorch's allocator. */
#define CLI_TORCH_LAYOUTS "pytorch | pytorch-expandable[:CONF]"

/* Whether `text` names a PyTorch layout: `pytorch` or `pytorch-expandable`,
 * optionally followed by ':' and a PYTORCH_CUDA_ALLOC_CONF string. */
bool cli_torch_is_layout(const char *text);
/* Check --torch-conf `conf` (NULL: not given) once: 2 with the reason when
 * it does not parse; a warning on stderr when none of the n layouts is a
 * PyTorch one (it would have no effect). */
int cli_torch_check_conf(const char *cmd, const char *conf, const char *const *layouts, size_t n);
/* 2 with "did you mean 'pytorch'?" on stderr when `text` is not a layout
 * but its name is close to a PyTorch one (and to no cubemem preset or pool
 * kind); else 0 (cli_parse_layout reports other mistakes). */
int cli_torch_check_name(const char *cmd, const char *text);
/* The options of PyTorch layout `text`: PyTorch's defaults, then `conf`
 * (--torch-conf, may be NULL), then the layout's own ":CONF", then
 * expandable_segments:True for pytorch-expandable; device_memory as given
 * (it sizes expandable ranges). Returns 0, or 2 with the reason on stderr. */
int cli_torch_options(const char *cmd, const char *text, const char *conf, uint64_t device_memory,
                      cm_torch_options_t *out);
/* As cli_torch_options for a trace recorded with the PYTORCH_CUDA_ALLOC_CONF
 * `recorded` (a snapshot's allocator_settings; NULL or "" = none), which
 * comes first (--torch-conf and the layout's own options override it). A
 * recorded string the model cannot read is reported on stderr and left out. */
int cli_torch_options_for(const char *cmd, const char *text, const char *recorded,
                          const char *conf, uint64_t device_memory, cm_torch_options_t *out);
/* "PyTorch caching allocator (model), expandable_segments:True" into buf:
 * which allocator a figure assumes and its options. */
void cli_torch_describe(const cm_torch_options_t *o, char *buf, size_t cap);

#endif
