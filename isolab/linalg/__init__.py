r"""Matrix functions behind Muon, Shampoo and Iso: pure, batched, device- and dtype-agnostic.

Every function treats the last two dimensions as the matrix and all leading dimensions as
a batch, creates its constants on the input's device and dtype, never modifies its inputs
and keeps no state.  Half-precision inputs (``float16``/``bfloat16``) are computed in
``float32`` and cast back, except in :func:`msign_newton_schulz`, whose compute dtype is
the caller's explicit choice.

Row convention: a batch of inputs ``X`` has shape ``(..., b, n)`` (``b`` samples of ``n``
features), ``Cov(X) = X^T X / b``.

Contents, one module per purpose (every name is importable from ``isolab.linalg``):

- ``polar``: :func:`msign`, :func:`msign_newton_schulz`, :func:`newton_schulz_map`,
  :func:`newton_schulz_schedule`: the matrix sign (polar factor)
  ``msign(M) = M (M^T M)^{-1/2} = U V^T``, exactly and Muon-style, with Jordan's quintic,
  the cubic or Polar Express's per-step quintics.
- ``roots``: :func:`symmetric_inverse_root`, :func:`inverse_sqrt`,
  :func:`inverse_sqrt_eig`, :func:`covariance_from_inverse_sqrt`:
  ``(C + lambda I)^{-1/p}`` by ``eigh``, with relative damping, pseudo-inverse semantics
  and a float64 retry, and the covariance back from its root.
- ``newton``: :func:`inverse_sqrt_newton`, :func:`inverse_sqrt_newton_info`: the same
  inverse square root by matmul-only coupled Newton--Schulz iterations (GPU-friendly),
  with a warm start.
- ``tracking``: :func:`inverse_sqrt_track`, :func:`inverse_sqrt_in_basis`,
  :func:`probe_residuals`: follow a slowly drifting ``(C + lambda I)^{-1/2}`` with a few
  matmuls and a *measured* residual bound (``root=None`` when the bound cannot be met:
  the caller recomputes).
- ``whitening``: :func:`covariance`, :func:`whiten`, :func:`canonical_correlations`.
- ``base``: :func:`all_finite`, :func:`gram`, :func:`random_orthogonal` and the argument
  checks the other modules share.
"""

from .base import (  # noqa: F401 (private helpers other isolab modules import from here)
    GRAM_BLOCK,
    _check_damping,
    _check_matrix,
    _eigh_with_retry,
    all_finite,
    gram,
    random_orthogonal,
)
from .newton import NewtonInverseSqrt, inverse_sqrt_newton, inverse_sqrt_newton_info
from .polar import (
    CUBIC,
    NEWTON_SCHULZ_NAMES,
    POLAR_EXPRESS_MINIMAX,
    POLAR_EXPRESS_SAFETY,
    QUINTIC,
    NewtonSchulzSchedule,
    msign,
    msign_newton_schulz,
    newton_schulz_map,
    newton_schulz_schedule,
)
from .roots import (  # noqa: F401
    _inverse_root_absolute,
    covariance_from_inverse_sqrt,
    inverse_sqrt,
    inverse_sqrt_eig,
    symmetric_inverse_root,
)
from .tracking import TrackedInverseSqrt, inverse_sqrt_in_basis, inverse_sqrt_track, probe_residuals
from .whitening import canonical_correlations, covariance, whiten

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
