"""cupy_check.py - CuPy through cupy_cubemem on a real GPU (tests/gpu/run.sh).

Allocates on the default stream and on streams that are created and
destroyed in a loop (the driver may hand a new stream a destroyed one's
handle: cubemem must not give it memory the old stream's work still uses),
checks every result against NumPy, and prints cubemem's figures.
"""
import numpy as np
import cupy
import cupy_cubemem

cupy_cubemem.install()
a = cupy.arange(1 << 20, dtype=cupy.float32)
assert float(a.sum()) == float(np.arange(1 << 20, dtype=np.float32).sum())
handles = set()
for i in range(50):
    s = cupy.cuda.Stream(non_blocking=True)
    handles.add(s.ptr)
    with s:
        x = cupy.full((1 << 18,), i, dtype=cupy.float32)
        y = (x * 2).sum()
    s.synchronize()
    assert float(y) == 2.0 * i * (1 << 18), (i, float(y))
    del x, y, s
print(f"50 streams, {len(handles)} distinct handles; in use {cupy_cubemem.in_use(0):,} B, "
      f"reserved {cupy_cubemem.reserved(0):,} B, peak {cupy_cubemem.peak_reserved(0):,} B")
cupy_cubemem.empty_cache()
print(cupy_cubemem.report().splitlines()[1] if cupy_cubemem.report() else "(no report)")
cupy_cubemem.uninstall()
print("cupy: ok")
