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
import math

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
    and costs a growth (three calls). A lower bound, not a model."""
    peak = forced = allocs = 0
    for is_alloc, cur in live_curve(path, align):
        if not is_alloc:
            continue
        allocs += 1
        if cur > peak:
            if cur > _granules(peak * (1 + eps), gran):
                forced += 1
            peak = cur
    return (3 * forced + 1) / max(allocs, 1)


def eps_for(path, target=0.25, gran=GRAN, align=ALIGN):
    """The smallest eps (to 1e-4) at which forced_calls drops to `target`;
    math.inf when even holding 1024 x the running peak does not."""
    lo, hi = 0.0, 1.0
    if forced_calls(path, lo, gran, align) <= target:
        return 0.0
    while forced_calls(path, hi, gran, align) > target:
        lo, hi = hi, hi * 2
        if hi > 1024:
            return math.inf
    while hi - lo > 1e-4:
        mid = (lo + hi) / 2
        if forced_calls(path, mid, gran, align) <= target:
            hi = mid
        else:
            lo = mid
    return hi
