r"""Learning-rate schedules for fixed-budget comparisons: a linear warmup, then a decay.

A comparison at a fixed number of steps that runs every optimizer at a constant rate
measures, in part, how well each tolerates a rate that is never lowered: the best
constant rate is a compromise between moving fast early and settling late. Practice
(and AlgoPerf's rules) give every optimizer the same schedule instead. A schedule here is
a small dict, saved with the results::

    {"warmup": 0.05, "decay": "cosine"}   # 5 % linear warmup, then cosine to zero

The rate of update ``t`` (``t = 0, ..., steps - 1``) is ``lr * multiplier(schedule, t,
steps)``: during the first ``w = ceil(warmup * steps)`` updates ``(t + 1) / w``, then
``0.5 (1 + cos(pi (t - w + 1) / (steps - w + 1)))`` for ``"cosine"``, ``1 - (t - w + 1) /
(steps - w + 1)`` for ``"linear"`` and ``1`` for ``"constant"``; the last update still moves
(its multiplier is above zero).
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
    if not isinstance(schedule, dict) or set(schedule) != {"warmup", "decay"}:
        raise ValueError(f"a schedule is a dict with the keys 'warmup' and 'decay', got {schedule!r}")
    w = schedule["warmup"]
    if isinstance(w, bool) or not isinstance(w, (int, float)) or not 0 <= w < 1:
        raise ValueError(f"schedule['warmup'] must be a fraction of the steps in [0, 1), got {w!r}")
    if schedule["decay"] not in DECAYS:
        raise ValueError(f"schedule['decay'] must be one of {DECAYS}, got {schedule['decay']!r}")
    return {"warmup": float(w), "decay": schedule["decay"]}


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
        return 0.5 * (1.0 + math.cos(math.pi * done))
    if schedule["decay"] == "linear":
        return 1.0 - done
    return 1.0


def multipliers(schedule: Optional[dict], steps: int) -> list[float]:
    """Every update's factor, ``[multiplier(schedule, t, steps) for t in range(steps)]``."""
    return [multiplier(schedule, t, steps) for t in range(steps)]
