/*
 * cubemem/vulkan.h - real device memory on any Vulkan 1.1+ device, with the
 * Vulkan loader loaded at run time.
 *
 * Nothing here links against Vulkan or needs its headers. The loader is
 * opened with dlopen when a device is opened or wrapped: the path is the
 * options' `library`, else the environment variable CM_VULKAN_LIBRARY, else
 * "libvulkan.so.1"; every entry point comes from its vkGetInstanceProcAddr
 * and vkGetDeviceProcAddr. Without a loader, or without a usable device,
 * opening fails cleanly with CM_ENODEV and a message naming the library and
 * the loader's error, or the Vulkan call and its VkResult.
 *
 * Two ways in:
 *  - cm_vulkan_device_wrap(): the application hands over the VkInstance,
 *    VkPhysicalDevice and VkDevice it created (and a VkQueue of a family it
 *    chose). cubemem only borrows them: they must outlive every object made
 *    from the wrapped device, and the application keeps destroying them.
 *  - cm_vulkan_device_open(): cubemem creates an instance, picks a physical
 *    device and creates a logical device with one queue of the first family
 *    that supports compute, enabling bufferDeviceAddress and
 *    VK_EXT_memory_budget where the device has them (for the CLI and tests;
 *    cm_vulkan_device_handles() gives the handles to an application that
 *    wants to record commands on that device).
 *
 * Storages:
 *  - device storage (cm_vulkan_storage_create): each allocation is one
 *    VkDeviceMemory of a device-local memory type with one VkBuffer (usage
 *    storage + transfer source + transfer destination, plus shader device
 *    address when bufferDeviceAddress is enabled) bound at offset 0. A slice
 *    resolves to (buffer, offset, size) with cm_vulkan_storage_resolve(), and
 *    cm_storage_get()'s `addr` is the buffer's device address plus the offset
 *    (0 when bufferDeviceAddress is not enabled). dealloc queues the id;
 *    flush waits for the storage's queue to go idle (work submitted there may
 *    still use the memory), then destroys the buffers and frees the memory.
 *    Events are fences signalled by an empty submission to the queue;
 *    destroying a pending event waits for it first (Vulkan forbids
 *    destroying a fence still in use).
 *    Zero-byte allocations get an id and no Vulkan object.
 *  - staging storage (cm_vulkan_staging_storage_create): host-visible,
 *    host-coherent memory (host-cached preferred, device-local avoided),
 *    persistently mapped, with a transfer-source/destination buffer; get()
 *    returns the mapped pointer in both `host` and `addr`. Freed at once, as
 *    pinned host memory is: the drop queue (cubemem/dropqueue.h) defers frees
 *    until the work using a buffer is done. Use it as cm_device_t's pinned
 *    storage (cm_vulkan_staging_factory).
 *
 * Limits kept: allocations live on the device at once never exceed
 * maxMemoryAllocationCount (counted over every storage of the device; only
 * cubemem's own allocations are known, so an application that allocates too
 * should lower `max_allocations`); one allocation never exceeds
 * maxMemoryAllocationSize; the bytes held in a heap never exceed its size nor,
 * with VK_EXT_memory_budget, the heap's budget minus what the process already
 * uses there. Exceeding any of them, VK_ERROR_OUT_OF_DEVICE_MEMORY and
 * VK_ERROR_TOO_MANY_OBJECTS are CM_EOOM ("device out of memory allocating N
 * bytes: <which limit>"); VK_ERROR_OUT_OF_HOST_MEMORY is CM_ENOMEM; any other
 * VkResult is CM_ESTORAGE with the call and the result's name in the message
 * and the VkResult in diag->native.
 *
 * Virtual memory: none. The arena pool therefore grows by segments on Vulkan.
 * Sparse buffers (sparseBinding + sparseResidencyBuffer, vkQueueBindSparse)
 * could back storage.h's virtual-memory contract, but the CI driver (Mesa's
 * lavapipe) has no sparse support, so that path is not offered rather than
 * shipped untested; cm_vulkan_info_t.sparse_residency_buffer reports whether
 * a device could have it.
 *
 * Validation: when the options ask for it (or CM_VULKAN_VALIDATION=1 is set
 * when cubemem opens the device), VK_LAYER_KHRONOS_validation is enabled on
 * cubemem's instance together with a VK_EXT_debug_utils messenger that counts
 * every warning and error message (cm_vulkan_device_messages(),
 * cm_vulkan_messages_total()) and, if asked (always with
 * CM_VULKAN_VALIDATION=1), writes each one to stderr. Asking for validation
 * when the layer is not installed fails with CM_ENODEV.
 *
 * Threading: device open/wrap/close and the getters are thread-safe. A
 * storage follows the cm_storage_t rule (one thread at a time); storages of
 * one device may be used from different threads: the device serialises
 * cubemem's own use of its queue (flush, events) with a mutex. An
 * application that submits to the same queue itself must not do so while a
 * storage call of that device runs (Vulkan requires external
 * synchronisation of a queue), or should give cubemem a queue of its own.
 */
#ifndef CUBEMEM_VULKAN_H
#define CUBEMEM_VULKAN_H

#include "cubemem/common.h"
#include "cubemem/storage.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cm_vulkan_device cm_vulkan_device_t;

/* How cubemem opens a device itself. */
typedef struct cm_vulkan_open_options {
  /* Physical device, in vkEnumeratePhysicalDevices order; -1 (the default)
   * means the environment variable CM_VULKAN_DEVICE, else 0. */
  int device_index;
  /* Enable VK_LAYER_KHRONOS_validation and count its messages. Default: true
   * when CM_VULKAN_VALIDATION=1. */
  bool validation;
  /* Write each counted message to stderr ("cubemem: vulkan: ..."). Default:
   * as validation. The library prints nothing else. */
  bool print_messages;
  /* Loader path; NULL = CM_VULKAN_LIBRARY or "libvulkan.so.1". */
  const char *library;
} cm_vulkan_open_options_t;

/* Defaults as described above (reads the environment). Thread-safe. */
CM_API void cm_vulkan_open_options_init(cm_vulkan_open_options_t *opts);

/* Open a device: load the loader, create an instance (Vulkan 1.1 or newer, as
 * the loader allows, up to 1.3), pick the physical device, create a logical
 * device with one queue. `opts` NULL means cm_vulkan_open_options_init's
 * defaults. *out receives a device the caller closes with
 * cm_vulkan_device_close. Errors: CM_EINVAL (NULL out), CM_ENODEV (no loader,
 * loader without vkGetInstanceProcAddr, instance creation failed, loader or
 * device older than 1.1, no such device, no compute queue, no device-local
 * and no host-visible coherent memory type, validation asked for but the
 * layer or VK_EXT_debug_utils is missing; the message names the cause and
 * diag->native holds the VkResult when Vulkan gave one), CM_ENOMEM.
 * Thread-safe. */
CM_API CM_NODISCARD int cm_vulkan_device_open(const cm_vulkan_open_options_t *opts,
                                              cm_vulkan_device_t **out, cm_diag_t *diag);

/* The handles of an application's own Vulkan objects (borrowed). */
typedef struct cm_vulkan_external {
  void *instance;        /* VkInstance (required) */
  void *physical_device; /* VkPhysicalDevice of `device` (required) */
  void *device;          /* VkDevice (required) */
  /* VkQueue of `queue_family` that cubemem may submit empty batches to and
   * wait on (flush, events); NULL: storages have no events and flush frees
   * at once, so the application must make sure no queued work still uses
   * memory it released. */
  void *queue;
  uint32_t queue_family;
  /* apiVersion the instance was created with (VK_MAKE_API_VERSION); at
   * least 1.1. 0 means 1.1. */
  uint32_t api_version;
  /* The device was created with the bufferDeviceAddress feature enabled
   * (core in 1.2, or VK_KHR_buffer_device_address on 1.1). */
  bool buffer_device_address;
  /* VK_EXT_memory_budget was enabled on the device. */
  bool memory_budget;
  /* PFN_vkGetInstanceProcAddr of the loader the application uses, cast to
   * void *; NULL: cubemem dlopens the loader (see the header comment). */
  void *get_instance_proc_addr;
} cm_vulkan_external_t;

/* Wrap an application's device. Nothing is created except one probe buffer,
 * destroyed at once, to learn which memory types buffers may use. The
 * application keeps ownership of every handle; they must outlive the device
 * and every storage made from it. Errors: CM_EINVAL (NULL out or ext, a
 * required handle missing, api_version below 1.1, queue family out of
 * range), CM_ENODEV (no loader / entry point missing, device older than
 * 1.1, no usable memory type), CM_ESTORAGE (a Vulkan call failed),
 * CM_ENOMEM. Thread-safe. */
CM_API CM_NODISCARD int cm_vulkan_device_wrap(const cm_vulkan_external_t *ext,
                                              cm_vulkan_device_t **out, cm_diag_t *diag);

/* Drop the caller's reference. The device is released when the last storage
 * made from it is destroyed as well: for an opened device the logical
 * device, messenger and instance are destroyed then (after waiting for the
 * device to go idle); a wrapped device destroys nothing of the
 * application's. NULL ok. Thread-safe. */
CM_API void cm_vulkan_device_close(cm_vulkan_device_t *dev);

/* What the device offers, fixed at open (all thread-safe; dev non-NULL). */
typedef struct cm_vulkan_info {
  uint32_t api_version; /* the physical device's apiVersion */
  uint32_t vendor_id, device_id;
  int device_index; /* as opened; -1 for a wrapped device */
  uint32_t queue_family;
  uint32_t memory_type;          /* device storage's memory type index */
  uint32_t staging_memory_type;  /* staging storage's memory type index */
  uint32_t heap;                 /* heap of memory_type */
  uint32_t staging_heap;         /* heap of staging_memory_type */
  uint64_t heap_size;            /* bytes of `heap` */
  uint64_t staging_heap_size;    /* bytes of `staging_heap` */
  uint32_t max_allocation_count; /* maxMemoryAllocationCount */
  uint64_t max_allocation_size;  /* maxMemoryAllocationSize */
  uint64_t min_storage_buffer_offset_alignment;
  bool buffer_device_address; /* enabled: slices have device addresses */
  bool memory_budget;         /* VK_EXT_memory_budget enabled */
  bool sparse_binding;        /* features the device reports (not used: see above) */
  bool sparse_residency_buffer;
  bool validation; /* the validation layer and the messenger are on */
  bool owned;      /* cubemem created the device (open, not wrap) */
} cm_vulkan_info_t;
CM_API void cm_vulkan_device_info(const cm_vulkan_device_t *dev, cm_vulkan_info_t *out);
/* deviceName (storage of the device). */
CM_API const char *cm_vulkan_device_name(const cm_vulkan_device_t *dev);
/* {max_page_size = heap size / 4 (at most maxMemoryAllocationSize),
 * alignment = max(512, minStorageBufferOffsetAlignment)}, as on CUDA. */
CM_API cm_device_props_t cm_vulkan_device_props(const cm_vulkan_device_t *dev);
/* Free and total bytes of the device storage's heap now: total is the heap
 * size; free is what cubemem may still allocate there (heap size minus the
 * bytes cubemem holds in it, and at most the budget left with
 * VK_EXT_memory_budget). Errors: CM_EINVAL (NULL dev). Thread-safe. */
CM_API CM_NODISCARD int cm_vulkan_device_mem_info(cm_vulkan_device_t *dev, uint64_t *free_bytes,
                                                  uint64_t *total_bytes, cm_diag_t *diag);

/* The device's handles, for recording commands on cubemem's memory. */
typedef struct cm_vulkan_handles {
  void *instance, *physical_device, *device, *queue; /* Vk* handles */
  uint32_t queue_family;
  void *get_instance_proc_addr; /* PFN_vkGetInstanceProcAddr */
  void *get_device_proc_addr;   /* PFN_vkGetDeviceProcAddr */
} cm_vulkan_handles_t;
/* Fill *out (borrowed handles, valid until the device is released). When
 * the application submits to `queue` itself, the threading rule in the header
 * comment applies. Thread-safe. */
CM_API void cm_vulkan_device_handles(const cm_vulkan_device_t *dev, cm_vulkan_handles_t *out);

/* Warning and error messages the device's messenger received (0 without
 * validation). Any thread. */
CM_API uint64_t cm_vulkan_device_messages(const cm_vulkan_device_t *dev);
/* The latest such message into buf (truncated; "" when none). Thread-safe. */
CM_API void cm_vulkan_device_last_message(cm_vulkan_device_t *dev, char *buf, size_t cap);
/* Messages received by every device of the process so far. Any thread. */
CM_API uint64_t cm_vulkan_messages_total(void);

/* Storage limits (both optional; NULL options = defaults 0). */
typedef struct cm_vulkan_storage_options {
  uint64_t capacity;        /* bytes this storage may hold at once; 0 = the heap's limits only */
  uint32_t max_allocations; /* live allocations of the device; 0 = maxMemoryAllocationCount */
} cm_vulkan_storage_options_t;

/* Device storage (see the header comment). Holds a reference to dev.
 * Statistics measure the time spent in Vulkan calls (cm_storage_stats
 * time_ns). Errors: CM_EINVAL (NULL dev/out), CM_ENOMEM. Thread-safe. */
CM_API CM_NODISCARD int cm_vulkan_storage_create(cm_vulkan_device_t *dev,
                                                 const cm_vulkan_storage_options_t *opts,
                                                 cm_storage_t **out, cm_diag_t *diag);
/* Staging storage (host-visible, coherent, mapped). Holds a reference to
 * dev. Errors as above. Thread-safe. */
CM_API CM_NODISCARD int cm_vulkan_staging_storage_create(cm_vulkan_device_t *dev,
                                                         const cm_vulkan_storage_options_t *opts,
                                                         cm_storage_t **out, cm_diag_t *diag);

/* Convenience for tools: open device `index` (-1: CM_VULKAN_DEVICE or 0)
 * with cm_vulkan_open_options_init's defaults, create a device storage and
 * fill *props (may be NULL) with the device's properties. The storage owns
 * the device. Errors: as cm_vulkan_device_open. Thread-safe. */
CM_API CM_NODISCARD int cm_vulkan_storage_open_default(int index, cm_storage_t **out,
                                                       cm_device_props_t *props, cm_diag_t *diag);

/* Where the bytes of a slice live. */
typedef struct cm_vulkan_slice {
  uint64_t buffer;         /* VkBuffer bound at offset 0 of `memory` */
  uint64_t memory;         /* VkDeviceMemory */
  uint64_t offset;         /* bytes from the start of buffer and memory */
  uint64_t size;           /* bytes */
  uint64_t device_address; /* of the first byte; 0 without bufferDeviceAddress */
  void *host;              /* staging storage: mapped pointer of the first byte; else NULL */
} cm_vulkan_slice_t;

/* Resolve (id, offset, size) of a storage made by cm_vulkan_storage_create or
 * cm_vulkan_staging_storage_create (not through a decorator). Same thread as
 * the storage's other calls. Errors: CM_EINVAL (NULL argument, not a Vulkan
 * storage, range outside the allocation), CM_EHANDLE (unknown id). */
CM_API CM_NODISCARD int cm_vulkan_storage_resolve(const cm_storage_t *s, uint64_t id,
                                                  uint64_t offset, uint64_t size,
                                                  cm_vulkan_slice_t *out, cm_diag_t *diag);
/* A manager's binding resolved the same way: cm_vulkan_resolve_binding in
 * cubemem/vulkan_binding.h (the runtime layer, above the manager). */

/* Counters of one Vulkan storage (zeros for any other storage or NULL). */
typedef struct cm_vulkan_storage_counters {
  uint64_t live;           /* allocations holding a VkDeviceMemory now */
  uint64_t bytes;          /* their allocationSize sum (buffer requirements, >= requested) */
  uint64_t bytes_peak;     /* high-water mark of bytes */
  uint64_t pending;        /* ids queued for the next flush */
  uint64_t limit_refusals; /* allocations refused by a limit before calling Vulkan */
  uint64_t free_errors;    /* waits before a free that failed (the memory was freed anyway) */
} cm_vulkan_storage_counters_t;
/* Fill *out. Same thread as the storage's user (or when it is idle). */
CM_API void cm_vulkan_storage_counters(const cm_storage_t *s, cm_vulkan_storage_counters_t *out);

/* Storage factories for cm_device_t (cubemem/device.h): `arg` is the
 * cm_vulkan_device_t *, which must outlive the cm_device_t; every stream
 * gets its own storage (all on the device's one queue). */
CM_API CM_NODISCARD int cm_vulkan_storage_factory(void *arg, uint64_t stream, cm_storage_t **out,
                                                  cm_diag_t *diag);
CM_API CM_NODISCARD int cm_vulkan_staging_factory(void *arg, uint64_t stream, cm_storage_t **out,
                                                  cm_diag_t *diag);

/* Name of a VkResult ("VK_ERROR_OUT_OF_DEVICE_MEMORY"; "VK_RESULT_<n>" for
 * unknown values). Static string; thread-safe. */
CM_API const char *cm_vulkan_result_name(int result);

#ifdef __cplusplus
}
#endif
#endif
