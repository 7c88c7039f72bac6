"""Tests of isolab.book.normalization against torch.nn.functional and closed-form oracles."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from isolab.book import features
from isolab.linalg import covariance, inverse_sqrt, whiten
from isolab.book.normalization import (
    METHODS,
    batch_norm,
    coordinate_correlation,
    instance_norm,
    layer_norm,
    normalize,
    rms_norm,
    whitening_matrix,
    whitening_objective,
)

F64 = torch.float64
FAST = settings(max_examples=20, deadline=None)
seeds = st.integers(0, 2**31 - 1)


def randn(seed, *shape, scale=1.0, shift=0.0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=F64) * scale + shift


def close(a, b, atol=1e-12):
    return torch.allclose(a, b, rtol=0, atol=atol)


# ------------------------------------------------------------------ against torch.nn.functional
@FAST
@given(seed=seeds, b=st.integers(2, 9), d=st.integers(1, 7), eps=st.sampled_from([1e-5, 1e-3, 0.1]))
def test_batch_norm_matches_torch_in_training_mode(seed, b, d, eps):
    X = randn(seed, b, d, scale=3.0, shift=-2.0)
    assert close(batch_norm(X, eps), F.batch_norm(X, None, None, training=True, eps=eps))


@FAST
@given(seed=seeds, b=st.integers(1, 5), L=st.integers(2, 6), c=st.integers(1, 5))
def test_batch_norm_over_positions_and_instance_norm_match_torch(seed, b, L, c):
    X = randn(seed, b, L, c, scale=2.0, shift=1.0)          # row convention: (samples, positions, channels)
    channels_first = X.mT                                    # torch: (samples, channels, positions)
    if b * L > 1:
        assert close(batch_norm(X, positions=True), F.batch_norm(channels_first, None, None, training=True).mT)
    assert close(instance_norm(X), F.instance_norm(channels_first).mT)


def test_affine_parameters_match_torch():
    X = randn(0, 6, 5, 4)
    w, bias = randn(1, 4), randn(2, 4)
    assert close(batch_norm(X[0], weight=w, bias=bias), F.batch_norm(X[0], None, None, w, bias, training=True))
    assert close(batch_norm(X, positions=True, weight=w, bias=bias),
                 F.batch_norm(X.mT, None, None, w, bias, training=True).mT)
    assert close(instance_norm(X, weight=w, bias=bias), F.instance_norm(X.mT, weight=w, bias=bias).mT)
    assert close(layer_norm(X, weight=w, bias=bias), F.layer_norm(X, (4,), w, bias))
    assert close(rms_norm(X, 1e-6, weight=w), F.rms_norm(X, (4,), w, eps=1e-6))


@FAST
@given(seed=seeds, shape=st.lists(st.integers(1, 6), min_size=1, max_size=3), eps=st.sampled_from([None, 1e-6, 0.5]))
def test_layer_and_rms_norm_match_torch(seed, shape, eps):
    X = randn(seed, *shape, scale=4.0, shift=0.5)
    d = shape[-1]
    assert close(layer_norm(X, 1e-5 if eps is None else eps), F.layer_norm(X, (d,), eps=1e-5 if eps is None else eps))
    assert close(rms_norm(X, eps), F.rms_norm(X, (d,), eps=eps))


# ------------------------------------------------------------------ properties (independent of torch)
def test_batch_norm_formula_and_which_diagonal_it_fixes():
    X = features.gaussian_features(64, 8, 50.0, 0.4, generator=torch.Generator().manual_seed(3)) + 2.0
    Z = batch_norm(X, eps=0.0)
    Xn = X.numpy()
    expected = (Xn - Xn.mean(0)) / Xn.std(0)                # numpy's std is the biased one (ddof=0)
    assert np.allclose(Z.numpy(), expected, rtol=0, atol=1e-12)
    assert close(Z.mean(0), torch.zeros(8, dtype=F64))
    assert close(covariance(Z).diagonal(), torch.ones(8, dtype=F64), atol=1e-12)
    assert not close(covariance(Z), torch.eye(8, dtype=F64), atol=0.05)   # only the diagonal


def test_per_sample_norms_fix_the_gram_diagonal_and_commute_with_rotations():
    X = randn(4, 10, 12, scale=3.0)
    Q, _ = torch.linalg.qr(randn(5, 12, 12))
    R = rms_norm(X, eps=0.0)
    assert close((R @ R.T).diagonal(), torch.full((10,), 12.0, dtype=F64), atol=1e-10)
    assert close(rms_norm(X @ Q, eps=0.0), R @ Q)
    Lz = layer_norm(X, eps=0.0)
    assert close(Lz.sum(-1), torch.zeros(10, dtype=F64), atol=1e-10)          # every row is orthogonal to 1
    assert close(Lz.square().sum(-1), torch.full((10,), 12.0, dtype=F64), atol=1e-10)
    assert not close(batch_norm(X @ Q), batch_norm(X) @ Q, atol=1e-3)         # BatchNorm sees coordinates


def test_instance_norm_is_batch_norm_per_sample_and_layer_norm_is_one_channel():
    X = randn(6, 5, 7, 3, shift=1.0)
    assert close(instance_norm(X), torch.stack([batch_norm(sample) for sample in X]))
    Y = randn(7, 4, 9)
    assert close(layer_norm(Y), instance_norm(Y[..., None])[..., 0])


def test_leading_dimensions_are_independent_batches():
    X = randn(8, 3, 6, 4, shift=0.3)
    for f in (batch_norm, layer_norm, rms_norm):
        assert close(f(X), torch.stack([f(x) for x in X]))
    assert close(batch_norm(randn(9, 2, 3, 5, 4), positions=True),
                 torch.stack([batch_norm(x, positions=True) for x in randn(9, 2, 3, 5, 4)]))


def test_normalize_dispatches_every_method():
    X = features.gaussian_features(32, 6, 10.0, 0.3, generator=torch.Generator().manual_seed(10))
    expected = {"none": X, "batch": batch_norm(X), "layer": layer_norm(X), "rms": rms_norm(X),
                "zca": whiten(X, kind="zca"), "pca": whiten(X, kind="pca")}
    assert set(expected) == set(METHODS)
    for method in METHODS:
        assert close(normalize(X, method), expected[method])
    assert normalize(X, "none") is not X
    with pytest.raises(ValueError, match="method"):
        normalize(X, "group")


# ------------------------------------------------------------------ whitening helpers
@pytest.mark.parametrize("b, d", [(30, 5), (5, 8), (12, 12)])
def test_whitening_objective_floor_is_reached_by_the_pseudo_inverse_root(b, d):
    X = randn(11, b, d)
    A = inverse_sqrt(X.T @ X)                                  # pseudo-inverse root when singular
    floor = math.sqrt(b - min(b, d))
    assert whitening_objective(X, A).item() == pytest.approx(floor, abs=1e-9)
    Q, _ = torch.linalg.qr(randn(12, d, d))
    assert whitening_objective(X, A @ Q).item() == pytest.approx(floor, abs=1e-9)
    K = X @ A @ A.T @ X.T                                      # explicit formula
    assert whitening_objective(X, A).item() == pytest.approx(torch.linalg.matrix_norm(K - torch.eye(b, dtype=F64)).item())
    others = randn(13, 200, d, d) / math.sqrt(d * b)
    assert bool((whitening_objective(X, others) >= floor - 1e-9).all())


def test_whitening_objective_batched_over_candidates():
    X = randn(14, 20, 4)
    A = randn(15, 3, 4, 4)
    assert whitening_objective(X, A).shape == (3,)
    assert whitening_objective(X, A)[1].item() == pytest.approx(whitening_objective(X, A[1]).item(), rel=1e-12)


@pytest.mark.parametrize("center", [False, True])
@pytest.mark.parametrize("b, d", [(50, 6), (4, 6)])
def test_whitening_matrix_reproduces_whiten(b, d, center):
    X = randn(16, b, d, shift=0.5) @ randn(17, d, d)
    Xc = X - X.mean(0) if center else X
    C = covariance(X, center=center)
    for kind in ("zca", "pca"):
        W = whitening_matrix(X, kind, center)
        assert close(Xc @ W, whiten(X, center=center, kind=kind), atol=1e-9)
        if b > d:
            assert close(W.T @ C @ W, torch.eye(d, dtype=F64), atol=1e-9)
    if b > d:
        assert close(whitening_matrix(X, "zca", center), inverse_sqrt(C), atol=1e-9)
        R = torch.linalg.solve(whitening_matrix(X, "zca", center), whitening_matrix(X, "pca", center))
        assert close(R.T @ R, torch.eye(d, dtype=F64), atol=1e-9)   # PCA = ZCA times a rotation


def test_coordinate_correlation_matches_numpy():
    X, Z = randn(18, 40, 3), randn(19, 40, 3)
    Z = Z + 2 * X
    expected = [np.corrcoef(X[:, j].numpy(), Z[:, j].numpy())[0, 1] for j in range(3)]
    assert np.allclose(coordinate_correlation(X, Z).numpy(), expected, atol=1e-12)
    assert close(coordinate_correlation(X, -3 * X + 1), -torch.ones(3, dtype=F64))
    constant = torch.ones(40, 3, dtype=F64)
    assert torch.isnan(coordinate_correlation(X, constant)).all()
    with pytest.raises(ValueError, match="same shape"):
        coordinate_correlation(X, Z[:, :2])


# ------------------------------------------------------------------ errors
def test_invalid_inputs_raise():
    with pytest.raises(ValueError, match="positions"):
        instance_norm(torch.zeros(3, 1, 4, dtype=F64))
    with pytest.raises(ValueError, match="eps"):
        batch_norm(torch.zeros(3, 4, dtype=F64), eps=-1.0)
    with pytest.raises(ValueError, match="floating"):
        layer_norm(torch.zeros(3, 4, dtype=torch.int64))
    with pytest.raises(ValueError, match="dimensions"):
        batch_norm(torch.zeros(4, dtype=F64))
    with pytest.raises(TypeError):
        rms_norm(np.zeros((3, 4)))
