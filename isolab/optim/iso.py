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
   with relative damping ``δ``: ``P_X = (Ĉ_X + δ·tr(Ĉ_X)/n·I)^{-1/2}``, ``P_G`` likewise;
   by ``eigh`` (``root_method="eigh"``; pseudo-inverse on the null space when ``δ = 0``,
   float64 retry) or by tracking the previous root (``root_method="newton"``:
   :func:`isolab.linalg.inverse_sqrt_track` keeps it while ``‖I − P Ĉ P‖_F/√n ≤ root_tol``
   (default ``1e-3``), else takes one symmetric Newton step, and returns a root only with a
   *measured* residual ``≤ max(root_tol, 0.05)``; otherwise the root is recomputed exactly:
   ``eigh`` on a CPU, the warm-started :func:`isolab.linalg.inverse_sqrt_newton` on an
   accelerator). The tracking step is cheap (2–5 matmuls per side) and accurate for
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

With single-batch statistics (``β = 0``, ``μ = 0``, ``δ = 0``) Iso's step is
``η · iso_update(X, G)`` and IsoAdam's first step is ``η · iso_adam_first_step(X, G)``
(up to Adam's ``ε``): the paper's formula.

What ``self.state[p]`` holds for a whitened weight: ``step``, ``stat_step``; ``cov_x``,
``cov_g`` when the average has memory (``β > 0``, ``stat_interval > 1`` or warm-up);
``root_x``, ``root_g`` when roots are reused across steps (``root_interval > 1`` or the
Newton warm start); Iso's ``momentum_buffer`` (``μ > 0``); IsoAdam's ``exp_avg``,
``exp_avg_sq``, ``adam_step``. **Lean state**: when statistics and roots are refreshed
together (``stat_interval == root_interval > 1``, ``root_method="eigh"``, ``δ > 0``, no
warm-up) only the roots are kept, with the shifts ``shift_x``, ``shift_g`` (floats,
``λ = δ·tr(Ĉ)/n``), and the average is rebuilt at the next refresh as
``C = (P^{-2} − λI)(1 − β^k)`` (:func:`isolab.linalg.covariance_from_inverse_sqrt`, float64);
the roots are then computed with eigenvalues of ``Ĉ + λI`` clamped to ``≥ λ`` (not
dropped), so that ``P`` stays invertible. A whitened matrix then costs ``n² + m²`` state
elements beyond Adam's. The rebuilt average differs from the stored one by about
``2·eps·cond(P)·‖Ĉ + λI‖`` (float32 roots: ≤ 2e-3 relative at cond 1e3 in the tests). Everything needed to continue is in the state, so a
resumed run continues bitwise identically on CPU.
"""

from __future__ import annotations

import torch
from torch import nn

from .. import linalg, updates
from ._base import (
    RoutedOptimizer,
    adam_fallback_defaults,
    adam_step,
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
from .statistics import LayerStatistics

__all__ = ["Iso", "IsoAdam"]

_ROOT_METHODS = ("eigh", "newton")


class _IsoBase(RoutedOptimizer):
    stat_keys = ("cov_x", "cov_g", "root_x", "root_g")

    def __init__(self, model, params, defaults, adam_defaults, *, embeddings, head, others, stats_dtype):
        if not isinstance(model, nn.Module):
            raise TypeError(
                f"{type(self).__name__} needs the model (an nn.Module) to hook its nn.Linear layers, "
                f"got {type(model).__name__}; pass parameters with params=..."
            )
        self._stats_dtype = check_dtype(stats_dtype)
        self._linear_by_weight = {
            id(m.weight): name for name, m in model.named_modules() if isinstance(m, nn.Linear)
        }
        if not self._linear_by_weight:
            raise ValueError(
                f"{type(self).__name__}: the model ({type(model).__name__}) has no nn.Linear layer; "
                "Iso whitens the inputs and output gradients of nn.Linear layers and has nothing to do here"
            )
        self._layer_of: dict[int, str] = {}
        if params is None:
            super().__init__(model, defaults, adam_defaults, embeddings=embeddings, head=head, others=others)
        else:
            if embeddings is not None or head is not None:
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
        self.statistics: LayerStatistics | None = (
            LayerStatistics(hooked, dtype=self._stats_dtype) if hooked else None
        )
        self._update_capture()

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
        for p in group["params"]:
            layer = self._linear_by_weight.get(id(p))
            if layer is None:
                raise ValueError(
                    f"{type(self).__name__}: {self._name(p, gi)} is not the weight of an nn.Linear of the "
                    "model; only nn.Linear weights can be whitened (their inputs and output gradients are "
                    "captured by hooks). Put other parameters in a group with algorithm='adam'."
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

    def _update_capture(self):
        if self.statistics is not None:
            self.statistics.clear()
            self.statistics.enabled = self._next_needs_stats()

    def _after_step(self):
        self._update_capture()

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
        keep_root = group["root_interval"] > 1 or group["root_method"] == "newton"
        return keep_cov, keep_root

    def _root(self, C, group, previous, what, name):
        try:
            if group["root_method"] == "eigh" and self._lean(group) and _lean_shift(C, group["damping"]) is not None:
                R = _damped_inverse_sqrt(C, group["damping"], what)
            elif group["root_method"] == "eigh":
                R = linalg.symmetric_inverse_root(C, p=2, damping=group["damping"])
            else:
                R = None
                if previous is not None:
                    tol = 1e-3 if group["root_tol"] is None else group["root_tol"]
                    R = linalg.inverse_sqrt_track(
                        C, previous, group["damping"], tol=tol, max_residual=max(tol, _TRACK_MAX_RESIDUAL)
                    ).root
                if R is None:  # first root, or the tracked root failed its residual bound
                    if C.device.type == "cpu":  # eigh costs ~6 matmuls at n=1024 on a CPU core: cheapest exact
                        R = linalg.symmetric_inverse_root(C, p=2, damping=group["damping"])
                    else:
                        R = linalg.inverse_sqrt_newton(C, damping=group["damping"], initial=previous)
        except ValueError as e:
            raise FloatingPointError(
                f"{type(self).__name__}: cannot compute {what}^(-1/2) for {name}: {e}; "
                "no parameter or optimizer state was changed"
            ) from e
        if not bool(torch.isfinite(R).all()):
            raise FloatingPointError(
                f"{type(self).__name__}: non-finite {what}^(-1/2) for {name}; no parameter or optimizer state was changed"
            )
        return R

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

    def _prepare_matrix_groups(self, groups):
        plans = []
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
                rows = stats.rows(layer) if stats is not None and stats.attached else 0
                if rows == 0:
                    raise RuntimeError(
                        f"{type(self).__name__}: {name} has a gradient but no input/output-gradient rows were "
                        f"captured for layer {layer!r}. Was the forward run in eval mode or under no_grad, were "
                        "the hooks removed, or is the weight used without calling the module (e.g. "
                        "nn.MultiheadAttention's out_proj)?"
                    )
                beta = group["beta_cov"]
                if (t - 1) % group["stat_interval"] == 0:
                    s = stats.sums(layer)
                    if s is None:
                        raise RuntimeError(
                            f"{type(self).__name__}: statistics for layer {layer!r} were not collected "
                            "(LayerStatistics.enabled was switched off by hand?)"
                        )
                    xx, gg, _ = s
                    n, m = p.shape[1], p.shape[0]
                    if xx.shape != (n, n) or gg.shape != (m, m):
                        raise RuntimeError(f"statistics of layer {layer!r} do not match {name}")
                    if not bool(torch.isfinite(xx).all() & torch.isfinite(gg).all()):
                        raise FloatingPointError(
                            f"{type(self).__name__}: non-finite (NaN or Inf) input/output-gradient statistics "
                            f"for {name} (layer {layer!r}); no parameter or optimizer state was changed"
                        )
                    cx, cg = xx / rows, gg / rows
                    if "cov_x" in st:
                        cx = cx.lerp(st["cov_x"], beta)
                        cg = cg.lerp(st["cov_g"], beta)
                    elif beta > 0 and "shift_x" in st:  # lean state: rebuild the EMA from the roots
                        corr_old = 1 - beta ** st["stat_step"]
                        try:
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
                warm = t <= group["warmup_steps"]
                if not warm and ("root_x" not in st or (t - 1) % group["root_interval"] == 0):
                    cx, cg = new.get("cov_x", st.get("cov_x")), new.get("cov_g", st.get("cov_g"))
                    if cx is None:
                        raise RuntimeError(f"{type(self).__name__}: no statistics yet for {name}")
                    k = new.get("stat_step", st.get("stat_step"))
                    corr = 1 - beta**k
                    new["root_x"] = self._root(cx / corr, group, st.get("root_x"), "Cov(X)", name)
                    new["root_g"] = self._root(cg / corr, group, st.get("root_g"), "Cov(G)", name)
                    if self._lean(group):
                        shifts = [_lean_shift(c / corr, group["damping"]) for c in (cx, cg)]
                        if None not in shifts:  # both roots positive definite: store only them
                            new["shift_x"], new["shift_g"] = shifts
                plans.append((group, p, new, rows, warm))

        def apply():
            for group, p, new, rows, warm in plans:
                st = self.state[p]
                st.update(new)
                if rows is None:  # IsoAdam with whiten=False: exactly Adam
                    adam_step(p, p.grad, st, group["lr"], group["betas"], group["eps"], group["weight_decay"], "adam_step")
                    continue
                if not warm:
                    self._apply_whitened(group, p, st, rows)
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

        return apply

    def _apply_whitened(self, group, p, st, rows):  # pragma: no cover
        raise NotImplementedError


#: Largest whitening residual ``‖I − P Ĉ P‖_F/√n`` accepted from a tracked root
#: (:func:`isolab.linalg.inverse_sqrt_track`); above it the root is recomputed exactly.
_TRACK_MAX_RESIDUAL = 0.05


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
    if not bool(torch.isfinite(C).all()):
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


class Iso(_IsoBase):
    r"""Iso (arXiv 2307.12979): SGD with momentum, whitened on both sides of each layer.

    .. math::
        \hat C_X &= \text{bias-corrected EMA}_\beta\big(X_t^\top X_t/b\big), \quad
        \hat C_G = \text{bias-corrected EMA}_\beta\big(G_t^\top G_t/b\big) \\
        B_t &= \mu B_{t-1} + (1-\mu)\,\nabla W_t/b, \quad
        u_t = (1-\mu)\nabla W_t/b + \mu B_t \ \text{(Nesterov) or } B_t \\
        W_t &= W_{t-1}(1-\eta\lambda) - \eta\,(\hat C_X + \delta_X I)^{-1/2}\, u_t\,
               (\hat C_G + \delta_G I)^{-1/2}

    with relative damping ``δ_X = δ·tr(Ĉ_X)/n``; see :mod:`isolab.optim.iso` for the full
    reading (refresh intervals, warm-up, state). With ``beta_cov=0, momentum=0,
    damping=0`` the step is ``lr · iso_update(X, G)``, whose singular values are the
    canonical correlations between ``X`` and ``G`` (all ``≤ 1``).

    Construction: ``Iso(model, lr=..., ...)``. The model is needed to hook its
    ``nn.Linear`` layers. With ``params=None`` the model is routed by
    :func:`~isolab.optim.split_parameters` (``embeddings=``, ``head=``, ``others=``):
    ``nn.Linear`` weights are whitened, everything else goes to an AdamW group
    (``algorithm='adam'``, ``adam_*`` hyperparameters). With ``params=`` (groups, each
    with ``algorithm='iso'`` (default) or ``'adam'``) only the given parameters are
    optimized; ``'iso'`` groups may hold only weights of the model's ``nn.Linear`` layers.
    Call :meth:`remove_hooks` (or use ``with Iso(...) as opt:``) to detach the hooks.

    Args:
        lr: ``η >= 0``.
        momentum: ``μ ∈ [0, 1)``; ``nesterov``: Nesterov form.
        beta_cov: ``β ∈ [0, 1)`` of the covariance averages.
        damping: relative damping ``δ >= 0``.
        stat_interval, root_interval: refresh the statistics / the inverse roots every
            this many steps (positive ints).
        root_method: ``"eigh"`` (exact, pseudo-inverse) or ``"newton"`` (matmul-only:
            the previous root is kept while its whitening residual
            ``‖I − P Ĉ P‖_F/√n`` is at most ``root_tol`` (default ``1e-3``), refined by
            one Newton step while the residual is at most 0.1, and recomputed by
            :func:`isolab.linalg.inverse_sqrt_newton` otherwise; this makes refreshing
            every step cheap when the statistics change slowly).
        warmup_steps: steps that only collect statistics.
        weight_decay: decoupled weight decay ``λ >= 0``.
        stats_dtype: ``torch.float32`` or ``torch.float64`` for statistics and roots.
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
        params=None,
        embeddings=None,
        head=None,
        others: str = "raise",
    ):
        defaults = dict(
            lr=lr, momentum=momentum, nesterov=nesterov, beta_cov=beta_cov, damping=damping,
            stat_interval=stat_interval, root_interval=root_interval, root_method=root_method,
            root_tol=root_tol, warmup_steps=warmup_steps, weight_decay=weight_decay,
        )
        adam = adam_fallback_defaults(adam_lr, adam_betas, adam_eps, adam_weight_decay)
        super().__init__(model, params, defaults, adam, embeddings=embeddings, head=head, others=others, stats_dtype=stats_dtype)

    def _validate_matrix_group(self, group, gi):
        self._validate_common(group, gi)
        check_beta(group["momentum"], "momentum")
        check_bool(group["nesterov"], "nesterov")

    def _apply_whitened(self, group, p, st, rows):
        lr, mu, wd = group["lr"], group["momentum"], group["weight_decay"]
        g = p.grad / rows
        if mu > 0:
            buf = st.get("momentum_buffer")
            if buf is None:
                buf = st["momentum_buffer"] = torch.zeros_like(p)
            buf.lerp_(g, 1 - mu)
            u = g.lerp(buf, mu) if group["nesterov"] else buf
        else:
            u = g
        sd = st["root_x"].dtype
        d = updates.two_sided(u.to(sd), st["root_g"], st["root_x"])
        if wd:
            p.mul_(1 - lr * wd)
        p.add_(d.to(p.dtype), alpha=-lr)


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
    unless ``adam_lr`` etc. are given.

    Args:
        lr, betas, eps, weight_decay: Adam's (decoupled weight decay).
        beta_cov, damping, stat_interval, root_interval, root_method, root_tol, warmup_steps, stats_dtype:
            as in :class:`Iso`.
        whiten: whiten the gradient (default True); False gives plain Adam.
    """

    algorithm = "isoadam"

    def __init__(
        self,
        model: nn.Module,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
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
        params=None,
        embeddings=None,
        head=None,
        others: str = "raise",
    ):
        defaults = dict(
            lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, beta_cov=beta_cov, damping=damping,
            stat_interval=stat_interval, root_interval=root_interval, root_method=root_method,
            root_tol=root_tol, warmup_steps=warmup_steps, whiten=whiten,
        )
        adam = adam_fallback_defaults(
            lr if adam_lr is None else adam_lr,
            betas if adam_betas is None else adam_betas,
            eps if adam_eps is None else adam_eps,
            weight_decay if adam_weight_decay is None else adam_weight_decay,
        )
        super().__init__(model, params, defaults, adam, embeddings=embeddings, head=head, others=others, stats_dtype=stats_dtype)

    def _validate_matrix_group(self, group, gi):
        self._validate_common(group, gi)
        group["betas"] = check_betas(group["betas"])
        check_eps(group["eps"])
        check_bool(group["whiten"], "whiten")

    def _apply_whitened(self, group, p, st, rows):
        sd = st["root_x"].dtype
        w = updates.two_sided(p.grad.to(sd) / rows, st["root_g"], st["root_x"]).to(p.dtype)
        adam_step(p, w, st, group["lr"], group["betas"], group["eps"], group["weight_decay"], "adam_step")
