r"""Figures, training runs and the explorable of Chapter 8, *Rotational symmetry*.

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
- :data:`ONE_BATCH_RULES`: the one-batch form of each update rule (section 8.3).
- :class:`LinearDecay`, :func:`perturbed`: the controls of section 8.5; :func:`iso_bump`
  draws Iso's early bump and the runs that test where it comes from; :data:`MUON_VARIANTS`,
  :func:`muon_control` and :func:`muon_controls`: the Muon variants that test where Muon's
  sensitivity comes from (200-step runs saved by ``scripts/ch08_muon_controls.py`` in
  ``results/ch08_muon_controls.npz``).
- :func:`rotation_explorable` (section 8.7): sliders θ (main, 10 values) and the learning
  rate (3 values); it draws runs saved by ``scripts/ch08_rotation_runs.py`` in
  ``results/ch08_rotation_runs.npz`` (162 pairs of 100 steps, too slow to train while the
  page is built), and :func:`rotation_run` recomputes any one of them. Its caption's
  promises are measured by :func:`adam_gap`, :func:`sgd_iso_worst` and
  :func:`muon_over_adam` on the same saved runs.

``EXPLORABLES`` lists the explorable builders (``tests/book/test_captions.py`` checks their
caption promises over the whole slider grid).
"""

from __future__ import annotations

import copy
import functools
import math

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
    "ONE_BATCH_RULES", "fmt", "iso_bump", "SHAPE", "STEPS", "BATCH", "LR", "NAMES", "EQUIVARIANT", "ELEMENTWISE", "problem", "network", "optimizer",
    "train", "twin_runs", "hero", "training", "LinearDecay", "perturbed", "THETAS", "LR_SCALES",
    "RESULTS", "MUON_VARIANTS", "MUON_RESULTS", "shadow_network", "muon_control", "muon_controls", "GrowsUpTo", "adam_gap", "sgd_iso_worst", "muon_over_adam", "rotation_run", "rotation_runs", "rotation_explorable", "EXPLORABLES",
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


def optimizer(name: str, lr: float, *, ends_to_adam: bool = False, **options):
    """A factory ``net -> optimizer`` for ``name``, every hyperparameter explicit.

    The matrix optimizers (Muon, Iso, IsoAdam) route the whole model: each ``nn.Linear``
    weight gets the matrix rule, the hidden-unit biases their Adam fallback group.
    ``ends_to_adam`` declares the input and output projections as embedding and head (to
    Adam). ``options`` override single hyperparameters (``damping``, ``root_interval``,
    ``stats_dtype``, ``exact``, ``momentum``, ...).
    """
    # embeddings and head named explicitly (None: every nn.Linear weight gets the matrix rule)
    ends = (lambda net: dict(embeddings=net.embed, head=net.head)) if ends_to_adam else \
        (lambda net: dict(embeddings=None, head=None))
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
def _net_and_twin():
    net = network()
    return net, residual.rotate_stream(net, linalg.random_orthogonal(SHAPE["width"], generator(3)))


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


def iso_bump(runs: dict, steps: int = 20) -> Figure:
    """Section 8.5: the first ``steps`` steps of Iso's gap for the variants in ``runs``
    (label -> :class:`~isolab.book.residual.TwinRun`), with the refresh of the inverse roots
    every ten steps marked."""
    fig = Figure(figsize=(style.FIG_WIDTH, 4.3))
    ax = fig.add_axes((0.1, 0.42, 0.86, 0.48))
    colors = style.sequence(len(runs), start=0.0, stop=0.8)
    markers = "osD^vP*X"
    for (label, run), color, marker in zip(runs.items(), colors, markers):
        ax.plot(run.gap[: steps + 1].clamp_min(1e-17).numpy(), color=color, marker=marker, markersize=5, label=label)
    for t in range(1, steps + 1, 10):
        ax.axvline(t, color=style.ROLES["muted"], lw=1.0, ls="--", zorder=0)
    ax.text(1.3, 2e-11, "inverse roots\nrecomputed", fontsize=_SMALL, color=style.ROLES["bound"], va="top")
    ax.set_yscale("log")
    ax.set_yticks([1e-16, 1e-14, 1e-12, 1e-10], ["1e-16", "1e-14", "1e-12", "1e-10"])
    ax.yaxis.set_minor_locator(NullLocator())
    ax.set(xlim=(0, steps), ylim=(1e-16, 1e-10), xlabel="step", ylabel="output gap ‖f − f′‖/‖f‖",
           xticks=list(range(0, steps + 1, 5)),
           title="Iso's early bump comes from reused inverse roots, with or without a rotation")
    ax.legend(loc="upper center", bbox_to_anchor=(0.45, -0.2), ncol=2, fontsize=_SMALL, columnspacing=1.5)
    return fig


# ------------------------------------------------------------------ the explorable (8.7)
#: The explorable's grid: the rotation angle θ (main) and a factor on every learning rate.
THETAS = (0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 3.0)
LR_SCALES = (0.3, 1.0, 3.0)
EXPLORE_STEPS = 100
RESULTS = "ch08_rotation_runs.npz"  # in results/ (isolab.book.figures.saved)


@functools.lru_cache(maxsize=None)
def _skew():
    return residual.random_skew(SHAPE["width"], generator(9))


def rotation_run(name: str, theta: float, lr_scale: float) -> residual.TwinRun:
    """Train the pair for :data:`EXPLORE_STEPS` steps with the twin rotated by
    ``Q(θ) = exp(θK)`` (``K``: :func:`isolab.book.residual.random_skew`, seed 9): the computation
    that ``scripts/ch08_rotation_runs.py`` saved for every grid point."""
    net = _net_and_twin()[0]
    rotated = residual.rotate_stream(net, residual.rotation(_skew(), theta))
    return train(name, net, rotated, lr_scale, steps=EXPLORE_STEPS)


@functools.lru_cache(maxsize=None)
def rotation_runs() -> dict:
    """The saved grid: ``{"gap": (θ, lr, optimizer, step), "loss": ...}`` as NumPy arrays,
    with the grid it was computed on (checked against :data:`THETAS`, :data:`LR_SCALES`)."""
    with np.load(saved_result(RESULTS)) as f:
        data = {k: f[k] for k in f.files}
    if tuple(data["thetas"]) != THETAS or tuple(data["lr_scales"]) != LR_SCALES or tuple(data["names"]) != NAMES:
        raise ValueError(f"{RESULTS} was computed on another grid: rerun scripts/ch08_rotation_runs.py")
    return data


def _run(theta, lr_scale):
    d = rotation_runs()
    i, j = THETAS.index(theta), LR_SCALES.index(lr_scale)
    return {n: (d["gap"][i, j, k], d["loss"][i, j, k]) for k, n in enumerate(NAMES)}


def _max_gap(theta, lr_scale, name) -> float:
    """Largest gap of one optimizer's run over its finite part (a diverged run stops)."""
    gap = _run(theta, lr_scale)[name][0]
    finite = gap[np.isfinite(gap)]
    return float(finite.max()) if finite.size else 0.0


def sgd_iso_worst(theta, lr_scale) -> float:
    """The larger of SGD's and Iso's largest gaps (before a divergence, if any)."""
    return max(_max_gap(theta, lr_scale, "SGD"), _max_gap(theta, lr_scale, "Iso"))


def adam_gap(theta, lr_scale) -> float:
    """Adam's largest gap over the 100 steps."""
    return _max_gap(theta, lr_scale, "Adam")


def muon_over_adam(theta, lr_scale) -> float:
    """Muon's largest gap as a fraction of Adam's (0 at θ = 0, where both are 0)."""
    adam = adam_gap(theta, lr_scale)
    return _max_gap(theta, lr_scale, "Muon") / adam if adam > 0 else 0.0


class GrowsUpTo:
    """A promise predicate: the values along θ do not decrease while θ ≤ ``limit``."""

    def __init__(self, limit: float):
        self.limit = limit

    def __call__(self, values) -> bool:
        kept = [v for theta, v in zip(THETAS, values) if theta <= self.limit]
        return all(b >= a for a, b in zip(kept, kept[1:]))

    def __repr__(self) -> str:
        return f"non-decreasing for θ <= {self.limit:g}"


def max_gaps(lr_scale) -> dict:
    """``{optimizer: [largest gap at each θ of the grid]}`` at one learning-rate factor (0 at
    θ = 0, where the twin is the network itself)."""
    return {name: [_max_gap(theta, lr_scale, name) for theta in THETAS] for name in NAMES}


_FLOOR = 1e-17      # exact zeros are drawn on the floor of the log axis


def draw_rotation(fig, theta, lr_scale):
    """Left: the output gap against the step at the chosen θ, one curve per optimizer,
    labelled with its held-out loss. Right: each optimizer's largest gap against θ (the
    grid's θ evenly spaced, θ = 0 included), the chosen θ marked."""
    runs = _run(theta, lr_scale)
    ax, ax_t = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.45, 1]})
    fig.subplots_adjust(left=0.11, right=0.98, bottom=0.16, top=0.86, wspace=0.7)
    steps = np.arange(EXPLORE_STEPS + 1)
    if theta == 0:
        ax.text(0.5, 0.5, "θ = 0: Q = I, the twin is the\nnetwork itself; every gap is\nexactly 0 at every step",
                transform=ax.transAxes, ha="center", va="center", fontsize=style.FONT_SIZE,
                color=style.ROLES["ink"])
        for name in runs:   # no curves to label: name the optimizers of the right panel here
            ax.plot([], [], **style.line(name))
        ax.legend(loc="lower center", ncol=3, fontsize=_SMALL, frameon=False)
    else:
        ends = {}
        for name, (gap, loss) in runs.items():
            ax.plot(steps, np.maximum(gap, _FLOOR), **style.line(name, markevery=20))
            finite = np.flatnonzero(np.isfinite(gap))
            if finite[-1] == EXPLORE_STEPS:  # the label also says how well the run trained
                ends[f"{name}  {loss[-1]:.3f}"] = max(float(gap[-1]), _FLOOR)
            else:  # diverged: label the curve where it stops
                ends[f"{name}  stops at {finite[-1] + 1}"] = (float(finite[-1]), max(float(gap[finite[-1]]), _FLOOR))
        _label_curves(ax, ends, log=True, min_gap=1.3, x_end=EXPLORE_STEPS, upper=0.2)
    _log_gap_axes(ax, EXPLORE_STEPS, ticks=(1e-15, 1e-10, 1e-5, 1))
    ax.set_xticks([0, 50, 100])
    ax.set(ylabel="output gap ‖f − f′‖/‖f‖", title=f"θ = {theta:g} rad, learning rates × {lr_scale:g}")
    # right: the largest gap of each optimizer at every angle
    x = np.arange(len(THETAS))
    for name, gaps in max_gaps(lr_scale).items():
        ax_t.plot(x, np.maximum(gaps, _FLOOR), **style.line(name, markersize=4))
    ax_t.axvline(THETAS.index(theta), color=style.ROLES["highlight"], lw=1.5, zorder=0)
    ax_t.set_yscale("log")
    ax_t.set_yticks([1e-15, 1e-10, 1e-5, 1], ["1e-15", "1e-10", "1e-5", "1"])
    ax_t.yaxis.set_minor_locator(NullLocator())
    ticks = [0, THETAS.index(0.1), THETAS.index(1.0), len(THETAS) - 1]
    ax_t.set(ylim=(_FLOOR, 3), xlim=(-0.3, len(THETAS) - 0.7), xlabel="rotation θ (rad)",
             ylabel="largest gap")
    ax_t.set_xticks(ticks, [f"{THETAS[i]:g}" for i in ticks])
    ax_t.set_title("every angle (labels: left)", fontsize=style.FONT_SIZE)


def rotation_explorable() -> Explorable:
    """Section 8.7: rotate the twin by ``exp(θK)`` (θ, main) and scale every learning rate."""
    return Explorable(
        draw_rotation,
        [Slider("theta", THETAS, label="rotation θ (rad)", default=1.0),
         Slider("lr_scale", LR_SCALES, label="learning rate ×", default=1.0)],
        main="theta",
        figsize=(style.FIG_WIDTH, 3.6),
        static_colors=48,
        caption=("Output gap between a residual network and its twin rotated by Q = exp(θK), six optimizers, "
                 "100 steps. Left: the gap against the step at the chosen angle, each label giving the original "
                 "network's held-out loss after the 100 steps (a run that diverges stops where its label says); "
                 "right: each optimizer's largest gap at every angle, the chosen one marked. Move θ: Adam's gap "
                 "grows with the angle up to θ = 1 and then levels off, while SGD and Iso stay below 1e-10 at "
                 "every angle. Muon stays more than a hundred times below Adam; at three times its learning rate "
                 "it amplifies rounding to about 1e-5."),
        promises=[
            Promise("Adam's gap grows with the angle up to θ = 1", adam_gap, GrowsUpTo(1.0)),
            Promise("SGD and Iso stay below 1e-10 at every angle", sgd_iso_worst,
                    always(lambda g: g < 1e-10, "below 1e-10")),
            Promise("Muon stays more than a hundred times below Adam", muon_over_adam,
                    always(lambda r: r < 1e-2, "below 1/100")),
        ],
    )


EXPLORABLES = (rotation_explorable,)


# ------------------------------------------------------------------ Muon's sensitivity (8.5)
#: The variants of Muon tested against the perturbed copy in section 8.5: label -> options of :func:`train`.
MUON_VARIANTS = {
    "exact polar factor": dict(exact=True),
    "learning rate falling to 0": dict(decay=True),
    "no momentum": dict(momentum=0.0),
}
MUON_RESULTS = "ch08_muon_controls.npz"  # in results/ (isolab.book.figures.saved)


def shadow_network():
    """Section 8.5's control: the network with every weight times ``1 + 1e-12·N(0, 1)`` (seed 7)."""
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
