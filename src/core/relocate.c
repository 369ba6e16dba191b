/*
 * relocate.c - relocation of live data (docs/relocation.md): plan, copy,
 * commit, with nothing lost when a copy is refused or the wait fails.
 *
 * Plan. Each dynamic pool with a reloc_plan entry (the arena, the adaptive
 * pool) picks its sparse units and reserves a target slice for every live
 * slice on them (pool.h). The manager marks each target used with its
 * source's size, so the pools' usage stays exact while both exist.
 * Copy. Every move whose source has bytes (a zero-byte slice has none) is
 * copied through the storage (cm_storage_copy), then one wait
 * (cm_storage_copy_wait). A refused copy or a failed wait abandons: the
 * targets are freed as any released slice is, the sources were never
 * touched.
 * Commit. The source's descriptor - the identity every handle and binding
 * of the allocation refers to - and the target's unreferenced one change
 * places, so handles now resolve to the target; the source, now holding
 * the unreferenced descriptor, is freed as any released slice is (the
 * pools give back what empties: an adaptive pool's outdated pages at once,
 * the arena's granules at its next trim). Slices are located through their
 * pointers, which stay valid while pages are renumbered.
 * No replanning: a relocation that moved nothing records the pools' shape
 * (reserved bytes, pages, outdated pages, guards); a trigger that finds the
 * same shape plans nothing.
 * Boundary: the manager checks the call and drains the freed inbox first
 * (manager.c, cm_manager_relocate); this file calls nothing in manager.c
 * (manager_internal.h's inline helpers only).
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core/manager_internal.h"

/* A mix of what makes the pools' shape: reserved bytes, pages (outdated
 * ones included) and guards. */
static uint64_t shape_of(cm_manager_t *m) {
  uint64_t h = m->reserved_total ^ (m->guards * 0x9E3779B97F4A7C15ull);
  for (size_t i = 0; i < m->npools; i++) {
    cm__pool *p = m->pools[i];
    cm_pool_report_t r;
    memset(&r, 0, sizeof r);
    if (p->vt->report) p->vt->report(p, &r);
    h = (h ^ p->pages ^ (r.outdated_pages << 32) ^ r.outdated_pools) * 0x100000001B3ull;
  }
  return h;
}

/* Free slice s of pool p as a release does, and fold the reserved change. */
static void free_slice(cm_manager_t *m, cm__pool *p, cm__slice *s) {
  cm__pool_mark_free(p, s);
  p->vt->on_free(p, s);
  cm__manager_take_reserved(m, p);
}

/* Plan every pool's moves into mv; the targets are marked used. */
static int plan(cm_manager_t *m, cm_relocate_reason_t why, cm__moves *mv) {
  for (size_t i = 0; i < m->npools; i++) {
    cm__pool *p = m->pools[i];
    if (!p->vt->reloc_plan) continue;
    size_t from = mv->n;
    int rc = p->vt->reloc_plan(p, why, mv);
    cm__manager_take_reserved(m, p);
    for (size_t k = from; k < mv->n; k++) {
      cm__slice *b = mv->v[k].dst;
      if (rc == CM_OK && !b->desc && !cm__slice_new_desc(p, b)) rc = CM_ENOMEM;
      cm__pool_mark_used(p, b, mv->v[k].src->size);
    }
    if (rc != CM_OK) return rc;
  }
  return CM_OK;
}

/* Copy every move's bytes, then wait once. */
static int copy_all(cm_manager_t *m, const cm__moves *mv, uint64_t *bytes, cm_diag_t *diag) {
  *bytes = 0;
  for (size_t k = 0; k < mv->n; k++) {
    const cm__slice *a = mv->v[k].src, *b = mv->v[k].dst;
    if (a->size == 0 || !a->mapped) continue; /* nothing there to copy */
    int rc = cm_storage_copy(m->storage, b->storage_id, b->offset, a->storage_id, a->offset,
                             a->size, diag);
    if (rc != CM_OK) return rc;
    *bytes += a->size;
  }
  return cm_storage_copy_wait(m->storage, diag);
}

/* Abandon: every target is freed; the sources never changed. */
static void abandon(cm_manager_t *m, const cm__moves *mv) {
  for (size_t k = mv->n; k-- > 0;) {
    cm__slice *b = mv->v[k].dst;
    free_slice(m, cm__manager_pool_of(m, b), b);
  }
}

/* Commit one move: the allocation's descriptor goes to the target, the
 * target's unreferenced one to the source, which is then freed. */
static void commit_one(cm_manager_t *m, cm__slice *a, cm__slice *b) {
  cm_desc_t *da = a->desc, *db = b->desc;
  b->desc = da;
  da->slice = b;
  a->desc = db;
  db->slice = a;
  b->cursor = a->cursor;
  b->touched = a->touched;
  b->guards = a->guards; /* 0: a guarded slice never moves */
  free_slice(m, cm__manager_pool_of(m, a), a);
}

static int relocate_run(cm_manager_t *m, cm_relocate_reason_t why, cm_relocate_stats_t *st,
                        cm_diag_t *diag) {
  uint64_t shape = shape_of(m);
  if (m->reloc_idle && shape == m->reloc_shape) {
    st->skipped = 1;
    return CM_OK;
  }
  cm__moves mv = {0};
  uint64_t before = m->reserved_total;
  st->runs = 1;
  int rc = plan(m, why, &mv);
  if (rc == CM_OK && mv.n) rc = copy_all(m, &mv, &st->bytes_copied, diag);
  if (rc != CM_OK) {
    abandon(m, &mv);
    st->abandoned = 1;
    st->bytes_copied = 0;
    free(mv.v);
    return rc;
  }
  for (size_t k = 0; k < mv.n; k++) commit_one(m, mv.v[k].src, mv.v[k].dst);
  st->moves = mv.n;
  free(mv.v);
  st->bytes_released = before > m->reserved_total ? before - m->reserved_total : 0;
  m->reloc_idle = mv.n == 0;
  m->reloc_shape = m->reloc_idle ? shape_of(m) : 0;
  return CM_OK;
}

static void stats_add(cm_relocate_stats_t *t, const cm_relocate_stats_t *s) {
  t->runs += s->runs;
  t->moves += s->moves;
  t->bytes_copied += s->bytes_copied;
  t->abandoned += s->abandoned;
  t->skipped += s->skipped;
  t->bytes_released += s->bytes_released;
}

int cm__relocate(cm_manager_t *m, cm_relocate_reason_t why, cm_relocate_stats_t *out,
                 cm_diag_t *diag) {
  cm_relocate_stats_t st;
  memset(&st, 0, sizeof st);
  int rc = relocate_run(m, why, &st, diag);
  stats_add(&m->reloc, &st);
  if (out) *out = st;
  if (st.moves && LOG_ON(m, CM_LOG_FULL))
    cm_logger_printf(m->logger, CM_LOG_FULL,
                     "[%s] Relocated %" PRIu64 " allocations, %" PRIu64 " bytes copied",
                     m->name, st.moves, st.bytes_copied);
  return rc;
}
