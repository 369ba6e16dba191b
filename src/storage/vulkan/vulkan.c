/*
 * vulkan.c - Vulkan device and staging storages, with the loader loaded at run
 * time (cubemem/vulkan.h): the loader and entry points, validation messages,
 * and the device (open, wrap, close, properties). The storages are in
 * vulkan_storage.c; what the two share is in vulkan_internal.h.
 *
 * Loading. A device owns a table of entry points: the global ones from
 * vkGetInstanceProcAddr(NULL, ...), the instance ones from
 * vkGetInstanceProcAddr(instance, ...) and the device ones from
 * vkGetDeviceProcAddr(device, ...) (no loader trampolines on the hot path).
 * vkGetInstanceProcAddr itself comes from dlopen(CM_VULKAN_LIBRARY or
 * "libvulkan.so.1") or from the application. The ABI is declared by hand in
 * storage/vulkan/vk_abi.h. The library is not dlclose'd once an instance exists,
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
 * Exports: cm_vulkan_* (cubemem/vulkan.h), with vulkan_storage.c.
 */
#include "cubemem/vulkan.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "storage/vulkan/vk_abi.h"
#include "storage/vulkan/vulkan_internal.h"

#define CM_VULKAN_DEFAULT_LIBRARY "libvulkan.so.1"
#define CM_VK_VALIDATION_LAYER "VK_LAYER_KHRONOS_validation"
#define CM_VK_EXT_DEBUG_UTILS "VK_EXT_debug_utils"
#define CM_VK_EXT_MEMORY_BUDGET "VK_EXT_memory_budget"
#define CM_VK_KHR_BDA "VK_KHR_buffer_device_address"

/* ---- entry points ---------------------------------------------------------------- */

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
    SYM(CreateCommandPool, S_DEVICE, false),
    SYM(DestroyCommandPool, S_DEVICE, false),
    SYM(AllocateCommandBuffers, S_DEVICE, false),
    SYM(BeginCommandBuffer, S_DEVICE, false),
    SYM(EndCommandBuffer, S_DEVICE, false),
    SYM(ResetCommandBuffer, S_DEVICE, false),
    SYM(CmdCopyBuffer, S_DEVICE, false),
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

int cm__vk_error(cm_diag_t *diag, int code, cmvk_result r, const char *what) {
  cm__diag_set(diag, code, "%s failed: %s (VkResult %d)", what, cm_vulkan_result_name(r), (int)r);
  if (diag) diag->native = r;
  return code;
}

/* ---- messages ------------------------------------------------------------------------- */

static _Atomic uint64_t g_messages_total;

uint64_t cm_vulkan_messages_total(void) { return atomic_load(&g_messages_total); }

/* ---- device ---------------------------------------------------------------------------- */
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
    if (r != CMVK_SUCCESS) return cm__vk_error(diag, CM_ESTORAGE, r, "vkCreateBuffer (probe)");
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
  if (r != CMVK_SUCCESS) return cm__vk_error(diag, CM_ENODEV, r, "vkCreateDebugUtilsMessengerEXT");
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
    if (r != CMVK_SUCCESS) return cm__vk_error(diag, CM_ENODEV, r, "vkEnumerateInstanceVersion");
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
      return cm__vk_error(diag, CM_ENODEV, r, "vkEnumerateInstanceLayerProperties");
    cmvk_layer_properties *lp = calloc(n ? n : 1, sizeof *lp);
    if (!lp) return cm__diag_set(diag, CM_ENOMEM, "out of host memory listing Vulkan layers");
    r = a->EnumerateInstanceLayerProperties(&n, lp);
    bool found = false;
    for (uint32_t i = 0; r >= 0 && i < n; i++)
      if (!strncmp(lp[i].layer_name, CM_VK_VALIDATION_LAYER, sizeof lp[i].layer_name)) found = true;
    free(lp);
    if (r < 0) return cm__vk_error(diag, CM_ENODEV, r, "vkEnumerateInstanceLayerProperties");
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
  if (r != CMVK_SUCCESS) return cm__vk_error(diag, CM_ENODEV, r, "vkEnumeratePhysicalDevices");
  if ((uint32_t)index >= n)
    return cm__diag_set(diag, CM_ENODEV, "Vulkan device %d not found: the loader sees %u device(s)",
                        index, n);
  cmvk_physical_device *pds = calloc(n, sizeof *pds);
  if (!pds) return cm__diag_set(diag, CM_ENOMEM, "out of host memory listing Vulkan devices");
  r = a->EnumeratePhysicalDevices(d->instance, &n, pds);
  if (r < 0 || (uint32_t)index >= n) {
    free(pds);
    return cm__vk_error(diag, CM_ENODEV, r < 0 ? r : CMVK_INCOMPLETE, "vkEnumeratePhysicalDevices");
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
    return cm__vk_error(diag, CM_ENODEV, r, "vkEnumerateDeviceExtensionProperties");
  cmvk_extension_properties *ep = calloc(ne ? ne : 1, sizeof *ep);
  if (!ep) return cm__diag_set(diag, CM_ENOMEM, "out of host memory listing device extensions");
  r = a->EnumerateDeviceExtensionProperties(d->pd, NULL, &ne, ep);
  if (r < 0) {
    free(ep);
    return cm__vk_error(diag, CM_ENODEV, r, "vkEnumerateDeviceExtensionProperties");
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
    return cm__vk_error(diag, CM_ENODEV, r, "vkCreateDevice");
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

void cm__vk_device_ref(cm_vulkan_device_t *d) { atomic_fetch_add(&d->refs, 1); }

void cm__vk_device_unref(cm_vulkan_device_t *d) {
  if (!d) return;
  if (atomic_fetch_sub(&d->refs, 1) != 1) return;
  if (d->owned) teardown_owned(d);
  device_free(d); /* d->lib stays loaded: see the header comment */
}

void cm_vulkan_device_close(cm_vulkan_device_t *dev) { cm__vk_device_unref(dev); }

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

uint64_t cm__vk_budget_left(cm_vulkan_device_t *d, uint32_t heap) {
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
  uint64_t b = cm__vk_budget_left(dev, dev->info.heap);
  if (b < f) f = b;
  if (free_bytes) *free_bytes = f;
  if (total_bytes) *total_bytes = total;
  return CM_OK;
}
