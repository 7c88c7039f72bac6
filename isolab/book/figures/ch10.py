r"""Figures of Chapter 10 (learning-rate sweeps on deep linear networks).

- :func:`sweep_figure`: the paper's Figure 3 or 4 reproduced from the saved sweeps, the
  paper's four optimizers on the left, Muon, SignSGD and Shampoo on the right.
- :func:`live_sweep_figure`: the reduced sweep the chapter trains live.
- :func:`best_rate_curves`: loss against step at each optimizer's best learning rate.
- :func:`sweeps`: the explorable over depth, batch size and input covariance, drawn from
  the precomputed sweeps of ``scripts/explorable_sweeps.py``.

The engine names optimizers in lower case (``"isoadam"``); :func:`look` turns a name into
the book-wide look of :mod:`isolab.book.figures.style`. Shampoo with a forgetting factor
(``"shampoo_ema"``) keeps Shampoo's colour and marker, drawn solid with open markers.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import NullLocator

from isolab.book.explorable import Explorable, FigureMessage, Slider
from isolab.book.figures import style
from isolab.book.plotting import log_ticks
from isolab.book.results import plot_sweep

__all__ = ["LABELS", "look", "sweep_figure", "live_sweep_figure", "best_rate_curves", "sweeps", "EXPLORABLES"]

#: How the chapter's optimizers are named in figures.
LABELS = {"sgd": "SGD", "adam": "Adam", "iso": "Iso", "isoadam": "IsoAdam", "muon": "Muon",
          "signsgd": "SignSGD", "shampoo": "Shampoo", "shampoo_ema": "Shampoo, β = 0.95"}

#: The two panels of Figures 3 and 4.
PANELS = (["sgd", "adam", "iso", "isoadam"], ["iso", "muon", "signsgd", "shampoo", "shampoo_ema"])

_RESULTS = Path(__file__).resolve().parents[3] / "results" / "sweeps_explorable.npz"


def _plain_log_ticks(axis, lo: float, hi: float) -> None:
    """Ticks at 1, 2, 3, 5 times powers of ten between ``lo`` and ``hi``, in plain numbers
    (a log axis that spans less than two decades reads better that way)."""
    ticks = [m * 10.0**e for e in range(-3, 5) for m in (1, 2, 3, 5) if lo <= m * 10.0**e <= hi]
    axis.set_ticks(ticks, [f"{t:g}" for t in ticks])
    axis.set_minor_locator(NullLocator())


def look(name: str, **overrides) -> dict:
    """``ax.plot`` keywords for an engine name (``"adam"``, ``"shampoo_ema"``, ...)."""
    if name == "shampoo_ema":
        return style.line("Shampoo", label=LABELS[name], linestyle="-", markerfacecolor="none", **overrides)
    return style.line(LABELS.get(name, name), **overrides)


def sweep_figure(full, fig_name: str, metric: str, ylabel: str, title: str, ylim=None) -> Figure:
    """The median over seeds of ``metric`` against the learning rate, for every optimizer
    of the saved sweeps ``full`` (an :class:`isolab.book.results.Results`) of ``fig_name``."""
    fig = Figure(figsize=(style.FIG_WIDTH, 4.9))
    axes = fig.subplots(1, 2, sharey=True)
    for ax, names in zip(axes, PANELS):
        for name in names:
            plot_sweep(ax, full[f"{fig_name}/{name}"], metric, **look(name, markersize=3.5))
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3, columnspacing=1.0, handlelength=2.5)
        if ylim:
            ax.set_ylim(*ylim)
            _plain_log_ticks(ax.yaxis, *ylim)
    axes[0].set_title("the paper's four optimizers")
    axes[1].set_title("Muon, SignSGD, Shampoo (and Iso)")
    axes[0].set_ylabel(ylabel)
    axes[1].set_ylabel("")
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def live_sweep_figure(live: dict) -> Figure:
    """The reduced sweeps trained in the chapter (Adam, Iso, IsoAdam)."""
    fig = Figure(figsize=(0.8 * style.FIG_WIDTH, 3.6))
    ax = fig.subplots()
    for name in ("adam", "iso", "isoadam"):
        plot_sweep(ax, live[name], "iterations", **look(name, markersize=4))
    ax.set_ylabel("iterations to 1% of the initial loss")
    ax.set_title("A live reduced sweep: seed 0, every third rate, at most 300 steps")
    ax.legend()
    fig.tight_layout()
    return fig


def best_rate_curves(full, names, metric: dict) -> Figure:
    """Median loss over seeds against step, each optimizer at its best learning rate, on
    5 layers (``fig3``) and 40 layers (``fig4``)."""
    fig = Figure(figsize=(style.FIG_WIDTH, 4.0))
    axes = fig.subplots(1, 2)
    for ax, fig_name in zip(axes, ("fig3", "fig4")):
        for name in names:
            s = full[f"{fig_name}/{name}"]
            i = s.index(s.best(metric[fig_name])[0])
            curve = np.median(s.loss[:, i], axis=0)
            ax.plot(np.maximum(s.info["loss_steps"], 1), curve, **look(name, markers=False))
        ax.set(xscale="log", yscale="log", xlabel="step (log scale; step 0 drawn at 1)", ylabel="loss (median of 3 seeds)")
    _plain_log_ticks(axes[1].yaxis, *axes[1].get_ylim())
    axes[0].set_title("5 layers, each at its best rate")
    axes[1].set_title("40 layers, each at its best rate")
    axes[1].legend(ncol=2, loc="lower left")
    fig.tight_layout()
    return fig


def _load(path: Path = _RESULTS):
    with np.load(path) as saved:
        relative, grid = saved["relative"], json.loads(str(saved["meta"]))
    lrs = {name: np.logspace(*grid["lr_grids"][name]) for name in grid["optimizers"]}

    def curve(name, depth, batch, sigma):
        index = (grid["depths"].index(depth), grid["batches"].index(batch), list(grid["sigmas"]).index(sigma),
                 grid["optimizers"].index(name))
        return relative[index][: lrs[name].size]

    return curve, lrs, grid


def sweeps(curve=None, lrs=None, grid=None) -> Explorable:
    """Reduced sweeps of SGD, Adam, Iso and IsoAdam for every depth, batch size and input
    covariance of the saved grid. ``curve(name, depth, batch, sigma)`` gives the loss
    after training over the initial loss at the rates ``lrs[name]``; by default all three
    come from ``results/sweeps_explorable.npz``."""
    if curve is None:
        curve, lrs, grid = _load()

    def draw_sweeps(fig, depth, batch, sigma):
        curves = {name: curve(name, depth, batch, sigma) for name in lrs}
        if not any(np.isfinite(c).any() for c in curves.values()):
            raise FigureMessage("every learning rate diverged for every optimizer at this setting")
        ax = fig.add_subplot()
        for name, rel in curves.items():
            rates, ok = lrs[name], np.isfinite(rel)
            kw = look(name)
            ax.plot(rates[ok], rel[ok], **kw)
            ax.plot(rates[~ok], np.full((~ok).sum(), 2.0), "x", color=kw["color"], markersize=7, markeredgewidth=2)
        ax.set(xscale="log", yscale="log", ylim=(1e-4, 3), xlim=(2e-4, 3),
               xlabel="learning rate", ylabel="loss after 100 steps / initial",
               title=f"depth {depth}, batch {batch}, Σ: {sigma}   (x at the top: diverged)")
        log_ticks(ax.xaxis, [-3, -2, -1, 0])
        log_ticks(ax.yaxis, [-4, -2, 0])
        ax.legend(loc="lower left", ncol=2)

    return Explorable(
        draw_sweeps,
        [Slider("depth", grid["depths"], label="depth k", default=4),
         Slider("batch", grid["batches"], label="batch b", default=64),
         Slider("sigma", list(grid["sigmas"]), label="Σ", default="κ 100", fmt="{}")],
        main="sigma",
        figsize=(style.FIG_WIDTH, 3.6),
        static_colors=48,
        caption="Reduced learning-rate sweeps (n = 16, 100 steps, one seed) of SGD, Adam, Iso and IsoAdam, "
                "precomputed for every setting (scripts/explorable_sweeps.py).",
    )


EXPLORABLES = (sweeps,)
