/*
 * test_costs.c - the driver-time model (cubemem/costs.h): the built-in sets
 * carry the published figures, the model multiplies each kind's count by its
 * cost (one stream wait per VM unmap operation) and sums them, cost files
 * override a base set key by key, and every bad file is refused with the line
 * and the key named. Exports: main (the test runner).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cm_test.h"
#include "cubemem/costs.h"

static void builtin_sets(void) {
  cm_driver_costs_t a, f;
  ASSERT_OK(cm_driver_costs_builtin("a100", &a));
  ASSERT_OK(cm_driver_costs_builtin("fast", &f));
  EXPECT_STR(a.name, "a100");
  EXPECT_STR(f.name, "fast");
  EXPECT(a.create_us == 193.0 && a.map_us == 1.45 && a.set_access_us == 36.0);
  EXPECT(a.unmap_us == 25.6 && a.reserve_us == 19.0);
  EXPECT(f.create_us == 7.6 && f.map_us == 1.05 && f.set_access_us == 20.8);
  EXPECT(f.unmap_us == 11.5 && f.reserve_us == 9.0);
  /* the documented assumptions */
  EXPECT(a.release_us == a.unmap_us && a.address_free_us == a.reserve_us);
  EXPECT(a.alloc_us == a.create_us + a.map_us + a.set_access_us);
  EXPECT(a.free_us == a.unmap_us + a.release_us);
  EXPECT_STATUS(cm_driver_costs_builtin("A100", &a), CM_ENOTFOUND);
  EXPECT_STATUS(cm_driver_costs_builtin(NULL, &a), CM_EINVAL);
}

static void model_sums_kinds(void) {
  cm_driver_costs_t c;
  memset(&c, 0, sizeof c);
  c.create_us = 1;
  c.map_us = 2;
  c.set_access_us = 3;
  c.unmap_us = 4;
  c.release_us = 5;
  c.reserve_us = 6;
  c.address_free_us = 7;
  c.alloc_us = 8;
  c.free_us = 9;
  c.mem_query_us = 10;
  c.sync_us = 0.5;
  cm_storage_stats_t s;
  memset(&s, 0, sizeof s);
  s.creates = 10;
  s.map_calls = 10;
  s.set_access = 3;
  s.unmap_calls = 4;
  s.releases = 4;
  s.unmaps = 2; /* VM unmap operations: one stream wait each */
  s.reserves = 1;
  s.address_frees = 1;
  s.allocs = 5;
  s.deallocs = 2;
  s.mem_queries = 7;
  cm_driver_time_t t;
  cm_driver_time_model(&c, &s, &t);
  EXPECT_EQ(t.create_ns, 10000);
  EXPECT_EQ(t.map_ns, 20000);
  EXPECT_EQ(t.set_access_ns, 9000);
  EXPECT_EQ(t.unmap_ns, 16000);
  EXPECT_EQ(t.release_ns, 20000);
  EXPECT_EQ(t.reserve_ns, 6000);
  EXPECT_EQ(t.address_free_ns, 7000);
  EXPECT_EQ(t.alloc_ns, 40000);
  EXPECT_EQ(t.free_ns, 18000);
  EXPECT_EQ(t.mem_query_ns, 70000);
  EXPECT_EQ(t.sync_ns, 1000);
  EXPECT_EQ(t.total_ns, 10000 + 20000 + 9000 + 16000 + 20000 + 6000 + 7000 + 40000 + 18000 +
                            70000 + 1000);
  /* the A100 set: 100 creates = 19.3 ms */
  ASSERT_OK(cm_driver_costs_builtin("a100", &c));
  memset(&s, 0, sizeof s);
  s.creates = 100;
  cm_driver_time_model(&c, &s, &t);
  EXPECT_EQ(t.total_ns, 19300000);
  cm_driver_time_model(NULL, &s, &t);
  EXPECT_EQ(t.total_ns, 0);
  s.call_ns.creates = 5;
  s.call_ns.syncs = 6;
  EXPECT_EQ(cm_driver_time_measured(&s), 11);
}

static int parse(const char *text, cm_driver_costs_t *c, cm_diag_t *d) {
  cm_diag_clear(d);
  return cm_driver_costs_parse(text, strlen(text), "t.toml", c, d);
}

static void cost_files(void) {
  cm_driver_costs_t c;
  cm_diag_t d;
  ASSERT_OK(parse("[driver_costs]\ncreate_us = 100\nmap_us = 0.5\n", &c, &d));
  EXPECT_STR(c.name, "t.toml");
  EXPECT(c.create_us == 100.0 && c.map_us == 0.5);
  EXPECT(c.set_access_us == 36.0); /* the rest from a100 */
  ASSERT_OK(parse("[driver_costs]\nname = \"h100\"\nbase = \"fast\"\nunmap_us = 3\n", &c, &d));
  EXPECT_STR(c.name, "h100");
  EXPECT(c.create_us == 7.6 && c.unmap_us == 3.0);

  EXPECT_STATUS(parse("[driver_costs]\ncreate_us = 1\ncreat_us = 2\n", &c, &d), CM_EPARSE);
  EXPECT_EQ(d.line, 3);
  EXPECT_CONTAINS(d.message, "unknown key 'creat_us'");
  EXPECT_STATUS(parse("[driver_costs]\nmap_us = -1.0\n", &c, &d), CM_EPARSE);
  EXPECT_CONTAINS(d.message, "bad 'map_us'");
  EXPECT_STATUS(parse("[driver_costs]\nmap_us = \"fast\"\n", &c, &d), CM_EPARSE);
  EXPECT_CONTAINS(d.message, "got string");
  EXPECT_STATUS(parse("[driver_costs]\nmap_us = nan\n", &c, &d), CM_EPARSE);
  EXPECT_STATUS(parse("[driver_costs]\nmap_us = inf\n", &c, &d), CM_EPARSE);
  EXPECT_STATUS(parse("[driver_costs]\nbase = \"h200\"\n", &c, &d), CM_EPARSE);
  EXPECT_CONTAINS(d.message, "bad 'base'");
  EXPECT_STATUS(parse("[costs]\nmap_us = 1\n", &c, &d), CM_EPARSE);
  EXPECT_CONTAINS(d.message, "unknown key 'costs'");
  EXPECT_STATUS(parse("map_us = 1\n", &c, &d), CM_EPARSE);
  EXPECT_STATUS(parse("# nothing\n", &c, &d), CM_EPARSE);
  EXPECT_CONTAINS(d.message, "no [driver_costs] table");
  EXPECT_STATUS(parse("[driver_costs\n", &c, &d), CM_EPARSE); /* not TOML */
  EXPECT_STATUS(parse("[driver_costs]\n[driver_costs.x]\n", &c, &d), CM_EPARSE);
  /* a refused file leaves *out as it was */
  ASSERT_OK(cm_driver_costs_builtin("fast", &c));
  EXPECT_STATUS(parse("[driver_costs]\ncreate_us = 1\nbad = 1\n", &c, &d), CM_EPARSE);
  EXPECT(c.create_us == 7.6);
}

static void resolve_names_and_files(void) {
  cm_driver_costs_t c;
  cm_diag_t d;
  cm_diag_clear(&d);
  ASSERT_OK(cm_driver_costs_resolve("fast", &c, &d));
  EXPECT_STR(c.name, "fast");
  char path[] = "/tmp/cm-costs-XXXXXX";
  int fd = mkstemp(path);
  ASSERT(fd >= 0);
  const char *text = "[driver_costs]\ncreate_us = 50\n";
  ASSERT(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
  close(fd);
  ASSERT_OK(cm_driver_costs_resolve(path, &c, &d));
  EXPECT_STR(c.name, path);
  EXPECT(c.create_us == 50.0);
  unlink(path);
  cm_diag_clear(&d);
  EXPECT_STATUS(cm_driver_costs_resolve(path, &c, &d), CM_EIO);
  EXPECT_CONTAINS(d.message, "not a built-in set");
  EXPECT_STATUS(cm_driver_costs_resolve("", &c, &d), CM_EINVAL);
}

int main(void) {
  CM_RUN(builtin_sets);
  CM_RUN(model_sums_kinds);
  CM_RUN(cost_files);
  CM_RUN(resolve_names_and_files);
  return cm_test_finish();
}
