/* layout.h - internal: the default preset (preset_default.c) and the
 * adaptive pool's page-size bounds (pool_adaptive.c). */
#ifndef CM_CORE_LAYOUT_H
#define CM_CORE_LAYOUT_H
#include "cubemem/memory.h"
int cm__preset_default(cm_device_props_t props, cm_pool_options_t *out, size_t cap,
                       size_t *out_count);
/* The adaptive pool's first page size (floor) and largest page size for
 * options page (0 = 2 MiB) and max (0 = device_max_page): the largest page
 * is max rounded down to the alignment (at least one alignment), the floor
 * is page capped by it and rounded up to the alignment. Pure. */
void cm__adaptive_bounds(uint64_t alignment, uint64_t device_max_page, uint64_t page, uint64_t max,
                         uint64_t *floor_out, uint64_t *max_out);
#endif
