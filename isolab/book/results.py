r"""Results of learning-rate sweeps: labelled NumPy arrays, lossless save/load, standard plots.

A :class:`Sweep` is one optimizer over a grid of learning rates and seeds; a
:class:`Results` is an ordered collection of sweeps keyed by label (usually the optimizer
name).  Arrays are indexed ``[seed, lr, step]`` (``[seed, lr, step, layer]`` for weight
norms); step ``t`` means "after ``t`` updates", so ``loss[..., 0]`` is the initial loss
and ``loss[..., -1]`` the loss after the last iteration.  Losses are NaN after a lane
diverged (``diverged_at >= 0``, the step at which the divergence was detected; its loss
there is recorded as measured, possibly ``inf``) or was retired at the threshold.

``save(path)`` writes one ``.npz`` (arrays bit for bit) with the metadata (hyperparameters,
problem, run information) as JSON inside it; ``load(path)`` gives back equal objects.

Plots take a Matplotlib ``Axes`` and return it: :func:`plot_sweep` (final loss or
iterations to threshold against learning rate, log axes, diverged learning rates marked
at the top), :func:`plot_weight_norm` and :func:`plot_loss_curves` (against step).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional, Union

import numpy as np

__all__ = ["Sweep", "Results", "save", "load", "plot_sweep", "plot_weight_norm", "plot_loss_curves",
           "OutcomeAgreement", "compare_outcomes", "edge_of_divergence"]

_ARRAYS = ("lrs", "seeds", "loss", "weight_norm", "diverged_at", "hit_at", "threshold", "weights", "expected_loss",
           "step_norm")
_META = ("optimizer", "label", "hyper", "problem", "info")


@dataclass
class Sweep:
    """One optimizer over ``lrs x seeds``; see the module docstring for the conventions."""

    optimizer: str
    label: str
    lrs: np.ndarray  # (L,)
    seeds: np.ndarray  # (S,)
    loss: np.ndarray  # (S, L, steps+1)
    weight_norm: Optional[np.ndarray]  # (S, L, steps+1, layers) or None
    diverged_at: np.ndarray  # (S, L) int, -1: never
    hit_at: np.ndarray  # (S, L) int, -1: never reached the threshold
    threshold: np.ndarray  # (S, L) absolute threshold per lane (NaN: none)
    weights: Optional[np.ndarray] = None  # (S, L, layers, n, n) final weights (row convention) or None
    hyper: dict = field(default_factory=dict)
    problem: dict = field(default_factory=dict)
    info: dict = field(default_factory=dict)
    #: (S, L, steps+1) the exact expected loss (over the input distribution, not the batch)
    #: at the steps where it was computed, NaN elsewhere; None when not recorded
    expected_loss: Optional[np.ndarray] = None
    #: (S, L, steps, layers) the Frobenius norm of every update, ``||W_{t+1} - W_t||_F``, per
    #: layer (NaN after a lane stops); None when not recorded
    step_norm: Optional[np.ndarray] = None

    @property
    def steps(self) -> int:
        return self.loss.shape[-1] - 1

    @property
    def diverged(self) -> np.ndarray:
        """``(S, L)`` bool."""
        return self.diverged_at >= 0

    def final_loss(self, diverged: float = np.inf) -> np.ndarray:
        """``(S, L)``: loss after the last step; ``diverged`` for lanes that diverged."""
        out = self.loss[..., -1].copy()
        out[self.diverged] = diverged
        return out

    def iterations(self, never: float = np.inf) -> np.ndarray:
        """``(S, L)`` float: iterations to the threshold; ``never`` if not reached (or diverged first)."""
        out = self.hit_at.astype(np.float64)
        out[self.hit_at < 0] = never
        return out

    def total_weight_norm(self) -> np.ndarray:
        """``(S, L, steps+1)``: ``sqrt(sum_i ||W_i||_F^2)``, computed as
        ``m * sqrt(sum_i (||W_i||/m)^2)`` with ``m`` the largest layer norm, so that
        exploding runs (norms past 1e154) give their norm, not an overflow."""
        if self.weight_norm is None:
            raise ValueError("this sweep was run with record_norms=False")
        norms = self.weight_norm
        with np.errstate(invalid="ignore", divide="ignore"):
            largest = np.max(norms, axis=-1, keepdims=True)
            scaled = np.where(largest > 0, norms / np.where(largest > 0, largest, 1.0), 0.0)
            total = largest[..., 0] * np.sqrt(np.sum(scaled**2, axis=-1))
        return total

    def metric(self, name: str) -> np.ndarray:
        """``"final_loss"`` or ``"iterations"`` as ``(S, L)``."""
        if name == "final_loss":
            return self.final_loss()
        if name == "iterations":
            return self.iterations()
        raise ValueError(f"metric must be 'final_loss' or 'iterations', got {name!r}")

    def best(self, metric: str = "final_loss") -> tuple[float, float]:
        """``(lr, value)`` minimizing the median over seeds of ``metric``."""
        m = np.median(self.metric(metric), axis=0)
        i = int(np.argmin(np.where(np.isnan(m), np.inf, m)))
        return float(self.lrs[i]), float(m[i])

    def index(self, lr: float) -> int:
        """Index of the learning rate nearest to ``lr`` (in log scale)."""
        return int(np.argmin(np.abs(np.log(np.maximum(self.lrs, 1e-300)) - np.log(max(lr, 1e-300)))))

    def __eq__(self, other) -> bool:
        if not isinstance(other, Sweep):
            return NotImplemented
        for k in _ARRAYS:
            a, b = getattr(self, k), getattr(other, k)
            if (a is None) != (b is None):
                return False
            if a is not None and not (a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True)):
                return False
        return all(_json_equal(getattr(self, k), getattr(other, k)) for k in _META)


def _json_equal(a, b) -> bool:
    return json.dumps(_encode(a), sort_keys=True) == json.dumps(_encode(b), sort_keys=True)


def _encode(x):
    """JSON-ready form that keeps tuples and non-finite floats distinguishable."""
    if isinstance(x, tuple):
        return {"__tuple__": [_encode(v) for v in x]}
    if isinstance(x, list):
        return [_encode(v) for v in x]
    if isinstance(x, dict):
        return {str(k): _encode(v) for k, v in x.items()}
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return float(x)
    return x


def _decode(x):
    if isinstance(x, dict):
        if set(x) == {"__tuple__"}:
            return tuple(_decode(v) for v in x["__tuple__"])
        return {k: _decode(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_decode(v) for v in x]
    return x


class Results:
    """An ordered collection of :class:`Sweep` keyed by label; ``results["iso"]``, ``for s in results``."""

    def __init__(self, sweeps: Union[Iterable[Sweep], dict, None] = None):
        self.sweeps: dict[str, Sweep] = {}
        if isinstance(sweeps, dict):
            sweeps = sweeps.values()
        for s in sweeps or ():
            self.add(s)

    def add(self, sweep: Sweep) -> "Results":
        if sweep.label in self.sweeps:
            raise ValueError(f"a sweep labelled {sweep.label!r} is already in the results")
        self.sweeps[sweep.label] = sweep
        return self

    def __getitem__(self, label: str) -> Sweep:
        return self.sweeps[label]

    def __iter__(self):
        return iter(self.sweeps.values())

    def __len__(self):
        return len(self.sweeps)

    @property
    def labels(self) -> list[str]:
        return list(self.sweeps)

    def __eq__(self, other):
        if not isinstance(other, Results):
            return NotImplemented
        return self.labels == other.labels and all(a == b for a, b in zip(self, other))

    def summary(self, metric: str = "final_loss") -> list[dict]:
        """One row per sweep: best learning rate and its median ``metric``, number diverged."""
        rows = []
        for s in self:
            lr, v = s.best(metric)
            rows.append({"label": s.label, "best_lr": lr, metric: v, "diverged": int(s.diverged.sum()),
                         "lanes": int(s.diverged.size)})
        return rows

    # -- persistence --------------------------------------------------------------------
    def save(self, path: Union[str, Path]) -> Path:
        """Write every sweep to one ``.npz`` (arrays exact, metadata as JSON inside)."""
        path = Path(path)
        arrays, meta = {}, {"format": "isolab.results/1", "labels": self.labels, "sweeps": {}}
        for i, s in enumerate(self):
            meta["sweeps"][s.label] = {k: _encode(getattr(s, k)) for k in _META}
            for k in _ARRAYS:
                a = getattr(s, k)
                if a is not None:
                    arrays[f"s{i}.{k}"] = a
        arrays["__meta__"] = np.array(json.dumps(meta))
        with open(path, "wb") as f:
            np.savez_compressed(f, **arrays)   # the JSON metadata (every trial) compresses tenfold
        return path

    @classmethod
    def load(cls, path: Union[str, Path]) -> "Results":
        with np.load(Path(path), allow_pickle=False) as z:
            meta = json.loads(str(z["__meta__"]))
            if meta.get("format") != "isolab.results/1":
                raise ValueError(f"{path}: not an isolab results file")
            out = cls()
            for i, label in enumerate(meta["labels"]):
                m = {k: _decode(v) for k, v in meta["sweeps"][label].items()}
                arrs = {k: (z[f"s{i}.{k}"].copy() if f"s{i}.{k}" in z.files else None) for k in _ARRAYS}
                out.add(Sweep(**m, **arrs))
        return out


def save(results: Union[Results, Sweep], path) -> Path:
    """Save a :class:`Results` (or a single :class:`Sweep`) to ``path`` (``.npz``)."""
    if isinstance(results, Sweep):
        results = Results([results])
    return results.save(path)


def load(path) -> Results:
    """Load what :func:`save` wrote."""
    return Results.load(path)


# ----------------------------------------------------------------------------- plots
def _as_results(r) -> Results:
    return Results([r]) if isinstance(r, Sweep) else r


def plot_sweep(ax, results, metric: str = "final_loss", labels=None, reduce: str = "median",
               mark_best: bool = True, mark_diverged: bool = True, **line_kw):
    """``metric`` (``"final_loss"`` or ``"iterations"``) against learning rate, log-log, one line per sweep.

    Several seeds are reduced by their ``reduce`` (``"median"``, ``"mean"``, ``"min"``,
    ``"max"``).  Learning rates where a lane diverged (or never reached the threshold)
    are drawn as ``x`` markers along the top edge, in the sweep's colour; the best
    learning rate gets a dot. ``line_kw`` styles the line (e.g.
    ``**isolab.book.figures.style.line("Adam")``: its marker and label replace the defaults).
    """
    import matplotlib.transforms as mtransforms

    reducer = {"median": np.median, "mean": np.mean, "min": np.min, "max": np.max}[reduce]
    results = _as_results(results)
    top = mtransforms.blended_transform_factory(ax.transData, ax.transAxes)
    for s in results:
        if labels is not None and s.label not in labels:
            continue
        v = reducer(s.metric(metric), axis=0)
        finite = np.isfinite(v)
        (line,) = ax.plot(s.lrs[finite], v[finite], **{"marker": ".", "label": s.label, **line_kw})
        if mark_diverged and (~finite).any():
            ax.plot(s.lrs[~finite], np.full((~finite).sum(), 0.98), "x", color=line.get_color(), transform=top,
                    clip_on=False)
        if mark_best and finite.any():
            lr, best = s.best(metric)
            if np.isfinite(best):
                ax.plot([lr], [best], "o", color=line.get_color(), ms=7, mfc="none")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("learning rate")
    ax.set_ylabel({"final_loss": "loss after training", "iterations": "iterations to threshold"}[metric])
    return ax


def _lr_indices(sweep: Sweep, lrs) -> list[int]:
    if lrs is None:
        return list(range(sweep.lrs.size))
    return [sweep.index(lr) for lr in np.atleast_1d(lrs)]


def plot_weight_norm(ax, sweep: Sweep, lrs=None, layer: Optional[int] = None, seed_index: int = 0, **line_kw):
    """Weight norm against step (log y) for the learning rates ``lrs`` (nearest in the grid; all by default).

    ``layer=None``: the total norm ``sqrt(sum_i ||W_i||_F^2)``; otherwise that layer's.
    """
    norms = sweep.total_weight_norm() if layer is None else sweep.weight_norm[..., layer]
    steps = np.arange(sweep.steps + 1)
    for i in _lr_indices(sweep, lrs):
        ax.plot(steps, norms[seed_index, i], label=f"{sweep.label} lr={sweep.lrs[i]:.3g}", **line_kw)
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("weight norm" if layer is None else f"||W_{layer + 1}||_F")
    return ax


def plot_loss_curves(ax, sweep: Sweep, lrs=None, seed_index: int = 0, **line_kw):
    """Loss against step (log y) for the learning rates ``lrs`` (nearest in the grid; all by default)."""
    steps = np.arange(sweep.steps + 1)
    for i in _lr_indices(sweep, lrs):
        ax.plot(steps, sweep.loss[seed_index, i], label=f"{sweep.label} lr={sweep.lrs[i]:.3g}", **line_kw)
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    return ax


# ------------------------------------------------------------ reproducing a saved sweep
@dataclass(frozen=True)
class OutcomeAgreement:
    """How a rerun's lanes compare with saved ones (see :func:`compare_outcomes`)."""

    same_outcomes: bool
    #: lanes whose outcome differs (converged / diverged / neither within the horizon)
    mismatched: tuple
    #: largest ``|step - saved step| / saved step`` over lanes that converged in both
    max_relative_step_gap: float

    def describe(self) -> str:
        if not self.same_outcomes:
            return f"outcomes differ in lanes {list(self.mismatched)}"
        return f"steps {100 * self.max_relative_step_gap:.0f}% apart"


def compare_outcomes(hit_at, diverged_at, saved_hit_at, saved_diverged_at, horizon: int) -> OutcomeAgreement:
    r"""Compare a rerun of some lanes with the saved sweep, as far as rounding allows.

    Each lane's *outcome* within ``horizon`` steps is "converged" (``hit_at`` in
    ``[0, horizon]``), "diverged" or "neither"; a step of ``-1`` or beyond the horizon
    counts as not happening. A float32 rerun on another CPU rounds its sums differently,
    which moves a threshold crossing by a few steps and the blow-up step of an unstable
    lane by more, but does not change what happens to a lane unless it sits at the edge.
    So the outcomes must match exactly, and the steps to converge are compared
    relatively (:attr:`OutcomeAgreement.max_relative_step_gap`).
    """
    if not (isinstance(horizon, int) and horizon > 0):
        raise ValueError(f"horizon must be a positive int, got {horizon!r}")
    arrays = [np.asarray(a) for a in (hit_at, diverged_at, saved_hit_at, saved_diverged_at)]
    if len({a.shape for a in arrays}) != 1:
        raise ValueError(f"all four step arrays must have one shape, got {[a.shape for a in arrays]}")
    within = [(a >= 0) & (a <= horizon) for a in arrays]
    outcome = 2 * within[0] + within[1]
    saved = 2 * within[2] + within[3]
    mismatched = tuple(int(i) for i in np.flatnonzero(outcome != saved))
    both = within[0] & within[2]
    gaps = np.abs(arrays[0][both] - arrays[2][both]) / np.maximum(arrays[2][both], 1)
    return OutcomeAgreement(not mismatched, mismatched, float(gaps.max()) if gaps.size else 0.0)


def edge_of_divergence(diverged) -> np.ndarray:
    """Lanes at the edge of stability: not diverged, but the next larger learning rate
    (the next entry along the last axis, rates ascending) diverged. Their losses are
    chaotic -- a float32 rerun on another CPU can land a few percent away, or blow up
    further -- so reproductions compare only their outcome."""
    diverged = np.asarray(diverged, dtype=bool)
    edge = np.zeros_like(diverged)
    edge[..., :-1] = ~diverged[..., :-1] & diverged[..., 1:]
    return edge
