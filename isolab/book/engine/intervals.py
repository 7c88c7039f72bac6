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
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

__all__ = ["Interval", "median_interval", "paired_difference", "coverage", "order_ranks"]


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
