"""isolab.book.plotting: plain-text log ticks."""

import pytest
from matplotlib.figure import Figure

from isolab.book.plotting import log_ticks, power_of_ten


@pytest.mark.parametrize("e, text", [(-3, "10⁻³"), (0, "1"), (1, "10"), (2, "10²"), (-12, "10⁻¹²")])
def test_power_of_ten(e, text):
    assert power_of_ten(e) == text


def test_power_of_ten_rejects_non_integers():
    with pytest.raises(ValueError, match="integer"):
        power_of_ten(0.5)


def test_log_ticks_are_plain_text_at_the_given_decades_without_minor_ticks():
    ax = Figure().add_subplot()
    ax.set_xscale("log")
    ax.set_xlim(1e-4, 10)
    log_ticks(ax.xaxis, [-3, -1, 1])
    assert list(ax.get_xticks()) == [1e-3, 1e-1, 10.0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["10⁻³", "10⁻¹", "10"]
    assert len(ax.xaxis.get_minorticklocs()) == 0
