#!/usr/bin/env bash
# bench/below_fit.sh BUILD [TRACE...] - what keeps each trace off a device one
# granule smaller than its smallest: cubemem fit (default layout) replays on
# one granule less, and that run's first error says where the arena's held
# memory that is not live lies (the JSON's below_fit). One markdown row per
# trace (bench/results/below_fit.md).
set -euo pipefail
build=${1:?usage: bench/below_fit.sh BUILD [TRACE...]}
shift
traces=("$@")
if [ ${#traces[@]} -eq 0 ]; then traces=(/work/shared/traces/*/*.csv); fi
echo "| trace | fit: granules over the floor | failing request at fit - 1 granule (granules to map / free) | in partly filled granules | free granules in partly used objects |"
echo "|---|---:|---:|---:|---:|"
for t in "${traces[@]}"; do
  name=$(basename "$(dirname "$t")")/$(basename "$t" .csv)
  "$build/cubemem" fit --no-config --no-progress --pools default --json "$t" |
    python3 -c '
import json, re, sys
name, f = sys.argv[1], json.loads(sys.stdin.readline())
g = 2097152
over = f["fit_bytes"] // g - -(-f["peak_live_bytes"] // g)
b = f.get("below_fit") or {}
if not b.get("failed_allocs"):
    print(f"| {name} | {over} | (not run, or it fits there too) | | |")
    sys.exit()
msg = b["message"]
m = re.search(r"(\d+) bytes requested, (\d+) of (\d+) in use", msg)
req, used, cap = (int(x) for x in m.groups()) if m else (0, 0, 0)
def gran(pat):
    x = re.search(r"([\d.]+) (B|KB|MB|GB) " + pat, msg)
    return float(x.group(1)) * {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9}[x.group(2)] / g if x else 0.0
part = gran("are the free parts of granules")
pin = gran("are free granules inside physical objects")
print(f"| {name} | {over} | {req // g} / {(cap - used) // g} | {part:.1f} | {pin:.1f} |")
' "$name"
done
