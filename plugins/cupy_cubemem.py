"""cupy_cubemem - use cubemem as CuPy's device memory allocator.

    import cupy
    import cupy_cubemem
    cupy_cubemem.install("/path/to/build/libcubemem_torch.so")
    x = cupy.arange(10**6)          # memory now comes from cubemem
    print(cupy_cubemem.report())

The allocation functions live in libcubemem_torch.so (the same library that
serves PyTorch); this module loads it with ctypes and hands CuPy an allocator
function through cupy.cuda.set_allocator. Each block is wrapped in
cupy.cuda.UnownedMemory whose owner object gives the block back to cubemem
when CuPy drops its last reference. Blocks are allocated and freed on CuPy's
current stream, so cubemem keeps one memory manager per stream. CuPy destroys
streams and the driver may give a new stream the same handle: cubemem tells
them apart by the driver's stream id (cuStreamGetId) and never hands a new
stream memory that a destroyed stream's queued work may still use.

Settings are read from the environment when a device is first used:
CUBEMEM_CUDA_ALLOCATOR (sync | async), CUBEMEM_POOLS (layout text),
CM_CUDA_LIBRARY (driver library path).
"""

import ctypes
import os

__all__ = ["load", "install", "uninstall", "report", "reserved", "peak_reserved",
           "in_use", "empty_cache"]

_lib = None


def _default_path():
    env = os.environ.get("CUBEMEM_TORCH_LIBRARY")
    if env:
        return env
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "libcubemem_torch.so")


def load(path=None):
    """Load libcubemem_torch.so (path, else $CUBEMEM_TORCH_LIBRARY, else next
    to this file) and declare its functions. Returns the ctypes library."""
    global _lib
    if _lib is not None:
        return _lib
    lib = ctypes.CDLL(path or _default_path())
    # The non-throwing entry points: a C++ exception cannot cross ctypes.
    lib.cubemem_torch_try_malloc.restype = ctypes.c_void_p
    lib.cubemem_torch_try_malloc.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
    lib.cubemem_torch_try_free.restype = None
    lib.cubemem_torch_try_free.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int,
                                           ctypes.c_void_p]
    lib.cubemem_torch_retire_stream.restype = None
    lib.cubemem_torch_retire_stream.argtypes = [ctypes.c_int, ctypes.c_void_p]
    lib.cubemem_torch_report.restype = ctypes.c_size_t
    lib.cubemem_torch_report.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    for name in ("cubemem_torch_reserved", "cubemem_torch_peak_reserved",
                 "cubemem_torch_in_use"):
        fn = getattr(lib, name)
        fn.restype = ctypes.c_ulonglong
        fn.argtypes = [ctypes.c_int]
    lib.cubemem_torch_empty_cache.restype = None
    lib.cubemem_torch_empty_cache.argtypes = []
    lib.cubemem_torch_last_error.restype = ctypes.c_char_p
    lib.cubemem_torch_last_error.argtypes = []
    _lib = lib
    return lib


class _Block:
    """Owner of one cubemem block; frees it when garbage collected."""

    __slots__ = ("ptr", "size", "device", "stream", "__weakref__")

    def __init__(self, ptr, size, device, stream):
        self.ptr, self.size, self.device, self.stream = ptr, size, device, stream

    def __del__(self):
        lib = _lib
        if lib is not None and self.ptr:
            lib.cubemem_torch_try_free(self.ptr, self.size, self.device, self.stream)
            self.ptr = 0


def _malloc(size):
    import cupy

    lib = _lib
    device = cupy.cuda.Device().id
    if size == 0:
        mem = cupy.cuda.UnownedMemory(0, 0, None, device)
        return cupy.cuda.MemoryPointer(mem, 0)
    stream = cupy.cuda.get_current_stream().ptr
    ptr = lib.cubemem_torch_try_malloc(size, device, stream)
    if not ptr:
        msg = lib.cubemem_torch_last_error().decode(errors="replace")
        raise cupy.cuda.memory.OutOfMemoryError(size, in_use(device)) from RuntimeError(msg)
    block = _Block(ptr, size, device, stream)
    mem = cupy.cuda.UnownedMemory(ptr, size, block, device)
    return cupy.cuda.MemoryPointer(mem, 0)


def install(path=None):
    """Route every later CuPy allocation through cubemem."""
    import cupy

    load(path)
    cupy.cuda.set_allocator(_malloc)


def uninstall():
    """Give CuPy its default memory pool back (blocks already handed out stay
    valid and are freed to cubemem when dropped)."""
    import cupy

    cupy.cuda.set_allocator(cupy.get_default_memory_pool().malloc)


def report():
    """cubemem's usage report for every device it serves, as text."""
    lib = load()
    need = lib.cubemem_torch_report(None, 0)
    buf = ctypes.create_string_buffer(need + 1)
    lib.cubemem_torch_report(buf, need + 1)
    return buf.value.decode(errors="replace")


def reserved(device=0):
    """Bytes cubemem holds from the device now."""
    return load().cubemem_torch_reserved(device)


def peak_reserved(device=0):
    """High-water mark of reserved()."""
    return load().cubemem_torch_peak_reserved(device)


def in_use(device=0):
    """Bytes of live blocks."""
    return load().cubemem_torch_in_use(device)


def empty_cache():
    """Return cached memory of every device to the driver."""
    load().cubemem_torch_empty_cache()
