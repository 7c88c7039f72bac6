"""Muon: momentum, then the orthogonal polar factor of the momentum (via Newton–Schulz)."""

from __future__ import annotations

import math
import warnings

import torch

from .. import fsdp, linalg, rules
from ._base import (
    adam_fallback_defaults,
    RoutedOptimizer,
    as_float,
    check_beta,
    check_bool,
    check_choice,
    check_lr,
    check_nonneg,
    check_positive_int,
)

#: The learning-rate adjustments of ``torch.optim.Muon`` (``adjust_lr_fn``), by name.
ADJUST_LR = (None, "original", "match_rms_adamw")


def adjusted_lr_ratio(adjust_lr_fn, rows: int, cols: int) -> float:
    """``torch.optim.Muon``'s factor on the learning rate of a ``(rows, cols) = (out, in)``
    matrix: ``"original"`` (or ``None``) ``√max(1, rows/cols)`` (Keller Jordan's),
    ``"match_rms_adamw"`` ``0.2·√max(rows, cols)`` (Moonshot's: the update's RMS ≈ 0.2, AdamW's
    typical RMS)."""
    if adjust_lr_fn is None or adjust_lr_fn == "original":
        return math.sqrt(max(1, rows / cols))
    if adjust_lr_fn == "match_rms_adamw":
        return 0.2 * math.sqrt(max(rows, cols))
    raise ValueError(f"adjust_lr_fn must be one of {ADJUST_LR}, got {adjust_lr_fn!r}")


def resolve_compute_dtype(compute_dtype, device: torch.device):
    """``"auto"``: bfloat16 on CUDA (tensor cores; what ``torch.optim.Muon`` always uses), the
    gradient's own dtype elsewhere (CPUs have no fast bfloat16 matmul: ~30× slower there)."""
    if isinstance(compute_dtype, str):
        return torch.bfloat16 if device.type == "cuda" else None
    return compute_dtype

__all__ = ["Muon"]

_UNSET = object()  # adjust_lr (the deprecated alias) not passed


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
        p_t &= p_{t-1}(1-\eta\lambda) - \eta\, r(\text{out}, \text{in})\;
               \operatorname{msign}(u_t)

    where ``msign(M) = U Vᵀ`` for the thin SVD ``M = U S Vᵀ``, approximated by
    ``ns_steps`` quintic Newton–Schulz iterations (Keller Jordan's coefficients
    ``(3.4445, −4.7750, 2.0315)``; singular values end near ``[0.68, 1.13]`` rather than
    exactly 1, which is intentional) or computed exactly by SVD with ``exact=True``. The
    momentum is the exponential-average ("lerp") form of KellerJordan/Muon. A zero
    gradient gives a zero update (``msign(0) = 0``). ``r`` is the learning-rate adjustment
    ``adjust_lr_fn`` (torch's name): ``"original"`` ``√max(1, out/in)`` (default: tall and wide
    matrices get comparable RMS updates) or ``"match_rms_adamw"`` ``0.2·√max(out, in)`` (the
    update's RMS matches AdamW's typical 0.2, so AdamW's lr and weight decay can be reused),
    exactly as ``torch.optim.Muon``'s. ``out`` and ``in`` are the layer's: for a weight stored
    ``(in, out)`` (transformers' ``Conv1D``, see :func:`isolab.nn.register_linear`) the ratio
    is read in that orientation, where torch would read the stored shape. Weight decay is
    decoupled and uses the *unadjusted* ``lr``, as torch does.

    **Relation to** ``torch.optim.Muon``. With ``compute_dtype=torch.bfloat16``, the same
    ``lr``, ``momentum``, ``nesterov``, ``weight_decay``, ``ns_steps`` and ``adjust_lr_fn``, the
    step is bitwise ``torch.optim.Muon``'s (tested). The defaults differ on purpose:
    ``lr=0.02`` and ``weight_decay=0`` (Keller Jordan's, tuned with the ``"original"``
    adjustment) where torch has ``lr=1e-3`` and ``weight_decay=0.1``; and Newton–Schulz runs in
    bfloat16 only on CUDA (``compute_dtype="auto"``), in the gradient's dtype (float32 for a
    float32 model) on a CPU, where bfloat16 matmuls have no hardware support (about 30× slower
    here) — torch always uses bfloat16 (≈1 % different updates). isolab's Muon also takes
    ``ndim > 2`` parameters (convolution kernels, flattened to ``(shape[0], -1)``) and routes
    a model by itself.

    Parameters with ``ndim > 2`` are flattened to ``(shape[0], -1)``. Parameters with
    ``ndim < 2`` are refused in a Muon group.

    Construction:

    - ``Muon(model, ...)``: :func:`~isolab.optim.split_parameters` routes the model's
      ``nn.Linear`` and convolution weights and ``nn.MultiheadAttention``'s projections to
      Muon, and embeddings, the output head (``head=``, or a language model's untied head
      found by ``head="auto"``), biases and gains to an AdamW group (``algorithm='adam'``)
      with ``adam_lr``, ``adam_betas``, ``adam_eps``, ``adam_weight_decay``.
    - ``Muon(params_or_groups, ...)``: like any ``torch.optim`` optimizer; each group may
      set ``algorithm`` to ``'muon'`` (default) or ``'adam'``.

    Args:
        lr: ``η >= 0`` (0.02 default; a float or a one-element tensor).
        momentum: ``μ ∈ [0, 1)`` (0.95 default).
        nesterov: use the Nesterov form (default True).
        ns_steps: Newton–Schulz iterations (positive int, default 5).
        exact: use the SVD polar factor instead of Newton–Schulz.
        weight_decay: decoupled weight decay ``λ >= 0`` (default 0; torch's is 0.1).
        compute_dtype: dtype of the Newton–Schulz iteration: ``"auto"`` (default: bfloat16 on
            CUDA, the gradient's dtype on CPUs and other devices), ``None`` (the gradient's
            dtype everywhere) or a floating dtype (``torch.bfloat16`` as torch).
        adjust_lr_fn: ``"original"`` (default; ``None`` means the same, as in torch) or
            ``"match_rms_adamw"`` (keyword).
        adjust_lr: the former name of ``adjust_lr_fn``; still accepted, with a
            ``DeprecationWarning`` (passing both is an error).

    Under FSDP2 (``fully_shard``), see :mod:`isolab.fsdp`: the momentum lives on each process's
    shard, and each matrix's Newton–Schulz runs on one process, which sends the other shards
    their rows.
    """

    algorithm = "muon"
    renamed_keys = {"adjust_lr": "adjust_lr_fn"}

    def __init__(
        self,
        params,
        lr: float = 0.02,
        momentum: float = 0.95,
        nesterov: bool = True,
        ns_steps: int = 5,
        exact: bool = False,
        weight_decay: float = 0.0,
        compute_dtype: torch.dtype | str | None = "auto",
        adam_lr: float = 3e-4,
        adam_betas: tuple[float, float] = (0.9, 0.95),
        adam_eps: float = 1e-8,
        adam_weight_decay: float = 0.0,
        *,
        adjust_lr_fn: str | None = "original",
        embeddings=None,
        head="auto",
        others: str = "raise",
        adjust_lr=_UNSET,
    ):
        if adjust_lr is not _UNSET:
            if adjust_lr_fn != "original":
                raise ValueError(
                    f"Muon: pass adjust_lr_fn (torch.optim.Muon's name) or its deprecated alias adjust_lr, not both "
                    f"(got adjust_lr_fn={adjust_lr_fn!r}, adjust_lr={adjust_lr!r})"
                )
            warnings.warn("Muon(adjust_lr=...) is deprecated: the argument is adjust_lr_fn, as in torch.optim.Muon",
                          DeprecationWarning, stacklevel=2)
            adjust_lr_fn = adjust_lr
        defaults = dict(
            lr=lr, momentum=momentum, nesterov=nesterov, ns_steps=ns_steps, exact=exact,
            weight_decay=weight_decay, compute_dtype=compute_dtype, adjust_lr_fn=adjust_lr_fn,
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
        cd = group["compute_dtype"]
        if isinstance(cd, str):
            check_choice(cd, "compute_dtype", ("auto",))
        elif cd is not None and not (isinstance(cd, torch.dtype) and cd.is_floating_point):
            raise ValueError(f"compute_dtype must be 'auto', None or a floating torch.dtype, got {cd!r}")
        check_choice(group["adjust_lr_fn"], "adjust_lr_fn", ADJUST_LR)

    def _prepare_matrix_groups(self, groups):
        if self._sharding is not None:
            return self._prepare_sharded(groups)
        # Gradients are already checked finite; momentum and Newton–Schulz of finite
        # inputs cannot fail, so the update is applied parameter by parameter without a
        # second copy of the state.
        def apply():
            for _, group in groups:
                lr, mu, wd = as_float(group["lr"]), group["momentum"], group["weight_decay"]
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
                    m = u.reshape(u.shape[0], -1)
                    if group["exact"]:
                        o = linalg.msign(m)
                    else:
                        cd = resolve_compute_dtype(group["compute_dtype"], p.device)
                        o = linalg.msign_newton_schulz(m, steps=group["ns_steps"], compute_dtype=cd)
                    ratio = adjusted_lr_ratio(group["adjust_lr_fn"], *self._out_in(p))
                    rules.decoupled_weight_decay_(p, lr, wd)
                    # torch.optim.Muon's order: p ← p(1 − lr·wd), then p ← p − (lr·r)·msign(u)
                    p.add_(o.reshape(p.shape).to(p.dtype), alpha=-(lr * ratio))

        return apply

    def _prepare_sharded(self, groups):
        """FSDP2 (:mod:`isolab.fsdp`): momentum on this process's rows, ``msign`` of each full
        matrix on its owner, the result's rows sent back. Every value is the one-process step's
        on the same gradient (the momentum is elementwise, ``msign`` sees the whole matrix)."""
        items = []
        for _, group in groups:
            mu = group["momentum"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = fsdp.local(p.grad)
                st = self.state[p]
                buf = fsdp.local(st["momentum_buffer"]) if "momentum_buffer" in st else torch.zeros_like(g)
                buf = buf.lerp(g, 1 - mu)  # a new tensor: the state changes only when the step applies
                u = g.lerp(buf, mu) if group["nesterov"] else buf
                items.append((group, p, buf, u))
        results = []
        for dtype in sorted({u.dtype for *_, u in items}, key=str):
            batch = [item for item in items if item[3].dtype == dtype]

            def compute(i, full, batch=batch):
                group, p = batch[i][0], batch[i][1]
                m = full.reshape(full.shape[0], -1)
                if group["exact"]:
                    return linalg.msign(m).reshape(full.shape)
                cd = resolve_compute_dtype(group["compute_dtype"], full.device)
                return linalg.msign_newton_schulz(m, steps=group["ns_steps"], compute_dtype=cd).reshape(full.shape)

            rows, failures = fsdp.owner_step(
                self._sharding, [tuple(item[1].shape) for item in batch], [self._owners[id(item[1])] for item in batch],
                [item[3] for item in batch], compute, out_dtype=dtype,
            )
            if failures:  # msign of a finite matrix does not fail; report rather than guess
                i, owner, _, err = failures[0]
                raise FloatingPointError(f"Muon: Newton–Schulz failed for {self._name(batch[i][1])} on rank {owner}; "
                                         "no parameter or optimizer state was changed on any rank") from err
            results += list(zip(batch, rows))

        def apply():
            for (group, p, buf, _), o in results:
                st = self.state[p]
                if "momentum_buffer" not in st:
                    st["step"] = 0
                    st["momentum_buffer"] = torch.zeros_like(p)
                st["step"] += 1
                fsdp.local(st["momentum_buffer"]).copy_(buf)
                lr, wd = as_float(group["lr"]), group["weight_decay"]
                ratio = adjusted_lr_ratio(group["adjust_lr_fn"], *self._out_in(p))
                w = fsdp.local(p)
                rules.decoupled_weight_decay_(w, lr, wd)
                w.add_(o.reshape(w.shape).to(w.dtype), alpha=-(lr * ratio))

        return apply
