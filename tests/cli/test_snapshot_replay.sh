#!/usr/bin/env bash
# test_snapshot_replay.sh BUILD_DIR SOURCE_DIR SHARED_DIR
#
# `cubemem replay SNAPSHOT.pickle` reads PyTorch snapshots itself (the C
# pickle reader): on the real snapshots of SHARED_DIR/traces/snapshots and on
# small crafted pickles, its replay must equal the replay of the CSV that
# tools/torch_snapshot_to_csv.py writes (same events, peak live, peak
# reserved); globals and object construction are refused without running
# anything; every pickle protocol 2-5 reads; a snapshot without history says
# so; the device is selectable; PyTorch's reserved bytes are reported; plan
# reads snapshots too. Also RMM's own spellings: `(nil)` / `0x0` pointers of
# `allocate failure` rows and `deallocate`. The shared snapshots are skipped
# with a message when SHARED_DIR is absent; without python3 the whole test
# skips (77).
set -u
BUILD=${1:?build dir} SRC=${2:?source dir} SHARED=${3:-}
CM="$BUILD/cubemem"
TOOL="$SRC/tools/torch_snapshot_to_csv.py"
command -v python3 >/dev/null 2>&1 || { echo "SKIP: python3 is missing"; exit 77; }
PY=$(python3 -c 'import sys; print(sys.executable)' 2>/dev/null)
[ -x "$PY" ] || PY=python3
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail=0 n=0
ok() { echo "ok $*"; n=$((n + 1)); }
bad() { echo "not ok $*"; fail=1; }

# the fields of a replay --json line that must agree
fields() {
  "$PY" -c '
import json, sys
for line in sys.stdin:
    d = json.loads(line)
    print(d["events"], d["allocs"], d["frees"], d["peak_live_bytes"], d["peak_reserved_bytes"])' 
}

same_as_csv() { # NAME PICKLE [options]
  local name=$1 snap=$2
  shift 2
  local dev=()
  [ "${1:-}" = "--device" ] && dev=(--device "$2") && shift 2
  "$PY" "$TOOL" "$snap" "${dev[@]}" -o "$TMP/$name.csv" 2>/dev/null || { bad "$name: converter failed"; return; }
  local a b
  a=$("$CM" replay --json --no-config "$@" "$snap" 2>"$TMP/$name.err" | fields)
  b=$("$CM" replay --json --no-config "$TMP/$name.csv" 2>/dev/null | fields)
  if [ -n "$a" ] && [ "$a" = "$b" ]; then ok "$name: snapshot replay equals the CSV replay ($a)"
  else bad "$name: snapshot '$a' vs CSV '$b': $(cat "$TMP/$name.err")"; fi
}

# ---- the real snapshots ----
SNAPS="$SHARED/traces/snapshots"
if [ -n "$SHARED" ] && [ -d "$SNAPS" ]; then
  for snap in "$SNAPS"/*.pickle; do
    [ -e "$snap" ] || continue
    name=$(basename "$snap" .pickle)
    same_as_csv "$name" "$snap"
    want=$("$PY" - "$snap" <<'EOF'
import pickle, sys
class R(pickle.Unpickler):
    def find_class(self, m, n): raise pickle.UnpicklingError("global")
s = R(open(sys.argv[1], "rb")).load()
print(sum(seg["total_size"] for seg in s["segments"] if seg.get("device", 0) == 0))
EOF
)
    got=$("$CM" replay --json --no-config "$snap" 2>/dev/null | "$PY" -c 'import json,sys; print(json.loads(sys.stdin.readline())["torch_reserved_bytes"])')
    [ "$got" = "$want" ] && ok "$name: PyTorch reserved $got in the JSON" || bad "$name: torch_reserved_bytes '$got', expected $want"
    "$CM" replay --no-config "$snap" >"$TMP/text" 2>/dev/null
    grep -q 'PyTorch at dump' "$TMP/text" && grep -q 'PyTorch snapshot, device 0' "$TMP/text" \
      && ok "$name: the text report shows PyTorch's reserved bytes" || bad "$name: text report"
    "$CM" plan --no-config "$snap" >"$TMP/plan" 2>&1 && grep -q '^plan ' "$TMP/plan" \
      && ok "$name: plan reads the snapshot" || bad "$name: plan: $(tail -3 "$TMP/plan")"
    "$CM" fit --json --no-config --no-progress "$snap" >"$TMP/fit" 2>&1 && grep -q '"fit_bytes":' "$TMP/fit" \
      && ok "$name: fit reads the snapshot" || bad "$name: fit: $(tail -3 "$TMP/fit")"
  done
else
  echo "# SKIP the shared snapshots: $SNAPS is absent"
fi

# ---- crafted snapshots ----
"$PY" - "$TMP" <<'EOF'
import pickle, sys, os
d = sys.argv[1]
snap = {
  "segments": [{"device": 0, "address": 4096, "total_size": 3072, "blocks": [
      {"address": 4096, "size": 1024, "requested_size": 1000, "state": "active_allocated"},
      {"address": 5120, "size": 1024, "requested_size": 1024, "state": "inactive"},
      {"address": 6144, "size": 1024, "requested_size": 512, "state": "active_allocated"}],
      "segment_pool_id": (0, 0), "is_expandable": False, "frames": []},
      {"device": 1, "address": 1 << 40, "total_size": 1 << 21, "blocks": []}],
  "device_traces": [[
      {"action": "free_completed", "addr": 9000, "size": 64, "stream": 0, "time_us": 100},
      {"action": "alloc", "addr": 6144, "size": 512, "stream": 0, "time_us": 150},
      {"action": "alloc", "addr": 8192, "size": 256, "stream": 0, "time_us": 2000150, "ratio": 0.5},
      {"action": "oom", "addr": 0, "size": 1 << 40, "stream": 0, "time_us": 2000155},
      {"action": "free_requested", "addr": 8192, "size": 256, "stream": 0, "time_us": 2000160},
      {"action": "free_completed", "addr": 8192, "size": 256, "stream": 0, "time_us": 2000170},
      {"action": "segment_free", "addr": 4096, "size": 3072, "stream": 0, "time_us": 2000180}],
    [ {"action": "alloc", "addr": (1 << 40) + 4096 * i, "size": 4096, "stream": 7, "time_us": i}
      for i in range(300) ]],
  "allocator_settings": {"expandable_segments": None, "big": 1 << 70, "neg": -5},
}
for proto in (2, 3, 4, 5):
    with open(os.path.join(d, f"p{proto}.pickle"), "wb") as f:
        pickle.dump(snap, f, protocol=proto)
with open(os.path.join(d, "p0.pickle"), "wb") as f:
    pickle.dump(snap, f, protocol=0)
# no history at all
with open(os.path.join(d, "nohist.pickle"), "wb") as f:
    pickle.dump({"segments": snap["segments"], "device_traces": [[], []]}, f, protocol=4)
# globals / object construction
class Evil:
    def __reduce__(self):
        import os
        return (os.system, ("touch " + os.path.join(d, "pwned"),))
with open(os.path.join(d, "evil.pickle"), "wb") as f:
    pickle.dump({"segments": [], "device_traces": [[Evil()]]}, f, protocol=4)
with open(os.path.join(d, "evil2.pickle"), "wb") as f:
    pickle.dump({"segments": [], "device_traces": [[Evil()]]}, f, protocol=2)
import collections
with open(os.path.join(d, "odict.pickle"), "wb") as f:
    pickle.dump(collections.OrderedDict(a=1), f, protocol=4)
data = open(os.path.join(d, "p4.pickle"), "rb").read()
with open(os.path.join(d, "trunc.pickle"), "wb") as f:
    f.write(data[: len(data) // 2])
EOF
for proto in 2 3 4 5; do same_as_csv "proto$proto" "$TMP/p$proto.pickle"; done
same_as_csv "device1" "$TMP/p4.pickle" --device 1 --snapshot-device 1
"$CM" replay --json --no-config --snapshot-device 1 "$TMP/p4.pickle" 2>/dev/null | grep -q '"snapshot_device":1,"torch_reserved_bytes":2097152' \
  && ok "--snapshot-device 1 reports device 1's segments" || bad "--snapshot-device 1"
"$CM" replay --json --no-config "$TMP/p4.pickle" 2>"$TMP/err" | grep -q '"allocs":4,' && ok "pre-existing memory at time zero (4 allocations)" || bad "pre-existing allocations"
grep -q "out of memory in the recorded run: 1 allocation failed" "$TMP/err" && ok "oom entries are allocation failures" || bad "oom: $(cat "$TMP/err")"
grep -q "1 pointer freed by the trace without being allocated" "$TMP/err" && ok "freed-unallocated warning" || bad "freed-unallocated warning: $(cat "$TMP/err")"
a=$("$CM" replay --json --no-config --snapshot-free-on requested "$TMP/p4.pickle" 2>/dev/null | fields)
"$PY" "$TOOL" "$TMP/p4.pickle" --free-on requested -o "$TMP/req.csv" 2>/dev/null
b=$("$CM" replay --json --no-config "$TMP/req.csv" 2>/dev/null | fields)
[ "$a" = "$b" ] && ok "--snapshot-free-on requested matches the converter" || bad "free-on requested: '$a' vs '$b'"

"$CM" replay --no-config "$TMP/p0.pickle" >/dev/null 2>"$TMP/err"; rc=$?
[ $rc = 1 ] && grep -q "protocol" "$TMP/err" && ok "protocol 0 refused with a message" || bad "protocol 0: rc $rc $(cat "$TMP/err")"
"$CM" replay --no-config "$TMP/nohist.pickle" >/dev/null 2>"$TMP/err"; rc=$?
[ $rc = 1 ] && grep -q "no allocation history" "$TMP/err" && grep -q "_record_memory_history" "$TMP/err" \
  && ok "a snapshot without history says so" || bad "no history: rc $rc $(cat "$TMP/err")"
"$PY" "$TOOL" "$TMP/nohist.pickle" -o "$TMP/nohist.csv" 2>"$TMP/err"
grep -q "no allocation history" "$TMP/err" && ok "the converter warns about a snapshot without history" || bad "converter no-history warning"
for e in evil evil2 odict; do
  "$CM" replay --no-config "$TMP/$e.pickle" >/dev/null 2>"$TMP/err"; rc=$?
  if [ -e "$TMP/pwned" ]; then bad "$e: code ran"
  elif [ $rc = 1 ] && grep -Eq "refusing opcode (STACK_GLOBAL|GLOBAL|REDUCE)" "$TMP/err"; then ok "$e refused: $(head -c 120 "$TMP/err")"
  else bad "$e: rc $rc $(cat "$TMP/err")"; fi
done
"$CM" replay --no-config "$TMP/trunc.pickle" >/dev/null 2>"$TMP/err"; rc=$?
[ $rc = 1 ] && grep -q "truncated" "$TMP/err" && ok "a truncated pickle is an error" || bad "truncated: rc $rc $(cat "$TMP/err")"
cat "$TMP/p4.pickle" | "$CM" replay --json --no-config - 2>/dev/null | grep -q '"allocs":4,' && ok "a snapshot on standard input" || bad "snapshot on stdin"

# ---- RMM spellings ----
cat >"$TMP/rmm.csv" <<'EOF'
Thread,Time,Action,Pointer,Size,Stream
1,00:00:00.000100,allocate,0x1000,4096,0x0
1,00:00:00.000200,allocate failure,(nil),1099511627776,0x0
1,00:00:00.000250,allocate failure,0x0,1099511627776,0x0
1,00:00:00.000300,deallocate,0x1000,4096,0x0
1,00:00:00.000400,allocate,0x2000,512,0x0
1,00:00:00.000500,free,0x2000,512,0x0
EOF
out=$("$CM" replay --json --no-config "$TMP/rmm.csv" 2>"$TMP/err") && echo "$out" | grep -q '"allocs":2,"frees":2,' \
  && ok "(nil), 0x0 and deallocate are read" || bad "RMM spellings: $out $(cat "$TMP/err")"
grep -q "out of memory in the recorded run: 2 allocations failed" "$TMP/err" && ok "allocation failures counted" || bad "failures: $(cat "$TMP/err")"
"$CM" replay --no-config "$TMP/rmm.csv" 2>/dev/null | grep -q "2 'allocate failure' rows" && ok "failures in the report" || bad "failures in the report"

[ $fail = 0 ] && echo "test_snapshot_replay: $n passed"
exit $fail
