"""isolab's optimizers as drop-in replacements (issue 18): torch's own attention and
convolutions, safe defaults at any batch size, statistics tied to their gradients,
predictable routing, and parity with torch.optim (AdamW, Muon, schedulers, state dicts)."""

import copy
import re
import warnings

import pytest
import torch
from torch import nn

from isolab import updates
from isolab.nn import MultiheadAttention, convert_attention
from isolab.optim import Iso, IsoAdam, LayerStatistics, Muon, Shampoo, SignSGD, split_parameters
from isolab.optim.capture import conv_patches

torch.set_num_threads(1)

ALL = {"Iso": Iso, "IsoAdam": IsoAdam, "Muon": Muon, "Shampoo": Shampoo}


# ----------------------------------------------------------------------------- 1. attention and convolutions
class _Transformer(nn.Module):
    """torch's own modules only: an embedding, an encoder stack, a decoder layer, a bare MHA, an untied head."""

    def __init__(self, vocab=20, d=16):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        layer = nn.TransformerEncoderLayer(d, 4, 32, dropout=0.0, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.dec = nn.TransformerDecoderLayer(d, 4, 32, dropout=0.0, batch_first=True)
        self.mha = nn.MultiheadAttention(d, 2, batch_first=True, add_bias_kv=True)
        self.head = nn.Linear(d, vocab)

    def forward(self, t):
        h = self.emb(t)
        m = self.enc(h)
        h = self.dec(h, m)
        h = h + self.mha(h, h, h, need_weights=False)[0]
        return self.head(h)


class _CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(1, 8, 3, padding=1)
        self.c2 = nn.Conv2d(8, 8, 3, stride=2, padding_mode="reflect", padding=1)
        self.c3 = nn.Conv1d(8, 4, 3, padding="same")
        self.fc = nn.Linear(4 * 4, 10)

    def forward(self, x):
        h = torch.relu(self.c1(x))
        h = torch.relu(self.c2(h)).mean(-1)
        return self.fc(torch.relu(self.c3(h)).flatten(1))


def _lm_data(seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 20, (4, 6), generator=g), torch.randint(0, 20, (4, 6), generator=g)


def _lm_loss(model, tok, tgt):
    return nn.functional.cross_entropy(model(tok).flatten(0, 1), tgt.flatten())


@pytest.mark.parametrize("name", sorted(ALL))
@pytest.mark.parametrize("converted", [False, True])
def test_one_line_on_torch_transformer_modules(name, converted):
    torch.manual_seed(0)
    model = _Transformer()
    if converted:
        assert convert_attention(model) is model
    tok, tgt = _lm_data()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        opt = ALL[name](model)
    whitens = name in ("Iso", "IsoAdam")
    told = [str(w.message) for w in caught if "cannot be whitened" in str(w.message)]
    if whitens and not converted:  # the fused projections go to AdamW, and the warning names the fix
        assert told and "isolab.nn.convert_attention(model)" in told[0] and "in_proj_weight" in told[0]
    else:
        assert not told
    first = _lm_loss(model, tok, tgt).item()
    for _ in range(5):
        opt.zero_grad()
        loss = _lm_loss(model, tok, tgt)
        loss.backward()
        opt.step()
    assert _lm_loss(model, tok, tgt).item() < first
    matrix = {id(p) for g in opt.param_groups if g["algorithm"] != "adam" for p in g["params"]}
    assert id(model.head.weight) not in matrix  # the untied head is not whitened (head="auto")
    if converted or not whitens:  # the attention projections are optimized as matrices
        attn = model.enc.layers[0].self_attn
        w = attn.q_proj.weight if converted else attn.in_proj_weight
        assert id(w) in matrix and id(attn.out_proj.weight) in matrix


def test_explicit_groups_with_an_unhookable_weight_name_the_fix():
    model = _Transformer()
    with pytest.raises(ValueError, match=r"convert_attention\(model\)"):
        Iso(model, params=[{"params": [model.enc.layers[0].self_attn.in_proj_weight]}])
    with pytest.raises(ValueError, match=r"convert_attention\(model\)"):
        Iso(model, params=[{"params": [model.enc.layers[0].self_attn.out_proj.weight]}])
    grouped = nn.Sequential(nn.Conv2d(4, 4, 3, groups=2), nn.Flatten(), nn.Linear(4, 2))
    with pytest.raises(ValueError, match="grouped convolution"):
        Iso(grouped, params=[grouped[0].weight])
    with pytest.warns(UserWarning, match="grouped convolution"):  # routed by model: AdamW, said so
        Iso(grouped)


@pytest.mark.parametrize("kwargs", [
    dict(), dict(batch_first=True), dict(bias=False), dict(add_bias_kv=True, add_zero_attn=True),
    dict(kdim=8, vdim=12),
])
def test_converted_attention_has_torchs_outputs_and_state_dict(kwargs):
    torch.manual_seed(0)
    E, H, L, S, N = 16, 4, 5, 7, 3
    ref = nn.MultiheadAttention(E, H, **kwargs).double()
    new = convert_attention(ref)
    assert isinstance(new, MultiheadAttention)
    a, b = ref.state_dict(), new.state_dict()
    assert list(a) == list(b) and all(torch.equal(a[k], b[k]) for k in a)
    bf = kwargs.get("batch_first", False)
    shape = lambda n, d: (N, n, d) if bf else (n, N, d)  # noqa: E731
    g = torch.Generator().manual_seed(1)
    q = torch.randn(*shape(L, E), generator=g, dtype=torch.float64)
    k = torch.randn(*shape(S, kwargs.get("kdim", E)), generator=g, dtype=torch.float64)
    v = torch.randn(*shape(S, kwargs.get("vdim", E)), generator=g, dtype=torch.float64)
    kpm = torch.zeros(N, S, dtype=torch.bool)
    kpm[0, -2:] = True
    masks = [dict(), dict(need_weights=False), dict(key_padding_mask=kpm),
             dict(attn_mask=torch.randn(L, S, generator=g, dtype=torch.float64), average_attn_weights=False),
             dict(attn_mask=torch.rand(L, S, generator=g) > 0.8, key_padding_mask=kpm, need_weights=False)]
    for m in masks:
        (o1, w1), (o2, w2) = ref(q, k, v, **m), new(q, k, v, **m)
        torch.testing.assert_close(o2, o1, rtol=0, atol=1e-12)
        assert (w1 is None) == (w2 is None)
        if w1 is not None:
            torch.testing.assert_close(w2, w1, rtol=0, atol=1e-12)
    back = nn.MultiheadAttention(E, H, **kwargs).double()
    back.load_state_dict(new.state_dict())  # and back into torch's module
    assert all(torch.equal(x, y) for x, y in zip(back.state_dict().values(), a.values()))


def test_converted_transformer_layers_equal_torchs_in_train_and_eval():
    torch.manual_seed(0)
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True), 2).double()
    dec = nn.TransformerDecoderLayer(16, 4, 32, dropout=0.0).double()
    enc2, dec2 = convert_attention(copy.deepcopy(enc)), convert_attention(copy.deepcopy(dec))
    assert list(enc.state_dict()) == list(enc2.state_dict())
    g = torch.Generator().manual_seed(2)
    x = torch.randn(3, 6, 16, generator=g, dtype=torch.float64)
    t, mem = torch.randn(4, 3, 16, generator=g, dtype=torch.float64), torch.randn(6, 3, 16, generator=g, dtype=torch.float64)
    kpm = torch.zeros(3, 6, dtype=torch.bool)
    kpm[1, -2:] = True
    causal = nn.Transformer.generate_square_subsequent_mask(6, dtype=torch.float64)
    for mode in ("train", "eval"):
        for m in (enc, enc2, dec, dec2):
            getattr(m, mode)()
        with torch.no_grad():
            keep = ~kpm  # torch's eval fast path zeroes padded positions
            torch.testing.assert_close(enc2(x, src_key_padding_mask=kpm)[keep], enc(x, src_key_padding_mask=kpm)[keep])
            torch.testing.assert_close(enc2(x, mask=causal, is_causal=True), enc(x, mask=causal, is_causal=True))
            torch.testing.assert_close(dec2(t, mem), dec(t, mem))


def test_converted_attention_projections_capture_xtg():
    torch.manual_seed(0)
    attn = MultiheadAttention(8, 2, kdim=6, batch_first=True).double()
    q = torch.randn(3, 5, 8, dtype=torch.float64)
    kv = torch.randn(3, 4, 6, dtype=torch.float64)
    with LayerStatistics(attn, keep=True, dtype=torch.float64) as stats:
        attn(q, kv, torch.randn(3, 4, 8, dtype=torch.float64))[0].sin().sum().backward()
        for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
            X, G = stats.inputs(name), stats.output_grads(name)
            torch.testing.assert_close(G.T @ X, getattr(attn, name).weight.grad)


def test_convert_keeps_modes_and_requires_grad():
    mha = nn.MultiheadAttention(8, 2).eval()
    mha.out_proj.weight.requires_grad_(False)
    new = convert_attention(mha)
    assert not new.training and not new.out_proj.weight.requires_grad


CONVS = [
    lambda: nn.Conv2d(3, 5, 3),
    lambda: nn.Conv2d(3, 5, 3, stride=2, padding=1),
    lambda: nn.Conv2d(3, 4, (3, 2), padding="same", dilation=(2, 1)),
    lambda: nn.Conv2d(3, 4, 3, padding=1, padding_mode="reflect", bias=False),
    lambda: nn.Conv1d(3, 4, 5, stride=2, padding=2),
    lambda: nn.Conv1d(3, 4, 3, padding=1, padding_mode="circular"),
]


@pytest.mark.parametrize("make", CONVS, ids=range(len(CONVS)))
def test_conv_patch_view_xtg_is_weight_grad_and_step_is_iso_update(make):
    torch.manual_seed(0)
    conv = make().double()
    two_d = isinstance(conv, nn.Conv2d)
    x = torch.randn(*((2, 3, 9, 8) if two_d else (2, 3, 11)), dtype=torch.float64)
    with LayerStatistics({"c": conv}, keep=True, dtype=torch.float64) as stats:
        y = conv(x)
        y.sin().sum().backward()
        X, G = stats.inputs("c"), stats.output_grads("c")
    out = conv.out_channels
    torch.testing.assert_close(G.T @ X, conv.weight.grad.reshape(out, -1))  # XᵀG = weight.grad
    rows = (X @ conv.weight.reshape(out, -1).T).reshape(2, -1, out)
    if conv.bias is not None:
        rows = rows + conv.bias
    torch.testing.assert_close(rows, y.detach().flatten(2).transpose(1, 2))  # each output position is a row
    torch.testing.assert_close(conv_patches(conv, x), X)
    # Iso's single-batch step on the kernel is iso_update of the unfolded tensors
    conv.zero_grad()
    w0 = conv.weight.detach().clone()
    opt = Iso(conv, params=[conv.weight], lr=0.1, momentum=0.0, beta_cov=0.0, damping=0.0, root_interval=1,
              stats_dtype=torch.float64)
    conv(x).sin().sum().backward()
    opt.step()
    expected = 0.1 * updates.iso_update(X, G).T.reshape(conv.weight.shape)
    torch.testing.assert_close(w0 - conv.weight.detach(), expected, rtol=1e-7, atol=1e-10)


@pytest.mark.parametrize("name", sorted(ALL))
def test_cnn_one_line(name):
    torch.manual_seed(0)
    model = _CNN()
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(16, 1, 8, 8, generator=g), torch.randint(0, 10, (16,), generator=g)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every kernel is optimized as a matrix: nothing to warn about
        opt = ALL[name](model)
    kernels = {id(model.c1.weight), id(model.c2.weight), id(model.c3.weight)}
    assert kernels <= {id(p) for g in opt.param_groups if g["algorithm"] != "adam" for p in g["params"]}
    first = nn.functional.cross_entropy(model(x), y).item()
    for _ in range(10):
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    assert nn.functional.cross_entropy(model(x), y).item() < first


# ----------------------------------------------------------------------------- 2. safe defaults at any batch
def _regression_run(cls, width, batch, lr_scale, steps=300):
    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    teacher = torch.randn(8, 2, generator=g)
    model = nn.Sequential(nn.Linear(8, width), nn.Tanh(), nn.Linear(width, width), nn.Tanh(), nn.Linear(width, 2))
    opt = cls(model, lr=(0.02 if cls is Iso else 1e-3) * lr_scale)  # the defaults' lr, or 3x
    losses = []
    for _ in range(steps):
        x = torch.randn(batch, 8, generator=g)
        opt.zero_grad()
        loss = (model(x) - torch.tanh(x @ teacher)).pow(2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, max(p.abs().max().item() for p in model.parameters())


@pytest.mark.slow
@pytest.mark.parametrize("cls", [Iso, IsoAdam], ids=["Iso", "IsoAdam"])
@pytest.mark.parametrize("width", [8, 16, 64])
def test_defaults_do_not_diverge_at_any_batch_size(cls, width):
    for batch in (1, 2, 4, 8, 32):
        for lr_scale in (1, 3):
            losses, largest = _regression_run(cls, width, batch, lr_scale)
            assert all(torch.isfinite(torch.tensor(losses))), (width, batch, lr_scale)
            assert largest < 100, (width, batch, lr_scale, largest)


def test_shrinkage_leaves_full_rank_batches_bitwise_unchanged():
    """b >= every layer width: the rank-aware floor is not used, the step is the plain rule's."""
    for shrink in (True, False):
        torch.manual_seed(0)
        m = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))
        opt = Iso(m, shrinkage=shrink)
        g = torch.Generator().manual_seed(1)
        for _ in range(12):
            x, y = torch.randn(32, 6, generator=g), torch.randn(32, 3, generator=g)
            opt.zero_grad()
            (m(x) - y).pow(2).mean().backward()
            opt.step()
        if shrink:
            first = [p.detach().clone() for p in m.parameters()]
    assert all(torch.equal(a, b) for a, b in zip(first, m.parameters()))


def test_without_shrinkage_small_batches_diverge():
    """The old behaviour (shrinkage=False) at batch 2 below the width 64: the roots of a
    rank-deficient average, reused for 10 steps, blow the weights up."""
    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    teacher = torch.randn(8, 2, generator=g)
    model = nn.Sequential(nn.Linear(8, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 2))
    opt = Iso(model, lr=0.06, shrinkage=False)
    try:
        for _ in range(300):
            x = torch.randn(2, 8, generator=g)
            opt.zero_grad()
            (model(x) - torch.tanh(x @ teacher)).pow(2).mean().backward()
            opt.step()
        assert max(p.abs().max().item() for p in model.parameters()) > 1e3
    except FloatingPointError as e:
        # which symptom comes first (the statistics or the gradient) depends on the CPU's rounding
        assert re.search(r"non-finite \(NaN or Inf\) (input/output-gradient statistics|gradient)", str(e)), str(e)
        assert "the optimizer's steps diverged" in str(e), str(e)
        assert "non-finite statistics or as a non-finite gradient" in str(e), str(e)


def test_a_blow_up_is_blamed_on_the_steps_not_the_gradient():
    m = _mlp()
    opt = Iso(m)
    x, y = torch.randn(32, 6), torch.randn(32, 3)
    opt.zero_grad()
    (m(x) - y).pow(2).mean().backward()
    opt.step()
    with torch.no_grad():
        m[2].weight.mul_(1e38)  # as if the steps had diverged
    opt.zero_grad()
    (m(x) - y).pow(2).mean().backward()
    with pytest.raises(FloatingPointError, match=r"non-finite .*gradient.*the optimizer's steps diverged"):
        opt.step()
    with torch.no_grad():
        m[2].weight.fill_(float("inf"))
    with pytest.raises(FloatingPointError, match="parameters themselves are non-finite"):
        opt.step()


@pytest.mark.parametrize("symptom", ["statistics", "gradient"])
def test_a_divergence_names_both_first_symptoms_whichever_comes_first(symptom):
    """A blown-up layer makes either its captured statistics or its gradient non-finite first
    (which one depends on the CPU's rounding); each message blames the steps and names both."""
    m = _mlp()
    opt = Iso(m)
    x, y = torch.randn(32, 6), torch.randn(32, 3)
    opt.zero_grad()
    (m(x) - y).pow(2).mean().backward()
    opt.step()
    with torch.no_grad():
        m[2].weight.mul_(1e6)  # as if the steps had diverged (still finite)
    opt.zero_grad()
    (m(x) - y).pow(2).mean().backward()
    if symptom == "statistics":
        opt.statistics._captures["2"].xx.fill_(float("inf"))
    else:
        m[2].weight.grad.fill_(float("nan"))
    with pytest.raises(FloatingPointError) as failure:
        opt.step()
    message = str(failure.value)
    assert "non-finite statistics or as a non-finite gradient" in message and "steps diverged" in message, message


# ----------------------------------------------------------------------------- 3. statistics tied to gradients
def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))


def _set_none(model, opt):
    for p in model.parameters():
        p.grad = None


CLEARING = {
    "optimizer.zero_grad()": lambda m, o: o.zero_grad(),
    "optimizer.zero_grad(set_to_none=False)": lambda m, o: o.zero_grad(set_to_none=False),
    "model.zero_grad()": lambda m, o: m.zero_grad(),
    "model.zero_grad(set_to_none=False)": lambda m, o: m.zero_grad(set_to_none=False),
    "p.grad = None": _set_none,
}


def _train_with_probe(clear, cls=Iso, steps=10):
    m = _mlp()
    opt = cls(m, lr=0.02, root_interval=1) if cls is Iso else cls(m, lr=1e-2, root_interval=1)
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x, y, probe = torch.randn(32, 6, generator=g), torch.randn(32, 3, generator=g), torch.randn(32, 6, generator=g)
        if clear is not None:
            m(probe).pow(2).mean().backward()  # an extra probe backward, then cleared
            clear(m, opt)
        else:
            opt.zero_grad()
        (m(x) - y).pow(2).mean().backward()
        opt.step()
    return m


@pytest.mark.parametrize("path", sorted(CLEARING))
@pytest.mark.parametrize("cls", [Iso, IsoAdam], ids=["Iso", "IsoAdam"])
def test_statistics_follow_every_gradient_clearing_path(path, cls):
    ref = _train_with_probe(None, cls)
    run = _train_with_probe(CLEARING[path], cls)
    for p, q in zip(ref.parameters(), run.parameters()):
        assert torch.equal(p, q), path


def test_probe_that_never_reaches_the_weight_is_not_counted():
    m = _mlp()
    opt = Iso(m)
    probe = torch.randn(8, 6, requires_grad=True)
    torch.autograd.grad(m(probe).sum(), probe)  # backward through the layers, no .grad written
    x = torch.randn(32, 6)
    m(x).sum().backward(inputs=[m[2].weight])  # reaches layer 2's weight only
    assert opt.statistics.rows("0") == 0 and opt.statistics.rows("2") == 32


def test_stepping_on_an_uncleared_gradient_raises():
    m = _mlp()
    opt = Iso(m)
    x, y = torch.randn(32, 6), torch.randn(32, 3)
    (m(x) - y).pow(2).mean().backward()
    opt.step()
    (m(x) - y).pow(2).mean().backward()  # no zero_grad(): .grad mixes two batches
    before = [p.detach().clone() for p in m.parameters()]
    with pytest.raises(RuntimeError, match=r"zero_grad\(\) was not called between steps"):
        opt.step()
    assert all(torch.equal(a, b) for a, b in zip(before, m.parameters()))


def test_a_replaced_gradient_raises():
    m = _mlp()
    opt = Iso(m)
    (m(torch.randn(32, 6)) - torch.randn(32, 3)).pow(2).mean().backward()
    m[0].weight.grad = m[0].weight.grad.clone()
    with pytest.raises(RuntimeError, match="not the tensor the last backward"):
        opt.step()


def test_gradient_accumulation_and_clipping_still_work():
    m1, m2 = _mlp(), _mlp()
    o1, o2 = Iso(m1, root_interval=1), Iso(m2, root_interval=1)
    x, y = torch.randn(32, 6), torch.randn(32, 3)
    o1.zero_grad()
    (m1(x) - y).pow(2).sum().backward()
    nn.utils.clip_grad_norm_(m1.parameters(), 1.0)
    o1.step()
    o2.zero_grad()
    for xs, ys in zip(x.split(8), y.split(8)):  # four micro-batches, same rows
        (m2(xs) - ys).pow(2).sum().backward()
    nn.utils.clip_grad_norm_(m2.parameters(), 1.0)
    o2.step()
    for p, q in zip(m1.parameters(), m2.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------------- 4. routing
class _NanoGPT(nn.Module):
    def __init__(self, tie, vocab=32, d=16):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(8, d)
        self.fc = nn.Linear(d, 4 * d)
        self.proj = nn.Linear(4 * d, d)
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        if tie:
            self.wte.weight = self.lm_head.weight


@pytest.mark.parametrize("tie", [False, True])
def test_nanogpt_style_routing(tie):
    net = _NanoGPT(tie)
    split = split_parameters(net)
    assert set(split["matrix"]) == {"fc.weight", "proj.weight"}
    if tie:
        assert "wte.weight" in split["embedding"] and not split["head"]
    else:
        assert list(split["head"]) == ["lm_head.weight"]
    assert "lm_head.weight" in split_parameters(net, head=None)["matrix"] or tie
    for cls in (Iso, IsoAdam, Muon, Shampoo):
        opt = cls(net)
        matrix = {id(p) for g in opt.param_groups if g["algorithm"] != "adam" for p in g["params"]}
        assert matrix == {id(net.fc.weight), id(net.proj.weight)}
        if hasattr(opt, "remove_hooks"):
            opt.remove_hooks()


def test_mlp_last_layer_stays_a_matrix_without_an_embedding():
    m = _mlp()
    assert set(split_parameters(m)["matrix"]) == {"0.weight", "2.weight"}


# ----------------------------------------------------------------------------- 5. parity
def test_isoadam_defaults_are_adamws():
    opt = IsoAdam(_mlp())
    adamw = torch.optim.AdamW(_mlp().parameters())
    for k in ("lr", "betas", "eps", "weight_decay"):
        assert opt.defaults[k] == adamw.defaults[k], k
        assert opt.param_groups[1][k] == adamw.defaults[k], k  # the fallback group too


@pytest.mark.parametrize("cls,kwargs,named", [
    (IsoAdam, dict(lr=-1e-3), r"^IsoAdam: lr must"),
    (IsoAdam, dict(adam_lr=-1e-3), r"^IsoAdam: adam_lr must"),
    (IsoAdam, dict(betas=(0.9, 1.0)), r"^IsoAdam: betas\[1\]"),
    (IsoAdam, dict(eps=0.0), r"^IsoAdam: eps"),
    (IsoAdam, dict(weight_decay=-1.0), r"^IsoAdam: weight_decay"),
    (Iso, dict(shrinkage="yes"), r"^Iso: shrinkage"),
    (Muon, dict(adjust_lr_fn="rms"), r"^Muon: adjust_lr_fn"),
    (Muon, dict(compute_dtype=torch.int32), r"^Muon: compute_dtype"),
    (Shampoo, dict(momentum=1.0), r"^Shampoo: momentum"),
    (Iso, dict(lr=torch.tensor([0.1, 0.2])), r"^Iso: lr as a Tensor"),
])
def test_errors_name_the_argument_passed(cls, kwargs, named):
    with pytest.raises(ValueError, match=named):
        cls(_mlp(), **kwargs)


@pytest.mark.parametrize("name", sorted(ALL) + ["SignSGD"])
def test_tensor_lr_is_accepted_and_equals_the_float(name):
    cls = {**ALL, "SignSGD": SignSGD}[name]
    x, y = torch.randn(32, 6), torch.randn(32, 3)
    runs = []
    for lr in (0.01, torch.tensor(0.01)):
        m = _mlp()
        opt = cls(m, lr=lr)
        for _ in range(3):
            opt.zero_grad()
            (m(x) - y).pow(2).mean().backward()
            opt.step()
        runs.append([p.detach().clone() for p in m.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*runs))


@pytest.mark.parametrize("name", sorted(ALL) + ["SignSGD"])
def test_one_cycle_with_momentum_cycling(name):
    cls = {**ALL, "SignSGD": SignSGD}[name]
    m = _mlp()
    opt = cls(m, momentum=0.9) if name == "SignSGD" else cls(m)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.01, total_steps=6, cycle_momentum=True)
    x, y = torch.randn(32, 6), torch.randn(32, 3)
    seen = []
    for _ in range(5):
        opt.zero_grad()
        (m(x) - y).pow(2).mean().backward()
        opt.step()
        sched.step()
        g = opt.param_groups[0]
        seen.append(g["betas"][0] if "betas" in g else g["momentum"])
    assert len(set(seen)) > 1 and all(torch.isfinite(p).all() for p in m.parameters())


def test_shampoo_momentum_zero_is_the_plain_step_and_momentum_is_bias_corrected():
    x, y = torch.randn(32, 6), torch.randn(32, 3)
    runs = []
    for kw in (dict(), dict(momentum=0.0), dict(momentum=0.9)):
        m = _mlp()
        opt = Shampoo(m, **kw)
        opt.zero_grad()
        (m(x) - y).pow(2).mean().backward()
        opt.step()
        runs.append([p.detach().clone() for p in m.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(runs[0], runs[1]))
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(runs[0], runs[2]))  # first step: B/c = d


@pytest.mark.parametrize("target", sorted(ALL) + ["SignSGD"])
def test_foreign_state_dict_raises_a_clear_error(target):
    classes = {**ALL, "SignSGD": SignSGD}
    m = _mlp()
    sources = [torch.optim.AdamW(m.parameters()), torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)]
    sources += [c(m) for n, c in classes.items() if n != target]
    for src in sources:
        with pytest.raises(ValueError, match="load_state_dict"):
            classes[target](_mlp()).load_state_dict(src.state_dict())


def _muon_pair(shape, adjust, nesterov=True, seed=0):
    torch.manual_seed(seed)
    w1 = nn.Parameter(torch.randn(*shape))
    w2 = nn.Parameter(w1.detach().clone())
    ours = Muon([w1], lr=3e-3, momentum=0.9, nesterov=nesterov, weight_decay=0.1, compute_dtype=torch.bfloat16,
                adjust_lr_fn=adjust)
    theirs = torch.optim.Muon([w2], lr=3e-3, momentum=0.9, nesterov=nesterov, weight_decay=0.1,
                              adjust_lr_fn=adjust)
    return (w1, ours), (w2, theirs)


@pytest.mark.skipif(not hasattr(torch.optim, "Muon"), reason="torch.optim.Muon needs torch >= 2.9")
@pytest.mark.parametrize("adjust", ["original", "match_rms_adamw"])
@pytest.mark.parametrize("shape", [(16, 32), (32, 16), (24, 24)])
@pytest.mark.parametrize("nesterov", [True, False])
def test_muon_equals_torch_optim_muon_bitwise(adjust, shape, nesterov):
    (w1, ours), (w2, theirs) = _muon_pair(shape, adjust, nesterov)
    g = torch.Generator().manual_seed(1)
    for _ in range(4):
        grad = torch.randn(*shape, generator=g)
        w1.grad, w2.grad = grad.clone(), grad.clone()
        ours.step()
        theirs.step()
        assert torch.equal(w1, w2)


def test_muon_compute_dtype_auto_is_float_on_cpu():
    from isolab.optim.muon import resolve_compute_dtype

    assert resolve_compute_dtype("auto", torch.device("cpu")) is None  # the gradient's dtype
    assert resolve_compute_dtype("auto", torch.device("cuda")) is torch.bfloat16
    m = _mlp()
    opt = Muon(m)
    assert opt.defaults["compute_dtype"] == "auto" and opt.defaults["adjust_lr_fn"] == "original"


def test_muon_takes_torchs_argument_names():
    """``adjust_lr_fn`` and ``ns_coefficients`` as torch.optim.Muon spells them; an unknown
    keyword (such as a misspelling) is refused by Python, not silently ignored."""
    opt = Muon(_mlp(), adjust_lr_fn="match_rms_adamw", ns_coefficients=(3.4445, -4.7750, 2.0315))
    assert opt.defaults["adjust_lr_fn"] == "match_rms_adamw"
    with pytest.raises(TypeError):
        Muon(_mlp(), adjust_lr="match_rms_adamw")
    with pytest.raises(ValueError, match=r"^Muon: ns_coefficients"):
        Muon(_mlp(), ns_coefficients=(1.0, 2.0))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or not hasattr(torch.optim, "Muon"), reason="needs CUDA")
def test_muon_default_on_cuda_is_torchs_bf16_muon():
    torch.manual_seed(0)
    w1 = nn.Parameter(torch.randn(64, 32, device="cuda"))
    w2 = nn.Parameter(w1.detach().clone())
    ours = Muon([w1], lr=3e-3, weight_decay=0.1)  # compute_dtype="auto": bfloat16 on CUDA
    theirs = torch.optim.Muon([w2], lr=3e-3, weight_decay=0.1)
    for _ in range(3):
        grad = torch.randn(64, 32, device="cuda")
        w1.grad, w2.grad = grad.clone(), grad.clone()
        ours.step()
        theirs.step()
    assert torch.equal(w1, w2)
