#!/usr/bin/env python
"""Chapter 11's Transformer comparison under Part III's protocol (version 3), at one budget.

For Adam, IsoAdam and SOAP with two rates, and Muon (isolab.book.lm_protocol.V3): a shared
pilot of the matrices' learning rate, then the same 9 + 4 trials for every optimizer over
that rate and its damping or epsilon (none for Muon), on three tuning seeds with the
stability rule, scored on the tuning files; the choice is run on five held-out seeds and five
fresh ones, scored on the test files. Then IsoAdam at the setting Adam's search chose (the
paper's claim without retuning), on the same ten seeds. Everything goes to
results/transformer_v3_b<budget>.json, saved after each optimizer (a rerun resumes).

The full protocol (three budgets, five tuning seeds, momentum tuned as well, 54 + 12 trials)
would cost about 14 hours of one core here; this run costs about one.

Usage: python scripts/ch11_protocol.py [--budget 300] [--names adam2 isoadam2 soap2 muon]
       [--out results/transformer_v3_b300.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from isolab.book import lm_protocol as P  # noqa: E402

SIZE = "chapter"


def _runs(name, tuned, seeds, cfg, data, knobs):
    out = []
    for s in seeds:
        r = P.run(name, tuned["lr"], tuned["side_lr"], P.V3["budget"], s, cfg["model"], cfg["batch"], data,
                  score_on="test", curve_points=10, knobs=knobs)
        out.append({"seed": s, "loss": r["loss"], "se": r["se"], "diverged": r["diverged"],
                    "curve_step": r["curve_step"], "curve_loss": r["curve_loss"], "seconds": r["seconds"]})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=int, default=P.V3["budget"], help="steps (default: 300)")
    ap.add_argument("--out", type=Path, default=None, help="default: results/transformer_v3_b<budget>.json")
    ap.add_argument("--names", nargs="+", default=list(P.V3["names"]), choices=list(P.V3["names"]),
                    help="the optimizers to run (default: all four); IsoAdam without retuning needs adam2")
    args = ap.parse_args(argv)
    P.V3["budget"] = args.budget
    args.out = args.out or ROOT / "results" / f"transformer_v3_b{args.budget}.json"
    torch.set_num_threads(1)
    cfg = P.SIZES[SIZE]
    data = P.data_for(SIZE)
    out = json.loads(args.out.read_text()) if args.out.exists() else {
        "meta": {"script": "scripts/ch11_protocol.py", "command": f"python scripts/ch11_protocol.py --budget {args.budget}",
                 "size": SIZE,
                 "protocol": {k: (list(v) if isinstance(v, tuple) else v) for k, v in P.V3.items()},
                 "fixed": {k: dict(v) for k, v in P.FIXED.items()}, "torch": torch.__version__,
                 "processor": platform.processor() or platform.machine(), "seconds": {}},
        "pilot": {}, "tuned": {}, "heldout": {}, "fresh": {}, "without_retuning": {}}

    def save():
        tmp = args.out.with_name(args.out.stem + ".partial.json")
        tmp.write_text(json.dumps(out, indent=1, default=float))
        tmp.replace(args.out)

    for name in args.names:
        if name in out["fresh"]:
            continue
        t0, c0 = time.perf_counter(), time.process_time()
        pl = P.pilot_v3(name, model_cfg=cfg["model"], batch=cfg["batch"], data=data)
        print(f"{name}: pilot centre {pl['centre']:.3g}", flush=True)
        tuned = P.tune_v3(name, model_cfg=cfg["model"], batch=cfg["batch"], data=data, pilot_centre=pl["centre"],
                          log=lambda m: print(m, flush=True))
        held = _runs(name, tuned, P.V3["heldout_seeds"], cfg, data, tuned["knobs"])
        fresh = _runs(name, tuned, P.V3["fresh_seeds"], cfg, data, tuned["knobs"])
        out["pilot"][name], out["tuned"][name], out["heldout"][name], out["fresh"][name] = pl, tuned, held, fresh
        out["meta"]["seconds"][name] = {"wall": time.perf_counter() - t0, "cpu": time.process_time() - c0}
        save()
        print(f"{name}: lr {tuned['lr']:.3g} {tuned['knobs']} held-out "
              f"{sorted(r['loss'] for r in held)} fresh {sorted(r['loss'] for r in fresh)}", flush=True)
    if "isoadam2" in args.names and "adam2" in out["tuned"] and "isoadam2" not in out["without_retuning"]:
        t0, c0 = time.perf_counter(), time.process_time()
        adam = out["tuned"]["adam2"]
        setting = {"lr": adam["lr"], "side_lr": adam["side_lr"]}
        seeds = P.V3["heldout_seeds"] + P.V3["fresh_seeds"]
        out["without_retuning"]["isoadam2"] = {"setting": setting, "runs": _runs("isoadam2", setting, seeds, cfg,
                                                                                  data, None)}
        out["meta"]["seconds"]["without_retuning"] = {"wall": time.perf_counter() - t0,
                                                      "cpu": time.process_time() - c0}
        save()
    print(f"saved {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
