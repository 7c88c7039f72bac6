r"""Iso's statistics over time: the covariance averages, their damping, and how many rows feed them.

For a layer with captured inputs ``X_t ∈ R^{b×n}`` and output gradients ``G_t ∈ R^{b×m}``, every
``stat_interval`` steps (counted ``k = 1, 2, …``):

    ``C_X ← β C_X + (1−β) X_tᵀX_t / b``,  ``C_G ← β C_G + (1−β) G_tᵀG_t / b``

(:func:`isolab.rules.ema`, zero-initialised), bias-corrected as Adam's moments,
``Ĉ = C / (1 − β^k)``, so that the first statistics are the batch's whatever ``β``. The inverse
roots use relative damping ``δ·tr(Ĉ)/n``, raised for batches narrower than the layer
(:func:`effective_damping`).

**Lean state** (:func:`lean`): when statistics and roots are refreshed together, only the roots
are stored, with their shifts ``λ``; the average is rebuilt at the next refresh as
``C = (P^{-2} − λI)(1 − β^k)`` (:func:`isolab.linalg.covariance_from_inverse_sqrt`, float64).
"""

from __future__ import annotations

import math

import torch

from .. import rules

__all__ = ["AUTO_ROWS", "AUTO_ROWS_PER_DIM", "row_limit", "seen_rows", "check_stat_rows", "effective_damping",
           "average", "lean", "lean_shift"]

#: ``stat_rows="auto"``: at least this many rows, and ...
AUTO_ROWS = 1024
#: ... at least this many rows per dimension of the layer's wider side.
AUTO_ROWS_PER_DIM = 2


def row_limit(group: dict, n: int, m: int) -> int | None:
    """The most rows a statistics step of a layer with ``n`` inputs and ``m`` outputs forms its
    sums from (``None``: all).

    ``"auto"``: ``max(1024, 2·max(n, m))``, so that a subsampled step never has about as many rows
    as dimensions, where a sample covariance is nearly singular (Marchenko–Pastur: with ``N = 2d``
    rows its smallest eigenvalue is about ``(1 − √½)² ≈ 0.09`` of the mean; with ``N = d`` about 0)
    while the rank-aware damping of :func:`effective_damping` is off (it acts only below ``d``).
    """
    limit = group.get("stat_rows")
    if limit == "auto":
        return max(AUTO_ROWS, AUTO_ROWS_PER_DIM * max(n, m))
    return limit


def seen_rows(group: dict, rows: int, n: int, m: int) -> int:
    """Rows behind a statistics step's sums: ``min(b, N)`` for the layer's row limit ``N``."""
    limit = row_limit(group, n, m)
    return rows if limit is None else min(rows, limit)


def check_stat_rows(value, name="stat_rows"):
    """``None`` (every row), ``"auto"`` or a positive int: the rows each layer's statistics are formed from."""
    if value is None or (isinstance(value, str) and value == "auto"):
        return value
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be None (use every row), 'auto' or a positive int, got {value!r}")
    return value


def effective_damping(group: dict, n_eff: float | None, d: int, rows: int) -> float:
    r"""The relative damping of a side of dimension ``d`` (``rows`` rows this step, ``n_eff`` rows
    behind the average).

    With ``shrinkage=True``, ``δ > 0`` and fewer rows per step than dimensions (``b < d``):
    ``δ_eff = max(δ, d / (d + n_eff))``; otherwise ``δ`` (bitwise the plain rule, so full-rank
    batches are unchanged). ``n_eff = (Σ_i w_i)² / Σ_i w_i²/b_i`` counts the rows behind the
    bias-corrected average (weights ``w_i = (1−β)β^{k−i}``, ``b_i`` rows each): ``b`` for one
    batch, about ``b(1+β)/(1−β)`` (39b at β = 0.95) in the long run.

    Why: an average of ``n_eff`` rows in ``d`` dimensions has ``d − n_eff`` unseen directions while
    ``n_eff < d``, and badly estimated small eigenvalues while ``n_eff`` is not much larger than
    ``d``. There ``(Ĉ + δ·tr(Ĉ)/d·I)^{-1/2}`` reaches ``δ^{-1/2} ≈ 32×`` (``δ = 10^{-3}``) the gain
    of a direction of average variance, on each side; roots are reused for ``root_interval``
    steps and momentum mixes in earlier batches, so later gradients do point there: at batches of
    1–8 rows below the layer width the plain rule diverged. Shrinking towards ``tr(Ĉ)/d·I`` with
    weight ``d/(d + n_eff)`` (the Ledoit–Wolf order of magnitude) bounds that gain by
    ``√(1 + n_eff/d)`` and fades as rows accumulate. With ``δ = 0`` nothing changes: the
    pseudo-inverse root ignores unseen directions.
    """
    delta = group["damping"]
    if not group.get("shrinkage", False) or delta == 0 or n_eff is None or rows >= d:
        return delta
    return max(delta, d / (d + n_eff))


def average(new_x, new_g, old_x, old_g, beta: float, state: dict, seen: int) -> dict:
    """The state entries of one statistics step: the averages ``cov_x``, ``cov_g`` (from the batch
    covariances ``new_*`` and the previous averages ``old_*``, ``None`` at the first step), the
    count ``stat_step`` and ``rows_s2 = Σ_i w_i²/b_i`` (``seen`` rows this step), from which
    :func:`effective_damping`'s ``n_eff = (1 − β^k)² / rows_s2``."""
    return dict(
        cov_x=rules.ema(new_x, old_x, beta), cov_g=rules.ema(new_g, old_g, beta),
        stat_step=state.get("stat_step", 0) + 1,
        rows_s2=beta**2 * state.get("rows_s2", 0.0) + (1 - beta) ** 2 / seen,
    )


def lean(group: dict) -> bool:
    """Store only the roots (not the averages): rebuild ``C = P^{-2} − λI`` at each refresh.

    Possible when statistics and roots are refreshed together (``stat_interval ==
    root_interval > 1``), by ``eigh``, with damping ``> 0`` (``P`` positive definite) and no
    warm-up; then each whitened matrix costs ``n² + m²`` state elements beyond Adam's.
    """
    return (group["root_method"] == "eigh" and group["damping"] > 0 and group["root_interval"] > 1
            and group["stat_interval"] == group["root_interval"] and group["warmup_steps"] == 0)


def lean_shift(C: torch.Tensor, damping: float) -> float | None:
    """The shift ``λ = δ·tr(C)/n`` a lean root is computed with, or ``None`` if not usable."""
    lam = damping * float(torch.diagonal(C).mean())
    return lam if 0 < lam < math.inf else None
