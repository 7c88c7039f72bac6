#!/usr/bin/env python
r"""The paper's Figures 3 and 4 and the reading ablation of Iso, under Part III's tuning protocol (version 3.1).

Chapter 10 loads what this script saves: one file per part, so that a partial run is useful,

- ``results/protocol_pilot.json``: the shared pilot of every optimizer of Figures 3 and 4
  at each of its momentum values (:func:`isolab.book.engine.tuning.pilot`), which centres
  the learning-rate range of the knob settings with that momentum;
- ``results/protocol_fig3.npz``: Figure 3, 5 layers, *iterations until the exact expected
  loss falls to 1 % of its initial value* (at most ``steps`` iterations, constant rate: a
  time-to-target race has no budget to schedule for);
- ``results/protocol_fig4.npz``: Figure 4, 40 layers, *the exact expected loss averaged over
  the last 10 % of a budget* of 1000, 500 and 2000 iterations (in that order; a separate
  tuning per budget, every run with a 5 % linear warmup and a cosine decay);
- ``results/protocol_ablation.npz``: Iso and IsoAdam at Figure 4's setup (1000 steps), one
  factor at a time around the setting Figure 4's tuning chose (momentum's placement,
  ``beta_cov``, the library's default weight decay for IsoAdam), each variant lr-tuned
  with the same trials (roots at every step are defined too, but not run by default).

The problem is the paper's (arXiv 2307.12979): ``n = 32``, batch 128, ``y = A x``,
``W_i ~ N(0, I)/sqrt(n)``, mean-squared error (:class:`isolab.book.problems.DeepLinearRegression`),
scored by the exact expected loss ``||A^T - P||_F^2 / n`` (Chapter 10, §10.1).

The protocol (:mod:`isolab.book.engine.tuning`, :data:`~isolab.book.engine.tuning.PROTOCOL`,
stated on the book's protocol page): every optimizer starts from the library's defaults
(:func:`isolab.book.engine.defaults.library_defaults`, read from the signatures) with one
stated deviation, no weight decay for anyone (the regression is realizable and noise-free;
IsoAdam's library default 0.01 is measured beside it in the ablation); a shared pilot centres
each range; every optimizer runs exactly ``coarse + refine`` trials (54 + 12) over its
momentum and, where it has one, its damping or epsilon (:func:`~isolab.book.engine.tuning.knob_grid`);
successive halving on five tuning seeds with the stability rule; the choice runs on 20
held-out seeds and again on 20 fresh seeds. Everything is saved with the result: the pilot,
every trial and rung, the seeds, the schedule, the command, the versions and the hardware.

The run is resumable: every finished entry (and pilot) is in its file, and the same command
run again skips them.

Usage::

    python scripts/run_sweeps.py --part all        # full size -> results/protocol_*.npz (about 2.5 h of one core)
    python scripts/run_sweeps.py --part fig4 --budgets 1000 500   # some budgets only, resumable
    python scripts/run_sweeps.py --part fig4 --only fig4/b1000/iso
    python scripts/run_sweeps.py --reduced         # the tests' configuration -> results/protocol_reduced_*
    python scripts/run_sweeps.py --summary results/protocol_fig4.npz
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

from isolab.book.engine import sweep
from isolab.book.engine.defaults import library_defaults
from isolab.book.engine.intervals import median_interval
from isolab.book.engine.rules_lanes import resolve_hyper
from isolab.book.engine.tuning import (PROTOCOL, knob_grid, lr_scale, metric_kwargs, momentum_of,  # noqa: F401
                                       pilot, scores, tail_steps, tune, with_momentum)
from isolab.book.problems import DeepLinearRegression
from isolab.book.results import Results, Sweep, load

ROOT = Path(__file__).resolve().parents[1]
PARTS = ("fig3", "fig4", "ablation")

#: The optimizers of Figures 3 and 4 (engine names), every one under the same protocol.
OPTIMIZERS = ("sgd", "signsgd", "adam", "muon", "soap", "shampoo", "shampoo_graft", "kfac", "iso", "isoadam")

#: Part III's one deviation from the library's defaults, for everyone: no weight decay (the
#: regression is realizable and noise-free, so there is nothing to regularize). IsoAdam's
#: library default (0.01) runs beside it in the ablation.
DEVIATIONS = {"weight_decay": 0.0}


def base(name: str) -> dict:
    """Every hyperparameter of ``name`` before tuning: the library's defaults (K-FAC: the
    engine's, it has no library class) with :data:`DEVIATIONS`."""
    h = resolve_hyper(name, library_defaults(name))
    h.update({k: v for k, v in DEVIATIONS.items() if k in h})
    return h


def baseline(name: str) -> tuple[str, list, dict]:
    """``(engine optimizer, knob combinations, fixed)`` of an optimizer: the protocol's knobs
    (:func:`~isolab.book.engine.tuning.knob_grid`), every other hyperparameter fixed."""
    b = base(name)
    combos = knob_grid(name, b)
    tuned = set().union(*(set(c) for c in combos))
    return name, combos, {k: v for k, v in b.items() if k not in tuned}


#: The reading ablation: label -> the change to Figure 4's tuned setting at 1000 steps.
VARIANTS = {
    "iso/tuned": {}, "iso/placement=update": {"momentum_placement": "update"},
    "iso/beta_cov=0": {"beta_cov": 0.0}, "iso/beta_cov=0.99": {"beta_cov": 0.99},
    "isoadam/tuned": {}, "isoadam/weight_decay=0.01": {"weight_decay": 0.01},
    "isoadam/beta_cov=0": {"beta_cov": 0.0}, "isoadam/beta_cov=0.99": {"beta_cov": 0.99},
}
#: Variants defined but not run by default (each costs about four times an entry above:
#: roots at every step); ``--only ablation/iso/root_interval=1`` runs one into a separate file.
EXTRA_VARIANTS = {"iso/root_interval=1": {"root_interval": 1}, "isoadam/root_interval=1": {"root_interval": 1}}
VARIANTS.update(EXTRA_VARIANTS)

#: Every fixed-budget run's schedule (Figure 4 and the ablation): 5 % warmup, cosine decay.
SCHEDULE = {"warmup": 0.05, "decay": "cosine"}

FULL = {
    "name": "full",
    "protocol": PROTOCOL["version"],
    "n": 32,
    "batch": 128,
    "tuning_seeds": list(PROTOCOL["tuning_seeds"]),
    "heldout_seeds": list(PROTOCOL["heldout_seeds"]),
    "fresh_seeds": list(PROTOCOL["fresh_seeds"]),
    "pilot": {"seeds": list(PROTOCOL["pilot"]["seeds"]), "span": list(PROTOCOL["pilot"]["span"]),
              "per_decade": PROTOCOL["pilot"]["per_decade"], "range_factor": PROTOCOL["range_factor"]},
    "coarse": PROTOCOL["coarse"],
    "refine": PROTOCOL["refine"],
    "halving": PROTOCOL["halving"],
    "rungs": PROTOCOL["rungs"],
    "interval_level": PROTOCOL["interval_level"],
    "thin": {"dense": 20, "log_points": 60},
    "dtype": "float32",
    "num_threads": 1,
    "fig3": {"depth": 5, "steps": 3000, "metric": "iterations_expected", "threshold": 1e-2, "schedule": None,
             "optimizers": list(OPTIMIZERS), "pilot_steps": 3000},
    "fig4": {"depth": 40, "budgets": [1000, 500, 2000], "metric": "tail_expected_loss", "threshold": None,
             "schedule": SCHEDULE, "optimizers": list(OPTIMIZERS), "pilot_steps": 1000},
    "ablation": {
        # 12 + 6 trials per variant (the lr only, around Figure 4's choice), halving by 3
        "depth": 40, "steps": 1000, "metric": "tail_expected_loss", "threshold": None, "schedule": SCHEDULE,
        "coarse": 12, "refine": 6, "halving": 3, "rungs": 3,
        "variants": [v for v in VARIANTS if v not in EXTRA_VARIANTS], "range_factor": 4.0,
    },
}

#: A configuration small enough for the tests (seconds): the same code path, every entry.
REDUCED = {
    **copy.deepcopy(FULL),
    "name": "reduced",
    "n": 8,
    "batch": 16,
    "tuning_seeds": [0, 1, 2],
    "heldout_seeds": [10, 11, 12, 13, 14, 15],
    "fresh_seeds": [30, 31, 32, 33, 34, 35],
    "coarse": 27,
    "refine": 4,
    "halving": 3,
    "rungs": 2,
    "thin": {"dense": 5, "log_points": 8},
}
REDUCED["pilot"] = {**FULL["pilot"], "seeds": [0], "per_decade": 1}
REDUCED["fig3"].update(depth=3, steps=60, threshold=0.3, pilot_steps=60)
REDUCED["fig4"].update(depth=6, budgets=[20, 40], pilot_steps=20)
REDUCED["ablation"].update(depth=6, steps=20, coarse=6, refine=2, halving=3, rungs=2)


def output_path(config: dict, part: str, directory: Path | None = None) -> Path:
    """``results/protocol_<part>.npz`` (``protocol_reduced_<part>.npz`` for the reduced configuration)."""
    stem = "protocol_" if config["name"] == "full" else f"protocol_{config['name']}_"
    return Path(directory or ROOT / "results") / f"{stem}{part}.npz"


# ----------------------------------------------------------------------------- pieces
def problem_for(config: dict, part: str) -> DeepLinearRegression:
    return DeepLinearRegression(config["n"], config[part]["depth"], config["batch"])


def pilot_path(config: dict, directory: Path | None = None) -> Path:
    """``results/protocol_pilot.json`` (``protocol_reduced_pilot.json``)."""
    stem = "protocol_" if config["name"] == "full" else f"protocol_{config['name']}_"
    return Path(directory or ROOT / "results") / f"{stem}pilot.json"


def pilots(config: dict, part: str, names=None, directory: Path | None = None, verbose: bool = True) -> dict:
    """``{optimizer: {momentum: pilot}}`` of ``part`` (``fig3`` or ``fig4``): each momentum
    value of the protocol at the library's other defaults, loaded from :func:`pilot_path`
    where saved with the same configuration, else run now (each saved as it finishes)."""
    path = pilot_path(config, directory)
    saved = json.loads(path.read_text()) if path.exists() else {}
    p = config[part]
    key = json.dumps(_json({"config": config["pilot"], "n": config["n"], "batch": config["batch"], "part": p,
                            "momenta": PROTOCOL["momenta"], "version": PROTOCOL["version"]}), sort_keys=True)
    mine = saved.setdefault(part, {})
    if mine.get("key") != key:
        mine.clear()
        mine["key"] = key
    entries = mine.setdefault("entries", {})
    cfg = config["pilot"]
    lo, hi = cfg["span"]
    count = int(round(cfg["per_decade"] * np.log10(hi / lo))) + 1
    for name in names or p["optimizers"]:
        done = entries.setdefault(name, {})
        for mu in PROTOCOL["momenta"]:
            if str(mu) in done:
                continue
            t0, c0 = time.perf_counter(), time.process_time()
            out = pilot(problem_for(config, part), name, p["pilot_steps"], with_momentum(name, base(name), mu),
                        metric=p["metric"], threshold=p["threshold"], schedule=p["schedule"], seeds=cfg["seeds"],
                        lrs=np.logspace(np.log10(lo), np.log10(hi), count), range_factor=cfg["range_factor"],
                        dtype=getattr(torch, config["dtype"]), num_threads=config["num_threads"])
            out["seconds"] = {"wall": time.perf_counter() - t0, "cpu": time.process_time() - c0}
            done[str(mu)] = _json(out)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(path.stem + ".partial.json")
            tmp.write_text(json.dumps(saved, indent=1))
            tmp.replace(path)
            log(f"pilot {part}/{name} momentum {mu:g}: centre {out['centre']:.3g} ({out['seconds']['cpu']:.0f} s cpu)",
                verbose)
    return {n: {float(mu): v for mu, v in entries[n].items()} for n in (names or p["optimizers"])}


def tuned_setting(config: dict, name: str, directory: Path | None = None) -> tuple[dict, float]:
    """``(hyper, lr)`` Figure 4's tuning chose for ``name`` at the ablation's budget."""
    label = f"fig4/b{config['ablation']['steps']}/{name}"
    path = output_path(config, "fig4", directory)
    for candidate in (path, path.with_name(path.stem + ".only.npz")):  # the part's file, or an --only run's
        if candidate.exists() and label in load(candidate).labels:
            s = load(candidate)[label]
            return dict(s.hyper), float(s.lrs[0])
    raise FileNotFoundError(f"the ablation starts from {label}: run scripts/run_sweeps.py --part fig4 first")


def jobs(config: dict, part: str, directory: Path | None = None) -> list[dict]:
    """The entries of a part: label, engine optimizer, knobs, fixed, lr range, steps, trials.
    The lr ranges come from the shared pilot (run now if not saved) or, for the ablation,
    from Figure 4's choice (``range_factor`` either side)."""
    if part not in PARTS:
        raise ValueError(f"part must be one of {PARTS}, got {part!r}")
    p = config[part]
    out = []
    if part in ("fig3", "fig4"):
        budgets = [p["steps"]] if part == "fig3" else p["budgets"]
        for steps in budgets:
            for name in p["optimizers"]:
                opt, knobs, fixed = baseline(name)
                label = f"fig3/{name}" if part == "fig3" else f"fig4/b{steps}/{name}"
                out.append(dict(label=label, optimizer=opt, knobs=knobs, fixed=fixed, lr_range=None,
                                steps=steps, **trials_of(config, part)))
    else:
        for label in p["variants"]:
            name = label.split("/")[0]
            out.append(dict(label=f"ablation/{label}", optimizer=name, knobs={}, fixed=None, lr_range=None,
                            change=VARIANTS[label], steps=p["steps"], **trials_of(config, part)))
    return out


def resolve_job(config: dict, part: str, job: dict, directory: Path | None = None, verbose: bool = True) -> dict:
    """The job with its lr range (and, for the ablation, its fixed setting) filled in."""
    job = dict(job)
    if part in ("fig3", "fig4"):
        pl = pilots(config, part, [job["optimizer"]], directory, verbose)[job["optimizer"]]
        first = min(pl)
        job["lr_range"] = tuple(pl[first]["range"])
        job["pilot"] = {"centres": {mu: v["centre"] for mu, v in pl.items()}, "first": first,
                        "pilots": {mu: {k: v[k] for k in ("lrs", "scores", "centre", "range")} for mu, v in pl.items()}}
    else:
        hyper, lr = tuned_setting(config, job["optimizer"], directory)
        f = config[part]["range_factor"]
        job["fixed"] = resolve_hyper(job["optimizer"], {**hyper, **job["change"]})
        job["lr_range"] = (lr / f, lr * f)
    return job


def _setting(config: dict, part: str, key: str):
    """A setting of a part: the part's own, else the configuration's."""
    return config[part].get(key, config[key])


def trials_of(config: dict, part: str) -> dict:
    """``{"coarse": ..., "refine": ...}``: the trials every entry of ``part`` runs."""
    return {"coarse": _setting(config, part, "coarse"), "refine": _setting(config, part, "refine")}


def halving_of(config: dict, part: str) -> int:
    """The successive-halving factor of a part (the configuration's, unless the part sets its own)."""
    return _setting(config, part, "halving")


def engine_kwargs(config: dict, part: str, steps: int) -> dict:
    """The engine arguments of a held-out run (and of any rerun of a saved cell): the
    part's schedule and what its metric records."""
    p = config[part]
    return dict(record_norms=False, dtype=getattr(torch, config["dtype"]), num_threads=config["num_threads"],
                progress=False, schedule=p["schedule"], **metric_kwargs(p["metric"], steps, p["threshold"]))


def heldout_run(config: dict, part: str, label: str, optimizer: str, hyper: dict, lr: float, steps: int,
                seeds, **overrides) -> Sweep:
    """The chosen setting on ``seeds`` (one engine call: one lane per seed); ``overrides``
    replace engine arguments (a test's shorter prefix records the expected loss from 0)."""
    kw = {**engine_kwargs(config, part, steps), **overrides}
    return sweep(problem_for(config, part), optimizer, [float(lr)], int(steps), seeds=tuple(seeds), hyper=hyper,
                 label=label, **kw)


def thin_steps(steps: int, config: dict) -> np.ndarray:
    """The steps a saved run keeps: every step up to ``dense``, ``log_points`` log-spaced
    steps after, and the whole tail the score averages."""
    t = config["thin"]
    dense = np.arange(min(t["dense"], steps) + 1)
    logs = np.round(np.geomspace(max(t["dense"], 1), max(steps, 1), t["log_points"])).astype(np.int64)
    tail = np.arange(tail_steps(steps), steps + 1)
    return np.unique(np.concatenate([dense, logs[logs <= steps], tail, [steps]]))


def thin(s: Sweep, config: dict) -> Sweep:
    """The sweep with its losses kept at :func:`thin_steps` only (``info["loss_steps"]``)."""
    keep = thin_steps(s.steps, config)
    info = dict(s.info, loss_steps=keep.tolist())
    return Sweep(optimizer=s.optimizer, label=s.label, lrs=s.lrs, seeds=s.seeds, loss=s.loss[..., keep].copy(),
                 weight_norm=None, diverged_at=s.diverged_at, hit_at=s.hit_at, threshold=s.threshold,
                 weights=None, hyper=s.hyper, problem=s.problem, info=info,
                 expected_loss=None if s.expected_loss is None else s.expected_loss[..., keep].copy())


def _json(x):
    return json.loads(json.dumps(x, default=lambda v: list(v) if isinstance(v, tuple) else str(v)))


def run_entry(config: dict, part: str, job: dict) -> Sweep:
    """Tune one entry on the tuning seeds, run the choice on the held-out seeds (the thinned
    sweep is saved) and on the fresh seeds (their scores)."""
    p = config[part]
    t0, c0 = time.perf_counter(), time.process_time()
    tuned = tune(problem_for(config, part), job["optimizer"], job["steps"], coarse=job["coarse"],
                 refine=job["refine"], lr_range=job["lr_range"], knobs=job["knobs"], fixed=job["fixed"],
                 tuning_seeds=tuple(config["tuning_seeds"]), metric=p["metric"], threshold=p["threshold"],
                 halving=halving_of(config, part), rungs=_setting(config, part, "rungs"), schedule=p["schedule"],
                 dtype=getattr(torch, config["dtype"]), num_threads=config["num_threads"],
                 scale=None if part == "ablation" else
                 (lambda combo: lr_scale(job["optimizer"], combo, job["pilot"]["centres"])))
    t1, c1 = time.perf_counter(), time.process_time()
    s = heldout_run(config, part, job["label"], job["optimizer"], tuned.hyper, tuned.lr, job["steps"],
                    config["heldout_seeds"])
    t2, c2 = time.perf_counter(), time.process_time()
    fresh = heldout_run(config, part, job["label"], job["optimizer"], tuned.hyper, tuned.lr, job["steps"],
                        config["fresh_seeds"])
    t3, c3 = time.perf_counter(), time.process_time()

    def summary_of(run, seeds):
        per_seed = scores(run, p["metric"])[:, 0]
        iv = median_interval(per_seed, config["interval_level"])
        return {"seeds": list(seeds), "scores": per_seed.tolist(), **iv.as_dict(), "level": config["interval_level"],
                "diverged": int(np.isinf(per_seed).sum()), "diverged_at": run.diverged_at[:, 0].tolist()}

    s.info.update(
        metric=p["metric"], threshold_fraction=p["threshold"],
        tuned=tuned.as_dict(),
        heldout=summary_of(s, config["heldout_seeds"]),
        fresh=summary_of(fresh, config["fresh_seeds"]),
        entry=_json({"knobs": job["knobs"], "fixed": job["fixed"], "lr_range": job["lr_range"],
                     "coarse": job["coarse"], "refine": job["refine"], "steps": job["steps"],
                     "schedule": p["schedule"], "change": job.get("change"),
                     "pilot": job.get("pilot")}),
        seconds={"tuning": t1 - t0, "heldout": t2 - t1, "fresh": t3 - t2, "tuning_cpu": c1 - c0,
                 "heldout_cpu": c2 - c1, "fresh_cpu": c3 - c2},
    )
    return thin(s, config)


def environment() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        if names:
            cpu = names[0]
    except OSError:
        pass
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                                check=False).stdout.strip() or None
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                                    capture_output=True, text=True, check=False).stdout.strip())
    except OSError:
        commit, dirty = None, None
    if not commit:  # run from an exported snapshot of a commit (the background chain does)
        commit, dirty = os.environ.get("ISOLAB_RUN_COMMIT") or None, False if os.environ.get("ISOLAB_RUN_COMMIT") else None
    return {"torch": torch.__version__, "numpy": np.__version__, "python": platform.python_version(),
            "platform": platform.platform(), "cpu": cpu, "cpu_count": os.cpu_count(), "device": "cpu",
            "git_commit": commit, "git_dirty": dirty}


def log(msg: str, verbose: bool) -> None:
    if verbose:
        print(msg, flush=True)


def _describe(s: Sweep) -> str:
    t, h = s.info["tuned"], s.info["heldout"]
    knobs = s.info["entry"]["knobs"]
    names = sorted(knobs) if isinstance(knobs, dict) else sorted(set().union(*map(set, knobs)))
    names = [k for k in names if k != "nesterov"]
    chosen = ", ".join(f"{k}={t['hyper'][k]}" for k in names)
    edge = "interior" if t["interior"] else "AT AN EDGE"
    f = s.info.get("fresh", h)
    return (f"lr {t['lr']:.3g}{' ' + chosen if chosen else ''} ({edge}, {len(t['trials'])} trials) -> held-out "
            f"{h['median']:.4g} [{h['low']:.4g}, {h['high']:.4g}], {h['diverged']} of {len(h['seeds'])} diverged; "
            f"fresh {f['median']:.4g} [{f['low']:.4g}, {f['high']:.4g}], {f['diverged']} diverged")


def run_part(config: dict, part: str, *, labels=None, out: Path | None = None, command: str = "",
             verbose: bool = True) -> Results:
    """Run every entry of ``part`` (or those whose label is in ``labels``), saving after each
    entry to ``out`` (``None``: not saved), and return the sweeps."""
    todo = [j for j in jobs(config, part) if labels is None or j["label"] in labels]
    t_start, c_start = time.perf_counter(), time.process_time()
    done: list[Sweep] = []
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    others: list[Sweep] = []    # entries of the same configuration outside ``labels``: kept in the file
    if out is not None and out.exists():  # resume: keep the finished entries of the same configuration
        same = [x for x in load(out) if x.info["run"]["config"] == _json(config)]
        kept = [x for x in same if x.label in {j["label"] for j in todo}]
        others = [x for x in same if x.label not in {j["label"] for j in todo}]
        done += kept
        todo = [j for j in todo if j["label"] not in {x.label for x in kept}]
        if kept:
            log(f"{part}: resuming, {len(kept)} entries already in {out}", verbose)
    order = [j["label"] for j in jobs(config, part)]
    for k, job in enumerate(todo, 1):
        s = run_entry(config, part, resolve_job(config, part, job, None if out is None else out.parent, verbose))
        done.append(s)
        sec = s.info["seconds"]
        log(f"[{part} {k}/{len(todo)}] {s.label:40s} {_describe(s)}  (tuning {sec['tuning']:.0f} s, held-out "
            f"{sec['heldout']:.0f} s, fresh {sec['fresh']:.0f} s, cpu "
            f"{sec['tuning_cpu'] + sec['heldout_cpu'] + sec['fresh_cpu']:.0f} s, part "
            f"{time.perf_counter() - t_start:.0f} s wall, {time.process_time() - c_start:.0f} s cpu)", verbose)
        meta = {"part": part, "config": _json(config), "command": command, "environment": environment(),
                "started": started, "wall_seconds": time.perf_counter() - t_start,
                "cpu_seconds": time.process_time() - c_start, "entries_done": len(done),
                "entries_total": len(done) + len(todo) - k, "complete": k == len(todo),
                "saved": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "script": "scripts/run_sweeps.py"}
        s.info["run"] = meta
        if out is not None:
            out.parent.mkdir(parents=True, exist_ok=True)
            tmp = out.with_name(out.stem + ".partial.npz")
            Results(sorted(done + others, key=lambda x: order.index(x.label))).save(tmp)
            tmp.replace(out)
    log(f"{part}: {len(done)} entries in {time.perf_counter() - t_start:.0f} s", verbose)
    return Results(done)


def merge(path: Path, new: Results, config: dict, part: str) -> Path:
    """Replace (or add) the entries of ``new`` in the saved part ``path``, in the script's order;
    each entry keeps its own ``info["run"]`` (the command that made it)."""
    old = {s.label: s for s in load(path)} if path.exists() else {}
    old.update({s.label: s for s in new})
    order = [j["label"] for j in jobs(config, part)]
    tmp = path.with_name(path.stem + ".partial.npz")
    Results([old[label] for label in order if label in old]).save(tmp)
    tmp.replace(path)
    return path


def summary(path) -> str:
    """A table of a saved part: label, chosen setting, held-out median and interval."""
    lines = []
    for s in load(path):
        lines.append(f"{s.label:42s} {_describe(s)}")
    r = next(iter(load(path))).info["run"]
    lines.append(f"({r['entries_done']}/{r['entries_total']} entries, {r['wall_seconds']:.0f} s, "
                 f"command: {r['command']})")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", default="all", choices=PARTS + ("all",), help="which part to run (default: all)")
    ap.add_argument("--reduced", action="store_true", help="the small test configuration")
    ap.add_argument("--only", nargs="*", default=None, help="run only these labels (e.g. fig4/b1000/iso)")
    ap.add_argument("--summary", metavar="NPZ", help="print the table of a saved part and exit")
    ap.add_argument("--out-dir", type=Path, default=None, help="where to save (default: results/)")
    ap.add_argument("--budgets", nargs="+", type=int, default=None,
                    help="Figure 4: run only these budgets, into the part's file (its other entries are kept)")
    ap.add_argument("--merge", action="store_true",
                    help="with --only: put the rerun entries into the part's file (replacing those labels) "
                         "instead of a separate <part>.only.npz")
    args = ap.parse_args(argv)
    if args.summary:
        print(summary(args.summary))
        return 0
    config = REDUCED if args.reduced else FULL
    torch.set_num_threads(config["num_threads"])
    command = " ".join(shlex.quote(a) for a in ["python", "scripts/run_sweeps.py", *(sys.argv[1:] if argv is None
                                                                                        else argv)])
    parts = PARTS if args.part == "all" else (args.part,)
    for part in parts:
        labels = None if args.only is None else set(args.only)
        out = output_path(config, part, args.out_dir)
        if labels is not None:
            out = out.with_name(out.stem + ".only.npz")
        elif args.budgets and part == "fig4":
            labels = {j["label"] for j in jobs(config, part) if j["steps"] in args.budgets}
        if labels is not None and not [j for j in jobs(config, part) if j["label"] in labels]:
            continue
        got = run_part(config, part, labels=labels, out=out, command=command)
        if labels is not None and args.merge:
            out = merge(output_path(config, part, args.out_dir), got, config, part)
        print(f"saved {out} ({out.stat().st_size / 1e6:.2f} MB)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
