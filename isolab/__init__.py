"""isolab: isotropic features and the optimizers they lead to.

The library (what a training script imports): ``from isolab import IsoAdam, Iso, Muon, Shampoo,
SignSGD``, and


- :mod:`isolab.optim`       the ``torch.optim`` optimizers: SignSGD, Muon, Shampoo, Iso,
  IsoAdam, and the routing of a model's parameters between them.
- :mod:`isolab.linalg`      matrix functions: msign (Newton-Schulz), inverse roots,
  whitening, covariances.
- :mod:`isolab.distributed` several processes: a launcher, statistics averaged across
  processes (upper triangles, bucketed), inverse roots computed by their owners and shared.
- :mod:`isolab.fsdp`        FSDP2 (``fully_shard``): each matrix's whole-matrix work on one
  owner process, its rows gathered there and the result's rows sent back.
- :mod:`isolab.nn`          attention whose projections are ``nn.Linear`` layers, so that
  Iso and IsoAdam can whiten them (:func:`isolab.nn.convert_attention`), and the registry of
  linear-like modules (:func:`isolab.nn.register_linear`: transformers' ``Conv1D``, yours).
- :mod:`isolab.updates`     update rules as pure functions of a layer's ``X`` and ``G``.
- :mod:`isolab.rules`       the optimizers' stateful rules (moments, momentum, averages).

The book's chapter code (experiments, problems, sweeps, figures) lives in
:mod:`isolab.book`; nothing in the library imports it.
"""

__version__ = "0.1.0"

from .optim import Iso, IsoAdam, Muon, Shampoo, SignSGD  # noqa: E402  (the optimizers, as torch.optim's)

__all__ = ["Iso", "IsoAdam", "Muon", "Shampoo", "SignSGD", "__version__"]
