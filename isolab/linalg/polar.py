r"""The matrix sign (orthogonal polar factor) ``msign(M) = U V^T``: exactly by SVD, and by
matmul-only Newton--Schulz iterations as in Muon, with a fixed odd polynomial per step
(Jordan's quintic, the classical cubic) or a different one per step (Polar Express).
"""

from __future__ import annotations

import math
from numbers import Real
from typing import NamedTuple, Optional, Sequence, Union

import torch
from torch import Tensor

from .base import _check_matrix, _check_steps, _work_dtype

__all__ = [
    "QUINTIC",
    "CUBIC",
    "POLAR_EXPRESS_MINIMAX",
    "POLAR_EXPRESS_SAFETY",
    "NEWTON_SCHULZ_NAMES",
    "NewtonSchulzSchedule",
    "newton_schulz_schedule",
    "msign",
    "msign_newton_schulz",
    "newton_schulz_map",
]

#: Keller Jordan's quintic Newton--Schulz coefficients ``(a, b, c)`` used by Muon: the map
#: ``s -> a s + b s^3 + c s^5`` has a steep slope at 0 and pushes singular values into
#: roughly [0.68, 1.13] after 5 steps instead of converging to exactly 1.
QUINTIC = (3.4445, -4.7750, 2.0315)

#: The classical cubic Newton--Schulz coefficients: ``s -> 1.5 s - 0.5 s^3`` converges to 1
#: (quadratically near 1) for every singular value in ``(0, sqrt(3))``.
CUBIC = (1.5, -0.5, 0.0)

#: Polar Express's odd quintics ``(a, b, c)`` for iterations 1, 2, ..., 8, as published by
#: Amsel, Persson, Musco and Gower (2025), before their safety factor. The normalized
#: singular values start in ``[l_1, u_1] = [1e-3, 1]``; iteration ``t`` uses the quintic
#: closest to 1 in the worst case (minimax) on ``[l_t, u_t]``, which maps that interval
#: onto ``[l_{t+1}, u_{t+1}] = [p(l_t), 2 - p(l_t)]``. While ``l_t < 0.0241 u_t`` the quintic
#: is fitted on ``[0.0241 u_t, u_t]`` instead and rescaled to equioscillate about 1 on
#: ``[l_t, u_t]`` (their "cushion" for finite precision: slightly smaller coefficients, for
#: ``l_6 = 0.876`` instead of 0.887). The 8th is the limit ``(15/8, -10/8, 3/8)``, repeated
#: for later iterations. ``tests/lib/test_polar_express.py`` recomputes all eight.
POLAR_EXPRESS_MINIMAX = (
    (8.28721201814563, -23.595886519098837, 17.300387312530933),
    (4.107059111542203, -2.9478499167379106, 0.5448431082926601),
    (3.9486908534822946, -2.908902115962949, 0.5518191394370137),
    (3.3184196573706015, -2.488488024314874, 0.51004894012372),
    (2.300652019954817, -1.6689039845747493, 0.4188073119525673),
    (1.891301407787398, -1.2679958271945868, 0.37680408948524835),
    (1.8750014808534479, -1.2500016453999487, 0.3750001645474248),
    (1.875, -1.25, 0.375),
)

#: Polar Express's safety factor: the matrix is divided by ``1.01 ||M||_F`` and every quintic
#: but the last is evaluated at ``s / 1.01``, so that rounding which pushes a singular value
#: slightly past the interval a polynomial was fitted on cannot blow it up.
POLAR_EXPRESS_SAFETY = 1.01


class NewtonSchulzSchedule(NamedTuple):
    """A resolved Newton--Schulz schedule (see :func:`newton_schulz_schedule`)."""

    #: one ``(a, b, c)`` per iteration
    coefficients: tuple
    #: the start is ``X_0 = M / (margin (||M||_F + eps))``
    margin: float = 1.0


def _polar_express() -> NewtonSchulzSchedule:
    f = POLAR_EXPRESS_SAFETY
    safe = tuple((a / f, b / f**3, c / f**5) for a, b, c in POLAR_EXPRESS_MINIMAX[:-1])
    return NewtonSchulzSchedule(safe + POLAR_EXPRESS_MINIMAX[-1:], f)


#: The schedules :func:`newton_schulz_schedule` knows by name: the iterations' polynomials
#: (the last one repeats) and the normalization margin.
_NAMED = {
    "jordan": NewtonSchulzSchedule((QUINTIC,)),
    "cubic": NewtonSchulzSchedule((CUBIC,)),
    "polar_express": _polar_express(),
}
NEWTON_SCHULZ_NAMES = tuple(_NAMED)

_COEFFICIENTS_HELP = (
    "an (a, b, c) triple, a non-empty sequence of (a, b, c) triples (one per iteration) or one of "
    + ", ".join(repr(n) for n in NEWTON_SCHULZ_NAMES)
)

Coefficients = Union[str, Sequence[float], Sequence[Sequence[float]]]


def _triple(value, name: str, what) -> Optional[tuple]:
    """``value`` as 3 finite floats, ``None`` if it is not a sequence of 3 numbers."""
    if isinstance(value, (str, bytes)):
        return None
    try:
        items = tuple(value)
    except TypeError:
        return None
    if len(items) != 3 or any(isinstance(v, (str, bytes, bool)) for v in items):
        return None
    try:
        triple = tuple(float(v) for v in items)
    except (TypeError, ValueError):
        return None
    if not all(math.isfinite(v) for v in triple):
        raise ValueError(f"{name} must hold finite numbers, got {what!r}")
    return triple


def newton_schulz_schedule(coefficients: Coefficients, steps: int, name: str = "coefficients") -> NewtonSchulzSchedule:
    r"""The polynomials of ``steps`` Newton--Schulz iterations, one ``(a, b, c)`` each.

    ``coefficients`` is

    - one triple ``(a, b, c)``: the same polynomial every iteration (:data:`QUINTIC`,
      :data:`CUBIC`, or any other);
    - a sequence of triples: iteration ``t`` uses the ``t``-th; past its end the last one
      repeats;
    - a name: ``"jordan"`` (:data:`QUINTIC`), ``"cubic"`` (:data:`CUBIC`) or
      ``"polar_express"`` (:data:`POLAR_EXPRESS_MINIMAX` with the safety factor
      :data:`POLAR_EXPRESS_SAFETY` applied to every polynomial but the last and to the
      normalization, as the paper runs it).

    Returns a :class:`NewtonSchulzSchedule` with exactly ``steps`` triples and the margin
    the start is divided by (1.01 for ``"polar_express"``, 1 otherwise). Raises
    ``ValueError`` naming ``name`` and the value passed when ``coefficients`` is none of
    these. An optimizer calls it once at construction to validate its option early.
    """
    steps = _check_steps(steps)
    if type(coefficients) is tuple and len(coefficients) == 3 and all(
            type(v) is float and math.isfinite(v) for v in coefficients):  # the common case, fast
        return NewtonSchulzSchedule((coefficients,) * steps)
    if isinstance(coefficients, NewtonSchulzSchedule):
        margin = coefficients.margin
        if isinstance(margin, bool) or not isinstance(margin, Real) or not (math.isfinite(margin) and margin > 0):
            raise ValueError(f"{name}: a schedule's margin must be a finite number > 0, got {coefficients!r}")
        triples = tuple(_triple(t, name, coefficients) for t in coefficients.coefficients)
        if not triples or any(t is None for t in triples):
            raise ValueError(f"{name}: a schedule needs one or more (a, b, c) triples, got {coefficients!r}")
        schedule = NewtonSchulzSchedule(triples, margin)
    elif isinstance(coefficients, str):
        if coefficients not in _NAMED:
            raise ValueError(f"{name} must be {_COEFFICIENTS_HELP}; got {coefficients!r}")
        schedule = _NAMED[coefficients]
    else:
        triple = _triple(coefficients, name, coefficients)
        if triple is not None:
            schedule = NewtonSchulzSchedule((triple,))
        else:
            try:
                items = tuple(coefficients)
            except TypeError:
                raise ValueError(f"{name} must be {_COEFFICIENTS_HELP}; got {coefficients!r}") from None
            triples = tuple(_triple(t, name, coefficients) for t in items)
            if not triples or any(t is None for t in triples):
                raise ValueError(f"{name} must be {_COEFFICIENTS_HELP}; got {coefficients!r}")
            schedule = NewtonSchulzSchedule(triples)
    polys = schedule.coefficients
    chosen = tuple(polys[min(t, len(polys) - 1)] for t in range(steps))
    return NewtonSchulzSchedule(chosen, float(schedule.margin))


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


def msign_newton_schulz(
    M: Tensor,
    steps: int = 5,
    coefficients: Coefficients = QUINTIC,
    compute_dtype: Optional[torch.dtype] = None,
    eps: float = 1e-7,
) -> Tensor:
    r"""Approximate ``msign(M)`` with matmul-only Newton--Schulz iterations (Muon's way).

    ``X_0 = M / (||M||_F + eps)`` puts every singular value in ``[0, 1]``; each step

        ``A = X X^T``,  ``X <- a X + (b A + c A^2) X``

    applies the odd polynomial ``p(s) = a s + b s^3 + c s^5`` to every singular value while
    keeping the singular vectors (``X = U diag(s) V^T`` gives ``p(X) = U diag(p(s)) V^T``),
    so after ``steps`` steps the result is ``U diag(p_steps(...p_1(s / (||M||_F + eps)))) V^T``
    exactly (see :func:`newton_schulz_map`).  With :data:`QUINTIC` the singular values land
    in roughly [0.68, 1.13] after 5 steps (not 1: speed over accuracy); with :data:`CUBIC`
    they converge to 1 and the result converges to :func:`msign`.  A tall ``M`` is
    transposed first so that the Gram matrix ``A`` is the small side (cost
    ``O(rows * cols * min(rows, cols))`` per step: 3 matrix products, 2 when ``c = 0``).

    ``coefficients`` is one ``(a, b, c)`` for every step, a sequence of triples (one per
    step, the last repeating) or a name, ``"jordan"``, ``"cubic"`` or ``"polar_express"``
    (see :func:`newton_schulz_schedule`).  Polar Express (Amsel et al., 2025) changes the
    polynomial every step, each the minimax quintic for the interval of singular values
    the steps before it leave, so a few steps cover ``[1e-3, 1]``: after 5 steps every
    normalized singular value in that interval lies in [0.840, 1.124], after 6 in
    [0.9934, 1.0012]; it also divides ``X_0`` by a further 1.01.

    ``compute_dtype=None`` computes in ``M``'s own dtype: a float32 request is never
    silently downcast.  ``torch.bfloat16`` is allowed (Muon's GPU default); the result is
    always cast back to ``M.dtype``.  The zero matrix maps to zeros.
    """
    _check_matrix("M", M)
    schedule = newton_schulz_schedule(coefficients, steps)
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
    norm = torch.linalg.matrix_norm(X, keepdim=True) + eps
    X = X / (norm if schedule.margin == 1.0 else norm * schedule.margin)
    # The same polynomial with fused multiply-adds: B = b A + c A^2 and X <- a X + B X as
    # (batched) addmm calls, which halves the cost on small matrices (no elementwise passes);
    # a cubic (c = 0) is X <- a X + b A X, without A^2.
    shape = X.shape
    X = X.reshape(-1, shape[-2], shape[-1]) if X.ndim != 2 else X
    addmm = torch.addmm if X.ndim == 2 else torch.baddbmm
    for a, b, c in schedule.coefficients:
        A = X @ X.mT
        if c == 0.0:
            X = addmm(X, A, X, beta=a, alpha=b)
        else:
            B = addmm(A, A, A, beta=b, alpha=c)
            X = addmm(X, B, X, beta=a)
    X = X.reshape(shape)
    if transposed:
        X = X.mT
    return X.to(M.dtype)


def newton_schulz_map(s: Tensor, steps: int, coefficients: Coefficients = QUINTIC) -> Tensor:
    r"""The scalar map that ``steps`` Newton--Schulz iterations apply to each singular value.

    ``s <- a_t s + b_t s^3 + c_t s^5`` for ``t = 1, ..., steps``, with the polynomials of
    :func:`newton_schulz_schedule` (the same ``coefficients`` as
    :func:`msign_newton_schulz`), after dividing ``s`` by the schedule's margin (1.01 for
    ``"polar_express"``, else 1).  :func:`msign_newton_schulz` first divides ``M`` by
    ``||M||_F + eps``, so pass ``s / (||M||_F + eps)`` to reproduce its singular values;
    for plotting, ``s`` is a grid on ``[0, 1]``.  Elementwise on any tensor; returns a new
    tensor.
    """
    if not isinstance(s, Tensor):
        raise TypeError(f"s must be a torch.Tensor, got {type(s).__name__}")
    schedule = newton_schulz_schedule(coefficients, steps)
    out = s.clone() if schedule.margin == 1.0 else s / schedule.margin
    for a, b, c in schedule.coefficients:
        sq = out * out
        out = out * (a + sq * (b + c * sq))
    return out
