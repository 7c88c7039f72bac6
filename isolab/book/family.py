r"""Chapter 12's experiment: the two-sided family trained under Part III's protocol.

One deep linear regression (four layers of width 16, batch 64, inputs of condition number
100 in a rotated basis, 300 steps in float64, a 5 % warmup and a cosine decay) and eight
optimizers, each tuned by :func:`isolab.book.engine.tune` with the same 24 trials (18
coarse, 6 refining the learning rate), on five tuning seeds with the stability rule, and
reported on 20 held-out seeds by the exact expected loss averaged over the last 30 steps.
Besides the learning rate, each optimizer's momentum is tuned (Adam's family through
:math:`\beta_1 \in \{0, 0.9\}`, Muon's and Iso's over ``{0, 0.9, 0.95}``) and K-FAC's
damping over three decades: the knobs their authors tune. The 2018 Shampoo has neither.

:func:`run` does the whole experiment (about a minute of one core); ``scripts/ch12_family.py``
runs it once plainly and once under each of three jitters (:mod:`isolab.book.seeding`) and
saves the outcomes, so that the chapter shows results that do not depend on the machine
and checks that its verdicts are the same under every perturbation.
"""

from __future__ import annotations

import contextlib
from typing import Optional

import numpy as np
import torch

from .engine import sweep, tune
from .engine.intervals import median_interval, paired_difference
from .engine.tuning import scores, tail_steps
from .problems import DeepLinearRegression, GaussianFeatures
from .seeding import jittered

__all__ = ["FAMILY", "KNOBS", "LR_RANGES", "SCHEDULE", "STEPS", "TUNING_SEEDS", "HELD_OUT", "PROTOCOL", "problem",
           "run", "verdicts", "RANKINGS"]

#: label -> engine optimizer
FAMILY = {"Adam": "adam", "Shampoo": "shampoo", "Shampoo, grafted": "shampoo_graft", "SOAP": "soap",
          "K-FAC": "kfac", "Muon": "muon", "Iso": "iso", "IsoAdam": "isoadam"}
_B1 = (0.0, 0.9)
#: The knobs tuned besides the learning rate (the momentum where there is one, K-FAC's damping).
KNOBS = {"adam": [{"betas": (b, 0.999)} for b in _B1], "isoadam": [{"betas": (b, 0.999)} for b in _B1],
         "shampoo_graft": [{"betas": (b, 0.999)} for b in _B1], "soap": [{"betas": (b, 0.95)} for b in _B1],
         "muon": {"momentum": (0.0, 0.9, 0.95)}, "iso": {"momentum": (0.0, 0.9, 0.95)},
         "kfac": {"damping": (0.1, 1.0, 10.0)}}
#: Coarse learning-rate ranges (the refine phase may look one coarse step past them).
LR_RANGES = {"kfac": (1e-3, 1.0), "muon": (1e-3, 1.0), "iso": (1e-3, 1.0)}
DEFAULT_RANGE = (1e-4, 1e-1)
SCHEDULE = {"warmup": 0.05, "decay": "cosine"}
STEPS = 300
TUNING_SEEDS = (0, 1, 2, 3, 4)
HELD_OUT = tuple(range(10, 30))
PROTOCOL = dict(coarse=18, refine=6, halving=3, rungs=3, metric="tail_expected_loss")


def problem() -> DeepLinearRegression:
    return DeepLinearRegression(n=16, depth=4, batch=64, features=GaussianFeatures(16, 100.0, 0.3))


def run(jitter_seed: Optional[int] = None, labels=None) -> dict:
    """Tune every member and evaluate it on the held-out seeds (under the jitter of
    ``jitter_seed`` if given). Returns ``{label: {"tuned": Tuned.as_dict(), "scores": [...],
    "curve": (seeds, steps + 1) batch losses}}``."""
    ctx = jittered(1e-6, jitter_seed) if jitter_seed is not None else contextlib.nullcontext()
    p, out = problem(), {}
    with ctx:
        for label in labels or FAMILY:
            name = FAMILY[label]
            t = tune(p, name, STEPS, lr_range=LR_RANGES.get(name, DEFAULT_RANGE), knobs=KNOBS.get(name),
                     tuning_seeds=TUNING_SEEDS, schedule=SCHEDULE, dtype=torch.float64, **PROTOCOL)
            s = sweep(p, name, [t.lr], STEPS, seeds=HELD_OUT, hyper=t.hyper, dtype=torch.float64, schedule=SCHEDULE,
                      expected_loss_from=tail_steps(STEPS), record_norms=False, progress=False)
            out[label] = {"tuned": t.as_dict(), "scores": scores(s, PROTOCOL["metric"])[:, 0].tolist(),
                          "curve": s.loss[:, 0]}
    return out


#: The rankings Chapter 12 states: (better, worse). Each is supported only where the paired
#: interval of the log ratio of their held-out scores lies wholly below zero.
RANKINGS = (("Muon", "Iso"), ("IsoAdam", "Adam"), ("Shampoo, grafted", "Shampoo"), ("Adam", "K-FAC"),
            ("Muon", "SOAP"))
#: Pairs the chapter says the experiment cannot separate (the interval contains zero).
TIES = (("IsoAdam", "SOAP"), ("IsoAdam", "Iso"))
#: Pairs whose verdict depends on the run: separated under some perturbations, not others.
UNRESOLVED = (("Muon", "IsoAdam"),)


def verdicts(outcome: dict, level: float = 0.9) -> dict:
    """``{(a, b): paired interval of log(score_a / score_b)}`` for :data:`RANKINGS`,
    :data:`TIES` and :data:`UNRESOLVED`."""
    logs = {k: np.log(np.asarray(v["scores"], dtype=np.float64)) for k, v in outcome.items()}
    return {(a, b): paired_difference(logs[a], logs[b], level) for a, b in RANKINGS + TIES + UNRESOLVED}


def summaries(outcome: dict, level: float = 0.9) -> dict:
    """``{label: Interval}``: each member's held-out median with its order-statistic interval."""
    return {k: median_interval(v["scores"], level) for k, v in outcome.items()}


def load(path) -> tuple[dict, dict]:
    """``(runs, curves)`` of a file written by ``scripts/ch12_family.py``: ``runs`` maps
    ``"plain"``, ``"jitter1"``, ... to ``{label: {"tuned": ..., "scores": [...]}}``; ``curves``
    maps each label to the plain run's held-out batch losses ``(seeds, steps + 1)``."""
    import json

    with np.load(path) as z:
        meta = json.loads(str(z["meta"]))
        curves = {k.split("/", 1)[1]: z[k].copy() for k in z.files if k.startswith("curve/")}
    return meta["runs"], curves
