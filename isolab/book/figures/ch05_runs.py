r"""The pure noise runs of Chapter 5, *The pure noise problem*, and what the chapter reads off them.

* :func:`explore_run` (cached) trains the pure noise problem (``n = 16``, one sample per
  step, four seeds, 400 steps) for one depth, optimizer and weight decay over the nine
  learning rates :data:`EXPLORE_LRS`, or reads the stored runs of
  ``scripts/ch05_explore_runs.py``; :func:`run_summary` fits it and decides whether the
  growth is exponential (:func:`is_exponential`); :func:`describe` says so in words.
* :func:`comparison_runs`: section 5.7's five optimizers at two learning rates each, 1000
  steps (stored too).

The figures that draw these runs are in :mod:`isolab.book.figures.ch05` (the hero and the
centerpiece explorable) and :mod:`isolab.book.figures.ch05_sections`.
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

import numpy as np
import torch

from isolab.book import noise_dynamics as nd
from isolab.book.engine import sweep

__all__ = [
    "N", "BATCH", "EXPLORE_LRS", "EXPLORE_STEPS", "EXPLORE_SEEDS", "OPTIMIZERS", "RESULTS", "STORED_DEPTHS",
    "WEIGHT_DECAYS", "EXPONENTIAL_SLOPE", "SHRINKING_RATE", "encode", "decode", "run_key", "compute_run",
    "explore_run", "run_summary", "COMPARE_SETUPS", "COMPARE_STEPS", "COMPARE_DEPTHS", "compute_comparison",
    "comparison_runs", "is_exponential", "describe",
]

N, BATCH = 16, 1
#: The explorable's learning rates: 0.01 ... 1 in quarter decades (the main slider).
EXPLORE_LRS = tuple(float(v) for v in np.logspace(-2, 0, 9))
EXPLORE_STEPS = 400
EXPLORE_SEEDS = 4
#: Optimizer name on the slider -> (engine name, hyperparameters).
OPTIMIZERS = {"SGD": ("sgd", {}), "Adam": ("adam", {}), "Iso": ("iso", {"root_interval": 1})}
#: |log-log slope| above which a run counts as exponential (a random walk has 1/2).
EXPONENTIAL_SLOPE = 1.0
#: A late rate (steps 200-400) below this counts as shrinking: a random walk never shrinks,
#: and the slowest collapse on the grid (SGD, two layers, weight decay 0.3, lr 0.01-0.018)
#: shrinks at -0.002 per step, while runs that settle fluctuate within ±0.0012.
SHRINKING_RATE = -0.0015


# ----------------------------------------------------------------- shared training runs
#: Where :mod:`scripts/ch05_explore_runs.py` stores the runs (read when present).
RESULTS = Path(__file__).resolve().parents[3] / "results" / "ch05_explore_runs.npz"
STORED_DEPTHS = (1, 2, 4)
WEIGHT_DECAYS = (0.0, 0.3)


def encode(norms: np.ndarray) -> np.ndarray:
    """How the runs are stored: float32 logarithms of the float64 norms (float32 itself would
    overflow at 3.4e38, long before float64 does)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(norms).astype(np.float32)


def decode(stored: np.ndarray) -> np.ndarray:
    return np.exp(stored.astype(np.float64))


def run_key(depth: int, optimizer: str, weight_decay: float) -> str:
    return f"k{depth}_{optimizer}_wd{weight_decay:g}"


def compute_run(depth: int, optimizer: str, weight_decay: float) -> np.ndarray:
    """Train one setting: total weight norms ``[seed, lr, step]`` over :data:`EXPLORE_LRS`
    (float64; NaN after a float64 overflow)."""
    name, hyper = OPTIMIZERS[optimizer]
    run = sweep(nd.SharedPureNoise(N, depth, BATCH), name, EXPLORE_LRS, EXPLORE_STEPS, seeds=range(EXPLORE_SEEDS),
                hyper={**hyper, "weight_decay": weight_decay}, dtype=torch.float64, progress=False)
    return nd.total_norm(run.weight_norm).numpy()


@functools.lru_cache(maxsize=1)
def _stored() -> dict:
    if not RESULTS.exists():
        return {}
    with np.load(RESULTS) as data:
        meta = json.loads(str(data["meta"]))
        if (meta["lrs"] != list(EXPLORE_LRS) or meta["steps"] != EXPLORE_STEPS or meta["seeds"] != EXPLORE_SEEDS
                or meta["n"] != N or meta["batch"] != BATCH or meta.get("compare_steps") != COMPARE_STEPS
                or meta.get("compare") != {k: [list(v[0]), v[1]] for k, v in COMPARE_SETUPS.items()}):
            return {}
        return {k: data[k] for k in data.files if k != "meta"}


@functools.lru_cache(maxsize=None)
def explore_run(depth: int, optimizer: str, weight_decay: float) -> np.ndarray:
    """Total weight norms ``[seed, lr, step]`` of one setting, from the stored runs of
    ``scripts/ch05_explore_runs.py`` when present, else trained now (:func:`compute_run`);
    rounded as stored either way (:func:`encode`), returned as float64."""
    stored = _stored().get(run_key(depth, optimizer, weight_decay))
    if stored is None:
        stored = encode(compute_run(depth, optimizer, weight_decay))
    return decode(stored)


#: Section 5.7's comparison: optimizer -> (two learning rates, hyperparameters), 1000 steps, seed 0.
COMPARE_SETUPS = {
    "sgd": ((0.01, 0.1), {}),
    "adam": ((0.01, 0.1), {}),
    "muon": ((0.02, 0.2), {}),
    "iso": ((0.02, 0.2), {"root_interval": 1}),
    "isoadam": ((0.01, 0.1), {"root_interval": 1}),
}
COMPARE_STEPS, COMPARE_DEPTHS = 1000, (2, 4)


def compute_comparison(name: str, depth: int) -> np.ndarray:
    """One optimizer of section 5.7 at its two learning rates: total norms ``[lr, step]``."""
    grid, hyper = COMPARE_SETUPS[name]
    run = sweep(nd.SharedPureNoise(N, depth, BATCH), name, list(grid), COMPARE_STEPS, seeds=(0,), hyper=hyper,
                dtype=torch.float64, progress=False)
    return nd.total_norm(run.weight_norm)[0].numpy()


def comparison_runs() -> dict:
    """``{(optimizer, depth): total norms [lr, step]}`` for section 5.7, from the stored
    runs when present (rounded as stored, :func:`encode`), else trained now."""
    out = {}
    for depth in COMPARE_DEPTHS:
        for name in COMPARE_SETUPS:
            stored = _stored().get(f"compare_{name}_k{depth}")
            if stored is None:
                stored = encode(compute_comparison(name, depth))
            out[(name, depth)] = decode(stored)
    return out


def is_exponential(slope: float, overflow: bool) -> bool:
    """Exponential (or faster) growth or decay: the run overflowed, or its log-log slope
    over steps 40-400 exceeds 1 in size, twice a random walk's 1/2."""
    return bool(overflow or abs(slope) > EXPONENTIAL_SLOPE)


@functools.lru_cache(maxsize=None)
def run_summary(depth: int, optimizer: str, weight_decay: float, lr: float) -> dict:
    """Fits of one explorable setting, over its four seeds: ``rate`` (mean exponential rate
    on the finite part), ``slope`` (mean log-log slope, steps 40-400), ``last`` (the last
    finite step of the earliest-overflowing seed), ``overflow``, ``exponential``, and
    ``ratio`` (median of ||W_400|| / ||W_0||, NaN after an overflow)."""
    curves = explore_run(depth, optimizer, weight_decay)[:, EXPLORE_LRS.index(lr)]
    finite = np.isfinite(curves)
    last = int(min(np.flatnonzero(f)[-1] for f in finite))
    overflow = last < EXPLORE_STEPS
    rate = float(nd.growth_rate(torch.from_numpy(curves)).mean())
    slope = float(nd.loglog_slope(torch.from_numpy(curves), start=EXPLORE_STEPS // 10).mean())
    ratio = float(np.median(curves[:, -1] / curves[:, 0])) if not overflow else math.nan
    late = float(nd.growth_rate(torch.from_numpy(curves), start=EXPLORE_STEPS // 2).mean())
    return dict(rate=rate, slope=slope, last=last, overflow=overflow, ratio=ratio, late_rate=late,
                exponential=is_exponential(slope if math.isfinite(slope) else math.inf, overflow),
                shrinking=bool(not overflow and late < SHRINKING_RATE))


def describe(depth: int, optimizer: str, weight_decay: float, lr: float) -> str:
    """The explorable's title: a rate per step only where the norm grows or shrinks
    exponentially (a log-log slope beyond 1, or a steady shrinking that no random walk
    shows); elsewhere the log-log slope, because the exponential "rate" of a random walk
    measures the clock, not the weights."""
    s = run_summary(depth, optimizer, weight_decay, lr)
    head = f"{optimizer}, k = {depth}: "
    if s["overflow"] and depth >= 3:
        return head + f"faster than exponential, overflows at step {s['last'] + 1}"
    if s["exponential"]:
        kind = "growth" if s["rate"] > 0 else "decay"
        return head + f"exponential {kind}, rate {s['rate']:+.4f} per step"
    if s["shrinking"]:
        return head + f"shrinks exponentially, rate {s['late_rate']:+.4f} per step (steps 200–400)"
    return head + f"no exponential trend (log–log slope {s['slope']:.2f}; random walk 0.5)"
