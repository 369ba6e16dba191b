#!/usr/bin/env bash
# test_snapshot_start.sh - `replay --snapshot-start state|empty`: on the
# shared snapshots the PyTorch layout replayed from PyTorch's own state when
# the history begins ends on PyTorch's reserved total at dump (4,238,344,192
# and 1,763,704,832 bytes, every starting block placed), where the cold
# replay of the small compiled training run lands 1.6% under; the report
# says so in text and JSON; empty (the default) prints what it always did;
# a bad value is a usage error; a CSV trace ignores the option.
# usage: bash test_snapshot_start.sh BUILD_DIR SOURCE_DIR [SHARED_DIR]
set -u
BUILD=${1:?build dir} SRC=${2:?source dir} SHARED=${3:-$SRC/../shared}
CM="$BUILD/cubemem"
[ -x "$CM" ] || { echo "SKIP: $CM not built"; exit 77; }
fail=0 pass=0
ok() { echo "ok $1"; pass=$((pass + 1)); }
bad() { echo "not ok $1"; fail=$((fail + 1)); }
expect() { if [ "$2" == "$3" ]; then ok "$1"; else bad "$1: got '$2', expected '$3'"; fi; }
field() { grep -o "\"$1\":[0-9.]*" <<<"$2" | head -1 | cut -d: -f2; }
R=("$CM" replay --no-config --no-progress)

"${R[@]}" --snapshot-start full "$SRC/tests/data/two-streams.csv" >/dev/null 2>&1
expect "a bad --snapshot-start: usage error" "$?" 2
out=$("${R[@]}" --json --pools pytorch --snapshot-start state "$SRC/tests/data/two-streams.csv")
grep -q '"snapshot_start"' <<<"$out" && bad "a CSV trace has no starting state" || ok "a CSV trace has no starting state"

SNAP="$SHARED/traces/snapshots"
if [ ! -d "$SNAP" ]; then
  echo "SKIP: $SNAP is absent (the shared snapshots)"
  echo "$pass passed, $fail failed"
  [ "$fail" -eq 0 ] && exit 77 || exit 1
fi
for s in cs336-small-compiled-training:4238344192:4169138176 cs336-medium-ctx128-inference:1763704832:1763704832; do
  name=${s%%:*} rest=${s#*:} torch=${rest%%:*} cold=${rest#*:}
  f="$SNAP/$name.pickle"
  st=$("${R[@]}" --json --pools pytorch --snapshot-start state "$f" 2>/dev/null)
  expect "$name: from the state, reserved at end = PyTorch's at dump" "$(field reserved_at_end "$st")" "$torch"
  expect "$name: PyTorch's figure" "$(field torch_reserved_bytes "$st")" "$torch"
  expect "$name: every starting block placed" "$(field start_unplaced "$st")" 0
  grep -q '"snapshot_start":"state"' <<<"$st" && ok "$name: JSON says so" || bad "$name: JSON snapshot_start"
  cold_out=$("${R[@]}" --json --pools pytorch "$f" 2>/dev/null)
  expect "$name: cold (default)" "$(field reserved_at_end "$cold_out")" "$cold"
  grep -q '"snapshot_start"' <<<"$cold_out" && bad "$name: default JSON unchanged" || ok "$name: default JSON unchanged"
  same=$("${R[@]}" --json --pools pytorch --snapshot-start empty "$f" 2>/dev/null | sed -E 's/"(time_ns|ns_per_op)":[0-9.]+//g')
  [ "$same" == "$(sed -E 's/"(time_ns|ns_per_op)":[0-9.]+//g' <<<"$cold_out")" ] && ok "$name: empty is the default" || bad "$name: empty differs from the default"
done
text=$("${R[@]}" --pools pytorch --pools default --snapshot-start state "$SNAP/cs336-small-compiled-training.pickle" 2>/dev/null)
grep -q "start from PyTorch's state when the history begins: 96 segments" <<<"$text" && ok "text: the state named" || bad "text: the state"
grep -q "0 of its blocks found no room" <<<"$text" && ok "text: placement said" || bad "text: placement"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
