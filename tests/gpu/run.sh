#!/usr/bin/env bash
# tests/gpu/run.sh [BUILD_DIR] - the GPU check for cubemem's CUDA support.
# Not run by ctest. Run from anywhere on a machine with an NVIDIA GPU:
#
#   bash tests/gpu/run.sh            # builds into build-gpu/ under the repository
#
# Steps (each bounded by `timeout`; the whole run takes a few minutes):
#   0. probe: load libcuda.so.1 (or $CM_CUDA_LIBRARY) and count devices;
#      without one print "SKIP: no GPU (...)" and exit 0
#   1. build everything (Release; plugins included)
#   2. test_cuda (the real-GPU tests must run, not skip) and test_ptr
#   3. replay the bundled trace with --device cuda:sync and --device cuda:async
#   4. PyTorch GPT training loop twice, in separate processes: PyTorch's own
#      allocator, then cubemem through CUDAPluggableAllocator; compare losses
#      (1e-5 relative), step time and peak reserved memory
#   5. write bench/results/gpu-<date>.md with every result
#      ($CM_GPU_RESULTS_DIR overrides the folder)
# Exit status: 0 when every step that could run passed (a missing PyTorch is
# reported as skipped in the results), 1 otherwise.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${1:-$ROOT/build-gpu}
PY=${PYTHON:-python3}
DATE=$(date +%Y-%m-%d)
RESULTS_DIR=${CM_GPU_RESULTS_DIR:-$ROOT/bench/results}
RESULTS=$RESULTS_DIR/gpu-$DATE.md
WORK=$(mktemp -d "${TMPDIR:-/tmp}/cubemem-gpu.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
START=$(date +%s)
FAILED=()

say() { printf '\n=== %s (t=%ds)\n' "$*" "$(( $(date +%s) - START ))"; }
fail() { echo "FAILED: $*"; FAILED+=("$*"); }

# ---- 0. probe ---------------------------------------------------------------
probe() {
  "$PY" - <<'PY' 2>&1
import ctypes, os, sys
path = os.environ.get("CM_CUDA_LIBRARY") or "libcuda.so.1"
try:
    lib = ctypes.CDLL(path)
except OSError as e:
    print(f"cannot load {path}: {e}"); sys.exit(1)
try:
    init, count = lib.cuInit, lib.cuDeviceGetCount
except AttributeError as e:
    print(f"{path} is not a CUDA driver: {e}"); sys.exit(1)
r = init(0)
if r != 0:
    print(f"cuInit failed with CUresult {r}"); sys.exit(1)
n = ctypes.c_int(0)
r = count(ctypes.byref(n))
if r != 0 or n.value < 1:
    print(f"no CUDA device (cuDeviceGetCount -> {r}, {n.value})"); sys.exit(1)
print(f"{n.value} CUDA device(s)")
PY
}
if ! command -v "$PY" >/dev/null; then
  echo "SKIP: no GPU check possible (python3 not found to probe the driver)"
  exit 0
fi
if ! PROBE=$(probe); then
  echo "SKIP: no GPU ($PROBE)"
  exit 0
fi
say "probe: $PROBE"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || true
GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1)
DRIVER=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n1)

# ---- 1. build ------------------------------------------------------------------
say "build into $BUILD"
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
if ! timeout 300 cmake -S "$ROOT" -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release \
     -DCM_WERROR=OFF >"$WORK/configure.log" 2>&1; then
  cat "$WORK/configure.log"; fail "configure"; echo "cannot continue"; exit 1
fi
if ! timeout 400 cmake --build "$BUILD" -j "$(nproc)" >"$WORK/build.log" 2>&1; then
  tail -n 60 "$WORK/build.log"; fail "build"; echo "cannot continue"; exit 1
fi
echo "build ok"

# ---- 2. unit tests on the GPU ---------------------------------------------------
say "test_cuda"
timeout 180 "$BUILD/test_cuda" >"$WORK/test_cuda.log" 2>&1
RC=$?
cat "$WORK/test_cuda.log"
[[ $RC -eq 0 ]] || fail "test_cuda (exit $RC)"
for t in test_gpu_sync_and_async test_gpu_oom_is_not_toobig test_gpu_events test_gpu_pinned \
         test_gpu_open_default test_gpu_ptr; do
  grep -q "^ok $t\$" "$WORK/test_cuda.log" || fail "$t did not pass on the GPU"
done
grep -q "^ok test_gpu_vm\$\|SKIP test_gpu_vm" "$WORK/test_cuda.log" || fail "test_gpu_vm"
say "test_ptr"
timeout 120 "$BUILD/test_ptr" >"$WORK/test_ptr.log" 2>&1 || fail "test_ptr"
tail -n 1 "$WORK/test_ptr.log"

# ---- 3. replay on the device -------------------------------------------------------
TRACE=$ROOT/examples/torch-cpu-gpt-train.csv
[[ -f $TRACE ]] || TRACE=$ROOT/../shared/traces/cpu/torch-cpu-gpt-train.csv
declare -A REPLAY
for kind in sync async; do
  say "replay --device cuda:$kind $(basename "$TRACE")"
  if [[ ! -f $TRACE ]]; then fail "replay: trace not found"; break; fi
  if timeout 240 "$BUILD/cubemem" replay --device "cuda:$kind" --no-progress "$TRACE" \
       >"$WORK/replay-$kind.txt" 2>&1; then
    REPLAY[$kind]=$(cat "$WORK/replay-$kind.txt")
  else
    REPLAY[$kind]="FAILED (exit $?):
$(cat "$WORK/replay-$kind.txt")"
    fail "replay --device cuda:$kind"
  fi
  echo "${REPLAY[$kind]}"
done

# ---- 4. PyTorch training, both allocators --------------------------------------------
TORCH_STATUS=""
if ! TV=$("$PY" -c 'import torch; assert torch.cuda.is_available(); print(torch.__version__)' 2>&1); then
  TORCH_STATUS="skipped: PyTorch with CUDA is not available ($(echo "$TV" | tail -n1))"
  echo "SKIP torch: $TORCH_STATUS"
else
  say "train_gpt.py with PyTorch's allocator (torch $TV)"
  timeout 240 "$PY" "$ROOT/tests/gpu/train_gpt.py" --allocator torch --out "$WORK/torch.json" \
    2>&1 | tail -n 20 || true
  [[ -s $WORK/torch.json ]] || fail "training with PyTorch's allocator"
  say "train_gpt.py with cubemem (sync driver calls)"
  CUBEMEM_CUDA_ALLOCATOR=sync timeout 240 "$PY" "$ROOT/tests/gpu/train_gpt.py" \
    --allocator cubemem --lib "$BUILD/libcubemem_torch.so" --out "$WORK/cubemem.json" \
    2>&1 | tail -n 20 || true
  [[ -s $WORK/cubemem.json ]] || fail "training with cubemem"
fi

# ---- 5. results ------------------------------------------------------------------------
say "results -> $RESULTS"
mkdir -p "$RESULTS_DIR"
{
  echo "# cubemem on a GPU, $DATE"
  echo
  echo "- device: ${GPU_NAME:-unknown} (driver ${DRIVER:-unknown}); probe: $PROBE"
  echo "- commit: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo 'n/a (uncommitted tree)')"
  echo "- command: \`bash tests/gpu/run.sh\` (build: Release, $BUILD)"
  echo
  echo "## Unit tests on the device"
  echo
  echo '```'
  grep -hE '^(ok|not ok)|SKIP|FAIL|passed' "$WORK/test_cuda.log" "$WORK/test_ptr.log" 2>/dev/null |
    sed "s|$WORK/||"
  echo '```'
  echo
  echo "## Replay of $(basename "$TRACE") on the device"
  for kind in sync async; do
    echo
    echo "### \`cubemem replay --device cuda:$kind\`"
    echo
    echo '```'
    echo "${REPLAY[$kind]:-not run}"
    echo '```'
  done
  echo
  echo "## GPT training loop: PyTorch's caching allocator vs cubemem"
  echo
  if [[ -n $TORCH_STATUS ]]; then
    echo "$TORCH_STATUS"
  elif [[ -s $WORK/torch.json && -s $WORK/cubemem.json ]]; then
    "$PY" - "$WORK/torch.json" "$WORK/cubemem.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1])); c = json.load(open(sys.argv[2]))
cfg = t["config"]
print(f"Model: GPT-style decoder, {t['params']:,} parameters (vocab {cfg['vocab']}, d_model "
      f"{cfg['d_model']}, {cfg['layers']} layers, {cfg['heads']} heads), batch {cfg['batch']} x "
      f"seq {cfg['seq']}, fp32, AdamW, seed {cfg['seed']}; {cfg['warmup']} warm-up + "
      f"{cfg['steps']} timed steps; torch {t['torch']} on {t['device']}.")
print()
worst = max(abs(a - b) / max(abs(a), 1e-12) for a, b in zip(t["losses"], c["losses"]))
ok = len(t["losses"]) == len(c["losses"]) and worst <= 1e-5
print("| allocator | median step | peak reserved | final loss |")
print("|---|---|---|---|")
for r, name in ((t, "PyTorch caching allocator"), (c, "cubemem (pluggable allocator)")):
    print(f"| {name} | {r['median_step_s'] * 1e3:.2f} ms | {r['peak_reserved']:,} B "
          f"({r['peak_reserved'] / 2**20:.1f} MiB) | {r['losses'][-1]:.6f} |")
print()
print(f"PyTorch peak allocated (live tensors): {t.get('peak_allocated', 0):,} B. "
      "Peak reserved is torch.cuda.max_memory_reserved() for PyTorch and cubemem's own "
      "high-water mark of bytes held from the device (cubemem_torch_peak_reserved) for cubemem.")
print()
print(f"Correctness: largest relative loss difference over {len(t['losses'])} steps = "
      f"{worst:.3e} -> {'PASS' if ok else 'FAIL'} (limit 1e-5).")
print()
print("cubemem's report at the end of training:")
print()
print("```")
print(c.get("cubemem_report", "").rstrip())
print("```")
sys.exit(0 if ok else 3)
PY
    [[ $? -eq 0 ]] || fail "losses differ by more than 1e-5 relative"
  else
    echo "training did not complete; see the log of run.sh"
  fi
  echo
  if ((${#FAILED[@]})); then
    echo "## Failures"
    echo
    for f in "${FAILED[@]}"; do echo "- $f"; done
  else
    echo "All steps passed in $(( $(date +%s) - START )) s."
  fi
} >"$RESULTS" 2>&1
cat "$RESULTS"

if ((${#FAILED[@]})); then
  echo "run.sh: ${#FAILED[@]} failure(s)"
  exit 1
fi
echo "run.sh: all passed in $(( $(date +%s) - START )) s"
