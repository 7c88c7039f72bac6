"""Muon: momentum, then the orthogonal polar factor of the momentum (by Newton–Schulz)."""

from __future__ import annotations

import math

import torch

from .. import fsdp, linalg, rules
from ._base import RoutedOptimizer
from .elementwise import Writer, adam_fallback_defaults, as_float
from ._stage import MatrixItem
from ._validation import check_beta, check_bool, check_choice, check_lr, check_nonneg, check_positive_int

__all__ = ["Muon"]

#: The learning-rate adjustments of ``torch.optim.Muon`` (``adjust_lr_fn``), by name.
ADJUST_LR = (None, "original", "match_rms_adamw")


def adjusted_lr_ratio(adjust_lr_fn, rows: int, cols: int) -> float:
    """``torch.optim.Muon``'s factor on the learning rate of a ``(rows, cols) = (out, in)``
    matrix: ``"original"`` (or ``None``) Keller Jordan's ``√max(1, rows/cols)``
    (:func:`isolab.rules.muon_scale`), ``"match_rms_adamw"`` ``0.2·√max(rows, cols)`` (Moonshot's:
    the update's RMS ≈ 0.2, AdamW's typical RMS)."""
    if adjust_lr_fn is None or adjust_lr_fn == "original":
        return rules.muon_scale(rows, cols)
    if adjust_lr_fn == "match_rms_adamw":
        return 0.2 * math.sqrt(max(rows, cols))
    raise ValueError(f"adjust_lr_fn must be one of {ADJUST_LR}, got {adjust_lr_fn!r}")


def resolve_compute_dtype(compute_dtype, device: torch.device):
    """``"auto"``: bfloat16 on CUDA (tensor cores; what ``torch.optim.Muon`` always uses), the
    gradient's own dtype elsewhere. CPUs differ: without bfloat16 instructions (AVX2 only) a
    bfloat16 matmul was ~30× slower than float32; with AVX-512 BF16 (this project's AMD EPYC CI
    machine) it was 2.5× faster (512², one thread), so pass ``compute_dtype=torch.bfloat16``
    there if the rounding is acceptable."""
    if isinstance(compute_dtype, str):
        return torch.bfloat16 if device.type == "cuda" else None
    return compute_dtype


def _by_group(items):
    groups: dict[int, list[MatrixItem]] = {}
    for it in items:
        groups.setdefault(it.gi, []).append(it)
    return groups.values()


def momentum_rows(items, always: bool = True, momentum_key="momentum_buffer"):
    """Each item's Nesterov/heavy-ball direction and new momentum buffer, on this process's rows,
    without changing the state (``torch._foreach_lerp``, one call per group): the arithmetic of
    :func:`isolab.rules.momentum_`. Sets ``item.rows`` (the direction) and ``item.carry`` (the
    buffer); ``item.rows`` must hold the input (the scaled gradient) on entry. With ``always``
    False a group with ``μ = 0`` keeps no buffer (Iso); Muon keeps one whatever ``μ``."""
    for its in _by_group(items):
        group = its[0].group
        mu = group["momentum"]
        if mu == 0 and not always:
            for it in its:
                it.carry = None
            continue
        g = [it.rows for it in its]
        old = [fsdp.local(it.state[momentum_key]) if momentum_key in it.state else torch.zeros_like(x)
               for it, x in zip(its, g)]
        new = torch._foreach_lerp(old, g, 1 - mu)
        u = torch._foreach_lerp(g, new, mu) if group["nesterov"] else new
        for it, ui, bi in zip(its, u, new):
            it.rows, it.carry = ui, bi


class Muon(RoutedOptimizer):
    r"""Muon (Keller Jordan et al., 2024) with an AdamW fallback for non-matrix parameters.

    For each hidden weight matrix (torch layout ``(out, in)``), with gradient ``g_t``:

    .. math::
        B_t &= \mu B_{t-1} + (1-\mu)\, g_t \\
        u_t &= (1-\mu)\, g_t + \mu B_t \ \text{(Nesterov)} \quad\text{or}\quad u_t = B_t \\
        p_t &= p_{t-1}(1-\eta\lambda) - \eta\, r(\text{out}, \text{in})\; \operatorname{msign}(u_t)

    ``msign(M) = U Vᵀ`` for the thin SVD ``M = U S Vᵀ`` is the nearest orthogonal matrix and the
    steepest direction under the spectral norm. It is approximated by ``ns_steps`` Newton–Schulz
    iterations with ``ns_coefficients`` (Keller Jordan's quintic ``(3.4445, −4.7750, 2.0315)`` by
    default: singular values end near ``[0.68, 1.13]`` rather than exactly 1, on purpose: speed
    over accuracy), or computed exactly by SVD with ``exact=True``. The momentum is the
    exponential-average form of KellerJordan/Muon. ``r`` is ``adjust_lr_fn`` (torch's name):
    ``"original"`` ``√max(1, out/in)`` (tall and wide matrices get comparable RMS updates) or
    ``"match_rms_adamw"`` ``0.2·√max(out, in)`` (the update's RMS matches AdamW's typical 0.2, so
    AdamW's lr and weight decay carry over). ``out`` and ``in`` are the layer's (a weight stored
    ``(in, out)``, transformers' ``Conv1D``, is read in that orientation). Weight decay is
    decoupled and uses the unadjusted ``lr``, as torch's.

    **Relation to** ``torch.optim.Muon``. With ``compute_dtype=torch.bfloat16`` and the same
    ``lr``, ``momentum``, ``nesterov``, ``weight_decay``, ``ns_steps``, ``ns_coefficients`` and
    ``adjust_lr_fn`` the step is bitwise torch's. The defaults differ on purpose: ``lr=0.02`` and
    ``weight_decay=0`` (Keller Jordan's, tuned with ``"original"``; torch has ``lr=1e-3``,
    ``weight_decay=0.1``), and Newton–Schulz runs in bfloat16 only on CUDA
    (``compute_dtype="auto"``), in the gradient's dtype on a CPU. isolab's Muon also takes
    convolution kernels (flattened to ``(shape[0], -1)``) and routes a model by itself:

    - ``Muon(model, ...)``: :func:`~isolab.optim.split_parameters` routes the model's
      ``nn.Linear`` and convolution weights and attention projections to Muon, and embeddings,
      the output head (``head=``, or a language model's untied head found by ``head="auto"``),
      biases and gains to an AdamW group (``algorithm='adam'``, the ``adam_*`` arguments).
    - ``Muon(params_or_groups, ...)``: as any ``torch.optim`` optimizer; each group may set
      ``algorithm`` to ``'muon'`` (default) or ``'adam'``.

    Args:
        params: a model, parameters, or parameter groups.
        lr: ``η >= 0`` (a float or a one-element tensor).
        momentum: ``μ ∈ [0, 1)``.
        nesterov: the Nesterov form.
        weight_decay: decoupled weight decay ``λ >= 0``.
        ns_steps: Newton–Schulz iterations (positive int).
        ns_coefficients: an ``(a, b, c)`` quintic used at every iteration (torch's argument), a
            sequence of them (one per iteration), or a schedule's name known to
            :func:`isolab.linalg.msign_newton_schulz`.
        exact: the SVD polar factor instead of Newton–Schulz.
        compute_dtype: dtype of the Newton–Schulz iteration: ``"auto"`` (bfloat16 on CUDA, the
            gradient's dtype elsewhere), ``None`` (the gradient's dtype) or a floating dtype.
        adjust_lr_fn: ``"original"`` (``None`` means the same, as in torch) or ``"match_rms_adamw"``.
        adam_lr, adam_betas, adam_eps, adam_weight_decay: the AdamW fallback group's.
        embeddings, head, others: routing of a model (:func:`~isolab.optim.split_parameters`).
        nonfinite, grad_scaler: see :mod:`isolab.optim._base`.

    Under FSDP2 (``fully_shard``, :mod:`isolab.fsdp`) the momentum lives on each process's rows
    and each matrix's Newton–Schulz runs on one owner process, which sends the others their rows.
    """

    algorithm = "muon"

    def __init__(
        self, params, lr: float = 0.02, momentum: float = 0.95, *, nesterov: bool = True,
        weight_decay: float = 0.0, ns_steps: int = 5, ns_coefficients=linalg.QUINTIC, exact: bool = False,
        compute_dtype: torch.dtype | str | None = "auto", adjust_lr_fn: str | None = "original",
        adam_lr: float = 3e-4, adam_betas: tuple[float, float] = (0.9, 0.95), adam_eps: float = 1e-8,
        adam_weight_decay: float = 0.0, embeddings=None, head="auto", others: str = "raise",
        nonfinite: str = "auto", grad_scaler=None,
    ):
        defaults = dict(lr=lr, momentum=momentum, nesterov=nesterov, weight_decay=weight_decay, ns_steps=ns_steps,
                        ns_coefficients=ns_coefficients, exact=exact, compute_dtype=compute_dtype,
                        adjust_lr_fn=adjust_lr_fn, nonfinite=nonfinite)
        try:
            adam = adam_fallback_defaults(adam_lr, adam_betas, adam_eps, adam_weight_decay)
        except ValueError as e:
            raise ValueError(f"Muon: {e}") from None
        super().__init__(params, defaults, adam, embeddings=embeddings, head=head, others=others,
                         grad_scaler=grad_scaler)

    def _validate_matrix_group(self, group, gi):
        check_lr(group["lr"])
        check_beta(group["momentum"], "momentum")
        check_bool(group["nesterov"], "nesterov")
        check_positive_int(group["ns_steps"], "ns_steps")
        linalg.newton_schulz_schedule(group["ns_coefficients"], group["ns_steps"], name="ns_coefficients")
        check_bool(group["exact"], "exact")
        check_nonneg(group["weight_decay"], "weight_decay")
        cd = group["compute_dtype"]
        if isinstance(cd, str):
            check_choice(cd, "compute_dtype", ("auto",))
        elif cd is not None and not (isinstance(cd, torch.dtype) and cd.is_floating_point):
            raise ValueError(f"compute_dtype must be 'auto', None or a floating torch.dtype, got {cd!r}")
        check_choice(group["adjust_lr_fn"], "adjust_lr_fn", ADJUST_LR)

    def _pre_all(self, items):
        for it in items:
            it.rows = fsdp.local(it.param.grad)
        momentum_rows(items)

    def _direction(self, it):
        group, full = it.group, it.full
        m = full.reshape(full.shape[0], -1)
        if group["exact"]:
            o = linalg.msign(m)
        else:
            cd = resolve_compute_dtype(group["compute_dtype"], full.device)
            o = linalg.msign_newton_schulz(m, steps=group["ns_steps"], coefficients=group["ns_coefficients"],
                                           compute_dtype=cd)
        return o.reshape(full.shape)

    def _post(self, it, d, write: Writer):
        group, st, p = it.group, it.state, it.param
        if "step" not in st:
            st["step"] = 0
        st["step"] += 1
        if it.carry is not None:
            self._set_rows(it, "momentum_buffer", it.carry, write)
        lr, wd = as_float(group["lr"]), group["weight_decay"]
        ratio = adjusted_lr_ratio(group["adjust_lr_fn"], *self._out_in(p))
        w = fsdp.local(p)

        def update(t):  # torch.optim.Muon's order: p ← p(1 − lr·wd), then p ← p − (lr·r)·msign(u)
            rules.decoupled_weight_decay_(t, lr, wd)
            return t.add_(d.reshape(t.shape).to(t.dtype), alpha=-(lr * ratio))

        write(w, update)
