r"""Shared helpers of :mod:`isolab.linalg`: argument checks, working dtypes, finiteness,
the Gram matrix, ``eigh`` with a float64 retry, and Haar-random rotations.
"""

from __future__ import annotations

import math
from numbers import Real
from typing import Optional, Sequence

import torch
from torch import Tensor

__all__ = ["all_finite", "gram", "GRAM_BLOCK", "random_orthogonal"]

_HALF = (torch.float16, torch.bfloat16)


def _check_matrix(name: str, M: Tensor, square: bool = False) -> None:
    if not isinstance(M, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(M).__name__}")
    if M.ndim < 2:
        raise ValueError(f"{name} must have at least 2 dimensions (..., rows, cols), got shape {tuple(M.shape)}")
    if not M.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor, got dtype {M.dtype}")
    if square and M.shape[-1] != M.shape[-2]:
        raise ValueError(f"{name} must be square in its last two dimensions, got shape {tuple(M.shape)}")


def _check_damping(damping) -> float:
    if isinstance(damping, bool) or not isinstance(damping, Real) or not math.isfinite(damping) or damping < 0:
        raise ValueError(f"damping must be a finite real number >= 0, got {damping!r}")
    return float(damping)


def _work_dtype(dtype: torch.dtype) -> torch.dtype:
    """Half precision is too coarse for factorizations: compute those in float32."""
    return torch.float32 if dtype in _HALF else dtype


def all_finite(*tensors: Tensor) -> bool:
    """``True`` iff every entry of every tensor is finite (no NaN, no ±Inf).

    One reduction per tensor in the common case: a NaN or Inf anywhere makes the sum
    non-finite; only then (or when a finite sum overflows) is the exact elementwise test
    run, so the answer is exact and a healthy tensor costs one pass instead of four.
    """
    for t in tensors:
        if not math.isfinite(float(t.sum())) and not bool(torch.isfinite(t).all()):
            return False
    return True


#: Column-block width of :func:`gram` on a CPU.
GRAM_BLOCK = 64


def gram(a: Tensor) -> Tensor:
    r"""``a^T a`` of a ``(rows, n)`` matrix.

    On a CPU with ``n > 2·GRAM_BLOCK`` only the upper block triangle is multiplied (one
    product per block row, ``a[:, i:i+k]^T a[:, i:]``) and mirrored: about ``1/2 + k/(2n)``
    of the multiply-adds of ``a^T a``, the same dot products. Measured with 4096 rows on
    one thread: ``n = 1024`` in 50 ms instead of 79, ``n = 256`` in 3.5 ms instead of 5.2.
    Elsewhere (a GPU, small ``n``) one product is faster. Used for the statistics
    ``X^T X``, ``G^T G`` and for the lean state's ``P^{-2}``.
    """
    _check_matrix("a", a)
    if a.ndim != 2:
        raise ValueError(f"gram expects a 2-D matrix, got shape {tuple(a.shape)}")
    n = a.shape[1]
    if a.device.type != "cpu" or n <= 2 * GRAM_BLOCK:
        return a.T @ a
    out = a.new_empty(n, n)
    for i in range(0, n, GRAM_BLOCK):
        j = min(i + GRAM_BLOCK, n)
        block = a[:, i:j].T @ a[:, i:]
        out[i:j, i:] = block
        out[j:, i:j] = block[:, j - i:].T
    return out


def _eye_like(M: Tensor) -> Tensor:
    return torch.eye(M.shape[-1], dtype=M.dtype, device=M.device)


def _symmetrize(C: Tensor) -> Tensor:
    return 0.5 * (C + C.mT)


def _mean_trace(C: Tensor) -> Tensor:
    """``tr(C)/n`` per matrix, shaped ``(..., 1, 1)`` for broadcasting."""
    return C.diagonal(dim1=-2, dim2=-1).mean(-1)[..., None, None]


def _sanitize_spectrum(w: Tensor, n: int, tol_dtype: torch.dtype) -> Tensor:
    """Boolean mask of the eigenvalues treated as nonzero.

    Eigenvalues at or below ``n * eps(tol_dtype) * max|w|`` are rounding noise of a
    singular matrix (the same rule as ``numpy.linalg.matrix_rank``); negative ones are
    never kept.  A zero matrix keeps nothing.
    """
    eps = torch.finfo(tol_dtype).eps
    tol = n * eps * w.abs().amax(dim=-1, keepdim=True)
    return w > tol


def _eigh_with_retry(A: Tensor, what: str):
    """``torch.linalg.eigh`` that retries in float64 when it fails.

    LAPACK/cuSOLVER eigensolvers occasionally fail to converge on ill-conditioned float32
    input (and some backends return NaN instead of raising).  Returns ``(w, V)``, in
    float64 after a retry: the caller finishes the computation in that precision and casts
    the result back.  Raises ``ValueError`` when even float64 fails.
    """
    first_failure = None
    try:
        w, V = torch.linalg.eigh(A)
        if all_finite(w, V):
            return w, V
        first_failure = "eigh returned non-finite values"
    except RuntimeError as err:  # torch.linalg.LinAlgError is a RuntimeError
        first_failure = f"eigh failed: {err}"
    if A.dtype == torch.float64:
        raise ValueError(f"{what}: {first_failure} (already in float64)")
    A64 = A.to(torch.float64)
    try:
        w, V = torch.linalg.eigh(A64)
    except RuntimeError as err:
        raise ValueError(f"{what}: {first_failure}; the float64 retry failed too: {err}") from err
    if not all_finite(w, V):
        raise ValueError(f"{what}: {first_failure}; the float64 retry returned non-finite values")
    return w, V


def _check_steps(steps, name: str = "steps") -> int:
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ValueError(f"{name} must be an int >= 0, got {steps!r}")
    return steps


def _residual(R: Tensor) -> float:
    n = R.shape[-1]
    return float(torch.linalg.matrix_norm(R).amax()) / math.sqrt(n)


def random_orthogonal(
    n: int,
    generator: Optional[torch.Generator] = None,
    *,
    sample_shape: Sequence[int] = (),
    dtype=torch.float64,
    device=None,
) -> Tensor:
    r"""Haar-random orthogonal ``n x n`` matrices, shape ``(*sample_shape, n, n)``: the book's
    one source of random rotations.

    The QR factorization of a standard Gaussian matrix ``Z = QR`` gives an orthogonal
    ``Q``, but not a uniformly distributed one: LAPACK's Householder QR fixes the signs of
    ``R``'s diagonal by its own convention, which biases ``Q`` (for example
    :math:`\mathbb E[Q_{11}] \ne 0`). Flipping each column of ``Q`` so that ``R`` has a
    positive diagonal makes the factorization unique, and then ``Q`` inherits the
    rotation invariance of ``Z``: it is Haar-distributed (Mezzadri, 2007).
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    shape = tuple(sample_shape)
    if any(isinstance(k, bool) or not isinstance(k, int) or k < 0 for k in shape):
        raise ValueError(f"sample_shape must be a sequence of non-negative ints, got {sample_shape!r}")
    Z = torch.randn(*shape, n, n, generator=generator, dtype=dtype, device=device)
    Q, R = torch.linalg.qr(Z)
    signs = torch.sign(torch.diagonal(R, dim1=-2, dim2=-1))
    signs = torch.where(signs == 0, torch.ones_like(signs), signs)
    return Q * signs.unsqueeze(-2)
