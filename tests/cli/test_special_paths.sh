#!/usr/bin/env bash
# test_special_paths.sh - the CLI's path arguments meet files that are not
# regular files. Every command runs under `timeout 20`: a hang is a failure.
#   trace arguments (replay, plan, fit): a directory, /dev/zero, /dev/null
#     and a Unix socket are refused with an error naming the path and its
#     kind; a pipe (process substitution) and a FIFO with a writer are read,
#     CSV and pickle alike (the content decides, a pipe has no pread).
#   --config and check-config PATH: a FIFO nobody writes, a directory, /dev/zero
#     and a socket are refused at once, naming the path; a cubecl.toml FIFO
#     in the working directory stops discovery with an error, not a hang.
# Usage: bash test_special_paths.sh BUILD_DIR SOURCE_DIR SHARED_DIR
# Exit 0 on success, 1 on any failure, 77 when the tool was not built.
set -u
BUILD_DIR=$(cd "${1:?build dir}" && pwd)
SRC_DIR=$(cd "${2:?source dir}" && pwd)
TOOL="$BUILD_DIR/cubemem"
[ -x "$TOOL" ] || { echo "skip: $TOOL not built"; exit 77; }
command -v timeout >/dev/null || { echo "skip: no timeout(1)"; exit 77; }

TMP=$(mktemp -d /tmp/cm_special_paths.XXXXXX)
TMP=$(cd "$TMP" && pwd -P)
trap 'rm -rf "$TMP"' EXIT
fails=0
pass=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

CSV="$SRC_DIR/examples/torch-cpu-gpt-train.csv"
PICKLE="$SRC_DIR/fuzz/corpus/snapshot/synthetic-p4.pickle"

# expect NAME WANT_RC TEXT CMD... : runs CMD (in $TMP) with a timeout
expect() {
  local name=$1 want=$2 text=$3
  shift 3
  (cd "$TMP" && timeout 20 "$@") >"$TMP/out" 2>"$TMP/err" </dev/null
  local rc=$?
  if [ "$rc" -eq 124 ]; then
    fail "$name: still running after 20 s"
  elif { [ "$want" = 0 ] && [ "$rc" -ne 0 ]; } || { [ "$want" != 0 ] && [ "$rc" -eq 0 ]; }; then
    fail "$name: exit $rc, expected $([ "$want" = 0 ] && echo 0 || echo non-zero)"
    cat "$TMP/out" "$TMP/err"
  elif [ -n "$text" ] && ! grep -qF -- "$text" "$TMP/out" "$TMP/err"; then
    fail "$name: '$text' not in the output"
    cat "$TMP/out" "$TMP/err"
  else
    pass=$((pass + 1))
  fi
}

mkdir "$TMP/dir"
mkfifo "$TMP/fifo"
SOCK="$TMP/sock"
python3 -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); s.bind(sys.argv[1])' "$SOCK" 2>/dev/null \
  || SOCK=""

# ---- trace arguments
for cmd in replay plan fit; do
  expect "$cmd dir" 1 "$TMP/dir: not read: a directory" "$TOOL" $cmd "$TMP/dir"
  expect "$cmd /dev/zero" 1 "/dev/zero: not read: a character device" "$TOOL" $cmd /dev/zero
done
expect "replay /dev/null" 1 "a character device" "$TOOL" replay --no-progress /dev/null
[ -n "$SOCK" ] && expect "replay socket" 1 "$SOCK: not read: a socket" "$TOOL" replay "$SOCK"
expect "replay <(csv)" 0 "13,360 events" bash -c "'$TOOL' replay --no-progress <(cat '$CSV')"
expect "replay <(pickle)" 0 "trace" bash -c "'$TOOL' replay --no-progress <(cat '$PICKLE')"
# a FIFO with a writer that starts after the reader opened it
expect "replay fifo" 0 "13,360 events" bash -c \
  "(sleep 0.3; cat '$CSV' > '$TMP/fifo') & '$TOOL' replay --no-progress '$TMP/fifo'; rc=\$?; wait; exit \$rc"

# ---- --config and discovery
expect "check-config fifo" 1 "$TMP/fifo: not read: a FIFO" "$TOOL" check-config "$TMP/fifo"
expect "check-config /dev/zero" 1 "not read: a character device" "$TOOL" check-config /dev/zero
[ -n "$SOCK" ] && expect "check-config socket" 1 "not read: a socket" "$TOOL" check-config "$SOCK"
expect "replay --config fifo" 1 "$TMP/fifo: not read: a FIFO" "$TOOL" replay --no-progress --config "$TMP/fifo" "$CSV"
expect "plan --config dir" 1 "$TMP/dir" "$TOOL" plan --config "$TMP/dir" "$CSV"
expect "replay --config /dev/zero" 1 "a character device" "$TOOL" replay --no-progress --config /dev/zero "$CSV"
mkfifo "$TMP/dir/cubecl.toml"
expect "discovered fifo" 1 "$TMP/dir/cubecl.toml: not read: a FIFO" bash -c "cd '$TMP/dir' && '$TOOL' check-config"

echo "test_special_paths: $pass passed, $fails failed"
[ "$fails" -eq 0 ]
