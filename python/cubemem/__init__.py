"""cubemem for Python.

    import cubemem
    cubemem.torch.enable()                 # PyTorch allocates through cubemem
    ...
    print(cubemem.stats())                 # {'in_use': ..., 'reserved': ..., ...}

    runs = cubemem.replay("run.csv", pools=["default", "subslices"])
    runs[0]["peak_reserved_bytes"]         # the objects `cubemem replay --json` prints
    cubemem.replay("snapshot.pickle", html="report.html")[0]["torch_reserved_bytes"]
    [(f["layout"], f["smallest_gpu"]) for f in cubemem.fit("snapshot.pickle")]
    runs[0]["driver_time_model"]["total_ns"]  # modelled time in the driver (a100 costs)
    layout = cubemem.plan("run.csv")["layout"]
    cubemem.replay("run.csv", pools=[layout])

Pieces:
  - replay / fit / plan run the cubemem command-line tool (found through
    $CUBEMEM_CLI, next to an installed package, in the source tree's build/,
    or on PATH) and return what it prints with --json, as dicts. A trace may
    be an RMM CSV (what CUBEMEM_LOG records) or a PyTorch memory snapshot
    pickle, which the tool reads itself (nothing in it is executed), so the
    results name the snapshot and carry its fields (snapshot_device,
    torch_reserved_bytes, torch_segments, preexisting_allocs).
  - stats / report / empty_cache / record_stream / enable_peer_access talk to
    libcubemem_torch.so (found through $CUBEMEM_TORCH_LIBRARY, next to an
    installed package, or in the source tree's build/) with ctypes.
  - cubemem.torch.enable() switches PyTorch to cubemem (needs PyTorch with
    CUDA); cubemem.cupy is plugins/cupy_cubemem.py's job.

Errors are CubememError with the tool's or the library's message. Nothing
here needs a GPU except the allocator itself.
"""

import json
import os
import re
import subprocess
import tempfile

from . import _native, _paths
from ._native import (empty_cache, enable_peer_access, last_error, record_stream, report,
                      retire_stream, stats)
from ._paths import CubememError, cli_path, library_path

__all__ = ["CubememError", "replay", "fit", "plan", "snapshot_to_csv", "stats", "report",
           "empty_cache", "record_stream", "retire_stream", "enable_peer_access", "last_error",
           "cli_path", "library_path", "torch"]
__version__ = "0.1.0"


def snapshot_to_csv(snapshot, out=None, device=None, free_on="completed"):
    """Convert a PyTorch memory snapshot (torch.cuda.memory._dump_snapshot)
    into an RMM CSV trace; returns the CSV's path (a temporary file unless
    `out` is given). The pickle is read with an unpickler that refuses every
    global. Raises CubememError (naming the file and the reason) for a file
    that cannot be read or is not a snapshot, and then leaves no temporary
    file behind."""
    tool = _paths.snapshot_tool()
    try:
        snap = tool.load_snapshot(snapshot)
        rows = tool.convert(snap, device, free_on)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as e:  # UnpicklingError, EOFError, ValueError, OSError, ...
        raise CubememError(f"{os.fspath(snapshot)}: not a readable memory snapshot: "
                           f"{type(e).__name__}: {e}") from e
    temp = out is None
    if temp:
        fd, out = tempfile.mkstemp(prefix="cubemem-snapshot-", suffix=".csv")
        os.close(fd)
    try:
        with open(out, "w") as f:
            f.write("Thread,Time,Action,Pointer,Size,Stream\n")
            f.writelines(r + "\n" for r in rows)
    except BaseException as e:
        if temp:
            _unlink_quietly(out)
        if isinstance(e, OSError):
            raise CubememError(f"cannot write the converted trace {out}: {e}") from e
        raise
    return out


def _unlink_quietly(path):
    try:
        os.unlink(path)
    except OSError:
        pass


def _traces(traces):
    """Paths for the CLI, as given (it reads CSVs and snapshots itself)."""
    if isinstance(traces, (str, os.PathLike)):
        traces = [traces]
    return [os.fspath(t) for t in traces]


def _options(pools, device, device_memory, alignment, persistent_memory, skip_bad_lines, config,
             driver_costs=None):
    args = []
    if driver_costs:
        args += ["--driver-costs", os.fspath(driver_costs)]
    for p in ([pools] if isinstance(pools, str) else list(pools or [])):
        args += ["--pools", p]
    if device:
        args += ["--device", device]
    if device_memory is not None:
        args += ["--device-memory", str(device_memory)]
    if alignment is not None:
        args += ["--alignment", str(int(alignment))]
    if persistent_memory:
        args += ["--persistent-memory", persistent_memory]
    if skip_bad_lines:
        args.append("--skip-bad-lines")
    if config:
        args += ["--config", os.fspath(config)]
    return args


def _run(cmd, traces, args, json_lines=True, ok_codes=(0,)):
    paths = _traces(traces)
    try:
        proc = subprocess.run([cli_path(), cmd, *args, *paths], capture_output=True, text=True,
                              errors="replace")
    except OSError as e:
        raise CubememError(f"cannot run the cubemem tool: {e}") from e
    if proc.returncode not in ok_codes:
        msg = (proc.stderr or proc.stdout).strip()
        raise CubememError(f"cubemem {cmd} failed (exit {proc.returncode}): {msg}")
    if not json_lines:
        return proc.stdout
    out = []
    for line in proc.stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            out.append(json.loads(line))
    return out


def _snapshot_options(snapshot_device, snapshot_free_on, torch_conf):
    args = []
    if snapshot_device is not None:
        args += ["--snapshot-device", str(int(snapshot_device))]
    if snapshot_free_on:
        args += ["--snapshot-free-on", snapshot_free_on]
    if torch_conf:
        args += ["--torch-conf", torch_conf]
    return args


def replay(traces, pools=None, device=None, device_memory=None, alignment=None,
           persistent_memory=None, skip_bad_lines=False, config=None, driver_costs=None,
           runs=None, html=None, svg=None, snapshot_device=None, snapshot_free_on=None,
           torch_conf=None, merge_streams=False, snapshot_start=None):
    """Replay one trace or a list of traces under each layout of `pools` (a
    layout text or a list of them; default: cubemem's default layout) and
    return one dict per (trace, layout): the objects `cubemem replay --json`
    prints (peak_live_bytes, peak_reserved_bytes, failed_allocs, pools,
    driver_calls, driver_time_model, ...).
    device: "sim" (default), "cuda", "cuda:sync", "cuda:async".
    driver_costs: "a100" (default), "fast" or the path of a TOML cost file
    (the model behind driver_time_model). runs: replay the trace that many
    times through one manager and report each run (the "runs" list).
    html / svg: also write `cubemem replay --html` / `--svg` to that path.
    snapshot_device, snapshot_free_on ("completed" or "requested") and
    torch_conf (PYTORCH_CUDA_ALLOC_CONF of the pytorch layouts): as the
    options of the same names. A snapshot's results carry its fields
    (torch_reserved_bytes, torch_segments, snapshot_device, ...).
    merge_streams: replay every stream through one set of pools (default: a
    trace with several streams gives each its own pools; its results'
    "streams" then carry each stream's peak_reserved_bytes).
    snapshot_start: "empty" (default) or "state" (the pytorch layouts start
    from the snapshot's own segments and live blocks). A run with failed
    reservations still returns its results (check failed_allocs); any other
    failure raises CubememError."""
    args = ["--json", "--no-progress"] + _options(pools, device, device_memory, alignment,
                                                  persistent_memory, skip_bad_lines, config,
                                                  driver_costs)
    args += _snapshot_options(snapshot_device, snapshot_free_on, torch_conf)
    if merge_streams:
        args.append("--merge-streams")
    if snapshot_start is not None:
        args += ["--snapshot-start", snapshot_start]
    if runs is not None:
        args += ["--runs", str(int(runs))]
    if html is not None:
        args += ["--html", os.fspath(html)]
    if svg is not None:
        args += ["--svg", os.fspath(svg)]
    return _run("replay", traces, args, ok_codes=(0, 3))


def fit(traces, pools=None, device=None, device_memory=None, alignment=None,
        persistent_memory=None, skip_bad_lines=False, config=None, driver_costs=None,
        gpus=None, reserve=None, snapshot_device=None, snapshot_free_on=None, torch_conf=None,
        merge_streams=False):
    """`cubemem fit --json`: per (trace, layout) fit_bytes, the unconstrained
    replay on the device_memory device (what replay() reports there) and its
    driver_time_model, then "fits on": smallest_gpu (a name or None),
    fits_on (names, smallest first), needs_bytes (fit_bytes + reserve_bytes)
    and gpus (the list compared with), and below_fit: the replay on one grid
    step less and its first failure (for cubemem's arena, where the memory it
    holds beyond the live data lies). Without pools, three answers: cubemem's
    default, "pytorch" and "pytorch-expandable" (the "allocator" field).
    gpus: {"name": bytes or size text, ...}, "NAME=SIZE,..." or a file path
    (default: T4 ... B200 with the memory each reports); reserve: bytes or a
    size text kept back on every GPU (default 500 MiB). device: fit always
    searches on the simulated device; anything else raises. merge_streams:
    search with one set of pools for every stream (default: each stream its
    own, as replay()). Raises CubememError on any failure."""
    if device not in (None, "sim"):
        raise CubememError(f"fit() searches on the simulated device, not {device!r}")
    args = ["--json", "--no-progress"] + _options(pools, None, device_memory, alignment,
                                                  persistent_memory, skip_bad_lines, config,
                                                  driver_costs)
    args += _snapshot_options(snapshot_device, snapshot_free_on, torch_conf)
    if merge_streams:
        args.append("--merge-streams")
    if isinstance(gpus, dict):
        gpus = ",".join(f"{k}={v}" for k, v in gpus.items())
    if gpus is not None:
        args += ["--gpus", os.fspath(gpus)]
    if reserve is not None:
        args += ["--reserve", str(reserve)]
    return _run("fit", traces, args)


def plan(trace, pools=None, device_memory=None, alignment=None, skip_bad_lines=False,
         driver_costs=None):
    """`cubemem plan`: dry-run one trace and measure every pool. Returns
    {"layout": the planned layout text (for replay(pools=[...]) or
    CUBEMEM_POOLS), "report": the full text, "driver_time_ms": {"layout": ms,
    "plan": ms} (the modelled driver time of the measured layout and of the
    plan, under driver_costs: "a100" by default, "fast" or a TOML file)}."""
    args = []
    if driver_costs:
        args += ["--driver-costs", os.fspath(driver_costs)]
    if pools:
        args += ["--pools", pools]
    if device_memory is not None:
        args += ["--device-memory", str(device_memory)]
    if alignment is not None:
        args += ["--alignment", str(int(alignment))]
    if skip_bad_lines:
        args.append("--skip-bad-lines")
    text = _run("plan", trace, args, json_lines=False, ok_codes=(0, 3))
    lines = [l for l in text.splitlines() if l.strip()]
    if not lines:
        raise CubememError("cubemem plan printed nothing")
    times = {}
    for l in lines:
        m = re.match(r"\s+(layout|plan)\s+([0-9.]+) (ms|s) in [0-9,]+ driver calls", l)
        if m:
            times[m.group(1)] = float(m.group(2)) * (1000.0 if m.group(3) == "s" else 1.0)
    return {"layout": lines[-1].strip(), "report": text, "driver_time_ms": times}


from . import torch  # noqa: E402  (cubemem.torch.enable())
