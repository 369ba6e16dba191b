/*
 * pickle.h - a restricted reader of Python pickles (internal to the library).
 *
 * It understands the data opcodes of protocols 2 to 5 that plain containers
 * use: dicts, lists, tuples, sets, str, bytes, int (up to 64 bits), float,
 * bool, None, the memo (PUT/GET/MEMOIZE), MARK/POP and FRAME. Every opcode
 * that imports a global or constructs an object (GLOBAL, STACK_GLOBAL,
 * REDUCE, BUILD, INST, OBJ, NEWOBJ, NEWOBJ_EX, EXT*, PERSID, BINPERSID,
 * buffers) is refused with CM_EPARSE and a message naming it, so reading a
 * pickle never runs code and only yields plain data.
 *
 * Ownership: cm__pickle_parse returns a document that owns every value; the
 * strings of str/bytes values point into the caller's input buffer, which
 * must outlive the document. Free it with cm__pickle_free.
 * Thread-safety: a document is immutable after parsing; distinct documents
 * are independent.
 */
#ifndef CM_REPLAY_PICKLE_H
#define CM_REPLAY_PICKLE_H

#include "cubemem/common.h"

typedef enum cm_pv_kind {
  CM_PV_NONE,
  CM_PV_BOOL,
  CM_PV_INT,
  CM_PV_FLOAT,
  CM_PV_STR,
  CM_PV_BYTES,
  CM_PV_LIST,
  CM_PV_TUPLE,
  CM_PV_DICT, /* items alternate key, value */
  CM_PV_SET,
} cm_pv_kind_t;

typedef struct cm_pv {
  cm_pv_kind_t kind;
  bool big;        /* CM_PV_INT outside int64: i holds no value */
  int64_t i;       /* INT, BOOL */
  double f;        /* FLOAT */
  const char *s;   /* STR, BYTES: not NUL-terminated */
  size_t n;        /* STR/BYTES length; LIST/TUPLE/SET item count; DICT 2 x pairs */
  size_t cap;
  struct cm_pv **items;
  struct cm_pv_index *index; /* DICT: hash of its str keys (pickle.c); NULL when none */
} cm_pv_t;

typedef struct cm_pickle cm_pickle_t;

/* Parse `len` bytes. On success *out owns the values and *root is the
 * top-level value. Memory is bounded by the input: every value, container
 * item and memo entry costs at least one opcode byte (the memo is sparse: a
 * PUT to index 2^31 stores one entry, not 2^31). Errors: CM_EPARSE ("refusing opcode GLOBAL ...", "truncated
 * pickle at byte N", ...), CM_ENOMEM, CM_EINVAL (NULL arguments). */
CM_NODISCARD int cm__pickle_parse(const char *buf, size_t len, cm_pickle_t **out,
                                 const cm_pv_t **root, cm_diag_t *diag);
/* Free a document. NULL ok. */
void cm__pickle_free(cm_pickle_t *doc);

/* The value of string key `key` in dict `d`, or NULL (also when d is not a
 * dict). The last binding wins, as in Python: a str key is stored once (a
 * later binding replaces the value in place, keeping the first position), so
 * `n` counts distinct str keys; other keys are kept as they come. Expected
 * O(len(key)) whatever the dict's size: the str keys are hashed with a seed
 * chosen per document. */
const cm_pv_t *cm__pv_get(const cm_pv_t *d, const char *key);
/* True when v is a str equal to / starting with `s`. */
bool cm__pv_str_is(const cm_pv_t *v, const char *s);
bool cm__pv_str_starts(const cm_pv_t *v, const char *prefix);

#endif
