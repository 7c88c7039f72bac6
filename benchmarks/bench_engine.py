"""Time of the vectorized engine against one learning rate at a time through torch.optim.

Run:  python benchmarks/bench_engine.py [--quick] [--threads 1] [--optimizers sgd iso ...]

Prints, per optimizer (SGD, SignSGD, Adam, Muon, Shampoo, Iso, IsoAdam, each with its
default hyperparameters and the learning-rate grid ``isolab.engine.paper_lrs``):

(a) Figure 4 at full size: deep linear regression, 40 layers, n = 32, batch 128, 1000
    iterations, 30 learning rates, as one ``isolab.engine.sweep`` (float32).
(b) The same runs one learning rate at a time through the torch.optim optimizers
    (``isolab.engine.reference_run``, float32): timed on the smallest learning rate of the
    grid for a few iterations and extrapolated linearly to the lane-steps the sweep ran (a
    diverged learning rate stops at its divergence in both), and the ratio (b)/(a).
(c) Figure 3: 5 layers, iterations to a loss of 1e-3 x the initial loss (lanes retire when
    they reach it), at most 3000 iterations.
(d) The reduced sweep a chapter's slider triggers: 10 learning rates, 100 iterations,
    depth 8, n = 16, batch 64: median time over repeats.

``--quick`` (< 60 s): (a) runs 40 iterations and extrapolates to 1000, (b) times 3
iterations, (c) runs at most 300 iterations, (d) takes 3 repeats; the table says which
numbers are extrapolated.  Timings on a shared CPU are noisy: use ``--threads 1``.
Targets (issue 4): (a) < 60 s (< 90 s for Muon, Shampoo, Iso, IsoAdam); (b)/(a) >= 10;
(c) < 20 s; (d) < 0.3 s (< 1 s for the root-needing optimizers).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from isolab.engine import OPTIMIZERS, paper_lrs, reference_run, sweep
from isolab.problems import DeepLinearRegression

ROOTS = ("muon", "shampoo", "iso", "isoadam")


def lane_steps(s) -> int:
    """Steps computed over all lanes (a diverged lane stops at its divergence)."""
    d = s.diverged_at.reshape(-1)
    return int(np.where(d >= 0, d, s.info["steps_run"]).sum())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--optimizers", nargs="+", default=list(OPTIMIZERS))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    q = args.quick
    fig4 = DeepLinearRegression(n=32, depth=40, batch=128)
    fig3 = DeepLinearRegression(n=32, depth=5, batch=128)
    slider = DeepLinearRegression(n=16, depth=8, batch=64)
    steps4 = 40 if q else 1000
    ref_steps = 3 if q else 10
    max3 = 300 if q else 3000
    repeats = 3 if q else 5
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, {'QUICK (extrapolated)' if q else 'full'}")
    print(f"{'optimizer':9} {'fig4 s':>8} {'ref s':>8} {'ratio':>6} {'div':>4} {'fig4 best lr':>12} {'fig3 s':>7} "
          f"{'conv':>5} {'slider ms':>9}  targets")
    rows = []
    for name in args.optimizers:
        lrs = paper_lrs(name, 30)
        # (a)
        t = time.perf_counter()
        s4 = sweep(fig4, name, lrs, steps4, progress="auto")
        t4 = (time.perf_counter() - t) * (1000 / steps4)
        # (b)
        ref_lr = float(lrs[0])
        reference_run(fig4, name, ref_lr, 1, dtype=torch.float32)  # warm-up
        t = time.perf_counter()
        reference_run(fig4, name, ref_lr, ref_steps, dtype=torch.float32)
        per_step = (time.perf_counter() - t) / (ref_steps + 1)
        tref = per_step * lane_steps(s4) * (1000 / steps4)
        # (c)
        t = time.perf_counter()
        s3 = sweep(fig3, name, lrs, max3, threshold=1e-3, relative_threshold=True, retire_at_threshold=True)
        t3 = time.perf_counter() - t
        conv = int((s3.hit_at >= 0).sum())
        # (d)
        times = []
        sweep(slider, name, np.logspace(-4, -1, 10), 10)  # warm-up
        for _ in range(repeats):
            t = time.perf_counter()
            sweep(slider, name, np.logspace(-4, -1, 10), 100, progress=False)
            times.append(time.perf_counter() - t)
        td = statistics.median(times)
        lim4 = 90 if name in ROOTS else 60
        limd = 1.0 if name in ROOTS else 0.3
        checks = {
            f"fig4<{lim4}s": t4 < lim4, "ratio>=10": tref / t4 >= 10, "fig3<20s": t3 < 20, f"slider<{limd}s": td < limd,
        }
        verdict = " ".join(f"{k}:{'PASS' if v else 'FAIL'}" for k, v in checks.items())
        best = s4.best()[0]
        print(f"{name:9} {t4:8.1f} {tref:8.1f} {tref / t4:6.1f} {int(s4.diverged.sum()):4d} {best:12.3g} {t3:7.1f} "
              f"{conv:3d}/30 {td * 1000:9.0f}  {verdict}", flush=True)
        rows.append(checks)
    if q:
        print(f"quick: fig4 = {steps4} iterations x {1000 // steps4}; ref = {ref_steps} iterations per lr, "
              "extrapolated to the sweep's lane-steps; fig3 capped at 300 iterations")
    else:
        print(f"ref = {ref_steps} iterations at the grid's smallest lr, extrapolated to the sweep's lane-steps "
              "(30 lrs x 1000 iterations less the steps after a divergence)")
    n_fail = sum(not v for r in rows for v in r.values())
    print(f"{sum(len(r) for r in rows) - n_fail} PASS, {n_fail} FAIL")


if __name__ == "__main__":
    main()
