"""Section 13.4: a teacher-student MLP task, training with refresh schedules, their cost and state."""

from __future__ import annotations

import math
import time
from typing import Optional
import torch
from torch import Tensor, nn
from isolab import linalg
from .. import features
from ..seeding import generator
from .flops import _check_dims, count_flops


# ------------------------------------------------------------------- amortization
def mlp(width: int = 64, depth: int = 3, d_in: Optional[int] = None, d_out: Optional[int] = None, seed: int = 0) -> nn.Sequential:
    """A bias-free ReLU MLP ``d_in → width → … → d_out`` with ``depth`` linear layers, seeded."""
    _check_dims(width=width, depth=depth)
    d_in = width if d_in is None else d_in
    d_out = width if d_out is None else d_out
    torch.manual_seed(seed)
    dims = [d_in] + [width] * (depth - 1) + [d_out]
    layers = []
    for i in range(depth):
        layers.append(nn.Linear(dims[i], dims[i + 1], bias=False))
        if i < depth - 1:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class RegressionTask:
    r"""A teacher–student regression with ill-conditioned, rotated Gaussian inputs.

    Inputs ``x = Q diag(√λ) z`` with ``λ`` :func:`isolab.book.features.spectrum` (condition
    number ``cond``, mean 1) and ``Q`` a random rotation; targets from a fixed random
    ``tanh`` network of the same widths, plus Gaussian noise of standard deviation
    ``noise``. :meth:`batch` draws fresh samples from the task's own generator, so two runs
    built with the same seeds see the same batches in the same order.
    """

    def __init__(self, d_in: int = 64, d_out: int = 16, cond: float = 100.0, noise: float = 0.1, seed: int = 1):
        gen = generator(seed)
        self.d_in, self.d_out, self.noise = d_in, d_out, noise
        Q = linalg.random_orthogonal(d_in, gen)
        self._sqrt_cov64 = Q * features.spectrum(d_in, cond).sqrt()
        self.sqrt_cov = self._sqrt_cov64.float()
        self.W1 = torch.randn(d_in, d_in, generator=gen) / math.sqrt(d_in)
        self.W2 = torch.randn(d_in, d_out, generator=gen) / math.sqrt(d_in)
        self._gen = generator(seed + 1)
        self._eval_draw = self._draw(2048)
        self.eval_x, self.eval_y = self._make(*self._eval_draw, torch.float32)

    def targets(self, x: Tensor) -> Tensor:
        return torch.tanh(x @ self.W1.to(x.dtype)) @ self.W2.to(x.dtype)

    def _draw(self, b: int):
        z = torch.randn(b, self.d_in, generator=self._gen)
        return z, torch.randn(b, self.d_out, generator=self._gen)

    def _make(self, z: Tensor, noise: Tensor, dtype: torch.dtype):
        sqrt_cov = self.sqrt_cov if dtype == torch.float32 else self._sqrt_cov64.to(dtype)
        x = z.to(dtype) @ sqrt_cov.T
        return x, self.targets(x) + self.noise * noise.to(dtype)

    def batch(self, b: int, dtype: torch.dtype = torch.float32):
        """``b`` fresh samples. The random draws are the same whatever ``dtype``; in float64
        the samples are computed from them in float64 (no float32 rounding at all)."""
        return self._make(*self._draw(b), dtype)

    def eval_set(self, dtype: torch.dtype = torch.float32):
        """The 2048 held-out samples, computed in ``dtype`` from the same draws."""
        return (self.eval_x, self.eval_y) if dtype == torch.float32 else self._make(*self._eval_draw, dtype)


#: Section 13.4's network and task for :func:`train_mlp` (``scripts/ch13_staleness.py``,
#: ``scripts/ch13_subsample.py``): 300 steps of 256 rows, width 64, condition number 1000,
#: float32, a 5 % warmup and a cosine decay (Part III's protocol: one schedule for everyone).
STALENESS_TASK = dict(steps=300, batch=256, width=64, depth=3, cond=1000.0, dtype=torch.float32,
                      schedule={"warmup": 0.05, "decay": "cosine"})
#: IsoAdam's hyperparameters in those runs, every one by name (weight decay 0, as the
#: ``torch.optim.Adam`` it meets; every row in the statistics unless ``stat_rows`` is given).
STALENESS_ISOADAM = dict(betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, beta_cov=0.95, damping=1e-3,
                         root_method="eigh", warmup_steps=0, stats_dtype=torch.float32, shrinkage=True,
                         stat_rows=None)


def staleness_run(lane: str, lr: float, seed: int, **overrides) -> dict:
    """One run of section 13.4's sweep: ``lane`` is ``"adam"`` or ``"isoadam_<ks>_<kr>"``
    (statistics every ``ks`` steps, roots every ``kr``); ``seed`` sets the initial weights and
    ``1000 + seed`` the teacher, batches and held-out set; ``overrides`` replace entries of
    :data:`STALENESS_ISOADAM` (e.g. ``stat_rows``). Returns :func:`train_mlp`'s result (no flop count)."""
    if lane == "adam":
        return train_mlp("adam", lr=lr, seed=seed, data_seed=1000 + seed, flops=False, **STALENESS_TASK)
    parts = lane.split("_")
    if len(parts) != 3 or parts[0] != "isoadam" or not all(p.isdigit() for p in parts[1:]):
        raise ValueError(f"lane must be 'adam' or 'isoadam_<stat_interval>_<root_interval>', got {lane!r}")
    unknown = sorted(set(overrides) - set(STALENESS_ISOADAM))
    if unknown:
        raise ValueError(f"unknown IsoAdam settings {unknown}; the settings are {sorted(STALENESS_ISOADAM)}")
    return train_mlp("isoadam", stat_interval=int(parts[1]), root_interval=int(parts[2]), lr=lr, seed=seed,
                     data_seed=1000 + seed, flops=False, **STALENESS_TASK, **{**STALENESS_ISOADAM, **overrides})


def state_elements(optimizer: torch.optim.Optimizer) -> int:
    """Number of tensor elements held in ``optimizer.state`` (its memory, in elements)."""
    return sum(v.numel() for st in optimizer.state.values() for v in st.values() if isinstance(v, Tensor))


def train_mlp(
    optimizer: str = "isoadam",
    *,
    stat_interval: int = 1,
    root_interval: int = 1,
    steps: int = 300,
    batch: int = 256,
    width: int = 64,
    depth: int = 3,
    cond: float = 100.0,
    lr: float = 1e-3,
    seed: int = 0,
    data_seed: int = 1,
    dtype: torch.dtype = torch.float32,
    flops: bool = True,
    schedule: dict | None = None,
    **optimizer_kwargs,
) -> dict:
    r"""Train :func:`mlp` on :class:`RegressionTask` with IsoAdam (or ``"adam"``) and report.

    ``schedule`` (:mod:`isolab.book.engine.schedules`, e.g. a warmup and a cosine decay)
    scales every parameter group's rate at every step; ``None`` keeps it constant.

    ``dtype`` is the precision of the weights and of the samples (computed in it from the
    same random draws): float64, with ``stats_dtype=torch.float64`` for IsoAdam, gives
    losses whose printed digits do not depend on the CPU's float32 kernels.

    The same ``seed`` gives the same initial weights and the same ``data_seed`` the same
    batches, whatever the intervals, so runs differ only by the optimizer's schedule.
    Returns ``loss`` (training loss per step), ``eval_loss`` (mean squared error on 2048
    held-out samples after training), ``seconds`` (wall-clock of the training loop),
    ``state_elements`` (:func:`state_elements` at the end) and ``optimizer_flops``:
    flops of the optimizer per step, counted with :func:`count_flops` on the real hooks and
    ``step`` (statistics in backward, roots and application in ``step``) over one period
    of the schedule (``lcm(stat_interval, root_interval)`` steps, after a first period
    that is not counted), per step, minus ``forward_backward_flops``, the forward and
    backward of the same model without hooks. ``flops=False`` skips that count (both keys
    are then ``None``): the long sweeps of ``scripts/ch13_staleness.py`` need only the losses.
    """
    from isolab.optim import IsoAdam

    if dtype not in (torch.float32, torch.float64):
        raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype!r}")
    task = RegressionTask(width, 16, cond, seed=data_seed)
    model = mlp(width, depth, width, 16, seed=seed).to(dtype)
    if optimizer == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=lr)
    elif optimizer == "isoadam":
        # no weight decay, as the torch.optim.Adam it is compared with (IsoAdam's default is AdamW's 0.01)
        opt = IsoAdam(model, lr=lr, stat_interval=stat_interval, root_interval=root_interval,
                      **{"weight_decay": 0.0, **optimizer_kwargs})
    else:
        raise ValueError(f"optimizer must be 'adam' or 'isoadam', got {optimizer!r}")
    batches = [task.batch(batch, dtype) for _ in range(steps)]
    from isolab.book.engine.schedules import check_schedule, multiplier

    schedule = check_schedule(schedule)
    base_lrs = [g["lr"] for g in opt.param_groups]
    step_index = [0]

    def one_step(x, y):
        if schedule is not None:
            f = multiplier(schedule, step_index[0], steps)
            for g, base in zip(opt.param_groups, base_lrs):
                g["lr"] = base * f
            step_index[0] += 1
        opt.zero_grad(set_to_none=True)
        loss = (model(x) - y).square().mean()
        loss.backward()
        opt.step()
        return loss

    losses = []
    t0 = time.perf_counter()
    for x, y in batches:
        losses.append(float(one_step(x, y).detach()))
    seconds = time.perf_counter() - t0
    with torch.no_grad():
        eval_x, eval_y = task.eval_set(dtype)
        eval_loss = float((model(eval_x) - eval_y).square().mean())
    state = state_elements(opt)
    if hasattr(opt, "remove_hooks"):
        opt.remove_hooks()
    if not flops:
        return {"loss": losses, "eval_loss": eval_loss, "seconds": seconds, "state_elements": state,
                "optimizer_flops": None, "forward_backward_flops": None}

    cost = schedule_cost(optimizer, stat_interval=stat_interval, root_interval=root_interval, batch=batch,
                         width=width, depth=depth, cond=cond, lr=lr, seed=seed, data_seed=data_seed, dtype=dtype,
                         **optimizer_kwargs)
    return {
        "loss": losses,
        "eval_loss": eval_loss,
        "seconds": seconds,
        "state_elements": state,
        "optimizer_flops": cost["optimizer_flops"],
        "forward_backward_flops": cost["forward_backward_flops"],
    }


def schedule_cost(
    optimizer: str = "isoadam",
    *,
    stat_interval: int = 1,
    root_interval: int = 1,
    batch: int = 256,
    width: int = 64,
    depth: int = 3,
    cond: float = 100.0,
    lr: float = 1e-3,
    seed: int = 0,
    data_seed: int = 1,
    dtype: torch.dtype = torch.float32,
    **optimizer_kwargs,
) -> dict:
    r"""What one schedule of :func:`train_mlp` costs, without the training: the optimizer's
    flops per step (``optimizer_flops``, counted with :func:`count_flops` on the real hooks
    and ``step`` over one period ``lcm(stat_interval, root_interval)`` after a first period
    that is not counted, minus ``forward_backward_flops``) and its state size
    (``state_elements``, after those two periods). The counts depend on shapes only."""
    from isolab.optim import IsoAdam

    if optimizer not in ("adam", "isoadam"):
        raise ValueError(f"optimizer must be 'adam' or 'isoadam', got {optimizer!r}")
    task = RegressionTask(width, 16, cond, seed=data_seed)
    probe = mlp(width, depth, width, 16, seed=seed).to(dtype)
    x, y = task.batch(batch, dtype)
    fb = count_flops(lambda: (probe(x) - y).square().mean().backward()).total
    period = math.lcm(stat_interval, root_interval) if optimizer == "isoadam" else 1
    if optimizer == "adam":
        popt = torch.optim.Adam(probe.parameters(), lr=lr)
    else:
        popt = IsoAdam(probe, lr=lr, stat_interval=stat_interval, root_interval=root_interval,
                       **{"weight_decay": 0.0, **optimizer_kwargs})
    for _ in range(period):  # the first period includes the first refresh (nothing to rebuild yet)
        _probe_step(probe, popt, x, y)
    total = count_flops(lambda: [_probe_step(probe, popt, x, y) for _ in range(period)]).total
    state = state_elements(popt)
    if hasattr(popt, "remove_hooks"):
        popt.remove_hooks()
    return {"optimizer_flops": total / period - fb, "forward_backward_flops": fb, "state_elements": state}


def _probe_step(model, opt, x, y):
    opt.zero_grad(set_to_none=True)
    (model(x) - y).square().mean().backward()
    opt.step()


