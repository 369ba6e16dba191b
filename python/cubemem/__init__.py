"""cubemem for Python.

    import cubemem
    cubemem.torch.enable()                 # PyTorch allocates through cubemem
    ...
    print(cubemem.stats())                 # {'in_use': ..., 'reserved': ..., ...}

    runs = cubemem.replay("run.csv", pools=["default", "subslices"])
    runs[0]["peak_reserved_bytes"]         # the objects `cubemem replay --json` prints
    runs[0]["driver_time_model"]["total_ns"]  # modelled time in the driver (a100 costs)
    layout = cubemem.plan("run.csv")["layout"]
    cubemem.replay("run.csv", pools=[layout])

Pieces:
  - replay / fit / plan run the cubemem command-line tool (found through
    $CUBEMEM_CLI, next to an installed package, in the source tree's build/,
    or on PATH) and return what it prints with --json, as dicts. A trace may
    be an RMM CSV (what CUBEMEM_LOG records) or a PyTorch memory snapshot
    pickle (converted first, loaded without executing anything).
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


def _is_snapshot(path):
    if path.endswith((".pickle", ".pkl")):
        return True
    try:
        with open(path, "rb") as f:
            return f.read(1) == b"\x80"  # pickle protocol 2+
    except OSError:
        return False


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
    """Paths ready for the CLI (snapshots converted) and the temporaries."""
    if isinstance(traces, (str, os.PathLike)):
        traces = [traces]
    paths, temps = [], []
    try:
        for t in traces:
            t = os.fspath(t)
            if _is_snapshot(t):
                csv = snapshot_to_csv(t)
                temps.append(csv)
                paths.append(csv)
            else:
                paths.append(t)
    except BaseException:
        for t in temps:  # the snapshots converted before the failure
            _unlink_quietly(t)
        raise
    return paths, temps


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
    paths, temps = _traces(traces)
    try:
        proc = subprocess.run([cli_path(), cmd, *args, *paths], capture_output=True, text=True,
                              errors="replace")
    except OSError as e:
        raise CubememError(f"cannot run {cli_path()}: {e}") from e
    finally:
        for t in temps:
            _unlink_quietly(t)
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


def replay(traces, pools=None, device=None, device_memory=None, alignment=None,
           persistent_memory=None, skip_bad_lines=False, config=None, driver_costs=None,
           runs=None):
    """Replay one trace or a list of traces under each layout of `pools` (a
    layout text or a list of them; default: cubemem's default layout) and
    return one dict per (trace, layout): the objects `cubemem replay --json`
    prints (peak_live_bytes, peak_reserved_bytes, failed_allocs, pools,
    driver_calls, driver_time_model, ...).
    device: "sim" (default), "cuda", "cuda:sync", "cuda:async".
    driver_costs: "a100" (default), "fast" or the path of a TOML cost file
    (the model behind driver_time_model). runs: replay the trace that many
    times through one manager and report each run (the "runs" list). A run
    with failed reservations still returns its results (check
    failed_allocs)."""
    args = ["--json", "--no-progress"] + _options(pools, device, device_memory, alignment,
                                                  persistent_memory, skip_bad_lines, config,
                                                  driver_costs)
    if runs is not None:
        args += ["--runs", str(int(runs))]
    return _run("replay", traces, args, ok_codes=(0, 3))


def fit(traces, pools=None, device=None, device_memory=None, alignment=None,
        persistent_memory=None, skip_bad_lines=False, config=None, driver_costs=None):
    """`cubemem fit --json`: per (trace, layout) fit_bytes, the unconstrained
    replay on the device_memory device (what replay() reports there) and its
    driver_time_model. Raises CubememError when this cubemem has no fit
    command."""
    args = ["--json", "--no-progress"] + _options(pools, device, device_memory, alignment,
                                                  persistent_memory, skip_bad_lines, config,
                                                  driver_costs)
    return _run("fit", traces, args, ok_codes=(0, 3))


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
