r"""Figures and the explorable of Chapter 2, *Isotropy and the Gram matrix*.

Each function builds and returns a :class:`matplotlib.figure.Figure` (no pyplot), drawn
in the book's style (:mod:`isolab.book.figures.style`); the chapter computes and checks the
numbers, these functions only draw them. The exceptions are :func:`hero`, which makes
its own small batches, and the explorable :func:`concentration`, whose figure and caption
promises share one computation, :func:`concentration_data`.

* :func:`hero`: ``b`` unit vectors in the plane; orthonormal while ``b <= d``, a tight
  frame past it, with the eigenvalues of ``XXᵀ`` (``d`` equal ones and ``b - d`` zeros).
* :func:`norm_shell` (§2.2), :func:`right_angles` (§2.3), :func:`gram_scale` (§2.4),
  :func:`blind_spot` (§2.5), :func:`dichotomy` (§2.6), :func:`correlated` (§2.7),
  :func:`alignment_scatter` (§2.8).
* :func:`concentration` (§2.9): sliders ``d`` (main), ``b`` and ``κ``.
"""

from __future__ import annotations

import functools
import math
from typing import Mapping, NamedTuple, Sequence

import numpy as np
import torch
from matplotlib.figure import Figure

from isolab.book import features, isotropy
from isolab.book.explorable import Explorable, Promise, Slider, always, nondecreasing, nonincreasing
from isolab.book.figures import style
from isolab.book.plotting import log_ticks, power_of_ten
from isolab.book.seeding import generator

__all__ = [
    "below", "hero", "norm_shell", "right_angles", "gram_scale", "blind_spot", "dichotomy", "correlated",
    "alignment_scatter", "Concentration", "concentration_data", "draw_concentration", "concentration",
    "EXPLORABLES",
]

DATA, TARGET, BOUND, HIGHLIGHT, MUTED = (style.ROLES[k] for k in ("data", "target", "bound", "highlight", "muted"))
SMALL = style.FONT_SIZE - 1   # the smallest text in these figures (10 pt)


def below(value: float, tol: float) -> str:
    """How the chapter prints a rounding-level number: ``"< 1e-12"`` when ``value < tol``
    (its exact digits differ from one CPU to the next), else the value itself."""
    return f"< {tol:g}" if value < tol else f"{value:.1e}"


def _unit_circle(ax) -> None:
    t = np.linspace(0, 2 * np.pi, 200)
    ax.plot(np.cos(t), np.sin(t), color=MUTED, lw=1.5, zorder=0)
    ax.set(xlim=(-1.3, 1.3), ylim=(-1.3, 1.3), aspect="equal", xticks=[], yticks=[])
    for side in ("left", "bottom"):
        ax.spines[side].set_visible(False)


# ----------------------------------------------------------------------------- hero
def hero(d: int = 2, batches: Sequence[int] = (2, 3, 4, 8), seed: int = 13) -> Figure:
    """Top: ``b`` unit vectors in the plane, the best possible batch (orthonormal rows for
    ``b <= d``, the harmonic tight frame past it) as arrows, ``b`` random unit vectors as
    dots. Bottom: the eigenvalues of ``XXᵀ`` for both, with the Gram-side isotropy."""
    if d != 2:
        raise ValueError("the hero figure draws the plane: d = 2")
    fig = Figure(figsize=(style.FIG_WIDTH, 4.7))
    grid = fig.add_gridspec(2, len(batches), height_ratios=[1.25, 1.0], hspace=0.3, wspace=0.3,
                            left=0.08, right=0.99, top=0.855, bottom=0.11)
    gen = generator(seed)
    for col, b in enumerate(batches):
        best = isotropy.tight_frame(b, d) if b >= d else torch.eye(d, dtype=torch.float64)[:b]
        rand = torch.nn.functional.normalize(torch.randn(b, d, generator=gen, dtype=torch.float64), dim=-1)
        top = fig.add_subplot(grid[0, col])
        _unit_circle(top)
        for x, y in best.numpy():
            top.annotate("", (x, y), (0, 0), arrowprops=dict(arrowstyle="-|>", color=HIGHLIGHT, lw=2, shrinkA=0, shrinkB=0))
        for x, y in rand.numpy():
            top.plot([0, x], [0, y], color=DATA, lw=1, alpha=0.6, zorder=1)
        top.plot(*rand.numpy().T, "o", color=DATA, ms=6, zorder=3)
        relation = "<" if b < d else ("=" if b == d else ">")
        top.set_title(f"b = {b} {relation} d", loc="center")

        bottom = fig.add_subplot(grid[1, col])
        index = np.arange(1, b + 1)
        eig_best = torch.linalg.eigvalsh(best @ best.T).flip(0).clamp_min(0).numpy()
        eig_rand = torch.linalg.eigvalsh(rand @ rand.T).flip(0).clamp_min(0).numpy()
        bottom.bar(index, eig_best, width=0.7, color=HIGHLIGHT)
        bottom.plot(index, eig_rand, "o", color=DATA, ms=6, mfc="none", mew=2)
        bottom.set(xticks=index if b <= 4 else [1, 2, b], ylim=(0, 1.7 * max(eig_best.max(), eig_rand.max(), 1)),
                   xlim=(0.4, b + 0.6))
        bottom.set_xlabel("eigenvalue index")
        shape = "XXᵀ = I" if b <= d else f"XXᵀ = {b // d if b % d == 0 else f'{b}/{d}'}·P"
        bottom.set_title(shape, loc="center", color=style.text_color(HIGHLIGHT), fontsize=style.FONT_SIZE)
        iso_best, iso_rand = isotropy.feature_isotropy(best).item(), isotropy.feature_isotropy(rand).item()
        bottom.text(0.98, 0.97, f"isotropy\n{iso_best:.2f} best\n{iso_rand:.2f} random", transform=bottom.transAxes,
                    ha="right", va="top", fontsize=style.FONT_SIZE, linespacing=1.15)
        if col == 0:
            bottom.set_ylabel("eigenvalue of XXᵀ")
    fig.text(0.08, 0.965, "Unit vectors in the plane: best possible (arrows) and random (dots)", fontsize=style.FONT_SIZE + 1,
             ha="left", va="center")
    return fig


# ----------------------------------------------------------------------------- §2.2
def norm_shell(norms: Mapping[int, torch.Tensor], shown: Sequence[int] = (2, 8, 32, 512)) -> Figure:
    """Left: histograms of ``‖x‖/√d`` for the dimensions in ``shown`` with the exact
    law (lines). Right: the variance of ``‖x‖`` against ``d``, simulated (dots) and exact
    (line), between its bounds 0 and 1 and tending to 1/2."""
    fig = Figure(figsize=(style.FIG_WIDTH, 3.6))
    ax_hist, ax_var = fig.subplots(1, 2, gridspec_kw=dict(width_ratios=[1.3, 1]))
    colors = style.sequence(len(shown), stop=0.75)
    radii = np.linspace(0.0, 2.2, 600)
    for d, color in zip(shown, colors):
        r = (norms[d] / math.sqrt(d)).numpy()
        counts, edges = np.histogram(r, bins=np.linspace(0, 2.2, 177), density=True)
        ax_hist.stairs(counts, edges, color=color, lw=1, alpha=0.6)
        exact = math.sqrt(d) * isotropy.norm_density(torch.from_numpy(radii) * math.sqrt(d), d).numpy()
        ax_hist.plot(radii, exact, color=color, lw=2.5)
        peak = int(np.argmax(exact))
        ax_hist.text(radii[peak] + 2.0 / math.sqrt(2 * d), 0.7 * exact[peak], f"d = {d}",
                     color=style.text_color(color), fontsize=style.FONT_SIZE, va="center")
    ax_hist.set(xlim=(0, 2.2), xlabel="‖x‖ / √d", ylabel="density", yticks=[])
    ax_hist.text(2.15, 0.97 * ax_hist.get_ylim()[1], "lines: exact\nsteps: 10,000 draws", ha="right", va="top",
                 fontsize=style.FONT_SIZE)
    ax_hist.set_title("A thin shell of radius √d")

    dims = np.array(sorted(norms))
    simulated = np.array([norms[d].var().item() for d in dims])
    grid = np.geomspace(dims[0], dims[-1], 200)
    exact = isotropy.norm_moments(torch.from_numpy(grid))[1].numpy()
    ax_var.axhspan(0, 1, color=MUTED, alpha=0.25, lw=0)
    ax_var.axhline(0.5, color=BOUND, ls="--", lw=1.5)
    ax_var.plot(grid, exact, color=TARGET, lw=2)
    ax_var.plot(dims, simulated, "o", color=DATA, ms=7)
    ax_var.set_xscale("log", base=2)
    ax_var.set(ylim=(0, 1.05), xlabel="dimension d", ylabel="Var ‖x‖")
    ax_var.set_xticks([1, 8, 64, 512], ["1", "8", "64", "512"])
    ax_var.minorticks_off()
    ax_var.text(dims[-1], 0.56, "limit 1/2", ha="right", va="bottom", color=BOUND, fontsize=SMALL)
    ax_var.text(dims[0], 0.97, "always between 0 and 1", ha="left", va="top", color=BOUND, fontsize=SMALL)
    ax_var.text(dims[-1], 0.3, "line: exact\ndots: 10,000 draws", ha="right", va="top", fontsize=SMALL)
    ax_var.set_title("Var ‖x‖ → 1/2, whatever d")
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- §2.3
def right_angles(angles: Mapping[int, torch.Tensor], shown: Sequence[int] = (3, 8, 32, 512)) -> Figure:
    """Left: histograms of pairwise angles (degrees) for the dimensions in ``shown`` with
    the exact law. Right: the spread of the angle against ``d``, with ``57.3°/√d``."""
    fig = Figure(figsize=(style.FIG_WIDTH, 3.6))
    ax_hist, ax_sd = fig.subplots(1, 2, gridspec_kw=dict(width_ratios=[1.3, 1]))
    grid = np.linspace(0.0, 180.0, 361)
    for d, color in zip(shown, style.sequence(len(shown), stop=0.75)):
        counts, edges = np.histogram(angles[d].numpy(), bins=90, range=(0, 180), density=True)
        ax_hist.stairs(counts, edges, color=color, lw=1, alpha=0.6)
        exact = (math.pi / 180) * isotropy.angle_density(torch.from_numpy(np.radians(grid)), d).numpy()
        ax_hist.plot(grid, exact, color=color, lw=2.5)
        ax_hist.text(90 + 1.6 * math.degrees(1 / math.sqrt(d)) + 3, exact[180] * 0.7, f"d = {d}",
                     color=style.text_color(color), fontsize=style.FONT_SIZE, va="center")
    ax_hist.axvline(90, color=BOUND, ls="--", lw=1.5)
    ax_hist.set(xlim=(0, 180), xticks=[0, 45, 90, 135, 180], xlabel="angle between two samples (°)",
                ylabel="density", yticks=[])
    ax_hist.set_title("Independent vectors are nearly orthogonal")
    ax_hist.text(3, 0.97 * ax_hist.get_ylim()[1], "lines: exact\nsteps: 19,900 pairs", va="top",
                 fontsize=style.FONT_SIZE)

    dims = np.array(sorted(angles))
    sd = np.array([angles[d].std().item() for d in dims])
    fine = np.geomspace(dims[0], dims[-1], 100)
    ax_sd.plot(fine, np.degrees(1 / np.sqrt(fine)), color=TARGET, lw=2)
    ax_sd.plot(dims, sd, "o", color=DATA, ms=7)
    ax_sd.set_xscale("log", base=2)
    ax_sd.set_yscale("log")
    ax_sd.set_xticks([4, 32, 256, 2048], ["4", "32", "256", "2048"])
    ax_sd.set_yticks([1, 3, 10, 30], ["1°", "3°", "10°", "30°"])
    ax_sd.minorticks_off()
    ax_sd.set(xlabel="dimension d", ylabel="spread of the angle (sd)")
    ax_sd.text(dims[-1], 20, "line: 57.3° / √d\ndots: simulation", ha="right", va="top",
               fontsize=style.FONT_SIZE)
    ax_sd.set_title("Spread ≈ 57.3° / √d")
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- §2.4
def gram_scale(examples: Mapping[int, torch.Tensor], dims: Sequence[int], err_d: Sequence[float],
               err_sqrt: Sequence[float], batch: int) -> Figure:
    """Left: ``XXᵀ/d`` of one batch for each width in ``examples`` (heatmaps, one colorbar). Right: the
    operator-norm distance of ``XXᵀ/d`` and of ``XXᵀ/√d`` from ``I`` against ``d``, with
    the Marchenko–Pastur edge ``2√(b/d) + b/d``."""
    fig = Figure(figsize=(style.FIG_WIDTH, 3.7))
    n = len(examples)      # then the colorbar, a space for its labels and the plot's, and the plot
    grid = fig.add_gridspec(1, n + 3, width_ratios=[1] * n + [0.06, 0.42, 1.3], wspace=0.1, left=0.02,
                            right=0.98, bottom=0.16, top=0.84)
    image = None
    for col, (d, K) in enumerate(examples.items()):
        ax = fig.add_subplot(grid[0, col])
        image = ax.imshow((K / d).numpy(), cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest")
        ax.set(xticks=[], yticks=[])
        for spine in ax.spines.values():
            spine.set_visible(False)
        ax.set_title(f"XXᵀ / d at d = {d}", loc="left", fontsize=style.FONT_SIZE)
    fig.text(0.02, 0.93, f"one batch of b = {batch}", fontsize=style.FONT_SIZE, ha="left")
    style.colorbar(fig, image, None, "entry", cax=fig.add_subplot(grid[0, n]), ticks=[-1, 0, 1])
    ax = fig.add_subplot(grid[0, n + 2])
    dims = np.asarray(dims, dtype=float)
    fine = np.geomspace(dims[0], dims[-1], 100)
    ax.plot(fine, 2 * np.sqrt(batch / fine) + batch / fine, color=BOUND, ls="--", lw=1.5)
    ax.plot(dims, err_d, "o-", color=DATA, ms=7)
    ax.plot(dims, err_sqrt, "s-", color=HIGHLIGHT, ms=7)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    log_ticks(ax.yaxis, [-1, 0, 1, 2])
    ax.set_xticks([16, 64, 256, 1024, 4096], ["16", "64", "256", "1024", "4096"])
    ax.minorticks_off()
    ax.set(xlabel="dimension d", ylabel="‖XXᵀ/c − I‖₂")
    mid = len(dims) // 2
    ax.text(dims[mid], err_sqrt[mid] * 1.7, "c = √d", color=style.text_color(HIGHLIGHT), ha="center", va="bottom",
            fontsize=style.FONT_SIZE)
    ax.text(dims[mid + 1], err_d[mid + 1] * 0.6, "c = d", color=DATA, ha="center", va="top", fontsize=style.FONT_SIZE)
    ax.text(dims[1], (2 * math.sqrt(batch / dims[1]) + batch / dims[1]) * 1.5, "edge 2√(b/d) + b/d", color=BOUND,
            ha="left", va="bottom", fontsize=SMALL)
    ax.set_title("distance from I, 50 batches", loc="left")
    return fig


# ----------------------------------------------------------------------------- §2.5
def blind_spot(spectra: Mapping[str, np.ndarray], errors: Mapping[str, np.ndarray]) -> Figure:
    """Left: two spectra (eigenvalues, largest first, log scale) with their isotropy and
    condition number. Right: the distance to the minimizer of gradient descent on the
    quadratic with that Hessian, against steps."""
    fig = Figure(figsize=(style.FIG_WIDTH, 3.6))
    ax_spec, ax_err = fig.subplots(1, 2)
    (name_a, lam_a), (name_b, lam_b) = ((k, np.sort(np.asarray(v))[::-1]) for k, v in spectra.items())
    for name, lam, color, marker, ms in ((name_b, lam_b, HIGHLIGHT, "s", 7), (name_a, lam_a, DATA, "o", 3.5)):
        iso = lam.sum() ** 2 / (lam**2).sum() / lam.size
        kappa = power_of_ten(round(math.log10(lam[0] / lam[-1])))
        ax_spec.plot(np.arange(1, lam.size + 1), lam, marker, color=color, ms=ms, mfc="none" if marker == "s" else color,
                     label=f"{name}: isotropy {iso:.3f}, κ = {kappa}")
    ax_spec.set_yscale("log")
    log_ticks(ax_spec.yaxis, [-6, -4, -2, 0])
    ax_spec.set(xlabel="eigenvalue index (largest first)", ylabel="eigenvalue")
    handles, labels = ax_spec.get_legend_handles_labels()
    ax_spec.legend(handles[::-1], labels[::-1], loc="center left")
    ax_spec.annotate("four eigenvalues\ndivided by 10⁴", (lam_b.size - 3, lam_b[-3]), xytext=(-12, 0),
                     textcoords="offset points", ha="right", va="center", color=HIGHLIGHT, fontsize=SMALL)
    ax_spec.set_title("Same isotropy, different tails")
    for (name, err), color in zip(errors.items(), (DATA, HIGHLIGHT)):
        err = np.asarray(err)
        steps = np.arange(len(err))
        ax_err.plot(steps, err, color=color, lw=2.5)
        if (err < 1e-3).any():
            i = int(np.argmax(err < 1e-3))
            ax_err.annotate(f"{name}: below 10⁻³ after {i} steps", (i, err[i]), xytext=(10, 0), textcoords="offset points",
                            color=color, fontsize=SMALL, va="center")
        else:
            ax_err.annotate(f"{name}: still {err[-1]:.2f} after {steps[-1]} steps", (steps[-1], err[-1]), xytext=(0, -8),
                            textcoords="offset points", color=color, fontsize=SMALL, ha="right", va="top")
    ax_err.set_yscale("log")
    ax_err.set_ylim(1e-4, 2)
    log_ticks(ax_err.yaxis, [-4, -3, -2, -1, 0])
    ax_err.set(xlabel="gradient-descent step (η = 1/λ_max)", ylabel="‖w − w*‖ / ‖w₀ − w*‖")
    ax_err.set_title("Descent stalls on B")
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- §2.6
def dichotomy(d: int, batches: Sequence[int], simulated: Sequence[float]) -> Figure:
    """Gram-side isotropy against ``b/d``: the bound ``min(b, d)/b`` (reached by orthonormal
    rows and tight frames), the Gaussian formula and its simulation."""
    fig = Figure(figsize=(style.FIG_WIDTH * 0.75, 3.6))
    ax = fig.add_subplot()
    batches = np.asarray(batches, dtype=float)
    grid = np.geomspace(batches[0], batches[-1], 200)
    ax.axvline(1, color=MUTED, lw=1.5, zorder=0)
    ax.plot(grid / d, np.minimum(grid, d) / grid, color=TARGET, lw=2.5)
    ax.plot(grid / d, (grid * d + 2) / (grid * (grid + d + 1)), "--", color=DATA, lw=2)
    ax.plot(batches / d, simulated, "o", color=DATA, ms=7)
    ax.set_xscale("log", base=2)
    ax.set_xticks([1 / 8, 1 / 2, 1, 2, 8], ["1/8", "1/2", "1", "2", "8"])
    ax.minorticks_off()
    ax.set(ylim=(0, 1.08), xlabel="batch size over width, b / d", ylabel="Gram-side isotropy")
    ax.text(1.15, 0.98, "best possible: min(b, d)/b\n(orthonormal rows, then tight frames)", va="top", fontsize=SMALL)
    ax.text(batches[0] / d, 0.3, f"Gaussian rows, d = {d}\ndots: simulated\ndashes: (bd+2)/(b(b+d+1))",
            color=DATA, va="top", fontsize=SMALL)
    i = int(np.argmin(np.abs(batches - d)))
    ax.annotate(f"{simulated[i]:.2f} at b = d", (1, simulated[i]), xytext=(12, -75), textcoords="offset points",
                color=DATA, fontsize=SMALL, arrowprops=dict(arrowstyle="-", color=DATA, lw=1))
    ax.set_title("Only b ≤ d can reach isotropy 1")
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- §2.7
def correlated(kappas: Sequence[float], measured: Mapping[str, Sequence[float]],
               predicted: Mapping[str, Sequence[float]], rho: Sequence[float], d: int) -> Figure:
    """One panel per quantity against ``κ``: simulation (dots) and the prediction through
    the effective rank ``ρ`` of ``Σ`` (line); the title gives ``ρ`` at both ends."""
    fig = Figure(figsize=(style.FIG_WIDTH, 3.5))
    axes = np.atleast_1d(fig.subplots(1, len(measured)))
    kappas = np.asarray(kappas, dtype=float)
    for ax, (name, values) in zip(axes, measured.items()):
        ax.plot(kappas, predicted[name], color=TARGET, lw=2)
        ax.plot(kappas, values, "o", color=DATA, ms=7)
        ax.set_xscale("log")
        log_ticks(ax.xaxis, [0, 2, 4])
        ax.set_xlabel("condition number κ of Σ")
        ax.set_title(name, fontsize=style.FONT_SIZE)
    axes[0].text(0.03, 0.97, "line: prediction from ρ\ndots: simulation", transform=axes[0].transAxes,
                 va="top", fontsize=SMALL)
    fig.suptitle(f"d = {d}: the effective dimension ρ = r(Σ) falls from {rho[0]:.0f} (κ = 1) to {rho[-1]:.1f} "
                 f"(κ = {power_of_ten(round(math.log10(kappas[-1])))})", x=0.01, ha="left", fontsize=style.FONT_SIZE + 1)
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- §2.8
def alignment_scatter(kappas: Sequence[float], root_isotropy: Sequence[float], alignment: Sequence[float]) -> Figure:
    """Chapter 1's mean alignment against the square root of the Gram-side isotropy, one
    dot per setting, coloured by κ."""
    fig = Figure(figsize=(5.2, 4.6))
    ax = fig.add_subplot()
    kappas, root_isotropy, alignment = map(np.asarray, (kappas, root_isotropy, alignment))
    levels = sorted(set(kappas.tolist()))
    ax.plot([0, 1], [0, 1], color=BOUND, lw=1.5, ls="--", zorder=0)
    for kappa, color in zip(levels, style.sequence(len(levels))):
        chosen = kappas == kappa
        ax.plot(root_isotropy[chosen], alignment[chosen], "o", color=color, ms=7, label=f"κ = {kappa:g}")
    ax.set(xlim=(0, 1.02), ylim=(0, 1.02), aspect="equal", xlabel="√(Gram-side isotropy)",
           ylabel="mean cos(ΔY, −G)")
    ax.text(0.62, 0.5, "cos = √isotropy", color=BOUND, rotation=45, fontsize=SMALL, ha="center", va="top")
    ax.legend(loc="upper left")
    ax.text(0.98, 0.03, f"{kappas.size} settings\ncorrelation {np.corrcoef(alignment, root_isotropy)[0, 1]:.4f}",
            ha="right", va="bottom", fontsize=SMALL)
    ax.set_title("Isotropy predicts the alignment")
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- §2.9
D_VALUES = (2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
B_VALUES = (16, 64, 256)
KAPPA_VALUES = (1, 100)
_RADII = np.linspace(0.0, 2.5, 300)
_ANGLES = np.linspace(0.0, 180.0, 241)
_PAIRS_FROM = 128   # pairwise angles among the first 128 samples


class Concentration(NamedTuple):
    """What the explorable shows at one setting (and what its promises measure)."""

    radii: np.ndarray          # ‖x‖/√d of every sample
    angles: np.ndarray         # pairwise angles (degrees) among the first 128 samples
    eigenvalues: np.ndarray    # of XXᵀ/d, largest first (b of them)
    zeros: int                 # eigenvalues at rounding level (below 1e-10 of the largest)
    gram_isotropy: float
    bound: float               # min(b, d)/b


@functools.lru_cache(maxsize=1)
def _base_sample() -> torch.Tensor:
    """One standard Gaussian array: a setting (b, d) uses its first b rows and d columns,
    so moving d adds coordinates to the same samples, and moving b adds samples."""
    return torch.randn(max(B_VALUES), max(D_VALUES), generator=generator(13), dtype=torch.float64)


@functools.lru_cache(maxsize=None)
def concentration_data(d: int, batch: int, kappa: float) -> Concentration:
    """The batch ``X = Z Λ^{1/2}`` (``Λ`` the spectrum of condition number ``κ``) and what
    the figure shows of it, computed once per setting."""
    X = _base_sample()[:batch, :d].contiguous() * features.spectrum(d, kappa).sqrt()
    radii = (torch.linalg.vector_norm(X, dim=-1) / math.sqrt(d)).numpy()
    angles = torch.rad2deg(torch.arccos(isotropy.pairwise_cosines(X[:_PAIRS_FROM]).clamp(-1, 1))).numpy()
    eig = torch.linalg.eigvalsh(X @ X.T).flip(0).numpy() / d
    zeros = int((eig < 1e-10 * eig[0]).sum())
    return Concentration(radii, angles, np.clip(eig, 0, None), zeros, isotropy.feature_isotropy(X).item(),
                         min(batch, d) / batch)


@functools.lru_cache(maxsize=1)
def _spectrum_floor() -> float:
    """A power of ten below the smallest nonzero eigenvalue of XXᵀ/d anywhere on the grid:
    the spectrum panel's fixed lower limit, so that no eigenvalue is drawn at a false floor."""
    smallest = min(float(data.eigenvalues[: b - data.zeros].min())
                   for d in D_VALUES for b in B_VALUES for k in KAPPA_VALUES
                   for data in [concentration_data(d, b, k)])
    return 10.0 ** math.floor(math.log10(smallest))


def draw_concentration(fig, d, batch, kappa) -> None:
    data = concentration_data(d, batch, kappa)
    ax_norm, ax_angle, ax_gram = fig.subplots(1, 3)

    exact = math.sqrt(d) * isotropy.norm_density(torch.from_numpy(_RADII) * math.sqrt(d), d).numpy()
    counts, edges = np.histogram(data.radii, bins=int(np.clip(3 * math.sqrt(batch), 10, 60)), range=(0, 2.5),
                                 density=True)
    ax_norm.stairs(counts, edges, fill=True, color=style.ROLES["muted"])
    ax_norm.plot(_RADII, exact, color=TARGET, lw=2)
    ax_norm.set(xlim=(0, 2.5), ylim=(0, 1.12 * max(counts.max(), exact.max())), xticks=[0, 1, 2], yticks=[],
                xlabel="‖x‖ / √d", ylabel="density")
    ax_norm.set_title(f"norms\nsd {data.radii.std():.3f}", fontsize=style.FONT_SIZE)

    exact = (math.pi / 180) * isotropy.angle_density(torch.from_numpy(np.radians(_ANGLES)), d).numpy()
    counts, edges = np.histogram(data.angles, bins=60, range=(0, 180), density=True)
    ax_angle.stairs(counts, edges, fill=True, color=style.ROLES["muted"])
    ax_angle.plot(_ANGLES, exact, color=TARGET, lw=2)
    ax_angle.set(xlim=(0, 180), ylim=(0, 1.12 * max(counts.max(), exact.max())), xticks=[0, 90, 180], yticks=[],
                 xlabel="angle between samples (°)")
    ax_angle.set_title(f"pairwise angles\nsd {data.angles.std():.1f}°", fontsize=style.FONT_SIZE)

    index = np.arange(1, batch + 1)
    nonzero = batch - data.zeros
    best = max(1.0, batch / d)
    floor = _spectrum_floor()
    ax_gram.plot(index[:nonzero], data.eigenvalues[:nonzero], "o", ms=3, color=DATA)
    ax_gram.plot([1, min(batch, d)], [best, best], "--", color=BOUND, lw=1.5)
    if data.zeros:
        ax_gram.axvspan(nonzero + 0.5, batch + 0.5, color=style.ROLES["muted"], alpha=0.45, lw=0)
        ax_gram.text(0.97, 0.05, f"{data.zeros} zeros\n(grey)", color=style.ROLES["ink"], ha="right",
                     va="bottom", transform=ax_gram.transAxes)
    lo = math.floor(math.log10(floor))
    ax_gram.set(xscale="log", yscale="log", xlim=(0.8, 300), ylim=(floor, 1e3),
                xlabel="index (largest first)", ylabel="eigenvalue of XXᵀ/d")
    ax_gram.set_xticks([1, 10, 100], ["1", "10", "100"])
    log_ticks(ax_gram.yaxis, [e for e in range(lo, 4) if (e - lo) % 3 == 0])
    ax_gram.minorticks_off()
    ax_gram.set_title(f"isotropy {data.gram_isotropy:.2f}\nbound {data.bound:.2f}", fontsize=style.FONT_SIZE)


def _norm_sd(d, batch, kappa):
    return float(concentration_data(d, batch, kappa).radii.std())


def _angle_sd(d, batch, kappa):
    return float(concentration_data(d, batch, kappa).angles.std())


def _centres(d, batch, kappa):
    """Mean and spread of both histograms: (mean ‖x‖/√d, its sd, mean angle, its sd)."""
    data = concentration_data(d, batch, kappa)
    return float(data.radii.mean()), float(data.radii.std()), float(data.angles.mean()), float(data.angles.std())


def _gram_isotropy(d, batch, kappa):
    return concentration_data(d, batch, kappa).gram_isotropy


def _zeros_and_shape(d, batch, kappa):
    data = concentration_data(d, batch, kappa)
    return data.zeros, batch, d, data.gram_isotropy, data.bound


def _wider_at_kappa(d, batch, kappa):
    """How much wider the norm histogram is at κ = 100 than at κ = 1 (same samples, same b)."""
    return _norm_sd(d, batch, 100) - _norm_sd(d, batch, 1)


CAPTION = ("Drag d, the dimension: the same b samples gain coordinates. The norm histogram narrows around 1, "
           "the angles narrow around 90°, and the Gram isotropy rises, never above min(b, d)/b (the isotropy "
           "(tr XXᵀ)² / (b ‖XXᵀ‖²_F) is 1 exactly when XXᵀ ∝ I); while d < b, exactly b − d eigenvalues of XXᵀ are zero "
           "(grey). Bars: the batch; lines: the exact laws for Σ = I; dashes: the best possible spectrum. With "
           "κ(Σ) = 100 the norms spread wider than with κ = 1 at every d.")


def concentration() -> Explorable:
    """Norms, pairwise angles and the Gram spectrum of one Gaussian batch as ``d`` grows."""
    return Explorable(
        draw_concentration,
        [Slider("d", D_VALUES, label="dimension d", default=32),
         Slider("batch", B_VALUES, label="batch b", default=64),
         Slider("kappa", KAPPA_VALUES, label="κ(Σ)", default=1)],
        main="d",
        figsize=(style.COLUMN_WIDTH, 3.0),
        static_colors=16,
        caption=CAPTION,
        alt=("As the dimension grows, the norms and the angles of the same samples concentrate and the Gram "
             "matrix fills its rank."),
        promises=[
            Promise("The norm histogram narrows", _norm_sd, nonincreasing(tol=0.0)),
            Promise("around 1", _centres, always(lambda v: abs(v[0] - 1) <= v[1], "|mean - 1| <= sd")),
            Promise("the angles narrow", _angle_sd, nonincreasing(tol=0.0)),
            Promise("around 90°", _centres, always(lambda v: abs(v[2] - 90) <= v[3], "|mean angle - 90°| <= sd")),
            Promise("the Gram isotropy rises", _gram_isotropy, nondecreasing(tol=0.0)),
            Promise("never above min(b, d)/b", _zeros_and_shape, always(lambda v: v[3] <= v[4] + 1e-12,
                                                                        "isotropy <= min(b, d)/b")),
            Promise("while d < b, exactly b − d eigenvalues of XXᵀ are zero", _zeros_and_shape,
                    always(lambda v: v[0] == max(v[1] - v[2], 0), "zero eigenvalues = max(b - d, 0)")),
            Promise("the norms spread wider than with κ = 1 at every d", _wider_at_kappa,
                    always(lambda v: v > 0, "sd(κ = 100) − sd(κ = 1) > 0")),
        ],
        narrow="panels",
    )


EXPLORABLES = (concentration,)
