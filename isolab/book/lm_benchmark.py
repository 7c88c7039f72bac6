r"""The language-model benchmark's models, optimizers and single training run.

Two models people train, built by Hugging Face's ``transformers`` from tiny configurations
(nothing downloaded): GPT-2 (its layers are ``Conv1D``, weight stored ``(in, out)``; the
head tied to the token embedding; learned positions; a GELU MLP four times as wide) and
Llama (``nn.Linear``; an untied head; rotary positions; a SiLU-gated MLP ``8d/3`` wide;
grouped-query attention with half as many key/value heads), over the 256 byte values. The
data are those of :mod:`isolab.book.lm_protocol`: the standard library's ``*.py`` files split
by file into training, tuning and test files.

- :data:`SIZES`: model width, depth, heads, context and sequences per step. ``"full"`` is
  the size of the measurements that prompted the benchmark (about 0.83 M parameters);
  ``"small"`` the one whose runs fit the benchmark's CPU budget; ``"tiny"`` the tests'.
- :func:`hf_model`, :class:`Logits`: a model from its seed, and a wrapper that returns
  logits, so that :func:`isolab.book.lm_protocol.window_losses` can score it.
- :data:`OPTIMIZERS`, :func:`build`: every optimizer the benchmark compares, built on one
  model with a ``hyper`` dict (``lr``; ``side_lr``, the rate of the AdamW group that
  trains the embeddings, head and gains, for every optimizer but one-rate AdamW; the
  knobs in :data:`KNOBS`). Everything else is fixed by name in :data:`FIXED`.
- :data:`KNOBS`: the knobs each optimizer's search moves after its learning rate (see
  :mod:`isolab.book.lm_bench_protocol`), and :data:`REFERENCE`, where they start.
- :func:`run`: one training run with warm-up over 10 % of the steps and cosine decay to
  10 % (:func:`isolab.book.lm_protocol.lr_factor`), scored on the tuning or the test
  windows, with the wall-clock time of every step (forward, backward, ``step``,
  ``zero_grad``; no evaluation, no batch sampling).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from isolab.optim import Iso, IsoAdam, Muon, split_parameters
from .lm import sample_batch
from .lm_protocol import LMData, _Pair, data_seed, lr_factor, mean_and_se, window_losses
from .lm_variants import VARIANTS
from .seeding import generator

__all__ = ["ARCHS", "SIZES", "hf_config", "hf_model", "Logits", "OPTIMIZERS", "LABELS", "FIXED", "REFERENCE", "Move",
           "KNOBS", "two_rates", "build", "routing", "run", "step_time_summary"]

ARCHS = ("gpt2", "llama")
SIZES = {
    "tiny": dict(d_model=16, n_layers=1, n_heads=2, context=16, batch=4),
    "small": dict(d_model=64, n_layers=2, n_heads=4, context=64, batch=16),
    "full": dict(d_model=128, n_layers=4, n_heads=4, context=64, batch=16),
}


def hf_config(arch: str, size: str):
    """The ``transformers`` configuration of ``arch`` at ``size`` (dropout off)."""
    s = SIZES[size]
    d, tokens = s["d_model"], dict(vocab_size=256, bos_token_id=0, eos_token_id=0)
    if arch == "gpt2":
        from transformers import GPT2Config

        return GPT2Config(n_layer=s["n_layers"], n_embd=d, n_head=s["n_heads"], n_positions=s["context"],
                          resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, **tokens)
    if arch == "llama":
        from transformers import LlamaConfig

        return LlamaConfig(hidden_size=d, intermediate_size=8 * round(d / 3), num_hidden_layers=s["n_layers"],
                           num_attention_heads=s["n_heads"], num_key_value_heads=max(1, s["n_heads"] // 2),
                           max_position_embeddings=s["context"], tie_word_embeddings=False, **tokens)
    raise ValueError(f"unknown architecture {arch!r}; choose from {ARCHS}")


def hf_model(arch: str, size: str, seed: int) -> nn.Module:
    """A fresh ``GPT2LMHeadModel`` or ``LlamaForCausalLM``, its weights drawn from ``seed``."""
    import transformers

    transformers.logging.set_verbosity_error()
    cfg = hf_config(arch, size)
    cls = transformers.GPT2LMHeadModel if arch == "gpt2" else transformers.LlamaForCausalLM
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return cls(cfg)


class Logits(nn.Module):
    """``model(input_ids=idx).logits`` as a plain module (what the scoring code calls)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.inner = model

    def forward(self, idx):
        return self.inner(input_ids=idx).logits


def _loss(model, x, y):
    logits = model(input_ids=x).logits
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


# ----------------------------------------------------------------------------- optimizers
OPTIMIZERS = ("adamw", "adamw2", "torch_muon", "muon", "soap", "iso", "isoadam",
              "iso_norm", "iso_polar", "iso_nor", "diag_polar", "isoadam_sched")
LABELS = {"adamw": "AdamW", "adamw2": "AdamW, two rates", "torch_muon": "torch.optim.Muon", "muon": "Muon (isolab)",
          "soap": "SOAP", "iso": "Iso", "isoadam": "IsoAdam", "iso_norm": "Iso, Muon's norm",
          "iso_polar": "Iso, polar factor", "iso_nor": "Iso, per-neuron second moment",
          "diag_polar": "polar step, diagonal metric", "isoadam_sched": "IsoAdam, schedule tuned"}
_ISO_FIXED = dict(momentum=0.95, nesterov=True, beta_cov=0.95, stat_interval=1, root_interval=10,
                  root_method="eigh", stat_rows=None, warmup_steps=0, weight_decay=0.0, adam_betas=(0.9, 0.95),
                  adam_eps=1e-8, adam_weight_decay=0.0, shrinkage=True)
_ISOADAM_FIXED = dict(betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0, adam_weight_decay=0.0, beta_cov=0.95,
                      stat_interval=1, root_interval=10, root_method="eigh", stat_rows=None, warmup_steps=0,
                      shrinkage=True)
#: every setting that is not searched, by name (the libraries' defaults written out where
#: they apply, so that a later change of a default cannot move a saved result)
FIXED = {
    "adamw": dict(betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0),
    "adamw2": dict(betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0),
    "torch_muon": dict(momentum=0.95, nesterov=True, ns_steps=5, weight_decay=0.0, adjust_lr_fn=None,
                       side_betas=(0.9, 0.95), side_eps=1e-8),
    "muon": dict(momentum=0.95, nesterov=True, ns_steps=5, weight_decay=0.0, adjust_lr_fn="original",
                 adam_betas=(0.9, 0.95), adam_eps=1e-8, adam_weight_decay=0.0),
    "soap": dict(betas=(0.95, 0.95), shampoo_beta=None, weight_decay=0.0, precondition_frequency=10,
                 side_betas=(0.9, 0.95), side_eps=1e-8),
    "iso": _ISO_FIXED, "iso_norm": _ISO_FIXED, "iso_polar": _ISO_FIXED, "iso_nor": _ISO_FIXED,
    "diag_polar": _ISO_FIXED, "isoadam": _ISOADAM_FIXED, "isoadam_sched": _ISOADAM_FIXED,
}
#: where each searched knob starts (the libraries' defaults)
REFERENCE = {"damping": 1e-3, "eps": 1e-8, "warmup_fraction": 0.0, "root_interval": 10}


@dataclass(frozen=True)
class Move:
    """One knob's search after the learning rate: with ``factor``, a line search of
    ``trials`` steps in log space (first ``× factor``; if that helps, ``× factor`` again, else
    ``÷ factor`` from where it was); with ``values``, each value tried once."""

    key: str
    factor: Optional[float] = None
    trials: int = 1
    values: tuple = ()

    @property
    def count(self) -> int:
        return len(self.values) if self.values else self.trials


_SIDE = Move("side_lr", factor=10**0.5, trials=2)
_DAMPING = Move("damping", factor=0.1, trials=2)
#: the knobs each optimizer's search moves after its learning rate, in order
KNOBS = {
    "adamw": (), "adamw2": (_SIDE,), "torch_muon": (_SIDE,), "muon": (_SIDE,),
    "soap": (_SIDE, Move("eps", factor=100.0, trials=2)),
    "iso": (_SIDE, _DAMPING), "isoadam": (_SIDE, _DAMPING), "iso_norm": (_SIDE, _DAMPING),
    "iso_polar": (_SIDE, _DAMPING), "iso_nor": (_SIDE, _DAMPING), "diag_polar": (_SIDE, _DAMPING),
    "isoadam_sched": (Move("side_lr", factor=10**0.5, trials=1), Move("damping", factor=0.1, trials=1),
                      Move("warmup_fraction", values=(0.05,)), Move("root_interval", values=(1,))),
}


def two_rates(name: str) -> bool:
    """Whether ``name`` has a rate of its own for the AdamW group (all but one-rate AdamW)."""
    return name != "adamw"


def _split(model):
    groups = split_parameters(model)
    return list(groups["matrix"].values()), [p for k in ("embedding", "head", "vector") for p in groups[k].values()]


def build(name: str, model: nn.Module, hyper: dict, steps: int):
    """``name`` on ``model`` with the searched settings ``hyper`` and :data:`FIXED`; each param
    group carries its peak rate as ``"peak_lr"`` for :func:`run`'s schedule. ``steps`` turns
    ``warmup_fraction`` into Iso's statistics-only warm-up steps."""
    if name not in FIXED:
        raise ValueError(f"unknown optimizer {name!r}; choose from {OPTIMIZERS}")
    knobs = {m.key for m in KNOBS[name]} | {"lr"} | ({"side_lr"} if two_rates(name) else set())
    if "lr" not in hyper or not set(hyper) <= knobs or (two_rates(name) and "side_lr" not in hyper):
        raise ValueError(f"{name} searches {sorted(knobs)} (lr required, and side_lr where it has two rates); "
                         f"got {sorted(hyper)}")
    h, lr, side = FIXED[name], hyper["lr"], hyper.get("side_lr")
    matrices, rest = _split(model)
    if name == "adamw":
        opt = torch.optim.AdamW(model.parameters(), lr=lr, **h)
    elif name == "adamw2":
        opt = torch.optim.AdamW([{"params": matrices}, {"params": rest, "lr": side}], lr=lr, **h)
    elif name in ("torch_muon", "soap"):
        side_opt = torch.optim.AdamW(rest, lr=side, betas=h["side_betas"], eps=h["side_eps"], weight_decay=0.0)
        own = {k: v for k, v in h.items() if not k.startswith("side_")}
        if name == "torch_muon":
            opt = _Pair(torch.optim.Muon(matrices, lr=lr, **own), side_opt)
        else:
            from pytorch_optimizer import SOAP

            opt = _Pair(SOAP(matrices, lr=lr, eps=hyper.get("eps", REFERENCE["eps"]), **own), side_opt)
    elif name == "muon":
        opt = Muon(model, lr=lr, adam_lr=side, **h)
    else:
        kw = dict(h, damping=hyper.get("damping", REFERENCE["damping"]),
                  root_interval=hyper.get("root_interval", h["root_interval"]),
                  warmup_steps=round(hyper.get("warmup_fraction", 0.0) * steps))
        cls = IsoAdam if name.startswith("isoadam") else VARIANTS.get(name, Iso)
        opt = cls(model, lr=lr, adam_lr=side, **kw)
    for g in opt.param_groups:
        g["peak_lr"] = g["lr"]
    return opt


def routing(opt) -> list[tuple[str, int, float]]:
    """``(algorithm, tensors, peak rate)`` of every param group of an optimizer from :func:`build`."""
    out = []
    for o in (opt.parts if isinstance(opt, _Pair) else (opt,)):
        for g in o.param_groups:
            out.append((g.get("algorithm") or type(o).__name__, len(g["params"]), g["peak_lr"]))
    return out


def step_time_summary(seconds) -> dict:
    """Median and quartiles of per-step times, in milliseconds, over the steps after the
    first 5 (which include first-call allocations)."""
    t = torch.tensor(list(seconds)[5:] or list(seconds), dtype=torch.float64) * 1000
    if t.numel() == 0:
        return {"median": math.nan, "q1": math.nan, "q3": math.nan, "n": 0}
    q = torch.quantile(t, torch.tensor([0.25, 0.5, 0.75], dtype=torch.float64))
    return {"median": float(q[1]), "q1": float(q[0]), "q3": float(q[2]), "n": int(t.numel())}


def run(name: str, hyper: dict, steps: int, seed: int, *, arch: str, size: str, data: LMData,
        score_on: str = "tune", curve_points: int = 0, train_stride: int = 10) -> dict:
    """Train a fresh ``arch`` model (weights from ``seed``, data order from
    :func:`~isolab.book.lm_protocol.data_seed`) with ``name`` for ``steps`` steps and score it on
    the ``score_on`` windows (``"tune"`` or ``"test"``).

    Returns ``loss`` and ``se`` (mean next-byte loss in nats and its standard error clustered
    by file; ``inf``/``nan`` when the run diverged: a non-finite loss, a loss above twice the
    uniform one, or a root the optimizer could not compute, whose message is kept as
    ``error``), ``diverged``, ``curve_step``/``curve_loss`` (``curve_points`` evaluations on
    512 test windows), ``train_loss`` (means of ``train_stride`` steps), ``step_ms``
    (:func:`step_time_summary`) and ``seconds`` (the whole run)."""
    if score_on not in ("tune", "test"):
        raise ValueError(f"score_on must be 'tune' or 'test', got {score_on!r}")
    t_start = time.perf_counter()
    cfg = SIZES[size]
    model = hf_model(arch, size, seed)
    opt = build(name, model, hyper, steps)
    scorer = Logits(model)
    gen = generator(data_seed(seed))
    marks = {round(steps * (k + 1) / curve_points) for k in range(curve_points)} if curve_points else set()
    out = {"train_loss": [], "curve_step": [], "curve_loss": [], "diverged": False, "error": None}
    losses, times = [], []
    try:
        for step in range(steps):
            f = lr_factor(step, steps)
            for g in opt.param_groups:
                g["lr"] = g["peak_lr"] * f
            x, y = sample_batch(data.train, cfg["batch"], cfg["context"], gen)
            t0 = time.perf_counter()
            loss = _loss(model, x, y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            times.append(time.perf_counter() - t0)
            value = loss.item()
            losses.append(value)
            if not math.isfinite(value) or value > 2 * math.log(256):
                out["diverged"] = True
                break
            if step + 1 in marks:
                out["curve_step"].append(step + 1)
                out["curve_loss"].append(float(window_losses(scorer, data.curve).mean()))
    except (FloatingPointError, torch.linalg.LinAlgError) as e:
        out["diverged"], out["error"] = True, f"{type(e).__name__}: {str(e)[:300]}"
    finally:
        if hasattr(opt, "remove_hooks"):
            opt.remove_hooks()
    out["train_loss"] = [sum(losses[i:i + train_stride]) / len(losses[i:i + train_stride])
                         for i in range(0, len(losses), train_stride)]
    out["step_ms"] = step_time_summary(times)
    if out["diverged"]:
        out.update(loss=math.inf, se=math.nan)
    else:
        windows = data.tune if score_on == "tune" else data.test
        wl = window_losses(scorer, windows)
        out["loss"], out["se"] = mean_and_se(wl, windows.file)
        if not math.isfinite(out["loss"]):
            out.update(loss=math.inf, diverged=True)
    out["seconds"] = time.perf_counter() - t_start
    return out
