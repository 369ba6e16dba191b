#!/usr/bin/env python3
"""check-layers.py - the layer map of docs/design.md, enforced.

    tools/check-layers.py SOURCE_DIR BUILD_DIR
    tools/check-layers.py --self-test     (the checks on a made-up graph)

Layers, lowest first (a layer may include and call the layers below it and
itself; config and storage are siblings and use neither the other):

    base -> obs -> config | storage -> core -> front -> tools -> cli

    base     src/base            diagnostics, sizes, string buffer, maps, id table
    obs      src/obs             the logger
    config   src/config          TOML reader, [memory] binder, discovery
    storage  src/storage         the storage wrapper and backends
    core     src/core            the manager and its pools
    front    src/runtime src/ptr devices and streams, drop queue, pointer API
    tools    src/replay          libcubemem-tools: traces, snapshots, replay, fit, reports
    cli      src/cli             the cubemem command

Checks, each reported as one line `layers: ...` per violation:
  1. every `#include "..."` of src/ and include/cubemem/ names a header of
     the same or a lower layer (public headers carry the layer of what they
     declare, PUBLIC below); a backend's public header (storage.h, cuda.h,
     vulkan.h, faulty.h) includes neither the manager's (memory.h) nor
     config's (config.h);
  2. every undefined symbol of every object file of libcubemem, the tools
     library and the CLI that another of those objects defines points to the
     same or a lower layer (no call up a layer);
  3. no file circle: the graph of those symbol edges between source files has
     no cycle (two files that call each other, directly or through others);
  4. build/libcubemem.so exports no symbol the tools library defines.
Known violations that a later step removes are listed in ALLOW, each with
its issue; an entry that no longer matches is reported too (stale), so the
list only shrinks. Exit 0 when clean, 1 on violations, 77 without objects.
"""
import glob
import os
import re
import subprocess
import sys

RANK = {"base": 0, "obs": 1, "config": 2, "storage": 2, "core": 3, "front": 4, "tools": 5,
        "cli": 6}
FOLDER = {"base": "base", "obs": "obs", "config": "config", "storage": "storage", "core": "core",
          "runtime": "front", "ptr": "front", "replay": "tools", "cli": "cli"}
# include/cubemem/*.h: the layer of what each declares.
PUBLIC = {"common.h": "base", "log.h": "obs", "config.h": "config", "toml.h": "config",
          "storage.h": "storage", "storage_counters.h": "storage", "cuda.h": "storage",
          "vulkan.h": "storage", "faulty.h": "storage", "memory.h": "core", "device.h": "front",
          "dropqueue.h": "front", "vulkan_binding.h": "front", "ptr.h": "front",
          "cubemem.h": "front", "replay.h": "tools",
          "costs.h": "tools", "torchalloc.h": "tools", "tools.h": "tools"}
BACKEND_HEADERS = {"storage.h", "cuda.h", "vulkan.h", "faulty.h"}
FORBIDDEN_FOR_BACKENDS = {"memory.h", "config.h"}

# (kind, from, to): known violations, removed by the step named. Empty: the
# storage step of issue 30 removed the last ones; a new entry needs an issue.
ALLOW = {}


def layer_of_path(rel):
    """Layer of a path relative to src/ ('core/manager.c'), or None."""
    top = rel.split("/", 1)[0]
    if top == "generated":  # the embedded report template of src/replay
        return "tools"
    return FOLDER.get(top)


def allowed(a, b):
    if a == b:
        return True
    return RANK[b] < RANK[a]


class Report:
    def __init__(self, allow=None):
        self.errors = []
        self.used = set()
        self.allow = ALLOW if allow is None else allow

    def check(self, key, message):
        if key in self.allow:
            self.used.add(key)
            return
        self.errors.append(message)


def include_target(src_dir, including, name):
    """(layer, public header basename or None) of `#include "name"`."""
    if name.startswith("cubemem/"):
        base = name.split("/", 1)[1]
        return PUBLIC.get(base), base
    here = os.path.dirname(including)
    for cand in (os.path.join(here, name), os.path.join(src_dir, "src", name)):
        if os.path.exists(cand):
            rel = os.path.relpath(cand, os.path.join(src_dir, "src"))
            return layer_of_path(rel), None
    return None, None


def check_includes(src_dir, rep):
    files = glob.glob(os.path.join(src_dir, "src", "*", "**", "*.[ch]"), recursive=True)
    files += glob.glob(os.path.join(src_dir, "include", "cubemem", "*.h"))
    inc = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
    for path in sorted(files):
        rel = os.path.relpath(path, src_dir)
        if rel.startswith("include/"):
            base = os.path.basename(path)
            layer = PUBLIC.get(base)
            if layer is None:
                rep.errors.append(f"layers: {rel}: a public header with no layer (add it to PUBLIC)")
                continue
        else:
            base = None
            layer = layer_of_path(os.path.relpath(path, os.path.join(src_dir, "src")))
        with open(path, encoding="utf-8", errors="replace") as f:
            for lineno, line in enumerate(f, 1):
                m = inc.match(line)
                if not m:
                    continue
                name = m.group(1)
                to, pub = include_target(src_dir, path, name)
                if to is None:
                    continue  # generated or test-only headers
                key = ("include", rel, name)
                if base in BACKEND_HEADERS and pub in FORBIDDEN_FOR_BACKENDS:
                    rep.check(key, f"layers: {rel}:{lineno}: a backend's public header includes "
                                   f"{name}")
                elif not allowed(layer, to):
                    rep.check(key, f"layers: {rel}:{lineno}: {layer} includes {name} ({to})")


def objects(build_dir, src_root=None):
    """{source path relative to src/: object file} of the library, tools and CLI.
    With src_root, objects whose source no longer exists (left in a build
    directory by a moved or deleted file) are skipped."""
    out = {}
    for target in ("cubemem_obj", "cubemem_tools", "cubemem_cli"):
        root = os.path.join(build_dir, "CMakeFiles", f"{target}.dir")
        for o in glob.glob(os.path.join(root, "**", "*.o"), recursive=True):
            rel = os.path.relpath(o, root)
            if rel.startswith("src/") and src_root and \
                    not os.path.exists(os.path.join(src_root, rel[:-2])):
                continue
            rel = rel[len("src/"):] if rel.startswith("src/") else "generated/" + os.path.basename(rel)
            out[rel[:-2]] = o
    return out


def symbols(obj):
    res = subprocess.run(["nm", obj], capture_output=True, text=True, check=True).stdout
    defined, undefined = set(), set()
    for line in res.splitlines():
        p = line.split()
        if len(p) == 2 and p[0] == "U":
            undefined.add(p[1])
        elif len(p) == 3 and p[1] in "TDBRCVW":
            defined.add(p[2])
    return defined, undefined


def call_graph(objs):
    defs, undef = {}, {}
    for src, o in objs.items():
        d, u = symbols(o)
        for s in d:
            defs[s] = src
        undef[src] = u
    graph = {src: {} for src in objs}
    for src, u in undef.items():
        for s in sorted(u):
            to = defs.get(s)
            if to and to != src:
                graph[src].setdefault(to, s)
    return graph, defs


def check_calls(graph, rep):
    for a, outs in sorted(graph.items()):
        la = layer_of_path(a)
        for b, sym in sorted(outs.items()):
            lb = layer_of_path(b)
            if la and lb and not allowed(la, lb):
                rep.check(("call", a, b), f"layers: {a} ({la}) calls {b} ({lb}): {sym}")


def cycles(graph):
    """Strongly connected components of more than one file (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        work = [(v, iter(sorted(graph[v])))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == node:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
            elif nxt not in index:
                index[nxt] = low[nxt] = counter[0]
                counter[0] += 1
                stack.append(nxt)
                on.add(nxt)
                work.append((nxt, iter(sorted(graph[nxt]))))
            elif nxt in on:
                low[node] = min(low[node], index[nxt])

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def check_circles(graph, rep):
    for comp in cycles(graph):
        key = ("circle", comp[0], comp[1]) if len(comp) == 2 else None
        edges = [f"{a} -> {b} ({graph[a][b]})" for a in comp for b in comp if b in graph[a]]
        rep.check(key, "layers: file circle: " + ", ".join(comp) + "\n    " + "\n    ".join(edges))


def check_exports(build_dir, objs, rep):
    so = os.path.join(build_dir, "libcubemem.so")
    if not os.path.exists(so):
        rep.errors.append(f"layers: {so} missing")
        return
    tools = set()
    for src, o in objs.items():
        if layer_of_path(src) == "tools":
            tools |= symbols(o)[0]
    res = subprocess.run(["nm", "-D", "--defined-only", so], capture_output=True, text=True,
                         check=True).stdout
    exported = {line.split()[-1] for line in res.splitlines() if line.strip()}
    for s in sorted(exported & tools):
        rep.errors.append(f"layers: libcubemem.so exports the tools' symbol {s}")


def self_test():
    """The checks find what they are for, on a made-up graph: a circle of
    three files, a call up a layer, a pair allowed by an allowlist. Returns 0/1."""
    graph = {"core/a.c": {"core/b.c": "f"}, "core/b.c": {"core/c.c": "g"},
             "core/c.c": {"core/a.c": "h"}, "config/x.c": {"obs/log.c": "l", "core/a.c": "u"},
             "obs/log.c": {}, "storage/cuda_storage.c": {"storage/cuda_vm.c": "v"},
             "storage/cuda_vm.c": {"storage/cuda_storage.c": "w"}}
    rep = Report({("circle", "storage/cuda_storage.c", "storage/cuda_vm.c"): "made up"})
    check_calls(graph, rep)
    check_circles(graph, rep)
    want = ["layers: config/x.c (config) calls core/a.c (core): u",
            "layers: file circle: core/a.c, core/b.c, core/c.c"]
    got = [e.split("\n")[0] for e in rep.errors]
    ok = got == want and ("circle", "storage/cuda_storage.c", "storage/cuda_vm.c") in rep.used
    ok = ok and allowed("front", "core") and not allowed("config", "storage")
    ok = ok and not allowed("storage", "config") and allowed("cli", "base")
    print("check-layers self-test:", "ok" if ok else f"FAILED: {got}")
    return 0 if ok else 1


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    if len(argv) != 3:
        print("usage: check-layers.py SOURCE_DIR BUILD_DIR", file=sys.stderr)
        return 2
    src_dir, build_dir = os.path.abspath(argv[1]), os.path.abspath(argv[2])
    objs = objects(build_dir, src_dir)
    if not objs:
        print(f"check-layers: no object files under {build_dir} (build first)")
        return 77
    rep = Report()
    check_includes(src_dir, rep)
    graph, _ = call_graph(objs)
    check_calls(graph, rep)
    check_circles(graph, rep)
    check_exports(build_dir, objs, rep)
    for key in sorted(set(ALLOW) - rep.used):
        rep.errors.append(f"layers: stale allowlist entry {key} ({ALLOW[key]}): remove it")
    for e in rep.errors:
        print(e)
    nedges = sum(len(v) for v in graph.values())
    print(f"check-layers: {len(objs)} objects, {nedges} file edges, {len(rep.used)} allowed "
          f"known violations, {len(rep.errors)} violations")
    return 1 if rep.errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
