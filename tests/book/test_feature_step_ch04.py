"""isolab.book.feature_step, Chapter 4 additions: the feature move of SGD, Muon and SignSGD,
steepest directions, dual norms and descent efficiency, against NumPy oracles."""

import numpy as np
import pytest
import torch

from isolab.book import feature_step
from isolab.book.seeding import generator


def _randn(*shape, seed=0):
    return torch.randn(*shape, generator=generator(seed), dtype=torch.float64)


def _np_msign(M):
    U, _, Vt = np.linalg.svd(M, full_matrices=False)
    return U @ Vt


def _orthonormal_rows(b, d, seed):
    Q, _ = torch.linalg.qr(_randn(d, b, seed=seed))
    return Q.T


def test_norms_and_dual_norms_match_numpy():
    G = _randn(4, 6, 3, seed=1)
    for i in range(4):
        g = G[i].numpy()
        s = np.linalg.svd(g, compute_uv=False)
        assert feature_step.matrix_norm(G, "frobenius")[i].item() == pytest.approx(np.sqrt((g**2).sum()), rel=1e-12)
        assert feature_step.matrix_norm(G, "spectral")[i].item() == pytest.approx(s.max(), rel=1e-12)
        assert feature_step.matrix_norm(G, "max")[i].item() == pytest.approx(np.abs(g).max(), rel=1e-12)
        assert feature_step.dual_norm(G, "spectral")[i].item() == pytest.approx(s.sum(), rel=1e-12)
        assert feature_step.dual_norm(G, "max")[i].item() == pytest.approx(np.abs(g).sum(), rel=1e-12)
        assert feature_step.dual_norm(G, "frobenius")[i].item() == pytest.approx(np.sqrt((g**2).sum()), rel=1e-12)


@pytest.mark.parametrize("norm", ["frobenius", "spectral", "max"])
def test_steepest_direction_is_unit_attains_the_dual_norm_and_beats_random_steps(norm):
    G = _randn(7, 4, seed=2)
    D = feature_step.steepest_direction(G, norm)
    assert feature_step.matrix_norm(D, norm).item() == pytest.approx(1.0, rel=1e-12)
    assert (G * D).sum().item() == pytest.approx(feature_step.dual_norm(G, norm).item(), rel=1e-12)
    assert feature_step.descent_efficiency(-D, G, norm).item() == pytest.approx(1.0, rel=1e-12)
    competitors = _randn(5000, 7, 4, seed=3)
    eff = feature_step.descent_efficiency(competitors, G.expand_as(competitors), norm)
    assert eff.max().item() < 1.0
    assert eff.min().item() >= -1.0
    # rescaling a move does not change its efficiency; reversing it flips the sign
    assert feature_step.descent_efficiency(-3.0 * D, G, norm).item() == pytest.approx(1.0, rel=1e-12)
    assert feature_step.descent_efficiency(D, G, norm).item() == pytest.approx(-1.0, rel=1e-12)


def test_spectral_steepest_direction_is_the_polar_factor():
    G = _randn(6, 4, seed=4)
    assert np.allclose(feature_step.steepest_direction(G, "spectral").numpy(), _np_msign(G.numpy()), atol=1e-12)


def test_frobenius_efficiency_is_the_cosine():
    D, G = _randn(5, 3, seed=5), _randn(5, 3, seed=6)
    assert feature_step.descent_efficiency(D, G, "frobenius").item() == pytest.approx(
        feature_step.cosine_similarity(D, -G).item(), rel=1e-12)


def test_update_feature_change_matches_a_real_step():
    X, U = _randn(6, 5, seed=7), _randn(5, 3, seed=8)
    W = _randn(5, 3, seed=9)
    measured = X @ (W - 0.2 * U) - X @ W
    assert torch.allclose(feature_step.update_feature_change(X, U, 0.2), measured, atol=1e-13)
    with pytest.raises(ValueError, match="do not match"):
        feature_step.update_feature_change(X, _randn(4, 3, seed=1), 0.2)


def test_optimizer_feature_change_against_numpy_oracles():
    X, G = _randn(9, 6, seed=10), _randn(9, 4, seed=11)
    x, g = X.numpy(), G.numpy()
    lr = 0.3
    assert np.allclose(feature_step.optimizer_feature_change(X, G, lr, "sgd").numpy(), -lr * x @ x.T @ g, atol=1e-12)
    assert np.allclose(feature_step.optimizer_feature_change(X, G, lr, "muon").numpy(),
                       -lr * x @ _np_msign(x.T @ g), atol=1e-12)
    assert np.allclose(feature_step.optimizer_feature_change(X, G, lr, "sign").numpy(),
                       -lr * x @ np.sign(x.T @ g), atol=1e-12)
    # the closed form of Muon's move: -lr X X^T G (G^T X X^T G)^{-1/2}
    K = x @ x.T
    w, V = np.linalg.eigh(g.T @ K @ g)
    closed = -lr * K @ g @ (V * w**-0.5) @ V.T
    assert np.allclose(feature_step.optimizer_feature_change(X, G, lr, "muon").numpy(), closed, atol=1e-10)


def test_muon_moves_features_by_msign_of_G_exactly_when_rows_are_orthonormal():
    X = torch.stack([_orthonormal_rows(5, 12, seed) for seed in (12, 13)])
    G = _randn(2, 5, 3, seed=14)
    dY = feature_step.optimizer_feature_change(X, G, 0.1, "muon")
    for i in range(2):
        assert np.allclose(dY[i].numpy(), -0.1 * _np_msign(G[i].numpy()), atol=1e-12)
    assert torch.allclose(feature_step.optimizer_feature_alignment(X, G, "muon"), torch.ones(2, dtype=torch.float64))
    assert torch.allclose(feature_step.optimizer_feature_alignment(X, G, "sgd"), torch.ones(2, dtype=torch.float64))


def test_sign_moves_features_by_sign_of_G_only_in_a_coordinate_basis():
    b, d = 4, 10
    G = _randn(b, 3, seed=15)
    perm = torch.randperm(d, generator=generator(16))[:b]
    signs = torch.tensor([1.0, -1.0, -1.0, 1.0], dtype=torch.float64)
    X_axis = signs[:, None] * torch.eye(d, dtype=torch.float64)[perm]    # signed coordinate rows
    assert torch.allclose(feature_step.optimizer_feature_change(X_axis, G, 1.0, "sign"), -torch.sign(G))
    X_rot = _orthonormal_rows(b, d, seed=17)
    assert torch.allclose(X_rot @ X_rot.T, torch.eye(b, dtype=torch.float64), atol=1e-12)
    assert feature_step.optimizer_feature_alignment(X_rot, G, "sign").item() < 0.99
    eff = feature_step.descent_efficiency(feature_step.optimizer_feature_change(X_rot, G, 1.0, "sign"), G, "max")
    assert eff.item() < 0.99


def test_rotating_inputs_changes_only_signsgd():
    X, G = _randn(6, 10, seed=18), _randn(6, 3, seed=19)
    Q, _ = torch.linalg.qr(_randn(10, 10, seed=20))
    for opt in ("sgd", "muon"):
        assert torch.allclose(feature_step.optimizer_feature_change(X @ Q, G, 1.0, opt),
                              feature_step.optimizer_feature_change(X, G, 1.0, opt), atol=1e-11)
    before = feature_step.optimizer_feature_change(X, G, 1.0, "sign")
    after = feature_step.optimizer_feature_change(X @ Q, G, 1.0, "sign")
    assert (torch.linalg.matrix_norm(after - before) / torch.linalg.matrix_norm(before)).item() > 0.1


def test_sgd_alignment_reproduces_chapter_1():
    X, G = _randn(3, 8, 5, seed=21), _randn(3, 8, 2, seed=22)
    assert torch.allclose(feature_step.optimizer_feature_alignment(X, G, "sgd"),
                          feature_step.feature_alignment(X, G), rtol=1e-12)


def test_bad_names_and_shapes_are_rejected():
    X, G = _randn(4, 3, seed=0), _randn(4, 2, seed=1)
    with pytest.raises(ValueError, match="norm must be"):
        feature_step.dual_norm(G, "nuclear")
    with pytest.raises(ValueError, match="optimizer must be"):
        feature_step.optimizer_feature_change(X, G, 0.1, "adam")
    with pytest.raises(ValueError, match="batch"):
        feature_step.optimizer_feature_change(X, _randn(5, 2, seed=2), 0.1, "muon")
    with pytest.raises(ValueError, match="shapes differ"):
        feature_step.descent_efficiency(X, G, "max")


# ------------------------------------------------------- reachable moves (b > d_in)
def _np_projector(x):
    U, s, _ = np.linalg.svd(x, full_matrices=False)
    U = U[:, s > 1e-10 * s.max()]
    return U @ U.T


def test_column_space_projector_matches_numpy_and_is_a_projector():
    X = _randn(3, 20, 5, seed=30)                                   # b = 20 > d_in = 5
    P = feature_step.column_space_projector(X)
    for i in range(3):
        assert np.allclose(P[i].numpy(), _np_projector(X[i].numpy()), atol=1e-12)
    assert torch.allclose(P @ P, P, atol=1e-12)
    assert torch.allclose(P, P.mT, atol=1e-12)
    assert torch.allclose(P @ X, X, atol=1e-12)
    assert torch.allclose(torch.diagonal(P, dim1=-2, dim2=-1).sum(-1), torch.full((3,), 5.0, dtype=torch.float64))
    # full row rank (b <= d_in): the identity; rank-deficient X: rank-many directions
    assert torch.allclose(feature_step.column_space_projector(_randn(4, 9, seed=31)), torch.eye(4, dtype=torch.float64), atol=1e-12)
    low_rank = _randn(8, 2, seed=32) @ _randn(2, 6, seed=33)
    assert round(torch.trace(feature_step.column_space_projector(low_rank)).item()) == 2


@pytest.mark.parametrize("norm", ["frobenius", "spectral"])
def test_reachable_steepest_direction_is_reachable_and_beats_reachable_rivals(norm):
    X, G = _randn(12, 4, seed=34), _randn(12, 3, seed=35)
    P = feature_step.column_space_projector(X)
    D = feature_step.reachable_steepest_direction(X, G, norm)
    assert torch.allclose(P @ D, D, atol=1e-12)                       # the layer can make it
    assert feature_step.matrix_norm(D, norm).item() == pytest.approx(1.0, rel=1e-12)
    assert feature_step.reachable_descent_efficiency(-D, G, X, norm).item() == pytest.approx(1.0, rel=1e-12)
    rivals = X @ _randn(4000, 4, 3, seed=36)                          # random reachable moves X U
    eff = feature_step.reachable_descent_efficiency(rivals, G.expand_as(rivals), X.expand(4000, 12, 4), norm)
    assert eff.max().item() < 1.0 and eff.min().item() >= -1.0
    # against all moves, the reachable optimum falls short by ||P_X G||^dagger / ||G||^dagger
    ratio = feature_step.dual_norm(P @ G, norm) / feature_step.dual_norm(G, norm)
    assert feature_step.descent_efficiency(-D, G, norm).item() == pytest.approx(ratio.item(), rel=1e-12)


def test_reachable_efficiency_equals_the_ordinary_one_when_every_move_is_reachable():
    X, G = _randn(2, 5, 9, seed=37), _randn(2, 5, 3, seed=38)        # b <= d_in: P_X = I
    for opt, norm in (("sgd", "frobenius"), ("muon", "spectral")):
        D = feature_step.optimizer_feature_change(X, G, 1.0, opt)
        assert torch.allclose(feature_step.reachable_descent_efficiency(D, G, X, norm),
                              feature_step.descent_efficiency(D, G, norm), rtol=1e-10)


def test_whitened_inputs_make_sgd_and_muon_exactly_steepest_among_reachable_moves():
    Z = _randn(40, 6, seed=39)
    U, _, Vh = torch.linalg.svd(Z, full_matrices=False)
    X = U @ Vh                                                        # X^T X = I, b = 40 > d_in = 6
    G = _randn(40, 4, seed=40)
    P = feature_step.column_space_projector(X)
    assert torch.allclose(P, X @ X.T, atol=1e-12)
    muon = feature_step.optimizer_feature_change(X, G, 1.0, "muon")
    assert np.allclose(muon.numpy(), -_np_msign(P.numpy() @ G.numpy()), atol=1e-12)   # X msign(X^T G) = msign(P_X G)
    assert torch.allclose(feature_step.optimizer_feature_change(X, G, 1.0, "sgd"), -P @ G, atol=1e-12)
    for opt in ("sgd", "muon"):
        assert feature_step.optimizer_feature_efficiency(X, G, opt, reachable=True).item() == pytest.approx(1.0, rel=1e-12)
        assert feature_step.optimizer_feature_efficiency(X, G, opt).item() < 0.6        # but far from -G itself


def test_optimizer_feature_efficiency_is_the_descent_efficiency_in_the_own_norm():
    X, G = _randn(7, 11, seed=41), _randn(7, 3, seed=42)
    for opt, norm in feature_step.OPTIMIZERS.items():
        D = feature_step.optimizer_feature_change(X, G, 1.0, opt)
        assert torch.equal(feature_step.optimizer_feature_efficiency(X, G, opt), feature_step.descent_efficiency(D, G, norm))


def test_reachable_efficiency_rejects_the_max_norm_and_bad_shapes():
    X, G = _randn(6, 2, seed=43), _randn(6, 3, seed=44)
    with pytest.raises(ValueError, match="closed form"):
        feature_step.reachable_descent_efficiency(G, G, X, "max")
    with pytest.raises(ValueError, match="closed form"):
        feature_step.optimizer_feature_efficiency(X, G, "sign", reachable=True)
    with pytest.raises(ValueError, match="shapes differ"):
        feature_step.reachable_descent_efficiency(G[:, :2], G, X, "spectral")
    with pytest.raises(ValueError, match="batch"):
        feature_step.reachable_steepest_direction(_randn(5, 2, seed=45), G, "frobenius")
