#!/usr/bin/env bash
# test_fit_agrees.sh BUILD_DIR SOURCE_DIR SHARED_DIR - `cubemem fit` predicts
# `cubemem replay`: for every trace and layout,
#   - `replay --device-memory FIT_BYTES` (FIT_BYTES from `fit --json`) has no
#     failed reservation (exit 0);
#   - fit's unconstrained peak is the peak reserved `replay` reports on the
#     --device-memory device (80 GiB by default, and a 16 GiB one), and so
#     is its modelled driver time.
# Smaller capacities are not asserted to fail: fitting need not be monotone.
# Traces: examples/torch-cpu-gpt-train.csv always, plus shared traces and a
# snapshot when ../shared is present (skipped with a message when absent).
set -euo pipefail
BUILD=${1:?usage: test_fit_agrees.sh BUILD_DIR SOURCE_DIR SHARED_DIR}
SRC=${2:?}
SHARED=${3:-$SRC/../shared}
CLI="$BUILD/cubemem"
[[ -x $CLI ]] || { echo "SKIP: $CLI not built"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: python3 is needed to read the JSON"; exit 77; }

TRACES=("$SRC/examples/torch-cpu-gpt-train.csv")
if [[ -d $SHARED/traces ]]; then
  TRACES+=("$SHARED/traces/cpu/torch-cpu-lstm-varlen-train.csv"
           "$SHARED/traces/gpu/cs336-medium-ctx256-training.csv"
           "$SHARED/traces/snapshots/cs336-small-compiled-training.pickle")
else
  echo "note: $SHARED/traces is absent; checking only the bundled trace"
fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/cm-fitagree.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

check() { # trace layout device-memory
  local t=$1 lay=$2 mem=$3
  "$CLI" fit --json --no-progress --no-config --pools "$lay" --device-memory "$mem" "$t" \
    >"$WORK/fit.json" 2>"$WORK/fit.err"
  local fit
  fit=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["fit_bytes"])' "$WORK/fit.json")
  local rc=0
  "$CLI" replay --json --no-progress --no-config --pools "$lay" --device-memory "$fit" "$t" \
    >"$WORK/at-fit.json" 2>"$WORK/at-fit.err" || rc=$?
  "$CLI" replay --json --no-progress --no-config --pools "$lay" --device-memory "$mem" "$t" \
    >"$WORK/ref.json" 2>/dev/null || true
  python3 - "$WORK" "$rc" "$(basename "$t") [$lay] on $mem" <<'PY'
import json, os, sys
work, rc, where = sys.argv[1], int(sys.argv[2]), sys.argv[3]
fit = json.load(open(os.path.join(work, "fit.json")))
at = json.load(open(os.path.join(work, "at-fit.json")))
ref = json.load(open(os.path.join(work, "ref.json")))
bad = []
if rc != 0 or at["failed_allocs"]:
    bad.append(f"replay --device-memory {fit['fit_bytes']} (the fit) failed {at['failed_allocs']} reservations (exit {rc})")
if fit["unconstrained_peak_reserved"] != ref["peak_reserved_bytes"]:
    bad.append(f"fit's unconstrained peak {fit['unconstrained_peak_reserved']} != replay's {ref['peak_reserved_bytes']}")
if fit["unconstrained_device_memory"] != ref["device_memory"]:
    bad.append(f"fit's reference device {fit['unconstrained_device_memory']} != replay's {ref['device_memory']}")
if fit["driver_time_model"] != ref["driver_time_model"]:
    bad.append(f"fit's driver time {fit['driver_time_model']['total_ns']} != replay's {ref['driver_time_model']['total_ns']}")
print(f"{where:70} fit {fit['fit_bytes']:>14,}  unconstrained {fit['unconstrained_peak_reserved']:>14,}"
      f"  {'ok' if not bad else 'FAIL'}")
for b in bad: print("FAIL", where + ":", b)
sys.exit(1 if bad else 0)
PY
}
status=0
for t in "${TRACES[@]}"; do
  for lay in default exclusive-pages; do check "$t" "$lay" 80GiB || status=1; done
done
check "${TRACES[-1]}" default 16GiB || status=1
[[ $status -eq 0 ]] && echo "fit agrees with replay: ok"
exit $status
