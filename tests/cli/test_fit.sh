#!/usr/bin/env bash
# test_fit.sh - `cubemem fit`: the smallest device a trace replays on with no
# failed reservation. The figure is checked from outside: `replay` on a device
# of exactly that size succeeds, one grid step (2 MiB) less fails with exit 3;
# JSON and text agree; usage errors exit 2; `replay --fit` shows the same.
# usage: bash test_fit.sh BUILD_DIR SOURCE_DIR [SHARED_DIR]
set -u
BUILD=${1:?build dir} SRC=${2:?source dir} SHARED=${3:-}
CM="$BUILD/cubemem"
[ -x "$CM" ] || { echo "SKIP: $CM not built"; exit 77; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail=0 pass=0
ok() { echo "ok $1"; pass=$((pass + 1)); }
bad() { echo "not ok $1"; fail=$((fail + 1)); }
check() { local name=$1; shift; if "$@" >/dev/null 2>&1; then ok "$name"; else bad "$name"; fi; }
field() { sed -n "s/.*\"$1\":\([0-9.][0-9.]*\).*/\1/p" <<<"$2"; }
EX="$SRC/examples/torch-cpu-gpt-train.csv"

check_fit() { # check_fit TRACE LAYOUT
  local trace=$1 layout=$2 line fb live
  line=$("$CM" fit --json --no-progress --pools "$layout" "$trace")
  check "fit --json exits 0 [$layout]" test $? -eq 0
  fb=$(field fit_bytes "$line")
  live=$(field peak_live_bytes "$line")
  [ -n "$fb" ] && [ "$fb" -ge "$live" ] && ok "fit >= peak live [$layout]" || bad "fit >= peak live [$layout]: $line"
  local name rc
  name=$(basename "$trace")
  "$CM" replay --no-progress --pools "$layout" --device-memory "$fb" "$trace" >/dev/null 2>&1
  rc=$?
  check "replay on the fitted device succeeds [$layout, $name]" test $rc -eq 0
  "$CM" replay --no-progress --pools "$layout" --device-memory $((fb - 2097152)) "$trace" >/dev/null 2>&1
  rc=$?
  check "one grid step less fails with exit 3 [$layout, $name]" test $rc -eq 3
}
check_fit "$EX" default
check_fit "$EX" "sliced:page=64MiB;exclusive:max=1GiB;direct" # explicit: presets depend on the device size

out=$("$CM" fit --no-progress "$EX")
check "text report names the layout" grep -q "default" <<<"$out"
check "text report has the ratio header" grep -q "fits in" <<<"$out"
js=$("$CM" fit --json --no-progress --pools default "$EX")
fb=$(field fit_bytes "$js")
check "text report shows the same bytes as the JSON" grep -q "$fb" <<<"$out"
rj=$("$CM" replay --fit --json --no-progress "$EX")
check "replay --fit reports the same smallest device" test "$(field fit_bytes "$rj")" = "$fb"
check "replay --fit text row" grep -q "smallest device" <<<"$("$CM" replay --fit --no-progress "$EX")"

# Why not smaller: the run on one grid step less, its first failure and, for
# the arena, where its memory beyond the live data lies; replay agrees.
below=$(python3 -c 'import json,sys; b=json.loads(sys.argv[1])["below_fit"]; print(b["device_memory"], b["failed_allocs"], b["status"], b["event"], b["message"])' "$js")
read -r bdev bfail bstat bev _ <<<"$below"
check "below_fit: one grid step under the fit" test "$bdev" -eq $((fb - 2097152))
check "below_fit: it failed there, out of memory" test "$bfail" -gt 0 -a "$bstat" = CM_EOOM
check "below_fit: the arena says where its memory lies" grep -q "are the free parts of granules that live blocks only partly fill" <<<"$below"
check "text report: the line under the fit" grep -q "on 2 MiB less ($bdev bytes): CM_EOOM reserving .* at event $bev .*of live data" <<<"$out"
rb=$("$CM" replay --json --no-progress --pools default --device-memory "$bdev" "$EX")
check "replay on that device fails at the same event" test "$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["first_failure"]["event"])' "$rb")" -eq "$bev"

# Without --pools: cubemem's default and PyTorch's two modes, then "fits on".
check "no --pools: three allocators side by side" test "$(grep -c '^  torch-cpu-gpt-train.csv ' <<<"$out")" -eq 6
check "each names the allocator it assumes" grep -q "pytorch-expandable .*PyTorch's CUDA caching allocator.*expandable_segments:True" <<<"$out"
check "fits on: the built-in list, smallest first" grep -q "pytorch  *PyTorch  *[0-9.]* GiB  T4 (14.75 GiB) *T4, A10, L4, RTX 4090, A100 40GB, H100 80GB, A100 80GB, H200, B200" <<<"$out"
check "fits on names the reserve" grep -q "plus 500 MiB kept for the CUDA context" <<<"$out"
js3=$("$CM" fit --json --no-progress "$EX")
check "no --pools, --json: three objects" test "$(grep -c '^{' <<<"$js3")" -eq 3
check "--json: allocators cubemem, pytorch, pytorch" test "$(sed -n 's/.*"allocator":"\([a-z]*\)".*/\1/p' <<<"$js3" | tr '\n' ' ')" = "cubemem pytorch pytorch "
check "--json: needs = fit + 500 MiB" test "$(field needs_bytes "$(head -1 <<<"$js3")")" -eq $((fb + 524288000))
check "--json: smallest_gpu and fits_on" grep -q '"smallest_gpu":"T4","fits_on":\["T4","A10",' <<<"$js3"
# A list of one's own: the trace needs about 1.13 GiB; 1.25 GiB holds it only with no reserve.
own=$("$CM" fit --json --no-progress --pools default --gpus 'big=64GiB, small=1.25GiB' --reserve 0 "$EX")
check "--gpus LIST --reserve 0: the smallest that fits" grep -q '"reserve_bytes":0,.*"smallest_gpu":"small","fits_on":\["small","big"\]' <<<"$own"
own=$("$CM" fit --json --no-progress --pools default --gpus 'big=64GiB, small=1.25GiB' --reserve 200MiB "$EX")
check "--reserve 200MiB leaves the small one out" grep -q '"smallest_gpu":"big","fits_on":\["big"\]' <<<"$own"
printf '# my cards\nsmall = 512MiB\nbig=1GiB  # comment\n' >"$TMP/gpus.txt"
own=$("$CM" fit --no-progress --pools default --gpus "$TMP/gpus.txt" "$EX")
check "--gpus FILE: none of the list fits" grep -q "none of the list  *(the largest, big, has 1 GiB)" <<<"$own"
own=$("$CM" fit --json --no-progress --pools default --gpus "$TMP/gpus.txt" "$EX")
check "--json: smallest_gpu null when none fits" grep -q '"smallest_gpu":null,"fits_on":\[\]' <<<"$own"
"$CM" fit --gpus 'T4' "$EX" >/dev/null 2>"$TMP/g.err"; check "--gpus without a size exits 2" test $? -eq 2
check "and says NAME=SIZE" grep -q "is not NAME=SIZE" "$TMP/g.err"
"$CM" fit --gpus 'T4=16G' "$EX" >/dev/null 2>&1; check "--gpus with a bad size exits 2" test $? -eq 2
"$CM" fit --gpus ',' "$EX" >/dev/null 2>&1; check "--gpus with no entry exits 2" test $? -eq 2
"$CM" fit --reserve 1X "$EX" >/dev/null 2>&1; check "--reserve with a bad size exits 2" test $? -eq 2

"$CM" fit --no-progress --pools 'arena:object=8MiB' "$EX" >/dev/null 2>&1
rc=$?
check "the arena's object= key is accepted on the command line" test $rc -eq 0
out=$("$CM" replay --no-progress --pools 'arena:object=8MiB' "$EX" 2>&1)
rc=$?
check "object=8MiB replays and is named in the report" test $rc -eq 0 -a -n "$(grep 'arena:object=8MiB' <<<"$out")"
"$CM" replay --no-progress --pools 'arena:object=auto' "$EX" >/dev/null 2>&1
check "object= takes a size only (auto is refused, exit 2)" test $? -eq 2
"$CM" fit >/dev/null 2>&1; check "no trace exits 2" test $? -eq 2
"$CM" fit --grid 0 "$EX" >/dev/null 2>&1; check "--grid 0 exits 2" test $? -eq 2
"$CM" fit --alignment 384 "$EX" >/dev/null 2>&1; check "--alignment not a power of two exits 2" test $? -eq 2
"$CM" fit --frobnicate "$EX" >/dev/null 2>&1; check "unknown option exits 2" test $? -eq 2
"$CM" fit "$TMP/none.csv" >/dev/null 2>&1; check "missing trace exits 1" test $? -eq 1
"$CM" fit --help | grep -q "smallest device"; check "--help describes it" test $? -eq 0
printf '[driver_costs]\ncreate_us = 1\ncreat_us = 2\n' >"$TMP/costs.toml"
"$CM" fit --driver-costs "$TMP/costs.toml" "$EX" >/dev/null 2>"$TMP/costs.err"
check "a cost file with an unknown key exits 2" test $? -eq 2
check "and names the key and line" grep -q "line 3: unknown key 'creat_us'" "$TMP/costs.err"
out=$("$CM" fit --json --no-progress --driver-costs fast "$EX")
check "--json has the modelled driver time of the unconstrained replay" \
  grep -q '"driver_time_model":{"costs":"fast","total_ns":[1-9]' <<<"$out"
printf 'Action,Pointer,Size\nallocate,0x1,4096\n' >"$TMP/nopool.csv"
"$CM" fit --pools 'exclusive:max=1KiB' "$TMP/nopool.csv" >/dev/null 2>"$TMP/np.err"
check "a trace no layout can serve exits 1" test $? -eq 1
check "and says why" grep -q "does not replay even on a 1024 times larger device" "$TMP/np.err"

if [ -n "$SHARED" ] && [ -d "$SHARED/traces" ]; then
  check_fit "$SHARED/traces/cpu/torch-cpu-lstm-varlen-train.csv" default
  check_fit "$SHARED/traces/gpu/cs336-medium-ctx256-inference.csv" default
else
  echo "# ../shared is absent: shared traces not checked"
fi
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
