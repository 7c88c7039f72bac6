r"""Small helpers that keep the book's figures fast to redraw.

A slider move redraws a whole figure, and most of that time goes into text: on a log
axis Matplotlib labels every decade with mathtext (``$\mathdefault{10^{-3}}$``), which
it parses anew for every new figure, and it adds a dozen minor ticks per decade, each
an object with two lines and two labels. :func:`log_ticks` labels chosen decades in
plain text with Unicode superscripts (``10⁻³``), which look the same and cost a
fraction of the time, and removes the minor ticks.
"""

from __future__ import annotations

from typing import Iterable

from matplotlib.ticker import NullLocator

__all__ = ["power_of_ten", "log_ticks"]

_SUPERSCRIPTS = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def power_of_ten(exponent: int) -> str:
    """``"10⁻³"`` for ``-3``; ``"1"`` and ``"10"`` for 0 and 1, as a reader writes them."""
    if isinstance(exponent, bool) or int(exponent) != exponent:
        raise ValueError(f"exponent must be an integer, got {exponent!r}")
    exponent = int(exponent)
    if exponent == 0:
        return "1"
    if exponent == 1:
        return "10"
    return "10" + str(exponent).translate(_SUPERSCRIPTS)


def log_ticks(axis, exponents: Iterable[int]) -> None:
    """Put major ticks of a log-scaled ``axis`` (``ax.xaxis`` or ``ax.yaxis``) at
    ``10**e`` for each exponent, labelled in plain text, and no minor ticks."""
    exponents = list(exponents)
    axis.set_ticks([10.0**e for e in exponents], [power_of_ten(e) for e in exponents])
    axis.set_minor_locator(NullLocator())
