"""isolab's optimizers on Hugging Face models (transformers, a test extra): tiny GPT-2 and Llama
configurations built from scratch (nothing downloaded), trained on a byte corpus generated here.

GPT-2's layers are transformers' ``Conv1D`` (weight stored ``(in, out)``), Llama's are
``nn.Linear``; both must be routed with every hidden matrix preconditioned, their heads as
documented (a tied head is the embedding, an untied one the head group), and 100 steps must
stay finite. IsoAdam ends ahead of or level with AdamW at the same budget (each at the better
of the same two rates); Iso trains but stays behind at 100 steps, which the last test records.
"""

from __future__ import annotations

import math
import random

import pytest
import torch
import torch.nn.functional as F
import transformers
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

from isolab.optim import Iso, IsoAdam, Muon, Shampoo, split_parameters

torch.set_num_threads(1)
transformers.logging.set_verbosity_error()

STEPS, SEQS, CONTEXT = 100, 8, 64


def byte_corpus(seed: int, size: int) -> torch.Tensor:
    """Sentences of a small grammar as bytes (vocabulary 256): enough structure to learn in 100 steps."""
    r = random.Random(seed)
    subjects = ["the cat", "a dog", "my friend", "the old man", "a bird", "the girl"]
    verbs = ["sees", "likes", "finds", "follows", "paints", "calls"]
    objects = ["the moon", "a red ball", "the river", "two apples", "a small house", "the green tree"]
    text = []
    while sum(map(len, text)) < size:
        text.append(f"{r.choice(subjects)} {r.choice(verbs)} {r.choice(objects)}{r.choice(['.', '!', ' again.'])} ")
    return torch.tensor(list("".join(text).encode())[:size])


TRAIN, HELD_OUT = byte_corpus(0, 50_000), byte_corpus(1, 8_000)


def batch(data, g):
    start = torch.randint(0, len(data) - CONTEXT - 1, (SEQS,), generator=g)
    x = torch.stack([data[i:i + CONTEXT] for i in start])
    y = torch.stack([data[i + 1:i + CONTEXT + 1] for i in start])
    return x, y


def gpt2(tied=True):
    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=256, n_positions=64, resid_pdrop=0.0,
                                      embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0,
                                      tie_word_embeddings=tied))


def llama(tied=False):
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                        bos_token_id=0, eos_token_id=0, tie_word_embeddings=tied))


def loss_of(model, x, y):
    return F.cross_entropy(model(input_ids=x).logits.flatten(0, 1), y.flatten())


def held_out_loss(model):
    g = torch.Generator().manual_seed(99)
    model.eval()
    with torch.no_grad():
        loss = sum(loss_of(model, *batch(HELD_OUT, g)).item() for _ in range(8)) / 8
    model.train()
    return loss


def train(make, build):
    model = make()
    opt = build(model)
    g = torch.Generator().manual_seed(1)
    for _ in range(STEPS):
        opt.zero_grad()
        loss = loss_of(model, *batch(TRAIN, g))
        assert math.isfinite(loss.item())
        loss.backward()
        opt.step()
    return held_out_loss(model)


def matrices(model, opt, algorithm):
    names = {id(p): n for n, p in model.named_parameters()}
    return sorted(names[id(p)] for g in opt.param_groups if g["algorithm"] == algorithm for p in g["params"])


# ----------------------------------------------------------------------------- routing
def test_isoadam_takes_gpt2_in_one_line_and_whitens_every_conv1d():
    model = gpt2()
    opt = IsoAdam(model)
    conv1d = sorted(f"{n}.weight" for n, m in model.named_modules() if type(m).__name__ == "Conv1D")
    assert len(conv1d) == 8 and matrices(model, opt, "isoadam") == conv1d
    assert model.lm_head.weight is model.transformer.wte.weight  # tied: the head is the embedding
    assert "transformer.wte.weight" in split_parameters(model)["embedding"] and not split_parameters(model)["head"]
    # statistics in Conv1D's orientation: c_fc maps 64 inputs to 256 outputs
    loss_of(model, *batch(TRAIN, torch.Generator().manual_seed(0))).backward()
    opt.step()
    c_fc = model.transformer.h[0].mlp.c_fc.weight
    assert tuple(c_fc.shape) == (64, 256) and opt.state[c_fc]["adam_step"] == 1
    untied = gpt2(tied=False)
    assert list(split_parameters(untied)["head"]) == ["lm_head.weight"]
    assert "lm_head.weight" not in matrices(untied, IsoAdam(untied), "isoadam")
    assert "lm_head.weight" in matrices(untied, IsoAdam(untied, head=None), "isoadam")


def test_iso_takes_llama_in_one_line_and_whitens_every_linear():
    model = llama()
    opt = Iso(model)
    linear = sorted(f"{n}.weight" for n, m in model.named_modules()
                    if isinstance(m, torch.nn.Linear) and n != "lm_head")
    assert len(linear) == 14 and matrices(model, opt, "iso") == linear
    assert list(split_parameters(model)["head"]) == ["lm_head.weight"]  # Llama's head is untied
    tied = llama(tied=True)
    assert tied.lm_head.weight is tied.model.embed_tokens.weight
    assert not split_parameters(tied)["head"] and "lm_head.weight" not in matrices(tied, Iso(tied), "iso")


@pytest.mark.parametrize("cls,algorithm", [(Muon, "muon"), (Shampoo, "shampoo")])
def test_muon_and_shampoo_route_the_same_matrices(cls, algorithm):
    for make, count in ((gpt2, 8), (llama, 14)):
        model = make()
        assert len(matrices(model, cls(model), algorithm)) == count


# ----------------------------------------------------------------------------- training
ADAMW = lambda lr: lambda m: torch.optim.AdamW(m.parameters(), lr=lr)  # noqa: E731
RATES = (3e-3, 6e-3)  # each optimizer at the better of the same two rates


@pytest.fixture(scope="module")
def losses():
    out = {}
    for name, make in (("gpt2", gpt2), ("llama", llama)):
        out[name, "adamw"] = min(train(make, ADAMW(lr)) for lr in RATES)
        out[name, "isoadam"] = min(train(make, lambda m, lr=lr: IsoAdam(m, lr=lr)) for lr in RATES)
        out[name, "iso"] = train(make, lambda m: Iso(m, lr=0.01, adam_lr=3e-3))
    out["start"] = held_out_loss(gpt2())
    return out


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_isoadam_is_ahead_of_or_level_with_adamw_after_100_steps(name, losses):
    # measured: GPT-2 1.20 against AdamW's 1.66 (ahead); Llama 0.418 against 0.418 (level)
    assert losses[name, "isoadam"] <= 1.02 * losses[name, "adamw"]


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_iso_trains_both_models_but_stays_behind_adamw_after_100_steps(name, losses):
    # what holds, not what was hoped: Iso's whitened step (its singular values are the
    # canonical correlations of X and G, mostly far below 1) moves these models' matrices
    # slowly; measured at 100 steps 2.83 (GPT-2) and 2.8 (Llama) against AdamW's 1.66 and
    # 0.42, at Iso rates 0.01 and 0.03 (Llama: 2.3 at 0.03, no better from 0.1 to 0.3)
    assert losses[name, "iso"] < 0.6 * losses["start"]
    assert losses[name, "iso"] > losses[name, "adamw"]
