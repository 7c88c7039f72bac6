"""isolab.book.features: the spectrum, rotation and samples behind every Σ slider."""

import math

import pytest
import torch

from isolab.book import features
from isolab.book.seeding import generator


@pytest.mark.parametrize("d", [1, 2, 7, 32])
@pytest.mark.parametrize("kappa", [1.0, 10.0, 1000.0])
def test_spectrum_has_the_requested_condition_number_and_mean_one(d, kappa):
    lam = features.spectrum(d, kappa)
    assert lam.shape == (d,)
    assert torch.all(lam[:-1] >= lam[1:]), "eigenvalues must be in descending order"
    assert lam.sum().item() == pytest.approx(d, rel=1e-12)
    if d > 1:
        assert (lam[0] / lam[-1]).item() == pytest.approx(kappa, rel=1e-12)


@pytest.mark.parametrize("bad", [0.5, float("nan"), float("inf"), -3])
def test_spectrum_rejects_invalid_condition_numbers(bad):
    with pytest.raises(ValueError, match="condition_number"):
        features.spectrum(4, bad)


@pytest.mark.parametrize("d", [0, -1, 2.5])
def test_invalid_dimension_is_rejected(d):
    with pytest.raises(ValueError, match="dimension"):
        features.spectrum(d)


@pytest.mark.parametrize("d", [2, 5, 8])
def test_pair_rotation_is_orthogonal_and_turns_outer_pairs(d):
    R = features.pair_rotation(d, 0.3)
    assert torch.allclose(R @ R.T, torch.eye(d, dtype=R.dtype), atol=1e-14)
    assert R[0, 0].item() == pytest.approx(math.cos(0.3))
    assert R[d - 1, 0].item() == pytest.approx(math.sin(0.3))
    if d % 2:
        assert R[d // 2, d // 2] == 1


def test_covariance_has_the_spectrum_and_its_square_root_squares_to_it():
    S = features.covariance(6, 50.0, 0.7)
    assert torch.allclose(S, S.T)
    eig = torch.linalg.eigvalsh(S).flip(0)
    assert torch.allclose(eig, features.spectrum(6, 50.0), rtol=1e-12)
    root = features.covariance_sqrt(6, 50.0, 0.7)
    assert torch.allclose(root @ root, S, atol=1e-12)


def test_rotation_at_45_degrees_flattens_the_diagonal():
    S = features.covariance(8, 1000.0, math.pi / 4)
    diag = torch.diagonal(S)
    # each diagonal entry averages one large and one small eigenvalue
    assert diag.max() / diag.min() < 25
    assert features.covariance(8, 1000.0, 0.0).diagonal().max() / features.covariance(8, 1000.0, 0.0).diagonal().min() > 999


def test_samples_have_the_requested_covariance():
    X = features.gaussian_features(200_000, 4, 9.0, 0.4, generator=generator(0))
    empirical = X.T @ X / X.shape[0]
    assert torch.allclose(empirical, features.covariance(4, 9.0, 0.4), atol=0.03)


def test_sampling_is_reproducible_and_batched():
    a = features.gaussian_features(5, 3, 4.0, generator=generator(1), sample_shape=(2, 7))
    b = features.gaussian_features(5, 3, 4.0, generator=generator(1), sample_shape=(2, 7))
    assert a.shape == (2, 7, 5, 3)
    assert torch.equal(a, b)


def test_sampling_follows_dtype():
    X = features.gaussian_features(4, 3, dtype=torch.float32, generator=generator(2))
    assert X.dtype == torch.float32


def test_rotation_turns_one_fixed_cloud_and_keeps_the_gram_matrix():
    """Changing the angle rotates the same samples: X(θ) = X(0) R(θ)ᵀ, so X Xᵀ is unchanged."""
    X0 = features.gaussian_features(16, 6, 50.0, 0.0, generator=generator(7))
    for angle in (0.3, 0.785):
        X = features.gaussian_features(16, 6, 50.0, angle, generator=generator(7))
        torch.testing.assert_close(X, X0 @ features.pair_rotation(6, angle).T)
        torch.testing.assert_close(X @ X.T, X0 @ X0.T)
