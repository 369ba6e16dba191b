#!/usr/bin/env python3
"""Extract the C examples of Markdown files as translation units.

Usage: doc_examples.py OUTDIR FILE.md...

Writes OUTDIR/example_N.c for every ```c block and prints "PATH ORIGIN" per
block (ORIGIN is FILE.md:LINE). Markers in HTML comments on the lines right
before a block (invisible when rendered):

    <!-- doctest: top -->            the block is top-level code
    <!-- doctest: no-run -->         a complete program that needs a device the
                                     test machine may lack: compiled, not run
    <!-- doctest: requires H -->     compiled only where header H is installed
    <!-- doctest-setup: CODE -->     CODE comes first (lines starting with '#'
                                     go to the top of the file)

Markers other than setup are written into the unit as `/* doctest: ... */`
comments, which the test script reads.

Used by tests/docs/test_doc_examples.sh.
"""
import os
import re
import sys

HEADERS = ["cubemem/cubemem.h", "cubemem/tools.h", "cubemem/config.h", "cubemem/toml.h", "cubemem/replay.h",
           "cubemem/cuda.h", "cubemem/ptr.h", "cubemem/device.h", "cubemem/dropqueue.h",
           "stdbool.h", "stdint.h", "stdio.h", "stdlib.h", "string.h", "sys/types.h"]


def blocks(path):
    lines = open(path, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```c":
            top, setup, flags = False, [], []
            j = i - 1
            while j >= 0 and lines[j].strip().startswith("<!--"):
                m = re.match(r"\s*<!--\s*doctest(-setup)?:\s*(.*?)\s*-->\s*$", lines[j])
                if m and m.group(1):
                    setup.insert(0, m.group(2))
                elif m and m.group(2) == "top":
                    top = True
                elif m:
                    flags.append(m.group(2))
                j -= 1
            k = i + 1
            while k < len(lines) and lines[k].strip() != "```":
                k += 1
            yield i + 1, top, setup, flags, lines[i + 1:k]
            i = k
        i += 1


def unit(top, setup, flags, body):
    out = [f"/* doctest: {f} */" for f in flags]
    out += [f"#include <{h}>" for h in HEADERS]
    hoist, rest = [], []
    for line in setup:
        (hoist if line.startswith("#") else rest).append(line)
    for line in body:
        if line.startswith("#include"):
            hoist.append(line)
        else:
            rest.append(line)
    out += hoist
    if top:
        out += rest
        out.append("int doc_example_main(void);")
        out.append("int doc_example_main(void) { return 0; }")
    else:
        out.append("int doc_example(void);")
        out.append("int doc_example(void) {")
        out += ["  " + l if l else l for l in rest]
        out.append("  return 0;")
        out.append("}")
    return "\n".join(out) + "\n"


def main():
    outdir, files = sys.argv[1], sys.argv[2:]
    n = 0
    for path in files:
        for line, top, setup, flags, body in blocks(path):
            n += 1
            name = os.path.join(outdir, f"example_{n}.c")
            with open(name, "w") as f:
                f.write(unit(top, setup, flags, body))
            print(name, f"{os.path.relpath(path)}:{line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
