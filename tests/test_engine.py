"""The vectorized engine against one-at-a-time torch.optim runs, divergence, determinism, roots."""

import io

import numpy as np
import pytest
import torch

from isolab import linalg, rules
from isolab.engine import DEFAULTS, OPTIMIZERS, Progress, inverse_sqrt_batched, reference_run, sweep, whitening_residual
from isolab.problems import DeepLinearRegression, PureNoise

SMALL = DeepLinearRegression(n=8, depth=3, batch=16)
LRS = [1e-3, 1e-2, 3e-2]
STEPS = 12
# Shampoo's tiny default damping (1e-6, relative) makes it sensitive: rounding differences
# of 1e-16 are amplified to ~1e-8 over 20 steps; every other optimizer agrees to ~1e-13.
RTOL = {name: 1e-9 for name in OPTIMIZERS} | {"shampoo": 1e-5}


def _compare(problem, name, lrs, steps, seed=0, hyper=None, rtol=None, dtype=torch.float64):
    s = sweep(problem, name, lrs, steps, seeds=(seed,), hyper=hyper, dtype=dtype, keep_weights=True, max_loss=None)
    rtol = RTOL[name] if rtol is None else rtol
    for i, lr in enumerate(lrs):
        ref = reference_run(problem, name, lr, steps, seed=seed, hyper=hyper, dtype=dtype)
        assert s.diverged_at[0, i] == ref["diverged_at"], (name, lr)
        ok = np.isfinite(ref["loss"])
        np.testing.assert_allclose(s.loss[0, i][ok], ref["loss"][ok], rtol=rtol, atol=0, err_msg=f"{name} lr={lr}")
        np.testing.assert_allclose(s.weight_norm[0, i][ok], ref["weight_norm"][ok], rtol=rtol, err_msg=name)
        if ref["diverged_at"] < 0:
            err = np.linalg.norm(s.weights[0, i] - ref["weights"].numpy(), axis=(-2, -1))
            assert (err <= rtol * np.linalg.norm(ref["weights"].numpy(), axis=(-2, -1))).all(), (name, lr, err)
    return s


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_engine_matches_torch_optim_lane_by_lane(name):
    _compare(SMALL, name, LRS, STEPS)


@pytest.mark.parametrize("name,hyper", [
    ("sgd", dict(momentum=0.9, nesterov=True, weight_decay=1e-2)),
    ("signsgd", dict(momentum=0.9, weight_decay=1e-2)),
    ("adam", dict(betas=(0.8, 0.99), weight_decay=1e-2)),
    ("muon", dict(nesterov=False, exact=True, weight_decay=1e-2)),
    ("shampoo", dict(beta=0.9, damping=1e-3, root_interval=3)),
    ("iso", dict(momentum=0.0, beta_cov=0.0, damping=0.0, root_interval=1)),
    ("iso", dict(root_interval=3, weight_decay=1e-2)),
    ("isoadam", dict(beta_cov=0.5, root_interval=2)),
])
def test_engine_matches_torch_optim_with_other_hyperparameters(name, hyper):
    _compare(SMALL, name, LRS[:2], 8, hyper=hyper, rtol=1e-7)


def test_engine_matches_in_float32():
    _compare(SMALL, "iso", LRS[:2], STEPS, dtype=torch.float32, rtol=2e-4)
    _compare(SMALL, "adam", LRS[:2], STEPS, dtype=torch.float32, rtol=2e-4)


@pytest.mark.parametrize("name", ["sgd", "iso"])
def test_pure_noise_with_compressed_batches_matches(name):
    # batch 40 > 2n = 12: the noise is compressed jointly with the inputs
    _compare(PureNoise(n=6, depth=3, batch=40), name, [1e-3, 1e-2], 10, seed=3)


def test_newton_roots_match_the_iso_optimizer_with_newton_roots():
    # the batched tracking makes the optimizer's per-matrix decisions, so the runs agree to rounding
    _compare(SMALL, "iso", LRS[:2], STEPS, hyper=dict(root_method="newton", root_interval=1), rtol=1e-8)


def test_divergent_lane_is_dropped_and_others_are_unaffected():
    for name in ("sgd", "iso", "shampoo"):
        lrs = [1e-3, 3e-3, 1e3]
        with_bad = sweep(SMALL, name, lrs, STEPS, dtype=torch.float64)
        without = sweep(SMALL, name, lrs[:2], STEPS, dtype=torch.float64)
        assert with_bad.diverged_at[0, 2] >= 1 and (with_bad.diverged_at[0, :2] == -1).all()
        t = with_bad.diverged_at[0, 2]
        assert np.isnan(with_bad.loss[0, 2, t + 1:]).all()
        np.testing.assert_allclose(with_bad.loss[0, :2], without.loss[0], rtol=1e-12)
        np.testing.assert_allclose(with_bad.weight_norm[0, :2], without.weight_norm[0], rtol=1e-12)
        assert np.isinf(with_bad.final_loss()[0, 2])


def test_nan_and_overflow_are_detected_per_lane():
    # lr so large that float32 overflows to inf/NaN within a few steps: recorded, no exception
    s = sweep(SMALL, "sgd", [1e-3, 1e8], 10, max_loss=None)
    assert s.diverged_at[0, 1] >= 0 and s.diverged_at[0, 0] == -1
    assert np.isfinite(s.loss[0, 0]).all()


def test_determinism_and_seeds():
    a = sweep(SMALL, "isoadam", LRS, 10)
    b = sweep(SMALL, "isoadam", LRS, 10)
    assert np.array_equal(a.loss, b.loss) and np.array_equal(a.weight_norm, b.weight_norm)
    two = sweep(SMALL, "adam", LRS, 10, seeds=(0, 5), dtype=torch.float64)
    one = sweep(SMALL, "adam", LRS, 10, seeds=(5,), dtype=torch.float64)
    assert two.loss.shape == (2, 3, 11)
    np.testing.assert_allclose(two.loss[1], one.loss[0], rtol=1e-12)
    assert not np.allclose(two.loss[0], two.loss[1])


def test_threshold_and_retirement():
    lrs = np.logspace(-3, -1, 5)
    full = sweep(SMALL, "adam", lrs, 60, threshold=0.5, relative_threshold=True, dtype=torch.float64)
    retired = sweep(SMALL, "adam", lrs, 60, threshold=0.5, relative_threshold=True, retire_at_threshold=True,
                    dtype=torch.float64)
    assert np.array_equal(full.hit_at, retired.hit_at)
    assert (full.hit_at >= 0).any()
    for i, h in enumerate(full.hit_at[0]):
        if h >= 0:
            assert full.loss[0, i, h] <= 0.5 * full.loss[0, i, 0] < full.loss[0, i, h - 1]
            assert np.isnan(retired.loss[0, i, h + 1:]).all()
    assert np.array_equal(retired.iterations(), full.iterations())


def test_hyperparameters_are_validated():
    with pytest.raises(ValueError, match="unknown hyperparameter"):
        sweep(SMALL, "adam", [1e-3], 2, hyper={"momentum": 0.9})
    with pytest.raises(ValueError, match="unknown optimizer"):
        sweep(SMALL, "lion", [1e-3], 2)
    with pytest.raises(ValueError, match="lrs"):
        sweep(SMALL, "sgd", [-1.0], 2)
    assert DEFAULTS["iso"]["root_interval"] == 10


def test_warm_started_roots_against_eigh():
    g = torch.Generator().manual_seed(0)
    X = torch.randn(64, 16, 24, generator=g, dtype=torch.float64) * torch.logspace(0, 1, 24, dtype=torch.float64)
    C = X.mT @ X / 16 + 0.0  # rank 16 < 24: damping makes it definite
    exact = linalg.symmetric_inverse_root(C, 2, 1e-3)
    # a slowly changing covariance: previous roots of a nearby matrix
    C_prev = C + 0.01 * torch.diag_embed(C.diagonal(dim1=-2, dim2=-1))
    prev = linalg.symmetric_inverse_root(C_prev, 2, 1e-3)
    stats = {}
    tracked = inverse_sqrt_batched(C, 1e-3, "newton", prev, tol=1e-6, stats=stats)
    assert stats["kept"] + stats["refined"] + stats["stale"] + stats["recomputed"] == 64
    assert (whitening_residual(C, tracked, 1e-3) <= 0.05 + 1e-12).all()
    rel = torch.linalg.matrix_norm(tracked - exact) / torch.linalg.matrix_norm(exact)
    assert rel.max() < 5e-3
    # far from the previous roots: recomputed, accurate to the Newton tolerance
    far = inverse_sqrt_batched(C, 1e-3, "newton", torch.eye(24, dtype=torch.float64).expand(64, 24, 24).clone(),
                               fallback="newton")
    rel = torch.linalg.matrix_norm(far - exact) / torch.linalg.matrix_norm(exact)
    assert rel.max() < 1e-8
    eig = inverse_sqrt_batched(C, 1e-3, "newton", prev, fallback="eigh", tol=1e-12)
    assert (whitening_residual(C, eig, 1e-3) <= 0.05 + 1e-12).all()


def test_tracked_roots_in_a_sweep_are_close_to_eigh():
    a = sweep(SMALL, "iso", LRS, STEPS, dtype=torch.float64, hyper=dict(root_interval=1))
    b = sweep(SMALL, "iso", LRS, STEPS, dtype=torch.float64, hyper=dict(root_interval=1, root_method="newton"))
    np.testing.assert_allclose(a.loss, b.loss, rtol=1e-3)
    assert b.info["roots"]["kept"] + b.info["roots"]["refined"] + b.info["roots"]["stale"] > 0


def test_tensor_learning_rate_rules_equal_the_float_path():
    g = torch.Generator().manual_seed(1)
    p = torch.randn(2, 3, 4, 4, generator=g, dtype=torch.float64)
    grad = torch.randn(2, 3, 4, 4, generator=g, dtype=torch.float64)
    lrs = torch.tensor([1e-3, 1e-2, 1e-1], dtype=torch.float64).reshape(1, 3, 1, 1)
    pv, m, v = p.clone(), torch.zeros_like(p), torch.zeros_like(p)
    rules.adam_update_(pv, grad, m, v, 1, lrs, (0.9, 0.999), 1e-8, 0.1)
    for j in range(3):
        pj, mj, vj = p[:, j].clone(), torch.zeros_like(p[:, j]), torch.zeros_like(p[:, j])
        rules.adam_update_(pj, grad[:, j], mj, vj, 1, float(lrs[0, j, 0, 0]), (0.9, 0.999), 1e-8, 0.1)
        torch.testing.assert_close(pv[:, j], pj, rtol=1e-14, atol=1e-15)


def test_progress_bar_prints_only_when_enabled():
    out = io.StringIO()
    bar = Progress(10, label="x", enabled=True, stream=out, delay=0.0, min_total=0.0, interval=0.0)
    for i in range(10):
        bar.update(i + 1)
    bar.close()
    assert "10/10" in out.getvalue() and out.getvalue().endswith("\n")
    quiet = io.StringIO()
    bar = Progress(10, enabled=False, stream=quiet)
    bar.update(5)
    bar.close()
    assert quiet.getvalue() == ""


@pytest.mark.parametrize("name,hyper", [
    ("muon", None), ("shampoo", dict(root_interval=3)), ("iso", dict(root_interval=3)),
    ("iso", dict(root_interval=2, root_method="newton")), ("isoadam", dict(root_interval=3)),
])
def test_chunks_and_threads_do_not_change_results(name, hyper, monkeypatch):
    # the matmul-heavy rules work on chunks of layers, and the roots of different chunks run
    # on several threads: every matrix gets the same arithmetic, so the results are identical
    from isolab.engine import rules_lanes

    problem = DeepLinearRegression(n=8, depth=6, batch=16)
    lrs = np.logspace(-3, -1, 5)
    whole = sweep(problem, name, lrs, 10, hyper=hyper, dtype=torch.float64, num_threads=1)
    monkeypatch.setattr(rules_lanes, "CHUNK_ENTRIES", 2 * len(lrs) * 64)  # 2 layers per chunk: 3 chunks
    assert len(rules_lanes.layer_chunks(torch.zeros(6, len(lrs), 8, 8))) == 3
    for threads in (1, 2):
        s = sweep(problem, name, lrs, 10, hyper=hyper, dtype=torch.float64, num_threads=threads)
        np.testing.assert_array_equal(s.loss, whole.loss)
        np.testing.assert_array_equal(s.weight_norm, whole.weight_norm)
        assert s.info["roots"] == whole.info["roots"]
