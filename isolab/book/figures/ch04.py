r"""Figures and explorables of Chapter 4, *Muon: the spectral norm at both levels*.

Each function builds and returns a :class:`matplotlib.figure.Figure` (or an
:class:`~isolab.book.explorable.Explorable`); the computation a figure shares with the
chapter's printed checks is a function of its own here, so that the figure and the check
cannot drift apart:

- :func:`hero`: the unit balls of the Frobenius, spectral and max-entry norms with each
  norm's steepest direction, and ``msign`` of a 2x2 matrix (ellipse to circle).
- :func:`feature_sweep` / :func:`feature_alignment`: how close SGD's and Muon's feature
  moves come to steepest descent, against every move and against the reachable ones.
- :func:`turned_basis` / :func:`alignment_explorable`: three optimizers on one Gram
  matrix whose basis turns by an angle θ (only SignSGD notices).
- :func:`train_linear` / :func:`training_runs` / :func:`training`: loss against steps for
  SGD, Muon and SignSGD on axis-aligned and rotated inputs, learning rates tuned on one
  grid.
- :func:`newton_schulz_maps`, :func:`spread_matrix`, :func:`ns_errors`,
  :func:`newton_schulz_errors`, :func:`large_inputs`, :func:`newton_schulz_explorable`:
  the Newton–Schulz singular-value map and its error.

:func:`same` is the chapter's one check helper: "A equals B up to rounding", printed as
the tolerance met rather than the rounding noise itself (which differs between CPUs).

``EXPLORABLES`` lists the explorable builders (``tests/book/test_captions.py`` checks their
caption promises over the whole slider grid).
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

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

__all__ = [
    "OPTIMIZER_NAMES", "hero", "hero_numbers", "feature_sweep", "feature_alignment", "turned_basis",
    "plane_rotation", "alignment_explorable", "train_linear", "training_runs", "training_summary", "training",
    "newton_schulz_maps", "spread_matrix", "ns_errors", "newton_schulz_errors", "large_inputs",
    "newton_schulz_explorable", "EXPLORABLES",
]

#: isolab.book.feature_step's optimizer keys -> the names the book's style knows.
OPTIMIZER_NAMES = {"sgd": "SGD", "muon": "Muon", "sign": "SignSGD"}
_TARGETS = {"sgd": "−G", "muon": "−msign(G)", "sign": "−sign(G)"}
_SMALL = style.FONT_SIZE - 1


# ----------------------------------------------------------------------------- hero
def _slice(x: float, y: float) -> torch.Tensor:
    """The matrix [[x, y], [y, x]]: on this 2-D slice the three norms differ."""
    return torch.tensor([[x, y], [y, x]], dtype=torch.float64)


HERO_G = (0.9, 0.4)
HERO_M = {"angle_u": 35.0, "angle_v": -25.0, "s": (2.2, 0.7)}


def _rotation(degrees: float) -> torch.Tensor:
    t = math.radians(degrees)
    return torch.tensor([[math.cos(t), -math.sin(t)], [math.sin(t), math.cos(t)]], dtype=torch.float64)


def hero_numbers() -> dict:
    """The numbers the opening figure shows: for ``G = [[0.9, 0.4], [0.4, 0.9]]`` the
    three steepest steps (as points of the slice) and each one's descent efficiency under
    the spectral norm; for the 2x2 ``M`` its singular values and those of msign(M)."""
    G = _slice(*HERO_G)
    steps = {opt: -feature_step.steepest_direction(G, norm) for opt, norm in feature_step.OPTIMIZERS.items()}
    U, V = _rotation(HERO_M["angle_u"]), _rotation(HERO_M["angle_v"])
    M = U @ torch.diag(torch.tensor(HERO_M["s"], dtype=torch.float64)) @ V.T
    return {
        "G": G,
        "steps": steps,
        "points": {opt: (D[0, 0].item(), D[0, 1].item()) for opt, D in steps.items()},
        "spectral_efficiency": {opt: feature_step.descent_efficiency(D, G, "spectral").item() for opt, D in steps.items()},
        "M": M, "U": U, "V": V,
        "s_M": torch.linalg.svdvals(M), "s_msign": torch.linalg.svdvals(linalg.msign(M)),
    }


def hero() -> Figure:
    """Left: the unit balls of the three norms on the slice of matrices [[x, y], [y, x]],
    the gradient G, each norm's steepest step and the line of equal decrease that touches
    the ball there. Right: M maps the unit circle to an ellipse; msign(M) to a circle."""
    n = hero_numbers()
    fig = Figure(figsize=(style.FIG_WIDTH, 4.4))
    ax, ax2 = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.1, 1]})
    fig.subplots_adjust(left=0.07, right=0.98, bottom=0.11, top=0.84, wspace=0.2)

    # left: three rulers. In slice coordinates <A, B>_F = 2 (a_x b_x + a_y b_y), so the
    # plane's own geometry is the Frobenius one (up to the factor 2).
    t = np.linspace(0, 2 * np.pi, 400)
    r = 1 / math.sqrt(2)
    balls = {"sgd": (r * np.cos(t), r * np.sin(t)),
             "muon": ([1, 0, -1, 0, 1], [0, 1, 0, -1, 0]),
             "sign": ([1, -1, -1, 1, 1], [1, 1, -1, -1, 1])}
    names = {"sgd": "Frobenius", "muon": "spectral", "sign": "max-entry"}
    gx, gy = HERO_G
    gn = math.hypot(gx, gy)
    for opt, (bx, by) in balls.items():
        name = OPTIMIZER_NAMES[opt]
        ax.plot(bx, by, **style.line(name, markers=False, linewidth=1.8, label=names[opt]))
        px, py = n["points"][opt]
        # a piece of the line of equal decrease through the step: perpendicular to G
        s = np.array([-0.42, 0.42])
        ax.plot(px - s * gy / gn, py + s * gx / gn, color=style.color(name), linewidth=1.2, linestyle=(0, (1.5, 2)))
        ax.annotate("", (px, py), (0, 0), arrowprops=dict(arrowstyle="-|>", color=style.color(name), lw=2.2,
                                                           shrinkA=0, shrinkB=0, mutation_scale=16))
    ax.annotate("", (gx, gy), (0, 0), arrowprops=dict(arrowstyle="-|>", color=style.ROLES["target"], lw=2.2,
                                                       shrinkA=0, shrinkB=0, mutation_scale=16))
    ax.text(gx + 0.06, gy - 0.02, "G", fontsize=style.FONT_SIZE + 1, color=style.ROLES["target"], va="center")
    # SGD's label sits inside the Frobenius circle, under its own arrow and right of the
    # SignSGD arrow (the reader test saw it crossed by the circle and the diamond)
    labels = {"sgd": ("−G/‖G‖\n(SGD)", (0.2, -0.16), "center", "top"),
              "muon": ("−msign(G)\n(Muon)", (-1.1, 0.16), "right", "bottom"),
              "sign": ("−sign(G)\n(SignSGD)", (-1.08, -1.0), "right", "top")}
    for opt, (text, (x, y), ha, va) in labels.items():
        ax.text(x, y, text, color=style.text_color(style.color(OPTIMIZER_NAMES[opt])), fontsize=_SMALL, ha=ha, va=va)
    eff = n["spectral_efficiency"]
    ax.text(1.3, -1.75, f"spectral-norm efficiency\nMuon {eff['muon']:.2f}, SGD {eff['sgd']:.2f}, SignSGD {eff['sign']:.2f}",
            ha="right", va="bottom", fontsize=_SMALL)
    ax.set_title("the steepest step depends on the norm")
    ax.set(xlim=(-2.1, 1.35), ylim=(-1.8, 1.95), aspect="equal", xlabel="x in M = [[x, y], [y, x]]", ylabel="y")
    ax.set_xticks([-1, 0, 1])
    ax.set_yticks([-1, 0, 1])
    ax.legend(loc="upper left", fontsize=_SMALL, ncol=3, handlelength=1.3, columnspacing=0.7, handletextpad=0.4,
              borderaxespad=0.0, title="unit ball of the norm", title_fontsize=_SMALL)

    # right: msign of a 2x2 matrix keeps the axes of the ellipse and sets their lengths to 1
    circle = torch.stack([torch.from_numpy(np.cos(t)), torch.from_numpy(np.sin(t))])
    ellipse = n["M"] @ circle
    ax2.plot(ellipse[0], ellipse[1], color=style.ROLES["data"], linewidth=2.0, label="M · (unit circle)")
    ax2.plot(circle[0], circle[1], **style.line("Muon", markers=False, linewidth=2.0, label="msign(M) · (unit circle)"))
    U, V, s = n["U"], n["V"], n["s_M"]
    sub = "₁₂"
    for i in range(2):
        u, v = U[:, i], V[:, i]
        ax2.annotate("", (v[0], v[1]), (0, 0), arrowprops=dict(arrowstyle="-|>", color=style.ROLES["bound"], lw=1.6,
                                                               linestyle="--", shrinkA=0, shrinkB=0))
        ax2.annotate("", (s[i] * u[0], s[i] * u[1]), (0, 0),
                     arrowprops=dict(arrowstyle="-|>", color=style.ROLES["data"], lw=1.8, shrinkA=0, shrinkB=0))
        ax2.annotate("", (u[0], u[1]), (0, 0),
                     arrowprops=dict(arrowstyle="-|>", color=style.color("Muon"), lw=2.4, shrinkA=0, shrinkB=0))
        if i == 0:  # s₁u₁ ends on the ellipse's far tip: its label goes just beyond it
            ax2.text(s[i] * u[0] + 0.08, s[i] * u[1] + 0.08, f"s{sub[i]}u{sub[i]}", color=style.ROLES["data"],
                     fontsize=_SMALL, ha="left")
    # the other labels sit in the empty wedges between the arrows, not on them (the reader
    # test saw s₂u₂ on the u₂ arrows and v₂ on the circle): s₂u₂ between u₂ and v₂, v₂
    # between v₂ and u₁, v₁ beyond its tip below u₁
    wedge = lambda a, b: (math.atan2(a[1], a[0]) + math.atan2(b[1], b[0])) / 2  # noqa: E731
    u2, v2, u1, v1 = U[:, 1], V[:, 1], U[:, 0], V[:, 0]
    for text, color, angle, radius in ((f"s{sub[1]}u{sub[1]}", style.ROLES["data"], wedge(u2, v2), 0.55),
                                       (f"v{sub[1]}", style.ROLES["bound"], wedge(v2, u1), 0.68)):
        ax2.text(radius * math.cos(angle), radius * math.sin(angle), text, color=color, fontsize=_SMALL,
                 ha="center", va="center")
    ax2.text(1.1 * v1[0], 1.1 * v1[1] - 0.05, f"v{sub[0]}", color=style.ROLES["bound"], fontsize=_SMALL,
             ha="left", va="top")
    ax2.set_title("msign(M): the ellipse becomes a circle")
    ax2.text(-2.35, 1.85, f"M v = s u, msign(M) v = u\nsingular values {s[0]:.1f}, {s[1]:.1f} → 1, 1",
             ha="left", va="top", fontsize=_SMALL)
    ax2.set(xlim=(-2.4, 2.4), ylim=(-1.9, 1.9), aspect="equal", xlabel="first coordinate", ylabel="second coordinate")
    ax2.set_xticks([-2, -1, 0, 1, 2])
    ax2.set_yticks([-1, 0, 1])
    ax2.legend(loc="lower right", fontsize=_SMALL, handlelength=1.6, borderaxespad=0.0)
    return fig


# ------------------------------------------------------------ §4.4: the centerpiece
#: The two rulers a move is measured with, and the optimizer each one makes steepest.
RULERS = {"frobenius": "SGD", "spectral": "Muon"}
RULER_NAMES = {"frobenius": "Frobenius", "spectral": "spectral"}
CENTER_B, CENTER_D_IN, CENTER_D_OUT, CENTER_DRAWS = 16, 64, 8, 12
#: The main slider: the condition number of the Gram matrix XXᵀ, nine values from 1 to 10⁴.
CENTER_KAPPAS = (1, 3, 10, 30, 100, 300, 1000, 3000, 10_000)
#: How Muon computes msign: exactly (an SVD), or five Newton–Schulz steps of either quintic.
MSIGN_METHODS = {"SVD": None, "Jordan ×5": "jordan", "Polar Express ×5": "polar_express"}


def _msign(M: torch.Tensor, method: str) -> torch.Tensor:
    coefficients = MSIGN_METHODS[method]
    return linalg.msign(M) if coefficients is None else linalg.msign_newton_schulz(M, 5, coefficients)


@functools.lru_cache(maxsize=1)
def _center_draws() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Haar-random left and right singular vectors of X and Gaussian upstream gradients G."""
    gen = generator(3)
    U = linalg.random_orthogonal(CENTER_B, gen, sample_shape=(CENTER_DRAWS,))
    V = linalg.random_orthogonal(CENTER_D_IN, gen, sample_shape=(CENTER_DRAWS,))[..., :CENTER_B]
    G = torch.randn(CENTER_DRAWS, CENTER_B, CENTER_D_OUT, generator=gen, dtype=torch.float64)
    return U, V, G


def gram_inputs(kappa: float) -> torch.Tensor:
    r"""Inputs whose Gram matrix has condition number ``kappa``: :math:`X = U\Lambda^{1/2}V^	op`
    with :math:`\Lambda` geometric, mean 1 (:func:`isolab.book.features.spectrum`), so
    :math:`XX^	op = U\Lambda U^	op`, exactly :math:`I` at :math:`\kappa = 1`."""
    U, V, _ = _center_draws()
    return (U * features.spectrum(CENTER_B, kappa).sqrt()) @ V.mT


class RulerState(NamedTuple):
    """What the centerpiece draws at one setting."""

    lengths: np.ndarray      # Muon's move along G's singular pairs, u_iᵀ(−ΔY)v_i (first draw)
    longest: float           # its spectral norm ‖ΔY‖₂ (first draw)
    efficiency: dict         # (optimizer, ruler) -> mean descent efficiency of its feature move
    distance: float          # mean ‖ΔY_Muon + msign(G)‖_F / ‖msign(G)‖_F


@functools.lru_cache(maxsize=64)
def ruler_state(kappa: float, method: str) -> RulerState:
    r"""SGD's move :math:`-XX^\top G` and Muon's :math:`-X\,\mathrm{msign}(X^\top G)` (msign by
    ``method``), each measured with both rulers; Muon's move along the singular pairs
    :math:`(u_i, v_i)` of :math:`G`."""
    _, _, G = _center_draws()
    X = gram_inputs(kappa)
    moves = {"SGD": -X @ (X.mT @ G), "Muon": -X @ _msign(X.mT @ G, method)}
    efficiency = {(opt, ruler): feature_step.descent_efficiency(D, G, ruler).mean().item()
                  for opt, D in moves.items() for ruler in RULERS}
    U, _, Vh = torch.linalg.svd(G[0], full_matrices=False)
    D = moves["Muon"]
    lengths = torch.diagonal(U.T @ (-D[0]) @ Vh.T).numpy()
    target = linalg.msign(G)
    distance = (torch.linalg.matrix_norm(D + target) / torch.linalg.matrix_norm(target)).mean().item()
    return RulerState(lengths, torch.linalg.matrix_norm(D[0], ord=2).item(), efficiency, distance)


def _draw_rulers(fig, kappa, method):
    s = ruler_state(kappa, method)
    ax_len, ax_eff = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 1.15]})
    muon, sgd = style.color("Muon"), style.color("SGD")
    i = np.arange(1, CENTER_D_OUT + 1)
    ax_len.bar(i, s.lengths, color=muon, width=0.7)
    ax_len.axhline(1.0, color=style.ROLES["target"], ls="--", lw=1.5)
    ax_len.axhline(s.longest, color=style.ROLES["highlight"], lw=2.0)
    ax_len.text(0.03, 0.98, "dashed: −msign(G), 1 on each", color=style.ROLES["target"], ha="left", va="top",
                transform=ax_len.transAxes)
    ax_len.text(0.03, 0.88, "orange: ‖ΔY‖₂, the longest", color=style.text_color(style.ROLES["highlight"]),
                ha="left", va="top", transform=ax_len.transAxes)
    ax_len.set(xlim=(0.4, CENTER_D_OUT + 0.6), ylim=(0, 4.0), xticks=[1, 4, 8], yticks=[0, 1, 2, 3],
               xlabel="singular pair i of G", ylabel="stretch uᵢᵀ(−ΔY)vᵢ")
    ax_len.set_title(f"Muon's move, κ(XXᵀ) = {kappa:g}\nmsign by {method}", loc="left", fontsize=style.FONT_SIZE)

    x = np.arange(len(RULERS))
    for k, (opt, color, hatch) in enumerate((("SGD", sgd, None), ("Muon", muon, None))):
        values = [s.efficiency[opt, ruler] for ruler in RULERS]
        bars = ax_eff.bar(x + (k - 0.5) * 0.38, values, width=0.36, color=color, hatch=hatch)
        for bar, v in zip(bars, values):
            ax_eff.text(bar.get_x() + bar.get_width() / 2, v + 0.02, f"{v:.2f}", ha="center", va="bottom",
                        color=style.text_color(color))
    ax_eff.text(0.02, 0.98, "SGD", color=style.text_color(sgd), transform=ax_eff.transAxes, va="top",
                fontweight="bold")
    ax_eff.text(0.22, 0.98, "Muon", color=style.text_color(muon), transform=ax_eff.transAxes, va="top",
                fontweight="bold")
    ax_eff.set(xticks=x, xticklabels=[f"{RULER_NAMES[r]} ruler" for r in RULERS], ylim=(0, 1.42),
               yticks=[0, 0.5, 1], ylabel="descent efficiency e(ΔY)")
    ax_eff.set_title("both moves, measured\nwith one ruler at a time", loc="left", fontsize=style.FONT_SIZE)


CENTER_CAPTION = (
    "Drag κ, the condition number of the Gram matrix XXᵀ (b = 16 inputs in d_in = 64 dimensions, XXᵀ = I at "
    "κ = 1). Left: Muon's feature move ΔY = −X msign(XᵀG) along the singular pairs (uᵢ, vᵢ) of G (bars; "
    "−msign(G) has 1 on each, dashed) and its longest stretch ‖ΔY‖₂ (orange). Right: the descent efficiency "
    "e(ΔY) = ⟨−G, ΔY⟩ / (‖ΔY‖ ‖G‖†) of SGD's move −XXᵀG and of Muon's, under the Frobenius norm and under the "
    "spectral norm (‖G‖† its dual: Frobenius, nuclear). At κ = 1 Muon's move is −msign(G) with msign by SVD, "
    "each move scores 1 in its own ruler, and every efficiency falls as κ grows. Under the spectral ruler "
    "Muon's move beats SGD's at every κ; under the Frobenius ruler SGD's leads at κ = 1 and Muon's at κ = 10⁴."
)


class _Ends:
    """Predicate on the first and last values along the main slider."""

    def __init__(self, test, description: str):
        self.test, self.description = test, description

    def __call__(self, values) -> bool:
        return bool(self.test(float(values[0]), float(values[-1])))

    def __repr__(self) -> str:
        return self.description


def _svd_distance(kappa, method):
    return ruler_state(kappa, "SVD").distance


def _own_ruler_gap(kappa, method):
    e = ruler_state(kappa, "SVD").efficiency
    return max(abs(e["SGD", "frobenius"] - 1), abs(e["Muon", "spectral"] - 1))


def _spectral_lead(kappa, method):
    e = ruler_state(kappa, method).efficiency
    return e["Muon", "spectral"] - e["SGD", "spectral"]


def _frobenius_lead(kappa, method):
    e = ruler_state(kappa, method).efficiency
    return e["SGD", "frobenius"] - e["Muon", "frobenius"]


def _efficiency(opt, ruler):
    def measure(kappa, method):
        return ruler_state(kappa, method).efficiency[opt, ruler]
    measure.__name__ = f"{opt}_{ruler}"
    return measure


def ruler_explorable() -> Explorable:
    """§4.4's centerpiece: the Gram matrix's condition number (main slider) and how msign is
    computed move Muon's feature move away from −msign(G) and both moves' efficiencies
    under both rulers."""
    for kappa in CENTER_KAPPAS:
        for method in MSIGN_METHODS:
            ruler_state(kappa, method)
    falls = [Promise("every efficiency falls as κ grows", _efficiency(o, r), nonincreasing(tol=1e-9))
             for o in ("SGD", "Muon") for r in RULERS]
    return Explorable(
        _draw_rulers,
        [Slider("kappa", list(CENTER_KAPPAS), label="κ(XXᵀ)", default=30),
         Slider("method", list(MSIGN_METHODS), label="msign by", default="SVD")],
        main="kappa",
        figsize=(style.COLUMN_WIDTH, 3.3),
        static_colors=24,
        narrow="panels",
        caption=CENTER_CAPTION,
        alt="As the Gram matrix departs from the identity, Muon's feature move leaves −msign(G), and each move is "
            "best judged by its own ruler.",
        promises=[
            Promise("At κ = 1 Muon's move is −msign(G) with msign by SVD", _svd_distance,
                    _Ends(lambda first, last: first < 1e-12, "distance below 1e-12 at κ = 1")),
            Promise("each move scores 1 in its own ruler", _own_ruler_gap,
                    _Ends(lambda first, last: first < 1e-12, "SGD Frobenius and Muon spectral = 1 at κ = 1")),
            *falls,
            Promise("Under the spectral ruler Muon's move beats SGD's at every κ", _spectral_lead,
                    always(lambda v: v > 0, "Muon's spectral efficiency > SGD's")),
            Promise("under the Frobenius ruler SGD's leads at κ = 1 and Muon's at κ = 10⁴", _frobenius_lead,
                    _Ends(lambda first, last: first > 0 > last, "SGD − Muon > 0 at κ = 1, < 0 at 10⁴")),
        ],
    )


# -------------------------------------------------- §4.5: Gaussian inputs, both rulers
FEATURE_D_IN, FEATURE_D_OUT = 64, 8
FEATURE_BATCHES = (2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
FEATURE_KAPPAS = (1, 100)


@functools.lru_cache(maxsize=None)
def feature_sweep(kappa: float, draws: int = 24, seed: int = 7) -> dict:
    """SGD's and Muon's feature moves for inputs with rows from N(0, Σ/d_in) (κ(Σ) =
    ``kappa``, d_in = 64, d_out = 8), at each batch size of ``FEATURE_BATCHES``; means over
    ``draws`` draws of X and a Gaussian G. Keys ``(optimizer, ruler)`` (descent efficiency
    of the optimizer's move under the ruler, against every move) and ``(optimizer, ruler,
    "reach")`` (against the best reachable move), each a list over the batch sizes."""
    out: dict = {}
    for b in FEATURE_BATCHES:
        gen = generator(seed + b)
        X = features.gaussian_features(b, FEATURE_D_IN, kappa, generator=gen, sample_shape=(draws,)) / math.sqrt(FEATURE_D_IN)
        G = torch.randn(draws, b, FEATURE_D_OUT, generator=gen, dtype=torch.float64)
        for opt in ("sgd", "muon"):
            move = feature_step.optimizer_feature_change(X, G, 1.0, opt)
            for ruler in RULERS:
                name = OPTIMIZER_NAMES[opt]
                out.setdefault((name, ruler), []).append(feature_step.descent_efficiency(move, G, ruler).mean().item())
                out.setdefault((name, ruler, "reach"), []).append(
                    feature_step.reachable_descent_efficiency(move, G, X, ruler).mean().item())
    return out


def feature_alignment() -> Figure:
    """Both moves under both rulers against b/d_in, for κ = 1 (filled) and 100 (open): the
    efficiency against the best reachable move (against every move for b ≤ d_in, where
    every move is reachable)."""
    fig = Figure(figsize=(style.FIG_WIDTH, 3.8))
    axes = fig.subplots(1, 2, sharey=True)
    fig.subplots_adjust(left=0.08, right=0.98, bottom=0.15, top=0.87, wspace=0.08)
    ratio = [b / FEATURE_D_IN for b in FEATURE_BATCHES]
    for ax, ruler in zip(axes, RULERS):
        ax.axvspan(1, 20, color=style.ROLES["muted"], alpha=0.25, linewidth=0)
        for kappa, fill in zip(FEATURE_KAPPAS, ("full", "none")):
            sweep = feature_sweep(kappa)
            for name in ("SGD", "Muon"):
                ax.plot(ratio, sweep[name, ruler, "reach"], **style.line(name, label=f"{name}, κ(Σ) = {kappa}",
                                                                        fillstyle=fill, markersize=6))
        ax.set(xscale="log", xlim=(ratio[0] / 1.3, ratio[-1] * 1.3), ylim=(0, 1.02), xlabel="batch size / width, b / d_in")
        log_ticks(ax.xaxis, (-1, 0, 1))
        ax.set_yticks([0, 0.25, 0.5, 0.75, 1])
        ax.text(1.15, 0.04, "b > d_in:\nbest reachable", color=style.ROLES["bound"], fontsize=_SMALL, va="bottom")
        ax.set_title(f"{RULER_NAMES[ruler]} ruler ({RULERS[ruler]}'s own)", loc="left")
    axes[0].set_ylabel("descent efficiency e(ΔY)")
    axes[0].legend(loc="lower left", fontsize=_SMALL, handlelength=2.2, borderaxespad=0.2)
    return fig


from isolab.book.figures.ch04_sign import (  # noqa: E402,F401  (the chapter calls them as ch04.*)
    HELD_OUT_SEEDS, LR_GRID, THETAS, TRAIN, TRAIN_ANGLES, TURN_BATCHES, TURN_KAPPAS, alignment_explorable,
    held_out, plane_rotation, ranking, train_linear, training, training_runs, training_summary, turned_basis,
)
from isolab.book.figures.ch04_newton_schulz import (  # noqa: E402,F401
    NS_POLYNOMIALS, NS_STEPS, POLYNOMIAL_LOOKS, large_inputs, newton_schulz_errors, newton_schulz_explorable,
    newton_schulz_maps, ns_errors, ns_test_matrix, spread_matrix, trapping_interval,
)

EXPLORABLES = (ruler_explorable, alignment_explorable, newton_schulz_explorable)

