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

#endif
