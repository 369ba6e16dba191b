/* cubemem/cubemem.h - umbrella header: include this to get the whole allocator API
 * (libcubemem). The tools built on it (traces, replay, fit, reports) have
 * their own library and umbrella header, cubemem/tools.h. */
#ifndef CUBEMEM_CUBEMEM_H
#define CUBEMEM_CUBEMEM_H
#include "cubemem/common.h"
#include "cubemem/storage.h"
#include "cubemem/log.h"
#include "cubemem/memory.h"
#include "cubemem/config.h"
#include "cubemem/toml.h"
#include "cubemem/device.h"
#include "cubemem/dropqueue.h"
#include "cubemem/cuda.h"
#include "cubemem/vulkan.h"
#include "cubemem/vulkan_binding.h"
#include "cubemem/ptr.h"
#include "cubemem/faulty.h"
#endif
