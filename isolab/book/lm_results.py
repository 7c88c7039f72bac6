r"""Reading Chapter 11's saved results: the protocol runs of ``scripts/train_transformer.py``
and the interleaved step timings of ``scripts/ch11_timing.py``.

- :func:`load`: a results file from ``results/``.
- :func:`summaries`: ``{budget: {optimizer: summary}}`` of the held-out test losses
  (median over seeds with its order-statistic interval, :mod:`isolab.book.engine.intervals`:
  for five seeds ``[min, max]``, which covers the median with probability 93.75 %; for three,
  75 %), as Chapter 10's figures draw them.
- :func:`step_speedup`: how many times more steps Adam needs to reach an optimizer's
  held-out loss at a budget, reading Adam's loss against its budgets (piecewise linear in
  log steps); a bound where Adam's longest budget does not get there.
- :func:`timing`: per-step milliseconds of forward + backward, of the optimizer step and
  of both, as medians over rounds with their interquartile range, each optimizer's ratio
  to Adam round by round with its order-statistic interval, and the A/A ratio of the second
  Adam, which is the noise; :func:`beyond_noise` says whether a ratio's interval clears it.
- :func:`seconds_matched`: each optimizer's held-out loss against the seconds its budget
  costs (budget × measured time per step), and Adam's loss interpolated at those seconds.
"""

from __future__ import annotations

import math
from typing import Mapping

import numpy as np

from .engine.intervals import median_interval
from .lm import load_results

__all__ = ["load", "summaries", "budgets", "separated", "paired", "seed_wins", "tuning_gap", "gap_in_errors", "step_speedup", "timing", "beyond_noise",
           "seconds_per_step", "seconds_matched", "tuned_table", "heldout_table", "timing_table"]

NAMES = {"adam": "Adam", "isoadam": "IsoAdam", "muon": "Muon", "soap": "SOAP", "adam again": "Adam, again",
         "adam2": "Adam, two rates", "isoadam2": "IsoAdam, two rates", "soap2": "SOAP, two rates"}
ORDER = ("adam", "soap", "isoadam", "muon", "adam2", "soap2", "isoadam2")
LABEL_WIDTH = max(map(len, NAMES.values()))  # the tables' first column

def load(name: str) -> dict:
    """``results/<name>.json`` (e.g. ``"transformer_chapter"``): the checkout's copy, or in a
    session without one (Colab) a copy fetched once from the book's repository
    (:func:`isolab.book.figures.saved.saved_result`, whose error names what to run)."""
    from .figures.saved import saved_result

    return load_results(saved_result(f"{name}.json"))


def budgets(protocol: Mapping, complete: bool = True) -> list[int]:
    """The budgets of the saved entries; with ``complete``, only those at which every
    contender (:data:`isolab.book.lm_protocol.OPTIMIZERS`) has one (Adam alone may have a
    longer budget, as a reference for the step speedups)."""
    from .lm_protocol import OPTIMIZERS

    keys = set(protocol["heldout"])
    found = sorted({int(k.split("/")[1]) for k in keys})
    return [b for b in found if not complete or all(f"{n}/{b}" in keys for n in OPTIMIZERS)]


def summaries(protocol: Mapping, section: str = "heldout") -> dict[int, dict[str, dict]]:
    """``{budget: {optimizer: {"median", "low", "high", "coverage", "values"}}}`` of the
    held-out losses (``section="without_retuning"``: IsoAdam's runs at Adam's settings), the
    interval recomputed from the per-seed values (:func:`~isolab.book.engine.intervals.median_interval`)."""
    out: dict[int, dict[str, dict]] = {}
    for key, entry in protocol.get(section, {}).items():
        name, steps = key.split("/")
        values = [r["loss"] for r in entry["runs"]]
        iv = median_interval(values, 0.9)
        out.setdefault(int(steps), {})[name] = {"median": iv.median, "low": iv.low, "high": iv.high,
                                                "coverage": iv.coverage, "values": values}
    return out


def separated(summary: Mapping[str, Mapping], a: str, b: str) -> bool:
    """Whether ``a``'s interval lies entirely below ``b``'s (lower is better)."""
    return summary[a]["high"] < summary[b]["low"]


def paired(protocol: Mapping, name: str, steps: int, baseline: str = "adam", section: str = "heldout") -> dict:
    """``name`` (from ``section``) minus ``baseline`` on each held-out seed at ``steps`` (same
    seed, same test windows): the differences, their median with its order-statistic
    interval (``"interval"``: an :class:`~isolab.book.engine.intervals.Interval`), their
    largest paired standard error, and how many seeds favour ``name``."""
    runs = {r["seed"]: r for r in protocol[section][f"{name}/{steps}"]["runs"]}
    base = {r["seed"]: r for r in protocol["heldout"][f"{baseline}/{steps}"]["runs"]}
    diffs = [runs[s]["loss"] - base[s]["loss"] for s in sorted(runs)]
    ses = [runs[s].get("paired_se") for s in sorted(runs)]
    return {"diffs": diffs, "interval": median_interval(diffs, 0.9),
            "max_paired_se": max((x for x in ses if x is not None), default=math.nan),
            "wins": sum(d < 0 for d in diffs), "seeds": len(diffs)}


def seed_wins(protocol: Mapping, name: str, baseline: str) -> tuple[str, list[int], int]:
    """``(text, wins, seeds)``: on how many held-out seeds ``name`` ends below ``baseline``
    at each complete budget, as ``"5/5 · 4/5 · 5/5"`` and as the list of counts."""
    keys = protocol["heldout"]
    rows = [paired(protocol, name, b, baseline) for b in budgets(protocol, complete=False)
            if f"{name}/{b}" in keys and f"{baseline}/{b}" in keys]
    return " · ".join(f"{r['wins']}/{r['seeds']}" for r in rows), [r["wins"] for r in rows], rows[0]["seeds"]


def tuning_gap(protocol: Mapping, key: str) -> float:
    """How finely an entry's tuning resolves a setting: the difference, on the tuning files,
    between its best and its second-best trial that ran the whole budget (over all its
    searches). A difference between two optimizers smaller than this is inside the noise
    of choosing their settings."""
    from .lm_protocol import grid_trials

    name = key.split("/")[0]
    scores = {}
    for search in protocol["tuned"][key]["searches"]:
        grid = grid_trials(name, search["shift"])
        scores.update({tuple(grid[int(i)]): v for i, v in search["rung2"].items()})   # a setting run twice counts once
    full = sorted(scores.values())
    return float(full[1] - full[0])


def gap_in_errors(protocol: Mapping, name: str, baseline: str) -> float:
    """The smallest ``|name − baseline|`` over seeds and budgets, in units of the largest
    paired standard error of those runs."""
    rows = [paired(protocol, name, b, baseline) for b in budgets(protocol)]
    return min(abs(d) for r in rows for d in r["diffs"]) / max(r["max_paired_se"] for r in rows)


def _log_interp(x: float, xs, ys) -> float:
    return float(np.interp(math.log(x), np.log(xs), ys))


def step_speedup(protocol: Mapping, name: str, steps: int, baseline: str = "adam") -> tuple[float, str]:
    """``(speedup, kind)``: Adam's steps to reach ``name``'s held-out median at ``steps``,
    divided by ``steps``. ``kind`` is ``"measured"`` when Adam's budgets bracket the loss
    (read off Adam's medians, linear in log steps), ``"at least"`` when even Adam's longest
    budget ends higher (the value is then that budget / ``steps``), and ``"at most"`` when
    Adam's shortest budget already does better."""
    summ = summaries(protocol)
    bs = sorted(summ)
    target = summ[steps][name]["median"]
    adam = [summ[b][baseline]["median"] for b in bs]
    if target < min(adam):
        return bs[-1] / steps, "at least"
    if target > adam[0]:
        return bs[0] / steps, "at most"
    for (b0, l0), (b1, l1) in zip(zip(bs, adam), zip(bs[1:], adam[1:])):
        if l1 <= target <= l0:
            frac = (l0 - target) / (l0 - l1) if l0 != l1 else 0.0
            return math.exp(math.log(b0) + frac * (math.log(b1) - math.log(b0))) / steps, "measured"
    return math.nan, "not monotone"


def _quartiles(x) -> tuple[float, float, float]:
    q = np.quantile(np.asarray(x, dtype=np.float64), [0.25, 0.5, 0.75])
    return float(q[1]), float(q[0]), float(q[2])


def timing(saved: Mapping, size: str) -> dict:
    """Per lane of ``saved["sizes"][size]``: for ``fwd_bwd``, ``step`` and ``total`` the
    median milliseconds per step over rounds with the quartiles, and ``ratio`` (total, to
    Adam's total in the same round) as ``(median, low, high)``, the order-statistic interval
    over rounds at 90 % or more (``"coverage"``: exactly how much). The lane ``"adam again"``
    gives the noise."""
    ms = saved["sizes"][size]["ms"]
    adam_total = np.add(ms["adam"]["fwd_bwd"], ms["adam"]["step"])
    out = {}
    for lane, m in ms.items():
        fb, st = np.asarray(m["fwd_bwd"]), np.asarray(m["step"])
        total = fb + st
        iv = median_interval(list(total / adam_total), 0.9)
        out[lane] = {"fwd_bwd": _quartiles(fb), "step": _quartiles(st), "total": _quartiles(total),
                     "ratio": (iv.median, iv.low, iv.high), "coverage": iv.coverage}
    return out


def beyond_noise(stats: Mapping, lane: str) -> bool:
    """Whether ``lane``'s ratio to Adam is separated from 1 by more than the noise: its 90 %
    interval lies entirely outside the A/A interval of the second Adam."""
    _, lo, hi = stats[lane]["ratio"]
    _, nlo, nhi = stats["adam again"]["ratio"]
    return lo > nhi or hi < nlo


def seconds_per_step(saved: Mapping, size: str) -> dict[str, float]:
    """Median total seconds per training step of each optimizer (the A/A lane left out;
    a form with two rates at its base's time)."""
    from .lm_protocol import TWO_RATES

    stats = timing(saved, size)
    out = {lane: s["total"][0] / 1e3 for lane, s in stats.items() if lane != "adam again"}
    # a second learning rate changes no arithmetic: the two-rate forms cost what their base costs
    out.update({two: out[two[:-1]] for two in TWO_RATES if two[:-1] in out})
    return out


def seconds_matched(protocol: Mapping, saved: Mapping, size: str, baseline: str = "adam") -> dict:
    """``{optimizer: [(budget, seconds, median loss, Adam's loss at those seconds or nan)]}``:
    seconds = budget × :func:`seconds_per_step`; Adam's loss at the same seconds is read
    off its medians (linear in log seconds) where its budgets reach that far."""
    sps = seconds_per_step(saved, size)
    summ = summaries(protocol)
    bs = sorted(summ)
    adam_s = [b * sps[baseline] for b in bs]
    adam_l = [summ[b][baseline]["median"] for b in bs]
    out = {}
    for name in [n for n in summ[bs[0]] if n in sps]:
        rows = []
        for b in [b for b in bs if name in summ[b]]:
            sec = b * sps[name]
            ref = _log_interp(sec, adam_s, adam_l) if adam_s[0] <= sec <= adam_s[-1] else math.nan
            rows.append((b, sec, summ[b][name]["median"], ref))
        out[name] = rows
    return out


def _rate(entry: Mapping) -> str:
    text = f"{entry['lr']:.2g}"
    if entry.get("side_lr") is not None:
        text += f" / {entry['side_lr']:.2g}"
    moved = len(entry["searches"]) - 1
    return text + ("" if entry["interior"] else " (edge)") + ("*" * moved)


CONTENDERS = ORDER[:4]


def _columns(label_width: int, heads: list[str], body: list[tuple[str, list[str]]]) -> str:
    """A table of right-aligned columns, each as wide as its widest cell or heading, two
    spaces apart (the page holds 88 characters)."""
    widths = [max([len(h)] + [len(cells[k]) for _, cells in body]) for k, h in enumerate(heads)]
    rows = [f"{'':{label_width}s}" + "".join(f"  {h:>{w}s}" for h, w in zip(heads, widths))]
    rows += [f"{name:{label_width}s}" + "".join(f"  {c:>{w}s}" for c, w in zip(cells, widths)) for name, cells in body]
    return "\n".join(rows)


def tuned_table(protocol: Mapping, names=ORDER) -> str:
    """The chosen learning rate of every optimizer at every budget (Muon and Adam with two
    rates: matrices / the rest); ``*`` marks a grid that was moved off its edge once, ``(edge)`` a choice still on
    one."""
    bs = budgets(protocol, complete=False)
    body = [(NAMES[name], [_rate(protocol["tuned"][f"{name}/{b}"]) if f"{name}/{b}" in protocol["tuned"] else "—"
                           for b in bs])
            for name in names if any(f"{name}/{b}" in protocol["tuned"] for b in bs)]
    return _columns(LABEL_WIDTH, [f"{b} steps" for b in bs], body)


def heldout_table(protocol: Mapping, digits: int = 3, names=CONTENDERS) -> str:
    """Held-out test loss, median over seeds [its order-statistic interval: coverage at least
    90 %, exactly ``coverage`` of :func:`summaries`], per optimizer and budget."""
    summ = summaries(protocol)
    bs = sorted(b for b in summ if any(n in summ[b] for n in names))
    width = 2 * digits + 14
    rows = [f"{'':{LABEL_WIDTH}s}" + "".join(f"  {f'{b} steps':>{width}s}" for b in bs)]
    for name in names:
        if any(name in summ[b] for b in bs):
            cells = [f"{s['median']:.{digits}f} [{s['low']:.{digits}f}, {s['high']:.{digits}f}]" if s else "—"
                     for s in (summ[b].get(name) for b in bs)]
            rows.append(f"{NAMES[name]:{LABEL_WIDTH}s}" + "".join(f"  {c:>{width}s}" for c in cells))
    return "\n".join(rows)


def timing_table(saved: Mapping, size: str) -> str:
    """Milliseconds per step (median over rounds [quartiles]) of forward + backward, of the
    step and of both, and the total's ratio to Adam's (median [its order-statistic interval] over rounds)."""
    stats = timing(saved, size)
    cell = lambda q, d=1: f"{q[0]:.{d}f} [{q[1]:.{d}f}, {q[2]:.{d}f}]"  # noqa: E731
    body = [(NAMES[lane], [cell(s["fwd_bwd"]), cell(s["step"]), cell(s["total"]), cell(s["ratio"], 2)])
            for lane, s in ((lane, stats[lane]) for lane in ("adam", "adam again", "soap", "isoadam", "muon"))]
    return _columns(12, ["forward+backward", "optimizer step", "total", "ratio to Adam"], body)


# ----------------------------------------------------------------------------- protocol version 3
#: The sets of seeds every protocol-3 verdict of Chapter 11 is judged on.
SETS = ("heldout", "fresh")


def load_v3(budget: int) -> dict | None:
    """``results/transformer_v3_b<budget>.json`` (``scripts/ch11_protocol.py``), or ``None``."""
    try:
        return load(f"transformer_v3_b{budget}")
    except FileNotFoundError:
        return None


def v3_losses(data: Mapping, which: str = "heldout") -> dict[str, np.ndarray]:
    """``{optimizer: per-seed test losses}`` of one set (``inf`` for a diverged seed)."""
    return {k: np.array([r["loss"] if math.isfinite(r["loss"]) else math.inf for r in runs], dtype=float)
            for k, runs in data[which].items()}


def v3_verdict(data: Mapping, a: str, b: str) -> tuple[str, list]:
    """``(verdict, [Interval per set])`` for "``a`` ends below ``b``": the paired difference of
    the test losses on the held-out seeds and on the fresh ones, by the protocol's rule
    (:func:`isolab.book.engine.intervals.ranked`; five seeds a set: ``[min, max]``, 93.75 %)."""
    from .engine.intervals import paired_difference, ranked

    ivs = []
    for which in SETS:
        x = v3_losses(data, which)
        ivs.append(paired_difference(x[a], x[b], 0.9))
    return ranked(ivs), ivs


def adam_at(curve: Mapping[int, np.ndarray], steps: float) -> np.ndarray:
    """Adam's per-seed test loss after ``steps`` steps, read off its budgets (``curve``:
    budget -> per-seed losses, the same seeds), linear in log steps between neighbouring
    budgets; NaN outside the budgets."""
    bs = sorted(curve)
    if not bs[0] <= steps <= bs[-1]:
        return np.full(np.asarray(curve[bs[0]]).shape, math.nan)
    hi = next(b for b in bs if b >= steps)
    lo = max(b for b in bs if b <= steps)
    if hi == lo:
        return np.asarray(curve[lo], dtype=float)
    w = math.log(steps / lo) / math.log(hi / lo)
    return (1 - w) * np.asarray(curve[lo], dtype=float) + w * np.asarray(curve[hi], dtype=float)


def time_verdict(datas: Mapping[int, Mapping], name: str, budget: int, ratio: float,
                 baseline: str = "adam2") -> tuple[str, list]:
    """``name`` at ``budget`` steps against ``baseline`` at the same seconds, if ``name``'s step
    costs ``ratio`` times the baseline's: seed by seed, ``name``'s loss minus the baseline's
    read at ``budget * ratio`` of its steps (:func:`adam_at`), by the protocol's rule over both
    sets; ``"beyond"`` where the baseline's budgets do not reach that far."""
    from .engine.intervals import paired_difference, ranked

    ivs = []
    for which in SETS:
        curve = {b: v3_losses(d, which)[baseline] for b, d in datas.items() if baseline in d[which]}
        ref = adam_at(curve, budget * ratio)
        if np.isnan(ref).any():
            return "beyond", []
        ivs.append(paired_difference(v3_losses(datas[budget], which)[name], ref, 0.9))
    return ranked(ivs), ivs


def v3_table(datas: Mapping[int, Mapping], names) -> str:
    """Per optimizer and budget: the chosen setting (matrices' rate, damping or eps, the rest's
    rate), the trials as run, and the held-out | fresh medians with their [min, max]."""
    lines = []
    for b in sorted(datas):
        d = datas[b]
        lines.append(f"{b} steps: chosen setting, trials as run; test loss, held-out | fresh seeds, "
                     "median [min, max]; diverged")
        for n in [n for n in names if n in d["tuned"]]:
            t = d["tuned"][n]
            knob = ", ".join(f"{'ε' if k == 'eps' else k} {v:g}" for k, v in t["knobs"].items())
            held, fresh = (v3_losses(d, w)[n] for w in SETS)
            iv = [median_interval(x, 0.9) for x in (held, fresh)]
            div = f"{int(np.isinf(held).sum())}, {int(np.isinf(fresh).sum())}"
            edge = "" if t["interior"] and t.get("knob_interior", True) else " (edge)"
            lines.append(f"  {NAMES[n]:18s} lr {t['lr']:.2g}{', ' + knob if knob else ''} / {t['side_lr']:g}, "
                         f"{t['trials_run']} trials{edge}")
            lines.append(f"  {'':18s} " + " | ".join(f"{x.median:.3f} [{x.low:.3f}, {x.high:.3f}]" for x in iv)
                         + f"; {div}")
    return "\n".join(lines)
