"""Section 13.5: rotated Gaussian statistics, whitening residuals, low-precision Newton roots, the first root's gain."""

from __future__ import annotations

import math
from typing import Optional
import torch
from torch import Tensor
from isolab import linalg
from .. import features
from ..seeding import generator
from .flops import _check_dims


# ----------------------------------------------------------------------- precision
def rotated_gaussian(
    b: int, n: int, cond: float = 1.0, *, generator: Optional[torch.Generator] = None, dtype=torch.float64
) -> Tensor:
    r"""``b`` samples ``x = Q diag(√λ) z`` (rows) with covariance ``Q diag(λ) Qᵀ``.

    ``λ`` = :func:`isolab.book.features.spectrum` ``(n, cond)`` (geometric, mean 1) and ``Q`` a
    Haar-random rotation (:func:`isolab.linalg.random_orthogonal`, drawn from ``generator``). Unlike
    axis-aligned features, every coordinate then mixes large and small variances, which is
    what rounding to a short float format damages.
    """
    _check_dims(b=b, n=n)
    Q = linalg.random_orthogonal(n, generator)
    Z = torch.randn(b, n, generator=generator, dtype=torch.float64)
    X = (Z * features.spectrum(n, cond).sqrt()) @ Q.T
    return X.to(dtype)


def whitening_residual(P: Tensor, C: Tensor, damping: float = 0.0) -> float:
    r"""``‖I − P (C + λI) P‖_F / √n`` in float64, ``λ = damping·tr(C)/n``: how far ``P`` is
    from whitening the (damped) covariance ``C``.

    0 for the exact ``(C + λI)^{-1/2}``; it is the RMS deviation from 1 of the eigenvalues
    of the whitened covariance, so ``0.01`` means whitened to about 1%, and values near 1
    mean not whitened at all.
    """
    P64 = P.to(torch.float64)
    A = C.to(torch.float64)
    A = 0.5 * (A + A.mT)
    n = A.shape[-1]
    if damping:
        A = A + damping * torch.diagonal(A, dim1=-2, dim2=-1).mean(-1)[..., None, None] * torch.eye(n, dtype=A.dtype)
    R = torch.eye(n, dtype=A.dtype) - P64 @ A @ P64
    return float(torch.linalg.matrix_norm(R).amax()) / math.sqrt(n)


def newton_inverse_sqrt_in(C: Tensor, steps: int, compute_dtype: torch.dtype, damping: float = 0.0) -> Tensor:
    r"""``(C + λI)^{-1/2}`` by ``steps`` coupled Newton iterations carried out *in* ``compute_dtype``.

    The iteration of :func:`isolab.linalg.inverse_sqrt_newton` (cold start): ``Y₀ = A/s``,
    ``Z₀ = I``, ``T = (3I − ZY)/2``, ``Y ← YT``, ``Z ← TZ``, result ``Z/√s`` with
    ``s = ‖A‖_F``. The library function computes half precision in float32 on purpose; this
    one does not, so that the chapter can show what happens to the iteration in bfloat16
    (every product rounded to 8 significant bits). Returns float32.
    """
    if not isinstance(steps, int) or steps < 0:
        raise ValueError(f"steps must be an int >= 0, got {steps!r}")
    A = C.to(torch.float64)
    A = 0.5 * (A + A.mT)
    n = A.shape[-1]
    I64 = torch.eye(n, dtype=torch.float64)
    if damping:
        A = A + damping * torch.diagonal(A).mean() * I64
    s = torch.linalg.matrix_norm(A)
    Y = (A / s).to(compute_dtype)
    Z = I64.to(compute_dtype)
    I = I64.to(compute_dtype)
    for _ in range(steps):
        T = 0.5 * (3 * I - Z @ Y)
        Y, Z = Y @ T, T @ Z
    Z = Z.to(torch.float32)
    return 0.5 * (Z + Z.mT) / s.sqrt().to(torch.float32)




def first_root_gain(rows: int, d: int = 64, *, damping: float = 1e-3, shrinkage: bool = True, draws: int = 20,
                    seed: int = 0) -> float:
    r"""How far the first whitening of a layer can amplify a direction: the largest gain of
    ``(Ĉ + δ·tr(Ĉ)/d·I)^{-1/2}`` relative to a direction of average variance,
    ``sqrt(tr(Ĉ)/d) · λ_min(Ĉ + δ·tr(Ĉ)/d·I)^{-1/2}``, for ``Ĉ`` the covariance of ``rows``
    isotropic Gaussian rows in ``d`` dimensions (the first statistics step, when the running
    average holds one batch), with the damping IsoAdam applies (:func:`isolab.optim.covariance.effective_damping`:
    raised towards ``d/(d + rows)`` while ``rows < d`` when ``shrinkage`` is on). The median
    over ``draws`` batches, float64.

    Marchenko–Pastur puts the smallest eigenvalue of ``Ĉ`` near ``(1 - sqrt(d/rows))^2`` of
    the mean: near zero at ``rows = d``, where the shrinkage is off, so the gain there is
    about ``δ^{-1/2}``, the most any row count gives."""
    from isolab.optim.covariance import effective_damping

    gen = torch.Generator().manual_seed(seed)
    delta = effective_damping({"damping": damping, "shrinkage": shrinkage}, rows, d, rows)
    gains = []
    for _ in range(draws):
        X = torch.randn(rows, d, generator=gen, dtype=torch.float64)
        C = X.T @ X / rows
        scale = float(torch.diagonal(C).mean())
        smallest = float(torch.linalg.eigvalsh(C)[0]) + delta * scale
        gains.append((scale / smallest) ** 0.5)
    return float(torch.tensor(gains).median())
