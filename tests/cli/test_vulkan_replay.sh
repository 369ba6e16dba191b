#!/usr/bin/env bash
# test_vulkan_replay.sh BUILD_DIR SOURCE_DIR SHARED_DIR
#
# `cubemem replay --device vulkan[:N]` end to end on a real Vulkan driver (in
# CI: Mesa's lavapipe), with VK_LAYER_KHRONOS_validation enabled through
# CM_VULKAN_VALIDATION=1: real traces replay with exit 0 and not one
# validation message; the text report names the device and the time spent in
# Vulkan calls; --json, --svg and the memory logger (--config) work as on the
# other devices; device selection (vulkan:0, a missing index, a malformed
# one) and a missing loader fail with clear messages.
# Without a driver the test SKIPs (exit 77) - unless CM_VULKAN_REQUIRED=1,
# as in .ci/run's vulkan stage, where that is a failure.
set -u
BUILD=${1:?build dir} SRC=${2:?source dir} SHARED=${3:-}
CM="$BUILD/cubemem"
[ -x "$CM" ] || { echo "SKIP: $CM not built"; exit 77; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail=0
ok() { echo "ok $*"; }
bad() { echo "not ok $*"; fail=1; }
EX="$SRC/examples/torch-cpu-gpt-train.csv"

# ---- is there a driver? ---------------------------------------------------------
if ! "$CM" replay --device vulkan --json "$EX" >"$TMP/probe.out" 2>"$TMP/probe.err"; then
  if [ "${CM_VULKAN_REQUIRED:-0}" = 1 ]; then
    echo "not ok CM_VULKAN_REQUIRED=1 but --device vulkan failed: $(cat "$TMP/probe.err")"
    exit 1
  fi
  echo "SKIP: no Vulkan driver: $(head -c 400 "$TMP/probe.err")"
  exit 77
fi
ok "--device vulkan runs"

# ---- real traces under the validation layer ---------------------------------------
traces=("$EX")
if [ -n "$SHARED" ] && [ -d "$SHARED/traces" ]; then
  for t in cpu/torch-cpu-mlp-train cpu/torch-cpu-gpt-serve-varlen cpu/torch-cpu-lstm-varlen-train \
           cpu/torch-cpu-mobilenet-train cpu/torch-cpu-train-then-eval \
           gpu/cs336-medium-ctx128-inference plans/mindspore-resnet50-plan; do
    [ -f "$SHARED/traces/$t.csv" ] && traces+=("$SHARED/traces/$t.csv")
  done
fi
CM_VULKAN_VALIDATION=1 "$CM" replay --device vulkan --json "${traces[@]}" >"$TMP/v.json" 2>"$TMP/v.err"
rc=$?
[ $rc -eq 0 ] && ok "validated replay of ${#traces[@]} traces exits 0" || bad "validated replay exits $rc: $(head -c 600 "$TMP/v.err")"
if grep -q "cubemem: vulkan" "$TMP/v.err" || grep -q "validation message" "$TMP/v.err"; then
  bad "validation messages: $(grep -c 'cubemem: vulkan' "$TMP/v.err") (first: $(grep -m1 'cubemem: vulkan' "$TMP/v.err"))"
else
  ok "no validation message"
fi
n=$(grep -c '"device":"vulkan"' "$TMP/v.json")
[ "$n" -eq "${#traces[@]}" ] && ok "one JSON line per trace on device vulkan" || bad "$n JSON lines for ${#traces[@]} traces"
grep -q '"failed_allocs":0' "$TMP/v.json" && ok "JSON has failed_allocs" || bad "JSON lacks failed_allocs"
# figures
sed -E 's/.*"trace":"([^"]*)".*"peak_live_bytes":([0-9]+),"peak_reserved_bytes":([0-9]+).*"device_allocs":([0-9]+).*"failed_allocs":([0-9]+).*/  \1: peak live \2, peak reserved \3, device allocs \4, failed \5/' "$TMP/v.json"

# the validation check itself is wired to the exit status: a message makes it 1
# (proved in test_vulkan: test_validation_is_live provokes one on purpose)

# ---- text report, device selection -------------------------------------------------
"$CM" replay --device vulkan:0 "$EX" >"$TMP/t.out" 2>"$TMP/t.err"
rc=$?
[ $rc -eq 0 ] && ok "--device vulkan:0 exits 0" || bad "--device vulkan:0 exits $rc: $(cat "$TMP/t.err")"
grep -Eq "^device  vulkan:0 \(.+\), [0-9]" "$TMP/t.out" && ok "text names the device: $(grep -m1 '^device' "$TMP/t.out" | cut -d, -f1)" \
  || bad "text lacks 'device  vulkan:0 (NAME)': $(grep -m1 '^device' "$TMP/t.out")"
grep -q '"device_name":"[^"]' "$TMP/probe.out" && ok "JSON names the device" || bad "JSON lacks device_name"
for want in "time in driver calls" "peak reserved" "arena"; do
  grep -qF -- "$want" "$TMP/t.out" && ok "text has '$want'" || bad "text lacks '$want'"
done
"$CM" replay --device vulkan:99 "$EX" >/dev/null 2>"$TMP/e1"
rc=$?
[ $rc -eq 1 ] && grep -q "Vulkan device 99 not found" "$TMP/e1" && ok "missing device index refused" \
  || bad "vulkan:99: exit $rc, $(cat "$TMP/e1")"
"$CM" replay --device vulkan:x "$EX" >/dev/null 2>"$TMP/e2"
rc=$?
[ $rc -eq 2 ] && grep -q "bad Vulkan device 'x'" "$TMP/e2" && ok "malformed device index refused" \
  || bad "vulkan:x: exit $rc, $(cat "$TMP/e2")"
CM_VULKAN_LIBRARY=/nonexistent/libvulkan.so.1 "$CM" replay --device vulkan "$EX" >/dev/null 2>"$TMP/e3"
rc=$?
[ $rc -eq 1 ] && grep -q "Vulkan loader not available: /nonexistent/libvulkan.so.1" "$TMP/e3" \
  && ok "missing loader: clear message" || bad "no loader: exit $rc, $(cat "$TMP/e3")"
"$CM" replay --device opencl "$EX" >/dev/null 2>"$TMP/e4"
grep -q "vulkan or vulkan:N" "$TMP/e4" && ok "unknown device lists vulkan" || bad "unknown device: $(cat "$TMP/e4")"

# ---- logger and SVG, as on the other devices ----------------------------------------
cat >"$TMP/cubecl.toml" <<TOML
[memory]
logger = { level = "basic", file = "$TMP/memory.log", append = false }
TOML
CM_VULKAN_VALIDATION=1 "$CM" replay --device vulkan --config "$TMP/cubecl.toml" --svg "$TMP/r.svg" "$EX" \
  >"$TMP/l.out" 2>"$TMP/l.err"
rc=$?
[ $rc -eq 0 ] && ok "--config logger + --svg exit 0" || bad "logger run exits $rc: $(cat "$TMP/l.err")"
[ -s "$TMP/memory.log" ] && ok "memory log written ($(wc -l <"$TMP/memory.log") lines)" || bad "memory log empty"
grep -q "<svg" "$TMP/r.svg" 2>/dev/null && ok "SVG written" || bad "no SVG"
grep -q "cubemem: vulkan" "$TMP/l.err" && bad "validation messages in the logger run" || ok "logger run: no validation message"
exit $fail
