#!/usr/bin/env bash
# test_plan.sh - `cubemem plan`: the last line of its output is a layout that
# `cubemem replay --pools` accepts verbatim, whose cappable pools carry caps,
# and which - replayed on the same trace - never reserves more than the
# default layout and fails no reservation. Checked on a small synthetic
# trace, then on every shared trace (skipped when ../shared is absent).
#
# usage: bash test_plan.sh BUILD_DIR SOURCE_DIR SHARED_DIR
set -u
BUILD=${1:?build dir}
SHARED=${3:-}
CM="$BUILD/cubemem"
[ -x "$CM" ] || { echo "no $CM"; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail=0

# field NAME of the JSON line $2 (integers only)
field() { sed -n "s/.*\"$1\":\([0-9][0-9]*\).*/\1/p" <<<"$2"; }

# check_trace TRACE [plan options...]: plan, then replay default vs planned
check_trace() {
  local trace=$1
  shift
  local out layout lines def pl dr pr df pf
  if ! out=$("$CM" plan "$@" "$trace" 2>"$TMP/err"); then
    echo "FAIL plan $trace: exit status $?: $(cat "$TMP/err")"
    fail=1
    return
  fi
  layout=$(tail -n 1 <<<"$out")
  if [ -z "$layout" ]; then
    echo "FAIL plan $trace: empty last line"
    fail=1
    return
  fi
  local base="default"
  local prev=""
  for a in "$@"; do
    [ "$prev" = "--pools" ] && base=$a
    prev=$a
  done
  local extra=()
  prev=""
  for a in "$@"; do
    [ "$prev" = "--device-memory" ] && extra=(--device-memory "$a")
    prev=$a
  done
  if ! lines=$("$CM" replay --json --no-progress "${extra[@]}" --pools "$base" --pools "$layout" \
      "$trace" 2>"$TMP/err"); then
    echo "FAIL replay $trace with '$layout': $(cat "$TMP/err")"
    fail=1
    return
  fi
  def=$(sed -n 1p <<<"$lines")
  pl=$(sed -n 2p <<<"$lines")
  dr=$(field peak_reserved_bytes "$def")
  pr=$(field peak_reserved_bytes "$pl")
  df=$(field failed_allocs "$def")
  pf=$(field failed_allocs "$pl")
  if [ -z "$dr" ] || [ -z "$pr" ]; then
    echo "FAIL $trace: no peak_reserved_bytes in the replay output"
    fail=1
    return
  fi
  local verdict=ok
  if [ "$pr" -gt "$dr" ]; then verdict="FAIL (planned reserves more)"; fail=1; fi
  if [ "$pf" -gt "$df" ]; then verdict="FAIL (planned fails $pf reserves)"; fail=1; fi
  printf '%-4s %-48s %s: %15s  planned: %15s  %s\n' "$verdict" "$(basename "$trace")" "$base" \
    "$dr" "$pr" "$layout"
}

# ---- a synthetic trace: a sliced layout gets caps, and the output parses back ----
{
  echo "Thread,Time,Action,Pointer,Size,Stream"
  t=0
  for round in 1 2 3; do
    for i in 1 2 3 4 5 6 7 8; do
      t=$((t + 1))
      printf '1,00:00:00.%06d,allocate,0x%x,%d,0x0\n' $t $((round * 4096 + i * 64)) $((i * 100000))
    done
    for i in 8 7 6 5 4 3 2 1; do
      t=$((t + 1))
      printf '1,00:00:00.%06d,free,0x%x,%d,0x0\n' $t $((round * 4096 + i * 64)) $((i * 100000))
    done
  done
  printf '1,00:00:00.%06d,allocate,0xffff0,%d,0x0\n' $((t + 1)) 300000000
} >"$TMP/small.csv"

LAY='sliced:page=1MiB,max-slice=1MiB;sliced:page=8MiB,max-slice=8MiB;exclusive:max=1GiB'
out=$("$CM" plan --pools "$LAY" --device-memory 4GiB "$TMP/small.csv") || {
  echo "FAIL plan on the synthetic trace"
  fail=1
}
last=$(tail -n 1 <<<"$out")
case "$last" in
  sliced:page=1MiB,max-slice=1MiB,cap=*\;sliced:page=8MiB,max-slice=8MiB,cap=*\;exclusive:max=1GiB) ;;
  *) echo "FAIL synthetic plan: unexpected layout '$last'"; fail=1 ;;
esac
grep -q "peak reserved" <<<"$out" || { echo "FAIL synthetic plan: no summary"; fail=1; }
# the modelled driver time of the layout and of the plan (sliced pages: plain allocations)
grep -Eq '^ +layout +[0-9.]+ m?s in [0-9,]+ driver calls: alloc ' <<<"$out" &&
  grep -Eq '^ +plan +[0-9.]+ m?s in [0-9,]+ driver calls' <<<"$out" &&
  grep -q '(a100 costs' <<<"$out" || { echo "FAIL synthetic plan: no modelled driver time"; fail=1; }
out=$("$CM" plan --driver-costs fast --pools "$LAY" "$TMP/small.csv" 2>/dev/null)
grep -q '(fast costs' <<<"$out" || { echo "FAIL: --driver-costs fast is not the model used"; fail=1; }
"$CM" plan --driver-costs a10 "$TMP/small.csv" >/dev/null 2>&1
[ $? -eq 2 ] || { echo "FAIL: an unknown --driver-costs should exit 2"; fail=1; }
check_trace "$TMP/small.csv" --pools "$LAY" --device-memory 4GiB
check_trace "$TMP/small.csv" --device-memory 4GiB

# a capped last pool gets an uncapped copy appended
out=$("$CM" plan --pools 'sliced:page=1MiB,max-slice=1MiB' "$TMP/small.csv" 2>/dev/null)
last=$(tail -n 1 <<<"$out")
case "$last" in
  sliced:page=1MiB,max-slice=1MiB,cap=*\;sliced:page=1MiB,max-slice=1MiB) ;;
  *) echo "FAIL capped-last plan: unexpected layout '$last'"; fail=1 ;;
esac

# usage errors
"$CM" plan >/dev/null 2>&1; [ $? -eq 2 ] || { echo "FAIL: no trace should exit 2"; fail=1; }
"$CM" plan --pools 'bogus' "$TMP/small.csv" >/dev/null 2>&1
[ $? -eq 2 ] || { echo "FAIL: a bad layout should exit 2"; fail=1; }
"$CM" plan "$TMP/missing.csv" >/dev/null 2>&1
[ $? -eq 1 ] || { echo "FAIL: a missing trace should exit 1"; fail=1; }

# ---- the shared traces ----
if [ -z "$SHARED" ] || [ ! -d "$SHARED/traces" ]; then
  echo "shared traces absent ($SHARED/traces): checked the synthetic trace only"
  [ $fail -eq 0 ] && exit 0 || exit 1
fi
n=0
for t in "$SHARED"/traces/*/*.csv; do
  [ -f "$t" ] || continue
  check_trace "$t"
  check_trace "$t" --pools subslices
  n=$((n + 1))
done
echo "$n shared traces checked"

# A dry run meets the device's limit: three 32 GiB allocations on an 80 GiB
# device do not fit; plan says so and exits 3 (never "0 failed").
printf 'Thread,Time,Action,Pointer,Size,Stream\n1,00:00:00.000001,allocate,0x1,34359738368,0x0\n1,00:00:00.000002,allocate,0x2,34359738368,0x0\n1,00:00:00.000003,allocate,0x3,34359738368,0x0\n' >"$TMP/three.csv"
"$CM" plan "$TMP/three.csv" >"$TMP/three.out" 2>"$TMP/three.err"
rc=$?
if [ $rc -ne 3 ]; then echo "FAIL plan of a trace that does not fit: exit $rc, expected 3"; fail=1; fi
if grep -q "with 0 failed" "$TMP/three.out"; then echo "FAIL plan printed 0 failed for a layout that does not fit"; fail=1; fi
grep -q "1 reserves failed" "$TMP/three.out" || { echo "FAIL plan did not report the failed reservation"; fail=1; }
grep -q "does not fit" "$TMP/three.err" || { echo "FAIL plan did not explain exit 3"; fail=1; }
[ $fail -eq 0 ] || exit 1
exit 0
