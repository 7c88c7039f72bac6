"""The torch.optim contract and the reductions to the paper's batch formulas."""

import copy
import io

import pytest
import torch
from torch import nn

from isolab import linalg, updates
from isolab.optim import Iso, IsoAdam, LayerStatistics, Muon, Shampoo, SignSGD


def _mlp(dtype=torch.float32, seed=0, d=6, h=16, out=3):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(d, h), nn.ReLU(inplace=True), nn.Linear(h, h), nn.Tanh(), nn.Linear(h, out)).to(dtype)


def _data(n=64, d=6, out=3, dtype=torch.float32, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=dtype)
    y = torch.randn(n, out, generator=g, dtype=dtype)
    return x, y


def _loss(model, x, y):
    return (model(x).float() - y.float()).pow(2).mean()


FACTORIES = {
    "signsgd": lambda m: SignSGD(m, lr=1e-2, momentum=0.9),
    "muon": lambda m: Muon(m, lr=0.02, adam_lr=1e-2),
    "shampoo": lambda m: Shampoo(m, lr=0.02, root_interval=3, adam_lr=1e-2),
    "iso": lambda m: Iso(m, lr=0.02, root_interval=3, adam_lr=1e-2),
    "iso-newton": lambda m: Iso(m, lr=0.02, root_interval=1, root_method="newton", damping=1e-2, adam_lr=1e-2),
    "iso-eigenbasis": lambda m: Iso(m, lr=0.02, root_interval=1, root_method="eigenbasis", adam_lr=1e-2),
    "isoadam-eigenbasis": lambda m: IsoAdam(m, lr=1e-2, root_interval=2, root_method="eigenbasis", weight_decay=0.0),
    "isoadam": lambda m: IsoAdam(m, lr=1e-2, root_interval=2, weight_decay=0.0),
    "isoadam-stat3": lambda m: IsoAdam(m, lr=1e-2, stat_interval=3, root_interval=3, warmup_steps=1, weight_decay=0.0),
}


def _train(model, opt, x, y, steps, closure=False):
    for _ in range(steps):
        if closure:
            def c():
                opt.zero_grad()
                loss = _loss(model, x, y)
                loss.backward()
                return loss

            opt.step(c)
        else:
            opt.zero_grad()
            _loss(model, x, y).backward()
            opt.step()


# ----------------------------------------------------------------------------- Adam parity


def test_isoadam_without_whitening_is_adam_step_for_step():
    x, y = _data()
    a, b = _mlp(), _mlp()
    ref = torch.optim.AdamW(a.parameters(), lr=3e-3, betas=(0.8, 0.99), eps=1e-7)  # AdamW's default decay 0.01
    opt = IsoAdam(b, lr=3e-3, betas=(0.8, 0.99), eps=1e-7, whiten=False)
    assert opt.statistics is None
    for _ in range(8):
        for m, o in ((a, ref), (b, opt)):
            o.zero_grad()
            _loss(m, x, y).backward()
            o.step()
        for pa, pb in zip(a.parameters(), b.parameters()):
            torch.testing.assert_close(pb, pa, rtol=1e-6, atol=0)


# ----------------------------------------------------------------------------- batch formulas


def _one_layer(n=5, m=4, b=40, seed=0):
    torch.manual_seed(seed)
    layer = nn.Linear(n, m, bias=False).double()
    x = torch.randn(b, n, dtype=torch.float64) @ torch.randn(n, n, dtype=torch.float64)
    t = torch.randn(b, m, dtype=torch.float64)
    return layer, x, t


def _captured(layer, x, t):
    with LayerStatistics({"l": layer}, keep=True, dtype=torch.float64) as s:
        (layer(x) - t).pow(2).mean().backward()
        X, G = s.inputs("l"), s.output_grads("l")
    layer.weight.grad = None
    return X, G


def test_iso_single_batch_step_is_lr_times_iso_update():
    layer, x, t = _one_layer()
    X, G = _captured(layer, x, t)
    w0 = layer.weight.detach().clone()
    opt = Iso(layer, lr=0.1, momentum=0.0, beta_cov=0.0, damping=0.0, root_interval=1, stats_dtype=torch.float64)
    (layer(x) - t).pow(2).mean().backward()
    opt.step()
    expected = 0.1 * updates.iso_update(X, G)  # row convention (n, m): weight = W^T
    torch.testing.assert_close(w0 - layer.weight.detach(), expected.T, rtol=1e-9, atol=1e-12)
    # its singular values are canonical correlations: all <= 1
    assert torch.linalg.matrix_norm(expected / 0.1, ord=2) <= 1 + 1e-9


def test_isoadam_first_step_is_lr_times_iso_adam_first_step():
    layer, x, t = _one_layer(seed=3)
    X, G = _captured(layer, x, t)
    w0 = layer.weight.detach().clone()
    opt = IsoAdam(layer, lr=0.01, beta_cov=0.0, damping=0.0, eps=1e-12, root_interval=1, stats_dtype=torch.float64,
                  weight_decay=0.0)
    (layer(x) - t).pow(2).mean().backward()
    opt.step()
    expected = 0.01 * updates.iso_adam_first_step(X, G, eps=1e-12)
    torch.testing.assert_close(w0 - layer.weight.detach(), expected.T, rtol=1e-7, atol=1e-12)


def test_iso_scale_free_in_loss_reduction():
    # mean vs sum loss: Cov(G)^{-1/2} absorbs the 1/b, the step is the same
    outs = []
    for reduce in ("mean", "sum"):
        layer, x, t = _one_layer(seed=5)
        opt = Iso(layer, lr=0.1, momentum=0.0, beta_cov=0.0, damping=0.0, root_interval=1, stats_dtype=torch.float64)
        getattr((layer(x) - t).pow(2), reduce)().backward()
        opt.step()
        outs.append(layer.weight.detach().clone())
    torch.testing.assert_close(outs[0], outs[1], rtol=1e-9, atol=1e-12)


def test_shampoo_beta0_one_step_is_msign():
    layer, x, t = _one_layer(seed=2)
    w0 = layer.weight.detach().clone()
    opt = Shampoo(layer, lr=0.1, beta=0.0, damping=0.0, stats_dtype=torch.float64)
    (layer(x) - t).pow(2).mean().backward()
    g = layer.weight.grad.clone()
    opt.step()
    torch.testing.assert_close(w0 - layer.weight.detach(), 0.1 * linalg.msign(g), rtol=1e-7, atol=1e-10)


def test_muon_exact_no_momentum_is_scaled_msign():
    layer, x, t = _one_layer(n=3, m=6, seed=4)  # weight (6, 3): tall, scale sqrt(2)
    w0 = layer.weight.detach().clone()
    opt = Muon(layer, lr=0.1, momentum=0.0, exact=True)
    (layer(x) - t).pow(2).mean().backward()
    g = layer.weight.grad.clone()
    opt.step()
    torch.testing.assert_close(w0 - layer.weight.detach(), 0.1 * 2**0.5 * linalg.msign(g), rtol=1e-9, atol=1e-12)


# ----------------------------------------------------------------------------- state_dict


def _state_equal(s1, s2):
    assert s1.keys() == s2.keys()
    for k in s1:
        a, b = s1[k], s2[k]
        if isinstance(a, torch.Tensor):
            assert a.dtype == b.dtype and torch.equal(a, b), k
        elif isinstance(a, dict):
            _state_equal(a, b)
        else:
            assert a == b, k


@pytest.mark.parametrize("name", sorted(FACTORIES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_resume_is_bitwise_identical(name, dtype):
    x, y = _data(dtype=dtype)
    n_before, n_after = 4, 4
    m1 = _mlp(dtype)
    o1 = FACTORIES[name](m1)
    _train(m1, o1, x, y, n_before + n_after)

    m2 = _mlp(dtype)
    o2 = FACTORIES[name](m2)
    _train(m2, o2, x, y, n_before)
    buf = io.BytesIO()
    torch.save({"model": m2.state_dict(), "opt": o2.state_dict()}, buf)
    buf.seek(0)
    ckpt = torch.load(buf)
    m3 = _mlp(dtype, seed=123)
    o3 = FACTORIES[name](m3)
    m3.load_state_dict(ckpt["model"])
    o3.load_state_dict(ckpt["opt"])
    for st in o3.state.values():  # statistics keep float32 through load_state_dict
        for k in ("cov_x", "cov_g", "root_x", "root_g", "L", "R"):
            if k in st:
                assert st[k].dtype == torch.float32
    _train(m3, o3, x, y, n_after)
    for p1, p3 in zip(m1.parameters(), m3.parameters()):
        assert torch.equal(p1, p3)
    s1, s3 = o1.state_dict(), o3.state_dict()
    _state_equal(s1["state"], s3["state"])


# ----------------------------------------------------------------------------- scheduler, closure, groups


@pytest.mark.parametrize("name", ["muon", "iso", "isoadam", "shampoo", "signsgd"])
def test_lr_scheduler_acts_on_every_group(name):
    x, y = _data()
    m = _mlp()
    opt = FACTORIES[name](m)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0 if step == 0 else 0.0)
    _train(m, opt, x, y, 1)
    sched.step()
    assert all(g["lr"] == 0.0 for g in opt.param_groups)
    before = [p.detach().clone() for p in m.parameters()]
    _train(m, opt, x, y, 2)
    for p, q in zip(before, m.parameters()):
        assert torch.equal(p, q)  # lr 0 in every group (matrix and Adam fallback): nothing moves


@pytest.mark.parametrize("name", ["muon", "iso", "isoadam"])
def test_closure_matches_plain_loop(name):
    x, y = _data()
    m1, m2 = _mlp(), _mlp()
    o1, o2 = FACTORIES[name](m1), FACTORIES[name](m2)
    _train(m1, o1, x, y, 3)
    _train(m2, o2, x, y, 3, closure=True)
    for p, q in zip(m1.parameters(), m2.parameters()):
        assert torch.equal(p, q)
    loss = o2.step(lambda: (o2.zero_grad(), _loss(m2, x, y).backward(), torch.tensor(7.0))[-1])
    assert loss.item() == 7.0


def test_zero_grad_clears_grads_and_captures():
    x, y = _data()
    m = _mlp()
    opt = Iso(m)
    _loss(m, x, y).backward()
    assert opt.statistics.rows("0") == 64
    opt.zero_grad()
    assert all(p.grad is None for p in m.parameters())
    assert opt.statistics.rows("0") == 0


def test_explicit_param_groups():
    m = _mlp()
    weights = [m[0].weight, m[2].weight, m[4].weight]
    rest = [m[0].bias, m[2].bias, m[4].bias]
    opt = Muon([{"params": weights}, {"params": rest, "algorithm": "adam", "lr": 1e-3}], lr=0.05)
    assert [g["algorithm"] for g in opt.param_groups] == ["muon", "adam"]
    assert opt.param_groups[0]["lr"] == 0.05 and opt.param_groups[1]["lr"] == 1e-3
    assert opt.param_groups[1]["betas"] == (0.9, 0.95)  # Adam defaults, not Muon's
    iso = Iso(m, params=[{"params": weights[:2]}, {"params": rest, "algorithm": "adam"}])
    assert set(iso.statistics.modules) == {"0", "2"}  # only the whitened layers are hooked
    x, y = _data()
    _train(m, iso, x, y, 2)
    assert m[4].weight.grad is not None and m[4].weight not in iso.state


# ----------------------------------------------------------------------------- bad input


def _snapshot(model, opt):
    return [p.detach().clone() for p in model.parameters()], copy.deepcopy(opt.state_dict())


def _assert_untouched(model, opt, snap):
    params, sd = snap
    for p, q in zip(params, model.parameters()):
        assert torch.equal(p, q)
    _state_equal(sd["state"], opt.state_dict()["state"])


@pytest.mark.parametrize("name", sorted(FACTORIES))
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_nonfinite_gradient_raises_and_changes_nothing(name, bad):
    x, y = _data()
    m = _mlp()
    opt = FACTORIES[name](m)
    _train(m, opt, x, y, 2)
    snap = _snapshot(m, opt)
    opt.zero_grad()
    _loss(m, x, y).backward()
    m[2].weight.grad[1, 1] = bad  # a matrix parameter, after the fallback group was validated too
    with pytest.raises(FloatingPointError, match=r"2\.weight"):
        opt.step()
    _assert_untouched(m, opt, snap)
    opt.zero_grad()
    _loss(m, x, y).backward()
    m[4].bias.grad[0] = bad  # a fallback (Adam) parameter
    with pytest.raises(FloatingPointError, match=r"4\.bias"):
        opt.step()
    _assert_untouched(m, opt, snap)


@pytest.mark.parametrize("opt_cls", [Iso, IsoAdam])
def test_nonfinite_statistic_raises_and_changes_nothing(opt_cls):
    x, y = _data()
    m = _mlp()
    opt = opt_cls(m, root_interval=1)
    _train(m, opt, x, y, 2)
    snap = _snapshot(m, opt)
    opt.zero_grad()
    _loss(m, x, y).backward()
    opt.statistics._captures["4"].gg[0, 0] = float("nan")  # a poisoned statistic, finite gradients
    with pytest.raises(FloatingPointError, match=r"4\.weight"):
        opt.step()
    _assert_untouched(m, opt, snap)


def test_named_by_shape_and_group_without_model():
    w = nn.Parameter(torch.randn(4, 3))
    opt = Muon([w])
    w.grad = torch.full_like(w, float("nan"))
    with pytest.raises(FloatingPointError, match=r"#0 in group 0 of shape \(4, 3\)"):
        opt.step()


@pytest.mark.parametrize("method", ["eigh", "newton", "eigenbasis"])
def test_rank_deficient_statistics_give_finite_updates(method):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(32, 24), nn.Tanh(), nn.Linear(24, 16))
    damping = 1e-3 if method == "newton" else 0.0  # eigh (and the eigenbasis' fallback): pseudo-inverse
    opt = Iso(m, beta_cov=0.0, damping=damping, root_method=method, root_interval=1)
    x = torch.randn(4, 32)  # b = 4 < n = 32: Cov(X) has rank 4
    for _ in range(3):
        opt.zero_grad()
        m(x).pow(2).mean().backward()
        opt.step()
        assert all(torch.isfinite(p).all() for p in m.parameters())


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_zero_gradient_gives_zero_update(name):
    x, _ = _data()
    m = _mlp()
    opt = FACTORIES[name](m)
    before = [p.detach().clone() for p in m.parameters()]
    opt.zero_grad()
    (m(x) * 0.0).sum().backward()  # every gradient exactly zero, statistics of X nonzero
    opt.step()
    for p, q in zip(before, m.parameters()):
        assert torch.equal(p, q)


def test_model_without_linear_layers():
    model = nn.Sequential(nn.Conv3d(2, 2, 3), nn.ReLU())
    for cls in (Iso, IsoAdam):
        with pytest.raises(ValueError, match="no layer whose inputs and output gradients can be captured"):
            cls(model)
    with pytest.raises(ValueError, match="no hidden weight matrix"):
        Muon(nn.Sequential(nn.LayerNorm(4)))
    with pytest.raises(TypeError, match="needs the model"):
        Iso([nn.Parameter(torch.ones(2, 2))])


def test_vector_parameter_in_matrix_group():
    for cls in (Muon, Shampoo):
        with pytest.raises(ValueError, match=r"ndim=1.*needs a 2-D weight"):
            cls([nn.Parameter(torch.ones(5))])
    m = _mlp()
    with pytest.raises(ValueError, match="ndim=1"):
        Iso(m, params=[m[0].bias])
    with pytest.raises(ValueError, match="not the weight of an nn.Linear"):
        Iso(m, params=[nn.Parameter(torch.ones(3, 3))])


def test_layer_without_captures_is_reported():
    m = _mlp()
    opt = Iso(m)
    x, y = _data()
    with torch.no_grad():
        h = m[1](m[0](x))
    # weight used through F.linear, bypassing the module's hooks
    out = torch.nn.functional.linear(m[3](m[2](h)), m[4].weight, m[4].bias)
    (out - y).pow(2).mean().backward()
    with pytest.raises(RuntimeError, match=r"'4'"):
        opt.step()


BAD_HYPERPARAMETERS = [
    (SignSGD, {"lr": -1.0}, "lr"),
    (SignSGD, {"momentum": 1.0}, "momentum"),
    (Muon, {"lr": float("nan")}, "lr"),
    (Muon, {"momentum": -0.1}, "momentum"),
    (Muon, {"ns_steps": 0}, "ns_steps"),
    (Muon, {"nesterov": 1}, "nesterov"),
    (Muon, {"adam_betas": (0.9, 1.0)}, "adam_betas"),
    (Muon, {"adam_eps": 0.0}, "adam_eps"),
    (Shampoo, {"beta": 1.5}, "beta"),
    (Shampoo, {"root_interval": 2.5}, "root_interval"),
    (Shampoo, {"damping": -1e-3}, "damping"),
    (Iso, {"beta_cov": 1.0}, "beta_cov"),
    (Iso, {"damping": -1.0}, "damping"),
    (Iso, {"stat_interval": 0}, "stat_interval"),
    (Iso, {"root_method": "cholesky"}, "root_method"),
    (Iso, {"warmup_steps": -1}, "warmup_steps"),
    (Iso, {"stats_dtype": torch.bfloat16}, "stats_dtype"),
    (IsoAdam, {"betas": (0.9,)}, "betas"),
    (IsoAdam, {"betas": (-0.1, 0.9)}, r"betas\[0\]"),
    (IsoAdam, {"eps": -1e-8}, "eps"),
    (IsoAdam, {"weight_decay": -0.1}, "weight_decay"),
    (IsoAdam, {"whiten": "yes"}, "whiten"),
    (IsoAdam, {"root_tol": 0.0}, "root_tol"),
]


@pytest.mark.parametrize("cls,kwargs,name", BAD_HYPERPARAMETERS, ids=[f"{c.__name__}-{n}" for c, _, n in BAD_HYPERPARAMETERS])
def test_hyperparameters_validated(cls, kwargs, name):
    with pytest.raises(ValueError, match=name):
        cls(_mlp(), **kwargs)


def test_group_override_validated():
    m = _mlp()
    with pytest.raises(ValueError, match="lr"):
        Muon([{"params": [m[0].weight], "lr": -1}])
    with pytest.raises(ValueError, match="algorithm"):
        Muon([{"params": [m[0].weight], "algorithm": "sgd"}])


def test_shampoo_adam_grafting_takes_adams_step_size_and_validates():
    """graft="adam": Shampoo's direction with Adam's (momentum-free) step size, matrix by matrix."""
    torch.manual_seed(0)
    layer = nn.Linear(6, 4, bias=False)
    start = layer.weight.detach().clone()
    opt = Shampoo(layer, lr=1e-2, beta=0.999, graft="adam", graft_eps=1e-8)
    x = torch.randn(32, 6)
    layer(x).square().mean().backward()
    g = layer.weight.grad.clone()
    opt.step()
    step = (layer.weight.detach() - start).norm()
    adam_first = (1e-2 * g / (g.abs() + 1e-8)).norm()
    assert torch.allclose(step, adam_first, rtol=1e-5)
    direction = (start - layer.weight.detach()) / step
    raw = linalg.symmetric_inverse_root(g @ g.T, 4, 1e-6) @ g @ linalg.symmetric_inverse_root(g.T @ g, 4, 1e-6)
    assert torch.allclose(direction, raw / raw.norm(), atol=1e-5), "the direction stays Shampoo's"
    with pytest.raises(ValueError, match="graft must be None or 'adam', got 'sgd'"):
        Shampoo(layer, graft="sgd")
    with pytest.raises(ValueError, match="graft_beta2"):
        Shampoo(layer, graft="adam", graft_beta2=1.0)
