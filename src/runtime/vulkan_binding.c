/*
 * vulkan_binding.c - cm_vulkan_resolve_binding (cubemem/vulkan_binding.h):
 * a manager's binding resolved to its Vulkan buffer. It asks the manager for
 * the storage range of the binding and the Vulkan storage for the buffer
 * behind that range; it lives above both layers, so the storage never calls
 * the manager.
 *
 * Exports: cm_vulkan_resolve_binding.
 */
#include "cubemem/vulkan_binding.h"

#include "base/util.h"

int cm_vulkan_resolve_binding(cm_manager_t *m, cm_binding_t bind, cm_vulkan_slice_t *out,
                              cm_diag_t *diag) {
  if (!m || !out) return cm__diag_set(diag, CM_EINVAL, "cm_vulkan_resolve_binding: NULL argument");
  cm_storage_handle_t h;
  int rc = cm_manager_get_storage(m, bind, &h, diag);
  if (rc != CM_OK) return rc;
  return cm_vulkan_storage_resolve(cm_manager_storage(m), h.id, h.offset, h.size, out, diag);
}
