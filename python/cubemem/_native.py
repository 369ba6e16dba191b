"""ctypes access to libcubemem_torch.so (plugins/torch_cubemem.h).

Only the non-throwing C entry points are called from Python; the throwing
ones (cubemem_torch_malloc/free) are for PyTorch's C++ side.
"""

import ctypes
import threading

from ._paths import CubememError, library_path

_lock = threading.Lock()
_lib = None

_STATS_FIELDS = ("in_use", "reserved", "peak_reserved", "cached", "padding", "allocs", "frees",
                 "failed", "retries", "live", "streams", "storage_allocs", "storage_time_ns",
                 "device_free", "device_total", "peak_in_use")


class _Stats(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in _STATS_FIELDS]


def lib(path=None):
    """Load libcubemem_torch.so once (path, else library_path()) and declare
    its functions; returns the ctypes library."""
    global _lib
    with _lock:
        if _lib is not None:
            return _lib
        try:
            l = ctypes.CDLL(path or library_path())
        except OSError as e:
            raise CubememError(f"cannot load libcubemem_torch.so: {e} "
                               "(set CUBEMEM_TORCH_LIBRARY or build the plugins)") from e
        vp, sz, i = ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int
        l.cubemem_torch_try_malloc.restype = vp
        l.cubemem_torch_try_malloc.argtypes = [sz, i, vp]
        l.cubemem_torch_try_free.restype = None
        l.cubemem_torch_try_free.argtypes = [vp, sz, i, vp]
        l.cubemem_torch_stats.restype = i
        l.cubemem_torch_stats.argtypes = [i, ctypes.POINTER(_Stats)]
        l.cubemem_torch_report.restype = ctypes.c_size_t
        l.cubemem_torch_report.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        l.cubemem_torch_empty_cache.restype = None
        l.cubemem_torch_empty_cache.argtypes = []
        l.cubemem_torch_record_stream.restype = i
        l.cubemem_torch_record_stream.argtypes = [vp, vp]
        l.cubemem_torch_retire_stream.restype = None
        l.cubemem_torch_retire_stream.argtypes = [i, vp]
        l.cubemem_torch_enable_peer_access.restype = i
        l.cubemem_torch_enable_peer_access.argtypes = [i, i]
        l.cubemem_torch_last_error.restype = ctypes.c_char_p
        l.cubemem_torch_last_error.argtypes = []
        _lib = l
        return l


def last_error():
    """The plugin's latest error message ("" if none)."""
    return (lib().cubemem_torch_last_error() or b"").decode(errors="replace")


def stats(device=0):
    """cubemem's figures for cuda:`device` as a dict (all zeros when cubemem
    has not used the device): in_use, reserved, peak_reserved, cached,
    padding, allocs, frees, failed, retries, live, streams, storage_allocs,
    storage_time_ns, device_free, device_total, peak_in_use (bytes or
    counts)."""
    s = _Stats()
    if lib().cubemem_torch_stats(int(device), ctypes.byref(s)) < 0:
        raise CubememError(f"cubemem_torch_stats({device}) failed")
    return {name: int(getattr(s, name)) for name in _STATS_FIELDS}


def report():
    """cubemem's usage report for every device it serves, as text."""
    l = lib()
    need = l.cubemem_torch_report(None, 0)
    buf = ctypes.create_string_buffer(need + 1)
    l.cubemem_torch_report(buf, need + 1)
    return buf.value.decode(errors="replace")


def empty_cache():
    """Give every cached page of every device back to the driver."""
    lib().cubemem_torch_empty_cache()


def record_stream(ptr, stream):
    """`ptr` (an int device pointer from cubemem) is also used by work on
    `stream` (an int CUstream): its memory is reused only once that work is
    done. What Tensor.record_stream means; see cubemem.torch.record_stream."""
    rc = lib().cubemem_torch_record_stream(ptr, stream)
    if rc != 0:
        raise CubememError(last_error())


def retire_stream(stream, device=0):
    """Call before destroying `stream` when the driver has no cuStreamGetId
    (CUDA < 12): cubemem stops reusing its memory for the stream handle."""
    lib().cubemem_torch_retire_stream(int(device), stream)


def enable_peer_access(device, peer):
    """Let cuda:`peer` read and write cubemem's virtual-memory mappings on
    cuda:`device` (existing and future ones)."""
    rc = lib().cubemem_torch_enable_peer_access(int(device), int(peer))
    if rc != 0:
        raise CubememError(last_error())


def try_malloc(size, device=0, stream=0):
    """Allocate through the plugin (NULL-returning entry point): an int
    device pointer; 0 for size <= 0. Raises CubememError with the plugin's
    message. For tests
    and non-PyTorch users; PyTorch calls the C++ entry points itself."""
    p = lib().cubemem_torch_try_malloc(int(size), int(device), stream or None)
    if not p:
        if int(size) <= 0:
            return 0  # nothing to allocate: no pointer, no error (as the C entry point)
        raise CubememError(last_error() or "cubemem could not allocate (no reason given)")
    return p


def free(ptr, device=0, stream=0):
    """Give back a pointer from try_malloc."""
    lib().cubemem_torch_try_free(ptr, 0, int(device), stream or None)
