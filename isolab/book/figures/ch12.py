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
  order-statistic interval).

The exponents that are an optimizer (0: SGD, 1/4: Shampoo in the noise regime, 1/2: Iso,
1: K-FAC) are drawn in that optimizer's book-wide colour.
"""

from __future__ import annotations

import functools

import numpy as np
import torch
from matplotlib.figure import Figure

from isolab import updates
from isolab.book.explorable import Explorable, Promise, Slider, always
from isolab.book.figures import style
from isolab.book.plotting import log_ticks
from isolab.book.seeding import generator
from isolab.book.features import covariance_sqrt
from isolab.book.tensor_iso import power_update, random_transform

__all__ = ["EXPONENTS", "HERO_EXPONENTS", "KAPPAS", "NAMES", "chapter_batch", "family_ratios", "hero", "cost",
           "exponent_family",
           "family_training", "EXPLORABLES"]

EXPONENTS = (0.0, 0.25, 0.5, 0.75, 1.0)
#: Condition numbers of the transforms: 1 to 1000, about three per decade.
KAPPAS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)
#: The hero's exponents: 0 to 1 in steps of 0.05.
HERO_EXPONENTS = tuple(round(0.05 * i, 2) for i in range(21))
NAMES = {0.0: "SGD", 0.25: "≈ Shampoo", 0.5: "Iso", 0.75: "", 1.0: "K-FAC"}
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
        ax.annotate(NAMES[p].replace("≈ ", ""), (p, max(size[i], effect[i])), xytext=(0, 8),
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
    colours = style.sequence(len(layers))
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
                color=colours[j], label=layer, zorder=2)
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
                    title=f"p = {p:g} {NAMES[p]}, κ(A) = κ(B) = {kappa}")

        for q in EXPONENTS:
            sizes = [ratios(k)[q][0].abs().max().item() for k in KAPPAS]
            effects = [ratios(k)[q][1].abs().max().item() for k in KAPPAS]
            chosen = dict(color=colour, lw=2.5, zorder=3) if q == p else dict(color=muted, lw=1.5)
            ax_spread.plot(KAPPAS, sizes, "-", **chosen)
            ax_spread.plot(KAPPAS, effects, "--", **chosen)
        ax_spread.axvline(kappa, color=style.ROLES["bound"], lw=1.0, ls=":")
        ax_spread.set_xscale("log")
        ax_spread.set(ylim=(-0.1, 4.9), yticks=[0, 2, 4], xlabel="condition number κ of the transforms",
                      ylabel="max |log10 ratio| over draws", title="solid: step size, dashed: loss decrease")
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
        caption="The exponent family Cov(X)^-p grad Cov(G)^-p under random changes of coordinates: "
                "p = 1/2 (Iso) keeps the step size, p = 1 (K-FAC) keeps the predicted loss decrease.",
    )


def _look_of(label: str) -> dict:
    """A family member's line: the optimizer's book-wide look; the grafted Shampoo dotted."""
    if label.startswith("Shampoo") and label != "Shampoo":
        return style.line("Shampoo", label=label, markers=False, linestyle=":")
    return style.line(label, markers=False)


def family_training(curves: dict, scores: dict, intervals: dict) -> Figure:
    """Left: the median batch loss over the held-out seeds (band: their middle half) against
    steps, one curve per optimizer (``curves``: label -> ``(seeds, steps+1)``). Right: each
    held-out seed's score (dots; ``scores``: label -> per-seed values, the expected loss over
    the last tenth of the run) with the median and its order-statistic interval
    (``intervals``: label -> :class:`~isolab.book.engine.intervals.Interval`), best at the top."""
    fig = Figure(figsize=(style.FIG_WIDTH, 4.2))
    fig.subplots_adjust(left=0.08, right=0.98, bottom=0.14, top=0.9, wspace=0.45)
    ax_curves, ax_final = fig.subplots(1, 2, gridspec_kw=dict(width_ratios=[1.25, 1]))
    order = sorted(curves, key=lambda k: intervals[k].median)
    for label in order:
        loss = np.asarray(curves[label], dtype=float)
        steps = np.arange(loss.shape[1])
        kw = _look_of(label)
        ax_curves.plot(steps, np.median(loss, axis=0), **kw)
        finite = np.where(np.isfinite(loss), loss, 1e300)  # a diverged seed counts as the worst
        low, high = np.quantile(finite, [0.25, 0.75], axis=0)
        ax_curves.fill_between(steps, low, np.minimum(high, 1e3), color=kw["color"], alpha=0.12, lw=0)
    ax_curves.set_yscale("log")
    ax_curves.set(xlabel="step", ylabel="batch loss (log)", ylim=(1e-4, 1e2), title="median and middle half of the seeds")
    ax_curves.legend(fontsize=10, ncol=2, loc="upper right", frameon=False, handlelength=1.8)
    for row, label in enumerate(order):
        kw = _look_of(label)
        final = np.asarray(scores[label], dtype=float)
        shown = np.where(np.isfinite(final), np.clip(final, 1e-4, 1e2), 1e2)  # diverged seeds at the right edge
        ax_final.scatter(shown, np.full(final.size, row), s=14, color=kw["color"], alpha=0.5, lw=0)
        iv = intervals[label]
        ax_final.plot([max(iv.low, 1e-4), min(iv.high, 1e2)], [row, row], color=kw["color"], lw=2.5)
        ax_final.plot([min(iv.median, 1e2)], [row], marker="o", ms=7, color=kw["color"])
    ax_final.set_xscale("log")
    coverage = 100 * next(iter(intervals.values())).coverage
    ax_final.set(xlim=(1e-4, 1.3e2), ylim=(len(order) - 0.5, -0.5), yticks=range(len(order)), yticklabels=order,
                 xlabel="expected loss, last 30 steps (log)", title=f"median, {coverage:.3g} % interval, seeds")
    return fig


EXPLORABLES = (exponent_family,)
