/*
 * test_fault_sweep.c - every storage call of a realistic scenario is made to
 * fail once, and the manager must come through each failure cleanly.
 *
 * Scenario (run_scenario): a manager over the simulated device wrapped in the
 * fault-injecting storage (cubemem/faulty.h) runs
 *   1. a persistent window holding a few "parameters",
 *   2. the replay of a real trace - the first TRACE_LINES lines of
 *      ../shared/traces/cpu/torch-cpu-mlp-train.csv, or a synthetic trace
 *      written inline when ../shared is absent - parsed with cm_trace_parse,
 *   3. a graph capture (begin, priming, priming end, more work, end) whose
 *      pins are released later,
 *   4. a dry run whose lazily reserved slices are materialised afterwards,
 *   5. install_pools of another layout once the dynamic pools are empty, and
 *      more trace events under it,
 *   6. cleanup and release of everything.
 * The sweep runs it once per k = 1, 2, ... with "fail storage call k" (and a
 * second, coarser sweep with "fail call k and every later call"), until a
 * run completes with no fault injected. Each run requires:
 *  - a call fails only when a fault was injected during it, and then with a
 *    clean status (CM_EOOM / CM_ESTORAGE, or CM_EMAPPING for materialisation)
 *    and an empty handle - never a crash;
 *  - cm_manager_check(m, NULL) == 0 after every step;
 *  - every live handle still resolves (cm_manager_get_storage OK, same range
 *    as before) or, for lazily reserved memory whose mapping failed, is
 *    cleanly refused with CM_EMAPPING;
 *  - usage back to zero at the end. Leaks are caught by ASan / valgrind in CI.
 * Prints the number of fault points swept.
 */
#include <stdlib.h>
#include <string.h>

#include "cm_test.h"
#include "cubemem/cubemem.h"
#include "cubemem/faulty.h"
#include "cubemem/replay.h"

#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif
#endif
#ifndef RUNNING_ON_VALGRIND
#define RUNNING_ON_VALGRIND 0
#endif
/* ThreadSanitizer: this test is single-threaded, so TSan adds nothing but a
 * 20x slowdown; it sweeps with a stride there. */
#if defined(__SANITIZE_THREAD__)
#define CM_SWEEP_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CM_SWEEP_TSAN 1
#endif
#endif
#ifndef CM_SWEEP_TSAN
#define CM_SWEEP_TSAN 0
#endif

enum { TRACE_LINES = 5001, NPARAMS = 6 };

static cm_trace_t *g_trace;
static bool g_trace_is_real;

/* A synthetic trace in the RMM layout: layers of activations and gradients
 * freed in reverse, with small temporaries, repeated for a few "steps". */
static char *synthetic_csv(size_t *len) {
  size_t cap = 1 << 20, n = 0;
  char *buf = malloc(cap);
  if (!buf) return NULL;
  n += (size_t)snprintf(buf + n, cap - n, "Thread,Time,Action,Pointer,Size,Stream\n");
  static const unsigned sizes[] = {1008, 4096, 40960, 1048576, 3211264, 4, 8, 288};
  unsigned long ptr = 0x10000;
  for (int step = 0; step < 6; step++) {
    unsigned long live[32];
    int nlive = 0;
    for (int l = 0; l < 24; l++) {
      unsigned sz = sizes[(unsigned)(l * 7 + step) % 8];
      live[nlive++] = ptr;
      n += (size_t)snprintf(buf + n, cap - n, "1,00:00:00.%06d,allocate,0x%lx,%u,0x0\n",
                            step * 100 + l, ptr, sz);
      ptr += 0x100000;
      if (l % 3 == 2) { /* a temporary */
        n += (size_t)snprintf(buf + n, cap - n, "1,00:00:00.%06d,allocate,0x%lx,8,0x0\n",
                              step * 100 + l, ptr);
        n += (size_t)snprintf(buf + n, cap - n, "1,00:00:00.%06d,free,0x%lx,8,0x0\n",
                              step * 100 + l, ptr);
        ptr += 0x100000;
      }
    }
    while (nlive) {
      unsigned long p = live[--nlive];
      n += (size_t)snprintf(buf + n, cap - n, "1,00:00:00.%06d,free,0x%lx,0,0x0\n",
                            step * 100 + 50, p);
    }
  }
  *len = n;
  return buf;
}

static cm_trace_t *load_trace(void) {
  const char *shared = cm_test_shared_dir();
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
      while (text && lines < TRACE_LINES && (c = fgetc(f)) != EOF && len + 1 < cap) {
        text[len++] = (char)c;
        if (c == '\n') lines++;
      }
      fclose(f);
      g_trace_is_real = text != NULL;
    }
  }
  if (!text) text = synthetic_csv(&len);
  if (!text) return NULL;
  cm_trace_t *t = NULL;
  cm_diag_t d;
  cm_diag_clear(&d);
  int rc = cm_trace_parse(text, len, NULL, &t, &d);
  free(text);
  if (rc != CM_OK) {
    fprintf(stderr, "trace parse: %s (line %u)\n", d.message, d.line);
    return NULL;
  }
  return t;
}

/* ---- one scenario run ------------------------------------------------------ */

typedef struct live_ref {
  cm_handle_t h;
  uint64_t size;
  bool resolved;          /* sh is known */
  cm_storage_handle_t sh; /* the range it resolved to */
} live_ref;

typedef struct run {
  cm_manager_t *m;
  cm_storage_t *fs; /* the faulty storage (owned by m) */
  live_ref *slots;  /* trace slots */
  uint32_t nslots;
  live_ref params[NPARAMS];
  live_ref extra[64]; /* capture / dry-run / install phases */
  int nextra;
  uint64_t failures; /* calls that failed (with an injected fault) */
  bool broken;       /* a requirement failed: stop this run */
  bool checking;     /* a fault was seen: cm_manager_check runs (see step_check) */
  bool full;         /* cm_manager_check after every step */
  uint64_t since_fault;
  bool pinned;       /* capture active or pins held: usage may exceed the model */
} run;

#define RUN_CHECK(r, cond)                                  \
  do {                                                      \
    if (!(cond)) {                                          \
      cm_test_fail(__FILE__, __LINE__, "check failed: %s", #cond); \
      (r)->broken = true;                                   \
    }                                                       \
  } while (0)

/* After every step: the usage counters must match the references the
 * scenario holds (cheap), and cm_manager_check must report nothing.
 *
 * cm_manager_check walks every page and granule (about 0.1 ms per call, far
 * more under ASan at -O0 and valgrind), so it is not repeated where it cannot
 * find anything new. The scenario and the simulated device are
 * deterministic, so a faulted run is identical to the fault-free reference
 * run - which checks after every step - until its first injected fault. From
 * that step on, the faulted run checks after each of the next FULL_WINDOW
 * steps (where the recovery happens), then after every CHECK_EVERY-th step,
 * and always at the end of each phase (step_check_phase). CM_FAULT_SWEEP_FULL=1
 * checks after every step of every run. */
enum { FULL_WINDOW = 256, CHECK_EVERY = 16 };
static bool g_full_checks;

static void usage_check(run *r);

static void step_check(run *r) {
  usage_check(r);
  if (!r->checking) {
    if (cm_storage_faulty_injected(r->fs) == 0) return;
    r->checking = true;
    r->since_fault = 0;
  }
  r->since_fault++;
  if (r->full || r->since_fault <= FULL_WINDOW || r->since_fault % CHECK_EVERY == 0)
    RUN_CHECK(r, cm_manager_check(r->m, NULL) == 0);
}

static void step_check_phase(run *r) {
  usage_check(r);
  RUN_CHECK(r, cm_manager_check(r->m, NULL) == 0);
}

/* Reserve `size`; a failure is acceptable only when a fault was injected. */
static void do_reserve(run *r, live_ref *slot, uint64_t size) {
  uint64_t before = cm_storage_faulty_injected(r->fs);
  cm_handle_t h = {NULL};
  cm_diag_t d;
  cm_diag_clear(&d);
  int rc = cm_manager_reserve(r->m, size, &h, &d);
  bool injected = cm_storage_faulty_injected(r->fs) != before;
  memset(slot, 0, sizeof *slot);
  if (rc == CM_OK) {
    RUN_CHECK(r, h.d != NULL);
    slot->h = h;
    slot->size = size;
  } else {
    RUN_CHECK(r, injected);
    RUN_CHECK(r, rc == CM_EOOM || rc == CM_ESTORAGE);
    RUN_CHECK(r, h.d == NULL);
    RUN_CHECK(r, d.code == rc && d.message[0] != '\0');
    r->failures++;
  }
  step_check(r);
}

static void drop(live_ref *slot) {
  cm_handle_release(slot->h); /* empty handles are ignored */
  memset(slot, 0, sizeof *slot);
}

/* Usage must equal what the scenario holds (at least that while a capture
 * or its pins may keep more slices alive). */
static void usage_check(run *r) {
  uint64_t n = 0, bytes = 0;
  for (uint32_t i = 0; i < r->nslots; i++)
    if (r->slots[i].h.d) n++, bytes += r->slots[i].size;
  for (int i = 0; i < NPARAMS; i++)
    if (r->params[i].h.d) n++, bytes += r->params[i].size;
  for (int i = 0; i < r->nextra; i++)
    if (r->extra[i].h.d) n++, bytes += r->extra[i].size;
  cm_usage_t u;
  cm_manager_usage(r->m, &u);
  if (r->pinned) {
    RUN_CHECK(r, u.number_allocs >= n && u.bytes_in_use >= bytes);
  } else {
    RUN_CHECK(r, u.number_allocs == n && u.bytes_in_use == bytes);
  }
}

/* Resolve one live reference: OK with a stable range, or a clean refusal
 * (CM_EMAPPING) when materialising it hit an injected fault. */
static void resolve_one(run *r, live_ref *s) {
  if (!s->h.d) return;
  uint64_t before = cm_storage_faulty_injected(r->fs);
  cm_binding_t b = cm_handle_binding(s->h);
  cm_storage_handle_t sh;
  cm_diag_t d;
  cm_diag_clear(&d);
  int rc = cm_manager_get_storage(r->m, b, &sh, &d);
  cm_binding_release(b);
  if (rc == CM_OK) {
    RUN_CHECK(r, sh.size == s->size);
    if (s->resolved)
      RUN_CHECK(r, sh.id == s->sh.id && sh.offset == s->sh.offset);
    s->resolved = true;
    s->sh = sh;
  } else {
    RUN_CHECK(r, rc == CM_EMAPPING);
    RUN_CHECK(r, !s->resolved);
    RUN_CHECK(r, cm_storage_faulty_injected(r->fs) != before);
    r->failures++;
  }
}

static void resolve_all(run *r) {
  for (uint32_t i = 0; i < r->nslots; i++) resolve_one(r, &r->slots[i]);
  for (int i = 0; i < NPARAMS; i++) resolve_one(r, &r->params[i]);
  for (int i = 0; i < r->nextra; i++) resolve_one(r, &r->extra[i]);
  step_check(r);
}

static void replay_events(run *r, size_t from, size_t to) {
  for (size_t e = from; e < to && e < g_trace->count && !r->broken; e++) {
    const cm_trace_event_t *ev = &g_trace->events[e];
    live_ref *slot = &r->slots[ev->slot];
    if (ev->action == CM_TRACE_ALLOC) {
      drop(slot); /* a slot is reused only after its free; empty otherwise */
      uint64_t f = r->failures;
      do_reserve(r, slot, ev->size);
      if (r->failures != f || e % 512 == 0) resolve_all(r);
    } else {
      drop(slot);
      step_check(r);
    }
  }
}

static void release_all(run *r) {
  for (uint32_t i = 0; i < r->nslots; i++) drop(&r->slots[i]);
  for (int i = 0; i < r->nextra; i++) drop(&r->extra[i]);
  r->nextra = 0;
}

/* Runs the scenario under `plan`; returns the number of counted storage calls. */
static uint64_t run_scenario(const cm_fault_plan_t *plan, uint64_t *injected, bool *ok) {
  run rr;
  run *r = &rr;
  memset(r, 0, sizeof *r);
  *ok = false;
  cm_storage_t *sim = NULL, *fs = NULL;
  if (cm_storage_sim_create(0, false, 0, &sim) != CM_OK) return 0;
  if (cm_storage_faulty_create(sim, plan, &fs) != CM_OK) {
    cm_storage_destroy(sim);
    return 0;
  }
  cm_manager_config_t cfg;
  cm_manager_config_init(&cfg);
  cfg.name = "fault sweep";
  cfg.props.max_page_size = 64u << 20;
  cfg.props.alignment = 512;
  cm_diag_t d;
  cm_diag_clear(&d);
  if (cm_manager_create(fs, &cfg, &r->m, &d) != CM_OK) {
    cm_storage_destroy(fs);
    return 0;
  }
  r->fs = fs;
  r->checking = plan == NULL || plan->mode == CM_FAULT_NONE;
  r->full = r->checking || g_full_checks;
  r->nslots = g_trace->slots;
  r->slots = calloc(r->nslots ? r->nslots : 1, sizeof *r->slots);
  if (!r->slots) {
    cm_manager_destroy(r->m);
    return 0;
  }
  size_t n = g_trace->count, third = n / 3;

  /* 1. persistent window with parameters */
  cm_manager_set_mode(r->m, CM_MODE_PERSISTENT);
  for (int i = 0; i < NPARAMS && !r->broken; i++)
    do_reserve(r, &r->params[i], 4096u << (i % 4));
  cm_manager_set_mode(r->m, CM_MODE_AUTO);
  resolve_all(r);

  /* 2. the trace, first third */
  replay_events(r, 0, third);
  cm_manager_cleanup(r->m, false);
  step_check_phase(r);

  /* 3. a graph capture over the next part */
  cm_pins_t *pins = NULL;
  cm_manager_capture_begin(r->m);
  r->pinned = true;
  for (int i = 0; i < 4 && r->nextra < 64; i++) do_reserve(r, &r->extra[r->nextra++], 1024u * (unsigned)(i + 1));
  cm_manager_capture_priming_end(r->m);
  step_check(r);
  replay_events(r, third, third + third / 4);
  int rc = cm_manager_capture_end(r->m, &pins);
  RUN_CHECK(r, rc == CM_OK);
  step_check_phase(r);
  resolve_all(r);

  /* 4. a dry run: lazily reserved slices, materialised on lookup */
  cm_manager_dry_run_begin(r->m);
  for (int i = 0; i < 6 && r->nextra < 64; i++) do_reserve(r, &r->extra[r->nextra++], 300000u * (unsigned)(i + 1));
  cm_manager_dry_run_end(r->m);
  resolve_all(r);
  cm_pins_release(pins);
  pins = NULL;
  r->pinned = false;
  step_check_phase(r);

  /* 5. empty the dynamic pools and install another layout */
  release_all(r);
  cm_manager_cleanup(r->m, true);
  step_check_phase(r);
  cm_pool_options_t pools[64];
  size_t npools = 0;
  RUN_CHECK(r, cm_pools_preset(CM_PRESET_EXCLUSIVE_PAGES, cfg.props, pools, 64, &npools) == CM_OK);
  uint64_t before = cm_storage_faulty_injected(fs);
  rc = cm_manager_install_pools(r->m, pools, npools, &d);
  RUN_CHECK(r, rc == CM_OK || cm_storage_faulty_injected(fs) != before);
  step_check_phase(r);
  resolve_all(r); /* persistent parameters survive the install */
  replay_events(r, third + third / 4, n);
  resolve_all(r);

  /* 6. cleanup and release everything */
  release_all(r);
  for (int i = 0; i < NPARAMS; i++) drop(&r->params[i]);
  cm_manager_cleanup(r->m, true);
  step_check_phase(r);
  cm_usage_t u;
  cm_manager_usage(r->m, &u);
  RUN_CHECK(r, u.number_allocs == 0 && u.bytes_in_use == 0);

  uint64_t calls = cm_storage_faulty_calls(fs);
  *injected = cm_storage_faulty_injected(fs);
  *ok = !r->broken;
  cm_manager_destroy(r->m);
  free(r->slots);
  return calls;
}

static void sweep(cm_fault_mode_t mode, int error, uint64_t stride, uint64_t *points,
                  uint64_t *clean_calls) {
  cm_fault_plan_t plan;
  cm_fault_plan_init(&plan);
  uint64_t inj = 0;
  bool ok = false;
  uint64_t calls = run_scenario(&plan, &inj, &ok); /* the fault-free reference */
  ASSERT(ok);
  ASSERT(calls > 0);
  ASSERT_EQ(inj, 0);
  *clean_calls = calls;
  plan.mode = mode;
  plan.error = error;
  uint64_t swept = 0;
  for (uint64_t k = 1; k < 1000000; k += stride) {
    plan.nth = k;
    inj = 0;
    run_scenario(&plan, &inj, &ok);
    if (!ok) {
      fprintf(stderr, "fault sweep: scenario broke with storage call %llu failing (%s)\n",
              (unsigned long long)k, mode == CM_FAULT_NTH ? "nth" : "from nth");
      ASSERT(ok);
    }
    if (inj == 0) break; /* k is past the last storage call: swept them all */
    swept++;
  }
  *points = swept;
}

/* Under valgrind (about 30x slower) or TSan only every STRIDE-th point is
 * swept. */
static uint64_t stride(uint64_t normal, uint64_t slow) {
  return (RUNNING_ON_VALGRIND || CM_SWEEP_TSAN) ? slow : normal;
}

static void every_single_fault(void) {
  uint64_t points = 0, calls = 0, st = stride(1, 6);
  sweep(CM_FAULT_NTH, CM_EOOM, st, &points, &calls);
  printf("fault sweep (%s trace, %zu events): %llu fault points swept (stride %llu), "
         "one failure each; the fault-free run makes %llu storage calls\n",
         g_trace_is_real ? "real" : "synthetic", g_trace->count, (unsigned long long)points,
         (unsigned long long)st, (unsigned long long)calls);
  /* Every call of the fault-free run is a fault point (the run is identical
   * up to the fault), so the sweep covers at least all of them. */
  EXPECT_GE(points * st, calls);
}

static void persistent_failure_from_k(void) {
  uint64_t points = 0, calls = 0;
  uint64_t st = stride(4, 16);
  sweep(CM_FAULT_FROM_NTH, CM_ESTORAGE, st, &points, &calls);
  printf("fault sweep: %llu 'fail every call from k on' points (stride %llu)\n",
         (unsigned long long)points, (unsigned long long)st);
  EXPECT_GT(points, 0);
}

int main(void) {
  const char *full = getenv("CM_FAULT_SWEEP_FULL");
  g_full_checks = full && *full && *full != '0';
  g_trace = load_trace();
  if (!g_trace) {
    fprintf(stderr, "fault sweep: could not build the trace\n");
    return 1;
  }
  CM_RUN(every_single_fault);
  CM_RUN(persistent_failure_from_k);
  cm_trace_free(g_trace);
  return cm_test_finish();
}
