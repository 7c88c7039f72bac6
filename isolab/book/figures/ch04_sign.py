r"""Chapter 4's figures for SignSGD (§4.6) and training (§4.7): three optimizers on one Gram
matrix whose input basis turns (:func:`turned_basis`, :func:`alignment_explorable`), and
online linear regression in two bases (:func:`train_linear`, :func:`training_runs`,
:func:`training`, :func:`training_summary`, :func:`held_out`). Re-exported by
:mod:`isolab.book.figures.ch04`."""

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

#: isolab.book.feature_step's optimizer keys -> the names the book's style knows.
OPTIMIZER_NAMES = {"sgd": "SGD", "muon": "Muon", "sign": "SignSGD"}
_SMALL = style.FONT_SIZE - 1


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
                   ylabel="entry of ΔY (RMS 1)")
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
                 ylabel="efficiency, own norm")
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
    "Rows of X: scaled coordinate vectors √λᵢ·eᵢ (XXᵀ = diag(λ), spread κ = λmax/λmin), turned by θ in 32 fixed "
    "random planes: the Gram matrix XXᵀ is the same for every θ. Left: the entries of each move ΔY against those "
    "of its optimizer's own target (−G, −msign(G), −sign(G)), scaled to RMS 1. Right: each optimizer's descent "
    "efficiency under its own norm (Frobenius, spectral, max-entry); read each curve against itself, not against "
    "the others. Turn θ: SGD's and Muon's curves do not move, and SignSGD's falls from its value in the "
    "coordinate basis."
)


def alignment_explorable() -> Explorable:
    """Three optimizers on one Gram matrix whose input basis turns (main slider θ)."""
    return Explorable(
        draw_alignment,
        [Slider("theta", list(THETAS), label="rotation θ (degrees)", default=30),
         Slider("kappa", list(TURN_KAPPAS), label="spread κ of XXᵀ", default=10)],
        main="theta",
        figsize=(style.COLUMN_WIDTH, 3.4),
        narrow="panels",
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


#: Held-out seeds for the ranking (the learning rates are tuned on TRAIN's five seeds).
HELD_OUT_SEEDS = 20


@functools.lru_cache(maxsize=None)
def held_out() -> dict:
    """Each (optimizer, basis) at its tuned learning rate on ``HELD_OUT_SEEDS`` fresh seeds
    (the same seeds for every optimizer and both bases): per seed, the mean log relative
    loss over the last 20 steps."""
    runs = training_runs()
    settings = {**TRAIN, "seeds": HELD_OUT_SEEDS}
    return {key: train_linear(key[0], TRAIN_ANGLES[key[1]], lrs=(run["lr"],), **settings, seed=1)[0, :, -20:]
            .log().mean(-1).numpy() for key, run in runs.items()}


def ranking(a: tuple[str, str], b: tuple[str, str], level: float = 0.9):
    """The paired difference, over the held-out seeds, of the final mean log loss of ``a``
    minus ``b`` (each an (optimizer, basis)), with its order-statistic interval
    (:func:`isolab.book.engine.intervals.paired_difference`)."""
    from isolab.book.engine.intervals import paired_difference

    scores = held_out()
    return paired_difference(scores[a], scores[b], level)


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

