#!/usr/bin/env bash
# tests/gpu/run.sh [--fake] [BUILD_DIR] - the GPU check for cubemem's CUDA
# support, sized for one lent machine (under 8 minutes on an H200; every step
# has a timeout and the timeouts add up to less). Not run by ctest.
#
#   bash tests/gpu/run.sh            # on the GPU machine; builds into build-gpu/
#   bash tests/gpu/run.sh --fake     # anywhere: the same flow on the strict fake
#                                    # driver (validates the script; no PyTorch)
#
# Results: $OUT when set (the device machine brings $OUT back), else
# $CM_GPU_RESULTS_DIR, else bench/results/ on a GPU and a fresh temporary
# folder with --fake (so a check of the script never touches the committed
# results; the path is printed). The report ($DIR/gpu-report.md) is written step by step, so
# a timeout still leaves what finished; every step's log is kept in
# $DIR/gpu-logs/. Exit status 0 when every step that could run passed
# (a missing PyTorch or CuPy is reported as skipped), 1 otherwise.
#
# Steps (timeout in seconds):
#   0. probe (10): load the driver ($CM_CUDA_LIBRARY or libcuda.so.1), count
#      devices; without one print "SKIP: no GPU (...)" and exit 0
#   1. build, Release, plugins included (configure 30 when fresh, build 90;
#      a carried build is reused)
#   2. test_cuda with the real-GPU tests (25), test_cuda_fake (5) and
#      test_ptr (15)
#   3. replay every trace of bench/ (../shared/traces or shared/traces, plus
#      examples/) under default, subslices and exclusive-pages through
#      --device cuda:sync (50) and cuda:async (50), and through --device sim
#      with the device's memory size (20): no failed reservation, peak
#      reserved within 1% of sim, and the time spent in driver calls
#      (measured beside the a100 model, and measured microseconds per call)
#   4. GPT training (train_gpt.py): PyTorch's allocator, then cubemem with
#      sync and with async driver calls (40 each); losses must agree within
#      1e-5 relative; the sync run records CUBEMEM_LOG
#   5. the recorded log: replay, plan, replay with the plan (20)
#   6. CuPy through cupy_cubemem with streams created and destroyed (25)
# Sum of the timeouts: 460 s.
set -uo pipefail

FAKE=0
if [[ ${1:-} == --fake ]]; then
  FAKE=1
  shift
fi
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${1:-$ROOT/build-gpu}
PY=${PYTHON:-python3}
if [[ -n ${OUT:-} || -n ${CM_GPU_RESULTS_DIR:-} ]]; then
  DIR=${OUT:-$CM_GPU_RESULTS_DIR}
elif (( FAKE )); then
  DIR=$(mktemp -d "${TMPDIR:-/tmp}/cubemem-gpu-fake.XXXXXX")
  echo "tests/gpu/run.sh --fake: results in $DIR"
else
  DIR=$ROOT/bench/results
fi
REPORT=$DIR/gpu-report.md
LOGS=$DIR/gpu-logs
mkdir -p "$LOGS"
START=$(date +%s)
FAILED=()
BUDGET=470 # seconds; a step that would start later is skipped

elapsed() { echo $(( $(date +%s) - START )); }
say() { printf '\n=== %s (t=%ds)\n' "$*" "$(elapsed)"; }
fail() { echo "FAILED: $*"; FAILED+=("$*"); md "- **FAILED**: $*"; }
md() { printf '%s\n' "$@" >>"$REPORT"; }
# run NAME TIMEOUT CMD... : run with a timeout, log to $LOGS/NAME.log, return its status
run() {
  local name=$1 t=$2
  shift 2
  if (( $(elapsed) + 5 > BUDGET )); then
    echo "skipped $name: the time budget is spent"
    md "- $name: skipped (time budget spent at t=$(elapsed)s)"
    return 124
  fi
  timeout -k 3 "$t" "$@" >"$LOGS/$name.log" 2>&1
  local rc=$?
  [[ $rc -eq 124 || $rc -eq 137 ]] && echo "$name: timed out after ${t}s"
  return $rc
}
block() { md '```'; cat "$@" >>"$REPORT" 2>/dev/null; md '```'; }

{
  echo "# cubemem on a GPU, $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo "- command: \`bash tests/gpu/run.sh$([[ $FAKE == 1 ]] && echo ' --fake')\` (build $BUILD)"
  echo "- commit: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo 'n/a')$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' + local changes')"
  echo "- logs: $LOGS"
} >"$REPORT"

# ---- 1. build (first: the fake driver of --fake comes from the build) -------------
say "build into $BUILD"
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
if [[ ! -f $BUILD/CMakeCache.txt ]]; then
  run configure 30 cmake -S "$ROOT" -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DCM_WERROR=OFF || { cat "$LOGS/configure.log"; fail "configure"; exit 1; }
fi
run build 90 cmake --build "$BUILD" -j "$(nproc)" ||
  { tail -n 40 "$LOGS/build.log"; fail "build (see gpu-logs/build.log)"; exit 1; }
echo "build ok"
if [[ $FAKE == 1 ]]; then
  export CM_CUDA_LIBRARY=$BUILD/libfakecuda.so FAKECUDA_CAPACITY=${FAKECUDA_CAPACITY:-140G}
  md "- driver: the strict fake ($CM_CUDA_LIBRARY, FAKECUDA_CAPACITY=$FAKECUDA_CAPACITY): this validates the script, not a GPU"
fi

# ---- 0. probe ------------------------------------------------------------------
PROBE=$(timeout 10 "$PY" - <<'PY' 2>&1
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
v = ctypes.c_int(0)
lib.cuDriverGetVersion(ctypes.byref(v))
print(f"{n.value} CUDA device(s), driver API {v.value // 1000}.{v.value % 1000 // 10}")
PY
)
if [[ $? -ne 0 ]]; then
  echo "SKIP: no GPU ($PROBE)"
  md "- SKIP: no GPU ($PROBE)"
  exit 0
fi
say "probe: $PROBE"
GPU=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -n1)
md "- device: ${GPU:-unknown (no nvidia-smi)}; probe: $PROBE"

# ---- 2. unit tests on the device -------------------------------------------------
say "test_cuda"
md "" "## Unit tests on the device" ""
run test_cuda 25 "$BUILD/test_cuda"
RC=$?
grep -E '^(ok|not ok)|SKIP|FAIL|passed' "$LOGS/test_cuda.log" | tail -n 40
[[ $RC -eq 0 ]] || fail "test_cuda (exit $RC)"
if [[ $FAKE == 0 ]]; then
  for t in test_gpu_sync_and_async test_gpu_oom_is_not_toobig test_gpu_events test_gpu_pinned \
           test_gpu_open_default test_gpu_ptr test_gpu_vm; do
    grep -q "^ok $t\$" "$LOGS/test_cuda.log" || fail "$t did not pass on the GPU"
  done
fi
run test_cuda_fake 5 "$BUILD/test_cuda_fake" || fail "test_cuda_fake"
run test_ptr 15 "$BUILD/test_ptr" || fail "test_ptr"
block <(grep -hE '^(ok|not ok)|SKIP|FAIL|passed' "$LOGS/test_cuda.log" "$LOGS/test_cuda_fake.log" \
  "$LOGS/test_ptr.log")

# ---- 3. replay every trace of bench/ on the device ----------------------------------
TRACES=()
for d in "${TRACES_DIR:-}" "$ROOT/../shared/traces" "$ROOT/shared/traces"; do
  if [[ -n $d && -d $d ]]; then
    while IFS= read -r f; do TRACES+=("$f"); done < <(find "$d" -name '*.csv' -type f | LC_ALL=C sort)
    break
  fi
done
TRACES+=("$ROOT/examples/torch-cpu-gpt-train.csv")
LAYOUTS=(--pools default --pools subslices --pools exclusive-pages)
say "replay ${#TRACES[@]} trace(s) x 3 layouts"
md "" "## Replay on the device: ${#TRACES[@]} trace(s) x default, subslices, exclusive-pages" ""
for kind in sync async; do
  run "replay-cuda-$kind" 50 "$BUILD/cubemem" replay --device "cuda:$kind" --no-progress --json \
    "${LAYOUTS[@]}" "${TRACES[@]}"
  RC=$?
  grep '^{' "$LOGS/replay-cuda-$kind.log" >"$LOGS/replay-cuda-$kind.json"
  [[ $RC -eq 0 ]] || fail "replay --device cuda:$kind (exit $RC; see gpu-logs/replay-cuda-$kind.log)"
done
MEM=$("$PY" -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["device_memory"])' \
      "$LOGS/replay-cuda-sync.json" 2>/dev/null || echo 80GiB)
run replay-sim 20 "$BUILD/cubemem" replay --device sim --device-memory "$MEM" --no-progress --json \
  "${LAYOUTS[@]}" "${TRACES[@]}" || fail "replay --device sim"
grep '^{' "$LOGS/replay-sim.log" >"$LOGS/replay-sim.json"
"$PY" - "$LOGS" >"$LOGS/replay-compare.md" 2>&1 <<'PY'
import json, os, sys
logs = sys.argv[1]
def load(n):
    p = os.path.join(logs, n + ".json")
    return {(r["trace"], r["layout"]): r for r in map(json.loads, open(p))} if os.path.exists(p) else {}
sim, bad = load("replay-sim"), 0
print("| trace | layout | device | sim peak reserved | cuda peak reserved | diff | failed | driver time | measured in calls | model (a100) |")
print("|---|---|---|---|---|---|---|---|---|---|")
total, by_call, calls_n, model = {}, {}, {}, {}
US = {"creates": 193.0, "maps": 1.45, "set_access": 36.0, "unmaps": 25.6, "releases": 25.6,
      "allocs": 230.45, "frees": 51.2, "reserves": 19.0, "address_frees": 19.0, "mem_queries": 1.0}
for kind in ("sync", "async"):
    runs = load("replay-cuda-" + kind)
    if not runs:
        print(f"| (cuda:{kind} produced no results) |||||||"); bad += 1
    for key, r in sorted(runs.items()):
        s = sim.get(key)
        diff = (r["peak_reserved_bytes"] - s["peak_reserved_bytes"]) / max(s["peak_reserved_bytes"], 1) if s else float("nan")
        ok = s is not None and abs(diff) <= 0.01 and r["failed_allocs"] == 0
        bad += not ok
        total[kind] = total.get(kind, 0) + r["device_time_ns"]
        for k, ns in r.get("driver_call_time_ns", {}).items():
            by_call.setdefault(kind, {})[k] = by_call.setdefault(kind, {}).get(k, 0) + ns
        for k, n in r.get("driver_calls", {}).items():
            calls_n.setdefault(kind, {})[k] = calls_n.setdefault(kind, {}).get(k, 0) + n
        m = r.get("driver_time_model", {})
        model[kind] = model.get(kind, 0) + m.get("total_ns", 0)
        print(f"| {os.path.basename(key[0])} | {key[1]} | cuda:{kind} | "
              f"{s['peak_reserved_bytes'] if s else 'n/a':,} | {r['peak_reserved_bytes']:,} | {diff:+.3%} | "
              f"{r['failed_allocs']} | {r['device_time_ns'] / 1e6:.1f} ms | "
              f"{m.get('measured_ns', 0) / 1e6:.1f} ms | {m.get('total_ns', 0) / 1e6:.1f} ms |"
              + ("" if ok else " **FAIL**"))
print()
for kind, ns in total.items():
    print(f"- time in driver calls, all replays, cuda:{kind}: {ns / 1e9:.3f} s")
    calls = by_call.get(kind, {})
    if calls:
        print(f"  - by kind of call: " + ", ".join(f"{k} {v / 1e6:.1f} ms" for k, v in calls.items() if v))
    print(f"  - modelled (a100 costs), all replays: {model.get(kind, 0) / 1e9:.3f} s")
    n = calls_n.get(kind, {})
    per = [f"{k} {calls[k] / n[k] / 1e3:.2f} us (model {US[k]})" for k in US
           if n.get(k) and calls.get(k) is not None]
    if per: # what a [driver_costs] file for this GPU would hold (docs/replay.md)
        print(f"  - measured per call (calibration): " + ", ".join(per))
print(f"- pairs outside 1% of sim or with failed reservations: {bad}")
sys.exit(1 if bad else 0)
PY
[[ $? -eq 0 ]] || fail "replay: peak reserved differs from sim by more than 1%, or failed reservations"
cat "$LOGS/replay-compare.md" | tail -n 4
cat "$LOGS/replay-compare.md" >>"$REPORT"

# ---- 4. PyTorch training, three allocators ----------------------------------------------
md "" "## GPT training loop: PyTorch's caching allocator vs cubemem (sync, async)" ""
if ! TV=$("$PY" -c 'import torch; assert torch.cuda.is_available(); print(torch.__version__)' 2>&1); then
  md "skipped: PyTorch with CUDA is not available ($(echo "$TV" | tail -n1))"
  echo "SKIP torch: $(echo "$TV" | tail -n1)"
else
  say "train_gpt.py (torch $TV)"
  run train-torch 40 "$PY" "$ROOT/tests/gpu/train_gpt.py" --allocator torch --out "$LOGS/torch.json" ||
    fail "training with PyTorch's allocator (gpu-logs/train-torch.log)"
  CUBEMEM_LOG="$LOGS/cubemem-sync.csv" CUBEMEM_CUDA_ALLOCATOR=sync \
    run train-cubemem-sync 40 "$PY" "$ROOT/tests/gpu/train_gpt.py" --allocator cubemem \
    --lib "$BUILD/libcubemem_torch.so" --out "$LOGS/cubemem-sync.json" ||
    fail "training with cubemem, sync (gpu-logs/train-cubemem-sync.log)"
  CUBEMEM_CUDA_ALLOCATOR=async \
    run train-cubemem-async 40 "$PY" "$ROOT/tests/gpu/train_gpt.py" --allocator cubemem \
    --lib "$BUILD/libcubemem_torch.so" --out "$LOGS/cubemem-async.json" ||
    fail "training with cubemem, async (gpu-logs/train-cubemem-async.log)"
  "$PY" "$ROOT/tests/gpu/summarize_training.py" "$LOGS" >>"$REPORT" 2>&1
  [[ $? -eq 0 ]] || fail "training: a run is missing or the losses differ by more than 1e-5"

fi
if [[ $FAKE == 1 && ! -s $LOGS/cubemem-sync.csv ]]; then
  # No PyTorch here: record a synthetic run through the plugin instead, so
  # that step 5 is exercised.
  CUBEMEM_LOG="$LOGS/cubemem-sync.csv" CUBEMEM_TORCH_LIBRARY="$BUILD/libcubemem_torch.so" \
    CUBEMEM_CLI="$BUILD/cubemem" PYTHONPATH="$ROOT/python" run record-synthetic 20 "$PY" -c '
from cubemem import _native as n
live = []
for step in range(20):
    live += [n.try_malloc((i + 1) * 65536) for i in range(50)]
    for p in live[:40]:
        n.free(p)
    del live[:40]
n.empty_cache()' || fail "synthetic recording through the plugin"
fi

# ---- 5. the recorded run: replay, plan, replay with the plan ---------------------------
if [[ -s $LOGS/cubemem-sync.csv ]]; then
  say "replay / plan the recorded run"
  md "" "## The recorded run (CUBEMEM_LOG) replayed, planned, replayed with the plan" ""
  CSV=$LOGS/cubemem-sync.csv
  run log-loop 20 bash -c '
    set -e
    "$1" replay --no-progress --pools default --pools subslices "$2"
    L=$("$1" plan "$2" | tail -n 1)
    echo "plan: $L"
    "$1" replay --no-progress --pools "$L" "$2"' log-loop "$BUILD/cubemem" "$CSV" ||
    fail "replay/plan of the recorded log (gpu-logs/log-loop.log)"
  block "$LOGS/log-loop.log"
fi

# ---- 6. CuPy ---------------------------------------------------------------------------
md "" "## CuPy through cupy_cubemem" ""
if "$PY" -c 'import cupy; cupy.cuda.runtime.getDeviceCount()' >/dev/null 2>&1; then
  say "CuPy"
  CUBEMEM_TORCH_LIBRARY="$BUILD/libcubemem_torch.so" PYTHONPATH="$ROOT/plugins" \
    run cupy 25 "$PY" "$ROOT/tests/gpu/cupy_check.py" || fail "CuPy check (gpu-logs/cupy.log)"
  block "$LOGS/cupy.log"
else
  md "skipped: CuPy is not installed"
fi

# ---- summary -----------------------------------------------------------------------------
md ""
if ((${#FAILED[@]})); then
  md "## Result: ${#FAILED[@]} failure(s) in $(elapsed) s"
  for f in "${FAILED[@]}"; do md "- $f"; done
  echo "run.sh: ${#FAILED[@]} failure(s); report $REPORT"
  exit 1
fi
md "## Result: every step that ran passed, in $(elapsed) s"
echo "run.sh: all passed in $(elapsed) s; report $REPORT"
