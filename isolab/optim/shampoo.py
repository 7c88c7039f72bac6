"""Shampoo: two-sided preconditioning by the inverse fourth roots of gradient Grams."""

from __future__ import annotations

import torch

from .. import linalg, rules, updates
from ._base import (
    adam_fallback_defaults,
    RoutedOptimizer,
    check_dtype,
    check_float,
    check_lr,
    check_nonneg,
    check_positive_int,
)

__all__ = ["Shampoo"]


class Shampoo(RoutedOptimizer):
    r"""Shampoo (Gupta, Koren & Singer, 2018) for weight matrices, Adam for the rest.

    For each matrix parameter (torch layout ``(out, in)``, ``ndim > 2`` flattened to
    ``(shape[0], -1)``) with gradient ``g_t``:

    .. math::
        L_t &= \beta L_{t-1} + g_t g_t^\top, \qquad R_t = \beta R_{t-1} + g_t^\top g_t \\
        p_t &= p_{t-1}(1-\eta\lambda_{wd}) - \eta\, \tilde L^{-1/4}\, g_t\, \tilde R^{-1/4}

    where ``L̃^{-1/4}``, ``R̃^{-1/4}`` are recomputed every ``root_interval`` steps (and at
    the first step) by :func:`isolab.linalg.symmetric_inverse_root` with *relative*
    damping ``δ``: ``(L + δ·tr(L)/d · I)^{-1/4}``, pseudo-inverse on the null space when
    ``δ = 0``. ``β = 1`` (default) is the original accumulate-forever Shampoo; with
    ``β = 0``, one gradient and ``δ = 0`` the step is ``η·msign(g)``:
    ``(ggᵀ)^{-1/4} g (gᵀg)^{-1/4} = U Vᵀ``.

    ``L``, ``R`` and the roots are kept in ``stats_dtype`` (float32 default, float64 on
    request) for any parameter dtype, in ``self.state[p]`` (so a resumed run continues
    exactly). Routing and the Adam fallback are as in :class:`~isolab.optim.Muon`.

    Args:
        lr: ``η >= 0``.
        beta: ``β ∈ [0, 1]``, decay of the Gram accumulators.
        damping: relative damping ``δ >= 0``.
        root_interval: recompute the inverse roots every this many steps.
        weight_decay: decoupled weight decay ``>= 0``.
    """

    algorithm = "shampoo"
    stat_keys = ("L", "R", "L_root", "R_root")

    def __init__(
        self,
        params,
        lr: float = 0.02,
        beta: float = 1.0,
        damping: float = 1e-6,
        root_interval: int = 10,
        weight_decay: float = 0.0,
        stats_dtype: torch.dtype = torch.float32,
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
            lr=lr, beta=beta, damping=damping, root_interval=root_interval,
            weight_decay=weight_decay, stats_dtype=stats_dtype,
        )
        adam = adam_fallback_defaults(adam_lr, adam_betas, adam_eps, adam_weight_decay)
        super().__init__(params, defaults, adam, embeddings=embeddings, head=head, others=others)

    def _validate_matrix_group(self, group, gi):
        check_lr(group["lr"])
        check_float("beta", group["beta"], low=0.0, high=1.0)
        check_nonneg(group["damping"], "damping")
        check_positive_int(group["root_interval"], "root_interval")
        check_nonneg(group["weight_decay"], "weight_decay")
        check_dtype(group["stats_dtype"])

    def _prepare_matrix_groups(self, groups):
        plans = []
        for gi, group in groups:
            beta, dtype = group["beta"], group["stats_dtype"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                st = self.state[p]
                t = st.get("step", 0) + 1
                g = p.grad.reshape(p.shape[0], -1).to(dtype)
                L = rules.accumulate(g @ g.T, st.get("L"), beta)
                R = rules.accumulate(g.T @ g, st.get("R"), beta)
                new = {"step": t, "L": L, "R": R}
                if "L_root" not in st or rules.refresh_due(t, group["root_interval"]):
                    name = self._name(p, gi)
                    try:
                        new["L_root"] = linalg.symmetric_inverse_root(L, p=4, damping=group["damping"])
                        new["R_root"] = linalg.symmetric_inverse_root(R, p=4, damping=group["damping"])
                    except ValueError as e:
                        raise FloatingPointError(
                            f"Shampoo: cannot compute the inverse roots for {name}: {e}; "
                            "no parameter or optimizer state was changed"
                        ) from e
                    for k in ("L_root", "R_root"):
                        if not bool(torch.isfinite(new[k]).all()):
                            raise FloatingPointError(
                                f"Shampoo: non-finite {k} for {name}; no parameter or optimizer state was changed"
                            )
                plans.append((group, p, g, new))

        def apply():
            for group, p, g, new in plans:
                st = self.state[p]
                st.update(new)
                d = updates.two_sided(g, st["L_root"], st["R_root"])
                rules.decoupled_weight_decay_(p, group["lr"], group["weight_decay"])
                rules.descend_(p, d.reshape(p.shape), group["lr"])

        return apply
