/* util.h - small internal helpers shared across the library (not installed). */
#ifndef CM_BASE_UTIL_H
#define CM_BASE_UTIL_H

#include <stdarg.h>
#include "cubemem/common.h"

/* Fill diag (if non-NULL) with `code` and a formatted message; returns code. */
int cm__diag_set(cm_diag_t *diag, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int cm__diag_vset(cm_diag_t *diag, int code, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

/* Round n up to a multiple of a (a >= 1); returns false on overflow. */
static inline bool cm__round_up(uint64_t n, uint64_t a, uint64_t *out) {
  uint64_t r = n % a;
  if (r == 0) { *out = n; return true; }
  uint64_t add = a - r;
  if (n > UINT64_MAX - add) return false;
  *out = n + add;
  return true;
}
static inline uint64_t cm__pad(uint64_t n, uint64_t a) { return (a - n % a) % a; }

/* AddressSanitizer: poison host bytes that no live slice owns, so a
 * use-after-free into memory cached by a pool is reported. No-ops otherwise. */
#if defined(__SANITIZE_ADDRESS__)
#define CM_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CM_ASAN 1
#endif
#endif
#ifdef CM_ASAN
#include <sanitizer/asan_interface.h>
#define CM__POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (size_t)(n))
#define CM__UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (size_t)(n))
#else
#define CM__POISON(p, n) ((void)(p), (void)(n))
#define CM__UNPOISON(p, n) ((void)(p), (void)(n))
#endif

/* Monotonic clock in nanoseconds. */
uint64_t cm__now_ns(void);

/* Run the statement `expr`; when `on`, set the uint64_t `dt` to the
 * nanoseconds it took (two clock reads), else to 0 (no clock read). */
#define CM__TIME_NS(on, dt, expr)       \
  do {                                  \
    if (on) {                           \
      uint64_t t0__ = cm__now_ns();     \
      expr;                             \
      (dt) = cm__now_ns() - t0__;       \
    } else {                            \
      expr;                             \
      (dt) = 0;                         \
    }                                   \
  } while (0)

#endif
