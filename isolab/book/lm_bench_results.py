r"""Reading the language-model benchmark's saved files for Chapter 14 (read only).

``results/lm_benchmark.json`` (:mod:`isolab.book.lm_bench_protocol`) holds the pilot, every
search and the held-out runs; ``results/lm_mechanism.json`` (:mod:`isolab.book.lm_mechanism`)
the measurements of why Iso's step has the wrong size. Both are written by
``scripts/lm_benchmark.py`` as runs finish, so either may be partial: every function here
returns only what the file holds, and the chapter states what is missing as "not yet
measured" (never as a claim that holds).

- :func:`cells`: the (model, budget) pairs with held-out runs, and for each the
  summary of :func:`isolab.book.lm_bench_protocol.summary` (recomputed from the runs).
- :func:`compare`: the paired difference of two optimizers on the same seeds and its verdict,
  ``"ranked"`` only where the order-statistic interval excludes zero.
- :func:`time_verdict`: an optimizer's step time against AdamW's, judged against the A/A
  reference (AdamW with two rates against AdamW, the same arithmetic): a time claim only
  where the ratio's interval lies clear of the A/A interval.
- :func:`ranking_table`: the verdict table of one cell, short enough for the page.
- :func:`side_rates`: the tuned rates of the AdamW group (embeddings, head, gains).
- :func:`mechanism`, :func:`mechanism_summary`: the mechanism file and its numbers, or ``None``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Mapping, Optional

from . import lm_bench_protocol as BP
from . import lm_benchmark as B

__all__ = ["RESULTS", "SHORT", "VARIANTS", "load", "cells", "compare", "time_verdict", "aa_interval",
           "ranking_table", "side_rates", "mechanism", "mechanism_summary", "fmt_interval", "budgets"]

RESULTS = Path(__file__).resolve().parents[2] / "results"
#: names short enough for a table on the page
SHORT = {"adamw": "AdamW", "adamw2": "AdamW, 2 rates", "torch_muon": "torch Muon", "muon": "Muon",
         "soap": "SOAP", "iso": "Iso", "isoadam": "IsoAdam", "iso_norm": "Iso, Muon's norm",
         "iso_polar": "Iso, polar", "iso_nor": "Iso, neuron 2nd mom.", "diag_polar": "polar, diag. metric",
         "isoadam_sched": "IsoAdam, sched. tuned"}
#: the variants of Iso's step, in the order the chapter introduces them
VARIANTS = ("iso_norm", "iso_polar", "iso_nor", "diag_polar")


def load(name: str = "lm_benchmark.json", root: Path | None = None) -> dict:
    """The benchmark file (raises if it is missing: the chapter needs it)."""
    return json.loads(((root or RESULTS) / name).read_text())


def mechanism(name: str = "lm_mechanism.json", root: Path | None = None) -> Optional[dict]:
    """The mechanism file, or ``None`` while it does not exist."""
    path = (root or RESULTS) / name
    return json.loads(path.read_text()) if path.exists() else None


def mechanism_summary(mech: Optional[Mapping]) -> Optional[dict]:
    """:func:`isolab.book.lm_mechanism.summarize` of the file's runs (``None`` without a file)."""
    if not mech or not mech.get("runs"):
        return None
    from .lm_mechanism import summarize

    return summarize(mech["runs"])


def cells(bench: Mapping) -> dict[tuple[str, int], dict]:
    """``{(arch, steps): summary}`` for every (model, budget) with held-out runs, in the
    order models then budgets; the summary is recomputed from the held-out runs."""
    summ = BP.summary(dict(bench))
    keys = sorted(((c.split("/")[0], int(c.split("/")[1])) for c in summ),
                  key=lambda k: (B.ARCHS.index(k[0]), k[1]))
    return {k: summ[f"{k[0]}/{k[1]}"] for k in keys}


def budgets(bench: Mapping) -> list[int]:
    """The protocol's budgets (measured or not)."""
    return sorted(bench["protocol"]["budgets"])


def compare(cell: Mapping, a: str, b: str) -> Optional[dict]:
    """Paired difference ``a − b`` (nats per byte; negative: ``a`` ahead) with its interval,
    and ``verdict``: ``"ranked"`` where the interval excludes zero, else ``"unresolved"``.
    ``None`` when either optimizer is missing from the cell."""
    d = cell["paired"].get(a, {}).get(b)
    if d is None:
        return None
    ranked = d["low"] > 0 or d["high"] < 0
    return {**d, "verdict": "ranked" if ranked else "unresolved", "ahead": (a if d["high"] < 0 else b) if ranked else None}


def aa_interval(cell: Mapping) -> Optional[dict]:
    """The A/A reference: AdamW with two rates against AdamW (the same arithmetic per step),
    its per-seed time ratio's median and interval."""
    return cell["optimizers"].get("adamw2", {}).get("time_ratio_to_adamw")


def time_verdict(cell: Mapping, name: str) -> str:
    """``"slower than AdamW"`` / ``"faster than AdamW"`` where the time ratio's interval lies
    clear of the A/A interval (above its top / below its bottom), else ``"within the noise"``."""
    if name == "adamw":
        return "reference"
    ratio, aa = cell["optimizers"][name].get("time_ratio_to_adamw"), aa_interval(cell)
    if ratio is None or aa is None or name == "adamw2":
        return "A/A reference" if name == "adamw2" else "within the noise"
    if ratio["low"] > aa["high"]:
        return "slower than AdamW"
    if ratio["high"] < aa["low"]:
        return "faster than AdamW"
    return "within the noise"


def fmt_interval(d: Mapping, digits: int = 3, sign: bool = False) -> str:
    """``1.919 [1.913, 1.930]`` (``sign``: ``+0.054 [+0.043, +0.071]``); ``inf`` printed as such."""
    f = f"{{:+.{digits}f}}" if sign else f"{{:.{digits}f}}"

    def one(x):
        return ("+inf" if x > 0 else "−inf") if math.isinf(x) else f.format(x)
    return f"{one(d['median'])} [{one(d['low'])}, {one(d['high'])}]"


def ranking_table(cell: Mapping, reference: str = "muon", digits: int = 3) -> str:
    """One cell's table: each optimizer's held-out median with its interval, its paired
    difference with ``reference`` and the verdict, and its step time (median over seeds,
    with the smallest and largest) with the time verdict. Lines of at most 88 characters."""
    per = cell["optimizers"]
    order = sorted(per, key=lambda n: per[n]["loss"]["median"])
    lines = [f"{'optimizer':<21}{'loss (nats/byte)':<24}{'minus ' + SHORT[reference]:<25}{'ms/step':<18}",
             f"{'':<21}{'median [93 % int.]':<24}{'paired [93 % int.]':<25}{'median [min, max]':<18}"]
    for n in order:
        c = compare(cell, n, reference)
        d = "(reference)" if n == reference else (fmt_interval(c, digits, sign=True) if c else "-")
        mark = "" if n == reference or c is None else (" *" if c["verdict"] == "ranked" else " ?")
        t = per[n]["step_ms"]
        lines.append(f"{SHORT[n]:<21}{fmt_interval(per[n]['loss'], digits):<24}{d + mark:<25}"
                     f"{t['median']:>5.1f} [{t['min']:.0f}, {t['max']:.0f}]")
    aa = aa_interval(cell)
    if aa:
        lines.append(f"* ranked (interval excludes 0), ? unresolved; A/A time ratio "
                     f"{aa['median']:.2f} [{aa['low']:.2f}, {aa['high']:.2f}]")
    return "\n".join(lines)


def side_rates(bench: Mapping) -> dict[str, dict[str, float]]:
    """``{"arch/steps": {optimizer: side_lr}}``: the tuned rate of the AdamW group of every
    two-rate optimizer (embeddings, head, gains), and ``"pilot a*"``, AdamW's pilot rate that
    every search started from."""
    out = {}
    for key, s in bench["searches"].items():
        arch, name, steps = key.split("/")
        if s.get("chosen") and "side_lr" in s["chosen"]:
            cell = out.setdefault(f"{arch}/{steps}", {"pilot a*": bench["pilot"][arch]["adamw"]["best"]})
            cell[name] = s["chosen"]["side_lr"]
    return out
