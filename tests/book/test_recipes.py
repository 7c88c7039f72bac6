"""The recipes page (book/using_isolab.ipynb) and its torchrun script (scripts/recipe_ddp.py):
the snippets do what the page says, and the DDP script keeps its replicas identical."""

from __future__ import annotations

import inspect
import io
import json
import os
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from isolab.nn import convert_attention
from isolab.optim import IsoAdam, split_parameters
from scripts_loader import load_script

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "book" / "using_isolab.ipynb"
recipe = load_script("recipe_ddp")
GPT = recipe.GPT

torch.set_num_threads(1)


def cells():
    return json.loads(PAGE.read_text())["cells"]


def source(cell):
    return "".join(cell["source"])


def whitened(opt, model):
    names = {id(p): n for n, p in model.named_parameters()}
    return [names[id(p)] for g in opt.param_groups if g["algorithm"] == "isoadam" for p in g["params"]]


def counting_batch(g, batch=16, context=16, vocab=64):
    start = torch.randint(0, vocab, (batch, 1), generator=g)
    stride = torch.randint(1, 4, (batch, 1), generator=g)
    tokens = (start + stride * torch.arange(context + 1)) % vocab
    return tokens[:, :-1], tokens[:, 1:]


def train(model, opt, steps, g, micro=1):
    for _ in range(steps):
        x, y = counting_batch(g)
        opt.zero_grad(set_to_none=True)
        for xs, ys in zip(x.chunk(micro), y.chunk(micro)):
            (F.cross_entropy(model(xs).flatten(0, 1), ys.flatten()) / micro).backward()
        opt.step()


# ------------------------------------------------------------------ the page itself
def test_the_page_is_in_the_back_matter_and_its_model_is_the_scripts():
    toc = (ROOT / "_toc.yml").read_text()
    assert "book/using_isolab" in toc.split("Back matter")[1]
    script = (ROOT / "scripts" / "recipe_ddp.py").read_text()
    for name in ("class Block(nn.Module):", "class GPT(nn.Module):"):
        cell = next(source(c) for c in cells() if c["cell_type"] == "code" and source(c).startswith(name))
        assert cell in script, f"the page's {name} differs from scripts/recipe_ddp.py's"


def test_visible_snippets_are_short_and_checked_claims_all_hold():
    hidden = {"hide-input", "remove-input", "remove-cell"}
    visible = [source(c) for c in cells() if c["cell_type"] == "code" and not hidden & set(c["metadata"].get("tags", []))]
    assert visible and all(len(s.splitlines()) <= 15 for s in visible), [s[:40] for s in visible if len(s.splitlines()) > 15]
    checked = [c for c in cells() if c["cell_type"] == "code" and "nbval-check-output" in c["metadata"].get("tags", [])]
    assert len(checked) >= 7
    text = "".join("".join(o["text"]) if "text" in o else "".join(o.get("data", {}).get("text/plain", ""))
                   for c in checked for o in c["outputs"])
    assert len(re.findall(r"^  ✓ ", text, re.MULTILINE)) >= 15
    assert not re.search(r"^(NO |  ✗ )", text, re.MULTILINE), "a claim on the page does not hold in the committed outputs"


def test_the_settings_table_names_real_arguments():
    src = next(source(c) for c in cells() if "inspect.signature(IsoAdam)" in source(c))
    names = re.findall(r'^\s+\("(\w+)",', src, re.MULTILINE)
    assert len(names) >= 5
    assert set(names) <= set(inspect.signature(IsoAdam).parameters)


def test_the_literalinclude_markers_exist_in_the_script():
    page = "".join(source(c) for c in cells() if c["cell_type"] == "markdown")
    script = (ROOT / "scripts" / "recipe_ddp.py").read_text()
    for marker in re.findall(r":(?:start-at|end-before): (.*)$", page, re.MULTILINE):
        assert marker in script


# ------------------------------------------------------------------ routing
def test_tied_head_is_the_embedding_and_is_not_whitened():
    model = GPT(tied=True)
    split = split_parameters(model)
    assert split["head"] == {} and "wte.weight" in split["embedding"]
    assert model.lm_head.weight is model.wte.weight
    names = whitened(IsoAdam(model), model)
    assert len(names) == 8 and not any("lm_head" in n or "wte" in n for n in names)


def test_untied_head_goes_to_the_head_group_unless_head_none():
    model = GPT(tied=False)
    assert list(split_parameters(model)["head"]) == ["lm_head.weight"]
    assert "lm_head.weight" not in whitened(IsoAdam(model), model)
    model = GPT(tied=False)
    assert "lm_head.weight" in whitened(IsoAdam(model, head=None), model)


def test_isoadam_trains_the_nanogpt_model():
    torch.manual_seed(0)
    model = GPT(tied=False)
    opt = IsoAdam(model, lr=3e-3)
    g = torch.Generator().manual_seed(1)
    x, y = counting_batch(torch.Generator().manual_seed(5))
    before = F.cross_entropy(model(x).flatten(0, 1), y.flatten()).item()
    train(model, opt, 40, g)
    after = F.cross_entropy(model(x).flatten(0, 1), y.flatten()).item()
    assert after < 0.75 * before


# ------------------------------------------------------------------ torch's encoder, CNN
def _encoder():
    torch.manual_seed(0)
    return nn.TransformerEncoder(nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True), 2,
                                 enable_nested_tensor=False)


def test_encoder_needs_convert_attention_and_then_every_matrix_is_whitened():
    with pytest.warns(UserWarning, match="convert_attention"):
        opt = IsoAdam(_encoder())
    adam = [p for g in opt.param_groups if g["algorithm"] == "adam" for p in g["params"] if p.ndim == 2]
    assert len(adam) == 4
    converted = convert_attention(_encoder())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        opt = IsoAdam(converted)
    assert all(p.ndim < 2 for g in opt.param_groups if g["algorithm"] == "adam" for p in g["params"])
    x = torch.randn(2, 5, 32)
    torch.testing.assert_close(converted(x), _encoder()(x), atol=1e-5, rtol=0)


def test_cnn_conv_weights_are_whitened_over_patches():
    cnn = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU(),
                        nn.Flatten(), nn.Linear(16 * 4 * 4, 10))
    opt = IsoAdam(cnn, lr=1e-3, head=cnn[-1])
    images, labels = torch.randn(32, 1, 8, 8), torch.randint(0, 10, (32,))
    opt.zero_grad()
    F.cross_entropy(cnn(images), labels).backward()
    opt.step()
    assert opt.state[cnn[0].weight]["root_x"].shape == (9, 9)
    assert opt.state[cnn[2].weight]["root_x"].shape == (72, 72)
    assert opt.state[cnn[2].weight]["root_g"].shape == (16, 16)
    assert "root_x" not in opt.state[cnn[-1].weight]


# ------------------------------------------------------------------ checkpoint, accumulation, activation checkpointing
def test_checkpoint_resume_continues_bit_for_bit_mid_interval():
    def fresh():
        torch.manual_seed(0)
        model = GPT()
        return model, IsoAdam(model, lr=3e-3, stat_interval=2, root_interval=4)

    model, opt = fresh()
    g = torch.Generator().manual_seed(1)
    train(model, opt, 3, g)
    buf = io.BytesIO()
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "data": g.get_state()}, buf)
    train(model, opt, 6, g)
    buf.seek(0)
    saved = torch.load(buf)
    model2, opt2 = fresh()
    model2.load_state_dict(saved["model"])
    opt2.load_state_dict(saved["opt"])
    g2 = torch.Generator()
    g2.set_state(saved["data"])
    train(model2, opt2, 6, g2)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), model2.parameters()))
    for p, q in zip(model.parameters(), model2.parameters()):
        s, t = opt.state[p], opt2.state[q]
        assert s.keys() == t.keys()
        assert all(torch.equal(s[k], t[k]) if torch.is_tensor(s[k]) else s[k] == t[k] for k in s)


def test_gradient_accumulation_equals_the_full_batch_and_checkpointing_changes_nothing():
    from torch.utils.checkpoint import checkpoint

    class Checkpointed(GPT):
        reentrant = False

        def forward(self, idx):
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
            for block in self.blocks:
                x = checkpoint(block, x, use_reentrant=self.reentrant)
            return self.lm_head(self.ln_f(x))

    class Reentrant(Checkpointed):
        reentrant = True

    def run(cls, micro):
        torch.manual_seed(0)
        model = cls().double()
        train(model, IsoAdam(model, lr=3e-3, stats_dtype=torch.float64), 2, torch.Generator().manual_seed(1), micro)
        return torch.cat([p.detach().flatten() for p in model.parameters()])

    full = run(GPT, 1)
    torch.manual_seed(0)
    start = torch.cat([p.detach().flatten() for p in GPT().double().parameters()])
    assert (full - start).abs().max() > 1e-4  # the two steps moved the weights
    assert (run(GPT, 4) - full).abs().max() < 1e-10
    assert torch.equal(run(Checkpointed, 1), full)
    assert torch.equal(run(Reentrant, 1), full)


# ------------------------------------------------------------------ errors
def test_the_errors_the_page_shows():
    mlp = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    with pytest.raises(TypeError, match="needs the model"):
        IsoAdam(mlp.parameters())
    with pytest.raises(ValueError, match="nothing to whiten"):
        IsoAdam(nn.Sequential(nn.LayerNorm(8)))
    x = torch.randn(32, 8)
    opt = IsoAdam(mlp)
    mlp.eval()
    F.mse_loss(mlp(x), x.sum(1, keepdim=True)).backward()
    mlp.train()
    with pytest.raises(RuntimeError, match="eval mode"):
        opt.step()


# ------------------------------------------------------------------ DDP with torchrun
def _torchrun(tmp_path, *extra):
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or shutil.which("torchrun")
    if torchrun is None:
        pytest.fail("torchrun is not installed next to this Python (it comes with torch)")
    out = tmp_path / f"result{'_'.join(extra)}.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [torchrun, "--standalone", "--nproc_per_node", "2", str(ROOT / "scripts" / "recipe_ddp.py"),
         "--steps", "8", "--out", str(out), *extra],
        capture_output=True, text=True, timeout=300, env=env, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return json.loads(out.read_text()), proc.stdout


@pytest.mark.slow
def test_torchrun_two_processes_end_with_identical_weights_and_drift_without_sync(tmp_path):
    synced, stdout = _torchrun(tmp_path)
    assert synced["world"] == 2 and synced["sync"] is True
    assert synced["max_replica_gap"] == 0.0
    assert "largest parameter difference between the replicas: 0.0" in stdout
    local, _ = _torchrun(tmp_path, "--no-sync")
    assert local["sync"] is False and local["max_replica_gap"] > 1e-6


def test_building_on_the_ddp_wrapper_or_the_inner_model_gives_the_same_steps(tmp_path):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        result = []
        for wrap in (False, True):
            torch.manual_seed(0)
            model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
            ddp = nn.parallel.DistributedDataParallel(model)
            opt = IsoAdam(ddp if wrap else model, lr=1e-2)
            g = torch.Generator().manual_seed(0)
            for _ in range(3):
                x = torch.randn(32, 8, generator=g)
                opt.zero_grad()
                F.mse_loss(ddp(x), x.sum(1, keepdim=True)).backward()
                opt.step()
            result.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
        assert torch.equal(*result)
    finally:
        dist.destroy_process_group()


# ------------------------------------------------------------------ FSDP2 with torchrun
def test_torchrun_fsdp_recipe_equals_one_process(tmp_path):
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or shutil.which("torchrun")
    out = tmp_path / "fsdp.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [torchrun, "--standalone", "--nproc_per_node", "2", str(ROOT / "scripts" / "recipe_fsdp.py"), "--steps", "4",
         "--out", str(out)], capture_output=True, text=True, timeout=300, env=env, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    result = json.loads(out.read_text())
    assert result["world"] == 2 and result["owners"] == [0, 1]
    assert result["gap"] < 1e-9 and result["moved"] > 1e-3  # float64: the sharded run is the one-process run


# ------------------------------------------------------------------ the defaults table
def test_the_defaults_table_on_the_page_is_the_code():
    """The page prints each optimizer's defaults read from its signature; the committed output
    must be what the code says now (a changed default that the page was not rebuilt for fails)."""
    from isolab.optim import Iso, Muon, Shampoo

    cell = next(c for c in cells() if c["cell_type"] == "code" and "defaults_table(" in source(c)
                and "nbval-check-output" in c["metadata"].get("tags", []))
    printed = "".join("".join(o.get("text", "")) for o in cell["outputs"])
    classes = {"IsoAdam": IsoAdam, "Iso": Iso, "Muon": Muon, "Shampoo": Shampoo}
    header, *rows = [line.split() for line in printed.splitlines() if line.split()]
    assert sorted(header[1:]) == sorted(classes)  # an optimizer per column
    settings = [row[0] for row in rows]  # a setting per row
    assert {"lr", "weight_decay", "betas", "momentum", "damping", "adam_lr"} <= set(settings)
    for row in rows:
        assert len(row) == len(header), f"row {row[0]}: {len(row) - 1} values for {len(header) - 1} optimizers"
        setting = row[0]
        for name, value in zip(header[1:], row[1:]):
            params = inspect.signature(classes[name]).parameters
            expected = repr(params[setting].default).replace(" ", "") if setting in params else "-"
            assert value == expected, f"{name}.{setting}: page says {value}, code says {expected}"
