"""The one step path of every matrix optimizer: elementwise *pre* on each process's rows, the
*whole-matrix* part on the matrix's owner, elementwise *post* on the rows again.

An optimizer's arithmetic is written once, as four methods of
:class:`isolab.optim._base.RoutedOptimizer` (``_pre``, ``_prepare``, ``_direction``, ``_post``);
this module moves the data between them:

- one process (or DDP, where every process holds every full gradient): the rows *are* the
  matrix and every process is its owner;
- FSDP2 (:mod:`isolab.fsdp`): the rows of each matrix are gathered on its owner
  (``all_to_all``), the whole-matrix part runs there inside a region where no collective may
  run, the owners agree on failures, and each process gets its rows of the result back.

A whole-matrix part may hand *jobs* (inverse roots, rebuilt averages: symmetric matrices) to a
:class:`JobRunner`: :class:`LocalJobs` runs them in place, :class:`SharedJobs` (DDP with
``distribute_roots``) runs each on one process and shares the results, so that every process
holds the same roots without computing all of them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from .. import distributed, fsdp
from .failures import UNCHANGED_ANYWHERE, Failure, StepFailed

__all__ = ["MatrixItem", "MatrixJob", "LocalJobs", "SharedJobs", "run_stage"]


@dataclass(eq=False)
class MatrixItem:
    """One matrix parameter in one step."""

    gi: int  # its parameter group's index
    group: dict
    param: torch.Tensor
    state: dict
    #: whole-matrix state computed this step; written into ``state`` when the step applies
    new: dict = field(default_factory=dict)
    rows: torch.Tensor | None = None  # this process's rows of the matrix the owner needs
    carry: object = None  # what ``_post`` needs from ``_pre``
    full: torch.Tensor | None = None  # the whole matrix, on its owner
    skip_direction: bool = False  # no step this time (a warm-up step): statistics only
    whole: bool = True  # False: no whole-matrix part at all (IsoAdam with whiten=False is Adam)
    stats: tuple | None = None  # summed statistics this step (XᵀX, GᵀG), on the owner
    count: int = 0  # rows behind this step's gradient (Iso's divisor)


@dataclass(eq=False)
class MatrixJob:
    """A symmetric ``size × size`` result to compute (an inverse root, a rebuilt average).

    ``run()`` returns it; ``store(result)`` puts it where it belongs (an item's ``new``);
    ``failure`` and ``what`` describe a failure on any process.
    """

    size: int
    run: Callable[[], torch.Tensor]
    store: Callable[[torch.Tensor], None]
    failure: Failure
    what: str  # e.g. "Cov(X)^(-1/2) for parameter 'fc1.weight' (16, 8)"
    dtype: torch.dtype = torch.float32
    device: torch.device = torch.device("cpu")


class LocalJobs:
    """Run every job here (one process, FSDP2's owners, or DDP without ``distribute_roots``)."""

    def __call__(self, jobs: list[MatrixJob]) -> None:
        for job in jobs:
            job.store(job.run())


class SharedJobs:
    """DDP with ``distribute_roots``: each job on one process (balanced by ``size³``), results
    shared by one ``all_gather`` (:func:`isolab.distributed.compute_on_owners`); a failure on its
    owner becomes the same error on every process."""

    def __init__(self, comm, who: str):
        self.comm = comm
        self.who = who

    def __call__(self, jobs: list[MatrixJob]) -> None:
        if not jobs:  # the same on every process: the states and the steps are identical
            return
        dtype = torch.float64 if any(j.dtype == torch.float64 for j in jobs) else torch.float32
        results, failures = distributed.compute_on_owners(
            [job.run for job in jobs], [job.size for job in jobs], self.comm, dtype=dtype, device=jobs[0].device
        )
        if failures:
            i, owner, cause = failures[0]
            err = StepFailed(jobs[i].failure, f"{self.who}: cannot compute {jobs[i].what} (computed by rank {owner}); "
                                              f"{UNCHANGED_ANYWHERE}")
            raise err from cause
        for job, R in zip(jobs, results):
            job.store(R.to(job.dtype))


def run_stage(opt, items: list[MatrixItem], jobs) -> list[torch.Tensor | None]:
    """The directions of ``items`` (this process's rows of each; ``None`` for items without a
    step), after ``opt._pre`` filled their rows. Raises ``StepFailed`` (the same on every
    process) with nothing changed."""
    whole = [it for it in items if it.whole]
    if opt._sharding is None:
        for it in whole:
            it.full = it.rows
        opt._prepare(whole, jobs)
        out = {id(it): None if it.skip_direction else opt._direction(it) for it in whole}
    else:
        out = {id(it): d for it, d in zip(whole, _run_sharded(opt, whole, opt._sharding))} if whole else {}
    return [out.get(id(it)) for it in items]


def _run_sharded(opt, items, sharding):
    """FSDP2: gather each matrix's rows on its owner, run the whole-matrix part there, agree on
    failures, send the rows of the result back (steps 2–5 of :mod:`isolab.fsdp`)."""
    out: list[torch.Tensor | None] = [None] * len(items)
    dtypes = sorted({it.rows.dtype for it in items}, key=str)
    owners = [opt._owners[it.param] for it in items]
    codes = [0] * len(items)
    caught: dict[int, StepFailed] = {}
    exchanges = []
    for dtype in dtypes:
        idx = [i for i, it in enumerate(items) if it.rows.dtype == dtype]
        ex = fsdp.OwnerExchange([tuple(items[i].param.shape) for i in idx], [owners[i] for i in idx], sharding)
        full = ex.gather([items[i].rows for i in idx])
        exchanges.append((dtype, idx, ex, full))
    mine = [i for i in range(len(items)) if owners[i] == sharding.rank]
    for dtype, idx, ex, full in exchanges:
        for j, i in enumerate(idx):
            if j in full:
                items[i].full = full[j]
    results: dict[int, torch.Tensor] = {}
    opt._owner_only = True  # no collective may run here: the other processes are elsewhere
    try:
        try:
            opt._prepare([items[i] for i in mine], LocalJobs())
        except StepFailed as e:  # attribute it to the first of this process's matrices it names
            k = next((i for i in mine if items[i].param is getattr(e, "param", None)), mine[0] if mine else 0)
            codes[k], caught[k] = int(e.failure), e
        if not caught:
            for i in mine:
                if not items[i].skip_direction:
                    try:
                        results[i] = opt._direction(items[i])
                    except StepFailed as e:
                        codes[i], caught[i] = int(e.failure), e
                    except Exception as e:  # noqa: BLE001 - reported to every process below
                        codes[i], caught[i] = int(Failure.MATRIX_FUNCTION), StepFailed(Failure.MATRIX_FUNCTION, str(e))
    finally:
        opt._owner_only = False
    codes = fsdp.agree_on_failures(codes, sharding)
    failed = [(i, c) for i, c in enumerate(codes) if c]
    if failed:
        i, code = failed[0]
        it = items[i]
        err = StepFailed(Failure(code), f"{type(opt).__name__}: {opt._failure_text(Failure(code))} for "
                                        f"{opt._name(it.param, it.gi)} (computed by rank {owners[i]}); "
                                        f"{UNCHANGED_ANYWHERE}")
        raise err from caught.get(i)
    for dtype, idx, ex, _ in exchanges:
        sent = {j: results[i].to(dtype) for j, i in enumerate(idx) if i in results}
        # a warm-up matrix has no result on its owner: send zeros, which nobody applies
        for j, i in enumerate(idx):
            if j in ex.mine and j not in sent:
                sent[j] = torch.zeros(ex.shapes[j], dtype=dtype, device=items[i].rows.device)
        device = items[idx[0]].rows.device
        for j, rows in enumerate(ex.scatter(sent, dtype, device)):
            i = idx[j]
            out[i] = None if items[i].skip_direction else rows
    return out
