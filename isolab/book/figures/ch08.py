r"""Figures, training runs and the centerpiece of Chapter 8, *Rotational symmetry*.

The chapter trains a small float64 residual network (:class:`isolab.book.residual.ResidualNet`)
and its rotated twin with six optimizers and measures how far the two drift apart. What
its figures and its printed checks share lives here once:

- :data:`SHAPE`, :data:`STEPS`, :data:`BATCH`, :func:`problem`: the network, the batches
  and the held-out set (seeded).
- :data:`LR` and :func:`optimizer`: each optimizer with *every* hyperparameter written out
  (learning rate, momentum, betas, damping, intervals, statistics dtype), so that a change
  of a library default cannot move the chapter's numbers; :func:`train` trains a pair.
- :func:`twin_runs`: the six 200-step runs of section 8.4 (cached), drawn by :func:`hero`
  (the output gap per optimizer, labelled on the curves) and :func:`training` (the
  held-out loss).
- :data:`ONE_BATCH_RULES`: the one-batch form of each update rule (section 8.3), and
  :func:`plain_svd_msign` / :class:`PlainSVDMuon`: Muon whose polar factor is ``U Vᵀ`` of a
  plain SVD, which is not equivariant when a gradient is rank-deficient.
- The centerpiece (section 8.5), :func:`share_explorable`: Adam trains the first ``k`` of
  the eight stream matrices (:data:`ADAM_ORDER`: the input and output projections first,
  the usual recipe, then the blocks), a *partner* (SGD, Muon or Iso) trains the rest;
  the main slider is the share of the stream weights Adam trains (:data:`SHARES`).
  :func:`share_run` trains one pair and measures the output gap and each matrix's drift
  from the rotated original (:func:`matrix_drift`); :func:`share_grid` runs the whole grid
  (27 pairs, computed by the chapter).
- :class:`LinearDecay`, :func:`perturbed`: the controls of section 8.6; :data:`MUON_VARIANTS`,
  :func:`muon_control` and :func:`muon_controls`: the Muon variants that test where Muon's
  sensitivity comes from (200-step runs saved by ``scripts/ch08_muon_controls.py`` in
  ``results/ch08_muon_controls.npz``).

``EXPLORABLES`` lists the explorable builders (``tests/book/test_captions.py`` checks their
caption promises over the whole slider grid).
"""

from __future__ import annotations

import copy
import functools
import math
from typing import NamedTuple

import numpy as np
import torch
from matplotlib.figure import Figure
from matplotlib.ticker import NullLocator

from isolab import linalg, updates

from isolab.book import residual
from isolab.book.explorable import Explorable, Promise, Slider, always
from isolab.book.figures import style
from isolab.book.figures.saved import saved_result
from isolab.optim import Iso, IsoAdam, Muon, SignSGD
from isolab.book.seeding import generator

__all__ = [
    "ONE_BATCH_RULES", "fmt", "SHAPE", "STEPS", "BATCH", "LR", "NAMES", "EQUIVARIANT", "ELEMENTWISE", "problem",
    "network", "optimizer", "train", "twin_runs", "hero", "training", "LinearDecay", "perturbed", "plain_svd_msign",
    "PlainSVDMuon", "ADAM_ORDER", "STREAM_ORDER", "SHARES", "PARTNERS", "ADAM_GROUP", "mixed_optimizer",
    "ShareRun", "share_run", "share_grid", "matrix_drift", "draw_share", "share_explorable", "EXPLORABLES",
    "largest_gap", "untouched", "partner_drift", "GrowsFor", "plain_svd_run", "SYMBOLS", "GAP_YLIM",
    "MUON_VARIANTS", "MUON_RESULTS", "shadow_network", "muon_control", "muon_controls",
]

SHAPE = dict(d_in=8, width=16, hidden=32, d_out=4, depth=3)
STEPS, BATCH = 200, 32
#: Learning rates: reasonable for each optimizer on this problem, not tuned.
LR = {"SGD": 0.1, "Muon": 0.02, "Iso": 0.02, "Adam": 3e-3, "IsoAdam": 3e-3, "SignSGD": 1e-3}
NAMES = tuple(LR)
EQUIVARIANT = ("SGD", "Muon", "Iso")
ELEMENTWISE = ("Adam", "IsoAdam", "SignSGD")
_EPS64 = torch.finfo(torch.float64).eps
_SMALL = style.FONT_SIZE - 1


#: The one-batch form of each update rule (Chapter 6), for the equivariance table of section 8.3.
ONE_BATCH_RULES = {
    "SGD": updates.sgd_update,
    "Muon (exact msign)": lambda X, G: updates.muon_update(X, G, exact=True),
    "Muon (Newton-Schulz)": lambda X, G: updates.muon_update(X, G, exact=False),
    "Iso (damping 1e-3)": lambda X, G: updates.iso_update(X, G, damping=1e-3),
    "Adam's first step": updates.adam_first_step,
    "SignSGD": updates.sign_sgd_update,
    "IsoAdam's first step": lambda X, G: updates.iso_adam_first_step(X, G, damping=1e-3),
}


def fmt(gap: float, floor: float = 1e-10) -> str:
    """A gap for printing: below ``floor`` as the bound (its digits differ from CPU to CPU)."""
    return f"< {floor:g}" if gap < floor else f"{gap:.2g}"


# ------------------------------------------------------------------ the problem
@functools.lru_cache(maxsize=None)
def problem(d_in: int = 8):
    """``(x, y, x_eval, y_eval)``: 200 batches of 32 and 256 held-out inputs from a random
    teacher (:func:`isolab.book.residual.regression_data`, seed 1)."""
    return residual.regression_data(STEPS, BATCH, d_in=d_in, d_out=SHAPE["d_out"], generator=generator(1))


def network(d_in: int = 8, **options) -> residual.ResidualNet:
    """The chapter's network (seed 2), with input width ``d_in`` and ``ResidualNet`` options."""
    return residual.ResidualNet(**{**SHAPE, "d_in": d_in}, **options, generator=generator(2))


def optimizer(name: str, lr: float, *, ends_to_adam: bool = False, to_adam: tuple = (), **options):
    """A factory ``net -> optimizer`` for ``name``, every hyperparameter explicit.

    The matrix optimizers (Muon, Iso, IsoAdam) route the whole model: each ``nn.Linear``
    weight gets the matrix rule, the hidden-unit biases their Adam fallback group.
    ``ends_to_adam`` declares the input and output projections as embedding and head (to
    Adam); ``to_adam`` names any stream matrices (``"embed"``, ``"blocks.0.inp"``, ...) that go
    to the same Adam group. ``options`` override single hyperparameters (``damping``,
    ``root_interval``, ``stats_dtype``, ``exact``, ``momentum``, ...).
    """
    # embeddings and head named explicitly (None: every nn.Linear weight gets the matrix rule)
    if ends_to_adam:
        ends = lambda net: dict(embeddings=net.embed, head=net.head)  # noqa: E731
    else:
        ends = lambda net: dict(embeddings=[net.get_submodule(n) for n in to_adam] or None, head=None)  # noqa: E731
    adam_fallback = dict(adam_lr=3e-4, adam_betas=(0.9, 0.95), adam_eps=1e-8, adam_weight_decay=0.0)
    whitening = dict(beta_cov=0.95, damping=1e-3, stat_interval=1, root_interval=10, root_method="eigh",
                     root_tol=None, warmup_steps=0, weight_decay=0.0, stats_dtype=torch.float64)
    # the plain damping rule, and Muon's original learning-rate scale, wherever the library offers others
    whitening.update(shrinkage=False)  # the plain rule: no extra damping for rank-deficient batches
    muon_extra = dict(adjust_lr_fn="original")
    if name == "SGD":
        kw = dict(lr=lr, momentum=0.9, dampening=0.0, weight_decay=0.0, nesterov=False, **options)
        return lambda net: torch.optim.SGD(net.parameters(), **kw)
    if name == "Adam":
        kw = dict(lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, **options)
        return lambda net: torch.optim.Adam(net.parameters(), **kw)
    if name == "SignSGD":
        kw = dict(lr=lr, momentum=0.9, weight_decay=0.0, **options)
        return lambda net: SignSGD(net, **kw)
    if name == "Muon":
        kw = dict(lr=lr, momentum=0.95, nesterov=True, ns_steps=5, exact=False, weight_decay=0.0,
                  compute_dtype=torch.float64, **adam_fallback, **muon_extra)
        kw.update(options)
        return lambda net: Muon(net, **kw, **ends(net))
    if name == "Iso":
        kw = dict(lr=lr, momentum=0.95, nesterov=True, **whitening, **adam_fallback)
        kw.update(options)
        return lambda net: Iso(net, **kw, **ends(net))
    if name == "IsoAdam":
        kw = dict(lr=lr, betas=(0.9, 0.999), eps=1e-8, whiten=True, **whitening,
                  adam_lr=lr, adam_betas=(0.9, 0.999), adam_eps=1e-8, adam_weight_decay=0.0)
        kw.update(options)
        return lambda net: IsoAdam(net, **kw, **ends(net))
    raise KeyError(f"unknown optimizer {name!r}; known: {', '.join(NAMES)}")


class LinearDecay:
    """Wrap an optimizer so that its learning rates fall linearly to 0 over ``steps`` steps."""

    def __init__(self, opt, steps: int):
        self.opt, self.steps, self.t = opt, steps, 0
        self.lr0 = [g["lr"] for g in opt.param_groups]

    def zero_grad(self):
        self.opt.zero_grad()

    def step(self):
        self.opt.step()
        self.t += 1
        for g, lr in zip(self.opt.param_groups, self.lr0):
            g["lr"] = lr * max(0.0, 1 - self.t / self.steps)

    def remove_hooks(self):
        close = getattr(self.opt, "remove_hooks", None)
        if close is not None:
            close()


def train(name: str, net, twin, lr_scale: float = 1.0, steps: int = STEPS, *, decay: bool = False,
          ends_to_adam: bool = False, **options) -> residual.TwinRun:
    """Train fresh copies of ``net`` and ``twin`` with optimizer ``name`` on the first
    ``steps`` batches (same batches, same order); ``decay`` lets the learning rate fall
    linearly to 0. Returns the :class:`~isolab.book.residual.TwinRun` (gap and losses per step)."""
    make = optimizer(name, LR[name] * lr_scale, ends_to_adam=ends_to_adam, **options)
    if decay:
        make = (lambda inner: lambda model: LinearDecay(inner(model), steps))(make)
    x, y, x_eval, y_eval = problem(net.embed.in_features)
    return residual.train_twins(copy.deepcopy(net), copy.deepcopy(twin), make, x[:steps], y[:steps], x_eval, y_eval)


def perturbed(net, size: float, seed: int):
    """A copy of ``net`` whose weights are multiplied entrywise by ``1 + size·N(0, 1)``."""
    other = copy.deepcopy(net)
    gen = generator(seed)
    with torch.no_grad():
        for p in other.parameters():
            p.mul_(1 + size * torch.randn(p.shape, generator=gen, dtype=p.dtype))
    return other


@functools.lru_cache(maxsize=None)
def _rotation():
    """The chapter's Haar-random rotation ``Q`` of the stream (seed 3)."""
    return linalg.random_orthogonal(SHAPE["width"], generator(3))


@functools.lru_cache(maxsize=None)
def _net_and_twin():
    net = network()
    return net, residual.rotate_stream(net, _rotation())


@functools.lru_cache(maxsize=None)
def twin_runs() -> dict:
    """The six 200-step runs of section 8.4: the network (seed 2) and its twin rotated by
    a Haar-random ``Q`` (seed 3), trained by each optimizer (about 6 s, cached)."""
    net, twin = _net_and_twin()
    return {name: train(name, net, twin) for name in NAMES}


# ------------------------------------------------------------------ figures
def _log_gap_axes(ax, steps: int, ticks=(1e-16, 1e-12, 1e-8, 1e-4, 1)):
    ax.set_yscale("log")
    ax.set_yticks(list(ticks), [f"{t:.0e}".replace("e-0", "e-").replace("1e+00", "1") for t in ticks])
    ax.yaxis.set_minor_locator(NullLocator())
    ax.set_ylim(1e-17, 3)
    ax.set_xlim(0, steps)
    ax.set_xlabel("step")


def _label_curves(ax, ends: dict, log: bool, min_gap: float, x_end: float, upper: float = math.inf):
    """Direct labels right of each curve's end, in the optimizer's colour (as
    :func:`isolab.book.figures.style.label_end`), moved apart vertically so that they do not
    overlap. ``ends`` maps a label (starting with the optimizer's name) to ``y``, or to
    ``(x, y)`` for a curve that stops early; ``min_gap`` and ``upper`` are in data units
    (decades on a log axis). Plain text in data coordinates: an annotation costs several
    times more to draw, and these labels are redrawn on every slider move."""
    names = list(ends)
    points = [ends[n] if isinstance(ends[n], tuple) else (x_end, ends[n]) for n in names]
    ys = np.array([math.log10(y) if log else y for _, y in points])
    pos = style.spread_labels(ys, min_gap, upper)
    for name, (x, _), p in zip(names, points, pos):
        ax.text(x + 0.015 * x_end, 10 ** p if log else p, name, color=style.text_color(style.color(name.split()[0])),
                fontsize=_SMALL, va="center", ha="left", clip_on=False)


def hero(runs: dict | None = None) -> Figure:
    """The chapter's opening figure: the relative output gap ``‖f − f′‖/‖f‖`` between the
    network and its rotated twin after every step, one curve per optimizer, labelled at
    its end; SGD, Muon and Iso stay at rounding level, Adam, SignSGD and IsoAdam drift."""
    runs = twin_runs() if runs is None else runs
    fig = Figure(figsize=(style.FIG_WIDTH, 4.2))
    ax = fig.add_axes((0.09, 0.13, 0.74, 0.72))
    for name, run in runs.items():
        ax.plot(run.gap.clamp_min(1e-17).numpy(), **style.line(name, markevery=25))
    ax.axhline(_EPS64, color=style.ROLES["bound"], lw=1.5, ls=":")
    ax.text(0.3 * STEPS, _EPS64 / 1.6, "float64 rounding, 2.2e-16", fontsize=_SMALL, color=style.ROLES["bound"], va="top")
    _log_gap_axes(ax, STEPS)
    ax.set_ylabel("output gap ‖f − f′‖ / ‖f‖")
    ends = {name: float(max(run.gap[-1].item(), 1e-17)) for name, run in runs.items()}
    _label_curves(ax, ends, log=True, min_gap=0.9, x_end=STEPS, upper=0.2)
    adam, iso = runs["Adam"].gap.max().item(), runs["Iso"].gap.max().item()
    ax.set_title(f"A network and its rotated twin, same batches in the same order:\n"
                 f"Adam's twin drifts to {adam:.0%} of the output; Iso's stays below 1e{math.ceil(math.log10(iso))}")
    ax.text(0.5 * STEPS, 3e-4, "elementwise rules: the twins drift apart", ha="center", fontsize=_SMALL,
            color=style.ROLES["bound"])
    ax.text(0.5 * STEPS, 3e-10, "SGD, Muon, Iso: identical up to rounding", ha="center", fontsize=_SMALL,
            color=style.ROLES["bound"])
    return fig


def training(runs: dict | None = None) -> Figure:
    """Held-out mean squared error of the original network for the six optimizers of
    section 8.4 (every one of them trains), labelled at the curves' ends."""
    runs = twin_runs() if runs is None else runs
    fig = Figure(figsize=(style.FIG_WIDTH, 3.4))
    ax = fig.add_axes((0.09, 0.16, 0.74, 0.72))
    for name, run in runs.items():
        ax.plot(run.loss.numpy(), **style.line(name, markevery=25))
    ax.set_yscale("log")
    ax.set_yticks([1e-3, 1e-2, 1e-1, 1], ["0.001", "0.01", "0.1", "1"])
    ax.yaxis.set_minor_locator(NullLocator())
    ax.set(xlim=(0, STEPS), ylim=(1e-3, 0.5), xlabel="step", ylabel="held-out mean squared error",
           title="Every optimizer trains (held-out loss of the original network)")
    _label_curves(ax, {n: r.loss[-1].item() for n, r in runs.items()}, log=True, min_gap=0.17, x_end=STEPS)
    return fig


# ------------------------------------------------------------------ an exact msign that is not equivariant (8.3)
def plain_svd_msign(M: torch.Tensor) -> torch.Tensor:
    """``U Vᵀ`` of the thin SVD ``M = U S Vᵀ``, every singular value mapped to 1, zeros too.

    On a rank-deficient ``M`` the singular vectors of the zero singular values are any
    orthonormal basis of the null spaces (whichever LAPACK returns), so the result is not a
    function of ``M`` alone and does not rotate with it. :func:`isolab.linalg.msign` maps
    singular values below a tolerance to 0 instead (the pseudo-inverse), as the
    Newton–Schulz polynomial, with ``p(0) = 0``, does."""
    U, _, Vh = torch.linalg.svd(M, full_matrices=False)
    return U @ Vh


class PlainSVDMuon(Muon):
    """The book's Muon with ``exact=True``, except that its polar factor is
    :func:`plain_svd_msign` (a zero singular value becomes 1)."""

    def _direction(self, it):
        if not it.group["exact"]:
            return super()._direction(it)
        full = it.full
        return plain_svd_msign(full.reshape(full.shape[0], -1)).reshape(full.shape)


def plain_svd_run(steps: int = STEPS) -> residual.TwinRun:
    """The twins trained by :class:`PlainSVDMuon` (exact polar factor, the section 8.4 settings)."""
    net, twin = _net_and_twin()
    adam = dict(adam_lr=3e-4, adam_betas=(0.9, 0.95), adam_eps=1e-8, adam_weight_decay=0.0)
    make = lambda model: PlainSVDMuon(model, LR["Muon"], 0.95, nesterov=True, ns_steps=5, exact=True,  # noqa: E731
                                      weight_decay=0.0, compute_dtype=torch.float64, adjust_lr_fn="original",
                                      embeddings=None, head=None, **adam)
    x, y, x_eval, y_eval = problem()
    return residual.train_twins(copy.deepcopy(net), copy.deepcopy(twin), make, x[:steps], y[:steps], x_eval, y_eval)


# ------------------------------------------------------------------ the centerpiece (8.5)
#: The eight matrices on the stream, in the order Adam takes them over: the input and output
#: projections first (Muon's usual recipe gives them to Adam), then the blocks.
ADAM_ORDER = ("embed", "head", "blocks.0.inp", "blocks.0.out", "blocks.1.inp", "blocks.1.out",
              "blocks.2.inp", "blocks.2.out")
#: The same matrices along the stream, as the right panel draws them, with their symbols.
STREAM_ORDER = ("embed", "blocks.0.inp", "blocks.0.out", "blocks.1.inp", "blocks.1.out", "blocks.2.inp",
                "blocks.2.out", "head")
SYMBOLS = {"embed": "$E$", "head": "$U$", **{f"blocks.{i}.{part}": f"${m}_{i + 1}$" for i in range(3)
                                             for part, m in (("inp", "A"), ("out", "B"))}}
PARTNERS = ("SGD", "Muon", "Iso")
#: Adam's settings for the matrices it trains: the matrix optimizers' own Adam group of section 8.4.
ADAM_GROUP = dict(lr=3e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0)


def _sizes() -> dict:
    net = network()
    return {name: net.get_submodule(name).weight.numel() for name in ADAM_ORDER}


#: The main slider: the share (%) of the stream weights that Adam trains when it takes the
#: first k = 0, ..., 8 matrices of :data:`ADAM_ORDER` (rounded; 4 % is E alone, 6 % E and U).
SHARES = tuple(round(100 * sum(list(_sizes().values())[:k]) / sum(_sizes().values())) for k in range(9))


class _Together:
    """Several optimizers stepped as one (each owns its own parameters)."""

    def __init__(self, *opts):
        self.opts = opts

    def zero_grad(self):
        for opt in self.opts:
            opt.zero_grad()

    def step(self):
        for opt in self.opts:
            opt.step()

    def remove_hooks(self):
        for opt in self.opts:
            getattr(opt, "remove_hooks", lambda: None)()


def mixed_optimizer(partner: str, k: int):
    """A factory ``net -> optimizer``: Adam (:data:`ADAM_GROUP`) trains the first ``k``
    matrices of :data:`ADAM_ORDER`, ``partner`` (SGD, Muon or Iso, with the section 8.4
    settings) the rest. The hidden-unit biases go where the partner sends them (SGD trains
    them; Muon and Iso give them to their Adam group, which has the same settings)."""
    if partner not in PARTNERS or not 0 <= k <= len(ADAM_ORDER):
        raise ValueError(f"partner must be one of {PARTNERS} and 0 <= k <= 8, got {partner!r}, {k!r}")

    def make(net):
        chosen = [net.get_submodule(name) for name in ADAM_ORDER[:k]]
        weights = {id(m.weight) for m in chosen}
        if partner == "SGD" or k == len(ADAM_ORDER):     # a matrix optimizer needs a matrix left to train
            adam = torch.optim.Adam([m.weight for m in chosen], **ADAM_GROUP) if chosen else None
            rest = [p for p in net.parameters() if id(p) not in weights]
            other = (torch.optim.SGD(rest, lr=LR["SGD"], momentum=0.9, dampening=0.0, weight_decay=0.0)
                     if partner == "SGD" else torch.optim.Adam(rest, **ADAM_GROUP))
            return _Together(*[o for o in (other, adam) if o is not None])
        return optimizer(partner, LR[partner], to_adam=ADAM_ORDER[:k])(net)

    return make


def matrix_drift(trained, trained_twin, Q) -> dict:
    r"""``{name: ‖W′ − R(W)‖_F / ‖R(W)‖_F}`` for each stream matrix: how far the trained twin's
    matrix is from the rotated copy of the trained original's (``R``: the recipe of
    :func:`isolab.book.residual.rotate_stream`, ``A → QᵀA`` and so on)."""
    rotated = dict(residual.rotate_stream(trained, Q).named_parameters())
    twin = dict(trained_twin.named_parameters())
    return {name: ((twin[f"{name}.weight"] - rotated[f"{name}.weight"]).norm()
                   / rotated[f"{name}.weight"].norm()).item() for name in STREAM_ORDER}


class ShareRun(NamedTuple):
    """One pair trained with Adam on a share of the stream (:func:`share_run`)."""

    gap: np.ndarray      #: relative output gap after each step (index 0: before training)
    loss: np.ndarray     #: the original network's held-out loss after each step
    drift: dict          #: each stream matrix's drift from the rotated original after the run


@functools.lru_cache(maxsize=None)
def share_run(partner: str, share: int) -> ShareRun:
    """The pair of section 8.4 trained for :data:`STEPS` steps with Adam on the first ``k``
    stream matrices (``share = SHARES[k]``) and ``partner`` on the rest."""
    k = SHARES.index(share)
    net, twin = _net_and_twin()
    a, b = copy.deepcopy(net), copy.deepcopy(twin)
    x, y, x_eval, y_eval = problem()
    run = residual.train_twins(a, b, mixed_optimizer(partner, k), x, y, x_eval, y_eval)
    return ShareRun(run.gap.numpy(), run.loss.numpy(), matrix_drift(a, b, _rotation()))


def share_grid() -> dict:
    """Every run of the centerpiece's grid, ``{(partner, share): ShareRun}`` (27 pairs,
    about 15 s on one core; cached)."""
    return {(p, s): share_run(p, s) for p in PARTNERS for s in SHARES}


def _trainers(share):
    """The stream matrices Adam trains at ``share``."""
    return set(ADAM_ORDER[:SHARES.index(share)])


def draw_share(fig, share, partner):
    """Left: the output gap against the step with Adam on ``share`` % of the stream weights
    and ``partner`` on the rest (the runs with none and with all to Adam in grey). Right: each
    stream matrix's drift from the rotated original after the run, coloured by its trainer."""
    run, adam = share_run(partner, share), _trainers(share)
    ax, ax_m = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.5, 1]})
    fig.subplots_adjust(left=0.1, right=0.98, bottom=0.15, top=0.8, wspace=0.45)
    steps = np.arange(STEPS + 1)
    for ref, text, where in ((0, "no Adam", 0.4), (100, "all Adam", 100 * share_run(partner, 100).gap[-1] + 0.5)):
        if ref != share:
            ax.plot(steps, 100 * share_run(partner, ref).gap, color=style.ROLES["muted"], lw=1.5)
            ax.text(STEPS * 0.98, where, text, ha="right", va="bottom", fontsize=_SMALL, color=style.ROLES["bound"])
    ax.plot(steps, 100 * run.gap, **style.line(partner, markevery=25, lw=2.2))
    ax.set(xlim=(0, STEPS), ylim=(-0.3, GAP_YLIM), xlabel="step", ylabel="output gap ‖f − f′‖/‖f‖ (%)")
    ax.set_xticks([0, 100, 200])
    largest = run.gap.max()
    ax.set_title(f"Adam on {share}% of the weights, {partner} the rest:\nlargest gap "
                 + (f"{largest:.1%}" if largest > 1e-4 else fmt(largest)), fontsize=style.FONT_SIZE)
    # right: each matrix's drift, coloured by the optimizer that trains it
    x = np.arange(len(STREAM_ORDER))
    values = [max(run.drift[name], _FLOOR) for name in STREAM_ORDER]
    colors = [style.color("Adam" if name in adam else partner) for name in STREAM_ORDER]
    ax_m.bar(x, [v - _FLOOR for v in values], bottom=_FLOOR, color=colors, width=0.75)
    ax_m.set_yscale("log")
    ax_m.set_yticks([1e-15, 1e-10, 1e-5, 1], ["1e-15", "1e-10", "1e-5", "1"])
    ax_m.yaxis.set_minor_locator(NullLocator())
    ax_m.set(ylim=(_FLOOR, 30), xlim=(-0.6, len(x) - 0.4), ylabel="drift of the matrix")
    ax_m.set_xticks(x, [SYMBOLS[name] for name in STREAM_ORDER])
    ax_m.set_title("each matrix vs the\nrotated original", fontsize=style.FONT_SIZE)
    for i, (name, label) in enumerate((("Adam", "Adam"), (partner, partner))):
        ax_m.text(0.03 + 0.5 * i, 0.97, f"■ {label}", transform=ax_m.transAxes, va="top", ha="left",
                  fontsize=_SMALL, color=style.text_color(style.color(name)))


_FLOOR = 1e-17      # exact zeros and rounding-level drifts are drawn on the floor of the log axis
GAP_YLIM = 12.0     # the left panel's axis, in % of the output (the largest gap of the grid is 11%)


def largest_gap(share, partner) -> tuple:
    """``(partner, largest gap)`` of the run at ``share``."""
    return partner, float(share_run(partner, share).gap.max())


class GrowsFor:
    """A promise predicate: the measured ``(partner, value)`` pairs grow along the main
    slider for the partners named (the others are not promised anything)."""

    def __init__(self, partners):
        self.partners = tuple(partners)

    def __call__(self, values) -> bool:
        if values[0][0] not in self.partners:
            return True
        v = [value for _, value in values]
        return all(b > a for a, b in zip(v, v[1:]))

    def __repr__(self) -> str:
        return f"increasing for {', '.join(self.partners)}"


def untouched(share, partner) -> tuple:
    """``(share, largest gap)``: at share 0 no matrix is trained by Adam."""
    return share, float(share_run(partner, share).gap.max())


def partner_drift(share, partner) -> tuple:
    """``(share, the smallest drift among the matrices the partner trains)`` (inf if none)."""
    run, adam = share_run(partner, share), _trainers(share)
    rest = [run.drift[name] for name in STREAM_ORDER if name not in adam]
    return share, min(rest) if rest else math.inf


SHARE_CAPTION = (
    "Adam trains a share of the eight matrices on the stream (the input projection E and output projection U "
    "first, then each block's read A and write B), a partner (SGD, Muon or Iso) trains the rest, and the "
    "network f and its twin f′, its stream rotated by Q, see the same 200 batches. Left: the output gap ‖f − f′‖/‖f‖ against "
    "the step, with the runs with no Adam and with all Adam in grey. Right: how far each matrix W′ of the "
    "twin ends from the rotated copy R(W) of the original's (R: A → QᵀA, B → BQ, ...), ‖W′ − R(W)‖/‖W‖, "
    "coloured by the optimizer that trains it. Move the share: with no Adam the twins stay identical to "
    "rounding; from 4% on they part by more than 0.1% of the output; with SGD or Iso on the rest the "
    "largest gap grows with the share; and every matrix drifts, the partner's too."
)


def share_explorable() -> Explorable:
    """Section 8.5: the share of the stream Adam trains (main) and the partner that trains the rest."""
    return Explorable(
        draw_share,
        [Slider("share", SHARES, label="share of the stream weights Adam trains", default=6, fmt="{}%"),
         Slider("partner", PARTNERS, label="the rest trained by", default="Iso", fmt="{}")],
        main="share",
        figsize=(style.FIG_WIDTH, 3.8),
        static_colors=48,
        narrow="panels",
        caption=SHARE_CAPTION,
        alt=("The output gap between a residual network and its rotated twin when Adam trains a share of the "
             "stream matrices and SGD, Muon or Iso the rest, and each matrix's drift from the rotated original."),
        promises=[
            Promise("with no Adam the twins stay identical to rounding", untouched,
                    always(lambda v: v[0] > 0 or v[1] < 1e-10, "largest gap < 1e-10 at share 0")),
            Promise("from 4% on they part by more than 0.1% of the output", untouched,
                    always(lambda v: v[0] == 0 or v[1] > 1e-3, "largest gap > 1e-3 at every share > 0")),
            Promise("with SGD or Iso on the rest the largest gap grows with the share", largest_gap,
                    GrowsFor(("SGD", "Iso"))),
            Promise("every matrix drifts, the partner's too", partner_drift,
                    always(lambda v: v[0] == 0 or v[1] > 1e-3, "each partner-trained matrix drifts > 1e-3")),
        ],
    )


EXPLORABLES = (share_explorable,)


# ------------------------------------------------------------------ Muon's sensitivity (8.6)
#: The variants of Muon tested against the perturbed copy in section 8.6: label -> options of :func:`train`.
MUON_VARIANTS = {
    "exact polar factor": dict(exact=True),
    "learning rate falling to 0": dict(decay=True),
    "no momentum": dict(momentum=0.0),
}
MUON_RESULTS = "ch08_muon_controls.npz"  # in results/ (isolab.book.figures.saved)


def shadow_network():
    """Section 8.6's control: the network with every weight times ``1 + 1e-12·N(0, 1)`` (seed 7)."""
    return perturbed(_net_and_twin()[0], 1e-12, seed=7)


def muon_control(label: str, against: str = "shadow") -> residual.TwinRun:
    """Muon variant ``label`` trained for 200 steps on the network and either the perturbed
    copy (``"shadow"``) or the rotated twin (``"twin"``): what
    ``scripts/ch08_muon_controls.py`` saved."""
    net, twin = _net_and_twin()
    other = shadow_network() if against == "shadow" else twin
    return train("Muon", net, other, **MUON_VARIANTS[label])


@functools.lru_cache(maxsize=None)
def muon_controls() -> dict:
    """The saved runs: ``{(label, "shadow" | "twin"): gap array (201,)}``."""
    with np.load(saved_result(MUON_RESULTS)) as f:
        labels, against, gaps = list(f["labels"]), list(f["against"]), f["gap"]
    if sorted(set(labels)) != sorted(MUON_VARIANTS):
        raise ValueError(f"{MUON_RESULTS} holds other variants: rerun scripts/ch08_muon_controls.py")
    return {(str(l), str(a)): gaps[i] for i, (l, a) in enumerate(zip(labels, against))}
