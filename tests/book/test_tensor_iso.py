"""Tests of isolab.book.tensor_iso: Iso for bilinear layers, the exponent family, K-FAC and SOAP."""

import numpy as np
import pytest
import torch

from isolab.linalg import msign
from isolab.book.tensor_iso import (
    BilinearLayer,
    bilinear_gradient,
    kfac_update,
    mode_multiply,
    power_update,
    soap_step,
    tensor_iso_update,
    tensor_iso_update_modes,
)
from isolab.updates import iso_update, sgd_update

F64 = torch.float64


def randn(seed, *shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=F64)


def rel(a, b):
    return ((a - b).norm() / b.norm()).item()


def orthogonal(seed, n):
    Q, R = torch.linalg.qr(randn(seed, n, n))
    return Q * torch.sign(torch.diagonal(R))


def invertible(seed, n, kappa=30.0):
    s = torch.logspace(0, -np.log10(kappa), n, dtype=F64)
    return (orthogonal(seed, n) * s) @ orthogonal(seed + 1, n).T


def triple(seed, batch=40, n=5, m=4, p=3):
    return randn(seed, batch, n), randn(seed + 1, batch, m) + 0.5, randn(seed + 2, batch, p)


def svd_whitened(T):
    """sqrt(batch) U V^T from a numpy SVD: the whitened samples T Cov(T)^{-1/2}, independently."""
    U, _, Vh = np.linalg.svd(T.numpy(), full_matrices=False)
    return torch.from_numpy(U @ Vh) * T.shape[0] ** 0.5


# ----------------------------------------------------------------------------- bilinear layer
def test_gradient_tensor_matches_autograd():
    A, B, G = triple(0)
    layer = BilinearLayer(5, 4, 3, dtype=F64, generator=torch.Generator().manual_seed(9))
    c = layer(A, B)
    target = randn(3, *c.shape)
    loss = torch.log(torch.cosh(c - target)).sum(-1).mean()  # batch-mean loss
    c.retain_grad()
    loss.backward()
    per_sample = c.grad * A.shape[0]                          # dL_r/dc_r
    expected = sum(torch.einsum("i,j,k->ijk", a, b, g) for a, b, g in zip(A, B, per_sample)) / A.shape[0]
    assert torch.allclose(layer.weight.grad, expected, rtol=0, atol=1e-13)
    assert torch.allclose(bilinear_gradient(A, B, per_sample), expected, rtol=0, atol=1e-13)


def test_update_matches_mode_products_and_svd_oracle():
    A, B, G = triple(1)
    U = tensor_iso_update(A, B, G)
    assert rel(U, tensor_iso_update_modes(A, B, G)) < 1e-10
    oracle = bilinear_gradient(svd_whitened(A), svd_whitened(B), svd_whitened(G))
    assert rel(U, oracle) < 1e-10
    damped = tensor_iso_update(A, B, G, damping=0.3)
    assert rel(damped, tensor_iso_update_modes(A, B, G, damping=0.3)) < 1e-10
    assert damped.norm() < U.norm()  # damping shrinks every whitening factor


@pytest.mark.parametrize("seed", range(4))
def test_norm_invariant_under_invertible_transforms(seed):
    A, B, G = triple(10 * seed)
    T1, T2, T3 = invertible(seed, 5), invertible(seed + 20, 4), invertible(seed + 40, 3)
    U = tensor_iso_update(A, B, G)
    V = tensor_iso_update(A @ T1, B @ T2, G @ T3)
    assert abs(V.norm() / U.norm() - 1) <= 1e-6
    # the plain gradient tensor is not invariant (the test can fail)
    g0, g1 = bilinear_gradient(A, B, G), bilinear_gradient(A @ T1, B @ T2, G @ T3)
    assert abs(g1.norm() / g0.norm() - 1) > 0.05
    # damping breaks exact invariance
    Ud, Vd = tensor_iso_update(A, B, G, damping=0.5), tensor_iso_update(A @ T1, B @ T2, G @ T3, damping=0.5)
    assert abs(Vd.norm() / Ud.norm() - 1) > 1e-4


def test_norm_invariant_with_fewer_samples_than_features():
    A, B, G = triple(5, batch=3, n=6, m=4, p=5)  # rank-deficient covariances: pseudo-inverse roots
    U = tensor_iso_update(A, B, G)
    V = tensor_iso_update(A @ invertible(1, 6), B @ invertible(2, 4), G @ invertible(3, 5))
    assert abs(V.norm() / U.norm() - 1) <= 1e-6


def test_orthogonal_equivariance():
    A, B, G = triple(7)
    Q1, Q2, Q3 = orthogonal(1, 5), orthogonal(2, 4), orthogonal(3, 3)
    U = tensor_iso_update(A, B, G)
    expected = mode_multiply(mode_multiply(mode_multiply(U, Q1, 0), Q2, 1), Q3, 2)
    assert rel(tensor_iso_update(A @ Q1, B @ Q2, G @ Q3), expected) < 1e-10


def test_reduces_to_matrix_iso():
    A, _, G = triple(8)
    ones = torch.ones(A.shape[0], 1, dtype=F64)
    U = tensor_iso_update(A, ones, G)
    assert U.shape == (5, 1, 3)
    assert rel(U[:, 0, :], iso_update(A, G)) < 1e-10
    # relative damping also shrinks the trivial factor: Cov(b) = 1 -> (1 + 0.2)^{-1/2}
    damped = tensor_iso_update(A, ones, G, damping=0.2)[:, 0, :] * 1.2**0.5
    assert rel(damped, iso_update(A, G, damping=0.2)) < 1e-10


def test_batched_leading_dims():
    A, B, G = (torch.stack([t, 2 * t]) for t in triple(11))
    U = tensor_iso_update(A, B, G)
    assert U.shape == (2, 5, 4, 3)
    assert rel(U[0], tensor_iso_update(A[0], B[0], G[0])) < 1e-10
    assert rel(U[1], U[0]) < 1e-10  # scaling the samples does not change Iso


def test_shape_errors():
    A, B, G = triple(0)
    with pytest.raises(ValueError):
        tensor_iso_update(A[:-1], B, G)
    with pytest.raises(ValueError):
        mode_multiply(randn(0, 2, 3, 4), randn(1, 2, 2), 1)


# ----------------------------------------------------------------------------- matrix family
def test_power_family_endpoints_and_invariances():
    X, G = randn(0, 64, 6) @ invertible(0, 6), randn(1, 64, 4) @ invertible(1, 4)
    assert torch.allclose(power_update(X, G, 0.0), sgd_update(X, G))
    assert rel(power_update(X, G, 0.5), iso_update(X, G)) < 1e-10
    Cx, Cg = X.T @ X / 64, G.T @ G / 64
    K = torch.linalg.solve(Cx, sgd_update(X, G)) @ torch.linalg.inv(Cg)
    assert rel(kfac_update(X, G), K) < 1e-10
    A, Bm = invertible(5, 6), invertible(6, 4)
    # K-FAC transforms like the weights: A^{-1} K B^{-T}
    expected = torch.linalg.solve(A, K) @ torch.linalg.inv(Bm).T
    assert rel(kfac_update(X @ A, G @ Bm), expected) < 1e-8
    # only p = 1/2 keeps the norm
    for p, invariant in ((0.25, False), (0.5, True), (1.0, False)):
        ratio = (power_update(X @ A, G @ Bm, p).norm() / power_update(X, G, p).norm()).item()
        assert (abs(ratio - 1) < 1e-8) == invariant


# ----------------------------------------------------------------------------- SOAP
def test_soap_first_step_is_msign():
    # Q_L^T g Q_R is diagonal up to rounding; Adam's g/(|g| + eps) turns the rounding-level
    # off-diagonal entries into ~1e-16/eps: with the default eps = 1e-8 that is ~1e-8
    g = randn(0, 5, 5)
    direction = soap_step(g, {})
    assert rel(direction, msign(g)) < 1e-6


def test_soap_is_adam_in_a_fixed_basis():
    """With the basis frozen at the identity (no refresh after a diagonal first gradient), SOAP is Adam."""
    grads = [randn(i, 5, 3) for i in range(6)]
    first = torch.zeros(5, 3, dtype=F64)
    first[0, 0], first[1, 1], first[2, 2] = 3.0, 2.0, 1.0  # eigenvectors = coordinate axes
    grads[0] = first
    p = torch.zeros(5, 3, dtype=F64, requires_grad=True)
    adam = torch.optim.Adam([p], lr=1.0)
    state = {}
    for g in grads:
        before = p.detach().clone()
        p.grad = g.clone()
        adam.step()
        d = soap_step(g, state, interval=1000)
        d_adam = before - p.detach()
        assert torch.allclose(d, d_adam, atol=1e-10)


def test_soap_rotation_equivariance():
    Q, U = orthogonal(3, 4), orthogonal(4, 4)
    s1, s2 = {}, {}
    for t in range(12):
        g = randn(100 + t, 4, 4)
        d1 = soap_step(g, s1, interval=5)
        d2 = soap_step(Q @ g @ U, s2, interval=5)
        assert rel(d2, Q @ d1 @ U) < 1e-6  # rounding / eps, see test_soap_first_step_is_msign


# ----------------------------------------------------------------------------- Chapter 12's helpers
from isolab import updates as _updates  # noqa: E402
from isolab.book.tensor_iso import (  # noqa: E402
    COST_METHODS,
    coordinate_ratios,
    extra_flops,
    forward_backward_flops,
    random_transform,
    shampoo_after,
)


def test_random_transform_has_the_condition_number_and_unit_determinant():
    gen = torch.Generator().manual_seed(0)
    T = random_transform(6, 100.0, gen, (3,))
    assert T.shape == (3, 6, 6)
    s = torch.linalg.svdvals(T)
    assert torch.allclose(s[:, 0] / s[:, -1], torch.full((3,), 100.0, dtype=F64), rtol=1e-10)
    assert torch.allclose(torch.linalg.det(T).abs(), torch.ones(3, dtype=F64), rtol=1e-10)
    assert not torch.allclose(T[0], T[1])  # independent draws
    with pytest.raises(ValueError, match="kappa"):
        random_transform(4, 0.5, gen)
    with pytest.raises(ValueError, match="n must be"):
        random_transform(0, 10.0, gen)


def test_coordinate_ratios_show_iso_keeps_size_and_kfac_keeps_the_effect():
    gen = torch.Generator().manual_seed(1)
    X, G = randn(2, 128, 5), randn(3, 128, 3)
    A, B = random_transform(5, 50.0, gen), random_transform(3, 50.0, gen)
    size, _ = coordinate_ratios(iso_update, X, G, A, B)
    _, effect = coordinate_ratios(kfac_update, X, G, A, B)
    assert abs(size.item() - 1) < 1e-10 and abs(effect.item() - 1) < 1e-10
    sgd_size, sgd_effect = coordinate_ratios(sgd_update, X, G, A, B)
    assert abs(sgd_size.item() - 1) > 0.05 and abs(sgd_effect.item() - 1) > 0.05
    with pytest.raises(ValueError, match="A must be"):
        coordinate_ratios(iso_update, X, G, B, A)


def test_shampoo_after_one_batch_is_msign_and_identity_transforms_change_nothing():
    X, G = randn(4, 64, 6), randn(5, 64, 4)
    U, g = shampoo_after([(X, G)])
    assert rel(U, msign(g)) < 1e-8 and rel(g, _updates.weight_gradient(X, G)) < 1e-14
    history = [(randn(10 + t, 64, 6), randn(20 + t, 64, 4)) for t in range(5)]
    U0, _ = shampoo_after(history)
    U1, _ = shampoo_after(history, torch.eye(6, dtype=F64), torch.eye(4, dtype=F64))
    assert rel(U1, U0) < 1e-14
    with pytest.raises(ValueError, match="at least one"):
        shampoo_after([])


def test_extra_flops_counts_each_term():
    n, m, b = 64, 32, 1000
    assert forward_backward_flops(n, m, b) == 6 * b * n * m
    eigenbases = 9 * (n**3 + m**3) / 10
    roots = eigenbases + 2 * (n**3 + m**3) / 10  # V diag(w) V^T per side
    assert extra_flops("Iso", n, m, b) == 2 * b * (n * n + m * m) + 2 * n * m * (n + m) + roots
    assert extra_flops("K-FAC", n, m, b) == extra_flops("Iso", n, m, b)
    assert extra_flops("Shampoo", n, m, b) == 4 * n * m * (n + m) + roots
    assert extra_flops("SOAP", n, m, b) == 8 * n * m * (n + m) + eigenbases  # eigenvectors only
    assert extra_flops("Muon", n, m, b) == 5 * (4 * m * m * n + 2 * m**3)  # the small side is m
    assert extra_flops("Muon", m, n, b) == extra_flops("Muon", n, m, b)
    assert extra_flops("Adam", n, m, b) == 10 * n * m
    every10 = extra_flops("Iso", n, m, b, stat_interval=10)
    assert every10 == 2 * b * (n * n + m * m) / 10 + 2 * n * m * (n + m) + roots
    subsampled = extra_flops("Iso", n, m, b, stat_rows=200)
    assert subsampled == 2 * 200 * (n * n + m * m) + 2 * n * m * (n + m) + roots
    assert extra_flops("Iso", n, m, b, stat_rows=5000) == extra_flops("Iso", n, m, b), "at most the rows there are"
    with pytest.raises(ValueError, match="stat_rows must be a positive integer, got 0"):
        extra_flops("Iso", n, m, b, stat_rows=0)


def test_extra_flops_batch_dependence_separates_the_family():
    """Shampoo, SOAP and Muon do not grow with the rows; Iso's and K-FAC's statistics do."""
    for method in ("Muon", "Shampoo", "SOAP", "Adam"):
        assert extra_flops(method, 768, 3072, 4096) == extra_flops(method, 768, 3072, 2**19)
    small = extra_flops("Iso", 768, 3072, 4096) / forward_backward_flops(768, 3072, 4096)
    large = extra_flops("Iso", 768, 3072, 2**19) / forward_backward_flops(768, 3072, 2**19)
    limit = (768**2 + 3072**2) / (3 * 768 * 3072)
    assert large < small and abs(large - limit) < 0.01
    # the chapter's square case: Muon +125 % at 4096 rows for a 1024-wide layer
    assert extra_flops("Muon", 1024, 1024, 4096) / forward_backward_flops(1024, 1024, 4096) == 1.25


def test_extra_flops_names_bad_input():
    assert COST_METHODS == ("Adam", "K-FAC", "Shampoo", "Muon", "SOAP", "Iso")
    with pytest.raises(ValueError, match="'LAMB'"):
        extra_flops("LAMB", 4, 4, 4)
    with pytest.raises(ValueError, match="b must be"):
        extra_flops("Iso", 4, 4, 0)
    with pytest.raises(ValueError, match="stat_interval"):
        extra_flops("Iso", 4, 4, 4, stat_interval=0)


def test_extra_flops_agrees_with_chapter_13s_layer_model():
    """Chapter 12's per-method counts and Chapter 13's layer model (isolab.book.scaling) use
    the same terms for Newton-Schulz, the statistics, the roots, the application and the pass."""
    from isolab.book import scaling

    n, m, b = 96, 160, 512
    layer = scaling.layer_flops(n, m, b)
    assert forward_backward_flops(n, m, b) == layer["forward_backward"]
    assert extra_flops("Muon", n, m, b) == scaling.muon_flops(n, m)
    assert extra_flops("Iso", n, m, b) == layer["statistics"] + layer["apply"] + layer["roots_eigh"] / 10
