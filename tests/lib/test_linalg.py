"""Tests of isolab.linalg against independent float64 oracles (SVD / eigh)."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from isolab.linalg import (
    CUBIC,
    QUINTIC,
    canonical_correlations,
    covariance,
    inverse_sqrt,
    inverse_sqrt_newton,
    inverse_sqrt_newton_info,
    msign,
    msign_newton_schulz,
    newton_schulz_map,
    symmetric_inverse_root,
    whiten,
)

F64 = torch.float64
FAST = settings(max_examples=25, deadline=None)
seeds = st.integers(0, 2**31 - 1)
dims = st.integers(1, 7)


def randn(seed, *shape, dtype=F64):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=F64).to(dtype)


def spd(seed, n, cond, dtype=F64):
    """A random SPD matrix with eigenvalues log-spaced in [1/cond, 1] and its eigenpairs."""
    Q, _ = torch.linalg.qr(randn(seed, n, n))
    w = torch.logspace(0, -math.log10(cond), n, dtype=F64)
    return ((Q * w) @ Q.T).to(dtype), w, Q


def oracle_inverse_root(C, p, lam=0.0):
    """numpy float64 eigh oracle of (C + lam I)^{-1/p} for full-rank C."""
    w, V = np.linalg.eigh(np.asarray(C, dtype=np.float64) + lam * np.eye(C.shape[-1]))
    return torch.from_numpy((V * w ** (-1.0 / p)) @ V.T)


def rel(a, b):
    return (torch.linalg.matrix_norm(a.to(F64) - b.to(F64)) / torch.linalg.matrix_norm(b.to(F64))).max().item()


# ----------------------------------------------------------------------------- msign
@FAST
@given(seeds, dims, dims)
def test_msign_matches_float64_svd_and_is_orthogonal(seed, r, c):
    M = randn(seed, r, c)
    U, _, Vh = np.linalg.svd(M.numpy(), full_matrices=False)
    O = msign(M)
    assert torch.allclose(O, torch.from_numpy(U @ Vh), atol=1e-9)
    k = min(r, c)
    small = O @ O.T if r <= c else O.T @ O
    assert torch.allclose(small, torch.eye(k, dtype=F64), atol=1e-10)


@FAST
@given(seeds, dims, dims)
def test_msign_identities(seed, r, c):
    M = randn(seed, r, c)
    O = msign(M)
    S = O.T @ M  # = V S V^T: symmetric PSD
    assert torch.allclose(S, S.T, atol=1e-10)
    assert torch.linalg.eigvalsh(0.5 * (S + S.T)).min() > -1e-10
    Q, _ = torch.linalg.qr(randn(seed + 1, r, r))
    V, _ = torch.linalg.qr(randn(seed + 2, c, c))
    assert torch.allclose(msign(Q @ M @ V), Q @ O @ V, atol=1e-9)


def test_msign_rank_deficient_and_zero_are_finite():
    a, b = randn(0, 6, 2), randn(1, 2, 5)
    M = a @ b  # rank 2
    O = msign(M)
    U, S, Vh = torch.linalg.svd(M)
    expected = U[:, :2] @ Vh[:2]
    assert torch.allclose(O, expected, atol=1e-9)
    assert torch.linalg.matrix_rank(O) == 2
    Z = msign(torch.zeros(3, 4, 5, dtype=F64))
    assert torch.equal(Z, torch.zeros_like(Z))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_msign_half_inputs_keep_their_dtype(dtype):
    M = randn(3, 2, 6, 4, dtype=dtype)
    O = msign(M)
    assert O.dtype == dtype
    assert torch.isfinite(O).all()
    assert rel(O, msign(M.to(F64))) < 2e-2


def test_msign_batched_equals_loop():
    M = randn(4, 2, 3, 5, 4)
    O = msign(M)
    for i in range(2):
        for j in range(3):
            assert torch.allclose(O[i, j], msign(M[i, j]), atol=1e-12)


# ----------------------------------------------------------------------------- Newton-Schulz
@FAST
@given(seeds, st.integers(1, 7), st.integers(1, 7))
def test_newton_schulz_is_the_singular_value_map(seed, r, c):
    """NS(M) = U diag(p^k(s / (||M||_F + eps))) V^T exactly (the oracle for any coefficients)."""
    M = randn(seed, r, c)
    U, S, Vh = torch.linalg.svd(M, full_matrices=False)
    for coeffs, steps in [(QUINTIC, 5), (CUBIC, 7), (QUINTIC, 0)]:
        mapped = newton_schulz_map(S / (S.norm() + 1e-7), steps, coeffs)
        expected = (U * mapped) @ Vh
        assert torch.allclose(msign_newton_schulz(M, steps, coeffs), expected, atol=1e-9)


def test_newton_schulz_map_matches_a_diagonal_matrix():
    s = torch.tensor([0.9, 0.5, 0.2, 0.05, 0.01], dtype=F64)
    D = torch.diag(s)
    out = msign_newton_schulz(D, 5, QUINTIC, eps=1e-7)
    expected = newton_schulz_map(s / (s.norm() + 1e-7), 5, QUINTIC)
    assert torch.allclose(torch.diagonal(out), expected, atol=1e-12)
    assert torch.allclose(out, torch.diag(torch.diagonal(out)), atol=1e-12)


def test_quintic_singular_value_band():
    """Measured: after 5 quintic steps, normalized singular values >= 0.01 land in [0.6818, 1.1344].

    (Inputs in [1e-3, 1e-2] overshoot to 1.2024; below ~2.5e-3 they stay under 0.68.)
    """
    x = torch.linspace(0.01, 1.0, 20001, dtype=F64)
    y = newton_schulz_map(x, 5, QUINTIC)
    assert 0.68 <= y.min().item() <= 0.683
    assert 1.13 <= y.max().item() <= 1.135
    # on matrices whose normalized singular values are all >= 0.01
    for seed in range(5):
        _, w, Q = spd(seed, 8, 10.0)
        s = torch.linalg.svdvals(msign_newton_schulz(Q @ torch.diag(w) @ torch.linalg.qr(randn(seed, 8, 8)).Q))
        assert s.min() >= 0.68 and s.max() <= 1.135


def test_cubic_converges_to_msign_with_steps():
    _, w, Q = spd(7, 6, 4.0)
    V, _ = torch.linalg.qr(randn(8, 6, 6))
    M = (Q * w) @ V.T  # condition number 4
    target = msign(M)
    errors = [rel(msign_newton_schulz(M, k, CUBIC), target) for k in (1, 2, 4, 6, 12)]
    assert all(a > b for a, b in zip(errors[:-1], errors[1:-1])), errors  # strictly decreasing
    assert errors[-1] < 1e-12  # then at float64 precision


def test_newton_schulz_transposes_tall_inputs_and_batches():
    M = randn(9, 3, 10, 4)
    out = msign_newton_schulz(M)
    assert out.shape == M.shape
    for i in range(3):
        assert torch.allclose(out[i], msign_newton_schulz(M[i]), atol=1e-12)


def test_newton_schulz_never_downcasts_float32():
    M = randn(10, 16, 12, dtype=torch.float32)
    reference = msign_newton_schulz(M.to(F64))
    err32 = rel(msign_newton_schulz(M), reference)
    err_bf16 = rel(msign_newton_schulz(M, compute_dtype=torch.bfloat16), reference)
    assert msign_newton_schulz(M).dtype == torch.float32
    assert msign_newton_schulz(M, compute_dtype=torch.bfloat16).dtype == torch.float32
    assert err32 < 1e-5
    assert err_bf16 > 1e-3 > err32 * 100


def test_newton_schulz_zero_matrix_is_zero():
    assert torch.equal(msign_newton_schulz(torch.zeros(4, 3)), torch.zeros(4, 3))


@pytest.mark.parametrize(
    "kwargs, word",
    [
        ({"steps": -1}, "steps"),
        ({"steps": 2.5}, "steps"),
        ({"steps": True}, "steps"),
        ({"coefficients": (1.0, 2.0)}, "coefficients"),
        ({"coefficients": "abc"}, "coefficients"),
        ({"compute_dtype": torch.int32}, "compute_dtype"),
    ],
)
def test_newton_schulz_validates_arguments(kwargs, word):
    with pytest.raises(ValueError, match=word):
        msign_newton_schulz(torch.ones(3, 3), **kwargs)


# ----------------------------------------------------------------------------- inverse roots
@FAST
@given(seeds, st.integers(1, 8), st.sampled_from([2, 4]))
def test_symmetric_inverse_root_matches_eigh(seed, n, p):
    C, _, _ = spd(seed, n, 100.0)
    assert rel(symmetric_inverse_root(C, p), oracle_inverse_root(C.numpy(), p)) < 1e-10
    R = symmetric_inverse_root(C, p)
    assert torch.allclose(torch.linalg.matrix_power(R, p) @ C, torch.eye(n, dtype=F64), atol=1e-8)


def test_inverse_root_damping_is_relative_to_the_mean_eigenvalue():
    C, w, _ = spd(1, 5, 1e4)
    lam = 0.1 * w.mean().item()
    assert rel(symmetric_inverse_root(C, 2, damping=0.1), oracle_inverse_root(C.numpy(), 2, lam)) < 1e-10
    # scale invariance: (kC + k lam I)^{-1/2} = k^{-1/2} (C + lam I)^{-1/2}
    assert rel(inverse_sqrt(1e6 * C, damping=0.1) * 1e3, inverse_sqrt(C, damping=0.1)) < 1e-10


def test_inverse_root_singular_matrix_is_the_pseudo_inverse_root():
    X = randn(2, 3, 6)
    C = X.T @ X / 3  # rank 3 of 6
    R = inverse_sqrt(C)
    assert torch.isfinite(R).all()
    w, V = torch.linalg.eigh(C)
    Vr, wr = V[:, -3:], w[-3:]
    assert torch.allclose(R, (Vr * wr.rsqrt()) @ Vr.T, atol=1e-8)
    assert torch.equal(inverse_sqrt(torch.zeros(2, 4, 4)), torch.zeros(2, 4, 4))


def test_inverse_root_symmetrizes_and_handles_half_and_batches():
    C, _, _ = spd(3, 4, 10.0)
    skew = randn(4, 4, 4)
    assert torch.allclose(inverse_sqrt(C + 1e-3 * (skew - skew.T)), inverse_sqrt(C), atol=1e-12)
    Ch = C.to(torch.bfloat16)
    assert inverse_sqrt(Ch).dtype == torch.bfloat16
    B = torch.stack([C, 2 * C, C @ C])
    out = inverse_sqrt(B)
    for i in range(3):
        assert torch.allclose(out[i], inverse_sqrt(B[i]), atol=1e-12)


def test_inverse_root_retries_in_float64_when_eigh_fails(monkeypatch):
    C, _, _ = spd(5, 5, 100.0, dtype=torch.float32)
    real_eigh = torch.linalg.eigh
    calls = []

    def flaky(A, *args, **kwargs):
        calls.append(A.dtype)
        if A.dtype == torch.float32:
            raise torch.linalg.LinAlgError("simulated convergence failure")
        return real_eigh(A, *args, **kwargs)

    monkeypatch.setattr(torch.linalg, "eigh", flaky)
    R = inverse_sqrt(C)
    assert calls == [torch.float32, F64]
    assert R.dtype == torch.float32
    assert rel(R, oracle_inverse_root(C.double().numpy(), 2)) < 1e-5

    monkeypatch.setattr(torch.linalg, "eigh", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("boom")))
    with pytest.raises(ValueError, match="float64 retry failed"):
        inverse_sqrt(C)


def test_inverse_root_rejects_bad_input():
    C = torch.eye(3, dtype=F64)
    with pytest.raises(ValueError, match="NaN or Inf"):
        inverse_sqrt(torch.full((3, 3), float("nan")))
    with pytest.raises(ValueError, match="damping"):
        inverse_sqrt(C, damping=-1.0)
    with pytest.raises(ValueError, match="p must"):
        symmetric_inverse_root(C, p=0)
    with pytest.raises(ValueError, match="square"):
        inverse_sqrt(torch.ones(3, 4))


# ----------------------------------------------------------------------------- Newton inverse sqrt
@pytest.mark.parametrize("dtype, tol", [(F64, 1e-5), (torch.float32, 1e-3)])
@pytest.mark.parametrize("cond", [3.0, 1e3])
def test_inverse_sqrt_newton_matches_eigh(dtype, tol, cond):
    C, _, _ = spd(11, 12, cond, dtype=dtype)
    expected = oracle_inverse_root(C.double().numpy(), 2)
    R = inverse_sqrt_newton(C)
    assert R.dtype == dtype
    assert rel(R, expected) < (1e-10 if dtype == F64 else tol)
    damped = inverse_sqrt_newton(C, damping=0.05)
    lam = 0.05 * torch.diagonal(C.double()).mean().item()
    assert rel(damped, oracle_inverse_root(C.double().numpy(), 2, lam)) < (1e-10 if dtype == F64 else tol)


@pytest.mark.parametrize("dtype, tol", [(F64, 1e-5), (torch.float32, 1e-3)])
@pytest.mark.parametrize("cond", [10.0, 1e4])
def test_inverse_sqrt_newton_warm_start_is_exact_and_faster(dtype, tol, cond):
    C, w, _ = spd(12, 16, cond)
    E = randn(13, 16, 16)
    C2 = C + 1e-2 * w.min() * (E + E.T)  # a nearby matrix, as between two optimizer refreshes
    previous = inverse_sqrt(C).to(dtype)
    cold = inverse_sqrt_newton_info(C2.to(dtype))
    warm = inverse_sqrt_newton_info(C2.to(dtype), initial=previous)
    expected = oracle_inverse_root(C2.numpy(), 2)
    assert warm.warm_started and not cold.warm_started
    assert rel(cold.root, expected) < tol
    assert rel(warm.root, expected) < tol
    assert warm.iterations < cold.iterations


def test_inverse_sqrt_newton_bad_warm_start_is_still_exact():
    C, _, _ = spd(14, 8, 100.0)
    for initial in (torch.eye(8, dtype=F64), 1e3 * torch.eye(8, dtype=F64), randn(15, 8, 8)):
        R = inverse_sqrt_newton(C, initial=initial)
        assert rel(R, oracle_inverse_root(C.numpy(), 2)) < 1e-10


def test_inverse_sqrt_newton_batched_fixed_budget_and_zero():
    C = torch.stack([spd(s, 5, 10.0)[0] for s in range(3)] + [torch.zeros(5, 5, dtype=F64)])
    out = inverse_sqrt_newton(C)
    for i in range(3):
        assert rel(out[i], oracle_inverse_root(C[i].numpy(), 2)) < 1e-10
    assert torch.equal(out[3], torch.zeros(5, 5, dtype=F64))
    info = inverse_sqrt_newton_info(C[:3], steps=3)
    assert info.iterations == 3 and info.residual > 1e-6  # fixed budget: exactly 3 steps


def test_inverse_sqrt_newton_fails_loudly():
    X = randn(16, 2, 5)
    singular = X.T @ X
    with pytest.raises(ValueError, match="did not converge"):
        inverse_sqrt_newton(singular)
    assert torch.isfinite(inverse_sqrt_newton(singular, damping=1e-3)).all()
    with pytest.raises(ValueError, match="NaN or Inf"):
        inverse_sqrt_newton(torch.full((3, 3), float("inf")))
    with pytest.raises(ValueError, match="initial"):
        inverse_sqrt_newton(torch.eye(3), initial=torch.eye(4))


# ----------------------------------------------------------------------------- statistics
def test_covariance_definition_centered_and_batched():
    X = randn(20, 2, 7, 3)
    assert torch.allclose(covariance(X), X.mT @ X / 7)
    Xc = X - X.mean(-2, keepdim=True)
    assert torch.allclose(covariance(X, center=True), Xc.mT @ Xc / 7)
    with pytest.raises(ValueError, match="center"):
        covariance(X, center="yes")


@FAST
@given(seeds, st.integers(1, 5), st.integers(0, 10))
def test_zca_whitening_has_identity_covariance(seed, n, extra):
    b = n + 2 + extra
    X = randn(seed, b, n) @ randn(seed + 1, n, n) + 3.0
    W = whiten(X)
    assert torch.allclose(covariance(W), torch.eye(n, dtype=F64), atol=1e-8)
    Wc = whiten(X, center=True)
    assert torch.allclose(Wc.mean(0), torch.zeros(n, dtype=F64), atol=1e-8)
    assert torch.allclose(covariance(Wc), torch.eye(n, dtype=F64), atol=1e-8)
    P = whiten(X, kind="pca")
    assert torch.allclose(covariance(P), torch.eye(n, dtype=F64), atol=1e-8)
    # ZCA is the whitening closest to X
    assert (W - X).norm() <= (P - X).norm() + 1e-9


def test_whiten_b_less_than_n_is_finite_projector():
    X = randn(21, 3, 6)
    for kind in ("zca", "pca"):
        W = whiten(X, kind=kind)
        assert torch.isfinite(W).all()
        C = covariance(W)
        assert torch.allclose(C @ C, C, atol=1e-8)  # a projector (rank 3)
        assert abs(torch.trace(C).item() - 3.0) < 1e-8


def test_pca_is_deterministic_and_descending():
    X = randn(22, 40, 4) * torch.tensor([4.0, 1.0, 2.0, 0.5], dtype=F64)
    P = whiten(X, kind="pca")
    Q = whiten(X.clone(), kind="pca")
    assert torch.equal(P, Q)
    # the eigenvector matrix X^+ P: largest-magnitude entry of each column is positive
    V = torch.linalg.lstsq(X, P).solution
    cols = V / V.norm(dim=0)
    idx = cols.abs().argmax(0)
    assert (cols[idx, torch.arange(4)] > 0).all()
    # variances along the axes are descending: V columns scaled by lambda^{-1/2}
    lam = 1.0 / (V * V).sum(0)
    assert (lam[:-1] >= lam[1:]).all()


def test_whiten_validates_kind():
    with pytest.raises(ValueError, match="kind"):
        whiten(torch.ones(4, 2), kind="cholesky")


@FAST
@given(seeds, st.integers(1, 4), st.integers(1, 4), st.booleans())
def test_canonical_correlations_match_the_eigenvalue_definition(seed, n, m, center):
    b = n + m + 6
    X = randn(seed, b, n)
    G = X[:, :1] * randn(seed + 1, 1, m) + randn(seed + 2, b, m)  # correlated
    rho = canonical_correlations(X, G, center=center)
    Xc = X - X.mean(0) if center else X
    Gc = G - G.mean(0) if center else G
    Cx, Cg, Cxg = Xc.T @ Xc / b, Gc.T @ Gc / b, Xc.T @ Gc / b
    K = torch.linalg.solve(Cx, Cxg) @ torch.linalg.solve(Cg, Cxg.T)
    expected = torch.linalg.eigvals(K).real.clamp_min(0).sqrt().sort(descending=True).values[: min(n, m)]
    assert rho.shape == (min(n, m),)
    assert torch.allclose(rho, expected, atol=1e-7)
    assert (rho >= 0).all() and (rho <= 1).all()
    assert (rho[:-1] >= rho[1:]).all()


def test_canonical_correlations_damping_and_degenerate_cases():
    X, G = randn(30, 50, 3), randn(31, 50, 2)
    b = 50
    Cx, Cg, Cxg = X.T @ X / b, G.T @ G / b, X.T @ G / b
    M = oracle_inverse_root(Cx, 2, 0.2 * torch.trace(Cx).item() / 3) @ Cxg
    M = M @ oracle_inverse_root(Cg, 2, 0.2 * torch.trace(Cg).item() / 2)
    assert torch.allclose(canonical_correlations(X, G, damping=0.2), torch.linalg.svdvals(M), atol=1e-10)
    # identical spaces -> all ones; zero G -> zeros; b < n finite
    assert torch.allclose(canonical_correlations(X, X @ randn(32, 3, 3)), torch.ones(3, dtype=F64), atol=1e-8)
    assert torch.equal(canonical_correlations(X, torch.zeros(50, 2, dtype=F64)), torch.zeros(2, dtype=F64))
    assert torch.isfinite(canonical_correlations(randn(33, 3, 8), randn(34, 3, 5))).all()


# ------------------------------------------------------------- Haar-random rotations
def _haar_moments(Q):
    n = Q.shape[-1]
    trace = torch.diagonal(Q, dim1=-2, dim2=-1).sum(-1)
    return {"E Q11": Q[:, 0, 0].mean().item(), "E Q11^2 * n": (n * Q[:, 0, 0].square().mean()).item(),
            "E tr Q": trace.mean().item(), "E (tr Q)^2": trace.square().mean().item()}


def test_random_orthogonal_has_haar_moments():
    """For Haar Q: E Q11 = 0, E Q11² = 1/n, E tr Q = 0 and E (tr Q)² = 1 (Diaconis & Shahshahani)."""
    from isolab.linalg import random_orthogonal

    Q = random_orthogonal(5, torch.Generator().manual_seed(0), sample_shape=(40_000,))
    assert torch.allclose(Q.mT @ Q, torch.eye(5, dtype=torch.float64).expand_as(Q), atol=1e-12)
    m = _haar_moments(Q)
    assert abs(m["E Q11"]) < 0.015 and abs(m["E Q11^2 * n"] - 1) < 0.03
    assert abs(m["E tr Q"]) < 0.03 and abs(m["E (tr Q)^2"] - 1) < 0.05


def test_plain_qr_fails_the_same_moments():
    """The check can fail: QR without the sign fix is not Haar (LAPACK makes R11 < 0)."""
    Z = torch.randn(40_000, 5, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    m = _haar_moments(torch.linalg.qr(Z).Q)
    assert abs(m["E Q11"]) > 0.1 or abs(m["E tr Q"]) > 0.1


def test_random_orthogonal_is_seeded_and_validates():
    from isolab.linalg import random_orthogonal

    a = random_orthogonal(4, torch.Generator().manual_seed(1))
    assert torch.equal(a, random_orthogonal(4, torch.Generator().manual_seed(1)))
    with pytest.raises(ValueError, match="n must be a positive int, got 0"):
        random_orthogonal(0)
    with pytest.raises(ValueError, match="sample_shape"):
        random_orthogonal(3, sample_shape=(-1,))
