"""Chapter 11's figures for the protocol-3 runs: the hero, and the centerpiece (the race in
seconds), whose promise holds over its grid and whose text is never clipped."""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.figure import Figure

from isolab.book import lm_results as R
from isolab.book.explorable import MIN_MAIN_VALUES
from isolab.book.figures import ch11


@pytest.fixture(scope="module")
def datas():
    out = {b: d for b in (100, 300, 900) if (d := R.load_v3(b)) is not None}
    if 100 not in out or 300 not in out:
        pytest.skip("results/transformer_v3_b100.json and _b300.json not present")
    return out


def test_the_hero_draws_every_budget_with_both_sets(datas):
    fig = ch11.v3_figure({b: d for b, d in datas.items() if "isoadam2" in d["tuned"]})
    assert isinstance(fig, Figure)
    fig.canvas.draw()


def test_the_centerpiece_keeps_its_promise_and_its_text(datas):
    e = ch11.seconds_race(datas)
    assert e.main == "r" and len(e.main_slider.values) >= MIN_MAIN_VALUES
    assert not e.broken_promises() and not e.clipped_text_over_grid()


def test_the_time_gap_is_what_the_promise_measures(datas):
    """At r = 1 IsoAdam's 100 steps meet Adam's 100 steps: the gap is the per-step one."""
    per_step = np.concatenate([R.v3_losses(datas[100], w)["isoadam2"] - R.v3_losses(datas[100], w)["adam2"]
                               for w in R.SETS])
    curve = {b: R.v3_losses(d, "heldout")["adam2"] for b, d in datas.items() if "adam2" in d["heldout"]}
    np.testing.assert_allclose(R.adam_at(curve, 100), R.v3_losses(datas[100], "heldout")["adam2"])
    assert np.median(per_step) < 0
