#!/usr/bin/env bash
# test_replay_cli.sh BUILD_DIR SOURCE_DIR SHARED_DIR
#
# `cubemem replay` end to end: the text report, --json (every key, peak live
# bytes checked against an independent computation), --svg (well-formed, with
# axis labels), several layouts side by side, --repeat, malformed lines
# (line number reported, exit 1; --skip-bad-lines), frees of unknown
# pointers and `allocate failure` rows (counted, not fatal), reserves that
# fail on a small device, configuration and usage errors.
set -u
BUILD=${1:?build dir} SRC=${2:?source dir} SHARED=${3:-}
CM="$BUILD/cubemem"
[ -x "$CM" ] || { echo "SKIP: $CM not built"; exit 77; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail=0
ok() { echo "ok $*"; }
bad() { echo "not ok $*"; fail=1; }
check() { # check NAME COMMAND... : the command must succeed
  local name=$1; shift
  if "$@"; then ok "$name"; else bad "$name"; fi
}
has_py=0; PY=python3
if command -v python3 >/dev/null 2>&1; then
  has_py=1
  PY=$(python3 -c 'import sys; print(sys.executable)' 2>/dev/null); [ -x "$PY" ] || PY=python3
fi

EX="$SRC/examples/torch-cpu-gpt-train.csv"
[ -f "$EX" ] || { bad "bundled example $EX missing"; exit 1; }

# ---- text report ------------------------------------------------------------
"$CM" replay "$EX" >"$TMP/text.out" 2>"$TMP/text.err"
rc=$?
check "text report exits 0" test $rc -eq 0
for want in "trace   $EX" "peak live" "peak reserved" "reserved / live" "device allocs/frees" \
            "failed reserves" "ns / op" "kind / options" "pages" "largest" "1,177,776,108 bytes"; do
  grep -qF -- "$want" "$TMP/text.out" && ok "text has '$want'" || bad "text lacks '$want'"
done

# ---- JSON, three layouts ------------------------------------------------------
"$CM" replay --json --pools subslices --pools exclusive-pages --pools default --repeat 3 "$EX" \
  >"$TMP/j.out" 2>"$TMP/j.err"
check "json exits 0" test $? -eq 0
check "json has one line per layout" test "$(wc -l <"$TMP/j.out")" -eq 3
if [ $has_py = 1 ]; then
  "$PY" - "$TMP/j.out" "$EX" <<'EOF' && ok "json keys and values" || bad "json keys and values"
import json, sys
live, cur, peak, allocs, frees = {}, 0, 0, 0, 0
with open(sys.argv[2]) as f:
    next(f)
    for line in f:
        t = line.split(",")
        if t[2] == "allocate":
            live[t[3]] = int(t[4]); cur += int(t[4]); allocs += 1
        elif t[2] == "free" and t[3] in live:
            cur -= live.pop(t[3]); frees += 1
        peak = max(peak, cur)
keys = ["trace", "layout", "events", "allocs", "frees", "peak_live_bytes", "peak_reserved_bytes",
        "reserved_over_live", "device_allocs", "device_frees", "failed_allocs", "ns_per_op", "pools"]
layouts = []
for line in open(sys.argv[1]):
    o = json.loads(line)
    for k in keys:
        assert k in o, k
    assert o["peak_live_bytes"] == peak, (o["peak_live_bytes"], peak)
    assert o["allocs"] == allocs and o["frees"] == frees and o["events"] == allocs + frees
    assert o["peak_reserved_bytes"] >= peak
    assert abs(o["reserved_over_live"] - o["peak_reserved_bytes"] / peak) < 1e-5
    assert o["failed_allocs"] == 0 and o["device_allocs"] >= 1 and o["repeat"] == 3
    assert o["ns_per_op"] > 0 and len(o["pools"]) >= 1
    layouts.append(o["layout"])
assert layouts == ["subslices", "exclusive-pages", "default"], layouts
EOF
else
  grep -q '"peak_live_bytes":1177776108' "$TMP/j.out" && ok "json peak" || bad "json peak"
fi

# ---- side by side text ----------------------------------------------------------
"$CM" replay --pools subslices --pools 'sliced:page=8MiB,max-slice=2MiB;exclusive:max=128MiB,period=5000;direct' \
  "$EX" >"$TMP/sbs.out" 2>&1
check "explicit layout exits 0" test $? -eq 0
grep -E '^  layout +subslices +sliced:page=8MiB' "$TMP/sbs.out" >/dev/null && ok "layouts side by side" \
  || bad "layouts side by side: $(grep layout "$TMP/sbs.out" | head -1)"
grep -qF "pools of layout 'sliced:page=8MiB,max-slice=2MiB;exclusive:max=128MiB,period=5000;direct'" \
  "$TMP/sbs.out" && ok "per-pool table of the explicit layout" || bad "per-pool table of the explicit layout"

# ---- SVG ------------------------------------------------------------------------
"$CM" replay --pools default --pools subslices --svg "$TMP/t.svg" "$EX" >/dev/null 2>&1
check "svg run exits 0" test $? -eq 0
if [ -s "$TMP/t.svg" ]; then
  head -c 4 "$TMP/t.svg" | grep -q '^<svg' && ok "svg starts with <svg" || bad "svg start"
  [ "$(tail -c 7 "$TMP/t.svg")" = "</svg>" ] && ok "svg ends with </svg>" || bad "svg end"
  grep -q 'events replayed' "$TMP/t.svg" && grep -q 'memory (' "$TMP/t.svg" && grep -q ' GB</text>' "$TMP/t.svg" \
    && ok "svg axis labels with units" || bad "svg axis labels"
  grep -q 'reserved per pool' "$TMP/t.svg" && ok "svg per-pool breakdown" || bad "svg per-pool breakdown"
  pts=$(grep -o '<polyline[^>]*points="[^"]*"' "$TMP/t.svg" | head -1 | tr ' ' '\n' | grep -c ',')
  [ "$pts" -ge 10 ] && [ "$pts" -le 2002 ] && ok "svg timeline sampled ($pts points)" || bad "svg points: $pts"
  if command -v xmllint >/dev/null 2>&1; then
    xmllint --noout "$TMP/t.svg" && ok "svg is well-formed XML" || bad "svg XML"
  elif [ $has_py = 1 ]; then
    "$PY" -c 'import sys, xml.dom.minidom as m; m.parse(sys.argv[1])' "$TMP/t.svg" \
      && ok "svg is well-formed XML" || bad "svg XML"
  fi
else
  bad "svg not written"
fi

# ---- malformed lines ---------------------------------------------------------------
cat >"$TMP/bad.csv" <<'EOF'
Thread,Time,Action,Pointer,Size,Stream
1,00:00:00.000001,allocate,0x1000,4096,0x0
1,00:00:00.000002,allocate,0x2000,abc,0x0
1,00:00:00.000003,free,0x1000,4096,0x0
EOF
"$CM" replay "$TMP/bad.csv" >"$TMP/bad.out" 2>"$TMP/bad.err"
check "malformed line exits 1" test $? -eq 1
grep -qF "$TMP/bad.csv:3: bad size 'abc'" "$TMP/bad.err" && ok "line number reported" \
  || bad "line number reported: $(cat "$TMP/bad.err")"
"$CM" replay --json --skip-bad-lines "$TMP/bad.csv" >"$TMP/skip.out" 2>"$TMP/skip.err"
check "--skip-bad-lines exits 0" test $? -eq 0
grep -q '"bad_lines":1' "$TMP/skip.out" && grep -q '"allocs":1' "$TMP/skip.out" && ok "skipped line counted" \
  || bad "skipped line counted: $(cat "$TMP/skip.out")"
grep -qF "skipped 1 malformed line (first: $TMP/bad.csv:3: bad size 'abc')" "$TMP/skip.err" \
  && ok "skipped line reported" || bad "skipped line reported: $(cat "$TMP/skip.err")"

# ---- unknown frees, recorded failures, reserves that fail -------------------------------
cat >"$TMP/odd.csv" <<'EOF'
Thread,Time,Action,Pointer,Size,Stream
1,00:00:00.000001,allocate,0x1000,4096,0x0
1,00:00:00.000002,free,0xdead,64,0x0
1,00:00:00.000003,allocate failure,0x0,999999,0x0
1,00:00:00.000004,allocate,0x2000,2147483648,0x0
1,00:00:00.000005,free,0x2000,2147483648,0x0
1,00:00:00.000006,free,0x1000,4096,0x0
EOF
"$CM" replay --json --device-memory 1GiB "$TMP/odd.csv" >"$TMP/odd.out" 2>"$TMP/odd.err"
check "anomalies are not fatal, a failed reservation exits 3" test $? -eq 3
check "the failed reservation is counted on stderr" grep -q '1 reservation failed' "$TMP/odd.err"
"$CM" replay --device-memory 1GiB "$EX" >"$TMP/small.out" 2>"$TMP/small.err"
check "a trace that does not fit exits 3" test $? -eq 3
check "and says how many failed" grep -q 'reservations failed: the trace does not fit' "$TMP/small.err"
check "report counts driver calls by kind" grep -q 'create / map' "$TMP/small.out"
"$CM" replay --json "$EX" >"$TMP/calls.json"
check "json has driver calls by kind" grep -q '"driver_calls":{"total":[0-9]*,"allocs":0,"frees":0,"creates":[1-9]' "$TMP/calls.json"
check "json has no violations" grep -q '"violations":0' "$TMP/calls.json"
for want in '"unknown_frees":1' '"trace_alloc_failures":1' '"failed_allocs":1' '"allocs":2' '"frees":1' \
            '"peak_live_bytes":2147487744' '"device_memory":1073741824'; do
  grep -qF "$want" "$TMP/odd.out" && ok "odd trace: $want" || bad "odd trace: $want in $(cat "$TMP/odd.out")"
done
grep -q "1 free of unknown pointers" "$TMP/odd.err" && ok "unknown free reported" || bad "unknown free reported"
"$CM" replay --device-memory 1GiB "$TMP/odd.csv" >"$TMP/odd.txt" 2>&1
grep -q "first failure" "$TMP/odd.txt" && ok "failed reserve explained" || bad "failed reserve explained"

# ---- standard input, options ------------------------------------------------------------
"$CM" replay --json - <"$TMP/odd.csv" >"$TMP/stdin.out" 2>/dev/null
check "trace from stdin" grep -q '"trace":"-"' "$TMP/stdin.out"
"$CM" replay --json --device-memory=24GiB --alignment 256 --persistent-memory enforced "$EX" >"$TMP/pm.out" 2>&1
check "--persistent-memory enforced runs" grep -q '"peak_live_bytes":1177776108' "$TMP/pm.out"
printf '[memory]\npersistent_memory = "disabled"\n' >"$TMP/cubecl.toml"
"$CM" replay --config "$TMP/cubecl.toml" "$EX" >"$TMP/cfg.out" 2>&1
check "--config applies" grep -q "persistent memory disabled" "$TMP/cfg.out"
printf '[memory]\npersistent_memroy = "disabled"\n' >"$TMP/badcfg.toml"
"$CM" replay --config "$TMP/badcfg.toml" "$EX" >/dev/null 2>"$TMP/badcfg.err"
check "bad --config exits 1" test $? -eq 1
grep -q "badcfg.toml:2" "$TMP/badcfg.err" && ok "bad config located" || bad "bad config located: $(cat "$TMP/badcfg.err")"

# ---- usage errors ---------------------------------------------------------------------------
expect_rc() { # expect_rc RC NAME ARGS...
  local want=$1 name=$2; shift 2
  "$CM" replay "$@" >"$TMP/u.out" 2>"$TMP/u.err"
  local got=$?
  [ $got -eq "$want" ] && ok "$name (exit $got)" || bad "$name: exit $got, expected $want: $(cat "$TMP/u.err")"
}
expect_rc 2 "no trace"
expect_rc 2 "unknown option" --frobnicate "$EX"
expect_rc 2 "bad --device-memory" --device-memory 12XB "$EX"
expect_rc 2 "bad --repeat" --repeat 0 "$EX"
expect_rc 2 "bad --pools" --pools 'sliced:page=0' "$EX"
grep -q -- "--pools 'sliced:page=0'" "$TMP/u.err" && ok "bad --pools named" || bad "bad --pools named"
expect_rc 2 "bad --persistent-memory" --persistent-memory sometimes "$EX"
expect_rc 2 "unknown device" --device nosuch "$EX"
grep -q "unknown device 'nosuch'" "$TMP/u.err" && ok "unknown device named" || bad "unknown device named"
expect_rc 1 "missing trace file" "$TMP/none.csv"
grep -q "none.csv: cannot open" "$TMP/u.err" && ok "missing file named" || bad "missing file named"
expect_rc 0 "--help" --help
grep -q -- "--skip-bad-lines" "$TMP/u.out" && ok "help lists options" || bad "help lists options"

exit $fail
