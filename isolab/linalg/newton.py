r"""The inverse square root ``(C + lambda I)^{-1/2}`` by matmul-only coupled Newton--Schulz
iterations (GPU-friendly), with a spectrally scaled warm start.
"""

from __future__ import annotations

import math
from numbers import Real
from typing import NamedTuple, Optional

import torch
from torch import Tensor

from .base import (
    _check_damping,
    _check_matrix,
    _check_steps,
    _eye_like,
    _mean_trace,
    _residual,
    _symmetrize,
    _work_dtype,
    all_finite,
)

__all__ = ["NewtonInverseSqrt", "inverse_sqrt_newton", "inverse_sqrt_newton_info"]


class NewtonInverseSqrt(NamedTuple):
    """Result of :func:`inverse_sqrt_newton_info`."""

    root: Tensor
    #: matrix iterations performed (scaled warm-start iterations included)
    iterations: int
    #: final residual: max over the batch of ``||I - Z Y||_F / sqrt(n)``
    residual: float
    #: True when ``initial`` was used to schedule spectrally scaled iterations
    warm_started: bool


def _default_tol(n: int, dtype: torch.dtype) -> float:
    return 10.0 * math.sqrt(n) * torch.finfo(dtype).eps


def _newton_gain(v: float) -> float:
    """The scalar map ``v -> v (3 - v)^2 / 4`` of one coupled Newton step on ``u = a z^2``."""
    return v * (3.0 - v) ** 2 / 4.0


def _optimal_scale(low: float, high: float) -> float:
    """The ``alpha`` maximizing ``min(f(alpha low), f(alpha high))`` with ``alpha high < 3``.

    ``f`` rises on ``[0, 1]`` and falls to 0 at 3, so the optimum equalizes the two ends
    (found by bisection); ``alpha = 1/high`` when the interval is already a point.
    """
    if high <= low * (1.0 + 1e-12):
        return 1.0 / high
    lo, hi = 1.0 / high, 3.0 / high * (1.0 - 1e-9)
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if _newton_gain(mid * low) < _newton_gain(mid * high):
            lo = mid
        else:
            hi = mid
    return lo


def _scaled_schedule(low: float, max_steps: int, switch: float = 1e-3) -> list:
    """Scales ``alpha_k`` for the eigenvalues of ``Z Y`` known to lie in ``[low, 1]``.

    Stops once the lower bound is within ``switch`` of 1 (plain steps then converge
    quadratically) or after ``max_steps``.
    """
    alphas, high = [], 1.0
    while 1.0 - low > switch and len(alphas) < max_steps:
        alpha = _optimal_scale(low, high)
        alphas.append(alpha)
        a_low, a_high = alpha * low, alpha * high
        new_low = min(_newton_gain(a_low), _newton_gain(a_high))
        high = 1.0 if a_low <= 1.0 <= a_high else max(_newton_gain(a_low), _newton_gain(a_high))
        low = new_low
    return alphas


def _lower_spectral_bound(A: Tensor, scale: Tensor, P: Tensor, power_steps: int = 8) -> float:
    """Estimate of ``lambda_min(A)/scale`` (worst over the batch) from ``P ~ A^{-1/2}``.

    ``lambda_min(A) ~ 1/||P||_2^2``; ``||P||_2`` by power iteration (an underestimate, so
    the bound is halved for safety).  An inaccurate bound only slows convergence: every
    scaled step keeps the spectrum of ``Z Y`` inside ``(0, 1]``.
    """
    n = A.shape[-1]
    v = torch.linspace(1.0, 2.0, n, dtype=A.dtype, device=A.device).expand(*A.shape[:-1]).unsqueeze(-1)
    mu = None
    for _ in range(power_steps):
        w = P @ v
        mu = torch.linalg.vector_norm(w, dim=(-2, -1)) / torch.linalg.vector_norm(v, dim=(-2, -1))
        v = w / torch.linalg.vector_norm(w, dim=(-2, -1), keepdim=True).clamp_min(torch.finfo(A.dtype).tiny)
    bound = 0.5 / (scale[..., 0, 0] * mu * mu)
    bound = torch.where(torch.isfinite(bound) & (bound > 0), bound, torch.ones_like(bound))
    return min(float(bound.amin()), 1.0)


def _coupled_newton(A: Tensor, max_steps: int, tol: float, check: bool, initial: Optional[Tensor] = None):
    """Coupled Newton--Schulz on SPD ``A``; returns ``(root, iterations, residual, warm)``."""
    I = _eye_like(A)
    scale = torch.linalg.matrix_norm(A, keepdim=True)
    zero = scale == 0
    scale = torch.where(zero, torch.ones_like(scale), scale)
    Y = A / scale
    Z = I.expand_as(A).clone()
    alphas = []
    if initial is not None:
        alphas = _scaled_schedule(_lower_spectral_bound(A, scale, initial), max_steps)
    iterations = 0
    for alpha in alphas:  # spectrally scaled steps: no checks needed, spectrum stays in (0, 1]
        T = 0.5 * (3.0 * I - alpha * (Z @ Y))
        T = torch.where(zero, I, T)
        root_alpha = math.sqrt(alpha)
        Y = root_alpha * (Y @ T)
        Z = root_alpha * (T @ Z)
        Y = torch.where(zero, 0.0, Y)
        Z = torch.where(zero, I, Z)
        iterations += 1
    previous = math.inf
    for _ in range(max_steps - iterations):
        R = torch.where(zero, 0.0, I - Z @ Y)  # a zero matrix has the zero (pseudo-)inverse root
        if check:
            residual = _residual(R)
            if residual <= tol or residual >= previous:
                break
            previous = residual
        T = I + 0.5 * R  # (3I - Z Y) / 2
        Y = Y @ T
        Z = T @ Z
        iterations += 1
    residual = _residual(torch.where(zero, 0.0, I - Z @ Y))
    root = _symmetrize(Z) / scale.sqrt()
    root = torch.where(zero, torch.zeros_like(root), root)
    return root, iterations, residual, bool(alphas)


def inverse_sqrt_newton_info(
    C: Tensor,
    damping: float = 0.0,
    steps: Optional[int] = None,
    initial: Optional[Tensor] = None,
    tol: Optional[float] = None,
) -> NewtonInverseSqrt:
    r"""``(C + lambda I)^{-1/2}`` by matmul-only Newton iterations, with diagnostics.

    Same as :func:`inverse_sqrt_newton` but returns a :class:`NewtonInverseSqrt`
    ``(root, iterations, residual, warm_started)``; see there for the mathematics.
    """
    _check_matrix("C", C, square=True)
    damping = _check_damping(damping)
    if steps is not None:
        steps = _check_steps(steps)
    if tol is not None and (isinstance(tol, bool) or not isinstance(tol, Real) or not tol > 0):
        raise ValueError(f"tol must be None or a real number > 0, got {tol!r}")
    if not all_finite(C):
        raise ValueError("inverse_sqrt_newton: C contains NaN or Inf")

    work_dtype = _work_dtype(C.dtype)
    n = C.shape[-1]
    A = _symmetrize(C.to(work_dtype))
    if damping > 0:
        A = A + damping * _mean_trace(A) * _eye_like(A)
    P = None
    if initial is not None:
        _check_matrix("initial", initial, square=True)
        if initial.shape[-2:] != C.shape[-2:]:
            raise ValueError(
                f"initial must have the matrix shape of C {tuple(C.shape[-2:])}, got {tuple(initial.shape)}"
            )
        if not all_finite(initial):
            raise ValueError("inverse_sqrt_newton: initial contains NaN or Inf")
        P = _symmetrize(initial.to(device=A.device, dtype=work_dtype)).expand_as(A)
    tol_value = _default_tol(n, work_dtype) if tol is None else float(tol)
    adaptive = steps is None or tol is not None
    max_steps = 100 if steps is None else steps

    root, iterations, residual, warm = _coupled_newton(A, max_steps, tol_value, adaptive, P)
    if adaptive and residual > math.sqrt(tol_value):
        raise ValueError(
            f"inverse_sqrt_newton did not converge: residual {residual:.3g} after {iterations} iterations "
            f"(tol {tol_value:.3g}); C is singular or too ill-conditioned for the iteration in {work_dtype} "
            "- use damping > 0, or symmetric_inverse_root (eigh, pseudo-inverse semantics)"
        )
    if not all_finite(root):
        raise ValueError("inverse_sqrt_newton: the result is not finite (C too ill-conditioned; use damping > 0)")
    return NewtonInverseSqrt(root.to(C.dtype), iterations, residual, warm)


def inverse_sqrt_newton(
    C: Tensor,
    damping: float = 0.0,
    steps: Optional[int] = None,
    initial: Optional[Tensor] = None,
    tol: Optional[float] = None,
) -> Tensor:
    r"""``(C + lambda I)^{-1/2}``, ``lambda = damping * tr(C)/n``, with matmuls only (GPU-friendly).

    **Coupled Newton--Schulz** (Higham, *Functions of Matrices*, sec. 6.3).  With
    ``A = C + lambda I`` scaled by ``s = ||A||_F`` so that its spectrum lies in ``(0, 1]``:

        ``Y_0 = A/s``, ``Z_0 = I``, ``T_k = (3I - Z_k Y_k)/2``, ``Y_{k+1} = Y_k T_k``,
        ``Z_{k+1} = T_k Z_k``,

    then ``Y_k -> (A/s)^{1/2}``, ``Z_k -> (A/s)^{-1/2}`` and the result is ``Z_k / sqrt(s)``.
    All iterates are polynomials in ``A`` (so they commute with it); on an eigenvalue of
    ``A/s`` the quantity ``u = a z^2`` (an eigenvalue of ``Z Y``) follows
    ``u <- f(u) = u (3 - u)^2 / 4``: it grows by 9/4 per step while small and converges
    quadratically near 1, so about ``log_{2.25}(cond(A)) + 5`` iterations are needed.  The
    coupled form is numerically stable (the uncoupled ``X <- X(3I - A X^2)/2`` is not).
    The residual is ``||I - Z_k Y_k||_F / sqrt(n)``.

    **Warm start** (``initial`` = the inverse root of a nearby matrix, e.g. the previous
    refresh).  Reusing a non-commuting ``P = initial`` as a *starting iterate* is not
    correct or not cheap: Newton iterations reach the right matrix function only from
    starting points that commute with ``A``; the congruence ``P A P ~ I`` changes the
    function (``P (P A P)^{-1/2}`` whitens ``A`` but equals ``A^{-1/2} Q`` for an unknown
    rotation ``Q``); and the symmetric refinement ``X <- X + (X R + R X)/4``,
    ``R = I - X A X``, damps a non-commuting error component between eigenvalues with ratio
    ``r^2`` only by the factor ``(r + 1/r - 2)/4`` per step (slower than a cold start for
    ``cond >= 10``, divergent beyond ``cond ~ 34``; measured).  So ``initial`` is used
    for what it reliably carries, the *spectrum*: ``lambda_min(A) ~ 1/||P||_2^2`` (power
    iteration, halved for safety) bounds the eigenvalues of ``Z_0 Y_0`` to ``[l, 1]``, and
    the first steps are optimally scaled,

        ``T = (3I - alpha_k Z Y)/2``, ``Y <- sqrt(alpha_k) Y T``, ``Z <- sqrt(alpha_k) T Z``,

    with ``alpha_k`` equalizing ``f(alpha_k l_k) = f(alpha_k h_k)`` (computed on the host
    from the scalar bounds).  The iterates remain polynomials in ``A``, so the answer is
    exact whatever ``initial`` is; a poor ``initial`` only costs speed.  This roughly halves
    the iterations of ill-conditioned matrices (cond 1e4: 16 -> 9 in exact arithmetic).

    **Stopping.**  ``steps=None``: iterate until the residual is below ``tol`` (default
    ``10 sqrt(n) eps``) or stops decreasing (precision floor), at most 100 iterations; a
    residual above ``sqrt(tol)`` then raises ``ValueError`` (e.g. singular ``C`` with
    ``damping=0``, whose null space makes ``Z`` grow like ``1.5^k``: use ``damping > 0`` or
    the eigh-based :func:`inverse_sqrt`, which has pseudo-inverse semantics).  An explicit
    ``steps`` with ``tol=None`` runs exactly ``steps`` iterations without per-step host
    synchronization (a fixed budget for accelerators; the caller owns the accuracy); with
    both, ``steps`` caps the adaptive loop.  A zero matrix maps to zeros.  NaN/Inf input or
    a non-finite result raises ``ValueError``.  Half precision is computed in float32.
    """
    return inverse_sqrt_newton_info(C, damping, steps, initial, tol).root
