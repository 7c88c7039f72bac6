r"""Figures of Chapter 10 (deep linear networks under the tuning protocol of Part III).

- :func:`interval_panel` / :func:`protocol_figure`: each optimizer's held-out median with
  its 90 % bootstrap interval and the held-out seeds themselves, sorted by the median
  (Figures 3 and 4 of the paper under the protocol; the hero figure is one of these).
- :func:`budget_figure`: Figure 4's medians and intervals at each training budget.
- :func:`ablation_figure`: the reading ablation of Iso and IsoAdam, one row per variant.
- :func:`sweep_curves`: a learning-rate sweep at fixed settings (the engine's raw output).
- :func:`sweeps`: the explorable over depth, batch size and the input covariance, drawn
  from the precomputed sweeps of ``scripts/explorable_sweeps.py`` (median over seeds and
  the band from the best to the worst seed).

The engine names optimizers in lower case (``"isoadam"``, ``"shampoo_graft"``);
:func:`look` turns a name into the book-wide look of :mod:`isolab.book.figures.style`.
Variants of one optimizer (Shampoo grafted, SGD with momentum) keep its colour and
marker, drawn with open markers.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure

from isolab.book.explorable import Explorable, FigureMessage, Promise, Slider, constant, nonincreasing
from isolab.book.figures import style
from isolab.book.plotting import log_ticks

__all__ = ["LABELS", "label", "short", "look", "setting_text", "table", "retrain", "same_sweep", "protocol_summaries", "budgets_of", "separated", "interval_panel",
           "plain_log_ticks", "variant_label", "protocol_figure", "budget_figure", "ablation_figure",
           "sweep_curves", "SweepGrid", "kappa_ratios", "sweeps", "EXPLORABLES"]

#: How the chapter's optimizers are named in figures (engine name -> label).
LABELS = {"sgd": "SGD (momentum tuned)", "sgd_plain": "SGD, no momentum", "adam": "Adam", "iso": "Iso",
          "isoadam": "IsoAdam", "muon": "Muon", "signsgd": "SignSGD (momentum tuned)",
          "signsgd_plain": "SignSGD, no momentum", "shampoo": "Shampoo (2018)", "shampoo_graft": "Shampoo, grafted",
          "shampoo_ema": "Shampoo, β = 0.95", "soap": "SOAP", "kfac": "K-FAC"}
#: Engine name -> the optimizer whose look it borrows.
_BASE = {"sgd_plain": "SGD", "signsgd_plain": "SignSGD", "shampoo_graft": "Shampoo", "shampoo_ema": "Shampoo",
         "shampoo": "Shampoo", "kfac": "K-FAC"}
#: Drawn with open markers: the weaker form of an optimizer shown beside its tuned form.
_VARIANTS = {"sgd_plain", "signsgd_plain", "shampoo", "shampoo_ema"}

_RESULTS = Path(__file__).resolve().parents[3] / "results" / "sweeps_explorable.npz"


def label(name: str) -> str:
    """The figure label of an engine name (the name itself if it has none)."""
    return LABELS.get(name, name)


def short(name: str) -> str:
    """The optimizer's plain name (``"sgd"`` -> ``"SGD"``), for figures with one form of each."""
    return style.look(_BASE.get(name, name)).name


def look(name: str, **overrides) -> dict:
    """``ax.plot`` keywords for an engine name (``"adam"``, ``"shampoo_graft"``, ...)."""
    base = _BASE.get(name, name)
    if name in _VARIANTS:
        overrides = {"markerfacecolor": "none", "linestyle": "-", **overrides}
    text = overrides.pop("label", label(name))
    markers = overrides.pop("markers", True)
    return style.line(base, label=text, markers=markers, **overrides)


def _color(name: str) -> str:
    return look(name)["color"]


# ------------------------------------------------------------------ saved protocol results
def protocol_summaries(results, prefix: str) -> dict:
    """The entries of saved protocol results (:func:`isolab.book.results.load` of a
    ``results/protocol_*.npz`` file) whose label starts with ``prefix`` (``"fig3/"``,
    ``"fig4/b1000/"``, ``"ablation/iso/"``), keyed by the rest of the label: the held-out
    median, its 90 % interval, the per-seed scores, and the chosen setting."""
    out = {}
    for s in results:
        if not s.label.startswith(prefix):
            continue
        h, t = s.info["heldout"], s.info["tuned"]
        out[s.label[len(prefix):]] = {
            "median": float(h["median"]), "low": float(h["low"]), "high": float(h["high"]),
            "values": np.asarray(h["scores"], dtype=float), "seeds": list(h["seeds"]), "lr": float(t["lr"]),
            "hyper": dict(t["hyper"]), "interior": bool(t["interior"]), "shifts": int(t["shifts"]),
            "budget": int(t["budget"]), "optimizer": s.optimizer, "sweep": s,
        }
    if not out:
        raise KeyError(f"no saved entry starts with {prefix!r}; labels: {[s.label for s in results][:6]} ...")
    return out


def budgets_of(results, complete: bool = True) -> list[int]:
    """The training budgets of saved Figure 4 results (labels ``fig4/b<steps>/...``);
    with ``complete``, only those with an entry for every optimizer of the run's
    configuration (a run still in progress writes its file after every entry)."""
    entries = [s for s in results if s.label.startswith("fig4/b")]
    budgets = sorted({int(s.label.split("/")[1][1:]) for s in entries})
    if not complete or not entries:
        return budgets
    wanted = set(entries[0].info["run"]["config"]["fig4"]["optimizers"])
    return [b for b in budgets if wanted <= {s.label.split("/", 2)[2] for s in entries if s.label.startswith(f"fig4/b{b}/")}]


def separated(summary: Mapping[str, Mapping], a: str, b: str) -> bool:
    """Whether ``a``'s 90 % interval lies entirely below ``b``'s (lower is better)."""
    return summary[a]["high"] < summary[b]["low"]


# ------------------------------------------------------------------ intervals
def interval_panel(ax, summary: Mapping[str, Mapping], xlabel: str, *, log: bool = True, cap: float | None = None,
                   show_values: bool = True, order: Sequence[str] | None = None, names: bool = True) -> list[str]:
    """One row per optimizer of ``summary`` (name -> ``{"median", "low", "high", "values"}``),
    sorted by the median, best at the top: the held-out seeds as small dots, the 90 %
    interval as a bar, the median as the optimizer's marker. Values above ``cap`` (or
    infinite) are drawn at the right edge with an arrow. Returns the names top to bottom."""
    order = list(order) if order is not None else sorted(summary, key=lambda n: (summary[n]["median"], n))
    finite = [v for n in order for v in np.ravel(summary[n]["values"]) if np.isfinite(v)]
    top = cap if cap is not None else (max(finite) * (1.6 if log else 1.1) if finite else 1.0)
    for row, name in enumerate(order):
        y = len(order) - 1 - row
        s, kw = summary[name], look(name, markers=True)
        vals = np.minimum(np.asarray(s["values"], dtype=float), top)
        ax.plot(vals, np.full(vals.size, y + 0.22), "o", color=kw["color"], markersize=3.5, alpha=0.7,
                linestyle="none")
        lo, hi = min(s["low"], top), min(s["high"], top)
        ax.plot([lo, hi], [y, y], color=kw["color"], linewidth=3, solid_capstyle="butt")
        med = min(s["median"], top)
        ax.plot([med], [y], marker=kw["marker"], color=kw["color"], markersize=9,
                markerfacecolor=kw.get("markerfacecolor", kw["color"]), linestyle="none")
        if show_values:
            m = s["median"]
            text = "diverged" if not math.isfinite(m) else (f"{m:.0f}" if m >= 1000 else f"{m:.3g}")
            ax.annotate(text, (med, y), xytext=(0, -12), textcoords="offset points", ha="center", va="center",
                        fontsize=style.FONT_SIZE - 1, color=kw["color"])
        if not math.isfinite(s["high"]) or s["high"] > top:
            ax.annotate("", (top, y), xytext=(-14, 0), textcoords="offset points",
                        arrowprops=dict(arrowstyle="->", color=kw["color"], lw=1.5))
    ax.set_yticks(range(len(order)), [label(n) for n in reversed(order)] if names else [])
    ax.set_ylim(-0.8, len(order) - 0.4)
    if log:
        ax.set_xscale("log")
        low = min(finite) if finite else top / 10
        ax.set_xlim(low / 1.3, top * 1.15)
        plain_log_ticks(ax.xaxis, low / 1.3, top * 1.15)
    else:
        ax.set_xlim(right=top * 1.03)
    ax.set_xlabel(xlabel)
    return order


def plain_log_ticks(axis, lo: float, hi: float) -> None:
    """Ticks of a log axis at 1, 2 and 5 times powers of ten between ``lo`` and ``hi``
    (1 and 3 where that gives too many), labelled as plain numbers."""
    from matplotlib.ticker import NullLocator

    for mantissas in ((1, 2, 5), (1, 3), (1,)):
        ticks = [m * 10.0**e for e in range(-8, 8) for m in mantissas if lo <= m * 10.0**e <= hi]
        if len(ticks) <= 5:
            break
    axis.set_ticks(ticks, [f"{t:g}" for t in ticks])
    axis.set_minor_locator(NullLocator())


def protocol_figure(panels: Sequence[tuple[Mapping, str, str]], title: str | None = None,
                    height: float | None = None) -> Figure:
    """Side-by-side :func:`interval_panel` s: ``panels`` is a list of ``(summary, xlabel,
    panel title)``."""
    rows = max(len(p[0]) for p in panels)
    fig = Figure(figsize=(style.FIG_WIDTH, height or 1.2 + 0.42 * rows))
    axes = np.atleast_1d(fig.subplots(1, len(panels)))
    for ax, (summary, xlabel, panel_title) in zip(axes, panels):
        interval_panel(ax, summary, xlabel)
        ax.set_title(panel_title)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def budget_figure(by_budget: Mapping[int, Mapping[str, Mapping]], xlabel: str, title: str) -> Figure:
    """Figure 4 at every training budget (each tuned on its own): one panel per budget,
    one row per optimizer in the order of the middle budget, the held-out median, its
    90 % interval and the seeds, so a row can be followed across the budgets."""
    budgets = sorted(by_budget)
    middle = by_budget[budgets[len(budgets) // 2]]
    order = sorted(middle, key=lambda n: (middle[n]["median"], n))
    fig = Figure(figsize=(style.FIG_WIDTH, 1.3 + 0.42 * len(order)))
    axes = np.atleast_1d(fig.subplots(1, len(budgets), sharey=True))
    for k, (ax, budget) in enumerate(zip(axes, budgets)):
        summary = by_budget[budget]
        interval_panel(ax, summary, xlabel if k == len(budgets) // 2 else "", order=[n for n in order if n in summary])
        ax.set_title(f"{budget} steps")
    axes[0].set_yticks(range(len(order)), [label(n) for n in reversed(order)])
    for ax in axes[1:]:
        ax.tick_params(labelleft=False)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def variant_label(variant: str) -> str:
    """``"momentum=0.9,placement=update"`` -> ``"momentum 0.9, after whitening"``."""
    if variant == "default":
        return "our reading (default)"
    parts = []
    for item in variant.split(","):
        key, _, value = item.partition("=")
        if key == "placement":
            parts.append("after whitening" if value == "update" else "before whitening")
        elif key == "root_interval":
            parts.append(f"roots every {value} step" + ("s" if value != "1" else ""))
        else:
            parts.append(f"{key.replace('beta_cov', 'β_cov').replace('beta1', 'β₁')} {value}")
    return ", ".join(parts)


def ablation_figure(rows: Mapping[str, Sequence[tuple[str, Mapping]]], reference: Mapping[str, Mapping] | None,
                    xlabel: str, title: str) -> Figure:
    """The reading ablation: for each optimizer (``rows``: name -> list of ``(variant
    label, summary)``), one row per variant with its held-out median and 90 % interval;
    the default reading is drawn as a vertical band, and ``reference`` (name -> summary,
    e.g. IsoAdam's default) as dashed lines across every panel."""
    n = max(len(v) for v in rows.values())
    fig = Figure(figsize=(style.FIG_WIDTH, 1.4 + 0.36 * n))
    axes = np.atleast_1d(fig.subplots(1, len(rows), sharex=True))
    for ax, (name, variants) in zip(axes, rows.items()):
        kw = look(name)
        for y, (variant, s) in enumerate(reversed(list(variants))):
            hi = s["high"] if math.isfinite(s["high"]) else 1e3
            ax.plot([s["low"], hi], [y, y], color=kw["color"], linewidth=3, solid_capstyle="butt")
            ax.plot([s["median"]], [y], marker=kw["marker"], color=kw["color"], markersize=8, linestyle="none")
        ax.set_yticks(range(len(variants)), [variant_label(v) for v, _ in reversed(list(variants))])
        ax.set_title(label(name))
        refs = sorted((reference or {}).items(), key=lambda item: item[1]["median"])
        for k, (ref_name, ref) in enumerate(refs):  # the lowest labelled left of its line: no overlap
            ax.axvline(ref["median"], color=_color(ref_name), linestyle="--", linewidth=1.5)
            ax.annotate(f"{label(ref_name)} {ref['median']:.3g}", (ref["median"], len(variants) - 0.5),
                        xytext=(-3 if k == 0 else 3, 0), textcoords="offset points", color=_color(ref_name),
                        fontsize=style.FONT_SIZE - 1, va="bottom", ha="right" if k == 0 else "left")
        ax.set_xscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylim(-0.7, len(variants) + 0.1)
    values = [v for variants in rows.values() for _, s in variants for v in (s["low"], s["high"], s["median"])
              if math.isfinite(v)] + [r["median"] for r in (reference or {}).values()]
    lo, hi = min(values) / 1.2, max(values) * 1.2
    axes[0].set_xlim(lo, hi)
    for ax in axes:
        plain_log_ticks(ax.xaxis, lo, hi)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def sweep_curves(curves: Mapping[str, tuple], ylabel: str, title: str) -> Figure:
    """Learning-rate sweeps at fixed settings: ``curves`` maps a name to ``(lrs, per-seed
    values (seeds, lrs))``; the median over seeds with the band from best to worst seed."""
    fig = Figure(figsize=(style.FIG_WIDTH, 3.8))
    ax = fig.subplots()
    for name, (lrs, values) in curves.items():
        _median_and_band(ax, name, np.asarray(lrs), np.asarray(values, dtype=float), top=None)
    ax.set(xscale="log", yscale="log", xlabel="learning rate", ylabel=ylabel, title=title)
    ax.legend(ncol=2, loc="upper center")
    fig.tight_layout()
    return fig


def _seed_median(values: np.ndarray) -> np.ndarray:
    """Median over seeds (axis 0) with a diverged seed (NaN) counted as the worst."""
    return np.median(np.where(np.isnan(values), np.inf, values), axis=0)


def _median_and_band(ax, name, lrs, values, top, label_text=None, markers=True):
    kw = look(name, label=label_text or label(name), markers=markers)
    bad = np.where(np.isnan(values), np.inf, values)
    med, lo, hi = _seed_median(values), bad.min(axis=0), bad.max(axis=0)
    ok = np.isfinite(med)
    ceiling = top if top is not None else (np.nanmax(np.where(np.isfinite(hi), hi, np.nan)) * 2 if np.isfinite(hi).any() else 1.0)
    band = np.isfinite(lo)
    ax.fill_between(lrs[band], lo[band], np.minimum(hi[band], ceiling), color=kw["color"], alpha=0.18, linewidth=0)
    ax.plot(lrs[ok], med[ok], **kw)
    if ok.any():
        i = int(np.argmin(med))
        ax.plot([lrs[i]], [med[i]], "o", color=kw["color"], markersize=11, markerfacecolor="none", markeredgewidth=1.5)
    if (~ok).any() and top is not None:
        ax.plot(lrs[~ok], np.full((~ok).sum(), top), "x", color=kw["color"], markersize=7, markeredgewidth=2)
    return med


# ------------------------------------------------------------------ explorable
class SweepGrid:
    """The saved explorable sweeps (``results/sweeps_explorable.npz``): for every depth,
    batch size, condition number κ of Σ, orientation of Σ and optimizer, the loss after
    training over the initial loss, per seed and learning rate."""

    def __init__(self, path: Path | str = _RESULTS):
        with np.load(path) as saved:
            self.relative, self.meta = saved["relative"], json.loads(str(saved["meta"]))
        self.names = list(self.meta["optimizers"])
        self.lrs = {name: np.logspace(*self.meta["lr_grids"][name]) for name in self.names}
        self.depths, self.batches = list(self.meta["depths"]), list(self.meta["batches"])
        self.kappas, self.angles = list(self.meta["kappas"]), list(self.meta["angles"])

    def values(self, name, depth, batch, kappa, angle) -> np.ndarray:
        """``(seeds, lrs)`` relative final losses (NaN: the lane diverged)."""
        if kappa == 1:
            angle = self.angles[0]       # Σ = I: the orientation does not matter
        i = (self.depths.index(depth), self.batches.index(batch), self.kappas.index(kappa), self.angles.index(angle),
             self.names.index(name))
        return self.relative[i][:, : self.lrs[name].size]

    def median(self, name, depth, batch, kappa, angle) -> np.ndarray:
        return _seed_median(self.values(name, depth, batch, kappa, angle))

    def best(self, name, depth, batch, kappa, angle) -> tuple[float, float]:
        """``(lr, median)`` at the learning rate with the lowest median over seeds."""
        med = self.median(name, depth, batch, kappa, angle)
        i = int(np.argmin(med))
        return float(self.lrs[name][i]), float(med[i])

    def at_edge(self, name, depth, batch, kappa, angle) -> bool:
        """Whether the best rate is the grid's first or last."""
        med = self.median(name, depth, batch, kappa, angle)
        return int(np.argmin(med)) in (0, med.size - 1)


def kappa_ratios(grid: SweepGrid, depth: int, batch: int, kappa: float, angle: float = 0.0) -> dict:
    """Best median loss at ``kappa`` over the best median at Σ = I, per optimizer."""
    return {n: grid.best(n, depth, batch, kappa, angle)[1] / grid.best(n, depth, batch, 1.0, angle)[1] for n in grid.names}


def _kappa_text(kappa: float) -> str:
    return f"{kappa:.3g}" if kappa < 1000 else f"{kappa:.0f}"


#: The depths and batch sizes the explorable offers (the saved grid has more; every
#: combination is a frame on the website, and the frames must fit in 2 MB).
SHOWN_DEPTHS, SHOWN_BATCHES = (2, 4), (16, 64)


def sweeps(grid: SweepGrid | None = None) -> Explorable:
    """The explorable: sweeps of SGD, Adam, Iso and IsoAdam at each depth, batch size and
    input covariance of the saved grid (median over seeds, band from the best to the worst
    seed), each optimizer's best loss and its ratio to Σ = I in the legend."""
    grid = grid or SweepGrid()
    top = 2.0

    def draw_sweeps(fig, kappa, rotated, depth, batch):
        angle = grid.angles[1] if rotated == "rotated 45°" else grid.angles[0]
        if all(not np.isfinite(grid.median(n, depth, batch, kappa, angle)).any() for n in grid.names):
            raise FigureMessage("every learning rate diverged for every optimizer at this setting")
        ax = fig.add_subplot()
        for name in grid.names:
            best = grid.best(name, depth, batch, kappa, angle)[1]
            ratio = best / grid.best(name, depth, batch, 1.0, angle)[1]
            _median_and_band(ax, name, grid.lrs[name], grid.values(name, depth, batch, kappa, angle), top,
                             label_text=f"{short(name)} ×{ratio:.1f}", markers=False)
        ax.set(xscale="log", yscale="log", ylim=(1e-6, 3), xlim=(3e-4, 5),
               xlabel="learning rate", ylabel="loss after 100 steps / initial",
               title=(f"Σ = I" if kappa == 1 else f"κ(Σ) = {_kappa_text(kappa)}, {rotated}")
               + f"; depth {depth}, batch {batch}   (x: diverged)")
        log_ticks(ax.xaxis, [-3, -2, -1, 0])
        log_ticks(ax.yaxis, [-6, -4, -2, 0])
        ax.legend(loc="lower left", ncol=4, handlelength=2.2, columnspacing=1.2,
                  title="best loss / its Σ = I value", alignment="left")

    def best_log_lr(name):
        def measure(kappa, rotated, depth, batch):
            angle = grid.angles[1] if rotated == "rotated 45°" else grid.angles[0]
            return math.log10(grid.best(name, depth, batch, kappa, angle)[0])
        return measure

    sgd_step = float(np.diff(np.log10(grid.lrs["sgd"]))[0])
    caption = ("Learning-rate sweeps (n = 16, 100 steps, 4 seeds: median, and the band from the best to the worst "
               "seed; a circle marks the best rate) of SGD, Adam, Iso and IsoAdam, precomputed for every setting "
               "(scripts/explorable_sweeps.py). Move κ: SGD's best learning rate falls as κ grows, "
               "and Iso's best rate stays within half a decade; the legend gives each best loss against Σ = I.")
    return Explorable(
        draw_sweeps,
        [Slider("kappa", grid.kappas, label="κ(Σ)", default=100.0, fmt="{:.4g}"),
         Slider("rotated", ["axis-aligned", "rotated 45°"], label="Σ's axes", default="axis-aligned", fmt="{}"),
         Slider("depth", [d for d in grid.depths if d in SHOWN_DEPTHS], label="depth k", default=4),
         Slider("batch", [b for b in grid.batches if b in SHOWN_BATCHES], label="batch b", default=64)],
        main="kappa",
        figsize=(style.FIG_WIDTH, 3.5),
        static_colors=8,
        caption=caption,
        promises=[Promise("SGD's best learning rate falls as κ grows", best_log_lr("sgd"),
                          nonincreasing(tol=sgd_step * 1.01)),
                  Promise("Iso's best rate stays within half a decade", best_log_lr("iso"), constant(atol=0.5))],
    )


EXPLORABLES = (sweeps,)


# ------------------------------------------------------------------ tables
_KNOB_NAMES = {"momentum": "momentum", "nesterov": None, "betas": "betas", "beta_cov": "β_cov", "beta": "β"}


def setting_text(entry: Mapping) -> str:
    """The chosen setting of a :func:`protocol_summaries` entry: the learning rate and
    every hyperparameter the protocol tuned (the knobs), e.g. ``"lr 0.044, momentum 0"``."""
    knobs = entry["sweep"].info["entry"]["knobs"]
    names = sorted({k for combo in knobs for k in combo}) if isinstance(knobs, list) else sorted(knobs or {})
    parts = [f"lr {entry['lr']:.2g}"]
    for k in names:
        if _KNOB_NAMES.get(k, k) is None:
            continue
        v = entry["hyper"][k]
        parts.append(f"{_KNOB_NAMES.get(k, k)} {tuple(v) if isinstance(v, list) else v:g}" if not isinstance(v, list)
                     else f"{_KNOB_NAMES.get(k, k)} ({', '.join(f'{x:g}' for x in v)})")
    return ", ".join(parts)


def table(summary: Mapping[str, Mapping], digits: int | None = 3, names=None) -> str:
    """One line per entry, best first: the chosen setting and the held-out median with its
    90 % interval (``digits`` significant digits, whole numbers when None; saved numbers,
    the same on every machine)."""
    def f(x):
        return "diverged" if not math.isfinite(x) else (f"{x:.0f}" if digits is None else f"{x:.{digits}g}")

    order = sorted(summary, key=lambda n: (summary[n]["median"], n))
    width = max(len((names or label)(n)) for n in order)
    lines = [f"{'':{width}s}  {'chosen setting':40s} held-out median [90% interval]"]
    for n in order:
        s = summary[n]
        lines.append(f"{(names or label)(n):{width}s}  {setting_text(s):40s} {f(s['median']):>8s} [{f(s['low'])}, {f(s['high'])}]")
    return "\n".join(lines)


def retrain(grid: SweepGrid, name: str, depth: int, batch: int, kappa: float, angle: float) -> np.ndarray:
    """One setting of the saved explorable grid trained again from the file's own
    metadata (problem, seeds, steps, rates, every hyperparameter): ``(seeds, lrs)``
    relative final losses, as :meth:`SweepGrid.values` returns them."""
    import torch

    from isolab.book.engine import sweep
    from isolab.book.problems import DeepLinearRegression, GaussianFeatures

    p = grid.meta["problem"]
    hyper = {k: (tuple(v) if isinstance(v, list) else v) for k, v in grid.meta["hyper"][name].items()}
    problem = DeepLinearRegression(n=p["n"], depth=depth, batch=batch,
                                   features=GaussianFeatures(p["n"], kappa, math.radians(angle)))
    s = sweep(problem, name, grid.lrs[name], p["steps"], seeds=list(p["seeds"]), hyper=hyper, record_norms=False,
              progress=False, dtype=getattr(torch, p["dtype"]))
    return s.final_loss() / s.loss[:, :, 0]


def same_sweep(live: np.ndarray, saved: np.ndarray, rtol: float = 0.01) -> bool:
    """Whether a retrained ``(seeds, lrs)`` sweep matches a saved one: the same lanes
    diverged, the same best rate (lowest median over seeds), and every lane at or below
    the best rate within ``rtol``. Lanes above the best rate, close to instability, are
    chaotic in float32: a rerun on another CPU lands a few percent away (only their
    outcome, diverged or not, is compared)."""
    finite = np.isfinite(saved)
    if live.shape != saved.shape or not np.array_equal(np.isfinite(live), finite):
        return False
    best = int(np.argmin(_seed_median(saved)))
    if int(np.argmin(_seed_median(live))) != best:
        return False
    a, b = live[:, : best + 1], saved[:, : best + 1]
    ok = np.isfinite(b)
    return bool(np.all(np.abs(a[ok] - b[ok]) <= rtol * np.abs(b[ok])))


# ------------------------------------------------------------------ checks the chapter prints
def budget_lines(summary: Mapping[str, Mapping]) -> str:
    """How each optimizer's budget is spent: knob settings x learning rates."""
    lines = []
    for name, s in summary.items():
        knobs = s["sweep"].info["entry"]["knobs"]
        combos = len(knobs) if isinstance(knobs, list) else math.prod(len(v) for v in knobs.values())
        lines.append(f"  {label(name):26s} {combos} knob setting(s) x {s['budget'] // combos:2d} learning rates")
    return "\n".join(lines)


def protocol_checks(fig3: Mapping, fig4: Mapping[int, Mapping]) -> list:
    """The protocol's rules, checked on the saved results: one budget per figure, every
    chosen learning rate inside its grid."""
    from isolab.book.checks import Check

    parts = (("Figure 3", list(fig3.values())), ("Figure 4", [s for b in fig4.values() for s in b.values()]))
    checks = [Check(f"{where}: every optimizer gets the same number of trials", f"{sorted({s['budget'] for s in part})}",
                    "one value", len({s["budget"] for s in part}) == 1) for where, part in parts]
    entries = parts[0][1] + parts[1][1]
    inside = sum(s["interior"] for s in entries)
    checks.append(Check("every chosen learning rate lies inside its grid (Figures 3 and 4)",
                        f"{inside} of {len(entries)}", f"{len(entries)} of {len(entries)}", inside == len(entries)))
    return checks


#: The optimizers of the paper's Figures 3 and 4.
PAPERS_FOUR = ("sgd", "adam", "iso", "isoadam")


def _leader(summary: Mapping) -> str:
    return min(summary, key=lambda n: (summary[n]["median"], n))


#: What the chapter says of each of the paper's claims under the protocol (§10.7): the
#: verdict each row of :func:`paper_claims` asserts (a claim that changes its verdict fails).
PAPER_VERDICTS = {"5 layers": {"four": "reproduced", "all": "refuted", "clearly": "refuted", "lr": "refuted"},
                  "40 layers": {"four": "refuted", "all": "refuted", "clearly": "refuted", "lr": "reproduced"}}


def paper_claims(fig3: Mapping, fig4: Mapping[int, Mapping], main: int) -> list:
    """The paper's claims, each a :class:`~isolab.book.checks.Check` of the verdict the
    chapter states (:data:`PAPER_VERDICTS`): Iso best of the paper's four optimizers, best
    of all, clearly best (its interval below the runner-up's), on 5 layers and at every
    40-layer budget; IsoAdam's tuned learning rate within a factor of 2 of Adam's."""
    from isolab.book.checks import refuted, reproduced

    def verdict(where, which, claim, measured, expected, holds):
        said = PAPER_VERDICTS[where.split(",")[0]][which]
        return (refuted if said == "refuted" else reproduced)("the paper", f"{where}: {claim}", measured, expected,
                                                               bool(holds))

    claims = []
    for title, summary in [("5 layers", fig3)] + [(f"40 layers, {b} steps", fig4[b]) for b in sorted(fig4)]:
        four = {n: summary[n] for n in PAPERS_FOUR}
        claims.append(verdict(title, "four", "Iso is best of the paper's four (SGD, Adam, Iso, IsoAdam)",
                              f"best {label(_leader(four))} {four[_leader(four)]['median']:.3g}", "Iso",
                              _leader(four) == "iso"))
        other = _leader({n: v for n, v in summary.items() if n != "iso"})
        claims.append(verdict(title, "all", f"Iso is best of all {len(summary)}", f"Iso {summary['iso']['median']:.3g}, "
                              f"best other {label(other)} {summary[other]['median']:.3g}", "Iso lowest",
                              _leader(summary) == "iso"))
        apart = separated(summary, "iso", other)
        iso, o = summary["iso"], summary[other]
        claims.append(verdict(title, "clearly", "Iso is clearly best (its interval below all others')",
                              f"Iso [{iso['low']:.3g}, {iso['high']:.3g}], {label(other)} [{o['low']:.3g}, {o['high']:.3g}]",
                              "Iso's high end below the next one's low end", apart))
    for title, summary in [("5 layers", fig3), (f"40 layers, {main} steps", fig4[main])]:
        ratio = summary["adam"]["lr"] / summary["isoadam"]["lr"]
        claims.append(verdict(title, "lr", "IsoAdam's tuned lr within x2 of Adam's", f"Adam / IsoAdam = {ratio:.2f}",
                              "between 0.5 and 2", bool(0.5 <= ratio <= 2)))
    return claims
