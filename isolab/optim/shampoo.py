"""Shampoo: two-sided preconditioning by the inverse fourth roots of gradient Grams."""

from __future__ import annotations

import torch

from .. import distributed, fsdp, linalg, rules, updates
from ._base import (
    adam_fallback_defaults,
    RoutedOptimizer,
    as_float,
    check_beta,
    check_bool,
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

    **Momentum** (``momentum=μ``, default 0: none, the step above exactly): the
    preconditioned direction ``d_t = L̃^{-1/4} g_t R̃^{-1/4}`` is averaged,
    ``B_t = μ_t B_{t-1} + (1−μ_t) d_t``, and the step uses ``B_t / c_t`` with
    ``c_t = μ_t c_{t-1} + (1−μ_t)`` (``c_0 = 0``): the bias correction of Adam's first moment,
    valid when ``μ`` changes from step to step. It exists so that schedulers that cycle
    momentum (``OneCycleLR(cycle_momentum=True)``, ``CyclicLR``) work on Shampoo as on
    ``torch.optim.SGD``.

    **Grafting** (``graft="adam"``; default ``None``: none): Shampoo supplies the step's
    *direction* and Adam its *size*, matrix by matrix, as Distributed Shampoo (Shi et al.,
    2023) trains. With Adam's second moment ``v_t = β_g v_{t-1} + (1−β_g) g_t²`` and
    ``a_t = g_t / (\sqrt{v_t/(1−β_g^t)} + ε_g)``, the preconditioned direction becomes
    ``d_t ‖a_t‖_F / ‖d_t‖_F`` before momentum. Then an Adam learning rate carries over,
    whatever the scale of ``L`` and ``R``; use it with ``beta < 1`` (an exponential
    average of the factors, e.g. ``beta=0.999``) and ``momentum=0.9`` for Distributed
    Shampoo's defaults.

    ``L``, ``R`` and the roots are kept in ``stats_dtype`` (float32 default, float64 on
    request) for any parameter dtype, in ``self.state[p]`` (so a resumed run continues
    exactly). Routing and the Adam fallback are as in :class:`~isolab.optim.Muon`.

    Args:
        lr: ``η >= 0``.
        beta: ``β ∈ [0, 1]``, decay of the Gram accumulators.
        damping: relative damping ``δ >= 0``.
        root_interval: recompute the inverse roots every this many steps.
        weight_decay: decoupled weight decay ``>= 0``.
        momentum: ``μ ∈ [0, 1)`` on the preconditioned direction (keyword; default 0).
        graft: ``None`` or ``"adam"`` (keyword): take the step size from Adam's.
        graft_beta2, graft_eps: the grafted Adam's ``β_g ∈ [0, 1)`` and ``ε_g >= 0``.
        sync_statistics, process_group, distribute_roots: several processes
            (``torch.distributed`` data parallelism, e.g. DDP). Shampoo's statistics
            ``L``, ``R`` are built from the gradient, which DDP has already averaged and which
            is therefore identical on every process: there is nothing to average, and the
            replicas stay identical without communication. What can be shared is the work:
            with ``distribute_roots=True`` (default) and syncing on (``sync_statistics=None``:
            iff ``torch.distributed`` is initialized with more than one process in
            ``process_group``; ``True`` also with one; ``False``: never), each process computes
            the inverse roots it owns (:func:`isolab.distributed.assign_owners`, balanced by
            ``d³``) on refresh steps and all are shared by one ``all_gather`` (upper triangles).

    Under FSDP2 (``fully_shard``, :mod:`isolab.fsdp`) each matrix has an owner process that keeps
    its ``L``, ``R``, roots and grafting moment and computes its preconditioned direction from
    the gathered gradient; the momentum and the step run on each process's rows.
    """

    algorithm = "shampoo"
    stat_keys = ("L", "R", "L_root", "R_root", "momentum_buffer", "graft_exp_avg_sq")

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
        momentum: float = 0.0,
        graft: str | None = None,
        graft_beta2: float = 0.999,
        graft_eps: float = 1e-8,
        embeddings=None,
        head="auto",
        others: str = "raise",
        sync_statistics: bool | None = None,
        process_group=None,
        distribute_roots: bool = True,
    ):
        if sync_statistics is not None and not isinstance(sync_statistics, bool):
            raise ValueError(f"sync_statistics must be None, True or False, got {sync_statistics!r}")
        self.sync_statistics = sync_statistics
        self.process_group = distributed.check_process_group(process_group)
        self.distribute_roots = check_bool(distribute_roots, "distribute_roots")
        defaults = dict(
            lr=lr, beta=beta, damping=damping, root_interval=root_interval,
            weight_decay=weight_decay, stats_dtype=stats_dtype, momentum=momentum,
            graft=graft, graft_beta2=graft_beta2, graft_eps=graft_eps,
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
        check_beta(group["momentum"], "momentum")
        if group["graft"] not in (None, "adam"):
            raise ValueError(f"graft must be None or 'adam', got {group['graft']!r}")
        check_beta(group["graft_beta2"], "graft_beta2")
        check_nonneg(group["graft_eps"], "graft_eps")

    @staticmethod
    def _inverse_fourth_root(M, damping, key, name):
        try:
            root = linalg.symmetric_inverse_root(M, p=4, damping=damping)
        except ValueError as e:
            raise FloatingPointError(
                f"Shampoo: cannot compute the inverse roots for {name}: {e}; "
                "no parameter or optimizer state was changed"
            ) from e
        if not bool(torch.isfinite(root).all()):
            raise FloatingPointError(f"Shampoo: non-finite {key} for {name}; no parameter or optimizer state was changed")
        return root

    def _compute_roots(self, jobs, comm):
        """Fill ``new[key]`` for each job ``(new, key, M, damping, name)``: all here, or each
        process the ones it owns, then shared over ``comm`` (see the class docstring)."""
        if comm is None or not self.distribute_roots or not jobs:
            for new, key, M, damping, name in jobs:
                new[key] = self._inverse_fourth_root(M, damping, key, name)
            return
        dtype = torch.float64 if any(job[2].dtype == torch.float64 for job in jobs) else torch.float32
        roots, failures = distributed.compute_on_owners(
            [lambda job=job: self._inverse_fourth_root(job[2], job[3], job[1], job[4]) for job in jobs],
            [job[2].shape[0] for job in jobs], comm, dtype=dtype, device=jobs[0][2].device,
        )
        if failures:
            i, owner, err = failures[0]
            raise FloatingPointError(
                f"Shampoo: cannot compute {jobs[i][1]} for {jobs[i][4]} (computed by rank {owner}); "
                "no parameter or optimizer state was changed on any rank"
            ) from err
        for (new, key, M, _, _), R in zip(jobs, roots):
            new[key] = R.to(M.dtype)

    @staticmethod
    def _graft_adam(st, g, d, beta2, eps):
        """``d`` rescaled to the Frobenius norm of Adam's (momentum-free) direction for ``g``."""
        if "graft_exp_avg_sq" not in st:
            st["graft_exp_avg_sq"] = torch.zeros_like(g)
        v = st["graft_exp_avg_sq"].lerp_(g.square(), 1 - beta2)
        adam = g / ((v / rules.bias_correction(beta2, st["step"])).sqrt() + eps)
        norm = torch.linalg.matrix_norm(d).clamp_min(torch.finfo(d.dtype).tiny)
        return d * (torch.linalg.matrix_norm(adam) / norm)

    def _matrix_cost(self, p):
        """Two roots (``~(n³ + m³)``) and the two-sided product (``nm(n + m)``) per step."""
        m, n = self._out_in(p)
        return float(n**3 + m**3 + n * m * (n + m))

    def _prepare_matrix_groups(self, groups):
        if self._sharding is not None:
            return self._prepare_sharded(groups)
        plans, jobs = [], []
        comm = distributed.active_group(self.sync_statistics, self.process_group, "Shampoo")
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
                    jobs.append((new, "L_root", L, group["damping"], name))
                    jobs.append((new, "R_root", R, group["damping"], name))
                plans.append((group, p, g, new))
        self._compute_roots(jobs, comm)

        def apply():
            for group, p, g, new in plans:
                st = self.state[p]
                st.update(new)
                d = updates.two_sided(g, st["L_root"], st["R_root"])
                if group["graft"] == "adam":
                    d = self._graft_adam(st, g, d, group["graft_beta2"], group["graft_eps"])
                mu = group["momentum"]
                if mu > 0 or "momentum_buffer" in st:
                    if "momentum_buffer" not in st:
                        st["momentum_buffer"] = torch.zeros_like(d)
                        st["momentum_weight"] = 0.0
                    st["momentum_buffer"].lerp_(d, 1 - mu)
                    st["momentum_weight"] = mu * st["momentum_weight"] + (1 - mu)
                    d = st["momentum_buffer"] / st["momentum_weight"]
                lr = as_float(group["lr"])
                rules.decoupled_weight_decay_(p, lr, group["weight_decay"])
                rules.descend_(p, d.reshape(p.shape), lr)

        return apply

    def _prepare_sharded(self, groups):
        """FSDP2 (:mod:`isolab.fsdp`): the full gradient on its owner, which updates ``L`` and ``R``,
        refreshes the roots when due and returns ``L̃^{-1/4} g R̃^{-1/4}`` (grafted if asked); the
        momentum and the step on each process's rows. Nothing changes before every owner succeeded."""
        items = []
        for gi, group in groups:
            for p in group["params"]:
                if p.grad is not None:
                    items.append((gi, group, p, {"step": self.state[p].get("step", 0) + 1}))
        results = []
        for dtype in sorted({group["stats_dtype"] for _, group, _, _ in items}, key=str):
            batch = [item for item in items if item[1]["stats_dtype"] == dtype]

            def compute(i, full, batch=batch):
                gi, group, p, new = batch[i]
                st, t, beta = self.state[p], new["step"], group["beta"]
                g = full.reshape(full.shape[0], -1).to(dtype)
                new["L"] = rules.accumulate(g @ g.T, st.get("L"), beta)
                new["R"] = rules.accumulate(g.T @ g, st.get("R"), beta)
                if "L_root" not in st or rules.refresh_due(t, group["root_interval"]):
                    for key, M, code in (("L_root", new["L"], 2), ("R_root", new["R"], 3)):
                        try:
                            new[key] = self._inverse_fourth_root(M, group["damping"], key, self._name(p, gi))
                        except FloatingPointError as e:
                            e.code = code
                            raise
                roots = {k: new.get(k, st.get(k)) for k in ("L_root", "R_root")}
                d = updates.two_sided(g, roots["L_root"], roots["R_root"])
                if group["graft"] == "adam":
                    v = st.get("graft_exp_avg_sq")
                    v = (torch.zeros_like(g) if v is None else v).lerp(g.square(), 1 - group["graft_beta2"])
                    new["graft_exp_avg_sq"] = v
                    adam = g / ((v / rules.bias_correction(group["graft_beta2"], t)).sqrt() + group["graft_eps"])
                    norm = torch.linalg.matrix_norm(d).clamp_min(torch.finfo(d.dtype).tiny)
                    d = d * (torch.linalg.matrix_norm(adam) / norm)
                return d.reshape(full.shape)

            rows, failures = fsdp.owner_step(
                self._sharding, [tuple(item[2].shape) for item in batch], [self._owners[id(item[2])] for item in batch],
                [fsdp.local(item[2].grad) for item in batch], compute, out_dtype=dtype,
            )
            if failures:
                i, owner, code, err = failures[0]
                key = {2: "L_root", 3: "R_root"}.get(code, "the direction")
                raise FloatingPointError(
                    f"Shampoo: cannot compute {key} for {self._name(batch[i][2], batch[i][0])} (computed by rank "
                    f"{owner}); no parameter or optimizer state was changed on any rank"
                ) from err
            results += list(zip(batch, rows))

        def apply():
            for (gi, group, p, new), d in results:
                st = self.state[p]
                st.update(new)
                mu = group["momentum"]
                if mu > 0 or "momentum_buffer" in st:
                    if "momentum_buffer" not in st:
                        st["momentum_buffer"] = torch.zeros_like(p, dtype=d.dtype)
                        st["momentum_weight"] = 0.0
                    buf = fsdp.local(st["momentum_buffer"])
                    buf.lerp_(d.reshape(buf.shape), 1 - mu)
                    st["momentum_weight"] = mu * st["momentum_weight"] + (1 - mu)
                    d = buf / st["momentum_weight"]
                lr, w = as_float(group["lr"]), fsdp.local(p)
                rules.decoupled_weight_decay_(w, lr, group["weight_decay"])
                rules.descend_(w, d.reshape(w.shape), lr)

        return apply
