#!/usr/bin/env python
"""Chapter 12's trained comparison of the two-sided family (isolab.book.family), saved.

Runs the whole experiment (eight optimizers tuned with the same 24 trials on five tuning
seeds, evaluated on 20 held-out seeds) once plainly and once under each of three jitters
of the random draws (isolab.book.seeding: a rounding-sized change, as another CPU makes),
and writes results/ch12_family.npz: per optimizer and run, the tuned setting, the held-out
scores, and (plain run) the held-out loss curves. About half an hour (29 minutes on this
2-core machine while other jobs ran; the file records its wall time).

Usage: python scripts/ch12_family.py [--out results/ch12_family.npz]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

from isolab.book import family

ROOT = Path(__file__).resolve().parents[1]
JITTER_SEEDS = (1, 2, 3)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "ch12_family.npz")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    start = time.perf_counter()
    runs, arrays = {}, {}
    for jitter in (None, *JITTER_SEEDS):
        t0 = time.perf_counter()
        outcome = family.run(jitter)
        key = "plain" if jitter is None else f"jitter{jitter}"
        runs[key] = {label: {"tuned": v["tuned"], "scores": v["scores"]} for label, v in outcome.items()}
        if jitter is None:
            arrays.update({f"curve/{label}": v["curve"] for label, v in outcome.items()})
        print(f"{key}: {time.perf_counter() - t0:.0f} s", flush=True)
    meta = {"runs": runs, "command": "python scripts/ch12_family.py", "jitter_seeds": list(JITTER_SEEDS),
            "steps": family.STEPS, "tuning_seeds": list(family.TUNING_SEEDS), "heldout_seeds": list(family.HELD_OUT),
            "schedule": family.SCHEDULE, "protocol": family.PROTOCOL, "torch": torch.__version__,
            "numpy": np.__version__, "cpu": platform.processor() or platform.machine(),
            "wall_seconds": time.perf_counter() - start}
    np.savez(args.out, meta=np.array(json.dumps(meta, default=list)), **arrays)
    print(f"saved {args.out} in {meta['wall_seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
