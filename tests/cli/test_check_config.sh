#!/usr/bin/env bash
# test_check_config.sh - golden-style checks of `cubemem check-config`.
# Usage: bash test_check_config.sh BUILD_DIR SOURCE_DIR SHARED_DIR
# Exit 0 on success, 1 on any failure, 77 when the tool was not built.
set -u
BUILD_DIR=${1:?build dir}
TOOL="$BUILD_DIR/cubemem"
if [ ! -x "$TOOL" ]; then
  echo "skip: $TOOL not built"
  exit 77
fi

TMP=$(mktemp -d /tmp/cm_check_config.XXXXXX)
TMP=$(cd "$TMP" && pwd -P)
trap 'rm -rf "$TMP"' EXIT
fails=0
pass=0

fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { pass=$((pass + 1)); }

# run NAME EXPECTED_RC ARGS... : runs the tool (in $RUN_DIR), keeps out/err
RUN_DIR=$TMP
run() {
  local name=$1 want=$2
  shift 2
  (cd "$RUN_DIR" && "$TOOL" check-config "$@") >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  if [ "$rc" -ne "$want" ]; then
    fail "$name: exit $rc, expected $want"
    echo "--- stdout"; cat "$TMP/out"; echo "--- stderr"; cat "$TMP/err"
    return 1
  fi
  ok
  return 0
}
has() { # has NAME FILE TEXT : fixed-string match
  if grep -qF -- "$3" "$2"; then ok; else
    fail "$1: '$3' not in $(basename "$2")"; echo "--- $(basename "$2"):"; cat "$2"
  fi
}
empty() { if [ -s "$2" ]; then fail "$1: $(basename "$2") not empty"; cat "$2"; else ok; fi; }

# ---- usage --------------------------------------------------------------------
run help 0 --help && has help "$TMP/out" "usage: cubemem check-config [PATH] [--lenient] [--help]"
run bad-option 2 --strictest && has bad-option "$TMP/err" "unknown option '--strictest'"
run two-paths 2 a.toml b.toml && has two-paths "$TMP/err" "more than one PATH"
run missing-path 1 "$TMP/does-not-exist.toml" && has missing-path "$TMP/err" "no such file"

# ---- a valid file: every setting with its source (golden) ------------------------
mkdir -p "$TMP/valid"
cat >"$TMP/valid/cubecl.toml" <<'EOF'
[profiling]
anything = "goes"

[memory]
persistent_memory = "size-match"
logger = { level = "basic", stdout = true, file = "logs/m.log" }

[memory.cuda]
allocator = "async"
EOF
F="$TMP/valid/cubecl.toml"
cat >"$TMP/want" <<EOF
# configuration: $F
memory.persistent_memory = "size-match"  # $F:5
memory.logger.level = "basic"  # $F:6
memory.logger.file = "logs/m.log"  # $F:6
memory.logger.append = true  # default
memory.logger.stdout = true  # $F:6
memory.logger.stderr = false  # default
memory.logger.log = (unset)  # default
memory.cuda.allocator = "async"  # $F:9
EOF
if run valid-file 0 "$F"; then
  if diff -u "$TMP/want" "$TMP/out"; then ok; else fail "valid-file: output differs"; fi
  empty valid-file "$TMP/err"
fi
# the same file found by discovery from a subdirectory
mkdir -p "$TMP/valid/sub/deeper"
RUN_DIR="$TMP/valid/sub/deeper"
run discover-cwd 0 && has discover-cwd "$TMP/out" "# configuration: $F"
RUN_DIR=$TMP
run discover-dir-arg 0 "$TMP/valid/sub" && has discover-dir-arg "$TMP/out" "# configuration: $F"

# ---- invalid files: exit 1, location + key + hint on stderr ------------------------
mkdir -p "$TMP/bad"
printf '[memory]\npersistent_memory = "enabled"\n[memory.logger]\nlevle = "basic"\n' >"$TMP/bad/typo.toml"
if run typo 1 "$TMP/bad/typo.toml"; then
  has typo "$TMP/err" "$TMP/bad/typo.toml:4:1: unknown key 'memory.logger.levle'; expected one of level, file, append, stdout, stderr"
  has typo "$TMP/err" "did you mean 'level'?"
  empty typo "$TMP/out"
fi
printf '[memory]\npersistent_memory = "Enabled"\n' >"$TMP/bad/case.toml"
run enum-case 1 "$TMP/bad/case.toml" &&
  has enum-case "$TMP/err" "case.toml:2:1: invalid value \"Enabled\" for 'memory.persistent_memory'" &&
  has enum-case "$TMP/err" "did you mean \"enabled\"?"
printf '[memory.logger]\nappend = "yes"\n' >"$TMP/bad/type.toml"
run wrong-type 1 "$TMP/bad/type.toml" &&
  has wrong-type "$TMP/err" "type.toml:2:1: wrong type for 'memory.logger.append': expected a bool (true or false), found a string"
printf '[[memory.pools]]\ntype = "sliced"\n' >"$TMP/bad/pools.toml"
run pools 1 "$TMP/bad/pools.toml" &&
  has pools "$TMP/err" "pools.toml:1:10: 'memory.pools' is not accepted in configuration files: pool layouts are set through the API"
printf '[memory]\npersistent_memory = \n' >"$TMP/bad/syntax.toml"
run syntax 1 "$TMP/bad/syntax.toml" && has syntax "$TMP/err" "syntax.toml:2:"
printf '[memory.cuda]\nallocator = "asynch"\n' >"$TMP/bad/alloc.toml"
run allocator 1 "$TMP/bad/alloc.toml" && has allocator "$TMP/err" "did you mean \"async\"?"

# ---- burn.toml: read through [cubecl] ------------------------------------------------
mkdir -p "$TMP/burn"
printf '[package]\nname = "p"\n\n[cubecl.memory]\npersistent_memory = "enforced"\n' >"$TMP/burn/burn.toml"
run burn-file 0 "$TMP/burn/burn.toml" &&
  has burn-file "$TMP/out" "# configuration: $TMP/burn/burn.toml [cubecl]" &&
  has burn-file "$TMP/out" "memory.persistent_memory = \"enforced\"  # $TMP/burn/burn.toml:5 [cubecl]"

# ---- strict vs lenient discovery (T76 case 3) ----------------------------------------
mkdir -p "$TMP/mix/a/b"
printf '[memory\n' >"$TMP/mix/a/b/cubecl.toml"
printf '[cubecl.memory]\npersistent_memory = "disabled"\n' >"$TMP/mix/a/b/burn.toml"
RUN_DIR="$TMP/mix/a/b"
run strict-discovery 1 && has strict-discovery "$TMP/err" "$TMP/mix/a/b/cubecl.toml:1:8:"
if run lenient-discovery 0 --lenient; then
  has lenient-discovery "$TMP/out" "# configuration: $TMP/mix/a/b/burn.toml [cubecl]"
  has lenient-discovery "$TMP/out" "memory.persistent_memory = \"disabled\"  # $TMP/mix/a/b/burn.toml:2 [cubecl]"
  has lenient-discovery "$TMP/err" "warning: ignoring $TMP/mix/a/b/cubecl.toml:"
fi
RUN_DIR=$TMP
run lenient-file 0 --lenient "$TMP/bad/typo.toml" &&
  has lenient-file "$TMP/err" "warning: ignoring" &&
  has lenient-file "$TMP/out" "# configuration: none found, using the defaults"

# ---- nothing to find: the defaults (only when no config sits above /tmp) --------------
clean=1
d=$TMP
while [ "$d" != "/" ]; do
  d=$(dirname "$d")
  for n in cubecl.toml CubeCL.toml burn.toml Burn.toml; do
    [ -e "$d/$n" ] && clean=0
  done
done
if [ $clean -eq 1 ]; then
  mkdir -p "$TMP/emptydir"
  RUN_DIR="$TMP/emptydir"
  if run defaults 0; then
    has defaults "$TMP/out" "# configuration: none found, using the defaults"
    has defaults "$TMP/out" 'memory.persistent_memory = "enabled"  # default'
    has defaults "$TMP/out" 'memory.logger.level = "disabled"  # default'
    has defaults "$TMP/out" 'memory.cuda.allocator = "sync"  # default'
  fi
  RUN_DIR=$TMP
else
  echo "note: a config file exists above $TMP; skipping the defaults check"
fi

echo "check-config: $pass passed, $fails failed"
[ $fails -eq 0 ]
