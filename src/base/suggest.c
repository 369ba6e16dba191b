/*
 * suggest.c - the optimal string alignment distance behind every "did you
 * mean" hint (config keys in config/schema.c, commands and options in the
 * CLI, pool kinds and keys in core/layout.c), and the rule of cm__suggest
 * that all but the config binder share (the binder, whose messages name
 * TOML keys, keeps its own threshold: a third of the longer word).
 *
 * Algorithm: the classic dynamic programme over a (n+1) x (m+1) table on the
 * stack, bounded by CM__SUGGEST_MAX.
 *
 * Exports: cm__osa_distance, cm__suggest.
 */
#include "base/suggest.h"

#include <stdint.h>
#include <string.h>
#include <strings.h>

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

const char *cm__suggest(const char *word, const char *const *cands, size_t n) {
  if (!word || !*word) return NULL;
  const char *best = NULL;
  size_t best_d = SIZE_MAX, wl = strlen(word);
  for (size_t i = 0; i < n; i++) {
    size_t cl = strlen(cands[i]);
    size_t d = cm__osa_distance(word, wl, cands[i], cl, true);
    /* a prefix of a candidate ("--pool" for "--pools") counts as close */
    if (wl >= 3 && wl < cl && !strncasecmp(word, cands[i], wl) && d > 1) d = 1;
    if (d < best_d) best_d = d, best = cands[i];
  }
  size_t limit = wl <= 4 ? 1 : wl <= 8 ? 2 : 3;
  return best_d <= limit ? best : NULL;
}
