r"""The tuning protocol of Part III (version 2): the same trials for every optimizer, the
setting chosen on five tuning seeds under a stability rule, reported on held-out seeds.

A comparison of optimizers is only as fair as the tuning behind it. The protocol here is
the one every Part III experiment follows:

1. **The same trials, counted as run.** Each optimizer runs exactly ``coarse + refine``
   configurations. Its knobs other than the learning rate (momentum, :math:`\beta_2`,
   damping, ...) span a small product grid; the *coarse* phase gives each knob setting
   ``coarse // (size of that grid)`` log-spaced learning rates over ``lr_range`` (an
   optimizer with more knobs gets fewer rates, never more trials; ``coarse`` must divide
   evenly); the *refine* phase then spends ``refine`` more trials on the learning rate of
   the coarse winner's knob setting, log-spaced strictly between its two coarse neighbours
   (one coarse step either side, so a winner at the edge of the range is looked past). No
   grid is ever moved or rerun: the count every optimizer gets is the count it ran.
2. **Successive halving** (``halving=eta``) inside each phase: every trial first runs a
   fraction ``1/eta^(rungs-1)`` of the steps on the tuning seeds, the best ``1/eta`` go on
   to a run ``eta`` times longer, until the survivors run all ``steps``. A promoted trial
   that diverges at the longer length is replaced by the next best of the previous rung
   (back-fill: a configuration already tried, run longer; no new configuration).
3. **Stability.** A configuration that diverges on *any* tuning seed scores ``inf`` and is
   out: a rate that survives two seeds of five is not a rate to report. Otherwise its score
   is the median over the tuning seeds.
4. **The choice** is the best full-length trial of both phases; ``interior`` records whether
   its rate lies strictly inside every rate searched.
5. **Everything explicit.** A :class:`Tuned` setting carries every hyperparameter by name
   (the defaults filled in) and the schedule, so a later change of a library default cannot
   move a saved result. Held-out seeds are evaluated separately (:func:`evaluate`); their
   intervals are in :mod:`isolab.book.engine.intervals`.

Scores are "lower is better" (:func:`scores`): ``"tail_expected_loss"``, the exact expected
loss averaged over the last 10 % of the steps (:func:`tail_steps`); ``"iterations_expected"``,
the iterations until the exact expected loss first falls to ``threshold`` times its
initial value (a lane that never gets there scores ``steps (1 + last/initial)``, so slow
lanes still rank); and the version-1 metrics on the batch loss, ``"final_loss"`` and
``"iterations"``. A diverged lane scores ``inf``.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence

import numpy as np
import torch

from ..results import Sweep
from .core import sweep
from .rules_lanes import resolve_hyper

__all__ = ["Trial", "Tuned", "trial_grid", "rung_steps", "scores", "tune", "evaluate",
           "refine_grid", "metric_kwargs", "tail_steps", "METRICS", "tune_lr"]

METRICS = ("tail_expected_loss", "iterations_expected", "final_loss", "iterations")
#: The fraction of the steps the tail metric averages over.
TAIL = 0.1


def tail_steps(steps: int) -> int:
    """The first step of the tail the ``"tail_expected_loss"`` metric averages (the last
    ``ceil(TAIL * steps)`` updates and the final state)."""
    return int(steps) - max(1, math.ceil(TAIL * int(steps)))


def metric_kwargs(metric: str, steps: int, threshold: Optional[float] = None) -> dict:
    """The :func:`~isolab.book.engine.sweep` arguments a metric needs (what it records)."""
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {METRICS}, got {metric!r}")
    if metric in ("iterations", "iterations_expected") and threshold is None:
        raise ValueError(f"metric={metric!r} needs a threshold (a fraction of the initial loss)")
    if metric == "tail_expected_loss":
        return {"expected_loss_from": tail_steps(steps)}
    if metric == "iterations_expected":
        return {"expected_loss_from": 0, "threshold_on": "expected_loss", "threshold": threshold,
                "relative_threshold": True, "retire_at_threshold": True}
    if metric == "iterations":
        return {"threshold": threshold, "relative_threshold": True, "retire_at_threshold": True}
    return {}


@dataclass(frozen=True)
class Trial:
    """One configuration of the budget: hyperparameters other than lr, and an lr."""

    hyper: dict
    lr: float


@dataclass
class Tuned:
    """The outcome of :func:`tune`.

    ``hyper`` is complete (every hyperparameter of the optimizer by name), ``lr`` the chosen
    rate, ``score`` its median over the tuning seeds. ``trials`` holds every configuration
    run (``budget = coarse + refine`` of them) with its score at the longest rung it reached,
    ``rungs`` every rung of both phases, ``interior`` whether the choice lies strictly inside
    the learning rates searched, ``schedule`` the schedule every trial ran with.
    """

    optimizer: str
    hyper: dict
    lr: float
    score: float
    metric: str
    steps: int
    tuning_seeds: tuple
    budget: int
    lr_range: tuple
    interior: bool
    trials: list = field(default_factory=list)
    halving: Optional[int] = None
    rungs: list = field(default_factory=list)
    schedule: Optional[dict] = None
    coarse: Optional[int] = None
    refine: Optional[int] = None

    def as_dict(self) -> dict:
        """JSON-ready (for a results file's metadata)."""
        return {
            "optimizer": self.optimizer, "hyper": _jsonable(self.hyper), "lr": self.lr, "score": self.score,
            "metric": self.metric, "steps": self.steps, "tuning_seeds": list(self.tuning_seeds),
            "budget": self.budget, "lr_range": list(self.lr_range), "interior": self.interior,
            "trials": [{"hyper": _jsonable(h), "lr": lr, "score": s} for h, lr, s in self.trials],
            "halving": self.halving, "schedule": self.schedule, "coarse": self.coarse, "refine": self.refine,
            "rungs": [{"phase": r.get("phase"), "steps": r["steps"], "kept": r["kept"],
                       "backfilled": r.get("backfilled", 0),
                       "trials": [{"hyper": _jsonable(h), "lr": lr, "score": s} for h, lr, s in r["trials"]]}
                      for r in self.rungs],
        }


def _jsonable(h: dict) -> dict:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in h.items()}


def trial_grid(knobs, budget: int, lr_range: tuple[float, float]) -> list[Trial]:
    """The ``budget`` trials of one optimizer: every combination of ``knobs`` (name ->
    values) times ``budget // combinations`` learning rates log-spaced over ``lr_range``.
    ``knobs`` may also be a list of the combinations themselves (dicts), for knobs that
    go together (SGD's ``nesterov=True`` only with ``momentum > 0``, Adam's ``betas``).

    Raises ``ValueError`` if that leaves fewer than 3 learning rates per combination (an
    optimum cannot be bracketed by 2 points).
    """
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 3:
        raise ValueError(f"budget must be an int >= 3, got {budget!r}")
    lo, hi = lr_range
    if not (0 < lo < hi and math.isfinite(hi)):
        raise ValueError(f"lr_range must be (low, high) with 0 < low < high, got {lr_range!r}")
    combos = _combinations(knobs)
    per_combo = budget // len(combos)
    if per_combo < 3:
        raise ValueError(f"a budget of {budget} trials over {len(combos)} knob combinations leaves {per_combo} "
                         "learning rates each; give fewer knob values or a larger budget")
    lrs = np.logspace(np.log10(lo), np.log10(hi), per_combo)
    return [Trial(combo, float(lr)) for combo in combos for lr in lrs]


def _combinations(knobs) -> list[dict]:
    if isinstance(knobs, Mapping):
        names = list(knobs)
        for name in names:
            if len(knobs[name]) == 0:
                raise ValueError(f"knob {name!r} has no values")
        return [dict(zip(names, values)) for values in itertools.product(*(knobs[n] for n in names))]
    combos = [dict(c) for c in knobs]
    if not combos or not all(isinstance(c, Mapping) for c in knobs):
        raise ValueError(f"knobs must be a mapping name -> values or a non-empty list of dicts, got {knobs!r}")
    if len({tuple(sorted(c)) for c in combos}) != 1:
        raise ValueError(f"every knob combination must name the same hyperparameters, got {knobs!r}")
    return combos


def _last_finite(x: np.ndarray) -> float:
    f = x[np.isfinite(x)]
    return float(f[-1]) if f.size else math.inf


def scores(s: Sweep, metric: str) -> np.ndarray:
    """``(seeds, lrs)`` scores of a sweep, lower is better (module docstring)."""
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {METRICS}, got {metric!r}")
    steps = int(s.info.get("steps", s.steps))  # a thinned saved sweep records its length in info
    if metric == "final_loss":
        return s.final_loss()
    if metric == "tail_expected_loss":
        if s.expected_loss is None:
            raise ValueError(f"{s.label}: the sweep has no expected loss (run it with expected_loss_from)")
        tail = s.expected_loss[..., -(steps - tail_steps(steps) + 1):]
        out = tail.mean(axis=-1)
        out[s.diverged | ~np.isfinite(out)] = np.inf
        return out
    curve = s.loss if metric == "iterations" else s.expected_loss
    if curve is None:
        raise ValueError(f"{s.label}: the sweep has no expected loss (run it with expected_loss_from=0)")
    initial = curve[..., 0]
    last = np.array([[_last_finite(curve[i, j]) for j in range(s.lrs.size)] for i in range(s.seeds.size)])
    out = np.where(s.hit_at >= 0, s.hit_at.astype(np.float64), steps * (1.0 + last / initial))
    out[s.diverged & (s.hit_at < 0)] = np.inf
    return out


def _stable_median(values: np.ndarray, axis: int = 0) -> np.ndarray:
    """The median over the tuning seeds, ``inf`` where any seed diverged (the stability rule)."""
    values = np.where(np.isnan(values), np.inf, values)
    return np.where(np.isinf(values).any(axis=axis), np.inf, np.median(values, axis=axis))


def _run(problem, optimizer, hyper, lrs, steps, seeds, metric, threshold, sweep_kw) -> np.ndarray:
    s = sweep(problem, optimizer, np.asarray(lrs, dtype=np.float64), steps, seeds=tuple(seeds), hyper=hyper,
              record_norms=False, progress=False, **sweep_kw, **metric_kwargs(metric, steps, threshold))
    return scores(s, metric)


def rung_steps(steps: int, halving: Optional[int], rungs: int) -> list[int]:
    """The lengths of the rungs of successive halving: ``steps / halving^(rungs-1)``, ...,
    ``steps`` (rounded up, at least 1 step; repeated lengths merged); ``[steps]`` without
    halving."""
    if halving is None:
        return [int(steps)]
    out = []
    for r in range(rungs - 1, -1, -1):
        length = max(1, math.ceil(steps / halving ** r))
        if not out or length > out[-1]:
            out.append(length)
    return out


def _search(problem, optimizer, cand, lengths, seeds, metric, threshold, halving, sweep_kw, phase, rung_log):
    """Successive halving over the configurations ``cand`` (``[(hyper, lr)]``); returns the
    full-length trials ``[(hyper, lr, score)]`` and every trial's score at its longest rung."""
    alive = list(range(len(cand)))  # indices of the trials promoted to this rung
    queue: list[int] = []  # the previous rung's finite trials not promoted, best first: the back-fill
    latest: dict[int, float] = {}
    ran: list[int] = []
    sc_r: dict[int, float] = {}
    for r, length in enumerate(lengths):
        last = r == len(lengths) - 1
        ran, sc_r, todo = [], {}, list(alive)
        while todo:
            for combo in _unique_combos([Trial(*cand[i]) for i in todo]):
                idx = [i for i in todo if cand[i][0] == combo]
                sc = _stable_median(_run(problem, optimizer, combo, [cand[i][1] for i in idx], length, seeds,
                                         metric, threshold, sweep_kw), axis=0)
                sc_r.update({i: float(v) for i, v in zip(idx, sc)})
            ran += todo
            missing = len(alive) - sum(math.isfinite(sc_r[i]) for i in ran)
            todo, queue = queue[:max(missing, 0)], queue[max(missing, 0):]
        latest.update({i: sc_r[i] for i in ran})
        order = sorted(ran, key=lambda i: (sc_r[i], ran.index(i)))  # stable: ties keep the trial order
        keep = len(ran) if last or halving is None else max(1, math.ceil(len(alive) / halving))
        promoted = sorted(order[:keep], key=ran.index)
        rung_log.append({"phase": phase, "steps": int(length), "kept": [ran.index(i) for i in promoted],
                         "backfilled": len(ran) - len(alive),
                         "trials": [(resolve_hyper(optimizer, cand[i][0]), cand[i][1], sc_r[i]) for i in ran]})
        queue = [i for i in order[keep:] if math.isfinite(sc_r[i])]
        alive = promoted
    final = [(cand[i][0], cand[i][1], sc_r[i]) for i in ran]
    return final, latest


def refine_grid(lr: float, coarse_lrs: Sequence[float], refine: int) -> list[float]:
    """``refine`` learning rates log-spaced strictly between ``lr``'s coarse neighbours, one
    coarse step below and above it (beyond the range when ``lr`` is at its edge); ``refine``
    even, so that ``lr`` itself is not repeated."""
    grid = sorted(coarse_lrs)
    step = math.log(grid[1] / grid[0]) if len(grid) > 1 else math.log(10.0)
    return [float(v) for v in np.exp(np.linspace(math.log(lr) - step, math.log(lr) + step, refine + 2))[1:-1]]


def tune(problem, optimizer: str, steps: int, *, coarse: int, refine: int, lr_range: tuple[float, float],
         knobs: Optional[Mapping[str, Sequence]] = None, fixed: Optional[dict] = None,
         tuning_seeds: Sequence[int] = (0, 1, 2, 3, 4), metric: str = "tail_expected_loss",
         threshold: Optional[float] = None, halving: Optional[int] = None, rungs: int = 3,
         schedule: Optional[dict] = None, dtype: torch.dtype = torch.float32,
         num_threads: Optional[int] = 1) -> Tuned:
    """Tune ``optimizer`` on ``problem`` with exactly ``coarse + refine`` trials (module docstring).

    ``knobs``: hyperparameters to search besides the lr (name -> values, or a list of
    combinations); ``fixed``: hyperparameters held at a stated value (both are checked
    against the optimizer's known hyperparameters before any training). ``halving``:
    ``None`` (every trial runs all ``steps``) or the factor ``eta >= 2`` of successive halving
    over ``rungs >= 2`` rungs. ``schedule``: the learning-rate schedule every trial uses
    (:mod:`isolab.book.engine.schedules`).
    """
    metric_kwargs(metric, steps, threshold)  # validates the metric and its threshold
    if halving is not None and (isinstance(halving, bool) or not isinstance(halving, int) or halving < 2):
        raise ValueError(f"halving must be None or an int >= 2, got {halving!r}")
    if isinstance(rungs, bool) or not isinstance(rungs, int) or rungs < 2:
        raise ValueError(f"rungs must be an int >= 2, got {rungs!r}")
    if isinstance(refine, bool) or not isinstance(refine, int) or refine < 0 or refine % 2:
        raise ValueError(f"refine must be an even int >= 0 (the coarse winner is not repeated), got {refine!r}")
    fixed = dict(fixed or {})
    combos = _combinations(knobs or {})
    if isinstance(coarse, bool) or not isinstance(coarse, int) or coarse % len(combos):
        raise ValueError(f"coarse must be a multiple of the {len(combos)} knob combinations (every optimizer runs "
                         f"exactly coarse + refine trials), got {coarse!r}")
    overlap = set(combos[0]) & set(fixed)
    if overlap:
        raise ValueError(f"{sorted(overlap)} are both tuned (knobs) and fixed")
    for combo in combos:  # names and values checked before any training
        resolve_hyper(optimizer, {**fixed, **combo})
    sweep_kw = dict(dtype=dtype, num_threads=num_threads, schedule=schedule)
    lengths = rung_steps(steps, halving, rungs)
    rung_log: list = []
    trials = trial_grid(combos, coarse, tuple(map(float, lr_range)))
    cand = [({**fixed, **t.hyper}, t.lr) for t in trials]
    final, latest = _search(problem, optimizer, cand, lengths, tuning_seeds, metric, threshold, halving, sweep_kw,
                            "coarse", rung_log)
    history = [(resolve_hyper(optimizer, cand[i][0]), cand[i][1], latest[i]) for i in sorted(latest)]
    best = min(final, key=lambda x: x[2]) if final else None
    if best is None or not math.isfinite(best[2]):
        lo, hi = lr_range
        raise RuntimeError(f"{optimizer}: every trial over lr {lo:.3g}..{hi:.3g} diverged on some tuning seed; "
                           "move lr_range")
    searched = [t.lr for t in trials]
    if refine:
        lrs = refine_grid(best[1], [t.lr for t in trials if t.hyper == {k: best[0][k] for k in combos[0]}], refine)
        cand2 = [(dict(best[0]), lr) for lr in lrs]
        final2, latest2 = _search(problem, optimizer, cand2, lengths, tuning_seeds, metric, threshold, halving,
                                  sweep_kw, "refine", rung_log)
        history += [(resolve_hyper(optimizer, cand2[i][0]), cand2[i][1], latest2[i]) for i in sorted(latest2)]
        searched += lrs
        finite2 = [x for x in final2 if math.isfinite(x[2])]
        if finite2:
            best2 = min(finite2, key=lambda x: x[2])
            if best2[2] <= best[2]:
                best = best2  # the refine phase wins a tie
    ran = {(tuple(sorted((k, str(v)) for k, v in h.items())), lr) for h, lr, _ in history}
    if len(ran) != coarse + refine:
        raise RuntimeError(f"{optimizer}: {len(ran)} distinct configurations ran, not coarse + refine = "
                           f"{coarse + refine}")
    hyper, lr, score = best
    interior = min(searched) < lr < max(searched)
    return Tuned(optimizer, resolve_hyper(optimizer, hyper), float(lr), score, metric, int(steps),
                 tuple(int(s) for s in tuning_seeds), coarse + refine, tuple(map(float, lr_range)), interior,
                 history, halving, rung_log, schedule=schedule, coarse=coarse, refine=refine)


def tune_lr(evaluate, *, coarse: int, refine: int, lr_range: tuple[float, float],
            tuning_seeds: Sequence[int] = (0, 1, 2, 3, 4)) -> dict:
    """The learning-rate search of :func:`tune` for any training run: ``evaluate(lr, seed)``
    returns a score (lower is better, ``inf`` or NaN when the run diverged). ``coarse``
    log-spaced rates over ``lr_range``, then ``refine`` more strictly between the best
    one's neighbours; every rate on every tuning seed, and a rate that diverges on any seed
    is out (the stability rule). No successive halving (the runs are too short to gain).
    Returns ``{"lr", "score", "interior", "trials": [(lr, score), ...]}`` (every trial, in
    the order run)."""
    if isinstance(refine, bool) or not isinstance(refine, int) or refine < 0 or refine % 2:
        raise ValueError(f"refine must be an even int >= 0, got {refine!r}")
    coarse_lrs = [t.lr for t in trial_grid({}, coarse, tuple(map(float, lr_range)))]

    def score(lr):
        values = np.array([evaluate(lr, s) for s in tuning_seeds], dtype=np.float64)
        return float(_stable_median(values[:, None], axis=0)[0])

    trials = [(lr, score(lr)) for lr in coarse_lrs]
    best = min(trials, key=lambda x: x[1])
    if not math.isfinite(best[1]):
        raise RuntimeError(f"every learning rate in {lr_range} diverged on some tuning seed; move lr_range")
    if refine:
        trials += [(lr, score(lr)) for lr in refine_grid(best[0], coarse_lrs, refine)]
    lr, value = min(trials, key=lambda x: x[1])
    searched = [x[0] for x in trials]
    return {"lr": lr, "score": value, "interior": min(searched) < lr < max(searched), "trials": trials}


def _unique_combos(trials: list[Trial]) -> list[dict]:
    out: list[dict] = []
    for t in trials:
        if t.hyper not in out:
            out.append(t.hyper)
    return out


def evaluate(problem, tuned: Tuned, seeds: Sequence[int], *, steps: Optional[int] = None,
             threshold: Optional[float] = None, dtype: torch.dtype = torch.float32,
             num_threads: Optional[int] = 1) -> np.ndarray:
    """Per-seed scores of the tuned setting on ``seeds`` (held out: none of them may be a
    tuning seed), with the tuned schedule."""
    reused = set(map(int, seeds)) & set(tuned.tuning_seeds)
    if reused:
        raise ValueError(f"seeds {sorted(reused)} were used to tune {tuned.optimizer}; report on held-out seeds")
    sc = _run(problem, tuned.optimizer, tuned.hyper, [tuned.lr], steps or tuned.steps, seeds, tuned.metric,
              threshold, dict(dtype=dtype, num_threads=num_threads, schedule=tuned.schedule))
    return sc[:, 0]

