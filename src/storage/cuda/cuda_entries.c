/*
 * cuda_entries.c - the allocation records of the CUDA storages
 * (cuda_internal.h): the entry table (id -> entry, under the device's lock
 * for device storages), freeing an entry's memory the way it was obtained,
 * unmapping and releasing VM mappings, and the handles whose release must be
 * retried. Below both cuda_storage.c (plain allocations, creation) and
 * cuda_vm.c (virtual memory): it calls neither.
 * Invariants: every entry is in the table exactly once until it is removed;
 * an entry's memory is freed exactly once; a mapping record stays while its
 * unmap fails, a handle stays in `unreleased` while its release fails; an
 * alias record's handle is never released through it (storage->naliases
 * counts the alias records).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "storage/cuda/cuda_internal.h"

/* Wait for the work that may still use this storage's memory (context
 * pushed): the storage's stream, or, once its stream was destroyed, the
 * whole context (work queued on a destroyed stream still runs). */
CUresult cm__cuda_wait_idle(cuda_storage *s) {
  return s->retired ? s->dev->api.CtxSynchronize() : s->dev->api.StreamSynchronize(s->stream);
}

/* The entry map of a device storage changes under dev->lock, so that a peer
 * grant (cm_cuda_device_enable_peer_access) can walk it from another thread. */
static void entries_lock(cuda_storage *s) {
  if (!s->pinned) pthread_mutex_lock(&s->dev->lock);
}
static void entries_unlock(cuda_storage *s) {
  if (!s->pinned) pthread_mutex_unlock(&s->dev->lock);
}

entry *cm__cuda_remove_entry(cuda_storage *s, uint64_t id) {
  entries_lock(s);
  entry *e = cm__u64map_remove(&s->entries, id);
  entries_unlock(s);
  return e;
}

int cm__cuda_add_entry(cuda_storage *s, entry *e, uint64_t *out_id) {
  e->id = s->next_id;
  entries_lock(s);
  int rc = cm__u64map_put(&s->entries, e->id, e);
  entries_unlock(s);
  if (rc != CM_OK) return rc;
  s->next_id++;
  *out_id = e->id;
  return CM_OK;
}

/* Free the memory of one entry (context pushed by the caller). Returns
 * CM_ESTORAGE when the driver refused a synchronous free. */
int cm__cuda_free_entry_memory(cuda_storage *s, entry *e) {
  const cu_api *a = &s->dev->api;
  CUresult r = CUDA_SUCCESS;
  switch (e->kind) {
    case K_ZERO: break;
    case K_SYNC: CU_TIMED(s, CU_FREE, r = a->MemFree(e->ptr)); break;
    case K_ASYNC:
      /* Stream-ordered free; errors are ignored as the reference does, but
       * counted. A retired storage's stream is gone: its callers waited for
       * the context, so a plain free is safe. */
      if (s->retired) {
        CU_TIMED(s, CU_FREE, r = a->MemFree(e->ptr));
      } else {
        CUresult fr;
        CU_TIMED(s, CU_FREE, fr = a->MemFreeAsync(e->ptr, s->stream));
        if (fr != CUDA_SUCCESS) atomic_fetch_add(&s->free_errors, 1);
      }
      break;
    case K_HOST: CU_TIMED(s, CU_FREE, r = a->MemFreeHost((void *)(uintptr_t)e->ptr)); break;
    case K_VM: {
      CUresult wr;
      CU_TIMED(s, CU_SYNC, wr = cm__cuda_wait_idle(s));
      if (wr != CUDA_SUCCESS) atomic_fetch_add(&s->free_errors, 1);
      (void)cm__cuda_unmap_records(s, e, 0, e->nmaps); /* failures counted there */
      e->nmaps = 0;
      CU_TIMED(s, CU_ADDRESS_FREE, r = a->MemAddressFree(e->ptr, e->reserved));
      break;
    }
  }
  if (r != CUDA_SUCCESS) {
    atomic_fetch_add(&s->free_errors, 1);
    return CM_ESTORAGE;
  }
  return CM_OK;
}

void cm__cuda_destroy_entry(entry *e) {
  free(e->maps);
  free(e);
}

/* Remember a handle whose cuMemRelease failed. Without host memory for the
 * record it is lost to this storage (counted in free_errors already). */
void cm__cuda_keep_unreleased(cuda_storage *s, CUmemGenericAllocationHandle h) {
  if (s->nunreleased == s->capunreleased) {
    size_t ncap = s->capunreleased ? 2 * s->capunreleased : 8;
    CUmemGenericAllocationHandle *nv = realloc(s->unreleased, ncap * sizeof *nv);
    if (!nv) return;
    s->unreleased = nv;
    s->capunreleased = ncap;
  }
  s->unreleased[s->nunreleased++] = h;
}

size_t cm__cuda_retry_releases(cuda_storage *s) {
  size_t w = 0;
  for (size_t i = 0; i < s->nunreleased; i++) {
    CUresult r;
    CU_TIMED(s, CU_RELEASE, r = s->dev->api.MemRelease(s->unreleased[i]));
    if (r != CUDA_SUCCESS) s->unreleased[w++] = s->unreleased[i];
  }
  s->nunreleased = w;
  return w;
}

/* Unmap and release mappings [i, i+n) of e (cuda_internal.h). */
size_t cm__cuda_unmap_records(cuda_storage *s, entry *e, size_t i, size_t n) {
  const cu_api *a = &s->dev->api;
  size_t failed = 0, w = i;
  for (size_t k = i; k < i + n; k++) {
    vm_mapping m = e->maps[k];
    CUresult r;
    CU_TIMED(s, CU_UNMAP, r = a->MemUnmap(e->ptr + m.offset, (size_t)m.size));
    if (r != CUDA_SUCCESS) {
      failed++;
      e->maps[w++] = m; /* still mapped: keep the record */
      continue;
    }
    if (m.alias) { /* a second mapping: the object is the original mapping's to release */
      s->naliases--;
      continue;
    }
    CU_TIMED(s, CU_RELEASE, r = a->MemRelease(m.handle));
    if (r != CUDA_SUCCESS) { /* unmapped but still allocated: keep it, release it later */
      atomic_fetch_add(&s->free_errors, 1);
      cm__cuda_keep_unreleased(s, m.handle);
    }
  }
  memmove(e->maps + w, e->maps + i + n, (e->nmaps - i - n) * sizeof *e->maps);
  e->nmaps -= i + n - w;
  if (failed) atomic_fetch_add(&s->free_errors, failed);
  return failed;
}
