"""Timing on the machine at hand: medians of repeated runs, the statistics and the matrix functions of a layer."""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable
import torch
from torch import nn
from isolab import linalg
from ..seeding import generator
from .flops import _check_dims, count_flops
from .precision import rotated_gaussian


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


