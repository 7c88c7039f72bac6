"""Several processes with fewer rows each than the layers are wide: DDP and FSDP2 equal one
process on the whole batch (issue: a process holding few rows must not change the step).

A 16-32-32-3 tanh MLP in float64, a global batch of 16 rows (fewer than the 32-wide layers even
on one process), split into equal contiguous shares at 2 and 4 processes (8 and 4 rows each,
per-process batches far narrower than the layers); the 3-row output matrix leaves one process
an empty FSDP2 shard at 4 processes. FSDP2 is applied per Linear plus the root, or per block
(two Linears in one ``fully_shard``) plus the root. The reference is one process without any
wrapper. One launch per world size runs every case (spawn costs seconds)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from isolab import distributed as D
from isolab.optim import Iso, IsoAdam, Muon, Shampoo

ROWS, STEPS = 16, 5
CASES = {
    "iso": (Iso, dict(lr=0.05, root_interval=2)),
    "iso-update-momentum": (Iso, dict(lr=0.05, root_interval=1, momentum_placement="update")),
    "iso-polar": (Iso, dict(lr=0.02, root_interval=2, direction="polar")),
    "isoadam": (IsoAdam, dict(lr=1e-2, root_interval=2)),
    "isoadam-lean": (IsoAdam, dict(lr=1e-2, stat_interval=2, root_interval=2)),
    "shampoo": (Shampoo, dict(lr=0.01, root_interval=1)),
    "muon": (Muon, dict(lr=0.02)),
}
WRAPS = ("ddp", "fsdp-linear", "fsdp-block")


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 32)
        self.b = nn.Linear(32, 32)

    def forward(self, x):
        return torch.tanh(self.b(torch.tanh(self.a(x))))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()
        self.out = nn.Linear(32, 3)

    def forward(self, x):
        return self.out(self.block(x))


def _model(dtype=torch.float64):
    torch.manual_seed(0)
    return MLP().to(dtype)


def _batch(step, dtype=torch.float64):
    g = torch.Generator().manual_seed(50 + step)
    x, y = torch.randn(ROWS, 16, generator=g, dtype=torch.float64), torch.randn(ROWS, 3, generator=g,
                                                                                 dtype=torch.float64)
    return x.to(dtype), y.to(dtype)


def _build(case, model, dtype=torch.float64):
    cls, kw = CASES[case]
    kw = dict(kw, adam_lr=1e-2) if cls is not IsoAdam else dict(kw)
    if cls is not Muon:
        kw["stats_dtype"] = dtype
    return cls(model, **kw)


def _one_process(case, dtype=torch.float64, parts=1):
    """One process on the whole batch; ``parts`` > 1 accumulates the gradient over that many
    halves of it, the same numbers summed in another order."""
    model = _model(dtype)
    opt = _build(case, model, dtype)
    for step in range(STEPS):
        x, y = _batch(step, dtype)
        opt.zero_grad()
        for xs, ys in zip(x.chunk(parts), y.chunk(parts)):
            (F.mse_loss(model(xs), ys) / parts).backward()
        opt.step()
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def _worker(rank, world, cases):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.nn.parallel import DistributedDataParallel as DDP

    out = {}
    share = ROWS // world
    for case, wrap, dtype in cases:
        model = _model(dtype)
        net = model
        if wrap == "ddp":
            net = DDP(model)
        else:
            mesh = init_device_mesh("cpu", (world,))
            if wrap == "fsdp-linear":
                for m in (model.block.a, model.block.b, model.out):
                    fully_shard(m, mesh=mesh)
            else:
                fully_shard(model.block, mesh=mesh)
            fully_shard(model, mesh=mesh)
        opt = _build(case, model, dtype)
        for step in range(STEPS):
            x, y = _batch(step, dtype)
            rows = slice(rank * share, (rank + 1) * share)
            opt.zero_grad()
            F.mse_loss(net(x[rows]), y[rows]).backward()
            opt.step()
        params = {}
        for n, p in model.named_parameters():
            params[n] = (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().clone()
        out[(case, wrap, dtype)] = params
    return out


@pytest.fixture(scope="module", params=[2, 4], ids=lambda w: f"world{w}")
def runs(request):
    world = request.param
    cases = [(c, w, torch.float64) for c in CASES for w in WRAPS] + [(c, "fsdp-linear", torch.float32) for c in CASES]
    return world, D.launch(_worker, world, cases, timeout=600)


@pytest.mark.parametrize("wrap", WRAPS)
@pytest.mark.parametrize("case", list(CASES))
def test_equal_to_one_process_with_fewer_rows_per_process_than_the_layer_width(runs, case, wrap):
    world, results = runs
    reference = _one_process(case)
    for rank in range(world):
        got = results[rank][(case, wrap, torch.float64)]
        for name, ref in reference.items():
            gap = float((got[name] - ref).norm() / ref.norm())
            assert gap < 1e-10, (case, wrap, world, rank, name, gap)


def _gap(a, b):
    return max(float((a[n] - b[n]).norm() / b[n].norm()) for n in b)


@pytest.mark.parametrize("case", list(CASES))
def test_in_float32_equal_to_one_process_within_float32_rounding(runs, case):
    """What float32 allows is measured, not guessed: one process summing the same gradient in
    another order (two accumulated halves) moves the run by ``r``; the processes' run must stay
    within 10·r of the one-process run (Shampoo's inverse fourth roots of rank-deficient Grams with
    damping 1e-6 amplify rounding to ~1e-4 in five steps; Iso's whitening to ~1e-6)."""
    world, results = runs
    reference = _one_process(case, torch.float32)
    rounding = max(_gap(_one_process(case, torch.float32, parts=2), reference), 1e-7)
    for rank in range(world):
        gap = _gap(results[rank][(case, "fsdp-linear", torch.float32)], reference)
        assert gap < 10 * rounding, (case, world, rank, gap, rounding)
