#!/usr/bin/env bash
# test_new_user.sh BUILD_DIR SOURCE_DIR [SHARED_DIR]
#
# What a new user meets in the first hour, end to end through the `cubemem`
# binary: configuration honoured and discovered by replay and plan (and
# named in the report), configuration typos warned about with one location,
# "did you mean" for options, presets, pool kinds and keys, one unit grammar,
# --alignment / --device-memory checks, toml2json FILE, empty traces, maps
# reported apart from frees, the SVG surviving a closed stdout, and the same
# units and counts in replay and plan.
set -u
BUILD=${1:?build dir} SRC=${2:?source dir}
CM="$(cd "$BUILD" && pwd)/cubemem"
EX="$SRC/examples/torch-cpu-gpt-train.csv"
[ -x "$CM" ] || { echo "no $CM"; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail=0 n=0
ok() { echo "ok $*"; n=$((n + 1)); }
bad() { echo "not ok $*"; fail=1; }
# check NAME FILE PATTERN: the file contains the fixed string
has() { if grep -qF -- "$3" "$2"; then ok "$1"; else bad "$1: '$3' not in: $(head -c 600 "$2")"; fi; }
hasnt() { if grep -qF -- "$3" "$2"; then bad "$1: '$3' in: $(head -c 600 "$2")"; else ok "$1"; fi; }
rc_is() { if [ "$2" = "$3" ]; then ok "$1 (exit $3)"; else bad "$1: exit $2, expected $3"; fi; }

# small trace, fast to replay
cat >"$TMP/t.csv" <<'EOF'
Thread,Time,Action,Pointer,Size,Stream
1,00:00:00.000001,allocate,0x1000,1048576,0x0
1,00:00:00.000002,allocate,0x2000,4096,0x0
1,00:00:00.000003,free,0x1000,1048576,0x0
EOF

# ---- 3. configuration everywhere -------------------------------------------------
mkdir -p "$TMP/burn/sub" "$TMP/cubecl" "$TMP/none"
printf '[cubecl.memory]\npersistent_memory = "disabled"\n' >"$TMP/burn/burn.toml"
printf '[memory]\npersistent_memory = "size-match"\n' >"$TMP/cubecl/cubecl.toml"
"$CM" replay --config "$TMP/burn/burn.toml" "$TMP/t.csv" >"$TMP/out" 2>"$TMP/err"
has "replay --config burn.toml honours [cubecl.memory]" "$TMP/out" "persistent memory disabled"
has "the report names the configuration" "$TMP/out" "config  $TMP/burn/burn.toml [cubecl]"
(cd "$TMP/burn/sub" && "$CM" replay "$TMP/t.csv") >"$TMP/out" 2>&1
has "replay discovers burn.toml upward" "$TMP/out" "persistent memory disabled"
(cd "$TMP/cubecl" && "$CM" replay --json "$TMP/t.csv") >"$TMP/out" 2>&1
has "replay discovers cubecl.toml (JSON names it)" "$TMP/out" "\"config\":\"$TMP/cubecl/cubecl.toml\""
(cd "$TMP/cubecl" && "$CM" replay --no-config "$TMP/t.csv") >"$TMP/out" 2>&1
has "--no-config turns discovery off" "$TMP/out" "config  none (defaults)"
has "--no-config: the defaults" "$TMP/out" "persistent memory enabled"
(cd "$TMP/cubecl" && "$CM" plan "$TMP/t.csv") >"$TMP/out" 2>&1
has "plan discovers cubecl.toml" "$TMP/out" "persistent memory size-match"
has "plan names the configuration" "$TMP/out" "config  $TMP/cubecl/cubecl.toml"
(cd "$TMP/cubecl" && "$CM" fit --json --no-progress "$TMP/t.csv") >"$TMP/out" 2>&1
has "fit discovers cubecl.toml" "$TMP/out" "\"config\":\"$TMP/cubecl/cubecl.toml\""
(cd "$TMP/cubecl" && "$CM" plan --no-config "$TMP/t.csv") >"$TMP/out" 2>&1
has "plan --no-config" "$TMP/out" "config  none (defaults)"
mkdir -p "$TMP/broken"
printf '[memory]\npersistent_memory = "disabld"\n' >"$TMP/broken/cubecl.toml"
(cd "$TMP/broken" && "$CM" replay "$TMP/t.csv") >"$TMP/out" 2>"$TMP/err"
rc_is "an invalid discovered file stops replay" $? 1
has "... and says how to ignore it" "$TMP/err" "--no-config"
(cd "$TMP/broken" && "$CM" replay --no-config "$TMP/t.csv") >/dev/null 2>&1
rc_is "--no-config skips the invalid file" $? 0

# ---- 4. typos never pass in silence ---------------------------------------------
printf '[memroy]\npersistent_memory = "disabled"\n\n[Memory]\n\n[other.tool]\nx = 1\n' >"$TMP/typo1.toml"
printf 'persistent_memory = "disabled"\n[memory]\n' >"$TMP/typo2.toml"
"$CM" check-config "$TMP/typo1.toml" >/dev/null 2>"$TMP/err"
rc_is "a misspelt table is a warning, not an error" $? 0
has "[memroy] named with file and line" "$TMP/err" "$TMP/typo1.toml:1:2: table [memroy] is not read: did you mean [memory]?"
has "[Memory] warned too" "$TMP/err" "$TMP/typo1.toml:4:2: table [Memory]"
hasnt "other sections stay accepted" "$TMP/err" "other"
"$CM" replay --config "$TMP/typo2.toml" "$TMP/t.csv" >/dev/null 2>"$TMP/err"
has "a memory key at the top level (replay)" "$TMP/err" "$TMP/typo2.toml:1:1: 'persistent_memory' is outside [memory] and is not read"
printf '[memory.logger]\nlevel = basic\n' >"$TMP/bare.toml"
"$CM" check-config "$TMP/bare.toml" >/dev/null 2>"$TMP/err"
has "a bare word gets the quotes hint" "$TMP/err" "strings need quotes (write \"basic\")"
c=$(grep -o "bare.toml:2:9" "$TMP/err" | wc -l)
[ "$c" = 1 ] && ok "check-config names the location once" || bad "location named $c times: $(cat "$TMP/err")"
printf '[memory]\npersistent_memory = "disabld"\n' >"$TMP/bad.toml"
"$CM" replay --config "$TMP/bad.toml" "$TMP/t.csv" >/dev/null 2>"$TMP/err"
c=$(grep -o "2:1" "$TMP/err" | wc -l)
[ "$c" = 1 ] && ok "replay names the location once" || bad "replay location named $c times: $(cat "$TMP/err")"
"$CM" check-config --lenient "$TMP/bad.toml" >/dev/null 2>"$TMP/err"
c=$(grep -o "bad.toml" "$TMP/err" | wc -l)
[ "$c" = 1 ] && ok "lenient warning names the file once" || bad "lenient warning: $(cat "$TMP/err")"

# ---- 5. did you mean ------------------------------------------------------------
"$CM" replay --josn "$TMP/t.csv" >/dev/null 2>"$TMP/err"; rc_is "--josn" $? 2
has "--josn: did you mean --json" "$TMP/err" "did you mean '--json'?"
"$CM" replay --pool default "$TMP/t.csv" >/dev/null 2>"$TMP/err"
has "--pool: did you mean --pools" "$TMP/err" "did you mean '--pools'?"
"$CM" plan --devce-memory 1GiB "$TMP/t.csv" >/dev/null 2>"$TMP/err"
has "plan --devce-memory" "$TMP/err" "did you mean '--device-memory'?"
"$CM" replay --pools subslice "$TMP/t.csv" >/dev/null 2>"$TMP/err"; rc_is "--pools subslice" $? 2
has "--pools subslice: did you mean subslices" "$TMP/err" "did you mean 'subslices'?"
"$CM" replay --pools 'slcied:page=1MiB' "$TMP/t.csv" >/dev/null 2>"$TMP/err"
has "an unknown kind suggests the kind" "$TMP/err" "did you mean 'sliced'?"
has "an unknown kind lists the presets" "$TMP/err" "exclusive-pages"
"$CM" replay --pools 'sliced:pgae=1MiB' "$TMP/t.csv" >/dev/null 2>"$TMP/err"
has "an unknown key suggests page=" "$TMP/err" "did you mean 'page='?"
"$CM" replay --pools 'arena:objct=8MiB' "$TMP/t.csv" >/dev/null 2>"$TMP/err"
has "an unknown key suggests the arena's object=" "$TMP/err" "did you mean 'object='?"
has "an unknown key lists every key of the library" "$TMP/err" "period=, reclaim=, object= or keep="
"$CM" replay --pools 'arena:page' "$TMP/t.csv" >/dev/null 2>"$TMP/err"
has "a key without a value lists every key" "$TMP/err" "(keys: page, max-slice, cap, max, period, reclaim, object or keep)"
"$CM" replay --json --no-config --pools 'arena:max_object_size=8MiB' "$TMP/t.csv" >"$TMP/out" 2>&1
has "field names are accepted as keys" "$TMP/out" '"pool":"arena:object=8MiB"'
"$CM" replay --pools 'sliced:page=8MiB,cap=1MiB' "$TMP/t.csv" >/dev/null 2>"$TMP/err"
has "messages use the names users type" "$TMP/err" "cap= (1048576) is smaller than page= (8388608)"
hasnt "never internal field names" "$TMP/err" "max_pool_size"
"$CM" check-config --lenent >/dev/null 2>"$TMP/err"; rc_is "check-config --lenent" $? 2
has "check-config suggests --lenient" "$TMP/err" "did you mean '--lenient'?"
"$CM" replay --device smi "$TMP/t.csv" >/dev/null 2>"$TMP/err"; rc_is "--device smi" $? 2
has "a misspelt device" "$TMP/err" "did you mean 'sim'?"
"$CM" replay --persistent-memory disabld "$TMP/t.csv" >/dev/null 2>"$TMP/err"; rc_is "--persistent-memory disabld" $? 2
has "a misspelt mode" "$TMP/err" 'did you mean "disabled"?'
"$CM" fit --josn "$TMP/t.csv" >/dev/null 2>"$TMP/err"; rc_is "fit --josn" $? 2
has "fit suggests --json" "$TMP/err" "did you mean '--json'?"
"$CM" fit --pools subslice "$TMP/t.csv" >/dev/null 2>"$TMP/err"
has "fit suggests subslices" "$TMP/err" "did you mean 'subslices'?"
"$CM" fit --device-memory 1G "$TMP/t.csv" >/dev/null 2>"$TMP/err"; rc_is "fit --device-memory 1G" $? 2
has "fit uses the same unit grammar" "$TMP/err" "write GiB (powers of 1024) or GB (powers of 1000)"
"$CM" replyy "$TMP/t.csv" >/dev/null 2>"$TMP/err"
has "a misspelt command" "$TMP/err" "did you mean 'replay'?"

# ---- 6. one unit grammar ----------------------------------------------------------
"$CM" replay --json --no-config --device-memory 80GB --pools 'sliced:page=8MB' "$TMP/t.csv" >"$TMP/out" 2>&1
has "--device-memory GB is decimal" "$TMP/out" '"device_memory":80000000000'
has "--pools GB is decimal too" "$TMP/out" '"pool":"sliced:page=8000000'
"$CM" replay --json --no-config --device-memory 1GiB --pools 'sliced:page=2MiB' "$TMP/t.csv" >"$TMP/out" 2>&1
has "GiB is binary in both" "$TMP/out" '"device_memory":1073741824'
has "MiB is binary in --pools" "$TMP/out" '"pool":"sliced:page=2MiB,'
"$CM" replay --json --no-config --device-memory '1.5 gib' "$TMP/t.csv" >"$TMP/out" 2>&1
has "fractions, a space and any case" "$TMP/out" '"device_memory":1610612736'
"$CM" replay --device-memory 1G "$TMP/t.csv" >/dev/null 2>"$TMP/err"; rc_is "a bare G" $? 2
has "a bare G is ambiguous" "$TMP/err" "write GiB (powers of 1024) or GB (powers of 1000)"
"$CM" replay --pools 'sliced:page=1M' "$TMP/t.csv" >/dev/null 2>"$TMP/err"
has "the same rule in --pools" "$TMP/err" "write MiB (powers of 1024) or MB (powers of 1000)"
"$CM" replay --alignment 500 "$TMP/t.csv" >/dev/null 2>"$TMP/err"; rc_is "--alignment 500" $? 2
has "--alignment must be a power of two" "$TMP/err" "must be a power of two"
"$CM" plan --alignment 3 "$TMP/t.csv" >/dev/null 2>"$TMP/err"; rc_is "plan --alignment 3" $? 2
"$CM" replay --device-memory 0 "$TMP/t.csv" >/dev/null 2>"$TMP/err"; rc_is "--device-memory 0" $? 2
has "--device-memory 0 says why" "$TMP/err" "needs at least 4096 bytes"
"$CM" replay --help >"$TMP/out"
has "--help documents the grammar" "$TMP/out" "KiB, MiB, GiB, TiB (powers of 1024)"
has "--help shows --no-config" "$TMP/out" "--no-config"
has "--help shows --snapshot-device" "$TMP/out" "--snapshot-device"
"$CM" plan --help >"$TMP/out"
has "plan --help documents the grammar" "$TMP/out" "KB, MB, GB, TB (powers of 1000)"

# ---- 7. toml2json FILE -------------------------------------------------------------
printf 'a = 1\n' >"$TMP/a.toml"
"$CM" toml2json "$TMP/a.toml" </dev/null >"$TMP/out" 2>&1
has "toml2json reads FILE" "$TMP/out" '{"a":{"type":"integer","value":"1"}}'
printf 'b = 2\n' | "$CM" toml2json >"$TMP/out" 2>&1
has "toml2json still reads stdin" "$TMP/out" '"b"'
"$CM" toml2json --bogus >/dev/null 2>&1; rc_is "toml2json --bogus" $? 2
"$CM" toml2json "$TMP/missing.toml" >/dev/null 2>&1; rc_is "toml2json of a missing file" $? 1

# ---- 8. empty traces, unmaps, closed pipes -------------------------------------------
: >"$TMP/empty.csv"
"$CM" replay --no-config "$TMP/empty.csv" >"$TMP/out" 2>"$TMP/err"
has "an empty trace says so" "$TMP/out" "the trace is empty"
has "an empty trace warns" "$TMP/err" "the trace is empty"
head -1 "$TMP/t.csv" >"$TMP/hdr.csv"
echo "1,00:00:00.000001,free,0x99,16,0x0" >>"$TMP/hdr.csv"
"$CM" replay --no-config "$TMP/hdr.csv" >"$TMP/out" 2>"$TMP/err"
has "a trace without allocations says so" "$TMP/out" "the trace has no allocations"
"$CM" replay --no-config "$EX" >"$TMP/out" 2>&1
has "unmaps have their own row" "$TMP/out" "unmap / release"
grep -Eq "^  device allocs/frees +0 / 0$" "$TMP/out" && ok "device frees do not count unmaps (the arena only maps)" || bad "device allocs/frees counts maps: $(grep allocs/frees "$TMP/out")"
"$CM" replay --no-config --svg "$TMP/o.svg" "$EX" "$EX" "$EX" | (exec 0<&-; true)
st=${PIPESTATUS[0]}
[ "$(tail -c 7 "$TMP/o.svg")" = "</svg>" ] && ok "the SVG is complete when stdout closes early (exit $st)" || bad "SVG truncated: $(tail -c 40 "$TMP/o.svg")"
rm -f "$TMP/o.svg"
"$CM" replay --no-config --svg "$TMP/o.svg" "$EX" >&- 2>/dev/null
[ "$(tail -c 7 "$TMP/o.svg")" = "</svg>" ] && ok "the SVG is complete when stdout is closed" || bad "SVG with closed stdout"
"$CM" replay --no-config "$TMP/t.csv" >/dev/full 2>"$TMP/err"; rc_is "a full disk is an error" $? 1
has "... with a message" "$TMP/err" "cannot write the report"

# ---- 9. the same units and counts in replay and plan ---------------------------------
"$CM" replay --no-config "$EX" >"$TMP/r" 2>/dev/null
"$CM" plan --no-config "$EX" >"$TMP/p" 2>/dev/null
r=$(sed -n 2,3p "$TMP/r") p=$(sed -n 2,3p "$TMP/p")
[ "$r" = "$p" ] && ok "replay and plan print the same trace lines" || bad "trace lines differ: '$r' vs '$p'"
rd=$(grep '^device' "$TMP/r" | cut -d, -f1-4) pd=$(grep '^device' "$TMP/p" | cut -d, -f1-4)
[ "$rd" = "$pd" ] && ok "replay and plan print the same device line ($rd)" || bad "device lines differ: '$rd' vs '$pd'"
has "plan shows 80 GiB like replay" "$TMP/p" "80 GiB (85.90 GB), max page 20 GiB"

[ $fail = 0 ] && echo "test_new_user: $n passed"
exit $fail
