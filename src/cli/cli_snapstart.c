/*
 * cli_snapstart.c - `replay --snapshot-start state`: the starting state of
 * a snapshot (cm_snapshot_start_state) read from its file for the PyTorch
 * layouts.
 *
 * Exports cli_snapshot_state_load (cmd_replay.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd_replay.h"
#include "cubemem/replay.h"

/* The whole file at path into *buf (*len bytes). 0, or errno. */
static int read_file(const char *path, char **buf, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return errno ? errno : EIO;
  long size = !fseek(f, 0, SEEK_END) ? ftell(f) : -1;
  int err = size < 0 || fseek(f, 0, SEEK_SET) ? EIO : 0;
  *buf = err ? NULL : malloc(size ? (size_t)size : 1);
  if (!err && !*buf) err = ENOMEM;
  if (!err && fread(*buf, 1, (size_t)size, f) != (size_t)size) err = EIO;
  fclose(f);
  if (err) {
    free(*buf);
    *buf = NULL;
    return err;
  }
  *len = (size_t)size;
  return 0;
}

int cli_snapshot_state_load(const char *cmd, const char *path, const opts_t *o,
                            cm_snapshot_state_t *out) {
  memset(out, 0, sizeof *out);
  if (!strcmp(path, "-")) {
    fprintf(stderr, "cubemem %s: --snapshot-start state: standard input cannot be read twice; "
            "give the snapshot's file\n", cmd);
    return 1;
  }
  char *buf = NULL;
  size_t len = 0;
  int err = read_file(path, &buf, &len);
  if (err) {
    fprintf(stderr, "cubemem %s: %s: %s\n", cmd, path, strerror(err));
    return 1;
  }
  cm_snapshot_options_t so;
  cm_snapshot_options_init(&so);
  so.device = o->snapshot_device;
  so.free_on_requested = o->free_on_requested;
  cm_diag_t d;
  cm_diag_clear(&d);
  int rc = cm_snapshot_start_state(buf, len, &so, out, &d);
  free(buf);
  if (rc != CM_OK) {
    fprintf(stderr, "cubemem %s: %s: the starting state: %s\n", cmd, path,
            d.message[0] ? d.message : cm_strerror(rc));
    cm_snapshot_state_free(out);
    return 1;
  }
  return 0;
}
