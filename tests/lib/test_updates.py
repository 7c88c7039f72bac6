"""Tests of isolab.updates: the book's invariances and limits, against float64 oracles."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from isolab.linalg import canonical_correlations, msign, msign_newton_schulz
from isolab.updates import (
    adam_first_step,
    iso_adam_first_step,
    iso_update,
    muon_update,
    sgd_update,
    shampoo_update,
    sign_sgd_update,
    two_sided,
    weight_gradient,
)

F64 = torch.float64
FAST = settings(max_examples=25, deadline=None)
seeds = st.integers(0, 2**31 - 1)


def randn(seed, *shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=F64)


def rel(a, b):
    return ((a - b).norm() / b.norm()).item()


def svd_oracle(X, G):
    """V_x U_x^T U_g V_g^T from float64 numpy thin SVDs (full column rank assumed)."""
    Ux, _, Vxh = np.linalg.svd(X.numpy(), full_matrices=False)
    Ug, _, Vgh = np.linalg.svd(G.numpy(), full_matrices=False)
    return torch.from_numpy(Vxh.T @ Ux.T @ Ug @ Vgh)


def invertible(seed, n):
    """A random invertible matrix with condition number <= 10 (I + scaled Gaussian, rotated)."""
    Q, _ = torch.linalg.qr(randn(seed, n, n))
    R, _ = torch.linalg.qr(randn(seed + 7, n, n))
    s = torch.logspace(0, -1, n, dtype=F64)
    return (Q * s) @ R.T


ALL_UPDATES = {
    "sgd": sgd_update,
    "sign": sign_sgd_update,
    "adam": adam_first_step,
    "muon": muon_update,
    "muon_ns": lambda X, G: muon_update(X, G, exact=False),
    "shampoo": shampoo_update,
    "shampoo_damped": lambda X, G: shampoo_update(X, G, damping=0.1),
    "iso": iso_update,
    "iso_gram": lambda X, G: iso_update(X, G, route="gram"),
    "iso_damped": lambda X, G: iso_update(X, G, damping=0.1),
    "iso_adam": iso_adam_first_step,
}


# ----------------------------------------------------------------------------- simple updates
def test_simple_updates_definitions():
    X, G = randn(0, 9, 4), randn(1, 9, 3)
    g = X.T @ G / 9
    assert torch.allclose(weight_gradient(X, G), g)
    assert torch.allclose(sgd_update(X, G), g)
    assert torch.equal(sign_sgd_update(X, G), torch.sign(g))
    assert torch.allclose(adam_first_step(X, G), g / (g.abs() + 1e-8))
    assert torch.allclose(adam_first_step(X, G), torch.sign(g), atol=1e-6)
    assert torch.allclose(muon_update(X, G), msign(g))
    assert torch.allclose(muon_update(X, G, exact=False), msign_newton_schulz(g))
    left, right = randn(2, 4, 4), randn(3, 3, 3)
    assert torch.allclose(two_sided(g, left, right), left @ g @ right)


def test_weight_gradient_equals_autograd():
    X, T = randn(4, 8, 5), randn(5, 8, 3)
    W = randn(6, 5, 3).requires_grad_()
    Y = X @ W
    Y.retain_grad()
    loss = ((Y - T) ** 2).sum(1).mean()  # batch mean
    loss.backward()
    G = Y.grad * X.shape[0]  # per-sample output gradients dL_i/dY_i
    assert torch.allclose(weight_gradient(X, G), W.grad)


@FAST
@given(seeds, st.integers(1, 6), st.integers(1, 6), st.integers(1, 12))
def test_shampoo_equals_msign(seed, n, m, b):
    X, G = randn(seed, b, n), randn(seed + 1, b, m)
    g = weight_gradient(X, G)
    assert torch.allclose(shampoo_update(X, G), msign(g), atol=1e-6)


# ----------------------------------------------------------------------------- Iso: exact identities
@FAST
@given(seeds, st.integers(1, 5), st.integers(1, 5), st.integers(0, 20))
def test_iso_equals_svd_formula_all_routes(seed, n, m, extra):
    b = max(n, m) + 1 + extra
    X, G = randn(seed, b, n) + 0.5, randn(seed + 1, b, m)
    expected = svd_oracle(X, G)
    for route in ("auto", "feature", "gram"):
        assert torch.allclose(iso_update(X, G, route=route), expected, atol=1e-8), route


@FAST
@given(seeds, st.integers(2, 8), st.integers(2, 8), st.integers(1, 6), st.floats(0.0, 2.0))
def test_iso_routes_agree_with_damping_and_b_less_than_n(seed, n, m, b, damping):
    X, G = randn(seed, b, n), randn(seed + 1, b, m)
    feature = iso_update(X, G, damping, route="feature")
    gram = iso_update(X, G, damping, route="gram")
    assert torch.isfinite(feature).all()
    assert torch.allclose(feature, gram, atol=1e-8)
    assert torch.allclose(iso_update(X, G, damping), gram, atol=1e-8)
    if damping == 0.0 and b < min(n, m):
        # pseudo-inverse answer over the numerical ranks: V_x U_x^T U_g V_g^T, thin SVDs of rank b
        Ux, _, Vxh = torch.linalg.svd(X, full_matrices=False)
        Ug, _, Vgh = torch.linalg.svd(G, full_matrices=False)
        assert torch.allclose(feature, Vxh.T @ Ux.T @ Ug @ Vgh, atol=1e-8)


def test_iso_damping_matches_explicit_formula():
    X, G = randn(10, 30, 4) * torch.tensor([5.0, 1.0, 0.2, 0.1], dtype=F64), randn(11, 30, 3)
    d = 0.3

    def root(C):
        w, V = np.linalg.eigh(C.numpy() + d * np.trace(C.numpy()) / C.shape[0] * np.eye(C.shape[0]))
        return torch.from_numpy((V * w**-0.5) @ V.T)

    Cx, Cg = X.T @ X / 30, G.T @ G / 30
    expected = root(Cx) @ (X.T @ G / 30) @ root(Cg)
    for route in ("feature", "gram"):
        assert torch.allclose(iso_update(X, G, d, route=route), expected, atol=1e-10)


@FAST
@given(seeds, st.integers(1, 5), st.integers(1, 5))
def test_iso_norm_squared_is_sum_of_squared_canonical_correlations(seed, n, m):
    b = n + m + 5
    X, G = randn(seed, b, n), randn(seed + 1, b, m) + randn(seed, b, n)[:, :1]
    update = iso_update(X, G)
    rho = canonical_correlations(X, G)
    assert abs(update.norm().item() ** 2 - (rho**2).sum().item()) < 1e-8
    assert torch.allclose(torch.linalg.svdvals(update)[: rho.numel()], rho, atol=1e-8)


# ----------------------------------------------------------------------------- invariances (issue 3, item 6)
@FAST
@given(seeds, st.integers(1, 6), st.integers(1, 6))
def test_iso_norm_invariant_under_invertible_transforms(seed, n, m):
    b = max(n, m) + 4
    X, G = randn(seed, b, n), randn(seed + 1, b, m)
    A = randn(seed + 2, n, n) + 0.1 * torch.eye(n, dtype=F64)
    B = randn(seed + 3, m, m) + 0.1 * torch.eye(m, dtype=F64)
    before = iso_update(X, G).norm().item()
    after = iso_update(X @ A, G @ B).norm().item()
    assert abs(after - before) <= 1e-6 * max(before, 1e-12)


@FAST
@given(seeds, st.integers(1, 6), st.integers(1, 6))
def test_iso_orthogonal_equivariance(seed, n, m):
    b = max(n, m) + 3
    X, G = randn(seed, b, n), randn(seed + 1, b, m)
    Q, _ = torch.linalg.qr(randn(seed + 2, n, n))
    U, _ = torch.linalg.qr(randn(seed + 3, m, m))
    assert torch.allclose(iso_update(X @ Q, G @ U), Q.T @ iso_update(X, G) @ U, atol=1e-8)


def test_adam_and_sign_invariant_only_to_diagonal_transforms():
    """Adam's first step ~ sign(g) is unchanged by positive diagonal A, B but not by general A.

    ||sign(g)||_F = sqrt(n m) whatever g is, so the Frobenius norm cannot tell; we compare
    the singular values (every unitarily invariant norm), which Iso preserves for *all*
    invertible A, B.
    """
    n, m, b = 6, 5, 200
    X, G = randn(40, b, n), randn(41, b, m) + 0.5 * randn(40, b, n)[:, :m]
    Dx = torch.diag(torch.rand(n, generator=torch.Generator().manual_seed(1), dtype=F64) * 10 + 0.1)
    Dg = torch.diag(torch.rand(m, generator=torch.Generator().manual_seed(2), dtype=F64) * 10 + 0.1)
    A, B = invertible(42, n), invertible(43, m)
    for update in (adam_first_step, sign_sgd_update):
        base = torch.linalg.svdvals(update(X, G))
        assert torch.allclose(update(X @ Dx, G @ Dg), update(X, G), atol=1e-6)  # elementwise identical
        general = torch.linalg.svdvals(update(X @ A, G @ B))
        assert (general - base).abs().max() > 0.3, (base, general)
        assert abs(torch.linalg.matrix_norm(update(X @ A, G @ B), ord=2) - base[0]) > 0.3
    iso = torch.linalg.svdvals(iso_update(X, G))
    assert torch.allclose(torch.linalg.svdvals(iso_update(X @ A, G @ B)), iso, atol=1e-8)
    assert torch.allclose(torch.linalg.svdvals(iso_update(X @ Dx, G @ Dg)), iso, atol=1e-8)


def _loglog_slope(bs, values):
    return float(np.polyfit(np.log(bs), np.log(values), 1)[0])


def test_zero_true_gradient_noise_falls_like_one_over_sqrt_b():
    """X and G independent: E[g] = 0, so SGD's and Iso's update norms are pure noise ~ b^{-1/2}.

    Adam's first step normalizes every entry to ~ +-1: its norm does not fall with b.
    """
    n, m, bs, seeds_ = 8, 6, [64, 256, 1024, 4096], range(4)
    norms = {"sgd": [], "iso": [], "adam": []}
    for b in bs:
        acc = {k: 0.0 for k in norms}
        for s in seeds_:
            X, G = randn(100 + s, b, n), randn(200 + s, b, m)
            acc["sgd"] += sgd_update(X, G).norm().item() / len(seeds_)
            acc["iso"] += iso_update(X, G).norm().item() / len(seeds_)
            acc["adam"] += adam_first_step(X, G).norm().item() / len(seeds_)
        for k in norms:
            norms[k].append(acc[k])
    assert abs(_loglog_slope(bs, norms["sgd"]) + 0.5) < 0.1, norms["sgd"]
    assert abs(_loglog_slope(bs, norms["iso"]) + 0.5) < 0.1, norms["iso"]
    assert abs(_loglog_slope(bs, norms["adam"])) < 0.1, norms["adam"]


def _regression_first_step(seed, n, m, b=64):
    """X = Z Sigma with Z^T Z = b I exactly, targets X A, W = 0: G = X A (up to sign)."""
    Z, _ = torch.linalg.qr(randn(seed, b, n))
    Z = Z * math.sqrt(b)
    L = randn(seed + 1, n, n)
    Sigma = L @ L.T / n + 0.2 * torch.eye(n, dtype=F64)  # symmetric positive definite
    A = randn(seed + 2, n, m)
    X = Z @ Sigma
    return X, X @ A, Sigma, A


@FAST
@given(seeds, st.integers(1, 6), st.integers(1, 6))
def test_linear_regression_first_step(seed, n, m):
    m = min(m, n)  # Cov(G) = A^T Sigma^2 A is invertible only for m <= n
    X, G, Sigma, A = _regression_first_step(seed, n, m)
    assert torch.allclose(sgd_update(X, G), Sigma @ Sigma @ A, atol=1e-9)
    assert torch.allclose(iso_update(X, G), msign(Sigma @ A), atol=1e-7)
    assert torch.allclose(iso_update(X, G, route="gram"), msign(Sigma @ A), atol=1e-7)
    g = Sigma @ Sigma @ A
    assert torch.allclose(adam_first_step(X, G), g / (g.abs() + 1e-8), atol=1e-9)
    assert torch.equal(sign_sgd_update(X, G), torch.sign(g)) or (g.abs().min() < 1e-9)


# ----------------------------------------------------------------------------- batching, zeros, validation
@pytest.mark.parametrize("name", sorted(ALL_UPDATES))
def test_batched_inputs_match_a_loop(name):
    update = ALL_UPDATES[name]
    X, G = randn(50, 2, 3, 7, 4), randn(51, 2, 3, 7, 5)
    out = update(X, G)
    assert out.shape == (2, 3, 4, 5)
    for i in range(2):
        for j in range(3):
            assert torch.allclose(out[i, j], update(X[i, j], G[i, j]), atol=1e-10), (i, j)


@pytest.mark.parametrize("name", sorted(ALL_UPDATES))
@pytest.mark.parametrize("b", [3, 10])
def test_zero_gradient_gives_zero_update(name, b):
    X = randn(60, b, 6)
    out = ALL_UPDATES[name](X, torch.zeros(b, 4, dtype=F64))
    assert torch.equal(out, torch.zeros(6, 4, dtype=F64))


@pytest.mark.parametrize("name", sorted(ALL_UPDATES))
def test_updates_preserve_dtype_and_do_not_modify_inputs(name):
    X, G = randn(61, 12, 4).float(), randn(62, 12, 3).float()
    X0, G0 = X.clone(), G.clone()
    out = ALL_UPDATES[name](X, G)
    assert out.dtype == torch.float32 and torch.isfinite(out).all()
    assert torch.equal(X, X0) and torch.equal(G, G0)


def test_updates_validate_arguments():
    X, G = torch.ones(4, 3), torch.ones(5, 2)
    with pytest.raises(ValueError, match="batch size"):
        sgd_update(X, G)
    with pytest.raises(ValueError, match="route"):
        iso_update(X, torch.ones(4, 2), route="fast")
    with pytest.raises(ValueError, match="damping"):
        iso_update(X, torch.ones(4, 2), damping=-0.1)
    with pytest.raises(ValueError, match="eps"):
        adam_first_step(X, torch.ones(4, 2), eps=0.0)
    with pytest.raises(ValueError, match="left"):
        two_sided(torch.ones(3, 2), torch.eye(2), torch.eye(2))
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        sgd_update(torch.ones(4), torch.ones(4))
