#!/usr/bin/env bash
# check.sh PREFIX - verify an installed cubemem (make install PREFIX=..., or
# cmake --install BUILD --prefix PREFIX) is usable by other projects: its
# cubemem.pc points into PREFIX; build tests/install/consumer.c
#   1. with `pkg-config --cflags --libs cubemem` (shared library), and
#   2. with CMake find_package(cubemem) (targets cubemem::cubemem and
#      cubemem::cubemem_static),
#   3. and the tools library the same two ways (pkg-config cubemem-tools,
#      cubemem::cubemem_tools; tests/install/consumer_tools.c),
# then run each binary. Builds happen in a scratch directory; exit 0 = all ok.
set -euo pipefail
PREFIX=${1:?usage: check.sh PREFIX}
PREFIX=$(cd "$PREFIX" && pwd)
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/cm-consumer.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
CC=${CC:-cc}

PC=$(find "$PREFIX" -name cubemem.pc -path '*pkgconfig*' | head -n1)
[[ -n "$PC" ]] || { echo "check.sh: no cubemem.pc under $PREFIX"; exit 1; }
LIBDIR=$(dirname "$(dirname "$PC")")
for f in "$PREFIX/include/cubemem/cubemem.h" "$LIBDIR/libcubemem.so" "$LIBDIR/libcubemem.a" "$LIBDIR/libcubemem-tools.a" \
         "$LIBDIR/cmake/cubemem/cubememConfig.cmake" "$PREFIX/bin/cubemem" \
         "$PREFIX/share/man/man1/cubemem.1" "$PREFIX/share/bash-completion/completions/cubemem" \
         "$PREFIX/bin/torch_snapshot_to_csv.py"; do
  [[ -e "$f" ]] || { echo "check.sh: missing installed file $f"; exit 1; }
done

echo "--- pkg-config consumer"
export PKG_CONFIG_PATH="$(dirname "$PC")${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
# the .pc file must point into PREFIX, wherever the build was configured for
for var in includedir libdir; do
  d=$(pkg-config --variable=$var cubemem)
  [[ "$(cd "$d" 2>/dev/null && pwd -P)" == "$(cd "$PREFIX" && pwd -P)"/* ]] \
    || { echo "check.sh: cubemem.pc's $var is $d, outside $PREFIX"; exit 1; }
done
FLAGS=$(pkg-config --cflags --libs cubemem)
echo "pkg-config --cflags --libs cubemem: $FLAGS"
# shellcheck disable=SC2086
$CC -std=c11 -Wall -Wextra -Werror -o "$WORK/consumer_pc" "$HERE/consumer.c" $FLAGS
LD_LIBRARY_PATH="$LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$WORK/consumer_pc"
# Static linking through pkg-config as well.
# shellcheck disable=SC2086
$CC -std=c11 -o "$WORK/consumer_pc_static" "$HERE/consumer.c" $(pkg-config --cflags cubemem) \
  "$LIBDIR/libcubemem.a" $(pkg-config --libs-only-l --static cubemem | sed 's/-lcubemem//')
"$WORK/consumer_pc_static"
# The tools library (static) through its own pkg-config name.
# shellcheck disable=SC2086
$CC -std=c11 -Wall -Wextra -Werror -o "$WORK/consumer_tools_pc" "$HERE/consumer_tools.c" \
  $(pkg-config --cflags --libs cubemem-tools)
"$WORK/consumer_tools_pc"

echo "--- CMake find_package consumer"
cmake -S "$HERE" -B "$WORK/cmake" -G Ninja -DCMAKE_PREFIX_PATH="$PREFIX" \
  -DCMAKE_BUILD_TYPE=Release >"$WORK/configure.log" 2>&1 || { cat "$WORK/configure.log"; exit 1; }
cmake --build "$WORK/cmake"
"$WORK/cmake/consumer_shared"
"$WORK/cmake/consumer_static"
"$WORK/cmake/consumer_tools"
echo "install check: ok"
