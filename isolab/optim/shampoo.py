"""Shampoo: two-sided preconditioning by the inverse fourth roots of gradient Grams."""

from __future__ import annotations

import torch

from .. import fsdp, linalg, rules, updates
from ._base import RoutedOptimizer, active_comm
from .elementwise import Writer, adam_fallback_defaults, as_float
from ._stage import MatrixJob
from ._validation import (
    check_beta,
    check_bool,
    check_dtype,
    check_float,
    check_lr,
    check_nonneg,
    check_positive_int,
)
from .failures import UNCHANGED, Failure, StepFailed

__all__ = ["Shampoo"]


class Shampoo(RoutedOptimizer):
    r"""Shampoo (Gupta, Koren & Singer, 2018) for weight matrices, AdamW for the rest.

    For each matrix parameter (torch layout ``(out, in)``, ``ndim > 2`` flattened to
    ``(shape[0], -1)``) with gradient ``g_t``:

    .. math::
        L_t &= \beta L_{t-1} + g_t g_t^\top, \qquad R_t = \beta R_{t-1} + g_t^\top g_t \\
        p_t &= p_{t-1}(1-\eta\lambda_{wd}) - \eta\, \tilde L^{-1/4}\, g_t\, \tilde R^{-1/4}

    where ``L̃^{-1/4}``, ``R̃^{-1/4}`` are recomputed every ``root_interval`` steps (and at the
    first step) by :func:`isolab.linalg.symmetric_inverse_root` with *relative* damping ``δ``:
    ``(L + δ·tr(L)/d · I)^{-1/4}``, pseudo-inverse on the null space when ``δ = 0``. ``β = 1``
    (default) is the original accumulate-forever Shampoo; with ``β = 0``, one gradient and
    ``δ = 0`` the step is ``η·msign(g)``: ``(ggᵀ)^{-1/4} g (gᵀg)^{-1/4} = U Vᵀ``.

    **Momentum** (``momentum=μ``, default 0): the preconditioned direction
    ``d_t = L̃^{-1/4} g_t R̃^{-1/4}`` is averaged, ``B_t = μ B_{t-1} + (1−μ) d_t``, and the step
    uses ``B_t / c_t`` with ``c_t = μ c_{t-1} + (1−μ)`` (``c_0 = 0``): Adam's bias correction, valid
    when a scheduler changes ``μ`` from step to step.

    **Grafting** (``graft="adam"``; default ``None``): Shampoo gives the step's *direction* and
    Adam its *size*, matrix by matrix, as Distributed Shampoo (Shi et al., 2023) trains: with
    ``v_t = β_g v_{t-1} + (1−β_g) g_t²`` and ``a_t = g_t / (\sqrt{v_t/(1−β_g^t)} + ε_g)``, the
    direction becomes ``d_t ‖a_t‖_F / ‖d_t‖_F`` before momentum, so an Adam learning rate carries
    over. Use it with ``beta < 1`` (e.g. 0.999) and ``momentum=0.9``, Distributed Shampoo's defaults.

    ``L``, ``R``, the roots and the grafting moment are kept in ``stats_dtype`` (float32, or
    float64) for any parameter dtype. Routing and the AdamW fallback are as in
    :class:`~isolab.optim.Muon`.

    Args:
        lr: ``η >= 0``.
        momentum: ``μ ∈ [0, 1)`` on the preconditioned direction.
        weight_decay: decoupled weight decay ``>= 0``.
        beta: ``β ∈ [0, 1]``, decay of the Gram accumulators.
        damping: relative damping ``δ >= 0``.
        root_interval: recompute the inverse roots every this many steps.
        graft, graft_beta2, graft_eps: ``None`` or ``"adam"``; the grafted Adam's ``β_g`` and ``ε_g``.
        stats_dtype: ``torch.float32`` or ``torch.float64``.
        sync_statistics, process_group, distribute_roots: several processes (DDP). ``L`` and ``R``
            come from the gradient, which DDP has already averaged: the replicas stay identical
            without communication. What can be shared is the work: with ``distribute_roots=True``
            and syncing on (``sync_statistics=None``: iff ``torch.distributed`` is initialized with
            more than one process; ``True`` also with one; ``False``: never), each process
            computes the roots it owns (balanced by ``d³``) and all are shared by one ``all_gather``.

    Under FSDP2 (:mod:`isolab.fsdp`) each matrix's owner keeps its ``L``, ``R``, roots and grafting
    moment and computes its direction from the gathered gradient; momentum and the step run on
    each process's rows.
    """

    algorithm = "shampoo"
    stat_keys = ("L", "R", "L_root", "R_root", "momentum_buffer", "graft_exp_avg_sq")
    _copied = RoutedOptimizer._copied + ("sync_statistics", "distribute_roots")

    def __init__(
        self, params, lr: float = 0.02, momentum: float = 0.0, *, weight_decay: float = 0.0, beta: float = 1.0,
        damping: float = 1e-6, root_interval: int = 10, graft: str | None = None, graft_beta2: float = 0.999,
        graft_eps: float = 1e-8, stats_dtype: torch.dtype = torch.float32, adam_lr: float = 3e-4,
        adam_betas: tuple[float, float] = (0.9, 0.95), adam_eps: float = 1e-8, adam_weight_decay: float = 0.0,
        embeddings=None, head="auto", others: str = "raise", sync_statistics: bool | None = None,
        process_group=None, distribute_roots: bool = True, nonfinite: str = "auto", grad_scaler=None,
    ):
        try:
            if sync_statistics is not None and not isinstance(sync_statistics, bool):
                raise ValueError(f"sync_statistics must be None, True or False, got {sync_statistics!r}")
            self.process_group = _check_group(process_group)
            self.distribute_roots = check_bool(distribute_roots, "distribute_roots")
            adam = adam_fallback_defaults(adam_lr, adam_betas, adam_eps, adam_weight_decay)
        except ValueError as e:
            raise ValueError(f"Shampoo: {e}") from None
        self.sync_statistics = sync_statistics
        defaults = dict(lr=lr, momentum=momentum, weight_decay=weight_decay, beta=beta, damping=damping,
                        root_interval=root_interval, graft=graft, graft_beta2=graft_beta2, graft_eps=graft_eps,
                        stats_dtype=stats_dtype, nonfinite=nonfinite)
        super().__init__(params, defaults, adam, embeddings=embeddings, head=head, others=others,
                         grad_scaler=grad_scaler)

    def _validate_matrix_group(self, group, gi):
        check_lr(group["lr"])
        check_float("beta", group["beta"], low=0.0, high=1.0)
        check_nonneg(group["damping"], "damping")
        check_positive_int(group["root_interval"], "root_interval")
        check_nonneg(group["weight_decay"], "weight_decay")
        check_dtype(group["stats_dtype"])
        check_beta(group["momentum"], "momentum")
        if group["graft"] not in (None, "adam"):
            raise ValueError(f"graft must be None or 'adam', got {group['graft']!r}")
        check_beta(group["graft_beta2"], "graft_beta2")
        check_nonneg(group["graft_eps"], "graft_eps")

    def _matrix_cost(self, p):
        """Two roots (``~(n³ + m³)``) and the two-sided product (``nm(n + m)``) per step."""
        m, n = self._out_in(p)
        return float(n**3 + m**3 + n * m * (n + m))

    def _matrix_stage(self, items, scale, mode):
        self._comm = None if self._sharding is not None else active_comm(self.sync_statistics, self.process_group,
                                                                          "Shampoo")
        return super()._matrix_stage(items, scale, mode)

    def _failure_text(self, failure):
        return {Failure.ROOT_X: "cannot compute L_root", Failure.ROOT_G: "cannot compute R_root"}.get(
            failure, "cannot compute the direction")

    def _prepare(self, items, jobs):
        """``L``, ``R`` from the whole gradient; their roots on refresh steps (by ``jobs``)."""
        todo = []
        for it in items:
            group, st = it.group, it.state
            t = st.get("step", 0) + 1
            g = it.full.reshape(it.full.shape[0], -1).to(group["stats_dtype"])
            it.new.update(step=t, L=rules.accumulate(g @ g.T, st.get("L"), group["beta"]),
                          R=rules.accumulate(g.T @ g, st.get("R"), group["beta"]))
            if "L_root" not in st or rules.refresh_due(t, group["root_interval"]):
                name = self._name(it.param, it.gi)
                for key, failure in (("L_root", Failure.ROOT_X), ("R_root", Failure.ROOT_G)):
                    M = it.new[key[0]]
                    todo.append(MatrixJob(
                        M.shape[0], lambda M=M, d=group["damping"], k=key, n=name, p=it.param: _root(M, d, k, n, p),
                        lambda R, new=it.new, k=key: new.__setitem__(k, R), failure, f"{key} for {name}",
                        dtype=M.dtype, device=M.device))
        jobs(todo)

    def _direction(self, it):
        group, st, new = it.group, it.state, it.new
        g = it.full.reshape(it.full.shape[0], -1).to(group["stats_dtype"])
        d = updates.two_sided(g, new.get("L_root", st.get("L_root")), new.get("R_root", st.get("R_root")))
        if group["graft"] == "adam":
            v = st.get("graft_exp_avg_sq")
            v = (torch.zeros_like(g) if v is None else v).lerp(g.square(), 1 - group["graft_beta2"])
            new["graft_exp_avg_sq"] = v
            adam = g / ((v / rules.bias_correction(group["graft_beta2"], new["step"])).sqrt() + group["graft_eps"])
            d = d * (torch.linalg.matrix_norm(adam) / torch.linalg.matrix_norm(d).clamp_min(torch.finfo(d.dtype).tiny))
        return d.reshape(it.full.shape)

    def _post(self, it, d, write: Writer):
        group, st = it.group, it.state
        mu = group["momentum"]
        if mu > 0 or "momentum_buffer" in st:
            if "momentum_buffer" not in st:
                st["momentum_buffer"] = torch.zeros_like(it.param, dtype=d.dtype)
                st["momentum_weight"] = 0.0
            buf = fsdp.local(st["momentum_buffer"])
            write(buf, lambda b: b.lerp_(d.reshape(b.shape), 1 - mu))
            st["momentum_weight"] = mu * st["momentum_weight"] + (1 - mu)
            d = buf / st["momentum_weight"]
        lr, w = as_float(group["lr"]), fsdp.local(it.param)

        def update(t):
            rules.decoupled_weight_decay_(t, lr, group["weight_decay"])
            return rules.descend_(t, d.reshape(t.shape), lr)

        write(w, update)


def _root(M, damping, key, name, param):
    try:
        root = linalg.symmetric_inverse_root(M, p=4, damping=damping)
    except ValueError as e:
        raise StepFailed(Failure.ROOT_X if key == "L_root" else Failure.ROOT_G,
                         f"Shampoo: cannot compute the inverse roots for {name}: {e}; {UNCHANGED}", param) from e
    if not linalg.all_finite(root):
        raise StepFailed(Failure.ROOT_X if key == "L_root" else Failure.ROOT_G,
                         f"Shampoo: non-finite {key} for {name}; {UNCHANGED}", param)
    return root


def _check_group(process_group):
    from .. import distributed

    return distributed.check_process_group(process_group)
