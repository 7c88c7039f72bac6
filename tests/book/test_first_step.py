"""isolab.book.first_step: exact batches, the population loss, the tuned single step, one optimizer step."""

import math

import numpy as np
import pytest
import torch

from isolab.book import first_step as fs
from isolab import linalg
from isolab.optim import Iso
from isolab.book.problems import OneStepRegression
from isolab.book.seeding import generator


def _problem_pieces(n=6, kappa=20.0, angle=0.4, seed=0):
    p = OneStepRegression(n=n, batch=512, condition_number=kappa, angle=angle)
    return p, p.target_matrix(seed), p.sigma


def test_orthogonal_batch_second_moment_is_exact():
    Z = fs.orthogonal_batch(40, 7, generator(0))
    assert Z.shape == (40, 7) and Z.dtype == torch.float64
    torch.testing.assert_close(Z.T @ Z, 40 * torch.eye(7, dtype=torch.float64), rtol=0, atol=1e-10)
    Zs = fs.orthogonal_batch(9, 9, generator(1), sample_shape=(3, 2))
    assert Zs.shape == (3, 2, 9, 9)
    torch.testing.assert_close(Zs.mT @ Zs, 9 * torch.eye(9, dtype=torch.float64).expand(3, 2, 9, 9), rtol=0, atol=1e-10)
    torch.testing.assert_close(fs.orthogonal_batch(40, 7, generator(0)), Z, rtol=0, atol=0)  # seeded
    assert not torch.equal(fs.orthogonal_batch(40, 7, generator(2)), Z)


def test_orthogonal_batch_is_haar_not_biased():
    # first column of a Haar orthogonal matrix is uniform on the sphere: mean 0, E q_1^2 = 1/n
    Z = fs.orthogonal_batch(4, 4, generator(3), sample_shape=(4000,)) / 2
    first = Z[..., 0]
    assert float(first.mean(0).abs().max()) < 0.05
    assert abs(float(first.square().mean()) - 0.25) < 0.01
    assert abs(float(Z[..., 0, 0].mean())) < 0.05  # no sign bias on the diagonal


def test_orthogonal_batch_rejects_bad_shapes():
    with pytest.raises(ValueError):
        fs.orthogonal_batch(3, 5)
    with pytest.raises(ValueError):
        fs.orthogonal_batch(5.0, 3)


def test_population_loss_equals_batch_loss_on_exact_batch():
    p, A, S = _problem_pieces()
    W = torch.randn(3, 6, 6, generator=generator(4), dtype=torch.float64)
    Z = fs.orthogonal_batch(64, 6, generator(5))
    X = Z @ S
    batch = torch.stack([fs.paper_loss(X @ w, X @ A) for w in W])
    torch.testing.assert_close(fs.population_loss(W, A, S), batch, rtol=1e-12, atol=0)
    # and a Monte Carlo estimate with Gaussian z agrees to sampling error
    z = torch.randn(200_000, 6, generator=generator(6), dtype=torch.float64)
    mc = fs.paper_loss((z @ S) @ W[0], (z @ S) @ A)
    assert abs(float(mc / fs.population_loss(W[0], A, S)) - 1) < 0.02


def test_line_search_matches_brute_force():
    p, A, S = _problem_pieces()
    D = torch.randn(4, 6, 6, generator=generator(7), dtype=torch.float64)
    lr, rel = fs.line_search(D, A, S)
    L0 = fs.population_loss(torch.zeros_like(A), A, S)
    grid = torch.linspace(-3, 3, 60001, dtype=torch.float64)
    for k in range(4):
        losses = fs.population_loss(grid.view(-1, 1, 1) * D[k], A, S) / L0
        i = int(torch.argmin(losses))
        assert abs(float(grid[i]) - float(lr[k])) < 2e-4 * max(1.0, abs(float(lr[k])))
        assert abs(float(losses[i]) - float(rel[k])) < 1e-8
        torch.testing.assert_close(fs.population_loss(lr[k] * D[k], A, S) / L0, rel[k], rtol=1e-10, atol=1e-12)


def test_line_search_special_directions():
    p, A, S = _problem_pieces()
    lr, rel = fs.line_search(A, A, S)
    assert abs(float(lr) - 1) < 1e-12 and float(rel) < 1e-12  # the answer itself
    lr, rel = fs.line_search(torch.zeros_like(A), A, S)
    assert float(lr) == 0 and float(rel) == 1
    lr, rel = fs.line_search(-2 * A, A, S)  # uphill: negative rate, same relative loss
    assert abs(float(lr) + 0.5) < 1e-12 and float(rel) < 1e-12


def test_tune_lr_finds_minimum_of_unimodal_function():
    target = 0.0371
    calls = []

    def loss_of(lrs):
        calls.append(len(lrs))
        return (np.log(lrs) - np.log(target)) ** 2 + 1.0

    lr, loss = fs.tune_lr(loss_of, 1e-4, 1e2, count=25, rounds=3, refine_count=15)
    assert calls == [25, 15, 15]
    step1 = math.log(1e6) / 24
    assert abs(math.log(lr / target)) <= step1 * (2 / 14) ** 2 + 1e-12
    assert loss == pytest.approx(1.0 + math.log(lr / target) ** 2)


def test_tune_lr_handles_nan_and_edges():
    def loss_of(lrs):
        out = (np.log10(lrs) + 1.0) ** 2
        out[lrs > 1] = np.nan  # diverged
        return out

    lr, _ = fs.tune_lr(loss_of, 1e-3, 1e2, count=11, rounds=2)
    assert abs(math.log10(lr) + 1) < 0.2
    with pytest.raises(ValueError, match="edge"):
        fs.tune_lr(lambda lrs: lrs, 1e-3, 1e2)  # minimum below the range
    lr, _ = fs.tune_lr(lambda lrs: lrs, 1e-3, 1e2, allow_edge=True)
    assert lr == pytest.approx(1e-3)
    with pytest.raises(ValueError):
        fs.tune_lr(lambda lrs: np.full(len(lrs), np.nan), 1e-3, 1e2)
    with pytest.raises(ValueError):
        fs.tune_lr(lambda lrs: lrs, 1.0, 0.1)
    with pytest.raises(ValueError):
        fs.tune_lr(lambda lrs: lrs[:-1], 1e-3, 1e2)


def test_first_steps_on_exact_batch_are_the_paper_formulas():
    p, A, S = _problem_pieces()
    Z = fs.orthogonal_batch(48, 6, generator(8))
    X, T = Z @ S, Z @ S @ A
    d = fs.first_steps(X, T)
    assert list(d) == list(fs.OPTIMIZERS)
    torch.testing.assert_close(d["SGD"], S @ S @ A, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(torch.sign(d["Adam"]), torch.sign(S @ S @ A), rtol=0, atol=0)
    torch.testing.assert_close(d["Muon"], linalg.msign(S @ S @ A), rtol=0, atol=1e-10)
    torch.testing.assert_close(d["Iso"], linalg.msign(S @ A), rtol=0, atol=1e-8)
    torch.testing.assert_close(torch.sign(d["IsoAdam"]), torch.sign(linalg.msign(S @ A)), rtol=0, atol=0)
    # and the polar factor from an independent route: U V^T of the SVD
    U, _, Vh = torch.linalg.svd(S @ A)
    torch.testing.assert_close(d["Iso"], U @ Vh, rtol=0, atol=1e-8)


def test_one_step_change_matches_autograd_and_optimizers():
    p, A, S = _problem_pieces()
    X, T = p.batch(0, 0)
    lr = 0.05
    dW = fs.one_step_change(lambda m, lr: torch.optim.SGD(m.parameters(), lr=lr), X, T, lr)
    torch.testing.assert_close(dW, lr * X.T @ T / X.shape[0], rtol=1e-12, atol=1e-14)  # -lr * X^T G / b, G = -T
    assert dW.shape == (6, 6)
    Tr = T[:, :4]  # rectangular layer: n = 6 inputs, m = 4 outputs
    dW = fs.one_step_change(lambda m, lr: torch.optim.Adam(m.parameters(), lr=lr), X, Tr, lr)
    assert dW.shape == (6, 4)
    torch.testing.assert_close(dW, lr * fs.first_steps(X, Tr)["Adam"], rtol=0, atol=1e-14)
    opts = []

    def make_iso(m, lr):
        opts.append(Iso(m, lr=lr, momentum=0.0, damping=0.0, stats_dtype=torch.float64))
        return opts[-1]

    dW = fs.one_step_change(make_iso, X, Tr, lr)
    torch.testing.assert_close(dW, lr * fs.first_steps(X, Tr)["Iso"], rtol=0, atol=1e-10)
    assert not opts[0].statistics.attached  # hooks removed
    with pytest.raises(ValueError):
        fs.one_step_change(make_iso, X, T[:5], lr)


def test_tuned_one_step_agrees_with_line_search():
    p, A, S = _problem_pieces(n=8, kappa=30.0)
    X, T = p.batch(0, 0)
    d = fs.first_steps(X, T)
    hyper = {"muon": {"exact": True, "momentum": 0.0}, "iso": {"damping": 0.0, "momentum": 0.0},
             "isoadam": {"damping": 0.0}}
    for name in ("sgd", "adam", "iso", "muon", "isoadam"):
        key = {"sgd": "SGD", "adam": "Adam", "iso": "Iso", "muon": "Muon", "isoadam": "IsoAdam"}[name]
        r = fs.tuned_one_step(p, name, hyper=hyper.get(name))
        lr_star, rel_star = fs.line_search(d[key], A, S)
        assert abs(r["relative_loss"] - float(rel_star)) < 1e-4, name
        scale = 2 / p.n if name == "sgd" else 1.0  # the engine's mse_loss rescales SGD's gradient
        assert abs(math.log(r["lr"] * scale / float(lr_star))) < 0.02, name
        L0 = fs.population_loss(torch.zeros_like(A), A, S)
        torch.testing.assert_close(fs.population_loss(r["weights"], A, S) / L0,
                                   torch.tensor(r["relative_loss"], dtype=torch.float64), rtol=1e-12, atol=0)
