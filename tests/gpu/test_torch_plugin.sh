#!/usr/bin/env bash
# test_torch_plugin.sh BUILD_DIR SOURCE_DIR SHARED_DIR - checks of the PyTorch /
# CuPy plugin that need no GPU (run by ctest):
#   1. libcubemem_torch.so exports exactly the cubemem_torch_* functions, among
#      them the two PyTorch's CUDAPluggableAllocator loads, and no cm_ symbol;
#   2. loaded with ctypes (as plugins/cupy_cubemem.py loads it) with a driver
#      path that does not exist, try_malloc returns NULL and says why, free(NULL)
#      and the usage getters are harmless; pointed at the strict fake driver
#      afterwards, the next call opens the device (the failure was not
#      permanent), and CuPy's flow (allocate, free, report) runs without a
#      driver violation.
# (The throwing PyTorch entry points are tested by tests/plugin/test_torch_oom.)
# Exit 77 (skip) when the plugin was not built or python3 is missing.
set -euo pipefail
BUILD=${1:?usage: test_torch_plugin.sh BUILD_DIR SOURCE_DIR SHARED_DIR}
SRC=${2:?}
SO="$BUILD/libcubemem_torch.so"
[[ -f "$SO" ]] || { echo "SKIP: $SO was not built"; exit 77; }

echo "--- exported symbols"
SYMS=$(nm -D --defined-only "$SO" | awk 'NF >= 3 && ($2 == "T" || $2 == "W" || $2 == "D" || $2 == "B") { n = $3; sub(/@.*/, "", n); print n }' |
       grep -Ev '^(_init|_fini|_edata|_end|__bss_start)$' | sort)
echo "$SYMS"
EXPECTED=$(printf '%s\n' cubemem_torch_empty_cache cubemem_torch_enable_peer_access \
  cubemem_torch_free cubemem_torch_in_use cubemem_torch_last_error cubemem_torch_malloc \
  cubemem_torch_peak_reserved cubemem_torch_record_stream cubemem_torch_report \
  cubemem_torch_reserved cubemem_torch_retire_stream cubemem_torch_stats cubemem_torch_try_free \
  cubemem_torch_try_malloc | sort)
if [[ "$SYMS" != "$EXPECTED" ]]; then
  echo "FAIL: exported symbols differ from the expected set"
  diff <(echo "$EXPECTED") <(echo "$SYMS") || true
  exit 1
fi

command -v python3 >/dev/null || { echo "SKIP (ctypes part): python3 not found"; exit 0; }
# (nm into a variable: grep -q closing the pipe early would fail the pipeline under pipefail)
UNDEF=$(nm -D --undefined-only "$SO")
if grep -Eq '__(asan|tsan|ubsan|msan)_' <<<"$UNDEF"; then
  # A sanitizer runtime cannot be loaded into an uninstrumented python.
  echo "note: sanitizer build; the ctypes part runs only in plain builds"
  exit 0
fi
echo "--- ctypes without a driver"
FAKE="$BUILD/libfakecuda.so"
CM_CUDA_LIBRARY=/nonexistent/libcuda.so.1 FAKECUDA_CAPACITY=1G PYTHONPATH="$SRC/plugins" \
  python3 - "$SO" "$FAKE" <<'PY'
import ctypes, os, sys
import cupy_cubemem as cc   # importable without CuPy installed
lib = cc.load(sys.argv[1])
p = lib.cubemem_torch_try_malloc(1 << 20, 0, None)
assert p is None, p
err = lib.cubemem_torch_last_error().decode()
print("last error:", err)
assert "cannot open CUDA device 0" in err, err
assert "/nonexistent/libcuda.so.1" in err, err
assert lib.cubemem_torch_try_malloc(0, 0, None) is None
assert lib.cubemem_torch_try_malloc(-5, 0, None) is None
assert lib.cubemem_torch_try_malloc(100, 999, None) is None   # device out of range
lib.cubemem_torch_try_free(None, 0, 0, None)
assert cc.reserved(0) == 0 and cc.peak_reserved(0) == 0 and cc.in_use(0) == 0
cc.empty_cache()
assert cc.report() == ""
if os.path.exists(sys.argv[2]):
    os.environ["CM_CUDA_LIBRARY"] = sys.argv[2]   # the next call tries again
    ptrs = [lib.cubemem_torch_try_malloc(1000 * (i + 1), 0, None) for i in range(32)]
    assert all(ptrs), lib.cubemem_torch_last_error()
    assert cc.in_use(0) > 0 and cc.reserved(0) >= cc.in_use(0)
    assert "cuda:0 (Fake CUDA GPU 0)" in cc.report()
    for i, q in enumerate(ptrs):
        lib.cubemem_torch_try_free(q, 1000 * (i + 1), 0, None)
    assert cc.in_use(0) == 0
    cc.empty_cache()
    fake = ctypes.CDLL(sys.argv[2])
    fake.fakecuda_violations.restype = ctypes.c_uint64
    assert fake.fakecuda_violations() == 0
    print("retry on the fake driver: ok")
print("ok")
PY
echo "plugin checks: ok"
