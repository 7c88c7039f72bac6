"""What a training step of Chapter 11's Transformer costs with each optimizer, measured so
that the noise is known.

For each model size the optimizers (at their tuned learning rates, read from
``results/transformer_SIZE.json`` when it exists) each get their own model and warm up
for ``--warmup`` steps. Then, for ``--rounds`` rounds, every optimizer in a freshly
shuffled order runs ``--steps`` steps, and the script records the mean time per step of
forward + backward (``loss.backward()`` included, and so Iso's statistics hooks) and,
separately, of ``optimizer.step`` + ``zero_grad``. Interleaving spreads a slow moment of
the machine over every optimizer instead of one. A second, independent Adam ("adam
again") is timed like the others: how far its times sit from Adam's is the noise of the
measurement, and Chapter 11 makes a time claim only where a difference exceeds it.
A round's ``steps`` is a multiple of the root and preconditioner intervals (10), so
every round pays the same share of refreshes.

Writes ``results/ch11_timing.json`` (per-round times, the order of every round, the
command and the machine). About 3 minutes on one core; run it on a quiet machine.

Usage::

    python scripts/ch11_timing.py
    python scripts/ch11_timing.py --sizes chapter --rounds 3 --out /tmp/t.json   # seconds
"""

from __future__ import annotations

import argparse
import random
import shlex
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from isolab.book import lm, lm_protocol as P, lm_results as R  # noqa: E402
from isolab.book.seeding import generator  # noqa: E402


DEFAULT_OUT = ROOT / "results" / "ch11_timing.json"
LANES = ("adam", "adam again", "isoadam", "muon", "soap")


def tuned_rates(size: str, budget: int | None = None) -> dict:
    """``{optimizer: (lr, side_lr)}`` at ``budget`` (default: the size's longest) from the
    saved protocol results, or each grid's middle where the file or the entry is absent (the
    rate does not change the arithmetic of a step)."""
    try:
        saved = R.load(f"transformer_{size}")
    except FileNotFoundError:
        saved = None
    out = {}
    for name in P.OPTIMIZERS:
        grid = P._grid(name, [0] * len(P.GRIDS[name]))
        middle = grid[len(grid) // 2]
        entry = None if saved is None else saved["tuned"].get(f"{name}/{budget or max(saved['meta']['budgets'])}")
        out[name] = (entry["lr"], entry["side_lr"]) if entry is not None else (middle.lr, middle.side_lr)
    return out


def measure(size: str, *, rounds: int, steps: int, warmup: int, seed: int = 0) -> dict:
    cfg = P.SIZES[size]
    model_cfg, batch = cfg["model"], cfg["batch"]
    data = lm.stdlib_corpus(max_bytes=2_000_000)   # what the bytes say does not change the time
    rates = tuned_rates(size)
    lanes = {}
    for lane in LANES:
        name = "adam" if lane == "adam again" else lane
        model = lm.TransformerLM(model_cfg, seed=seed)
        opt = P.build_optimizer(name, model, *rates[name])
        lanes[lane] = {"model": model, "opt": opt, "gen": generator(P.data_seed(seed)), "fwd_bwd": [], "step": []}

    def advance(lane, n, record):
        s = lanes[lane]
        fb = st = 0.0
        for _ in range(n):
            x, y = lm.sample_batch(data, batch, model_cfg.context, s["gen"])
            t0 = time.perf_counter()
            s["model"].loss(x, y).backward()
            t1 = time.perf_counter()
            s["opt"].step()
            s["opt"].zero_grad(set_to_none=True)
            t2 = time.perf_counter()
            fb += t1 - t0
            st += t2 - t1
        if record:
            s["fwd_bwd"].append(1e3 * fb / n)
            s["step"].append(1e3 * st / n)

    for lane in LANES:
        advance(lane, warmup, record=False)
    order_rng = random.Random(seed)
    orders = []
    for _ in range(rounds):
        order = list(LANES)
        order_rng.shuffle(order)
        orders.append(order)
        for lane in order:
            advance(lane, steps, record=True)
    for s in lanes.values():
        if hasattr(s["opt"], "remove_hooks"):
            s["opt"].remove_hooks()
    return {"rates": {k: list(v) for k, v in rates.items()}, "orders": orders, "batch": batch,
            "model": {k: getattr(model_cfg, k) for k in model_cfg.__dataclass_fields__},
            "ms": {lane: {"fwd_bwd": s["fwd_bwd"], "step": s["step"]} for lane, s in lanes.items()}}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="chapter,full")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--steps", type=int, default=10, help="steps per optimizer per round (a multiple of 10)")
    ap.add_argument("--warmup", type=int, default=12)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    args = ap.parse_args(argv)
    if args.steps % 10:
        raise SystemExit(f"--steps must be a multiple of the refresh interval 10, got {args.steps}")
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    results = {"meta": {"script": "scripts/ch11_timing.py", "command": "python " + " ".join(map(shlex.quote, sys.argv)),
                        "rounds": args.rounds, "steps_per_round": args.steps, "warmup": args.warmup,
                        **lm.environment()}, "sizes": {}}
    for size in args.sizes.split(","):
        results["sizes"][size] = measure(size, rounds=args.rounds, steps=args.steps, warmup=args.warmup)
        ms = results["sizes"][size]["ms"]
        for lane, m in ms.items():
            fb, st = sorted(m["fwd_bwd"]), sorted(m["step"])
            print(f"{size:8s} {lane:11s} forward+backward {fb[len(fb) // 2]:7.1f} ms   step {st[len(st) // 2]:6.1f} ms",
                  flush=True)
    results["meta"]["wall_time_s"] = time.perf_counter() - t0
    results["meta"]["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    lm.save_results(results, args.out)
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
