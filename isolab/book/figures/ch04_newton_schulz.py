r"""Chapter 4's appendix: Newton–Schulz iterations for the matrix sign (the scalar maps, the
error against steps, large inputs, and the explorable of the map after k steps). Re-exported
by :mod:`isolab.book.figures.ch04`."""

from __future__ import annotations

import functools
import math

import numpy as np
import torch
from matplotlib.figure import Figure
from matplotlib.ticker import NullLocator

from isolab import linalg, updates

from isolab.book import feature_step, features
from isolab.book.explorable import Explorable, Promise, Slider, always, nonincreasing
from isolab.book.figures import style
from isolab.book.plotting import log_ticks
from isolab.book.seeding import generator

_SMALL = style.FONT_SIZE - 1


# ------------------------------------------------------------ section 4.8: Newton–Schulz
#: How the two polynomials are drawn (they are not optimizers; the quintic is Muon's).
POLYNOMIAL_LOOKS = {
    "cubic": dict(color=style.ROLES["data"], linestyle="--", marker="s"),
    "quintic": dict(color=style.color("Muon"), linestyle="-", marker="^"),
    "Polar Express": dict(color=style.ROLES["bound"], linestyle="-.", marker="D"),
}
NS_POLYNOMIALS = {"cubic": linalg.CUBIC, "quintic": linalg.QUINTIC}
#: The explorable's iterations: the two fixed polynomials and Polar Express's schedule.
EXPLORE_POLYNOMIALS = {**NS_POLYNOMIALS, "Polar Express": "polar_express"}


def trapping_interval(coefficients=linalg.QUINTIC) -> tuple[float, float]:
    """The interval ``[low, high]`` that the odd quintic ``p(s) = as + bs³ + cs⁵`` maps into
    itself: ``low = p(s₂)`` at its local minimum ``s₂`` (the larger root of
    ``p'(s) = a + 3bs² + 5cs⁴``) and ``high = p(low)``."""
    a, b, c = (float(v) for v in coefficients)
    roots = np.roots([5 * c, 3 * b, a])                   # p' as a quadratic in s²
    s2 = math.sqrt(max(r.real for r in roots if abs(r.imag) < 1e-12 and r.real > 0))
    p = lambda s: a * s + b * s**3 + c * s**5            # noqa: E731
    low = p(s2)
    return low, p(low)


def newton_schulz_maps(low: float | None = None, high: float | None = None) -> Figure:
    """The scalar maps p^k, k = 1..5, of the cubic and of Jordan's quintic on a log axis of
    starting values, with the quintic's trapping interval [low, high]
    (:func:`trapping_interval` when not given)."""
    if low is None or high is None:
        low, high = trapping_interval()
    grid = torch.logspace(-4, 0, 600, dtype=torch.float64)
    fig = Figure(figsize=(style.FIG_WIDTH, 3.7))
    axes = fig.subplots(1, 2, sharey=True)
    fig.subplots_adjust(left=0.08, right=0.98, bottom=0.15, top=0.88, wspace=0.08)
    colors = style.sequence(5)
    titles = {"cubic": "cubic (1.5, −0.5, 0)", "quintic": "Jordan's quintic (3.4445, −4.7750, 2.0315)"}
    for ax, (name, coefficients) in zip(axes, NS_POLYNOMIALS.items()):
        if name == "quintic":
            ax.axhspan(low, high, color=style.ROLES["muted"], alpha=0.35, linewidth=0,
                       label=f"trapping interval [{low:.3f}, {high:.3f}]")
        ax.axhline(1.0, color=style.ROLES["bound"], linestyle="--", linewidth=1.0)
        for k, color in zip(range(1, 6), colors):
            ax.plot(grid, linalg.newton_schulz_map(grid, k, coefficients), color=color, label=f"k = {k}")
        ax.set(xscale="log", ylim=(0, 1.3), xlabel="starting singular value s / ‖M‖_F", title=titles[name])
        log_ticks(ax.xaxis, (-4, -3, -2, -1, 0))
        ax.set_yticks([0, 0.5, 1])
    axes[0].set_ylabel("after k steps, pᵏ(s)")
    axes[0].legend(loc="upper left", fontsize=_SMALL, handlelength=1.5)
    axes[1].legend(loc="upper left", fontsize=_SMALL, handlelength=1.5, handles=axes[1].get_legend_handles_labels()[0][:1])
    return fig


def spread_matrix(rows: int, cols: int, kappa: float, seed: int) -> torch.Tensor:
    """A ``rows x cols`` matrix with Haar-random singular vectors and singular values
    geometric from 1 down to 1/kappa."""
    gen = generator(seed)
    U, _ = torch.linalg.qr(torch.randn(rows, cols, generator=gen, dtype=torch.float64))   # orthonormal columns
    V = linalg.random_orthogonal(cols, gen)
    s = torch.logspace(0, -math.log10(kappa), cols, dtype=torch.float64)
    return (U * s) @ V.T


def ns_errors(M: torch.Tensor, coefficients, max_steps: int = 30) -> list:
    """Spectral error ‖NS_k(M) − msign(M)‖₂ for k = 0..max_steps."""
    exact = linalg.msign(M)
    return [torch.linalg.matrix_norm(linalg.msign_newton_schulz(M, k, coefficients) - exact, ord=2).item()
            for k in range(max_steps + 1)]


def _below(errors, level) -> int | None:
    return next((k for k, e in enumerate(errors) if e < level), None)


def newton_schulz_errors(errors: dict) -> Figure:
    """Error against steps for ``errors[(matrix name, polynomial)]``: on a linear axis (the
    range 0.3–1 where the quintic settles) and on a log axis (the cubic's convergence)."""
    fig = Figure(figsize=(style.FIG_WIDTH, 3.8))
    ax_lin, ax_log = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.35, 1]})
    fig.subplots_adjust(left=0.08, right=0.98, bottom=0.15, top=0.88, wspace=0.25)
    matrices = list(dict.fromkeys(m for m, _ in errors))
    for (m, c), err in errors.items():
        look = POLYNOMIAL_LOOKS[c]
        fill = "full" if m == matrices[0] else "none"
        for ax in (ax_lin, ax_log):
            ax.plot(range(len(err)), err, **look, markersize=5, fillstyle=fill, markevery=2, label=f"{c}, {m}")
    for ax in (ax_lin, ax_log):
        ax.axvline(5, color=style.ROLES["muted"], linewidth=1.2, zorder=0)
        ax.set_xlabel("Newton–Schulz steps k")
        ax.set_xticks([0, 5, 10, 20, 30])
    plateau = errors[matrices[0], "quintic"][5]
    ax_lin.axhline(plateau, color=style.ROLES["bound"], linewidth=1.0, linestyle=":")
    ax_lin.text(30, plateau + 0.02, f"quintic plateau {plateau:.2f}", ha="right", va="bottom", fontsize=_SMALL,
                color=style.ROLES["bound"])
    ax_lin.set(ylim=(0, 1.05), ylabel="‖NS_k(M) − msign(M)‖₂", title="error against steps (Muon uses k = 5)")
    ax_lin.legend(loc="center right", fontsize=_SMALL, handlelength=2.4, bbox_to_anchor=(1.0, 0.6))
    ax_log.set(yscale="log", ylim=(1e-16, 3), title="the same, log scale")
    log_ticks(ax_log.yaxis, (-15, -10, -5, 0))
    return fig


def large_inputs() -> Figure:
    """One step of each polynomial for starting values up to 3: why Newton–Schulz first
    divides by the Frobenius norm."""
    s = torch.linspace(0, 3, 601, dtype=torch.float64)
    fig = Figure(figsize=(style.FIG_WIDTH, 3.5))
    ax = fig.subplots()
    fig.subplots_adjust(left=0.08, right=0.7, bottom=0.16, top=0.9)
    ax.axhline(1.0, color=style.ROLES["bound"], linestyle="--", linewidth=1.0)
    ax.axhline(-1.0, color=style.ROLES["bound"], linestyle="--", linewidth=1.0)
    ax.axvspan(0, 1, color=style.ROLES["muted"], alpha=0.3, linewidth=0)
    for name, coefficients in NS_POLYNOMIALS.items():
        look = dict(POLYNOMIAL_LOOKS[name], marker=None)
        ax.plot(s, linalg.newton_schulz_map(s, 1, coefficients), **look, label=f"{name}: one step p(s)")
    ax.plot(s, s, color=style.ROLES["muted"], linewidth=1.2, label="p(s) = s")
    ax.text(0.5, -2.8, "after the\nFrobenius\nnormalization", ha="center", va="bottom", fontsize=_SMALL)
    ax.set(xlim=(0, 3), ylim=(-3, 4), xlabel="singular value s before the step", ylabel="after one step, p(s)",
           title="large inputs: the cubic flips s = 2 to −1 and diverges at 3; the quintic diverges above 1.26")
    ax.set_yticks([-2, -1, 0, 1, 2, 3, 4])
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=_SMALL)
    return fig


# ------------------------------------------------------ section 4.9: the NS explorable
NS_SPREADS = (100, 10_000)
NS_GRID = torch.logspace(-6, 0, 400, dtype=torch.float64)
NS_STEPS = (1, 2, 3, 4, 5, 6, 8, 12, 20, 30)


@functools.lru_cache(maxsize=None)
def ns_test_matrix(kappa):
    """The explorable's 128 x 32 test matrix with spread κ, its SVD, its normalized
    singular values and both polynomials' errors for k = 0..30."""
    M = spread_matrix(128, 32, kappa, seed=18)
    U, S, Vh = torch.linalg.svd(M, full_matrices=False)
    errs = {name: ns_errors(M, coeffs, max_steps=30) for name, coeffs in EXPLORE_POLYNOMIALS.items()}
    return M, U, S / (torch.linalg.matrix_norm(M) + 1e-7), Vh, errs


@functools.lru_cache(maxsize=None)
def ns_after(steps, polynomial, kappa):
    """The diagonal of Uᵀ NS_k(M) V (what the iteration made of each singular value) and
    the scalar map at the same starting values."""
    M, U, s0, Vh, _ = ns_test_matrix(kappa)
    coefficients = EXPLORE_POLYNOMIALS[polynomial]
    after = torch.diagonal(U.T @ linalg.msign_newton_schulz(M, steps, coefficients) @ Vh.T)
    return s0, after, linalg.newton_schulz_map(s0, steps, coefficients)


def draw_newton_schulz(fig, steps, polynomial, kappa):
    """Left: the scalar map pᵏ and the test matrix's singular values on it; right: both
    polynomials' errors against steps on a linear axis, the current setting ringed."""
    *_, errs = ns_test_matrix(kappa)
    s0, after, _ = ns_after(steps, polynomial, kappa)
    coefficients = EXPLORE_POLYNOMIALS[polynomial]
    ax_map, ax_err = fig.subplots(1, 2)
    if polynomial == "quintic":
        ax_map.axhspan(0.682, 1.134, color=style.ROLES["muted"], alpha=0.35, linewidth=0)
    ax_map.axhline(1.0, color=style.ROLES["bound"], linestyle="--", linewidth=1.0)
    look = POLYNOMIAL_LOOKS[polynomial]
    ax_map.plot(NS_GRID, linalg.newton_schulz_map(NS_GRID, steps, coefficients), color=look["color"],
                linestyle=look["linestyle"], label="map after k steps")
    ax_map.plot(s0, after, "o", markersize=5, color=style.ROLES["highlight"], zorder=3,
                label=f"{len(s0)} singular values of M")
    ax_map.set(xscale="log", ylim=(-0.02, 1.3), xlabel="starting value s / ‖M‖_F", ylabel="after k steps",
               title=f"{polynomial}, k = {steps}")
    log_ticks(ax_map.xaxis, (-6, -4, -2, 0))
    ax_map.set_yticks([0, 0.5, 1])
    ax_map.legend(loc="lower right", fontsize=_SMALL, borderaxespad=0.1)
    for name in EXPLORE_POLYNOMIALS:
        ax_err.plot(range(31), errs[name], **POLYNOMIAL_LOOKS[name], markersize=4, markevery=2,
                    label=name.replace("Polar Express", "Polar Exp."))
    ax_err.plot([steps], [errs[polynomial][steps]], "o", markersize=13, fillstyle="none",
                markeredgecolor=style.ROLES["highlight"], markeredgewidth=2)
    reached = _below(errs["cubic"], 1e-6)
    note = f"cubic below 10⁻⁶ from k = {reached}" if reached is not None else "cubic not below 10⁻⁶ by k = 30"
    ax_err.text(30, 1.07, note, ha="right", va="bottom", fontsize=_SMALL, color=POLYNOMIAL_LOOKS["cubic"]["color"])
    ax_err.set(ylim=(0, 1.25), xlabel="steps k", ylabel="‖NS_k(M) − msign(M)‖₂",
               title=f"error, κ(M) = {kappa:g}")
    ax_err.set_xticks([0, 5, 10, 20, 30])
    ax_err.set_yticks([0, 0.25, 0.5, 0.75, 1])
    ax_err.legend(loc="center right", fontsize=_SMALL)


class _OnSteps:
    """Predicate over the values along the steps slider, looking only at chosen steps."""

    def __init__(self, steps, test, description: str):
        self.steps, self.test, self.description = tuple(steps), test, description

    def __call__(self, values) -> bool:
        chosen = [v for k, v in zip(NS_STEPS, values) if k in self.steps]
        return bool(self.test(chosen))

    def __repr__(self) -> str:
        return self.description


def ns_dots_off_curve(steps, polynomial, kappa) -> float:
    """Largest distance between what the iteration made of each singular value and pᵏ."""
    _, after, mapped = ns_after(steps, polynomial, kappa)
    return (after - mapped).abs().max().item()


def ns_error(name):
    def measure(steps, polynomial, kappa) -> float:
        return ns_test_matrix(kappa)[-1][name][steps]
    measure.__name__ = f"{name}_error"
    return measure


NEWTON_SCHULZ_CAPTION = (
    "A 128 × 32 test matrix M with singular values spread geometrically over κ(M); NS_k(M) is the iteration after "
    "k steps, msign(M) its target. Move k: the dots (what the iteration made of each singular value of M) sit on "
    "the curve at every step; the cubic's error never grows with k and reaches rounding level by k = 30, "
    "while from k = 8 on the quintic's error stays above 0.2: its values wiggle inside the band (grey); "
    "Polar Express, a different quintic at each step, reaches rounding level by k = 20."
)


def newton_schulz_explorable() -> Explorable:
    """The Newton–Schulz singular-value map after k steps and the error against steps
    (main slider k)."""
    return Explorable(
        draw_newton_schulz,
        [Slider("steps", list(NS_STEPS), label="steps k", default=5),
         Slider("polynomial", list(EXPLORE_POLYNOMIALS), label="iteration", default="quintic"),
         Slider("kappa", list(NS_SPREADS), label="spread κ(M)", default=100)],
        main="steps",
        figsize=(style.COLUMN_WIDTH, 2.9),
        caption=NEWTON_SCHULZ_CAPTION,
        alt=("As the steps add up, the cubic converges to the matrix sign while the quintic's singular values "
             "wiggle inside its band."),
        promises=[
            Promise("the dots (what the iteration made of each singular value of M) sit on the curve at every step",
                    ns_dots_off_curve, always(lambda v: v < 1e-9, "below 1e-9")),
            Promise("the cubic's error never grows with k", ns_error("cubic"), nonincreasing(tol=1e-12)),
            Promise("reaches rounding level by k = 30", ns_error("cubic"),
                    _OnSteps([30], lambda v: v[0] < 1e-12, "below 1e-12 at k = 30")),
            Promise("from k = 8 on the quintic's error stays above 0.2", ns_error("quintic"),
                    _OnSteps([k for k in NS_STEPS if k >= 8], lambda v: min(v) > 0.2, "above 0.2 for every k >= 8")),
            Promise("Polar Express, a different quintic at each step, reaches rounding level by k = 20",
                    ns_error("Polar Express"), _OnSteps([20, 30], lambda v: max(v) < 1e-12, "below 1e-12 at k >= 20")),
        ],
        narrow="panels",
        static_colors=12,   # 60 frames (three iterations, two spreads): 16 colours took 1.99 MB
    )

