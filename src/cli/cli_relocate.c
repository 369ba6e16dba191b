/*
 * cli_relocate.c - `cubemem replay --relocate --html`: the events at which
 * the replayed manager relocated, for the marks on the report's timeline.
 * The observer also feeds the report's recorder, whose place it takes.
 * Exports: cli_reloc_observe, cli_reloc_marks_json, cli_reloc_marks_free
 * (cmd_replay.h).
 */
#include <inttypes.h>
#include <stdlib.h>

#include "cmd_replay.h"

void cli_reloc_observe(void *arg, const cm_replay_step_t *step) {
  cli_reloc_marks_t *m = arg;
  if (m->rec) cm_replay_recorder_observe(m->rec, step);
  cm_relocate_stats_t t;
  cm_manager_relocate_totals(step->manager, &t);
  if (t.moves == m->moves) return;
  if (m->n == m->cap) {
    size_t nc = m->cap ? m->cap * 2 : 64;
    uint64_t(*nv)[4] = realloc(m->v, nc * sizeof *nv);
    if (!nv) return; /* a mark less; the totals stay right */
    m->v = nv;
    m->cap = nc;
  }
  uint64_t *e = m->v[m->n++];
  e[0] = step->index + 1; /* the timeline counts events replayed */
  e[1] = step->event ? step->event->time_us : 0;
  e[2] = t.moves - m->moves;
  e[3] = t.bytes_copied - m->bytes;
  m->moves = t.moves;
  m->bytes = t.bytes_copied;
}

void cli_reloc_marks_json(FILE *f, const cli_reloc_marks_t *m) {
  fputs(",\"events\":[", f);
  for (size_t i = 0; m && i < m->n; i++)
    fprintf(f, "%s[%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 "]", i ? "," : "", m->v[i][0],
            m->v[i][1], m->v[i][2], m->v[i][3]);
  fputc(']', f);
}

void cli_reloc_marks_free(cli_reloc_marks_t *m) {
  if (!m) return;
  free(m->v);
  free(m);
}
