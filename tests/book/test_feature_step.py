"""isolab.book.feature_step: ΔY = -η X Xᵀ G and its alignment with -G, against autograd."""

import math

import pytest
import torch

from isolab.book import feature_step
from isolab.book.seeding import generator


def _data(b=9, d_in=6, d_out=4, seed=0):
    g = generator(seed)
    return (torch.randn(b, d_in, generator=g, dtype=torch.float64),
            torch.randn(b, d_out, generator=g, dtype=torch.float64))


def test_feature_change_matches_a_real_gradient_step():
    X, T = _data()
    W = torch.randn(6, 4, dtype=torch.float64, generator=generator(3), requires_grad=True)
    Y = X @ W
    Y.retain_grad()
    torch.sin(Y - T).sum().backward()
    with torch.no_grad():
        measured = X @ (W - 0.3 * W.grad) - X @ W
    assert torch.allclose(measured, feature_step.feature_change(X, Y.grad, 0.3), atol=1e-13)


def test_feature_change_with_bias_matches_nn_linear():
    X, T = _data(seed=1)
    layer = torch.nn.Linear(6, 4, dtype=torch.float64)
    Y = layer(X)
    Y.retain_grad()
    (Y - T).square().sum().backward()
    with torch.no_grad():
        for p in layer.parameters():
            p -= 0.01 * p.grad
        measured = layer(X) - Y
    assert torch.allclose(measured, feature_step.feature_change(X, Y.grad, 0.01, bias=True), atol=1e-13)
    assert not torch.allclose(measured, feature_step.feature_change(X, Y.grad, 0.01, bias=False), atol=1e-6)


def test_single_sample_factor_is_norm_squared_plus_one():
    x = torch.tensor([[1.0, 2.0, -2.0]], dtype=torch.float64)   # ||x||^2 = 9
    g = torch.tensor([[0.5, -1.0]], dtype=torch.float64)
    assert torch.allclose(feature_step.feature_change(x, g, 1.0, bias=True), -10 * g)


def test_orthonormal_rows_give_perfect_alignment():
    Q, _ = torch.linalg.qr(torch.randn(10, 4, generator=generator(4), dtype=torch.float64))
    G = torch.randn(4, 3, generator=generator(5), dtype=torch.float64)
    assert feature_step.feature_alignment(Q.T, G).item() == pytest.approx(1.0, abs=1e-12)


def test_alignment_is_nonnegative_and_bounded_by_rank_when_batch_exceeds_width():
    X, G = _data(b=64, d_in=8, d_out=5, seed=6)
    cos = feature_step.feature_alignment(X, G).item()
    P = X @ torch.linalg.solve(X.T @ X, X.T)
    bound = (torch.linalg.matrix_norm(P @ G) / torch.linalg.matrix_norm(G)).item()
    assert 0 <= cos <= bound + 1e-12
    assert cos < 0.6


def test_alignment_is_batched_and_invariant_to_rotating_inputs():
    g = generator(7)
    X = torch.randn(3, 5, 8, generator=g, dtype=torch.float64)
    G = torch.randn(3, 5, 2, generator=g, dtype=torch.float64)
    Q, _ = torch.linalg.qr(torch.randn(8, 8, generator=g, dtype=torch.float64))
    batched = feature_step.feature_alignment(X, G)
    assert batched.shape == (3,)
    for i in range(3):
        assert batched[i].item() == pytest.approx(feature_step.feature_alignment(X[i], G[i]).item(), rel=1e-13)
    assert torch.allclose(feature_step.feature_alignment(X @ Q, G), batched, rtol=1e-12)


def test_cosine_of_a_zero_matrix_is_nan_not_a_number():
    A = torch.zeros(3, 2, dtype=torch.float64)
    B = torch.ones(3, 2, dtype=torch.float64)
    assert math.isnan(feature_step.cosine_similarity(A, B).item())


def test_mismatched_shapes_are_rejected():
    with pytest.raises(ValueError, match="batch"):
        feature_step.feature_change(torch.zeros(4, 3), torch.zeros(5, 2), 0.1)
    with pytest.raises(ValueError, match="shapes differ"):
        feature_step.cosine_similarity(torch.zeros(2, 2), torch.zeros(2, 3))
