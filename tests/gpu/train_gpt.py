#!/usr/bin/env python3
"""train_gpt.py - a small GPT-style training loop for comparing allocators.

Run once per allocator, each in its own process (PyTorch's allocator can only
be replaced before the first CUDA allocation):

    python3 tests/gpu/train_gpt.py --allocator torch   --out torch.json
    python3 tests/gpu/train_gpt.py --allocator cubemem --lib build/libcubemem_torch.so \
        --out cubemem.json

The model (token + position embeddings, pre-norm decoder blocks with causal
self-attention written out with matmuls, GELU MLP, tied output head) is built
from torch.nn with a fixed seed; the batches are random tokens from a fixed CPU
generator; the optimizer is AdamW. Deterministic algorithms are requested and
TF32 is off, so both runs compute the same losses. The JSON written has the
per-step losses and times, the median step time after warm-up, and the peak
memory reserved from the device: torch.cuda.max_memory_reserved() for
PyTorch's allocator, cubemem's own high-water mark (cubemem_torch_peak_reserved)
for cubemem.
"""
import argparse
import ctypes
import json
import math
import os
import statistics
import sys
import time

# Must be set before CUDA initialises for deterministic cuBLAS.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--allocator", choices=["torch", "cubemem"], required=True)
    p.add_argument("--lib", help="path of libcubemem_torch.so (cubemem)")
    p.add_argument("--out", required=True, help="JSON result file")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--batch", type=int, default=16)
    return p.parse_args()


def main():
    args = parse()
    import torch

    lib = None
    if args.allocator == "cubemem":
        if not args.lib:
            sys.exit("--lib is required with --allocator cubemem")
        path = os.path.abspath(args.lib)
        mem = torch.cuda.memory
        pluggable = getattr(mem, "CUDAPluggableAllocator", None) or torch.cuda.CUDAPluggableAllocator
        alloc = pluggable(path, "cubemem_torch_malloc", "cubemem_torch_free")
        mem.change_current_allocator(alloc)
        lib = ctypes.CDLL(path)  # same handle as the one PyTorch opened
        lib.cubemem_torch_peak_reserved.restype = ctypes.c_ulonglong
        lib.cubemem_torch_peak_reserved.argtypes = [ctypes.c_int]
        lib.cubemem_torch_reserved.restype = ctypes.c_ulonglong
        lib.cubemem_torch_reserved.argtypes = [ctypes.c_int]
        lib.cubemem_torch_report.restype = ctypes.c_size_t
        lib.cubemem_torch_report.argtypes = [ctypes.c_char_p, ctypes.c_size_t]

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.manual_seed(args.seed)
    dev = torch.device("cuda", 0)
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self, d, h):
            super().__init__()
            self.h = h
            self.ln1 = nn.LayerNorm(d)
            self.qkv = nn.Linear(d, 3 * d)
            self.proj = nn.Linear(d, d)
            self.ln2 = nn.LayerNorm(d)
            self.fc = nn.Linear(d, 4 * d)
            self.out = nn.Linear(4 * d, d)

        def forward(self, x, mask):
            b, t, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
            q = q.view(b, t, self.h, d // self.h).transpose(1, 2)
            k = k.view(b, t, self.h, d // self.h).transpose(1, 2)
            v = v.view(b, t, self.h, d // self.h).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // self.h))
            att = att.masked_fill(mask[:, :, :t, :t] == 0, float("-inf")).softmax(dim=-1)
            y = (att @ v).transpose(1, 2).contiguous().view(b, t, d)
            x = x + self.proj(y)
            return x + self.out(torch.nn.functional.gelu(self.fc(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self, a):
            super().__init__()
            self.tok = nn.Embedding(a.vocab, a.d_model)
            self.pos = nn.Embedding(a.seq, a.d_model)
            self.blocks = nn.ModuleList(Block(a.d_model, a.heads) for _ in range(a.layers))
            self.ln = nn.LayerNorm(a.d_model)
            self.head = nn.Linear(a.d_model, a.vocab, bias=False)
            self.head.weight = self.tok.weight
            self.register_buffer("mask", torch.tril(torch.ones(a.seq, a.seq)).view(1, 1, a.seq, a.seq))

        def forward(self, idx):
            t = idx.shape[1]
            x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
            for blk in self.blocks:
                x = blk(x, self.mask)
            return self.head(self.ln(x))

    model = GPT(args).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    gen = torch.Generator().manual_seed(args.seed + 1)
    total = args.warmup + args.steps
    data = torch.randint(0, args.vocab, (total, args.batch, args.seq + 1), generator=gen)

    losses, times = [], []
    for step in range(total):
        batch = data[step].to(dev, non_blocking=False)
        x, y = batch[:, :-1], batch[:, 1:]
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, args.vocab), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        losses.append(float(loss.item()))

    res = {
        "allocator": args.allocator,
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(0),
        "params": sum(p.numel() for p in model.parameters()),
        "config": {k: getattr(args, k) for k in ("vocab", "d_model", "layers", "heads", "seq",
                                                 "batch", "steps", "warmup", "seed")},
        "losses": losses,
        "step_times_s": times,
        "median_step_s": statistics.median(times[args.warmup:]),
    }
    if lib is None:
        res["peak_reserved"] = torch.cuda.max_memory_reserved(0)
        res["peak_allocated"] = torch.cuda.max_memory_allocated(0)
        res["reserved_end"] = torch.cuda.memory_reserved(0)
    else:
        res["peak_reserved"] = lib.cubemem_torch_peak_reserved(0)
        res["reserved_end"] = lib.cubemem_torch_reserved(0)
        need = lib.cubemem_torch_report(None, 0)
        buf = ctypes.create_string_buffer(need + 1)
        lib.cubemem_torch_report(buf, need + 1)
        res["cubemem_report"] = buf.value.decode(errors="replace")
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)
    print(f"{args.allocator}: {len(losses)} steps, final loss {losses[-1]:.6f}, "
          f"median step {res['median_step_s'] * 1e3:.2f} ms, peak reserved {res['peak_reserved']}")


if __name__ == "__main__":
    main()
