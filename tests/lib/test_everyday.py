"""Everyday PyTorch patterns, each against what torch's own optimizers do with it: loss scaling,
bf16 autocast, freezing and unfreezing, shared weights, torch.compile, copies and pickles,
gradient accumulation, a step without host synchronisation, and the torch-like API."""

from __future__ import annotations

import copy
import inspect
import io
import pickle
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import isolab
from isolab import updates
from isolab.optim import Iso, IsoAdam, Muon, Shampoo, SignSGD

ALL = {
    "Iso": (Iso, dict(lr=0.02)),
    "IsoAdam": (IsoAdam, dict(lr=1e-2)),
    "Muon": (Muon, dict(lr=0.02, adam_lr=1e-2)),
    "Shampoo": (Shampoo, dict(lr=0.01, adam_lr=1e-2)),
    "SignSGD": (SignSGD, dict(lr=1e-3)),
}
HOOKED = ("Iso", "IsoAdam")


def mlp(seed=0, dtype=torch.float32):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 2)).to(dtype)


def batch(step, rows=64, dtype=torch.float32):
    g = torch.Generator().manual_seed(1000 + step)
    return torch.randn(rows, 8, generator=g).to(dtype), torch.randn(rows, 2, generator=g).to(dtype)


def build(name, model, **extra):
    cls, kw = ALL[name]
    return cls(model, **{**kw, **extra})


def flat(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def train(model, opt, steps, start=0, scaler=None, clip=None):
    for step in range(start, start + steps):
        x, y = batch(step)
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        if scaler is None:
            loss.backward()
            if clip:
                nn.utils.clip_grad_norm_(model.parameters(), clip)
            opt.step()
        else:
            scaler.scale(loss).backward()
            if clip:
                scaler.unscale_(opt)
                nn.utils.clip_grad_norm_(model.parameters(), clip)
            scaler.step(opt)
            scaler.update()
    return loss


# ----------------------------------------------------------------------------- loss scaling
@pytest.mark.parametrize("name", list(ALL) + ["AdamW"])
def test_a_grad_scaler_run_equals_the_plain_run(name):
    """A power-of-two loss scale is exact in floating point, so with the captured output gradients
    unscaled too the run is bit for bit the plain one (Iso's Cov(G) used to be 2**24 times too large)."""
    runs = []
    for scaler in (None, torch.amp.GradScaler("cpu", init_scale=2.0**12)):
        model = mlp()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2) if name == "AdamW" else build(name, model)
        train(model, opt, 12, scaler=scaler)
        runs.append(flat(model))
    assert torch.equal(runs[0], runs[1])


@pytest.mark.parametrize("name", list(ALL))
def test_unscaling_before_the_step_to_clip_equals_the_plain_clipped_run(name):
    plain = mlp()
    train(plain, build(name, plain), 8, clip=0.5)
    model = mlp()
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    opt = build(name, model, grad_scaler=scaler) if name in HOOKED else build(name, model)
    train(model, opt, 8, scaler=scaler, clip=0.5)
    assert torch.equal(flat(plain), flat(model))


@pytest.mark.parametrize("name", HOOKED)
def test_unscaling_before_the_step_without_the_scaler_is_refused_with_nothing_changed(name):
    model = mlp()
    opt = build(name, model)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    train(model, opt, 2, scaler=scaler)
    before = flat(model)
    with pytest.raises(ValueError, match=rf"^{name}: .*grad_scaler=scaler"):
        train(model, opt, 1, start=2, scaler=scaler, clip=0.5)
    assert torch.equal(before, flat(model))


@pytest.mark.parametrize("name", list(ALL) + ["AdamW"])
def test_an_overflow_skips_the_step_exactly_as_torch_does(name):
    model = mlp()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2) if name == "AdamW" else build(name, model)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    train(model, opt, 3, scaler=scaler)
    before = flat(model)
    state = copy.deepcopy(opt.state_dict())
    x, y = batch(99)
    opt.zero_grad()
    scaler.scale(F.mse_loss(model(x), y)).backward()
    model[2].weight.grad[0, 0] = float("inf")
    scaler.step(opt)
    scaler.update()
    assert torch.equal(before, flat(model))
    assert scaler.get_scale() == 2.0**9  # the scaler saw the overflow and backed off
    after = opt.state_dict()
    for k, st in state["state"].items():
        for key, v in st.items():
            if isinstance(v, torch.Tensor):
                assert torch.equal(v, after["state"][k][key]), (k, key)


@pytest.mark.parametrize("name", ["Iso", "IsoAdam", "Muon"])
def test_bf16_autocast_trains_as_float32_does(name):
    """Under ``torch.autocast("cpu", bfloat16)`` the layers compute in bfloat16 and the hooks capture
    bfloat16 inputs and output gradients; the statistics and roots stay float32."""
    finals = []
    for autocast in (False, True):
        model = mlp()
        opt = build(name, model)
        losses = []
        for step in range(40):
            x, y = batch(step % 4)
            opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                loss = F.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert losses[-1] < 0.9 * losses[0], losses[::8]
        finals.append(losses[-1])
        if name in HOOKED:
            st = opt.state[model[2].weight]
            assert st["root_x"].dtype == torch.float32 and torch.isfinite(st["root_x"]).all()
    assert abs(finals[1] / finals[0] - 1) < 0.05, finals


# ----------------------------------------------------------------------------- freezing
@pytest.mark.parametrize("name", list(ALL) + ["AdamW"])
def test_a_block_frozen_at_build_time_is_trained_once_unfrozen(name):
    model = mlp()
    model[2].requires_grad_(False)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2) if name == "AdamW" else build(name, model)
    train(model, opt, 3)
    frozen = model[2].weight.detach().clone()
    assert name not in HOOKED or opt.statistics.rows("2") == 0  # nothing captured for a frozen layer
    model[2].requires_grad_(True)
    train(model, opt, 3, start=3)
    assert not torch.equal(frozen, model[2].weight)
    if name in HOOKED:
        assert "root_x" in opt.state[model[2].weight] or opt.state[model[2].weight]["step"] == 3


@pytest.mark.parametrize("name", list(ALL))
def test_a_layer_added_with_add_param_group_is_trained(name):
    model = mlp()
    model[4].requires_grad_(False)
    cls, kw = ALL[name]
    body = [model[0].weight, model[2].weight]
    rest = [model[0].bias, model[2].bias]
    if name in HOOKED:
        opt = cls(model, params=[{"params": body}, {"params": rest, "algorithm": "adam"}], **kw)
    elif name == "SignSGD":
        opt = cls(body + rest, **kw)
    else:
        opt = cls([{"params": body}, {"params": rest, "algorithm": "adam"}], **kw)
    train(model, opt, 2)
    model[4].requires_grad_(True)
    before = model[4].weight.detach().clone()
    opt.add_param_group({"params": [model[4].weight]})
    opt.add_param_group({"params": [model[4].bias]} if name == "SignSGD" else
                        {"params": [model[4].bias], "algorithm": "adam"})
    train(model, opt, 2, start=2)
    assert not torch.equal(before, model[4].weight)


# ----------------------------------------------------------------------------- shared weights
def test_a_weight_shared_by_two_modules_is_whitened_with_the_rows_of_both():
    """``Y₁ = X W + b₁`` and ``Y₂ = Y₁' W + b₂`` with one ``W``: the weight's gradient is
    ``X₁ᵀG₁ + X₂ᵀG₂ = [X₁; X₂]ᵀ[G₁; G₂]``, so Iso's batch step is ``iso_update`` of the stacked rows
    (it used to take one module's rows only: a step 78–110 times too large)."""
    torch.manual_seed(0)
    first, second = nn.Linear(12, 12).double(), nn.Linear(12, 12).double()
    second.weight = first.weight
    model = nn.Sequential(first, nn.Tanh(), second)
    opt = Iso(model, lr=1.0, momentum=0.0, beta_cov=0.0, damping=0.0, stats_dtype=torch.float64)
    x = torch.randn(40, 12, dtype=torch.float64)
    X1 = x
    with torch.no_grad():
        X2 = torch.tanh(first(x))
    opt.zero_grad()
    out = model(x)
    G2 = 2 * (out - 0.1) / out.numel()
    G1 = (G2 @ first.weight.detach()) * (1 - X2**2)
    (out - 0.1).pow(2).mean().backward()
    X, G = torch.cat([X1, X2]), torch.cat([G1, G2])
    torch.testing.assert_close(first.weight.grad, (X.T @ G).T)
    w0 = first.weight.detach().clone()
    opt.step()
    expected = updates.iso_update(X, G).T  # torch layout (out, in)
    torch.testing.assert_close(w0 - first.weight.detach(), expected, rtol=1e-8, atol=1e-10)


def test_modules_sharing_a_weight_but_reading_it_differently_are_refused():
    """``nn.Linear`` reads its weight ``(out, in)``, a layer registered ``"in_out"`` reads it
    ``(in, out)``: one statistics site cannot describe both uses."""
    from isolab.nn import register_linear

    class InOut(nn.Module):
        def __init__(self, weight):
            super().__init__()
            self.weight = weight

        def forward(self, x):
            return x @ self.weight

    register_linear(InOut, weight_layout="in_out")
    lin = nn.Linear(4, 4, bias=False)
    model = nn.Sequential(lin, InOut(lin.weight))
    with pytest.raises(ValueError, match=r"share one weight but read it differently"):
        Iso(model)


# ----------------------------------------------------------------------------- torch.compile
@pytest.mark.slow
@pytest.mark.parametrize("name", HOOKED)
@pytest.mark.parametrize("when", ["before", "after"])
def test_torch_compile_of_the_model_equals_eager(name, when):
    torch._dynamo.reset()
    eager = mlp()
    train(eager, build(name, eager), 6)
    model = mlp()
    if when == "before":
        compiled = torch.compile(model)
        opt = build(name, compiled)
    else:
        opt = build(name, model)
        compiled = torch.compile(model)
    for step in range(6):
        x, y = batch(step)
        opt.zero_grad()
        F.mse_loss(compiled(x), y).backward()
        opt.step()
    gap = float((flat(model) - flat(eager)).norm() / flat(eager).norm())
    assert gap < 1e-4, gap  # float32 rounding of a fused graph, not a missing or wrong capture


@pytest.mark.slow
def test_torch_compile_of_a_hugging_face_gpt2_after_building_isoadam_equals_eager():
    transformers = pytest.importorskip("transformers")
    torch._dynamo.reset()

    def gpt2():
        torch.manual_seed(0)
        cfg = transformers.GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=2, n_head=2,
                                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        return transformers.GPT2LMHeadModel(cfg)

    def run(model, forward, opt):
        for step in range(4):
            t = torch.randint(0, 64, (4, 17), generator=torch.Generator().manual_seed(step))
            opt.zero_grad()
            logits = forward(input_ids=t[:, :-1]).logits
            F.cross_entropy(logits.flatten(0, 1), t[:, 1:].flatten()).backward()
            opt.step()
        return flat(model)

    eager = gpt2()
    ref = run(eager, eager, IsoAdam(eager, lr=1e-2))
    model = gpt2()
    opt = IsoAdam(model, lr=1e-2)
    got = run(model, torch.compile(model), opt)
    assert float((got - ref).norm() / ref.norm()) < 1e-4


# ----------------------------------------------------------------------------- copies
@pytest.mark.parametrize("name", list(ALL))
def test_torch_save_of_a_model_with_its_optimizer_attached(name):
    model = mlp()
    opt = build(name, model)
    train(model, opt, 2)
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    x, _ = batch(0)
    torch.testing.assert_close(loaded(x), model(x))
    if name in HOOKED:  # the loaded model's hooks are inert: they feed no optimizer
        rows = opt.statistics.rows("0")
        loaded(x).sum().backward()
        assert opt.statistics.rows("0") == rows


@pytest.mark.parametrize("name", list(ALL))
@pytest.mark.parametrize("how", ["deepcopy", "pickle"])
def test_a_copied_model_and_optimizer_pair_continues_exactly_like_the_original(name, how):
    model = mlp()
    opt = build(name, model)
    train(model, opt, 3)
    pair = copy.deepcopy((model, opt)) if how == "deepcopy" else pickle.loads(pickle.dumps((model, opt)))
    model2, opt2 = pair
    assert all(p is q for p, q in zip(model2.parameters(), [p for g in opt2.param_groups for p in g["params"]])) or \
        {id(p) for p in model2.parameters()} == {id(p) for g in opt2.param_groups for p in g["params"]}
    train(model, opt, 3, start=3)
    train(model2, opt2, 3, start=3)
    assert torch.equal(flat(model), flat(model2))


@pytest.mark.parametrize("name", list(ALL))
def test_a_copied_optimizer_steps_its_own_parameters(name):
    model = mlp()
    opt = build(name, model)
    train(model, opt, 2)
    copied = copy.deepcopy(opt)
    params = [p for g in copied.param_groups for p in g["params"]]
    assert not any(p is q for p in params for q in model.parameters())
    net = copied.model if name != "SignSGD" else None
    before = flat(model)
    if net is None:
        for p in params:
            p.grad = torch.ones_like(p)
    else:
        x, y = batch(7)
        copied.zero_grad()
        F.mse_loss(net(x), y).backward()
    copied.step()
    assert torch.equal(before, flat(model))  # the original is untouched
    moved = [p for p in params if p.grad is not None]
    assert moved


# ----------------------------------------------------------------------------- accumulation
@pytest.mark.parametrize("name", HOOKED)
def test_gradient_accumulation_with_every_row_equals_the_big_batch(name):
    runs = []
    for parts in (1, 4):
        model = mlp(dtype=torch.float64)
        opt = build(name, model, stat_rows=None, stats_dtype=torch.float64)
        for step in range(4):
            x, y = batch(step, rows=256, dtype=torch.float64)
            opt.zero_grad()
            for xs, ys in zip(x.chunk(parts), y.chunk(parts)):
                (F.mse_loss(model(xs), ys, reduction="sum") / len(x)).backward()
            opt.step()
        runs.append(flat(model))
    torch.testing.assert_close(runs[0], runs[1], rtol=1e-10, atol=1e-12)


def test_subsampled_statistics_are_per_backward_as_documented():
    """``stat_rows="auto"`` subsamples each backward on its own: four micro-batches of 512 rows use
    all 2,048 rows, one batch of 2,048 rows uses 1,024 (the floor ``max(1024, 2·max(n, m))``)."""
    used = []
    for parts in (1, 4):
        model = mlp()
        opt = IsoAdam(model)
        x, y = batch(0, rows=2048)
        opt.zero_grad()
        for xs, ys in zip(x.chunk(parts), y.chunk(parts)):
            F.mse_loss(model(xs), ys).backward()
        used.append(opt.statistics.used_rows("2"))
    assert used == [1024, 2048]


# ----------------------------------------------------------------------------- no host sync
class _NoSync:
    """Fail on any read of a tensor's value on the host (``.item()``, ``bool``, ``float``, ``int``,
    ``.tolist()``) while active."""

    NAMES = ("item", "__bool__", "__float__", "__int__", "__index__", "tolist")

    def __enter__(self):
        self.saved = {n: getattr(torch.Tensor, n) for n in self.NAMES}

        def refuse(name):
            def f(*args, **kwargs):
                raise AssertionError(f"host synchronisation: Tensor.{name}")
            return f

        for n in self.NAMES:
            setattr(torch.Tensor, n, refuse(n))
        return self

    def __exit__(self, *exc):
        for n, f in self.saved.items():
            setattr(torch.Tensor, n, f)
        return False


@pytest.mark.parametrize("name", list(ALL))
def test_the_default_step_on_an_accelerator_reads_nothing_on_the_host(name):
    """``nonfinite="skip"`` is what ``"auto"`` means on an accelerator; on the CPU the same code
    path is checked for host reads. Iso's and Shampoo's root refreshes (every 10 steps) are
    excluded: an eigendecomposition checks its result on the host."""
    model = mlp()
    opt = build(name, model, nonfinite="skip")
    train(model, opt, 1)
    x, y = batch(1)
    opt.zero_grad()
    F.mse_loss(model(x), y).backward()
    with _NoSync():
        opt.step()
    assert opt.skipped_steps == 0


@pytest.mark.parametrize("name", list(ALL))
def test_a_skipped_step_leaves_parameters_and_state_as_they_were(name):
    model = mlp()
    opt = build(name, model, nonfinite="skip")
    train(model, opt, 2)
    before = flat(model)
    state = copy.deepcopy(opt.state_dict())
    x, y = batch(5)
    opt.zero_grad()
    F.mse_loss(model(x), y).backward()
    model[2].weight.grad[1, 1] = float("nan")
    opt.step()
    assert torch.equal(before, flat(model)) and opt.skipped_steps == 1
    after = opt.state_dict()["state"]
    for k, st in state["state"].items():
        for key, v in st.items():
            if isinstance(v, torch.Tensor) and v.is_floating_point():
                assert torch.equal(v, after[k][key]), (k, key)
    train(model, opt, 1, start=6)
    assert torch.isfinite(flat(model)).all() and not torch.equal(before, flat(model))


# ----------------------------------------------------------------------------- the API
#: One order for the keyword-only arguments of every optimizer (each uses a subsequence of it).
KEYWORD_ORDER = [
    "nesterov", "eps", "weight_decay", "beta_cov", "beta", "damping", "stat_interval", "root_interval", "root_method",
    "root_tol", "warmup_steps", "shrinkage", "stat_rows", "graft", "graft_beta2", "graft_eps", "ns_steps",
    "ns_coefficients", "exact", "compute_dtype", "adjust_lr_fn", "stats_dtype", "momentum_placement", "direction", "whiten",
    "adam_lr", "adam_betas", "adam_eps", "adam_weight_decay", "params", "embeddings", "head", "others",
    "sync_statistics", "process_group", "distribute_roots", "nonfinite", "grad_scaler",
]


def test_the_optimizers_import_from_the_package_as_torch_optims_do():
    from isolab import Iso as A, IsoAdam as B, Muon as C, Shampoo as D, SignSGD as E  # noqa: N813

    assert (A, B, C, D, E) == (Iso, IsoAdam, Muon, Shampoo, SignSGD)
    assert set(isolab.__all__) >= {"Iso", "IsoAdam", "Muon", "Shampoo", "SignSGD"}


@pytest.mark.parametrize("cls", [Iso, IsoAdam, Muon, Shampoo, SignSGD])
def test_every_hyperparameter_after_the_first_two_is_keyword_only_in_one_order(cls):
    sig = inspect.signature(cls.__init__)
    positional = [n for n, p in sig.parameters.items() if p.kind == p.POSITIONAL_OR_KEYWORD][1:]
    assert positional[0] in ("model", "params") and positional[1] == "lr" and len(positional) == 3, positional
    keyword = [n for n, p in sig.parameters.items() if p.kind == p.KEYWORD_ONLY]
    assert keyword == sorted(keyword, key=KEYWORD_ORDER.index), keyword
    with pytest.raises(TypeError):
        cls(mlp(), 0.01, 0.9, 0.0)  # a fourth positional argument would bind silently elsewhere


@pytest.mark.parametrize("name", ["Iso", "IsoAdam", "Shampoo"])
def test_the_statistics_dtype_is_in_the_state_dict(name):
    model = mlp()
    opt = build(name, model, stats_dtype=torch.float64)
    assert {g["stats_dtype"] for g in opt.state_dict()["param_groups"] if g["algorithm"] != "adam"} == {torch.float64}
    train(model, opt, 1)
    fresh = mlp()
    other = build(name, fresh)  # float32 by default
    other.load_state_dict(opt.state_dict())
    assert {g["stats_dtype"] for g in other.param_groups if g["algorithm"] != "adam"} == {torch.float64}


@pytest.mark.parametrize("name", ["Iso", "IsoAdam"])
def test_an_error_names_the_optimizer_the_user_built(name):
    with pytest.raises(ValueError, match=rf"^{name}: .*{name} has nothing to whiten"):
        build(name, nn.Sequential(nn.LayerNorm(4)))


def test_the_library_needs_only_torch_and_numpy():
    """(and what torch itself brings: sympy is one of its dependencies)"""
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('matplotlib', 'ipywidgets', 'IPython', 'transformers', 'pytorch_optimizer'):\n"
        "            raise ImportError('blocked: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import torch, isolab\n"
        "from isolab import Iso, IsoAdam, Muon, Shampoo, SignSGD\n"
        "import isolab.linalg, isolab.nn, isolab.distributed, isolab.fsdp, isolab.updates, isolab.rules\n"
        "m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))\n"
        "for cls in (Iso, IsoAdam, Muon, Shampoo):\n"
        "    o = cls(m); o.zero_grad(); m(torch.randn(8, 4)).sum().backward(); o.step(); o.close() if hasattr(o, 'close') else None\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


@pytest.mark.slow
def test_a_compiled_step_equals_the_eager_one():
    """``torch.compile(optimizer.step)``: Muon and SignSGD to float32 rounding
    (``benchmarks/bench_compile_step.py`` times them)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_compile_step.py"
    spec = importlib.util.spec_from_file_location("bench_compile_step", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    for cls, kw in ((SignSGD, dict(lr=1e-3)), (Muon, dict(lr=0.02))):
        _, eager = bench.run(cls, kw, False, 22)
        _, compiled = bench.run(cls, kw, True, 22)
        assert float((eager - compiled).norm() / eager.norm()) < 1e-4, cls.__name__


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name", list(ALL))
def test_the_default_step_on_cuda_does_not_synchronise(name):
    """On CUDA the default is ``nonfinite="skip"``: ``torch.cuda.set_sync_debug_mode("error")``
    raises on any synchronising call inside a step (a non-refresh step for Iso and Shampoo)."""
    torch.manual_seed(0)
    model = mlp().cuda()
    opt = build(name, model)
    x, y = (t.cuda() for t in batch(0))
    for step in range(2):
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        if step == 1:
            torch.cuda.set_sync_debug_mode("error")
        try:
            opt.step()
        finally:
            torch.cuda.set_sync_debug_mode("default")
