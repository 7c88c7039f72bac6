r"""Figures of Chapter 13 (scaling up: what Iso costs).

- :func:`staleness_figure`: held-out loss and training time against the refresh
  interval of the statistics and roots (the runs of section 13.4).
- :func:`bill`: the cost model of one square layer, per optimizer, in units of the
  layer's forward and backward pass (the computation the explorable draws).
- :func:`cost_bill`: the centerpiece, the bill part by part as the rows per process grow
  (the main slider), for a refresh interval and a precision of the statistics and the
  application of the roots.

The parts of a step are not optimizers: they take the colours of :data:`style.ROLES`
(the forward and backward pass muted), except Muon's Newton–Schulz steps, in Muon's colour.
"""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from isolab.book import scaling
from isolab.book.explorable import Explorable, Promise, Slider, always, constant, nonincreasing
from isolab.book.figures import style

__all__ = ["NEWTON_ITERATIONS", "LAYERS", "WIDTH", "WORLDS", "PARTS", "ROWS", "WORLD", "PRECISIONS", "bill", "hero",
           "staleness_table", "staleness_differences", "staleness_figure", "subsample_table", "subsample_figure",
           "parts_of", "cost_bill", "EXPLORABLES"]

NEWTON_ITERATIONS = 15
#: The explorable's and the hero's model: a stack of LAYERS square layers of width WIDTH
#: (a GPT-2-small depth at a Llama-class width), over WORLDS processes.
LAYERS = 12
WIDTH = 4096
WORLDS = (1, 2, 3, 4, 6, 8, 12, 16, 24)


def _parts() -> dict:
    return {"forward + backward": style.ROLES["muted"], "statistics": style.ROLES["data"],
            "roots": style.ROLES["highlight"], "apply roots": style.ROLES["bound"],
            "Newton-Schulz": style.color("Muon")}


#: The colour of each part of a step.
PARTS = _parts()


def bill(n: int, b: int, k: int, world: int = 1, *, time_weighted: bool = False) -> dict:
    """One process's cost per step, part by part, over the forward+backward, for a stack of
    :data:`LAYERS` square ``n x n`` layers with ``b`` rows per process (``scaling.model_step``):
    Adam, Muon, and Iso with ``eigh`` or Newton roots refreshed every ``k``; roots and
    Newton–Schulz spread over ``world`` ranks; flops, or (``time_weighted``) H100 time."""
    return scaling.model_step(n, b, k, world, layers=LAYERS, time_weighted=time_weighted,
                              newton_iterations=NEWTON_ITERATIONS)


#: The time panels are a model (the H100 datasheet's peak rates), not a measurement: their
#: titles say so, and their totals carry two digits and a "≈".
MODEL_TITLE = "H100 time, modelled at datasheet peaks"


def _bars(ax, rows: dict, *, labels: bool = True, modelled: bool = False) -> float:
    """Stacked horizontal bars, one per optimizer, in one ``barh`` call (fast redraws);
    ``modelled`` totals are printed as estimates (``≈4.6x``)."""
    names = list(rows)[::-1]
    ys, widths, lefts, colours = [], [], [], []
    totals = np.zeros(len(names))
    for part, colour in PARTS.items():
        for y, name in enumerate(names):
            w = rows[name].get(part, 0.0)
            if w > 0:
                ys.append(y), widths.append(w), lefts.append(totals[y]), colours.append(colour)
                totals[y] += w
    from matplotlib.collections import PolyCollection   # one artist for every segment: fast redraws

    boxes = [[(x0, y - 0.3), (x0 + w, y - 0.3), (x0 + w, y + 0.3), (x0, y + 0.3)]
             for x0, w, y in zip(lefts, widths, ys)]
    ax.add_collection(PolyCollection(boxes, facecolors=colours, linewidths=0))
    for y, total in enumerate(totals):
        ax.text(total, y, f" ≈{total:.2g}x" if modelled else f" {total:.2f}x", va="center", fontsize=10)
    ax.set_xlim(0, totals.max() * 1.3)
    ax.set_ylim(-0.5, len(names) - 0.5)
    if labels:
        ax.set_yticks(range(len(names)), names)
    else:
        ax.set_yticks(range(len(names)), [""] * len(names))
    ax.locator_params(axis="x", nbins=4)
    return float(totals.max())


def _legend_handles():
    from matplotlib.patches import Patch

    return [Patch(color=colour, label=part) for part, colour in PARTS.items()]


def hero(n: int = 4096, b: int = 16384, k: int = 10, world: int = 8) -> Figure:
    """The chapter's thesis in one picture: the same step counted in flops and weighted by
    the precision each part runs in on an H100 (float32 statistics, roots and their
    application; bfloat16 forward, backward and Newton–Schulz)."""
    fig = Figure(figsize=(style.FIG_WIDTH, 3.6))
    axes = fig.subplots(1, 2)
    for ax, weighted, title in [(axes[0], False, "counted in flops"), (axes[1], True, MODEL_TITLE)]:
        _bars(ax, bill(n, b, k, world, time_weighted=weighted), labels=not weighted, modelled=weighted)
        ax.set(title=title, xlabel="per step / forward+backward")
    fig.suptitle(f"{LAYERS} layers {n}x{n}, {b} rows per process, refresh every {k}, {world} processes",
                 fontsize=11)
    fig.legend(handles=_legend_handles(), loc="lower center", ncol=5, handlelength=1.2,
               columnspacing=1.0, bbox_to_anchor=(0.5, 0.0))
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    return fig


def _interval(values) -> tuple[float, float, float]:
    """``(median, low, high)``: the median over seeds and its order-statistic interval
    (:func:`isolab.book.engine.intervals.median_interval`; 95.9 % coverage for 20 seeds)."""
    from isolab.book.engine.intervals import median_interval

    i = median_interval(np.asarray(values, dtype=np.float64))
    return i.median, i.low, i.high


def _coverage(n_seeds: int) -> str:
    from isolab.book.engine.intervals import order_ranks

    return f"{100 * order_ranks(n_seeds, 0.9)[1]:.3g} %"


def staleness_table(saved) -> str:
    """The staleness sweep as saved (``results/ch13_staleness.npz``): how each lane was tuned
    (two lines), its chosen learning rate and its held-out median with the order-statistic
    interval."""
    lanes, loss = list(saved["lanes"]), saved["heldout_loss"]
    n = loss.shape[1]
    lines = [f"`{saved['command']}`: {int(saved['budget'])} learning rates per lane in "
             f"[{saved['lr_range'][0]:g}, {saved['lr_range'][1]:g}],",
             f"each on tuning seeds {saved['tuning_seeds'].tolist()}; "
             + ("every choice inside the range" if saved["lr_interior"].all() else "a choice at an edge of the range"),
             f"lane               tuned lr   held-out loss, median [{_coverage(n)} interval] over {n} seeds"]
    for lane, lr, values in zip(lanes, saved["lr"], loss):
        med, lo, hi = _interval(values)
        lines.append(f"{lane:18s} {lr:8.2e}   {med:.4f} [{lo:.4f}, {hi:.4f}]")
    return "\n".join(lines)


def staleness_differences(lanes, loss) -> str:
    """The paired differences the section's claims rest on (median over the seeds of the
    per-seed difference, with its order-statistic interval)."""
    from isolab.book.engine.intervals import paired_difference

    row = dict(zip(list(lanes), loss))
    pairs = [("isoadam_1_1", "adam")] + [(f"isoadam_{k}_{k}", "isoadam_1_1") for k in (3, 10, 30, 100)] + [
        ("isoadam_3_3", "isoadam_10_10"), ("isoadam_100_100", "isoadam_10_10"),
        ("isoadam_1_10", "isoadam_10_10"), ("isoadam_1_100", "isoadam_100_100")]
    lines = [f"paired by seed: a - b, median [{_coverage(loss.shape[1])} interval]"]
    for a, b in pairs:
        d = paired_difference(row[a], row[b])
        lines.append(f"{a:16s} - {b:16s} {d.median:+.4f} [{d.low:+.4f}, {d.high:+.4f}]")
    return "\n".join(lines)


def subsample_table(saved) -> str:
    """Held-out loss for each number of rows in the statistics, and its paired difference
    from every row (``results/ch13_subsample.npz``)."""
    from isolab.book.engine.intervals import paired_difference

    rows, loss = [int(r) for r in saved["rows"]], saved["heldout_loss"]
    full = loss[rows.index(max(rows))]
    lines = [f"rows   held-out loss   minus every row, paired: median [{_coverage(loss.shape[1])} interval]"]
    for n, values in zip(rows, loss):
        d = paired_difference(values, full)
        lines.append(f"{n:4d}   {np.median(values):13.4f}   {d.median:+.4f} [{d.low:+.4f}, {d.high:+.4f}]")
    return "\n".join(lines)


def staleness_figure(saved) -> Figure:
    """IsoAdam's held-out loss against the refresh interval ``k`` (medians over the held-out
    seeds with their order-statistic intervals; each lane at its tuned learning rate), tuned Adam's
    band behind it, and the training time relative to Adam's; ``saved`` is
    ``results/ch13_staleness.npz`` (``scripts/ch13_staleness.py``)."""
    lanes, loss, secs = list(saved["lanes"]), saved["heldout_loss"], saved["seconds"]
    row = {lane: i for i, lane in enumerate(lanes)}
    fig = Figure(figsize=(style.FIG_WIDTH, 3.6))
    ax_loss, ax_time = fig.subplots(1, 2)
    families = [("statistics and roots every k (lean)", [(k, k) for k in (1, 3, 10, 30, 100)], "o-"),
                ("statistics every step, roots every k", [(1, 1), (1, 10), (1, 100)], "s--")]
    adam = _interval(loss[row["adam"]])
    for ax in (ax_loss,):
        ax.axhspan(adam[1], adam[2], color=style.color("Adam"), alpha=0.15, lw=0)
        ax.axhline(adam[0], **{**style.line("Adam", markers=False), "label": f"tuned Adam (band: {_coverage(loss.shape[1])} interval)"})
    for label, keys, fmt in families:              # both are IsoAdam: its colour, two line styles
        ks = np.array([key[1] for key in keys], dtype=float) * (1.0 if fmt == "o-" else 1.12)
        stats = np.array([_interval(loss[row[f"isoadam_{a}_{b}"]]) for a, b in keys])
        ax_loss.errorbar(ks, stats[:, 0], yerr=[stats[:, 0] - stats[:, 1], stats[:, 2] - stats[:, 0]], fmt=fmt,
                         color=style.color("IsoAdam"), capsize=3, label=label)
        ratio = np.array([np.median(secs[row[f"isoadam_{a}_{b}"]] / secs[row["adam"]]) for a, b in keys])
        ax_time.plot(ks, ratio, fmt, color=style.color("IsoAdam"), label=label)
    ax_time.axhline(1.0, **style.line("Adam", markers=False))
    n_seeds = loss.shape[1]
    ax_loss.set(xscale="log", xlabel="refresh interval k (steps)", ylabel="held-out loss after 300 steps",
                title=f"what staleness costs ({n_seeds} seeds)")
    ax_time.set(xscale="log", xlabel="refresh interval k (steps)", ylabel="training time / Adam's (this CPU)",
                title="what it saves (median over seeds)")
    for ax in (ax_loss, ax_time):   # the intervals tried, labelled once each (no crowded minor labels)
        ax.set_xticks([1, 3, 10, 30, 100], ["1", "3", "10", "30", "100"])
        ax.xaxis.set_minor_formatter(_null_formatter())
    ax_loss.legend(loc="upper left", fontsize=10)
    ax_loss.set_ylim(top=adam[2] + 0.6 * (adam[2] - ax_loss.get_ylim()[0]))
    fig.tight_layout()
    return fig


def _null_formatter():
    from matplotlib.ticker import NullFormatter

    return NullFormatter()


def subsample_figure(saved) -> Figure:
    """Held-out loss against the rows used for the statistics (medians and order-statistic
    intervals over the held-out seeds), and the step time of a wider network against those rows, from
    ``results/ch13_subsample.npz`` (``scripts/ch13_subsample.py``)."""
    fig = Figure(figsize=(style.FIG_WIDTH, 3.4))
    ax_loss, ax_time = fig.subplots(1, 2)
    rows = saved["rows"]
    stats = np.array([_interval(v) for v in saved["heldout_loss"]])
    ax_loss.errorbar(rows, stats[:, 0], yerr=[stats[:, 0] - stats[:, 1], stats[:, 2] - stats[:, 0]], fmt="o-",
                     color=style.color("IsoAdam"), capsize=3)
    ax_loss.set(xscale="log", xlabel=f"rows in the statistics (of {rows.max()})", ylabel="held-out loss after 300 steps",
                title="what fewer rows cost")
    ax_loss.set_xticks(sorted(int(r) for r in rows), [str(int(r)) for r in sorted(rows)])
    ax_loss.xaxis.set_minor_formatter(_null_formatter())
    configs, secs = list(saved["timing_configs"]), saved["step_seconds"]
    adam = np.median(secs[configs.index("adam")])
    iso = [c for c in configs if c != "adam"]
    n_rows = np.array([int(c.split("_")[1]) for c in iso])
    med = np.array([np.median(secs[configs.index(c)]) for c in iso]) / adam
    lo = np.array([np.quantile(secs[configs.index(c)], 0.25) for c in iso]) / adam
    hi = np.array([np.quantile(secs[configs.index(c)], 0.75) for c in iso]) / adam
    ax_time.errorbar(n_rows, med, yerr=[med - lo, hi - med], fmt="o-", color=style.color("IsoAdam"), capsize=3)
    ax_time.axhline(1.0, **style.line("Adam", markers=False))
    ax_time.set(xscale="log", ylim=(0, None), xlabel=f"rows in the statistics (of {n_rows.max()})",
                ylabel="step time / Adam's (this CPU)", title="what they save (quartiles)")
    ax_time.set_xticks(sorted(n_rows), [str(v) for v in sorted(n_rows)])
    ax_time.xaxis.set_minor_formatter(_null_formatter())
    fig.tight_layout()
    return fig


#: The centerpiece's rows per process (the main slider): 2^10 to 2^18, a factor 2 apart.
ROWS = tuple(2**e for e in range(10, 19))
#: The processes of the centerpiece's model (the hero's).
WORLD = 8
#: The precision of the statistics and of the application of the roots (a toggle).
PRECISIONS = {"float32": None, "TF32": {"statistics": "tf32", "apply": "tf32"}}
#: What each marker of the centerpiece shows: (optimizer row, part).
_ROWS = (("Muon", "Newton-Schulz"), ("Iso, eigh", "statistics"), ("Iso, eigh", "roots"),
         ("Iso, eigh", "apply roots"))


def parts_of(b: int, k: int, precision: str, weighted: bool) -> dict:
    """``{(optimizer, part): cost per step / forward+backward}`` for the centerpiece's stack
    (:data:`LAYERS` layers of width :data:`WIDTH`, :data:`WORLD` processes), and each
    optimizer's total under ``(optimizer, "total")``."""
    rows = scaling.model_step(WIDTH, b, k, WORLD, layers=LAYERS, time_weighted=weighted,
                              newton_iterations=NEWTON_ITERATIONS, precision=PRECISIONS[precision])
    out = {(o, p): rows[o].get(p, 0.0) for o, p in _ROWS}
    out.update({(o, "total"): sum(rows[o].values()) for o in ("Adam", "Muon", "Iso, eigh")})
    return out


def cost_bill() -> Explorable:
    """The centerpiece: one process's cost per step, part by part, on a log axis, counted in
    flops (left) and modelled at the H100's datasheet peaks (right), as the rows per process
    grow (main slider), for a refresh interval and a precision of the statistics and the
    application of the roots."""
    names = ["Adam", "Muon", "Iso, eigh"]
    lo, hi = 1e-3, 100.0

    def draw_bill(fig, b, k, precision):
        axes = fig.subplots(1, 2, sharey=True)
        for ax, weighted in zip(axes, (False, True)):
            values = parts_of(b, k, precision, weighted)
            for y, name in enumerate(names[::-1]):
                total = values[name, "total"]
                ax.plot([lo, total], [y, y], color=style.ROLES["muted"], lw=6, solid_capstyle="butt")
                ax.text(min(total, hi) * 1.15, y + 0.22, f"{'≈' if weighted else ''}{total:.2g}x",
                        fontsize=10, va="center")
                for o, part in _ROWS:
                    if o == name and values[o, part] > 0:
                        ax.plot([max(values[o, part], lo)], [y], "o", ms=9, color=PARTS[part],
                                markeredgecolor="white")
            ax.set(xscale="log", xlim=(lo, hi), ylim=(-1.9, len(names) - 0.4))
            ax.legend(handles=_legend_handles()[1:], loc="lower center", ncol=2, handlelength=1.0,
                      columnspacing=0.8, fontsize=10, frameon=False)
            ax.axvline(1.0, color=style.ROLES["bound"], lw=1, ls=":")
            ax.set_xlabel("modelled time / fwd+bwd" if weighted else "flops / fwd+bwd")
            ax.set_title("H100, modelled at datasheet peaks" if weighted else "counted in flops")
        axes[0].set_yticks(range(len(names)), names[::-1])
        fig.subplots_adjust(left=0.16, right=0.95, bottom=0.17, top=0.9, wspace=0.12)

    def part(name, which, weighted=True):
        return lambda b, k, precision: parts_of(b, k, precision, weighted)[name, which]

    return Explorable(
        draw_bill,
        [Slider("b", ROWS, label="rows per process b", default=16384, fmt="{:d}"),
         Slider("k", [1, 10, 100], label="refresh every k steps", default=10),
         Slider("precision", list(PRECISIONS), label="statistics and roots applied in", default="float32",
                fmt="{}")],
        main="b",
        figsize=(style.FIG_WIDTH, 3.8),
        static_colors=16,
        narrow="panels",
        caption=(f"One process's cost per step for {LAYERS} square layers of width {WIDTH} on {WORLD} processes, "
                 "part by part (markers) and in total (grey bars), relative to its forward and backward pass: "
                 "counted in flops (left) and as H100 time modelled at the datasheet's peak rates (right, not a "
                 "measurement). Move the rows per process b: Iso's statistics stay put, the roots fall as b "
                 "grows, the application of the roots falls as b grows, and Iso's modelled total never rises."),
        promises=[Promise("Iso's statistics stay put", part("Iso, eigh", "statistics"), constant(rtol=1e-12)),
                  Promise("the roots fall as b grows", part("Iso, eigh", "roots"), nonincreasing()),
                  Promise("the application of the roots falls as b grows", part("Iso, eigh", "apply roots"),
                          always(lambda v: v > 0, "positive")),
                  Promise("Iso's modelled total never rises", part("Iso, eigh", "total"), nonincreasing())],
    )


EXPLORABLES = (cost_bill,)
