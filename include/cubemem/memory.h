/*
 * cubemem/memory.h - handles, bindings, pool layouts and the memory manager
 * (spec §3, §4, §5, §6, §9, §11.5).
 *
 * Model. A manager carves memory obtained from one storage into slices. Each
 * slice is identified by a reference-counted descriptor. A cm_handle_t is one
 * counted reference that also counts for can_mut; a cm_binding_t is one counted
 * reference that does not. A slice is free again as soon as no handle and no
 * binding refers to it; there is no free() call: release your references.
 *
 * Threading. A manager is driven by one thread at a time (the "device
 * thread"): every cm_manager_* call on the same manager must be serialised by
 * the caller. Handle and binding functions (clone, release, can_mut, id) are
 * safe from ANY thread at any time, concurrently with the manager; a release
 * that frees a slice only queues it (lock-free) and the manager picks it up on
 * its next call. Destroying a manager must not race with releases.
 *
 * Values. Every cm_handle_t / cm_binding_t value returned to you is one
 * reference you own and must release exactly once (or pass to a function
 * documented as consuming it). Copying the struct does not add a reference.
 */
#ifndef CUBEMEM_MEMORY_H
#define CUBEMEM_MEMORY_H

#include "cubemem/common.h"
#include "cubemem/storage.h"
#include "cubemem/log.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- handles and bindings ------------------------------------------------- */

typedef struct cm_desc cm_desc_t; /* opaque, shared, reference-counted */

typedef struct cm_handle {
  cm_desc_t *d; /* NULL = empty handle */
} cm_handle_t;

typedef struct cm_binding {
  cm_desc_t *d; /* NULL = empty binding */
} cm_binding_t;

/* A location inside a manager: which pool (255 = persistent), which page, and
 * where in it. `init` is false for a handle never placed. */
typedef struct cm_location {
  uint8_t pool;
  uint32_t page;   /* page, slot page or arena region index; UINT32_MAX for an arena's
                    * stitched slice (an address range of its own: cm_pool_report_t) */
  uint32_t slice;  /* slot index for direct, persistent and exclusive pools; 0 for
                    * sliced and arena pools */
  uint64_t offset; /* byte offset of the slice in its page / storage range */
  bool init;
} cm_location_t;

#define CM_PERSISTENT_POOL 255u
#define CM_DEDICATED_POOL 254u /* reservations of the dedicated mode (cm_alloc_mode_t) */

/* A new, unplaced handle (for bind). Errors: CM_ENOMEM. Any thread. */
CM_API CM_NODISCARD int cm_handle_new(cm_handle_t *out);
/* A second reference to the same slice. h must be non-empty. Any thread. */
CM_API cm_handle_t cm_handle_clone(cm_handle_t h);
/* Release the reference; empty handles are ignored. Any thread. */
CM_API void cm_handle_release(cm_handle_t h);
/* Whether the caller holds the only user handle (bindings do not count).
 * Empty handle: false. Any thread. */
CM_API bool cm_handle_can_mut(cm_handle_t h);
/* The descriptor id (ids are reused when a freed slice is reused). 0 if empty. */
CM_API uint64_t cm_handle_id(cm_handle_t h);
/* Turn a handle into a binding (consumes h). Any thread. */
CM_API cm_binding_t cm_handle_into_binding(cm_handle_t h);
/* A new binding from a handle, without consuming it. Any thread. */
CM_API cm_binding_t cm_handle_binding(cm_handle_t h);
CM_API cm_binding_t cm_binding_clone(cm_binding_t b);
CM_API void cm_binding_release(cm_binding_t b);
CM_API uint64_t cm_binding_id(cm_binding_t b);

/* ---- misuse detection ------------------------------------------------------ */

/* Releasing a handle or binding more often than it was obtained is outside
 * the contract. The release that finds its slice's descriptor without any
 * reference left (the usual double release: the slice's last reference
 * released twice) is detected at every level, at no cost to ordinary
 * releases: it is ignored (so the counts do not wrap around and the slice is
 * not leaked), counted process-wide and on the owning manager, and
 * cm_manager_check reports it as a violation ("double release"). Not
 * detectable: a second release while other references to the same slice
 * remain (it drops one of theirs; cm_manager_check sees a handle count that
 * wrapped around), or one after the slice was handed out again.
 *
 * The debug level adds reports at the moment of the misuse: 0 (default)
 * none; 1 a warning through the owning manager's logger (stderr when it has
 * none); 2 the same, then abort(); 3 also runs cm_manager_check after every
 * mutating manager call (reserve, reserve_restricted, bind, install_pools,
 * cleanup, capture_end, dry_run_end, relocate) of managers created at that level, and aborts with the first
 * violation's message (slow: for tests; CI runs the unit suite at it). It
 * starts as the environment variable CM_DEBUG (read once, on first use), and
 * cm_debug_set_level overrides it.
 * All three functions are thread-safe. */
/* cm_debug_level and cm_debug_set_level are declared in cubemem/common.h
 * (the level lives in base, below every layer that reads it). */
/* Double releases detected so far in the process. */
CM_API uint64_t cm_debug_double_releases(void);

/* ---- device properties and pool layouts ------------------------------------ */

/* cm_device_props_t (what a device reports: max page size, alignment) is
 * declared in cubemem/storage.h, where the backends produce it. */

typedef enum cm_pool_kind {
  CM_POOL_SLICED = 0,    /* pages carved into slices, coalesced */
  CM_POOL_EXCLUSIVE = 1, /* one allocation per page, reused by best fit */
  CM_POOL_DIRECT = 2,    /* one storage allocation per slice, exact-size reuse */
  CM_POOL_ARENA = 3,     /* cubemem's default: segregated good-fit arena (see docs) */
  CM_POOL_PERSISTENT = 4, /* the persistent pool (reports only; not a dynamic pool kind) */
  CM_POOL_ADAPTIVE = 5,   /* sliced pages whose size follows the largest allocation */
  CM_POOL_DEDICATED = 6,  /* the dedicated pool (reports only; not a dynamic pool kind) */
} cm_pool_kind_t;

/* One dynamic pool. Fields not used by a kind are ignored. "has_" flags tell
 * an explicit value from "not set" where the spec distinguishes None. */
typedef struct cm_pool_options {
  cm_pool_kind_t kind;
  uint64_t page_size;      /* sliced: page bytes; arena: segment/chunk bytes (0 = auto);
                            * adaptive: the first (smallest) page size, 0 = 2 MiB; in a
                            * report, the adaptive pool's current page size */
  uint64_t max_slice_size; /* sliced: largest slice (has_max_slice_size) */
  bool has_max_slice_size;
  uint64_t max_pool_size; /* sliced/arena: cap in bytes (has_max_pool_size) */
  bool has_max_pool_size;
  uint64_t max_alloc_size; /* exclusive: largest allocation; arena: largest request;
                            * sliced: largest request when non-zero (the near-page
                            * rule then applies only up to it; 0 = no limit);
                            * adaptive: the largest page size (0 = the device's
                            * max_page_size), which is also its largest allocation */
  uint64_t dealloc_period; /* exclusive/sliced/arena: release check period in reservations */
  bool has_dealloc_period;
  uint64_t reclaim_at; /* direct: watermark in bytes (has_reclaim_at) */
  bool has_reclaim_at;
  /* arena on a virtual-memory storage: the largest physical memory object
   * (one driver allocation, mapped and unmapped whole) in bytes, rounded up to
   * the granularity, a strict cap (0 = the arena's default: one granule;
   * while the device stays more than half free, a block of whole granules as
   * one object and other runs in objects of up to 1/16384 of the device's
   * memory) */
  uint64_t max_object_size;
  /* arena with the default objects (max_object_size 0) on a virtual-memory
   * storage: while the device stays more than half free the arena holds what
   * it maps (a second run of a job makes no driver call) and gives memory
   * back only under pressure or on an explicit cleanup. A GPU shared with
   * other processes may want it back earlier: with has_release_threshold,
   * free mapped memory beyond release_threshold bytes is given back before
   * each map and at each periodic cleanup (layout key `keep`; 0 gives back
   * everything free), as the CUDA memory pool's release threshold does. */
  uint64_t release_threshold;
  bool has_release_threshold;
} cm_pool_options_t;

#define CM_MAX_DYNAMIC_POOLS 254u

typedef enum cm_preset {
  CM_PRESET_DEFAULT = 0,         /* cubemem's own default layout */
  CM_PRESET_SUBSLICES = 1,       /* the reference's SubSlices (spec §5.3) */
  CM_PRESET_EXCLUSIVE_PAGES = 2, /* the reference's ExclusivePages (spec §5.3) */
  CM_PRESET_ADAPTIVE = 3,        /* the reference's newer Adaptive (see below) */
} cm_preset_t;

/* The Adaptive preset, in routing order:
 *  0. exclusive, max_alloc_size 0: zero-byte allocations, each on its own
 *     page (max_alloc_size 0 accepts size 0 only, as everywhere in cubemem;
 *     sizes 1..alignment go to pool 1);
 *  1. sliced, kernel metadata: 8 MiB pages, slices up to 64 KiB (both
 *     rounded up to the alignment), max_alloc_size 64 KiB: it serves nothing
 *     larger (no near-page rule, which would give each request of 6.4..8 MiB
 *     a metadata page of its own);
 *  2. adaptive pages (CM_POOL_ADAPTIVE): a sliced pool whose page size follows
 *     the largest allocation it has served. The first page size is 2 MiB
 *     (capped by max_page_size, rounded up to the alignment). A request whose
 *     size plus alignment padding exceeds the page makes the page size
 *     size + 1 MiB, rounded up to 1 MiB and to the alignment, clamped to
 *     [first page size, max_page_size]; it never shrinks. A request larger
 *     than max_page_size is CM_ETOOBIG (no pool accepts it), and a request the
 *     device refuses leaves the page size as it was. A growth puts a new
 *     sliced pool of the new size in front; the old one becomes OUTDATED: it
 *     serves no new reservation (even with room), gives each page back to the
 *     storage as soon as that page empties, and is dropped when it holds no
 *     page; before the new pool allocates, the old one releases its empty
 *     pages. Persistent and dedicated reservations never reach the pool, so
 *     they do not move its page size. Its report gives the current page size
 *     (options.page_size) and the outdated pools and pages still held. */

/* Build a preset's pool list for `props` into out[0..cap). *out_count gets the
 * number of pools (also when cap is too small: then CM_EINVAL, nothing
 * written beyond cap). Pure function; thread-safe. */
CM_API CM_NODISCARD int cm_pools_preset(cm_preset_t preset, cm_device_props_t props,
                                        cm_pool_options_t *out, size_t cap, size_t *out_count);

/* Validate and resolve an explicit list (spec §11.5): rounds sizes to the
 * alignment, fills max_slice_size, checks caps. Writes the resolved list to
 * out[0..n). Errors: CM_ECONFIG with the spec's error text in diag->message.
 * Pure function; thread-safe. */
CM_API CM_NODISCARD int cm_pools_resolve(const cm_pool_options_t *in, size_t n,
                                         cm_device_props_t props, cm_pool_options_t *out,
                                         cm_diag_t *diag);

/* Parse a layout written on a command line, e.g.
 * "sliced:page=8MiB,max-slice=2MiB;exclusive:max=128MiB,period=5000;direct"
 * or a preset name ("default", "subslices", "exclusive-pages", "adaptive"); the
 * adaptive kind is written "adaptive:page=2MiB,max=20GiB" (first and largest
 * page size, both optional). Sizes follow the command line's grammar: a
 * plain decimal number, optional spaces and an optional case-insensitive
 * unit, B, KiB/MiB/GiB/TiB (powers of 1024) or KB/MB/GB/TB (powers of 1000);
 * a fraction must give whole bytes ("1.5GiB"); a bare K/M/G/T is refused as
 * ambiguous. The result is resolved against props. Writes up to
 * cap pools. Errors: CM_ECONFIG/CM_EPARSE with a message naming the bad part. */
CM_API CM_NODISCARD int cm_pools_parse(const char *text, cm_device_props_t props,
                                       cm_pool_options_t *out, size_t cap, size_t *out_count,
                                       cm_diag_t *diag);
/* Write a list back in the syntax cm_pools_parse accepts. Returns the length
 * needed (snprintf semantics). */
CM_API size_t cm_pools_format(const cm_pool_options_t *pools, size_t n, char *buf, size_t cap);
/* The option keys of that syntax, for tools that check or complete layouts:
 * returns the keys as written ("page", "max-slice", "cap", "max", "period",
 * "reclaim", "object", in the order cm_pools_parse's messages list them) and
 * sets *count (if non-NULL) to their number and *fields (if non-NULL) to the
 * cm_pool_options_t field names at the same indexes ("page_size", ...),
 * which cm_pools_parse accepts as synonyms. Both arrays are static and
 * read-only (never freed). Cannot fail; pure function; thread-safe. */
CM_API const char *const *cm_pools_keys(size_t *count, const char *const **fields);

/* ---- the manager ------------------------------------------------------------ */

/* cm_persistent_memory_t (ENABLED, SIZE_MATCH, DISABLED, ENFORCED) is declared
 * in cubemem/common.h: the configuration names it too. */

/* Allocation modes. AUTO: the dynamic pools (and the persistent pool where
 * the size-match rule says so). PERSISTENT: the persistent pool (weights).
 * DEDICATED: each reservation is its own storage allocation, outside every
 * pool (the dedicated pool, CM_DEDICATED_POOL, in reports), never reused and
 * given back to the storage at the first cleanup or reservation after it is
 * freed, whatever mode is open then; it does not touch the dynamic pools
 * (so it never moves an adaptive pool's page size). Use it where a buffer
 * must not share memory with others (e.g. a bandwidth probe). */
typedef enum cm_alloc_mode {
  CM_MODE_AUTO = 0,
  CM_MODE_PERSISTENT = 1,
  CM_MODE_DEDICATED = 2,
} cm_alloc_mode_t;

typedef struct cm_manager cm_manager_t;

typedef struct cm_manager_config {
  const char *name;        /* e.g. "Main GPU Memory"; copied; NULL = "Memory" */
  cm_device_props_t props; /* alignment 0 is treated as 1 */
  /* The dynamic pools in routing order, used as given (no validation beyond
   * what construction needs; resolve first with cm_pools_resolve when the
   * list comes from a user). NULL/0 = the preset below. Copied. */
  const cm_pool_options_t *pools;
  size_t pool_count;
  cm_preset_t preset; /* used when pools is NULL */
  cm_persistent_memory_t persistent_memory;
  /* Initial mode: -1 = from persistent_memory (Persistent iff enforced), else a
   * cm_alloc_mode_t given explicitly (auxiliary managers pass CM_MODE_AUTO). */
  int initial_mode;
  cm_logger_t *logger; /* borrowed, may be NULL; must outlive the manager */
  /* Relocation of live data (docs/relocation.md; cm_manager_relocate): when
   * true the manager also relocates on its own at explicit cleanups, when
   * the device refuses memory, and when a graph capture begins. Off by
   * default: nothing moves and every figure stays as without it. */
  bool relocate;
} cm_manager_config_t;

/* Defaults: name "Memory", props {max_page_size 128 MiB, alignment 32}, preset
 * default, persistent enabled, initial_mode -1, no logger. */
CM_API void cm_manager_config_init(cm_manager_config_t *cfg);

/* Create a manager over `storage`. On success the manager owns the storage and
 * destroys it with itself; on failure the caller still owns it.
 * Errors: CM_EINVAL (NULL args, too many pools), CM_ENOMEM. */
CM_API CM_NODISCARD int cm_manager_create(cm_storage_t *storage, const cm_manager_config_t *cfg,
                                          cm_manager_t **out, cm_diag_t *diag);
/* Destroy the manager, its pools and its storage. Handles and bindings still
 * held by users stay valid objects (their lookups fail with CM_ENOTFOUND on
 * no manager; releasing them is safe) but no longer refer to memory. It must
 * not race with a release of one of its handles or bindings on another
 * thread (such a release may be queuing into the manager). NULL ok. */
CM_API void cm_manager_destroy(cm_manager_t *m);

/* Reserve `size` bytes (spec §5.4). *out receives a new handle reference.
 * Errors: CM_ETOOBIG (no pool accepts it), CM_ECAPACITY (capped pools full),
 * CM_EOOM / CM_ESTORAGE (storage), CM_EOVERFLOW (size + padding overflows),
 * CM_ENOMEM. On error *out is empty and the manager is unchanged. A CM_EOOM
 * that stands once the pools gave back what they could adds, for an arena
 * pool, where the memory it holds beyond its live data lies: the free parts
 * of partly filled granules (fragmentation) and the free granules of
 * physical objects a live block still holds, with the option that frees
 * those. */
CM_API CM_NODISCARD int cm_manager_reserve(cm_manager_t *m, uint64_t size, cm_handle_t *out,
                                           cm_diag_t *diag);
/* Page-update restrictions of one reservation (cm_manager_reserve_restricted),
 * for callers that hold page locations (cm_manager_find) or raw addresses
 * the reservation must not disturb. */
typedef enum cm_page_updates {
  CM_PAGES_ALLOW = 0,     /* as cm_manager_reserve */
  /* may allocate new pages, but gives back, releases and renumbers none: no
   * cleanup runs, dedicated allocations freed earlier are not given back,
   * an out-of-memory device gets no release-and-retry, releases queued
   * since the last manager call are taken in by the next unrestricted one,
   * an adaptive pool's growth keeps the old pool's empty pages (given back
   * when the pool next allocates a page unrestricted, or at the next
   * cleanup) and a direct pool's
   * reclaim_at watermark waits. The arena pool still gives free mapped
   * objects back when the device refuses a mapping (never live memory). */
  CM_PAGES_ADD_ONLY = 1,
  /* as ADD_ONLY, and allocates no page either: only room the pools already
   * hold (the first accepting pool with room; a free persistent slice of the
   * effective size in a persistent window); else CM_EBUSY. A dedicated
   * reservation always allocates, so it is CM_EBUSY too. */
  CM_PAGES_FORBIDDEN = 2,
} cm_page_updates_t;

/* cm_manager_reserve with the call's page updates restricted as above.
 * Errors: as cm_manager_reserve, CM_EBUSY (FORBIDDEN and no held room
 * fits), CM_EINVAL (unknown restriction). On error *out is empty and the
 * manager is unchanged. Same threading as every manager call. */
CM_API CM_NODISCARD int cm_manager_reserve_restricted(cm_manager_t *m, uint64_t size,
                                                      cm_page_updates_t updates,
                                                      cm_handle_t *out, cm_diag_t *diag);
/* Bind an assigned (client-created) handle to the slice of `reserved`
 * (spec §3.3). Consumes `reserved` on success AND on failure; `assigned` is
 * borrowed (the manager takes its own reference). Errors: CM_ENOTFOUND. */
CM_API CM_NODISCARD int cm_manager_bind(cm_manager_t *m, cm_handle_t reserved,
                                        cm_handle_t assigned, uint64_t cursor, cm_diag_t *diag);
/* Locate a binding (no materialisation). Errors: CM_ENOTFOUND with the
 * reason ("never initialized", "points to a different allocation", ...). */
CM_API CM_NODISCARD int cm_manager_find(cm_manager_t *m, cm_binding_t b, cm_location_t *out,
                                        cm_diag_t *diag);
CM_API CM_NODISCARD int cm_manager_get_cursor(cm_manager_t *m, cm_binding_t b, uint64_t *out,
                                              cm_diag_t *diag);
/* The storage range of a binding (materialises lazily reserved memory first).
 * size is the requested size. Errors: CM_ENOTFOUND, CM_EMAPPING. */
typedef struct cm_storage_handle {
  uint64_t id, offset, size;
} cm_storage_handle_t;
CM_API CM_NODISCARD int cm_manager_get_storage(cm_manager_t *m, cm_binding_t b,
                                               cm_storage_handle_t *out, cm_diag_t *diag);
/* get_storage, trim offset_start bytes from the front and offset_end bytes from
 * the end, then resolve through the storage. Errors: as above, CM_EHANDLE,
 * CM_EINVAL (trims larger than the size). */
CM_API CM_NODISCARD int cm_manager_get_resource(cm_manager_t *m, cm_binding_t b,
                                                uint64_t offset_start, uint64_t offset_end,
                                                cm_resource_t *out, cm_diag_t *diag);

/* Periodic (explicit=false) or explicit cleanup (spec §5.5). */
CM_API void cm_manager_cleanup(cm_manager_t *m, bool explicit_cleanup);
/* Open a persistent (PERSISTENT) or dedicated (DEDICATED) window, or close
 * the innermost open window (AUTO) (spec §5.6). Windows nest; the innermost
 * one sets the mode: a dedicated window inside a persistent one reserves
 * dedicated memory, a persistent window inside a dedicated one persistent
 * memory; with none open the mode is AUTO. With persistent_memory DISABLED
 * or ENFORCED persistent windows change nothing (the mode stays AUTO or
 * PERSISTENT) but dedicated windows still apply. During a graph capture the
 * mode stays PERSISTENT; windows opened or closed meanwhile take effect when
 * it ends. Windows nest to any depth; past 64 alternations between the two
 * kinds, a deeper window keeps the mode of the one enclosing it (logged as a
 * warning). Unknown modes are ignored. NULL ok. */
CM_API void cm_manager_set_mode(cm_manager_t *m, cm_alloc_mode_t mode);
/* The mode reservations get now (PERSISTENT while capturing). NULL: AUTO. */
CM_API cm_alloc_mode_t cm_manager_mode(const cm_manager_t *m);

/* Replace the dynamic pools (spec §5.9 with the [REC] fixes). The list is used
 * as given (resolve user input first). Errors: CM_EBUSY ("the dynamic pools
 * kept their layout: N bytes are still live in them" - gated on live counts),
 * CM_EINVAL, CM_ENOMEM. The old layout stays on error. */
CM_API CM_NODISCARD int cm_manager_install_pools(cm_manager_t *m, const cm_pool_options_t *pools,
                                                 size_t n, cm_diag_t *diag);

/* ---- relocation of live data and guards (docs/relocation.md) --------------- */

/* Why a relocation runs; it decides where targets may go. */
typedef enum cm_relocate_reason {
  CM_RELOCATE_EXPLICIT = 0, /* an explicit call or cleanup: only room already held */
  CM_RELOCATE_PRESSURE = 1, /* the device is (nearly) out of memory: only room already held */
  CM_RELOCATE_ARENA_FULL = 2, /* no room for another pool: targets may take new memory */
  CM_RELOCATE_CAPTURE = 3,  /* a graph capture begins: targets may take new memory */
} cm_relocate_reason_t;

/* What relocations did (one run, or a manager's totals). */
typedef struct cm_relocate_stats {
  uint64_t runs;         /* relocations planned */
  uint64_t moves;        /* live slices moved */
  uint64_t bytes_copied; /* bytes copied device to device (each counted once) */
  uint64_t abandoned;    /* relocations abandoned (a refused copy or a failed wait) */
  uint64_t skipped;      /* triggers that planned nothing: the pools kept the shape
                          * in which the last relocation found nothing to move */
  uint64_t bytes_released; /* reserved bytes the manager held less after the moves */
} cm_relocate_stats_t;

/* Move live slices off sparsely used units so those units can go back to
 * the device: the default arena's granules shared by few small blocks, an
 * adaptive pool's outdated pages. Plan (targets reserved, in room already
 * held unless `why` allows growth), copy every move's bytes through the
 * storage (cm_storage_copy), wait once, then commit: each handle and
 * binding now refers to the target (cm_manager_find, get_storage and
 * get_resource answer the new place) and the sources are free. Guarded
 * slices (below) and the granules or pages they sit on never move; nor do
 * persistent or dedicated reservations. After the moves the pools give back
 * what emptied as they do on release (an explicit cleanup gives back
 * everything free). A relocation that moved nothing is not planned again
 * until the pools change shape (reserved bytes, pages, guards): *out then
 * says skipped. Works whether or not the config enabled relocation.
 * Errors: CM_EINVAL (NULL manager), CM_ENOTSUP (the storage cannot copy),
 * CM_EBUSY (a graph capture or a dry run is open), CM_ENOMEM, and a refused
 * copy or failed wait (the storage's status): then the relocation is
 * abandoned and nothing is lost: every allocation keeps its place and its
 * bytes, the targets are free again. `out` (may be NULL) gets this run's
 * figures. Same threading as every manager call. */
CM_API CM_NODISCARD int cm_manager_relocate(cm_manager_t *m, cm_relocate_reason_t why,
                                            cm_relocate_stats_t *out, cm_diag_t *diag);
/* Totals of every relocation of the manager so far. Zeros for NULL. */
CM_API void cm_manager_relocate_totals(const cm_manager_t *m, cm_relocate_stats_t *out);

/* Guards. cm_manager_get_resource hands out a raw address: it also takes a
 * guard on the slice, which holds the slice and its page (an arena's
 * granules) in place until released with cm_manager_unguard (one call per
 * get_resource) or until the slice is freed. Relocation never moves a
 * guarded slice nor anything sharing its page or granules; with relocation
 * enabled in the config, a guarded page of a sliced or adaptive pool, and an
 * arena granule that a guarded slice touches, also serve no new reservation
 * until the guards drop (so they can empty; see docs/relocation.md). While a
 * guard is held, the arena's reservations search its bins for room clear of
 * guarded granules, so keep guards short. A captured
 * graph's pins are persistent reservations, which never move. The pointer
 * API (ptr.h) keeps the address of each allocation: its allocations are
 * guarded for their whole life. Errors: as cm_manager_find; CM_EINVAL when
 * the slice holds no guard. */
CM_API CM_NODISCARD int cm_manager_unguard(cm_manager_t *m, cm_binding_t b, cm_diag_t *diag);

/* ---- graph capture (spec §5.8) and dry runs (spec §6) ---------------------- */

typedef struct cm_pins cm_pins_t; /* handles kept alive for a captured graph */
CM_API void cm_manager_capture_begin(cm_manager_t *m);
CM_API void cm_manager_capture_priming_end(cm_manager_t *m);
/* End the capture. *out gets the pins (NULL when no capture was active); the
 * caller releases them with cm_pins_release. Errors: CM_ENOMEM. */
CM_API CM_NODISCARD int cm_manager_capture_end(cm_manager_t *m, cm_pins_t **out);
CM_API size_t cm_pins_count(const cm_pins_t *p);
CM_API void cm_pins_release(cm_pins_t *p); /* any thread; NULL ok */

/* While at least one dry run is open, new pages and slices are reserved lazily
 * (no device memory) and materialised on get_storage/get_resource. */
CM_API void cm_manager_dry_run_begin(cm_manager_t *m);
CM_API void cm_manager_dry_run_end(cm_manager_t *m);

/* ---- statistics (spec §9) ------------------------------------------------------ */

typedef struct cm_usage {
  uint64_t number_allocs;  /* live slices (zero-byte ones included) */
  uint64_t bytes_in_use;   /* requested bytes of live slices */
  uint64_t bytes_padding;  /* alignment padding of live slices */
  uint64_t bytes_reserved; /* bytes held from the storage */
} cm_usage_t;

typedef struct cm_pool_report {
  cm_pool_options_t options; /* effective options (kind, page size, caps) */
  cm_usage_t usage;
  uint64_t pages;          /* storage allocations held now */
  uint64_t pages_peak;     /* high-water mark since the layout was installed */
  uint64_t pages_unmapped; /* lazily reserved, not materialised */
  uint64_t largest_alloc;  /* largest requested size served */
  uint64_t bytes_reserved_peak; /* high-water mark of usage.bytes_reserved */
  /* Of the reserved bytes not in use: those in wholly free units the pool
   * could give back (free mapped granules, idle segments), "cached"; the rest
   * are holes in partly used units. Valid when has_cached (the arena; other
   * kinds do not keep the figure). */
  uint64_t bytes_cached;
  bool has_cached;
  /* Adaptive pools: the outdated pools still held (older page sizes waiting
   * for their last allocations) and their pages. 0 for other kinds. */
  uint64_t outdated_pools;
  uint64_t outdated_pages;
  /* Arena pools: stitched slices live now, and made since the pool was
   * created: reservations the device refused at every placement, served by
   * mapping the memory of granules that live blocks only partly use a second
   * time around new granules (docs/design.md, "Stitched slices"). 0 for
   * other kinds. */
  uint64_t stitched;
  uint64_t stitched_made;
} cm_pool_report_t;

/* Reports. cm_manager_usage, cm_manager_pool_report, cm_manager_display and
 * cm_manager_check first take in the releases queued from any thread since
 * the last manager call (the freed inbox), so what they report includes every
 * release that happened before the call. That makes them manager calls: like
 * every cm_manager_* call they are serialised with the driving thread and
 * must not run concurrently with it. What may run concurrently with the
 * driving thread: the handle and binding functions above, and
 * cm_storage_stats() on the manager's storage. cm_manager_pool_count,
 * cm_manager_reserved_peak, cm_manager_name and cm_manager_warnings only read
 * (still serialised with the driving thread). */
/* Current usage of every pool together. */
CM_API void cm_manager_usage(cm_manager_t *m, cm_usage_t *out);
/* Number of dynamic pools. */
CM_API size_t cm_manager_pool_count(const cm_manager_t *m);
/* Report of dynamic pool `index` (routing order), of the persistent pool
 * when index == CM_PERSISTENT_POOL, or of the dedicated pool when index ==
 * CM_DEDICATED_POOL. Errors: CM_EINVAL for a bad index. */
CM_API CM_NODISCARD int cm_manager_pool_report(cm_manager_t *m, size_t index,
                                               cm_pool_report_t *out);
/* Peak of the manager's total bytes_reserved since creation. */
CM_API uint64_t cm_manager_reserved_peak(const cm_manager_t *m);
/* The storage (owned by the manager). */
CM_API cm_storage_t *cm_manager_storage(cm_manager_t *m);
CM_API const char *cm_manager_name(const cm_manager_t *m);
/* Count of spill warnings emitted so far. */
CM_API uint64_t cm_manager_warnings(const cm_manager_t *m);

/* Human-readable display (spec §5.11) into buf (snprintf semantics; returns the
 * length needed). */
CM_API size_t cm_manager_display(cm_manager_t *m, char *buf, size_t cap);
CM_API size_t cm_usage_display(const cm_usage_t *u, char *buf, size_t cap);
/* cm_format_bytes (BytesFormat, spec §9.3) is declared in cubemem/common.h. */

/* Walk every pool and count violated invariants (pages tile exactly, counters
 * equal recomputed totals, free lists consistent). 0 means healthy. Messages
 * for the first violations go to diag when given. */
CM_API size_t cm_manager_check(cm_manager_t *m, cm_diag_t *diag);

#ifdef __cplusplus
}
#endif
#endif
