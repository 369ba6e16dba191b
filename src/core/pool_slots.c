/*
 * pool_slots.c - vtable entries shared by the pools that hold one storage
 * allocation per slice (exclusive, direct, persistent; see pool_slots.h).
 */
#include "core/pool_slots.h"

void cm__slots_on_free(cm__pool *p, cm__slice *s) { cm__slots_free_put(cm__slots_of(p), (cm__slot *)s); }

void cm__slots_take_free(cm__pool *p, cm__slice *s) {
  cm__tree_remove(&cm__slots_of(p)->free, &((cm__slot *)s)->node);
}

cm__slice *cm__slots_take_exact(cm__pool *p, uint64_t eff) {
  cm__slots *v = cm__slots_of(p);
  cm__tnode *n = cm__tree_lower_bound(&v->free, eff, 0, 0);
  if (!n || n->k1 != eff) return NULL;
  cm__tree_remove(&v->free, n);
  return &CM__CONTAINER(n, cm__slot, node)->s;
}

int cm__slots_materialize(cm__pool *p, cm__slice *s, cm_diag_t *diag) {
  if (s->mapped) return CM_OK;
  uint64_t id;
  int rc = cm_storage_alloc(cm__pool_storage(p), s->span, &id, diag);
  if (rc)
    return cm__diag_set(diag, CM_EMAPPING,
                        "mapping a lazily reserved slice of %" PRIu64 " bytes failed: %s", s->span,
                        cm_strerror(rc));
  s->storage_id = id;
  s->mapped = 1;
  p->pages_unmapped--;
  return CM_OK;
}

void cm__slots_visit(cm__pool *p, void (*fn)(cm__slice *, void *), void *arg) {
  cm__slots_for_each(cm__slots_of(p), fn, arg);
}

size_t cm__slots_display_usage(cm__pool *p, char *buf, size_t cap, size_t len, const char *sep) {
  char tmp[512];
  cm_usage_display(&p->usage, tmp, sizeof tmp);
  CM__OUT(buf, cap, len, "%s%s", sep, tmp);
  return len;
}
