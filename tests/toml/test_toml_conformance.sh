#!/usr/bin/env bash
# test_toml_conformance.sh BUILD_DIR SOURCE_DIR SHARED_DIR - every toml-test
# case of ../shared/toml-test through `cubemem toml2json` (skips, exit 77,
# when the cases are absent).
set -euo pipefail
build=$1 src=$2 shared=$3
exec bash "$src/tests/toml/run_toml_test.sh" "$build/cubemem toml2json" "$shared/toml-test"
