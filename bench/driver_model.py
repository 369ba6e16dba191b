"""driver_model.py - the modelled driver time of PyTorch's caching allocator,
from torchsim's counts, with the per-call costs `cubemem replay --json`
reports (driver_time_model.us_per_call), so both sides use one cost set.

    torch_driver_ns(counts, us) -> ns

counts: torchsim's JSON for one mode (../shared/tools/torchsim/sim.py TRACE
[--expandable]). Expandable segments: each mapped page costs a cuMemCreate
and a cuMemMap, each map call a cuMemSetAccess, each unmapped page a
cuMemUnmap and a cuMemRelease (torchsim does not count the one or two
address reservations of a run). Default mode: cudaMalloc_calls plain
allocations and cudaFree_calls plain frees. A page is a physical chunk
(2 MiB in the small pool, 20 MiB in the large one): the cost is per chunk,
not per byte, as in cubemem's model.
"""
import json
import os
import subprocess
import sys


def torchsim(trace, torchsim_dir, expandable):
    """torchsim's counts for one trace and mode (80 GiB device), as a dict."""
    cmd = [sys.executable, os.path.join(torchsim_dir, "sim.py"), trace]
    if expandable:
        cmd.append("--expandable")
    return json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)


def torch_driver_ns(counts, us):
    """The modelled driver time in ns of one torchsim run under costs `us`
    (microseconds per call by kind: create, map, set_access, unmap, release,
    alloc, free)."""
    if counts.get("mode") == "expandable_segments":
        t = (counts["pages_mapped"] * (us["create"] + us["map"]) + counts["map_calls"] * us["set_access"]
             + counts["pages_unmapped"] * (us["unmap"] + us["release"]))
    else:
        t = counts["cudaMalloc_calls"] * us["alloc"] + counts["cudaFree_calls"] * us["free"]
    return round(t * 1000)
