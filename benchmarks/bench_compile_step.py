"""``torch.compile(optimizer.step)`` against the eager step: time per step and the gap after 30 steps.

Each optimizer steps a 64-256-256-8 tanh MLP on batches of 512 rows, eagerly and with its ``step``
compiled, from the same start; printed: the median step time of the last 20 steps of each (one
thread), their ratio, and the relative parameter gap after 30 steps. Usage::

    python benchmarks/bench_compile_step.py [--steps 30]
"""

from __future__ import annotations

import argparse
import time
import warnings

import torch
import torch.nn.functional as F
from torch import nn

from isolab import IsoAdam, Muon, SignSGD


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 256), nn.Tanh(), nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, 8))


def run(cls, kw, compiled, steps):
    torch._dynamo.reset()
    model = mlp()
    opt = cls(model, **kw)
    step = torch.compile(opt.step) if compiled else opt.step
    times = []
    for s in range(steps):
        g = torch.Generator().manual_seed(s)
        x, y = torch.randn(512, 64, generator=g), torch.randn(512, 8, generator=g)
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    late = sorted(times[steps - 20:])
    return late[len(late) // 2], torch.cat([p.detach().flatten() for p in model.parameters()])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    print(f"{'optimizer':10} {'eager ms':>9} {'compiled ms':>12} {'ratio':>6} {'gap':>8}")
    for cls, kw in ((SignSGD, dict(lr=1e-3)), (Muon, dict(lr=0.02)), (IsoAdam, dict(lr=1e-3))):
        eager, a = run(cls, kw, False, args.steps)
        compiled, b = run(cls, kw, True, args.steps)
        gap = float((a - b).norm() / a.norm())
        print(f"{cls.__name__:10} {eager * 1e3:9.2f} {compiled * 1e3:12.2f} {compiled / eager:6.2f} {gap:8.1e}")


if __name__ == "__main__":
    main()
