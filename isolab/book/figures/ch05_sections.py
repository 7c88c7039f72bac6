r"""The section figures of Chapter 5, *The pure noise problem* (the hero and the centerpiece
explorable are in :mod:`isolab.book.figures.ch05`).

* :func:`phase_plane` (section 5.2): the scalar problem ``n = 1, k = 2``; each step moves
  ``(u, v)`` along ``±(v, u)``, a step as long as the point is far from the origin.
* :func:`rate_figure` (section 5.4), :func:`weight_decay_figure` (section 5.6) and
  :func:`comparison` (section 5.7) draw what the chapter computes.
* :func:`scalar_runs`, :func:`lyapunov`, :func:`lyapunov_threshold` and
  :func:`scalar_noise` (the appendix): for scalar weights the mean square grows while the
  typical run shrinks, and the typical rate changes sign near ``η ≈ 1.53``.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch
from matplotlib.figure import Figure

from isolab.book import noise_dynamics as nd
from isolab.book.figures import style
from isolab.book.figures.ch05_runs import BATCH, COMPARE_SETUPS, COMPARE_STEPS, N
from isolab.book.seeding import generator

__all__ = [
    "scalar_trajectory", "phase_plane", "scalar_runs", "lyapunov", "lyapunov_threshold", "scalar_noise",
    "rate_figure", "weight_decay_figure", "comparison",
]

BOUND, MUTED, HIGHLIGHT, DATA = (style.ROLES[k] for k in ("bound", "muted", "highlight", "data"))
_CYCLE = style.rc()["axes.prop_cycle"].by_key()["color"]   # the book's colour-blind-safe cycle
SMALL = style.FONT_SIZE - 1


def _sup(e: int) -> str:
    return "10" + str(e).translate(str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")) if e not in (0, 1) else ("1" if e == 0 else "10")


def _log_ticks(axis, exponents) -> None:
    from matplotlib.ticker import NullLocator

    exponents = list(exponents)
    axis.set_ticks([10.0 ** e for e in exponents], [_sup(e) for e in exponents])
    axis.set_minor_locator(NullLocator())


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
        else:                    # it leaves through the top: label it there, right of the curve
            ax_t.annotate(f"η = {lrs[i]:.2g}", (last, top), xytext=(6, -4), textcoords="offset points", ha="left",
                          va="top", fontsize=SMALL, color=style.text_color(color))
    ax_t.text(1950, 2.0, "dotted: one layer, √t", ha="right", fontsize=SMALL, color=BOUND)
    ax_t.set(yscale="log", ylim=(1, top), xlabel="step t", ylabel="‖W‖ (seed 0)", title="two layers: straight lines")
    _log_ticks(ax_t.yaxis, [0, 1, 2, 3, 4])
    ax_t.set_xticks([0, 1000, 2000])
    fine = np.logspace(-2, 1, 100)
    ax_r.plot(fine, nd.predicted_rate(N, BATCH, fine), color=BOUND, lw=1.5)
    ax_r.plot(fine, 0.5 * fine ** 2 * (N - 2) / BATCH, color=BOUND, ls="--", lw=1.5)
    ax_r.text(0.011, 80, "k = 2 predictions:\nmean square (solid),\nrank-one runs (dashed)", fontsize=SMALL,
              color=BOUND, va="top")
    for (k, marker), color in zip([(2, "o"), (3, "s"), (4, "^")], style.sequence(3)):
        ax_r.plot(lrs, rate[k], marker, color=color)
    ends = [float(rate[k][-1]) for k in (2, 3, 4)]
    for (k, color), y in zip(zip((2, 3, 4), style.sequence(3)), 10 ** style.spread_labels(np.log10(ends), 0.4)):
        ax_r.annotate(f"k = {k}", (lrs[-1], y), xytext=(7, 0), textcoords="offset points", color=style.text_color(color),
                      fontsize=SMALL, va="center")
    ax_r.plot(lrs, np.clip(np.asarray(late_rate_k1), 1e-7, None), "x", color=BOUND)
    ax_r.text(lrs[-1], 1.2e-4, "k = 1 ", ha="right", fontsize=SMALL, color=BOUND)
    ax_r.set(xscale="log", yscale="log", ylim=(1e-5, 1e2), xlim=(7e-3, 30), xlabel="learning rate η",
             ylabel="rate of log‖W‖ per step", title="fitted rates, mean of 4 seeds")
    _log_ticks(ax_r.xaxis, [-2, -1, 0, 1])
    _log_ticks(ax_r.yaxis, [-4, -2, 0, 2])
    fig.tight_layout()
    return fig


def weight_decay_figure(norms, lrs, wd: float, rates, shifted_rates=None) -> Figure:
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
    if shifted_rates is not None:
        ax_r.plot(lrs, shifted_rates, "s", mfc="none", color=HIGHLIGHT, ms=10, mew=1.5)
        ax_r.text(0.012, 0.25, "□ log(1 − ηλ) + measured rate\n   without decay at η/(1 − ηλ)",
                  color=style.text_color(HIGHLIGHT), fontsize=SMALL)
    for i, color in enumerate(colors):
        ax_r.plot(np.full(rates.shape[0], lrs[i]), rates[:, i], "o", color=color, ms=5)
    ax_r.axhline(0, color=MUTED, lw=1)
    ax_r.set(xscale="log", ylim=(-0.1, 0.9), xlabel="learning rate η", ylabel="rate per step (each seed)",
             title="collapse below η*, explosion above")
    _log_ticks(ax_r.xaxis, [-2, -1, 0])
    fig.tight_layout()
    return fig


def comparison(compare: dict) -> Figure:
    """Section 5.7: two layers at the larger learning rates on log-log axes, with a √t guide;
    each curve labelled at its end (SGD where it leaves the plot)."""
    fig = Figure(figsize=(style.FIG_WIDTH, 4.0))
    ax = fig.subplots()
    t = np.arange(1, COMPARE_STEPS + 1)
    top = 1e4
    ends = {}
    for name, (grid, _) in COMPARE_SETUPS.items():
        y = compare[(name, 2)][1, 1:]
        ax.plot(t, y, **style.line(name, label=style.look(name).name, markevery=0.1))
        label = f"{style.look(name).name}, lr {grid[1]:g}"
        if np.isfinite(y[-1]) and y[-1] < top:
            ends[label] = (name, float(y[-1]))
        else:   # SGD leaves the plot: label it where it crosses the top
            cross = int(np.flatnonzero(~(y < top))[0])
            ax.annotate(label, (t[cross], top), xytext=(8, -6), textcoords="offset points", va="top",
                        color=style.text_color(style.color(name)), fontsize=SMALL)
    logs = style.spread_labels([math.log10(v) for _, v in ends.values()], 0.17)
    for (label, (name, _)), y in zip(ends.items(), logs):
        ax.annotate(label, (t[-1], 10 ** y), xytext=(6, 0), textcoords="offset points", va="center",
                    color=style.text_color(style.color(name)), fontsize=SMALL)
    ax.plot(t, 5.0 * np.sqrt(t), color=BOUND, ls=":", lw=1.5)
    ax.text(2, 5.0 * math.sqrt(2) * 1.6, "∝ √t", color=BOUND, fontsize=SMALL)
    ax.set(xscale="log", yscale="log", ylim=(3, top), xlim=(1, 6 * COMPARE_STEPS), xlabel="step t",
           ylabel="‖W‖ (both layers)", title="two layers: SGD leaves the plot, the others grow slowly")
    _log_ticks(ax.xaxis, [0, 1, 2, 3])
    _log_ticks(ax.yaxis, [1, 2, 3, 4])
    fig.tight_layout()
    return fig
