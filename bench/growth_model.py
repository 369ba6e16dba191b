"""growth_model.py - the growth model of bench/floor and bench/objects.

A perfectly packing allocator replays a trace's live bytes (each request
rounded up to the alignment). It holds H bytes of granules and must grow
when live bytes pass H; it then grows to (1 + f) x live bytes, rounded up to
a granule (f = 0: it never holds more than the running peak). Each growth
costs at least three driver calls (cuMemCreate, cuMemMap, cuMemSetAccess),
plus one cuMemAddressReserve in all.
"""
import csv

GRAN, ALIGN = 2 << 20, 512


def model(path, f=0.0, gran=GRAN, align=ALIGN):
    """(driver calls per allocation, peak held / peak live) for trace `path`."""
    live, cur, held, peak_held, peak_live, events, allocs = {}, 0, 0, 0, 0, 0, 0
    with open(path, newline="") as fh:
        for row in csv.DictReader(fh):
            if row["Action"] == "allocate":
                allocs += 1
                n = -(-int(row["Size"]) // align) * align
                live[row["Pointer"]] = n
                cur += n
                if cur > held:
                    events += 1
                    held = -(-int(cur * (1 + f)) // gran) * gran
                peak_held = max(peak_held, held)
            elif row["Action"] == "free" and row["Pointer"] in live:
                cur -= live.pop(row["Pointer"])
            peak_live = max(peak_live, cur)
    return (3 * events + 1) / max(allocs, 1), peak_held / max(peak_live, 1)
