#!/usr/bin/env bash
# fuzz/run.sh - build the libFuzzer targets and run each for a while.
#
#   bash fuzz/run.sh            (or: make fuzz)
#   CM_FUZZ_SECONDS=600 bash fuzz/run.sh toml     # one target, longer
#
# Builds the whole tree with clang into build-fuzz/ with
# -fsanitize=fuzzer-no-link (coverage for the library) plus
# CM_SANITIZE=address;undefined, and the fuzz_<target> binaries with
# -fsanitize=fuzzer. Each target runs for ${CM_FUZZ_SECONDS:-60} seconds on a
# scratch copy of its seed corpus fuzz/corpus/<target>/ (new inputs the
# fuzzer finds stay in build-fuzz/corpus-<target>/, not in the tree), with
# the dictionary fuzz/<target>.dict when there is one.
#
# A crash, leak, timeout or sanitizer report makes libFuzzer write an
# artifact (crash-*, leak-*, timeout-*, oom-*). Every such artifact is
# copied into fuzz/corpus/<target>/ as a regression case, so that the
# fuzz-replay ctest (fuzz_replay_<target>) reproduces it on every build until
# the bug is fixed; commit it together with the fix. The script then fails.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
SECONDS_PER=${CM_FUZZ_SECONDS:-60}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
BUILD=${CM_FUZZ_BUILD:-build-fuzz}
CC_FUZZ=${CM_FUZZ_CC:-clang}

# -Wno-unknown-warning-option: the shared warning list may carry gcc-only
# flags that clang would otherwise turn into -Werror failures.
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER="$CC_FUZZ" -DCM_FUZZ=ON -DCM_BUILD_TESTS=OFF \
  -DCM_SANITIZE="address;undefined" \
  -DCMAKE_C_FLAGS="-fsanitize=fuzzer-no-link -Wno-unknown-warning-option" >/dev/null
cmake --build "$BUILD" -j "$JOBS"

TARGETS=("$@")
if ((${#TARGETS[@]} == 0)); then
  for f in "$BUILD"/fuzz/fuzz_*; do
    n=$(basename "$f")
    [[ -x "$f" && "$n" != fuzz_replay_* ]] && TARGETS+=("${n#fuzz_}")
  done
fi
((${#TARGETS[@]})) || { echo "fuzz/run.sh: no fuzz targets were built"; exit 1; }

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
status=0
declare -a REPORT=()
for t in "${TARGETS[@]}"; do
  bin="$BUILD/fuzz/fuzz_$t"
  [[ -x "$bin" ]] || { echo "fuzz/run.sh: no binary $bin"; status=1; continue; }
  seeds="fuzz/corpus/$t"
  work="$BUILD/corpus-$t"
  art="$BUILD/artifacts-$t"
  mkdir -p "$work" "$art" "$seeds"
  rm -f "$art"/*
  dict=()
  [[ -f "fuzz/$t.dict" ]] && dict=(-dict="fuzz/$t.dict")
  case $t in # longer inputs only slow these targets down
    ops) max_len=2048 ;;
    trace) max_len=8192 ;;
    *) max_len=4096 ;;
  esac
  echo "=== fuzz_$t: ${SECONDS_PER}s, seeds $(ls "$seeds" | wc -l)"
  log="$BUILD/fuzz-$t.log"
  set +e
  "$bin" "$work" "$seeds" "${dict[@]}" -max_total_time="$SECONDS_PER" -max_len="$max_len" \
    -timeout=30 -report_slow_units=30 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$art/" >"$log" 2>&1
  rc=$?
  set -e
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n1)
  cov=$(grep -Eo 'cov: [0-9]+' "$log" | tail -n1 | awk '{print $2}')
  echo "fuzz_$t: exit $rc, executions ${execs:-?}, coverage ${cov:-?} edges"
  tail -n 5 "$log"
  found=0
  for a in "$art"/*; do
    [[ -f "$a" ]] || continue
    case $(basename "$a") in slow-unit-*) echo "fuzz_$t: slow input $(basename "$a")"; continue ;; esac
    found=1
    cp "$a" "$seeds/regress-$(basename "$a")"
    echo "fuzz_$t: artifact $(basename "$a") copied to $seeds/regress-$(basename "$a")"
  done
  if [[ $rc -ne 0 || $found -ne 0 ]]; then
    status=1
    echo "fuzz_$t FAILED; full log: $log"
    grep -E 'ERROR|SUMMARY|runtime error' "$log" | head -n 20 || true
  fi
  REPORT+=("fuzz_$t: executions ${execs:-?} in ${SECONDS_PER}s, exit $rc")
done
echo "=== fuzz summary"
printf '  %s\n' "${REPORT[@]}"
exit $status
