"""isolab's optimizers on FSDP2 (``fully_shard``): the owner scheme of isolab.fsdp.

Every multi-process check runs on CPU with gloo, in processes started by
:func:`isolab.distributed.launch`. One launch per world size (2 and 4) runs every task and
returns the results; module-scoped fixtures keep them and the tests compare. The model is a
small language model with the layouts that matter: an embedding, LayerNorms, ``nn.Linear``
layers on 3-D inputs, a linear layer stored ``(in, out)`` (transformers' ``Conv1D``, declared
with ``register_linear``) and an untied head, with row counts that 2 and 4 processes do not
divide evenly (torch.chunk's blocks, an empty block at 4 processes for the 3-row matrix). Each
process gets an equal contiguous share of every global batch; the reference is one process
without FSDP on the whole batch.
"""

from __future__ import annotations

import io
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from isolab import distributed as D
from isolab import fsdp
from isolab.nn import register_linear
from isolab.optim import Iso, IsoAdam, Muon, Shampoo

VOCAB, D_MODEL, WIDE, CONTEXT, SEQS = 30, 12, 33, 6, 8  # 8 sequences: 4, 2 per process
STEPS = 20

CASES = {
    "muon": (Muon, dict(lr=0.02, adam_lr=3e-3)),
    "iso": (Iso, dict(lr=0.02, adam_lr=3e-3, root_interval=3)),
    "iso-update-momentum": (Iso, dict(lr=0.02, adam_lr=3e-3, root_interval=2, momentum_placement="update")),
    "iso-lean": (Iso, dict(lr=0.02, adam_lr=3e-3, stat_interval=2, root_interval=2)),
    "isoadam": (IsoAdam, dict(lr=3e-3, root_interval=3)),
    "isoadam-eigenbasis-warmup": (IsoAdam, dict(lr=3e-3, root_interval=1, root_method="eigenbasis",
                                                warmup_steps=2)),
    "shampoo": (Shampoo, dict(lr=0.01, adam_lr=3e-3, root_interval=3)),
    "shampoo-graft-momentum": (Shampoo, dict(lr=3e-3, adam_lr=3e-3, beta=0.99, root_interval=2, graft="adam",
                                             momentum=0.9)),
}


@register_linear
class InOut(nn.Module):
    """``y = x W + b``, ``W`` stored ``(in, out)``: transformers' Conv1D."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n_in, n_out) / math.sqrt(n_in))
        self.bias = nn.Parameter(torch.zeros(n_out))

    def forward(self, x):
        return torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight).view(*x.shape[:-1], -1)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(D_MODEL)
        self.up = nn.Linear(D_MODEL, WIDE)
        self.down = InOut(WIDE, D_MODEL)
        self.gate = nn.Linear(D_MODEL, 3, bias=False)  # 3 rows: an empty block at 4 processes

    def forward(self, x):
        h = self.ln(x)
        return x + self.down(torch.tanh(self.up(h))) * torch.sigmoid(self.gate(h)).mean(-1, keepdim=True)


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D_MODEL)
        self.blocks = nn.ModuleList([Block(), Block()])
        self.ln_f = nn.LayerNorm(D_MODEL)
        self.head = nn.Linear(D_MODEL, VOCAB, bias=False)

    def forward(self, idx):
        x = self.emb(idx)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def _model(dtype=torch.float32):
    torch.manual_seed(0)
    return LM().to(dtype)


def _batch(step, rank=0, world=1):
    g = torch.Generator().manual_seed(100 + step)
    tokens = torch.randint(0, VOCAB, (SEQS, CONTEXT + 1), generator=g)
    part = SEQS // world
    tokens = tokens[rank * part:(rank + 1) * part]
    return tokens[:, :-1], tokens[:, 1:]


def _shard(model, world, reshard_after_forward=True):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (world,))
    for block in model.blocks:
        fully_shard(block, mesh=mesh, reshard_after_forward=reshard_after_forward)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard_after_forward)
    return model


def _build(case, model, dtype=torch.float32):
    cls, kw = CASES[case]
    if cls is not Muon:
        kw = dict(kw, stats_dtype=dtype)
    return cls(model, **kw)


def _loss(model, x, y):
    return F.cross_entropy(model(x).flatten(0, 1), y.flatten())


def _train(model, opt, steps, rank=0, world=1, start=0):
    for s in range(start, start + steps):
        x, y = _batch(s, rank, world)
        opt.zero_grad()
        _loss(model, x, y).backward()
        opt.step()


def _full(model):
    return {n: (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().clone() for n, p in model.named_parameters()}


def _reference(case, dtype, steps=STEPS):
    model = _model(dtype)
    _train(model, _build(case, model, dtype), steps)
    return _full(model)


# ----------------------------------------------------------------------------- workers
def _equal_to_one_process(rank, world, case, dtype=torch.float64, reshard=True):
    model = _shard(_model(dtype), world, reshard)
    opt = _build(case, model, dtype)
    _train(model, opt, STEPS, rank, world)
    owners = sorted(set(opt._owners.values()))
    return {"params": _full(model), "owners": owners}


def _resume(rank, world, case):
    """10 steps, a checkpoint (model by torch.distributed.checkpoint, optimizer by
    get_optimizer_state_dict), 10 more; a fresh model and optimizer load it and take the same 10."""
    import tempfile

    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict, get_optimizer_state_dict, set_model_state_dict, set_optimizer_state_dict)

    model = _shard(_model(), world)
    opt = _build(case, model)
    _train(model, opt, 10, rank, world)
    folder = [tempfile.mkdtemp(prefix="isolab-dcp-") if rank == 0 else None]
    dist.broadcast_object_list(folder, src=0)
    dcp.save({"model": get_model_state_dict(model)}, checkpoint_id=folder[0])
    buffer = io.BytesIO()
    torch.save(get_optimizer_state_dict(model, opt), buffer)
    _train(model, opt, 10, rank, world, start=10)

    fresh = _shard(_model(), world)
    fresh_opt = _build(case, fresh)
    state = {"model": get_model_state_dict(fresh)}
    dcp.load(state, checkpoint_id=folder[0])
    set_model_state_dict(fresh, state["model"])
    buffer.seek(0)
    set_optimizer_state_dict(fresh, fresh_opt, torch.load(buffer, weights_only=False))
    _train(fresh, fresh_opt, 10, rank, world, start=10)
    a, b = _full(model), _full(fresh)
    same_params = all(torch.equal(a[k], b[k]) for k in a)
    same_state = True
    for p, q in zip(model.parameters(), fresh.parameters()):
        s, t = opt.state[p], fresh_opt.state[q]
        if s.keys() != t.keys():
            same_state = False
            continue
        for key in s:
            x, y = s[key], t[key]
            if torch.is_tensor(x):
                x, y = fsdp.local(x), fsdp.local(y)
                same_state &= torch.equal(x, y)
            else:
                same_state &= x == y
    wrong_rank = None
    if world > 1:
        saved = opt.state_dict()
        for g in saved["param_groups"]:
            g["sharded_over"] = (world, (rank + 1) % world)
        try:
            fresh_opt.load_state_dict(saved)
        except ValueError as e:
            wrong_rank = str(e)
    return {"same_params": same_params, "same_state": same_state, "moved": not torch.equal(a["head.weight"], _full(
        _shard(_model(), world))["head.weight"]), "wrong_rank": wrong_rank}


def _nan_gradient(rank, world, case):
    """A NaN in rank 1's rows of one matrix's gradient at step 3: the same FloatingPointError on
    every rank, nothing changed, and the next step is taken in step."""
    model = _shard(_model(), world)
    opt = _build(case, model)
    message, unchanged = None, None
    for s in range(5):
        x, y = _batch(s, rank, world)
        opt.zero_grad()
        _loss(model, x, y).backward()
        if s == 3:
            if rank == 1:
                fsdp.local(model.blocks[1].up.weight.grad)[0, 0] = float("nan")
            before = {k: fsdp.local(v).clone() for k, v in model.state_dict().items()}
            state_before = {id(p): {k: (fsdp.local(v).clone() if torch.is_tensor(v) else v) for k, v in st.items()}
                            for p, st in opt.state.items()}
            try:
                opt.step()
            except FloatingPointError as e:
                message = str(e)
            after = model.state_dict()
            unchanged = all(torch.equal(before[k], fsdp.local(after[k])) for k in before)
            for p, st in opt.state.items():
                old = state_before[id(p)]
                unchanged &= old.keys() == st.keys() and all(
                    torch.equal(old[k], fsdp.local(v)) if torch.is_tensor(v) else old[k] == v for k, v in st.items())
            continue
        opt.step()
    return {"message": message, "unchanged": unchanged, "params": _full(model)}


def _nan_statistics(rank, world):
    """IsoAdam: rank 1's captured XᵀX of one layer gets a NaN: the same error on every rank."""
    model = _shard(_model(), world)
    opt = _build("isoadam", model)
    message = None
    for s in range(4):
        x, y = _batch(s, rank, world)
        opt.zero_grad()
        _loss(model, x, y).backward()
        if s == 2:
            if rank == 1:
                opt.statistics.sums("blocks.0.down")[0][0, 0] = float("nan")
            try:
                opt.step()
            except FloatingPointError as e:
                message = str(e)
            continue
        opt.step()
    return {"message": message, "params": _full(model)}


def _torch_muon(rank, world):
    """What torch.optim.Muon does on FSDP2's DTensors: its Newton–Schulz runs as DTensor ops
    (every process computes every matrix, with a collective in each iteration)."""
    from torch.distributed.tensor.debug import CommDebugMode

    model = _shard(_model(), world)
    matrices = [p for n, p in model.named_parameters() if n.endswith(("up.weight", "gate.weight"))]
    opt = torch.optim.Muon(matrices, lr=0.02)
    x, y = _batch(0, rank, world)
    _loss(model, x, y).backward()
    with CommDebugMode() as comm:
        opt.step()
    return {"collectives": comm.get_total_counts(), "matrices": len(matrices), "params": _full(model)}


def _errors(rank, world):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    out = {}
    mesh = init_device_mesh("cpu", (world,))
    half = _model()
    for block in half.blocks:
        fully_shard(block, mesh=mesh)  # the root is not wrapped: its parameters stay plain tensors
    try:
        Muon(half)
    except ValueError as e:
        out["mixed"] = str(e)
    try:
        IsoAdam(_shard(_model(), world), sync_statistics=False)
    except ValueError as e:
        out["no_sync"] = str(e)
    return out


def _tasks(rank, world, tasks):
    out = {}
    for task in tasks:
        name, *args = task
        out[task] = globals()[name](rank, world, *args)
    return out


F32, F64 = torch.float32, torch.float64
# IsoAdam is compared in float64 only: Adam's first step is the sign of the whitened gradient,
# so an entry within float32 rounding of zero may flip and move by 2 lr, on one CPU and not another
FLOAT32 = ["muon", "iso", "shampoo"]
TASKS_2 = ([("_equal_to_one_process", c) for c in CASES] + [("_equal_to_one_process", c, F32) for c in FLOAT32]
           + [("_equal_to_one_process", "isoadam", F64, False)]
           + [("_resume", c) for c in ("muon", "iso-lean", "shampoo-graft-momentum")]
           + [("_nan_gradient", c) for c in ("muon", "iso", "shampoo")] + [("_nan_statistics",), ("_torch_muon",),
                                                                          ("_errors",)])
TASKS_4 = ([("_equal_to_one_process", c) for c in ("muon", "iso", "isoadam", "shampoo")]
           + [("_equal_to_one_process", "iso", F32)]
           + [("_resume", "isoadam"), ("_nan_gradient", "isoadam"), ("_nan_statistics",)])


@pytest.fixture(scope="module")
def world2():
    return D.launch(_tasks, 2, TASKS_2, timeout=600)


@pytest.fixture(scope="module")
def world4():
    return D.launch(_tasks, 4, TASKS_4, timeout=600)


@pytest.fixture(scope="module")
def references():
    torch.set_num_threads(1)
    return {**{(c, F64): _reference(c, F64) for c in CASES}, **{(c, F32): _reference(c, F32) for c in FLOAT32}}


def _gap(a, b):
    return max(float((a[k] - b[k]).abs().max()) for k in a)


# ----------------------------------------------------------------------------- tests
# In float64 the FSDP run and the one-process run differ only by the order of the gradient's
# sums (observed: <= 2e-10 after 20 steps), so 1e-8 catches any wrong scale or row. In float32
# the normalizations amplify that rounding (observed: Muon and Iso ~1e-6, Shampoo 2e-5): 2e-4
# is the float32 bar, and the weights move by > 1e-2.
TOLERANCE = {F64: 1e-8, F32: 2e-4}


@pytest.mark.parametrize("case", sorted(CASES))
def test_two_processes_equal_one_process_on_the_whole_batch(case, world2, references):
    runs = [r[("_equal_to_one_process", case)] for r in world2]
    assert all(_gap(runs[0]["params"], r["params"]) == 0 for r in runs)  # every rank sees the same weights
    assert _gap(references[(case, F64)], runs[0]["params"]) <= TOLERANCE[F64]
    assert _gap(references[(case, F64)], _full(_model(F64))) > 1e-2  # the runs moved the weights
    assert runs[0]["owners"] == [0, 1]  # both processes own matrices: the matrix work is shared


@pytest.mark.parametrize("case", FLOAT32)
def test_in_float32_two_processes_equal_one_process_within_float32_rounding(case, world2, references):
    run = world2[0][("_equal_to_one_process", case, F32)]
    assert _gap(references[(case, F32)], run["params"]) <= TOLERANCE[F32]


def test_without_resharding_after_forward_the_steps_are_the_same(world2, references):
    run = world2[0][("_equal_to_one_process", "isoadam", F64, False)]
    assert _gap(references[("isoadam", F64)], run["params"]) <= TOLERANCE[F64]


@pytest.mark.parametrize("case", ["muon", "iso", "isoadam", "shampoo"])
def test_four_processes_equal_one_process_on_the_whole_batch(case, world4, references):
    runs = [r[("_equal_to_one_process", case)] for r in world4]
    assert _gap(references[(case, F64)], runs[0]["params"]) <= TOLERANCE[F64]
    assert runs[0]["owners"] == [0, 1, 2, 3]


def test_in_float32_four_processes_equal_one_process(world4, references):
    run = world4[0][("_equal_to_one_process", "iso", F32)]
    assert _gap(references[("iso", F32)], run["params"]) <= TOLERANCE[F32]


@pytest.mark.parametrize("case", ["muon", "iso-lean", "shampoo-graft-momentum"])
def test_a_checkpoint_resumes_bit_for_bit(case, world2):
    for r in world2:
        result = r[("_resume", case)]
        assert result["moved"] and result["same_params"] and result["same_state"]
        assert "each rank must load its own file" in result["wrong_rank"]


def test_a_checkpoint_resumes_bit_for_bit_at_four_processes(world4):
    assert all(r[("_resume", "isoadam")]["same_params"] and r[("_resume", "isoadam")]["same_state"] for r in world4)


@pytest.mark.parametrize("world,case", [("world2", "muon"), ("world2", "iso"), ("world2", "shampoo"),
                                        ("world4", "isoadam")])
def test_a_nan_on_one_rank_raises_the_same_error_on_every_rank(world, case, request):
    results = [r[("_nan_gradient", case)] for r in request.getfixturevalue(world)]
    messages = {r["message"] for r in results}
    assert len(messages) == 1 and None not in messages
    (msg,) = messages
    assert "non-finite" in msg and "'blocks.1.up.weight'" in msg and "no parameter or optimizer state" in msg
    assert all(r["unchanged"] for r in results)
    # the mesh survived: the next step was taken together and the weights agree
    assert all(_gap(results[0]["params"], r["params"]) == 0 for r in results)


@pytest.mark.parametrize("world", ["world2", "world4"])
def test_nan_statistics_on_one_rank_raise_the_same_error_on_every_rank(world, request):
    results = [r[("_nan_statistics",)] for r in request.getfixturevalue(world)]
    messages = {r["message"] for r in results}
    assert len(messages) == 1 and None not in messages
    (msg,) = messages
    assert "non-finite" in msg and "blocks.0.down" in msg and "on rank 1 " in msg
    assert all(_gap(results[0]["params"], r["params"]) == 0 for r in results)


def test_torch_optim_muon_runs_on_dtensors_with_collectives_inside_newton_schulz(world2):
    # measured, for the recipes page: every Newton–Schulz iteration of every matrix
    # communicates (the two matrices' 5 iterations each: at least 10 collectives)
    result = world2[0][("_torch_muon",)]
    assert result["collectives"] >= 5 * result["matrices"]


def test_what_fsdp2_cannot_take_is_named(world2):
    errors = world2[0][("_errors",)]
    assert "apply fully_shard to the root module as well" in errors["mixed"]
    assert "sync_statistics must not be False" in errors["no_sync"]


# ----------------------------------------------------------------------------- pure helpers
def test_row_blocks_are_torch_chunks():
    for rows in (0, 1, 3, 7, 30, 33):
        for world in (1, 2, 3, 4):
            blocks = fsdp.row_blocks(rows, world)
            chunks = [len(c) for c in torch.arange(rows).chunk(world)] if rows else []
            assert blocks == chunks + [0] * (world - len(chunks))


def test_owners_balance_the_cost():
    costs = [1000, 10, 10, 10, 500, 500]
    owners = fsdp.assign_by_cost(costs, 2)
    load = [sum(c for c, o in zip(costs, owners) if o == r) for r in range(2)]
    assert sorted(load) == [1010, 1020] and owners == fsdp.assign_by_cost(costs, 2)
    with pytest.raises(ValueError, match="world"):
        fsdp.assign_by_cost(costs, 0)


def test_plain_parameters_are_not_sharded():
    assert fsdp.sharding_of(list(_model().parameters())) is None
    t = torch.ones(3)
    assert fsdp.local(t) is t
