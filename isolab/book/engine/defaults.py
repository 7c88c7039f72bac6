r"""The engine's hyperparameter defaults, read from the optimizers' own signatures.

A lane of the engine is meant to be the optimizer a reader gets from the library. So its
defaults are not written down a second time: :func:`library_defaults` reads them from the
signature of the class each lane reproduces (:data:`LIBRARY_CLASSES`: ``torch.optim.SGD``,
``torch.optim.Adam``, :class:`isolab.optim.SignSGD`, :class:`~isolab.optim.Muon`,
:class:`~isolab.optim.Shampoo`, :class:`~isolab.optim.Iso`,
:class:`~isolab.optim.IsoAdam`, pytorch-optimizer's ``SOAP``), key by key, under the
engine's names (:data:`RENAMED`).

Every parameter of those signatures is accounted for: it is a lane hyperparameter, or it
is listed in :data:`IMPLICIT` with the library default the lane reproduces without a knob
(``stat_interval=1``: statistics every step; ``compute_dtype="auto"``: float32 on a CPU;
...), or in :data:`NOT_LANE` as what does not act on a deep linear network's square
hidden matrices (routing of embeddings and heads, process groups, ``grad_scaler``). A
test reads the signatures again and fails when a library default moves away from what is
recorded here.

Where the engine's defaults differ from the library's, the difference is listed in
:data:`BOOK_DEVIATIONS` with its reason; :data:`isolab.book.engine.DEFAULTS` is
``library_defaults()`` updated by those, nothing else (tested). Part III's protocol does not
use the engine's defaults: it starts from :func:`library_defaults` and states its own
deviations beside the default's result (:mod:`isolab.book.engine.tuning`).
"""

from __future__ import annotations

import inspect
from typing import Optional

__all__ = ["LIBRARY_CLASSES", "RENAMED", "IMPLICIT", "NOT_LANE", "ENGINE_ONLY", "BOOK_DEVIATIONS",
           "library_defaults", "signature_defaults", "engine_defaults", "deviations"]


def _classes() -> dict:
    import torch

    from isolab.optim import Iso, IsoAdam, Muon, Shampoo, SignSGD

    out = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "signsgd": SignSGD, "muon": Muon,
           "shampoo": Shampoo, "shampoo_graft": Shampoo, "iso": Iso, "isoadam": IsoAdam}
    try:  # a test-only dependency (the reference for the SOAP lanes)
        from pytorch_optimizer import SOAP
        out["soap"] = SOAP
    except ImportError:  # pragma: no cover
        pass
    return out


#: engine optimizer -> the class whose signature gives its defaults (``kfac`` has none: the
#: book's own rule, tested against a per-layer loop).
LIBRARY_CLASSES = _classes()

#: Library parameter -> the engine's name, per optimizer (the same knob under another name).
RENAMED = {
    "shampoo_graft": {"graft_beta2": None},  # betas[1] plays graft_beta2's role (BETAS_FROM below)
}

#: Library defaults the lanes reproduce without a knob of their own: ``{optimizer: {name: value}}``.
#: The value is the library's default (a test compares), and the lane does exactly this.
IMPLICIT = {
    "sgd": {"dampening": 0, "maximize": False},
    "adam": {"amsgrad": False, "maximize": False, "decoupled_weight_decay": False},
    "muon": {"ns_coefficients": (3.4445, -4.775, 2.0315),  # Jordan's quintic, rules.muon_msign's
             "compute_dtype": "auto",  # float32 on a CPU: the run's dtype
             "adjust_lr_fn": "original"},  # sqrt(max(1, rows/cols)) = 1 on square matrices
    "shampoo": {"graft": None, "graft_beta2": 0.999, "graft_eps": 1e-08},  # the 2018 form: no grafting
    "shampoo_graft": {"momentum": 0.0, "beta": 1.0, "graft": None},  # the lane sets graft="adam", beta=betas[1]
    "iso": {"stat_interval": 1, "warmup_steps": 0,
            "direction": "whitened"},  # the paper's step; "polar" is a library option no lane runs
    "isoadam": {"stat_interval": 1, "warmup_steps": 0, "whiten": True},
    "soap": {"max_precondition_dim": 10000, "merge_dims": False, "precondition_1d": False,
             "correct_bias": True, "normalize_gradient": False, "data_format": "channels_first",
             "maximize": False},
}

#: Parameters that do not act on a deep linear network of square hidden matrices trained in
#: one process in the run's dtype (routing, distribution, loss scaling, failure handling).
NOT_LANE = {
    "adam_lr", "adam_betas", "adam_eps", "adam_weight_decay", "params", "embeddings", "head", "others",
    "sync_statistics", "process_group", "distribute_roots", "nonfinite", "grad_scaler", "stats_dtype",
    "foreach", "capturable", "differentiable", "fused", "lr", "model", "kwargs",
}

#: Lane hyperparameters with no library counterpart: ``{optimizer: {name: why}}``.
ENGINE_ONLY = {
    "iso": {"root_fallback": "the batched roots' fallback when a warm-started Newton root fails"},
    "isoadam": {"root_fallback": "the batched roots' fallback when a warm-started Newton root fails"},
    "shampoo_graft": {"betas": "(momentum, graft_beta2 = beta): Distributed Shampoo's pair",
                      "graft_eps": "the library's graft_eps", "damping": "the library's damping",
                      "root_interval": "the library's root_interval", "weight_decay": "the library's weight_decay"},
    "kfac": {k: "K-FAC has no library class; the book's rule (KFACRule)"
             for k in ("momentum", "nesterov", "beta_cov", "damping", "root_interval", "weight_decay")},
}

#: Where :data:`isolab.book.engine.DEFAULTS` differs from the library's defaults, and why:
#: ``{optimizer: {name: (engine value, reason)}}``.
BOOK_DEVIATIONS = {
    "isoadam": {
        "weight_decay": (0.0, "the engine's problems are noise-free regressions and Chapter 5's pure-noise "
                              "problem, where decay is the variable under study; every lane starts without it"),
        "shrinkage": (False, "Chapter 5 trains batches of one row on 16-wide layers, where shrinkage would "
                             "raise the damping; it measures the plain rule (at b >= d shrinkage does nothing)"),
    },
    "iso": {
        "shrinkage": (False, "as IsoAdam: Chapter 5's batches of one row measure the plain rule"),
    },
    "soap": {
        "weight_decay": (0.0, "pytorch-optimizer's SOAP defaults to 0.01; every lane starts without decay"),
    },
}


def signature_defaults(cls) -> dict:
    """``{name: default}`` of every parameter of ``cls.__init__`` that has a default."""
    return {k: p.default for k, p in inspect.signature(cls.__init__).parameters.items()
            if p.default is not inspect.Parameter.empty}


def library_defaults(name: str, keys: Optional[set] = None) -> dict:
    """The library's defaults for engine optimizer ``name``, under the engine's names:
    every lane hyperparameter the library class has, read from its signature (``keys``:
    limit to those). ``shampoo_graft``'s ``betas`` are ``(0.9, graft_beta2)``: Distributed
    Shampoo's momentum with the library's grafting ``beta2``. ``kfac`` has no class: ``{}``."""
    if name == "kfac":
        return {}
    if name not in LIBRARY_CLASSES:
        raise ValueError(f"engine optimizer {name!r} has no library class; those that do: {sorted(LIBRARY_CLASSES)}")
    sig = signature_defaults(LIBRARY_CLASSES[name])
    out = {}
    for k, v in sig.items():
        if k in NOT_LANE or k in IMPLICIT.get(name, {}):
            continue
        if k in RENAMED.get(name, {}):
            continue
        out[k] = tuple(v) if isinstance(v, list) else v
    if name == "sgd":
        out = {k: out[k] for k in ("momentum", "nesterov", "weight_decay")}
    if name == "shampoo_graft":
        out = {"betas": (0.9, sig["graft_beta2"]), "graft_eps": sig["graft_eps"], "damping": sig["damping"],
               "root_interval": sig["root_interval"], "weight_decay": sig["weight_decay"]}
    if keys is not None:
        out = {k: v for k, v in out.items() if k in keys}
    return out


def engine_defaults() -> dict:
    """``{optimizer: defaults}``: :func:`library_defaults` with the engine-only keys
    (:data:`ENGINE_ONLY`'s values as the lanes set them) and :data:`BOOK_DEVIATIONS` applied."""
    engine_only = {
        "iso": {"root_fallback": "auto"}, "isoadam": {"root_fallback": "auto"},
        "kfac": dict(momentum=0.9, nesterov=False, beta_cov=0.95, damping=0.1, root_interval=10, weight_decay=0.0),
    }
    out = {}
    for name in ("sgd", "signsgd", "adam", "muon", "shampoo", "iso", "isoadam", "shampoo_graft", "kfac", "soap"):
        d = {**library_defaults(name), **engine_only.get(name, {})} if name in LIBRARY_CLASSES or name == "kfac" \
            else None
        if d is None:  # pragma: no cover - without pytorch-optimizer: its documented defaults
            d = dict(betas=(0.95, 0.95), shampoo_beta=None, eps=1e-8, precondition_frequency=10, weight_decay=0.01)
        for k, (v, _why) in BOOK_DEVIATIONS.get(name, {}).items():
            d[k] = v
        out[name] = d
    return out


def deviations(name: str, hyper: dict) -> dict:
    """``{key: (value in hyper, library default)}`` for every key of ``hyper`` that differs from
    the library's default (what a results table must state)."""
    lib = library_defaults(name)
    return {k: (v, lib[k]) for k, v in hyper.items() if k in lib and _norm(lib[k]) != _norm(v)}


def _norm(v):
    return tuple(v) if isinstance(v, (list, tuple)) else v
