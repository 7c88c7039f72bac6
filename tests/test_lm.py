"""Tests of isolab.book.lm (Chapter 11) and of scripts/train_transformer.py."""

import importlib.util
import math
from pathlib import Path

import pytest
import torch

from isolab.book import lm
from isolab.book.seeding import generator

ROOT = Path(__file__).resolve().parent.parent


def _script():
    spec = importlib.util.spec_from_file_location("train_transformer", ROOT / "scripts" / "train_transformer.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ------------------------------------------------------------------ corpus
def test_corpus_from_a_known_tree(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "site-packages").mkdir()
    (tmp_path / "b" / "z.py").write_bytes(b"Z")
    (tmp_path / "a.py").write_bytes(b"A")
    (tmp_path / "c.txt").write_bytes(b"not python")
    (tmp_path / "site-packages" / "x.py").write_bytes(b"installed")
    files = lm.stdlib_files(tmp_path)
    assert [p.relative_to(tmp_path).as_posix() for p in files] == ["a.py", "b/z.py"]
    data = lm.stdlib_corpus(root=tmp_path)
    assert bytes(data.tolist()) == b"A\n\nZ\n\n"
    assert bytes(lm.stdlib_corpus(max_bytes=4, root=tmp_path).tolist()) == b"A\n\nZ"


def test_stdlib_corpus_is_deterministic_and_python():
    a = lm.stdlib_corpus(max_bytes=100_000)
    b = lm.stdlib_corpus(max_bytes=100_000)
    assert a.dtype == torch.uint8 and a.numel() == 100_000
    assert torch.equal(a, b)
    files = lm.stdlib_files()
    rel = [p.as_posix() for p in files]
    assert rel == sorted(rel, key=lambda s: s)  # same root, so sorting full paths agrees
    assert all(p.suffix == ".py" for p in files)
    assert not any("site-packages" in p.parts for p in files)
    assert bytes(a[:200].tolist()) == files[0].read_bytes()[:200] or files[0].stat().st_size < 200


def test_split_is_an_interleaved_partition():
    data = torch.arange(1000, dtype=torch.int64) % 251
    tr, va = lm.split_corpus(data, chunk=7, every=5)
    idx = torch.arange(1000)
    val_mask = (idx // 7) % 5 == 4
    assert torch.equal(va, data[val_mask]) and torch.equal(tr, data[~val_mask])
    assert tr.numel() + va.numel() == 1000
    with pytest.raises(ValueError):
        lm.split_corpus(data, every=1)


def test_batches():
    data = torch.arange(500) % 256
    x1, y1 = lm.sample_batch(data, 5, 8, generator(3))
    x2, y2 = lm.sample_batch(data, 5, 8, generator(3))
    assert torch.equal(x1, x2) and torch.equal(y1, y2)
    assert x1.shape == (5, 8) and torch.equal(x1[:, 1:], y1[:, :-1])
    assert torch.equal(y1 - x1, torch.ones_like(x1))  # consecutive bytes of arange
    val = lm.validation_batches(data, 3, 4, 8)
    assert len(val) == 3 and val[0][0][0, 0] == 0
    assert torch.equal(val[0][0], lm.validation_batches(data, 3, 4, 8)[0][0])


# ------------------------------------------------------------------ model
def test_model_counts_causality_and_initial_loss():
    cfg = lm.LMConfig(d_model=16, n_layers=3, n_heads=2, context=12)
    model = lm.TransformerLM(cfg, seed=0)
    c = lm.count_parameters(model)
    d, L = 16, 3
    assert c["matrix"] == 12 * d * d * L
    assert c["vector"] == (2 * L + 1) * d
    assert c["embedding"] == 256 * d + 12 * d and c["head"] == 256 * d
    assert c["non_embedding"] == c["matrix"] + c["vector"]
    x = torch.randint(0, 256, (2, 12), generator=generator(1))
    assert math.isclose(model.loss(x, x).item(), math.log(256), rel_tol=1e-6)  # zero head
    with torch.no_grad():
        model.head.weight.normal_(generator=generator(2))
        out = model(x)
        x2 = x.clone()
        x2[:, 7:] = (x2[:, 7:] + 1) % 256
        out2 = model(x2)
    assert torch.allclose(out[:, :7], out2[:, :7], atol=1e-6)
    assert not torch.allclose(out[:, 7:], out2[:, 7:], atol=1e-3)
    assert torch.equal(lm.TransformerLM(cfg, seed=0).blocks[0].q.weight, lm.TransformerLM(cfg, seed=0).blocks[0].q.weight)


def test_the_paper_size_has_about_800k_non_embedding_parameters():
    c = lm.count_parameters(lm.TransformerLM(_script().FULL_MODEL, seed=0))
    assert 750_000 < c["non_embedding"] < 850_000


def test_routing_of_the_three_optimizers():
    cfg = lm.LMConfig(d_model=16, n_layers=2, n_heads=2, context=8)
    model = lm.TransformerLM(cfg, seed=0)
    tc = lm.TrainConfig()
    linear_weights = {id(m.weight) for name, m in model.named_modules()
                      if isinstance(m, torch.nn.Linear) and name != "head"}
    assert len(linear_weights) == 12
    for name in ("isoadam", "muon"):
        opt = lm.make_optimizer(name, model, tc)
        routed = {id(p) for g in opt.param_groups if g["algorithm"] != "adam" for p in g["params"]}
        assert routed == linear_weights
        if hasattr(opt, "remove_hooks"):
            opt.remove_hooks()
    adam = lm.make_optimizer("adam", model, tc)
    assert {id(p) for p in adam.param_groups[0]["params"]} == linear_weights
    assert adam.param_groups[0]["weight_decay"] == 0.1 and adam.param_groups[1]["weight_decay"] == 0.0
    iso = lm.make_optimizer("isoadam", model, tc)
    g = [g for g in iso.param_groups if g["algorithm"] != "adam"][0]
    assert g["lr"] == tc.lr and tuple(g["betas"]) == tc.betas and g["weight_decay"] == tc.weight_decay
    iso.remove_hooks()
    iso5 = lm.make_optimizer("isoadam", model, lm.TrainConfig(extra={"stat_interval": 5}))
    assert [g["stat_interval"] for g in iso5.param_groups if g["algorithm"] != "adam"] == [5]
    iso5.remove_hooks()
    with pytest.raises(ValueError):
        lm.make_optimizer("sgd", model, tc)


def test_schedule_and_interpolation():
    tc = lm.TrainConfig(steps=100, warmup=10, min_lr_ratio=0.1)
    assert lm.lr_factor(0, tc) == pytest.approx(0.1) and lm.lr_factor(9, tc) == pytest.approx(1.0)
    assert lm.lr_factor(10, tc) == pytest.approx(1.0) and lm.lr_factor(100, tc) == pytest.approx(0.1)
    assert lm.lr_factor(55, tc) == pytest.approx(0.55)
    assert lm.steps_to_reach([0, 10, 20], [3.0, 2.0, 1.0], 1.5) == pytest.approx(15.0)
    assert lm.steps_to_reach([0, 10, 20], [3.0, 2.0, 1.0], 3.5) == 0.0
    assert math.isnan(lm.steps_to_reach([0, 10], [3.0, 2.0], 1.0))


# ------------------------------------------------------------------ the script
def test_script_results_round_trip_and_are_deterministic(tmp_path):
    script = _script()
    out = tmp_path / "t.json"
    res = script.run(script.TINY_MODEL, script.TINY_TRAIN, script.TINY_CORPUS_BYTES, out=out, verbose=False)
    back = lm.load_results(out)
    assert set(back["runs"]) == set(lm.OPTIMIZERS)
    for name in lm.OPTIMIZERS:
        for key in ("step", "val_loss", "train_loss", "wall", "params", "model", "train"):
            assert back["runs"][name][key] == res["runs"][name][key], (name, key)
        assert len(back["runs"][name]["train_loss"]) == script.TINY_TRAIN.steps
    assert back["meta"]["torch"] == torch.__version__ and back["meta"]["seed"] == script.TINY_TRAIN.seed
    # the same configuration trained again, in memory, gives bit-identical curves
    data = lm.stdlib_corpus(max_bytes=script.TINY_CORPUS_BYTES)
    tr, va = lm.split_corpus(data)
    for name in lm.OPTIMIZERS:
        again = lm.train(name, script.TINY_MODEL, script.TINY_TRAIN, tr, va)
        assert again["val_loss"] == back["runs"][name]["val_loss"]
        assert again["train_loss"] == back["runs"][name]["train_loss"]
    # same data order and same initial weights: the first training loss is shared
    first = {back["runs"][n]["train_loss"][0] for n in lm.OPTIMIZERS}
    assert len(first) == 1
    # the optimizers differ after the first step
    assert back["runs"]["adam"]["train_loss"][2] != back["runs"]["isoadam"]["train_loss"][2]
    assert lm.load_results(tmp_path / "missing.json") is None


def test_smooth_and_speedup_curve():
    assert lm.smooth([1.0, 3.0, 5.0, 7.0], 2) == [1.0, 2.0, 4.0, 6.0]
    assert lm.smooth([2.0, 4.0], 1) == [2.0, 4.0]
    steps = [0, 10, 20, 30]
    runs = {"adam": {"step": steps, "wall": steps, "val_loss": [5.0, 4.0, 3.0, 2.0]},
            "fast": {"step": steps, "wall": [0, 20, 40, 60], "val_loss": [5.0, 3.0, 2.0, 1.0]}}
    targets, ratio = lm.speedup_curve(runs, "fast", n=3)
    assert targets == [4.0, 3.0, 2.0]
    # adam reaches 4, 3, 2 at 10, 20, 30; "fast" at 5, 10, 20
    assert ratio == pytest.approx([2.0, 2.0, 1.5])
    _, wall_ratio = lm.speedup_curve(runs, "fast", x="wall", n=3)
    assert wall_ratio == pytest.approx([1.0, 1.0, 0.75])
