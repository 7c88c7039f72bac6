#!/usr/bin/env python
r"""What stale statistics and roots cost IsoAdam, under the tuning protocol (Chapter 13.4).

The network and task of section 13.4 (:func:`isolab.book.scaling.train_mlp`: a bias-free
ReLU MLP 64 -> 64 -> 64 -> 16 learning a random tanh teacher from inputs whose covariance
has condition number 1000; 300 steps of 256 samples, held-out loss on 2048 samples), for
Adam and for IsoAdam at seven refresh schedules ``(stat_interval, root_interval)``: the
lean ones ``(k, k)`` for k in 1, 3, 10, 30, 100, and fresh statistics with stale roots
``(1, 10)``, ``(1, 100)``.

The protocol of Part III (version 2, :func:`isolab.book.engine.tuning.tune_lr`): every
lane (Adam and each schedule) gets the same ten learning rates tried (six log-spaced over
``LR_RANGE``, four more between the best one's neighbours), each on five tuning seeds, where
a rate that diverges on any seed is out, and is scored by the median held-out loss over
them; the chosen rate is then run on 20 held-out seeds that played no part in the choice,
and the chapter reports medians over them with order-statistic intervals and paired
differences. Every run has the same schedule (a 5 % warmup and a cosine decay). A seed
``s`` sets the initial weights (``seed=s``) and the teacher, the batches and the held-out
set (``data_seed=1000 + s``); every lane sees the same ones. Every IsoAdam hyperparameter
is passed by name (``scaling.STALENESS_ISOADAM``), so a later change of a library default
cannot move the result. float32 throughout (the statistics too, as the library does by
default).

*Another CPU.* ``--jitter-check 1 2 3`` reruns every lane's held-out seeds at its saved
learning rate under three jitters of the random draws (:func:`isolab.book.seeding.jittered`,
1e-6, which stand in for a CPU that rounds differently) and saves their held-out losses
beside the saved ones, so the chapter can state which conclusions hold in all four runs.

Usage::

    python scripts/ch13_staleness.py                    # -> results/ch13_staleness.npz (about an hour)
    python scripts/ch13_staleness.py --jitter-check 1 2 3   # -> results/ch13_staleness_jitter.npz (10 min)
"""

from __future__ import annotations

import sys
import time

import numpy as np
import torch

from isolab.book import scaling
from isolab.book.engine.tuning import tune_lr
from isolab.book.figures.saved import machine_note, split_jitter_check, write_result

NAME = "ch13_staleness.npz"
JITTER_NAME = "ch13_staleness_jitter.npz"
JITTER = 1e-6
SCHEDULES = [(1, 1), (3, 3), (10, 10), (30, 30), (100, 100), (1, 10), (1, 100)]
LANES = ["adam"] + [f"isoadam_{ks}_{kr}" for ks, kr in SCHEDULES]
TASK = scaling.STALENESS_TASK
ISOADAM = scaling.STALENESS_ISOADAM
ADAM = dict(betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)   # torch.optim.Adam's, as train_mlp builds it
COARSE, REFINE = 6, 4
BUDGET = COARSE + REFINE
LR_RANGE = (1e-3, 1e-1)   # the schedule lets the peak rate go higher than a constant one (v1: 3e-2)
TUNING_SEEDS = (0, 1, 2, 3, 4)
HELDOUT_SEEDS = tuple(range(10, 30))


def _iso_kwargs() -> dict:
    return dict(ISOADAM)


def run(lane: str, lr: float, seed: int) -> dict:
    return scaling.staleness_run(lane, lr, seed)


def tune_lane(lane: str) -> dict:
    """The chosen lr and every (lr, median tuning loss) tried (:func:`tune_lr`)."""
    return tune_lr(lambda lr, seed: run(lane, lr, seed)["eval_loss"], coarse=COARSE, refine=REFINE,
                   lr_range=LR_RANGE, tuning_seeds=TUNING_SEEDS)


def compute() -> dict:
    torch.set_num_threads(1)
    start = time.time()
    chosen, tried_lrs, tried_scores, interior = [], [], [], []
    for lane in LANES:
        t = tune_lane(lane)
        chosen.append(t["lr"])
        tried_lrs.append([lr for lr, _ in t["trials"]])
        tried_scores.append([v for _, v in t["trials"]])
        interior.append(t["interior"])
        print(f"{lane:18s} lr {t['lr']:.2e} ({'interior' if t['interior'] else 'AT AN EDGE'}) "
              f"{time.time() - start:.0f} s", flush=True)
    heldout = np.zeros((len(LANES), len(HELDOUT_SEEDS)))
    seconds = np.zeros_like(heldout)
    for i, lane in enumerate(LANES):
        for j, seed in enumerate(HELDOUT_SEEDS):
            r = run(lane, chosen[i], seed)
            heldout[i, j], seconds[i, j] = r["eval_loss"], r["seconds"]
        print(f"{lane:18s} held-out median {np.median(heldout[i]):.4f} ({time.time() - start:.0f} s)", flush=True)
    iso = {k: (str(v) if isinstance(v, torch.dtype) else v) for k, v in _iso_kwargs().items()}
    return dict(lanes=np.array(LANES), schedules=np.array([(0, 0)] + SCHEDULES), lr=np.array(chosen),
                tried_lr=np.array(tried_lrs), tried_score=np.array(tried_scores),
                lr_interior=np.array(interior), heldout_loss=heldout, seconds=seconds,
                tuning_seeds=np.array(TUNING_SEEDS), heldout_seeds=np.array(HELDOUT_SEEDS),
                budget=np.array(BUDGET), coarse=np.array(COARSE), refine=np.array(REFINE),
                lr_range=np.array(LR_RANGE), schedule=np.array(repr(TASK["schedule"])),
                task=np.array(repr({k: (str(v) if isinstance(v, torch.dtype) else v) for k, v in TASK.items()})),
                isoadam=np.array(repr(iso)), adam=np.array(repr(ADAM)),
                command=np.array("python scripts/ch13_staleness.py"),
                info=np.array(machine_note("float32")))


def heldout_losses(lrs) -> np.ndarray:
    """``[lane, held-out seed]`` held-out losses of every lane at its learning rate."""
    return np.array([[run(lane, float(lr), seed)["eval_loss"] for seed in HELDOUT_SEEDS]
                     for lane, lr in zip(LANES, lrs)])


def jitter_check(seeds) -> dict:
    """The saved held-out runs again under each jitter seed (module docstring)."""
    from isolab.book.figures.saved import saved_result
    from isolab.book.seeding import jittered

    torch.set_num_threads(1)
    saved = np.load(saved_result(NAME))
    if list(saved["lanes"]) != LANES or list(saved["heldout_seeds"]) != list(HELDOUT_SEEDS):
        raise SystemExit(f"{NAME} was made with other lanes or seeds; rerun the script without --jitter-check first")
    runs = []
    for seed in seeds:
        with jittered(JITTER, seed):
            runs.append(heldout_losses(saved["lr"]))
        print(f"jitter {seed}: " + ", ".join(f"{lane} {np.median(v):.4f}" for lane, v in zip(LANES, runs[-1])),
              flush=True)
    return dict(lanes=np.array(LANES), lr=saved["lr"], heldout_seeds=np.array(HELDOUT_SEEDS),
                jitter=np.array(JITTER), jitter_seeds=np.array(seeds), heldout_loss=np.array(runs),
                command=np.array("python scripts/ch13_staleness.py --jitter-check " + " ".join(map(str, seeds))),
                info=np.array(machine_note("float32")))


def main(argv=None):
    seeds, rest = split_jitter_check(sys.argv[1:] if argv is None else argv)
    if seeds is None:
        write_result(__doc__.splitlines()[0], NAME, compute, rest)
    else:
        write_result("the saved held-out runs under jitters", JITTER_NAME, lambda: jitter_check(seeds), rest)


if __name__ == "__main__":
    main()
