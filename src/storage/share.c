/*
 * share.c - cm_storage_share_create (cubemem/storage.h): a share of a
 * device storage, so that several managers draw on one device (one
 * capacity, one address space) while each share's wrapper counts its own
 * manager's calls.
 *
 * A share's context is the device storage. Every operation forwards to the
 * device's backend (its ops and context) directly, not through the device's
 * wrapper: the device's own counters do not move, each share's do. The
 * optional operations are forwarded when the device's backend has them and
 * absent otherwise, so the wrapper and the manager see the same capabilities
 * through a share as through the device (virtual memory, aliases, copies); events,
 * poisoning, memory information and timing answer as a storage without them
 * would. Time by driver call (call_times) is not forwarded: it is the
 * device's, and would count once per share.
 *
 * Invariants: a share never owns the device; releasing it frees the share
 * only, and what its manager gave back is what the device holds less.
 * Exports: cm_storage_share_create.
 */
#include <stdlib.h>

#include "base/util.h"
#include "storage/storage_internal.h"

#define OPS(c) (((cm_storage_t *)(c))->ops)
#define CTX(c) (((cm_storage_t *)(c))->ctx)

static uint64_t sh_alignment(void *c) { return OPS(c)->alignment ? OPS(c)->alignment(CTX(c)) : 1; }
static int sh_alloc(void *c, uint64_t size, uint64_t *id, cm_diag_t *d) {
  return OPS(c)->alloc(CTX(c), size, id, d);
}
static void sh_dealloc(void *c, uint64_t id) { OPS(c)->dealloc(CTX(c), id); }
static int sh_flush(void *c) { return OPS(c)->flush ? OPS(c)->flush(CTX(c)) : CM_OK; }
static int sh_get(void *c, uint64_t id, uint64_t off, uint64_t size, cm_resource_t *out,
                  cm_diag_t *d) {
  return OPS(c)->get(CTX(c), id, off, size, out, d);
}
static void sh_release(void *c) { (void)c; /* the device stays the caller's */ }
static int sh_ev_record(void *c, void **ev, cm_diag_t *d) {
  if (!OPS(c)->event_record) {
    *ev = NULL;
    return CM_OK;
  }
  return OPS(c)->event_record(CTX(c), ev, d);
}
static int sh_ev_query(void *c, void *ev) {
  return OPS(c)->event_query ? OPS(c)->event_query(CTX(c), ev) : 1;
}
static int sh_ev_sync(void *c, void *ev) {
  return OPS(c)->event_sync ? OPS(c)->event_sync(CTX(c), ev) : CM_OK;
}
static void sh_ev_destroy(void *c, void *ev) {
  if (OPS(c)->event_destroy) OPS(c)->event_destroy(CTX(c), ev);
}
static uint64_t sh_gran(void *c) { return OPS(c)->vm_granularity(CTX(c)); }
static int sh_vm_reserve(void *c, uint64_t size, uint64_t *id, cm_diag_t *d) {
  return OPS(c)->vm_reserve(CTX(c), size, id, d);
}
static int sh_vm_map(void *c, uint64_t id, uint64_t off, uint64_t size, uint64_t piece,
                     cm_diag_t *d) {
  return OPS(c)->vm_map(CTX(c), id, off, size, piece, d);
}
static int sh_vm_unmap(void *c, uint64_t id, uint64_t off, uint64_t size, uint64_t piece,
                       cm_diag_t *d) {
  return OPS(c)->vm_unmap(CTX(c), id, off, size, piece, d);
}
static int sh_vm_release(void *c, uint64_t id, cm_diag_t *d) {
  return OPS(c)->vm_release(CTX(c), id, d);
}
static int sh_vm_alias(void *c, uint64_t dst_id, uint64_t dst_off, uint64_t src_id,
                       uint64_t src_off, uint64_t size, uint64_t piece, cm_diag_t *d) {
  return OPS(c)->vm_alias(CTX(c), dst_id, dst_off, src_id, src_off, size, piece, d);
}
static void sh_poison(void *c, uint64_t id, uint64_t off, uint64_t size, bool p) {
  if (OPS(c)->poison) OPS(c)->poison(CTX(c), id, off, size, p);
}
static int sh_mem_info(void *c, uint64_t *f, uint64_t *t) {
  if (!OPS(c)->mem_info) return CM_ENOTSUP;
  return OPS(c)->mem_info(CTX(c), f, t);
}
static void sh_set_timing(void *c, bool on) {
  if (OPS(c)->set_timing) OPS(c)->set_timing(CTX(c), on);
}
static int sh_copy(void *c, uint64_t dst_id, uint64_t dst_off, uint64_t src_id, uint64_t src_off,
                   uint64_t size, cm_diag_t *d) {
  return OPS(c)->copy(CTX(c), dst_id, dst_off, src_id, src_off, size, d);
}
static int sh_copy_wait(void *c, cm_diag_t *d) { return OPS(c)->copy_wait(CTX(c), d); }

/* The shares' operations, with (VM) or without virtual memory, with (AL) or
 * without aliases (VM only) and with (CP) or without copies: the wrapper
 * reads a NULL op as "not supported". */
#define SHARE_OPS(VM, AL, CP)                                                                 \
  {.name = "share", .alignment = sh_alignment, .alloc = sh_alloc, .dealloc = sh_dealloc,      \
   .flush = sh_flush, .get = sh_get, .release = sh_release, .event_record = sh_ev_record,     \
   .event_query = sh_ev_query, .event_sync = sh_ev_sync, .event_destroy = sh_ev_destroy,      \
   .vm_granularity = VM ? sh_gran : NULL, .vm_reserve = VM ? sh_vm_reserve : NULL,            \
   .vm_map = VM ? sh_vm_map : NULL, .vm_unmap = VM ? sh_vm_unmap : NULL,                      \
   .vm_release = VM ? sh_vm_release : NULL, .poison = sh_poison, .mem_info = sh_mem_info,     \
   .set_timing = sh_set_timing, .copy = CP ? sh_copy : NULL,                                  \
   .copy_wait = CP ? sh_copy_wait : NULL, .vm_alias = AL ? sh_vm_alias : NULL}
static const cm_storage_ops_t share_ops[3][2] = {
    {SHARE_OPS(0, 0, 0), SHARE_OPS(0, 0, 1)}, /* no VM */
    {SHARE_OPS(1, 0, 0), SHARE_OPS(1, 0, 1)}, /* VM */
    {SHARE_OPS(1, 1, 0), SHARE_OPS(1, 1, 1)}, /* VM and aliases */
};

int cm_storage_share_create(cm_storage_t *device, cm_storage_t **out, cm_diag_t *diag) {
  if (!out) return cm__diag_set(diag, CM_EINVAL, "cm_storage_share_create: out is NULL");
  *out = NULL;
  if (!device) return cm__diag_set(diag, CM_EINVAL, "cm_storage_share_create: device is NULL");
  bool cp = cm_storage_can_copy(device);
  int vm = cm__storage_has_alias(device) ? 2 : cm_storage_has_vm(device) ? 1 : 0;
  int rc = cm_storage_create(&share_ops[vm][cp], device, out);
  if (rc != CM_OK)
    return cm__diag_set(diag, rc, "out of host memory creating a share of the %s storage",
                        cm_storage_name(device));
  if (device->timing) cm_storage_set_timing(*out, true);
  return CM_OK;
}
