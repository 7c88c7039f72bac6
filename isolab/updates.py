r"""Functional weight updates of a linear layer, computed from its inputs and output gradients.

Row convention: a linear layer ``Y = X W`` with a batch of inputs ``X`` of shape
``(..., b, n)``, weights ``W`` of shape ``(n, m)`` and output gradients ``G = dL/dY`` of
shape ``(..., b, m)``.  The loss is a batch mean, so the weight gradient is

    ``g = X^T G / b``

(the paper's implicit ``1/b``).  Every function here is pure and batched over leading
dimensions and returns the *direction to subtract*, like a gradient:
``W <- W - lr * update``.  These are the single-batch (``beta -> 0``) forms of the
optimizers in :mod:`isolab.optim`, which the book's chapters call directly:

- SGD: ``g``;  SignSGD: ``sign(g)``;  Adam's first (bias-corrected) step:
  ``g / (|g| + eps) ~ sign(g)``.
- Muon: ``msign(g) = U V^T`` (no shape factor here; the optimizer applies Muon's
  ``sqrt(max(1, rows/cols))``).
- Shampoo with one gradient: ``(g g^T)^{-1/4} g (g^T g)^{-1/4} = msign(g)``.
- Iso: ``Cov(X)^{-1/2} g Cov(G)^{-1/2}`` -- whiten the layer's inputs and its output
  gradients, then take the gradient.  Equals ``V_x U_x^T U_g V_g^T`` (thin SVDs), so its
  singular values are the canonical correlations of ``X`` and ``G``; its norm is invariant
  to invertible reparametrizations ``X -> X A``, ``G -> G B``.
- IsoAdam: Iso's two-sided whitening *followed by* Adam's elementwise scaling (the paper's
  description).  Because the last operation is Adam's, IsoAdam's hyperparameters
  (learning rate, betas, eps) transfer from Adam; its first step is
  ``w / (|w| + eps)`` with ``w`` Iso's whitened gradient.

Damping is always *relative*: ``lambda = damping * tr(C)/n`` for a covariance ``C`` of
size ``n``.
"""

from __future__ import annotations

import math
from numbers import Real

import torch
from torch import Tensor

from .linalg import (
    _check_damping,
    _check_matrix,
    QUINTIC,
    _inverse_root_absolute,
    covariance,
    msign,
    msign_newton_schulz,
    symmetric_inverse_root,
)

__all__ = [
    "weight_gradient",
    "sgd_update",
    "sign_sgd_update",
    "adam_first_step",
    "muon_update",
    "shampoo_update",
    "two_sided",
    "iso_update",
    "iso_adam_first_step",
]

_ROUTES = ("auto", "feature", "gram")


def _check_pair(X: Tensor, G: Tensor) -> None:
    _check_matrix("X", X)
    _check_matrix("G", G)
    if X.shape[-2] != G.shape[-2]:
        raise ValueError(
            f"X and G must have the same batch size b (dim -2), got X {tuple(X.shape)} and G {tuple(G.shape)}"
        )
    if X.shape[-2] == 0:
        raise ValueError("X and G must contain at least one sample (dim -2 has size 0)")


def _check_eps(eps) -> float:
    if isinstance(eps, bool) or not isinstance(eps, Real) or not math.isfinite(eps) or eps <= 0:
        raise ValueError(f"eps must be a finite real number > 0, got {eps!r}")
    return float(eps)


def weight_gradient(X: Tensor, G: Tensor) -> Tensor:
    r"""``g = X^T G / b``: the gradient of a batch-mean loss w.r.t. ``W`` in ``Y = X W``.

    ``dL/dW = sum_i x_i g_i^T / b`` (outer products of inputs and output gradients), which
    equals ``W.grad`` when ``G`` is the gradient of the summed loss divided by ``b`` --
    i.e. ``G`` here is per-sample, ``dL_i/dY_i``.  Shape ``(..., n, m)``.
    """
    _check_pair(X, G)
    return X.mT @ G / X.shape[-2]


def sgd_update(X: Tensor, G: Tensor) -> Tensor:
    r"""SGD's direction ``g = X^T G / b``.

    In output space it moves ``Y`` by ``-lr X X^T G / b``: the change each sample sees is
    mixed through the Gram matrix ``X X^T`` -- the anisotropy Iso removes.
    """
    return weight_gradient(X, G)


def sign_sgd_update(X: Tensor, G: Tensor) -> Tensor:
    r"""SignSGD's direction ``sign(g)``: every weight moves by the same amount.

    ``sign(0) = 0``, so a zero gradient gives a zero update.
    """
    return torch.sign(weight_gradient(X, G))


def adam_first_step(X: Tensor, G: Tensor, eps: float = 1e-8) -> Tensor:
    r"""Adam's first bias-corrected step ``g / (|g| + eps)`` (``m_1 = g``, ``v_1 = g^2``).

    This is ``sign(g)`` up to ``eps``: it is invariant to positive *diagonal* rescalings
    of the inputs and outputs (``sign(D_1 g D_2) = sign(g)``) but not to general invertible
    ones, unlike Iso.  A zero gradient gives a zero update.
    """
    eps = _check_eps(eps)
    g = weight_gradient(X, G)
    return g / (g.abs() + eps)


def muon_update(X: Tensor, G: Tensor, exact: bool = True, steps: int = 5, coefficients=QUINTIC) -> Tensor:
    r"""Muon's direction without momentum: ``msign(g) = U V^T``.

    ``exact=True`` uses the SVD (:func:`isolab.linalg.msign`); ``exact=False`` uses
    ``steps`` Newton--Schulz iterations with ``coefficients`` as Muon does (Keller Jordan's
    quintic by default: singular values near but not exactly 1; ``"polar_express"``, …).  Every singular direction of ``g`` moves by the same amount: steepest
    descent under the spectral norm.  No shape factor (the optimizer applies
    ``sqrt(max(1, rows/cols))``).
    """
    if not isinstance(exact, bool):
        raise ValueError(f"exact must be a bool, got {exact!r}")
    g = weight_gradient(X, G)
    return msign(g) if exact else msign_newton_schulz(g, steps, coefficients=coefficients)


def shampoo_update(X: Tensor, G: Tensor, damping: float = 0.0) -> Tensor:
    r"""Single-gradient Shampoo: ``(g g^T + lambda_L I)^{-1/4} g (g^T g + lambda_R I)^{-1/4}``.

    Shampoo preconditions with ``L = sum g g^T`` and ``R = sum g^T g``; with one gradient
    and ``g = U S V^T`` this is ``U S^{-1/2} S S^{-1/2} V^T = U V^T = msign(g)``: Shampoo
    without accumulation is Muon.  ``damping`` is relative to each factor's mean eigenvalue;
    with ``damping=0`` zero eigenvalues map to 0 (pseudo-inverse), so rank-deficient and
    zero gradients give finite updates.
    """
    damping = _check_damping(damping)
    g = weight_gradient(X, G)
    left = symmetric_inverse_root(g @ g.mT, 4, damping)
    right = symmetric_inverse_root(g.mT @ g, 4, damping)
    return two_sided(g, left, right)


def two_sided(grad: Tensor, left: Tensor, right: Tensor) -> Tensor:
    r"""``left @ grad @ right``: a two-sided preconditioned gradient (batched).

    The building block of Shampoo (``L^{-1/4} g R^{-1/4}``), K-FAC and Iso
    (``Cov(X)^{-1/2} g Cov(G)^{-1/2}``) once the roots are computed (and possibly reused
    over several steps).  ``grad`` is ``(..., n, m)``, ``left`` ``(..., n, n)``, ``right``
    ``(..., m, m)``.
    """
    _check_matrix("grad", grad)
    _check_matrix("left", left, square=True)
    _check_matrix("right", right, square=True)
    n, m = grad.shape[-2], grad.shape[-1]
    if left.shape[-1] != n:
        raise ValueError(f"left must be ({n}, {n}) to match grad {tuple(grad.shape)}, got {tuple(left.shape)}")
    if right.shape[-1] != m:
        raise ValueError(f"right must be ({m}, {m}) to match grad {tuple(grad.shape)}, got {tuple(right.shape)}")
    return left @ grad @ right


def _whitened_samples(X: Tensor, damping: float, route: str) -> Tensor:
    r"""``X (X^T X/b + lambda I)^{-1/2}`` computed in feature space or Gram space.

    Push-through: ``f(X^T X) X^T = X^T f(X X^T)`` for any function ``f``, so
    ``X (X^T X/b + lambda I)^{-1/2} = (X X^T/b + lambda I)^{-1/2} X`` (transpose of the
    identity with ``f(t) = (t/b + lambda)^{-1/2}``; with ``lambda = 0`` also for the
    pseudo-inverse, ``f(0) = 0``, since ``X^T`` annihilates the null space).  The feature
    route costs ``O(n^3)``, the Gram route ``O(b^3)``.  ``lambda = damping tr(X^T X/b)/n``
    in *both* routes (``tr(X X^T) = tr(X^T X)``), so they compute the same matrix.
    """
    b, n = X.shape[-2], X.shape[-1]
    if route == "auto":
        route = "gram" if b < n else "feature"
    lam = None
    if damping > 0:
        # tr(X^T X / b) / n computed from the entries (no n x n matrix needed)
        lam = damping * (X * X).sum(dim=(-2, -1), keepdim=True) / (b * n)
    if route == "feature":
        return X @ _inverse_root_absolute(covariance(X), 2.0, lam, "iso_update (feature route)")[0]
    gram = X @ X.mT / b
    return _inverse_root_absolute(gram, 2.0, lam, "iso_update (gram route)")[0] @ X


def iso_update(X: Tensor, G: Tensor, damping: float = 0.0, route: str = "auto") -> Tensor:
    r"""Iso's update ``Cov(X)^{-1/2} (X^T G / b) Cov(G)^{-1/2}`` (uncentered covariances).

    Whitening both sides removes the anisotropy of the inputs and of the output gradients:
    with thin SVDs ``X = U_x S_x V_x^T``, ``G = U_g S_g V_g^T`` the update is
    ``V_x (U_x^T U_g) V_g^T``, which depends on the data only through the column spaces of
    ``X`` and ``G``.  Hence for invertible ``A``, ``B`` the update for ``(X A, G B)`` has
    the same singular values (the canonical correlations of ``X`` and ``G``), so the same
    norm, and for orthogonal ``Q``, ``U``: ``iso(X Q, G U) = Q^T iso(X, G) U``.

    Computed as ``(X_w)^T G_w / b`` with ``X_w = X Cov(X)^{-1/2}`` and ``G_w`` likewise.
    ``route="feature"`` whitens with the ``n x n`` and ``m x m`` covariances;
    ``route="gram"`` uses the push-through identity
    ``(X^T X/b + lambda I)^{-1/2} X^T = X^T (X X^T/b + lambda I)^{-1/2}`` to whiten in the
    ``b x b`` Gram space (cheaper when ``b < n``); ``route="auto"`` picks the cheaper route
    per side.  All routes compute the same matrix, including the relative damping
    ``lambda = damping * tr(Cov)/n`` and, with ``damping=0`` and ``b < n``, the
    pseudo-inverse answer ``V_x U_x^T U_g V_g^T`` over the numerical ranks (finite).
    """
    _check_pair(X, G)
    damping = _check_damping(damping)
    if route not in _ROUTES:
        raise ValueError(f"route must be one of {_ROUTES}, got {route!r}")
    Xw = _whitened_samples(X, damping, route)
    Gw = _whitened_samples(G, damping, route)
    return Xw.mT @ Gw / X.shape[-2]


def iso_adam_first_step(X: Tensor, G: Tensor, damping: float = 0.0, eps: float = 1e-8) -> Tensor:
    r"""IsoAdam's first step: Adam's first step applied to Iso's whitened gradient.

    ``w = Cov(X)^{-1/2} (X^T G/b) Cov(G)^{-1/2}``, then ``w / (|w| + eps) ~ sign(w)``:
    whiten, then scale elementwise, so Adam's hyperparameters transfer.
    """
    eps = _check_eps(eps)
    w = iso_update(X, G, damping)
    return w / (w.abs() + eps)
