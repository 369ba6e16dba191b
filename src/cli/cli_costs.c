/*
 * cli_costs.c - the driver-time model on the command line: the
 * --driver-costs option shared by replay, fit and plan, and the
 * "driver_time_model" JSON object their --json output carries.
 *
 * Exports cli_driver_costs_option, cli_driver_time_json and cli_fmt_ms
 * (cli.h).
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

int cli_driver_costs_option(const char *cmd, const char *val, cm_driver_costs_t *out) {
  cm_diag_t d;
  cm_diag_clear(&d);
  int rc = cm_driver_costs_resolve(val, out, &d);
  if (rc == CM_OK) return 0;
  fprintf(stderr, "cubemem %s: --driver-costs '%s': %s\n", cmd, val,
          d.message[0] ? d.message : cm_strerror(rc));
  return 2;
}

void cli_driver_time_json(FILE *f, const cm_driver_costs_t *c, const cm_storage_stats_t *s,
                          bool measured) {
  cm_driver_time_t t;
  cm_driver_time_model(c, s, &t);
  fputs("\"driver_time_model\":{\"costs\":", f);
  cli_json_string(f, c->name);
  fprintf(f,
          ",\"total_ns\":%" PRIu64 ",\"by_kind\":{\"create\":%" PRIu64 ",\"map\":%" PRIu64
          ",\"set_access\":%" PRIu64 ",\"unmap\":%" PRIu64 ",\"release\":%" PRIu64
          ",\"reserve\":%" PRIu64 ",\"address_free\":%" PRIu64 ",\"alloc\":%" PRIu64
          ",\"free\":%" PRIu64 ",\"mem_query\":%" PRIu64 ",\"sync\":%" PRIu64 "}",
          t.total_ns, t.create_ns, t.map_ns, t.set_access_ns, t.unmap_ns, t.release_ns,
          t.reserve_ns, t.address_free_ns, t.alloc_ns, t.free_ns, t.mem_query_ns, t.sync_ns);
  fprintf(f,
          ",\"us_per_call\":{\"create\":%.6g,\"map\":%.6g,\"set_access\":%.6g,\"unmap\":%.6g"
          ",\"release\":%.6g,\"reserve\":%.6g,\"address_free\":%.6g,\"alloc\":%.6g"
          ",\"free\":%.6g,\"mem_query\":%.6g,\"sync\":%.6g}",
          c->create_us, c->map_us, c->set_access_us, c->unmap_us, c->release_us, c->reserve_us,
          c->address_free_us, c->alloc_us, c->free_us, c->mem_query_us, c->sync_us);
  if (measured) fprintf(f, ",\"measured_ns\":%" PRIu64, cm_driver_time_measured(s));
  fputc('}', f);
}

void cli_fmt_ms(uint64_t ns, char *buf, size_t cap) {
  double ms = (double)ns / 1e6;
  if (ms >= 1000) snprintf(buf, cap, "%.3f s", ms / 1000);
  else snprintf(buf, cap, "%.3f ms", ms);
}
