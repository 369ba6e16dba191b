/*
 * cubemem/device.h - the per-stream runtime over the memory manager (spec
 * §8.1, §8.2, §8.4, §5.8, §7): one "Main GPU Memory" manager and one
 * "Pinned CPU Memory" manager per stream, created lazily, with a drop queue,
 * cross-stream pins, capture windows and retry-on-failure.
 *
 * Streams. A stream is named by a 64-bit id; it lives in slot
 * `id % max_streams` (default 128), so ids that share a slot share the
 * stream. A slot is created on the first call that names it. Each stream
 * owns:
 *  - a main manager over a storage made by the device's storage factory, with
 *    the installed layout (cm_device_install_pools) if one was installed
 *    before the stream was created, else the configured default;
 *  - a pinned manager over a storage made by the pinned factory (default:
 *    host storage, alignment 16), props {device max_page_size, alignment 16},
 *    always the configured default layout, initial mode Auto;
 *  - a drop queue whose fences are events on the main storage (§7);
 *  - a work cursor (advanced by cm_device_submit), `last_synced`, a list of
 *    cross-stream pins waiting for events, an error list and a capture flag.
 * Every cap (max_pool_size) therefore applies per stream, and memory held by
 * one stream is not reused by another.
 *
 * Events. The device uses the storage's optional event ops (storage.h). A
 * storage without them (sim, host) behaves as if every event completed at
 * once: no-op events.
 *
 * Thread-safety. Every function may be called from any thread. Each stream
 * slot has its own mutex, and a device mutex guards slot creation and the
 * installed layout; so several threads may drive different streams in
 * parallel, and calls on the same stream are serialised. Handles and
 * bindings returned by the device may be cloned and released from any
 * thread at any time (core guarantee, memory.h). No call holds two stream
 * locks at once. There is no background thread: completed cross-stream
 * pins are released by polling their events on every call that takes a
 * stream's lock, on cleanup, and at destroy (which waits for all of them).
 * cm_device_destroy must not race with any other call on the device, nor
 * with releases of handles it returned.
 *
 * Errors follow common.h: 0 or a negative CM_E* code, detail in diag, and a
 * failed call leaves the device unchanged (except for lazily created
 * streams, which stay).
 */
#ifndef CUBEMEM_DEVICE_H
#define CUBEMEM_DEVICE_H

#include "cubemem/common.h"
#include "cubemem/storage.h"
#include "cubemem/memory.h"
#include "cubemem/dropqueue.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- storage factories ------------------------------------------------------- */

/* Create the storage for stream `stream` (called once per stream, under the
 * device lock). On success *out is a new storage that the device then owns.
 * Errors: any CM_E* status, with diag. */
typedef int (*cm_storage_factory_fn)(void *arg, uint64_t stream, cm_storage_t **out,
                                     cm_diag_t *diag);

/* Parameters of the simulated-device factory (see cm_storage_sim_create);
 * each stream gets its own simulated storage with this capacity. */
typedef struct cm_sim_factory {
  uint64_t capacity;
  bool fail_over_capacity;
  uint64_t granularity;
} cm_sim_factory_t;

/* Factory: arg is a const cm_sim_factory_t * (must outlive the device) or
 * NULL for an unlimited simulated device. */
CM_API CM_NODISCARD int cm_storage_factory_sim(void *arg, uint64_t stream, cm_storage_t **out,
                                               cm_diag_t *diag);
/* Factory: host storage; arg is a const uint64_t * alignment or NULL (16). */
CM_API CM_NODISCARD int cm_storage_factory_host(void *arg, uint64_t stream, cm_storage_t **out,
                                                cm_diag_t *diag);

/* ---- the device ------------------------------------------------------------------ */

#define CM_DEVICE_DEFAULT_MAX_STREAMS 128u

typedef struct cm_device_config {
  cm_storage_factory_fn storage; /* required: main (device) storage per stream */
  void *storage_arg;
  cm_storage_factory_fn pinned; /* NULL: cm_storage_factory_host */
  void *pinned_arg;
  cm_device_props_t props; /* device properties (CUDA: {total / 4, 512}) */
  /* Template of every main manager: the default layout (pools/pool_count or
   * preset), persistent_memory, initial_mode and logger are used; name and
   * props are set by the device. The pools array is copied at create. The
   * logger (borrowed, must outlive the device) also gets the retry warnings. */
  cm_manager_config_t manager;
  uint32_t max_streams;   /* 0 = 128 */
  cm_flush_policy_t drop; /* drop-queue thresholds; 0 = defaults (64 buffers, 64 MiB) */
} cm_device_config_t;

typedef struct cm_device cm_device_t;

/* Defaults: no storage factory (must be set), host pinned factory, props
 * {128 MiB, 512}, cm_manager_config_init() template, 128 streams, default
 * drop policy. */
CM_API void cm_device_config_init(cm_device_config_t *cfg);

/* Create a device; no stream exists yet. Errors: CM_EINVAL (no factory,
 * bad template), CM_ENOMEM. */
CM_API CM_NODISCARD int cm_device_create(const cm_device_config_t *cfg, cm_device_t **out,
                                         cm_diag_t *diag);
/* Wait for every outstanding event, release the cross-stream pins, drain the
 * drop queues, then destroy every stream's managers and storages. Handles
 * still held by users stay valid objects (see cm_manager_destroy). NULL ok. */
CM_API void cm_device_destroy(cm_device_t *dev);

/* Slot of a stream id (id % max_streams). */
CM_API uint32_t cm_device_slot(const cm_device_t *dev, uint64_t stream);
/* Number of streams created so far. */
CM_API uint32_t cm_device_stream_count(const cm_device_t *dev);
/* Whether the slot of `stream` has been created (does not create it). */
CM_API bool cm_device_has_stream(const cm_device_t *dev, uint64_t stream);

/* Reserve `size` bytes on `stream` and bind them to a new handle at the
 * stream's cursor (spec §8.2 empty/create). *out receives the handle (one
 * reference you own). Retry (§8.2): if the reservation fails with anything
 * but CM_ETOOBIG, a warning "device allocation of N B failed (...);
 * reclaiming and retrying" goes to the logger, the stream is cleaned up as
 * by cm_device_cleanup, and the reservation is tried once more; its result
 * is final. Errors: those of cm_manager_reserve, CM_ENOMEM, or a stream
 * creation error. */
CM_API CM_NODISCARD int cm_device_reserve(cm_device_t *dev, uint64_t stream, uint64_t size,
                                          cm_handle_t *out, cm_diag_t *diag);
/* Reserve pinned host memory on `stream` (staging buffers). *res (optional)
 * gets the resolved resource (host pointer). No retry. Errors: as
 * cm_manager_reserve / cm_manager_get_resource. */
CM_API CM_NODISCARD int cm_device_reserve_pinned(cm_device_t *dev, uint64_t stream,
                                                 uint64_t size, cm_handle_t *out,
                                                 cm_resource_t *res, cm_diag_t *diag);
/* Resolve a binding made on `stream` (materialises lazy memory). Errors:
 * those of cm_manager_get_resource. */
CM_API CM_NODISCARD int cm_device_resource(cm_device_t *dev, uint64_t stream, cm_binding_t b,
                                           cm_resource_t *out, cm_diag_t *diag);

/* ---- statistics ------------------------------------------------------------------- */

/* Sum of memory_usage over every created stream's main manager (pinned memory
 * is not included). Creates nothing. */
CM_API void cm_device_memory_usage(cm_device_t *dev, cm_usage_t *out);
/* The main manager's report of `stream` (created if needed): *usage (opt.),
 * the dynamic pools in routing order into dynamic[0..cap) with their number
 * in *dynamic_count (opt.; the full number even when cap is smaller), and the
 * persistent pool into *persistent (opt.). Errors: CM_EINVAL, stream creation
 * errors. */
CM_API CM_NODISCARD int cm_device_memory_report(cm_device_t *dev, uint64_t stream,
                                                cm_usage_t *usage, cm_pool_report_t *dynamic,
                                                size_t cap, size_t *dynamic_count,
                                                cm_pool_report_t *persistent, cm_diag_t *diag);
/* Usage of the stream's pinned manager (created if needed). */
CM_API CM_NODISCARD int cm_device_pinned_usage(cm_device_t *dev, uint64_t stream,
                                               cm_usage_t *out, cm_diag_t *diag);
/* Number of reservations retried after a failure, over all streams. */
CM_API uint64_t cm_device_retries(const cm_device_t *dev);

/* ---- cleanup, layouts, modes ------------------------------------------------------ */

/* Explicit cleanup of every created stream (§8.2): unless the stream is
 * capturing, flush its drop queue twice; release completed cross-stream pins;
 * then cleanup(true) on its main and pinned managers. Creates nothing. */
CM_API void cm_device_cleanup(cm_device_t *dev);
/* The same for one stream (created if needed). */
CM_API CM_NODISCARD int cm_device_cleanup_stream(cm_device_t *dev, uint64_t stream,
                                                 cm_diag_t *diag);
/* Install a dynamic layout (§8.2): resolve `pools` against the device props
 * (CM_ECONFIG with the reason on an invalid list; nothing changes), store it
 * for streams created later, then install it on `stream`. A stream already in
 * an error state gives CM_ESTREAM (the layout still applies to later
 * streams); a stream with live dynamic allocations gives CM_EBUSY (its old
 * layout stays). Other existing streams keep theirs. */
CM_API CM_NODISCARD int cm_device_install_pools(cm_device_t *dev, uint64_t stream,
                                                const cm_pool_options_t *pools, size_t n,
                                                cm_diag_t *diag);
/* Open a persistent (PERSISTENT) or dedicated (DEDICATED) window, or close
 * the innermost one (AUTO), on the stream's main manager only (see
 * cm_manager_set_mode). */
CM_API CM_NODISCARD int cm_device_set_mode(cm_device_t *dev, uint64_t stream,
                                           cm_alloc_mode_t mode, cm_diag_t *diag);

/* ---- work, events and cross-stream safety (§8.4) ------------------------------------ */

/* The stream's cursor: the index of the next unit of work (starts at 0).
 * Bindings made by cm_device_reserve carry the cursor at their bind. */
CM_API CM_NODISCARD int cm_device_cursor(cm_device_t *dev, uint64_t stream, uint64_t *out,
                                         cm_diag_t *diag);
/* Mark the end of one unit of work enqueued on `stream` (e.g. a kernel
 * launch): record an event after it, attach the cross-stream pins taken for
 * this work to that event, advance the cursor, and flush the drop queue if
 * its policy says so (not while capturing). Errors: event errors (the pins
 * are then kept until the next submit or cleanup). */
CM_API CM_NODISCARD int cm_device_submit(cm_device_t *dev, uint64_t stream, cm_diag_t *diag);
/* Block until all work on `stream` has completed: sync its events, release
 * its cross-stream pins, set last_synced = cursor. */
CM_API CM_NODISCARD int cm_device_sync(cm_device_t *dev, uint64_t stream, cm_diag_t *diag);

/* Use a binding made on stream `origin` for work on stream `user`.
 * Same stream: only resolves it. Otherwise: the binding's cursor is read from
 * the origin's manager (a failed lookup counts as UINT64_MAX); if
 * cursor >= last_synced[origin], the origin's pending work is waited for
 * (event on the origin, synced now; last_synced[origin] = its cursor) and
 * *waited (optional) is set; then a clone of the binding is pinned on `user`
 * until an event recorded by the next cm_device_submit(user) completes, so
 * the slice stays busy on the origin while `user` may read it. *res
 * (optional) gets the resource, resolved through the origin's manager.
 * Errors: CM_ENOTFOUND (binding unknown to the origin: nothing pinned),
 * event errors, CM_ENOMEM. The caller keeps its binding reference. */
CM_API CM_NODISCARD int cm_device_use_binding(cm_device_t *dev, cm_binding_t b, uint64_t origin,
                                              uint64_t user, cm_resource_t *res, bool *waited,
                                              cm_diag_t *diag);
/* Cross-stream pins held by `stream`: pinned for work not yet submitted plus
 * those waiting for their event (after polling). */
CM_API size_t cm_device_pins(cm_device_t *dev, uint64_t stream);
/* last_synced of `stream` (0 before any sync). */
CM_API uint64_t cm_device_last_synced(cm_device_t *dev, uint64_t stream);

/* ---- the drop queue (§7.3) -------------------------------------------------------- */

/* Defer the release of a host buffer that work on `stream` may still read:
 * it is freed (free_fn(arg, ptr, size)) at the second drop-queue flush after
 * this call. Flushes when the policy says so (not while capturing). On error
 * the caller keeps the buffer. Errors: CM_ENOMEM, stream creation errors. */
CM_API CM_NODISCARD int cm_device_defer_free(cm_device_t *dev, uint64_t stream, void *ptr,
                                             uint64_t size, cm_drop_free_fn free_fn, void *arg,
                                             cm_diag_t *diag);
/* Defer the release of a pinned staging buffer: consumes `h` (a pinned
 * handle from cm_device_reserve_pinned), released by the queue as above. */
CM_API CM_NODISCARD int cm_device_defer_release(cm_device_t *dev, uint64_t stream, cm_handle_t h,
                                                uint64_t size, cm_diag_t *diag);
/* Server flush: flush the drop queue once, then the main storage. */
CM_API CM_NODISCARD int cm_device_flush(cm_device_t *dev, uint64_t stream, cm_diag_t *diag);
/* Buffers held by the stream's drop queue (staged + pending). */
CM_API size_t cm_device_dropped(cm_device_t *dev, uint64_t stream);

/* ---- graph capture (§5.8, §7.3) ----------------------------------------------------- */

/* Begin a capture window on `stream`: flush the drop queue twice (unless
 * already capturing), then cm_manager_capture_begin on the main manager.
 * While capturing, cleanup frees nothing and the drop queue is not flushed. */
CM_API CM_NODISCARD int cm_device_capture_begin(cm_device_t *dev, uint64_t stream,
                                                cm_diag_t *diag);
CM_API CM_NODISCARD int cm_device_capture_priming_end(cm_device_t *dev, uint64_t stream,
                                                      cm_diag_t *diag);
/* End the window: *pins gets the captured graph's pins (see memory.h; NULL if
 * no capture was active) - hold them as long as the graph lives - then flush
 * the drop queue twice. */
CM_API CM_NODISCARD int cm_device_capture_end(cm_device_t *dev, uint64_t stream, cm_pins_t **pins,
                                              cm_diag_t *diag);
CM_API bool cm_device_capturing(cm_device_t *dev, uint64_t stream);

/* ---- stream errors ----------------------------------------------------------------- */

/* Record an error on `stream` (a backend that saw a launch or flush fail).
 * The main manager runs cleanup(false), and the stream is in an error state
 * (install_pools gives CM_ESTREAM) until cm_device_clear_errors. */
CM_API CM_NODISCARD int cm_device_report_error(cm_device_t *dev, uint64_t stream, int status,
                                               const char *message);
/* Number of recorded errors; the first one's message goes to diag (opt.). */
CM_API size_t cm_device_errors(cm_device_t *dev, uint64_t stream, cm_diag_t *first);
CM_API void cm_device_clear_errors(cm_device_t *dev, uint64_t stream);

/* ---- advanced ------------------------------------------------------------------------- */

/* The stream's main (pinned = false) or pinned manager, created if needed.
 * The pointer lives as long as the device. The caller must not use it
 * concurrently with device calls on the same stream. */
CM_API CM_NODISCARD int cm_device_manager(cm_device_t *dev, uint64_t stream, bool pinned,
                                          cm_manager_t **out, cm_diag_t *diag);

#ifdef __cplusplus
}
#endif
#endif
