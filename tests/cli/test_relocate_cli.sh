#!/usr/bin/env bash
# test_relocate_cli.sh BUILD_DIR SOURCE_DIR [SHARED_DIR] - `cubemem replay
# --relocate`, `--copy-bandwidth` and `cubemem fit --relocate` on the bundled
# trace (examples/torch-cpu-gpt-train.csv):
#   - on a device one granule above its floor the replay without relocation
#     fails and the one with it succeeds, reporting moves, bytes copied and
#     the modelled copy time (2 x bytes / bandwidth) in text and JSON;
#   - without --relocate the JSON has no "relocation" and does not change;
#   - --html marks the relocating events ("events" in the embedded JSON);
#   - fit --relocate needs no larger a device than fit;
#   - per stream: the same trace with a second stream holding one small
#     block fits one granule more with --relocate (the streams' managers
#     copy through their shares of the device) and reports the moves
#     summed over the streams, as the merged replay does;
#   - a bad --copy-bandwidth is a usage error (exit 2);
#   - with the shared traces: cpu/torch-cpu-mobilenet-train on a device of
#     its floor (126 granules, where some requests cannot fit) relocates a
#     bounded number of times: the packing of one refused request stops at
#     twice the live allocations' moves (it used to circle a 2 KiB block
#     through 2.7 million relocations, for more than 5 minutes), and a request
#     no relocation can serve plans nothing.
set -euo pipefail
BUILD=${1:?usage: test_relocate_cli.sh BUILD_DIR SOURCE_DIR}
SRC=${2:?}
CLI="$BUILD/cubemem"
T="$SRC/examples/torch-cpu-gpt-train.csv"
command -v python3 >/dev/null || { echo "SKIP: python3 is needed to read the JSON"; exit 77; }
WORK=$(mktemp -d "${TMPDIR:-/tmp}/cm-relocate-cli.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
fail=0
ok() { echo "ok $*"; }
bad() { echo "not ok $*"; fail=1; }
field() { python3 -c 'import json,sys; d=json.loads(open(sys.argv[1]).readline()); print(eval(sys.argv[2]))' "$@"; }
CAP=1180696576 # ceil(peak live / 2 MiB) + 1 granules
"$CLI" replay --no-config --no-progress --device-memory $CAP --json "$T" >"$WORK/plain.json" 2>/dev/null || true
"$CLI" replay --no-config --no-progress --device-memory $CAP --relocate --copy-bandwidth 1000 \
  --json "$T" >"$WORK/reloc.json"
[ "$(field "$WORK/plain.json" 'd["failed_allocs"] > 0')" = True ] && ok "without relocation the trace fails at $CAP" \
  || bad "without relocation the trace fits $CAP: the test needs a tighter device"
[ "$(field "$WORK/plain.json" '"relocation" in d')" = False ] && ok "no relocation object without --relocate" \
  || bad "a relocation object without --relocate"
[ "$(field "$WORK/reloc.json" 'd["failed_allocs"]')" = 0 ] && ok "with relocation it fits" || bad "failed with --relocate"
moves=$(field "$WORK/reloc.json" 'd["relocation"]["moves"]')
bytes=$(field "$WORK/reloc.json" 'd["relocation"]["bytes_copied"]')
ns=$(field "$WORK/reloc.json" 'd["relocation"]["copy_time_ns"]')
[ "$moves" -gt 0 ] && [ "$bytes" -gt 0 ] && ok "$moves moves, $bytes bytes copied" || bad "moves $moves, bytes $bytes"
[ "$(python3 -c "print(abs($ns - 2 * $bytes / 1000) <= 1)")" = True ] && ok "copy time = 2 x bytes / bandwidth" \
  || bad "copy time $ns for $bytes bytes at 1000 GB/s"
"$CLI" replay --no-config --no-progress --device-memory $CAP --relocate "$T" >"$WORK/reloc.txt"
grep -q 'relocated allocations' "$WORK/reloc.txt" && grep -q 'copy time (model)' "$WORK/reloc.txt" \
  && ok "text report rows" || bad "text report: $(cat "$WORK/reloc.txt")"
"$CLI" replay --no-config --no-progress --device-memory $CAP --relocate --html "$WORK/r.html" "$T" >/dev/null
grep -q '"events":\[\[' "$WORK/r.html" && ok "--html marks relocating events" || bad "no relocation events in the HTML"
# Per stream: stream 0x7 holds 1008 bytes (one granule of its own pools)
# during the whole trace; stream 0x0 is the trace above.
{ head -1 "$T"; echo "1,00:00:00.000000,allocate,0x7770000,1008,0x7"; tail -n +2 "$T"
  echo "1,00:59:00.000000,free,0x7770000,1008,0x7"; } >"$WORK/two.csv"
CAP2=$((CAP + 2097152))
"$CLI" replay --no-config --no-progress --device-memory $CAP2 --relocate --json "$WORK/two.csv" \
  >"$WORK/two.json"
[ "$(field "$WORK/two.json" 'len(d["streams"])')" = 2 ] && ok "two streams, each with its own pools" \
  || bad "not replayed per stream"
[ "$(field "$WORK/two.json" 'd["failed_allocs"]')" = 0 ] && ok "per stream with relocation it fits" \
  || bad "per stream failed with --relocate"
[ "$(field "$WORK/two.json" 'd["relocation"]["moves"]')" = "$moves" ] \
  && [ "$(field "$WORK/two.json" 'd["relocation"]["bytes_copied"]')" = "$bytes" ] \
  && ok "per stream: the same $moves moves and $bytes bytes as merged" \
  || bad "per stream relocation: $(field "$WORK/two.json" 'd["relocation"]')"
"$CLI" replay --no-config --no-progress --device-memory $CAP2 --relocate "$WORK/two.csv" \
  >"$WORK/two.txt"
grep -Eq 'relocated allocations +[1-9]' "$WORK/two.txt" && ok "per stream: text report counts the moves" \
  || bad "per stream text report: $(grep relocated "$WORK/two.txt")"
a=$("$CLI" fit --no-config --no-progress --pools default --json "$T" | python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())["fit_bytes"])')
b=$("$CLI" fit --no-config --no-progress --pools default --relocate --json "$T" | python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())["fit_bytes"])')
[ "$b" -le "$a" ] && [ "$b" -le $CAP ] && ok "fit $a, with --relocate $b" || bad "fit $a, with --relocate $b"
rc=0
"$CLI" replay --no-config --copy-bandwidth fast "$T" >/dev/null 2>"$WORK/err" || rc=$?
[ $rc = 2 ] && grep -q 'copy-bandwidth' "$WORK/err" && ok "bad --copy-bandwidth: exit 2" || bad "bad --copy-bandwidth: exit $rc"
SHARED=${3:-$SRC/../shared}
M="$SHARED/traces/cpu/torch-cpu-mobilenet-train.csv"
if [ -f "$M" ]; then
  rc=0
  timeout 120 "$CLI" replay --no-config --no-progress --relocate --device-memory 264241152 --json "$M" \
    >"$WORK/mob.json" 2>/dev/null || rc=$?
  if [ $rc = 124 ]; then
    bad "mobilenet at its floor: the relocating replay ran over 120 s"
  else
    runs=$(field "$WORK/mob.json" 'd["relocation"]["runs"]')
    failed=$(field "$WORK/mob.json" 'd["failed_allocs"]')
    [ "$failed" -gt 0 ] && [ "$runs" -gt 0 ] && [ "$runs" -lt 100000 ] \
      && ok "mobilenet at its floor: $runs relocations, $failed requests refused" \
      || bad "mobilenet at its floor: $runs relocations, $failed requests refused"
  fi
else
  echo "ok # SKIP mobilenet bound: no $M"
fi
exit $fail
