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

# ---- failures explain themselves -------------------------------------------------------
cat >"$TMP/oom.csv" <<'CSV'
Thread,Time,Action,Pointer,Size,Stream
1,00:00:01.000000,allocate,0x1000,1048576,0x0
1,00:00:02.500000,allocate failure,0x0,4294967296,0x0
1,00:00:03.000000,free,0x1000,1048576,0x0
CSV
"$CM" replay --no-config "$TMP/oom.csv" >"$TMP/out" 2>"$TMP/err"
has "a recorded out-of-memory: its size" "$TMP/err" "the first asked for 4.29 GB (4294967296 bytes)"
has "... its time and line" "$TMP/err" "oom.csv:3: out of memory in the recorded run: 1 allocation failed"
has "... and the time (from the first event)" "$TMP/err" "at 1.500000 s with 1.05 MB live"
has "... in the report too" "$TMP/out" "out of memory in the recorded run"
"$CM" replay --no-config --json "$TMP/oom.csv" >"$TMP/out" 2>/dev/null
has "... and the JSON" "$TMP/out" '"trace_first_failure":{"size":4294967296,"time_us":1500000,"live_bytes":1048576,"line":3}'
python3 - "$TMP/oomsnap.pickle" <<'PY'
import pickle, sys
pickle.dump({"segments": [], "device_traces": [[
    {"action": "alloc", "addr": 4096, "size": 512, "stream": 0, "time_us": 10},
    {"action": "oom", "addr": 0, "size": 1 << 40, "stream": 0, "time_us": 3000000},
    {"action": "free_completed", "addr": 4096, "size": 512, "stream": 0, "time_us": 3000010}]]},
    open(sys.argv[1], "wb"), protocol=4)
PY
"$CM" replay --no-config "$TMP/oomsnap.pickle" >/dev/null 2>"$TMP/err"
has "a snapshot's oom entry: its size and time" "$TMP/err" "the first asked for 1.10 TB (1099511627776 bytes) at 2.999990 s with 512 B live"
# a replay that runs out of memory: where, when, how much
"$CM" replay --no-config --device-memory 1GiB "$EX" >"$TMP/out" 2>/dev/null; rc_is "a replay that does not fit" $? 3
grep -E "^  reserved / live +run failed$" "$TMP/out" >/dev/null && ok "... no ratio as if it had succeeded" \
  || bad "ratio of a failed run: $(grep 'reserved / live' "$TMP/out")"
grep -E "the run failed; first failure \[default\]: CM_EOOM reserving .* \([0-9]+ bytes\) at event [0-9,]+ \([0-9.]+ s\) with .* live and .* reserved: " "$TMP/out" >/dev/null \
  && ok "... the first failure: size, event, time, live and reserved" || bad "first failure: $(grep 'first failure' "$TMP/out")"
"$CM" replay --no-config --json --device-memory 1GiB "$EX" >"$TMP/out" 2>/dev/null
python3 - "$TMP/out" <<'PY' && ok "... the same in the JSON" || bad "JSON first_failure: $(grep -o '"first_failure[^}]*}' "$TMP/out")"
import json, sys
r = json.loads(open(sys.argv[1]).readline())
f = r["first_failure"]
assert f["event"] > 0 and f["time_us"] > 0 and 0 < f["live_bytes"] <= r["peak_live_bytes"], f
assert f["reserved_bytes"] > 0 and f["size"] > 0, f
PY
"$CM" replay --no-config --html "$TMP/f.html" --device-memory 1GiB "$EX" >/dev/null 2>&1
has "... and in the HTML page's data" "$TMP/f.html" '"first_failure":{"status":"CM_EOOM"'
has "... which the page shows" "$TMP/f.html" 'run failed'

# ---- a burn.toml with a top-level [memory] and no [cubecl] -----------------------------
mkdir -p "$TMP/burn/sub"
printf '[memory]\npersistent_memory = "disabled"\n' >"$TMP/burn/burn.toml"
(cd "$TMP/burn/sub" && "$CM" check-config >/dev/null 2>"$TMP/err")
has "check-config (discovered): a burn.toml's top-level [memory]" "$TMP/err" "burn.toml:1:2: [memory] at the top of"
has "... says to write [cubecl.memory]" "$TMP/err" "write [cubecl.memory]"
"$CM" check-config "$TMP/burn/burn.toml" >/dev/null 2>"$TMP/err"
has "check-config burn.toml: the same warning" "$TMP/err" "write [cubecl.memory]"
for cmd in replay plan fit; do
  (cd "$TMP/burn/sub" && "$CM" $cmd "$TMP/t.csv" >/dev/null 2>"$TMP/err")
  has "$cmd (discovered): the same warning" "$TMP/err" "cubemem $cmd: warning: $TMP/burn/burn.toml:1:2: [memory] at the top of"
done
"$CM" replay --config "$TMP/burn/burn.toml" "$TMP/t.csv" >/dev/null 2>"$TMP/err"
has "replay --config burn.toml: the same warning" "$TMP/err" "write [cubecl.memory]"
printf '[cubecl.memory]\npersistent_memory = "disabled"\n' >"$TMP/burn/burn.toml"
(cd "$TMP/burn/sub" && "$CM" check-config >/dev/null 2>"$TMP/err")
hasnt "a burn.toml with [cubecl.memory]: no warning" "$TMP/err" "warning"

# ---- context in reports ---------------------------------------------------------------
python3 - "$TMP/conf.pickle" "$TMP/noconf.pickle" <<'PY'
import pickle, sys
tr = [[{"action": "alloc", "addr": 4096, "size": 512, "stream": 0, "time_us": 10},
       {"action": "free_completed", "addr": 4096, "size": 512, "stream": 0, "time_us": 20}]]
seg = [{"device": 0, "address": 4096, "total_size": 2097152, "blocks": []}]
pickle.dump({"segments": seg, "device_traces": tr,
             "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}},
            open(sys.argv[1], "wb"), protocol=4)
pickle.dump({"segments": seg, "device_traces": tr}, open(sys.argv[2], "wb"), protocol=4)
PY
"$CM" replay --no-config "$TMP/conf.pickle" >"$TMP/out" 2>&1
has "a snapshot's allocator settings in the head" "$TMP/out" "PYTORCH_CUDA_ALLOC_CONF expandable_segments:True (allocator_settings at dump)"
grep -A2 "^  PyTorch at dump" "$TMP/out" | grep -q "settings .*expandable_segments:True" \
  && ok "... beside PyTorch's reserved figure, at dump" || bad "no settings under 'PyTorch at dump': $(grep -A2 'PyTorch at dump' "$TMP/out")"
"$CM" replay --no-config --json "$TMP/conf.pickle" >"$TMP/out" 2>&1
has "... and in the JSON" "$TMP/out" '"torch_alloc_conf_at_dump":"expandable_segments:True"'
"$CM" plan --no-config "$TMP/conf.pickle" >"$TMP/out" 2>&1
has "... and in plan" "$TMP/out" "PYTORCH_CUDA_ALLOC_CONF expandable_segments:True (allocator_settings at dump)"
"$CM" replay --no-config "$TMP/noconf.pickle" >"$TMP/out" 2>&1
has "a snapshot without allocator_settings says so" "$TMP/out" "PYTORCH_CUDA_ALLOC_CONF not recorded"
"$CM" plan --no-config "$EX" >"$TMP/out" 2>&1
has "plan: the default layout at its peak: nothing to plan" "$TMP/out" "nothing to plan: layout 'default' already sits at its measured peak"
[ "$(tail -n 1 "$TMP/out")" = "arena:cap=1192MiB;arena" ] && ok "... the last line is still the layout" || bad "last line: $(tail -n 1 "$TMP/out")"
if [ -f "$BUILD/libfakecuda.so" ]; then
  CM_CUDA_LIBRARY="$(cd "$BUILD" && pwd)/libfakecuda.so" FAKECUDA_CAPACITY=$((8 << 30)) \
    "$CM" replay --no-config --device cuda "$TMP/t.csv" >"$TMP/out" 2>&1
  has "--device cuda names the device" "$TMP/out" "device  cuda (Fake CUDA GPU 0), 8 GiB"
else
  echo "ok # SKIP no libfakecuda.so: the device name of --device cuda is not checked"
fi

# ---- streams: reported, each with its own pools (merged on request) -------------------
cat >"$TMP/streams.csv" <<'CSV'
Thread,Time,Action,Pointer,Size,Stream
1,00:00:00.000001,allocate,0x1000,1048576,0x0
1,00:00:00.000002,allocate,0x2000,4096,0x7f01
1,00:00:00.000003,allocate,0x3000,8192,0x7f01
1,00:00:00.000004,free,0x1000,1048576,0x0
1,00:00:00.000005,free,0x2000,4096,0x0
CSV
"$CM" replay --no-config "$TMP/streams.csv" >"$TMP/out" 2>&1
has "a trace's streams are reported" "$TMP/out" "2 streams, each replayed with its own pools"
has "... per stream: allocations and peak live" "$TMP/out" "stream 0x7f01: 2 allocations, peak live 12.29 KB"
has "... a free counts on its allocation's stream" "$TMP/out" "stream 0x0: 1 allocations, peak live 1.05 MB"
"$CM" plan --no-config "$TMP/streams.csv" >"$TMP/out" 2>&1
has "... in plan too" "$TMP/out" "2 streams, merged into one by this replay"
"$CM" replay --no-config --json "$TMP/streams.csv" >"$TMP/out" 2>&1
has "... and in the JSON, per stream" "$TMP/out" '"streams_merged":false,"streams":[{"stream":0,"allocs":1,"peak_live_bytes":1048576,"peak_reserved_bytes":'
"$CM" replay --no-config --json --merge-streams "$TMP/streams.csv" >"$TMP/out" 2>&1
has "... and merged on request" "$TMP/out" '"streams_merged":true,"streams":[{"stream":0,"allocs":1,"peak_live_bytes":1048576},{"stream":32513,"allocs":2,"peak_live_bytes":12288}]'
"$CM" replay --no-config "$TMP/t.csv" >"$TMP/out" 2>&1
hasnt "one stream: no stream lines" "$TMP/out" "streams, merged"
python3 - "$TMP/streams.pickle" <<'PY'
import pickle, sys
pickle.dump({"segments": [], "device_traces": [[
    {"action": "alloc", "addr": 4096, "size": 512, "stream": 0, "time_us": 10},
    {"action": "alloc", "addr": 8192, "size": 1024, "stream": 7, "time_us": 11},
    {"action": "free_completed", "addr": 4096, "size": 512, "stream": 0, "time_us": 12}]]},
    open(sys.argv[1], "wb"), protocol=4)
PY
"$CM" replay --no-config "$TMP/streams.pickle" >"$TMP/out" 2>&1
has "a snapshot's streams are reported" "$TMP/out" "stream 0x7: 1 allocations, peak live 1.02 KB"

echo "$n checks"
exit $fail
