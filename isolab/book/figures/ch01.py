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
- :func:`ratio_alignment_state`, :func:`gram_alignment`: the explorable of section 1.8
  (the batch-to-width ratio and the condition number, the Gram spectrum and the
  alignment) and the one computation its figure and its promises share; ``EXPLORABLES``
  lists it for ``tests/book/test_captions.py``.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import NamedTuple, Sequence

import numpy as np
import torch
from matplotlib.figure import Figure

from isolab.book import feature_step, features
from isolab.book.explorable import Explorable, Promise, Slider, always, nonincreasing
from isolab.book.figures import style
from isolab.book.plotting import log_ticks
from isolab.book.seeding import generator

__all__ = [
    "hero", "mean_alignment", "alignment", "alignment_table", "format_table", "alignment_figure",
    "bias_alignment", "bias_figure", "RatioAlignment", "ratio_alignment_state", "gram_alignment",
    "width_spread", "below", "EXPLORABLES", "SHAPES", "KAPPAS", "WIDTHS", "RATIOS",
]

_SUB = "₁₂"

#: The (batch, width) pairs of the chapter's table, ordered by b / d_in.
SHAPES = ((8, 512), (32, 512), (32, 128), (32, 32), (128, 32), (512, 32))
#: The condition numbers of the chapter's table and curves.
KAPPAS = (1, 10, 100, 1000)
#: The widths of the curves that show the shape enters through b / d_in.
WIDTHS = (32, 64, 128)
#: The batch-to-width ratios of the curves, 1/16 to 16.
RATIOS = tuple(2.0 ** k for k in range(-4, 5))


def below(value: float, tol: float) -> str:
    """``"< tol"`` when ``value`` is below ``tol``, else the value: a rounding-level
    difference printed the same on every CPU."""
    mantissa, exponent = f"{tol:.0e}".split("e")
    return f"< {mantissa}e{int(exponent)}" if value < tol else f"{value:.1e}"


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


def ratio_curves(widths: Sequence[int] = WIDTHS, kappas: Sequence[float] = (1, 100),
                 ratios: Sequence[float] = RATIOS, draws: int = 20) -> dict[tuple[float, int], np.ndarray]:
    """Mean cosine against ``ratios`` (b / d_in) for each (κ, width): the curves of the
    figure's right panel and of the check that the ratio, not the width, sets it."""
    return {(kappa, d): np.array([mean_alignment(max(1, round(r * d)), d, kappa, draws=draws) for r in ratios])
            for kappa in kappas for d in widths}


def width_spread(curves: dict[tuple[float, int], np.ndarray]) -> float:
    """The largest difference between widths at one ratio and one κ."""
    kappas = sorted({kappa for kappa, _ in curves})
    return max(float(np.ptp(np.stack([c for (k, _), c in curves.items() if k == kappa]), axis=0).max())
               for kappa in kappas)


def alignment_figure(table: np.ndarray | None = None, curves: dict | None = None, *,
                     kappas: Sequence[float] = KAPPAS, shapes: Sequence[tuple[int, int]] = SHAPES,
                     ratios: Sequence[float] = RATIOS) -> Figure:
    r"""Left: the table as a heatmap (rows κ, columns (b, d_in) ordered by b/d_in).
    Right: the mean cosine against :math:`b/d_{in}` at three widths (markers) for κ = 1
    and κ = 100 (colours), with the rank bound :math:`\sqrt{d_{in}/b}` for :math:`b > d_{in}`:
    the curves of one κ lie on each other, so the shape enters through the ratio."""
    if table is None:
        table = alignment_table(kappas, shapes)
    if curves is None:
        curves = ratio_curves(ratios=ratios)
    fig = Figure(figsize=(style.FIG_WIDTH, 3.9))
    ax_map, ax_curve = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.15, 1]})

    image = ax_map.imshow(table, cmap="cividis", vmin=0, vmax=1, aspect="auto")
    for (r, c), v in np.ndenumerate(table):
        ax_map.text(c, r, f"{v:.2f}", ha="center", va="center", fontsize=style.FONT_SIZE - 1,
                    color=style.ROLES["target"] if v > 0.55 else style.ROLES["background"])
    ax_map.set_xticks(range(len(shapes)), [f"{b}/{d}" for b, d in shapes])
    ax_map.set_yticks(range(len(kappas)), [f"{k:g}" for k in kappas])
    ax_map.set(xlabel="batch / width, b / d_in", ylabel="condition number κ")
    ax_map.set_title("mean cos(ΔY, −G) by shape and κ", loc="left")
    ax_map.tick_params(axis="x", labelrotation=30)
    style.colorbar(fig, image, ax_map, "cos(ΔY, −G)")

    curve_kappas = sorted({kappa for kappa, _ in curves})
    colours = dict(zip(curve_kappas, [style.ROLES["data"], style.ROLES["highlight"]]))
    markers = dict(zip(sorted({d for _, d in curves}), "os^D"))
    for (kappa, d), cos in curves.items():
        ax_curve.plot(ratios, cos, marker=markers[d], color=colours[kappa], markersize=5, lw=1.6,
                      mfc=style.ROLES["background"] if d != min(markers) else colours[kappa])
    for kappa in curve_kappas:
        last = np.mean([c[-1] for (k, _), c in curves.items() if k == kappa])
        ax_curve.annotate(f"κ = {kappa:g}", (ratios[-1], last), xytext=(6, 0), textcoords="offset points",
                          va="center", color=style.text_color(colours[kappa]), fontsize=style.FONT_SIZE - 1)
    widths = "  ".join(f"{m} d_in = {d}" for d, m in zip(markers, ("●", "○", "△")))
    ax_curve.text(0.02, 0.03, widths, transform=ax_curve.transAxes, fontsize=style.FONT_SIZE - 1,
                  color=style.ROLES["ink"])
    past = [r for r in ratios if r >= 1]
    ax_curve.plot(past, [1 / math.sqrt(r) for r in past], "--", color=style.ROLES["bound"], lw=1.6)
    ax_curve.text(past[1], 1 / math.sqrt(past[1]) + 0.09, "rank bound √(d_in/b)", color=style.ROLES["bound"],
                  fontsize=style.FONT_SIZE - 1)
    ax_curve.axvline(1.0, color=style.ROLES["muted"], lw=1, zorder=0)
    ax_curve.set_xscale("log", base=2)
    ticks = [r for r in ratios if round(math.log2(r)) % 2 == 0]
    ax_curve.set_xticks(ticks, [f"1/{round(1 / r)}" if r < 1 else f"{r:g}" for r in ticks])
    ax_curve.minorticks_off()
    ax_curve.set(xlabel="b / d_in", ylabel="mean cos(ΔY, −G)", ylim=(0, 1.02),
                 xlim=(ratios[0] / 1.3, ratios[-1] * 3.4))
    ax_curve.set_title("three widths, one curve per κ", loc="left")
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
EXPLORABLE_D_IN = 32
EXPLORABLE_D_OUT = 8
#: The explorable's main slider, b / d_in: 1/8 to 8 (batches of 4 to 256 at d_in = 32).
EXPLORABLE_RATIOS = (0.125, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 4.0, 8.0)
EXPLORABLE_KAPPAS = (1, 10, 100, 1000, 10_000)
#: Batches averaged for the cosine (the same batches, grown by adding rows, at every ratio).
EXPLORABLE_DRAWS = 16
_SHOWN = 160             # entries of ΔY and −G drawn in the middle panel
_FLOOR = 1e-3            # where the Gram spectrum's zero eigenvalues are drawn on the log axis


class RatioAlignment(NamedTuple):
    """What the explorable draws at one setting (and what its promises measure)."""

    batch: int
    eigenvalues: np.ndarray   # of XX^T / d_in for the first batch, largest first
    zeros: int                # eigenvalues that are zero to rounding (of the first batch)
    target: np.ndarray        # entries of -G / ||G|| (first batch)
    move: np.ndarray          # the same entries of ΔY / ||ΔY||
    cos: float                # cos(ΔY, -G), mean over the batches
    reach: float              # ||P_X G|| / ||G||, mean over the batches: what any weight step can reach


@lru_cache(maxsize=8)
def _explorable_draws(kappa: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``EXPLORABLE_DRAWS`` batches of the largest size and their upstream gradients; a
    smaller batch is the first rows of these, so moving the ratio adds samples to the same
    batches (what changes is b, not the luck of the draw)."""
    gen = generator(8)
    largest = round(EXPLORABLE_RATIOS[-1] * EXPLORABLE_D_IN)
    X = features.gaussian_features(largest, EXPLORABLE_D_IN, kappa, generator=gen, sample_shape=(EXPLORABLE_DRAWS,))
    G = torch.randn(EXPLORABLE_DRAWS, largest, EXPLORABLE_D_OUT, generator=gen, dtype=torch.float64)
    return X, G


@lru_cache(maxsize=256)
def ratio_alignment_state(ratio: float, kappa: float) -> RatioAlignment:
    r"""The explorable's one computation at ``b = ratio · d_in``: the Gram spectrum, the
    feature move :math:`\Delta Y = -XX^\top G` against :math:`-G` (first batch), and the
    mean cosine and mean reachable share :math:`\|P_X G\|_F/\|G\|_F` over the batches."""
    batch = round(ratio * EXPLORABLE_D_IN)
    X_all, G_all = _explorable_draws(float(kappa))
    X, G = X_all[:, :batch], G_all[:, :batch]
    eigenvalues = torch.linalg.eigvalsh(feature_step.gram(X[0]) / EXPLORABLE_D_IN).flip(0).clamp_min(0).numpy()
    zeros = int((eigenvalues < 1e-10 * eigenvalues[0]).sum())
    dY = feature_step.feature_change(X[0], G[0], lr=1.0)
    target = (-G[0] / torch.linalg.matrix_norm(G[0])).flatten()[:_SHOWN].numpy()
    move = (dY / torch.linalg.matrix_norm(dY)).flatten()[:_SHOWN].numpy()
    cos = alignment(X, G).mean().item()
    Q, _ = torch.linalg.qr(X)                      # orthonormal bases of the column spaces
    reach = (torch.linalg.matrix_norm(Q @ (Q.mT @ G)) / torch.linalg.matrix_norm(G)).mean().item()
    return RatioAlignment(batch, eigenvalues, zeros, target, move, cos, reach)


def _draw_gram_alignment(fig, ratio, kappa):
    d_in = EXPLORABLE_D_IN
    s = ratio_alignment_state(ratio, kappa)
    ax_spec, ax_align, ax_curve = fig.subplots(1, 3, gridspec_kw={"width_ratios": [1, 0.9, 1.1]})

    rank = s.batch - s.zeros
    x = (np.arange(rank) + 0.5) / s.batch
    ax_spec.plot(x, np.maximum(s.eigenvalues[:rank], _FLOOR), "o-", ms=3 if rank <= 64 else 0, lw=1.5,
                 color=style.ROLES["data"])
    ax_spec.axhline(1.0, color=style.ROLES["bound"], lw=1, ls=":", zorder=0)
    if s.zeros:
        ax_spec.axvspan(rank / s.batch, 1, color=style.ROLES["muted"], alpha=0.5, lw=0)
        ax_spec.text(1 - s.zeros / (2 * s.batch), 3 * _FLOOR, f"{s.zeros}\nzeros", ha="center", va="bottom",
                     color=style.ROLES["ink"])
    ax_spec.set_yscale("log")
    log_ticks(ax_spec.yaxis, [-3, -2, -1, 0, 1, 2])
    ax_spec.set(xlim=(0, 1), ylim=(_FLOOR / 2, 300), xticks=[0, 0.5, 1], xticklabels=["0", "½", "1"],
                xlabel="eigenvalue rank / b", ylabel="eigenvalue of XXᵀ / d_in")
    ax_spec.set_title(f"Gram spectrum\nb = {s.batch}, d_in = {d_in}", loc="left", fontsize=style.FONT_SIZE)

    lim = 1.1 * max(np.abs(s.target).max(), np.abs(s.move).max())
    ax_align.plot([-lim, lim], [-lim, lim], color=style.ROLES["bound"], lw=1)
    ax_align.scatter(s.target, s.move, s=6, color=style.ROLES["highlight"])
    ax_align.set(xlim=(-lim, lim), ylim=(-lim, lim), aspect="equal", xticks=[], yticks=[],
                 xlabel="steepest move −G", ylabel="gradient step ΔY")
    ax_align.set_title("entries of ΔY\nagainst −G", loc="left", fontsize=style.FONT_SIZE)

    ratios = np.array(EXPLORABLE_RATIOS)
    reference = [ratio_alignment_state(r, 1).cos for r in ratios]
    curve = [ratio_alignment_state(r, kappa).cos for r in ratios]
    past = ratios[ratios >= 1]
    ax_curve.plot(past, 1 / np.sqrt(past), "--", color=style.ROLES["bound"], lw=1.5)
    if kappa != 1:
        ax_curve.plot(ratios, reference, color=style.ROLES["muted"], lw=1.5)
        ax_curve.text(ratios[0], reference[0] + 0.05, "κ = 1", color=style.ROLES["bound"], va="bottom")
    ax_curve.plot(ratios, curve, "o-", ms=4, color=style.ROLES["data"], lw=1.8)
    ax_curve.plot([ratio], [s.cos], "o", ms=10, color=style.ROLES["highlight"], zorder=5)
    ax_curve.set_xscale("log", base=2)
    ax_curve.set_xticks([0.125, 0.5, 2, 8], ["1/8", "1/2", "2", "8"])
    ax_curve.minorticks_off()
    ax_curve.set(ylim=(0, 1.05), xlabel="b / d_in", ylabel="cos(ΔY, −G)")
    ax_curve.text(1.15, 1.0, "√(d_in/b)", color=style.ROLES["bound"], ha="left", va="center")
    reach = f"reachable share {s.reach:.2f}" if s.batch > d_in else "all of −G reachable"
    ax_curve.set_title(f"mean cos = {s.cos:.2f}\n{reach}", loc="left", fontsize=style.FONT_SIZE)


CAPTION = (
    "Raise b/d_in: the cosine falls as b/d_in grows (right), the Gram spectrum spreads (left), "
    "and past b = d_in the Gram matrix has b − d_in zero eigenvalues and the cosine stays below "
    "the reachable share ‖P_X G‖/‖G‖ of the steepest move. Raise κ: the eigenvalues spread over more "
    "decades, the entries of ΔY leave the diagonal (middle), and the cosine is lower than at κ = 1."
)


def _cosine(ratio, kappa):
    return ratio_alignment_state(ratio, kappa).cos


def _zeros_beyond_width(ratio, kappa):
    """Zero eigenvalues minus max(0, b − d_in) (must be 0)."""
    s = ratio_alignment_state(ratio, kappa)
    return s.zeros - max(0, s.batch - EXPLORABLE_D_IN)


def _excess_past_width(ratio, kappa):
    """cos − reachable share when b > d_in (must be ≤ 0); 0 below the width, where the promise says nothing."""
    s = ratio_alignment_state(ratio, kappa)
    return s.cos - s.reach if s.batch > EXPLORABLE_D_IN else 0.0


def _cost_of_kappa(ratio, kappa):
    """cos at this κ minus cos at κ = 1, same b (must be ≤ 0)."""
    return ratio_alignment_state(ratio, kappa).cos - ratio_alignment_state(ratio, 1).cos


def gram_alignment() -> Explorable:
    """Section 1.8: the Gram spectrum, the feature move against the steepest one and the
    mean cosine, as the batch-to-width ratio b / d_in (main slider, 1/8 to 8) and the
    condition number κ of Σ (1 to 10⁴) change."""
    return Explorable(
        _draw_gram_alignment,
        [Slider("ratio", list(EXPLORABLE_RATIOS), label="b / d_in", default=0.5),
         Slider("kappa", list(EXPLORABLE_KAPPAS), label="κ(Σ)", default=100)],
        main="ratio",
        figsize=(style.COLUMN_WIDTH, 3.1),
        static_colors=16,
        narrow="panels",      # on a phone the three panels stack, each the column's width
        caption=CAPTION,
        alt=("The alignment of a gradient step falls as the batch grows relative to the width, and falls "
             "further as the condition number grows."),
        promises=[
            Promise("the cosine falls as b/d_in grows", _cosine, nonincreasing()),
            Promise("the Gram matrix has b − d_in zero eigenvalues", _zeros_beyond_width,
                    always(lambda v: v == 0, "zeros = max(0, b - d_in)")),
            Promise("the cosine stays below the reachable share", _excess_past_width,
                    always(lambda v: v <= 1e-12, "cos <= ||P_X G||/||G||")),
            Promise("the cosine is lower than at κ = 1", _cost_of_kappa, always(lambda v: v <= 1e-12, "cos(κ) <= cos(1)")),
        ],
    )


EXPLORABLES = (gram_alignment,)
