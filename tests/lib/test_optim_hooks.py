"""Hooks capture each nn.Linear's X and G exactly; routing is explicit."""

import pytest
import torch
from torch import nn

from isolab.optim import LayerStatistics, split_parameters


def _mlp(dtype=torch.float64, inplace=True):
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(6, 16), nn.ReLU(inplace=inplace), nn.Linear(16, 12), nn.ReLU(inplace=inplace), nn.Linear(12, 3)
    ).to(dtype)


@pytest.mark.parametrize("shape", [(20, 6), (4, 5, 6)], ids=["2d", "batch-seq-dim"])
def test_xtg_equals_weight_grad_with_inplace_relu(shape):
    model = _mlp()
    x = torch.randn(*shape, dtype=torch.float64)
    with LayerStatistics(model, keep=True, dtype=torch.float64) as stats:
        model(x).pow(2).mean().backward()
        # X of the first layer is the input itself, flattened, exactly (no copy of values)
        assert torch.equal(stats.inputs("0"), x.reshape(-1, 6))
        # G of the last layer: d mean(y^2)/dy = 2y/numel, computed by hand
        with torch.no_grad():
            y = model(x).reshape(-1, 3)
        torch.testing.assert_close(stats.output_grads("4"), 2 * y / y.numel(), rtol=1e-12, atol=1e-15)
        for name in ("0", "2", "4"):
            layer = model[int(name)]
            X, G = stats.inputs(name), stats.output_grads(name)
            assert X.shape[0] == G.shape[0] == x.numel() // 6
            # row convention: W in R^{n x m}, grad X^T G; torch stores weight as W^T: grad = G^T X
            torch.testing.assert_close(X.T @ G, layer.weight.grad.T, rtol=1e-12, atol=1e-14)
            xx, gg, b = stats.sums(name)
            torch.testing.assert_close(xx, X.T @ X, rtol=1e-12, atol=1e-14)
            torch.testing.assert_close(gg, G.T @ G, rtol=1e-12, atol=1e-18)
            cx, cg = stats.covariances(name)
            torch.testing.assert_close(cx, X.T @ X / b)


def test_inplace_relu_gives_pre_activation_gradient():
    # G must be dL/dY of the Linear output, not of the in-place ReLU's result
    torch.manual_seed(1)
    a, b = _mlp(inplace=True), _mlp(inplace=False)
    x = torch.randn(30, 6, dtype=torch.float64)
    sa, sb = LayerStatistics(a, keep=True), LayerStatistics(b, keep=True)
    a(x).sum().backward()
    b(x).sum().backward()
    for name in ("0", "2"):
        assert torch.equal(sa.output_grads(name), sb.output_grads(name))
    sa.remove(), sb.remove()


def test_accumulation_concatenates_rows():
    model = _mlp()
    stats = LayerStatistics(model, keep=True, dtype=torch.float64)
    x1, x2 = torch.randn(7, 6, dtype=torch.float64), torch.randn(9, 6, dtype=torch.float64)
    model(x1).sum().backward()
    model(x2).sum().backward()
    assert stats.rows("2") == 16
    X, G = stats.inputs("2"), stats.output_grads("2")
    torch.testing.assert_close(X.T @ G, model[2].weight.grad.T, rtol=1e-12, atol=1e-14)
    stats.clear()
    assert stats.rows("2") == 0 and stats.sums("2") is None
    stats.remove()


def test_nothing_captured_in_eval_or_no_grad():
    model = _mlp()
    stats = LayerStatistics(model, keep=True)
    model.eval()
    model(torch.randn(5, 6, dtype=torch.float64)).sum().backward()
    assert all(stats.rows(n) == 0 for n in ("0", "2", "4"))
    model.train()
    with torch.no_grad():
        model(torch.randn(5, 6, dtype=torch.float64))
    with torch.inference_mode():
        model(torch.randn(5, 6, dtype=torch.float64))
    assert all(stats.rows(n) == 0 for n in ("0", "2", "4"))
    with pytest.raises(RuntimeError, match="nothing captured"):
        stats.inputs("0")
    stats.remove()


def test_forward_without_backward_is_not_counted():
    model = _mlp()
    stats = LayerStatistics(model)
    model(torch.randn(5, 6, dtype=torch.float64))  # no backward: no G, nothing recorded
    assert stats.rows("0") == 0
    stats.remove()


def test_hooks_removable():
    model = _mlp()
    n_before = [len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model]
    with LayerStatistics(model) as stats:
        assert stats.attached
        assert sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model) == sum(n_before) + 6
    assert not stats.attached
    assert [len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model] == n_before
    model(torch.randn(4, 6, dtype=torch.float64)).sum().backward()
    assert stats.rows("0") == 0
    stats.remove()  # idempotent


def test_statistics_float32_for_bf16_layers():
    model = _mlp(torch.bfloat16)
    stats = LayerStatistics(model)
    model(torch.randn(8, 6, dtype=torch.bfloat16)).float().sum().backward()
    xx, gg, b = stats.sums("2")
    assert xx.dtype == gg.dtype == torch.float32 and b == 8
    stats.remove()
    with pytest.raises(ValueError, match="dtype"):
        LayerStatistics(model, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="no nn.Linear"):
        LayerStatistics(nn.Sequential(nn.ReLU()))


class _Net(nn.Module):
    def __init__(self, tie=False):
        super().__init__()
        self.emb = nn.Embedding(10, 8)
        self.fc = nn.Linear(8, 8)
        self.norm = nn.LayerNorm(8)
        self.head = nn.Linear(8, 10, bias=False)
        if tie:
            self.head.weight = self.emb.weight
        self.scale = nn.Parameter(torch.ones(()))


def test_split_parameters_routes_explicitly():
    net = _Net()
    split = split_parameters(net, head=net.head)
    assert list(split) == ["matrix", "embedding", "head", "vector"]
    assert list(split["matrix"]) == ["fc.weight"]
    assert list(split["embedding"]) == ["emb.weight"]
    assert list(split["head"]) == ["head.weight"]
    assert set(split["vector"]) == {"fc.bias", "norm.weight", "norm.bias", "scale"}
    # head="auto" (default): a Linear onto the embedding's vocabulary is the untied LM head
    assert "head.weight" in split_parameters(net)["head"]
    # head=None: no head; the Linear is a matrix like the others
    assert "head.weight" in split_parameters(net, head=None)["matrix"]


def test_split_parameters_tied_and_frozen():
    net = _Net(tie=True)
    net.fc.bias.requires_grad_(False)
    split = split_parameters(net, head=net.head)
    total = sum(len(g) for g in split.values())
    assert total == len(list(net.parameters()))  # tied parameters once, frozen ones included
    assert "fc.bias" in split["vector"]  # frozen now, trained by its group once unfrozen


def test_split_parameters_refuses_to_guess():
    class Bare(nn.Module):
        def __init__(self):
            super().__init__()
            self.table = nn.Parameter(torch.ones(4, 3))
            self.fc = nn.Linear(4, 2)

    net = Bare()
    with pytest.raises(ValueError, match=r"table \(4, 3\)"):
        split_parameters(net)
    split = split_parameters(net, others="vector")
    assert "table" in split["vector"]
    # convolution kernels are hidden matrices (read as (out, -1)), not guessed
    assert "0.weight" in split_parameters(nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.Linear(4, 2)))["matrix"]
    with pytest.raises(ValueError, match="not part of the model"):
        split_parameters(net, head=nn.Linear(2, 2))
    with pytest.raises(TypeError):
        split_parameters(net, head="2")
