"""Chapter 1's figures (isolab.book.figures.ch01): they draw, they show what their captions say,
and the explorable's caption promises hold over its grid (and fail where they should)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

from isolab.book import feature_step
from isolab.book.explorable import COLUMN_PX, DISPLAY_DPI, smallest_text
from isolab.book.figures import ch01


@pytest.fixture(autouse=True)
def fresh_cache():
    """The explorable caches its computation per setting; no test sees another's."""
    ch01.ratio_alignment_state.cache_clear()
    yield
    ch01.ratio_alignment_state.cache_clear()


def test_hero_draws_and_its_numbers_are_the_cosines():
    fig = ch01.hero()
    assert isinstance(fig, Figure) and len(fig.axes) == 3
    texts = " ".join(t.get_text() for ax in fig.axes for t in ax.texts)
    assert "= 1.00" in texts and "= 0.82" in texts          # orthonormal, then 45° apart
    # the number in the figure is the cosine of the step: 1/sqrt(1 + cos²45°) for g1 ⟂ g2
    X = torch.tensor([[1.0, 0.0], [math.cos(math.pi / 4), math.sin(math.pi / 4)]], dtype=torch.float64)
    cos = feature_step.feature_alignment(X, torch.eye(2, dtype=torch.float64)).item()
    assert cos == pytest.approx(1 / math.sqrt(1.5), abs=1e-12)
    assert "= 1.00" in " ".join(t.get_text() for t in ch01.hero(angle=90).axes[2].texts)


def test_fast_alignment_equals_the_library_one():
    gen = torch.Generator().manual_seed(0)
    X = torch.randn(3, 40, 10, generator=gen, dtype=torch.float64)
    G = torch.randn(3, 40, 5, generator=gen, dtype=torch.float64)
    for bias in (False, True):
        assert torch.allclose(ch01.alignment(X, G, bias=bias), feature_step.feature_alignment(X, G, bias=bias),
                              rtol=0, atol=1e-12)


def test_table_figure_and_bias_figure_draw():
    shapes, kappas = ((8, 64), (64, 16)), (1, 100)
    table = ch01.alignment_table(kappas, shapes, draws=5)
    assert table.shape == (2, 2) and (table[:, 0] > table[:, 1]).all() and (table[0] > table[1]).all()
    assert "kappa = 100" in ch01.format_table(table, kappas, shapes)
    curves = ch01.ratio_curves(widths=(8, 16), kappas=(1,), ratios=(0.5, 1, 2), draws=2)
    assert isinstance(ch01.alignment_figure(table, curves, kappas=kappas, shapes=shapes, ratios=(0.5, 1, 2)), Figure)
    assert isinstance(ch01.bias_figure(), Figure)


def test_bias_costs_alignment_only_for_small_inputs():
    """Section 1.6: at ||x||^2 ≈ d_in the bias changes little; at ||x||^2 ≈ 1 it costs most."""
    plain, biased = ch01.bias_alignment([128.0, 1.0])
    assert abs(plain[0] - biased[0]) < 0.01
    assert plain[1] == pytest.approx(plain[0], abs=1e-12)   # without a bias the scale drops out
    assert biased[1] < plain[1] / 2


def test_the_ratio_not_the_width_sets_the_alignment():
    """Figure 1.2's right panel: curves at three widths agree at every ratio; a width-dependent
    quantity (the cosine against b itself, not b / d_in) would not."""
    curves = ch01.ratio_curves(draws=10)
    assert ch01.width_spread(curves) < 0.05
    by_batch = {(kappa, d): np.interp(np.log2([8, 32]), np.log2(np.array(ch01.RATIOS) * d), c)
                for (kappa, d), c in curves.items()}
    assert max(abs(by_batch[(1, 32)] - by_batch[(1, 128)])) > 0.1     # at equal b the widths differ


def test_explorable_keeps_its_promises():
    e = ch01.gram_alignment()
    assert e.main == "ratio" and len(e.main_slider.values) >= 9
    kappa = next(s for s in e.sliders if s.name == "kappa")
    assert len(kappa.values) >= 5
    assert {p.text for p in e.promises} >= {"the cosine falls as b/d_in grows", "the cosine is lower than at κ = 1",
                                            "the Gram matrix has b − d_in zero eigenvalues"}
    assert e.broken_promises() == []


def test_the_falling_promise_fails_when_the_ratio_does_not_change_the_batch(monkeypatch):
    """The promise can fail: with a fixed batch of 256 behind every ratio, the width would
    shrink instead and the measured cosine would not follow b / d_in."""
    original = ch01.ratio_alignment_state.__wrapped__

    def reversed_ratio(ratio, kappa):
        return original(1.0 / ratio, kappa)

    monkeypatch.setattr(ch01, "ratio_alignment_state", reversed_ratio)
    broken = {b.promise.text for b in ch01.gram_alignment().broken_promises()}
    assert "the cosine falls as b/d_in grows" in broken


def test_nested_batches_and_the_reachable_share():
    small, large = ch01.ratio_alignment_state(0.25, 100), ch01.ratio_alignment_state(4.0, 100)
    X, _ = ch01._explorable_draws(100.0)
    assert small.batch == 8 and large.batch == 128 and X.shape[1] == 256     # the first rows of the same batches
    assert small.reach == pytest.approx(1.0, abs=1e-12) and small.zeros == 0
    assert large.cos <= large.reach < 1 and large.zeros == 128 - ch01.EXPLORABLE_D_IN


def test_every_setting_draws_without_a_message():
    e = ch01.gram_alignment()
    for ratio in e.sliders[0].values:
        for kappa in e.sliders[1].values:
            fig = e.render(strict=True, ratio=ratio, kappa=kappa)
            assert len(fig.axes) == 3 and not fig.texts          # three panels, no message


def test_the_explorable_fills_the_column_with_ten_point_text():
    e = ch01.gram_alignment()
    assert e.requested_figsize == e.figsize and e.figsize[0] * DISPLAY_DPI <= COLUMN_PX
    assert smallest_text(e.render(strict=True)) >= 10


@pytest.mark.slow
def test_website_frames_fit_the_budget_at_twice_the_display_width():
    from PIL import Image
    import io

    e = ch01.gram_alignment()
    html = e.static_html()                                        # raises over 2 MB
    assert len(html) < 1_800_000
    frame = Image.open(io.BytesIO(e._frame_bytes(e.defaults())))
    assert frame.size[0] >= 2 * e.figsize[0] * DISPLAY_DPI - 2
