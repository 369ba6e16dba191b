/*
 * consumer.c - a tiny program built against an installed cubemem, once with
 * pkg-config and once with CMake find_package(cubemem), by check.sh.
 *
 * It checks that the installed headers and library agree (cm_version), then
 * drives the public API end to end on the simulated storage: create a
 * manager, reserve, resolve, release, clean up. Exits 0 on success and prints
 * one line per failure otherwise.
 */
#include <stdio.h>

#include <cubemem/cubemem.h>

int main(void) {
  if (cm_version() != CM_VERSION_NUMBER) {
    fprintf(stderr, "header/library version mismatch: %d vs %d\n", cm_version(),
            CM_VERSION_NUMBER);
    return 1;
  }
  cm_storage_t *storage = NULL;
  int rc = cm_storage_sim_create(0, false, 0, &storage);
  if (rc != CM_OK) {
    fprintf(stderr, "cm_storage_sim_create: %s\n", cm_strerror(rc));
    return 1;
  }
  cm_manager_config_t cfg;
  cm_manager_config_init(&cfg);
  cfg.name = "consumer";
  cm_manager_t *m = NULL;
  cm_diag_t diag = {0};
  rc = cm_manager_create(storage, &cfg, &m, &diag);
  if (rc != CM_OK) {
    fprintf(stderr, "cm_manager_create: %s (%s)\n", cm_err_name(rc), diag.message);
    cm_storage_destroy(storage);
    return 1;
  }
  cm_handle_t h = {0};
  rc = cm_manager_reserve(m, 4096, &h, &diag);
  if (rc != CM_OK) {
    fprintf(stderr, "cm_manager_reserve: %s (%s)\n", cm_err_name(rc), diag.message);
    cm_manager_destroy(m);
    return 1;
  }
  cm_binding_t b = cm_handle_binding(h);
  cm_storage_handle_t sh;
  rc = cm_manager_get_storage(m, b, &sh, &diag);
  int failed = 0;
  if (rc != CM_OK || sh.size != 4096) {
    fprintf(stderr, "cm_manager_get_storage: %s size %llu\n", cm_err_name(rc),
            (unsigned long long)sh.size);
    failed = 1;
  }
  cm_binding_release(b);
  cm_handle_release(h);
  cm_manager_cleanup(m, true);
  if (cm_manager_check(m, NULL) != 0) {
    fprintf(stderr, "cm_manager_check reports violations\n");
    failed = 1;
  }
  char buf[64];
  cm_format_bytes(4096, buf, sizeof buf);
  printf("consumer ok: cubemem %d, reserved and released %s\n", cm_version(), buf);
  cm_manager_destroy(m);
  return failed;
}
