/*
 * format.c - the manager's display (spec §5.11): the pools' own displays
 * under their headings and the summed usage report (cm_usage_display, which
 * the pools' displays use too), written with snprintf
 * semantics (returns the length needed). It reads the manager's state and
 * calls nothing in manager.c (cm_manager_display, which drains the freed
 * inbox first, calls it), so the two files do not call each other. The byte
 * formats are base/units.c.
 * Exports: cm_usage_display (the usage report), cm__manager_render
 * (manager_internal.h).
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/sbuf.h"
#include "base/units.h"
#include "core/manager_internal.h"

static void pct(char *b, size_t cap, uint64_t num, uint64_t den) {
  float v = (float)num / (float)den * 100.0f;
  if (den == 0 || v != v) snprintf(b, cap, "NaN%%");
  else snprintf(b, cap, "%.2f%%", (double)v);
}

size_t cm_usage_display(const cm_usage_t *u, char *buf, size_t cap) {
  char a[32], b[32], c[32], d[32], e[32], f[32];
  cm_format_bytes(u->bytes_in_use, a, sizeof a);
  cm_format_bytes(u->bytes_padding, b, sizeof b);
  cm_format_bytes(u->bytes_reserved, c, sizeof c);
  pct(d, sizeof d, u->bytes_in_use, u->bytes_reserved);
  pct(e, sizeof e, u->bytes_padding, u->bytes_in_use);
  (void)f;
  int n = snprintf(buf, cap,
                   "Memory Usage Report:\n"
                   "  Number of allocations: %" PRIu64 "\n"
                   "  Bytes in use: %s\n"
                   "  Bytes used for padding: %s\n"
                   "  Total bytes reserved: %s\n"
                   "  Usage efficiency: %s\n"
                   "  Padding overhead: %s\n",
                   u->number_allocs, a, b, c, d, e);
  return n > 0 ? (size_t)n : 0;
}

typedef struct sbuf {
  char *buf;
  size_t cap, len;
} sbuf;

static void sb_printf(sbuf *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  s->len = cm__vbprintf(s->buf, s->cap, s->len, fmt, ap); /* base/sbuf.c */
  va_end(ap);
}

static void sb_pool(sbuf *s, cm__pool *p) {
  size_t n = p->vt->display(p, s->len < s->cap ? s->buf + s->len : NULL,
                            s->len < s->cap ? s->cap - s->len : 0);
  s->len += n;
}

size_t cm__manager_render(cm_manager_t *m, char *buf, size_t cap) {
  sbuf s = {buf, cap, 0};
  if (cap) buf[0] = 0;
  if (!m) return 0;
  sb_printf(&s, "\n# MemoryManagement\n\n - name: \"%s\"\n\n## Persistent\n\n", m->name);
  sb_pool(&s, m->persistent);
  sb_printf(&s, "\n## Dynamic\n\n");
  for (size_t i = 0; i < m->npools; i++) {
    sb_pool(&s, m->pools[i]);
    sb_printf(&s, "\n");
  }
  if (m->dedicated->pages) {
    sb_printf(&s, "\n## Dedicated\n\n");
    sb_pool(&s, m->dedicated);
  }
  sb_printf(&s, "\n## Summary\n\n");
  cm_usage_t u;
  memset(&u, 0, sizeof u);
  for (size_t i = 0; i <= m->npools + 1; i++) {
    cm__pool *p = i < m->npools ? m->pools[i] : i == m->npools ? m->persistent : m->dedicated;
    u.number_allocs += p->usage.number_allocs;
    u.bytes_in_use += p->usage.bytes_in_use;
    u.bytes_padding += p->usage.bytes_padding;
    u.bytes_reserved += p->usage.bytes_reserved;
  }
  char tmp[512];
  cm_usage_display(&u, tmp, sizeof tmp);
  sb_printf(&s, "%s", tmp);
  return s.len;
}
