/*
 * config_logger.c - cm_config_make_logger: the logger a configuration's
 * [logger] table describes. It joins two layers below it, config (the
 * settings) and obs (the logger), which do not call each other.
 *
 * Exports: cm_config_make_logger.
 */
#include "base/util.h"
#include "cubemem/config.h"
#include "cubemem/log.h"

int cm_config_make_logger(const cm_config_t *cfg, cm_log_fn callback, void *callback_arg,
                          cm_logger_t **out, cm_diag_t *diag) {
  if (!cfg || !out) return cm__diag_set(diag, CM_EINVAL, "cm_config_make_logger: NULL argument");
  cm_logger_config_t lc;
  cm_logger_config_init(&lc);
  lc.level = cfg->logger.level;
  lc.file = cfg->logger.file;
  lc.append = cfg->logger.append;
  lc.to_stdout = cfg->logger.to_stdout;
  lc.to_stderr = cfg->logger.to_stderr;
  lc.callback = callback;
  lc.callback_arg = callback_arg;
  return cm_logger_create(&lc, out, diag);
}
