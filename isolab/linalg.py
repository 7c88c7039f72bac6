r"""Matrix functions behind Muon, Shampoo and Iso: pure, batched, device- and dtype-agnostic.

Every function treats the last two dimensions as the matrix and all leading dimensions as
a batch, creates its constants on the input's device and dtype, never modifies its inputs
and keeps no state.  Half-precision inputs (``float16``/``bfloat16``) are computed in
``float32`` and cast back, except in :func:`msign_newton_schulz`, whose compute dtype is
the caller's explicit choice.

Row convention: a batch of inputs ``X`` has shape ``(..., b, n)`` (``b`` samples of ``n``
features), ``Cov(X) = X^T X / b``.

Contents
--------
- :func:`msign`, :func:`msign_newton_schulz`, :func:`newton_schulz_map`: the matrix sign
  (polar factor) ``msign(M) = M (M^T M)^{-1/2} = U V^T``, exactly and Muon-style.
- :func:`symmetric_inverse_root`, :func:`inverse_sqrt`: ``(C + lambda I)^{-1/p}`` by
  ``eigh``, with relative damping, pseudo-inverse semantics and a float64 retry.
- :func:`inverse_sqrt_newton`, :func:`inverse_sqrt_newton_info`: the same inverse square
  root by matmul-only coupled Newton--Schulz iterations (GPU-friendly), with a warm start.
- :func:`inverse_sqrt_track`: follow a slowly drifting ``(C + lambda I)^{-1/2}`` from the
  previous root with a few matmuls and a *measured* residual bound (``None`` when the
  bound cannot be met: the caller recomputes).
- :func:`covariance`, :func:`whiten`, :func:`canonical_correlations`.
"""

from __future__ import annotations

import functools
import math
from numbers import Real
from typing import NamedTuple, Optional, Sequence

import torch
from torch import Tensor

__all__ = [
    "QUINTIC",
    "CUBIC",
    "msign",
    "msign_newton_schulz",
    "newton_schulz_map",
    "symmetric_inverse_root",
    "inverse_sqrt",
    "inverse_sqrt_newton",
    "inverse_sqrt_newton_info",
    "NewtonInverseSqrt",
    "inverse_sqrt_track",
    "inverse_sqrt_eig",
    "inverse_sqrt_in_basis",
    "all_finite",
    "probe_residuals",
    "gram",
    "GRAM_BLOCK",
    "covariance_from_inverse_sqrt",
    "TrackedInverseSqrt",
    "covariance",
    "whiten",
    "canonical_correlations",
    "random_orthogonal",
]

#: Keller Jordan's quintic Newton--Schulz coefficients ``(a, b, c)`` used by Muon: the map
#: ``s -> a s + b s^3 + c s^5`` has a steep slope at 0 and pushes singular values into
#: roughly [0.68, 1.13] after 5 steps instead of converging to exactly 1.
QUINTIC = (3.4445, -4.7750, 2.0315)

#: The classical cubic Newton--Schulz coefficients: ``s -> 1.5 s - 0.5 s^3`` converges to 1
#: (quadratically near 1) for every singular value in ``(0, sqrt(3))``.
CUBIC = (1.5, -0.5, 0.0)

_HALF = (torch.float16, torch.bfloat16)


# ----------------------------------------------------------------------------- helpers
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


# ----------------------------------------------------------------------------- msign
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


def _check_steps(steps, name: str = "steps") -> int:
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ValueError(f"{name} must be an int >= 0, got {steps!r}")
    return steps


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


# ----------------------------------------------------------------------------- inverse roots
def _inverse_root_absolute(C: Tensor, p: float, lam: Optional[Tensor], what: str) -> tuple[Tensor, Tensor]:
    """``((sym(C) + lam I)^{-1/p}, V)`` with an *absolute* shift ``lam`` (``(..., 1, 1)`` or None) and the eigenvectors."""
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


def _residual(R: Tensor) -> float:
    n = R.shape[-1]
    return float(torch.linalg.matrix_norm(R).amax()) / math.sqrt(n)


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


class TrackedInverseSqrt(NamedTuple):
    """Result of :func:`inverse_sqrt_track`."""

    #: the root to use, or ``None`` when no candidate meets ``max_residual`` (recompute)
    root: Optional[Tensor]
    #: ``||I - P A P||_F / sqrt(n)`` of the returned root (of the best candidate when ``root`` is None)
    residual: float
    #: ``"kept"`` (previous root already within ``tol``), ``"refined"`` (one Newton step),
    #: ``"stale"`` (the step did not help; the previous root is within ``max_residual``)
    #: or ``"failed"``
    status: str


def inverse_sqrt_track(
    C: Tensor,
    previous: Tensor,
    damping: float = 0.0,
    tol: float = 1e-3,
    max_residual: float = 0.05,
    probes: Optional[int] = None,
) -> TrackedInverseSqrt:
    r"""Follow ``(C + lambda I)^{-1/2}`` (``lambda = damping * tr(C)/n``) from a nearby root.

    For a covariance that drifts slowly between calls (an EMA with ``beta ~ 0.95`` refreshed
    every step), the previous root ``P`` is almost right.  With ``A = sym(C) + lambda I``:

    1. **Measure** ``R = I - P A P`` (2 matmuls); ``r = ||R||_F / sqrt(n)`` is the RMS
       deviation of the eigenvalues of the whitened covariance ``P A P`` from 1.  If
       ``r <= tol``: return ``P`` (``"kept"``).
    2. **Refine** by one symmetric Newton step on ``X A X = I``,
       ``P' = P + (P R + R P)/4`` (1 matmul, ``R P = (P R)^T``), and **measure** ``P'``
       (2 matmuls).  Return ``P'`` (``"refined"``) if its residual is at most
       ``min(r, max_residual)``; else return ``P`` if ``r <= max_residual`` (``"stale"``);
       else ``root=None`` (``"failed"``): the caller must recompute (eigh or
       :func:`inverse_sqrt_newton`).

    With ``probes=k`` the refined root is measured on ``k`` fixed Gaussian probe vectors
    instead (Hutchinson: ``||R' V||_F^2 / k`` estimates ``||R'||_F^2`` without bias, relative
    standard deviation at most ``sqrt(2/k)``; the probes come from a seeded generator, so
    the result is deterministic): ``3 k n^2`` multiply-adds instead of two matmuls, so a
    refinement costs 3 matmuls instead of 5. The estimate is accepted only against
    ``max_residual / (1 + sqrt(2/k))``, two worst-case standard deviations of the estimated
    residual below the bound (the optimizers use ``k = 32``: ``max_residual / 1.25``).

    **Guarantee**: a returned root ``P`` always has a *measured* residual
    ``||I - P A P||_F/sqrt(n) <= max(tol, max_residual)`` with respect to the current ``A``
    (computed in ``C``'s working precision; with ``probes``, a refined root's residual is the
    probe estimate, accepted with the margin above), so the whitening error is bounded, never
    silent.  **Accuracy**: the error component of ``P - A^{-1/2}`` that commutes with ``A``
    shrinks quadratically per step; a component between eigen-directions whose root values
    differ by a ratio ``r`` is multiplied by ``(r + 1/r - 2)/4`` (the step is the exact
    Newton step only for commuting errors: the exact one solves a Sylvester equation), so
    it shrinks for ``cond(A) < 34`` and *grows* beyond (``P (P A P)^{-1/2}`` is no help:
    it whitens, but equals ``A^{-1/2} Q`` for a rotation ``Q``).  For well-conditioned or
    slowly drifting statistics the residual settles at roughly the per-call drift of
    ``P A P``; for ill-conditioned ones the guard returns ``None`` and the caller pays a
    full recompute.  ``tests/lib/test_linalg_tracking.py`` measures both against ``eigh`` in
    float64.  Cost: 2 matmuls when kept, 5 when refined (3 with ``probes``).  Not batched over
    leading dimensions beyond what ``@`` broadcasts (the residual is the worst over the batch).
    """
    _check_matrix("C", C, square=True)
    _check_matrix("previous", previous, square=True)
    if probes is not None and (isinstance(probes, bool) or not isinstance(probes, int) or probes < 1):
        raise ValueError(f"probes must be None or a positive int, got {probes!r}")
    damping = _check_damping(damping)
    if previous.shape[-2:] != C.shape[-2:]:
        raise ValueError(f"previous must have the matrix shape of C {tuple(C.shape[-2:])}, got {tuple(previous.shape)}")
    for name, v in (("tol", tol), ("max_residual", max_residual)):
        if isinstance(v, bool) or not isinstance(v, Real) or not v > 0:
            raise ValueError(f"{name} must be a real number > 0, got {v!r}")
    work_dtype = _work_dtype(C.dtype)
    A = _symmetrize(C.to(work_dtype))  # a new tensor: the in-place shift below is safe
    if damping > 0:
        A.diagonal(dim1=-2, dim2=-1).add_(damping * _mean_trace(A)[..., 0])
    P = previous.to(device=A.device, dtype=work_dtype)

    def measure(X):
        R = torch.matmul(X, A @ X).neg_()  # R = I - X A X, in place: one pass over n^2 entries
        R.diagonal(dim1=-2, dim2=-1).add_(1.0)
        return R, _residual(R)

    R, r0 = measure(P)
    if not math.isfinite(r0):
        return TrackedInverseSqrt(None, r0, "failed")
    if r0 <= tol:
        return TrackedInverseSqrt(P.to(C.dtype), r0, "kept")
    PR = P @ R
    P1 = (PR + PR.mT).mul_(0.25).add_(P)  # P + (P R + R P)/4, symmetric by construction
    if probes is None:
        _, r1 = measure(P1)
        bound = min(r0, max_residual)
    else:
        r1 = _probe_residual(A, P1, probes)
        bound = min(r0, max_residual / (1 + math.sqrt(2 / probes)))
    if math.isfinite(r1) and r1 <= bound:
        return TrackedInverseSqrt(P1.to(C.dtype), r1, "refined")
    if r0 <= max_residual:
        return TrackedInverseSqrt(P.to(C.dtype), r0, "stale")
    return TrackedInverseSqrt(None, min(r0, r1) if math.isfinite(r1) else r0, "failed")


def inverse_sqrt_in_basis(
    C: Tensor,
    basis: Tensor,
    damping: float = 0.0,
    max_residual: float = 0.05,
    probes: int = 32,
) -> TrackedInverseSqrt:
    r"""``(C + lambda I)^{-1/2}`` to first order in a nearly diagonalizing orthogonal ``basis``.

    With ``A = sym(C) + lambda I`` (``lambda = damping * tr(C)/n``) and ``V = basis`` the
    eigenvectors of an earlier, nearby ``A`` (from :func:`inverse_sqrt_eig`), the rotated
    matrix ``Ã = V^T A V = D + E`` is diagonal ``D = diag(a)`` up to a small off-diagonal
    drift ``E``.  The Fréchet derivative of ``f(x) = x^{-1/2}`` at a diagonal matrix acts
    entrywise through divided differences, ``(f(a_i) − f(a_j))/(a_i − a_j) = −q_i^2 q_j^2 /
    (q_i + q_j)`` with ``q = a^{-1/2}``, so

        ``Ã^{-1/2} = diag(q) − E ⊙ K + O(||E||^2)``,  ``K_ij = q_i^2 q_j^2 / (q_i + q_j)``,

    and the root is ``V (diag(q) − E ⊙ K) V^T``: 4 matmuls, no factorization.  Unlike the
    symmetric Newton step of :func:`inverse_sqrt_track` this is the exact linearization for
    every pair of eigen-directions, so it stays accurate at any condition number (measured on
    ReLU features at cond 700: residual 0.002–0.005 where the Newton step reaches 0.013–0.09).
    The error grows with the drift since ``V`` was computed; the residual ``||I − P A P||_F /
    sqrt(n)`` is estimated on ``probes`` fixed Gaussian vectors (see
    :func:`inverse_sqrt_track`) and the root is returned (status ``"refined"``) only when the
    estimate is at most ``max_residual / (1 + sqrt(2/probes))``; otherwise ``root=None``
    (``"failed"``: recompute with :func:`inverse_sqrt_eig`, which also renews the basis).
    A diagonal entry ``a_i <= 0`` (singular ``C`` without damping) also fails.
    """
    _check_matrix("C", C, square=True)
    _check_matrix("basis", basis, square=True)
    damping = _check_damping(damping)
    if basis.shape[-2:] != C.shape[-2:]:
        raise ValueError(f"basis must have the matrix shape of C {tuple(C.shape[-2:])}, got {tuple(basis.shape)}")
    if isinstance(max_residual, bool) or not isinstance(max_residual, Real) or not max_residual > 0:
        raise ValueError(f"max_residual must be a real number > 0, got {max_residual!r}")
    if isinstance(probes, bool) or not isinstance(probes, int) or probes < 1:
        raise ValueError(f"probes must be a positive int, got {probes!r}")
    work_dtype = _work_dtype(C.dtype)
    A = _symmetrize(C.to(work_dtype))
    if damping > 0:
        A.diagonal(dim1=-2, dim2=-1).add_(damping * _mean_trace(A)[..., 0])
    V = basis.to(device=A.device, dtype=work_dtype)
    At = V.mT @ (A @ V)
    a = At.diagonal(dim1=-2, dim2=-1)
    if not bool((a > 0).all()):
        return TrackedInverseSqrt(None, math.inf, "failed")
    q = a.rsqrt()
    q2 = q * q
    K = (q2.unsqueeze(-1) * q2.unsqueeze(-2)).div_(q.unsqueeze(-1) + q.unsqueeze(-2))
    Pt = At.mul_(K).neg_()  # -E ⊙ K off the diagonal (At is not used again)
    Pt.diagonal(dim1=-2, dim2=-1).copy_(q)
    P = V @ (Pt @ V.mT)
    P = _symmetrize(P)
    r = _probe_residual(A, P, probes)
    if math.isfinite(r) and r <= max_residual / (1 + math.sqrt(2 / probes)):
        return TrackedInverseSqrt(P.to(C.dtype), r, "refined")
    return TrackedInverseSqrt(None, r, "failed")


@functools.lru_cache(maxsize=32)
def _probes(n: int, k: int, dtype: torch.dtype, device: torch.device) -> Tensor:
    """``k`` fixed Gaussian probe vectors of length ``n`` (seeded: the same on every call)."""
    gen = torch.Generator(device="cpu").manual_seed(0x150)
    return torch.randn(n, k, generator=gen, dtype=torch.float64).to(device=device, dtype=dtype)


def probe_residuals(A: Tensor, P: Tensor, k: int) -> Tensor:
    r"""Hutchinson estimates of ``||I - P A P||_F / sqrt(n)``, one per matrix of the batch.

    ``||R V||_F^2 / k`` with ``k`` fixed Gaussian probe vectors ``V`` (seeded: the same on
    every call) estimates ``||R||_F^2`` without bias, with relative standard deviation at
    most ``sqrt(2/k)``; cost ``3 k n^2`` multiply-adds per matrix instead of two matmuls.
    Shared by :func:`inverse_sqrt_track`, :func:`inverse_sqrt_in_basis` and the engine's
    batched tracker, so that all of them make the same decisions.
    """
    n = A.shape[-1]
    V = _probes(n, k, A.dtype, A.device)
    RV = V - P @ (A @ (P @ V))
    return (RV.square().sum(dim=(-2, -1)) / (k * n)).sqrt()


def _probe_residual(A: Tensor, P: Tensor, k: int) -> float:
    """The worst :func:`probe_residuals` over the batch, as a float."""
    return float(probe_residuals(A, P, k).amax())


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


# ----------------------------------------------------------------------------- statistics
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
