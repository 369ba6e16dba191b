"""cubemem as PyTorch's CUDA allocator, in one call.

    import cubemem
    cubemem.torch.enable()      # before the first CUDA allocation

enable() loads libcubemem_torch.so into torch.cuda.memory.CUDAPluggableAllocator
and makes it the current allocator. PyTorch's pluggable-allocator interface
reaches cubemem only for malloc and free, so enable() also points the usual
torch.cuda functions at cubemem (patch=True):

  torch.cuda.empty_cache()           -> cubemem.empty_cache() (PyTorch would
                                        call nothing: no reset hook is set)
  torch.cuda.memory_stats(),
  memory_allocated(), memory_reserved(),
  max_memory_allocated(), max_memory_reserved(),
  memory_summary()                   -> cubemem's figures, in PyTorch's keys
                                        (PyTorch raises for a pluggable allocator)
  Tensor.record_stream(stream)       -> cubemem.torch.record_stream(t, stream)
                                        (PyTorch calls no hook from Python)

Everything here needs PyTorch; the rest of the cubemem module does not.
"""

from . import _native, _paths

_enabled = False


# The statistics torch.cuda.memory_stats() returns and memory_summary() /
# max_memory_allocated() read: every (metric, pool, stat) combination below.
_POOL_METRICS = ("allocated_bytes", "active_bytes", "requested_bytes", "reserved_bytes",
                 "inactive_split_bytes", "allocation", "active", "segment", "inactive_split")
_POOLS = ("all", "large_pool", "small_pool")
_STATS = ("current", "peak", "allocated", "freed")
_PLAIN_METRICS = ("oversize_allocations", "oversize_segments")


def memory_stats(device=None):
    """cubemem's figures for a device in the keys of torch.cuda.memory_stats():
    every key PyTorch's memory_summary(), max_memory_allocated() and
    max_memory_reserved() read ("allocated_bytes.all.peak", ...). cubemem
    fills the ".all." figures it keeps (allocated, active and requested
    bytes are the requested bytes of live pointers; reserved bytes what it
    holds from the driver; inactive_split_bytes what it caches; allocation
    and active count live pointers, allocs and frees) and num_alloc_retries,
    num_ooms, num_device_alloc; it has no small/large pools, segments or
    oversize counts, so those keys are 0 (max_split_size: -1, no limit)."""
    s = _native.stats(_device_index(device))
    out = {f"{m}.{p}.{k}": 0 for m in _POOL_METRICS for p in _POOLS for k in _STATS}
    out.update({f"{m}.{k}": 0 for m in _PLAIN_METRICS for k in _STATS})
    for m in ("allocated_bytes", "active_bytes", "requested_bytes"):
        out[f"{m}.all.current"] = s["in_use"]
        out[f"{m}.all.peak"] = s["peak_in_use"]
    out["reserved_bytes.all.current"] = s["reserved"]
    out["reserved_bytes.all.peak"] = s["peak_reserved"]
    out["inactive_split_bytes.all.current"] = s["cached"]
    for m in ("allocation", "active"):
        out[f"{m}.all.current"] = s["live"]
        out[f"{m}.all.allocated"] = s["allocs"]
        out[f"{m}.all.freed"] = s["frees"]
    out.update({"num_alloc_retries": s["retries"], "num_ooms": s["failed"],
                "num_device_alloc": s["storage_allocs"], "num_device_free": 0,
                "num_sync_all_streams": 0, "max_split_size": -1})
    return out


def _device_index(device):
    if device is None:
        try:
            import torch as _t
            return _t.cuda.current_device()
        except Exception:  # no torch / no CUDA: device 0
            return 0
    if isinstance(device, int):
        return device
    idx = getattr(device, "index", None)
    if idx is not None:
        return idx
    text = str(device)
    return int(text.split(":")[1]) if ":" in text else 0


def record_stream(tensor, stream):
    """Tensor.record_stream for cubemem: the tensor's memory is not reused
    before the work queued on `stream` so far has completed."""
    ptr = tensor.untyped_storage().data_ptr() if hasattr(tensor, "untyped_storage") else tensor.data_ptr()
    _native.record_stream(ptr, getattr(stream, "cuda_stream", stream))


def enable(library=None, patch=True):
    """Switch PyTorch to cubemem. Call before the first CUDA allocation of the
    process (PyTorch refuses to swap an allocator in use). Returns the
    CUDAPluggableAllocator. Raises CubememError when PyTorch or CUDA is
    missing, with the reason."""
    global _enabled
    try:
        import torch as _t
    except ImportError as e:
        raise _paths.CubememError(f"cubemem.torch.enable() needs PyTorch: {e}") from e
    if not _t.cuda.is_available():
        raise _paths.CubememError("cubemem.torch.enable(): PyTorch sees no CUDA device")
    path = library or _paths.library_path()
    alloc = _t.cuda.memory.CUDAPluggableAllocator(path, "cubemem_torch_malloc", "cubemem_torch_free")
    _t.cuda.memory.change_current_allocator(alloc)
    _native.lib(path)
    if patch and not _enabled:
        _patch(_t)
    _enabled = True
    return alloc


def _patch(t):
    cuda = t.cuda

    def empty_cache():
        _native.empty_cache()

    def memory_allocated(device=None):
        return memory_stats(device)["allocated_bytes.all.current"]

    def memory_reserved(device=None):
        return memory_stats(device)["reserved_bytes.all.current"]

    def max_memory_reserved(device=None):
        return memory_stats(device)["reserved_bytes.all.peak"]

    def max_memory_allocated(device=None):
        return memory_stats(device)["allocated_bytes.all.peak"]

    def memory_summary(device=None, abbreviated=False):
        return _native.report()

    for name, fn in (("empty_cache", empty_cache), ("memory_stats", memory_stats),
                     ("memory_allocated", memory_allocated), ("memory_reserved", memory_reserved),
                     ("max_memory_reserved", max_memory_reserved),
                     ("max_memory_allocated", max_memory_allocated),
                     ("memory_summary", memory_summary)):
        setattr(cuda, name, fn)
        if hasattr(cuda, "memory") and hasattr(cuda.memory, name):
            setattr(cuda.memory, name, fn)
    orig = t.Tensor.record_stream

    def tensor_record_stream(self, stream):
        if self.is_cuda:
            record_stream(self, stream)
        else:
            orig(self, stream)

    t.Tensor.record_stream = tensor_record_stream
