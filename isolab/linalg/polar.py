r"""The matrix sign (orthogonal polar factor) ``msign(M) = U V^T``: exactly by SVD, and by
matmul-only Newton--Schulz iterations as in Muon.
"""

from __future__ import annotations

import math
from numbers import Real
from typing import Optional, Sequence

import torch
from torch import Tensor

from .base import _check_matrix, _check_steps, _work_dtype

__all__ = ["QUINTIC", "CUBIC", "msign", "msign_newton_schulz", "newton_schulz_map"]

#: Keller Jordan's quintic Newton--Schulz coefficients ``(a, b, c)`` used by Muon: the map
#: ``s -> a s + b s^3 + c s^5`` has a steep slope at 0 and pushes singular values into
#: roughly [0.68, 1.13] after 5 steps instead of converging to exactly 1.
QUINTIC = (3.4445, -4.7750, 2.0315)

#: The classical cubic Newton--Schulz coefficients: ``s -> 1.5 s - 0.5 s^3`` converges to 1
#: (quadratically near 1) for every singular value in ``(0, sqrt(3))``.
CUBIC = (1.5, -0.5, 0.0)


def msign(M: Tensor) -> Tensor:
    r"""Exact matrix sign (orthogonal polar factor) ``msign(M) = M (M^T M)^{-1/2} = U V^T``.

    With the thin SVD ``M = U S V^T`` the polar decomposition is ``M = (U V^T)(V S V^T)``;
    ``U V^T`` is the orthogonal matrix nearest to ``M`` and the steepest-descent direction
    under the spectral norm, which is why Muon steps along it.  Rank-deficient ``M`` gets
    pseudo-inverse semantics: singular values at or below ``max(rows, cols) * eps * s_max``
    (numpy's ``matrix_rank`` tolerance) map to 0, so the result is ``U_r V_r^T`` over the
    numerical range and the zero matrix maps to zeros, never NaN.

    Batched over leading dimensions; half-precision input is computed in float32 and cast
    back.  This is the test oracle for :func:`msign_newton_schulz`.
    """
    _check_matrix("M", M)
    work = M.to(_work_dtype(M.dtype))
    U, S, Vh = torch.linalg.svd(work, full_matrices=False)
    eps = torch.finfo(work.dtype).eps
    tol = max(M.shape[-2], M.shape[-1]) * eps * S.amax(dim=-1, keepdim=True)
    keep = (S > tol).to(work.dtype)
    return ((U * keep.unsqueeze(-2)) @ Vh).to(M.dtype)


def _check_coefficients(coefficients) -> tuple:
    try:
        coeffs = tuple(float(c) for c in coefficients)
    except (TypeError, ValueError):
        raise ValueError(f"coefficients must be 3 real numbers (a, b, c), got {coefficients!r}") from None
    if len(coeffs) != 3 or not all(math.isfinite(c) for c in coeffs):
        raise ValueError(f"coefficients must be 3 finite real numbers (a, b, c), got {coefficients!r}")
    return coeffs


def msign_newton_schulz(
    M: Tensor,
    steps: int = 5,
    coefficients: Sequence[float] = QUINTIC,
    compute_dtype: Optional[torch.dtype] = None,
    eps: float = 1e-7,
) -> Tensor:
    r"""Approximate ``msign(M)`` with matmul-only Newton--Schulz iterations (Muon's way).

    ``X_0 = M / (||M||_F + eps)`` puts every singular value in ``[0, 1]``; each step

        ``A = X X^T``,  ``X <- a X + (b A + c A^2) X``

    applies the odd polynomial ``p(s) = a s + b s^3 + c s^5`` to every singular value while
    keeping the singular vectors (``X = U diag(s) V^T`` gives ``p(X) = U diag(p(s)) V^T``),
    so after ``steps`` steps the result is ``U diag(p^{steps}(s / (||M||_F + eps))) V^T``
    exactly (see :func:`newton_schulz_map`).  With :data:`QUINTIC` the singular values land
    in roughly [0.68, 1.13] after 5 steps (not 1: speed over accuracy); with :data:`CUBIC`
    they converge to 1 and the result converges to :func:`msign`.  A tall ``M`` is
    transposed first so that the Gram matrix ``A`` is the small side (cost
    ``O(rows * cols * min(rows, cols))`` per step).

    ``compute_dtype=None`` computes in ``M``'s own dtype: a float32 request is never
    silently downcast.  ``torch.bfloat16`` is allowed (Muon's GPU default); the result is
    always cast back to ``M.dtype``.  The zero matrix maps to zeros.
    """
    _check_matrix("M", M)
    steps = _check_steps(steps)
    a, b, c = _check_coefficients(coefficients)
    if compute_dtype is None:
        compute_dtype = M.dtype
    if not isinstance(compute_dtype, torch.dtype) or not compute_dtype.is_floating_point:
        raise ValueError(f"compute_dtype must be None or a floating torch.dtype, got {compute_dtype!r}")
    if isinstance(eps, bool) or not isinstance(eps, Real) or not eps > 0:
        raise ValueError(f"eps must be a real number > 0, got {eps!r}")

    X = M.to(compute_dtype)
    transposed = X.shape[-2] > X.shape[-1]
    if transposed:
        X = X.mT
    X = X / (torch.linalg.matrix_norm(X, keepdim=True) + eps)
    # The same polynomial with fused multiply-adds: B = b A + c A^2 and X <- a X + B X as
    # (batched) addmm calls, which halves the cost on small matrices (no elementwise passes).
    shape = X.shape
    X = X.reshape(-1, shape[-2], shape[-1]) if X.ndim != 2 else X
    addmm = torch.addmm if X.ndim == 2 else torch.baddbmm
    for _ in range(steps):
        A = X @ X.mT
        B = addmm(A, A, A, beta=b, alpha=c)
        X = addmm(X, B, X, beta=a)
    X = X.reshape(shape)
    if transposed:
        X = X.mT
    return X.to(M.dtype)


def newton_schulz_map(s: Tensor, steps: int, coefficients: Sequence[float] = QUINTIC) -> Tensor:
    r"""The scalar map that ``steps`` Newton--Schulz iterations apply to each singular value.

    ``s <- a s + b s^3 + c s^5``, repeated ``steps`` times.  :func:`msign_newton_schulz`
    first divides ``M`` by ``||M||_F + eps``, so pass ``s / (||M||_F + eps)`` to reproduce
    its singular values; for plotting, ``s`` is a grid on ``[0, 1]``.  Elementwise on any
    tensor; returns a new tensor.
    """
    if not isinstance(s, Tensor):
        raise TypeError(f"s must be a torch.Tensor, got {type(s).__name__}")
    steps = _check_steps(steps)
    a, b, c = _check_coefficients(coefficients)
    out = s.clone()
    for _ in range(steps):
        sq = out * out
        out = out * (a + sq * (b + c * sq))
    return out
