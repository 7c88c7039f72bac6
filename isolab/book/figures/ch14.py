r"""Figures and the explorable of Chapter 14, *Iso on the models people train*.

Everything drawn from the benchmark reads ``results/lm_benchmark.json`` and
``results/lm_mechanism.json.gz`` through :mod:`isolab.book.lm_bench_results`; a part the files do
not hold yet is drawn as the words "not yet measured", never as a curve.

- :func:`hero`: the held-out losses at the shortest budget (left) and, per hidden layer, Iso's
  first step against Muon's fixed norm (right, :func:`isolab.book.correlation_step.first_step`).
- :func:`verdict_figure`: every optimizer's paired difference with Muon, per model and budget.
- :func:`correlation_step` (the centerpiece, ``EXPLORABLES``): one layer whose output
  gradients carry noise ``σ`` (:mod:`isolab.book.correlation_step`): the canonical
  correlations, the length of each rule's step along the run, and the loss against the
  learning rate.
- :func:`mechanism_figure`, :func:`isoadam_figure`, :func:`budget_figure`: the mechanism's
  measurements and the two budgets.
"""

from __future__ import annotations

import math
import warnings
from typing import Mapping, Optional, Sequence

import numpy as np
from matplotlib.figure import Figure

from isolab.book import correlation_step as C
from isolab.book import lm_bench_results as R
from isolab.book.explorable import Explorable, Promise, Slider, always, nonincreasing
from isolab.book.figures import style
from isolab.book.plotting import log_ticks

__all__ = ["LOOKS", "look", "hero", "verdict_figure", "correlation_step", "mechanism_figure", "isoadam_figure",
           "budget_figure", "missing", "EXPLORABLES", "CAPTION"]

#: how each benchmark optimizer is drawn: the book's look of its family; Iso's variants in
#: Iso's colour, told apart by marker and line style (and named on the page)
LOOKS = {
    "adamw": ("Adam", "s", "--"), "adamw2": ("Adam", "p", "-."), "torch_muon": ("Muon", "v", "--"),
    "muon": ("Muon", "^", "-"), "soap": ("SOAP", "P", "-."), "iso": ("Iso", "o", "-"),
    "isoadam": ("IsoAdam", "*", "-"), "isoadam_sched": ("IsoAdam", "X", "--"), "iso_norm": ("Iso", "s", "--"),
    "iso_polar": ("Iso", "D", "-."), "iso_nor": ("Iso", "h", ":"), "diag_polar": ("Iso", "<", (0, (1, 1))),
}
ARCH_NAMES = {"gpt2": "GPT-2", "llama": "Llama"}
NOT_YET = "not yet measured"


def look(name: str) -> dict:
    """``color``, ``marker``, ``linestyle`` of a benchmark optimizer (or a toy rule)."""
    family, marker, ls = LOOKS[name]
    return {"color": style.color(family), "marker": marker, "linestyle": ls}


def _waiting(what: str) -> Figure:
    """A short figure that says what is not yet measured (no empty axes)."""
    fig = Figure(figsize=(style.FIG_WIDTH, 0.9))
    fig.text(0.5, 0.5, f"{what}: {NOT_YET}", ha="center", va="center", color=style.ROLES["bound"])
    return fig


def missing(ax, what: str = "") -> None:
    """Mark an axes as waiting for data: the words, no curve."""
    ax.set_axis_off()
    ax.text(0.5, 0.5, f"{what}\n{NOT_YET}" if what else NOT_YET, transform=ax.transAxes, ha="center",
            va="center", color=style.ROLES["bound"])


# ----------------------------------------------------------------------------- hero
def _loss_dots(ax, cells: Mapping, steps: int, order: Sequence[str], right: float = 2.5) -> None:
    archs = [a for a in ARCH_NAMES if (a, steps) in cells]
    for j, arch in enumerate(archs):
        per = cells[(arch, steps)]["optimizers"]
        for i, name in enumerate(order):
            if name not in per:
                continue
            L, y = per[name]["loss"], i + (j - (len(archs) - 1) / 2) * 0.3
            lk = look(name)
            ax.plot([L["low"], min(L["high"], right)], [y, y], color=lk["color"], lw=1.8)
            ax.plot(L["median"], y, lk["marker"], color=lk["color"], ms=7,
                    mfc=lk["color"] if j == 0 else style.ROLES["background"])
            if L["high"] > right:
                ax.annotate("", (right, y), (right - 0.06, y), arrowprops=dict(arrowstyle="->", color=lk["color"]))
    ax.set_yticks(range(len(order)), [R.SHORT[n] for n in order])
    ax.invert_yaxis()
    ax.set_xlim(1.85, right + 0.02)
    ax.set_xlabel(f"held-out loss after {steps} steps (nats/byte)")
    marks = "   ".join(f"{'●' if j == 0 else '○'} {ARCH_NAMES[a]}" for j, a in enumerate(archs))
    ax.set_title(f"median and 93 % interval, 8 seeds\n{marks}", loc="left", fontsize=style.FONT_SIZE)


def hero(bench: Mapping, first: Mapping[str, Mapping]) -> Figure:
    """Left: held-out losses at the shortest budget, best first (GPT-2's order). Right: Iso's
    first step in each hidden layer over Muon's fixed norm, ``first`` from
    :func:`isolab.book.correlation_step.first_step` per model."""
    cells = R.cells(bench)
    steps = min(s for _, s in cells)
    ref = next(c for (a, s), c in cells.items() if s == steps)["optimizers"]
    order = sorted(ref, key=lambda n: ref[n]["loss"]["median"])
    fig = Figure(figsize=(style.FIG_WIDTH, 4.6))
    ax_l, ax_r = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.5, 1]})
    _loss_dots(ax_l, cells, steps, order)
    for j, (arch, rec) in enumerate(first.items()):
        ratio = np.asarray(rec["iso_step"]) / np.asarray(rec["muon_norm"])
        mlp = np.array(["mlp" in n for n in rec["layers"]])
        x = j + np.linspace(-0.25, 0.25, len(ratio))
        ax_r.plot(x[~mlp], ratio[~mlp], "o", color=style.color("Iso"), ms=7)
        ax_r.plot(x[mlp], ratio[mlp], "s", color=style.color("Iso"), ms=7, mfc=style.ROLES["background"])
        ax_r.text(j, 0.9, f"{ratio.min():.2f}–{ratio.max():.2f}", ha="center", color=style.ROLES["ink"])
    ax_r.axhline(1.0, color=style.color("Muon"), lw=2)
    ax_r.text(-0.45, 1.03, "Muon's step, every layer", color=style.color("Muon"), va="bottom")
    ax_r.set(xlim=(-0.5, len(first) - 0.5), ylim=(0, 1.2), ylabel="Iso's first step / Muon's")
    ax_r.set_xticks(range(len(first)), [ARCH_NAMES[a] for a in first])
    ax_r.set_title("√Σρᵢ² per layer\n● attention  □ MLP", loc="left", fontsize=style.FONT_SIZE)
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- verdicts
def verdict_figure(cells: Mapping, reference: str = "muon", span: tuple[float, float] = (-0.1, 0.5)) -> Figure:
    """Per (model, budget): each optimizer's paired difference with ``reference`` (median and
    93 % interval over the same seeds; filled where the interval excludes zero, open where
    it does not), best first; intervals past the axis end in an arrow."""
    keys = list(cells)
    fig = Figure(figsize=(style.FIG_WIDTH, 1.2 + 2.9 * math.ceil(len(keys) / 2)))
    axes = np.atleast_1d(fig.subplots(math.ceil(len(keys) / 2), min(2, len(keys)), squeeze=False)).ravel()
    for ax, key in zip(axes, keys):
        cell = cells[key]
        per = cell["optimizers"]
        order = [n for n in sorted(per, key=lambda n: per[n]["loss"]["median"]) if n != reference]
        for i, n in enumerate(order):
            c, lk = R.compare(cell, n, reference), look(n)
            lo, hi = max(c["low"], span[0]), min(c["high"], span[1])
            ax.plot([lo, hi], [i, i], color=lk["color"], lw=1.8)
            filled = c["verdict"] == "ranked"
            ax.plot(min(max(c["median"], span[0]), span[1]), i, lk["marker"], color=lk["color"], ms=7,
                    mfc=lk["color"] if filled else style.ROLES["background"])
            if c["high"] > span[1]:
                ax.annotate("", (span[1], i), (span[1] - 0.04, i), arrowprops=dict(arrowstyle="->", color=lk["color"]))
        ax.axvline(0, color=style.color("Muon"), lw=1.5)
        ax.set_yticks(range(len(order)), [R.SHORT[n] for n in order])
        ax.invert_yaxis()
        ax.set_xlim(span[0], span[1] + 0.02)
        ax.set_xlabel(f"loss minus {R.SHORT[reference]}'s (nats/byte)")
        ax.set_title(f"{ARCH_NAMES[key[0]]}, {key[1]} steps", loc="left")
    for ax in axes[len(keys):]:
        ax.set_axis_off()
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- the explorable
_RULE_NAMES = {"muon": "Muon", "iso": "Iso", "iso_norm": "Iso, Muon's norm", "iso_polar": "Iso, polar"}


def _best_index(o: C.Outcome, k: int) -> int:
    return int(np.argmin(np.where(np.isfinite(o.final[k]), o.final[k], np.inf)))


def _draw_correlation_step(fig, sigma, rows):
    o = C.outcome(sigma, rows)
    ax_rho, ax_norm, ax_lr = fig.subplots(1, 3, gridspec_kw={"width_ratios": [0.85, 1, 1.1]})
    k = np.arange(1, len(o.rho) + 1)
    ax_rho.bar(k, o.rho, color=style.color("Iso"), width=0.75)
    ax_rho.step(k, o.floor, where="mid", color=style.ROLES["bound"], lw=2)
    ax_rho.set(xlim=(0.3, len(k) + 0.7), ylim=(0, 1.05), xticks=[1, 8, 16], xlabel="i (grey: pure noise)",
               ylabel="ρᵢ of X and G")
    ax_rho.set_title(f"first batch\n√Σρᵢ² = {math.sqrt((o.rho ** 2).sum()):.2f}", loc="left",
                     fontsize=style.FONT_SIZE)

    t = np.arange(1, C.STEPS + 1)
    ax_norm.axhline(C.MUON_NORM, color=style.color("Muon"), lw=2)
    ax_norm.text(C.STEPS, C.MUON_NORM * 1.25, "Muon; Iso at\nMuon's norm;\nIso, polar", ha="right",
                 va="bottom", color=style.color("Muon"))
    iso = o.norms[1, _best_index(o, 1)]
    ax_norm.plot(t, np.maximum(iso, 1e-3), color=style.color("Iso"), lw=2)
    ax_norm.text(C.STEPS, max(np.median(iso[-20:]) / 2.2, 2.5e-3), "Iso", ha="right", va="top",
                 color=style.color("Iso"))
    ax_norm.set_yscale("log")
    log_ticks(ax_norm.yaxis, [-2, -1, 0, 1, 2])
    ax_norm.set(xlim=(0, C.STEPS), ylim=(2e-3, 200), xlabel="step", ylabel="‖ΔW‖ / η")
    ax_norm.set_title(f"step length\nIso: {np.median(iso) / C.MUON_NORM:.1%} of Muon's",
                      loc="left", fontsize=style.FONT_SIZE)

    for j, rule in enumerate(C.RULES):
        lk = look(rule)
        y = np.where(np.isfinite(o.final[j]), o.final[j], np.nan)
        ax_lr.plot(C.LRS, np.clip(y, 1e-6, 10), color=lk["color"], ls=lk["linestyle"], lw=1.8)
        b = _best_index(o, j)
        ax_lr.plot(C.LRS[b], max(o.final[j, b], 1e-6), lk["marker"], color=lk["color"], ms=8)
    ax_lr.set(xscale="log", yscale="log", xlim=(1e-3, 10), ylim=(5e-6, 10), xlabel="learning rate η",
              ylabel="excess loss, step 100")
    log_ticks(ax_lr.xaxis, [-3, -2, -1, 0, 1])
    log_ticks(ax_lr.yaxis, [-5, -4, -3, -2, -1, 0, 1])
    ax_lr.text(1.2e-3, 7e-6, "▲ Muon  ● Iso\n■ Muon's norm  ◆ polar", color=style.ROLES["ink"], va="bottom")
    ax_lr.set_title(f"best η: Iso {o.best[1]:.2g}\nMuon {o.best[0]:.2g}", loc="left",
                    fontsize=style.FONT_SIZE)


CAPTION = (
    "Raise σ, the noise in the output gradients: the correlations ρᵢ sink toward those of pure noise "
    "(grey, left). Iso's first step is (1 − μ²)√Σρᵢ² long (μ = 0.95, the momentum), so Iso's first step "
    "shrinks as σ grows, while the other three keep Muon's norm (middle). Iso's best η sits to the right of "
    "the others' (right: solid lines Muon and Iso, dashed Iso at Muon's norm, dash-dot Iso's polar factor), and "
    "tuned, Iso ends level with the fixed-size steps or ahead. The second slider sets the rows per step b, "
    "and with them the level of the pure noise."
)


def _first(sigma, rows):
    return C.outcome(sigma, rows).first_iso


def _first_formula_gap(sigma, rows):
    o = C.outcome(sigma, rows)
    return abs(o.first_iso - (1 - C.MU ** 2) * math.sqrt((o.rho ** 2).sum())) / o.first_iso


def _fixed_norm_gap(sigma, rows):
    o = C.outcome(sigma, rows)
    return max(float(np.abs(o.norms[k, _best_index(o, k)] - C.MUON_NORM).max()) for k in (0, 2, 3))


def _lr_ratio(sigma, rows):
    o = C.outcome(sigma, rows)
    return o.best[1] / max(o.best[k] for k in (0, 2, 3))


def _tuned_loss_ratio(sigma, rows):
    o = C.outcome(sigma, rows)
    return o.best_loss[1] / min(o.best_loss[k] for k in (0, 2, 3))


def correlation_step() -> Explorable:
    """§14.3's centerpiece: the noise-to-signal ratio σ of a layer's output gradients (main
    slider, 11 values from 0.03 to 30) and the rows per step b."""
    return Explorable(
        _draw_correlation_step,
        [Slider("sigma", list(C.SIGMAS), label="noise σ", default=1.0, fmt="{:.2g}"),
         Slider("rows", list(C.ROWS), label="rows per step b", default=256)],
        main="sigma",
        figsize=(style.COLUMN_WIDTH, 3.3),
        static_colors=24,
        narrow="panels",
        trains=True,
        caption=CAPTION,
        alt=("As the noise in the output gradients grows, Iso's correlations and its step shrink while the "
             "fixed-size steps keep Muon's length; Iso's best learning rate sits far to the right."),
        promises=[
            Promise("Iso's first step shrinks as σ grows", _first, nonincreasing(tol=1e-12)),
            Promise("Iso's first step is (1 − μ²)√Σρᵢ² long", _first_formula_gap,
                    always(lambda v: v < 1e-9, "relative gap < 1e-9")),
            Promise("the other three keep Muon's norm", _fixed_norm_gap, always(lambda v: v < 1e-9, "gap < 1e-9")),
            Promise("Iso's best η sits to the right of the others'", _lr_ratio,
                    always(lambda v: v > 2, "Iso's best η > 2 × the others' largest")),
            Promise("tuned, Iso ends level with the fixed-size steps or ahead", _tuned_loss_ratio,
                    always(lambda v: v < 1.1, "Iso's tuned loss < 1.1 × the others' best")),
        ],
    )


EXPLORABLES = (correlation_step,)


# ----------------------------------------------------------------------------- the mechanism
EARLY = ("as tuned", "fresh roots", "batch statistics, fresh roots", "statistics warm-up 5 %")


def _runs(mech: Optional[Mapping], prefix: str) -> dict:
    return {k[len(prefix):]: v for k, v in ((mech or {}).get("runs") or {}).items() if k.startswith(prefix)}


def _smooth(y, width: int = 10):
    """``(steps, means)``: the mean of ``y`` over each ``width`` consecutive steps (1-based
    step of the window's end); ``y`` itself for a shorter run."""
    y = np.asarray(y, dtype=float)
    if y.size < width:
        return np.arange(1, y.size + 1), y
    y = np.nan_to_num(y, nan=float(np.nanmedian(y)))
    return np.arange(width, y.size + 1), np.convolve(y, np.ones(width) / width, mode="valid")


def mechanism_figure(mech: Optional[Mapping]) -> Figure:
    """Top: along the longest run, Iso's step ``‖ΔW‖/η`` over Muon's norm (median over hidden
    layers, and the largest layer) and ``√Σρᵢ²`` over Muon's norm on the fixed probes. Bottom:
    the first steps under four statistics schedules, the whitened step over Muon's norm
    (median over layers, mean over 10 steps). A model whose runs are missing says so."""
    if not _runs(mech, "norms/") and not _runs(mech, "early/"):
        return _waiting("Iso's step along the runs and in their first steps")
    fig = Figure(figsize=(style.FIG_WIDTH, 6.4))
    axes = fig.subplots(2, 2)
    for col, arch in enumerate(ARCH_NAMES):
        ax = axes[0, col]
        runs = {k: v for k, v in _runs(mech, f"norms/{arch}/").items() if k.startswith("iso/")}
        if not runs:
            missing(ax, f"{ARCH_NAMES[arch]}: Iso's step along the run")
        else:
            r = runs[max(runs, key=lambda k: int(k.split("/")[1]))]
            mn = np.asarray(r["muon_norm"])
            rel = np.asarray(r["dir_norm"], dtype=float) / mn
            t = np.arange(1, rel.shape[0] + 1)
            ax.plot(*_smooth(np.nanmedian(rel, axis=1)), color=style.color("Iso"), lw=2)
            ax.plot(t, np.nanmax(rel, axis=1), color=style.color("Iso"), lw=0.8, alpha=0.6)
            root = [np.median([math.sqrt(sum(v * v for v in rho)) for rho in layer] / mn) for layer in r["rho"]]
            ax.plot(r["probe_step"], root, "o", color=style.ROLES["bound"], ms=4)
            ax.axhline(1.0, color=style.color("Muon"), lw=1.5)
            ax.set_yscale("log")
            log_ticks(ax.yaxis, [-3, -2, -1, 0, 1, 2])
            ax.set(ylim=(1e-3, 300), xlim=(0, t[-1]), xlabel="step", ylabel="over Muon's norm")
            ax.set_title(f"{ARCH_NAMES[arch]}: Iso's step (median, largest layer)\n"
                         "grey: √Σρᵢ² on the probes; blue: Muon", loc="left", fontsize=style.FONT_SIZE)
        ax = axes[1, col]
        early = _runs(mech, f"early/{arch}/iso/")
        if not early:
            missing(ax, f"{ARCH_NAMES[arch]}: the first steps")
            continue
        colours = style.sequence(len(EARLY))
        for c, label in zip(colours, EARLY):
            if label not in early:
                continue
            r = early[label]
            with warnings.catch_warnings():   # steps before the first statistics are all NaN
                warnings.simplefilter("ignore", RuntimeWarning)
                rel = np.nanmedian(np.asarray(r["whitened_norm"], dtype=float) / np.asarray(r["muon_norm"]), axis=1)
            last = float(np.mean(r["train_loss"][-20:]))
            ax.plot(*_smooth(rel), color=c, lw=1.8, label=f"{label}: {last:.2f}")
        ax.set_yscale("log")
        log_ticks(ax.yaxis, [-4, -3, -2, -1, 0])
        ax.set(ylim=(1e-4, 3), xlabel="step", ylabel="whitened / Muon's norm")  # room under the curves for the key
        ax.legend(loc="lower left", fontsize=style.FONT_SIZE - 1, title="schedule: last loss",
                  title_fontsize=style.FONT_SIZE - 1)
        ax.set_title(f"{ARCH_NAMES[arch]}: Iso's first {len(rel)} steps", loc="left", fontsize=style.FONT_SIZE)
    fig.tight_layout()
    return fig


PROFILE_PARTS = (("fwd_bwd", "forward + backward"), ("statistics", "statistics"), ("roots", "roots"),
                 ("apply", "applying roots"), ("step_rest", "rest of step"))


def isoadam_figure(mech: Optional[Mapping]) -> Figure:
    """Left: each held-out seed's final training loss (mean of the last 20 steps) for IsoAdam,
    Muon and AdamW, per model and budget. Right: milliseconds per step at 1,024 tokens, split
    into forward and backward (less the statistics the hooks form), the statistics, the
    inverse roots, applying them and the rest of ``step``, per optimizer and model size."""
    seeds = _runs(mech, "seeds/")
    if not seeds and not _runs(mech, "profile/"):
        return _waiting("The seed spread and where a step's time goes")
    fig = Figure(figsize=(style.FIG_WIDTH, 4.2))
    ax_s, ax_p = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 1.2]})
    if not seeds:
        missing(ax_s, "the seed spread")
    else:
        groups = sorted({k.rsplit("/", 1)[0] for k in seeds}, key=lambda k: (k.split("/")[0], int(k.split("/")[2])))
        for i, g in enumerate(groups):
            arch, name, steps = g.split("/")
            last = [float(np.mean(v["train_loss"][-20:])) for k, v in seeds.items() if k.rsplit("/", 1)[0] == g]
            lk = look(name)
            ax_s.plot(last, np.full(len(last), i), lk["marker"], color=lk["color"], ms=6, alpha=0.8)
        ax_s.set_yticks(range(len(groups)), [f"{ARCH_NAMES[g.split('/')[0]]} {R.SHORT[g.split('/')[1]]} {g.split('/')[2]}"
                                             for g in groups])
        ax_s.invert_yaxis()
        ax_s.set(xlabel="training loss, last 20 steps")
        ax_s.set_title("one dot per held-out seed", loc="left", fontsize=style.FONT_SIZE)
    prof = _runs(mech, "profile/")
    if not prof:
        missing(ax_p, "where the time goes")
    else:
        labels, y = [], 0
        colours = dict(zip([p for p, _ in PROFILE_PARTS], style.sequence(len(PROFILE_PARTS))))
        for key in sorted(prof):
            for name, comp in prof[key]["ms"].items():
                med = {p: float(np.median(comp[p])) for p, _ in PROFILE_PARTS}
                med["fwd_bwd"] -= med["statistics"]
                left = 0.0
                for p, _ in PROFILE_PARTS:
                    ax_p.barh(y, med[p], left=left, color=colours[p], edgecolor=style.ROLES["background"])
                    left += med[p]
                labels.append(f"{ARCH_NAMES[key.split('/')[0]]} {key.split('/')[1]}: {R.SHORT[name]}")
                y += 1
            y += 0.5
        ticks = [i for i, _ in enumerate(labels)]
        ax_p.set_yticks([t + 0.5 * (t // len(prof[sorted(prof)[0]]['ms'])) for t in ticks], labels)
        ax_p.invert_yaxis()
        ax_p.set_xlabel("ms per step")
        for p, text in PROFILE_PARTS:
            ax_p.plot([], [], "s", color=colours[p], label=text, ms=8)
        ax_p.legend(loc="lower right", fontsize=style.FONT_SIZE - 1)
        ax_p.set_title("where a step's time goes", loc="left", fontsize=style.FONT_SIZE)
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- budgets
def budget_figure(bench: Mapping, names: Sequence[str] = ("iso_polar", "muon", "soap", "isoadam", "adamw2",
                                                          "iso")) -> Figure:
    """Held-out median (with its interval) at each budget of the protocol, per model, each
    optimizer named at its last measured budget; a budget without held-out runs is marked
    "not yet measured"."""
    cells, budgets = R.cells(bench), R.budgets(bench)
    fig = Figure(figsize=(style.FIG_WIDTH, 3.8))
    top = 2.6
    for ax, arch in zip(fig.subplots(1, 2), ARCH_NAMES):
        if not any((arch, T) in cells for T in budgets):
            missing(ax, ARCH_NAMES[arch])
            continue
        ends = []
        for n in names:
            pts = [(i, cells[(arch, T)]["optimizers"][n]["loss"]) for i, T in enumerate(budgets)
                   if (arch, T) in cells and n in cells[(arch, T)]["optimizers"]]
            if not pts:
                continue
            lk = look(n)
            x = [i for i, _ in pts]
            ax.plot(x, [p["median"] for _, p in pts], color=lk["color"], ls=lk["linestyle"], marker=lk["marker"])
            for i, p in pts:
                ax.plot([i, i], [p["low"], min(p["high"], top)], color=lk["color"], lw=1)
            ends.append((x[-1], pts[-1][1]["median"], R.SHORT[n], lk["color"]))
        spots = style.spread_labels([y for _, y, _, _ in ends], 0.065, upper=top - 0.03)
        for (x, y, text, colour), at in zip(ends, spots):
            ax.annotate(text, (x, y), xytext=(x + 0.08, at), textcoords="data", va="center",
                        color=style.text_color(colour), fontsize=style.FONT_SIZE - 1)
        for i, T in enumerate(budgets):
            if (arch, T) not in cells:
                ax.text(i, 2.35, f"{T} steps:\n{NOT_YET}", ha="center", color=style.ROLES["bound"])
        ax.set_xticks(range(len(budgets)), [f"{T} steps" for T in budgets])
        ax.set(xlim=(-0.2, len(budgets) - 0.4), ylim=(1.5, top), ylabel="held-out loss (nats/byte)")
        ax.set_title(ARCH_NAMES[arch], loc="left")
    fig.tight_layout()
    return fig
