"""Capture each layer's input ``X`` and output gradient ``G`` with hooks (``nn.Linear`` and
every other linear-like module of :func:`isolab.nn.linear_like`, ``nn.Conv1d``, ``nn.Conv2d``).

Conventions. isolab's mathematics writes a layer as ``Y = X W`` with ``W ∈ R^{n×m}``,
``X ∈ R^{b×n}`` (rows are samples) and ``G = ∂L/∂Y ∈ R^{b×m}``; the weight gradient is
``XᵀG``. ``nn.Linear`` stores ``weight`` as ``(out, in) = (m, n)``, i.e. ``Wᵀ``, so in
torch's layout ``weight.grad = Gᵀ X``; a module registered with ``weight_layout="in_out"``
(transformers' ``Conv1D``) stores ``W`` itself and ``weight.grad = XᵀG``. Either way ``X``
has the layer's ``in`` columns and ``G`` its ``out`` columns. Leading dimensions (batch,
sequence, ...) are flattened into rows, so a ``(batch, seq, dim)`` activation contributes
``batch·seq`` rows.

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
  :attr:`LayerStatistics.enabled` is ``False`` (and ``keep`` is off) only the row count
  ``b`` is kept: no input is held, nothing is copied, unfolded or multiplied (the
  optimizers switch the covariance products off on steps whose statistics they will not
  use, but still need ``b`` to scale the gradient).
- **Row subsampling** (:attr:`LayerStatistics.stat_rows`, ``{layer name: N}``): a layer
  whose backward brings ``b > N`` rows forms its sums from ``N`` of them, drawn uniformly
  without replacement (the same rows for ``X`` and ``G``), scaled by ``b/N``:
  ``XᵀX ≈ (b/N)·X_Sᵀ X_S``, an unbiased estimate of the full ``XᵀX`` (as K-FAC
  implementations subsample their factor statistics). Cost ``2N(n² + m²)`` instead of
  ``2b(n² + m²)``. With ``b ≤ N`` all rows are used, bitwise as without the option. The
  draws come from a generator seeded with :attr:`LayerStatistics.sample_seed` at every
  :meth:`LayerStatistics.clear` (the optimizers seed it with the step number, so a resumed
  run draws the same rows); between two clears, the layers and passes whose backward brings
  the same number of rows share one draw. :meth:`LayerStatistics.used_rows` reports how many rows are behind the
  sums (``Σ min(b_i, N)`` over the passes).
- Several forward/backward passes before :meth:`LayerStatistics.clear` (gradient
  accumulation, a layer applied twice) are concatenated row-wise: ``[X₁; X₂]ᵀ[G₁; G₂]
  = X₁ᵀG₁ + X₂ᵀG₂``, which is what ``weight.grad`` accumulates.

Convolutions (``nn.Conv1d``, ``nn.Conv2d``, ``groups=1``, any padding mode, stride and
dilation): the *patch view* of K-FAC (Grosse & Martens, 2016). Every output position is a
row: ``X`` holds the unfolded input patches (``F.unfold``, ``C_in·k_h·k_w`` columns in the
kernel's ``(C_in, k_h, k_w)`` order) and ``G`` the output gradient at that position
(``C_out`` columns), so ``b = N·H_out·W_out`` and ``weight.grad.reshape(C_out, -1) = GᵀX``
exactly (tested). The unfolded patches exist only while ``XᵀX`` is formed in the backward
hook. Grouped convolutions and ``nn.Conv3d`` are not captured.

Statistics tied to their gradients (``tie_to_grad=True``, what the optimizers use). Each
hooked layer's weight gets a tensor hook (it runs when autograd is about to accumulate the
weight's gradient) and a post-accumulate-grad hook. Rows captured during a backward are
*fresh* until that backward accumulates into ``weight.grad``; then they are *committed*
(what :meth:`LayerStatistics.rows` and :meth:`LayerStatistics.sums` report). If, when a
backward reaches the weight, its ``.grad`` is ``None`` (``zero_grad()``, ``model.zero_grad()``,
``p.grad = None``), is not the tensor the last accumulation left (replaced), or was zeroed in
place since (``zero_grad(set_to_none=False)``), the committed rows are dropped first: they
belong to a gradient that no longer exists. Rows of a backward that never reached the
weight (``torch.autograd.grad``, ``backward(inputs=...)`` without it) are dropped, not
committed. :meth:`LayerStatistics.check_grad` tells the optimizer whether ``.grad`` is still
the tensor the committed rows produced.

Under FSDP2 (``torch.distributed.fsdp.fully_shard``) the module's ``weight`` is a sharded
``DTensor`` outside its forward and backward, and a separate *unsharded* parameter inside
them; autograd accumulates into the unsharded one, FSDP reduce-scatters that gradient into the
sharded parameter's ``.grad`` (the one the user clears and the optimizer steps on) and then
calls the sharded parameter's post-accumulate-grad hooks. So the tensor hook that checks and
commits goes on the unsharded parameter (found in the forward pre-hook, which runs after
FSDP's unshard, once per parameter object: FSDP2 keeps the same one across steps), while
``.grad`` is read, and the post-accumulate hook registered, on the sharded parameter: the
rows are tied to the gradient the user sees, exactly as without FSDP.

Scale of ``G``. ``G`` is what autograd provides: with a mean-reduced loss it carries the
loss's ``1/b``. It is kept as is; ``Cov(G) = GᵀG / b`` is computed from this raw ``G``.
The optimizers divide ``weight.grad = XᵀG`` by the same row count ``b``, so that with
single-batch statistics their step is exactly ``iso_update(X, G)`` of the captured
tensors — and since ``Cov(G)^{-1/2}`` undoes any scalar multiple of ``G``, it does not
matter whether the loss was a mean or a sum.

The per-layer sums ``XᵀX``, ``GᵀG`` are formed in the backward hook in ``dtype``
(float32 by default, float64 on request) even for bfloat16 layers; with ``keep=True`` the
raw ``X`` and ``G`` are also kept (tests, inspection).

Activation checkpointing (``torch.utils.checkpoint``) counts each row once in both modes
(the weights after training are bit-for-bit those without it): with ``use_reentrant=True``
the first forward runs without grad and captures nothing, the recomputation does; with
``use_reentrant=False`` the recomputed outputs are not in the graph and their hooks never
fire. The cost is memory: with ``use_reentrant=False`` the first forward's hooks keep each
hooked layer's input alive until its backward (on statistics steps), so checkpointing saves
little (measured: 8 x ``Linear(1024)`` + tanh on 8192 rows under one checkpoint held 32 MB
after the forward without the hooks, 256 MB with them, as much as without checkpointing);
``use_reentrant=True`` keeps its saving (32 MB with the hooks).

Limitations: modules that use a layer's ``weight`` without calling the layer
(``nn.MultiheadAttention``'s ``out_proj`` and input projections: use
:func:`isolab.nn.convert_attention`) are invisible to hooks (the optimizers route those
weights to AdamW and say so); hooks are fragile under ``torch.compile``.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import nn

from .. import linalg
from ..nn import linear_like

__all__ = ["LayerStatistics", "capturable", "CAPTURABLE"]

#: Built-in module types whose inputs and output gradients :class:`LayerStatistics` can capture
#: (more through :func:`isolab.nn.register_linear`, and transformers' ``Conv1D``).
CAPTURABLE = (nn.Linear, nn.Conv1d, nn.Conv2d)


def capturable(module: nn.Module) -> bool:
    """Whether :class:`LayerStatistics` can capture ``module``: a linear-like module
    (:func:`isolab.nn.linear_like`: ``nn.Linear``, transformers' ``Conv1D``, registered classes),
    or an ``nn.Conv1d``/``nn.Conv2d`` with ``groups=1``."""
    spec = linear_like(module)
    if spec is None or spec.capture is None:
        return False
    return spec.capture == "rows" or module.groups == 1


def _local(t):
    """The local shard of a ``DTensor`` (what FSDP2 stores in each process), else ``t``."""
    return t._local_tensor if hasattr(t, "_local_tensor") else t


def _task_id() -> int:
    try:
        return torch._C._current_graph_task_id()
    except AttributeError:  # torch without the call: every backward looks the same
        return 0


def conv_patches(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The rows ``X`` of a convolution's patch view: ``(N·L, C_in·k…)`` for input ``x``.

    ``X @ weight.reshape(C_out, -1).T`` (plus the bias) is the convolution's output with the
    positions as rows; padding (zeros, ``'same'``, reflect/replicate/circular), stride and
    dilation are those of ``module``.
    """
    conv1d = isinstance(module, nn.Conv1d)
    spatial = 1 if conv1d else 2
    if x.ndim == spatial + 1:  # unbatched input
        x = x.unsqueeze(0)
    pad = (0,) * spatial
    if module.padding_mode != "zeros":
        x = F.pad(x, module._reversed_padding_repeated_twice, mode=module.padding_mode)
    elif isinstance(module.padding, str):
        if module.padding == "same":  # torch's split: the extra row/column goes right/bottom
            widths = []
            for kk, dd in zip(reversed(module.kernel_size), reversed(module.dilation)):
                total = dd * (kk - 1)
                widths += [total // 2, total - total // 2]
            x = F.pad(x, widths)
    else:
        pad = tuple(module.padding)
    k, st, dl = tuple(module.kernel_size), tuple(module.stride), tuple(module.dilation)
    if conv1d:  # a 1-D convolution is a 2-D one of height 1
        x = x.unsqueeze(-2)
        k, st, dl, pad = (1, *k), (1, *st), (1, *dl), (0, *pad)
    cols = F.unfold(x, k, dilation=dl, padding=pad, stride=st)  # (N, C·k_h·k_w, L)
    return cols.transpose(1, 2).reshape(-1, cols.shape[1])


def _conv_rows(module: nn.Module, g: torch.Tensor) -> int:
    """Rows of a convolution's patch view, ``N·L``, from its output gradient's shape."""
    spatial = 1 if isinstance(module, nn.Conv1d) else 2
    lead = g.shape[0] if g.ndim == spatial + 2 else 1
    return lead * math.prod(g.shape[-spatial:])


def conv_output_rows(g: torch.Tensor, spatial: int) -> torch.Tensor:
    """The rows ``G`` of a convolution's output gradient ``(N, C_out, *spatial)``: ``(N·L, C_out)``."""
    if g.ndim == spatial + 1:
        g = g.unsqueeze(0)
    return g.movedim(1, -1).reshape(-1, g.shape[1])


class _Capture:
    __slots__ = ("xx", "gg", "rows", "used", "inputs", "grads", "pending", "fresh", "grad_ref", "mixed")

    def __init__(self):
        self.xx = None
        self.gg = None
        self.rows = 0
        self.used = 0  # rows behind xx, gg (fewer than rows when subsampled)
        self.inputs: list[torch.Tensor] = []
        self.grads: list[torch.Tensor] = []
        self.pending: list[torch.Tensor] = []
        self.fresh: list[tuple] = []  # (graph task, rows, used, xx, gg, x, g) not yet accumulated into .grad
        self.grad_ref = None  # (weakref to weight.grad, its _version) after the last accumulation
        self.mixed = False  # .grad also holds the gradient of rows forgotten after a step

    def commit(self, rows, used, xx, gg, x2, g2, keep):
        self.rows += rows
        if xx is not None:
            self.used += used
            if self.xx is None:
                self.xx, self.gg = xx, gg
            else:
                self.xx += xx
                self.gg += gg
        if keep and x2 is not None:
            self.inputs.append(x2)
            self.grads.append(g2)

    def drop_committed(self):
        self.xx = self.gg = None
        self.rows = self.used = 0
        self.inputs, self.grads = [], []
        self.mixed = False


class LayerStatistics:
    """Hooks on linear-like layers (``nn.Linear``, transformers' ``Conv1D``, registered classes)
    and ``nn.Conv1d``/``nn.Conv2d`` that collect ``X``, ``G``, ``XᵀX`` and ``GᵀG``
    (convolutions in the patch view, see the module docstring).

    Args:
        modules: an ``nn.Module`` (every capturable layer inside it is hooked, named as in
            ``named_modules()``) or a mapping ``name -> layer``.
        dtype: dtype of the accumulated sums (``torch.float32`` or ``torch.float64``).
        keep: also keep the raw captured ``X`` and ``G`` (memory: one copy of every
            hooked layer's input and output gradient until :meth:`clear`).
        tie_to_grad: tie the rows to the weight's ``.grad`` (see the module docstring):
            rows count once their backward has accumulated into ``weight.grad``, and rows
            of a cleared gradient are dropped. Default False for standalone use (rows count
            as soon as their backward produced them); the optimizers pass True.

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
        tie_to_grad: bool = False,
    ):
        if dtype not in (torch.float32, torch.float64):
            raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
        if isinstance(modules, nn.Module):
            mods = {n: m for n, m in modules.named_modules() if capturable(m)}
        elif isinstance(modules, Mapping):
            mods = dict(modules)
            for n, m in mods.items():
                if not capturable(m):
                    raise TypeError(
                        f"module {n!r} is a {type(m).__name__}, which LayerStatistics cannot capture "
                        "(a linear-like module such as nn.Linear, or nn.Conv1d/nn.Conv2d with groups=1; declare "
                        "other linear layers with isolab.nn.register_linear)"
                    )
        else:
            raise TypeError(f"modules must be an nn.Module or a mapping of layers, got {type(modules).__name__}")
        if not mods:
            raise ValueError("LayerStatistics found no nn.Linear, nn.Conv1d/nn.Conv2d or other linear-like layer (a "
                             "class declared with isolab.nn.register_linear) to hook")
        self.dtype = dtype
        self.keep = bool(keep)
        self.tie_to_grad = bool(tie_to_grad)
        self.enabled = True
        #: ``{layer name: N}``: form that layer's sums from ``N`` of its rows (see the module
        #: docstring); layers not listed (or ``None``) use all rows.
        self.stat_rows: dict[str, int | None] = {}
        #: seed of the row draws, applied at every :meth:`clear` (and now)
        self.sample_seed = 0
        self._gen = torch.Generator()
        self._gen.manual_seed(0)
        self._draws: dict[tuple, torch.Tensor] = {}
        self.modules: dict[str, nn.Module] = mods
        self._rows_view = {n: linear_like(m).capture == "rows" for n, m in mods.items()}
        self._captures = {n: _Capture() for n in mods}
        self._handles = []
        # the parameter whose .grad the rows are tied to (FSDP2: the sharded one), and the
        # parameter objects autograd accumulates into that already carry the check-and-commit hook
        self._holders = {n: m.weight for n, m in mods.items()}
        self._hooked: dict[str, list] = {n: [] for n in mods}
        for name, m in mods.items():
            self._handles.append(m.register_forward_pre_hook(self._make_pre_hook(name)))
            self._handles.append(m.register_forward_hook(self._make_fwd_hook(name)))
            if self.tie_to_grad and m.weight.requires_grad:
                self._hook_weight(name, m.weight)
                self._handles.append(m.weight.register_post_accumulate_grad_hook(self._make_post_hook(name)))

    # hooks ------------------------------------------------------------------------
    def _active(self, module) -> bool:
        return module.training and torch.is_grad_enabled()

    def _hook_weight(self, name, weight):
        """Put the check-and-commit hook on ``weight`` (the parameter autograd accumulates into),
        once per parameter object."""
        if any(ref() is weight for ref in self._hooked[name]):
            return
        self._hooked[name].append(weakref.ref(weight))
        self._handles.append(weight.register_hook(self._make_weight_hook(name, self._holders[name])))

    def _make_pre_hook(self, name):
        def pre_hook(module, args):
            if self.tie_to_grad and module.weight is not self._holders[name] and module.weight.requires_grad:
                self._hook_weight(name, module.weight)  # FSDP2's unsharded parameter (module docstring)
            if self._active(module) and args:
                # off statistics steps nothing is held: only the row count is needed
                x = args[0].detach() if (self.enabled or self.keep) else None
                self._captures[name].pending.append(x)

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
                self._record(name, module, x, g)

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

    def _make_weight_hook(self, name, weight):
        ref = weakref.ref(weight)

        def weight_hook(grad):  # runs before autograd accumulates into weight.grad
            cap = self._captures[name]
            w = ref()
            if w is not None:
                current, last = w.grad, cap.grad_ref
                if current is None or last is None or last[0]() is not current:
                    cap.drop_committed()  # cleared or replaced: those rows' gradient is gone
                elif _local(current)._version != last[1] and not bool(_local(current).any()):
                    cap.drop_committed()  # zeroed in place (zero_grad(set_to_none=False))
                elif last[2]:
                    cap.mixed = True  # accumulating onto a gradient the optimizer already stepped on
            task = _task_id()
            for chunk in cap.fresh:
                if chunk[0] == task:  # rows of this backward; others never reached the weight
                    cap.commit(*chunk[1:], self.keep)
            cap.fresh = []

        return weight_hook

    def _make_post_hook(self, name):
        def post_hook(param):
            if param.grad is not None:
                self._captures[name].grad_ref = (weakref.ref(param.grad), _local(param.grad)._version, False)

        return post_hook

    def _record(self, name, module, x, g):
        cap = self._captures[name]
        if x is None or not (self.enabled or self.keep):  # off a statistics step: count the rows only
            rows = g.numel() // g.shape[-1] if self._rows_view[name] else _conv_rows(module, g)
            if self.tie_to_grad:
                cap.fresh.append((_task_id(), rows, 0, None, None, None, None))
            else:
                cap.commit(rows, 0, None, None, None, None, False)
            return
        if self._rows_view[name]:
            x2 = x.reshape(-1, x.shape[-1])
            g2 = g.detach().reshape(-1, g.shape[-1])
        else:
            spatial = 1 if isinstance(module, nn.Conv1d) else 2
            g2 = conv_output_rows(g.detach(), spatial)
            x2 = conv_patches(module, x)
        rows = g2.shape[0]
        xx = gg = None
        used = 0
        if self.enabled:
            xs, gs, used = self._subsample(name, x2, g2)
            xx = linalg.gram(xs.to(self.dtype))
            gg = linalg.gram(gs.to(self.dtype))
            if used < rows:  # unbiased: E[(b/N) X_SᵀX_S] = XᵀX
                xx.mul_(rows / used)
                gg.mul_(rows / used)
        keep = (x2, g2) if (self.keep and self.enabled) else (None, None)
        if self.tie_to_grad:
            cap.fresh.append((_task_id(), rows, used, xx, gg, *keep))
        else:
            cap.commit(rows, used, xx, gg, *keep, self.keep)

    def _subsample(self, name, x2, g2):
        """``(X_S, G_S, N)``: ``N = min(b, stat_rows[name])`` rows drawn without replacement."""
        rows = g2.shape[0]
        limit = self.stat_rows.get(name)
        if limit is None or rows <= limit:
            return x2, g2, rows
        key = (rows, limit, x2.device)
        idx = self._draws.get(key)
        if idx is None:  # one draw per row count and pass, shared by the layers
            idx = torch.randperm(rows, generator=self._gen)[:limit].sort().values.to(x2.device)
            self._draws[key] = idx
        return x2.index_select(0, idx), g2.index_select(0, idx), limit

    # access -----------------------------------------------------------------------
    def _get(self, name) -> _Capture:
        try:
            return self._captures[name]
        except KeyError:
            raise KeyError(f"no hooked layer named {name!r}; hooked: {sorted(self._captures)}") from None

    def rows(self, name: str) -> int:
        """Number of rows ``b`` captured for ``name`` since the last :meth:`clear`."""
        return self._get(name).rows

    def used_rows(self, name: str) -> int:
        """Number of rows behind :meth:`sums` (``rows`` unless subsampled by :attr:`stat_rows`)."""
        return self._get(name).used

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

    def check_grad(self, name: str, weight: torch.Tensor) -> str | None:
        """``None`` if ``weight.grad`` is the tensor the committed rows produced (tied mode),
        else a sentence saying what happened to it (for the optimizer's error)."""
        if not self.tie_to_grad:
            return None
        cap = self._get(name)
        last = cap.grad_ref
        if cap.mixed:
            return ("its .grad still holds the gradient of a batch the optimizer already stepped on "
                    "(zero_grad() was not called between steps), which the statistics no longer describe")
        if last is None or last[0]() is not weight.grad:
            return ("its .grad is not the tensor the last backward through the layer produced (it was "
                    "replaced, or set after the backward)")
        return None

    def clear(self, keep_grad_refs: bool = False) -> None:
        """Forget everything captured (call after each optimizer step).

        ``keep_grad_refs``: remember which ``.grad`` tensors the forgotten rows produced, so
        that a backward accumulating onto them (no ``zero_grad()`` between steps) is detected.
        """
        for name in self._captures:
            old = self._captures[name]
            new = _Capture()
            if keep_grad_refs and old.grad_ref is not None:
                new.grad_ref = (old.grad_ref[0], old.grad_ref[1], True)
            self._captures[name] = new
        self._gen.manual_seed(int(self.sample_seed))
        self._draws = {}

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
        return (f"LayerStatistics({len(self.modules)} layers, dtype={self.dtype}, keep={self.keep}, "
                f"tie_to_grad={self.tie_to_grad}, attached={self.attached})")
