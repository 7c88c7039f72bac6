"""Train the paper-sized byte-level Transformer with Adam, IsoAdam and Muon (Chapter 11).

About 800k non-embedding parameters (d_model 128, 4 layers, 4 heads, context 128), on
the Python standard library's own source (``isolab.book.lm.stdlib_corpus``; nothing is
downloaded). The three optimizers start from the same initial weights and see the same
batches in the same order; IsoAdam uses Adam's hyperparameters unchanged, Muon its own
learning rate (0.02) on the hidden matrices. Throughput is printed as it runs; curves,
timings, seeds and a description of the machine go to ``results/transformer_full.json``,
which Chapter 11 loads.

Usage::

    python scripts/train_transformer.py                 # full size (~30 min on 1 CPU core)
    python scripts/train_transformer.py --steps 200     # shorter
    python scripts/train_transformer.py --tiny --out /tmp/t.json   # seconds (tests)
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import asdict
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from isolab.book import lm  # noqa: E402

DEFAULT_OUT = ROOT / "results" / "transformer_full.json"

FULL_MODEL = lm.LMConfig(d_model=128, n_layers=4, n_heads=4, context=128)
FULL_TRAIN = lm.TrainConfig(steps=600, batch=32, warmup=60, eval_interval=25, eval_batches=8)
FULL_CORPUS_BYTES = None  # the whole standard library

TINY_MODEL = lm.LMConfig(d_model=16, n_layers=1, n_heads=2, context=16)
TINY_TRAIN = lm.TrainConfig(steps=6, batch=4, warmup=2, eval_interval=3, eval_batches=2)
TINY_CORPUS_BYTES = 200_000


def run(model_cfg: lm.LMConfig, train_cfg: lm.TrainConfig, corpus_bytes: int | None,
        optimizers=lm.OPTIMIZERS, out: str | Path | None = DEFAULT_OUT, threads: int = 1,
        verbose: bool = True) -> dict:
    """Train every optimizer in ``optimizers`` and return (and, with ``out``, save) the
    results dict: ``{"runs": {name: lm.train(...)}, "meta": {...}}``."""
    torch.set_num_threads(threads)
    log = print if verbose else None
    t0 = time.perf_counter()
    data = lm.stdlib_corpus(max_bytes=corpus_bytes)
    train_data, val_data = lm.split_corpus(data)
    if verbose:
        n_files = len(lm.stdlib_files())
        print(f"corpus: {data.numel():,} bytes from the standard library ({n_files} files); "
              f"train {train_data.numel():,}, validation {val_data.numel():,}")
    runs = {}
    for name in optimizers:
        t = time.perf_counter()
        rec = lm.train(name, model_cfg, train_cfg, train_data, val_data, log=log)
        runs[name] = rec
        if verbose:
            n = len(rec["train_loss"])
            print(f"{name}: {rec['tokens_per_s']:,.0f} tokens/s, "
                  f"{1000 * rec['fwd_bwd_s'] / n:.1f} ms forward+backward and "
                  f"{1000 * rec['opt_s'] / n:.1f} ms optimizer per step; "
                  f"final val loss {rec['val_loss'][-1]:.4f}; {time.perf_counter() - t:.0f} s", flush=True)
    meta = {
        "script": "scripts/train_transformer.py",
        "seed": train_cfg.seed,
        "data_seed": train_cfg.data_seed,
        "corpus_bytes": int(data.numel()),
        "train_bytes": int(train_data.numel()),
        "val_bytes": int(val_data.numel()),
        "wall_time_s": time.perf_counter() - t0,
        "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
        "model": asdict(model_cfg),
        "train": lm._plain(asdict(train_cfg)),
        **lm.environment(),
    }
    results = {"runs": runs, "meta": meta}
    if out is not None:
        lm.save_results(results, out)
        if verbose:
            print(f"saved {out}")
    return results


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=None, help="training steps per optimizer")
    ap.add_argument("--tiny", action="store_true", help="a seconds-long configuration (tests)")
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--optimizers", default=",".join(lm.OPTIMIZERS))
    args = ap.parse_args(argv)
    model_cfg, train_cfg, nbytes = (TINY_MODEL, TINY_TRAIN, TINY_CORPUS_BYTES) if args.tiny else (
        FULL_MODEL, FULL_TRAIN, FULL_CORPUS_BYTES)
    if args.steps is not None:
        train_cfg = lm.TrainConfig(**{**asdict(train_cfg), "steps": args.steps,
                                      "warmup": max(1, min(train_cfg.warmup, args.steps // 10))})
    run(model_cfg, train_cfg, nbytes, optimizers=tuple(args.optimizers.split(",")), out=args.out,
        threads=args.threads)


if __name__ == "__main__":
    main()
