/*
 * vulkan_storage.c - the Vulkan device and staging storages
 * (cubemem/vulkan.h); the device they allocate from is in vulkan.c.
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
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "base/u64map.h"
#include "storage/storage_internal.h"
#include "storage/vulkan/vk_abi.h"
#include "storage/vulkan/vulkan_internal.h"

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
  /* copies (relocation): one command buffer records them until copy_wait
   * submits it with a fence and waits */
  cmvk_command_pool copy_pool;
  cmvk_command_buffer copy_cb;
  bool copy_recording;
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
  return cm__vk_error(diag, r == CMVK_ERROR_OUT_OF_HOST_MEMORY ? CM_ENOMEM : CM_ESTORAGE, r, w);
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
  uint64_t left = cm__vk_budget_left(d, s->heap);
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
  if (r != CMVK_SUCCESS) return cm__vk_error(diag, CM_ESTORAGE, r, "vkQueueWaitIdle");
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

/* Block `id` of s, with [offset, offset+size) inside it; else NULL and diag
 * (CM_EHANDLE: unknown id, CM_EINVAL: the range runs outside) in *rc. The one
 * lookup of get and cm_vulkan_storage_resolve. */
static block *block_range(const vk_storage *s, uint64_t id, uint64_t offset, uint64_t size,
                          int *rc, cm_diag_t *diag) {
  block *b = cm__u64map_get(&s->blocks, id);
  if (!b) {
    *rc = cm__diag_set(diag, CM_EHANDLE, "StorageId(%" PRIu64 ") in the %s storage", id,
                       s->staging ? "vulkan-staging" : "vulkan");
    return NULL;
  }
  if (offset > b->size || size > b->size - offset) {
    *rc = cm__diag_set(diag, CM_EINVAL,
                       "range [%" PRIu64 ", +%" PRIu64 ") is outside StorageId(%" PRIu64
                       ") of %" PRIu64 " bytes",
                       offset, size, id, b->size);
    return NULL;
  }
  return b;
}

static int st_get(void *ctx, uint64_t id, uint64_t offset, uint64_t size, cm_resource_t *out,
                  cm_diag_t *diag) {
  vk_storage *s = ctx;
  int rc = CM_OK;
  const block *b = block_range(s, id, offset, size, &rc, diag);
  if (!b) return rc;
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

/* ---- copies (relocation) --------------------------------------------------------- */

static bool can_copy(const vk_storage *s) {
  const vk_api *a = &s->dev->api;
  return s->dev->queue && a->CreateCommandPool && a->DestroyCommandPool &&
         a->AllocateCommandBuffers && a->BeginCommandBuffer && a->EndCommandBuffer &&
         a->ResetCommandBuffer && a->CmdCopyBuffer;
}

/* The command pool and buffer of the copies, made at the first copy. */
static int copy_objects(vk_storage *s, cm_diag_t *diag) {
  cm_vulkan_device_t *d = s->dev;
  if (s->copy_cb) return CM_OK;
  cmvk_command_pool_create_info pi = {.s_type = CMVK_STYPE_COMMAND_POOL_CREATE_INFO,
                                      .flags = CMVK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER,
                                      .queue_family_index = d->info.queue_family};
  cmvk_result r = d->api.CreateCommandPool(d->device, &pi, NULL, &s->copy_pool);
  if (r != CMVK_SUCCESS) {
    s->copy_pool = 0;
    return cm__vk_error(diag, CM_ESTORAGE, r, "vkCreateCommandPool");
  }
  cmvk_command_buffer_allocate_info ai = {.s_type = CMVK_STYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                          .command_pool = s->copy_pool,
                                          .level = CMVK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                          .command_buffer_count = 1};
  r = d->api.AllocateCommandBuffers(d->device, &ai, &s->copy_cb);
  if (r != CMVK_SUCCESS) {
    d->api.DestroyCommandPool(d->device, s->copy_pool, NULL);
    s->copy_pool = 0;
    s->copy_cb = NULL;
    return cm__vk_error(diag, CM_ESTORAGE, r, "vkAllocateCommandBuffers");
  }
  return CM_OK;
}

/* Record a copy (vkCmdCopyBuffer) into the copies' command buffer. */
static int st_copy(void *ctx, uint64_t dst_id, uint64_t dst_off, uint64_t src_id, uint64_t src_off,
                   uint64_t size, cm_diag_t *diag) {
  vk_storage *s = ctx;
  if (!can_copy(s))
    return cm__diag_set(diag, CM_ENOTSUP, "this Vulkan device has no queue or command entry points "
                                          "for copies");
  if (size == 0) return cm__diag_set(diag, CM_EINVAL, "a copy of 0 bytes");
  int rc = CM_OK;
  const block *src = block_range(s, src_id, src_off, size, &rc, diag);
  if (!src) return rc;
  const block *dst = block_range(s, dst_id, dst_off, size, &rc, diag);
  if (!dst) return rc;
  if (src == dst && src_off < dst_off + size && dst_off < src_off + size)
    return cm__diag_set(diag, CM_EINVAL, "a copy of %" PRIu64 " bytes between overlapping ranges",
                        size);
  if ((rc = copy_objects(s, diag)) != CM_OK) return rc;
  cm_vulkan_device_t *d = s->dev;
  if (!s->copy_recording) {
    cmvk_command_buffer_begin_info bi = {.s_type = CMVK_STYPE_COMMAND_BUFFER_BEGIN_INFO,
                                         .flags = CMVK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT};
    cmvk_result r = d->api.BeginCommandBuffer(s->copy_cb, &bi);
    if (r != CMVK_SUCCESS) return cm__vk_error(diag, CM_ESTORAGE, r, "vkBeginCommandBuffer");
    s->copy_recording = true;
  }
  cmvk_buffer_copy region = {.src_offset = src_off, .dst_offset = dst_off, .size = size};
  d->api.CmdCopyBuffer(s->copy_cb, src->buf, dst->buf, 1, &region);
  return CM_OK;
}

/* Submit the recorded copies with a fence and wait for it. */
static int st_copy_wait(void *ctx, cm_diag_t *diag) {
  vk_storage *s = ctx;
  if (!s->copy_recording) return CM_OK;
  cm_vulkan_device_t *d = s->dev;
  s->copy_recording = false;
  cmvk_result r = d->api.EndCommandBuffer(s->copy_cb);
  const char *what = "vkEndCommandBuffer";
  cmvk_fence f = 0;
  if (r == CMVK_SUCCESS) {
    cmvk_fence_create_info fi = {.s_type = CMVK_STYPE_FENCE_CREATE_INFO};
    what = "vkCreateFence";
    r = d->api.CreateFence(d->device, &fi, NULL, &f);
  }
  if (r == CMVK_SUCCESS) {
    cmvk_submit_info si = {.s_type = CMVK_STYPE_SUBMIT_INFO,
                           .command_buffer_count = 1,
                           .command_buffers = &s->copy_cb};
    what = "vkQueueSubmit (copies)";
    pthread_mutex_lock(&d->queue_lock);
    r = d->api.QueueSubmit(d->queue, 1, &si, f);
    pthread_mutex_unlock(&d->queue_lock);
    if (r == CMVK_SUCCESS) {
      what = "vkWaitForFences (copies)";
      r = d->api.WaitForFences(d->device, 1, &f, 1, UINT64_MAX);
    }
  }
  if (f) d->api.DestroyFence(d->device, f, NULL);
  (void)d->api.ResetCommandBuffer(s->copy_cb, 0); /* ready for the next copies */
  return r == CMVK_SUCCESS ? CM_OK : cm__vk_error(diag, CM_ESTORAGE, r, what);
}

static void st_release(void *ctx) {
  vk_storage *s = ctx;
  if (s->copy_pool) { /* copies are submitted and waited for by copy_wait: none pending */
    if (s->copy_recording) (void)s->dev->api.EndCommandBuffer(s->copy_cb);
    s->dev->api.DestroyCommandPool(s->dev->device, s->copy_pool, NULL);
  }
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
  cm__vk_device_unref(s->dev);
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
  if (r != CMVK_SUCCESS) return cm__vk_error(diag, CM_ESTORAGE, r, "vkCreateFence");
  pthread_mutex_lock(&d->queue_lock);
  r = d->api.QueueSubmit(d->queue, 0, NULL, f);
  pthread_mutex_unlock(&d->queue_lock);
  if (r != CMVK_SUCCESS) {
    d->api.DestroyFence(d->device, f, NULL);
    return cm__vk_error(diag, CM_ESTORAGE, r, "vkQueueSubmit (event)");
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
  uint64_t b = cm__vk_budget_left(s->dev, s->heap);
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
    .copy = st_copy,
    .copy_wait = st_copy_wait,
    /* no vm_* (so no vm_alias either): see the header comment (sparse binding is
     * not offered) */
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
  cm__vk_device_ref(dev);
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
  int rc = CM_OK;
  const block *b = block_range(st->ctx, id, offset, size, &rc, diag);
  if (!b) return rc;
  out->buffer = b->buf;
  out->memory = b->mem;
  out->offset = offset;
  out->size = size;
  out->device_address = b->address ? b->address + offset : 0;
  out->host = b->host ? (char *)b->host + offset : NULL;
  return CM_OK;
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
