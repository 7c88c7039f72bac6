r"""Multi-process helpers: start local process groups, average symmetric statistics, share roots.

What the optimizers need under ``torch.distributed`` (data parallelism, e.g.
``torch.nn.parallel.DistributedDataParallel``), and a launcher for tests and benchmarks:

- :func:`launch`: run ``fn(rank, world_size, *args)`` in ``world_size`` fresh local processes
  (``spawn``), each inside an initialized process group (``gloo`` by default, rendezvous
  through a file in a temporary folder), and return the ranks' results in rank order. A
  failing rank becomes a ``RuntimeError`` in the parent that names the rank and carries the
  worker's exception type, message and traceback; a run that does not finish within
  ``timeout`` is killed. ``world_size=1`` also goes through a process group.
- :func:`all_reduce_symmetric`: sum (or average) a list of symmetric matrices across
  processes, sending only their upper triangles (``n(n+1)/2`` of ``n²`` entries), packed
  into flat buckets of at most ``bucket_bytes`` (one ``all_reduce`` per bucket). Every rank
  receives the same, exactly symmetric, result.
- :func:`reduce_symmetric_to_owners`: the same sum delivered only to each matrix's owner
  (one ``reduce`` per owning rank), for FSDP2 (:mod:`isolab.fsdp`), where only the owner of a
  matrix whitens it.
- :func:`assign_owners`: spread ``n × n`` matrix jobs (inverse roots) over the ranks so that
  their ``n³`` costs are balanced (longest job first, to the least-loaded rank).
- :func:`broadcast_from_owners`: each rank contributes the symmetric matrices it owns; every
  rank receives all of them (one ``all_gather`` of packed upper triangles), with a status
  code per matrix so that a failure on its owner becomes the *same* error on every rank.
- :func:`compute_on_owners`: the two together: each rank runs the jobs it owns, then all
  results (and failures) are shared.
- :func:`is_distributed`, :func:`active_group`: whether a process group with more than one
  process is there, and which group an optimizer option selects.

Exactness. Floating-point ``eigh`` and matrix products need not return bitwise symmetric
matrices; packing the upper triangle and mirroring it makes every rank, the owner included,
use the same symmetric matrix, so replicas stay bitwise identical.
"""

from __future__ import annotations

import os
import pickle
import queue as _queue
import shutil
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from datetime import timedelta

import torch
import torch.distributed as dist

__all__ = [
    "launch",
    "is_distributed",
    "active_group",
    "check_process_group",
    "pack_upper",
    "unpack_upper",
    "all_reduce_symmetric",
    "reduce_symmetric_to_owners",
    "assign_owners",
    "broadcast_from_owners",
    "compute_on_owners",
    "DEFAULT_BUCKET_BYTES",
]

#: Largest flat buffer (bytes) of one ``all_reduce`` in :func:`all_reduce_symmetric`.
DEFAULT_BUCKET_BYTES = 16 * 2**20


# ----------------------------------------------------------------------------- launcher
def _worker(rank, world_size, fn, args, init_method, backend, threads, timeout, results):
    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(threads)
    except RuntimeError:  # already set (possible if the module initialised it)
        pass
    joined = False
    try:
        dist.init_process_group(
            backend, init_method=init_method, rank=rank, world_size=world_size, timeout=timedelta(seconds=timeout)
        )
        joined = True
        payload = pickle.dumps(fn(rank, world_size, *args))
    except BaseException as e:  # noqa: BLE001 - everything goes back to the parent
        # report before leaving the group: leaving breaks the others' pending collectives,
        # and their (consequential) errors should arrive after this one
        results.put((rank, False, (type(e).__name__, str(e), traceback.format_exc())))
        if joined:
            try:
                dist.destroy_process_group()
            except Exception:  # noqa: BLE001 - the group may be broken by the failure
                pass
        return
    try:
        dist.destroy_process_group()
    except BaseException as e:  # noqa: BLE001
        results.put((rank, False, (type(e).__name__, str(e), traceback.format_exc())))
        return
    results.put((rank, True, payload))


def _check_launchable(fn, world_size, threads, timeout):
    if not callable(fn):
        raise TypeError(f"launch: fn must be callable, got {type(fn).__name__}")
    qualname = getattr(fn, "__qualname__", "")
    if "<lambda>" in qualname or "<locals>" in qualname:
        raise ValueError(
            f"launch: fn ({qualname}) must be a module-level function: the worker processes are "
            "started with 'spawn' and import it by name"
        )
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"launch: world_size must be a positive int, got {world_size!r}")
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"launch: threads must be a positive int, got {threads!r}")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"launch: timeout must be a positive number of seconds, got {timeout!r}")


def launch(
    fn: Callable,
    world_size: int,
    *args,
    backend: str = "gloo",
    threads: int = 1,
    timeout: float = 120.0,
) -> list:
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` local processes; return their results.

    Each process (``torch.multiprocessing`` ``spawn`` context) sets
    ``torch.set_num_threads(threads)``, joins a process group (``backend``, rendezvous by a
    ``FileStore`` in a fresh temporary folder, collective timeout ``timeout``), calls ``fn``,
    and destroys the group. ``fn`` must be importable by name (module level; in a script,
    guard the call with ``if __name__ == "__main__":``); ``args`` and the return values must
    be picklable. The results come back in rank order.

    Raises ``RuntimeError`` if a rank raises (the message names the rank(s) and carries the
    workers' exception types, messages and tracebacks; ranks still running a few seconds
    after the first failure are terminated), if a process dies without a result, or if the
    whole run takes longer than ``timeout`` seconds (all processes are killed). It never
    waits longer than ``timeout`` plus a second or two for clean-up.
    """
    _check_launchable(fn, world_size, threads, timeout)
    ctx = torch.multiprocessing.get_context("spawn")
    results = ctx.Queue()
    folder = tempfile.mkdtemp(prefix="isolab-launch-")
    init_method = "file://" + os.path.join(folder, "store")
    procs = [
        ctx.Process(
            target=_worker,
            args=(rank, world_size, fn, args, init_method, backend, threads, timeout, results),
            name=f"isolab-rank{rank}",
        )
        for rank in range(world_size)
    ]
    values: dict[int, object] = {}
    errors: dict[int, tuple[str, str, str]] = {}
    first_failure: list[int] = []
    dead_polls: dict[int, int] = {}
    timed_out = False
    try:
        for p in procs:
            p.start()
        deadline = time.monotonic() + timeout
        grace_end = None
        while len(values) + len(errors) < world_size:
            now = time.monotonic()
            end = deadline if grace_end is None else min(deadline, grace_end)
            if now >= end:
                timed_out = grace_end is None or deadline <= grace_end
                break
            try:
                rank, ok, payload = results.get(timeout=min(0.1, end - now))
            except _queue.Empty:
                for r, p in enumerate(procs):
                    if r in values or r in errors or p.exitcode is None:
                        continue
                    dead_polls[r] = dead_polls.get(r, 0) + 1
                    if dead_polls[r] >= 3:  # exited, and nothing arrived after it did
                        first_failure.append(r)
                        errors[r] = (
                            "ProcessExited",
                            f"the process exited with code {p.exitcode} without reporting a result",
                            "",
                        )
                if errors and grace_end is None:
                    grace_end = time.monotonic() + min(5.0, timeout)
                continue
            if ok:
                values[rank] = pickle.loads(payload)
            else:
                errors[rank] = payload
                first_failure.append(rank)
                if grace_end is None:
                    # the others may be blocked in a collective with the failed rank: give them a
                    # moment to fail too (gloo notices the closed connection), then stop them
                    grace_end = time.monotonic() + min(5.0, timeout)
    finally:
        unfinished = [r for r, p in enumerate(procs) if p.is_alive()]
        for p in procs:
            if p.is_alive():
                p.terminate()
        for p in procs:
            p.join(timeout=2.0)
            if p.is_alive():
                p.kill()
                p.join(timeout=2.0)
        results.close()
        results.join_thread()
        shutil.rmtree(folder, ignore_errors=True)
    name = getattr(fn, "__qualname__", repr(fn))
    head = f"launch({name}, world_size={world_size})"
    stopped = [r for r in range(world_size) if r not in values and r not in errors]
    if errors:
        failed = sorted(errors)
        lines = [f"{head}: rank{'s' if len(failed) > 1 else ''} {', '.join(map(str, failed))} failed"]
        if len(failed) > 1:
            lines[0] += f" (first reported: rank {first_failure[0]})"
        for r in failed:
            kind, msg, _ = errors[r]
            lines.append(f"  rank {r}: {kind}: {msg}")
        if stopped:
            lines.append(f"  rank(s) {stopped} had not finished and were terminated")
        for r in failed:
            tb = errors[r][2]
            if tb:
                lines.append(f"--- traceback of rank {r} ---\n{tb.rstrip()}")
        raise RuntimeError("\n".join(lines))
    if timed_out or stopped:
        raise RuntimeError(
            f"{head}: timed out after {timeout:g} s; rank(s) {stopped or unfinished} had not finished "
            "and were killed (a collective waiting for a rank that never joined it?)"
        )
    return [values[r] for r in range(world_size)]


# ----------------------------------------------------------------------------- groups
def is_distributed(group=None) -> bool:
    """True when ``torch.distributed`` is initialized and ``group`` (default: the world) has
    more than one process."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size(group) > 1


def check_process_group(group, name: str = "process_group"):
    """``None`` or a ``torch.distributed.ProcessGroup``; raise ``ValueError`` otherwise."""
    if group is None:
        return None
    if not dist.is_available() or not isinstance(group, dist.ProcessGroup):
        raise ValueError(f"{name} must be None or a torch.distributed.ProcessGroup, got {type(group).__name__}")
    return group


def active_group(sync: bool | None, group=None, who: str = "optimizer"):
    """The process group to communicate over, or ``None`` for no communication.

    ``sync=False``: ``None``. ``sync=None``: ``group`` (``None``: the default group) when
    ``torch.distributed`` is initialized and that group has more than one process, else
    ``None``. ``sync=True``: the group even with one process (same code path); raises
    ``RuntimeError`` when ``torch.distributed`` is not initialized.
    """
    if sync is False:
        return None
    if not (dist.is_available() and dist.is_initialized()):
        if sync:
            raise RuntimeError(
                f"{who}: sync_statistics=True but torch.distributed is not initialized; call "
                "torch.distributed.init_process_group first (or leave sync_statistics=None)"
            )
        return None
    if sync is None and dist.get_world_size(group) <= 1:
        return None
    return dist.group.WORLD if group is None else group


# ----------------------------------------------------------------------------- packing
_TRIU_CACHE: dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor]] = {}


def _triu(n: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    key = (n, str(device))
    idx = _TRIU_CACHE.get(key)
    if idx is None:
        iu = torch.triu_indices(n, n, device=device)
        idx = _TRIU_CACHE[key] = (iu[0], iu[1])
    return idx


def _numel(n: int, upper_triangle: bool) -> int:
    return n * (n + 1) // 2 if upper_triangle else n * n


def pack_upper(matrices: Sequence[torch.Tensor], upper_triangle: bool = True) -> torch.Tensor:
    """Concatenate the upper triangles (row by row, diagonal included) of square matrices
    into one flat tensor (or the whole matrices with ``upper_triangle=False``)."""
    parts = []
    for M in matrices:
        if M.ndim != 2 or M.shape[0] != M.shape[1]:
            raise ValueError(f"pack_upper: expected square matrices, got shape {tuple(M.shape)}")
        if upper_triangle:
            r, c = _triu(M.shape[0], M.device)
            parts.append(M[r, c])
        else:
            parts.append(M.reshape(-1))
    if not parts:
        return torch.empty(0)
    return torch.cat(parts)


def unpack_upper(flat: torch.Tensor, sizes: Sequence[int], upper_triangle: bool = True) -> list[torch.Tensor]:
    """Inverse of :func:`pack_upper`: symmetric ``n × n`` matrices (the upper triangle
    mirrored, exactly) from a flat tensor; ``sizes`` are the ``n``."""
    out, offset = [], 0
    for n in sizes:
        k = _numel(n, upper_triangle)
        v = flat[offset:offset + k]
        offset += k
        if upper_triangle:
            r, c = _triu(n, flat.device)
            M = flat.new_empty(n, n)
            M[r, c] = v
            M[c, r] = v
        else:
            M = v.reshape(n, n).clone()
        out.append(M)
    if offset != flat.numel():
        raise ValueError(f"unpack_upper: {flat.numel()} values for sizes {list(sizes)} (expected {offset})")
    return out


def _check_bucket_bytes(bucket_bytes):
    if isinstance(bucket_bytes, bool) or not isinstance(bucket_bytes, int) or bucket_bytes < 1:
        raise ValueError(f"bucket_bytes must be a positive int, got {bucket_bytes!r}")


def all_reduce_symmetric(
    tensors: Sequence[torch.Tensor],
    group=None,
    *,
    upper_triangle: bool = True,
    average: bool = False,
    bucket_bytes: int = DEFAULT_BUCKET_BYTES,
) -> list[torch.Tensor]:
    """Sum (``average=True``: average) symmetric matrices over the processes of ``group``.

    Only the upper triangles are sent (``upper_triangle=True``; the input's lower triangle
    is ignored and the result mirrors the reduced upper one, so it is exactly symmetric and
    identical on every rank). Matrices are packed in order into flat buckets of at most
    ``bucket_bytes`` (a larger matrix travels alone), one bucket per dtype and device, and
    each bucket is one ``all_reduce``. Returns new tensors; the inputs are not modified.
    Every rank must pass matrices of the same sizes and dtypes in the same order.
    """
    _check_bucket_bytes(bucket_bytes)
    tensors = list(tensors)
    out: list[torch.Tensor | None] = [None] * len(tensors)
    world = dist.get_world_size(group)
    buckets: list[list[int]] = []
    open_bucket: dict[tuple, tuple[list[int], int]] = {}
    for i, M in enumerate(tensors):
        if M.ndim != 2 or M.shape[0] != M.shape[1]:
            raise ValueError(f"all_reduce_symmetric: expected square matrices, got shape {tuple(M.shape)}")
        key = (M.dtype, str(M.device))
        size = _numel(M.shape[0], upper_triangle) * M.element_size()
        current = open_bucket.get(key)
        if current is not None and current[1] + size <= bucket_bytes:
            current[0].append(i)
            open_bucket[key] = (current[0], current[1] + size)
        else:
            members = [i]
            buckets.append(members)
            open_bucket[key] = (members, size)
    for members in buckets:
        flat = pack_upper([tensors[i] for i in members], upper_triangle)
        if not upper_triangle:
            flat = flat.clone()  # the reshape may alias an input
        dist.all_reduce(flat, group=group)
        if average:
            flat /= world
        for i, M in zip(members, unpack_upper(flat, [tensors[i].shape[0] for i in members], upper_triangle)):
            out[i] = M
    return out  # type: ignore[return-value]


def reduce_symmetric_to_owners(
    tensors: Sequence[torch.Tensor | None],
    owners: Sequence[int],
    sizes: Sequence[int],
    group=None,
    *,
    dtype: torch.dtype = torch.float32,
    device=None,
) -> list[torch.Tensor | None]:
    """Sum symmetric matrices over the processes of ``group``, each *onto its owner only*.

    ``tensors[i]`` (``sizes[i]`` square, on every rank; ``None`` reads as zeros) is summed
    over the ranks and delivered to rank ``owners[i]`` (a rank of ``group``); elsewhere the
    result is ``None``. The upper triangles of the matrices one rank owns travel in one flat
    buffer, one ``reduce`` per owning rank: half the bytes of an all-reduce, for work that only
    the owner does (FSDP2's owner scheme, :mod:`isolab.fsdp`). The result is exactly symmetric.
    """
    world = dist.get_world_size(group)
    rank = dist.get_rank(group)
    device = torch.device("cpu") if device is None else torch.device(device)
    out: list[torch.Tensor | None] = [None] * len(sizes)
    for d in range(world):
        members = [i for i, o in enumerate(owners) if o == d]
        if not members:
            continue
        mats = [tensors[i] if tensors[i] is not None else torch.zeros(sizes[i], sizes[i], dtype=dtype, device=device)
                for i in members]
        flat = pack_upper([M.to(dtype) for M in mats]).to(device)
        dst = dist.get_global_rank(group, d) if group is not None and group is not dist.group.WORLD else d
        dist.reduce(flat, dst=dst, group=group)
        if d == rank:
            for i, M in zip(members, unpack_upper(flat, [sizes[i] for i in members])):
                out[i] = M
    return out


# ----------------------------------------------------------------------------- owners
def assign_owners(sizes: Sequence[int], world_size: int) -> list[int]:
    """Owner rank of each ``n × n`` job (``n = sizes[i]``), balancing the ``n³`` costs.

    Longest-processing-time rule: jobs in decreasing cost (ties by index) each go to the
    rank with the least total cost so far (ties to the lowest rank). Deterministic, so every
    rank computes the same assignment. The largest load is at most ``4/3`` of the optimum.
    """
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive int, got {world_size!r}")
    costs = []
    for n in sizes:
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"sizes must be non-negative ints, got {n!r}")
        costs.append(n**3)
    load = [0] * world_size
    owners = [0] * len(costs)
    for i in sorted(range(len(costs)), key=lambda j: (-costs[j], j)):
        r = min(range(world_size), key=lambda k: (load[k], k))
        owners[i] = r
        load[r] += costs[i]
    return owners


def broadcast_from_owners(
    local: Sequence[torch.Tensor | None],
    owners: Sequence[int],
    sizes: Sequence[int],
    group=None,
    *,
    codes: Sequence[int] | None = None,
    dtype: torch.dtype = torch.float32,
    device=None,
    upper_triangle: bool = True,
) -> tuple[list[torch.Tensor | None], list[int]]:
    """Share symmetric matrices from their owners: every rank gets all of them.

    ``local[i]`` is read on the rank ``owners[i]`` (elsewhere it may be ``None``); its
    ``codes[i]`` (default 0) is a status the owner reports (0: ok; anything else: the owner
    failed, and ``local[i]`` may be ``None``). One ``all_gather`` of each rank's packed
    upper triangles (padded to the longest rank's share). Returns ``(matrices, codes)`` as
    seen by every rank: matrix ``i`` is ``None`` where its code is not 0.
    """
    world = dist.get_world_size(group)
    rank = dist.get_rank(group)
    n_items = len(sizes)
    if len(owners) != n_items or len(local) != n_items:
        raise ValueError("broadcast_from_owners: local, owners and sizes must have the same length")
    codes = [0] * n_items if codes is None else list(codes)
    device = torch.device("cpu") if device is None else torch.device(device)
    mine = [[i for i in range(n_items) if owners[i] == r] for r in range(world)]
    lengths = [sum(1 + _numel(sizes[i], upper_triangle) for i in mine[r]) for r in range(world)]
    longest = max(lengths) if lengths else 0
    buf = torch.zeros(longest, dtype=dtype, device=device)
    offset = 0
    for i in mine[rank]:
        k = _numel(sizes[i], upper_triangle)
        M = local[i]
        code = codes[i]
        if code == 0 and (M is None or tuple(M.shape) != (sizes[i], sizes[i])):
            code = -1  # the owner has nothing usable: report it rather than hang or guess
        buf[offset] = float(code)
        if code == 0:
            buf[offset + 1:offset + 1 + k] = pack_upper([M.to(dtype)], upper_triangle)
        offset += 1 + k
    gathered = [torch.empty_like(buf) for _ in range(world)]
    dist.all_gather(gathered, buf, group=group)
    result: list[torch.Tensor | None] = [None] * n_items
    out_codes = [0] * n_items
    for r in range(world):
        offset = 0
        for i in mine[r]:
            k = _numel(sizes[i], upper_triangle)
            out_codes[i] = int(gathered[r][offset].item())
            if out_codes[i] == 0:
                result[i] = unpack_upper(gathered[r][offset + 1:offset + 1 + k], [sizes[i]], upper_triangle)[0]
            offset += 1 + k
    return result, out_codes


def compute_on_owners(
    jobs: Sequence[Callable[[], torch.Tensor]],
    sizes: Sequence[int],
    group=None,
    *,
    dtype: torch.dtype = torch.float32,
    device=None,
    upper_triangle: bool = True,
) -> tuple[list[torch.Tensor | None], list[tuple[int, int, BaseException | None]]]:
    """Run each symmetric-matrix job on one rank (:func:`assign_owners`), share the results.

    ``jobs[i]()`` returns an ``n × n`` symmetric matrix (``n = sizes[i]``). Every rank
    passes the same jobs; each runs only those it owns, catching any ``Exception``. Returns
    ``(matrices, failures)``, identical on every rank except for the exception objects:
    ``failures`` lists ``(i, owner, exception)`` for the jobs that raised (the exception is
    the caught one on the owner, ``None`` on the other ranks); their matrices are ``None``.
    """
    world = dist.get_world_size(group)
    rank = dist.get_rank(group)
    owners = assign_owners(list(sizes), world)
    local: list[torch.Tensor | None] = [None] * len(jobs)
    codes = [0] * len(jobs)
    caught: dict[int, BaseException] = {}
    for i, job in enumerate(jobs):
        if owners[i] != rank:
            continue
        try:
            local[i] = job()
        except Exception as e:  # noqa: BLE001 - reported to every rank below
            codes[i] = 1
            caught[i] = e
    result, out_codes = broadcast_from_owners(
        local, owners, sizes, group, codes=codes, dtype=dtype, device=device, upper_triangle=upper_triangle
    )
    failures = [(i, owners[i], caught.get(i)) for i, c in enumerate(out_codes) if c != 0]
    return result, failures
