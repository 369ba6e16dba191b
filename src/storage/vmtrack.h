/*
 * vmtrack.h - the mappings of one address reservation, kept per granule, and
 * the checks of storage.h's virtual-memory contract (the CUDA driver's rules)
 * that every storage emulating it applies: the simulated device (sim.c) and
 * the host storage (host.c). A check says why a call is refused and changes
 * nothing; a commit records a call that passed.
 *
 * Bookkeeping grows to the highest granule ever mapped, so it is proportional
 * to what was mapped, not to the address space reserved: a bitmap of mapped
 * granules and, at the first granule of each mapping, its length in granules.
 *
 * Thread-safety: none; a tracker belongs to its storage's calling thread.
 */
#ifndef CM_STORAGE_VMTRACK_H
#define CM_STORAGE_VMTRACK_H

#include <stddef.h>
#include <stdint.h>

typedef struct cm__vmtrack {
  uint64_t size;    /* bytes reserved */
  unsigned gshift;  /* granule = 1 << gshift */
  uint64_t ngran;   /* granules covered by the arrays below */
  uint64_t *mapped; /* bit per granule */
  uint32_t *start;  /* length in granules of the mapping starting here, else 0 */
  uint64_t nmaps;   /* mappings in the range */
} cm__vmtrack;

/* Room for the reason a check gives. */
#define CM__VMTRACK_WHY 192

/* Is `size` a valid reservation (a non-zero multiple of the granule)? CM_OK,
 * or CM_EINVAL with the reason in why[0..cap). */
int cm__vmtrack_check_reserve(uint64_t size, unsigned gshift, char *why, size_t cap);

/* A tracker for a reservation of `size` bytes (a multiple of the granule);
 * nothing is allocated until the first map. */
void cm__vmtrack_init(cm__vmtrack *t, uint64_t size, unsigned gshift);
/* Free the per-granule arrays (the tracker may be initialised again). */
void cm__vmtrack_free(cm__vmtrack *t);

/* Would mapping [off, off+size) as objects of `piece` bytes each break the
 * contract? CM_OK, or CM_EINVAL with the reason in why[0..cap) (the
 * simulated device's wording: "cannot map ..."). Changes nothing. */
int cm__vmtrack_check_map(const cm__vmtrack *t, uint64_t off, uint64_t size, uint64_t piece,
                          char *why, size_t cap);
/* Record a map that passed cm__vmtrack_check_map. CM_OK, or CM_ENOMEM (host
 * memory for the arrays; nothing is recorded). Returns the objects made in
 * *objects when non-NULL. */
int cm__vmtrack_commit_map(cm__vmtrack *t, uint64_t off, uint64_t size, uint64_t piece,
                           uint64_t *objects);

/* Is [off, off+size) tiled exactly by existing mappings of `piece` bytes?
 * CM_OK, or CM_EINVAL with the reason in why. Changes nothing. */
int cm__vmtrack_check_unmap(const cm__vmtrack *t, uint64_t off, uint64_t size, uint64_t piece,
                            char *why, size_t cap);
/* The same rule for the source of an alias (storage.h's vm_alias), worded
 * "cannot alias ...". The tracker does not know which mappings are aliases:
 * its owner keeps that (an alias is recorded here as an ordinary mapping,
 * by cm__vmtrack_commit_map, so that access checks and releases see it). */
int cm__vmtrack_check_alias_source(const cm__vmtrack *t, uint64_t off, uint64_t size,
                                   uint64_t piece, char *why, size_t cap);
/* May the reservation be given back (no mapping left in it)? CM_OK, or
 * CM_EINVAL with the reason in why; `id` names it in the reason. */
int cm__vmtrack_check_release(const cm__vmtrack *t, uint64_t id, char *why, size_t cap);

/* May [off, off+size) (size > 0) be read or written, every byte inside the
 * reservation and mapped? CM_OK, or CM_EINVAL with the reason in why
 * ("... is not mapped"). Changes nothing. */
int cm__vmtrack_check_access(const cm__vmtrack *t, uint64_t off, uint64_t size, char *why,
                             size_t cap);

/* Record an unmap that passed cm__vmtrack_check_unmap; returns the mappings
 * removed. */
uint64_t cm__vmtrack_commit_unmap(cm__vmtrack *t, uint64_t off, uint64_t size, uint64_t piece);

#endif
