"""Every optimizer trains a small MLP (float32, bfloat16; CPU and, where present, GPU)."""

import pytest
import torch
from torch import nn

from isolab import linalg, updates
from isolab.optim import Iso, IsoAdam, Muon, Shampoo, SignSGD

OPTIMIZERS = {
    "adam": lambda m: torch.optim.Adam(m.parameters(), lr=1e-2),
    "signsgd": lambda m: SignSGD(m, lr=3e-3, momentum=0.9),
    "muon": lambda m: Muon(m, lr=0.02, adam_lr=1e-2),
    "shampoo": lambda m: Shampoo(m, lr=0.02, adam_lr=1e-2),
    "iso": lambda m: Iso(m, lr=0.02, adam_lr=1e-2),
    "iso-newton": lambda m: Iso(m, lr=0.02, root_method="newton", root_interval=1, adam_lr=1e-2),
    "iso-eigenbasis": lambda m: Iso(m, lr=0.02, root_method="eigenbasis", root_interval=1, adam_lr=1e-2),
    "isoadam": lambda m: IsoAdam(m, lr=1e-2),
}


def _problem(device, dtype, seed=0):
    torch.manual_seed(seed)
    model = nn.Sequential(
        nn.Linear(8, 32), nn.ReLU(inplace=True), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 1)
    ).to(device=device, dtype=dtype)
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(256, 8, generator=g)
    y = torch.sin(x[:, :1] * x[:, 1:2]) + x[:, 2:3]
    return model, x.to(device, dtype), y.to(device)


def _run(name, device, dtype, steps=60):
    model, x, y = _problem(device, dtype)
    opt = OPTIMIZERS[name](model)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = (model(x).float() - y).pow(2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    for p in model.parameters():
        assert torch.isfinite(p).all()
        assert p.dtype == dtype
    return losses


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_reduces_mlp_loss(name, dtype):
    losses = _run(name, "cpu", dtype)
    # the initial loss is about 2; every optimizer should at least halve it in 60 steps
    assert losses[-1] < 0.5 * losses[0], (name, losses[0], losses[-1])


def _gpu_device():
    if torch.cuda.is_available():
        return "cuda"
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return "mps"
    return None


@pytest.mark.gpu
@pytest.mark.skipif(_gpu_device() is None, reason="no CUDA or MPS device")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_reduces_mlp_loss_on_gpu(name, dtype):
    device = _gpu_device()
    losses = _run(name, device, dtype)
    assert losses[-1] < 0.5 * losses[0], (name, losses[0], losses[-1])
    model, x, y = _problem(device, dtype)
    opt = OPTIMIZERS[name](model)
    (model(x).float() - y).pow(2).mean().backward()
    opt.step()
    for st in opt.state.values():  # statistics stay float32 and on the device
        for k in ("cov_x", "cov_g", "root_x", "root_g", "L", "R"):
            if k in st:
                assert st[k].dtype == torch.float32 and st[k].device.type == device


def test_warmup_collects_statistics_without_moving_whitened_weights():
    model, x, y = _problem("cpu", torch.float32)
    opt = Iso(model, warmup_steps=2, root_interval=5)
    w = model[2].weight.detach().clone()
    for step in range(3):
        opt.zero_grad()
        (model(x) - y).pow(2).mean().backward()
        opt.step()
        st = opt.state[model[2].weight]
        assert st["stat_step"] == step + 1
        if step < 2:
            assert torch.equal(model[2].weight, w) and "root_x" not in st
    assert not torch.equal(model[2].weight, w) and "root_x" in st


def test_statistics_only_computed_on_refresh_steps():
    model, x, y = _problem("cpu", torch.float32)
    opt = IsoAdam(model, stat_interval=3, root_interval=3)
    enabled = []
    for _ in range(7):
        enabled.append(opt.statistics.enabled)
        opt.zero_grad()
        (model(x) - y).pow(2).mean().backward()
        opt.step()
    assert enabled == [True, False, False, True, False, False, True]
    assert opt.state[model[0].weight]["stat_step"] == 3


@pytest.mark.parametrize("tracked", ["newton", "eigenbasis"])
def test_tracked_roots_match_eigh_roots(tracked):
    models, opts = [], []
    for method in ("eigh", tracked):
        model, x, y = _problem("cpu", torch.float64)
        opt = Iso(model, root_method=method, root_interval=1, damping=1e-3, stats_dtype=torch.float64)
        for step in range(6):
            opt.zero_grad()
            (model(x) - y).pow(2).mean().backward()
            opt.step()
            if step == 0:
                first = [p.detach().clone() for p in model.parameters()]
        models.append(first), opts.append((model, opt))
    for p, q in zip(*models):  # first step: a full Newton solve or eigh itself, equal to eigh's root
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-8)
    # later steps track the root: its whitening residual stays within the documented bound
    model, opt = opts[1]
    for layer in (model[0], model[2], model[4]):
        st = opt.state[layer.weight]
        for cov, root in (("cov_x", "root_x"), ("cov_g", "root_g")):
            C = st[cov] / (1 - 0.95 ** st["stat_step"])
            n = C.shape[0]
            A = C + 1e-3 * torch.trace(C) / n * torch.eye(n, dtype=C.dtype)
            if tracked == "newton":
                P = st[root]
            else:  # root_interval=1: the root is rebuilt from the kept eigenbasis every step
                assert root not in st and st[root.replace("root_", "basis_")].shape == (n, n)
                P = linalg.inverse_sqrt_in_basis(C, st[root.replace("root_", "basis_")], 1e-3).root
            res = torch.linalg.matrix_norm(torch.eye(n, dtype=C.dtype) - P @ A @ P) / n**0.5
            assert res <= 0.1


def test_memory_of_state():
    # IsoAdam keeps Adam's two moments plus, per whitened matrix: the covariances (EMA)
    # when roots are recomputed every step; covariances and roots when statistics are
    # refreshed more often than roots; only the roots (n² + m², the budget) when
    # both are refreshed together every k > 1 steps (the covariances are rebuilt from them)
    model, x, y = _problem("cpu", torch.float32)
    for stat_interval, root_interval, extra in ((1, 1, 1), (1, 10, 2), (10, 10, 1), (3, 3, 1)):
        opt = IsoAdam(model, stat_interval=stat_interval, root_interval=root_interval)
        for _ in range(4):
            opt.zero_grad()
            (model(x) - y).pow(2).mean().backward()
            opt.step()
        w = model[2].weight
        st = opt.state[w]
        n, m = w.shape[1], w.shape[0]
        numel = sum(v.numel() for v in st.values() if isinstance(v, torch.Tensor))
        assert numel == 2 * w.numel() + extra * (n * n + m * m), (stat_interval, root_interval)
        opt.remove_hooks()


def test_lean_state_handles_an_exactly_zero_gradient_covariance():
    """Statistics and roots refreshed together (lean state) with a zero-initialised head:
    the first layer's output gradients are exactly zero, so Cov(G) = 0 and the relative
    damping is 0. The step must fall back to the pseudo-inverse root, not divide by zero."""
    from isolab.optim import IsoAdam

    for stat_interval in (1, 10):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 8, bias=False), torch.nn.Linear(8, 4, bias=False))
        torch.nn.init.zeros_(model[1].weight)
        opt = IsoAdam(model, stat_interval=stat_interval, root_interval=10, weight_decay=0.0)
        before = model[0].weight.detach().clone()
        model(torch.randn(16, 8)).square().mean().backward()
        opt.step()
        assert torch.isfinite(model[1].weight).all()
        assert torch.equal(model[0].weight, before), "a zero gradient must give a zero update"
        opt.remove_hooks()


# ----------------------------------------------------------------------------- Iso(direction="polar")
def _one_iso_step(direction, noise, n_in=8, n_out=24, b=256):
    """One step of Iso on ``Linear(n_in, n_out)`` with the batch's own statistics (β = 0, μ = 0,
    δ = 0): returns ``(ΔW, X, G)`` with ``G`` the output gradient of the summed loss."""
    g = torch.Generator().manual_seed(0)
    layer = nn.Linear(n_in, n_out, bias=False).double()
    with torch.no_grad():
        layer.weight.copy_(0.1 * torch.randn(n_out, n_in, generator=g, dtype=torch.float64))
    X = torch.randn(b, n_in, generator=g, dtype=torch.float64)
    target = X @ torch.randn(n_in, n_out, generator=g, dtype=torch.float64)
    target = target + noise * torch.randn(b, n_out, generator=g, dtype=torch.float64)
    opt = Iso(layer, lr=0.1, momentum=0.0, beta_cov=0.0, damping=0.0, root_interval=1, shrinkage=False,
              stat_rows=None, stats_dtype=torch.float64, head=None, direction=direction)
    before = layer.weight.detach().clone()
    out = layer(X)
    out.retain_grad()
    (0.5 * (out - target).square().sum()).backward()
    opt.step()
    opt.remove_hooks()
    return (layer.weight.detach() - before).T, X, out.grad


@pytest.mark.parametrize("noise", [0.1, 10.0])
def test_polar_direction_is_the_polar_factor_of_the_whitened_step_at_muons_length(noise):
    dw, X, G = _one_iso_step("polar", noise)
    white = updates.iso_update(X, G)  # the paper's batch step, (n_in, n_out)
    shape = (24 / 8) ** 0.5
    ref = -0.1 * linalg.msign_newton_schulz(white, steps=5) * shape
    assert float((dw - ref).norm() / ref.norm()) < 1e-9
    plain, _, _ = _one_iso_step("whitened", noise)
    assert float((plain + 0.1 * white).norm() / white.norm()) < 1e-9
    # the whitened step's length is the correlations' √Σρ², the polar step's Muon's √8·√3 (Newton–Schulz's band)
    rho = torch.linalg.svdvals(white)
    assert float(plain.norm() / 0.1) == pytest.approx(float(rho.square().sum().sqrt()), rel=1e-9)
    assert 0.68 * 8**0.5 * shape < float(dw.norm() / 0.1) < 1.15 * 8**0.5 * shape


def test_polar_direction_keeps_its_length_as_the_correlations_fall():
    lengths = {d: [float(_one_iso_step(d, s)[0].norm()) for s in (0.1, 10.0)] for d in ("whitened", "polar")}
    assert lengths["whitened"][1] < 0.6 * lengths["whitened"][0]  # noisier targets: weaker correlations
    assert lengths["polar"][1] == pytest.approx(lengths["polar"][0], rel=0.05)


def test_an_unknown_direction_is_named():
    with pytest.raises(ValueError, match="direction.*'sign'"):
        Iso(nn.Linear(4, 4), direction="sign", head=None)
