#!/usr/bin/env python3
"""Convert a PyTorch CUDA memory snapshot into an RMM-style allocation CSV.

The input is the pickle written by ``torch.cuda.memory._dump_snapshot()``
(recorded with ``torch.cuda.memory._record_memory_history()``). The output is
the layout ``cubemem replay`` reads (RAPIDS RMM's logging adaptor)::

    Thread,Time,Action,Pointer,Size,Stream
    1,00:00:00.000226,allocate,0x39b43000,1008,0x0

Conversion rules:

* ``alloc`` trace entries become ``allocate`` rows with the requested size;
  ``free_completed`` entries (or ``free_requested`` with
  ``--free-on requested``) become ``free`` rows; ``oom`` entries become
  ``allocate failure`` rows. Segment events are the caching allocator's own
  device traffic and are not part of the workload, so they are dropped.
* Memory that was live before recording began becomes allocations at time
  zero, in address order: the active blocks of the snapshot's segments that
  the trace did not allocate, and pointers the trace frees without having
  allocated them.
* Times are relative to the first trace entry, as ``HH:MM:SS.ffffff``.

Warnings go to standard error, as ``cubemem replay SNAPSHOT`` prints them
(the C reader in cubemem applies the same rules): a snapshot recorded without
history (no trace entries at all: only the blocks live at dump would be
converted), a device without trace entries, and pointers freed by the trace
without being allocated in it.

The pickle is loaded with an unpickler that refuses every global, so a
snapshot can only yield plain dicts, lists, strings and numbers: a file that
tries to construct any object is rejected instead of executing code.

Usage: torch_snapshot_to_csv.py SNAPSHOT [-o OUT.csv] [--device N]
                                [--free-on completed|requested]
"""

import argparse
import io
import pickle
import sys


class _RefuseGlobals(pickle.Unpickler):
    """An unpickler that never imports anything."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(
            f"refusing to load global {module}.{name}: a memory snapshot holds only "
            "plain data")


def load_snapshot(path):
    with open(path, "rb") as f:
        data = f.read()
    return _RefuseGlobals(io.BytesIO(data)).load()


def _fmt_time(us):
    us = max(0, int(us))
    s, frac = divmod(us, 1_000_000)
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h:02d}:{m:02d}:{s:02d}.{frac:06d}"


def _segments(snap):
    if isinstance(snap, dict):
        return snap.get("segments") or []
    if isinstance(snap, list):  # very old snapshots: a bare segment list
        return snap
    raise ValueError("not a memory snapshot: expected a dict with 'segments'")


def _device_traces(snap):
    if isinstance(snap, dict):
        return snap.get("device_traces") or []
    return []


def _active_blocks(segments, device):
    """(address, requested size) of every live block of `device`, in order."""
    out = []
    for seg in segments:
        if not isinstance(seg, dict) or seg.get("device", 0) != device:
            continue
        addr = seg.get("address", 0)
        for blk in seg.get("blocks") or []:
            size = int(blk.get("size", 0))
            baddr = int(blk.get("address", addr))
            if str(blk.get("state", "")).startswith("active_allocated"):
                req = blk.get("requested_size")
                out.append((baddr, int(req if req is not None else size)))
            addr = baddr + size
    return out


def _warn(msg):
    print(f"warning: {msg}", file=sys.stderr)


def convert(snap, device=None, free_on="completed", warn=_warn):
    """Return the CSV rows (without the header) for one device."""
    traces = _device_traces(snap)
    segments = _segments(snap)
    has_history = any(t for t in traces)
    if device is None:
        device = next((i for i, t in enumerate(traces) if t), 0)
    if not has_history:
        warn("the snapshot has no allocation history: record it with "
             "torch.cuda.memory._record_memory_history() before "
             "torch.cuda.memory._dump_snapshot(); only the blocks live at dump are converted")
    elif not (traces[device] if device < len(traces) else []):
        warn(f"device {device} has no trace entries; only its blocks live at dump are "
             "converted (--device chooses another)")
    trace = traces[device] if device < len(traces) else []
    free_action = "free_completed" if free_on == "completed" else "free_requested"

    t0 = None
    live = {}
    events = []  # (time_us, action, addr, size, stream)
    pre_freed = []  # pointers freed before the trace allocated them
    pre_seen = set()
    for e in trace:
        if not isinstance(e, dict):
            continue
        action = e.get("action")
        t = e.get("time_us")
        if t is not None and t0 is None:
            t0 = t
        rel = (t - t0) if (t is not None and t0 is not None) else 0
        addr = int(e.get("addr", 0))
        size = int(e.get("size", 0))
        stream = int(e.get("stream", 0))
        if action == "alloc":
            live[addr] = size
            events.append((rel, "allocate", addr, size, stream))
        elif action == free_action:
            if addr in live:
                size = live.pop(addr)
            elif addr not in pre_seen:
                pre_seen.add(addr)
                pre_freed.append((addr, size, stream))
            else:
                continue  # a second free of an unknown pointer: nothing to free
            events.append((rel, "free", addr, size, stream))
        elif action == "oom":
            events.append((rel, "allocate failure", 0, size, stream))

    if pre_freed:
        warn(f"{len(pre_freed)} pointer(s) freed by the trace without being allocated in it "
             "(recorded before the history began): allocated at time zero")
    rows = []
    for addr, size in _active_blocks(segments, device):
        if addr in live or addr in pre_seen:
            continue
        rows.append((0, "allocate", addr, size, 0))
    for addr, size, stream in pre_freed:
        rows.append((0, "allocate", addr, size, stream))
    rows.sort(key=lambda r: r[2])  # pre-existing memory in address order
    rows.extend(events)
    return [f"1,{_fmt_time(t)},{a},{hex(p)},{s},{hex(st)}" for t, a, p, s, st in rows]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("snapshot", help="pickle from torch.cuda.memory._dump_snapshot")
    ap.add_argument("-o", "--output", help="CSV to write (default: standard output)")
    ap.add_argument("--device", type=int, default=None,
                    help="device index (default: the first device with trace entries)")
    ap.add_argument("--free-on", choices=("completed", "requested"), default="completed",
                    help="which trace entry marks a free (default: completed)")
    args = ap.parse_args(argv)
    try:
        snap = load_snapshot(args.snapshot)
        rows = convert(snap, args.device, args.free_on)
    except (OSError, pickle.UnpicklingError, ValueError, EOFError) as exc:
        print(f"{args.snapshot}: {exc}", file=sys.stderr)
        return 1
    text = "Thread,Time,Action,Pointer,Size,Stream\n" + "".join(r + "\n" for r in rows)
    if args.output:
        with open(args.output, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
