"""Muon: momentum, then the orthogonal polar factor of the momentum (via Newton–Schulz)."""

from __future__ import annotations

import torch

from .. import rules
from ._base import (
    adam_fallback_defaults,
    RoutedOptimizer,
    check_beta,
    check_bool,
    check_lr,
    check_nonneg,
    check_positive_int,
)

__all__ = ["Muon"]


def muon_direction(update: torch.Tensor, *, steps: int = 5, exact: bool = False, compute_dtype=None) -> torch.Tensor:
    """``msign`` of a (possibly >2-D, flattened to ``(shape[0], -1)``) update, scaled by
    ``√max(1, rows/cols)`` so that tall and wide matrices get comparable RMS updates."""
    m = update.reshape(update.shape[0], -1)
    return rules.muon_msign(m, steps=steps, exact=exact, compute_dtype=compute_dtype).reshape(update.shape)


class Muon(RoutedOptimizer):
    r"""Muon (Keller Jordan et al., 2024) with an Adam fallback for non-matrix parameters.

    For each hidden weight matrix (torch layout ``(out, in)``), with gradient ``g_t``:

    .. math::
        B_t &= \mu B_{t-1} + (1-\mu)\, g_t \\
        u_t &= (1-\mu)\, g_t + \mu B_t \ \text{(Nesterov)} \quad\text{or}\quad u_t = B_t \\
        p_t &= p_{t-1}(1-\eta\lambda) - \eta \sqrt{\max(1, \text{out}/\text{in})}\;
               \operatorname{msign}(u_t)

    where ``msign(M) = U Vᵀ`` for the thin SVD ``M = U S Vᵀ``, approximated by
    ``ns_steps`` quintic Newton–Schulz iterations (Keller Jordan's coefficients
    ``(3.4445, −4.7750, 2.0315)``; singular values end near ``[0.68, 1.13]`` rather than
    exactly 1, which is intentional) or computed exactly by SVD with ``exact=True``. The
    momentum is the exponential-average ("lerp") form of KellerJordan/Muon. A zero
    gradient gives a zero update (``msign(0) = 0``).

    Parameters with ``ndim > 2`` are flattened to ``(shape[0], -1)``. Parameters with
    ``ndim < 2`` are refused in a Muon group.

    Construction:

    - ``Muon(model, ...)``: :func:`~isolab.optim.split_parameters` routes the model's
      ``nn.Linear`` weights to Muon and embeddings, head (``head=``), biases and gains to
      an AdamW group (``algorithm='adam'``) with ``adam_lr``, ``adam_betas``,
      ``adam_eps``, ``adam_weight_decay``.
    - ``Muon(params_or_groups, ...)``: like any ``torch.optim`` optimizer; each group may
      set ``algorithm`` to ``'muon'`` (default) or ``'adam'``.

    Args:
        lr: ``η >= 0`` (0.02 default).
        momentum: ``μ ∈ [0, 1)`` (0.95 default).
        nesterov: use the Nesterov form (default True).
        ns_steps: Newton–Schulz iterations (positive int, default 5).
        exact: use the SVD polar factor instead of Newton–Schulz.
        weight_decay: decoupled weight decay ``λ >= 0``.
        compute_dtype: dtype of the Newton–Schulz iteration (``None``: the gradient's;
            ``torch.bfloat16`` is the fast choice on GPUs).
    """

    algorithm = "muon"

    def __init__(
        self,
        params,
        lr: float = 0.02,
        momentum: float = 0.95,
        nesterov: bool = True,
        ns_steps: int = 5,
        exact: bool = False,
        weight_decay: float = 0.0,
        compute_dtype: torch.dtype | None = None,
        adam_lr: float = 3e-4,
        adam_betas: tuple[float, float] = (0.9, 0.95),
        adam_eps: float = 1e-8,
        adam_weight_decay: float = 0.0,
        *,
        embeddings=None,
        head=None,
        others: str = "raise",
    ):
        defaults = dict(
            lr=lr, momentum=momentum, nesterov=nesterov, ns_steps=ns_steps, exact=exact,
            weight_decay=weight_decay, compute_dtype=compute_dtype,
        )
        adam = adam_fallback_defaults(adam_lr, adam_betas, adam_eps, adam_weight_decay)
        super().__init__(params, defaults, adam, embeddings=embeddings, head=head, others=others)

    def _validate_matrix_group(self, group, gi):
        check_lr(group["lr"])
        check_beta(group["momentum"], "momentum")
        check_bool(group["nesterov"], "nesterov")
        check_positive_int(group["ns_steps"], "ns_steps")
        check_bool(group["exact"], "exact")
        check_nonneg(group["weight_decay"], "weight_decay")

    def _prepare_matrix_groups(self, groups):
        # Gradients are already checked finite; momentum and Newton–Schulz of finite
        # inputs cannot fail, so the update is applied parameter by parameter without a
        # second copy of the state.
        def apply():
            for _, group in groups:
                lr, mu, wd = group["lr"], group["momentum"], group["weight_decay"]
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    g = p.grad
                    state = self.state[p]
                    if "momentum_buffer" not in state:
                        state["step"] = 0
                        state["momentum_buffer"] = torch.zeros_like(p)
                    state["step"] += 1
                    u = rules.momentum_(state["momentum_buffer"], g, mu, group["nesterov"])
                    d = muon_direction(u, steps=group["ns_steps"], exact=group["exact"], compute_dtype=group["compute_dtype"])
                    rules.decoupled_weight_decay_(p, lr, wd)
                    rules.descend_(p, d, lr)

        return apply
