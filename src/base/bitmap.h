/*
 * bitmap.h - single-bit access to bitmaps of uint64_t words, once for the
 * tree (not installed): bit i lives in word i / 64 at position i % 64. The
 * arena's granule maps and the VM trackers of the storages use these.
 * Inline, pure, no bounds checks: the caller owns the sizes.
 */
#ifndef CM_BASE_BITMAP_H
#define CM_BASE_BITMAP_H

#include <stdbool.h>
#include <stdint.h>

static inline bool cm__bit(const uint64_t *bm, uint64_t i) { return (bm[i / 64] >> (i % 64)) & 1; }
static inline void cm__bit_set(uint64_t *bm, uint64_t i) { bm[i / 64] |= 1ull << (i % 64); }
static inline void cm__bit_clr(uint64_t *bm, uint64_t i) { bm[i / 64] &= ~(1ull << (i % 64)); }

#endif
