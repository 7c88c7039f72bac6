r"""Figures, shared computations and the explorable of Chapter 6, *Deriving Iso*.

Each figure function builds and returns a :class:`matplotlib.figure.Figure` (no pyplot),
drawn in the book's style (:mod:`isolab.book.figures.style`). Where a figure and a printed
check share a computation, it lives here once:

* :func:`hero` and :func:`twin_explorable` (§6.10) draw one picture, :func:`draw_twin`: a
  2-D batch of inputs ``X`` and the inputs ``XA`` of a reparametrized twin layer (``A`` =
  :func:`stretch`, condition number κ); after whitening both are the same round cloud,
  turned by an orthogonal matrix; and the singular values of SGD's and Iso's step before
  and after the reparametrization (:func:`hero_data` computes what it draws). The
  explorable moves κ (main slider) and the direction of the stretch.
* :func:`random_monomial`: random monomial matrices (a permutation times a nonzero
  diagonal), the transforms that leave Adam's first-step spectrum unchanged (§6.5).
* :func:`invariance_ranges` and :func:`invariance_map` (§6.5): the range of the
  spectral-norm ratio of five update rules under five kinds of transform, as a heatmap.
* :func:`principal_angle` (§6.7): for ``b = 3``, the column space of ``X`` (a plane in
  ``R^3``) and of ``G`` (a line); the cosine of the angle between them is Iso's update.
* :func:`damping` (§6.9): the singular values of damped Iso against the damping.
"""

from __future__ import annotations

import functools
import itertools
import math
from typing import Callable, Mapping, Sequence

import numpy as np
import torch
from matplotlib.figure import Figure

from isolab import linalg, updates

from isolab.book import invariance
from isolab.book.explorable import Explorable, Promise, Slider, always
from isolab.book.figures import style
from isolab.book.seeding import generator

__all__ = [
    "RULES", "random_monomial", "stretch", "hero_data", "draw_twin", "hero", "TRANSFORM_KINDS", "invariance_ranges",
    "invariance_map", "principal_angle", "damping", "TWIN_KAPPAS", "TWIN_DIRECTIONS", "twin_explorable", "EXPLORABLES",
]

DATA, TARGET, BOUND, HIGHLIGHT, MUTED = (style.ROLES[k] for k in ("data", "target", "bound", "highlight", "muted"))
SMALL = style.FONT_SIZE - 1   # the smallest text in these figures (10 pt)

#: The chapter's five update rules, as functions ``(X, G) -> direction to subtract``.
RULES: dict[str, Callable] = {
    "SGD": updates.sgd_update, "Adam": updates.adam_first_step, "Muon": updates.muon_update,
    "Iso": updates.iso_update, "IsoAdam": updates.iso_adam_first_step,
}


def _gaussian(gen: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=torch.float64)


def random_monomial(n: int, condition_number: float, *, generator: torch.Generator,
                    sample_shape: Sequence[int] = (), signed: bool = True) -> torch.Tensor:
    r"""Random monomial matrices ``P D``: a uniformly random permutation ``P`` times a
    diagonal ``D`` whose magnitudes are the geometric spectrum of
    :func:`isolab.book.invariance.random_positive_diagonal` (condition number exactly
    ``kappa``) and whose signs are random (``signed=True``) or all positive.
    ``kappa = 1`` with signs gives a random *signed permutation*, an orthogonal matrix.
    Every column and every row has exactly one nonzero entry: the map permutes the
    coordinates and rescales (and flips) each. Shape ``(*sample_shape, n, n)``."""
    shape = tuple(sample_shape)
    D = invariance.random_positive_diagonal(n, condition_number, generator=generator, sample_shape=shape)
    if signed:
        signs = torch.randint(0, 2, (*shape, n), generator=generator).to(torch.float64) * 2 - 1
        D = D * signs[..., None, :]
    perm = torch.rand(*shape, n, generator=generator, dtype=torch.float64).argsort(-1)
    P = torch.nn.functional.one_hot(perm, n).to(torch.float64)   # row i has its 1 in column perm[i]
    return P @ D


# ----------------------------------------------------------------------------- hero
def _ellipse(C: torch.Tensor, radius: float = 2.0, points: int = 120) -> np.ndarray:
    t = torch.linspace(0, 2 * math.pi, points, dtype=torch.float64)
    circle = torch.stack([t.cos(), t.sin()], -1)
    w, V = torch.linalg.eigh(C)
    return (radius * circle * w.sqrt() @ V.T).numpy()


def stretch(kappa: float, direction: float) -> torch.Tensor:
    r"""The symmetric 2 × 2 transform that stretches by ``√κ`` along the unit vector at
    ``direction`` degrees and shrinks by ``1/√κ`` across it: condition number ``κ``,
    determinant 1, and the identity at ``κ = 1`` (so the twin starts as the layer itself)."""
    a = math.radians(direction)
    R = torch.tensor([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]], dtype=torch.float64)
    return R @ torch.diag(torch.tensor([kappa**0.5, kappa**-0.5], dtype=torch.float64)) @ R.T


@functools.lru_cache(maxsize=1)
def _layer(b: int = 150, seed: int = 11) -> tuple[torch.Tensor, torch.Tensor]:
    """The 2-D layer of the hero: correlated inputs ``X`` and gradients ``G`` that depend
    partly on them."""
    gen = generator(seed)
    X = _gaussian(gen, b, 2) @ torch.tensor([[1.0, 0.0], [0.6, 0.5]], dtype=torch.float64)
    G = 0.7 * X @ torch.tensor([[1.0, -0.4], [0.3, 0.8]], dtype=torch.float64) + 0.5 * _gaussian(gen, b, 2)
    return X, G


@functools.lru_cache(maxsize=None)
def hero_data(kappa: float = 10.0, direction: float = 72.0) -> dict:
    """A 2-D layer (``n = m = 2``) and its reparametrized twin, ``A`` = :func:`stretch`
    ``(κ, direction)`` on the inputs and ``B`` = the same stretch turned by 90° on the
    gradients: inputs ``X``, ``XA``; both whitened; the rotation ``M_X`` between the
    whitened clouds and how far the twin's whitened cloud is from the turned original
    (``mismatch``, rounding level); the singular values of SGD's and Iso's step for the
    layer and for its twin."""
    X, G = _layer()
    A, B = stretch(kappa, direction), stretch(kappa, direction + 90.0)
    M = invariance.induced_rotation(X, A)
    white, white_twin = linalg.whiten(X), linalg.whiten(X @ A)
    sv = {name: (torch.linalg.svdvals(RULES[name](X, G)), torch.linalg.svdvals(RULES[name](X @ A, G @ B)))
          for name in TWIN_RULES}
    return {"X": X, "XA": X @ A, "white": white, "white_twin": white_twin, "M": M, "A": A, "B": B,
            "angle": math.degrees(math.atan2(M[1, 0].item(), M[0, 0].item())), "sv": sv, "kappa": kappa,
            "mismatch": (white_twin - white @ M).abs().max().item()}


def _picks(X: torch.Tensor) -> list[int]:
    """Three samples to follow: the rightmost, the lowest, and the one furthest up-left."""
    return [int(X[:, 0].argmax()), int(X[:, 1].argmin()), int((X[:, 1] - X[:, 0]).argmax())]


_MARKER = 13    # the followed samples' marker size (points)


def _cloud(ax, P, Q, picks, lim, title) -> None:
    ax.scatter(P[:, 0], P[:, 1], s=7, color=DATA, linewidths=0, alpha=0.6)
    ax.scatter(Q[:, 0], Q[:, 1], s=7, color=HIGHLIGHT, linewidths=0, alpha=0.6)
    for Z, c, ls in ((Q, HIGHLIGHT, "-"), (P, DATA, (0, (3, 3)))):   # covariance ellipses, 2 standard deviations
        e = _ellipse(linalg.covariance(Z))
        ax.plot(e[:, 0], e[:, 1], color=c, lw=2.0, ls=ls)
    ax.set(xlim=(-lim, lim), ylim=(-lim, lim), aspect="equal")
    # Where each followed sample's marker goes. A sample beyond ``edge`` is drawn on the edge,
    # its ring dashed; the edge leaves room for the whole ring inside the panel, and two
    # markers that would overlap (two samples of one cloud on nearly one ray, or different
    # samples of the two clouds) are pushed apart (and kept inside). The reader test saw, at
    # κ = 30, markers 2 and 3 of the twin drawn on top of each other and cut at the edge.
    # The same sample in both clouds may overlap: that says it barely moved.
    pos = ax.get_position()
    side = min(pos.width * ax.figure.get_figwidth(), pos.height * ax.figure.get_figheight())   # inches
    gap = 1.1 * (_MARKER + 1.8) / 72 * 2 * lim / side       # a marker's diameter in data units, and a margin
    edge = lim - max(0.12 * lim, gap / 2) - 0.04 * lim
    marks = {}
    for k, i in enumerate(picks, 1):
        for Z, c in ((P, DATA), (Q, HIGHLIGHT)):
            point = Z[i].numpy().astype(float)
            far = np.abs(point).max() > edge
            if far:
                point = point * edge / np.abs(point).max()
            marks[k, c] = [point, far]
    keys = list(marks)
    for _ in range(20):
        moved = False
        for a in range(len(keys)):
            for b in range(a + 1, len(keys)):
                (ka, ca), (kb, cb) = keys[a], keys[b]
                if ka == kb:
                    continue
                pa, pb = marks[keys[a]][0], marks[keys[b]][0]
                d = pb - pa
                dist = float(np.hypot(*d))
                if dist >= gap:
                    continue
                if dist < 1e-9:
                    d, dist = np.array([-pb[1], pb[0]]), float(np.hypot(pb[1], pb[0])) or 1.0
                push = (gap - dist) / 2 * d / dist
                marks[keys[a]][0] = np.clip(pa - push, -edge, edge)
                marks[keys[b]][0] = np.clip(pb + push, -edge, edge)
                moved = True
        if not moved:
            break
    for (k, c), (point, far) in marks.items():
        ax.plot(*point, "o", ms=_MARKER, mfc="white", mec=c, mew=1.8)
        if far:   # a dashed ring: the sample lies further out along this ray
            ax.add_patch(_ring(point, lim, c))
        ax.text(*point, str(k), ha="center", va="center", fontsize=SMALL, color=style.text_color(c), weight="bold")
    ax.set(xticks=[], yticks=[])
    for spine in ax.spines.values():
        spine.set_visible(False)
    ax.axhline(0, color=MUTED, lw=0.8, zorder=0)
    ax.axvline(0, color=MUTED, lw=0.8, zorder=0)
    ax.set_title(title, fontsize=style.FONT_SIZE)


def _ring(center, lim, color):
    from matplotlib.patches import Circle

    return Circle(tuple(center), 0.12 * lim, fill=False, edgecolor=color, lw=1.2, ls=(0, (2, 2)), zorder=4)


def draw_twin(fig: Figure, kappa: float, direction: float) -> None:
    """The hero's three panels at one transform: inputs ``X`` and ``XA``; both whitened,
    one cloud turned by ``M_X`` (angle in the title); the singular values of SGD's, Adam's
    (first step) and Iso's step for the layer (open) and the twin (filled)."""
    d = hero_data(kappa, direction)
    grid = fig.add_gridspec(1, 3, width_ratios=[1, 1, 1.25], left=0.02, right=0.98, top=0.8, bottom=0.14, wspace=0.3)
    ax_raw, ax_white, ax_sv = (fig.add_subplot(grid[0, k]) for k in range(3))
    picks = _picks(d["X"])
    _cloud(ax_raw, d["X"], d["XA"], picks, RAW_LIM, f"inputs X and XA\nκ = {kappa:g}, at {direction:g}°")
    # the key and the whitening map sit under their panels, where no cloud reaches (inside,
    # the reader test saw "XA (twin)" crossed by the twin's ellipse and the map overdrawn by dots)
    ax_raw.text(0.42, -0.03, "X", color=DATA, transform=ax_raw.transAxes, fontsize=style.FONT_SIZE, weight="bold",
                ha="right", va="top")
    ax_raw.text(0.5, -0.03, "XA (twin)", color=style.text_color(HIGHLIGHT), transform=ax_raw.transAxes,
                fontsize=style.FONT_SIZE, weight="bold", ha="left", va="top")
    _cloud(ax_white, d["white"], d["white_twin"], picks, 3.6,
           f"whitened: one cloud,\nturned {abs(d['angle']):.0f}°")
    ax_white.text(0.5, -0.03, r"$Z \mapsto Z\,\mathrm{Cov}(Z)^{-1/2}$", color=BOUND, transform=ax_white.transAxes,
                  fontsize=SMALL, ha="center", va="top")
    width = 0.38
    ratios = {}
    for j, name in enumerate(TWIN_RULES):
        before, after = (v.numpy() for v in d["sv"][name])
        scale = before[0]
        x = np.arange(2) + 2.6 * j
        c = style.color(name)
        ax_sv.bar(x - width / 2, before / scale, width, facecolor=style.ROLES["background"], edgecolor=c, lw=1.8)
        ax_sv.bar(x + width / 2, np.minimum(after / scale, TOP_SV), width, color=c, edgecolor=c, lw=1.8)
        ax_sv.text(0.5 + 2.6 * j, -0.1, name, ha="center", va="top", color=style.text_color(c),
                   fontsize=style.FONT_SIZE, weight="bold", transform=ax_sv.get_xaxis_transform())
        ratios[name] = after[0] / scale
        if ratios[name] > TOP_SV:   # the bar leaves the axes: say how tall it is
            ax_sv.text(x[0] + 0.05, TOP_SV * 0.97, f"↑×{ratios[name]:.0f}", ha="left", va="top", fontsize=SMALL,
                       color=style.text_color(c), weight="bold")
    ax_sv.set(xticks=[0, 1, 2.6, 3.6, 5.2, 6.2], xticklabels=["σ₁", "σ₂"] * 3, xlim=(-0.6, 6.8), ylim=(0, TOP_SV),
              ylabel="σ / (layer's σ₁)")
    ax_sv.tick_params(axis="x", length=0)
    ax_sv.set_title(f"σ₁ of the step, twin/layer:\nSGD ×{ratios['SGD']:.1f}, Adam ×{ratios['Adam']:.1f}, Iso ×1",
                    fontsize=style.FONT_SIZE)
    ax_sv.text(0.98, 0.97, "open: layer\nfilled: twin", ha="right", va="top", transform=ax_sv.transAxes,
               fontsize=SMALL, color=BOUND)


RAW_LIM = 6.0                    # the inputs panel: fixed, so that the stretch shows
TWIN_FIGSIZE = (style.COLUMN_WIDTH, 3.3)
TOP_SV = 6.0                     # the bar panel's y range (SGD's bar is cut there and labelled)
HERO_KAPPA, HERO_DIRECTION = 10.0, 72.0
#: The update rules the bar panel compares (Adam: its first step, the sign of the gradient).
TWIN_RULES = ("SGD", "Adam", "Iso")


def hero() -> Figure:
    """The explorable's frame at κ(A) = 10: left, a batch of 2-D inputs ``X`` and the twin's
    inputs ``XA``, three samples numbered; middle, both after whitening, the same round
    cloud turned by the angle in the title; right, the singular values of SGD's and Iso's
    step for the layer (open) and the twin (filled): SGD's move, Iso's (the canonical
    correlations) do not."""
    fig = Figure(figsize=TWIN_FIGSIZE)
    draw_twin(fig, HERO_KAPPA, HERO_DIRECTION)
    return fig


# ----------------------------------------------------------------------------- §6.5 the invariance map
#: The kinds of transform of §6.5, each a sampler ``(dim, generator, draws) -> (draws, dim, dim)``.
TRANSFORM_KINDS: dict[str, Callable] = {
    "positive diagonal": lambda d, gen, k, kappa: invariance.random_positive_diagonal(d, kappa, generator=gen,
                                                                                       sample_shape=(k,)),
    "signed permutation": lambda d, gen, k, kappa: random_monomial(d, 1.0, generator=gen, sample_shape=(k,)),
    "monomial": lambda d, gen, k, kappa: random_monomial(d, kappa, generator=gen, sample_shape=(k,)),
    "orthogonal": lambda d, gen, k, kappa: linalg.random_orthogonal(d, generator=gen, sample_shape=(k,)),
    "general": lambda d, gen, k, kappa: invariance.random_invertible(d, kappa, generator=gen, sample_shape=(k,)),
}


def invariance_ranges(X: torch.Tensor, G: torch.Tensor, *, kappa: float = 100.0, draws: int = 50,
                      seed: int = 55, rules: Mapping[str, Callable] = RULES) -> dict:
    """For each rule, kind of transform (:data:`TRANSFORM_KINDS`, κ = ``kappa`` where the
    kind stretches) and norm (``2``, ``"fro"``): the smallest and largest ratio
    ``‖W_U(XA, GB)‖ / ‖W_U(X, G)‖`` over ``draws`` random pairs ``(A, B)``."""
    gen = generator(seed)
    n, m = X.shape[-1], G.shape[-1]
    pairs = {kind: (draw(n, gen, draws, kappa), draw(m, gen, draws, kappa)) for kind, draw in TRANSFORM_KINDS.items()}
    out = {}
    for name, rule in rules.items():
        for kind, (A, B) in pairs.items():
            for ord in (2, "fro"):
                r = invariance.norm_ratio(rule, X, G, A, B, ord)
                out[name, kind, ord] = (r.min().item(), r.max().item())
    return out


_SHORT_KINDS = {"positive diagonal": "positive\ndiagonal", "signed permutation": "signed\npermutation",
                "monomial": "monomial", "orthogonal": "orthogonal", "general": "general"}


def invariance_map(ranges: Mapping) -> Figure:
    """One heatmap, rules × kinds of transform, coloured by how far the spectral norm of
    the step strays from invariance (the largest ``|log10 ratio|`` over the draws), each
    cell annotated with the range of the ratio; a cell reading 1.000 is invariant to
    0.05 %. (The Frobenius norm is not drawn: a sign pattern has the same Frobenius norm
    whatever the data, so it would paint Adam, Muon and IsoAdam invariant for free.)"""
    from matplotlib.colors import PowerNorm

    rules = list(dict.fromkeys(k[0] for k in ranges))
    kinds = list(dict.fromkeys(k[1] for k in ranges))
    fig = Figure(figsize=(style.FIG_WIDTH, 3.9))
    grid = fig.add_gridspec(1, 2, width_ratios=[1, 0.03], left=0.1, right=0.9, top=0.9, bottom=0.2, wspace=0.04)
    ax = fig.add_subplot(grid[0, 0])
    dev = np.array([[max(abs(math.log10(v)) for v in ranges[r, k, 2]) for k in kinds] for r in rules])
    image = ax.imshow(dev, cmap="cividis", norm=PowerNorm(0.5, vmin=0, vmax=2), aspect="auto")
    for i, r in enumerate(rules):
        for j, k in enumerate(kinds):
            lo, hi = ranges[r, k, 2]
            text = "1.000" if max(abs(lo - 1), abs(hi - 1)) < 5e-4 else (
                f"{lo:.2f} – {hi:.2f}" if hi < 10 else f"{lo:.0f} – {hi:.0f}")
            ax.text(j, i, text, ha="center", va="center", fontsize=style.FONT_SIZE,
                    color=style.ROLES["background"] if dev[i, j] < 0.5 else style.ROLES["ink"])
    ax.set_xticks(range(len(kinds)), [_SHORT_KINDS.get(k, k) for k in kinds])
    ax.set_yticks(range(len(rules)), rules)
    ax.tick_params(length=0)
    ax.set_title("spectral norm of the step: after the transform / before (range over 50 pairs)",
                 fontsize=style.FONT_SIZE)
    bar = fig.colorbar(image, cax=fig.add_subplot(grid[0, 1]))
    bar.set_label("largest |log10 ratio|")
    bar.set_ticks([0, 0.1, 0.5, 1, 2])
    fig.text(0.1, 0.03, "κ = 100 where the transform stretches", fontsize=SMALL, color=BOUND)
    return fig


# ----------------------------------------------------------------------------- §6.7 principal angles
def principal_angle(seed: int = 2, elev: float = 30, azim: float = -120) -> Figure:
    """``b = 3`` samples, ``n = 2`` inputs, ``m = 1`` output: the column space of ``X`` is a
    plane in ``R^3`` (the space of the batch), that of ``G`` a line. Iso's update has one
    singular value, the cosine of the angle between them (drawn with the projection of
    ``G`` onto the plane), printed next to ``iso_update`` itself."""
    gen = generator(seed)
    X = _gaussian(gen, 3, 2)
    g = 0.8 * X @ torch.tensor([[0.7], [0.3]], dtype=torch.float64) + 0.5 * _gaussian(gen, 3, 1)
    Ux = torch.linalg.svd(X, full_matrices=False)[0]
    u = (g / g.norm()).squeeze(1)
    p = Ux @ (Ux.T @ u)
    cos = p.norm().item()
    sigma = torch.linalg.svdvals(updates.iso_update(X, g))[0].item()
    fig = Figure(figsize=(style.FIG_WIDTH * 0.62, 4.0))
    ax = fig.add_subplot(projection="3d", computed_zorder=False)
    s = torch.linspace(-1.2, 1.2, 2, dtype=torch.float64)
    a, c = torch.meshgrid(s, s, indexing="ij")
    plane = a[..., None] * Ux[:, 0] + c[..., None] * Ux[:, 1]
    ax.plot_surface(*(plane[..., k].numpy() for k in range(3)), color=DATA, alpha=0.25, linewidth=0)
    for k in range(2):
        col = (X[:, k] / X[:, k].norm()).numpy()
        ax.quiver(0, 0, 0, *col, color=DATA, lw=2, arrow_length_ratio=0.12)
        ax.text(*(1.12 * col), f"column {k + 1} of X", color=style.text_color(DATA), fontsize=SMALL)
    ax.quiver(0, 0, 0, *u.numpy(), color=style.color("Iso"), lw=2.5, arrow_length_ratio=0.12)
    ax.text(*(1.1 * u.numpy()), "G", color=style.text_color(style.color("Iso")), fontsize=style.FONT_SIZE,
            weight="bold")
    ax.plot(*np.stack([u.numpy(), p.numpy()], 1), color=BOUND, ls="--", lw=1.5)
    ax.quiver(0, 0, 0, *p.numpy(), color=BOUND, lw=1.5, arrow_length_ratio=0.12)
    ax.text(*(0.55 * p.numpy() + np.array([0, 0, -0.42])), "G projected\non col(X)", color=BOUND,
            fontsize=SMALL, va="top")
    ax.text(*plane[0, 0].numpy(), "col(X)", color=style.text_color(DATA), fontsize=SMALL)
    ax.set(xlim=(-1, 1), ylim=(-1, 1), zlim=(-1, 1), xticks=[], yticks=[], zticks=[])
    ax.set_xlabel("sample 1", labelpad=-12)
    ax.set_ylabel("sample 2", labelpad=-12)
    ax.set_zlabel("sample 3", labelpad=-12)
    ax.view_init(elev=elev, azim=azim)
    ax.set_title(f"b = 3: G is {math.degrees(math.acos(min(cos, 1.0))):.0f}° from the plane col(X);\n"
                 f"cos = {cos:.3f} = Iso's step {sigma:.3f}", fontsize=style.FONT_SIZE, loc="center")
    return fig


# ----------------------------------------------------------------------------- §6.9 damping
def damping(batches: Sequence[int] = (8, 256), n: int = 16, m: int = 8, seed: int = 12) -> Figure:
    """The singular values of Iso's update with relative damping δ (one line each), for a
    small and a large batch, with the SGD limit ``σ₁(XᵀG/b)/√(λ_X λ_G)`` dashed."""
    gen = generator(seed)
    deltas = torch.logspace(-4, 2, 25, dtype=torch.float64).tolist()
    fig = Figure(figsize=(style.FIG_WIDTH, 3.6))
    axes = fig.subplots(1, 2, sharey=True)
    fig.subplots_adjust(left=0.09, right=0.98, top=0.88, bottom=0.16, wspace=0.08)
    for ax, b in zip(axes, batches):
        X, G = _gaussian(gen, b, n), _gaussian(gen, b, m)
        spectra = torch.stack([torch.linalg.svdvals(updates.iso_update(X, G, damping=d)) for d in deltas])
        ax.plot(deltas, spectra.numpy(), color=style.color("Iso"), lw=1.5)
        scale = torch.sqrt(torch.trace(linalg.covariance(X)) / n * torch.trace(linalg.covariance(G)) / m)
        sgd_top = (torch.linalg.matrix_norm(updates.sgd_update(X, G), 2) / scale).item()
        ax.plot(deltas, [sgd_top / d for d in deltas], "--", color=BOUND, lw=1.8)
        ax.set(xscale="log", yscale="log", ylim=(1e-3, 1.5), xlabel="relative damping δ")
        ax.set_title(f"b = {b}, n = {n}, m = {m}", fontsize=style.FONT_SIZE)
    axes[0].set_ylabel("singular values of Iso's step")
    axes[0].text(1.2e-4, 1.3e-3, "each green line:\none singular value", color=style.color("Iso"), fontsize=SMALL,
                 va="bottom")
    axes[1].text(1.2e-4, 1.3e-3, "dashed: the SGD limit,\nσ₁(XᵀG/b) / √(λ_X λ_G)", color=BOUND, fontsize=SMALL,
                 va="bottom")
    return fig


# ----------------------------------------------------------------------------- §6.10 explorable
TWIN_KAPPAS = (1, 1.5, 2, 3, 5, 7, 10, 20, 30)          # main slider
TWIN_DIRECTIONS = (0, 36, 72, 108, 144)                   # degrees


def _turned_mismatch(kappa, direction) -> float:
    return hero_data(kappa, direction)["mismatch"]


def _iso_drift(kappa, direction) -> float:
    before, after = hero_data(kappa, direction)["sv"]["Iso"]
    return float((after / before - 1).abs().max())


def _sgd_ratio(kappa, direction) -> float:
    before, after = hero_data(kappa, direction)["sv"]["SGD"]
    return float(after[0] / before[0])


class _Test:
    """A promise predicate with a readable description."""

    def __init__(self, description: str, test: Callable[[list], bool]):
        self.description, self.test = description, test

    def __call__(self, values: list) -> bool:
        return bool(self.test(values))

    def __repr__(self) -> str:
        return self.description


def _adam_drift(kappa, direction) -> tuple[float, float]:
    before, after = hero_data(kappa, direction)["sv"]["Adam"]
    return direction, float((after / before - 1).abs().max())


TWIN_CAPTION = (
    "A layer with n = m = 2 inputs and outputs and its twin, which computes the same function but sees the inputs "
    "XA and the output gradients GB: A stretches by √κ along the chosen direction and shrinks by 1/√κ across it, "
    "B does the same turned by 90° (condition number κ, determinant 1). Left: the batch of inputs; middle: both "
    "batches whitened; right: the singular values σ₁ ≥ σ₂ of each optimizer's step, for the layer (open) and the "
    "twin (filled), in units of the layer's σ₁ (SGD: the gradient; Adam: its first step, the sign of the gradient; "
    "Iso: the step whitened on both sides). Move κ (the main slider): the twin's inputs stretch, yet after "
    "whitening the two clouds are one round cloud, turned (follow samples 1–3; a dashed ring marks a sample beyond "
    "the panel's edge); Iso's bars do not move, while SGD's largest singular value leaves its starting size. "
    "Turn the stretch to 0°, along the axes: there Adam's bars stay put too, at every κ."
)


def twin_explorable() -> Explorable:
    """The chapter's centerpiece (§6.10), the hero as an explorable: κ(A) = κ(B) (main
    slider, nine values from 1 to 30) and the direction of the stretch (five directions)."""
    for setting in itertools.product(TWIN_KAPPAS, TWIN_DIRECTIONS):
        hero_data(*setting)
    return Explorable(
        draw_twin,
        [Slider("kappa", TWIN_KAPPAS, label="κ(A) = κ(B)", default=10),
         Slider("direction", TWIN_DIRECTIONS, label="direction of the stretch", default=72, fmt="{:g}°")],
        main="kappa",
        figsize=TWIN_FIGSIZE,
        narrow="panels",      # on a phone the three panels stack
        static_colors=24,
        caption=TWIN_CAPTION,
        alt="A layer and its stretched twin: after whitening both batches are one round cloud, turned, and Iso's "
            "singular values do not move while SGD's do.",
        promises=[
            Promise("after whitening the two clouds are one round cloud, turned", _turned_mismatch,
                    always(lambda v: v < 1e-10, "whitened twin = whitened layer × M_X to 1e-10")),
            Promise("Iso's bars do not move", _iso_drift, always(lambda v: v < 1e-10, "|σ after / σ before − 1| < 1e-10")),
            Promise("SGD's largest singular value leaves its starting size", _sgd_ratio,
                    _Test("1 at κ = 1, off by more than 5% at κ = 30",
                          lambda v: abs(v[0] - 1) < 1e-12 and abs(v[-1] - 1) > 0.05)),
            Promise("there Adam's bars stay put too, at every κ", _adam_drift,
                    always(lambda v: v[0] != 0 or v[1] < 1e-6, "at 0°: |σ after / σ before − 1| < 1e-6")),
        ],
    )


EXPLORABLES = (twin_explorable,)
