r"""Figures of Chapter 11 (a small Transformer under Part III's protocol: Adam, IsoAdam,
Muon and SOAP, each tuned with the same budget).

- :func:`budget_figure`: each optimizer's held-out test loss (median over seeds, its
  order-statistic interval, the seeds themselves) at every training budget, against steps and,
  with the timings, against the seconds that budget costs (the hero figure).
- :func:`tuning_figure`: every trial of the tuning, loss against learning rate, one panel
  per budget, the chosen setting ringed: the optimum is inside its grid.
- :func:`live_figure`: the chapter's small live run next to the saved held-out curves.
- :func:`timing_figure`: milliseconds per step, forward + backward and the optimizer step
  stacked, interleaved rounds (median and quartiles), the second Adam showing the noise.
- :func:`replay`: the explorable, replaying the held-out curves step by step at each
  budget.

Each optimizer keeps its book-wide look (:func:`isolab.book.figures.ch10.look`).
"""

from __future__ import annotations

import math
from typing import Mapping, Optional

import numpy as np
from matplotlib.figure import Figure

from isolab.book import lm_protocol as P
from isolab.book import lm_results as R
from isolab.book.explorable import Explorable, Promise, Slider, always
from isolab.book.figures import style
from isolab.book.figures.ch10 import look as _look10, plain_log_ticks

__all__ = ["budget_figure", "interval_figure", "tuning_figure", "live_figure", "timing_figure", "replay", "EXPLORABLES"]

ORDER = R.CONTENDERS  # adam, soap, isoadam, muon: one rate for all but Muon
_OFFSET = {"adam": -0.045, "soap": -0.015, "isoadam": 0.015, "muon": 0.045,   # log10: the bars apart
           "adam2": -0.03, "soap2": 0.0, "isoadam2": 0.03}


def look(name: str, **overrides) -> dict:
    """The book-wide look of an optimizer; its form with two rates (``"adam2"``, ...) keeps
    the colour and marker, drawn open."""
    if name in P.TWO_RATES:
        overrides = {"label": P.LABELS[name], "markerfacecolor": "none", **overrides}
        return _look10(name[:-1], **overrides)
    return _look10(name, **overrides)


def _interval(ax, x, s, name):
    """The seeds as faint dots and the median's order-statistic interval (coverage at least
    90 %) as a bar; a diverged seed (infinite
    loss) is not drawn but counted in a note above the bar, which then ends at the worst
    finite seed."""
    kw = look(name, markers=True)
    values = np.asarray(s["values"], dtype=float)
    finite = values[np.isfinite(values)]
    ax.plot(np.full(finite.size, x), finite, "o", color=kw["color"], markersize=3, alpha=0.45, linestyle="none")
    high = s["high"] if math.isfinite(s["high"]) else finite.max()
    ax.plot([x, x], [s["low"], high], color=kw["color"], linewidth=3, solid_capstyle="butt")
    if finite.size < values.size:
        ax.annotate(f"{values.size - finite.size} of {values.size} seeds diverged", (x, high), xytext=(0, 8),
                    textcoords="offset points", ha="center", va="bottom", color=kw["color"],
                    fontsize=style.FONT_SIZE - 1, arrowprops=dict(arrowstyle="<-", color=kw["color"], lw=1.5))


def _budget_panel(ax, summ: Mapping[int, Mapping[str, Mapping]], xs: Mapping[str, Mapping[int, float]], xlabel: str,
                  names=ORDER):
    for name in names:
        pts = [(xs[name][b] * 10 ** _OFFSET[name], summ[b][name]) for b in sorted(summ) if name in summ[b]]
        if not pts:
            continue
        for x, s in pts:
            _interval(ax, x, s, name)
        ax.plot([x for x, _ in pts], [s["median"] for _, s in pts], **look(name, markersize=7))
    ax.set_xscale("log")
    ax.set_xlabel(xlabel)


def budget_figure(protocol: Mapping, timing: Optional[Mapping] = None, size: str = "chapter",
                  title: Optional[str] = None, names=ORDER) -> Figure:
    """Held-out test loss at each budget against steps (left) and, given the saved timings,
    against the seconds the budget costs on the timing machine (right)."""
    summ = R.summaries(protocol)
    budgets = R.budgets(protocol)
    fig = Figure(figsize=(style.FIG_WIDTH, 3.9))
    axes = fig.subplots(1, 2 if timing is not None else 1, sharey=True, squeeze=False)[0]
    everything = sorted(summ)    # Adam may have a longer reference budget
    steps = {n: {b: float(b) for b in everything} for n in names}
    _budget_panel(axes[0], summ, steps, "training steps (each budget with its own schedule)", names)
    axes[0].set_xticks(everything, [str(b) for b in everything])
    axes[0].minorticks_off()
    axes[0].set_ylabel("held-out test loss (nats per byte)")
    mid = budgets[len(budgets) // 2]
    iso, adam = [n for n in names if n.startswith("isoadam")][0], [n for n in names if n.startswith("adam")][0]
    factor, kind = R.step_speedup(protocol, iso, mid, baseline=adam)
    bound = {"measured": "", "at least": "≥ ", "at most": "≤ "}.get(kind, "")
    axes[0].set_title(f"in steps: Adam needs {bound}{factor:.1f}× IsoAdam's {mid}")
    if timing is not None:
        sps = R.seconds_per_step(timing, size)
        secs = {n: {b: b * sps[n] for b in everything} for n in names if n in sps}
        _budget_panel(axes[1], summ, secs, "seconds (budget × measured time per step)", list(secs))
        lo = min(v for d in secs.values() for v in d.values()) / 1.3
        hi = max(v for d in secs.values() for v in d.values()) * 1.3
        axes[1].set_xlim(lo, hi)
        plain_log_ticks(axes[1].xaxis, lo, hi)
        axes[1].set_title("in seconds on one CPU core")
    axes[0].legend(loc="upper right")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def interval_figure(summary: Mapping[str, Mapping], names, title: str) -> Figure:
    """One row per optimizer of ``names`` (best at the top): the held-out seeds as dots, the
    median's order-statistic interval (coverage at least 90 %) as a bar, the median as the optimizer's marker, its value beside it."""
    order = sorted([n for n in names if n in summary], key=lambda n: summary[n]["median"])
    fig = Figure(figsize=(style.FIG_WIDTH, 1.2 + 0.45 * len(order)))
    ax = fig.add_subplot()
    for row, name in enumerate(order):
        y, s, kw = len(order) - 1 - row, summary[name], look(name, markersize=9)
        values = np.asarray(s["values"], dtype=float)
        ax.plot(values[np.isfinite(values)], np.full(int(np.isfinite(values).sum()), y + 0.22), "o", color=kw["color"],
                markersize=3.5, alpha=0.7, linestyle="none")
        ax.plot([s["low"], s["high"]], [y, y], color=kw["color"], linewidth=3, solid_capstyle="butt")
        ax.plot([s["median"]], [y], marker=kw["marker"], color=kw["color"], markersize=9, linestyle="none",
                markerfacecolor=kw.get("markerfacecolor", kw["color"]))
        ax.annotate(f"{s['median']:.3f}", (s["high"], y), xytext=(6, 0), textcoords="offset points", va="center",
                    color=kw["color"], fontsize=style.FONT_SIZE - 1)
    ax.set_yticks(range(len(order)), [P.LABELS[n] for n in reversed(order)])
    ax.set_ylim(-0.7, len(order) - 0.4)
    ax.set_xlabel("held-out test loss (nats per byte)")
    ax.set_title(title)
    fig.tight_layout()
    return fig


def tuning_figure(protocol: Mapping, names=ORDER) -> Figure:
    """Every first-rung trial (``steps / 3``, its own schedule) as a line against the
    learning rate, the promoted trials at full length as large markers, the choice ringed;
    an optimizer with two rates drawn at the best rate for the rest at each matrix rate."""
    tuned = protocol["tuned"]
    budgets = R.budgets(protocol)
    fig = Figure(figsize=(style.FIG_WIDTH, 3.6))
    axes = fig.subplots(1, len(budgets), sharey=True, squeeze=False)[0]
    top = -math.inf
    for ax, b in zip(axes, budgets):
        for name in names:
            entry = tuned.get(f"{name}/{b}")
            if entry is None:
                continue
            kw = look(name, markers=True)
            for search in entry["searches"]:
                trials = np.asarray([t[0] for t in search["trials"]])
                first = np.asarray(search["rung1"], dtype=float)
                lrs = np.unique(trials)
                best_first = [np.min(np.where(trials == lr, first, np.inf)) for lr in lrs]
                finite = np.isfinite(best_first)
                ax.plot(lrs[finite], np.asarray(best_first)[finite], color=kw["color"], lw=1.5, alpha=0.6)
                for i, v in search["rung2"].items():
                    if math.isfinite(v):
                        ax.plot([trials[int(i)]], [v], marker=kw["marker"], color=kw["color"], markersize=7,
                                linestyle="none")
                        top = max(top, v)
            ax.plot([entry["lr"]], [entry["tuning_loss"]], marker="o", markersize=15, markerfacecolor="none",
                    markeredgecolor=kw["color"], markeredgewidth=1.8, linestyle="none")
        ax.set_xscale("log")
        ax.set_title(f"budget {b} steps")
        ax.set_xlabel("learning rate of the matrices")
    axes[0].set_ylabel("tuning loss (nats per byte)")
    bottom = min(e["tuning_loss"] for k, e in tuned.items() if k.split("/")[0] in names)
    axes[0].set_ylim(bottom - 0.1, max(top, bottom) + 0.9)
    proxies = [axes[-1].plot([], [], **look(name, markersize=7))[0] for name in names]
    axes[-1].legend(handles=proxies, loc="upper center")
    fig.tight_layout()
    return fig


def _median_curve(runs):
    steps = runs[0]["curve_step"]
    ok = [r for r in runs if not r["diverged"]]
    values = np.asarray([r["curve_loss"] for r in ok], dtype=float)
    return np.asarray(steps), np.median(values, axis=0), values.min(axis=0), values.max(axis=0)


def live_figure(protocol: Mapping, live: Mapping[str, Mapping], steps: int, yardstick: float, names=ORDER) -> Figure:
    """The live runs of the chapter (``live``: optimizer -> :func:`lm_protocol.run` result
    with a curve) drawn over the saved held-out curves at the same budget (median over the
    held-out seeds and the band from the best to the worst)."""
    fig = Figure(figsize=(style.FIG_WIDTH, 3.6))
    ax = fig.add_subplot()
    for name in names:
        key = f"{name}/{steps}"
        if key in protocol["heldout"]:
            s, med, lo, hi = _median_curve(protocol["heldout"][key]["runs"])
            kw = look(name, markers=False)
            ax.fill_between(s, lo, hi, color=kw["color"], alpha=0.15, linewidth=0)
            ax.plot(s, med, color=kw["color"], lw=1.5, alpha=0.6)
        if name in live:
            r = live[name]
            ax.plot(r["curve_step"], r["curve_loss"], **look(name, markersize=6, label=f"{P.LABELS[name]}, live"))
    ax.axhline(yardstick, color=style.ROLES["bound"], ls=":", lw=1.5, label="byte frequencies only")
    ax.set(xlabel="training step", ylabel="test loss (nats per byte)",
           title=f"budget {steps} steps: live runs (markers) over the saved held-out seeds (bands)")
    ax.legend(loc="upper right")
    fig.tight_layout()
    return fig


def timing_figure(timing: Mapping) -> Figure:
    """Per-step milliseconds at each saved size: forward + backward (solid) and the optimizer
    step (hatched) stacked, medians over the interleaved rounds; the line is the quartile
    range of the total. The second Adam is the same computation: its distance from the
    first is the noise."""
    sizes = list(timing["sizes"])
    fig = Figure(figsize=(style.FIG_WIDTH, 1.2 + 0.45 * 5 * max(1, len(sizes)) / len(sizes)))
    axes = fig.subplots(1, len(sizes), squeeze=False)[0]
    lanes = ["adam", "adam again", "soap", "isoadam", "muon"]
    for ax, size in zip(axes, sizes):
        stats = R.timing(timing, size)
        for y, lane in enumerate(reversed(lanes)):
            name = "adam" if lane == "adam again" else lane
            color = look(name)["color"]
            fb, st, total = stats[lane]["fwd_bwd"][0], stats[lane]["step"][0], stats[lane]["total"]
            ax.barh(y, fb, color=color, alpha=0.55 if lane == "adam again" else 0.85, height=0.6)
            ax.barh(y, st, left=fb, color="none", edgecolor=color, hatch="///", height=0.6)
            ax.plot([total[1], total[2]], [y, y], color=style.ROLES["bound"], lw=2)
        ax.set_yticks(range(len(lanes)), [("Adam, again" if l == "adam again" else P.LABELS[l]) for l in reversed(lanes)])
        m = timing["sizes"][size]["model"]
        ax.set_title(f"{size}: d {m['d_model']}, {m['n_layers']} layers, {timing['sizes'][size]['batch']}×{m['context']} tokens")
        ax.set_xlabel("ms per step (solid: forward + backward; hatched: step)")
    fig.tight_layout()
    return fig


#: the explorable's two protocols: every optimizer with a rate of its own for the embeddings,
#: head and gains, or (Muon apart) one rate for everything
PROTOCOLS = {"two rates": ("adam2", "soap2", "isoadam2", "muon"), "one rate": ORDER}


def replay(protocol: Optional[Mapping] = None) -> Explorable:
    """The held-out curves of every optimizer at one budget under one of :data:`PROTOCOLS`,
    replayed up to a chosen step: median over the held-out seeds with the band from the
    best to the worst, the value at the chosen step in the legend."""
    protocol = protocol if protocol is not None else R.load("transformer_chapter")
    budgets = R.budgets(protocol)
    points = len(protocol["heldout"][f"adam/{budgets[0]}"]["runs"][0]["curve_step"])
    fractions = [round((k + 1) / points, 3) for k in range(points)]
    names = {n for ns in PROTOCOLS.values() for n in ns}
    curves = {(n, b): _median_curve(protocol["heldout"][f"{n}/{b}"]["runs"]) for n in names for b in budgets
              if f"{n}/{b}" in protocol["heldout"]}

    def draw(fig, progress, budget, rates):
        k = fractions.index(progress)
        ax = fig.add_subplot()
        for name in PROTOCOLS[rates]:
            if (name, budget) not in curves:
                continue
            s, med, lo, hi = curves[name, budget]
            kw = look(name, markers=False)
            ax.fill_between(s[:k + 1], lo[:k + 1], hi[:k + 1], color=kw["color"], alpha=0.15, linewidth=0)
            ax.plot(s[:k + 1], med[:k + 1], **look(name, markersize=5, label=f"{P.LABELS[name]} {med[k]:.3f}"))
        ax.set(xlim=(0, budget * 1.03), ylim=(1.5, 3.4), xlabel="training step", ylabel="test loss (nats per byte)",
               title=f"{rates}, budget {budget} steps, at step {round(progress * budget)}")
        ax.legend(loc="upper right", title="median at this step")

    def gap(first, second):
        def measure(progress, budget, rates):
            """``first``'s median minus ``second``'s at this point, with the protocol's forms
            of both (None before a fifth of the budget: during the warm-up curves cross)."""
            if progress < 0.2:
                return None
            a, b = (next(n for n in PROTOCOLS[rates] if n.rstrip("2") == x) for x in (first, second))
            k = fractions.index(progress)
            return curves[a, budget][1][k] - curves[b, budget][1][k]
        return measure

    caption = ("Test loss (on 512 of the test windows) during training, each optimizer at its own tuned learning "
               "rates for the budget: median over five held-out seeds, band from the best seed to the worst "
               "(scripts/train_transformer.py). Switch the protocol between two rates (one for the hidden matrices, "
               "one for the rest) and one rate for everything. Move the fraction of the budget: "
               "from a fifth of the budget on, Muon's median stays below Adam's, under either protocol.")
    return Explorable(
        draw,
        [Slider("progress", fractions, label="fraction of the budget", default=fractions[-1], fmt="{:.1f}"),
         Slider("budget", budgets, label="budget (steps)", default=budgets[len(budgets) // 2]),
         Slider("rates", list(PROTOCOLS), label="learning rates", default="two rates", fmt="{}")],
        main="progress", figsize=(style.FIG_WIDTH, 3.6), caption=caption,
        promises=[Promise("from a fifth of the budget on, Muon's median stays below Adam's, under either protocol",
                          gap("muon", "adam"), always(lambda v: v is None or v < 0, "below zero"))],
    )


EXPLORABLES = (replay,)
