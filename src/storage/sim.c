/*
 * sim.c - the simulated device: address ranges with no backing memory.
 *
 * Addresses come from a bump pointer (aligned to 512, never reused), so an
 * 80 GiB workload replays on a laptop. Capacity accounting counts allocated
 * plus mapped bytes; over capacity an allocation fails with CM_EOOM when the
 * storage was created with fail_over_capacity, else it is only counted.
 * Virtual memory: vm_reserve hands out an address range, vm_map/unmap count
 * granules (they must be granule-aligned) against the capacity.
 * Exports: cm_storage_sim_create.
 */
#include <stdlib.h>

#include "core/util.h"
#include "storage/idtable.h"

typedef struct sim_ctx {
  cm__id_table ids;
  uint64_t next_addr;
  uint64_t capacity, used, granularity;
  bool fail_over;
} sim_ctx;

static uint64_t sim_alignment(void *ctx) {
  (void)ctx;
  return 512;
}

static int sim_take(sim_ctx *c, uint64_t size, cm_diag_t *diag) {
  if (c->capacity && c->fail_over && (size > c->capacity || c->used > c->capacity - size))
    return cm__diag_set(diag, CM_EOOM,
                        "simulated device out of memory: %llu bytes requested, %llu of %llu in use",
                        (unsigned long long)size, (unsigned long long)c->used,
                        (unsigned long long)c->capacity);
  c->used += size;
  return CM_OK;
}

static int sim_new_range(sim_ctx *c, uint64_t size, uint8_t kind, uint64_t *out_id,
                         cm_diag_t *diag) {
  uint64_t span;
  if (!cm__round_up(size ? size : 1, 512, &span) || c->next_addr > UINT64_MAX - span)
    return cm__diag_set(diag, CM_ETOOBIG, "simulated device: %llu bytes exceed the address space",
                        (unsigned long long)size);
  uint64_t id = cm__id_new(&c->ids);
  if (!id) return cm__diag_set(diag, CM_ENOMEM, "simulated device: out of host memory");
  cm__id_entry *e = &c->ids.v[id];
  e->addr = c->next_addr;
  e->size = size;
  e->live = kind;
  c->next_addr += span;
  *out_id = id;
  return CM_OK;
}

static int sim_alloc(void *ctx, uint64_t size, uint64_t *out_id, cm_diag_t *diag) {
  sim_ctx *c = ctx;
  int rc = sim_take(c, size, diag);
  if (rc) return rc;
  rc = sim_new_range(c, size, 1, out_id, diag);
  if (rc) c->used -= size;
  return rc;
}

static void sim_dealloc(void *ctx, uint64_t id) {
  sim_ctx *c = ctx;
  cm__id_entry *e = cm__id_get(&c->ids, id);
  if (!e || e->live != 1) return;
  c->used -= e->size;
  e->live = 0;
}

static int sim_get(void *ctx, uint64_t id, uint64_t offset, uint64_t size, cm_resource_t *out,
                   cm_diag_t *diag) {
  sim_ctx *c = ctx;
  cm__id_entry *e = cm__id_get(&c->ids, id);
  if (!e) return cm__diag_set(diag, CM_EHANDLE, "StorageId(%llu) in the sim storage",
                              (unsigned long long)id);
  if (offset > e->size || size > e->size - offset)
    return cm__diag_set(diag, CM_EINVAL, "range [%llu, +%llu) outside StorageId(%llu) of %llu bytes",
                        (unsigned long long)offset, (unsigned long long)size,
                        (unsigned long long)id, (unsigned long long)e->size);
  out->addr = e->addr + offset;
  out->host = NULL;
  out->size = size;
  return CM_OK;
}

static void sim_release(void *ctx) {
  sim_ctx *c = ctx;
  free(c->ids.v);
  free(c);
}

static uint64_t sim_granularity(void *ctx) { return ((sim_ctx *)ctx)->granularity; }

static int sim_vm_reserve(void *ctx, uint64_t size, uint64_t *out_id, cm_diag_t *diag) {
  return sim_new_range(ctx, size, 2, out_id, diag);
}

static int sim_vm_map(void *ctx, uint64_t id, uint64_t off, uint64_t size, cm_diag_t *diag) {
  sim_ctx *c = ctx;
  cm__id_entry *e = cm__id_get(&c->ids, id);
  if (!e || e->live != 2 || off > e->size || size > e->size - off || off % c->granularity ||
      size % c->granularity)
    return cm__diag_set(diag, CM_EINVAL, "sim vm_map: bad range");
  return sim_take(c, size, diag);
}

static void sim_vm_unmap(void *ctx, uint64_t id, uint64_t off, uint64_t size) {
  sim_ctx *c = ctx;
  (void)id;
  (void)off;
  c->used -= size < c->used ? size : c->used;
}

static void sim_vm_release(void *ctx, uint64_t id) {
  sim_ctx *c = ctx;
  cm__id_entry *e = cm__id_get(&c->ids, id);
  if (e && e->live == 2) e->live = 0;
}

static const cm_storage_ops_t k_sim_ops = {
    .name = "sim",
    .alignment = sim_alignment,
    .alloc = sim_alloc,
    .dealloc = sim_dealloc,
    .get = sim_get,
    .release = sim_release,
    .vm_granularity = sim_granularity,
    .vm_reserve = sim_vm_reserve,
    .vm_map = sim_vm_map,
    .vm_unmap = sim_vm_unmap,
    .vm_release = sim_vm_release,
};

int cm_storage_sim_create(uint64_t capacity, bool fail_over_capacity, uint64_t granularity,
                          cm_storage_t **out) {
  if (!out) return CM_EINVAL;
  *out = NULL;
  if (granularity == 0) granularity = 2ull << 20;
  if (granularity % 512) return CM_EINVAL;
  sim_ctx *c = calloc(1, sizeof *c);
  if (!c) return CM_ENOMEM;
  c->next_addr = 0x100000000ull;
  c->capacity = capacity;
  c->fail_over = fail_over_capacity;
  c->granularity = granularity;
  int rc = cm_storage_create(&k_sim_ops, c, out);
  if (rc) free(c);
  return rc;
}
