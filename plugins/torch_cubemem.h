/*
 * torch_cubemem.h - what libcubemem_torch.so exports (and the two internal
 * functions its C++ unit calls). Every export is thread-safe.
 *
 * PyTorch (torch.cuda.memory.CUDAPluggableAllocator):
 *   cubemem_torch_malloc(size, device, stream): a device pointer on `stream`
 *     of cuda:`device`, or NULL for size <= 0. On failure it throws a C++
 *     exception derived from std::exception (cubemem::OutOfMemoryError when
 *     the device is out of memory, cubemem::Error otherwise) whose what() is
 *     the message of cubemem_torch_last_error(); PyTorch turns it into a
 *     Python RuntimeError. Never call it through ctypes (an exception cannot
 *     cross ctypes): use cubemem_torch_try_malloc.
 *   cubemem_torch_free(ptr, size, device, stream): give ptr back (NULL ok);
 *     an unknown pointer is recorded in cubemem_torch_last_error, nothing else.
 * C callers, ctypes, CuPy:
 *   cubemem_torch_try_malloc / cubemem_torch_try_free: the same, returning
 *     NULL on failure (reason in cubemem_torch_last_error).
 * Reporting and hooks: cubemem_torch_stats (one device's figures; returns 1,
 *   0 when cubemem has not used the device, -1 on bad arguments),
 *   cubemem_torch_reserved / _peak_reserved / _in_use (bytes),
 *   cubemem_torch_report (text, snprintf semantics), cubemem_torch_record_stream (the
 *   signature of CUDAPluggableAllocator's record_stream hook: ptr is also used
 *   on stream; its memory is reused only after that stream's work done;
 *   returns a cubemem status), cubemem_torch_empty_cache (every cached page
 *   back to the driver), cubemem_torch_retire_stream (call
 *   before destroying a stream when the driver has no cuStreamGetId),
 *   cubemem_torch_enable_peer_access (cuda:peer may use cuda:device's memory;
 *   returns a cubemem status, 0 = CM_OK), cubemem_torch_last_error (the
 *   latest error text, "" after a malloc of size <= 0; a static buffer,
 *   valid until the next error).
 * CUBEMEM_LOG: while the log is open (or not opened yet), each allocation
 *   and free is serialised with its row, so the log is a consistent trace
 *   whatever threads call; a slow open (a FIFO) makes callers wait, losing
 *   nothing. A failed open, write, flush or close is reported in
 *   cubemem_torch_last_error ("CUBEMEM_LOG=PATH: writing failed at event N
 *   (reason); logging stopped ...") and stops the log; allocation goes on.
 */
#ifndef CUBEMEM_TORCH_H
#define CUBEMEM_TORCH_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CMT_EXPORT __attribute__((visibility("default")))

typedef struct cubemem_torch_stats {
  uint64_t in_use, reserved, peak_reserved, cached, padding;
  uint64_t allocs, frees, failed, retries, live, streams;
  uint64_t storage_allocs, storage_time_ns;
  uint64_t device_free, device_total; /* cuMemGetInfo; 0 when unknown */
  uint64_t peak_in_use; /* high-water mark of in_use (requested bytes of live pointers) */
} cubemem_torch_stats_t;

CMT_EXPORT void *cubemem_torch_malloc(ssize_t size, int device, void *stream);
CMT_EXPORT void cubemem_torch_free(void *ptr, ssize_t size, int device, void *stream);
CMT_EXPORT void *cubemem_torch_try_malloc(ssize_t size, int device, void *stream);
CMT_EXPORT void cubemem_torch_try_free(void *ptr, ssize_t size, int device, void *stream);
CMT_EXPORT int cubemem_torch_stats(int device, cubemem_torch_stats_t *out);
CMT_EXPORT size_t cubemem_torch_report(char *buf, size_t cap);
CMT_EXPORT unsigned long long cubemem_torch_reserved(int device);
CMT_EXPORT unsigned long long cubemem_torch_peak_reserved(int device);
CMT_EXPORT unsigned long long cubemem_torch_in_use(int device);
CMT_EXPORT void cubemem_torch_empty_cache(void);
CMT_EXPORT int cubemem_torch_record_stream(void *ptr, void *stream);
CMT_EXPORT void cubemem_torch_retire_stream(int device, void *stream);
CMT_EXPORT int cubemem_torch_enable_peer_access(int device, int peer);
CMT_EXPORT const char *cubemem_torch_last_error(void);

/* Internal (hidden): the allocation behind every entry point. Returns CMT_OK
 * (*out set, NULL for size <= 0), CMT_OOM or CMT_ERROR with the message in
 * msg (cap bytes, may be NULL/0). */
enum { CMT_OK = 0, CMT_OOM = 1, CMT_ERROR = 2 };
int cmt__alloc(ssize_t size, int device, void *stream, void **out, char *msg, size_t cap);
void cmt__free(void *ptr, int device, void *stream);

#ifdef __cplusplus
}
#endif
#endif
