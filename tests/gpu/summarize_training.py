"""summarize_training.py LOGS - the training table of tests/gpu/run.sh.

Reads LOGS/{torch,cubemem-sync,cubemem-async}.json (written by
train_gpt.py), prints a markdown table (median step, peak reserved, final
loss, largest relative loss difference to PyTorch's run) and cubemem's
reports. Exit 3 when a run is missing or a loss differs by more than 1e-5.
"""
import json
import os
import sys

logs = sys.argv[1]
res = {}
for n in ("torch", "cubemem-sync", "cubemem-async"):
    p = os.path.join(logs, n + ".json")
    if os.path.exists(p):
        res[n] = json.load(open(p))
if "torch" not in res:
    print("PyTorch's run did not finish; see gpu-logs/train-torch.log")
    sys.exit(3)
t = res["torch"]
cfg = t["config"]
print(f"Model: GPT-style decoder, {t['params']:,} parameters (d_model {cfg['d_model']}, "
      f"{cfg['layers']} layers), batch {cfg['batch']} x seq {cfg['seq']}, fp32, AdamW; "
      f"{cfg['warmup']} warm-up + {cfg['steps']} timed steps; torch {t['torch']} on {t['device']}.\n")
print("| allocator | median step | peak reserved | final loss | max rel. loss diff |")
print("|---|---|---|---|---|")
bad = 0
for n, r in res.items():
    worst = max((abs(a - b) / max(abs(a), 1e-12) for a, b in zip(t["losses"], r["losses"])),
                default=float("inf"))
    ok = len(r["losses"]) == len(t["losses"]) and worst <= 1e-5
    bad += not ok
    print(f"| {n} | {r['median_step_s'] * 1e3:.2f} ms | {r['peak_reserved'] / 2**20:.1f} MiB | "
          f"{r['losses'][-1]:.6f} | {worst:.2e}{'' if ok else ' **FAIL**'} |")
missing = {"cubemem-sync", "cubemem-async"} - set(res)
if missing:
    print(f"\nmissing runs: {', '.join(sorted(missing))}")
    bad += 1
for n in ("cubemem-sync", "cubemem-async"):
    if n in res:
        print(f"\n{n}, cubemem's report at the end of training:\n\n```\n"
              f"{res[n].get('cubemem_report', '').rstrip()}\n```")
sys.exit(3 if bad else 0)
