r"""Figures of Chapter 10 (deep linear networks under the tuning protocol of Part III).

- :func:`interval_panel` / :func:`protocol_figure`: each optimizer's median over the held-out
  seeds with its order-statistic interval and the seeds themselves, and the same for the
  fresh seeds beside it, sorted by the held-out median (the paper's Figures 3 and 4 under
  the protocol; the hero figure is one of these).
- :func:`budget_figure`: Figure 4's medians and intervals at each training budget.
- :func:`ablation_figure`: the reading ablation of Iso and IsoAdam, one row per variant.
- :func:`damping_figure`: what the damping does to the length of Iso's and IsoAdam's steps.
- :func:`edges`: the centerpiece, learning-rate sweeps over the condition number κ of the
  input covariance, with Σ's scale fixed by its trace or by its smallest eigenvalue
  (``scripts/explorable_sweeps.py``): SGD's stability edge follows Σ's largest eigenvalue.

:mod:`isolab.book.figures.ch10_protocol` reads and judges the saved protocol results.
The engine names optimizers in lower case (``"isoadam"``, ``"shampoo_graft"``);
:func:`look` turns a name into the book-wide look of :mod:`isolab.book.figures.style`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure

from isolab.book.explorable import Explorable, Promise, Slider, constant, nonincreasing
from isolab.book.engine.intervals import median_interval, paired_difference
from isolab.book.figures import style
from isolab.book.plotting import log_ticks

__all__ = ["LABELS", "label", "short", "look", "interval_panel", "plain_log_ticks", "variant_label",
           "protocol_figure", "budget_figure", "ablation_figure", "damping_figure", "EdgeGrid", "edges",
           "EXPLORABLES"]

#: How the chapter's optimizers are named in figures (engine name -> label).
LABELS = {"sgd": "SGD", "sgd_plain": "SGD, no momentum", "adam": "Adam", "iso": "Iso",
          "isoadam": "IsoAdam", "muon": "Muon", "signsgd": "SignSGD",
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


# ------------------------------------------------------------------ intervals
def _sets(summary) -> list:
    """A summary ``{name: {...}}`` or a list of them (held-out, then fresh) as a list."""
    return [summary] if isinstance(summary, Mapping) else list(summary)


def interval_panel(ax, summary, xlabel: str, *, log: bool = True, cap: float | None = None,
                   show_values: bool = True, order: Sequence[str] | None = None, names: bool = True) -> list[str]:
    """One row per optimizer, sorted by the held-out median, best at the top: the held-out
    seeds as small dots, the median's interval as a thick bar, the median as the optimizer's
    marker (its value below it); with a second set of seeds (``summary`` a list: held-out,
    then fresh), that set's interval as a thin bar under it and its median as an open marker.
    Values above ``cap`` (or infinite) sit at the right edge with an arrow. Returns the names
    top to bottom."""
    sets = _sets(summary)
    held = sets[0]
    order = list(order) if order is not None else sorted(held, key=lambda n: (held[n]["median"], n))
    finite = [v for st in sets for n in order for v in np.ravel(st[n]["values"]) if np.isfinite(v)]
    top = cap if cap is not None else (max(finite) * (1.6 if log else 1.1) if finite else 1.0)
    room = 2.2 if (log and show_values) else 1.0     # space right of the bars for the values
    for row, name in enumerate(order):
        y = len(order) - 1 - row
        kw = look(name, markers=True)
        for k, st in enumerate(sets):
            s = st[name]
            lo, hi, med = min(s["low"], top), min(s["high"], top), min(s["median"], top)
            yk = y - 0.2 * k
            if k == 0:
                vals = np.minimum(np.asarray(s["values"], dtype=float), top)
                ax.plot(vals, np.full(vals.size, y + 0.24), "o", color=kw["color"], markersize=3.5, alpha=0.7,
                        linestyle="none")
            ax.plot([lo, hi], [yk, yk], color=kw["color"], linewidth=3 if k == 0 else 1.5, solid_capstyle="butt")
            ax.plot([med], [yk], marker=kw["marker"], color=kw["color"], markersize=9 if k == 0 else 7,
                    markerfacecolor=kw["color"] if k == 0 else "white", linestyle="none")
            if not math.isfinite(s["high"]) or s["high"] > top:
                ax.annotate("", (top, yk), xytext=(-14, 0), textcoords="offset points",
                            arrowprops=dict(arrowstyle="->", color=kw["color"], lw=1.5))
        if show_values:
            m = held[name]["median"]
            text = "diverged" if not math.isfinite(m) else (f"{m:.0f}" if m >= 100 else f"{m:.3g}")
            right = min(max(st[name]["high"] for st in sets), top)
            ax.annotate(text, (right, y), xytext=(5, 0), textcoords="offset points", ha="left", va="center",
                        fontsize=style.FONT_SIZE - 1, color=style.text_color(look(name)["color"]))
    ax.set_yticks(range(len(order)), [label(n) for n in reversed(order)] if names else [])
    ax.set_ylim(-0.8, len(order) - 0.4)
    if log:
        ax.set_xscale("log")
        low = min(finite) if finite else top / 10
        ax.set_xlim(low / 1.3, top * 1.15 * room)
        plain_log_ticks(ax.xaxis, low / 1.3, top * 1.15 * room)
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
    rows = max(len(_sets(p[0])[0]) for p in panels)
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
    interval and the seeds, so a row can be followed across the budgets."""
    budgets = sorted(by_budget)
    middle = _sets(by_budget[budgets[len(budgets) // 2]])[0]
    order = sorted(middle, key=lambda n: (middle[n]["median"], n))
    fig = Figure(figsize=(style.FIG_WIDTH, 1.3 + 0.42 * len(order)))
    axes = np.atleast_1d(fig.subplots(1, len(budgets), sharey=True))
    for k, (ax, budget) in enumerate(zip(axes, budgets)):
        summary = by_budget[budget]
        interval_panel(ax, summary, xlabel if k == len(budgets) // 2 else "",
                       order=[n for n in order if n in _sets(summary)[0]])
        ax.set_title(f"{budget} steps")
    axes[0].set_yticks(range(len(order)), [label(n) for n in reversed(order)])
    for ax in axes[1:]:
        ax.tick_params(labelleft=False)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def variant_label(variant: str) -> str:
    """``"momentum=0.9,placement=update"`` -> ``"momentum 0.9, after whitening"``."""
    if variant in ("default", "tuned"):
        return "Figure 4's setting" if variant == "tuned" else "our reading (default)"
    parts = []
    for item in variant.split(","):
        key, _, value = item.partition("=")
        if key == "placement":
            parts.append("momentum after whitening" if value == "update" else "momentum before whitening")
        elif key == "root_interval":
            parts.append(f"roots every {value} step" + ("s" if value != "1" else ""))
        else:
            words = {"beta_cov": "β_cov", "beta1": "β₁", "weight_decay": "weight decay", "damping": "damping"}
            parts.append(f"{words.get(key, key)} {value}")
    return ", ".join(parts)


def ablation_figure(rows: Mapping[str, Sequence[tuple[str, Mapping]]], reference: Mapping[str, Mapping] | None,
                    xlabel: str, title: str) -> Figure:
    """The reading ablation: for each optimizer (``rows``: name -> list of ``(variant
    label, summary)``), one row per variant with its held-out median and its interval;
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


def damping_figure(entries: Mapping[str, Mapping], best_rates) -> Figure:
    """Each damping's best first-rung learning rate (``best_rates(entry)``: ``{(momentum,
    damping): (lr, score)}``), one panel per optimizer of ``entries`` (``"iso"``,
    ``"isoadam"``), a line per momentum value, on shared log axes."""
    fig = Figure(figsize=(style.FIG_WIDTH, 3.3))
    axes = np.atleast_1d(fig.subplots(1, len(entries), sharey=True))
    shades = {0.0: ":", 0.9: "--", 0.95: "-"}
    lo, hi = math.inf, 0.0
    for ax, (name, entry) in zip(axes, entries.items()):
        best = best_rates(entry)
        for mu in sorted({m for m, _ in best}):
            pts = sorted((d, lr) for (m, d), (lr, _) in best.items() if m == mu)
            kw = look(name, label=f"{'β₁' if name == 'isoadam' else 'momentum'} {mu:g}",
                      linestyle=shades.get(mu, "-"))
            ax.plot([d for d, _ in pts], [lr for _, lr in pts], **kw)
            lo, hi = min(lo, *(lr for _, lr in pts)), max(hi, *(lr for _, lr in pts))
        ax.set(xscale="log", yscale="log", xlabel="damping (of the mean eigenvalue)")
        ax.set_title(label(name))
        ax.legend(loc="upper left", fontsize=style.FONT_SIZE - 1, frameon=False)
    axes[0].set_ylabel("best first-rung learning rate")
    axes[0].set_ylim(lo / 2, hi * 4)
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------ the centerpiece
_RESULTS = Path(__file__).resolve().parents[3] / "results" / "sweeps_explorable.npz"
#: The two ways the centerpiece fixes Σ's scale (the toggle's labels).
SCALE_LABELS = {"trace": "tr Σ = n", "floor": "smallest eigenvalue 1"}
AXES_LABELS = {0.0: "aligned", 45.0: "rotated 45°"}


def _seed_median(values: np.ndarray) -> np.ndarray:
    """Median over seeds (axis 0) with a diverged seed (NaN) counted as the worst."""
    return np.median(np.where(np.isnan(values), np.inf, values), axis=0)


class EdgeGrid:
    """The saved sweeps of ``scripts/explorable_sweeps.py``: for every κ, way of fixing Σ's
    scale, orientation and optimizer, the loss after training over the initial loss, per seed
    and learning rate, and Σ's largest eigenvalue."""

    def __init__(self, path: Path | str = _RESULTS):
        with np.load(path) as saved:
            self.relative, self.lam_max = saved["relative"].astype(np.float64), saved["lam_max"]
            self.meta = json.loads(str(saved["meta"]))
        self.names, self.kappas = list(self.meta["optimizers"]), list(self.meta["kappas"])
        self.scales, self.angles = list(self.meta["scales"]), list(self.meta["angles"])
        self.lrs = np.logspace(*self.meta["lr_grid"])
        self.step = float(np.log10(self.lrs[1] / self.lrs[0]))

    def values(self, name, kappa, scale, angle) -> np.ndarray:
        """``(seeds, lrs)`` relative final losses (NaN: the lane diverged)."""
        return self.relative[self.kappas.index(kappa), self.scales.index(scale), self.angles.index(angle),
                             self.names.index(name)]

    def largest_eigenvalue(self, kappa, scale) -> float:
        return float(self.lam_max[self.kappas.index(kappa), self.scales.index(scale)])

    def edge(self, name, kappa, scale, angle) -> float:
        """The stability edge: the largest rate below which every rate survives on every seed."""
        ok = np.isfinite(self.values(name, kappa, scale, angle)).all(axis=0)
        bad = np.flatnonzero(~ok)
        return float(self.lrs[bad[0] - 1] if bad.size and bad[0] > 0 else (self.lrs[-1] if not bad.size else np.nan))

    def retrain(self, name, kappa, scale, angle) -> np.ndarray:
        """The ``(seeds, lrs)`` sweep of one setting trained again now, from the file's own
        metadata (:func:`isolab.book.figures.ch10_protocol.edge_losses`)."""
        from isolab.book.figures.ch10_protocol import edge_losses, edge_problem

        m = self.meta
        problem = edge_problem(m["n"], m["depth"], m["batch"], kappa, scale, angle)
        return edge_losses(problem, name, self.lrs, m["steps"], m["seeds"], m["hyper"][name])

    def best(self, name, kappa, scale, angle) -> tuple[float, float]:
        """``(lr, median)`` at the rate with the lowest median over seeds."""
        med = _seed_median(self.values(name, kappa, scale, angle))
        i = int(np.argmin(med))
        return float(self.lrs[i]), float(med[i])


def _num(x: float) -> str:
    """``3162.3`` -> ``"3162"``, ``3.38`` -> ``"3.38"``: a plain number of at most 4 digits."""
    return f"{x:.0f}" if x >= 100 else f"{x:.3g}"


def _band(ax, name, lrs, values, top):
    kw = look(name, label=short(name), markers=False)
    bad = np.where(np.isnan(values), np.inf, values)
    med, lo, hi = _seed_median(values), bad.min(axis=0), bad.max(axis=0)
    band, ok = np.isfinite(lo), np.isfinite(med)
    ax.fill_between(lrs[band], lo[band], np.minimum(hi[band], top), color=kw["color"], alpha=0.18, linewidth=0)
    ax.plot(lrs[ok], med[ok], **kw)


def edges(grid: EdgeGrid | None = None) -> Explorable:
    """The centerpiece: sweeps of SGD, Adam, Iso and IsoAdam against κ (left), and every
    optimizer's stability edge against Σ's largest eigenvalue (right), with Σ's scale fixed by
    its trace or by its smallest eigenvalue."""
    grid = grid or EdgeGrid()
    top, floor = 3.0, 1e-4
    scales = {SCALE_LABELS[s]: s for s in grid.scales}
    axes_of = {AXES_LABELS[a]: a for a in grid.angles}

    def draw_edges(fig, kappa, scale, axes):
        sc, ang = scales[scale], axes_of[axes]
        lam = grid.largest_eigenvalue(kappa, sc)
        left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.45, 1]})
        for name in grid.names:
            _band(left, name, grid.lrs, grid.values(name, kappa, sc, ang), top)
            e = grid.edge(name, kappa, sc, ang)
            left.axvline(e, color=_color(name), linestyle=":", linewidth=1.5)
        left.set(xscale="log", yscale="log", ylim=(floor, top), xlim=(grid.lrs[0], grid.lrs[-1]),
                 xlabel="learning rate", ylabel="loss after 100 steps / initial")
        left.set_title(f"κ = {_num(kappa)}: largest eigenvalue {_num(lam)}")
        log_ticks(left.xaxis, [-6, -4, -2, 0])
        log_ticks(left.yaxis, [-4, -2, 0])
        left.legend(loc="lower left", ncol=2, fontsize=style.FONT_SIZE - 1, handlelength=1.6)
        lams = [grid.largest_eigenvalue(k, sc) for k in grid.kappas]
        for name in grid.names:
            es = [grid.edge(name, k, sc, ang) for k in grid.kappas]
            right.plot(lams, es, **look(name, label=short(name), markers=False))
            right.plot([lam], [grid.edge(name, kappa, sc, ang)], marker=look(name)["marker"], color=_color(name),
                       markersize=9, linestyle="none")
        right.plot([1, 1e4], [0.4, 0.4e-4], color=style.ROLES["bound"], linestyle="--", linewidth=1.5)
        right.text(0.04, 0.04, "dashed: 0.4 / largest\neigenvalue", transform=right.transAxes,
                   fontsize=style.FONT_SIZE - 1, color=style.ROLES["ink"], va="bottom")
        right.set(xscale="log", yscale="log", xlim=(0.6, 2e4), ylim=(2e-5, 5), xlabel="largest eigenvalue of Σ",
                  ylabel="stability edge (largest stable rate)")
        right.set_title("each κ of the slider")
        log_ticks(right.xaxis, [0, 2, 4])
        log_ticks(right.yaxis, [-4, -2, 0])

    def log_edge(name, times_lam=False):
        def measure(kappa, scale, axes):
            sc = scales[scale]
            e = grid.edge(name, kappa, sc, axes_of[axes])
            return math.log10(e * (grid.largest_eigenvalue(kappa, sc) if times_lam else 1.0))
        return measure

    caption = ("Learning-rate sweeps of SGD, Adam, Iso and IsoAdam (n = 16, 4 layers, batch 64, 100 steps, "
               "4 seeds: the median and the band from the best to the worst seed; dotted: each stability edge, "
               "the largest rate at which every seed survives), for the condition number κ of the input "
               "covariance Σ. Move κ: SGD's stability edge never rises, and SGD's edge times the largest eigenvalue "
               "stays within a factor of 5, so with the smallest eigenvalue held at 1 the edge falls about as fast as "
               "κ grows, while with tr Σ = n, which caps the largest eigenvalue at n, it barely moves; Iso's edge "
               "stays within a factor of 3 in both.")
    return Explorable(
        draw_edges,
        [Slider("kappa", grid.kappas, label="κ(Σ)", default=100.0, fmt="{:.4g}"),
         Slider("scale", list(scales), label="Σ's scale", default=SCALE_LABELS["floor"], fmt="{}"),
         Slider("axes", list(axes_of), label="Σ's axes", default=AXES_LABELS[45.0], fmt="{}")],
        main="kappa",
        figsize=(style.FIG_WIDTH, 3.6),
        static_colors=12,
        narrow="panels",
        caption=caption,
        promises=[Promise("SGD's stability edge never rises", log_edge("sgd"), nonincreasing(tol=1e-9)),
                  Promise("SGD's edge times the largest eigenvalue stays within a factor of 5",
                          log_edge("sgd", True), constant(atol=math.log10(5))),
                  Promise("Iso's edge stays within a factor of 3", log_edge("iso"), constant(atol=math.log10(3)))],
    )


EXPLORABLES = (edges,)
