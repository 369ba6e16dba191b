/*
 * sim.c - the simulated device: address ranges with no backing memory, under
 * the CUDA driver's rules.
 *
 * Addresses come from a bump pointer (never reused), so an 80 GiB workload
 * replays on a laptop; plain allocations are 512-aligned, reservations are
 * aligned to the granule. Capacity accounting counts allocated plus mapped
 * bytes; over capacity a call fails with CM_EOOM when the storage was created
 * with fail_over_capacity, else it is only counted.
 *
 * Virtual memory follows storage.h's contract, which is the driver's
 * (cuMemAddressReserve, cuMemCreate, cuMemMap, cuMemSetAccess, cuMemUnmap,
 * cuMemRelease, cuMemAddressFree): reservations are granule multiples;
 * physical objects are granule multiples mapped whole, each as one mapping,
 * never overlapping another, only inside a reservation; a mapping is unmapped
 * whole or not at all; a reservation is freed only when nothing is mapped in
 * it. Anything else fails with CM_EINVAL (unknown ids with CM_EHANDLE),
 * changes nothing, and is counted as a violation with its message
 * (cm_storage_sim_state), as is a dealloc of an id that is not a live
 * allocation. So what passes here passes on the driver.
 *
 * Mappings of a reservation and the contract's checks are vmtrack.h's,
 * shared with the host storage.
 *
 * Aliases (vm_alias, a second mapping of objects vm_map made) are recorded
 * in the destination's tracker like any mapping, so access checks and
 * vm_release see them, and in a list of one record per object aliased
 * (destination and source reservation and offset), which says which
 * mappings are aliases and what they alias. Aliases are rare (made only
 * when the device is out of memory), so the list is scanned; an empty list
 * costs the common calls one test. They use no capacity: bytes_used counts
 * objects, and an alias is a second address of one.
 * Exports: cm_storage_sim_create, cm_storage_sim_state.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/idtable.h"
#include "base/util.h"
#include "storage/storage_internal.h"
#include "storage/vmtrack.h"

enum { E_FREE = 0, E_ALLOC = 1, E_RANGE = 2 };

typedef struct sim_entry {
  uint64_t addr, size;
  uint8_t kind;
  cm__vmtrack vm; /* reservations: their mappings */
} sim_entry;

/* One object mapped a second time: at dst_off of reservation dst_id, the
 * object mapped at src_off of reservation src_id, `piece` bytes. */
typedef struct sim_alias {
  uint64_t dst_id, dst_off, src_id, src_off, piece;
} sim_alias;

typedef struct sim_ctx {
  sim_entry *v;
  uint64_t len, cap; /* v[0] unused */
  uint64_t next_addr;
  uint64_t capacity, used, used_peak, granularity;
  unsigned gshift;
  bool fail_over;
  uint64_t violations, allocations, reservations, mappings;
  char last_violation[192];
  sim_alias *al; /* live aliases, unordered */
  size_t nal, capal;
} sim_ctx;

static const cm_storage_ops_t k_sim_ops;

static sim_entry *entry(sim_ctx *c, uint64_t id, uint8_t kind) {
  return (id > 0 && id < c->len && c->v[id].kind == kind) ? &c->v[id] : NULL;
}

/* Record a violation: count it, keep its message, and set diag. */
static int violation(sim_ctx *c, cm_diag_t *diag, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int violation(sim_ctx *c, cm_diag_t *diag, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->last_violation, sizeof c->last_violation, fmt, ap);
  va_end(ap);
  c->violations++;
  return cm__diag_set(diag, code, "simulated device refused the call: %s", c->last_violation);
}

static uint64_t sim_alignment(void *ctx) {
  (void)ctx;
  return 512;
}

static int sim_take(sim_ctx *c, uint64_t size, cm_diag_t *diag) {
  if (c->capacity && c->fail_over && (size > c->capacity || c->used > c->capacity - size))
    return cm__diag_set(diag, CM_EOOM,
                        "simulated device out of memory: %" PRIu64 " bytes requested, %" PRIu64
                        " of %" PRIu64 " in use",
                        size, c->used, c->capacity);
  c->used += size;
  if (c->used > c->used_peak) c->used_peak = c->used;
  return CM_OK;
}

static int sim_new_range(sim_ctx *c, uint64_t size, uint64_t align, uint8_t kind,
                         uint64_t *out_id, cm_diag_t *diag) {
  uint64_t base, span;
  if (!cm__round_up(c->next_addr, align, &base) || !cm__round_up(size ? size : 1, 512, &span) ||
      base > UINT64_MAX - span)
    return cm__diag_set(diag, CM_ETOOBIG, "simulated device: %" PRIu64 " bytes exceed the address space",
                        size);
  uint64_t id;
  sim_entry *nv = cm__id_reserve(c->v, &c->len, &c->cap, sizeof *c->v, &id); /* base/idtable.h */
  if (!nv) return cm__diag_set(diag, CM_ENOMEM, "simulated device: out of host memory");
  c->v = nv;
  c->v[id] = (sim_entry){.addr = base, .size = size, .kind = kind};
  c->next_addr = base + span;
  *out_id = id;
  return CM_OK;
}

static int sim_alloc(void *ctx, uint64_t size, uint64_t *out_id, cm_diag_t *diag) {
  sim_ctx *c = ctx;
  int rc = sim_take(c, size, diag);
  if (rc) return rc;
  rc = sim_new_range(c, size, 512, E_ALLOC, out_id, diag);
  if (rc) {
    c->used -= size;
    return rc;
  }
  c->allocations++;
  return CM_OK;
}

static void sim_dealloc(void *ctx, uint64_t id) {
  sim_ctx *c = ctx;
  sim_entry *e = entry(c, id, E_ALLOC);
  if (!e) {
    (void)violation(c, NULL, CM_EHANDLE, "free of StorageId(%" PRIu64 "), which is not a live allocation", id);
    return;
  }
  c->used -= e->size;
  c->allocations--;
  e->kind = E_FREE;
}

static int sim_get(void *ctx, uint64_t id, uint64_t offset, uint64_t size, cm_resource_t *out,
                   cm_diag_t *diag) {
  sim_ctx *c = ctx;
  sim_entry *e = entry(c, id, E_ALLOC);
  if (!e) e = entry(c, id, E_RANGE);
  if (!e) return cm__diag_set(diag, CM_EHANDLE, "StorageId(%" PRIu64 ") in the sim storage", id);
  if (offset > e->size || size > e->size - offset)
    return cm__diag_set(diag, CM_EINVAL,
                        "range [%" PRIu64 ", +%" PRIu64 ") outside StorageId(%" PRIu64 ") of %" PRIu64
                        " bytes",
                        offset, size, id, e->size);
  out->addr = e->addr + offset;
  out->host = NULL;
  out->size = size;
  return CM_OK;
}

static void sim_release(void *ctx) {
  sim_ctx *c = ctx;
  for (uint64_t i = 1; i < c->len; i++) cm__vmtrack_free(&c->v[i].vm);
  free(c->al);
  free(c->v);
  free(c);
}

static uint64_t sim_granularity(void *ctx) { return ((sim_ctx *)ctx)->granularity; }

static int sim_vm_reserve(void *ctx, uint64_t size, uint64_t *out_id, cm_diag_t *diag) {
  sim_ctx *c = ctx;
  char why[CM__VMTRACK_WHY];
  if (cm__vmtrack_check_reserve(size, c->gshift, why, sizeof why) != CM_OK)
    return violation(c, diag, CM_EINVAL, "%s", why);
  int rc = sim_new_range(c, size, c->granularity, E_RANGE, out_id, diag);
  if (rc == CM_OK) {
    cm__vmtrack_init(&c->v[*out_id].vm, size, c->gshift);
    c->reservations++;
  }
  return rc;
}

static int sim_vm_map(void *ctx, uint64_t id, uint64_t off, uint64_t size, uint64_t piece,
                      cm_diag_t *diag) {
  sim_ctx *c = ctx;
  sim_entry *e = entry(c, id, E_RANGE);
  if (!e)
    return violation(c, diag, CM_EHANDLE, "map into StorageId(%" PRIu64 "), which is not a reservation",
                     id);
  char why[CM__VMTRACK_WHY];
  if (cm__vmtrack_check_map(&e->vm, off, size, piece, why, sizeof why) != CM_OK)
    return violation(c, diag, CM_EINVAL, "%s", why);
  int rc = sim_take(c, size, diag);
  if (rc) return rc;
  uint64_t objects = 0;
  if (cm__vmtrack_commit_map(&e->vm, off, size, piece, &objects) != CM_OK) {
    c->used -= size;
    return cm__diag_set(diag, CM_ENOMEM, "simulated device: out of host memory");
  }
  c->mappings += objects;
  return CM_OK;
}

/* Is `off` inside [lo, lo+size)? */
static bool within(uint64_t off, uint64_t lo, uint64_t size) { return off >= lo && off - lo < size; }

/* The aliases whose destination (dst true) or source lies in [off,
 * off+size) of reservation id: their number, and the first in *first (NULL
 * when none). */
static uint64_t aliases_at(const sim_ctx *c, bool dst, uint64_t id, uint64_t off, uint64_t size,
                           const sim_alias **first) {
  uint64_t n = 0;
  *first = NULL;
  for (size_t i = 0; i < c->nal; i++) {
    const sim_alias *a = &c->al[i];
    if (dst ? (a->dst_id == id && within(a->dst_off, off, size))
            : (a->src_id == id && within(a->src_off, off, size))) {
      if (!n++) *first = a;
    }
  }
  return n;
}

static int sim_vm_alias(void *ctx, uint64_t dst_id, uint64_t dst_off, uint64_t src_id,
                        uint64_t src_off, uint64_t size, uint64_t piece, cm_diag_t *diag) {
  sim_ctx *c = ctx;
  sim_entry *d = entry(c, dst_id, E_RANGE), *src = entry(c, src_id, E_RANGE);
  if (!d)
    return violation(c, diag, CM_EHANDLE,
                     "alias into StorageId(%" PRIu64 "), which is not a reservation", dst_id);
  if (!src)
    return violation(c, diag, CM_EHANDLE,
                     "alias of StorageId(%" PRIu64 "), which is not a reservation", src_id);
  char why[CM__VMTRACK_WHY];
  if (cm__vmtrack_check_alias_source(&src->vm, src_off, size, piece, why, sizeof why) != CM_OK)
    return violation(c, diag, CM_EINVAL, "alias of StorageId(%" PRIu64 "): %s", src_id, why);
  const sim_alias *a;
  if (aliases_at(c, true, src_id, src_off, size, &a))
    return violation(c, diag, CM_EINVAL,
                     "cannot alias [%" PRIu64 ", +%" PRIu64 ") of StorageId(%" PRIu64
                     "): offset %" PRIu64 " is itself an alias (of offset %" PRIu64
                     " of StorageId(%" PRIu64 ")), and an alias is not aliased",
                     src_off, size, src_id, a->dst_off, a->src_off, a->src_id);
  if (cm__vmtrack_check_map(&d->vm, dst_off, size, piece, why, sizeof why) != CM_OK)
    return violation(c, diag, CM_EINVAL, "alias into StorageId(%" PRIu64 "): %s", dst_id, why);
  size_t n = (size_t)(size / piece);
  if (c->nal + n > c->capal) { /* room first: recording must not fail after the map */
    size_t ncap = c->capal ? c->capal : 8;
    while (ncap < c->nal + n) ncap *= 2;
    sim_alias *na = realloc(c->al, ncap * sizeof *na);
    if (!na) return cm__diag_set(diag, CM_ENOMEM, "simulated device: out of host memory");
    c->al = na;
    c->capal = ncap;
  }
  if (cm__vmtrack_commit_map(&d->vm, dst_off, size, piece, NULL) != CM_OK)
    return cm__diag_set(diag, CM_ENOMEM, "simulated device: out of host memory");
  for (size_t k = 0; k < n; k++)
    c->al[c->nal++] = (sim_alias){dst_id, dst_off + k * piece, src_id, src_off + k * piece, piece};
  return CM_OK;
}

/* Unmap aliases [off, off+size) of reservation e (checked whole): their
 * records go, no object is released, nothing is given back to capacity. */
static void unmap_aliases(sim_ctx *c, sim_entry *e, uint64_t id, uint64_t off, uint64_t size,
                          uint64_t piece) {
  for (size_t i = 0; i < c->nal;)
    if (c->al[i].dst_id == id && within(c->al[i].dst_off, off, size)) c->al[i] = c->al[--c->nal];
    else i++;
  (void)cm__vmtrack_commit_unmap(&e->vm, off, size, piece);
}

static int sim_vm_unmap(void *ctx, uint64_t id, uint64_t off, uint64_t size, uint64_t piece,
                        cm_diag_t *diag) {
  sim_ctx *c = ctx;
  sim_entry *e = entry(c, id, E_RANGE);
  if (!e)
    return violation(c, diag, CM_EHANDLE,
                     "unmap in StorageId(%" PRIu64 "), which is not a reservation", id);
  char why[CM__VMTRACK_WHY];
  if (cm__vmtrack_check_unmap(&e->vm, off, size, piece, why, sizeof why) != CM_OK)
    return violation(c, diag, CM_EINVAL, "%s", why);
  if (c->nal) { /* aliases exist: is this one kind, and no original with an alias? */
    const sim_alias *a;
    uint64_t n = size / piece, na = aliases_at(c, true, id, off, size, &a);
    if (na && na != n)
      return violation(c, diag, CM_EINVAL,
                       "cannot unmap [%" PRIu64 ", +%" PRIu64 ") of StorageId(%" PRIu64
                       "): it holds %" PRIu64 " aliases and %" PRIu64
                       " original mappings, and one call unmaps one kind",
                       off, size, id, na, n - na);
    if (na) {
      unmap_aliases(c, e, id, off, size, piece);
      return CM_OK;
    }
    if (aliases_at(c, false, id, off, size, &a))
      return violation(c, diag, CM_EINVAL,
                       "cannot unmap [%" PRIu64 ", +%" PRIu64 ") of StorageId(%" PRIu64
                       "): the mapping at offset %" PRIu64 " has an alias at [%" PRIu64
                       ", +%" PRIu64 ") of StorageId(%" PRIu64 "); unmap the alias first",
                       off, size, id, a->src_off, a->dst_off, a->piece, a->dst_id);
  }
  c->mappings -= cm__vmtrack_commit_unmap(&e->vm, off, size, piece);
  c->used -= size;
  return CM_OK;
}

static int sim_vm_release(void *ctx, uint64_t id, cm_diag_t *diag) {
  sim_ctx *c = ctx;
  sim_entry *e = entry(c, id, E_RANGE);
  if (!e)
    return violation(c, diag, CM_EHANDLE, "free of address range StorageId(%" PRIu64
                     "), which is not a reservation", id);
  char why[CM__VMTRACK_WHY];
  if (cm__vmtrack_check_release(&e->vm, id, why, sizeof why) != CM_OK)
    return violation(c, diag, CM_EINVAL, "%s", why);
  cm__vmtrack_free(&e->vm);
  e->kind = E_FREE;
  c->reservations--;
  return CM_OK;
}

/* May [off, off+size) of id be copied from or to: inside a live allocation,
 * or inside a reservation and mapped? A violation otherwise. */
static int sim_copy_range(sim_ctx *c, uint64_t id, uint64_t off, uint64_t size,
                          const char *role, cm_diag_t *diag) {
  sim_entry *e = entry(c, id, E_ALLOC);
  if (e) {
    if (off > e->size || size > e->size - off)
      return violation(c, diag, CM_EINVAL,
                       "copy %s [%" PRIu64 ", +%" PRIu64 ") outside StorageId(%" PRIu64
                       ") of %" PRIu64 " bytes",
                       role, off, size, id, e->size);
    return CM_OK;
  }
  e = entry(c, id, E_RANGE);
  if (!e)
    return violation(c, diag, CM_EHANDLE,
                     "copy %s StorageId(%" PRIu64 "), which is not a live allocation", role, id);
  char why[CM__VMTRACK_WHY];
  if (cm__vmtrack_check_access(&e->vm, off, size, why, sizeof why) != CM_OK)
    return violation(c, diag, CM_EINVAL, "copy %s StorageId(%" PRIu64 ") %s", role, id, why);
  return CM_OK;
}

/* A device-to-device copy: nothing is copied (there are no bytes), but the
 * ranges are checked as the driver checks them and the bytes counted (by the
 * wrapper). */
static int sim_copy(void *ctx, uint64_t dst_id, uint64_t dst_off, uint64_t src_id,
                    uint64_t src_off, uint64_t size, cm_diag_t *diag) {
  sim_ctx *c = ctx;
  if (size == 0) return violation(c, diag, CM_EINVAL, "copy of 0 bytes");
  int rc = sim_copy_range(c, src_id, src_off, size, "from", diag);
  if (rc == CM_OK) rc = sim_copy_range(c, dst_id, dst_off, size, "to", diag);
  if (rc != CM_OK) return rc;
  uint64_t sa = c->v[src_id].addr + src_off, da = c->v[dst_id].addr + dst_off;
  if (sa < da + size && da < sa + size)
    return violation(c, diag, CM_EINVAL,
                     "copy of %" PRIu64 " bytes between overlapping ranges", size);
  return CM_OK;
}

static int sim_copy_wait(void *ctx, cm_diag_t *diag) {
  (void)ctx;
  (void)diag;
  return CM_OK;
}

/* Free memory as the capacity allows; unknown (0) on an unlimited device, or
 * one that only counts. */
static int sim_mem_info(void *ctx, uint64_t *free_bytes, uint64_t *total_bytes) {
  sim_ctx *c = ctx;
  bool known = c->capacity && c->fail_over;
  *total_bytes = known ? c->capacity : 0;
  *free_bytes = known ? (c->used < c->capacity ? c->capacity - c->used : 0) : 0;
  return CM_OK;
}

static const cm_storage_ops_t k_sim_ops = {
    .name = "sim",
    .mem_info = sim_mem_info,
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
    .copy = sim_copy,
    .copy_wait = sim_copy_wait,
    .vm_alias = sim_vm_alias,
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
  /* a power-of-two granule makes granule indices shifts; others are refused */
  if (granularity & (granularity - 1)) {
    free(c);
    return CM_EINVAL;
  }
  c->gshift = (unsigned)__builtin_ctzll(granularity);
  int rc = cm_storage_create(&k_sim_ops, c, out);
  if (rc) free(c);
  return rc;
}

int cm_storage_sim_state(const cm_storage_t *s, cm_sim_state_t *out) {
  if (!s || !out || s->ops != &k_sim_ops) return CM_EINVAL;
  const sim_ctx *c = s->ctx;
  memset(out, 0, sizeof *out);
  out->violations = c->violations;
  out->allocations = c->allocations;
  out->reservations = c->reservations;
  out->mappings = c->mappings;
  out->bytes_used = c->used;
  out->bytes_used_peak = c->used_peak;
  out->capacity = c->capacity;
  out->aliases = c->nal;
  snprintf(out->last_violation, sizeof out->last_violation, "%s", c->last_violation);
  return CM_OK;
}
