/*
 * suggest.h - the "did you mean" edit distance, once for the whole tree (not
 * installed). Pure and thread-safe; no allocation.
 */
#ifndef CM_BASE_SUGGEST_H
#define CM_BASE_SUGGEST_H

#include <stdbool.h>
#include <stddef.h>

/* Optimal string alignment distance (Levenshtein plus adjacent
 * transpositions) between a[0..n) and b[0..m), ASCII letters compared
 * case-insensitively when fold_case. Strings longer than CM__SUGGEST_MAX
 * bytes give SIZE_MAX: no suggestion for huge input. */
enum { CM__SUGGEST_MAX = 64 };
size_t cm__osa_distance(const char *a, size_t n, const char *b, size_t m, bool fold_case);

/* The candidate closest to word (case-insensitive distance; a prefix of at
 * least 3 letters of a longer candidate counts as distance 1), if close
 * enough for its length (1 edit up to 4 letters, 2 up to 8, else 3); else
 * NULL (also for an empty word). The commands, options, layouts and pool
 * keys of the command line and of cm_pools_parse use this rule. */
const char *cm__suggest(const char *word, const char *const *cands, size_t n);

#endif
