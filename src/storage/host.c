/*
 * host.c - host storage: real, zero-filled, aligned host memory.
 *
 * Deallocation is immediate. Virtual memory is supported with mmap: a range is
 * reserved PROT_NONE and granules (64 KiB) are made readable/writable by
 * vm_map and discarded by vm_unmap (madvise + PROT_NONE). The calls follow
 * storage.h's contract, the driver's, as strictly as the simulated device
 * does (vmtrack.h, shared with it): overlapping maps, partial unmaps and
 * releases of ranges that still have mappings are refused with CM_EINVAL
 * and change nothing. There is no vm_alias (a second mapping of the same
 * memory): granules are private anonymous memory, which mmap cannot show at
 * a second address; aliasing would need every reservation backed by a
 * shared file instead. cm__storage_has_alias is false for it.
 * Exports: cm_storage_host_create.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "base/util.h"
#include "base/idtable.h"
#include "storage/storage_internal.h"
#include "storage/vmtrack.h"

#define HOST_GSHIFT 16u
#define HOST_GRANULE (1u << HOST_GSHIFT) /* 64 KiB */

typedef struct host_ctx {
  cm__id_table ids;
  uint64_t alignment;
} host_ctx;

static uint64_t host_alignment(void *ctx) { return ((host_ctx *)ctx)->alignment; }

static int host_alloc(void *ctx, uint64_t size, uint64_t *out_id, cm_diag_t *diag) {
  host_ctx *c = ctx;
  void *mem = NULL;
  if (size > (uint64_t)SIZE_MAX / 2)
    return cm__diag_set(diag, CM_ETOOBIG, "host storage: %llu bytes is too big",
                        (unsigned long long)size);
  if (size > 0) {
    if (posix_memalign(&mem, (size_t)c->alignment, (size_t)size) != 0)
      return cm__diag_set(diag, CM_EOOM, "host storage: cannot allocate %llu bytes",
                          (unsigned long long)size);
    memset(mem, 0, (size_t)size);
  }
  uint64_t id = cm__id_new(&c->ids);
  if (!id) {
    free(mem);
    return cm__diag_set(diag, CM_ENOMEM, "host storage: out of host memory");
  }
  cm__id_entry *e = &c->ids.v[id];
  e->addr = (uint64_t)(uintptr_t)mem;
  e->size = size;
  e->mem = mem;
  e->live = 1;
  *out_id = id;
  return CM_OK;
}

static void host_dealloc(void *ctx, uint64_t id) {
  host_ctx *c = ctx;
  cm__id_entry *e = cm__id_get(&c->ids, id);
  if (!e || e->live != 1) return;
  if (e->mem) CM__UNPOISON(e->mem, e->size); /* cached slices may be poisoned */
  free(e->mem);
  e->mem = NULL;
  e->live = 0;
}

static int host_get(void *ctx, uint64_t id, uint64_t offset, uint64_t size, cm_resource_t *out,
                    cm_diag_t *diag) {
  host_ctx *c = ctx;
  cm__id_entry *e = cm__id_get(&c->ids, id);
  if (!e) return cm__diag_set(diag, CM_EHANDLE, "StorageId(%llu) in the host storage",
                              (unsigned long long)id);
  if (offset > e->size || size > e->size - offset)
    return cm__diag_set(diag, CM_EINVAL, "range outside StorageId(%llu)", (unsigned long long)id);
  out->addr = e->addr + offset;
  out->host = e->addr ? (void *)(uintptr_t)(e->addr + offset) : NULL;
  out->size = size;
  return CM_OK;
}

static void host_release(void *ctx) {
  host_ctx *c = ctx;
  for (uint64_t i = 1; i < c->ids.len; i++) {
    cm__id_entry *e = &c->ids.v[i];
    /* Allocations may hold poisoned (cached) slices. VM ranges are not
     * unpoisoned here: poison lives only in mapped granules, and vm_unmap
     * unpoisons what it unmaps (unpoisoning a whole reserved range would
     * write size/8 bytes of shadow memory). */
    if (e->live == 1 && e->mem) CM__UNPOISON(e->mem, e->size);
    if (e->live == 1) free(e->mem);
    if (e->live == 2) {
      munmap(e->mem, (size_t)e->size);
      cm__vmtrack_free(e->aux);
      free(e->aux);
    }
  }
  free(c->ids.v);
  free(c);
}

static uint64_t host_granularity(void *ctx) {
  (void)ctx;
  return HOST_GRANULE;
}

static int host_vm_reserve(void *ctx, uint64_t size, uint64_t *out_id, cm_diag_t *diag) {
  host_ctx *c = ctx;
  char why[CM__VMTRACK_WHY];
  if (cm__vmtrack_check_reserve(size, HOST_GSHIFT, why, sizeof why) != CM_OK)
    return cm__diag_set(diag, CM_EINVAL, "host storage refused the call: %s", why);
  if (size > (uint64_t)SIZE_MAX / 2)
    return cm__diag_set(diag, CM_EINVAL,
                        "host storage refused the call: cannot reserve %llu bytes: larger than "
                        "half the address space",
                        (unsigned long long)size);
  cm__vmtrack *t = malloc(sizeof *t);
  if (!t) return cm__diag_set(diag, CM_ENOMEM, "host storage: out of host memory");
  void *mem = mmap(NULL, (size_t)size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mem == MAP_FAILED) {
    free(t);
    return cm__diag_set(diag, CM_EOOM, "host vm_reserve: cannot reserve %llu bytes",
                        (unsigned long long)size);
  }
  uint64_t id = cm__id_new(&c->ids);
  if (!id) {
    munmap(mem, (size_t)size);
    free(t);
    return cm__diag_set(diag, CM_ENOMEM, "host storage: out of host memory");
  }
  cm__vmtrack_init(t, size, HOST_GSHIFT);
  cm__id_entry *e = &c->ids.v[id];
  e->addr = (uint64_t)(uintptr_t)mem;
  e->size = size;
  e->mem = mem;
  e->aux = t;
  e->live = 2;
  *out_id = id;
  return CM_OK;
}

static cm__id_entry *host_range(host_ctx *c, uint64_t id, const char *what, cm_diag_t *diag) {
  cm__id_entry *e = cm__id_get(&c->ids, id);
  if (!e || e->live != 2)
    cm__diag_set(diag, CM_EHANDLE,
                 "host storage refused the call: %s StorageId(%llu), which is not a reservation",
                 what, (unsigned long long)id);
  return e && e->live == 2 ? e : NULL;
}

static int host_vm_map(void *ctx, uint64_t id, uint64_t off, uint64_t size, uint64_t piece,
                       cm_diag_t *diag) {
  host_ctx *c = ctx;
  cm__id_entry *e = host_range(c, id, "map into", diag);
  if (!e) return CM_EHANDLE;
  char why[CM__VMTRACK_WHY];
  if (cm__vmtrack_check_map(e->aux, off, size, piece, why, sizeof why) != CM_OK)
    return cm__diag_set(diag, CM_EINVAL, "host storage refused the call: %s", why);
  char *p = (char *)e->mem + off;
  if (mprotect(p, (size_t)size, PROT_READ | PROT_WRITE) != 0)
    return cm__diag_set(diag, CM_EOOM, "host vm_map: mprotect failed");
  if (cm__vmtrack_commit_map(e->aux, off, size, piece, NULL) != CM_OK) {
    (void)mprotect(p, (size_t)size, PROT_NONE); /* nothing this call made stays mapped */
    return cm__diag_set(diag, CM_ENOMEM, "host storage: out of host memory");
  }
  return CM_OK;
}

static int host_vm_unmap(void *ctx, uint64_t id, uint64_t off, uint64_t size, uint64_t piece,
                         cm_diag_t *diag) {
  host_ctx *c = ctx;
  cm__id_entry *e = host_range(c, id, "unmap in", diag);
  if (!e) return CM_EHANDLE;
  char why[CM__VMTRACK_WHY];
  if (cm__vmtrack_check_unmap(e->aux, off, size, piece, why, sizeof why) != CM_OK)
    return cm__diag_set(diag, CM_EINVAL, "host storage refused the call: %s", why);
  CM__UNPOISON((char *)e->mem + off, size);
  if (madvise((char *)e->mem + off, (size_t)size, MADV_DONTNEED) != 0 ||
      mprotect((char *)e->mem + off, (size_t)size, PROT_NONE) != 0)
    return cm__diag_set(diag, CM_ESTORAGE, "host vm_unmap: madvise/mprotect failed");
  (void)cm__vmtrack_commit_unmap(e->aux, off, size, piece);
  return CM_OK;
}

static int host_vm_release(void *ctx, uint64_t id, cm_diag_t *diag) {
  host_ctx *c = ctx;
  cm__id_entry *e = host_range(c, id, "free of address range", diag);
  if (!e) return CM_EHANDLE;
  cm__vmtrack *t = e->aux;
  char why[CM__VMTRACK_WHY];
  if (cm__vmtrack_check_release(t, id, why, sizeof why) != CM_OK)
    return cm__diag_set(diag, CM_EINVAL, "host storage refused the call: %s", why);
  munmap(e->mem, (size_t)e->size); /* its mapped granules were unmapped (and unpoisoned) */
  cm__vmtrack_free(t);
  free(t);
  e->aux = NULL;
  e->live = 0;
  return CM_OK;
}

/* The bytes at [off, off+size) of id into *out, when they may be copied:
 * inside a live allocation, or inside a reservation and mapped. Else the
 * status with diag. */
static int host_copy_range(host_ctx *c, uint64_t id, uint64_t off, uint64_t size,
                           const char *role, char **out, cm_diag_t *diag) {
  cm__id_entry *e = cm__id_get(&c->ids, id);
  if (!e)
    return cm__diag_set(diag, CM_EHANDLE,
                        "host storage refused the copy %s StorageId(%llu): unknown id", role,
                        (unsigned long long)id);
  char why[CM__VMTRACK_WHY] = "";
  if (e->live == 2 ? cm__vmtrack_check_access(e->aux, off, size, why, sizeof why) != CM_OK
                   : off > e->size || size > e->size - off)
    return cm__diag_set(diag, CM_EINVAL, "host storage refused the copy %s StorageId(%llu): %s",
                        role, (unsigned long long)id,
                        why[0] ? why : "range outside the allocation");
  *out = (char *)e->mem + off;
  return CM_OK;
}

/* Copies happen at once (host memory); the wait has nothing to wait for. */
static int host_copy(void *ctx, uint64_t dst_id, uint64_t dst_off, uint64_t src_id,
                     uint64_t src_off, uint64_t size, cm_diag_t *diag) {
  host_ctx *c = ctx;
  if (size == 0) return cm__diag_set(diag, CM_EINVAL, "host storage refused a copy of 0 bytes");
  char *src = NULL, *dst = NULL;
  int rc = host_copy_range(c, src_id, src_off, size, "from", &src, diag);
  if (rc == CM_OK) rc = host_copy_range(c, dst_id, dst_off, size, "to", &dst, diag);
  if (rc != CM_OK) return rc;
  if (src < dst + size && dst < src + size)
    return cm__diag_set(diag, CM_EINVAL,
                        "host storage refused a copy of %llu bytes between overlapping ranges",
                        (unsigned long long)size);
  memcpy(dst, src, (size_t)size);
  return CM_OK;
}

static int host_copy_wait(void *ctx, cm_diag_t *diag) {
  (void)ctx;
  (void)diag;
  return CM_OK;
}

/* Under ASan: poisoning a range writes size/8 bytes of shadow memory, so only
 * ranges up to HOST_POISON_MAX are poisoned; a larger range made addressable
 * is scanned and unpoisoned only where some smaller range left poison. */
#define HOST_POISON_MAX (1ull << 20)
static void host_poison(void *ctx, uint64_t id, uint64_t off, uint64_t size, bool poison) {
#ifdef CM_ASAN
  host_ctx *c = ctx;
  cm__id_entry *e = cm__id_get(&c->ids, id);
  if (!e || !e->mem || size == 0 || off > e->size || size > e->size - off) return;
  char *ptr = (char *)e->mem + off;
  if (poison) {
    if (size <= HOST_POISON_MAX) CM__POISON(ptr, size);
  } else if (size <= HOST_POISON_MAX) {
    CM__UNPOISON(ptr, size);
  } else {
    char *first = __asan_region_is_poisoned(ptr, (size_t)size);
    if (first) CM__UNPOISON(first, size - (uint64_t)(first - ptr));
  }
#else
  (void)ctx;
  (void)id;
  (void)off;
  (void)size;
  (void)poison;
#endif
}

static const cm_storage_ops_t k_host_ops = {
    .poison = host_poison,
    .name = "host",
    .alignment = host_alignment,
    .alloc = host_alloc,
    .dealloc = host_dealloc,
    .get = host_get,
    .release = host_release,
    .vm_granularity = host_granularity,
    .vm_reserve = host_vm_reserve,
    .vm_map = host_vm_map,
    .vm_unmap = host_vm_unmap,
    .vm_release = host_vm_release,
    .copy = host_copy,
    .copy_wait = host_copy_wait,
};


int cm_storage_host_create(uint64_t alignment, cm_storage_t **out) {
  if (!out) return CM_EINVAL;
  *out = NULL;
  if (alignment == 0) alignment = 64;
  if (alignment & (alignment - 1)) return CM_EINVAL;
  if (alignment < sizeof(void *)) alignment = sizeof(void *);
  host_ctx *c = calloc(1, sizeof *c);
  if (!c) return CM_ENOMEM;
  c->alignment = alignment;
  int rc = cm_storage_create(&k_host_ops, c, out);
  if (rc) free(c);
  return rc;
}
