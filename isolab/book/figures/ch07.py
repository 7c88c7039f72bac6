r"""Figures and explorables of Chapter 7, *Adam, sign descent and batch size*.

Each function builds and returns a :class:`matplotlib.figure.Figure` (or an
:class:`~isolab.book.explorable.Explorable`); the computations a figure shares with the
chapter's printed checks are functions of their own here, cached, so that the figure and
the check cannot drift apart:

- :func:`sign_limit_clouds` / :func:`hero`: the chapter in one picture. Left, Adam's
  direction for a two-entry gradient, one dot per step of a real ``torch.optim.Adam`` run,
  closing in on the corner ``sgn(μ)`` of the square as the batch grows. Right, the step
  sizes of the real optimizers (SGD, Iso, Adam) on pure noise against the batch size.
- :func:`sign_limit`: the Balles–Hennig direction ``μ/√(μ² + σ²/b)`` of one entry against
  ``μ/σ`` for growing ``b``: a smooth curve that sharpens into the step ``sgn(μ)``.
- :func:`distance_figure`, :func:`balles_hennig_figure`, :func:`noise_figure`: the
  section figures of 7.3, 7.4 and 7.5, drawn from what the chapter computed.
- :func:`noise_runs` / :func:`stationary` / :func:`batch_noise_explorable`: SGD, the Iso
  optimizer (its averaged covariances and momentum) and ``torch.optim.Adam`` fed the same
  pure noise batches, ``b = 1 ... 10¹²``; the explorable, the chapter's centerpiece, moves
  the batch size (13 decades, the main slider), Adam's β2 (0.1, 0.999) and ε (1e-8, 1e-4,
  1e-2): 78 frames. It draws
  log10 of the data on linear axes (the same picture as log axes, faster to set up on
  every redraw).

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

from isolab import updates

from isolab.book import batch_noise
from isolab.book.explorable import Explorable, Promise, Slider, always, constant
from isolab.book.figures import style
from isolab.book.plotting import log_ticks
from isolab.book.seeding import generator

__all__ = [
    "NOISE_BATCHES", "NOISE_STEPS", "NOISE_SEEDS", "STATIONARY_FROM", "ISO_HYPER", "BETA2S", "EPSILONS",
    "sign_limit_clouds", "hero", "sign_limit", "distance_figure", "balles_hennig_figure", "noise_figure",
    "noise_runs", "stationary", "noise_slopes", "batch_noise_explorable", "EXPLORABLES",
]

F64 = torch.float64
_SMALL = style.FONT_SIZE - 1
_SUP = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")

# ----------------------------------------------------------------------------- pure noise, real optimizers
N = M = 8
NOISE_BATCHES = [10**k for k in range(13)]
NOISE_STEPS, NOISE_SEEDS = 300, 3
#: the stationary part of a run: steps 100-299 (Adam and Iso settle within a few tens of steps)
STATIONARY_FROM = 100
#: Iso as the book runs it, every hyperparameter explicit (learning rate 1: the step is step/lr)
ISO_HYPER = dict(momentum=0.95, nesterov=True, beta_cov=0.95, damping=1e-3, root_interval=10)
BETA2S = [0.1, 0.9, 0.999]
EPSILONS = [1e-8, 1e-6, 1e-4, 1e-3, 1e-2]


@functools.lru_cache(maxsize=None)
def noise_runs() -> dict:
    r"""Step norms (``(step, seed, batch)``, float64) of SGD, Iso and Adam fed one stream of
    pure noise batches (``n = m = 8``, zero true gradient, ``b`` in :data:`NOISE_BATCHES`,
    300 steps, 3 seeds, Bartlett stand-ins beyond 16 rows).

    ``"sgd"``: ``‖X^T G/b‖`` (SGD without momentum steps by the gradient);
    ``"iso"``: the :class:`isolab.optim.Iso` optimizer (:data:`ISO_HYPER`: averaged
    covariances with β = 0.95, Nesterov momentum 0.95, damping 1e-3, roots every 10 steps);
    ``"iso_formula"``: the one-batch formula ``iso_update(X_t, G_t)``;
    ``("adam", β2, ε)``: ``torch.optim.Adam`` with β1 = 0.9 (β2 in :data:`BETA2S`, ε in
    :data:`EPSILONS`); ``"adam_beta1_0"``: Adam with β1 = 0, β2 = 0.999, ε = 1e-8."""
    gen = generator(11)
    batches = [batch_noise.noise_batch(N, M, b, generator=gen, sample_shape=(NOISE_STEPS, NOISE_SEEDS))
               for b in NOISE_BATCHES]
    grads = torch.stack([updates.sgd_update(X, G) for X, G in batches], 2)          # (step, seed, batch, n, m)
    runs = {
        "sgd": torch.linalg.matrix_norm(grads),
        "iso_formula": torch.stack([torch.linalg.matrix_norm(updates.iso_update(X, G)) for X, G in batches], 2),
        "iso": torch.stack([torch.linalg.matrix_norm(d) for d in batch_noise.iso_steps(batches, **ISO_HYPER)], 2),
    }
    for beta2 in BETA2S:
        for eps in EPSILONS:
            d = batch_noise.adam_directions(grads, betas=(0.9, beta2), eps=eps)
            runs["adam", beta2, eps] = torch.linalg.matrix_norm(d)
    runs["adam_beta1_0"] = torch.linalg.matrix_norm(batch_noise.adam_directions(grads, betas=(0.0, 0.999), eps=1e-8))
    return runs


def stationary(norms: torch.Tensor) -> torch.Tensor:
    """Mean step norm over steps 100-299 and all seeds, per batch size."""
    return norms[STATIONARY_FROM:].mean((0, 1))


@functools.lru_cache(maxsize=None)
def _stationary(key) -> np.ndarray:
    return stationary(noise_runs()[key]).numpy()


def noise_slopes(key, low: int = 10**2, high: int = 10**12) -> torch.Tensor:
    """Per seed, the fitted slope of log(mean step norm over steps 100-299) against log b
    for ``low <= b <= high``."""
    idx = [i for i, b in enumerate(NOISE_BATCHES) if low <= b <= high]
    per_seed = noise_runs()[key][STATIONARY_FROM:].mean(0)[:, idx]
    return batch_noise.loglog_slopes([NOISE_BATCHES[i] for i in idx], per_seed)


def _noise_panel(ax, beta2: float = 0.999, eps: float = 1e-8, labels: bool = True) -> None:
    b = np.asarray(NOISE_BATCHES, dtype=float)
    for name, key in (("SGD", "sgd"), ("Iso", "iso"), ("Adam", ("adam", beta2, eps))):
        y = _stationary(key)
        ax.plot(b, y, **style.line(name, markers=False))
        if labels:
            style.label_end(ax, b, y, name, optimizer=name)
    ax.set(xscale="log", yscale="log", xlim=(1, 1e12), ylim=(1e-7, 30), xlabel="batch size b")
    ax.spines["right"].set_visible(False)
    log_ticks(ax.xaxis, [0, 6, 12])
    log_ticks(ax.yaxis, [-6, -3, 0])


# ----------------------------------------------------------------------------- the sign-descent limit
#: two entries of a true gradient, in units of the per-sample noise σ = 1: one strong, one weak
CLOUD_MU = (0.5, 0.1)
CLOUD_BATCHES = (1, 16, 256, 4096)


@functools.lru_cache(maxsize=None)
def sign_limit_clouds(steps: int = 400, keep_from: int = 100) -> dict:
    r"""Adam's direction ``m̂/(√v̂ + ε)`` for a two-entry gradient ``μ + ξ/√b`` (``μ`` =
    :data:`CLOUD_MU`, ``ξ`` standard Gaussian, independent steps), one real
    ``torch.optim.Adam`` run per batch size in :data:`CLOUD_BATCHES` (default
    hyperparameters), steps ``keep_from ... steps - 1``. Returns the directions
    ``(steps, 2)`` per batch, the Balles–Hennig prediction per batch and each run's mean
    distance ``‖d − sgn μ‖/‖sgn μ‖``."""
    mu = torch.tensor(CLOUD_MU, dtype=F64)
    noise = torch.randn(steps, len(CLOUD_BATCHES), 2, generator=generator(21), dtype=F64)
    scale = torch.tensor(CLOUD_BATCHES, dtype=F64).rsqrt()[:, None]
    d = batch_noise.adam_directions(mu + scale * noise)[keep_from:]             # (steps, batch, 2)
    sign = torch.sign(mu)
    dist = ((d - sign).norm(dim=-1) / sign.norm()).mean(0)
    return {
        "directions": {b: d[:, i] for i, b in enumerate(CLOUD_BATCHES)},
        "predicted": {b: batch_noise.balles_hennig(mu, torch.full_like(mu, 1.0 / b)) for b in CLOUD_BATCHES},
        "distance": {b: dist[i].item() for i, b in enumerate(CLOUD_BATCHES)},
    }


_CLOUD_LABELS = {1: (-8, 10), 16: (-10, 4), 256: (-10, -8), 4096: (-14, 8)}   # label offsets (points)


def _cloud_panel(ax) -> None:
    clouds = sign_limit_clouds()
    mu = np.asarray(CLOUD_MU)
    ax.plot([-1, 1, 1, -1, -1], [-1, -1, 1, 1, -1], color=style.ROLES["muted"], lw=1.5, zorder=0)
    ray = mu / np.linalg.norm(mu)
    ax.annotate("", xy=ray, xytext=(0, 0), arrowprops=dict(arrowstyle="-|>", color=style.color("SGD"), lw=1.5))
    ax.text(0.02, -0.07, "μ/‖μ‖: SGD's direction", color=style.color("SGD"), fontsize=_SMALL, va="top")
    b_path = np.logspace(-1, 6, 200)
    path = mu / np.sqrt(mu**2 + 1.0 / b_path[:, None])
    ax.plot(path[:, 0], path[:, 1], color=style.ROLES["bound"], lw=1.5, zorder=1)
    for (b, d), color in zip(clouds["directions"].items(), style.sequence(len(CLOUD_BATCHES))):
        ax.scatter(d[:, 0], d[:, 1], s=4, color=color, alpha=0.3, linewidths=0, zorder=2)
        p = clouds["predicted"][b]
        ax.scatter([p[0]], [p[1]], s=40, color=color, edgecolors=style.ROLES["background"], linewidths=0.8, zorder=3)
        ax.annotate(f"b = {b}", (p[0].item(), p[1].item()), xytext=_CLOUD_LABELS.get(b, (-10, 0)),
                    textcoords="offset points", ha="right", va="center", fontsize=_SMALL,
                    color=style.text_color(color))
    ax.scatter([1], [1], marker="*", s=160, color=style.ROLES["target"], zorder=4)
    ax.annotate("sgn(μ)", (1, 1), xytext=(8, 8), textcoords="offset points", ha="left", fontsize=_SMALL)
    ax.set(xlim=(-0.55, 1.35), ylim=(-0.55, 1.2), aspect="equal", xlabel="entry 1 of Adam's direction",
           ylabel="entry 2", xticks=[-0.5, 0, 0.5, 1], yticks=[-0.5, 0, 0.5, 1])
    far = clouds["distance"][CLOUD_BATCHES[-1]]
    ax.set_title(f"Adam's direction → sgn(μ) as b grows\n(μ = (0.5, 0.1)σ; distance {far:.2f} at b = {CLOUD_BATCHES[-1]})",
                 fontsize=style.FONT_SIZE)


def hero() -> Figure:
    """The chapter in one figure: the sign-descent limit (left) and the step sizes on pure
    noise of SGD, Iso and Adam against the batch size (right), with fitted slopes."""
    fig = Figure(figsize=(style.FIG_WIDTH, 4.3))
    ax_c, ax_n = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 1]})
    _cloud_panel(ax_c)
    _noise_panel(ax_n, labels=False)
    b = np.asarray(NOISE_BATCHES, dtype=float)
    for name, key in (("SGD", "sgd"), ("Iso", "iso"), ("Adam", ("adam", 0.999, 1e-8))):
        slope = round(noise_slopes(key).mean().item(), 2) + 0.0
        style.label_end(ax_n, b, _stationary(key), f"{name} {slope:+.2f}", optimizer=name,
                        dy={"SGD": 7, "Iso": -7}.get(name, 0))
    ax_n.set(ylabel="‖step‖ / lr (mean of steps 100-299)")
    ax_n.set_title("zero true gradient, n = m = 8:\nwho shrinks with the batch (slopes)", fontsize=style.FONT_SIZE)
    fig.tight_layout()
    return fig


def sign_limit(batches=(1, 4, 16, 64, 256, 1024, 4096), labelled=(1, 16, 256, 4096)) -> Figure:
    r"""One entry's expected Adam direction ``μ/√(μ² + σ²/b)`` against ``μ/σ``: as the batch
    grows, the smooth curve sharpens into the step function ``sgn(μ)``, slowest near μ = 0."""
    fig = Figure(figsize=(style.FIG_WIDTH, 3.6))
    ax = fig.add_subplot()
    r = np.linspace(-1, 1, 801)
    ax.plot([-1, 0, 0, 1], [-1, -1, 1, 1], color=style.ROLES["target"], lw=3, alpha=0.25, zorder=0)
    ax.text(0.98, 1.04, "sgn(μ): sign descent", ha="right", va="bottom", fontsize=_SMALL)
    colors = dict(zip(batches, style.sequence(len(batches))))
    for b, color in colors.items():
        ax.plot(r, r / np.sqrt(r**2 + 1.0 / b), color=color, lw=2)
    # labels where the curves cross μ = 0.1σ, pushed apart, on a halo over the curves behind them
    crossings = [0.1 / math.sqrt(0.01 + 1.0 / b) for b in labelled]
    halo = dict(facecolor=style.ROLES["background"], edgecolor="none", alpha=0.85, pad=0.6)
    for b, at_b, y in zip(labelled, crossings, style.spread_labels(crossings, 0.2, upper=0.98)):
        ax.plot([0.1], [at_b], "o", ms=4, color=colors[b], zorder=3)
        ax.annotate(f"b = {b}", (0.1, at_b), xytext=(0.17, y), textcoords="data", fontsize=_SMALL, va="center",
                    color=style.text_color(colors[b]), bbox=halo,
                    arrowprops=dict(arrowstyle="-", color=colors[b], lw=0.8, shrinkA=0, shrinkB=2))
    ax.axvline(0.1, color=style.ROLES["bound"], lw=1, ls=":")
    at = 0.1 / math.sqrt(0.01 + 1.0 / batches[-1])
    ax.set(xlim=(-1, 1), ylim=(-1.1, 1.15), xlabel="true gradient of one entry, μ / σ (σ: one sample's noise)",
           ylabel="μ / √(μ² + σ²/b)", xticks=[-1, -0.5, 0, 0.5, 1], yticks=[-1, 0, 1],
           title=f"Adam's expected direction sharpens into the sign (at μ = 0.1σ: {at:.2f} at b = {batches[-1]})")
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- section figures
def distance_figure(batches, distance: dict, predicted) -> Figure:
    """7.3: distance of Adam's direction from sgn(μ) against the batch size, one curve per
    learning rate, and the η → 0 prediction."""
    fig = Figure(figsize=(style.FIG_WIDTH, 3.8))
    ax = fig.add_subplot()
    lrs = list(distance)
    for lr, color in zip(lrs, style.sequence(len(lrs))[::-1]):      # darker: larger learning rate
        ax.plot(batches, distance[lr], **style.line("Adam", label=None, color=color))
        style.label_end(ax, batches, distance[lr], f"lr = {lr:.0e}", color=color, dx=9)
    ax.plot(batches, predicted, color=style.ROLES["bound"], lw=3, alpha=0.6, zorder=0)
    ax.annotate("prediction for lr → 0", (batches[2], predicted[2]), xytext=(-10, -16), textcoords="offset points",
                ha="right", color=style.ROLES["bound"], fontsize=_SMALL)
    ax.set(xscale="log", yscale="log", xlabel="batch size b", ylabel="‖d − sgn(μ)‖ / ‖sgn(μ)‖",
           xlim=(0.7, batches[-1] * 40), title="Adam's direction approaches sign descent on the true gradient")
    log_ticks(ax.xaxis, [0, 2, 4, 6])
    fig.tight_layout()
    return fig


def balles_hennig_figure(bh_runs: dict) -> Figure:
    """7.4: sgn(μ)·(Adam's direction) against |μ|/s for every entry and batch size, time
    averages and single steps, with the Balles–Hennig curve."""
    fig = Figure(figsize=(style.FIG_WIDTH, 3.8))
    ax = fig.add_subplot()
    ratio = torch.logspace(-3, 2, 200, dtype=F64)
    ax.plot(ratio, 1 / torch.sqrt(1 + 1 / ratio**2), color=style.ROLES["bound"], lw=1.5,
            label="1/√(1 + s²/μ²) (Balles–Hennig)")
    for (b, run), color in zip(bh_runs.items(), style.sequence(len(bh_runs))):
        mu, s2 = run.true_gradients[0, 0], run.variances[0, 0] / b
        snr, sgn = (mu.abs() / s2.sqrt()).flatten(), torch.sign(mu).flatten()
        ax.scatter(snr, sgn * run.directions[-1, 0].flatten(), s=5, color=color, alpha=0.25)
        ax.scatter(snr, sgn * run.directions[:, 0].mean(0).flatten(), s=9, color=color, label=f"b = {b}")
    ax.set(xscale="log", xlim=(1e-3, 1e2), ylim=(-0.6, 1.15), xlabel="signal-to-noise ratio |μ| / s",
           ylabel="sgn(μ) · Adam's direction",
           title="Adam's direction is the sign, damped by the noise (dots: averaged over steps; faint: one step)")
    log_ticks(ax.xaxis, [-3, -2, -1, 0, 1, 2])
    ax.legend(loc="upper left")
    fig.tight_layout()
    return fig


def noise_figure(powers, norms: dict, n: int, m: int) -> Figure:
    """7.5: the one-batch update norms of SGD, Iso and Adam's first step on pure noise
    against the batch size, with √(nm/b)."""
    fig = Figure(figsize=(style.FIG_WIDTH, 3.8))
    ax = fig.add_subplot()
    looks = {"SGD": "SGD", "Iso": "Iso", "Adam first step": "Adam"}
    ax.plot(powers, [math.sqrt(n * m / b) for b in powers], color=style.ROLES["muted"], lw=6, zorder=0)
    at = powers[len(powers) // 3]
    ax.annotate("√(nm/b)", (at, math.sqrt(n * m / at)), xytext=(10, 12), textcoords="offset points",
                color=style.ROLES["bound"], fontsize=_SMALL)
    for name, v in norms.items():
        y = v.mean(0)
        ax.plot(powers, y, **style.line(looks[name], label=name))
        style.label_end(ax, powers, y, name, optimizer=looks[name], dx=8, dy={"SGD": 8, "Iso": -8}.get(name, 0))
    ax.axvline(min(n, m), color=style.ROLES["muted"], lw=1, ls=":")
    ax.set(xscale="log", yscale="log", xlabel="batch size b", ylabel="‖update‖ (mean of 8 seeds)",
           xlim=(0.8, powers[-1] * 12),
           title=f"One batch, zero true gradient, n = m = {n}: Iso's formula grows like √b up to b = {min(n, m)}, then falls")
    ax.set_xscale("log", base=2)
    exponents = range(0, int(math.log2(powers[-1])) + 1, 2)
    ax.set_xticks([2**k for k in exponents], [f"2{str(k).translate(_SUP)}" if k else "1" for k in exponents])
    ax.xaxis.set_minor_locator(NullLocator())
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- explorable (7.8)
EX_BATCHES = NOISE_BATCHES                      # main slider: 13 decades
EX_BETA2S = [0.1, 0.999]                         # 0.9 looks like 0.999
EX_EPSILONS = [1e-8, 1e-4, 1e-2]                 # with 13 batches and 2 β2's: 78 frames (four ε's: 2.7 MB)
_TRACE = 150                                     # the left panel's first 150 steps: Adam settles within tens
_TRACE_STEPS = np.arange(1, _TRACE + 1)


def _stays_put(batch: int, beta2: float, eps: float) -> float:
    """Adam's stationary step at ``batch`` relative to its value at b = 100 (both well below
    ``b* = 1/ε²`` when this is asked), for the caption's "Adam's stays the same size"."""
    a = _stationary(("adam", beta2, eps))
    return float(a[NOISE_BATCHES.index(batch)] / a[NOISE_BATCHES.index(100)])


def _adam_flat(batch, beta2, eps):
    """Adam's step relative to b = 100 where 100 <= b <= b*/10⁴ (None elsewhere)."""
    if batch < 100 or batch > 1e-4 / eps**2:
        return None
    return _stays_put(batch, beta2, eps)


def _adam_falls(batch, beta2, eps):
    """Beyond ``100 b*``: Adam's stationary step over ``√((1−β1)/(1+β1))·√(nm/b)/ε``, the
    momentum's size divided by ε (None below): near 1 where Adam has become SGD with
    momentum and learning rate lr/ε, falling like 1/√b."""
    if batch < 100 / eps**2:
        return None
    law = math.sqrt(0.1 / 1.9) * math.sqrt(N * M / batch) / eps
    return float(_stationary(("adam", beta2, eps))[NOISE_BATCHES.index(batch)] / law)


def _scaled(key):
    def measure(batch, beta2, eps):
        return float(_stationary(key)[NOISE_BATCHES.index(batch)] * math.sqrt(batch / (N * M)))
    return measure


def _trace_level(name: str):
    """The median step of one run over its steps 100-150 at the chosen b, times √b: constant
    where the left panel's trace falls a decade for every two decades of b."""
    def measure(batch, beta2, eps):
        key = {"SGD": "sgd", "Iso": "iso"}.get(name, ("adam", beta2, eps))
        trace = noise_runs()[key][STATIONARY_FROM:_TRACE, 0, NOISE_BATCHES.index(batch)]
        return float(trace.median() * math.sqrt(batch))
    return measure


@functools.lru_cache(maxsize=None)
def _log_stationary(key) -> np.ndarray:
    return np.log10(_stationary(key))


@functools.lru_cache(maxsize=None)
def _log_trace(key, i: int) -> np.ndarray:
    return np.log10(noise_runs()[key][:_TRACE, 0, i].numpy())


_LOG_B = np.log10(np.asarray(NOISE_BATCHES, dtype=float))
#: The right panel labels its curves at b = 10¹⁰, or at b = 10⁶ when the chosen b is 10⁹ or
#: more (at 10¹⁰ the labels met the chosen b's line and markers: the reader test saw them
#: crowd there at b = 10¹²). Beyond b = 10⁴ every curve is a power law of b, so the labels
#: stack the same way at both places.
_LABEL_AT, _LABEL_AT_HIGH_B = 10, 6
#: Up to 200: the steps at b = 1 (near 10) keep clear of the top edge.
_LOG_YLIM = (-7.0, math.log10(200))
#: The right panel reaches half a decade beyond b = 1 and b = 10¹², so that the chosen b's
#: markers and line are drawn whole there (the reader test saw them cut by the axes' edges).
_LOG_B_LIM = (-0.6, 12.6)


def _log_labels(ax, axis: str, exponents) -> None:
    """Ticks at the given powers of ten on an axis that plots log10 values (a linear axis
    is cheaper to set up than a log axis on every redraw)."""
    from isolab.book.plotting import power_of_ten

    getattr(ax, f"set_{axis}ticks")(list(exponents), [power_of_ten(e) for e in exponents])


def _keys(beta2, eps):
    return (("SGD", "sgd"), ("Iso", "iso"), ("Adam", ("adam", beta2, eps)))


def _draw_batch_noise(fig, batch, beta2, eps):
    # log10 of the data on linear axes: the same picture as log axes, set up faster
    ax_t, ax_b = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 1.2]})
    i = NOISE_BATCHES.index(batch)
    # left: the steps of one run at the chosen b, each labelled at its end
    trace = dict(markers=False, linestyle="-", lw=1.5, antialiased=False)   # fewer colours: smaller frames
    ends = {}
    for name, key in _keys(beta2, eps):
        y = _log_trace(key, i)
        ax_t.plot(_TRACE_STEPS, y, **style.line(name, **trace))
        ends[name] = float(np.median(y[-30:]))
    # a decade and more apart: at b = 1 the three traces lie within a decade and the reader
    # test saw their labels run into each other
    for name, y in zip(ends, style.spread_labels(list(ends.values()), 1.1, upper=_LOG_YLIM[1] - 0.3)):
        ax_t.text(_TRACE + 3, y, name, color=style.text_color(style.color(name)), fontsize=_SMALL, va="center")
    ax_t.set(ylim=_LOG_YLIM, xlim=(0, _TRACE), xlabel="step", ylabel="‖step‖ / lr", xticks=[0, 150])
    _log_labels(ax_t, "y", [-6, -3, 0])
    ax_t.set_title(f"the steps of one run\nat b = {batch:.0e}", fontsize=style.FONT_SIZE)
    # right: the mean step of steps 100-299 against b, every b, the chosen one marked
    ax_b.axvline(_LOG_B[i], color=style.ROLES["highlight"], lw=2, zorder=0)
    ends = {}
    for name, key in _keys(beta2, eps):
        y = _log_stationary(key)
        ax_b.plot(_LOG_B, y, **style.line(name, markers=False))
        ax_b.plot([_LOG_B[i]], [y[i]], marker=style.look(name).marker, color=style.color(name), ms=7, zorder=4)
    at = _LABEL_AT if i < 9 else _LABEL_AT_HIGH_B
    for name, key in _keys(beta2, eps):
        ends[name] = float(_log_stationary(key)[at])
    halo = dict(facecolor=style.ROLES["background"], edgecolor="none", pad=0.5)
    for name, y in zip(ends, style.spread_labels(list(ends.values()), 1.3)):   # labels over the curves' tail
        ax_b.text(_LOG_B[at] + 0.3, y + 0.5, name, color=style.text_color(style.color(name)),
                  fontsize=_SMALL, va="center", bbox=halo)
    log_b_star = -2 * math.log10(eps)
    if log_b_star <= _LOG_B[-1]:
        ax_b.axvline(log_b_star, color=style.color("Adam"), ls=":", lw=1.5)
        ax_b.text(log_b_star + 0.2, -6.6, "b* = 1/ε²", color=style.text_color(style.color("Adam")), fontsize=_SMALL)
    else:
        ax_b.text(0.5, -6.6, f"b* = 1/ε² = {eps**-2:.0e}: off the chart", color=style.text_color(style.color("Adam")),
                  fontsize=_SMALL)
    ax_b.set(xlim=_LOG_B_LIM, ylim=_LOG_YLIM, xlabel="batch size b")
    _log_labels(ax_b, "x", [0, 6, 12])
    _log_labels(ax_b, "y", [-6, -3, 0])
    ax_b.set(ylabel="mean ‖step‖ / lr")
    ax_b.set_title(f"mean of steps 100–299, every b\nAdam's ε = {eps:.0e}, β2 = {beta2}", fontsize=style.FONT_SIZE)


CAPTION = ("Zero true gradient: the inputs and the output gradients are independent noise (n = m = 8), fed in "
           "the same batches to SGD, to the Iso optimizer (its step whitened on both sides, with averaged "
           "covariances and momentum 0.95) and to Adam (β1 = 0.9, β2 and ε of the sliders); ‖step‖/lr is the "
           "Frobenius norm of a step per unit learning rate. Left: the steps of one run at the chosen batch size b; "
           "right: the mean step of steps 100 to 299 (3 seeds) at every b, the chosen b marked. Each optimizer's "
           "step comes in its own units, so compare slopes, not heights. Move the batch size b (the main slider) "
           "and watch the SGD steps shrink like 1/√b, and Iso's with them, while Adam's stay the same size from "
           "b = 100 until b nears b* = 1/ε² (raise ε to bring b* into view), and fall like 1/√b beyond it.")


def batch_noise_explorable() -> Explorable:
    """7.8: one run's steps at the chosen b (left) and the stationary step norms of SGD, Iso
    and Adam against b (right); sliders b (13 decades, main), Adam's β2 and ε."""
    noise_runs()
    near_one = lambda v: 0.85 <= v <= 1.15  # noqa: E731
    return Explorable(
        _draw_batch_noise,
        [Slider("batch", EX_BATCHES, label="batch b", default=10**3, fmt="{:.0e}"),
         Slider("beta2", EX_BETA2S, label="β2", default=0.999),
         Slider("eps", EX_EPSILONS, label="ε", default=1e-8, fmt="{:.0e}")],
        main="batch",
        static_colors=8,    # three optimizers and text: the frames stay under 2 MB
        figsize=(style.FIG_WIDTH, 3.1),
        narrow="panels",    # on a phone the two panels stack
        alt="On pure noise SGD's and Iso's steps shrink like one over the square root of the batch size; Adam's "
            "keep their size until the batch nears one over epsilon squared.",
        caption=CAPTION,
        promises=[
            Promise("watch the SGD steps shrink like 1/√b", _scaled("sgd"), constant(rtol=0.1)),
            Promise("and Iso's with them", _scaled("iso"), constant(rtol=0.15)),
            Promise("while Adam's stay the same size from b = 100 until b nears b* = 1/ε²", _adam_flat,
                    always(lambda v: v is None or near_one(v), "within 15% of its size at b = 100")),
            Promise("fall like 1/√b beyond it", _adam_falls,
                    always(lambda v: v is None or near_one(v), "within 15% of the momentum's size over ε")),
        ],
    )


EXPLORABLES = (batch_noise_explorable,)
