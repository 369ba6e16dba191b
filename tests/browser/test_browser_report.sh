#!/usr/bin/env bash
# test_browser_report.sh BUILD_DIR SOURCE_DIR SHARED_DIR
#
# The HTML report of `cubemem replay --html` in a real browser (headless
# Chromium):
#   1. the bundled example trace, three layouts: the report is written, is
#      self-contained (no http(s) URL, no external script, style or font),
#      and its embedded objects equal the lines `--json` prints;
#   2. a copy with tests/browser/selftest.js inserted is opened headless and
#      its DOM dumped: the script checks the charts, the numbers shown
#      against the JSON, zoom / reset / hover / pick / mode switch and the
#      hover card, and reports script errors; Chromium's own console log is
#      scanned for uncaught errors too;
#   3. screenshots of the report and of the page after the scripted
#      interactions are kept in BUILD_DIR/browser/;
#   4. with SHARED_DIR: a ~100k-event trace (cpu/torch-cpu-mobilenet-train)
#      with three layouts: the report must stay under 10 MB, pass the same
#      checks, and its first paint is measured (BUILD_DIR/browser/metrics.txt).
#
# Skips (exit 77) when no Chromium is installed, unless CM_REQUIRE_BROWSER=1
# (.ci/run sets it): then a missing browser fails the test. Installs nothing.
# Every browser run is bounded by `timeout`, so the test cannot hang.
set -u
BUILD=${1:?build dir} SRC=${2:?source dir} SHARED=${3:-}
CM="$BUILD/cubemem"
[ -x "$CM" ] || { echo "SKIP: $CM not built"; exit 77; }
BUILD=$(cd "$BUILD" && pwd) SRC=$(cd "$SRC" && pwd)   # file:// URLs need absolute paths
CM="$BUILD/cubemem"

CHROME=${CM_CHROMIUM:-}
if [ -z "$CHROME" ]; then
  for c in chromium chromium-browser google-chrome google-chrome-stable; do
    if command -v "$c" >/dev/null 2>&1; then CHROME=$(command -v "$c"); break; fi
  done
fi
if [ -z "$CHROME" ]; then
  if [ "${CM_REQUIRE_BROWSER:-0}" = 1 ]; then
    echo "not ok chromium is required (CM_REQUIRE_BROWSER=1) but not installed"
    exit 1
  fi
  echo "SKIP: chromium not installed (apt-get install chromium); .ci/run installs it and runs this test"
  exit 77
fi
command -v python3 >/dev/null 2>&1 || { echo "SKIP: python3 needed to read the reports"; exit 77; }

OUT="$BUILD/browser"
rm -rf "$OUT"
mkdir -p "$OUT"
PROFILE=$(mktemp -d)
trap 'rm -rf "$PROFILE"' EXIT
fail=0
ok() { echo "ok $*"; }
bad() { echo "not ok $*"; fail=1; }
TIMEOUT=${CM_BROWSER_TIMEOUT:-120}

# chrome ARGS... : headless Chromium with the flags a container needs
chrome() {
  timeout -k 5 "$TIMEOUT" "$CHROME" --headless=new --no-sandbox --disable-gpu \
    --disable-dev-shm-usage --no-first-run --no-default-browser-check --disable-extensions \
    --disable-background-networking --disable-sync --mute-audio --hide-scrollbars \
    --user-data-dir="$PROFILE" --enable-logging=stderr --v=0 "$@"
}

# selftest NAME REPORT : run selftest.js on a copy of REPORT; print its lines
selftest() {
  local name=$1 report=$2 page="$OUT/$1-test.html"
  # The test script goes first in <head> so it sees every error of the page.
  sed "0,/<meta charset=\"utf-8\">/s||<meta charset=\"utf-8\">\n<script src=\"file://$SRC/tests/browser/selftest.js\"></script>|" \
    "$report" >"$page"
  grep -q 'selftest.js' "$page" || { bad "$name: could not insert the test script"; return; }
  chrome --window-size=1400,2600 --virtual-time-budget=30000 --dump-dom "file://$page" \
    >"$OUT/$name-dom.html" 2>"$OUT/$name-chromium.log"
  local rc=$?
  [ $rc -eq 0 ] && ok "$name: chromium ran (--dump-dom)" || bad "$name: chromium exit $rc (see $OUT/$name-chromium.log)"
  python3 - "$OUT/$name-dom.html" >"$OUT/$name-selftest.txt" <<'EOF'
import html, re, sys
dom = open(sys.argv[1], encoding="utf-8", errors="replace").read()
m = re.search(r'<pre id="selftest-result">(.*?)</pre>', dom, re.S)
print(html.unescape(m.group(1)) if m else "not ok the self-test wrote no result (the page did not load?)")
EOF
  sed "s/^/  $name: /" "$OUT/$name-selftest.txt"
  grep -q '^SELFTEST pass=[0-9]* fail=0$' "$OUT/$name-selftest.txt" \
    && ok "$name: every in-browser check passed" || bad "$name: in-browser checks failed"
  # Chromium's console log: any uncaught error or console.error of the page
  if grep -E 'CONSOLE.*(Uncaught|Error|error)' "$OUT/$name-chromium.log" >"$OUT/$name-console-errors.txt"; then
    bad "$name: console errors:"; sed 's/^/    /' "$OUT/$name-console-errors.txt"
  else
    ok "$name: no console errors"
  fi
  chrome --window-size=1400,2600 --virtual-time-budget=30000 --screenshot="$OUT/$name-after-interaction.png" \
    "file://$page" >/dev/null 2>>"$OUT/$name-chromium.log"
  [ -s "$OUT/$name-after-interaction.png" ] && ok "$name: screenshot after the scripted interactions" \
    || bad "$name: no screenshot after the interactions"
}

# static_checks NAME REPORT JSONLINES : self-contained, JSON equals --json
static_checks() {
  local name=$1 report=$2 jsonl=$3
  python3 - "$report" "$jsonl" <<'EOF' && ok "$name: self-contained, embedded JSON equals --json" || bad "$name: static checks"
import json, re, sys
page = open(sys.argv[1], encoding="utf-8").read()
errs = []
for pat, what in [(r'(?i)<script[^>]+src=', "external script"), (r'(?i)<link[^>]+href=', "linked resource"),
                  (r'(?i)https?://', "network URL"), (r'(?i)@import', "CSS import"), (r'(?i)url\(', "CSS url()"),
                  (r'(?i)@font-face', "web font")]:
    if re.search(pat, page): errs.append(what)
m = re.findall(r'<script type="application/json" id="cubemem-data">(.*?)</script>', page, re.S)
if len(m) != 1: errs.append("cubemem-data script element: %d" % len(m))
else:
    data = json.loads(m[0])
    lines = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
    reports = [lay["report"] for t in data["traces"] for lay in t["layouts"]]
    if reports != lines: errs.append("embedded reports differ from --json")
    for t in data["traces"]:
        a = t["allocations"]
        for k in ("alloc_event", "free_event", "alloc_us", "free_us", "size"):
            if len(a[k]) != a["shown"]: errs.append("column " + k)
        for lay in t["layouts"]:
            tl = lay["timeline"]
            n = len(tl["event"])
            if any(len(tl[k]) != n for k in ("time_us", "live", "reserved")): errs.append("timeline columns")
            if max(tl["reserved"]) != lay["report"]["peak_reserved_bytes"]: errs.append("timeline peak != peak_reserved_bytes")
            if lay["peak"]["reserved"] != lay["report"]["peak_reserved_bytes"]: errs.append("peak.reserved")
            if max(tl["live"]) != lay["report"]["peak_live_bytes"]: errs.append("timeline live peak")
            if sum(p["reserved"] for p in lay["peak"]["pools"]) != lay["peak"]["reserved"]: errs.append("pools at the peak do not add up")
if errs:
    print("\n".join(errs)); sys.exit(1)
EOF
}

# ---- 1-3: the bundled example -------------------------------------------------
EX="$SRC/examples/torch-cpu-gpt-train.csv"
"$CM" replay --json --pools default --pools subslices --pools exclusive-pages --html "$OUT/example.html" "$EX" \
  >"$OUT/example.jsonl" 2>"$OUT/example.err"
rc=$?
[ $rc -eq 0 ] && ok "example: replay --html exits 0" || { bad "example: replay --html exit $rc"; cat "$OUT/example.err"; }
static_checks example "$OUT/example.html" "$OUT/example.jsonl"
chrome --window-size=1400,2600 --virtual-time-budget=30000 --screenshot="$OUT/example.png" \
  "file://$OUT/example.html" >/dev/null 2>"$OUT/example-screenshot.log"
[ -s "$OUT/example.png" ] && ok "example: screenshot $OUT/example.png" || bad "example: no screenshot"
selftest example "$OUT/example.html"

# ---- the optional fields: smallest device, driver calls, PyTorch, frames --------
# The example's page with the fields other commands and inputs add (fit_bytes,
# driver_calls, torch_reserved_bytes, per-allocation frames) written into its
# JSON, to check the page shows them when they are there.
python3 - "$OUT/example.html" "$OUT/optional.html" <<'EOF'
import json, re, sys
page = open(sys.argv[1], encoding="utf-8").read()
m = re.search(r'(<script type="application/json" id="cubemem-data">)(.*?)(</script>)', page, re.S)
d = json.loads(m.group(2))
t = d["traces"][0]
t["extra"] = {"torch_reserved_bytes": 1234567890, "frames": ["train.py:42 forward", "model.py:7 <lambda>"]}
for i, lay in enumerate(t["layouts"]):
    lay["report"]["fit_bytes"] = 1300000000 + i
    lay["report"]["driver_calls"] = {"creates": 3 + i, "maps": 1200, "unmaps": 4, "releases": 2,
                                     "set_access": 3, "allocs": 0, "frees": 0}
a = t["allocations"]
a["frames"] = [[0, 1] if k % 2 == 0 else ["direct.py:1 f"] for k in range(a["shown"])]
text = json.dumps(d, separators=(",", ":")).replace("<", "\\u003c")
open(sys.argv[2], "w", encoding="utf-8").write(page[:m.start(2)] + text + page[m.end(2):])
EOF
[ -s "$OUT/optional.html" ] && ok "optional: page with fit, driver calls, PyTorch and frames" || bad "optional: page not made"
selftest optional "$OUT/optional.html"

# ---- several traces in one page; a trace without times; a failed reservation ---
printf 'Action,Pointer,Size\nallocate,0x1,4096\nallocate,0x2,99999999999999\nallocate,0x3,70000\nfree,0x1,4096\nfree,0x2,0\nallocate,0x4,1000000\nfree,0x3,0\n' \
  >"$OUT/notime.csv"
"$CM" replay --device-memory 1GiB --pools default --pools exclusive-pages --html "$OUT/multi.html" \
  "$EX" "$OUT/notime.csv" >/dev/null 2>"$OUT/multi.err"
[ $? -eq 3 ] && ok "multi: two traces, one without times, one failed reservation (exit 3)" || bad "multi: replay failed (expected exit 3 for the failed reservation)"
selftest multi "$OUT/multi.html"

# ---- a PyTorch snapshot recorded with stacks: frames per allocation ------------
SNAP="$SHARED/traces/snapshots/cs336-medium-ctx128-inference.pickle"
if [ -n "$SHARED" ] && [ -f "$SNAP" ]; then
  "$CM" replay --pools default --pools pytorch --html "$OUT/snapshot.html" "$SNAP" >/dev/null 2>"$OUT/snapshot.err"
  [ $? -eq 0 ] && ok "snapshot: replay --html exits 0" || bad "snapshot: replay --html failed"
  python3 - "$OUT/snapshot.html" <<'EOF2' && ok "snapshot: allocations carry the snapshot's frames" || bad "snapshot: frames"
import json, re, sys
page = open(sys.argv[1], encoding="utf-8").read()
d = json.loads(re.search(r'<script type="application/json" id="cubemem-data">(.*?)</script>', page, re.S).group(1))
t = d["traces"][0]
a, table = t["allocations"], t["extra"]["frames"]
assert len(a["frames"]) == a["shown"]
withf = [f for f in a["frames"] if f]
assert len(withf) > a["shown"] // 2, (len(withf), a["shown"])
assert all(isinstance(i, int) and 0 <= i < len(table) for f in withf for i in f)
assert any(".py:" in s for s in table)
EOF2
  selftest snapshot "$OUT/snapshot.html"
else
  echo "# ../shared is absent: the snapshot report (frames) is not checked"
fi

# ---- 4: a 100k-event trace ------------------------------------------------------
BIG="$SHARED/traces/cpu/torch-cpu-mobilenet-train.csv"
if [ -n "$SHARED" ] && [ -f "$BIG" ]; then
  "$CM" replay --json --pools default --pools subslices --pools exclusive-pages --html "$OUT/large.html" "$BIG" \
    >"$OUT/large.jsonl" 2>"$OUT/large.err"
  [ $? -eq 0 ] && ok "large: replay --html exits 0" || bad "large: replay --html failed"
  size=$(stat -c %s "$OUT/large.html")
  events=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["events"])' "$OUT/large.jsonl")
  [ "$size" -lt 10000000 ] && ok "large: $events events, 3 layouts: report is $size bytes (< 10 MB)" \
    || bad "large: report is $size bytes (>= 10 MB)"
  static_checks large "$OUT/large.html" "$OUT/large.jsonl"
  selftest large "$OUT/large.html"
  {
    echo "trace $BIG ($events events), layouts default subslices exclusive-pages"
    echo "report_bytes=$size"
    grep '^metric ' "$OUT/large-selftest.txt" | sed 's/^metric //'
  } >"$OUT/metrics.txt"
  fcp=$(sed -n 's/^first_contentful_paint_ms=//p' "$OUT/metrics.txt")
  # Under heavy load Chromium may report no paint entry before the self-test
  # reads them: then the first paint, else the page's own "charts drawn" time
  # stands in (it comes after the first paint).
  [ -n "$fcp" ] || fcp=$(sed -n 's/^first_paint_ms=//p' "$OUT/metrics.txt")
  [ -n "$fcp" ] || { fcp=$(sed -n 's/^charts_ready_ms=//p' "$OUT/metrics.txt");
                     [ -n "$fcp" ] && echo "# no paint entry reported; using the time the charts were drawn"; }
  echo "# metrics: $(tr '\n' ' ' <"$OUT/metrics.txt")"
  if [ -n "$fcp" ]; then
    awk -v v="$fcp" 'BEGIN { exit !(v < 10000) }' && ok "large: first contentful paint ${fcp} ms (< 10 s)" \
      || bad "large: first contentful paint ${fcp} ms"
  else
    bad "large: no paint timing reported"
  fi
else
  echo "# SHARED traces absent: the 100k-event size and paint checks are skipped"
fi

echo "# outputs (screenshots, DOM dumps, logs): $OUT"
exit $fail
