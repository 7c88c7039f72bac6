#!/usr/bin/env python
r"""Full-size learning-rate sweeps on deep linear regression: the paper's Figures 3 and 4.

Chapter 10 of the book loads what this script saves (``results/sweeps_full.npz``).

Setup (the paper's, arXiv 2307.12979, section "Experiments"): ``n = 32``, batch 128,
``y = A x`` with ``A ~ N(0, I)``, ``x ~ N(0, I)``, weights ``W_i ~ N(0, I)/sqrt(n)``,
mean-squared error (:class:`isolab.book.problems.DeepLinearRegression`), 30 learning rates per
optimizer, three seeds, every optimizer at its defaults (:data:`isolab.book.engine.DEFAULTS`):

- ``fig3``: 5 layers, *iterations to convergence*.  The paper does not say what
  "convergence" means; we use the first step at which the loss is at most 1% of the
  lane's initial loss (a hundredfold reduction), within at most 3000 steps.
- ``fig4``: 40 layers, *loss after 1000 iterations*.

Optimizers: SGD, Adam, Iso, IsoAdam, Muon, SignSGD and Shampoo, at their defaults;
Shampoo's default (``beta = 1``) sums its statistics over the whole run, as Gupta et al.
do, so its steps shrink with time; it is run a second time as ``shampoo_ema`` with an
exponential moving average (``beta = 0.95``) to show how much that choice matters.

Learning-rate calibration (done here, per figure and optimizer, on a separate *pilot*
seed that is not one of the reported seeds):

1. Pilot sweep over a wide log grid, ``1e-6 ... 1e2`` at four points per decade.
2. A score per pilot learning rate, lower is better: for ``fig3`` the iterations to the
   threshold, or ``steps * (1 + final/initial loss)`` for a lane that never reached it,
   ``inf`` for a diverged lane; for ``fig4`` the final loss (``inf`` when diverged).
3. The best pilot rate ``lr*``.  Top of the grid: the first pilot rate above ``lr*``
   whose lane diverged, times ``10^{1/4}`` (one pilot step further), so the grid ends in
   divergence.  Bottom: the largest pilot rate below ``lr*`` that is "too slow" (score at
   least ``4x`` the best, or for ``fig3`` not converged, or for ``fig4`` at least
   ``best + 0.8 (initial - best)``), divided by ``10^{1/4}``.
4. The reported grid: 30 log-spaced rates between bottom and top.  After the full run the
   script checks (and records in the metadata) that the grid brackets the optimum: the
   best rate (median over seeds) is an interior point, the top rate failed for some seed,
   and the bottom rate is at least twice as bad as the best.

What is saved (``isolab.book.results`` format; one :class:`~isolab.book.results.Sweep` per figure
and optimizer, labelled ``"fig3/iso"`` etc.): for every (seed, learning rate) the
divergence step, the step the threshold was hit, and the loss at a thinned set of steps
(every step up to 20, then about 60 log-spaced steps, always the last one;
``info["loss_steps"]``), so ``final_loss()``, ``iterations()`` and ``best()`` work as on
an unthinned sweep.  ``info["calibration"]`` holds the pilot grid and scores,
``info["bracket"]`` the checks, ``info["run"]`` the configuration, seeds, versions,
hardware and timings (the same in every sweep).

Usage::

    python scripts/run_sweeps.py                    # full size -> results/sweeps_full.npz
    python scripts/run_sweeps.py --reduced          # the tests' configuration -> results/sweeps_reduced.npz
"""

from __future__ import annotations

import argparse
import copy
import datetime
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

from isolab.book.engine import sweep
from isolab.book.engine.tuning import scores  # (S, L), lower is better; inf for a diverged lane
from isolab.book.problems import DeepLinearRegression
from isolab.book.results import Results, Sweep

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "results" / "sweeps_full.npz"
REDUCED_OUTPUT = ROOT / "results" / "sweeps_reduced.npz"

#: label -> (engine optimizer, hyperparameters other than the defaults)
OPTIMIZERS = {
    "sgd": ("sgd", {}),
    "adam": ("adam", {}),
    "iso": ("iso", {}),
    "isoadam": ("isoadam", {}),
    "muon": ("muon", {}),
    "signsgd": ("signsgd", {}),
    "shampoo": ("shampoo", {}),
    "shampoo_ema": ("shampoo", {"beta": 0.95}),
}

FULL = {
    "name": "full",
    "n": 32,
    "batch": 128,
    "seeds": [0, 1, 2],
    "pilot_seed": 100,
    "count": 30,
    "pilot": {"low": 1e-6, "high": 1e2, "per_decade": 4},
    "slow_factor": 4.0,
    "slow_fraction": 0.8,
    "thin": {"dense": 20, "log_points": 60},
    "figures": {
        "fig3": {"depth": 5, "steps": 3000, "metric": "iterations", "threshold": 1e-2},
        "fig4": {"depth": 40, "steps": 1000, "metric": "final_loss", "threshold": None},
    },
    "optimizers": list(OPTIMIZERS),
    "dtype": "float32",
    "num_threads": 1,
}

#: A configuration small enough for the tests (a few seconds): same code path.
REDUCED = {
    **copy.deepcopy(FULL),
    "name": "reduced",
    "n": 8,
    "batch": 16,
    "seeds": [0, 1],
    "count": 6,
    "pilot": {"low": 1e-4, "high": 1e1, "per_decade": 2},
    "thin": {"dense": 5, "log_points": 8},
    "figures": {
        "fig3": {"depth": 3, "steps": 60, "metric": "iterations", "threshold": 0.3},
        "fig4": {"depth": 6, "steps": 40, "metric": "final_loss", "threshold": None},
    },
    "optimizers": ["sgd", "iso"],
}


# ----------------------------------------------------------------------------- pieces
def problem_for(config: dict, figure: str) -> DeepLinearRegression:
    f = config["figures"][figure]
    return DeepLinearRegression(config["n"], f["depth"], config["batch"])


def sweep_kwargs(config: dict, figure: str) -> dict:
    """The engine arguments shared by the pilot, the full run and any re-run of a cell."""
    f = config["figures"][figure]
    kw = dict(record_norms=False, dtype=getattr(torch, config["dtype"]), num_threads=config["num_threads"],
              progress=False)
    if f["threshold"] is not None:
        kw.update(threshold=f["threshold"], relative_threshold=True, retire_at_threshold=True)
    return kw


def run_cell(config: dict, figure: str, label: str, lrs, seeds, steps=None) -> Sweep:
    """One engine sweep of optimizer ``label`` on ``figure`` (optionally fewer ``steps``)."""
    name, hyper = OPTIMIZERS[label]
    f = config["figures"][figure]
    return sweep(problem_for(config, figure), name, np.asarray(lrs, dtype=np.float64),
                 f["steps"] if steps is None else steps, seeds=seeds, hyper=hyper or None,
                 label=f"{figure}/{label}", **sweep_kwargs(config, figure))


def pilot_grid(config: dict) -> np.ndarray:
    p = config["pilot"]
    lo, hi = np.log10(p["low"]), np.log10(p["high"])
    return np.logspace(lo, hi, int(round((hi - lo) * p["per_decade"])) + 1)


def calibrate(pilot: Sweep, metric: str, config: dict) -> dict:
    """The reported grid ``(low, high)`` from a one-seed pilot sweep (module docstring, steps 2-4)."""
    lrs = pilot.lrs
    sc = scores(pilot, metric)[0]
    if not np.isfinite(sc).any():
        raise RuntimeError(f"{pilot.label}: every pilot learning rate diverged")
    i = int(np.argmin(sc))
    best = float(sc[i])
    step = 10 ** (1 / config["pilot"]["per_decade"])
    above = [j for j in range(i + 1, lrs.size) if pilot.diverged[0, j]]
    high = lrs[above[0]] * step if above else lrs[-1]
    if metric == "iterations":
        slow = min(config["slow_factor"] * best, float(pilot.info["steps"]))
    else:
        initial = float(pilot.loss[0, i, 0])
        slow = min(config["slow_factor"] * best, best + config["slow_fraction"] * (initial - best))
    below = [j for j in range(i) if sc[j] >= slow]
    low = lrs[below[-1]] / step if below else lrs[0]
    return {"pilot_seed": int(pilot.seeds[0]), "pilot_lrs": lrs.tolist(), "pilot_scores": sc.tolist(),
            "pilot_best_lr": float(lrs[i]), "pilot_best_score": best, "slow_score": float(slow),
            "low": float(low), "high": float(high), "top_found": bool(above), "bottom_found": bool(below)}


def bracket(s: Sweep, metric: str) -> dict:
    """Checks that the reported grid brackets the optimum (median over seeds).

    ``interior``: the best rate is not at either end; ``top_failed``: the top rate diverged
    (or never converged) for some seed; ``bottom_slow``: the bottom rate is at least twice
    as bad as the best, or for a final loss has lost at least half of the possible
    improvement (median ``loss >= best + (initial - best)/2``).
    """
    m = np.median(s.metric(metric), axis=0)
    i = int(np.argmin(np.where(np.isnan(m), np.inf, m)))
    top_failed = bool(s.diverged[:, -1].any() or not np.isfinite(s.metric(metric)[:, -1]).all())
    bottom_ratio = float(m[0] / m[i]) if np.isfinite(m[i]) and m[i] > 0 else float("nan")
    slow = 2.0 * m[i]
    if metric == "final_loss":
        initial = float(np.median(s.loss[:, 0, 0]))
        slow = min(slow, m[i] + 0.5 * (initial - m[i]))
    return {"best_index": i, "interior": bool(0 < i < s.lrs.size - 1), "top_failed": top_failed,
            "bottom_ratio": bottom_ratio, "bottom_slow": bool(m[0] >= slow)}


def thin_steps(steps: int, config: dict) -> np.ndarray:
    t = config["thin"]
    dense = np.arange(min(t["dense"], steps) + 1)
    logs = np.round(np.geomspace(max(t["dense"], 1), max(steps, 1), t["log_points"])).astype(np.int64)
    return np.unique(np.concatenate([dense, logs[logs <= steps], [steps]]))


def thin(s: Sweep, config: dict) -> Sweep:
    """The sweep with its loss kept at :func:`thin_steps` only (``info["loss_steps"]``)."""
    keep = thin_steps(s.steps, config)
    info = dict(s.info, loss_steps=keep.tolist())
    return Sweep(optimizer=s.optimizer, label=s.label, lrs=s.lrs, seeds=s.seeds, loss=s.loss[..., keep].copy(),
                 weight_norm=None, diverged_at=s.diverged_at, hit_at=s.hit_at, threshold=s.threshold,
                 weights=None, hyper=s.hyper, problem=s.problem, info=info)


def environment() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        if names:
            cpu = names[0]
    except OSError:
        pass
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                                check=False).stdout.strip() or None
    except OSError:
        commit = None
    return {"torch": torch.__version__, "numpy": np.__version__, "python": platform.python_version(),
            "platform": platform.platform(), "cpu": cpu, "cpu_count": os.cpu_count(),
            "device": "cpu", "git_commit": commit}


def log(msg: str, verbose: bool) -> None:
    if verbose:
        print(msg, flush=True)


def run(config: dict, verbose: bool = True) -> Results:
    """Calibrate and run every (figure, optimizer) of ``config``; the returned sweeps are thinned."""
    t_start = time.perf_counter()
    results = []
    timings = {}
    grid = pilot_grid(config)
    jobs = [(fig, label) for fig in config["figures"] for label in config["optimizers"]]
    for k, (fig, label) in enumerate(jobs, 1):
        metric = config["figures"][fig]["metric"]
        t0 = time.perf_counter()
        pilot = run_cell(config, fig, label, grid, [config["pilot_seed"]])
        cal = calibrate(pilot, metric, config)
        t1 = time.perf_counter()
        lrs = np.logspace(np.log10(cal["low"]), np.log10(cal["high"]), config["count"])
        s = run_cell(config, fig, label, lrs, config["seeds"])
        t2 = time.perf_counter()
        s.info["calibration"] = cal
        s.info["bracket"] = bracket(s, metric)
        s.info["metric"] = metric
        s.info["pilot_seconds"] = t1 - t0
        timings[s.label] = {"pilot": t1 - t0, "sweep": t2 - t1}
        lr, v = s.best(metric)
        log(f"[{k}/{len(jobs)}] {s.label:18s} grid {cal['low']:.2e}..{cal['high']:.2e}  best lr {lr:.3g} -> "
            f"{metric} {v:.4g}  bracket {s.info['bracket']}  (pilot {t1 - t0:.1f} s, sweep {t2 - t1:.1f} s, "
            f"total {t2 - t_start:.0f} s)", verbose)
        results.append(thin(s, config))
    total = time.perf_counter() - t_start
    meta = {"config": config, "environment": environment(), "total_seconds": total,
            "finished": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "script": "scripts/run_sweeps.py"}
    for s in results:
        s.info["run"] = meta
    log(f"done: {len(results)} sweeps in {total:.0f} s", verbose)
    return Results(results)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("output", nargs="?", default=None,
                    help="where to save (.npz; default results/sweeps_full.npz, or results/sweeps_reduced.npz)")
    ap.add_argument("--reduced", action="store_true", help="the small test configuration")
    args = ap.parse_args(argv)
    config = REDUCED if args.reduced else FULL
    torch.set_num_threads(config["num_threads"])
    out = Path(args.output or (REDUCED_OUTPUT if args.reduced else OUTPUT))
    out.parent.mkdir(parents=True, exist_ok=True)
    results = run(config)
    results.save(out)
    print(f"saved {out} ({out.stat().st_size / 1e6:.2f} MB)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
