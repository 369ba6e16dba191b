"""test_errors.py SOURCE_DIR WORK_DIR - error paths of the cubemem Python
module (run by tests/python/test_python_errors.sh, which points TMPDIR at an
empty WORK_DIR/tmp so that leftover temporaries can be counted):
  - replay / fit / plan / snapshot_to_csv on a bad snapshot (truncated, a
    GLOBAL opcode, not a pickle under a .pickle name, missing, a directory),
    alone and after a good one: CubememError naming the file, never a raw
    UnpicklingError / EOFError / OSError, and no temporary CSV left behind;
  - snapshot_to_csv into an unwritable place: CubememError, no temporary;
  - a CLI error (bad layout) and an unusable CLI path: CubememError;
  - try_malloc(0) after an error returns 0 and clears last_error() (when the
    plugin is available on the fake driver).
"""
import os
import sys

import cubemem

SRC, WORK = sys.argv[1:3]
TMP = os.path.join(WORK, "tmp")
CORPUS = os.path.join(SRC, "fuzz", "corpus", "snapshot")
GOOD = os.path.join(CORPUS, "synthetic-p4.pickle")
CSV = os.path.join(SRC, "examples", "torch-cpu-gpt-train.csv")
cases = 0


def check(cond, what):
    if not cond:
        raise SystemExit(f"FAIL: {what}")


def leftovers():
    return sorted(os.listdir(TMP))


def raises_cubemem_error(what, fn, *args, **kw):
    global cases
    cases += 1
    before = leftovers()
    try:
        fn(*args, **kw)
    except cubemem.CubememError as e:
        after = leftovers()
        check(after == before, f"{what}: temporaries left behind: {set(after) - set(before)}")
        return str(e)
    except BaseException as e:  # noqa: BLE001 - the point of the test
        raise SystemExit(f"FAIL: {what}: raised {type(e).__name__} ({e}), not CubememError")
    raise SystemExit(f"FAIL: {what}: no error")


check(os.path.isdir(TMP) and not leftovers(), "TMPDIR is an empty directory")
import tempfile  # noqa: E402
check(os.path.realpath(tempfile.gettempdir()) == os.path.realpath(TMP), "tempfile uses TMPDIR")

# the good snapshot replays and leaves nothing behind
r = cubemem.replay(GOOD)
check(r and r[0]["allocs"] > 0 and not leftovers(), "the good snapshot replays cleanly")

notpickle = os.path.join(WORK, "text.pickle")
with open(notpickle, "w") as f:
    f.write("Thread,Time,Action,Pointer,Size,Stream\n")
adir = os.path.join(WORK, "dir.pickle")
os.mkdir(adir)
bad = {
    "truncated": os.path.join(CORPUS, "truncated.pickle"),
    "global": os.path.join(CORPUS, "global.pickle"),
    "not a pickle": notpickle,
    "missing": os.path.join(WORK, "missing.pickle"),
    "directory": adir,
}
for name, path in bad.items():
    for fn in (cubemem.replay, cubemem.fit, cubemem.plan):
        if fn is cubemem.plan:
            msg = raises_cubemem_error(f"plan({name})", fn, path)
        else:
            msg = raises_cubemem_error(f"{fn.__name__}([good, {name}])", fn, [GOOD, path])
            msg2 = raises_cubemem_error(f"{fn.__name__}([good, good, {name}, good])", fn,
                                        [GOOD, GOOD, path, GOOD])
            check(path in msg2, f"the message names the file: {msg2}")
        check(path in msg, f"the message names the file: {msg}")
    raises_cubemem_error(f"snapshot_to_csv({name})", cubemem.snapshot_to_csv, path)
    print(f"{name}: {msg[:110]}")

# conversion into a place that cannot be written
out = os.path.join(WORK, "no-such-dir", "x.csv")
raises_cubemem_error("snapshot_to_csv(out=missing dir)", cubemem.snapshot_to_csv, GOOD, out=out)
raises_cubemem_error("snapshot_to_csv(out=a directory)", cubemem.snapshot_to_csv, GOOD, out=adir)

# CLI errors
msg = raises_cubemem_error("replay(bad layout)", cubemem.replay, [GOOD, CSV], pools=["nope"])
check("nope" in msg, msg)
os.environ["CUBEMEM_CLI"], cli = os.path.join(WORK, "no-cubemem"), os.environ.get("CUBEMEM_CLI")
raises_cubemem_error("replay(no CLI)", cubemem.replay, [GOOD, CSV])
if cli is not None:
    os.environ["CUBEMEM_CLI"] = cli

# the plugin: malloc(0) leaves no stale error behind
if os.environ.get("CUBEMEM_TORCH_LIBRARY"):
    from cubemem import _native
    _native.free(0x1234)  # an unknown pointer: recorded as an error
    check(cubemem.last_error() != "", "an error is recorded")
    check(_native.try_malloc(0) == 0, "try_malloc(0) is 0")
    check(cubemem.last_error() == "", f"malloc(0) cleared the error: {cubemem.last_error()!r}")
    cases += 1
else:
    print("note: no plain libcubemem_torch.so: the malloc(0) case is skipped")
print(f"python error paths: {cases} cases, no temporary left: ok")
