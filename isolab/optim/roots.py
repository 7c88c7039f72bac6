"""Iso's inverse square roots ``(Ĉ + δ·tr(Ĉ)/n·I)^{-1/2}``, by the method a group chooses.

- ``"eigh"``: exact, pseudo-inverse on the null space when ``δ = 0``, float64 retry
  (:func:`isolab.linalg.symmetric_inverse_root`); in the lean state, eigenvalues clamped to ``≥ λ``
  so that the root stays invertible (:func:`damped_inverse_sqrt`).
- ``"newton"``: keep the previous root while its whitening residual ``‖I − P Ĉ P‖_F/√n`` is at most
  ``root_tol`` (default ``1e-3``), else one symmetric Newton step accepted only with a *measured*
  residual ``≤ max(root_tol, TRACK_MAX_RESIDUAL)`` (:func:`isolab.linalg.inverse_sqrt_track`);
  otherwise recompute: ``eigh`` on a CPU, the warm-started :func:`isolab.linalg.inverse_sqrt_newton`
  on an accelerator. Cheap (2–5 matmuls per side) for well-conditioned, slowly drifting
  statistics; it cannot follow drift that does not commute with ``Ĉ`` when ``cond(Ĉ + λI) ≳ 34``,
  and then falls back to the exact recompute.
- ``"eigenbasis"``: ``eigh`` once, then the exact first-order update in its eigenbasis (4 matmuls,
  any conditioning, :func:`isolab.linalg.inverse_sqrt_in_basis`) until the probe-estimated
  residual exceeds ``TRACK_MAX_RESIDUAL``; then a new basis.
"""

from __future__ import annotations

import torch

from .. import linalg

__all__ = ["ROOT_METHODS", "TRACK_MAX_RESIDUAL", "TRACK_PROBES", "inverse_sqrt", "damped_inverse_sqrt"]

ROOT_METHODS = ("eigh", "newton", "eigenbasis")
#: Largest whitening residual ``‖I − P Ĉ P‖_F/√n`` accepted from a tracked root.
TRACK_MAX_RESIDUAL = 0.05
#: Probe vectors that estimate a refined root's residual (3 matmuls per refresh instead of 5).
TRACK_PROBES = 32


def inverse_sqrt(C: torch.Tensor, group: dict, previous, damping: float, lean: bool):
    """``(root, basis)`` of the bias-corrected average ``C``: ``basis`` is a new eigenbasis
    (``"eigenbasis"`` when it renewed one) or ``None``. ``previous`` is the stored root
    (``"newton"``) or eigenbasis (``"eigenbasis"``). Raises ``ValueError`` when ``C`` is not finite
    or its decomposition fails; the result is finite or ``ValueError`` is raised."""
    method = group["root_method"]
    basis = None
    if method == "eigenbasis":
        R = None
        if previous is not None:
            R = linalg.inverse_sqrt_in_basis(C, previous, damping, max_residual=TRACK_MAX_RESIDUAL,
                                             probes=TRACK_PROBES).root
        if R is None:  # first root, or the basis has drifted too far: renew it
            R, basis = linalg.inverse_sqrt_eig(C, damping)
    elif method == "eigh":
        R = damped_inverse_sqrt(C, damping) if lean else linalg.symmetric_inverse_root(C, p=2, damping=damping)
    else:
        R = None
        if previous is not None:
            tol = 1e-3 if group["root_tol"] is None else group["root_tol"]
            R = linalg.inverse_sqrt_track(C, previous, damping, tol=tol, max_residual=max(tol, TRACK_MAX_RESIDUAL),
                                          probes=TRACK_PROBES).root
        if R is None:  # first root, or the tracked root failed its residual bound
            if C.device.type == "cpu":  # eigh costs ~6 matmuls at n=1024 on a CPU core: cheapest exact
                R = linalg.symmetric_inverse_root(C, p=2, damping=damping)
            else:
                R = linalg.inverse_sqrt_newton(C, damping=damping, initial=previous)
    if not linalg.all_finite(R):
        raise ValueError("the root is not finite")
    return R, basis


def damped_inverse_sqrt(C: torch.Tensor, damping: float) -> torch.Tensor:
    """``(C + λI)^{-1/2}``, ``λ = δ·tr(C)/n > 0``, by eigh, with eigenvalues clamped to ``≥ λ``.

    The lean state's root: :func:`isolab.linalg.symmetric_inverse_root` maps eigenvalues below
    ``n·eps·λ_max`` (unresolved in float32) to 0 (pseudo-inverse), which would make the root
    singular and ``C`` unrecoverable; the eigenvalues of ``C + λI`` are ``≥ λ``, so clamping to
    ``λ`` is the damped value in those directions. The root is positive definite with
    ``‖P‖₂ ≤ λ^{-1/2}``, and ``C = P^{-2} − λI`` can be rebuilt.
    """
    if not linalg.all_finite(C):
        raise ValueError("the matrix contains NaN or Inf")
    work = torch.float32 if C.dtype in (torch.float16, torch.bfloat16) else C.dtype
    A = C.to(work)
    A = 0.5 * (A + A.mT)
    lam = damping * A.diagonal().mean()
    n = A.shape[-1]
    w, V = linalg._eigh_with_retry(A + lam * torch.eye(n, dtype=work, device=A.device), "the average")
    scale = torch.maximum(w, lam.to(w.dtype)).rsqrt()
    return ((V * scale.unsqueeze(-2)) @ V.mT).to(C.dtype)
