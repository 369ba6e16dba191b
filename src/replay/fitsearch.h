/*
 * fitsearch.h - the search of cm_replay_fit over any replay (fit.c), for the
 * tools that fit a model of another allocator (torchreplay.c).
 */
#ifndef CM_REPLAY_FITSEARCH_H
#define CM_REPLAY_FITSEARCH_H

#include "cubemem/replay.h"

/* Replay on a device of `capacity` bytes (0 = unlimited): *fits says whether
 * every reservation succeeded, *peak gets the peak reserved; keep (may be
 * NULL) gets the whole result (the caller frees it), and then the replay does
 * not stop at its first failure. Returns CM_OK, or an error that ends the
 * search (diag set). */
typedef int (*cm__fit_probe_fn)(void *arg, uint64_t capacity, bool *fits, uint64_t *peak,
                                cm_replay_result_t *keep, cm_diag_t *diag);

/* opts with the defaults filled in (grid 2 MiB, 7 confirmations) into *o. */
void cm__fit_options_resolve(const cm_fit_options_t *opts, cm_fit_options_t *o);

/* The smallest capacity on the grid at which `fn` fits, confirmed above
 * (cm_replay_fit's search, fit.c's header); `resolved` from
 * cm__fit_options_resolve. Fills *out. Errors: those of fn, or CM_EOOM with
 * a message when the trace fits nowhere. */
int cm__fit_search(const cm_trace_t *trace, const cm_fit_options_t *resolved, cm__fit_probe_fn fn,
                   void *arg, cm_fit_result_t *out, cm_diag_t *diag);

#endif
