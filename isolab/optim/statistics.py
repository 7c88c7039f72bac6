"""Capture each ``nn.Linear``'s input ``X`` and output gradient ``G`` with hooks.

Conventions. isolab's mathematics writes a layer as ``Y = X W`` with ``W ∈ R^{n×m}``,
``X ∈ R^{b×n}`` (rows are samples) and ``G = ∂L/∂Y ∈ R^{b×m}``; the weight gradient is
``XᵀG``. ``nn.Linear`` stores ``weight`` as ``(out, in) = (m, n)``, i.e. ``Wᵀ``, so in
torch's layout ``weight.grad = Gᵀ X``. Leading dimensions (batch, sequence, ...) are
flattened into rows, so a ``(batch, seq, dim)`` activation contributes ``batch·seq`` rows.

How it is captured (and why this way):

- ``X``: a forward-pre hook stores the input, detached (no copy, no graph).
- ``G``: a forward hook registers a *tensor* hook on the layer's output, which receives
  ``∂L/∂Y``. Full backward hooks (``register_full_backward_hook``) are not used: they
  wrap the output in a ``BackwardHookFunction`` and break with ``ReLU(inplace=True)``.
  A tensor hook registered before an in-place op receives the gradient with respect to
  the value *before* the op, which is exactly the layer's ``∂L/∂Y``. For ``(batch, seq,
  dim)`` inputs ``F.linear``'s output is a view of a 2-D product, and an in-place op on
  a view replaces the view's autograd node (a hook on the view would never fire), so the
  hook goes on the view's base, which holds the same elements.
- Nothing is captured when the module is in eval mode, when autograd is off
  (``torch.no_grad``/``inference_mode``), or when the output does not require grad. While
  :attr:`LayerStatistics.enabled` is ``False`` only the row count ``b`` is kept (the
  optimizers switch the covariance products off on steps whose statistics they will not
  use, but still need ``b`` to scale the gradient).
- Several forward/backward passes before :meth:`LayerStatistics.clear` (gradient
  accumulation, a layer applied twice) are concatenated row-wise: ``[X₁; X₂]ᵀ[G₁; G₂]
  = X₁ᵀG₁ + X₂ᵀG₂``, which is what ``weight.grad`` accumulates.

Scale of ``G``. ``G`` is what autograd provides: with a mean-reduced loss it carries the
loss's ``1/b``. It is kept as is; ``Cov(G) = GᵀG / b`` is computed from this raw ``G``.
The optimizers divide ``weight.grad = XᵀG`` by the same row count ``b``, so that with
single-batch statistics their step is exactly ``iso_update(X, G)`` of the captured
tensors — and since ``Cov(G)^{-1/2}`` undoes any scalar multiple of ``G``, it does not
matter whether the loss was a mean or a sum.

The per-layer sums ``XᵀX``, ``GᵀG`` are formed in the backward hook in ``dtype``
(float32 by default, float64 on request) even for bfloat16 layers; with ``keep=True`` the
raw ``X`` and ``G`` are also kept (tests, inspection).

Limitations: activation checkpointing re-runs forwards during backward and would count
those rows twice; modules that use a layer's ``weight`` without calling the layer
(``nn.MultiheadAttention``'s ``out_proj``) are invisible to hooks (the optimizers detect
this and raise); hooks are fragile under ``torch.compile``.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from .. import linalg

__all__ = ["LayerStatistics"]


class _Capture:
    __slots__ = ("xx", "gg", "rows", "inputs", "grads", "pending")

    def __init__(self):
        self.xx = None
        self.gg = None
        self.rows = 0
        self.inputs: list[torch.Tensor] = []
        self.grads: list[torch.Tensor] = []
        self.pending: list[torch.Tensor] = []


class LayerStatistics:
    """Hooks on ``nn.Linear`` layers that collect ``X``, ``G``, ``XᵀX`` and ``GᵀG``.

    Args:
        modules: an ``nn.Module`` (every ``nn.Linear`` inside it is hooked, named as in
            ``named_modules()``) or a mapping ``name -> nn.Linear``.
        dtype: dtype of the accumulated sums (``torch.float32`` or ``torch.float64``).
        keep: also keep the raw captured ``X`` and ``G`` (memory: one copy of every
            hooked layer's input and output gradient until :meth:`clear`).

    Use as a context manager, or call :meth:`remove` when done::

        with LayerStatistics(model, keep=True) as stats:
            loss_fn(model(x), y).backward()
            X, G = stats.inputs("fc1"), stats.output_grads("fc1")
    """

    def __init__(
        self,
        modules: nn.Module | Mapping[str, nn.Module],
        *,
        dtype: torch.dtype = torch.float32,
        keep: bool = False,
    ):
        if dtype not in (torch.float32, torch.float64):
            raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
        if isinstance(modules, nn.Module):
            mods = {n: m for n, m in modules.named_modules() if isinstance(m, nn.Linear)}
        elif isinstance(modules, Mapping):
            mods = dict(modules)
            for n, m in mods.items():
                if not isinstance(m, nn.Linear):
                    raise TypeError(f"module {n!r} is a {type(m).__name__}, not an nn.Linear")
        else:
            raise TypeError(f"modules must be an nn.Module or a mapping of nn.Linear, got {type(modules).__name__}")
        if not mods:
            raise ValueError("LayerStatistics found no nn.Linear layer to hook")
        self.dtype = dtype
        self.keep = bool(keep)
        self.enabled = True
        self.modules: dict[str, nn.Linear] = mods
        self._captures = {n: _Capture() for n in mods}
        self._handles = []
        for name, m in mods.items():
            self._handles.append(m.register_forward_pre_hook(self._make_pre_hook(name)))
            self._handles.append(m.register_forward_hook(self._make_fwd_hook(name)))

    # hooks ------------------------------------------------------------------------
    def _active(self, module) -> bool:
        return module.training and torch.is_grad_enabled()

    def _make_pre_hook(self, name):
        def pre_hook(module, args):
            if self._active(module) and args:
                self._captures[name].pending.append(args[0].detach())

        return pre_hook

    def _make_fwd_hook(self, name):
        def fwd_hook(module, args, output):
            cap = self._captures[name]
            if not cap.pending:
                return
            x = cap.pending.pop()
            if not (isinstance(output, torch.Tensor) and output.requires_grad):
                return

            def grad_hook(g):
                self._record(name, x, g)

            # For inputs with more than 2 dims, F.linear returns a *view* of a 2-D result.
            # An in-place op on that view (ReLU(inplace=True)) rebuilds the view's autograd
            # node, and a hook on the view never fires; a hook on the base (same elements)
            # does, and receives dL/dY of the pre-in-place value.
            target = output
            base = output._base if output._is_view() else None
            if base is not None and base.numel() == output.numel() and base.requires_grad:
                target = base
            target.register_hook(grad_hook)

        return fwd_hook

    def _record(self, name, x, g):
        cap = self._captures[name]
        x2 = x.reshape(-1, x.shape[-1])
        g2 = g.detach().reshape(-1, g.shape[-1])
        cap.rows += x2.shape[0]
        if not self.enabled:
            return
        xf = x2.to(self.dtype)
        gf = g2.to(self.dtype)
        xx = linalg.gram(xf)
        gg = linalg.gram(gf)
        if cap.xx is None:
            cap.xx, cap.gg = xx, gg
        else:
            cap.xx += xx
            cap.gg += gg
        if self.keep:
            cap.inputs.append(x2)
            cap.grads.append(g2)

    # access -----------------------------------------------------------------------
    def _get(self, name) -> _Capture:
        try:
            return self._captures[name]
        except KeyError:
            raise KeyError(f"no hooked layer named {name!r}; hooked: {sorted(self._captures)}") from None

    def rows(self, name: str) -> int:
        """Number of rows ``b`` captured for ``name`` since the last :meth:`clear`."""
        return self._get(name).rows

    def sums(self, name: str):
        """``(XᵀX, GᵀG, b)`` accumulated since the last :meth:`clear`, or ``None``."""
        cap = self._get(name)
        if cap.xx is None:
            return None
        return cap.xx, cap.gg, cap.rows

    def covariances(self, name: str):
        """``(Cov(X), Cov(G)) = (XᵀX / b, GᵀG / b)`` of the captured rows, or ``None``."""
        s = self.sums(name)
        if s is None:
            return None
        xx, gg, b = s
        return xx / b, gg / b

    def inputs(self, name: str) -> torch.Tensor:
        """The captured ``X`` (``b × n``, rows concatenated); needs ``keep=True``."""
        return self._kept(name, "inputs")

    def output_grads(self, name: str) -> torch.Tensor:
        """The captured ``G = ∂L/∂Y`` (``b × m``); needs ``keep=True``."""
        return self._kept(name, "grads")

    def _kept(self, name, attr):
        if not self.keep:
            raise RuntimeError("raw X and G are only kept with LayerStatistics(..., keep=True)")
        items = getattr(self._get(name), attr)
        if not items:
            raise RuntimeError(f"nothing captured for layer {name!r} since the last clear()")
        return torch.cat(items, 0) if len(items) > 1 else items[0]

    def clear(self) -> None:
        """Forget everything captured (call after each optimizer step)."""
        for name in self._captures:
            self._captures[name] = _Capture()

    def remove(self) -> None:
        """Remove every hook (idempotent) and forget the captures."""
        for h in self._handles:
            h.remove()
        self._handles = []
        self.clear()

    @property
    def attached(self) -> bool:
        return bool(self._handles)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()
        return False

    def __repr__(self):
        return f"LayerStatistics({len(self.modules)} layers, dtype={self.dtype}, keep={self.keep}, attached={self.attached})"
