"""Tests for isolab.book.invariance: random reparametrizations and how update rules respond."""

import math

import pytest
import torch

from isolab import linalg, updates

from isolab.book import invariance
from isolab.book.seeding import generator

F64 = torch.float64


def randn(gen, *shape):
    return torch.randn(*shape, generator=gen, dtype=F64)


def test_geometric_spectrum_ratio_and_product():
    s = invariance.geometric_spectrum(7, 1e4)
    assert s.shape == (7,)
    assert torch.all(s[:-1] > s[1:])
    assert math.isclose((s[0] / s[-1]).item(), 1e4, rel_tol=1e-12)
    assert math.isclose(s.log().sum().item(), 0.0, abs_tol=1e-12)
    assert torch.equal(invariance.geometric_spectrum(1, 1.0), torch.ones(1, dtype=F64))


@pytest.mark.parametrize("bad", [0.5, float("nan"), float("inf"), True, "10"])
def test_bad_condition_numbers_raise(bad):
    with pytest.raises(ValueError):
        invariance.random_invertible(3, bad, generator=generator(0))


def test_one_by_one_needs_kappa_one():
    with pytest.raises(ValueError):
        invariance.geometric_spectrum(1, 2.0)
    with pytest.raises(ValueError):
        invariance.random_orthogonal(0, generator=generator(0))


def test_random_orthogonal_is_orthogonal_batched_and_seeded():
    Q = invariance.random_orthogonal(5, generator=generator(1), sample_shape=(4, 3))
    assert Q.shape == (4, 3, 5, 5)
    assert torch.allclose(Q.mT @ Q, torch.eye(5, dtype=F64).expand_as(Q), atol=1e-12)
    assert torch.equal(Q, invariance.random_orthogonal(5, generator=generator(1), sample_shape=(4, 3)))
    assert not torch.equal(Q, invariance.random_orthogonal(5, generator=generator(2), sample_shape=(4, 3)))


def test_random_orthogonal_is_haar_on_average():
    # for Haar Q, E[Q_11^2] = 1/n and E[Q_11] = 0; without the sign fix E[Q_11] < 0
    Q = invariance.random_orthogonal(4, generator=generator(3), sample_shape=(20_000,))
    assert abs(Q[:, 0, 0].mean().item()) < 0.02
    assert abs(Q[:, 0, 0].square().mean().item() - 0.25) < 0.01


@pytest.mark.parametrize("kappa", [1.0, 10.0, 1e3, 1e6])
def test_random_invertible_has_exact_condition_number(kappa):
    A = invariance.random_invertible(6, kappa, generator=generator(4), sample_shape=(10,))
    s = torch.linalg.svdvals(A)
    assert torch.allclose(s[..., 0] / s[..., -1], torch.full((10,), kappa, dtype=F64), rtol=1e-8)
    assert torch.allclose(torch.linalg.det(A).abs(), torch.ones(10, dtype=F64), rtol=1e-8)
    if kappa == 1.0:
        assert torch.allclose(A.mT @ A, torch.eye(6, dtype=F64).expand_as(A), atol=1e-12)
    else:  # generic: not diagonal, not orthogonal
        off = A - torch.diag_embed(torch.diagonal(A, dim1=-2, dim2=-1))
        assert off.abs().amax() > 0.1


def test_random_positive_diagonal():
    D = invariance.random_positive_diagonal(5, 100.0, generator=generator(5), sample_shape=(30,))
    d = torch.diagonal(D, dim1=-2, dim2=-1)
    assert torch.equal(D, torch.diag_embed(d))
    assert torch.all(d > 0)
    assert torch.allclose(d.amax(-1) / d.amin(-1), torch.full((30,), 100.0, dtype=F64), rtol=1e-10)
    # the same spectrum, in varying orders
    assert torch.allclose(d.sort(-1).values, invariance.geometric_spectrum(5, 100.0).flip(0).expand(30, 5))
    assert len({tuple(row.argsort().tolist()) for row in d}) > 5


def test_norm_ratio_matches_direct_computation():
    gen = generator(6)
    X, G = randn(gen, 40, 5), randn(gen, 40, 3)
    A = invariance.random_invertible(5, 10.0, generator=gen)
    B = invariance.random_invertible(3, 10.0, generator=gen)
    direct = (A.T @ X.T @ G @ B).norm() / (X.T @ G).norm()
    assert math.isclose(invariance.norm_ratio(updates.sgd_update, X, G, A, B).item(), direct.item(), rel_tol=1e-12)
    spec = torch.linalg.matrix_norm(A.T @ X.T @ G @ B, 2) / torch.linalg.matrix_norm(X.T @ G, 2)
    assert math.isclose(invariance.norm_ratio(updates.sgd_update, X, G, A, B, 2).item(), spec.item(), rel_tol=1e-12)
    nuc = torch.linalg.matrix_norm(A.T @ X.T @ G @ B, "nuc") / torch.linalg.matrix_norm(X.T @ G, "nuc")
    assert math.isclose(invariance.norm_ratio(updates.sgd_update, X, G, A, B, "nuc").item(), nuc.item(), rel_tol=1e-12)
    with pytest.raises(ValueError):
        invariance.norm_ratio(updates.sgd_update, X, G, A, B, 1)
    with pytest.raises(ValueError):
        invariance.norm_ratio(updates.sgd_update, X, G, B, A)


@pytest.mark.parametrize("kappa", [1.0, 100.0, 1e4])
def test_iso_is_invariant_and_sgd_is_not(kappa):
    gen = generator(7)
    X, G = randn(gen, 128, 6), randn(gen, 128, 4)
    A = invariance.random_invertible(6, kappa, generator=gen, sample_shape=(8,))
    B = invariance.random_invertible(4, kappa, generator=gen, sample_shape=(8,))
    for ord in ("fro", 2, "nuc"):
        r = invariance.norm_ratio(updates.iso_update, X, G, A, B, ord)
        assert r.shape == (8,)
        assert torch.allclose(r, torch.ones(8, dtype=F64), rtol=1e-6)
    if kappa > 1:
        assert (invariance.norm_ratio(updates.sgd_update, X, G, A, B) - 1).abs().min() > 0.1


def test_adam_is_invariant_to_positive_diagonal_only():
    gen = generator(8)
    X, G = randn(gen, 128, 6), randn(gen, 128, 5)
    D = invariance.random_positive_diagonal(6, 1e3, generator=gen, sample_shape=(10,))
    E = invariance.random_positive_diagonal(5, 1e3, generator=gen, sample_shape=(10,))
    sign = lambda X, G: torch.sign(updates.weight_gradient(X, G))
    assert torch.equal(sign(X @ D, G @ E), sign(X, G).expand(10, 6, 5))
    A = invariance.random_invertible(6, 1e3, generator=gen, sample_shape=(10,))
    B = invariance.random_invertible(5, 1e3, generator=gen, sample_shape=(10,))
    assert (invariance.norm_ratio(sign, X, G, A, B, 2) - 1).abs().max() > 0.05


def test_relative_change():
    old = torch.tensor([[3.0, 0.0], [0.0, 4.0]], dtype=F64)
    new = old + torch.tensor([[0.0, 1.0], [0.0, 0.0]], dtype=F64)
    assert math.isclose(invariance.relative_change(new, old).item(), 1 / 5, rel_tol=1e-15)


def test_induced_rotation_identity():
    gen = generator(9)
    X, G = randn(gen, 200, 5), randn(gen, 200, 3)
    A = invariance.random_invertible(5, 50.0, generator=gen, sample_shape=(4,))
    B = invariance.random_invertible(3, 50.0, generator=gen, sample_shape=(4,))
    Mx, Mg = invariance.induced_rotation(X, A), invariance.induced_rotation(G, B)
    assert torch.allclose(Mx.mT @ Mx, torch.eye(5, dtype=F64).expand_as(Mx), atol=1e-12)
    # whitening the transformed inputs = whitening the originals, then rotating
    lhs = linalg.whiten(X @ A)
    assert torch.allclose(lhs, linalg.whiten(X) @ Mx, atol=1e-10)
    assert torch.allclose(updates.iso_update(X @ A, G @ B), Mx.mT @ updates.iso_update(X, G) @ Mg, atol=1e-10)


def test_induced_rotation_of_an_orthogonal_transform_is_itself():
    gen = generator(10)
    X = randn(gen, 100, 4)
    Q = invariance.random_orthogonal(4, generator=gen)
    assert torch.allclose(invariance.induced_rotation(X, Q), Q, atol=1e-12)
    # a scalar multiple of the identity induces no rotation at all
    assert torch.allclose(invariance.induced_rotation(X, 3.0 * torch.eye(4, dtype=F64)), torch.eye(4, dtype=F64), atol=1e-12)


def test_induced_rotation_needs_full_rank():
    gen = generator(11)
    with pytest.raises(ValueError):
        invariance.induced_rotation(randn(gen, 3, 6), torch.eye(6, dtype=F64))
