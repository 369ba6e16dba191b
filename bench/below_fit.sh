#!/usr/bin/env bash
# bench/below_fit.sh BUILD [TRACE...] - what keeps each trace off a device one
# granule smaller than its smallest (cubemem fit, default layout): the replay
# at fit - 1 granule fails, and its error says where the arena's held memory
# that is not live lies. One markdown row per trace (bench/results/fit.md,
# "One granule less").
set -euo pipefail
build=${1:?usage: bench/below_fit.sh BUILD [TRACE...]}
shift
traces=("$@")
if [ ${#traces[@]} -eq 0 ]; then traces=(/work/shared/traces/*/*.csv); fi
cm="$build/cubemem"
echo "| trace | fit: granules over the floor | failing request at fit - 1 granule (granules to map / free) | in partly filled granules | free granules in partly used objects |"
echo "|---|---:|---:|---:|---:|"
for t in "${traces[@]}"; do
  name=$(basename "$(dirname "$t")")/$(basename "$t" .csv)
  f=$("$cm" fit --no-config --no-progress --pools default --json "$t")
  r=$("$cm" replay --no-config --no-progress --pools default --json --device-memory \
    "$(echo "$f" | python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())["fit_bytes"] - 2097152)')" \
    "$t" 2>/dev/null || true)
  python3 - "$name" "$f" "$r" <<'PY'
import json, re, sys
name, f, r = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3].splitlines()[0])
g = 2097152
floor = -(-f["peak_live_bytes"] // g)
over = f["fit_bytes"] // g - floor
ff = r.get("first_failure")
if not ff:
    print(f"| {name} | {over} | (fits: the fit is the floor or the replay found room) | | |")
    sys.exit()
msg = ff["message"]
m = re.search(r"(\d+) bytes requested, (\d+) of (\d+) in use", msg)
req, used, cap = (int(x) for x in m.groups()) if m else (0, 0, 0)
def mb(pat):
    x = re.search(pat, msg)
    if not x: return 0.0
    v, u = float(x.group(1)), x.group(2)
    return v * {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9}[u] / g
part = mb(r"([\d.]+) (B|KB|MB|GB) are the free parts of granules")
pin = mb(r"([\d.]+) (B|KB|MB|GB) are free granules inside physical objects")
print(f"| {name} | {over} | {req // g} / {(cap - used) // g} | {part:.1f} | {pin:.1f} |")
PY
done
