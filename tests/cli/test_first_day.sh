#!/usr/bin/env bash
# test_first_day.sh BUILD_DIR SOURCE_DIR [SHARED_DIR]
#
# A user's first day, second round, through the `cubemem` binary: every
# command reports a failed write of its output (exit 1 with a message),
# output paths are checked before the work, one command-line grammar
# (help, --device values, missing traces), --json output that is JSON
# only, inputs that are not traces named for what they are, failures that
# explain themselves, configuration warnings, and the context reports give.
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
has() { if grep -qF -- "$3" "$2"; then ok "$1"; else bad "$1: '$3' not in: $(head -c 600 "$2")"; fi; }
hasnt() { if grep -qF -- "$3" "$2"; then bad "$1: '$3' in: $(head -c 600 "$2")"; else ok "$1"; fi; }
rc_is() { if [ "$2" = "$3" ]; then ok "$1 (exit $3)"; else bad "$1: exit $2, expected $3"; fi; }

cat >"$TMP/t.csv" <<'CSV'
Thread,Time,Action,Pointer,Size,Stream
1,00:00:00.000001,allocate,0x1000,1048576,0x0
1,00:00:00.000002,allocate,0x2000,4096,0x0
1,00:00:00.000003,free,0x1000,1048576,0x0
CSV

# ---- write errors: every command exits 1 with a message ---------------------------
if [ -w /dev/full ]; then
  printf 'a = 1\n' >"$TMP/a.toml"
  for cmd in "fit --no-config $TMP/t.csv" "plan --no-config $TMP/t.csv" "toml2json $TMP/a.toml" \
             "replay --no-config $TMP/t.csv" "check-config $TMP/a.toml" "demo" "--help" "replay --help"; do
    # shellcheck disable=SC2086
    "$CM" $cmd >/dev/full 2>"$TMP/err"; rc_is "$cmd > /dev/full fails" $? 1
    has "... $cmd says why" "$TMP/err" "cannot write"
  done
else
  echo "ok # SKIP /dev/full is not writable here"
fi

# ---- output paths are checked before the work --------------------------------------
for opt in --html --svg; do
  start=$(date +%s%N)
  "$CM" replay --no-config "$opt" /nonexistent/x.out "$EX" "$EX" "$EX" >"$TMP/out" 2>"$TMP/err"
  rc_is "replay $opt into a missing directory fails" $? 1
  has "... naming the directory" "$TMP/err" "the directory /nonexistent does not exist"
  [ -s "$TMP/out" ] && bad "$opt: the replay ran before the path was checked: $(head -c 200 "$TMP/out")" \
                    || ok "$opt: checked before the replay (nothing printed)"
  "$CM" replay --no-config "$opt" "$TMP" "$TMP/t.csv" >/dev/null 2>"$TMP/err"
  rc_is "replay $opt DIRECTORY fails" $? 1
  has "... saying so" "$TMP/err" "is a directory"
done
"$CM" replay --no-config --html "$TMP/new.html" "$TMP/t.csv" >/dev/null 2>&1
[ -s "$TMP/new.html" ] && ok "a new --html file in an existing directory is written" || bad "--html not written"

# ---- one command-line grammar ---------------------------------------------------------
"$CM" fit >/dev/null 2>"$TMP/err"; rc_is "fit without a trace" $? 2
has "... says so" "$TMP/err" "cubemem fit: no trace given"
"$CM" plan >/dev/null 2>"$TMP/err"; rc_is "plan without a trace" $? 2
has "... says so" "$TMP/err" "cubemem plan: no trace given"
"$CM" help replay >"$TMP/out" 2>&1; rc_is "cubemem help replay" $? 0
has "... shows replay's help" "$TMP/out" "usage: cubemem replay"
"$CM" help fit >"$TMP/out" 2>&1
has "cubemem help fit shows fit's help" "$TMP/out" "usage: cubemem fit"
"$CM" help nosuch >/dev/null 2>"$TMP/err"; rc_is "cubemem help nosuch" $? 2
for dev in nosuch vulkan:x vulkan:-1 cuda:nosuch; do
  "$CM" replay --no-config --device "$dev" "$TMP/t.csv" >/dev/null 2>"$TMP/err"
  rc_is "--device $dev is a usage error" $? 2
done
for cmd in replay fit plan; do
  "$CM" $cmd --no-config --snapshot-device x "$TMP/t.csv" >/dev/null 2>"$TMP/err"
  rc_is "$cmd --snapshot-device x is a usage error" $? 2
done
"$CM" fit --no-config --confirm -1 "$TMP/t.csv" >/dev/null 2>"$TMP/err"; rc_is "fit --confirm -1" $? 2
hasnt "... does not talk about sizes" "$TMP/err" "unit"
has "... asks for a count" "$TMP/err" "count"
"$CM" fit --no-config --confirm 2MiB "$TMP/t.csv" >/dev/null 2>&1; rc_is "fit --confirm 2MiB" $? 2

# ---- --json is JSON only; the application's logger stays out of the tool's way ---------
mkdir -p "$TMP/app"
printf '[memory]\nlogger = { level = "basic", stdout = true, file = "logs/mem.log" }\n' >"$TMP/app/cubecl.toml"
(cd "$TMP/app" && "$CM" replay --json "$TMP/t.csv" >"$TMP/out" 2>"$TMP/err"); rc_is "replay --json with a discovered logger" $? 0
python3 -c 'import json,sys; [json.loads(l) for l in open(sys.argv[1])]' "$TMP/out" 2>/dev/null \
  && ok "... stdout is JSON only" || bad "stdout is not JSON: $(head -c 300 "$TMP/out")"
[ -e "$TMP/app/logs" ] && bad "the discovered logger created logs/ in the working directory" || ok "... no logs/ created"
has "... a note says the logger is not used" "$TMP/err" "is the application's"
(cd "$TMP/app" && "$CM" replay --json --config cubecl.toml "$TMP/t.csv" >"$TMP/out" 2>"$TMP/err")
python3 -c 'import json,sys; [json.loads(l) for l in open(sys.argv[1])]' "$TMP/out" 2>/dev/null \
  && ok "--config logger: stdout is JSON only" || bad "--config logger: stdout is not JSON: $(head -c 300 "$TMP/out")"
has "... its messages go to stderr" "$TMP/err" "Using memory pool"
has "... and the log file is named" "$TMP/err" "the memory log goes to $TMP/app/logs/mem.log"

# ---- inputs that are not traces are named ---------------------------------------------
printf '\x89PNG\r\n\x1a\n\0\0\0\rIHDR' >"$TMP/img.png"
gzip -c "$TMP/t.csv" >"$TMP/t.csv.gz"
printf 'PK\x03\x04\x14\0\0\0' >"$TMP/model.pt"
printf '\x7fELF\x02\x01\x01\0' >"$TMP/prog"
printf '%%PDF-1.7\n' >"$TMP/doc.pdf"
python3 -c 'import pickle,sys; pickle.dump([1, 2, 3], open(sys.argv[1], "wb"), protocol=4)' "$TMP/list.pickle"
truncate -s 2G "$TMP/zeros.bin" 2>/dev/null || head -c 100000000 /dev/zero >"$TMP/zeros.bin"
for spec in "img.png:a PNG image" "t.csv.gz:gzip" "t.csv.gz:gunzip" "model.pt:a zip archive" "prog:an ELF binary" \
            "doc.pdf:a PDF document" "list.pickle:a pickle of a list, not a PyTorch memory snapshot" \
            "zeros.bin:NUL byte"; do
  f=${spec%%:*} want=${spec#*:}
  "$CM" replay --no-config "$TMP/$f" >/dev/null 2>"$TMP/err"; rc_is "replay $f" $? 1
  has "... $f is named: $want" "$TMP/err" "$want"
  hasnt "... $f: no field count" "$TMP/err" "expected 6 fields"
done
for cmd in fit plan; do
  "$CM" $cmd --no-config "$TMP/img.png" >/dev/null 2>"$TMP/err"; rc_is "$cmd img.png" $? 1
  has "... $cmd names the PNG" "$TMP/err" "a PNG image"
done
# a large binary file fails at once, not after reading it whole
if [ -x /usr/bin/time ]; then
  /usr/bin/time -f '%e %M' -o "$TMP/time" "$CM" replay --no-config "$TMP/zeros.bin" >/dev/null 2>&1
  read -r secs kib < <(tail -n 1 "$TMP/time")
  awk -v s="$secs" -v k="$kib" 'BEGIN { exit !(s < 2 && k < 100000) }' \
    && ok "2 GB of zeros: refused in ${secs}s, ${kib} KiB" || bad "2 GB of zeros: ${secs}s, ${kib} KiB"
else
  echo "ok # SKIP /usr/bin/time is missing: the time and memory of a large binary file are not checked"
fi
rm -f "$TMP/zeros.bin"

echo "$n checks"
exit $fail
