#!/usr/bin/env bash
# test_streams_cli.sh - traces with several streams in `replay` and `fit`:
# by default each stream gets its own pools (the figures per stream in text
# and JSON, the device total their sum), --merge-streams keeps one set of
# pools; a block freed on stream 1 is not reused by stream 2 per stream but
# is merged; a free recorded on another stream goes back to the allocating
# stream's pools (PyTorch's rule; torchsim's figures: 25,165,824 bytes per
# stream, 12,582,912 merged, smallest device 14,680,064); fit per stream is
# a replay that fits at that capacity; a single-stream trace reports as
# before (streams_merged false, no per-stream figures).
# usage: bash test_streams_cli.sh BUILD_DIR SOURCE_DIR [SHARED_DIR]
set -u
BUILD=${1:?build dir} SRC=${2:?source dir}
CM="$BUILD/cubemem"
[ -x "$CM" ] || { echo "SKIP: $CM not built"; exit 77; }
fail=0 pass=0
ok() { echo "ok $1"; pass=$((pass + 1)); }
bad() { echo "not ok $1"; fail=$((fail + 1)); }
expect() { if [ "$2" == "$3" ]; then ok "$1"; else bad "$1: got '$2', expected '$3'"; fi; }
# the first occurrence of a numeric member (the run's, before the streams')
field() { grep -o "\"$1\":[0-9.]*" <<<"$2" | head -1 | cut -d: -f2; }
TWO="$SRC/tests/data/two-streams.csv" CROSS="$SRC/tests/data/cross-stream-free.csv"
R=("$CM" replay --no-config --no-progress)

# cubemem's default layout: own pools per stream, merged on request
per=$("${R[@]}" --json "$TWO")
expect "per stream: exit 0" "$?" 0
merged=$("${R[@]}" --json --merge-streams "$TWO")
grep -q '"streams_merged":false' <<<"$per" && ok "per stream: streams_merged false" || bad "streams_merged per stream"
grep -q '"streams_merged":true' <<<"$merged" && ok "merged: streams_merged true" || bad "streams_merged merged"
p=$(field peak_reserved_bytes "$per") m=$(field peak_reserved_bytes "$merged")
expect "per stream: stream 2 gets its own page (twice the merged peak)" "$p" "$((2 * m))"
s1=$(grep -o '{"stream":1,[^}]*}' <<<"$per") s2=$(grep -o '{"stream":2,[^}]*}' <<<"$per")
expect "per stream: stream 1's own peak" "$(field peak_reserved_bytes "$s1")" "$m"
expect "per stream: stream 2's own peak" "$(field peak_reserved_bytes "$s2")" "$m"
expect "per stream: stream 2 at the device peak" "$(field reserved_at_device_peak "$s2")" "$m"
grep -q '"peak_reserved_bytes"' <<<"$(grep -o '{"stream":1,[^}]*}' <<<"$merged")" &&
  bad "merged: no per-stream pools figures" || ok "merged: no per-stream pools figures"

text=$("${R[@]}" "$TWO")
grep -q "2 streams, each replayed with its own pools" <<<"$text" && ok "text: per stream said" || bad "text: per stream"
grep -q "streams of layout 'default'" <<<"$text" && ok "text: per-stream table" || bad "text: per-stream table"
grep -qE '^  0x2 +1 ' <<<"$text" && ok "text: a row per stream" || bad "text: row per stream"
text=$("${R[@]}" --merge-streams "$TWO")
grep -q "merged into one by this replay" <<<"$text" && ok "text: merged said" || bad "text: merged"
grep -q "streams of layout" <<<"$text" && bad "text: no per-stream table when merged" || ok "text: no per-stream table when merged"

# the PyTorch model: the free on stream 2 returns to stream 1's pool
out=$("${R[@]}" --json --pools pytorch "$CROSS")
expect "pytorch per stream: peak (torchsim)" "$(field peak_reserved_bytes "$out")" 25165824
s1=$(grep -o '{"stream":1,[^}]*}' <<<"$out")
expect "pytorch: stream 1 reused the block freed on stream 2" "$(field peak_reserved_bytes "$s1")" 12582912
out=$("${R[@]}" --json --pools pytorch --merge-streams "$CROSS")
expect "pytorch merged: peak (torchsim)" "$(field peak_reserved_bytes "$out")" 12582912
out=$("${R[@]}" --json --pools pytorch-expandable "$CROSS")
expect "pytorch-expandable per stream: peak (torchsim)" "$(field peak_reserved_bytes "$out")" 41943040

# fit per stream, checked by replaying at the answer
fit=$("$CM" fit --no-config --json --pools pytorch "$CROSS")
fb=$(field fit_bytes "$fit")
expect "fit per stream: pytorch (mincap.py)" "$fb" 14680064
out=$("${R[@]}" --json --pools pytorch --device-memory "$fb" "$CROSS")
expect "fit per stream: the replay at that capacity fits" "$(field failed_allocs "$out")" 0
fit=$("$CM" fit --no-config --json --pools default "$TWO")
fb=$(field fit_bytes "$fit")
out=$("${R[@]}" --json --device-memory "$fb" "$TWO")
expect "fit per stream: default layout fits at its answer" "$(field failed_allocs "$out")" 0
fm=$(field fit_bytes "$("$CM" fit --no-config --json --merge-streams --pools default "$TWO")")
[ "${fm:-0}" -lt "${fb:-0}" ] && ok "fit --merge-streams: smaller (stream 2 reuses stream 1's page)" ||
  bad "fit merged $fm vs per stream $fb"

# a single stream: nothing per stream
one=$("${R[@]}" --json "$SRC/examples/torch-cpu-gpt-train.csv")
grep -q '"streams_merged":false,"streams":\[{"stream":0,"allocs":[0-9]*,"peak_live_bytes":[0-9]*}\]' <<<"$one" &&
  ok "single stream: the report as before" || bad "single stream report"

# the HTML report: the per-stream figures, and a Streams table in a browser
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
"${R[@]}" --pools default --pools pytorch --html "$TMP/r.html" "$TWO" >/dev/null
grep -q '"reserved_at_device_peak"' "$TMP/r.html" && ok "html: per-stream figures embedded" || bad "html: per-stream figures"
CHROME=${CM_CHROMIUM:-$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)}
if [ -n "$CHROME" ]; then
  dom=$(timeout 120 "$CHROME" --headless --no-sandbox --disable-gpu --dump-dom "file://$TMP/r.html" 2>/dev/null)
  grep -q '<h3>Streams</h3>' <<<"$dom" && ok "html: a Streams table in the browser" || bad "html: Streams table"
  expect "html: a row per (layout, stream)" "$(grep -o 'data-stream="[0-9]*"' <<<"$dom" | wc -l)" 4
else
  echo "# no Chromium: the Streams table is not checked in a browser"
fi

"${R[@]}" --merge-streams >/dev/null 2>&1
expect "--merge-streams without a trace: usage error" "$?" 2
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
