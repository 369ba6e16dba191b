/*
 * vk_abi.h - the part of the Vulkan C ABI that cubemem calls, declared by hand
 * so that nothing needs the Vulkan headers or the loader to build (private;
 * not installed).
 *
 * Source: the Vulkan 1.3 specification and its registry header vulkan_core.h
 * (values of VkStructureType, VkResult and the flag bits; member order of the
 * structures). Only LP64 platforms (x86-64, AArch64) are supported, where a
 * non-dispatchable handle is 64 bits wide whichever way the header spells it,
 * and VKAPI_CALL is the platform's C calling convention.
 * tests/unit/test_vulkan_abi.c checks every declaration here against
 * vulkan_core.h whenever that header happens to be installed.
 *
 * Names: cmvk_* for types, CMVK_* for constants (so that this header and the
 * real one can be included together by that test). VkPhysicalDeviceLimits is
 * kept as raw bytes: cubemem reads four of its members, at the offsets below.
 */
#ifndef CM_STORAGE_VK_ABI_H
#define CM_STORAGE_VK_ABI_H

#include <stddef.h>
#include <stdint.h>

_Static_assert(sizeof(void *) == 8, "the Vulkan storage supports LP64 platforms only");

/* ---- scalar types and handles ---------------------------------------------- */
typedef int32_t cmvk_result;   /* VkResult */
typedef uint32_t cmvk_bool32;  /* VkBool32 */
typedef uint64_t cmvk_size;    /* VkDeviceSize */
typedef uint64_t cmvk_address; /* VkDeviceAddress */
typedef uint32_t cmvk_flags;   /* Vk*Flags */
/* dispatchable handles */
typedef struct cmvk_instance_st *cmvk_instance;
typedef struct cmvk_physical_device_st *cmvk_physical_device;
typedef struct cmvk_device_st *cmvk_device;
typedef struct cmvk_queue_st *cmvk_queue;
typedef struct cmvk_command_buffer_st *cmvk_command_buffer;
/* non-dispatchable handles (64-bit) */
typedef uint64_t cmvk_device_memory;
typedef uint64_t cmvk_buffer;
typedef uint64_t cmvk_fence;
typedef uint64_t cmvk_semaphore;
typedef uint64_t cmvk_command_pool;
typedef uint64_t cmvk_messenger; /* VkDebugUtilsMessengerEXT */

typedef void (*cmvk_void_fn)(void); /* PFN_vkVoidFunction */

/* ---- constants ---------------------------------------------------------------- */
#define CMVK_SUCCESS 0
#define CMVK_NOT_READY 1
#define CMVK_TIMEOUT 2
#define CMVK_INCOMPLETE 5
#define CMVK_ERROR_OUT_OF_HOST_MEMORY (-1)
#define CMVK_ERROR_OUT_OF_DEVICE_MEMORY (-2)
#define CMVK_ERROR_INITIALIZATION_FAILED (-3)
#define CMVK_ERROR_DEVICE_LOST (-4)
#define CMVK_ERROR_MEMORY_MAP_FAILED (-5)
#define CMVK_ERROR_LAYER_NOT_PRESENT (-6)
#define CMVK_ERROR_EXTENSION_NOT_PRESENT (-7)
#define CMVK_ERROR_FEATURE_NOT_PRESENT (-8)
#define CMVK_ERROR_INCOMPATIBLE_DRIVER (-9)
#define CMVK_ERROR_TOO_MANY_OBJECTS (-10)
#define CMVK_ERROR_FORMAT_NOT_SUPPORTED (-11)
#define CMVK_ERROR_FRAGMENTED_POOL (-12)
#define CMVK_ERROR_UNKNOWN (-13)
#define CMVK_ERROR_OUT_OF_POOL_MEMORY (-1000069000)
#define CMVK_ERROR_INVALID_EXTERNAL_HANDLE (-1000072003)
#define CMVK_ERROR_FRAGMENTATION (-1000161000)
#define CMVK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS (-1000257000)
#define CMVK_ERROR_VALIDATION_FAILED_EXT (-1000011001)

#define CMVK_STYPE_APPLICATION_INFO 0
#define CMVK_STYPE_INSTANCE_CREATE_INFO 1
#define CMVK_STYPE_DEVICE_QUEUE_CREATE_INFO 2
#define CMVK_STYPE_DEVICE_CREATE_INFO 3
#define CMVK_STYPE_SUBMIT_INFO 4
#define CMVK_STYPE_MEMORY_ALLOCATE_INFO 5
#define CMVK_STYPE_FENCE_CREATE_INFO 8
#define CMVK_STYPE_BUFFER_CREATE_INFO 12
#define CMVK_STYPE_COMMAND_POOL_CREATE_INFO 39
#define CMVK_STYPE_COMMAND_BUFFER_ALLOCATE_INFO 40
#define CMVK_STYPE_COMMAND_BUFFER_BEGIN_INFO 42
#define CMVK_STYPE_MEMORY_BARRIER 46
#define CMVK_STYPE_PHYSICAL_DEVICE_FEATURES_2 1000059000
#define CMVK_STYPE_PHYSICAL_DEVICE_PROPERTIES_2 1000059001
#define CMVK_STYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2 1000059006
#define CMVK_STYPE_MEMORY_ALLOCATE_FLAGS_INFO 1000060000
#define CMVK_STYPE_DEBUG_UTILS_MESSENGER_CALLBACK_DATA_EXT 1000128003
#define CMVK_STYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT 1000128004
#define CMVK_STYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES 1000168000
#define CMVK_STYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT 1000237000
#define CMVK_STYPE_BUFFER_DEVICE_ADDRESS_INFO 1000244001
#define CMVK_STYPE_PHYSICAL_DEVICE_BUFFER_DEVICE_ADDRESS_FEATURES 1000257000

#define CMVK_MAKE_API_VERSION(major, minor, patch) \
  ((((uint32_t)(major)) << 22) | (((uint32_t)(minor)) << 12) | ((uint32_t)(patch)))
#define CMVK_API_VERSION_1_1 CMVK_MAKE_API_VERSION(1, 1, 0)
#define CMVK_API_VERSION_1_2 CMVK_MAKE_API_VERSION(1, 2, 0)
#define CMVK_VERSION_MAJOR(v) ((uint32_t)(v) >> 22 & 0x7fu)
#define CMVK_VERSION_MINOR(v) ((uint32_t)(v) >> 12 & 0x3ffu)
#define CMVK_VERSION_PATCH(v) ((uint32_t)(v)&0xfffu)

#define CMVK_MAX_MEMORY_TYPES 32
#define CMVK_MAX_MEMORY_HEAPS 16
#define CMVK_MAX_EXTENSION_NAME_SIZE 256
#define CMVK_MAX_DESCRIPTION_SIZE 256
#define CMVK_MAX_PHYSICAL_DEVICE_NAME_SIZE 256
#define CMVK_UUID_SIZE 16
#define CMVK_WHOLE_SIZE (~0ull)

#define CMVK_MEMORY_PROPERTY_DEVICE_LOCAL 0x1u
#define CMVK_MEMORY_PROPERTY_HOST_VISIBLE 0x2u
#define CMVK_MEMORY_PROPERTY_HOST_COHERENT 0x4u
#define CMVK_MEMORY_PROPERTY_HOST_CACHED 0x8u
#define CMVK_MEMORY_PROPERTY_LAZILY_ALLOCATED 0x10u
#define CMVK_MEMORY_PROPERTY_PROTECTED 0x20u
#define CMVK_MEMORY_HEAP_DEVICE_LOCAL 0x1u

#define CMVK_QUEUE_GRAPHICS 0x1u
#define CMVK_QUEUE_COMPUTE 0x2u
#define CMVK_QUEUE_TRANSFER 0x4u
#define CMVK_QUEUE_SPARSE_BINDING 0x8u

#define CMVK_BUFFER_USAGE_TRANSFER_SRC 0x1u
#define CMVK_BUFFER_USAGE_TRANSFER_DST 0x2u
#define CMVK_BUFFER_USAGE_STORAGE_BUFFER 0x20u
#define CMVK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS 0x20000u
#define CMVK_SHARING_MODE_EXCLUSIVE 0
#define CMVK_MEMORY_ALLOCATE_DEVICE_ADDRESS 0x2u

#define CMVK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER 0x2u
#define CMVK_COMMAND_BUFFER_LEVEL_PRIMARY 0
#define CMVK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT 0x1u
#define CMVK_PIPELINE_STAGE_TRANSFER 0x1000u
#define CMVK_PIPELINE_STAGE_HOST 0x4000u
#define CMVK_ACCESS_TRANSFER_READ 0x800u
#define CMVK_ACCESS_TRANSFER_WRITE 0x1000u
#define CMVK_ACCESS_HOST_READ 0x2000u

#define CMVK_DEBUG_SEVERITY_VERBOSE 0x1u
#define CMVK_DEBUG_SEVERITY_INFO 0x10u
#define CMVK_DEBUG_SEVERITY_WARNING 0x100u
#define CMVK_DEBUG_SEVERITY_ERROR 0x1000u
#define CMVK_DEBUG_TYPE_GENERAL 0x1u
#define CMVK_DEBUG_TYPE_VALIDATION 0x2u
#define CMVK_DEBUG_TYPE_PERFORMANCE 0x4u

/* ---- structures ------------------------------------------------------------------ */
typedef struct cmvk_application_info {
  int32_t s_type;
  const void *p_next;
  const char *application_name;
  uint32_t application_version;
  const char *engine_name;
  uint32_t engine_version;
  uint32_t api_version;
} cmvk_application_info;

typedef struct cmvk_instance_create_info {
  int32_t s_type;
  const void *p_next;
  cmvk_flags flags;
  const cmvk_application_info *application_info;
  uint32_t enabled_layer_count;
  const char *const *enabled_layer_names;
  uint32_t enabled_extension_count;
  const char *const *enabled_extension_names;
} cmvk_instance_create_info;

typedef struct cmvk_extension_properties {
  char extension_name[CMVK_MAX_EXTENSION_NAME_SIZE];
  uint32_t spec_version;
} cmvk_extension_properties;

typedef struct cmvk_layer_properties {
  char layer_name[CMVK_MAX_EXTENSION_NAME_SIZE];
  uint32_t spec_version;
  uint32_t implementation_version;
  char description[CMVK_MAX_DESCRIPTION_SIZE];
} cmvk_layer_properties;

/* VkPhysicalDeviceLimits: 504 bytes; the members cubemem reads: */
#define CMVK_LIMITS_SIZE 504
#define CMVK_LIMITS_OFF_MAX_MEMORY_ALLOCATION_COUNT 36          /* uint32_t */
#define CMVK_LIMITS_OFF_SPARSE_ADDRESS_SPACE_SIZE 56            /* VkDeviceSize */
#define CMVK_LIMITS_OFF_MIN_STORAGE_BUFFER_OFFSET_ALIGNMENT 328 /* VkDeviceSize */
#define CMVK_LIMITS_OFF_NON_COHERENT_ATOM_SIZE 496              /* VkDeviceSize */

typedef struct cmvk_physical_device_properties {
  uint32_t api_version;
  uint32_t driver_version;
  uint32_t vendor_id;
  uint32_t device_id;
  int32_t device_type;
  char device_name[CMVK_MAX_PHYSICAL_DEVICE_NAME_SIZE];
  uint8_t pipeline_cache_uuid[CMVK_UUID_SIZE];
  _Alignas(8) unsigned char limits[CMVK_LIMITS_SIZE];
  cmvk_bool32 sparse_properties[5]; /* VkPhysicalDeviceSparseProperties */
} cmvk_physical_device_properties;

typedef struct cmvk_physical_device_properties2 {
  int32_t s_type;
  void *p_next;
  cmvk_physical_device_properties properties;
} cmvk_physical_device_properties2;

typedef struct cmvk_maintenance3_properties {
  int32_t s_type;
  void *p_next;
  uint32_t max_per_set_descriptors;
  cmvk_size max_memory_allocation_size;
} cmvk_maintenance3_properties;

/* VkPhysicalDeviceFeatures: 55 VkBool32 in specification order. */
#define CMVK_FEATURE_COUNT 55
#define CMVK_FEATURE_SPARSE_BINDING 44
#define CMVK_FEATURE_SPARSE_RESIDENCY_BUFFER 45
typedef struct cmvk_physical_device_features {
  cmvk_bool32 f[CMVK_FEATURE_COUNT];
} cmvk_physical_device_features;

typedef struct cmvk_physical_device_features2 {
  int32_t s_type;
  void *p_next;
  cmvk_physical_device_features features;
} cmvk_physical_device_features2;

typedef struct cmvk_bda_features { /* VkPhysicalDeviceBufferDeviceAddressFeatures */
  int32_t s_type;
  void *p_next;
  cmvk_bool32 buffer_device_address;
  cmvk_bool32 buffer_device_address_capture_replay;
  cmvk_bool32 buffer_device_address_multi_device;
} cmvk_bda_features;

typedef struct cmvk_memory_type {
  cmvk_flags property_flags;
  uint32_t heap_index;
} cmvk_memory_type;

typedef struct cmvk_memory_heap {
  cmvk_size size;
  cmvk_flags flags;
} cmvk_memory_heap;

typedef struct cmvk_memory_properties {
  uint32_t memory_type_count;
  cmvk_memory_type memory_types[CMVK_MAX_MEMORY_TYPES];
  uint32_t memory_heap_count;
  cmvk_memory_heap memory_heaps[CMVK_MAX_MEMORY_HEAPS];
} cmvk_memory_properties;

typedef struct cmvk_memory_properties2 {
  int32_t s_type;
  void *p_next;
  cmvk_memory_properties memory_properties;
} cmvk_memory_properties2;

typedef struct cmvk_memory_budget { /* VkPhysicalDeviceMemoryBudgetPropertiesEXT */
  int32_t s_type;
  void *p_next;
  cmvk_size heap_budget[CMVK_MAX_MEMORY_HEAPS];
  cmvk_size heap_usage[CMVK_MAX_MEMORY_HEAPS];
} cmvk_memory_budget;

typedef struct cmvk_queue_family_properties {
  cmvk_flags queue_flags;
  uint32_t queue_count;
  uint32_t timestamp_valid_bits;
  uint32_t min_image_transfer_granularity[3];
} cmvk_queue_family_properties;

typedef struct cmvk_device_queue_create_info {
  int32_t s_type;
  const void *p_next;
  cmvk_flags flags;
  uint32_t queue_family_index;
  uint32_t queue_count;
  const float *queue_priorities;
} cmvk_device_queue_create_info;

typedef struct cmvk_device_create_info {
  int32_t s_type;
  const void *p_next;
  cmvk_flags flags;
  uint32_t queue_create_info_count;
  const cmvk_device_queue_create_info *queue_create_infos;
  uint32_t enabled_layer_count; /* deprecated, ignored by the loader */
  const char *const *enabled_layer_names;
  uint32_t enabled_extension_count;
  const char *const *enabled_extension_names;
  const cmvk_physical_device_features *enabled_features;
} cmvk_device_create_info;

typedef struct cmvk_memory_allocate_info {
  int32_t s_type;
  const void *p_next;
  cmvk_size allocation_size;
  uint32_t memory_type_index;
} cmvk_memory_allocate_info;

typedef struct cmvk_memory_allocate_flags_info {
  int32_t s_type;
  const void *p_next;
  cmvk_flags flags;
  uint32_t device_mask;
} cmvk_memory_allocate_flags_info;

typedef struct cmvk_buffer_create_info {
  int32_t s_type;
  const void *p_next;
  cmvk_flags flags;
  cmvk_size size;
  cmvk_flags usage;
  int32_t sharing_mode;
  uint32_t queue_family_index_count;
  const uint32_t *queue_family_indices;
} cmvk_buffer_create_info;

typedef struct cmvk_memory_requirements {
  cmvk_size size;
  cmvk_size alignment;
  uint32_t memory_type_bits;
} cmvk_memory_requirements;

typedef struct cmvk_buffer_device_address_info {
  int32_t s_type;
  const void *p_next;
  cmvk_buffer buffer;
} cmvk_buffer_device_address_info;

typedef struct cmvk_fence_create_info {
  int32_t s_type;
  const void *p_next;
  cmvk_flags flags;
} cmvk_fence_create_info;

typedef struct cmvk_submit_info {
  int32_t s_type;
  const void *p_next;
  uint32_t wait_semaphore_count;
  const cmvk_semaphore *wait_semaphores;
  const cmvk_flags *wait_dst_stage_mask;
  uint32_t command_buffer_count;
  const cmvk_command_buffer *command_buffers;
  uint32_t signal_semaphore_count;
  const cmvk_semaphore *signal_semaphores;
} cmvk_submit_info;

typedef struct cmvk_command_pool_create_info {
  int32_t s_type;
  const void *p_next;
  cmvk_flags flags;
  uint32_t queue_family_index;
} cmvk_command_pool_create_info;

typedef struct cmvk_command_buffer_allocate_info {
  int32_t s_type;
  const void *p_next;
  cmvk_command_pool command_pool;
  int32_t level;
  uint32_t command_buffer_count;
} cmvk_command_buffer_allocate_info;

typedef struct cmvk_command_buffer_begin_info {
  int32_t s_type;
  const void *p_next;
  cmvk_flags flags;
  const void *inheritance_info;
} cmvk_command_buffer_begin_info;

typedef struct cmvk_memory_barrier {
  int32_t s_type;
  const void *p_next;
  cmvk_flags src_access_mask;
  cmvk_flags dst_access_mask;
} cmvk_memory_barrier;

typedef struct cmvk_buffer_copy {
  cmvk_size src_offset;
  cmvk_size dst_offset;
  cmvk_size size;
} cmvk_buffer_copy;

typedef struct cmvk_debug_callback_data { /* VkDebugUtilsMessengerCallbackDataEXT (prefix) */
  int32_t s_type;
  const void *p_next;
  cmvk_flags flags;
  const char *message_id_name;
  int32_t message_id_number;
  const char *message;
  /* queue labels, command buffer labels and objects follow; not read */
} cmvk_debug_callback_data;

typedef cmvk_bool32 (*cmvk_debug_callback)(cmvk_flags severity, cmvk_flags types,
                                           const cmvk_debug_callback_data *data, void *user);

typedef struct cmvk_messenger_create_info { /* VkDebugUtilsMessengerCreateInfoEXT */
  int32_t s_type;
  const void *p_next;
  cmvk_flags flags;
  cmvk_flags message_severity;
  cmvk_flags message_type;
  cmvk_debug_callback user_callback;
  void *user_data;
} cmvk_messenger_create_info;

/* ---- entry points ------------------------------------------------------------------ */
typedef cmvk_void_fn (*cmvk_pfn_get_instance_proc_addr)(cmvk_instance instance, const char *name);
typedef cmvk_void_fn (*cmvk_pfn_get_device_proc_addr)(cmvk_device device, const char *name);
typedef cmvk_result (*cmvk_pfn_enumerate_instance_version)(uint32_t *version);
typedef cmvk_result (*cmvk_pfn_enumerate_instance_extension_properties)(
    const char *layer, uint32_t *count, cmvk_extension_properties *props);
typedef cmvk_result (*cmvk_pfn_enumerate_instance_layer_properties)(uint32_t *count,
                                                                    cmvk_layer_properties *props);
typedef cmvk_result (*cmvk_pfn_create_instance)(const cmvk_instance_create_info *info,
                                                const void *allocator, cmvk_instance *out);
typedef void (*cmvk_pfn_destroy_instance)(cmvk_instance instance, const void *allocator);
typedef cmvk_result (*cmvk_pfn_enumerate_physical_devices)(cmvk_instance instance, uint32_t *count,
                                                           cmvk_physical_device *out);
typedef void (*cmvk_pfn_get_physical_device_properties2)(cmvk_physical_device pd,
                                                         cmvk_physical_device_properties2 *out);
typedef void (*cmvk_pfn_get_physical_device_features2)(cmvk_physical_device pd,
                                                       cmvk_physical_device_features2 *out);
typedef void (*cmvk_pfn_get_physical_device_memory_properties2)(cmvk_physical_device pd,
                                                                cmvk_memory_properties2 *out);
typedef void (*cmvk_pfn_get_physical_device_queue_family_properties)(
    cmvk_physical_device pd, uint32_t *count, cmvk_queue_family_properties *out);
typedef cmvk_result (*cmvk_pfn_enumerate_device_extension_properties)(
    cmvk_physical_device pd, const char *layer, uint32_t *count, cmvk_extension_properties *out);
typedef cmvk_result (*cmvk_pfn_create_device)(cmvk_physical_device pd,
                                              const cmvk_device_create_info *info,
                                              const void *allocator, cmvk_device *out);
typedef cmvk_result (*cmvk_pfn_create_messenger)(cmvk_instance instance,
                                                 const cmvk_messenger_create_info *info,
                                                 const void *allocator, cmvk_messenger *out);
typedef void (*cmvk_pfn_destroy_messenger)(cmvk_instance instance, cmvk_messenger m,
                                           const void *allocator);

typedef void (*cmvk_pfn_destroy_device)(cmvk_device device, const void *allocator);
typedef void (*cmvk_pfn_get_device_queue)(cmvk_device device, uint32_t family, uint32_t index,
                                          cmvk_queue *out);
typedef cmvk_result (*cmvk_pfn_allocate_memory)(cmvk_device device,
                                                const cmvk_memory_allocate_info *info,
                                                const void *allocator, cmvk_device_memory *out);
typedef void (*cmvk_pfn_free_memory)(cmvk_device device, cmvk_device_memory mem,
                                     const void *allocator);
typedef cmvk_result (*cmvk_pfn_map_memory)(cmvk_device device, cmvk_device_memory mem,
                                           cmvk_size offset, cmvk_size size, cmvk_flags flags,
                                           void **out);
typedef void (*cmvk_pfn_unmap_memory)(cmvk_device device, cmvk_device_memory mem);
typedef cmvk_result (*cmvk_pfn_create_buffer)(cmvk_device device,
                                              const cmvk_buffer_create_info *info,
                                              const void *allocator, cmvk_buffer *out);
typedef void (*cmvk_pfn_destroy_buffer)(cmvk_device device, cmvk_buffer buf, const void *allocator);
typedef void (*cmvk_pfn_get_buffer_memory_requirements)(cmvk_device device, cmvk_buffer buf,
                                                        cmvk_memory_requirements *out);
typedef cmvk_result (*cmvk_pfn_bind_buffer_memory)(cmvk_device device, cmvk_buffer buf,
                                                   cmvk_device_memory mem, cmvk_size offset);
typedef cmvk_address (*cmvk_pfn_get_buffer_device_address)(
    cmvk_device device, const cmvk_buffer_device_address_info *info);
typedef cmvk_result (*cmvk_pfn_create_fence)(cmvk_device device, const cmvk_fence_create_info *info,
                                             const void *allocator, cmvk_fence *out);
typedef void (*cmvk_pfn_destroy_fence)(cmvk_device device, cmvk_fence fence, const void *allocator);
typedef cmvk_result (*cmvk_pfn_get_fence_status)(cmvk_device device, cmvk_fence fence);
typedef cmvk_result (*cmvk_pfn_wait_for_fences)(cmvk_device device, uint32_t count,
                                                const cmvk_fence *fences, cmvk_bool32 wait_all,
                                                uint64_t timeout);
typedef cmvk_result (*cmvk_pfn_queue_submit)(cmvk_queue queue, uint32_t count,
                                             const cmvk_submit_info *submits, cmvk_fence fence);
typedef cmvk_result (*cmvk_pfn_queue_wait_idle)(cmvk_queue queue);
typedef cmvk_result (*cmvk_pfn_device_wait_idle)(cmvk_device device);

/* command recording (used by the tests to touch the memory) */
typedef cmvk_result (*cmvk_pfn_create_command_pool)(cmvk_device device,
                                                    const cmvk_command_pool_create_info *info,
                                                    const void *allocator, cmvk_command_pool *out);
typedef void (*cmvk_pfn_destroy_command_pool)(cmvk_device device, cmvk_command_pool pool,
                                              const void *allocator);
typedef cmvk_result (*cmvk_pfn_allocate_command_buffers)(
    cmvk_device device, const cmvk_command_buffer_allocate_info *info, cmvk_command_buffer *out);
typedef cmvk_result (*cmvk_pfn_begin_command_buffer)(cmvk_command_buffer cb,
                                                     const cmvk_command_buffer_begin_info *info);
typedef cmvk_result (*cmvk_pfn_end_command_buffer)(cmvk_command_buffer cb);
typedef cmvk_result (*cmvk_pfn_reset_command_buffer)(cmvk_command_buffer cb, cmvk_flags flags);
typedef void (*cmvk_pfn_cmd_fill_buffer)(cmvk_command_buffer cb, cmvk_buffer dst, cmvk_size offset,
                                         cmvk_size size, uint32_t data);
typedef void (*cmvk_pfn_cmd_copy_buffer)(cmvk_command_buffer cb, cmvk_buffer src, cmvk_buffer dst,
                                         uint32_t count, const cmvk_buffer_copy *regions);
typedef void (*cmvk_pfn_cmd_pipeline_barrier)(
    cmvk_command_buffer cb, cmvk_flags src_stage, cmvk_flags dst_stage, cmvk_flags dependency,
    uint32_t memory_barrier_count, const cmvk_memory_barrier *memory_barriers,
    uint32_t buffer_barrier_count, const void *buffer_barriers, uint32_t image_barrier_count,
    const void *image_barriers);

#endif
