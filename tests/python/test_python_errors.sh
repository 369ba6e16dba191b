#!/usr/bin/env bash
# test_python_errors.sh BUILD_DIR SOURCE_DIR SHARED_DIR - error paths of the
# cubemem Python module (tests/python/test_errors.py): bad snapshots raise
# CubememError and leave no temporary file; malloc(0) clears the plugin's
# last error. Runs from the source tree against the build, in a few seconds.
set -euo pipefail
BUILD=$(cd "${1:?usage: test_python_errors.sh BUILD_DIR SOURCE_DIR SHARED_DIR}" && pwd)
SRC=$(cd "${2:?}" && pwd)
command -v python3 >/dev/null || { echo "SKIP: python3 not found"; exit 77; }
[[ -x $BUILD/cubemem ]] || { echo "SKIP: $BUILD/cubemem not built"; exit 77; }
SO="$BUILD/libcubemem_torch.so"
if [[ ! -f $SO ]] || grep -Eq '__(asan|tsan|ubsan|msan)_' <<<"$(nm -D --undefined-only "$SO")"; then
  SO="" # a sanitizer runtime cannot be loaded into an uninstrumented python
fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/cm-python-errors.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
mkdir "$WORK/tmp"
export CUBEMEM_CLI="$BUILD/cubemem" CUBEMEM_TORCH_LIBRARY="$SO" CM_CUDA_LIBRARY="$BUILD/libfakecuda.so"
export PYTHONDONTWRITEBYTECODE=1 TMPDIR="$WORK/tmp"
PYTHONPATH="$SRC/python" python3 "$SRC/tests/python/test_errors.py" "$SRC" "$WORK"
