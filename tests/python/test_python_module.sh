#!/usr/bin/env bash
# test_python_module.sh BUILD_DIR SOURCE_DIR SHARED_DIR - the cubemem Python
# module without a GPU (PyTorch is not needed; its switch is not tested here):
#   1. from the source tree: replay / plan / fit(when the CLI has it) return
#      the CLI's objects; a snapshot replays; stats, report, empty_cache and
#      record_stream work through libcubemem_torch.so on the strict fake
#      driver; a log written with CUBEMEM_LOG goes through replay -> plan ->
#      replay with the plan (the record/replay/plan loop of docs/cuda.md);
#   2. installed by `cmake --install` (make install), the module finds the
#      installed tool and plugin by itself;
#   3. `pip install` from the source tree, offline, into a fresh virtual
#      environment (when python3 has setuptools and wheel).
set -euo pipefail
BUILD=$(cd "${1:?usage: test_python_module.sh BUILD_DIR SOURCE_DIR SHARED_DIR}" && pwd)
SRC=$(cd "${2:?}" && pwd)
SHARED=${3:-$SRC/../shared}
command -v python3 >/dev/null || { echo "SKIP: python3 not found"; exit 77; }
[[ -x $BUILD/cubemem ]] || { echo "SKIP: $BUILD/cubemem not built"; exit 77; }
SO="$BUILD/libcubemem_torch.so"
if [[ -f $SO ]] && grep -Eq '__(asan|tsan|ubsan|msan)_' <<<"$(nm -D --undefined-only "$SO")"; then
  SO="" # a sanitizer runtime cannot be loaded into an uninstrumented python
fi
export CUBEMEM_CLI="$BUILD/cubemem" CUBEMEM_TORCH_LIBRARY="$SO" CM_CUDA_LIBRARY="$BUILD/libfakecuda.so"
export FAKECUDA_CAPACITY=2G FAKECUDA_DEVICES=2 PYTHONDONTWRITEBYTECODE=1
WORK=$(mktemp -d "${TMPDIR:-/tmp}/cm-python.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
echo "--- from the source tree"
PYTHONPATH="$SRC/python" python3 "$SRC/tests/python/test_cubemem.py" "$SRC" "$SHARED" "$WORK"

echo "--- make install: the module found next to the installed tool and plugin"
if command -v cmake >/dev/null; then
  cmake --install "$BUILD" --prefix "$WORK/prefix" >"$WORK/install.log" 2>&1 ||
    { cat "$WORK/install.log"; echo "FAIL: cmake --install"; exit 1; }
  (cd "$WORK" && env -u CUBEMEM_CLI -u CUBEMEM_TORCH_LIBRARY CM_SRC="$SRC" \
     PYTHONPATH="$WORK/prefix/share/cubemem/python" python3 - <<'PY'
import os, cubemem
prefix = os.path.join(os.getcwd(), "prefix")
assert cubemem.__file__.startswith(prefix), cubemem.__file__
assert cubemem.cli_path() == os.path.join(prefix, "bin", "cubemem"), cubemem.cli_path()
assert cubemem.library_path().startswith(prefix), cubemem.library_path()
r = cubemem.replay(os.path.join(os.environ["CM_SRC"], "examples/torch-cpu-gpt-train.csv"))
assert r[0]["failed_allocs"] == 0 and r[0]["peak_reserved_bytes"] > 0
print("installed module:", cubemem.__file__, "->", cubemem.cli_path(), "replay ok")
PY
  ) || { echo "FAIL: the installed module"; exit 1; }
fi

echo "--- pip install from the source tree, offline"
# the README gives the commands run below
for cmd in "python3 -m venv --system-site-packages .venv" \
           ".venv/bin/pip install --no-build-isolation --no-index ./python" "export CUBEMEM_CLI="; do
  grep -qF -- "$cmd" "$SRC/README.md" || { echo "FAIL: README.md lacks '$cmd'"; exit 1; }
done
if python3 -c 'import setuptools, wheel, venv, ensurepip' 2>/dev/null; then
  python3 -m venv --system-site-packages "$WORK/venv" >/dev/null
  cp -r "$SRC/python" "$WORK/pysrc" # build in a copy: the source tree stays clean
  mkdir -p "$WORK/tools" && cp "$SRC/tools/torch_snapshot_to_csv.py" "$WORK/tools/"
  "$WORK/venv/bin/python" -m pip install -q --no-build-isolation --no-index "$WORK/pysrc" \
    >"$WORK/pip.log" 2>&1 || { cat "$WORK/pip.log"; echo "FAIL: pip install"; exit 1; }
  (cd "$WORK" && CM_SRC="$SRC" "$WORK/venv/bin/python" - <<'PY'
import os, cubemem
assert "site-packages" in cubemem.__file__, cubemem.__file__
r = cubemem.replay(os.path.join(os.environ["CM_SRC"], "examples/torch-cpu-gpt-train.csv"))
assert r[0]["failed_allocs"] == 0 and r[0]["peak_reserved_bytes"] > 0
assert os.path.exists(os.path.join(os.path.dirname(cubemem.__file__), "_snapshot_tool.py"))
print("pip-installed module:", cubemem.__file__, "replay ok")
PY
  ) || { echo "FAIL: the pip-installed module"; exit 1; }
else
  echo "note: python3 lacks setuptools/wheel/venv here, so pip cannot build offline;"
  echo "      the make-install check above covers installation (docs/cuda.md)"
fi
echo "python module: ok"
