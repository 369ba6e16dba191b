#!/usr/bin/env python3
"""Differential test of cubemem's TOML reader against Python's tomllib.

usage: toml_differential.py CUBEMEM [--docs N] [--seed S] [--keep DIR]

Generates N documents (default 3000, fixed seed) from a TOML 1.0 grammar -
every value type and notation, keys of every kind, tables, arrays of tables,
inline tables, comments, CRLF - and mutates about half of them (characters
deleted, inserted, replaced, lines duplicated or swapped), which gives a mix
of valid and invalid documents. Each document goes through
`CUBEMEM toml2json` (on stdin) and tomllib.loads. The two must agree on
accepting it, and on the decoded data when both accept.

A disagreement is a failure unless it is one of the KNOWN deviations below;
each is a documented difference where tomllib departs from TOML 1.0 or the
specification leaves the choice open (see docs/reliability.md). The
generator marks documents that use such a construct, and the known outcome
is asserted for them (so a deviation that goes away is noticed too).

Exit status: 0 all agree, 1 a disagreement (the document is printed and
saved under --keep), 77 tomllib missing (python3 < 3.11).
"""
import argparse
import datetime as dt
import json
import math
import os
import random
import subprocess
import sys

try:
    import tomllib
except ImportError:  # python3 < 3.11
    print("skip: tomllib missing (python3 >= 3.11 needed, found %s)" % sys.version.split()[0])
    sys.exit(77)

# name -> (cubemem accepts, tomllib accepts, why). Applied to documents the
# generator tagged with the name (and not mutated).
KNOWN = {
    "leap-second": (True, False,
                    "TOML 1.0 takes RFC 3339 times, where second 60 is valid; tomllib builds "
                    "datetime objects, which have no leap seconds"),
    "year-zero": (True, False,
                  "RFC 3339 years run 0000-9999; Python's datetime starts at year 1"),
    "int-out-of-range": (False, True,
                         "TOML 1.0: an integer that is not a lossless 64-bit value must be "
                         "an error; tomllib returns a Python int of any size"),
    "dotted-into-implicit": (False, True,
                             "[a.b.c] then [a] then b.d = 1: TOML 1.0 lets dotted keys define "
                             "only tables not created before (toml-test "
                             "append-with-dotted-keys); tomllib lets them add to a table a "
                             "header created implicitly"),
}


class Gen:
    def __init__(self, rnd):
        self.r = rnd
        self.tags = set()

    def ch(self, seq):
        return self.r.choice(seq)

    # ---- keys
    def bare_key(self):
        alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-"
        return "".join(self.ch(alphabet) for _ in range(self.r.randint(1, 6)))

    def key_part(self):
        k = self.r.random()
        if k < 0.7:
            return self.bare_key()
        if k < 0.85:
            return '"' + self.basic_body(6, allow_nl=False) + '"'
        return "'" + self.literal_body(6) + "'"

    def key(self, dotted=True):
        parts = [self.key_part()]
        while dotted and self.r.random() < 0.2 and len(parts) < 3:
            parts.append(self.key_part())
        sep = self.ch([".", " . ", ". ", " ."])
        return sep.join(parts)

    # ---- strings
    def basic_body(self, n, allow_nl):
        out = []
        for _ in range(self.r.randint(0, n)):
            k = self.r.random()
            if k < 0.6:
                out.append(self.ch("abc XYZ 019 #=[]{},.'"))
            elif k < 0.75:
                out.append(self.ch(["\\n", "\\t", "\\\\", '\\"', "\\b", "\\f", "\\r"]))
            elif k < 0.85:
                cp = self.ch([0x41, 0xE9, 0x3B1, 0x20AC, 0x1F600, 0x10FFFF, 0x7F, 0x1F, 0])
                out.append("\\u%04X" % cp if cp < 0x10000 and self.r.random() < 0.5
                           else "\\U%08X" % cp)
            elif k < 0.95:
                out.append(self.ch(["é", "€", "α", "😀", "\u3000"]))
            elif allow_nl:
                out.append(self.ch(["\n", "\\\n   ", '"', '""']))
        return "".join(out)

    def literal_body(self, n):
        return "".join(self.ch("abc XYZ 019 #=[]{},.\"\\é€") for _ in range(self.r.randint(0, n)))

    def string(self):
        k = self.r.random()
        if k < 0.4:
            return '"' + self.basic_body(10, False) + '"'
        if k < 0.7:
            return "'" + self.literal_body(10) + "'"
        if k < 0.9:
            body = self.basic_body(12, True)
            if body.endswith('"') or body.endswith("\\"):
                body += "x"
            return '"""' + self.ch(["", "\n"]) + body + '"""'
        body = self.literal_body(12).replace("'''", "''")
        if body.endswith("'"):
            body += "x"
        return "'''" + self.ch(["", "\n"]) + body + "'''"

    # ---- numbers
    def underscored(self, digits):
        if len(digits) > 1 and self.r.random() < 0.3:
            i = self.r.randint(1, len(digits) - 1)
            return digits[:i] + "_" + digits[i:]
        return digits

    def integer(self):
        k = self.r.random()
        if k < 0.5:
            v = self.ch([0, 1, 7, 42, 1000, 2 ** 31, 2 ** 63 - 1, self.r.randint(0, 10 ** 12)])
            s = self.underscored(str(v))
            return self.ch(["", "+", "-"]) + s
        if k < 0.6:
            return "-9223372036854775808"
        if k < 0.65:
            self.tags.add("int-out-of-range")
            return self.ch(["9223372036854775808", "-9223372036854775809",
                            "18446744073709551616"])
        v = self.r.randint(0, 2 ** 32)
        base = self.ch(["x", "o", "b"])
        digits = {"x": "%x" % v, "o": "%o" % v, "b": "{:b}".format(v)}[base]
        if base == "x" and self.r.random() < 0.5:
            digits = digits.upper()
        return "0" + base + self.underscored(digits)

    def float_(self):
        k = self.r.random()
        if k < 0.15:
            return self.ch(["", "+", "-"]) + self.ch(["inf", "nan"])
        ip = self.underscored(str(self.r.randint(0, 99999)))
        sign = self.ch(["", "+", "-"])
        frac = "." + self.underscored(str(self.r.randint(0, 999999))) if self.r.random() < 0.8 else ""
        exp = ""
        if not frac or self.r.random() < 0.4:
            exp = self.ch(["e", "E"]) + self.ch(["", "+", "-"]) + str(self.r.randint(0, 300))
        return sign + ip + frac + exp

    # ---- date-times
    def time_part(self):
        h, m = self.r.randint(0, 23), self.r.randint(0, 59)
        s = self.r.randint(0, 59)
        if self.r.random() < 0.02:
            s = 60
            self.tags.add("leap-second")
        t = "%02d:%02d:%02d" % (h, m, s)
        if self.r.random() < 0.5:
            n = self.ch([1, 3, 6, 7, 9, 12, 40, 70, 200])
            t += "." + "".join(self.ch("0123456789") for _ in range(n))
        return t

    def date_part(self):
        y = self.r.randint(1, 9999)
        if self.r.random() < 0.02:
            y = 0
            self.tags.add("year-zero")
        m = self.r.randint(1, 12)
        d = self.r.randint(1, 28)
        if m == 2 and self.r.random() < 0.2 and (y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)):
            d = 29
        return "%04d-%02d-%02d" % (y, m, d)

    def datetime(self):
        k = self.r.random()
        if k < 0.2:
            return self.date_part()
        if k < 0.35:
            return self.time_part()
        s = self.date_part() + self.ch(["T", "t", " "]) + self.time_part()
        if k < 0.6:
            return s
        if self.r.random() < 0.4:
            return s + self.ch(["Z", "z"])
        return s + "%s%02d:%02d" % (self.ch("+-"), self.r.randint(0, 23), self.r.randint(0, 59))

    # ---- composite values
    def value(self, depth=0):
        k = self.r.random()
        if depth < 3 and k < 0.12:
            return self.array(depth + 1)
        if depth < 3 and k < 0.2:
            return self.inline_table(depth + 1)
        k = self.r.random()
        if k < 0.25:
            return self.string()
        if k < 0.5:
            return self.integer()
        if k < 0.65:
            return self.float_()
        if k < 0.72:
            return self.ch(["true", "false"])
        return self.datetime()

    def ws(self):
        return self.ch(["", " ", "\t", "  "])

    def array(self, depth):
        items = [self.value(depth) for _ in range(self.r.randint(0, 4))]
        out = "["
        for i, it in enumerate(items):
            out += self.ch(["", " ", "\n  ", " # c\n "]) + it
            if i + 1 < len(items) or self.r.random() < 0.3:
                out += ","
        return out + self.ch(["", " ", "\n"]) + "]"

    def inline_table(self, depth):
        keys, pairs = set(), []
        for _ in range(self.r.randint(0, 3)):
            k = self.key(dotted=False)
            if k in keys:
                continue
            keys.add(k)
            pairs.append(k + self.ws() + "=" + self.ws() + self.value(depth))
        return "{" + self.ws() + ", ".join(pairs) + self.ws() + "}"

    # ---- documents
    def document(self):
        lines, used, headers = [], set(), set()

        def keyval():
            k = self.key()
            while k in used:
                k = self.key()
            used.add(k)
            return k + self.ws() + "=" + self.ws() + self.value()

        for _ in range(self.r.randint(0, 4)):
            lines.append(keyval())
        for _ in range(self.r.randint(0, 4)):
            used = set()
            k = self.r.random()
            if k < 0.05:
                # a dotted key into a table that a header created implicitly
                a, b = self.bare_key() + "q", self.bare_key() + "r"
                lines += ["[%s.%s.c]" % (a, b), "[%s]" % a, "%s.d = 1" % b]
                self.tags.add("dotted-into-implicit")
                continue
            name = self.key()
            while name in headers:
                name = self.key()
            headers.add(name)
            if k < 0.25:
                lines.append("[[" + name + "]]")
                headers.discard(name)  # may repeat
            else:
                lines.append("[" + self.ws() + name + self.ws() + "]")
            for _ in range(self.r.randint(0, 3)):
                lines.append(keyval())
        out = []
        for ln in lines:
            if self.r.random() < 0.1:
                out.append(self.ch(["", "# comment", "  # ", "\t"]))
            out.append(ln + (self.ch(["", " # trailing", "  "]) if self.r.random() < 0.2 else ""))
        nl = "\r\n" if self.r.random() < 0.1 else "\n"
        return nl.join(out) + (nl if self.r.random() < 0.8 else "")


def mutate(rnd, text):
    b = bytearray(text.encode("utf-8"))
    for _ in range(rnd.randint(1, 3)):
        k = rnd.random()
        if not b:
            b += b"="
            continue
        i = rnd.randrange(len(b))
        if k < 0.3:
            del b[i]
        elif k < 0.6:
            b.insert(i, ord(rnd.choice("=[]{}\"',.#\n\\ \t_+-:0aTZe")))
        elif k < 0.75:
            b[i] = rnd.choice(b"=[]{}\"',.#\n \x00\x7f\x01")
        elif k < 0.85:
            b[i:i] = rnd.choice([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\r"])
        else:
            lines = bytes(b).split(b"\n")
            j = rnd.randrange(len(lines))
            if rnd.random() < 0.5:
                lines.insert(j, lines[j])
            else:
                lines[j], lines[-1] = lines[-1], lines[j]
            b = bytearray(b"\n".join(lines))
    return bytes(b)


# ---- decoding both sides into comparable Python values

def from_tagged(node):
    if isinstance(node, list):
        return [from_tagged(x) for x in node]
    if isinstance(node, dict) and set(node) == {"type", "value"} and isinstance(node["value"], str):
        t, v = node["type"], node["value"]
        if t == "string":
            return v
        if t == "integer":
            return int(v)
        if t == "float":
            return float(v)
        if t == "bool":
            return v == "true"
        if t in ("datetime", "datetime-local"):
            return dt.datetime.fromisoformat(v)
        if t == "date-local":
            return dt.date.fromisoformat(v)
        if t == "time-local":
            return dt.time.fromisoformat(v)
        raise ValueError("unknown tag %r" % t)
    return {k: from_tagged(v) for k, v in node.items()}


def same(a, b):
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, (dt.datetime, dt.time)):
        # cubemem keeps nanoseconds, tomllib microseconds; both truncate
        return a == b and a.utcoffset() == b.utcoffset()
    return a == b


def leaves(v):
    if isinstance(v, dict):
        if set(v) == {"type", "value"} and isinstance(v["value"], str):
            yield v
        else:
            for x in v.values():
                yield from leaves(x)
    elif isinstance(v, list):
        for x in v:
            yield from leaves(x)


def py_leaves(v):
    if isinstance(v, dict):
        for x in v.values():
            yield from py_leaves(x)
    elif isinstance(v, list):
        for x in v:
            yield from py_leaves(x)
    else:
        yield v


def classify(c_ok, c_val, c_err, p_ok, p_val):
    """The KNOWN deviation that explains a disagreement, or None."""
    if c_ok and not p_ok:
        for leaf in leaves(c_val):
            if leaf["type"] in ("datetime", "datetime-local", "time-local"):
                t = leaf["value"].split("T")[-1] if leaf["type"] != "time-local" else leaf["value"]
                if t[6:8] == "60":
                    return "leap-second"
            if leaf["type"] in ("datetime", "datetime-local", "date-local"):
                if leaf["value"].startswith("0000-"):
                    return "year-zero"
    if p_ok and not c_ok:
        if "does not fit in 64 bits" in c_err and any(
                isinstance(x, int) and not isinstance(x, bool) and
                not -2 ** 63 <= x < 2 ** 63 for x in py_leaves(p_val)):
            return "int-out-of-range"
        if "created implicitly by a [header]" in c_err:
            return "dotted-into-implicit"
    return None


def run_cubemem(cmd, data):
    p = subprocess.run(cmd, input=data, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=60)
    if p.returncode == 0:
        return True, json.loads(p.stdout.decode("utf-8")), ""
    if p.returncode == 1 and p.stderr.startswith(b"toml2json: "):
        return False, None, p.stderr.decode("utf-8", "replace").strip()
    raise RuntimeError("toml2json exited %d: %r" % (p.returncode, p.stderr[:300]))


def run_tomllib(data):
    try:
        return True, tomllib.loads(data.decode("utf-8")), ""
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, ValueError) as e:
        return False, None, str(e)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cubemem")
    ap.add_argument("--docs", type=int, default=int(os.environ.get("CM_TOML_DIFF_DOCS", "3000")))
    ap.add_argument("--seed", type=int, default=int(os.environ.get("CM_TOML_DIFF_SEED", "20261201")))
    ap.add_argument("--keep", default=None)
    args = ap.parse_args()
    cmd = [args.cubemem, "toml2json"]
    rnd = random.Random(args.seed)
    stats = {"valid": 0, "invalid": 0, "deviation": 0}
    seen_dev = {k: 0 for k in KNOWN}
    failures = 0
    for n in range(args.docs):
        g = Gen(rnd)
        text = g.document()
        mutated = rnd.random() < 0.5
        data = mutate(rnd, text) if mutated else text.encode("utf-8")
        c_ok, c_val, c_err = run_cubemem(cmd, data)
        p_ok, p_val, p_err = run_tomllib(data)
        problem = None
        devs = sorted(g.tags) if not mutated else []
        dev = classify(c_ok, c_val, c_err, p_ok, p_val) if c_ok != p_ok else None
        if devs and not (c_ok or p_ok):
            stats["invalid"] += 1  # invalid for another reason too (generated keys collide)
        elif devs:
            # a generated document using a known deviation: the documented outcome
            want_c = all(KNOWN[d][0] for d in devs)
            want_p = all(KNOWN[d][1] for d in devs)
            if (c_ok, p_ok) != (want_c, want_p) or dev not in devs:
                problem = "known deviation %s: expected cubemem %s / tomllib %s" % (
                    ",".join(devs), want_c, want_p)
        elif c_ok != p_ok and dev is None:
            problem = "cubemem %s, tomllib %s" % ("accepts" if c_ok else "rejects",
                                                   "accepts" if p_ok else "rejects")
        elif c_ok != p_ok:
            pass  # a mutation produced a known deviation
        elif c_ok:
            stats["valid"] += 1
            if not same(from_tagged(c_val), p_val):
                problem = "both accept, different data"
        else:
            stats["invalid"] += 1
        if dev and not problem:
            stats["deviation"] += 1
            seen_dev[dev] += 1
        if problem:
            failures += 1
            print("DISAGREE doc %d (%s): %s" % (n, "mutated" if mutated else "generated", problem))
            print("  document: %r" % data[:600])
            print("  cubemem: %s" % (c_err or json.dumps(c_val)[:400]))
            print("  tomllib: %s" % (p_err or repr(p_val)[:400]))
            if args.keep:
                os.makedirs(args.keep, exist_ok=True)
                with open(os.path.join(args.keep, "disagree-%d.toml" % n), "wb") as f:
                    f.write(data)
            if failures >= 20:
                break
    print("%d documents (seed %d): %d valid, %d invalid agreed; %d with a known deviation %s; "
          "%d disagreements" % (args.docs, args.seed, stats["valid"], stats["invalid"],
                                stats["deviation"], json.dumps(seen_dev), failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
