#!/bin/bash
# identical.sh - do two builds of cubemem give the same figures?
#
#   bench/identical.sh OLD_BUILD NEW_BUILD [SHARED_DIR]
#
# For every shared trace (SHARED_DIR/traces/*/*.csv and the PyTorch snapshots
# SHARED_DIR/traces/snapshots/*.pickle; SHARED_DIR defaults to ../shared next
# to the source root) runs, with each build's cubemem:
#   cubemem replay --json --no-config TRACE
#   cubemem fit --json --no-config TRACE
#   cubemem plan --no-config TRACE
#   cubemem replay --svg F --html F --no-config TRACE   (the two files)
# and compares the outputs byte for byte (standard output and exit status;
# the replay's wall-clock fields, which differ from run to run, are masked:
# time_ns, ns_per_op and the text reports' ns/op).
# Prints one line per command and trace (same | DIFFERENT) and a closing count;
# exit 0 when every output is identical, 1 otherwise, 77 without traces.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
[ $# -ge 2 ] || { echo "usage: $0 OLD_BUILD NEW_BUILD [SHARED_DIR]" >&2; exit 2; }
old=$(cd "$1" 2>/dev/null && pwd)/cubemem
new=$(cd "$2" 2>/dev/null && pwd)/cubemem
shared=${3:-$here/../shared}
for b in "$old" "$new"; do
  [ -x "$b" ] || { echo "not an executable: $b" >&2; exit 2; }
done
shopt -s nullglob
traces=("$shared"/traces/*/*.csv "$shared"/traces/snapshots/*.pickle)
[ ${#traces[@]} -gt 0 ] || { echo "no traces under $shared/traces" >&2; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# mask FILE: blank the wall-clock timings (not figures) in place: the JSON
# keys time_ns, ns_per_op and elapsed_ns, and the text reports' "ns/op"
mask() {
  sed -E -i 's/"(time_ns|ns_per_op|elapsed_ns|median_time_ns|wall_ns)": *[0-9.e+-]+/"\1":T/g;
             s/[0-9.]+ (ns|us|ms|s)\/op/T/g' "$1"
}

# run BIN OUT CMD... : stdout to OUT, then the exit status as a last line
run() {
  local bin=$1 out=$2; shift 2
  (cd "$tmp" && "$bin" "$@" >"$out" 2>/dev/null; echo "exit $?" >>"$out")
  mask "$out"
}

# compare CMD NAME OLD NEW: count and print one line
compare() {
  if cmp -s "$3" "$4"; then
    same=$((same + 1)); printf 'same       %-14s %s\n' "$1" "$2"
  else
    diff=$((diff + 1)); printf 'DIFFERENT  %-14s %s\n' "$1" "$2"
    diff "$3" "$4" 2>&1 | head -5
  fi
}

same=0 diff=0
for t in "${traces[@]}"; do
  name=${t#"$shared"/traces/}
  for cmd in "replay --json" "fit --json" "plan"; do
    # shellcheck disable=SC2086 # cmd is a command and its option
    run "$old" "$tmp/old" $cmd --no-config "$t"
    # shellcheck disable=SC2086
    run "$new" "$tmp/new" $cmd --no-config "$t"
    compare "$cmd" "$name" "$tmp/old" "$tmp/new"
  done
  # the pictures: the SVG timeline and the HTML report (its embedded JSON masked)
  run "$old" "$tmp/old" replay --svg "$tmp/old.svg" --html "$tmp/old.html" --no-config "$t"
  run "$new" "$tmp/new" replay --svg "$tmp/new.svg" --html "$tmp/new.html" --no-config "$t"
  for f in svg html; do
    [ -f "$tmp/old.$f" ] && mask "$tmp/old.$f"
    [ -f "$tmp/new.$f" ] && mask "$tmp/new.$f"
    compare "replay --$f" "$name" "$tmp/old.$f" "$tmp/new.$f"
    rm -f "$tmp/old.$f" "$tmp/new.$f"
  done
done
echo "$same identical, $diff different"
[ "$diff" -eq 0 ]
