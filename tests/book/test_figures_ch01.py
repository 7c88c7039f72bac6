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
    ch01.gram_step.cache_clear()
    yield
    ch01.gram_step.cache_clear()


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


def test_centerpiece_keeps_its_promises():
    e = ch01.gram_step_explorable()
    assert e.main == "kappa" and len(e.main_slider.values) >= 9 and e.narrow == "panels"
    model = next(s for s in e.sliders if s.name == "model")
    assert model.is_toggle and set(model.values) == {"null model", "teacher"}
    assert e.broken_promises() == []


def test_the_cosine_is_the_mean_over_the_rms_eigenvalue():
    """The identity the centerpiece's caption states, against the library's cosine, for
    both models, a batch wider and one narrower than the layer."""
    gen = torch.Generator().manual_seed(3)
    for b in (12, 70):
        X = torch.randn(b, 32, generator=gen, dtype=torch.float64) * torch.linspace(0.1, 3, 32, dtype=torch.float64)
        for G in (torch.randn(b, 5, generator=gen, dtype=torch.float64),
                  -X @ torch.randn(32, 5, generator=gen, dtype=torch.float64)):
            lam, U = torch.linalg.eigh(X @ X.T)
            share = (U.T @ G).square().sum(-1) / G.square().sum()
            assert ch01.energy_formula(lam.clamp_min(0), share).item() == pytest.approx(
                feature_step.feature_alignment(X, G).item(), abs=1e-12)


def test_the_promises_can_fail():
    """Swapped models, the teacher's cosine is below the null model's and its energy sits on
    the zero eigenvalues: the promises that say otherwise break."""
    original = ch01.gram_step.__wrapped__

    def swapped(kappa, ratio, model):
        return original(kappa, ratio, "teacher" if model == "null model" else "null model")

    import unittest.mock as mock
    with mock.patch.object(ch01, "gram_step", swapped):
        broken = {b.promise.text for b in ch01.gram_step_explorable().broken_promises()}
    assert {"the teacher's cosine stays above the null model's", "puts no energy on the zero eigenvalues"} <= broken


def test_the_models_of_G():
    X = torch.randn(40, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    null, W = torch.ones(40, 3, dtype=torch.float64), torch.randn(8, 3, dtype=torch.float64)
    assert ch01.gradient_model(X, "null model", null, W) is null
    assert torch.equal(ch01.gradient_model(X, "teacher", null, W), -X @ W)
    with pytest.raises(ValueError):
        ch01.gradient_model(X, "label noise", null, W)


def test_nested_draws_and_zero_eigenvalues():
    wide, square = ch01.gram_step(100, 4.0, "teacher"), ch01.gram_step(100, 1.0, "null model")
    assert wide.batch == 128 and wide.zeros == 128 - ch01.CENTER_D_IN and square.zeros == 0
    assert (wide.eigenvalues[-wide.zeros:] == 0).all() and wide.eigenvalues[: -wide.zeros].min() > 0
    null = ch01.gram_step(100, 4.0, "null model")
    assert float(null.g_share[-null.zeros:].sum()) == pytest.approx(0.75, abs=0.03)
    assert np.allclose(wide.g_share.sum(), 1) and np.allclose(wide.step_share.sum(), 1)


def test_the_spectrum_panel_clips_nothing():
    """Reviewer's finding: at κ = 10⁴, b = d_in a fixed floor drew a plateau. The floor is now
    below every nonzero eigenvalue on the grid."""
    floor = ch01._spectrum_floor()
    for kappa in ch01.CENTER_KAPPAS:
        for ratio in ch01.CENTER_RATIOS:
            s = ch01.gram_step(kappa, ratio, "null model")
            assert s.eigenvalues[: s.batch - s.zeros].min() > floor


def test_every_setting_draws_without_a_message():
    e = ch01.gram_step_explorable()
    for kappa in (1, 10_000):
        for ratio in ch01.CENTER_RATIOS:
            for model in ch01.G_MODELS:
                fig = e.render(strict=True, kappa=kappa, ratio=ratio, model=model)
                assert len(fig.axes) == 3 and not fig.texts          # three panels, no message


def test_the_explorable_fills_the_column_with_ten_point_text():
    e = ch01.gram_step_explorable()
    assert e.requested_figsize == e.figsize and e.figsize[0] * DISPLAY_DPI <= COLUMN_PX
    assert smallest_text(e.render(strict=True)) >= 10
    assert len(e.panel_strips()) == 4                          # three strips on a phone


@pytest.mark.slow
def test_website_frames_fit_the_budget_at_twice_the_display_width():
    from PIL import Image
    import io

    e = ch01.gram_step_explorable()
    html = e.static_html()                                        # raises over 2 MB
    assert len(html) < 1_900_000
    frame = Image.open(io.BytesIO(e._frame_bytes(e.defaults())))
    assert frame.size[0] >= 2 * e.figsize[0] * DISPLAY_DPI - 2
