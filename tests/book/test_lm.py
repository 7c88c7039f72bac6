"""Tests of isolab.book.lm: the corpus, the model and the training loop of the cost benchmarks
(Chapter 11's protocol is tested in test_lm_protocol.py)."""

import math
from pathlib import Path

import pytest
import torch

from isolab.book import lm, lm_protocol
from isolab.book.seeding import generator

ROOT = Path(__file__).resolve().parents[2]


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
    c = lm.count_parameters(lm.TransformerLM(lm_protocol.SIZES["full"]["model"], seed=0))
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


def test_schedule():
    tc = lm.TrainConfig(steps=100, warmup=10, min_lr_ratio=0.1)
    assert lm.lr_factor(0, tc) == pytest.approx(0.1) and lm.lr_factor(9, tc) == pytest.approx(1.0)
    assert lm.lr_factor(10, tc) == pytest.approx(1.0) and lm.lr_factor(100, tc) == pytest.approx(0.1)
    assert lm.lr_factor(55, tc) == pytest.approx(0.55)


# ------------------------------------------------------------------ the training loop
def test_train_is_deterministic_and_shares_the_first_batch():
    model_cfg = lm.LMConfig(d_model=16, n_layers=1, n_heads=2, context=16)
    tc = lm.TrainConfig(steps=6, batch=4, warmup=2, eval_interval=3, eval_batches=2)
    tr, va = lm.split_corpus(lm.stdlib_corpus(max_bytes=200_000))
    runs = {name: lm.train(name, model_cfg, tc, tr, va) for name in lm.OPTIMIZERS}
    for name in lm.OPTIMIZERS:
        again = lm.train(name, model_cfg, tc, tr, va)
        assert again["val_loss"] == runs[name]["val_loss"] and again["train_loss"] == runs[name]["train_loss"]
        assert len(runs[name]["train_loss"]) == tc.steps and runs[name]["step"] == [0, 3, 6]
    assert len({r["train_loss"][0] for r in runs.values()}) == 1      # same weights, same first batch
    assert runs["adam"]["train_loss"][2] != runs["isoadam"]["train_loss"][2]
    assert lm.load_results(Path("/nonexistent/missing.json")) is None
