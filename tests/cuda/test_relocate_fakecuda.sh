#!/usr/bin/env bash
# test_relocate_fakecuda.sh BUILD_DIR SOURCE_DIR SHARED_DIR - relocation on
# the strict fake CUDA driver (libfakecuda.so): for each trace, the smallest
# device with relocation on the simulated device (cubemem fit --relocate),
# then `cubemem replay --device cuda --relocate` on a fake GPU of exactly
# that memory, and check:
#   - no failed reservation, the same moves and bytes copied as on sim,
#   - the copies reached the driver (cuMemcpyDtoDAsync, one per move of a
#     non-empty allocation; one cuEventRecord + cuEventSynchronize per
#     relocation),
#   - the driver saw no violation and holds nothing after the run.
# Traces: examples/torch-cpu-gpt-train.csv, plus the shared lstm trace when
# present.
set -euo pipefail
BUILD=${1:?usage: test_relocate_fakecuda.sh BUILD_DIR SOURCE_DIR SHARED_DIR}
SRC=${2:?}
SHARED=${3:-$SRC/../shared}
CLI="$BUILD/cubemem"
FAKE="$BUILD/libfakecuda.so"
[[ -x $CLI && -f $FAKE ]] || { echo "SKIP: $CLI or $FAKE not built"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: python3 is needed to read the JSON"; exit 77; }
TRACES=("$SRC/examples/torch-cpu-gpt-train.csv")
LSTM="$SHARED/traces/cpu/torch-cpu-lstm-varlen-train.csv"
[[ -f $LSTM ]] && TRACES+=("$LSTM")
WORK=$(mktemp -d "${TMPDIR:-/tmp}/cm-relocate.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
field() { python3 -c 'import json,sys; d=json.loads(open(sys.argv[1]).readline()); print(eval(sys.argv[2]))' "$@"; }
bad=0
for t in "${TRACES[@]}"; do
  "$CLI" fit --no-config --no-progress --pools default --relocate --json "$t" >"$WORK/fit.json"
  cap=$(field "$WORK/fit.json" 'd["fit_bytes"]')
  "$CLI" replay --no-config --no-progress --relocate --device-memory "$cap" --json "$t" >"$WORK/sim.json"
  FAKECUDA_CAPACITY=$cap FAKECUDA_REPORT="$WORK/cuda.report" CM_CUDA_LIBRARY="$FAKE" \
    "$CLI" replay --device cuda --no-config --no-progress --relocate --json "$t" \
    >"$WORK/cuda.json" 2>"$WORK/cuda.err" || { echo "FAIL: replay --device cuda"; cat "$WORK/cuda.err"; exit 1; }
  python3 - "$WORK" "$t" "$cap" <<'PY' || bad=1
import json, os, sys
work, trace, cap = sys.argv[1], os.path.basename(sys.argv[2]), sys.argv[3]
sim = json.loads(open(os.path.join(work, "sim.json")).readline())
cuda = json.loads(open(os.path.join(work, "cuda.json")).readline())
kv = dict(l.strip().split("=", 1) for l in open(os.path.join(work, "cuda.report"))
          if "=" in l and not l.startswith("violation:"))
viol = [l.strip() for l in open(os.path.join(work, "cuda.report")) if l.startswith("violation:")]
r = cuda["relocation"]
print(f"{trace}: device {cap} bytes, {r['moves']} moves, {r['bytes_copied']} bytes copied, "
      f"{kv['memcpy_dtod']} copies, {kv['event_sync']} waits, violations {kv['violations']}, held {kv['held']}")
ok = True
def need(cond, what):
    global ok
    if not cond:
        print(f"FAIL {trace}: {what}"); ok = False
need(cuda["failed_allocs"] == 0, f"{cuda['failed_allocs']} failed reservations")
need(r["moves"] == sim["relocation"]["moves"], f"moves {r['moves']} vs sim {sim['relocation']['moves']}")
need(r["bytes_copied"] == sim["relocation"]["bytes_copied"], "bytes copied differ from sim")
need(r["abandoned"] == 0, "a relocation was abandoned")
need(int(kv["memcpy_dtod"]) <= r["moves"] and (r["bytes_copied"] == 0) == (int(kv["memcpy_dtod"]) == 0),
     f"{kv['memcpy_dtod']} cuMemcpyDtoDAsync for {r['moves']} moves")
need(int(kv["event_sync"]) >= (1 if r["moves"] else 0), "no wait for the copies")
need(kv["violations"] == "0", f"driver violations: {viol}")
need(kv["held"] == "0", f"the driver still holds {kv['held']} objects")
sys.exit(0 if ok else 1)
PY
done
if [[ -f $LSTM ]]; then
  moves=$(field "$WORK/cuda.json" 'd["relocation"]["moves"]')
  [[ $moves -gt 0 ]] || { echo "FAIL: the lstm trace relocated nothing at its relocated fit"; bad=1; }
fi
exit $bad
