r"""Chapter 3's training comparison (§3.6) and trained activations (§3.7): a small MLP
trained by SGD on raw, standardized (BatchNorm) and whitened inputs, each with its own
learning rate from one grid (:func:`train_inputs`, :func:`training_checks`,
:func:`training`), and how diagonal a trained network's hidden layer is
(:func:`activation_stats`, :func:`activations`). Re-exported by
:mod:`isolab.book.figures.ch03`."""

from __future__ import annotations

import math
from typing import Mapping, NamedTuple, Sequence

import numpy as np
import torch
from matplotlib.figure import Figure

from isolab.book import features, isotropy, normalization
from isolab.book.checks import Check
from isolab.book.figures import style
from isolab.book.figures.ch03_style import BOUND, PAPER, SHORT_LABELS, method_color, method_line
from isolab.book.plotting import log_ticks
from isolab.book.seeding import generator
from isolab.linalg import whiten

SMALL = style.FONT_SIZE - 1
VARIANT_METHOD = {"raw": "none", "batch": "batch", "zca": "zca"}
VARIANT_LABELS = {"raw": "raw inputs", "batch": "BatchNorm (standardized)", "zca": "whitened (ZCA)"}


# ----------------------------------------------------------------------------- §3.6
#: One learning-rate grid for every input variant: 7 values, a factor 2 apart.
LR_GRID = tuple(0.01 * 2.0 ** k for k in range(7))
VARIANTS = ("raw", "batch", "zca")


class TrainingRun(NamedTuple):
    """Loss curves of :func:`train_inputs`: ``loss[variant]`` has shape
    ``(len(lrs), len(seeds), len(steps))``; non-finite entries mark diverged runs."""

    degrees: float
    kappa: float
    steps: np.ndarray
    loss: dict
    lrs: tuple
    seeds: tuple


def _prepare(X: torch.Tensor, variant: str) -> torch.Tensor:
    """The inputs a variant trains on, from training-set statistics: ``raw``; ``batch``,
    each feature standardized (what BatchNorm computes, here over the whole training set);
    ``zca``, centered and ZCA-whitened."""
    if variant == "raw":
        return X
    if variant == "batch":
        return normalization.batch_norm(X)
    if variant == "zca":
        return whiten(X, center=True, kind="zca")
    raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")


def train_inputs(degrees: float = 45.0, *, kappa: float = 100.0, d: int = 16, hidden: int = 32, n: int = 512,
                 steps: int = 300, batch: int = 32, lrs: Sequence[float] = LR_GRID, seeds: Sequence[int] = range(5),
                 noise: float = 0.1, teacher_scale: float = 0.5, variants: Sequence[str] = VARIANTS) -> TrainingRun:
    r"""Train the MLP ``ŷ = tanh(x W₁) W₂`` (``d → hidden → 1``, float64) by minibatch SGD
    on the squared error, once per input variant, learning rate and seed, batched over
    learning rates and seeds.

    Per seed: ``n`` inputs ``x = z Λ^{1/2} R(θ)ᵀ`` with ``z ~ N(0, I_d)`` (the construction
    of :func:`isolab.book.features.gaussian_features`, condition number ``kappa``, rotation
    ``degrees``), targets from a random tanh teacher of the *latent* ``z`` plus ``noise``
    (relative), standardized to unit variance, so every direction of ``z`` matters; the
    student's ``W₁ ~ N(0, 1/d)``, ``W₂ = 0``; and one sequence of minibatches. Seeds,
    data, initial weights and minibatches are the same for every variant and learning
    rate: only the inputs' preprocessing and the learning rate differ. The loss on the
    whole training set is recorded every 2 steps up to step 50 and every 10 steps after
    (it starts at 1: ``W₂ = 0`` predicts 0, and the target has unit variance)."""
    seeds = tuple(seeds)
    lam = features.spectrum(d, kappa)
    R = features.pair_rotation(d, math.radians(degrees))
    data, targets, init, order = [], [], [], []
    for seed in seeds:
        gen = generator(1000 + seed)
        z = torch.randn(n, d, generator=gen, dtype=torch.float64)
        t1 = torch.randn(d, hidden, generator=gen, dtype=torch.float64) * (teacher_scale / math.sqrt(d))
        t2 = torch.randn(hidden, 1, generator=gen, dtype=torch.float64) / math.sqrt(hidden)
        y = torch.tanh(z @ t1) @ t2
        y = y + noise * y.std() * torch.randn(n, 1, generator=gen, dtype=torch.float64)
        targets.append((y - y.mean()) / y.std())
        data.append((z * lam.sqrt()) @ R.T)
        init.append(torch.randn(d, hidden, generator=gen, dtype=torch.float64) / math.sqrt(d))
        order.append(torch.randint(n, (steps, batch), generator=gen))
    Y, W1_init, order = torch.stack(targets), torch.stack(init), torch.stack(order)    # (S,n,1) (S,d,h) (S,T,B)
    lr = torch.tensor(list(lrs), dtype=torch.float64)[:, None, None, None]
    seed_index = torch.arange(len(seeds))[:, None]
    record = set(range(0, min(50, steps), 2)) | set(range(50, steps, 10)) | {steps}
    losses = {}
    for variant in variants:
        X = torch.stack([_prepare(x, variant) for x in data])                      # (S,n,d)
        W1 = W1_init.expand(len(lrs), -1, -1, -1).clone()
        W2 = torch.zeros(len(lrs), len(seeds), hidden, 1, dtype=torch.float64)
        curve = []
        for t in range(steps + 1):
            if t in record:
                curve.append((torch.tanh(X @ W1) @ W2 - Y).square().mean((-2, -1)))
            if t == steps:
                break
            xb, yb = X[seed_index, order[:, t]], Y[seed_index, order[:, t]]      # (S,B,d), (S,B,1)
            h = torch.tanh(xb @ W1)                                                # (L,S,B,h)
            r = (h @ W2 - yb) * (2.0 / batch)
            grad_W2 = h.mT @ r
            grad_W1 = xb.mT @ ((r @ W2.mT) * (1 - h * h))
            W1 = (W1 - lr * grad_W1).nan_to_num(nan=1e6).clamp(-1e6, 1e6)         # a diverged run stays finite
            W2 = (W2 - lr * grad_W2).nan_to_num(nan=1e6).clamp(-1e6, 1e6)
        loss = torch.stack(curve, -1)
        losses[variant] = torch.where(loss < 1e3, loss, torch.inf)               # diverged: inf
    return TrainingRun(float(degrees), float(kappa), np.array(sorted(record)), losses, tuple(lrs), seeds)


def lr_scores(run: TrainingRun) -> dict[str, torch.Tensor]:
    """Per variant and learning rate: the median over seeds of the mean loss over the run
    (the area under the loss curve, which rewards reaching a low loss early)."""
    return {v: loss.mean(-1).median(-1).values for v, loss in run.loss.items()}


def best_lr(run: TrainingRun) -> dict[str, int]:
    """Index into ``run.lrs`` of each variant's best learning rate (see :func:`lr_scores`)."""
    return {v: int(score.argmin()) for v, score in lr_scores(run).items()}


def steps_to(run: TrainingRun, threshold: float) -> dict[str, np.ndarray]:
    """Per variant, at its best learning rate: the first recorded step at which each
    seed's loss is at most ``threshold`` (``inf`` if never)."""
    out = {}
    for v, i in best_lr(run).items():
        below = (run.loss[v][i] <= threshold).numpy()
        out[v] = np.where(below.any(-1), run.steps[below.argmax(-1)], np.inf)
    return out


def lr_table(runs: Sequence[TrainingRun]) -> str:
    """Each variant's score (the median over seeds of the mean loss over the run) along the
    learning-rate grid, per run, the chosen rate starred; ``inf``: diverged."""
    lrs = runs[0].lrs
    lines = ["mean loss over the run (median of the seeds); * chosen, inf diverged",
             f"{'':24s}" + "".join(f"{lr:>8g}" for lr in lrs)]
    for run in runs:
        scores, best = lr_scores(run), best_lr(run)
        for v, score in scores.items():
            cells = [("inf" if not math.isfinite(x) else f"{x:.3f}") + ("*" if i == best[v] else " ")
                     for i, x in enumerate(score.tolist())]
            lines.append(f"{run.degrees:>3.0f}°, {v:<18s}" + "".join(f"{c:>8s}" for c in cells))
    return "\n".join(lines)


def training_checks(runs: Sequence[TrainingRun], threshold: float = 0.1) -> list[Check]:
    """What §3.6 claims about ``runs = [rotated (45°), diagonal (0°)]``: each chosen
    learning rate lies strictly inside the grid and every variant diverges at the grid's
    top rate; with Σ rotated, whitened inputs reach ``threshold`` in fewer steps than raw
    and than standardized inputs at every seed, while standardizing barely helps; with Σ
    diagonal, standardizing is as fast as whitening (within 2 recorded steps) and both beat
    raw inputs; and the gap narrows with time (the ratio of the final median losses is below
    the ratio at step 50). Step counts are exact integers of a float64 run, so the printed
    values are the same on any CPU."""
    rotated, diagonal = runs
    checks = []
    for run in runs:
        best = best_lr(run)
        top = sum(int((~torch.isfinite(run.loss[v][-1][:, -1])).sum()) for v in run.loss)
        every = len(run.loss) * len(run.seeds)
        checks.append(Check(rf"$\Sigma$ at {run.degrees:.0f}°: each chosen learning rate lies inside the grid",
                            ", ".join(f"{v} {run.lrs[i]:g}" for v, i in best.items()),
                            f"not {run.lrs[0]:g} or {run.lrs[-1]:g}", all(0 < i < len(run.lrs) - 1 for i in best.values())))
        checks.append(Check(rf"$\Sigma$ at {run.degrees:.0f}°: all three diverge at {run.lrs[-1]:g}",
                            f"{top} of {every} runs", f"{every} of {every}", top == every))
    rot, flat = steps_to(rotated, threshold), steps_to(diagonal, threshold)
    listed = lambda r: " ".join(f"{s:.0f}" for s in r)  # noqa: E731
    ratio = float(np.median(rot["batch"]) / np.median(rot["raw"]))
    at50 = list(rotated.steps).index(50)
    best = best_lr(rotated)
    final = [rotated.loss[v][i][:, -1].median().item() for v, i in best.items()]
    early = [rotated.loss[v][i][:, at50].median().item() for v, i in best.items()]
    closed, before = max(final) / min(final), max(early) / min(early)
    checks += [
        Check(rf"45°: whitened reaches loss {threshold:g} in fewer steps than raw, at every seed",
              f"{listed(rot['zca'])} vs {listed(rot['raw'])}", "fewer at each seed", bool((rot["zca"] < rot["raw"]).all())),
        Check(r"45°: and than BatchNorm, at every seed", f"BatchNorm {listed(rot['batch'])}", "more than whitened",
              bool((rot["zca"] < rot["batch"]).all())),
        Check(r"45°: BatchNorm barely helps (median steps, BatchNorm vs raw)",
              f"{np.median(rot['batch']):.0f} vs {np.median(rot['raw']):.0f}", "within a factor 1.5", 1 / 1.5 < ratio < 1.5),
        Check(r"0°: BatchNorm as fast as whitened (within 2 steps, every seed)",
              f"{listed(flat['batch'])} vs {listed(flat['zca'])}", "|difference| ≤ 2",
              bool((np.abs(flat["batch"] - flat["zca"]) <= 2).all())),
        Check(r"0°: and both beat raw at every seed", f"raw {listed(flat['raw'])}", "more steps",
              bool((flat["raw"] > np.maximum(flat["batch"], flat["zca"])).all())),
        Check(rf"45°: the gap narrows, largest over smallest median loss, step 50 then {rotated.steps[-1]}",
              f"{before:.1f} then {closed:.1f}", "smaller at the end", closed < before),
    ]
    return checks


def training(runs: Sequence[TrainingRun], threshold: float) -> Figure:
    """One panel per run: the loss against steps (log axes) for each input variant at its
    best learning rate (in its label), median over seeds with a min–max band, and the
    median number of steps to reach ``threshold``."""
    fig = Figure(figsize=(style.FIG_WIDTH, 3.8))
    axes = fig.subplots(1, len(runs), sharey=True)
    fig.subplots_adjust(left=0.08, right=0.98, top=0.9, bottom=0.14, wspace=0.08)
    for ax, run in zip(axes, runs):
        best, reach = best_lr(run), steps_to(run, threshold)
        steps = np.maximum(run.steps, 1)
        for k, v in enumerate(run.loss):
            loss, color = run.loss[v][best[v]], method_color(VARIANT_METHOD[v])
            ax.fill_between(steps, loss.amin(0).numpy(), loss.amax(0).numpy(), color=color, alpha=0.18, lw=0)
            ax.plot(steps, loss.median(0).values.numpy(), **method_line(VARIANT_METHOD[v], markers=False))
            median = np.median(reach[v])
            reached = f"{median:.0f} steps" if np.isfinite(median) else "never"
            ax.text(0.03, 0.04 + 0.1 * k, f"{VARIANT_LABELS[v].split(' (')[0]}, lr {run.lrs[best[v]]:g}: {reached} to {threshold:g}",
                    transform=ax.transAxes, ha="left", va="bottom", color=style.text_color(color))
        ax.axhline(threshold, color=BOUND, lw=1, ls=":")
        ax.text(run.steps[-1], threshold * 1.07, f"loss {threshold:g}", color=BOUND, va="bottom", ha="right")
        ax.set_xscale("log")
        ax.set_yscale("log")
        log_ticks(ax.xaxis, [0, 1, 2])
        log_ticks(ax.yaxis, [-2, -1, 0])
        ax.set(xlabel="SGD step", xlim=(1, run.steps[-1]), ylim=(0.01, 1.5))
        where = "rotated by 45°" if run.degrees else "diagonal (0°)"
        ax.set_title(f"Σ {where}, κ = {run.kappa:g}", fontsize=style.FONT_SIZE)
    axes[0].set_ylabel("training loss (1 = predict 0)")
    return fig


# ----------------------------------------------------------------------------- §3.7
class ActivationStats(NamedTuple):
    """How isotropic and how diagonal one layer's activations ``H`` (``b × d``) are."""

    isotropy: dict      # method -> centered covariance-side isotropy after that normalization
    offdiagonal: float  # off-diagonal share of ‖R‖²_F, R the correlation matrix (= BatchNorm's output covariance)
    batchnorm_share: float  # (BatchNorm - none) / (ZCA - none): how much of whitening's gain BatchNorm gets
    top_share: float    # share of the centered variance in the top (classes - 1) principal directions
    dead: int           # units that are zero on every input
    correlation: torch.Tensor  # R over the live units


def correlation(H: torch.Tensor) -> torch.Tensor:
    """The correlation matrix of the columns of ``H`` that vary (live units)."""
    Hc = H - H.mean(0)
    C = Hc.T @ Hc / H.shape[0]
    live = C.diagonal() > 1e-12 * C.diagonal().max()
    C = C[live][:, live]
    s = C.diagonal().rsqrt()
    return s[:, None] * C * s[None, :]


def offdiagonal_share(R: torch.Tensor) -> float:
    """``‖R − diag R‖²_F / ‖R‖²_F``: 0 for a diagonal matrix."""
    return ((R - torch.diag(R.diagonal())).square().sum() / R.square().sum()).item()


def centered_isotropy(Z: torch.Tensor) -> float:
    """The covariance-side isotropy of ``Z`` about its mean: how evenly ``Cov(Z)`` spreads
    over the directions, the question of correlations (a common mean, such as that of
    ReLU outputs, is a rank-one term of ``ZᵀZ`` that says nothing about them)."""
    return isotropy.feature_isotropy(Z - Z.mean(0), "covariance").item()


def _normalized(H: torch.Tensor, method: str) -> torch.Tensor:
    """``H`` after ``method``; ZCA centers first, as BatchNorm and LayerNorm do, so that its
    output covariance is the identity."""
    return whiten(H, center=True) if method == "zca" else normalization.normalize(H, method)


def activation_stats(H: torch.Tensor, classes: int) -> ActivationStats:
    """See :class:`ActivationStats`; every isotropy is the centered one
    (:func:`centered_isotropy`), so that it measures the correlations between units."""
    iso = {m: centered_isotropy(_normalized(H, m)) for m in ("none", "batch", "layer", "rms", "zca")}
    R = correlation(H)
    Hc = H - H.mean(0)
    eig = torch.linalg.eigvalsh(Hc.T @ Hc).flip(0)
    return ActivationStats(iso, offdiagonal_share(R), (iso["batch"] - iso["none"]) / (iso["zca"] - iso["none"]),
                           (eig[:classes - 1].sum() / eig.sum()).item(), int((H.abs().sum(0) == 0).sum()), R)


def activations(stats: Mapping[str, ActivationStats], heatmaps: Sequence[str], reference: float) -> Figure:
    """Left: ``|R|`` (correlations between units) for the layers named in ``heatmaps``.
    Right: covariance-side isotropy after each normalization, for every layer in
    ``stats``, with BatchNorm's share of whitening's gain written above its bar.
    ``reference`` is the off-diagonal share of an isotropic Gaussian batch of the same shape."""
    fig = Figure(figsize=(style.FIG_WIDTH, 4.6))
    n = len(heatmaps)
    left = fig.add_gridspec(1, n, left=0.01, right=0.42, top=0.84, bottom=0.2, wspace=0.1)
    maps = [fig.add_subplot(left[0, k]) for k in range(n)]
    image = None
    for ax, name in zip(maps, heatmaps):
        image = ax.imshow(stats[name].correlation.abs().numpy(), cmap="cividis", vmin=0, vmax=1, interpolation="nearest")
        ax.set(xticks=[], yticks=[])
        ax.set_title(f"{name.split(', ')[-1]}: off-diag.\nshare {stats[name].offdiagonal:.2f}", loc="center",
                     fontsize=style.FONT_SIZE)
    bar = fig.colorbar(image, ax=maps, orientation="horizontal", fraction=0.07, pad=0.05, aspect=25)
    bar.set_label(f"|correlation| of two units\n(isotropic batch: share {reference:.2f})", fontsize=style.FONT_SIZE)
    fig.text(0.01, 0.95, "middle layer's units", fontsize=style.FONT_SIZE + 1)
    ax = fig.add_subplot(fig.add_gridspec(1, 1, left=0.53, right=0.99, top=0.8, bottom=0.2)[0, 0])
    methods = ("none", "batch", "layer", "rms", "zca")
    names = list(stats)
    width = 0.8 / len(methods)
    for j, m in enumerate(methods):
        x = np.arange(len(names)) + (j - (len(methods) - 1) / 2) * width
        values = [stats[name].isotropy[m] for name in names]
        ax.bar(x, values, width=width, color=method_color(m), label=SHORT_LABELS[m])
        if m == "batch":
            for xi, v, name in zip(x, values, names):
                ax.text(xi, v + 0.03, f"{stats[name].batchnorm_share:.0%}", ha="center", va="bottom",
                        color=style.text_color(method_color(m)))
    ax.set_xticks(range(len(names)), [name.replace(", ", "\n") for name in names])
    ax.set(ylim=(0, 1.05), ylabel="isotropy of Cov(Z), centered")
    ax.legend(loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=5, handlelength=0.9, columnspacing=0.6,
              handletextpad=0.3, borderaxespad=0.2, fontsize=style.FONT_SIZE - 1)
    return fig
