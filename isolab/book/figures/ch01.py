r"""Figures and explorables of Chapter 1, *Steepest descent depends on where you stand*.

Each function builds and returns a :class:`matplotlib.figure.Figure` (or, for the
explorable, an :class:`isolab.book.explorable.Explorable`); the chapter's page calls it in one
line. The computations a figure shares with the chapter's checks and with its caption's
promises live here once:

- :func:`hero`: two samples in two dimensions; the steepest moves :math:`-\eta g_i` of
  their features and the moves :math:`\Delta y_i` a gradient step actually makes, through
  the Gram matrix :math:`XX^\top` (orthonormal inputs against inputs at an angle).
- :func:`mean_alignment`, :func:`alignment_table`, :func:`alignment_figure`: the mean
  cosine :math:`\cos(\Delta Y, -G)` for random Gaussian inputs, over condition numbers and
  batch-to-width ratios.
- :func:`bias_alignment`, :func:`bias_figure`: what a bias term costs as the inputs'
  squared norm :math:`\|x\|^2` approaches 1.
- :func:`gram_alignment_state`, :func:`gram_alignment`: the explorable of section 1.8 and
  the one computation its figure and its promises share; ``EXPLORABLES`` lists it for
  ``tests/test_captions.py``.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import NamedTuple, Sequence

import matplotlib
import numpy as np
import torch
from matplotlib.figure import Figure

from isolab.book import feature_step, features
from isolab.book.explorable import Explorable, Promise, Slider, always, constant
from isolab.book.figures import style
from isolab.book.seeding import generator

__all__ = [
    "hero", "mean_alignment", "alignment", "alignment_table", "format_table", "alignment_figure",
    "bias_alignment", "bias_figure", "GramAlignment", "gram_alignment_state", "gram_alignment",
    "below", "EXPLORABLES", "SHAPES", "KAPPAS",
]

_SUB = "₁₂"

#: The (batch, width) pairs of the chapter's table, ordered by b / d_in.
SHAPES = ((8, 512), (32, 512), (32, 128), (32, 32), (128, 32), (512, 32))
#: The condition numbers of the chapter's table and curves.
KAPPAS = (1, 10, 100, 1000)


def below(value: float, tol: float) -> str:
    """``"< tol"`` when ``value`` is below ``tol``, else the value: a rounding-level
    difference printed the same on every CPU."""
    return f"< {tol:.0e}" if value < tol else f"{value:.1e}"


# ----------------------------------------------------------------------------- hero
def _arrow(ax, start, vec, color, *, lw=2.2, ls="-", z=3, head=0.5) -> None:
    ax.annotate("", xy=(start[0] + vec[0], start[1] + vec[1]), xytext=tuple(start),
                arrowprops=dict(arrowstyle=f"-|>,head_length={head},head_width={head / 2}", color=color,
                                lw=lw, linestyle=ls, shrinkA=0, shrinkB=0), zorder=z)


def _entry(v: float) -> str:
    return "0" if abs(v) < 5e-3 else "1" if abs(v - 1) < 5e-3 else f"{v:.2f}"


def hero(angle: float = 45.0, lr: float = 0.8) -> Figure:
    r"""Two samples, two input dimensions, two output features.

    The upstream gradients are :math:`g_1 = e_1`, :math:`g_2 = e_2`, so the steepest
    move of each sample's features is :math:`-\eta g_i`. A gradient step moves them by
    :math:`\Delta y_i = -\eta \sum_j \langle x_i, x_j\rangle g_j`: for orthonormal inputs
    exactly :math:`-\eta g_i`; for unit inputs ``angle`` degrees apart, each move picks up
    the leak :math:`-\eta\langle x_1, x_2\rangle g_j` of the other sample's correction.
    """
    t = math.radians(angle)
    X_orth = torch.eye(2, dtype=torch.float64)
    X_tilt = torch.tensor([[1.0, 0.0], [math.cos(t), math.sin(t)]], dtype=torch.float64)
    G = torch.eye(2, dtype=torch.float64)
    Y = torch.tensor([[1.7, 1.0], [0.4, 1.8]], dtype=torch.float64)   # where the two samples' features sit

    fig = Figure(figsize=(style.FIG_WIDTH, 3.4))
    fig.subplots_adjust(left=0.01, right=0.99, bottom=0.03, top=0.84, wspace=0.08)
    ax_in, *ax_out = fig.subplots(1, 3)
    for x in X_orth:
        _arrow(ax_in, (0, 0), x.tolist(), style.ROLES["muted"], lw=1.8)
    ax_in.text(0.0, 1.06, "e₂", color=style.ROLES["bound"], ha="center", va="bottom")
    for i, x in enumerate(X_tilt):
        _arrow(ax_in, (0, 0), x.tolist(), style.ROLES["data"])
        ax_in.text(*(1.13 * x).tolist(), f"x{_SUB[i]}", color=style.ROLES["data"], ha="center", va="center")
    ax_in.set(xlim=(-0.15, 1.3), ylim=(-0.15, 1.3), aspect="equal")
    ax_in.set_axis_off()
    ax_in.set_title(f"two unit inputs, {angle:g}° apart\n⟨x₁, x₂⟩ = {math.cos(t):.2f}  (grey: orthonormal)",
                    loc="left", fontsize=style.FONT_SIZE)

    for ax, X, name in ((ax_out[0], X_orth, "orthonormal inputs"), (ax_out[1], X_tilt, f"inputs {angle:g}° apart")):
        K = feature_step.gram(X)
        dY = feature_step.feature_change(X, G, lr)
        cos = feature_step.feature_alignment(X, G).item()
        for i in range(2):
            j = 1 - i
            _arrow(ax, Y[i].tolist(), dY[i].tolist(), style.ROLES["highlight"], lw=3.2, z=2)
            if abs(K[i, j].item()) > 1e-12:
                own_tip = Y[i] - lr * K[i, i] * G[i]
                _arrow(ax, own_tip.tolist(), (-lr * K[i, j] * G[j]).tolist(), style.ROLES["bound"],
                       lw=1.6, ls=":", head=0.35)
            _arrow(ax, Y[i].tolist(), (-lr * G[i]).tolist(), style.ROLES["target"], lw=1.6, ls="--", z=4, head=0.4)
            ax.plot(*Y[i].tolist(), "o", color=style.ROLES["data"], ms=7, zorder=5)
            ax.text(Y[i, 0] + 0.07, Y[i, 1] + 0.07, f"y{_SUB[i]}")
        ax.text(0.02, 0.02, f"cos(ΔY, −G)\n= {cos:.2f}", transform=ax.transAxes, ha="left", va="bottom",
                color=style.text_color(style.ROLES["highlight"]), fontweight="bold", fontsize=style.FONT_SIZE + 1)
        ax.set(xlim=(-0.3, 1.9), ylim=(-0.1, 2.1), aspect="equal")
        ax.set_axis_off()
        ax.set_title(f"{name}\nXXᵀ = [{_entry(K[0, 0])}  {_entry(K[0, 1])};  {_entry(K[1, 0])}  {_entry(K[1, 1])}]",
                     loc="left", fontsize=style.FONT_SIZE)
    small = style.FONT_SIZE - 1
    ax_out[0].text(1.3, 1.07, "Δy₁ = −ηg₁", color=style.ROLES["target"], ha="center", va="bottom", fontsize=small)
    ax_out[0].text(0.47, 1.4, "Δy₂ = −ηg₂", color=style.ROLES["target"], ha="left", va="center", fontsize=small)
    ax_out[1].text(1.3, 1.07, "steepest −ηg₁", color=style.ROLES["target"], ha="center", va="bottom", fontsize=small)
    ax_out[1].text(0.84, 0.72, "leak\n−η⟨x₁,x₂⟩g₂", color=style.ROLES["bound"], ha="right", va="center", fontsize=small)
    ax_out[1].text(1.35, 0.62, "step Δy₁", color=style.text_color(style.ROLES["highlight"]), ha="left", va="top", fontsize=small)
    return fig


# ------------------------------------------------------------ random Gaussian inputs
def mean_alignment(b: int, d_in: int, kappa: float, angle: float = 0.0, mean: float = 0.0, bias: bool = False,
                   draws: int = 50, seed: int = 4, d_out: int = 5) -> float:
    r"""Mean of :math:`\cos(\Delta Y, -G)` over ``draws`` batches :math:`X \sim \mathcal N(\mu, \Sigma)`
    (``features.gaussian_features`` plus a constant offset ``mean``) with a Gaussian
    upstream gradient :math:`G` unrelated to :math:`X`."""
    gen = generator(seed)
    X = features.gaussian_features(b, d_in, kappa, angle, generator=gen, sample_shape=(draws,)) + mean
    G = torch.randn(draws, b, d_out, generator=gen, dtype=torch.float64)
    return alignment(X, G, bias=bias).mean().item()


def alignment(X: torch.Tensor, G: torch.Tensor, *, bias: bool = False) -> torch.Tensor:
    r""":func:`isolab.book.feature_step.feature_alignment`, computed as :math:`X(X^\top G)`
    (plus :math:`\mathbf 1(\mathbf 1^\top G)` with a bias) instead of through the
    :math:`b \times b` Gram matrix: the same cosine, in :math:`O(b\,d_{in} d_{out})` rather
    than :math:`O(b^2 d_{in})` operations, which matters for the large batches of the curves."""
    move = X @ (X.mT @ G)
    if bias:
        move = move + G.sum(dim=-2, keepdim=True)
    return feature_step.cosine_similarity(move, G)


def alignment_table(kappas: Sequence[float] = KAPPAS, shapes: Sequence[tuple[int, int]] = SHAPES,
                    draws: int = 50) -> np.ndarray:
    """:func:`mean_alignment` for every condition number (rows) and (b, d_in) (columns)."""
    return np.array([[mean_alignment(b, d, k, draws=draws) for b, d in shapes] for k in kappas])


def format_table(table: np.ndarray, kappas: Sequence[float] = KAPPAS, shapes: Sequence[tuple[int, int]] = SHAPES) -> str:
    """The table as text, three decimals (the figure shows the same numbers)."""
    lines = ["mean cos(dY, -G)  " + "".join(f"{f'{b}/{d}':>9s}" for b, d in shapes) + "   (b/d_in)"]
    lines += [f"kappa = {k:<9g}" + "".join(f"{v:9.3f}" for v in row) for k, row in zip(kappas, table)]
    return "\n".join(lines)


def _spread(labels, gap):
    """``(y, text, colour)`` labels with their ``y`` pushed apart to at least ``gap``,
    keeping their order and their mean."""
    labels = sorted(labels, key=lambda item: item[0])
    ys = [y for y, *_ in labels]
    for i in range(1, len(ys)):
        ys[i] = max(ys[i], ys[i - 1] + gap)
    shift = (sum(y for y, *_ in labels) - sum(ys)) / len(ys)
    return [(y + shift, *rest) for y, (_, *rest) in zip(ys, labels)]


def alignment_figure(table: np.ndarray | None = None, *, d_in: int = 64, draws: int = 20,
                     kappas: Sequence[float] = KAPPAS, shapes: Sequence[tuple[int, int]] = SHAPES) -> Figure:
    r"""Left: the table as a heatmap (rows κ, columns (b, d_in) ordered by b/d_in).
    Right: the mean cosine against :math:`b/d_{in}` at a fixed width, one curve per κ,
    with the rank bound :math:`\sqrt{d_{in}/b}` for :math:`b > d_{in}`."""
    if table is None:
        table = alignment_table(kappas, shapes)
    fig = Figure(figsize=(style.FIG_WIDTH, 3.9))
    ax_map, ax_curve = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.15, 1]})

    image = ax_map.imshow(table, cmap="cividis", vmin=0, vmax=1, aspect="auto")
    for (r, c), v in np.ndenumerate(table):
        ax_map.text(c, r, f"{v:.2f}", ha="center", va="center", fontsize=style.FONT_SIZE - 1,
                    color=style.ROLES["target"] if v > 0.55 else style.ROLES["muted"])
    ax_map.set_xticks(range(len(shapes)), [f"{b}/{d}" for b, d in shapes])
    ax_map.set_yticks(range(len(kappas)), [f"{k:g}" for k in kappas])
    ax_map.set(xlabel="batch / width, b / d_in", ylabel="condition number κ")
    ax_map.set_title("mean cos(ΔY, −G) by shape and κ", loc="left")
    ax_map.tick_params(axis="x", labelrotation=30)
    style.colorbar(fig, image, ax_map, "cos(ΔY, −G)")

    ratios = [2.0 ** k for k in range(-6, 5)]
    ends = []
    for kappa, colour in zip(kappas, style.sequence(len(kappas))):
        cos = [mean_alignment(max(1, round(r * d_in)), d_in, kappa, draws=draws) for r in ratios]
        ax_curve.plot(ratios, cos, "o-", color=colour, markersize=5)
        ends.append((cos[-1], f"κ = {kappa:g}", colour))
    for y, text, colour in _spread(ends, gap=0.06):        # direct labels, pushed apart where the curves meet
        ax_curve.annotate(text, (ratios[-1], y), xytext=(6, 0), textcoords="offset points", va="center",
                          color=style.text_color(colour), fontsize=style.FONT_SIZE - 1)
    past = [r for r in ratios if r >= 1]
    ax_curve.plot(past, [1 / math.sqrt(r) for r in past], "--", color=style.ROLES["bound"], lw=1.6)
    ax_curve.text(past[1], 1 / math.sqrt(past[1]) + 0.08, "rank bound √(d_in/b)", color=style.ROLES["bound"],
                  fontsize=style.FONT_SIZE - 1)
    ax_curve.axvline(1.0, color=style.ROLES["muted"], lw=1, zorder=0)
    ax_curve.set_xscale("log", base=2)
    ax_curve.set_xticks([2.0 ** k for k in range(-6, 5, 2)], [f"1/{2 ** -k}" if k < 0 else f"{2 ** k}" for k in range(-6, 5, 2)])
    ax_curve.minorticks_off()
    ax_curve.set(xlabel=f"b / d_in   (d_in = {d_in})", ylabel="mean cos(ΔY, −G)", ylim=(0, 1.02),
                 xlim=(ratios[0] / 1.3, ratios[-1] * 3.2))
    ax_curve.set_title("the ratio b / d_in sets it; κ lowers it", loc="left")
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- bias
def bias_alignment(sq_norms: Sequence[float], b: int = 32, d_in: int = 128, draws: int = 100,
                   seed: int = 7, d_out: int = 5) -> tuple[np.ndarray, np.ndarray]:
    r"""Mean :math:`\cos(\Delta Y, -G)` without and with a bias, for isotropic inputs
    rescaled so that :math:`\mathbb E\|x\|^2` equals each of ``sq_norms``
    (:math:`X \cdot \sqrt{s/d_{in}}`; the same draws at every scale)."""
    gen = generator(seed)
    X = features.gaussian_features(b, d_in, generator=gen, sample_shape=(draws,))
    G = torch.randn(draws, b, d_out, generator=gen, dtype=torch.float64)
    plain, biased = [], []
    for s in sq_norms:
        Xs = X * math.sqrt(s / d_in)
        plain.append(alignment(Xs, G).mean().item())
        biased.append(alignment(Xs, G, bias=True).mean().item())
    return np.array(plain), np.array(biased)


def bias_figure(b: int = 32, d_in: int = 128) -> Figure:
    r"""The cosine with and without a bias against :math:`\|x\|^2` (log axis), with
    :math:`\|x\|^2 = \sqrt b`, where the bias's common move is as large as the samples' own."""
    sq = np.geomspace(0.1, 1000, 21)
    plain, biased = bias_alignment(sq, b, d_in)
    fig = Figure(figsize=(style.FIG_WIDTH * 0.72, 3.4))
    ax = fig.add_subplot()
    ax.plot(sq, plain, color=style.ROLES["target"], ls="--", lw=1.8)
    ax.plot(sq, biased, color=style.ROLES["highlight"], marker="o", markersize=4)
    style.label_end(ax, sq, plain, "no bias", color=style.ROLES["target"], dy=8)
    style.label_end(ax, sq, biased, "with bias", color=style.ROLES["highlight"], dy=-8)
    ax.axvline(math.sqrt(b), color=style.ROLES["muted"], lw=1.2, zorder=0)
    ax.text(math.sqrt(b) * 1.1, 0.08, f"‖x‖² = √b ≈ {math.sqrt(b):.1f}", color=style.ROLES["bound"],
            fontsize=style.FONT_SIZE - 1)
    unit_plain, unit_biased = bias_alignment([1.0], b, d_in)
    ax.plot([1.0], unit_biased, "o", color=style.ROLES["highlight"], markersize=9, zorder=5)
    ax.annotate(f"‖x‖² = 1: {unit_plain[0]:.3f} → {unit_biased[0]:.3f}", (1.0, unit_biased[0]), xytext=(12, -4),
                textcoords="offset points", va="top", fontsize=style.FONT_SIZE - 1)
    ax.set_xscale("log")
    ax.set_xticks([0.1, 1, 10, 100, 1000], ["0.1", "1", "10", "100", "1000"])
    ax.minorticks_off()
    ax.set(xlabel=f"mean squared input norm ‖x‖²   (b = {b}, d_in = {d_in})", ylabel="mean cos(ΔY, −G)",
           ylim=(0, 1.02), xlim=(0.08, 4000))
    ax.set_title("a bias costs alignment unless ‖x‖² ≫ √b", loc="left")
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------- explorable
EXPLORABLE_D_OUT = 8
#: Eleven colour levels for the Gram matrix: its message is the sign and rough size of
#: each entry, and few levels keep the website's frames small.
_GRAM_CMAP = matplotlib.colormaps["RdBu_r"].resampled(9)
EXPLORABLE_D_IN = 32
_SHOWN = 256             # entries of ΔY and −G drawn in the right panel


class GramAlignment(NamedTuple):
    """What the explorable draws at one setting (and what its promises measure)."""

    X: torch.Tensor
    G: torch.Tensor
    dY: torch.Tensor
    cos: float
    reach: float          # ||P_X G|| / ||G||: the share of -G any weight step can reach


@lru_cache(maxsize=512)
def gram_alignment_state(angle: float, kappa: float, batch: int, d_in: int = EXPLORABLE_D_IN) -> GramAlignment:
    r"""The explorable's one computation: a batch from ``features.gaussian_features``
    (seed 8, rotation ``angle`` in degrees), a Gaussian upstream gradient, the feature
    move :math:`\Delta Y = -XX^\top G` and its cosine with :math:`-G`, and the reachable
    share :math:`\|P_X G\|_F/\|G\|_F` (1 when :math:`b \le d_{in}` and :math:`X` has full rank)."""
    gen = generator(8)
    X = features.gaussian_features(batch, d_in, kappa, math.radians(angle), generator=gen)
    G = torch.randn(batch, EXPLORABLE_D_OUT, generator=gen, dtype=torch.float64)
    dY = feature_step.feature_change(X, G, lr=1.0)
    cos = feature_step.feature_alignment(X, G).item()
    Q, _ = torch.linalg.qr(X)                      # orthonormal basis of col(X)
    reach = (torch.linalg.matrix_norm(Q @ (Q.T @ G)) / torch.linalg.matrix_norm(G)).item()
    return GramAlignment(X, G, dY, cos, reach)


def _draw_gram_alignment(fig, angle, kappa, batch):
    d_in = EXPLORABLE_D_IN
    s = gram_alignment_state(angle, kappa, batch)
    ax_cloud, ax_gram, ax_align = fig.subplots(1, 3, gridspec_kw={"width_ratios": [1, 1.1, 1]})
    # plain-text labels and few ticks: text layout is most of a redraw's cost

    x1, xd = s.X[:, 0].numpy(), s.X[:, -1].numpy()
    ax_cloud.scatter(x1, xd, s=9, color=style.ROLES["data"])
    lam = features.spectrum(d_in, kappa)
    phi = np.linspace(0, 2 * np.pi, 73)
    t = math.radians(angle)
    rot = np.array([[math.cos(t), -math.sin(t)], [math.sin(t), math.cos(t)]])
    ellipse = rot @ (2 * np.stack([math.sqrt(lam[0]) * np.cos(phi), math.sqrt(lam[-1]) * np.sin(phi)]))
    ax_cloud.plot(ellipse[0], ellipse[1], color=style.ROLES["bound"], lw=1.5)
    var1 = (lam[0] * math.cos(t) ** 2 + lam[-1] * math.sin(t) ** 2).item()
    ax_cloud.set(xlim=(-6, 6), ylim=(-6, 6), aspect="equal", xticks=[-4, 0, 4], yticks=[-4, 0, 4],
                 xlabel="coordinate 1", ylabel=f"coordinate {d_in}")
    ax_cloud.set_title(f"inputs turned by θ = {angle:g}°\nvariance of coordinate 1: {var1:.2f}", loc="left",
                       fontsize=style.FONT_SIZE)

    image = ax_gram.imshow(feature_step.gram(s.X).numpy() / d_in, cmap=_GRAM_CMAP, vmin=-1.1, vmax=1.1,
                           interpolation="nearest")
    ax_gram.set(xticks=[0, batch - 1], yticks=[0, batch - 1], xticklabels=["1", str(batch)],
                yticklabels=["1", str(batch)], xlabel="sample j", ylabel="sample i")
    rank = "" if batch <= d_in else f", rank ≤ {d_in}"
    ax_gram.set_title(f"Gram matrix XXᵀ / d_in\nb = {batch}, d_in = {d_in}{rank}", loc="left", fontsize=style.FONT_SIZE)
    bar = fig.colorbar(image, ax=ax_gram, fraction=0.046, pad=0.04, ticks=[-1, 0, 1])   # the title names it
    bar.outline.set_linewidth(0.5)

    target = (-s.G / torch.linalg.matrix_norm(s.G)).flatten()[:_SHOWN].numpy()
    move = (s.dY / torch.linalg.matrix_norm(s.dY)).flatten()[:_SHOWN].numpy()
    lim = 1.1 * max(np.abs(target).max(), np.abs(move).max())
    ax_align.plot([-lim, lim], [-lim, lim], color=style.ROLES["bound"], lw=1)
    ax_align.scatter(target, move, s=6, color=style.ROLES["highlight"])
    ax_align.set(xlim=(-lim, lim), ylim=(-lim, lim), aspect="equal", xticks=[], yticks=[],
                 xlabel="steepest move −G", ylabel="gradient step ΔY")
    reach = f"reachable ‖P_X G‖/‖G‖ = {s.reach:.2f}" if batch > d_in else "b ≤ d_in: all of −G reachable"
    ax_align.set_title(f"cos(ΔY, −G) = {s.cos:.3f}\n{reach}", loc="left", fontsize=style.FONT_SIZE)


CAPTION = (
    "Turn θ: the input cloud turns (left) and the variance of coordinate 1 changes, but the Gram "
    "matrix (middle) stays the same matrix, so the cosine does not change with θ. Raise b past d_in: "
    "each sample overlaps with many more others, the rank of the Gram matrix stops at d_in, and past d_in, "
    "the cosine stays below the reachable share ‖P_X G‖/‖G‖ of the steepest move. Raise κ: the points "
    "on the right spread off the diagonal, and the cosine is lower than at κ = 1."
)


def _cosine(angle, kappa, batch):
    return gram_alignment_state(angle, kappa, batch).cos


def _excess_past_width(angle, kappa, batch):
    """cos − reachable share when b > d_in (must be ≤ 0); 0 below the width, where the promise says nothing."""
    s = gram_alignment_state(angle, kappa, batch)
    return s.cos - s.reach if batch > EXPLORABLE_D_IN else 0.0


def _cost_of_kappa(angle, kappa, batch):
    """cos at this κ minus cos at κ = 1, same θ and b (must be ≤ 0)."""
    return gram_alignment_state(angle, kappa, batch).cos - gram_alignment_state(angle, 1, batch).cos


def gram_alignment() -> Explorable:
    """Section 1.8: the input cloud, its Gram matrix and the alignment of the feature move;
    main slider the rotation θ of Σ (10 values, 0° to 90°)."""
    return Explorable(
        _draw_gram_alignment,
        [Slider("angle", list(range(0, 91, 10)), label="rotation θ (°)", default=30),
         Slider("kappa", [1, 1000], label="κ(Σ)", default=1000),
         Slider("batch", [8, 128], label="batch b", default=8)],
        main="angle",
        figsize=(style.FIG_WIDTH, 3.3),
        static_colors=48,
        caption=CAPTION,
        promises=[
            Promise("the cosine does not change with θ", _cosine, constant(atol=1e-9)),
            Promise("past d_in, the cosine stays below the reachable share", _excess_past_width,
                    always(lambda v: v <= 1e-12, "cos <= ||P_X G||/||G||")),
            Promise("the cosine is lower than at κ = 1", _cost_of_kappa, always(lambda v: v <= 1e-12, "cos(κ) <= cos(1)")),
        ],
    )


EXPLORABLES = (gram_alignment,)
