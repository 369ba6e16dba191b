#!/bin/sh
# run_toml_test.sh - run the toml-test 1.0.0 conformance cases against a
# toml2json decoder.
#
# Usage: run_toml_test.sh TOML2JSON_CMD TOML_TEST_DIR
#   TOML2JSON_CMD  decoder command (may contain arguments, e.g.
#                  "build/cubemem toml2json"): TOML on stdin, tagged JSON on
#                  stdout, exit 0; or a message on stderr and exit 1.
#   TOML_TEST_DIR  folder holding files-toml-1.0.0, valid/ and invalid/.
#
# Every .toml listed in files-toml-1.0.0 is run (20 s limit each, CM_TOML_CASE_TIMEOUT, when
# `timeout` exists). valid/*: must exit 0 with empty stderr and JSON that
# matches the .json semantically (toml-test rules, checked in one batch by
# an embedded python3 script). invalid/*: must exit exactly 1 with a message on stderr.
# Prints "N passed, N failed"; exits 0 only when nothing failed; exits 77
# (skip) when the case folder does not exist.
set -u

if [ $# -ne 2 ]; then
  echo "usage: $0 TOML2JSON_CMD TOML_TEST_DIR" >&2
  exit 2
fi
DEC=$1
T=$2

if [ ! -d "$T" ] || [ ! -f "$T/files-toml-1.0.0" ]; then
  echo "SKIP: toml-test cases not found at $T"
  exit 77
fi
if ! command -v python3 >/dev/null 2>&1; then
  echo "SKIP: python3 is needed to compare JSON"
  exit 77
fi

TMP=$(mktemp -d "${TMPDIR:-/tmp}/toml-test.XXXXXX") || exit 2
trap 'rm -rf "$TMP"' EXIT INT TERM

cat > "$TMP/tagcmp.py" <<'PY'
import json, math, re, sys
from datetime import datetime, date, time, timezone, timedelta

def norm_dt(s):
    return s.replace(" ", "T").replace("t", "T").replace("z", "Z")

def parse_dt(typ, s):
    s = norm_dt(s)
    def frac(f):
        return int((f or "0").ljust(9, "0")[:9])
    if typ == "date-local":
        m = re.fullmatch(r"(\d{4})-(\d\d)-(\d\d)", s)
        return tuple(int(x) for x in m.groups())
    if typ == "time-local":
        m = re.fullmatch(r"(\d\d):(\d\d):(\d\d)(?:\.(\d+))?", s)
        g = m.groups()
        return (int(g[0]), int(g[1]), int(g[2]), frac(g[3]))
    m = re.fullmatch(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)?", s)
    g = m.groups()
    y, mo, d, h, mi, se = (int(x) for x in g[:6])
    ns = frac(g[6])
    if typ == "datetime-local":
        if g[7] is not None:
            raise ValueError("offset on local datetime")
        return (y, mo, d, h, mi, se, ns)
    if g[7] is None:
        raise ValueError("missing offset")
    off = 0
    if g[7] != "Z":
        sign = -1 if g[7][0] == "-" else 1
        off = sign * (int(g[7][1:3]) * 60 + int(g[7][4:6]))
    leap = 1 if se == 60 else 0
    base = datetime(y, mo, d, h, mi, se - leap, tzinfo=timezone(timedelta(minutes=off)))
    return (base.timestamp() + leap, ns)

def leaf_eq(a, b):
    ta, tb = a["type"], b["type"]
    if ta != tb:
        return False
    va, vb = a["value"], b["value"]
    if ta in ("string", "integer"):
        return va == vb
    if ta == "bool":
        return va.lower() == vb.lower()
    if ta == "float":
        if va.endswith("nan") or vb.endswith("nan"):
            return va.lstrip("+-") == "nan" and vb.lstrip("+-") == "nan"
        return float(va) == float(vb)
    if ta in ("datetime", "datetime-local", "date-local", "time-local"):
        return parse_dt(ta, va) == parse_dt(tb, vb)
    return False

def is_leaf(x):
    return isinstance(x, dict) and set(x.keys()) == {"type", "value"} and \
        isinstance(x["type"], str) and isinstance(x["value"], str)

def eq(a, b):
    if is_leaf(a) or is_leaf(b):
        return is_leaf(a) and is_leaf(b) and leaf_eq(a, b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(eq(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(eq(x, y) for x, y in zip(a, b))
    return False

# argv[1]: a list file, one "case<TAB>expected.json<TAB>output.json" per line.
# Prints "FAIL case" for each mismatch and, last, the number of failures.
bad = 0
with open(sys.argv[1], encoding="utf-8") as lst:
    for line in lst:
        case, want_path, got_path = line.rstrip("\n").split("\t")
        try:
            with open(want_path, encoding="utf-8") as f:
                want = json.load(f)
            with open(got_path, encoding="utf-8") as f:
                got = json.load(f)
            ok = eq(want, got)
            why = "JSON differs from expected"
        except Exception as e:  # malformed output counts as a mismatch
            ok = False
            why = str(e)
        if not ok:
            bad += 1
            print("FAIL %s (%s)" % (case, why))
print(bad)
PY

# generous: a loaded machine or a sanitizer build must not fail a case by time
if command -v timeout >/dev/null 2>&1; then TO="timeout ${CM_TOML_CASE_TIMEOUT:-20}"; else TO=""; fi

pass=0
fail=0
n=0
: > "$TMP/list"
mkdir "$TMP/v"
while IFS= read -r f || [ -n "$f" ]; do
  case "$f" in
    *.toml) ;;
    *) continue ;;
  esac
  n=$((n + 1))
  out="$TMP/v/$n.json"
  # shellcheck disable=SC2086  # DEC may hold a command plus arguments
  $TO $DEC < "$T/$f" > "$out" 2> "$TMP/err"
  rc=$?
  case "$f" in
    valid/*)
      if [ $rc -eq 0 ] && [ ! -s "$TMP/err" ]; then
        # compared in one batch below (python start-up is slow)
        printf '%s\t%s\t%s\n' "$f" "$T/${f%.toml}.json" "$out" >> "$TMP/list"
      else
        fail=$((fail + 1))
        echo "FAIL $f (rc=$rc) $(head -c 300 "$TMP/err")"
      fi
      ;;
    invalid/*)
      if [ $rc -eq 1 ] && [ -s "$TMP/err" ]; then
        pass=$((pass + 1))
      else
        fail=$((fail + 1))
        echo "FAIL $f (rc=$rc: expected rejection with exit 1)"
      fi
      rm -f "$out"
      ;;
  esac
done < "$T/files-toml-1.0.0"

ncmp=$(wc -l < "$TMP/list")
python3 "$TMP/tagcmp.py" "$TMP/list" > "$TMP/cmp" 2>&1
cmp_rc=$?
bad=$(tail -n 1 "$TMP/cmp")
case "$bad" in
  ''|*[!0-9]*) # the checker itself failed: count every compared case as failed
    cat "$TMP/cmp"
    bad=$ncmp ;;
  *) sed '$d' "$TMP/cmp" ;;
esac
[ $cmp_rc -eq 0 ] || true
pass=$((pass + ncmp - bad))
fail=$((fail + bad))

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
