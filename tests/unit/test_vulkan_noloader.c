/*
 * test_vulkan_noloader.c - the Vulkan storage where Vulkan is missing: a
 * bogus CM_VULKAN_LIBRARY and a library that is not a loader fail with
 * CM_ENODEV and a message naming the cause; with the loader present but no
 * driver (VK_ICD_FILENAMES / VK_DRIVER_FILES pointing at nothing) opening
 * fails with CM_ENODEV too; bad arguments are refused with CM_EINVAL. Runs
 * everywhere (no driver needed), so it is a unit test.
 */
#include <stdlib.h>
#include <string.h>

#include "cm_test.h"
#include "cubemem/cubemem.h"
#include "cubemem/vulkan.h"
#include "storage/vulkan/vk_abi.h"

static void test_no_loader_env(void) {
  const char *old = getenv("CM_VULKAN_LIBRARY");
  char saved[4096] = "";
  if (old) snprintf(saved, sizeof saved, "%s", old);
  setenv("CM_VULKAN_LIBRARY", "/nonexistent/dir/libvulkan-bogus.so.1", 1);
  cm_vulkan_device_t *dev = (cm_vulkan_device_t *)0x1;
  cm_diag_t d = {0};
  int rc = cm_vulkan_device_open(NULL, &dev, &d);
  cm_storage_t *st = (cm_storage_t *)0x1;
  cm_diag_t d2 = {0};
  int rc2 = cm_vulkan_storage_open_default(-1, &st, NULL, &d2);
  if (old)
    setenv("CM_VULKAN_LIBRARY", saved, 1);
  else
    unsetenv("CM_VULKAN_LIBRARY");
  EXPECT_STATUS(rc, CM_ENODEV);
  EXPECT(dev == NULL);
  EXPECT_STATUS(d.code, CM_ENODEV);
  EXPECT_CONTAINS(d.message, "/nonexistent/dir/libvulkan-bogus.so.1");
  EXPECT_CONTAINS(d.message, "cannot open shared object file");
  EXPECT_CONTAINS(d.message, "CM_VULKAN_LIBRARY");
  EXPECT_STATUS(rc2, CM_ENODEV);
  EXPECT(st == NULL);
  EXPECT_CONTAINS(d2.message, "Vulkan loader not available");
}

static void test_not_a_loader(void) {
  cm_vulkan_open_options_t o;
  cm_vulkan_open_options_init(&o);
  o.library = "libc.so.6";
  cm_vulkan_device_t *dev = NULL;
  cm_diag_t d = {0};
  EXPECT_STATUS(cm_vulkan_device_open(&o, &dev, &d), CM_ENODEV);
  EXPECT(dev == NULL);
  EXPECT_CONTAINS(d.message, "libc.so.6 is not a Vulkan loader: it lacks vkGetInstanceProcAddr");
}

static void test_bad_arguments(void) {
  cm_diag_t d = {0};
  EXPECT_STATUS(cm_vulkan_device_open(NULL, NULL, &d), CM_EINVAL);
  cm_vulkan_device_t *dev = (cm_vulkan_device_t *)0x1;
  EXPECT_STATUS(cm_vulkan_device_wrap(NULL, &dev, &d), CM_EINVAL);
  EXPECT(dev == NULL);
  cm_vulkan_external_t ext = {.instance = (void *)0x1};
  EXPECT_STATUS(cm_vulkan_device_wrap(&ext, &dev, &d), CM_EINVAL);
  EXPECT_CONTAINS(d.message, "required");
  ext = (cm_vulkan_external_t){
      (void *)1, (void *)1, (void *)1, NULL, 0, CMVK_MAKE_API_VERSION(1, 0, 0), false, false, NULL};
  EXPECT_STATUS(cm_vulkan_device_wrap(&ext, &dev, &d), CM_EINVAL);
  EXPECT_CONTAINS(d.message, "below 1.1");
  cm_storage_t *st = (cm_storage_t *)0x1;
  EXPECT_STATUS(cm_vulkan_storage_create(NULL, NULL, &st, &d), CM_EINVAL);
  EXPECT(st == NULL);
  EXPECT_STATUS(cm_vulkan_staging_storage_create(NULL, NULL, &st, &d), CM_EINVAL);
  /* resolving a storage that is not a Vulkan one */
  cm_storage_t *sim = NULL;
  ASSERT_OK(cm_storage_sim_create(0, false, 0, &sim));
  uint64_t id = 0;
  ASSERT_OK(cm_storage_alloc(sim, 64, &id, NULL));
  cm_vulkan_slice_t sl;
  EXPECT_STATUS(cm_vulkan_storage_resolve(sim, id, 0, 64, &sl, &d), CM_EINVAL);
  EXPECT_CONTAINS(d.message, "sim storage is not a Vulkan storage");
  cm_vulkan_storage_counters_t c;
  cm_vulkan_storage_counters(sim, &c);
  EXPECT_EQ(c.live, 0);
  cm_storage_destroy(sim);
  EXPECT_EQ(cm_vulkan_device_messages(NULL), 0);
  EXPECT_STR(cm_vulkan_result_name(-2), "VK_ERROR_OUT_OF_DEVICE_MEMORY");
  EXPECT_STR(cm_vulkan_result_name(12345), "VK_RESULT_UNKNOWN");
  cm_vulkan_device_close(NULL);
}

static void test_no_driver(void) {
  /* The loader reads these when an instance is created: no ICD at all. */
  setenv("VK_ICD_FILENAMES", "/nonexistent/cubemem-no-icd.json", 1);
  setenv("VK_DRIVER_FILES", "/nonexistent/cubemem-no-icd.json", 1);
  cm_vulkan_open_options_t o;
  cm_vulkan_open_options_init(&o);
  o.validation = false;
  cm_vulkan_device_t *dev = (cm_vulkan_device_t *)0x1;
  cm_diag_t d = {0};
  int rc = cm_vulkan_device_open(&o, &dev, &d);
  unsetenv("VK_ICD_FILENAMES");
  unsetenv("VK_DRIVER_FILES");
  EXPECT_STATUS(rc, CM_ENODEV);
  EXPECT(dev == NULL);
  if (strstr(d.message, "Vulkan loader not available")) {
    printf("  (no loader installed: %s)\n", d.message);
  } else {
    /* a loader without drivers: vkCreateInstance, or enumeration, fails */
    EXPECT(strstr(d.message, "vkCreateInstance") || strstr(d.message, "not found"));
    printf("  loader without a driver: %s\n", d.message);
  }
}

int main(void) {
  CM_RUN(test_no_loader_env);
  CM_RUN(test_not_a_loader);
  CM_RUN(test_bad_arguments);
  CM_RUN(test_no_driver);
  return cm_test_finish();
}
