"""Where the cubemem CLI, libcubemem_torch.so and the snapshot converter are.

Search order (first hit wins):
  CLI:      $CUBEMEM_CLI; <prefix>/bin/cubemem when this package was
            installed by `make install` (<prefix>/share/cubemem/python);
            <source tree>/build/cubemem; `cubemem` on PATH.
  library:  $CUBEMEM_TORCH_LIBRARY; <prefix>/lib*/libcubemem_torch.so;
            <source tree>/build/libcubemem_torch.so; the loader's search path.
"""

import glob
import importlib.util
import os
import shutil

_HERE = os.path.dirname(os.path.abspath(__file__))


class CubememError(RuntimeError):
    """A cubemem tool or library call failed; the message says why."""


def _prefix():
    # <prefix>/share/cubemem/python/cubemem -> <prefix>
    return os.path.abspath(os.path.join(_HERE, "..", "..", "..", ".."))


def _source_tree():
    root = os.path.abspath(os.path.join(_HERE, "..", ".."))
    return root if os.path.exists(os.path.join(root, "include", "cubemem")) else None


def cli_path():
    """Path of the cubemem command-line tool. Raises CubememError."""
    env = os.environ.get("CUBEMEM_CLI")
    if env:
        return env
    cands = [os.path.join(_prefix(), "bin", "cubemem")]
    src = _source_tree()
    if src:
        cands.append(os.path.join(src, "build", "cubemem"))
    for c in cands:
        if os.access(c, os.X_OK):
            return c
    found = shutil.which("cubemem")
    if found:
        return found
    raise CubememError("the cubemem tool was not found: set CUBEMEM_CLI, build it (make), "
                       "or install it (make install)")


def library_path():
    """Path (or loader name) of libcubemem_torch.so."""
    env = os.environ.get("CUBEMEM_TORCH_LIBRARY")
    if env:
        return env
    cands = glob.glob(os.path.join(_prefix(), "lib*", "libcubemem_torch.so"))
    src = _source_tree()
    if src:
        cands.append(os.path.join(src, "build", "libcubemem_torch.so"))
    cands.append(os.path.join(_HERE, "libcubemem_torch.so"))
    for c in cands:
        if os.path.exists(c):
            return c
    return "libcubemem_torch.so"


def snapshot_tool():
    """The snapshot converter module (tools/torch_snapshot_to_csv.py)."""
    cands = [os.path.join(_HERE, "_snapshot_tool.py"),
             os.path.join(_prefix(), "share", "cubemem", "torch_snapshot_to_csv.py")]
    src = _source_tree()
    if src:
        cands.append(os.path.join(src, "tools", "torch_snapshot_to_csv.py"))
    for c in cands:
        if os.path.exists(c):
            spec = importlib.util.spec_from_file_location("cubemem._snapshot_tool", c)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            return mod
    raise CubememError("the snapshot converter (torch_snapshot_to_csv.py) was not found")
