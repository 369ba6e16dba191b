#!/usr/bin/env bash
# callgrind-report.sh BUILD_DIR - markdown report of instructions per replay
# operation (reserve or release, handle bookkeeping included) for the default
# layout and both reference presets, with the command and the machine.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
trace=${TRACE:-$root/../shared/traces/cpu/torch-cpu-mobilenet-train.csv}
if [ ! -f "$trace" ]; then echo "callgrind-report: no trace at $trace (../shared is absent)"; exit 0; fi
cmake --build "$build" --target cm_bench_replay_loop >/dev/null
echo "# Instructions per replay operation (callgrind)"
echo
echo "Command: \`make bench\` (runs \`bench/callgrind.sh $build $trace default subslices exclusive-pages\`)."
echo "Date: $(date -u +%Y-%m-%d). Machine: $(uname -sm), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores; $(gcc --version | head -1); $(valgrind --version)."
echo "Only the event loop of cm_bench_replay_loop is counted (CALLGRIND_START/STOP); parsing and set-up are not."
echo
echo '```'
bash "$root/bench/callgrind.sh" "$build" "$trace" default subslices exclusive-pages
echo '```'
