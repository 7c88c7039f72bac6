#!/usr/bin/env python
r"""What stale statistics and roots cost IsoAdam, under the tuning protocol (Chapter 13.4).

The network and task of section 13.4 (:func:`isolab.book.scaling.train_mlp`: a bias-free
ReLU MLP 64 -> 64 -> 64 -> 16 learning a random tanh teacher from inputs whose covariance
has condition number 1000; 300 steps of 256 samples, held-out loss on 2048 samples), for
Adam and for IsoAdam at seven refresh schedules ``(stat_interval, root_interval)``: the
lean ones ``(k, k)`` for k in 1, 3, 10, 30, 100, and fresh statistics with stale roots
``(1, 10)``, ``(1, 100)``.

The protocol of Part III (:mod:`isolab.book.engine.tuning`): every lane (Adam and each
schedule) gets the same budget of learning rates (:func:`trial_grid`, log-spaced over
``LR_RANGE``), chosen by the median held-out loss over the tuning seeds; a choice at an edge
of the grid extends the grid by one point in that direction (recorded in ``lr_shifts``);
the chosen rate is then run on held-out seeds that played no part in the choice, and the
chapter reports medians over them with bootstrap intervals. A seed ``s`` sets the initial
weights (``seed=s``) and the teacher, the batches and the held-out set
(``data_seed=1000 + s``); every lane sees the same ones. Every IsoAdam hyperparameter is
passed by name (``scaling.STALENESS_ISOADAM``), so a later change of a library default cannot move the
result. float32 throughout (the statistics too, as the library does by default).

Usage::

    python scripts/ch13_staleness.py      # -> results/ch13_staleness.npz (about 10 minutes, one thread)
"""

from __future__ import annotations

import sys
import time

import numpy as np
import torch

from isolab.book import scaling
from isolab.book.engine.tuning import trial_grid
from isolab.book.figures.saved import machine_note, write_result

NAME = "ch13_staleness.npz"
SCHEDULES = [(1, 1), (3, 3), (10, 10), (30, 30), (100, 100), (1, 10), (1, 100)]
LANES = ["adam"] + [f"isoadam_{ks}_{kr}" for ks, kr in SCHEDULES]
TASK = scaling.STALENESS_TASK
ISOADAM = scaling.STALENESS_ISOADAM
ADAM = dict(betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, beta_cov=0.95, damping=1e-3,
               root_method="eigh", warmup_steps=0, stats_dtype=torch.float32, shrinkage=True)
ADAM = dict(betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)   # torch.optim.Adam's, as train_mlp builds it
BUDGET = 5
LR_RANGE = (1e-3, 3e-2)
TUNING_SEEDS = (0, 1)
HELDOUT_SEEDS = (2, 3, 4, 5, 6, 7)


def _iso_kwargs() -> dict:
    return dict(ISOADAM)


def run(lane: str, lr: float, seed: int) -> dict:
    return scaling.staleness_run(lane, lr, seed)


def tune_lane(lane: str) -> tuple[float, list, list, int]:
    """The chosen lr, every (lr, median tuning loss) tried, and how often the grid moved."""
    lrs = [t.lr for t in trial_grid({}, BUDGET, LR_RANGE)]
    ratio = lrs[1] / lrs[0]
    scores: dict[float, float] = {}
    shifts = 0
    while True:
        for lr in lrs:
            if lr not in scores:
                losses = [run(lane, lr, s)["eval_loss"] for s in TUNING_SEEDS]
                scores[lr] = float(np.median([v if np.isfinite(v) else np.inf for v in losses]))
        grid = sorted(scores)
        best = min(grid, key=lambda lr: scores[lr])
        if best == grid[0] and shifts < 3:
            lrs = [grid[0] / ratio]
        elif best == grid[-1] and shifts < 3:
            lrs = [grid[-1] * ratio]
        else:
            return best, grid, [scores[lr] for lr in grid], shifts
        shifts += 1


def compute() -> dict:
    torch.set_num_threads(1)
    start = time.time()
    chosen, tried_lrs, tried_scores, shifts, interior = [], [], [], [], []
    for lane in LANES:
        best, grid, scores, moved = tune_lane(lane)
        chosen.append(best)
        tried_lrs.append(grid)
        tried_scores.append(scores)
        shifts.append(moved)
        interior.append(grid[0] < best < grid[-1])
        print(f"{lane:18s} lr {best:.2e} (grid {grid[0]:.1e}..{grid[-1]:.1e}, {moved} shift(s)) "
              f"{time.time() - start:.0f} s", flush=True)
    heldout = np.zeros((len(LANES), len(HELDOUT_SEEDS)))
    seconds = np.zeros_like(heldout)
    for i, lane in enumerate(LANES):
        for j, seed in enumerate(HELDOUT_SEEDS):
            r = run(lane, chosen[i], seed)
            heldout[i, j], seconds[i, j] = r["eval_loss"], r["seconds"]
        print(f"{lane:18s} held-out median {np.median(heldout[i]):.4f} ({time.time() - start:.0f} s)", flush=True)
    width = max(len(g) for g in tried_lrs)
    pad = lambda rows: np.array([list(r) + [np.nan] * (width - len(r)) for r in rows])
    iso = {k: (str(v) if isinstance(v, torch.dtype) else v) for k, v in _iso_kwargs().items()}
    return dict(lanes=np.array(LANES), schedules=np.array([(0, 0)] + SCHEDULES), lr=np.array(chosen),
                tried_lr=pad(tried_lrs), tried_score=pad(tried_scores), lr_shifts=np.array(shifts),
                lr_interior=np.array(interior), heldout_loss=heldout, seconds=seconds,
                tuning_seeds=np.array(TUNING_SEEDS), heldout_seeds=np.array(HELDOUT_SEEDS),
                budget=np.array(BUDGET), lr_range=np.array(LR_RANGE),
                task=np.array(repr({k: (str(v) if isinstance(v, torch.dtype) else v) for k, v in TASK.items()})),
                isoadam=np.array(repr(iso)), adam=np.array(repr(ADAM)),
                command=np.array("python " + " ".join(["scripts/ch13_staleness.py"] + sys.argv[1:])),
                info=np.array(machine_note("float32")))


def main(argv=None):
    write_result(__doc__.splitlines()[0], NAME, compute, argv)


if __name__ == "__main__":
    main()
