r"""Reading the language-model benchmark's saved files for Chapter 14 (read only).

``results/lm_benchmark.json`` (:mod:`isolab.book.lm_bench_protocol`) holds the pilot, every
search and the held-out runs; ``results/lm_mechanism.json.gz`` (:mod:`isolab.book.lm_mechanism`)
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

__all__ = ["RESULTS", "SHORT", "NAMES", "VARIANTS", "load", "cells", "compare", "time_verdict", "aa_interval",
           "ranking_table", "side_rates", "mechanism", "mechanism_summary", "fmt_interval", "budgets", "verdict_text",
           "ARCH_NAMES", "mechanism_text", "mechanism_checks", "isoadam_checks", "budget_checks", "largest_step"]

RESULTS = Path(__file__).resolve().parents[2] / "results"
#: names short enough for a table on the page
SHORT = {"adamw": "AdamW", "adamw2": "AdamW, 2 rates", "torch_muon": "torch Muon", "muon": "Muon",
         "soap": "SOAP", "iso": "Iso", "isoadam": "IsoAdam", "iso_norm": "Iso, Muon's norm",
         "iso_polar": "Iso, polar", "iso_nor": "Iso, neuron 2nd mom.", "diag_polar": "polar, diag. metric",
         "isoadam_sched": "IsoAdam, sched. tuned"}
#: names for running text (no commas inside a name)
NAMES = {"adamw": "AdamW", "adamw2": "AdamW with two rates", "torch_muon": "torch's Muon", "muon": "Muon",
         "soap": "SOAP", "iso": "Iso", "isoadam": "IsoAdam", "iso_norm": "Iso at Muon's norm",
         "iso_polar": "Iso's polar factor", "iso_nor": "Iso with a neuron second moment",
         "diag_polar": "the diagonal-metric polar step", "isoadam_sched": "IsoAdam with its schedule tuned"}
#: the variants of Iso's step, in the order the chapter introduces them
VARIANTS = ("iso_norm", "iso_polar", "iso_nor", "diag_polar")


def load(name: str = "lm_benchmark.json", root: Path | None = None) -> dict:
    """The benchmark file (raises if it is missing: the chapter needs it)."""
    return json.loads(((root or RESULTS) / name).read_text())


def mechanism(name: str = "lm_mechanism.json.gz", root: Path | None = None) -> Optional[dict]:
    """The mechanism file, or ``None`` while it does not exist."""
    from .lm_mechanism import read_json

    path = (root or RESULTS) / name
    return read_json(path) if path.exists() else None


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


ARCH_NAMES = {"gpt2": "GPT-2", "llama": "Llama"}


def verdict_text(cells: Mapping, bench: Mapping, reference: str = "muon") -> str:
    """Markdown: per model and budget of the protocol, who is ahead of ``reference``, who is
    behind it (paired interval clear of zero, with the median difference and its interval)
    and who is unresolved against it, then whose step time lies clear of the A/A noise; a
    (model, budget) without held-out runs reads "not yet measured"."""
    out = []
    for arch in ARCH_NAMES:
        for steps in budgets(bench):
            head = f"**{ARCH_NAMES[arch]}, {steps:,} steps.**"
            cell = cells.get((arch, steps))
            if cell is None:
                out.append(f"{head} Not yet measured.")
                continue
            per = cell["optimizers"]
            groups = {"ahead": [], "behind": [], "unresolved": []}
            for n in sorted(per, key=lambda n: per[n]["loss"]["median"]):
                c = compare(cell, n, reference)
                if c is None:
                    continue
                side = "unresolved" if c["verdict"] == "unresolved" else ("ahead" if c["high"] < 0 else "behind")
                d = {k: abs(c[k]) for k in ("median", "low", "high")}
                if side == "ahead":
                    d["low"], d["high"] = d["high"], d["low"]
                groups[side].append(f"{NAMES[n]} {fmt_interval(d if side != 'unresolved' else c, 3, side == 'unresolved')}")
            slow = [NAMES[n] for n in per if time_verdict(cell, n) == "slower than AdamW"]
            fast = [NAMES[n] for n in per if time_verdict(cell, n) == "faster than AdamW"]
            ref = NAMES[reference]
            text = [head, f"Ahead of {ref} by: {'; '.join(groups['ahead']) or 'none'}.",
                    f"Behind it by: {'; '.join(groups['behind']) or 'none'}.",
                    f"Unresolved against it: {'; '.join(groups['unresolved']) or 'none'}."]
            clock = (f"Step time beyond the A/A noise: slower than AdamW {', '.join(slow) or 'none'}"
                     + (f"; faster {', '.join(fast)}" if fast else "") + "; every other within it.")
            out.append(" ".join(text + [clock]))
    return "\n\n".join(out)


# ----------------------------------------------------------------------------- the mechanism, in words and checks
def _norm_run(summary: Mapping, arch: str, name: str = "iso") -> Optional[tuple[str, dict]]:
    runs = {k: v for k, v in summary.get("norms", {}).items() if k.startswith(f"norms/{arch}/{name}/")}
    if not runs:
        return None
    key = max(runs, key=lambda k: int(k.rsplit("/", 1)[1]))
    return key, runs[key]


def largest_step(mech: Mapping, key: str) -> float:
    """The largest ``‖ΔW‖/η`` over Muon's norm, over every hidden layer and step of a run."""
    import numpy as np

    r = mech["runs"][key]
    rel = np.asarray(r["dir_norm"], dtype=float) / np.asarray(r["muon_norm"], dtype=float)
    return float(np.nanmax(rel))


def mechanism_text(summary: Optional[Mapping], mech: Optional[Mapping] = None) -> str:
    """Markdown: the mechanism's numbers per model (Iso's step over Muon's length in the
    median layer, by windows of steps; the largest layer's; √Σρᵢ² over Muon's on the probes;
    the first steps' final loss under each schedule; IsoAdam's cost against AdamW's), or
    "not yet measured" for what the file does not hold."""
    if not summary:
        return ("**Measured along the runs:** not yet measured (the mechanism's runs, "
                "`results/lm_mechanism.json.gz`, have not finished).")
    out = []
    for arch, label in ARCH_NAMES.items():
        found = _norm_run(summary, arch)
        if found is None:
            out.append(f"**{label}:** Iso's step along the run not yet measured.")
            continue
        key, v = found
        (a, b), (c, d), (e, f) = v["windows"]
        w = v["dir_norm_over_muon"]
        big = f"; the largest layer's step reaches {largest_step(mech, key):.1f} times Muon's" if mech else ""
        out.append(f"**{label}:** Iso's step in the median layer is {w[0]:.2f}, {w[1]:.2f} and {w[2]:.2f} of "
                   f"Muon's length over steps {a}–{b}, {c}–{d} and {e}–{f}{big}; on the test batches "
                   f"√Σρᵢ² is {v['iso_norm_over_muon'][0]:.2f} of Muon's length at the start and "
                   f"{v['iso_norm_over_muon'][-1]:.2f} at step {v['probe_step'][-1]}.")
        early = {k.split("/")[-1]: e for k, e in summary.get("early", {}).items() if k.startswith(f"early/{arch}/iso/")}
        if early:
            out.append(f"First {label} steps, final training loss by schedule: "
                       + "; ".join(f"{k} {e['last_loss']:.2f}" for k, e in early.items()) + ".")
    prof = {k.removeprefix("profile/"): v for k, v in summary.get("profile", {}).items()}
    for key, p in sorted(prof.items()):
        ms = p["ms"]
        if "adamw" in ms and "isoadam" in ms:
            out.append(f"**Cost, {ARCH_NAMES[key.split('/')[0]]} at size {key.split('/')[1]}:** IsoAdam's step "
                       f"{ms['isoadam']['total']:.0f} ms, {ms['isoadam']['total'] / ms['adamw']['total']:.2f} times "
                       f"AdamW's, Muon's {ms['muon']['total'] / ms['adamw']['total']:.2f} times.")
    return "\n\n".join(out)


def mechanism_checks(summary: Optional[Mapping], mech: Optional[Mapping] = None) -> list:
    """The claims §14.4 makes of the mechanism's runs (none while they are missing): per
    model, Iso's step in the median layer against Muon's length early and late, the test
    batches' correlations against it at the end, how far the weights move against Muon's,
    the spread of the first steps' schedules, and the largest layer's step."""
    from .checks import Check

    rows = []
    for arch, label in ARCH_NAMES.items():
        found = summary and _norm_run(summary, arch)
        if not found:
            continue
        key, v = found
        late = max(v["dir_norm_over_muon"][1:])
        rows.append(Check(f"{label}: after step 25, Iso's step in the median layer is under a third of Muon's",
                          f"{late:.2f} at most", "< 0.33", late < 1 / 3))
        w, probes = v["dir_norm_over_muon"], v["iso_norm_over_muon"]
        rows.append(Check(f"{label}: in the median layer, under a quarter of Muon's over steps 1 to 25 and "
                          "under a tenth after step 300", f"{w[0]:.2f}, {w[2]:.3f}", "< 0.25, < 0.1",
                          w[0] < 0.25 and w[2] < 0.1))
        rows.append(Check(f"{label}: at the end the test batches' correlations are more than twice the step",
                          f"{probes[-1] / w[2]:.1f} times", "> 2", probes[-1] / w[2] > 2))
        muon = _norm_run(summary, arch, "muon")
        if muon:
            moved = max(a / b for a, b in zip(v["rel_step"][1:], muon[1]["rel_step"][1:]))
            rows.append(Check(f"{label}: after step 25 the weights move under half as far as Muon's",
                              f"{moved:.2f} of Muon's at most", "< 0.5", moved < 0.5))
        early = [e["last_loss"] for k, e in summary.get("early", {}).items() if k.startswith(f"early/{arch}/iso/")]
        if early:
            rows.append(Check(f"{label}: the four statistics schedules end Iso's first 300 steps within 0.1 nats",
                              f"{min(early):.2f} to {max(early):.2f}", "spread <= 0.1",
                              max(early) - min(early) <= 0.1))
        if mech:
            top = largest_step(mech, key)
            need = 4 if arch == "llama" else 1
            rows.append(Check(f"{label}: some layer's step reaches {'over four times ' if need > 1 else ''}Muon's "
                              "length at some step", f"{top:.2f} times", f">= {need}", top >= need))
    return rows


def isoadam_checks(summary: Optional[Mapping]) -> list:
    """§14.6's claims of the cost profile (none while it is missing): at every model and size
    measured, IsoAdam's step takes more than 1.3 times AdamW's."""
    from .checks import Check

    rows = []
    for key, p in sorted((summary or {}).get("profile", {}).items()):
        key, ms = key.removeprefix("profile/"), p["ms"]
        if "adamw" in ms and "isoadam" in ms:
            ratio = ms["isoadam"]["total"] / ms["adamw"]["total"]
            rows.append(Check(f"{ARCH_NAMES[key.split('/')[0]]}, {key.split('/')[1]} size: IsoAdam's step "
                              "takes more than 1.3 times AdamW's", f"{ratio:.2f} times", "> 1.3", ratio > 1.3))
    return rows


def budget_checks(long_cell: Mapping) -> list:
    """§14.7's restatement of Chapter 11 at the longer budget (GPT-2): IsoAdam and Muon are
    not separated there. Written before the runs finished: if the interval excludes zero,
    the row fails and the verdict (and the chapter's sentence) must change."""
    from .checks import reproduced

    c = compare(long_cell, "isoadam", "muon")
    return [reproduced("Chapter 11", "at the longer budget IsoAdam is level with Muon",
                       fmt_interval(c, 3, sign=True), "interval contains 0", c["low"] <= 0 <= c["high"])]
