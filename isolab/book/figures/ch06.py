r"""Figures, shared computations and the explorable of Chapter 6, *Deriving Iso*.

Each figure function builds and returns a :class:`matplotlib.figure.Figure` (no pyplot),
drawn in the book's style (:mod:`isolab.book.figures.style`). Where a figure and a printed
check share a computation, it lives here once:

* :func:`hero`: the chapter's opening picture. A 2-D batch of inputs ``X`` and the
  inputs ``XA`` of a reparametrized twin layer; after whitening both are the same round
  cloud, turned by an orthogonal matrix; and the step sizes of SGD and Iso before and
  after the reparametrization (:func:`hero_data` computes what it draws).
* :func:`random_monomial`: random monomial matrices (a permutation times a nonzero
  diagonal), the transforms that leave Adam's first-step spectrum unchanged (§6.5).
* :func:`invariance_ranges` and :func:`invariance_map` (§6.5): the range of the
  step-size ratio of five update rules under five kinds of transform, as a heatmap.
* :func:`principal_angle` (§6.7): for ``b = 3``, the column space of ``X`` (a plane in
  ``R^3``) and of ``G`` (a line); the cosine of the angle between them is Iso's update.
* :func:`damping` (§6.9): the singular values of damped Iso against the damping.
* :func:`invariance_explorable` (§6.10): sliders κ (main), kind of transform and batch
  size; its caption's promises are computed by :func:`invariance_data`, which the
  figure draws.
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
from isolab.book.explorable import Explorable, FigureMessage, Promise, Slider, always, nondecreasing
from isolab.book.figures import style
from isolab.book.seeding import generator

__all__ = [
    "RULES", "random_monomial", "hero_data", "hero", "TRANSFORM_KINDS", "invariance_ranges", "invariance_map",
    "principal_angle", "damping", "invariance_data", "draw_invariance", "invariance_explorable", "EXPLORABLES",
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


def hero_data(b: int = 150, kappa: float = 10.0, seed: int = 11) -> dict:
    """A 2-D layer (``n = m = 2``) and its reparametrized twin: inputs ``X``, ``XA``;
    gradients ``G`` (partly a function of ``X``), ``GB``; both whitened; the rotation
    ``M_X`` between the whitened clouds; the singular values of SGD's and Iso's step for
    the layer and for its twin."""
    gen = generator(seed)
    X = _gaussian(gen, b, 2) @ torch.tensor([[1.0, 0.0], [0.6, 0.5]], dtype=torch.float64)
    G = 0.7 * X @ torch.tensor([[1.0, -0.4], [0.3, 0.8]], dtype=torch.float64) + 0.5 * _gaussian(gen, b, 2)
    A = invariance.random_invertible(2, kappa, generator=gen)
    B = invariance.random_invertible(2, kappa, generator=gen)
    if torch.linalg.det(invariance.induced_rotation(X, A)) < 0:   # a rotation, not a reflection: easier to see
        A = A @ torch.diag(torch.tensor([1.0, -1.0], dtype=torch.float64))
    M = invariance.induced_rotation(X, A)
    white, white_twin = linalg.whiten(X), linalg.whiten(X @ A)
    sv = {name: (torch.linalg.svdvals(RULES[name](X, G)), torch.linalg.svdvals(RULES[name](X @ A, G @ B)))
          for name in ("SGD", "Iso")}
    return {"X": X, "XA": X @ A, "white": white, "white_twin": white_twin, "M": M, "A": A, "B": B,
            "angle": math.degrees(math.atan2(M[1, 0].item(), M[0, 0].item())), "sv": sv, "kappa": kappa}


def hero(data: Mapping | None = None) -> Figure:
    """Left: a batch of 2-D inputs ``X`` and the twin's inputs ``XA`` (κ(A) = 10), three
    samples labelled. Middle: both after whitening, the same round cloud turned by the
    angle in the title (three labelled samples show the turn). Right: the singular values
    of SGD's and Iso's step for the layer (open) and the twin (filled): SGD's move, Iso's
    (the canonical correlations) do not. The title gives SGD's spectral-norm ratio."""
    d = hero_data() if data is None else data
    fig = Figure(figsize=(style.FIG_WIDTH, 3.5))
    grid = fig.add_gridspec(1, 3, width_ratios=[1, 1, 1.05], left=0.02, right=0.98, top=0.8, bottom=0.14, wspace=0.25)
    ax_raw, ax_white, ax_sv = (fig.add_subplot(grid[0, k]) for k in range(3))
    picks = [int(d["X"][:, 0].argmax()), int(d["X"][:, 1].argmin()), int((d["X"][:, 1] - d["X"][:, 0]).argmax())]

    def cloud(ax, P, Q, lim, title):
        ax.scatter(P[:, 0], P[:, 1], s=7, color=DATA, linewidths=0, alpha=0.6)
        ax.scatter(Q[:, 0], Q[:, 1], s=7, color=HIGHLIGHT, linewidths=0, alpha=0.6)
        for Z, c, ls in ((Q, HIGHLIGHT, "-"), (P, DATA, (0, (3, 3)))):   # covariance ellipses, 2 standard deviations
            e = _ellipse(linalg.covariance(Z))
            ax.plot(e[:, 0], e[:, 1], color=c, lw=2.0, ls=ls)
        for k, i in enumerate(picks, 1):
            for Z, c in ((P, DATA), (Q, HIGHLIGHT)):
                ax.plot(*Z[i].tolist(), "o", ms=13, mfc="white", mec=c, mew=1.8)
                ax.text(*Z[i].tolist(), str(k), ha="center", va="center", fontsize=SMALL, color=style.text_color(c), weight="bold")
        ax.set(xlim=(-lim, lim), ylim=(-lim, lim), aspect="equal", xticks=[], yticks=[])
        for spine in ax.spines.values():
            spine.set_visible(False)
        ax.axhline(0, color=MUTED, lw=0.8, zorder=0)
        ax.axvline(0, color=MUTED, lw=0.8, zorder=0)
        ax.set_title(title, fontsize=style.FONT_SIZE)

    lim = 1.05 * max(d["X"].abs().max().item(), d["XA"].abs().max().item())
    cloud(ax_raw, d["X"], d["XA"], lim, f"inputs X and XA, κ(A) = {d['kappa']:g}")
    ax_raw.text(0.02, 0.02, "X", color=DATA, transform=ax_raw.transAxes, fontsize=style.FONT_SIZE, weight="bold")
    ax_raw.text(0.14, 0.02, "XA (the twin)", color=style.text_color(HIGHLIGHT), transform=ax_raw.transAxes, fontsize=style.FONT_SIZE,
                weight="bold")
    cloud(ax_white, d["white"], d["white_twin"], 3.6, f"whitened: one cloud, turned {abs(d['angle']):.0f}°")
    ax_white.text(0.02, 0.02, r"$Z \mapsto Z\,\mathrm{Cov}(Z)^{-1/2}$", color=BOUND, transform=ax_white.transAxes,
                  fontsize=SMALL)

    width = 0.36
    for j, name in enumerate(("SGD", "Iso")):
        before, after = (v.numpy() for v in d["sv"][name])
        scale = before[0]
        x = np.arange(2) + 3 * j
        c = style.color(name)
        ax_sv.bar(x - width / 2, before / scale, width, facecolor=style.ROLES["background"], edgecolor=c, lw=1.8)
        ax_sv.bar(x + width / 2, after / scale, width, color=c, edgecolor=c, lw=1.8)
        ax_sv.text(0.5 + 3 * j, -0.09, name, ha="center", va="top", color=c, fontsize=style.FONT_SIZE, weight="bold",
                   transform=ax_sv.get_xaxis_transform())
    sgd_ratio = (d["sv"]["SGD"][1][0] / d["sv"]["SGD"][0][0]).item()
    top = max(1.15, 1.1 * sgd_ratio)
    ax_sv.set(xticks=[0, 1, 3, 4], xticklabels=["σ₁", "σ₂", "σ₁", "σ₂"], xlim=(-0.6, 4.6), ylim=(0, top),
              ylabel="σ / σ₁ of the layer's step")
    ax_sv.tick_params(axis="x", length=0)
    ax_sv.set_title(f"step: SGD's σ₁ ×{sgd_ratio:.1f}, Iso's ×1", fontsize=style.FONT_SIZE)
    ax_sv.text(0.98, 0.97, "open: layer\nfilled: twin", ha="right", va="top", transform=ax_sv.transAxes, fontsize=SMALL,
               color=BOUND)
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


_SHORT_KINDS = {"positive diagonal": "positive\ndiagonal", "signed permutation": "signed\nperm.",
                "monomial": "mono-\nmial", "orthogonal": "ortho-\ngonal", "general": "general"}


def invariance_map(ranges: Mapping) -> Figure:
    """Two heatmaps (spectral norm, Frobenius norm): rules × kinds of transform, coloured
    by how far the step-size ratio strays from 1 (the largest ``|log10 ratio|``), each
    cell annotated with its range. A cell reading 1.000 is invariant."""
    from matplotlib.colors import PowerNorm

    rules = list(dict.fromkeys(k[0] for k in ranges))
    kinds = list(dict.fromkeys(k[1] for k in ranges))
    fig = Figure(figsize=(style.FIG_WIDTH, 4.2))
    grid = fig.add_gridspec(1, 3, width_ratios=[1, 1, 0.04], left=0.09, right=0.92, top=0.9, bottom=0.2, wspace=0.06)
    axes = [fig.add_subplot(grid[0, k]) for k in range(2)]
    norm = PowerNorm(0.5, vmin=0, vmax=2)
    image = None
    for ax, ord, title in zip(axes, (2, "fro"), ("spectral norm", "Frobenius norm")):
        dev = np.array([[max(abs(math.log10(v)) for v in ranges[r, k, ord]) for k in kinds] for r in rules])
        image = ax.imshow(dev, cmap="cividis", norm=norm, aspect="auto")
        for i, r in enumerate(rules):
            for j, k in enumerate(kinds):
                lo, hi = ranges[r, k, ord]
                text = "1.000" if max(abs(lo - 1), abs(hi - 1)) < 5e-4 else (
                    f"{lo:.2f}–{hi:.2f}" if hi < 10 else f"{lo:.0f}–{hi:.0f}")
                ax.text(j, i, text, ha="center", va="center", fontsize=SMALL,
                        color=style.ROLES["background"] if dev[i, j] < 0.5 else style.ROLES["ink"])
        ax.set_xticks(range(len(kinds)), [_SHORT_KINDS.get(k, k) for k in kinds], fontsize=SMALL)
        ax.set_yticks(range(len(rules)), rules if ax is axes[0] else [""] * len(rules))
        ax.tick_params(length=0)
        ax.set_title(f"{title}: after / before", fontsize=style.FONT_SIZE)
    bar = fig.colorbar(image, cax=fig.add_subplot(grid[0, 2]))
    bar.set_label("largest |log10 ratio|")
    bar.set_ticks([0, 0.1, 0.5, 1, 2])
    fig.text(0.1, 0.03, "κ = 100 where the transform stretches; 50 random pairs (A, B) per cell", fontsize=SMALL,
             color=BOUND)
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
        ax.text(*(1.1 * col), f"x{k + 1}", color=DATA, fontsize=SMALL)
    ax.quiver(0, 0, 0, *u.numpy(), color=style.color("Iso"), lw=2.5, arrow_length_ratio=0.12)
    ax.text(*(1.1 * u.numpy()), "g", color=style.color("Iso"), fontsize=style.FONT_SIZE, weight="bold")
    ax.plot(*np.stack([u.numpy(), p.numpy()], 1), color=BOUND, ls="--", lw=1.5)
    ax.quiver(0, 0, 0, *p.numpy(), color=BOUND, lw=1.5, arrow_length_ratio=0.12)
    ax.text(*(0.5 * p.numpy() - np.array([0, 0, 0.25])), "projection", color=BOUND, fontsize=SMALL)
    ax.text(*plane[0, 0].numpy(), "col(X)", color=DATA, fontsize=SMALL)
    ax.set(xlim=(-1, 1), ylim=(-1, 1), zlim=(-1, 1), xticks=[], yticks=[], zticks=[])
    ax.set_xlabel("sample 1", labelpad=-12)
    ax.set_ylabel("sample 2", labelpad=-12)
    ax.set_zlabel("sample 3", labelpad=-12)
    ax.view_init(elev=elev, azim=azim)
    ax.set_title(f"b = 3: g is {math.degrees(math.acos(min(cos, 1.0))):.0f}° from col(X);\n"
                 f"cos = {cos:.3f}, Iso's step = {sigma:.3f}", fontsize=style.FONT_SIZE, loc="center")
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
N_IN, N_OUT, PAIRS = 16, 8, 24
KAPPAS = (1, 3, 10, 30, 100, 300, 1000, 3000, 10000)   # main slider
KINDS = ("general", "monomial")
BATCHES = (4, 256)
CLIP = 1.1                                              # log2 of the ratio is drawn clipped to ±CLIP
_SAMPLERS = {"general": invariance.random_invertible,
             "monomial": lambda d, kappa, generator, sample_shape: random_monomial(d, kappa, generator=generator,
                                                                                    sample_shape=sample_shape)}


@functools.lru_cache(maxsize=None)
def invariance_data(kappa: float, kind: str, batch: int, rules: tuple = tuple(RULES)) -> dict:
    """What the explorable draws at one setting (seed 14): for each rule, the spectral and
    Frobenius norm ratios after/before for ``PAIRS`` random pairs ``(A, B)`` of the given
    kind and condition number, and the singular values before and after the first pair;
    plus the arrays the drawing needs, prepared once."""
    gen = generator(14)
    X, G = _gaussian(gen, batch, N_IN), _gaussian(gen, batch, N_OUT)
    sample = _SAMPLERS[kind]
    A = sample(N_IN, kappa, generator=gen, sample_shape=(PAIRS,))
    B = sample(N_OUT, kappa, generator=gen, sample_shape=(PAIRS,))
    data = {"rules": {}}
    jitter = np.linspace(-0.1, 0.1, PAIRS)
    xs, ys, cs, labels = {2: [], "fro": []}, {2: [], "fro": []}, {2: [], "fro": []}, []
    for i, name in enumerate(rules):
        rule = RULES[name]
        before, after = torch.linalg.svdvals(rule(X, G)), torch.linalg.svdvals(rule(X @ A, G @ B))
        ratios = {2: (after[:, 0] / before[0]).numpy(), "fro": (after.norm(dim=-1) / before.norm()).numpy()}
        data["rules"][name] = {"ratios": ratios, "before": before.numpy(), "after": after[0].numpy()}
        for offset, ord in ((-0.17, 2), (0.17, "fro")):
            r = ratios[ord]
            xs[ord].append(i + offset + jitter)
            ys[ord].append(np.clip(np.log2(r), -CLIP, CLIP))
            cs[ord] += [style.color(name)] * PAIRS
            median = float(np.median(r))
            if abs(math.log2(median)) > CLIP:   # off the scale: say by how much
                text = f"×{median:.2g}" if median < 100 else (f"×{median:.0f}" if median < 1000 else f"×{median / 1000:.1f}k")
                labels.append((i + offset, (1.22 if ord == "fro" else 1.38) * (1 if median > 1 else -1.1), text))
    data["dots"] = {ord: (np.concatenate(xs[ord]), np.concatenate(ys[ord]), cs[ord]) for ord in xs}
    data["labels"] = labels
    data["finite"] = all(np.isfinite(r).all() for d in data["rules"].values() for r in d["ratios"].values())
    return data


def _largest_log_ratio(name: str, kappa, kind, batch) -> float:
    """How far ``name``'s step sizes stray from invariance at one setting: max |log2 ratio|."""
    ratios = invariance_data(kappa, kind, batch)["rules"][name]["ratios"]
    return float(max(np.abs(np.log2(r)).max() for r in ratios.values()))


def _adam_on_monomials(kappa, kind, batch):
    return kind, _largest_log_ratio("Adam", kappa, kind, batch)


def _sgd_median(kappa, kind, batch) -> float:
    return float(np.median(invariance_data(kappa, kind, batch)["rules"]["SGD"]["ratios"][2]))


def _iso_small_batch(kappa, kind, batch):
    s = invariance_data(kappa, kind, batch)["rules"]["Iso"]
    nonzero = np.concatenate([s["before"], s["after"]])
    nonzero = nonzero[nonzero > 1e-9]
    return batch, float(np.abs(nonzero - 1).max()), int(nonzero.size)


def _cheap_yticks(ax, values, labels) -> None:
    """Tick marks and labels on the left edge drawn as one line and a few texts: a real
    tick costs a redraw about 3 ms (this figure redraws on every slider move)."""
    ax.set_yticks([])
    edge = ax.get_yaxis_transform()          # x in axes coordinates, y in data
    xs, ys = [], []
    for v, text in zip(values, labels):
        xs += [-0.015, 0.0, np.nan]
        ys += [v, v, np.nan]
        ax.text(-0.025, v, text, transform=edge, ha="right", va="center", fontsize=SMALL)
    ax.plot(xs, ys, transform=edge, color=style.ROLES["ink"], lw=1.0, clip_on=False)


def draw_invariance(fig: Figure, kappa: float, kind: str, batch: int) -> None:
    """Left: one dot per random pair (A, B) and rule, the step's norm after/before
    (filled dots spectral, crosses Frobenius), log scale from ½ to 2, off-scale medians
    written at the edge. Right: one pair's singular values before (line) and after (dots)
    for Iso and Adam, each over its largest singular value before."""
    data = invariance_data(kappa, kind, batch)
    if not data["finite"]:
        raise FigureMessage("an update vanished for these settings: no ratio to show")
    what = {"general": "rotations", "monomial": "signed permutations"}[kind] if kappa == 1 else f"{kind} transforms"
    ax_dots, ax_sv = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.9, 1]})
    for ord, marker in ((2, "o"), ("fro", "x")):
        x, y, c = data["dots"][ord]
        ax_dots.scatter(x, y, s=16 if marker == "o" else 22, c=c, marker=marker, linewidths=0 if marker == "o" else 1.3)
    for x, y, text in data["labels"]:
        ax_dots.text(x, y, text, ha="center", fontsize=SMALL)
    ax_dots.axhline(0, color=BOUND, lw=1.5, zorder=0)
    names = list(data["rules"])
    ax_dots.set(ylim=(-1.5, 1.55), xlim=(-0.55, len(names) - 0.45), ylabel="norm after / before")
    ax_dots.set_xticks([])
    for i, name in enumerate(names):   # the rules' names as plain text (cheaper than tick labels)
        ax_dots.text(i, -1.62, name, ha="center", va="top", color=style.text_color(style.color(name)), fontsize=SMALL)
    _cheap_yticks(ax_dots, [-1, 0, 1], ["½", "1", "2"])
    ax_dots.yaxis.set_label_coords(-0.06, 0.5)
    ax_dots.set_title(f"{what} (κ = {kappa:g}), b = {batch}:  ● spectral  × Frobenius", fontsize=style.FONT_SIZE)

    for k, name in enumerate(("Iso", "Adam")):
        d, look = data["rules"][name], style.look(name)
        index = np.arange(1, len(d["before"]) + 1)
        top = d["before"][0]
        ax_sv.plot(index, d["before"] / top, color=look.color, lw=2, ls=look.linestyle)
        ax_sv.plot(index, d["after"] / top, look.marker, color=look.color, ms=6, mfc="none", mew=1.5)
        ax_sv.text(N_OUT + 0.4, 1.9 - 0.2 * k, name, color=style.text_color(look.color), ha="right", va="center", fontsize=SMALL)
    ax_sv.set(xlim=(0.6, N_OUT + 0.4), ylim=(-0.06, 2.06), xlabel=f"index i = 1 … {N_OUT}")
    ax_sv.set_xticks([])
    _cheap_yticks(ax_sv, [0, 1, 2], ["0", "1", "2"])
    ax_sv.set_title("σᵢ / σ₁: line before, marks after", fontsize=style.FONT_SIZE)


CAPTION = ("Left: for each rule, one dot per random pair (A, B), the step's norm after the transform over before "
           "(filled: spectral, cross: Frobenius; log scale, ½ to 2, medians off the scale written at the edge). Right: "
           "one pair's singular values before (line) and after (marks), over the largest before. Move κ: Iso's dots "
           "stay on the line at 1 at every κ, and with monomial transforms Adam's stay there too; SGD's median "
           "ratio grows with κ. At b = 4 Iso's nonzero singular values are all 1.")


def invariance_explorable(precompute: bool = True) -> Explorable:
    """The chapter's explorable: κ (main), kind (general / monomial) and b → the step-size
    ratios of the five rules and the spectra of Iso and Adam before and after. With
    ``precompute`` every setting is computed now (about 2 s), so that a slider move
    only draws."""
    if precompute:
        for setting in itertools.product(KAPPAS, KINDS, BATCHES):
            invariance_data(*setting)
    return Explorable(
        draw_invariance,
        [Slider("kappa", KAPPAS, label="κ(A) = κ(B)", default=100),
         Slider("kind", KINDS, label="transform", default="general"),
         Slider("batch", BATCHES, label="batch b", default=256)],
        main="kappa",
        static_colors=32,
        figsize=(style.FIG_WIDTH, 3.5),
        caption=CAPTION,
        promises=[
            Promise("Iso's dots stay on the line at 1 at every κ", functools.partial(_largest_log_ratio, "Iso"),
                    always(lambda v: v < 1e-6, "|log2 ratio| < 1e-6")),
            Promise("with monomial transforms Adam's stay there too", _adam_on_monomials,
                    always(lambda v: v[0] != "monomial" or v[1] < 0.01, "monomial: |log2 ratio| < 0.01 (Adam's ε)")),
            Promise("SGD's median ratio grows with κ", _sgd_median, nondecreasing()),
            Promise("At b = 4 Iso's nonzero singular values are all 1", _iso_small_batch,
                    always(lambda v: v[0] != 4 or (v[1] < 1e-9 and v[2] == 8), "b = 4: four ones, before and after")),
        ],
    )


EXPLORABLES = (invariance_explorable,)
