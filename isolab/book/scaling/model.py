"""Chapter 13's cost model at a GPU's datasheet peaks: time weights per precision, owner shares, a model step."""

from __future__ import annotations

import json
from typing import Optional
from .flops import _check_dims, iso_step_flops, muon_flops


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

    from ..figures.saved import LOCAL

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
               newton_iterations: int = 15, precision: Optional[dict] = None) -> dict:
    r"""One process's cost per step for ``layers`` square ``n × n`` hidden layers, ``b`` rows
    per process, statistics and roots refreshed every ``k`` steps, ``world_size`` processes.

    Parts per optimizer, in units of the forward and backward pass: Adam (nothing else to
    show), Muon (Newton–Schulz), Iso with ``eigh`` roots and with ``newton_iterations``
    Newton iterations. Each rank forms the statistics of its own rows and applies the roots
    to every layer; the roots (``2·layers`` jobs, one per side) and Muon's Newton–Schulz
    (``layers`` jobs) are spread over the ranks that own them (:func:`rank_share`), as
    ``distribute_roots`` does. ``time_weighted`` multiplies each part by :func:`time_weights`
    (an H100: bfloat16 forward, backward and Newton–Schulz; float32 statistics, roots and
    application; ``precision`` moves parts to another precision, e.g. ``{"statistics": "tf32",
    "apply": "tf32"}``). Statistics by one product per covariance (as on an accelerator).
    """
    _check_dims(n=n, b=b, k=k, world_size=world_size, layers=layers)
    w = time_weights(precision=precision) if time_weighted else dict.fromkeys(GPU_PRECISION, 1.0)
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


