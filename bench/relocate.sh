#!/usr/bin/env bash
# bench/relocate.sh BUILD [TRACE...] - the smallest device with and without
# relocation (cubemem fit --pools default [--relocate]) and what the replay
# at the relocated fit copies (cubemem replay --relocate --device-memory FIT).
# Prints one markdown table row per trace; bench/results/relocate.md.
set -euo pipefail
build=${1:?usage: bench/relocate.sh BUILD [TRACE...]}
shift
traces=("$@")
if [ ${#traces[@]} -eq 0 ]; then traces=(/work/shared/traces/*/*.csv); fi
cm="$build/cubemem"
field() { python3 -c 'import json,sys; d=json.loads(sys.stdin.readline()); print(eval(sys.argv[1]))' "$1"; }
echo "| trace | peak live | floor + 1 granule | fit | fit with --relocate | granules over the floor: without / with | moves | bytes copied | copy time (2039 GB/s) |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
for t in "${traces[@]}"; do
  name=$(basename "$(dirname "$t")")/$(basename "$t" .csv)
  a=$("$cm" fit --no-config --no-progress --pools default --json "$t")
  b=$("$cm" fit --no-config --no-progress --pools default --relocate --json "$t")
  live=$(echo "$a" | field 'd["peak_live_bytes"]')
  fa=$(echo "$a" | field 'd["fit_bytes"]')
  fb=$(echo "$b" | field 'd["fit_bytes"]')
  g=2097152
  floor=$(( (live + g - 1) / g ))
  r=$("$cm" replay --no-config --no-progress --relocate --device-memory "$fb" --json "$t")
  mv=$(echo "$r" | field 'd["relocation"]["moves"]')
  by=$(echo "$r" | field 'd["relocation"]["bytes_copied"]')
  ns=$(echo "$r" | field 'd["relocation"]["copy_time_ns"]')
  printf '| %s | %s | %s | %s (%s) | %s (%s) | %s / %s | %s | %s | %.3f ms |\n' "$name" "$live" \
    $(( (floor + 1) * g )) "$fa" "$(python3 -c "print(f'{$fa/$live:.4f}')")" "$fb" \
    "$(python3 -c "print(f'{$fb/$live:.4f}')")" $(( fa / g - floor )) $(( fb / g - floor )) \
    "$mv" "$by" "$(python3 -c "print($ns/1e6)")"
done
