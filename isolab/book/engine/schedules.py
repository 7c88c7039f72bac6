r"""Learning-rate schedules for fixed-budget comparisons: a linear warmup, then a decay.

A comparison at a fixed number of steps that runs every optimizer at a constant rate
measures, in part, how well each tolerates a rate that is never lowered: the best
constant rate is a compromise between moving fast early and settling late. Practice
(and AlgoPerf's rules) give every optimizer the same schedule instead. A schedule here is
a small dict, saved with the results::

    {"warmup": 0.05, "decay": "cosine"}   # 5 % linear warmup, then cosine to zero
    {"warmup": 0.05, "decay": "cosine", "floor": 0.1}   # ... to 10 % of the peak

The rate of update ``t`` (``t = 0, ..., steps - 1``) is ``lr * multiplier(schedule, t,
steps)``: during the first ``w = ceil(warmup * steps)`` updates ``(t + 1) / w``, then
``0.5 (1 + cos(pi (t - w + 1) / (steps - w + 1)))`` for ``"cosine"``, ``1 - (t - w + 1) /
(steps - w + 1)`` for ``"linear"`` and ``1`` for ``"constant"``; the last update still moves
(its multiplier is above zero). An optional ``"floor"`` ``f`` in ``[0, 1]`` ends the decay at
``f`` instead of 0: the decay's factor ``d`` becomes ``f + (1 - f) d`` (``f = 0`` is bitwise the
plain schedule, ``f = 1`` a constant rate after the warmup).
"""

from __future__ import annotations

import math
from typing import Optional

__all__ = ["DECAYS", "check_schedule", "multiplier", "multipliers"]

DECAYS = ("constant", "cosine", "linear")


def check_schedule(schedule: Optional[dict]) -> Optional[dict]:
    """``schedule`` validated (``None`` is a constant rate); raises ``ValueError`` naming it."""
    if schedule is None:
        return None
    if not isinstance(schedule, dict) or not {"warmup", "decay"} <= set(schedule) <= {"warmup", "decay", "floor"}:
        raise ValueError(f"a schedule is a dict with the keys 'warmup' and 'decay' (and optionally 'floor'), "
                         f"got {schedule!r}")
    w = schedule["warmup"]
    if isinstance(w, bool) or not isinstance(w, (int, float)) or not 0 <= w < 1:
        raise ValueError(f"schedule['warmup'] must be a fraction of the steps in [0, 1), got {w!r}")
    if schedule["decay"] not in DECAYS:
        raise ValueError(f"schedule['decay'] must be one of {DECAYS}, got {schedule['decay']!r}")
    out = {"warmup": float(w), "decay": schedule["decay"]}
    if "floor" in schedule:
        f = schedule["floor"]
        if isinstance(f, bool) or not isinstance(f, (int, float)) or not 0 <= f <= 1:
            raise ValueError(f"schedule['floor'] must be a fraction of the peak rate in [0, 1], got {f!r}")
        out["floor"] = float(f)
    return out


def multiplier(schedule: Optional[dict], t: int, steps: int) -> float:
    """The factor on the learning rate of update ``t`` of ``steps`` (module docstring)."""
    if schedule is None:
        return 1.0
    w = math.ceil(schedule["warmup"] * steps)
    if t < w:
        return (t + 1) / w
    span = steps - w + 1
    done = (t - w + 1) / span
    if schedule["decay"] == "cosine":
        d = 0.5 * (1.0 + math.cos(math.pi * done))
    elif schedule["decay"] == "linear":
        d = 1.0 - done
    else:
        return 1.0
    f = schedule.get("floor", 0.0)
    return d if f == 0 else f + (1.0 - f) * d


def multipliers(schedule: Optional[dict], steps: int) -> list[float]:
    """Every update's factor, ``[multiplier(schedule, t, steps) for t in range(steps)]``."""
    return [multiplier(schedule, t, steps) for t in range(steps)]
