r"""Figures of Chapter 11 (a small Transformer: Adam, IsoAdam and Muon).

- :func:`loss_curves`: validation and smoothed training losses against steps and against
  wall-clock, for the chapter's small run or the full-size run of
  ``scripts/train_transformer.py``.
- :func:`curves`: the explorable that replays both runs and plots the speedup over Adam
  at every loss level.

The losses are drawn by :func:`isolab.book.lm.plot_curves`, in each optimizer's book-wide look.
"""

from __future__ import annotations

from matplotlib.figure import Figure

from isolab.book import lm
from isolab.book.explorable import Explorable, FigureMessage, Slider
from isolab.book.figures import style

__all__ = ["loss_curves", "curves", "EXPLORABLES"]


def loss_curves(runs: dict, *, window: int, titles=("against steps", "against training wall-clock (this machine)"),
                yardstick: float | None = None, ylim=None) -> Figure:
    """Loss against steps (left) and training seconds (right) for every run in ``runs``
    (``lm.train`` results), the training loss averaged over ``window`` steps; a dotted
    line at ``yardstick`` (e.g. the byte-frequency entropy) if given."""
    fig = Figure(figsize=(style.FIG_WIDTH, 3.8))
    axes = fig.subplots(1, 2, sharey=True)
    for ax, axis, title in zip(axes, ["step", "wall"], titles):
        lm.plot_curves(ax, runs, x=axis, window=window)
        if yardstick is not None:
            ax.axhline(yardstick, color=style.ROLES["bound"], ls=":", lw=1.5, label="byte frequencies only")
        if ylim is not None:
            ax.set_ylim(*ylim)
        ax.set_title(title)
    axes[1].set_ylabel("")
    axes[0].legend()
    fig.tight_layout()
    return fig


def curves(runs: dict, full: dict | None) -> Explorable:
    """The chapter's small run (``runs``) and, if present, the full-size results file
    (``full``, as read by :func:`isolab.book.lm.load_results`), with the speedup over Adam."""

    def draw(fig, run, axis, window):
        chosen = runs if run == "chapter (d=64, L=2)" else (full["runs"] if full is not None else None)
        if chosen is None:
            raise FigureMessage("results/transformer_full.json is missing: run scripts/train_transformer.py")
        fig.subplots_adjust(left=0.08, right=0.98, bottom=0.16, top=0.9, wspace=0.28)
        ax1, ax2 = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
        lm.plot_curves(ax1, chosen, x=axis, window=window)
        ax1.set_ylim(min(r["val_loss"][-1] for r in chosen.values()) - 0.15, 4.0)
        ax1.set_title(f"training loss over {window} steps", fontsize=style.FONT_SIZE)
        ax1.legend()
        for name in ("isoadam", "muon"):
            targets, ratio = lm.speedup_curve(chosen, name, x=axis)
            ax2.plot(targets, ratio, **style.line(lm.LABELS[name], markersize=4))
        ax2.axhline(1.0, **style.line("Adam", markers=False))
        ax2.invert_xaxis()
        ax2.set_xlabel("validation loss reached (nats per byte)")
        ax2.set_ylabel("speedup over Adam in " + ("steps" if axis == "step" else "seconds"))
        ax2.set_title("how much sooner each loss is reached", fontsize=style.FONT_SIZE)
        ax2.legend()
        for ax in (ax1, ax2):
            ax.locator_params(nbins=5)

    return Explorable(draw, [
        Slider("run", ["chapter (d=64, L=2)", "full size (script)"], default="chapter (d=64, L=2)"),
        Slider("axis", ["step", "wall"], default="step", label="x-axis"),
        Slider("window", [1, 5, 20, 50], default=20, label="smoothing (steps)"),
    ], main="axis", figsize=(style.FIG_WIDTH, 3.8),
        caption="Validation and smoothed training loss, and the speedup over Adam at each loss level.")


EXPLORABLES = ()  # the builder needs the chapter's training runs
