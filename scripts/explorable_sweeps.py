#!/usr/bin/env python
r"""The reduced sweeps behind Chapter 10's explorable, precomputed for every slider setting.

Chapter 10's explorable shows, for a depth, a batch size and an input covariance, a
10-rate sweep of SGD, Adam, Iso and IsoAdam on deep linear regression (``n = 16``, 100
steps, one seed): the loss after training relative to the initial loss, against the
learning rate. Computing one setting trains 40 lanes, about half a second on one CPU
thread, over the 300 ms a slider move may take; so the whole grid is computed here once
and saved (``results/sweeps_explorable.npz``), and the chapter draws from the file in
Jupyter as on the website. The chapter recomputes one setting live and checks it
against the file; ``tests/test_explorable_sweeps.py`` does the same for another.

The grid and the problem are defined here only and written into the file's metadata,
which the chapter reads. Every hyperparameter is the engine's default
(:data:`isolab.book.engine.DEFAULTS`), written into the metadata too.

Usage::

    python scripts/explorable_sweeps.py            # -> results/sweeps_explorable.npz (about 30 s)
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

from isolab.book.engine import DEFAULTS, sweep  # noqa: E402
from isolab.book.lm import environment  # noqa: E402
from isolab.book.problems import DeepLinearRegression, GaussianFeatures  # noqa: E402

OUT = ROOT / "results" / "sweeps_explorable.npz"
N, STEPS, SEED = 16, 100, 0
DEPTHS = (2, 4, 8)
BATCHES = (16, 64, 256)
#: label -> (condition number of Σ, rotation of its eigenbasis in degrees)
SIGMAS = {"I": (1, 0.0), "κ 100": (100, 0.0), "κ 100 rotated": (100, 45.0),
          "κ 1000": (1000, 0.0), "κ 1000 rotated": (1000, 45.0)}
#: optimizer -> (log10 of the smallest and largest rate, number of rates)
LR_GRIDS = {"sgd": (-3.5, 0.3, 10), "adam": (-3.5, -0.5, 10), "iso": (-3.0, 0.0, 10), "isoadam": (-3.5, -0.5, 10)}


def learning_rates(name: str) -> np.ndarray:
    lo, hi, count = LR_GRIDS[name]
    return np.logspace(lo, hi, count)


def problem(depth: int, batch: int, sigma: str) -> DeepLinearRegression:
    kappa, angle = SIGMAS[sigma]
    return DeepLinearRegression(n=N, depth=depth, batch=batch, features=GaussianFeatures(N, kappa, math.radians(angle)))


def one_setting(name: str, depth: int, batch: int, sigma: str):
    """The sweep the explorable shows for one optimizer at one slider setting."""
    return sweep(problem(depth, batch, sigma), name, learning_rates(name), STEPS, seeds=[SEED],
                 record_norms=False, progress=False)


def relative_final_loss(result) -> np.ndarray:
    """Loss after the last step over the initial loss, per learning rate (NaN: diverged)."""
    return result.final_loss()[0] / result.loss[0, :, 0]


def compute() -> dict:
    names = list(LR_GRIDS)
    grid = list(itertools.product(DEPTHS, BATCHES, SIGMAS))
    relative = np.full((len(DEPTHS), len(BATCHES), len(SIGMAS), len(names), max(c for *_, c in LR_GRIDS.values())), np.nan)
    start = time.perf_counter()
    for depth, batch, sigma in grid:
        for k, name in enumerate(names):
            values = relative_final_loss(one_setting(name, depth, batch, sigma))
            relative[DEPTHS.index(depth), BATCHES.index(batch), list(SIGMAS).index(sigma), k, : values.size] = values
    meta = {
        "command": "python scripts/explorable_sweeps.py",
        "problem": {"n": N, "steps": STEPS, "seed": SEED, "loss": "mse", "dtype": "float32"},
        "depths": list(DEPTHS), "batches": list(BATCHES), "sigmas": {k: list(v) for k, v in SIGMAS.items()},
        "optimizers": names, "lr_grids": {k: list(v) for k, v in LR_GRIDS.items()},
        "hyper": {name: {k: v for k, v in DEFAULTS[name].items()} for name in names},
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
    print(f"{data['relative'].shape[:3]} settings x {len(LR_GRIDS)} optimizers in {data['meta']['seconds']:.0f} s "
          f"-> {save(data, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
