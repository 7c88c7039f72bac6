r"""The hero and the centerpiece explorable of Chapter 5, *The pure noise problem*.

The chapter's thesis in one figure, :func:`draw_growth`: on the pure noise problem (``n =
16``, one sample per step, four seeds, 400 steps) the total weight norm of SGD, Adam and Iso
against the step at one learning rate (left), and the growth after 400 steps at every
learning rate (right), on one fixed axis. With two or more layers SGD's norm grows
exponentially, and faster the larger the learning rate; Adam's and Iso's steps do not grow
with the other layers, and their norms stay within two decades.

* :func:`hero`: the frame at ``η = 0.1``, two layers, no weight decay.
* :func:`growth_explorable` (section 5.9), the centerpiece: the learning rate (main
  slider, nine values from 0.01 to 1), the depth (``k = 1, 2, 4``) and the weight decay
  (none, ``λ = 0.3``); :data:`EXPLORABLES` lists it for the caption tests. Its promises
  are measured on :func:`log_growth`, what the figure draws.

The runs, their fits and the section figures are re-exported from
:mod:`isolab.book.figures.ch05_runs` and :mod:`isolab.book.figures.ch05_sections`.
"""

from __future__ import annotations

import functools
import math
import warnings

import numpy as np
from matplotlib.figure import Figure

from isolab.book.explorable import Explorable, Promise, Slider, always
from isolab.book.figures import style
from isolab.book.figures.ch05_runs import *  # noqa: F401,F403  (the chapter's runs and fits)
from isolab.book.figures.ch05_runs import BATCH, EXPLORE_LRS, EXPLORE_STEPS, N, explore_run, run_summary
from isolab.book.figures.ch05_sections import *  # noqa: F401,F403  (the section figures)
from isolab.book.figures.ch05_runs import __all__ as _runs_all
from isolab.book.figures.ch05_sections import __all__ as _sections_all

__all__ = [*_runs_all, *_sections_all, "DEPTHS", "DECAYS", "SHOWN", "Y_LIM", "log_growth", "end_growth",
           "sgd_verdict", "draw_growth", "hero", "growth_explorable", "EXPLORABLES", "ETA_STAR"]

BOUND, MUTED, HIGHLIGHT = (style.ROLES[k] for k in ("bound", "muted", "highlight"))
SMALL = style.FONT_SIZE - 1

#: The toggles' names and the numbers they stand for.
DEPTHS = {"k = 1": 1, "k = 2": 2, "k = 4": 4}
DECAYS = {"none": 0.0, "λ = 0.3": 0.3}
#: The optimizers drawn, in the book's colours.
SHOWN = ("SGD", "Adam", "Iso")
#: The fixed y axis: log10 of ||W_t|| / ||W_0||, 10^-4 to 10^12 (beyond it a run leaves the chart).
Y_LIM = (-4.0, 12.0)
#: Where SGD's two layers with weight decay λ = 0.3 neither grow nor shrink in mean square.
ETA_STAR = 2 * 0.3 * BATCH / (0.3**2 * BATCH + N)
_T = np.arange(EXPLORE_STEPS + 1)


@functools.lru_cache(maxsize=None)
def log_growth(depth: int, optimizer: str, weight_decay: float) -> np.ndarray:
    r"""``log10(‖W_t‖ / ‖W_0‖)`` of every seed, ``[seed, lr, step]``: ``+inf`` from the step
    where a run overflowed float64 on (the figure draws it leaving through the top)."""
    norms = explore_run(depth, optimizer, weight_decay)
    with np.errstate(divide="ignore", invalid="ignore"):
        logs = np.log10(norms / norms[..., :1])
    return np.where(np.isnan(logs), np.inf, logs)


@functools.lru_cache(maxsize=None)
def _median(depth: int, optimizer: str, weight_decay: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    logs = log_growth(depth, optimizer, weight_decay)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)     # inf - inf inside the median of overflowed seeds
        return np.median(logs, axis=0), logs.min(axis=0), logs.max(axis=0)


def end_growth(depth: int, optimizer: str, weight_decay: float) -> np.ndarray:
    """The median over the seeds of ``log10(‖W_400‖/‖W_0‖)`` at every learning rate (``inf``
    where most seeds overflowed): the right panel."""
    return _median(depth, optimizer, weight_decay)[0][:, -1]


def sgd_verdict(depth: int, weight_decay: float, lr: float) -> str:
    """What SGD's run does, in the words of the left panel's title."""
    s = run_summary(depth, "SGD", weight_decay, lr)
    if s["overflow"]:
        return f"SGD overflows float64 at step {s['last'] + 1}"
    if s["exponential"]:
        return f"SGD {'grows' if s['rate'] > 0 else 'shrinks'} exponentially, {s['rate']:+.3f} per step"
    if s["shrinking"]:
        return f"SGD shrinks exponentially, {s['late_rate']:+.3f} per step"
    return f"SGD: no exponential trend in {EXPLORE_STEPS} steps"


def _clip(y: np.ndarray) -> np.ndarray:
    """Values beyond the axis drawn just beyond it, so that a curve leaves through the edge."""
    return np.clip(y, Y_LIM[0] - 1, Y_LIM[1] + 1)


def _exit_label(ax, x, y, name: str, color, placed: list, right: float) -> None:
    """Label a median curve where it ends on the chart: at its right end (collected in
    ``placed`` to be spread apart), or just inside the edge where it leaves the chart."""
    inside = np.flatnonzero((y >= Y_LIM[0]) & (y <= Y_LIM[1]))
    last = int(inside[-1]) if inside.size else 0
    if last == len(y) - 1:
        placed.append((name, float(y[-1]), color))
        return
    nxt = min(last + 1, len(y) - 1)
    up = y[nxt] > Y_LIM[1]
    level = Y_LIM[1] - 1.0 if up else Y_LIM[0] + 0.5
    # start the label right of where the drawn segment leaving the chart passes the label's
    # outer edge (its rightmost point inside the label's band), not a fixed step right of
    # the last point inside: the reader test saw "SGD ↑" and "Adam ↓" drawn over the
    # segment and its markers where it leaves steeply between two learning rates
    at = x[last]
    y0, y1 = float(_clip(y)[last]), float(_clip(y)[nxt])
    if nxt != last and np.isfinite(y1) and y1 != y0:
        at = x[last] + (x[nxt] - x[last]) * min(max((level - y0) / (y1 - y0), 0.0), 1.0)
    at += 0.03 * (right - x[0])
    ax.text(at, level, f"{name} {'↑' if up else '↓'}", ha="left",
            va="top" if up else "bottom", color=style.text_color(color), fontsize=SMALL)


def _labels(ax, placed: list, x: float) -> None:
    for (name, _, color), y in zip(placed, style.spread_labels([p[1] for p in placed], 1.7, upper=Y_LIM[1] - 0.5)):
        ax.text(x, y, name, color=style.text_color(color), fontsize=SMALL, va="center")


def _ticks(ax) -> None:
    from isolab.book.plotting import power_of_ten

    exponents = [-4, 0, 4, 8, 12]
    ax.set_yticks(exponents, [power_of_ten(e) for e in exponents])
    ax.set_ylim(*Y_LIM)


def draw_growth(fig: Figure, lr: float, depth: str, weight_decay: str) -> None:
    """The centerpiece's frame (toggles by name, :data:`DEPTHS`, :data:`DECAYS`)."""
    k, wd = DEPTHS[depth], DECAYS[weight_decay]
    i = EXPLORE_LRS.index(lr)
    grid = fig.add_gridspec(1, 2, width_ratios=[1.35, 1], left=0.1, right=0.92, top=0.8, bottom=0.15, wspace=0.55)
    ax, ax_lr = fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[0, 1])
    # left: the norm against the step at this learning rate
    placed: list = []
    for name in SHOWN:
        median, low, high = (v[i] for v in _median(k, name, wd))
        color = style.color(name)
        ax.fill_between(_T, _clip(low), _clip(high), color=color, alpha=0.2, lw=0, zorder=2)
        ax.plot(_T, _clip(median), **style.line(name, markers=False, lw=2.2, zorder=3))
        _exit_label(ax, _T, median, name, color, placed, EXPLORE_STEPS)
    _labels(ax, placed, EXPLORE_STEPS * 1.02)
    ax.axhline(0, color=MUTED, lw=0.8, zorder=0)
    ax.set(xlim=(0, EXPLORE_STEPS), xticks=[0, 200, 400], xlabel="step t", ylabel="‖Wₜ‖ / ‖W₀‖")
    _ticks(ax)
    decay = f", λ = {wd:g}" if wd else ""
    ax.set_title(f"η = {lr:.3g}, k = {k}{decay}\n{sgd_verdict(k, wd, lr)}", loc="left", fontsize=style.FONT_SIZE)
    # right: the growth after 400 steps at every learning rate
    lrs = np.log10(EXPLORE_LRS)
    placed = []
    for name in SHOWN:
        y = end_growth(k, name, wd)
        ax_lr.plot(lrs, _clip(y), **style.line(name, lw=1.8, markersize=5, zorder=3))
        over = y > Y_LIM[1]
        if over.any():   # a run that left the chart (or overflowed float64): a marker on the top edge
            ax_lr.plot(lrs[over], np.full(over.sum(), Y_LIM[1]), "^", color=style.color(name), markersize=6,
                       clip_on=False, zorder=4)
        _exit_label(ax_lr, lrs, y, name, style.color(name), placed, lrs[-1])
    ax_lr.axvline(lrs[i], color=HIGHLIGHT, lw=2, zorder=0)
    ax_lr.axhline(0, color=MUTED, lw=0.8, zorder=0)
    _labels(ax_lr, placed, lrs[-1] + 0.08)
    ax_lr.set(xlim=(lrs[0] - 0.1, lrs[-1] + 0.1), xticks=[-2, -1, 0], xticklabels=["0.01", "0.1", "1"],
              xlabel="learning rate η", ylabel="‖W₄₀₀‖ / ‖W₀‖")
    _ticks(ax_lr)
    ax_lr.set_title(f"after {EXPLORE_STEPS} steps, at\nevery η (orange: this η)", loc="left", fontsize=style.FONT_SIZE)
    for a in (ax, ax_lr):
        a.minorticks_off()


HERO_LR = 0.1
FIGSIZE = (style.COLUMN_WIDTH, 3.4)


def hero() -> Figure:
    """The centerpiece's frame at η = 0.1, two layers, no weight decay."""
    fig = Figure(figsize=FIGSIZE)
    draw_growth(fig, HERO_LR, "k = 2", "none")
    return fig


# ----------------------------------------------------------------------------- promises
def _on(depths, decays, measure):
    """A promise's measure where the caption's sentence applies (None elsewhere)."""
    def at(lr, depth, weight_decay):
        k, wd = DEPTHS[depth], DECAYS[weight_decay]
        return measure(lr, k, wd) if k in depths and wd in decays else None
    return at


def _kept(test, description):
    return always(lambda v: v is None or test(v), description)


def _sgd_end(lr, k, wd):
    return float(end_growth(k, "SGD", wd)[EXPLORE_LRS.index(lr)])


def _exponential_from(lr, k, wd):
    return (lr, run_summary(k, "SGD", wd, lr)["exponential"] and run_summary(k, "SGD", wd, lr)["rate"] > 0)


def _invariant_growth(lr, k, wd):
    return max(float(log_growth(k, name, wd)[:, EXPLORE_LRS.index(lr)].max()) for name in ("Adam", "Iso"))


def _decay_sign(lr, k, wd):
    return (lr, run_summary(k, "SGD", wd, lr)["rate"])


def _iso_settles(lr, k, wd):
    return float(np.abs(log_growth(k, "Iso", wd)[:, EXPLORE_LRS.index(lr), -1]).max())


def _adamw_collapse(lr, k, wd):
    return (lr, float(end_growth(k, "Adam", wd)[EXPLORE_LRS.index(lr)]))


def _nondecreasing_present(values):
    v = [x for x in values if x is not None]
    return all(b >= a for a, b in zip(v, v[1:]))


CAPTION = (
    "The pure noise problem: 16-wide linear layers, one sample per step, four seeds (median drawn, band from the "
    "lowest to the highest seed). ‖Wₜ‖ is the Frobenius norm of all k weight matrices together after t steps; "
    "SGD is plain stochastic gradient descent, Adam the elementwise-normalized step of Kingma and Ba, Iso the "
    "step whitened on both sides (section 5.7, derived in Chapter 6). "
    "Move the learning rate η (the main slider): with k ≥ 2 layers SGD's growth rises with the learning rate, "
    "and it is exponential from η ≈ 0.03 on (at η = 0.01, four hundred steps are too few to show the rate "
    "section 5.4 measures over 2000); Adam and Iso grow by less than a factor of 200 at every learning rate and "
    "depth. Switch on the weight decay λ = 0.3: SGD's two layers collapse below η* ≈ 0.037 and explode above it; "
    "Iso ends within a factor of 4 of where it started at every learning rate, while with four layers Adam "
    "collapses by more than a factor of 100 from η = 0.1 on."
)


def growth_explorable() -> Explorable:
    """Section 5.9, the centerpiece: the learning rate (main, nine values), the depth and
    the weight decay (toggles); 54 frames."""
    for k in DEPTHS.values():
        for wd in DECAYS.values():
            for name in SHOWN:
                _median(k, name, wd)
    return Explorable(
        draw_growth,
        [Slider("lr", list(EXPLORE_LRS), label="learning rate η", default=HERO_LR, fmt="{:.3g}"),
         Slider("depth", list(DEPTHS), label="layers", default="k = 2", fmt="{}"),
         Slider("weight_decay", list(DECAYS), label="weight decay", default="none", fmt="{}")],
        main="lr",
        figsize=FIGSIZE,
        static_colors=12,
        narrow="panels",
        caption=CAPTION,
        alt=("The total weight norm on the pure noise problem: SGD's grows exponentially with two or more layers, "
             "Adam's and Iso's stay within two decades."),
        promises=[
            Promise("with k ≥ 2 layers SGD's growth rises with the learning rate", _on((2, 4), (0.0,), _sgd_end),
                    _Predicate("non-decreasing in η (an overflow counts as infinite)", _nondecreasing_present)),
            Promise("it is exponential from η ≈ 0.03 on", _on((2, 4), (0.0,), _exponential_from),
                    _kept(lambda v: v[1] or v[0] < 0.03, "exponential growth wherever η >= 0.03")),
            Promise("Adam and Iso grow by less than a factor of 200 at every learning rate and depth",
                    _on((1, 2, 4), (0.0,), _invariant_growth),
                    _kept(lambda v: v < math.log10(200), "every seed: log10(||W_400|| / ||W_0||) < log10 200")),
            Promise("SGD's two layers collapse below η* ≈ 0.037 and explode above it", _on((2,), (0.3,), _decay_sign),
                    _kept(lambda v: (v[1] < 0) == (v[0] < ETA_STAR), "rate < 0 exactly below η*")),
            Promise("Iso ends within a factor of 4 of where it started at every learning rate",
                    _on((1, 2, 4), (0.3,), _iso_settles),
                    _kept(lambda v: v < math.log10(4), "every seed: |log10(||W_400|| / ||W_0||)| < log10 4")),
            Promise("with four layers Adam collapses by more than a factor of 100 from η = 0.1 on",
                    _on((4,), (0.3,), _adamw_collapse),
                    _kept(lambda v: v[0] < 0.1 or v[1] < -2, "median log10(||W_400|| / ||W_0||) < -2 for η >= 0.1")),
        ],
    )


class _Predicate:
    """A promise predicate with a readable description."""

    def __init__(self, description, test):
        self.description, self.test = description, test

    def __call__(self, values):
        return bool(self.test(values))

    def __repr__(self):
        return self.description


EXPLORABLES = (growth_explorable,)
