/*
 * test_vulkan_abi.c - src/storage/vk_abi.h (the hand-written Vulkan ABI) must
 * agree with the registry header vulkan_core.h: every constant's value, every
 * structure's size and every member's offset that cubemem relies on. The
 * Vulkan headers are not a build dependency: without them (Debian package
 * libvulkan-dev) the test skips.
 */
#include "cm_test.h"
#include "storage/vulkan/vk_abi.h"

#if defined(__has_include)
#if __has_include(<vulkan/vulkan_core.h>)
#include <vulkan/vulkan_core.h>
#define HAVE_VK_HEADER 1
#endif
#endif

#ifdef HAVE_VK_HEADER
#define SAME_SIZE(mine, theirs) EXPECT_EQ(sizeof(mine), sizeof(theirs))
#define SAME_OFF(mine, m1, theirs, m2) EXPECT_EQ(offsetof(mine, m1), offsetof(theirs, m2))
#define SAME_VAL(mine, theirs) EXPECT_EQ((int64_t)(mine), (int64_t)(theirs))

static void constants(void) {
  SAME_VAL(CMVK_SUCCESS, VK_SUCCESS);
  SAME_VAL(CMVK_NOT_READY, VK_NOT_READY);
  SAME_VAL(CMVK_TIMEOUT, VK_TIMEOUT);
  SAME_VAL(CMVK_INCOMPLETE, VK_INCOMPLETE);
  SAME_VAL(CMVK_ERROR_OUT_OF_HOST_MEMORY, VK_ERROR_OUT_OF_HOST_MEMORY);
  SAME_VAL(CMVK_ERROR_OUT_OF_DEVICE_MEMORY, VK_ERROR_OUT_OF_DEVICE_MEMORY);
  SAME_VAL(CMVK_ERROR_INITIALIZATION_FAILED, VK_ERROR_INITIALIZATION_FAILED);
  SAME_VAL(CMVK_ERROR_DEVICE_LOST, VK_ERROR_DEVICE_LOST);
  SAME_VAL(CMVK_ERROR_MEMORY_MAP_FAILED, VK_ERROR_MEMORY_MAP_FAILED);
  SAME_VAL(CMVK_ERROR_LAYER_NOT_PRESENT, VK_ERROR_LAYER_NOT_PRESENT);
  SAME_VAL(CMVK_ERROR_EXTENSION_NOT_PRESENT, VK_ERROR_EXTENSION_NOT_PRESENT);
  SAME_VAL(CMVK_ERROR_FEATURE_NOT_PRESENT, VK_ERROR_FEATURE_NOT_PRESENT);
  SAME_VAL(CMVK_ERROR_INCOMPATIBLE_DRIVER, VK_ERROR_INCOMPATIBLE_DRIVER);
  SAME_VAL(CMVK_ERROR_TOO_MANY_OBJECTS, VK_ERROR_TOO_MANY_OBJECTS);
  SAME_VAL(CMVK_ERROR_FORMAT_NOT_SUPPORTED, VK_ERROR_FORMAT_NOT_SUPPORTED);
  SAME_VAL(CMVK_ERROR_FRAGMENTED_POOL, VK_ERROR_FRAGMENTED_POOL);
  SAME_VAL(CMVK_ERROR_UNKNOWN, VK_ERROR_UNKNOWN);
  SAME_VAL(CMVK_ERROR_OUT_OF_POOL_MEMORY, VK_ERROR_OUT_OF_POOL_MEMORY);
  SAME_VAL(CMVK_ERROR_INVALID_EXTERNAL_HANDLE, VK_ERROR_INVALID_EXTERNAL_HANDLE);
  SAME_VAL(CMVK_ERROR_FRAGMENTATION, VK_ERROR_FRAGMENTATION);
  SAME_VAL(CMVK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS, VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS);
  SAME_VAL(CMVK_ERROR_VALIDATION_FAILED_EXT, VK_ERROR_VALIDATION_FAILED_EXT);
  SAME_VAL(CMVK_STYPE_APPLICATION_INFO, VK_STRUCTURE_TYPE_APPLICATION_INFO);
  SAME_VAL(CMVK_STYPE_INSTANCE_CREATE_INFO, VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO);
  SAME_VAL(CMVK_STYPE_DEVICE_QUEUE_CREATE_INFO, VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO);
  SAME_VAL(CMVK_STYPE_DEVICE_CREATE_INFO, VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO);
  SAME_VAL(CMVK_STYPE_SUBMIT_INFO, VK_STRUCTURE_TYPE_SUBMIT_INFO);
  SAME_VAL(CMVK_STYPE_MEMORY_ALLOCATE_INFO, VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO);
  SAME_VAL(CMVK_STYPE_FENCE_CREATE_INFO, VK_STRUCTURE_TYPE_FENCE_CREATE_INFO);
  SAME_VAL(CMVK_STYPE_BUFFER_CREATE_INFO, VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO);
  SAME_VAL(CMVK_STYPE_COMMAND_POOL_CREATE_INFO, VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO);
  SAME_VAL(CMVK_STYPE_COMMAND_BUFFER_ALLOCATE_INFO, VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO);
  SAME_VAL(CMVK_STYPE_COMMAND_BUFFER_BEGIN_INFO, VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO);
  SAME_VAL(CMVK_STYPE_MEMORY_BARRIER, VK_STRUCTURE_TYPE_MEMORY_BARRIER);
  SAME_VAL(CMVK_STYPE_PHYSICAL_DEVICE_FEATURES_2, VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2);
  SAME_VAL(CMVK_STYPE_PHYSICAL_DEVICE_PROPERTIES_2, VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2);
  SAME_VAL(CMVK_STYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2,
           VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2);
  SAME_VAL(CMVK_STYPE_MEMORY_ALLOCATE_FLAGS_INFO, VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO);
  SAME_VAL(CMVK_STYPE_DEBUG_UTILS_MESSENGER_CALLBACK_DATA_EXT,
           VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CALLBACK_DATA_EXT);
  SAME_VAL(CMVK_STYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
           VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT);
  SAME_VAL(CMVK_STYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES,
           VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES);
  SAME_VAL(CMVK_STYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT,
           VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT);
  SAME_VAL(CMVK_STYPE_BUFFER_DEVICE_ADDRESS_INFO, VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO);
  SAME_VAL(CMVK_STYPE_PHYSICAL_DEVICE_BUFFER_DEVICE_ADDRESS_FEATURES,
           VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_BUFFER_DEVICE_ADDRESS_FEATURES);
  SAME_VAL(CMVK_API_VERSION_1_1, VK_API_VERSION_1_1);
  SAME_VAL(CMVK_API_VERSION_1_2, VK_API_VERSION_1_2);
  SAME_VAL(CMVK_MAX_MEMORY_TYPES, VK_MAX_MEMORY_TYPES);
  SAME_VAL(CMVK_MAX_MEMORY_HEAPS, VK_MAX_MEMORY_HEAPS);
  SAME_VAL(CMVK_MAX_EXTENSION_NAME_SIZE, VK_MAX_EXTENSION_NAME_SIZE);
  SAME_VAL(CMVK_MAX_DESCRIPTION_SIZE, VK_MAX_DESCRIPTION_SIZE);
  SAME_VAL(CMVK_MAX_PHYSICAL_DEVICE_NAME_SIZE, VK_MAX_PHYSICAL_DEVICE_NAME_SIZE);
  SAME_VAL(CMVK_UUID_SIZE, VK_UUID_SIZE);
  SAME_VAL(CMVK_MEMORY_PROPERTY_DEVICE_LOCAL, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
  SAME_VAL(CMVK_MEMORY_PROPERTY_HOST_VISIBLE, VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT);
  SAME_VAL(CMVK_MEMORY_PROPERTY_HOST_COHERENT, VK_MEMORY_PROPERTY_HOST_COHERENT_BIT);
  SAME_VAL(CMVK_MEMORY_PROPERTY_HOST_CACHED, VK_MEMORY_PROPERTY_HOST_CACHED_BIT);
  SAME_VAL(CMVK_MEMORY_PROPERTY_LAZILY_ALLOCATED, VK_MEMORY_PROPERTY_LAZILY_ALLOCATED_BIT);
  SAME_VAL(CMVK_MEMORY_PROPERTY_PROTECTED, VK_MEMORY_PROPERTY_PROTECTED_BIT);
  SAME_VAL(CMVK_MEMORY_HEAP_DEVICE_LOCAL, VK_MEMORY_HEAP_DEVICE_LOCAL_BIT);
  SAME_VAL(CMVK_QUEUE_GRAPHICS, VK_QUEUE_GRAPHICS_BIT);
  SAME_VAL(CMVK_QUEUE_COMPUTE, VK_QUEUE_COMPUTE_BIT);
  SAME_VAL(CMVK_QUEUE_TRANSFER, VK_QUEUE_TRANSFER_BIT);
  SAME_VAL(CMVK_QUEUE_SPARSE_BINDING, VK_QUEUE_SPARSE_BINDING_BIT);
  SAME_VAL(CMVK_BUFFER_USAGE_TRANSFER_SRC, VK_BUFFER_USAGE_TRANSFER_SRC_BIT);
  SAME_VAL(CMVK_BUFFER_USAGE_TRANSFER_DST, VK_BUFFER_USAGE_TRANSFER_DST_BIT);
  SAME_VAL(CMVK_BUFFER_USAGE_STORAGE_BUFFER, VK_BUFFER_USAGE_STORAGE_BUFFER_BIT);
  SAME_VAL(CMVK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS, VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT);
  SAME_VAL(CMVK_SHARING_MODE_EXCLUSIVE, VK_SHARING_MODE_EXCLUSIVE);
  SAME_VAL(CMVK_MEMORY_ALLOCATE_DEVICE_ADDRESS, VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT);
  SAME_VAL(CMVK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER,
           VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT);
  SAME_VAL(CMVK_COMMAND_BUFFER_LEVEL_PRIMARY, VK_COMMAND_BUFFER_LEVEL_PRIMARY);
  SAME_VAL(CMVK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT, VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT);
  SAME_VAL(CMVK_PIPELINE_STAGE_TRANSFER, VK_PIPELINE_STAGE_TRANSFER_BIT);
  SAME_VAL(CMVK_PIPELINE_STAGE_HOST, VK_PIPELINE_STAGE_HOST_BIT);
  SAME_VAL(CMVK_ACCESS_TRANSFER_READ, VK_ACCESS_TRANSFER_READ_BIT);
  SAME_VAL(CMVK_ACCESS_TRANSFER_WRITE, VK_ACCESS_TRANSFER_WRITE_BIT);
  SAME_VAL(CMVK_ACCESS_HOST_READ, VK_ACCESS_HOST_READ_BIT);
  SAME_VAL(CMVK_DEBUG_SEVERITY_VERBOSE, VK_DEBUG_UTILS_MESSAGE_SEVERITY_VERBOSE_BIT_EXT);
  SAME_VAL(CMVK_DEBUG_SEVERITY_INFO, VK_DEBUG_UTILS_MESSAGE_SEVERITY_INFO_BIT_EXT);
  SAME_VAL(CMVK_DEBUG_SEVERITY_WARNING, VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT);
  SAME_VAL(CMVK_DEBUG_SEVERITY_ERROR, VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT);
  SAME_VAL(CMVK_DEBUG_TYPE_GENERAL, VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT);
  SAME_VAL(CMVK_DEBUG_TYPE_VALIDATION, VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT);
  SAME_VAL(CMVK_DEBUG_TYPE_PERFORMANCE, VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT);
}

static void layouts(void) {
  SAME_SIZE(cmvk_application_info, VkApplicationInfo);
  SAME_OFF(cmvk_application_info, api_version, VkApplicationInfo, apiVersion);
  SAME_OFF(cmvk_application_info, engine_name, VkApplicationInfo, pEngineName);
  SAME_SIZE(cmvk_instance_create_info, VkInstanceCreateInfo);
  SAME_OFF(cmvk_instance_create_info, enabled_layer_names, VkInstanceCreateInfo,
           ppEnabledLayerNames);
  SAME_OFF(cmvk_instance_create_info, enabled_extension_names, VkInstanceCreateInfo,
           ppEnabledExtensionNames);
  SAME_SIZE(cmvk_extension_properties, VkExtensionProperties);
  SAME_SIZE(cmvk_layer_properties, VkLayerProperties);
  SAME_OFF(cmvk_layer_properties, description, VkLayerProperties, description);
  SAME_SIZE(unsigned char[CMVK_LIMITS_SIZE], VkPhysicalDeviceLimits);
  EXPECT_EQ(CMVK_LIMITS_OFF_MAX_MEMORY_ALLOCATION_COUNT,
            offsetof(VkPhysicalDeviceLimits, maxMemoryAllocationCount));
  EXPECT_EQ(CMVK_LIMITS_OFF_SPARSE_ADDRESS_SPACE_SIZE,
            offsetof(VkPhysicalDeviceLimits, sparseAddressSpaceSize));
  EXPECT_EQ(CMVK_LIMITS_OFF_MIN_STORAGE_BUFFER_OFFSET_ALIGNMENT,
            offsetof(VkPhysicalDeviceLimits, minStorageBufferOffsetAlignment));
  EXPECT_EQ(CMVK_LIMITS_OFF_NON_COHERENT_ATOM_SIZE,
            offsetof(VkPhysicalDeviceLimits, nonCoherentAtomSize));
  SAME_SIZE(cmvk_physical_device_properties, VkPhysicalDeviceProperties);
  SAME_OFF(cmvk_physical_device_properties, device_name, VkPhysicalDeviceProperties, deviceName);
  SAME_OFF(cmvk_physical_device_properties, limits, VkPhysicalDeviceProperties, limits);
  SAME_OFF(cmvk_physical_device_properties, sparse_properties, VkPhysicalDeviceProperties,
           sparseProperties);
  SAME_SIZE(cmvk_physical_device_properties2, VkPhysicalDeviceProperties2);
  SAME_OFF(cmvk_physical_device_properties2, properties, VkPhysicalDeviceProperties2, properties);
  SAME_SIZE(cmvk_maintenance3_properties, VkPhysicalDeviceMaintenance3Properties);
  SAME_OFF(cmvk_maintenance3_properties, max_memory_allocation_size,
           VkPhysicalDeviceMaintenance3Properties, maxMemoryAllocationSize);
  SAME_SIZE(cmvk_physical_device_features, VkPhysicalDeviceFeatures);
  EXPECT_EQ(CMVK_FEATURE_SPARSE_BINDING * 4, offsetof(VkPhysicalDeviceFeatures, sparseBinding));
  EXPECT_EQ(CMVK_FEATURE_SPARSE_RESIDENCY_BUFFER * 4,
            offsetof(VkPhysicalDeviceFeatures, sparseResidencyBuffer));
  SAME_SIZE(cmvk_physical_device_features2, VkPhysicalDeviceFeatures2);
  SAME_SIZE(cmvk_bda_features, VkPhysicalDeviceBufferDeviceAddressFeatures);
  SAME_SIZE(cmvk_memory_properties, VkPhysicalDeviceMemoryProperties);
  SAME_OFF(cmvk_memory_properties, memory_heap_count, VkPhysicalDeviceMemoryProperties,
           memoryHeapCount);
  SAME_OFF(cmvk_memory_properties, memory_heaps, VkPhysicalDeviceMemoryProperties, memoryHeaps);
  SAME_SIZE(cmvk_memory_heap, VkMemoryHeap);
  SAME_SIZE(cmvk_memory_properties2, VkPhysicalDeviceMemoryProperties2);
  SAME_SIZE(cmvk_memory_budget, VkPhysicalDeviceMemoryBudgetPropertiesEXT);
  SAME_OFF(cmvk_memory_budget, heap_usage, VkPhysicalDeviceMemoryBudgetPropertiesEXT, heapUsage);
  SAME_SIZE(cmvk_queue_family_properties, VkQueueFamilyProperties);
  SAME_SIZE(cmvk_device_queue_create_info, VkDeviceQueueCreateInfo);
  SAME_OFF(cmvk_device_queue_create_info, queue_priorities, VkDeviceQueueCreateInfo,
           pQueuePriorities);
  SAME_SIZE(cmvk_device_create_info, VkDeviceCreateInfo);
  SAME_OFF(cmvk_device_create_info, enabled_extension_names, VkDeviceCreateInfo,
           ppEnabledExtensionNames);
  SAME_OFF(cmvk_device_create_info, enabled_features, VkDeviceCreateInfo, pEnabledFeatures);
  SAME_SIZE(cmvk_memory_allocate_info, VkMemoryAllocateInfo);
  SAME_OFF(cmvk_memory_allocate_info, memory_type_index, VkMemoryAllocateInfo, memoryTypeIndex);
  SAME_SIZE(cmvk_memory_allocate_flags_info, VkMemoryAllocateFlagsInfo);
  SAME_SIZE(cmvk_buffer_create_info, VkBufferCreateInfo);
  SAME_OFF(cmvk_buffer_create_info, size, VkBufferCreateInfo, size);
  SAME_OFF(cmvk_buffer_create_info, usage, VkBufferCreateInfo, usage);
  SAME_OFF(cmvk_buffer_create_info, queue_family_indices, VkBufferCreateInfo, pQueueFamilyIndices);
  SAME_SIZE(cmvk_memory_requirements, VkMemoryRequirements);
  SAME_OFF(cmvk_memory_requirements, memory_type_bits, VkMemoryRequirements, memoryTypeBits);
  SAME_SIZE(cmvk_buffer_device_address_info, VkBufferDeviceAddressInfo);
  SAME_SIZE(cmvk_fence_create_info, VkFenceCreateInfo);
  SAME_SIZE(cmvk_submit_info, VkSubmitInfo);
  SAME_OFF(cmvk_submit_info, command_buffers, VkSubmitInfo, pCommandBuffers);
  SAME_OFF(cmvk_submit_info, signal_semaphores, VkSubmitInfo, pSignalSemaphores);
  SAME_SIZE(cmvk_command_pool_create_info, VkCommandPoolCreateInfo);
  SAME_SIZE(cmvk_command_buffer_allocate_info, VkCommandBufferAllocateInfo);
  SAME_OFF(cmvk_command_buffer_allocate_info, command_buffer_count, VkCommandBufferAllocateInfo,
           commandBufferCount);
  SAME_SIZE(cmvk_command_buffer_begin_info, VkCommandBufferBeginInfo);
  SAME_SIZE(cmvk_memory_barrier, VkMemoryBarrier);
  SAME_SIZE(cmvk_buffer_copy, VkBufferCopy);
  SAME_OFF(cmvk_debug_callback_data, message, VkDebugUtilsMessengerCallbackDataEXT, pMessage);
  SAME_OFF(cmvk_debug_callback_data, message_id_name, VkDebugUtilsMessengerCallbackDataEXT,
           pMessageIdName);
  SAME_SIZE(cmvk_messenger_create_info, VkDebugUtilsMessengerCreateInfoEXT);
  SAME_OFF(cmvk_messenger_create_info, user_data, VkDebugUtilsMessengerCreateInfoEXT, pUserData);
}
#endif

#ifndef HAVE_VK_HEADER
static void against_vulkan_core_h(void) {
  cm_test_skip("vulkan_core.h is not installed (libvulkan-dev): nothing to compare against");
}
#endif

int main(void) {
#ifdef HAVE_VK_HEADER
  CM_RUN(constants);
  CM_RUN(layouts);
#else
  CM_RUN(against_vulkan_core_h);
#endif
  return cm_test_finish();
}
