#!/usr/bin/env bash
# test_torch_validate.sh BUILD SOURCE SHARED - the model of PyTorch's caching
# allocator (`--pools pytorch`, `--pools pytorch-expandable`) against
# torchsim, the validated simulator in SHARED/tools/torchsim, on three of the
# shared traces (bench/torch_validate runs all of them): peak reserved and the
# smallest OOM-free device within 1% of torchsim's in both modes, and
# bench/torch_validate's own figures (one row per trace and mode). Skipped,
# saying so, when SHARED or python3 is absent.
set -euo pipefail
build=${1:?build dir}
src=${2:-$(cd "$(dirname "$0")/../.." && pwd)}
shared=${3:-$src/../shared}
command -v python3 >/dev/null || { echo "SKIP: python3 is missing"; exit 77; }
[ -f "$shared/tools/torchsim/sim.py" ] || { echo "SKIP: $shared/tools/torchsim is absent"; exit 77; }
traces=("$shared/traces/cpu/torch-cpu-gpt-serve-varlen.csv"
        "$shared/traces/gpu/cs336-small-compiled-training.csv"
        "$shared/traces/plans/mindspore-resnet50-plan.csv")
for t in "${traces[@]}"; do
  [ -f "$t" ] || { echo "SKIP: $t is absent"; exit 77; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rc=0
CM_SHARED_DIR=$shared bash "$src/bench/torch_validate" "$build" "${traces[@]}" >"$tmp/out.md" || rc=$?
cat "$tmp/out.md"
[ "$rc" -eq 0 ] || { echo "FAIL: bench/torch_validate exited $rc (rows off by more than 1% are marked)"; exit 1; }
rows=$(grep -c '^| .* | \(default\|expandable\) |' "$tmp/out.md")
[ "$rows" -eq 6 ] || { echo "FAIL: $rows rows, expected 6 (3 traces, 2 modes)"; exit 1; }
grep -q '0 of 6 rows off by more than 1%' "$tmp/out.md" || { echo "FAIL: summary line"; exit 1; }
echo "ok: 3 traces, both modes, within 1% of torchsim (peak reserved and smallest device)"
