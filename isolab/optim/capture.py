"""Capture each linear layer's input ``X`` and output gradient ``G`` with hooks.

Conventions. isolab writes a layer as ``Y = X W`` with ``W ∈ R^{n×m}``, ``X ∈ R^{b×n}``
(rows are samples) and ``G = ∂L/∂Y ∈ R^{b×m}``; the weight gradient is ``XᵀG``.
``nn.Linear`` stores ``weight`` as ``(out, in) = (m, n)``, so in torch's layout
``weight.grad = GᵀX``; a module registered with ``weight_layout="in_out"`` (transformers'
``Conv1D``) stores ``W`` itself. Leading dimensions (batch, sequence, ...) are flattened into
rows: a ``(batch, seq, dim)`` activation contributes ``batch·seq`` rows.

**Sites.** The unit of capture is a *weight*, not a module: every module that uses the same
weight (a layer called twice, or two modules sharing one ``nn.Parameter``) feeds the same
site, whose rows are the concatenation of every use, ``[X₁; X₂]ᵀ[G₁; G₂] = X₁ᵀG₁ + X₂ᵀG₂``,
which is what autograd accumulates into ``weight.grad``. A site is named after the first
module that uses the weight (``named_modules()`` order).

How it is captured, and why this way:

- ``X``: a forward-pre hook keeps the input, detached (no copy).
- ``G``: a forward hook puts a *tensor* hook on the layer's output, which receives ``∂L/∂Y``.
  Full backward hooks are not used: they wrap the output and break with
  ``ReLU(inplace=True)``. For a ``(batch, seq, dim)`` input ``F.linear`` returns a view of a
  2-D product, and an in-place op on that view replaces its autograd node (a hook on the view
  would never fire), so the hook goes on the view's base, which holds the same elements.
- Nothing is captured in eval mode, under ``torch.no_grad``, when the output does not require
  grad, or while the weight is frozen (``requires_grad=False``: no gradient to describe).
  Unfreezing a weight later resumes the capture at its next forward.
- While :attr:`LayerStatistics.enabled` is ``False`` only the row count is kept (the
  optimizers switch the products off on steps whose statistics they will not use).
- **Row subsampling** (:attr:`LayerStatistics.stat_rows`, ``{site: N}``): a backward that
  brings ``b > N`` rows forms the sums from ``N`` of them, drawn uniformly without
  replacement (the same rows for ``X`` and ``G``) and scaled by ``b/N``, an unbiased estimate
  of the full ``XᵀX``. The draws are seeded by :attr:`LayerStatistics.sample_seed` at each
  :meth:`LayerStatistics.clear`. Subsampling is per backward: ``k`` accumulated micro-batches
  of ``b`` rows each contribute ``min(b, N)`` rows, so accumulation over micro-batches smaller
  than ``N`` uses every row while one large batch of ``k·b > N`` rows uses ``N``.
- The hooks are small objects, not closures: a model with an optimizer attached can be
  pickled (``torch.save(model)``) and deep-copied. A copy's hooks are *inert* (they hold no
  statistics): copying a model does not copy its optimizer, as with ``torch.optim``. Under
  ``torch.compile`` the hooks run eagerly (``torch.compiler.disable``): a graph break at each
  hooked layer, so that the compiled model captures exactly what the eager one does (and
  ``fullgraph=True`` cannot be used with Iso or IsoAdam).

Convolutions (``nn.Conv1d``, ``nn.Conv2d``, ``groups=1``): the *patch view* of K-FAC (Grosse &
Martens, 2016): every output position is a row, ``X`` holds the unfolded input patches and ``G``
the output gradient there, so ``weight.grad.reshape(C_out, -1) = GᵀX`` exactly.

**Statistics tied to their gradients** (``tie_to_grad=True``, what the optimizers use). Rows
captured during a backward are *fresh* until that backward accumulates into ``weight.grad``,
then *committed* (what :meth:`LayerStatistics.rows` and :meth:`LayerStatistics.sums` report).
If, when a backward reaches the weight, its ``.grad`` is ``None``, is not the tensor the last
accumulation left, or was zeroed in place since, the committed rows are dropped first: they
belong to a gradient that no longer exists. Rows of a backward that never reached the weight
(``torch.autograd.grad``) are dropped. Under FSDP2 autograd accumulates into an *unsharded*
parameter that exists only inside forward and backward: the check-and-commit hook goes on it
(found in the forward pre-hook), while ``.grad`` is read on the sharded parameter, the one the
user clears and the optimizer steps on.

Scale of ``G``: what autograd provides, kept as is (with a mean loss it carries the loss's
``1/b``; under ``torch.amp.GradScaler`` it carries the loss scale, which the optimizers remove
at their step). The sums ``XᵀX``, ``GᵀG`` are formed in the backward hook in ``dtype``
(float32, or float64) whatever the layer's dtype.

Activation checkpointing counts each row once (with ``use_reentrant=True`` the first forward
runs without grad and captures nothing; with ``use_reentrant=False`` the recomputed outputs are
not in the graph). With ``use_reentrant=False`` the first forward's hooks keep each layer's
input alive until its backward, so checkpointing then saves little memory.
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

__all__ = ["LayerStatistics", "capturable", "capture_sites", "conv_patches"]


def capturable(module: nn.Module) -> bool:
    """Whether :class:`LayerStatistics` can capture ``module``: a linear-like module
    (:func:`isolab.nn.linear_like`: ``nn.Linear``, transformers' ``Conv1D``, registered classes),
    or an ``nn.Conv1d``/``nn.Conv2d`` with ``groups=1``."""
    spec = linear_like(module)
    if spec is None or spec.capture is None:
        return False
    return spec.capture == "rows" or module.groups == 1


def capture_sites(modules) -> dict[str, list[tuple[str, nn.Module]]]:
    """``{site name: [(module name, module), ...]}``: the capturable modules grouped by weight.

    ``modules`` is an ``nn.Module`` (every capturable module inside it) or a mapping
    ``name -> module``. Raises ``ValueError`` when modules sharing a weight would read it
    differently (a linear layer and a convolution, or two layouts).
    """
    items = [(n, m) for n, m in modules.named_modules() if capturable(m)] if isinstance(modules, nn.Module) \
        else list(modules.items())
    sites: dict[str, list[tuple[str, nn.Module]]] = {}
    by_weight: dict[int, str] = {}
    for name, m in items:
        site = by_weight.setdefault(id(m.weight), name)
        first = sites.setdefault(site, [])
        if first and linear_like(first[0][1]) != linear_like(m):
            raise ValueError(
                f"modules {first[0][0]!r} ({type(first[0][1]).__name__}) and {name!r} ({type(m).__name__}) share one "
                "weight but read it differently (layout or convolution); isolab cannot capture such a weight"
            )
        if all(m is not other for _, other in first):
            first.append((name, m))
    return sites


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
    """What one site holds between two clears."""

    __slots__ = ("xx", "gg", "rows", "used", "inputs", "grads", "pending", "fresh", "grad_ref", "mixed")

    def __init__(self):
        self.xx = None
        self.gg = None
        self.rows = 0
        self.used = 0  # rows behind xx, gg (fewer than rows when subsampled)
        self.inputs: list[torch.Tensor] = []
        self.grads: list[torch.Tensor] = []
        self.pending: dict[int, list] = {}  # id(module) -> inputs of forwards whose output is not seen yet
        self.fresh: list[tuple] = []  # (graph task, rows, used, xx, gg, x, g) not yet accumulated into .grad
        self.grad_ref = None  # (weakref to weight.grad, its _version, stepped on) after the last accumulation
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


class _Hook:
    """Base of the hook objects: a reference to the statistics that is dropped when the hook is
    pickled or copied, so that a copy of the model carries inert hooks."""

    def __init__(self, stats, site):
        self.stats = stats
        self.site = site

    def __getstate__(self):
        return {"stats": None, "site": self.site}

    def __setstate__(self, state):
        self.__dict__.update(state)


class _PreHook(_Hook):
    @torch.compiler.disable
    def __call__(self, module, args):
        if self.stats is not None:
            self.stats._before_forward(self.site, module, args)


class _ForwardHook(_Hook):
    @torch.compiler.disable
    def __call__(self, module, args, output):
        if self.stats is not None:
            self.stats._after_forward(self.site, module, output)


def remove_inert_hooks(model: nn.Module) -> None:
    """Drop the inert hook objects a copied or unpickled model carries (see the module docstring)."""
    for m in model.modules():
        for hooks in (m._forward_pre_hooks, m._forward_hooks):
            for key in [k for k, h in hooks.items() if isinstance(h, _Hook) and h.stats is None]:
                del hooks[key]


class LayerStatistics:
    """Hooks on linear-like layers and ``nn.Conv1d``/``nn.Conv2d`` that collect ``X``, ``G``,
    ``XᵀX`` and ``GᵀG`` per weight (see the module docstring).

    Args:
        modules: an ``nn.Module`` (every capturable layer inside it is hooked) or a mapping
            ``name -> layer``; layers that share a weight form one site.
        dtype: dtype of the accumulated sums (``torch.float32`` or ``torch.float64``).
        keep: also keep the raw captured ``X`` and ``G`` (memory: one copy of every hooked
            layer's input and output gradient until :meth:`clear`).
        tie_to_grad: tie the rows to the weight's ``.grad`` (see the module docstring).

    Use as a context manager, or call :meth:`remove` when done::

        with LayerStatistics(model, keep=True) as stats:
            loss_fn(model(x), y).backward()
            X, G = stats.inputs("fc1"), stats.output_grads("fc1")
    """

    def __init__(self, modules, *, dtype: torch.dtype = torch.float32, keep: bool = False,
                 tie_to_grad: bool = False):
        if dtype not in (torch.float32, torch.float64):
            raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
        if isinstance(modules, Mapping):
            for n, m in modules.items():
                if not capturable(m):
                    raise TypeError(
                        f"module {n!r} is a {type(m).__name__}, which LayerStatistics cannot capture (a linear-like "
                        "module such as nn.Linear, or nn.Conv1d/nn.Conv2d with groups=1; declare other linear layers "
                        "with isolab.nn.register_linear)"
                    )
        elif not isinstance(modules, nn.Module):
            raise TypeError(f"modules must be an nn.Module or a mapping of layers, got {type(modules).__name__}")
        sites = capture_sites(modules)
        if not sites:
            raise ValueError("LayerStatistics found no nn.Linear, nn.Conv1d/nn.Conv2d or other linear-like layer (a "
                             "class declared with isolab.nn.register_linear) to hook")
        self.dtype = dtype
        self.keep = bool(keep)
        self.tie_to_grad = bool(tie_to_grad)
        self.enabled = True
        #: ``{site: dtype}``: sites whose sums use another dtype than ``dtype``
        self.dtypes: dict[str, torch.dtype] = {}
        #: ``{site: N}``: form that site's sums from ``N`` of its rows per backward (``None``: all)
        self.stat_rows: dict[str, int | None] = {}
        #: seed of the row draws, applied at every :meth:`clear` (and now)
        self.sample_seed = 0
        self._gen = torch.Generator()
        self._gen.manual_seed(0)
        self._draws: dict[tuple, torch.Tensor] = {}
        self.modules: dict[str, list[nn.Module]] = {}
        self._rows_view: dict[str, bool] = {}
        self._captures: dict[str, _Capture] = {}
        self._holders: dict[str, torch.Tensor] = {}
        self._hooked_weights: dict[str, list] = {}
        self._handles = []
        for site, members in sites.items():
            self.add(site, [m for _, m in members])

    # -- sites ------------------------------------------------------------------------
    def add(self, site: str, modules: list[nn.Module]) -> None:
        """Hook ``modules`` (which share one weight) as the site ``site``; modules already hooked
        there are skipped, so the call is idempotent."""
        known = self.modules.setdefault(site, [])
        if site not in self._captures:
            self._captures[site] = _Capture()
            self._holders[site] = modules[0].weight
            self._hooked_weights[site] = []
            self._rows_view[site] = linear_like(modules[0]).capture == "rows"
        for m in modules:
            if any(m is k for k in known):
                continue
            known.append(m)
            self._handles.append(m.register_forward_pre_hook(_PreHook(self, site)))
            self._handles.append(m.register_forward_hook(_ForwardHook(self, site)))
        self._hook_weight(site, self._holders[site])

    @property
    def sites(self) -> list[str]:
        return list(self._captures)

    # -- hooks --------------------------------------------------------------------------
    def _hook_weight(self, site, weight):
        """The check-and-commit hook on ``weight`` (a parameter autograd accumulates into) and, on
        the site's holder (the parameter whose ``.grad`` the user sees), the hook that records the
        accumulated ``.grad``: once per parameter object, and only once it requires grad (a frozen
        weight is hooked when it is unfrozen)."""
        if not self.tie_to_grad or not weight.requires_grad:
            return
        if any(ref() is weight for ref in self._hooked_weights[site]):
            return
        self._hooked_weights[site].append(weakref.ref(weight))
        self._handles.append(weight.register_hook(self._make_weight_hook(site, self._holders[site])))
        if weight is self._holders[site]:
            self._handles.append(weight.register_post_accumulate_grad_hook(self._make_post_hook(site)))

    def _before_forward(self, site, module, args):
        if self.tie_to_grad:  # a weight unfrozen since the optimizer was built; FSDP2's unsharded parameter
            self._hook_weight(site, self._holders[site])
            if module.weight is not self._holders[site]:
                self._hook_weight(site, module.weight)
        if module.training and torch.is_grad_enabled() and module.weight.requires_grad and args:
            # off statistics steps nothing is held: only the row count is needed
            x = args[0].detach() if (self.enabled or self.keep) else None
            self._captures[site].pending.setdefault(id(module), []).append(x)

    def _after_forward(self, site, module, output):
        pending = self._captures[site].pending.get(id(module))
        if not pending:
            return
        x = pending.pop()
        if not (isinstance(output, torch.Tensor) and output.requires_grad):
            return
        target = output
        base = output._base if output._is_view() else None
        if base is not None and base.numel() == output.numel() and base.requires_grad:
            target = base
        ref = weakref.ref(module)
        target.register_hook(lambda g: self._record(site, ref(), x, g))

    def _make_weight_hook(self, site, holder):
        ref = weakref.ref(holder)

        def weight_hook(grad):  # runs before autograd accumulates into the weight's gradient
            cap = self._captures[site]
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

    def _make_post_hook(self, site):
        def post_hook(param):
            if param.grad is not None:
                self._captures[site].grad_ref = (weakref.ref(param.grad), _local(param.grad)._version, False)

        return post_hook

    def _record(self, site, module, x, g):
        cap = self._captures[site]
        if module is None:
            return
        if x is None or not (self.enabled or self.keep):  # off a statistics step: count the rows only
            rows = g.numel() // g.shape[-1] if self._rows_view[site] else _conv_rows(module, g)
            chunk = (rows, 0, None, None, None, None)
        else:
            if self._rows_view[site]:
                x2 = x.reshape(-1, x.shape[-1])
                g2 = g.detach().reshape(-1, g.shape[-1])
            else:
                g2 = conv_output_rows(g.detach(), 1 if isinstance(module, nn.Conv1d) else 2)
                x2 = conv_patches(module, x)
            rows = g2.shape[0]
            xx = gg = None
            used = 0
            if self.enabled:
                xs, gs, used = self._subsample(site, x2, g2)
                dtype = self.dtypes.get(site, self.dtype)
                xx = linalg.gram(xs.to(dtype))
                gg = linalg.gram(gs.to(dtype))
                if used < rows:  # unbiased: E[(b/N) X_SᵀX_S] = XᵀX
                    xx.mul_(rows / used)
                    gg.mul_(rows / used)
            kept = (x2, g2) if (self.keep and self.enabled) else (None, None)
            chunk = (rows, used, xx, gg, *kept)
        if self.tie_to_grad:
            cap.fresh.append((_task_id(), *chunk))
        else:
            cap.commit(*chunk, self.keep)

    def _subsample(self, site, x2, g2):
        """``(X_S, G_S, N)``: ``N = min(b, stat_rows[site])`` rows drawn without replacement."""
        rows = g2.shape[0]
        limit = self.stat_rows.get(site)
        if limit is None or rows <= limit:
            return x2, g2, rows
        key = (rows, limit, x2.device)
        idx = self._draws.get(key)
        if idx is None:  # one draw per row count and pass, shared by the sites
            idx = torch.randperm(rows, generator=self._gen)[:limit].sort().values.to(x2.device)
            self._draws[key] = idx
        return x2.index_select(0, idx), g2.index_select(0, idx), limit

    # -- access -------------------------------------------------------------------------
    def _get(self, site) -> _Capture:
        try:
            return self._captures[site]
        except KeyError:
            raise KeyError(f"no hooked layer named {site!r}; hooked: {sorted(self._captures)}") from None

    def rows(self, site: str) -> int:
        """Number of rows ``b`` captured for ``site`` since the last :meth:`clear`."""
        return self._get(site).rows

    def used_rows(self, site: str) -> int:
        """Number of rows behind :meth:`sums` (``rows`` unless subsampled by :attr:`stat_rows`)."""
        return self._get(site).used

    def sums(self, site: str):
        """``(XᵀX, GᵀG, b)`` accumulated since the last :meth:`clear`, or ``None``."""
        cap = self._get(site)
        if cap.xx is None:
            return None
        return cap.xx, cap.gg, cap.rows

    def covariances(self, site: str):
        """``(Cov(X), Cov(G)) = (XᵀX / b, GᵀG / b)`` of the captured rows, or ``None``."""
        s = self.sums(site)
        if s is None:
            return None
        xx, gg, b = s
        return xx / b, gg / b

    def inputs(self, site: str) -> torch.Tensor:
        """The captured ``X`` (``b × n``, rows concatenated); needs ``keep=True``."""
        return self._kept(site, "inputs")

    def output_grads(self, site: str) -> torch.Tensor:
        """The captured ``G = ∂L/∂Y`` (``b × m``); needs ``keep=True``."""
        return self._kept(site, "grads")

    def _kept(self, site, attr):
        if not self.keep:
            raise RuntimeError("raw X and G are only kept with LayerStatistics(..., keep=True)")
        items = getattr(self._get(site), attr)
        if not items:
            raise RuntimeError(f"nothing captured for layer {site!r} since the last clear()")
        return torch.cat(items, 0) if len(items) > 1 else items[0]

    def check_grad(self, site: str, weight: torch.Tensor) -> str | None:
        """``None`` if ``weight.grad`` is the tensor the committed rows produced (tied mode),
        else a sentence saying what happened to it (for the optimizer's error)."""
        if not self.tie_to_grad:
            return None
        cap = self._get(site)
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

        ``keep_grad_refs``: remember which ``.grad`` tensors the forgotten rows produced, so that
        a backward accumulating onto them (no ``zero_grad()`` between steps) is detected.
        """
        for site, old in self._captures.items():
            new = _Capture()
            if keep_grad_refs and old.grad_ref is not None:
                new.grad_ref = (old.grad_ref[0], old.grad_ref[1], True)
            self._captures[site] = new
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
        return (f"LayerStatistics({len(self._captures)} sites, dtype={self.dtype}, keep={self.keep}, "
                f"tie_to_grad={self.tie_to_grad}, attached={self.attached})")
