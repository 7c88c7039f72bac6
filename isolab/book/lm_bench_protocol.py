r"""The language-model benchmark's protocol: a shared pilot, the same number of trials for
every optimizer, every searched knob moved, held-out seeds, paired intervals; resumable.

For each model (GPT-2, Llama) the **pilot** runs every optimizer of
:data:`isolab.book.lm_benchmark.OPTIMIZERS` on one pilot seed (used for nothing else) for
``pilot_steps`` steps at nine learning rates, ``10^-4 … 10^0`` half a decade apart, its
other knobs at :data:`~isolab.book.lm_benchmark.REFERENCE`; AdamW goes first, and the AdamW
group of every two-rate optimizer runs at AdamW's pilot rate ``a*``. Each optimizer's
pilot winner ``m*`` centres its search at every budget, by one rule for all:

1. **Coarse** (``coarse`` trials): learning rates log-spaced over ``m*·10^[-1, +1]``, the
   other knobs at their reference (``side_lr = a*``). Successive halving: every trial runs
   a third of the budget; the best ``promoted`` run the whole budget (a promoted trial that
   diverges is replaced by the next best of the short rung: a configuration already tried).
2. **Knobs** (``knob_slots`` trials at most): from the best full-length trial, each knob of
   :data:`~isolab.book.lm_benchmark.KNOBS` in order, a change kept only if it lowers the
   tuning loss (line searches: a step one way, then a further step if it helped or a step
   the other way if it did not).
3. **Refine**: the trials the knobs left (``knob_slots − knob trials + refine_min``) on the
   learning rate, log-spaced strictly between the coarse neighbours of the current best,
   the other knobs as chosen.

Every optimizer therefore runs exactly ``coarse + knob_slots + refine_min`` configurations
on the tuning seed (an optimizer with fewer knobs spends the difference on its learning
rate), which :func:`search_counts` checks. Scores are the loss on the tuning files; a run
that diverges scores ``inf``. The choice (the best full-length trial) then runs on the
held-out seeds and is scored on the test files.

:class:`Benchmark` keeps every run in one JSON file keyed by what determines it (model,
optimizer, settings, steps, seed, windows), writes the file after each run, and reruns
nothing that the file holds: a stopped run restarts where it stopped, losing at most the
run in progress. :func:`summary` reads the file: medians over held-out seeds with their
order-statistic intervals, paired differences with theirs, step times and their ratios.
"""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np
import torch

from . import lm_benchmark as B
from .engine.intervals import median_interval, paired_difference
from .engine.tuning import refine_grid
from .lm_protocol import load_data

__all__ = ["PROTOCOLS", "Benchmark", "search_counts", "summary", "cell_cost", "environment"]

_DEFAULT = dict(pilot_steps=100, pilot_lrs=tuple(float(10**e) for e in np.arange(-4.0, 0.01, 0.5)), pilot_seed=1000,
                coarse=6, coarse_span=1.0, halving=3, promoted=2, knob_slots=4, refine_min=2,
                tuning_seeds=(0,), heldout_seeds=tuple(range(10, 18)), budgets=(300, 1200), curve_points=10,
                tune_windows=1024, test_windows=2048)
#: the protocol of the saved benchmark, and the tests' (same rules, tiny lengths)
PROTOCOLS = {
    "default": _DEFAULT,
    "smoke": dict(_DEFAULT, pilot_steps=6, pilot_lrs=(1e-3, 1e-2, 1e-1), budgets=(6,), heldout_seeds=(10, 11),
                  curve_points=2, tune_windows=32, test_windows=64),
}


def environment() -> dict:
    """Machine, versions and the commit of the code that ran."""
    import importlib.metadata as md

    import isolab

    root = Path(__file__).resolve().parents[2]

    def git(*args):
        try:
            return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return None

    versions = {}
    for pkg in ("torch", "transformers", "pytorch_optimizer", "numpy"):
        try:
            versions[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            versions[pkg] = None
    return {"isolab": isolab.__version__, "commit": git("rev-parse", "HEAD"),
            "dirty": bool(git("status", "--porcelain", "--", "isolab", "scripts")), **versions,
            "python": platform.python_version(), "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(), "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads()}


def _canon(hyper: dict) -> str:
    return json.dumps({k: hyper[k] for k in sorted(hyper)}, sort_keys=True)


class Benchmark:
    """The benchmark's runs, kept in the JSON file ``path`` (see the module docstring).

    ``size`` is one of :data:`isolab.book.lm_benchmark.SIZES`, ``protocol`` one of
    :data:`PROTOCOLS` (or a dict like them). A file made with another size or protocol is
    refused rather than mixed."""

    def __init__(self, path, *, size: str = "small", protocol="default", archs: Sequence[str] = B.ARCHS,
                 optimizers: Sequence[str] = B.OPTIMIZERS, log: Optional[Callable[[str], None]] = None):
        self.path = Path(path)
        self.size = size
        self.protocol = dict(PROTOCOLS[protocol] if isinstance(protocol, str) else protocol)
        self.archs, self.optimizers = tuple(archs), tuple(optimizers)
        if "adamw" not in self.optimizers:
            raise ValueError("the pilot needs adamw: its rate is every two-rate optimizer's AdamW-group rate")
        self.log = log or (lambda s: None)
        self._data = None
        plain = json.loads(json.dumps(self.protocol))
        if self.path.exists():
            self.results = json.loads(self.path.read_text())
            if self.results["size"] != size or self.results["protocol"] != plain:
                raise ValueError(f"{self.path} was made with size {self.results['size']!r} and another protocol; "
                                 "use another --out")
        else:
            self.results = {"size": size, "protocol": plain, "sizes": B.SIZES[size], "runs": {}, "pilot": {},
                            "searches": {}, "heldout": {}, "commands": [], "models": {}}
        cmd = {"argv": [Path(sys.argv[0]).name, *sys.argv[1:]], "started": time.strftime("%Y-%m-%d %H:%M:%S"),
               "environment": environment()}
        self.results["commands"].append(cmd)
        for arch in self.archs:
            m = B.hf_model(arch, size, 0)
            mats, rest = B._split(m)
            self.results["models"][arch] = {"parameters": sum(p.numel() for p in m.parameters()),
                                            "matrix_parameters": sum(p.numel() for p in mats),
                                            "config": {k: v for k, v in B.hf_config(arch, size).to_dict().items()
                                                       if isinstance(v, (int, float, str, bool)) or v is None}}

    # ------------------------------------------------------------------------- storage
    @property
    def data(self):
        if self._data is None:
            s = B.SIZES[self.size]
            self._data = load_data(s["context"], tune_windows=self.protocol["tune_windows"],
                                   test_windows=self.protocol["test_windows"])
            self.results["files"] = self._data.n_files
        return self._data

    def save(self) -> None:
        """Write the file atomically (a copy, then a rename)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(self.path.suffix + ".tmp")
        tmp.write_text(json.dumps(self.results, indent=None, allow_nan=True))
        os.replace(tmp, self.path)

    def trial(self, arch: str, name: str, hyper: dict, steps: int, seed: int, score_on: str = "tune",
              curve_points: int = 0) -> dict:
        """One run, from the file if it is there, else trained now and saved at once."""
        key = self._key(arch, name, hyper, steps, seed, score_on, curve_points)
        runs = self.results["runs"]
        if key not in runs:
            r = B.run(name, hyper, steps, seed, arch=arch, size=self.size, data=self.data, score_on=score_on,
                      curve_points=curve_points)
            if score_on == "tune":  # tuning runs keep their score, not their curves
                r = {k: r[k] for k in ("loss", "se", "diverged", "error", "step_ms", "seconds")} | \
                    {"last_train_loss": r["train_loss"][-1] if r["train_loss"] else None}
            runs[key] = r
            self.save()
            self.log(f"{arch} {name:13s} T={steps:5d} seed {seed:4d} {score_on}: loss {r['loss']:.4f} "
                     f"({r['step_ms']['median']:.1f} ms/step, {r['seconds']:.0f} s) {_canon(hyper)}")
        return runs[key]

    # ------------------------------------------------------------------------- the pilot
    def pilot(self, arch: str) -> dict:
        """Every optimizer's pilot scan on ``arch`` (module docstring); ``{name: record}``."""
        P, out = self.protocol, self.results["pilot"].setdefault(arch, {})
        order = ["adamw"] + [n for n in self.optimizers if n != "adamw"]
        for name in order:
            if name in out:
                continue
            base = self._reference(name, out["adamw"]["best"] if name != "adamw" else None)
            losses = [self.trial(arch, name, {**base, "lr": lr}, P["pilot_steps"], P["pilot_seed"])["loss"]
                      for lr in P["pilot_lrs"]]
            if not any(math.isfinite(v) for v in losses):
                raise RuntimeError(f"{arch} {name}: every pilot rate diverged; widen pilot_lrs")
            i = min(range(len(losses)), key=lambda j: losses[j])
            ms = [self.results["runs"][self._key(arch, name, {**base, "lr": lr}, P["pilot_steps"], P["pilot_seed"])]
                  ["step_ms"]["median"] for lr in P["pilot_lrs"]]
            out[name] = {"lrs": list(P["pilot_lrs"]), "losses": losses, "best": P["pilot_lrs"][i],
                         "side_lr": base.get("side_lr"), "step_ms": float(np.median(ms))}
            self.save()
        return out

    def _key(self, arch, name, hyper, steps, seed, score_on="tune", curve_points=0):
        return f"{arch}|{name}|{steps}|{seed}|{score_on}|{curve_points}|{_canon(hyper)}"

    @staticmethod
    def _reference(name: str, side: Optional[float]) -> dict:
        h = {m.key: B.REFERENCE[m.key] for m in B.KNOBS[name] if m.key in B.REFERENCE}
        if B.two_rates(name):
            h["side_lr"] = side if side is not None else 0.0
        return h

    # ------------------------------------------------------------------------- the search
    def tune(self, arch: str, name: str, steps: int) -> dict:
        """The search of ``name`` at ``steps`` on ``arch`` (module docstring); saved under
        ``searches["arch/name/steps"]``."""
        key = f"{arch}/{name}/{steps}"
        if key in self.results["searches"]:
            return self.results["searches"][key]
        P, pilot = self.protocol, self.pilot(arch)
        seeds = P["tuning_seeds"]
        trials = []

        def score(hyper, length, phase):
            vals = [self.trial(arch, name, hyper, length, s)["loss"] for s in seeds]
            v = math.inf if any(not math.isfinite(x) for x in vals) else float(np.median(vals))
            trials.append({"phase": phase, "hyper": dict(hyper), "steps": length, "loss": v})
            return v

        base = {**self._reference(name, pilot["adamw"]["best"]), "lr": pilot[name]["best"]}
        centre = math.log10(pilot[name]["best"])
        coarse = [float(v) for v in np.logspace(centre - P["coarse_span"], centre + P["coarse_span"], P["coarse"])]
        short = max(1, steps // P["halving"])
        first = [score({**base, "lr": lr}, short, "coarse, short rung") for lr in coarse]
        order = [i for i in sorted(range(len(coarse)), key=lambda i: first[i]) if math.isfinite(first[i])]
        best, promoted = None, 0
        for i in order:
            if promoted >= P["promoted"]:
                break
            h = {**base, "lr": coarse[i]}
            v = score(h, steps, "coarse, full budget")
            if math.isfinite(v):
                promoted += 1
                if best is None or v < best[1]:
                    best = (h, v)
        if best is None:
            rec = {"chosen": None, "loss": math.inf, "trials": trials, "coarse_lrs": coarse}
            self.results["searches"][key] = rec
            self.save()
            self.log(f"{key}: every coarse trial diverged")
            return rec
        used = 0
        for move in B.KNOBS[name]:
            best, n = self._move(move, best, score, steps)
            used += n
        refine = P["knob_slots"] - used + P["refine_min"]
        for lr in refine_grid(best[0]["lr"], coarse, refine):
            h = {**best[0], "lr": lr}
            v = score(h, steps, "refine")
            if v < best[1]:
                best = (h, v)
        lrs = sorted({t["hyper"]["lr"] for t in trials})
        rec = {"chosen": best[0], "loss": best[1], "trials": trials, "coarse_lrs": coarse,
               "lr_interior": lrs[0] < best[0]["lr"] < lrs[-1], "counts": search_counts(trials)}
        self.results["searches"][key] = rec
        self.save()
        self.log(f"{key}: chose {_canon(best[0])} tuning loss {best[1]:.4f}; {rec['counts']}")
        return rec

    @staticmethod
    def _move(move, best, score, steps):
        """One knob's search from ``best = (hyper, loss)``; returns the new best and the trials run."""
        n = 0
        if move.values:
            for v in move.values:
                h = {**best[0], move.key: v}
                s = score(h, steps, f"knob {move.key}")
                n += 1
                if s < best[1]:
                    best = (h, s)
            return best, n
        direction, flipped = 1, False
        while n < move.trials:
            h = {**best[0], move.key: best[0][move.key] * move.factor**direction}
            s = score(h, steps, f"knob {move.key}")
            n += 1
            if s < best[1]:
                best = (h, s)
            elif flipped:
                break
            else:
                direction, flipped = -direction, True
        return best, n

    # ------------------------------------------------------------------------- held out
    def heldout(self, arch: str, name: str, steps: int) -> Optional[dict]:
        """The chosen setting on every held-out seed, scored on the test files."""
        key = f"{arch}/{name}/{steps}"
        rec = self.tune(arch, name, steps)
        if rec["chosen"] is None:
            return None
        P = self.protocol
        clash = set(P["heldout_seeds"]) & (set(P["tuning_seeds"]) | {P["pilot_seed"]})
        if clash:
            raise ValueError(f"held-out seeds {sorted(clash)} were used for the pilot or the search")
        runs = [self.trial(arch, name, rec["chosen"], steps, s, "test", P["curve_points"]) for s in P["heldout_seeds"]]
        out = {"hyper": rec["chosen"], "seeds": list(P["heldout_seeds"]), "loss": [r["loss"] for r in runs],
               "se": [r["se"] for r in runs], "step_ms": [r["step_ms"] for r in runs],
               "curve_step": runs[0]["curve_step"], "curve_loss": [r["curve_loss"] for r in runs],
               "train_loss": [r["train_loss"] for r in runs], "diverged": sum(r["diverged"] for r in runs)}
        self.results["heldout"][key] = out
        self.results["summary"] = summary(self.results)
        self.save()
        return out

    def run_all(self, budgets: Optional[Sequence[int]] = None) -> dict:
        """The pilot of every model, then every budget (shortest first), model and optimizer."""
        for arch in self.archs:
            self.pilot(arch)
        self.results["sizing"] = {str(T): {a: {n: cell_cost(self.results, a, n, T) for n in self.optimizers}
                                           for a in self.archs} for T in self.protocol["budgets"]}
        self.save()
        for steps in sorted(budgets or self.protocol["budgets"]):
            for arch in self.archs:
                for name in self.optimizers:
                    self.heldout(arch, name, steps)
        self.results["summary"] = summary(self.results)
        self.save()
        return self.results


def search_counts(trials: Sequence[dict]) -> dict:
    """``configurations`` (distinct settings run on the tuning seeds, at any length), ``runs``
    (trials, counting a configuration promoted to the whole budget twice) and ``steps``."""
    configs = {_canon(t["hyper"]) for t in trials}
    return {"configurations": len(configs), "runs": len(trials), "steps": sum(t["steps"] for t in trials)}


def cell_cost(results: dict, arch: str, name: str, steps: int) -> dict:
    """The planned training steps of one search and its held-out runs, and the seconds they
    take at the pilot's median step time (evaluation not counted)."""
    P = results["protocol"]
    n_seeds = len(P["tuning_seeds"])
    tuning = n_seeds * (P["coarse"] * (steps // P["halving"]) + (P["promoted"] + P["knob_slots"] + P["refine_min"])
                        * steps)
    heldout = len(P["heldout_seeds"]) * steps
    ms = results["pilot"].get(arch, {}).get(name, {}).get("step_ms", math.nan)
    return {"steps": tuning + heldout, "seconds": (tuning + heldout) * ms / 1000}


def _finite_median(values):
    v = [x for x in values if math.isfinite(x)]
    return float(np.median(v)) if v else math.nan


def summary(results: dict, level: float = 0.9) -> dict:
    """``{"arch/steps": {...}}``: per optimizer the held-out median loss with its
    order-statistic interval (``coverage`` its exact probability of covering the median),
    the median step time over seeds (each seed's median over its steps) with the smallest
    and largest, and the per-seed ratio to AdamW's step time with its interval; and for
    every pair the paired difference of losses (row minus column) with its interval."""
    out = {}
    cells = sorted({k.rsplit("/", 2)[0] + "/" + k.rsplit("/", 1)[1] for k in results["heldout"]})
    for cell in cells:
        arch, steps = cell.split("/")
        names = [n for n in B.OPTIMIZERS if f"{arch}/{n}/{steps}" in results["heldout"]]
        h = {n: results["heldout"][f"{arch}/{n}/{steps}"] for n in names}
        per = {}
        for n in names:
            iv = median_interval(h[n]["loss"], level)
            ms = [s["median"] for s in h[n]["step_ms"]]
            row = {"loss": iv.as_dict(), "step_ms": {"median": _finite_median(ms), "min": min(ms), "max": max(ms)},
                   "diverged": h[n]["diverged"], "hyper": h[n]["hyper"]}
            if "adamw" in h and n != "adamw" and h[n]["seeds"] == h["adamw"]["seeds"]:
                ratio = [a["median"] / b["median"] for a, b in zip(h[n]["step_ms"], h["adamw"]["step_ms"])]
                row["time_ratio_to_adamw"] = median_interval(ratio, level).as_dict()
            per[n] = row
        pairs = {a: {b: paired_difference(h[a]["loss"], h[b]["loss"], level).as_dict() for b in names if b != a}
                 for a in names}
        out[cell] = {"optimizers": per, "paired": pairs, "seeds": h[names[0]]["seeds"] if names else []}
    return out
