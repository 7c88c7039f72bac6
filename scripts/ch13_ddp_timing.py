#!/usr/bin/env python
r"""Data-parallel step time of IsoAdam and Muon against Adam, repeated (Chapter 13.6).

The measurement of ``benchmarks/bench_distributed.py`` (its ``worker``: the Transformer of
Chapter 11 at width 256 with ``--layers`` blocks (default 4), context 256, wrapped in DDP on ``--world`` processes
with one thread each and gloo; Adam, Muon, IsoAdam and Iso each with its own model, run
interleaved block by block, a block being ``--interval`` = 10 steps so that refresh-every-10
is amortized inside every block; IsoAdam and Iso with ``stat_interval = root_interval = 10``,
statistics averaged across processes and roots distributed), kept block by block instead of
reduced to the fastest block. For each block ``i`` the step time of an optimizer is the
slowest process's; its ratio to Adam is taken *within* the block (the optimizers of one block
ran back to back, so load from other programs falls on them alike). Saved: every block time
and ratio, for ``--batch`` sequences per process (default 32: 8192 tokens), with the command.
The chapter reports the median ratio with the range over blocks, and Adam's own spread
from block to block as the noise.

Usage::

    python scripts/ch13_ddp_timing.py                  # -> results/ch13_ddp_timing.json (~10 min)
    python scripts/ch13_ddp_timing.py --batch 16 --out results/ch13_ddp_timing_b16.json
    python scripts/ch13_ddp_timing.py --batch 8 --layers 2 --blocks 5   # what the chapter's saved file holds
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from isolab.book.figures.saved import LOCAL, machine_note  # noqa: E402
from isolab.distributed import launch  # noqa: E402


def _bench():
    sys.path.insert(0, str(ROOT / "benchmarks"))   # the processes import the worker from it
    import bench_distributed

    return bench_distributed


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--batch", type=int, default=32, help="sequences of 256 tokens per process and step")
    p.add_argument("--layers", type=int, default=4, help="Transformer blocks (default 4, as the benchmark)")
    p.add_argument("--blocks", type=int, default=6, help="timed blocks per optimizer, after one warm-up block")
    p.add_argument("--out", type=Path, default=LOCAL / "ch13_ddp_timing.json")
    args = p.parse_args(argv)
    bench = _bench()
    run = argparse.Namespace(world=args.world, threads=1, d_model=256, layers=args.layers, heads=4, context=256,
                             batch=args.batch, interval=10, blocks=args.blocks, quick=False, profile=False)
    start = time.time()
    results = launch(bench.worker, args.world, run, threads=1, timeout=7200)
    blocks = {name: [max(r["times"][name]["block"][i] for r in results) for i in range(args.blocks)]
              for name in bench.NAMES}
    ratios = {name: [t / a for t, a in zip(blocks[name], blocks["Adam"])] for name in bench.NAMES if name != "Adam"}
    summary = {name: {"median": statistics.median(v), "min": min(v), "max": max(v)} for name, v in ratios.items()}
    adam = blocks["Adam"]
    out = {
        "description": __doc__.splitlines()[0],
        "command": "python " + " ".join(["scripts/ch13_ddp_timing.py"] + (sys.argv[1:] if argv is None else list(argv))),
        "machine": machine_note("float32"),
        "seconds": round(time.time() - start, 1),
        "settings": {**vars(run), "tokens_per_process": args.batch * 256, "optimizers": list(bench.NAMES),
                     "isoadam": "lm.make_optimizer('isoadam', lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1, "
                                "stat_interval=10, root_interval=10)",
                     "adam": "lm.make_optimizer('adam', lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)",
                     "muon": "lm.make_optimizer('muon', lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)"},
        "block_seconds_per_step": blocks,
        "ratio_to_adam": ratios,
        "summary": summary,
        "adam_block_spread": (max(adam) - min(adam)) / statistics.median(adam),
        "fwd_bwd_rank0": {n: results[0]["times"][n]["fwd_bwd"] for n in bench.NAMES},
        "step_rank0": {n: results[0]["times"][n]["step"] for n in bench.NAMES},
        "collective_bytes_per_interval": results[0]["comm"],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1))
    for name, s in summary.items():
        print(f"{name:8s} / Adam: median {s['median']:.3f} (blocks {s['min']:.3f} .. {s['max']:.3f})")
    print(f"Adam's block-to-block spread: {out['adam_block_spread']:.1%}; wrote {args.out} in {out['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
