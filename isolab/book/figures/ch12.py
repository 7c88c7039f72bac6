r"""Figures of Chapter 12 (two-sided preconditioners).

- :func:`hero`: the chapter's opening figure: over the exponent ``p``, how far a random
  change of coordinates can move the step size and the predicted loss decrease.
- :func:`cost`: each optimizer's extra flops per step against the layer's forward and
  backward pass, for named layers.
- :func:`family_ratios`: what random changes of coordinates ``X -> XA``, ``G -> GB`` do
  to the step size and to the predicted loss decrease of every member of the exponent
  family ``U_p = Cov(X)^-p grad Cov(G)^-p`` (the computation the figure and its caption's
  promises share).
- :func:`exponent_family`: the explorable over the exponent ``p`` and the condition
  number ``κ`` of the transforms.
- :func:`family_training`: the family trained on one problem under the tuning protocol
  (median loss curves over held-out seeds, and each optimizer's score with its
  order-statistic interval, on the held-out seeds and on the fresh ones).
- :func:`schedule_end`: the centerpiece, Muon and Iso at their tuned settings as the cosine
  decay ends at a floor of the peak rate: a step of fixed length needs the decay to finish
  its run, a step whose length the data set shrinks by itself.

The exponents that are an optimizer (0: SGD, 1/4: Shampoo in the noise regime, 1/2: Iso,
1: K-FAC) are drawn in that optimizer's book-wide colour.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch
from matplotlib.figure import Figure

from isolab import updates
from isolab.book.explorable import Explorable, Promise, Slider, always, constant, nondecreasing
from isolab.book.figures import style
from isolab.book.plotting import log_ticks
from isolab.book.seeding import generator
from isolab.book.features import covariance_sqrt
from isolab.book.tensor_iso import power_update, random_transform

__all__ = ["EXPONENTS", "HERO_EXPONENTS", "KAPPAS", "NAMES", "chapter_batch", "family_ratios", "hero", "cost",
           "exponent_family", "family_training", "schedule_end", "step_lengths", "cost_table", "setting",
           "family_table", "knobs_tuned", "ratio_text", "EXPLORABLES"]

EXPONENTS = (0.0, 0.25, 0.5, 0.75, 1.0)
#: Condition numbers of the transforms: 1 to 1000, about three per decade.
KAPPAS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)
#: The hero's exponents: 0 to 1 in steps of 0.05.
HERO_EXPONENTS = tuple(round(0.05 * i, 2) for i in range(21))
NAMES = {0.0: "SGD", 0.25: "Shampoo in the noise regime", 0.5: "Iso", 0.75: "", 1.0: "K-FAC"}
_OPTIMIZER = {0.0: "SGD", 0.25: "Shampoo", 0.5: "Iso", 1.0: "K-FAC"}


def family_ratios(X, G, transform, kappa, draws=40, exponents=EXPONENTS):
    """log10 of the step-size ratio ``‖U_p(XA, GB)‖/‖U_p(X, G)‖`` and of the loss-decrease
    ratio ``⟨∇', U_p'⟩/⟨∇, U_p⟩`` for every exponent in ``exponents``, over ``draws`` shared
    transforms ``A, B = transform(n, kappa, gen, (draws,))`` (seeded: the same draws every call)."""
    n, m = X.shape[-1], G.shape[-1]
    gen = generator(11)
    A = transform(n, kappa, gen, (draws,))
    B = transform(m, kappa, gen, (draws,))
    g0, g1 = updates.weight_gradient(X, G), updates.weight_gradient(X @ A, G @ B)
    out = {}
    for p in exponents:
        U0, U1 = power_update(X, G, p), power_update(X @ A, G @ B, p)
        size = torch.linalg.matrix_norm(U1) / U0.norm()
        effect = (g1 * U1).sum((-2, -1)) / (g0 * U0).sum()
        out[p] = (size.log10(), effect.log10())
    return out


def hero(X=None, G=None, transform=random_transform, kappa=100, draws=40) -> Figure:
    """The largest ``|log10|`` of the step-size ratio (solid) and of the loss-decrease ratio
    (dashed) over ``draws`` random coordinate changes of condition number ``kappa``, against
    the exponent ``p``; the exponents that are an optimizer marked in its colour (``X``, ``G``
    default to :func:`chapter_batch`)."""
    if X is None or G is None:
        X, G = chapter_batch()
    data = family_ratios(X, G, transform, kappa, draws, HERO_EXPONENTS)
    ps = np.array(HERO_EXPONENTS)
    size = np.array([data[p][0].abs().max().item() for p in HERO_EXPONENTS])
    effect = np.array([data[p][1].abs().max().item() for p in HERO_EXPONENTS])
    fig = Figure(figsize=(style.FIG_WIDTH, 3.6))
    fig.subplots_adjust(left=0.08, right=0.98, bottom=0.16, top=0.86)
    ax = fig.subplots()
    ax.plot(ps, size, "-", color=style.ROLES["ink"], lw=2, label="step size ‖U‖")
    ax.plot(ps, effect, "--", color=style.ROLES["bound"], lw=2, label="predicted loss decrease ⟨∇, U⟩")
    for p, name in _OPTIMIZER.items():
        i = HERO_EXPONENTS.index(p)
        spec = style.look(name)
        for values in (size, effect):
            ax.plot([p], [values[i]], marker=spec.marker, ms=9, color=spec.color, ls="none", zorder=3)
        ax.annotate(NAMES[p].replace(" in the noise regime", "*"), (p, max(size[i], effect[i])), xytext=(0, 8),
                    textcoords="offset points", ha="center", color=style.text_color(spec.color), fontsize=11)
    ax.set(xlim=(-0.04, 1.04), ylim=(-0.1, 1.25 * max(size.max(), effect.max())), xticks=[0, 0.25, 0.5, 0.75, 1],
           xlabel="exponent p in Cov(X)^-p ∇ Cov(G)^-p",
           ylabel=f"max |log10 ratio|, {draws} draws",
           title=f"Coordinate changes of κ = {kappa}: p = 1/2 keeps the step size, p = 1 keeps its effect")
    ax.legend(loc="upper center", frameon=False, fontsize=10, ncol=2)
    return fig


def cost(percent: dict, title: str | None = None) -> Figure:
    """One row per optimizer: its extra flops per step in percent of the layer's forward and
    backward pass (``percent``: layer label -> {method: percent}), a marker per layer on a
    log axis (markers, not bars: a bar's length on a log axis has no meaning), joined by a
    thin line so that each row reads from its smallest layer cost to its largest."""
    layers = list(percent)
    if not layers:
        raise ValueError("cost needs at least one layer in percent, got none")
    methods = [m for m in percent[layers[0]]]
    # no optimizer's colour for a layer: black, grey and the highlight, each with its own marker
    colours = (style.ROLES["ink"], style.ROLES["bound"], style.ROLES["highlight"], style.ROLES["data"])
    markers = ("o", "s", "D", "^", "v")
    fig = Figure(figsize=(style.FIG_WIDTH, 4.8))
    fig.subplots_adjust(left=0.27, right=0.98, bottom=0.12, top=0.76 if title else 0.8)
    ax = fig.subplots()
    rows = np.arange(len(methods))
    for i, m in enumerate(methods):
        values = [percent[layer][m] for layer in layers]
        ax.plot([min(values), max(values)], [i, i], color=style.ROLES["bound"], lw=1, zorder=1)
    for j, layer in enumerate(layers):
        ax.plot([percent[layer][m] for m in methods], rows, ls="none", marker=markers[j % len(markers)], ms=8,
                color=colours[j % len(colours)], label=layer, zorder=2)
    ax.set_xscale("log")
    ax.axvline(100, color=style.ROLES["bound"], lw=1, ls=":")
    ax.set(yticks=rows, yticklabels=methods, ylim=(len(methods) - 0.5, -0.5),
           xlabel="extra flops per step, % of the layer's forward + backward (log)")
    if title:
        ax.set_title(title)
    fig.legend(*ax.get_legend_handles_labels(), loc="upper center", ncol=2, frameon=False, fontsize=10)
    return fig


def chapter_batch(seed: int = 1, b: int = 256, n: int = 16, m: int = 8):
    """The chapter's batch (section 12.1): anisotropic inputs (κ = 30) and output gradients
    with a signal, in float64."""
    gen = generator(seed)
    X = torch.randn(b, n, generator=gen, dtype=torch.float64) @ covariance_sqrt(n, 30.0)
    G = 0.5 * X @ torch.randn(n, m, generator=gen, dtype=torch.float64) / n ** 0.5 \
        + torch.randn(b, m, generator=gen, dtype=torch.float64)
    return X, G


def _colour(p):
    return style.color(_OPTIMIZER[p]) if p in _OPTIMIZER else style.ROLES["highlight"]


def exponent_family(X=None, G=None, transform=random_transform) -> Explorable:
    """The exponent family on the batch ``X, G`` (default: :func:`chapter_batch`) under random
    coordinate changes drawn by ``transform(n, kappa, gen, batch)`` (invertible, condition
    number ``kappa``)."""
    if (X is None) != (G is None):
        raise ValueError("pass both X and G, or neither (the chapter's batch)")
    if X is None:
        X, G = chapter_batch()
    ratios = functools.lru_cache(maxsize=None)(lambda kappa: family_ratios(X, G, transform, kappa))
    muted = style.ROLES["muted"]

    def draw_family(fig, p, kappa):
        fig.subplots_adjust(left=0.08, right=0.98, bottom=0.16, top=0.88, wspace=0.3)
        ax_dots, ax_spread = fig.subplots(1, 2)
        data = ratios(kappa)
        others = [q for q in EXPONENTS if q != p]
        colour = _colour(p)
        ax_dots.scatter(torch.cat([data[q][0] for q in others]), torch.cat([data[q][1] for q in others]), s=10, color=muted)
        ax_dots.scatter(*data[p], s=18, color=colour, zorder=3)
        ax_dots.axhline(0, color=style.ROLES["bound"], lw=1.0)
        ax_dots.axvline(0, color=style.ROLES["bound"], lw=1.0)
        ax_dots.set(xlim=(-0.4, 4.9), ylim=(-0.4, 4.9), xticks=[0, 2, 4], yticks=[0, 2, 4],
                    xlabel="log10 step-size ratio ‖U'‖/‖U‖", ylabel="log10 loss-decrease ratio",
                    title=f"p = {p:g} {NAMES[p].replace(' in the noise regime', '*')}, κ = {kappa}")

        for q in EXPONENTS:
            sizes = [ratios(k)[q][0].abs().max().item() for k in KAPPAS]
            effects = [ratios(k)[q][1].abs().max().item() for k in KAPPAS]
            chosen = dict(color=colour, lw=2.5, zorder=3) if q == p else dict(color=muted, lw=1.5)
            ax_spread.plot(KAPPAS, sizes, "-", **chosen)
            ax_spread.plot(KAPPAS, effects, "--", **chosen)
        ax_spread.axvline(kappa, color=style.ROLES["bound"], lw=1.0, ls=":")
        ax_spread.set_xscale("log")
        ax_spread.set(ylim=(-0.1, 4.9), yticks=[0, 2, 4], xlabel="condition number κ of the transforms",
                      ylabel="max |log10 ratio| over draws", title="the largest ratio")
        ax_spread.plot([], [], "-", color=style.ROLES["ink"], label="step size")
        ax_spread.plot([], [], "--", color=style.ROLES["ink"], label="loss decrease")
        ax_spread.legend(loc="upper left", fontsize=style.FONT_SIZE - 1, frameon=False)
        log_ticks(ax_spread.xaxis, [0, 1, 2, 3])

    def strays(p_fixed, which):
        # the figure's own numbers: how far the ratio of exponent p_fixed strays from 1 at κ
        return lambda p, kappa: ratios(kappa)[p_fixed][which].abs().max().item()

    tiny = always(lambda v: v < 1e-9, "|log10 ratio| < 1e-9 for every draw")
    return Explorable(
        draw_family,
        [Slider("p", EXPONENTS, label="exponent p", default=0.5),
         Slider("kappa", KAPPAS, label="κ of A, B", default=100)],
        main="kappa",
        promises=[Promise("p = 1/2 (Iso) keeps the step size", strays(0.5, 0), tiny),
                  Promise("p = 1 (K-FAC) keeps the predicted loss decrease", strays(1.0, 1), tiny)],
        figsize=(style.FIG_WIDTH, 3.6),
        static_colors=48,
        narrow="panels",
        caption="The exponent family Cov(X)^-p grad Cov(G)^-p under random changes of coordinates of condition "
                "number κ (the main slider): p = 1/2 (Iso) keeps the step size, p = 1 (K-FAC) keeps the predicted "
                "loss decrease, at every κ; * p = 1/4 is Shampoo only in the noise regime of §12.4.",
    )


def _look_of(label: str) -> dict:
    """A family member's line: the optimizer's book-wide look; the grafted Shampoo dotted."""
    if label.startswith("Shampoo") and label != "Shampoo":
        return style.line("Shampoo", label=label, markers=False, linestyle=":")
    return style.line(label, markers=False)


def family_training(curves: dict, sets: list, intervals: list) -> Figure:
    """Left: the median batch loss over the held-out seeds (band: their middle half) against
    steps (``curves``: label -> ``(seeds, steps+1)``). Right: each held-out seed's score (dots;
    ``sets[0]``: label -> per-seed values) with the median and its order-statistic interval
    (``intervals[0]``: label -> Interval), best at the top; below it the fresh seeds' interval
    (``intervals[1]``) as a thin bar and an open marker."""
    fig = Figure(figsize=(style.FIG_WIDTH, 4.2))
    fig.subplots_adjust(left=0.08, right=0.98, bottom=0.14, top=0.9, wspace=0.55)
    ax_curves, ax_final = fig.subplots(1, 2, gridspec_kw=dict(width_ratios=[1.25, 1]))
    held = intervals[0]
    order = sorted(curves, key=lambda k: held[k].median)
    for label in order:
        loss = np.asarray(curves[label], dtype=float)
        steps = np.arange(loss.shape[1])
        kw = _look_of(label)
        ax_curves.plot(steps, np.median(loss, axis=0), **kw)
        finite = np.where(np.isfinite(loss), loss, 1e300)  # a diverged seed counts as the worst
        low, high = np.quantile(finite, [0.25, 0.75], axis=0)
        ax_curves.fill_between(steps, low, np.minimum(high, 1e3), color=kw["color"], alpha=0.12, lw=0)
    ax_curves.set_yscale("log")
    ax_curves.set(xlabel="step", ylabel="batch loss (log)", ylim=(1e-5, 1e2), title="median and middle half of the seeds")
    ax_curves.legend(fontsize=10, ncol=2, loc="upper right", frameon=False, handlelength=1.8)
    lo_x, hi_x = 1e-5, 1e2
    for row, label in enumerate(order):
        kw = _look_of(label)
        final = np.asarray(sets[0][label], dtype=float)
        shown = np.where(np.isfinite(final), np.clip(final, lo_x, hi_x), hi_x)  # diverged seeds at the right edge
        ax_final.scatter(shown, np.full(final.size, row - 0.2), s=12, color=kw["color"], alpha=0.5, lw=0)
        for k, ivs in enumerate(intervals):
            iv = ivs[label]
            y = row + 0.2 * k
            ax_final.plot([max(iv.low, lo_x), min(iv.high, hi_x)], [y, y], color=kw["color"], lw=2.5 if k == 0 else 1.3)
            ax_final.plot([min(iv.median, hi_x)], [y], marker="o", ms=7 if k == 0 else 6, color=kw["color"],
                          markerfacecolor=kw["color"] if k == 0 else "white")
    ax_final.set_xscale("log")
    coverage = 100 * next(iter(held.values())).coverage
    ax_final.set(xlim=(lo_x, 1.3 * hi_x), ylim=(len(order) - 0.5, -0.5), yticks=range(len(order)), yticklabels=order,
                 xlabel="expected loss, last 30 steps (log)",
                 title=f"medians, {coverage:.3g} % intervals")
    return fig


def step_lengths(schedule: dict, label: str) -> np.ndarray:
    """``(floors, steps)``: each update's length over the rate times the schedule's factor,
    the median over the held-out seeds (from :func:`isolab.book.family.schedule_runs`)."""
    return np.asarray(schedule[label]["direction"], dtype=float)


def schedule_end(data: dict | None = None, floors=None) -> Explorable:
    """The centerpiece: Muon and Iso at their tuned settings on the held-out seeds, the cosine
    decay ending at a floor of the peak rate (the main slider). Left: the median exact loss
    against the step; right: the median length of each update, ``‖ΔW‖_F`` over all layers."""
    from isolab.book.family import FLOORS, load
    from isolab.book.figures.saved import saved_result

    data = load(saved_result("ch12_family.npz")) if data is None else data
    floors = list(FLOORS if floors is None else floors)
    sched = data["schedule"]
    names = ("Muon", "Iso")
    finals = {n: np.median(np.asarray(sched[n]["final"], dtype=float), axis=1) for n in names}

    def draw_schedule(fig, floor):
        i = floors.index(floor)
        ax_loss, ax_step = fig.subplots(1, 2)
        for n in names:
            kw = style.line(n, markers=False)
            loss = np.asarray(sched[n]["loss"][i], dtype=float)
            ax_loss.plot(np.arange(loss.size), loss, **kw)
            step = np.asarray(sched[n]["step"][i], dtype=float)
            ax_step.plot(np.arange(1, step.size + 1), step, **kw)
        ax_loss.set(yscale="log", ylim=(1e-5, 1e2), xlim=(0, 300), xlabel="step", ylabel="expected loss (median)")
        ax_loss.set_title(f"end: Muon {finals['Muon'][i]:.2g}, Iso {finals['Iso'][i]:.2g}")
        log_ticks(ax_loss.yaxis, [-4, -2, 0, 2])
        ax_loss.legend(loc="upper right", frameon=False)
        ax_step.set(yscale="log", ylim=(1e-5, 1e1), xlim=(0, 300), xlabel="step", ylabel="length of the update ‖ΔW‖")
        ax_step.set_title(f"rate at the end: {floor:g} × peak")
        log_ticks(ax_step.yaxis, [-4, -2, 0])

    def final(n):
        return lambda floor: math.log10(finals[n][floors.index(floor)])

    def steady(n, lo=30):
        def measure(floor):
            d = step_lengths(sched, n)[floors.index(floor), lo:]
            return float(d.max() / np.median(d) - 1)
        return measure

    caption = ("Muon and Iso at the settings their tuning chose (Chapter 12's problem, 20 held-out seeds), as the "
               "cosine decay of the learning rate ends at a floor of its peak instead of at zero. Move the floor: "
               "Muon's final loss rises at every step of the slider, by more than a thousand times in all, while "
               "Iso's final loss stays within a factor of 20; Muon's update length, over the rate, stays within "
               "10 % of its median after step 30, whatever the floor.")
    return Explorable(
        draw_schedule,
        [Slider("floor", floors, label="decay ends at", default=0.0, fmt="{:g}")],
        main="floor",
        figsize=(style.FIG_WIDTH, 3.4),
        static_colors=12,
        narrow="panels",
        caption=caption,
        promises=[Promise("Muon's final loss rises at every step of the slider", final("Muon"), nondecreasing()),
                  Promise("Iso's final loss stays within a factor of 20", final("Iso"), constant(atol=math.log10(20))),
                  Promise("Muon's update length, over the rate, stays within 10 % of its median after step 30",
                          steady("Muon"), always(lambda v: v < 0.10, "max / median - 1 < 0.10"))],
    )


EXPLORABLES = (schedule_end, exponent_family)


# ------------------------------------------------------------------ the chapter's tables
def cost_table(cost: dict) -> str:
    """``cost`` (layer -> {row: percent}) as the panel's table."""
    layers = list(cost)
    rows = list(cost[layers[0]])
    head = f"{'extra flops, % of pass':22s}" + "".join(f"{lay:>17s}" for lay in layers)
    return "\n".join([head] + [f"{row:22s}" + "".join(f"{cost[lay][row]:16.2f}%" for lay in layers)
                               for row in rows])


def setting(tuned: dict, name: str) -> str:
    """``"lr 0.045, β₁ 0, damping 0.01"``: the rate and the knobs the protocol tuned."""
    from isolab.book.engine.tuning import TUNED_KNOBS

    h, (mom, damp) = tuned["hyper"], TUNED_KNOBS[name]
    text = f"lr {tuned['lr']:.2g}, " + (f"β₁ {h['betas'][0]:g}" if mom == "beta1" else f"momentum {h['momentum']:g}")
    return text + (f", {'ε' if damp == 'eps' else 'damping'} {h[damp]:g}" if damp else "")


def family_table(runs: dict, intervals: list, order: list) -> str:
    """Each member's choice, the median [interval] of each set of seeds and its divergences."""
    from isolab.book.family import FAMILY

    def iv(x):
        return f"{x.median:.2g} [{x.low:.2g}, {x.high:.2g}]"

    lines = ["chosen setting; held-out seeds | fresh seeds: median [95.9 % interval]; diverged"]
    for k in order:
        div = f"{runs[k]['heldout']['diverged']}, {runs[k]['fresh']['diverged']}"
        lines += [f"{k:17s} {setting(runs[k]['tuned'], FAMILY[k])}",
                  f"{'':17s} {iv(intervals[0][k])} | {iv(intervals[1][k])}; {div}"]
    return "\n".join(lines)


def knobs_tuned(tuned: dict, name: str) -> list:
    """The knob settings the trials of ``tuned`` ran (the protocol's knobs of ``name``)."""
    from isolab.book.engine.tuning import TUNED_KNOBS

    mom, damp = TUNED_KNOBS[name]
    keys = ["betas" if mom == "beta1" else "momentum"] + ([damp] if damp else [])
    combos = {tuple((k, tuple(x["hyper"][k]) if k == "betas" else x["hyper"][k]) for k in keys)
              for x in tuned["trials"]}
    return [dict(c) for c in sorted(combos)]


def ratio_text(iv) -> str:
    """A paired interval of log ratios as ``"×0.12 [0.01, 0.2]"``."""
    return f"×{math.exp(iv.median):.2g} [{math.exp(iv.low):.2g}, {math.exp(iv.high):.2g}]"
