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

from isolab.book.figures.ch03_style import (  # noqa: E402,F401  (the chapter's names for the methods)
    _METHOD_LOOK, BOUND, DATA, HIGHLIGHT, METHOD_LABELS, MUTED, PAPER, SHORT_LABELS, SMALL, TARGET, method_color,
    method_line,
)


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
    ax_cloud, ax_spec, ax_bar = fig.subplots(1, 3, gridspec_kw={"width_ratios": [1.1, 1, 1]})
    t = np.linspace(0, 2 * math.pi, 120)
    circle = np.stack([np.cos(t), np.sin(t)])
    for m in ("none", "layer", "rms", "batch", "pca", "zca"):
        Z = data["clouds"][m]                                   # coordinates 1 and d
        C = (Z.T @ Z / Z.shape[0]).numpy()
        C = C / (np.trace(C) / 2)                               # the shape, at one scale
        w, V = np.linalg.eigh(C)
        ellipse = V @ (np.sqrt(np.clip(w, 0, None))[:, None] * circle)
        look = _METHOD_LOOK[m]
        ax_cloud.plot(*(1.8 * ellipse), color=look[0], ls=look[2], lw=2.2 if m in ("batch", "zca", "none") else 1.6)
        if m == "batch":
            pts = (Z / np.sqrt(np.trace((Z.T @ Z / Z.shape[0]).numpy()) / 2)).numpy()[:150]
            ax_cloud.scatter(pts[:, 0], pts[:, 1], s=5 if batch > 32 else 16, color=look[0], linewidths=0, alpha=0.6)
    for m, y in (("none", 0.97), ("batch", 0.87), ("zca", 0.77)):
        ax_cloud.text(0.02, y, {"none": "none, LN, RMS", "batch": "BN (dots: its batch)", "zca": "ZCA, PCA"}[m],
                      transform=ax_cloud.transAxes, va="top", color=style.text_color(method_color(m)))
    ax_cloud.set(xlim=(-3.2, 3.2), ylim=(-3.2, 3.6), xticks=[], yticks=[], aspect="equal",
                 xlabel="coordinate 1", ylabel="coordinate d")
    ax_cloud.set_title(f"the batch's shape\nθ = {angle}°, κ = {kappa:g}", loc="left", fontsize=style.FONT_SIZE)

    rank = data["rank"]
    index = np.arange(1, rank + 1)
    for m in methods:
        ax_spec.plot(index, data["spectrum"][m].numpy(), color=method_color(m), lw=1.8, ls=_METHOD_LOOK[m][2],
                     label=SHORT_LABELS[m])
    ax_spec.set_yscale("log")
    log_ticks(ax_spec.yaxis, [-4, -2, 0])
    ax_spec.set(xlim=(0.5, D_EXPLORE + 0.5), ylim=(SPECTRUM_FLOOR / 1.5, 60), xticks=[1, 8, 16])
    ax_spec.set_xlabel("eigenvalue index")
    ax_spec.set_ylabel("eigenvalue / mean")
    ax_spec.set_title(f"spectrum of ZᵀZ/b\nb = {batch}", loc="left", fontsize=style.FONT_SIZE)
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
    ax_bar.set_title(f"isotropy\nBN {data['cov']['batch']:.2f}", loc="left", fontsize=style.FONT_SIZE)
    ax_bar.set_xlabel("solid: covariance\nhatched: Gram", fontsize=SMALL)


CAPTION = ("Drag θ, the rotation of Σ (d = 16 features): the spectra and bars of none, RMSNorm, ZCA and PCA do "
           "not move (they depend on the batch only through its Gram matrix), and ZCA and PCA sit at both ceilings "
           "(dotted: covariance, min(b,d)/d; dashed: Gram, min(b,d)/b). BatchNorm's covariance isotropy is highest "
           "at θ = 0°, where Σ is diagonal; as θ grows its ellipse stays tilted. Left: the covariance ellipse of "
           "coordinates 1 and d after each normalization, every ellipse scaled to one size (a circle: isotropic in "
           "that plane); middle: eigenvalues of ZᵀZ/b over their mean, one line per method; right: the isotropy "
           "r/d (covariance) and r/b (Gram), r the effective rank.")


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
        figsize=(style.COLUMN_WIDTH, 3.6),
        static_colors=24,
        narrow="panels",
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


from isolab.book.figures.ch03_training import (  # noqa: E402,F401  (the chapter calls them as ch03.*)
    LR_GRID, VARIANTS, ActivationStats, TrainingRun, activation_stats, activations, best_lr, centered_isotropy,
    correlation, lr_scores, lr_table, offdiagonal_share, steps_to, train_inputs, training, training_checks,
)
