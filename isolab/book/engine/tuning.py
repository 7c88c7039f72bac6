r"""The tuning protocol of Part III: the same trial budget for every optimizer, the setting
chosen on tuning seeds and reported on held-out seeds, with intervals.

A comparison of optimizers is only as fair as the tuning behind it. The protocol here is
the one every Part III experiment follows:

1. **The same budget.** Each optimizer gets ``budget`` trial configurations. Its knobs
   other than the learning rate (momentum, :math:`\beta_2`, ...) span a small product
   grid; the learning rate gets ``budget // (size of that grid)`` log-spaced values. An
   optimizer with more knobs therefore gets fewer learning rates, never more trials
   (:func:`trial_grid`).
2. **Not at an edge.** If the chosen learning rate is the smallest or the largest of its
   grid, the optimum may lie outside it: the grid is shifted by half its width in that
   direction and the tuning rerun (at most ``max_shifts`` times; every rerun costs the
   same budget again, and is recorded). If every trial diverged, the grid moves below
   itself (one shift).
3. **Tuning seeds, then held-out seeds.** The setting is chosen by the median score over
   ``tuning_seeds`` and then evaluated on ``heldout_seeds`` that played no part in the
   choice (:func:`evaluate`); the result is a median with a bootstrap interval over seeds
   (:func:`bootstrap_interval`).
4. **Successive halving** (optional, ``halving=eta``): every trial first runs a fraction
   ``1/eta^(rungs-1)`` of the steps on the tuning seeds; the best ``1/eta`` of them (median
   score over the tuning seeds at that length) run ``eta`` times longer, and so on until
   the survivors run all ``steps``; the best of those is the search's choice. After a
   moved grid, the setting kept is the best full-length trial of all the searches (the
   move can drop the earlier winner in an early rung). Every optimizer gets the
   same rungs, so the budget stays equal; a rung restarts its trials from step 0 (runs
   are cheap to redo and exactly the same as a run of that length). A promoted trial
   that diverges at the longer length is replaced by the next best of the previous rung
   (back-fill: a learning rate stable for a short run only must not end the search; the
   extra runs are recorded). ``Tuned.rungs`` records every rung: its length, its trials
   and scores, how many were back-filled, and which of them went on.
5. **Everything explicit.** A :class:`Tuned` setting carries every hyperparameter by name
   (the defaults filled in), so a later change of a library default cannot move a saved
   result.

Scores are "lower is better": the final loss (``inf`` when the lane diverged), or the
iterations to a threshold (a lane that never reaches it scores ``steps (1 + last/initial
loss)``, so slow lanes still rank).
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

__all__ = ["Trial", "Tuned", "trial_grid", "rung_steps", "scores", "tune", "evaluate", "bootstrap_interval"]

METRICS = ("final_loss", "iterations")


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
    tried with its median score, ``shifts`` how often the lr grid was moved off an edge,
    ``interior`` whether the kept choice lies inside the learning rates searched (all grids).
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
    shifts: int = 0
    trials: list = field(default_factory=list)
    halving: Optional[int] = None
    rungs: list = field(default_factory=list)

    def as_dict(self) -> dict:
        """JSON-ready (for a results file's metadata)."""
        return {
            "optimizer": self.optimizer, "hyper": _jsonable(self.hyper), "lr": self.lr, "score": self.score,
            "metric": self.metric, "steps": self.steps, "tuning_seeds": list(self.tuning_seeds),
            "budget": self.budget, "lr_range": list(self.lr_range), "interior": self.interior,
            "shifts": self.shifts,
            "trials": [{"hyper": _jsonable(h), "lr": lr, "score": s} for h, lr, s in self.trials],
            "halving": self.halving,
            "rungs": [{"steps": r["steps"], "kept": r["kept"], "backfilled": r.get("backfilled", 0),
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
    final = s.final_loss()
    if metric == "final_loss":
        return final
    initial = s.loss[..., 0]
    last = np.array([[_last_finite(s.loss[i, j]) for j in range(s.lrs.size)] for i in range(s.seeds.size)])
    steps = int(s.info.get("steps", s.steps))  # a thinned saved sweep records its length in info
    out = np.where(s.hit_at >= 0, s.hit_at.astype(np.float64), steps * (1.0 + last / initial))
    out[s.diverged & (s.hit_at < 0)] = np.inf
    return out


def _median(values: np.ndarray, axis=None) -> np.ndarray:
    # inf (a diverged seed) counts as a bad score, not as missing
    return np.median(np.where(np.isnan(values), np.inf, values), axis=axis)


def _run(problem, optimizer, hyper, lrs, steps, seeds, metric, threshold, sweep_kw) -> np.ndarray:
    kw = dict(sweep_kw)
    if metric == "iterations":
        kw.update(threshold=threshold, relative_threshold=True, retire_at_threshold=True)
    s = sweep(problem, optimizer, np.asarray(lrs, dtype=np.float64), steps, seeds=tuple(seeds), hyper=hyper,
              record_norms=False, progress=False, **kw)
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


def tune(problem, optimizer: str, steps: int, *, budget: int, lr_range: tuple[float, float],
         knobs: Optional[Mapping[str, Sequence]] = None, fixed: Optional[dict] = None,
         tuning_seeds: Sequence[int] = (0, 1), metric: str = "final_loss", threshold: Optional[float] = None,
         max_shifts: int = 2, halving: Optional[int] = None, rungs: int = 3,
         dtype: torch.dtype = torch.float32, num_threads: Optional[int] = 1) -> Tuned:
    """Tune ``optimizer`` on ``problem`` with ``budget`` trials (module docstring).

    ``knobs``: hyperparameters to search besides the lr (name -> values); ``fixed``:
    hyperparameters held at a stated value (both are checked against the optimizer's
    known hyperparameters). Every knob combination runs as one batched sweep over its
    learning rates and the tuning seeds. ``threshold`` (relative to the initial loss) is
    required for ``metric="iterations"``. ``halving``: ``None`` (every trial runs all
    ``steps``) or the factor ``eta >= 2`` of successive halving over ``rungs >= 2`` rungs
    (module docstring, item 4).
    """
    if metric == "iterations" and threshold is None:
        raise ValueError("metric='iterations' needs a threshold (a fraction of the initial loss)")
    if isinstance(max_shifts, bool) or not isinstance(max_shifts, int) or max_shifts < 0:
        raise ValueError(f"max_shifts must be an int >= 0, got {max_shifts!r}")
    if halving is not None and (isinstance(halving, bool) or not isinstance(halving, int) or halving < 2):
        raise ValueError(f"halving must be None or an int >= 2, got {halving!r}")
    if isinstance(rungs, bool) or not isinstance(rungs, int) or rungs < 2:
        raise ValueError(f"rungs must be an int >= 2, got {rungs!r}")
    fixed = dict(fixed or {})
    combos = _combinations(knobs or {})
    overlap = set(combos[0]) & set(fixed)
    if overlap:
        raise ValueError(f"{sorted(overlap)} are both tuned (knobs) and fixed")
    for combo in combos:  # names and values checked before any training
        resolve_hyper(optimizer, {**fixed, **combo})
    sweep_kw = dict(dtype=dtype, num_threads=num_threads)
    lo, hi = map(float, lr_range)
    shifts, history, rung_log = 0, [], []
    lengths = rung_steps(steps, halving, rungs)
    kept = None  # (hyper, lr, score): the best full-length trial of all the searches so far
    searched: list[float] = []  # every learning rate of every grid
    while True:
        trials = trial_grid(combos, budget, (lo, hi))
        grid = sorted({t.lr for t in trials})
        cand = [({**fixed, **t.hyper}, t.lr) for t in trials]
        alive = list(range(len(cand)))  # indices of the trials promoted to this rung
        queue: list[int] = []  # the previous rung's finite trials not promoted, best first: the back-fill
        latest: dict[int, float] = {}  # each trial's score at the longest rung it ran
        for r, length in enumerate(lengths):
            last = r == len(lengths) - 1
            ran, sc_r, todo = [], {}, list(alive)
            while todo:
                for combo in _unique_combos([Trial(*cand[i]) for i in todo]):
                    idx = [i for i in todo if cand[i][0] == combo]
                    sc = _median(_run(problem, optimizer, combo, [cand[i][1] for i in idx], length, tuning_seeds,
                                      metric, threshold, sweep_kw), axis=0)
                    sc_r.update({i: float(v) for i, v in zip(idx, sc)})
                ran += todo
                # a promoted trial that diverges at this length is replaced by the next best of the
                # previous rung (so that a rate stable for a short run only does not end the search)
                missing = len(alive) - sum(math.isfinite(sc_r[i]) for i in ran)
                todo, queue = queue[:max(missing, 0)], queue[max(missing, 0):]
            latest.update({i: sc_r[i] for i in ran})
            order = sorted(ran, key=lambda i: (sc_r[i], ran.index(i)))  # stable: ties keep the trial order
            keep = len(ran) if last else max(1, math.ceil(len(alive) / halving))
            promoted = sorted(order[:keep], key=ran.index)
            rung_log.append({"steps": int(length), "kept": [ran.index(i) for i in promoted],
                             "backfilled": len(ran) - len(alive),
                             "trials": [(resolve_hyper(optimizer, cand[i][0]), cand[i][1], sc_r[i]) for i in ran]})
            queue = [i for i in order[keep:] if math.isfinite(sc_r[i])]
            alive = promoted
        # every trial once, with its score at the last rung it reached
        history += [(resolve_hyper(optimizer, cand[i][0]), cand[i][1], latest[i]) for i in sorted(latest)]
        scored = [(cand[i][0], cand[i][1], sc_r[i]) for i in ran]
        searched += grid
        best = min(scored, key=lambda x: x[2]) if scored else None
        if best is not None and math.isfinite(best[2]) and (kept is None or best[2] <= kept[2]):
            kept = best  # a later search wins a tie
        if best is None or not math.isfinite(best[2]):
            if shifts == max_shifts and kept is not None:
                break  # an earlier search's trial stands
            if shifts == max_shifts:
                raise RuntimeError(f"{optimizer}: every trial over lr {lo:.3g}..{hi:.3g} diverged; widen lr_range")
            factor = lo / hi  # every trial diverged: the whole grid moves below itself (one shift, recorded)
            lo, hi, shifts = lo * factor, hi * factor, shifts + 1
            continue
        at_low, at_high = best[1] == grid[0], best[1] == grid[-1]
        if not (at_low or at_high) or shifts == max_shifts:
            break
        half = (math.log10(hi) - math.log10(lo)) / 2
        factor = 10 ** (-half if at_low else half)
        lo, hi, shifts = lo * factor, hi * factor, shifts + 1
    # the setting kept is the best full-length trial of *all* the searches: a moved grid can
    # drop the earlier winner in an early rung, and its own winner can then be worse
    hyper, lr, score = kept
    interior = min(searched) < lr < max(searched)
    return Tuned(optimizer, resolve_hyper(optimizer, hyper), float(lr), score, metric, int(steps),
                 tuple(int(s) for s in tuning_seeds), budget, (lo, hi), interior, shifts, history,
                 halving, rung_log)


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
    tuning seed)."""
    reused = set(map(int, seeds)) & set(tuned.tuning_seeds)
    if reused:
        raise ValueError(f"seeds {sorted(reused)} were used to tune {tuned.optimizer}; report on held-out seeds")
    sc = _run(problem, tuned.optimizer, tuned.hyper, [tuned.lr], steps or tuned.steps, seeds, tuned.metric,
              threshold, dict(dtype=dtype, num_threads=num_threads))
    return sc[:, 0]


def bootstrap_interval(values: Sequence[float], *, level: float = 0.9, resamples: int = 10_000,
                       seed: int = 0) -> tuple[float, float, float]:
    """``(median, low, high)``: the median over seeds and a percentile-bootstrap interval
    at ``level`` (resampling the seeds with replacement; a fixed generator, so the same
    numbers on any machine). ``inf`` values (diverged seeds) count as the worst scores."""
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 1 or x.size < 2:
        raise ValueError(f"need a 1-D sequence of at least 2 per-seed values, got shape {x.shape}")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    rng = np.random.default_rng(seed)
    medians = _median(x[rng.integers(0, x.size, size=(resamples, x.size))], axis=1)
    tail = (1 - level) / 2
    low, high = np.quantile(medians, [tail, 1 - tail], method="inverted_cdf")
    return float(_median(x)), float(low), float(high)
