/*
 * vulkan.c - Vulkan device and staging storages, with the loader loaded at run
 * time (cubemem/vulkan.h).
 *
 * Loading. A device owns a table of entry points: the global ones from
 * vkGetInstanceProcAddr(NULL, ...), the instance ones from
 * vkGetInstanceProcAddr(instance, ...) and the device ones from
 * vkGetDeviceProcAddr(device, ...) (no loader trampolines on the hot path).
 * vkGetInstanceProcAddr itself comes from dlopen(CM_VULKAN_LIBRARY or
 * "libvulkan.so.1") or from the application. The ABI is declared by hand in
 * storage/vk_abi.h. The library is not dlclose'd once an instance exists,
 * since drivers loaded through it may have registered exit handlers.
 *
 * Device. Opening chooses the physical device, the first queue family with
 * compute, the device-local memory type buffers may use (lowest index, as
 * Vulkan orders types by preference) and the staging type (host-visible and
 * coherent; cached preferred, device-local avoided), learned from the
 * memoryTypeBits of a probe buffer with the storages' usage. The device
 * counts, over all its storages, the live allocations (against
 * maxMemoryAllocationCount) and the bytes held per heap (against the heap
 * size); both are reserved with atomics before Vulkan is called and given
 * back on failure, so storages on several threads never overshoot. A mutex
 * serialises cubemem's use of the queue (vkQueueSubmit / vkQueueWaitIdle
 * need external synchronisation). Reference counted like the CUDA device.
 *
 * Storage model. Ids are minted per storage from 1; each maps (hash map) to a
 * block {memory, buffer, size, allocation bytes, device address, mapped
 * pointer}. An allocation: check the limits, vkCreateBuffer, read its
 * requirements (the allocation is requirements.size bytes, at least the
 * request), vkAllocateMemory (with VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT when
 * bufferDeviceAddress is on), vkBindBufferMemory at 0, then the device address
 * or the mapping; any failure undoes the steps already done, so a failed
 * alloc changes nothing. Device dealloc links the block into a pending list;
 * flush waits for the queue to go idle and destroys the pending blocks.
 * Staging dealloc destroys at once.
 * Invariants: every block is in the map exactly once; pending blocks are in
 * the pending list exactly once; a block's Vulkan objects are destroyed
 * exactly once, when it leaves the map; the device's counters equal the sum
 * over its storages' live blocks.
 *
 * Exports: cm_vulkan_* (cubemem/vulkan.h).
 */
#include "cubemem/vulkan.h"

#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "ptr/u64map.h"
#include "storage/storage_internal.h"
#include "storage/vk_abi.h"

#define CM_VULKAN_DEFAULT_LIBRARY "libvulkan.so.1"
#define CM_VK_VALIDATION_LAYER "VK_LAYER_KHRONOS_validation"
#define CM_VK_EXT_DEBUG_UTILS "VK_EXT_debug_utils"
#define CM_VK_EXT_MEMORY_BUDGET "VK_EXT_memory_budget"
#define CM_VK_KHR_BDA "VK_KHR_buffer_device_address"

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
} vk_api;

typedef enum sym_scope { S_GLOBAL, S_INSTANCE, S_DEVICE } sym_scope;

typedef struct sym_def {
  const char *name;
  size_t offset; /* in vk_api */
  sym_scope scope;
  bool required;
} sym_def;

#define SYM(field, scope, req) \
  { "vk" #field, offsetof(vk_api, field), scope, req }
static const sym_def k_syms[] = {
    SYM(EnumerateInstanceVersion, S_GLOBAL, false), /* absent: a 1.0 loader */
    SYM(EnumerateInstanceExtensionProperties, S_GLOBAL, true),
    SYM(EnumerateInstanceLayerProperties, S_GLOBAL, true),
    SYM(CreateInstance, S_GLOBAL, true),
    SYM(DestroyInstance, S_INSTANCE, true),
    SYM(EnumeratePhysicalDevices, S_INSTANCE, true),
    SYM(GetPhysicalDeviceProperties2, S_INSTANCE, true),
    SYM(GetPhysicalDeviceFeatures2, S_INSTANCE, true),
    SYM(GetPhysicalDeviceMemoryProperties2, S_INSTANCE, true),
    SYM(GetPhysicalDeviceQueueFamilyProperties, S_INSTANCE, true),
    SYM(EnumerateDeviceExtensionProperties, S_INSTANCE, true),
    SYM(CreateDevice, S_INSTANCE, true),
    SYM(GetDeviceProcAddr, S_INSTANCE, true),
    SYM(CreateDebugUtilsMessengerEXT, S_INSTANCE, false),
    SYM(DestroyDebugUtilsMessengerEXT, S_INSTANCE, false),
    SYM(DestroyDevice, S_DEVICE, true),
    SYM(GetDeviceQueue, S_DEVICE, true),
    SYM(DeviceWaitIdle, S_DEVICE, true),
    SYM(AllocateMemory, S_DEVICE, true),
    SYM(FreeMemory, S_DEVICE, true),
    SYM(MapMemory, S_DEVICE, true),
    SYM(UnmapMemory, S_DEVICE, true),
    SYM(CreateBuffer, S_DEVICE, true),
    SYM(DestroyBuffer, S_DEVICE, true),
    SYM(GetBufferMemoryRequirements, S_DEVICE, true),
    SYM(BindBufferMemory, S_DEVICE, true),
    SYM(CreateFence, S_DEVICE, true),
    SYM(DestroyFence, S_DEVICE, true),
    SYM(GetFenceStatus, S_DEVICE, true),
    SYM(WaitForFences, S_DEVICE, true),
    SYM(QueueSubmit, S_DEVICE, true),
    SYM(QueueWaitIdle, S_DEVICE, true),
};
#undef SYM

/* Resolve the symbols of one scope; returns the first missing required name. */
static const char *resolve_scope(vk_api *a, sym_scope scope, cmvk_instance inst, cmvk_device dev) {
  for (size_t i = 0; i < sizeof k_syms / sizeof k_syms[0]; i++) {
    if (k_syms[i].scope != scope) continue;
    cmvk_void_fn f = scope == S_DEVICE ? a->GetDeviceProcAddr(dev, k_syms[i].name)
                                       : a->GetInstanceProcAddr(inst, k_syms[i].name);
    if (!f && k_syms[i].required) return k_syms[i].name;
    memcpy((char *)a + k_syms[i].offset, &f, sizeof f);
  }
  return NULL;
}

const char *cm_vulkan_result_name(int r) {
  switch (r) {
    case CMVK_SUCCESS:
      return "VK_SUCCESS";
    case CMVK_NOT_READY:
      return "VK_NOT_READY";
    case CMVK_TIMEOUT:
      return "VK_TIMEOUT";
    case CMVK_INCOMPLETE:
      return "VK_INCOMPLETE";
    case CMVK_ERROR_OUT_OF_HOST_MEMORY:
      return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case CMVK_ERROR_OUT_OF_DEVICE_MEMORY:
      return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
    case CMVK_ERROR_INITIALIZATION_FAILED:
      return "VK_ERROR_INITIALIZATION_FAILED";
    case CMVK_ERROR_DEVICE_LOST:
      return "VK_ERROR_DEVICE_LOST";
    case CMVK_ERROR_MEMORY_MAP_FAILED:
      return "VK_ERROR_MEMORY_MAP_FAILED";
    case CMVK_ERROR_LAYER_NOT_PRESENT:
      return "VK_ERROR_LAYER_NOT_PRESENT";
    case CMVK_ERROR_EXTENSION_NOT_PRESENT:
      return "VK_ERROR_EXTENSION_NOT_PRESENT";
    case CMVK_ERROR_FEATURE_NOT_PRESENT:
      return "VK_ERROR_FEATURE_NOT_PRESENT";
    case CMVK_ERROR_INCOMPATIBLE_DRIVER:
      return "VK_ERROR_INCOMPATIBLE_DRIVER";
    case CMVK_ERROR_TOO_MANY_OBJECTS:
      return "VK_ERROR_TOO_MANY_OBJECTS";
    case CMVK_ERROR_FORMAT_NOT_SUPPORTED:
      return "VK_ERROR_FORMAT_NOT_SUPPORTED";
    case CMVK_ERROR_FRAGMENTED_POOL:
      return "VK_ERROR_FRAGMENTED_POOL";
    case CMVK_ERROR_UNKNOWN:
      return "VK_ERROR_UNKNOWN";
    case CMVK_ERROR_OUT_OF_POOL_MEMORY:
      return "VK_ERROR_OUT_OF_POOL_MEMORY";
    case CMVK_ERROR_INVALID_EXTERNAL_HANDLE:
      return "VK_ERROR_INVALID_EXTERNAL_HANDLE";
    case CMVK_ERROR_FRAGMENTATION:
      return "VK_ERROR_FRAGMENTATION";
    case CMVK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS:
      return "VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS";
    case CMVK_ERROR_VALIDATION_FAILED_EXT:
      return "VK_ERROR_VALIDATION_FAILED_EXT";
    default:
      return "VK_RESULT_UNKNOWN";
  }
}

static int vk_error(cm_diag_t *diag, int code, cmvk_result r, const char *what) {
  cm__diag_set(diag, code, "%s failed: %s (VkResult %d)", what, cm_vulkan_result_name(r), (int)r);
  if (diag) diag->native = r;
  return code;
}

/* ---- messages ------------------------------------------------------------------------- */

static _Atomic uint64_t g_messages_total;

uint64_t cm_vulkan_messages_total(void) { return atomic_load(&g_messages_total); }

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

static cmvk_bool32 on_message(cmvk_flags severity, cmvk_flags types,
                              const cmvk_debug_callback_data *data, void *user) {
  cm_vulkan_device_t *d = user;
  const char *msg = data && data->message ? data->message : "(no text)";
  const char *id = data && data->message_id_name ? data->message_id_name : "";
  atomic_fetch_add(&g_messages_total, 1);
  if (d) {
    atomic_fetch_add(&d->messages, 1);
    pthread_mutex_lock(&d->msg_lock);
    snprintf(d->last_message, sizeof d->last_message, "%s%s%s", id, *id ? ": " : "", msg);
    pthread_mutex_unlock(&d->msg_lock);
    if (d->print_messages) /* asked for: cm_vulkan_open_options_t.print_messages */
      fprintf(stderr, "cubemem: vulkan %s%s: %s%s%s\n",
              (types & CMVK_DEBUG_TYPE_VALIDATION) ? "validation " : "",
              (severity & CMVK_DEBUG_SEVERITY_ERROR) ? "error" : "warning", id, *id ? ": " : "",
              msg);
  }
  return 0; /* VK_FALSE: do not abort the call */
}

static const char *library_path(const char *library) {
  if (library && *library) return library;
  const char *env = secure_getenv("CM_VULKAN_LIBRARY");
  return (env && *env) ? env : CM_VULKAN_DEFAULT_LIBRARY;
}

static bool env_flag(const char *name) {
  const char *v = secure_getenv(name);
  return v && (!strcmp(v, "1") || !strcmp(v, "true") || !strcmp(v, "yes") || !strcmp(v, "on"));
}

void cm_vulkan_open_options_init(cm_vulkan_open_options_t *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->device_index = -1;
  o->validation = env_flag("CM_VULKAN_VALIDATION");
  o->print_messages = o->validation;
}

static cm_vulkan_device_t *device_new(void) {
  cm_vulkan_device_t *d = calloc(1, sizeof *d);
  if (!d) return NULL;
  atomic_init(&d->refs, 1);
  pthread_mutex_init(&d->queue_lock, NULL);
  pthread_mutex_init(&d->msg_lock, NULL);
  return d;
}

static void device_free(cm_vulkan_device_t *d) {
  pthread_mutex_destroy(&d->queue_lock);
  pthread_mutex_destroy(&d->msg_lock);
  free(d);
}

/* Load the loader and vkGetInstanceProcAddr; resolve the global entry points. */
static int load_loader(cm_vulkan_device_t *d, const char *library, void *gipa, cm_diag_t *diag) {
  if (gipa) {
    memcpy(&d->api.GetInstanceProcAddr, &gipa, sizeof gipa);
  } else {
    const char *path = library_path(library);
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      const char *e = dlerror();
      return cm__diag_set(diag, CM_ENODEV,
                          "Vulkan loader not available: %s (install libvulkan1 and a driver, e.g. "
                          "mesa-vulkan-drivers, or set CM_VULKAN_LIBRARY to the loader's path)",
                          e ? e : path);
    }
    void *f = dlsym(lib, "vkGetInstanceProcAddr");
    if (!f) {
      dlclose(lib); /* nothing was initialised through it */
      return cm__diag_set(diag, CM_ENODEV,
                          "%s is not a Vulkan loader: it lacks vkGetInstanceProcAddr", path);
    }
    memcpy(&d->api.GetInstanceProcAddr, &f, sizeof f);
    d->lib = lib;
  }
  const char *missing = resolve_scope(&d->api, S_GLOBAL, NULL, NULL);
  if (missing) return cm__diag_set(diag, CM_ENODEV, "the Vulkan loader lacks %s", missing);
  return CM_OK;
}

static bool has_extension(const cmvk_extension_properties *e, uint32_t n, const char *name) {
  for (uint32_t i = 0; i < n; i++)
    if (!strncmp(e[i].extension_name, name, sizeof e[i].extension_name)) return true;
  return false;
}

static uint64_t read_u64(const unsigned char *p) {
  uint64_t v;
  memcpy(&v, p, sizeof v);
  return v;
}
static uint32_t read_u32(const unsigned char *p) {
  uint32_t v;
  memcpy(&v, p, sizeof v);
  return v;
}

/* Score of a memory type for the device (staging=false) or staging storage;
 * -1 = unusable. */
static int type_score(const cmvk_memory_properties *mp, uint32_t i, bool staging) {
  cmvk_flags f = mp->memory_types[i].property_flags;
  if (f & (CMVK_MEMORY_PROPERTY_PROTECTED | CMVK_MEMORY_PROPERTY_LAZILY_ALLOCATED)) return -1;
  if (!staging) {
    if (!(f & CMVK_MEMORY_PROPERTY_DEVICE_LOCAL)) return -1;
    return 1; /* the lowest index wins among equals: Vulkan orders types by preference */
  }
  cmvk_flags need = CMVK_MEMORY_PROPERTY_HOST_VISIBLE | CMVK_MEMORY_PROPERTY_HOST_COHERENT;
  if ((f & need) != need) return -1;
  int s = 1;
  if (f & CMVK_MEMORY_PROPERTY_HOST_CACHED) s += 2;
  if (!(f & CMVK_MEMORY_PROPERTY_DEVICE_LOCAL)) s += 1; /* keep device memory for the device */
  return s;
}

static int pick_type(const cmvk_memory_properties *mp, uint32_t bits, bool staging) {
  int best = -1, best_score = -1;
  for (uint32_t i = 0; i < mp->memory_type_count && i < CMVK_MAX_MEMORY_TYPES; i++) {
    if (!(bits & (1u << i))) continue;
    int s = type_score(mp, i, staging);
    if (s > best_score) best = (int)i, best_score = s;
  }
  return best;
}

/* Everything after the device exists: entry points, limits, memory types. */
static int device_setup(cm_vulkan_device_t *d, cm_diag_t *diag) {
  vk_api *a = &d->api;
  const char *missing = resolve_scope(a, S_DEVICE, d->instance, d->device);
  if (missing)
    return cm__diag_set(diag, CM_ENODEV, "the Vulkan device lacks the entry point %s", missing);
  if (d->info.buffer_device_address) {
    cmvk_void_fn f = NULL;
    if (d->info.api_version >= CMVK_API_VERSION_1_2)
      f = a->GetDeviceProcAddr(d->device, "vkGetBufferDeviceAddress");
    if (!f) f = a->GetDeviceProcAddr(d->device, "vkGetBufferDeviceAddressKHR");
    if (!f)
      return cm__diag_set(diag, CM_ENODEV,
                          "bufferDeviceAddress is enabled but vkGetBufferDeviceAddress is missing");
    memcpy(&a->GetBufferDeviceAddress, &f, sizeof f);
  }

  cmvk_maintenance3_properties m3 = {.s_type = CMVK_STYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES};
  cmvk_physical_device_properties2 p2 = {.s_type = CMVK_STYPE_PHYSICAL_DEVICE_PROPERTIES_2,
                                         .p_next = &m3};
  a->GetPhysicalDeviceProperties2(d->pd, &p2);
  const cmvk_physical_device_properties *p = &p2.properties;
  memcpy(d->name, p->device_name, sizeof d->name);
  d->name[sizeof d->name - 1] = '\0';
  d->info.vendor_id = p->vendor_id;
  d->info.device_id = p->device_id;
  d->info.max_allocation_count = read_u32(p->limits + CMVK_LIMITS_OFF_MAX_MEMORY_ALLOCATION_COUNT);
  d->info.min_storage_buffer_offset_alignment =
      read_u64(p->limits + CMVK_LIMITS_OFF_MIN_STORAGE_BUFFER_OFFSET_ALIGNMENT);
  d->info.max_allocation_size =
      m3.max_memory_allocation_size ? m3.max_memory_allocation_size : UINT64_MAX;
  if (d->info.max_allocation_count == 0) d->info.max_allocation_count = 4096; /* spec minimum */

  cmvk_physical_device_features2 f2 = {.s_type = CMVK_STYPE_PHYSICAL_DEVICE_FEATURES_2};
  a->GetPhysicalDeviceFeatures2(d->pd, &f2);
  d->info.sparse_binding = f2.features.f[CMVK_FEATURE_SPARSE_BINDING] != 0;
  d->info.sparse_residency_buffer = f2.features.f[CMVK_FEATURE_SPARSE_RESIDENCY_BUFFER] != 0;

  d->dev_usage = CMVK_BUFFER_USAGE_STORAGE_BUFFER | CMVK_BUFFER_USAGE_TRANSFER_SRC |
                 CMVK_BUFFER_USAGE_TRANSFER_DST;
  if (d->info.buffer_device_address) d->dev_usage |= CMVK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS;
  d->staging_usage = CMVK_BUFFER_USAGE_TRANSFER_SRC | CMVK_BUFFER_USAGE_TRANSFER_DST;

  /* Which memory types may back such buffers: ask a probe buffer of each kind. */
  uint32_t bits[2] = {0, 0};
  for (int k = 0; k < 2; k++) {
    cmvk_buffer_create_info bi = {.s_type = CMVK_STYPE_BUFFER_CREATE_INFO,
                                  .size = 4096,
                                  .usage = k ? d->staging_usage : d->dev_usage,
                                  .sharing_mode = CMVK_SHARING_MODE_EXCLUSIVE};
    cmvk_buffer b = 0;
    cmvk_result r = a->CreateBuffer(d->device, &bi, NULL, &b);
    if (r != CMVK_SUCCESS) return vk_error(diag, CM_ESTORAGE, r, "vkCreateBuffer (probe)");
    cmvk_memory_requirements req;
    memset(&req, 0, sizeof req);
    a->GetBufferMemoryRequirements(d->device, b, &req);
    a->DestroyBuffer(d->device, b, NULL);
    bits[k] = req.memory_type_bits;
  }
  cmvk_memory_properties2 mp2 = {.s_type = CMVK_STYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2};
  a->GetPhysicalDeviceMemoryProperties2(d->pd, &mp2);
  const cmvk_memory_properties *mp = &mp2.memory_properties;
  int t = pick_type(mp, bits[0], false), st = pick_type(mp, bits[1], true);
  if (t < 0)
    return cm__diag_set(diag, CM_ENODEV,
                        "Vulkan device %s has no device-local memory type for storage buffers",
                        d->name);
  if (st < 0)
    return cm__diag_set(diag, CM_ENODEV,
                        "Vulkan device %s has no host-visible coherent memory type for staging",
                        d->name);
  d->info.memory_type = (uint32_t)t;
  d->info.staging_memory_type = (uint32_t)st;
  d->info.heap = mp->memory_types[t].heap_index;
  d->info.staging_heap = mp->memory_types[st].heap_index;
  if (d->info.heap >= CMVK_MAX_MEMORY_HEAPS || d->info.staging_heap >= CMVK_MAX_MEMORY_HEAPS)
    return cm__diag_set(diag, CM_ENODEV, "Vulkan device %s reports a bad heap index", d->name);
  d->info.heap_size = mp->memory_heaps[d->info.heap].size;
  d->info.staging_heap_size = mp->memory_heaps[d->info.staging_heap].size;
  return CM_OK;
}

static int create_messenger(cm_vulkan_device_t *d, cm_diag_t *diag) {
  vk_api *a = &d->api;
  if (!a->CreateDebugUtilsMessengerEXT || !a->DestroyDebugUtilsMessengerEXT)
    return cm__diag_set(diag, CM_ENODEV,
                        "validation asked for but vkCreateDebugUtilsMessengerEXT "
                        "is missing");
  cmvk_messenger_create_info mi = {
      .s_type = CMVK_STYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
      .message_severity = CMVK_DEBUG_SEVERITY_WARNING | CMVK_DEBUG_SEVERITY_ERROR,
      .message_type =
          CMVK_DEBUG_TYPE_GENERAL | CMVK_DEBUG_TYPE_VALIDATION | CMVK_DEBUG_TYPE_PERFORMANCE,
      .user_callback = on_message,
      .user_data = d};
  cmvk_result r = a->CreateDebugUtilsMessengerEXT(d->instance, &mi, NULL, &d->messenger);
  if (r != CMVK_SUCCESS) return vk_error(diag, CM_ENODEV, r, "vkCreateDebugUtilsMessengerEXT");
  return CM_OK;
}

/* Destroy what an opened device created (reverse order). */
static void teardown_owned(cm_vulkan_device_t *d) {
  vk_api *a = &d->api;
  if (d->device) {
    (void)a->DeviceWaitIdle(d->device); /* nothing of ours may still run; failure changes nothing */
    a->DestroyDevice(d->device, NULL);
    d->device = NULL;
  }
  if (d->messenger) {
    a->DestroyDebugUtilsMessengerEXT(d->instance, d->messenger, NULL);
    d->messenger = 0;
  }
  if (d->instance) {
    a->DestroyInstance(d->instance, NULL);
    d->instance = NULL;
  }
}

static int open_instance(cm_vulkan_device_t *d, const cm_vulkan_open_options_t *o,
                         cm_diag_t *diag) {
  vk_api *a = &d->api;
  uint32_t loader_version = CMVK_MAKE_API_VERSION(1, 0, 0);
  if (a->EnumerateInstanceVersion) {
    cmvk_result r = a->EnumerateInstanceVersion(&loader_version);
    if (r != CMVK_SUCCESS) return vk_error(diag, CM_ENODEV, r, "vkEnumerateInstanceVersion");
  }
  if (loader_version < CMVK_API_VERSION_1_1)
    return cm__diag_set(diag, CM_ENODEV, "the Vulkan loader supports only %u.%u; cubemem needs 1.1",
                        CMVK_VERSION_MAJOR(loader_version), CMVK_VERSION_MINOR(loader_version));
  uint32_t api = loader_version;
  if (api > CMVK_MAKE_API_VERSION(1, 3, 0xfff)) api = CMVK_MAKE_API_VERSION(1, 3, 0);
  api &= ~0xfffu; /* patch version is not part of the request */

  const char *layers[1];
  const char *exts[1];
  uint32_t nlayers = 0, nexts = 0;
  if (o->validation) {
    uint32_t n = 0;
    cmvk_result r = a->EnumerateInstanceLayerProperties(&n, NULL);
    if (r != CMVK_SUCCESS)
      return vk_error(diag, CM_ENODEV, r, "vkEnumerateInstanceLayerProperties");
    cmvk_layer_properties *lp = calloc(n ? n : 1, sizeof *lp);
    if (!lp) return cm__diag_set(diag, CM_ENOMEM, "out of host memory listing Vulkan layers");
    r = a->EnumerateInstanceLayerProperties(&n, lp);
    bool found = false;
    for (uint32_t i = 0; r >= 0 && i < n; i++)
      if (!strncmp(lp[i].layer_name, CM_VK_VALIDATION_LAYER, sizeof lp[i].layer_name)) found = true;
    free(lp);
    if (r < 0) return vk_error(diag, CM_ENODEV, r, "vkEnumerateInstanceLayerProperties");
    if (!found)
      return cm__diag_set(diag, CM_ENODEV,
                          "Vulkan validation asked for (CM_VULKAN_VALIDATION or the options) but "
                          "%s is not installed (Debian: vulkan-validationlayers)",
                          CM_VK_VALIDATION_LAYER);
    layers[nlayers++] = CM_VK_VALIDATION_LAYER;
    exts[nexts++] = CM_VK_EXT_DEBUG_UTILS; /* provided by the layer, checked by vkCreateInstance */
  }
  cmvk_application_info app = {.s_type = CMVK_STYPE_APPLICATION_INFO,
                               .application_name = "cubemem",
                               .engine_name = "cubemem",
                               .api_version = api};
  /* The messenger chained here also sees vkCreateInstance / vkDestroyInstance. */
  cmvk_messenger_create_info mi = {
      .s_type = CMVK_STYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
      .message_severity = CMVK_DEBUG_SEVERITY_WARNING | CMVK_DEBUG_SEVERITY_ERROR,
      .message_type =
          CMVK_DEBUG_TYPE_GENERAL | CMVK_DEBUG_TYPE_VALIDATION | CMVK_DEBUG_TYPE_PERFORMANCE,
      .user_callback = on_message,
      .user_data = d};
  cmvk_instance_create_info ci = {.s_type = CMVK_STYPE_INSTANCE_CREATE_INFO,
                                  .p_next = o->validation ? &mi : NULL,
                                  .application_info = &app,
                                  .enabled_layer_count = nlayers,
                                  .enabled_layer_names = nlayers ? layers : NULL,
                                  .enabled_extension_count = nexts,
                                  .enabled_extension_names = nexts ? exts : NULL};
  cmvk_result r = a->CreateInstance(&ci, NULL, &d->instance);
  if (r != CMVK_SUCCESS) {
    d->instance = NULL;
    cm__diag_set(diag, CM_ENODEV,
                 "no usable Vulkan driver: vkCreateInstance failed: %s (VkResult %d)%s",
                 cm_vulkan_result_name(r), (int)r,
                 r == CMVK_ERROR_INCOMPATIBLE_DRIVER
                     ? " - no Vulkan 1.1 driver (ICD) is installed (e.g. mesa-vulkan-drivers)"
                     : "");
    if (diag) diag->native = r;
    return CM_ENODEV;
  }
  const char *missing = resolve_scope(a, S_INSTANCE, d->instance, NULL);
  if (missing) return cm__diag_set(diag, CM_ENODEV, "the Vulkan instance lacks %s", missing);
  if (o->validation) {
    int rc = create_messenger(d, diag);
    if (rc != CM_OK) return rc;
    d->info.validation = true;
  }
  return CM_OK;
}

static int open_device(cm_vulkan_device_t *d, int index, cm_diag_t *diag) {
  vk_api *a = &d->api;
  uint32_t n = 0;
  cmvk_result r = a->EnumeratePhysicalDevices(d->instance, &n, NULL);
  if (r != CMVK_SUCCESS) return vk_error(diag, CM_ENODEV, r, "vkEnumeratePhysicalDevices");
  if ((uint32_t)index >= n)
    return cm__diag_set(diag, CM_ENODEV, "Vulkan device %d not found: the loader sees %u device(s)",
                        index, n);
  cmvk_physical_device *pds = calloc(n, sizeof *pds);
  if (!pds) return cm__diag_set(diag, CM_ENOMEM, "out of host memory listing Vulkan devices");
  r = a->EnumeratePhysicalDevices(d->instance, &n, pds);
  if (r < 0 || (uint32_t)index >= n) {
    free(pds);
    return vk_error(diag, CM_ENODEV, r < 0 ? r : CMVK_INCOMPLETE, "vkEnumeratePhysicalDevices");
  }
  d->pd = pds[index];
  free(pds);

  cmvk_physical_device_properties2 p2 = {.s_type = CMVK_STYPE_PHYSICAL_DEVICE_PROPERTIES_2};
  a->GetPhysicalDeviceProperties2(d->pd, &p2);
  d->info.api_version = p2.properties.api_version;
  if (p2.properties.api_version < CMVK_API_VERSION_1_1)
    return cm__diag_set(diag, CM_ENODEV,
                        "Vulkan device %d (%.64s) supports only %u.%u; cubemem needs 1.1", index,
                        p2.properties.device_name, CMVK_VERSION_MAJOR(p2.properties.api_version),
                        CMVK_VERSION_MINOR(p2.properties.api_version));

  /* queue family: the first with compute */
  uint32_t nq = 0;
  a->GetPhysicalDeviceQueueFamilyProperties(d->pd, &nq, NULL);
  cmvk_queue_family_properties *qf = calloc(nq ? nq : 1, sizeof *qf);
  if (!qf) return cm__diag_set(diag, CM_ENOMEM, "out of host memory listing queue families");
  a->GetPhysicalDeviceQueueFamilyProperties(d->pd, &nq, qf);
  uint32_t family = UINT32_MAX;
  for (uint32_t i = 0; i < nq && family == UINT32_MAX; i++)
    if ((qf[i].queue_flags & CMVK_QUEUE_COMPUTE) && qf[i].queue_count > 0) family = i;
  free(qf);
  if (family == UINT32_MAX)
    return cm__diag_set(diag, CM_ENODEV, "Vulkan device %d (%.64s) has no compute queue", index,
                        p2.properties.device_name);
  d->info.queue_family = family;

  /* extensions and features */
  uint32_t ne = 0;
  r = a->EnumerateDeviceExtensionProperties(d->pd, NULL, &ne, NULL);
  if (r != CMVK_SUCCESS)
    return vk_error(diag, CM_ENODEV, r, "vkEnumerateDeviceExtensionProperties");
  cmvk_extension_properties *ep = calloc(ne ? ne : 1, sizeof *ep);
  if (!ep) return cm__diag_set(diag, CM_ENOMEM, "out of host memory listing device extensions");
  r = a->EnumerateDeviceExtensionProperties(d->pd, NULL, &ne, ep);
  if (r < 0) {
    free(ep);
    return vk_error(diag, CM_ENODEV, r, "vkEnumerateDeviceExtensionProperties");
  }
  bool budget = has_extension(ep, ne, CM_VK_EXT_MEMORY_BUDGET);
  bool khr_bda = has_extension(ep, ne, CM_VK_KHR_BDA);
  free(ep);
  bool core_bda = d->info.api_version >= CMVK_API_VERSION_1_2;
  cmvk_bda_features bda = {.s_type = CMVK_STYPE_PHYSICAL_DEVICE_BUFFER_DEVICE_ADDRESS_FEATURES};
  cmvk_physical_device_features2 f2 = {.s_type = CMVK_STYPE_PHYSICAL_DEVICE_FEATURES_2};
  if (core_bda || khr_bda) f2.p_next = &bda;
  a->GetPhysicalDeviceFeatures2(d->pd, &f2);
  bool use_bda = (core_bda || khr_bda) && bda.buffer_device_address;

  const char *exts[2];
  uint32_t nexts = 0;
  if (budget) exts[nexts++] = CM_VK_EXT_MEMORY_BUDGET;
  if (use_bda && !core_bda) exts[nexts++] = CM_VK_KHR_BDA;
  cmvk_bda_features enable_bda = {
      .s_type = CMVK_STYPE_PHYSICAL_DEVICE_BUFFER_DEVICE_ADDRESS_FEATURES,
      .buffer_device_address = 1};
  float prio = 1.0f;
  cmvk_device_queue_create_info qi = {.s_type = CMVK_STYPE_DEVICE_QUEUE_CREATE_INFO,
                                      .queue_family_index = family,
                                      .queue_count = 1,
                                      .queue_priorities = &prio};
  cmvk_device_create_info di = {.s_type = CMVK_STYPE_DEVICE_CREATE_INFO,
                                .p_next = use_bda ? &enable_bda : NULL,
                                .queue_create_info_count = 1,
                                .queue_create_infos = &qi,
                                .enabled_extension_count = nexts,
                                .enabled_extension_names = nexts ? exts : NULL};
  r = a->CreateDevice(d->pd, &di, NULL, &d->device);
  if (r != CMVK_SUCCESS) {
    d->device = NULL;
    return vk_error(diag, CM_ENODEV, r, "vkCreateDevice");
  }
  d->info.buffer_device_address = use_bda;
  d->info.memory_budget = budget;
  d->info.device_index = index;
  return CM_OK;
}

static int parse_index(int index, int *out, cm_diag_t *diag) {
  if (index >= 0) {
    *out = index;
    return CM_OK;
  }
  const char *env = secure_getenv("CM_VULKAN_DEVICE");
  if (!env || !*env) {
    *out = 0;
    return CM_OK;
  }
  char *end = NULL;
  long v = strtol(env, &end, 10);
  if (*end != '\0' || v < 0 || v > 1024)
    return cm__diag_set(diag, CM_EINVAL, "CM_VULKAN_DEVICE=\"%s\" is not a device index", env);
  *out = (int)v;
  return CM_OK;
}

int cm_vulkan_device_open(const cm_vulkan_open_options_t *opts, cm_vulkan_device_t **out,
                          cm_diag_t *diag) {
  if (!out) return cm__diag_set(diag, CM_EINVAL, "cm_vulkan_device_open: out is NULL");
  *out = NULL;
  cm_vulkan_open_options_t o;
  if (opts)
    o = *opts;
  else
    cm_vulkan_open_options_init(&o);
  int index = 0;
  int rc = parse_index(o.device_index, &index, diag);
  if (rc != CM_OK) return rc;
  cm_vulkan_device_t *d = device_new();
  if (!d) return cm__diag_set(diag, CM_ENOMEM, "out of host memory opening a Vulkan device");
  d->owned = true;
  d->info.owned = true;
  d->print_messages = o.print_messages;
  rc = load_loader(d, o.library, NULL, diag);
  if (rc == CM_OK) rc = open_instance(d, &o, diag);
  if (rc == CM_OK) rc = open_device(d, index, diag);
  if (rc == CM_OK) rc = device_setup(d, diag);
  if (rc == CM_OK) {
    d->api.GetDeviceQueue(d->device, d->info.queue_family, 0, &d->queue);
    if (!d->queue) rc = cm__diag_set(diag, CM_ENODEV, "vkGetDeviceQueue returned no queue");
  }
  if (rc != CM_OK) {
    if (d->instance)
      teardown_owned(d); /* the loader stays loaded: drivers ran */
    else if (d->lib)
      dlclose(d->lib); /* no instance: nothing was initialised */
    device_free(d);
    return rc;
  }
  *out = d;
  return CM_OK;
}

int cm_vulkan_device_wrap(const cm_vulkan_external_t *ext, cm_vulkan_device_t **out,
                          cm_diag_t *diag) {
  if (!out) return cm__diag_set(diag, CM_EINVAL, "cm_vulkan_device_wrap: out is NULL");
  *out = NULL;
  if (!ext) return cm__diag_set(diag, CM_EINVAL, "cm_vulkan_device_wrap: ext is NULL");
  if (!ext->instance || !ext->physical_device || !ext->device)
    return cm__diag_set(diag, CM_EINVAL,
                        "cm_vulkan_device_wrap: instance, physical_device and device are required");
  uint32_t api = ext->api_version ? ext->api_version : CMVK_API_VERSION_1_1;
  if (api < CMVK_API_VERSION_1_1)
    return cm__diag_set(diag, CM_EINVAL, "cm_vulkan_device_wrap: api_version %u.%u is below 1.1",
                        CMVK_VERSION_MAJOR(api), CMVK_VERSION_MINOR(api));
  cm_vulkan_device_t *d = device_new();
  if (!d) return cm__diag_set(diag, CM_ENOMEM, "out of host memory wrapping a Vulkan device");
  d->instance = ext->instance;
  d->pd = ext->physical_device;
  d->device = ext->device;
  d->queue = ext->queue;
  d->info.queue_family = ext->queue_family;
  d->info.device_index = -1;
  d->info.buffer_device_address = ext->buffer_device_address;
  d->info.memory_budget = ext->memory_budget;
  int rc = load_loader(d, NULL, ext->get_instance_proc_addr, diag);
  const char *missing = NULL;
  if (rc == CM_OK && (missing = resolve_scope(&d->api, S_INSTANCE, d->instance, NULL)))
    rc = cm__diag_set(diag, CM_ENODEV, "the Vulkan instance lacks %s", missing);
  if (rc == CM_OK) {
    cmvk_physical_device_properties2 p2 = {.s_type = CMVK_STYPE_PHYSICAL_DEVICE_PROPERTIES_2};
    d->api.GetPhysicalDeviceProperties2(d->pd, &p2);
    uint32_t dev_api = p2.properties.api_version;
    d->info.api_version = dev_api < api ? dev_api : api; /* what the application may use */
    if (dev_api < CMVK_API_VERSION_1_1)
      rc = cm__diag_set(diag, CM_ENODEV, "the Vulkan device supports only %u.%u; cubemem needs 1.1",
                        CMVK_VERSION_MAJOR(dev_api), CMVK_VERSION_MINOR(dev_api));
    uint32_t nq = 0;
    if (rc == CM_OK) d->api.GetPhysicalDeviceQueueFamilyProperties(d->pd, &nq, NULL);
    if (rc == CM_OK && ext->queue_family >= nq)
      rc = cm__diag_set(diag, CM_EINVAL, "queue family %u out of range (the device has %u)",
                        ext->queue_family, nq);
  }
  if (rc == CM_OK) rc = device_setup(d, diag);
  if (rc != CM_OK) {
    device_free(d); /* the loader stays loaded: the application's instance uses it */
    return rc;
  }
  *out = d;
  return CM_OK;
}

static void device_ref(cm_vulkan_device_t *d) { atomic_fetch_add(&d->refs, 1); }

static void device_unref(cm_vulkan_device_t *d) {
  if (!d) return;
  if (atomic_fetch_sub(&d->refs, 1) != 1) return;
  if (d->owned) teardown_owned(d);
  device_free(d); /* d->lib stays loaded: see the header comment */
}

void cm_vulkan_device_close(cm_vulkan_device_t *dev) { device_unref(dev); }

void cm_vulkan_device_info(const cm_vulkan_device_t *dev, cm_vulkan_info_t *out) {
  if (!out) return;
  if (!dev) {
    memset(out, 0, sizeof *out);
    return;
  }
  *out = dev->info;
}

const char *cm_vulkan_device_name(const cm_vulkan_device_t *dev) { return dev ? dev->name : ""; }

cm_device_props_t cm_vulkan_device_props(const cm_vulkan_device_t *dev) {
  cm_device_props_t p = {0, 512};
  if (!dev) return p;
  p.max_page_size = dev->info.heap_size / 4;
  if (p.max_page_size > dev->info.max_allocation_size)
    p.max_page_size = dev->info.max_allocation_size;
  uint64_t a = dev->info.min_storage_buffer_offset_alignment;
  while (p.alignment < a) p.alignment *= 2;
  return p;
}

void cm_vulkan_device_handles(const cm_vulkan_device_t *dev, cm_vulkan_handles_t *out) {
  if (!out) return;
  memset(out, 0, sizeof *out);
  if (!dev) return;
  out->instance = dev->instance;
  out->physical_device = dev->pd;
  out->device = dev->device;
  out->queue = dev->queue;
  out->queue_family = dev->info.queue_family;
  memcpy(&out->get_instance_proc_addr, &dev->api.GetInstanceProcAddr, sizeof(void *));
  memcpy(&out->get_device_proc_addr, &dev->api.GetDeviceProcAddr, sizeof(void *));
}

uint64_t cm_vulkan_device_messages(const cm_vulkan_device_t *dev) {
  return dev ? atomic_load(&dev->messages) : 0;
}

void cm_vulkan_device_last_message(cm_vulkan_device_t *dev, char *buf, size_t cap) {
  if (!buf || !cap) return;
  buf[0] = '\0';
  if (!dev) return;
  pthread_mutex_lock(&dev->msg_lock);
  snprintf(buf, cap, "%s", dev->last_message);
  pthread_mutex_unlock(&dev->msg_lock);
}

/* Budget left in `heap` (UINT64_MAX without VK_EXT_memory_budget). */
static uint64_t budget_left(cm_vulkan_device_t *d, uint32_t heap) {
  if (!d->info.memory_budget) return UINT64_MAX;
  cmvk_memory_budget b = {.s_type = CMVK_STYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT};
  cmvk_memory_properties2 mp2 = {.s_type = CMVK_STYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2,
                                 .p_next = &b};
  d->api.GetPhysicalDeviceMemoryProperties2(d->pd, &mp2);
  if (b.heap_budget[heap] == 0) return UINT64_MAX; /* not reported */
  return b.heap_usage[heap] >= b.heap_budget[heap] ? 0 : b.heap_budget[heap] - b.heap_usage[heap];
}

int cm_vulkan_device_mem_info(cm_vulkan_device_t *dev, uint64_t *free_bytes, uint64_t *total_bytes,
                              cm_diag_t *diag) {
  if (!dev) return cm__diag_set(diag, CM_EINVAL, "cm_vulkan_device_mem_info: device is NULL");
  uint64_t total = dev->info.heap_size, used = atomic_load(&dev->heap_used[dev->info.heap]);
  uint64_t f = used >= total ? 0 : total - used;
  uint64_t b = budget_left(dev, dev->info.heap);
  if (b < f) f = b;
  if (free_bytes) *free_bytes = f;
  if (total_bytes) *total_bytes = total;
  return CM_OK;
}

/* ---- storages ----------------------------------------------------------------------------- */

typedef struct block {
  uint64_t id;
  cmvk_device_memory mem; /* 0 for a zero-byte allocation */
  cmvk_buffer buf;
  uint64_t size;  /* requested */
  uint64_t bytes; /* allocationSize */
  uint64_t address;
  void *host;
  bool pending;
  struct block *next;
} block;

typedef struct vk_storage {
  cm_vulkan_device_t *dev;
  bool staging;
  uint32_t type, heap;
  uint64_t heap_size;
  cmvk_flags usage;
  uint64_t capacity;   /* 0 = none */
  uint64_t max_allocs; /* device-wide live allocation limit */
  uint64_t next_id;
  cm__u64map blocks;
  block *pending;
  _Atomic uint64_t live, bytes, bytes_peak, npending, refusals, free_errors;
} vk_storage;

static uint64_t st_alignment(void *ctx) {
  vk_storage *s = ctx;
  return cm_vulkan_device_props(s->dev).alignment;
}

static int refuse(vk_storage *s, cm_diag_t *diag, uint64_t size, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int refuse(vk_storage *s, cm_diag_t *diag, uint64_t size, const char *fmt, ...) {
  atomic_fetch_add(&s->refusals, 1);
  char why[160];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  return cm__diag_set(diag, CM_EOOM, "device out of memory allocating %" PRIu64 " bytes: %s", size,
                      why);
}

/* Reserve `n` of `counter` up to `limit`; false when it would exceed it. */
static bool reserve_counter(_Atomic uint64_t *counter, uint64_t n, uint64_t limit) {
  uint64_t cur = atomic_load(counter);
  do {
    if (cur > limit || n > limit - cur) return false;
  } while (!atomic_compare_exchange_weak(counter, &cur, cur + n));
  return true;
}

static void destroy_block_objects(vk_storage *s, block *b) {
  const vk_api *a = &s->dev->api;
  if (!b->mem) return;
  if (b->host) a->UnmapMemory(s->dev->device, b->mem);
  a->DestroyBuffer(s->dev->device, b->buf, NULL);
  a->FreeMemory(s->dev->device, b->mem, NULL);
  atomic_fetch_sub(&s->dev->heap_used[s->heap], b->bytes);
  atomic_fetch_sub(&s->dev->live_allocs, 1);
  atomic_fetch_sub(&s->live, 1);
  atomic_fetch_sub(&s->bytes, b->bytes);
  b->mem = 0;
}

static int alloc_error(cm_diag_t *diag, cmvk_result r, uint64_t size, const char *what) {
  if (r == CMVK_ERROR_OUT_OF_DEVICE_MEMORY || r == CMVK_ERROR_TOO_MANY_OBJECTS) {
    cm__diag_set(diag, CM_EOOM, "device out of memory allocating %" PRIu64 " bytes: %s returned %s",
                 size, what, cm_vulkan_result_name(r));
    if (diag) diag->native = r;
    return CM_EOOM;
  }
  char w[96];
  snprintf(w, sizeof w, "%s for %" PRIu64 " bytes", what, size);
  return vk_error(diag, r == CMVK_ERROR_OUT_OF_HOST_MEMORY ? CM_ENOMEM : CM_ESTORAGE, r, w);
}

/* Create the Vulkan objects of a block of `size` > 0 bytes. */
static int make_block(vk_storage *s, block *b, uint64_t size, cm_diag_t *diag) {
  cm_vulkan_device_t *d = s->dev;
  const vk_api *a = &d->api;
  if (size > d->info.max_allocation_size)
    return refuse(s, diag, size, "more than maxMemoryAllocationSize (%" PRIu64 " bytes)",
                  d->info.max_allocation_size);
  if (s->capacity && (size > s->capacity || atomic_load(&s->bytes) > s->capacity - size))
    return refuse(s, diag, size, "the storage's capacity of %" PRIu64 " bytes would be exceeded",
                  s->capacity);
  cmvk_buffer_create_info bi = {.s_type = CMVK_STYPE_BUFFER_CREATE_INFO,
                                .size = size,
                                .usage = s->usage,
                                .sharing_mode = CMVK_SHARING_MODE_EXCLUSIVE};
  cmvk_result r = a->CreateBuffer(d->device, &bi, NULL, &b->buf);
  if (r != CMVK_SUCCESS) return alloc_error(diag, r, size, "vkCreateBuffer");
  cmvk_memory_requirements req;
  memset(&req, 0, sizeof req);
  a->GetBufferMemoryRequirements(d->device, b->buf, &req);
  int rc = CM_OK;
  uint64_t bytes = req.size < size ? size : req.size;
  if (!(req.memory_type_bits & (1u << s->type))) {
    rc = cm__diag_set(diag, CM_ESTORAGE,
                      "a buffer of %" PRIu64 " bytes cannot use memory type %u (allowed mask 0x%x)",
                      size, s->type, req.memory_type_bits);
    goto fail_buffer;
  }
  if (bytes > d->info.max_allocation_size) {
    rc = refuse(s, diag, size, "more than maxMemoryAllocationSize (%" PRIu64 " bytes)",
                d->info.max_allocation_size);
    goto fail_buffer;
  }
  if (!reserve_counter(&d->live_allocs, 1, s->max_allocs)) {
    rc = refuse(s, diag, size, "maxMemoryAllocationCount (%" PRIu64 ") allocations are live",
                s->max_allocs);
    goto fail_buffer;
  }
  if (!reserve_counter(&d->heap_used[s->heap], bytes, s->heap_size)) {
    rc = refuse(s, diag, size, "the memory heap of %" PRIu64 " bytes is full", s->heap_size);
    goto fail_count;
  }
  uint64_t left = budget_left(d, s->heap);
  if (bytes > left) {
    rc = refuse(s, diag, size,
                "the memory budget (VK_EXT_memory_budget) has %" PRIu64 " bytes left", left);
    goto fail_heap;
  }
  cmvk_memory_allocate_flags_info fi = {.s_type = CMVK_STYPE_MEMORY_ALLOCATE_FLAGS_INFO,
                                        .flags = CMVK_MEMORY_ALLOCATE_DEVICE_ADDRESS};
  bool bda = !s->staging && d->info.buffer_device_address;
  cmvk_memory_allocate_info mi = {.s_type = CMVK_STYPE_MEMORY_ALLOCATE_INFO,
                                  .p_next = bda ? &fi : NULL,
                                  .allocation_size = bytes,
                                  .memory_type_index = s->type};
  r = a->AllocateMemory(d->device, &mi, NULL, &b->mem);
  if (r != CMVK_SUCCESS) {
    b->mem = 0;
    rc = alloc_error(diag, r, size, "vkAllocateMemory");
    goto fail_heap;
  }
  r = a->BindBufferMemory(d->device, b->buf, b->mem, 0);
  if (r != CMVK_SUCCESS) {
    rc = alloc_error(diag, r, size, "vkBindBufferMemory");
    goto fail_mem;
  }
  if (s->staging) {
    r = a->MapMemory(d->device, b->mem, 0, CMVK_WHOLE_SIZE, 0, &b->host);
    if (r != CMVK_SUCCESS || !b->host) {
      b->host = NULL;
      rc = alloc_error(diag, r != CMVK_SUCCESS ? r : CMVK_ERROR_MEMORY_MAP_FAILED, size,
                       "vkMapMemory");
      goto fail_mem;
    }
  } else if (bda) {
    cmvk_buffer_device_address_info ai = {.s_type = CMVK_STYPE_BUFFER_DEVICE_ADDRESS_INFO,
                                          .buffer = b->buf};
    b->address = a->GetBufferDeviceAddress(d->device, &ai);
    if (!b->address) {
      rc = cm__diag_set(diag, CM_ESTORAGE,
                        "vkGetBufferDeviceAddress returned 0 for %" PRIu64 " bytes", size);
      goto fail_mem;
    }
  }
  b->bytes = bytes;
  atomic_fetch_add(&s->live, 1);
  uint64_t now = atomic_fetch_add(&s->bytes, bytes) + bytes;
  uint64_t peak = atomic_load(&s->bytes_peak);
  while (now > peak && !atomic_compare_exchange_weak(&s->bytes_peak, &peak, now)) {
  }
  return CM_OK;
fail_mem:
  a->FreeMemory(d->device, b->mem, NULL);
  b->mem = 0;
fail_heap:
  atomic_fetch_sub(&d->heap_used[s->heap], bytes);
fail_count:
  atomic_fetch_sub(&d->live_allocs, 1);
fail_buffer:
  a->DestroyBuffer(d->device, b->buf, NULL);
  b->buf = 0;
  return rc;
}

static int st_alloc(void *ctx, uint64_t size, uint64_t *out_id, cm_diag_t *diag) {
  vk_storage *s = ctx;
  block *b = calloc(1, sizeof *b);
  if (!b) return cm__diag_set(diag, CM_ENOMEM, "out of host memory for an allocation record");
  b->size = size;
  if (size > 0) {
    int rc = make_block(s, b, size, diag);
    if (rc != CM_OK) {
      free(b);
      return rc;
    }
  }
  b->id = s->next_id;
  if (cm__u64map_put(&s->blocks, b->id, b) != CM_OK) {
    destroy_block_objects(s, b);
    free(b);
    return cm__diag_set(diag, CM_ENOMEM, "out of host memory for an allocation record");
  }
  s->next_id++;
  *out_id = b->id;
  return CM_OK;
}

/* Wait until the device's queue has finished everything submitted so far. */
static int wait_queue(cm_vulkan_device_t *d, cm_diag_t *diag) {
  if (!d->queue) return CM_OK;
  pthread_mutex_lock(&d->queue_lock);
  cmvk_result r = d->api.QueueWaitIdle(d->queue);
  pthread_mutex_unlock(&d->queue_lock);
  if (r != CMVK_SUCCESS) return vk_error(diag, CM_ESTORAGE, r, "vkQueueWaitIdle");
  return CM_OK;
}

static void dev_dealloc(void *ctx, uint64_t id) {
  vk_storage *s = ctx;
  block *b = cm__u64map_get(&s->blocks, id);
  if (!b || b->pending) return; /* unknown ids are ignored (storage.h) */
  b->pending = true;
  b->next = s->pending;
  s->pending = b;
  atomic_fetch_add(&s->npending, 1);
}

static int dev_flush(void *ctx) {
  vk_storage *s = ctx;
  if (!s->pending) return CM_OK;
  /* Work queued before the frees may still read or write the memory. If the
   * wait fails (device lost) the memory is freed anyway - nothing can run on
   * a lost device - and the failure is reported. */
  int rc = wait_queue(s->dev, NULL);
  if (rc != CM_OK) atomic_fetch_add(&s->free_errors, 1);
  block *b = s->pending;
  s->pending = NULL;
  while (b) {
    block *next = b->next;
    (void)cm__u64map_remove(&s->blocks, b->id);
    destroy_block_objects(s, b);
    free(b);
    atomic_fetch_sub(&s->npending, 1);
    b = next;
  }
  return rc;
}

static void staging_dealloc(void *ctx, uint64_t id) {
  vk_storage *s = ctx;
  block *b = cm__u64map_remove(&s->blocks, id);
  if (!b) return;
  destroy_block_objects(s, b);
  free(b);
}

static int st_get(void *ctx, uint64_t id, uint64_t offset, uint64_t size, cm_resource_t *out,
                  cm_diag_t *diag) {
  vk_storage *s = ctx;
  block *b = cm__u64map_get(&s->blocks, id);
  if (!b)
    return cm__diag_set(diag, CM_EHANDLE, "StorageId(%" PRIu64 ") in the %s storage", id,
                        s->staging ? "vulkan-staging" : "vulkan");
  if (offset > b->size || size > b->size - offset)
    return cm__diag_set(diag, CM_EINVAL,
                        "range [%" PRIu64 ", +%" PRIu64 ") is outside StorageId(%" PRIu64
                        ") of %" PRIu64 " bytes",
                        offset, size, id, b->size);
  if (s->staging) {
    out->host = b->host ? (char *)b->host + offset : NULL;
    out->addr = (uint64_t)(uintptr_t)out->host;
  } else {
    out->host = NULL;
    out->addr = b->address ? b->address + offset : 0;
  }
  out->size = size;
  return CM_OK;
}

static void st_release(void *ctx) {
  vk_storage *s = ctx;
  bool any = false;
  for (size_t i = 0; i < s->blocks.cap; i++)
    if (s->blocks.slots[i].key && ((block *)s->blocks.slots[i].value)->mem) any = true;
  if (any && !s->staging && wait_queue(s->dev, NULL) != CM_OK)
    atomic_fetch_add(&s->free_errors, 1); /* freed anyway: see dev_flush */
  for (size_t i = 0; i < s->blocks.cap; i++) {
    block *b = s->blocks.slots[i].value;
    if (!s->blocks.slots[i].key || !b) continue;
    destroy_block_objects(s, b);
    free(b);
  }
  cm__u64map_free(&s->blocks);
  device_unref(s->dev);
  free(s);
}

/* events: a fence signalled by an empty submission after the work queued so far */
static int dev_event_record(void *ctx, void **out_event, cm_diag_t *diag) {
  vk_storage *s = ctx;
  cm_vulkan_device_t *d = s->dev;
  if (!out_event) return cm__diag_set(diag, CM_EINVAL, "event_record: out_event is NULL");
  *out_event = NULL;
  if (!d->queue) return CM_OK; /* no queue: nothing to order (vulkan.h) */
  cmvk_fence_create_info fi = {.s_type = CMVK_STYPE_FENCE_CREATE_INFO};
  cmvk_fence f = 0;
  cmvk_result r = d->api.CreateFence(d->device, &fi, NULL, &f);
  if (r != CMVK_SUCCESS) return vk_error(diag, CM_ESTORAGE, r, "vkCreateFence");
  pthread_mutex_lock(&d->queue_lock);
  r = d->api.QueueSubmit(d->queue, 0, NULL, f);
  pthread_mutex_unlock(&d->queue_lock);
  if (r != CMVK_SUCCESS) {
    d->api.DestroyFence(d->device, f, NULL);
    return vk_error(diag, CM_ESTORAGE, r, "vkQueueSubmit (event)");
  }
  *out_event = (void *)(uintptr_t)f;
  return CM_OK;
}

static int dev_event_query(void *ctx, void *event) {
  vk_storage *s = ctx;
  if (!event) return 1;
  cmvk_result r = s->dev->api.GetFenceStatus(s->dev->device, (cmvk_fence)(uintptr_t)event);
  if (r == CMVK_SUCCESS) return 1;
  if (r == CMVK_NOT_READY) return 0;
  return CM_ESTORAGE;
}

static int dev_event_sync(void *ctx, void *event) {
  vk_storage *s = ctx;
  if (!event) return CM_OK;
  cmvk_fence f = (cmvk_fence)(uintptr_t)event;
  cmvk_result r = s->dev->api.WaitForFences(s->dev->device, 1, &f, 1, UINT64_MAX);
  return r == CMVK_SUCCESS ? CM_OK : CM_ESTORAGE;
}

static void dev_event_destroy(void *ctx, void *event) {
  vk_storage *s = ctx;
  if (!event) return;
  cmvk_fence f = (cmvk_fence)(uintptr_t)event;
  /* Vulkan forbids destroying a fence that a pending submission still
   * signals (CUDA allows destroying a pending event): wait first. A failed
   * wait means the device is lost, when nothing is pending any more, so the
   * fence is destroyed either way; there is no caller to report to. */
  if (s->dev->api.GetFenceStatus(s->dev->device, f) == CMVK_NOT_READY)
    (void)s->dev->api.WaitForFences(s->dev->device, 1, &f, 1, UINT64_MAX);
  s->dev->api.DestroyFence(s->dev->device, f, NULL);
}

static int st_mem_info(void *ctx, uint64_t *free_bytes, uint64_t *total_bytes) {
  vk_storage *s = ctx;
  uint64_t total = s->heap_size, used = atomic_load(&s->dev->heap_used[s->heap]);
  uint64_t f = used >= total ? 0 : total - used;
  uint64_t b = budget_left(s->dev, s->heap);
  if (b < f) f = b;
  if (s->capacity) {
    uint64_t mine = atomic_load(&s->bytes);
    uint64_t c = mine >= s->capacity ? 0 : s->capacity - mine;
    if (c < f) f = c;
    if (s->capacity < total) total = s->capacity;
  }
  if (free_bytes) *free_bytes = f;
  if (total_bytes) *total_bytes = total;
  return CM_OK;
}

static const cm_storage_ops_t k_vulkan_ops = {
    .name = "vulkan",
    .alignment = st_alignment,
    .alloc = st_alloc,
    .dealloc = dev_dealloc,
    .flush = dev_flush,
    .get = st_get,
    .release = st_release,
    .event_record = dev_event_record,
    .event_query = dev_event_query,
    .event_sync = dev_event_sync,
    .event_destroy = dev_event_destroy,
    .mem_info = st_mem_info,
    /* no vm_*: see the header comment (sparse binding is not offered) */
};

static const cm_storage_ops_t k_staging_ops = {
    .name = "vulkan-staging",
    .alignment = st_alignment,
    .alloc = st_alloc,
    .dealloc = staging_dealloc,
    .get = st_get,
    .release = st_release,
    .mem_info = st_mem_info,
};

static int make_storage(cm_vulkan_device_t *dev, const cm_vulkan_storage_options_t *opts,
                        bool staging, cm_storage_t **out, cm_diag_t *diag) {
  if (!out) return cm__diag_set(diag, CM_EINVAL, "Vulkan storage: out is NULL");
  *out = NULL;
  if (!dev) return cm__diag_set(diag, CM_EINVAL, "Vulkan storage: device is NULL");
  vk_storage *s = calloc(1, sizeof *s);
  if (!s) return cm__diag_set(diag, CM_ENOMEM, "out of host memory creating a Vulkan storage");
  s->dev = dev;
  s->staging = staging;
  s->type = staging ? dev->info.staging_memory_type : dev->info.memory_type;
  s->heap = staging ? dev->info.staging_heap : dev->info.heap;
  s->heap_size = staging ? dev->info.staging_heap_size : dev->info.heap_size;
  s->usage = staging ? dev->staging_usage : dev->dev_usage;
  s->capacity = opts ? opts->capacity : 0;
  s->max_allocs = dev->info.max_allocation_count;
  if (opts && opts->max_allocations && opts->max_allocations < s->max_allocs)
    s->max_allocs = opts->max_allocations;
  s->next_id = 1;
  cm__u64map_init(&s->blocks);
  cm_storage_t *st = NULL;
  int rc = cm_storage_create(staging ? &k_staging_ops : &k_vulkan_ops, s, &st);
  if (rc != CM_OK) {
    free(s);
    return cm__diag_set(diag, rc, "cannot wrap the Vulkan storage: %s", cm_strerror(rc));
  }
  cm_storage_set_timing(st, true); /* report the time spent in Vulkan calls */
  device_ref(dev);
  *out = st;
  return CM_OK;
}

int cm_vulkan_storage_create(cm_vulkan_device_t *dev, const cm_vulkan_storage_options_t *opts,
                             cm_storage_t **out, cm_diag_t *diag) {
  return make_storage(dev, opts, false, out, diag);
}

int cm_vulkan_staging_storage_create(cm_vulkan_device_t *dev,
                                     const cm_vulkan_storage_options_t *opts, cm_storage_t **out,
                                     cm_diag_t *diag) {
  return make_storage(dev, opts, true, out, diag);
}

int cm_vulkan_storage_factory(void *arg, uint64_t stream, cm_storage_t **out, cm_diag_t *diag) {
  (void)stream;
  return cm_vulkan_storage_create(arg, NULL, out, diag);
}

int cm_vulkan_staging_factory(void *arg, uint64_t stream, cm_storage_t **out, cm_diag_t *diag) {
  (void)stream;
  return cm_vulkan_staging_storage_create(arg, NULL, out, diag);
}

int cm_vulkan_storage_open_default(int index, cm_storage_t **out, cm_device_props_t *props,
                                   cm_diag_t *diag) {
  if (!out) return cm__diag_set(diag, CM_EINVAL, "cm_vulkan_storage_open_default: out is NULL");
  *out = NULL;
  cm_vulkan_open_options_t o;
  cm_vulkan_open_options_init(&o);
  o.device_index = index;
  cm_vulkan_device_t *dev = NULL;
  int rc = cm_vulkan_device_open(&o, &dev, diag);
  if (rc != CM_OK) return rc;
  rc = cm_vulkan_storage_create(dev, NULL, out, diag);
  if (rc == CM_OK && props) *props = cm_vulkan_device_props(dev);
  cm_vulkan_device_close(dev); /* the storage keeps its own reference */
  return rc;
}

static bool is_vulkan(const cm_storage_t *s) {
  return s && (s->ops == &k_vulkan_ops || s->ops == &k_staging_ops);
}

int cm_vulkan_storage_resolve(const cm_storage_t *st, uint64_t id, uint64_t offset, uint64_t size,
                              cm_vulkan_slice_t *out, cm_diag_t *diag) {
  if (!out) return cm__diag_set(diag, CM_EINVAL, "cm_vulkan_storage_resolve: out is NULL");
  memset(out, 0, sizeof *out);
  if (!is_vulkan(st))
    return cm__diag_set(diag, CM_EINVAL,
                        "cm_vulkan_storage_resolve: the %s storage is not a "
                        "Vulkan storage",
                        st ? cm_storage_name(st) : "NULL");
  const vk_storage *s = st->ctx;
  const block *b = cm__u64map_get(&s->blocks, id);
  if (!b)
    return cm__diag_set(diag, CM_EHANDLE, "StorageId(%" PRIu64 ") in the %s storage", id,
                        s->staging ? "vulkan-staging" : "vulkan");
  if (offset > b->size || size > b->size - offset)
    return cm__diag_set(diag, CM_EINVAL,
                        "range [%" PRIu64 ", +%" PRIu64 ") is outside StorageId(%" PRIu64
                        ") of %" PRIu64 " bytes",
                        offset, size, id, b->size);
  out->buffer = b->buf;
  out->memory = b->mem;
  out->offset = offset;
  out->size = size;
  out->device_address = b->address ? b->address + offset : 0;
  out->host = b->host ? (char *)b->host + offset : NULL;
  return CM_OK;
}

int cm_vulkan_resolve_binding(cm_manager_t *m, cm_binding_t bind, cm_vulkan_slice_t *out,
                              cm_diag_t *diag) {
  if (!m || !out) return cm__diag_set(diag, CM_EINVAL, "cm_vulkan_resolve_binding: NULL argument");
  cm_storage_handle_t h;
  int rc = cm_manager_get_storage(m, bind, &h, diag);
  if (rc != CM_OK) return rc;
  return cm_vulkan_storage_resolve(cm_manager_storage(m), h.id, h.offset, h.size, out, diag);
}

void cm_vulkan_storage_counters(const cm_storage_t *st, cm_vulkan_storage_counters_t *out) {
  if (!out) return;
  memset(out, 0, sizeof *out);
  if (!is_vulkan(st)) return;
  const vk_storage *s = st->ctx;
  out->live = atomic_load(&s->live);
  out->bytes = atomic_load(&s->bytes);
  out->bytes_peak = atomic_load(&s->bytes_peak);
  out->pending = atomic_load(&s->npending);
  out->limit_refusals = atomic_load(&s->refusals);
  out->free_errors = atomic_load(&s->free_errors);
}
