/*
 * cubemem/tools.h - umbrella header of the tools library (libcubemem-tools,
 * CMake target cubemem::cubemem_tools, pkg-config cubemem-tools): trace and
 * PyTorch snapshot reading, replay, fit, the driver-time model and the
 * PyTorch caching-allocator model. These are built on the allocator
 * (cubemem/cubemem.h) and are not part of libcubemem: link the tools library
 * to call them.
 */
#ifndef CUBEMEM_TOOLS_H
#define CUBEMEM_TOOLS_H
#include "cubemem/cubemem.h"
#include "cubemem/replay.h"
#include "cubemem/costs.h"
#include "cubemem/torchalloc.h"
#endif
