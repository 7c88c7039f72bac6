r"""Iso and IsoAdam: two-sided whitening of each linear layer's gradient.

Our reading of the paper's Algorithms 1 and 2 (their boxes are not in the text we have;
what the text fixes is the batch formula below). For a layer ``Y = X W`` (isolab's row
convention, ``W ∈ R^{n×m}``; torch stores ``weight = Wᵀ``, shape ``(m, n)``) with
captured inputs ``X_t ∈ R^{b×n}`` and output gradients ``G_t = ∂L/∂Y ∈ R^{b×m}``:

1. **Statistics** (every ``stat_interval`` steps, counted ``k = 1, 2, ...``), exponential
   averages of the uncentered covariances, zero-initialised, kept in float32 (float64 on
   request) whatever the parameter dtype:

   ``C_X ← β C_X + (1−β) X_tᵀX_t / b``,  ``C_G ← β C_G + (1−β) G_tᵀG_t / b``.

2. **Bias correction** (as Adam's): ``Ĉ = C / (1 − β^k)``, so the first statistics are the
   batch covariances, whatever ``β``.
3. **Inverse roots** (every ``root_interval`` steps, and at the first step after warm-up)
   with relative damping ``δ``: ``P_X = (Ĉ_X + δ·tr(Ĉ_X)/n·I)^{-1/2}``, ``P_G`` likewise.
   **Rank-aware damping** (``shrinkage=True``, the default): when a step brings fewer rows
   than a side has dimensions (``b < n``: rank-deficient statistics), that side's ``δ`` is
   raised to ``max(δ, n/(n + n_eff))``, ``n_eff`` the number of rows behind the average
   (:func:`effective_damping`: the reasons, and why batches of 1–8 diverged without it);
   with ``b ≥ n``, or ``δ = 0``, the roots are bitwise those of the plain rule;
   by ``eigh`` (``root_method="eigh"``; pseudo-inverse on the null space when ``δ = 0``,
   float64 retry) or by tracking the previous root (``root_method="newton"``:
   :func:`isolab.linalg.inverse_sqrt_track` keeps it while ``‖I − P Ĉ P‖_F/√n ≤ root_tol``
   (default ``1e-3``), else takes one symmetric Newton step, and returns a root only with a
   *measured* residual ``≤ max(root_tol, 0.05)``; otherwise the root is recomputed exactly:
   ``eigh`` on a CPU, the warm-started :func:`isolab.linalg.inverse_sqrt_newton` on an
   accelerator); or by updating the root in the eigenbasis of the last ``eigh``
   (``root_method="eigenbasis"``: :func:`isolab.linalg.inverse_sqrt_in_basis`, the exact
   first-order perturbation, 4 matmuls, accurate at any conditioning; the basis is renewed
   by :func:`isolab.linalg.inverse_sqrt_eig` when the probe-estimated residual exceeds
   0.04). The tracking step is cheap (2–5 matmuls per side) and accurate for
   well-conditioned drift (measured: residual ≤ 0.009, relative error ≤ 0.4% against float64
   ``eigh`` at cond 10), but cannot follow drift that does not commute with ``Ĉ`` when
   ``cond(Ĉ + λI) ≳ 34``: there it falls back to the exact recompute, correct but not cheap.
4. **Whitened gradient**: ``Ĝ_t = P_X (∇W / b) P_G`` with ``∇W = X_tᵀG_t`` the
   parameter's ``.grad`` (in torch layout ``P_G · weight.grad / b · P_X``). Dividing by
   the number of captured rows ``b`` makes ``Ĝ_t = iso_update(X_t, G_t)`` exactly when
   the statistics are the batch's; since ``Cov(G)^{-1/2}`` cancels any scalar multiple of
   ``G``, the result does not depend on whether the loss is a mean or a sum.
5. **Iso**: Nesterov momentum on the scaled gradient *before* whitening (as Muon applies
   momentum before ``msign``), ``B ← μB + (1−μ)∇W/b``, ``u = (1−μ)∇W/b + μB``, then
   ``W ← W(1 − ηλ) − η·P_X u P_G``.
   **IsoAdam**: Adam's moments, bias correction and elementwise scaling on ``Ĝ_t``:
   ``m ← β₁m + (1−β₁)Ĝ``, ``v ← β₂v + (1−β₂)Ĝ²``,
   ``W ← W(1 − ηλ) − η·m̂/(√v̂ + ε)``; Adam's hyperparameters transfer.
6. **Warm-up**: during the first ``warmup_steps`` steps statistics are collected but the
   whitened parameters are not changed (default 0: bias correction already makes the first
   step the batch formula).

7. **Layers**: ``nn.Linear`` and ``nn.Conv1d``/``nn.Conv2d`` (``groups=1``), convolutions in
   K-FAC's patch view (:mod:`isolab.optim.statistics`: ``X`` the unfolded patches, one row
   per output position, ``∇W = XᵀG`` the kernel's gradient read as ``(C_out, C_in·k…)``).
   A matrix these hooks cannot see — ``torch.nn.MultiheadAttention``'s fused projections and
   its ``out_proj``, grouped or 3-D convolutions — goes, when the model is routed, to the
   AdamW fallback with a ``UserWarning`` naming it and the fix
   (:func:`isolab.nn.convert_attention` for attention); in explicit ``params=`` groups it is
   an error naming the fix.
8. **Gradients and statistics**: the rows used at ``step()`` are those whose backward
   produced the current ``.grad`` (:mod:`isolab.optim.statistics`): rows of a gradient cleared
   by any path (``zero_grad()`` of the optimizer or of the model, ``p.grad = None``,
   ``set_to_none`` either way) are dropped, and stepping on a ``.grad`` the rows do not
   describe (replaced, or accumulated onto the previous step's without ``zero_grad()``)
   raises ``RuntimeError`` with nothing changed.

With single-batch statistics (``β = 0``, ``μ = 0``, ``δ = 0``) Iso's step is
``η · iso_update(X, G)`` and IsoAdam's first step is ``η · iso_adam_first_step(X, G)``
(up to Adam's ``ε``; with IsoAdam's ``weight_decay=0``, its default decay adds ``−η·0.01·W``):
the paper's formula.

**Cost, and the defaults** (``stat_interval=1``, ``stat_rows="auto"``, ``root_interval=10``).
Per step and layer (``b`` rows, ``W ∈ R^{n×m}``, multiply-adds): forward and backward
``3bnm``; the statistics ``b(n² + m²)`` on statistics steps (less on a CPU, where
:func:`isolab.linalg.gram` forms one block triangle for wide layers); the roots about
``5.5(n³ + m³)`` by ``eigh`` on root steps; applying them ``nm(n + m)`` every step. On a
language model the statistics are the large term: ``b(n² + m²)/3bnm`` is ``2/3`` for a square
layer and ``17/12`` for an MLP's ``d × 4d`` matrices *whatever the batch*. The default keeps
the statistics at every step but forms them from ``N = max(1024, 2·max(n, m))`` rows drawn at
random (``stat_rows="auto"``; unbiased, see ``stat_rows``), which divides that term by ``b/N``
and leaves batches of up to ``N`` rows exactly as before; the floor of two rows per dimension
keeps a subsampled covariance away from the nearly singular ``N ≈ d``. Measured on the full-size Transformer of
``scripts/train_transformer.py`` (8192 tokens per step, one CPU thread, best of 5 interleaved
runs): the statistics of all rows added 37 % to the forward and backward pass, those of 1024
rows 3 %; the roots every 10 steps and their application cost about 3 % of AdamW's iteration
each. Over 150 steps of :mod:`isolab.book.lm`'s Transformer (2 layers, 2048 tokens per step,
3 seeds) the validation loss with 1024 rows was within 0.003 nats (0.1 %) of the loss with
all rows (``benchmarks/bench_cost.py`` and its ``--quality`` mode). The intervals were
kept because of another problem: roots every 20 steps (statistics every 10 steps, or every
step with 1024 rows) lowered that Transformer's loss by 2 %, but on a 4 × Linear(256)
teacher–student MLP (3 seeds, 300 steps) roots every 20 steps raised the final loss by 38 %,
and statistics every 10 steps with roots every 20 by 18 % (worse than AdamW). What no schedule
amortizes is applying the roots, ``(n + m)/3b`` of the forward and backward pass: 2.6 % at
``b = 8192, n + m = 640``, but 133 % for ``4 × Linear(512)`` at ``b = 256``, where no dense
two-sided whitening stays within 2 x AdamW's iteration.

What ``self.state[p]`` holds for a whitened weight: ``step``, ``stat_step``; ``cov_x``,
``cov_g`` when the average has memory (``β > 0``, ``stat_interval > 1`` or warm-up);
``root_x``, ``root_g`` when roots are reused across steps (``root_interval > 1`` or the
Newton warm start); ``basis_x``, ``basis_g`` with ``root_method="eigenbasis"``; Iso's
``momentum_buffer`` (``μ > 0``); IsoAdam's ``exp_avg``, ``exp_avg_sq``, ``adam_step``.
**Lean state**: when statistics and roots are refreshed together (``stat_interval ==
root_interval > 1``, ``root_method="eigh"``, ``δ > 0``, no warm-up) only the roots are kept, with the shifts ``shift_x``, ``shift_g`` (floats,
``λ = δ·tr(Ĉ)/n``), and the average is rebuilt at the next refresh as
``C = (P^{-2} − λI)(1 − β^k)`` (:func:`isolab.linalg.covariance_from_inverse_sqrt`, float64);
the roots are then computed with eigenvalues of ``Ĉ + λI`` clamped to ``≥ λ`` (not
dropped), so that ``P`` stays invertible. A whitened matrix then costs ``n² + m²`` state
elements beyond Adam's. The rebuilt average differs from the stored one by about
``2·eps·cond(P)·‖Ĉ + λI‖`` (float32 roots: ≤ 2e-3 relative at cond 1e3 in the tests). Everything needed to continue is in the state, so a
resumed run continues bitwise identically on CPU.

**Several processes** (``torch.distributed`` data parallelism, e.g. DDP; options
``sync_statistics``, ``process_group``, ``distribute_roots``). Each process captures ``X_r``,
``G_r`` of its own rows. Every step the row counts are summed (``b = Σ_r b_r``, the divisor of
the averaged gradient); on statistics steps ``Σ_r X_rᵀX_r`` and ``Σ_r G_rᵀG_r / W²`` are
summed as upper triangles (``W`` processes; DDP's gradient is ``XᵀG`` of the stacked
``G_r / W``), so the covariances are those of the global batch: with equal shares of a batch
and a mean loss, a run on ``W`` processes equals the single-process run on the whole batch
(tested to 1e-9 in float64). Every process checks the others' statistics (one small
exchange) before anything else, so NaN statistics on one process raise the same
``FloatingPointError`` on all of them, with nothing changed. On refresh steps each process
computes the inverse roots (and, in the lean state, rebuilds the averages) of the layers it
owns, and all are shared (:mod:`isolab.distributed`), so the replicas stay bitwise identical.
"""

from __future__ import annotations

import math
import warnings

import torch
from torch import nn

from .. import distributed, fsdp, linalg, updates
from ._base import (
    RoutedOptimizer,
    adam_fallback_defaults,
    adam_step,
    as_float,
    check_beta,
    check_betas,
    check_bool,
    check_choice,
    check_dtype,
    check_eps,
    check_float,
    check_lr,
    check_nonneg,
    check_nonneg_int,
    check_positive_int,
)
from ..nn import linear_like
from .routing import weight_layouts
from .statistics import LayerStatistics, capturable

__all__ = ["Iso", "IsoAdam"]

_ROOT_METHODS = ("eigh", "newton", "eigenbasis")
#: Where :class:`Iso` applies its momentum: to the raw gradient before the whitening
#: (``"gradient"``, the default, as Muon applies it before ``msign``) or to the whitened
#: steps (``"update"``: ``B <- mu B + (1-mu) P_G g P_X``).
MOMENTUM_PLACEMENTS = ("gradient", "update")

#: What an error or warning says about a torch ``nn.MultiheadAttention``'s weights.
ATTENTION_FIX = (
    "nn.MultiheadAttention computes its projections inside F.multi_head_attention_forward, where no hook "
    "sees their inputs and output gradients; call isolab.nn.convert_attention(model) before building the "
    "optimizer (same outputs and state_dict, projections as nn.Linear layers) to whiten them"
)


def _capture_sites(model):
    """``({id(weight): layer name}`` of the weights Iso can whiten (linear-like modules and
    ``groups=1`` 1-D/2-D convolutions), ``{id(weight): why not}`` for the weight matrices it
    cannot)."""
    sites, why, hidden = {}, {}, {}
    for m in model.modules():
        if isinstance(m, nn.MultiheadAttention):
            for attr in ("in_proj_weight", "q_proj_weight", "k_proj_weight", "v_proj_weight"):
                w = getattr(m, attr, None)
                if w is not None:
                    why[id(w)] = ATTENTION_FIX
            hidden[id(m.out_proj.weight)] = ATTENTION_FIX
    for name, m in model.named_modules():
        w = getattr(m, "weight", None)
        if not isinstance(w, torch.Tensor) or id(w) in hidden:
            continue
        if capturable(m):
            sites.setdefault(id(w), name)
        elif linear_like(m) is not None and isinstance(m, nn.modules.conv._ConvNd):
            if isinstance(m, (nn.Conv1d, nn.Conv2d)) and m.groups > 1:
                why[id(w)] = f"a grouped convolution (groups={m.groups}) has one weight matrix per group; not supported"
            else:
                why[id(w)] = (f"{type(m).__name__} is not supported (patch-view statistics exist for nn.Conv1d and "
                              "nn.Conv2d with groups=1)")
    why.update(hidden)
    return sites, why


def _fix_hint(why):
    return f" ({next(iter(why.values()))})" if why else ""


class _IsoBase(RoutedOptimizer):
    stat_keys = ("cov_x", "cov_g", "root_x", "root_g", "basis_x", "basis_g")

    def __init__(
        self, model, params, defaults, adam_defaults, *, embeddings, head, others, stats_dtype,
        sync_statistics=None, process_group=None, distribute_roots=True,
    ):
        _check_sync_options(sync_statistics, process_group, distribute_roots)
        self.sync_statistics = sync_statistics
        self.process_group = process_group
        self.distribute_roots = distribute_roots
        if not isinstance(model, nn.Module):
            raise TypeError(
                f"{type(self).__name__} needs the model (an nn.Module) to hook its nn.Linear layers, "
                f"got {type(model).__name__}; pass parameters with params=..."
            )
        self._stats_dtype = check_dtype(stats_dtype)
        self._linear_by_weight, self._unwhitenable = _capture_sites(model)
        self._layout_of = weight_layouts(model)
        if not self._linear_by_weight:
            raise ValueError(
                f"{type(self).__name__}: the model ({type(model).__name__}) has no layer whose inputs and output "
                "gradients can be captured (nn.Linear, nn.Conv1d, nn.Conv2d, transformers' Conv1D, or a class "
                "declared with isolab.nn.register_linear); Iso has nothing to whiten here"
                + _fix_hint(self._unwhitenable)
            )
        self._layer_of: dict[int, str] = {}
        if params is None:
            super().__init__(model, defaults, adam_defaults, embeddings=embeddings, head=head, others=others)
        else:
            if embeddings is not None or not (head is None or (isinstance(head, str) and head == "auto")):
                raise ValueError("embeddings=/head= route the model's parameters; with explicit params= set groups yourself")
            self._names = {id(p): n for n, p in model.named_parameters()}
            super().__init__(params, defaults, adam_defaults)
        self.model = model
        modules = dict(model.named_modules())
        hooked = {}
        for group in self.param_groups:
            if group["algorithm"] != "adam" and group.get("whiten", True):
                for p in group["params"]:
                    name = self._layer_of[id(p)]
                    hooked[name] = modules[name]
        if not any(g["algorithm"] != "adam" for g in self.param_groups):
            raise ValueError(f"{type(self).__name__}: no parameter group uses algorithm={self.algorithm!r}")
        if self._sharding is not None and (sync_statistics is False or process_group is not None):
            raise ValueError(
                f"{type(self).__name__}: under FSDP2 each matrix is whitened by one process, which needs every "
                "process's statistics: they are summed over the parameters' device mesh, so sync_statistics must "
                f"not be False and process_group must be None (got sync_statistics={sync_statistics!r}, "
                f"process_group={process_group!r})"
            )
        self.statistics: LayerStatistics | None = (
            LayerStatistics(hooked, dtype=self._stats_dtype, tie_to_grad=True) if hooked else None
        )
        self._update_capture()

    # -- orientation ------------------------------------------------------------------
    def _dims(self, p) -> tuple[int, int]:
        """``(n, m)``: the layer's input and output sizes for weight ``p`` (``nn.Linear`` stores
        ``(m, n)``; a module registered ``"in_out"``, as transformers' ``Conv1D``, ``(n, m)``)."""
        if self._layout_of.get(id(p)) == "in_out":
            return int(p.shape[0]), int(p.shape[1])
        return math.prod(p.shape[1:]), int(p.shape[0])

    def _whiten(self, p, u, st):
        """``P_G u P_X`` in ``p``'s layout (``P_X u P_G`` for an ``(in, out)`` weight), in the
        roots' dtype, shaped like ``p``."""
        if self._layout_of.get(id(p)) == "in_out":
            return updates.two_sided(u.to(st["root_x"].dtype), st["root_x"], st["root_g"])
        m = u.reshape(u.shape[0], -1).to(st["root_x"].dtype)
        return updates.two_sided(m, st["root_g"], st["root_x"]).reshape(u.shape)

    # -- validation -------------------------------------------------------------------
    def _validate_common(self, group, gi):
        check_lr(group["lr"])
        check_beta(group["beta_cov"], "beta_cov")
        check_nonneg(group["damping"], "damping")
        check_positive_int(group["stat_interval"], "stat_interval")
        check_positive_int(group["root_interval"], "root_interval")
        check_choice(group["root_method"], "root_method", _ROOT_METHODS)
        if group["root_tol"] is not None:
            check_float("root_tol", group["root_tol"], low=0.0, low_open=True)
        check_nonneg_int(group["warmup_steps"], "warmup_steps")
        check_nonneg(group["weight_decay"], "weight_decay")
        check_bool(group["shrinkage"], "shrinkage")
        check_stat_rows(group.setdefault("stat_rows", None))
        for p in group["params"]:
            layer = self._linear_by_weight.get(id(p))
            if layer is None:
                why = self._unwhitenable.get(id(p))
                raise ValueError(
                    f"{type(self).__name__}: {self._name(p, gi)} cannot be whitened: "
                    + (why if why else "it is not the weight of an nn.Linear, nn.Conv1d or nn.Conv2d of the model "
                       "(only those layers' inputs and output gradients are captured by hooks)")
                    + ". Put it in a group with algorithm='adam'."
                )
            self._layer_of[id(p)] = layer

    # -- capture control ----------------------------------------------------------------
    def _next_needs_stats(self) -> bool:
        for group in self.param_groups:
            if group["algorithm"] == "adam" or not group.get("whiten", True):
                continue
            steps = [self.state[p]["step"] for p in group["params"] if "step" in self.state.get(p, {})]
            t_next = (max(steps) if steps else 0) + 1
            if (t_next - 1) % group["stat_interval"] == 0:
                return True
        return False

    def _update_capture(self, after_step=False):
        if self.statistics is not None:
            # after a step, remember which .grad tensors were used: a backward that
            # accumulates onto them without zero_grad() is then detected at the next step
            stats = self.statistics
            limits, t_next = {}, 1
            for group in self.param_groups:
                if group["algorithm"] == "adam" or not group.get("whiten", True):
                    continue
                for p in group["params"]:
                    limits[self._layer_of[id(p)]] = _row_limit(group, p)
                    t_next = max(t_next, self.state.get(p, {}).get("step", 0) + 1)
            stats.stat_rows = limits
            stats.sample_seed = t_next  # the row draws of step t: the same after a resume
            stats.clear(keep_grad_refs=after_step)
            stats.enabled = self._next_needs_stats()

    def _reroute(self, split):
        """Routing by model: matrices that cannot be whitened go to the AdamW fallback, with a
        warning that names each one and the fix."""
        moved = {n: p for n, p in split["matrix"].items() if id(p) not in self._linear_by_weight}
        if moved:
            for n in moved:
                del split["matrix"][n]
            split["vector"].update(moved)
            warnings.warn(
                f"{type(self).__name__}: these weight matrices cannot be whitened and are trained by the AdamW "
                "fallback (algorithm='adam'): "
                + "; ".join(f"{n} {tuple(p.shape)}: {self._unwhitenable.get(id(p), 'not captured')}" for n, p in moved.items()),
                UserWarning, stacklevel=4,
            )
        return split

    def _after_step(self):
        self._update_capture(after_step=True)

    def _after_load(self):
        self._update_capture()

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Zero the gradients and forget captured statistics (they belong to those gradients)."""
        super().zero_grad(set_to_none=set_to_none)
        if self.statistics is not None:
            self.statistics.clear()

    def remove_hooks(self) -> None:
        """Remove the statistics hooks from the model (the optimizer can no longer whiten)."""
        if self.statistics is not None:
            self.statistics.remove()

    close = remove_hooks

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove_hooks()
        return False

    # -- the step -------------------------------------------------------------------------
    @staticmethod
    def _persist(group):
        keep_cov = group["beta_cov"] > 0 or group["stat_interval"] > 1 or group["warmup_steps"] > 0
        keep_root = group["root_interval"] > 1 or group["root_method"] == "newton"  # the eigenbasis is always kept
        return keep_cov, keep_root

    def _root(self, C, group, previous, what, name, damping=None):
        """The damped inverse root of ``C`` by ``group["root_method"]``.

        ``previous`` is the stored root (``"newton"``) or eigenbasis (``"eigenbasis"``).
        Returns the root, or ``(root, basis)`` when ``"eigenbasis"`` had to renew its basis.
        ``damping`` is the relative damping to use (default ``group["damping"]``; the
        rank-aware floor of :func:`effective_damping` where it applies).
        """
        delta = group["damping"] if damping is None else damping
        try:
            if group["root_method"] == "eigenbasis":
                R = None
                if previous is not None:
                    R = linalg.inverse_sqrt_in_basis(
                        C, previous, delta, max_residual=TRACK_MAX_RESIDUAL, probes=TRACK_PROBES
                    ).root
                if R is None:  # first root, or the basis has drifted too far: renew it
                    R, V = linalg.inverse_sqrt_eig(C, delta)
                    self._check_root(R, what, name)
                    return R, V
            elif group["root_method"] == "eigh" and self._lean(group) and _lean_shift(C, delta) is not None:
                R = _damped_inverse_sqrt(C, delta, what)
            elif group["root_method"] == "eigh":
                R = linalg.symmetric_inverse_root(C, p=2, damping=delta)
            else:
                R = None
                if previous is not None:
                    tol = 1e-3 if group["root_tol"] is None else group["root_tol"]
                    R = linalg.inverse_sqrt_track(
                        C, previous, delta, tol=tol, max_residual=max(tol, TRACK_MAX_RESIDUAL),
                        probes=TRACK_PROBES,
                    ).root
                if R is None:  # first root, or the tracked root failed its residual bound
                    if C.device.type == "cpu":  # eigh costs ~6 matmuls at n=1024 on a CPU core: cheapest exact
                        R = linalg.symmetric_inverse_root(C, p=2, damping=delta)
                    else:
                        R = linalg.inverse_sqrt_newton(C, damping=delta, initial=previous)
        except ValueError as e:
            raise FloatingPointError(
                f"{type(self).__name__}: cannot compute {what}^(-1/2) for {name}: {e}; "
                "no parameter or optimizer state was changed"
            ) from e
        self._check_root(R, what, name)
        return R

    def _check_root(self, R, what, name):
        if not linalg.all_finite(R):
            raise FloatingPointError(
                f"{type(self).__name__}: non-finite {what}^(-1/2) for {name}; no parameter or optimizer state was changed"
            )

    @staticmethod
    def _lean(group):
        """Store only the roots (not the covariances): rebuild ``C = P^{-2} − λI`` at each refresh.

        Possible when statistics and roots are refreshed together (``stat_interval ==
        root_interval > 1``), by ``eigh``, with damping ``> 0`` (``P`` positive definite) and
        no warm-up; then each whitened matrix costs ``n² + m²`` state elements beyond Adam's.
        """
        return (
            group["root_method"] == "eigh"
            and group["damping"] > 0
            and group["root_interval"] > 1
            and group["stat_interval"] == group["root_interval"]
            and group["warmup_steps"] == 0
        )

    # -- several processes (torch.distributed) --------------------------------------------
    def _exchange_statistics(self, groups, comm, owners=None):
        """Sum the captured statistics over the processes of ``comm``; ``{id(p): (XᵀX, GᵀG, b)}``.

        Every step: one ``all_reduce`` of a small integer table, the row counts ``b_r`` of
        every whitened layer (summed: ``b = Σ_r b_r``) and each rank's status of its local
        statistics (collected? right shape? finite?), so that a problem on one rank becomes
        the same error on every rank, before any other collective (no rank is left waiting).
        On statistics steps: the upper triangles of ``X_rᵀX_r`` and ``G_rᵀG_r``, summed by
        :func:`isolab.distributed.all_reduce_symmetric`. ``ΣG_rᵀG_r`` is divided by ``W²``
        (``W`` processes): data parallelism averages ``weight.grad = (1/W) Σ_r X_rᵀG_r``,
        i.e. the gradient is ``XᵀG`` of the stacked ``G_r/W``, and those are the output
        gradients whose covariance we need. With equal per-rank batches and a mean loss this
        is exactly the full batch's ``G``. Entries of non-statistics steps hold ``None``
        for the sums. With ``owners`` (``{id(weight): rank}``, FSDP2) the sums are reduced onto each
        weight's owner only (:func:`isolab.distributed.reduce_symmetric_to_owners`) and are ``None``
        on the other processes.
        """
        import torch.distributed as dist

        world, rank = dist.get_world_size(comm), dist.get_rank(comm)
        stats = self.statistics
        attached = stats is not None and stats.attached
        items = []
        for gi, group in groups:
            if not group.get("whiten", True):
                continue
            for p in group["params"]:
                if p.grad is not None:
                    t = self.state[p].get("step", 0) + 1
                    items.append((p, gi, self._layer_of[id(p)], (t - 1) % group["stat_interval"] == 0))
        if not items:
            return {}
        device = items[0][0].device if dist.get_backend(comm) != "gloo" else torch.device("cpu")
        # row 0: rows captured here; row 1 + r: status on rank r
        # (0 ok, 1 not collected, 2 wrong shape, 3 NaN/Inf)
        table = torch.zeros(world + 1, len(items), dtype=torch.int64)
        local = []
        for i, (p, gi, layer, due) in enumerate(items):
            rows = stats.rows(layer) if attached else 0
            table[0, i] = rows
            if rows and attached and stats.check_grad(layer, p):
                table[1 + rank, i] = 4
                n, m = self._dims(p)
                local.append(None if not due else (
                    torch.zeros(n, n, dtype=self._stats_dtype, device=p.device),
                    torch.zeros(m, m, dtype=self._stats_dtype, device=p.device)))
                continue
            if not due:
                local.append(None)
                continue
            n, m = self._dims(p)
            s = stats.sums(layer) if attached else None
            code, xx, gg = 0, None, None
            if s is None:
                code = 1 if rows > 0 else 0  # no rows at all: the check after the exchange names it
            else:
                xx, gg, _ = s
                if xx.shape != (n, n) or gg.shape != (m, m):
                    code = 2
                elif not linalg.all_finite(xx, gg):
                    code = 3
            if code or xx is None:
                xx = torch.zeros(n, n, dtype=self._stats_dtype, device=p.device)
                gg = torch.zeros(m, m, dtype=self._stats_dtype, device=p.device)
            table[1 + rank, i] = code
            local.append((xx, gg))
        table = table.to(device)
        dist.all_reduce(table, group=comm)
        table = table.cpu()
        status = table[1:]
        bad = (status != 0).any(0).nonzero()
        if len(bad):
            i = int(bad[0, 0])
            p, gi, layer, _ = items[i]
            ranks = status[:, i].nonzero()[:, 0].tolist()
            code = int(status[:, i].max())
            where = f"on rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))} (of {world})"
            name, cls = self._name(p, gi), type(self).__name__
            if code == 4:
                raise RuntimeError(
                    f"{cls}: the captured statistics of {name} (layer {layer!r}) do not belong to its gradient "
                    f"{where} (replaced after the backward, or accumulated onto a stepped-on gradient without "
                    "zero_grad()); no parameter or optimizer state was changed on any rank"
                )
            if code == 3:
                raise FloatingPointError(
                    f"{cls}: non-finite (NaN or Inf) input/output-gradient statistics for {name} (layer "
                    f"{layer!r}) {where}; no parameter or optimizer state was changed on any rank"
                    + self._diagnose_parameters("statistics")
                )
            if code == 2:
                raise RuntimeError(f"{cls}: statistics of layer {layer!r} do not match {name} {where}")
            raise RuntimeError(
                f"{cls}: statistics for layer {layer!r} were not collected {where} "
                "(LayerStatistics.enabled was switched off by hand?)"
            )
        due = [i for i, item in enumerate(items) if item[3]]
        mats = [local[i][0] for i in due] + [local[i][1] for i in due]
        if owners is None:
            reduced = distributed.all_reduce_symmetric(mats, comm) if mats else []
        else:
            whose = [owners[id(items[i][0])] for i in due] * 2
            reduced = distributed.reduce_symmetric_to_owners(
                mats, whose, [M.shape[0] for M in mats], comm, dtype=self._stats_dtype, device=device
            ) if mats else []
        out = {id(p): (None, None, int(table[0, i])) for i, (p, _, _, _) in enumerate(items)}
        for j, i in enumerate(due):
            xx, gg = reduced[j], reduced[len(due) + j]
            if xx is not None:
                out[id(items[i][0])] = (xx.to(local[i][0].device), gg.to(local[i][1].device) / world**2,
                                        int(table[0, i]))
        return out

    def _rebuild_on_owners(self, groups, comm):
        """Lean state: rebuild the stored averages ``P^{-2} − λI`` (float64 Cholesky, ``~2n³``)
        on their owners only and share them; ``{id(p): (C_X, C_G)}`` for the weights whose
        statistics are refreshed this step. Without this, every process would rebuild every
        layer's average, which costs about as much as the roots themselves."""
        targets = []
        for gi, group in groups:
            if not group.get("whiten", True) or group["beta_cov"] == 0:
                continue
            for p in group["params"]:
                if p.grad is None:
                    continue
                st = self.state[p]
                t = st.get("step", 0) + 1
                if (t - 1) % group["stat_interval"] or "cov_x" in st or "shift_x" not in st:
                    continue
                targets.append((p, gi, st))
        if not targets:  # the same on every rank (identical states)
            return {}
        jobs, sizes = [], []
        for p, _, st in targets:
            for key, shift in (("root_x", "shift_x"), ("root_g", "shift_g")):
                jobs.append(lambda R=st[key], lam=st[shift]: linalg.covariance_from_inverse_sqrt(R, lam))
                sizes.append(st[key].shape[0])
        covs, failures = distributed.compute_on_owners(
            jobs, sizes, comm, dtype=self._stats_dtype, device=targets[0][2]["root_x"].device
        )
        if failures:
            i, owner, err = failures[0]
            p, gi, _ = targets[i // 2]
            raise FloatingPointError(
                f"{type(self).__name__}: cannot rebuild the statistics of {self._name(p, gi)} from its stored "
                f"roots (on rank {owner}); no parameter or optimizer state was changed on any rank"
            ) from err
        return {id(p): (covs[2 * j], covs[2 * j + 1]) for j, (p, _, _) in enumerate(targets)}

    def _compute_roots(self, jobs, comm):
        """Compute the inverse roots of ``jobs`` and store them in their ``new`` dicts.

        Without communication (or ``distribute_roots=False``) every process computes every
        root. Otherwise each process computes the roots it owns
        (:func:`isolab.distributed.assign_owners`, balanced by ``n³``) and all are shared
        (:func:`isolab.distributed.compute_on_owners`); a failure on its owner becomes the
        same ``FloatingPointError`` on every process.
        """

        def run(job):
            new, key, C, corr, group, previous, what, name, damping = job
            R = self._root(C / corr, group, previous, what, name, damping)
            if isinstance(R, tuple):  # a renewed eigenbasis: kept by the process that computed it
                R, new[key.replace("root_", "basis_")] = R
            return R

        if comm is None or not self.distribute_roots:
            for job in jobs:
                job[0][job[1]] = run(job)
            return
        if not jobs:  # the same on every rank: the state and the steps are identical
            return
        sizes = [job[2].shape[0] for job in jobs]
        roots, failures = distributed.compute_on_owners(
            [lambda job=job: run(job) for job in jobs], sizes, comm, dtype=self._stats_dtype, device=jobs[0][2].device
        )
        if failures:
            i, owner, err = failures[0]
            what, name = jobs[i][6], jobs[i][7]
            raise FloatingPointError(
                f"{type(self).__name__}: cannot compute {what}^(-1/2) for {name} (computed by rank {owner}); "
                "no parameter or optimizer state was changed on any rank"
            ) from err
        for job, R in zip(jobs, roots):
            job[0][job[1]] = R

    def _plan_whitening(self, gi, group, p, st, new, rows, s, rebuilt, root_jobs):
        """The new statistics of whitened weight ``p`` (into ``new``) and its root jobs (appended
        to ``root_jobs``), from the step's summed ``s = (XᵀX, GᵀG, b)`` (``None`` off statistics
        steps) and ``rows``; ``rebuilt``: the lean state's averages rebuilt elsewhere, or ``None``.
        Mutates nothing but ``new`` and ``root_jobs``; returns whether the step is a warm-up step."""
        beta, t = group["beta_cov"], new["step"]
        name, layer = self._name(p, gi), self._layer_of[id(p)]
        if (t - 1) % group["stat_interval"] == 0:
            if s is None:
                raise RuntimeError(
                    f"{type(self).__name__}: statistics for layer {layer!r} were not collected "
                    "(LayerStatistics.enabled was switched off by hand?)"
                )
            xx, gg, _ = s
            n, m = self._dims(p)
            if xx.shape != (n, n) or gg.shape != (m, m):
                raise RuntimeError(f"statistics of layer {layer!r} do not match {name}")
            if not linalg.all_finite(xx, gg):
                raise FloatingPointError(
                    f"{type(self).__name__}: non-finite (NaN or Inf) input/output-gradient statistics "
                    f"for {name} (layer {layer!r}); no parameter or optimizer state was changed"
                    + self._diagnose_parameters("statistics")
                )
            cx, cg = xx / rows, gg / rows
            if "cov_x" in st:
                cx = cx.lerp(st["cov_x"], beta)
                cg = cg.lerp(st["cov_g"], beta)
            elif beta > 0 and "shift_x" in st:  # lean state: rebuild the EMA from the roots
                corr_old = 1 - beta ** st["stat_step"]
                try:
                    if rebuilt is not None:  # rebuilt by their owners and shared
                        old_x, old_g = (c * corr_old for c in rebuilt)
                    else:
                        old_x = linalg.covariance_from_inverse_sqrt(st["root_x"], st["shift_x"]) * corr_old
                        old_g = linalg.covariance_from_inverse_sqrt(st["root_g"], st["shift_g"]) * corr_old
                except ValueError as e:
                    raise FloatingPointError(
                        f"{type(self).__name__}: cannot rebuild the statistics of {name} from its "
                        f"stored roots: {e}; no parameter or optimizer state was changed"
                    ) from e
                cx = cx.lerp(old_x, beta)
                cg = cg.lerp(old_g, beta)
            elif beta > 0:
                cx, cg = cx * (1 - beta), cg * (1 - beta)
            new.update(cov_x=cx, cov_g=cg, stat_step=st.get("stat_step", 0) + 1)
            # Σ_i w_i²/b_i of the average's weights w_i = (1−β)β^{k−i}: the effective
            # number of rows behind it is (1 − β^k)² / rows_s2 (see effective_damping)
            new["rows_s2"] = beta**2 * st.get("rows_s2", 0.0) + (1 - beta) ** 2 / _seen_rows(group, rows, p)
        warm = t <= group["warmup_steps"]
        if not warm and ("root_x" not in st or (t - 1) % group["root_interval"] == 0):
            cx, cg = new.get("cov_x", st.get("cov_x")), new.get("cov_g", st.get("cov_g"))
            if cx is None:
                raise RuntimeError(f"{type(self).__name__}: no statistics yet for {name}")
            k = new.get("stat_step", st.get("stat_step"))
            corr = 1 - beta**k
            prev = "basis" if group["root_method"] == "eigenbasis" else "root"
            s2 = new.get("rows_s2", st.get("rows_s2"))
            n_eff = None if s2 is None else corr**2 / s2
            dx = effective_damping(group, n_eff, cx.shape[0], _seen_rows(group, rows, p))
            dg = effective_damping(group, n_eff, cg.shape[0], _seen_rows(group, rows, p))
            root_jobs.append((new, "root_x", cx, corr, group, st.get(f"{prev}_x"), "Cov(X)", name, dx))
            root_jobs.append((new, "root_g", cg, corr, group, st.get(f"{prev}_g"), "Cov(G)", name, dg))
            if self._lean(group):
                shifts = [_lean_shift(c / corr, d) for c, d in ((cx, dx), (cg, dg))]
                if None not in shifts:  # both roots positive definite: store only them
                    new["shift_x"], new["shift_g"] = shifts
        return warm

    def _prepare_matrix_groups(self, groups):
        if self._sharding is not None:
            return self._prepare_sharded(groups)
        plans, root_jobs = [], []
        comm = distributed.active_group(self.sync_statistics, self.process_group, type(self).__name__)
        synced = self._exchange_statistics(groups, comm) if comm is not None else None
        rebuilt = self._rebuild_on_owners(groups, comm) if comm is not None and self.distribute_roots else None
        for gi, group in groups:
            whiten = group.get("whiten", True)
            for p in group["params"]:
                if p.grad is None:
                    continue
                st = self.state[p]
                t = st.get("step", 0) + 1
                new = {"step": t}
                if not whiten:
                    plans.append((group, p, new, None, False))
                    continue
                name = self._name(p, gi)
                layer = self._layer_of[id(p)]
                stats = self.statistics
                if synced is not None:  # summed over the processes
                    rows = synced[id(p)][2]
                else:
                    rows = stats.rows(layer) if stats is not None and stats.attached else 0
                    stale = stats.check_grad(layer, p) if rows and stats is not None else None
                    if stale:
                        raise RuntimeError(
                            f"{type(self).__name__}: the captured statistics of {name} (layer {layer!r}) do not "
                            f"belong to its gradient: {stale}. Clear gradients with zero_grad() (optimizer's or "
                            "model's, set_to_none either way) before the backward whose gradient you step on; "
                            "no parameter or optimizer state was changed"
                        )
                if rows == 0:
                    raise RuntimeError(
                        f"{type(self).__name__}: {name} has a gradient but no input/output-gradient rows were "
                        f"captured for layer {layer!r}. Was the forward run in eval mode or under no_grad, were "
                        "the hooks removed, or is the weight used without calling the module (e.g. "
                        "nn.MultiheadAttention's out_proj)?"
                    )
                s = None
                if (t - 1) % group["stat_interval"] == 0:
                    s = synced[id(p)] if synced is not None else stats.sums(layer)
                pair = rebuilt[id(p)] if rebuilt is not None and id(p) in rebuilt else None
                warm = self._plan_whitening(gi, group, p, st, new, rows, s, pair, root_jobs)
                plans.append((group, p, new, rows, warm))
        self._compute_roots(root_jobs, comm)

        def apply():
            for group, p, new, rows, warm in plans:
                st = self.state[p]
                st.update(new)
                if rows is None:  # IsoAdam with whiten=False: exactly Adam
                    adam_step(p, p.grad, st, as_float(group["lr"]), group["betas"], group["eps"], group["weight_decay"],
                              "adam_step")
                    continue
                if not warm:
                    self._apply_whitened(group, p, st, rows)
                self._prune(group, st, new)

        return apply

    def _prune(self, group, st, new):
        """Drop what the state need not keep after a step (see "What ``self.state[p]`` holds")."""
        keep_cov, keep_root = self._persist(group)
        if "root_x" in new and self._lean(group):
            if "shift_x" in new:
                keep_cov = False
            else:  # a root with a dropped (pseudo-inverse) direction cannot give C back
                st.pop("shift_x", None), st.pop("shift_g", None)
        if not keep_cov:
            st.pop("cov_x", None), st.pop("cov_g", None)
        if not keep_root:
            st.pop("root_x", None), st.pop("root_g", None)

    def _apply_whitened(self, group, p, st, rows):  # pragma: no cover
        raise NotImplementedError

    def _transform_direction(self, group, p, d, st):
        """The whitened matrix ``d`` (``p``'s layout, the whole matrix) before the elementwise part
        of the step: the identity. Subclasses that try a variant of the step (a normalized or
        polar whitened direction) override this one method; it runs where the whitening runs
        (on the matrix's owner under FSDP2)."""
        return d

    # -- FSDP2 ------------------------------------------------------------------------------
    def _matrix_cost(self, p):
        """The two roots (``~(n³ + m³)``, amortized but balanced at their full cost) and the
        two-sided product (``nm(n + m)``) of weight ``p``."""
        n, m = self._dims(p)
        return float(n**3 + m**3 + n * m * (n + m))

    #: what an owner's failure code means (the same message on every process)
    _OWNER_FAILURES = {
        2: "cannot compute Cov(X)^(-1/2)", 3: "cannot compute Cov(G)^(-1/2)",
        4: "cannot rebuild the statistics from the stored roots", 5: "non-finite (NaN or Inf) summed statistics",
        6: "the statistics do not match the weight",
    }

    def _plan_on_owner(self, item, s):
        """Statistics and roots of one whitened weight on its owner; raises with a ``code``."""
        gi, group, p, new, rows, warm = item
        jobs = []
        self._owner_only = True  # no collective may run here: the other processes are elsewhere
        try:
            try:
                self._plan_whitening(gi, group, p, self.state[p], new, rows, s, None, jobs)
            except FloatingPointError as e:
                e.code = 4 if "rebuild" in str(e) else 5
                raise
            except RuntimeError as e:
                e.code = 6
                raise
            for new_, key, C, corr, group_, previous, what, name, damping in jobs:
                try:
                    R = self._root(C / corr, group_, previous, what, name, damping)
                except FloatingPointError as e:
                    e.code = 2 if key == "root_x" else 3
                    raise
                if isinstance(R, tuple):  # a renewed eigenbasis
                    R, new_[key.replace("root_", "basis_")] = R
                new_[key] = R
        finally:
            self._owner_only = False

    def _diagnose_parameters(self, symptom):
        # inside an owner's computation no collective may run (the other processes are not
        # there): the diagnosis is added when every process raises the agreed error
        return "" if getattr(self, "_owner_only", False) else super()._diagnose_parameters(symptom)

    def _owner_failure(self, failures, items):
        i, owner, code, err = failures[0]
        gi, _, p = items[i][:3]
        what = self._OWNER_FAILURES.get(code, "failed")
        diag = self._diagnose_parameters("statistics") if code == 5 else ""
        return FloatingPointError(
            f"{type(self).__name__}: {what} for {self._name(p, gi)} (computed by rank {owner}); no parameter or "
            "optimizer state was changed on any rank" + diag
        ), err

    def _prepare_sharded(self, groups):
        """FSDP2 (:mod:`isolab.fsdp`): row counts and statistics summed over the mesh onto each
        weight's owner, which updates its averages and roots (agreed before anything changes);
        then the elementwise part before the whitening on each process's rows, the whitening of
        the full matrix on its owner, and the elementwise part after it on the rows again."""
        sh = self._sharding
        synced = self._exchange_statistics(groups, sh.group, owners=self._owners)
        items, plain = [], []
        for gi, group in groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                new = {"step": self.state[p].get("step", 0) + 1}
                if not group.get("whiten", True):
                    plain.append((group, p, new))
                    continue
                rows = synced[id(p)][2]
                if rows == 0:
                    raise RuntimeError(
                        f"{type(self).__name__}: {self._name(p, gi)} has a gradient but no input/output-gradient rows "
                        f"were captured for layer {self._layer_of[id(p)]!r} on any rank. Was the forward run in eval "
                        "mode or under no_grad, or were the hooks removed?"
                    )
                items.append((gi, group, p, new, rows, new["step"] <= group["warmup_steps"]))
        codes, caught = [0] * len(items), {}
        for k, item in enumerate(items):
            p = item[2]
            if self._owners[id(p)] == sh.rank:
                s = synced[id(p)]
                try:
                    self._plan_on_owner(item, s if s[0] is not None else None)
                except (FloatingPointError, RuntimeError) as e:
                    codes[k], caught[k] = getattr(e, "code", 1), e
        codes = fsdp.agree_on_failures(codes, sh)
        failures = [(k, self._owners[id(items[k][2])], c, caught.get(k)) for k, c in enumerate(codes) if c]
        if failures:
            error, cause = self._owner_failure(failures, items)
            raise error from cause
        active = [item for item in items if not item[5]]
        inputs = [self._sharded_input(item[1], item[2], self.state[item[2]], item[4]) for item in active]
        results = []
        for dtype in sorted({item[2].dtype for item in active}, key=str):
            batch = [(item, inp) for item, inp in zip(active, inputs) if item[2].dtype == dtype]

            def compute(i, full, batch=batch):
                (gi, group, p, new, rows, _), _ = batch[i]
                return self._owner_direction(group, p, full, {**self.state[p], **new}, rows)

            self._owner_only = True
            try:
                rows_out, failed = fsdp.owner_step(
                    sh, [tuple(item[2].shape) for item, _ in batch], [self._owners[id(item[2])] for item, _ in batch],
                    [inp[0] for _, inp in batch], compute, out_dtype=dtype,
                )
            finally:
                self._owner_only = False
            if failed:
                error, cause = self._owner_failure(failed, [item for item, _ in batch])
                raise error from cause
            results += [(item, inp[1], d) for (item, inp), d in zip(batch, rows_out)]

        def apply():
            for group, p, new in plain:  # IsoAdam with whiten=False: exactly Adam, on the rows
                st = self.state[p]
                st.update(new)
                adam_step(p, p.grad, st, as_float(group["lr"]), group["betas"], group["eps"], group["weight_decay"],
                          "adam_step")
            for gi, group, p, new, rows, warm in items:
                st = self.state[p]
                st.update(new)
                self._prune(group, st, new)
            for (gi, group, p, new, rows, warm), carry, d in results:
                self._apply_sharded(group, p, self.state[p], d, carry)

        return apply

    def _sharded_input(self, group, p, st, rows):  # pragma: no cover
        """``(rows of the matrix to whiten, what the apply phase needs)`` on this process."""
        raise NotImplementedError

    def _owner_direction(self, group, p, full, st, rows):  # pragma: no cover
        """The whitened full matrix (``st``: the owner's state with this step's roots)."""
        raise NotImplementedError

    def _apply_sharded(self, group, p, st, d, carry):  # pragma: no cover
        """Update this process's rows of ``p`` with its rows ``d`` of the whitened matrix."""
        raise NotImplementedError


#: Largest whitening residual ``‖I − P Ĉ P‖_F/√n`` accepted from a tracked root
#: (:func:`isolab.linalg.inverse_sqrt_track`); above it the root is recomputed exactly.
TRACK_MAX_RESIDUAL = 0.05
#: Probe vectors that estimate a refined root's residual (3 matmuls per refresh instead of 5).
TRACK_PROBES = 32


#: ``stat_rows="auto"``: at least this many rows, and ...
AUTO_ROWS = 1024
#: ... at least this many rows per dimension of the layer's wider side.
AUTO_ROWS_PER_DIM = 2


def _row_limit(group, weight):
    """The most rows the statistics of ``weight``'s layer are formed from (``None``: all).

    ``"auto"``: ``max(1024, 2·max(n, m))`` for a layer with ``n`` inputs and ``m`` outputs,
    so that a subsampled step never has about as many rows as dimensions, where a sample
    covariance is nearly singular (Marchenko–Pastur: with ``N = 2d`` rows its smallest
    eigenvalue is about ``(1 − √½)² ≈ 0.09`` of the mean; with ``N = d`` about 0) while the
    rank-aware damping of :func:`effective_damping` is off (it acts only below ``d`` rows).
    """
    limit = group.get("stat_rows")
    if limit == "auto":
        return max(AUTO_ROWS, AUTO_ROWS_PER_DIM * max(weight.shape[0], math.prod(weight.shape[1:])))
    return limit


def _seen_rows(group, rows, weight):
    """Rows behind a statistics step's sums: ``min(b, N)`` for the layer's row limit ``N``
    (``b`` without subsampling)."""
    limit = _row_limit(group, weight)
    return rows if limit is None else min(rows, limit)


def check_stat_rows(value, name="stat_rows"):
    """``None`` (every row), ``"auto"`` or a positive int: the rows each layer's statistics are formed from."""
    if value is None or (isinstance(value, str) and value == "auto"):
        return value
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be None (use every row), 'auto' or a positive int, got {value!r}")
    return value


def effective_damping(group, n_eff, d, rows):
    r"""The relative damping of a side of dimension ``d`` (``rows`` rows this step, ``n_eff``
    rows behind the average).

    With ``shrinkage=True`` (the default), ``δ > 0`` and fewer rows per step than
    dimensions (``b < d``): ``δ_eff = max(δ, d / (d + n_eff))``; otherwise ``δ`` (bitwise
    the plain rule, so full-rank batches are unchanged). ``n_eff = (Σ_i w_i)² / Σ_i w_i²/b_i``
    counts the rows behind the bias-corrected average (weights ``w_i = (1−β)β^{k−i}`` of the
    ``k`` statistics steps so far, ``b_i`` rows each): ``b`` for one batch, about
    ``b(1+β)/(1−β)`` (39b at β = 0.95) in the long run.

    Why: an average of ``n_eff`` rows in ``d`` dimensions has ``d − n_eff`` unseen directions
    while ``n_eff < d``, and badly estimated small eigenvalues while ``n_eff`` is not much
    larger than ``d`` (Marchenko–Pastur: the smallest is about ``(1 − √(d/n_eff))²`` of the
    mean). There ``(Ĉ + δ·tr(Ĉ)/d·I)^{-1/2}`` reaches ``δ^{-1/2} ≈ 32×`` (``δ = 10^{-3}``) the
    gain of a direction of average variance, on each side; roots are reused for
    ``root_interval`` steps and momentum mixes in earlier batches, so later gradients do
    point there: at batches 1–8 below the layer width the default run diverged. Shrinking
    towards ``tr(Ĉ)/d·I`` with weight ``d/(d + n_eff)`` (the Ledoit–Wolf order of magnitude for
    ``n_eff`` samples in ``d`` dimensions) bounds that gain by ``√(1 + n_eff/d)`` and fades as
    rows accumulate. With ``δ = 0`` nothing changes: the pseudo-inverse root ignores unseen
    directions.
    """
    delta = group["damping"]
    if not group.get("shrinkage", False) or delta == 0 or n_eff is None or rows >= d:
        return delta
    return max(delta, d / (d + n_eff))


def _lean_shift(C, damping):
    """The shift ``λ = δ·tr(C)/n`` the lean root was computed with, or ``None`` if not usable."""
    lam = damping * float(torch.diagonal(C).mean())
    return lam if lam > 0 and lam < float("inf") else None


def _damped_inverse_sqrt(C, damping, what):
    """``(C + λI)^{-1/2}``, ``λ = δ·tr(C)/n > 0``, by eigh, with eigenvalues clamped to ``≥ λ``.

    Used by the lean state: :func:`isolab.linalg.symmetric_inverse_root` maps eigenvalues
    below ``n·eps·λ_max`` (unresolved in float32) to 0 (pseudo-inverse), which would make
    the root singular and ``C`` unrecoverable; the eigenvalues of ``C + λI`` are ``≥ λ``, so
    clamping to ``λ`` is the damped value in those directions. The root is positive
    definite with ``‖P‖₂ ≤ λ^{-1/2}``, and ``C = P^{-2} − λI`` can be rebuilt.
    """
    if not linalg.all_finite(C):
        raise ValueError(f"{what}: the matrix contains NaN or Inf")
    work = torch.float32 if C.dtype in (torch.float16, torch.bfloat16) else C.dtype
    A = C.to(work)
    A = 0.5 * (A + A.mT)
    lam = damping * A.diagonal().mean()
    n = A.shape[-1]
    w, V = linalg._eigh_with_retry(A + lam * torch.eye(n, dtype=work, device=A.device), what)
    lam = lam.to(w.dtype)
    scale = torch.maximum(w, lam).rsqrt()
    return ((V * scale.unsqueeze(-2)) @ V.mT).to(C.dtype)


def _check_sync_options(sync_statistics, process_group, distribute_roots):
    if sync_statistics is not None and not isinstance(sync_statistics, bool):
        raise ValueError(f"sync_statistics must be None, True or False, got {sync_statistics!r}")
    distributed.check_process_group(process_group)
    check_bool(distribute_roots, "distribute_roots")


class Iso(_IsoBase):
    r"""Iso (arXiv 2307.12979): SGD with momentum, whitened on both sides of each layer.

    .. math::
        \hat C_X &= \text{bias-corrected EMA}_\beta\big(X_t^\top X_t/b\big) \\
        \hat C_G &= \text{bias-corrected EMA}_\beta\big(G_t^\top G_t/b\big) \\
        B_t &= \mu B_{t-1} + (1-\mu)\,\nabla W_t/b \\
        u_t &= (1-\mu)\nabla W_t/b + \mu B_t \ \text{(Nesterov) or } B_t \\
        W_t &= W_{t-1}(1-\eta\lambda) - \eta\,(\hat C_X + \delta_X I)^{-1/2}\, u_t\,
               (\hat C_G + \delta_G I)^{-1/2}

    with relative damping ``δ_X = δ·tr(Ĉ_X)/n``; see :mod:`isolab.optim.iso` for the full
    reading (refresh intervals, warm-up, state). With ``beta_cov=0, momentum=0,
    damping=0`` the step is ``lr · iso_update(X, G)``, whose singular values are the
    canonical correlations between ``X`` and ``G`` (all ``≤ 1``).

    Construction: ``Iso(model, lr=..., ...)``. The model is needed to hook its
    layers. With ``params=None`` the model is routed by
    :func:`~isolab.optim.split_parameters` (``embeddings=``, ``head=``, ``others=``):
    ``nn.Linear`` and ``nn.Conv1d``/``nn.Conv2d`` weights are whitened; embeddings, a language
    model's untied output head (``head="auto"``: an ``nn.Linear`` onto an ``nn.Embedding``'s
    vocabulary; pass ``head=module`` for another head, ``head=None`` to whiten it), biases,
    gains, and matrices the hooks cannot see (see :mod:`isolab.optim.iso`, item 7; a warning
    names them) go to an AdamW group (``algorithm='adam'``, ``adam_*`` hyperparameters).
    With ``params=`` (groups, each with ``algorithm='iso'`` (default) or ``'adam'``) only the
    given parameters are optimized; ``'iso'`` groups may hold only weights of capturable
    layers.
    Call :meth:`remove_hooks` (or use ``with Iso(...) as opt:``) to detach the hooks.

    Args:
        lr: ``η >= 0`` (a float or a one-element tensor, as ``torch.optim`` accepts).
        momentum: ``μ ∈ [0, 1)``; ``nesterov``: Nesterov form.
        momentum_placement: ``"gradient"`` (default: momentum on ``∇W/b``, then whitened, as
            above) or ``"update"`` (keyword; each step's gradient is whitened with the current
            roots and the momentum averages the whitened steps). The two agree while the roots
            stay fixed; they differ when the roots are refreshed.
        beta_cov: ``β ∈ [0, 1)`` of the covariance averages.
        damping: relative damping ``δ >= 0``.
        stat_interval, root_interval: refresh the statistics / the inverse roots every
            this many steps (positive ints; why 1 and 10, and what they cost: see
            :mod:`isolab.optim.iso`, "Cost, and the defaults").
        root_method: ``"eigh"`` (exact, pseudo-inverse) or ``"newton"`` (matmul-only:
            the previous root is kept while its whitening residual
            ``‖I − P Ĉ P‖_F/√n`` is at most ``root_tol`` (default ``1e-3``), refined by
            one Newton step (accepted at a probe-estimated residual of at most 0.04), and
            recomputed otherwise (``eigh`` on a CPU, :func:`isolab.linalg.inverse_sqrt_newton`
            on an accelerator); cheap when the statistics change slowly and are well
            conditioned) or ``"eigenbasis"`` (``eigh`` once, then first-order updates in its
            eigenbasis, 4 matmuls, at any conditioning, until the residual exceeds 0.04;
            the cheapest way to refresh every step on a CPU).
            With ``distribute_roots`` the eigenbasis stays on the process that owns the layer.
        warmup_steps: steps that only collect statistics.
        weight_decay: decoupled weight decay ``λ >= 0``.
        stats_dtype: ``torch.float32`` or ``torch.float64`` for statistics and roots.
        stat_rows: form each layer's statistics from at most this many of its rows per
            backward (keyword; default ``"auto"``: ``N = max(1024, 2·max(n, m))`` for a layer
            with ``n`` inputs and ``m`` outputs; an int: exactly that ``N``; ``None``: all rows,
            the behaviour before this option existed): a uniform draw without replacement, the
            same rows for ``X`` and ``G``, scaled by ``b/N`` so that the sums are unbiased
            estimates of the full batch's (:mod:`isolab.optim.statistics`). The statistics
            cost ``2N(n² + m²)`` instead of ``2b(n² + m²)`` multiply-adds; with ``b ≤ N``
            the step is bitwise the one without the option. The draws are seeded by the
            step number (a resumed run draws the same rows). The rank-aware damping counts
            ``min(b, N)`` rows per statistics step.
        shrinkage: rank-aware damping for batches smaller than a layer's width (keyword,
            default True; :func:`effective_damping`). ``False`` restores the plain relative
            damping, which diverges at small batches with the default ``root_interval``.
        sync_statistics: under ``torch.distributed`` data parallelism (DDP), sum the
            captured statistics over the processes so that every replica whitens with the
            covariances of the *global* batch, ``Σ_r X_rᵀX_r / Σ_r b_r`` (the full batch's).
            ``None`` (default): on iff ``torch.distributed`` is initialized and the group has
            more than one process; ``True`` also with one process; ``False``: each process
            keeps its own statistics (replicas then drift apart). ``XᵀX`` and ``GᵀG`` travel
            only on statistics steps (every ``stat_interval`` steps: the communication is
            amortized), as upper triangles in buckets; the row counts travel every step
            (a few integers per layer), since the gradient is divided by the global ``b``.
            Assumes the gradients were averaged over the same group (DDP's default).
        process_group: the ``torch.distributed`` group (``None``: the default group).
        distribute_roots: when syncing, each process computes the inverse roots of the layers
            it owns (balanced by ``n³``) on root-refresh steps and shares them (one
            ``all_gather``), instead of every process computing all of them.
    """

    algorithm = "iso"

    def __init__(
        self,
        model: nn.Module,
        lr: float = 0.02,
        momentum: float = 0.95,
        nesterov: bool = True,
        beta_cov: float = 0.95,
        damping: float = 1e-3,
        stat_interval: int = 1,
        root_interval: int = 10,
        root_method: str = "eigh",
        root_tol: float | None = None,
        warmup_steps: int = 0,
        weight_decay: float = 0.0,
        stats_dtype: torch.dtype = torch.float32,
        adam_lr: float = 3e-4,
        adam_betas: tuple[float, float] = (0.9, 0.95),
        adam_eps: float = 1e-8,
        adam_weight_decay: float = 0.0,
        *,
        shrinkage: bool = True,
        stat_rows: int | str | None = "auto",
        momentum_placement: str = "gradient",
        params=None,
        embeddings=None,
        head="auto",
        others: str = "raise",
        sync_statistics: bool | None = None,
        process_group=None,
        distribute_roots: bool = True,
    ):
        defaults = dict(
            lr=lr, momentum=momentum, nesterov=nesterov, beta_cov=beta_cov, damping=damping,
            stat_interval=stat_interval, root_interval=root_interval, root_method=root_method,
            root_tol=root_tol, warmup_steps=warmup_steps, weight_decay=weight_decay, shrinkage=shrinkage,
            stat_rows=stat_rows,
            momentum_placement=momentum_placement,
        )
        adam = adam_fallback_defaults(adam_lr, adam_betas, adam_eps, adam_weight_decay)
        super().__init__(
            model, params, defaults, adam, embeddings=embeddings, head=head, others=others, stats_dtype=stats_dtype,
            sync_statistics=sync_statistics, process_group=process_group, distribute_roots=distribute_roots,
        )

    def _validate_matrix_group(self, group, gi):
        self._validate_common(group, gi)
        check_beta(group["momentum"], "momentum")
        check_bool(group["nesterov"], "nesterov")
        check_choice(group.setdefault("momentum_placement", "gradient"), "momentum_placement", MOMENTUM_PLACEMENTS)

    def _apply_whitened(self, group, p, st, rows):
        lr, mu, wd = as_float(group["lr"]), group["momentum"], group["weight_decay"]

        def whiten(u):
            return self._transform_direction(group, p, self._whiten(p, u, st), st)

        after = group.get("momentum_placement", "gradient") == "update"
        g = whiten(p.grad / rows).to(p.dtype) if after else p.grad / rows
        if mu > 0:
            buf = st.get("momentum_buffer")
            if buf is None:
                buf = st["momentum_buffer"] = torch.zeros_like(p)
            buf.lerp_(g, 1 - mu)
            u = g.lerp(buf, mu) if group["nesterov"] else buf
        else:
            u = g
        d = u if after else whiten(u)
        if wd:
            p.mul_(1 - lr * wd)
        p.add_(d.to(p.dtype), alpha=-lr)

    # FSDP2: the same arithmetic, split at the whitening (see _IsoBase._prepare_sharded)
    def _sharded_input(self, group, p, st, rows):
        g = fsdp.local(p.grad) / rows
        if group.get("momentum_placement", "gradient") == "update" or group["momentum"] == 0:
            return g, None
        mu = group["momentum"]
        buf = fsdp.local(st["momentum_buffer"]) if "momentum_buffer" in st else torch.zeros_like(g)
        buf = buf.lerp(g, 1 - mu)  # a new tensor: the state changes when the step applies
        return (g.lerp(buf, mu) if group["nesterov"] else buf), buf

    def _owner_direction(self, group, p, full, st, rows):
        return self._transform_direction(group, p, self._whiten(p, full, st), st).to(p.dtype)

    def _apply_sharded(self, group, p, st, d, carry):
        lr, mu, wd = as_float(group["lr"]), group["momentum"], group["weight_decay"]
        if mu > 0:
            if "momentum_buffer" not in st:
                st["momentum_buffer"] = torch.zeros_like(p)
            buf = fsdp.local(st["momentum_buffer"])
            if carry is not None:  # momentum before the whitening: computed in the first phase
                buf.copy_(carry)
            else:  # momentum on the whitened steps
                buf.lerp_(d, 1 - mu)
                d = d.lerp(buf, mu) if group["nesterov"] else buf
        w = fsdp.local(p)
        if wd:
            w.mul_(1 - lr * wd)
        w.add_(d.reshape(w.shape).to(w.dtype), alpha=-lr)


class IsoAdam(_IsoBase):
    r"""IsoAdam: Adam on the two-sidedly whitened gradient, so Adam's hyperparameters transfer.

    .. math::
        \hat G_t &= (\hat C_X + \delta_X I)^{-1/2}\,(\nabla W_t / b)\,(\hat C_G + \delta_G I)^{-1/2} \\
        m_t &= \beta_1 m_{t-1} + (1-\beta_1)\hat G_t, \quad
        v_t = \beta_2 v_{t-1} + (1-\beta_2)\hat G_t^{\,2} \\
        W_t &= W_{t-1}(1-\eta\lambda) - \eta\, \frac{m_t/(1-\beta_1^t)}{\sqrt{v_t/(1-\beta_2^t)} + \epsilon}

    (``Ĉ`` the bias-corrected covariance averages of :class:`Iso`; see
    :mod:`isolab.optim.iso`). The first step is ``lr · Ĝ/(|Ĝ| + ε) ≈ lr·sign(Ĝ)``, which
    with batch statistics and ``δ = 0`` is ``lr · iso_adam_first_step(X, G)``. With
    ``whiten=False`` no hooks are placed and the matrix groups are exactly
    ``torch.optim.AdamW`` (``torch.optim.Adam`` when ``weight_decay=0``).

    Construction and routing as :class:`Iso`; the Adam fallback group (embeddings, head,
    biases, gains) uses IsoAdam's own ``lr``, ``betas``, ``eps`` and ``weight_decay``
    unless ``adam_lr`` etc. are given (an invalid value is reported under the name passed:
    ``lr``, or ``adam_lr``).

    **Defaults are** ``torch.optim.AdamW``'s: ``lr=1e-3``, ``betas=(0.9, 0.999)``,
    ``eps=1e-8`` and ``weight_decay=0.01`` (decoupled, ``W ← W(1 − η·0.01)``, also on the
    fallback group, as AdamW decays every parameter), so that AdamW's hyperparameters
    transfer as they are usually run. Earlier versions defaulted to no decay: pass
    ``weight_decay=0.0`` for that step (and for the paper's batch formula).

    Args:
        lr, betas, eps, weight_decay: Adam's (decoupled weight decay); ``lr`` a float or a
            one-element tensor.
        beta_cov, damping, stat_interval, root_interval, root_method, root_tol, warmup_steps, stats_dtype, shrinkage, stat_rows: as
            in :class:`Iso`.
        whiten: whiten the gradient (default True); False gives plain Adam.
        sync_statistics, process_group, distribute_roots: several processes
            (``torch.distributed``), as in :class:`Iso`.
    """

    algorithm = "isoadam"

    def __init__(
        self,
        model: nn.Module,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        beta_cov: float = 0.95,
        damping: float = 1e-3,
        stat_interval: int = 1,
        root_interval: int = 10,
        root_method: str = "eigh",
        root_tol: float | None = None,
        warmup_steps: int = 0,
        whiten: bool = True,
        stats_dtype: torch.dtype = torch.float32,
        adam_lr: float | None = None,
        adam_betas: tuple[float, float] | None = None,
        adam_eps: float | None = None,
        adam_weight_decay: float | None = None,
        *,
        shrinkage: bool = True,
        stat_rows: int | str | None = "auto",
        params=None,
        embeddings=None,
        head="auto",
        others: str = "raise",
        sync_statistics: bool | None = None,
        process_group=None,
        distribute_roots: bool = True,
    ):
        defaults = dict(
            lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, beta_cov=beta_cov, damping=damping,
            stat_interval=stat_interval, root_interval=root_interval, root_method=root_method,
            root_tol=root_tol, warmup_steps=warmup_steps, whiten=whiten, shrinkage=shrinkage,
            stat_rows=stat_rows,
        )
        # the fallback inherits IsoAdam's own hyperparameters unless adam_* are given; an
        # invalid value is reported under the name the caller used
        adam = adam_fallback_defaults(
            lr if adam_lr is None else adam_lr,
            betas if adam_betas is None else adam_betas,
            eps if adam_eps is None else adam_eps,
            weight_decay if adam_weight_decay is None else adam_weight_decay,
            names=tuple(own if given is None else f"adam_{own}" for own, given in
                        (("lr", adam_lr), ("betas", adam_betas), ("eps", adam_eps), ("weight_decay", adam_weight_decay))),
        )
        super().__init__(
            model, params, defaults, adam, embeddings=embeddings, head=head, others=others, stats_dtype=stats_dtype,
            sync_statistics=sync_statistics, process_group=process_group, distribute_roots=distribute_roots,
        )

    def _validate_matrix_group(self, group, gi):
        self._validate_common(group, gi)
        group["betas"] = check_betas(group["betas"])
        check_eps(group["eps"])
        check_bool(group["whiten"], "whiten")

    def _apply_whitened(self, group, p, st, rows):
        w = self._transform_direction(group, p, self._whiten(p, p.grad.to(st["root_x"].dtype) / rows, st), st)
        w = w.to(p.dtype)
        adam_step(p, w, st, as_float(group["lr"]), group["betas"], group["eps"], group["weight_decay"], "adam_step")

    def _sharded_input(self, group, p, st, rows):
        return fsdp.local(p.grad), None

    def _owner_direction(self, group, p, full, st, rows):
        return self._transform_direction(group, p, self._whiten(p, full.to(st["root_x"].dtype) / rows, st), st).to(p.dtype)

    def _apply_sharded(self, group, p, st, d, carry):
        adam_step(p, d.reshape(fsdp.local(p).shape), st, as_float(group["lr"]), group["betas"], group["eps"],
                  group["weight_decay"], "adam_step")
