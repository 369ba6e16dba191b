"""growth_model.py - the growth model of bench/floor and bench/objects.

A perfectly packing allocator replays a trace's live bytes (each request
rounded up to the alignment). It holds H bytes of granules and must grow
when live bytes pass H; it then grows to (1 + f) x live bytes, rounded up to
a granule (f = 0: it never holds more than the running peak). Each growth
costs at least three driver calls (cuMemCreate, cuMemMap, cuMemSetAccess),
plus one cuMemAddressReserve in all.
"""
import csv
import functools

GRAN, ALIGN = 2 << 20, 512


@functools.lru_cache(maxsize=64)
def live_curve(path, align=ALIGN):
    """Live bytes after each event of trace `path` (requests rounded up to
    `align`), as (is_allocation, live) pairs; frees of unknown pointers are
    left out. Cached: the model and the bound read each trace once."""
    live, cur, out = {}, 0, []
    with open(path, newline="") as fh:
        for row in csv.DictReader(fh):
            if row["Action"] == "allocate":
                n = -(-int(row["Size"]) // align) * align
                live[row["Pointer"]] = n
                cur += n
                out.append((True, cur))
            elif row["Action"] == "free" and row["Pointer"] in live:
                cur -= live.pop(row["Pointer"])
                out.append((False, cur))
    return tuple(out)


def _granules(nbytes, gran):
    return -(-int(nbytes) // gran) * gran


def model(path, f=0.0, gran=GRAN, align=ALIGN):
    """(driver calls per allocation, peak held / peak live) for trace `path`."""
    held = peak_held = peak_live = events = allocs = 0
    for is_alloc, cur in live_curve(path, align):
        if is_alloc:
            allocs += 1
            if cur > held:
                events += 1
                held = _granules(cur * (1 + f), gran)
            peak_held = max(peak_held, held)
        peak_live = max(peak_live, cur)
    return (3 * events + 1) / max(allocs, 1), peak_held / max(peak_live, 1)


def forced_calls(path, eps, gran=GRAN, align=ALIGN):
    """Driver calls per allocation that ANY allocator must make if it never
    holds more than (1 + eps) x the running peak of live bytes (rounded up to
    a granule): an allocation that lifts live bytes above that bound for the
    previous peak finds too little held memory, whatever was mapped before,
    and costs a growth (three calls). A lower bound, not a model: forced_under
    at those ceilings."""
    peak, ceilings = 0, []
    for is_alloc, cur in live_curve(path, align):
        if is_alloc:
            ceilings.append(_granules(peak * (1 + eps), gran))
            peak = max(peak, cur)
    return forced_under(path, ceilings, gran, align)


def forced_under(path, ceilings, gran=GRAN, align=ALIGN):
    """Driver calls per allocation that ANY allocator must make if, before
    allocation k (counted from 0), it holds no more than ceilings[k] bytes: it
    holds whole granules, so at most ceilings[k] rounded down to a granule,
    and an allocation that lifts live bytes above that finds too little held
    memory, whatever was mapped before, and costs a growth (three calls). A
    lower bound, not a model."""
    forced = allocs = 0
    for is_alloc, cur in live_curve(path, align):
        if not is_alloc:
            continue
        if cur > (int(ceilings[allocs]) // gran) * gran:
            forced += 1
        allocs += 1
    return (3 * forced + 1) / max(allocs, 1)


@functools.lru_cache(maxsize=64)
def pytorch_run(path, torchsim_dir):
    """Run torchsim (sim.py in `torchsim_dir`, in place) on trace `path` in
    both of PyTorch's modes, 80 GiB device. Returns ({mode: running peak of
    reserved bytes before each allocation}, {mode: driver calls per
    allocation}), mode "default" or "expandable". Driver calls: cudaMalloc +
    cudaFree (default); a cuMemCreate and a cuMemMap per page mapped, a
    cuMemSetAccess per mapping, a cuMemUnmap and a cuMemRelease per page
    unmapped, a cuMemAddressReserve per segment opened (expandable). A malloc
    that fails raises torchsim's OOM: run it where the trace fits (80 GiB does
    for every shared trace). Cached: the bound and its checks run torchsim once
    per trace; callers must not modify what it returns."""
    import sys
    if torchsim_dir not in sys.path:
        sys.path.insert(0, torchsim_dir)
    import sim  # torchsim
    names = ("default", "expandable")
    modes = {"default": sim.Allocator(expandable=False), "expandable": sim.Allocator(expandable=True)}
    blocks = {m: {} for m in names}
    peaks = {m: [] for m in names}
    allocs = reserves = 0
    for is_alloc, ptr, size, stream in sim.parse_trace(path):
        if is_alloc:
            allocs += 1
            for m in names:
                peaks[m].append(modes[m].peak_reserved)
            if size == 0:  # allocate(0) never reaches PyTorch's malloc
                continue
            before = len(modes["expandable"].exp_segments)
            for m in names:
                blocks[m][ptr] = modes[m].malloc(size, stream)
            reserves += max(len(modes["expandable"].exp_segments) - before, 0)
        else:
            for m in names:
                b = blocks[m].pop(ptr, None)
                if b is not None:
                    modes[m].free(b)
    d, e, n = modes["default"], modes["expandable"], max(allocs, 1)
    calls = {"default": (d.n_cudamalloc + d.n_cudafree) / n,
             "expandable": (2 * e.n_pages_mapped + e.n_map_calls + 2 * e.n_pages_unmapped
                            + reserves) / n}
    return peaks, calls


def below_pytorch_bound(path, torchsim_dir):
    """Driver calls per allocation that any allocator must make to hold less
    than both of PyTorch's modes on this trace and on each of its prefixes (a
    job that stopped there; an online allocator cannot tell them apart until
    then): before allocation k it holds no more than the lower of PyTorch's
    two running peaks (forced_under). Returns (bound, pytorch_run's calls)."""
    peaks, calls = pytorch_run(path, torchsim_dir)
    ceil = [min(a, b) for a, b in zip(peaks["default"], peaks["expandable"])]
    return forced_under(path, ceil), calls
