r"""Chapter 11's language-model comparison under Part III's tuning protocol.

:mod:`isolab.book.lm` holds the corpus and the model; this module holds what makes the
comparison of optimizers on it fair:

- **Data that was never trained on** (:func:`split_files`, :class:`LMData`). The files of
  the standard library are split *by file*: one in five (``i % 5 == 4`` in sorted order)
  is a test file, one in ten of the rest (``i % 10 == 8``) a tuning file, and only the
  remaining 70 % are concatenated into the training stream. Settings are chosen on the
  tuning files and reported on the test files.
- **A loss with its standard error** (:func:`window_set`, :func:`window_losses`,
  :func:`mean_and_se`). A file's windows are non-overlapping slices of that file only;
  a fixed, evenly spaced subset of all of them is evaluated. Windows of one file are
  correlated, so the standard error is clustered by file (the file is the unit that was
  sampled), which is larger than the naive one.
- **Every optimizer built the same way** (:func:`build_optimizer`): the hidden matrices
  get the optimizer under test, the embeddings, head and gains an Adam group; the
  settings that are not tuned are fixed in :data:`FIXED` by name. Muon has two learning
  rates (its matrices' and its Adam side's); Adam, IsoAdam and SOAP come with one for
  everything and, as :data:`TWO_RATES` (``"adam2"``, ...), with the same two as Muon.
- **One run** (:func:`run`): warm-up over 10 % of the steps, then cosine decay to 10 %,
  each budget with its own schedule; the weights and the data order both come from the
  run's seed.
- **The protocol** (:func:`tune`): nine trials for every optimizer (nine learning rates a
  quarter-decade apart, or for two rates a 3 × 3 grid half a decade apart),
  successive halving by 3 over two rungs, a grid moved off its edge at most twice, the
  median over the tuning seeds deciding; the chosen setting is then run on held-out seeds
  (:func:`heldout`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

import torch

from isolab.optim import IsoAdam, Muon, split_parameters
from .lm import LMConfig, TransformerLM, sample_batch, stdlib_files
from .seeding import generator

__all__ = [
    "OPTIMIZERS", "TWO_RATES", "FIXED", "GRIDS", "SIZES", "LABELS", "split_files", "join_files",
    "WindowSet", "window_set", "LMData", "load_data", "data_for", "window_losses", "mean_and_se", "build_optimizer",
    "routing", "grid_values", "grid_trials", "lr_factor", "run", "Trial", "tune", "best_of_searches", "heldout",
    "data_seed",
]

OPTIMIZERS = ("adam", "isoadam", "muon", "soap")
#: the same optimizers given Muon's freedom: a rate of their own for the embeddings, head and
#: gains (the same nine trials, as a 3 × 3 grid)
TWO_RATES = ("adam2", "isoadam2", "soap2")
LABELS = {"adam": "Adam", "isoadam": "IsoAdam", "muon": "Muon", "soap": "SOAP", "adam2": "Adam, two rates",
          "isoadam2": "IsoAdam, two rates", "soap2": "SOAP, two rates"}

#: the settings that are not tuned, by name (the library's defaults written out, so that a
#: later change of a default cannot move a saved result)
FIXED = {
    "adam": dict(betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1),
    "isoadam": dict(betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, beta_cov=0.95, damping=1e-3,
                    stat_interval=1, root_interval=10, root_method="eigh", stat_rows="auto"),
    "soap": dict(betas=(0.95, 0.95), shampoo_beta=None, eps=1e-8, weight_decay=0.1, precondition_frequency=10),
    "muon": dict(momentum=0.95, nesterov=True, ns_steps=5, weight_decay=0.0, adjust_lr_fn="original",
                 adam_betas=(0.9, 0.95), adam_eps=1e-8),
}
FIXED.update({two: FIXED[two[:-1]] for two in TWO_RATES})

#: each optimizer's grid of log10 learning rates: (first, spacing, count) per tuned rate;
#: Adam, IsoAdam and SOAP tune one rate, Muon two (matrices, then its Adam side)
GRIDS = {
    "adam": ((-3.0, 0.25, 9),),
    "isoadam": ((-3.0, 0.25, 9),),
    "soap": ((-3.0, 0.25, 9),),
    "muon": ((-2.0, 0.5, 3), (-2.5, 0.5, 3)),
    "adam2": ((-2.75, 0.5, 3), (-2.5, 0.5, 3)),
    # centred where Muon's and Adam's Adam-side rates landed (0.1)
    "isoadam2": ((-2.5, 0.5, 3), (-1.5, 0.5, 3)),
    "soap2": ((-2.25, 0.5, 3), (-1.5, 0.5, 3)),
}

WARMUP_FRACTION = 0.1
MIN_LR_RATIO = 0.1
TEST_EVERY, TUNE_EVERY = 5, 10

#: the sizes of ``scripts/train_transformer.py``: model, windows per step, budgets (steps), tuning and
#: held-out seeds, how many tuning and test windows are scored, and the optimizers its saved file
#: holds (at full size neither SOAP nor SOAP with two rates: four hours of CPU did not stretch to them)
SIZES = {
    "chapter": dict(model=LMConfig(d_model=64, n_layers=2, n_heads=4, context=64), batch=16,
                    budgets=(100, 300, 900), tuning_seeds=(0,), heldout_seeds=(10, 11, 12, 13, 14),
                    tune_windows=1024, test_windows=4096,
                    saved=("adam", "isoadam", "muon", "soap", "adam2", "isoadam2", "soap2")),
    "full": dict(model=LMConfig(d_model=128, n_layers=4, n_heads=4, context=128), batch=16,
                 budgets=(400,), tuning_seeds=(0,), heldout_seeds=(10, 11, 12),
                 tune_windows=1024, test_windows=2048, saved=("adam", "isoadam", "muon", "adam2", "isoadam2")),
    "tiny": dict(model=LMConfig(d_model=16, n_layers=1, n_heads=2, context=16), batch=4,
                 budgets=(6, 12), tuning_seeds=(0,), heldout_seeds=(10, 11),
                 tune_windows=32, test_windows=64, saved=OPTIMIZERS),
}


# ----------------------------------------------------------------------------- data
def split_files(files: Sequence[Path]) -> dict[str, list[Path]]:
    """Split sorted ``files`` into ``train`` / ``tune`` / ``test`` by their index ``i``:
    test when ``i % 5 == 4``, tuning when ``i % 10 == 8`` (never a test index), training
    otherwise. Every part samples the whole library, not an alphabetical stretch of it."""
    out = {"train": [], "tune": [], "test": []}
    for i, p in enumerate(files):
        key = "test" if i % TEST_EVERY == TEST_EVERY - 1 else "tune" if i % TUNE_EVERY == TUNE_EVERY - 2 else "train"
        out[key].append(p)
    return out


def join_files(files: Sequence[Path]) -> torch.Tensor:
    """The bytes of ``files`` joined with a blank line, as a ``uint8`` tensor."""
    blob = b"".join(p.read_bytes() + b"\n\n" for p in files)
    if not blob:
        raise ValueError("no bytes in the given files")
    return torch.frombuffer(bytearray(blob), dtype=torch.uint8).clone()


@dataclass(frozen=True)
class WindowSet:
    """Evaluation windows: inputs ``x`` and targets ``y`` (``(N, context)`` int64) and the
    index of the file each window was cut from (``file``, ``(N,)``)."""

    x: torch.Tensor
    y: torch.Tensor
    file: torch.Tensor

    def __len__(self) -> int:
        return self.x.shape[0]

    def head(self, n: int) -> "WindowSet":
        """An evenly spaced subset of ``n`` of the windows (for cheap curves)."""
        idx = _even(len(self), n)
        return WindowSet(self.x[idx], self.y[idx], self.file[idx])


def _even(total: int, n: int) -> torch.Tensor:
    if n >= total:
        return torch.arange(total)
    return torch.linspace(0, total - 1, n).round().long().unique()


def window_set(files: Sequence[Path], context: int, max_windows: int) -> WindowSet:
    """Every non-overlapping window of ``context + 1`` bytes inside each of ``files``
    (consecutive windows share one byte: the last target of one is the first input of the
    next), thinned to ``max_windows`` evenly spaced ones. A window never crosses files."""
    pieces, owner = [], []
    for fid, p in enumerate(files):
        b = p.read_bytes()
        n = (len(b) - 1) // context
        if n < 1:
            continue
        t = torch.frombuffer(bytearray(b[: n * context + 1]), dtype=torch.uint8)
        starts = torch.arange(n) * context
        pieces.append(t[starts[:, None] + torch.arange(context + 1)])
        owner.append(torch.full((n,), fid, dtype=torch.long))
    if not pieces:
        raise ValueError(f"no file is longer than a window of {context + 1} bytes")
    win, file = torch.cat(pieces), torch.cat(owner)
    idx = _even(win.shape[0], max_windows)
    win = win[idx].long()
    return WindowSet(win[:, :-1].contiguous(), win[:, 1:].contiguous(), file[idx])


@dataclass(frozen=True)
class LMData:
    """The training stream and the tuning and test windows of one model size."""

    train: torch.Tensor
    tune: WindowSet
    test: WindowSet
    n_files: dict

    @property
    def curve(self) -> WindowSet:
        """512 of the test windows, for the loss curves drawn during a run."""
        return self.test.head(512)


def load_data(context: int, *, tune_windows: int, test_windows: int, root=None) -> LMData:
    """:func:`split_files` of the standard library (or of ``root``), the training files
    joined, the tuning and test files cut into windows of ``context`` bytes."""
    parts = split_files(stdlib_files(root))
    return LMData(train=join_files(parts["train"]), tune=window_set(parts["tune"], context, tune_windows),
                  test=window_set(parts["test"], context, test_windows),
                  n_files={k: len(v) for k, v in parts.items()})


def data_for(size: str) -> LMData:
    """:func:`load_data` with the windows of one of :data:`SIZES`."""
    cfg = SIZES[size]
    return load_data(cfg["model"].context, tune_windows=cfg["tune_windows"], test_windows=cfg["test_windows"])


@torch.no_grad()
def window_losses(model: TransformerLM, windows: WindowSet, batch: int = 128) -> torch.Tensor:
    """The mean next-byte loss (nats) of every window, in float64, in eval mode."""
    was = model.training
    model.eval()
    out = []
    for i in range(0, len(windows), batch):
        logits = model(windows.x[i:i + batch])
        nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), windows.y[i:i + batch], reduction="none")
        out.append(nll.double().mean(1))
    model.train(was)
    return torch.cat(out)


def mean_and_se(values: torch.Tensor, file: torch.Tensor) -> tuple[float, float]:
    """The mean of per-window ``values`` and its standard error clustered by ``file``:
    :math:`\\mathrm{SE}^2 = \\frac{F}{F-1}\\sum_f (S_f - n_f\\bar v)^2 / N^2`, with
    :math:`S_f` the sum and :math:`n_f` the count of file :math:`f`'s windows, :math:`F`
    files and :math:`N` windows in all."""
    values = values.double()
    mean = values.mean()
    _, inv = torch.unique(file, return_inverse=True)
    f = int(inv.max()) + 1
    resid = torch.zeros(f, dtype=torch.float64).index_add_(0, inv, values - mean)
    se = math.sqrt(f / max(f - 1, 1) * float((resid ** 2).sum())) / values.numel()
    return float(mean), se


# ----------------------------------------------------------------------------- optimizers
class _Pair:
    """Two optimizers stepped as one (SOAP on the matrices, AdamW on the rest)."""

    def __init__(self, *parts):
        self.parts = parts

    @property
    def param_groups(self):
        return [g for o in self.parts for g in o.param_groups]

    def step(self):
        for o in self.parts:
            o.step()

    def zero_grad(self, set_to_none: bool = True):
        for o in self.parts:
            o.zero_grad(set_to_none=set_to_none)


def build_optimizer(name: str, model: TransformerLM, lr: float, side_lr: Optional[float] = None,
                    knobs: Optional[dict] = None):
    """The optimizer ``name`` on ``model``: the hidden matrices get ``name`` at ``lr``, the
    embeddings, head and gains Adam (no weight decay) at ``side_lr`` (Muon and the
    :data:`TWO_RATES` forms) or ``lr`` (the others, which have one rate). Every param group carries its peak rate as
    ``"peak_lr"``, which :func:`run`'s schedule multiplies. ``knobs`` replace settings of
    :data:`FIXED` (the tuned damping or epsilon of protocol version 3)."""
    if name not in FIXED:
        raise ValueError(f"unknown optimizer {name!r}; choose from {OPTIMIZERS + TWO_RATES}")
    two = len(GRIDS[name]) == 2
    if (side_lr is not None) != two:
        raise ValueError(f"{name!r} takes side_lr={'a rate' if two else 'None'}, got {side_lr!r}")
    h = dict(FIXED[name])
    for k, v in (knobs or {}).items():
        if k not in h:
            raise ValueError(f"{name}: {k!r} is not one of its settings {sorted(h)}")
        h[k] = v
    groups = split_parameters(model, head=model.head)
    matrices = list(groups["matrix"].values())
    rest = [p for k in ("embedding", "head", "vector") for p in groups[k].values()]
    base = name[:-1] if name in TWO_RATES else name
    side = side_lr if two else lr
    if base == "adam":
        opt = torch.optim.AdamW([{"params": matrices, "weight_decay": h["weight_decay"]},
                                 {"params": rest, "weight_decay": 0.0, "lr": side}],
                                lr=lr, betas=h["betas"], eps=h["eps"])
    elif base == "soap":
        from pytorch_optimizer import SOAP  # the reference implementation, not a copy of ours

        opt = _Pair(SOAP(matrices, lr=lr, **h),
                    torch.optim.AdamW(rest, lr=side, betas=FIXED["adam"]["betas"], eps=h["eps"], weight_decay=0.0))
    elif base == "isoadam":
        opt = IsoAdam(model, lr=lr, adam_lr=side, adam_weight_decay=0.0, head=model.head, **h)
    else:
        opt = Muon(model, lr=lr, adam_lr=side_lr, adam_weight_decay=0.0, head=model.head, **h)
    for g in opt.param_groups:
        g["peak_lr"] = g["lr"]
    return opt


def routing(opt) -> list[tuple[str, int, float]]:
    """``(algorithm, number of tensors, peak learning rate)`` of every param group of an
    optimizer made by :func:`build_optimizer` (AdamW's groups named with their weight decay)."""
    out = []
    for o in (opt.parts if isinstance(opt, _Pair) else (opt,)):
        for g in o.param_groups:
            alg = g.get("algorithm") or type(o).__name__
            if "algorithm" not in g and g.get("weight_decay"):
                alg += f", weight decay {g['weight_decay']:g}"
            out.append((alg, len(g["params"]), g["peak_lr"]))
    return out


def lr_factor(step: int, steps: int) -> float:
    """Warm-up over the first 10 % of ``steps``, then cosine decay to 10 % at ``steps``."""
    warmup = max(1, round(WARMUP_FRACTION * steps))
    if step < warmup:
        return (step + 1) / warmup
    t = min(1.0, (step - warmup) / max(1, steps - warmup))
    return MIN_LR_RATIO + (1 - MIN_LR_RATIO) * 0.5 * (1 + math.cos(math.pi * t))


def data_seed(seed: int) -> int:
    """The seed of a run's data order (its weights use ``seed`` itself)."""
    return 100_000 + seed


def run(name: str, lr: float, side_lr: Optional[float], steps: int, seed: int, model_cfg: LMConfig,
        batch: int, data: LMData, *, score_on: str = "tune", curve_points: int = 0,
        reference: Optional[torch.Tensor] = None, knobs: Optional[dict] = None) -> dict:
    """Train a fresh model (weights from ``seed``, data order from :func:`data_seed`) for
    ``steps`` steps and score it on the ``score_on`` windows (``"tune"`` or ``"test"``).

    Returns ``loss`` and ``se`` (clustered by file; ``inf``/``nan`` if the run diverged),
    ``diverged``, ``window_loss`` (per window, float64; for paired comparisons),
    ``curve_step``/``curve_loss`` (``curve_points`` evaluations on :attr:`LMData.curve`),
    ``train_loss`` (every step) and ``seconds`` (the whole run, evaluations included).
    With ``reference`` (another run's ``window_loss`` on the same windows), also
    ``paired_se``: the clustered standard error of the difference."""
    if score_on not in ("tune", "test"):
        raise ValueError(f"score_on must be 'tune' or 'test', got {score_on!r}")
    t0 = time.perf_counter()
    model = TransformerLM(model_cfg, seed=seed)
    opt = build_optimizer(name, model, lr, side_lr, knobs)
    hooks = getattr(opt, "remove_hooks", None)
    gen = generator(data_seed(seed))
    marks = {round(steps * (k + 1) / curve_points) for k in range(curve_points)} if curve_points else set()
    out = {"train_loss": [], "curve_step": [], "curve_loss": [], "diverged": False}
    try:
        for step in range(steps):
            f = lr_factor(step, steps)
            for g in opt.param_groups:
                g["lr"] = g["peak_lr"] * f
            x, y = sample_batch(data.train, batch, model_cfg.context, gen)
            loss = model.loss(x, y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            value = loss.item()
            out["train_loss"].append(value)
            if not math.isfinite(value) or value > 2 * math.log(model_cfg.vocab):
                out["diverged"] = True
                break
            if step + 1 in marks:
                losses = window_losses(model, data.curve)
                out["curve_step"].append(step + 1)
                out["curve_loss"].append(float(losses.mean()))
    finally:
        if hooks is not None:
            hooks()
    windows = data.tune if score_on == "tune" else data.test
    if out["diverged"]:
        out.update(loss=math.inf, se=math.nan, window_loss=None)
    else:
        wl = window_losses(model, windows)
        out["loss"], out["se"] = mean_and_se(wl, windows.file)
        out["window_loss"] = wl
        if not math.isfinite(out["loss"]):
            out.update(loss=math.inf, diverged=True)
        if reference is not None:
            out["paired_se"] = mean_and_se(wl - reference, windows.file)[1]
    out["seconds"] = time.perf_counter() - t0
    return out


# ----------------------------------------------------------------------------- the protocol
@dataclass(frozen=True)
class Trial:
    """One configuration: the learning rate and (Muon only) the Adam side's rate."""

    lr: float
    side_lr: Optional[float] = None


def grid_values(name: str, shift: Optional[Sequence[int]] = None) -> list[list[float]]:
    """The learning rates of each of ``name``'s tuned axes (:data:`GRIDS`), the grid moved by
    ``shift`` spacings per axis (none by default)."""
    shift = shift if shift is not None else [0] * len(GRIDS[name])
    return [[10 ** (first + spacing * (k + s)) for k in range(count)]
            for (first, spacing, count), s in zip(GRIDS[name], shift)]


def grid_trials(name: str, shift: Sequence[int]) -> list[tuple[float, Optional[float]]]:
    """``(lr, side_lr)`` of every trial of ``name``'s grid moved by ``shift``, in the order of
    a search's ``trials``."""
    return [(t.lr, t.side_lr) for t in _grid(name, shift)]


def _grid(name: str, shift: Sequence[int]) -> list[Trial]:
    axes = grid_values(name, shift)
    if len(axes) == 1:
        return [Trial(lr) for lr in axes[0]]
    return [Trial(lr, side) for lr in axes[0] for side in axes[1]]


def _median(values: Sequence[float]) -> float:
    v = sorted(values)
    n = len(v)
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])


def _axis_indices(name: str, trial: int) -> list[int]:
    """A trial's position on each tuned axis (its grid is the product of the axes, the
    matrices' rate outermost, as :func:`_grid` lays it out)."""
    counts = [c for (_, _, c) in GRIDS[name]]
    return [trial] if len(counts) == 1 else [trial // counts[1], trial % counts[1]]


def _edges(name: str, search: dict) -> list[int]:
    """Per tuned axis, -1 / +1 if ``search``'s choice sits on the low / high edge of its
    grid, else 0; every axis -1 when every trial diverged."""
    counts = [c for (_, _, c) in GRIDS[name]]
    best = search["chosen"]
    if best is None:
        return [-1] * len(counts)
    idx = _axis_indices(name, best)
    return [-1 if k == 0 else 1 if k == c - 1 else 0 for k, c in zip(idx, counts)]


def best_of_searches(searches: Sequence[dict]) -> Optional[tuple[int, int]]:
    """``(search, trial)`` of the lowest full-budget tuning loss over *every* search (a later
    search wins a tie), or ``None`` when every promoted trial diverged. A moved grid can
    drop an earlier winner in its first rung, so the last search's choice alone may be
    worse than a setting already run to the end."""
    best = None
    for si, search in enumerate(searches):
        for i, v in search["rung2"].items():
            if math.isfinite(v) and (best is None or v <= best[0]):
                best = (v, si, int(i))
    return None if best is None else best[1:]


def _union_edges(name: str, searches: Sequence[dict], at: Optional[tuple[int, int]]) -> list[int]:
    """Per tuned axis, -1 / +1 if the trial ``at`` (``(search, trial)``) sits on the low / high
    edge of all the values searched on that axis, else 0; every axis -1 when ``at`` is None."""
    counts = [c for (_, _, c) in GRIDS[name]]
    if at is None:
        return [-1] * len(counts)
    si, i = at
    idx = _axis_indices(name, i)
    out = []
    for axis, (k, c) in enumerate(zip(idx, counts)):
        shifts = [s["shift"][axis] for s in searches]
        where = k + searches[si]["shift"][axis]
        out.append(-1 if where == min(shifts) else 1 if where == max(shifts) + c - 1 else 0)
    return out


def tune(name: str, steps: int, *, model_cfg: LMConfig, batch: int, data: LMData, seeds: Sequence[int] = (0,),
         eta: int = 3, max_shifts: int = 2, log: Optional[Callable[[str], None]] = None,
         prior: Optional[Sequence[dict]] = None) -> dict:
    """Choose ``name``'s learning rate(s) for a budget of ``steps`` steps.

    Every trial of the grid (:data:`GRIDS`, nine for every optimizer) first runs ``steps
    // eta`` steps with its own schedule on every tuning seed; the best third (by the
    median tuning loss over ``seeds``) then run all ``steps``, and the best of those is
    the search's choice. A promoted trial that diverges is replaced by the next best of
    the first rung. If the choice sits on an edge of its grid, the grid moves by half its
    width in that direction and the search is repeated (at most ``max_shifts`` times, as
    in Chapter 10, each at the same cost, all recorded). The setting returned is the best
    full-budget trial of all the searches; it is ``interior`` when it lies inside the
    values searched on every axis. ``prior`` are the searches of an
    earlier call with the same arguments and a smaller ``max_shifts`` (runs are
    deterministic, so they are not repeated). Returns the choice, whether it is
    interior, and every rung's trials and scores."""
    short = max(1, steps // eta)
    searches = [dict(s) for s in (prior or [])]
    shift = [0] * len(GRIDS[name])
    if searches:
        shift = [s + e * ((c - 1) // 2) for s, e, (_, _, c) in
                 zip(searches[-1]["shift"], _edges(name, searches[-1]), GRIDS[name])]

    def score(t: Trial, n: int) -> float:
        return _median([run(name, t.lr, t.side_lr, n, s, model_cfg, batch, data)["loss"] for s in seeds])

    while not searches or (any(_edges(name, searches[-1])) and len(searches) <= max_shifts):
        trials = _grid(name, shift)
        keep = math.ceil(len(trials) / eta)
        first = [score(t, short) for t in trials]
        promoted, second = [], {}
        for i in sorted(range(len(trials)), key=lambda i: first[i]):
            if len(promoted) >= keep or not math.isfinite(first[i]):
                break
            second[i] = score(trials[i], steps)
            if math.isfinite(second[i]):
                promoted.append(i)
        best = min(promoted, key=lambda i: second[i]) if promoted else None
        searches.append({"shift": list(shift), "trials": [[t.lr, t.side_lr] for t in trials],
                         "rung_steps": [short, steps], "rung1": first,
                         "rung2": {str(i): v for i, v in second.items()}, "chosen": best})
        if log is not None:
            log(f"{name} T={steps} shift={shift}: " + ("all diverged" if best is None else
                f"chosen {trials[best]} tuning loss {second[best]:.4f}"))
        shift = [s + e * ((c - 1) // 2) for s, e, (_, _, c) in zip(shift, _edges(name, searches[-1]), GRIDS[name])]
    at = best_of_searches(searches)
    if at is None:
        raise RuntimeError(f"every trial of {name} diverged at {steps} steps, even after moving the grid")
    chosen = _grid(name, searches[at[0]]["shift"])[at[1]]
    return {"optimizer": name, "steps": steps, "lr": chosen.lr, "side_lr": chosen.side_lr,
            "tuning_loss": searches[at[0]]["rung2"][str(at[1])], "interior": not any(_union_edges(name, searches, at)),
            "chosen_search": at[0], "searches": searches, "tuning_seeds": list(seeds), "eta": eta}


def heldout(name: str, tuned: dict, seeds: Sequence[int], *, model_cfg: LMConfig, batch: int, data: LMData,
            curve_points: int = 10, references: Optional[dict] = None) -> list[dict]:
    """Run the ``tuned`` setting on ``seeds`` (which played no part in the choice) and score
    each run on the test windows. ``references`` maps a seed to the window losses of the
    baseline's run on that seed, for the paired standard error of the difference."""
    out = []
    for s in seeds:
        ref = None if references is None else references.get(s)
        out.append(run(name, tuned["lr"], tuned["side_lr"], tuned["steps"], s, model_cfg, batch, data,
                       score_on="test", curve_points=curve_points, reference=ref))
    return out


# ----------------------------------------------------------------------------- protocol version 3
#: Chapter 11's share of Part III's protocol (version 3, :data:`isolab.book.engine.tuning.PROTOCOL`),
#: scaled to what one CPU core affords (the full protocol here would take about 14 hours): one
#: budget, the two-rate form of every optimizer with the rest's rate (Adam on the embeddings,
#: head and gains, the same for all four) at 0.1, a shared pilot of the matrices' rate, the
#: damping or epsilon tuned wherever there is one (the library default and a decade either side),
#: the momentum of none, the same 9 + 4 trials for everyone, three tuning seeds with the
#: stability rule, and two sets of five seeds (held-out and fresh) for every verdict. The
#: pilot's span starts at 1e-5: at 1e-4 the 100-step pilot of Adam stopped on the span's end
#: (the 300-step pilots, run first, found their best rates inside it, with the rates below
#: worse, so the wider span leaves their centres where they were).
V3 = {
    "budget": 300, "side_lr": 0.1, "names": ("adam2", "isoadam2", "soap2", "muon"),
    "pilot": {"span": (1e-5, 1e0), "per_decade": 2, "seeds": (0,)}, "range_factor": 6.0,
    "knobs": {"adam2": ("eps", (1e-9, 1e-8, 1e-7)), "soap2": ("eps", (1e-9, 1e-8, 1e-7)),
              "isoadam2": ("damping", (1e-4, 1e-3, 1e-2)), "muon": None},
    "coarse": 9, "refine": 4, "eta": 3, "tuning_seeds": (0, 1, 2),
    "heldout_seeds": (10, 11, 12, 13, 14), "fresh_seeds": (15, 16, 17, 18, 19),
}


def v3_trials(name: str, centre: float) -> list[tuple[dict, float]]:
    """The coarse trials of ``name`` around the pilot's ``centre``: ``(knobs, lr)``, the
    rates log-spaced over ``[centre / f, centre f]``, ``coarse`` in all (an optimizer without
    a damping or epsilon spends them all on the rate)."""
    f = V3["range_factor"]
    spec = V3["knobs"][name]
    combos = [{}] if spec is None else [{spec[0]: v} for v in spec[1]]
    per = V3["coarse"] // len(combos)
    lrs = [centre * f ** (2 * k / (per - 1) - 1) for k in range(per)]
    return [(c, lr) for c in combos for lr in lrs]


def tune_v3(name: str, *, model_cfg: LMConfig, batch: int, data: LMData, pilot_centre: float,
            log: Optional[Callable[[str], None]] = None) -> dict:
    """:data:`V3`'s search for ``name``: the coarse trials (:func:`v3_trials`), each first run
    for a third of the budget on the tuning seeds (median, a divergence on any seed is out),
    the best third run the whole budget; then ``refine`` rates log-spaced strictly between the
    coarse winner's neighbours, searched the same way; the best full-budget trial wins. Every
    trial is recorded; exactly ``coarse + refine`` ran."""
    steps, side, seeds, eta = V3["budget"], V3["side_lr"], V3["tuning_seeds"], V3["eta"]

    def score(knobs, lr, n):
        values = [run(name, lr, side, n, s, model_cfg, batch, data, knobs=knobs)["loss"] for s in seeds]
        return math.inf if not all(math.isfinite(v) for v in values) else _median(values)

    def search(cand, phase):
        first = [score(k, lr, steps // eta) for k, lr in cand]
        keep = math.ceil(len(cand) / eta)
        order = [i for i in sorted(range(len(cand)), key=lambda i: first[i]) if math.isfinite(first[i])]
        second = {}
        for i in order:
            if sum(math.isfinite(v) for v in second.values()) >= keep:
                break
            second[i] = score(*cand[i], steps)
        if log is not None:
            log(f"{name} {phase}: " + ", ".join(f"{c} {lr:.3g}: {first[i]:.4f}" for i, (c, lr) in enumerate(cand)))
        return {"phase": phase, "trials": [[c, lr] for c, lr in cand], "rung1": first,
                "rung2": {str(i): v for i, v in second.items()}}

    coarse = search(v3_trials(name, pilot_centre), "coarse")
    finite = {int(i): v for i, v in coarse["rung2"].items() if math.isfinite(v)}
    if not finite:
        raise RuntimeError(f"{name}: every promoted coarse trial diverged")
    win = min(finite, key=lambda i: finite[i])
    knobs, lr = coarse["trials"][win]
    same = sorted(t[1] for t in coarse["trials"] if t[0] == knobs)
    step = math.log(same[1] / same[0])
    grid = [lr * math.exp(step * (2 * k / (V3["refine"] + 1) - 1)) for k in range(1, V3["refine"] + 1)]
    refine = search([(knobs, x) for x in grid], "refine")
    full = [(v, s, int(i)) for s in (coarse, refine) for i, v in s["rung2"].items() if math.isfinite(v)]
    v, s, i = min(full, key=lambda x: (x[0], x[1]["phase"] == "coarse"))
    chosen_knobs, chosen_lr = s["trials"][i]
    searched = same + grid
    return {"optimizer": name, "steps": steps, "lr": chosen_lr, "side_lr": side, "knobs": chosen_knobs,
            "tuning_loss": v, "interior": min(searched) < chosen_lr < max(searched),
            "knob_interior": V3["knobs"][name] is None or (chosen_knobs[V3["knobs"][name][0]] not in
                                                          (V3["knobs"][name][1][0], V3["knobs"][name][1][-1])),
            "searches": [coarse, refine], "trials_run": len(coarse["trials"]) + len(refine["trials"]),
            "tuning_seeds": list(seeds), "eta": eta}


def pilot_v3(name: str, *, model_cfg: LMConfig, batch: int, data: LMData) -> dict:
    """The shared pilot of :data:`V3`: the matrices' rate over ``span`` (``per_decade`` a
    decade), the rest's at ``side_lr``, the library's other defaults, the whole budget on the
    pilot seeds; the best stable rate is the centre (an end of the span raises)."""
    lo, hi = V3["pilot"]["span"]
    count = int(round(V3["pilot"]["per_decade"] * math.log10(hi / lo))) + 1
    lrs = [lo * (hi / lo) ** (k / (count - 1)) for k in range(count)]
    losses = []
    for lr in lrs:
        values = [run(name, lr, V3["side_lr"], V3["budget"], s, model_cfg, batch, data)["loss"]
                  for s in V3["pilot"]["seeds"]]
        losses.append(math.inf if not all(math.isfinite(v) for v in values) else _median(values))
    best = min(range(count), key=lambda i: losses[i])
    if best in (0, count - 1):
        raise RuntimeError(f"{name}: the pilot's best rate {lrs[best]:.3g} is at an end of its span")
    return {"lrs": lrs, "losses": losses, "centre": lrs[best]}
