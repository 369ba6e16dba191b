/*
 * test_poison.c - under AddressSanitizer, the bytes of a slice that was
 * released (and is now cached by its pool) are poisoned, so a use-after-free
 * into pooled memory is reported; a slice handed out again is addressable.
 * Skips (exit 77) in builds without ASan.
 */
#include <string.h>

#include "base/util.h"
#include "cm_test.h"
#include "cubemem/cubemem.h"

#ifdef CM_ASAN
static void check_layout(cm_preset_t preset) {
  cm_storage_t *s = NULL;
  ASSERT_OK(cm_storage_host_create(0, &s));
  cm_manager_config_t cfg;
  cm_manager_config_init(&cfg);
  cfg.preset = preset;
  cm_manager_t *m = NULL;
  ASSERT_OK(cm_manager_create(s, &cfg, &m, NULL));
  cm_handle_t keep, h;
  ASSERT_OK(cm_manager_reserve(m, 4096, &keep, NULL)); /* keeps the page alive */
  ASSERT_OK(cm_manager_reserve(m, 1000, &h, NULL));
  cm_resource_t r;
  cm_binding_t b = cm_handle_binding(h);
  ASSERT_OK(cm_manager_get_resource(m, b, 0, 0, &r, NULL));
  cm_binding_release(b);
  ASSERT(r.host != NULL);
  char *p = r.host;
  memset(p, 0xab, 1000); /* live: addressable */
  EXPECT(!__asan_address_is_poisoned(p));
  EXPECT(!__asan_address_is_poisoned(p + 999));
  cm_handle_release(h);
  cm_usage_t u;
  cm_manager_usage(m, &u); /* drains the freed inbox */
  EXPECT(__asan_address_is_poisoned(p));
  EXPECT(__asan_address_is_poisoned(p + 999));
  /* the same slice handed out again is addressable again */
  ASSERT_OK(cm_manager_reserve(m, 1000, &h, NULL));
  b = cm_handle_binding(h);
  ASSERT_OK(cm_manager_get_resource(m, b, 0, 0, &r, NULL));
  cm_binding_release(b);
  EXPECT(!__asan_address_is_poisoned(r.host));
  memset(r.host, 0, 1000);
  cm_handle_release(h);
  cm_handle_release(keep);
  EXPECT_EQ(cm_manager_check(m, NULL), 0);
  cm_manager_destroy(m); /* releases poisoned memory without a report */
}

static void cached_slices_poisoned_default(void) { check_layout(CM_PRESET_DEFAULT); }
static void cached_slices_poisoned_subslices(void) { check_layout(CM_PRESET_SUBSLICES); }
static void cached_slices_poisoned_exclusive(void) { check_layout(CM_PRESET_EXCLUSIVE_PAGES); }
#else
static void cached_slices_poisoned_default(void) {
  CM_SKIP("not an AddressSanitizer build (make asan runs this test)");
}
static void cached_slices_poisoned_subslices(void) { cached_slices_poisoned_default(); }
static void cached_slices_poisoned_exclusive(void) { cached_slices_poisoned_default(); }
#endif

int main(void) {
  CM_RUN(cached_slices_poisoned_default);
  CM_RUN(cached_slices_poisoned_subslices);
  CM_RUN(cached_slices_poisoned_exclusive);
  return cm_test_finish();
}
