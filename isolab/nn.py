r"""Attention whose projections are ``nn.Linear`` layers, so that Iso and IsoAdam can whiten them.

``torch.nn.MultiheadAttention`` keeps its query/key/value projections in one fused
parameter ``in_proj_weight`` and applies them, and ``out_proj``, inside
``F.multi_head_attention_forward``: no module hook sees a projection's input or output
gradient, which Iso's statistics need. :class:`MultiheadAttention` here is a drop-in
replacement that computes the same function with four ``nn.Linear`` layers (``q_proj``,
``k_proj``, ``v_proj``, ``out_proj``) and the same arguments (masks, ``is_causal``,
``need_weights``, ``average_attn_weights``, ``batch_first``, ``add_bias_kv``,
``add_zero_attn``, ``kdim``/``vdim``, dropout, unbatched inputs) and the same return values.
Its ``state_dict`` has torch's keys, in torch's order (``in_proj_weight`` or
``q/k/v_proj_weight``, ``in_proj_bias``, ``bias_k``, ``bias_v``, ``out_proj.weight``,
``out_proj.bias``), so checkpoints load both ways.

:func:`convert_attention` swaps every ``nn.MultiheadAttention`` of a model (including those
inside ``nn.TransformerEncoderLayer``/``nn.TransformerDecoderLayer``) for one, in place,
copying the weights::

    model = convert_attention(model)      # before building the optimizer (and before DDP)
    optimizer = IsoAdam(model, lr=1e-3)   # the attention projections are whitened too

Differences from torch's module, all deliberate: ``_qkv_same_embed_dim`` reads ``False`` and
``nn.TransformerEncoder.use_nested_tensor`` is switched off, which keeps torch's fused
inference fast path (it calls fused kernels on ``in_proj_weight`` directly, bypassing the
projections) off: the converted layers always run this module's forward. Outputs equal
torch's to rounding (the attention core is ``F.scaled_dot_product_attention``, or the explicit
softmax when ``need_weights=True``); dropout draws different random masks.

**Linear-like modules** (:func:`register_linear`, :func:`linear_like`). The optimizers need to
know which modules are linear layers: Muon, Shampoo, Iso and IsoAdam route their weights as
hidden matrices, and Iso and IsoAdam hook them to capture each layer's input ``X`` and output
gradient ``G``. One registry answers that question for every module type, the built-in ones
included: ``nn.Linear`` (weight ``(out, in)``, ``y = x Wᵀ + b``), ``nn.Conv1d``/``nn.Conv2d``
(captured in K-FAC's patch view), the other convolutions (routed as matrices, not captured),
transformers' ``Conv1D`` (GPT-2's layers: weight ``(in, out)``, ``y = x W + b``), and any
module a user declares::

    from isolab.nn import register_linear
    register_linear(MyLinear, weight_layout="in_out")   # y = x @ self.weight (+ self.bias)

The converted attention above is linear-like through its four ``nn.Linear`` projections.
transformers' ``Conv1D`` is recognised by its qualified name, so that isolab never imports
transformers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["MultiheadAttention", "convert_attention", "register_linear", "linear_like", "LinearLike", "WEIGHT_LAYOUTS"]

# ----------------------------------------------------------------------------- linear-like modules

#: How a linear-like module stores its weight: ``"out_in"`` as ``nn.Linear`` (``y = x Wᵀ + b``,
#: weight ``(out, in)``), ``"in_out"`` as transformers' ``Conv1D`` (``y = x W + b``, weight
#: ``(in, out)``).
WEIGHT_LAYOUTS = ("out_in", "in_out")


@dataclass(frozen=True)
class LinearLike:
    """What the optimizers know about a module type: its weight's layout, and how Iso's hooks
    read its inputs and output gradients (``capture``: ``"rows"``, the last dimension of input
    and output, every other dimension flattened into rows; ``"patches"``, a convolution's patch
    view; ``None``, routed as a matrix but not captured)."""

    weight_layout: str
    capture: str | None

    def dims(self, weight: torch.Tensor) -> tuple[int, int]:
        """``(in, out)`` of a weight of this layout (a convolution kernel read as ``(out, in·k…)``)."""
        if self.weight_layout == "in_out":
            return int(weight.shape[0]), int(weight.shape[1])
        return math.prod(weight.shape[1:]), int(weight.shape[0])


_OUT_IN_ROWS = LinearLike("out_in", "rows")
_REGISTRY: dict[type, LinearLike] = {
    nn.Linear: _OUT_IN_ROWS,
    nn.Conv1d: LinearLike("out_in", "patches"),
    nn.Conv2d: LinearLike("out_in", "patches"),
    nn.Conv3d: LinearLike("out_in", None),
    nn.ConvTranspose1d: LinearLike("out_in", None),
    nn.ConvTranspose2d: LinearLike("out_in", None),
    nn.ConvTranspose3d: LinearLike("out_in", None),
}
#: Linear-like classes of other libraries, by qualified name (recognised without importing them).
_BY_NAME: dict[str, LinearLike] = {"transformers.pytorch_utils.Conv1D": LinearLike("in_out", "rows")}


def register_linear(cls: type, weight_layout: str = "in_out") -> type:
    """Declare ``cls`` a linear layer: its ``weight`` (2-D) maps the last dimension of its input
    to the last dimension of its output, ``y = x W + b`` (``weight_layout="in_out"``, weight
    ``(in, out)``) or ``y = x Wᵀ + b`` (``"out_in"``, as ``nn.Linear``).

    Then every isolab optimizer routes that weight as a hidden matrix (in its orientation: Muon's
    learning-rate adjustment reads ``out/in``, Iso whitens the input side with ``Cov(X)`` and the
    output side with ``Cov(G)``), and Iso/IsoAdam capture its inputs and output gradients with
    the same hooks as ``nn.Linear``'s. Subclasses are covered; a registration of a subclass
    overrides its base's. Returns ``cls``, so it also works as a class decorator
    (``@register_linear``). Register before building the optimizer.
    """
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise TypeError(f"register_linear: cls must be an nn.Module subclass, got {cls!r}")
    if weight_layout not in WEIGHT_LAYOUTS:
        raise ValueError(f"register_linear: weight_layout must be one of {WEIGHT_LAYOUTS}, got {weight_layout!r}")
    if issubclass(cls, nn.modules.conv._ConvNd):
        raise ValueError(f"register_linear: {cls.__name__} is a convolution, which isolab already knows (patch view)")
    _REGISTRY[cls] = LinearLike(weight_layout, "rows")
    return cls


def linear_like(module: nn.Module) -> LinearLike | None:
    """The :class:`LinearLike` entry of ``module``'s type (the most derived registered class of
    its MRO), or ``None`` for a module that is not a linear layer. A module without a 2-D (or,
    for convolutions, higher) ``weight`` tensor is not linear-like, whatever its type."""
    weight = getattr(module, "weight", None)
    if not isinstance(weight, torch.Tensor) or weight.ndim < 2:
        return None
    for klass in type(module).__mro__:
        spec = _REGISTRY.get(klass)
        if spec is None:
            spec = _BY_NAME.get(f"{klass.__module__}.{klass.__qualname__}")
        if spec is not None:
            if spec.capture == "rows" and weight.ndim != 2:
                return None
            return spec
    return None


class MultiheadAttention(nn.Module):
    """``nn.MultiheadAttention`` with its projections as ``nn.Linear`` layers (same signature)."""

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False, add_zero_attn=False,
                 kdim=None, vdim=None, batch_first=False, device=None, dtype=None):
        super().__init__()
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(f"embed_dim and num_heads must be greater than 0, got {embed_dim} and {num_heads}")
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads})")
        kw = dict(device=device, dtype=dtype)
        self.embed_dim = embed_dim
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._same_dims = self.kdim == embed_dim and self.vdim == embed_dim
        self.num_heads = num_heads
        self.dropout = dropout
        self.batch_first = batch_first
        self.head_dim = embed_dim // num_heads
        self.add_zero_attn = add_zero_attn
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias, **kw)
        self.k_proj = nn.Linear(self.kdim, embed_dim, bias=bias, **kw)
        self.v_proj = nn.Linear(self.vdim, embed_dim, bias=bias, **kw)
        if add_bias_kv:
            self.bias_k = nn.Parameter(torch.empty((1, 1, embed_dim), **kw))
            self.bias_v = nn.Parameter(torch.empty((1, 1, embed_dim), **kw))
        else:
            self.bias_k = self.bias_v = None
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias, **kw)
        self._reset_parameters()
        self._register_state_dict_hook(_save_torch_keys)
        self._register_load_state_dict_pre_hook(_load_torch_keys, with_module=True)

    def _reset_parameters(self):  # torch's initialisation, on the fused view
        with torch.no_grad():
            if self._same_dims:
                w = torch.empty(3 * self.embed_dim, self.embed_dim, dtype=self.q_proj.weight.dtype,
                                device=self.q_proj.weight.device)
                nn.init.xavier_uniform_(w)
                for lin, part in zip((self.q_proj, self.k_proj, self.v_proj), w.chunk(3)):
                    lin.weight.copy_(part)
            else:
                for lin in (self.q_proj, self.k_proj, self.v_proj):
                    nn.init.xavier_uniform_(lin.weight)
            for lin in (self.q_proj, self.k_proj, self.v_proj, self.out_proj):
                if lin.bias is not None:
                    lin.bias.zero_()
            if self.bias_k is not None:
                nn.init.xavier_normal_(self.bias_k)
                nn.init.xavier_normal_(self.bias_v)

    # torch's attribute names, read by nn.Transformer*Layer (and by people)
    _qkv_same_embed_dim = False  # keeps torch's fused inference fast path off (module docstring)

    @property
    def in_proj_weight(self):
        if not self._same_dims:
            return None
        return torch.cat([self.q_proj.weight, self.k_proj.weight, self.v_proj.weight])

    @property
    def in_proj_bias(self):
        if self.q_proj.bias is None:
            return None
        return torch.cat([self.q_proj.bias, self.k_proj.bias, self.v_proj.bias])

    @classmethod
    def from_torch(cls, mha: nn.MultiheadAttention) -> "MultiheadAttention":
        """An equivalent module with ``mha``'s configuration and a copy of its weights."""
        w = mha.out_proj.weight
        new = cls(mha.embed_dim, mha.num_heads, dropout=mha.dropout, bias=mha.in_proj_bias is not None,
                  add_bias_kv=mha.bias_k is not None, add_zero_attn=mha.add_zero_attn, kdim=mha.kdim, vdim=mha.vdim,
                  batch_first=mha.batch_first, device=w.device, dtype=w.dtype)
        new.load_state_dict(mha.state_dict())
        new.train(mha.training)
        same = mha._qkv_same_embed_dim
        sources = {
            "q_proj.weight": mha.in_proj_weight if same else mha.q_proj_weight,
            "k_proj.weight": mha.in_proj_weight if same else mha.k_proj_weight,
            "v_proj.weight": mha.in_proj_weight if same else mha.v_proj_weight,
            "q_proj.bias": mha.in_proj_bias, "k_proj.bias": mha.in_proj_bias, "v_proj.bias": mha.in_proj_bias,
            "out_proj.weight": mha.out_proj.weight, "out_proj.bias": mha.out_proj.bias,
            "bias_k": mha.bias_k, "bias_v": mha.bias_v,
        }
        for name, p in new.named_parameters():
            if sources.get(name) is not None:
                p.requires_grad_(sources[name].requires_grad)
        return new

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
                average_attn_weights=True, is_causal=False):
        batched = query.dim() == 3
        if not batched:
            query, key, value = query.unsqueeze(0), key.unsqueeze(0), value.unsqueeze(0)
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        elif not self.batch_first:
            query, key, value = query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1)
        n, tgt, _ = query.shape
        q, k, v = self.q_proj(query), self.k_proj(key), self.v_proj(value)  # (N, L, E): hooks see these
        float_dtype = q.dtype
        attn_mask = _as_float_mask(attn_mask, float_dtype, "attn_mask")
        key_padding_mask = _as_float_mask(key_padding_mask, float_dtype, "key_padding_mask")
        # torch's rule: with the is_causal hint, no key padding mask and no weights wanted, the
        # mask is dropped and SDPA applies its own causal mask (also over bias_k/zero columns)
        sdpa_causal = is_causal and key_padding_mask is None and not need_weights
        if sdpa_causal:
            attn_mask = None
        elif attn_mask is None and is_causal:
            attn_mask = torch.triu(torch.full((tgt, k.shape[1]), float("-inf"), dtype=float_dtype, device=q.device), 1)
        if self.bias_k is not None:
            k = torch.cat([k, self.bias_k.expand(n, 1, -1)], 1)
            v = torch.cat([v, self.bias_v.expand(n, 1, -1)], 1)
            attn_mask = None if attn_mask is None else F.pad(attn_mask, (0, 1))
            key_padding_mask = None if key_padding_mask is None else F.pad(key_padding_mask, (0, 1))
        h, d = self.num_heads, self.head_dim
        q = q.reshape(n, tgt, h, d).transpose(1, 2)
        k = k.reshape(n, -1, h, d).transpose(1, 2)
        v = v.reshape(n, -1, h, d).transpose(1, 2)
        if self.add_zero_attn:
            k = torch.cat([k, k.new_zeros(n, h, 1, d)], 2)
            v = torch.cat([v, v.new_zeros(n, h, 1, d)], 2)
            attn_mask = None if attn_mask is None else F.pad(attn_mask, (0, 1))
            key_padding_mask = None if key_padding_mask is None else F.pad(key_padding_mask, (0, 1))
        src = k.shape[2]
        mask = None
        if attn_mask is not None:
            mask = attn_mask.reshape(n, h, tgt, src) if attn_mask.dim() == 3 else attn_mask
        if key_padding_mask is not None:
            kpm = key_padding_mask.reshape(n, 1, 1, src)
            mask = kpm if mask is None else mask + kpm
        p = self.dropout if self.training else 0.0
        if need_weights:
            scores = (q / math.sqrt(d)) @ k.transpose(-2, -1)
            if mask is not None:
                scores = scores + mask
            weights = scores.softmax(-1)
            out = F.dropout(weights, p) @ v if p > 0 else weights @ v
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p, is_causal=sdpa_causal)
            weights = None
        out = self.out_proj(out.transpose(1, 2).reshape(n, tgt, self.embed_dim))
        if weights is not None and average_attn_weights:
            weights = weights.mean(1)
        if not batched:
            return out.squeeze(0), (weights.squeeze(0) if weights is not None else None)
        if not self.batch_first:
            out = out.transpose(0, 1)
        return out, weights

    def extra_repr(self):
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, batch_first={self.batch_first}"


def _as_float_mask(mask, dtype, name):
    if mask is None:
        return None
    if mask.dtype == torch.bool:
        return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(mask, float("-inf"))
    if not torch.is_floating_point(mask):
        raise TypeError(f"only bool and floating types of {name} are supported, got {mask.dtype}")
    return mask.to(dtype)


def _save_torch_keys(module, state_dict, prefix, local_metadata):
    """Write the projections under torch's keys, in torch's order (this module's entries are
    the last ones in ``state_dict`` when the hook runs, so re-inserting them keeps the order)."""
    ours = [k for k in list(state_dict) if k.startswith(prefix) and not k[len(prefix):].startswith("out_proj.")
            and k[len(prefix):].split(".")[0] in ("q_proj", "k_proj", "v_proj", "bias_k", "bias_v")]
    saved = {k[len(prefix):]: state_dict.pop(k) for k in ours}
    tail = {k: state_dict.pop(k) for k in [k for k in list(state_dict) if k.startswith(prefix + "out_proj.")]}
    ws = [saved["q_proj.weight"], saved["k_proj.weight"], saved["v_proj.weight"]]
    if module._same_dims:
        state_dict[prefix + "in_proj_weight"] = torch.cat(ws)
    else:
        for name, w in zip(("q_proj_weight", "k_proj_weight", "v_proj_weight"), ws):
            state_dict[prefix + name] = w
    if "q_proj.bias" in saved:
        state_dict[prefix + "in_proj_bias"] = torch.cat([saved["q_proj.bias"], saved["k_proj.bias"], saved["v_proj.bias"]])
    for name in ("bias_k", "bias_v"):
        if name in saved:
            state_dict[prefix + name] = saved[name]
    state_dict.update(tail)


def _load_torch_keys(module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs):
    """Read torch's keys (``in_proj_weight`` ...) into the three ``nn.Linear`` layers."""
    e = module.embed_dim
    if prefix + "in_proj_weight" in state_dict:
        w = state_dict.pop(prefix + "in_proj_weight")
        if w.shape[0] == 3 * e:
            for name, part in zip(("q_proj", "k_proj", "v_proj"), w.split(e)):
                state_dict[f"{prefix}{name}.weight"] = part
    for name in ("q", "k", "v"):
        key = f"{prefix}{name}_proj_weight"
        if key in state_dict:
            state_dict[f"{prefix}{name}_proj.weight"] = state_dict.pop(key)
    if prefix + "in_proj_bias" in state_dict:
        b = state_dict.pop(prefix + "in_proj_bias")
        if b.shape[0] == 3 * e:
            for name, part in zip(("q_proj", "k_proj", "v_proj"), b.split(e)):
                state_dict[f"{prefix}{name}.bias"] = part


def convert_attention(model: nn.Module) -> nn.Module:
    """Replace every ``torch.nn.MultiheadAttention`` in ``model`` by :class:`MultiheadAttention`.

    In place (``model`` itself is returned; if ``model`` *is* an ``nn.MultiheadAttention`` the
    converted module is returned). Weights, ``requires_grad``, device, dtype and train/eval
    mode are kept; outputs and ``state_dict`` (keys, order, values) are the same. New
    ``Parameter`` objects replace the fused ones, so convert *before* building any optimizer
    and before wrapping the model in ``DistributedDataParallel`` (refused: DDP would keep
    synchronising the old parameters). ``nn.TransformerEncoder.use_nested_tensor`` is set to
    False in the converted model (see the module docstring).
    """
    if isinstance(model, nn.parallel.DistributedDataParallel):
        raise ValueError(
            "convert_attention(model) must run before the model is wrapped in DistributedDataParallel "
            "(DDP keeps synchronising the parameters it was built with): convert the plain model, then wrap it"
        )
    if isinstance(model, nn.MultiheadAttention):
        return MultiheadAttention.from_torch(model)
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.MultiheadAttention):
                setattr(parent, name, MultiheadAttention.from_torch(child))
        if isinstance(parent, nn.TransformerEncoder):
            parent.use_nested_tensor = False
    return model
