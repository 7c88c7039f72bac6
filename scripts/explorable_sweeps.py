#!/usr/bin/env python
r"""The learning-rate sweeps behind Chapter 10's explorable, precomputed for every slider setting.

Chapter 10's explorable shows, for a depth, a batch size and an input covariance, a
20-rate sweep of SGD, Adam, Iso and IsoAdam on deep linear regression (``n = 16``, 100
steps) over 4 seeds: the loss after training relative to the initial loss, against the
learning rate, as a median with the band from the best to the worst seed. One setting
trains 320 lanes, seconds on one CPU thread, far over what a slider move may take; so the
whole grid (3 depths x 3 batch sizes x 9 condition numbers x 2 orientations) is computed
here once and saved (``results/sweeps_explorable.npz``), and the chapter draws from the
file in Jupyter as on the website. The chapter recomputes one setting live and checks it
against the file; ``tests/book/test_explorable_sweeps.py`` does the same for others.

The grid, the problem and every hyperparameter are defined here only (named explicitly,
not taken from the library's defaults, so a later change of a default does not move the
saved file) and written into the file's metadata, which the chapter reads.

Usage::

    python scripts/explorable_sweeps.py            # -> results/sweeps_explorable.npz (about 10 min, 1 thread)
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from isolab.book.engine import sweep  # noqa: E402
from isolab.book.engine.rules_lanes import resolve_hyper  # noqa: E402
from isolab.book.lm import environment  # noqa: E402
from isolab.book.problems import DeepLinearRegression, GaussianFeatures  # noqa: E402

OUT = ROOT / "results" / "sweeps_explorable.npz"
COMMAND = "python scripts/explorable_sweeps.py"
N, STEPS = 16, 100
SEEDS = (0, 1, 2, 3)
DEPTHS = (2, 4, 8)
BATCHES = (16, 64, 256)
#: condition numbers of Σ (the main slider): half a decade apart from 1 to 10^4
KAPPAS = tuple(float(k) for k in np.round(np.logspace(0, 4, 9), 6))
#: rotation of Σ's eigenbasis in degrees: axis-aligned, or each pair of eigen-directions turned by 45°
ANGLES = (0.0, 45.0)
#: optimizer -> (log10 of the smallest and largest rate, number of rates)
LR_GRIDS = {"sgd": (-4.5, 0.5, 20), "adam": (-4.0, -0.5, 20), "iso": (-4.0, 0.0, 20), "isoadam": (-4.5, -0.5, 20)}
#: every hyperparameter besides the learning rate, by name
HYPER = {
    "sgd": {"momentum": 0.0, "nesterov": False, "weight_decay": 0.0},
    "adam": {"betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0},
    "iso": {"momentum": 0.95, "nesterov": True, "beta_cov": 0.95, "damping": 1e-3, "root_interval": 10,
            "root_method": "eigh", "weight_decay": 0.0},
    "isoadam": {"betas": (0.9, 0.999), "eps": 1e-8, "beta_cov": 0.95, "damping": 1e-3, "root_interval": 10,
                "root_method": "eigh", "weight_decay": 0.0},
}


def learning_rates(name: str) -> np.ndarray:
    lo, hi, count = LR_GRIDS[name]
    return np.logspace(lo, hi, count)


def problem(depth: int, batch: int, kappa: float, angle: float) -> DeepLinearRegression:
    return DeepLinearRegression(n=N, depth=depth, batch=batch, features=GaussianFeatures(N, kappa, math.radians(angle)))


def one_setting(name: str, depth: int, batch: int, kappa: float, angle: float, seeds=SEEDS):
    """The sweep the explorable shows for one optimizer at one slider setting."""
    return sweep(problem(depth, batch, kappa, angle), name, learning_rates(name), STEPS, seeds=list(seeds),
                 hyper=HYPER[name], record_norms=False, progress=False, dtype=torch.float32)


def relative_final_loss(result) -> np.ndarray:
    """``(seeds, lrs)``: loss after the last step over the initial loss (NaN: diverged)."""
    return result.final_loss() / result.loss[:, :, 0]


def index(depth: int, batch: int, kappa: float, angle: float, name: str) -> tuple:
    """Where one setting's ``(seeds, lrs)`` block lies in the saved ``relative`` array."""
    return (DEPTHS.index(depth), BATCHES.index(batch), KAPPAS.index(kappa), ANGLES.index(angle),
            list(LR_GRIDS).index(name))


def compute(progress: bool = True) -> dict:
    names = list(LR_GRIDS)
    size = max(c for *_, c in LR_GRIDS.values())
    relative = np.full((len(DEPTHS), len(BATCHES), len(KAPPAS), len(ANGLES), len(names), len(SEEDS), size), np.nan)
    start = time.perf_counter()
    for depth, batch, kappa, angle in itertools.product(DEPTHS, BATCHES, KAPPAS, ANGLES):
        for name in names:
            values = relative_final_loss(one_setting(name, depth, batch, kappa, angle))
            relative[index(depth, batch, kappa, angle, name)][:, : values.shape[1]] = values
        if progress:
            print(f"depth {depth}, batch {batch}, κ {kappa:g}, {angle:g}°: {time.perf_counter() - start:.0f} s", flush=True)
    meta = {
        "command": COMMAND,
        "problem": {"n": N, "steps": STEPS, "seeds": list(SEEDS), "loss": "mse", "dtype": "float32",
                    "targets": "y = A x, A ~ N(0, I) per seed", "features": "x ~ N(0, Σ), tr Σ = n"},
        "axes": ["depth", "batch", "kappa", "angle", "optimizer", "seed", "lr"],
        "depths": list(DEPTHS), "batches": list(BATCHES), "kappas": list(KAPPAS), "angles": list(ANGLES),
        "optimizers": names, "lr_grids": {k: list(v) for k, v in LR_GRIDS.items()},
        "hyper": {name: {k: (list(v) if isinstance(v, tuple) else v) for k, v in resolve_hyper(name, HYPER[name]).items()}
                  for name in names},
        "environment": environment(), "seconds": time.perf_counter() - start, "threads": torch.get_num_threads(),
    }
    return {"relative": relative, "meta": meta}


def save(data: dict, path: Path = OUT) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, relative=data["relative"], meta=np.array(json.dumps(data["meta"], default=str)))
    return path


def load(path: Path = OUT) -> dict:
    with np.load(path) as f:
        return {"relative": f["relative"], "meta": json.loads(str(f["meta"]))}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    data = compute()
    print(f"{np.prod(data['relative'].shape[:4])} settings x {len(LR_GRIDS)} optimizers in "
          f"{data['meta']['seconds']:.0f} s -> {save(data, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
