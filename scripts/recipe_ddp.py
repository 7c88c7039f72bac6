"""IsoAdam under DistributedDataParallel: the recipe of book/using_isolab.ipynb, as a script.

Two CPU processes (gloo), a few seconds::

    torchrun --standalone --nproc_per_node 2 scripts/recipe_ddp.py --steps 8

One process per GPU (NCCL)::

    torchrun --standalone --nproc_per_node 8 scripts/recipe_ddp.py --backend nccl

Everything a training script needs is in ``main``; the model is a small nanoGPT-style
language model on random tokens, so that the script runs anywhere. At the end rank 0
prints (and, with ``--out``, writes as JSON) the largest difference between the
replicas' parameters: 0.0 when every process holds the same weights (``--no-sync``, each
process whitening with its own statistics, shows them drift apart).
"""

from __future__ import annotations

import argparse
import json
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from isolab.optim import IsoAdam


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads, self.ln1, self.ln2 = heads, nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        b, t, d = x.shape
        qkv = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab=64, d=32, layers=2, heads=4, context=16, tied=True):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(context, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f, self.lm_head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)
        if tied:
            self.lm_head.weight = self.wte.weight  # nanoGPT's weight tying
        for emb in (self.wte, self.wpe):  # nanoGPT's scale: logits start near uniform
            nn.init.normal_(emb.weight, std=0.02)
    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--batch", type=int, default=8, help="global batch of sequences, split evenly over the processes")
    p.add_argument("--context", type=int, default=16)
    p.add_argument("--backend", default="gloo", help="gloo (CPU) or nccl (one GPU per process)")
    p.add_argument("--out", default=None, help="rank 0 writes the final numbers here as JSON")
    p.add_argument("--no-sync", action="store_true", help="each process whitens with its own statistics (to see the replicas drift)")
    args = p.parse_args(argv)

    torch.set_num_threads(1)
    dist.init_process_group(args.backend)  # torchrun sets RANK, WORLD_SIZE, MASTER_ADDR, ...
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cpu")
    if args.backend == "nccl":
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
    if args.batch % world:
        raise SystemExit(f"--batch {args.batch} is not divisible by the {world} processes")
    local = args.batch // world

    torch.manual_seed(0)  # the same initial weights on every rank
    model = GPT(context=args.context).to(device)
    # convert_attention(model) would go here, before DDP
    device_ids = [device.index] if device.type == "cuda" else None
    ddp = nn.parallel.DistributedDataParallel(model, device_ids=device_ids)
    opt = IsoAdam(
        model,  # the inner model: its nn.Linear layers are hooked
        lr=1e-3,
        stat_interval=2,
        root_interval=4,
        # sum X^T X and G^T G over the processes (None: on when distributed)
        sync_statistics=not args.no_sync,
        # each process computes the roots of the layers it owns, then shares them
        distribute_roots=True,
    )

    data = torch.Generator().manual_seed(1)  # the same global batches on every rank
    for _ in range(args.steps):
        tokens = torch.randint(0, 64, (args.batch, args.context + 1), generator=data)
        share = tokens[rank * local : (rank + 1) * local]  # this rank's sequences
        x, y = share[:, :-1], share[:, 1:]
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(ddp(x.to(device)).flatten(0, 1), y.to(device).flatten())
        loss.backward()  # DDP averages the gradients; the hooks record this rank's X and G
        opt.step()  # the statistics are summed across ranks inside step()
    opt.remove_hooks()

    flat = torch.cat([q.detach().reshape(-1) for q in model.parameters()])
    replicas = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(replicas, flat)
    if rank == 0:
        gap = max((r - replicas[0]).abs().max().item() for r in replicas)
        print(f"{world} processes, {args.steps} steps, global batch {args.batch} = {world} x {local} sequences, "
              f"statistics {'local to each process' if args.no_sync else 'summed over the processes'}")
        print(f"largest parameter difference between the replicas: {gap}")
        if args.out:
            with open(args.out, "w") as f:
                json.dump({"world": world, "steps": args.steps, "sync": not args.no_sync, "max_replica_gap": gap,
                           "final_loss_rank0": loss.item()}, f)
    # DDP's reducer holds the process group: free it while the group is alive. A gloo group
    # whose last reference goes in a Python destructor can wait forever on its worker thread,
    # which waits for the interpreter lock to free a finished collective (seen on torch 2.13).
    del ddp
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
