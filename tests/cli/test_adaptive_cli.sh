#!/usr/bin/env bash
# test_adaptive_cli.sh BUILD_DIR SOURCE_DIR SHARED_DIR
#
# `cubemem replay --pools adaptive` end to end on the bundled example: the
# preset's three pools in the JSON (the adaptive one with its page size and
# its outdated pools and pages), no failed reservation and a peak below
# subslices' on this trace, the text table naming the page size and the
# outdated pages, an explicit adaptive pool in a list, the help, and a
# misspelt name answered with a suggestion.
set -u
BUILD=${1:?build dir} SRC=${2:?source dir}
CM="$BUILD/cubemem"
[ -x "$CM" ] || { echo "SKIP: $CM not built"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "SKIP: python3 is missing"; exit 77; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail=0
ok() { echo "ok $*"; }
bad() { echo "not ok $*"; fail=1; }
EX="$SRC/examples/torch-cpu-gpt-train.csv"
[ -f "$EX" ] || { bad "bundled example $EX missing"; exit 1; }

"$CM" replay --json --no-progress --pools subslices --pools adaptive "$EX" >"$TMP/j.out" 2>"$TMP/j.err"
[ $? -eq 0 ] && ok "json exits 0" || bad "json exits 0: $(cat "$TMP/j.err")"
python3 - "$TMP/j.out" <<'PY' && ok "json: adaptive pools, no failure, below subslices" || bad "json: adaptive pools, no failure, below subslices"
import json, re, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r["layout"] for r in rows] == ["subslices", "adaptive"], [r["layout"] for r in rows]
s, a = rows
assert a["failed_allocs"] == 0 and s["failed_allocs"] == 0
assert a["peak_reserved_bytes"] < s["peak_reserved_bytes"], (a["peak_reserved_bytes"], s["peak_reserved_bytes"])
names = [p["pool"] for p in a["pools"]]
assert names[0] == "exclusive:max=0", names
assert names[1] == "sliced:page=8MiB,max-slice=64KiB,max=64KiB", names
m = re.fullmatch(r"adaptive:page=(\d+)MiB,max=20GiB", names[2])
assert m and int(m.group(1)) >= 2, names
# the largest allocation fits a page, which is at most 1 MiB + 1 MiB of rounding above it
p = a["pools"][2]
page = int(m.group(1)) << 20
assert p["largest_alloc"] <= page < p["largest_alloc"] + (2 << 20), (p["largest_alloc"], page)
assert "outdated_pools" in p and "outdated_pages" in p and p["outdated_pages"] >= p["outdated_pools"]
assert all("outdated_pages" not in q for q in a["pools"][:2])
PY

"$CM" replay --no-progress --pools adaptive "$EX" >"$TMP/t.out" 2>&1
grep -qE "adaptive:page=[0-9]+MiB,max=20GiB outdated=[0-9]+" "$TMP/t.out" \
  && ok "text table names the page size and outdated pages" \
  || bad "text table names the page size and outdated pages: $(grep adaptive "$TMP/t.out")"

"$CM" replay --no-progress --pools 'adaptive:page=1MiB,max=64MiB;direct' "$EX" >"$TMP/l.out" 2>&1
[ $? -eq 0 ] && grep -q "failed reserves  *0" "$TMP/l.out" && ok "an explicit adaptive pool" \
  || bad "an explicit adaptive pool: $(tail -3 "$TMP/l.out")"

"$CM" replay --no-progress --pools adaptiv "$EX" >"$TMP/e.out" 2>"$TMP/e.err"
[ $? -eq 2 ] && grep -q "did you mean 'adaptive'" "$TMP/e.err" && ok "a misspelt name gets a suggestion" \
  || bad "a misspelt name gets a suggestion: $(cat "$TMP/e.err")"

"$CM" replay --help >"$TMP/h.out" 2>&1
grep -q "adaptive" "$TMP/h.out" && ok "help lists adaptive" || bad "help lists adaptive"
exit $fail
