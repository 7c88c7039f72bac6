r"""A section's checks: each claim with what was measured and what it expects, as one verdict.

A chapter shows **one audit panel per section** with :func:`audit` (see *Converting a
chapter* below); :func:`report` is the older form, one verdict per cell, kept until every
chapter is converted.

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

**Converting a chapter: one audit panel per section.** A section ends with (at most) one
*check cell*: it computes everything the section claims and ends with one :func:`audit`
call. Its tags are ``remove-input`` and ``nbval-check-output``: the website hides the
cell's code and shows its output, a collapsed panel whose summary line names the section
and what it establishes; opening it shows every claim in rendered maths with what was
measured and what it expects, then the cell's own code (read from the kernel when
:func:`audit` runs), so no separate code toggle is needed::

    step_gap = gap(X @ W_after - X @ W_before, -lr * X @ X.T @ G)
    cos = feature_step.feature_alignment(X, G).item()
    audit(r"§1.2 A gradient step moves the features by $-\eta XX^\top G$", [
        within(r"one SGD step moves $Y$ by $-\eta XX^\top G$", step_gap, 1e-13),
        illustration(r"$0 \le \cos(\Delta Y, -G) \le 1$ on this batch",
                     f"{cos:.3f}", "in [0, 1]", 0 <= cos <= 1),
    ])

Shown on the page as ``✓ §1.2 A gradient step moves the features by −ηXXᵀG — 1 claim ·
1 illustration``. The rules, which :func:`audit` enforces where a machine can:

1. **The title** starts with the section's number (``§1.2``, the number of the heading the
   cell sits under) and says what the section establishes, in a sentence: never a bare
   count. :func:`audit` adds the counts.
2. **Maths in LaTeX between dollars**, in the title, in claims and where useful in
   ``measured`` and ``expected``: ``$X^\top G$``, ``$\|x\|^2 + 1$``, ``$\sqrt{d_{in}/b}$``,
   never ``X^T G``, ``||x||^2`` or ``d_in`` (:func:`ascii_maths` names what it rejects;
   write raw strings, ``r"..."``). MathJax typesets them on the site (and in Jupyter).
3. **A claim tests its sentence**: it compares the sentence with something that could
   disagree, either an independent computation of an identity (autograd, a real optimizer
   step, SymPy, the library against the formula written out: at a random input a wrong
   identity fails) or a measurement whose size or direction no theorem forces (a trend
   with ``b/d_in``, a share near ``√(d_in/b)``, one optimizer ahead of another). State the
   bound the sentence makes, not a weaker one.
4. **A theorem's inequality checked at one input is an illustration**, made with
   :func:`illustration`: a cosine is at most 1, a best-of-N random direction never beats
   the optimum, a squared norm is not negative, a bound evaluated with the formula that
   proves it. It shows the theorem at work, is listed apart and not counted; it still
   raises if it fails (then the code is wrong). :func:`audit` refuses a claim whose
   expectation every value of its kind meets (a cosine ``≤ 1``, anything ``≥ 0``:
   :func:`cannot_fail`).
5. **A source's claims** (Part III) are rows made with :func:`reproduced`, :func:`refuted`
   and :func:`unresolved`; the summary then counts ``N reproduced · M refuted · K
   unresolved``.
6. **Numbers that matter but are too many for prose** (the table behind a heatmap) go in
   the panel with ``table=``, not in a separate hidden output.
7. Everything printed is CPU-independent (the panel's text and HTML are what nbval
   compares): format ``measured`` at the claim's precision, bounds rather than
   rounding-level digits (:func:`same`, :func:`within`).
8. The cell's code fits the column (≤ 88 characters a line), as visible code does.

The rest of a chapter's conversion, in order (Chapter 1 is the worked example):

- Merge each section's :func:`report` cells into its one check cell (the legacy cells
  each carried a "Show code cell source" toggle); a number the reader should see at once
  stays in the prose or in a figure, and its check moves to the panel. Tables behind a
  figure move into the panel (``table=``).
- Tag the setup cell and the hero's cell ``remove-input`` (no bar above the hero); keep
  at most about one code toggle per section (``hide-input`` only for code worth a click;
  drawing code belongs in the chapter's figure module).
- Explorables with panels side by side declare ``narrow="panels"`` (on a phone the same
  frames are shown one panel at a time, stacked; see :mod:`isolab.book.explorable`,
  *Phones*); a single panel is drawn at most ``NARROW_WIDTH_IN`` inches wide. No title
  or label may be clipped anywhere on the slider grid.
- Refresh the committed outputs (``python scripts/refresh_outputs.py book/chNN_*.ipynb``)
  and check them under another CPU's kernels and the jitter (``ATEN_CPU_CAPABILITY=default
  MKL_CBWR=COMPATIBLE OMP_NUM_THREADS=1 ISOLAB_JITTER=1e-6 ISOLAB_JITTER_SEED=1 python
  scripts/check_outputs.py --execute book/chNN_*.ipynb``, and a seed or two more).
- Delete the chapter's name from ``NOT_YET_CONVERTED`` in ``tests/book/book_standard.py``,
  build it (``python scripts/build_book.py --only chNN``) and run the tests that hold it
  to the standard: ``pytest tests/book/test_chapters.py tests/book/test_captions.py
  tests/book/test_site_browser.py -k chNN`` (the browser test needs the built page).
"""

from __future__ import annotations

import html
import linecache
import re
import sys
from typing import Iterable, NamedTuple

import numpy as np
import torch

__all__ = ["Check", "ClaimFailed", "Report", "report", "format_report", "refuted", "reproduced", "unresolved",
           "illustration", "audit", "Audit", "ascii_maths", "cannot_fail", "gap", "same", "within", "agrees",
           "rel_gap", "close"]

#: The kinds of row: a claim of the book, a source's claim the book refutes, one it
#: reproduces, one the evidence does not decide, and a theorem's instance shown as an
#: illustration (not counted as a claim).
KINDS = ("claim", "refuted", "reproduced", "unresolved", "illustration")


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
        return bool(self.holds) if self.kind != "refuted" else not bool(self.holds)


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


def illustration(claim: str, measured: str, expected: str, holds: bool) -> Check:
    """A theorem at work on this chapter's numbers: a check that holds for every input
    (a cosine is at most 1, a best-of-N random direction never beats the optimum). The
    panel lists it apart and does not count it as a claim; it still raises if it fails."""
    return Check(claim, measured, expected, holds, "illustration")


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
                        "unresolved": " — unresolved", "illustration": " — illustration"}[row.kind]


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


# ------------------------------------------------------------------ the audit panel
#: What :func:`ascii_maths` rejects outside ``$…$``: maths typed as text instead of LaTeX.
ASCII_MATHS = (
    (re.compile(r"\^"), r"a caret (X^T, ||x||^2, 10^4): write $X^\top$, $\|x\|^2$, $10^4$"),
    (re.compile(r"\|\|"), r"double bars (||x||): write $\|x\|$"),
    (re.compile(r"[A-Za-z0-9)\]]_[A-Za-z0-9{(]"), r"an underscore subscript or identifier (d_in, P_X): write $d_{in}$"),
    (re.compile(r"\b(sqrt|eta|kappa|Sigma|sigma|lambda|mu|rho|theta|epsilon|eps)\b"),
     r"a spelled-out Greek letter or function (sqrt, eta, kappa): write $\sqrt{b}$, $\eta$, $\kappa$"),
    (re.compile(r"<=|>=|!=|->"), r"an ASCII relation (<=, >=, !=, ->): write $\le$, $\ge$, $\ne$, $\to$"),
    (re.compile(r"[ᵀ‖√⟨⟩²³¹⁰⁻⁺₀₁₂₃₄₅₆₇₈₉]"), r"Unicode maths (XXᵀ, ‖x‖², √b): write it in $…$"),
)
_MATH = re.compile(r"(?<!\\)\$(.+?)(?<!\\)\$")


def _text_and_maths(text: str) -> list[tuple[bool, str]]:
    """``text`` split into (is_maths, piece) pieces at unescaped dollars."""
    pieces, last = [], 0
    for match in _MATH.finditer(text):
        if match.start() > last:
            pieces.append((False, text[last:match.start()]))
        pieces.append((True, match.group(1)))
        last = match.end()
    if last < len(text):
        pieces.append((False, text[last:]))
    return pieces


def ascii_maths(text: str) -> list[str]:
    """Why ``text`` (a title or a claim) has maths outside ``$…$``: one line per offending
    piece, empty when every formula is LaTeX between dollars. The patterns are
    :data:`ASCII_MATHS` (a caret, ``||``, an underscore subscript or identifier, a
    spelled-out Greek letter or ``sqrt``, ``<=``/``>=``/``!=``/``->``, Unicode maths
    symbols such as ᵀ, ‖, √, ²); an unmatched ``$`` counts too."""
    found = []
    for is_maths, piece in _text_and_maths(text):
        if is_maths:
            continue
        if re.search(r"(?<!\\)\$", piece):
            found.append(f"an unmatched $ in {piece.strip()!r}")
            continue
        for pattern, why in ASCII_MATHS:
            match = pattern.search(piece)
            if match:
                found.append(f"{why}: {match.group(0)!r} in {piece.strip()!r}")
    return found


_NUMBER = re.compile(r"[-−]?\d+(?:\.\d+)?(?:e[-+]?\d+)")


def _html_with_maths(text: str) -> str:
    """``text`` as HTML, each ``$…$`` as inline maths that MathJax typesets (the markup
    Sphinx gives inline maths: the class ``math`` is one MathJax processes); a number in
    scientific notation is kept on one line (a browser would break ``1e-12`` at its
    hyphen)."""
    out = []
    for is_maths, piece in _text_and_maths(text):
        if is_maths:
            out.append(f'<span class="math notranslate nohighlight">\\({html.escape(piece)}\\)</span>')
        else:
            escaped = html.escape(piece.replace(r"\$", "$"))
            out.append(_NUMBER.sub(lambda m: f'<span class="isolab-number">{m.group(0)}</span>', escaped))
    return "".join(out)


_TRIVIAL_BOUNDS = {
    "cos": re.compile(r"^(<|≤|<=)\s*1(\.0*)?$|^(>|≥|>=)\s*[-−]1(\.0*)?$|^between [-−]?[01] and 1$|^in \[[-−]?[01],\s*1\]$"),
    "any": re.compile(r"^(≥|>=)\s*0(\.0*)?$|^non-?negative$"),
}


def cannot_fail(row: Check) -> str | None:
    """Why a claim's check cannot fail whatever the sentence says, or ``None``.

    Two patterns a machine can see in the row: a cosine (the claim or the measured text
    names ``cos``) expected ``< 1``, ``≤ 1``, ``≥ -1``, "between 0 and 1" or "in [0, 1]",
    which every cosine meets; and anything expected ``≥ 0`` (a norm, a gap, a count, or a
    quantity a theorem makes non-negative). Such a row is an :func:`illustration`, or the
    claim should state the bound its sentence makes."""
    if row.kind != "claim":
        return None
    expected = " ".join(str(row.expected).split())
    if _TRIVIAL_BOUNDS["any"].match(expected):
        return f"expected {expected!r}: met by every norm, gap or count"
    about_cos = "cos" in f"{row.claim} {row.measured}".lower()
    if about_cos and _TRIVIAL_BOUNDS["cos"].match(expected):
        return f"expected {expected!r}: met by every cosine"
    return None


_TITLE = re.compile(r"^§\d+(\.\d+)*[a-z]? \S")


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _cell_source(skip: int = 2) -> str | None:
    """The source of the notebook cell that called :func:`audit`: the first frame, walking
    out from the caller, whose code IPython compiled from a cell (IPython keeps each cell
    in ``linecache`` with no modification time). ``None`` outside IPython."""
    frame = sys._getframe(skip)
    while frame is not None:
        entry = linecache.cache.get(frame.f_code.co_filename)
        if entry is not None and len(entry) == 4 and entry[1] is None:
            return "".join(entry[2]).rstrip("\n")
        frame = frame.f_back
    return None


def _highlight(source: str) -> str:
    """``source`` as highlighted HTML in the markup Sphinx gives code (so the theme's
    colours apply), or escaped plain text if Pygments is missing."""
    try:
        from pygments import highlight
        from pygments.formatters import HtmlFormatter
        from pygments.lexers import PythonLexer
    except ImportError:  # pragma: no cover - Pygments comes with Sphinx and IPython
        body = html.escape(source)
    else:
        body = highlight(source, PythonLexer(), HtmlFormatter(nowrap=True)).rstrip("\n")
    return f'<div class="highlight-python notranslate"><div class="highlight"><pre>{body}</pre></div></div>'


class Audit:
    """A section's audit panel: a summary line that names the section and what it
    establishes, then, on a click, every claim with what was measured and expected, the
    illustrations apart, an optional table of numbers, and the code that computed them.

    Jupyter shows the HTML form (a ``<details>`` element whose maths MathJax typesets);
    the text form is what a terminal prints. nbval compares both, so both hold only what
    prints the same on every CPU (the code is the cell's own source)."""

    def __init__(self, title: str, checks: Iterable[Check], *, table: str | None = None, code: str | None = None):
        title = " ".join(str(title).split())
        if not _TITLE.match(title):
            raise ValueError(f"an audit's title starts with its section, '§N.k', then says what the section "
                             f"establishes: got {title!r}")
        if len(title.split()) < 4 or re.search(r"\bclaims? hold", title):
            raise ValueError(f"an audit's title says what the section establishes, in a sentence: got {title!r}")
        self.title, self.rows, self.table, self.code = title, _validated(checks), table, code
        problems = [f"title: {why}" for why in ascii_maths(title)]
        for row in self.rows:
            problems += [f"{row.claim!r}: {why}" for why in ascii_maths(row.claim)]
            reason = cannot_fail(row)
            if reason:
                problems.append(f"{row.claim!r} cannot fail ({reason}): make it an illustration(...) or check "
                                "the bound the sentence makes")
        if problems:
            raise ValueError(f"audit {title!r}:\n  " + "\n  ".join(problems))

    @property
    def failures(self) -> list[Check]:
        return [r for r in self.rows if not r.verdict_holds]

    def counts(self) -> str:
        """``3 claims · 1 illustration``, ``1 claim · 2 reproduced · 1 refuted · 0
        unresolved``: the book's own claims, a source's claims by verdict (all three
        verdicts once any source claim is checked), the illustrations."""
        kinds = [r.kind for r in self.rows]
        parts = [_plural(kinds.count("claim"), "claim")] if "claim" in kinds else []
        if any(k in kinds for k in ("reproduced", "refuted", "unresolved")):
            parts += [f"{kinds.count(k)} {k}" for k in ("reproduced", "refuted", "unresolved")]
        if "illustration" in kinds:
            parts.append(_plural(kinds.count("illustration"), "illustration"))
        return " · ".join(parts)

    def verdict(self) -> str:
        """The summary line: ``✓ §1.2 What it establishes — 2 claims`` (``✗`` and the
        failures when a row fails)."""
        if self.failures:
            return f"✗ {self.title} — {len(self.failures)} of {len(self.rows)} checks fail"
        return f"✓ {self.title} — {self.counts()}"

    def _ordered(self) -> list[Check]:
        return [r for r in self.rows if r.kind != "illustration"] + [r for r in self.rows if r.kind == "illustration"]

    def text(self) -> str:
        lines = [self.verdict()]
        for r in self._ordered():
            mark = "·" if r.kind == "illustration" and r.verdict_holds else _mark(r)
            lines.append(f"  {mark} {_label(r)}")
            lines.append(f"      measured {r.measured}; expected {r.expected}")
        if self.table:
            lines += ["  " + line for line in self.table.splitlines()]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.text()

    def _row_html(self, r: Check) -> str:
        mark = "·" if r.kind == "illustration" and r.verdict_holds else _mark(r)
        verdict = {"refuted": "refuted", "reproduced": "reproduced", "unresolved": "unresolved"}.get(r.kind)
        tag = f' <span class="isolab-verdict-word">— {verdict}</span>' if verdict else ""
        return (f'<li class="isolab-claim" data-kind="{r.kind}"><span class="isolab-mark">{mark}</span>'
                f'<div><div class="isolab-claim-text">{_html_with_maths(r.claim)}{tag}</div>'
                f'<div class="isolab-claim-values">measured <span class="isolab-measured">{_html_with_maths(r.measured)}'
                f'</span> · expected <span class="isolab-expected">{_html_with_maths(r.expected)}</span></div></div></li>')

    def _repr_html_(self) -> str:
        verdict = self.verdict()
        mark, rest = verdict[0], verdict[2:]
        title, _, counts = rest.rpartition(" — ")
        claims = [r for r in self.rows if r.kind != "illustration"]
        shown = [r for r in self.rows if r.kind == "illustration"]
        body = ""
        if claims:
            body += '<ul class="isolab-claims">' + "".join(map(self._row_html, claims)) + "</ul>"
        if shown:
            body += ('<p class="isolab-audit-heading">Illustrations: theorems at work on these numbers, true for '
                     'every input, so not counted as claims</p>'
                     '<ul class="isolab-claims isolab-illustrations">' + "".join(map(self._row_html, shown)) + "</ul>")
        if self.table:
            body += f'<pre class="isolab-audit-table">{html.escape(self.table)}</pre>'
        if self.code:
            body += '<p class="isolab-audit-heading">The code</p>' + _highlight(self.code)
        return (f'<details class="isolab-audit"><summary><span class="isolab-verdict">{mark}</span> '
                f'<span class="isolab-audit-title">{_html_with_maths(title)}</span> '
                f'<span class="isolab-audit-count">— {html.escape(counts)}</span></summary>'
                f'<div class="isolab-audit-body">{body}</div></details>')

    def raise_failures(self) -> None:
        if not self.failures:
            return
        lines = []
        for r in self.failures:
            if r.kind == "claim":
                lines.append(f"the book's claim does not hold: {r.claim} (measured {r.measured}; expected {r.expected})")
            elif r.kind == "illustration":
                lines.append(f"an illustration fails, so the code that computes it is wrong: {r.claim} "
                             f"(measured {r.measured}; expected {r.expected})")
            elif r.kind == "unresolved":
                lines.append(f"the book says {r.claim!r} is unresolved, but here the evidence decides it "
                             f"(measured {r.measured}; expected {r.expected})")
            else:
                lines.append(f"the book says {r.claim!r} is {r.kind}, but here it {'holds' if r.holds else 'fails'} "
                             f"(measured {r.measured}; expected {r.expected})")
        raise ClaimFailed(f"{self.title}: {len(self.failures)} of {len(self.rows)} checks fail:\n" + "\n".join(lines))


def audit(title: str, checks: Iterable[Check], *, table: str | None = None) -> None:
    r"""Show a section's audit panel and raise :class:`ClaimFailed` if a row fails.

    ``title`` is ``"§N.k"`` and what the section establishes (maths in ``$…$``);
    ``checks`` are its rows (:class:`Check` for the book's claims, :func:`illustration`,
    :func:`reproduced`, :func:`refuted`, :func:`unresolved`); ``table`` is text shown in
    the panel under the rows (the numbers behind a figure). The panel shows the calling
    cell's source as its code. Raises ``ValueError`` for a title that is not a section's
    statement, maths outside dollars (:func:`ascii_maths`) or a claim that cannot fail
    (:func:`cannot_fail`). Returns nothing (a notebook would show a returned panel twice)."""
    shown = Audit(title, checks, table=table, code=_cell_source())
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
