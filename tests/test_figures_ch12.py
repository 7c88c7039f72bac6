"""Chapter 12's training figure: rows ordered by the median, every optimizer drawn in its look."""

import math

import numpy as np
from matplotlib.figure import Figure

from isolab.book.figures import ch12, style


def test_family_training_orders_rows_by_median_and_survives_divergence():
    rng = np.random.default_rng(0)
    curves = {"Adam": np.exp(-rng.random((5, 1)) * np.arange(31)), "Shampoo": np.full((5, 31), 2.0),
              "Shampoo, grafted": np.exp(-2 * np.arange(31) / 30)[None].repeat(5, 0)}
    curves["Shampoo"][0, 10:] = math.inf  # a diverged seed
    intervals = {"Adam": (0.01, 0.005, 0.02), "Shampoo": (2.0, 2.0, math.inf), "Shampoo, grafted": (0.14, 0.14, 0.14)}
    fig = ch12.family_training(curves, intervals)
    assert isinstance(fig, Figure) and len(fig.axes) == 2
    labels = [t.get_text() for t in fig.axes[1].get_yticklabels()]
    assert labels == ["Adam", "Shampoo, grafted", "Shampoo"]
    colours = {line.get_label(): line.get_color() for line in fig.axes[0].get_lines()}
    assert colours["Adam"] == style.color("Adam") and colours["Shampoo, grafted"] == style.color("Shampoo")
    fig.canvas.draw()  # infinite values are clipped, not an error
