r"""Intervals for a median over seeds, and for the difference between two optimizers.

Part III reports each optimizer by the median of its score over held-out seeds. The
interval beside a median is the distribution-free one built from order statistics: for
``n`` seeds sorted, ``[x_(k), x_(n+1-k)]`` covers the true median with probability

.. math:: 1 - 2\,P(B \le k - 1), \qquad B \sim \mathrm{Binomial}(n, 1/2),

whatever the distribution of the scores (a diverged seed, scored ``inf``, is simply the
largest value). :func:`median_interval` takes the narrowest such interval whose coverage
reaches the level asked for and returns that coverage, so a label can say what the
interval is: with 20 seeds the 90 % interval is ``[x_(6), x_(15)]``, whose exact coverage is
95.9 %; with 5 seeds the only interval that reaches 90 % is ``[min, max]`` (93.75 %); with
3 seeds ``[min, max]`` covers the median only 75 % of the time, and the function says so
rather than pretending otherwise. (A percentile bootstrap of five values also lands on
``[min, max]``, but calls it a 90 % interval.)

A ranking between two optimizers compares them on the *same* seeds (same data, same
initial weights): :func:`paired_difference` is the median of the per-seed differences
with its order-statistic interval. "A is better than B" is supported when the whole
interval lies below zero. Both diverged on a seed: a tie (difference 0); only one
diverged: ``+inf`` or ``-inf``.

Verdicts (protocol version 3, :mod:`isolab.book.engine.tuning`): a pair is ranked only
where the paired interval lies on the same side of zero in *every* set of held-out seeds
(the held-out set and the fresh one); otherwise it is *unresolved* (:func:`ranked`), and a
page shows the pair set by set (:func:`by_set`). A measured ratio compared with a threshold
(:func:`against_threshold`) is unresolved when the two lie within the resolution of the
grid that produced the measurement.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

__all__ = ["Interval", "median_interval", "paired_difference", "coverage", "order_ranks", "ranked", "by_set",
           "against_threshold", "VERDICTS"]

#: The outcomes of :func:`ranked`.
VERDICTS = ("ahead", "behind", "unresolved")


@dataclass(frozen=True)
class Interval:
    """A median with its order-statistic interval and that interval's exact coverage."""

    median: float
    low: float
    high: float
    coverage: float  # probability that [low, high] covers the true median
    ranks: tuple  # (k, n + 1 - k), 1-based order statistics
    n: int

    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0

    def label(self) -> str:
        """``"95.9 % interval (ranks 6 and 15 of 20)"``."""
        return f"{100 * self.coverage:.3g} % interval (ranks {self.ranks[0]} and {self.ranks[1]} of {self.n})"

    def as_dict(self) -> dict:
        return {"median": self.median, "low": self.low, "high": self.high, "coverage": self.coverage,
                "ranks": list(self.ranks), "n": self.n}


def coverage(n: int, k: int) -> float:
    """``P(x_(k) <= median <= x_(n+1-k))`` for ``n`` continuous draws: ``1 - 2 P(B <= k - 1)``."""
    if not 1 <= k <= (n + 1) // 2:
        raise ValueError(f"k must be in [1, {(n + 1) // 2}] for n = {n}, got {k}")
    tail = sum(math.comb(n, j) for j in range(k)) / 2.0**n
    return 1.0 - 2.0 * tail


def order_ranks(n: int, level: float) -> tuple[int, float]:
    """``(k, coverage)``: the largest ``k`` whose interval covers the median with probability
    ``>= level`` (``k = 1``, ``[min, max]``, when no interval reaches it)."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 2:
        raise ValueError(f"an interval needs at least 2 values, got n = {n!r}")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    k = 1
    while k + 1 <= (n + 1) // 2 and coverage(n, k + 1) >= level:
        k += 1
    return k, coverage(n, k)


def _values(values) -> np.ndarray:
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 1:
        raise ValueError(f"need a 1-D sequence of per-seed values, got shape {x.shape}")
    if np.isnan(x).any():
        raise ValueError("per-seed values must not be NaN (score a diverged seed as inf)")
    return x


def median_interval(values: Sequence[float], level: float = 0.9) -> Interval:
    """The median of ``values`` and its order-statistic interval at ``level`` (module docstring)."""
    x = np.sort(_values(values))
    n = x.size
    k, cov = order_ranks(n, level)
    return Interval(float(np.median(x)), float(x[k - 1]), float(x[n - k]), cov, (k, n + 1 - k), n)


def paired_difference(a: Sequence[float], b: Sequence[float], level: float = 0.9) -> Interval:
    """The median over seeds of ``a - b`` with its interval (``a``, ``b`` on the same seeds,
    in the same order; both ``inf`` on a seed is a tie)."""
    a, b = _values(a), _values(b)
    if a.shape != b.shape:
        raise ValueError(f"paired values need the same seeds: shapes {a.shape} and {b.shape}")
    with np.errstate(invalid="ignore"):
        d = a - b
    d[np.isinf(a) & np.isinf(b) & (np.sign(a) == np.sign(b))] = 0.0
    return median_interval(d, level)


def ranked(intervals: Sequence[Interval], min_effect: float = 0.0) -> str:
    """``"ahead"`` if every set's paired interval (of ``a - b``, lower is better) lies wholly
    below ``-min_effect``, ``"behind"`` if every one lies wholly above ``min_effect``, else
    ``"unresolved"``. One interval per set of held-out seeds; at least one."""
    intervals = list(intervals)
    if not intervals:
        raise ValueError("ranked() needs the paired interval of at least one set of seeds")
    if all(iv.high < -min_effect for iv in intervals):
        return "ahead"
    if all(iv.low > min_effect for iv in intervals):
        return "behind"
    return "unresolved"


def by_set(intervals: Sequence[Interval], names: Sequence[str], fmt=lambda v: f"{v:+.3f}") -> str:
    """``"held-out −0.05 [−0.08, −0.02] · fresh −0.04 [−0.07, +0.01]"``: a pair set by set."""
    return " · ".join(f"{n} {fmt(iv.median)} [{fmt(iv.low)}, {fmt(iv.high)}]" for n, iv in zip(names, intervals))


def against_threshold(measured: float, threshold: float, resolution: float, *, below: bool = True) -> str:
    """``"holds"``, ``"fails"`` or ``"unresolved"`` for the claim "``measured`` is below
    ``threshold``" (``below=False``: above) when ``measured`` comes from a grid whose
    neighbouring values differ by the factor ``resolution`` (> 1): within that factor of the
    threshold the grid cannot tell the two sides apart."""
    if not resolution > 1:
        raise ValueError(f"resolution is a factor > 1 between neighbouring grid values, got {resolution!r}")
    if not (measured > 0 and threshold > 0):
        raise ValueError("against_threshold compares positive ratios")
    gap = math.log(measured / threshold)
    if abs(gap) < math.log(resolution):
        return "unresolved"
    return "holds" if (gap < 0) == below else "fails"
