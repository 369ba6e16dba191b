#!/usr/bin/env bash
# test_html_cli.sh BUILD_DIR SOURCE_DIR SHARED_DIR
#
# `cubemem replay --html` without a browser: the page is written for several
# traces and layouts together with --svg and --json, holds one data element
# whose JSON has one entry per trace and per layout (with the timeline, the
# peak and the allocations), is self-contained, recording for it changes no
# figure of the replay, and the errors (no value,
# unwritable path) have their exit codes. The page in a real browser:
# tests/browser/test_browser_report.sh.
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

# a second, small trace whose name needs escaping in HTML
SMALL="$TMP/a&b <small>.csv"
printf 'Thread,Time,Action,Pointer,Size,Stream\n1,00:00:00.000001,allocate,0x10,1000,0x0\n1,00:00:00.000002,allocate,0x20,5000000,0x0\n1,00:00:00.000003,free,0x10,1000,0x0\n' >"$SMALL"

"$CM" replay --pools default --pools exclusive-pages --html "$TMP/r.html" --svg "$TMP/r.svg" --json \
  "$EX" "$SMALL" >"$TMP/out.jsonl" 2>"$TMP/err"
rc=$?
[ $rc -eq 0 ] && ok "replay --html --svg --json exits 0" || { bad "exit $rc"; cat "$TMP/err"; }
[ -s "$TMP/r.html" ] && ok "page written" || bad "no page"
[ -s "$TMP/r.svg" ] && ok "svg still written" || bad "no svg"
[ "$(wc -l <"$TMP/out.jsonl")" -eq 4 ] && ok "--json still prints one line per run" || bad "--json lines"
head -c 15 "$TMP/r.html" | grep -q '<!DOCTYPE html>' && ok "starts with a doctype" || bad "doctype"
[ "$(grep -c 'id="cubemem-data"' "$TMP/r.html")" -eq 1 ] && ok "one data element" || bad "data element"
grep -qiE 'https?://|<link |src=' "$TMP/r.html" && bad "external references in the page" || ok "no external references"
grep -q '<small>' "$TMP/r.html" && bad "unescaped trace name" || ok "trace name escaped"
if command -v python3 >/dev/null 2>&1; then
  python3 - "$TMP/r.html" "$TMP/out.jsonl" <<'PY' && ok "embedded JSON: traces, layouts, series" || bad "embedded JSON"
import json, re, sys
page = open(sys.argv[1], encoding="utf-8").read()
d = json.loads(re.search(r'id="cubemem-data">(.*?)</script>', page, re.S).group(1))
lines = [json.loads(l) for l in open(sys.argv[2])]
assert [t["trace"] for t in d["traces"]] == [lines[0]["trace"], lines[2]["trace"]], "trace names"
assert "a&b <small>.csv" in d["traces"][1]["trace"]
for t in d["traces"]:
    assert [l["label"] for l in t["layouts"]] == ["default", "exclusive-pages"]
    for lay in t["layouts"]:
        assert lay["timeline"]["event"][-1] == t["events"]
        assert lay["peak"]["reserved"] == lay["report"]["peak_reserved_bytes"]
        assert len(lay["allocations"]["addr"]) == t["allocations"]["shown"] == t["allocations"]["total"]
        assert all(p in range(len(lay["pools"])) for p in lay["allocations"]["pool"])
small = d["traces"][1]
assert small["allocations"]["size"] == [1000, 5000000]
assert small["allocations"]["free_event"] == [2, -1]
assert small["allocations"]["alloc_us"] == [0, 1]  # from the first event
PY
fi

# recording for the page does not change a single figure
"$CM" replay --json --pools default --pools subslices --pools exclusive-pages "$EX" >"$TMP/plain.jsonl" 2>/dev/null
"$CM" replay --json --pools default --pools subslices --pools exclusive-pages --html "$TMP/r2.html" "$EX" \
  >"$TMP/html.jsonl" 2>/dev/null
if command -v python3 >/dev/null 2>&1; then
  python3 - "$TMP/plain.jsonl" "$TMP/html.jsonl" <<'PY' && ok "--html changes no figure of --json" || bad "--html changed figures"
import json, sys
def strip(o):  # times differ run to run; the per-pool peak snapshot comes with the recording
    o = {k: v for k, v in o.items() if k not in ("time_ns", "ns_per_op")}
    o["pools"] = [{k: v for k, v in p.items() if k != "reserved_at_device_peak"} for p in o["pools"]]
    return o
a = [strip(json.loads(l)) for l in open(sys.argv[1])]
b = [strip(json.loads(l)) for l in open(sys.argv[2])]
assert len(a) == 3 and a == b
PY
fi

"$CM" replay --html >/dev/null 2>"$TMP/e1"
[ $? -eq 2 ] && grep -q -- '--html needs a value' "$TMP/e1" && ok "--html without a value: exit 2" || bad "--html without a value"
"$CM" replay --html "$TMP/no/such/dir/r.html" "$SMALL" >/dev/null 2>"$TMP/e2"
[ $? -eq 1 ] && grep -q 'cannot write' "$TMP/e2" && ok "unwritable --html path: exit 1" || bad "unwritable path"
"$CM" replay --help | grep -q -- '--html FILE' && ok "--help lists --html" || bad "--help lacks --html"
exit $fail
