"""Section 13.6: data-parallel replicas, the bytes they exchange, and how far they drift."""

from __future__ import annotations

from typing import Optional
import torch
from torch import Tensor, nn
from .amortization import RegressionTask, mlp


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

