/*
 * vulkan_internal.h - what the Vulkan storage's files share (not installed;
 * nothing here is exported from the library):
 *   vulkan.c          loader and entry points, validation messages, device
 *                     open / wrap / close and its properties;
 *   vulkan_storage.c  the device and staging storages: blocks (buffer +
 *                     memory), limits, the dealloc queue, fences as events.
 * The Vulkan ABI itself is declared in vk_abi.h.
 */
#ifndef CM_STORAGE_VULKAN_INTERNAL_H
#define CM_STORAGE_VULKAN_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "cubemem/vulkan.h"
#include "storage/vulkan/vk_abi.h"

/* ---- entry points ---------------------------------------------------------------- */

typedef struct vk_api {
  cmvk_pfn_get_instance_proc_addr GetInstanceProcAddr;
  /* global */
  cmvk_pfn_enumerate_instance_version EnumerateInstanceVersion;
  cmvk_pfn_enumerate_instance_extension_properties EnumerateInstanceExtensionProperties;
  cmvk_pfn_enumerate_instance_layer_properties EnumerateInstanceLayerProperties;
  cmvk_pfn_create_instance CreateInstance;
  /* instance */
  cmvk_pfn_destroy_instance DestroyInstance;
  cmvk_pfn_enumerate_physical_devices EnumeratePhysicalDevices;
  cmvk_pfn_get_physical_device_properties2 GetPhysicalDeviceProperties2;
  cmvk_pfn_get_physical_device_features2 GetPhysicalDeviceFeatures2;
  cmvk_pfn_get_physical_device_memory_properties2 GetPhysicalDeviceMemoryProperties2;
  cmvk_pfn_get_physical_device_queue_family_properties GetPhysicalDeviceQueueFamilyProperties;
  cmvk_pfn_enumerate_device_extension_properties EnumerateDeviceExtensionProperties;
  cmvk_pfn_create_device CreateDevice;
  cmvk_pfn_get_device_proc_addr GetDeviceProcAddr;
  cmvk_pfn_create_messenger CreateDebugUtilsMessengerEXT;
  cmvk_pfn_destroy_messenger DestroyDebugUtilsMessengerEXT;
  /* device */
  cmvk_pfn_destroy_device DestroyDevice;
  cmvk_pfn_get_device_queue GetDeviceQueue;
  cmvk_pfn_device_wait_idle DeviceWaitIdle;
  cmvk_pfn_allocate_memory AllocateMemory;
  cmvk_pfn_free_memory FreeMemory;
  cmvk_pfn_map_memory MapMemory;
  cmvk_pfn_unmap_memory UnmapMemory;
  cmvk_pfn_create_buffer CreateBuffer;
  cmvk_pfn_destroy_buffer DestroyBuffer;
  cmvk_pfn_get_buffer_memory_requirements GetBufferMemoryRequirements;
  cmvk_pfn_bind_buffer_memory BindBufferMemory;
  cmvk_pfn_get_buffer_device_address GetBufferDeviceAddress; /* NULL without BDA */
  cmvk_pfn_create_fence CreateFence;
  cmvk_pfn_destroy_fence DestroyFence;
  cmvk_pfn_get_fence_status GetFenceStatus;
  cmvk_pfn_wait_for_fences WaitForFences;
  cmvk_pfn_queue_submit QueueSubmit;
  cmvk_pfn_queue_wait_idle QueueWaitIdle;
  /* copies (relocation; optional: without them the storage cannot copy) */
  cmvk_pfn_create_command_pool CreateCommandPool;
  cmvk_pfn_destroy_command_pool DestroyCommandPool;
  cmvk_pfn_allocate_command_buffers AllocateCommandBuffers;
  cmvk_pfn_begin_command_buffer BeginCommandBuffer;
  cmvk_pfn_end_command_buffer EndCommandBuffer;
  cmvk_pfn_reset_command_buffer ResetCommandBuffer;
  cmvk_pfn_cmd_copy_buffer CmdCopyBuffer;
} vk_api;

/* ---- device ---------------------------------------------------------------------------- */

struct cm_vulkan_device {
  _Atomic long refs; /* caller's reference + one per storage */
  void *lib;         /* dlopen handle (kept loaded), or NULL */
  vk_api api;
  bool owned; /* instance/device/messenger created here */
  cmvk_instance instance;
  cmvk_physical_device pd;
  cmvk_device device;
  cmvk_queue queue; /* may be NULL for a wrapped device */
  cmvk_messenger messenger;
  pthread_mutex_t queue_lock;
  pthread_mutex_t msg_lock;
  char last_message[512];
  bool print_messages;
  _Atomic uint64_t messages;
  cm_vulkan_info_t info;
  char name[CMVK_MAX_PHYSICAL_DEVICE_NAME_SIZE];
  cmvk_buffer_create_info dev_buffer_proto; /* usage etc. of device buffers */
  cmvk_flags dev_usage, staging_usage;
  _Atomic uint64_t live_allocs;                      /* over every storage */
  _Atomic uint64_t heap_used[CMVK_MAX_MEMORY_HEAPS]; /* bytes cubemem holds per heap */
};

/* Set diag to "<what> failed: <VkResult name> (VkResult n)" with `code`,
 * keep the result in diag->native; returns code. */
int cm__vk_error(cm_diag_t *diag, int code, cmvk_result r, const char *what);
/* Take one more reference on the device (one per storage). */
void cm__vk_device_ref(cm_vulkan_device_t *d);
/* Drop one reference; the last destroys what an opened device created and
 * frees d. */
void cm__vk_device_unref(cm_vulkan_device_t *d);
/* Budget left in `heap` (UINT64_MAX without VK_EXT_memory_budget). */
uint64_t cm__vk_budget_left(cm_vulkan_device_t *d, uint32_t heap);

#endif
