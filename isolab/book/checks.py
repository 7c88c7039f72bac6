r"""A section's checks, printed for people: each claim with what was measured and what it expects.

Chapters check what they say by computing it. A column of ``True`` tells a reader
nothing, and the fourth digit of a float32 training loss changes from one CPU to the
next (so a checked output that prints it fails on another machine). :func:`report`
prints each claim beside what was measured and what the claim expects, at a precision
the caller chooses to match the claim::

    report([
        Check("Iso's twin gap stays at rounding level", f"{gap:.0e}", "< 1e-10", gap < 1e-10),
        Check("Adam's twin gap is percent-level", f"{adam:.2f}", "> 0.01", adam > 0.01),
    ])

gives (two short lines per claim, so that the table fits a page)::

    yes  Iso's twin gap stays at rounding level
         measured 2e-12; expected < 1e-10
    yes  Adam's twin gap is percent-level
         measured 0.13; expected > 0.01

The caller formats ``measured`` at the precision the claim needs, coarse enough to print
the same on every CPU.
"""

from __future__ import annotations

from typing import Iterable, NamedTuple

import numpy as np
import torch

__all__ = ["Check", "report", "format_report", "gap", "same", "within", "agrees"]


class Check(NamedTuple):
    """One claim: what it says, what was measured, what it expects, and whether it holds."""

    claim: str
    measured: str
    expected: str
    holds: bool


def format_report(checks: Iterable[Check], title: str | None = None) -> str:
    """The table :func:`report` prints, as a string."""
    rows = list(checks)
    if not rows:
        raise ValueError("report needs at least one Check")
    for row in rows:
        if not isinstance(row, Check):
            raise TypeError(f"expected Check rows, got {type(row).__name__}: {row!r}")
        if not isinstance(row.holds, (bool, np.bool_)):
            raise TypeError(f"Check.holds must be a bool, got {type(row.holds).__name__} for {row.claim!r}")
    lines = [title] if title else []
    for r in rows:
        lines.append(f"{'yes' if r.holds else 'NO ':3s}  {r.claim}")
        lines.append(f"     measured {r.measured}; expected {r.expected}")
    return "\n".join(lines)


def report(checks: Iterable[Check], title: str | None = None) -> None:
    """Print a section's checks, two lines per claim (see the module docstring)."""
    print(format_report(checks, title))



def gap(a, b) -> float:
    """The largest entrywise difference ``max |a - b|`` (a Python float)."""
    return (torch.as_tensor(a) - torch.as_tensor(b)).abs().max().item()


def same(claim: str, A, B, tol: float = 1e-12) -> Check:
    """A :class:`Check` that ``A`` equals ``B`` entrywise up to ``tol`` (and has its shape).
    The measured text says which side of the tolerance the largest gap lies on (the gap
    itself only when it is too large): rounding-level digits differ between CPUs."""
    A, B = torch.as_tensor(A, dtype=torch.float64), torch.as_tensor(B, dtype=torch.float64)
    holds = A.shape == B.shape and (gap(A, B) if A.numel() else 0.0) < tol
    measured = f"largest gap < {tol:.0e}" if holds else (
        f"largest gap {gap(A, B):.1e}" if A.shape == B.shape else f"shapes {tuple(A.shape)} vs {tuple(B.shape)}")
    return Check(claim, measured, f"< {tol:.0e}", bool(holds))


def within(claim: str, difference: float, tol: float) -> Check:
    """A :class:`Check` that a difference is at most ``tol``; it prints the bound rather
    than the difference itself when the claim holds (rounding-level digits differ between CPUs)."""
    holds = bool(difference <= tol)
    return Check(claim, f"difference below {tol:.0e}" if holds else f"difference {difference:.1e}", f"<= {tol:.0e}", holds)


def agrees(claim: str, value: float, target: float, digits: int = 4, tol: float = 1e-9) -> Check:
    """A :class:`Check` that ``value`` equals ``target`` to ``tol``, both printed with
    ``digits`` decimals (coarse enough to print the same on every CPU)."""
    return Check(claim, f"{value:.{digits}f}", f"{target:.{digits}f}", bool(abs(value - target) <= tol))
