/* layout.h - internal: the default preset (preset_default.c). */
#ifndef CM_CORE_LAYOUT_H
#define CM_CORE_LAYOUT_H
#include "cubemem/memory.h"
int cm__preset_default(cm_device_props_t props, cm_pool_options_t *out, size_t cap,
                       size_t *out_count);
#endif
