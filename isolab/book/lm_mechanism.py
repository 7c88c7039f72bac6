r"""Why Iso's step is the wrong size in the benchmark's language models: the measurements.

Iso's batch step for one layer is ``Ĝ = Cov(X)^{-1/2} (XᵀG/b) Cov(G)^{-1/2}``, whose singular
values are the canonical correlations ``ρᵢ`` of the layer's inputs and output gradients, so
``‖Ĝ‖_F = √Σρᵢ²``. Muon's step has the fixed norm ``√min(n, m) · √max(1, m/n)``. Four
measurements, each a function of a trained run (:func:`trace`):

- :func:`canonical_correlations`: the ``ρᵢ`` of one layer from captured ``X`` and ``G``
  (float64, Iso's relative damping), measured every few steps on fixed held-out batches
  (:func:`probe`), beside the norm of the direction each optimizer actually took,
  ``‖ΔW‖_F/η`` (``η`` the matrices' current rate), and the relative step ``‖ΔW‖_F/‖W‖_F``.
- The statistics' early life (``record_whitening=True``): at every step, how much worse the
  roots the step used whiten the step's own batch than that batch's own damped root would,
  ``‖P Ĉ_b P − I‖_F/√n − ‖P_b Ĉ_b P_b − I‖_F/√n`` on each side (``0`` for fresh roots of
  the batch; grows while the exponential average lags and the roots wait for their
  refresh; the second term is the floor a rank-deficient covariance leaves, e.g. after
  LayerNorm, whose outputs have no component along the all-ones direction), and the
  whitened direction's norm before any later scaling
  (:class:`Recording`, which overrides the library's ``_transform_direction`` hook only
  to read it).
- Per-step training losses of several seeds, for the seed spread (the same seeds and
  settings as the benchmark's held-out runs, so the trajectories are theirs).
- :func:`profile`: where an optimizer's time goes at a given number of tokens per step:
  forward and backward, the statistics formed in the hooks, the inverse roots, applying
  them, and the rest of ``step`` (the library's private ``_record``, ``_root`` and
  ``_whiten`` are wrapped with timers, not changed).
"""

from __future__ import annotations

import gzip
import json
import math
import os
import time
import warnings
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import torch

from isolab.optim import Iso, IsoAdam, split_parameters
from isolab.optim.routing import weight_layouts
from isolab.optim.capture import LayerStatistics, capturable
from . import lm_benchmark as B
from .lm import sample_batch
from .lm_protocol import LMData, data_seed, lr_factor
from .lm_variants import muon_norm
from .seeding import generator

__all__ = ["hidden_layers", "canonical_correlations", "Recording", "probe", "trace", "profile", "spikes", "summarize"]

def read_json(path) -> dict:
    """A results file, plain JSON or gzip-compressed (``.json.gz``: the mechanism's runs keep
    every step of every layer, 10 MB as text, 3 MB compressed)."""
    path = Path(path)
    with (gzip.open(path, "rt") if path.suffix == ".gz" else open(path)) as f:
        return json.load(f)


def write_json(path, obj: dict) -> None:
    """Write ``obj`` to ``path`` atomically (a copy, then a rename), gzip-compressed for ``.gz``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with (gzip.open(tmp, "wt") if path.suffix == ".gz" else open(tmp, "w")) as f:
        json.dump(obj, f, allow_nan=True)
    os.replace(tmp, path)



def hidden_layers(model) -> dict:
    """``{name: (module, n_in, n_out)}`` of the layers whose weights are hidden matrices."""
    matrices = {id(p) for p in split_parameters(model)["matrix"].values()}
    in_out = {id(k) for k, v in weight_layouts(model).items() if v == "in_out"}
    out = {}
    for name, m in model.named_modules():
        w = getattr(m, "weight", None)
        if isinstance(w, torch.Tensor) and id(w) in matrices and capturable(m):
            n_in, n_out = (w.shape[0], w.shape[1]) if id(w) in in_out else (w.shape[1], w.shape[0])
            out[name] = (m, int(n_in), int(n_out))
    return out


def _inv_sqrt(C: torch.Tensor, damping: float) -> torch.Tensor:
    C = C.double()
    shift = damping * torch.trace(C) / C.shape[0]
    e, V = torch.linalg.eigh(C + shift * torch.eye(C.shape[0], dtype=C.dtype))
    return (V * e.clamp_min(1e-300).rsqrt()) @ V.T


def canonical_correlations(X: torch.Tensor, G: torch.Tensor, damping: float = 1e-3) -> torch.Tensor:
    """Singular values of ``(C_X + δ_X)^{-1/2} (XᵀG/b) (C_G + δ_G)^{-1/2}`` (uncentered, as Iso;
    ``δ = damping · tr(C)/dim``), descending, in float64: with ``damping = 0`` and full column
    ranks, the canonical correlations of ``X`` and ``G``, each in ``[0, 1]``."""
    X, G = X.double(), G.double()
    b = X.shape[0]
    M = _inv_sqrt(X.T @ X / b, damping) @ (X.T @ G / b) @ _inv_sqrt(G.T @ G / b, damping)
    return torch.linalg.svdvals(M)


class _Recorder:
    def _transform_direction(self, group, p, d, st):
        st["whitened_norm"] = float(torch.linalg.vector_norm(d))
        return super()._transform_direction(group, p, d, st)


class Recording:
    """``Recording.of(Iso)`` / ``Recording.of(IsoAdam)`` (or a variant's class): the optimizer
    unchanged, except that each step stores the whitened direction's Frobenius norm (before
    the variant's own transformation) in ``state[p]["whitened_norm"]``."""

    @staticmethod
    def of(cls):
        return type(f"Recording{cls.__name__}", (_Recorder, cls), {})


def _batches(data: LMData, n: int, batch: int):
    w = data.test.head(n * batch)
    return [(w.x[i * batch:(i + 1) * batch], w.y[i * batch:(i + 1) * batch]) for i in range(n)]


def probe(model, layers: dict, batches, damping: float = 1e-3) -> dict:
    """Canonical correlations of every layer on ``batches`` (their rows pooled), without
    changing the model or its gradients: ``{name: ρ (descending)}``."""
    saved = {n: p.grad for n, p in model.named_parameters()}
    mods = {n: m for n, (m, _, _) in layers.items()}
    with LayerStatistics(mods, keep=True, dtype=torch.float64) as stats:
        was = model.training
        model.train()
        for x, y in batches:
            B._loss(model, x, y).backward()
        model.train(was)
        out = {n: canonical_correlations(stats.inputs(n), stats.output_grads(n), damping) for n in layers}
    for n, p in model.named_parameters():
        p.grad = saved[n]
    return out


def _matrix_lr(opt, p) -> float:
    for g in opt.param_groups:
        if any(q is p for q in g["params"]):
            return float(g["lr"])
    raise KeyError("parameter not in the optimizer")


def trace(name: str, hyper: dict, steps: int, seed: int, *, arch: str, size: str, data: LMData,
          probe_every: int = 0, probe_batches: int = 4, damping: Optional[float] = None,
          record_whitening: bool = False, overrides: Optional[dict] = None) -> dict:
    """Train as :func:`isolab.book.lm_benchmark.run` does (same model, data order, schedule)
    and record, per step and hidden layer, ``dir_norm = ‖ΔW‖_F/η`` and ``rel_step =
    ‖ΔW‖_F/‖W‖_F``, and the training loss; every ``probe_every`` steps (and at step 0) the
    canonical correlations on ``probe_batches`` fixed batches of test windows
    (``damping``: the run's own, else 1e-3). With ``record_whitening`` (Iso and IsoAdam
    only), also the whitened norm and each side's whitening residual ``‖P Ĉ_b P − I‖_F/√n``
    of the roots each step used, less that of the batch's own root, and whether the step
    refreshed them. ``overrides`` change
    the optimizer's fixed settings (``beta_cov``, ``root_interval``, ``warmup_steps``)."""
    cfg = B.SIZES[size]
    model = B.hf_model(arch, size, seed)
    layers = hidden_layers(model)
    weights = {n: m.weight for n, (m, _, _) in layers.items()}
    opt = B.build(name, model, hyper, steps)
    if record_whitening or overrides:
        cls = type(opt)
        if not isinstance(opt, (Iso, IsoAdam)):
            raise ValueError("record_whitening and overrides need Iso, IsoAdam or a variant of them")
        if hasattr(opt, "remove_hooks"):
            opt.remove_hooks()
        kw = dict(B.FIXED[name])
        kw.update(damping=hyper.get("damping", B.REFERENCE["damping"]),
                  root_interval=hyper.get("root_interval", kw["root_interval"]),
                  warmup_steps=round(hyper.get("warmup_fraction", 0.0) * steps))
        kw.update(overrides or {})
        opt = Recording.of(cls)(model, lr=hyper["lr"], adam_lr=hyper.get("side_lr"), **kw)
        for g in opt.param_groups:
            g["peak_lr"] = g["lr"]
    batch_stats = LayerStatistics({n: m for n, (m, _, _) in layers.items()}, dtype=torch.float64) \
        if record_whitening else None
    probes = _batches(data, probe_batches, cfg["batch"]) if probe_every else None
    delta = hyper.get("damping", 1e-3) if damping is None else damping
    gen = generator(data_seed(seed))
    names = list(layers)
    rec = {"layers": names, "n_in": [layers[n][1] for n in names], "n_out": [layers[n][2] for n in names],
           "muon_norm": [muon_norm(layers[n][1], layers[n][2]) for n in names], "train_loss": [],
           "dir_norm": [], "rel_step": [], "probe_step": [], "rho": [], "whitened_norm": [], "residual_x": [],
           "residual_g": [], "refreshed": []}

    def do_probe(step):
        rho = probe(model, layers, probes, delta)
        rec["probe_step"].append(step)
        rec["rho"].append([rho[n].tolist() for n in names])

    try:
        if probes:
            do_probe(0)
        for step in range(steps):
            f = lr_factor(step, steps)
            for g in opt.param_groups:
                g["lr"] = g["peak_lr"] * f
            x, y = sample_batch(data.train, cfg["batch"], cfg["context"], gen)
            if batch_stats is not None:
                batch_stats.clear()
            before = {n: w.detach().clone() for n, w in weights.items()}
            loss = B._loss(model, x, y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            rec["train_loss"].append(loss.item())
            dn, rs = [], []
            for n, w in weights.items():
                dw = float(torch.linalg.vector_norm(w.detach() - before[n]))
                lr = _matrix_lr(opt, w)
                dn.append(dw / lr if lr > 0 else math.nan)
                rs.append(dw / max(float(torch.linalg.vector_norm(before[n])), 1e-30))
            rec["dir_norm"].append(dn)
            rec["rel_step"].append(rs)
            if batch_stats is not None:
                _whitening(opt, layers, weights, batch_stats, rec, step)
            if not math.isfinite(rec["train_loss"][-1]):
                break
            if probes and (step + 1) % probe_every == 0:
                do_probe(step + 1)
    except (FloatingPointError, torch.linalg.LinAlgError) as e:
        rec["error"] = f"{type(e).__name__}: {str(e)[:300]}"
    finally:
        if hasattr(opt, "remove_hooks"):
            opt.remove_hooks()
        if batch_stats is not None:
            batch_stats.remove()
    return rec


def _residual(P: torch.Tensor, C: torch.Tensor) -> float:
    n = C.shape[0]
    P = P.double()
    return float(torch.linalg.matrix_norm(P @ C @ P - torch.eye(n, dtype=torch.float64)) / math.sqrt(n))


def _used_root(st, group, side, batch):
    """The root the step used: the stored one, else (roots refreshed every step, not kept)
    the one Iso computed from its average, else (no average kept either) the batch's own."""
    if f"root_{side}" in st:
        return st[f"root_{side}"]
    if f"cov_{side}" in st:
        return _inv_sqrt(st[f"cov_{side}"] / (1 - group["beta_cov"] ** st["stat_step"]), group["damping"])
    return _inv_sqrt(batch, group["damping"])


def _whitening(opt, layers, weights, stats, rec, step):
    wn, rx, rg, fr = [], [], [], []
    for n, w in weights.items():
        st = opt.state[w]
        cov = stats.covariances(n)
        g = next(g for g in opt.param_groups if any(q is w for q in g["params"]))
        t = st.get("step", 0)
        if cov is None or t <= g["warmup_steps"]:  # warm-up: no step, no roots used
            wn.append(math.nan), rx.append(math.nan), rg.append(math.nan)
        else:
            cx, cg = cov
            wn.append(st.get("whitened_norm", math.nan))
            rx.append(_residual(_used_root(st, g, "x", cx), cx) - _residual(_inv_sqrt(cx, g["damping"]), cx))
            rg.append(_residual(_used_root(st, g, "g", cg), cg) - _residual(_inv_sqrt(cg, g["damping"]), cg))
        fr.append(bool(t > g["warmup_steps"] and ((t - 1) % g["root_interval"] == 0 or t == g["warmup_steps"] + 1)))
    rec["whitened_norm"].append(wn)
    rec["residual_x"].append(rx)
    rec["residual_g"].append(rg)
    rec["refreshed"].append(fr)


class _Timer:
    def __init__(self):
        self.total = 0.0

    def wrap(self, fn):
        def timed(*args, **kwargs):
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.total += time.perf_counter() - t

        return timed


def profile(names: Sequence[str], hypers: dict, *, arch: str, size: str, data: LMData, rounds: int = 5,
            steps: int = 30, skip: int = 10) -> dict:
    """Per-step milliseconds of each optimizer in ``names`` on ``arch`` at ``size`` (its
    tokens per step: ``batch × context``), in ``rounds`` interleaved rounds of ``steps``
    steps (each optimizer keeps its model and state across rounds and follows the benchmark's
    schedule over all of them; the first ``skip`` steps are not counted). Components: ``fwd_bwd`` (statistics hooks
    included), ``statistics`` (the Gram matrices formed in the hooks), ``step``, ``roots``
    (inverse roots), ``apply`` (multiplying by the roots), ``step_rest`` (``step`` less
    those two: moments, momentum, polar factors, bookkeeping) and ``total``. Returns
    ``{name: {component: [ms per step, one value per round]}}``."""
    cfg = B.SIZES[size]
    runs = {}
    for n in names:
        model = B.hf_model(arch, size, 0)
        opt = B.build(n, model, hypers[n], 10**6)
        timers = {k: _Timer() for k in ("statistics", "roots", "apply")}
        if isinstance(opt, (Iso, IsoAdam)):
            opt.statistics._record = timers["statistics"].wrap(opt.statistics._record)
            opt._root = timers["roots"].wrap(opt._root)
            opt._whiten = timers["apply"].wrap(opt._whiten)
        runs[n] = (model, opt, timers, generator(data_seed(0)))
    out = {n: {k: [] for k in ("fwd_bwd", "statistics", "step", "roots", "apply", "step_rest", "total")}
           for n in names}
    total, done = skip + rounds * steps, {n: 0 for n in names}
    for r in range(rounds + 1):
        for n in names:
            model, opt, timers, gen = runs[n]
            for t in timers.values():
                t.total = 0.0
            fb = st = 0.0
            count = skip if r == 0 else steps
            for _ in range(count):
                f = lr_factor(done[n], total)
                for g in opt.param_groups:
                    g["lr"] = g["peak_lr"] * f
                done[n] += 1
                x, y = sample_batch(data.train, cfg["batch"], cfg["context"], gen)
                t0 = time.perf_counter()
                B._loss(model, x, y).backward()
                t1 = time.perf_counter()
                opt.step()
                opt.zero_grad(set_to_none=True)
                t2 = time.perf_counter()
                fb, st = fb + t1 - t0, st + t2 - t1
            if r == 0:
                continue
            ms = {k: 1000 * t.total / count for k, t in timers.items()}
            row = out[n]
            row["fwd_bwd"].append(1000 * fb / count)
            row["step"].append(1000 * st / count)
            row["statistics"].append(ms["statistics"])
            row["roots"].append(ms["roots"])
            row["apply"].append(ms["apply"])
            row["step_rest"].append(1000 * st / count - ms["roots"] - ms["apply"])
            row["total"].append(1000 * (fb + st) / count)
    for model, opt, _, _ in runs.values():
        if hasattr(opt, "remove_hooks"):
            opt.remove_hooks()
    return out


def spikes(train_loss: Sequence[float], window: int = 50, height: float = 0.3, start: int = 20) -> dict:
    """Loss spikes of one run: steps (after ``start``) whose training loss exceeds the minimum
    of the previous ``window`` steps by more than ``height`` nats; their count, the largest
    excess and its step."""
    x = np.asarray(train_loss, dtype=np.float64)
    best, at, count = 0.0, None, 0
    for t in range(max(start, 1), x.size):
        excess = x[t] - x[max(0, t - window):t].min()
        if excess > height:
            count += 1
        if excess > best:
            best, at = float(excess), t + 1
    return {"count": count, "largest": best, "at": at}


def _windows(values, bounds):
    """Means of ``values`` (one per step) over the 1-based step windows ``bounds``."""
    x = np.asarray(values, dtype=np.float64)
    out = []
    for lo, hi in bounds:
        seg = x[lo - 1:min(hi, x.size)]
        seg = seg[np.isfinite(seg)]
        out.append(float(seg.mean()) if seg.size else math.nan)
    return out


def _rank_corr(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.size < 3 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return math.nan
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def summarize(runs: dict) -> dict:
    """The numbers the mechanism's runs (``results/lm_mechanism.json.gz``'s ``runs``) stand for.

    ``norms``: per run, Iso's batch-step norm on the probes relative to Muon's,
    ``√Σρ²/√min(n,m)·√max(1,m/n)`` (median over layers, at each probe step), the largest
    ``ρ`` (median over layers), and the direction norm ``‖ΔW‖/η`` relative to Muon's and the
    relative step ``‖ΔW‖/‖W‖`` (medians over layers, means over steps 1–25, 26–300 and
    301–end). ``early``: per run, the whitening lag (median over layers, mean over steps
    2–end) on each side and the whitened norm relative to Muon's norm, and the last 20
    steps' training loss. ``seeds``: per optimizer and budget, per seed the last 20 steps'
    loss, the spikes and the largest relative step, with the rank correlation over seeds
    between the loss and each. ``profile``: each component's median over rounds (ms)."""
    out = {"norms": {}, "early": {}, "seeds": {}, "profile": {}}
    for key, r in runs.items():
        kind = key.split("/")[0]
        if kind == "norms":
            mn = np.asarray(r["muon_norm"])
            root = [float(np.median([math.sqrt(sum(v * v for v in rho)) for rho in layer_rho] / mn))
                    for layer_rho in r["rho"]]
            top = [float(np.median([rho[0] for rho in layer_rho])) for layer_rho in r["rho"]]
            steps = len(r["dir_norm"])
            bounds = [(1, 25), (26, 300), (301, steps)]
            dn = np.median(np.asarray(r["dir_norm"], dtype=np.float64) / mn, axis=1)
            rs = np.median(np.asarray(r["rel_step"], dtype=np.float64), axis=1)
            out["norms"][key] = {"probe_step": r["probe_step"], "iso_norm_over_muon": root, "top_rho": top,
                                 "dir_norm_over_muon": _windows(dn, bounds), "rel_step": _windows(rs, bounds),
                                 "windows": bounds, "hyper": r["hyper"]}
        elif kind == "early":
            mn = np.asarray(r["muon_norm"])
            steps = len(r["train_loss"])
            with warnings.catch_warnings():   # steps before the first statistics are all NaN
                warnings.simplefilter("ignore", RuntimeWarning)
                lag_x = np.nanmedian(np.asarray(r["residual_x"], dtype=np.float64), axis=1)
                lag_g = np.nanmedian(np.asarray(r["residual_g"], dtype=np.float64), axis=1)
                wn = np.nanmedian(np.asarray(r["whitened_norm"], dtype=np.float64) / mn, axis=1)
            out["early"][key] = {"lag_x": _windows(lag_x, [(2, steps)])[0], "lag_g": _windows(lag_g, [(2, steps)])[0],
                                 "whitened_over_muon": _windows(wn, [(1, 25), (26, steps)]),
                                 "last_loss": _windows(r["train_loss"], [(max(1, steps - 19), steps)])[0],
                                 "overrides": r.get("overrides")}
        elif kind == "seeds":
            _, arch, name, T, seed = key.split("/")
            cell = out["seeds"].setdefault(f"{arch}/{name}/{T}", {"seed": [], "last_loss": [], "spikes": [],
                                                                    "largest_spike": [], "max_rel_step": []})
            n = len(r["train_loss"])
            cell["seed"].append(int(seed))
            cell["last_loss"].append(_windows(r["train_loss"], [(max(1, n - 19), n)])[0])
            cell["spikes"].append(r["spikes"]["count"])
            cell["largest_spike"].append(r["spikes"]["largest"])
            cell["max_rel_step"].append(float(np.nanmax(r["max_rel_step"])))
        elif kind == "profile":
            out["profile"][key] = {"tokens_per_step": r["tokens_per_step"],
                                   "ms": {n: {k: float(np.median(v)) for k, v in comp.items()}
                                          for n, comp in r["ms"].items()}}
    for cell in out["seeds"].values():
        cell["corr_loss_spike"] = _rank_corr(cell["last_loss"], cell["largest_spike"])
        cell["corr_loss_rel_step"] = _rank_corr(cell["last_loss"], cell["max_rel_step"])
    return out
