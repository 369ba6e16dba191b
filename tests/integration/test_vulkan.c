/*
 * test_vulkan.c - the Vulkan storages (cubemem/vulkan.h) against a real
 * driver (in CI: Mesa's lavapipe, a CPU Vulkan 1.3 driver) with
 * VK_LAYER_KHRONOS_validation enabled. The paths without a loader or a
 * driver are in tests/unit/test_vulkan_noloader.c, the failure paths (fault
 * sweep, Vulkan errors, memory budget) in test_vulkan_faults.c; both
 * programs share the device of tests/harness/cm_vulkan_fixture.h.
 *
 * Covered: properties; the storage contract (ids, zero-byte allocations,
 * resolve, the dealloc queue, events); limits (allocation count, capacity,
 * allocation size, heap size) refused with CM_EOOM and no change; the memory
 * is real (slices of a manager filled with vkCmdFillBuffer at their offsets
 * and read back through a staging buffer, before and after memory is
 * reused); an application's own instance and device handed over
 * (cm_vulkan_device_wrap); staging memory under cm_device_t; storages of one
 * device on four threads sharing its queue; real traces replayed with peak
 * reserved equal to a simulated device without virtual memory (segment
 * mode); and a device close that the validation layer finds clean.
 *
 * Every test ends with no validation message (warning or error) seen, except
 * the one test_validation_is_live provokes on purpose to prove the messenger
 * listens. Without a driver every test SKIPs, saying why (exit 77: ctest lists
 * the test as skipped) - unless CM_VULKAN_REQUIRED=1 (set by .ci/run's vulkan
 * stage), which turns the skip into a failure and also requires the
 * validation layer. Prints the figures (peak reserved per trace on both
 * storages).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cm_test.h"
#include "cm_vulkan_fixture.h"
#include "cubemem/cubemem.h"
#include "cubemem/replay.h"
#include "cubemem/vulkan.h"
#include "cubemem/vulkan_binding.h"
#include "storage/storage_internal.h"
#include "storage/vulkan/vk_abi.h"

/* ===== 2. a real driver ===================================================== */

/* Command recording on a device, through its handles. */
typedef struct gpu {
  cmvk_device device;
  cmvk_queue queue;
  cmvk_command_pool pool;
  cmvk_command_buffer cb;
  cmvk_fence fence;
  cmvk_pfn_create_command_pool CreateCommandPool;
  cmvk_pfn_destroy_command_pool DestroyCommandPool;
  cmvk_pfn_allocate_command_buffers AllocateCommandBuffers;
  cmvk_pfn_begin_command_buffer BeginCommandBuffer;
  cmvk_pfn_end_command_buffer EndCommandBuffer;
  cmvk_pfn_reset_command_buffer ResetCommandBuffer;
  cmvk_pfn_cmd_fill_buffer CmdFillBuffer;
  cmvk_pfn_cmd_copy_buffer CmdCopyBuffer;
  cmvk_pfn_cmd_pipeline_barrier CmdPipelineBarrier;
  cmvk_pfn_queue_submit QueueSubmit;
  cmvk_pfn_create_fence CreateFence;
  cmvk_pfn_destroy_fence DestroyFence;
  cmvk_pfn_wait_for_fences WaitForFences;
  cmvk_pfn_create_buffer CreateBuffer;
  cmvk_pfn_destroy_buffer DestroyBuffer;
  void (*ResetFences)(cmvk_device, uint32_t, const cmvk_fence *);
} gpu;

#define GET(g, gdpa, field)                             \
  do {                                                  \
    cmvk_void_fn f_ = (gdpa)((g)->device, "vk" #field); \
    ASSERT(f_ != NULL);                                 \
    memcpy(&(g)->field, &f_, sizeof f_);                \
  } while (0)

static void gpu_open(gpu *g, cm_vulkan_device_t *dev) {
  memset(g, 0, sizeof *g);
  cm_vulkan_handles_t h;
  cm_vulkan_device_handles(dev, &h);
  ASSERT(h.device && h.queue && h.get_device_proc_addr);
  g->device = h.device;
  g->queue = h.queue;
  cmvk_pfn_get_device_proc_addr gdpa;
  memcpy(&gdpa, &h.get_device_proc_addr, sizeof gdpa);
  GET(g, gdpa, CreateCommandPool);
  GET(g, gdpa, DestroyCommandPool);
  GET(g, gdpa, AllocateCommandBuffers);
  GET(g, gdpa, BeginCommandBuffer);
  GET(g, gdpa, EndCommandBuffer);
  GET(g, gdpa, ResetCommandBuffer);
  GET(g, gdpa, CmdFillBuffer);
  GET(g, gdpa, CmdCopyBuffer);
  GET(g, gdpa, CmdPipelineBarrier);
  GET(g, gdpa, QueueSubmit);
  GET(g, gdpa, CreateFence);
  GET(g, gdpa, DestroyFence);
  GET(g, gdpa, WaitForFences);
  GET(g, gdpa, ResetFences);
  GET(g, gdpa, CreateBuffer);
  GET(g, gdpa, DestroyBuffer);
  cmvk_command_pool_create_info pi = {.s_type = CMVK_STYPE_COMMAND_POOL_CREATE_INFO,
                                      .flags = CMVK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER,
                                      .queue_family_index = h.queue_family};
  ASSERT_STATUS(g->CreateCommandPool(g->device, &pi, NULL, &g->pool), CMVK_SUCCESS);
  cmvk_command_buffer_allocate_info ai = {.s_type = CMVK_STYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                          .command_pool = g->pool,
                                          .level = CMVK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                          .command_buffer_count = 1};
  ASSERT_STATUS(g->AllocateCommandBuffers(g->device, &ai, &g->cb), CMVK_SUCCESS);
  cmvk_fence_create_info fi = {.s_type = CMVK_STYPE_FENCE_CREATE_INFO};
  ASSERT_STATUS(g->CreateFence(g->device, &fi, NULL, &g->fence), CMVK_SUCCESS);
}

static void gpu_close(gpu *g) {
  if (g->fence) g->DestroyFence(g->device, g->fence, NULL);
  if (g->pool) g->DestroyCommandPool(g->device, g->pool, NULL); /* frees cb */
  memset(g, 0, sizeof *g);
}

static void gpu_begin(gpu *g) {
  ASSERT_STATUS(g->ResetCommandBuffer(g->cb, 0), CMVK_SUCCESS);
  cmvk_command_buffer_begin_info bi = {.s_type = CMVK_STYPE_COMMAND_BUFFER_BEGIN_INFO,
                                       .flags = CMVK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT};
  ASSERT_STATUS(g->BeginCommandBuffer(g->cb, &bi), CMVK_SUCCESS);
}

static void gpu_barrier(gpu *g, cmvk_flags dst_stage, cmvk_flags dst_access) {
  cmvk_memory_barrier mb = {.s_type = CMVK_STYPE_MEMORY_BARRIER,
                            .src_access_mask = CMVK_ACCESS_TRANSFER_WRITE,
                            .dst_access_mask = dst_access};
  g->CmdPipelineBarrier(g->cb, CMVK_PIPELINE_STAGE_TRANSFER, dst_stage, 0, 1, &mb, 0, NULL, 0,
                        NULL);
}

static void gpu_submit_wait(gpu *g) {
  ASSERT_STATUS(g->EndCommandBuffer(g->cb), CMVK_SUCCESS);
  cmvk_submit_info si = {
      .s_type = CMVK_STYPE_SUBMIT_INFO, .command_buffer_count = 1, .command_buffers = &g->cb};
  ASSERT_STATUS(g->QueueSubmit(g->queue, 1, &si, g->fence), CMVK_SUCCESS);
  ASSERT_STATUS(g->WaitForFences(g->device, 1, &g->fence, 1, UINT64_MAX), CMVK_SUCCESS);
  g->ResetFences(g->device, 1, &g->fence);
}

enum { NSLICES = 24 };
static const uint64_t k_sizes[NSLICES] = {
    4,     512,  1000,    4096, 65536,   12,     1 << 20, 300000, 3 << 20,  8,    2048, 131072,
    40960, 1024, 5 << 20, 4,    777 * 4, 100000, 2 << 20, 16,     12 << 20, 2000, 64,   256};

static uint32_t pattern(int i, int round) {
  return 0xC0DE0000u ^ (uint32_t)(i * 2654435761u) ^ (uint32_t)round;
}

/* Fill every live slice with its pattern on the device, copy them all into
 * one staging buffer, and check each word on the host. */
static void fill_and_check(gpu *g, cm_manager_t *m, cm_storage_t *staging, cm_handle_t *h,
                           const uint64_t *sizes, const uint32_t *pat, int n, bool fill) {
  uint64_t total = 0;
  for (int i = 0; i < n; i++)
    if (h[i].d) total += (sizes[i] + 3) / 4 * 4;
  uint64_t sid = 0;
  ASSERT_OK(cm_storage_alloc(staging, total, &sid, NULL));
  cm_vulkan_slice_t ss;
  ASSERT_OK(cm_vulkan_storage_resolve(staging, sid, 0, total, &ss, NULL));
  ASSERT(ss.host != NULL && ss.buffer != 0);
  memset(ss.host, 0xAB, total);
  gpu_begin(g);
  cmvk_buffer bufs[NSLICES];
  uint64_t offs[NSLICES];
  for (int i = 0; i < n; i++) {
    if (!h[i].d) continue;
    cm_binding_t b = cm_handle_binding(h[i]);
    cm_vulkan_slice_t sl;
    cm_diag_t d = {0};
    int rc = cm_vulkan_resolve_binding(m, b, &sl, &d);
    cm_resource_t r;
    int rc2 = cm_manager_get_resource(m, b, 0, 0, &r, NULL);
    cm_binding_release(b);
    ASSERT_OK(rc);
    ASSERT_OK(rc2);
    EXPECT_EQ(sl.size, sizes[i]);
    EXPECT_EQ(sl.offset % 4, 0);
    EXPECT(sl.buffer != 0 && sl.memory != 0);
    EXPECT(sl.host == NULL);
    EXPECT_EQ(r.addr, sl.device_address);
    bufs[i] = sl.buffer;
    offs[i] = sl.offset;
    if (fill) g->CmdFillBuffer(g->cb, sl.buffer, sl.offset, (sizes[i] + 3) / 4 * 4, pat[i]);
  }
  if (fill) gpu_barrier(g, CMVK_PIPELINE_STAGE_TRANSFER, CMVK_ACCESS_TRANSFER_READ);
  uint64_t at = 0;
  for (int i = 0; i < n; i++) {
    if (!h[i].d) continue;
    cmvk_buffer_copy c = {offs[i], at, (sizes[i] + 3) / 4 * 4};
    g->CmdCopyBuffer(g->cb, bufs[i], ss.buffer, 1, &c);
    at += c.size;
  }
  gpu_barrier(g, CMVK_PIPELINE_STAGE_HOST, CMVK_ACCESS_HOST_READ);
  gpu_submit_wait(g);
  at = 0;
  for (int i = 0; i < n; i++) {
    if (!h[i].d) continue;
    const uint32_t *w = (const uint32_t *)((const char *)ss.host + at);
    uint64_t words = (sizes[i] + 3) / 4, bad = 0;
    for (uint64_t k = 0; k < words; k++) bad += w[k] != pat[i];
    if (bad)
      cm_test_fail(__FILE__, __LINE__,
                   "slice %d (%" PRIu64 " bytes at offset %" PRIu64 "): %" PRIu64
                   " words differ from 0x%08x (first 0x%08x)",
                   i, sizes[i], offs[i], bad, pat[i], w[0]);
    at += words * 4;
  }
  cm_storage_dealloc(staging, sid, total);
}

/* The manager + staging storage scenario, on any device. */
static void memory_is_real_on(cm_vulkan_device_t *dev) {
  cm_storage_t *st = NULL, *staging = NULL;
  ASSERT_OK(cm_vulkan_storage_create(dev, NULL, &st, NULL));
  ASSERT_OK(cm_vulkan_staging_storage_create(dev, NULL, &staging, NULL));
  cm_manager_config_t cfg;
  cm_manager_config_init(&cfg);
  cfg.name = "vulkan-real";
  cfg.props = cm_vulkan_device_props(dev);
  cm_manager_t *m = NULL;
  ASSERT_OK(cm_manager_create(st, &cfg, &m, NULL));
  gpu g;
  gpu_open(&g, dev);
  cm_handle_t h[NSLICES];
  uint32_t pat[NSLICES];
  memset(h, 0, sizeof h);
  for (int i = 0; i < NSLICES; i++) {
    ASSERT_OK(cm_manager_reserve(m, k_sizes[i], &h[i], NULL));
    pat[i] = pattern(i, 0);
  }
  EXPECT_EQ(cm_manager_check(m, NULL), 0);
  fill_and_check(&g, m, staging, h, k_sizes, pat, NSLICES, true);
  /* release every other slice, reserve new ones into the freed memory, and
   * fill only those: the survivors must still hold their old patterns */
  for (int i = 0; i < NSLICES; i += 2) cm_handle_release(h[i]), h[i].d = NULL;
  cm_handle_t h2[NSLICES];
  uint32_t pat2[NSLICES];
  memset(h2, 0, sizeof h2);
  for (int i = 0; i < NSLICES; i += 2) {
    ASSERT_OK(cm_manager_reserve(m, k_sizes[i], &h2[i], NULL));
    pat2[i] = pattern(i, 1);
  }
  fill_and_check(&g, m, staging, h2, k_sizes, pat2, NSLICES, true);
  fill_and_check(&g, m, staging, h, k_sizes, pat, NSLICES, false);
  EXPECT_EQ(cm_manager_check(m, NULL), 0);
  for (int i = 0; i < NSLICES; i++) cm_handle_release(h[i]), cm_handle_release(h2[i]);
  gpu_close(&g);
  cm_manager_cleanup(m, true);
  cm_manager_destroy(m);
  cm_storage_destroy(staging);
  uint64_t fr = 0, tot = 0;
  ASSERT_OK(cm_vulkan_device_mem_info(dev, &fr, &tot, NULL));
  EXPECT_EQ(fr, tot); /* everything given back */
}

static void test_properties(void) {
  need_device();
  cm_vulkan_info_t in;
  cm_vulkan_device_info(g_dev, &in);
  EXPECT(in.owned);
  EXPECT_GE(in.api_version, CMVK_API_VERSION_1_1);
  EXPECT_GT(in.heap_size, 0);
  EXPECT_GT(in.max_allocation_count, 0);
  EXPECT_EQ(in.validation, g_validation);
  cm_device_props_t p = cm_vulkan_device_props(g_dev);
  uint64_t want = in.heap_size / 4;
  if (want > in.max_allocation_size) want = in.max_allocation_size;
  EXPECT_EQ(p.max_page_size, want);
  EXPECT_GE(p.alignment, 512);
  EXPECT_GE(p.alignment, in.min_storage_buffer_offset_alignment);
  EXPECT(strlen(cm_vulkan_device_name(g_dev)) > 0);
  uint64_t fr = 0, tot = 0;
  ASSERT_OK(cm_vulkan_device_mem_info(g_dev, &fr, &tot, NULL));
  EXPECT_EQ(tot, in.heap_size);
  EXPECT_EQ(fr, tot);
  printf("  device: %s, Vulkan %u.%u.%u, heap %" PRIu64 " bytes, max allocation %" PRIu64
         " bytes, %u allocations, memory type %u, staging type %u, bufferDeviceAddress %s, "
         "memory budget %s, sparseBinding %s, sparseResidencyBuffer %s, validation %s\n",
         cm_vulkan_device_name(g_dev), CMVK_VERSION_MAJOR(in.api_version),
         CMVK_VERSION_MINOR(in.api_version), CMVK_VERSION_PATCH(in.api_version), in.heap_size,
         in.max_allocation_size, in.max_allocation_count, in.memory_type, in.staging_memory_type,
         in.buffer_device_address ? "yes" : "no", in.memory_budget ? "yes" : "no",
         in.sparse_binding ? "yes" : "no", in.sparse_residency_buffer ? "yes" : "no",
         in.validation ? "on" : "off");
  expect_no_messages();
}

/* The validation layer is really listening: a buffer with no usage bits is
 * invalid usage (VUID-VkBufferCreateInfo-usage-requiredbitmask). */
static void test_validation_is_live(void) {
  need_device();
  if (!g_validation) CM_SKIP("the validation layer is not installed");
  gpu g;
  gpu_open(&g, g_dev);
  printf(
      "  provoking one validation error on purpose (the message on stderr): a buffer with usage "
      "0\n");
  fflush(stdout);
  uint64_t before = cm_vulkan_device_messages(g_dev);
  cmvk_buffer_create_info bi = {.s_type = CMVK_STYPE_BUFFER_CREATE_INFO,
                                .size = 256,
                                .usage = 0,
                                .sharing_mode = CMVK_SHARING_MODE_EXCLUSIVE};
  cmvk_buffer b = 0;
  cmvk_result r = g.CreateBuffer(g.device, &bi, NULL, &b);
  if (r == CMVK_SUCCESS && b) g.DestroyBuffer(g.device, b, NULL);
  gpu_close(&g);
  uint64_t after = cm_vulkan_device_messages(g_dev);
  EXPECT_GT(after, before);
  char last[512];
  cm_vulkan_device_last_message(g_dev, last, sizeof last);
  EXPECT_CONTAINS(last, "usage");
  printf("  provoked message: %.160s\n", last);
  g_baseline = cm_vulkan_messages_total(); /* later tests must see none: count from here */
}

static void test_storage_contract(void) {
  need_device();
  uint64_t base = cm_vulkan_messages_total();
  cm_storage_t *st = NULL;
  cm_diag_t d = {0};
  ASSERT_OK(cm_vulkan_storage_create(g_dev, NULL, &st, &d));
  EXPECT_STR(cm_storage_name(st), "vulkan");
  EXPECT(!cm_storage_has_vm(st));
  uint64_t z = 0, a = 0, b = 0;
  ASSERT_OK(cm_storage_alloc(st, 0, &z, NULL));
  ASSERT_OK(cm_storage_alloc(st, 1000, &a, NULL));
  ASSERT_OK(cm_storage_alloc(st, 1 << 20, &b, NULL));
  EXPECT(z != 0 && a != 0 && b != 0 && z != a && a != b);
  cm_vulkan_storage_counters_t c;
  cm_vulkan_storage_counters(st, &c);
  EXPECT_EQ(c.live, 2); /* the zero-byte id has no Vulkan object */
  EXPECT_GE(c.bytes, 1000 + (1 << 20));
  cm_resource_t r;
  ASSERT_OK(cm_storage_get(st, z, 0, 0, &r, NULL));
  EXPECT_EQ(r.size, 0);
  ASSERT_OK(cm_storage_get(st, a, 512, 488, &r, NULL));
  cm_vulkan_slice_t sl;
  ASSERT_OK(cm_vulkan_storage_resolve(st, a, 512, 488, &sl, NULL));
  EXPECT_EQ(sl.offset, 512);
  EXPECT_EQ(sl.size, 488);
  EXPECT(sl.buffer != 0 && sl.memory != 0 && sl.host == NULL);
  cm_vulkan_info_t in;
  cm_vulkan_device_info(g_dev, &in);
  if (in.buffer_device_address) {
    EXPECT(sl.device_address != 0);
    EXPECT_EQ(r.addr, sl.device_address);
  } else {
    EXPECT_EQ(r.addr, 0);
  }
  EXPECT_STATUS(cm_storage_get(st, a, 512, 489, &r, &d), CM_EINVAL);
  EXPECT_CONTAINS(d.message, "outside StorageId");
  EXPECT_STATUS(cm_storage_get(st, 999, 0, 1, &r, &d), CM_EHANDLE);
  EXPECT_CONTAINS(d.message, "StorageId(999) in the vulkan storage");
  EXPECT_STATUS(cm_vulkan_storage_resolve(st, 999, 0, 1, &sl, &d), CM_EHANDLE);
  /* dealloc queues, flush frees */
  cm_storage_dealloc(st, a, 1000);
  cm_storage_dealloc(st, 12345, 1); /* unknown: ignored */
  cm_vulkan_storage_counters(st, &c);
  EXPECT_EQ(c.live, 2);
  EXPECT_EQ(c.pending, 1);
  ASSERT_OK(cm_storage_flush(st));
  cm_vulkan_storage_counters(st, &c);
  EXPECT_EQ(c.live, 1);
  EXPECT_EQ(c.pending, 0);
  EXPECT_STATUS(cm_storage_get(st, a, 0, 1, &r, NULL), CM_EHANDLE);
  /* events: fences after an empty submission */
  void *ev = NULL;
  ASSERT_OK(cm_storage_event_record(st, &ev, NULL));
  EXPECT(ev != NULL);
  EXPECT_OK(cm_storage_event_sync(st, ev));
  EXPECT_EQ(cm_storage_event_query(st, ev), 1);
  cm_storage_event_destroy(st, ev);
  uint64_t fr = 0, tot = 0;
  ASSERT_OK(cm_storage_mem_info(st, &fr, &tot));
  EXPECT_EQ(tot, in.heap_size);
  EXPECT_EQ(fr, tot - c.bytes);
  cm_storage_stats_t s;
  cm_storage_stats(st, &s);
  EXPECT_EQ(s.allocs, 3);
  EXPECT_EQ(s.deallocs, 2);
  cm_storage_destroy(st); /* frees b and z */
  ASSERT_OK(cm_vulkan_device_mem_info(g_dev, &fr, &tot, NULL));
  EXPECT_EQ(fr, tot);
  EXPECT_EQ(cm_vulkan_messages_total(), base);
  expect_no_messages();
}

static void test_limits(void) {
  need_device();
  cm_vulkan_info_t in;
  cm_vulkan_device_info(g_dev, &in);
  cm_vulkan_storage_options_t o = {.capacity = 4u << 20, .max_allocations = 3};
  cm_storage_t *st = NULL;
  ASSERT_OK(cm_vulkan_storage_create(g_dev, &o, &st, NULL));
  uint64_t ids[3];
  for (int i = 0; i < 3; i++) ASSERT_OK(cm_storage_alloc(st, 4096, &ids[i], NULL));
  cm_vulkan_storage_counters_t c0, c1;
  cm_vulkan_storage_counters(st, &c0);
  cm_diag_t d = {0};
  uint64_t id = 0;
  EXPECT_STATUS(cm_storage_alloc(st, 4096, &id, &d), CM_EOOM);
  EXPECT_CONTAINS(d.message, "device out of memory allocating 4096 bytes");
  EXPECT_CONTAINS(d.message, "maxMemoryAllocationCount (3)");
  cm_storage_dealloc(st, ids[0], 4096);
  ASSERT_OK(cm_storage_flush(st));
  EXPECT_STATUS(cm_storage_alloc(st, 5u << 20, &id, &d), CM_EOOM);
  EXPECT_CONTAINS(d.message, "capacity of 4194304 bytes");
  cm_vulkan_storage_counters(st, &c1);
  EXPECT_EQ(c1.live, c0.live - 1);
  EXPECT_EQ(c1.limit_refusals, 2);
  cm_storage_destroy(st);
  /* larger than the heap / than one allocation may be */
  ASSERT_OK(cm_vulkan_storage_create(g_dev, NULL, &st, NULL));
  uint64_t big =
      in.max_allocation_size > in.heap_size ? in.heap_size + 1 : in.max_allocation_size + 1;
  EXPECT_STATUS(cm_storage_alloc(st, big, &id, &d), CM_EOOM);
  EXPECT_CONTAINS(d.message, "device out of memory allocating");
  cm_vulkan_storage_counters(st, &c1);
  EXPECT_EQ(c1.live, 0);
  /* the heap fills up: cubemem's own count refuses before the driver would */
  uint64_t piece =
      in.heap_size / 4 < in.max_allocation_size ? in.heap_size / 4 : in.max_allocation_size;
  uint64_t got[64];
  int n = 0, rc = CM_OK;
  while (n < 64 && (rc = cm_storage_alloc(st, piece, &got[n], &d)) == CM_OK) n++;
  EXPECT_STATUS(rc, CM_EOOM);
  EXPECT_GE(n, 1);
  EXPECT_LE((uint64_t)n * piece, in.heap_size);
  printf("  heap filled with %d allocations of %" PRIu64 " bytes; then: %s\n", n, piece, d.message);
  cm_storage_destroy(st);
  expect_no_messages();
}

static void test_memory_is_real(void) {
  need_device();
  memory_is_real_on(g_dev);
  expect_no_messages();
}

/* ---- relocation: copies with vkCmdCopyBuffer and a fence ------------------------- */

static void test_relocation(void) {
  need_device();
  cm_storage_t *st = NULL;
  ASSERT_OK(cm_vulkan_storage_create(g_dev, NULL, &st, NULL));
  ASSERT(cm_storage_can_copy(st));
  cm_manager_config_t cfg;
  cm_manager_config_init(&cfg);
  cfg.props = cm_vulkan_device_props(g_dev);
  cfg.props.max_page_size = 64ull << 20;
  cfg.preset = CM_PRESET_ADAPTIVE;
  cm_manager_t *m = NULL;
  ASSERT_OK(cm_manager_create(st, &cfg, &m, NULL));
  /* four slices on a 2 MiB page, then a request that grows the page size:
   * the first page is outdated, and relocation empties it */
  cm_handle_t h[4], big;
  cm_storage_handle_t before[4], after;
  for (int i = 0; i < 4; i++) {
    ASSERT_OK(cm_manager_reserve(m, 256 << 10, &h[i], NULL));
    cm_binding_t b = cm_handle_binding(h[i]);
    ASSERT_OK(cm_manager_get_storage(m, b, &before[i], NULL));
    cm_binding_release(b);
  }
  ASSERT_OK(cm_manager_reserve(m, 3ull << 20, &big, NULL));
  cm_relocate_stats_t rs;
  cm_diag_t d = {0};
  ASSERT_OK(cm_manager_relocate(m, CM_RELOCATE_EXPLICIT, &rs, &d));
  EXPECT_EQ(rs.moves, 4);
  EXPECT_EQ(rs.bytes_copied, 4 * (256 << 10));
  for (int i = 0; i < 4; i++) {
    cm_binding_t b = cm_handle_binding(h[i]);
    ASSERT_OK(cm_manager_get_storage(m, b, &after, NULL));
    cm_binding_release(b);
    EXPECT_NE(after.id, before[i].id); /* on the current page now */
  }
  cm_storage_stats_t ss;
  cm_storage_stats(cm_manager_storage(m), &ss);
  EXPECT_EQ(ss.copies, 4);
  EXPECT_EQ(ss.copy_waits, 1);
  EXPECT_EQ(ss.copy_failures, 0);
  EXPECT_EQ(cm_manager_check(m, NULL), 0);
  for (int i = 0; i < 4; i++) cm_handle_release(h[i]);
  cm_handle_release(big);
  cm_manager_destroy(m);
  expect_no_messages();
}

/* ---- the application's own instance and device ---------------------------------- */

static _Atomic uint64_t g_app_messages;
static cmvk_bool32 app_callback(cmvk_flags sev, cmvk_flags types, const cmvk_debug_callback_data *d,
                                void *user) {
  (void)types;
  (void)user;
  g_app_messages++;
  fprintf(stderr, "  app messenger (%s): %s\n",
          (sev & CMVK_DEBUG_SEVERITY_ERROR) ? "error" : "warning",
          d && d->message ? d->message : "");
  return 0;
}

static void test_external_device(void) {
  need_device();
  /* An application: its own loader handle, instance (validation on when
   * available), messenger, device and queue. */
  void *lib = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
  ASSERT(lib != NULL);
  cmvk_pfn_get_instance_proc_addr gipa;
  void *sym = dlsym(lib, "vkGetInstanceProcAddr");
  ASSERT(sym != NULL);
  memcpy(&gipa, &sym, sizeof sym);
#define IGET(inst, T, name)                   \
  T name;                                     \
  do {                                        \
    cmvk_void_fn f_ = gipa(inst, "vk" #name); \
    ASSERT(f_ != NULL);                       \
    memcpy(&name, &f_, sizeof f_);            \
  } while (0)
  IGET(NULL, cmvk_pfn_create_instance, CreateInstance);
  const char *layers[] = {"VK_LAYER_KHRONOS_validation"};
  const char *exts[] = {"VK_EXT_debug_utils"};
  cmvk_application_info app = {.s_type = CMVK_STYPE_APPLICATION_INFO,
                               .application_name = "test_vulkan",
                               .api_version = CMVK_API_VERSION_1_2};
  cmvk_instance_create_info ci = {.s_type = CMVK_STYPE_INSTANCE_CREATE_INFO,
                                  .application_info = &app,
                                  .enabled_layer_count = g_validation ? 1 : 0,
                                  .enabled_layer_names = layers,
                                  .enabled_extension_count = g_validation ? 1 : 0,
                                  .enabled_extension_names = exts};
  cmvk_instance inst = NULL;
  ASSERT_STATUS(CreateInstance(&ci, NULL, &inst), CMVK_SUCCESS);
  IGET(inst, cmvk_pfn_destroy_instance, DestroyInstance);
  IGET(inst, cmvk_pfn_enumerate_physical_devices, EnumeratePhysicalDevices);
  IGET(inst, cmvk_pfn_create_device, CreateDevice);
  IGET(inst, cmvk_pfn_get_device_proc_addr, GetDeviceProcAddr);
  IGET(inst, cmvk_pfn_get_physical_device_features2, GetPhysicalDeviceFeatures2);
  IGET(inst, cmvk_pfn_get_physical_device_properties2, GetPhysicalDeviceProperties2);
  cmvk_messenger msgr = 0;
  if (g_validation) {
    IGET(inst, cmvk_pfn_create_messenger, CreateDebugUtilsMessengerEXT);
    cmvk_messenger_create_info mi = {
        .s_type = CMVK_STYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
        .message_severity = CMVK_DEBUG_SEVERITY_WARNING | CMVK_DEBUG_SEVERITY_ERROR,
        .message_type =
            CMVK_DEBUG_TYPE_GENERAL | CMVK_DEBUG_TYPE_VALIDATION | CMVK_DEBUG_TYPE_PERFORMANCE,
        .user_callback = app_callback};
    ASSERT_STATUS(CreateDebugUtilsMessengerEXT(inst, &mi, NULL, &msgr), CMVK_SUCCESS);
  }
  uint32_t n = 1;
  cmvk_physical_device pd = NULL;
  cmvk_result r = EnumeratePhysicalDevices(inst, &n, &pd);
  ASSERT(r == CMVK_SUCCESS || r == CMVK_INCOMPLETE);
  ASSERT(pd != NULL);
  cmvk_physical_device_properties2 p2 = {.s_type = CMVK_STYPE_PHYSICAL_DEVICE_PROPERTIES_2};
  GetPhysicalDeviceProperties2(pd, &p2);
  cmvk_bda_features bda = {.s_type = CMVK_STYPE_PHYSICAL_DEVICE_BUFFER_DEVICE_ADDRESS_FEATURES};
  cmvk_physical_device_features2 f2 = {.s_type = CMVK_STYPE_PHYSICAL_DEVICE_FEATURES_2,
                                       .p_next = &bda};
  bool core12 = p2.properties.api_version >= CMVK_API_VERSION_1_2;
  if (core12) GetPhysicalDeviceFeatures2(pd, &f2);
  bool use_bda = core12 && bda.buffer_device_address;
  cmvk_bda_features en = {.s_type = CMVK_STYPE_PHYSICAL_DEVICE_BUFFER_DEVICE_ADDRESS_FEATURES,
                          .buffer_device_address = 1};
  cm_vulkan_info_t in;
  cm_vulkan_device_info(g_dev, &in); /* same physical device 0: same queue family */
  float prio = 1.0f;
  cmvk_device_queue_create_info qi = {.s_type = CMVK_STYPE_DEVICE_QUEUE_CREATE_INFO,
                                      .queue_family_index = in.queue_family,
                                      .queue_count = 1,
                                      .queue_priorities = &prio};
  cmvk_device_create_info di = {.s_type = CMVK_STYPE_DEVICE_CREATE_INFO,
                                .p_next = use_bda ? &en : NULL,
                                .queue_create_info_count = 1,
                                .queue_create_infos = &qi};
  cmvk_device dev = NULL;
  ASSERT_STATUS(CreateDevice(pd, &di, NULL, &dev), CMVK_SUCCESS);
  cmvk_pfn_get_device_queue GetDeviceQueue;
  cmvk_void_fn fq = GetDeviceProcAddr(dev, "vkGetDeviceQueue");
  memcpy(&GetDeviceQueue, &fq, sizeof fq);
  cmvk_pfn_destroy_device DestroyDevice;
  cmvk_void_fn fd = GetDeviceProcAddr(dev, "vkDestroyDevice");
  memcpy(&DestroyDevice, &fd, sizeof fd);
  cmvk_queue q = NULL;
  GetDeviceQueue(dev, in.queue_family, 0, &q);
  ASSERT(q != NULL);

  /* hand it to cubemem */
  cm_vulkan_external_t ext = {.instance = inst,
                              .physical_device = pd,
                              .device = dev,
                              .queue = q,
                              .queue_family = in.queue_family,
                              .api_version = CMVK_API_VERSION_1_2,
                              .buffer_device_address = use_bda,
                              .memory_budget = false,
                              .get_instance_proc_addr = sym};
  cm_vulkan_device_t *w = NULL;
  cm_diag_t d = {0};
  ASSERT_OK(cm_vulkan_device_wrap(&ext, &w, &d));
  cm_vulkan_info_t wi;
  cm_vulkan_device_info(w, &wi);
  EXPECT(!wi.owned);
  EXPECT_EQ(wi.device_index, -1);
  EXPECT_EQ(wi.buffer_device_address, use_bda);
  EXPECT_EQ(wi.heap_size, in.heap_size);
  cm_vulkan_handles_t hh;
  cm_vulkan_device_handles(w, &hh);
  EXPECT(hh.device == (void *)dev && hh.queue == (void *)q && hh.instance == (void *)inst);
  memory_is_real_on(w);
  /* a storage outlives the caller's reference */
  cm_storage_t *st = NULL;
  ASSERT_OK(cm_vulkan_storage_create(w, NULL, &st, NULL));
  cm_vulkan_device_close(w);
  uint64_t id = 0;
  ASSERT_OK(cm_storage_alloc(st, 8192, &id, NULL));
  cm_storage_destroy(st); /* last reference: the wrapped device is released, not the app's */
  /* bad queue family */
  ext.queue_family = 1000;
  EXPECT_STATUS(cm_vulkan_device_wrap(&ext, &w, &d), CM_EINVAL);
  EXPECT_CONTAINS(d.message, "queue family 1000 out of range");

  /* the application destroys its objects; its messenger saw nothing */
  DestroyDevice(dev, NULL);
  if (msgr) {
    IGET(inst, cmvk_pfn_destroy_messenger, DestroyDebugUtilsMessengerEXT);
    DestroyDebugUtilsMessengerEXT(inst, msgr, NULL);
  }
  DestroyInstance(inst, NULL);
  dlclose(lib);
#undef IGET
  EXPECT_EQ(g_app_messages, 0);
  expect_no_messages();
}

/* ---- staging under cm_device_t --------------------------------------------------- */

static void test_device_with_staging(void) {
  need_device();
  cm_device_config_t dc;
  cm_device_config_init(&dc);
  dc.storage = cm_vulkan_storage_factory;
  dc.storage_arg = g_dev;
  dc.pinned = cm_vulkan_staging_factory;
  dc.pinned_arg = g_dev;
  dc.props = cm_vulkan_device_props(g_dev);
  cm_device_t *dev = NULL;
  ASSERT_OK(cm_device_create(&dc, &dev, NULL));
  cm_handle_t a, p;
  ASSERT_OK(cm_device_reserve(dev, 1, 1 << 20, &a, NULL));
  cm_resource_t pr;
  ASSERT_OK(cm_device_reserve_pinned(dev, 1, 4096, &p, &pr, NULL));
  ASSERT(pr.host != NULL);
  EXPECT_EQ(pr.addr, (uint64_t)(uintptr_t)pr.host);
  memset(pr.host, 0x5A, 4096); /* mapped, host-coherent memory */
  EXPECT_EQ(((unsigned char *)pr.host)[4095], 0x5A);
  ASSERT_OK(cm_device_submit(dev, 1, NULL)); /* records a fence */
  ASSERT_OK(cm_device_defer_release(dev, 1, p, 4096, NULL));
  ASSERT_OK(cm_device_flush(dev, 1, NULL));
  cm_handle_release(a);
  ASSERT_OK(cm_device_submit(dev, 1, NULL));
  cm_device_destroy(dev);
  uint64_t fr = 0, tot = 0;
  ASSERT_OK(cm_vulkan_device_mem_info(g_dev, &fr, &tot, NULL));
  EXPECT_EQ(fr, tot);
  expect_no_messages();
}

/* ---- several storages of one device on several threads ----------------------------- */

typedef struct worker {
  int seed;
  int errors;
} worker;

/* Each thread drives its own storage: allocate, record and wait for an
 * event (a submission to the shared queue), free, flush (a queue wait). The
 * validation layer's thread checks report any unsynchronised queue use. */
static void *worker_main(void *arg) {
  worker *w = arg;
  cm_storage_t *st = NULL;
  if (cm_vulkan_storage_create(g_dev, NULL, &st, NULL) != CM_OK) {
    w->errors++;
    return NULL;
  }
  uint64_t ids[8] = {0};
  unsigned x = (unsigned)w->seed * 2654435761u + 1;
  for (int it = 0; it < 150; it++) {
    x = x * 1103515245u + 12345u;
    int k = (int)(x >> 8) % 8;
    if (ids[k]) {
      cm_storage_dealloc(st, ids[k], 0);
      ids[k] = 0;
    } else if (cm_storage_alloc(st, 4096u + (x >> 12) % (1u << 20), &ids[k], NULL) != CM_OK) {
      w->errors++;
    }
    void *ev = NULL;
    if (cm_storage_event_record(st, &ev, NULL) != CM_OK) w->errors++;
    if (cm_storage_event_sync(st, ev) != CM_OK || cm_storage_event_query(st, ev) != 1) w->errors++;
    cm_storage_event_destroy(st, ev);
    if (it % 7 == 0 && cm_storage_flush(st) != CM_OK) w->errors++;
  }
  cm_storage_destroy(st);
  return NULL;
}

static void test_threads(void) {
  need_device();
  enum { N = 4 };
  pthread_t th[N];
  worker w[N];
  for (int i = 0; i < N; i++) {
    w[i] = (worker){.seed = i + 1};
    ASSERT(pthread_create(&th[i], NULL, worker_main, &w[i]) == 0);
  }
  for (int i = 0; i < N; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < N; i++) EXPECT_EQ(w[i].errors, 0);
  uint64_t fr = 0, tot = 0;
  ASSERT_OK(cm_vulkan_device_mem_info(g_dev, &fr, &tot, NULL));
  EXPECT_EQ(fr, tot);
  expect_no_messages();
}

/* ---- real traces: vulkan vs a simulated device in segment mode ------------------------ */

/* A storage that forwards to a simulated device but offers no virtual
 * memory, so the arena grows by segments exactly as on Vulkan. */
typedef struct novm {
  cm_storage_t *inner;
} novm;
static int nv_alloc(void *c, uint64_t n, uint64_t *id, cm_diag_t *d) {
  cm_storage_t *s = ((novm *)c)->inner;
  return s->ops->alloc(s->ctx, n, id, d);
}
static void nv_dealloc(void *c, uint64_t id) {
  cm_storage_t *s = ((novm *)c)->inner;
  s->ops->dealloc(s->ctx, id);
}
static int nv_flush(void *c) {
  cm_storage_t *s = ((novm *)c)->inner;
  return s->ops->flush ? s->ops->flush(s->ctx) : CM_OK;
}
static int nv_get(void *c, uint64_t id, uint64_t off, uint64_t n, cm_resource_t *r, cm_diag_t *d) {
  cm_storage_t *s = ((novm *)c)->inner;
  return s->ops->get(s->ctx, id, off, n, r, d);
}
static void nv_release(void *c) {
  cm_storage_destroy(((novm *)c)->inner);
  free(c);
}
static int nv_mem_info(void *c, uint64_t *f, uint64_t *t) {
  cm_storage_t *s = ((novm *)c)->inner;
  return s->ops->mem_info ? s->ops->mem_info(s->ctx, f, t) : CM_ENOTSUP;
}
static const cm_storage_ops_t k_novm_ops = {.name = "sim-segments",
                                            .alloc = nv_alloc,
                                            .dealloc = nv_dealloc,
                                            .flush = nv_flush,
                                            .get = nv_get,
                                            .release = nv_release,
                                            .mem_info = nv_mem_info};

static cm_storage_t *sim_segments(uint64_t capacity) {
  cm_storage_t *sim = NULL, *out = NULL;
  if (cm_storage_sim_create(capacity, true, 0, &sim) != CM_OK) return NULL;
  novm *c = calloc(1, sizeof *c);
  if (!c) {
    cm_storage_destroy(sim);
    return NULL;
  }
  c->inner = sim;
  if (cm_storage_create(&k_novm_ops, c, &out) != CM_OK) {
    nv_release(c);
    return NULL;
  }
  return out;
}

static int replay_on(cm_storage_t *st, cm_device_props_t props, const cm_trace_t *t,
                     cm_replay_result_t *res) {
  cm_manager_config_t cfg;
  cm_manager_config_init(&cfg);
  cfg.name = "replay";
  cfg.props = props;
  cm_manager_t *m = NULL;
  int rc = cm_manager_create(st, &cfg, &m, NULL);
  if (rc) {
    cm_storage_destroy(st);
    return rc;
  }
  cm_diag_t d = {0};
  rc = cm_replay_run(t, m, NULL, res, &d);
  if (rc) fprintf(stderr, "  replay: %s\n", d.message);
  EXPECT_EQ(cm_manager_check(m, NULL), 0);
  cm_manager_destroy(m);
  return rc;
}

static void test_replay_vs_sim(void) {
  need_device();
  const char *shared = cm_test_shared_dir();
  if (!shared) CM_SKIP("../shared (the traces) is absent");
  static const char *const traces[] = {
      "cpu/torch-cpu-mlp-train.csv",           "cpu/torch-cpu-gpt-train.csv",
      "cpu/torch-cpu-gpt-serve-varlen.csv",    "cpu/torch-cpu-lstm-varlen-train.csv",
      "cpu/torch-cpu-mobilenet-train.csv",     "cpu/torch-cpu-train-then-eval.csv",
      "gpu/cs336-medium-ctx128-inference.csv", "plans/mindspore-resnet50-plan.csv"};
  cm_vulkan_info_t in;
  cm_vulkan_device_info(g_dev, &in);
  cm_device_props_t props = cm_vulkan_device_props(g_dev);
  int done = 0;
  for (size_t i = 0; i < sizeof traces / sizeof traces[0]; i++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/traces/%s", shared, traces[i]);
    cm_trace_t *t = NULL;
    if (cm_trace_load(path, NULL, &t, NULL) != CM_OK) {
      printf("  %s: not found, skipped\n", traces[i]);
      continue;
    }
    cm_replay_result_t rs, rv;
    memset(&rs, 0, sizeof rs);
    memset(&rv, 0, sizeof rv);
    cm_storage_t *sim = sim_segments(in.heap_size);
    ASSERT(sim != NULL);
    int rc1 = replay_on(sim, props, t, &rs);
    cm_storage_t *vk = NULL;
    ASSERT_OK(cm_vulkan_storage_create(g_dev, NULL, &vk, NULL));
    int rc2 = replay_on(vk, props, t, &rv);
    EXPECT_OK(rc1);
    EXPECT_OK(rc2);
    EXPECT_EQ(rv.peak_reserved_bytes, rs.peak_reserved_bytes);
    EXPECT_EQ(rv.device_allocs, rs.device_allocs);
    EXPECT_EQ(rv.device_frees, rs.device_frees);
    EXPECT_EQ(rv.failed_allocs, rs.failed_allocs);
    EXPECT_EQ(rv.reserved_at_end, rs.reserved_at_end);
    EXPECT_EQ(rv.peak_live_bytes, rs.peak_live_bytes);
    printf("  %-40s peak live %13" PRIu64 "  peak reserved vulkan %13" PRIu64
           "  sim(segments) %13" PRIu64 "  device allocs %" PRIu64 "/%" PRIu64 "  failed %" PRIu64
           "/%" PRIu64 "  vulkan time in driver %.1f ms\n",
           traces[i], rv.peak_live_bytes, rv.peak_reserved_bytes, rs.peak_reserved_bytes,
           rv.device_allocs, rs.device_allocs, rv.failed_allocs, rs.failed_allocs,
           (double)rv.device_time_ns / 1e6);
    cm_replay_result_free(&rs);
    cm_replay_result_free(&rv);
    cm_trace_free(t);
    done++;
  }
  EXPECT_GE(done, 1);
  uint64_t fr = 0, tot = 0;
  ASSERT_OK(cm_vulkan_device_mem_info(g_dev, &fr, &tot, NULL));
  EXPECT_EQ(fr, tot);
  expect_no_messages();
}

int main(void) {
  cm_vulkan_fixture_open();
  CM_RUN(test_properties);
  CM_RUN(test_validation_is_live);
  CM_RUN(test_storage_contract);
  CM_RUN(test_limits);
  CM_RUN(test_memory_is_real);
  CM_RUN(test_external_device);
  CM_RUN(test_device_with_staging);
  CM_RUN(test_threads);
  CM_RUN(test_replay_vs_sim);
  CM_RUN(test_relocation);
  CM_RUN(test_close_clean);
  return cm_test_finish();
}
