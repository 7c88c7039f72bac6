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
    labels = {"sgd": ("−G/‖G‖ (SGD)", (-0.22, -0.36), "left", "top"),
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
        ax2.text(s[i] * u[0] + 0.08 * (1 if u[0] >= 0 else -1), s[i] * u[1] + 0.08, f"s{sub[i]}u{sub[i]}",
                 color=style.ROLES["data"], fontsize=_SMALL, ha="left" if u[0] >= 0 else "right")
        ax2.text(1.1 * v[0], 1.1 * v[1] - 0.05, f"v{sub[i]}", color=style.ROLES["bound"], fontsize=_SMALL,
                 ha="left" if v[0] >= 0 else "right", va="top")
    ax2.set_title("msign(M): the ellipse becomes a circle")
    ax2.text(-2.35, 1.85, f"M v = s u, msign(M) v = u\nsingular values {s[0]:.1f}, {s[1]:.1f} → 1, 1",
             ha="left", va="top", fontsize=_SMALL)
    ax2.set(xlim=(-2.4, 2.4), ylim=(-1.9, 1.9), aspect="equal", xlabel="first coordinate", ylabel="second coordinate")
    ax2.set_xticks([-2, -1, 0, 1, 2])
    ax2.set_yticks([-1, 0, 1])
    ax2.legend(loc="lower right", fontsize=_SMALL, handlelength=1.6, borderaxespad=0.0)
    return fig


# ---------------------------------------------------------------- section 4.4: features
FEATURE_D_IN, FEATURE_D_OUT = 64, 8
FEATURE_BATCHES = (2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
FEATURE_KAPPAS = (1, 100)


@functools.lru_cache(maxsize=None)
def feature_sweep(kappa: float, draws: int = 24, seed: int = 7) -> dict:
    """SGD's and Muon's feature moves for inputs with rows from N(0, Σ/d_in) (κ(Σ) =
    ``kappa``, d_in = 64, d_out = 8), at each batch size of ``FEATURE_BATCHES``; means over
    ``draws`` draws of X and a Gaussian G. Keys (each a list over the batch sizes):
    ``sgd``/``muon`` (descent efficiency in the optimizer's own norm, against every move),
    ``sgd_reach``/``muon_reach`` (against the best reachable move), ``muon_cos``
    (Muon's Frobenius cosine with −msign(G)), ``muon_error`` (relative distance of Muon's
    move to −msign(G))."""
    out = {k: [] for k in ("sgd", "muon", "sgd_reach", "muon_reach", "muon_cos", "muon_error")}
    for b in FEATURE_BATCHES:
        gen = generator(seed + b)
        X = features.gaussian_features(b, FEATURE_D_IN, kappa, generator=gen, sample_shape=(draws,)) / math.sqrt(FEATURE_D_IN)
        G = torch.randn(draws, b, FEATURE_D_OUT, generator=gen, dtype=torch.float64)
        for opt in ("sgd", "muon"):
            out[opt].append(feature_step.optimizer_feature_efficiency(X, G, opt).mean().item())
            out[opt + "_reach"].append(feature_step.optimizer_feature_efficiency(X, G, opt, reachable=True).mean().item())
        move, target = feature_step.optimizer_feature_change(X, G, 1.0, "muon"), -linalg.msign(G)
        out["muon_cos"].append(feature_step.cosine_similarity(move, target).mean().item())
        out["muon_error"].append((torch.linalg.matrix_norm(move - target) / torch.linalg.matrix_norm(target)).mean().item())
    return out


def feature_alignment() -> Figure:
    """Descent efficiency of SGD's and Muon's feature moves against b/d_in, for κ = 1 and
    100: left against every move (−G, −msign G), right against the best move the layer can
    make (−P_X G, −msign(P_X G)); thin: Muon judged by the Frobenius cosine instead."""
    fig = Figure(figsize=(style.FIG_WIDTH, 3.9))
    axes = fig.subplots(1, 2, sharey=True)
    fig.subplots_adjust(left=0.08, right=0.98, bottom=0.15, top=0.86, wspace=0.08)
    ratio = [b / FEATURE_D_IN for b in FEATURE_BATCHES]
    for ax, reach in zip(axes, (False, True)):
        ax.axvspan(1, 20, color=style.ROLES["muted"], alpha=0.25, linewidth=0)
        for kappa, fill in zip(FEATURE_KAPPAS, ("full", "none")):
            sweep = feature_sweep(kappa)
            for opt in ("sgd", "muon"):
                name = OPTIMIZER_NAMES[opt]
                kw = style.line(name, label=f"{name}, κ = {kappa}", fillstyle=fill, markersize=6)
                ax.plot(ratio, sweep[opt + ("_reach" if reach else "")], **kw)
            if not reach:
                ax.plot(ratio, sweep["muon_cos"], **style.line("Muon", markers=False, linewidth=1.2, alpha=0.55,
                                                               label="Muon, Frobenius cos" if kappa == 1 else "_nolegend_"))
        ax.set(xscale="log", xlim=(ratio[0] / 1.3, ratio[-1] * 1.3), ylim=(0, 1.02), xlabel="batch size / width, b / d_in")
        log_ticks(ax.xaxis, (-1, 0, 1))
        ax.set_yticks([0, 0.25, 0.5, 0.75, 1])
        ax.text(1.15, 0.96, "b > d_in", color=style.ROLES["bound"], fontsize=_SMALL, va="top")
    s1, s100 = feature_sweep(1), feature_sweep(100)
    i4, i16 = FEATURE_BATCHES.index(256), FEATURE_BATCHES.index(1024)
    axes[0].set(ylabel="descent efficiency (own norm)", title="against every move: −G, −msign(G)")
    axes[1].set_title("against the best reachable move")
    axes[1].text(0.98, 0.03, f"SGD at b/d_in = 4 and 16:\nκ = 1: {s1['sgd_reach'][i4]:.2f}, {s1['sgd_reach'][i16]:.2f}\n"
                 f"κ = 100: {s100['sgd_reach'][i4]:.2f}, {s100['sgd_reach'][i16]:.2f}",
                 transform=axes[1].transAxes, ha="right", va="bottom", fontsize=_SMALL, color=style.color("SGD"))
    axes[0].legend(loc="lower left", fontsize=_SMALL, ncol=1, handlelength=2.2, borderaxespad=0.2)
    return fig


# ------------------------------------------------------ section 4.6: the turned basis
TURN_D_IN, TURN_D_OUT, TURN_DRAWS = 64, 8, 12
TURN_BATCHES = (2, 4, 8, 16, 32, 64)
TURN_SCATTER_BATCH = 16
THETAS = tuple(range(0, 91, 10))
TURN_KAPPAS = (1, 3, 10, 100)     # a fifth value would take the frames past 2 MB


def plane_rotation(U: torch.Tensor, theta: float) -> torch.Tensor:
    """The orthogonal matrix that turns each of the planes spanned by the column pairs
    (0, 1), (2, 3), ... of the orthogonal ``U`` by ``theta`` radians: ``U B(θ) Uᵀ``. At 0
    it is the identity; every vector moves by the same angle θ (for even n)."""
    n = U.shape[-1]
    c, s = math.cos(theta), math.sin(theta)
    B = torch.zeros(n, n, dtype=U.dtype)
    for i in range(0, n - 1, 2):
        B[i, i] = B[i + 1, i + 1] = c
        B[i, i + 1], B[i + 1, i] = -s, s
    if n % 2:
        B[n - 1, n - 1] = 1.0
    return U @ B @ U.T


@functools.lru_cache(maxsize=None)
def turned_basis(kappa: float, seed: int = 12) -> dict:
    """Inputs whose rows are scaled coordinate vectors, ``X(0) = diag(√λ) [I_b 0]`` (λ
    geometric with spread ``kappa``, mean 1, so ``XXᵀ = diag(λ)``), turned by the rotation
    ``X(θ) = X(0) Q(θ)ᵀ`` of :func:`plane_rotation` (fixed random planes): the Gram matrix is
    the same for every θ. For each θ in ``THETAS`` and b in ``TURN_BATCHES`` (d_in = 64,
    d_out = 8, ``TURN_DRAWS`` Gaussian G): ``efficiency[opt]`` (θ x b, mean descent
    efficiency in the optimizer's own norm), ``cosine[opt]`` (θ x b, mean Frobenius cosine
    with the own target) and, for one draw at b = 16, ``entries[opt]`` (θ x (target, move)
    entries, each normalized to root-mean-square 1)."""
    gen = generator(seed)
    U = linalg.random_orthogonal(TURN_D_IN, gen)
    Q = torch.stack([plane_rotation(U, math.radians(t)) for t in THETAS])          # (θ, d, d)
    eff = {opt: torch.zeros(len(THETAS), len(TURN_BATCHES), dtype=torch.float64) for opt in OPTIMIZER_NAMES}
    cos = {opt: torch.zeros(len(THETAS), len(TURN_BATCHES), dtype=torch.float64) for opt in OPTIMIZER_NAMES}
    entries = {}
    for j, b in enumerate(TURN_BATCHES):
        lam = features.spectrum(b, kappa)
        X0 = lam.sqrt()[:, None] * torch.eye(TURN_D_IN, dtype=torch.float64)[:b]
        X = (X0 @ Q.mT).unsqueeze(1).expand(len(THETAS), TURN_DRAWS, b, TURN_D_IN)
        G = torch.randn(TURN_DRAWS, b, TURN_D_OUT, generator=generator(seed + 1 + b), dtype=torch.float64).expand(len(THETAS), -1, -1, -1)
        for opt, norm in feature_step.OPTIMIZERS.items():
            move = feature_step.optimizer_feature_change(X, G, 1.0, opt)
            target = -feature_step.steepest_direction(G, norm)
            eff[opt][:, j] = feature_step.descent_efficiency(move, G, norm).mean(-1)
            cos[opt][:, j] = feature_step.cosine_similarity(move, target).mean(-1)
            if b == TURN_SCATTER_BATCH:
                rms = lambda A: A[:, 0] / A[:, 0].square().mean((-2, -1), keepdim=True).sqrt()  # noqa: E731
                entries[opt] = (rms(target).flatten(1), rms(move).flatten(1))
    return {"efficiency": eff, "cosine": cos, "entries": entries}


def _turn_index(theta) -> int:
    return THETAS.index(int(theta))


def draw_alignment(fig, theta, kappa):
    """Left: one batch entry by entry (move against own target); right: each optimizer's
    descent efficiency against the batch size, at the rotation θ and spread κ."""
    data = turned_basis(kappa)
    i = _turn_index(theta)
    ax_entries, ax_curve = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 1.25]})
    j = TURN_BATCHES.index(TURN_SCATTER_BATCH)
    for opt in ("sign", "sgd", "muon"):
        name = OPTIMIZER_NAMES[opt]
        target, move = data["entries"][opt]
        ax_entries.plot(target[i], move[i], linestyle="none", marker=style.look(name).marker, markersize=4,
                        color=style.color(name), markeredgewidth=0,
                        label=f"{name} {data['efficiency'][opt][i, j]:.2f}")
    ax_entries.plot([-3, 3], [-3, 3], color=style.ROLES["bound"], linewidth=1.0)
    ax_entries.set(xlim=(-3, 3), ylim=(-3, 3.4), xlabel="entry of −G, −msign(G), −sign(G)",
                   ylabel="entry of ΔY (normalized)")
    ax_entries.set_title(f"one batch, b = {TURN_SCATTER_BATCH}\nθ = {theta}°", loc="left", fontsize=style.FONT_SIZE)
    ax_entries.set_xticks([-2, 0, 2])
    ax_entries.set_yticks([-2, 0, 2])
    ax_entries.legend(loc="lower right", fontsize=_SMALL, markerscale=1.5, handletextpad=0.2, borderaxespad=0.1,
                      title="efficiency", title_fontsize=_SMALL)
    ends = {}
    for opt in ("sgd", "muon", "sign"):
        name = OPTIMIZER_NAMES[opt]
        y = data["efficiency"][opt][i].tolist()
        ax_curve.plot(TURN_BATCHES, y, **style.line(name))
        ends[name] = y[-1]
    # direct labels at the curves' ends, pushed apart where the curves end close together
    placed = []
    for name, y in sorted(ends.items(), key=lambda item: -item[1]):
        y_label = min([y] + [p - 0.075 for p in placed[-1:]])
        placed.append(y_label)
        ax_curve.text(TURN_BATCHES[-1] * 1.12, y_label, name, color=style.text_color(style.color(name)), va="center", fontsize=_SMALL)
    ax_curve.axvline(TURN_SCATTER_BATCH, color=style.ROLES["muted"], linewidth=1.0, zorder=0)
    ax_curve.set(xscale="log", xlim=(1.7, 150), ylim=(0, 1.04), xlabel=f"batch size b (d_in = {TURN_D_IN})",
                 ylabel="descent efficiency (own norm)")
    ax_curve.set_title(f"the same XXᵀ at every θ\nspread κ = {kappa:g}", loc="left", fontsize=style.FONT_SIZE)
    ax_curve.set_xticks(TURN_BATCHES, [str(b) for b in TURN_BATCHES])
    ax_curve.xaxis.set_minor_locator(NullLocator())
    ax_curve.set_yticks([0, 0.25, 0.5, 0.75, 1])


class _Falls:
    """Predicate: the values fall by at least ``drop`` from the first to the last and never
    rise by more than ``tol`` from one to the next."""

    def __init__(self, drop: float, tol: float):
        self.drop, self.tol = drop, tol

    def __call__(self, values) -> bool:
        v = [float(x) for x in values]
        return v[0] - v[-1] >= self.drop and all(b <= a + self.tol for a, b in zip(v, v[1:]))

    def __repr__(self) -> str:
        return f"falling (by >= {self.drop:g} overall, never rising by more than {self.tol:g})"


def sgd_muon_change(theta, kappa) -> float:
    """Largest change, over batch sizes, of SGD's and Muon's efficiency curves between
    θ = 0 and ``theta`` (the figure's own numbers)."""
    eff = turned_basis(kappa)["efficiency"]
    i = _turn_index(theta)
    return max((eff[opt][i] - eff[opt][0]).abs().max().item() for opt in ("sgd", "muon"))


def sign_mean_efficiency(theta, kappa) -> float:
    """SignSGD's efficiency curve at ``theta``, averaged over the batch sizes."""
    return turned_basis(kappa)["efficiency"]["sign"][_turn_index(theta)].mean().item()


ALIGNMENT_CAPTION = (
    "Inputs whose rows are scaled coordinate vectors, turned by θ: the Gram matrix XXᵀ is the same for every θ. "
    "Turn θ: SGD's and Muon's curves do not move, and SignSGD's falls from its value in the coordinate basis. "
    "Raise κ: all three fall."
)


def alignment_explorable() -> Explorable:
    """Three optimizers on one Gram matrix whose input basis turns (main slider θ)."""
    return Explorable(
        draw_alignment,
        [Slider("theta", list(THETAS), label="rotation θ (degrees)", default=30),
         Slider("kappa", list(TURN_KAPPAS), label="spread κ of XXᵀ", default=10)],
        main="theta",
        figsize=(style.COLUMN_WIDTH, 3.4),
        caption=ALIGNMENT_CAPTION,
        alt=("Turning the input basis leaves SGD's and Muon's feature moves as they were and makes SignSGD's "
             "less steep."),
        promises=[
            Promise("SGD's and Muon's curves do not move", sgd_muon_change,
                    always(lambda v: v < 1e-9, "below 1e-9 (rounding)")),
            Promise("SignSGD's falls from its value in the coordinate basis", sign_mean_efficiency, _Falls(0.1, 0.01)),
        ],
        static_colors=16,
    )


# ----------------------------------------------------------------- section 4.7: training
TRAIN = dict(kappa=100.0, d_in=32, d_out=16, batch=32, steps=200, seeds=5, noise=0.5)
#: One learning-rate grid for every optimizer: 10^-3.5 ... 1 in half decades.
LR_GRID = tuple(10.0 ** (e / 2) for e in range(-7, 1))
TRAIN_ANGLES = {"axis-aligned": 0.0, "rotated": math.pi / 4}


def train_linear(optimizer: str, angle: float, lrs=LR_GRID, *, kappa: float = 100.0, d_in: int = 32, d_out: int = 16,
                 batch: int = 32, steps: int = 200, seeds: int = 5, noise: float = 0.5, seed: int = 0) -> torch.Tensor:
    """Online linear regression ``y = W*ᵀx + noise`` trained from ``W = 0`` by one of
    ``"sgd"``, ``"muon"`` (5 quintic Newton–Schulz steps, no momentum) or ``"sign"``
    (SignSGD), at every learning rate of ``lrs`` and for ``seeds`` seeds at once (float64).

    Inputs ``x ~ N(0, Σ)`` with ``Σ = R(angle) Λ R(angle)ᵀ`` (:mod:`isolab.book.features`; κ(Λ) =
    ``kappa``), a fresh batch every step; the teacher is turned with the inputs,
    ``W* = R(angle) W*₀``, so every angle is the same problem in another basis (same
    generator: the same cloud of points, turned). Returns the relative excess loss
    ``L(W_t) / L(0)``, ``L(W) = ½ tr((W − W*)ᵀ Σ (W − W*))``, shape (lrs, seeds, steps + 1).
    """
    if optimizer not in OPTIMIZER_NAMES:
        raise ValueError(f"optimizer must be one of {tuple(OPTIMIZER_NAMES)}, got {optimizer!r}")
    gen = generator(seed)
    R = features.pair_rotation(d_in, angle)
    sigma = features.covariance(d_in, kappa, angle)
    w_star = R @ (torch.randn(seeds, d_in, d_out, generator=gen, dtype=torch.float64) / math.sqrt(d_in))
    X = features.gaussian_features(batch, d_in, kappa, angle, generator=gen, sample_shape=(steps, seeds))
    eps = noise * torch.randn(steps, seeds, batch, d_out, generator=gen, dtype=torch.float64)
    lr = torch.tensor(list(lrs), dtype=torch.float64).view(-1, 1, 1, 1)
    W = torch.zeros(len(lrs), seeds, d_in, d_out, dtype=torch.float64)

    def loss(W):
        E = W - w_star
        return 0.5 * (E * (sigma @ E)).sum((-2, -1))

    start = loss(torch.zeros_like(W))
    history = [loss(W) / start]
    step = {"sgd": updates.sgd_update, "sign": updates.sign_sgd_update,
            "muon": lambda X, G: updates.muon_update(X, G, exact=False)}[optimizer]
    for t in range(steps):
        G = X[t] @ (W - w_star) - eps[t]            # dL/dY for the squared error, per sample
        W = W - lr * step(X[t], G)
        history.append(loss(W) / start)
    return torch.stack(history, dim=-1)


def _score(curves: torch.Tensor, last: int | None = 20) -> torch.Tensor:
    """Per learning rate: the median over seeds of the mean log loss over the ``last``
    steps (the whole run for ``None``); diverged runs score +inf."""
    window = curves if last is None else curves[..., -last:]
    logs = torch.nan_to_num(window.log(), nan=math.inf, posinf=math.inf)
    return logs.mean(-1).median(dim=1).values


@functools.lru_cache(maxsize=None)
def training_runs(last: int | None = 20) -> dict:
    """Every (optimizer, basis) of :func:`train_linear` with ``TRAIN``'s settings, each
    optimizer at the learning rate of ``LR_GRID`` with the lowest :func:`_score` (by
    default the loss over the last 20 steps; ``last=None`` scores the whole run): the lr,
    its index, whether it is inside the grid (not at an edge), and the curves at that lr
    (seeds x steps)."""
    runs = {}
    for basis, angle in TRAIN_ANGLES.items():
        for opt in OPTIMIZER_NAMES:
            curves = _all_curves(opt, basis)
            score = _score(curves, last)
            i = int(torch.argmin(score))
            runs[opt, basis] = {"lr": LR_GRID[i], "index": i, "inside": 0 < i < len(LR_GRID) - 1,
                                "curves": curves[i], "score": score}
    return runs


@functools.lru_cache(maxsize=None)
def _all_curves(opt: str, basis: str) -> torch.Tensor:
    return train_linear(opt, TRAIN_ANGLES[basis], **TRAIN)


def training_summary() -> dict:
    """What the chapter checks about :func:`training_runs`: the final median loss of each
    (optimizer, basis) with the lr picked by the last 20 steps (``end``) and by the whole
    run (``end_whole_run``), the chosen grid indices and whether all lie inside the grid,
    and the largest gap between SGD's (and Muon's) log-loss curves in the two bases."""
    runs, whole = training_runs(), training_runs(last=None)
    final = lambda r: {key: run["curves"][:, -1].median().item() for key, run in r.items()}  # noqa: E731
    turned = max((runs[o, "axis-aligned"]["curves"].log() - runs[o, "rotated"]["curves"].log()).abs().max().item()
                 for o in ("sgd", "muon"))
    return {"end": final(runs), "end_whole_run": final(whole), "turned": turned,
            "indices": ", ".join(str(r["index"]) for r in runs.values()),
            "inside": all(r["inside"] for r in [*runs.values(), *whole.values()])}


def training() -> Figure:
    """Relative loss against steps, median over seeds with the range as a band, each
    optimizer at its own best learning rate, for axis-aligned and rotated inputs."""
    runs = training_runs()
    fig = Figure(figsize=(style.FIG_WIDTH, 3.9))
    axes = fig.subplots(1, 2, sharey=True)
    fig.subplots_adjust(left=0.09, right=0.98, bottom=0.14, top=0.9, wspace=0.08)
    steps = np.arange(TRAIN["steps"] + 1)
    for ax, basis in zip(axes, TRAIN_ANGLES):
        for opt in ("sgd", "muon", "sign"):
            name = OPTIMIZER_NAMES[opt]
            run = runs[opt, basis]
            c = run["curves"].numpy()
            median = np.median(c, axis=0)
            ax.fill_between(steps, c.min(0), c.max(0), color=style.color(name), alpha=0.18, linewidth=0)
            ax.plot(steps, median, **style.line(name, markevery=25,
                                                label=f"{name}, lr {run['lr']:.2g}: final {median[-1]:.3f}"))
        ax.set(yscale="log", xlim=(0, TRAIN["steps"]), ylim=(4e-3, 1.2), xlabel="step",
               title=f"{basis} inputs (θ = {math.degrees(TRAIN_ANGLES[basis]):.0f}°)")
        log_ticks(ax.yaxis, (-2, -1, 0))
        ax.legend(loc="upper right", fontsize=_SMALL, handlelength=2.4, borderaxespad=0.2)
    axes[0].set_ylabel("relative loss L(W) / L(0)")
    return fig


# ------------------------------------------------------------ section 4.8: Newton–Schulz
#: How the two polynomials are drawn (they are not optimizers; the quintic is Muon's).
POLYNOMIAL_LOOKS = {
    "cubic": dict(color=style.ROLES["data"], linestyle="--", marker="s"),
    "quintic": dict(color=style.color("Muon"), linestyle="-", marker="^"),
}
NS_POLYNOMIALS = {"cubic": linalg.CUBIC, "quintic": linalg.QUINTIC}


def newton_schulz_maps(low: float, high: float) -> Figure:
    """The scalar maps p^k, k = 1..5, of the cubic and of Jordan's quintic on a log axis of
    starting values, with the quintic's trapping interval [low, high]."""
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
NS_SPREADS = (1, 100, 10_000)
NS_GRID = torch.logspace(-6, 0, 400, dtype=torch.float64)
NS_STEPS = (1, 2, 3, 4, 5, 6, 8, 12, 20, 30)


@functools.lru_cache(maxsize=None)
def ns_test_matrix(kappa):
    """The explorable's 128 x 32 test matrix with spread κ, its SVD, its normalized
    singular values and both polynomials' errors for k = 0..30."""
    M = spread_matrix(128, 32, kappa, seed=18)
    U, S, Vh = torch.linalg.svd(M, full_matrices=False)
    errs = {name: ns_errors(M, coeffs, max_steps=30) for name, coeffs in NS_POLYNOMIALS.items()}
    return M, U, S / (torch.linalg.matrix_norm(M) + 1e-7), Vh, errs


@functools.lru_cache(maxsize=None)
def ns_after(steps, polynomial, kappa):
    """The diagonal of Uᵀ NS_k(M) V (what the iteration made of each singular value) and
    the scalar map at the same starting values."""
    M, U, s0, Vh, _ = ns_test_matrix(kappa)
    coefficients = NS_POLYNOMIALS[polynomial]
    after = torch.diagonal(U.T @ linalg.msign_newton_schulz(M, steps, coefficients) @ Vh.T)
    return s0, after, linalg.newton_schulz_map(s0, steps, coefficients)


def draw_newton_schulz(fig, steps, polynomial, kappa):
    """Left: the scalar map pᵏ and the test matrix's singular values on it; right: both
    polynomials' errors against steps on a linear axis, the current setting ringed."""
    *_, errs = ns_test_matrix(kappa)
    s0, after, _ = ns_after(steps, polynomial, kappa)
    coefficients = NS_POLYNOMIALS[polynomial]
    ax_map, ax_err = fig.subplots(1, 2)
    if polynomial == "quintic":
        ax_map.axhspan(0.682, 1.134, color=style.ROLES["muted"], alpha=0.35, linewidth=0)
    ax_map.axhline(1.0, color=style.ROLES["bound"], linestyle="--", linewidth=1.0)
    look = POLYNOMIAL_LOOKS[polynomial]
    ax_map.plot(NS_GRID, linalg.newton_schulz_map(NS_GRID, steps, coefficients), color=look["color"],
                linestyle=look["linestyle"], label=f"{polynomial} map pᵏ")
    ax_map.plot(s0, after, "o", markersize=5, color=style.ROLES["highlight"], zorder=3,
                label=f"the {len(s0)} singular values of M")
    ax_map.set(xscale="log", ylim=(-0.02, 1.3), xlabel="starting value s / ‖M‖_F", ylabel="after k steps",
               title=f"{polynomial}, k = {steps}")
    log_ticks(ax_map.xaxis, (-6, -4, -2, 0))
    ax_map.set_yticks([0, 0.5, 1])
    ax_map.legend(loc="lower right", fontsize=_SMALL, borderaxespad=0.1)
    for name in NS_POLYNOMIALS:
        ax_err.plot(range(31), errs[name], **POLYNOMIAL_LOOKS[name], markersize=4, markevery=2, label=name)
    ax_err.plot([steps], [errs[polynomial][steps]], "o", markersize=13, fillstyle="none",
                markeredgecolor=style.ROLES["highlight"], markeredgewidth=2)
    reached = _below(errs["cubic"], 1e-6)
    note = f"cubic below 10⁻⁶ from k = {reached}" if reached is not None else "cubic not below 10⁻⁶ by k = 30"
    ax_err.text(30, 1.07, note, ha="right", va="bottom", fontsize=_SMALL, color=POLYNOMIAL_LOOKS["cubic"]["color"])
    ax_err.set(ylim=(0, 1.25), xlabel="steps k", ylabel="‖NS_k(M) − msign(M)‖₂",
               title=f"error against steps, κ(M) = {kappa:g}")
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
    "Move k: the dots (what the iteration made of each singular value of M) sit on the curve at every step; "
    "the cubic's error never grows with k and reaches rounding level by k = 30, "
    "while from k = 8 on the quintic's error stays above 0.2: its values wiggle inside the band."
)


def newton_schulz_explorable() -> Explorable:
    """The Newton–Schulz singular-value map after k steps and the error against steps
    (main slider k)."""
    return Explorable(
        draw_newton_schulz,
        [Slider("steps", list(NS_STEPS), label="steps k", default=5),
         Slider("polynomial", ["cubic", "quintic"], label="polynomial", default="quintic"),
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
        ],
        static_colors=16,   # with 24 and a taller figure the 60 frames took 2.07 MB
    )


EXPLORABLES = (alignment_explorable, newton_schulz_explorable)
