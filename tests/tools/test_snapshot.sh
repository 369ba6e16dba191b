#!/usr/bin/env bash
# test_snapshot.sh BUILD_DIR SOURCE_DIR SHARED_DIR
#
# tools/torch_snapshot_to_csv.py on the PyTorch snapshots in
# SHARED_DIR/traces/snapshots: the CSV must have the same peak live bytes and
# the same events as the converted trace shipped in SHARED_DIR/traces/gpu, and
# `cubemem replay --json` must agree on the peak. A pickle that names a global
# must be refused without running it. Skips (77) without python3 or shared.
set -u
BUILD=${1:?build dir} SRC=${2:?source dir} SHARED=${3:-}
TOOL="$SRC/tools/torch_snapshot_to_csv.py"

command -v python3 >/dev/null 2>&1 || { echo "SKIP: python3 is missing"; exit 77; }
# resolve the interpreter once (version-manager shims are slow to start)
PY=$(python3 -c 'import sys; print(sys.executable)' 2>/dev/null)
[ -x "$PY" ] || PY=python3
SNAPS="$SHARED/traces/snapshots"
[ -n "$SHARED" ] && [ -d "$SNAPS" ] || { echo "SKIP: $SNAPS is absent"; exit 77; }

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail=0
ok() { echo "ok $*"; }
bad() { echo "not ok $*"; fail=1; }

# peak live bytes and event count of a CSV, computed independently of cubemem
stats() {
  "$PY" - "$1" <<'EOF'
import sys
live, cur, peak, n = {}, 0, 0, 0
with open(sys.argv[1]) as f:
    next(f)
    for line in f:
        t = line.rstrip("\n").split(",")
        if t[2] == "allocate":
            live[t[3]] = int(t[4]); cur += int(t[4]); n += 1
        elif t[2] == "free" and t[3] in live:
            cur -= live.pop(t[3]); n += 1
        peak = max(peak, cur)
print(peak, n)
EOF
}

found=0
for snap in "$SNAPS"/*.pickle; do
  [ -e "$snap" ] || continue
  name=$(basename "$snap" .pickle)
  ref="$SHARED/traces/gpu/$name.csv"
  [ -f "$ref" ] || { echo "# no reference CSV for $name, skipped"; continue; }
  found=1
  out="$TMP/$name.csv"
  if ! "$PY" "$TOOL" "$snap" -o "$out"; then bad "$name: conversion failed"; continue; fi
  head -1 "$out" | grep -qx 'Thread,Time,Action,Pointer,Size,Stream' || bad "$name: header"
  got=$(stats "$out") want=$(stats "$ref")
  if [ "$got" = "$want" ]; then ok "$name: peak live and events ($got)"; else bad "$name: peak/events $got, expected $want"; fi
  if cmp -s "$out" "$ref"; then ok "$name: byte-identical to the shipped CSV"; else echo "# $name: differs from the shipped CSV (same peak)"; fi
  # stdout mode gives the same bytes
  "$PY" "$TOOL" "$snap" | cmp -s - "$out" && ok "$name: stdout output" || bad "$name: stdout output differs"
  # the replay engine agrees on the peak
  if [ -x "$BUILD/cubemem" ]; then
    peak=$("$BUILD/cubemem" replay --json "$out" 2>/dev/null | "$PY" -c \
      'import json,sys; print(json.loads(sys.stdin.readline())["peak_live_bytes"])' 2>/dev/null)
    [ "$peak" = "${want%% *}" ] && ok "$name: cubemem replay peak $peak" || bad "$name: cubemem replay peak '$peak', expected ${want%% *}"
  fi
done
[ "$found" = 1 ] || { echo "SKIP: no snapshot with a reference CSV"; exit 77; }

# A pickle naming a global (here os.system) must be refused, and not run.
"$PY" - "$TMP/evil.pickle" "$TMP/pwned" <<'EOF'
import pickle, sys
class Evil:
    def __reduce__(self):
        import os
        return (os.system, ("touch " + sys.argv[2],))
with open(sys.argv[1], "wb") as f:
    pickle.dump({"segments": [], "device_traces": [[Evil()]]}, f)
EOF
if "$PY" "$TOOL" "$TMP/evil.pickle" -o "$TMP/evil.csv" 2>"$TMP/evil.err"; then
  bad "a pickle with a global was accepted"
elif [ -e "$TMP/pwned" ]; then
  bad "a pickle with a global ran code"
else
  grep -q "refusing to load global" "$TMP/evil.err" && ok "globals refused: $(cat "$TMP/evil.err")" || bad "unexpected error: $(cat "$TMP/evil.err")"
fi

# Live memory from before recording: active blocks and frees of unknown pointers
"$PY" - "$TMP/synthetic.pickle" <<'EOF'
import pickle, sys
snap = {
  "segments": [{"device": 0, "address": 4096, "total_size": 3072, "blocks": [
      {"address": 4096, "size": 1024, "requested_size": 1000, "state": "active_allocated"},
      {"address": 5120, "size": 1024, "requested_size": 1024, "state": "inactive"},
      {"address": 6144, "size": 1024, "requested_size": 512, "state": "active_allocated"}]}],
  "device_traces": [[
      {"action": "free_completed", "addr": 9000, "size": 64, "stream": 0, "time_us": 100},
      {"action": "alloc", "addr": 6144, "size": 512, "stream": 0, "time_us": 150},
      {"action": "alloc", "addr": 8192, "size": 256, "stream": 0, "time_us": 2000150},
      {"action": "free_requested", "addr": 8192, "size": 256, "stream": 0, "time_us": 2000160},
      {"action": "free_completed", "addr": 8192, "size": 256, "stream": 0, "time_us": 2000170},
      {"action": "segment_free", "addr": 4096, "size": 3072, "stream": 0, "time_us": 2000180}]]}
with open(sys.argv[1], "wb") as f:
    pickle.dump(snap, f)
EOF
"$PY" "$TOOL" "$TMP/synthetic.pickle" -o "$TMP/synthetic.csv" || bad "synthetic conversion"
cat > "$TMP/synthetic.want" <<'EOF'
Thread,Time,Action,Pointer,Size,Stream
1,00:00:00.000000,allocate,0x1000,1000,0x0
1,00:00:00.000000,allocate,0x2328,64,0x0
1,00:00:00.000000,free,0x2328,64,0x0
1,00:00:00.000050,allocate,0x1800,512,0x0
1,00:00:02.000050,allocate,0x2000,256,0x0
1,00:00:02.000070,free,0x2000,256,0x0
EOF
if diff -u "$TMP/synthetic.want" "$TMP/synthetic.csv"; then ok "synthetic snapshot"; else bad "synthetic snapshot"; fi

exit $fail
