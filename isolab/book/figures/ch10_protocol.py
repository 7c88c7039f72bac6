r"""Chapter 10's saved protocol results, read and judged (Part III's protocol, version 3).

- :func:`load_protocol`: the saved parts (``results/protocol_{fig3,fig4,ablation}.npz``).
- :func:`summaries`: one part's entries as ``{name: summary}`` for one set of seeds
  (``"heldout"`` or ``"fresh"``); :func:`both_sets` gives the two.
- :func:`verdict`, :func:`pair_row`, :func:`paper_claims`: the ranking rule of the protocol
  page (a pair is ranked only where its paired interval lies on one side of zero in both
  sets) as audit rows, each printed set by set.
- :func:`table`, :func:`settings_table`, :func:`trials_lines`: the tables the chapter prints
  (every table names the protocol and counts the divergences of each set).
- :func:`prefix_check`: a saved run retrained here for its first steps.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np

from isolab.book.engine.intervals import against_threshold, median_interval, paired_difference, ranked
from isolab.book.engine.tuning import PROTOCOL, TUNED_KNOBS
from isolab.book.figures.ch10 import label

__all__ = ["PARTS", "SETS", "load_protocol", "summaries", "both_sets", "paired", "verdict", "versus", "pair_row",
           "table", "settings_table", "trials_lines", "knob_edges", "range_positions", "paper_claims",
           "prefix_gap", "prefix_check", "PROTOCOL_LINE", "PAPERS_FOUR", "reached", "best_rates",
           "rate_per_decade", "edge_problem", "edge_losses", "step_lengths"]

PARTS = ("fig3", "fig4", "ablation")
SETS = ("heldout", "fresh")
#: The sentence every table of the chapter ends with.
PROTOCOL_LINE = ("protocol v3 (book/protocol.md): 66 trials each, median [95.9 % interval] over 20 seeds, "
                 "held-out seeds 10-29 · fresh seeds 30-49")
#: The optimizers of the paper's Figures 3 and 4.
PAPERS_FOUR = ("sgd", "adam", "iso", "isoadam")


def load_protocol(find) -> dict:
    """``{part: Results}``: each saved part (``find(name)`` gives a file's path, e.g.
    :func:`isolab.book.figures.saved.saved_result`)."""
    from isolab.book.results import load

    return {part: load(find(f"protocol_{part}.npz")) for part in PARTS}


def summaries(results, prefix: str, which: str = "heldout") -> dict:
    """The entries whose label starts with ``prefix`` (``"fig3/"``, ``"fig4/b1000/"``,
    ``"ablation/iso/"``), keyed by the rest of the label: the median of the ``which`` set of
    seeds with its interval, the per-seed scores, the divergences, the chosen setting, the
    trials as run, the pilot and the saved sweep."""
    out = {}
    for s in results:
        if not s.label.startswith(prefix):
            continue
        h, t = s.info[which], s.info["tuned"]
        values = np.asarray(h["scores"], dtype=float)
        iv = median_interval(values, PROTOCOL["interval_level"])
        out[s.label[len(prefix):]] = {
            "median": iv.median, "low": iv.low, "high": iv.high, "coverage": iv.coverage, "values": values,
            "diverged": int(np.isinf(values).sum()), "seeds": list(h["seeds"]), "lr": float(t["lr"]),
            "hyper": dict(t["hyper"]), "interior": bool(t["interior"]), "trials": len(t["trials"]),
            "tuning_score": float(t["score"]), "optimizer": s.optimizer, "sweep": s,
            "knobs": s.info["entry"]["knobs"], "pilot": s.info["entry"].get("pilot"),
            "lr_range": tuple(s.info["entry"]["lr_range"]),
        }
    if not out:
        raise KeyError(f"no saved entry starts with {prefix!r}")
    return out


def both_sets(results, prefix: str) -> list[dict]:
    """``[held-out summaries, fresh summaries]`` of :func:`summaries`."""
    return [summaries(results, prefix, which) for which in SETS]


def paired(summary: Mapping, a: str, b: str):
    """The paired interval of ``log(score_a / score_b)`` over one set's seeds."""
    return paired_difference(np.log(summary[a]["values"]), np.log(summary[b]["values"]), PROTOCOL["interval_level"])


def verdict(sets: Sequence[Mapping], a: str, b: str) -> str:
    """``"ahead"``, ``"behind"`` or ``"unresolved"``: ``a`` against ``b`` by the protocol's rule."""
    return ranked([paired(s, a, b) for s in sets], PROTOCOL["min_effect"])


def versus(sets: Sequence[Mapping], a: str, b: str, names=label) -> str:
    """``"×0.92 [0.84, 0.94] · ×0.95 [0.90, 0.99]"``: the factor ``score_a / score_b``,
    median and interval, in the held-out set and then the fresh one."""
    parts = []
    for s in sets:
        d = paired(s, a, b)
        parts.append(f"×{math.exp(d.median):.2f} [{math.exp(d.low):.2f}, {math.exp(d.high):.3g}]")
    return f"{names(a)} / {names(b)}: " + " · ".join(parts)


def pair_row(sets: Sequence[Mapping], a: str, b: str, stated: str, names=label):
    """An audit row for the chapter's statement about ``a`` against ``b`` (``stated``:
    ``"ahead"``, ``"behind"`` or ``"unresolved"``); it fails when the rule says otherwise."""
    from isolab.book.checks import Check

    got = verdict(sets, a, b)
    words = {"ahead": f"{names(a)} ahead of {names(b)}", "behind": f"{names(b)} ahead of {names(a)}",
             "unresolved": f"{names(a)} and {names(b)} unresolved"}
    expected = {"ahead": r"both intervals below $\times 1$", "behind": r"both intervals above $\times 1$",
                "unresolved": r"an interval across $\times 1$, or the sets disagree"}[stated]
    return Check(words[stated], versus(sets, a, b, names), expected, got == stated)


def reached(summary: Mapping, name: str) -> int:
    """How many seeds of a Figure 3 entry reached the target within the run."""
    s = summary[name]["sweep"]
    which = "heldout" if list(summary[name]["seeds"]) == list(s.info["heldout"]["seeds"]) else "fresh"
    steps = s.info["tuned"]["steps"]
    return int(sum(v < steps for v in s.info[which]["scores"]))


# ------------------------------------------------------------------ tables
_KNOB_NAMES = {"momentum": "momentum", "betas": "β₁", "eps": "ε", "damping": "damping"}


def setting_text(entry: Mapping) -> str:
    """``"lr 0.044, momentum 0, damping 0.01"``: the rate and every knob the protocol tuned."""
    name = entry["optimizer"]
    parts = [f"lr {entry['lr']:.2g}"]
    if name in TUNED_KNOBS:
        mom, damp = TUNED_KNOBS[name]
        h = entry["hyper"]
        parts.append(f"β₁ {h['betas'][0]:g}" if mom == "beta1" else f"momentum {h['momentum']:g}")
        if damp:
            parts.append(f"{_KNOB_NAMES[damp]} {h[damp]:g}")
    return ", ".join(parts)


def _fmt(x: float, digits) -> str:
    if not math.isfinite(x):
        return "diverged"
    return f"{x:.0f}" if digits is None else f"{x:.{digits}g}"


def table(sets: Sequence[Mapping], digits: int | None = 3, names=label, order=None) -> str:
    """One line per entry, best first (by the held-out median): the median [interval] of the
    held-out seeds and of the fresh seeds, and each set's divergences."""
    held = sets[0]
    order = list(order) if order is not None else sorted(held, key=lambda n: (held[n]["median"], n))
    width = max(len(names(n)) for n in order)
    cells = {n: [f"{_fmt(s[n]['median'], digits)} [{_fmt(s[n]['low'], digits)}, {_fmt(s[n]['high'], digits)}]"
                 for s in sets] for n in order}
    w = [max(len(h), *(len(cells[n][k]) for n in order)) for k, h in enumerate(("held-out", "fresh"))]
    lines = [f"{'':{width}s}  {'held-out':>{w[0]}s}  {'fresh':>{w[1]}s}  diverged"]
    for n in order:
        div = " · ".join(str(s[n]["diverged"]) for s in sets)
        lines.append(f"{names(n):{width}s}  {cells[n][0]:>{w[0]}s}  {cells[n][1]:>{w[1]}s}  {div:>8s}")
    return "\n".join(lines)


def settings_table(summary: Mapping, names=label, order=None) -> str:
    """Each entry's chosen setting, best first, marking a knob chosen at an end of its grid."""
    order = list(order) if order is not None else sorted(summary, key=lambda n: (summary[n]["median"], n))
    width = max(len(names(n)) for n in order)
    edges = knob_edges(summary)
    return "\n".join(f"{names(n):{width}s}  {setting_text(summary[n])}"
                     + (f"  ({', '.join(edges[n])} at an end of its grid)" if edges.get(n) else "") for n in order)


def knob_edges(summary: Mapping) -> dict:
    """``{name: [knob, ...]}``: the tuned damping or ε of each entry chosen at the smallest or
    largest value of its grid (the learning rate's own edge is ``interior``)."""
    out = {}
    for n, s in summary.items():
        mom, damp = TUNED_KNOBS.get(s["optimizer"], (None, None))
        if damp is None:
            continue
        values = sorted({c[damp] for c in s["knobs"]})
        if s["hyper"][damp] in (values[0], values[-1]):
            out[n] = [_KNOB_NAMES[damp]]
    return out


def range_positions(summary: Mapping) -> dict:
    """``{name: position}``: where each chosen rate sits in the coarse range of its momentum
    (centred by that momentum's pilot), from 0 (the low end) to 1 (the high end), on the log
    scale."""
    from isolab.book.engine.tuning import lr_scale

    out = {}
    for n, s in summary.items():
        lo, hi = s["lr_range"]
        centres = {float(k): v for k, v in s["pilot"]["centres"].items()}
        lr = s["lr"] / lr_scale(s["optimizer"], s["hyper"], centres)
        out[n] = math.log(lr / lo) / math.log(hi / lo)
    return out


def trials_lines(summary: Mapping, names=label) -> str:
    """How each optimizer's trials were spent: knob settings × rates, then refining rates,
    the count as run, the pilot's centre and where the choice sits in the range."""
    pos = range_positions(summary)
    width = max(len(names(n)) for n in summary)
    lines = []
    for n, s in summary.items():
        t = s["sweep"].info["tuned"]
        combos = len(s["knobs"])
        centres = "/".join(f"{v:.2g}" for _, v in sorted((float(k), v) for k, v in s["pilot"]["centres"].items()))
        lines.append(f"{names(n):{width}s}  {combos} × {t['coarse'] // combos:2d} + {t['refine']} = {s['trials']} "
                     f"trials; pilot centres {centres}; choice at {pos[n]:.2f} of its range")
    return "\n".join(lines)


# ------------------------------------------------------------------ the paper's claims
def paper_claims(fig3: Sequence[Mapping], fig4: Mapping[int, Sequence[Mapping]], stated: Mapping[str, str],
                 lr_budgets: Sequence[str] = ("5 layers",)) -> list:
    """The paper's claims as source rows: on 5 layers and at every 40-layer budget, Iso best
    of the paper's four optimizers and best of all (ahead of each rival by the protocol's
    rule); IsoAdam's tuned learning rate within a factor of two of Adam's (unresolved within
    the tuning grid's resolution). ``stated`` maps each claim's key (``"5 layers: four"``,
    ``"40 layers, 1000 steps: all"``, ``"5 layers: lr"``) to the verdict the chapter states."""
    from isolab.book.checks import refuted, reproduced, unresolved

    def row(key, claim, measured, expected, got):
        said = stated[key]
        make = {"reproduced": reproduced, "refuted": refuted, "unresolved": unresolved}[said]
        holds = {"reproduced": got == "reproduced", "refuted": got != "refuted",
                 "unresolved": got == "unresolved"}[said]
        return make("the paper", f"{key.split(':')[0]}: {claim}", measured, expected, holds)

    rows = []
    setups = [("5 layers", fig3)] + [(f"40 layers, {b} steps", fig4[b]) for b in sorted(fig4)]
    for title, sets in setups:
        names = list(sets[0])
        for which, rivals, claim in (("four", [n for n in PAPERS_FOUR if n != "iso"], "Iso best of the paper's four"),
                                     ("all", [n for n in names if n != "iso"], f"Iso best of all {len(names)}")):
            verdicts = {o: verdict(sets, "iso", o) for o in rivals}
            got = ("reproduced" if all(v == "ahead" for v in verdicts.values())
                   else "refuted" if any(v == "behind" for v in verdicts.values()) else "unresolved")
            worst = min(rivals, key=lambda o: (0 if verdicts[o] == "behind" else 1 if verdicts[o] == "unresolved"
                                                else 2, sets[0][o]["median"]))
            rows.append(row(f"{title}: {which}", claim, versus(sets, "iso", worst),
                            r"Iso ahead of each rival in both sets", got))
    for title, sets in setups:
        if title not in lr_budgets:
            continue
        s = sets[0]
        ratio = s["adam"]["lr"] / s["isoadam"]["lr"]
        step = _grid_step(s["isoadam"])
        inside = against_threshold(max(ratio, 1 / ratio), 2.0, step)
        got = {"holds": "reproduced", "fails": "refuted", "unresolved": "unresolved"}[inside]
        rows.append(row(f"{title}: lr", "IsoAdam's tuned lr within ×2 of Adam's",
                        f"Adam / IsoAdam = {ratio:.2f}; the grid's step ×{step:.2f}",
                        r"between $\times 1/2$ and $\times 2$, beyond one grid step", got))
    return rows


def _grid_step(entry: Mapping) -> float:
    """The factor between neighbouring learning rates searched around an entry's choice (the
    refine phase's spacing, the finest the search resolved)."""
    lrs = sorted({x["lr"] for x in entry["sweep"].info["tuned"]["trials"]})
    near = [b / a for a, b in zip(lrs, lrs[1:]) if a <= entry["lr"] * 1.6 and b >= entry["lr"] / 1.6]
    return min(near) if near else lrs[1] / lrs[0]


# ------------------------------------------------------------------ a saved run, retrained
PREFIX_STEPS = 7
REPRODUCED, NOTICED = 3e-4, 5e-4


def prefix_gap(saved, problem, steps: int, lr_factor: float = 1.0) -> float:
    """The largest relative difference between a saved held-out run's first ``steps`` batch
    losses and the same setting retrained now (the learning rate times ``lr_factor``), on
    its held-out seeds, with the schedule over the saved run's length."""
    import torch

    from isolab.book.engine import sweep

    t = saved.info["tuned"]
    kept = [i for i, k in enumerate(saved.info["loss_steps"]) if k <= steps]
    run = sweep(problem, saved.optimizer, np.asarray(saved.lrs) * lr_factor, steps,
                seeds=[int(s) for s in saved.seeds], hyper=saved.hyper, schedule=t.get("schedule"),
                schedule_steps=t["steps"], record_norms=False, progress=False, dtype=torch.float32, num_threads=1)
    old, new = saved.loss[:, 0, kept], run.loss[:, 0]
    there = np.isfinite(old)
    if not np.isfinite(new[there]).all():
        return math.inf
    return float(np.max(np.abs(new[there] / old[there] - 1.0)))


def prefix_check(saved, problem, name: str, budget: int | None = None, steps: int = PREFIX_STEPS):
    """An audit row: the saved run retrained here agrees over its first ``steps`` steps to
    within :data:`REPRODUCED`, while a rate 5 % higher differs by more than :data:`NOTICED`."""
    from isolab.book.checks import Check

    gap, off = prefix_gap(saved, problem, steps), prefix_gap(saved, problem, steps, 1.05)
    title = label(name) + (f", {budget} steps" if budget else "")
    same = "below 3e-4" if gap < REPRODUCED else f"gap {gap:.0e}"
    seen = "above 5e-4" if off > NOTICED else f"{off:.0e}"
    return Check(f"{title}: the first {steps} steps on 20 seeds, retrained here", f"{same}; rate +5 %: {seen}",
                 r"below $3\cdot 10^{-4}$; rate +5 %: above $5\cdot 10^{-4}$", gap < REPRODUCED and off > NOTICED)


def best_rates(entry: Mapping, rung: int = 0) -> dict:
    """``{(momentum, damping): (lr, score)}``: each knob setting's best rate and its median
    tuning score in the coarse phase's ``rung`` (every setting ran there, at the same length),
    for an entry that tunes a damping (Iso, IsoAdam, ...)."""
    from isolab.book.engine.tuning import momentum_of

    t = entry["sweep"].info["tuned"]
    trials = [r for r in t["rungs"] if r["phase"] == "coarse"][rung]["trials"]
    _, damp = TUNED_KNOBS[entry["optimizer"]]
    out: dict = {}
    for x in trials:
        key = (momentum_of(entry["optimizer"], x["hyper"]), x["hyper"][damp])
        if key not in out or x["score"] < out[key][1]:
            out[key] = (x["lr"], x["score"])
    return out


def rate_per_decade(entry: Mapping, rung: int = 0) -> dict:
    """``{momentum: factor}``: how much the best first-rung rate grows per decade of damping
    (the geometric mean over the grid's decades), per momentum value."""
    best = best_rates(entry, rung)
    out = {}
    for mu in sorted({m for m, _ in best}):
        pts = sorted((d, lr) for (m, d), (lr, _) in best.items() if m == mu)
        decades = math.log10(pts[-1][0] / pts[0][0])
        out[mu] = (pts[-1][1] / pts[0][1]) ** (1 / decades)
    return out


# ------------------------------------------------------------------ the centerpiece's sweeps
def edge_problem(n: int, depth: int, batch: int, kappa: float, scale: str, angle: float):
    """The centerpiece's deep linear regression: inputs with covariance Σ of condition number
    ``kappa``, its eigenbasis turned by ``angle`` degrees, its scale fixed by ``tr Σ = n``
    (``scale="trace"``) or by its smallest eigenvalue 1 (``"floor"``: the largest is κ)."""
    import torch

    from isolab.book.problems import DeepLinearRegression, GaussianFeatures

    if scale not in ("trace", "floor"):
        raise ValueError(f"scale must be 'trace' or 'floor', got {scale!r}")
    base = GaussianFeatures(n, kappa, math.radians(angle))
    factor = 1.0 if scale == "trace" else 1.0 / float(torch.linalg.eigvalsh(base.sigma).min())
    return DeepLinearRegression(n=n, depth=depth, batch=batch,
                                features=GaussianFeatures(n, kappa, math.radians(angle), factor))


def edge_losses(problem, name: str, lrs, steps: int, seeds, hyper: Mapping) -> np.ndarray:
    """``(seeds, lrs)``: each lane's loss after ``steps`` steps over its initial loss (NaN:
    the lane diverged), float32 on one thread, as the saved centerpiece grid was made."""
    import torch

    from isolab.book.engine import sweep

    s = sweep(problem, name, np.asarray(lrs), steps, seeds=list(seeds), hyper=dict(hyper), record_norms=False,
              progress=False, dtype=torch.float32, num_threads=1)
    return s.final_loss(diverged=np.nan) / s.loss[:, :, 0]


# ------------------------------------------------------------------ the damping's mechanism
def step_lengths(problem, name: str, lr: float, hyper: Mapping, steps: int, seed: int) -> np.ndarray:
    """``(steps, layers)``: the length of every layer's update over the rate,
    ``||W_{t+1} - W_t||_F / lr``, of the ``torch.optim`` optimizer the engine's ``name``
    reproduces, trained at a constant rate in float64 on ``problem``'s batches of ``seed``."""
    import torch

    from isolab.book.engine.reference import make_optimizer

    model = problem.reference_model(problem.initial_weights(seed).to(torch.float64))
    opt = make_optimizer(name, model, lr, dict(hyper))
    out = np.zeros((steps, problem.depth))
    for t in range(steps):
        X, T = problem.batch(t, seed)
        before = [m.weight.detach().clone() for m in model]
        opt.zero_grad()
        problem.reference_loss(model(X.to(torch.float64)), T.to(torch.float64)).backward()
        opt.step()
        out[t] = [float((m.weight.detach() - b).norm()) / lr for m, b in zip(model, before)]
    return out
