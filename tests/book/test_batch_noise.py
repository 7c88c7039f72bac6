"""Tests of isolab.book.batch_noise against independent oracles: direct sampling, Monte Carlo,
autograd, and a hand-written Adam recurrence."""

import math

import numpy as np
import pytest
import torch

from isolab.book import batch_noise as bn
from isolab import updates
from isolab.book.problems import DeepLinearRegression, GaussianFeatures, OneStepRegression, PureNoise

F64 = torch.float64


@pytest.fixture(autouse=True)
def one_thread():
    """Small tensors: one thread is faster on a shared machine (restored afterwards)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def gen(seed):
    return torch.Generator().manual_seed(seed)


def ks_statistic(a, b):
    """Two-sample Kolmogorov-Smirnov distance (numpy; no scipy in the environment)."""
    a, b = np.sort(np.asarray(a)), np.sort(np.asarray(b))
    grid = np.concatenate([a, b])
    return np.max(np.abs(np.searchsorted(a, grid, "right") / a.size - np.searchsorted(b, grid, "right") / b.size))


# ----------------------------------------------------------------------------- equivalent batches
def test_equivalent_batch_is_an_ordinary_sample_when_small():
    Z = bn.equivalent_batch(5, 7, generator=gen(1), sample_shape=(3,))
    torch.testing.assert_close(Z, torch.randn(3, 5, 7, generator=gen(1), dtype=F64), rtol=0, atol=0)
    assert bn.equivalent_batch(50, 7, generator=gen(1), compress=False).shape == (50, 7)
    assert bn.equivalent_batch(50, 7, generator=gen(1)).shape == (7, 7)


def test_equivalent_batch_covariance_has_the_wishart_moments():
    # Z^T Z / b for a real b x d Gaussian: mean I, Var(diag) = 2/b, Var(off-diag) = 1/b
    b, d, N = 40, 3, 40_000
    Z = bn.equivalent_batch(b, d, generator=gen(2), sample_shape=(N,))
    C = Z.mT @ Z / Z.shape[-2]
    assert (C.mean(0) - torch.eye(d, dtype=F64)).abs().max() < 0.01
    assert abs(C[:, 0, 0].var().item() * b / 2 - 1) < 0.04
    assert abs(C[:, 0, 1].var().item() * b - 1) < 0.04
    # the trace is chi^2_{b d} / b exactly: mean d, variance 2 d / b
    tr = C.diagonal(dim1=-2, dim2=-1).sum(-1)
    assert abs(tr.var().item() * b / (2 * d) - 1) < 0.04


def test_noise_batch_updates_have_the_distribution_of_a_real_batch():
    # compare the top canonical correlation (Iso's spectral norm) and the SGD norm of a
    # real 60-row batch with those of its 5-row stand-in: same distribution (KS test)
    n, m, b, N = 2, 3, 60, 4000
    real = bn.noise_batch(n, m, b, generator=gen(3), sample_shape=(N,), compress=False)
    fake = bn.noise_batch(n, m, b, generator=gen(4), sample_shape=(N,))
    assert fake[0].shape == (N, n + m, n) and real[0].shape == (N, b, n)
    for f in (updates.sgd_update, updates.iso_update, lambda X, G: updates.adam_first_step(X, G, eps=0.05)):
        r = torch.linalg.matrix_norm(f(*real), ord=2).numpy()
        c = torch.linalg.matrix_norm(f(*fake), ord=2).numpy()
        assert ks_statistic(r, c) < 1.63 * math.sqrt(2 / N)  # 1% level


def test_noise_norms_match_the_exact_expectations():
    n, m, N = 3, 5, 4000
    for b in (1, 2, 3, 8, 40):
        X, G = bn.noise_batch(n, m, b, generator=gen(b), sample_shape=(N,))
        sgd = torch.linalg.matrix_norm(updates.sgd_update(X, G)).square().mean().item()
        assert abs(sgd * b / (n * m) - 1) < 0.08  # E||X^T G / b||^2 = n m / b for every b
        iso = torch.linalg.matrix_norm(updates.iso_update(X, G)).square()
        if b <= min(n, m):
            torch.testing.assert_close(iso, torch.full_like(iso, float(b)))  # all canonical correlations 1
        elif b >= max(n, m):
            assert abs(iso.mean().item() * b / (n * m) - 1) < 0.06  # E tr(P_X P_G) = n m / b


def test_equivalent_batch_huge_sizes_and_validation():
    Z = bn.equivalent_batch(10**12, 4, generator=gen(5), sample_shape=(200,))
    C = Z.mT @ Z / 4
    assert torch.isfinite(C).all()
    assert (C - torch.eye(4, dtype=F64)).abs().max() < 1e-4  # deviations ~ 1e-6
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError):
            bn.equivalent_batch(bad, 3)
    with pytest.raises(ValueError):
        bn.equivalent_batch(3, 0)
    with pytest.raises(ValueError):
        bn.equivalent_batch(3, 2, sample_shape=(-1,))


@pytest.mark.parametrize("problem", [
    DeepLinearRegression(n=3, depth=1, batch=500, features=GaussianFeatures(3, 20.0, 0.3)),
    OneStepRegression(n=3, batch=500, condition_number=4.0, angle=0.2),
    PureNoise(n=3, depth=1, batch=500),
], ids=["regression", "one-step", "pure-noise"])
def test_equivalent_problem_batch_matches_the_problem(problem):
    # the loss sees a batch only through row averages: X^T X / rows and X^T T / rows
    N = 1000
    real = problem.batches(0, N, 0)
    fake = [torch.stack(z) for z in zip(*(bn.equivalent_problem_batch(problem, t, 0) for t in range(N)))]
    assert fake[0].shape == (N, 3 if problem.loss_kind == "mse" else 6, 3)

    def stats(X, T):
        r = X.shape[-2]
        return torch.cat([(X.mT @ X / r).flatten(1), (X.mT @ T / r).flatten(1)], 1)

    sr, sf = stats(*real), stats(*fake)
    assert ((sr.mean(0) - sf.mean(0)).abs() / sr.std(0)).max() < 6 / math.sqrt(N)
    assert ((sr.std(0) / sf.std(0)) - 1).abs().max() < 0.12
    for j in (0, 1, 10):
        assert ks_statistic(sr[:, j], sf[:, j]) < 1.8 * math.sqrt(2 / N)
    # and the loss of a stand-in batch is the loss computed from those statistics
    W = torch.randn(1, 3, 3, generator=gen(6), dtype=F64)
    X, T = fake[0][0], fake[1][0]
    loss = problem.reference_loss(problem.reference_model(W)(X), T)
    if problem.loss_kind == "mse":
        D = W[0] - problem.target_map(0)
        expected = torch.trace(D.T @ (X.T @ X / X.shape[0]) @ D) / 3
    else:
        expected = torch.trace(W[0].T @ (X.T @ T / X.shape[0]))
    torch.testing.assert_close(loss.detach(), expected)


# ----------------------------------------------------------------------------- moments
def test_outer_product_moments_against_monte_carlo():
    g = gen(7)
    d, p, q, N = 4, 3, 2, 400_000
    A = torch.randn(d, d, generator=g, dtype=F64)
    cov = A @ A.T / d + 0.2 * torch.eye(d, dtype=F64)
    U = torch.randn(d, p, generator=g, dtype=F64)
    V = torch.randn(d, q, generator=g, dtype=F64)
    x = torch.randn(N, d, generator=g, dtype=F64) @ torch.linalg.cholesky(cov).T
    samples = (x @ U)[:, :, None] * (x @ V)[:, None, :]
    mean, var = bn.outer_product_moments(U, V, cov)
    torch.testing.assert_close(samples.mean(0), mean, atol=0.05 * var.sqrt().max().item(), rtol=0)
    assert ((samples.var(0) / var) - 1).abs().max() < 0.03
    z = torch.randn(N, d, generator=g, dtype=F64)
    samples = (x @ U)[:, :, None] * (z @ V)[:, None, :]
    mean, var = bn.outer_product_moments(U, V, cov, torch.eye(d, dtype=F64))
    assert torch.equal(mean, torch.zeros_like(mean))
    assert ((samples.var(0) / var) - 1).abs().max() < 0.03


@pytest.mark.parametrize("make", [
    lambda b: DeepLinearRegression(n=3, depth=2, batch=b, features=GaussianFeatures(3, 5.0, 0.4)),
    lambda b: OneStepRegression(n=3, batch=b, condition_number=3.0),
    lambda b: PureNoise(n=3, depth=2, batch=b, init_scale=0.8),
], ids=["deep-regression", "one-step", "pure-noise"])
def test_gradient_moments_against_per_sample_autograd(make):
    N = 60_000
    problem = make(N)
    W = problem.initial_weights(0) + (0.3 if problem.init_scale == 0 else 0.0)
    mean, var = bn.gradient_moments(problem, W, seed=0)
    X, T = problem.batch(0, 0)
    model = problem.reference_model(W)
    Ys = [X]
    for lin in model:
        Ys.append(lin(Ys[-1]))
        Ys[-1].retain_grad()
    (problem.reference_loss(Ys[-1], T) * N).backward()  # summed loss: Y.grad holds dL_i/dy
    for layer in range(problem.depth):
        per_sample = Ys[layer].detach()[:, :, None] * Ys[layer + 1].grad[:, None, :]  # x_l g_l^T
        torch.testing.assert_close(per_sample.sum(0), model[layer].weight.grad.T)
        se = (var[layer] / N).sqrt()
        assert ((per_sample.mean(0) - mean[layer]).abs() / se).max() < 5
        assert ((per_sample.var(0) / var[layer]) - 1).abs().max() < 0.1


def test_gradient_moments_mean_is_the_population_gradient():
    p = DeepLinearRegression(n=4, depth=3, batch=1, features=GaussianFeatures(4, 8.0, 0.5))
    W = p.initial_weights(2).requires_grad_(True)
    Sigma = p.features.sigma
    M = p.target_map(2)
    D = torch.linalg.multi_dot(list(W)) - M
    (torch.trace(D.T @ Sigma @ D) / p.n).backward()  # E ||x (P - M)||^2 / n
    mean, _ = bn.gradient_moments(p, W.detach(), seed=2)
    torch.testing.assert_close(mean, W.grad, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError):
        bn.gradient_moments(p, W.detach()[:2], seed=2)


def test_balles_hennig_formula():
    mu = torch.tensor([2.0, -3.0, 0.5, 0.0], dtype=F64)
    s2 = torch.tensor([0.0, 9.0, 0.0, 0.0], dtype=F64)
    out = bn.balles_hennig(mu, s2)
    torch.testing.assert_close(out, torch.tensor([1.0, -1 / math.sqrt(2), 1.0, 0.0], dtype=F64))
    mu = torch.randn(50, generator=gen(8), dtype=F64)
    for s2 in (1e-2, 1.0, 100.0):
        torch.testing.assert_close(bn.balles_hennig(mu, torch.full_like(mu, s2)),
                                   torch.sign(mu) / torch.sqrt(1 + s2 / mu.square()))


# ----------------------------------------------------------------------------- real Adam
def adam_oracle(grads, b1, b2, eps):
    """Adam's directions by the textbook recurrence, in numpy."""
    m = np.zeros(grads.shape[1:])
    v = np.zeros(grads.shape[1:])
    out = []
    for t, g in enumerate(grads.numpy(), start=1):
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        out.append((m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps))
    return torch.from_numpy(np.stack(out))


def test_adam_directions_is_the_adam_recurrence_and_lanes_are_independent():
    grads = torch.randn(30, 2, 3, 4, generator=gen(9), dtype=F64) * torch.logspace(-6, 0, 4, dtype=F64)
    for betas, eps in [((0.9, 0.999), 1e-8), ((0.0, 0.5), 1e-3), ((0.95, 0.9), 1e-5)]:
        d = bn.adam_directions(grads, betas=betas, eps=eps)
        torch.testing.assert_close(d, adam_oracle(grads, *betas, eps), rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(bn.adam_directions(grads[:, 1, 2], betas=betas, eps=eps), d[:, 1, 2],
                                   rtol=0, atol=0)
    with pytest.raises(ValueError):
        bn.adam_directions(torch.zeros(0, 3))


def test_adam_run_records_real_adam_steps():
    p = DeepLinearRegression(n=4, depth=1, batch=32, features=GaussianFeatures(4, 10.0))
    run = bn.adam_run(p, 1e-2, 12, seed=1)
    assert run.directions.shape == (12, 1, 4, 4)
    torch.testing.assert_close(run.displacements, 1e-2 * run.directions, rtol=1e-9, atol=1e-15)
    X, T = p.batch(0, 1)
    G = 2 * (X @ p.initial_weights(1)[0] - T) / p.n  # per-sample dL_i/dy for the mse loss
    torch.testing.assert_close(run.directions[0, 0], updates.adam_first_step(X, G), rtol=1e-9, atol=1e-12)
    mean0, var0 = bn.gradient_moments(p, p.initial_weights(1), seed=1)
    torch.testing.assert_close(run.true_gradients[0], mean0)
    torch.testing.assert_close(run.variances[0], var0)
    # the direction after step t is that of torch.optim.Adam's own step
    later = bn.adam_run(p, 1e-2, 12, seed=1, record_from=7)
    torch.testing.assert_close(later.directions, run.directions[7:], rtol=0, atol=0)


def test_adam_run_with_zero_lr_keeps_the_weights_and_tends_to_balles_hennig():
    p = DeepLinearRegression(n=3, depth=1, batch=8, features=GaussianFeatures(3, 4.0))
    run = bn.adam_run(p, 0.0, 1500, seed=0, betas=(0.98, 0.999), record_from=300, equivalent_batches=True)
    assert torch.equal(run.displacements, torch.zeros_like(run.displacements))
    assert torch.equal(run.true_gradients[0], run.true_gradients[-1])
    predicted = bn.balles_hennig(run.true_gradients[0], run.variances[0] / p.batch_size)
    # the time average of m_hat / sqrt(v_hat) approaches mu / sqrt(mu^2 + s^2 / b)
    assert (run.directions.mean(0) - predicted).abs().max() < 0.1
    with pytest.raises(ValueError):
        bn.adam_run(p, -1.0, 3)
    with pytest.raises(ValueError):
        bn.adam_run(p, 1e-3, 3, record_from=3)


# ----------------------------------------------------------------------------- predictions and measurements
def test_adam_first_step_moment_against_monte_carlo_and_limits():
    g = torch.randn(400_000, generator=gen(10), dtype=F64)
    eps = 1e-3
    for s in (1e-5, 1e-3, 1e-1):
        for power in (1.0, 2.0):
            mc = ((s * g).abs() / ((s * g).abs() + eps)).pow(power).mean().item()
            assert abs(bn.adam_first_step_moment(s, eps, power).item() / mc - 1) < 5e-3
    tiny = bn.adam_first_step_moment(torch.tensor([1e-9]), 1.0)
    assert abs(tiny.item() / 1e-18 - 1) < 1e-3  # E[(s g / eps)^2] = s^2 / eps^2
    assert abs(bn.adam_first_step_moment(1e9, 1.0).item() - 1) < 1e-6
    with pytest.raises(ValueError):
        bn.adam_first_step_moment(1.0, 0.0)


def test_distance_to_sign_and_slopes():
    mu = torch.randn(5, 6, 7, generator=gen(11), dtype=F64)
    torch.testing.assert_close(bn.distance_to_sign(torch.sign(mu), mu), torch.zeros(5, dtype=F64))
    torch.testing.assert_close(bn.distance_to_sign(torch.zeros_like(mu), mu), torch.ones(5, dtype=F64))
    x = np.array([1.0, 10.0, 100.0, 1000.0])
    y = torch.from_numpy(np.stack([3.0 * x**-0.5, 0.5 * x**0.25]))
    torch.testing.assert_close(bn.loglog_slopes(x, y), torch.tensor([-0.5, 0.25], dtype=F64))
    with pytest.raises(ValueError):
        bn.loglog_slopes([1.0], torch.ones(1))
