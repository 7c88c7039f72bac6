r"""One learning rate at a time through the ``torch.optim`` optimizers: the reference the engine must match."""

from __future__ import annotations

import math
from typing import Optional

import numpy as np
import torch

from isolab.optim import Iso, IsoAdam, Muon, Shampoo, SignSGD
from ..problems import LinearProblem
from .rules_lanes import resolve_hyper

__all__ = ["make_optimizer", "reference_run", "REFERENCED"]

#: The engine optimizers with a one-at-a-time ``torch.optim`` reference (:func:`make_optimizer`);
#: ``kfac`` has none; it is tested against a per-layer loop.
REFERENCED = ("sgd", "signsgd", "adam", "muon", "shampoo", "iso", "isoadam", "soap", "shampoo_graft")


def make_optimizer(name: str, model: torch.nn.Module, lr: float, hyper: Optional[dict] = None, stats_dtype=None):
    """The ``torch.optim`` optimizer that engine optimizer ``name`` reproduces, on ``model``
    (for ``"soap"``: pytorch-optimizer's ``SOAP``, the well-kept reference implementation)."""
    h = resolve_hyper(name, hyper)
    sd = stats_dtype or next(model.parameters()).dtype
    if name == "sgd":
        return torch.optim.SGD(model.parameters(), lr=lr, momentum=h["momentum"], nesterov=h["nesterov"],
                               weight_decay=h["weight_decay"])
    if name == "signsgd":
        return SignSGD(model.parameters(), lr=lr, momentum=h["momentum"], weight_decay=h["weight_decay"])
    if name == "adam":
        if h["weight_decay"]:
            return torch.optim.AdamW(model.parameters(), lr=lr, betas=h["betas"], eps=h["eps"],
                                     weight_decay=h["weight_decay"])
        return torch.optim.Adam(model.parameters(), lr=lr, betas=h["betas"], eps=h["eps"])
    if name == "muon":
        return Muon(model, lr=lr, momentum=h["momentum"], nesterov=h["nesterov"], ns_steps=h["ns_steps"],
                    exact=h["exact"], weight_decay=h["weight_decay"])
    if name == "shampoo":
        return Shampoo(model, lr=lr, momentum=h["momentum"], beta=h["beta"], damping=h["damping"],
                       root_interval=h["root_interval"], weight_decay=h["weight_decay"], stats_dtype=sd)
    if name == "shampoo_graft":  # exponential factors: a decayed sum, the same direction after grafting
        return Shampoo(model, lr=lr, beta=h["betas"][1], damping=h["damping"], root_interval=h["root_interval"],
                       weight_decay=h["weight_decay"], stats_dtype=sd, momentum=h["betas"][0], graft="adam",
                       graft_beta2=h["betas"][1], graft_eps=h["graft_eps"])
    if name == "soap":
        try:
            from pytorch_optimizer import SOAP
        except ImportError as error:  # a test-only dependency (requirements.txt), not the library's
            raise ImportError("the reference for the engine's 'soap' lanes is pytorch-optimizer's SOAP: "
                              "pip install pytorch-optimizer") from error
        return SOAP(model.parameters(), lr=lr, betas=h["betas"], shampoo_beta=h["shampoo_beta"], eps=h["eps"],
                    precondition_frequency=h["precondition_frequency"], weight_decay=h["weight_decay"])
    common = dict(beta_cov=h["beta_cov"], damping=h["damping"], stat_interval=1, stat_rows=h["stat_rows"],
                  root_interval=h["root_interval"],
                  root_method=h["root_method"], root_tol=h["root_tol"], weight_decay=h["weight_decay"],
                  stats_dtype=sd)
    if name == "iso":
        return Iso(model, lr=lr, momentum=h["momentum"], nesterov=h["nesterov"], shrinkage=h["shrinkage"],
                   momentum_placement=h["momentum_placement"], **common)
    if name == "isoadam":
        return IsoAdam(model, lr=lr, betas=h["betas"], eps=h["eps"], shrinkage=h["shrinkage"], **common)
    raise ValueError(f"engine optimizer {name!r} has no torch.optim reference; those that do: {REFERENCED}")


def reference_run(problem: LinearProblem, optimizer: str, lr: float, steps: int, *, seed: int = 0,
                  hyper: Optional[dict] = None, dtype=torch.float64, max_loss: Optional[float] = None) -> dict:
    """Train ``problem.reference_model`` with the ``torch.optim`` optimizer on the raw batches.

    Returns ``{"loss": (steps+1,), "weight_norm": (steps+1, layers), "weights": (layers, n, n),
    "diverged_at": int}`` (-1 if it never diverged); after a divergence (non-finite loss or
    gradient, or loss above ``max_loss``) the remaining losses are NaN.
    """
    model = problem.reference_model(problem.initial_weights(seed).to(dtype))
    opt = make_optimizer(optimizer, model, lr, hyper)
    losses = np.full(steps + 1, math.nan)
    norms = np.full((steps + 1, problem.depth), math.nan)
    diverged_at = -1
    try:
        for t in range(steps + 1):
            X, T = problem.batch(t, seed)
            loss = problem.reference_loss(model(X.to(dtype)), T.to(dtype))
            losses[t] = float(loss.detach())
            with torch.no_grad():
                norms[t] = [float(torch.linalg.matrix_norm(m.weight)) for m in model]
            if not math.isfinite(losses[t]) or (max_loss is not None and losses[t] > max_loss):
                diverged_at = t
                break
            if t == steps:
                break
            opt.zero_grad()
            loss.backward()
            try:
                opt.step()
            except FloatingPointError:
                diverged_at = t
                break
    finally:
        if hasattr(opt, "remove_hooks"):
            opt.remove_hooks()
    return {"loss": losses, "weight_norm": norms, "weights": problem.weights_of(model), "diverged_at": diverged_at}
