r"""The first optimizer step on linear regression, measured exactly (Chapter 9).

The paper's first-step problem in the book's row convention: inputs ``x = Sigma z`` with
``z ~ N(0, I_n)`` and ``Sigma`` symmetric positive definite, targets ``y^T = x^T A``
(batch form ``X = Z Sigma``, ``T = X A = Z Sigma A``), one linear layer ``Y = X W`` started
at ``W = 0``, and the paper's loss ``L = (1/b) sum_i 1/2 ||y_i - t_i||^2``.  At ``W = 0``
the output gradient is ``G = Y - T = -T`` and the weight gradient is
``X^T G / b = -Sigma (Z^T Z / b) Sigma A``, which is ``-Sigma^2 A`` when ``Z^T Z = b I``.

Every optimizer's first step from ``W = 0`` is ``W_1 = lr * D`` with a direction ``D``
that does not depend on ``lr`` (SGD ``Sigma^2 A``, Adam ``sign(Sigma^2 A)``, Iso
``msign(Sigma A)``, ...).  The population loss

    ``L(W) = E_z 1/2 ||(W - A)^T Sigma z||^2 = 1/2 ||Sigma (W - A)||_F^2``

is a quadratic in ``lr`` along such a step, so the best single step has a closed form
(:func:`line_search`): with ``<U, V>_Sigma = tr(U^T Sigma^2 V)``,

    ``lr* = <D, A>_Sigma / <D, D>_Sigma``,
    ``L(lr* D) / L(0) = 1 - cos^2(Sigma D, Sigma A)``.

Functions
---------
- :func:`orthogonal_batch`: a batch ``Z`` with ``Z^T Z = b I`` exactly (the paper's
  large-batch approximation made exact).
- :func:`population_loss`, :func:`line_search`: the loss and the exactly tuned single step.
- :func:`tune_lr`: a generic log-grid search with refinement, for losses measured by running
  an optimizer.
- :func:`first_steps`: the first-step directions of SGD, Adam, Muon, Iso and IsoAdam,
  from :mod:`isolab.updates`.
- :func:`one_step_change`: one step of a ``torch.optim`` optimizer on ``nn.Linear`` at
  ``W = 0``; returns ``Delta W`` in the book's row convention.
- :func:`tuned_one_step`: the best single step of an engine optimizer
  (:func:`isolab.book.engine.sweep`) on an :class:`isolab.book.problems.OneStepRegression`, found by
  :func:`tune_lr` on the exact population loss.
- :func:`eigenbasis`, :func:`sigma_in_basis`, :class:`RegressionInBasis`: ``Sigma`` with the
  geometric spectrum of :func:`isolab.book.features.spectrum` in a chosen eigenbasis: the
  coordinate axes (``"diagonal"``), the pair rotation of :mod:`isolab.book.features` by 45
  degrees (``"pair"``, which mixes coordinate ``i`` only with ``n-1-i``), or a Haar-random
  orthogonal basis (``"haar"``, the generic case).
"""

from __future__ import annotations

import math
from typing import Callable, Optional, Sequence

import numpy as np
import torch
from torch import Tensor, nn

from isolab import linalg, updates
from . import features
from .problems import OneStepRegression
from .seeding import generator

__all__ = [
    "orthogonal_batch",
    "paper_loss",
    "population_loss",
    "line_search",
    "tune_lr",
    "first_steps",
    "one_step_change",
    "tuned_one_step",
    "BASES",
    "eigenbasis",
    "sigma_in_basis",
    "RegressionInBasis",
]

#: The optimizers :func:`first_steps` reports, in the book's order.
OPTIMIZERS = ("SGD", "Adam", "Muon", "Iso", "IsoAdam")


def _check_square_spd(sigma: Tensor) -> None:
    if sigma.ndim < 2 or sigma.shape[-1] != sigma.shape[-2]:
        raise ValueError(f"sigma must be a (batch of) square matrices, got shape {tuple(sigma.shape)}")


def orthogonal_batch(b: int, n: int, generator: Optional[torch.Generator] = None,
                     dtype: torch.dtype = torch.float64, sample_shape: Sequence[int] = ()) -> Tensor:
    r"""A ``(*sample_shape, b, n)`` batch ``Z`` with ``Z^T Z = b I_n`` exactly (needs ``b >= n``).

    ``Z = sqrt(b) Q`` with ``Q`` the orthonormal factor of a Gaussian ``(b, n)`` matrix
    (signs fixed by ``diag(R) > 0``, so ``Q`` is uniformly distributed, Haar).  Each row
    is then like a Gaussian sample in direction, but the sample second moment
    ``Z^T Z / b`` is exactly the identity: the paper's ``Z^T Z ≈ I`` (with the ``1/b``)
    holds with equality, so its first-step formulas become identities.  With ``b == n``,
    ``Z / sqrt(n)`` is a Haar-random orthogonal matrix.
    """
    if isinstance(b, bool) or not isinstance(b, int) or isinstance(n, bool) or not isinstance(n, int):
        raise ValueError(f"b and n must be ints, got {b!r}, {n!r}")
    if n < 1 or b < n:
        raise ValueError(f"need b >= n >= 1 for Z^T Z = b I (rank), got b={b}, n={n}")
    G = torch.randn(*sample_shape, b, n, generator=generator, dtype=dtype)
    Q, R = torch.linalg.qr(G)
    Q = Q * torch.sign(torch.diagonal(R, dim1=-2, dim2=-1)).unsqueeze(-2)
    return Q * math.sqrt(b)


def paper_loss(Y: Tensor, T: Tensor) -> Tensor:
    r"""The paper's loss ``(1/b) sum_i 1/2 ||y_i - t_i||^2`` of outputs ``Y`` against ``T``
    (``(..., b, m)``); its output gradient (per sample, before the ``1/b``) is ``Y - T``."""
    return 0.5 * (Y - T).square().sum(dim=-1).mean(dim=-1)


def population_loss(W: Tensor, A: Tensor, sigma: Tensor) -> Tensor:
    r"""``L(W) = 1/2 ||Sigma (W - A)||_F^2``: the expectation over ``z ~ N(0, I)`` of
    ``1/2 ||(W - A)^T Sigma z||^2``, i.e. of the paper's loss.  Batched over leading dims;
    ``L(0) = 1/2 ||Sigma A||_F^2``."""
    _check_square_spd(sigma)
    return 0.5 * (sigma @ (W - A)).square().sum(dim=(-2, -1))


def line_search(D: Tensor, A: Tensor, sigma: Tensor) -> tuple[Tensor, Tensor]:
    r"""The exactly tuned single step along ``D`` from ``W = 0``: ``(lr*, L(lr* D)/L(0))``.

    ``L(lr D) = 1/2 ||lr Sigma D - Sigma A||^2`` is a parabola in ``lr`` with minimum at
    ``lr* = <Sigma D, Sigma A>_F / ||Sigma D||_F^2`` and value
    ``L(0) (1 - cos^2(Sigma D, Sigma A))``.  ``lr*`` is negative when ``D`` points uphill
    (an optimizer would not take it; the relative loss is the same either way).  Batched
    over leading dims of ``D`` (and ``A``, ``sigma`` broadcast).  A zero ``D`` gives
    ``lr* = 0`` and relative loss 1.
    """
    _check_square_spd(sigma)
    SD, SA = sigma @ D, sigma @ A
    dd = SD.square().sum(dim=(-2, -1))
    da = (SD * SA).sum(dim=(-2, -1))
    aa = SA.square().sum(dim=(-2, -1))
    safe = torch.where(dd > 0, dd, torch.ones_like(dd))
    lr = torch.where(dd > 0, da / safe, torch.zeros_like(dd))
    rel = torch.where(dd > 0, 1 - da.square() / (safe * aa), torch.ones_like(dd))
    return lr, rel.clamp_min(0.0)


def tune_lr(loss_of: Callable[[np.ndarray], np.ndarray], low: float, high: float, count: int = 25,
            rounds: int = 2, refine_count: int = 15, allow_edge: bool = False) -> tuple[float, float]:
    r"""Minimize ``loss_of(lrs)`` over learning rates: a log-spaced grid, then refinements.

    Round 1 evaluates ``count`` log-spaced rates in ``[low, high]`` (``loss_of`` receives
    the whole array and returns one loss per rate; non-finite losses count as ``+inf``).
    Each further round evaluates ``refine_count`` log-spaced rates between the two grid
    neighbours of the best rate so far.  Returns ``(best lr, its loss)``.  On a function
    that is unimodal in ``log lr`` the error in ``log lr`` after ``r`` rounds is at most
    ``step_1 * (2/(refine_count - 1))^(r - 1)``, ``step_1 = log(high/low)/(count - 1)``.
    If the best rate of the first grid is one of its two ends the minimum may lie outside
    ``[low, high]``: this raises ``ValueError`` (widen the range) unless ``allow_edge``.
    """
    if not (0 < low < high) or not (math.isfinite(low) and math.isfinite(high)):
        raise ValueError(f"need 0 < low < high (finite), got low={low!r}, high={high!r}")
    for name, v, least in (("count", count, 3), ("rounds", rounds, 1), ("refine_count", refine_count, 3)):
        if isinstance(v, bool) or not isinstance(v, int) or v < least:
            raise ValueError(f"{name} must be an int >= {least}, got {v!r}")

    def evaluate(lrs):
        losses = np.asarray(loss_of(lrs), dtype=np.float64).reshape(-1)
        if losses.shape != lrs.shape:
            raise ValueError(f"loss_of returned {losses.shape[0]} losses for {lrs.shape[0]} learning rates")
        return np.where(np.isfinite(losses), losses, np.inf)

    lrs = np.logspace(math.log10(low), math.log10(high), count)
    losses = evaluate(lrs)
    i = int(np.argmin(losses))
    if not np.isfinite(losses[i]):
        raise ValueError("every learning rate of the grid gave a non-finite loss")
    if not allow_edge and i in (0, count - 1):
        raise ValueError(f"the best learning rate {lrs[i]:.3g} is at the edge of [{low:g}, {high:g}]; widen the range")
    best_lr, best_loss = float(lrs[i]), float(losses[i])
    for _ in range(rounds - 1):
        lo = lrs[max(i - 1, 0)]
        hi = lrs[min(i + 1, len(lrs) - 1)]
        if not lo < hi:
            break
        lrs = np.logspace(math.log10(lo), math.log10(hi), refine_count)
        losses = evaluate(lrs)
        i = int(np.argmin(losses))
        if losses[i] < best_loss:
            best_lr, best_loss = float(lrs[i]), float(losses[i])
    return best_lr, best_loss


def first_steps(X: Tensor, T: Tensor, eps: float = 1e-8) -> dict:
    r"""Each optimizer's first step *direction* from ``W = 0`` on the batch ``(X, T)``: ``W_1 = lr * D``.

    At ``W = 0`` the paper's loss has output gradient ``G = -T``; every entry is minus the
    single-batch update of :mod:`isolab.updates` (the direction *added* to ``W``):
    ``"SGD"`` ``X^T T/b``; ``"Adam"`` Adam's bias-corrected first step
    (:func:`~isolab.updates.adam_first_step`, ``sign`` up to ``eps``); ``"Muon"`` ``msign``
    of the gradient (exact SVD, no momentum); ``"Iso"``
    :func:`~isolab.updates.iso_update` (batch covariances, no damping); ``"IsoAdam"``
    :func:`~isolab.updates.iso_adam_first_step`.  With ``X = Z Sigma``, ``T = X A`` and
    ``Z^T Z = b I`` these are ``Sigma^2 A``, ``sign(Sigma^2 A)``, ``msign(Sigma^2 A)``,
    ``msign(Sigma A)`` and ``sign(msign(Sigma A))``.  Batched over leading dims.
    """
    G = -T
    return {
        "SGD": -updates.sgd_update(X, G),
        "Adam": -updates.adam_first_step(X, G, eps),
        "Muon": -updates.muon_update(X, G, exact=True),
        "Iso": -updates.iso_update(X, G),
        "IsoAdam": -updates.iso_adam_first_step(X, G, eps=eps),
    }


def one_step_change(make_optimizer: Callable[[nn.Module, float], torch.optim.Optimizer], X: Tensor, T: Tensor,
                    lr: float) -> Tensor:
    r"""``Delta W`` of one optimizer step on a bias-free ``nn.Linear`` started at ``W = 0``.

    Builds ``nn.Linear(n, m, bias=False)`` in ``X``'s dtype with zero weight, computes the
    paper's loss (:func:`paper_loss`) of ``X`` against ``T``, back-propagates, calls
    ``make_optimizer(model, lr).step()`` once, and returns the change of the weight in the
    book's row convention (``W = weight^T``, shape ``(n, m)``).  Optimizers with hooks
    (Iso, IsoAdam) have them removed afterwards.
    """
    if X.ndim != 2 or T.ndim != 2 or X.shape[0] != T.shape[0]:
        raise ValueError(f"X (b, n) and T (b, m) must be matrices with the same b, got {tuple(X.shape)}, {tuple(T.shape)}")
    model = nn.Linear(X.shape[1], T.shape[1], bias=False, dtype=X.dtype)
    with torch.no_grad():
        model.weight.zero_()
    opt = make_optimizer(model, lr)
    try:
        opt.zero_grad()
        paper_loss(model(X), T).backward()
        opt.step()
    finally:
        if hasattr(opt, "remove_hooks"):
            opt.remove_hooks()
    return model.weight.detach().T.clone()


def tuned_one_step(problem, optimizer: str, *, seed: int = 0, hyper: Optional[dict] = None, low: float = 1e-4,
                   high: float = 1e2, count: int = 25, rounds: int = 3, refine_count: int = 15) -> dict:
    r"""The best single step of an engine optimizer on a :class:`~isolab.book.problems.OneStepRegression`.

    For each candidate learning rate the engine (:func:`isolab.book.engine.sweep`, float64,
    one step on the problem's batch 0) takes the optimizer's first step from ``W = 0``;
    the step is scored by the exact population loss of the resulting weights
    (:func:`population_loss` with the problem's ``Sigma`` and ``A``), and :func:`tune_lr`
    searches the learning rate.  Returns ``{"lr", "relative_loss", "weights"}`` (the
    relative loss is ``L(W_1)/L(0)``; ``weights`` the ``(n, n)`` step at the best rate).
    """
    from .engine import sweep  # the engine imports the optimizers; keep this module light

    A = problem.target_matrix(seed)
    sigma = problem.sigma
    L0 = float(population_loss(torch.zeros_like(A), A, sigma))
    found = {}

    def loss_of(lrs):
        s = sweep(problem, optimizer, lrs, 1, seeds=(seed,), hyper=hyper, dtype=torch.float64, keep_weights=True,
                  record_norms=False, max_loss=None, progress=False)
        W = torch.from_numpy(s.weights[0, :, 0])
        losses = population_loss(W, A, sigma).numpy() / L0
        for lr, w, l in zip(lrs, W, losses):
            found[float(lr)] = (float(l), w)
        return losses

    lr, rel = tune_lr(loss_of, low, high, count, rounds, refine_count)
    return {"lr": lr, "relative_loss": rel, "weights": found[lr][1]}


#: The eigenbases :func:`eigenbasis` knows: the coordinate axes, the pair rotation by 45
#: degrees, and a Haar-random orthogonal matrix.
BASES = ("diagonal", "pair", "haar")


def eigenbasis(n: int, kind: str = "haar", seed: int = 0) -> Tensor:
    r"""An orthogonal ``(n, n)`` matrix whose columns are the eigenvectors of ``Sigma``.

    ``"diagonal"``: the identity.  ``"pair"``: :func:`isolab.book.features.pair_rotation` by 45
    degrees, which turns each coordinate pair ``(i, n-1-i)`` and leaves every other pair
    unmixed: the mildest non-diagonal ``Sigma``.  ``"haar"``: a Haar-random orthogonal
    matrix (:func:`isolab.linalg.random_orthogonal`, seeded by ``seed``), in which every
    coordinate mixes every eigen-direction.
    """
    if kind == "diagonal":
        return torch.eye(n, dtype=torch.float64)
    if kind == "pair":
        return features.pair_rotation(n, math.pi / 4)
    if kind == "haar":
        return linalg.random_orthogonal(n, generator(seed))
    raise ValueError(f"kind must be one of {BASES}, got {kind!r}")


def sigma_in_basis(condition_number: float, basis: Tensor) -> Tensor:
    r"""``Sigma = R diag(lambda) R^T`` with the geometric spectrum of
    :func:`isolab.book.features.spectrum` (``kappa(Sigma) = condition_number``, mean eigenvalue 1)
    and the orthogonal eigenbasis ``R = basis``."""
    lam = features.spectrum(basis.shape[-1], condition_number, dtype=basis.dtype)
    return (basis * lam) @ basis.mT


class RegressionInBasis(OneStepRegression):
    r""":class:`~isolab.book.problems.OneStepRegression` with ``Sigma`` in the eigenbasis ``kind``
    of :func:`eigenbasis` (``"diagonal"``, ``"pair"`` or ``"haar"``; ``basis_seed`` picks the
    Haar draw).  Everything else (batches ``X = Z Sigma``, targets ``T = X A``, ``A``) is
    the parent's."""

    name = "one_step_regression_in_basis"

    def __init__(self, n: int = 16, batch: int = 1024, condition_number: float = 10.0, kind: str = "haar",
                 basis_seed: int = 0):
        super().__init__(n, batch, condition_number, 0.0)
        self.kind, self.basis_seed = kind, int(basis_seed)
        self.basis = eigenbasis(self.n, kind, self.basis_seed)
        self.sigma = sigma_in_basis(self.condition_number, self.basis)

    def describe(self) -> dict:
        d = super().describe()
        d.update(basis=self.kind, basis_seed=self.basis_seed)
        return d
