/*
 * micro.c - micro-benchmark: cost of one reserve + release pair through the
 * manager, for a pool hit and a pool miss, for the default layout and the
 * reference presets (SubSlices, ExclusivePages), on an 80 GiB simulated
 * device (max page 20 GiB, alignment 512).
 *
 *  hit : with 64 background allocations live, reserve(S) then release it,
 *        repeated; after the first round every reserve reuses pool memory.
 *  miss: reserve N allocations of S without releasing (every reserve needs
 *        memory the pool does not have yet: new pages, slots or mapped
 *        granules, batched or not as the layout does), then release them all;
 *        the cost is divided by N pairs. A fresh manager each round.
 *
 * Cost is counted in user-space instructions with perf_event_open when the
 * kernel allows it (else "n/a"), and in nanoseconds of wall time. The measured
 * region alone is bracketed by CALLGRIND_START/STOP_INSTRUMENTATION, so
 *   valgrind --tool=callgrind --instr-atstart=no cm_bench_micro SIZE LAYOUT CASE
 * counts one case exactly (bench/callgrind.sh does this for every case).
 * Usage: cm_bench_micro [SIZE_BYTES [LAYOUT CASE]] (default: 4096 and 1 MiB,
 * every layout and case). LAYOUT: default | subslices | exclusive-pages;
 * CASE: hit | miss.
 * Exports: main.
 */
#include <linux/perf_event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "cubemem/memory.h"

#if defined(__has_include)
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#define HAVE_CALLGRIND 1
#endif
#endif
#ifndef HAVE_CALLGRIND
#define CALLGRIND_START_INSTRUMENTATION
#define CALLGRIND_STOP_INSTRUMENTATION
#endif

#define HIT_ROUNDS 20000
#define MISS_N 20000

static int perf_fd = -1;

static void perf_open(void) {
  struct perf_event_attr pe;
  memset(&pe, 0, sizeof pe);
  pe.type = PERF_TYPE_HARDWARE;
  pe.size = sizeof pe;
  pe.config = PERF_COUNT_HW_INSTRUCTIONS;
  pe.disabled = 1;
  pe.exclude_kernel = 1;
  pe.exclude_hv = 1;
  perf_fd = (int)syscall(SYS_perf_event_open, &pe, 0, -1, -1, 0);
}

static void counter_start(void) {
  if (perf_fd < 0) return;
  ioctl(perf_fd, PERF_EVENT_IOC_RESET, 0);
  ioctl(perf_fd, PERF_EVENT_IOC_ENABLE, 0);
}

static long long counter_stop(void) {
  if (perf_fd < 0) return -1;
  ioctl(perf_fd, PERF_EVENT_IOC_DISABLE, 0);
  long long v = 0;
  if (read(perf_fd, &v, sizeof v) != (ssize_t)sizeof v) return -1;
  return v;
}

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static cm_manager_t *make(cm_preset_t preset) {
  cm_storage_t *st = NULL;
  if (cm_storage_sim_create(80ull << 30, false, 0, &st) != CM_OK) return NULL;
  cm_manager_config_t cfg;
  cm_manager_config_init(&cfg);
  cfg.props.max_page_size = 20ull << 30;
  cfg.props.alignment = 512;
  cfg.preset = preset;
  cm_manager_t *m = NULL;
  if (cm_manager_create(st, &cfg, &m, NULL) != CM_OK) {
    cm_storage_destroy(st);
    return NULL;
  }
  return m;
}

typedef struct result {
  double ns;        /* per pair */
  double instr;     /* per pair, < 0 when unavailable */
} result;

static __attribute__((noinline)) void measure_hit(cm_manager_t *m, uint64_t size, int rounds) {
  for (int i = 0; i < rounds; i++) {
    cm_handle_t h;
    if (cm_manager_reserve(m, size, &h, NULL) != CM_OK) abort();
    cm_handle_release(h);
  }
}

static result hit(cm_preset_t preset, uint64_t size) {
  cm_manager_t *m = make(preset);
  if (!m) abort();
  cm_handle_t bg[64];
  for (int i = 0; i < 64; i++)
    if (cm_manager_reserve(m, 512u * (uint64_t)(i + 1) + size, &bg[i], NULL) != CM_OK) abort();
  measure_hit(m, size, 1000); /* warm */
  counter_start();
  double t0 = now_ns();
  CALLGRIND_START_INSTRUMENTATION;
  measure_hit(m, size, HIT_ROUNDS);
  CALLGRIND_STOP_INSTRUMENTATION;
  double t1 = now_ns();
  long long ins = counter_stop();
  for (int i = 0; i < 64; i++) cm_handle_release(bg[i]);
  cm_manager_destroy(m);
  return (result){(t1 - t0) / HIT_ROUNDS, ins < 0 ? -1.0 : (double)ins / HIT_ROUNDS};
}

static __attribute__((noinline)) void measure_miss(cm_manager_t *m, uint64_t size, cm_handle_t *h,
                                                   int n) {
  for (int i = 0; i < n; i++)
    if (cm_manager_reserve(m, size, &h[i], NULL) != CM_OK) abort();
  for (int i = 0; i < n; i++) cm_handle_release(h[i]);
  cm_manager_cleanup(m, false); /* let the releases reach the pools */
}

static result miss(cm_preset_t preset, uint64_t size) {
  static cm_handle_t h[MISS_N];
  cm_manager_t *m = make(preset);
  if (!m) abort();
  counter_start();
  double t0 = now_ns();
  CALLGRIND_START_INSTRUMENTATION;
  measure_miss(m, size, h, MISS_N);
  CALLGRIND_STOP_INSTRUMENTATION;
  double t1 = now_ns();
  long long ins = counter_stop();
  cm_manager_destroy(m);
  return (result){(t1 - t0) / MISS_N, ins < 0 ? -1.0 : (double)ins / MISS_N};
}

static void row(const char *name, const char *kind, uint64_t size, result r) {
  if (r.instr >= 0)
    printf("%-16s %-5s %10llu %12.1f %10.1f\n", name, kind, (unsigned long long)size, r.instr, r.ns);
  else
    printf("%-16s %-5s %10llu %12s %10.1f\n", name, kind, (unsigned long long)size, "n/a", r.ns);
}

int main(int argc, char **argv) {
  uint64_t sizes[2] = {4096, 1u << 20};
  int nsizes = 2;
  if (argc > 1) {
    sizes[0] = strtoull(argv[1], NULL, 0);
    nsizes = 1;
  }
  const char *only_layout = argc > 3 ? argv[2] : NULL, *only_case = argc > 3 ? argv[3] : NULL;
  perf_open();
  static const struct {
    const char *name;
    cm_preset_t p;
  } layouts[] = {{"default", CM_PRESET_DEFAULT},
                 {"subslices", CM_PRESET_SUBSLICES},
                 {"exclusive-pages", CM_PRESET_EXCLUSIVE_PAGES}};
  printf("# per reserve+release pair; instructions: user space (perf_event_open)\n");
  printf("%-16s %-5s %10s %12s %10s\n", "layout", "case", "size", "instructions", "ns");
  for (int s = 0; s < nsizes; s++)
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++) {
      if (only_layout && strcmp(only_layout, layouts[i].name)) continue;
      if (!only_case || !strcmp(only_case, "hit"))
        row(layouts[i].name, "hit", sizes[s], hit(layouts[i].p, sizes[s]));
      if (!only_case || !strcmp(only_case, "miss"))
        row(layouts[i].name, "miss", sizes[s], miss(layouts[i].p, sizes[s]));
    }
  if (perf_fd >= 0) close(perf_fd);
  return 0;
}
