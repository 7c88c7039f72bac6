#!/usr/bin/env python
r"""The learning-rate sweeps behind Chapter 10's centerpiece, precomputed for every slider setting.

The centerpiece asks what the condition number κ of the input covariance Σ does to each
optimizer's usable learning rates. For every κ (nine values, half a decade apart from 1 to
10⁴), two ways of fixing Σ's scale (``"trace"``: ``tr Σ = n``, the convention of the rest of
the book, which holds the largest eigenvalue below ``n``; ``"floor"``: the smallest eigenvalue
1, so the largest is κ) and two orientations of Σ's eigenbasis (axis-aligned, or each pair of
eigen-directions turned by 45°), it sweeps 36 learning rates (five a decade from 10⁻⁶ to 10) of
SGD, Adam, Iso and IsoAdam on deep linear regression (``n = 16``, 4 layers, batch 64, 100
steps, 4 seeds) and saves the loss after training relative to the initial loss
(``results/sweeps_explorable.npz``). Every optimizer runs at the library's defaults (read from
the signatures) with Part III's one deviation, no weight decay; SGD is plain SGD.

Usage::

    python scripts/explorable_sweeps.py            # -> results/sweeps_explorable.npz (about 5 min of one core)
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from isolab.book.engine.defaults import library_defaults  # noqa: E402
from isolab.book.engine.rules_lanes import resolve_hyper  # noqa: E402
from isolab.book.lm import environment  # noqa: E402
from isolab.book.figures.ch10_protocol import edge_losses, edge_problem  # noqa: E402
from isolab.book.problems import DeepLinearRegression  # noqa: E402

OUT = ROOT / "results" / "sweeps_explorable.npz"
COMMAND = "python scripts/explorable_sweeps.py"
N, DEPTH, BATCH, STEPS = 16, 4, 64, 100
SEEDS = (0, 1, 2, 3)
#: condition numbers of Σ (the main slider): half a decade apart from 1 to 10^4
KAPPAS = tuple(float(k) for k in np.round(np.logspace(0, 4, 9), 6))
SCALES = ("trace", "floor")
ANGLES = (0.0, 45.0)
OPTIMIZERS = ("sgd", "adam", "iso", "isoadam")
#: log10 of the smallest and largest rate, and their number (the same grid for everyone)
LR_GRID = (-6.0, 1.0, 36)


def hyper(name: str) -> dict:
    """Every hyperparameter but the rate: the library's defaults, no weight decay."""
    h = resolve_hyper(name, library_defaults(name))
    h["weight_decay"] = 0.0
    return h


def problem(kappa: float, scale: str, angle: float) -> DeepLinearRegression:
    """Σ with condition number ``kappa``: ``tr Σ = n`` (``"trace"``) or smallest eigenvalue 1
    (``"floor"``), eigenbasis turned by ``angle`` degrees."""
    return edge_problem(N, DEPTH, BATCH, kappa, scale, angle)


def lrs() -> np.ndarray:
    return np.logspace(*LR_GRID)


def relative_losses(name: str, kappa: float, scale: str, angle: float) -> np.ndarray:
    """``(seeds, lrs)``: the loss after ``STEPS`` steps over the initial loss (NaN: diverged)."""
    return edge_losses(problem(kappa, scale, angle), name, lrs(), STEPS, SEEDS, hyper(name))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    t0, c0 = time.perf_counter(), time.process_time()
    shape = (len(KAPPAS), len(SCALES), len(ANGLES), len(OPTIMIZERS), len(SEEDS), LR_GRID[2])
    relative = np.full(shape, np.nan)
    lam_max = np.zeros((len(KAPPAS), len(SCALES)))
    for (i, k), (j, sc), (a, ang) in itertools.product(enumerate(KAPPAS), enumerate(SCALES), enumerate(ANGLES)):
        lam_max[i, j] = float(torch.linalg.eigvalsh(problem(k, sc, ang).features.sigma).max())
        for o, name in enumerate(OPTIMIZERS):
            relative[i, j, a, o] = relative_losses(name, k, sc, ang)
        print(f"kappa {k:g} {sc} {ang:g}: {time.perf_counter() - t0:.0f} s", flush=True)
    meta = {"command": COMMAND, "n": N, "depth": DEPTH, "batch": BATCH, "steps": STEPS, "seeds": list(SEEDS),
            "kappas": list(KAPPAS), "scales": list(SCALES), "angles": list(ANGLES), "optimizers": list(OPTIMIZERS),
            "lr_grid": list(LR_GRID), "hyper": {n: {k: (list(v) if isinstance(v, tuple) else v)
                                                    for k, v in hyper(n).items()} for n in OPTIMIZERS},
            "dtype": "float32", "environment": environment(), "wall_seconds": time.perf_counter() - t0,
            "cpu_seconds": time.process_time() - c0}
    np.savez_compressed(args.out, relative=relative.astype(np.float32), lam_max=lam_max,
                        meta=np.array(json.dumps(meta)))
    print(f"saved {args.out} ({args.out.stat().st_size / 1e3:.0f} kB) in {meta['wall_seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
