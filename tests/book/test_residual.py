"""isolab.book.residual: the residual network, its rotated twin, rotations, and twin training."""

import copy

import numpy as np
import pytest
import torch

from isolab.book import residual as R
from isolab.linalg import random_orthogonal
from isolab.optim import Iso, Muon, SignSGD
from isolab.book.seeding import generator


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny float64 matrices: one thread is several times faster than two on a shared machine."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def _net(**kw):
    return R.ResidualNet(**{"generator": generator(2), **kw})


def _x(n=64, d=8, seed=9):
    return torch.randn(n, d, generator=generator(seed), dtype=torch.float64)


@pytest.mark.parametrize(
    "kw",
    [{}, {"norm": "rms"}, {"stream_bias": True, "output_bias": True}, {"activation": "relu", "hidden_bias": False},
     {"norm": "rms", "norm_gain": True}, {"depth": 0}],
)
def test_twin_has_identical_outputs_different_weights_and_a_rotated_stream(kw):
    net = _net(**kw)
    Q = random_orthogonal(16, generator(3))
    twin = R.rotate_stream(net, Q)
    x = _x()
    assert (net(x) - twin(x)).abs().max().item() < 1e-12
    assert R.output_gap(net, twin, x) < 1e-13
    for h, h_twin in zip(net.stream(x), twin.stream(x)):
        assert torch.allclose(h @ Q, h_twin, rtol=0, atol=1e-12)
    # the weights themselves are different (not a copy): A -> Qᵀ A moves every block
    assert (net.head.weight - twin.head.weight).norm() > 0.1 * net.head.weight.norm()
    # the original is untouched
    assert torch.equal(_net(**kw).head.weight, net.head.weight)


def test_rotation_recipe_in_the_row_convention_against_numpy():
    """E -> EQ, A -> QᵀA, B -> BQ, U -> QᵀU written with the row-convention matrices (W = weightᵀ)."""
    net = _net(depth=1, hidden_bias=False)
    Q = random_orthogonal(16, generator(4))
    twin = R.rotate_stream(net, Q)
    q = Q.numpy()
    E, A, B, U = (m.weight.detach().numpy().T for m in (net.embed, net.blocks[0].inp, net.blocks[0].out, net.head))
    E2, A2, B2, U2 = (m.weight.detach().numpy().T for m in (twin.embed, twin.blocks[0].inp, twin.blocks[0].out, twin.head))
    np.testing.assert_allclose(E2, E @ q, atol=1e-14)
    np.testing.assert_allclose(A2, q.T @ A, atol=1e-14)
    np.testing.assert_allclose(B2, B @ q, atol=1e-14)
    np.testing.assert_allclose(U2, q.T @ U, atol=1e-14)
    x = _x().numpy()
    h = x @ E
    h = h + np.tanh(h @ A) @ B
    np.testing.assert_allclose(net(torch.from_numpy(x)).detach().numpy(), h @ U, atol=1e-13)


def test_layer_norm_breaks_the_twin_and_a_varying_gain_is_refused():
    net = _net(norm="layer")
    twin = R.rotate_stream(net, random_orthogonal(16, generator(3)))
    assert R.output_gap(net, twin, _x()) > 1e-2
    gained = _net(norm="rms", norm_gain=True)
    with torch.no_grad():
        gained.blocks[0].norm.weight[0] = 2.0
    with pytest.raises(ValueError, match="gain"):
        R.rotate_stream(gained, torch.eye(16, dtype=torch.float64))


def test_rotate_stream_refuses_bad_q():
    net = _net()
    with pytest.raises(ValueError, match="orthogonal"):
        R.rotate_stream(net, 2 * torch.eye(16, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"\(16, 16\)"):
        R.rotate_stream(net, torch.eye(8, dtype=torch.float64))
    with pytest.raises(TypeError):
        R.rotate_stream(torch.nn.Linear(2, 2), torch.eye(2))


def test_gradients_of_the_twin_are_the_rotated_gradients():
    net = _net(stream_bias=True)
    Q = random_orthogonal(16, generator(5))
    twin = R.rotate_stream(net, Q)
    x, y = _x(), torch.randn(64, 4, generator=generator(6), dtype=torch.float64)
    for m in (net, twin):
        (m(x) - y).square().mean().backward()
    assert torch.allclose(twin.embed.weight.grad, Q.T @ net.embed.weight.grad, atol=1e-13)
    assert torch.allclose(twin.embed.bias.grad, net.embed.bias.grad @ Q, atol=1e-13)
    for b, bt in zip(net.blocks, twin.blocks):
        assert torch.allclose(bt.inp.weight.grad, b.inp.weight.grad @ Q, atol=1e-13)
        assert torch.allclose(bt.inp.bias.grad, b.inp.bias.grad, atol=1e-13)  # hidden units: not rotated
        assert torch.allclose(bt.out.weight.grad, Q.T @ b.out.weight.grad, atol=1e-13)
    assert torch.allclose(twin.head.weight.grad, net.head.weight.grad @ Q, atol=1e-13)


def test_random_orthogonal_skew_rotation_and_signed_permutation():
    Q = random_orthogonal(7, generator(1))
    assert torch.allclose(Q.T @ Q, torch.eye(7, dtype=torch.float64), atol=1e-13)
    assert not torch.equal(Q, random_orthogonal(7, generator(2)))
    K = R.random_skew(6, generator(1))
    assert torch.equal(K, -K.T)
    assert torch.linalg.matrix_norm(K, ord=2).item() == pytest.approx(1.0, rel=1e-12)
    Qt = R.rotation(K, 0.7)
    assert torch.allclose(Qt.T @ Qt, torch.eye(6, dtype=torch.float64), atol=1e-13)
    assert torch.allclose(R.rotation(K, 0.0), torch.eye(6, dtype=torch.float64), atol=0)
    assert torch.allclose(R.rotation(K, 0.3) @ R.rotation(K, 0.4), Qt, atol=1e-13)
    # no plane turns by more than theta: every eigenvalue angle of Q(theta) is at most theta
    angles = torch.angle(torch.linalg.eigvals(Qt)).abs()
    assert angles.max().item() == pytest.approx(0.7, rel=1e-10)
    with pytest.raises(ValueError, match="skew"):
        R.rotation(torch.ones(3, 3, dtype=torch.float64), 1.0)
    P = R.signed_permutation(9, generator(3))
    assert torch.equal(P.abs().sum(0), torch.ones(9, dtype=torch.float64))
    assert torch.equal(P.T @ P, torch.eye(9, dtype=torch.float64))
    M = torch.randn(5, 9, generator=generator(4), dtype=torch.float64)
    assert torch.equal(torch.sign(M @ P), torch.sign(M) @ P)  # sign commutes with signed permutations
    O = random_orthogonal(9, generator(5))
    assert not torch.allclose(torch.sign(M @ O), torch.sign(M) @ O)  # ...but not with a general rotation


def test_output_gap_matches_its_formula():
    a, b = _net(), _net(residual_scale=0.3)
    x = _x()
    ya, yb = a(x).detach().numpy(), b(x).detach().numpy()
    assert R.output_gap(a, b, x) == pytest.approx(np.linalg.norm(ya - yb) / np.linalg.norm(ya), rel=1e-12)
    assert R.output_gap(a, a, x) == 0.0


def test_regression_data_is_seeded_and_shaped():
    x, y, xe, ye = R.regression_data(5, 3, 8, 4, eval_size=10, generator=generator(1))
    assert x.shape == (5, 3, 8) and y.shape == (5, 3, 4) and xe.shape == (10, 8) and ye.shape == (10, 4)
    x2, y2, _, _ = R.regression_data(5, 3, 8, 4, eval_size=10, generator=generator(1))
    assert torch.equal(x, x2) and torch.equal(y, y2)


def _twins(Q=None, steps=15, **kw):
    data = R.regression_data(steps, 32, generator=generator(1))
    net = _net(**kw)
    Q = random_orthogonal(16, generator(3)) if Q is None else Q
    return net, R.rotate_stream(net, Q), data


@pytest.mark.parametrize(
    "make",
    [lambda m: torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-3),
     lambda m: Muon(m, lr=0.02),
     lambda m: Iso(m, lr=0.02, stats_dtype=torch.float64)],
    ids=["sgd", "muon", "iso"],
)
def test_equivariant_optimizers_keep_the_twins_identical_while_training(make):
    net, twin, data = _twins()
    before = copy.deepcopy(net)
    run = R.train_twins(net, twin, make, *data)
    assert run.gap.shape == (16,)
    assert run.gap.max().item() < 1e-11
    assert run.loss[-1] < 0.5 * run.loss[0]  # it did train
    assert (net.head.weight - before.head.weight).norm() > 0.05 * before.head.weight.norm()
    assert torch.allclose(run.loss, run.loss_twin, rtol=1e-9, atol=0)


@pytest.mark.parametrize(
    "make",
    [lambda m: torch.optim.Adam(m.parameters(), lr=3e-3), lambda m: SignSGD(m, lr=1e-3)],
    ids=["adam", "signsgd"],
)
def test_elementwise_optimizers_drift_except_for_signed_permutations(make):
    net, twin, data = _twins()
    assert R.train_twins(net, twin, make, *data).gap[-1].item() > 1e-3
    net, twin, data = _twins(Q=R.signed_permutation(16, generator(4)))
    assert R.train_twins(net, twin, make, *data).gap.max().item() < 1e-13


def test_adam_routed_stream_parameters_break_muon_but_hidden_biases_do_not():
    net, twin, data = _twins(steps=10)
    run = R.train_twins(net, twin, lambda m: Muon(m, lr=0.02, head=m.head), *data)
    assert run.gap[-1].item() > 1e-3  # the head lives on the stream: Adam breaks the symmetry
    net, twin, data = _twins(steps=10, hidden_bias=True)
    run = R.train_twins(net, twin, lambda m: Muon(m, lr=0.02), *data)  # hidden biases go to Adam
    assert run.gap.max().item() < 1e-12


def test_divergence_leaves_nan_and_closes_hooks():
    net, twin, data = _twins(steps=10)
    run = R.train_twins(net, twin, lambda m: torch.optim.SGD(m.parameters(), lr=1e4), *data)
    assert torch.isnan(run.gap[-1]) and torch.isfinite(run.gap[0])
    net, twin, data = _twins(steps=10)
    run = R.train_twins(net, twin, lambda m: Iso(m, lr=1e3, momentum=0.0, stats_dtype=torch.float64), *data)
    assert torch.isfinite(run.gap[0])
    for m in net.modules():  # Iso's hooks were removed
        assert not m._forward_pre_hooks and not m._forward_hooks
