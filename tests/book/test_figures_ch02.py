"""Chapter 2's figure module: every figure function draws, the explorable keeps its caption's
promises over the whole grid and fits the website's budget, and the promise that the norm
histogram narrows as d grows is one the old computation (a fresh draw per setting) broke."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

from isolab.book import features, isotropy
from isolab.book.explorable import MIN_MAIN_VALUES
from isolab.book.figures import ch02
from isolab.book.seeding import generator


def test_below_prints_rounding_level_numbers_as_a_bound():
    assert ch02.below(3e-16, 1e-12) == "< 1e-12"
    assert ch02.below(0.29, 1e-10) == "2.9e-01"


def test_hero_draws_the_plane_and_refuses_other_dimensions():
    fig = ch02.hero()
    assert isinstance(fig, Figure)
    assert len(fig.axes) == 8                      # 4 batch sizes x (circle, eigenvalues)
    titles = [ax.get_title(loc="center") for ax in fig.axes]
    assert "XXᵀ = I" in titles and "XXᵀ = 4·P" in titles
    with pytest.raises(ValueError):
        ch02.hero(d=3)


def test_section_figures_draw():
    gen = generator(0)
    norms = {k: torch.linalg.vector_norm(torch.randn(500, k, generator=gen, dtype=torch.float64), dim=-1)
             for k in (1, 2, 8, 32, 512)}
    angles = {k: torch.rad2deg(torch.arccos(isotropy.pairwise_cosines(torch.randn(40, k, generator=gen, dtype=torch.float64))))
              for k in (3, 8, 32, 512)}
    dims = (16, 64, 256)
    K = {k: (lambda x: x @ x.T)(torch.randn(16, k, generator=gen, dtype=torch.float64)) for k in dims}
    lam = features.spectrum(64, 100).numpy()
    steps = np.arange(50)[:, None]
    errors = {"A": np.sqrt(((1 - lam / lam[0]) ** (2 * steps)).mean(1)), "B": np.linspace(1, 0.25, 50)}
    figures = [
        ch02.norm_shell(norms),
        ch02.right_angles(angles),
        ch02.gram_scale({k: K[k] for k in dims}, dims, [2.5, 1.0, 0.5], [13, 15, 22], 16),
        ch02.blind_spot({"A": lam, "B": np.concatenate([lam[:-4], lam[-4:] / 1e4])}, errors),
        ch02.dichotomy(32, [4, 32, 512], [0.88, 0.49, 0.059]),
        ch02.correlated((1, 100, 10_000), {"q": [0.1, 0.2, 0.3]}, {"q": [0.1, 0.2, 0.3]}, [64.0, 26.9, 13.7], 64),
        ch02.alignment_scatter([1, 100, 10_000], [0.2, 0.5, 0.9], [0.21, 0.5, 0.88]),
    ]
    assert all(isinstance(fig, Figure) and fig.axes for fig in figures)


def test_figures_keep_text_at_ten_points_or_more():
    fig = ch02.hero()
    fig.canvas.draw()
    sizes = [t.get_fontsize() for t in fig.findobj(lambda a: hasattr(a, "get_fontsize") and getattr(a, "get_text", lambda: "")())]
    assert min(sizes) >= 10


def test_concentration_data_matches_its_definition():
    data = ch02.concentration_data(8, 16, 1)
    X = ch02._base_sample()[:16, :8]
    assert np.allclose(data.radii, (torch.linalg.vector_norm(X, dim=-1) / math.sqrt(8)).numpy())
    assert data.zeros == 8 and math.isclose(data.bound, 0.5)
    assert data.gram_isotropy <= data.bound + 1e-12


def test_explorable_declares_its_main_slider_and_keeps_its_promises():
    explorable = ch02.concentration()
    assert explorable.main == "d" and len(explorable.main_slider.values) >= MIN_MAIN_VALUES
    assert len(explorable.promises) >= 4
    assert not explorable.broken_promises()


def test_every_setting_draws_without_a_message():
    explorable = ch02.concentration()
    for d in (2, 1024):
        for batch in ch02.B_VALUES:
            for kappa in ch02.KAPPA_VALUES:
                fig = explorable.render(strict=True, d=d, batch=batch, kappa=kappa)
                assert len(fig.axes) == 3 and not fig.texts


def _fresh_draw_norm_sd(d, batch, kappa):
    """The norm spread as the chapter computed it before: a new Gaussian draw per setting."""
    X = torch.randn(batch, d, generator=generator(13), dtype=torch.float64) * features.spectrum(d, kappa).sqrt()
    return float((torch.linalg.vector_norm(X, dim=-1) / math.sqrt(d)).std())


def test_the_narrowing_promise_fails_on_the_old_computation():
    explorable = ch02.concentration()
    promise = next(p for p in explorable.promises if "narrows" in p.text)
    new = [promise.measure(d=d, batch=16, kappa=1) for d in ch02.D_VALUES]
    old = [_fresh_draw_norm_sd(d, 16, 1) for d in ch02.D_VALUES]
    assert promise.holds(new)
    assert not promise.holds(old), "a fresh draw per setting makes the histogram widen somewhere as d grows"


@pytest.mark.slow
def test_static_frames_fit_the_budget():
    explorable = ch02.concentration()
    assert len(explorable.static_html()) <= 2_000_000


def test_spectrum_floor_clips_nothing_and_kappa_widens_the_shell_at_every_d():
    """Reviewer's findings: the old 1e-3 floor drew tiny eigenvalues on a false plateau, and the
    text said the shell dissolves at κ = 100 "at every d" (at d = 1024 it stays tight: it is
    wider than at κ = 1, which the caption now promises, not gone)."""
    floor = ch02._spectrum_floor()
    for d in ch02.D_VALUES:
        for b in ch02.B_VALUES:
            data = ch02.concentration_data(d, b, 100)
            assert data.eigenvalues[: b - data.zeros].min() > floor
            assert ch02._wider_at_kappa(d, b, 100) > 0
    assert ch02._norm_sd(1024, 64, 100) < 0.1          # still a tight shell at d = 1024
    assert ch02.concentration().narrow == "panels"
