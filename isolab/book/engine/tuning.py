r"""The tuning protocol of Part III (version 3.1): one pilot for everyone, the same trials for
every optimizer, every knob its authors tune tuned for all, choices on five tuning seeds
under a stability rule, verdicts on held-out seeds and again on fresh ones.

The protocol is fixed here, in :data:`PROTOCOL` and :data:`TUNED_KNOBS`, before the runs it
governs, and stated in words on the book's protocol page (``book/protocol.md``). Every Part
III experiment follows it:

0. **A shared pilot centres every range the same way** (:func:`pilot`). Each optimizer, at
   its library defaults and at each of its momentum values (:func:`with_momentum`), runs
   ``per_decade`` learning rates per decade over one span for all (``1e-6 .. 1e1``) on the
   pilot seeds (two of the tuning seeds), at the full budget; the best stable rate ``c`` of
   a momentum value centres the coarse range ``[c / f, c f]`` of every knob setting with that
   momentum, with the same ``f`` for everyone (:data:`PROTOCOL` ``["range_factor"]``). No
   range is set by hand. (Version 3.0 ran the pilot at the default momentum only; on Figure
   4, Muon's choice at momentum 0 then fell on the edge of its range, its best rate lying
   far above the pilot's centre at 0.95. Version 3.1 replaced it before any result was kept.)
1. **The same trials, counted as run.** Each optimizer runs exactly ``coarse + refine``
   configurations. Its knobs other than the learning rate span a product grid built by one
   rule (:func:`knob_grid`): the momentum over ``{0, 0.9, 0.95}`` for every optimizer (Adam's
   family through :math:`\beta_1`), and the damping or :math:`\epsilon` over its library
   default and a decade either side wherever there is one (:data:`TUNED_KNOBS`). The
   *coarse* phase gives each knob setting ``coarse // (size of that grid)`` log-spaced rates
   over its momentum's range; the *refine* phase spends ``refine`` more trials on the learning rate of the coarse winner's
   knob setting, log-spaced strictly between its two coarse neighbours. No grid is ever
   moved or rerun: the count every optimizer gets is the count it ran
   (:func:`check_entry` checks a saved entry).
2. **Successive halving** (``halving=eta``) inside each phase: every trial first runs a
   fraction ``1/eta^(rungs-1)`` of the steps on the tuning seeds, the best ``1/eta`` go on
   to a run ``eta`` times longer, until the survivors run all ``steps``. A promoted trial
   that diverges at the longer length is replaced by the next best of the previous rung
   (back-fill: a configuration already tried, run longer; no new configuration).
3. **Stability.** A configuration that diverges on *any* tuning seed scores ``inf`` and is
   out. Otherwise its score is the median over the tuning seeds.
4. **The choice** is the best full-length trial of both phases; ``interior`` records whether
   its rate lies strictly inside every rate searched.
5. **Verdicts** (:mod:`isolab.book.engine.intervals`): the choice runs on 20 held-out seeds
   and again on 20 fresh seeds (every optimizer's runs change). One optimizer is ahead of
   another only where the interval of their paired log ratio lies wholly on one side of
   zero (the pre-registered minimum effect is none, :data:`PROTOCOL` ``["min_effect"]``, for
   every comparison) in *both* sets; otherwise the pair is *unresolved*, and shown set by
   set (:func:`~isolab.book.engine.intervals.ranked`). A measured ratio compared with a
   threshold is unresolved when the two are within the tuning grid's resolution
   (:func:`~isolab.book.engine.intervals.against_threshold`). Divergences are counted per
   set.
6. **Everything explicit.** A :class:`Tuned` setting carries every hyperparameter by name
   (the defaults filled in) and the schedule, so a later change of a library default cannot
   move a saved result.

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
           "refine_grid", "metric_kwargs", "tail_steps", "METRICS", "tune_lr", "PROTOCOL", "TUNED_KNOBS",
           "knob_grid", "lr_scale", "momentum_of", "with_momentum", "pilot", "pilot_lrs", "check_entry"]

METRICS = ("tail_expected_loss", "iterations_expected", "final_loss", "iterations")
#: The fraction of the steps the tail metric averages over.
TAIL = 0.1


#: Part III's protocol, version 3: written down before the runs it governs.
PROTOCOL = {
    "version": 3.1,
    "momenta": (0.0, 0.9, 0.95),           # every optimizer's momentum (Adam's family: beta1)
    "damping_spread": (0.1, 1.0, 10.0),    # damping or eps: the library default and a decade either side
    "pilot": {"span": (1e-6, 1e1), "per_decade": 2, "seeds": (0, 1), "per_momentum": True},
    "range_factor": 6.0,                   # coarse range [c/6, 6c] around the pilot's best rate c
    "coarse": 54, "refine": 12, "halving": 4, "rungs": 3,
    "tuning_seeds": (0, 1, 2, 3, 4),
    "heldout_seeds": tuple(range(10, 30)),
    "fresh_seeds": tuple(range(30, 50)),   # a second held-out set: every optimizer's runs change
    "interval_level": 0.9,
    "min_effect": 0.0,                     # no minimum effect: an interval off zero in both sets ranks
}

#: The knobs each method's authors tune besides the learning rate, tuned for every optimizer
#: that has them: ``optimizer -> (momentum knob, damping knob or None)``. ``"momentum"`` is
#: the optimizer's own momentum (SGD: Nesterov's form whenever it is on), ``"beta1"`` Adam's
#: first moment (``betas[0]``, ``betas[1]`` held at the library default); ``"damping"`` and
#: ``"eps"`` go over :data:`PROTOCOL` ``["damping_spread"]`` times the library default.
TUNED_KNOBS = {
    "sgd": ("momentum", None), "signsgd": ("momentum", None), "muon": ("momentum", None),
    "adam": ("beta1", "eps"), "soap": ("beta1", "eps"),
    "isoadam": ("beta1", "damping"), "shampoo_graft": ("beta1", "damping"),
    "shampoo": ("momentum", "damping"), "kfac": ("momentum", "damping"), "iso": ("momentum", "damping"),
}


def knob_grid(optimizer: str, base: dict) -> list[dict]:
    """The knob combinations :data:`TUNED_KNOBS` gives ``optimizer`` around ``base`` (its
    every hyperparameter: the library's defaults and the entry's stated deviations)."""
    if optimizer not in TUNED_KNOBS:
        raise ValueError(f"the protocol has no knobs for {optimizer!r}; known: {sorted(TUNED_KNOBS)}")
    mom, damp = TUNED_KNOBS[optimizer]
    out = []
    for mu in PROTOCOL["momenta"]:
        if mom == "beta1":
            combo = {"betas": (mu, tuple(base["betas"])[1])}
        else:
            combo = {"momentum": mu}
            if optimizer == "sgd":
                combo["nesterov"] = mu > 0
        if damp is None:
            out.append(combo)
        else:
            out += [{**combo, damp: _round(base[damp] * f)} for f in PROTOCOL["damping_spread"]]
    return out


def _round(x: float) -> float:
    return float(f"{x:.6g}")


def momentum_of(optimizer: str, combo: dict) -> float:
    """The momentum value of a knob setting (Adam's family: ``betas[0]``)."""
    mom, _ = TUNED_KNOBS[optimizer]
    return float(tuple(combo["betas"])[0] if mom == "beta1" else combo["momentum"])


def with_momentum(optimizer: str, base: dict, mu: float) -> dict:
    """``base`` with its momentum knob set to ``mu`` (SGD: Nesterov's form when ``mu > 0``):
    the setting a momentum value's pilot runs."""
    mom, _ = TUNED_KNOBS[optimizer]
    out = dict(base)
    if mom == "beta1":
        out["betas"] = (mu, tuple(base["betas"])[1])
    else:
        out["momentum"] = mu
        if optimizer == "sgd":
            out["nesterov"] = mu > 0
    return out


def lr_scale(optimizer: str, combo: dict, centres: Optional[Mapping] = None) -> float:
    """The factor on a knob setting's learning rates: its momentum's pilot centre over the
    first momentum's (``centres``: momentum -> pilot centre); 1 without pilots."""
    if not centres:
        return 1.0
    first = centres[min(centres)]
    return float(centres[momentum_of(optimizer, combo)] / first)


def check_entry(optimizer: str, knobs, trials: int, coarse: Optional[int] = None,
                refine: Optional[int] = None) -> None:
    """Raise ``ValueError`` unless an entry follows the protocol: its knob combinations are
    exactly the ones :data:`TUNED_KNOBS` asks for (every knob tuned, with the protocol's
    values) and it ran exactly ``coarse + refine`` distinct trials."""
    coarse = PROTOCOL["coarse"] if coarse is None else coarse
    refine = PROTOCOL["refine"] if refine is None else refine
    combos = _combinations(knobs)
    mom, damp = TUNED_KNOBS[optimizer]
    names = {"betas" if mom == "beta1" else "momentum"} | ({damp} if damp else set())
    got = set().union(*(set(c) for c in combos)) - {"nesterov"}
    if got != names:
        raise ValueError(f"{optimizer}: tunes {sorted(got)}, the protocol asks for {sorted(names)}")
    momenta = {(c["betas"][0] if mom == "beta1" else c["momentum"]) for c in combos}
    if momenta != set(PROTOCOL["momenta"]):
        raise ValueError(f"{optimizer}: momentum values {sorted(momenta)}, the protocol's are {PROTOCOL['momenta']}")
    if damp and len({c[damp] for c in combos}) != len(PROTOCOL["damping_spread"]):
        raise ValueError(f"{optimizer}: {damp} takes {len({c[damp] for c in combos})} values, the protocol "
                         f"{len(PROTOCOL['damping_spread'])}")
    if trials != coarse + refine:
        raise ValueError(f"{optimizer}: {trials} trials ran, the protocol gives every optimizer {coarse} + {refine}")


def pilot_lrs(span: Optional[tuple] = None, per_decade: Optional[int] = None) -> np.ndarray:
    """The pilot's learning rates: ``per_decade`` per decade over ``span``, ends included."""
    lo, hi = span or PROTOCOL["pilot"]["span"]
    per = per_decade or PROTOCOL["pilot"]["per_decade"]
    count = int(round(per * math.log10(hi / lo))) + 1
    return np.logspace(math.log10(lo), math.log10(hi), count)


def pilot(problem, optimizer: str, steps: int, hyper: dict, *, metric: str = "tail_expected_loss",
          threshold: Optional[float] = None, schedule: Optional[dict] = None, seeds: Optional[Sequence[int]] = None,
          lrs: Optional[Sequence[float]] = None, range_factor: Optional[float] = None,
          dtype: torch.dtype = torch.float32, num_threads: Optional[int] = 1) -> dict:
    """The shared pilot of one optimizer (module docstring, step 0): :func:`pilot_lrs` at
    ``hyper`` on the pilot seeds, the stability rule, the best rate ``centre`` and the coarse
    range ``(centre / f, centre * f)``. Raises ``RuntimeError`` if every rate diverges or the
    best lies at an end of the span (then the span, not a hand, must move)."""
    seeds = tuple(PROTOCOL["pilot"]["seeds"] if seeds is None else seeds)
    lrs = np.asarray(pilot_lrs() if lrs is None else lrs, dtype=np.float64)
    f = PROTOCOL["range_factor"] if range_factor is None else range_factor
    sc = _stable_median(_run(problem, optimizer, hyper, lrs, steps, seeds, metric, threshold,
                             dict(dtype=dtype, num_threads=num_threads, schedule=schedule)), axis=0)
    if not np.isfinite(sc).any():
        raise RuntimeError(f"{optimizer}: every pilot rate diverged on some pilot seed")
    best = int(np.argmin(sc))
    if best in (0, lrs.size - 1):
        raise RuntimeError(f"{optimizer}: the pilot's best rate {lrs[best]:.3g} is at an end of its span")
    c = float(lrs[best])
    return {"lrs": lrs.tolist(), "scores": sc.tolist(), "centre": c, "range": (c / f, c * f), "seeds": list(seeds),
            "steps": int(steps), "hyper": _jsonable(resolve_hyper(optimizer, hyper)), "range_factor": f}


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


def trial_grid(knobs, budget: int, lr_range: tuple[float, float], scale=None) -> list[Trial]:
    """The ``budget`` trials of one optimizer: every combination of ``knobs`` (name ->
    values) times ``budget // combinations`` learning rates log-spaced over ``lr_range``.
    ``knobs`` may also be a list of the combinations themselves (dicts), for knobs that
    go together (SGD's ``nesterov=True`` only with ``momentum > 0``, Adam's ``betas``).

    ``scale(combo)``, if given, multiplies a combination's rates (:func:`lr_scale`).

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
    return [Trial(combo, float(lr) * (1.0 if scale is None else scale(combo))) for combo in combos for lr in lrs]


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
         num_threads: Optional[int] = 1, scale=None) -> Tuned:
    """Tune ``optimizer`` on ``problem`` with exactly ``coarse + refine`` trials (module docstring).

    ``knobs``: hyperparameters to search besides the lr (name -> values, or a list of
    combinations); ``fixed``: hyperparameters held at a stated value (both are checked
    against the optimizer's known hyperparameters before any training). ``halving``:
    ``None`` (every trial runs all ``steps``) or the factor ``eta >= 2`` of successive halving
    over ``rungs >= 2`` rungs. ``schedule``: the learning-rate schedule every trial uses
    (:mod:`isolab.book.engine.schedules`). ``scale``: ``scale(combo)`` multiplies a knob
    setting's coarse rates (:func:`lr_scale`: each momentum's own pilot, protocol 3.1).
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
    trials = trial_grid(combos, coarse, tuple(map(float, lr_range)), scale)
    cand = [({**fixed, **t.hyper}, t.lr) for t in trials]
    final, latest = _search(problem, optimizer, cand, lengths, tuning_seeds, metric, threshold, halving, sweep_kw,
                            "coarse", rung_log)
    history = [(resolve_hyper(optimizer, cand[i][0]), cand[i][1], latest[i]) for i in sorted(latest)]
    best = min(final, key=lambda x: x[2]) if final else None
    if best is None or not math.isfinite(best[2]):
        lo, hi = lr_range
        raise RuntimeError(f"{optimizer}: every trial over lr {lo:.3g}..{hi:.3g} diverged on some tuning seed; "
                           "move lr_range")
    searched = [t.lr for t in trials if t.hyper == {k: best[0][k] for k in combos[0]}]  # the winner's knob setting
    if refine:
        lrs = refine_grid(best[1], list(searched), refine)
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

