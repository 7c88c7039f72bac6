r"""Statistics of a batch of rows: the covariance, whitening (ZCA and PCA) and the canonical
correlations between inputs and output gradients.
"""

from __future__ import annotations

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
)
from .roots import symmetric_inverse_root

__all__ = ["covariance", "whiten", "canonical_correlations"]


def _check_center(center) -> bool:
    if not isinstance(center, bool):
        raise ValueError(f"center must be a bool, got {center!r}")
    return center


def _centered(X: Tensor, center: bool) -> Tensor:
    return X - X.mean(dim=-2, keepdim=True) if center else X


def covariance(X: Tensor, center: bool = False) -> Tensor:
    r"""Second-moment matrix ``Cov(X) = X^T X / b`` of a batch ``X`` of shape ``(..., b, n)``.

    Uncentered by default, as in Iso (the paper's ``Cov(x) = E[x x^T]``): the mean is part
    of the signal a linear layer sees.  ``center=True`` subtracts the batch mean over
    dim -2 first (the statistical covariance, normalized by ``b``).  Returns ``(..., n, n)``.
    """
    _check_matrix("X", X)
    center = _check_center(center)
    b = X.shape[-2]
    if b == 0:
        raise ValueError("X must contain at least one sample (dim -2 has size 0)")
    Xc = _centered(X, center)
    return Xc.mT @ Xc / b


def _pca_signs(V: Tensor) -> Tensor:
    """Flip eigenvector columns so that each one's largest-magnitude entry is positive."""
    idx = V.abs().argmax(dim=-2, keepdim=True)
    signs = torch.sign(torch.gather(V, -2, idx))
    signs = torch.where(signs == 0, torch.ones_like(signs), signs)
    return V * signs


def whiten(X: Tensor, center: bool = False, kind: str = "zca", damping: float = 0.0) -> Tensor:
    r"""Whiten a batch ``X`` of shape ``(..., b, n)`` so that ``Cov(result) = I``.

    - ``kind="zca"``: ``X Cov(X)^{-1/2}``.  The blog's whitening ``X (X^T X)^{-1/2}`` solves
      ``min_A ||X A A^T X^T - I||``; scaled by ``sqrt(b)`` it has identity covariance.  Among
      all whitenings ``X W`` (``W^T Cov(X) W = I``) ZCA is the one closest to ``X`` (it
      rotates nothing), and it is the symmetric choice that keeps Iso equivariant.
    - ``kind="pca"``: ``X V Lambda^{-1/2}`` with ``Cov(X) = V Lambda V^T``, eigenvalues
      descending: coordinates along the principal axes.  Eigenvector signs are fixed (the
      largest-magnitude entry of each column is positive) so the result is deterministic.

    ``center=True`` subtracts the batch mean first (then the result also has zero mean).
    ``damping`` is relative (``lambda = damping * tr(Cov)/n``).  With ``b < n`` (or any
    rank deficiency) zero eigenvalues map to 0: the result is finite and its covariance is
    the projector onto the data's span instead of ``I``.
    """
    _check_matrix("X", X)
    center = _check_center(center)
    damping = _check_damping(damping)
    if kind not in ("zca", "pca"):
        raise ValueError(f"kind must be 'zca' or 'pca', got {kind!r}")
    Xc = _centered(X, center)
    C = covariance(Xc)
    if kind == "zca":
        return Xc @ symmetric_inverse_root(C, 2, damping)

    work_dtype = _work_dtype(C.dtype)
    A = _symmetrize(C.to(work_dtype))
    if damping > 0:
        A = A + damping * _mean_trace(A) * _eye_like(A)
    if not all_finite(A):
        raise ValueError("whiten: X contains NaN or Inf")
    w, V = _eigh_with_retry(A, "whiten(kind='pca')")
    w, V = w.flip(-1), V.flip(-1)  # descending
    V = _pca_signs(V)
    keep = _sanitize_spectrum(w, A.shape[-1], work_dtype)
    scale = torch.where(keep, torch.where(keep, w, torch.ones_like(w)).rsqrt(), torch.zeros_like(w))
    return (Xc.to(V.dtype) @ (V * scale.unsqueeze(-2))).to(X.dtype)


def _whitened_basis(X: Tensor, damping: float) -> Tensor:
    r"""``U diag(s / sqrt(s^2 + b lambda))`` from the thin SVD ``X = U S V^T``.

    ``(X^T X/b + lambda I)^{-1/2} X^T / sqrt(b) = V diag(s/sqrt(s^2 + b lambda)) U^T``; with
    ``lambda = 0`` the diagonal is 1 on the numerical rank and 0 beyond (pseudo-inverse).
    """
    b, n = X.shape[-2], X.shape[-1]
    U, S, _ = torch.linalg.svd(X, full_matrices=False)
    eps = torch.finfo(X.dtype).eps
    keep = S > max(b, n) * eps * S.amax(dim=-1, keepdim=True)
    if damping > 0:
        b_lam = damping * (S * S).sum(dim=-1, keepdim=True) / n  # b * lambda, lambda = damping tr(Cov)/n
        d = S / torch.sqrt(S * S + b_lam)
        d = torch.where(b_lam > 0, d, keep.to(S.dtype))
    else:
        d = keep.to(S.dtype)
    return U * d.unsqueeze(-2)


def canonical_correlations(X: Tensor, G: Tensor, center: bool = False, damping: float = 0.0) -> Tensor:
    r"""Canonical correlations between ``X`` ``(..., b, n)`` and ``G`` ``(..., b, m)``, descending.

    The singular values of ``Cov(X)^{-1/2} Cov(X, G) Cov(G)^{-1/2}`` (``Cov(X, G) = X^T G/b``)
    -- exactly the singular values of Iso's update, so ``||iso_update||_F^2 = sum rho_i^2``.
    Computed stably without forming covariances: with thin SVDs ``X = U_x S_x V_x^T`` and
    ``G = U_g S_g V_g^T`` the matrix equals ``V_x (U_x^T U_g) V_g^T``, so the correlations are
    the singular values of ``U_x^T U_g`` (cosines of the principal angles between the column
    spaces).  With ``damping > 0`` (relative, per side) the bases are shrunk by
    ``s/sqrt(s^2 + b lambda)``.  Uncentered by default (matches Iso); ``center=True`` gives
    the classical CCA.  Returns ``min(b, n, m)`` values in ``[0, 1]`` (zeros beyond the rank).
    """
    _check_matrix("X", X)
    _check_matrix("G", G)
    center = _check_center(center)
    damping = _check_damping(damping)
    if X.shape[-2] != G.shape[-2]:
        raise ValueError(f"X and G must have the same number of samples (dim -2), got {X.shape[-2]} and {G.shape[-2]}")
    dtype = _work_dtype(torch.promote_types(X.dtype, G.dtype))
    Bx = _whitened_basis(_centered(X.to(dtype), center), damping)
    Bg = _whitened_basis(_centered(G.to(dtype), center), damping)
    rho = torch.linalg.svdvals(Bx.mT @ Bg)
    return rho.clamp(0.0, 1.0).to(torch.promote_types(X.dtype, G.dtype))
