r"""Figures, the training comparison and the explorable of Chapter 3, *Whitening and the
normalization layers*.

Each figure function builds and returns a :class:`matplotlib.figure.Figure` (no pyplot),
drawn in the book's style (:mod:`isolab.book.figures.style`). The chapter computes and checks
most numbers itself; the functions here draw them, except where a figure and a check
share one computation, which then lives here once:

* :func:`hero`: a 2-D cloud, its covariance ellipse, and the same cloud after ZCA and
  after PCA whitening, with labelled points moving (the chapter's opening figure).
* :func:`reachable_alignment` and :func:`reachable` (§3.2): the whitened step
  :math:`\Delta Y = -\eta P G` is the steepest move the layer can reach.
* :func:`rotation_distances` (§3.3): ZCA is the whitening nearest to the data, against
  Haar-random rotations of it; :func:`axis_swap` shows PCA permuting the coordinates.
* :func:`diagonals` (§3.4), :func:`isotropy_bars`, :func:`kappa_sweep` (§3.5).
* :func:`train_inputs`, :func:`best_lr`, :func:`training_checks` and :func:`training`
  (§3.6): a small MLP trained by SGD on raw, standardized (BatchNorm) and whitened
  inputs, each with its own learning rate from one grid, and what the chapter claims of it.
* :func:`activation_stats` and :func:`activations` (§3.7): how diagonal the covariance
  of a trained network's hidden layer is.
* :func:`normalizations` (§3.8), the explorable: sliders θ (main), κ and b; its
  caption's promises are computed by :func:`normalization_data`, which the figure draws.

:func:`gap`, :func:`within` and :func:`agrees` build the chapter's checks
(:class:`isolab.book.checks.Check`) so that they print bounds and rounded values, the same on
every CPU.
"""

from __future__ import annotations

import functools
import math
from typing import Callable, Mapping, NamedTuple, Sequence

import matplotlib
import numpy as np
import torch
from matplotlib.figure import Figure

from isolab.book import features, isotropy, normalization
from isolab.book.checks import Check
from isolab.book.explorable import Explorable, FigureMessage, Promise, Slider, always
from isolab.book.figures import style
from isolab.linalg import covariance, inverse_sqrt, whiten
from isolab.book.plotting import log_ticks
from isolab.book.seeding import generator

__all__ = [
    "METHOD_LABELS", "method_line", "hero", "reachable_alignment", "reachable", "rotation_distances",
    "axis_swap", "diagonals", "isotropy_bars", "kappa_sweep", "LR_GRID", "TrainingRun", "train_inputs",
    "best_lr", "lr_scores", "steps_to", "training_checks", "training", "ActivationStats", "correlation",
    "offdiagonal_share", "centered_isotropy", "activation_stats", "activations", "normalization_data",
    "draw_normalizations", "normalizations", "EXPLORABLES",
]

DATA, TARGET, BOUND, HIGHLIGHT, MUTED = (style.ROLES[k] for k in ("data", "target", "bound", "highlight", "muted"))
SMALL = style.FONT_SIZE - 1   # the smallest text in these figures (10 pt)
_CYCLE = style.rc()["axes.prop_cycle"].by_key()["color"]   # the book's colour-blind-safe cycle
PAPER = matplotlib.rcParams["figure.facecolor"]              # the page: gaps between bars, text on dark cells

#: How each normalization is named and drawn in this chapter (colour, marker, line style).
METHOD_LABELS = {"none": "none", "batch": "BatchNorm", "layer": "LayerNorm", "rms": "RMSNorm", "zca": "ZCA", "pca": "PCA"}
SHORT_LABELS = {"none": "none", "batch": "BN", "layer": "LN", "rms": "RMS", "zca": "ZCA", "pca": "PCA"}
_METHOD_LOOK = {
    "none": (BOUND, "o", ":"),
    "batch": (_CYCLE[0], "s", "-"),
    "layer": (_CYCLE[2], "^", "-."),
    "rms": (_CYCLE[4], "v", "--"),
    "zca": (_CYCLE[1], "o", "-"),
    "pca": (_CYCLE[5], "D", "--"),
}
#: The three input variants of the training comparison, drawn like the methods above.
VARIANT_METHOD = {"raw": "none", "batch": "batch", "zca": "zca"}
VARIANT_LABELS = {"raw": "raw inputs", "batch": "BatchNorm (standardized)", "zca": "whitened (ZCA)"}


def method_color(method: str) -> str:
    return _METHOD_LOOK[method][0]


def method_line(method: str, *, markers: bool = True, **overrides) -> dict:
    """``ax.plot`` keyword arguments for a normalization method (see ``METHOD_LABELS``)."""
    color, marker, ls = _METHOD_LOOK[method]
    kwargs = dict(color=color, linestyle=ls, label=METHOD_LABELS[method])
    if markers:
        kwargs.update(marker=marker, markersize=6)
    kwargs.update(overrides)
    return kwargs


def _plain(ax) -> None:
    ax.set(xticks=[], yticks=[], aspect="equal")
    for spine in ax.spines.values():
        spine.set_visible(False)


# ----------------------------------------------------------------------------- hero
def _ellipse(C: torch.Tensor, radius: float = 1.0, n: int = 200) -> np.ndarray:
    """Points of ``{x : xᵀ C⁻¹ x = radius²}`` (the covariance ellipse)."""
    t = torch.linspace(0, 2 * math.pi, n, dtype=torch.float64)
    circle = torch.stack([t.cos(), t.sin()], -1)
    w, V = torch.linalg.eigh(C)
    return (radius * circle * w.sqrt() @ V.T).numpy()


def hero(n: int = 160, kappa: float = 9.0, degrees: float = 40.0, seed: int = 3) -> Figure:
    """A 2-D Gaussian cloud with its covariance ellipse (left); the same cloud after ZCA
    (middle) and PCA whitening (right), both with the unit circle as their covariance
    ellipse, and three labelled points moving from where they were (faint) to where the
    whitening puts them. Each panel's title carries the mean squared move ``‖x − z‖²``."""
    gen = generator(seed)
    X = features.gaussian_features(n, 2, kappa, math.radians(degrees), generator=gen)
    whitened = {"ZCA": whiten(X, kind="zca"), "PCA": whiten(X, kind="pca")}
    C = covariance(X)
    w, V = torch.linalg.eigh(C)
    major, minor = V[:, 1], V[:, 0]
    picks = [int((X @ major).argmax()), int((X @ minor).argmax()), int((X @ (major - minor)).argmin())]
    lim = 3.6
    fig = Figure(figsize=(style.FIG_WIDTH, 3.5))
    axes = fig.subplots(1, 3)
    fig.subplots_adjust(left=0.01, right=0.99, top=0.8, bottom=0.03, wspace=0.08)

    def frame(ax, title):
        _plain(ax)
        ax.set(xlim=(-lim, lim), ylim=(-lim, lim))
        ax.axhline(0, color=MUTED, lw=1, zorder=0)
        ax.axvline(0, color=MUTED, lw=1, zorder=0)
        ax.set_title(title, loc="center", fontsize=style.FONT_SIZE)

    ax = axes[0]
    frame(ax, f"data X, covariance C\n(κ = {kappa:g}, tilted {degrees:g}°)")
    ax.plot(*X.numpy().T, "o", color=DATA, ms=3.5, alpha=0.6, mew=0)
    ax.plot(*_ellipse(C, 2).T, color=TARGET, lw=2)
    for vec, val in ((major, w[1]), (minor, w[0])):
        end = (2 * val.sqrt() * vec).numpy()
        ax.plot([-end[0], end[0]], [-end[1], end[1]], color=TARGET, lw=1, ls="--")
    for k, i in enumerate(picks, start=1):
        ax.plot(*X[i].numpy(), "o", color=HIGHLIGHT, ms=8, mec=TARGET, mew=1, zorder=4)
        ax.annotate(str(k), X[i].numpy(), xytext=(5, 4), textcoords="offset points", fontsize=SMALL,
                    fontweight="bold", zorder=5)
    for ax, (name, Z) in zip(axes[1:], whitened.items()):
        move = (X - Z).square().sum(-1).mean().item()
        formula = r"$Z = XC^{-1/2}$" if name == "ZCA" else r"$Z = XV\Lambda^{-1/2}$"
        frame(ax, f"{name}: {formula}\nmean move ‖x − z‖² = {move:.2f}")
        ax.plot(*X.numpy().T, "o", color=MUTED, ms=3, alpha=0.5, mew=0, zorder=1)
        ax.plot(*Z.numpy().T, "o", color=DATA, ms=3.5, alpha=0.6, mew=0, zorder=2)
        ax.plot(*_ellipse(covariance(Z), 2).T, color=TARGET, lw=2, zorder=3)
        for k, i in enumerate(picks, start=1):
            start, end = X[i].numpy(), Z[i].numpy()
            ax.annotate("", end, start, arrowprops=dict(arrowstyle="-|>", color=HIGHLIGHT, lw=2, shrinkA=3, shrinkB=4),
                        zorder=4)
            ax.plot(*start, "o", color=MUTED, ms=7, mec=BOUND, mew=1, zorder=4)
            ax.plot(*end, "o", color=HIGHLIGHT, ms=8, mec=TARGET, mew=1, zorder=5)
            ax.annotate(str(k), end, xytext=(5, 4), textcoords="offset points", fontsize=SMALL, fontweight="bold",
                        zorder=6)
    axes[0].text(-lim * 0.97, lim * 0.97, "ellipse: 2σ of C", ha="left", va="top", fontsize=SMALL, color=TARGET)
    axes[1].text(-lim * 0.97, lim * 0.97, "circle: 2σ of I", ha="left", va="top", fontsize=SMALL, color=TARGET)
    axes[2].text(-lim * 0.97, lim * 0.97, "grey: where\nthe points were", ha="left", va="top", fontsize=SMALL, color=BOUND)
    return fig


# ----------------------------------------------------------------------------- §3.2
def reachable_alignment(batches: Sequence[int] = (4, 8, 16, 32, 64, 128, 256), d_in: int = 16, kappa: float = 100.0,
                        degrees: float = 30.0, draws: int = 20, seed: int = 20) -> dict[str, np.ndarray]:
    r"""Mean cosines of the feature move with ``-G`` and with the reachable steepest move
    ``-P_X G``, for raw inputs (``ΔY = -η XXᵀG``) and whitened ones (``ΔY = -η PG``), over
    ``draws`` Gaussian batches and upstream gradients ``G`` per batch size.
    ``P_X`` is the projector onto the column space of ``X`` (``I`` when ``b <= d_in``)."""
    gen = generator(seed)
    out = {k: [] for k in ("raw_G", "raw_PG", "white_G", "white_PG")}
    for b in batches:
        X = features.gaussian_features(b, d_in, kappa, math.radians(degrees), generator=gen, sample_shape=(draws,))
        G = torch.randn(draws, b, 8, generator=gen, dtype=torch.float64)
        Z = X @ inverse_sqrt(X.mT @ X)              # whitened (pseudo-inverse root when b < d_in)
        P = Z @ Z.mT                                # projector onto col(X)
        moves = {"raw": -(X @ (X.mT @ G)), "white": -(P @ G)}
        for name, dY in moves.items():
            for target, T in (("G", -G), ("PG", -(P @ G))):
                cos = (dY * T).sum((-2, -1)) / (torch.linalg.matrix_norm(dY) * torch.linalg.matrix_norm(T))
                out[f"{name}_{target}"].append(cos.mean().item())
    return {"batches": np.asarray(batches), "d_in": d_in, **{k: np.asarray(v) for k, v in out.items()}}


def reachable(data: Mapping[str, np.ndarray]) -> Figure:
    """Cosines of the feature move with ``-G`` (dashed) and with ``-P_X G`` (solid) against
    the batch size, for raw and whitened inputs (see :func:`reachable_alignment`)."""
    fig = Figure(figsize=(style.FIG_WIDTH, 3.5))
    ax = fig.add_subplot()
    b, d_in = data["batches"], data["d_in"]
    for name, method in (("white", "zca"), ("raw", "none")):
        word = "whitened" if name == "white" else "raw"
        ax.plot(b, data[f"{name}_PG"], **method_line(method, linestyle="-", label=f"{word}, against −P_X G"))
        ax.plot(b, data[f"{name}_G"], **method_line(method, linestyle="--", mfc=PAPER, label=f"{word}, against −G"))
    fine = np.geomspace(b[0], b[-1], 100)
    ax.plot(fine, np.sqrt(np.minimum(fine, d_in) / fine), color=BOUND, lw=1.5, ls=":", zorder=0)
    ax.annotate("rank bound √(d_in / b)", (48, math.sqrt(d_in / 48)), xytext=(40, 0.8), color=BOUND, fontsize=SMALL,
                arrowprops=dict(arrowstyle="-", color=BOUND, lw=1))
    ax.axvline(d_in, color=MUTED, lw=1.5, zorder=0)
    ax.text(d_in * 1.05, 0.03, f"b = d_in = {d_in}", color=BOUND, fontsize=SMALL, va="bottom")
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(b), [str(v) for v in b])
    ax.minorticks_off()
    ax.set(ylim=(0, 1.05), xlabel="batch size b", ylabel="cosine of ΔY with the target")
    ax.set_title(f"Whitened inputs: cos(ΔY, −P_X G) = {data['white_PG'].min():.3f} at every b; raw inputs fall short")
    ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=SMALL)
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- §3.3
def rotation_distances(distances: torch.Tensor, zca: float, pca: float) -> Figure:
    """Histogram of the mean squared move ``‖x − z‖²`` of Haar-random rotations of ZCA,
    with ZCA, PCA and the best of the random rotations marked."""
    fig = Figure(figsize=(style.FIG_WIDTH, 3.2))
    ax = fig.add_subplot()
    values = distances.numpy()
    ax.hist(values, bins=60, color=MUTED, edgecolor=PAPER, linewidth=0.5)
    top = ax.get_ylim()[1]
    marks = ((zca, "ZCA", method_color("zca")), (pca, "PCA", method_color("pca")),
             (values.min(), f"best of {len(values):,} random", BOUND))
    for (value, name, color), height, side in zip(marks, (0.97, 0.97, 0.62), ("left", "right", "left")):
        ax.axvline(value, color=color, lw=2.5)
        label = f" {name} {value:.2f} " if side == "left" else f" {name} {value:.2f} "
        ax.text(value, top * height, label, color=color, va="top", ha=side, fontsize=SMALL)
    ax.set(xlabel=r"mean squared move $\|x - z\|^2$ of the whitening $XC^{-1/2}Q$", ylabel="rotations Q",
           xlim=(0, None))
    ax.set_title(f"No rotation of ZCA moves the data less: ZCA {zca:.2f}, best random rotation {values.min():.2f}")
    fig.tight_layout()
    return fig


def axis_swap(correlations: Mapping[str, torch.Tensor]) -> Figure:
    """Heatmaps of the correlation of input coordinate i (rows) with output coordinate j
    (columns), one per whitening, with the values written in the cells."""
    fig = Figure(figsize=(style.FIG_WIDTH, 3.3))
    axes = fig.subplots(1, len(correlations))
    image = None
    for ax, (name, corr) in zip(axes, correlations.items()):
        values = corr.numpy()
        image = ax.imshow(values, cmap="RdBu_r", vmin=-1, vmax=1)
        n = values.shape[0]
        for i in range(n):
            for j in range(n):
                v = values[i, j]
                ax.text(j, i, f"{v:.2f}".replace("-0.00", "0.00"), ha="center", va="center", fontsize=SMALL,
                        color=PAPER if abs(v) > 0.6 else TARGET)
        ax.set_xticks(range(n), [f"z{j + 1}" for j in range(n)])
        ax.set_yticks(range(n), [f"x{i + 1}" for i in range(n)])
        source = [f"x{i + 1}" for i in np.abs(values).argmax(0)]
        mapping = ", ".join(f"z{j + 1} ← {x}" for j, x in enumerate(source))
        ax.set_title(f"{name}\n{mapping}", loc="center", fontsize=style.FONT_SIZE)
    style.colorbar(fig, image, list(axes), "correlation of x_i with z_j")
    return fig


# ----------------------------------------------------------------------------- §3.4
def diagonals(X: torch.Tensor) -> Figure:
    """Left: the diagonal of the covariance before and after BatchNorm. Right: the diagonal
    of the Gram matrix (divided by d) before and after RMSNorm."""
    fig = Figure(figsize=(style.FIG_WIDTH, 3.2))
    left, right = fig.subplots(1, 2)
    b, d = X.shape
    bn, rms = normalization.batch_norm(X), normalization.rms_norm(X)
    for ax, before, after, name, method, what in (
            (left, covariance(X).diagonal(), covariance(bn).diagonal(), "BatchNorm", "batch", "feature"),
            (right, (X @ X.T).diagonal() / d, (rms @ rms.T).diagonal() / d, "RMSNorm", "rms", "sample")):
        index = np.arange(1, len(before) + 1)
        ax.plot(index, before.numpy(), "o", color=MUTED, mec=BOUND, ms=6, label="before")
        ax.plot(index, after.numpy(), **method_line(method, linestyle="none", label=f"after {name}"))
        ax.set(xlabel=f"{what} index", ylim=(0, 1.3 * before.max().item()))
        spread = lambda v: (v.max() / v.min()).item()
        ax.legend(loc="upper left", fontsize=SMALL, ncol=2,
                  title=f"largest / smallest: {spread(before):.1f} before, {spread(after):.2f} after", title_fontsize=SMALL)
    left.set_ylabel("diagonal of XᵀX / b")
    right.set_ylabel("diagonal of XXᵀ / d")
    left.set_title("BatchNorm equalizes the covariance diagonal")
    right.set_title("RMSNorm equalizes the Gram diagonal")
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- §3.5
def isotropy_bars(results: Mapping[tuple, Mapping[str, Sequence[float]]], shapes: Sequence[tuple[int, int]]) -> Figure:
    """Grouped bars: for each batch shape (rows) the isotropy of the side that can reach 1
    (covariance for b > d, Gram for b < d) and the alignment ``cos(ΔY, −G)`` (columns), per
    method, at rotation 0° (solid) and 45° (hatched). ``results[(b, d, degrees)][method]``
    holds ``[r_eff, gram, cov, cos]``."""
    fig = Figure(figsize=(style.FIG_WIDTH, 5.4))
    axes = fig.subplots(len(shapes), 2, squeeze=False)
    methods = normalization.METHODS
    x = np.arange(len(methods))
    for row, (b, d) in zip(axes, shapes):
        side, column = ("covariance", 2) if b > d else ("Gram", 1)
        ceiling = min(b, d) / (d if b > d else b)
        for ax, col, ylabel, limit in ((row[0], column, f"{side}-side isotropy", ceiling),
                                       (row[1], 3, "cos(ΔY, −G)", math.sqrt(min(b, d) / b))):
            for shift, degrees, hatch, alpha in ((-0.2, 0, None, 1.0), (0.2, 45, "///", 0.45)):
                values = [results[(b, d, degrees)][m][col] for m in methods]
                ax.bar(x + shift, values, width=0.4, color=[method_color(m) for m in methods], alpha=alpha,
                       hatch=hatch, edgecolor=PAPER if hatch is None else TARGET, linewidth=0.5,
                       label=f"rotation {degrees}°")
                for xi, v, m in zip(x + shift, values, methods):
                    if m == "batch" and col != 3:
                        ax.text(xi + (-0.1 if degrees == 0 else 0.1), v + 0.02, f"{v:.2f}", ha="center", va="bottom",
                                fontsize=SMALL)
            ax.axhline(limit, color=BOUND, ls="--", lw=1.5)
            ax.set_xticks(x, [SHORT_LABELS[m] for m in methods])
            ax.set(ylim=(0, 1.12), ylabel=ylabel)
            ax.set_title(f"b = {b}, d = {d}", fontsize=style.FONT_SIZE)
        row[0].text(len(methods) - 0.5, ceiling + 0.01, "ceiling", ha="right", va="bottom", fontsize=SMALL, color=BOUND)
        row[1].text(len(methods) - 0.5, math.sqrt(min(b, d) / b) + 0.01, "√(min(b, d)/b)", ha="right", va="bottom",
                    fontsize=SMALL, color=BOUND)
    from matplotlib.patches import Patch
    handles = [Patch(facecolor=BOUND, label="Σ diagonal (0°)"),
               Patch(facecolor=BOUND, alpha=0.45, hatch="///", edgecolor=TARGET, label="Σ rotated by 45°")]
    axes[0, 1].legend(handles=handles, loc="upper left", fontsize=SMALL, ncol=2)
    fig.tight_layout()
    return fig


def kappa_sweep(kappas: Sequence[float], curves: Mapping[tuple, Sequence[float]], b: int, d: int,
                isotropic: float) -> Figure:
    """Covariance-side isotropy against κ for none, BatchNorm, RMSNorm and ZCA, with Σ
    diagonal (solid) and rotated by 45° (dashed). ``curves[(method, degrees)]``."""
    fig = Figure(figsize=(style.FIG_WIDTH, 3.6))
    ax = fig.add_subplot()
    for degrees, ls in ((0, "-"), (45, "--")):
        for m in ("none", "batch", "rms", "zca"):
            ax.plot(kappas, curves[(m, degrees)], **method_line(m, linestyle=ls, label=None,
                                                                  mfc=PAPER if degrees else None))
    for m, dy in (("zca", 6), ("batch", 0), ("none", -6), ("rms", 6)):
        ax.annotate(METHOD_LABELS[m], (kappas[-1], curves[(m, 45)][-1]), xytext=(6, dy), textcoords="offset points",
                    color=method_color(m), va="center", fontsize=SMALL)
    ax.axhline(isotropic, color=BOUND, lw=1.5, ls=":")
    ax.text(kappas[-1], isotropic + 0.02, f"isotropic batch of this size: {isotropic:.2f}", color=BOUND, va="bottom",
            ha="right", fontsize=SMALL)
    ax.text(kappas[0], 0.05, "solid: Σ diagonal (0°)    dashed: Σ rotated (45°)", fontsize=SMALL, va="bottom")
    ax.set_xscale("log")
    log_ticks(ax.xaxis, range(int(round(math.log10(kappas[0]))), int(round(math.log10(kappas[-1]))) + 1))
    ax.set(ylim=(0, 1.05), xlim=(kappas[0] / 1.3, kappas[-1] * 4), xlabel=f"condition number κ of Σ  (b = {b}, d = {d})",
           ylabel="covariance-side isotropy r/d")
    ax.set_title("What each normalization leaves of the spectrum")
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- §3.6
#: One learning-rate grid for every input variant: 7 values, a factor 2 apart.
LR_GRID = tuple(0.01 * 2.0 ** k for k in range(7))
VARIANTS = ("raw", "batch", "zca")


class TrainingRun(NamedTuple):
    """Loss curves of :func:`train_inputs`: ``loss[variant]`` has shape
    ``(len(lrs), len(seeds), len(steps))``; non-finite entries mark diverged runs."""

    degrees: float
    kappa: float
    steps: np.ndarray
    loss: dict
    lrs: tuple
    seeds: tuple


def _prepare(X: torch.Tensor, variant: str) -> torch.Tensor:
    """The inputs a variant trains on, from training-set statistics: ``raw``; ``batch``,
    each feature standardized (what BatchNorm computes, here over the whole training set);
    ``zca``, centered and ZCA-whitened."""
    if variant == "raw":
        return X
    if variant == "batch":
        return normalization.batch_norm(X)
    if variant == "zca":
        return whiten(X, center=True, kind="zca")
    raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")


def train_inputs(degrees: float = 45.0, *, kappa: float = 100.0, d: int = 16, hidden: int = 32, n: int = 512,
                 steps: int = 300, batch: int = 32, lrs: Sequence[float] = LR_GRID, seeds: Sequence[int] = range(5),
                 noise: float = 0.1, teacher_scale: float = 0.5, variants: Sequence[str] = VARIANTS) -> TrainingRun:
    r"""Train the MLP ``ŷ = tanh(x W₁) W₂`` (``d → hidden → 1``, float64) by minibatch SGD
    on the squared error, once per input variant, learning rate and seed, batched over
    learning rates and seeds.

    Per seed: ``n`` inputs ``x = z Λ^{1/2} R(θ)ᵀ`` with ``z ~ N(0, I_d)`` (the construction
    of :func:`isolab.book.features.gaussian_features`, condition number ``kappa``, rotation
    ``degrees``), targets from a random tanh teacher of the *latent* ``z`` plus ``noise``
    (relative), standardized to unit variance, so every direction of ``z`` matters; the
    student's ``W₁ ~ N(0, 1/d)``, ``W₂ = 0``; and one sequence of minibatches. Seeds,
    data, initial weights and minibatches are the same for every variant and learning
    rate: only the inputs' preprocessing and the learning rate differ. The loss on the
    whole training set is recorded every 2 steps up to step 50 and every 10 steps after
    (it starts at 1: ``W₂ = 0`` predicts 0, and the target has unit variance)."""
    seeds = tuple(seeds)
    lam = features.spectrum(d, kappa)
    R = features.pair_rotation(d, math.radians(degrees))
    data, targets, init, order = [], [], [], []
    for seed in seeds:
        gen = generator(1000 + seed)
        z = torch.randn(n, d, generator=gen, dtype=torch.float64)
        t1 = torch.randn(d, hidden, generator=gen, dtype=torch.float64) * (teacher_scale / math.sqrt(d))
        t2 = torch.randn(hidden, 1, generator=gen, dtype=torch.float64) / math.sqrt(hidden)
        y = torch.tanh(z @ t1) @ t2
        y = y + noise * y.std() * torch.randn(n, 1, generator=gen, dtype=torch.float64)
        targets.append((y - y.mean()) / y.std())
        data.append((z * lam.sqrt()) @ R.T)
        init.append(torch.randn(d, hidden, generator=gen, dtype=torch.float64) / math.sqrt(d))
        order.append(torch.randint(n, (steps, batch), generator=gen))
    Y, W1_init, order = torch.stack(targets), torch.stack(init), torch.stack(order)    # (S,n,1) (S,d,h) (S,T,B)
    lr = torch.tensor(list(lrs), dtype=torch.float64)[:, None, None, None]
    seed_index = torch.arange(len(seeds))[:, None]
    record = set(range(0, min(50, steps), 2)) | set(range(50, steps, 10)) | {steps}
    losses = {}
    for variant in variants:
        X = torch.stack([_prepare(x, variant) for x in data])                      # (S,n,d)
        W1 = W1_init.expand(len(lrs), -1, -1, -1).clone()
        W2 = torch.zeros(len(lrs), len(seeds), hidden, 1, dtype=torch.float64)
        curve = []
        for t in range(steps + 1):
            if t in record:
                curve.append((torch.tanh(X @ W1) @ W2 - Y).square().mean((-2, -1)))
            if t == steps:
                break
            xb, yb = X[seed_index, order[:, t]], Y[seed_index, order[:, t]]      # (S,B,d), (S,B,1)
            h = torch.tanh(xb @ W1)                                                # (L,S,B,h)
            r = (h @ W2 - yb) * (2.0 / batch)
            grad_W2 = h.mT @ r
            grad_W1 = xb.mT @ ((r @ W2.mT) * (1 - h * h))
            W1 = (W1 - lr * grad_W1).nan_to_num(nan=1e6).clamp(-1e6, 1e6)         # a diverged run stays finite
            W2 = (W2 - lr * grad_W2).nan_to_num(nan=1e6).clamp(-1e6, 1e6)
        loss = torch.stack(curve, -1)
        losses[variant] = torch.where(loss < 1e3, loss, torch.inf)               # diverged: inf
    return TrainingRun(float(degrees), float(kappa), np.array(sorted(record)), losses, tuple(lrs), seeds)


def lr_scores(run: TrainingRun) -> dict[str, torch.Tensor]:
    """Per variant and learning rate: the median over seeds of the mean loss over the run
    (the area under the loss curve, which rewards reaching a low loss early)."""
    return {v: loss.mean(-1).median(-1).values for v, loss in run.loss.items()}


def best_lr(run: TrainingRun) -> dict[str, int]:
    """Index into ``run.lrs`` of each variant's best learning rate (see :func:`lr_scores`)."""
    return {v: int(score.argmin()) for v, score in lr_scores(run).items()}


def steps_to(run: TrainingRun, threshold: float) -> dict[str, np.ndarray]:
    """Per variant, at its best learning rate: the first recorded step at which each
    seed's loss is at most ``threshold`` (``inf`` if never)."""
    out = {}
    for v, i in best_lr(run).items():
        below = (run.loss[v][i] <= threshold).numpy()
        out[v] = np.where(below.any(-1), run.steps[below.argmax(-1)], np.inf)
    return out


def training_checks(runs: Sequence[TrainingRun], threshold: float = 0.1) -> list[Check]:
    """What §3.6 claims about ``runs = [rotated (45°), diagonal (0°)]``, as checks: each
    chosen learning rate lies strictly inside the grid; with Σ rotated, whitened inputs
    reach ``threshold`` in fewer steps than raw and than standardized inputs at every
    seed, while standardizing barely helps; with Σ diagonal, standardizing is as fast as
    whitening (within 2 recorded steps) and both beat raw inputs; and by the last step the
    gap has closed to less than a factor 1.5. Step counts are exact integers of a float64
    run, so the printed values are the same on any CPU."""
    rotated, diagonal = runs
    checks = []
    for run in runs:
        best = best_lr(run)
        checks.append(Check(f"Σ at {run.degrees:.0f}°: each chosen learning rate lies inside the grid",
                            ", ".join(f"{v} {run.lrs[i]:g}" for v, i in best.items()),
                            f"not {run.lrs[0]:g} or {run.lrs[-1]:g}", all(0 < i < len(run.lrs) - 1 for i in best.values())))
    rot, flat = steps_to(rotated, threshold), steps_to(diagonal, threshold)
    listed = lambda r: " ".join(f"{s:.0f}" for s in r)
    ratio = float(np.median(rot["batch"]) / np.median(rot["raw"]))
    final = {v: rotated.loss[v][i][:, -1].median().item() for v, i in best_lr(rotated).items()}
    closed = max(final.values()) / min(final.values())
    checks += [
        Check(f"45°: whitened reaches loss {threshold:g} in fewer steps than raw, at every seed",
              f"{listed(rot['zca'])} vs {listed(rot['raw'])}", "fewer at each seed", bool((rot["zca"] < rot["raw"]).all())),
        Check("    and than BatchNorm, at every seed", f"BatchNorm {listed(rot['batch'])}", "more than whitened",
              bool((rot["zca"] < rot["batch"]).all())),
        Check("    BatchNorm barely helps: median steps, BatchNorm vs raw",
              f"{np.median(rot['batch']):.0f} vs {np.median(rot['raw']):.0f}", "within a factor 1.5", 1 / 1.5 < ratio < 1.5),
        Check("0°: BatchNorm as fast as whitened (within 2 steps, every seed)",
              f"{listed(flat['batch'])} vs {listed(flat['zca'])}", "|difference| <= 2",
              bool((np.abs(flat["batch"] - flat["zca"]) <= 2).all())),
        Check("    and both beat raw at every seed", f"raw {listed(flat['raw'])}", "more steps",
              bool((flat["raw"] > np.maximum(flat["batch"], flat["zca"])).all())),
        Check(f"45°: by step {rotated.steps[-1]} the gap has closed (final median losses)",
              f"largest / smallest {closed:.2f}", "< 1.5", closed < 1.5),
    ]
    return checks


def training(runs: Sequence[TrainingRun], threshold: float) -> Figure:
    """One panel per run: the loss against steps (log axes) for each input variant at its
    best learning rate, median over seeds with a min–max band, and the median number of
    steps to reach ``threshold``; last panel: each variant's score over the learning-rate
    grid (solid: first run, dashed: second), its choice circled."""
    fig = Figure(figsize=(style.FIG_WIDTH, 3.8))
    grid = fig.add_gridspec(1, len(runs) + 1, width_ratios=[1.2] * len(runs) + [1], wspace=0.32,
                            left=0.075, right=0.985, top=0.9, bottom=0.14)
    axes = [fig.add_subplot(grid[0, k]) for k in range(len(runs) + 1)]
    for ax, run in zip(axes, runs):
        best, reach = best_lr(run), steps_to(run, threshold)
        steps = np.maximum(run.steps, 1)
        lines = []
        for v in run.loss:
            loss, color = run.loss[v][best[v]], method_color(VARIANT_METHOD[v])
            ax.fill_between(steps, loss.amin(0).numpy(), loss.amax(0).numpy(), color=color, alpha=0.18, lw=0)
            ax.plot(steps, loss.median(0).values.numpy(), **method_line(VARIANT_METHOD[v], markers=False, label=VARIANT_LABELS[v]))
            median = np.median(reach[v])
            lines.append((f"{VARIANT_LABELS[v].split(' (')[0]}: {median:.0f}" if np.isfinite(median)
                          else f"{VARIANT_LABELS[v].split(' (')[0]}: never", color))
        ax.axhline(threshold, color=BOUND, lw=1, ls=":")
        ax.text(1.2, threshold * 0.93, f"loss {threshold:g}", color=BOUND, va="top", fontsize=SMALL)
        ax.text(0.98, 0.97, f"steps to {threshold:g} (median):", transform=ax.transAxes, ha="right", va="top",
                fontsize=SMALL)
        for k, (text, color) in enumerate(lines[::-1]):
            ax.text(0.98, 0.88 - 0.09 * k, text, transform=ax.transAxes, ha="right", va="top", fontsize=SMALL,
                    color=color)
        ax.set_xscale("log")
        ax.set_yscale("log")
        log_ticks(ax.xaxis, [0, 1, 2])
        log_ticks(ax.yaxis, [-2, -1, 0])
        ax.set(xlabel="SGD step", xlim=(1, run.steps[-1]), ylim=(0.01, 1.5))
        where = "rotated by 45°" if run.degrees else "diagonal (0°)"
        ax.set_title(f"Σ {where}, κ = {run.kappa:g}", fontsize=style.FONT_SIZE)
    axes[0].set_ylabel("training loss (1 = predict 0)")
    ax = axes[-1]
    for run, ls in zip(runs, ("-", "--")):
        scores, best = lr_scores(run), best_lr(run)
        for v, score in scores.items():
            m = VARIANT_METHOD[v]
            shown = torch.where(torch.isfinite(score), score, torch.nan).numpy()
            ax.plot(run.lrs, shown, **method_line(m, linestyle=ls, mfc=PAPER if ls == "--" else None))
            ax.plot(run.lrs[best[v]], shown[best[v]], "o", ms=14, mfc="none", mec=method_color(m), mew=1.5)
    lrs = runs[0].lrs
    ax.set_xscale("log", base=2)
    ax.set_xticks([lrs[0], lrs[3], lrs[-1]], [f"{lrs[0]:g}", f"{lrs[3]:g}", f"{lrs[-1]:g}"])
    ax.minorticks_off()
    ax.set_yscale("log")
    log_ticks(ax.yaxis, [-1, 0])
    ax.set(xlabel="learning rate", ylabel="mean loss over the run", xlim=(lrs[0] / 1.5, lrs[-1] * 1.5))
    ax.set_title("one grid for all three", fontsize=style.FONT_SIZE)
    ax.text(0.97, 0.97, "circled: chosen\nsolid 45°, dashed 0°\nmissing: diverged", transform=ax.transAxes,
            fontsize=SMALL, va="top", ha="right")
    return fig


# ----------------------------------------------------------------------------- §3.7
class ActivationStats(NamedTuple):
    """How isotropic and how diagonal one layer's activations ``H`` (``b × d``) are."""

    isotropy: dict      # method -> centered covariance-side isotropy after that normalization
    offdiagonal: float  # off-diagonal share of ‖R‖²_F, R the correlation matrix (= BatchNorm's output covariance)
    batchnorm_share: float  # (BatchNorm - none) / (ZCA - none): how much of whitening's gain BatchNorm gets
    top_share: float    # share of the centered variance in the top (classes - 1) principal directions
    dead: int           # units that are zero on every input
    correlation: torch.Tensor  # R over the live units


def correlation(H: torch.Tensor) -> torch.Tensor:
    """The correlation matrix of the columns of ``H`` that vary (live units)."""
    Hc = H - H.mean(0)
    C = Hc.T @ Hc / H.shape[0]
    live = C.diagonal() > 1e-12 * C.diagonal().max()
    C = C[live][:, live]
    s = C.diagonal().rsqrt()
    return s[:, None] * C * s[None, :]


def offdiagonal_share(R: torch.Tensor) -> float:
    """``‖R − diag R‖²_F / ‖R‖²_F``: 0 for a diagonal matrix."""
    return ((R - torch.diag(R.diagonal())).square().sum() / R.square().sum()).item()


def centered_isotropy(Z: torch.Tensor) -> float:
    """The covariance-side isotropy of ``Z`` about its mean: how evenly ``Cov(Z)`` spreads
    over the directions, the question of correlations (a common mean, such as that of
    ReLU outputs, is a rank-one term of ``ZᵀZ`` that says nothing about them)."""
    return isotropy.feature_isotropy(Z - Z.mean(0), "covariance").item()


def _normalized(H: torch.Tensor, method: str) -> torch.Tensor:
    """``H`` after ``method``; ZCA centers first, as BatchNorm and LayerNorm do, so that its
    output covariance is the identity."""
    return whiten(H, center=True) if method == "zca" else normalization.normalize(H, method)


def activation_stats(H: torch.Tensor, classes: int) -> ActivationStats:
    """See :class:`ActivationStats`; every isotropy is the centered one
    (:func:`centered_isotropy`), so that it measures the correlations between units."""
    iso = {m: centered_isotropy(_normalized(H, m)) for m in ("none", "batch", "layer", "rms", "zca")}
    R = correlation(H)
    Hc = H - H.mean(0)
    eig = torch.linalg.eigvalsh(Hc.T @ Hc).flip(0)
    return ActivationStats(iso, offdiagonal_share(R), (iso["batch"] - iso["none"]) / (iso["zca"] - iso["none"]),
                           (eig[:classes - 1].sum() / eig.sum()).item(), int((H.abs().sum(0) == 0).sum()), R)


def activations(stats: Mapping[str, ActivationStats], heatmaps: Sequence[str], reference: float) -> Figure:
    """Left: ``|R|`` (correlations between units) for the layers named in ``heatmaps``.
    Right: covariance-side isotropy after each normalization, for every layer in
    ``stats``, with BatchNorm's share of whitening's gain written above its bar.
    ``reference`` is the off-diagonal share of an isotropic Gaussian batch of the same shape."""
    fig = Figure(figsize=(style.FIG_WIDTH, 3.8))
    n = len(heatmaps)
    left = fig.add_gridspec(1, n, left=0.01, right=0.44, top=0.8, bottom=0.12, wspace=0.08)
    maps = [fig.add_subplot(left[0, k]) for k in range(n)]
    image = None
    for ax, name in zip(maps, heatmaps):
        image = ax.imshow(stats[name].correlation.abs().numpy(), cmap="cividis", vmin=0, vmax=1, interpolation="nearest")
        ax.set(xticks=[], yticks=[])
        ax.set_title(f"{name}\noff-diagonal share {stats[name].offdiagonal:.2f}", loc="center", fontsize=SMALL)
    bar = fig.colorbar(image, ax=maps, orientation="horizontal", fraction=0.06, pad=0.04, aspect=30)
    bar.set_label(f"|correlation| of two units (isotropic batch: share {reference:.2f})", fontsize=SMALL)
    bar.ax.tick_params(labelsize=SMALL)
    ax = fig.add_subplot(fig.add_gridspec(1, 1, left=0.55, right=0.99, top=0.8, bottom=0.2)[0, 0])
    methods = ("none", "batch", "layer", "rms", "zca")
    names = list(stats)
    width = 0.8 / len(methods)
    for j, m in enumerate(methods):
        x = np.arange(len(names)) + (j - (len(methods) - 1) / 2) * width
        values = [stats[name].isotropy[m] for name in names]
        ax.bar(x, values, width=width, color=method_color(m), label=SHORT_LABELS[m])
        if m == "batch":
            for xi, v, name in zip(x, values, names):
                ax.text(xi, v + 0.03, f"{stats[name].batchnorm_share:.0%}", ha="center", va="bottom", fontsize=SMALL,
                        color=method_color(m))
    ax.set_xticks(range(len(names)), [name.replace(", ", "\n") for name in names], fontsize=SMALL)
    ax.set(ylim=(0, 1.05), ylabel="isotropy of Cov(Z), centered")
    ax.legend(loc="lower left", bbox_to_anchor=(0.0, 1.0), fontsize=SMALL, ncol=5, handlelength=1.0, columnspacing=0.8,
              borderaxespad=0.2)
    fig.text(0.55, 0.95, "% over the BatchNorm bar: its share of whitening's gain", fontsize=SMALL)
    fig.text(0.01, 0.95, "Correlations between units of the middle layer", fontsize=style.FONT_SIZE)
    return fig


# ----------------------------------------------------------------------------- §3.8 explorable
D_EXPLORE = 16
ANGLES = tuple(range(0, 50, 5))            # main slider: 10 values, 0° .. 45°
KAPPAS = (10, 1000)
BATCHES = (8, 128)
#: Methods whose result depends on X only through XXᵀ: turning the cloud changes nothing.
GRAM_ONLY = ("none", "rms", "zca", "pca")
SPECTRUM_FLOOR = 1e-4


def _sampler(batch: int, d: int, kappa: float, angle: float, generator: torch.Generator) -> torch.Tensor:
    return features.gaussian_features(batch, d, kappa, angle, generator=generator)


@functools.lru_cache(maxsize=512)
def normalization_data(kappa: float, angle: float, batch: int, sampler: Callable = _sampler) -> dict:
    """What the explorable draws at one setting: the batch (``d = 16``, seed 11) after each
    normalization, the eigenvalues of ``ZᵀZ/b`` over their mean, and the isotropy on both
    sides. ``sampler(b, d, κ, θ, generator)`` draws the batch (the book's
    :func:`isolab.book.features.gaussian_features` by default: the same cloud turned by θ)."""
    X = sampler(batch, D_EXPLORE, float(kappa), math.radians(angle), generator(11))
    rank = min(batch, D_EXPLORE)
    out = {"rank": rank, "batch": batch, "clouds": {}, "spectrum": {}, "cov": {}, "gram": {}}
    for m in normalization.METHODS:
        Z = normalization.normalize(X, m)
        out["clouds"][m] = Z[:, [0, -1]]
        eig = torch.linalg.eigvalsh(covariance(Z)).flip(0)[:rank]
        out["spectrum"][m] = (eig / eig.mean()).clamp_min(SPECTRUM_FLOOR)
        out["cov"][m] = isotropy.feature_isotropy(Z, "covariance").item()
        out["gram"][m] = isotropy.feature_isotropy(Z, "gram").item()
    return out


def _gram_only_view(kappa, angle, batch, sampler=_sampler) -> np.ndarray:
    data = normalization_data(kappa, angle, batch, sampler)
    return np.concatenate([np.r_[data["cov"][m], data["gram"][m], data["spectrum"][m].numpy()] for m in GRAM_ONLY])


def _batchnorm_vs_zero(kappa, angle, batch, sampler=_sampler) -> tuple[float, float]:
    return (normalization_data(kappa, angle, batch, sampler)["cov"]["batch"],
            normalization_data(kappa, 0, batch, sampler)["cov"]["batch"])


def _whitening_at_ceilings(kappa, angle, batch, sampler=_sampler) -> tuple[float, ...]:
    data = normalization_data(kappa, angle, batch, sampler)
    rank = data["rank"]
    return tuple(abs(data[side][m] - rank / (D_EXPLORE if side == "cov" else batch))
                 for m in ("zca", "pca") for side in ("cov", "gram"))


class _Unchanged:
    """Holds when every measured vector equals the first (θ = 0°) to ``atol``."""

    def __init__(self, atol: float):
        self.atol = atol

    def __call__(self, values) -> bool:
        v = np.asarray(values, dtype=float)
        return bool(np.abs(v - v[0]).max() <= self.atol)

    def __repr__(self) -> str:
        return f"the same at every θ (to {self.atol:g})"


def draw_normalizations(fig: Figure, kappa: float, angle: float, batch: int, sampler: Callable = _sampler) -> None:
    """Left: the batch in the plane of coordinates 1 and d after each normalization (each
    cloud rescaled to its cell). Middle: the spectrum of ``ZᵀZ/b`` over its mean. Right:
    isotropy on the covariance side (solid) and the Gram side (hatched) with the ceilings."""
    if batch < 2:
        raise FigureMessage("BatchNorm needs at least two samples: with b = 1 every feature is zero.")
    data = normalization_data(kappa, angle, batch, sampler)
    methods = normalization.METHODS
    ax_cloud, ax_spec, ax_bar = fig.subplots(1, 3, gridspec_kw={"width_ratios": [1.25, 1, 1]})
    shown, frame, points, colors = min(batch, 150), [], [], []
    for k, m in enumerate(methods):
        cx, cy = 2.5 * (k % 3), -2.75 * (k // 3)
        Z = data["clouds"][m][:shown]
        points.append(torch.tensor([cx, cy]) + 0.95 * Z / Z.abs().max())
        colors += [method_color(m)] * shown
        frame += [(cx - 1, cy - 1), (cx + 1, cy - 1), (cx + 1, cy + 1), (cx - 1, cy + 1), (cx - 1, cy - 1),
                  (math.nan, math.nan), (cx - 1, cy), (cx + 1, cy), (math.nan, math.nan), (cx, cy - 1), (cx, cy + 1),
                  (math.nan, math.nan)]
        ax_cloud.text(cx, cy + 1.08, SHORT_LABELS[m], ha="center", va="bottom", fontsize=SMALL,
                      color=style.text_color(method_color(m)))
    ax_cloud.plot(*zip(*frame), color=MUTED, lw=0.8)
    points = torch.cat(points)
    ax_cloud.scatter(points[:, 0], points[:, 1], s=4 if batch > 32 else 14, c=colors, linewidths=0)
    ax_cloud.set(xlim=(-1.1, 6.1), ylim=(-3.85, 1.75), xticks=[], yticks=[], aspect="equal")
    ax_cloud.set_xlabel("coordinate 1", fontsize=SMALL)
    ax_cloud.set_ylabel("coordinate d", fontsize=SMALL)
    ax_cloud.set_title("the batch after each", loc="left", fontsize=SMALL)
    for spine in ax_cloud.spines.values():
        spine.set_visible(False)

    rank = data["rank"]
    index = np.arange(1, rank + 1)
    for m in methods:
        ax_spec.plot(index, data["spectrum"][m].numpy(), color=method_color(m), lw=1.8, ls=_METHOD_LOOK[m][2],
                     label=SHORT_LABELS[m])
    ax_spec.set_yscale("log")
    log_ticks(ax_spec.yaxis, [-4, -2, 0])
    ax_spec.set(xlim=(0.5, D_EXPLORE + 0.5), ylim=(SPECTRUM_FLOOR / 1.5, 60), xticks=[1, 8, 16])
    ax_spec.set_xlabel("eigenvalue index", fontsize=SMALL)
    ax_spec.set_ylabel("eigenvalue / mean", fontsize=SMALL)
    ax_spec.set_title(f"spectrum of ZᵀZ/b\nb = {batch}", loc="left", fontsize=SMALL)
    ax_spec.legend(loc="lower left", ncol=2, fontsize=SMALL, handlelength=1.6, columnspacing=0.8, labelspacing=0.2,
                   borderaxespad=0.1)

    x = np.arange(len(methods))
    bar_colors = [method_color(m) for m in methods]
    ax_bar.bar(x - 0.2, [data["cov"][m] for m in methods], width=0.4, color=bar_colors)
    ax_bar.bar(x + 0.2, [data["gram"][m] for m in methods], width=0.4, color=bar_colors, alpha=0.4, hatch="///",
               edgecolor=TARGET, linewidth=0.5)
    ax_bar.axhline(rank / D_EXPLORE, color=BOUND, lw=1.2, ls=":")
    ax_bar.axhline(rank / batch, color=BOUND, lw=1.2, ls="--")
    ax_bar.set_xticks(x, [SHORT_LABELS[m] for m in methods], fontsize=SMALL, rotation=60, ha="right",
                      rotation_mode="anchor")
    ax_bar.set_ylim(0, 1.08)
    ax_bar.set_yticks([0, 0.5, 1], ["0", "0.5", "1"])
    ax_bar.tick_params(axis="y", labelsize=SMALL)
    ax_bar.set_title(f"isotropy: BN {data['cov']['batch']:.2f}\nsolid cov, hatched Gram", loc="left",
                     fontsize=SMALL)


CAPTION = ("Turn θ: the raw cloud turns, but the spectra and bars of none, RMSNorm, ZCA and PCA do not move "
           "(they depend on the batch only through its Gram matrix), and ZCA and PCA sit at both ceilings "
           "(dotted: covariance, min(b,d)/d; dashed: Gram, min(b,d)/b). BatchNorm's covariance isotropy is "
           "highest at θ = 0°, where Σ is diagonal; as θ grows its cloud stays a tilted ellipse. "
           "Clouds: coordinates 1 and d after each normalization; middle: eigenvalues of ZᵀZ/b over their mean.")


def normalizations(sampler: Callable = _sampler) -> Explorable:
    """The chapter's explorable: θ (main), κ and b → the batch after each normalization,
    its spectrum and its isotropy. ``sampler`` exists for the tests (an old way of drawing
    the batch breaks the caption)."""
    draw = functools.update_wrapper(functools.partial(draw_normalizations, sampler=sampler), draw_normalizations)
    return Explorable(
        draw,
        [Slider("angle", ANGLES, label="rotation θ of Σ (°)", default=0),
         Slider("kappa", KAPPAS, label="κ(Σ)", default=1000),
         Slider("batch", BATCHES, label="batch b", default=128)],
        main="angle",
        figsize=(style.COLUMN_WIDTH, 3.4),
        static_colors=24,
        caption=CAPTION,
        alt="Turning the covariance changes what BatchNorm achieves and nothing that sees only the Gram matrix.",
        promises=[
            Promise("the spectra and bars of none, RMSNorm, ZCA and PCA do not move",
                    functools.partial(_gram_only_view, sampler=sampler), _Unchanged(1e-9)),
            Promise("ZCA and PCA sit at both ceilings", functools.partial(_whitening_at_ceilings, sampler=sampler),
                    always(lambda v: max(v) < 1e-9, "ZCA and PCA at both ceilings (to 1e-9)")),
            Promise("BatchNorm's covariance isotropy is highest at θ = 0°",
                    functools.partial(_batchnorm_vs_zero, sampler=sampler),
                    always(lambda v: v[0] <= v[1] + 1e-12, "at most its value at θ = 0°")),
        ],
    )


EXPLORABLES = (normalizations,)
