r"""Iso and IsoAdam: two-sided whitening of each linear layer's gradient.

Our reading of the paper's Algorithms 1 and 2 (arXiv 2307.12979; their boxes are not in the text
we have, what the text fixes is the batch formula). For a layer ``Y = X W`` (``W ∈ R^{n×m}``;
torch stores ``weight = Wᵀ``) with captured inputs ``X_t ∈ R^{b×n}`` and output gradients
``G_t = ∂L/∂Y ∈ R^{b×m}``:

1. **Statistics** every ``stat_interval`` steps: bias-corrected exponential averages ``Ĉ_X``,
   ``Ĉ_G`` of ``X_tᵀX_t/b`` and ``G_tᵀG_t/b`` (:mod:`isolab.optim.covariance`), in ``stats_dtype``.
2. **Inverse roots** every ``root_interval`` steps (and at the first step after warm-up):
   ``P_X = (Ĉ_X + δ_X·tr(Ĉ_X)/n·I)^{-1/2}``, ``P_G`` likewise (:mod:`isolab.optim.roots`), with
   ``δ`` raised for batches narrower than the layer (``shrinkage``).
3. **Whitened gradient** ``Ĝ_t = P_X (∇W/b) P_G``, ``∇W = X_tᵀG_t`` the parameter's ``.grad``;
   dividing by the rows ``b`` makes ``Ĝ_t = iso_update(X_t, G_t)`` when the statistics are the
   batch's, and since ``Cov(G)^{-1/2}`` cancels any scalar multiple of ``G`` the result does not
   depend on whether the loss is a mean or a sum.
4. **Iso**: Nesterov momentum on ``∇W/b`` *before* the whitening (as Muon applies it before
   ``msign``), then ``W ← W(1 − ηλ) − η·P_X u P_G``. **IsoAdam**: Adam's moments, bias correction
   and elementwise scaling on ``Ĝ_t``, so that Adam's hyperparameters transfer.
5. **Warm-up**: the first ``warmup_steps`` steps only collect statistics.

With single-batch statistics (``β = 0``, ``μ = 0``, ``δ = 0``) Iso's step is ``η·iso_update(X, G)``,
whose singular values are the canonical correlations between ``X`` and ``G``, and IsoAdam's first
step is ``η·iso_adam_first_step(X, G)`` (up to ``ε``, with ``weight_decay=0``): the paper's formulas.

**Layers**: ``nn.Linear``, transformers' ``Conv1D``, classes declared with
:func:`isolab.nn.register_linear`, and ``nn.Conv1d``/``nn.Conv2d`` (``groups=1``, K-FAC's patch
view); a weight shared by several modules is whitened with the rows of every use. A matrix the
hooks cannot see (``nn.MultiheadAttention``'s fused projections: use
:func:`isolab.nn.convert_attention`; grouped or 3-D convolutions) goes, when a model is routed, to
the AdamW fallback with a ``UserWarning`` naming it.

**Cost, and the defaults** (``stat_interval=1``, ``stat_rows="auto"``, ``root_interval=10``). Per
step and layer (``b`` rows, multiply-adds): forward and backward ``3bnm``; the statistics
``b(n² + m²)`` (``2/3`` of forward and backward for a square layer, ``17/12`` for an MLP's
``d × 4d`` matrices, whatever the batch); the roots about ``5.5(n³ + m³)`` by ``eigh`` on refresh
steps; applying them ``nm(n + m)`` every step. ``stat_rows="auto"`` forms the statistics from
``N = max(1024, 2·max(n, m))`` rows drawn at random per backward (unbiased), which divides their
cost by ``b/N`` and leaves batches of up to ``N`` rows exactly as without it; ``stat_rows=None``
uses every row. Measured (``benchmarks/bench_cost.py``): on the full-size Transformer of
``scripts/train_transformer.py`` at 8,192 tokens a step the statistics of every row added 37 % to
forward and backward, those of 1,024 rows 3 %, and the loss after 150 steps moved by at most
0.003 nats; roots every 20 instead of 10 steps raised a 4 × Linear(256) MLP's loss by 38 %.

**Gradient accumulation**: the rows of every backward before ``step()`` count, as their gradients
do. With ``stat_rows="auto"`` each backward is subsampled on its own, so ``k`` micro-batches of
``b ≤ N`` rows use all ``k·b`` rows where one batch of ``k·b > N`` rows uses ``N``: the two runs
differ by the statistics' sampling noise (with ``stat_rows=None`` they are equal).

**Several processes** (DDP: ``sync_statistics``, ``process_group``, ``distribute_roots``; FSDP2):
the statistics are those of the global batch, so a run on ``W`` processes with equal shares of
every batch and a mean loss equals the one-process run on the whole batch (tested to 1e-10 in
float64, at any number of rows per process); see :mod:`isolab.optim.whitening`.
"""

from __future__ import annotations

import torch
from torch import nn

from .. import fsdp, linalg, rules
from .elementwise import Writer, adam_fallback_defaults, adam_step_, as_float
from ._validation import check_beta, check_betas, check_bool, check_choice, check_eps
from .muon import momentum_rows
from .whitening import WhiteningOptimizer

__all__ = ["Iso", "IsoAdam", "MOMENTUM_PLACEMENTS", "DIRECTIONS"]

#: Where :class:`Iso` applies its momentum: to the gradient before the whitening (``"gradient"``,
#: as Muon before ``msign``) or to the whitened steps (``"update"``: ``B ← μB + (1−μ) P_G g P_X``).
MOMENTUM_PLACEMENTS = ("gradient", "update")

#: What :class:`Iso` steps along: the whitened matrix itself (``"whitened"``, the paper's Iso) or
#: its polar factor with Muon's shape factor (``"polar"``, Muon in Iso's coordinates).
DIRECTIONS = ("whitened", "polar")


def polar_direction(d, n_in: int, n_out: int):
    """The polar factor of the whitened matrix ``d`` (by Muon's five quintic Newton–Schulz steps)
    times Muon's shape factor ``√max(1, n_out/n_in)``: a step of Muon's length in every layer,
    whatever the canonical correlations."""
    m = d.reshape(d.shape[0], -1)
    return linalg.msign_newton_schulz(m, steps=5).reshape(d.shape) * max(1.0, n_out / n_in) ** 0.5


def _named_errors(cls, f):
    try:
        return f()
    except ValueError as e:
        raise ValueError(f"{cls}: {e}") from None


class Iso(WhiteningOptimizer):
    r"""Iso (arXiv 2307.12979): SGD with momentum, whitened on both sides of each layer.

    .. math::
        B_t &= \mu B_{t-1} + (1-\mu)\,\nabla W_t/b \\
        u_t &= (1-\mu)\nabla W_t/b + \mu B_t \ \text{(Nesterov) or } B_t \\
        W_t &= W_{t-1}(1-\eta\lambda) \\
            &\quad - \eta\,(\hat C_X + \delta_X I)^{-1/2}\, u_t\,(\hat C_G + \delta_G I)^{-1/2}

    with the statistics of :mod:`isolab.optim.iso`. The step's Frobenius norm is at most
    ``η·√(Σ ρᵢ²)`` in the batch limit, ``ρᵢ`` the canonical correlations between ``X`` and ``G``:
    it is set by the data, not by the learning rate alone. One learning rate then has to serve
    layers and steps whose lengths differ several-fold; ``direction="polar"`` steps along the
    polar factor of the whitened matrix instead (times Muon's shape factor), so that every layer
    moves by Muon's length. On the tiny GPT-2 and Llama of the book's Chapter 14 (8 held-out
    seeds, every optimizer tuned alike) that variant was ahead of tuned Muon on both models at
    300 steps, and at 1,200 ahead on GPT-2 and level on Llama; the paper's Iso was behind AdamW
    with two rates on both.

    ``Iso(model, lr=...)``: the model is needed to hook its layers. With ``params=None`` it is
    routed by :func:`~isolab.optim.split_parameters`: linear-like and ``nn.Conv1d``/``nn.Conv2d``
    weights are whitened; embeddings, a language model's untied head (``head="auto"``; ``head=None``
    whitens it), biases, gains and matrices the hooks cannot see go to an AdamW group
    (``algorithm='adam'``, the ``adam_*`` arguments). With ``params=`` (groups, each with
    ``algorithm='iso'`` or ``'adam'``) only the given parameters are optimized. Call
    :meth:`remove_hooks` (or use ``with Iso(...) as opt:``) to detach the hooks.

    Args:
        model: the model.
        lr: ``η >= 0`` (a float or a one-element tensor).
        momentum: ``μ ∈ [0, 1)``.
        nesterov: the Nesterov form.
        weight_decay: decoupled weight decay ``λ >= 0``.
        beta_cov: ``β ∈ [0, 1)`` of the covariance averages.
        damping: relative damping ``δ >= 0``.
        stat_interval, root_interval: refresh the statistics / the roots every this many steps.
        root_method: ``"eigh"``, ``"newton"`` or ``"eigenbasis"`` (:mod:`isolab.optim.roots`);
            ``root_tol``: the Newton method's residual tolerance (default ``1e-3``).
        warmup_steps: steps that only collect statistics.
        shrinkage: raise the damping for batches narrower than a layer
            (:func:`isolab.optim.covariance.effective_damping`); ``False`` diverges at small batches.
        stat_rows: rows per backward behind the statistics: ``"auto"``, an int, or ``None`` (all).
        stats_dtype: ``torch.float32`` or ``torch.float64`` for statistics and roots.
        direction: ``"whitened"`` (the paper's step) or ``"polar"`` (its polar factor at Muon's
            length; a learning rate near Muon's, e.g. 0.02 to 0.04, suits it).
        momentum_placement: ``"gradient"`` (momentum on ``∇W/b``, then whitened) or ``"update"``
            (each step whitened with the current roots, the momentum averages whitened steps);
            they agree while the roots stay fixed.
        adam_lr, adam_betas, adam_eps, adam_weight_decay: the AdamW fallback group's.
        params, embeddings, head, others: routing (see above).
        sync_statistics: under DDP, sum the captured statistics over the processes so that every
            replica whitens with the *global* batch's covariances (``None``: iff
            ``torch.distributed`` is initialized with more than one process; ``False``: each
            process its own, and the replicas drift). The sums travel on statistics steps only,
            as upper triangles in buckets; the row counts every step.
        process_group: the ``torch.distributed`` group (``None``: the default group).
        distribute_roots: under DDP, each process computes the roots it owns (balanced by ``n³``)
            on refresh steps and shares them, instead of every process computing all.
        nonfinite, grad_scaler: see :mod:`isolab.optim._base` (loss scaling, non-finite steps).
    """

    algorithm = "iso"

    def __init__(
        self, model: nn.Module, lr: float = 0.02, momentum: float = 0.95, *, nesterov: bool = True,
        weight_decay: float = 0.0, beta_cov: float = 0.95, damping: float = 1e-3, stat_interval: int = 1,
        root_interval: int = 10, root_method: str = "eigh", root_tol: float | None = None, warmup_steps: int = 0,
        shrinkage: bool = True, stat_rows: int | str | None = "auto", stats_dtype: torch.dtype = torch.float32,
        momentum_placement: str = "gradient", direction: str = "whitened", adam_lr: float = 3e-4,
        adam_betas: tuple[float, float] = (0.9, 0.95), adam_eps: float = 1e-8, adam_weight_decay: float = 0.0,
        params=None, embeddings=None, head="auto", others: str = "raise", sync_statistics: bool | None = None,
        process_group=None, distribute_roots: bool = True, nonfinite: str = "auto", grad_scaler=None,
    ):
        defaults = dict(lr=lr, momentum=momentum, nesterov=nesterov, weight_decay=weight_decay, beta_cov=beta_cov,
                        damping=damping, stat_interval=stat_interval, root_interval=root_interval,
                        root_method=root_method, root_tol=root_tol, warmup_steps=warmup_steps, shrinkage=shrinkage,
                        stat_rows=stat_rows, stats_dtype=stats_dtype, momentum_placement=momentum_placement,
                        direction=direction, nonfinite=nonfinite)
        adam = _named_errors("Iso", lambda: adam_fallback_defaults(adam_lr, adam_betas, adam_eps, adam_weight_decay))
        super().__init__(model, params, defaults, adam, embeddings=embeddings, head=head, others=others,
                         sync_statistics=sync_statistics, process_group=process_group,
                         distribute_roots=distribute_roots, grad_scaler=grad_scaler)

    def _validate_matrix_group(self, group, gi):
        self._validate_common(group, gi)
        check_beta(group["momentum"], "momentum")
        check_bool(group["nesterov"], "nesterov")
        check_choice(group.setdefault("momentum_placement", "gradient"), "momentum_placement", MOMENTUM_PLACEMENTS)
        check_choice(group.setdefault("direction", "whitened"), "direction", DIRECTIONS)

    def _pre_all(self, items):
        before = []
        for it in items:
            it.rows = fsdp.local(it.param.grad) / it.count
            it.carry = None
            if it.group["momentum_placement"] == "gradient":
                before.append(it)
        momentum_rows(before, always=False)

    def _direction(self, it):
        st = self._owner_state(it)
        d = self._whiten(it.param, it.full, st)
        if it.group["direction"] == "polar":
            d = polar_direction(d, *self._dims(it.param))
        return self._transform_direction(it.group, it.param, d, st).to(it.param.dtype)

    def _post(self, it, d, write: Writer):
        group, st = it.group, it.state
        lr, mu, wd = as_float(group["lr"]), group["momentum"], group["weight_decay"]
        w = fsdp.local(it.param)
        d = d.reshape(w.shape)
        if mu > 0 and group["momentum_placement"] == "update":  # momentum on the whitened steps
            if "momentum_buffer" not in st:
                st["momentum_buffer"] = torch.zeros_like(it.param)
            buf = fsdp.local(st["momentum_buffer"])
            write(buf, lambda b: b.lerp_(d, 1 - mu))
            d = d.lerp(buf, mu) if group["nesterov"] else buf
        elif it.carry is not None:  # momentum before the whitening: computed in the first phase
            self._set_rows(it, "momentum_buffer", it.carry, write)

        def update(t):
            rules.decoupled_weight_decay_(t, lr, wd)
            return t.add_(d.to(t.dtype), alpha=-lr)

        write(w, update)


class IsoAdam(WhiteningOptimizer):
    r"""IsoAdam: Adam on the two-sidedly whitened gradient, so that Adam's hyperparameters transfer.

    .. math::
        \hat G_t &= (\hat C_X + \delta_X I)^{-1/2}\,(\nabla W_t / b)\,(\hat C_G + \delta_G I)^{-1/2} \\
        m_t &= \beta_1 m_{t-1} + (1-\beta_1)\hat G_t, \quad v_t = \beta_2 v_{t-1} + (1-\beta_2)\hat G_t^{\,2} \\
        W_t &= W_{t-1}(1-\eta\lambda) - \eta\, \frac{m_t/(1-\beta_1^t)}{\sqrt{v_t/(1-\beta_2^t)} + \epsilon}

    (the statistics of :mod:`isolab.optim.iso`). The first step is ``lr·Ĝ/(|Ĝ| + ε) ≈ lr·sign(Ĝ)``.
    With ``whiten=False`` no hooks are placed and the matrix groups are exactly
    ``torch.optim.AdamW``. Construction and routing as :class:`Iso`; the AdamW fallback group
    (embeddings, head, biases, gains) uses IsoAdam's own ``lr``, ``betas``, ``eps`` and
    ``weight_decay`` unless ``adam_lr`` etc. are given.

    The defaults are ``torch.optim.AdamW``'s: ``lr=1e-3``, ``betas=(0.9, 0.999)``, ``eps=1e-8``,
    ``weight_decay=0.01`` (decoupled, also on the fallback group, as AdamW decays every parameter);
    pass ``weight_decay=0.0`` for the paper's batch formula.

    Args:
        model: the model.
        lr, betas, eps, weight_decay: Adam's (decoupled weight decay; ``lr`` a float or a
            one-element tensor).
        beta_cov, damping, stat_interval, root_interval, root_method, root_tol: as in :class:`Iso`.
        warmup_steps, shrinkage, stat_rows, stats_dtype: as in :class:`Iso`.
        whiten: whiten the gradient (default True); False gives AdamW.
        adam_lr, adam_betas, adam_eps, adam_weight_decay: the fallback group's (default: IsoAdam's own).
        params, embeddings, head, others: routing, as in :class:`Iso`.
        sync_statistics, process_group, distribute_roots, nonfinite, grad_scaler: as in :class:`Iso`.
    """

    algorithm = "isoadam"

    def __init__(
        self, model: nn.Module, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), *, eps: float = 1e-8,
        weight_decay: float = 1e-2, beta_cov: float = 0.95, damping: float = 1e-3, stat_interval: int = 1,
        root_interval: int = 10, root_method: str = "eigh", root_tol: float | None = None, warmup_steps: int = 0,
        shrinkage: bool = True, stat_rows: int | str | None = "auto", stats_dtype: torch.dtype = torch.float32,
        whiten: bool = True, adam_lr: float | None = None, adam_betas: tuple[float, float] | None = None,
        adam_eps: float | None = None, adam_weight_decay: float | None = None, params=None, embeddings=None,
        head="auto", others: str = "raise", sync_statistics: bool | None = None, process_group=None,
        distribute_roots: bool = True, nonfinite: str = "auto", grad_scaler=None,
    ):
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, beta_cov=beta_cov, damping=damping,
                        stat_interval=stat_interval, root_interval=root_interval, root_method=root_method,
                        root_tol=root_tol, warmup_steps=warmup_steps, shrinkage=shrinkage, stat_rows=stat_rows,
                        stats_dtype=stats_dtype, whiten=whiten, nonfinite=nonfinite)
        given = (("lr", lr, adam_lr), ("betas", betas, adam_betas), ("eps", eps, adam_eps),
                 ("weight_decay", weight_decay, adam_weight_decay))
        adam = _named_errors("IsoAdam", lambda: adam_fallback_defaults(
            *[own if other is None else other for _, own, other in given],
            names=tuple(name if other is None else f"adam_{name}" for name, _, other in given)))
        super().__init__(model, params, defaults, adam, embeddings=embeddings, head=head, others=others,
                         sync_statistics=sync_statistics, process_group=process_group,
                         distribute_roots=distribute_roots, grad_scaler=grad_scaler)

    def _validate_matrix_group(self, group, gi):
        self._validate_common(group, gi)
        group["betas"] = check_betas(group["betas"])
        check_eps(group["eps"])
        check_bool(group["whiten"], "whiten")

    def _pre_all(self, items):
        for it in items:
            it.rows, it.carry = fsdp.local(it.param.grad), None

    def _direction(self, it):
        st = self._owner_state(it)
        g = it.full.to(st["root_x"].dtype) / it.count
        return self._transform_direction(it.group, it.param, self._whiten(it.param, g, st), st).to(it.param.dtype)

    def _post(self, it, d, write: Writer):
        group, p = it.group, it.param
        d = p.grad if d is None else d.reshape(fsdp.local(p).shape)  # whiten=False: AdamW on the gradient
        adam_step_([p], [d], [it.state], as_float(group["lr"]), group["betas"], group["eps"], group["weight_decay"],
                   write, count_key="adam_step")
