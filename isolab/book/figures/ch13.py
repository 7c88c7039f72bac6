r"""Figures of Chapter 13 (scaling up: what Iso costs).

- :func:`staleness_figure`: held-out loss and training time against the refresh
  interval of the statistics and roots (the runs of section 13.4).
- :func:`bill`: the cost model of one square layer, per optimizer, in units of the
  layer's forward and backward pass (the computation the explorable draws).
- :func:`cost_bill`: the explorable over the width, the rows per step, the refresh
  interval and the number of processes.

The parts of a step are not optimizers: they take the colours of :data:`style.ROLES`
(the forward and backward pass muted), except Muon's Newton–Schulz steps, in Muon's colour.
"""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from isolab.book import scaling
from isolab.book.explorable import Explorable, Slider
from isolab.book.figures import style

__all__ = ["NEWTON_ITERATIONS", "PARTS", "bill", "staleness_figure", "cost_bill", "EXPLORABLES"]

NEWTON_ITERATIONS = 15


def _parts() -> dict:
    return {"forward + backward": style.ROLES["muted"], "statistics": style.ROLES["data"],
            "roots": style.ROLES["highlight"], "apply roots": style.ROLES["bound"],
            "Newton-Schulz": style.color("Muon")}


#: The colour of each part of a step.
PARTS = _parts()


def bill(n: int, b: int, k: int) -> dict:
    """Flops per step over the forward+backward of one ``n x n`` layer with ``b`` rows,
    part by part, for Adam, Muon, and Iso with ``eigh`` or Newton roots refreshed every ``k``."""
    eigh = scaling.iso_step_flops(n, n, b, k, k)
    newton = scaling.iso_step_flops(n, n, b, k, k, root_method="newton", newton_iterations=NEWTON_ITERATIONS)
    fb = eigh["forward_backward"]

    def parts(r):
        return {"forward + backward": 1.0, "statistics": r["statistics"] / fb,
                "roots": r["roots"] / fb, "apply roots": r["apply"] / fb}

    return {"Adam": {"forward + backward": 1.0},
            "Muon": {"forward + backward": 1.0, "Newton-Schulz": scaling.muon_flops(n, n) / fb},
            "Iso, eigh": parts(eigh),
            f"Iso, Newton ({NEWTON_ITERATIONS} it.)": parts(newton)}


def staleness_figure(runs: dict, adam: dict) -> Figure:
    """IsoAdam's held-out loss and training time (relative to Adam) against the refresh
    interval ``k``; ``runs`` maps ``(statistics interval, roots interval)`` to ``scaling.train_mlp``
    results."""
    fig = Figure(figsize=(style.FIG_WIDTH, 3.6))
    ax_loss, ax_time = fig.subplots(1, 2)
    schedules = [("statistics and roots every k (lean)", [(k, k) for k in (1, 3, 10, 30, 100)], "o-"),
                 ("statistics every step, roots every k", [(1, 1), (1, 10), (1, 100)], "s--")]
    for label, keys, fmt in schedules:              # both are IsoAdam: its colour, two line styles
        ks = [key[1] for key in keys]
        ax_loss.plot(ks, [runs[key]["eval_loss"] for key in keys], fmt, color=style.color("IsoAdam"), label=label)
        ax_time.plot(ks, [runs[key]["seconds"] / adam["seconds"] for key in keys], fmt, color=style.color("IsoAdam"),
                     label=label)
    ax_loss.axhline(adam["eval_loss"], **style.line("Adam", markers=False))
    ax_time.axhline(1.0, **style.line("Adam", markers=False))
    ax_loss.set(xscale="log", xlabel="refresh interval k (steps)", ylabel="held-out loss after 300 steps",
                title="what staleness costs")
    ax_time.set(xscale="log", xlabel="refresh interval k (steps)", ylabel="training time / Adam's (this CPU)",
                title="what it saves")
    ax_loss.legend()
    fig.tight_layout()
    return fig


def cost_bill(measured_statistics: dict | None = None) -> Explorable:
    """The cost model of one square layer as an explorable; ``measured_statistics`` maps
    ``(n, b)`` to the statistics/forward+backward time ratio measured on this CPU (printed
    under the bars where there is one)."""
    measured = measured_statistics or {}
    note_colour = style.ROLES["bound"]

    def draw_bill(fig, n, b, k, world):
        fig.subplots_adjust(left=0.19, right=0.98, bottom=0.35, top=0.9, wspace=0.35)
        ax, ax_comm = fig.subplots(1, 2, gridspec_kw={"width_ratios": [2.6, 1]})
        rows = bill(n, b, k)
        names = list(rows)[::-1]
        left = np.zeros(len(names))
        for part, colour in PARTS.items():           # one call per part: all rows' segments of that part
            widths = np.array([rows[name].get(part, 0.0) for name in names])
            ax.barh(range(len(names)), widths, left=left, color=colour, height=0.6, label=part)
            left += widths
        for y, total in enumerate(left):
            ax.text(total, y, f" {total:.2f}x", va="center", fontsize=10)
        total_max = max(sum(r.values()) for r in rows.values())
        ax.set(xlim=(0, total_max * 1.2), yticks=range(len(names)), yticklabels=names,
               xlabel="flops per step / forward+backward of the layer",
               title=f"one {n}x{n} layer, b = {b}, refresh every {k}")
        ax.locator_params(axis="x", nbins=5)
        fig.legend(*ax.get_legend_handles_labels(), loc="lower left", bbox_to_anchor=(0.0, 0.08), ncol=5,
                   handlelength=1.2, columnspacing=1.2)
        upper = scaling.layer_flops(n, n, b, gram_block=scaling.GRAM_BLOCK)
        note = (f"measured on this CPU (13.2): statistics {measured[n, b]:.2f}x fwd+bwd; counted "
                f"{upper['statistics'] / upper['forward_backward']:.2f} (the CPU's upper-triangle blocks), 0.67 (one product)"
                if (n, b) in measured else "no CPU measurement at this width and batch (model only)")
        fig.text(0.01, 0.02, note, fontsize=10, color=note_colour)

        if world == 1:
            ax_comm.text(0.5, 0.5, "one process:\nnothing to\ncommunicate", ha="center", va="center",
                         fontsize=10, color=note_colour, transform=ax_comm.transAxes)
            ax_comm.set(xticks=[], yticks=[], title="traffic, W = 1")
            return
        per = scaling.iso_step_flops(n, n, b, k, k, world_size=world)
        grad = per["gradient_elements"]
        bars = {"Adam / Muon": [1.0, 0.0, 0.0],
                "Iso, synced": [1.0, per["statistics_elements"] / grad, per["roots_elements"] / grad]}
        for x, (name, (g, s, r)) in enumerate(bars.items()):
            ax_comm.bar(x, g, color=PARTS["forward + backward"], width=0.6, label="gradients" if x == 0 else None)
            ax_comm.bar(x, s, bottom=g, color=PARTS["statistics"], width=0.6, label="statistics" if x == 1 else None)
            ax_comm.bar(x, r, bottom=g + s, color=PARTS["roots"], width=0.6, label="roots" if x == 1 else None)
            ax_comm.text(x, g + s + r, f"{g + s + r:.2f}x", ha="center", va="bottom", fontsize=10)
        ax_comm.set(xticks=[0, 1], xticklabels=["Adam,\nMuon", "Iso,\nsynced"], ylim=(0, 3.9), yticks=[0, 1, 2, 3],
                    ylabel="sent / gradient size", title=f"traffic, W = {world}")
        ax_comm.legend(loc="upper left", handlelength=1.2)

    return Explorable(
        draw_bill,
        [Slider("n", [1024, 4096], label="width n", default=1024),
         Slider("b", [256, 1024, 4096, 16384], label="rows per step b", default=1024),
         Slider("k", [1, 10, 100], label="refresh every k steps", default=10),
         Slider("world", [1, 8], label="processes W", default=8)],
        main="b",
        figsize=(style.FIG_WIDTH, 4.0),
        static_colors=32,
        caption="Cost model of one square layer: flops per step relative to forward+backward, and communication per step.",
    )


EXPLORABLES = (cost_bill,)
