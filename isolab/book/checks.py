r"""A section's checks: each claim with what was measured and what it expects, as one verdict.

Chapters check what they say by computing it. :func:`report` takes the section's claims
and shows a reader one line, the verdict ("✓ 3 claims hold: …"), that opens on a click
to every claim beside what was measured and what the claim expects::

    report([
        Check("Iso's twin gap stays at rounding level", f"{gap:.0e}", "< 1e-10", gap < 1e-10),
        Check("Adam's twin gap is percent-level", f"{adam:.2f}", "> 0.01", adam > 0.01),
    ])

**A claim of the book asserts.** If a :class:`Check` does not hold, :func:`report` raises
:class:`ClaimFailed` naming it, so the cell errors and the book build and nbval fail with
the claim in the message. A chapter never shows a failed claim of its own.

**A source's claim is shown as its verdict.** Where the book tests what a source says
and finds it false, the row is :func:`refuted` ("the paper: Iso is best at 40 layers —
refuted"); where it holds, :func:`reproduced`; where the evidence decides neither way (an
interval that straddles the line, a verdict that flips under a perturbation),
:func:`unresolved`. Each asserts the verdict the book states: a refuted claim that starts
to hold (or a reproduced one that stops, or an unresolved one that the evidence comes to
decide) raises too.

The plain-text form (what nbval compares, and what a terminal prints) is the verdict
line followed by two lines per claim::

    ✓ 2 claims hold
      ✓ Iso's twin gap stays at rounding level
          measured 2e-12; expected < 1e-10
      ✓ Adam's twin gap is percent-level
          measured 0.13; expected > 0.01

The caller formats ``measured`` at the precision the claim needs, coarse enough to print
the same on every CPU (and under :mod:`isolab.book.seeding`'s jitter).
"""

from __future__ import annotations

import html
from typing import Iterable, NamedTuple

import numpy as np
import torch

__all__ = ["Check", "ClaimFailed", "Report", "report", "format_report", "refuted", "reproduced", "unresolved",
           "gap", "same", "within", "agrees", "rel_gap", "close"]

#: The kinds of row: a claim of the book, a source's claim the book refutes, one it
#: reproduces, one the evidence does not decide.
KINDS = ("claim", "refuted", "reproduced", "unresolved")


class Check(NamedTuple):
    """One claim: what it says, what was measured, what it expects, and whether it holds.

    ``kind`` is ``"claim"`` for the book's own claims (the row must hold); a source's
    claim is made with :func:`refuted` or :func:`reproduced`, where ``holds`` says whether
    *the source's* claim holds and the row asserts the book's verdict on it, or with
    :func:`unresolved`, where ``holds`` says whether the evidence leaves it undecided.
    """

    claim: str
    measured: str
    expected: str
    holds: bool
    kind: str = "claim"

    @property
    def verdict_holds(self) -> bool:
        """Whether what the book says of this row is true."""
        return bool(self.holds) if self.kind in ("claim", "reproduced", "unresolved") else not bool(self.holds)


def refuted(source: str, claim: str, measured: str, expected: str, holds: bool) -> Check:
    """A source's claim that the book refutes; ``holds`` is whether the source's claim
    holds (the row asserts it does not)."""
    return Check(f"{source}: {claim}", measured, expected, holds, "refuted")


def reproduced(source: str, claim: str, measured: str, expected: str, holds: bool) -> Check:
    """A source's claim that the book reproduces; ``holds`` is whether it holds."""
    return Check(f"{source}: {claim}", measured, expected, holds, "reproduced")


def unresolved(source: str, claim: str, measured: str, expected: str, undecided: bool) -> Check:
    """A source's claim that the evidence does not decide; ``undecided`` is whether it
    indeed decides neither way (the row asserts that it does not)."""
    return Check(f"{source}: {claim}", measured, expected, undecided, "unresolved")


class ClaimFailed(AssertionError):
    """A claim the book makes does not hold where it is checked."""


def _validated(checks: Iterable[Check]) -> list[Check]:
    rows = list(checks)
    if not rows:
        raise ValueError("report needs at least one Check")
    for row in rows:
        if not isinstance(row, Check):
            raise TypeError(f"expected Check rows, got {type(row).__name__}: {row!r}")
        if not isinstance(row.holds, (bool, np.bool_)):
            raise TypeError(f"Check.holds must be a bool, got {type(row.holds).__name__} for {row.claim!r}")
        if row.kind not in KINDS:
            raise ValueError(f"Check.kind must be one of {KINDS}, got {row.kind!r} for {row.claim!r}")
    return rows


def _mark(row: Check) -> str:
    if not row.verdict_holds:
        return "✗"
    return {"refuted": "✗", "unresolved": "?"}.get(row.kind, "✓")


def _label(row: Check) -> str:
    return row.claim + {"claim": "", "refuted": " — refuted", "reproduced": " — reproduced",
                        "unresolved": " — unresolved"}[row.kind]


def summary(rows: list[Check], title: str | None = None) -> str:
    """The one-line verdict of a list of checks that all hold."""
    own = [r for r in rows if r.kind == "claim"]
    sources = [r for r in rows if r.kind != "claim"]
    parts = []
    if own:
        parts.append(own[0].claim if len(own) == 1 else f"{len(own)} claims hold")
    for r in sources:
        parts.append(_label(r))
    head = "; ".join(parts)
    if title:
        head = f"{title}: {head}"
    return ("✓ " if own else "") + head


class Report:
    """A section's checks as displayed: the verdict line, the claims on a click.

    Jupyter shows the HTML form (a ``<details>`` element); nbval compares both forms.
    """

    def __init__(self, checks: Iterable[Check], title: str | None = None):
        self.rows = _validated(checks)
        self.title = title

    @property
    def failures(self) -> list[Check]:
        return [r for r in self.rows if not r.verdict_holds]

    def text(self) -> str:
        lines = [summary(self.rows, self.title) if not self.failures else
                 f"✗ {len(self.failures)} of {len(self.rows)} checks fail" + (f" ({self.title})" if self.title else "")]
        for r in self.rows:
            lines.append(f"  {_mark(r)} {_label(r)}")
            lines.append(f"      measured {r.measured}; expected {r.expected}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.text()

    def _repr_html_(self) -> str:
        e = html.escape
        body = "".join(
            f'<tr><td class="isolab-mark">{_mark(r)}</td><td>{e(_label(r))}</td>'
            f'<td>{e(r.measured)}</td><td>{e(r.expected)}</td></tr>' for r in self.rows)
        return (f'<details class="isolab-checks"><summary>{e(summary(self.rows, self.title))}</summary>'
                f'<table><thead><tr><th></th><th>claim</th><th>measured</th><th>expected</th></tr></thead>'
                f'<tbody>{body}</tbody></table></details>')

    def raise_failures(self) -> None:
        if not self.failures:
            return
        lines = []
        for r in self.failures:
            if r.kind == "claim":
                lines.append(f"the book's claim does not hold: {r.claim} (measured {r.measured}; expected {r.expected})")
            elif r.kind == "unresolved":
                lines.append(f"the book says {r.claim!r} is unresolved, but here the evidence decides it "
                             f"(measured {r.measured}; expected {r.expected})")
            else:
                said = "refuted" if r.kind == "refuted" else "reproduced"
                lines.append(f"the book says {r.claim!r} is {said}, but here it {'holds' if r.holds else 'fails'} "
                             f"(measured {r.measured}; expected {r.expected})")
        where = f" ({self.title})" if self.title else ""
        raise ClaimFailed(f"{len(self.failures)} of {len(self.rows)} checks fail{where}:\n" + "\n".join(lines))


def format_report(checks: Iterable[Check], title: str | None = None) -> str:
    """The plain text :func:`report` shows, as a string (failed rows included, marked ✗)."""
    return Report(checks, title).text()


def report(checks: Iterable[Check], title: str | None = None) -> None:
    """Show a section's checks as one verdict that opens to its claims, and raise
    :class:`ClaimFailed` if any claim the book makes does not hold."""
    shown = Report(checks, title)
    if shown.failures:
        print(shown.text())
        shown.raise_failures()
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:  # pragma: no cover - IPython is part of the book's environment
        get_ipython = None
    if get_ipython is not None and get_ipython() is not None:
        display(shown)
    else:
        print(shown.text())


def gap(a, b) -> float:
    """The largest entrywise difference ``max |a - b|`` (a Python float)."""
    return (torch.as_tensor(a) - torch.as_tensor(b)).abs().max().item()


def rel_gap(a, b) -> float:
    """The largest entrywise difference relative to the larger magnitude of the two,
    ``max |a - b| / max(max |a|, max |b|)`` (0 for two zero arrays)."""
    a, b = torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64)
    scale = max(a.abs().max().item(), b.abs().max().item()) if a.numel() else 0.0
    return gap(a, b) / scale if scale > 0 else 0.0


def same(claim: str, A, B, tol: float = 1e-12) -> Check:
    """A :class:`Check` that ``A`` equals ``B`` entrywise up to ``tol`` (and has its shape).
    The measured text says which side of the tolerance the largest gap lies on (the gap
    itself only when it is too large): rounding-level digits differ between CPUs."""
    A, B = torch.as_tensor(A, dtype=torch.float64), torch.as_tensor(B, dtype=torch.float64)
    holds = A.shape == B.shape and (gap(A, B) if A.numel() else 0.0) < tol
    measured = f"largest gap < {tol:.0e}" if holds else (
        f"largest gap {gap(A, B):.1e}" if A.shape == B.shape else f"shapes {tuple(A.shape)} vs {tuple(B.shape)}")
    return Check(claim, measured, f"< {tol:.0e}", bool(holds))


def close(claim: str, A, B, rtol: float) -> Check:
    """A :class:`Check` that ``A`` and ``B`` agree to ``rtol`` relative to their size
    (:func:`rel_gap`): the comparison for quantities that tie in theory and are computed
    in floating point, whose absolute gap scales with their magnitude."""
    A, B = torch.as_tensor(A, dtype=torch.float64), torch.as_tensor(B, dtype=torch.float64)
    if A.shape != B.shape:
        return Check(claim, f"shapes {tuple(A.shape)} vs {tuple(B.shape)}", f"relative gap < {rtol:.0e}", False)
    r = rel_gap(A, B)
    holds = r < rtol
    return Check(claim, f"relative gap < {rtol:.0e}" if holds else f"relative gap {r:.1e}",
                 f"< {rtol:.0e}", bool(holds))


def within(claim: str, difference: float, tol: float) -> Check:
    """A :class:`Check` that a difference is at most ``tol``; it prints the bound rather
    than the difference itself when the claim holds (rounding-level digits differ between CPUs)."""
    holds = bool(difference <= tol)
    return Check(claim, f"difference below {tol:.0e}" if holds else f"difference {difference:.1e}", f"<= {tol:.0e}", holds)


def agrees(claim: str, value: float, target: float, digits: int = 4, tol: float = 1e-9) -> Check:
    """A :class:`Check` that ``value`` equals ``target`` to ``tol``, both printed with
    ``digits`` decimals (coarse enough to print the same on every CPU)."""
    return Check(claim, f"{value:.{digits}f}", f"{target:.{digits}f}", bool(abs(value - target) <= tol))
