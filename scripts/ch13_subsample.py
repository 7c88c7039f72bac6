#!/usr/bin/env python
r"""Statistics from a subsample of the rows against full statistics: loss and time (Chapter 13.4).

K-FAC implementations often estimate their factors from a subset of the batch. Iso and
IsoAdam do the same with ``stat_rows=N``: on a statistics step each layer forms
``XᵀX`` and ``GᵀG`` from ``N`` rows drawn without replacement (the same rows for both),
scaled by ``b/N``, so the statistics cost ``N/b`` of the full ones.

*Loss.* The network, task and protocol of ``scripts/ch13_staleness.py`` (section 13.4:
300 steps of 256 rows with its schedule, held-out loss, its 20 held-out seeds), IsoAdam with statistics at
every step and roots every 10 (``stat_interval=1, root_interval=10``) at the learning rate
that the staleness sweep chose for that schedule (read from ``results/ch13_staleness.npz``),
for ``N`` in :data:`ROWS` (256 = every row).

*Time.* A wider network where the products dominate (:data:`TIMING`: 3 layers of width 512,
4096 rows per step), statistics at every step, one thread: the median time of an IsoAdam
step for each ``N`` and for Adam, the configurations interleaved repeat by repeat (so that
load from other programs falls on all of them alike), with the quartiles over repeats.

Every IsoAdam hyperparameter is passed by name (``ISOADAM`` of ``ch13_staleness``).

``--jitter-check 1 2 3`` reruns the losses under three jitters of the random draws (as
``ch13_staleness.py --jitter-check`` does) and saves them beside the saved ones.

Usage::

    python scripts/ch13_subsample.py                      # -> results/ch13_subsample.npz (a few minutes)
    python scripts/ch13_subsample.py --jitter-check 1 2 3  # -> results/ch13_subsample_jitter.npz
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ch13_staleness as staleness  # noqa: E402
from isolab.book import scaling  # noqa: E402
from isolab.book.figures.saved import machine_note, saved_result, split_jitter_check, write_result  # noqa: E402

NAME = "ch13_subsample.npz"
JITTER_NAME = "ch13_subsample_jitter.npz"
ROWS = (256, 128, 64, 32, 16)
SCHEDULE = (1, 10)
TIMING = dict(width=512, depth=3, batch=4096, rows=(4096, 1024, 256), repeats=7, steps=3)


def _lr() -> float:
    saved = np.load(saved_result(staleness.NAME))
    lanes = list(saved["lanes"])
    return float(saved["lr"][lanes.index(f"isoadam_{SCHEDULE[0]}_{SCHEDULE[1]}")])


def losses(lr: float) -> np.ndarray:
    out = np.zeros((len(ROWS), len(staleness.HELDOUT_SEEDS)))
    kwargs = {**staleness.ISOADAM, "stat_rows": None}
    for i, rows in enumerate(ROWS):
        for j, seed in enumerate(staleness.HELDOUT_SEEDS):
            r = scaling.train_mlp("isoadam", stat_interval=SCHEDULE[0], root_interval=SCHEDULE[1], lr=lr, seed=seed,
                                  data_seed=1000 + seed, flops=False, **staleness.TASK,
                                  **{**kwargs, "stat_rows": None if rows >= staleness.TASK["batch"] else rows})
            out[i, j] = r["eval_loss"]
        print(f"stat_rows {rows:4d}: median held-out loss {np.median(out[i]):.4f}", flush=True)
    return out


def timings() -> dict:
    from isolab.optim import IsoAdam

    w, b = TIMING["width"], TIMING["batch"]
    task = scaling.RegressionTask(w, 16, 1000.0, seed=1)
    x, y = task.batch(b)
    configs = ["adam"] + [f"rows_{n}" for n in TIMING["rows"]]
    runs = {}
    for name in configs:
        model = scaling.mlp(w, TIMING["depth"], w, 16, seed=0)
        if name == "adam":
            opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        else:
            n = int(name.split("_")[1])
            settings = {**staleness.ISOADAM, "stat_rows": None if n >= b else n}
            opt = IsoAdam(model, lr=1e-3, stat_interval=1, root_interval=10, **settings)
        runs[name] = (model, opt)

    def steps(name):
        model, opt = runs[name]
        for _ in range(TIMING["steps"]):
            opt.zero_grad(set_to_none=True)
            (model(x) - y).square().mean().backward()
            opt.step()

    for name in configs:          # warm-up: the first root refresh, allocations
        steps(name)
    seconds = {name: [] for name in configs}
    for _ in range(TIMING["repeats"]):
        for name in configs:
            t0 = time.perf_counter()
            steps(name)
            seconds[name].append((time.perf_counter() - t0) / TIMING["steps"])
    for name in configs:
        print(f"{name:10s}: median {np.median(seconds[name]) * 1e3:.0f} ms per step", flush=True)
    return {"timing_configs": np.array(configs), "step_seconds": np.array([seconds[n] for n in configs])}


def compute() -> dict:
    torch.set_num_threads(1)
    lr = _lr()
    data = {"rows": np.array(ROWS), "heldout_loss": losses(lr), "lr": np.array(lr),
            "schedule": np.array(SCHEDULE), "heldout_seeds": np.array(staleness.HELDOUT_SEEDS),
            "task": np.array(repr({k: str(v) for k, v in staleness.TASK.items()})),
            "isoadam": np.array(repr({k: str(v) for k, v in staleness.ISOADAM.items()})),
            "timing": np.array(repr({k: v for k, v in TIMING.items()}))}
    data.update(timings())
    data["command"] = np.array("python scripts/ch13_subsample.py")
    data["info"] = np.array(machine_note("float32"))
    return data


def jitter_check(seeds) -> dict:
    """The losses again under each jitter seed, at the saved learning rate."""
    from isolab.book.seeding import jittered

    torch.set_num_threads(1)
    lr = float(np.load(saved_result(NAME))["lr"])
    runs = []
    for seed in seeds:
        with jittered(staleness.JITTER, seed):
            print(f"jitter {seed}:", flush=True)
            runs.append(losses(lr))
    return {"rows": np.array(ROWS), "lr": np.array(lr), "heldout_seeds": np.array(staleness.HELDOUT_SEEDS),
            "jitter": np.array(staleness.JITTER), "jitter_seeds": np.array(seeds), "heldout_loss": np.array(runs),
            "command": np.array("python scripts/ch13_subsample.py --jitter-check " + " ".join(map(str, seeds))),
            "info": np.array(machine_note("float32"))}


def main(argv=None):
    seeds, rest = split_jitter_check(sys.argv[1:] if argv is None else argv)
    if seeds is None:
        write_result(__doc__.splitlines()[0], NAME, compute, rest)
    else:
        write_result("the saved losses under jitters", JITTER_NAME, lambda: jitter_check(seeds), rest)


if __name__ == "__main__":
    main()
