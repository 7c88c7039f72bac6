"""Linear-like modules (isolab.nn.register_linear): a layer whose weight is stored (in, out),
as transformers' Conv1D, is routed, captured and updated in its own orientation, so that a
model built from it trains exactly as the same model built from nn.Linear (weights transposed)."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from isolab.nn import WEIGHT_LAYOUTS, linear_like, register_linear
from isolab.optim import Iso, IsoAdam, LayerStatistics, Muon, Shampoo, split_parameters
from isolab.optim.routing import weight_layouts

torch.set_num_threads(1)


@register_linear
class InOut(nn.Module):
    """``y = x W + b`` with ``W`` stored ``(in, out)``: transformers' Conv1D, written out."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_in, n_out))
        self.bias = nn.Parameter(torch.zeros(n_out))

    def forward(self, x):
        shape = x.shape[:-1] + (self.weight.shape[1],)
        return torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight).view(shape)


class OutIn(nn.Module):
    """A linear layer of its own (weight ``(out, in)``), registered by a test below."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n_out, n_in) / math.sqrt(n_in))

    def forward(self, x):
        return x @ self.weight.T


class Unknown(OutIn):
    pass


def _pair(dtype=torch.float64):
    """Two MLPs with the same function: one of nn.Linear, one of InOut (weights transposed)."""
    torch.manual_seed(0)
    dims = [(6, 10), (10, 14), (14, 3)]
    linear = nn.Sequential(nn.Linear(*dims[0]), nn.Tanh(), nn.Linear(*dims[1]), nn.ReLU(), nn.Linear(*dims[2]))
    inout = nn.Sequential(InOut(*dims[0]), nn.Tanh(), InOut(*dims[1]), nn.ReLU(), InOut(*dims[2]))
    with torch.no_grad():
        for a, b in zip(linear[::2], inout[::2]):
            b.weight.copy_(a.weight.T)
            b.bias.copy_(a.bias)
    return linear.to(dtype), inout.to(dtype)


def _train(model, opt, steps=6, dtype=torch.float64):
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x = torch.randn(4, 5, 6, generator=g, dtype=torch.float64).to(dtype)  # 3-D input: 20 rows
        y = torch.randn(4, 5, 3, generator=g, dtype=torch.float64).to(dtype)
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()
    return model


CASES = {
    "Iso": (Iso, dict(lr=0.05, root_interval=1, stats_dtype=torch.float64)),
    "Iso-lean": (Iso, dict(lr=0.05, stat_interval=2, root_interval=2, stats_dtype=torch.float64)),
    "IsoAdam": (IsoAdam, dict(lr=1e-2, root_interval=2, stats_dtype=torch.float64)),
    "IsoAdam-eigenbasis": (IsoAdam, dict(lr=1e-2, root_interval=1, root_method="eigenbasis",
                                         stats_dtype=torch.float64)),
    "Muon": (Muon, dict(lr=0.02)),
    "Muon-match-rms": (Muon, dict(lr=0.02, adjust_lr_fn="match_rms_adamw")),
    "Shampoo": (Shampoo, dict(lr=0.02, root_interval=2, stats_dtype=torch.float64)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_an_in_out_layer_trains_exactly_as_the_transposed_linear(case):
    cls, kw = CASES[case]
    linear, inout = _pair()
    start = inout[0].weight.detach().clone()
    _train(linear, cls(linear, head=None, **kw))
    _train(inout, cls(inout, head=None, **kw))
    for a, b in zip(linear[::2], inout[::2]):
        torch.testing.assert_close(b.weight, a.weight.T, atol=1e-10, rtol=0)
        torch.testing.assert_close(b.bias, a.bias, atol=1e-10, rtol=0)
    assert (inout[0].weight - start).abs().max() > 1e-3  # the steps moved the weights


def test_the_in_out_layer_is_a_matrix_and_its_statistics_are_in_its_orientation():
    _, inout = _pair(torch.float32)
    assert linear_like(inout[2]).weight_layout == "in_out" and linear_like(inout[2]).dims(inout[2].weight) == (10, 14)
    split = split_parameters(inout, head=None)
    assert list(split["matrix"]) == ["0.weight", "2.weight", "4.weight"]
    assert weight_layouts(inout)[inout[2].weight] == "in_out"
    with LayerStatistics(inout, keep=True) as stats:
        x = torch.randn(4, 5, 6)
        inout(x).sum().backward()
        X, G = stats.inputs("2"), stats.output_grads("2")
        assert X.shape == (20, 10) and G.shape == (20, 14)
        torch.testing.assert_close(X.T @ G, inout[2].weight.grad)  # (in, out): weight.grad = XᵀG
    opt = Iso(inout, head=None, root_interval=2)  # > 1: the roots are kept in the state
    _train(inout, opt, steps=1, dtype=torch.float32)
    st = opt.state[inout[2].weight]
    assert st["root_x"].shape == (10, 10) and st["root_g"].shape == (14, 14)


def test_muon_reads_the_learning_rate_ratio_in_the_layers_orientation():
    # a tall layer (out > in) stored (in, out): the "original" ratio is sqrt(out / in) = 2, as
    # for the nn.Linear it stands for, although the stored shape is wide
    layer = InOut(4, 16)
    nn.init.normal_(layer.weight)
    opt = Muon(nn.Sequential(layer), lr=0.1, momentum=0.0, exact=True, head=None)
    before = layer.weight.detach().clone()
    layer(torch.randn(32, 4)).square().mean().backward()
    opt.step()
    step = before - layer.weight.detach()
    # msign has unit singular values: the step's spectral norm is lr * ratio
    assert torch.linalg.matrix_norm(step, 2).item() == pytest.approx(0.1 * 2.0, rel=1e-4)


def test_an_unregistered_custom_layer_is_refused_and_registering_it_makes_it_whitened():
    model = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), Unknown(8, 3))
    with pytest.raises(ValueError, match=r"register_linear"):
        IsoAdam(model)
    register_linear(OutIn, weight_layout="out_in")  # Unknown is a subclass: covered too
    opt = IsoAdam(model)
    whitened = [p for g in opt.param_groups if g["algorithm"] == "isoadam" for p in g["params"]]
    assert any(p is model[2].weight for p in whitened)
    model(torch.randn(16, 5)).square().mean().backward()
    opt.step()
    assert opt.state[model[2].weight]["adam_step"] == 1


def test_register_linear_names_what_it_was_given():
    with pytest.raises(TypeError, match="nn.Module subclass"):
        register_linear(object)
    with pytest.raises(TypeError, match="nn.Module subclass"):
        register_linear(nn.Linear(2, 2))
    with pytest.raises(ValueError, match=r"weight_layout must be one of \('out_in', 'in_out'\), got 'io'"):
        register_linear(InOut, weight_layout="io")
    with pytest.raises(ValueError, match="convolution"):
        register_linear(nn.Conv2d)
    assert WEIGHT_LAYOUTS == ("out_in", "in_out")


def test_the_built_in_layers_go_through_the_same_registry():
    assert linear_like(nn.Linear(3, 4)).capture == "rows"
    assert linear_like(nn.Conv2d(2, 3, 3)).capture == "patches"
    assert linear_like(nn.Conv3d(2, 3, 3)).capture is None  # a matrix for Muon, not captured
    assert linear_like(nn.LayerNorm(4)) is None and linear_like(nn.Embedding(5, 4)) is None
    assert linear_like(nn.Linear(3, 4, bias=False)).dims(torch.empty(4, 3)) == (3, 4)
