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
from isolab.book.explorable import Explorable, Promise, Slider, always, nondecreasing, nonincreasing
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
    colours = dict(zip(curve_kappas, style.sequence(len(curve_kappas), start=0.05, stop=0.6)))
    markers = dict(zip(sorted({d for _, d in curves}), "os^D"))
    # the widths' curves lie on each other: their markers are dodged sideways (by 2^±0.15) to stay visible
    dodge = dict(zip(sorted(markers), 2.0 ** (0.15 * (np.arange(len(markers)) - (len(markers) - 1) / 2))))
    for (kappa, d), cos in curves.items():
        ax_curve.plot(np.asarray(ratios) * dodge[d], cos, marker=markers[d], color=colours[kappa], markersize=5,
                      lw=1.6, mfc=style.ROLES["background"] if d != min(markers) else colours[kappa])
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


# ------------------------------------------------------------- the centerpiece (§1.5)
CENTER_D_IN = 32
CENTER_D_OUT = 8
#: The main slider, κ(Σ): nine values, half a decade apart, from 1 to 10⁴.
CENTER_KAPPAS = (1, 3, 10, 30, 100, 300, 1000, 3000, 10_000)
#: b / d_in: a wide layer, a square one, a batch four times the width (b = 8, 32, 128).
CENTER_RATIOS = (0.25, 1.0, 4.0)
#: The two models of the upstream gradient G.
G_MODELS = ("null model", "teacher")
#: Batches averaged at each setting (the same samples, stretched by κ and grown by b).
CENTER_DRAWS = 16
_ENTRIES = 256           # entries of ΔY and −G drawn in the right panel
_CLIP = 4.0              # the right panel's axes, in units of each matrix's RMS entry


class GramStep(NamedTuple):
    """What the centerpiece draws at one setting (and what its promises measure)."""

    batch: int
    eigenvalues: np.ndarray   # of XXᵀ/d_in, largest first, mean over the batches at each rank
    zeros: int                # eigenvalues that are exactly zero (b − d_in when b > d_in)
    g_share: np.ndarray       # share of ‖G‖² along each eigenvector, same order, mean over batches
    step_share: np.ndarray    # share of ‖ΔY‖² along each eigenvector
    target: np.ndarray        # entries of −G / RMS (first batch)
    move: np.ndarray          # the same entries of ΔY / RMS
    cos: float                # cos(ΔY, −G), mean over the batches
    formula: float            # E[λ] / √E[λ²] under G's energy, mean over the batches
    top_share: float          # share of ‖ΔY‖² on the top eighth of the eigenvectors


@lru_cache(maxsize=2)
def _center_draws() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Standard normal samples ``Z`` (the largest batch), a null-model gradient and a
    teacher ``W*`` per batch. A setting scales ``Z`` by the square roots of κ's spectrum
    and takes its first ``b`` rows: moving κ stretches the same samples, moving b adds
    samples to the same batches."""
    gen = generator(8)
    largest = round(CENTER_RATIOS[-1] * CENTER_D_IN)
    Z = torch.randn(CENTER_DRAWS, largest, CENTER_D_IN, generator=gen, dtype=torch.float64)
    G_null = torch.randn(CENTER_DRAWS, largest, CENTER_D_OUT, generator=gen, dtype=torch.float64)
    W_star = torch.randn(CENTER_DRAWS, CENTER_D_IN, CENTER_D_OUT, generator=gen, dtype=torch.float64)
    return Z, G_null, W_star


def gradient_model(X: torch.Tensor, model: str, null: torch.Tensor, W_star: torch.Tensor) -> torch.Tensor:
    r"""The upstream gradient ``G`` of one model: the null model's ``null`` (unrelated to
    ``X``), or the teacher's :math:`G = XW - T = -XW^\ast` (squared loss
    :math:`\tfrac12\|XW - T\|_F^2`, realizable targets :math:`T = XW^\ast`, at :math:`W = 0`)."""
    if model == "null model":
        return null
    if model == "teacher":
        return -X @ W_star
    raise ValueError(f"model must be one of {G_MODELS}, got {model!r}")


def energy_formula(eigenvalues: torch.Tensor, share: torch.Tensor) -> torch.Tensor:
    r""":math:`\mathbb E[\lambda]/\sqrt{\mathbb E[\lambda^2]}` with the expectations taken
    under ``share`` (weights summing to 1 along the last axis): the cosine between
    :math:`KG` and :math:`G` when :math:`K` has eigenvalues ``eigenvalues`` and :math:`G`
    puts the shares ``share`` of its energy on the matching eigenvectors."""
    return (eigenvalues * share).sum(-1) / (eigenvalues.square() * share).sum(-1).sqrt()


@lru_cache(maxsize=64)
def gram_step(kappa: float, ratio: float, model: str) -> GramStep:
    r"""The centerpiece's one computation at a setting: the Gram spectrum of
    :math:`XX^\top/d_{in}`, the shares of :math:`\|G\|_F^2` and of :math:`\|\Delta Y\|_F^2`
    along its eigenvectors, the entries of :math:`\Delta Y = -XX^\top G` against those of
    :math:`-G`, the mean cosine and the same cosine from the eigen-decomposition."""
    Z, null, W_star = _center_draws()
    batch = round(ratio * CENTER_D_IN)
    X = Z[:, :batch] * features.spectrum(CENTER_D_IN, kappa).sqrt()
    G = gradient_model(X, model, null[:, :batch], W_star)
    lam, U = torch.linalg.eigh(feature_step.gram(X) / CENTER_D_IN)
    lam, U = lam.flip(-1), U.flip(-1)                       # largest first
    zeros = max(0, batch - CENTER_D_IN)
    if zeros:
        lam[..., -zeros:] = 0.0                             # exactly zero: rank ≤ d_in
    energy = (U.mT @ G).square().sum(-1)                    # ‖u_kᵀ G‖² per eigenvector
    share = energy / energy.sum(-1, keepdim=True)
    step = lam.square() * share
    step_share = step / step.sum(-1, keepdim=True)
    dY = feature_step.feature_change(X[0], G[0], lr=1.0)
    rms = lambda M: M / M.square().mean().sqrt()            # noqa: E731
    top = max(1, batch // 8)
    return GramStep(batch, lam.mean(0).numpy(), zeros, share.mean(0).numpy(), step_share.mean(0).numpy(),
                    rms(-G[0]).flatten()[:_ENTRIES].numpy(), rms(dY).flatten()[:_ENTRIES].numpy(),
                    alignment(X, G).mean().item(), energy_formula(lam, share).mean().item(),
                    step_share[:, :top].sum(-1).mean().item())


@lru_cache(maxsize=1)
def _spectrum_floor() -> float:
    """A power of ten below the smallest nonzero eigenvalue anywhere on the grid: the
    left panel's fixed lower limit (nothing is clipped there)."""
    smallest = min(float(s.eigenvalues[: s.batch - s.zeros].min())
                   for k in CENTER_KAPPAS for r in CENTER_RATIOS for s in [gram_step(k, r, G_MODELS[0])])
    return 10.0 ** math.floor(math.log10(smallest))


def _draw_gram_step(fig, kappa, ratio, model):
    s = gram_step(kappa, ratio, model)
    ax_spec, ax_share, ax_move = fig.subplots(1, 3, gridspec_kw={"width_ratios": [1, 1, 1]})
    rank = s.batch - s.zeros
    x = (np.arange(s.batch) + 0.5) / s.batch
    floor = _spectrum_floor()
    steepest, step = style.ROLES["target"], style.ROLES["highlight"]

    ax_spec.plot(x[:rank], s.eigenvalues[:rank], "o-", ms=3 if rank <= 32 else 0, lw=1.8, color=style.ROLES["data"])
    ax_spec.axhline(1.0, color=style.ROLES["bound"], lw=1, ls=":", zorder=0)
    for ax in (ax_spec, ax_share):
        ax.set_yscale("log")
        ax.set(xlim=(0, 1), xticks=[0, 0.5, 1], xticklabels=["0", "½", "1"], xlabel="rank k / b")
        if s.zeros:
            ax.axvspan(rank / s.batch, 1, color=style.ROLES["muted"], alpha=0.45, lw=0)
    if s.zeros:
        ax_spec.text(1 - s.zeros / (2 * s.batch), floor * 3, f"{s.zeros}\nzero λ", ha="center", va="bottom",
                     color=style.ROLES["ink"])
    lo = round(math.log10(floor))
    log_ticks(ax_spec.yaxis, range(lo + (lo % 2), 3, 2))
    ax_spec.set(ylim=(floor, 200), ylabel="eigenvalue λ of XXᵀ/d_in")
    ax_spec.set_title(f"Gram spectrum\nκ = {kappa:g}, b = {s.batch}", loc="left", fontsize=style.FONT_SIZE)

    ax_share.step(x, np.maximum(s.g_share, 1e-12), where="mid", color=steepest, ls="--", lw=1.6)
    shown = x[:rank]
    ax_share.step(shown, np.maximum(s.step_share[:rank], 1e-12), where="mid", color=step, lw=2.0)
    log_ticks(ax_share.yaxis, [-6, -4, -2, 0])
    ax_share.set(ylim=(1e-7, 60), ylabel="share of ‖·‖² on eigenvector k")
    ax_share.text(0.03, 0.98, "−G (dashed)", color=steepest, ha="left", va="top", transform=ax_share.transAxes)
    ax_share.text(0.97, 0.98, "ΔY", color=style.text_color(step), ha="right", va="top", transform=ax_share.transAxes,
                  fontweight="bold")
    if s.zeros:
        lost = float(s.g_share[rank:].sum())
        ax_share.text(1 - s.zeros / (2 * s.batch), 3e-7, f"{lost:.0%} of\n‖G‖²", ha="center", va="bottom",
                      color=style.ROLES["ink"])
    ax_share.set_title(f"energy shares\nG: {model}", loc="left", fontsize=style.FONT_SIZE)

    lim = _CLIP
    ax_move.plot([-lim, lim], [-lim, lim], color=style.ROLES["bound"], lw=1)
    ax_move.scatter(np.clip(s.target, -lim, lim), np.clip(s.move, -lim, lim), s=6, color=step)
    ax_move.set(xlim=(-lim * 1.05, lim * 1.05), ylim=(-lim * 1.05, lim * 1.05), aspect="equal", xticks=[], yticks=[],
                xlabel="entry of −G", ylabel="entry of ΔY")
    ax_move.set_title(f"ΔY against −G\ncos = {s.cos:.2f}", loc="left", fontsize=style.FONT_SIZE)


CAPTION = (
    "Drag κ, the condition number of Σ. λ: the eigenvalues of XXᵀ/d_in (grey: zero); dashed and orange: the "
    "shares of ‖−G‖² and ‖ΔY‖² on each eigenvector. ΔY = −XXᵀG multiplies G's part on an eigenvector by its λ, so "
    "the top eighth of the eigenvectors gains ΔY's energy as κ grows, and the cosine equals E[λ]/√E[λ²] "
    "(averages weighted by G's shares). Under the null model (G unrelated to X) the cosine falls as κ grows; "
    "the teacher's gradient −XW* (squared loss, targets XW*, W = 0) puts no energy on the zero eigenvalues, "
    "and the teacher's cosine stays above the null model's."
)


def _null_cos(kappa, ratio, model):
    """The null model's cosine (whatever the toggle shows): must not rise with κ."""
    return gram_step(kappa, ratio, G_MODELS[0]).cos


def _formula_gap(kappa, ratio, model):
    s = gram_step(kappa, ratio, model)
    return abs(s.cos - s.formula)


def _teacher_on_zeros(kappa, ratio, model):
    s = gram_step(kappa, ratio, G_MODELS[1])
    return float(s.g_share[s.batch - s.zeros:].sum())


def _teacher_margin(kappa, ratio, model):
    return gram_step(kappa, ratio, G_MODELS[1]).cos - gram_step(kappa, ratio, G_MODELS[0]).cos


def _top_share(kappa, ratio, model):
    return gram_step(kappa, ratio, model).top_share


def gram_step_explorable() -> Explorable:
    """Section 1.5's centerpiece: κ(Σ) (main slider, 1 to 10⁴), b / d_in and the model of
    G move the Gram spectrum, where G's and ΔY's energy sit along its eigenvectors, and the
    entries of ΔY against −G."""
    return Explorable(
        _draw_gram_step,
        [Slider("kappa", list(CENTER_KAPPAS), label="κ(Σ)", default=100),
         Slider("ratio", list(CENTER_RATIOS), label="b / d_in", default=1.0),
         Slider("model", list(G_MODELS), label="G")],
        main="kappa",
        figsize=(style.COLUMN_WIDTH, 3.3),
        static_colors=16,
        narrow="panels",      # on a phone the three panels stack, each the column's width
        caption=CAPTION,
        alt=("Dragging the condition number spreads the Gram spectrum, moves the feature step's energy onto the "
             "top eigenvectors and pulls the step away from the steepest move."),
        promises=[
            Promise("the top eighth of the eigenvectors gains ΔY's energy as κ grows", _top_share, nondecreasing()),
            Promise("the cosine equals E[λ]/√E[λ²]", _formula_gap, always(lambda v: v < 1e-12, "|cos − formula| < 1e-12")),
            Promise("the null model (G unrelated to X) the cosine falls as κ grows", _null_cos, nonincreasing()),
            Promise("puts no energy on the zero eigenvalues", _teacher_on_zeros,
                    always(lambda v: v < 1e-20, "teacher's share on zero λ < 1e-20")),
            Promise("the teacher's cosine stays above the null model's", _teacher_margin,
                    always(lambda v: v > 0, "cos(teacher) > cos(null)")),
        ],
    )


EXPLORABLES = (gram_step_explorable,)
