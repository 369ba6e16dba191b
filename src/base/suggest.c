/*
 * suggest.c - the optimal string alignment distance behind every "did you
 * mean" hint (config keys in config/schema.c, commands, options and pool
 * kinds in the CLI). Each caller keeps its own rule for how close is close
 * enough; the distance is this one.
 *
 * Algorithm: the classic dynamic programme over a (n+1) x (m+1) table on the
 * stack, bounded by CM__SUGGEST_MAX.
 *
 * Exports: cm__osa_distance.
 */
#include "base/suggest.h"

#include <stdint.h>

static char fold(char c, bool on) {
  return on && c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

size_t cm__osa_distance(const char *a, size_t n, const char *b, size_t m, bool fold_case) {
  if (n > CM__SUGGEST_MAX || m > CM__SUGGEST_MAX) return SIZE_MAX;
  size_t d[CM__SUGGEST_MAX + 1][CM__SUGGEST_MAX + 1];
  for (size_t i = 0; i <= n; i++) d[i][0] = i;
  for (size_t j = 0; j <= m; j++) d[0][j] = j;
  for (size_t i = 1; i <= n; i++) {
    for (size_t j = 1; j <= m; j++) {
      char ca = fold(a[i - 1], fold_case), cb = fold(b[j - 1], fold_case);
      size_t best = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
      if (d[i - 1][j - 1] + (ca != cb) < best) best = d[i - 1][j - 1] + (ca != cb);
      if (i > 1 && j > 1 && ca == fold(b[j - 2], fold_case) &&
          fold(a[i - 2], fold_case) == cb && d[i - 2][j - 2] + 1 < best)
        best = d[i - 2][j - 2] + 1;
      d[i][j] = best;
    }
  }
  return d[n][m];
}
