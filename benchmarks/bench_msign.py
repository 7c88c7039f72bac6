"""Newton-Schulz schedules for msign: polar error on the book's gradients, and time per matrix.

Run:  python benchmarks/bench_msign.py [--quick] [--device cpu|cuda] [--dtype float32|bfloat16]
                                       [--threads 1] [--repeats 15] [--json out.json]

Schedules (``isolab.linalg.msign_newton_schulz``'s ``coefficients``): ``"cubic"`` (1.5, -0.5),
``"jordan"`` (Keller Jordan's quintic, Muon's default) and ``"polar_express"`` (Amsel et al.'s
minimax quintic per iteration, with their safety factor), each at 3, 4, 5 and 6 iterations.

Accuracy. For every matrix ``G`` of a source, ``X = msign_newton_schulz(G, k, schedule)`` in
``--dtype`` is compared with the polar factor ``U V^T`` of a float64 SVD (``isolab.linalg.msign``):
``error = ||X - U V^T||_F / sqrt(rank)``, the root-mean-square distance of ``X``'s singular values
from 1 (they share ``G``'s singular vectors). A row gives the mean error over the source's
matrices and the range ``[min, max]`` of all singular values ``X`` has over them. Sources:

- ``lm@1``, ``lm@50``: the hidden-matrix gradients (q, k, v, o, fc, proj of every block) of
  the byte-level Transformer of :mod:`isolab.book.lm` (d_model 128, 4 layers, context 128,
  16 windows of the standard library's source per batch), after 1 and after 50 AdamW steps
  (lr 1e-3): the zero-initialised head makes every hidden gradient exactly 0 before the first
  step.
- ``dlin5``, ``dlin40``: the layer gradients of Chapter 10's deep linear regression
  (:class:`isolab.book.problems.DeepLinearRegression`, n 32, batch 128, depth 5 and 40) at
  initialization.
- ``log[1e-3,1]``, ``log[1e-5,1]``, ``power``: random 256 x 256 matrices ``U diag(s) V^T`` with
  singular values log-spaced over [1e-3, 1] and over [1e-5, 1], and ``s_i = 1/i``.

The spectrum table before it says how hard each source is: the normalized singular values
``s / ||G||_F`` are what the iteration starts from, and Polar Express's schedule is built for
``[1e-3, 1]``. On the book's gradients most normalized singular values lie below it, and the
polar error, which counts every direction alike, is dominated by directions no schedule
reaches in 6 iterations. A second table therefore weighs each direction by its share of the
gradient: ``sqrt(sum_i w_i (p_i - 1)^2)`` with ``w_i = s_i / sum(s)`` and ``p_i = u_i^T X v_i``
(``X``'s singular value on ``G``'s ``i``-th pair of singular vectors), the error where the
gradient has its mass.

Time. One matrix per shape (256 x 256, 512 x 512, 768 x 3072; random, float32 on a CPU, the
``--dtype`` on CUDA), every schedule and iteration count timed once per round in a rotated
order, ``--repeats`` rounds, ``--threads`` threads (1 by default); the median over rounds is
printed as a ratio to Jordan's quintic at 5 iterations measured in the same rounds. Per
iteration a quintic costs 3 matrix products and the cubic 2, so the ratios mostly count
products; on an accelerator they also show what is not a product (normalization, launches).

``--quick`` shrinks every source and shape (seconds, for ``tests/lib/test_bench_msign.py``).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path

import torch

from isolab import linalg

SCHEDULES = ("cubic", "jordan", "polar_express")
STEPS = (3, 4, 5, 6)
BASELINE = ("jordan", 5)
SHAPES = ((256, 256), (512, 512), (768, 3072))
QUICK_SHAPES = ((64, 64), (48, 160))


# ----------------------------------------------------------------------------- matrices
def transformer_gradients(quick: bool, adam_steps: int) -> list[torch.Tensor]:
    """The hidden-matrix gradients of :mod:`isolab.book.lm`'s Transformer after ``adam_steps``
    AdamW steps (float64 copies), on a fresh batch of the standard library's bytes."""
    from isolab.book import lm
    from isolab.optim import split_parameters

    cfg = lm.LMConfig(d_model=32, n_layers=1, n_heads=2, context=32) if quick else lm.LMConfig(
        d_model=128, n_layers=4, n_heads=4, context=128)
    batch = 4 if quick else 16
    data = lm.stdlib_corpus(max_bytes=200_000 if quick else 2_000_000)
    model = lm.TransformerLM(cfg, seed=0)
    opt = lm.make_optimizer("adam", model, lm.TrainConfig(lr=1e-3))
    gen = torch.Generator().manual_seed(1)
    for _ in range(adam_steps):
        x, y = lm.sample_batch(data, batch, cfg.context, gen)
        opt.zero_grad()
        model.loss(x, y).backward()
        opt.step()
    x, y = lm.sample_batch(data, batch, cfg.context, gen)
    opt.zero_grad()
    model.loss(x, y).backward()
    matrices = split_parameters(model, head=model.head)["matrix"]
    return [p.grad.detach().to(torch.float64).clone() for p in matrices.values()]


def deep_linear_gradients(quick: bool, depth: int) -> list[torch.Tensor]:
    """The layer gradients of Chapter 10's deep linear regression at initialization (seed 0)."""
    from isolab.book.problems import DeepLinearRegression

    problem = DeepLinearRegression(n=8 if quick else 32, depth=depth, batch=32 if quick else 128)
    model = problem.reference_model(problem.initial_weights(0))
    X, T = problem.batch(0, 0)
    problem.reference_loss(model(X), T).backward()
    return [m.weight.grad.detach().clone() for m in model]


def decaying_spectrum(n: int, m: int, s: torch.Tensor, seed: int) -> torch.Tensor:
    """``U diag(s) V^T`` with Haar-random ``U`` (n x n) and ``V`` (m x n columns), float64."""
    g = torch.Generator().manual_seed(seed)
    U = linalg.random_orthogonal(n, g)
    V = linalg.random_orthogonal(m, g)[:, :n]
    return (U * s.to(torch.float64)) @ V.T


def sources(quick: bool) -> dict[str, list[torch.Tensor]]:
    n = 32 if quick else 256
    i = torch.arange(1, n + 1, dtype=torch.float64)
    out = {
        "lm@1": transformer_gradients(quick, 1),
        "lm@50": transformer_gradients(quick, 5 if quick else 50),
        "dlin5": deep_linear_gradients(quick, 3 if quick else 5),
        "dlin40": deep_linear_gradients(quick, 6 if quick else 40),
        "log[1e-3,1]": [decaying_spectrum(n, n, torch.logspace(0, -3, n, dtype=torch.float64), s) for s in (0, 1)],
        "log[1e-5,1]": [decaying_spectrum(n, n, torch.logspace(0, -5, n, dtype=torch.float64), s) for s in (2, 3)],
        "power": [decaying_spectrum(n, n, 1 / i, s) for s in (4, 5)],
    }
    return out


# ----------------------------------------------------------------------------- accuracy
def spectrum_row(name: str, mats: list[torch.Tensor]) -> dict:
    """How hard a source is: shapes, and its normalized singular values ``s / ||G||_F``."""
    normalized = [torch.linalg.svdvals(G) / torch.linalg.matrix_norm(G) for G in mats]
    nz = torch.cat([s[s > 0] for s in normalized])
    kappa = [float(s[0] / s[s > 0][-1]) for s in normalized]
    return {
        "source": name, "matrices": len(mats), "shapes": sorted({tuple(G.shape) for G in mats}),
        "median_condition": statistics.median(kappa),
        "smallest_normalized": float(nz.min()), "largest_normalized": float(nz.max()),
        "below_1e-3": float((nz < 1e-3).double().mean()),
    }


def polar_errors(mats: list[torch.Tensor], schedule: str, steps: int, dtype: torch.dtype,
                 device: torch.device) -> dict:
    """Over ``mats``: the mean ``||X - U V^T||_F / sqrt(rank)``, the range of ``X``'s singular
    values, and the mean gradient-weighted error ``sqrt(sum_i w_i (u_i^T X v_i - 1)^2)``,
    ``w_i = s_i / sum(s)``."""
    errors, lows, highs, weighted = [], [], [], []
    for G in mats:
        U, S, Vh = torch.linalg.svd(G, full_matrices=False)
        rank = int(torch.linalg.matrix_rank(G))
        U, S, Vh = U[:, :rank], S[:rank], Vh[:rank]
        X = linalg.msign_newton_schulz(G.to(device=device, dtype=dtype), steps, schedule)
        X = X.to(device="cpu", dtype=torch.float64)
        errors.append(float(torch.linalg.matrix_norm(X - U @ Vh)) / math.sqrt(rank))
        s = torch.linalg.svdvals(X)[:rank]
        lows.append(float(s.min()))
        highs.append(float(s.max()))
        along = torch.diagonal(U.T @ X @ Vh.T)  # X's singular values, on G's singular vectors
        weighted.append(math.sqrt(float((S / S.sum() * (along - 1) ** 2).sum())))
    return {"error": statistics.fmean(errors), "sv_min": min(lows), "sv_max": max(highs),
            "weighted": statistics.fmean(weighted)}


def accuracy(data: dict[str, list[torch.Tensor]], dtype: torch.dtype, device: torch.device) -> list[dict]:
    rows = []
    for name, mats in data.items():
        for schedule in SCHEDULES:
            for steps in STEPS:
                rows.append({"source": name, "schedule": schedule, "steps": steps,
                             **polar_errors(mats, schedule, steps, dtype, device)})
    return rows


# ----------------------------------------------------------------------------- time
def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timing(shapes, repeats: int, dtype: torch.dtype, device: torch.device) -> list[dict]:
    """Median time per matrix of every (schedule, steps), interleaved, as a ratio to BASELINE."""
    configs = [(s, k) for s in SCHEDULES for k in STEPS]
    rows = []
    for shape in shapes:
        g = torch.Generator().manual_seed(sum(shape))
        M = torch.randn(*shape, generator=g).to(device=device, dtype=dtype)
        times = {c: [] for c in configs}
        for c in configs:  # warm-up: one untimed call each
            linalg.msign_newton_schulz(M, c[1], c[0])
        _sync(device)
        for r in range(repeats):
            order = configs[r % len(configs):] + configs[:r % len(configs)]
            for schedule, steps in order:
                _sync(device)
                t0 = time.perf_counter()
                linalg.msign_newton_schulz(M, steps, schedule)
                _sync(device)
                times[(schedule, steps)].append(time.perf_counter() - t0)
        base = statistics.median(times[BASELINE])
        for (schedule, steps), ts in times.items():
            med = statistics.median(ts)
            rows.append({"shape": list(shape), "schedule": schedule, "steps": steps, "ms": med * 1e3,
                         "ratio": med / base})
    return rows


# ----------------------------------------------------------------------------- report
def format_spectra(rows: list[dict]) -> str:
    lines = [f"{'source':<12} {'matrices':>8}  {'shapes':<28} {'median cond':>11}  "
             f"{'normalized s / ||G||_F':>24}  {'share < 1e-3':>12}"]
    for r in rows:
        shapes = ", ".join("x".join(map(str, s)) for s in r["shapes"])
        lines.append(f"{r['source']:<12} {r['matrices']:>8}  {shapes:<28.28} {r['median_condition']:>11.3g}  "
                     f"[{r['smallest_normalized']:9.2e}, {r['largest_normalized']:9.2e}]  {r['below_1e-3']:>12.1%}")
    return "\n".join(lines)


def format_accuracy(rows: list[dict]) -> str:
    by = {(r["source"], r["schedule"], r["steps"]): r for r in rows}
    names = list(dict.fromkeys(r["source"] for r in rows))
    head = f"{'source':<12} {'schedule':<14}" + "".join(f"{'k = ' + str(k):>22}" for k in STEPS)
    lines = [head, f"{'':<27}" + "".join(f"{'error [sv min, max]':>22}" for _ in STEPS)]
    for name in names:
        for schedule in SCHEDULES:
            cells = []
            for k in STEPS:
                r = by[(name, schedule, k)]
                cells.append(f"{r['error']:>8.3f} [{r['sv_min']:.2f}, {r['sv_max']:.2f}]")
            lines.append(f"{name:<12} {schedule:<14}" + "".join(f"{c:>22}" for c in cells))
    return "\n".join(lines)


def format_weighted(rows: list[dict]) -> str:
    by = {(r["source"], r["schedule"], r["steps"]): r for r in rows}
    names = list(dict.fromkeys(r["source"] for r in rows))
    lines = [f"{'source':<12} {'schedule':<14}" + "".join(f"{'k = ' + str(k):>8}" for k in STEPS)]
    for name in names:
        for schedule in SCHEDULES:
            lines.append(f"{name:<12} {schedule:<14}" + "".join(f"{by[(name, schedule, k)]['weighted']:>8.3f}"
                                                             for k in STEPS))
    return "\n".join(lines)


def format_timing(rows: list[dict]) -> str:
    by = {(tuple(r["shape"]), r["schedule"], r["steps"]): r for r in rows}
    shapes = list(dict.fromkeys(tuple(r["shape"]) for r in rows))
    lines = [f"{'shape':<10} {'schedule':<14}" + "".join(f"{'k = ' + str(k):>9}" for k in STEPS)
             + f"   ({BASELINE[0]} k = {BASELINE[1]} in ms)"]
    for shape in shapes:
        for schedule in SCHEDULES:
            cells = "".join(f"{by[(shape, schedule, k)]['ratio']:>9.2f}" for k in STEPS)
            base = by[(shape, *BASELINE)]["ms"] if schedule == SCHEDULES[0] else None
            tail = f"   {base:.2f}" if base is not None else ""
            lines.append(f"{'x'.join(map(str, shape)):<10} {schedule:<14}{cells}{tail}")
    return "\n".join(lines)


def one_fewer(rows: list[dict]) -> list[dict]:
    """Polar Express at k - 1 iterations against Jordan's quintic at k, per source, on both errors."""
    by = {(r["source"], r["schedule"], r["steps"]): r for r in rows}
    out = []
    for name in dict.fromkeys(r["source"] for r in rows):
        for k in STEPS[1:]:
            pe, jo = by[(name, "polar_express", k - 1)], by[(name, "jordan", k)]
            out.append({"source": name, "polar_express_steps": k - 1, "jordan_steps": k,
                        **{f"{m}_{key}": r[m] for m in ("error", "weighted") for key, r in
                           (("polar_express", pe), ("jordan", jo))}})
    return out


def format_one_fewer(rows: list[dict]) -> str:
    lines = [f"{'source':<12} {'PE@k-1 vs Jordan@k':<20} {'polar error':>24} {'weighted error':>24}"]
    for r in rows:
        cells = []
        for m in ("error", "weighted"):
            pe, jo = r[f"{m}_polar_express"], r[f"{m}_jordan"]
            cells.append(f"{pe:.3f} vs {jo:.3f} {'PE' if pe <= jo else 'Jordan':>6}")
        pair = f"PE@{r['polar_express_steps']} vs Jordan@{r['jordan_steps']}"
        lines.append(f"{r['source']:<12} {pair:<20} {cells[0]:>24} {cells[1]:>24}")
    return "\n".join(lines)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="tiny sources and shapes (a smoke test)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default=None, choices=["float32", "bfloat16", "float64"],
                    help="compute dtype (default float32; bfloat16 is for CUDA: a CPU has no bf16 units)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=None, help="timed rounds (default 15, quick 3)")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--no-timing", action="store_true")
    args = ap.parse_args(argv)

    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype or "float32")
    repeats = args.repeats or (3 if args.quick else 15)

    data = sources(args.quick)
    spectra = [spectrum_row(name, mats) for name, mats in data.items()]
    acc = accuracy(data, dtype, device)
    times = [] if args.no_timing else timing(QUICK_SHAPES if args.quick else SHAPES, repeats, dtype, device)
    result = {"device": str(device), "dtype": str(dtype).removeprefix("torch."), "threads": args.threads,
              "torch": torch.__version__, "spectra": spectra, "accuracy": acc, "one_fewer": one_fewer(acc),
              "timing": times}

    print(f"msign by Newton-Schulz: {result['device']}, {result['dtype']}, {args.threads} thread(s), "
          f"torch {torch.__version__}\n")
    print("Sources (normalized singular values: what the iteration starts from)")
    print(format_spectra(spectra), "\n")
    print("Polar error ||X - U V^T||_F / sqrt(rank) (mean over a source's matrices) "
          "and the range of X's singular values")
    print(format_accuracy(acc), "\n")
    print("Gradient-weighted error sqrt(sum_i w_i (p_i - 1)^2), w_i = s_i / sum(s), p_i = u_i^T X v_i "
          "(mean over a source's matrices)")
    print(format_weighted(acc), "\n")
    print("Polar Express at k - 1 iterations vs Jordan's quintic at k (the smaller error wins)")
    print(format_one_fewer(result["one_fewer"]))
    if times:
        print(f"\nTime per matrix: median of {repeats} interleaved rounds, ratio to "
              f"{BASELINE[0]} at k = {BASELINE[1]} (same run)")
        print(format_timing(times))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
