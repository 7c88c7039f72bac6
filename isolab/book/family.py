r"""Chapter 12's experiment: the two-sided family trained under Part III's protocol (version 3.1).

One deep linear regression (four layers of width 16, batch 64, inputs of condition number
100 in a rotated basis, 300 steps in float64, a 5 % warmup and a cosine decay) and eight
optimizers under :data:`isolab.book.engine.tuning.PROTOCOL`: a shared pilot at each momentum
value centres the learning-rate range of the settings with that momentum, every optimizer runs the same 54 + 12 trials over its learning rate,
its momentum ({0, 0.9, 0.95}) and its damping or epsilon where it has one (the library's
default and a decade either side: :func:`~isolab.book.engine.tuning.knob_grid`), on five
tuning seeds with the stability rule; the choice is reported on 20 held-out seeds and again
on 20 fresh ones, by the exact expected loss averaged over the last 30 steps. Every
hyperparameter starts at the library's default (:func:`isolab.book.engine.defaults.library_defaults`)
but one, stated: no weight decay for anyone (the regression is noise-free).

:func:`schedule_runs` then trains Muon and Iso at their tuned settings with the cosine decay
ending at a floor ``f`` of the peak rate instead of zero (``f = 1``: a constant rate after
the warmup), recording the exact loss and the length of every update: the data of Chapter
12's centerpiece (a fixed-length step needs the schedule to end its run; a step whose length
the data sets does less so).

``scripts/ch12_family.py`` runs both and saves ``results/ch12_family.npz``.
"""

from __future__ import annotations

import json
import numpy as np
import torch

from .engine import sweep, tune
from .engine.defaults import library_defaults
from .engine.intervals import median_interval, paired_difference, ranked
from .engine.rules_lanes import resolve_hyper
from .engine.schedules import multipliers
from .engine.tuning import PROTOCOL, knob_grid, lr_scale, pilot, scores, tail_steps, with_momentum
from .problems import DeepLinearRegression, GaussianFeatures

__all__ = ["FAMILY", "SCHEDULE", "STEPS", "TUNING_SEEDS", "HELD_OUT", "FRESH", "METRIC", "FLOORS", "problem",
           "base", "run", "schedule_runs", "verdict", "summaries", "load", "heldout_scores", "PAIRS"]

#: label -> engine optimizer
FAMILY = {"Adam": "adam", "Shampoo": "shampoo", "Shampoo, grafted": "shampoo_graft", "SOAP": "soap",
          "K-FAC": "kfac", "Muon": "muon", "Iso": "iso", "IsoAdam": "isoadam"}
SCHEDULE = {"warmup": 0.05, "decay": "cosine"}
STEPS = 300
TUNING_SEEDS = PROTOCOL["tuning_seeds"]
HELD_OUT = PROTOCOL["heldout_seeds"]
FRESH = PROTOCOL["fresh_seeds"]
METRIC = "tail_expected_loss"
#: The floors of the centerpiece's schedules (fractions of the peak rate the decay ends at).
FLOORS = (0.0, 0.001, 0.003, 0.01, 0.03, 0.1, 0.2, 0.5, 1.0)
#: The pairs Chapter 12 compares (lower is better first, as the chapter states them).
PAIRS = (("Muon", "Iso"), ("IsoAdam", "Adam"), ("Shampoo, grafted", "Shampoo"), ("Adam", "K-FAC"),
         ("Muon", "SOAP"), ("IsoAdam", "SOAP"), ("IsoAdam", "Iso"), ("Muon", "IsoAdam"))


def problem() -> DeepLinearRegression:
    return DeepLinearRegression(n=16, depth=4, batch=64, features=GaussianFeatures(16, 100.0, 0.3))


def base(name: str) -> dict:
    """Every hyperparameter before tuning: the library's defaults, no weight decay."""
    h = resolve_hyper(name, library_defaults(name))
    h["weight_decay"] = 0.0
    return h


def _held_out(p, name, tuned, seeds, schedule=SCHEDULE, **kw):
    return sweep(p, name, [tuned.lr if hasattr(tuned, "lr") else tuned["lr"]], STEPS, seeds=seeds,
                 hyper=tuned.hyper if hasattr(tuned, "hyper") else tuned["hyper"], dtype=torch.float64,
                 schedule=schedule, record_norms=False, progress=False, **kw)


def _summary(s) -> dict:
    per_seed = scores(s, METRIC)[:, 0]
    return {"scores": per_seed.tolist(), "diverged": int(np.isinf(per_seed).sum()),
            "diverged_at": s.diverged_at[:, 0].tolist()}


def run(labels=None, log=None) -> dict:
    """Pilot, tune and evaluate every member (or ``labels``). Returns ``{label: {"pilot",
    "tuned", "heldout", "fresh", "curve"}}`` (``curve``: the held-out batch losses)."""
    p, out = problem(), {}
    for label in labels or FAMILY:
        name = FAMILY[label]
        b = base(name)
        pl = {mu: pilot(p, name, STEPS, with_momentum(name, b, mu), metric=METRIC, schedule=SCHEDULE,
                        dtype=torch.float64) for mu in PROTOCOL["momenta"]}
        centres = {mu: v["centre"] for mu, v in pl.items()}
        combos = knob_grid(name, b)
        tuned_keys = set().union(*(set(c) for c in combos))
        t = tune(p, name, STEPS, coarse=PROTOCOL["coarse"], refine=PROTOCOL["refine"],
                 lr_range=pl[min(pl)]["range"], knobs=combos, fixed={k: v for k, v in b.items() if k not in tuned_keys},
                 tuning_seeds=TUNING_SEEDS, metric=METRIC, halving=PROTOCOL["halving"], rungs=PROTOCOL["rungs"],
                 schedule=SCHEDULE, dtype=torch.float64,
                 scale=lambda combo, name=name, centres=centres: lr_scale(name, combo, centres))
        s = _held_out(p, name, t, HELD_OUT, expected_loss_from=tail_steps(STEPS))
        f = _held_out(p, name, t, FRESH, expected_loss_from=tail_steps(STEPS))
        out[label] = {"pilot": {str(mu): v for mu, v in pl.items()}, "tuned": t.as_dict(), "heldout": _summary(s), "fresh": _summary(f),
                      "curve": s.loss[:, 0]}
        if log:
            log(f"{label}: lr {t.lr:.3g} {({k: t.hyper[k] for k in tuned_keys})} held-out median "
                f"{np.median(out[label]['heldout']['scores']):.3g}, fresh {np.median(out[label]['fresh']['scores']):.3g}")
    return out


def schedule_runs(tuned: dict, labels=("Muon", "Iso"), floors=FLOORS) -> dict:
    """The chosen settings of ``labels`` (``{label: Tuned.as_dict()}``) on the held-out seeds
    with the decay ending at each floor: ``{label: {"loss": (floors, steps + 1) median exact
    loss, "step": (floors, steps) median update length (all layers), "direction": (floors, steps)
    the update length over lr times the schedule's factor, "final": (floors, seeds) the tail
    score}}``."""
    p, out = problem(), {}
    for label in labels:
        t = tuned[label]
        name = FAMILY[label]
        rec = {"loss": [], "step": [], "direction": [], "final": []}
        for f in floors:
            sched = {**SCHEDULE, "floor": float(f)}
            s = _held_out(p, name, t, HELD_OUT, schedule=sched, expected_loss_from=0, record_steps=True)
            m = np.asarray(multipliers(sched, STEPS))
            length = np.sqrt(np.nansum(s.step_norm[:, 0] ** 2, axis=-1))  # (seeds, steps); 0 after a stop
            length[np.isnan(s.step_norm[:, 0]).all(axis=-1)] = np.nan
            with np.errstate(invalid="ignore"):
                rec["loss"].append(np.nanmedian(s.expected_loss[:, 0], axis=0))
                rec["step"].append(np.nanmedian(length, axis=0))
                rec["direction"].append(np.nanmedian(length / (t["lr"] * m)[None, :], axis=0))
            rec["final"].append(scores(s, METRIC)[:, 0])
        out[label] = {k: np.asarray(v) for k, v in rec.items()}
    return out


def verdict(outcome_sets: list, a: str, b: str, level: float = PROTOCOL["interval_level"]):
    """``(verdict, [Interval per set])`` for "``a`` is ahead of ``b``" over the sets of seeds
    (``outcome_sets``: ``[{label: scores}, ...]``, the held-out set and the fresh one), on the
    paired log ratio of the scores (:func:`isolab.book.engine.intervals.ranked`)."""
    ivs = [paired_difference(np.log(np.asarray(o[a], dtype=np.float64)),
                             np.log(np.asarray(o[b], dtype=np.float64)), level) for o in outcome_sets]
    return ranked(ivs, PROTOCOL["min_effect"]), ivs


def summaries(outcome: dict, level: float = PROTOCOL["interval_level"]) -> dict:
    """``{label: Interval}``: each member's held-out median with its order-statistic interval."""
    return {k: median_interval(v, level) for k, v in outcome.items()}


def load(path) -> dict:
    """What ``scripts/ch12_family.py`` saved: ``{"meta", "runs": {label: {"pilot", "tuned",
    "heldout", "fresh"}}, "curves": {label: (seeds, steps + 1)}, "schedule": {label: {floor
    arrays}}}``."""
    with np.load(path) as z:
        meta = json.loads(str(z["meta"]))
        curves = {k.split("/", 1)[1]: z[k].copy() for k in z.files if k.startswith("curve/")}
        sched: dict = {}
        for k in z.files:
            if k.startswith("schedule/"):
                _, label, what = k.split("/")
                sched.setdefault(label, {})[what] = z[k].copy()
    return {"meta": meta, "runs": meta["runs"], "curves": curves, "schedule": sched}


def heldout_scores(data: dict, which: str = "heldout") -> dict:
    """``{label: per-seed scores}`` of one set of seeds (``"heldout"`` or ``"fresh"``)."""
    return {k: v[which]["scores"] for k, v in data["runs"].items()}
