"""Explicit parameter routing: which parameters a matrix optimizer may touch.

Muon, Shampoo, Iso and IsoAdam precondition *hidden weight matrices*. Embeddings, the
output head, biases and normalisation gains are not hidden matrices and go to an Adam
fallback. ``param.ndim == 2`` is not a safe rule: it also catches embedding tables and
the head (both 2-D). :func:`split_parameters` therefore routes by *module type* and by
what the caller declares, and refuses to guess about anything else.

Rules, applied in this order; each parameter lands in exactly one group (a tied weight,
shared by two modules, is routed once, by the first rule that matches it):

1. ``head``: every parameter of the module(s) passed as ``head=``. With ``head="auto"``
   (the default) the *untied output head of a language model*: the module its
   ``get_output_embeddings()`` names (Hugging Face models), else every ``nn.Linear`` whose
   ``out_features`` equals the ``num_embeddings`` of an ``nn.Embedding`` of the model
   (nanoGPT's ``lm_head``). A head tied to the embedding shares its weight, which rule 2
   routes as an embedding (the tie is routed once). A model without ``nn.Embedding`` (an
   MLP, a CNN) has no automatic head: its last layer is a hidden matrix like the others;
   declare it with ``head=`` to send it to AdamW. ``head=None`` (or ``()``): no head.
2. ``embedding``: every parameter of an :class:`torch.nn.Embedding` /
   :class:`torch.nn.EmbeddingBag`, and of the module(s) passed as ``embeddings=``.
3. ``matrix``: the weight of every *linear-like* module (:func:`isolab.nn.linear_like`):
   :class:`torch.nn.Linear` (subclasses included), transformers' ``Conv1D`` (GPT-2's layers,
   weight stored ``(in, out)``), any class declared with :func:`isolab.nn.register_linear`,
   and every convolution (``nn.Conv1d/2d/3d`` and the transposed ones; matrix optimizers read
   the kernel as ``(shape[0], -1)``); and :class:`torch.nn.MultiheadAttention`'s input
   projections (``in_proj_weight``, or ``q/k/v_proj_weight`` when ``kdim``/``vdim`` differ;
   its ``out_proj`` is an ``nn.Linear``). :func:`weight_layouts` says how each matrix is
   stored.
4. ``vector``: every remaining parameter with ``ndim <= 1`` (biases, norm gains, scalars),
   and the ``bias_k``/``bias_v`` of ``nn.MultiheadAttention`` and of
   :class:`isolab.nn.MultiheadAttention` (biases of shape ``(1, 1, E)``).

A remaining parameter with ``ndim >= 2`` (a bare ``nn.Parameter`` matrix, a custom
layer's tensor) is *not* guessed: by default (``others="raise"``) :func:`split_parameters`
raises a :class:`ValueError` naming every such parameter and its shape. Declare its module
as ``embeddings=``/``head=``, or pass ``others="vector"`` to send them to the Adam fallback.

Which matrices Iso and IsoAdam can *whiten* is narrower (they need each layer's inputs and
output gradients): see :mod:`isolab.optim.statistics`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from torch import nn

from ..nn import MultiheadAttention as _LinearAttention
from ..nn import linear_like

__all__ = ["GROUPS", "split_parameters", "auto_heads", "weight_layouts"]

#: The group names, in the order :func:`split_parameters` returns them.
GROUPS = ("matrix", "embedding", "head", "vector")


def _as_modules(arg, what: str) -> list[nn.Module]:
    if arg is None:
        return []
    if isinstance(arg, nn.Module):
        return [arg]
    if isinstance(arg, Iterable) and not isinstance(arg, (str, bytes)):
        mods = list(arg)
        for m in mods:
            if not isinstance(m, nn.Module):
                raise TypeError(
                    f"{what} must be an nn.Module or an iterable of nn.Modules, "
                    f"got an element of type {type(m).__name__}"
                )
        return mods
    raise TypeError(f"{what} must be an nn.Module or an iterable of nn.Modules, got {type(arg).__name__}")


def split_parameters(
    model: nn.Module,
    *,
    embeddings: nn.Module | Iterable[nn.Module] | None = None,
    head: nn.Module | Iterable[nn.Module] | str | None = "auto",
    others: Literal["raise", "vector"] = "raise",
) -> dict[str, dict[str, nn.Parameter]]:
    """Split ``model``'s trainable parameters into ``matrix / embedding / head / vector``.

    Args:
        model: the model. Every parameter is routed, frozen ones (``requires_grad=False``) too, as
            ``torch.optim`` optimizers keep the parameters they are given: a block frozen now and
            unfrozen later is trained by its group from then on. A frozen undeclared parameter of
            ``ndim >= 2`` goes to ``vector`` instead of raising.
        embeddings: extra module(s) whose parameters are embeddings (``nn.Embedding``
            and ``nn.EmbeddingBag`` are recognised without being declared).
        head: module(s) whose parameters form the output head (e.g. the final
            ``nn.Linear`` of a language model); never routed to ``matrix``. ``"auto"``
            (default): a language model's untied head, found as in rule 1 of the module
            docstring; ``None``: no head.
        others: what to do with an undeclared parameter of ``ndim >= 2`` that is not the
            weight of a linear-like module: ``"raise"`` (default) or ``"vector"``.

    Returns:
        ``{"matrix": {name: param}, "embedding": {...}, "head": {...}, "vector": {...}}``,
        every key present (possibly empty), names as in ``model.named_parameters()``,
        model order inside each group.

    Raises:
        ValueError: undeclared ``ndim >= 2`` parameters (with ``others="raise"``), or a
            declared module that is not part of ``model``.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    if others not in ("raise", "vector"):
        raise ValueError(f"others must be 'raise' or 'vector', got {others!r}")
    if isinstance(head, str):
        if head != "auto":
            raise TypeError(f"head must be 'auto', None, an nn.Module or an iterable of nn.Modules, got {head!r}")
        head_mods = auto_heads(model)
    else:
        head_mods = _as_modules(head, "head")
    emb_mods = _as_modules(embeddings, "embeddings")
    all_mods = {id(m) for m in model.modules()}
    for m, what in [(m, "head") for m in head_mods] + [(m, "embeddings") for m in emb_mods]:
        if id(m) not in all_mods:
            raise ValueError(f"the module passed as {what}= ({type(m).__name__}) is not part of the model")

    names = {}
    for name, p in model.named_parameters():  # deduplicates tied parameters
        names[id(p)] = name

    route: dict[int, str] = {}

    def claim(p, group):
        if id(p) in names and id(p) not in route:
            route[id(p)] = group

    for m in head_mods:
        for p in m.parameters():
            claim(p, "head")
    for m in emb_mods:
        for p in m.parameters():
            claim(p, "embedding")
    for m in model.modules():
        if isinstance(m, (nn.Embedding, nn.EmbeddingBag)):
            for p in m.parameters():
                claim(p, "embedding")
    for m in model.modules():
        if linear_like(m) is not None:
            claim(m.weight, "matrix")
        elif isinstance(m, (nn.MultiheadAttention, _LinearAttention)):
            for attr in ("in_proj_weight", "q_proj_weight", "k_proj_weight", "v_proj_weight"):
                w = getattr(m, attr, None)
                if w is not None:
                    claim(w, "matrix")
            for attr in ("bias_k", "bias_v"):
                b = getattr(m, attr, None)
                if b is not None:
                    claim(b, "vector")

    out: dict[str, dict[str, nn.Parameter]] = {g: {} for g in GROUPS}
    unrouted = []
    for name, p in model.named_parameters():
        if names[id(p)] != name:
            continue  # a second name of a tied parameter
        group = route.get(id(p))
        if group is None:
            if p.ndim <= 1 or others == "vector" or not p.requires_grad:
                group = "vector"
            else:
                unrouted.append(f"{name} {tuple(p.shape)}")
                continue
        out[group][name] = p
    if unrouted:
        raise ValueError(
            "split_parameters will not guess where these parameters belong (ndim >= 2 but "
            "not the weight of a linear-like module (nn.Linear, transformers' Conv1D, a class declared with "
            "isolab.nn.register_linear), a convolution or nn.MultiheadAttention): " + ", ".join(unrouted) + ". "
            "Declare their modules with embeddings=/head=, register a linear layer's class with "
            "isolab.nn.register_linear(cls, weight_layout=...), or pass others='vector' to send them to the Adam fallback."
        )
    return out


def auto_heads(model: nn.Module) -> list[nn.Module]:
    """The untied output head(s) ``head="auto"`` finds (a tied head is routed as the embedding).

    A model that names its head, as Hugging Face models do with ``get_output_embeddings()``
    (on the model or on a module inside it), is taken at its word. Otherwise the head is every
    ``nn.Linear`` whose ``out_features`` is the ``num_embeddings`` of an ``nn.Embedding`` of
    ``model`` and whose weight is not tied to an embedding table (nanoGPT's ``lm_head``). The
    size rule stays with ``nn.Linear``: GPT-2's ``Conv1D`` layers often have an output size that
    equals the vocabulary or the number of positions in small configurations (``c_fc`` maps 64 to
    256 = the vocabulary in a tiny config), and are never heads.
    """
    emb = [m for m in model.modules() if isinstance(m, (nn.Embedding, nn.EmbeddingBag))]
    tables = {id(m.weight) for m in emb}
    named, declared = [], False
    for m in model.modules():
        getter = getattr(m, "get_output_embeddings", None)
        if callable(getter):
            declared = True
            try:
                head = getter()
            except (AttributeError, NotImplementedError):
                head = None
            if isinstance(head, nn.Module) and linear_like(head) is not None and id(head.weight) not in tables:
                if all(h is not head for h in named):
                    named.append(head)
    if declared:
        return named
    vocab = {m.num_embeddings for m in emb}
    return [
        m for m in model.modules()
        if isinstance(m, nn.Linear) and m.out_features in vocab and id(m.weight) not in tables
    ]


def weight_layouts(model: nn.Module) -> dict:
    """``{weight: layout}`` for the weight of every linear-like module of ``model``
    (``"out_in"`` as ``nn.Linear`` and convolutions, ``"in_out"`` as transformers' ``Conv1D``;
    see :data:`isolab.nn.WEIGHT_LAYOUTS`). A tied weight keeps the layout of its first module."""
    layouts: dict = {}
    for m in model.modules():
        spec = linear_like(m)
        if spec is not None and m.weight not in layouts:
            layouts[m.weight] = spec.weight_layout
    return layouts
