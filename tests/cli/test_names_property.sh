#!/usr/bin/env bash
# test_names_property.sh - property: whatever bytes a trace's file name
# holds, `cubemem replay --svg --html --json` writes well-formed output.
# 240 random names (fixed seed; every byte but '/' and NUL, with invalid
# UTF-8, control characters, XML metacharacters and non-characters favoured),
# 8 per run, each a copy of a small trace:
#   - the SVG parses with Python's xml.etree (well-formed XML 1.0);
#   - the HTML is valid UTF-8, its embedded data parses as JSON and names
#     one trace per file, and html.parser reads the page;
#   - every line of the JSON report (--json, stdout) parses, one per file.
# Usage: bash test_names_property.sh BUILD_DIR SOURCE_DIR SHARED_DIR
# CM_NAMES_SEED=N and CM_NAMES_COUNT=N change the seed and the count.
set -u
BUILD_DIR=$(cd "${1:?build dir}" && pwd)
SRC_DIR=$(cd "${2:?source dir}" && pwd)
TOOL="$BUILD_DIR/cubemem"
[ -x "$TOOL" ] || { echo "skip: $TOOL not built"; exit 77; }
command -v python3 >/dev/null || { echo "skip: no python3"; exit 77; }
TMP=$(mktemp -d /tmp/cm_names.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
head -n 200 "$SRC_DIR/examples/torch-cpu-gpt-train.csv" >"$TMP/small.csv"

python3 - "$TOOL" "$TMP" "${CM_NAMES_SEED:-1}" "${CM_NAMES_COUNT:-240}" <<'EOF'
import html.parser, json, os, random, re, subprocess, sys, time
import xml.etree.ElementTree as ET

tool, tmp, seed, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
rng = random.Random(seed)
src = open(os.path.join(tmp, "small.csv"), "rb").read()
# bytes that break naive escaping: invalid UTF-8 leads and continuations,
# overlong and surrogate forms, U+FFFE/U+FFFF, controls, XML metacharacters
special = [b"\xff", b"\xfe", b"\x80", b"\xbf", b"\xc0\xaf", b"\xc3", b"\xe2\x82", b"\xed\xa0\x80",
           b"\xef\xbf\xbe", b"\xef\xbf\xbf", b"\xf4\x90\x80\x80", b"\xf0\x9f\x98\x80", b"\x01",
           b"\x1b", b"\x7f", b"\t", b"\n", b"\r", b"<", b">", b"&", b"\"", b"'", b"]]>", b"<!--",
           b"<script>", b"\\u003c", b"\\", b"\xc2\x85", b"\xe2\x80\xa8", b"\xc3\xa9"]

def name():
    parts = []
    for _ in range(rng.randint(1, 12)):
        if rng.random() < 0.5:
            parts.append(rng.choice(special))
        else:
            parts.append(bytes(rng.choice([b for b in range(1, 256) if b != 0x2f])
                               for _ in range(rng.randint(1, 4))))
    n = b"".join(parts)[:200]
    return n if n not in (b".", b"..") else b"x" + n

class Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags = 0
    def handle_starttag(self, tag, attrs):
        self.tags += 1

fails = 0
runs = 0
t0 = time.time()
made = 0
while made < count:
    d = os.path.join(tmp.encode(), b"r%d" % runs)
    os.mkdir(d)
    files = []
    while len(files) < 8 and made < count:
        p = os.path.join(d, name())
        if p in files:
            continue
        open(p, "wb").write(src)
        files.append(p)
        made += 1
    svg, page = (os.path.join(tmp.encode(), b"out%d" % runs + e) for e in (b".svg", b".html"))
    r = subprocess.run([tool.encode(), b"replay", b"--no-progress", b"--svg", svg, b"--html", page,
                        b"--json"] + files, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    runs += 1
    what = " ".join(repr(f) for f in files)
    if r.returncode != 0:
        print("FAIL: exit %d for %s: %s" % (r.returncode, what, r.stderr.decode(errors="replace")))
        fails += 1
        continue
    try:
        ET.parse(svg.decode(errors="surrogateescape"))
    except Exception as e:
        print("FAIL: SVG does not parse (%s) for %s" % (e, what))
        fails += 1
    try:
        text = open(page, "rb").read().decode("utf-8")
        m = re.search(r'<script type="application/json" id="cubemem-data">(.*?)</script>', text, re.S)
        data = json.loads(m.group(1))
        traces = data.get("traces", data) if isinstance(data, dict) else data
        if isinstance(traces, list) and len(traces) != len(files):
            raise ValueError("%d traces for %d files" % (len(traces), len(files)))
        p = Page()
        p.feed(text)
        p.close()
    except Exception as e:
        print("FAIL: HTML (%s) for %s" % (e, what))
        fails += 1
    try:
        lines = r.stdout.decode("utf-8").split("\n")  # not splitlines: U+0085, U+2028 are data
        objs = [json.loads(l) for l in lines if l.startswith("{")]
        if len(objs) < len(files):
            raise ValueError("%d JSON lines for %d files" % (len(objs), len(files)))
    except Exception as e:
        print("FAIL: JSON report (%s) for %s" % (e, what))
        fails += 1
print("test_names_property: %d names in %d runs, %.1f s, %d failures (seed %d)"
      % (made, runs, time.time() - t0, fails, seed))
sys.exit(1 if fails else 0)
EOF
