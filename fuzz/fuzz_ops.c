/*
 * fuzz_ops.c - libFuzzer target: sequences of memory-manager operations.
 *
 * The first bytes choose the setup: storage (simulated, capped simulated, or
 * real host memory), optional random fault injection (cubemem/faulty.h, seed
 * and rate from the input), persistent-memory mode, preset and alignment.
 * The rest is decoded one operation at a time: reserve, clone / release
 * handles, bindings (from, into, clone, release), bind of a fresh handle to
 * a reserved slice (which leaves clones of the reserved handle stale),
 * lookups (find, get_cursor, get_storage, get_resource with trims), can_mut,
 * persistent and dedicated windows, periodic and explicit cleanup, install_pools
 * (adaptive layouts among others), capture
 * (begin, priming end, end, pins release), dry runs, reports and display.
 *
 * Persistent managers. Building a manager (and its storage, and tearing
 * both down) for every input used to cost more than running most inputs, so
 * managers are kept for the whole process, one per storage setup (storage
 * kind, fault injection on/off, alignment, persistent-memory mode: the
 * parameters fixed at creation). Each input resets its manager through the
 * public API only: the fault plan is replaced (cm_storage_faulty_set_plan,
 * which also renumbers the calls), the input's preset is installed
 * (cm_manager_install_pools, which rebuilds every dynamic pool), and at the
 * end everything the input took is released, windows, dry runs and capture
 * are closed, and cm_manager_cleanup(true) runs; the manager must then be
 * empty (usage zero, cm_manager_check clean) before the next input may use
 * it - it then holds no memory either. What still differs from a new
 * manager: storage addresses and ids, peak and warning counters.
 * CM_FUZZ_FRESH=1 in the environment makes a new manager per input instead
 * (to rule the persistence out when reproducing a report).
 *
 * A model tracks every user reference and the slice ("object") it refers to:
 * requested size, live / stale / never placed, and the storage range the
 * first resolution returned. After every operation the target checks:
 *  - cm_manager_check() reports no violated invariant: after every
 *    operation when replaying a corpus (fuzz_main.c); while fuzzing, after
 *    every CHECK_EVERY-th operation, after the last one and after the reset
 *    - the check walks every granule of the arena's reserved address space
 *    (about a millisecond per call under ASan and coverage) and would
 *    otherwise dominate the fuzzer's time;
 *  - each call's status is one the API documents for that situation
 *    (lookups of live objects succeed, of stale or unplaced ones fail with
 *    CM_ENOTFOUND; failed reserves leave the handle empty);
 *  - a live object always resolves to the same (id, offset, size), with
 *    size == requested, and no two live objects' ranges overlap;
 *  - usage counters equal the model's live count and bytes (>= while
 *    capture pins may keep extra slices alive);
 *  - on host storage each live object's bytes hold its own pattern until its
 *    last reference is released (catches overlapping or recycled memory).
 * At the end everything is released, and usage must drop to zero; leaks are
 * reported by LeakSanitizer.
 *
 * Exports: LLVMFuzzerTestOneInput.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cubemem/cubemem.h"
#include "cubemem/faulty.h"
#include "fuzz.h"

#define FUZZ_CHECK(c)                                                                     \
  do {                                                                                    \
    if (!(c)) {                                                                           \
      fprintf(stderr, "fuzz_ops: %s:%d: check failed: %s (op %zu)\n", __FILE__, __LINE__, \
              #c, g_opno);                                                                \
      abort();                                                                            \
    }                                                                                     \
  } while (0)

enum { MAXH = 48, MAXB = 48, MAXO = 160, MAXPINS = 4, MAXOPS = 1000 };
enum { CHECK_EVERY = 256 };

typedef struct mobj {
  bool used;   /* some user reference points at this descriptor */
  bool placed; /* has (had) a slice: false for a fresh cm_handle_new handle */
  bool stale;  /* superseded by a bind: lookups must fail */
  uint64_t size;
  uint32_t nh, nb; /* user handles / bindings */
  bool resolved;
  cm_storage_handle_t sh;
  bool filled; /* host: pattern written */
  uint8_t pattern;
} mobj;

typedef struct ref {
  bool used;
  uint32_t obj;
  cm_handle_t h;  /* handle slots */
  cm_binding_t b; /* binding slots */
} ref;

typedef struct fuzz_state {
  const uint8_t *p, *end;
  cm_manager_t *m;
  bool host, faults, capped;
  mobj objs[MAXO];
  ref hs[MAXH], bs[MAXB];
  cm_pins_t *pins[MAXPINS];
  size_t npins_outstanding; /* pin sets held */
  bool capturing;
  unsigned dry_runs;
  unsigned windows;
  uint8_t next_pattern;
  cm_device_props_t props;
  cm_alloc_mode_t initial_mode; /* of the manager when it was created */
} fuzz_state;

static size_t g_opno;

static uint8_t take(fuzz_state *s) { return s->p < s->end ? *s->p++ : 0; }

static uint64_t take_size(fuzz_state *s) {
  uint8_t b = take(s);
  uint64_t v;
  switch (b >> 6) {
  case 0: v = b & 63u; break;                                  /* 0..63 */
  case 1: v = ((uint64_t)(b & 63u) << 6) | take(s); break;     /* < 4 KiB + */
  case 2: v = ((uint64_t)(b & 63u) << 14) | ((uint64_t)take(s) << 6); break; /* < 1 MiB */
  default: v = (uint64_t)((b & 63u) + 1) << 20; break;         /* 1..64 MiB */
  }
  if (s->host && v > (256u << 10)) v = (v % (256u << 10)) + 1;
  return v;
}

/* The model's own bookkeeping and checks are not coverage-instrumented (and
 * not inlined into instrumented callers): their branches mirror the input or
 * are the oracle, not the library, and instrumenting their loops (run after
 * every operation) cost more than the operations themselves. */
#if defined(__clang__)
#define NO_COVERAGE __attribute__((no_sanitize("coverage"), noinline))
#else
#define NO_COVERAGE
#endif

#define OBJ_LIVE(o) ((o)->used && (o)->placed && !(o)->stale)
static bool obj_live(const mobj *o) { return OBJ_LIVE(o); }

NO_COVERAGE static int new_obj(fuzz_state *s) {
  for (int i = 0; i < MAXO; i++)
    if (!s->objs[i].used) {
      memset(&s->objs[i], 0, sizeof s->objs[i]);
      s->objs[i].used = true;
      return i;
    }
  return -1;
}
NO_COVERAGE static int free_slot(ref *v, int n) {
  for (int i = 0; i < n; i++)
    if (!v[i].used) return i;
  return -1;
}
NO_COVERAGE static int pick(fuzz_state *s, ref *v, int n) {
  int start = take(s) % n;
  for (int k = 0; k < n; k++) {
    int i = (start + k) % n;
    if (v[i].used) return i;
  }
  return -1;
}

static cm_binding_t obj_binding_of_ref(const ref *r, bool is_handle) {
  return is_handle ? cm_handle_binding(r->h) : cm_binding_clone(r->b);
}

/* Host: verify the object's pattern (before its last reference goes). */
NO_COVERAGE static void verify_pattern(fuzz_state *s, mobj *o, cm_binding_t b) {
  if (!s->host || !o->filled || !obj_live(o) || o->size == 0) return;
  cm_resource_t r;
  int rc = cm_manager_get_resource(s->m, b, 0, 0, &r, NULL);
  FUZZ_CHECK(rc == CM_OK);
  FUZZ_CHECK(r.host != NULL && r.size == o->size);
  const uint8_t *mem = r.host;
  /* every byte equals the first (memcmp of the range against itself shifted
   * by one: one libc call, still checked for addressability by ASan) */
  FUZZ_CHECK(mem[0] == o->pattern);
  FUZZ_CHECK(o->size == 1 || memcmp(mem, mem + 1, (size_t)o->size - 1) == 0);
}

static void obj_drop_ref(fuzz_state *s, uint32_t oi, bool handle, cm_binding_t probe) {
  mobj *o = &s->objs[oi];
  if (o->nh + o->nb == 1) verify_pattern(s, o, probe);
  if (handle)
    o->nh--;
  else
    o->nb--;
  if (o->nh + o->nb == 0) o->used = false;
}

static void release_handle_slot(fuzz_state *s, int i) {
  ref *r = &s->hs[i];
  cm_binding_t probe = cm_handle_binding(r->h);
  obj_drop_ref(s, r->obj, true, probe);
  cm_binding_release(probe);
  cm_handle_release(r->h);
  r->used = false;
}

static void release_binding_slot(fuzz_state *s, int i) {
  ref *r = &s->bs[i];
  obj_drop_ref(s, r->obj, false, r->b);
  cm_binding_release(r->b);
  r->used = false;
}

NO_COVERAGE static bool ranges_overlap(const cm_storage_handle_t *a,
                                       const cm_storage_handle_t *b) {
  if (a->id != b->id || a->size == 0 || b->size == 0) return false;
  return a->offset < b->offset + b->size && b->offset < a->offset + a->size;
}

/* Whether sh overlaps the range of a live resolved object other than oi. */
NO_COVERAGE static bool overlaps_live(const fuzz_state *s, uint32_t oi,
                                      const cm_storage_handle_t *sh) {
  for (int i = 0; i < MAXO; i++) {
    const mobj *q = &s->objs[i];
    if ((uint32_t)i != oi && OBJ_LIVE(q) && q->resolved && ranges_overlap(sh, &q->sh)) return true;
  }
  return false;
}

/* Live objects and their bytes, from the model. */
NO_COVERAGE static void model_totals(const fuzz_state *s, uint64_t *n, uint64_t *bytes) {
  *n = *bytes = 0;
  for (int i = 0; i < MAXO; i++)
    if (OBJ_LIVE(&s->objs[i])) {
      ++*n;
      *bytes += s->objs[i].size;
    }
}

/* Resolve object oi through binding b and check it against the model. */
static void resolve(fuzz_state *s, uint32_t oi, cm_binding_t b) {
  mobj *o = &s->objs[oi];
  cm_storage_handle_t sh;
  cm_location_t loc;
  uint64_t cursor;
  cm_diag_t d;
  cm_diag_clear(&d);
  int rc = cm_manager_get_storage(s->m, b, &sh, &d);
  if (!obj_live(o)) {
    FUZZ_CHECK(rc == CM_ENOTFOUND);
    FUZZ_CHECK(cm_manager_find(s->m, b, &loc, NULL) == CM_ENOTFOUND);
    FUZZ_CHECK(cm_manager_get_cursor(s->m, b, &cursor, NULL) == CM_ENOTFOUND);
    return;
  }
  if (rc == CM_EMAPPING && (s->faults || s->capped)) return; /* lazy mapping failed */
  FUZZ_CHECK(rc == CM_OK);
  FUZZ_CHECK(sh.size == o->size);
  FUZZ_CHECK(cm_manager_find(s->m, b, &loc, NULL) == CM_OK);
  FUZZ_CHECK(loc.init);
  FUZZ_CHECK(cm_manager_get_cursor(s->m, b, &cursor, NULL) == CM_OK);
  if (o->resolved) {
    FUZZ_CHECK(sh.id == o->sh.id && sh.offset == o->sh.offset && sh.size == o->sh.size);
    return;
  }
  FUZZ_CHECK(!overlaps_live(s, oi, &sh));
  o->resolved = true;
  o->sh = sh;
  if (s->host && o->size > 0) {
    cm_resource_t r;
    FUZZ_CHECK(cm_manager_get_resource(s->m, b, 0, 0, &r, NULL) == CM_OK);
    FUZZ_CHECK(r.host != NULL && r.size == o->size);
    o->pattern = (uint8_t)(++s->next_pattern | 1u);
    memset(r.host, o->pattern, o->size);
    o->filled = true;
  }
}

NO_COVERAGE static void check_usage(fuzz_state *s, bool full) {
  if (full) {
    cm_diag_t d;
    cm_diag_clear(&d);
    size_t bad = cm_manager_check(s->m, &d);
    if (bad) fprintf(stderr, "fuzz_ops: cm_manager_check: %zu: %s\n", bad, d.message);
    FUZZ_CHECK(bad == 0);
  }
  uint64_t n, bytes;
  model_totals(s, &n, &bytes);
  cm_usage_t u;
  cm_manager_usage(s->m, &u);
  if (s->npins_outstanding || s->capturing) {
    FUZZ_CHECK(u.number_allocs >= n);
    FUZZ_CHECK(u.bytes_in_use >= bytes);
  } else {
    if (u.number_allocs != n || u.bytes_in_use != bytes)
      fprintf(stderr, "fuzz_ops: usage %llu allocs / %llu bytes, model %llu / %llu\n",
              (unsigned long long)u.number_allocs, (unsigned long long)u.bytes_in_use,
              (unsigned long long)n, (unsigned long long)bytes);
    FUZZ_CHECK(u.number_allocs == n);
    FUZZ_CHECK(u.bytes_in_use == bytes);
  }
}

static bool reserve_error_ok(int rc) {
  return rc == CM_ETOOBIG || rc == CM_ECAPACITY || rc == CM_EOOM || rc == CM_ESTORAGE ||
         rc == CM_EOVERFLOW || rc == CM_ENOMEM;
}

static void op_reserve(fuzz_state *s) {
  uint64_t size = take_size(s);
  int slot = free_slot(s->hs, MAXH);
  if (slot < 0) return;
  cm_handle_t h = {NULL};
  cm_diag_t d;
  cm_diag_clear(&d);
  int rc = cm_manager_reserve(s->m, size, &h, &d);
  if (rc != CM_OK) {
    FUZZ_CHECK(reserve_error_ok(rc));
    FUZZ_CHECK(h.d == NULL);
    FUZZ_CHECK(d.code == rc);
    return;
  }
  FUZZ_CHECK(h.d != NULL);
  int oi = new_obj(s);
  if (oi < 0) { /* model full: give it straight back */
    cm_handle_release(h);
    return;
  }
  s->objs[oi].placed = true;
  s->objs[oi].size = size;
  s->objs[oi].nh = 1;
  s->hs[slot] = (ref){.used = true, .obj = (uint32_t)oi, .h = h};
  FUZZ_CHECK(cm_handle_can_mut(h) || s->capturing || s->npins_outstanding);
  if (take(s) & 1) {
    cm_binding_t b = cm_handle_binding(h);
    resolve(s, (uint32_t)oi, b);
    cm_binding_release(b);
  }
}

static void op_bind(fuzz_state *s) {
  int slot = free_slot(s->hs, MAXH);
  if (slot < 0) return;
  cm_handle_t reserved = {NULL};
  int from = -1;
  uint64_t size = 0;
  if (take(s) & 1) {
    from = pick(s, s->hs, MAXH);
    if (from < 0) return;
    reserved = cm_handle_clone(s->hs[from].h);
  } else {
    size = take_size(s);
    int rc = cm_manager_reserve(s->m, size, &reserved, NULL);
    if (rc != CM_OK) {
      FUZZ_CHECK(reserve_error_ok(rc));
      return;
    }
  }
  int oi = new_obj(s);
  if (oi < 0) {
    cm_handle_release(reserved);
    return;
  }
  cm_handle_t assigned;
  if (cm_handle_new(&assigned) != CM_OK) {
    s->objs[oi].used = false;
    cm_handle_release(reserved);
    return;
  }
  uint64_t cursor = take(s);
  cm_diag_t d;
  cm_diag_clear(&d);
  int rc = cm_manager_bind(s->m, reserved, assigned, cursor, &d); /* consumes reserved */
  mobj *o = &s->objs[oi];
  o->nh = 1;
  s->hs[slot] = (ref){.used = true, .obj = (uint32_t)oi, .h = assigned};
  if (from >= 0) {
    mobj *src = &s->objs[s->hs[from].obj];
    if (!obj_live(src)) {
      FUZZ_CHECK(rc == CM_ENOTFOUND);
      o->placed = false; /* assigned stays an unplaced handle */
      return;
    }
    FUZZ_CHECK(rc == CM_OK);
    o->placed = true;
    o->size = src->size;
    o->resolved = src->resolved;
    o->sh = src->sh;
    o->filled = src->filled;
    o->pattern = src->pattern;
    src->stale = true; /* every other reference to the old descriptor is stale now */
  } else {
    FUZZ_CHECK(rc == CM_OK);
    o->placed = true;
    o->size = size;
  }
  uint64_t got = 0;
  cm_binding_t b = cm_handle_binding(assigned);
  FUZZ_CHECK(cm_manager_get_cursor(s->m, b, &got, NULL) == CM_OK);
  (void)got; /* the Direct pool may or may not keep it; only its success is checked */
  resolve(s, (uint32_t)oi, b);
  cm_binding_release(b);
}

static void op_lookup(fuzz_state *s, bool via_binding) {
  int i = via_binding ? pick(s, s->bs, MAXB) : pick(s, s->hs, MAXH);
  if (i < 0) return;
  ref *r = via_binding ? &s->bs[i] : &s->hs[i];
  cm_binding_t b = obj_binding_of_ref(r, !via_binding);
  resolve(s, r->obj, b);
  mobj *o = &s->objs[r->obj];
  uint8_t t0 = take(s) % 4, t1 = take(s) % 4;
  uint64_t a = t0 == 3 ? o->size : t0, z = t1 == 3 ? 1 : t1;
  cm_resource_t res;
  int rc = cm_manager_get_resource(s->m, b, a, z, &res, NULL);
  if (!obj_live(o))
    FUZZ_CHECK(rc == CM_ENOTFOUND);
  else if (a + z > o->size)
    FUZZ_CHECK(rc == CM_EINVAL || (rc == CM_EMAPPING && (s->faults || s->capped)));
  else if (rc != CM_EMAPPING || !(s->faults || s->capped)) {
    FUZZ_CHECK(rc == CM_OK);
    FUZZ_CHECK(res.size == o->size - a - z);
    if (s->host && res.size) {
      FUZZ_CHECK(res.host != NULL);
      if (o->filled) FUZZ_CHECK(((const uint8_t *)res.host)[0] == o->pattern);
    }
  }
  cm_binding_release(b);
}

static void install_layout(fuzz_state *s) {
  static const char *k_layouts[] = {
      "default",
      "subslices",
      "exclusive-pages",
      "sliced:page=1MiB,max-slice=256KiB;direct",
      "sliced:page=2MiB,max-slice=512KiB,max-pool=4MiB;exclusive:max=32MiB,period=8;direct",
      "direct:reclaim=8MiB",
      "exclusive:max=128MiB,period=3",
      "adaptive",
      "exclusive:max=0;adaptive:page=64KiB,max=16MiB;direct",
  };
  cm_pool_options_t pools[16];
  size_t n = 0;
  const char *text = k_layouts[take(s) % (sizeof k_layouts / sizeof k_layouts[0])];
  if (cm_pools_parse(text, s->props, pools, 16, &n, NULL) != CM_OK || n == 0) return;
  bool anything_live = s->npins_outstanding || s->capturing;
  for (int i = 0; i < MAXO; i++) anything_live |= obj_live(&s->objs[i]);
  cm_diag_t d;
  cm_diag_clear(&d);
  int rc = cm_manager_install_pools(s->m, pools, n, &d);
  if (anything_live)
    FUZZ_CHECK(rc == CM_OK || rc == CM_EBUSY);
  else
    FUZZ_CHECK(rc == CM_OK);
  if (rc == CM_OK) FUZZ_CHECK(cm_manager_pool_count(s->m) == n);
}

static void op_can_mut(fuzz_state *s) {
  int i = pick(s, s->hs, MAXH);
  if (i < 0) return;
  ref *r = &s->hs[i];
  mobj *o = &s->objs[r->obj];
  bool cm = cm_handle_can_mut(r->h);
  if (!s->capturing && !s->npins_outstanding) FUZZ_CHECK(cm == (o->nh == 1));
  cm_handle_t c = cm_handle_clone(r->h);
  FUZZ_CHECK(cm_handle_id(c) == cm_handle_id(r->h));
  FUZZ_CHECK(!cm_handle_can_mut(c));
  cm_binding_t b = cm_handle_binding(c);
  FUZZ_CHECK(cm_binding_id(b) == cm_handle_id(r->h));
  cm_handle_release(c);
  cm_binding_release(b);
}

static void op_reports(fuzz_state *s) {
  char buf[200];
  size_t need = cm_manager_display(s->m, buf, sizeof buf);
  FUZZ_CHECK(strlen(buf) == (need < sizeof buf ? need : sizeof buf - 1));
  size_t n = cm_manager_pool_count(s->m);
  for (size_t i = 0; i <= n; i++) {
    cm_pool_report_t rep;
    FUZZ_CHECK(cm_manager_pool_report(s->m, i == n ? CM_PERSISTENT_POOL : i, &rep) == CM_OK);
    FUZZ_CHECK(rep.usage.bytes_in_use <= rep.usage.bytes_reserved || rep.pages_unmapped ||
               s->dry_runs);
  }
  cm_pool_report_t rep;
  FUZZ_CHECK(cm_manager_pool_report(s->m, n, &rep) == CM_EINVAL || n == CM_PERSISTENT_POOL);
}

static void one_op(fuzz_state *s) {
  uint8_t op = take(s) % 24;
  switch (op) {
  case 0: case 1: case 2: case 3:
    op_reserve(s);
    break;
  case 4: case 5: {
    int i = pick(s, s->hs, MAXH);
    if (i >= 0) release_handle_slot(s, i);
    break;
  }
  case 6: {
    int i = pick(s, s->hs, MAXH), j = free_slot(s->hs, MAXH);
    if (i < 0 || j < 0) break;
    s->hs[j] = (ref){.used = true, .obj = s->hs[i].obj, .h = cm_handle_clone(s->hs[i].h)};
    s->objs[s->hs[i].obj].nh++;
    break;
  }
  case 7: case 8: { /* binding from a handle; 8 consumes the handle */
    int i = pick(s, s->hs, MAXH), j = free_slot(s->bs, MAXB);
    if (i < 0 || j < 0) break;
    uint32_t oi = s->hs[i].obj;
    if (op == 8) {
      s->bs[j] = (ref){.used = true, .obj = oi, .b = cm_handle_into_binding(s->hs[i].h)};
      s->hs[i].used = false;
      s->objs[oi].nh--;
    } else {
      s->bs[j] = (ref){.used = true, .obj = oi, .b = cm_handle_binding(s->hs[i].h)};
    }
    s->objs[oi].nb++;
    break;
  }
  case 9: {
    int i = pick(s, s->bs, MAXB);
    if (i >= 0) release_binding_slot(s, i);
    break;
  }
  case 10: {
    int i = pick(s, s->bs, MAXB), j = free_slot(s->bs, MAXB);
    if (i < 0 || j < 0) break;
    s->bs[j] = (ref){.used = true, .obj = s->bs[i].obj, .b = cm_binding_clone(s->bs[i].b)};
    s->objs[s->bs[i].obj].nb++;
    break;
  }
  case 11:
    op_bind(s);
    break;
  case 12:
  case 13:
    op_lookup(s, op == 13);
    break;
  case 14:
    if ((take(s) & 1) && s->windows < 8) {
      cm_manager_set_mode(s->m, (take(s) & 3) == 0 ? CM_MODE_DEDICATED : CM_MODE_PERSISTENT);
      s->windows++;
    } else {
      cm_manager_set_mode(s->m, CM_MODE_AUTO); /* unbalanced closes are no-ops */
      if (s->windows) s->windows--;
    }
    break;
  case 15:
    cm_manager_cleanup(s->m, take(s) & 1);
    break;
  case 16:
    install_layout(s);
    break;
  case 17:
    cm_manager_capture_begin(s->m);
    s->capturing = true;
    break;
  case 18:
    cm_manager_capture_priming_end(s->m);
    break;
  case 19: {
    int k = -1;
    for (int i = 0; i < MAXPINS; i++)
      if (!s->pins[i]) k = i;
    if (k < 0) break;
    cm_pins_t *p = NULL;
    int rc = cm_manager_capture_end(s->m, &p);
    FUZZ_CHECK(rc == CM_OK || rc == CM_ENOMEM);
    if (!s->capturing) FUZZ_CHECK(p == NULL || cm_pins_count(p) == 0);
    s->capturing = false;
    if (p) {
      s->pins[k] = p;
      s->npins_outstanding++;
    }
    break;
  }
  case 20: {
    int i = take(s) % MAXPINS;
    if (s->pins[i]) {
      cm_pins_release(s->pins[i]);
      s->pins[i] = NULL;
      s->npins_outstanding--;
    }
    break;
  }
  case 21:
    if ((take(s) & 1) && s->dry_runs < 4) {
      cm_manager_dry_run_begin(s->m);
      s->dry_runs++;
    } else if (s->dry_runs) {
      cm_manager_dry_run_end(s->m);
      s->dry_runs--;
    }
    break;
  case 22:
    op_can_mut(s);
    break;
  default:
    op_reports(s);
    break;
  }
}

static void teardown(fuzz_state *s) {
  for (int i = 0; i < MAXH; i++)
    if (s->hs[i].used) release_handle_slot(s, i);
  for (int i = 0; i < MAXB; i++)
    if (s->bs[i].used) release_binding_slot(s, i);
  if (s->capturing) {
    cm_pins_t *p = NULL;
    FUZZ_CHECK(cm_manager_capture_end(s->m, &p) == CM_OK || p == NULL);
    cm_pins_release(p);
    s->capturing = false;
  }
  for (int i = 0; i < MAXPINS; i++) {
    cm_pins_release(s->pins[i]);
    s->pins[i] = NULL;
  }
  s->npins_outstanding = 0;
  while (s->dry_runs) {
    cm_manager_dry_run_end(s->m);
    s->dry_runs--;
  }
  for (; s->windows; s->windows--) cm_manager_set_mode(s->m, CM_MODE_AUTO);
  cm_manager_cleanup(s->m, true);
  check_usage(s, true);
  cm_usage_t u;
  cm_manager_usage(s->m, &u);
  FUZZ_CHECK(u.number_allocs == 0 && u.bytes_in_use == 0);
  FUZZ_CHECK(cm_manager_mode(s->m) == s->initial_mode); /* every window closed */
  s->m = NULL; /* kept for the next input of the same setup */
}

/* ---- persistent managers ---------------------------------------------------- */

/* key: storage kind (0 sim, 1 capped sim, 2 host) x faults x alignment x
 * persistent-memory mode */
enum { NKEYS = 3 * 2 * 4 * 4 };
static cm_manager_t *g_managers[NKEYS];
static cm_alloc_mode_t g_initial_mode[NKEYS];
static bool g_fresh, g_fresh_read;

static void destroy_managers(void) {
  for (int i = 0; i < NKEYS; i++) {
    cm_manager_destroy(g_managers[i]);
    g_managers[i] = NULL;
  }
}

/* The manager of this setup, created on first use (NULL: creation failed for
 * lack of host memory, the input is skipped). */
static cm_manager_t *manager_for(fuzz_state *s, int kind, uint32_t align_ix,
                                 cm_persistent_memory_t pm) {
  if (!g_fresh_read) {
    const char *e = getenv("CM_FUZZ_FRESH");
    g_fresh = e && e[0] == '1';
    g_fresh_read = true;
    atexit(destroy_managers);
  }
  int key = ((kind * 2 + (s->faults ? 1 : 0)) * 4 + (int)align_ix) * 4 + (int)pm;
  if (g_managers[key] && !g_fresh) {
    s->initial_mode = g_initial_mode[key];
    return g_managers[key];
  }
  cm_manager_destroy(g_managers[key]);
  g_managers[key] = NULL;
  cm_storage_t *storage = NULL;
  int rc = s->host ? cm_storage_host_create(0, &storage)
                   : cm_storage_sim_create(s->capped ? (64u << 20) : 0, s->capped, 0, &storage);
  FUZZ_CHECK(rc == CM_OK);
  if (s->faults) {
    cm_fault_plan_t none;
    cm_fault_plan_init(&none); /* the input's plan is set after the reset */
    cm_storage_t *f = NULL;
    FUZZ_CHECK(cm_storage_faulty_create(storage, &none, &f) == CM_OK);
    storage = f;
  }
  cm_manager_config_t cfgm;
  cm_manager_config_init(&cfgm);
  cfgm.name = "fuzz";
  cfgm.props = s->props;
  cfgm.persistent_memory = pm;
  cm_diag_t d;
  cm_diag_clear(&d);
  rc = cm_manager_create(storage, &cfgm, &g_managers[key], &d);
  if (rc != CM_OK) {
    FUZZ_CHECK(rc == CM_ENOMEM);
    cm_storage_destroy(storage);
    return NULL;
  }
  g_initial_mode[key] = s->initial_mode = cm_manager_mode(g_managers[key]);
  return g_managers[key];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static fuzz_state st;
  fuzz_state *s = &st;
  memset(s, 0, sizeof *s);
  s->p = data;
  s->end = data + size;
  g_opno = 0;
  const bool replaying = &cm_fuzz_replaying != NULL && cm_fuzz_replaying;

  uint8_t cfg = take(s), cfg2 = take(s);
  s->host = (cfg & 3) == 3;
  s->capped = (cfg & 3) == 1;
  s->faults = cfg & 4;
  cm_fault_plan_t plan;
  cm_fault_plan_init(&plan);
  if (s->faults) {
    plan.mode = CM_FAULT_RANDOM;
    plan.ppm = (uint32_t)take(s) * 1000u;
    plan.seed = take(s);
    plan.error = (cfg & 8) ? CM_ESTORAGE : CM_EOOM;
  }
  static const uint64_t k_align[] = {32, 256, 512, 1};
  uint32_t align_ix = (cfg >> 4) & 3;
  s->props.max_page_size = s->host ? (8u << 20) : (128u << 20);
  s->props.alignment = k_align[align_ix];
  cm_preset_t preset = (cm_preset_t)((cfg2 & 3) % 3);
  cm_persistent_memory_t pm = (cm_persistent_memory_t)((cfg2 >> 2) & 3);
  s->m = manager_for(s, s->host ? 2 : s->capped ? 1 : 0, align_ix, pm);
  if (!s->m) return 0;

  /* reset: the input's layout (every dynamic pool rebuilt; the manager is
   * empty, so this cannot be refused), then the input's fault plan */
  cm_pool_options_t pools[64];
  size_t npools = 0;
  FUZZ_CHECK(cm_pools_preset(preset, s->props, pools, 64, &npools) == CM_OK);
  cm_diag_t d;
  cm_diag_clear(&d);
  int rc = cm_manager_install_pools(s->m, pools, npools, &d);
  if (rc != CM_OK) fprintf(stderr, "fuzz_ops: reset: %s\n", d.message);
  FUZZ_CHECK(rc == CM_OK);
  if (s->faults) FUZZ_CHECK(cm_storage_faulty_set_plan(cm_manager_storage(s->m), &plan) == CM_OK);
  while (s->p < s->end && g_opno < MAXOPS) {
    g_opno++;
    one_op(s);
    check_usage(s, replaying || g_opno % CHECK_EVERY == 0 || s->p == s->end);
  }
  teardown(s);
  return 0;
}
