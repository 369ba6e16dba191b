/*
 * cubemem/vulkan_binding.h - where a manager's binding lives on a Vulkan
 * device: the one call that joins the memory manager (cubemem/memory.h) and
 * the Vulkan storage (cubemem/vulkan.h). It belongs to the runtime layer,
 * above both, so that the storage's own header does not depend on the
 * manager.
 */
#ifndef CUBEMEM_VULKAN_BINDING_H
#define CUBEMEM_VULKAN_BINDING_H

#include "cubemem/common.h"
#include "cubemem/memory.h"
#include "cubemem/vulkan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The VkBuffer, VkDeviceMemory, offset and size (cm_vulkan_slice_t) of
 * binding `b` of manager `m`, whose storage is a Vulkan storage made by
 * cm_vulkan_storage_create or cm_vulkan_staging_storage_create (not wrapped
 * by a decorator): cm_manager_get_storage, then cm_vulkan_storage_resolve on
 * the manager's storage. Nothing is allocated; *out is valid while the
 * binding is. Thread: the manager's. Errors: CM_EINVAL (NULL argument, not
 * a Vulkan storage), and those of the two functions. */
CM_API CM_NODISCARD int cm_vulkan_resolve_binding(cm_manager_t *m, cm_binding_t b,
                                                  cm_vulkan_slice_t *out, cm_diag_t *diag);

#ifdef __cplusplus
}
#endif
#endif
