#!/usr/bin/env bash
# test_torch_cli.sh - PyTorch's caching allocator as a layout of `replay` and
# `fit` (--pools pytorch, --pools pytorch-expandable, --torch-conf), on the
# bundled trace: the figures torchsim gives for it (peak reserved 1,235,222,528
# bytes in 67 cudaMallocs; expandable 1,216,348,160 bytes in 67 pages), the
# driver calls by kind in text and JSON, the fit checked from outside (replay
# on that device succeeds, 2 MiB less fails with exit 3 and PyTorch's
# out-of-memory message), options in effect (max_split_size_mb changes the
# figures), usage errors (exit 2), --svg and --html with a PyTorch layout, and
# the same replay through the CUDA storage on the strict fake driver.
# usage: bash test_torch_cli.sh BUILD_DIR SOURCE_DIR [SHARED_DIR]
set -u
BUILD=${1:?build dir} SRC=${2:?source dir}
CM="$BUILD/cubemem"
[ -x "$CM" ] || { echo "SKIP: $CM not built"; exit 77; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail=0 pass=0
ok() { echo "ok $1"; pass=$((pass + 1)); }
bad() { echo "not ok $1"; fail=$((fail + 1)); }
expect() { if [ "$2" == "$3" ]; then ok "$1"; else bad "$1: got '$2', expected '$3'"; fi; }
field() { sed -n "s/.*\"$1\":\([0-9.][0-9.]*\).*/\1/p" <<<"$2"; }
EX="$SRC/examples/torch-cpu-gpt-train.csv"
R=("$CM" replay --no-config --no-progress)

out=$("${R[@]}" --json --pools pytorch --pools pytorch-expandable "$EX")
expect "replay exits 0" "$?" 0
plain=$(sed -n 1p <<<"$out") exp=$(sed -n 2p <<<"$out")
expect "pytorch: peak reserved" "$(field peak_reserved_bytes "$plain")" 1235222528
expect "pytorch: cudaMalloc calls" "$(field allocs "$(grep -o '"driver_calls":{[^}]*}' <<<"$plain")")" 67
expect "pytorch: no VM calls" "$(field creates "$(grep -o '"driver_calls":{[^}]*}' <<<"$plain")")" 0
expect "expandable: peak reserved" "$(field peak_reserved_bytes "$exp")" 1216348160
calls=$(grep -o '"driver_calls":{[^}]*}' <<<"$exp")
expect "expandable: pages created" "$(field creates "$calls")" 67
expect "expandable: pages mapped" "$(field maps "$calls")" 67
expect "expandable: two ranges reserved" "$(field reserves "$calls")" 2
expect "expandable: no cudaMalloc" "$(field allocs "$calls")" 0

text=$("${R[@]}" --pools default --pools pytorch "$EX")
grep -q '^  layout  *default  *pytorch$' <<<"$text" && ok "text: one column per layout" || bad "text columns"
grep -q '^  peak reserved .*1.24 GB$' <<<"$text" && ok "text: peak reserved" || bad "text: peak reserved"
grep -q "PyTorch's CUDA caching allocator" <<<"$text" && ok "text: names the allocator" || bad "text: names the allocator"

# options in effect: max_split_size_mb changes where blocks go
a=$(field peak_reserved_bytes "$("${R[@]}" --json --pools pytorch --torch-conf max_split_size_mb:21 "$EX")")
b=$(field peak_reserved_bytes "$("${R[@]}" --json --pools 'pytorch:max_split_size_mb:21' "$EX")")
expect "--torch-conf and pytorch:CONF agree" "$a" "$b"
[ -n "$a" ] && [ "$a" != 1235222528 ] && ok "max_split_size_mb changes the figure" || bad "max_split_size_mb: $a"
conf=$("${R[@]}" --json --pools pytorch --torch-conf expandable_segments:True "$EX")
expect "--torch-conf expandable_segments:True" "$(field peak_reserved_bytes "$conf")" 1216348160

# fit: the three answers side by side, checked from outside
fo=$("$CM" fit --no-config --no-progress --pools default --pools pytorch --pools pytorch-expandable "$EX")
grep -q "the allocator each layout assumes" <<<"$fo" && ok "fit: legend" || bad "fit: legend"
grep -q "^  pytorch-expandable  *PyTorch's CUDA caching allocator (model), PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" <<<"$fo" \
  && ok "fit: expandable legend" || bad "fit: expandable legend"
expect "fit: three rows, three 'fits on' rows" "$(grep -c '^  torch-cpu-gpt-train.csv' <<<"$fo")" 6
expect "fit without --pools: the same answer" \
  "$("$CM" fit --no-config --no-progress "$EX" | grep '^  torch-cpu-gpt-train.csv')" \
  "$(grep '^  torch-cpu-gpt-train.csv' <<<"$fo")"
fj=$("$CM" fit --no-config --no-progress --json --pools pytorch "$EX")
grep -q '"allocator":"pytorch"' <<<"$fj" && ok "fit --json: allocator" || bad "fit --json: allocator"
fb=$(field fit_bytes "$fj")
expect "fit: the figure mincap.py gives" "$fb" 1233125376
"${R[@]}" --pools pytorch --device-memory "$fb" "$EX" >/dev/null 2>&1
expect "replay on the fitted device exits 0" "$?" 0
"${R[@]}" --pools pytorch --device-memory $((fb - 2097152)) "$EX" >"$TMP/o" 2>"$TMP/e"
expect "2 MiB less exits 3" "$?" 3
grep -q 'first failure \[pytorch\]: CM_EOOM .*out of memory: tried to allocate' "$TMP/o" \
  && ok "the out-of-memory message" || bad "the out-of-memory message: $(grep failure "$TMP/o")"
rf=$(field fit_bytes "$("${R[@]}" --json --fit --pools pytorch "$EX")")
expect "replay --fit agrees with fit" "$rf" "$fb"

# usage errors
"${R[@]}" --pools pytorch --torch-conf max_split_size_mb:10 "$EX" >/dev/null 2>"$TMP/e"
expect "--torch-conf bad value exits 2" "$?" 2
grep -q "max_split_size_mb: '10' must be a whole number of MiB above 20" "$TMP/e" && ok "message names the key" || bad "message: $(cat "$TMP/e")"
"${R[@]}" --pools 'pytorch:expandable_segment:True' "$EX" >/dev/null 2>"$TMP/e"
expect "unknown key exits 2" "$?" 2
grep -q "unknown PYTORCH_CUDA_ALLOC_CONF key 'expandable_segment'" "$TMP/e" && ok "unknown key named" || bad "unknown key: $(cat "$TMP/e")"
"${R[@]}" --torch-conf max_split_size_mb:128 "$EX" >/dev/null 2>"$TMP/e"
expect "--torch-conf without a PyTorch layout exits 0" "$?" 0
grep -q "applies to the PyTorch layouts only" "$TMP/e" && ok "unused --torch-conf warned" || bad "unused --torch-conf: $(cat "$TMP/e")"
"${R[@]}" --torch-conf max_split_size_mb:1 "$EX" >/dev/null 2>&1
expect "a bad --torch-conf is refused even unused" "$?" 2
"${R[@]}" --pools pytorh "$EX" >/dev/null 2>"$TMP/e"
expect "misspelt pytorch exits 2" "$?" 2
grep -q "did you mean 'pytorch'" "$TMP/e" && ok "suggests pytorch" || bad "suggestion: $(cat "$TMP/e")"
"$CM" fit --no-config --pools pytorch-expandible "$EX" >/dev/null 2>"$TMP/e"
grep -q "did you mean 'pytorch-expandable'" "$TMP/e" && ok "fit suggests pytorch-expandable" || bad "fit suggestion: $(cat "$TMP/e")"
"${R[@]}" --pools exclusive-page "$EX" >/dev/null 2>"$TMP/e"
grep -q "did you mean 'exclusive-pages'" "$TMP/e" && ok "cubemem presets still suggested" || bad "preset suggestion: $(cat "$TMP/e")"
"$CM" fit --no-config --torch-conf 'roundup_power2_divisions:3' --pools pytorch "$EX" >/dev/null 2>&1
expect "fit: bad --torch-conf exits 2" "$?" 2

# pictures
"${R[@]}" --pools default --pools pytorch --svg "$TMP/r.svg" --html "$TMP/r.html" "$EX" >/dev/null 2>"$TMP/e"
expect "--svg and --html with a PyTorch layout exit 0" "$?" 0
grep -q pytorch "$TMP/r.svg" && grep -q pytorch "$TMP/r.html" && ok "both name the layout" || bad "pictures"

# the same replay through the CUDA storage on the strict fake driver: the same
# figures, no call refused, everything given back at exit
FAKE="$BUILD/libfakecuda.so"
if [ -f "$FAKE" ]; then
  out=$(FAKECUDA_CAPACITY=80G FAKECUDA_REPORT="$TMP/fake.report" CM_CUDA_LIBRARY="$FAKE" \
        "${R[@]}" --device cuda --json --pools pytorch --pools pytorch-expandable "$EX" 2>"$TMP/e")
  expect "--device cuda (fake driver) exits 0" "$?" 0
  expect "fake driver: pytorch peak" "$(field peak_reserved_bytes "$(sed -n 1p <<<"$out")")" 1235222528
  expect "fake driver: expandable peak" "$(field peak_reserved_bytes "$(sed -n 2p <<<"$out")")" 1216348160
  grep -qx 'violations=0' "$TMP/fake.report" && grep -qx 'held=0' "$TMP/fake.report" \
    && ok "fake driver: no violation, nothing held at exit" || bad "fake driver report: $(head -3 "$TMP/fake.report")"
else
  echo "note: $FAKE is not built; the fake-driver replay is skipped"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
