"""isolab.book.noise_dynamics: shared pure-noise data, layer gradients, the SGD second-moment
recursion and the growth-rate fits (Chapter 5)."""

import math

import numpy as np
import pytest
import sympy as sp
import torch

from isolab.book import noise_dynamics as nd
from isolab.book.engine import sweep
from isolab.book.problems import PureNoise


# ----------------------------------------------------------------------------- shared data
def test_shared_pure_noise_is_bitwise_pure_noise():
    nd.SharedPureNoise.clear()
    shared = nd.SharedPureNoise(n=5, depth=3, batch=4)
    plain = PureNoise(n=5, depth=3, batch=4)
    for step in (0, 7, 3, 40):  # out of order, and beyond the current store
        a, b = shared.batch(step, seed=2), plain.batch(step, seed=2)
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    Xa, Ta = shared.batches(5, 70, 2)
    Xb, Tb = plain.batches(5, 70, 2)
    assert torch.equal(Xa, Xb) and torch.equal(Ta, Tb)
    # another depth reads the same store; another seed or batch size does not
    other = nd.SharedPureNoise(n=5, depth=1, batch=4)
    assert torch.equal(other.batch(7, 2)[0], plain.batch(7, 2)[0])
    assert not torch.equal(other.batch(7, 3)[0], plain.batch(7, 2)[0])
    assert torch.equal(nd.SharedPureNoise(n=5, depth=2, batch=9).batch(1, 2)[0], PureNoise(5, 2, 9).batch(1, 2)[0])
    with pytest.raises(ValueError):
        shared.batch(-1, 0)
    with pytest.raises(ValueError):
        shared.batches(3, 3, 0)


def test_sweep_on_shared_problem_equals_plain_problem():
    nd.SharedPureNoise.clear()
    kw = dict(seeds=(0, 1), dtype=torch.float64, progress=False)
    a = sweep(nd.SharedPureNoise(n=4, depth=2, batch=3), "sgd", [0.05, 0.2], 30, **kw)
    b = sweep(PureNoise(n=4, depth=2, batch=3), "sgd", [0.05, 0.2], 30, **kw)
    np.testing.assert_array_equal(a.weight_norm, b.weight_norm)
    np.testing.assert_array_equal(a.loss, b.loss)


# ----------------------------------------------------------------------------- gradients
@pytest.mark.parametrize("depth", [1, 2, 3])
def test_layer_gradients_match_autograd(depth):
    g = torch.Generator().manual_seed(depth)
    b, n = 6, 4
    X = torch.randn(2, b, n, generator=g, dtype=torch.float64)
    Z = torch.randn(2, b, n, generator=g, dtype=torch.float64)
    Ws = [torch.randn(2, n, n, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(depth)]
    Y = X
    for W in Ws:
        Y = Y @ W
    ((Y * Z).sum() / b).backward()  # the pure noise loss, batch mean: G = Z/b
    grads = nd.layer_gradients(X, Z / b, [W.detach() for W in Ws])
    for W, gr in zip(Ws, grads):
        torch.testing.assert_close(gr, W.grad, rtol=1e-12, atol=1e-12)
    if depth == 2:  # the paper's formulas x z^T W2^T and W1^T x z^T, summed over the batch
        W1, W2 = (W.detach() for W in Ws)
        torch.testing.assert_close(grads[0], X.mT @ Z @ W2.mT / b)
        torch.testing.assert_close(grads[1], W1.mT @ X.mT @ Z / b)
    with pytest.raises(ValueError):
        nd.layer_gradients(X, Z, [])


# ----------------------------------------------------------------------------- predictions
def test_second_moment_map_against_monte_carlo():
    g = torch.Generator().manual_seed(0)
    n, b, lr, wd, draws = 5, 2, 0.4, 0.3, 400_000
    W1 = torch.randn(n, n, generator=g, dtype=torch.float64)
    W2 = 3 * torch.randn(n, n, generator=g, dtype=torch.float64)  # unbalanced on purpose
    X = torch.randn(draws, b, n, generator=g, dtype=torch.float64)
    Z = torch.randn(draws, b, n, generator=g, dtype=torch.float64)
    g1, g2 = nd.layer_gradients(X, Z / b, [W1, W2])
    a1 = ((1 - lr * wd) * W1 - lr * g1).square().sum((-2, -1)).mean()
    a2 = ((1 - lr * wd) * W2 - lr * g2).square().sum((-2, -1)).mean()
    predicted = nd.sgd_second_moment_map(n, b, lr, wd) @ torch.stack([W1.square().sum(), W2.square().sum()])
    torch.testing.assert_close(torch.stack([a1, a2]), predicted, rtol=0.01, atol=0)
    # one layer: the gradient X^T Z / b does not depend on W -> additive growth
    (g0,) = nd.layer_gradients(X, Z / b, [W1])
    a = ((1 - lr * wd) * W1 - lr * g0).square().sum((-2, -1)).mean()
    ms = nd.mean_square_norms(n, b, lr, 1, [float(W1.square().sum())], wd)
    torch.testing.assert_close(a, ms[1, 0], rtol=0.01, atol=0)


def test_mean_square_norms_recursion_and_rate():
    ms = nd.mean_square_norms(16, 1, 0.1, 50, [3.0, 5.0])
    total = ms.sum(-1)
    torch.testing.assert_close(total[1:] / total[:-1], torch.full((50,), 1 + 0.01 * 16, dtype=torch.float64))
    # the rate of the root mean square is half the log of the top eigenvalue
    top = torch.linalg.eigvalsh(nd.sgd_second_moment_map(16, 1, 0.1, 0.5)).max()
    assert math.isclose(float(nd.predicted_rate(16, 1, 0.1, 0.5)), 0.5 * math.log(top), rel_tol=1e-12)
    assert bool((nd.predicted_rate(16, 4, torch.logspace(-4, 1, 11)) > 0).all())
    ms1 = nd.mean_square_norms(4, 2, 0.5, 3, [1.0])
    torch.testing.assert_close(ms1[:, 0], torch.tensor([1.0, 3.0, 5.0, 7.0], dtype=torch.float64))
    with pytest.raises(ValueError):
        nd.mean_square_norms(4, 1, 0.1, 3, [1.0, 2.0, 3.0])


def test_weight_decay_threshold():
    lr = torch.tensor([0.01, 0.1, 0.2, 0.3], dtype=torch.float64)
    wd = nd.weight_decay_threshold(16, 1, lr)
    q_plus_c = (1 - lr[:3] * wd[:3]) ** 2 + lr[:3] ** 2 * 16
    torch.testing.assert_close(q_plus_c, torch.ones(3, dtype=torch.float64))
    assert math.isinf(float(wd[3]))  # lr^2 n / b = 1.44 >= 1: no weight decay helps
    assert float(nd.predicted_rate(16, 1, 0.1, float(wd[1]) * 1.01)) < 0 < float(nd.predicted_rate(16, 1, 0.1, float(wd[1]) * 0.99))


# ----------------------------------------------------------------------------- fits
def test_growth_rate_on_exact_exponentials_and_finite_prefix():
    t = torch.arange(101, dtype=torch.float64)
    rates = torch.tensor([0.3, -0.05, 0.0], dtype=torch.float64)
    norms = 2.0 * torch.exp(rates[:, None] * t)
    torch.testing.assert_close(nd.growth_rate(norms), rates, atol=1e-12, rtol=0)
    broken = norms[0].clone()
    broken[60:] = math.nan  # overflowed at step 60: fitted on the finite prefix
    torch.testing.assert_close(nd.growth_rate(broken), rates[0], atol=1e-12, rtol=0)
    capped = torch.exp(5.0 * t)  # exceeds max_norm after step 46
    torch.testing.assert_close(nd.growth_rate(capped), torch.tensor(5.0, dtype=torch.float64), atol=1e-9, rtol=0)
    window = torch.cat([torch.ones(50, dtype=torch.float64), torch.exp(0.1 * torch.arange(51, dtype=torch.float64))])
    assert abs(float(nd.growth_rate(window, start=50)) - 0.1) < 1e-12
    assert abs(float(nd.growth_rate(window, stop=50))) < 1e-12
    assert math.isnan(float(nd.growth_rate(torch.tensor([1.0, math.nan, 2.0, 3.0]))))  # < 3 usable steps
    assert nd.growth_rate(np.ones((2, 3, 10))).shape == (2, 3)


def test_loglog_slope_on_power_laws():
    t = torch.arange(2001, dtype=torch.float64)
    norms = torch.stack([3 * t.clamp(min=1) ** 0.5, t.clamp(min=1) ** 2.0])
    torch.testing.assert_close(nd.loglog_slope(norms, start=10), torch.tensor([0.5, 2.0], dtype=torch.float64))
    zero_start = torch.sqrt(t)  # 0 at t = 0: outside the window, must not cut it
    assert abs(float(nd.loglog_slope(zero_start, start=1)) - 0.5) < 1e-12
    with pytest.raises(ValueError):
        nd.loglog_slope(norms, start=0)


def test_total_norm_and_crossings():
    x = torch.tensor([[3.0, 4.0], [1e200, 1e200], [0.0, 0.0], [math.nan, 1.0], [math.inf, 1.0]], dtype=torch.float64)
    out = nd.total_norm(x)
    assert float(out[0]) == 5.0 and float(out[2]) == 0.0
    assert math.isclose(float(out[1]), math.sqrt(2) * 1e200, rel_tol=1e-12)
    assert math.isnan(float(out[3])) and math.isinf(float(out[4]))
    norms = torch.tensor([[1.0, 5.0, 20.0, 200.0, math.nan], [1.0, 2.0, 3.0, 4.0, 5.0]])
    steps = nd.crossing_steps(norms, [10.0, 100.0])
    assert steps.tolist() == [[2, 3], [-1, -1]]


# ----------------------------------------------------------------------------- symbolic
def test_gaussian_expectation():
    x, y, a = sp.symbols("x y a")
    assert nd.gaussian_expectation(x**4, [x, y]) == 3
    assert nd.gaussian_expectation(x**2 * y**2, [x, y]) == 1
    assert nd.gaussian_expectation(x**3 * y + x, [x, y]) == 0
    assert sp.simplify(nd.gaussian_expectation((a * x + y) ** 2, [x, y]) - (a**2 + 1)) == 0
    assert nd.gaussian_expectation(x**6, [x]) == 15
    # E||x||^2 ||z||^2 = n^2 for n = 2
    xs, zs = sp.symbols("x0:2"), sp.symbols("z0:2")
    expr = sum(v**2 for v in xs) * sum(v**2 for v in zs)
    assert nd.gaussian_expectation(expr, [*xs, *zs]) == 4
