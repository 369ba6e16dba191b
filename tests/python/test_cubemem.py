"""test_cubemem.py SOURCE_DIR SHARED_DIR WORK_DIR - the cubemem Python module
without a GPU (run by tests/python/test_python_module.sh, which sets
CUBEMEM_CLI, CUBEMEM_TORCH_LIBRARY and CM_CUDA_LIBRARY to the strict fake
driver)."""
import json
import os
import subprocess
import sys

import cubemem

SRC, SHARED, WORK = sys.argv[1:4]
TRACE = os.path.join(SRC, "examples", "torch-cpu-gpt-train.csv")
CLI = os.environ["CUBEMEM_CLI"]


def check(cond, what):
    if not cond:
        raise SystemExit(f"FAIL: {what}")


# replay returns exactly what the CLI prints with --json
runs = cubemem.replay(TRACE, pools=["default", "subslices"])
cli = [json.loads(l) for l in subprocess.run(
    [CLI, "replay", "--json", "--no-progress", "--pools", "default", "--pools", "subslices", TRACE],
    capture_output=True, text=True, check=True).stdout.splitlines() if l.startswith("{")]
check(len(runs) == 2 and [r["layout"] for r in runs] == ["default", "subslices"], "two layouts")
for a, b in zip(runs, cli):
    a, b = dict(a), dict(b)
    for k in ("time_ns", "ns_per_op", "device_time_ns"):
        a.pop(k, None)
        b.pop(k, None)
    check(a == b, f"replay() differs from the CLI's JSON: {a} vs {b}")
check(runs[0]["failed_allocs"] == 0 and isinstance(runs[0]["pools"], list), "replay fields")
print(f"replay: default peak reserved {runs[0]['peak_reserved_bytes']:,}, "
      f"subslices {runs[1]['peak_reserved_bytes']:,}")

# the modelled driver time, the cost sets and --runs
m = runs[0]["driver_time_model"]
check(m["costs"] == "a100" and m["total_ns"] == sum(m["by_kind"].values()) and m["total_ns"] > 0,
      f"driver_time_model: {m}")
fast = cubemem.replay(TRACE, driver_costs="fast", runs=2)[0]
check(fast["driver_time_model"]["costs"] == "fast" and
      0 < fast["driver_time_model"]["total_ns"] < m["total_ns"], "the fast set costs less")
check([r["run"] for r in fast["runs"]] == [1, 2], f"runs: {fast.get('runs')}")
print(f"driver time: a100 {m['total_ns'] / 1e6:.3f} ms, fast "
      f"{fast['driver_time_model']['total_ns'] / 1e6:.3f} ms; second run "
      f"{fast['runs'][1]['driver_calls']['total']} driver calls")

# errors carry the tool's message
try:
    cubemem.replay(TRACE, pools=["no-such-layout"])
    check(False, "a bad layout must raise")
except cubemem.CubememError as e:
    check("no-such-layout" in str(e), f"message names the layout: {e}")

# plan, and replay with the plan
p = cubemem.plan(TRACE)
check(p["layout"] and "planned layout" in p["report"], "plan output")
check(set(p["driver_time_ms"]) == {"layout", "plan"} and p["driver_time_ms"]["layout"] > 0,
      f"plan's driver time: {p['driver_time_ms']}")
again = cubemem.replay(TRACE, pools=[p["layout"]])[0]
check(again["failed_allocs"] == 0, "the plan replays without failures")
print(f"plan: {p['layout']} -> peak reserved {again['peak_reserved_bytes']:,}")

# fit, when this cubemem has it (the command is being added)
has_fit = subprocess.run([CLI, "fit", "--help"], capture_output=True).returncode == 0
if has_fit:
    f = cubemem.fit(TRACE, pools=["default"])
    check(f and "fit_bytes" in f[0], f"fit returns fit_bytes: {f[:1]}")
    check(f[0]["unconstrained_peak_reserved"] == runs[0]["peak_reserved_bytes"] and
          f[0]["driver_time_model"] == runs[0]["driver_time_model"],
          "fit's unconstrained replay is replay()'s")
    print(f"fit: fit_bytes {f[0]['fit_bytes']}")
    three = cubemem.fit(TRACE)  # no pools: cubemem's default and PyTorch's two modes
    check([x["layout"] for x in three] == ["default", "pytorch", "pytorch-expandable"] and
          [x["allocator"] for x in three] == ["cubemem", "pytorch", "pytorch"],
          f"fit() answers for three allocators: {[x['layout'] for x in three]}")
    check(three[0]["fit_bytes"] == f[0]["fit_bytes"] and three[0]["smallest_gpu"] == "T4" and
          three[0]["fits_on"][:2] == ["T4", "A10"] and
          three[0]["needs_bytes"] == three[0]["fit_bytes"] + (500 << 20),
          f"fits on: {three[0].get('smallest_gpu')} {three[0].get('fits_on')}")
    own = cubemem.fit(TRACE, pools="default", gpus={"small": "1GiB", "big": 2 << 30}, reserve=0)[0]
    check(own["smallest_gpu"] == "big" and own["fits_on"] == ["big"] and own["reserve_bytes"] == 0,
          f"fit(gpus=, reserve=): {own.get('smallest_gpu')} {own.get('fits_on')}")
    try:
        cubemem.fit(TRACE, gpus="T4")
        check(False, "a bad gpus= must raise")
    except cubemem.CubememError as e:
        check("NAME=SIZE" in str(e), f"gpus= error: {e}")
else:
    try:
        cubemem.fit(TRACE)
        check(False, "fit without the command must raise")
    except cubemem.CubememError as e:
        print(f"fit: not in this cubemem yet ({str(e).splitlines()[0][:80]})")

# several streams: each its own pools by default, merged on request
two = os.path.join(SRC, "tests", "data", "two-streams.csv")
per = cubemem.replay(two)[0]
merged = cubemem.replay(two, merge_streams=True)[0]
check(not per["streams_merged"] and merged["streams_merged"] and
      [s["peak_reserved_bytes"] for s in per["streams"]] == [merged["peak_reserved_bytes"]] * 2 and
      per["peak_reserved_bytes"] == 2 * merged["peak_reserved_bytes"],
      f"replay(merge_streams=): {per['peak_reserved_bytes']} vs {merged['peak_reserved_bytes']}")
if has_fit:
    fs = cubemem.fit(two, pools="default")[0]["fit_bytes"]
    fm = cubemem.fit(two, pools="default", merge_streams=True)[0]["fit_bytes"]
    check(fm < fs, f"fit(merge_streams=): {fm} < {fs}")
print(f"streams: {per['peak_reserved_bytes']:,} per stream, {merged['peak_reserved_bytes']:,} merged")

# a snapshot (PyTorch pickle): the tool reads it, so the results name it and
# carry its fields; html= and svg= write the reports
snap = os.path.join(SHARED, "traces", "snapshots", "cs336-medium-ctx128-inference.pickle")
if os.path.exists(snap):
    html, svg = os.path.join(WORK, "r.html"), os.path.join(WORK, "r.svg")
    r = cubemem.replay(snap, html=html, svg=svg)[0]
    check(r["failed_allocs"] == 0 and r["allocs"] > 0, "snapshot replay")
    check(r["trace"] == snap, f"the result names the snapshot: {r['trace']}")
    check(r["torch_reserved_bytes"] > 0 and r["torch_segments"] > 0 and r["snapshot_device"] == 0,
          "the snapshot's fields")
    cli = json.loads(subprocess.run([CLI, "replay", "--json", "--no-progress", snap],
                                    capture_output=True, text=True).stdout.splitlines()[0])
    same = ("trace", "peak_reserved_bytes", "torch_reserved_bytes", "torch_segments",
            "preexisting_allocs", "driver_calls", "driver_time_model")
    check(all(cli[k] == r[k] for k in same), "replay() is `cubemem replay --json`")
    check(open(html).read().startswith("<!DOCTYPE html>") and "<svg" in open(svg).read(),
          "html= and svg= write the reports")
    print(f"snapshot: {r['allocs']} allocations, peak live {r['peak_live_bytes']:,}")
    small = os.path.join(SHARED, "traces", "snapshots", "cs336-small-compiled-training.pickle")
    if os.path.exists(small):
        st = cubemem.replay(small, pools="pytorch", snapshot_start="state")[0]
        check(st["snapshot_start"] == "state" and st["start_unplaced"] == 0 and
              st["reserved_at_end"] == st["torch_reserved_bytes"],
              f"replay(snapshot_start='state'): {st['reserved_at_end']} vs {st['torch_reserved_bytes']}")
else:
    print(f"note: {snap} absent; snapshot replay not checked")

# statistics and hooks through the plugin on the strict fake driver, with a
# recorded log going through replay -> plan -> replay (the loop of docs/cuda.md)
if os.environ.get("CUBEMEM_TORCH_LIBRARY"):
    log = os.path.join(WORK, "run.csv")
    os.environ["CUBEMEM_LOG"] = log  # read at the plugin's first allocation
    from cubemem import _native
    check(cubemem.stats(0)["reserved"] == 0, "nothing before the first allocation")
    ptrs = [_native.try_malloc(4096 * (i + 1)) for i in range(64)]
    s = cubemem.stats(0)
    check(s["live"] == 64 and s["in_use"] > 0 and s["reserved"] >= s["in_use"], f"stats {s}")
    check(s["device_total"] == 2 << 30, f"device total from cuMemGetInfo: {s}")
    ms = cubemem.torch.memory_stats(0)
    check(ms["allocated_bytes.all.current"] == s["in_use"], "torch-style keys")
    check(ms["allocated_bytes.all.peak"] == s["peak_in_use"] >= s["in_use"],
          "allocated_bytes.all.peak (max_memory_allocated)")
    need = [f"{m}.{p}.{k}" for m in ("allocated_bytes", "active_bytes", "requested_bytes",
                                     "reserved_bytes", "inactive_split_bytes", "allocation",
                                     "active", "segment", "inactive_split")
            for p in ("all", "large_pool", "small_pool")
            for k in ("current", "peak", "allocated", "freed")]
    need += [f"{m}.{k}" for m in ("oversize_allocations", "oversize_segments")
             for k in ("current", "peak", "allocated", "freed")]
    need += ["num_alloc_retries", "num_ooms"]
    check(not [k for k in need if k not in ms], "every key memory_summary() reads")
    cubemem.record_stream(ptrs[0], 0)  # its own (default) stream: accepted
    try:
        cubemem.record_stream(12345, 0)
        check(False, "record_stream of an unknown pointer must raise")
    except cubemem.CubememError as e:
        check("not a live pointer" in str(e), str(e))
    for i, q in enumerate(ptrs):
        if i % 2:
            _native.free(q)
    try:
        _native.try_malloc(64 << 30)
        check(False, "an allocation beyond the device must raise")
    except cubemem.CubememError as e:
        check("CUDA out of memory" in str(e), str(e))
    for i, q in enumerate(ptrs):
        if not i % 2:
            _native.free(q)
    cubemem.empty_cache()
    check(cubemem.stats(0)["live"] == 0, "all freed")
    check("Fake CUDA GPU 0" in cubemem.report(), "report names the device")
    rec = cubemem.replay(log)[0]
    check(rec["allocs"] == 64 and rec["frees"] == 64, f"the log replays: {rec['allocs']}")
    plan = cubemem.plan(log)["layout"]
    rerun = cubemem.replay(log, pools=[plan])[0]
    check(rerun["failed_allocs"] == 0, "the recorded run replays under its plan")
    # run again with the plan (CUBEMEM_POOLS), in a fresh process
    code = ("from cubemem import _native as n, report, stats\n"
            "ps = [n.try_malloc(4096 * (i + 1)) for i in range(64)]\n"
            "print(report().splitlines()[1]); print(stats(0)['failed'])\n"
            "[n.free(p) for p in ps]\n")
    env = dict(os.environ, CUBEMEM_POOLS=plan, CUBEMEM_LOG="")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    check(out.returncode == 0, f"the planned run: {out.stderr}")
    check(out.stdout.strip().endswith("0"), f"no failed allocation under the plan: {out.stdout}")
    print(f"rerun with CUBEMEM_POOLS={plan}: {out.stdout.splitlines()[0].strip()[:70]}")
    # a second GPU: its own allocator, and peer access to its mappings
    q1 = _native.try_malloc(1 << 20, device=1)
    s1 = cubemem.stats(1)
    check(s1["live"] == 1 and cubemem.stats(0)["live"] == 0, f"device 1 is separate: {s1}")
    cubemem.enable_peer_access(1, 0)
    try:
        cubemem.enable_peer_access(1, 1)
        check(False, "a device cannot be its own peer")
    except cubemem.CubememError as e:
        check("cannot be a peer" in str(e), str(e))
    _native.free(q1, device=1)
    check("cuda:1 (Fake CUDA GPU 1)" in cubemem.report(), "report names device 1")
    import ctypes
    fake = ctypes.CDLL(os.environ["CM_CUDA_LIBRARY"])
    fake.fakecuda_violations.restype = ctypes.c_uint64
    check(fake.fakecuda_violations() == 0, "no driver violation")
    print(f"plugin on the fake driver: stats ok; recorded {rec['allocs']} allocations, "
          f"plan {plan}")
else:
    print("note: no plain libcubemem_torch.so (sanitizer build?): plugin part skipped")

# the PyTorch switch explains itself without PyTorch / CUDA
try:
    import torch  # noqa: F401
    have_torch = True
except ImportError:
    have_torch = False
if not have_torch:
    try:
        cubemem.torch.enable()
        check(False, "enable() without PyTorch must raise")
    except cubemem.CubememError as e:
        check("needs PyTorch" in str(e), str(e))
print("ok")
