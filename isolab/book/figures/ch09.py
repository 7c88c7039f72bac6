r"""Figures and explorables of Chapter 9, *The first step on linear regression*.

The problem (``x = Sigma z``, targets ``T = X A``, one layer at ``W = 0``) and the
first-step directions come from :mod:`isolab.book.first_step`; ``Sigma`` has the geometric
spectrum of :func:`isolab.book.features.spectrum` in one of three eigenbases
(:data:`isolab.book.first_step.BASES`): the coordinate axes, the pair rotation by 45 degrees
(coordinate ``i`` mixed only with ``n-1-i``) and a Haar-random basis, the generic case.
Each figure and the chapter's printed checks share one computation here:

- :func:`polar_angle` / :func:`hero`: in two dimensions, with ``Sigma = diag(kappa, 1)``,
  Iso's first step is a rotation by ``atan2(c - kappa b, kappa a + d)`` and Muon's by the
  same with ``kappa^2``; the hero also shows, for ``n = 16`` in a Haar basis, how much of
  the target each first step keeps and the loss after one tuned step (:func:`formula_losses`),
  where Muon's step, the best orthogonal one for this loss, beats Iso's.
- :func:`recovery` / :func:`recovery_figure`: mean ``cos(first step, A)`` against
  ``kappa`` for the three eigenbases (large-batch formulas, 16 targets).
- :func:`tuned_losses` / :func:`tuned_loss_figure` / :func:`loss_table`: the loss after
  one tuned step, from the experiment engine and from the closed form.
- :func:`explore` / :func:`draw_first_step` / :func:`first_step_explorable`: the target,
  Adam's and Iso's first steps and the tuned losses (log axis) as ``kappa``, the eigenbasis
  (a toggle: ``"diagonal"`` or ``"random"``) and the batch change.

``EXPLORABLES`` lists the explorable builders (``tests/book/test_captions.py`` checks their
caption promises over the whole slider grid).
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch
from matplotlib import colormaps
from matplotlib.figure import Figure

from isolab.book import first_step
from isolab.book.explorable import Explorable, FigureMessage, Promise, Slider, always, nonincreasing
from isolab.book.figures import style
from isolab.book.plotting import log_ticks
from isolab.book.seeding import generator

__all__ = [
    "N", "NAMES", "KAPPAS", "BASIS_TITLES", "HERO_A", "polar_angle", "hero", "cosine", "recovery",
    "mirrored_rows", "recovery_figure", "tuned_losses", "formula_losses", "tuned_loss_figure", "loss_table", "explore", "draw_first_step",
    "first_step_explorable", "EXPLORABLES",
]

N = 16
NAMES = first_step.OPTIMIZERS
KAPPAS = (1, 3, 10, 30, 100, 300, 1000)
BASIS_TITLES = {"diagonal": "Σ diagonal", "pair": "pair rotation by 45°", "haar": "random eigenbasis (Haar)"}
_SMALL = style.FONT_SIZE - 1


def cosine(U, V):
    """Frobenius cosine between two (batches of) matrices."""
    return (U * V).sum((-2, -1)) / (torch.linalg.matrix_norm(U) * torch.linalg.matrix_norm(V))


def _direct_labels(ax, x, ends: dict, gap: float, fontsize=_SMALL):
    """Optimizer names right of the curves' last points, pushed apart by at least ``gap``."""
    placed = []
    for name, y in sorted(ends.items(), key=lambda item: -item[1]):
        y_label = min([y] + [placed[-1] - gap] if placed else [y])
        placed.append(y_label)
        ax.annotate(name, (x, y_label), xytext=(5, 0), textcoords="offset points", color=style.text_color(style.color(name)),
                    va="center", ha="left", fontsize=fontsize)


# ------------------------------------------------------------------------------ hero
#: The 2x2 target of the opening figure (det > 0, so both polar factors are rotations).
HERO_A = ((0.2, -1.0), (-1.0, 6.0))


def polar_angle(A, kappa, power: int = 1):
    r"""The angle (degrees) of the rotation ``msign(diag(kappa, 1)^power A)`` for a 2x2 ``A``
    with ``det A > 0``: ``atan2(c - kappa^p b, kappa^p a + d)`` (the SymPy result of the
    chapter, divided by the smaller eigenvalue).  ``power = 1`` is Iso's first step,
    ``power = 2`` Muon's.  ``kappa`` may be an array."""
    (a, b), (c, d) = A
    k = np.asarray(kappa, dtype=float) ** power
    return np.degrees(np.arctan2(c - k * b, k * a + d))


def hero() -> Figure:
    """The chapter in three panels. Left: the rotation angle of Iso's and Muon's first step
    against κ in two dimensions (closed form). Middle: how much of the target each first
    step keeps for n = 16 in a random eigenbasis. Right: the loss after one step with the
    best learning rate, where Muon's step, the best orthogonal step for this loss, is below
    Iso's at every κ > 1 and the lowest of all from κ = 10 on."""
    fig = Figure(figsize=(style.FIG_WIDTH, 4.0))
    ax, ax2, ax3 = fig.subplots(1, 3, gridspec_kw={"width_ratios": [1, 1, 1]})
    fig.subplots_adjust(left=0.07, right=0.9, bottom=0.15, top=0.8, wspace=0.68)

    kappa = np.logspace(0, 3, 200)
    start, limit = polar_angle(HERO_A, 1.0), polar_angle(HERO_A, 1e12)
    for name, power in (("Iso", 1), ("Muon", 2)):
        ax.plot(kappa, polar_angle(HERO_A, kappa, power), **style.line(name, markers=False))
    for y, text, va in ((start, "κ = 1: msign(A) = I", "top"), (limit, "κ → ∞", "bottom")):
        ax.axhline(y, color=style.ROLES["muted"], linewidth=1.0, linestyle=(0, (3, 3)), zorder=0)
        ax.text(900, y + (2.0 if va == "bottom" else -2.5), text, fontsize=_SMALL, color=style.ROLES["bound"], va=va,
                ha="right")
    # the same angle is reached by Muon at sqrt(kappa) and by Iso at kappa
    k_iso = 20.0
    level = float(polar_angle(HERO_A, k_iso))
    ax.annotate("", (math.sqrt(k_iso), level), (k_iso, level),
                arrowprops=dict(arrowstyle="-|>", color=style.ROLES["ink"], lw=1.3, shrinkA=2, shrinkB=2))
    ax.text(1.12, 92, "Muon at √κ =\nIso at κ", ha="left", va="top", fontsize=_SMALL)
    for name, power in (("Iso", 1), ("Muon", 2)):
        ax.annotate(name, (kappa[-1], polar_angle(HERO_A, kappa[-1], power)), xytext=(4, -9 if name == "Iso" else 6),
                    textcoords="offset points", color=style.text_color(style.color(name)), fontsize=_SMALL,
                    va="center")
    ax.set_xscale("log")
    log_ticks(ax.xaxis, range(0, 4))
    ax.set(xlim=(1, 1000), ylim=(-14, 95), xlabel="κ(Σ),  Σ = diag(κ, 1)", ylabel="rotation angle of the step (°)")
    ax.set_yticks([0, 30, 60])
    ax.set_title("2 × 2: a rotation", fontsize=style.FONT_SIZE)

    for axis, data, title, ylabel, ylim, ticks in (
            (ax2, {k: recovery("haar")[k] for k in KAPPAS}, "how much of A it keeps", "cos(first step, A)",
             (0.2, 1.03), [0.25, 0.5, 0.75, 1.0]),
            (ax3, formula_losses("haar"), "loss after one tuned step", "L(W₁) / L(0)", (0, 0.6), [0, 0.2, 0.4, 0.6])):
        ends = {}
        for name in NAMES:
            y = [data[k][name] for k in KAPPAS]
            axis.plot(KAPPAS, y, **style.line(name, markersize=4))
            ends[name] = y[-1]
        _direct_labels(axis, KAPPAS[-1], ends, gap=0.055 if axis is ax2 else 0.04)
        axis.set_xscale("log")
        log_ticks(axis.xaxis, range(0, 4))
        axis.set(xlim=(0.8, 1000), ylim=ylim, xlabel="κ(Σ), n = 16", ylabel=ylabel)
        axis.set_yticks(ticks)
        axis.set_title(title, fontsize=style.FONT_SIZE)
    fig.suptitle("Iso's first step follows Σ, Muon's Σ²: Iso keeps more of A, Muon's tuned step loses less",
                 fontsize=style.FONT_SIZE + 1)
    return fig


# ---------------------------------------------------------------- 9.6: recovery of A
@functools.lru_cache(maxsize=None)
def _exact_batch():
    return first_step.orthogonal_batch(256, N, generator(2))          # Z^T Z = b I


@functools.lru_cache(maxsize=None)
def _targets():
    return torch.randn(16, N, N, generator=generator(3), dtype=torch.float64)


@functools.lru_cache(maxsize=None)
def recovery(kind: str, kappas: tuple = KAPPAS) -> dict:
    """``{kappa: {optimizer: mean cos(first step, A)}}`` over 16 targets ``A``, on an exact
    batch (the large-batch formulas), with ``Sigma`` in the eigenbasis ``kind``."""
    Z, As = _exact_batch(), _targets()
    basis = first_step.eigenbasis(N, kind)
    out = {}
    for kappa in kappas:
        S = first_step.sigma_in_basis(kappa, basis)
        steps = first_step.first_steps(Z @ S, Z @ S @ As)
        out[kappa] = {k: cosine(D, As).mean().item() for k, D in steps.items()}
    return out


def mirrored_rows(step) -> int:
    """How many row pairs ``(i, n-1-i)`` of a sign step are equal up to an overall sign (the
    mirror pattern of the pair rotation)."""
    signs = torch.sign(step)
    n = signs.shape[0]
    return sum(bool((signs[i] * signs[n - 1 - i]).mean().abs() == 1) for i in range(n // 2))


def recovery_figure() -> Figure:
    """Mean cos(first step, A) against κ, one panel per eigenbasis of Σ."""
    fig = Figure(figsize=(style.FIG_WIDTH, 3.7))
    axes = fig.subplots(1, 3, sharey=True)
    fig.subplots_adjust(left=0.07, right=0.93, bottom=0.16, top=0.86, wspace=0.3)
    for ax, kind in zip(axes, first_step.BASES):
        data = recovery(kind)
        ends = {}
        for name in NAMES:
            y = [data[k][name] for k in KAPPAS]
            ax.plot(KAPPAS, y, **style.line(name, markersize=4))
            ends[name] = y[-1]
        ax.set_xscale("log")
        log_ticks(ax.xaxis, range(0, 4))
        ax.set(xlim=(0.8, 1000), ylim=(0.2, 1.03), xlabel="κ(Σ)")
        ax.set_title(f"{BASIS_TITLES[kind]}\nAdam at κ = 1000: {ends['Adam']:.2f}", fontsize=_SMALL)
    _direct_labels(axes[-1], KAPPAS[-1], ends, gap=0.055, fontsize=_SMALL)
    axes[0].set_yticks([0.25, 0.5, 0.75, 1.0])
    axes[0].set_ylabel("mean cos(first step, A)")
    return fig


# ------------------------------------------------------------ 9.7: the tuned first step
HYPER = {"Muon": {"exact": True, "momentum": 0.0}, "Iso": {"damping": 0.0, "momentum": 0.0},
         "IsoAdam": {"damping": 0.0}}


@functools.lru_cache(maxsize=None)
def tuned_losses(kind: str, seeds: tuple = (0, 1, 2, 3), kappas: tuple = KAPPAS) -> tuple[dict, dict]:
    """``(engine, formula)``, each ``{kappa: {optimizer: mean L(W_1)/L(0)}}`` over ``seeds``:
    the engine's best single step on a Gaussian batch of 1024
    (:func:`isolab.book.first_step.tuned_one_step`) and the closed-form line search along the
    large-batch direction, for ``Sigma`` in the eigenbasis ``kind``."""
    engine = {}
    for kappa in kappas:
        p = first_step.RegressionInBasis(n=N, batch=1024, condition_number=kappa, kind=kind)
        engine[kappa] = {k: float(np.mean([first_step.tuned_one_step(p, k.lower(), seed=s, hyper=HYPER.get(k))
                                           ["relative_loss"] for s in seeds])) for k in NAMES}
    return engine, formula_losses(kind, seeds, kappas)


@functools.lru_cache(maxsize=None)
def formula_losses(kind: str, seeds: tuple = (0, 1, 2, 3), kappas: tuple = KAPPAS) -> dict:
    """``{kappa: {optimizer: mean L(W_1)/L(0)}}``: the closed-form line search along each
    large-batch first step (an exact batch), for the targets of ``seeds``."""
    out = {}
    for kappa in kappas:
        p = first_step.RegressionInBasis(n=N, batch=1024, condition_number=kappa, kind=kind)
        At = torch.stack([p.target_matrix(s) for s in seeds])
        Z = _exact_batch()
        steps = first_step.first_steps(Z @ p.sigma, Z @ p.sigma @ At)
        out[kappa] = {k: first_step.line_search(D, At, p.sigma)[1].mean().item() for k, D in steps.items()}
    return out


def loss_table(kinds=("diagonal", "haar")) -> None:
    """Print the engine's tuned losses (the numbers behind :func:`tuned_loss_figure`)."""
    for kind in kinds:
        engine, _ = tuned_losses(kind)
        print(f"loss after one tuned step / initial loss, {BASIS_TITLES[kind]} (trained, b = 1024)")
        print("  kappa  " + "".join(f"{k:>9s}" for k in NAMES))
        for kappa in KAPPAS:
            print(f"  {kappa:5d}  " + "".join(f"{engine[kappa][k]:9.3f}" for k in NAMES))


def tuned_loss_figure(kinds=("diagonal", "haar"), seeds: tuple = (0, 1, 2, 3)) -> Figure:
    """Loss after one tuned step against κ: markers the engine, lines the closed form."""
    fig = Figure(figsize=(style.FIG_WIDTH, 4.0))
    axes = fig.subplots(1, len(kinds), sharey=True, squeeze=False)[0]
    fig.subplots_adjust(left=0.08, right=0.9, bottom=0.14, top=0.8, wspace=0.12)
    for ax, kind in zip(axes, kinds):
        engine, formula = tuned_losses(kind, tuple(seeds))
        ends = {}
        for name in NAMES:
            ax.plot(KAPPAS, [formula[k][name] for k in KAPPAS], **style.line(name, markers=False, alpha=0.7))
            ax.plot(KAPPAS, [engine[k][name] for k in KAPPAS], **style.line(name, linestyle="none"))
            ends[name] = engine[KAPPAS[-1]][name]
        ax.set_xscale("log")
        log_ticks(ax.xaxis, range(0, 4))
        ax.set(xlim=(0.8, 1000), ylim=(0, 0.6), xlabel="condition number κ(Σ)")
        ax.set_title(f"{BASIS_TITLES[kind]}: at κ = 1000\nIso {ends['Iso']:.3f}, Muon {ends['Muon']:.3f}",
                     fontsize=_SMALL)
    _direct_labels(axes[-1], KAPPAS[-1], ends, gap=0.035)
    axes[0].set_yticks([0, 0.2, 0.4, 0.6])
    axes[0].set_ylabel("L(W₁) / L(0) after one tuned step")
    fig.suptitle("markers: the optimizers themselves (b = 1024); lines: the large-batch formulas",
                 fontsize=_SMALL, y=0.985)
    return fig


# --------------------------------------------------------------------- 9.8: explorable
EXPLORE_KAPPAS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)
EXPLORE_BASES = ("diagonal", "random")                 # toggle values; "random" is the Haar basis
_KIND = {"diagonal": "diagonal", "random": "haar"}
_SHORT_BASIS = {"diagonal": "Σ diagonal", "random": "random basis"}
EXPLORE_BATCHES = (16, 64, 1024)                 # 60 frames: five stops would take 2.8 MB, over the budget
#: The loss axis of the bars: logarithmic, so that small losses stay apart (Muon's tick
#: below Iso's at large κ, where both are a few per cent).
LOSS_YLIM = (1e-2, 1.5)
_HEAT = colormaps["RdBu_r"].with_extremes(bad="none")  # the gaps between the maps stay blank


@functools.lru_cache(maxsize=None)
def _explore_data():
    A = torch.randn(N, N, generator=generator(6), dtype=torch.float64)
    Z = torch.randn(max(EXPLORE_BATCHES), N, generator=generator(7), dtype=torch.float64)
    return A, Z, first_step.orthogonal_batch(64, N, generator(8))


@functools.lru_cache(maxsize=None)
def explore(kappa, basis, batch) -> dict:
    """Everything the explorable shows at one setting: the target ``A``, each first step
    on the Gaussian batch of size ``batch`` and on an exact batch (b → ∞), the loss after
    one tuned step for both, Adam's and Iso's cosines with ``A`` and the share of Adam's
    signs that agree with ``sgn(A)``."""
    A, Z, Z_exact = _explore_data()
    S = first_step.sigma_in_basis(kappa, first_step.eigenbasis(N, _KIND[basis]))
    Xb = Z[:batch] @ S
    steps = first_step.first_steps(Xb, Xb @ A)
    limit = first_step.first_steps(Z_exact @ S, Z_exact @ S @ A)
    finite = all(bool(torch.isfinite(D).all()) for D in steps.values())
    out = {"A": A, "steps": steps, "finite": finite,
           "rel_limit": {k: first_step.line_search(limit[k], A, S)[1].item() for k in NAMES},
           "adam_agree_limit": (torch.sign(limit["Adam"]) == torch.sign(A)).double().mean().item(),
           "iso_cos_limit": cosine(limit["Iso"], A).item()}
    if finite:
        out["rel"] = {k: first_step.line_search(steps[k], A, S)[1].item() for k in NAMES}
        out["cos"] = {k: cosine(steps[k], A).item() for k in ("Adam", "Iso")}
        out["adam_agree"] = (torch.sign(steps["Adam"]) == torch.sign(A)).double().mean().item()
        out["adam_wrong"] = torch.nonzero(torch.sign(steps["Adam"]) != torch.sign(A)).numpy()
    return out


def draw_first_step(fig, kappa, basis, batch):
    """Left: A, Adam's step (dots where its sign differs from A's) and Iso's step, one image;
    right: the loss after one tuned step per optimizer, black ticks at b → ∞."""
    d = explore(kappa, basis, batch)
    if not d["finite"]:
        raise FigureMessage("This batch is too small for Cov(X) to be inverted: choose b >= n.")
    ax_maps, ax = fig.subplots(1, 2, gridspec_kw={"width_ratios": [2.6, 1]})
    shown = [d["A"], d["steps"]["Adam"], d["steps"]["Iso"]]
    strip = torch.full((N, 3 * N + 4), float("nan"), dtype=torch.float64)
    for i, M in enumerate(shown):
        strip[:, i * (N + 2):i * (N + 2) + N] = M / M.square().mean().sqrt()
    image = ax_maps.imshow(strip.numpy(), cmap=_HEAT, vmin=-2, vmax=2, interpolation="nearest")
    style.colorbar(fig, image, ax_maps, "entry / RMS entry", ticks=[-2, 0, 2])
    wrong = d["adam_wrong"]
    if len(wrong):
        ax_maps.scatter(wrong[:, 1] + N + 2, wrong[:, 0], s=7, color=style.ROLES["ink"], marker="o", linewidths=0)
    centers = [i * (N + 2) + (N - 1) / 2 for i in range(3)]
    kept = f"{100 * d['adam_agree']:.0f}% of A's signs\n(b → ∞: {100 * d['adam_agree_limit']:.0f}%)"
    ax_maps.set_xticks(centers, ["target A", f"Adam: cos {d['cos']['Adam']:.2f},\n{kept}",
                                 f"Iso: cos {d['cos']['Iso']:.2f}"])
    ax_maps.set(yticks=[], ylabel="input i",
                title=f"{_SHORT_BASIS[basis]}, κ = {kappa}, b = {batch}")
    ax_maps.tick_params(axis="x", length=0)
    ax_maps.spines[:].set_visible(False)
    ax.bar(range(5), [d["rel"][k] - LOSS_YLIM[0] for k in NAMES], bottom=LOSS_YLIM[0],
           color=[style.color(k) for k in NAMES])
    floor = 1.2 * LOSS_YLIM[0]   # a tick below the axis (SGD solves κ = 1 exactly) sits on the floor, labelled
    ticks = [d["rel_limit"][k] for k in NAMES]
    ax.scatter(range(5), np.maximum(ticks, floor), marker="_", s=300, linewidths=2, color=style.ROLES["target"])
    for i, value in enumerate(ticks):
        if value < floor:
            ax.text(i, floor * 1.15, "≈ 0", ha="center", va="bottom", fontsize=_SMALL, color=style.ROLES["ink"],
                    bbox=dict(facecolor=style.ROLES["background"], edgecolor="none", pad=0.5))
    ax.set_yscale("log")
    ax.set(ylim=LOSS_YLIM, xticks=range(5), ylabel="tuned loss / L(0)",
           title=f"ticks: b → ∞\nMuon {d['rel_limit']['Muon']:.3f}, Iso {d['rel_limit']['Iso']:.3f}")
    log_ticks(ax.yaxis, (-2, -1, 0))
    ax.set_xticklabels(list(NAMES), rotation=45, ha="right", rotation_mode="anchor")


#: Muon's and Iso's large-batch steps coincide at κ = 1, where their losses tie up to the
#: rounding of two different float64 computations: compared relative to their size.
TIE_RTOL = 1e-9


def muon_minus_iso(kappa, basis, batch) -> float:
    """Muon's large-batch tuned loss minus Iso's (the black ticks), relative to Iso's."""
    rel = explore(kappa, basis, batch)["rel_limit"]
    return (rel["Muon"] - rel["Iso"]) / rel["Iso"]


def iso_loss(kappa, basis, batch) -> float:
    """Iso's tuned loss on the figure's batch (its bar)."""
    return explore(kappa, basis, batch)["rel"]["Iso"]


def adam_signs_limit(kappa, basis, batch) -> float:
    """The share of Adam's large-batch signs equal to sgn(A)."""
    return explore(kappa, basis, batch)["adam_agree_limit"]


def adam_signs_diagonal(kappa, basis, batch) -> tuple:
    """(basis, share of Adam's large-batch signs equal to sgn(A))."""
    return basis, explore(kappa, basis, batch)["adam_agree_limit"]


CAPTION = (
    "The target A, Adam's and Iso's first steps on this batch (each scaled to a unit RMS entry; dots mark "
    "where Adam's sign differs from A's) and the loss after one tuned step for each optimizer, with black "
    "ticks at b → ∞. Raise κ: Iso's bar falls, and Muon's tick is never above Iso's. The share of A's signs "
    "that Adam keeps at b → ∞ never rises with κ; with Σ diagonal it stays at 100%."
)


def first_step_explorable() -> Explorable:
    """The first step as κ (main slider), the eigenbasis of Σ and the batch change."""
    return Explorable(
        draw_first_step,
        [Slider("kappa", list(EXPLORE_KAPPAS), label="κ(Σ)", default=100),
         Slider("basis", list(EXPLORE_BASES), label="eigenbasis of Σ", default="random", fmt="{}"),
         Slider("batch", list(EXPLORE_BATCHES), label="batch b", default=1024)],
        main="kappa",
        static_colors=96,
        figsize=(style.FIG_WIDTH, 3.4),
        caption=CAPTION,
        promises=[
            Promise("Iso's bar falls", iso_loss, nonincreasing(tol=0.0)),
            Promise("Muon's tick is never above Iso's", muon_minus_iso,
                    always(lambda v: v <= TIE_RTOL, f"<= {TIE_RTOL:.0e} relative (they tie at κ = 1)")),
            Promise("The share of A's signs that Adam keeps at b → ∞ never rises with κ", adam_signs_limit,
                    nonincreasing(tol=1e-12)),
            Promise("with Σ diagonal it stays at 100%", adam_signs_diagonal,
                    always(lambda v: v[0] != "diagonal" or v[1] == 1.0, "100% wherever Σ is diagonal")),
        ],
    )


EXPLORABLES = (first_step_explorable,)
