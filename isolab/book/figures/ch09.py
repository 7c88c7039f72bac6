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
  ``kappa`` for the three eigenbases (large-batch formulas, :data:`TARGETS` targets, each with
  its own Haar basis in the random case; :func:`recovery_samples` keeps every target).
- :func:`batch_losses`, :func:`formula_samples`, :func:`formula_losses`, :func:`interval`,
  :func:`tuned_loss_figure`, :func:`loss_table`: the loss after one exactly tuned step,
  on Gaussian batches of 1024 and along the large-batch steps, per target, with 95%
  intervals for the means.
- :func:`explore` / :func:`draw_difference` / :func:`difference_explorable`: the centerpiece:
  Iso's first step, the differences Muon − Iso and Adam − Iso, and each optimizer's tuned loss
  relative to Iso's, as ``kappa`` (main slider) and the eigenbasis (a toggle) change.

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
from isolab.book.explorable import Explorable, Promise, Slider, always, nondecreasing
from isolab.book.figures import style
from isolab.book.plotting import log_ticks
from isolab.book.seeding import generator

__all__ = [
    "N", "NAMES", "KAPPAS", "BASIS_TITLES", "HERO_A", "TARGETS", "polar_angle", "hero", "cosine", "sigmas",
    "interval", "recovery", "recovery_samples", "mirrored_rows", "recovery_figure", "HYPER", "batch_losses",
    "formula_samples", "formula_losses", "tuned_loss_figure", "loss_table", "explore", "draw_difference",
    "difference_explorable", "muon_iso_rms", "adam_iso_rms", "muon_vs_iso", "adam_signs_diagonal", "TIE_RTOL",
    "EXPLORABLES",
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
#: Targets per setting: each its own A, its own Gaussian batch and, in the random basis, its
#: own Haar-random eigenbasis, so that the intervals cover every draw the chapter makes.
TARGETS = 256


@functools.lru_cache(maxsize=None)
def _exact_batch():
    return first_step.orthogonal_batch(256, N, generator(2))          # Z^T Z = b I


@functools.lru_cache(maxsize=None)
def _targets():
    return torch.randn(TARGETS, N, N, generator=generator(3), dtype=torch.float64)


@functools.lru_cache(maxsize=None)
def sigmas(kind: str, kappa: float) -> torch.Tensor:
    """``(TARGETS, n, n)``: Σ for each target, in the eigenbasis ``kind`` (a fresh Haar draw,
    seed ``s``, for target ``s`` in the random basis; the same matrix otherwise)."""
    return torch.stack([first_step.sigma_in_basis(kappa, first_step.eigenbasis(N, kind, seed=s))
                        for s in range(TARGETS)])


def interval(values) -> tuple[float, float]:
    """``(mean, half-width)`` of a normal 95% interval for the mean of ``values``."""
    v = np.asarray(values, dtype=float)
    return float(v.mean()), float(1.96 * v.std(ddof=1) / math.sqrt(len(v)))


@functools.lru_cache(maxsize=None)
def recovery_samples(kind: str, kappas: tuple = KAPPAS) -> dict:
    """``{kappa: {optimizer: cos(first step, A) per target}}`` on an exact batch (the
    large-batch formulas), :data:`TARGETS` targets, Σ in the eigenbasis ``kind``."""
    Z, As = _exact_batch(), _targets()
    out = {}
    for kappa in kappas:
        S = sigmas(kind, kappa)
        steps = first_step.first_steps(Z @ S, Z @ S @ As)
        out[kappa] = {k: cosine(D, As).numpy() for k, D in steps.items()}
    return out


def recovery(kind: str, kappas: tuple = KAPPAS) -> dict:
    """``{kappa: {optimizer: mean cos(first step, A)}}`` over :data:`TARGETS` targets."""
    return {k: {n: float(v.mean()) for n, v in d.items()} for k, d in recovery_samples(kind, kappas).items()}


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
def batch_losses(kind: str, kappas: tuple = KAPPAS) -> dict:
    """``{kappa: {optimizer: L(W_1)/L(0) per target}}``: the exactly tuned single step
    (:func:`isolab.book.first_step.line_search`) along each optimizer's first step on a
    Gaussian batch of 1024 (target ``s`` with batch ``s`` of
    :class:`~isolab.book.first_step.RegressionInBasis`, the data the optimizers see in the
    engine), :data:`TARGETS` targets, Σ in the eigenbasis ``kind``."""
    out = {}
    for kappa in kappas:
        problems = [first_step.RegressionInBasis(n=N, batch=1024, condition_number=kappa, kind=kind,
                                                 basis_seed=s if kind == "haar" else 0) for s in range(TARGETS)]
        A = torch.stack([p.target_matrix(s) for s, p in enumerate(problems)])
        X, T = (torch.stack(t) for t in zip(*(p.batch(step=0, seed=s) for s, p in enumerate(problems))))
        S = torch.stack([p.sigma for p in problems])
        steps = first_step.first_steps(X, T)
        out[kappa] = {k: first_step.line_search(D, A, S)[1].numpy() for k, D in steps.items()}
    return out


@functools.lru_cache(maxsize=None)
def formula_samples(kind: str, kappas: tuple = KAPPAS) -> dict:
    """Like :func:`batch_losses` along the large-batch first steps (an exact batch), for the
    same targets and Σ."""
    out = {}
    for kappa in kappas:
        problems = [first_step.RegressionInBasis(n=N, batch=1024, condition_number=kappa, kind=kind,
                                                 basis_seed=s if kind == "haar" else 0) for s in range(TARGETS)]
        A = torch.stack([p.target_matrix(s) for s, p in enumerate(problems)])
        S = torch.stack([p.sigma for p in problems])
        Z = _exact_batch()
        steps = first_step.first_steps(Z @ S, Z @ S @ A)
        out[kappa] = {k: first_step.line_search(D, A, S)[1].numpy() for k, D in steps.items()}
    return out


def formula_losses(kind: str, kappas: tuple = KAPPAS) -> dict:
    """``{kappa: {optimizer: mean L(W_1)/L(0)}}`` along the large-batch first steps."""
    return {k: {n: float(v.mean()) for n, v in d.items()} for k, d in formula_samples(kind, kappas).items()}


def loss_table(kinds=("diagonal", "haar")) -> str:
    """The numbers behind :func:`tuned_loss_figure`: the mean tuned loss on the batches with
    its 95% interval, per basis, κ and optimizer."""
    lines = []
    for kind in kinds:
        data = batch_losses(kind)
        lines.append(f"tuned loss / L(0), {BASIS_TITLES[kind]}, b = 1024, {TARGETS} targets (mean ± 95%)")
        lines.append("kappa " + "".join(f"{k:>13s}" for k in NAMES))
        for kappa in KAPPAS:
            lines.append(f"{kappa:5d} " + "".join("{:>13s}".format("{:.3f} ± {:.3f}".format(*interval(data[kappa][k])))
                                                  for k in NAMES))
    return "\n".join(lines)


def tuned_loss_figure(kinds=("diagonal", "haar")) -> Figure:
    """Loss after one tuned step against κ: markers the mean on Gaussian batches of 1024 with
    its 95% interval, lines the large-batch formulas."""
    fig = Figure(figsize=(style.FIG_WIDTH, 4.0))
    axes = fig.subplots(1, len(kinds), sharey=True, squeeze=False)[0]
    fig.subplots_adjust(left=0.08, right=0.9, bottom=0.14, top=0.8, wspace=0.12)
    for ax, kind in zip(axes, kinds):
        batch, formula = batch_losses(kind), formula_losses(kind)
        ends = {}
        for name in NAMES:
            ax.plot(KAPPAS, [formula[k][name] for k in KAPPAS], **style.line(name, markers=False, alpha=0.7))
            mean, half = zip(*(interval(batch[k][name]) for k in KAPPAS))
            ax.errorbar(KAPPAS, mean, yerr=half, capsize=2, **style.line(name, linestyle="none", markersize=5))
            ends[name] = mean[-1]
        ax.set_xscale("log")
        log_ticks(ax.xaxis, range(0, 4))
        ax.set(xlim=(0.8, 1000), ylim=(0, 0.6), xlabel="condition number κ(Σ)")
        ax.set_title(f"{BASIS_TITLES[kind]}: at κ = 1000\nIso {ends['Iso']:.3f}, Muon {ends['Muon']:.3f}",
                     fontsize=_SMALL)
    _direct_labels(axes[-1], KAPPAS[-1], ends, gap=0.035)
    axes[0].set_yticks([0, 0.2, 0.4, 0.6])
    axes[0].set_ylabel("L(W₁) / L(0) after one tuned step")
    fig.suptitle(f"markers: mean over {TARGETS} targets on batches of 1024 (bars: 95% interval); "
                 "lines: the large-batch formulas", fontsize=_SMALL, y=0.985)
    return fig


# ------------------------------------------------------------- 9.8: the centerpiece
EXPLORE_KAPPAS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)
EXPLORE_BASES = ("diagonal", "random")                 # toggle values; "random" is a Haar basis
_KIND = {"diagonal": "diagonal", "random": "haar"}
_SHORT_BASIS = {"diagonal": "Σ diagonal", "random": "random basis"}
#: The range of the heatmaps (entries of steps scaled to a unit RMS entry) and of the bars
#: (tuned loss relative to Iso's, in %): values beyond are drawn at the edge, labelled. Each
#: difference map has its own scale, the same in every frame: Muon − Iso (RMS up to 0.21)
#: on ±0.6, Adam − Iso (RMS 0.8 to 1.2, entries up to 3.3) on ±3; on ±0.6 the reader test
#: saw the Adam − Iso map saturated everywhere.
HEAT_RANGE, DIFF_RANGE, ADAM_DIFF_RANGE, BAR_RANGE = 2.0, 0.6, 3.0, 30.0
_HEAT = colormaps["RdBu_r"].with_extremes(bad="none")  # the gaps between the maps stay blank
_OTHERS = ("SGD", "Adam", "Muon", "IsoAdam")
_SHOWN = ("Muon", "Adam")     # the two whose difference from Iso the maps show


@functools.lru_cache(maxsize=None)
def _explore_target():
    return (torch.randn(N, N, generator=generator(6), dtype=torch.float64),
            first_step.orthogonal_batch(64, N, generator(8)))


def _unit(M):
    return M / M.square().mean().sqrt()


@functools.lru_cache(maxsize=None)
def explore(kappa, basis) -> dict:
    """Everything the centerpiece shows at one setting, on an exact batch (the large-batch
    first steps) with one target ``A``: Iso's step and the differences Muon − Iso and
    Adam − Iso (each step scaled to a unit RMS entry), their RMS, each optimizer's tuned loss
    relative to Iso's, and the share of Adam's signs equal to those of ``A``."""
    A, Z = _explore_target()
    S = first_step.sigma_in_basis(kappa, first_step.eigenbasis(N, _KIND[basis]))
    steps = {k: _unit(D) for k, D in first_step.first_steps(Z @ S, Z @ S @ A).items()}
    rel = {k: first_step.line_search(D, A, S)[1].item() for k, D in steps.items()}
    muon, adam = steps["Muon"] - steps["Iso"], steps["Adam"] - steps["Iso"]
    rms = lambda M: M.square().mean().sqrt().item()  # noqa: E731
    return {"iso": steps["Iso"], "muon": muon, "adam": adam, "muon_rms": rms(muon), "adam_rms": rms(adam),
            "rel": rel, "vs_iso": {k: rel[k] / rel["Iso"] - 1 for k in _OTHERS},
            "adam_signs": (torch.sign(steps["Adam"]) == torch.sign(A)).double().mean().item()}


def draw_difference(fig, kappa, basis):
    """Left: Iso's first step; middle: how Muon's and Adam's differ from it (their own colour
    scale each, so that the smaller Muon − Iso stays visible and Adam − Iso fits); right: Muon's and Adam's tuned loss
    relative to Iso's, in %."""
    d = explore(kappa, basis)
    axes = fig.subplots(1, 4, gridspec_kw={"width_ratios": [1, 1, 1, 0.8]})
    fig.subplots_adjust(left=0.03, right=0.89, bottom=0.27, top=0.83, wspace=0.3)
    maps = (("iso", "Iso's step\nmsign(ΣA)", HEAT_RANGE), ("muon", f"Muon − Iso\nRMS {d['muon_rms']:.2f}", DIFF_RANGE),
            ("adam", f"Adam − Iso\nRMS {d['adam_rms']:.2f}", ADAM_DIFF_RANGE))
    images = []
    for ax, (key, title, top) in zip(axes, maps):
        images.append(ax.imshow(d[key].numpy(), cmap=_HEAT, vmin=-top, vmax=top, interpolation="nearest"))
        ax.set_title(title, fontsize=style.FONT_SIZE)
        ax.set(xticks=[], yticks=[])
    for image, host, label, top in ((images[0], axes[0], "entry (unit RMS)", HEAT_RANGE),
                                    (images[1], axes[1], "Muon − Iso entry", DIFF_RANGE),
                                    (images[2], axes[2], "Adam − Iso entry", ADAM_DIFF_RANGE)):
        bar = fig.colorbar(image, ax=host, orientation="horizontal", fraction=0.07, pad=0.06, aspect=20)
        bar.set_label(label)
        bar.set_ticks([-top, 0, top], labels=[f"−{top:g}", "0", f"{top:g}"])
        bar.outline.set_linewidth(0.5)
    ax = axes[3]
    values = [100 * d["vs_iso"][k] for k in _SHOWN]
    shown = np.clip(values, -BAR_RANGE, BAR_RANGE)
    ax.bar(range(len(_SHOWN)), shown, color=[style.color(k) for k in _SHOWN], width=0.6)
    ax.axhline(0, color=style.color("Iso"), lw=2)
    for i, (v, h) in enumerate(zip(values, shown)):
        ax.text(i, h + (2 if h >= 0 else -2), f"{v:+.0f}%".replace("-", "−") if abs(v) >= 0.5 else "0%",
                ha="center", va="bottom" if h >= 0 else "top", fontsize=_SMALL, color=style.ROLES["ink"])
    ax.set(ylim=(-BAR_RANGE - 14, BAR_RANGE + 14), xlim=(-0.6, len(_SHOWN) - 0.4))
    ax.set_yticks([-BAR_RANGE, 0, BAR_RANGE], [f"−{BAR_RANGE:.0f}%", "Iso", f"+{BAR_RANGE:.0f}%"])
    ax.set_xticks(range(len(_SHOWN)), list(_SHOWN))
    ax.yaxis.tick_right()
    ax.set_title("tuned loss\nvs Iso's", fontsize=style.FONT_SIZE)


#: Muon's and Iso's large-batch steps coincide at κ = 1, where their losses tie up to the
#: rounding of two different float64 computations: compared relative to their size.
TIE_RTOL = 1e-9


def muon_iso_rms(kappa, basis) -> tuple:
    """``(κ, RMS of Muon − Iso)``."""
    return kappa, explore(kappa, basis)["muon_rms"]


def adam_iso_rms(kappa, basis) -> float:
    """RMS of Adam − Iso."""
    return explore(kappa, basis)["adam_rms"]


def muon_vs_iso(kappa, basis) -> float:
    """Muon's tuned loss relative to Iso's, minus 1."""
    return explore(kappa, basis)["vs_iso"]["Muon"]


def adam_signs_diagonal(kappa, basis) -> tuple:
    """(basis, share of Adam's signs equal to sgn(A))."""
    return basis, explore(kappa, basis)["adam_signs"]


CAPTION = (
    "One target A (16 × 16), the large-batch first steps, each scaled to a unit root-mean-square (RMS) "
    "entry. Left: Iso's first step msign(ΣA), the polar factor of ΣA; middle: how Muon's step msign(Σ²A) and Adam's sgn(Σ²A) differ from it (each on "
    "its own colour scale: ±0.6 for Muon, ±3 for Adam); right: Muon's and Adam's loss after one tuned step relative to Iso's (a value "
    "beyond ±30% stops at the edge, labelled). Raise κ(Σ), the condition number of Σ: the Muon − Iso map is "
    "blank at κ = 1 only; Adam − Iso grows with κ; Muon's bar is never above Iso's; and with Σ diagonal "
    "Adam's step stays sgn(A)."
)


def difference_explorable() -> Explorable:
    """The centerpiece: κ(Σ) (main slider) and the eigenbasis of Σ."""
    return Explorable(
        draw_difference,
        [Slider("kappa", list(EXPLORE_KAPPAS), label="κ(Σ)", default=100),
         Slider("basis", list(EXPLORE_BASES), label="eigenbasis of Σ", default="random", fmt="{}")],
        main="kappa",
        static_colors=96,
        figsize=(style.FIG_WIDTH, 3.6),
        narrow="panels",
        caption=CAPTION,
        alt=("Iso's first step and the differences Muon minus Iso and Adam minus Iso as heatmaps, and each "
             "optimizer's tuned loss relative to Iso's, as the condition number of Σ changes."),
        promises=[
            Promise("the Muon − Iso map is blank at κ = 1 only", muon_iso_rms,
                    always(lambda v: (v[1] < 1e-12) == (v[0] == 1), "RMS < 1e-12 exactly at κ = 1")),
            Promise("Adam − Iso grows with κ", adam_iso_rms, nondecreasing()),
            Promise("Muon's bar is never above Iso's", muon_vs_iso,
                    always(lambda v: v <= TIE_RTOL, f"<= {TIE_RTOL:.0e} relative (they tie at κ = 1)")),
            Promise("with Σ diagonal Adam's step stays sgn(A)", adam_signs_diagonal,
                    always(lambda v: v[0] != "diagonal" or v[1] == 1.0, "100% wherever Σ is diagonal")),
        ],
    )


EXPLORABLES = (difference_explorable,)
