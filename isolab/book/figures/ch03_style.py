"""How Chapter 3 names and draws the normalization methods (shared by its figure modules)."""

from __future__ import annotations

import matplotlib

from isolab.book.figures import style

DATA, TARGET, BOUND, HIGHLIGHT, MUTED = (style.ROLES[k] for k in ("data", "target", "bound", "highlight", "muted"))
SMALL = style.FONT_SIZE - 1   # the smallest text in these figures (10 pt)
_CYCLE = style.rc()["axes.prop_cycle"].by_key()["color"]   # the book's colour-blind-safe cycle
PAPER = matplotlib.rcParams["figure.facecolor"]              # the page: gaps between bars, text on dark cells

#: How each normalization is named and drawn in this chapter (colour, marker, line style).
METHOD_LABELS = {"none": "none", "batch": "BatchNorm", "layer": "LayerNorm", "rms": "RMSNorm", "zca": "ZCA", "pca": "PCA"}
SHORT_LABELS = {"none": "none", "batch": "BN", "layer": "LN", "rms": "RMS", "zca": "ZCA", "pca": "PCA"}
_METHOD_LOOK = {
    "none": (BOUND, "o", ":"),
    "batch": (_CYCLE[0], "s", "-"),
    "layer": (_CYCLE[2], "^", "-."),
    "rms": (_CYCLE[4], "v", "--"),
    "zca": (_CYCLE[1], "o", "-"),
    "pca": (_CYCLE[5], "D", "--"),
}


def method_color(method: str) -> str:
    return _METHOD_LOOK[method][0]


def method_line(method: str, *, markers: bool = True, **overrides) -> dict:
    """``ax.plot`` keyword arguments for a normalization method (see ``METHOD_LABELS``)."""
    color, marker, ls = _METHOD_LOOK[method]
    kwargs = dict(color=color, linestyle=ls, label=METHOD_LABELS[method])
    if markers:
        kwargs.update(marker=marker, markersize=6)
    kwargs.update(overrides)
    return kwargs
