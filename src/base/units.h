/*
 * units.h - sizes and bytes, once for the whole tree (not installed): the
 * one size grammar (command line, --pools, layouts) and the byte formats.
 * Every function is pure and thread-safe; none allocates.
 */
#ifndef CM_BASE_UNITS_H
#define CM_BASE_UNITS_H

#include <stddef.h>
#include <stdint.h>

/* Parse the `len` bytes at s as a size: a plain decimal number (digits, at
 * most one '.', no sign, hex or exponent), optional spaces, then an optional
 * unit, case-insensitive: B; KiB, MiB, GiB, TiB (powers of 1024); KB, MB,
 * GB, TB (powers of 1000). A fraction must give whole bytes ("1.5GiB"); a
 * bare K/M/G/T is refused as ambiguous. Integers are exact (no rounding
 * through double). Returns 0 and sets *out, or -1 with a reason in why
 * (snprintf into why[cap]; why may be NULL) and *out untouched. */
int cm__size_parse(const char *s, size_t len, uint64_t *out, char *why, size_t cap);

/* Examples of the grammar, for messages. */
#define CM__SIZE_EXAMPLES "e.g. 80GiB, 1.5GiB, 512MB, 1048576"

/* The exact size in the largest binary unit that divides it: "8MiB",
 * "3KiB", "1000" (no unit: bytes), "0". snprintf semantics. */
void cm__fmt_size_exact(char *buf, size_t cap, uint64_t v);

/* IEC with two decimals unless whole: "512 B", "1.50 MiB", "8 GiB".
 * snprintf semantics. */
void cm__fmt_iec(uint64_t b, char *buf, size_t cap);

#endif
