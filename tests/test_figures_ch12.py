"""Chapter 12's training figure: rows ordered by the median, every optimizer drawn in its look."""

import math

import numpy as np
import pytest
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


def test_hero_marks_the_exponents_that_are_optimizers_and_zeros_where_promised():
    fig = ch12.hero()
    ax = fig.axes[0]
    size, effect = (np.asarray(line.get_ydata()) for line in ax.get_lines()[:2])
    p = np.asarray(ax.get_lines()[0].get_xdata())
    assert size[np.isclose(p, 0.5)][0] < 1e-9 and effect[np.isclose(p, 1.0)][0] < 1e-9
    assert size.min() == size[np.isclose(p, 0.5)][0] and size[0] > 0.5 and effect[0] > 0.5
    labels = {t.get_text() for t in ax.texts}
    assert {"SGD", "Shampoo", "Iso", "K-FAC"} <= labels
    assert "κ = 100" in " ".join(ax.get_title(loc=loc) for loc in ("left", "center", "right"))  # the style may move titles


def test_cost_draws_one_bar_per_layer_and_method_and_the_measured_points():
    percent = {"a": {"Adam": 0.01, "Muon": 125.0, "Iso": 90.0}, "b": {"Adam": 0.001, "Muon": 0.5, "Iso": 140.0}}
    fig = ch12.cost(percent, {"Muon": 2.5})
    ax = fig.axes[0]
    widths = sorted(round(p.get_width(), 3) for p in ax.patches)
    assert widths == sorted([0.01, 125.0, 90.0, 0.001, 0.5, 140.0])
    assert [t.get_text() for t in ax.get_yticklabels()] == ["Adam", "Muon", "Iso"]
    assert ax.get_xscale() == "log"
    measured = [line for line in ax.get_lines() if line.get_marker() == "D"]
    assert len(measured) == 1 and list(measured[0].get_xdata()) == [2.5]
    with pytest.raises(ValueError, match="at least one layer"):
        ch12.cost({})


def test_exponent_family_keeps_its_caption_promises_and_readable_text():
    """What tests/test_captions.py checks for Parts I and II, here for Chapter 12's explorable."""
    from matplotlib.text import Text

    from isolab.book.explorable import MIN_MAIN_VALUES

    assert ch12.EXPLORABLES == (ch12.exponent_family,)
    explorable = ch12.exponent_family()
    assert len(explorable.main_slider.values) >= MIN_MAIN_VALUES and explorable.promises
    assert not explorable.broken_promises()
    fig = explorable.render(strict=True)
    small = [t.get_text() for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip() and t.get_fontsize() < 10]
    assert not small, small
    with pytest.raises(ValueError, match="both X and G"):
        ch12.exponent_family(X=ch12.chapter_batch()[0])


def test_hero_and_cost_have_no_text_under_ten_points():
    from matplotlib.text import Text

    for fig in (ch12.hero(), ch12.cost({"a": {"Muon": 1.0, "SOAP": 2.0}}, {"SOAP": 117.0})):
        fig.canvas.draw()
        small = [t.get_text() for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip() and t.get_fontsize() < 10]
        assert not small, small
