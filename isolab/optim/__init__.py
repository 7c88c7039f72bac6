"""isolab's optimizers as ``torch.optim.Optimizer`` subclasses.

- :class:`SignSGD`  elementwise sign descent (signum).
- :class:`Muon`     momentum + Newton–Schulz ``msign`` for hidden matrices.
- :class:`Shampoo`  ``L^{-1/4} g R^{-1/4}`` with Gram accumulators.
- :class:`Iso`      ``Cov(X)^{-1/2} ∇W Cov(G)^{-1/2}`` with momentum (statistics by hooks).
- :class:`IsoAdam`  Adam on Iso's whitened gradient.

Matrix optimizers take a model (routed by :func:`split_parameters`, non-matrix parameters in an
AdamW group of the same optimizer) or explicit parameter groups, each tagged
``algorithm=<the optimizer's>`` or ``algorithm='adam'``. :class:`LayerStatistics` is the hook
machinery Iso and IsoAdam use, usable on its own.

Modules: ``_base`` (what the optimizers share: the step, the AdamW fallback, loss scaling, copies),
``_stage`` (one step path on one process, DDP and FSDP2), ``capture`` (the hooks), ``covariance``
and ``roots`` (Iso's statistics over time and its inverse roots), ``whitening`` (what Iso and
IsoAdam share), ``iso``, ``muon``, ``shampoo``, ``sign_sgd``, ``routing``, ``failures``.
"""

from .capture import LayerStatistics
from .iso import Iso, IsoAdam
from .muon import Muon
from .routing import GROUPS, split_parameters
from .shampoo import Shampoo
from .sign_sgd import SignSGD

__all__ = ["SignSGD", "Muon", "Shampoo", "Iso", "IsoAdam", "split_parameters", "LayerStatistics", "GROUPS"]
