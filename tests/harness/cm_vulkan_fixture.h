/*
 * cm_vulkan_fixture.h - the device the Vulkan integration tests share
 * (tests/integration/test_vulkan*.c): one device opened with validation by
 * cm_vulkan_fixture_open() at the start of main, need_device() at the start
 * of every test (a SKIP saying why without a driver, a failure under
 * CM_VULKAN_REQUIRED=1), expect_no_messages() at the end of every test, and
 * test_close_clean, the last test. Header only; everything is static (one
 * copy per test program).
 */
#ifndef CM_VULKAN_FIXTURE_H
#define CM_VULKAN_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_test.h"
#include "cubemem/vulkan.h"

static cm_vulkan_device_t *g_dev;
static char g_why[512];
static bool g_required;
static bool g_validation;
/* Messages provoked on purpose (test_validation_is_live): later tests count
 * from here. */
static uint64_t g_baseline;

/* Whether the environment variable n is "1". */
static bool env_on(const char *n) {
  const char *v = getenv(n);
  return v && !strcmp(v, "1");
}

/* Every test starts here. */
static void need_device(void) {
  if (g_dev) return;
  if (g_required) {
    cm_test_fail(__FILE__, __LINE__, "CM_VULKAN_REQUIRED=1 but no Vulkan device: %s", g_why);
    longjmp(*cm_test_jmp, 1);
  }
  CM_SKIP(g_why);
}

/* Fail the test if a validation message was seen since g_baseline. */
static void expect_no_messages(void) {
  uint64_t n = cm_vulkan_messages_total() - g_baseline;
  if (n) {
    char last[512];
    cm_vulkan_device_last_message(g_dev, last, sizeof last);
    cm_test_fail(__FILE__, __LINE__, "%" PRIu64 " Vulkan validation message(s); last: %s", n, last);
  }
}

/* Closing the device destroys it: the validation layer reports any Vulkan
 * object cubemem failed to destroy (VUID-vkDestroyDevice-device-00378). */
static void test_close_clean(void) {
  need_device();
  cm_vulkan_device_close(g_dev);
  g_dev = NULL;
  uint64_t n = cm_vulkan_messages_total() - g_baseline;
  EXPECT_EQ(n, 0);
}

/* Open the shared device (validation on; without the layer, off unless
 * CM_VULKAN_REQUIRED=1); on failure g_dev stays NULL and g_why says why. */
static void cm_vulkan_fixture_open(void) {
  g_required = env_on("CM_VULKAN_REQUIRED");
  cm_vulkan_open_options_t o;
  cm_vulkan_open_options_init(&o);
  o.validation = true;
  o.print_messages = true;
  cm_diag_t d = {0};
  int rc = cm_vulkan_device_open(&o, &g_dev, &d);
  if (rc == CM_ENODEV && strstr(d.message, "VK_LAYER_KHRONOS_validation") && !g_required) {
    printf("  note: %s; running without validation\n", d.message);
    o.validation = false;
    rc = cm_vulkan_device_open(&o, &g_dev, &d);
  }
  if (rc != CM_OK) {
    snprintf(g_why, sizeof g_why, "no Vulkan device: %s", d.message);
    g_dev = NULL;
  } else {
    cm_vulkan_info_t in;
    cm_vulkan_device_info(g_dev, &in);
    g_validation = in.validation;
  }
}

#endif
