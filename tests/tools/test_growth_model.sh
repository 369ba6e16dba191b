#!/usr/bin/env bash
# test_growth_model.sh BUILD SOURCE SHARED - bench/growth_model.py, the model
# and the lower bound behind bench/floor:
#  - on a hand-worked trace, the model's growths and peak, and the bound's
#    forced growths at three values of e;
#  - on every shared trace (skipped, saying so, when ../shared is absent):
#    the bound never exceeds the calls of the model allocator, which is one of
#    the allocators it bounds (it holds at most (1 + f) x the running peak,
#    rounded up to a granule); it never rises with e; eps_for meets its target.
set -euo pipefail
src=${2:-$(cd "$(dirname "$0")/../.." && pwd)}
shared=${3:-$src/../shared}
command -v python3 >/dev/null || { echo "SKIP: python3 is missing"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
MiB=$((1 << 20))
{
  echo "Thread,Time,Action,Pointer,Size,Stream"
  echo "1,00:00:00.000001,allocate,0xa,$MiB,0x0"       # new peak 1 MiB: nothing held, a growth
  echo "1,00:00:00.000002,allocate,0xb,$MiB,0x0"       # 2 MiB: inside the granule held
  echo "1,00:00:00.000003,allocate,0xc,$((4 * MiB)),0x0" # 6 MiB: past 2 MiB x (1 + e) rounded up
  echo "1,00:00:00.000004,free,0xc,$((4 * MiB)),0x0"
  echo "1,00:00:00.000005,allocate,0xd,$((3 * MiB)),0x0" # 5 MiB: below the peak
} >"$tmp/t.csv"
PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="$src/bench" python3 - "$tmp/t.csv" "$shared/traces" <<'PY'
import glob, math, os, sys
from growth_model import model, forced_calls, eps_for

bad = 0
def check(what, got, want):
    global bad
    ok = math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12)
    print(("ok   " if ok else "FAIL ") + f"{what}: {got} (expected {want})")
    bad += not ok

t = sys.argv[1]
calls, ratio = model(t, 0.0)
check("model f=0: calls per allocation (2 growths, 1 reservation, 4 allocations)", calls, 7 / 4)
check("model f=0: peak held / peak live", ratio, 1.0)
check("bound e=0: forced growths 2", forced_calls(t, 0.0), 7 / 4)
check("bound e=0.0001: 2 MiB x 1.0001 rounds up to 4 MiB, 6 MiB still forces", forced_calls(t, 1e-4), 7 / 4)
check("bound e=2: 2 MiB x 3 = 6 MiB covers the third allocation", forced_calls(t, 2.0), 4 / 4)
check("eps_for a target the trace meets at e=0", eps_for(t, target=2.0), 0.0)
# beyond the first bracket [0, 1]: any e > 1 rounds 2 MiB x (1 + e) up to 6 MiB
e = eps_for(t, target=1.0)
check("eps_for(1.0) reaches the target", float(forced_calls(t, e) <= 1.0), 1.0)
check("eps_for(1.0) is the smallest e to 1e-4", float(forced_calls(t, max(e - 2e-4, 0)) > 1.0), 1.0)
check("eps_for(1.0) is just above 1", float(1.0 < e <= 1.0 + 1e-4), 1.0)
check("eps_for of a target no e reaches", eps_for(t, target=0.5), math.inf)

root = sys.argv[2]
paths = sorted(glob.glob(os.path.join(root, "*", "*.csv")))
if not paths:
    print(f"note: {root} is absent: the shared-trace checks are skipped")
for p in paths:
    name = os.path.relpath(p, root)
    prev = None
    for f in (0.0, 0.0005, 0.002, 0.008):
        b, (m, _) = forced_calls(p, f), model(p, f)
        if b > m + 1e-12:
            print(f"FAIL {name}: bound {b} above the model allocator's {m} at e={f}")
            bad += 1
        if prev is not None and b > prev + 1e-12:
            print(f"FAIL {name}: bound rises with e ({prev} -> {b} at e={f})")
            bad += 1
        prev = b
    print(f"ok   {name}: bound <= model, non-increasing in e")
sys.exit(1 if bad else 0)
PY
