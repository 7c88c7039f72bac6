r"""One figure style for the whole book.

Every chapter calls :func:`use` once; every figure then has the same fonts, line widths
and colours. Optimizers are always drawn the same way, so a reader who has learnt that
Iso is the green solid line with circles never has to read a legend again::

    from isolab.book.figures import style
    style.use()
    ax.plot(steps, loss, **style.line("Iso"))          # colour, marker, line style, label
    style.label_end(ax, steps, loss, "Iso")             # the name at the curve's end

Colours come from Paul Tol's *muted* qualitative scheme (nine colours designed to stay
distinguishable for the common forms of colour-vision deficiency), SGD, the baseline, near
black. Each optimizer also has its own marker and line style, so that the curves can
be told apart in greyscale too; ``tests/book/test_figure_style.py`` checks both, the colours
through a simulation of protan, deutan and tritan vision (Machado et al., 2009).

Sizes are chosen for the page. A plain figure is drawn at :data:`FIGURE_DPI` (twice that
in pixels, for high-density screens) and shown at most the column's width. An explorable
is drawn at most the column's width (:data:`COLUMN_WIDTH` inches, at
:data:`~isolab.book.explorable.DISPLAY_DPI` CSS pixels per inch), so that its text is
shown at its size in points: 10 pt, the smallest the book uses, at 12.5 CSS pixels.
Ordered quantities (a condition number, a batch size) use :func:`sequence`, a
colour-blind-safe sequential map, rather than optimizer colours.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import matplotlib
import numpy as np

from isolab.book.explorable import COLUMN_PX, DISPLAY_DPI

__all__ = [
    "Look", "OPTIMIZERS", "ROLES", "look", "line", "color", "sequence", "text_color", "contrast", "use", "rc",
    "colorbar", "label_end", "spread_labels", "FIG_WIDTH", "COLUMN_WIDTH", "DISPLAY_DPI", "FIGURE_DPI", "FONT_SIZE",
]

#: Width of a full-width plain figure in inches.
FIG_WIDTH = 9.0
#: Width in inches of an explorable that fills the column with its text at its size in
#: points (an explorable asked for more is drawn at this width; isolab.book.explorable).
COLUMN_WIDTH = math.floor(100 * COLUMN_PX / DISPLAY_DPI) / 100
#: Resolution of plain figures in a notebook and on the page, in CSS pixels per inch
#: (their PNGs have twice the pixels).
FIGURE_DPI = 80
#: Base font size in points at the size the figure is shown (tick labels are 1 pt smaller).
FONT_SIZE = 11


@dataclass(frozen=True)
class Look:
    """How one optimizer is drawn everywhere in the book."""

    name: str
    color: str
    marker: str
    linestyle: str


#: One look per optimizer (Tol's muted scheme; SGD, the baseline, near black).
OPTIMIZERS: dict[str, Look] = {
    look.name: look
    for look in (
        Look("SGD", "#222222", "o", ":"),
        Look("SignSGD", "#999933", "v", "-."),
        Look("Adam", "#CC6677", "s", "--"),
        Look("Muon", "#332288", "^", "-"),
        Look("Shampoo", "#44AA99", "D", "--"),
        Look("SOAP", "#88CCEE", "P", "-."),
        Look("K-FAC", "#DDCC77", "X", ":"),
        Look("Iso", "#117733", "o", "-"),
        Look("IsoAdam", "#882255", "*", "-"),
    )
}

#: Colours for things that are not optimizers, by role.
ROLES: dict[str, str] = {
    "data": "#4477AA",        # samples, input clouds
    "target": "#000000",      # the steepest / ideal direction
    "bound": "#767676",       # a theoretical bound or reference line (the lightest grey text at 4.5:1)
    "highlight": "#EE7733",   # the one point the caption is about
    "muted": "#BBBBBB",       # context drawn behind the message
    "ink": "#000000",         # annotations: arrows, labels, outlines
    "background": "#FFFFFF",  # the page: open markers, halos behind text
}

_ALIASES = {name.lower().replace("-", "").replace(" ", ""): name for name in OPTIMIZERS}
_ALIASES.update({"signum": "SignSGD", "kfac": "K-FAC", "isoadam": "IsoAdam", "sign": "SignSGD"})


def look(optimizer: str) -> Look:
    """The :class:`Look` of an optimizer, by name (case and hyphens do not matter:
    ``"isoadam"``, ``"IsoAdam"`` and ``"K-FAC"``/``"kfac"`` all work)."""
    key = str(optimizer).lower().replace("-", "").replace(" ", "").replace("_", "")
    if key not in _ALIASES:
        raise KeyError(f"no figure style for optimizer {optimizer!r}; known: {', '.join(OPTIMIZERS)}")
    return OPTIMIZERS[_ALIASES[key]]


def color(optimizer: str) -> str:
    """The optimizer's colour (hex)."""
    return look(optimizer).color


def line(optimizer: str, *, label: str | None = None, markers: bool = True, **overrides) -> dict:
    """Keyword arguments for ``ax.plot`` that draw ``optimizer`` in its book-wide look.

    ``label`` defaults to the optimizer's name; ``markers=False`` leaves the markers out
    (for dense curves); any other keyword overrides the style."""
    spec = look(optimizer)
    kwargs = dict(color=spec.color, linestyle=spec.linestyle, label=spec.name if label is None else label)
    if markers:
        kwargs.update(marker=spec.marker, markersize=6, markevery=overrides.pop("markevery", None))
    kwargs.update(overrides)
    return kwargs


def sequence(n: int, *, start: float = 0.15, stop: float = 0.85) -> list[tuple[float, float, float, float]]:
    """``n`` colours from the *cividis* map (designed for colour-vision deficiency) for an
    ordered quantity such as κ or b: light to dark as the quantity grows."""
    if n < 1:
        raise ValueError(f"sequence needs n >= 1, got {n}")
    cmap = matplotlib.colormaps["cividis"]
    return [cmap(x) for x in (np.linspace(stop, start, n) if n > 1 else [0.5 * (start + stop)])]


def _luminance(rgb) -> float:
    """WCAG relative luminance of an sRGB colour."""
    c = np.asarray(rgb[:3], dtype=float)
    c = np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    return float(c @ [0.2126, 0.7152, 0.0722])


def contrast(a, b) -> float:
    """WCAG contrast ratio of two colours (1 to 21; body text needs 4.5)."""
    la, lb = sorted((_luminance(matplotlib.colors.to_rgb(a)), _luminance(matplotlib.colors.to_rgb(b))))
    return (lb + 0.05) / (la + 0.05)


def text_color(color, *, minimum: float = 4.5):
    """``color`` darkened (mixed with black, so the hue stays) just enough for text in it
    to reach a contrast of ``minimum`` against the page: a light end of :func:`sequence`
    can colour a line, but a label in it would be unreadable. A colour that already reaches
    ``minimum`` is returned as it was passed."""
    page = ROLES["background"]
    if contrast(color, page) >= minimum:
        return color
    rgb = np.asarray(matplotlib.colors.to_rgb(color))
    for k in np.linspace(1.0, 0.0, 101):
        if contrast(rgb * k, page) >= minimum:
            return tuple(float(v) for v in rgb * k)
    return (0.0, 0.0, 0.0)


def rc() -> dict:
    """The book's Matplotlib settings (see :func:`use`)."""
    return {
        "font.size": FONT_SIZE,
        "axes.titlesize": FONT_SIZE + 1,
        "axes.labelsize": FONT_SIZE,
        "xtick.labelsize": FONT_SIZE - 1,
        "ytick.labelsize": FONT_SIZE - 1,
        "legend.fontsize": FONT_SIZE - 1,
        "legend.frameon": False,
        "figure.titlesize": FONT_SIZE + 2,
        "lines.linewidth": 2.0,
        "lines.markersize": 6,
        "axes.linewidth": 1.0,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.titlelocation": "left",
        "axes.titlepad": 8,
        "axes.prop_cycle": matplotlib.cycler(color=[ROLES["data"], "#EE7733", "#009988", "#CC3311", "#33BBEE", "#EE3377"]),
        "image.cmap": "cividis",
        "figure.figsize": (FIG_WIDTH, 3.6),
        "figure.dpi": FIGURE_DPI,
        "savefig.dpi": 2 * FIGURE_DPI,
        "axes.grid": False,
        "mathtext.fontset": "dejavusans",
        # FreeType's autohinter, Matplotlib's default before 3.11: 3.11's native hinting
        # makes text layout (most of a slider redraw) about 1.6x slower here.
        "text.hinting": "force_autohint",
    }


def use() -> None:
    """Apply the book's style to Matplotlib (every chapter's setup cell calls this).

    In a notebook it also asks for figures at twice their display resolution
    (``retina``), so that text stays crisp on high-density screens."""
    matplotlib.rcParams.update(rc())
    try:
        from IPython import get_ipython

        if get_ipython() is not None:
            from matplotlib_inline.backend_inline import set_matplotlib_formats

            set_matplotlib_formats("retina")
    except ImportError:  # plain Python: nothing to configure
        pass


def colorbar(fig, mappable, ax, label: str, **kwargs):
    """A labelled colorbar beside ``ax`` (every heatmap in the book has one)."""
    bar = fig.colorbar(mappable, ax=ax, fraction=kwargs.pop("fraction", 0.046), pad=kwargs.pop("pad", 0.04), **kwargs)
    bar.set_label(label)
    bar.outline.set_linewidth(0.5)
    return bar


def spread_labels(values, min_gap: float, upper: float = math.inf):
    """Vertical positions (same units as ``values``) at least ``min_gap`` apart, each as
    close to its value as the ordering allows (for direct labels that must not overlap)."""
    order = np.argsort(values)
    pos = np.asarray(values, dtype=float)[order].copy()
    for i in range(1, len(pos)):
        pos[i] = max(pos[i], pos[i - 1] + min_gap)
    shift = (pos - np.asarray(values, dtype=float)[order]).mean()  # centre the block on the curves
    pos -= shift / 2
    for i in range(1, len(pos)):
        pos[i] = max(pos[i], pos[i - 1] + min_gap)
    if len(pos) and pos[-1] > upper:  # keep the block below the top of the axes
        pos[-1] = upper
        for i in range(len(pos) - 2, -1, -1):
            pos[i] = min(pos[i], pos[i + 1] - min_gap)
    out = np.empty_like(pos)
    out[order] = pos
    return out


def label_end(ax, x: Sequence[float], y: Sequence[float], text: str, *, color: str | None = None,
              optimizer: str | None = None, dx: float = 4, dy: float = 0, **kwargs):
    """Write ``text`` just right of the curve's last finite point, in the curve's colour
    (darkened where needed to stay readable, :func:`text_color`): a direct label instead of
    a legend. ``optimizer`` picks its colour."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    finite = np.isfinite(x) & np.isfinite(y)
    if not finite.any():
        return None
    i = np.flatnonzero(finite)[-1]
    if color is None:
        color = look(optimizer).color if optimizer else "black"
    return ax.annotate(text, (x[i], y[i]), xytext=(dx, dy), textcoords="offset points", color=text_color(color),
                       va="center", ha="left", fontsize=kwargs.pop("fontsize", FONT_SIZE - 1), **kwargs)
