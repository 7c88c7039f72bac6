r"""Vectorized training: a whole learning-rate sweep (and several seeds) as one batched computation.

The book's figures retrain small deep linear networks every time a reader moves a slider,
and its headline experiments sweep 30 learning rates per optimizer.  :func:`sweep` runs
every (seed, learning rate) pair as one *lane* of a batched computation: weights are
``(layers, lanes, n, n)``, the forward and backward passes are explicit batched matmuls
that give every layer's input ``X_i`` and output gradient ``G_i`` (what Iso whitens),
and the updates are the optimizers' own rules (:mod:`isolab.rules`, :mod:`isolab.updates`,
:mod:`isolab.linalg`), so a sweep reproduces one-at-a-time ``torch.optim`` runs
(:func:`reference_run`) to floating-point rounding.

- :func:`sweep` -> :class:`isolab.book.results.Sweep`; :func:`sweep_many` -> :class:`isolab.book.results.Results`.
- :data:`DEFAULTS`: each optimizer's hyperparameters (those of :mod:`isolab.optim`).
- :func:`reference_run`, :func:`make_optimizer`: the ``torch.optim`` reference.
- :func:`inverse_sqrt_batched`: batched, warm-started inverse square roots.
- :func:`tune`, :func:`evaluate`: the tuning protocol of Part III
  (:mod:`isolab.book.engine.tuning`): one trial budget for all, held-out seeds;
  :func:`median_interval`, :func:`paired_difference`: its intervals
  (:mod:`isolab.book.engine.intervals`).
- :data:`PAPER_LRS`: learning-rate grids that bracket each optimizer's best rate on the
  paper's deep linear regression.
"""

from __future__ import annotations

import numpy as np

from ..results import Results
from .core import sweep
from .progress import Progress
from .reference import make_optimizer, reference_run
from .roots import inverse_sqrt_batched, whitening_residual
from .rules_lanes import DEFAULTS, OPTIMIZERS, resolve_hyper
from .intervals import median_interval, paired_difference
from .tuning import Tuned, evaluate, trial_grid, tune

__all__ = [
    "sweep", "sweep_many", "DEFAULTS", "OPTIMIZERS", "PAPER_LRS", "paper_lrs", "resolve_hyper",
    "reference_run", "make_optimizer", "inverse_sqrt_batched", "whitening_residual", "Progress",
    "tune", "evaluate", "trial_grid", "Tuned", "median_interval", "paired_difference",
]

#: ``(low, high)`` of a log-spaced learning-rate grid per optimizer for the paper's deep
#: linear regression (``n = 32``, batch 128, ``mse_loss``): wide enough to show each
#: optimizer's best rate and its divergence edge.
PAPER_LRS = {
    "sgd": (1e-4, 1e1),
    "signsgd": (1e-6, 1e-1),
    "adam": (1e-6, 1e-1),
    "muon": (1e-5, 1e0),
    "shampoo": (1e-5, 1e0),
    "iso": (1e-5, 1e0),
    "isoadam": (1e-6, 1e-1),
    "soap": (1e-6, 1e-1),
    "shampoo_graft": (1e-6, 1e-1),
    "kfac": (1e-5, 1e0),
}


def paper_lrs(optimizer: str, count: int = 30) -> np.ndarray:
    """``count`` log-spaced learning rates over :data:`PAPER_LRS` ``[optimizer]``."""
    lo, hi = PAPER_LRS[optimizer]
    return np.logspace(np.log10(lo), np.log10(hi), count)


def sweep_many(problem, optimizers, steps: int, *, lrs=None, count: int = 30, hyper=None, **kw) -> Results:
    """:func:`sweep` for several optimizers; ``lrs``/``hyper`` may be dicts keyed by optimizer
    (default grids: :func:`paper_lrs`)."""
    out = Results()
    for name in optimizers:
        grid = lrs.get(name) if isinstance(lrs, dict) else lrs
        if grid is None:
            grid = paper_lrs(name, count)
        per_optimizer = isinstance(hyper, dict) and hyper and set(hyper) <= set(OPTIMIZERS)
        h = hyper.get(name) if per_optimizer else hyper
        out.add(sweep(problem, name, grid, steps, hyper=h, **kw))
    return out
