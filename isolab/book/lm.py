r"""A small byte-level language model, its corpus, and a training loop that keeps time.

Chapter 11 repeats the paper's Transformer experiment on data that every Python
installation ships: the source code of the standard library. Everything here is plain
torch and deterministic on a CPU. The chapter's comparison under Part III's protocol
(files held out, every optimizer tuned) is in :mod:`isolab.book.lm_protocol`; the
training loop here (:func:`train`, :func:`make_optimizer`) serves the cost benchmarks
and Chapter 13's timings, which need Adam's settings reused unchanged.

- :func:`stdlib_files`, :func:`stdlib_corpus`: the ``*.py`` files under
  ``sysconfig.get_paths()["stdlib"]`` (``site-packages`` excluded), sorted by their path
  relative to that folder, concatenated as bytes. No download.
- :func:`split_corpus`: a deterministic train/validation split by interleaved chunks
  (chunk ``i`` of ``chunk`` bytes goes to validation when ``i % every == every − 1``), so
  both halves sample every part of the library, not its alphabetical tail.
- :func:`sample_batch`, :func:`validation_batches`: random windows drawn from a
  ``torch.Generator`` (the same seed gives every optimizer the same data order), and a
  fixed, evenly spaced set of validation windows.
- :class:`TransformerLM`: a decoder-only, pre-norm Transformer over the 256 byte values:
  token and position embeddings, ``n_layers`` blocks of causal self-attention (separate
  ``q, k, v, o`` projections) and a GELU MLP of width ``4d``, RMSNorm with a learned gain,
  no biases, an untied output head. Non-embedding parameters: ``12 d² L`` matrix entries
  plus ``(2L + 1) d`` gains.
- :func:`make_optimizer`: ``"adam"`` (``torch.optim.AdamW``, decoupled weight decay on the
  hidden matrices only), ``"isoadam"`` (:class:`isolab.optim.IsoAdam` with the *same*
  hyperparameters), ``"muon"`` (:class:`isolab.optim.Muon`, its own learning rate 0.02);
  the embeddings, head and gains go to an Adam group in every case (routing by
  :func:`isolab.optim.split_parameters`, with the head declared).
- :func:`train`: warm-up + cosine schedule, validation loss against step *and* against
  training wall-clock, and the time of forward+backward and of ``optimizer.step`` per
  step. Returns a JSON-ready dict; :func:`save_results`/:func:`load_results` write and
  read JSON results files (those of ``scripts/train_transformer.py`` among them).
"""

from __future__ import annotations

import json
import math
import platform
import sysconfig
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from isolab.optim import IsoAdam, Muon, split_parameters
from .seeding import generator

__all__ = [
    "stdlib_files",
    "stdlib_corpus",
    "split_corpus",
    "sample_batch",
    "validation_batches",
    "LMConfig",
    "TrainConfig",
    "TransformerLM",
    "count_parameters",
    "make_optimizer",
    "lr_factor",
    "evaluate",
    "train",
    "environment",
    "save_results",
    "load_results",
    "OPTIMIZERS",
]

OPTIMIZERS = ("adam", "isoadam", "muon")


# ----------------------------------------------------------------------------- corpus
def stdlib_files(root: str | Path | None = None) -> list[Path]:
    """Every ``*.py`` file under ``root`` (default: the standard library), sorted by
    relative path; anything under ``site-packages`` or ``dist-packages`` is left out
    (installed packages differ between machines)."""
    root = Path(root if root is not None else sysconfig.get_paths()["stdlib"])
    files = []
    for p in root.rglob("*.py"):
        rel = p.relative_to(root)
        if any(part in ("site-packages", "dist-packages") for part in rel.parts):
            continue
        if p.is_file():
            files.append(p)
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def stdlib_corpus(max_bytes: int | None = None, root: str | Path | None = None) -> torch.Tensor:
    """The concatenated bytes of :func:`stdlib_files` as a ``uint8`` tensor.

    Files are read in sorted order and joined with a blank line; with ``max_bytes`` the
    result is the first ``max_bytes`` bytes of that stream (reading stops early)."""
    if max_bytes is not None and max_bytes <= 0:
        raise ValueError(f"max_bytes must be positive, got {max_bytes}")
    chunks, total = [], 0
    for p in stdlib_files(root):
        data = p.read_bytes() + b"\n\n"
        chunks.append(data)
        total += len(data)
        if max_bytes is not None and total >= max_bytes:
            break
    blob = b"".join(chunks)
    if max_bytes is not None:
        blob = blob[:max_bytes]
    if not blob:
        raise ValueError(f"no *.py files found under {root}")
    return torch.frombuffer(bytearray(blob), dtype=torch.uint8).clone()


def split_corpus(data: torch.Tensor, chunk: int = 4096, every: int = 10) -> tuple[torch.Tensor, torch.Tensor]:
    """Split a 1-D byte tensor into (train, validation) by interleaved chunks.

    The data is cut into consecutive chunks of ``chunk`` bytes (the last may be short);
    chunk ``i`` goes to validation when ``i % every == every - 1``, to training otherwise.
    Both parts keep their chunks in order. A window that straddles two training chunks
    joins text that was not adjacent: harmless, and deterministic."""
    if data.ndim != 1:
        raise ValueError("data must be 1-D")
    if chunk < 1 or every < 2:
        raise ValueError("need chunk >= 1 and every >= 2")
    n = data.numel()
    idx = torch.arange(n) // chunk
    is_val = (idx % every) == (every - 1)
    return data[~is_val], data[is_val]


def sample_batch(data: torch.Tensor, batch: int, context: int, gen: torch.Generator):
    """``batch`` random windows of ``context + 1`` bytes: inputs ``x`` and next-byte
    targets ``y``, both ``(batch, context)`` int64. Start positions are drawn from
    ``gen``, so a generator with a fixed seed fixes the data order."""
    if data.numel() <= context + 1:
        raise ValueError(f"data has {data.numel()} bytes, need more than context + 1 = {context + 1}")
    starts = torch.randint(0, data.numel() - context - 1, (batch,), generator=gen)
    offs = torch.arange(context + 1)
    win = data[starts[:, None] + offs].long()
    return win[:, :-1], win[:, 1:]


def validation_batches(data: torch.Tensor, n_batches: int, batch: int, context: int):
    """A fixed list of ``n_batches`` (x, y) batches whose windows start at evenly spaced
    positions covering ``data`` (no randomness)."""
    n = n_batches * batch
    last = data.numel() - context - 1
    if last < 1:
        raise ValueError("validation data shorter than a window")
    starts = torch.linspace(0, last - 1, n).long()
    offs = torch.arange(context + 1)
    win = data[starts[:, None] + offs].long()
    return [(win[i * batch:(i + 1) * batch, :-1], win[i * batch:(i + 1) * batch, 1:]) for i in range(n_batches)]


# ----------------------------------------------------------------------------- model
@dataclass(frozen=True)
class LMConfig:
    """Model shape. ``d_model`` must be divisible by ``n_heads``."""

    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    context: int = 64
    vocab: int = 256
    mlp_ratio: int = 4


class RMSNorm(nn.Module):
    """``x / rms(x) · g`` over the last dimension, with a learned gain ``g`` (init 1)."""

    def __init__(self, d: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Block(nn.Module):
    """Pre-norm block: ``x + o(attn(q, k, v))``, then ``x + proj(gelu(fc(x)))``."""

    def __init__(self, cfg: LMConfig):
        super().__init__()
        d = cfg.d_model
        self.n_heads = cfg.n_heads
        self.norm1 = RMSNorm(d)
        self.q = nn.Linear(d, d, bias=False)
        self.k = nn.Linear(d, d, bias=False)
        self.v = nn.Linear(d, d, bias=False)
        self.o = nn.Linear(d, d, bias=False)
        self.norm2 = RMSNorm(d)
        self.fc = nn.Linear(d, cfg.mlp_ratio * d, bias=False)
        self.proj = nn.Linear(cfg.mlp_ratio * d, d, bias=False)

    def forward(self, x):
        B, T, d = x.shape
        h = self.norm1(x)
        heads = lambda t: t.view(B, T, self.n_heads, d // self.n_heads).transpose(1, 2)  # noqa: E731
        a = F.scaled_dot_product_attention(heads(self.q(h)), heads(self.k(h)), heads(self.v(h)), is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(B, T, d))
        return x + self.proj(F.gelu(self.fc(self.norm2(x))))


class TransformerLM(nn.Module):
    """Decoder-only byte-level Transformer (see the module docstring).

    Initialisation (seeded by the caller's global torch seed or ``seed``): embeddings
    ``N(0, 0.02²)``; hidden matrices ``N(0, 1/d_in)``; the two residual-output matrices
    (``o``, ``proj``) and the head scaled by ``1/√(2L)`` and zero respectively, so the
    network starts as the identity on the residual stream and predicts uniform bytes."""

    def __init__(self, cfg: LMConfig, seed: int | None = None):
        super().__init__()
        if cfg.d_model % cfg.n_heads:
            raise ValueError("d_model must be divisible by n_heads")
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab, cfg.d_model)
        self.pos = nn.Embedding(cfg.context, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab, bias=False)
        gen = generator(seed) if seed is not None else None
        with torch.no_grad():
            for emb in (self.tok, self.pos):
                emb.weight.copy_(torch.randn(emb.weight.shape, generator=gen) * 0.02)
            for blk in self.blocks:
                for name in ("q", "k", "v", "o", "fc", "proj"):
                    w = getattr(blk, name).weight
                    std = 1 / math.sqrt(w.shape[1])
                    if name in ("o", "proj"):
                        std /= math.sqrt(2 * cfg.n_layers)
                    w.copy_(torch.randn(w.shape, generator=gen) * std)
            self.head.weight.zero_()

    def forward(self, idx):
        T = idx.shape[1]
        if T > self.cfg.context:
            raise ValueError(f"sequence length {T} exceeds the context {self.cfg.context}")
        x = self.tok(idx) + self.pos(torch.arange(T, device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x))

    def loss(self, x, y):
        """Mean next-byte cross-entropy in nats."""
        logits = self(x)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def count_parameters(model: TransformerLM) -> dict[str, int]:
    """Parameter counts by routing group (``matrix``, ``embedding``, ``head``, ``vector``)
    plus ``non_embedding`` = everything but the token/position embeddings and the head."""
    groups = split_parameters(model, head=model.head)
    out = {g: sum(p.numel() for p in ps.values()) for g, ps in groups.items()}
    out["non_embedding"] = out["matrix"] + out["vector"]
    return out


# ----------------------------------------------------------------------------- training
@dataclass(frozen=True)
class TrainConfig:
    """Training hyperparameters: the Adam settings are used unchanged for IsoAdam."""

    steps: int = 300
    batch: int = 16
    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    weight_decay: float = 0.1
    warmup: int = 30
    min_lr_ratio: float = 0.1
    muon_lr: float = 0.02
    lr_scale: float = 1.0
    eval_interval: int = 25
    eval_batches: int = 4
    seed: int = 0
    data_seed: int = 1
    #: extra keyword arguments for the optimizer's constructor (e.g. ``stat_interval``)
    extra: dict = field(default_factory=dict)


def lr_factor(step: int, cfg: TrainConfig) -> float:
    """Multiplier of the peak learning rate at ``step`` (0-based): linear warm-up over
    ``warmup`` steps, then cosine decay to ``min_lr_ratio`` at ``steps``."""
    if step < cfg.warmup:
        return (step + 1) / cfg.warmup
    t = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * min(t, 1.0)))


def make_optimizer(name: str, model: TransformerLM, cfg: TrainConfig) -> torch.optim.Optimizer:
    """The three optimizers of the chapter, routed identically (see module docstring).

    Hidden matrices get ``weight_decay`` (decoupled) under Adam and IsoAdam; embeddings,
    head and gains get Adam with no weight decay in all three. Muon keeps its own
    defaults (lr ``muon_lr``, momentum 0.95, Nesterov, no weight decay) on the matrices.
    ``lr_scale`` multiplies every learning rate; ``cfg.extra`` is passed on to the
    constructor (``torch.optim.AdamW``, ``IsoAdam`` or ``Muon``)."""
    s = cfg.lr_scale
    lr, betas, eps, wd = cfg.lr * s, tuple(cfg.betas), cfg.eps, cfg.weight_decay
    if name == "adam":
        g = split_parameters(model, head=model.head)
        rest = [p for k in ("embedding", "head", "vector") for p in g[k].values()]
        return torch.optim.AdamW(
            [{"params": list(g["matrix"].values()), "weight_decay": wd}, {"params": rest, "weight_decay": 0.0}],
            lr=lr, betas=betas, eps=eps, **cfg.extra,
        )
    if name == "isoadam":
        # the statistics schedule of the chapter's runs, pinned (the library's cost defaults may
        # change): statistics of every row at every step, roots every 10 steps; cfg.extra may override them
        pinned = dict(stat_interval=1, stat_rows=None, root_interval=10)
        return IsoAdam(model, lr=lr, betas=betas, eps=eps, weight_decay=wd, adam_weight_decay=0.0, head=model.head,
                       **{**pinned, **cfg.extra})
    if name == "muon":
        return Muon(model, lr=cfg.muon_lr * s, adam_lr=lr, adam_betas=betas, adam_eps=eps,
                    adam_weight_decay=0.0, head=model.head, **cfg.extra)
    raise ValueError(f"unknown optimizer {name!r}; choose from {OPTIMIZERS}")


@torch.no_grad()
def evaluate(model: TransformerLM, batches) -> float:
    """Mean loss (nats per byte) over a fixed list of batches, in eval mode."""
    was = model.training
    model.eval()
    total = sum(model.loss(x, y).item() for x, y in batches) / len(batches)
    model.train(was)
    return total


def train(optimizer: str, model_cfg: LMConfig, cfg: TrainConfig, train_data: torch.Tensor,
          val_data: torch.Tensor, *, log=None) -> dict:
    """Train a fresh :class:`TransformerLM` (seed ``cfg.seed``) with one optimizer.

    The data order comes from ``generator(cfg.data_seed)``, so every optimizer sees the
    same batches. Validation loss (on :func:`validation_batches`) is recorded at step 0,
    every ``eval_interval`` steps and at the end. Timings (``time.perf_counter``) exclude
    evaluation: ``fwd_bwd`` covers forward and backward (including Iso's statistics
    hooks, which run inside them) and ``opt`` covers ``optimizer.step`` (roots, whitening,
    moments) and ``zero_grad``.

    Returns a dict of plain lists and numbers: ``step``, ``val_loss``, ``wall`` (training
    seconds spent before that evaluation), ``train_loss`` (every step), ``fwd_bwd_s``,
    ``opt_s`` (totals), ``tokens_per_s``, ``params`` (:func:`count_parameters`), and the
    two configs."""
    model = TransformerLM(model_cfg, seed=cfg.seed)
    opt = make_optimizer(optimizer, model, cfg)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, cfg))
    gen = generator(cfg.data_seed)
    val = validation_batches(val_data, cfg.eval_batches, cfg.batch, model_cfg.context)
    rec = {"optimizer": optimizer, "step": [], "val_loss": [], "wall": [], "train_loss": []}
    t_fb = t_opt = 0.0

    def record(step):
        rec["step"].append(step)
        rec["val_loss"].append(evaluate(model, val))
        rec["wall"].append(t_fb + t_opt)
        if log is not None:
            log(f"{optimizer:8s} step {step:5d}  val {rec['val_loss'][-1]:.4f}  train time {t_fb + t_opt:7.1f}s")

    record(0)
    for step in range(cfg.steps):
        x, y = sample_batch(train_data, cfg.batch, model_cfg.context, gen)
        t0 = time.perf_counter()
        loss = model.loss(x, y)
        loss.backward()
        t1 = time.perf_counter()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sched.step()
        t2 = time.perf_counter()
        t_fb += t1 - t0
        t_opt += t2 - t1
        rec["train_loss"].append(loss.item())
        if not math.isfinite(rec["train_loss"][-1]):
            break
        if (step + 1) % cfg.eval_interval == 0 or step + 1 == cfg.steps:
            record(step + 1)
    if hasattr(opt, "remove_hooks"):
        opt.remove_hooks()
    n_steps = len(rec["train_loss"])
    rec.update(
        fwd_bwd_s=t_fb, opt_s=t_opt,
        tokens_per_s=n_steps * cfg.batch * model_cfg.context / max(t_fb + t_opt, 1e-12),
        params=count_parameters(model), model=asdict(model_cfg), train=_plain(asdict(cfg)),
    )
    return rec


def _plain(d: dict) -> dict:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}


# ----------------------------------------------------------------------------- results
def environment() -> dict:
    """Hardware and software description stored with results."""
    return {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": __import__("os").cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "device": "cpu",
    }


def save_results(results: dict, path: str | Path) -> None:
    """Write ``results`` (plain dicts/lists/numbers) as JSON; floats round-trip exactly."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=1, allow_nan=True))


def load_results(path: str | Path) -> dict | None:
    """Read a results file written by :func:`save_results`; ``None`` if it is absent."""
    path = Path(path)
    if not path.exists():
        return None
    return json.loads(path.read_text())
