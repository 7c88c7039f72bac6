r"""The vectorized training loop: a whole learning-rate (and seed) sweep as one computation.

Where the time goes (Figure 4's size, 40 layers x 30 lanes, one CPU thread): the
``3 x layers - 1`` batched ``32 x 32`` products of the forward and backward pass and the
weight gradients take 0.10-0.15 ms per lane-step (MKL's batched products run at 55-75
GFLOP/s), and the lane rules add Newton--Schulz (Muon: 15 products per layer) or ``eigh``
roots every 10 steps (Shampoo, Iso, IsoAdam: ~42 us per matrix, what one learning rate at
a time pays per matrix too).  With two threads the products and the roots use both cores.
The loop is kept lean around them: preallocated per-step buffers and per-layer views,
products written with ``out=``, per-lane bookkeeping in NumPy, the matmul-heavy rules in
cache-sized chunks of layers, and glibc told to keep freed memory for reuse
(:func:`_keep_freed_memory`).
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from typing import Optional, Sequence, Union

import numpy as np
import torch
from torch import Tensor

from ..problems import LinearProblem
from ..results import Sweep
from .progress import Progress
from .rules_lanes import make_rule
from .schedules import check_schedule, multiplier

__all__ = ["sweep"]

_CHUNK = 256  # steps of data generated and compressed at once


@contextlib.contextmanager
def _threads(n: Optional[int]):
    if n is None:
        yield
        return
    old = torch.get_num_threads()
    torch.set_num_threads(int(n))
    try:
        yield
    finally:
        torch.set_num_threads(old)


class _Buffers:
    """Scratch space of one step for ``N`` lanes: every layer's input (``acts``, ``k + 1``
    of them), output gradient (``grads``) and weight gradient (``g``); reallocated only
    when lanes are dropped."""

    def __init__(self, k: int, N: int, r: int, n: int, dtype):
        self.acts = torch.empty(k + 1, N, r, n, dtype=dtype)
        self.grads = torch.empty(k, N, r, n, dtype=dtype)
        self.g = torch.empty(k, N, n, n, dtype=dtype)
        # per-layer views made once (not at every step of the layer loops)
        self.A = self.acts.unbind(0)
        self.G = self.grads.unbind(0)
        # weight.grad = G_i^T X_i of every layer and lane as one batched product
        self.flat = (self.grads.view(k * N, r, n).mT, self.acts[:k].view(k * N, r, n), self.g.view(k * N, n, n))


def _layer_views(W: Tensor):
    """``(W_i, W_i^T)`` views of every layer (valid while ``W`` is updated in place)."""
    Ws = W.unbind(0)
    return Ws, [w.mT for w in Ws]


_MALLOC_SET = False


def _keep_freed_memory() -> None:
    """Ask glibc's ``malloc`` to keep freed memory for reuse instead of returning it to the OS.

    A sweep's temporaries are megabytes each (``layers x lanes`` matrices) and are
    allocated and freed several times per step.  With glibc's defaults such blocks are
    ``mmap``-ed, or the top of the heap is trimmed after they are freed, and every reuse
    page-faults the memory back in.  glibc's adaptive threshold avoids this in some runs
    and not in others (measured at Figure 4's size, 30 live lanes, Adam: ~3800 minor
    faults per step and 0.48 ms per lane-step, against none and 0.25 ms with this setting;
    in other runs the two agree within noise).  Raising ``M_MMAP_THRESHOLD`` to 64 MiB and
    ``M_TRIM_THRESHOLD`` to 256 MiB keeps such blocks in the heap, dependably (the same
    effect as running under jemalloc/tcmalloc, which PyTorch recommends on CPUs); the
    process keeps up to 256 MiB of freed memory for reuse.  A library should not change a
    process-wide allocator setting behind its user's back, so this is opt-in:
    ``ISOLAB_MALLOPT=1`` in the environment (``benchmarks/bench_engine.py`` sets it for
    both of the runs it compares).  Done once per process, glibc only.
    """
    global _MALLOC_SET
    if _MALLOC_SET:
        return
    _MALLOC_SET = True
    if os.environ.get("ISOLAB_MALLOPT", "0") not in ("1", "true", "True"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 64 << 20)  # M_MMAP_THRESHOLD (fixed: turns off glibc's dynamic threshold)
        libc.mallopt(-1, 256 << 20)  # M_TRIM_THRESHOLD
    except (OSError, AttributeError):  # not glibc (macOS, Windows, musl): nothing to do
        pass


def _expected_loss(W: Tensor, M: Tensor, sigma: Tensor, n: int) -> np.ndarray:
    """``(lanes,)`` exact expected loss ``tr((P - M)^T Sigma (P - M)) / n`` of every live lane,
    in float64: ``W`` is ``(k, N, out, in)`` (torch's layout, ``W_i^T``), so the row-convention
    product ``P = W_1 ... W_k`` is ``(W_k^T ... W_1^T)^T``; ``M`` is ``(N, n, n)``."""
    Q = W[-1].double()
    for i in range(W.shape[0] - 2, -1, -1):
        Q = torch.bmm(Q, W[i].double())
    E = Q.mT - M
    return ((E * (sigma @ E)).sum(dim=(-2, -1)) / n).numpy()


def _lane_ok(x: Tensor) -> Tensor:
    """``(lanes,)`` bool: lane ``j`` (dim 1 of ``x``) has no NaN/Inf entry.

    Tested on the per-lane sum (one fast pass): any NaN or Inf makes the sum non-finite.
    A lane whose finite entries are so large that their sum overflows (``~1e38`` in
    float32) is also reported, which is the right call for a divergence test.
    """
    dims = tuple(d for d in range(x.ndim) if d != 1)
    return torch.isfinite(x.sum(dim=dims))


class _Data:
    """Per-seed compressed batches, generated in chunks of steps."""

    def __init__(self, problem: LinearProblem, seeds, dtype):
        self.problem, self.seeds, self.dtype = problem, list(seeds), dtype
        self.start = self.stop = 0
        self.X = self.T = None

    def get(self, t: int, steps: int):
        if not (self.start <= t < self.stop):
            stop = min(t + _CHUNK, steps + 1)
            Xs, Ts = zip(*(self.problem.compressed(t, stop, s) for s in self.seeds))
            self.X = torch.stack(Xs, 1).to(self.dtype)  # (chunk, S, r, n)
            self.T = torch.stack(Ts, 1).to(self.dtype)
            self.start, self.stop = t, stop
        return self.X[t - self.start], self.T[t - self.start]


def sweep(
    problem: LinearProblem,
    optimizer: str,
    lrs: Union[Sequence[float], np.ndarray],
    steps: int,
    *,
    seeds: Sequence[int] = (0,),
    hyper: Optional[dict] = None,
    threshold: Optional[float] = None,
    relative_threshold: bool = False,
    retire_at_threshold: bool = False,
    max_loss: Union[str, float, None] = "auto",
    record_norms: bool = True,
    keep_weights: bool = False,
    dtype: torch.dtype = torch.float32,
    num_threads: Optional[int] = None,
    progress="auto",
    label: Optional[str] = None,
    schedule: Optional[dict] = None,
    schedule_steps: Optional[int] = None,
    expected_loss_from: Optional[int] = None,
    threshold_on: str = "loss",
    record_steps: bool = False,
) -> Sweep:
    r"""Train ``problem`` with ``optimizer`` at every learning rate in ``lrs`` (and seed in
    ``seeds``) for ``steps`` iterations, as one batched computation.

    Lanes: ``len(seeds) x len(lrs)``; lanes of one seed share the initial weights and every
    batch, so they differ only by the learning rate.  Weights are ``(layers, lanes, n, n)``
    (stored in torch's ``(out, in)`` layout, as ``nn.Linear`` and the optimizers see them);
    each step runs the forward and backward pass of the deep linear network explicitly with
    batched matmuls on the problem's exactly compressed batch
    (:meth:`isolab.book.problems.LinearProblem.compressed`), which yields every layer's input
    ``X_i`` and output gradient ``G_i``, hence ``W_i.grad = X_i^T G_i`` and Iso's
    covariances; the update is the optimizer's lane rule
    (:mod:`isolab.book.engine.rules_lanes`), the same functions as :mod:`isolab.optim`.

    Args:
        optimizer: ``"sgd"``, ``"signsgd"``, ``"adam"``, ``"muon"``, ``"shampoo"``,
            ``"iso"``, ``"isoadam"``, ``"soap"``, ``"shampoo_graft"`` or ``"kfac"``.
        lrs: learning rates (``>= 0``).
        steps: iterations; the loss is recorded before each and after the last
            (``steps + 1`` values, index = number of updates done).
        hyper: hyperparameters other than ``lr`` (defaults: the optimizers',
            :data:`isolab.book.engine.DEFAULTS`).
        threshold: loss level for "iterations to threshold" (``hit_at``: the first step
            index with ``loss <= threshold``); ``relative_threshold=True`` reads it as a
            fraction of each lane's initial loss.
        retire_at_threshold: stop computing a lane once it reaches the threshold (its
            later losses are NaN): fast "iterations to convergence" sweeps.  The run
            ends when no lane is left.
        max_loss: divergence limit: a lane whose loss is non-finite or above it, or whose
            gradient or statistics are non-finite, is recorded as diverged at that step
            and dropped from the batch (the others continue unaffected; no NaN reaches
            any computation of another lane).  ``"auto"``: ``1e6 x`` the lane's initial
            loss for mean-squared-error problems, non-finite only otherwise; ``None``:
            non-finite only.
        record_norms: record every layer's Frobenius norm at every step.
        keep_weights: return every lane's final weights (row convention, the weights of
            the last step the lane was computed: at divergence or retirement, or after
            the last update).
        dtype: compute dtype (float32 default; float64 for tight comparisons).
        num_threads: ``torch.set_num_threads`` for the run (restored afterwards).
        progress: ``True``, ``False`` or ``"auto"`` (:class:`isolab.book.engine.Progress`).
        label: name of the sweep in a :class:`isolab.book.results.Results` (default:
            ``optimizer``).
        schedule: ``None`` (a constant rate) or a warmup-and-decay schedule
            (:mod:`isolab.book.engine.schedules`): update ``t`` uses ``lr * multiplier``.
        schedule_steps: the length the schedule spans (default ``steps``): a run of the first
            ``steps`` updates of a longer scheduled run (a reproduction of its prefix).
        expected_loss_from: record the exact expected loss
            (:meth:`isolab.book.problems.LinearProblem.expected_loss`, over the input
            distribution instead of the batch) at every step from this one on
            (``Sweep.expected_loss``; NaN before it and after a lane stops); ``None``: never.
        threshold_on: ``"loss"`` (the batch loss) or ``"expected_loss"`` (needs
            ``expected_loss_from=0``): which loss ``threshold`` and ``hit_at`` refer to.
        record_steps: record the Frobenius norm of every layer's update,
            ``||W_{t+1} - W_t||_F`` (``Sweep.step_norm``, ``(seeds, lrs, steps, layers)``).

    Returns:
        A :class:`isolab.book.results.Sweep` (losses, weight norms, divergence and threshold
        steps as NumPy arrays labelled by seed, learning rate and step).
    """
    rule = make_rule(optimizer, hyper)
    lrs = np.asarray(lrs, dtype=np.float64).reshape(-1)
    if lrs.size == 0 or not np.all(np.isfinite(lrs)) or np.any(lrs < 0):
        raise ValueError(f"lrs must be a non-empty sequence of finite numbers >= 0, got {lrs!r}")
    seeds = [int(s) for s in seeds]
    if not seeds:
        raise ValueError("seeds must not be empty")
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 0:
        raise ValueError(f"steps must be an int >= 0, got {steps!r}")
    steps = int(steps)
    if max_loss == "auto":
        max_factor = 1e6 if problem.loss_kind == "mse" else None
        max_abs = None
    elif max_loss is None:
        max_factor = max_abs = None
    else:
        max_factor, max_abs = None, float(max_loss)
    if retire_at_threshold and threshold is None:
        raise ValueError("retire_at_threshold needs a threshold")
    schedule = check_schedule(schedule)
    horizon = steps if schedule_steps is None else int(schedule_steps)
    if horizon < steps:
        raise ValueError(f"schedule_steps ({schedule_steps}) must be at least steps ({steps})")
    if expected_loss_from is not None:
        if isinstance(expected_loss_from, bool) or not isinstance(expected_loss_from, (int, np.integer)) \
                or not 0 <= expected_loss_from <= steps:
            raise ValueError(f"expected_loss_from must be a step in [0, {steps}] or None, got {expected_loss_from!r}")
        if not problem.has_expected_loss:
            raise ValueError(f"{type(problem).__name__} has no expected loss (expected_loss_from={expected_loss_from})")
    if threshold_on not in ("loss", "expected_loss"):
        raise ValueError(f"threshold_on must be 'loss' or 'expected_loss', got {threshold_on!r}")
    if threshold_on == "expected_loss" and expected_loss_from != 0:
        raise ValueError("threshold_on='expected_loss' needs expected_loss_from=0 (the loss of every step)")

    S, L = len(seeds), lrs.size
    N0 = S * L
    k, n = problem.depth, problem.n
    b = problem.batch_size
    rule.batch = b
    rule.check_problem(problem)

    _keep_freed_memory()
    with _threads(num_threads), torch.no_grad():
        t0 = time.perf_counter()
        W0 = torch.stack([problem.initial_weights(s) for s in seeds], 1).to(dtype)  # (k, S, n, n)
        seed_of = torch.arange(S).repeat_interleave(L)  # lane -> seed index
        W = W0[:, seed_of].mT.contiguous()  # (k, N, out, in): torch's layout, W_i^T
        lr = torch.as_tensor(np.tile(lrs, S), dtype=dtype).reshape(1, N0, 1, 1)
        state = rule.init_state(W)
        data = _Data(problem, seeds, dtype)

        # per-lane bookkeeping in NumPy (a handful of tiny arrays per step: far cheaper than torch ops)
        lanes = np.arange(N0)  # global ids of the live lanes
        loss_rec = np.full((steps + 1, N0), np.nan)
        norm_rec = np.full((steps + 1, N0, k), np.nan) if record_norms else None
        step_rec = np.full((steps, N0, k), np.nan) if record_steps else None
        diverged_at = np.full(N0, -1, dtype=np.int64)
        hit_at = np.full(N0, -1, dtype=np.int64)
        thr = np.full(N0, np.nan if threshold is None else float(threshold))
        limit = np.full(N0, np.inf if max_abs is None else max_abs)

        final_W = torch.full((N0, k, n, n), math.nan, dtype=dtype) if keep_weights else None
        expected_rec = None
        if expected_loss_from is not None:
            expected_rec = np.full((steps + 1, N0), np.nan)
            targets = torch.stack([problem.target_map(s) for s in seeds])  # (S, n, n) float64, T = X M
            sigma = problem.input_covariance()
        bar = Progress(steps, label=optimizer, enabled=progress)
        r = problem.rows
        buf = _Buffers(k, N0, r, n, dtype)
        Ws, WT = _layer_views(W)
        last_t = 0
        for t in range(steps + 1):
            last_t = t
            N = lanes.size
            Xd, Td = data.get(t, steps)
            A, Gs = buf.A, buf.G
            if S == 1:  # every lane sees the same batch: broadcast it instead of copying it
                A[0].copy_(Xd[0].expand(N, r, n))
                Tl = Td[0]
            else:
                sidx = seed_of[torch.from_numpy(lanes)]
                A[0].copy_(Xd[sidx])
                Tl = Td[sidx]
            for i in range(k):
                torch.bmm(A[i], WT[i], out=A[i + 1])
            loss = problem.loss(A[k], Tl).double().numpy()
            loss_rec[t, lanes] = loss
            if expected_rec is not None and t >= expected_loss_from:
                expected_rec[t, lanes] = _expected_loss(W, targets[seed_of[torch.from_numpy(lanes)]], sigma, n)
            if norm_rec is not None:
                norm_rec[t, lanes] = torch.linalg.matrix_norm(W).T.numpy()
            watched = loss if threshold_on == "loss" else expected_rec[t, lanes]
            if t == 0:
                if max_factor is not None:
                    limit[lanes] = max_factor * np.abs(loss)
                if relative_threshold and threshold is not None:
                    thr[lanes] = threshold * watched
            with np.errstate(invalid="ignore"):
                bad = ~np.isfinite(loss) | (loss > limit[lanes])
                drop = bad
                if threshold is not None:
                    hit = (watched <= thr[lanes]) & (hit_at[lanes] < 0) & ~bad
                    hit_at[lanes[hit]] = t
                    if retire_at_threshold:
                        drop = bad | (hit_at[lanes] >= 0)
            if t == steps:
                diverged_at[lanes[bad]] = t
                break
            Gs[k - 1].copy_(problem.output_grad(A[k], Tl))
            for i in range(k - 1, 0, -1):
                torch.bmm(Gs[i], Ws[i], out=Gs[i - 1])
            torch.bmm(*buf.flat[:2], out=buf.flat[2])  # g = weight.grad = G_i^T X_i
            g = buf.g
            stats = rule.statistics(buf.acts[:k], buf.grads, b, state)
            ok = _lane_ok(g)
            stats_ok = rule.statistics_ok(stats)
            if stats_ok is not None:
                ok &= stats_ok
            ok = ok.numpy()
            bad = bad | ~ok
            drop = drop | ~ok
            if drop.any():
                diverged_at[lanes[bad]] = t
                keep = torch.from_numpy(np.flatnonzero(~drop))
                if final_W is not None:
                    final_W[lanes[drop]] = W[:, torch.from_numpy(drop)].transpose(0, 1).mT
                lanes = lanes[~drop]
                if lanes.size == 0:
                    break
                W = W.index_select(1, keep)
                Ws, WT = _layer_views(W)
                g = g.index_select(1, keep)
                lr = lr.index_select(1, keep)
                stats = {key: v.index_select(1, keep) for key, v in stats.items()}
                state = {key: v.index_select(1, keep) for key, v in state.items()}
                buf = _Buffers(k, lanes.size, r, n, dtype)
            before = W.clone() if step_rec is not None else None
            rule.apply(W, g, stats, lr if schedule is None else lr * multiplier(schedule, t, horizon), t + 1, state)
            if step_rec is not None:
                step_rec[t, lanes] = torch.linalg.matrix_norm(W - before).T.double().numpy()
            bar.update(t + 1, f"{lanes.size}/{N0} lanes")
        if final_W is not None and lanes.size:
            final_W[lanes] = W.transpose(0, 1).mT
        bar.close(last_t)
        seconds = time.perf_counter() - t0

    def per_lane(x):
        return x.reshape(S, L, *x.shape[1:])

    info = {
        "steps": steps, "steps_run": last_t, "dtype": str(dtype).replace("torch.", ""), "seconds": seconds,
        "max_loss": max_loss if isinstance(max_loss, (str, type(None))) else float(max_loss),
        "retire_at_threshold": bool(retire_at_threshold), "relative_threshold": bool(relative_threshold),
        "threshold_value": None if threshold is None else float(threshold),
        "roots": dict(rule.root_stats), "num_threads": torch.get_num_threads() if num_threads is None else num_threads,
        "schedule": schedule, "schedule_steps": horizon, "expected_loss_from": None if expected_loss_from is None else int(expected_loss_from),
        "threshold_on": threshold_on,
    }
    return Sweep(
        optimizer=optimizer,
        label=label or optimizer,
        lrs=lrs.copy(),
        seeds=np.asarray(seeds, dtype=np.int64),
        loss=per_lane(np.ascontiguousarray(loss_rec.T)),
        weight_norm=None if norm_rec is None else per_lane(np.ascontiguousarray(norm_rec.transpose(1, 0, 2))),
        diverged_at=per_lane(diverged_at),
        hit_at=per_lane(hit_at),
        weights=None if final_W is None else per_lane(final_W.double().numpy()),
        threshold=per_lane(thr),
        hyper=dict(rule.h),
        problem=problem.describe(),
        info=info,
        expected_loss=None if expected_rec is None else per_lane(np.ascontiguousarray(expected_rec.T)),
        step_norm=None if step_rec is None else per_lane(np.ascontiguousarray(step_rec.transpose(1, 0, 2))),
    )
