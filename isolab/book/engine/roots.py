r"""Many small inverse square roots per step, batched and reused across steps.

Iso needs ``(C + lambda I)^{-1/2}`` of every layer's input and output-gradient covariance,
for every lane of a sweep: ``2 x layers x lanes`` matrices of size ``n x n`` (2400 for the
paper's Figure 4 setup).  Two ways, both batched (the lane rules call them on chunks of
layers, :func:`isolab.book.engine.rules_lanes.layer_chunks`, spread over the torch threads):

- ``method="eigh"``: :func:`isolab.linalg.symmetric_inverse_root` (exact, pseudo-inverse
  when undamped), what the optimizers do by default.
- ``method="newton"``: *track* the previous root ``P`` (the previous refresh's), with the
  per-matrix rule of :func:`isolab.linalg.inverse_sqrt_track` applied to the whole batch
  with masks (that function measures the worst residual of a batch; here every matrix
  gets its own decision, as the optimizer makes it one layer at a time).  With
  ``A = sym(C) + lambda I`` and ``r = ||I - P A P||_F/sqrt(n)``: keep ``P`` if
  ``r <= tol`` (default 1e-3); else take one symmetric Newton step
  ``P' = P + (P R + R P)/4`` and use it if its residual is at most ``min(r, 0.05)``
  (estimated by :func:`isolab.linalg.probe_residuals` on ``TRACK_PROBES`` fixed probe
  vectors against ``0.05/(1 + sqrt(2/k))``: the same decisions as the optimizer);
  else keep ``P`` if ``r <= 0.05`` ("stale"); else recompute (``fallback``: ``"eigh"``,
  ``"newton"`` = :func:`isolab.linalg.inverse_sqrt_newton` warm-started from ``P``, or
  ``"auto"`` = eigh on the CPU, Newton elsewhere, as :class:`isolab.optim.Iso` does).  A
  returned root's whitening residual is always measured and at most ``max(tol, 0.05)``;
  :func:`whitening_residual` measures it.

Relative damping everywhere: ``lambda = damping * tr(C)/n`` per matrix.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
from torch import Tensor

from isolab import linalg
from isolab.optim.roots import TRACK_MAX_RESIDUAL, TRACK_PROBES  # the optimizer's policy: the same decisions

__all__ = ["inverse_sqrt_batched", "whitening_residual", "TRACK_MAX_RESIDUAL"]


def _damped(C: Tensor, damping: float) -> Tensor:
    n = C.shape[-1]
    A = 0.5 * (C + C.mT)
    if damping > 0:
        lam = damping * A.diagonal(dim1=-2, dim2=-1).sum(-1) / n
        A = A + lam[..., None, None] * torch.eye(n, dtype=C.dtype, device=C.device)
    return A


def whitening_residual(C: Tensor, P: Tensor, damping: float = 0.0) -> Tensor:
    r"""``||I - P A P||_F / sqrt(n)`` per matrix (``A = C + lambda I``): how well ``P`` whitens ``C``."""
    A = _damped(C, damping)
    n = C.shape[-1]
    R = torch.eye(n, dtype=C.dtype, device=C.device) - P @ A @ P
    return torch.linalg.matrix_norm(R) / math.sqrt(n)


def inverse_sqrt_batched(
    C: Tensor,
    damping: float,
    method: str = "eigh",
    previous: Optional[Tensor] = None,
    tol: Optional[float] = None,
    fallback: str = "auto",
    stats: Optional[dict] = None,
) -> Tensor:
    r"""``(C + lambda I)^{-1/2}`` for a batch ``C`` of shape ``(..., n, n)`` (see the module docstring).

    ``previous`` (same shape) is the last roots, used by ``method="newton"``; without it the
    roots are computed from scratch (eigh on the CPU, Newton elsewhere, or per ``fallback``).
    ``stats``, if given, is a dict whose counters ``kept``, ``refined``, ``stale``,
    ``recomputed`` are incremented (for diagnostics and benchmarks).
    """
    if method == "eigh":
        if stats is not None:
            stats["recomputed"] = stats.get("recomputed", 0) + C[..., 0, 0].numel()
        return linalg.symmetric_inverse_root(C, 2, damping)
    if method != "newton":
        raise ValueError(f"method must be 'eigh' or 'newton', got {method!r}")
    if fallback not in ("auto", "newton", "eigh"):
        raise ValueError(f"fallback must be 'auto', 'newton' or 'eigh', got {fallback!r}")
    if previous is None:
        if stats is not None:
            stats["recomputed"] = stats.get("recomputed", 0) + C[..., 0, 0].numel()
        if fallback == "eigh" or (fallback == "auto" and C.device.type == "cpu"):
            return linalg.symmetric_inverse_root(C, 2, damping)
        return linalg.inverse_sqrt_newton(C, damping=damping)
    tol = 1e-3 if tol is None else float(tol)
    max_res = max(tol, TRACK_MAX_RESIDUAL)
    shape = C.shape
    n = shape[-1]
    Cf = C.reshape(-1, n, n)
    P = previous.reshape(-1, n, n)
    A = _damped(Cf, damping)

    def measure(X, A):  # R = I - X A X and ||R||_F / sqrt(n), as isolab.linalg.inverse_sqrt_track
        R = torch.matmul(X, A @ X).neg_()
        R.diagonal(dim1=-2, dim2=-1).add_(1.0)
        return R, torch.linalg.matrix_norm(R) / math.sqrt(n)

    R, r0 = measure(P, A)
    kept = r0 <= tol  # NaN compares False
    out = P.clone()
    todo = (~kept).nonzero().squeeze(-1)
    n_ref = n_stale = 0
    failed = todo[:0]
    if todo.numel():
        Pt, Rt, r0t = P[todo], R[todo], r0[todo]
        PR = Pt @ Rt
        P1 = (PR + PR.mT).mul_(0.25).add_(Pt)  # P + (P R + R P)/4
        k = TRACK_PROBES  # the optimizer's probe estimate of the refined root's residual, per matrix
        r1 = linalg.probe_residuals(A[todo], P1, k)
        bound = torch.clamp(r0t, max=max_res / (1 + math.sqrt(2 / k)))
        refined = torch.isfinite(r1) & (r1 <= bound)
        stale = ~refined & (r0t <= max_res)
        out[todo] = torch.where(refined[:, None, None], P1, Pt)
        failed = todo[~(refined | stale)]
        n_ref, n_stale = int(refined.sum()), int(stale.sum())
    if failed.numel():
        if fallback == "eigh" or (fallback == "auto" and C.device.type == "cpu"):
            out[failed] = linalg.symmetric_inverse_root(Cf[failed], 2, damping)
        else:
            Pi = P[failed]
            init = Pi if bool(torch.isfinite(Pi).all()) else None
            out[failed] = linalg.inverse_sqrt_newton(Cf[failed], damping=damping, initial=init)
    if stats is not None:
        stats["kept"] = stats.get("kept", 0) + int(kept.sum())
        stats["refined"] = stats.get("refined", 0) + n_ref
        stats["stale"] = stats.get("stale", 0) + n_stale
        stats["recomputed"] = stats.get("recomputed", 0) + int(failed.numel())
    return out.reshape(shape)
