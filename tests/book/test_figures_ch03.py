"""Chapter 3's figure module: every figure draws, the training comparison is fair and says
what the chapter says, and the explorable keeps its caption's promises (and would not,
drawn the way the book drew its batches before)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

from isolab.book import features
from isolab.book.figures import ch03
from isolab.linalg import random_orthogonal, whiten
from isolab.book.seeding import generator


def test_hero_is_a_figure_and_zca_moves_the_points_least():
    fig = ch03.hero()
    assert isinstance(fig, Figure)
    titles = [ax.get_title(loc="center") for ax in fig.axes]
    moves = [float(t.rsplit("=", 1)[1]) for t in titles[1:]]
    assert moves[0] < moves[1], "the ZCA panel must show the smaller mean move"


def test_reachable_alignment_whitened_step_is_the_steepest_reachable_move():
    data = ch03.reachable_alignment(batches=(4, 16, 64), draws=4)
    np.testing.assert_allclose(data["white_PG"], 1.0, atol=1e-12)
    assert (data["raw_PG"] < 0.99).all()
    bound = np.sqrt(np.minimum(data["batches"], data["d_in"]) / data["batches"])
    assert np.all(np.abs(data["white_G"] - bound) < 0.15)
    assert isinstance(ch03.reachable(data), Figure)


def test_rotation_distances_marks_the_minimum_not_the_mean():
    """The chapter once printed the mean of the random rotations' moves as their best."""
    X = features.gaussian_features(40, 6, 20.0, 0.3, generator=generator(1))
    W = torch.linalg.pinv(X) @ whiten(X)
    distances = (X[None] - X @ (W @ random_orthogonal(6, generator(16), sample_shape=(500,)))).square().sum(-1).mean(-1)
    zca = (X - X @ W).square().sum(-1).mean().item()
    fig = ch03.rotation_distances(distances, zca, zca + 1)
    title = "".join(fig.axes[0].get_title(loc=where) for where in ("left", "center", "right"))  # the style may put titles left
    assert f"{distances.min():.2f}" in title and f"{distances.mean():.2f}" not in title
    assert zca < distances.min().item() < distances.mean().item()


def test_static_figures_draw():
    gen = generator(5)
    X = features.gaussian_features(64, 12, 50.0, 0.4, generator=gen) + 0.5
    assert isinstance(ch03.diagonals(X), Figure)
    corr = {"ZCA": torch.eye(3, dtype=torch.float64), "PCA": torch.eye(3, dtype=torch.float64)[[1, 2, 0]]}
    assert isinstance(ch03.axis_swap(corr), Figure)
    methods = ("none", "batch", "layer", "rms", "zca", "pca")
    results = {(b, d, g): {m: [1.0, 0.5, 0.5, 0.5] for m in methods} for b, d in ((256, 32), (16, 64)) for g in (0, 45)}
    assert isinstance(ch03.isotropy_bars(results, [(256, 32), (16, 64)]), Figure)
    curves = {(m, g): [0.5, 0.4, 0.3] for m in ("none", "batch", "rms", "zca") for g in (0, 45)}
    assert isinstance(ch03.kappa_sweep([1, 10, 100], curves, 128, 32, 0.8), Figure)
    H = torch.relu(torch.randn(256, 16, generator=gen, dtype=torch.float64) @ torch.randn(16, 16, generator=gen,
                                                                                         dtype=torch.float64))
    stats = {"a": ch03.activation_stats(H, classes=4), "b": ch03.activation_stats(H + 0.1, classes=4)}
    assert isinstance(ch03.activations(stats, ["a"], 0.1), Figure)


def test_offdiagonal_share_and_batchnorm_share():
    assert ch03.offdiagonal_share(torch.eye(5, dtype=torch.float64)) == 0.0
    R = torch.full((4, 4), 1.0, dtype=torch.float64)
    assert math.isclose(ch03.offdiagonal_share(R), 12 / 16)
    gen = generator(0)
    H = torch.randn(2000, 8, generator=gen, dtype=torch.float64) * torch.arange(1.0, 9.0, dtype=torch.float64)
    stats = ch03.activation_stats(H, classes=2)
    assert stats.offdiagonal < 0.05          # independent units: BatchNorm is whitening, up to sampling noise
    assert stats.batchnorm_share > 0.95


def test_activation_isotropy_is_about_correlations_not_the_mean():
    """§3.7 measures isotropy about the mean: a common offset of every unit (as ReLU
    outputs have) changes nothing, though the uncentered XᵀX of the same batch would
    collapse onto the mean's direction."""
    gen = generator(1)
    H = torch.randn(1000, 8, generator=gen, dtype=torch.float64)
    shifted = ch03.activation_stats(H + 5.0, classes=2)
    plain = ch03.activation_stats(H, classes=2)
    assert shifted.isotropy["none"] == pytest.approx(plain.isotropy["none"], abs=1e-9)
    assert shifted.isotropy["zca"] == pytest.approx(1.0, abs=1e-9)
    from isolab.book import isotropy
    assert isotropy.feature_isotropy(H + 5.0, "covariance").item() < 0.3 < plain.isotropy["none"]


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def runs():
    return [ch03.train_inputs(degrees) for degrees in (45, 0)]      # the chapter's runs


def test_training_is_fair_and_says_what_the_chapter_says(runs):
    for run in runs:
        assert set(run.loss) == set(ch03.VARIANTS)
        for loss in run.loss.values():
            assert loss.shape == (len(ch03.LR_GRID), 5, len(run.steps))
            assert (loss[:, :, 0] - 1).abs().max() < 0.01, "every run starts from the same loss, 1"
    assert len(ch03.LR_GRID) == 7
    failed = [c for c in ch03.training_checks(runs) if not c.holds]
    assert not failed, failed
    assert isinstance(ch03.training(runs, 0.1), Figure)


def test_best_lr_is_the_argmin_of_the_score(runs):
    run = runs[0]
    for variant, i in ch03.best_lr(run).items():
        score = ch03.lr_scores(run)[variant]
        assert score[i] == score.min()
        assert torch.isinf(score[-1]) or score[-1] > score[i]


def test_explorable_keeps_its_promises_and_fits_the_budget():
    explorable = ch03.normalizations()
    assert explorable.main == "angle" and len(explorable.main_slider.values) >= 9
    assert explorable.broken_promises() == []
    assert len(explorable.static_html()) <= 2_000_000


def _old_sampler(batch, d, kappa, angle, generator):
    """How the book drew a rotated batch before: a new cloud Z Σ(θ)^{1/2} for every angle."""
    z = torch.randn(batch, d, generator=generator, dtype=torch.float64)
    return z @ features.covariance_sqrt(d, kappa, angle)


def test_the_caption_would_fail_with_the_old_way_of_drawing_the_batch():
    broken = ch03.normalizations(sampler=_old_sampler).broken_promises()
    texts = {b.promise.text for b in broken}
    assert "the spectra and bars of none, RMSNorm, ZCA and PCA do not move" in texts
