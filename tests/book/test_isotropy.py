"""isolab.book.isotropy: the book's one isotropy measure."""

import math

import pytest
import torch

from isolab.book import features, isotropy
from isolab.book.seeding import generator


def test_identity_is_perfectly_isotropic_and_rank_one_is_not():
    assert isotropy.isotropy(3.0 * torch.eye(5)).item() == pytest.approx(1.0)
    v = torch.randn(5, 1, generator=generator(0))
    assert isotropy.isotropy(v @ v.T).item() == pytest.approx(1 / 5, rel=1e-5)
    assert isotropy.distance_from_identity(torch.eye(4) * 7).item() == pytest.approx(0.0, abs=1e-7)


def test_matches_the_eigenvalue_formula_and_the_distance_identity():
    X = features.gaussian_features(50, 6, 30.0, 0.4, generator=generator(1))
    C = X.T @ X
    lam = torch.linalg.eigvalsh(C)
    assert isotropy.effective_rank(C).item() == pytest.approx((lam.sum() ** 2 / lam.square().sum()).item(), rel=1e-12)
    iso = isotropy.isotropy(C).item()
    assert isotropy.distance_from_identity(C).item() == pytest.approx(math.sqrt(1 / iso - 1), rel=1e-10)


def test_scale_and_rotation_invariant():
    C = features.covariance(6, 20.0)
    Q, _ = torch.linalg.qr(torch.randn(6, 6, generator=generator(2), dtype=torch.float64))
    assert isotropy.isotropy(5 * Q @ C @ Q.T).item() == pytest.approx(isotropy.isotropy(C).item(), rel=1e-12)


@pytest.mark.parametrize("b, d", [(8, 32), (32, 8), (16, 16)])
def test_gram_and_covariance_sides_share_the_effective_rank(b, d):
    X = torch.randn(b, d, generator=generator(3), dtype=torch.float64)
    gram = isotropy.feature_isotropy(X, "gram").item()
    cov = isotropy.feature_isotropy(X, "covariance").item()
    assert gram * b == pytest.approx(cov * d, rel=1e-12)
    assert gram == pytest.approx(isotropy.isotropy(X @ X.T).item(), rel=1e-12)
    assert gram <= min(b, d) / b + 1e-12


def test_batched_and_nan_for_zero():
    X = torch.randn(3, 10, 4, generator=generator(4), dtype=torch.float64)
    out = isotropy.feature_isotropy(X)
    assert out.shape == (3,)
    assert torch.isnan(isotropy.isotropy(torch.zeros(3, 3))).item()
    with pytest.raises(ValueError, match="side"):
        isotropy.feature_isotropy(X, "rows")
    with pytest.raises(ValueError, match="square"):
        isotropy.isotropy(torch.zeros(2, 3))
