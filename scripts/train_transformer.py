"""Chapter 11's Transformer comparison under Part III's protocol: Adam, IsoAdam, Muon and
SOAP tuned with the same budget, budget-matched, scored on held-out files and seeds.

For every optimizer and every budget (a number of steps, each with its own warm-up and
cosine schedule) the script

1. tunes the learning rate(s) with :func:`isolab.book.lm_protocol.tune` on the tuning
   seed(s), scoring on the tuning files (nine trials, successive halving by 3, a grid
   moved off its edge at most once);
2. runs the chosen setting on the held-out seeds and scores each run on the test files
   (never trained on, never used for tuning), with the file-clustered standard error and,
   against Adam on the same seed, the standard error of the paired difference.

Everything goes to one JSON file that Chapter 11 reads: the grids, every trial and rung,
the chosen settings, the held-out losses with their curves, the seeds, the command and a
description of the machine. Step timings are a separate, interleaved measurement
(``scripts/ch11_timing.py``), because the runs here share the machine.

Usage::

    python scripts/train_transformer.py --size chapter   # d 64, L 2: about 100 minutes on one core
    python scripts/train_transformer.py --size full      # d 128, L 4 (787,584 parameters): about 155 minutes
    python scripts/train_transformer.py --size tiny --out /tmp/t.json   # seconds (tests)
    python scripts/train_transformer.py --size chapter --redo-edges     # choices on an edge: move the grid again
    python scripts/train_transformer.py --size chapter --rechoose       # a saved file whose last search alone decided
    python scripts/train_transformer.py --size chapter --add adam2      # one more optimizer (here a control)
    python scripts/train_transformer.py --size chapter --add adam --budgets 2700   # a longer reference budget
    python scripts/train_transformer.py --size chapter --without-retuning   # IsoAdam at Adam's tuned settings

The saved chapter-size file was made by the first command with one move of a grid
allowed, then ``--redo-edges`` (two, as in Chapter 10), ``--add adam2``, ``--add
isoadam2``, ``--add soap2`` and ``--rechoose``; the file records each command. ``--merge-from`` copies an extension
made on a copy of a file that another run was still writing.
"""

from __future__ import annotations

import argparse
import math
import shlex
import sys
import time
from dataclasses import asdict
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from isolab.book import lm, lm_protocol as P  # noqa: E402
from isolab.book.engine.intervals import median_interval  # noqa: E402

TRAIN_LOSS_STRIDE = 10   # the saved training loss: the mean of every 10 steps
MAX_SHIFTS = 2           # moves of a grid off its edge, as in Chapter 10's protocol


def default_out(size: str) -> Path:
    return ROOT / "results" / f"transformer_{size}.json"


def _summary(values):
    """The median over seeds with its order-statistic interval and that interval's exact
    coverage (a diverged seed counts as ``inf``, the worst score), and the mean, min and max
    of the finite values."""
    iv = median_interval(values, 0.9)
    finite = [v for v in values if math.isfinite(v)]
    return {"median": iv.median, "interval": [iv.low, iv.high], "coverage": iv.coverage,
            "mean": sum(finite) / len(finite) if finite else math.inf, "min": min(values), "max": max(values)}


def _strided(values, k):
    return [sum(values[i:i + k]) / len(values[i:i + k]) for i in range(0, len(values), k)]


def _entry(results, name, steps, cfg, kw, baseline, log, prior=None):
    """Tune ``name`` at ``steps`` and run the choice on the held-out seeds; store both in
    ``results``. ``baseline[steps]`` holds Adam's window losses per held-out seed (filled
    when ``name`` is Adam) for the paired standard errors."""
    key = f"{name}/{steps}"
    t = time.perf_counter()
    tuned = P.tune(name, steps, seeds=cfg["tuning_seeds"], max_shifts=MAX_SHIFTS, log=log, prior=prior, **kw)
    runs = P.heldout(name, tuned, cfg["heldout_seeds"], references=None if name == "adam" else baseline[steps], **kw)
    if name == "adam":
        baseline[steps] = {s: r["window_loss"] for s, r in zip(cfg["heldout_seeds"], runs)}
    per_seed = [{"seed": s, "loss": r["loss"], "se": r["se"], "paired_se": r.get("paired_se"),
                 "diverged": r["diverged"], "curve_step": r["curve_step"], "curve_loss": r["curve_loss"],
                 "train_loss": _strided(r["train_loss"], TRAIN_LOSS_STRIDE), "seconds": r["seconds"]}
                for s, r in zip(cfg["heldout_seeds"], runs)]
    results["tuned"][key] = {**tuned, "seconds": time.perf_counter() - t}
    results["heldout"][key] = {"runs": per_seed, "summary": _summary([r["loss"] for r in runs]),
                               "diverged": sum(r["diverged"] for r in runs)}
    if log is not None:
        s = results["heldout"][key]["summary"]
        log(f"{key}: lr {tuned['lr']:.3g} side {tuned['side_lr']} interior {tuned['interior']}; held-out "
            f"{s['median']:.4f} [{s['interval'][0]:.4f}, {s['interval'][1]:.4f}]; {time.perf_counter() - t:.0f} s")


def _saved(out: str | Path) -> dict:
    """The saved results at ``out``, which an extension needs to exist."""
    results = lm.load_results(out)
    if results is None:
        raise FileNotFoundError(f"{out} does not exist: run the protocol first")
    return results


def extend(size: str, out: str | Path, keys, *, reason: str, threads: int = 1, log=print) -> dict:
    """Run the entries ``keys`` (``"optimizer/steps"``) of a saved file again or for the first
    time, leaving the others as they are. An entry that exists keeps its saved searches
    and continues them (runs are deterministic, so this equals a full rerun with the
    current :data:`MAX_SHIFTS`). Adam's held-out runs at an entry's budget are run again
    for the paired errors, and must reproduce the saved losses. The file records the
    command, the keys and ``reason``."""
    torch.set_num_threads(threads)
    results = _saved(out)
    cfg = P.SIZES[size]
    t0 = time.perf_counter()
    data = P.data_for(size)
    kw = dict(model_cfg=cfg["model"], batch=cfg["batch"], data=data)
    baseline: dict[int, dict[int, torch.Tensor]] = {}
    for key in keys:
        name, steps = key.split("/")
        steps = int(steps)
        if name != "adam" and steps not in baseline:
            adam = results["tuned"][f"adam/{steps}"]
            runs = P.heldout("adam", adam, cfg["heldout_seeds"], curve_points=0, **kw)
            saved = [r["loss"] for r in results["heldout"][f"adam/{steps}"]["runs"]]
            if [r["loss"] for r in runs] != saved:
                raise RuntimeError(f"Adam's held-out runs at {steps} steps do not reproduce the saved ones")
            baseline[steps] = {s: r["window_loss"] for s, r in zip(cfg["heldout_seeds"], runs)}
        prior = results["tuned"][key]["searches"] if key in results["tuned"] else None
        _entry(results, name, steps, cfg, kw, baseline, log, prior=prior)
        lm.save_results(results, out)
    results["meta"].setdefault("extensions", []).append({
        "command": "python " + " ".join(map(shlex.quote, sys.argv)), "keys": list(keys), "reason": reason,
        "max_shifts": MAX_SHIFTS, "wall_time_s": time.perf_counter() - t0, "finished": time.strftime("%Y-%m-%d %H:%M:%S")})
    results["meta"]["max_shifts"] = MAX_SHIFTS
    lm.save_results(results, out)
    return results


def redo_edges(size: str, out: str | Path, threads: int = 1, log=print) -> dict:
    """:func:`extend` on every saved entry whose choice ended on an edge of its grid (a
    file written when fewer moves were allowed)."""
    results = _saved(out)
    keys = [k for k, e in results["tuned"].items() if not e["interior"]]
    return extend(size, out, keys, reason=f"choices on an edge, tuned again with up to {MAX_SHIFTS} moves",
                  threads=threads, log=log)


def rechoose(size: str, out: str | Path, threads: int = 1, log=print) -> dict:
    """:func:`extend` on every saved entry whose setting is not the best full-budget trial of
    all its searches (the rule of :func:`isolab.book.lm_protocol.tune`; a file written when
    the last search alone decided): the searches are kept, the held-out seeds rerun."""
    results = _saved(out)
    keys = []
    for key, entry in results["tuned"].items():
        name, searches = key.split("/")[0], entry["searches"]
        at = P.best_of_searches(searches)
        if at is not None and P.grid_trials(name, searches[at[0]]["shift"])[at[1]] != (entry["lr"], entry["side_lr"]):
            keys.append(key)
    if not keys:
        log("every saved choice is already the best trial of its searches")
        return results
    return extend(size, out, keys, reason="the choice is the best full-budget trial of all the searches "
                  "(a moved grid had dropped an earlier winner in its first rung)", threads=threads, log=log)


#: The paper's claim of its Figure 1 tested as stated: IsoAdam run at *Adam's* tuned setting
#: (no tuning of its own), one rate and two rates.
WITHOUT_RETUNING = {"isoadam": "adam", "isoadam2": "adam2"}


def without_retuning(size: str, out: str | Path, threads: int = 1, log=print) -> dict:
    """Run IsoAdam on the held-out seeds at the learning rate(s) Adam's tuning chose, at every
    budget, and store the runs under ``results["without_retuning"]["isoadam/<steps>"]``
    (and ``isoadam2``) with the setting they took: the paper's "a speedup without
    retuning", paired with Adam's own held-out runs on the same seeds."""
    torch.set_num_threads(threads)
    results = _saved(out)
    cfg = P.SIZES[size]
    t0 = time.perf_counter()
    data = P.data_for(size)
    kw = dict(model_cfg=cfg["model"], batch=cfg["batch"], data=data)
    table = results.setdefault("without_retuning", {})
    for name, source in WITHOUT_RETUNING.items():
        for key in [k for k in results["tuned"] if k.startswith(f"{source}/")]:
            steps = int(key.split("/")[1])
            setting = results["tuned"][key]
            runs = P.heldout(name, {"lr": setting["lr"], "side_lr": setting["side_lr"], "steps": steps},
                             cfg["heldout_seeds"], curve_points=0, **kw)
            table[f"{name}/{steps}"] = {
                "setting_from": key, "lr": setting["lr"], "side_lr": setting["side_lr"],
                "runs": [{"seed": s, "loss": r["loss"], "se": r["se"], "diverged": r["diverged"], "seconds": r["seconds"]}
                         for s, r in zip(cfg["heldout_seeds"], runs)],
                "summary": _summary([r["loss"] for r in runs])}
            log(f"{name} at {key}'s setting: held-out {table[f'{name}/{steps}']['summary']['median']:.4f}")
            lm.save_results(results, out)
    results["meta"].setdefault("extensions", []).append({
        "command": "python " + " ".join(map(shlex.quote, sys.argv)), "keys": sorted(table),
        "reason": "IsoAdam at Adam's tuned settings, without retuning (the paper's Figure 1 claim)",
        "wall_time_s": time.perf_counter() - t0, "finished": time.strftime("%Y-%m-%d %H:%M:%S")})
    lm.save_results(results, out)
    return results


def merge_extension(source: str | Path, out: str | Path) -> dict:
    """Copy the entries of ``source``'s last extension (made on a copy of ``out`` while
    another process still wrote ``out``) into ``out``, with its record."""
    src, dst = lm.load_results(source), lm.load_results(out)
    record = src["meta"]["extensions"][-1]
    for key in record["keys"]:
        if key in dst["tuned"] and (src["tuned"][key]["searches"][: len(dst["tuned"][key]["searches"])]
                                    != dst["tuned"][key]["searches"]):
            raise ValueError(f"{key}: {source} does not continue the searches saved in {out}")
        dst["tuned"][key], dst["heldout"][key] = src["tuned"][key], src["heldout"][key]
    dst["meta"].setdefault("extensions", []).append({**record, "merged_from": str(source)})
    dst["meta"]["max_shifts"] = src["meta"]["max_shifts"]
    lm.save_results(dst, out)
    return dst


def run(size: str, optimizers=P.OPTIMIZERS, budgets=None, out: str | Path | None = None, threads: int = 1,
        log=print) -> dict:
    """Tune and evaluate every optimizer at every budget of ``size``; return (and save to
    ``out`` after every optimizer and budget) the results dict."""
    torch.set_num_threads(threads)
    cfg = P.SIZES[size]
    budgets = tuple(budgets or cfg["budgets"])
    if "adam" not in optimizers:
        raise ValueError("Adam is the baseline of the paired differences: include it")
    optimizers = ("adam",) + tuple(o for o in optimizers if o != "adam")
    t0 = time.perf_counter()
    data = P.data_for(size)
    kw = dict(model_cfg=cfg["model"], batch=cfg["batch"], data=data)
    meta = {
        "script": "scripts/train_transformer.py", "command": "python " + " ".join(map(shlex.quote, sys.argv)),
        "size": size, "model": asdict(cfg["model"]),
        "batch": cfg["batch"], "budgets": list(budgets), "tuning_seeds": list(cfg["tuning_seeds"]),
        "heldout_seeds": list(cfg["heldout_seeds"]), "data_seed": "100000 + seed",
        "grids": {k: [list(a) for a in v] for k, v in P.GRIDS.items()}, "fixed": P.FIXED,
        "schedule": {"warmup_fraction": P.WARMUP_FRACTION, "min_lr_ratio": P.MIN_LR_RATIO},
        "files": data.n_files, "train_bytes": int(data.train.numel()),
        "tune_windows": len(data.tune), "test_windows": len(data.test), "curve_windows": len(data.curve),
        "train_loss_stride": TRAIN_LOSS_STRIDE, "max_shifts": MAX_SHIFTS, **lm.environment(),
    }
    results = {"meta": meta, "tuned": {}, "heldout": {}}
    baseline: dict[int, dict[int, torch.Tensor]] = {}
    for name in optimizers:
        for steps in budgets:
            _entry(results, name, steps, cfg, kw, baseline, log)
            meta["wall_time_s"] = time.perf_counter() - t0
            meta["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
            if out is not None:
                lm.save_results(results, out)
    return results


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", choices=tuple(P.SIZES), default="chapter")
    ap.add_argument("--optimizers", default=",".join(P.OPTIMIZERS))
    ap.add_argument("--budgets", default=None, help="comma-separated step counts (default: the size's)")
    ap.add_argument("--out", default=None, help="default: results/transformer_SIZE.json")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--redo-edges", action="store_true",
                    help="tune again the saved entries whose choice is on an edge of its grid")
    ap.add_argument("--rechoose", action="store_true",
                    help="rerun the held-out seeds of saved entries whose choice is not the best trial of its searches")
    ap.add_argument("--merge-from", default=None,
                    help="copy the entries of this file's last extension (made on a copy) into --out")
    ap.add_argument("--add", default=None, help="add one optimizer's entries to the saved file")
    ap.add_argument("--without-retuning", action="store_true",
                    help="run IsoAdam at Adam's tuned settings on the held-out seeds (the paper's Figure 1 claim)")
    args = ap.parse_args(argv)
    out = args.out or default_out(args.size)
    budgets = tuple(int(b) for b in args.budgets.split(",")) if args.budgets else None
    if args.redo_edges:
        redo_edges(args.size, out, threads=args.threads)
        return
    if args.rechoose:
        rechoose(args.size, out, threads=args.threads)
        return
    if args.merge_from:
        merge_extension(args.merge_from, out)
        return
    if args.without_retuning:
        without_retuning(args.size, out, threads=args.threads)
        return
    if args.add:
        budgets = budgets or P.SIZES[args.size]["budgets"]
        extend(args.size, out, [f"{args.add}/{b}" for b in budgets], reason=f"{args.add} added", threads=args.threads)
        return
    run(args.size, optimizers=tuple(args.optimizers.split(",")), budgets=budgets,
        out=out, threads=args.threads)


if __name__ == "__main__":
    main()
