#!/usr/bin/env bash
# test_growth_model.sh BUILD SOURCE SHARED - bench/growth_model.py, the model
# and the lower bounds behind bench/floor:
#  - on a hand-worked trace, the model's growths and peak, the bound's forced
#    growths at three values of e, and forced_under's at given ceilings;
#  - on every shared trace (skipped, saying so, when ../shared is absent):
#    the bound never exceeds the calls of the model allocator, which is one of
#    the allocators it bounds (it holds at most (1 + f) x the running peak,
#    rounded up to a granule), and never rises with e; forced_under with
#    PyTorch's expandable running peaks (torchsim) never exceeds the calls
#    PyTorch's expandable mode makes, since that mode is one of the allocators
#    it bounds; and the bound below both modes (bench/floor's) is at least that one.
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
from growth_model import model, forced_calls, forced_under, pytorch_run, below_pytorch_bound

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
# ceilings before each of the four allocations: 4 MiB held at most before the
# third (6 MiB live: forced), 6 MiB before the fourth (5 MiB live: not)
MiB = 1 << 20
check("forced_under: nothing held before the first", forced_under(t, [0, 2 * MiB, 4 * MiB, 6 * MiB]), 7 / 4)
check("forced_under: a ceiling rounds down to a granule (3 MiB -> 2 MiB)",
      forced_under(t, [0, 3 * MiB, 3 * MiB, 6 * MiB]), 7 / 4)
check("forced_under: 6 MiB before the third covers it", forced_under(t, [0, 2 * MiB, 6 * MiB, 6 * MiB]), 4 / 4)
check("forced_under equals forced_calls on its ceilings (e=0: running peak)",
      forced_under(t, [0, 2 * MiB, 2 * MiB, 6 * MiB]), forced_calls(t, 0.0))

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
torchsim = os.path.join(os.path.dirname(root), "tools", "torchsim")
for p in paths if os.path.isdir(torchsim) else []:
    name = os.path.relpath(p, root)
    peaks, calls = pytorch_run(p, torchsim)
    own = forced_under(p, peaks["expandable"])
    both, _ = below_pytorch_bound(p, torchsim)
    if own > calls["expandable"] + 1e-12 or both + 1e-12 < own:
        print(f"FAIL {name}: bound at PyTorch expandable's own peaks {own}, its calls "
              f"{calls['expandable']}, bound below both modes {both}")
        bad += 1
    else:
        print(f"ok   {name}: bound {own:.3f} <= PyTorch expandable's calls {calls['expandable']:.3f}; "
              f"below both modes {both:.3f}")
if paths and not os.path.isdir(torchsim):
    print(f"note: {torchsim} is absent: the PyTorch checks are skipped")
sys.exit(1 if bad else 0)
PY
