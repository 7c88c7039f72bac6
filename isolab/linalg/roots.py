r"""Inverse roots of symmetric matrices by ``eigh``: ``(C + lambda I)^{-1/p}`` with relative
damping, pseudo-inverse semantics and a float64 retry, and the way back from a root to its
covariance.
"""

from __future__ import annotations

import math
from numbers import Real
from typing import Optional

import torch
from torch import Tensor

from .base import (
    _check_damping,
    _check_matrix,
    _eigh_with_retry,
    _eye_like,
    _mean_trace,
    _sanitize_spectrum,
    _symmetrize,
    _work_dtype,
    all_finite,
    gram,
)

__all__ = ["symmetric_inverse_root", "inverse_sqrt", "inverse_sqrt_eig", "covariance_from_inverse_sqrt"]


def _inverse_root_absolute(C: Tensor, p: float, lam: Optional[Tensor], what: str) -> tuple[Tensor, Tensor]:
    """``((sym(C) + lam I)^{-1/p}, V)``: the root with an *absolute* shift ``lam`` (shaped
    ``(..., 1, 1)``, or None) and the eigenvectors it was computed in."""
    if not all_finite(C):
        raise ValueError(f"{what}: the matrix contains NaN or Inf")
    work_dtype = _work_dtype(C.dtype)
    A = _symmetrize(C.to(work_dtype))
    if lam is not None:
        A = A + lam.to(work_dtype) * _eye_like(A)
    w, V = _eigh_with_retry(A, what)
    keep = _sanitize_spectrum(w, A.shape[-1], work_dtype)
    safe = torch.where(keep, w, torch.ones_like(w))
    scale = torch.where(keep, safe.pow(-1.0 / p), torch.zeros_like(w))
    root = (V * scale.unsqueeze(-2)) @ V.mT
    if not all_finite(root):
        raise ValueError(f"{what}: the inverse root is not finite (matrix too ill-conditioned; use damping > 0)")
    return root.to(C.dtype), V.to(C.dtype)


def symmetric_inverse_root(C: Tensor, p: float = 2, damping: float = 0.0) -> Tensor:
    r"""``(C + lambda I)^{-1/p}`` for symmetric positive semi-definite ``C``, by ``eigh``.

    ``C = V diag(w) V^T`` gives ``(C + lambda I)^{-1/p} = V diag((w + lambda)^{-1/p}) V^T``.
    Used for whitening (``p = 2``: ``Cov(X)^{-1/2}``) and Shampoo (``p = 4``).

    - ``C`` is symmetrized, ``(C + C^T)/2``, so rounding asymmetry cannot leak in.
    - Damping is *relative*: ``lambda = damping * tr(C) / n``, so the same ``damping``
      means the same thing whatever the scale of the statistics (an absolute ``lambda`` is
      either invisible or dominant depending on the units of ``C``).
    - Eigenvalues at or below ``n * eps * w_max`` (and negative rounding noise) are treated
      as exact zeros and map to 0: the pseudo-inverse root, finite for singular ``C``
      (e.g. ``Cov(X)`` with fewer samples than features).
    - If ``eigh`` fails (ill-conditioned float32), it is retried in float64 and the result
      cast back; if the result is still not finite, or ``C`` contains NaN/Inf, a
      ``ValueError`` is raised.  Half-precision input is computed in float32.
    """
    _check_matrix("C", C, square=True)
    if isinstance(p, bool) or not isinstance(p, Real) or not math.isfinite(p) or p <= 0:
        raise ValueError(f"p must be a finite real number > 0, got {p!r}")
    damping = _check_damping(damping)
    lam = None
    if damping > 0:
        lam = damping * _mean_trace(C.to(_work_dtype(C.dtype)))  # the diagonal of sym(C) is C's
    return _inverse_root_absolute(C, float(p), lam, f"symmetric_inverse_root(p={p})")[0]


def inverse_sqrt_eig(C: Tensor, damping: float = 0.0) -> tuple[Tensor, Tensor]:
    r"""``(root, basis)``: :func:`inverse_sqrt` and the eigenvectors ``V`` it was computed in.

    ``root = V diag((w + lambda)^{-1/2}) V^T`` exactly as :func:`inverse_sqrt` (same damping,
    pseudo-inverse and float64 retry); ``basis = V`` lets :func:`inverse_sqrt_in_basis`
    update the root cheaply while ``C`` drifts.
    """
    _check_matrix("C", C, square=True)
    damping = _check_damping(damping)
    lam = damping * _mean_trace(C.to(_work_dtype(C.dtype)))  # the diagonal of sym(C) is C's if damping > 0 else None
    return _inverse_root_absolute(C, 2.0, lam, "inverse_sqrt_eig")


def inverse_sqrt(C: Tensor, damping: float = 0.0) -> Tensor:
    r"""``(C + lambda I)^{-1/2}``, ``lambda = damping * tr(C)/n``: :func:`symmetric_inverse_root` with ``p = 2``."""
    return symmetric_inverse_root(C, 2, damping)


def covariance_from_inverse_sqrt(P: Tensor, shift: float) -> Tensor:
    r"""Recover ``C`` from its damped inverse root ``P = (C + shift I)^{-1/2}``: ``C = P^{-2} - shift I``.

    Computed in float64 (Cholesky of ``P``, ``cholesky_inverse``, one product) and cast back
    to ``P``'s dtype, so that an optimizer can store only the root and rebuild the
    covariance at the next statistics refresh.  Needs ``P`` positive definite (damping
    ``shift > 0`` or a full-rank ``C``).  The rebuilt ``C`` differs from the original by
    about ``2 eps(P.dtype) cond(P) ||C + shift I||`` (``cond(P) = sqrt(cond(C + shift I))``);
    raises ``ValueError`` when ``P`` is not positive definite.
    """
    _check_matrix("P", P, square=True)
    P64 = _symmetrize(P.to(torch.float64))
    L, info = torch.linalg.cholesky_ex(P64)
    if bool((info != 0).any()):
        raise ValueError("covariance_from_inverse_sqrt: the root is not positive definite")
    Pinv = torch.cholesky_inverse(L)
    C = gram(Pinv) if Pinv.ndim == 2 else Pinv.mT @ Pinv  # P^{-2} = (P^{-1})^T P^{-1}, symmetric
    C.diagonal(dim1=-2, dim2=-1).sub_(float(shift))
    return C.to(P.dtype)
