/*
 * cubemem/common.h - status codes, diagnostics and export macros shared by
 * every public header of cubemem.
 *
 * Conventions (apply to the whole public API):
 *  - Fallible functions return int: CM_OK (0) on success, a negative CM_E*
 *    code on failure. Results go through out-parameters.
 *  - Functions that can fail in ways a person must act on take an optional
 *    cm_diag_t *diag (may be NULL). On failure it receives a message and, where
 *    known, file/line/column/key. On success it is left untouched.
 *  - A failed call leaves every object it was given unchanged.
 */
#ifndef CUBEMEM_COMMON_H
#define CUBEMEM_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(CM_BUILDING_LIBRARY)
#define CM_API __attribute__((visibility("default")))
#else
#define CM_API
#endif

#define CM_NODISCARD __attribute__((warn_unused_result))

#define CM_VERSION_MAJOR 0
#define CM_VERSION_MINOR 1
#define CM_VERSION_PATCH 0
#define CM_VERSION_NUMBER (CM_VERSION_MAJOR * 10000 + CM_VERSION_MINOR * 100 + CM_VERSION_PATCH)

/* One list drives the enum, cm_err_name() and cm_strerror(). */
#define CM_ERRNO_MAP(XX)                                                              \
  XX(EINVAL, -1, "invalid argument")                                                  \
  XX(ENOMEM, -2, "out of host memory")                                                \
  XX(EOOM, -3, "device out of memory")                                                \
  XX(ETOOBIG, -4, "no pool accepts an allocation of this size")                      \
  XX(ECAPACITY, -5, "memory pool capacity exceeded")                                 \
  XX(ENOTFOUND, -6, "memory location not found")                                      \
  XX(ESTORAGE, -7, "storage backend failure")                                         \
  XX(EHANDLE, -8, "storage handle not found")                                         \
  XX(EMAPPING, -9, "lazy storage mapping failed")                                     \
  XX(ECONFIG, -10, "invalid configuration")                                           \
  XX(EBUSY, -11, "resource busy")                                                     \
  XX(ENOTSUP, -12, "operation not supported")                                         \
  XX(ENODEV, -13, "no device or driver available")                                    \
  XX(EIO, -14, "input/output error")                                                  \
  XX(ECORRUPT, -15, "internal invariant violated")                                    \
  XX(EOVERFLOW, -16, "size arithmetic overflow")                                      \
  XX(EPARSE, -17, "parse error")                                                      \
  XX(ESTREAM, -18, "stream unavailable")

typedef enum cm_status {
  CM_OK = 0,
#define CM__ERR_ENUM(name, val, text) CM_##name = (val),
  CM_ERRNO_MAP(CM__ERR_ENUM)
#undef CM__ERR_ENUM
} cm_status_t;

/* Diagnostics filled by a failing call. Caller-owned; zero-initialise or use
 * cm_diag_clear(). Strings are NUL-terminated and truncated to fit. */
typedef struct cm_diag {
  int code;              /* the CM_E* status of the failure */
  char message[512];     /* human-readable, actionable text */
  char file[256];        /* source file (config errors), else "" */
  uint32_t line;         /* 1-based line, 0 if unknown */
  uint32_t column;       /* 1-based column, 0 if unknown */
  char key[128];         /* dotted key path (config errors), else "" */
  long native;           /* backend-native error code (e.g. CUresult), 0 if none */
} cm_diag_t;

/* Static text for a status code ("unknown error" for unknown codes).
 * Thread-safe; never fails; the returned string is static. */
CM_API const char *cm_strerror(int status);
/* Symbolic name such as "CM_ETOOBIG". Thread-safe; static string. */
CM_API const char *cm_err_name(int status);
/* Reset a diag to empty. NULL is allowed. Thread-safe on distinct diags. */
CM_API void cm_diag_clear(cm_diag_t *diag);

/* Library version as CM_VERSION_NUMBER; compare with the header's to detect
 * a header/library mismatch. Thread-safe. */
CM_API int cm_version(void);

/* ---- vocabulary shared by the layers -------------------------------------- */

/* How the persistent pool is used (`memory.persistent_memory`; the manager
 * and the configuration both name it). */
typedef enum cm_persistent_memory {
  CM_PERSISTENT_ENABLED = 0,    /* default: windows honoured */
  CM_PERSISTENT_SIZE_MATCH = 1, /* also route size-matching auto allocations */
  CM_PERSISTENT_DISABLED = 2,   /* mode() ignored, dynamic only */
  CM_PERSISTENT_ENFORCED = 3,   /* everything persistent */
} cm_persistent_memory_t;

/* `memory.cuda.allocator` ([NEW] in the seed schema; the configuration and
 * the CUDA storage both name it). */
typedef enum cm_cuda_allocator {
  CM_CUDA_SYNC = 0,  /* "sync" (default): cuMemAlloc / cuMemFree */
  CM_CUDA_ASYNC = 1, /* "async": stream-ordered allocator */
} cm_cuda_allocator_t;

/* The debug level (0-3; described in cubemem/memory.h, "misuse"): starts as
 * the environment variable CM_DEBUG (read once, on first use);
 * cm_debug_set_level overrides it. Thread-safe; cannot fail. */
CM_API int cm_debug_level(void);
CM_API void cm_debug_set_level(int level);

/* BytesFormat (spec §9.3): "999 B", "1.02 KB", "6.44 GB", written with
 * snprintf semantics into buf[cap] (buf may be NULL when cap is 0); returns
 * the length needed. Thread-safe; cannot fail. */
CM_API size_t cm_format_bytes(uint64_t bytes, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
