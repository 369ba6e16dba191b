/*
 * faulty.c - the fault-injecting storage decorator (cubemem/faulty.h).
 *
 * Algorithm. The decorator is an ordinary backend whose context holds the
 * inner storage (owned) and a per-instance copy of cm_storage_ops_t: each
 * optional operation is offered only when the inner backend offers it, so
 * cm_storage_has_vm() and the event support look the same through the
 * decorator. Calls go straight to the inner backend's ops (not through the
 * inner wrapper), so the statistics are counted once, by the outer wrapper.
 *
 * The counted operations (alloc, vm_map, vm_alias, optionally vm_reserve,
 * copy and copy_wait) get a 1-based
 * call number. Before forwarding, the plan decides whether this call fails:
 *   NTH       call == nth
 *   FROM_NTH  call >= nth
 *   RANDOM    next xorshift64* value % 1000000 < ppm (one draw per call)
 * An injected failure returns plan.error (CM_ESTORAGE for vm_alias, whose
 * contract has no out-of-memory) with a diag message and does not reach the
 * inner storage, so nothing changes - the backend contract.
 *
 * Invariants: `calls` counts every counted call, `injected` <= `calls`;
 * both are atomics so other threads may read them. The plan is changed only
 * through cm_storage_faulty_set_plan (storage thread).
 *
 * Exports: cm_fault_plan_init, cm_storage_faulty_create,
 * cm_storage_faulty_set_plan, cm_storage_faulty_calls,
 * cm_storage_faulty_injected.
 */
#include <stdatomic.h>
#include <stdlib.h>

#include "base/util.h"
#include "cubemem/faulty.h"
#include "storage/storage_internal.h"

typedef struct faulty_ctx {
  cm_storage_ops_t ops; /* this instance's table (must outlive the wrapper's use) */
  cm_storage_t *inner;  /* owned */
  const cm_storage_ops_t *iops;
  void *ictx;
  cm_fault_plan_t plan;
  uint64_t rng;
  _Atomic uint64_t calls, injected;
} faulty_ctx;


void cm_fault_plan_init(cm_fault_plan_t *plan) {
  if (!plan) return;
  plan->mode = CM_FAULT_NONE;
  plan->nth = 0;
  plan->ppm = 0;
  plan->seed = 0;
  plan->error = CM_EOOM;
  plan->ops = CM_FAULT_OP_DEFAULT;
}

static int plan_normalise(const cm_fault_plan_t *in, cm_fault_plan_t *out) {
  cm_fault_plan_t p;
  if (in)
    p = *in;
  else
    cm_fault_plan_init(&p);
  if (p.error == 0) p.error = CM_EOOM;
  if (p.ops == 0) p.ops = CM_FAULT_OP_DEFAULT;
  if (p.error != CM_EOOM && p.error != CM_ESTORAGE) return CM_EINVAL;
  if (p.ppm > 1000000u) return CM_EINVAL;
  if ((int)p.mode < (int)CM_FAULT_NONE || (int)p.mode > (int)CM_FAULT_RANDOM) return CM_EINVAL;
  if (p.ops & ~(unsigned)(CM_FAULT_OP_ALLOC | CM_FAULT_OP_VM_MAP | CM_FAULT_OP_VM_RESERVE |
                          CM_FAULT_OP_COPY | CM_FAULT_OP_COPY_WAIT | CM_FAULT_OP_VM_ALIAS))
    return CM_EINVAL;
  *out = p;
  return CM_OK;
}

/* Seed the generator; xorshift needs a non-zero state. */
static uint64_t rng_seed(uint64_t seed) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return z ? z : 0x2545F4914F6CDD1Dull;
}

static uint64_t rng_next(uint64_t *s) {
  uint64_t x = *s;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *s = x;
  return x * 0x2545F4914F6CDD1Dull;
}

/* Count one call of operation `op`; returns non-zero (the status to inject)
 * when the plan says this call fails. */
static int decide(faulty_ctx *c, unsigned op, const char *what, cm_diag_t *diag) {
  int error = op == CM_FAULT_OP_VM_ALIAS ? CM_ESTORAGE : c->plan.error;
  if (!(c->plan.ops & op)) return CM_OK;
  uint64_t n = atomic_fetch_add_explicit(&c->calls, 1, memory_order_relaxed) + 1;
  bool fail = false;
  switch (c->plan.mode) {
  case CM_FAULT_NONE:
    break;
  case CM_FAULT_NTH:
    fail = c->plan.nth != 0 && n == c->plan.nth;
    break;
  case CM_FAULT_FROM_NTH:
    fail = c->plan.nth != 0 && n >= c->plan.nth;
    break;
  case CM_FAULT_RANDOM:
    fail = rng_next(&c->rng) % 1000000u < c->plan.ppm;
    break;
  }
  if (!fail) return CM_OK;
  atomic_fetch_add_explicit(&c->injected, 1, memory_order_relaxed);
  return cm__diag_set(diag, error, "faulty storage: injected %s on %s call %llu",
                      cm_err_name(error), what, (unsigned long long)n);
}

static uint64_t faulty_alignment(void *ctx) {
  faulty_ctx *c = ctx;
  return c->iops->alignment ? c->iops->alignment(c->ictx) : 1;
}

static int faulty_alloc(void *ctx, uint64_t size, uint64_t *out_id, cm_diag_t *diag) {
  faulty_ctx *c = ctx;
  int rc = decide(c, CM_FAULT_OP_ALLOC, "alloc", diag);
  if (rc) return rc;
  return c->iops->alloc(c->ictx, size, out_id, diag);
}

static void faulty_dealloc(void *ctx, uint64_t id) {
  faulty_ctx *c = ctx;
  c->iops->dealloc(c->ictx, id);
}

static int faulty_flush(void *ctx) {
  faulty_ctx *c = ctx;
  return c->iops->flush ? c->iops->flush(c->ictx) : CM_OK;
}

static int faulty_get(void *ctx, uint64_t id, uint64_t offset, uint64_t size, cm_resource_t *out,
                      cm_diag_t *diag) {
  faulty_ctx *c = ctx;
  return c->iops->get(c->ictx, id, offset, size, out, diag);
}

static void faulty_release(void *ctx) {
  faulty_ctx *c = ctx;
  cm_storage_destroy(c->inner);
  free(c);
}

static int faulty_event_record(void *ctx, void **out_event, cm_diag_t *diag) {
  faulty_ctx *c = ctx;
  return c->iops->event_record(c->ictx, out_event, diag);
}
static int faulty_event_query(void *ctx, void *event) {
  faulty_ctx *c = ctx;
  return c->iops->event_query(c->ictx, event);
}
static int faulty_event_sync(void *ctx, void *event) {
  faulty_ctx *c = ctx;
  return c->iops->event_sync(c->ictx, event);
}
static void faulty_event_destroy(void *ctx, void *event) {
  faulty_ctx *c = ctx;
  c->iops->event_destroy(c->ictx, event);
}

static uint64_t faulty_vm_granularity(void *ctx) {
  faulty_ctx *c = ctx;
  return c->iops->vm_granularity(c->ictx);
}
static int faulty_vm_reserve(void *ctx, uint64_t size, uint64_t *out_id, cm_diag_t *diag) {
  faulty_ctx *c = ctx;
  int rc = decide(c, CM_FAULT_OP_VM_RESERVE, "vm_reserve", diag);
  if (rc) return rc;
  return c->iops->vm_reserve(c->ictx, size, out_id, diag);
}
static int faulty_vm_map(void *ctx, uint64_t id, uint64_t offset, uint64_t size, uint64_t piece,
                         cm_diag_t *diag) {
  faulty_ctx *c = ctx;
  int rc = decide(c, CM_FAULT_OP_VM_MAP, "vm_map", diag);
  if (rc) return rc;
  return c->iops->vm_map(c->ictx, id, offset, size, piece, diag);
}
static int faulty_vm_unmap(void *ctx, uint64_t id, uint64_t offset, uint64_t size, uint64_t piece,
                           cm_diag_t *diag) {
  faulty_ctx *c = ctx;
  return c->iops->vm_unmap(c->ictx, id, offset, size, piece, diag);
}
static int faulty_vm_release(void *ctx, uint64_t id, cm_diag_t *diag) {
  faulty_ctx *c = ctx;
  return c->iops->vm_release(c->ictx, id, diag);
}

static int faulty_vm_alias(void *ctx, uint64_t dst_id, uint64_t dst_off, uint64_t src_id,
                           uint64_t src_off, uint64_t size, uint64_t piece, cm_diag_t *diag) {
  faulty_ctx *c = ctx;
  int rc = decide(c, CM_FAULT_OP_VM_ALIAS, "vm_alias", diag);
  if (rc) return rc;
  return c->iops->vm_alias(c->ictx, dst_id, dst_off, src_id, src_off, size, piece, diag);
}

static int faulty_copy(void *ctx, uint64_t dst_id, uint64_t dst_off, uint64_t src_id,
                       uint64_t src_off, uint64_t size, cm_diag_t *diag) {
  faulty_ctx *c = ctx;
  int rc = decide(c, CM_FAULT_OP_COPY, "copy", diag);
  if (rc) return rc;
  return c->iops->copy(c->ictx, dst_id, dst_off, src_id, src_off, size, diag);
}
static int faulty_copy_wait(void *ctx, cm_diag_t *diag) {
  faulty_ctx *c = ctx;
  int rc = c->iops->copy_wait(c->ictx, diag); /* the copies land, or not, either way */
  int inj = decide(c, CM_FAULT_OP_COPY_WAIT, "copy_wait", diag);
  return rc != CM_OK ? rc : inj;
}

static void faulty_poison(void *ctx, uint64_t id, uint64_t off, uint64_t size, bool poison) {
  faulty_ctx *c = ctx;
  c->iops->poison(c->ictx, id, off, size, poison);
}

static int faulty_mem_info(void *ctx, uint64_t *free_bytes, uint64_t *total_bytes) {
  faulty_ctx *c = ctx;
  return c->iops->mem_info(c->ictx, free_bytes, total_bytes);
}

static void faulty_set_timing(void *ctx, bool on) {
  faulty_ctx *c = ctx;
  c->iops->set_timing(c->ictx, on);
}

static void faulty_call_times(void *ctx, cm_call_times_t *out) {
  faulty_ctx *c = ctx;
  c->iops->call_times(c->ictx, out);
}

int cm_storage_faulty_create(cm_storage_t *inner, const cm_fault_plan_t *plan,
                             cm_storage_t **out) {
  if (!out) return CM_EINVAL;
  *out = NULL;
  if (!inner) return CM_EINVAL;
  cm_fault_plan_t p;
  int rc = plan_normalise(plan, &p);
  if (rc) return rc;
  faulty_ctx *c = calloc(1, sizeof *c);
  if (!c) return CM_ENOMEM;
  const cm_storage_ops_t *io = inner->ops;
  c->inner = inner;
  c->iops = io;
  c->ictx = inner->ctx;
  c->plan = p;
  c->rng = rng_seed(p.seed);
  atomic_init(&c->calls, 0);
  atomic_init(&c->injected, 0);

  c->ops.name = "faulty";
  c->ops.alignment = faulty_alignment;
  c->ops.alloc = faulty_alloc;
  c->ops.dealloc = faulty_dealloc;
  c->ops.flush = faulty_flush;
  c->ops.get = faulty_get;
  c->ops.release = faulty_release;
  if (io->event_record) c->ops.event_record = faulty_event_record;
  if (io->event_query) c->ops.event_query = faulty_event_query;
  if (io->event_sync) c->ops.event_sync = faulty_event_sync;
  if (io->event_destroy) c->ops.event_destroy = faulty_event_destroy;
  if (io->vm_granularity) c->ops.vm_granularity = faulty_vm_granularity;
  if (io->vm_reserve) c->ops.vm_reserve = faulty_vm_reserve;
  if (io->vm_map) c->ops.vm_map = faulty_vm_map;
  if (io->vm_unmap) c->ops.vm_unmap = faulty_vm_unmap;
  if (io->vm_release) c->ops.vm_release = faulty_vm_release;
  if (io->vm_alias) c->ops.vm_alias = faulty_vm_alias;
  if (io->mem_info) c->ops.mem_info = faulty_mem_info;
  if (io->poison) c->ops.poison = faulty_poison;
  if (io->set_timing) c->ops.set_timing = faulty_set_timing;
  if (io->call_times) c->ops.call_times = faulty_call_times;
  if (io->copy && io->copy_wait) {
    c->ops.copy = faulty_copy;
    c->ops.copy_wait = faulty_copy_wait;
  }

  rc = cm_storage_create(&c->ops, c, out);
  if (rc) {
    free(c); /* the caller keeps inner */
    *out = NULL;
    return rc;
  }
  return CM_OK;
}

/* The decorator's context, or NULL when s is not a faulty storage. */
static faulty_ctx *as_faulty(const cm_storage_t *s) {
  if (!s || !s->ops || s->ops->alloc != faulty_alloc) return NULL;
  return s->ctx;
}

int cm_storage_faulty_set_plan(cm_storage_t *s, const cm_fault_plan_t *plan) {
  faulty_ctx *c = as_faulty(s);
  if (!c) return CM_EINVAL;
  cm_fault_plan_t p;
  int rc = plan_normalise(plan, &p);
  if (rc) return rc;
  c->plan = p;
  c->rng = rng_seed(p.seed);
  atomic_store(&c->calls, 0);
  atomic_store(&c->injected, 0);
  return CM_OK;
}

uint64_t cm_storage_faulty_calls(const cm_storage_t *s) {
  faulty_ctx *c = as_faulty(s);
  return c ? atomic_load(&c->calls) : 0;
}

uint64_t cm_storage_faulty_injected(const cm_storage_t *s) {
  faulty_ctx *c = as_faulty(s);
  return c ? atomic_load(&c->injected) : 0;
}
