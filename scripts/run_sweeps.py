#!/usr/bin/env python
r"""The paper's Figures 3 and 4 and the reading ablation of Iso, under Part III's tuning protocol (v2).

Chapter 10 loads what this script saves: one file per part, so that a partial run is useful,

- ``results/protocol_fig3.npz``: Figure 3, 5 layers, *iterations until the exact expected
  loss falls to 1 % of its initial value* (at most ``steps`` iterations, constant rate: a
  time-to-target race has no budget to schedule for);
- ``results/protocol_fig4.npz``: Figure 4, 40 layers, *the exact expected loss averaged over
  the last 10 % of a budget* of 500, 1000 and 2000 iterations (a separate tuning per budget,
  every run with a 5 % linear warmup and a cosine decay);
- ``results/protocol_ablation.npz``: Iso and IsoAdam at Figure 4's setup (1000 steps),
  one factor at a time around our reading (momentum, its placement, ``beta_cov``,
  damping, root interval) and momentum x placement, each variant lr-tuned with the same
  trials.

The problem is the paper's (arXiv 2307.12979): ``n = 32``, batch 128, ``y = A x``,
``W_i ~ N(0, I)/sqrt(n)``, mean-squared error (:class:`isolab.book.problems.DeepLinearRegression`).
The score is the exact expected loss ``||A^T - P||_F^2 / n`` of the network (Chapter 10,
§10.1), not the loss of one minibatch: it carries no sampling noise.

The protocol (:mod:`isolab.book.engine.tuning`, version 2): every optimizer runs exactly
``coarse + refine`` trial configurations (36 + 12): the coarse phase spreads its trials over
its knobs (the learning rate always; momentum ``{0, 0.9, 0.95}`` where it has one; ``beta2``,
``beta_cov`` or K-FAC's damping where it has them), the refine phase spends 12 more on the
learning rate around the coarse winner; no grid is moved, so the count is the count run.
Successive halving on five tuning seeds inside each phase; a configuration that diverges on
any tuning seed is out (the stability rule). The chosen setting is then run on 20 held-out
seeds and reported as the median with its order-statistic interval
(:mod:`isolab.book.engine.intervals`: at least 90 %, exactly 95.9 % for 20 seeds). Every
hyperparameter is written out below (nothing is left to a library default) and saved with
the result; so are the schedule, the seeds, every trial and rung, the command, the versions
and the hardware.

What is saved (:mod:`isolab.book.results` format, one :class:`~isolab.book.results.Sweep`
per entry, labelled ``"fig3/iso"``, ``"fig4/b1000/iso"``, ``"ablation/iso/momentum=0"``):
the held-out run of the chosen setting (one learning rate x the held-out seeds; the batch
loss and the expected loss at a thinned set of steps plus the whole scored tail,
``info["loss_steps"]``), and in ``info``: ``tuned`` (every trial and rung with its tuning
score, the chosen setting, the edge check), ``heldout`` (seeds, per-seed scores, median,
interval and its coverage), ``entry`` (the knobs, fixed hyperparameters, schedule, lr
range), ``seconds``, and ``run`` (configuration, command, versions, hardware, wall time).

The run is resumable: an interrupted part keeps every finished entry in its file, and the
same command run again skips them.

Usage::

    python scripts/run_sweeps.py --part all        # full size -> results/protocol_{fig3,fig4,ablation}.npz
    python scripts/run_sweeps.py --part fig4
    python scripts/run_sweeps.py --reduced         # the tests' configuration -> results/protocol_reduced_*.npz
    python scripts/run_sweeps.py --part ablation --only ablation/iso/momentum=0.9 --merge   # rerun entries in place
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
from isolab.book.engine.intervals import median_interval
from isolab.book.engine.tuning import metric_kwargs, scores, tail_steps, tune
from isolab.book.problems import DeepLinearRegression
from isolab.book.results import Results, Sweep, load

ROOT = Path(__file__).resolve().parents[1]
PARTS = ("fig3", "fig4", "ablation")

MOMENTA = (0.0, 0.9, 0.95)

# Every hyperparameter of every lane, written out (the engine's names; isolab.book.engine.DEFAULTS
# has the same keys): a later change of a library default cannot move these results.
SGD = dict(momentum=0.0, nesterov=False, weight_decay=0.0)
SIGNSGD = dict(momentum=0.0, weight_decay=0.0)
ADAM = dict(betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
MUON = dict(momentum=0.95, nesterov=True, ns_steps=5, exact=False, weight_decay=0.0)
SHAMPOO = dict(beta=1.0, damping=1e-6, root_interval=10, weight_decay=0.0)
GRAFT = dict(betas=(0.9, 0.999), graft_eps=1e-8, damping=1e-6, root_interval=10, weight_decay=0.0)
SOAP = dict(betas=(0.95, 0.95), shampoo_beta=None, eps=1e-8, precondition_frequency=10, weight_decay=0.0)
KFAC = dict(momentum=0.9, nesterov=False, beta_cov=0.95, damping=0.1, root_interval=10, weight_decay=0.0)
#: No weight decay for anyone: the regression is realizable and noise-free (the target is
#: a linear map of the input), so there is nothing to regularize, and decay would only pull
#: the product away from the answer.
ISO = dict(momentum=0.95, nesterov=True, momentum_placement="gradient", beta_cov=0.95, damping=1e-3,
           root_interval=10, root_method="eigh", root_tol=None, root_fallback="auto", weight_decay=0.0)
ISOADAM = dict(betas=(0.9, 0.999), eps=1e-8, beta_cov=0.95, damping=1e-3, root_interval=10, root_method="eigh",
               root_tol=None, root_fallback="auto", weight_decay=0.0)


def _betas(beta1s, beta2s, **extra) -> list:
    return [{"betas": (b1, b2), **extra} for b1 in beta1s for b2 in beta2s]


def _fixed(base: dict, knobs) -> dict:
    tuned = set(knobs) if isinstance(knobs, dict) else set().union(*(set(c) for c in knobs))
    return {k: v for k, v in base.items() if k not in tuned}


#: label -> (engine optimizer, knobs (name -> values, or the list of combinations), fixed hyperparameters)
BASELINES = {
    # SGD: momentum as a knob, Nesterov's form whenever there is momentum
    "sgd": ("sgd", [dict(momentum=0.0, nesterov=False), dict(momentum=0.9, nesterov=True),
                    dict(momentum=0.95, nesterov=True)]),
    "sgd_plain": ("sgd", {}),  # plain SGD, no momentum (the whole budget on the lr)
    "signsgd": ("signsgd", {"momentum": MOMENTA}),  # SignSGD (momentum 0) and Signum
    "signsgd_plain": ("signsgd", {}),
    "adam": ("adam", _betas(MOMENTA, (0.99, 0.999))),
    "muon": ("muon", {"momentum": MOMENTA}),
    "soap": ("soap", _betas(MOMENTA, (0.95, 0.99))),
    "shampoo": ("shampoo", {}),  # Gupta et al. 2018: sums forever, no grafting
    "shampoo_graft": ("shampoo_graft", _betas(MOMENTA, (0.99, 0.999))),
    # K-FAC: momentum and the damping its authors tune (Martens & Grosse adapt it; we search it)
    "kfac": ("kfac", {"momentum": (0.0, 0.9), "damping": (0.1, 0.3, 1.0)}),
    "iso": ("iso", {"momentum": MOMENTA, "beta_cov": (0.95, 0.99)}),
    "isoadam": ("isoadam", [{"betas": (b1, 0.999), "beta_cov": bc} for b1 in MOMENTA for bc in (0.95, 0.99)]),
}
BASE = {"sgd": SGD, "signsgd": SIGNSGD, "adam": ADAM, "muon": MUON, "soap": SOAP, "shampoo": SHAMPOO,
        "shampoo_graft": GRAFT, "kfac": KFAC, "iso": ISO, "isoadam": ISOADAM}


def baseline(label: str) -> tuple[str, object, dict]:
    """``(engine optimizer, knobs, fixed)`` of a baseline: every hyperparameter not tuned is fixed."""
    name, knobs = BASELINES[label]
    return name, knobs, _fixed(BASE[name], knobs)


def _variants() -> dict:
    """The reading ablation: label -> (engine optimizer, every hyperparameter); one factor at a
    time around our reading (``iso/default`` = :data:`ISO`, ``isoadam/default`` = :data:`ISOADAM`),
    plus momentum x its placement for Iso."""
    out = {"iso/default": ("iso", dict(ISO))}
    for mu in (0.0, 0.5, 0.9):
        out[f"iso/momentum={mu:g}"] = ("iso", {**ISO, "momentum": mu})
    for mu in (0.5, 0.9, 0.95):  # momentum after the whitening (placement x momentum; 0 has no placement)
        out[f"iso/momentum={mu:g},placement=update"] = ("iso", {**ISO, "momentum": mu, "momentum_placement": "update"})
    for bc in (0.0, 0.9, 0.99):
        out[f"iso/beta_cov={bc:g}"] = ("iso", {**ISO, "beta_cov": bc})
    for d in (1e-4, 1e-2):
        out[f"iso/damping={d:g}"] = ("iso", {**ISO, "damping": d})
    out["iso/root_interval=1"] = ("iso", {**ISO, "root_interval": 1})
    out["isoadam/default"] = ("isoadam", dict(ISOADAM))
    for b1 in (0.0, 0.5, 0.95):  # IsoAdam's momentum is Adam's beta1 (on the whitened gradient)
        out[f"isoadam/beta1={b1:g}"] = ("isoadam", {**ISOADAM, "betas": (b1, 0.999)})
    for bc in (0.0, 0.9, 0.99):
        out[f"isoadam/beta_cov={bc:g}"] = ("isoadam", {**ISOADAM, "beta_cov": bc})
    for d in (1e-4, 1e-2):
        out[f"isoadam/damping={d:g}"] = ("isoadam", {**ISOADAM, "damping": d})
    out["isoadam/root_interval=1"] = ("isoadam", {**ISOADAM, "root_interval": 1})
    return out


VARIANTS = _variants()

#: Every fixed-budget run's schedule (Figure 4 and the ablation): 5 % warmup, cosine decay.
SCHEDULE = {"warmup": 0.05, "decay": "cosine"}


def _around(center: dict, low: float, high: float) -> dict:
    """``(center * low, center * high)`` per optimizer: the coarse lr ranges around the
    version-1 protocol's chosen rates (that run is in the git history of results/; a
    schedule lets the peak rate go higher, hence the wider range above it for Figure 4)."""
    return {k: (v * low, v * high) for k, v in center.items()}


FULL = {
    "name": "full",
    "protocol": 2,
    "n": 32,
    "batch": 128,
    "tuning_seeds": [0, 1, 2, 3, 4],
    "heldout_seeds": list(range(10, 30)),
    "coarse": 36,
    "refine": 12,
    "halving": 4,
    "rungs": 3,
    "interval_level": 0.9,
    "thin": {"dense": 20, "log_points": 60},
    "dtype": "float32",
    "num_threads": 1,
    "fig3": {
        "depth": 5, "steps": 3000, "metric": "iterations_expected", "threshold": 1e-2, "schedule": None,
        "optimizers": list(BASELINES),
        "lr_ranges": _around({"sgd": 0.03, "sgd_plain": 0.12, "signsgd": 0.003, "signsgd_plain": 0.004,
                              "adam": 0.018, "muon": 0.044, "soap": 0.0072, "shampoo": 0.02, "shampoo_graft": 0.0071,
                              "kfac": 0.0042, "iso": 0.03, "isoadam": 0.0077}, 0.2, 5.0),
    },
    "fig4": {
        "depth": 40, "budgets": [1000, 500, 2000], "metric": "tail_expected_loss", "threshold": None,
        "schedule": SCHEDULE, "optimizers": list(BASELINES),
        "lr_ranges": _around({"sgd": 0.001, "sgd_plain": 0.0035, "signsgd": 0.0003, "signsgd_plain": 0.0005,
                              "adam": 0.0011, "muon": 0.0035, "soap": 0.0011, "shampoo": 0.002,
                              "shampoo_graft": 0.0008, "kfac": 0.0014, "iso": 0.002, "isoadam": 0.0013}, 0.2, 20.0),
    },
    "ablation": {
        # 12 + 6 trials per variant (the lr only), halving by 3
        "depth": 40, "steps": 1000, "metric": "tail_expected_loss", "threshold": None, "schedule": SCHEDULE,
        "coarse": 12, "refine": 6, "halving": 3, "rungs": 3,
        "variants": list(VARIANTS),
        "lr_ranges": _around({"iso": 0.002, "isoadam": 0.0013}, 0.2, 20.0),
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
    "coarse": 18,
    "refine": 4,
    "halving": 3,
    "rungs": 2,
    "thin": {"dense": 5, "log_points": 8},
}
REDUCED["fig3"].update(depth=3, steps=60, threshold=0.3)
REDUCED["fig4"].update(depth=6, budgets=[20, 40])
REDUCED["ablation"].update(depth=6, steps=30, coarse=6, refine=2, halving=3, rungs=2)
REDUCED["fig3"]["lr_ranges"] = {k: (lo * 3, hi * 3) for k, (lo, hi) in FULL["fig3"]["lr_ranges"].items()}
REDUCED["fig4"]["lr_ranges"] = {k: (lo * 10, hi * 10) for k, (lo, hi) in FULL["fig4"]["lr_ranges"].items()}
REDUCED["ablation"]["lr_ranges"] = {"iso": (3e-3, 1e-1), "isoadam": (5e-4, 5e-2)}


def output_path(config: dict, part: str, directory: Path | None = None) -> Path:
    """``results/protocol_<part>.npz`` (``protocol_reduced_<part>.npz`` for the reduced configuration)."""
    stem = "protocol_" if config["name"] == "full" else f"protocol_{config['name']}_"
    return Path(directory or ROOT / "results") / f"{stem}{part}.npz"


# ----------------------------------------------------------------------------- pieces
def problem_for(config: dict, part: str) -> DeepLinearRegression:
    return DeepLinearRegression(config["n"], config[part]["depth"], config["batch"])


def jobs(config: dict, part: str) -> list[dict]:
    """The entries of a part: label, engine optimizer, knobs, fixed, lr range, steps, budget."""
    if part not in PARTS:
        raise ValueError(f"part must be one of {PARTS}, got {part!r}")
    p = config[part]
    out = []
    if part == "fig3":
        for label in p["optimizers"]:
            name, knobs, fixed = baseline(label)
            out.append(dict(label=f"fig3/{label}", optimizer=name, knobs=knobs, fixed=fixed,
                            lr_range=tuple(p["lr_ranges"][label]), steps=p["steps"], **trials_of(config, part)))
    elif part == "fig4":
        for steps in p["budgets"]:
            for label in p["optimizers"]:
                name, knobs, fixed = baseline(label)
                out.append(dict(label=f"fig4/b{steps}/{label}", optimizer=name, knobs=knobs, fixed=fixed,
                                lr_range=tuple(p["lr_ranges"][label]), steps=steps, **trials_of(config, part)))
    elif part == "ablation":
        for label in p["variants"]:
            name, hyper = VARIANTS[label]
            out.append(dict(label=f"ablation/{label}", optimizer=name, knobs={}, fixed=dict(hyper),
                            lr_range=tuple(p["lr_ranges"][name]), steps=p["steps"], **trials_of(config, part)))
    else:
        raise ValueError(f"part must be one of {PARTS}, got {part!r}")
    return out


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
    """Tune one entry on the tuning seeds, run the choice on the held-out seeds (thinned sweep)."""
    p = config[part]
    t0, c0 = time.perf_counter(), time.process_time()
    tuned = tune(problem_for(config, part), job["optimizer"], job["steps"], coarse=job["coarse"],
                 refine=job["refine"], lr_range=job["lr_range"], knobs=job["knobs"], fixed=job["fixed"],
                 tuning_seeds=tuple(config["tuning_seeds"]), metric=p["metric"], threshold=p["threshold"],
                 halving=halving_of(config, part), rungs=_setting(config, part, "rungs"), schedule=p["schedule"],
                 dtype=getattr(torch, config["dtype"]), num_threads=config["num_threads"])
    t1, c1 = time.perf_counter(), time.process_time()
    s = heldout_run(config, part, job["label"], job["optimizer"], tuned.hyper, tuned.lr, job["steps"],
                    config["heldout_seeds"])
    t2, c2 = time.perf_counter(), time.process_time()
    per_seed = scores(s, p["metric"])[:, 0]
    iv = median_interval(per_seed, config["interval_level"])
    s.info.update(
        metric=p["metric"], threshold_fraction=p["threshold"],
        tuned=tuned.as_dict(),
        heldout={"seeds": list(config["heldout_seeds"]), "scores": per_seed.tolist(), **iv.as_dict(),
                 "level": config["interval_level"], "diverged": int(np.isinf(per_seed).sum())},
        entry=_json({"knobs": job["knobs"], "fixed": job["fixed"], "lr_range": job["lr_range"],
                     "coarse": job["coarse"], "refine": job["refine"], "steps": job["steps"],
                     "schedule": p["schedule"]}),
        seconds={"tuning": t1 - t0, "heldout": t2 - t1, "tuning_cpu": c1 - c0, "heldout_cpu": c2 - c1},
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
    chosen = ", ".join(f"{k}={t['hyper'][k]}" for k in names)
    edge = "interior" if t["interior"] else "AT AN EDGE"
    return (f"lr {t['lr']:.3g}{' ' + chosen if chosen else ''} ({edge}, {len(t['trials'])} trials) -> held-out "
            f"{h['median']:.4g} [{h['low']:.4g}, {h['high']:.4g}], {h['diverged']} of {len(h['seeds'])} diverged")


def run_part(config: dict, part: str, *, labels=None, out: Path | None = None, command: str = "",
             verbose: bool = True) -> Results:
    """Run every entry of ``part`` (or those whose label is in ``labels``), saving after each
    entry to ``out`` (``None``: not saved), and return the sweeps."""
    todo = [j for j in jobs(config, part) if labels is None or j["label"] in labels]
    t_start, c_start = time.perf_counter(), time.process_time()
    done: list[Sweep] = []
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    if out is not None and out.exists():  # resume: keep the finished entries of the same configuration
        kept = [x for x in load(out) if x.info["run"]["config"] == _json(config)
                and x.label in {j["label"] for j in todo}]
        done += kept
        todo = [j for j in todo if j["label"] not in {x.label for x in kept}]
        if kept:
            log(f"{part}: resuming, {len(kept)} entries already in {out}", verbose)
    for k, job in enumerate(todo, 1):
        s = run_entry(config, part, job)
        done.append(s)
        sec = s.info["seconds"]
        log(f"[{part} {k}/{len(todo)}] {s.label:40s} {_describe(s)}  (tuning {sec['tuning']:.0f} s, held-out "
            f"{sec['heldout']:.0f} s, cpu {sec['tuning_cpu'] + sec['heldout_cpu']:.0f} s, part "
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
            Results(done).save(tmp)
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


def jitter_path(config: dict, part: str, directory: Path | None = None) -> Path:
    """``results/protocol_jitter_<part>.json`` (``protocol_reduced_jitter_<part>.json``)."""
    stem = "protocol_jitter_" if config["name"] == "full" else f"protocol_{config['name']}_jitter_"
    return Path(directory or ROOT / "results") / f"{stem}{part}.json"


def jitter_check(config: dict, parts, seeds, directory: Path | None = None, labels=None, verbose: bool = True) -> dict:
    """Rerun every saved entry's held-out seeds under each jitter seed (:mod:`isolab.book.seeding`:
    every random draw multiplied by ``1 + 1e-6 u``, a change of the size another CPU's
    rounding makes) and save the per-seed scores to :func:`jitter_path` (one file per
    part): what Chapter 10 compares its verdicts with; ``labels`` limits it to those entries.
    Resumable: entries already saved for a jitter seed are kept."""
    import json

    from isolab.book.seeding import jittered

    for part in parts:
        path = jitter_path(config, part, directory)
        out = json.loads(path.read_text()) if path.exists() else {"eps": 1e-6, "entries": {}}
        out.update(command="python scripts/run_sweeps.py " + " ".join(sys.argv[1:]), environment=environment())
        for s in load(output_path(config, part, directory)):
            if labels is not None and s.label not in labels:
                continue
            done = out["entries"].setdefault(s.label, {})
            for seed in seeds:
                if str(seed) in done:
                    continue
                t0 = time.perf_counter()
                with jittered(out["eps"], seed):
                    again = heldout_run(config, part, s.label, s.optimizer, s.hyper, float(s.lrs[0]),
                                        s.info["tuned"]["steps"], list(s.seeds))
                done[str(seed)] = scores(again, s.info["metric"])[:, 0].tolist()
                tmp = path.with_name(path.stem + ".partial.json")
                tmp.write_text(json.dumps(out, default=float))
                tmp.replace(path)
                log(f"jitter {seed}: {s.label:40s} median {np.median(done[str(seed)]):.4g} (saved "
                    f"{s.info['heldout']['median']:.4g}), {time.perf_counter() - t0:.0f} s", verbose)
    return out


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
    ap.add_argument("--jitter-check", nargs="+", type=int, metavar="SEED", default=None,
                    help="rerun the saved held-out seeds under these jitter seeds -> results/protocol_jitter.json")
    ap.add_argument("--merge", action="store_true",
                    help="with --only: put the rerun entries into the part's file (replacing those labels) "
                         "instead of a separate <part>.only.npz")
    args = ap.parse_args(argv)
    if args.summary:
        print(summary(args.summary))
        return 0
    config = REDUCED if args.reduced else FULL
    torch.set_num_threads(config["num_threads"])
    if args.jitter_check:
        parts = PARTS if args.part == "all" else (args.part,)
        jitter_check(config, parts, args.jitter_check, args.out_dir, None if args.only is None else set(args.only))
        return 0
    command = " ".join(shlex.quote(a) for a in ["python", "scripts/run_sweeps.py", *(sys.argv[1:] if argv is None
                                                                                        else argv)])
    parts = PARTS if args.part == "all" else (args.part,)
    for part in parts:
        labels = None if args.only is None else set(args.only)
        out = output_path(config, part, args.out_dir)
        if labels is not None:
            out = out.with_name(out.stem + ".only.npz")
        if labels is not None and not [j for j in jobs(config, part) if j["label"] in labels]:
            continue
        got = run_part(config, part, labels=labels, out=out, command=command)
        if labels is not None and args.merge:
            out = merge(output_path(config, part, args.out_dir), got, config, part)
        print(f"saved {out} ({out.stat().st_size / 1e6:.2f} MB)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
