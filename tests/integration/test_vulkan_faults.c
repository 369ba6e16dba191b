/*
 * test_vulkan_faults.c - the failure paths of the Vulkan storages
 * (cubemem/vulkan.h) against a real driver (in CI: Mesa's lavapipe) with
 * VK_LAYER_KHRONOS_validation enabled, on the device of
 * tests/harness/cm_vulkan_fixture.h. Normal operation is in test_vulkan.c.
 *
 * Covered: a fault sweep through the faulty decorator with the manager's
 * invariants checked after every event; Vulkan errors (out of device or host
 * memory, too many objects, device lost - from vkAllocateMemory,
 * vkBindBufferMemory, vkQueueWaitIdle and vkQueueSubmit, injected through an
 * application's entry points) mapped to their statuses with nothing left
 * behind; VK_EXT_memory_budget (simulated through the same interposition,
 * since lavapipe lacks it) refusing what exceeds the budget; and a device
 * close that the validation layer finds clean.
 *
 * Every test ends with no validation message (warning or error) seen.
 * Without a driver every test SKIPs, saying why (exit 77) - unless
 * CM_VULKAN_REQUIRED=1 (set by .ci/run's vulkan stage), which turns the skip
 * into a failure and also requires the validation layer. Prints the fault
 * points.
 */
#include <stdlib.h>
#include <string.h>

#include "cm_test.h"
#include "cm_vulkan_fixture.h"
#include "cubemem/cubemem.h"
#include "cubemem/faulty.h"
#include "cubemem/replay.h"
#include "cubemem/vulkan.h"
#include "storage/vulkan/vk_abi.h"

/* ---- Vulkan errors: an application's entry points that fail on demand ------------- */

/* Wrapping with our own vkGetInstanceProcAddr interposes vkAllocateMemory,
 * vkBindBufferMemory, vkQueueWaitIdle and vkQueueSubmit; each fails with the
 * VkResult set here (0 = call the driver). */
static cmvk_result g_fail_alloc, g_fail_bind, g_fail_wait, g_fail_submit;
static cmvk_pfn_get_instance_proc_addr g_real_gipa;
static cmvk_pfn_get_device_proc_addr g_real_gdpa;
static cmvk_pfn_allocate_memory g_real_alloc;
static cmvk_pfn_bind_buffer_memory g_real_bind;
static cmvk_pfn_queue_wait_idle g_real_wait;
static cmvk_pfn_queue_submit g_real_submit;
/* VK_EXT_memory_budget, simulated (lavapipe lacks it): every heap reports
 * this budget and usage when a budget structure is chained (0 = off). */
static uint64_t g_budget, g_usage;
static cmvk_pfn_get_physical_device_memory_properties2 g_real_mp2;

static void fake_mp2(cmvk_physical_device pd, cmvk_memory_properties2 *out) {
  void *chain = out->p_next;
  out->p_next = NULL; /* the driver does not know the structure */
  g_real_mp2(pd, out);
  out->p_next = chain;
  for (cmvk_memory_budget *b = chain; b; b = b->p_next)
    if (b->s_type == CMVK_STYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT)
      for (int i = 0; i < CMVK_MAX_MEMORY_HEAPS; i++)
        b->heap_budget[i] = g_budget, b->heap_usage[i] = g_usage;
}

static cmvk_result fake_alloc(cmvk_device d, const cmvk_memory_allocate_info *i, const void *a,
                              cmvk_device_memory *out) {
  return g_fail_alloc ? g_fail_alloc : g_real_alloc(d, i, a, out);
}
static cmvk_result fake_bind(cmvk_device d, cmvk_buffer b, cmvk_device_memory m, cmvk_size o) {
  return g_fail_bind ? g_fail_bind : g_real_bind(d, b, m, o);
}
static cmvk_result fake_wait(cmvk_queue q) { return g_fail_wait ? g_fail_wait : g_real_wait(q); }
static cmvk_result fake_submit(cmvk_queue q, uint32_t n, const cmvk_submit_info *si, cmvk_fence f) {
  return g_fail_submit ? g_fail_submit : g_real_submit(q, n, si, f);
}

#define AS_VOID_FN(out, fn)             \
  do {                                  \
    memcpy(&(out), &(fn), sizeof(out)); \
  } while (0)

static cmvk_void_fn fake_gdpa(cmvk_device d, const char *name) {
  cmvk_void_fn real = g_real_gdpa(d, name), r = real;
  if (!strcmp(name, "vkAllocateMemory")) {
    memcpy(&g_real_alloc, &real, sizeof real);
    cmvk_pfn_allocate_memory f = fake_alloc;
    AS_VOID_FN(r, f);
  } else if (!strcmp(name, "vkBindBufferMemory")) {
    memcpy(&g_real_bind, &real, sizeof real);
    cmvk_pfn_bind_buffer_memory f = fake_bind;
    AS_VOID_FN(r, f);
  } else if (!strcmp(name, "vkQueueWaitIdle")) {
    memcpy(&g_real_wait, &real, sizeof real);
    cmvk_pfn_queue_wait_idle f = fake_wait;
    AS_VOID_FN(r, f);
  } else if (!strcmp(name, "vkQueueSubmit")) {
    memcpy(&g_real_submit, &real, sizeof real);
    cmvk_pfn_queue_submit f = fake_submit;
    AS_VOID_FN(r, f);
  }
  return r;
}

static cmvk_void_fn fake_gipa(cmvk_instance i, const char *name) {
  cmvk_void_fn real = g_real_gipa(i, name);
  if (!strcmp(name, "vkGetPhysicalDeviceMemoryProperties2") && g_budget) {
    memcpy(&g_real_mp2, &real, sizeof real);
    cmvk_pfn_get_physical_device_memory_properties2 f = fake_mp2;
    cmvk_void_fn r;
    AS_VOID_FN(r, f);
    return r;
  }
  if (strcmp(name, "vkGetDeviceProcAddr") != 0) return real;
  memcpy(&g_real_gdpa, &real, sizeof real);
  cmvk_pfn_get_device_proc_addr f = fake_gdpa;
  cmvk_void_fn r;
  AS_VOID_FN(r, f);
  return r;
}

/* A wrapped view of g_dev whose entry points come through fake_gipa. */
static cm_vulkan_device_t *wrap_interposed(bool budget) {
  cm_vulkan_handles_t h;
  cm_vulkan_device_handles(g_dev, &h);
  memcpy(&g_real_gipa, &h.get_instance_proc_addr, sizeof g_real_gipa);
  cm_vulkan_info_t in;
  cm_vulkan_device_info(g_dev, &in);
  cmvk_pfn_get_instance_proc_addr fg = fake_gipa;
  void *fgp;
  memcpy(&fgp, &fg, sizeof fgp);
  cm_vulkan_external_t ext = {.instance = h.instance,
                              .physical_device = h.physical_device,
                              .device = h.device,
                              .queue = h.queue,
                              .queue_family = h.queue_family,
                              .api_version = in.api_version,
                              .buffer_device_address = in.buffer_device_address,
                              .memory_budget = budget,
                              .get_instance_proc_addr = fgp};
  cm_vulkan_device_t *w = NULL;
  cm_diag_t d = {0};
  if (cm_vulkan_device_wrap(&ext, &w, &d) != CM_OK) {
    cm_test_fail(__FILE__, __LINE__, "wrap: %s", d.message);
    return NULL;
  }
  return w;
}

static void test_memory_budget(void) {
  need_device();
  g_budget = 16u << 20;
  g_usage = 4u << 20;
  cm_vulkan_device_t *w = wrap_interposed(true);
  ASSERT(w != NULL);
  cm_vulkan_info_t wi;
  cm_vulkan_device_info(w, &wi);
  EXPECT(wi.memory_budget);
  cm_storage_t *st = NULL;
  ASSERT_OK(cm_vulkan_storage_create(w, NULL, &st, NULL));
  cm_diag_t d = {0};
  uint64_t id = 0, id2 = 0;
  EXPECT_STATUS(cm_storage_alloc(st, 16u << 20, &id, &d), CM_EOOM);
  EXPECT_CONTAINS(d.message, "the memory budget (VK_EXT_memory_budget) has 12582912 bytes left");
  EXPECT_OK(cm_storage_alloc(st, 8u << 20, &id2, NULL));
  uint64_t fr = 0, tot = 0;
  EXPECT_OK(cm_vulkan_device_mem_info(w, &fr, &tot, NULL));
  EXPECT_EQ(fr, 12u << 20); /* the budget left, below the heap's free bytes */
  EXPECT_EQ(tot, wi.heap_size);
  cm_storage_destroy(st);
  cm_vulkan_device_close(w);
  g_budget = g_usage = 0;
  expect_no_messages();
}

static void test_driver_errors(void) {
  need_device();
  cm_vulkan_device_t *w = wrap_interposed(false);
  ASSERT(w != NULL);
  cm_storage_t *st = NULL;
  ASSERT_OK(cm_vulkan_storage_create(w, NULL, &st, NULL));
  static const struct {
    cmvk_result *knob;
    cmvk_result r;
    int want;
    const char *text;
  } cases[] = {
      {&g_fail_alloc, CMVK_ERROR_OUT_OF_DEVICE_MEMORY, CM_EOOM,
       "vkAllocateMemory returned VK_ERROR_OUT_OF_DEVICE_MEMORY"},
      {&g_fail_alloc, CMVK_ERROR_TOO_MANY_OBJECTS, CM_EOOM, "VK_ERROR_TOO_MANY_OBJECTS"},
      {&g_fail_alloc, CMVK_ERROR_OUT_OF_HOST_MEMORY, CM_ENOMEM, "VK_ERROR_OUT_OF_HOST_MEMORY"},
      {&g_fail_alloc, CMVK_ERROR_DEVICE_LOST, CM_ESTORAGE,
       "vkAllocateMemory for 4096 bytes failed: VK_ERROR_DEVICE_LOST (VkResult -4)"},
      {&g_fail_bind, CMVK_ERROR_OUT_OF_DEVICE_MEMORY, CM_EOOM, "vkBindBufferMemory returned"},
      {&g_fail_bind, CMVK_ERROR_UNKNOWN, CM_ESTORAGE, "vkBindBufferMemory for 4096 bytes failed"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    *cases[i].knob = cases[i].r;
    cm_diag_t d = {0};
    uint64_t id = 0;
    EXPECT_STATUS(cm_storage_alloc(st, 4096, &id, &d), cases[i].want);
    EXPECT_STATUS(d.native, cases[i].r);
    EXPECT_CONTAINS(d.message, cases[i].text);
    *cases[i].knob = 0;
    cm_vulkan_storage_counters_t c;
    cm_vulkan_storage_counters(st, &c);
    EXPECT_EQ(c.live, 0); /* nothing left behind: buffer destroyed, memory freed */
    uint64_t fr = 0, tot = 0;
    ASSERT_OK(cm_vulkan_device_mem_info(w, &fr, &tot, NULL));
    EXPECT_EQ(fr, tot);
  }
  /* a failed wait before freeing: reported, counted, and the memory freed anyway */
  uint64_t id = 0;
  ASSERT_OK(cm_storage_alloc(st, 4096, &id, NULL));
  cm_storage_dealloc(st, id, 4096);
  g_fail_wait = CMVK_ERROR_DEVICE_LOST;
  EXPECT_STATUS(cm_storage_flush(st), CM_ESTORAGE);
  g_fail_wait = 0;
  cm_vulkan_storage_counters_t c;
  cm_vulkan_storage_counters(st, &c);
  EXPECT_EQ(c.free_errors, 1);
  EXPECT_EQ(c.live, 0);
  /* an event whose submission fails: an error, and its fence destroyed */
  g_fail_submit = CMVK_ERROR_DEVICE_LOST;
  void *ev = (void *)0x1;
  cm_diag_t d = {0};
  EXPECT_STATUS(cm_storage_event_record(st, &ev, &d), CM_ESTORAGE);
  EXPECT_CONTAINS(d.message, "vkQueueSubmit (event) failed: VK_ERROR_DEVICE_LOST");
  EXPECT(ev == NULL);
  g_fail_submit = 0;
  cm_storage_destroy(st);
  cm_vulkan_device_close(w);
  expect_no_messages();
}

/* ---- fault injection ------------------------------------------------------------------ */

static cm_trace_t *sweep_trace(void) {
  const char *shared = cm_test_shared_dir();
  enum { LINES = 3001 };
  char *text = NULL;
  size_t len = 0;
  if (shared) {
    char path[4096];
    snprintf(path, sizeof path, "%s/traces/cpu/torch-cpu-mlp-train.csv", shared);
    FILE *f = fopen(path, "rb");
    if (f) {
      size_t cap = 1 << 20;
      text = malloc(cap);
      int lines = 0, c;
      while (text && lines < LINES && (c = fgetc(f)) != EOF && len + 1 < cap) {
        text[len++] = (char)c;
        if (c == '\n') lines++;
      }
      fclose(f);
    }
  }
  if (!text) { /* synthetic: growing activations freed in reverse */
    size_t cap = 1 << 18;
    text = malloc(cap);
    if (!text) return NULL;
    len = (size_t)snprintf(text, cap, "Thread,Time,Action,Pointer,Size,Stream\n");
    for (int step = 0; step < 4; step++) {
      for (int l = 0; l < 40; l++)
        len += (size_t)snprintf(text + len, cap - len, "1,00:00:00.000001,allocate,0x%x,%d,0x0\n",
                                0x1000 + l * 16, (l * 37 % 11 + 1) * 100000);
      for (int l = 39; l >= 0; l--)
        len += (size_t)snprintf(text + len, cap - len, "1,00:00:00.000002,free,0x%x,0,0x0\n",
                                0x1000 + l * 16);
    }
  }
  cm_trace_t *t = NULL;
  int rc = cm_trace_parse(text, len, NULL, &t, NULL);
  free(text);
  return rc == CM_OK ? t : NULL;
}

/* One run of the scenario under `plan`; returns the counted storage calls. */
static uint64_t sweep_run(const cm_trace_t *t, cm_preset_t preset, const cm_fault_plan_t *plan,
                          uint64_t *failures, bool *ok) {
  *ok = false;
  cm_storage_t *vk = NULL, *fs = NULL;
  if (cm_vulkan_storage_create(g_dev, NULL, &vk, NULL) != CM_OK) return 0;
  if (cm_storage_faulty_create(vk, plan, &fs) != CM_OK) {
    cm_storage_destroy(vk);
    return 0;
  }
  cm_manager_config_t cfg;
  cm_manager_config_init(&cfg);
  cfg.name = "vulkan fault sweep";
  cfg.props = cm_vulkan_device_props(g_dev);
  cfg.preset = preset;
  cm_manager_t *m = NULL;
  if (cm_manager_create(fs, &cfg, &m, NULL) != CM_OK) {
    cm_storage_destroy(fs);
    return 0;
  }
  cm_handle_t *slots = calloc(t->slots ? t->slots : 1, sizeof *slots);
  uint64_t *sizes = calloc(t->slots ? t->slots : 1, sizeof *sizes);
  bool good = slots && sizes;
  *failures = 0;
  /* weights first, in a persistent window */
  cm_handle_t w[4] = {{NULL}};
  cm_manager_set_mode(m, CM_MODE_PERSISTENT);
  for (int i = 0; i < 4 && good; i++) {
    uint64_t before = cm_storage_faulty_injected(fs);
    cm_diag_t d = {0};
    int rc = cm_manager_reserve(m, 65536u << i, &w[i], &d);
    if (rc != CM_OK) {
      good &= cm_storage_faulty_injected(fs) != before && (rc == CM_EOOM || rc == CM_ESTORAGE) &&
              w[i].d == NULL && d.message[0];
      (*failures)++;
    }
  }
  cm_manager_set_mode(m, CM_MODE_AUTO);
  uint64_t live_n = 0, live_b = 0;
  for (size_t e = 0; e < t->count && good; e++) {
    const cm_trace_event_t *ev = &t->events[e];
    if (ev->action == CM_TRACE_ALLOC) {
      uint64_t before = cm_storage_faulty_injected(fs);
      cm_diag_t d = {0};
      cm_handle_t h = {NULL};
      int rc = cm_manager_reserve(m, ev->size, &h, &d);
      if (rc == CM_OK) {
        slots[ev->slot] = h;
        sizes[ev->slot] = ev->size;
        live_n++, live_b += ev->size;
        /* every live slice resolves to a buffer range inside its allocation */
        cm_binding_t b = cm_handle_binding(h);
        cm_storage_handle_t sh;
        good &= cm_manager_get_storage(m, b, &sh, NULL) == CM_OK;
        cm_vulkan_slice_t sl;
        good &= cm_vulkan_storage_resolve(vk, sh.id, sh.offset, sh.size, &sl, NULL) == CM_OK &&
                sl.buffer != 0 && sl.size == ev->size;
        cm_binding_release(b);
      } else {
        if (!(cm_storage_faulty_injected(fs) != before && (rc == CM_EOOM || rc == CM_ESTORAGE) &&
              h.d == NULL && d.code == rc && d.message[0])) {
          cm_test_fail(__FILE__, __LINE__, "event %zu: reserve failed with %s without a fault: %s",
                       e, cm_err_name(rc), d.message);
          good = false;
        }
        (*failures)++;
      }
    } else if (slots[ev->slot].d) {
      cm_handle_release(slots[ev->slot]);
      slots[ev->slot].d = NULL;
      live_n--, live_b -= sizes[ev->slot];
    }
    cm_usage_t u;
    cm_manager_usage(m, &u);
    uint64_t wn = 0, wb = 0;
    for (int i = 0; i < 4; i++)
      if (w[i].d) wn++, wb += 65536u << i;
    good &= u.number_allocs == live_n + wn && u.bytes_in_use == live_b + wb;
    if (cm_manager_check(m, NULL) != 0) {
      cm_test_fail(__FILE__, __LINE__, "cm_manager_check failed after event %zu", e);
      good = false;
    }
  }
  for (uint32_t i = 0; slots && i < t->slots; i++) cm_handle_release(slots[i]);
  for (int i = 0; i < 4; i++) cm_handle_release(w[i]);
  cm_manager_cleanup(m, true);
  good &= cm_manager_check(m, NULL) == 0;
  cm_usage_t u;
  cm_manager_usage(m, &u);
  good &= u.number_allocs == 0 && u.bytes_in_use == 0;
  uint64_t calls = cm_storage_faulty_calls(fs);
  cm_manager_destroy(m);
  free(slots);
  free(sizes);
  uint64_t fr = 0, tot = 0;
  good &= cm_vulkan_device_mem_info(g_dev, &fr, &tot, NULL) == CM_OK && fr == tot;
  *ok = good;
  return calls;
}

static void test_fault_sweep(void) {
  need_device();
  cm_trace_t *t = sweep_trace();
  ASSERT(t != NULL);
  uint64_t points = 0, bad = 0, injected_runs = 0, total_calls = 0;
  static const cm_preset_t presets[] = {CM_PRESET_DEFAULT, CM_PRESET_EXCLUSIVE_PAGES,
                                        CM_PRESET_SUBSLICES};
  for (size_t pi = 0; pi < 3; pi++) {
    cm_preset_t preset = presets[pi];
    cm_fault_plan_t plan;
    cm_fault_plan_init(&plan);
    uint64_t failures = 0;
    bool ok = false;
    uint64_t calls = sweep_run(t, preset, &plan, &failures, &ok);
    EXPECT(ok);
    EXPECT_EQ(failures, 0);
    EXPECT_GT(calls, 0);
    total_calls += calls;
    for (int pass = 0; pass < 2; pass++) {
      for (uint64_t k = 1; k <= calls; k++) {
        cm_fault_plan_init(&plan);
        plan.mode = pass ? CM_FAULT_FROM_NTH : CM_FAULT_NTH;
        plan.nth = k;
        plan.error = (k % 2) ? CM_EOOM : CM_ESTORAGE;
        sweep_run(t, preset, &plan, &failures, &ok);
        points++;
        if (!ok) {
          bad++;
          if (bad < 5)
            cm_test_fail(__FILE__, __LINE__,
                         "preset %d, fault point %" PRIu64 " (pass %d) broke an invariant",
                         (int)preset, k, pass);
        }
        if (failures) injected_runs++;
      }
    }
  }
  EXPECT_EQ(bad, 0);
  EXPECT_GT(injected_runs, 0);
  printf("  fault sweep (layouts default, exclusive-pages, subslices): %" PRIu64
         " storage calls in the fault-free runs, %" PRIu64 " fault points, %" PRIu64
         " runs saw a failed reserve, %" PRIu64 " broken\n",
         total_calls, points, injected_runs, bad);
  cm_trace_free(t);
  expect_no_messages();
}

int main(void) {
  cm_vulkan_fixture_open();
  CM_RUN(test_fault_sweep);
  CM_RUN(test_driver_errors);
  CM_RUN(test_memory_budget);
  CM_RUN(test_close_clean);
  return cm_test_finish();
}
