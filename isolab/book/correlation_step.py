r"""Chapter 14's small computation: how the canonical correlations size Iso's step.

One linear layer learns a teacher, ``y = W_*^\top x + \sigma\,\varepsilon``, from ``b`` fresh
rows a step (inputs :math:`x \sim \mathcal N(0, \Sigma)`, :math:`\kappa(\Sigma) = 100`,
16 inputs and 16 outputs, squared loss), for :data:`STEPS` steps under the benchmark's
schedule (warm-up over 10 %, cosine to 10 %). The output gradient of a row is its residual
:math:`g = W^\top x - y`; its part that depends on :math:`x` is the signal, :math:`\sigma`
the noise-to-signal ratio at the start (the teacher's outputs have unit variance). Four
rules take the same momentum (Nesterov, :math:`\mu = 0.95`, as :class:`isolab.optim.Iso`
and Muon) and step along

- Muon: the exact polar factor of the momentum, norm :math:`\sqrt{\min(n, m)} = 4`;
- Iso: the momentum whitened on both sides with averaged covariances (``β = 0.95``,
  bias-corrected, fresh roots every step, relative damping ``1e-3``), exactly the library's
  :class:`~isolab.optim.Iso` with those settings; its first step is
  :math:`(1-\mu^2)` times Iso's batch step, whose norm is :math:`\sqrt{\sum_i\rho_i^2}`;
- Iso at Muon's norm (the whitened matrix rescaled to norm 4) and Iso's polar factor (the
  polar factor of the whitened matrix): the benchmark's ``iso_norm`` and ``iso_polar``.

:func:`outcome` runs every rule at every learning rate of :data:`LRS` at once (float64,
batched) and returns the excess loss after the run (the expected loss above the noise
floor, relative to the start), the step norms along the run, the canonical correlations
of the first batch and those of pure noise (the same inputs, an independent Gaussian
``G``): the floor under which the sample correlations cannot fall.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import NamedTuple

import numpy as np
import torch

from isolab import linalg
from .lm_mechanism import canonical_correlations
from .lm_protocol import lr_factor
from .seeding import generator

__all__ = ["N_IN", "N_OUT", "STEPS", "MU", "BETA", "DAMPING", "RULES", "LRS", "SIGMAS", "ROWS", "MUON_NORM",
           "Outcome", "problem", "outcome", "valley", "library_iso_gap"]

N_IN = N_OUT = 16
STEPS = 100
MU, BETA, DAMPING = 0.95, 0.95, 1e-3
KAPPA = 100.0
#: the four rules, in the order of the arrays
RULES = ("muon", "iso", "iso_norm", "iso_polar")
#: learning rates swept for every rule: 10^-3 to 10, a quarter decade apart
LRS = tuple(float(10 ** (k / 4)) for k in range(-12, 5))
#: the noise-to-signal ratios of the explorable (its main slider), 10^-1.5 to 10^1.5
SIGMAS = tuple(round(float(10 ** (k / 10)), 4) for k in range(-15, 16, 3))
#: rows per step of the explorable's second slider
ROWS = (64, 256, 1024)
MUON_NORM = math.sqrt(min(N_IN, N_OUT)) * math.sqrt(max(1.0, N_OUT / N_IN))


def problem(seed: int = 0):
    """``(Σ^{1/2}, Σ, W_*, generator)``: the layer's input covariance (eigenvalues spaced
    geometrically from 1 to 1/κ, mean 1, a random rotation) and teacher (entries
    ``N(0, 1/n)``), and the generator that then draws the batches."""
    g = generator(seed)
    ev = torch.logspace(0, -math.log10(KAPPA), N_IN, dtype=torch.float64)
    ev = ev / ev.mean()
    Q, _ = torch.linalg.qr(torch.randn(N_IN, N_IN, generator=g, dtype=torch.float64))
    return (Q * ev.sqrt()) @ Q.T, (Q * ev) @ Q.T, torch.randn(N_IN, N_OUT, generator=g, dtype=torch.float64) / math.sqrt(N_IN), g


def _inv_sqrt(C: torch.Tensor) -> torch.Tensor:
    n = C.shape[-1]
    shift = DAMPING * C.diagonal(dim1=-2, dim2=-1).mean(-1)[..., None, None]
    e, V = torch.linalg.eigh(C + shift * torch.eye(n, dtype=C.dtype))
    return (V * e.clamp_min(1e-300).rsqrt()[..., None, :]) @ V.mT


class Outcome(NamedTuple):
    """One setting's run (``K`` rules × ``L`` learning rates)."""

    sigma: float
    rows: int
    rho: np.ndarray          # canonical correlations of the first batch, descending
    floor: np.ndarray        # those of the same inputs with an independent Gaussian G
    first_iso: float         # ‖ΔW‖/η of Iso's first step
    final: np.ndarray        # (K, L) excess loss after the run / at the start (inf: diverged)
    norms: np.ndarray        # (K, L, T) ‖ΔW‖/η along the run
    best: np.ndarray         # (K,) each rule's best learning rate (:func:`valley`)
    best_loss: np.ndarray    # (K,) the lowest excess loss of each rule on the grid


def valley(losses) -> float:
    """A rule's best learning rate: the vertex of the parabola through the log losses at
    the best grid point and its neighbours (in log learning rate), so that a sweep's valley
    moves smoothly rather than by grid steps."""
    y = np.log(np.where(np.isfinite(losses), losses, 1e300))
    x = np.log10(LRS)
    i = int(np.clip(np.argmin(y), 1, len(x) - 2))
    a, b, _ = np.polyfit(x[i - 1:i + 2], y[i - 1:i + 2], 2)
    v = -b / (2 * a) if a > 0 else x[int(np.argmin(y))]
    return float(10 ** np.clip(v, x[i - 1], x[i + 1]))


@lru_cache(maxsize=64)
def outcome(sigma: float, rows: int = 256, seed: int = 0) -> Outcome:
    """Train the four rules at every rate of :data:`LRS` (module docstring)."""
    S_half, S, W_star, g = problem(seed)
    K, L, lr = len(RULES), len(LRS), torch.tensor(LRS, dtype=torch.float64)[:, None, None]
    W = torch.zeros(K, L, N_IN, N_OUT, dtype=torch.float64)
    buf = torch.zeros_like(W)
    Cx = torch.zeros(N_IN, N_IN, dtype=torch.float64)
    Cg = torch.zeros(K, L, N_OUT, N_OUT, dtype=torch.float64)
    shape = math.sqrt(max(1.0, N_OUT / N_IN))

    def excess(W):
        d = W - W_star
        return 0.5 * (d * (S @ d)).sum((-2, -1)) / N_OUT

    start = excess(torch.zeros(N_IN, N_OUT, dtype=torch.float64))
    norms, rho = [], None
    with np.errstate(all="ignore"):
        for t in range(STEPS):
            X = torch.randn(rows, N_IN, generator=g, dtype=torch.float64) @ S_half
            Y = X @ W_star + sigma * torch.randn(rows, N_OUT, generator=g, dtype=torch.float64)
            G = X @ W - Y                                   # each row's output gradient
            if t == 0:
                rho = canonical_correlations(X, G[0, 0], DAMPING).numpy()
                noise = torch.randn(rows, N_OUT, generator=generator(seed + 1), dtype=torch.float64)
                floor = canonical_correlations(X, noise, DAMPING).numpy()
            grad = X.mT @ G / rows
            buf = MU * buf + (1 - MU) * grad
            u = (1 - MU) * grad + MU * buf                  # Nesterov, as the library
            Cx = BETA * Cx + (1 - BETA) * X.T @ X / rows
            Cg = BETA * Cg + (1 - BETA) * G.mT @ G / rows
            c = 1 - BETA ** (t + 1)
            white = _inv_sqrt(Cx / c) @ u @ _inv_sqrt(Cg / c)
            D = torch.stack([linalg.msign(u[0]) * shape, white[1],
                             white[2] * (MUON_NORM / torch.linalg.matrix_norm(white[2])[..., None, None]),
                             linalg.msign(white[3]) * shape])
            D = torch.nan_to_num(D, nan=0.0)
            norms.append(torch.linalg.matrix_norm(D))
            W = W - lr_factor(t, STEPS) * lr * D
            W = torch.where(torch.isfinite(W), W, torch.full_like(W, 1e150))
    final = (excess(W) / start).numpy()
    final = np.where(np.isfinite(final) & (final < 1e6), final, np.inf)
    norms = torch.stack(norms, dim=-1).numpy()
    best = np.array([valley(final[k]) for k in range(K)])
    return Outcome(float(sigma), int(rows), rho, floor, float(norms[1, 0, 0] / 1.0), final, norms, best,
                   final.min(axis=1))


def library_iso_gap(sigma: float = 1.0, rows: int = 256, steps: int = 5, lr: float = 0.5, seed: int = 0) -> float:
    """Largest gap between the weights of this module's Iso and of :class:`isolab.optim.Iso`
    (same settings, float64) after ``steps`` steps on the same batches, relative to the
    weights' size: the computation above is the library's optimizer written out."""
    from torch import nn

    from isolab.optim import Iso

    S_half, _, W_star, g = problem(seed)
    layer = nn.Linear(N_IN, N_OUT, bias=False, dtype=torch.float64)
    nn.init.zeros_(layer.weight)
    model = nn.Sequential(layer)
    opt = Iso(model, lr=lr, momentum=MU, nesterov=True, beta_cov=BETA, damping=DAMPING, root_interval=1,
              stat_rows=None, stats_dtype=torch.float64, shrinkage=False)
    W = torch.zeros(N_IN, N_OUT, dtype=torch.float64)
    buf = torch.zeros_like(W)
    Cx, Cg = torch.zeros(N_IN, N_IN, dtype=torch.float64), torch.zeros(N_OUT, N_OUT, dtype=torch.float64)
    for t in range(steps):
        X = torch.randn(rows, N_IN, generator=g, dtype=torch.float64) @ S_half
        Y = X @ W_star + sigma * torch.randn(rows, N_OUT, generator=g, dtype=torch.float64)
        opt.zero_grad()
        (0.5 * (model(X) - Y).square().sum() / rows).backward()
        opt.step()
        G = X @ W - Y
        grad = X.mT @ G / rows
        buf = MU * buf + (1 - MU) * grad
        u = (1 - MU) * grad + MU * buf
        Cx = BETA * Cx + (1 - BETA) * X.T @ X / rows
        Cg = BETA * Cg + (1 - BETA) * G.T @ G / rows
        c = 1 - BETA ** (t + 1)
        W = W - lr * _inv_sqrt(Cx / c) @ u @ _inv_sqrt(Cg / c)
    opt.remove_hooks()
    return float((layer.weight.detach().T - W).abs().max() / W.abs().max())


def first_step(arch: str, size: str = "small", seed: int = 10, damping: float = 1e-3) -> dict:
    """Iso's first step on a benchmark model against the formula: per hidden layer, the
    direction's norm ``‖ΔW‖/η`` of :class:`isolab.optim.Iso`'s first step (no momentum;
    the first step's statistics are the batch's) and ``√Σρᵢ²`` of the same batch's inputs
    and output gradients (float64, the same relative damping), with Muon's fixed norm
    ``√min(n, m)·√max(1, m/n)``. ``iso_step`` has the statistics in float64, ``iso_step_f32``
    in float32 as the benchmark ran them. The model is the held-out seed ``seed``'s initial one and the
    batch its first training batch (1,024 tokens at ``"small"``)."""
    from isolab.optim import LayerStatistics

    from . import lm_benchmark as B
    from . import lm_mechanism as M
    from .lm import sample_batch
    from .lm_protocol import data_seed, load_data

    cfg = B.SIZES[size]
    data = load_data(cfg["context"], tune_windows=32, test_windows=32)
    hyper = {"lr": 0.01, "side_lr": 1e-3, "damping": damping}
    rec, rec32 = (M.trace("iso", hyper, 1, seed, arch=arch, size=size, data=data,
                          overrides={"momentum": 0.0, "stats_dtype": dtype}) for dtype in (torch.float64, torch.float32))
    model = B.hf_model(arch, size, seed)
    layers = M.hidden_layers(model)
    with LayerStatistics({n: m for n, (m, _, _) in layers.items()}, keep=True, dtype=torch.float64) as stats:
        x, y = sample_batch(data.train, cfg["batch"], cfg["context"], generator(data_seed(seed)))
        B._loss(model, x, y).backward()
        root = [float(canonical_correlations(stats.inputs(n), stats.output_grads(n), damping).pow(2).sum().sqrt())
                for n in rec["layers"]]
    return {"layers": rec["layers"], "n_in": rec["n_in"], "n_out": rec["n_out"], "iso_step": rec["dir_norm"][0],
            "iso_step_f32": rec32["dir_norm"][0],
            "root_sum_rho2": root, "muon_norm": rec["muon_norm"], "rows": cfg["batch"] * cfg["context"]}
