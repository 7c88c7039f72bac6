r"""What Iso costs at scale: flop counts, a cost model, amortization, precision, data parallelism.

Chapter 13 of the book. For one linear layer ``Y = X W`` (``W ∈ R^{n×m}``, ``b`` rows of
``X ∈ R^{b×n}`` and ``G = ∂L/∂Y ∈ R^{b×m}``) one training step costs, counting a
multiply-add as 2 floating-point operations (flops):

============================  =====================================  ==========================
piece                         flops                                  how often
============================  =====================================  ==========================
forward ``XW``                ``2bnm``                               every step
backward ``GWᵀ``, ``XᵀG``     ``4bnm`` (``2bnm`` if ``X`` needs no   every step
                              gradient, e.g. the first layer)
statistics ``XᵀX``, ``GᵀG``   ``2b(n² + m²)``                        every ``stat_interval``
inverse roots (``eigh``)      ``(c_eigh + 2)(n³ + m³)``              every ``root_interval``
inverse roots (Newton)        ``6(n³ + m³)`` per iteration           every ``root_interval``
apply ``P_X ∇W P_G``          ``2nm(n + m)``                         every step
============================  =====================================  ==========================

so the statistics of a square hidden layer cost ``4bn²/6bn² = 2/3`` of its forward and
backward *whatever* ``n`` and ``b`` (about half of that when only the upper triangle of
the symmetric ``XᵀX`` is formed, as ``LayerStatistics`` does on a CPU: :func:`gram_flops`),
while the roots and their application are fixed costs per step that a larger batch dilutes (``(n + m)/(3b)`` for the application).
``c_eigh`` is a model: :data:`EIGH_FLOPS` ``= 9``, the textbook count for a symmetric
eigendecomposition with eigenvectors (Golub & Van Loan), plus ``2n³`` for
``V diag(w) Vᵀ``. Under data parallelism each rank all-reduces ``nm`` gradient entries
per step (what DDP does for any optimizer) and, when the statistics are averaged, the upper
triangles of ``XᵀX`` and ``GᵀG`` (``n(n+1)/2 + m(m+1)/2`` elements, about ``(n² + m²)/2``)
per statistics refresh.

Contents:

- :func:`count_flops`: flops of a call, counted by ``torch.utils.flop_counter`` with
  textbook counts added for the factorizations it does not know (``eigh``, Cholesky).
- :func:`layer_flops`, :func:`iso_step_flops`, :func:`muon_flops`: the cost model above.
- :data:`H100_TFLOPS`, :data:`GPU_PRECISION`, :func:`time_weights`: flops weighted by the
  precision each part runs in on a GPU (float32 statistics, roots and application; bfloat16
  forward, backward and Newton–Schulz); :func:`saved_gpu_timings` reads measured rates from
  ``results/gpu_check.json`` when a GPU run saved them.
- :func:`rank_share`, :func:`model_step`: one process's cost per step with the roots and
  Newton–Schulz spread over the ranks that own them (the explorable of section 13.7).
- :func:`measure_statistics`: one layer's forward, backward and statistics, counted (and
  timed on request).
- :func:`median_time`, :func:`linalg_benchmark`: wall-clock timings (noisy; never printed
  in a checked cell). ``python -m isolab.book.scaling --out results/scaling_gpu.json`` runs the
  benchmark on the best available device and saves it.
- :func:`train_mlp`, :func:`schedule_cost`, :func:`state_elements`, :func:`staleness_run`:
  the amortization experiment (a seeded MLP trained with IsoAdam at given refresh intervals;
  ``scripts/ch13_staleness.py`` and ``scripts/ch13_subsample.py`` run it over seeds).
- :func:`rotated_gaussian`, :func:`whitening_residual`, :func:`newton_inverse_sqrt_in`:
  the precision experiments (bf16 statistics, float32 ``eigh``, Newton in bf16).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch
from torch import Tensor, nn
from torch.utils.flop_counter import FlopCounterMode

from isolab import linalg
from . import features
from .seeding import generator

__all__ = [
    "first_root_gain",
    "EIGH_FLOPS",
    "GRAM_BLOCK",
    "gram_flops",
    "FlopCount",
    "count_flops",
    "layer_flops",
    "iso_step_flops",
    "muon_flops",
    "H100_TFLOPS",
    "GPU_PRECISION",
    "time_weights",
    "rank_share",
    "saved_gpu_timings",
    "model_step",
    "median_time",
    "measure_statistics",
    "linalg_benchmark",
    "mlp",
    "RegressionTask",
    "train_mlp",
    "schedule_cost",
    "state_elements",
    "STALENESS_TASK",
    "STALENESS_ISOADAM",
    "staleness_run",
    "rotated_gaussian",
    "whitening_residual",
    "newton_inverse_sqrt_in",
    "CommunicationTally",
    "train_replica",
    "data_parallel_worker",
    "max_gap",
]

#: Flops of a symmetric eigendecomposition with eigenvectors, as a multiple of ``n³``
#: (Golub & Van Loan's count for the symmetric QR algorithm, about ``9n³``). A model, not a
#: measurement: :func:`count_flops` charges it for every ``torch.linalg.eigh``.
EIGH_FLOPS = 9.0

aten = torch.ops.aten


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


# ------------------------------------------------------------ precision and ranks
#: Peak dense matrix-multiply throughput of one NVIDIA H100 SXM in TFLOP/s, by the precision
#: a product runs in: float32 on the CUDA cores (67), TF32 and bfloat16 on the tensor cores.
#: NVIDIA's datasheet lists the tensor-core figures with 2:4 structured sparsity (989 TF32,
#: 1979 bfloat16); dense products run at half of that.
H100_TFLOPS = {"float32": 67.0, "tf32": 494.7, "bfloat16": 989.4}

#: The precision each part of a step runs in on a GPU: the network's forward and backward
#: and Muon's Newton–Schulz in bfloat16; Iso's statistics in float32 (the library refuses
#: anything lower, section 13.5), and its roots and their application in float32 too.
GPU_PRECISION = {"forward_backward": "bfloat16", "statistics": "float32", "roots": "float32",
                 "apply": "float32", "newton_schulz": "bfloat16"}


def time_weights(throughput: Optional[dict] = None, precision: Optional[dict] = None) -> dict:
    r"""How much more time a flop of each part costs than a flop of the forward and backward.

    ``throughput`` maps a precision to a rate (default :data:`H100_TFLOPS`), ``precision``
    maps each part (the keys of :data:`GPU_PRECISION`) to the precision it runs in (default
    :data:`GPU_PRECISION`). Returns ``{part: rate(forward_backward) / rate(part)}``, so that
    a part's flops times its weight is its time in units of forward+backward flops (at peak
    rates: a model of the arithmetic, not of memory traffic or of ``eigh``, which runs far
    below peak on a GPU). With the defaults, a float32 flop weighs ``989.4/67 ≈ 14.8``.
    """
    rates = dict(H100_TFLOPS if throughput is None else throughput)
    where = {**GPU_PRECISION, **(precision or {})}
    unknown = sorted(set(where) - set(GPU_PRECISION))
    if unknown:
        raise ValueError(f"unknown parts {unknown}; the parts are {sorted(GPU_PRECISION)}")
    for part, p in where.items():
        if p not in rates:
            raise ValueError(f"part {part!r} runs in {p!r}, which has no throughput in {sorted(rates)}")
        if not (isinstance(rates[p], (int, float)) and rates[p] > 0):
            raise ValueError(f"throughput of {p!r} must be a positive number, got {rates[p]!r}")
    base = rates[where["forward_backward"]]
    return {part: base / rates[p] for part, p in where.items()}


def saved_gpu_timings(path=None) -> Optional[dict]:
    """The per-dtype GPU timings that ``scripts/gpu_check.sh`` saves under the key
    ``"ch13_dtype_timings"`` of ``results/gpu_check.json`` (``path`` overrides the file), or
    ``None`` when no such file is in the checkout (nothing is downloaded). Its
    ``throughput_tflops`` has the keys of :data:`H100_TFLOPS` and can be passed to
    :func:`time_weights`."""
    from pathlib import Path

    from .figures.saved import LOCAL

    file = Path(path) if path is not None else LOCAL / "gpu_check.json"
    if not file.exists():
        return None
    data = json.loads(file.read_text())
    timings = data.get("ch13_dtype_timings")
    if timings is None:
        return None
    if not isinstance(timings, dict) or "throughput_tflops" not in timings:
        raise ValueError(f"{file}: 'ch13_dtype_timings' has no 'throughput_tflops' (keys: {sorted(timings)})")
    return timings


def rank_share(jobs: int, world_size: int) -> float:
    r"""The fraction of ``jobs`` equal matrix jobs that the busiest of ``world_size`` ranks
    computes when each rank computes the jobs it owns (:func:`isolab.distributed.assign_owners`):
    ``ceil(jobs / W) / jobs``. It falls like ``1/W`` until every rank owns one job, and stays
    there: no rank computes less than one whole matrix."""
    _check_dims(jobs=jobs, world_size=world_size)
    from isolab.distributed import assign_owners

    owners = assign_owners([1] * jobs, world_size)
    return max(owners.count(r) for r in range(world_size)) / jobs


def model_step(n: int, b: int, k: int, world_size: int = 1, *, layers: int = 12, time_weighted: bool = False,
               newton_iterations: int = 15) -> dict:
    r"""One process's cost per step for ``layers`` square ``n × n`` hidden layers, ``b`` rows
    per process, statistics and roots refreshed every ``k`` steps, ``world_size`` processes.

    Parts per optimizer, in units of the forward and backward pass: Adam (nothing else to
    show), Muon (Newton–Schulz), Iso with ``eigh`` roots and with ``newton_iterations``
    Newton iterations. Each rank forms the statistics of its own rows and applies the roots
    to every layer; the roots (``2·layers`` jobs, one per side) and Muon's Newton–Schulz
    (``layers`` jobs) are spread over the ranks that own them (:func:`rank_share`), as
    ``distribute_roots`` does. ``time_weighted`` multiplies each part by :func:`time_weights`
    (an H100: bfloat16 forward, backward and Newton–Schulz; float32 statistics, roots and
    application). Statistics by one product per covariance (as on an accelerator).
    """
    _check_dims(n=n, b=b, k=k, world_size=world_size, layers=layers)
    w = time_weights() if time_weighted else dict.fromkeys(GPU_PRECISION, 1.0)
    eigh = iso_step_flops(n, n, b, k, k)
    newton = iso_step_flops(n, n, b, k, k, root_method="newton", newton_iterations=newton_iterations)
    fb = eigh["forward_backward"]
    roots_share, ns_share = rank_share(2 * layers, world_size), rank_share(layers, world_size)

    def iso(r):
        return {"forward + backward": 1.0, "statistics": w["statistics"] * r["statistics"] / fb,
                "roots": w["roots"] * roots_share * r["roots"] / fb, "apply roots": w["apply"] * r["apply"] / fb}

    return {"Adam": {"forward + backward": 1.0},
            "Muon": {"forward + backward": 1.0,
                     "Newton-Schulz": w["newton_schulz"] * ns_share * muon_flops(n, n) / fb},
            "Iso, eigh": iso(eigh),
            f"Iso, Newton ({newton_iterations} it.)": iso(newton)}


# ------------------------------------------------------------------------ timing
def _sync(device) -> None:
    if isinstance(device, str):
        device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize()


def median_time(fn: Callable[[], Any], repeats: int = 5, warmup: int = 1, device="cpu", best: bool = False) -> float:
    """Median (``best=True``: smallest) wall-clock seconds of ``fn()`` over ``repeats`` calls,
    after ``warmup`` calls.

    Timings depend on the machine and its load: the book prints them only in cells whose
    output is not checked. On a shared machine the smallest time is the more stable
    estimate of what the computation itself costs (other processes only ever add time).
    """
    _check_dims(repeats=repeats)
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        _sync(device)
        t0 = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - t0)
    return min(times) if best else statistics.median(times)


def measure_statistics(n: int, m: int, b: int, *, input_grad: bool = True, repeats: int = 0, seed: int = 0) -> dict:
    r"""Count (and optionally time) one layer's forward and backward with and without Iso's hooks.

    A ``nn.Linear(n, m)`` on ``b`` rows (``input_grad``: the input requires a gradient, as
    for every layer but the first); the hooks are :class:`isolab.optim.LayerStatistics`,
    which form ``XᵀX`` and ``GᵀG`` during backward as the optimizers do. Returns the counted
    flops ``forward_backward`` and ``statistics`` (the hooked run minus the plain one) and,
    when ``repeats > 0``, the seconds ``forward_backward_s`` and ``statistics_s`` (the
    difference). Plain and hooked runs alternate, so that a change in the machine's load
    affects both alike, and each time is the best of ``repeats`` runs.
    """
    from isolab.optim import LayerStatistics

    _check_dims(n=n, m=m, b=b)
    torch.manual_seed(seed)
    layer = nn.Linear(n, m, bias=False)
    x = torch.randn(b, n, generator=generator(seed), requires_grad=input_grad)

    def fwd_bwd():
        layer.weight.grad = None
        x.grad = None
        layer(x).square().sum().backward()

    out = {"forward_backward": count_flops(fwd_bwd).total}
    with LayerStatistics(layer):
        out["statistics"] = count_flops(fwd_bwd).total - out["forward_backward"]
    if repeats > 0:
        plain, hooked = [], []
        for _ in range(repeats):
            plain.append(median_time(fwd_bwd, 1, warmup=1))
            with LayerStatistics(layer):
                hooked.append(median_time(fwd_bwd, 1, warmup=1))
        out["forward_backward_s"] = min(plain)
        out["statistics_s"] = min(hooked) - min(plain)
    return out


def linalg_benchmark(widths=(64, 128, 256, 512), device=None, repeats: int = 3, cond: float = 100.0, seed: int = 0) -> dict:
    r"""Time the matrix functions of a whitening or Muon step at each width ``n``.

    For an ``n×n`` covariance of condition number ``cond`` (float32) and an ``n×n``
    gradient, in milliseconds: ``matmul`` (one ``n×n`` product, float32),
    ``eigh_root`` (:func:`isolab.linalg.inverse_sqrt`: ``eigh`` and ``V diag Vᵀ``),
    ``newton_root`` (:func:`isolab.linalg.inverse_sqrt_newton`, cold start, to its default
    tolerance; ``newton_iterations`` reports how many it took), ``ns5_float32`` and
    ``ns5_bfloat16`` (Muon's 5 quintic Newton–Schulz steps), each the best of ``repeats``
    runs after one warm-up run. Returns
    ``{"device", "torch", "rows": [{"n", ...}, ...]}``.
    """
    device = torch.device(device) if device is not None else _best_device()
    rows = []
    for n in widths:
        gen = generator(seed + n)
        X = rotated_gaussian(4 * n, n, cond, generator=gen, dtype=torch.float32).to(device)
        C = X.T @ X / X.shape[0]
        M = torch.randn(n, n, generator=gen).to(device)
        info = linalg.inverse_sqrt_newton_info(C, damping=1e-6)
        rows.append({
            "n": n,
            "matmul": median_time(lambda: M @ M, repeats, 1, device, best=True) * 1e3,
            "eigh_root": median_time(lambda: linalg.inverse_sqrt(C), repeats, 1, device, best=True) * 1e3,
            "newton_root": median_time(lambda: linalg.inverse_sqrt_newton(C, damping=1e-6), repeats, 1, device, best=True) * 1e3,
            "newton_iterations": info.iterations,
            "ns5_float32": median_time(lambda: linalg.msign_newton_schulz(M), repeats, 1, device, best=True) * 1e3,
            "ns5_bfloat16": median_time(
                lambda: linalg.msign_newton_schulz(M, compute_dtype=torch.bfloat16), repeats, 1, device, best=True
            ) * 1e3,
        })
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu ({torch.get_num_threads()} threads)"
    return {"device": name, "torch": torch.__version__, "rows": rows}


def _best_device() -> torch.device:
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


# ------------------------------------------------------------------- amortization
def mlp(width: int = 64, depth: int = 3, d_in: Optional[int] = None, d_out: Optional[int] = None, seed: int = 0) -> nn.Sequential:
    """A bias-free ReLU MLP ``d_in → width → … → d_out`` with ``depth`` linear layers, seeded."""
    _check_dims(width=width, depth=depth)
    d_in = width if d_in is None else d_in
    d_out = width if d_out is None else d_out
    torch.manual_seed(seed)
    dims = [d_in] + [width] * (depth - 1) + [d_out]
    layers = []
    for i in range(depth):
        layers.append(nn.Linear(dims[i], dims[i + 1], bias=False))
        if i < depth - 1:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class RegressionTask:
    r"""A teacher–student regression with ill-conditioned, rotated Gaussian inputs.

    Inputs ``x = Q diag(√λ) z`` with ``λ`` :func:`isolab.book.features.spectrum` (condition
    number ``cond``, mean 1) and ``Q`` a random rotation; targets from a fixed random
    ``tanh`` network of the same widths, plus Gaussian noise of standard deviation
    ``noise``. :meth:`batch` draws fresh samples from the task's own generator, so two runs
    built with the same seeds see the same batches in the same order.
    """

    def __init__(self, d_in: int = 64, d_out: int = 16, cond: float = 100.0, noise: float = 0.1, seed: int = 1):
        gen = generator(seed)
        self.d_in, self.d_out, self.noise = d_in, d_out, noise
        Q = linalg.random_orthogonal(d_in, gen)
        self._sqrt_cov64 = Q * features.spectrum(d_in, cond).sqrt()
        self.sqrt_cov = self._sqrt_cov64.float()
        self.W1 = torch.randn(d_in, d_in, generator=gen) / math.sqrt(d_in)
        self.W2 = torch.randn(d_in, d_out, generator=gen) / math.sqrt(d_in)
        self._gen = generator(seed + 1)
        self._eval_draw = self._draw(2048)
        self.eval_x, self.eval_y = self._make(*self._eval_draw, torch.float32)

    def targets(self, x: Tensor) -> Tensor:
        return torch.tanh(x @ self.W1.to(x.dtype)) @ self.W2.to(x.dtype)

    def _draw(self, b: int):
        z = torch.randn(b, self.d_in, generator=self._gen)
        return z, torch.randn(b, self.d_out, generator=self._gen)

    def _make(self, z: Tensor, noise: Tensor, dtype: torch.dtype):
        sqrt_cov = self.sqrt_cov if dtype == torch.float32 else self._sqrt_cov64.to(dtype)
        x = z.to(dtype) @ sqrt_cov.T
        return x, self.targets(x) + self.noise * noise.to(dtype)

    def batch(self, b: int, dtype: torch.dtype = torch.float32):
        """``b`` fresh samples. The random draws are the same whatever ``dtype``; in float64
        the samples are computed from them in float64 (no float32 rounding at all)."""
        return self._make(*self._draw(b), dtype)

    def eval_set(self, dtype: torch.dtype = torch.float32):
        """The 2048 held-out samples, computed in ``dtype`` from the same draws."""
        return (self.eval_x, self.eval_y) if dtype == torch.float32 else self._make(*self._eval_draw, dtype)


#: Section 13.4's network and task for :func:`train_mlp` (``scripts/ch13_staleness.py``,
#: ``scripts/ch13_subsample.py``): 300 steps of 256 rows, width 64, condition number 1000,
#: float32, a 5 % warmup and a cosine decay (Part III's protocol: one schedule for everyone).
STALENESS_TASK = dict(steps=300, batch=256, width=64, depth=3, cond=1000.0, dtype=torch.float32,
                      schedule={"warmup": 0.05, "decay": "cosine"})
#: IsoAdam's hyperparameters in those runs, every one by name (weight decay 0, as the
#: ``torch.optim.Adam`` it meets; every row in the statistics unless ``stat_rows`` is given).
STALENESS_ISOADAM = dict(betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, beta_cov=0.95, damping=1e-3,
                         root_method="eigh", warmup_steps=0, stats_dtype=torch.float32, shrinkage=True,
                         stat_rows=None)


def staleness_run(lane: str, lr: float, seed: int, **overrides) -> dict:
    """One run of section 13.4's sweep: ``lane`` is ``"adam"`` or ``"isoadam_<ks>_<kr>"``
    (statistics every ``ks`` steps, roots every ``kr``); ``seed`` sets the initial weights and
    ``1000 + seed`` the teacher, batches and held-out set; ``overrides`` replace entries of
    :data:`STALENESS_ISOADAM` (e.g. ``stat_rows``). Returns :func:`train_mlp`'s result (no flop count)."""
    if lane == "adam":
        return train_mlp("adam", lr=lr, seed=seed, data_seed=1000 + seed, flops=False, **STALENESS_TASK)
    parts = lane.split("_")
    if len(parts) != 3 or parts[0] != "isoadam" or not all(p.isdigit() for p in parts[1:]):
        raise ValueError(f"lane must be 'adam' or 'isoadam_<stat_interval>_<root_interval>', got {lane!r}")
    unknown = sorted(set(overrides) - set(STALENESS_ISOADAM))
    if unknown:
        raise ValueError(f"unknown IsoAdam settings {unknown}; the settings are {sorted(STALENESS_ISOADAM)}")
    return train_mlp("isoadam", stat_interval=int(parts[1]), root_interval=int(parts[2]), lr=lr, seed=seed,
                     data_seed=1000 + seed, flops=False, **STALENESS_TASK, **{**STALENESS_ISOADAM, **overrides})


def state_elements(optimizer: torch.optim.Optimizer) -> int:
    """Number of tensor elements held in ``optimizer.state`` (its memory, in elements)."""
    return sum(v.numel() for st in optimizer.state.values() for v in st.values() if isinstance(v, Tensor))


def train_mlp(
    optimizer: str = "isoadam",
    *,
    stat_interval: int = 1,
    root_interval: int = 1,
    steps: int = 300,
    batch: int = 256,
    width: int = 64,
    depth: int = 3,
    cond: float = 100.0,
    lr: float = 1e-3,
    seed: int = 0,
    data_seed: int = 1,
    dtype: torch.dtype = torch.float32,
    flops: bool = True,
    schedule: dict | None = None,
    **optimizer_kwargs,
) -> dict:
    r"""Train :func:`mlp` on :class:`RegressionTask` with IsoAdam (or ``"adam"``) and report.

    ``schedule`` (:mod:`isolab.book.engine.schedules`, e.g. a warmup and a cosine decay)
    scales every parameter group's rate at every step; ``None`` keeps it constant.

    ``dtype`` is the precision of the weights and of the samples (computed in it from the
    same random draws): float64, with ``stats_dtype=torch.float64`` for IsoAdam, gives
    losses whose printed digits do not depend on the CPU's float32 kernels.

    The same ``seed`` gives the same initial weights and the same ``data_seed`` the same
    batches, whatever the intervals, so runs differ only by the optimizer's schedule.
    Returns ``loss`` (training loss per step), ``eval_loss`` (mean squared error on 2048
    held-out samples after training), ``seconds`` (wall-clock of the training loop),
    ``state_elements`` (:func:`state_elements` at the end) and ``optimizer_flops``:
    flops of the optimizer per step, counted with :func:`count_flops` on the real hooks and
    ``step`` (statistics in backward, roots and application in ``step``) over one period
    of the schedule (``lcm(stat_interval, root_interval)`` steps, after a first period
    that is not counted), per step, minus ``forward_backward_flops``, the forward and
    backward of the same model without hooks. ``flops=False`` skips that count (both keys
    are then ``None``): the long sweeps of ``scripts/ch13_staleness.py`` need only the losses.
    """
    from isolab.optim import IsoAdam

    if dtype not in (torch.float32, torch.float64):
        raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype!r}")
    task = RegressionTask(width, 16, cond, seed=data_seed)
    model = mlp(width, depth, width, 16, seed=seed).to(dtype)
    if optimizer == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=lr)
    elif optimizer == "isoadam":
        # no weight decay, as the torch.optim.Adam it is compared with (IsoAdam's default is AdamW's 0.01)
        opt = IsoAdam(model, lr=lr, stat_interval=stat_interval, root_interval=root_interval,
                      **{"weight_decay": 0.0, **optimizer_kwargs})
    else:
        raise ValueError(f"optimizer must be 'adam' or 'isoadam', got {optimizer!r}")
    batches = [task.batch(batch, dtype) for _ in range(steps)]
    from isolab.book.engine.schedules import check_schedule, multiplier

    schedule = check_schedule(schedule)
    base_lrs = [g["lr"] for g in opt.param_groups]
    step_index = [0]

    def one_step(x, y):
        if schedule is not None:
            f = multiplier(schedule, step_index[0], steps)
            for g, base in zip(opt.param_groups, base_lrs):
                g["lr"] = base * f
            step_index[0] += 1
        opt.zero_grad(set_to_none=True)
        loss = (model(x) - y).square().mean()
        loss.backward()
        opt.step()
        return loss

    losses = []
    t0 = time.perf_counter()
    for x, y in batches:
        losses.append(float(one_step(x, y).detach()))
    seconds = time.perf_counter() - t0
    with torch.no_grad():
        eval_x, eval_y = task.eval_set(dtype)
        eval_loss = float((model(eval_x) - eval_y).square().mean())
    state = state_elements(opt)
    if hasattr(opt, "remove_hooks"):
        opt.remove_hooks()
    if not flops:
        return {"loss": losses, "eval_loss": eval_loss, "seconds": seconds, "state_elements": state,
                "optimizer_flops": None, "forward_backward_flops": None}

    cost = schedule_cost(optimizer, stat_interval=stat_interval, root_interval=root_interval, batch=batch,
                         width=width, depth=depth, cond=cond, lr=lr, seed=seed, data_seed=data_seed, dtype=dtype,
                         **optimizer_kwargs)
    return {
        "loss": losses,
        "eval_loss": eval_loss,
        "seconds": seconds,
        "state_elements": state,
        "optimizer_flops": cost["optimizer_flops"],
        "forward_backward_flops": cost["forward_backward_flops"],
    }


def schedule_cost(
    optimizer: str = "isoadam",
    *,
    stat_interval: int = 1,
    root_interval: int = 1,
    batch: int = 256,
    width: int = 64,
    depth: int = 3,
    cond: float = 100.0,
    lr: float = 1e-3,
    seed: int = 0,
    data_seed: int = 1,
    dtype: torch.dtype = torch.float32,
    **optimizer_kwargs,
) -> dict:
    r"""What one schedule of :func:`train_mlp` costs, without the training: the optimizer's
    flops per step (``optimizer_flops``, counted with :func:`count_flops` on the real hooks
    and ``step`` over one period ``lcm(stat_interval, root_interval)`` after a first period
    that is not counted, minus ``forward_backward_flops``) and its state size
    (``state_elements``, after those two periods). The counts depend on shapes only."""
    from isolab.optim import IsoAdam

    if optimizer not in ("adam", "isoadam"):
        raise ValueError(f"optimizer must be 'adam' or 'isoadam', got {optimizer!r}")
    task = RegressionTask(width, 16, cond, seed=data_seed)
    probe = mlp(width, depth, width, 16, seed=seed).to(dtype)
    x, y = task.batch(batch, dtype)
    fb = count_flops(lambda: (probe(x) - y).square().mean().backward()).total
    period = math.lcm(stat_interval, root_interval) if optimizer == "isoadam" else 1
    if optimizer == "adam":
        popt = torch.optim.Adam(probe.parameters(), lr=lr)
    else:
        popt = IsoAdam(probe, lr=lr, stat_interval=stat_interval, root_interval=root_interval,
                       **{"weight_decay": 0.0, **optimizer_kwargs})
    for _ in range(period):  # the first period includes the first refresh (nothing to rebuild yet)
        _probe_step(probe, popt, x, y)
    total = count_flops(lambda: [_probe_step(probe, popt, x, y) for _ in range(period)]).total
    state = state_elements(popt)
    if hasattr(popt, "remove_hooks"):
        popt.remove_hooks()
    return {"optimizer_flops": total / period - fb, "forward_backward_flops": fb, "state_elements": state}


def _probe_step(model, opt, x, y):
    opt.zero_grad(set_to_none=True)
    (model(x) - y).square().mean().backward()
    opt.step()


# ----------------------------------------------------------------------- precision
def rotated_gaussian(
    b: int, n: int, cond: float = 1.0, *, generator: Optional[torch.Generator] = None, dtype=torch.float64
) -> Tensor:
    r"""``b`` samples ``x = Q diag(√λ) z`` (rows) with covariance ``Q diag(λ) Qᵀ``.

    ``λ`` = :func:`isolab.book.features.spectrum` ``(n, cond)`` (geometric, mean 1) and ``Q`` a
    Haar-random rotation (:func:`isolab.linalg.random_orthogonal`, drawn from ``generator``). Unlike
    axis-aligned features, every coordinate then mixes large and small variances, which is
    what rounding to a short float format damages.
    """
    _check_dims(b=b, n=n)
    Q = linalg.random_orthogonal(n, generator)
    Z = torch.randn(b, n, generator=generator, dtype=torch.float64)
    X = (Z * features.spectrum(n, cond).sqrt()) @ Q.T
    return X.to(dtype)


def whitening_residual(P: Tensor, C: Tensor, damping: float = 0.0) -> float:
    r"""``‖I − P (C + λI) P‖_F / √n`` in float64, ``λ = damping·tr(C)/n``: how far ``P`` is
    from whitening the (damped) covariance ``C``.

    0 for the exact ``(C + λI)^{-1/2}``; it is the RMS deviation from 1 of the eigenvalues
    of the whitened covariance, so ``0.01`` means whitened to about 1%, and values near 1
    mean not whitened at all.
    """
    P64 = P.to(torch.float64)
    A = C.to(torch.float64)
    A = 0.5 * (A + A.mT)
    n = A.shape[-1]
    if damping:
        A = A + damping * torch.diagonal(A, dim1=-2, dim2=-1).mean(-1)[..., None, None] * torch.eye(n, dtype=A.dtype)
    R = torch.eye(n, dtype=A.dtype) - P64 @ A @ P64
    return float(torch.linalg.matrix_norm(R).amax()) / math.sqrt(n)


def newton_inverse_sqrt_in(C: Tensor, steps: int, compute_dtype: torch.dtype, damping: float = 0.0) -> Tensor:
    r"""``(C + λI)^{-1/2}`` by ``steps`` coupled Newton iterations carried out *in* ``compute_dtype``.

    The iteration of :func:`isolab.linalg.inverse_sqrt_newton` (cold start): ``Y₀ = A/s``,
    ``Z₀ = I``, ``T = (3I − ZY)/2``, ``Y ← YT``, ``Z ← TZ``, result ``Z/√s`` with
    ``s = ‖A‖_F``. The library function computes half precision in float32 on purpose; this
    one does not, so that the chapter can show what happens to the iteration in bfloat16
    (every product rounded to 8 significant bits). Returns float32.
    """
    if not isinstance(steps, int) or steps < 0:
        raise ValueError(f"steps must be an int >= 0, got {steps!r}")
    A = C.to(torch.float64)
    A = 0.5 * (A + A.mT)
    n = A.shape[-1]
    I64 = torch.eye(n, dtype=torch.float64)
    if damping:
        A = A + damping * torch.diagonal(A).mean() * I64
    s = torch.linalg.matrix_norm(A)
    Y = (A / s).to(compute_dtype)
    Z = I64.to(compute_dtype)
    I = I64.to(compute_dtype)
    for _ in range(steps):
        T = 0.5 * (3 * I - Z @ Y)
        Y, Z = Y @ T, T @ Z
    Z = Z.to(torch.float32)
    return 0.5 * (Z + Z.mT) / s.sqrt().to(torch.float32)


# -------------------------------------------------------------- data parallelism
class CommunicationTally:
    """Count the elements a process hands to ``torch.distributed`` collectives, by purpose.

    Inside the ``with`` block, ``torch.distributed.all_reduce`` and ``all_gather`` are
    wrapped so that each call adds the number of elements of the tensor this process
    contributes: floating-point all-reduces to ``"statistics"`` (``XᵀX``, ``GᵀG``), integer
    ones to ``"row_counts"``, all-gathers to ``"roots"`` (shared inverse roots). DDP's
    gradient buckets are counted under ``"gradients"`` by the communication hook
    :meth:`ddp_hook` (register it with ``ddp.register_comm_hook(tally, tally.ddp_hook)``).
    ``calls`` counts the collectives of each kind.
    """

    def __init__(self):
        self.elements = {"gradients": 0, "statistics": 0, "row_counts": 0, "roots": 0}
        self.calls = {k: 0 for k in self.elements}
        self._saved = None
        self._in_ddp_hook = False

    def _add(self, kind, numel):
        self.elements[kind] += int(numel)
        self.calls[kind] += 1

    def __enter__(self):
        import torch.distributed as dist

        all_reduce, all_gather = dist.all_reduce, dist.all_gather
        self._saved = (all_reduce, all_gather)

        def counted_all_reduce(tensor, *args, **kwargs):
            if not self._in_ddp_hook:  # DDP's own all-reduce is counted by ddp_hook
                self._add("statistics" if tensor.is_floating_point() else "row_counts", tensor.numel())
            return all_reduce(tensor, *args, **kwargs)

        def counted_all_gather(tensor_list, tensor, *args, **kwargs):
            self._add("roots", tensor.numel())
            return all_gather(tensor_list, tensor, *args, **kwargs)

        dist.all_reduce, dist.all_gather = counted_all_reduce, counted_all_gather
        return self

    def __exit__(self, *exc):
        import torch.distributed as dist

        dist.all_reduce, dist.all_gather = self._saved
        return False

    def ddp_hook(self, state, bucket):
        """A DDP communication hook: count the bucket, then all-reduce it as DDP does."""
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        self._add("gradients", bucket.buffer().numel())
        self._in_ddp_hook = True
        try:
            return default_hooks.allreduce_hook(None, bucket)
        finally:
            self._in_ddp_hook = False


def train_replica(
    rank: int = 0,
    world_size: int = 1,
    *,
    steps: int = 60,
    global_batch: int = 256,
    width: int = 64,
    depth: int = 3,
    cond: float = 1000.0,
    lr: float = 3e-3,
    seed: int = 0,
    data_seed: int = 1,
    checkpoints=(1, 10, 30, 60),
    stat_interval: int = 1,
    root_interval: int = 10,
    **optimizer_kwargs,
) -> dict:
    r"""One replica of data-parallel IsoAdam training on :class:`RegressionTask`.

    ``stat_interval`` and ``root_interval`` are passed to IsoAdam explicitly (defaults 1
    and 10, section 13.6's schedule), whatever the library's defaults.

    Every process draws the same global batches (same ``data_seed``) and trains on its own
    contiguous slice of ``global_batch / world_size`` rows; the model (same ``seed`` on every
    rank) is wrapped in ``DistributedDataParallel`` when a process group with more than one
    process is running, which averages the gradients. ``optimizer_kwargs`` go to
    :class:`isolab.optim.IsoAdam` (e.g. ``sync_statistics=False``, ``stat_interval=10``).
    With ``world_size=1`` and no process group this is plain single-process training on the
    full batch: the reference the replicas are compared with.

    Returns ``params`` (all parameters flattened, float32, at the end), ``snapshots``
    (``{step: flattened parameters}`` at ``checkpoints``), ``loss`` (this replica's loss per
    step) and ``communication``: the elements this process contributed to collectives, by
    purpose (:class:`CommunicationTally`), over the whole run.
    """
    import torch.distributed as dist

    from isolab.optim import IsoAdam

    if global_batch % world_size:
        raise ValueError(f"global_batch {global_batch} is not divisible by world_size {world_size}")
    local = global_batch // world_size
    task = RegressionTask(width, 16, cond, seed=data_seed)
    model = mlp(width, depth, width, 16, seed=seed)
    parallel = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
    tally = CommunicationTally()
    net = model
    if parallel:
        net = nn.parallel.DistributedDataParallel(model)
        net.register_comm_hook(None, tally.ddp_hook)
    opt = IsoAdam(model, lr=lr, stat_interval=stat_interval, root_interval=root_interval,
                  **{"weight_decay": 0.0, **optimizer_kwargs})  # the chapter runs without decay
    losses, snapshots = [], {}
    with tally:
        for step in range(1, steps + 1):
            x, y = task.batch(global_batch)
            x, y = x[rank * local:(rank + 1) * local], y[rank * local:(rank + 1) * local]
            opt.zero_grad(set_to_none=True)
            loss = (net(x) - y).square().mean()
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
            if step in checkpoints:
                snapshots[step] = _flat(model)
    opt.remove_hooks()
    return {"params": _flat(model), "snapshots": snapshots, "loss": losses,
            "communication": dict(tally.elements), "calls": dict(tally.calls)}


def _flat(model: nn.Module) -> Tensor:
    return torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()])


def data_parallel_worker(rank: int, world_size: int, runs: dict, common: Optional[dict] = None) -> dict:
    """For :func:`isolab.distributed.launch`: :func:`train_replica` once per entry of ``runs``.

    ``runs`` maps a name to the options of one run (``{"synced": {}, "local":
    {"sync_statistics": False}}``), ``common`` holds options shared by all runs (``steps``,
    ``global_batch``, ...); the runs share the process group and go one after the other.
    Returns ``{name: train_replica(rank, world_size, **common, **options)}`` of this rank.
    """
    common = common or {}
    return {name: train_replica(rank, world_size, **common, **opts) for name, opts in runs.items()}


def max_gap(a: Tensor, b: Tensor) -> float:
    """``max |a − b|`` over all entries, as a float (0.0 means bitwise identical values)."""
    return float((a.to(torch.float64) - b.to(torch.float64)).abs().max())


def _main(argv=None) -> int:
    p = argparse.ArgumentParser(description="Time Iso's and Muon's matrix functions; save JSON.")
    p.add_argument("--out", default="results/scaling_gpu.json")
    p.add_argument("--widths", type=int, nargs="*", default=[256, 1024, 4096])
    p.add_argument("--device", default=None)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args(argv)
    report = linalg_benchmark(args.widths, args.device, args.repeats)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(_main())


def first_root_gain(rows: int, d: int = 64, *, damping: float = 1e-3, shrinkage: bool = True, draws: int = 20,
                    seed: int = 0) -> float:
    r"""How far the first whitening of a layer can amplify a direction: the largest gain of
    ``(Ĉ + δ·tr(Ĉ)/d·I)^{-1/2}`` relative to a direction of average variance,
    ``sqrt(tr(Ĉ)/d) · λ_min(Ĉ + δ·tr(Ĉ)/d·I)^{-1/2}``, for ``Ĉ`` the covariance of ``rows``
    isotropic Gaussian rows in ``d`` dimensions (the first statistics step, when the running
    average holds one batch), with the damping IsoAdam applies (:func:`isolab.optim.covariance.effective_damping`:
    raised towards ``d/(d + rows)`` while ``rows < d`` when ``shrinkage`` is on). The median
    over ``draws`` batches, float64.

    Marchenko–Pastur puts the smallest eigenvalue of ``Ĉ`` near ``(1 - sqrt(d/rows))^2`` of
    the mean: near zero at ``rows = d``, where the shrinkage is off, so the gain there is
    about ``δ^{-1/2}``, the most any row count gives."""
    from isolab.optim.covariance import effective_damping

    gen = torch.Generator().manual_seed(seed)
    delta = effective_damping({"damping": damping, "shrinkage": shrinkage}, rows, d, rows)
    gains = []
    for _ in range(draws):
        X = torch.randn(rows, d, generator=gen, dtype=torch.float64)
        C = X.T @ X / rows
        scale = float(torch.diagonal(C).mean())
        smallest = float(torch.linalg.eigvalsh(C)[0]) + delta * scale
        gains.append((scale / smallest) ** 0.5)
    return float(torch.tensor(gains).median())
