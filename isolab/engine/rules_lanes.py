r"""The seven optimizers as vectorized *lane rules*: one update for every lane of a sweep.

Shapes: weights ``W`` and gradients ``g`` are ``(layers, lanes, out, in)`` in torch's
layout (``nn.Linear.weight``, the transpose of the book's row-convention ``W``;
``g = G^T X`` with the loss's ``1/b`` inside ``G``, i.e. exactly ``weight.grad``); the
learning rate is a tensor ``(1, lanes, 1, 1)``.  Every piece of
arithmetic is a call into :mod:`isolab.rules` (stateful rules), :mod:`isolab.updates`
(``two_sided``) or :mod:`isolab.linalg` -- the same functions the ``torch.optim``
optimizers of :mod:`isolab.optim` call, on tensors in the same layout, so that the order
of operations is the optimizer's (Muon's Newton--Schulz, Shampoo's ``L^{-1/4} g R^{-1/4}``
and Iso's ``P_G g P_X`` included).

Hyperparameters and their defaults are the optimizers' (:data:`DEFAULTS`):
``sgd`` = ``torch.optim.SGD``, ``signsgd`` = :class:`isolab.optim.SignSGD`, ``adam`` =
``torch.optim.Adam`` (``torch.optim.AdamW`` with ``weight_decay``), ``muon``,
``shampoo``, ``iso``, ``isoadam`` = :mod:`isolab.optim`'s (Iso and IsoAdam with
``stat_interval=1`` and no warm-up; ``root_method`` ``"eigh"`` or ``"newton"``, the
latter with the batched tracking of :mod:`isolab.engine.roots`).

Every state tensor has the lane dimension at position 1, so the engine can drop lanes
(diverged or retired) with one ``index_select`` per tensor.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from .. import linalg, rules, updates
from .roots import inverse_sqrt_batched

__all__ = ["DEFAULTS", "OPTIMIZERS", "make_rule", "LaneRule"]

DEFAULTS: dict[str, dict] = {
    "sgd": dict(momentum=0.0, nesterov=False, weight_decay=0.0),
    "signsgd": dict(momentum=0.0, weight_decay=0.0),
    "adam": dict(betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0),
    "muon": dict(momentum=0.95, nesterov=True, ns_steps=5, exact=False, weight_decay=0.0),
    "shampoo": dict(beta=1.0, damping=1e-6, root_interval=10, weight_decay=0.0),
    "iso": dict(momentum=0.95, nesterov=True, beta_cov=0.95, damping=1e-3, root_interval=10,
                root_method="eigh", root_tol=None, root_fallback="auto", weight_decay=0.0),
    "isoadam": dict(betas=(0.9, 0.999), eps=1e-8, beta_cov=0.95, damping=1e-3, root_interval=10,
                    root_method="eigh", root_tol=None, root_fallback="auto", weight_decay=0.0),
}

#: Names accepted by :func:`isolab.engine.sweep`.
OPTIMIZERS = tuple(DEFAULTS)


class LaneRule:
    """Base: ``statistics`` (per-step quantities to check for finiteness) then ``apply``."""

    name = ""

    def __init__(self, hyper: dict):
        self.h = hyper
        self.root_stats: dict = {}
        #: the true batch size b (set by the engine): Iso divides ``W.grad`` by it
        self.batch = 1

    def init_state(self, W: Tensor) -> dict:
        return {}

    def statistics(self, Xs: Tensor, Gs: Tensor, b: int) -> dict:
        """Extra per-step tensors (lane dim 1) the update needs; checked finite per lane."""
        return {}

    def apply(self, W: Tensor, g: Tensor, stats: dict, lr: Tensor, t: int, state: dict) -> None:  # pragma: no cover
        raise NotImplementedError


class SGDRule(LaneRule):
    name = "sgd"

    def init_state(self, W):
        return {"buf": torch.zeros_like(W)} if self.h["momentum"] else {}

    def apply(self, W, g, stats, lr, t, state):
        h = self.h
        d = rules.heavy_ball_(state.get("buf"), g, W, h["momentum"], h["nesterov"], h["weight_decay"])
        rules.descend_(W, d, lr)


class SignSGDRule(LaneRule):
    name = "signsgd"

    def init_state(self, W):
        return {"buf": torch.zeros_like(W)} if self.h["momentum"] > 0 else {}

    def apply(self, W, g, stats, lr, t, state):
        h = self.h
        if h["momentum"] > 0:
            g = rules.momentum_(state["buf"], g, h["momentum"], nesterov=False)
        rules.decoupled_weight_decay_(W, lr, h["weight_decay"])
        rules.descend_(W, torch.sign(g), lr)


class AdamRule(LaneRule):
    name = "adam"

    def init_state(self, W):
        return {"exp_avg": torch.zeros_like(W), "exp_avg_sq": torch.zeros_like(W)}

    def apply(self, W, g, stats, lr, t, state):
        h = self.h
        rules.adam_update_(W, g, state["exp_avg"], state["exp_avg_sq"], t, lr, h["betas"], h["eps"], h["weight_decay"])


class MuonRule(LaneRule):
    name = "muon"

    def init_state(self, W):
        return {"buf": torch.zeros_like(W)}

    def apply(self, W, g, stats, lr, t, state):
        h = self.h
        u = rules.momentum_(state["buf"], g, h["momentum"], h["nesterov"])
        d = rules.muon_msign(u, steps=h["ns_steps"], exact=h["exact"])
        rules.decoupled_weight_decay_(W, lr, h["weight_decay"])
        rules.descend_(W, d, lr)


class ShampooRule(LaneRule):
    name = "shampoo"

    def apply(self, W, g, stats, lr, t, state):
        h = self.h
        state["L"] = rules.accumulate(g @ g.mT, state.get("L"), h["beta"])
        state["R"] = rules.accumulate(g.mT @ g, state.get("R"), h["beta"])
        if "L_root" not in state or rules.refresh_due(t, h["root_interval"]):
            roots = linalg.symmetric_inverse_root(torch.stack([state["L"], state["R"]]), p=4, damping=h["damping"])
            self.root_stats["recomputed"] = self.root_stats.get("recomputed", 0) + roots[..., 0, 0].numel()
            state["L_root"], state["R_root"] = roots[0], roots[1]
        d = updates.two_sided(g, state["L_root"], state["R_root"])
        rules.decoupled_weight_decay_(W, lr, h["weight_decay"])
        rules.descend_(W, d, lr)


class _WhitenedRule(LaneRule):
    """Iso's statistics: bias-corrected EMA of ``X^T X/b`` and ``G^T G/b``, roots every ``root_interval``."""

    def statistics(self, Xs, Gs, b):
        return {"cov_x": Xs.mT @ Xs / b, "cov_g": Gs.mT @ Gs / b}

    def _roots(self, stats, t, state):
        h = self.h
        beta = h["beta_cov"]
        state["cov_x"] = cx = rules.ema(stats["cov_x"], state.get("cov_x"), beta)
        state["cov_g"] = cg = rules.ema(stats["cov_g"], state.get("cov_g"), beta)
        if "root_x" not in state or rules.refresh_due(t, h["root_interval"]):
            corr = rules.bias_correction(beta, t)
            C = torch.stack([cx / corr, cg / corr])
            prev = torch.stack([state["root_x"], state["root_g"]]) if "root_x" in state else None
            R = inverse_sqrt_batched(C, h["damping"], h["root_method"], prev, h["root_tol"], h["root_fallback"],
                                     self.root_stats)
            state["root_x"], state["root_g"] = R[0], R[1]
        return state["root_x"], state["root_g"]


class IsoRule(_WhitenedRule):
    name = "iso"

    def init_state(self, W):
        return {"buf": torch.zeros_like(W)} if self.h["momentum"] > 0 else {}

    def apply(self, W, g, stats, lr, t, state):
        h = self.h
        root_x, root_g = self._roots(stats, t, state)
        g = g / self.batch
        u = rules.momentum_(state["buf"], g, h["momentum"], h["nesterov"]) if h["momentum"] > 0 else g
        d = updates.two_sided(u, root_g, root_x)  # P_G u P_X in torch's layout, as Iso
        rules.decoupled_weight_decay_(W, lr, h["weight_decay"])
        rules.descend_(W, d, lr)


class IsoAdamRule(_WhitenedRule):
    name = "isoadam"

    def init_state(self, W):
        return {"exp_avg": torch.zeros_like(W), "exp_avg_sq": torch.zeros_like(W)}

    def apply(self, W, g, stats, lr, t, state):
        h = self.h
        root_x, root_g = self._roots(stats, t, state)
        w = updates.two_sided(g / self.batch, root_g, root_x)
        rules.adam_update_(W, w, state["exp_avg"], state["exp_avg_sq"], t, lr, h["betas"], h["eps"], h["weight_decay"])


_RULES = {r.name: r for r in (SGDRule, SignSGDRule, AdamRule, MuonRule, ShampooRule, IsoRule, IsoAdamRule)}


def _validate(name: str, h: dict) -> None:
    def nonneg(k):
        v = h[k]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0:
            raise ValueError(f"{name}: {k} must be a real number >= 0, got {v!r}")

    for k in ("weight_decay", "damping", "eps"):
        if k in h:
            nonneg(k)
    for k in ("momentum", "beta_cov"):
        if k in h:
            nonneg(k)
            if not h[k] < 1:
                raise ValueError(f"{name}: {k} must be in [0, 1), got {h[k]!r}")
    if "beta" in h:
        nonneg("beta")
        if h["beta"] > 1:
            raise ValueError(f"{name}: beta must be in [0, 1], got {h['beta']!r}")
    if "betas" in h:
        b = tuple(h["betas"])
        if len(b) != 2 or not all(0 <= x < 1 for x in b):
            raise ValueError(f"{name}: betas must be a pair in [0, 1), got {h['betas']!r}")
        h["betas"] = b
    for k in ("root_interval", "ns_steps"):
        if k in h and (isinstance(h[k], bool) or not isinstance(h[k], int) or h[k] < 1):
            raise ValueError(f"{name}: {k} must be a positive int, got {h[k]!r}")
    if "root_method" in h and h["root_method"] not in ("eigh", "newton"):
        raise ValueError(f"{name}: root_method must be 'eigh' or 'newton', got {h['root_method']!r}")
    if "root_fallback" in h and h["root_fallback"] not in ("auto", "eigh", "newton"):
        raise ValueError(f"{name}: root_fallback must be 'auto', 'eigh' or 'newton', got {h['root_fallback']!r}")
    if name == "sgd" and h["nesterov"] and not h["momentum"]:
        raise ValueError("sgd: nesterov=True needs momentum > 0 (as torch.optim.SGD)")


def resolve_hyper(name: str, hyper: Optional[dict] = None) -> dict:
    """The optimizer's defaults updated by ``hyper``; unknown keys raise ``ValueError``."""
    if name not in DEFAULTS:
        raise ValueError(f"unknown optimizer {name!r}; choose from {OPTIMIZERS}")
    h = dict(DEFAULTS[name])
    for k, v in (hyper or {}).items():
        if k not in h:
            raise ValueError(f"{name}: unknown hyperparameter {k!r}; known: {sorted(h)}")
        h[k] = v
    _validate(name, h)
    return h


def make_rule(name: str, hyper: Optional[dict] = None) -> LaneRule:
    """The lane rule of optimizer ``name`` with hyperparameters ``hyper`` (defaults filled in)."""
    hyper = resolve_hyper(name, hyper)
    return _RULES[name](hyper)
