#!/usr/bin/env bash
# fuzz/run.sh - build the libFuzzer targets and run each for a while.
#
#   bash fuzz/run.sh            (or: make fuzz)
#   CM_FUZZ_SECONDS=600 bash fuzz/run.sh toml     # one target, longer
#   CM_FUZZ_RUNS=20000 CM_FUZZ_SECONDS=0 bash fuzz/run.sh ops   # fixed work only
#
# Builds the whole tree with clang into build-fuzz/ with
# -fsanitize=fuzzer-no-link (coverage for the library; the invariant
# checkers are left out, fuzz/coverage-ignore.txt) plus
# CM_SANITIZE=address;undefined, and the fuzz_<target> binaries with
# -fsanitize=fuzzer. Each target runs in up to two phases, on a scratch copy
# of its seed corpus fuzz/corpus/<target>/ (new inputs the fuzzer finds stay
# in build-fuzz/corpus-<target>/, not in the tree), with the dictionary
# fuzz/<target>.dict when there is one:
#   runs     CM_FUZZ_RUNS executions (default 0: skipped; per target
#            CM_FUZZ_RUNS_<TARGET>, e.g. CM_FUZZ_RUNS_OPS) from the fixed seed
#            CM_FUZZ_SEED (default 1): the same work on every machine, so a
#            failure found there is found again by the next run;
#   seconds  CM_FUZZ_SECONDS (default 60; 0: skipped) of ordinary fuzzing.
# Each phase prints its executions and executions per second.
#
# The pickle target has fuzz/snapshot.dict: memo opcodes with far-apart
# indexes, 64-bit edge values and the snapshot's keys; its seeds include
# such inputs (memo-stride, shared-dict, dict-rebound, edge-*).
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
RUNS_ALL=${CM_FUZZ_RUNS:-0}
SEED=${CM_FUZZ_SEED:-1}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
BUILD=${CM_FUZZ_BUILD:-build-fuzz}
CC_FUZZ=${CM_FUZZ_CC:-clang}

# The ignore list is no build dependency: its checksum in the flags makes a
# changed list rebuild everything.
IGNORE=$ROOT/fuzz/coverage-ignore.txt
IGNORE_SUM=$(cksum <"$IGNORE" | awk '{print $1}')
# -Wno-unknown-warning-option: the shared warning list may carry gcc-only
# flags that clang would otherwise turn into -Werror failures.
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER="$CC_FUZZ" -DCM_FUZZ=ON -DCM_BUILD_TESTS=OFF \
  -DCM_SANITIZE="address;undefined" \
  -DCMAKE_C_FLAGS="-fsanitize=fuzzer-no-link -fsanitize-coverage-ignorelist=$IGNORE -DCM_FUZZ_IGNORE_SUM=$IGNORE_SUM -Wno-unknown-warning-option" >/dev/null
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
  extra=()
  # ops keeps one manager per setup for the whole process: memory it holds
  # between inputs would make libFuzzer rerun every such input to look for a
  # leak. Leaks are still reported, by LeakSanitizer at exit (the target
  # destroys its managers there) and by the replay ctest.
  [[ $t == ops ]] && extra=(-detect_leaks=0)
  # The pickle reader must cost memory and time in proportion to the input:
  # one allocation over 64 MiB or an input over 10 s from at most 4 KiB is a bug
  # (memo or dict amplification), reported as oom-* / timeout-*.
  tmo=30
  [[ $t == snapshot ]] && extra=(-malloc_limit_mb=64) && tmo=10
  tvar=CM_FUZZ_RUNS_$(tr '[:lower:]' '[:upper:]' <<<"$t")
  runs=${!tvar:-$RUNS_ALL}
  rc=0
  for phase in runs seconds; do
    if [[ $phase == runs ]]; then
      ((runs > 0)) || continue
      limit=(-runs="$runs" -seed="$SEED")
      what="$runs executions, seed $SEED"
      dir="$BUILD/corpus-$t-runs" # from the seeds alone, to be reproducible
      rm -rf "$dir"
      mkdir -p "$dir"
    else
      ((SECONDS_PER > 0)) || continue
      limit=(-max_total_time="$SECONDS_PER")
      what="${SECONDS_PER}s"
      dir=$work
    fi
    echo "=== fuzz_$t ($phase): $what, seeds $(ls "$seeds" | wc -l)"
    log="$BUILD/fuzz-$t-$phase.log"
    t0=$(date +%s.%N)
    set +e
    "$bin" "$dir" "$seeds" "${dict[@]}" "${extra[@]}" "${limit[@]}" -max_len="$max_len" \
      -timeout="$tmo" -report_slow_units=30 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$art/" >"$log" 2>&1
    prc=$?
    set -e
    t1=$(date +%s.%N)
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n1)
    cov=$(grep -Eo 'cov: [0-9]+' "$log" | tail -n1 | awk '{print $2}')
    rate=$(awk -v n="${execs:-0}" -v a="$t0" -v b="$t1" 'BEGIN { d = b - a; printf "%.0f", (d > 0 ? n / d : 0) }')
    echo "fuzz_$t ($phase): exit $prc, executions ${execs:-?} in $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')s ($rate/s), coverage ${cov:-?} edges"
    tail -n 5 "$log"
    REPORT+=("fuzz_$t ($phase): executions ${execs:-?}, $rate/s, exit $prc")
    if [[ $prc -ne 0 ]]; then
      rc=$prc
      echo "fuzz_$t ($phase) FAILED; full log: $log"
      grep -E 'ERROR|SUMMARY|runtime error|check failed' "$log" | head -n 20 || true
      break
    fi
  done
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
    echo "fuzz_$t FAILED"
  fi
done
echo "=== fuzz summary"
((${#REPORT[@]})) && printf '  %s\n' "${REPORT[@]}"
exit $status
