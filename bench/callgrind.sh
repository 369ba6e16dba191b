#!/bin/bash
# callgrind.sh - instructions per operation (reserve or release, handle
# bookkeeping included) of the replay loop, measured with callgrind.
#
#   bench/callgrind.sh [BUILD_DIR] [TRACE] [LAYOUT...]
#
# Defaults: BUILD_DIR=build, TRACE=../shared/traces/cpu/torch-cpu-mobilenet-train.csv
# (relative to the source root), LAYOUT=default. Only the event loop of
# cm_bench_replay_loop is instrumented (CALLGRIND_START/STOP_INSTRUMENTATION),
# so parsing and manager setup are not counted. Prints one line per layout:
#   LAYOUT  instructions  ops  instructions/op
# With GUARDS=N the manager relocates and N blocks hold a guard through the
# loop (cm_manager_get_resource): reservations then avoid guarded granules.
# With MICRO=1 it then counts cm_bench_micro's cases too (instructions per
# reserve+release pair, hit and miss, 4 KiB and 1 MiB, every layout).
# Exit 77 when valgrind or the trace is missing.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
trace=${2:-$here/../shared/traces/cpu/torch-cpu-mobilenet-train.csv}
shift $(( $# > 2 ? 2 : $# )) || true
layouts=("$@")
[ ${#layouts[@]} -eq 0 ] && layouts=(default)
command -v valgrind >/dev/null || { echo "valgrind not found" >&2; exit 77; }
[ -f "$trace" ] || { echo "trace not found: $trace" >&2; exit 77; }
bin=$build/bench/cm_bench_replay_loop
[ -x "$bin" ] || { echo "build $bin first (cmake --build $build --target cm_bench_replay_loop)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for layout in "${layouts[@]}"; do
  valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$tmp/cg.out" \
    "$bin" "$trace" "$layout" ${GUARDS:+"$GUARDS"} >"$tmp/out" 2>"$tmp/err" || true
  ir=$(awk '/^totals:/ {t=$2} /^summary:/ {s=$2} END {print (t != "" ? t : s)}' "$tmp/cg.out")
  ops=$(sed -n 's/.* ops \([0-9]*\) .*/\1/p' "$tmp/out")
  if [ -z "$ir" ] || [ -z "$ops" ]; then
    echo "measurement failed for $layout" >&2; cat "$tmp/err" >&2; exit 1
  fi
  awk -v l="$layout" -v ir="$ir" -v ops="$ops" \
    'BEGIN { printf "%-16s %12d instructions %8d ops %7.1f instructions/op\n", l, ir, ops, ir / ops }'
done
if [ "${MICRO:-0}" = 1 ]; then
  micro=$build/bench/cm_bench_micro
  for size in 4096 1048576; do
    for layout in default subslices exclusive-pages; do
      for c in hit miss; do
        valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$tmp/m.out" \
          "$micro" "$size" "$layout" "$c" >"$tmp/mout" 2>/dev/null
        ir=$(awk '/^totals:/ {t=$2} /^summary:/ {s=$2} END {print (t != "" ? t : s)}' "$tmp/m.out")
        n=$([ "$c" = hit ] && echo 20000 || echo 20000)
        awk -v l="$layout" -v c="$c" -v sz="$size" -v ir="$ir" -v n="$n" \
          'BEGIN { printf "micro %-16s %-4s %8d bytes %8.1f instructions/pair\n", l, c, sz, ir / n }'
      done
    done
  done
fi
