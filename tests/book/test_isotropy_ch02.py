"""isolab.book.isotropy, the Chapter 2 additions: norm moments, pairwise cosines, tight frames
and the Gram-side isotropy of a Gaussian batch."""

import math

import pytest
import torch

from isolab.book import features, isotropy
from isolab.book.seeding import generator


# ---------------------------------------------------------------- norm_moments
def test_norm_moments_closed_forms_for_small_d():
    mean, var = isotropy.norm_moments(torch.tensor([1.0, 2.0, 3.0]))
    # E|z| = sqrt(2/pi); Rayleigh mean sqrt(pi/2); Maxwell mean 2 sqrt(2/pi)
    expected = [math.sqrt(2 / math.pi), math.sqrt(math.pi / 2), 2 * math.sqrt(2 / math.pi)]
    assert mean.tolist() == pytest.approx(expected, rel=1e-14)
    assert var.tolist() == pytest.approx([1 - 2 / math.pi, 2 - math.pi / 2, 3 - 8 / math.pi], rel=1e-13)


@pytest.mark.parametrize("d", [5.0, 49.0, 50.0, 64.0, 1000.0, 1001.0, 1e5, 1e9])
def test_norm_moments_recurrence_and_asymptotics(d):
    # Gamma's functional equation gives E||x||_d * E||x||_{d+1} = d exactly
    (m0, _), (m1, _) = isotropy.norm_moments(d), isotropy.norm_moments(d + 1)
    assert (m0 * m1).item() == pytest.approx(d, rel=1e-12)
    _, var = isotropy.norm_moments(d)
    # Var ||x|| = 1/2 - 1/(8d) - 1/(16 d^2) + O(d^-3)
    assert var.item() == pytest.approx(0.5 - 1 / (8 * d) - 1 / (16 * d**2), abs=2 / d**3)


def test_norm_moments_against_simulation_and_errors():
    z = torch.randn(200_000, 10, generator=generator(0), dtype=torch.float64)
    norms = torch.linalg.vector_norm(z, dim=-1)
    mean, var = isotropy.norm_moments(10)
    assert norms.mean().item() == pytest.approx(mean.item(), abs=4 * math.sqrt(var.item() / 200_000))
    assert norms.var().item() == pytest.approx(var.item(), rel=0.02)
    with pytest.raises(ValueError):
        isotropy.norm_moments(0)
    with pytest.raises(ValueError):
        isotropy.norm_moments(float("inf"))


# ------------------------------------------------------------ pairwise_cosines
def test_pairwise_cosines_against_a_loop_and_batched():
    X = torch.randn(3, 6, 4, generator=generator(1), dtype=torch.float64)
    out = isotropy.pairwise_cosines(X)
    assert out.shape == (3, 15)
    for s in range(3):
        expected = [torch.nn.functional.cosine_similarity(X[s, i], X[s, j], dim=0).item()
                    for i in range(6) for j in range(i + 1, 6)]
        assert out[s].tolist() == pytest.approx(expected, rel=1e-12)
    Z = X[0].clone()
    Z[2] = 0
    assert torch.isnan(isotropy.pairwise_cosines(Z)).sum().item() == 5  # row 2 pairs with 5 others
    with pytest.raises(ValueError):
        isotropy.pairwise_cosines(torch.ones(4))


def test_pairwise_cosines_variance_is_one_over_d():
    X = torch.randn(400, 50, generator=generator(2), dtype=torch.float64)
    cos = isotropy.pairwise_cosines(X)
    assert cos.mean().item() == pytest.approx(0.0, abs=0.005)
    assert cos.square().mean().item() == pytest.approx(1 / 50, rel=0.03)


# ----------------------------------------------------------------- tight_frame
@pytest.mark.parametrize("b, d", [(5, 2), (7, 3), (16, 4), (64, 16), (33, 32), (100, 7), (9, 9), (10, 10)])
def test_tight_frame_is_an_equal_norm_tight_frame(b, d):
    F = isotropy.tight_frame(b, d)
    assert F.shape == (b, d)
    assert torch.allclose(torch.linalg.vector_norm(F, dim=-1), torch.ones(b, dtype=F.dtype), atol=1e-13)
    assert torch.allclose(F.T @ F, (b / d) * torch.eye(d, dtype=F.dtype), atol=1e-12)
    # Gram-side isotropy reaches the bound d/b, from the eigenvalues directly
    lam = torch.linalg.eigvalsh(F @ F.T)
    assert (lam.sum() ** 2 / lam.square().sum()).item() / b == pytest.approx(d / b, rel=1e-12)
    assert isotropy.feature_isotropy(F).item() == pytest.approx(d / b, rel=1e-12)
    # frame potential at its minimum b^2/d (Benedetto-Fickus)
    assert (F @ F.T).square().sum().item() == pytest.approx(b * b / d, rel=1e-12)
    # rows are distinct points
    assert torch.cdist(F, F).add(torch.eye(b, dtype=F.dtype)).min().item() > 1e-6


def test_tight_frame_in_the_plane_is_a_regular_polygon():
    F = isotropy.tight_frame(8, 2)
    angles = torch.atan2(F[:, 1], F[:, 0])
    steps = torch.remainder(angles.diff(), 2 * math.pi)
    assert torch.allclose(steps, torch.full_like(steps, 2 * math.pi / 8), atol=1e-12)


def test_tight_frame_beats_random_unit_vectors_and_rejects_bad_shapes():
    X = torch.randn(64, 16, generator=generator(3), dtype=torch.float64)
    X = X / torch.linalg.vector_norm(X, dim=-1, keepdim=True)
    assert isotropy.feature_isotropy(X).item() < isotropy.feature_isotropy(isotropy.tight_frame(64, 16)).item() - 0.02
    with pytest.raises(ValueError, match="b >= d"):
        isotropy.tight_frame(3, 5)
    with pytest.raises(ValueError):
        isotropy.tight_frame(0, 2)
    assert isotropy.tight_frame(6, 3, dtype=torch.float32).dtype == torch.float32


# ------------------------------------------------------- gaussian_gram_isotropy
def test_gaussian_gram_isotropy_edges_and_identity_formula():
    C = features.covariance(12, 50.0)
    assert isotropy.gaussian_gram_isotropy(1, C).item() == pytest.approx(1.0, rel=1e-12)  # one sample
    v = torch.randn(12, 1, generator=generator(4), dtype=torch.float64)
    assert isotropy.gaussian_gram_isotropy(9, v @ v.T).item() == pytest.approx(1 / 9, rel=1e-12)  # rank one
    for b, d in [(4, 64), (32, 32), (256, 16)]:
        expected = (b * d + 2) / (b * (b + d + 1))
        assert isotropy.gaussian_gram_isotropy(b, torch.eye(d, dtype=torch.float64)).item() == pytest.approx(expected)
    batched = isotropy.gaussian_gram_isotropy(8, torch.stack([torch.eye(5), 2 * torch.eye(5)]))
    assert batched.shape == (2,)
    with pytest.raises(ValueError):
        isotropy.gaussian_gram_isotropy(0, C)


@pytest.mark.parametrize("b, d, kappa", [(6, 5, 20.0), (3, 8, 1.0), (12, 4, 300.0)])
def test_gaussian_gram_isotropy_is_the_ratio_of_monte_carlo_moments(b, d, kappa):
    X = features.gaussian_features(b, d, kappa, 0.3, generator=generator(5), sample_shape=(40_000,))
    K = X @ X.transpose(-1, -2)
    trace2 = torch.diagonal(K, dim1=-2, dim2=-1).sum(-1).square().mean()
    frob2 = K.square().sum(dim=(-2, -1)).mean()
    C = features.covariance(d, kappa, 0.3)
    assert (trace2 / (b * frob2)).item() == pytest.approx(isotropy.gaussian_gram_isotropy(b, C).item(), rel=0.02)


# -------------------------------------------------------- norm and angle densities
@pytest.mark.parametrize("d", [1, 2, 5, 64, 1000])
def test_norm_density_integrates_to_one_with_the_exact_mean(d):
    r = torch.linspace(0, math.sqrt(d) + 12, 200_001, dtype=torch.float64)
    p = isotropy.norm_density(r, d)
    assert torch.trapezoid(p, r).item() == pytest.approx(1.0, abs=1e-6)
    mean, var = isotropy.norm_moments(d)
    assert torch.trapezoid(r * p, r).item() == pytest.approx(mean.item(), rel=1e-6)
    assert torch.trapezoid((r - mean) ** 2 * p, r).item() == pytest.approx(var.item(), rel=1e-4)
    assert isotropy.norm_density(-1.0, d).item() == 0.0


def test_norm_density_closed_forms():
    r = torch.tensor([0.3, 1.0, 2.5], dtype=torch.float64)
    half_normal = 2 * torch.exp(-r**2 / 2) / math.sqrt(2 * math.pi)
    assert torch.allclose(isotropy.norm_density(r, 1), half_normal, rtol=1e-13)
    assert torch.allclose(isotropy.norm_density(r, 2), r * torch.exp(-r**2 / 2), rtol=1e-13)  # Rayleigh


@pytest.mark.parametrize("d", [2, 3, 10, 300])
def test_angle_density_normalized_with_cosine_variance_one_over_d(d):
    theta = torch.linspace(0, math.pi, 100_001, dtype=torch.float64)
    p = isotropy.angle_density(theta, d)
    assert torch.trapezoid(p, theta).item() == pytest.approx(1.0, abs=1e-6)
    assert torch.trapezoid(torch.cos(theta) * p, theta).item() == pytest.approx(0.0, abs=1e-8)
    assert torch.trapezoid(torch.cos(theta) ** 2 * p, theta).item() == pytest.approx(1 / d, rel=1e-5)


def test_angle_density_closed_forms_and_errors():
    theta = torch.tensor([0.2, 1.0, 2.9], dtype=torch.float64)
    assert torch.allclose(isotropy.angle_density(theta, 2), torch.full_like(theta, 1 / math.pi))
    assert torch.allclose(isotropy.angle_density(theta, 3), torch.sin(theta) / 2, rtol=1e-13)
    assert isotropy.angle_density(-0.1, 5).item() == 0.0 and isotropy.angle_density(4.0, 5).item() == 0.0
    with pytest.raises(ValueError):
        isotropy.angle_density(1.0, 1)
    with pytest.raises(ValueError):
        isotropy.norm_density(1.0, 0)
