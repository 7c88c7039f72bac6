"""Explicit parameter routing: which parameters a matrix optimizer may touch.

Muon, Shampoo, Iso and IsoAdam precondition *hidden weight matrices*. Embeddings, the
output head, biases and normalisation gains are not hidden matrices and go to an Adam
fallback. ``param.ndim == 2`` is not a safe rule: it also catches embedding tables and
the head (both 2-D). :func:`split_parameters` therefore routes by *module type* and by
what the caller declares, and refuses to guess about anything else.

Rules, applied in this order; each parameter lands in exactly one group (a tied weight,
shared by two modules, is routed once, by the first rule that matches it):

1. ``head``: every parameter of the module(s) passed as ``head=``.
2. ``embedding``: every parameter of an :class:`torch.nn.Embedding` /
   :class:`torch.nn.EmbeddingBag`, and of the module(s) passed as ``embeddings=``.
3. ``matrix``: the weight of every :class:`torch.nn.Linear` (subclasses included).
4. ``vector``: every remaining parameter with ``ndim <= 1`` (biases, norm gains, scalars).

A remaining parameter with ``ndim >= 2`` (a convolution kernel, ``nn.MultiheadAttention``'s
``in_proj_weight``, a bare ``nn.Parameter`` matrix) is *not* guessed: by default
(``others="raise"``) :func:`split_parameters` raises a :class:`ValueError` naming every
such parameter and its shape. Declare its module as ``embeddings=``/``head=``, or pass
``others="vector"`` to send them to the Adam fallback explicitly.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from torch import nn

__all__ = ["GROUPS", "split_parameters"]

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
    head: nn.Module | Iterable[nn.Module] | None = None,
    others: Literal["raise", "vector"] = "raise",
) -> dict[str, dict[str, nn.Parameter]]:
    """Split ``model``'s trainable parameters into ``matrix / embedding / head / vector``.

    Args:
        model: the model. Only parameters with ``requires_grad=True`` are routed.
        embeddings: extra module(s) whose parameters are embeddings (``nn.Embedding``
            and ``nn.EmbeddingBag`` are recognised without being declared).
        head: module(s) whose parameters form the output head (e.g. the final
            ``nn.Linear`` of a language model); never routed to ``matrix``.
        others: what to do with an undeclared parameter of ``ndim >= 2`` that is not an
            ``nn.Linear`` weight: ``"raise"`` (default) or ``"vector"``.

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
    head_mods = _as_modules(head, "head")
    emb_mods = _as_modules(embeddings, "embeddings")
    all_mods = {id(m) for m in model.modules()}
    for m, what in [(m, "head") for m in head_mods] + [(m, "embeddings") for m in emb_mods]:
        if id(m) not in all_mods:
            raise ValueError(f"the module passed as {what}= ({type(m).__name__}) is not part of the model")

    names = {}
    for name, p in model.named_parameters():  # deduplicates tied parameters
        if p.requires_grad:
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
        if isinstance(m, nn.Linear) and m.weight is not None and m.weight.ndim >= 2:
            claim(m.weight, "matrix")

    out: dict[str, dict[str, nn.Parameter]] = {g: {} for g in GROUPS}
    unrouted = []
    for name, p in model.named_parameters():
        if id(p) not in names or names[id(p)] != name:
            continue  # frozen, or a second name of a tied parameter
        group = route.get(id(p))
        if group is None:
            if p.ndim <= 1 or others == "vector":
                group = "vector"
            else:
                unrouted.append(f"{name} {tuple(p.shape)}")
                continue
        out[group][name] = p
    if unrouted:
        raise ValueError(
            "split_parameters will not guess where these parameters belong (ndim >= 2 but "
            "not an nn.Linear weight): " + ", ".join(unrouted) + ". Declare their modules "
            "with embeddings=/head=, or pass others='vector' to send them to the Adam fallback."
        )
    return out
