/*
 * cli_sniff.c - what a file given as a trace looks like, from its first
 * bytes, before the trace readers see it: a PNG, a gzip or zip archive, an
 * ELF binary, a PDF, NUL bytes, a pickle whose top-level object cannot be a
 * memory snapshot. The readers would otherwise report "expected 6 fields,
 * got 1" for all of them, or read a large binary file whole before failing.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

enum { SNIFF_BYTES = 65536 };

typedef struct magic {
  const char *bytes;
  size_t len;
  const char *what;
} magic_t;

static const magic_t k_magic[] = {
    {"\x89PNG\r\n\x1a\n", 8, "a PNG image"},
    {"\xff\xd8\xff", 3, "a JPEG image"},
    {"GIF8", 4, "a GIF image"},
    {"%PDF-", 5, "a PDF document"},
    {"\x7f" "ELF", 4, "an ELF binary (a program or library)"},
    {"\x1f\x8b", 2, "gzip-compressed data: decompress it first (gunzip -k FILE) and pass the result"},
    {"BZh", 3, "bzip2-compressed data: decompress it first (bunzip2 -k FILE)"},
    {"\xfd" "7zXZ", 5, "xz-compressed data: decompress it first (unxz -k FILE)"},
    {"\x28\xb5\x2f\xfd", 4, "zstd-compressed data: decompress it first (unzstd FILE)"},
    {"PK\x03\x04", 4, "a zip archive (torch.save writes those: tensors or a model, not a memory "
                      "snapshot; a snapshot is written by torch.cuda.memory._dump_snapshot)"},
    {"PK\x05\x06", 4, "an empty zip archive"},
    {"SQLite format 3", 15, "an SQLite database"},
};

/* The top-level object of a pickle of protocol 2 or later, when its first
 * opcode says it is not a dict (a snapshot is a dict); NULL otherwise. */
static const char *pickle_not_dict(const unsigned char *b, size_t n) {
  size_t i = 2; /* PROTO n */
  if (n > i + 9 && b[i] == 0x95) i += 9; /* FRAME and its 8-byte length */
  if (i >= n) return NULL;
  switch (b[i]) {
    case ']': return "a list";
    case ')': return "an empty tuple";
    case '(': return "a tuple or list";
    case 'N': return "None";
    case 0x88: case 0x89: return "a boolean";
    case 'J': case 'K': case 'M': case 'I': case 'L': case 0x8a: case 0x8b: return "a number";
    case 'G': case 'F': return "a number";
    case 'X': case 'T': case 'U': case 0x8d: return "a string";
    case 'B': case 'C': case 0x8e: case 0x96: return "bytes";
    default: return NULL; /* a dict, or an object: the snapshot reader decides */
  }
}

int cli_sniff_trace(const char *path, char *what, size_t cap) {
  what[0] = '\0';
  if (!strcmp(path, "-")) return 0; /* standard input cannot be peeked at */
  struct stat sb;
  /* only regular files: a pipe or FIFO read here would lose what was read,
   * and the reader names devices, sockets and directories itself */
  if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) return 0;
  FILE *f = fopen(path, "rb");
  if (!f) return 0; /* the reader reports it */
  static unsigned char b[SNIFF_BYTES];
  size_t n = fread(b, 1, sizeof b, f);
  fclose(f);
  if (n == 0) return 0;
  for (size_t k = 0; k < sizeof k_magic / sizeof k_magic[0]; k++)
    if (n >= k_magic[k].len && !memcmp(b, k_magic[k].bytes, k_magic[k].len)) {
      snprintf(what, cap, "%s", k_magic[k].what);
      return 1;
    }
  if (cm_snapshot_detect(b, n)) {
    const char *top = pickle_not_dict(b, n);
    if (top) {
      snprintf(what, cap, "a pickle of %s, not a PyTorch memory snapshot (a dict written by "
               "torch.cuda.memory._dump_snapshot)", top);
      return 1;
    }
    return 0;
  }
  const unsigned char *z = memchr(b, '\0', n);
  if (z) {
    snprintf(what, cap, "binary data (a NUL byte at offset %zu), not a CSV trace", (size_t)(z - b));
    return 1;
  }
  size_t ctrl = 0; /* other control bytes: text has few */
  for (size_t k = 0; k < n; k++)
    if ((b[k] < 0x20 && b[k] != '\n' && b[k] != '\r' && b[k] != '\t' && b[k] != '\f') ||
        b[k] == 0x7f)
      ctrl++;
  if (ctrl * 100 > n) {
    snprintf(what, cap, "binary data (%zu control bytes in the first %zu), not a CSV trace", ctrl,
             n);
    return 1;
  }
  return 0;
}
