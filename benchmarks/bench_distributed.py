"""Data-parallel step time of IsoAdam, Iso and Muon, as ratios to Adam (2 CPU processes, gloo).

Run:  python benchmarks/bench_distributed.py [--quick] [--world 2] [--blocks 5] [--fsdp]

The model is the book's own Transformer (:class:`isolab.book.lm.TransformerLM`, Chapter 11:
pre-norm, separate ``q, k, v, o`` projections, GELU MLP of width ``4d``, RMSNorm, untied
head) at width ``d = 256`` with 4 blocks, context 256, and 32 sequences per process: 8192
tokens per process and step (16384 per step with 2 processes). Why this model: it is the
shape class the paper and the book train (a small LM), its matrices have the two sizes that
matter for Iso (``d × d`` attention projections and ``d × 4d`` MLP matrices, whose ``4d``
side costs ``(4d)³`` per root), and a few thousand tokens per process is the small end of
data-parallel LM training, where each process does enough work per step that the gradient
all-reduce (3.3 M parameters, 13 MB) does not dominate. Every per-step matrix cost (Iso's
``P_G · ∇W · P_X``, Muon's Newton–Schulz) grows with ``d³`` and not with the tokens, so its
share falls like 1/tokens; that is a property of those optimizers, not of the communication
measured here. This script prints its ratios and saves nothing; Chapter 13's saved timings
come from ``scripts/ch13_ddp_timing.py`` (``results/ch13_ddp_timing.json``, with their
command and the block-to-block spread), and a ratio below that spread is noise.

What is timed, on each of ``--world`` processes (one thread each, ``torch.distributed``
with gloo, every model wrapped in ``DistributedDataParallel``): the DDP step, i.e.
``zero_grad`` + forward + backward (with DDP's gradient all-reduce and Iso's statistics
hooks) + ``optimizer.step`` (with the statistics all-reduce and the shared roots). The four
optimizers, each with its own model, run *interleaved* block by block (a block = 10 steps,
so that refresh-every-10 is amortized inside every block), so that load from other programs
on a shared machine falls on all of them alike; each block starts and ends at a barrier. The
reported time per step is that of the *fastest* of ``--blocks`` blocks (the block's mean;
per block the slowest process), after one warm-up block: on a shared machine the fastest
block is the one least disturbed by other programs. The median block and the median CPU
time per step (``time.process_time``, which other programs do not inflate, but which misses
time spent waiting for the other process) are printed beside it. Adam is ``torch.optim.AdamW`` with the chapter's routing
(:func:`isolab.book.lm.make_optimizer`); IsoAdam and Iso refresh statistics and roots every 10
steps (``stat_interval=10, root_interval=10``, so the lean state), sync their statistics
across processes and distribute the roots (the defaults under ``torch.distributed``).

Target (issue 8): IsoAdam's data-parallel step at most 1.2x Adam's (printed PASS/FAIL).
Also printed: Muon's and Iso's ratios, the split of each step into forward+backward and
``step()``, and the bytes each process hands to collectives per 10 steps.

``--fsdp`` (issue 30): FSDP2 against DDP, same model, same global batch, 2 processes. Each of
AdamW (torch's, the baseline), Muon, IsoAdam and Shampoo runs once wrapped in DDP and once
sharded by ``fully_shard`` (per block and on the root); what is printed per step is the time
(the fastest of ``--blocks`` interleaved blocks, per block the slowest process) and the bytes
each process hands to collectives, *measured*: every ``torch.distributed`` collective is
wrapped and counts its input tensor (FSDP2's all-gathers and reduce-scatters, the optimizers'
statistics reductions and all-to-alls); DDP's gradient all-reduce, which runs in C++, is routed
through a communication hook that calls torch's own all-reduce hook, i.e. the wrapped
``dist.all_reduce``, so each bucket is counted once. Under FSDP2 the matrix optimizers gather each
matrix's rows on an owner process and scatter the result back (:mod:`isolab.fsdp`): about
two gradients' worth of extra bytes per step against DDP's one all-reduce, in exchange for
parameters, gradients and optimizer state held in shards.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

from isolab.book import lm  # noqa: E402
from isolab.distributed import launch  # noqa: E402
from isolab.optim import Iso  # noqa: E402

TARGET = 1.2
NAMES = ("Adam", "Muon", "IsoAdam", "Iso")


def make(name, model, args):
    cfg = lm.TrainConfig(lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    if name == "Adam":
        return lm.make_optimizer("adam", model, cfg)
    if name == "Muon":
        return lm.make_optimizer("muon", model, cfg)
    every = dict(stat_interval=args.interval, root_interval=args.interval, stat_rows=None)
    if name == "IsoAdam":
        cfg = lm.TrainConfig(lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1, extra=every)
        return lm.make_optimizer("isoadam", model, cfg)
    if name == "Iso":
        return Iso(model, lr=0.02, head=model.head, adam_lr=1e-3, adam_betas=(0.9, 0.95), **every)
    raise ValueError(name)


def collective_bytes(model, args, world):
    """Bytes one process sends into collectives per ``interval`` steps, by kind (analytic)."""
    params = sum(p.numel() for p in model.parameters())
    ddp = params * 4 * args.interval  # DDP: every gradient, every step (float32)
    stats = roots = rows = 0
    sizes = []
    for name, m in model.named_modules():
        if isinstance(m, torch.nn.Linear) and m is not model.head:
            n, o = m.weight.shape[1], m.weight.shape[0]
            stats += (n * (n + 1) // 2 + o * (o + 1) // 2) * 4  # upper triangles, float32
            sizes += [n, o]
            rows += 8 * (world + 1)  # int64 row count + status per rank, every step
    # roots: each process contributes its share to one all_gather (padded to the largest share)
    from isolab.distributed import assign_owners

    owners = assign_owners(sizes, world)
    share = max(sum(s * (s + 1) // 2 + 1 for s, o in zip(sizes, owners) if o == r) for r in range(world)) * 4
    roots = share
    return {"ddp_gradients": ddp, "statistics": stats, "roots": roots, "row_counts": rows * args.interval}


def worker(rank, world, args):
    torch.manual_seed(0)
    cfg = lm.LMConfig(d_model=args.d_model, n_layers=args.layers, n_heads=args.heads, context=args.context)
    data = lm.stdlib_corpus(max_bytes=2_000_000)
    gen = torch.Generator().manual_seed(1 + rank)  # each process its own data
    runs = {}
    for name in NAMES:
        model = lm.TransformerLM(cfg, seed=0)
        runs[name] = (model, DDP(model), make(name, model, args))
    times = {n: {"block": [], "cpu": [], "fwd_bwd": [], "step": []} for n in NAMES}

    def block(name, record):
        model, net, opt = runs[name]
        fb = st = 0.0
        dist.barrier()
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(args.interval):
            x, y = lm.sample_batch(data, args.batch, args.context, gen)
            a = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            logits = net(x)
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
            loss.backward()
            b = time.perf_counter()
            opt.step()
            c = time.perf_counter()
            fb += b - a
            st += c - b
        cpu = time.process_time() - c0
        dist.barrier()
        total = time.perf_counter() - t0
        if record:
            times[name]["block"].append(total / args.interval)
            times[name]["cpu"].append(cpu / args.interval)
            times[name]["fwd_bwd"].append(fb / args.interval)
            times[name]["step"].append(st / args.interval)

    if args.profile:  # where IsoAdam's time goes: cProfile of its blocks (after a warm-up block)
        import cProfile
        import io
        import pstats

        block("IsoAdam", record=False)
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(args.blocks):
            block("IsoAdam", record=True)
        prof.disable()
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(25)
        return {"profile": out.getvalue(), "times": times}
    for i in range(1 + args.blocks):
        for name in NAMES:
            block(name, record=i > 0)
    comm = collective_bytes(runs["IsoAdam"][0], args, world)
    return {"times": times, "comm": comm, "params": sum(p.numel() for p in runs["Adam"][0].parameters())}


# ----------------------------------------------------------------------------- FSDP2 vs DDP
FSDP_NAMES = ("AdamW", "Muon", "IsoAdam", "Shampoo")
_COUNTED = ("all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_single", "reduce_scatter_tensor",
            "reduce_scatter_single", "all_to_all_single", "reduce", "broadcast")


def count_collectives(counter):
    """Wrap ``torch.distributed``'s collectives so that each adds its input's bytes to ``counter[0]``."""
    import inspect

    for name in _COUNTED:
        real = getattr(dist, name, None)
        if real is None:
            continue
        params = list(inspect.signature(real).parameters)
        arg = next(a for a in ("input", "input_tensor", "tensor") if a in params)
        index = params.index(arg)

        def wrapped(*a, _real=real, _index=index, _arg=arg, **k):
            t = k.get(_arg, a[_index] if len(a) > _index else None)
            if isinstance(t, torch.Tensor):
                counter[0] += t.numel() * t.element_size()
            return _real(*a, **k)

        setattr(dist, name, wrapped)


def make_fsdp(name, model):
    from isolab.optim import IsoAdam, Muon, Shampoo

    if name == "AdamW":
        return torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    if name == "Muon":
        return Muon(model, lr=0.02, adam_lr=1e-3, head=model.head)
    if name == "IsoAdam":
        return IsoAdam(model, lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1, head=model.head)
    return Shampoo(model, lr=0.01, adam_lr=1e-3, root_interval=10, head=model.head)


def fsdp_worker(rank, world, args):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    counter = [0]
    count_collectives(counter)
    mesh = init_device_mesh("cpu", (world,))
    cfg = lm.LMConfig(d_model=args.d_model, n_layers=args.layers, n_heads=args.heads, context=args.context)
    data = lm.stdlib_corpus(max_bytes=2_000_000)
    gen = torch.Generator().manual_seed(1 + rank)

    def ddp_hook(state, bucket):  # torch's own all-reduce of the bucket, through the wrapped dist.all_reduce
        return default_hooks.allreduce_hook(state, bucket)

    runs = {}
    for name in FSDP_NAMES:
        for kind in ("DDP", "FSDP2"):
            model = lm.TransformerLM(cfg, seed=0)
            if kind == "DDP":
                net = DDP(model)
                net.register_comm_hook(None, ddp_hook)
            else:
                for block in model.blocks:
                    fully_shard(block, mesh=mesh)
                net = fully_shard(model, mesh=mesh)
            runs[name, kind] = (net, make_fsdp(name, model))
    times = {key: [] for key in runs}
    sent = {key: [] for key in runs}
    for i in range(1 + args.blocks):
        for key, (net, opt) in runs.items():
            dist.barrier()
            c0, t0 = counter[0], time.perf_counter()
            for _ in range(args.interval):
                x, y = lm.sample_batch(data, args.batch, args.context, gen)
                opt.zero_grad(set_to_none=True)
                logits = net(x)
                torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).backward()
                opt.step()
            dt, bytes_ = (time.perf_counter() - t0) / args.interval, (counter[0] - c0) / args.interval
            dist.barrier()
            if i > 0:
                times[key].append(dt)
                sent[key].append(bytes_)
    return {"times": times, "bytes": sent}


def main_fsdp(args):
    t0 = time.time()
    results = launch(fsdp_worker, args.world, args, threads=args.threads, timeout=3600)
    tokens = args.batch * args.context
    print(f"bench_distributed --fsdp: {args.world} processes x {args.threads} thread(s), gloo; TransformerLM "
          f"d={args.d_model}, {args.layers} blocks, {tokens} tokens per process and step; {args.blocks} interleaved "
          f"blocks of {args.interval} steps ({time.time() - t0:.0f} s in all)")
    print("ms per step: the fastest block (per block the slowest process); MiB per step: what each process hands "
          "to collectives (measured, the mean over the timed blocks)")
    print(f"{'optimizer':10s} {'DDP ms':>9s} {'FSDP2 ms':>9s} {'FSDP/DDP':>9s} {'DDP MiB':>9s} {'FSDP2 MiB':>10s} "
          f"{'FSDP/DDP':>9s}")
    for name in FSDP_NAMES:
        ms, mib = {}, {}
        for kind in ("DDP", "FSDP2"):
            blocks = [max(r["times"][name, kind][i] for r in results) for i in range(args.blocks)]
            ms[kind] = 1e3 * min(blocks)
            mib[kind] = statistics.mean(max(r["bytes"][name, kind][i] for r in results)
                                        for i in range(args.blocks)) / 2**20
        print(f"{name:10s} {ms['DDP']:9.1f} {ms['FSDP2']:9.1f} {ms['FSDP2'] / ms['DDP']:9.2f} {mib['DDP']:9.2f} "
              f"{mib['FSDP2']:10.2f} {mib['FSDP2'] / mib['DDP']:9.2f}")
    return 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--context", type=int, default=256)
    p.add_argument("--batch", type=int, default=32, help="sequences per process and step (default 32: 8192 tokens)")
    p.add_argument("--interval", type=int, default=10, help="statistics/root refresh interval = block length")
    p.add_argument("--blocks", type=int, default=4, help="timed blocks per optimizer (after one warm-up block)")
    p.add_argument("--quick", action="store_true", help="2 layers, 8 sequences, 2 blocks: a smoke test, not the target")
    p.add_argument("--profile", action="store_true", help="profile IsoAdam's blocks (cProfile, rank 0) instead")
    p.add_argument("--fsdp", action="store_true", help="FSDP2 against DDP: step time and bytes per step (issue 30)")
    args = p.parse_args(argv)
    if args.quick:
        args.layers, args.batch, args.blocks = 2, 8, 2
    if args.fsdp:
        return main_fsdp(args)
    t0 = time.time()
    results = launch(worker, args.world, args, threads=args.threads, timeout=3600)
    if args.profile:
        for r, res in enumerate(results):
            steps = res["times"]["IsoAdam"]
            print(f"rank {r}: IsoAdam ms per step, by block: {[round(1e3 * t) for t in steps['block']]}; "
                  f"step(): {[round(1e3 * t) for t in steps['step']]}")
        print(results[0]["profile"])
        return 0
    # a step is as slow as its slowest process: per block, the maximum over the ranks
    med = {}
    for name in NAMES:
        blocks = [max(r["times"][name]["block"][i] for r in results) for i in range(args.blocks)]
        cpus = [max(r["times"][name]["cpu"][i] for r in results) for i in range(args.blocks)]
        med[name] = {
            "best": min(blocks),
            "median": statistics.median(blocks),
            "cpu": statistics.median(cpus),
            "fwd_bwd": min(results[0]["times"][name]["fwd_bwd"]),
            "opt": min(results[0]["times"][name]["step"]),
        }
    tokens = args.batch * args.context
    print(f"bench_distributed: {args.world} processes x {args.threads} thread(s), gloo, DDP; "
          f"TransformerLM d={args.d_model}, {args.layers} blocks, context {args.context}, "
          f"{args.batch} sequences = {tokens} tokens per process; {results[0]['params'] / 1e6:.2f} M parameters")
    print(f"IsoAdam/Iso: stat_interval = root_interval = {args.interval}; {args.blocks} interleaved blocks of "
          f"{args.interval} steps per optimizer ({time.time() - t0:.0f} s in all)")
    print("ms per step: best = fastest block (least disturbed by other programs), median block, median CPU time;")
    print("fwd+bwd and step() from rank 0's fastest block")
    print(f"{'optimizer':10s} {'best':>8s} {'median':>8s} {'cpu':>8s} {'fwd+bwd':>8s} {'step()':>8s} "
          f"{'best/Adam':>10s} {'cpu/Adam':>9s} {'best/Muon':>10s}")
    for name in NAMES:
        m = med[name]
        print(f"{name:10s} {1e3 * m['best']:8.1f} {1e3 * m['median']:8.1f} {1e3 * m['cpu']:8.1f} "
              f"{1e3 * m['fwd_bwd']:8.1f} {1e3 * m['opt']:8.1f} {m['best'] / med['Adam']['best']:10.3f} "
              f"{m['cpu'] / med['Adam']['cpu']:9.3f} {m['best'] / med['Muon']['best']:10.3f}")
    comm = results[0]["comm"]
    print(f"bytes per process into collectives per {args.interval} steps: "
          + ", ".join(f"{k} {v / 2**20:.2f} MiB" for k, v in comm.items()))
    ratio = med["IsoAdam"]["best"] / med["Adam"]["best"]
    verdict = "PASS" if ratio <= TARGET else "FAIL"
    print(f"target: IsoAdam data-parallel step <= {TARGET}x Adam's (fastest blocks): {ratio:.3f}x  {verdict}"
          f"   (median blocks {med['IsoAdam']['median'] / med['Adam']['median']:.3f}x, "
          f"CPU time {med['IsoAdam']['cpu'] / med['Adam']['cpu']:.3f}x)")
    print(f"Muon / Adam: {med['Muon']['best'] / med['Adam']['best']:.3f}x   "
          f"Iso / Adam: {med['Iso']['best'] / med['Adam']['best']:.3f}x   "
          f"IsoAdam / Muon: {med['IsoAdam']['best'] / med['Muon']['best']:.3f}x")
    return 0 if verdict == "PASS" or args.quick else 1


if __name__ == "__main__":
    raise SystemExit(main())
