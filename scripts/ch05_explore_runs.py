#!/usr/bin/env python
r"""The pure noise runs behind Chapter 5's hero figure and explorable, precomputed.

Chapter 5 draws, for every depth k in {1, 2, 4}, optimizer (SGD, Adam, Iso with roots
every step) and weight decay (0, 0.3), four seeds of 400 steps on the pure noise problem
(n = 16, one sample per step) at nine learning rates from 0.01 to 1
(:func:`isolab.book.figures.ch05.compute_run`), and section 5.7's comparison of five optimizers
over 1000 steps (:func:`isolab.book.figures.ch05.compute_comparison`). Iso's runs recompute two inverse square roots
per layer and step, about 3 s of one CPU per setting, too slow for a chapter that must
execute in well under a minute; so the whole grid is computed here once and saved as
float32 logarithms of the total weight norms, and :func:`isolab.book.figures.ch05.explore_run` reads the file
(or computes a setting the file lacks). ``tests/book/test_figures_ch05.py`` recomputes one
setting and compares it with the file.

Usage::

    python scripts/ch05_explore_runs.py      # -> results/ch05_explore_runs.npz (about a minute)
"""

from __future__ import annotations

import itertools
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from isolab.book.figures import ch05  # noqa: E402


def main() -> None:
    torch.set_num_threads(1)
    arrays, start = {}, time.time()
    for depth, optimizer, wd in itertools.product(ch05.STORED_DEPTHS, ch05.OPTIMIZERS, ch05.WEIGHT_DECAYS):
        arrays[ch05.run_key(depth, optimizer, wd)] = ch05.encode(ch05.compute_run(depth, optimizer, wd))
        print(f"{ch05.run_key(depth, optimizer, wd)}: {time.time() - start:.1f} s", flush=True)
    for depth in ch05.COMPARE_DEPTHS:
        for name in ch05.COMPARE_SETUPS:
            arrays[f"compare_{name}_k{depth}"] = ch05.encode(ch05.compute_comparison(name, depth))
            print(f"compare {name} k = {depth}: {time.time() - start:.1f} s", flush=True)
    meta = dict(n=ch05.N, batch=ch05.BATCH, lrs=list(ch05.EXPLORE_LRS), steps=ch05.EXPLORE_STEPS,
                seeds=ch05.EXPLORE_SEEDS, optimizers={k: [v[0], v[1]] for k, v in ch05.OPTIMIZERS.items()},
                compare={k: [list(v[0]), v[1]] for k, v in ch05.COMPARE_SETUPS.items()},
                compare_steps=ch05.COMPARE_STEPS, torch=torch.__version__)
    ch05.RESULTS.parent.mkdir(exist_ok=True)
    np.savez_compressed(ch05.RESULTS, meta=np.array(json.dumps(meta)), **arrays)
    print(f"wrote {ch05.RESULTS} ({ch05.RESULTS.stat().st_size / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
