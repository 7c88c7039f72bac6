"""Chapter 1's figures (isolab.book.figures.ch01): they draw, they show what their captions say,
and the explorable's caption promise about the rotation θ fails on the old sampling (the
same Gaussian draws multiplied by a rotated Σ^{1/2}), so this test can fail."""

from __future__ import annotations

import math

import pytest
import torch
from matplotlib.figure import Figure

from isolab.book import feature_step, features
from isolab.book.explorable import DISPLAY_DPI
from isolab.book.figures import ch01


@pytest.fixture(autouse=True)
def fresh_cache():
    """The explorable caches its computation per setting; no test sees another's."""
    ch01.gram_alignment_state.cache_clear()
    yield
    ch01.gram_alignment_state.cache_clear()


def old_gaussian_features(batch, d, condition_number=1.0, angle=0.0, *, generator=None, sample_shape=(),
                          dtype=torch.float64, device=None):
    """How isolab.book.features drew rotated inputs before: z Σ(θ)^{1/2}, a different cloud per angle."""
    z = torch.randn(*sample_shape, batch, d, generator=generator, dtype=dtype, device=device)
    return z @ features.covariance_sqrt(d, condition_number, angle, dtype=dtype, device=device)


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
    assert isinstance(ch01.alignment_figure(table, draws=2, kappas=kappas, shapes=shapes), Figure)
    assert isinstance(ch01.bias_figure(), Figure)


def test_bias_costs_alignment_only_for_small_inputs():
    """Section 1.6: at ||x||^2 ≈ d_in the bias changes little; at ||x||^2 ≈ 1 it costs most."""
    plain, biased = ch01.bias_alignment([128.0, 1.0])
    assert abs(plain[0] - biased[0]) < 0.01
    assert plain[1] == pytest.approx(plain[0], abs=1e-12)   # without a bias the scale drops out
    assert biased[1] < plain[1] / 2


def test_explorable_keeps_its_promises():
    e = ch01.gram_alignment()
    assert e.main == "angle" and len(e.main_slider.values) >= 9
    assert {p.text for p in e.promises} >= {"the cosine does not change with θ"}
    assert e.broken_promises() == []


def test_theta_promise_fails_under_the_old_sampling(monkeypatch):
    monkeypatch.setattr(features, "gaussian_features", old_gaussian_features)
    broken = ch01.gram_alignment().broken_promises()
    failed = {b.promise.text for b in broken}
    assert "the cosine does not change with θ" in failed
    # where it fails, the cosine moves by far more than rounding
    spread = max(max(b.values) - min(b.values) for b in broken if b.promise.text.startswith("the cosine does not"))
    assert spread > 0.05


def test_the_rotation_turns_the_cloud_and_leaves_the_gram_matrix():
    a, b = ch01.gram_alignment_state(0, 1000, 8), ch01.gram_alignment_state(60, 1000, 8)
    assert not torch.allclose(a.X, b.X)
    assert torch.allclose(feature_step.gram(a.X), feature_step.gram(b.X), rtol=0, atol=1e-10)


def test_reachable_share_is_one_below_the_width_and_bounds_the_cosine_above_it():
    below, above = ch01.gram_alignment_state(0, 30, 8), ch01.gram_alignment_state(0, 30, 128)
    assert below.reach == pytest.approx(1.0, abs=1e-12)
    assert above.cos <= above.reach < 1


def test_every_setting_draws_without_a_message():
    e = ch01.gram_alignment()
    for kappa in e.sliders[1].values:
        for batch in e.sliders[2].values:
            fig = e.render(strict=True, angle=90, kappa=kappa, batch=batch)
            assert len(fig.axes) == 4 and not fig.texts          # three panels and a colorbar


@pytest.mark.slow
def test_website_frames_fit_the_budget_at_twice_the_display_width():
    from PIL import Image
    import io

    e = ch01.gram_alignment()
    html = e.static_html()                                        # raises over 2 MB
    assert len(html) < 1_600_000
    frame = Image.open(io.BytesIO(e._frame_bytes(e.defaults())))
    assert frame.size[0] >= 2 * e.figsize[0] * DISPLAY_DPI - 2
