#!/usr/bin/env python
"""Chapter 12's trained comparison of the two-sided family (isolab.book.family), saved.

Runs the whole experiment under Part III's protocol (version 3: a shared pilot, eight
optimizers tuned with the same 54 + 12 trials over the learning rate, the momentum and the
damping or epsilon, on five tuning seeds; the choice on 20 held-out and 20 fresh seeds),
then the centerpiece's schedules (Muon and Iso at their choices, the cosine decay ending at
each floor of family.FLOORS), and writes results/ch12_family.npz: per optimizer the pilot, the
tuned setting, the held-out and fresh scores with their divergences, the held-out loss
curves, and the schedule runs. Resumable: a finished member is kept in
results/ch12_family.partial.json and not run again.

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
from isolab.book.engine.tuning import PROTOCOL

ROOT = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "ch12_family.npz")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    start, cpu0 = time.perf_counter(), time.process_time()
    partial = args.out.with_name(args.out.stem + ".partial.json")
    done = json.loads(partial.read_text()) if partial.exists() else {"runs": {}, "curves": {}, "seconds": {}}
    for label in family.FAMILY:
        if label in done["runs"]:
            continue
        t0, c0 = time.perf_counter(), time.process_time()
        v = family.run([label], log=lambda m: print(m, flush=True))[label]
        done["runs"][label] = {k: v[k] for k in ("pilot", "tuned", "heldout", "fresh")}
        done["curves"][label] = v["curve"].tolist()
        done["seconds"][label] = {"wall": time.perf_counter() - t0, "cpu": time.process_time() - c0}
        partial.write_text(json.dumps(done, default=float))
    t0 = time.perf_counter()
    sched = family.schedule_runs({k: done["runs"][k]["tuned"] for k in ("Muon", "Iso")})
    print(f"schedules: {time.perf_counter() - t0:.0f} s", flush=True)
    arrays = {f"curve/{k}": np.asarray(v) for k, v in done["curves"].items()}
    arrays.update({f"schedule/{label}/{k}": v for label, rec in sched.items() for k, v in rec.items()})
    meta = {"runs": done["runs"], "command": "python scripts/ch12_family.py", "protocol": PROTOCOL,
            "steps": family.STEPS, "schedule": family.SCHEDULE, "floors": list(family.FLOORS),
            "tuning_seeds": list(family.TUNING_SEEDS), "heldout_seeds": list(family.HELD_OUT),
            "fresh_seeds": list(family.FRESH), "seconds": done["seconds"], "torch": torch.__version__,
            "numpy": np.__version__, "cpu": platform.processor() or platform.machine(),
            "wall_seconds_last_call": time.perf_counter() - start, "cpu_seconds_last_call": time.process_time() - cpu0}
    np.savez(args.out, meta=np.array(json.dumps(meta, default=list)), **arrays)
    partial.unlink()
    print(f"saved {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
