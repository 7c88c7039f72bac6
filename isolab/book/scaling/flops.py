"""Flop counts: torch's counter with models for the matrix functions, and Chapter 13's per-layer formulas."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Optional
from torch.utils.flop_counter import FlopCounterMode
from isolab import linalg
from ._constants import EIGH_FLOPS, aten


def _square_side(shape) -> int:
    return int(shape[-1])


def _batch_count(shape) -> int:
    return int(math.prod(shape[:-2])) if len(shape) > 2 else 1


def _eigh_formula(A_shape, *args, out_shape=None, **kwargs) -> int:
    n = _square_side(A_shape)
    return int(round(_batch_count(A_shape) * EIGH_FLOPS * n**3))


def _cholesky_formula(A_shape, *args, out_shape=None, **kwargs) -> int:
    n = _square_side(A_shape)
    return int(round(_batch_count(A_shape) * n**3 / 3))


def _cholesky_inverse_formula(L_shape, *args, out_shape=None, **kwargs) -> int:
    n = _square_side(L_shape)  # LAPACK potri: trtri (n³/3) + lauum (n³/3)
    return int(round(_batch_count(L_shape) * 2 * n**3 / 3))


_FACTORIZATIONS = {
    aten._linalg_eigh: _eigh_formula,
    aten.linalg_cholesky_ex: _cholesky_formula,
    aten.cholesky_inverse: _cholesky_inverse_formula,
}


@dataclass(frozen=True)
class FlopCount:
    """Result of :func:`count_flops`: the call's return value and its flops."""

    result: Any
    #: total flops (a multiply-add counts 2)
    total: int
    #: flops per aten operator name, e.g. ``{"mm": ..., "_linalg_eigh": ...}``
    by_op: dict


def count_flops(fn: Callable, *args, **kwargs) -> FlopCount:
    """Run ``fn(*args, **kwargs)`` and count its floating-point operations.

    Matrix products (``mm``, ``addmm``, ``bmm``, ``baddbmm``, convolutions, attention) are
    counted exactly by :class:`torch.utils.flop_counter.FlopCounterMode` (``2·b·n·m`` for a
    ``b×n`` by ``n×m`` product), including those run by autograd and by backward hooks.
    Factorizations it does not know are charged textbook counts: ``eigh``
    :data:`EIGH_FLOPS` ``·n³``, Cholesky ``n³/3``, ``cholesky_inverse`` ``2n³/3``.
    Elementwise operations are not counted (they are ``O(size)``, negligible beside the
    products for the widths of interest). Deterministic: the count depends only on shapes.
    """
    with FlopCounterMode(display=False, custom_mapping=dict(_FACTORIZATIONS)) as counter:
        result = fn(*args, **kwargs)
    by_op = {}
    for op, flops in counter.get_flop_counts().get("Global", {}).items():
        name = str(op).removeprefix("aten.")
        by_op[name] = by_op.get(name, 0) + int(flops)
    return FlopCount(result, int(counter.get_total_flops()), by_op)


#: Column-block width with which :func:`isolab.linalg.gram` (used by
#: :class:`isolab.optim.LayerStatistics`) forms ``XᵀX`` on a CPU: upper block
#: triangle only, mirrored. Read from the library, so that the cost model follows it.
GRAM_BLOCK: int = linalg.GRAM_BLOCK


def gram_flops(rows: int, n: int, block: Optional[int] = None) -> int:
    r"""Flops of ``AᵀA`` for ``A ∈ R^{rows×n}``.

    ``block=None``: one product, ``2·rows·n²``. ``block=B``: the upper block triangle only,
    one product ``A[:, i:i+B]ᵀ A[:, i:]`` per block row, as ``LayerStatistics`` does on a CPU
    when ``n > 2B`` (otherwise one product): ``Σ_i 2·rows·B·(n − i)``, which is
    ``rows·n·(n + B)`` when ``B`` divides ``n``: about half, ``1/2 + B/(2n)`` of the full count.
    """
    _check_dims(rows=rows, n=n)
    if block is None or n <= 2 * block:
        return 2 * rows * n * n
    return sum(2 * rows * (min(i + block, n) - i) * (n - i) for i in range(0, n, block))


def _check_dims(**dims):
    for name, v in dims.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")


def layer_flops(
    n: int, m: int, b: int, *, input_grad: bool = True, eigh_flops: float = EIGH_FLOPS, gram_block: Optional[int] = None
) -> dict:
    r"""The cost model of one linear layer ``n → m`` on ``b`` rows, in flops (and elements).

    Keys: ``forward`` ``2bnm``; ``backward`` ``4bnm`` (``2bnm`` when ``input_grad`` is
    False: no ``GWᵀ`` for a layer whose input needs no gradient); ``forward_backward``;
    ``statistics`` ``2b(n² + m²)`` (``XᵀX`` and ``GᵀG`` by one product each; with
    ``gram_block=B``, the upper-block-triangle products of :func:`gram_flops`, about half:
    pass :data:`GRAM_BLOCK` to model what ``LayerStatistics`` does on a CPU); ``roots_eigh``
    ``(eigh_flops + 2)(n³ + m³)`` (an ``eigh`` and ``V diag Vᵀ`` per side);
    ``newton_iteration`` ``6(n³ + m³)`` (three products per coupled Newton iteration and
    side); ``lean_rebuild`` ``3(n³ + m³)`` (Cholesky ``n³/3``, its inverse ``2n³/3`` and one
    product ``2n³`` per side: the lean state rebuilds ``C = P^{-2} − λI`` at each refresh);
    ``apply`` ``2nm(n + m)`` (``P_X ∇W P_G``); and, in *elements* per collective,
    ``gradient_elements`` ``nm`` (DDP's all-reduce of the gradient) and
    ``statistics_elements`` ``n(n+1)/2 + m(m+1)/2``: the upper triangles of ``XᵀX`` and
    ``GᵀG``, which is what :func:`isolab.distributed.all_reduce_symmetric` sends (about
    half of the ``n² + m²`` entries of the two matrices); shared inverse roots
    (``distribute_roots``) travel in the same packed form.
    """
    _check_dims(n=n, m=m, b=b)
    cubes = n**3 + m**3
    fwd = 2 * b * n * m
    bwd = (4 if input_grad else 2) * b * n * m
    return {
        "forward": fwd,
        "backward": bwd,
        "forward_backward": fwd + bwd,
        "statistics": gram_flops(b, n, gram_block) + gram_flops(b, m, gram_block),
        "roots_eigh": (eigh_flops + 2) * cubes,
        "newton_iteration": 6 * cubes,
        "lean_rebuild": 3 * cubes,
        "apply": 2 * n * m * (n + m),
        "gradient_elements": n * m,
        "statistics_elements": (n * (n + 1) + m * (m + 1)) // 2,
    }


def iso_step_flops(
    n: int,
    m: int,
    b: int,
    stat_interval: int = 1,
    root_interval: int = 1,
    *,
    root_method: str = "eigh",
    newton_iterations: float = 0.0,
    lean: bool = False,
    input_grad: bool = True,
    world_size: int = 1,
    eigh_flops: float = EIGH_FLOPS,
    gram_block: Optional[int] = None,
) -> dict:
    r"""Average cost per step of Iso/IsoAdam on one layer, by the model of :func:`layer_flops`.

    Statistics every ``stat_interval`` steps, roots every ``root_interval`` steps (by
    ``eigh``, or by ``newton_iterations`` coupled Newton iterations per refresh), the lean
    state's rebuild at each root refresh when ``lean``; the application every step
    (``gram_block`` as in :func:`layer_flops`). Returns
    flops per step under ``forward_backward``, ``statistics``, ``roots``, ``apply`` and their
    sum ``optimizer`` (all but ``forward_backward``); and, when ``world_size > 1``, the
    elements per step that travel between processes: ``gradient_elements`` (``nm``, DDP's
    all-reduce), ``statistics_elements`` (packed ``XᵀX`` and ``GᵀG``, every
    ``stat_interval`` steps) and ``roots_elements`` (packed roots shared by their owners,
    every ``root_interval`` steps); all 0 for one process.
    """
    _check_dims(stat_interval=stat_interval, root_interval=root_interval, world_size=world_size)
    if root_method not in ("eigh", "newton"):
        raise ValueError(f"root_method must be 'eigh' or 'newton', got {root_method!r}")
    c = layer_flops(n, m, b, input_grad=input_grad, eigh_flops=eigh_flops, gram_block=gram_block)
    roots = c["roots_eigh"] if root_method == "eigh" else newton_iterations * c["newton_iteration"]
    if lean:
        roots = roots + c["lean_rebuild"]
    out = {
        "forward_backward": c["forward_backward"],
        "statistics": c["statistics"] / stat_interval,
        "roots": roots / root_interval,
        "apply": c["apply"],
    }
    out["optimizer"] = out["statistics"] + out["roots"] + out["apply"]
    parallel = world_size > 1
    out["gradient_elements"] = c["gradient_elements"] if parallel else 0
    out["statistics_elements"] = c["statistics_elements"] / stat_interval if parallel else 0
    out["roots_elements"] = c["statistics_elements"] / root_interval if parallel else 0
    return out


def muon_flops(n: int, m: int, steps: int = 5) -> int:
    r"""Flops of Muon's ``steps`` quintic Newton–Schulz iterations on an ``n×m`` gradient.

    With ``s = min(n, m)`` and ``l = max(n, m)`` (the Gram matrix is taken on the small
    side), one iteration is ``A = X Xᵀ`` (``2s²l``), ``B = bA + cA²`` (``2s³``) and
    ``BX`` (``2s²l``): ``4s²l + 2s³``; ``30n³`` for a square layer and 5 steps.
    """
    _check_dims(n=n, m=m)
    s, l = min(n, m), max(n, m)
    return steps * (4 * s * s * l + 2 * s**3)


