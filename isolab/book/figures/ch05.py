r"""Figures, shared computations and the explorable of Chapter 5, *The pure noise problem*.

Each figure function builds and returns a :class:`matplotlib.figure.Figure` (no pyplot) in
the book's style (:mod:`isolab.book.figures.style`). Where a figure and a check (or a caption's
promise) share a computation, it lives here once:

* :func:`explore_run` (cached) trains the pure noise problem (``n = 16``, one sample per
  step, four seeds, 400 steps) for one depth, optimizer and weight decay over the nine
  learning rates :data:`EXPLORE_LRS`; :func:`run_summary` fits it and decides whether the
  growth is exponential (:func:`is_exponential`). The hero and the explorable both draw it.
* :func:`hero`: the weight norm against the step, SGD with one and two layers against
  Adam and Iso with two, and the norm after 400 steps against the learning rate.
* :func:`phase_plane` (section 5.2): the scalar problem ``n = 1, k = 2``; each step moves
  ``(u, v)`` along ``±(v, u)``, a step as long as the point is far from the origin.
* :func:`scalar_runs`, :func:`lyapunov`, :func:`lyapunov_threshold` and
  :func:`scalar_noise` (section 5.5): for scalar weights the mean square grows while the
  typical run shrinks, and the typical rate changes sign near ``η ≈ 1.53``.
* :func:`rate_figure` (section 5.4), :func:`weight_decay_figure` (section 5.6) and
  :func:`comparison` (section 5.7) draw what the chapter computes.
* :func:`pure_noise_explorable` (section 5.9): sliders learning rate (main), depth, weight
  decay and optimizer; :data:`EXPLORABLES` lists it for the caption tests.
"""

from __future__ import annotations

import functools
import json
import math
import warnings
from pathlib import Path

import numpy as np
import torch
from matplotlib.figure import Figure

from isolab.book import noise_dynamics as nd
from isolab.book.engine import sweep
from isolab.book.explorable import Explorable, FigureMessage, Promise, Slider
from isolab.book.figures import style
from isolab.book.seeding import generator

__all__ = [
    "N", "BATCH", "EXPLORE_LRS", "EXPLORE_STEPS", "EXPLORE_SEEDS", "OPTIMIZERS", "RESULTS", "STORED_DEPTHS",
    "WEIGHT_DECAYS", "encode", "decode", "run_key", "compute_run", "explore_run", "run_summary", "COMPARE_SETUPS", "COMPARE_STEPS",
    "COMPARE_DEPTHS", "compute_comparison", "comparison_runs",
    "is_exponential", "describe", "hero", "phase_plane", "scalar_runs", "lyapunov", "lyapunov_threshold",
    "scalar_noise", "rate_figure", "weight_decay_figure", "comparison", "DEPTHS", "DECAYS", "y_range",
    "draw_pure_noise", "pure_noise_explorable", "EXPLORABLES",
]

N, BATCH = 16, 1
BOUND, MUTED, HIGHLIGHT, DATA = (style.ROLES[k] for k in ("bound", "muted", "highlight", "data"))
_CYCLE = style.rc()["axes.prop_cycle"].by_key()["color"]   # the book's colour-blind-safe cycle
SMALL = style.FONT_SIZE - 1

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


def _sup(e: int) -> str:
    return "10" + str(e).translate(str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")) if e not in (0, 1) else ("1" if e == 0 else "10")


def _log_ticks(axis, exponents) -> None:
    from matplotlib.ticker import NullLocator

    exponents = list(exponents)
    axis.set_ticks([10.0 ** e for e in exponents], [_sup(e) for e in exponents])
    axis.set_minor_locator(NullLocator())


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


# --------------------------------------------------------------------------- the hero
HERO_LR = 0.1
HERO_CURVES = (("SGD", 2, "SGD, two layers"), ("SGD", 1, "SGD, one layer"),
               ("Adam", 2, "Adam, two layers"), ("Iso", 2, "Iso, two layers"))


def hero() -> Figure:
    """Left: the total weight norm against the step at lr 0.1 (median of four seeds),
    SGD with two layers against SGD with one and Adam and Iso with two. Right: the norm
    after 400 steps, relative to the start, against the learning rate."""
    fig = Figure(figsize=(style.FIG_WIDTH, 3.9))
    ax, ax_lr = fig.subplots(1, 2, gridspec_kw=dict(width_ratios=(1.25, 1)))
    t = np.arange(EXPLORE_STEPS + 1)
    i = EXPLORE_LRS.index(HERO_LR)
    for opt, depth, label in HERO_CURVES:
        curves = explore_run(depth, opt, 0.0)[:, i]
        median = np.median(curves, axis=0)
        kw = style.line(opt, label=label, markevery=50)
        if depth == 1:
            kw.update(color=MUTED, marker="x", linestyle="-")
        ax.plot(t, median, **kw)
        dy = {"Adam": 10, "Iso": -13}.get(opt, 0)
        style.label_end(ax, t, median, label, color=kw["color"] if depth == 2 else BOUND, dy=dy)
    rate = run_summary(2, "SGD", 0.0, HERO_LR)["rate"]
    ax.text(20, 3e10, f"SGD, two layers: exponential,\n‖W‖ ∝ e^({rate:.3f} t)", fontsize=SMALL, color=style.color("SGD"))
    ax.set(yscale="log", ylim=(2, 1e12), xlim=(0, EXPLORE_STEPS), xlabel="step t", ylabel="total weight norm ‖W‖",
           title=f"Nothing to learn, lr {HERO_LR:g}")
    _log_ticks(ax.yaxis, [1, 4, 8, 12])
    ax.set_xticks([0, 200, 400])
    # right: the norm after 400 steps relative to the start, at every learning rate
    lrs = np.array(EXPLORE_LRS)
    for opt, depth, label in HERO_CURVES:
        ratios = np.array([run_summary(depth, opt, 0.0, lr)["ratio"] for lr in EXPLORE_LRS])
        kw = style.line(opt, label=label)
        if depth == 1:
            kw.update(color=MUTED, marker="x", linestyle="-")
        ax_lr.plot(lrs, ratios, **kw)
        over = ~np.isfinite(ratios)
        if over.any():
            ax_lr.plot(lrs[over], np.full(over.sum(), 3e12), "^", color=kw["color"], clip_on=False)
    ax_lr.text(0.8, 3e12, "overflow", ha="right", va="center", fontsize=SMALL, color=style.color("SGD"))
    ax_lr.text(0.011, 1e8, "SGD, two layers", fontsize=SMALL, color=style.color("SGD"))
    ax_lr.text(1.0, 0.7, "the others", fontsize=SMALL, color=BOUND, ha="right")
    ax_lr.set(xscale="log", yscale="log", ylim=(0.5, 3e12), xlabel="learning rate η",
              ylabel="‖W₄₀₀‖ / ‖W₀‖ (median of 4 seeds)", title="after 400 steps, every η")
    _log_ticks(ax_lr.xaxis, [-2, -1, 0])
    _log_ticks(ax_lr.yaxis, [0, 4, 8, 12])
    fig.tight_layout()
    return fig


# ----------------------------------------------------------- section 5.2: phase plane
def scalar_trajectory(eta: float, steps: int, start=(1.0, 0.3), seed: int = 0) -> np.ndarray:
    """``(u_t, v_t)`` for ``n = 1, k = 2``: ``u' = u − ηξv``, ``v' = v − ηξu`` with ``ξ = xz``."""
    gen = generator(seed)
    xi = (torch.randn(steps, generator=gen, dtype=torch.float64) * torch.randn(steps, generator=gen, dtype=torch.float64)).numpy()
    out = np.empty((steps + 1, 2))
    out[0] = start
    for t in range(steps):
        u, v = out[t]
        out[t + 1] = (u - eta * xi[t] * v, v - eta * xi[t] * u)
    return out


def phase_plane(eta: float = 0.25) -> Figure:
    """The scalar problem's step field: at ``(u, v)`` a step moves along ``±(v, u)``, the
    point reflected in the diagonal, as long as the point is far from the origin; the two
    diagonals are the directions that are only stretched or shrunk."""
    fig = Figure(figsize=(style.FIG_WIDTH, 4.2))
    ax, ax_t = fig.subplots(1, 2)
    grid = np.linspace(-2, 2, 9)
    U, V = np.meshgrid(grid, grid)
    for sign in (1, -1):   # the step for ξ = ∓1: ±η (v, u), an arrow each way from every point
        ax.quiver(U, V, sign * eta * V, sign * eta * U, angles="xy", scale_units="xy", scale=1, color=DATA,
                  width=0.006, headwidth=3.5, headlength=4, headaxislength=3.5)
    ax.plot(U.ravel(), V.ravel(), ".", color=DATA, ms=4)
    ax.plot([-2.4, 2.4], [-2.4, 2.4], color=HIGHLIGHT, lw=1.5, ls="--")
    ax.plot([-2.4, 2.4], [2.4, -2.4], color=HIGHLIGHT, lw=1.5, ls="--")
    box = dict(facecolor=style.ROLES["background"], edgecolor="none", alpha=0.85, pad=1)
    ax.text(2.4, 1.95, "u + v: ×(1 − ηξ)", color=style.text_color(HIGHLIGHT), fontsize=SMALL, ha="right", bbox=box)
    ax.text(-2.4, 1.95, "u − v: ×(1 + ηξ)", color=style.text_color(HIGHLIGHT), fontsize=SMALL, ha="left", bbox=box)
    ax.set(xlim=(-2.5, 2.5), ylim=(-2.5, 2.6), aspect="equal", xlabel="u = W₁", ylabel="v = W₂",
           title=f"one step, ξ = ±1, η = {eta:g}")
    ax.set_xticks([-2, 0, 2])
    ax.set_yticks([-2, 0, 2])
    # right: |u ± v| along one run: products of independent-looking factors
    path = scalar_trajectory(1.0, 200)
    t = np.arange(path.shape[0])
    ax_t.plot(t, np.abs(path[:, 0] + path[:, 1]), color=HIGHLIGHT, label="|u + v|")
    ax_t.plot(t, np.abs(path[:, 0] - path[:, 1]), color=DATA, ls="--", label="|u − v|")
    ax_t.plot(t, np.power(2.0, t / 2) * math.hypot(1.0, 0.3), color=BOUND, ls=":", lw=1.5)
    ax_t.text(45, 3e7, "root mean square:\n×√(1 + η²) per step", color=BOUND, fontsize=SMALL)
    ax_t.set(yscale="log", ylim=(1e-12, 1e12), xlabel="step t", ylabel="|u ± v|",
             title="one run, η = 1: up and down, typically down")
    _log_ticks(ax_t.yaxis, [-12, -6, 0, 6, 12])
    ax_t.set_xticks([0, 100, 200])
    ax_t.legend(loc="lower left")
    fig.tight_layout()
    return fig


# ------------------------------------------------------ section 5.5: scalar weights
def scalar_runs(eta: float, steps: int, runs: int = 20_000, seed: int = 0, start=(1.0, 0.3)) -> np.ndarray:
    """``log10 ||(u_t, v_t)||`` for ``runs`` independent scalar runs, ``[steps + 1, runs]``,
    computed through ``u ± v`` (each multiplied by ``1 ∓ ηξ``) in float64 logs."""
    gen = generator(seed)
    xi = torch.randn(steps, runs, generator=gen, dtype=torch.float64) * torch.randn(steps, runs, generator=gen, dtype=torch.float64)
    s0, d0 = start[0] + start[1], start[0] - start[1]
    log_s = math.log(abs(s0)) + torch.cat([torch.zeros(1, runs, dtype=torch.float64), torch.log((1 - eta * xi).abs()).cumsum(0)])
    log_d = math.log(abs(d0)) + torch.cat([torch.zeros(1, runs, dtype=torch.float64), torch.log((1 + eta * xi).abs()).cumsum(0)])
    # ||(u, v)||^2 = ((u + v)^2 + (u - v)^2) / 2
    log_norm = 0.5 * (torch.logaddexp(2 * log_s, 2 * log_d) - math.log(2.0))
    return (log_norm / math.log(10.0)).numpy()


@functools.lru_cache(maxsize=None)
def _xi(samples: int = 2_000_000, seed: int = 3) -> torch.Tensor:
    gen = generator(seed)
    return torch.randn(samples, generator=gen, dtype=torch.float64) * torch.randn(samples, generator=gen, dtype=torch.float64)


def lyapunov(etas, samples: int = 2_000_000) -> np.ndarray:
    """Monte Carlo ``E log|1 − ηξ|`` (the typical growth rate of ``|u ± v|`` per step), on
    the first ``samples`` of one fixed sample of two million ``ξ``."""
    xi = _xi()[:samples]
    return np.array([torch.log((1 - float(e) * xi).abs()).mean().item() for e in np.atleast_1d(etas)])


def lyapunov_threshold(lo: float = 1.4, hi: float = 1.7, iters: int = 16) -> float:
    """The learning rate where :func:`lyapunov` changes sign (bisection on the fixed sample)."""
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if lyapunov(mid)[0] < 0 else (lo, mid)
    return 0.5 * (lo + hi)


SCALAR_ETA, SCALAR_TIMES = 0.5, (10, 30, 100)


def scalar_noise(log_norms: np.ndarray | None = None, threshold: float | None = None) -> Figure:
    """Left: histograms of ``log10 ||W_t||`` over 20 000 scalar runs (η = 0.5) at several
    steps, with the median and the exact root mean square. Right: the typical rate
    ``E log|1 − ηξ|`` against η, with the mean-square rate and the sign change."""
    log_norms = scalar_runs(SCALAR_ETA, max(SCALAR_TIMES)) if log_norms is None else log_norms
    threshold = lyapunov_threshold() if threshold is None else threshold
    fig = Figure(figsize=(style.FIG_WIDTH, 3.9))
    ax, ax_r = fig.subplots(1, 2)
    bins = np.linspace(-10, 6, 81)
    r0 = math.log10(math.hypot(1.0, 0.3))
    for t, color in zip(SCALAR_TIMES, style.sequence(len(SCALAR_TIMES))):
        ax.hist(log_norms[t], bins=bins, histtype="step", color=color, lw=2, density=True, label=f"t = {t}")
        med = float(np.median(log_norms[t]))
        rms = r0 + 0.5 * t * math.log10(1 + SCALAR_ETA ** 2)
        ax.axvline(med, color=color, lw=1.5, ls=":", ymax=0.9)
        ax.plot([rms], [1.62], "v", color=color, ms=8, clip_on=False)
    ax.text(-9.8, 1.62, "▼ root mean square (exact)", fontsize=SMALL, color=BOUND, va="center")
    ax.legend(loc="center left")
    ax.set(xlim=(-10, 6), ylim=(0, 1.7), xlabel="log₁₀ ‖W_t‖ (n = 1, k = 2)", ylabel="density over 20 000 runs",
           title=f"η = {SCALAR_ETA:g}: the median (dotted) falls")
    ax.set_xticks([-8, -4, 0, 4])
    ax.set_yticks([0, 0.5, 1.0, 1.5])
    etas = np.linspace(0.05, 3.0, 40)
    ax_r.plot(etas, 0.5 * np.log1p(etas ** 2), color=BOUND, lw=2, ls="--")
    ax_r.text(0.1, 0.88, "mean square: ½ log(1 + η²)", color=BOUND, fontsize=SMALL)
    ax_r.plot(etas, lyapunov(etas, samples=200_000), color=DATA, lw=2.5)
    ax_r.text(2.0, -0.12, "typical run:\nE log|1 − ηξ|", color=DATA, fontsize=SMALL)
    ax_r.axhline(0, color=MUTED, lw=1)
    ax_r.plot([threshold], [0], "o", color=HIGHLIGHT, ms=8)
    ax_r.annotate(f"sign change at η ≈ {threshold:.2f}", (threshold, 0), xytext=(0, 20), textcoords="offset points",
                  ha="center", color=style.text_color(HIGHLIGHT), fontsize=SMALL)
    ax_r.set(xlim=(0, 3), ylim=(-0.25, 1.0), xlabel="learning rate η", ylabel="growth rate of log‖W‖ per step",
             title="rates of the mean and of a run")
    ax_r.set_xticks([0, 1, 2, 3])
    ax_r.set_yticks([-0.2, 0, 0.5, 1.0])
    fig.tight_layout()
    return fig


# --------------------------------------------------- sections 5.4, 5.6, 5.7: figures
def rate_figure(norms: dict, rate: dict, late_rate_k1, lrs) -> Figure:
    """Section 5.4: norms of seed 0 against the step for one and two layers, and the
    fitted rates against the learning rate with the two predictions."""
    fig = Figure(figsize=(style.FIG_WIDTH, 4.0))
    ax_t, ax_r = fig.subplots(1, 2)
    top = 1e4
    for i, color in zip(range(3), style.sequence(3)):
        y = norms[2][0, i].numpy()
        ax_t.plot(y, color=color)
        ax_t.plot(norms[1][0, i], color=color, ls=":")
        inside = np.flatnonzero(np.isfinite(y) & (y <= top))
        last = int(inside[-1])
        if last == len(y) - 1:   # the curve stays in the plot: label its end
            style.label_end(ax_t, np.arange(len(y)), y, f"η = {lrs[i]:.2g}", color=color)
        else:                    # it leaves through the top: label it there
            ax_t.annotate(f"η = {lrs[i]:.2g}", (last, top), xytext=(-4, -8), textcoords="offset points", ha="right",
                          va="top", fontsize=SMALL, color=style.text_color(color))
    ax_t.text(1900, 25, "one layer (dotted): √t", ha="right", fontsize=SMALL, color=BOUND)
    ax_t.set(yscale="log", ylim=(1, top), xlabel="step t", ylabel="‖W‖ (seed 0)", title="two layers: straight lines")
    _log_ticks(ax_t.yaxis, [0, 1, 2, 3, 4])
    ax_t.set_xticks([0, 1000, 2000])
    fine = np.logspace(-2, 1, 100)
    ax_r.plot(fine, nd.predicted_rate(N, BATCH, fine), color=BOUND, lw=1.5)
    ax_r.plot(fine, 0.5 * fine ** 2 * (N - 2) / BATCH, color=BOUND, ls="--", lw=1.5)
    ax_r.text(0.012, 2e-3, "mean square\n(solid), rank-one\nruns (dashed)", fontsize=SMALL, color=BOUND)
    for (k, marker), color in zip([(2, "o"), (3, "s"), (4, "^")], style.sequence(3)):
        ax_r.plot(lrs, rate[k], marker, color=color)
        ax_r.annotate(f"k = {k}", (lrs[-1], float(rate[k][-1])), xytext=(6, {2: 0, 3: -9, 4: 8}[k]), textcoords="offset points",
                      color=color, fontsize=SMALL, va="center")
    ax_r.plot(lrs, np.clip(np.asarray(late_rate_k1), 1e-7, None), "x", color=BOUND)
    ax_r.text(lrs[-1], 1.2e-4, "k = 1 ", ha="right", fontsize=SMALL, color=BOUND)
    ax_r.set(xscale="log", yscale="log", ylim=(1e-5, 1e2), xlabel="learning rate η", ylabel="rate of log‖W‖ per step",
             title="fitted rates, mean of 4 seeds")
    _log_ticks(ax_r.xaxis, [-2, -1, 0, 1])
    _log_ticks(ax_r.yaxis, [-4, -2, 0, 2])
    fig.tight_layout()
    return fig


def weight_decay_figure(norms, lrs, wd: float, rates, shifted_rates) -> Figure:
    """Section 5.6. Left: two layers under SGD with weight decay, median over seeds
    (bold) and every seed (thin), one colour and line style per learning rate. Right:
    the rate of each seed against η, the mean-square prediction, and the exact relation
    ``log(1 − ηλ) + r₀(η/(1 − ηλ))`` with ``r₀`` measured without decay."""
    fig = Figure(figsize=(style.FIG_WIDTH, 4.0))
    ax, ax_r = fig.subplots(1, 2, gridspec_kw=dict(width_ratios=(1.2, 1)))
    colors = _CYCLE[:len(lrs)]   # five clearly different colours, and line styles too
    dashes = ["-", "--", "-.", ":", "-"]
    t = np.arange(norms.shape[-1])
    for i, (lr, color) in enumerate(zip(lrs, colors)):
        runs = np.asarray(norms[:, i])
        for r in runs:
            ax.plot(t, r, color=color, lw=0.8, alpha=0.6)
        med = np.median(runs, axis=0)
        ax.plot(t, med, color=color, lw=2.5, ls=dashes[i % len(dashes)])
        style.label_end(ax, t, med, f"η = {lr:.3g}", color=color, dy={1: 8, 2: -8}.get(i, 0))
    ax.text(300, 1e26, f"η = {lrs[3]:.3g} and {lrs[4]:.3g}: explode", fontsize=SMALL, color=colors[3])
    ax.set(yscale="log", ylim=(1e-30, 1e30), xlabel="step t", ylabel="‖W‖ (4 seeds, median bold)",
           title=f"two layers, SGD, weight decay λ = {wd:g}")
    _log_ticks(ax.yaxis, [-30, -15, 0, 15, 30])
    ax.set_xticks([0, 1000, 2000])
    fine = np.logspace(-2, 0, 100)
    ax_r.plot(fine, nd.predicted_rate(N, BATCH, fine, wd), color=BOUND, lw=1.5)
    ax_r.text(0.35, 0.55, "mean square", color=BOUND, fontsize=SMALL, ha="right")
    ax_r.plot(lrs, shifted_rates, "s", mfc="none", color=HIGHLIGHT, ms=10, mew=1.5)
    ax_r.text(0.012, 0.25, "□ log(1 − ηλ) + measured rate\n   without decay at η/(1 − ηλ)", color=HIGHLIGHT, fontsize=SMALL)
    for i, color in enumerate(colors):
        ax_r.plot(np.full(rates.shape[0], lrs[i]), rates[:, i], "o", color=color, ms=5)
    ax_r.axhline(0, color=MUTED, lw=1)
    ax_r.set(xscale="log", ylim=(-0.1, 0.9), xlabel="learning rate η", ylabel="rate per step (each seed)",
             title="collapse below η*, explosion above")
    _log_ticks(ax_r.xaxis, [-2, -1, 0])
    fig.tight_layout()
    return fig


def comparison(compare: dict) -> Figure:
    """Section 5.7: two layers at the larger learning rates on log-log axes, with a √t guide."""
    fig = Figure(figsize=(style.FIG_WIDTH, 4.0))
    ax = fig.subplots()
    t = np.arange(1, COMPARE_STEPS + 1)
    for name, (grid, _) in COMPARE_SETUPS.items():
        y = compare[(name, 2)][1, 1:]
        ax.plot(t, y, **style.line(name, label=style.look(name).name, markevery=0.1))
        style.label_end(ax, t, y, f"{style.look(name).name}, lr {grid[1]:g}", optimizer=name,
                        dy={"muon": 9, "adam": 0, "iso": -10, "isoadam": -6}.get(name, 0))
    ax.plot(t, 5.0 * np.sqrt(t), color=BOUND, ls=":", lw=1.5)
    ax.text(2, 5.0 * math.sqrt(2) * 1.6, "∝ √t", color=BOUND, fontsize=SMALL)
    ax.set(xscale="log", yscale="log", ylim=(3, 1e4), xlim=(1, 4 * COMPARE_STEPS), xlabel="step t", ylabel="‖W‖",
           title="two layers: SGD leaves the plot, the others drift like √t")
    _log_ticks(ax.xaxis, [0, 1, 2, 3])
    _log_ticks(ax.yaxis, [1, 2, 3, 4])
    fig.tight_layout()
    return fig


# --------------------------------------------------------- section 5.9: the explorable
#: The toggles' names and the values they stand for.
DEPTHS = {"k = 2": 2, "k = 4": 4}
DECAYS = {"none": 0.0, "λ = 0.3": 0.3}
#: The y axis keeps one range per optimizer, depth and weight decay (over every learning
#: rate, so that moving the learning rate shows the change), within these decades.
Y_FLOOR, Y_CEILING = -16.0, 12.0

EXPLORE_CAPTION = (
    "Total weight norm against step on the pure noise problem (n = 16, one sample per step, four seeds: "
    "median bold, band from the lowest to the highest seed; dashed: SGD's exact root mean square for two "
    "layers; dotted: a random walk's √t). The y axis is scaled to each optimizer, depth and weight decay. "
    "Move the learning rate: with SGD, two or more layers and no weight decay the fitted rate is positive "
    "and grows with the learning rate; with weight decay 0.3 SGD's two layers collapse below η* ≈ 0.037 and "
    "explode above it; Adam and Iso without weight decay never grow faster than a random walk (log–log slope "
    "below 1). A rate per step is printed only where the norm grows or shrinks exponentially."
)


def _numeric(measure):
    """A promise's measure on the toggles' names (it computes on the numbers they stand for)."""
    def on_names(lr, depth, weight_decay, optimizer):
        return measure(lr, DEPTHS[depth], DECAYS[weight_decay], optimizer)
    return on_names


def _sgd_rate(lr, depth, weight_decay, optimizer):
    if optimizer != "SGD" or depth < 2 or weight_decay:
        return None
    s = run_summary(depth, optimizer, weight_decay, lr)
    return s["rate"] if math.isfinite(s["rate"]) else math.inf


def _sgd_decay_sign(lr, depth, weight_decay, optimizer):
    if optimizer != "SGD" or depth != 2 or not weight_decay:
        return None
    return (lr, run_summary(depth, optimizer, weight_decay, lr)["rate"])


def _adaptive_slope(lr, depth, weight_decay, optimizer):
    if optimizer == "SGD" or weight_decay:
        return None
    return run_summary(depth, optimizer, weight_decay, lr)["slope"]


class _Check:
    """A promise predicate with a readable description."""

    def __init__(self, description, test):
        self.description, self.test = description, test

    def __call__(self, values):
        return bool(self.test(values))

    def __repr__(self):
        return self.description


def _positive_increasing(values):
    v = [x for x in values if x is not None]
    return all(x > 0 for x in v) and all(b >= a for a, b in zip(v, v[1:]))


def _eta_star_split(values):
    v = [x for x in values if x is not None]
    star = 2 * 0.3 * BATCH / (0.3 ** 2 * BATCH + N)
    return all((r < 0) == (lr < star) for lr, r in v)


@functools.lru_cache(maxsize=None)
def y_range(depth: int, optimizer: str, weight_decay: float) -> tuple[float, float]:
    """The decades the explorable's y axis spans for one optimizer, depth and weight decay:
    every seed's finite norm at every learning rate, with a quarter decade to spare, within
    :data:`Y_FLOOR` … :data:`Y_CEILING` (an overflowing run leaves through the top)."""
    _, low, high = _log_curves(depth, optimizer, weight_decay)
    lo = float(np.nanmin(np.where(np.isfinite(low), low, np.nan)))
    hi = float(np.nanmax(np.where(np.isfinite(high), high, np.nan)))
    hi = Y_CEILING if (~np.isfinite(high)).any() else hi
    return max(Y_FLOOR, math.floor(4 * lo - 1) / 4), min(Y_CEILING, math.ceil(4 * hi + 1) / 4)


def _decade_ticks(lo: float, hi: float) -> tuple[list[float], list[str]]:
    """Ticks at powers of ten inside (lo, hi), at most five; where fewer than two fit, at 1, 2
    and 5 times them."""
    from isolab.book.plotting import power_of_ten

    decades = list(range(math.ceil(lo), math.floor(hi) + 1))
    if len(decades) >= 2:
        step = max(1, math.ceil(len(decades) / 5))
        decades = decades[::step]
        return decades, [power_of_ten(e) for e in decades]
    ticks = [(e + math.log10(m), m * 10.0 ** e) for e in range(math.floor(lo), math.ceil(hi) + 1) for m in (1, 2, 5)]
    ticks = [(t, v) for t, v in ticks if lo < t < hi]
    return [t for t, _ in ticks], [f"{v:g}" for _, v in ticks]


def _draw(fig, lr, depth, weight_decay, optimizer):
    # log10 of the norms on a linear axis (labelled as powers of ten): cheaper to redraw than a log axis
    curves = _log_curves(depth, optimizer, weight_decay)
    i = EXPLORE_LRS.index(lr)
    s = run_summary(depth, optimizer, weight_decay, lr)
    if s["last"] < 2:
        raise FigureMessage(f"{optimizer}, k = {depth}: the weights overflow float64 within {s['last'] + 1} steps "
                            "(faster than exponential)")
    t = _STEPS_AXIS
    ax = fig.subplots()
    color = style.color(optimizer)
    low, high, median = curves[1][i], curves[2][i], curves[0][i]
    ax.fill_between(t, low, high, color=color, alpha=0.25, lw=0)
    ax.plot(t, median, **style.line(optimizer, markevery=100, lw=2.5))
    if optimizer == "SGD" and depth <= 2:
        ax.plot(t, np.log10(_rms(depth, lr, weight_decay)), ls="--", color=BOUND, lw=1.5)
    w0 = float(curves[0][i][0])
    ax.plot(t, w0 + 0.5 * np.log10(1 + t / 4.0), ls=":", color=BOUND, lw=1.5)
    if s["overflow"]:
        ax.text(0.98, 0.08, f"float64 overflow at step {s['last'] + 1}", transform=ax.transAxes, ha="right",
                fontsize=SMALL, color=style.text_color(color))
    lo, hi = y_range(depth, optimizer, weight_decay)
    ax.set(ylim=(lo, hi), xlim=(0, EXPLORE_STEPS), xlabel="step", ylabel="‖W‖ (log scale)",
           title=describe(depth, optimizer, weight_decay, lr))
    ax.set_yticks(*_decade_ticks(lo, hi))
    ax.set_xticks([0, 200, 400])
    ax.minorticks_off()


def draw_pure_noise(fig, lr, depth, weight_decay, optimizer):
    """The explorable's frame, from the toggles' names (:data:`DEPTHS`, :data:`DECAYS`)."""
    _draw(fig, lr, DEPTHS[depth], DECAYS[weight_decay], optimizer)


_STEPS_AXIS = np.arange(EXPLORE_STEPS + 1)


@functools.lru_cache(maxsize=None)
def _log_curves(depth, optimizer, weight_decay):
    """log10 of the median, lowest and highest seed, ``[lr, step]`` each (NaN after an overflow)."""
    curves = explore_run(depth, optimizer, weight_decay)
    with warnings.catch_warnings(), np.errstate(invalid="ignore", divide="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)   # all seeds overflowed at the end of a run
        logs = np.log10(curves)
        return np.median(logs, axis=0), np.nanmin(logs, axis=0), np.nanmax(logs, axis=0)


@functools.lru_cache(maxsize=None)
def _rms(depth, lr, weight_decay):
    a0 = nd.SharedPureNoise(N, depth, BATCH).initial_weights(0).square().sum((-2, -1)).tolist()
    return nd.mean_square_norms(N, BATCH, lr, EXPLORE_STEPS, a0, weight_decay).sum(-1).sqrt().numpy()


def pure_noise_explorable() -> Explorable:
    """Sliders: learning rate (main, nine values); toggles: depth, weight decay, optimizer."""
    return Explorable(
        draw_pure_noise,
        [Slider("lr", list(EXPLORE_LRS), label="learning rate", default=0.1, fmt="{:.3g}"),
         Slider("depth", list(DEPTHS), label="depth", default="k = 2", fmt="{}"),
         Slider("weight_decay", list(DECAYS), label="weight decay", default="none", fmt="{}"),
         Slider("optimizer", list(OPTIMIZERS), label="optimizer", default="SGD", fmt="{}")],
        main="lr",
        figsize=(8.0, 2.8),
        static_colors=6,   # 108 frames of few colours: the website's copy stays under 2 MB
        caption=EXPLORE_CAPTION,
        promises=[
            Promise("with SGD, two or more layers and no weight decay the fitted rate is positive and grows with the "
                    "learning rate", _numeric(_sgd_rate), _Check("positive and nondecreasing", _positive_increasing)),
            Promise("with weight decay 0.3 SGD's two layers collapse below η* ≈ 0.037 and explode above it",
                    _numeric(_sgd_decay_sign), _Check("rate < 0 exactly below η*", _eta_star_split)),
            Promise("Adam and Iso without weight decay never grow faster than a random walk (log–log slope below 1)",
                    _numeric(_adaptive_slope),
                    _Check("log-log slope < 1", lambda v: all(x < 1 for x in v if x is not None))),
        ],
        trains=False,   # the runs come from results/ (trained once per setting where the file is missing)
    )


EXPLORABLES = (pure_noise_explorable,)
