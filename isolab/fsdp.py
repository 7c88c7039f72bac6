r"""The optimizers on FSDP2 (``torch.distributed.fsdp.fully_shard``): whole-matrix work on one owner.

Under FSDP2 every parameter is a ``DTensor`` sharded on dimension 0 over a 1-D device mesh:
each process holds a block of rows of each weight and of its gradient (``torch.chunk``'s
blocks: ``ceil(rows / W)`` rows each, the last ones shorter or empty), and FSDP
reduce-scatters the averaged gradient into those blocks. Elementwise work (AdamW, momentum,
weight decay) needs nothing more and runs on each process's own rows. The matrix work does
not: Muon's ``msign``, Shampoo's ``L^{-1/4} g R^{-1/4}`` and Iso's ``P_G g P_X`` mix the rows
of the whole matrix, and their inverse roots are functions of whole statistics.

**The owner scheme** (this module). Every matrix gets an *owner* process, chosen once from the
matrices' shapes so that the owners' costs balance (:func:`assign_by_cost`, longest job first:
each process does about ``1/W`` of the matrix work); the owner keeps that matrix's
whole-matrix state (Iso's covariances and roots, Shampoo's ``L``, ``R`` and roots), the other
processes keep none of it. A step is

1. *pre*, on every process's rows: the elementwise part before the matrix function (Muon's and
   Iso's momentum, the division by the row count);
2. *gather* (:meth:`OwnerExchange.gather`): one ``all_to_all`` sends each process's rows of
   every matrix to that matrix's owner, which concatenates them into the full matrix;
3. *owner*: the matrix function (Newton–Schulz, the statistics' averages and roots, the
   two-sided product), each owner on its own matrices; a failure is caught;
4. *agree* (:func:`agree_on_failures`): one small ``all_reduce`` of status codes, so that a
   failure on one owner raises the same error on every process before anything changes;
5. *scatter* (:meth:`OwnerExchange.scatter`): one ``all_to_all`` returns each process its
   rows of every result;
6. *post*, on every process's rows: the elementwise part after it (Adam on IsoAdam's whitened
   gradient, Shampoo's momentum, weight decay, the step itself).

Communication per step: each process sends ``(W−1)/W`` of its gradient rows out and receives as
much back, about one extra gradient's worth of bytes in and out, plus, for Iso and IsoAdam on
statistics steps, the upper triangles of ``X_rᵀX_r`` and ``G_rᵀG_r`` *reduced to the owner*
(:func:`isolab.distributed.reduce_symmetric_to_owners`), not to every process as under DDP.
The alternative, every process gathering every full matrix (``DTensor.full_tensor()``), moves
``W`` times the bytes and repeats the matrix work ``W`` times; that is what torch's own
``torch.optim.Muon`` does on DTensors (measured: correct up to bfloat16 rounding, with an
all-reduce or all-gather in each Newton–Schulz iteration of every matrix on every process).

What is assumed, and checked where it can be: a 1-D mesh with ``Shard(0)`` placements
(``fully_shard``'s default; HSDP's 2-D mesh and tensor parallelism are refused with a message
naming the parameter); FSDP's default gradient averaging (``Σ_r ∇_r / W``, as DDP's), which the
statistics' ``GᵀG/W²`` scaling relies on; every process calls ``step()`` (as every FSDP step
requires).

The optimizer's ``state_dict()`` is per process under this scheme (each owner's matrices'
state, each process's rows of the elementwise state as ``DTensor`` shards): save one per rank
(``torch.save`` of ``state_dict()``, or of
``torch.distributed.checkpoint.state_dict.get_optimizer_state_dict``) and load it into the
same number of processes; loading another world size's raises ``ValueError``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist

__all__ = ["Sharding", "sharding_of", "local", "row_blocks", "assign_by_cost", "OwnerExchange", "agree_on_failures",
           "owner_step"]


def _dtensor_type():
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # torch without DTensor: nothing can be sharded
        return None
    return DTensor


def local(t):
    """The process's own block of a ``DTensor`` (a plain tensor sharing its storage, so in-place
    updates land in the sharded parameter or state), or ``t`` itself."""
    return t._local_tensor if hasattr(t, "_local_tensor") and hasattr(t, "placements") else t


@dataclass(frozen=True)
class Sharding:
    """Where the parameters live: the mesh's process group, its size and this process's rank."""

    group: object
    world: int
    rank: int

    def blocks(self, rows: int) -> list[int]:
        """Rows of each process's block of a dimension of ``rows`` rows (:func:`row_blocks`)."""
        return row_blocks(rows, self.world)


def sharding_of(params: Sequence[torch.Tensor], who: str = "optimizer") -> Sharding | None:
    """``None`` when no parameter is a ``DTensor``; else the common 1-D mesh of FSDP2.

    Raises ``ValueError`` naming the parameter when DTensor and plain parameters are mixed (wrap
    the root module with ``fully_shard`` too), when a placement is not ``Shard(0)`` on a 1-D
    mesh, or when the parameters live on different meshes.
    """
    DTensor = _dtensor_type()
    if DTensor is None:
        return None
    params = list(params)
    sharded = [isinstance(p, DTensor) for p in params]
    if not any(sharded):
        return None
    if not all(sharded):
        shape = tuple(params[sharded.index(False)].shape)
        raise ValueError(
            f"{who}: some parameters are DTensors (FSDP2) and some are not (a plain parameter of shape {shape}); "
            "apply fully_shard to the root module as well, so that every parameter is sharded"
        )
    from torch.distributed.tensor import Shard

    mesh = params[0].device_mesh
    for p in params:
        rows_sharded = len(p.placements) == 1 and type(p.placements[0]) is Shard and p.placements[0].dim == 0
        if p.device_mesh.ndim != 1 or not rows_sharded:
            raise ValueError(
                f"{who}: a parameter of shape {tuple(p.shape)} has placements {p.placements} on a {p.device_mesh.ndim}-D "
                "mesh; isolab's optimizers take FSDP2's layout, Shard(0) on a 1-D mesh (fully_shard without HSDP or "
                "tensor parallelism)"
            )
        if p.device_mesh != mesh:
            raise ValueError(f"{who}: the parameters live on different device meshes; use one mesh for the whole model")
    group = mesh.get_group()
    return Sharding(group=group, world=dist.get_world_size(group), rank=dist.get_rank(group))


def row_blocks(rows: int, world: int) -> list[int]:
    """Rows held by each of ``world`` processes under ``Shard(0)``: ``torch.chunk``'s blocks,
    ``ceil(rows / world)`` each, the remainder on the last non-empty block, then empty ones."""
    size = -(-rows // world) if rows else 0
    return [max(0, min(size, rows - r * size)) for r in range(world)]


def assign_by_cost(costs: Sequence[float], world: int) -> list[int]:
    """Owner of each job, balancing their costs: longest job first, to the least-loaded process
    (ties by index and rank, so every process computes the same assignment). The largest load
    is at most ``4/3`` of the best possible."""
    if isinstance(world, bool) or not isinstance(world, int) or world < 1:
        raise ValueError(f"world must be a positive int, got {world!r}")
    load = [0.0] * world
    owners = [0] * len(costs)
    for i in sorted(range(len(costs)), key=lambda j: (-costs[j], j)):
        r = min(range(world), key=lambda k: (load[k], k))
        owners[i] = r
        load[r] += float(costs[i])
    return owners


def agree_on_failures(codes: Sequence[int], sharding: Sharding) -> list[int]:
    """Every process's status codes (0: ok), combined by maximum over the processes: after it,
    every process knows which jobs failed anywhere (one ``all_reduce`` of ``len(codes)`` ints)."""
    if not codes:
        return []
    t = torch.tensor(list(codes), dtype=torch.int64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=sharding.group)
    return t.tolist()


class OwnerExchange:
    """Move row blocks of matrices between their holders and their owners.

    ``shapes[i]`` is matrix ``i``'s global shape (its first dimension sharded as
    :func:`row_blocks` says), ``owners[i]`` its owner. Every process builds the same exchange
    (same shapes, owners and order); the tensors exchanged must share one dtype.
    """

    def __init__(self, shapes: Sequence[tuple[int, ...]], owners: Sequence[int], sharding: Sharding):
        if len(shapes) != len(owners):
            raise ValueError("OwnerExchange: shapes and owners must have the same length")
        self.shapes = [tuple(int(s) for s in shape) for shape in shapes]
        self.owners = list(owners)
        self.sharding = sharding
        self.blocks = [sharding.blocks(shape[0]) for shape in self.shapes]
        self.widths = [math.prod(shape[1:]) for shape in self.shapes]
        self.mine = [i for i, o in enumerate(self.owners) if o == sharding.rank]

    def _a2a(self, send: list[list[torch.Tensor]], recv_numel: list[int], dtype, device) -> torch.Tensor:
        flat = [t.reshape(-1) for per_rank in send for t in per_rank]
        inp = torch.cat(flat) if flat else torch.empty(0, dtype=dtype, device=device)
        out = torch.empty(sum(recv_numel), dtype=dtype, device=device)
        send_numel = [sum(t.numel() for t in per_rank) for per_rank in send]
        dist.all_to_all_single(out, inp.to(dtype), recv_numel, send_numel, group=self.sharding.group)
        return out

    def gather(self, blocks: Sequence[torch.Tensor]) -> dict[int, torch.Tensor]:
        """``blocks[i]``: this process's rows of matrix ``i``. Returns ``{i: full matrix}`` for
        the matrices this process owns."""
        world = self.sharding.world
        dtype, device = self._dtype_device(blocks)
        send = [[blocks[i] for i in range(len(blocks)) if self.owners[i] == d] for d in range(world)]
        recv_numel = [sum(self.blocks[i][s] * self.widths[i] for i in self.mine) for s in range(world)]
        out = self._a2a(send, recv_numel, dtype, device)
        pieces: dict[int, list[torch.Tensor]] = {i: [] for i in self.mine}
        offset = 0
        for s in range(world):
            for i in self.mine:
                k = self.blocks[i][s] * self.widths[i]
                pieces[i].append(out[offset:offset + k].reshape(self.blocks[i][s], *self.shapes[i][1:]))
                offset += k
        return {i: torch.cat(pieces[i]) for i in self.mine}

    def scatter(self, full: dict[int, torch.Tensor], dtype, device) -> list[torch.Tensor]:
        """``full[i]``: matrix ``i``'s result on its owner. Returns this process's rows of every
        result, in order."""
        world, rank = self.sharding.world, self.sharding.rank
        starts = [[sum(b[:r]) for r in range(world)] for b in self.blocks]
        send = [[full[i][starts[i][d]:starts[i][d] + self.blocks[i][d]] for i in self.mine] for d in range(world)]
        recv_numel = [sum(self.blocks[i][rank] * self.widths[i] for i in range(len(self.shapes)) if self.owners[i] == s)
                      for s in range(world)]
        out = self._a2a(send, recv_numel, dtype, device)
        result: list[torch.Tensor | None] = [None] * len(self.shapes)
        offset = 0
        for s in range(world):
            for i in range(len(self.shapes)):
                if self.owners[i] != s:
                    continue
                k = self.blocks[i][rank] * self.widths[i]
                result[i] = out[offset:offset + k].reshape(self.blocks[i][rank], *self.shapes[i][1:])
                offset += k
        return result  # type: ignore[return-value]

    @staticmethod
    def _dtype_device(tensors):
        for t in tensors:
            return t.dtype, t.device
        return torch.float32, torch.device("cpu")


def owner_step(
    sharding: Sharding,
    shapes: Sequence[tuple[int, ...]],
    owners: Sequence[int],
    blocks: Sequence[torch.Tensor],
    compute: Callable[[int, torch.Tensor], torch.Tensor],
    *,
    out_dtype: torch.dtype,
) -> tuple[list[torch.Tensor] | None, list[tuple[int, int, int, BaseException | None]]]:
    """Steps 2–5 of the module docstring for one batch of matrices.

    ``compute(i, full)`` runs on matrix ``i``'s owner and returns the full result (same shape);
    it may raise, and an ``Exception`` with an integer ``code`` attribute reports that code
    (others report 1). Returns ``(rows of every result, [])`` when every owner succeeded, or
    ``(None, [(i, owner, code, exception or None), ...])`` identically on every process (the
    exception object only on the owner) when some failed; then nothing was scattered.
    """
    exchange = OwnerExchange(shapes, owners, sharding)
    full = exchange.gather(blocks)
    results: dict[int, torch.Tensor] = {}
    codes = [0] * len(shapes)
    caught: dict[int, BaseException] = {}
    for i, matrix in full.items():
        try:
            results[i] = compute(i, matrix).to(out_dtype)
        except Exception as e:  # noqa: BLE001 - reported to every process below
            codes[i] = int(getattr(e, "code", 1)) or 1
            caught[i] = e
    codes = agree_on_failures(codes, sharding)
    failures = [(i, owners[i], c, caught.get(i)) for i, c in enumerate(codes) if c]
    if failures:
        return None, failures
    device = blocks[0].device if len(blocks) else torch.device("cpu")
    return exchange.scatter(results, out_dtype, device), []
