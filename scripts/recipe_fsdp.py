"""IsoAdam (or Muon, Iso, Shampoo) under FSDP2: the recipe of book/using_isolab.ipynb, as a script.

Two CPU processes (gloo), a few seconds::

    torchrun --standalone --nproc_per_node 2 scripts/recipe_fsdp.py --steps 8

One process per GPU (NCCL)::

    torchrun --standalone --nproc_per_node 8 scripts/recipe_fsdp.py --backend nccl

The model is the nanoGPT-style model of ``scripts/recipe_ddp.py``, sharded with
``torch.distributed.fsdp.fully_shard`` per block and on the root; the optimizer is built on
the sharded model. Each process trains on its equal share of every global batch. At the end
rank 0 also trains the same model in one process, without FSDP, on the whole batches, and
prints (and, with ``--out``, writes as JSON) the largest difference between the two runs'
weights: the sharded run is the one-process run, up to the rounding of the gradient's sums.

:func:`compare` is the same run as a function of ``(rank, world)``, for
:func:`isolab.distributed.launch` (the recipes page runs it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from recipe_ddp import GPT  # noqa: E402

from isolab.optim import Iso, IsoAdam, Muon, Shampoo  # noqa: E402

OPTIMIZERS = {
    "isoadam": lambda m, **kw: IsoAdam(m, lr=3e-3, **kw),
    "iso": lambda m, **kw: Iso(m, lr=0.02, adam_lr=3e-3, **kw),
    "muon": lambda m, **kw: Muon(m, lr=0.02, adam_lr=3e-3),
    "shampoo": lambda m, **kw: Shampoo(m, lr=0.01, adam_lr=3e-3, **kw),
}


def build(name, model, dtype, **kw):
    """The optimizer, with statistics in the model's dtype when it is float64 (an exact comparison)."""
    if name != "muon" and dtype == torch.float64:
        kw["stats_dtype"] = torch.float64
    return OPTIMIZERS[name](model, **kw)


def shard(model, mesh):
    """``fully_shard`` each block, then the root (which takes the embeddings, the final
    norm and the head): every parameter becomes a ``DTensor`` sharded on its first
    dimension."""
    from torch.distributed.fsdp import fully_shard

    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    return fully_shard(model, mesh=mesh)


def tokens(step, batch, context, vocab=64):
    g = torch.Generator().manual_seed(1000 + step)
    t = torch.randint(0, vocab, (batch, context + 1), generator=g)
    return t[:, :-1], t[:, 1:]


def train(model, opt, steps, batch, context, rank=0, world=1, device="cpu"):
    part = batch // world
    for step in range(steps):
        x, y = tokens(step, batch, context)
        x, y = x[rank * part:(rank + 1) * part].to(device), y[rank * part:(rank + 1) * part].to(device)
        opt.zero_grad()
        F.cross_entropy(model(x).flatten(0, 1), y.flatten()).backward()
        opt.step()


def full_weights(model):
    return [(p.full_tensor() if hasattr(p, "full_tensor") else p).detach().cpu() for p in model.parameters()]


def compare(rank, world, optimizer="isoadam", steps=8, batch=8, context=16, dtype=torch.float64, device="cpu"):
    """Train sharded on ``world`` processes and (on rank 0) in one process on the whole batches;
    return the largest weight difference and how far the weights moved (rank 0; ``None`` elsewhere)."""
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh(torch.device(device).type, (world,))
    torch.manual_seed(0)
    model = shard(GPT(tied=False).to(device=device, dtype=dtype), mesh)
    opt = build(optimizer, model, dtype)
    train(model, opt, steps, batch, context, rank, world, device)
    sharded = full_weights(model)
    if rank != 0:
        return None
    torch.manual_seed(0)
    single = GPT(tied=False).to(device=device, dtype=dtype)
    start = [p.detach().cpu().clone() for p in single.parameters()]
    # sync_statistics=False: this reference is one process, although a process group is open
    train(single, build(optimizer, single, dtype, sync_statistics=False), steps, batch, context, device=device)
    gap = max(float((a - b).abs().max()) for a, b in zip(sharded, full_weights(single)))
    moved = max(float((a - b).abs().max()) for a, b in zip(sharded, start))
    owners = sorted(set(opt._owners.values()))
    return {"gap": gap, "moved": moved, "owners": owners}


def muon_collectives(rank, world, steps=1):
    """Collectives of one ``step()`` of ``torch.optim.Muon`` and of isolab's ``Muon`` on the same
    sharded matrices (counted by ``torch.distributed.tensor.debug.CommDebugMode``), and the
    matrices' count: torch's runs Newton–Schulz as DTensor operations, which communicate inside
    every iteration of every matrix; isolab's gathers each matrix on its owner once."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.debug import CommDebugMode

    mesh = init_device_mesh("cpu", (world,))
    counts = {}
    for name in ("torch", "isolab"):
        torch.manual_seed(0)
        model = shard(GPT(tied=False), mesh)
        hidden = [p for n, p in model.named_parameters() if n.startswith("blocks.") and p.ndim == 2]
        if name == "torch":
            opt = torch.optim.Muon(hidden, lr=0.02)
        else:
            opt = Muon([{"params": hidden}], lr=0.02)
        x, y = tokens(0, 8, 16)
        part = 8 // world
        F.cross_entropy(model(x[rank * part:(rank + 1) * part]).flatten(0, 1),
                        y[rank * part:(rank + 1) * part].flatten()).backward()
        with CommDebugMode() as comm:
            opt.step()
        counts[name] = comm.get_total_counts()
    return {"matrices": len(hidden), **counts}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--batch", type=int, default=8, help="global batch of sequences, split evenly over the processes")
    p.add_argument("--optimizer", choices=sorted(OPTIMIZERS), default="isoadam")
    p.add_argument("--backend", default="gloo", help="gloo (CPU) or nccl (one GPU per process)")
    p.add_argument("--dtype", choices=("float64", "float32"), default="float64",
                   help="float64 (default) shows the runs agree to rounding; float32 is what you would train in")
    p.add_argument("--out", default=None, help="rank 0 writes the final numbers here as JSON")
    args = p.parse_args(argv)

    torch.set_num_threads(1)
    dist.init_process_group(args.backend)  # torchrun sets RANK, WORLD_SIZE, MASTER_ADDR, ...
    rank, world = dist.get_rank(), dist.get_world_size()
    device = "cpu"
    if args.backend == "nccl":
        device = f"cuda:{int(os.environ['LOCAL_RANK'])}"
        torch.cuda.set_device(device)
    result = compare(rank, world, args.optimizer, args.steps, args.batch, dtype=getattr(torch, args.dtype),
                     device=device)
    if rank == 0:
        print(f"{args.optimizer} under FSDP2 on {world} processes, {args.steps} steps: largest weight difference "
              f"to one process on the whole batches {result['gap']:.1e} (the weights moved by up to "
              f"{result['moved']:.2f}); matrices owned by ranks {result['owners']}")
        if args.out:
            with open(args.out, "w") as f:
                json.dump({"world": world, **result}, f)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
