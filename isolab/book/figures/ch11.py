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
- :func:`v3_figure`: the protocol-3 runs (the hero): each optimizer's test loss at each
  budget on the held-out seeds and on the fresh ones.
- :func:`seconds_race`: the centerpiece, the race in seconds as IsoAdam's step time relative
  to Adam's (the main slider) moves across and beyond its measured interval.
- :func:`replay`: the earlier (protocol 2) runs replayed step by step (kept for the appendix).

Each optimizer keeps its book-wide look (:func:`isolab.book.figures.ch10.look`).
"""

from __future__ import annotations

import math
from typing import Mapping, Optional

import numpy as np
from matplotlib.figure import Figure

from isolab.book import lm_protocol as P
from isolab.book import lm_results as R
from isolab.book.explorable import Explorable, Promise, Slider, always, nondecreasing
from isolab.book.figures import style
from isolab.book.figures.ch10 import look as _look10, plain_log_ticks

__all__ = ["budget_figure", "interval_figure", "tuning_figure", "live_figure", "timing_figure", "replay",
           "v3_summaries", "v3_figure", "RATIOS", "seconds_race", "EXPLORABLES"]

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


# ------------------------------------------------------------------ protocol version 3
V3_NAMES = ("adam2", "soap2", "isoadam2", "muon")


def v3_summaries(datas: Mapping[int, Mapping], which: str = "heldout") -> dict:
    """``{budget: {optimizer: {"median", "low", "high", "values"}}}`` of one set of seeds."""
    from isolab.book.engine.intervals import median_interval

    out = {}
    for b, d in datas.items():
        out[b] = {}
        for n, x in R.v3_losses(d, which).items():
            iv = median_interval(x, 0.9)
            out[b][n] = {"median": iv.median, "low": iv.low, "high": iv.high, "values": x}
    return out


def v3_figure(datas: Mapping[int, Mapping], names=V3_NAMES) -> Figure:
    """Test loss at each budget (protocol 3): for every optimizer the held-out seeds (dots),
    their median and [min, max] (thick bar), and the fresh seeds' (thin bar, open marker)."""
    held, fresh = v3_summaries(datas, "heldout"), v3_summaries(datas, "fresh")
    budgets = sorted(datas)
    fig = Figure(figsize=(style.FIG_WIDTH, 3.9))
    ax = fig.add_subplot()
    for name in names:
        pts = [b for b in budgets if name in held[b]]
        for b in pts:
            x = b * 10 ** _OFFSET[name]
            _interval(ax, x, held[b][name], name)
            f = fresh[b][name]
            xf = x * 10 ** 0.012
            ax.plot([xf, xf], [f["low"], f["high"]], color=look(name)["color"], lw=1.3)
            ax.plot([xf], [f["median"]], marker=look(name)["marker"], color=look(name)["color"], markersize=6,
                    markerfacecolor="white", linestyle="none")
        ax.plot([b * 10 ** _OFFSET[name] for b in pts], [held[b][name]["median"] for b in pts],
                **look(name, markersize=8))
    ax.set_xscale("log")
    ax.set_xticks(budgets, [str(b) for b in budgets])
    ax.minorticks_off()
    ax.set(xlabel="training steps (each budget tuned with its own schedule)", ylabel="test loss (nats per byte)",
           title="each budget tuned under the protocol: held-out seeds (filled) and fresh seeds (open)")
    ax.legend(loc="upper right", fontsize=10)
    fig.tight_layout()
    return fig


#: IsoAdam's step time over Adam's, the centerpiece's main slider (the timing's interval is
#: [1.32, 2.24] around 1.81).
RATIOS = (1.0, 1.15, 1.32, 1.5, 1.65, 1.81, 2.0, 2.24, 2.5)


def seconds_race(datas: Optional[Mapping[int, Mapping]] = None, timing: Optional[Mapping] = None) -> Explorable:
    """The centerpiece: if IsoAdam's step costs ``r`` times Adam's, where does each budget of
    IsoAdam stand against Adam run for the same time? Left: every budget at its time, in
    Adam's steps (Muon and SOAP at their measured ratios, IsoAdam at ``r``). Right: seed by
    seed, IsoAdam's test loss minus Adam's at the same time (held-out and fresh seeds)."""
    datas = datas if datas is not None else {b: d for b in (100, 300, 900) if (d := R.load_v3(b)) is not None}
    timing = timing if timing is not None else R.load("ch11_timing")
    stats = R.timing(timing, "chapter")
    measured = {"muon": stats["muon"]["ratio"][0], "soap2": stats["soap"]["ratio"][0]}
    iso = stats["isoadam"]["ratio"]
    held = v3_summaries(datas, "heldout")
    budgets = sorted(b for b in datas if "isoadam2" in datas[b]["heldout"])
    adam_budgets = sorted(b for b in datas if "adam2" in datas[b]["heldout"])

    def gaps(r, budget):
        out = []
        for which in R.SETS:
            curve = {b: R.v3_losses(datas[b], which)["adam2"] for b in adam_budgets}
            out.append(R.v3_losses(datas[budget], which)["isoadam2"] - R.adam_at(curve, budget * r))
        return np.concatenate(out)

    def draw(fig, r):
        left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.3, 1]})
        xs = [b for b in adam_budgets]
        left.plot(xs, [held[b]["adam2"]["median"] for b in xs], **look("adam2", markersize=8))
        for b in xs:
            _interval(left, b, held[b]["adam2"], "adam2")
        for name, ratio in (("muon", measured["muon"]), ("soap2", measured["soap2"]), ("isoadam2", r)):
            pts = [b for b in budgets if name in held[b]]
            left.plot([b * ratio for b in pts], [held[b][name]["median"] for b in pts], **look(name, markersize=8))
        left.set(xscale="log", xlim=(70, 2400), ylim=(1.6, 2.6), xlabel="time, in Adam's steps",
                 ylabel="test loss (nats per byte)")
        left.set_title(f"IsoAdam's step = {r:.2f} × Adam's")
        plain_log_ticks(left.xaxis, 70, 2400)
        left.legend(loc="upper right", fontsize=10)
        for k, b in enumerate(budgets):
            g = gaps(r, b)
            ok = np.isfinite(g)
            right.plot(np.full(ok.sum(), k) + np.linspace(-0.15, 0.15, ok.sum()), g[ok], "o",
                       color=look("isoadam2")["color"], markersize=5, linestyle="none")
            if not ok.all():
                right.text(k, -0.05, "Adam's budgets\nend earlier", ha="center", fontsize=10,
                           color=style.ROLES["bound"])
        right.axhline(0, color=style.ROLES["bound"], lw=1)
        right.set(xlim=(-0.6, len(budgets) - 0.4), ylim=(-0.25, 0.25),
                  ylabel="IsoAdam − Adam at equal time")
        right.set_xticks(range(len(budgets)), [f"IsoAdam, {b}" for b in budgets])
        right.set_title(f"measured: {iso[0]:.2f} [{iso[1]:.2f}, {iso[2]:.2f}]")

    def median_gap(budget):
        return lambda r: float(np.nanmedian(gaps(r, budget))) if np.isfinite(gaps(r, budget)).any() else None

    promise = "IsoAdam's median gap to Adam at equal time rises as r grows"
    caption = ("Chapter 11's runs under the protocol, placed at the time they take if IsoAdam's step costs r times "
               "Adam's (the main slider; Muon and SOAP at their measured ratios). Left: median test loss of each "
               "budget against time in Adam's steps; right: seed by seed (held-out and fresh), IsoAdam's loss minus "
               f"Adam's after the same time (below 0: IsoAdam ahead). Move r: at every budget, {promise}.")
    return Explorable(
        draw,
        [Slider("r", RATIOS, label="IsoAdam's step / Adam's", default=RATIOS[5], fmt="{:.2f}")],
        main="r", figsize=(style.FIG_WIDTH, 3.6), static_colors=12, narrow="panels", caption=caption,
        promises=[Promise(promise, median_gap(b), nondecreasing()) for b in budgets],
    )


EXPLORABLES = (seconds_race,)
