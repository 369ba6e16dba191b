#!/usr/bin/env bash
# test_packaging.sh BUILD_DIR SOURCE_DIR [SHARED_DIR]
#
# Packaging as a user meets it:
#  1. add_subdirectory(cubemem) + target_link_libraries(app cubemem::cubemem)
#     (and cubemem::cubemem_static) configures, builds and runs, and neither
#     tests nor fuzz drivers are built (CM_BUILD_TESTS is OFF by default below
#     the top level, and when given explicitly);
#  2. `cmake --install` puts the manual page cubemem(1), the bash completion,
#     the snapshot converter and the tools library (libcubemem-tools.a,
#     cubemem/tools.h, cubemem-tools.pc) in place;
#  3. the manual page documents every option `--help` lists, and the
#     completion offers the commands and options.
set -u
BUILD=${1:?build dir} SRC=${2:?source dir}
SRC=$(cd "$SRC" && pwd) BUILD=$(cd "$BUILD" && pwd)
command -v cmake >/dev/null && command -v ninja >/dev/null || { echo "SKIP: cmake/ninja missing"; exit 77; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail=0 n=0
ok() { echo "ok $*"; n=$((n + 1)); }
bad() { echo "not ok $*"; fail=1; }

# ---- 1. add_subdirectory ----
mkdir -p "$TMP/app"
cat >"$TMP/app/CMakeLists.txt" <<EOC
cmake_minimum_required(VERSION 3.20)
project(app LANGUAGES C)
add_subdirectory("$SRC" cubemem)
add_executable(app main.c)
target_link_libraries(app PRIVATE cubemem::cubemem)
add_executable(app_static main.c)
target_link_libraries(app_static PRIVATE cubemem::cubemem_static)
EOC
cat >"$TMP/app/main.c" <<'EOC'
#include <stdio.h>
#include <cubemem/cubemem.h>
int main(void) {
  cm_storage_t *st;
  if (cm_storage_sim_create(1ull << 30, true, 0, &st) != CM_OK) return 1;
  cm_manager_config_t cfg;
  cm_manager_config_init(&cfg);
  cfg.props = (cm_device_props_t){.max_page_size = 256u << 20, .alignment = 512};
  cm_manager_t *m;
  if (cm_manager_create(st, &cfg, &m, NULL) != CM_OK) return 1;
  cm_handle_t h;
  if (cm_manager_reserve(m, 4096, &h, NULL) != CM_OK) return 1;
  cm_handle_release(h);
  cm_manager_destroy(m);
  puts("subproject ok");
  return 0;
}
EOC
for mode in default explicit; do
  extra=()
  [ $mode = explicit ] && extra=(-DCM_BUILD_TESTS=OFF)
  b="$TMP/build-$mode"
  if ! cmake -S "$TMP/app" -B "$b" -G Ninja -DCMAKE_BUILD_TYPE=Release "${extra[@]}" >"$TMP/cfg.log" 2>&1; then
    bad "$mode: configure: $(tail -5 "$TMP/cfg.log")"; continue
  fi
  targets=$(ninja -C "$b" -t targets all 2>/dev/null | cut -d: -f1)
  if grep -Eq '(^|/)(test_[a-z_]+|fuzz_replay_[a-z_]+|cm_harness|cm_bench_[a-z_]+)$' <<<"$targets"; then
    bad "$mode: tests or fuzzers are built: $(grep -E 'test_|fuzz_|cm_harness|cm_bench' <<<"$targets" | head -3)"
  else
    ok "$mode (CM_BUILD_TESTS off): no test, fuzz or bench targets"
  fi
  if cmake --build "$b" --target app app_static >"$TMP/build.log" 2>&1 && "$b/app" | grep -q 'subproject ok' \
     && "$b/app_static" | grep -q 'subproject ok'; then
    ok "$mode: app links cubemem::cubemem and cubemem::cubemem_static and runs"
  else
    bad "$mode: build or run: $(tail -8 "$TMP/build.log")"
  fi
  [ $mode = default ] || continue
done

# ---- 2. install ----
P="$TMP/prefix"
if cmake --install "$BUILD" --prefix "$P" >"$TMP/install.log" 2>&1; then
  for f in share/man/man1/cubemem.1 share/bash-completion/completions/cubemem bin/torch_snapshot_to_csv.py bin/cubemem \
           include/cubemem/tools.h lib*/libcubemem-tools.a lib*/pkgconfig/cubemem-tools.pc; do
    [ -n "$(compgen -G "$P/$f")" ] && ok "installed $f" || bad "not installed: $f"
  done
  [ -x "$P/bin/torch_snapshot_to_csv.py" ] && ok "the converter is executable" || bad "the converter is not executable"
  # cubemem.pc is right for the prefix given to cmake --install, not the configured one
  pc=$(find "$P" -name cubemem.pc -path '*pkgconfig*' | head -n 1)
  if [ -z "$pc" ]; then
    bad "no cubemem.pc installed"
  elif command -v pkg-config >/dev/null; then
    inc=$(PKG_CONFIG_PATH=$(dirname "$pc") pkg-config --variable=includedir cubemem)
    lib=$(PKG_CONFIG_PATH=$(dirname "$pc") pkg-config --variable=libdir cubemem)
    [ -f "$inc/cubemem/cubemem.h" ] && ok "pkg-config includedir is the --prefix's ($inc)" \
      || bad "pkg-config includedir $inc has no cubemem/cubemem.h ($(grep '^prefix=' "$pc"))"
    [ -e "$lib/libcubemem.so" ] || [ -e "$lib/libcubemem.a" ] && ok "pkg-config libdir is the --prefix's" \
      || bad "pkg-config libdir $lib has no libcubemem"
  else
    grep -q '^prefix=${pcfiledir}/' "$pc" && ok "cubemem.pc is relative to its directory" || bad "cubemem.pc: $(grep '^prefix=' "$pc")"
  fi
  # the pages SEE ALSO names exist (installed here or on the system), and
  # every document the manual page refers to is installed
  see=$(sed -n '/^\.SH SEE ALSO/,/^\.SH/p' "$P/share/man/man1/cubemem.1" | sed -n 's/^\.BR \([^ ]*\) (\([0-9]\)).*/\1.\2/p')
  [ -n "$see" ] && ok "SEE ALSO names pages" || bad "SEE ALSO names no page"
  for pg in $see; do
    sec=${pg##*.}
    if [ -e "$P/share/man/man$sec/$pg" ] || ls /usr/share/man/man"$sec"/"$pg"* >/dev/null 2>&1; then
      ok "SEE ALSO $pg exists"
    else
      bad "SEE ALSO names $pg, which is neither installed nor on the system"
    fi
  done
  docs=$(grep -o '[a-z_-]*\.md' "$P/share/man/man1/cubemem.1" | sort -u)
  [ -n "$docs" ] || bad "the manual page names no document"
  for d in $docs; do
    [ -f "$P/share/doc/cubemem/$d" ] && ok "installed share/doc/cubemem/$d (named by cubemem(1))" \
      || bad "cubemem(1) names $d, not installed in share/doc/cubemem"
  done
else
  bad "cmake --install: $(tail -5 "$TMP/install.log")"
fi

# ---- 3. the manual page and the completion ----
MAN="$SRC/docs/cubemem.1"
for cmd in replay fit plan; do
  for opt in $("$BUILD/cubemem" $cmd --help | grep -oE '^  --[a-z-]+' | tr -d ' '); do
    man_opt=$(sed 's/-/\\\\-/g' <<<"$opt")
    grep -q -- "$man_opt" "$MAN" || { bad "cubemem(1) does not document $cmd $opt"; continue; }
  done
done
[ $fail = 0 ] && ok "cubemem(1) documents every option of replay, fit and plan --help"
if command -v groff >/dev/null 2>&1; then
  groff -man -Tutf8 -ww -z "$MAN" 2>"$TMP/groff.err" && [ ! -s "$TMP/groff.err" ] && ok "groff renders cubemem(1) without warnings" || bad "groff: $(cat "$TMP/groff.err")"
fi
comp() { # words...: the completions of the last word
  bash -c 'source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _cubemem; printf "%s\n" "${COMPREPLY[@]}"' _ "$SRC/tools/cubemem-completion.bash" "$@"
}
[ "$(comp cubemem rep)" = "replay" ] && ok "completion: commands" || bad "completion of 'rep': $(comp cubemem rep)"
comp cubemem replay --no- | grep -qx -- '--no-config' && ok "completion: replay options" || bad "completion of --no-: $(comp cubemem replay --no-)"
comp cubemem replay --pools sub | grep -qx subslices && ok "completion: presets" || bad "completion of presets"
comp cubemem fit --gr | grep -qx -- '--grid' && ok "completion: fit options" || bad "completion of fit --gr"
comp cubemem replay --device vu | grep -qx vulkan && ok "completion: --device offers vulkan" || bad "completion of --device vu: $(comp cubemem replay --device vu)"
for opt in --repeat --runs --confirm --snapshot-device; do
  touch "$TMP/1file"
  (cd "$TMP" && comp cubemem fit "$opt" 1) | grep -q file && bad "completion: $opt offers file names" \
    || ok "completion: no file names for $opt"
done
[ "$(comp cubemem help rep)" = "replay" ] && ok "completion: help COMMAND" || bad "completion of help rep: $(comp cubemem help rep)"

[ $fail = 0 ] && echo "test_packaging: $n passed"
exit $fail
