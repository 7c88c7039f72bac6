"""The vectorized engine against one-at-a-time torch.optim runs, divergence, determinism, roots."""

import io

import numpy as np
import pytest
import torch

from isolab import linalg, rules
from isolab.book.engine import DEFAULTS, OPTIMIZERS, Progress, inverse_sqrt_batched, reference_run, sweep, whitening_residual
from isolab.book.engine.reference import REFERENCED
from isolab.book.problems import DeepLinearRegression, PureNoise

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


# kfac has no torch.optim counterpart: test_kfac_lanes_match_a_per_layer_loop
@pytest.mark.parametrize("name", REFERENCED)
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
    ("soap", dict(betas=(0.9, 0.99), shampoo_beta=0.8, precondition_frequency=3, weight_decay=1e-2)),
    ("shampoo_graft", dict(betas=(0.8, 0.99), damping=1e-3, root_interval=3, weight_decay=1e-2)),
])
def test_engine_matches_torch_optim_with_other_hyperparameters(name, hyper):
    _compare(SMALL, name, LRS[:2], 8, hyper=hyper, rtol=1e-7)


@pytest.mark.parametrize("nesterov", [True, False])
def test_muon_lanes_match_isolab_muon_over_twenty_steps(nesterov):
    """Part III's Muon baseline: 20 steps in float64, every lane within 1e-8 of
    isolab.optim.Muon (whose bf16 mode is bitwise torch.optim.Muon: tests/lib/test_dropin.py)."""
    _compare(SMALL, "muon", LRS, 20, hyper=dict(momentum=0.9, nesterov=nesterov), rtol=1e-8)


@pytest.mark.parametrize("placement", ["gradient", "update"])
def test_iso_lanes_match_iso_for_both_momentum_placements(placement):
    """Momentum before the whitening (the default) or after it: the engine's lanes are
    isolab.optim.Iso step by step, with roots refreshed every 3 steps (where the two
    placements differ)."""
    _compare(SMALL, "iso", LRS, 20, hyper=dict(momentum=0.9, momentum_placement=placement, root_interval=3),
             rtol=1e-8)


def test_momentum_placements_differ_when_the_roots_change_and_bad_input_is_named():
    from isolab.book.engine import sweep

    runs = [sweep(SMALL, "iso", [1e-2], 12, hyper=dict(momentum=0.9, momentum_placement=p, root_interval=3),
                  dtype=torch.float64, progress=False).loss[0, 0] for p in ("gradient", "update")]
    np.testing.assert_allclose(runs[0][:4], runs[1][:4], rtol=1e-12)  # one set of roots for updates 1-3
    assert np.abs(runs[0][-1] - runs[1][-1]) > 1e-9 * np.abs(runs[0][-1])
    with pytest.raises(ValueError, match="momentum_placement.*'before'"):
        sweep(SMALL, "iso", [1e-2], 2, hyper=dict(momentum_placement="before"), progress=False)


def test_soap_lanes_match_pytorch_optimizers_soap_over_twenty_steps():
    """The reference baseline of Part III: 20 steps in float64, six eigenbasis refreshes,
    every lane within 1e-8 of pytorch-optimizer's SOAP."""
    _compare(SMALL, "soap", LRS, 20, hyper=dict(precondition_frequency=3), rtol=1e-8)


class _GraftedShampooLoop(torch.optim.Optimizer):
    """Shampoo with Adam grafting written out matrix by matrix, from the formulas of
    GraftedShampooRule's docstring (an independent reading, for the test only)."""

    def __init__(self, params, lr, betas=(0.9, 0.999), graft_eps=1e-8, damping=1e-6, root_interval=10):
        super().__init__(params, dict(lr=lr, betas=betas, graft_eps=graft_eps, damping=damping,
                                      root_interval=root_interval))

    @staticmethod
    def _root(C, damping):
        C = (C + C.T) / 2
        w, V = torch.linalg.eigh(C + damping * torch.trace(C) / C.shape[0] * torch.eye(C.shape[0], dtype=C.dtype))
        inv = torch.where(w > C.shape[0] * torch.finfo(C.dtype).eps * w.max(), w, torch.inf) ** -0.25
        return V @ torch.diag(inv) @ V.T

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            b1, b2 = group["betas"]
            for p in group["params"]:
                g, st = p.grad, self.state[p]
                if not st:
                    st.update(t=0, L=torch.zeros(g.shape[0], g.shape[0], dtype=g.dtype),
                              R=torch.zeros(g.shape[1], g.shape[1], dtype=g.dtype), v=torch.zeros_like(g),
                              m=torch.zeros_like(g))
                st["t"] += 1
                t = st["t"]
                st["L"] = b2 * st["L"] + (1 - b2) * g @ g.T
                st["R"] = b2 * st["R"] + (1 - b2) * g.T @ g
                st["v"] = b2 * st["v"] + (1 - b2) * g * g
                c2 = 1 - b2**t
                if (t - 1) % group["root_interval"] == 0:
                    st["Lr"], st["Rr"] = self._root(st["L"] / c2, group["damping"]), self._root(st["R"] / c2, group["damping"])
                s = st["Lr"] @ g @ st["Rr"]
                a = g / ((st["v"] / c2).sqrt() + group["graft_eps"])
                st["m"] = b1 * st["m"] + (1 - b1) * s * (a.norm() / s.norm())
                p -= group["lr"] * st["m"] / (1 - b1**t)


@pytest.mark.parametrize("hyper", [{}, dict(betas=(0.8, 0.99), damping=1e-3, root_interval=3)])
def test_grafted_shampoo_lanes_match_a_per_matrix_loop(hyper):
    steps, seed = 15, 0
    s = sweep(SMALL, "shampoo_graft", LRS, steps, seeds=(seed,), hyper=hyper, dtype=torch.float64,
              keep_weights=True, max_loss=None, progress=False)
    for i, lr in enumerate(LRS):
        model = SMALL.reference_model(SMALL.initial_weights(seed).to(torch.float64))
        opt = _GraftedShampooLoop(model.parameters(), lr, **hyper)
        losses = []
        for t in range(steps + 1):
            X, T = SMALL.batch(t, seed)
            loss = SMALL.reference_loss(model(X), T)
            losses.append(float(loss.detach()))
            if t < steps:
                opt.zero_grad()
                loss.backward()
                opt.step()
        np.testing.assert_allclose(s.loss[0, i], losses, rtol=1e-9, err_msg=f"lr={lr}")
        np.testing.assert_allclose(s.weights[0, i], SMALL.weights_of(model).numpy(), rtol=1e-9, atol=1e-12)


def _kfac_loop(problem, lr, steps, seed, momentum=0.9, beta_cov=0.95, damping=0.1, root_interval=10):
    """K-FAC written out layer by layer: autograd's layer inputs for A, the Gauss-Newton
    output factor (2/n) P^T P from the later layers' weights for B."""
    model = problem.reference_model(problem.initial_weights(seed).to(torch.float64))
    layers = list(model)
    st = [dict(A=0, B=0, buf=torch.zeros_like(m.weight)) for m in layers]
    losses = []

    def inverse(C):
        C = (C + C.T) / 2
        return torch.linalg.inv(C + damping * torch.trace(C) / C.shape[0] * torch.eye(C.shape[0], dtype=C.dtype))

    for t in range(1, steps + 2):
        X, T = problem.batch(t - 1, seed)
        h, ins = X, []
        for m in layers:
            ins.append(h)
            h = m(h)
        loss = problem.reference_loss(h, T)
        losses.append(float(loss.detach()))
        if t == steps + 1:
            break
        model.zero_grad()
        loss.backward()
        with torch.no_grad():
            P = torch.eye(problem.n, dtype=torch.float64)
            products = []
            for m in reversed(layers):  # P_i = W_k ... W_{i+1} (torch's layout)
                products.append(P)
                P = P @ m.weight
            for m, x, s, P in zip(layers, ins, st, reversed(products)):
                s["A"] = beta_cov * s["A"] + (1 - beta_cov) * x.T @ x / x.shape[0]
                s["B"] = beta_cov * s["B"] + (1 - beta_cov) * (2 / problem.n) * P.T @ P
                if (t - 1) % root_interval == 0:
                    c = 1 - beta_cov**t
                    s["Ai"], s["Bi"] = inverse(s["A"] / c), inverse(s["B"] / c)
                u = s["Bi"] @ m.weight.grad @ s["Ai"]
                if momentum > 0:
                    s["buf"] = momentum * s["buf"] + (1 - momentum) * u
                    u = s["buf"]
                m.weight -= lr * u
    return np.array(losses), problem.weights_of(model).numpy()


@pytest.mark.parametrize("hyper,lrs", [
    ({}, [1e-3, 1e-2, 3e-2]),
    (dict(momentum=0.0, beta_cov=0.5, damping=1.0, root_interval=3), [0.03, 0.1, 0.3]),
])
def test_kfac_lanes_match_a_per_layer_loop(hyper, lrs):
    steps = 12
    s = sweep(SMALL, "kfac", lrs, steps, hyper=hyper, dtype=torch.float64, keep_weights=True, max_loss=None,
              progress=False)
    for i, lr in enumerate(lrs):
        losses, weights = _kfac_loop(SMALL, lr, steps, 0, **hyper)
        assert np.isfinite(losses).all()
        np.testing.assert_allclose(s.loss[0, i], losses, rtol=1e-8, err_msg=f"lr={lr}")
        np.testing.assert_allclose(s.weights[0, i], weights, rtol=1e-8, atol=1e-12)


def test_kfac_is_gauss_newton_one_layer_jumps_to_least_squares():
    """At lr 1 with no averaging, damping or momentum, K-FAC on one layer is Newton's method
    on a quadratic: one step lands on the first batch's least-squares solution."""
    one = DeepLinearRegression(n=6, depth=1, batch=40)
    s = sweep(one, "kfac", [1.0], 1, hyper=dict(momentum=0.0, beta_cov=0.0, damping=0.0), dtype=torch.float64,
              keep_weights=True, progress=False)
    X, T = one.batch(0, 0)
    solution = torch.linalg.lstsq(X, T).solution
    np.testing.assert_allclose(s.weights[0, 0, 0], solution.numpy(), rtol=1e-9, atol=1e-10)
    with pytest.raises(ValueError, match="squared loss; this problem's loss is"):
        sweep(PureNoise(n=4, depth=2, batch=8), "kfac", [0.1], 2)


def test_grafted_shampoo_takes_adams_step_size():
    """Grafting: each layer's first step has the Frobenius norm of Adam's first step."""
    lr = 1e-3
    graft = sweep(SMALL, "shampoo_graft", [lr], 1, dtype=torch.float64, keep_weights=True, progress=False)
    adam = sweep(SMALL, "adam", [lr], 1, dtype=torch.float64, keep_weights=True, progress=False)
    start = SMALL.initial_weights(0).to(torch.float64).numpy()
    step_graft = np.linalg.norm(graft.weights[0, 0] - start, axis=(-2, -1))
    step_adam = np.linalg.norm(adam.weights[0, 0] - start, axis=(-2, -1))
    np.testing.assert_allclose(step_graft, step_adam, rtol=1e-6)


def test_soap_first_call_only_starts_the_factors():
    s = sweep(SMALL, "soap", [1e-2], 1, dtype=torch.float64, keep_weights=True, max_loss=None)
    start = SMALL.initial_weights(0).to(torch.float64)
    np.testing.assert_array_equal(s.weights[0, 0], start.numpy() if hasattr(start, "numpy") else start)


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
    with pytest.raises(ValueError, match="shampoo_beta must be in"):
        sweep(SMALL, "soap", [1e-3], 2, hyper={"shampoo_beta": 1.5})
    with pytest.raises(ValueError, match="precondition_frequency must be a positive int, got 0"):
        sweep(SMALL, "soap", [1e-3], 2, hyper={"precondition_frequency": 0})
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
    from isolab.book.engine import rules_lanes

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


# ----------------------------------------------------------------------------- library defaults
def test_engine_defaults_are_the_librarys_signatures_with_the_stated_deviations_only():
    import inspect

    from isolab.book.engine import defaults as D

    for name, h in DEFAULTS.items():
        expected = D.engine_defaults()[name]
        assert h == expected, name
        for key, value in D.library_defaults(name).items():  # every key the library has
            stated = D.BOOK_DEVIATIONS.get(name, {}).get(key)
            assert h[key] == (stated[0] if stated else value), (name, key)
    # every parameter of every library signature is a lane key, implicit or not a lane's
    for name, cls in D.LIBRARY_CLASSES.items():
        sig = D.signature_defaults(cls)
        for key, value in sig.items():
            if key in D.NOT_LANE or key in D.RENAMED.get(name, {}):
                continue
            if key in D.IMPLICIT.get(name, {}):
                assert D.IMPLICIT[name][key] == (tuple(value) if isinstance(value, list) else value), (name, key)
                continue
            assert key in DEFAULTS[name] or name in ("sgd", "shampoo_graft"), (name, key)
        params = inspect.signature(cls.__init__).parameters
        assert all(k in sig or k in ("self", "params", "model") or params[k].kind in (params[k].VAR_KEYWORD,)
                   for k in params), name


def test_the_iso_lanes_take_the_librarys_shrinkage_and_stat_rows():
    from isolab.book.engine import defaults as D

    lib = {n: D.library_defaults(n) for n in ("iso", "isoadam")}
    assert lib["isoadam"]["shrinkage"] is True and lib["isoadam"]["stat_rows"] == "auto"
    assert lib["isoadam"]["weight_decay"] == 0.01
    # below b = n shrinkage acts, and the lanes follow the library step for step
    small = DeepLinearRegression(n=16, depth=3, batch=8)
    for name in ("iso", "isoadam"):
        _compare(small, name, [0.01], 25, hyper={**lib[name], "weight_decay": 0.01 if name == "isoadam" else 0.0})
    # at b >= n it does nothing: bitwise the plain rule
    wide = DeepLinearRegression(n=16, depth=3, batch=64)
    a, b = (sweep(wide, "iso", [0.01], 20, seeds=[0], dtype=torch.float32, hyper={"shrinkage": s},
                  progress=False).loss for s in (True, False))
    assert np.array_equal(a, b)
    with pytest.raises(NotImplementedError, match="cannot be subsampled"):
        sweep(DeepLinearRegression(16, 3, 2048), "iso", [0.01], 2, seeds=[0], hyper={"stat_rows": 100}, progress=False)


def test_shampoo_lanes_take_the_librarys_momentum():
    _compare(DeepLinearRegression(n=16, depth=3, batch=32), "shampoo", [0.005, 0.02], 25,
             hyper={"momentum": 0.9, "damping": 1e-4})
