/*
 * preset_default.c - cubemem's default pool layout (CM_PRESET_DEFAULT).
 *
 * One arena pool (pool_arena.c) serves every size, zero included: with a
 * virtual-memory storage it maps granules only where live data is, so its
 * reserved bytes follow the live bytes; without VM it grows by segments. No cap, no size
 * limit, the arena's default trim period.
 * Exports: cm__preset_default (layout.h).
 */
#include "core/layout.h"

int cm__preset_default(cm_device_props_t props, cm_pool_options_t *out, size_t cap,
                       size_t *out_count) {
  (void)props;
  cm_pool_options_t o = {0};
  o.kind = CM_POOL_ARENA;
  if (cap >= 1) out[0] = o;
  *out_count = 1;
  return CM_OK;
}
