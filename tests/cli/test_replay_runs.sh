#!/usr/bin/env bash
# test_replay_runs.sh BUILD_DIR SOURCE_DIR SHARED_DIR - `cubemem replay --runs 2`
# (the trace twice through one manager and device) on the simulated device and
# on the strict fake CUDA driver (libfakecuda.so, as test_replay_fakecuda.sh
# runs it), every layout of the comparison, and the driver-time model:
#   - "runs" has 2 entries, none with a failed reservation;
#   - each run's driver-call total is the sum of its kinds, run 1 counts at
#     least what the replay itself reports (it also frees what the trace left
#     live), and the modelled time is each count times its a100 cost, summed;
#   - on the fake driver each run that called the driver has measured time.
# Steady state: the default layout's second run makes no driver call (it holds
# what the first run mapped while the device has room; ZERO_SECOND_RUN=0 below
# turns the check off).
# Traces: examples/torch-cpu-gpt-train.csv always, plus two shared traces
# when ../shared is present (skipped with a message when absent).
set -euo pipefail
BUILD=${1:?usage: test_replay_runs.sh BUILD_DIR SOURCE_DIR SHARED_DIR}
SRC=${2:?}
SHARED=${3:-$SRC/../shared}
CLI="$BUILD/cubemem"
FAKE="$BUILD/libfakecuda.so"
ZERO_SECOND_RUN=1 # 1: the default layout's second run must make no driver call
[[ -x $CLI ]] || { echo "SKIP: $CLI not built"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: python3 is needed to read the JSON"; exit 77; }

TRACES=("$SRC/examples/torch-cpu-gpt-train.csv")
if [[ -d $SHARED/traces ]]; then
  TRACES+=("$SHARED/traces/cpu/torch-cpu-mlp-train.csv" "$SHARED/traces/gpu/cs336-medium-ctx128-inference.csv"
    "$SHARED/traces/gpu/cs336-small-compiled-training.csv" "$SHARED/traces/plans/mindspore-pangu2.6b-plan.csv")
else
  echo "note: $SHARED/traces is absent; replaying only the bundled trace"
fi
LAYOUTS=(--pools default --pools subslices --pools exclusive-pages)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/cm-runs.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

"$CLI" replay --runs 2 --no-progress --json "${LAYOUTS[@]}" "${TRACES[@]}" >"$WORK/sim.json"
if [[ -f $FAKE ]]; then
  FAKECUDA_CAPACITY=80G CM_CUDA_LIBRARY="$FAKE" FAKECUDA_REPORT="$WORK/fake.report" \
    "$CLI" replay --device cuda --runs 2 --no-progress --json "${LAYOUTS[@]}" "${TRACES[@]}" \
    >"$WORK/cuda.json"
  grep -qx 'violations=0' "$WORK/fake.report" || { echo "FAIL: the strict driver counted violations"; cat "$WORK/fake.report"; exit 1; }
else
  echo "note: $FAKE not built; the simulated device only"
fi

# the text report has a row per run
"$CLI" replay --runs 2 --no-progress "${TRACES[0]}" >"$WORK/sim.txt"
grep -Eq '^ +run 2 driver calls +[0-9,]+$' "$WORK/sim.txt" || { echo "FAIL: no 'run 2 driver calls' row"; cat "$WORK/sim.txt"; exit 1; }
grep -Eq '^ +model time \(a100\) +[0-9.]+ m?s$' "$WORK/sim.txt" || { echo "FAIL: no model time row"; exit 1; }

python3 - "$WORK" "$ZERO_SECOND_RUN" <<'PY'
import json, os, sys
work, zero = sys.argv[1], sys.argv[2] == "1"
US = {"create": 193.0, "map": 1.45, "set_access": 36.0, "unmap": 25.6, "release": 25.6,
      "reserve": 19.0, "address_free": 19.0, "alloc": 193.0 + 1.45 + 36.0, "free": 51.2,
      "mem_query": 1.0}
CALLS = {"create": "creates", "map": "maps", "set_access": "set_access", "unmap": "unmaps",
         "release": "releases", "reserve": "reserves", "address_free": "address_frees",
         "alloc": "allocs", "free": "frees", "mem_query": "mem_queries"}
bad = 0
def fail(msg):
    global bad
    print("FAIL", msg); bad += 1
def check_model(where, calls, model):
    if model["costs"] != "a100": fail(f"{where}: costs {model['costs']}")
    for kind, us in US.items():
        want = round(us * 1000 * calls[CALLS[kind]])
        if abs(model["by_kind"][kind] - want) > 1: fail(f"{where}: {kind} {model['by_kind'][kind]} != {want}")
        if abs(model["us_per_call"][kind] - us) > 1e-9: fail(f"{where}: {kind} costs {model['us_per_call'][kind]} us")
    if model["total_ns"] != sum(model["by_kind"].values()): fail(f"{where}: total != sum of kinds")
for name in ("sim", "cuda"):
    path = os.path.join(work, name + ".json")
    if not os.path.exists(path): continue
    rows = [json.loads(l) for l in open(path)]
    if len(rows) < 3: fail(f"{name}: {len(rows)} results")
    for r in rows:
        where = f"{name} {os.path.basename(r['trace'])} [{r['layout']}]"
        check_model(where, r["driver_calls"], r["driver_time_model"])
        runs = r["runs"]
        if len(runs) != 2 or [x["run"] for x in runs] != [1, 2]: fail(f"{where}: runs {len(runs)}"); continue
        for x in runs:
            c = x["driver_calls"]
            if x["failed_allocs"]: fail(f"{where} run {x['run']}: {x['failed_allocs']} failed")
            if any(v < 0 for v in c.values()): fail(f"{where} run {x['run']}: negative count")
            if c["total"] != sum(v for k, v in c.items() if k != "total"):
                fail(f"{where} run {x['run']}: total {c['total']} is not the sum of the kinds")
            check_model(f"{where} run {x['run']}", c, x["driver_time_model"])
            if name == "cuda":
                if "measured_ns" not in x["driver_time_model"]: fail(f"{where}: no measured time")
                elif c["total"] - c["mem_queries"] > 0 and x["driver_time_model"]["measured_ns"] == 0:
                    fail(f"{where} run {x['run']}: {c['total']} calls, no measured time")
        for k, v in r["driver_calls"].items():
            if runs[0]["driver_calls"][k] < v: fail(f"{where}: run 1 {k} {runs[0]['driver_calls'][k]} < replay's {v}")
        second = runs[1]["driver_calls"]["total"]
        print(f"{where:70} run 1 {runs[0]['driver_calls']['total']:>7} calls, run 2 {second:>7} calls, "
              f"{runs[1]['driver_time_model']['total_ns'] / 1e6:9.3f} ms")
        if zero and r["layout"] == "default" and second: fail(f"{where}: the second run made {second} driver calls")
sys.exit(1 if bad else 0)
PY
# The PyTorch model keeps no state between replays: --runs leaves its layouts
# alone (no runs array), and cubemem's layout beside it still gets one.
"$CLI" replay --runs 2 --no-progress --json --pools default --pools pytorch-expandable \
  "$SRC/examples/torch-cpu-gpt-train.csv" >"$WORK/torch.json"
python3 - "$WORK/torch.json" <<'PY'
import json, sys
rows = {r["layout"]: r for r in map(json.loads, open(sys.argv[1]))}
ok = len(rows["default"].get("runs", [])) == 2 and "runs" not in rows["pytorch-expandable"]
sys.exit(0 if ok else "FAIL: --runs must replay cubemem's layouts twice and leave the PyTorch model alone")
PY
echo "replay --runs: ok"
