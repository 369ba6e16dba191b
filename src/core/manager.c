/*
 * manager.c - the memory manager (spec §5): routing, handles, modes and
 * persistent/dedicated windows, cleanup, install_pools, capture, dry runs,
 * lookups.
 *
 * Algorithm. reserve(size) drains the freed inbox (slices released from any
 * thread since the last call), runs the periodic cleanup, then routes: the
 * persistent pool when the mode or the size-match rule says so, else the
 * dynamic pools in order, first accepting pool with room wins, capped pools
 * spill to later accepting pools (one warning per pool per layout). Every
 * step is O(1) or O(log n) in live slices: pools keep free structures
 * (see pool_*.c); releases reach the manager through the freed inbox, so no
 * call walks every slice (cm_manager_check and the displays do).
 *
 * Invariants (checked by cm_manager_check):
 *  M1 reserved_total == sum of pools' usage.bytes_reserved
 *  M2 each pool's incremental usage == usage recomputed from its structures
 *  M3 every used slice's descriptor points back at the slice
 * Boundary: pools are built with the manager's cm__pool_ctx and keep their
 * own accounting (pool.h); the manager marks slices used / free through
 * pool.h's helpers and derives its totals from the pools (take_reserved).
 * Locking: none inside; the caller serialises manager calls (memory.h).
 * Exports: cm_manager_* (public), cm__manager_drain (manager_internal.h).
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/layout.h"
#include "core/manager_internal.h"
#include "storage/storage_internal.h"

/* ---- pools ----------------------------------------------------------------- */

/* Every pool by number: the dynamic ones, then the persistent and the
 * dedicated pool (i < npools + 2). */
static cm__pool *pool_at(const cm_manager_t *m, size_t i) {
  if (i < m->npools) return m->pools[i];
  return i == m->npools ? m->persistent : m->dedicated;
}

/* Destroy pool p, taking its reserved bytes out of the totals. */
static void drop_pool(cm_manager_t *m, cm__pool *p) {
  cm__manager_take_reserved(m, p);
  m->reserved_total -= p->usage.bytes_reserved;
  p->vt->destroy(p);
}

size_t cm_manager_display(cm_manager_t *m, char *buf, size_t cap) {
  if (m) cm__manager_drain(m); /* show slices released since the last call as free */
  return cm__manager_render(m, buf, cap);
}

/* ---- logging ----------------------------------------------------------------- */


static void log_display(cm_manager_t *m, cm_log_level_t lvl, const char *prefix) {
  size_t need = cm_manager_display(m, NULL, 0);
  size_t plen = strlen(prefix);
  char *buf = malloc(plen + need + 1);
  if (!buf) {
    cm_logger_write(m->logger, lvl, prefix);
    return;
  }
  memcpy(buf, prefix, plen);
  cm_manager_display(m, buf + plen, need + 1);
  cm_logger_write(m->logger, lvl, buf);
  free(buf);
}

static void log_pools(cm_manager_t *m) {
  if (!LOG_ON(m, CM_LOG_BASIC)) return;
  size_t cap = 256 + m->npools * 256, len = 0;
  char *buf = malloc(cap);
  if (!buf) return;
  buf[0] = 0;
  for (size_t i = 0; i < m->npools; i++) {
    char opts[192];
    cm_pools_format(&m->pools[i]->opts, 1, opts, sizeof opts);
    int n = snprintf(buf + len, cap - len, "[%s] Using memory pool: \n %s\n", m->name, opts);
    if (n > 0 && (size_t)n < cap - len) len += (size_t)n;
  }
  cm_logger_write(m->logger, CM_LOG_BASIC, buf);
  free(buf);
}

/* ---- slices handed out / freed ----------------------------------------------- */

/* A guarded slice is freed: its guards go with it. */
static __attribute__((noinline, cold)) void guard_drop(cm_manager_t *m, cm__pool *p, cm__slice *s) {
  if (m->relocate && p->vt->guard) p->vt->guard(p, s, -(int64_t)s->guards);
  m->guards -= s->guards < m->guards ? s->guards : m->guards;
  s->guards = 0;
}

void cm__manager_drain(cm_manager_t *m) {
  cm_desc_t *d = cm__inbox_take(&m->inbox);
  while (d) {
    cm_desc_t *next = d->next;
    cm__slice *s = d->slice;
    if (cm__desc_drained(d) && s && s->used) {
      cm__pool *p = cm__manager_pool_of(m, s);
      if (__builtin_expect(s->used & CM__USED_GUARDED, 0)) guard_drop(m, p, s);
      cm__pool_mark_free(p, s);
      p->vt->on_free(p, s);
      /* a release may give a page back (an adaptive pool's outdated ones) */
      if (__builtin_expect(p->reserved_mark != p->usage.bytes_reserved, 0)) cm__manager_take_reserved(m, p);
    }
    d = next;
  }
}

/* A new user handle on slice s (used or known-free). */
static int slice_handle(cm_manager_t *m, cm__pool *p, cm__slice *s, cm_handle_t *out) {
  if (!s->desc && !cm__slice_new_desc(p, s)) return CM_ENOMEM;
  if (!s->used) {
    p->vt->take_free(p, s);
    cm__manager_take_reserved(m, p);
    cm__pool_mark_used(p, s, s->size);
  }
  *out = cm__desc_take_handle(s->desc);
  return CM_OK;
}

static int primed_push(cm_manager_t *m, cm_handle_t h) {
  if (m->nprimed == m->capprimed) {
    size_t nc = m->capprimed ? m->capprimed * 2 : 16;
    cm_handle_t *nv = realloc(m->primed, nc * sizeof *nv);
    if (!nv) return CM_ENOMEM;
    m->primed = nv;
    m->capprimed = nc;
  }
  m->primed[m->nprimed++] = h;
  return CM_OK;
}

static void primed_release(cm_manager_t *m) {
  for (size_t i = 0; i < m->nprimed; i++) cm_handle_release(m->primed[i]);
  m->nprimed = 0;
}

/* Capture touch of a persistent hand-out (spec §5.8). */
static void touch(cm_manager_t *m, cm__slice *s, cm_handle_t h) {
  if (!m->capturing) return;
  s->touched = 1;
  if (m->priming) {
    cm_handle_t c = cm_handle_clone(h);
    if (primed_push(m, c) != CM_OK) cm_handle_release(c);
  }
}

/* Hand out slice s of pool p (fresh from try_reserve/alloc) for `size`;
 * inline in the reservation path, where a call costs more than its body. */
static inline __attribute__((always_inline)) int hand_out(cm_manager_t *m, cm__pool *p,
                                                          cm__slice *s, uint64_t size,
                                                          cm_handle_t *out, cm_diag_t *diag) {
  if (!s->desc && !cm__slice_new_desc(p, s)) {
    p->vt->on_free(p, s); /* give it back untouched */
    cm__manager_take_reserved(m, p);
    return cm__diag_set(diag, CM_ENOMEM, "out of host memory for a descriptor");
  }
  cm__pool_mark_used(p, s, size);
  *out = cm__desc_take_handle(s->desc);
  return CM_OK;
}

/* ---- construction -------------------------------------------------------------- */

void cm_manager_config_init(cm_manager_config_t *cfg) {
  if (!cfg) return;
  memset(cfg, 0, sizeof *cfg);
  cfg->name = "Memory";
  cfg->props.max_page_size = 128ull << 20;
  cfg->props.alignment = 32;
  cfg->preset = CM_PRESET_DEFAULT;
  cfg->persistent_memory = CM_PERSISTENT_ENABLED;
  cfg->initial_mode = -1;
}

static int build_pool(cm_manager_t *m, const cm_pool_options_t *o, uint8_t pos, cm__pool **out) {
  switch (o->kind) {
    case CM_POOL_SLICED: return cm__pool_sliced_new(&m->pool_ctx, o, pos, out);
    case CM_POOL_EXCLUSIVE: return cm__pool_exclusive_new(&m->pool_ctx, o, pos, out);
    case CM_POOL_DIRECT: return cm__pool_direct_new(&m->pool_ctx, o, pos, out);
    case CM_POOL_ARENA: return cm__pool_arena_new(&m->pool_ctx, o, pos, out);
    case CM_POOL_ADAPTIVE: return cm__pool_adaptive_new(&m->pool_ctx, o, pos, out);
    case CM_POOL_PERSISTENT: /* not dynamic pools (cm_pools_resolve refuses them) */
    case CM_POOL_DEDICATED: break;
  }
  return CM_EINVAL;
}

static void update_next_cleanup(cm_manager_t *m) {
  uint64_t next = UINT64_MAX;
  for (size_t i = 0; i < m->npools; i++)
    if (m->pools[i]->next_cleanup < next) next = m->pools[i]->next_cleanup;
  m->next_cleanup = next;
}

/* Build a pool list into out[]; on failure nothing is left allocated. */
static int build_pools(cm_manager_t *m, const cm_pool_options_t *pools, size_t n,
                       cm__pool **out, cm_diag_t *diag) {
  if (n > CM_MAX_DYNAMIC_POOLS)
    return cm__diag_set(diag, CM_EINVAL,
                        "the pool list has %zu entries, exceeding the maximum of 254 dynamic pools",
                        n);
  for (size_t i = 0; i < n; i++) {
    int rc = build_pool(m, &pools[i], (uint8_t)i, &out[i]);
    if (rc != CM_OK) {
      for (size_t j = 0; j < i; j++) out[j]->vt->destroy(out[j]);
      return cm__diag_set(diag, rc, "cannot build pool %zu: %s", i, cm_strerror(rc));
    }
  }
  return CM_OK;
}

int cm_manager_create(cm_storage_t *storage, const cm_manager_config_t *cfg, cm_manager_t **out,
                      cm_diag_t *diag) {
  if (!out) return cm__diag_set(diag, CM_EINVAL, "out is NULL");
  *out = NULL;
  if (!storage || !cfg) return cm__diag_set(diag, CM_EINVAL, "storage and config are required");
  if ((unsigned)cfg->persistent_memory > CM_PERSISTENT_ENFORCED)
    return cm__diag_set(diag, CM_EINVAL, "unknown persistent_memory value %d",
                        (int)cfg->persistent_memory);
  cm_manager_t *m = calloc(1, sizeof *m);
  if (!m) return cm__diag_set(diag, CM_ENOMEM, "out of host memory");
  snprintf(m->name, sizeof m->name, "%s", cfg->name ? cfg->name : "Memory");
  m->storage = storage;
  m->props = cfg->props;
  if (m->props.alignment == 0) m->props.alignment = 1;
  m->pm = cfg->persistent_memory;
  m->relocate = cfg->relocate;
  m->debug_checks = cm_debug_level() >= 3;
  m->logger = cfg->logger;
  m->log_level = cm_logger_level(cfg->logger);
  m->lazy_next_id = UINT64_MAX;
  atomic_init(&m->inbox.head, NULL);
  m->inbox.owner_name = m->name;
  m->inbox.logger = m->logger;
  m->pool_ctx = (cm__pool_ctx){.storage = storage,
                               .alignment = m->props.alignment,
                               .max_page_size = m->props.max_page_size,
                               .inbox = &m->inbox,
                               .lazy_ids = &m->lazy_next_id,
                               .dry_runs = &m->dry_runs,
                               .page_updates = &m->page_updates,
                               .reserve_clock = &m->alloc_reserve_count,
                               .dry_ledger = &m->dry_ledger,
                               .relocate = cfg->relocate};
  if (cfg->initial_mode >= 0)
    m->mode = cfg->initial_mode ? CM_MODE_PERSISTENT : CM_MODE_AUTO;
  else
    m->mode = m->pm == CM_PERSISTENT_ENFORCED ? CM_MODE_PERSISTENT : CM_MODE_AUTO;
  m->base_mode = m->mode;

  cm_pool_options_t preset[64];
  const cm_pool_options_t *list = cfg->pools;
  size_t n = cfg->pool_count;
  if (!list || n == 0) {
    int rc = cm_pools_preset(cfg->preset, m->props, preset, 64, &n);
    if (rc != CM_OK) {
      free(m);
      return cm__diag_set(diag, rc, "cannot build the preset pool layout");
    }
    list = preset;
  }
  int rc = cm__pool_persistent_new(&m->pool_ctx, &m->persistent);
  if (rc == CM_OK) rc = cm__pool_dedicated_new(&m->pool_ctx, &m->dedicated);
  if (rc == CM_OK) rc = build_pools(m, list, n, m->pools, diag);
  if (rc != CM_OK) {
    if (m->persistent) m->persistent->vt->destroy(m->persistent);
    if (m->dedicated) m->dedicated->vt->destroy(m->dedicated);
    free(m);
    return rc;
  }
  m->npools = n;
  update_next_cleanup(m);
  log_pools(m);
  *out = m;
  return CM_OK;
}

void cm_manager_destroy(cm_manager_t *m) {
  if (!m) return;
  primed_release(m);
  free(m->primed);
  cm__manager_drain(m);
  for (size_t i = 0; i < m->npools; i++) m->pools[i]->vt->destroy(m->pools[i]);
  m->persistent->vt->destroy(m->persistent);
  m->dedicated->vt->destroy(m->dedicated);
  cm_storage_flush(m->storage);
  cm_storage_destroy(m->storage);
  free(m);
}

/* ---- cleanup ------------------------------------------------------------------- */

/* First dynamic pool accepting `size`, or npools. */
static inline __attribute__((always_inline)) size_t route(const cm_manager_t *m,
                                                          uint64_t size) {
  for (size_t i = 0; i < m->npools; i++)
    if (cm__pool_accepts(m->pools[i], size)) return i;
  return m->npools;
}

/* The dedicated pool gives back its freed allocations (its next_cleanup is
 * UINT64_MAX when it holds none: give_back_dedicated tests that inline). */
static __attribute__((noinline)) void give_back_dedicated_now(cm_manager_t *m) {
  m->dedicated->vt->cleanup(m->dedicated, m->alloc_reserve_count, true, UINT64_MAX);
  cm__manager_take_reserved(m, m->dedicated);
}

static inline void give_back_dedicated(cm_manager_t *m) {
  if (__builtin_expect(m->dedicated->next_cleanup != UINT64_MAX, 0)) give_back_dedicated_now(m);
}

/* Cleanup. `target` is the pool the request being served routes to (only it
 * keeps memory that would serve `serving`, §15.1 item 6), npools when none. */
static void cleanup_impl(cm_manager_t *m, bool explicit_cleanup, uint64_t serving,
                         size_t target) {
  if (explicit_cleanup && LOG_ON(m, CM_LOG_BASIC))
    cm_logger_write(m->logger, CM_LOG_BASIC, "Manual memory cleanup ...");
  if (m->capturing) return;
  if (explicit_cleanup) {
    m->persistent->vt->cleanup(m->persistent, m->alloc_reserve_count, true, serving);
    cm__manager_take_reserved(m, m->persistent);
  }
  give_back_dedicated(m);
  for (size_t i = 0; i < m->npools; i++) {
    m->pools[i]->vt->cleanup(m->pools[i], m->alloc_reserve_count, explicit_cleanup,
                             i == target ? serving : UINT64_MAX);
    cm__manager_take_reserved(m, m->pools[i]);
  }
  update_next_cleanup(m);
  if (cm__storage_pending(m->storage) || explicit_cleanup) cm_storage_flush(m->storage);
}

/* Debug level 3: check every invariant after a mutating call; a violation
 * is reported (logger, else stderr) and aborts, at the call that caused it. */
static void debug_check(cm_manager_t *m, const char *call) {
  cm_diag_t d;
  cm_diag_clear(&d);
  size_t bad = cm_manager_check(m, &d);
  if (!bad) return;
  char msg[512];
  snprintf(msg, sizeof msg, "cubemem: debug level 3: %zu invariant violation%s after %s on "
           "manager '%s': %s", bad, bad == 1 ? "" : "s", call, m->name, d.message);
  if (m->logger) cm_logger_warn(m->logger, msg);
  else fprintf(stderr, "%s\n", msg); /* asked for by the debug level */
  abort();
}

/* ---- relocation (relocate.c plans, copies and commits) ------------------------ */

/* Relocation for trigger `why`: refused, nothing changed, for an unknown
 * reason, while a capture or a dry run is open, or when the storage cannot
 * copy; else the freed inbox is drained and relocate.c runs. */
static int relocate(cm_manager_t *m, cm_relocate_reason_t why, cm_relocate_stats_t *out,
                    cm_diag_t *diag) {
  if (out) memset(out, 0, sizeof *out);
  if ((unsigned)why > CM_RELOCATE_CAPTURE)
    return cm__diag_set(diag, CM_EINVAL, "unknown relocation reason %d", (int)why);
  if (m->capturing || m->dry_runs)
    return cm__diag_set(diag, CM_EBUSY,
                        "relocation does not run while a graph capture or a dry run is open");
  if (!cm_storage_can_copy(m->storage))
    return cm__diag_set(diag, CM_ENOTSUP,
                        "the %s storage cannot copy device memory, so nothing can be relocated",
                        cm_storage_name(m->storage));
  cm__manager_drain(m);
  return cm__relocate(m, why, out, diag);
}

int cm_manager_relocate(cm_manager_t *m, cm_relocate_reason_t why, cm_relocate_stats_t *out,
                        cm_diag_t *diag) {
  if (out) memset(out, 0, sizeof *out);
  if (!m) return cm__diag_set(diag, CM_EINVAL, "manager is NULL");
  int rc = relocate(m, why, out, diag);
  if (__builtin_expect(m->debug_checks, 0)) debug_check(m, "cm_manager_relocate");
  return rc;
}

void cm_manager_relocate_totals(const cm_manager_t *m, cm_relocate_stats_t *out) {
  if (!out) return;
  memset(out, 0, sizeof *out);
  if (m) *out = m->reloc;
}

void cm_manager_cleanup(cm_manager_t *m, bool explicit_cleanup) {
  if (!m) return;
  cm__manager_drain(m);
  if (explicit_cleanup && m->relocate && !m->capturing && !m->dry_runs)
    (void)relocate(m, CM_RELOCATE_EXPLICIT, NULL, NULL); /* abandoned: nothing lost */
  cleanup_impl(m, explicit_cleanup, UINT64_MAX, m->npools);
  if (__builtin_expect(m->debug_checks, 0)) debug_check(m, "cm_manager_cleanup");
}

/* ---- reserve ------------------------------------------------------------------- */

static void warn_capacity(cm_manager_t *m, size_t i, uint64_t size) {
  if (m->capacity_warned[i / 8] & (1u << (i % 8))) return;
  m->capacity_warned[i / 8] |= (uint8_t)(1u << (i % 8));
  m->warnings++;
  char msg[384];
  snprintf(msg, sizeof msg,
           "[%s] memory pool %zu is at capacity (first hit at an allocation of %" PRIu64
           " B); spilling to the next accepting pool. The measured plan is short for this "
           "workload.",
           m->name, i, size);
  cm_logger_warn(m->logger, msg);
}

static int reserve_persistent(cm_manager_t *m, uint64_t size, uint64_t eff, bool may_alloc,
                              bool lazy, cm_handle_t *out, cm_diag_t *diag, bool *done) {
  cm__pool *p = m->persistent;
  cm__slice *s = p->vt->try_reserve(p, size, eff);
  *done = true;
  if (s) {
    int rc = hand_out(m, p, s, size, out, diag);
    if (rc == CM_OK) {
      if (LOG_ON(m, CM_LOG_FULL))
        cm_logger_printf(m->logger, CM_LOG_FULL,
                         "[%s] Reserved memory %" PRIu64 " using persistent memory", m->name, size);
      touch(m, s, *out);
    }
    return rc;
  }
  if (!may_alloc) {
    *done = false;
    return CM_OK;
  }
  int rc = p->vt->alloc(p, size, eff, lazy, &s, diag);
  cm__manager_take_reserved(m, p);
  if (rc == CM_OK) rc = hand_out(m, p, s, size, out, diag);
  if (LOG_ON(m, CM_LOG_BASIC)) {
    char prefix[256];
    snprintf(prefix, sizeof prefix,
             "[%s] Allocated a new memory page using persistent memory, \n", m->name);
    log_display(m, CM_LOG_BASIC, prefix);
  }
  if (rc == CM_OK) touch(m, s, *out);
  return rc;
}

/* The device is out of memory for a request of `size` bytes that pool p
 * could not serve: give back every cached byte of every pool (free mapped
 * chunks, free pages, idle segments, free persistent slots), flush deferred
 * frees, and, when that gave anything back, try once more (logged at basic).
 * *d2 keeps the error that stands. */
static int retry_after_relocation(cm_manager_t *m, cm__pool *p, uint64_t size, uint64_t eff,
                                  bool lazy, cm__slice **s, cm_diag_t *d2);
static int retry_after_release_only(cm_manager_t *m, cm__pool *p, uint64_t size, uint64_t eff,
                                    bool lazy, cm__slice **s, cm_diag_t *d2);

static void explain_oom(cm__pool *p, cm_diag_t *d);

static int retry_after_release(cm_manager_t *m, cm__pool *p, uint64_t size, uint64_t eff,
                               bool lazy, cm__slice **s, cm_diag_t *d2) {
  int rc = retry_after_release_only(m, p, size, eff, lazy, s, d2);
  if (rc == CM_EOOM && m->relocate && !lazy)
    rc = retry_after_relocation(m, p, size, eff, lazy, s, d2);
  if (rc == CM_EOOM && p->vt->alloc_tight) {
    cm_diag_t d3;
    cm_diag_clear(&d3);
    int r2 = p->vt->alloc_tight(p, size, eff, lazy, s, &d3);
    cm__manager_take_reserved(m, p);
    if (r2 != CM_EOOM) { /* served, or a different error that stands */
      rc = r2;
      if (r2 != CM_OK) *d2 = d3;
    }
    if (r2 == CM_OK && LOG_ON(m, CM_LOG_BASIC)) {
      char b1[32];
      cm_format_bytes(size, b1, sizeof b1);
      cm_logger_printf(m->logger, CM_LOG_BASIC,
                       "[%s] Out of device memory for an allocation of %s at its best fit: "
                       "served %s",
                       m->name, b1,
                       (*s)->index == CM__SLICE_STITCHED
                           ? "stitched (the free parts of partly used granules mapped a second "
                             "time around new granules)"
                           : "where it maps fewer granules");
    }
  }
  if (rc == CM_EOOM && p->vt->explain_oom) explain_oom(p, d2);
  return rc;
}

/* Relocations tried for one request the device refused: each packs more
 * of the live data, until the request fits, nothing more moves, the copies
 * reach RELOCATE_BUDGET times the memory held, or the moves reach
 * RELOCATE_MOVES times the live allocations (by then every block has moved
 * and the packing only cycles: tiny blocks would otherwise circle the
 * arena until the bytes budget is spent). */
#define RELOCATE_BUDGET 2
#define RELOCATE_MOVES 2

/* Can no relocation make room for eff more bytes? Moving data never
 * shrinks it: the pools' live bytes (with their alignment padding) plus eff
 * must fit in what the manager could hold, the bytes its storage holds now
 * plus the device's free memory. When they do not, planning would only
 * copy bytes before the request fails all the same. */
static bool relocation_cannot_help(cm_manager_t *m, uint64_t eff) {
  uint64_t need = eff, free_b = 0, total = 0;
  for (size_t i = 0; i < m->npools; i++)
    need += m->pools[i]->usage.bytes_in_use + m->pools[i]->usage.bytes_padding;
  if (cm_storage_mem_info(m->storage, &free_b, &total) != CM_OK || total == 0) return false;
  return need > cm__storage_held(m->storage) + free_b;
}

/* Still out of memory after giving back every cached byte: with relocation
 * enabled, compact live data into the room the pools hold (memory pressure:
 * no new memory for targets), give back what emptied and try once more. */
static int retry_after_relocation(cm_manager_t *m, cm__pool *p, uint64_t size, uint64_t eff,
                                  bool lazy, cm__slice **s, cm_diag_t *d2) {
  int rc = CM_EOOM;
  if (relocation_cannot_help(m, eff)) return rc;
  uint64_t budget = RELOCATE_BUDGET * m->reserved_total, copied = 0, live = 0, moved = 0;
  for (size_t i = 0; i < m->npools; i++) live += m->pools[i]->usage.number_allocs;
  while (rc == CM_EOOM && copied <= budget && moved <= RELOCATE_MOVES * live) {
    cm_relocate_stats_t st;
    if (relocate(m, CM_RELOCATE_PRESSURE, &st, NULL) != CM_OK || st.moves == 0) break;
    copied += st.bytes_copied;
    moved += st.moves;
    cleanup_impl(m, true, UINT64_MAX, m->npools);
    *s = p->vt->try_reserve(p, size, eff);
    if (*s) return CM_OK;
    cm_diag_t d3;
    cm_diag_clear(&d3);
    rc = p->vt->alloc(p, size, eff, lazy, s, &d3);
    cm__manager_take_reserved(m, p);
    if (rc != CM_OK) *d2 = d3;
    if (LOG_ON(m, CM_LOG_BASIC))
      cm_logger_printf(m->logger, CM_LOG_BASIC,
                       "[%s] Out of device memory: relocated %" PRIu64 " allocations (%" PRIu64
                       " bytes copied) and retried: %s",
                       m->name, st.moves, st.bytes_copied,
                       rc == CM_OK ? "served" : "still out of memory");
  }
  return rc;
}

static int retry_after_release_only(cm_manager_t *m, cm__pool *p, uint64_t size, uint64_t eff,
                                    bool lazy, cm__slice **s, cm_diag_t *d2) {
  uint64_t before = m->reserved_total;
  bool deferred = cm__storage_pending(m->storage) != 0; /* frees the cleanup will flush */
  cleanup_impl(m, true, UINT64_MAX, m->npools);
  uint64_t released = before - m->reserved_total;
  if (released == 0 && !deferred) return CM_EOOM; /* nothing could give */
  *s = p->vt->try_reserve(p, size, eff);
  int rc = CM_OK;
  if (!*s) {
    cm_diag_t d3;
    cm_diag_clear(&d3);
    rc = p->vt->alloc(p, size, eff, lazy, s, &d3);
    cm__manager_take_reserved(m, p);
    if (rc != CM_OK) *d2 = d3;
  }
  if (LOG_ON(m, CM_LOG_BASIC)) {
    char b1[32], b2[32];
    cm_format_bytes(size, b1, sizeof b1);
    cm_format_bytes(released, b2, sizeof b2);
    cm_logger_printf(m->logger, CM_LOG_BASIC,
                     "[%s] Out of device memory for an allocation of %s: released %s of cached "
                     "memory and retried: %s",
                     m->name, b1, b2, rc == CM_OK ? "served" : "still out of memory");
  }
  return rc;
}

static int reserve_dedicated(cm_manager_t *m, uint64_t size, uint64_t eff, bool lazy,
                             cm_handle_t *out, cm_diag_t *diag) {
  cm__pool *p = m->dedicated;
  cm__slice *s = NULL;
  cm_diag_t d2;
  cm_diag_clear(&d2);
  int rc = p->vt->alloc(p, size, eff, lazy, &s, &d2);
  cm__manager_take_reserved(m, p);
  if (rc == CM_EOOM && !m->capturing) rc = retry_after_release(m, p, size, eff, lazy, &s, &d2);
  if (rc != CM_OK) {
    if (diag) *diag = d2;
    return rc;
  }
  if (LOG_ON(m, CM_LOG_FULL)) {
    char b[32];
    cm_format_bytes(size, b, sizeof b);
    cm_logger_printf(m->logger, CM_LOG_FULL, "[%s] Reserved memory %s as a dedicated allocation",
                     m->name, b);
  }
  return hand_out(m, p, s, size, out, diag);
}

/* Memory pressure (relocation enabled): pool p is about to take a new page
 * while it keeps outdated pages; when that page would leave the device less
 * than another page of room (held + page > capacity - page), the last
 * moment a copy still has somewhere to go, relocate into held room first. */
static __attribute__((noinline, cold)) void relocate_before_page(cm_manager_t *m, cm__pool *p) {
  if (!p->vt->reloc_plan || !p->vt->report) return;
  cm_pool_report_t r;
  memset(&r, 0, sizeof r);
  p->vt->report(p, &r);
  uint64_t free_b = 0, total = 0;
  if (r.outdated_pages == 0 || cm_storage_mem_info(m->storage, &free_b, &total) != CM_OK ||
      total == 0)
    return;
  uint64_t page = p->opts.page_size;
  if (free_b >= page && free_b - page >= page) return; /* room for two more pages */
  (void)relocate(m, CM_RELOCATE_PRESSURE, NULL, NULL); /* abandoned: nothing lost */
}

/* The device refused a reservation of pool p for good (retry_after_release
 * could not serve it either): add to the error where the pool's held memory
 * that is not live lies (pool.h's explain_oom), as far as the message has
 * room. */
static void explain_oom(cm__pool *p, cm_diag_t *d) {
  size_t n = strlen(d->message);
  if (n + 3 >= sizeof d->message) return;
  char why[sizeof d->message];
  if (p->vt->explain_oom(p, why, sizeof why) == 0) return;
  snprintf(d->message + n, sizeof d->message - n, "%s%s", n ? "; " : "", why);
}

/* A FORBIDDEN reservation found no held room. */
static int no_held_room(cm_diag_t *diag, uint64_t size, const char *where) {
  return cm__diag_set(diag, CM_EBUSY,
                      "no memory already held fits an allocation of %" PRIu64
                      " bytes (%s) and this reservation may not allocate pages "
                      "(CM_PAGES_FORBIDDEN); reserve it with CM_PAGES_ADD_ONLY or CM_PAGES_ALLOW",
                      size, where);
}

/* `up` restricts the call's page updates (cm_manager_reserve_restricted);
 * CM_PAGES_ALLOW from cm_manager_reserve, where it folds away. */
static inline __attribute__((always_inline)) int reserve_impl(cm_manager_t *m, uint64_t size,
                                                             cm_page_updates_t up,
                                                             cm_handle_t *out, cm_diag_t *diag) {
  if (!out) return cm__diag_set(diag, CM_EINVAL, "out is NULL");
  out->d = NULL;
  if (!m) return cm__diag_set(diag, CM_EINVAL, "manager is NULL");
  uint64_t eff;
  if (!cm__round_up(size, m->props.alignment, &eff))
    return cm__diag_set(diag, CM_EOVERFLOW,
                        "an allocation of %" PRIu64 " bytes overflows when padded to the "
                        "alignment of %" PRIu64,
                        size, m->props.alignment);
  /* Restricted calls give nothing back: releases queued since the last call
   * wait for the next unrestricted one (taking them in can give an adaptive
   * pool's outdated pages back), and no cleanup runs. */
  bool may_release = up == CM_PAGES_ALLOW;
  bool may_add = up != CM_PAGES_FORBIDDEN;
  if (may_release) cm__manager_drain(m);
  m->alloc_reserve_count++;
  size_t first = route(m, size);
  if (may_release && m->alloc_reserve_count >= m->next_cleanup && !m->capturing)
    cleanup_impl(m, false, size, first);
  else if (cm__storage_pending(m->storage))
    cm_storage_flush(m->storage); /* deferred frees from the last call's pool work */
  bool lazy = m->dry_runs > 0;
  if (may_release && !m->capturing) give_back_dedicated(m);
  if (m->mode == CM_MODE_DEDICATED) {
    if (!may_add) return no_held_room(diag, size, "a dedicated reservation always allocates");
    return reserve_dedicated(m, size, eff, lazy, out, diag);
  }
  bool P = m->mode == CM_MODE_PERSISTENT;
  bool S = m->pm == CM_PERSISTENT_SIZE_MATCH;
  if (P || S) {
    bool done;
    bool may_alloc = may_add && (P || cm__persistent_has_size(m->persistent, eff));
    int rc = reserve_persistent(m, size, eff, may_alloc, lazy, out, diag, &done);
    if (done) return rc;
    if (P) return no_held_room(diag, size, "no free persistent slice of its size");
  }
  if (LOG_ON(m, CM_LOG_FULL)) {
    char b[32];
    cm_format_bytes(size, b, sizeof b);
    cm_logger_printf(m->logger, CM_LOG_FULL, "[%s] Reserved memory %s using dynamic pool",
                     m->name, b);
  }
  int cap_err = CM_OK;
  cm_diag_t cap_diag;
  bool any = false;
  for (size_t i = first; i < m->npools; i++) {
    cm__pool *p = m->pools[i];
    if (i != first && !cm__pool_accepts(p, size)) continue;
    any = true;
    cm__slice *s = p->vt->try_reserve(p, size, eff);
    if (s) return hand_out(m, p, s, size, out, diag);
    if (!may_add) continue; /* only held room: the next accepting pool's */
    if (__builtin_expect(m->relocate, 0) && may_release && !lazy && !m->capturing)
      relocate_before_page(m, p);
    cm_diag_t d2;
    cm_diag_clear(&d2);
    int rc = p->vt->alloc(p, size, eff, lazy, &s, &d2);
    cm__manager_take_reserved(m, p);
    if (rc == CM_EOOM && !m->capturing && may_release)
      rc = retry_after_release(m, p, size, eff, lazy, &s, &d2);
    if (rc == CM_OK) {
      rc = hand_out(m, p, s, size, out, diag);
      if (rc == CM_OK && LOG_ON(m, CM_LOG_FULL)) {
        char prefix[256];
        snprintf(prefix, sizeof prefix, "[%s], Allocated a new memory page, current usage: \n",
                 m->name);
        log_display(m, CM_LOG_FULL, prefix);
      }
      return rc;
    }
    if (rc == CM_ECAPACITY) {
      if (cap_err == CM_OK) {
        cap_err = rc;
        cap_diag = d2;
      }
      warn_capacity(m, i, size);
      continue;
    }
    if (cap_err != CM_OK) {
      if (diag) *diag = cap_diag;
      return cap_err;
    }
    if (diag) *diag = d2;
    return rc;
  }
  if (cap_err != CM_OK) {
    if (diag) *diag = cap_diag;
    return cap_err;
  }
  if (any && !may_add) return no_held_room(diag, size, "no held room in an accepting pool");
  return cm__diag_set(diag, CM_ETOOBIG,
                      "no memory pool accepts an allocation of %" PRIu64
                      " bytes (BufferTooBig); install a layout with a pool for this size",
                      size);
}

int cm_manager_reserve(cm_manager_t *m, uint64_t size, cm_handle_t *out, cm_diag_t *diag) {
  int rc = reserve_impl(m, size, CM_PAGES_ALLOW, out, diag);
  if (__builtin_expect(m && m->debug_checks, 0)) debug_check(m, "cm_manager_reserve");
  return rc;
}

int cm_manager_reserve_restricted(cm_manager_t *m, uint64_t size, cm_page_updates_t updates,
                                  cm_handle_t *out, cm_diag_t *diag) {
  if (out) out->d = NULL;
  if (updates != CM_PAGES_ALLOW && updates != CM_PAGES_ADD_ONLY &&
      updates != CM_PAGES_FORBIDDEN)
    return cm__diag_set(diag, CM_EINVAL,
                        "unknown page-update restriction %d; expected CM_PAGES_ALLOW, "
                        "CM_PAGES_ADD_ONLY or CM_PAGES_FORBIDDEN",
                        (int)updates);
  if (m) m->page_updates = (uint8_t)updates; /* the pools read it (pool_ctx) */
  int rc = reserve_impl(m, size, updates, out, diag);
  if (m) m->page_updates = CM_PAGES_ALLOW;
  if (__builtin_expect(m && m->debug_checks, 0)) debug_check(m, "cm_manager_reserve_restricted");
  return rc;
}

/* ---- lookups ------------------------------------------------------------------- */

static int lookup(cm_manager_t *m, cm_desc_t *d, cm__slice **out, cm_diag_t *diag) {
  if (!m) return cm__diag_set(diag, CM_EINVAL, "manager is NULL");
  if (!d) return cm__diag_set(diag, CM_EINVAL, "empty handle or binding");
  if (!d->init) return cm__diag_set(diag, CM_ENOTFOUND, "Memory location was never initialized");
  if (d->owner != &m->inbox)
    return cm__diag_set(diag, CM_ENOTFOUND,
                        "Memory location belongs to another memory manager");
  if (!d->slice || d->slice->desc != d)
    return cm__diag_set(diag, CM_ENOTFOUND, "Memory location points to a different allocation");
  *out = d->slice;
  return CM_OK;
}

int cm_manager_find(cm_manager_t *m, cm_binding_t b, cm_location_t *out, cm_diag_t *diag) {
  cm__slice *s = NULL;
  int rc = lookup(m, b.d, &s, diag);
  if (rc) return rc;
  if (out) {
    memset(out, 0, sizeof *out);
    cm__manager_pool_of(m, s)->vt->locate(cm__manager_pool_of(m, s), s, out);
    out->pool = s->pool;
    out->offset = s->offset;
    out->init = true;
  }
  return CM_OK;
}

int cm_manager_get_cursor(cm_manager_t *m, cm_binding_t b, uint64_t *out, cm_diag_t *diag) {
  cm__slice *s = NULL;
  int rc = lookup(m, b.d, &s, diag);
  if (rc) return rc;
  if (out) *out = s->cursor;
  return CM_OK;
}

int cm_manager_get_storage(cm_manager_t *m, cm_binding_t b, cm_storage_handle_t *out,
                           cm_diag_t *diag) {
  cm__slice *s = NULL;
  int rc = lookup(m, b.d, &s, diag);
  if (rc) return rc;
  if (!s->mapped) {
    cm__pool *p = cm__manager_pool_of(m, s);
    rc = p->vt->materialize(p, s, diag);
    cm__manager_take_reserved(m, p);
    if (rc) return rc;
  }
  /* A live slice's bytes are addressable, also when its memory was backed
   * later (a lazily reserved page materialised through a neighbour). */
  if (s->used) cm__pool_asan_mark(cm__manager_pool_of(m, s), s, s->size, false);
  if (out) *out = (cm_storage_handle_t){s->storage_id, s->offset, s->size};
  return CM_OK;
}

int cm_manager_get_resource(cm_manager_t *m, cm_binding_t b, uint64_t offset_start,
                            uint64_t offset_end, cm_resource_t *out, cm_diag_t *diag) {
  cm_storage_handle_t h;
  int rc = cm_manager_get_storage(m, b, &h, diag);
  if (rc) return rc;
  if (offset_start > h.size || offset_end > h.size - offset_start)
    return cm__diag_set(diag, CM_EINVAL,
                        "offsets %" PRIu64 " + %" PRIu64 " exceed the allocation of %" PRIu64
                        " bytes",
                        offset_start, offset_end, h.size);
  rc = cm_storage_get(m->storage, h.id, h.offset + offset_start,
                      h.size - offset_start - offset_end, out, diag);
  if (rc == CM_OK) { /* the caller keeps a raw address: guard the slice */
    cm__slice *s = b.d->slice;
    cm__pool *p = cm__manager_pool_of(m, s);
    s->guards++;
    s->used |= CM__USED_GUARDED;
    m->guards++;
    if (m->relocate && p->vt->guard) p->vt->guard(p, s, 1);
  }
  return rc;
}

int cm_manager_unguard(cm_manager_t *m, cm_binding_t b, cm_diag_t *diag) {
  cm__slice *s = NULL;
  int rc = lookup(m, b.d, &s, diag);
  if (rc) return rc;
  if (s->guards == 0)
    return cm__diag_set(diag, CM_EINVAL,
                        "the allocation holds no guard: cm_manager_unguard releases one "
                        "cm_manager_get_resource each");
  s->guards--;
  m->guards--;
  if (!s->guards) s->used &= (uint8_t)~CM__USED_GUARDED;
  cm__pool *p = cm__manager_pool_of(m, s);
  if (m->relocate && p->vt->guard) p->vt->guard(p, s, -1);
  return CM_OK;
}

static int bind_impl(cm_manager_t *m, cm_handle_t reserved, cm_handle_t assigned, uint64_t cursor,
                    cm_diag_t *diag) {
  cm_desc_t *d = reserved.d;
  cm_desc_t *a = assigned.d;
  cm__slice *s = NULL;
  int rc = CM_OK;
  if (!m || !a) rc = cm__diag_set(diag, CM_EINVAL, "bind needs a manager and an assigned handle");
  else if (d && !d->init) rc = cm__diag_set(diag, CM_ENOTFOUND, "Reserved memory isn't initialized");
  else rc = lookup(m, d, &s, diag);
  if (rc == CM_OK && a != d && a->init)
    rc = cm__diag_set(diag, CM_EINVAL, "the assigned handle is already bound to memory");
  if (rc == CM_OK && a != d) {
    /* The slice's identity becomes the assigned descriptor (spec §3.3); the
     * reserved one turns stale. The pool's reference is the OWNED bit. */
    cm__desc_detach(d);
    cm__desc_attach(a, &m->inbox);
    a->slice = s;
    a->owner = &m->inbox;
    a->init = true;
    s->desc = a;
  }
  if (rc == CM_OK) {
    s->cursor = cursor; /* every pool stores the cursor ([REC] for direct) */
    if (s->pool == CM_PERSISTENT_POOL && m->capturing) touch(m, s, assigned);
  }
  cm_handle_release(reserved);
  return rc;
}

int cm_manager_bind(cm_manager_t *m, cm_handle_t reserved, cm_handle_t assigned, uint64_t cursor,
                    cm_diag_t *diag) {
  int rc = bind_impl(m, reserved, assigned, cursor, diag);
  if (__builtin_expect(m && m->debug_checks, 0)) debug_check(m, "cm_manager_bind");
  return rc;
}

/* ---- modes ----------------------------------------------------------------------- */

static const char *mode_name(cm_alloc_mode_t md) {
  return md == CM_MODE_PERSISTENT ? "Persistent" : md == CM_MODE_DEDICATED ? "Dedicated" : "Auto";
}

static uint64_t dedicated_windows(const cm_manager_t *m) {
  uint64_t n = 0;
  for (size_t i = 0; i < m->nruns; i++)
    if (m->runs[i].kind == CM_MODE_DEDICATED) n += m->runs[i].count;
  return n;
}

static void window_open(cm_manager_t *m, cm_alloc_mode_t kind) {
  size_t top = m->nruns;
  if (m->overflow == 0 && top > 0 && m->runs[top - 1].kind == kind) {
    m->runs[top - 1].count++;
  } else if (m->overflow == 0 && top < sizeof m->runs / sizeof m->runs[0]) {
    m->runs[top].kind = kind;
    m->runs[top].count = 1;
    m->nruns++;
  } else {
    m->overflow++;
    if (!m->overflow_warned) {
      m->overflow_warned = true;
      m->warnings++;
      char msg[256];
      snprintf(msg, sizeof msg,
               "[%s] more than %zu alternations of persistent and dedicated windows are open; "
               "deeper windows keep the mode of the window enclosing them",
               m->name, sizeof m->runs / sizeof m->runs[0]);
      cm_logger_warn(m->logger, msg);
    }
  }
}

static void window_close(cm_manager_t *m) {
  if (m->overflow > 0) {
    m->overflow--;
  } else if (m->nruns > 0 && --m->runs[m->nruns - 1].count == 0) {
    m->nruns--;
  }
}

/* The mode the open windows give. */
static cm_alloc_mode_t window_mode(const cm_manager_t *m) {
  if (m->nruns == 0) return m->base_mode;
  if (m->runs[m->nruns - 1].kind == CM_MODE_DEDICATED) return CM_MODE_DEDICATED;
  if (m->pm == CM_PERSISTENT_DISABLED) return CM_MODE_AUTO;
  return CM_MODE_PERSISTENT;
}

void cm_manager_set_mode(cm_manager_t *m, cm_alloc_mode_t mode) {
  if (!m) return;
  if (mode != CM_MODE_AUTO && mode != CM_MODE_PERSISTENT && mode != CM_MODE_DEDICATED) return;
  bool fixed = m->pm == CM_PERSISTENT_DISABLED || m->pm == CM_PERSISTENT_ENFORCED;
  /* With a fixed persistent setting, persistent windows change nothing: they
   * are not even counted while no dedicated window is open (so they always
   * enclose every counted window, and nesting stays consistent). */
  if (fixed && mode != CM_MODE_DEDICATED && dedicated_windows(m) == 0) return;
  if (mode == CM_MODE_AUTO) window_close(m);
  else window_open(m, mode);
  if (!fixed) m->base_mode = CM_MODE_AUTO;
  cm_alloc_mode_t now = window_mode(m);
  cm_alloc_mode_t old = m->capturing ? m->restore_mode : m->mode;
  if (LOG_ON(m, CM_LOG_BASIC))
    cm_logger_printf(m->logger, CM_LOG_BASIC, "[%s] Setting memory allocation mode: from %s => %s",
                     m->name, mode_name(old), mode_name(now));
  if (m->capturing) m->restore_mode = now;
  else m->mode = now;
}

cm_alloc_mode_t cm_manager_mode(const cm_manager_t *m) { return m ? m->mode : CM_MODE_AUTO; }

/* ---- install_pools --------------------------------------------------------------- */

static int install_pools_impl(cm_manager_t *m, const cm_pool_options_t *pools, size_t n,
                             cm_diag_t *diag) {
  if (!m || (!pools && n)) return cm__diag_set(diag, CM_EINVAL, "invalid arguments");
  if (n == 0) return cm__diag_set(diag, CM_EINVAL, "the pool list is empty");
  if (n > CM_MAX_DYNAMIC_POOLS)
    return cm__diag_set(diag, CM_EINVAL,
                        "the pool list has %zu entries, exceeding the maximum of 254 dynamic pools",
                        n);
  cm_manager_cleanup(m, true);
  uint64_t live = 0, bytes = 0;
  for (size_t i = 0; i < m->npools; i++) {
    live += m->pools[i]->usage.number_allocs;
    bytes += m->pools[i]->usage.bytes_in_use;
  }
  if (live > 0)
    return cm__diag_set(diag, CM_EBUSY,
                        "the dynamic pools kept their layout: %" PRIu64
                        " bytes are still live in them (%" PRIu64 " allocations)",
                        bytes, live);
  cm__pool *fresh[CM_MAX_DYNAMIC_POOLS];
  int rc = build_pools(m, pools, n, fresh, diag);
  if (rc) return rc;
  for (size_t i = 0; i < m->npools; i++) drop_pool(m, m->pools[i]);
  memcpy(m->pools, fresh, n * sizeof fresh[0]);
  m->npools = n;
  update_next_cleanup(m);
  memset(m->capacity_warned, 0, sizeof m->capacity_warned);
  cm_storage_flush(m->storage);
  log_pools(m);
  return CM_OK;
}

int cm_manager_install_pools(cm_manager_t *m, const cm_pool_options_t *pools, size_t n,
                             cm_diag_t *diag) {
  int rc = install_pools_impl(m, pools, n, diag);
  if (__builtin_expect(m && m->debug_checks, 0)) debug_check(m, "cm_manager_install_pools");
  return rc;
}

/* ---- capture ---------------------------------------------------------------------- */

struct cm_pins {
  size_t n;
  cm_handle_t h[];
};

void cm_manager_capture_begin(cm_manager_t *m) {
  if (!m) return;
  if (!m->capturing && m->relocate && !m->dry_runs)
    (void)relocate(m, CM_RELOCATE_CAPTURE, NULL, NULL); /* abandoned: nothing lost */
  if (!m->capturing) {
    m->capturing = true;
    m->priming = true;
    m->restore_mode = m->mode;
  }
  m->mode = CM_MODE_PERSISTENT;
}

void cm_manager_capture_priming_end(cm_manager_t *m) {
  if (!m || !m->capturing) return;
  m->priming = false;
  primed_release(m);
}

typedef struct retain_ctx {
  cm_manager_t *m;
  cm_pins_t *pins;
  size_t cap;
  int rc;
} retain_ctx;

static void count_touched(cm__slice *s, void *arg) {
  if (s->touched) ((retain_ctx *)arg)->cap++;
}

static void retain_touched(cm__slice *s, void *arg) {
  retain_ctx *c = arg;
  if (!s->touched) return;
  s->touched = 0;
  if (c->rc != CM_OK || c->pins->n >= c->cap) return;
  cm_handle_t h;
  int rc = slice_handle(c->m, c->m->persistent, s, &h);
  if (rc != CM_OK) {
    c->rc = rc;
    return;
  }
  c->pins->h[c->pins->n++] = h;
}

static int capture_end_impl(cm_manager_t *m, cm_pins_t **out) {
  if (!out) return CM_EINVAL;
  *out = NULL;
  if (!m) return CM_EINVAL;
  if (!m->capturing) return CM_OK;
  cm__manager_drain(m);
  retain_ctx c = {m, NULL, 0, CM_OK};
  m->persistent->vt->for_each(m->persistent, count_touched, &c);
  c.pins = malloc(sizeof(cm_pins_t) + c.cap * sizeof(cm_handle_t));
  if (!c.pins) return CM_ENOMEM;
  c.pins->n = 0;
  m->persistent->vt->for_each(m->persistent, retain_touched, &c);
  m->capturing = false;
  m->priming = false;
  m->mode = m->restore_mode;
  primed_release(m);
  *out = c.pins;
  return c.rc;
}

int cm_manager_capture_end(cm_manager_t *m, cm_pins_t **out) {
  int rc = capture_end_impl(m, out);
  if (__builtin_expect(m && m->debug_checks, 0)) debug_check(m, "cm_manager_capture_end");
  return rc;
}

size_t cm_pins_count(const cm_pins_t *p) { return p ? p->n : 0; }

void cm_pins_release(cm_pins_t *p) {
  if (!p) return;
  for (size_t i = 0; i < p->n; i++) cm_handle_release(p->h[i]);
  free(p);
}

void cm_manager_dry_run_begin(cm_manager_t *m) {
  if (m) m->dry_runs++;
}
void cm_manager_dry_run_end(cm_manager_t *m) {
  if (m && m->dry_runs) m->dry_runs--;
  if (m && __builtin_expect(m->debug_checks, 0)) debug_check(m, "cm_manager_dry_run_end");
}

/* ---- statistics -------------------------------------------------------------------- */

void cm_manager_usage(cm_manager_t *m, cm_usage_t *out) {
  if (!out) return;
  memset(out, 0, sizeof *out);
  if (!m) return;
  cm__manager_drain(m);
  for (size_t i = 0; i < m->npools + 2; i++) {
    cm__pool *p = pool_at(m, i);
    out->number_allocs += p->usage.number_allocs;
    out->bytes_in_use += p->usage.bytes_in_use;
    out->bytes_padding += p->usage.bytes_padding;
    out->bytes_reserved += p->usage.bytes_reserved;
  }
}

size_t cm_manager_pool_count(const cm_manager_t *m) { return m ? m->npools : 0; }

int cm_manager_pool_report(cm_manager_t *m, size_t index, cm_pool_report_t *out) {
  if (!m || !out) return CM_EINVAL;
  cm__pool *p;
  if (index == CM_PERSISTENT_POOL) p = m->persistent;
  else if (index == CM_DEDICATED_POOL) p = m->dedicated;
  else if (index < m->npools) p = m->pools[index];
  else return CM_EINVAL;
  cm__manager_drain(m);
  memset(out, 0, sizeof *out);
  out->options = p->opts;
  out->usage = p->usage;
  out->pages = p->pages;
  out->pages_peak = p->pages_peak;
  out->pages_unmapped = p->pages_unmapped;
  out->largest_alloc = p->largest_alloc;
  out->bytes_reserved_peak = p->reserved_peak;
  if (p->vt->cached) {
    out->bytes_cached = p->vt->cached(p);
    out->has_cached = true;
  }
  if (p->vt->report) p->vt->report(p, out);
  return CM_OK;
}

uint64_t cm_manager_reserved_peak(const cm_manager_t *m) { return m ? m->reserved_peak : 0; }
cm_storage_t *cm_manager_storage(cm_manager_t *m) { return m ? m->storage : NULL; }
const char *cm_manager_name(const cm_manager_t *m) { return m ? m->name : ""; }
uint64_t cm_manager_warnings(const cm_manager_t *m) { return m ? m->warnings : 0; }

typedef struct refcheck_ctx {
  size_t bad;
  uint64_t first_id;
} refcheck_ctx;

/* A legitimate count never comes near these: a wrapped one is huge. */
static void refcheck_slice(cm__slice *s, void *arg) {
  refcheck_ctx *c = arg;
  const cm_desc_t *d = s->desc;
  if (!d) return;
  if (cm__desc_rc(d) >= (1ull << 61) ||
      atomic_load_explicit(&((cm_desc_t *)d)->hc, memory_order_relaxed) >= (1u << 31)) {
    if (!c->bad++) c->first_id = d->id;
  }
}

size_t cm_manager_check(cm_manager_t *m, cm_diag_t *diag) {
  if (!m) return 1;
  cm__manager_drain(m);
  size_t bad = 0;
  uint64_t total = 0;
  for (size_t i = 0; i < m->npools + 2; i++) {
    cm__pool *p = pool_at(m, i);
    size_t b = p->vt->check(p, diag);
    if (b && diag && !diag->message[0])
      cm__diag_set(diag, CM_ECORRUPT, "pool %zu (%s): %zu violations", i, p->vt->name, b);
    bad += b;
    total += p->usage.bytes_reserved;
  }
  if (total != m->reserved_total) {
    bad++;
    if (diag && !diag->message[0])
      cm__diag_set(diag, CM_ECORRUPT, "M1: reserved total %" PRIu64 " != sum of pools %" PRIu64,
                   m->reserved_total, total);
  }
  /* M4: reference counts that wrapped around (a handle or binding released
   * more often than obtained; see memory.h, misuse detection) */
  refcheck_ctx rc = {0, 0};
  for (size_t i = 0; i < m->npools + 2; i++) {
    cm__pool *p = pool_at(m, i);
    p->vt->for_each(p, refcheck_slice, &rc);
  }
  if (rc.bad) {
    bad += rc.bad;
    if (diag && !diag->message[0])
      cm__diag_set(diag, CM_ECORRUPT,
                   "M4: %zu slice(s) with a reference count that wrapped around (slice of "
                   "descriptor %" PRIu64 "): a handle or binding was released more often than "
                   "it was obtained",
                   rc.bad, rc.first_id);
  }
  uint64_t dead = atomic_load_explicit(&m->inbox.dead_releases, memory_order_relaxed);
  if (dead) {
    bad++;
    if (diag && !diag->message[0])
      cm__diag_set(diag, CM_ECORRUPT,
                   "M5: %" PRIu64 " double release(s): a handle or binding of this manager was "
                   "released after its slice had no reference left (the releases were ignored; "
                   "set CM_DEBUG=1 to log each one as it happens, 2 to abort there)",
                   dead);
  }
  return bad;
}
