#!/usr/bin/env bash
# test_toml_differential.sh BUILD_DIR SOURCE_DIR SHARED_DIR - differential
# test of `cubemem toml2json` against Python's tomllib over generated valid
# and invalid documents (tests/toml/toml_differential.py; CM_TOML_DIFF_DOCS,
# default 3000, and CM_TOML_DIFF_SEED change the run). Skips (exit 77) when
# python3 or its tomllib (python3 >= 3.11) is missing.
set -euo pipefail
build=$1 src=$2
if ! command -v python3 >/dev/null; then
  echo "skip: python3 not found (tools/install-deps.sh installs it)"
  exit 77
fi
if ! python3 -c 'import tomllib' 2>/dev/null; then
  echo "skip: python3 $(python3 -c 'import sys; print(sys.version.split()[0])') has no tomllib (3.11 or newer needed)"
  exit 77
fi
# Under a sanitizer each document costs a sanitized process start: fewer of
# them there (the release build runs the full set).
if [[ -z "${CM_TOML_DIFF_DOCS:-}" ]] && grep -aq -e __asan_init -e __tsan_init "$build/cubemem"; then
  export CM_TOML_DIFF_DOCS=1000
fi
exec python3 "$src/tests/toml/toml_differential.py" "$build/cubemem" --keep "$build/toml-differential"
