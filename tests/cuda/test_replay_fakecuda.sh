#!/usr/bin/env bash
# test_replay_fakecuda.sh BUILD_DIR SOURCE_DIR SHARED_DIR - replay real traces
# through `cubemem replay --device cuda | cuda:sync | cuda:async` on the
# strict fake driver (libfakecuda.so), every layout (default, subslices,
# exclusive-pages, arena:object=8MiB), and check, for every (trace, layout, device):
#   - no failed reservation,
#   - peak reserved within 1% of `--device sim` (same capacity, same granule),
#   - the driver saw no violation and holds nothing after the run
#     (FAKECUDA_REPORT written at exit).
# Then once more on a device without virtual memory management and without
# memory pools (FAKECUDA_VMM=0 FAKECUDA_MEMPOOL=0): no violation, no failure.
# Time by kind of driver call: each within its operation's time, and, with the
# fake's cuMemCreate made slow, that time reported under creates (JSON, text).
# Then a stitched slice (tests/data/stitch.csv) on cuda:sync and cuda:async.
# Traces: examples/torch-cpu-gpt-train.csv always, plus ../shared/traces/
# {cpu,gpu,plans}/*.csv when present (skipped with a message when absent).
set -euo pipefail
BUILD=${1:?usage: test_replay_fakecuda.sh BUILD_DIR SOURCE_DIR SHARED_DIR}
SRC=${2:?}
SHARED=${3:-$SRC/../shared}
CLI="$BUILD/cubemem"
FAKE="$BUILD/libfakecuda.so"
[[ -x $CLI && -f $FAKE ]] || { echo "SKIP: $CLI or $FAKE not built"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: python3 is needed to compare the JSON"; exit 77; }

TRACES=("$SRC/examples/torch-cpu-gpt-train.csv")
if [[ -d $SHARED/traces ]]; then
  for f in "$SHARED"/traces/{cpu,gpu,plans}/*.csv; do [[ -f $f ]] && TRACES+=("$f"); done
else
  echo "note: $SHARED/traces is absent; replaying only the bundled trace"
fi
LAYOUTS=(--pools default --pools subslices --pools exclusive-pages --pools arena:object=8MiB)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/cm-fakecuda.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
CAP=80G

echo "--- ${#TRACES[@]} trace(s) x $(( ${#LAYOUTS[@]} / 2 )) layouts; sim reference"
"$CLI" replay --device sim --device-memory 80GiB --no-progress --json "${LAYOUTS[@]}" "${TRACES[@]}" \
  >"$WORK/sim.json"

run_cuda() { # name device [env...]
  local name=$1 dev=$2
  shift 2
  local rc=0
  env "$@" FAKECUDA_CAPACITY=$CAP FAKECUDA_REPORT="$WORK/$name.report" CM_CUDA_LIBRARY="$FAKE" \
    "$CLI" replay --device "$dev" --no-progress --json "${LAYOUTS[@]}" "${TRACES[@]}" \
    >"$WORK/$name.json" 2>"$WORK/$name.err" || rc=$?
  if [[ $rc -ne 0 ]]; then
    echo "FAIL: replay --device $dev exited $rc"; cat "$WORK/$name.err"; exit 1
  fi
}
for dev in cuda cuda:sync cuda:async; do
  echo "--- --device $dev on the strict driver"
  run_cuda "${dev/:/-}" "$dev"
done
echo "--- --device cuda:async on a device without VMM and memory pools"
run_cuda novm cuda:async FAKECUDA_VMM=0 FAKECUDA_MEMPOOL=0

python3 - "$WORK" <<'PY'
import json, os, sys
work = sys.argv[1]
def load(name):
    return {(r["trace"], r["layout"]): r for r in map(json.loads, open(os.path.join(work, name + ".json")))}
def report(name):
    kv = {}
    for line in open(os.path.join(work, name + ".report")):
        if "=" in line and not line.startswith("violation:"):
            k, v = line.strip().split("=", 1)
            kv[k] = v
    return kv, [l.strip() for l in open(os.path.join(work, name + ".report")) if l.startswith("violation:")]
sim = load("sim")
bad = 0
print(f"{'trace':44} {'layout':16} {'device':11} {'sim peak':>15} {'cuda peak':>15} {'diff':>8}")
for name in ("cuda", "cuda-sync", "cuda-async", "novm"):
    runs = load(name)
    kv, viol = report(name)
    if set(runs) != set(sim):
        print(f"FAIL {name}: replayed {len(runs)} (trace, layout) pairs, sim {len(sim)}"); bad += 1
    for key, r in sorted(runs.items()):
        s = sim[key]
        if r["failed_allocs"]:
            print(f"FAIL {name} {key}: {r['failed_allocs']} failed reservations"); bad += 1
        diff = (r["peak_reserved_bytes"] - s["peak_reserved_bytes"]) / max(s["peak_reserved_bytes"], 1)
        if name != "novm":
            print(f"{os.path.basename(key[0])[:44]:44} {key[1]:16} {r['device']:11} "
                  f"{s['peak_reserved_bytes']:>15,} {r['peak_reserved_bytes']:>15,} {diff:>+8.4%}")
            if abs(diff) > 0.01:
                print(f"FAIL {name} {key}: peak reserved differs from sim by {diff:+.3%}"); bad += 1
    calls = ", ".join(f"{k} {kv.get(k, '?')}" for k in
                      ("mem_alloc", "mem_free", "mem_alloc_async", "mem_free_async", "address_reserve",
                       "address_free", "create", "release", "map", "unmap", "set_access", "retains"))
    print(f"{name}: violations {kv.get('violations')}, held after exit {kv.get('held')}; driver calls: {calls}")
    if kv.get("violations") != "0":
        print(f"FAIL {name}: the strict driver counted violations:"); print("\n".join(viol)); bad += 1
    if kv.get("held") != "0":
        print(f"FAIL {name}: the driver still holds objects at exit"); bad += 1
    if kv.get("retains") != "1":
        print(f"FAIL {name}: the primary context was retained {kv.get('retains')} times (want 1 per run)"); bad += 1
    if name == "novm" and (kv.get("create") != "0" or kv.get("mem_alloc_async") != "0"):
        print("FAIL novm: VM or stream-ordered calls on a device without them"); bad += 1
    for key, r in sorted(runs.items()): # time by kind of call: within the time of its operation
        t, op = r["driver_call_time_ns"], r["driver_time_ns"]
        if t["creates"] + t["maps"] + t["set_access"] > op["map"] or \
           t["unmaps"] + t["releases"] + t["syncs"] > op["unmap"]:
            print(f"FAIL {name} {key}: call times {t} exceed the operations' {op}"); bad += 1
        if r["driver_calls"]["creates"] > 100 and t["creates"] == 0:
            print(f"FAIL {name} {key}: {r['driver_calls']['creates']} creates, no time measured"); bad += 1
sys.exit(1 if bad else 0)
PY

# Time by kind of driver call, end to end: the fake's cuMemCreate takes 200 us,
# so the report must put at least that much per create under creates, and not
# under the other kinds.
echo "--- time by kind of call (cuMemCreate made slow)"
FAKECUDA_CREATE_DELAY_NS=200000 FAKECUDA_CAPACITY=$CAP CM_CUDA_LIBRARY="$FAKE" \
  "$CLI" replay --device cuda --no-progress --json "${TRACES[0]}" >"$WORK/slow.json"
python3 - "$WORK/slow.json" <<'PY'
import json, sys
r = json.loads(open(sys.argv[1]).readline())
n, t = r["driver_calls"]["creates"], r["driver_call_time_ns"]
print(f"creates {n}: {t['creates'] / 1e6:.1f} ms; maps {t['maps'] / 1e6:.3f} ms; "
      f"set access {t['set_access'] / 1e6:.3f} ms")
ok = n > 0 and t["creates"] >= n * 200000 and t["maps"] < t["creates"] / 10 and \
     t["set_access"] < t["creates"] / 10
sys.exit(0 if ok else "FAIL: the time of the slow cuMemCreate calls is not where it belongs")
PY
FAKECUDA_CREATE_DELAY_NS=200000 FAKECUDA_CAPACITY=$CAP CM_CUDA_LIBRARY="$FAKE" \
  "$CLI" replay --device cuda --no-progress "${TRACES[0]}" >"$WORK/slow.txt"
# the measured rows follow "time in driver calls" (the model's follow "model time")
sed -n '/time in driver calls/,/model time/p' "$WORK/slow.txt" | grep -E '^ +create +[0-9]+\.[0-9]+ ms$' ||
  { echo "FAIL: the text report has no time row for cuMemCreate"; cat "$WORK/slow.txt"; exit 1; }
grep -E '^ +model time \(a100\) +[0-9]+\.[0-9]+ m?s$' "$WORK/slow.txt" ||
  { echo "FAIL: the text report has no modelled driver time"; cat "$WORK/slow.txt"; exit 1; }
# Near the capacity: maps of several objects run out of memory part way and
# trims give memory back all the time. The driver must see no violation and
# hold nothing at exit, and the failures must be those of the simulated device
# at the same capacity (a storage whose records drift from the driver's
# fails far more).
NEAR=${SHARED}/traces/cpu/torch-cpu-lstm-varlen-train.csv
if [[ -f $NEAR ]]; then
  echo "--- near the capacity (216 MiB) on the strict driver"
  for dev in sim cuda; do
    env FAKECUDA_CAPACITY=216M FAKECUDA_REPORT="$WORK/near.report" CM_CUDA_LIBRARY="$FAKE" \
      "$CLI" replay --device $dev --device-memory 216MiB --no-progress --json \
      --pools default --pools arena:object=8MiB "$NEAR" >"$WORK/near-$dev.json" 2>/dev/null || true
  done
  grep -qx 'violations=0' "$WORK/near.report" && grep -qx 'held=0' "$WORK/near.report" ||
    { echo "FAIL: near the capacity the strict driver saw violations or holds memory"; cat "$WORK/near.report"; exit 1; }
  python3 - "$WORK/near-sim.json" "$WORK/near-cuda.json" <<'PY'
import json, sys
sim = [json.loads(l) for l in open(sys.argv[1])]
cuda = [json.loads(l) for l in open(sys.argv[2])]
bad = 0
for s, c in zip(sim, cuda):
    fs, fc = s["failed_allocs"], c["failed_allocs"]
    print(f"{c['layout']}: failed reservations sim {fs}, cuda {fc}; storage errors {c['storage_errors']}")
    if fc > fs + max(10, fs // 10) or c["storage_errors"]:
        print("FAIL: the CUDA storage fails far more than the simulated device"); bad += 1
sys.exit(1 if bad or len(sim) != 2 or len(cuda) != 2 else 0)
PY
fi
# A stitched slice on the strict driver (tests/data/stitch.csv): ten 1.5 MiB
# blocks, every other one freed, then 4 MiB on a 16 MiB device with
# single-granule objects. No placement fits; the arena maps the objects of
# two partly used granules a second time (cuMemRetainAllocationHandle,
# cuMemMap, cuMemSetAccess) around one new granule. The driver must see no
# violation and hold nothing at exit, and the run must match sim's.
echo "--- a stitched slice (16 MiB device) on the strict driver"
STITCH="$SRC/tests/data/stitch.csv"
"$CLI" replay --device sim --device-memory 16MiB --no-progress --json --pools arena:object=2MiB \
  "$STITCH" >"$WORK/stitch-sim.json"
for dev in cuda:sync cuda:async; do
  env FAKECUDA_CAPACITY=16M FAKECUDA_REPORT="$WORK/stitch-${dev/:/-}.report" CM_CUDA_LIBRARY="$FAKE" \
    "$CLI" replay --device $dev --device-memory 16MiB --no-progress --json --pools arena:object=2MiB \
    "$STITCH" >"$WORK/stitch-${dev/:/-}.json"
  grep -qx 'violations=0' "$WORK/stitch-${dev/:/-}.report" && grep -qx 'held=0' "$WORK/stitch-${dev/:/-}.report" ||
    { echo "FAIL: a stitched slice on $dev: violations or memory held"; cat "$WORK/stitch-${dev/:/-}.report"; exit 1; }
done
python3 - "$WORK" <<'PY'
import json, os, sys
w = sys.argv[1]
runs = {n: json.loads(open(os.path.join(w, f"stitch-{n}.json")).readline()) for n in ("sim", "cuda-sync", "cuda-async")}
bad = 0
for n, r in runs.items():
    st = r["pools"][0].get("stitched")
    print(f"{n}: failed {r['failed_allocs']}, stitched {st}, peak reserved {r['peak_reserved_bytes']:,}")
    if r["failed_allocs"] or st != 1:
        print(f"FAIL {n}: want no failed reservation and one stitched slice"); bad += 1
    if r["peak_reserved_bytes"] != runs["sim"]["peak_reserved_bytes"]:
        print(f"FAIL {n}: peak reserved differs from sim"); bad += 1
sys.exit(1 if bad else 0)
PY
echo "replay on the strict driver: ok"
