"""Step time and state memory of isolab's optimizers, as ratios to torch.optim.Adam.

Run:  python benchmarks/bench_optimizers.py [--quick] [--widths 256 1024] [--repeats 5]

What is measured, on the current device (CUDA, else MPS, else CPU):

- Square ``nn.Linear`` stacks (``--layers`` layers of width w, ``--rows`` rows per batch)
  and a small pre-norm Transformer block (d=256, 4 heads, MLP 4x, seq 128, batch 8).
- For each optimizer: ``step`` = time of ``optimizer.step()``; ``overhead`` = time of a
  full iteration (zero_grad, forward, backward, step) minus the forward+backward time of
  the same model without any optimizer hooks. ``overhead`` is the honest cost of Iso and
  IsoAdam, whose covariance products run inside backward hooks, outside ``step()``.
- One repeat = ``--block`` consecutive iterations (default 10, so that refresh-every-10
  optimizers are timed with their refresh amortized); the time per iteration of a repeat is
  the block's mean; the reported number is the median over ``--repeats`` repeats, after
  ``--warmup`` warm-up iterations. On a shared CPU pass ``--threads 1`` for stable numbers.
- ``state`` = bytes of the tensors in ``optimizer.state`` after the run.

Targets (from issue 3), printed with PASS/FAIL:

1. Iso refreshing statistics and roots every step: overhead no larger than Muon's at the
   same shapes (``Iso[every step, newton]`` vs ``Muon``).
2. Iso with statistics and roots refreshed every 10 steps: overhead at most 15% of the
   block's forward+backward.
3. IsoAdam's state at most Adam's plus ``n² + m²`` elements per whitened matrix.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

from isolab.optim import Iso, IsoAdam, Muon, Shampoo, SignSGD


def pick_device(name: str | None) -> torch.device:
    if name:
        return torch.device(name)
    if torch.cuda.is_available():
        return torch.device("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()
    elif device.type == "mps":
        torch.mps.synchronize()


class Block(nn.Module):
    """Pre-norm Transformer block built from nn.Linear layers (hookable, unlike nn.MultiheadAttention)."""

    def __init__(self, d=256, heads=4, mlp=4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.fc1 = nn.Linear(d, mlp * d)
        self.fc2 = nn.Linear(mlp * d, d)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


def square_stack(width, layers):
    mods = []
    for i in range(layers):
        mods.append(nn.Linear(width, width, bias=False))
        if i < layers - 1:
            mods.append(nn.ReLU())
    return nn.Sequential(*mods)


OPTIMIZERS = {
    "Adam": lambda m: torch.optim.Adam(m.parameters(), lr=1e-4),
    "SignSGD": lambda m: SignSGD(m, lr=1e-4, momentum=0.9),
    "Muon": lambda m: Muon(m, lr=1e-3, adam_lr=1e-4),
    "Shampoo[roots/10]": lambda m: Shampoo(m, lr=1e-3, root_interval=10, adam_lr=1e-4),
    "Iso[every step, newton]": lambda m: Iso(
        m, lr=1e-3, stat_interval=1, root_interval=1, root_method="newton", adam_lr=1e-4
    ),
    "Iso[every step, eigh]": lambda m: Iso(m, lr=1e-3, stat_interval=1, root_interval=1, root_method="eigh", adam_lr=1e-4),
    "Iso[every 10, eigh]": lambda m: Iso(m, lr=1e-3, stat_interval=10, root_interval=10, adam_lr=1e-4),
    "IsoAdam[every step, newton]": lambda m: IsoAdam(m, lr=1e-4, stat_interval=1, root_interval=1, root_method="newton"),
    "IsoAdam[every 10, eigh]": lambda m: IsoAdam(m, lr=1e-4, stat_interval=10, root_interval=10),
    "IsoAdam[every step, eigh]": lambda m: IsoAdam(m, lr=1e-4, stat_interval=1, root_interval=1),
}


def time_run(model, make_opt, inputs, target, device, args):
    """Return (median iteration time, median step time, state bytes, state numel, optimizer)."""
    opt = make_opt(model) if make_opt is not None else None
    it_times, step_times = [], []
    for rep in range(1 + args.repeats):
        t_it = t_step = 0.0
        for _ in range(args.warmup if rep == 0 else args.block):
            sync(device)
            t0 = time.perf_counter()
            if opt is not None:
                opt.zero_grad(set_to_none=True)
            else:
                model.zero_grad(set_to_none=True)
            loss = F.mse_loss(model(inputs).float(), target)
            loss.backward()
            sync(device)
            t1 = time.perf_counter()
            if opt is not None:
                opt.step()
            sync(device)
            t2 = time.perf_counter()
            t_it += t2 - t0
            t_step += t2 - t1
        if rep >= 1:
            it_times.append(t_it / args.block)
            step_times.append(t_step / args.block)
    state_bytes = state_numel = 0
    if opt is not None:
        for st in opt.state.values():
            for v in st.values():
                if isinstance(v, torch.Tensor):
                    state_bytes += v.numel() * v.element_size()
                    state_numel += v.numel()
        if hasattr(opt, "remove_hooks"):
            opt.remove_hooks()
    return statistics.median(it_times), statistics.median(step_times), state_bytes, state_numel, opt


def matrix_shapes(model):
    return [tuple(m.weight.shape) for m in model.modules() if isinstance(m, nn.Linear)]


def bench_case(title, make_model, make_batch, device, args, names):
    print(f"\n## {title}")
    torch.manual_seed(0)
    inputs, target = make_batch()
    # forward+backward without any optimizer (no hooks)
    model = make_model().to(device)
    fb, _, _, _, _ = time_run(model, None, inputs, target, device, args)
    print(f"forward+backward: {fb * 1e3:.2f} ms")
    rows = {}
    for name in names:
        torch.manual_seed(0)
        model = make_model().to(device)
        it, st, nbytes, numel, opt = time_run(model, OPTIMIZERS[name], inputs, target, device, args)
        rows[name] = dict(iter=it, step=st, overhead=max(it - fb, 0.0), bytes=nbytes, numel=numel)
    adam = rows["Adam"]
    print(f"{'optimizer':30s} {'step ms':>9s} {'overhead ms':>12s} {'overhead/Adam':>14s} {'ovh/fwd+bwd':>12s} {'state MiB':>10s} {'state/Adam':>11s}")
    for name, r in rows.items():
        ratio = r["overhead"] / adam["overhead"] if adam["overhead"] > 0 else math.nan
        mem = r["bytes"] / adam["bytes"] if adam["bytes"] else math.nan
        print(
            f"{name:30s} {r['step'] * 1e3:9.2f} {r['overhead'] * 1e3:12.2f} {ratio:14.2f} "
            f"{r['overhead'] / fb:12.1%} {r['bytes'] / 2**20:10.2f} {mem:11.2f}"
        )
    return fb, rows, matrix_shapes(make_model())


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="width 256 only, fewer repeats (< 60 s on a 2-core CPU)")
    p.add_argument("--widths", type=int, nargs="*", default=None, help="square layer widths (default 256 1024, +4096 on GPU)")
    p.add_argument("--layers", type=int, default=2, help="layers in each square stack")
    p.add_argument("--rows", type=int, default=None, help="rows per batch for the square stacks (default 1024; 512 with --quick)")
    p.add_argument("--batch", type=int, default=None, help="Transformer block batch (default 8; 2 with --quick)")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (CPU)")
    p.add_argument("--repeats", type=int, default=None, help="timed repeats (blocks), median reported")
    p.add_argument("--warmup", type=int, default=3, help="warm-up iterations before the timed blocks")
    p.add_argument("--block", type=int, default=10, help="iterations per block (refresh-every-10 is amortized)")
    p.add_argument("--device", default=None, help="force a device (cpu, cuda, mps)")
    p.add_argument("--no-block", action="store_true", help="skip the Transformer block")
    args = p.parse_args(argv)
    device = pick_device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.rows is None:
        args.rows = 512 if args.quick else 1024
    if args.batch is None:
        args.batch = 2 if args.quick else 8
    if args.widths is None:
        args.widths = [256] if args.quick else [256, 1024] + ([4096] if device.type != "cpu" else [])
    if args.repeats is None:
        args.repeats = 2 if args.quick else 5
    print(f"device: {device}  torch {torch.__version__}  threads {torch.get_num_threads()}")
    print(f"{args.warmup} warm-up iterations, then {args.repeats} repeats of {args.block} iterations; median of the repeats' means")
    verdicts = []

    for w in args.widths:
        names = list(OPTIMIZERS)
        if w > 1024 or (w > 256 and device.type == "cpu"):
            # an eigh per layer side per step: informative only at 256
            names.remove("Iso[every step, eigh]")
            names.remove("IsoAdam[every step, eigh]")
        _, rows, shapes = bench_case(
            f"{args.layers} x Linear({w}, {w}), {args.rows} rows",
            lambda: square_stack(w, args.layers),
            lambda: (torch.randn(args.rows, w, device=device), torch.randn(args.rows, w, device=device)),
            device, args, names,
        )
        iso, muon = rows["Iso[every step, newton]"], rows["Muon"]
        ok = iso["overhead"] <= muon["overhead"]
        verdicts.append((f"width {w}: Iso every-step overhead {iso['overhead'] * 1e3:.2f} ms <= Muon {muon['overhead'] * 1e3:.2f} ms", ok))
        budget = rows["Adam"]["numel"] + sum(n * n + m * m for (m, n) in shapes)
        for key in ("IsoAdam[every 10, eigh]", "IsoAdam[every step, newton]", "IsoAdam[every step, eigh]"):
            r = rows.get(key)
            if r is None:
                continue
            verdicts.append((f"width {w}: {key} state {r['numel']} <= Adam + n²+m² = {budget} elements", r["numel"] <= budget))

    if not args.no_block:
        d, seq, batch = 256, 128, args.batch
        fb, rows, shapes = bench_case(
            f"Transformer block d={d}, 4 heads, MLP 4x, seq {seq}, batch {batch}",
            lambda: Block(d),
            lambda: (torch.randn(batch, seq, d, device=device), torch.randn(batch, seq, d, device=device)),
            device, args,
            ["Adam", "Muon", "Iso[every step, newton]", "Iso[every 10, eigh]", "IsoAdam[every 10, eigh]"],
        )
        r = rows["Iso[every 10, eigh]"]
        verdicts.append((f"block: Iso every-10 overhead {r['overhead'] / fb:.1%} of fwd+bwd <= 15%", r["overhead"] <= 0.15 * fb))
        iso, muon = rows["Iso[every step, newton]"], rows["Muon"]
        verdicts.append((f"block: Iso every-step overhead {iso['overhead'] * 1e3:.2f} ms <= Muon {muon['overhead'] * 1e3:.2f} ms", iso["overhead"] <= muon["overhead"]))
        budget = rows["Adam"]["numel"] + sum(n * n + m * m for (m, n) in shapes)
        r = rows["IsoAdam[every 10, eigh]"]
        verdicts.append((f"block: IsoAdam[every 10] state {r['numel']} <= Adam + n²+m² = {budget} elements", r["numel"] <= budget))

    print("\n## Targets")
    for text, ok in verdicts:
        print(f"{'PASS' if ok else 'FAIL'}  {text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
