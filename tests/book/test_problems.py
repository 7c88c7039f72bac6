"""Problem definitions: the paper's setups, seeded batches, exact compression."""

import math

import numpy as np
import pytest
import torch

from isolab import linalg, updates

from isolab.book import features
from isolab.book.problems import DeepLinearRegression, GaussianFeatures, OneStepRegression, PureNoise, derived_generator


def test_pure_noise_output_gradient_is_the_noise():
    p = PureNoise(n=5, depth=3, batch=7)
    X, Z = p.batch(0, seed=1)
    model = p.reference_model(p.initial_weights(1))
    Y = model(X).detach().requires_grad_(True)
    loss = p.reference_loss(Y, Z)
    loss.backward()
    torch.testing.assert_close(Y.grad, Z / 7)  # dL/dy_i = z_i / b: pure noise
    torch.testing.assert_close(p.output_grad(Y.detach(), Z), Z / 7)
    torch.testing.assert_close(loss.detach(), (Y * Z).sum(-1).mean().detach())
    torch.testing.assert_close(p.loss(Y.detach(), Z), loss.detach())


def test_deep_linear_regression_setup():
    p = DeepLinearRegression(n=32, depth=40, batch=128)
    W = p.initial_weights(0)
    assert W.shape == (40, 32, 32)
    assert abs(float(W.std()) * math.sqrt(32) - 1) < 0.02  # W ~ N(0, I)/sqrt(n)
    X, T = p.batch(3, seed=0)
    A = p.target_matrix(0)
    torch.testing.assert_close(T, X @ A.T)  # y = A x
    model = p.reference_model(W)
    torch.testing.assert_close(model(X), X @ torch.linalg.multi_dot(list(W)))
    torch.testing.assert_close(p.weights_of(model), W)


def test_batches_are_deterministic_and_shared():
    p = DeepLinearRegression(n=6, depth=2, batch=10)
    a, b = p.batch(7, 3), p.batch(7, 3)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(p.batch(8, 3)[0], a[0])
    assert not torch.equal(p.batch(7, 4)[0], a[0])
    Xs, Ts = p.batches(5, 9, 3)
    assert torch.equal(Xs[2], a[0]) and torch.equal(Ts[2], a[1])
    assert torch.equal(p.initial_weights(2), p.initial_weights(2))
    with pytest.raises(ValueError):
        derived_generator(-1, "data")


@pytest.mark.parametrize("problem", [
    DeepLinearRegression(n=6, depth=3, batch=40, features=GaussianFeatures(6, 30.0, 0.5)),
    PureNoise(n=5, depth=2, batch=33),
])
def test_compression_is_exact(problem):
    X, T = problem.batches(0, 3, 2)
    Xc, Tc = problem.compressed(0, 3, 2)
    assert Xc.shape[-2] == problem.rows < problem.batch_size
    torch.testing.assert_close(Xc.mT @ Xc, X.mT @ X)
    torch.testing.assert_close(Xc.mT @ Tc, X.mT @ T)
    P = torch.randn(problem.n, problem.n, dtype=torch.float64)
    torch.testing.assert_close(problem.loss(Xc @ P, Tc), problem.loss(X @ P, T))
    G, Gc = problem.output_grad(X @ P, T), problem.output_grad(Xc @ P, Tc)
    torch.testing.assert_close(Gc.mT @ Gc, G.mT @ G)  # Cov(G) is unchanged too
    torch.testing.assert_close(Xc.mT @ Gc, X.mT @ G)


def test_gaussian_features_sample_matches_isolab_features():
    """Same values at angle 0; at other angles the same distribution (the same Gram
    matrices: the two differ by a rotation of each sample, both have covariance Σ)."""
    a = GaussianFeatures(8, 100.0).sample(5, torch.Generator().manual_seed(4))
    b = features.gaussian_features(5, 8, 100.0, generator=torch.Generator().manual_seed(4))
    torch.testing.assert_close(a, b)
    f = GaussianFeatures(8, 100.0, 0.3)
    torch.testing.assert_close(f.sigma_sqrt @ f.sigma_sqrt, f.sigma)
    a = f.sample(4000, torch.Generator().manual_seed(5))
    b = features.gaussian_features(4000, 8, 100.0, 0.3, generator=torch.Generator().manual_seed(5))
    torch.testing.assert_close(a.T @ a / 4000, f.sigma, rtol=0.1, atol=0.1)
    torch.testing.assert_close(b.T @ b / 4000, f.sigma, rtol=0.1, atol=0.1)


def test_one_step_regression_first_steps():
    p = OneStepRegression(n=4, batch=200_000, condition_number=5.0, angle=0.4)
    X, Y = p.batch(0, 0)
    assert torch.equal(p.initial_weights(0), torch.zeros(1, 4, 4))
    G = p.output_grad(torch.zeros_like(Y), Y)  # W = 0: G = -2Y/(b n)
    pred = p.predicted_first_steps(0)
    # W.grad = X^T G = -2 Sigma Z^T Z Sigma A/(b n); updates.sgd_update divides by b once more
    sgd = -updates.sgd_update(X, G) * p.batch_size * 4 / 2  # ~ Sigma^2 A
    assert torch.linalg.matrix_norm(sgd - pred["sgd"]) / torch.linalg.matrix_norm(pred["sgd"]) < 0.02
    iso = -updates.iso_update(X, G)
    assert torch.linalg.matrix_norm(iso - pred["iso"]) / 2 < 0.02  # msign(Sigma A)
    torch.testing.assert_close(pred["iso"], linalg.msign(p.sigma @ p.target_matrix(0)))
    assert np.mean((torch.sign(sgd) == pred["adam"]).numpy()) > 0.9


def test_gaussian_features_scale_multiplies_the_covariance():
    base, big = GaussianFeatures(6, 10.0, 0.3), GaussianFeatures(6, 10.0, 0.3, scale=4.0)
    torch.testing.assert_close(big.sigma, 4.0 * base.sigma, rtol=1e-12, atol=0)
    torch.testing.assert_close(big.sigma_sqrt @ big.sigma_sqrt, big.sigma, rtol=1e-10, atol=1e-12)
    assert "scale" not in base.describe() and big.describe()["scale"] == 4.0 and "scale=4" in repr(big)
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="scale must be a positive number"):
            GaussianFeatures(6, 10.0, 0.0, scale=bad)
