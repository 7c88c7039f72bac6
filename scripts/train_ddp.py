"""Data-parallel IsoAdam with statistics averaged across processes: a ``torchrun`` example.

Run on one machine with two CPU processes (gloo)::

    torchrun --standalone --nproc_per_node=2 scripts/train_ddp.py --steps 60

or on GPUs (one process per GPU, NCCL)::

    torchrun --standalone --nproc_per_node=8 scripts/train_ddp.py --backend nccl --device cuda

The pattern is the usual one for ``DistributedDataParallel`` (DDP), with one addition:
IsoAdam is built on the *inner* model (its hooks go on the ``nn.Linear`` layers, which
DDP's forward calls) and, because ``torch.distributed`` is initialized, it sums the
layers' statistics ``XᵀX`` and ``GᵀG`` over the processes (``sync_statistics=None``, the
default, turns that on automatically; ``--no-sync`` turns it off to show what goes wrong).
Each process trains on its own slice of the same global batch of
:class:`isolab.book.scaling.RegressionTask`. At the end rank 0 prints the final loss, the
largest parameter difference between the replicas (0 when they are identical) and the
elements each process handed to collectives per step.
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
from torch import nn

from isolab.book import scaling
from isolab.optim import IsoAdam


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--batch", type=int, default=256, help="global batch (split evenly over the processes)")
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--stat-interval", type=int, default=1)
    p.add_argument("--root-interval", type=int, default=10)
    p.add_argument("--no-sync", action="store_true", help="each process whitens with its own statistics")
    p.add_argument("--backend", default="gloo")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)

    torch.set_num_threads(args.threads)
    dist.init_process_group(args.backend)  # torchrun sets RANK, WORLD_SIZE, MASTER_ADDR, ...
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device(args.device)
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
    if args.batch % world:
        raise SystemExit(f"--batch {args.batch} is not divisible by {world} processes")
    local = args.batch // world

    task = scaling.RegressionTask(args.width, 16, cond=1000.0, seed=1)  # same batches on every rank
    model = scaling.mlp(args.width, 3, args.width, 16, seed=0).to(device)  # same initial weights
    ddp = nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    tally = scaling.CommunicationTally()
    ddp.register_comm_hook(None, tally.ddp_hook)
    opt = IsoAdam(
        model, lr=args.lr, stat_interval=args.stat_interval, root_interval=args.root_interval, stat_rows=None,
        sync_statistics=False if args.no_sync else None,
    )

    with tally:
        for _ in range(args.steps):
            x, y = task.batch(args.batch)
            x, y = x[rank * local:(rank + 1) * local].to(device), y[rank * local:(rank + 1) * local].to(device)
            opt.zero_grad(set_to_none=True)
            loss = (ddp(x) - y).square().mean()
            loss.backward()
            opt.step()
    opt.remove_hooks()

    params = torch.cat([q.detach().reshape(-1) for q in model.parameters()])
    gathered = [torch.empty_like(params) for _ in range(world)]
    dist.all_gather(gathered, params)
    if rank == 0:
        gap = max(scaling.max_gap(gathered[0], g) for g in gathered)
        per_step = {k: v / args.steps for k, v in tally.elements.items()}
        print(f"{world} processes ({args.backend}), global batch {args.batch} = {world} x {local} rows, "
              f"{args.steps} steps, statistics {'local to each process' if args.no_sync else 'averaged'}")
        print(f"final training loss on rank 0's slice: {loss.item():.3f}")
        print(f"largest parameter difference between replicas: {gap:.3g}")
        print("elements per step sent to collectives by one process: "
              + ", ".join(f"{k} {v:,.0f}" for k, v in per_step.items()))
    del ddp  # its reducer holds the group: free it first (see scripts/recipe_ddp.py)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
