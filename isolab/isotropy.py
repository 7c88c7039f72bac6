r"""How isotropic is a batch of features? One measure, used throughout the book.

For a symmetric PSD matrix :math:`C` of size :math:`n` with eigenvalues
:math:`\lambda_i \ge 0`, the **effective rank** is

.. math:: r(C) = \frac{(\sum_i \lambda_i)^2}{\sum_i \lambda_i^2}
               = \frac{(\operatorname{tr} C)^2}{\|C\|_F^2} \in [1, \operatorname{rank} C],

and the **isotropy** is :math:`r(C)/n \in (0, 1]`: it equals 1 exactly when
:math:`C \propto I` and :math:`1/n` when all the energy sits in one direction. It is
scale-free and rotation-invariant, and it equals :math:`1/(1 + \epsilon^2)` where
:math:`\epsilon = \|C/\bar\lambda - I\|_F/\sqrt n` is the relative distance of :math:`C`
from the nearest multiple of the identity (:math:`\bar\lambda = \operatorname{tr}C/n`).

A batch :math:`X \in \mathbb R^{b\times d}` has two matrices worth measuring:

* the **Gram side** :math:`XX^\top` (:math:`b\times b`), which decides whether a gradient
  step is steepest descent for the features (Chapter 1);
* the **covariance side** :math:`X^\top X/b` (:math:`d\times d`), which decides whether the
  features use every direction equally.

They share their nonzero eigenvalues, hence one effective rank :math:`r`, and
:math:`\text{isotropy}_{gram} = r/b`, :math:`\text{isotropy}_{cov} = r/d`. Since
:math:`r \le \min(b, d)`, the Gram side can reach 1 only when :math:`b \le d`: for
:math:`b > d` it is at most :math:`d/b`.
"""

from __future__ import annotations

import torch

__all__ = ["effective_rank", "isotropy", "feature_isotropy", "distance_from_identity"]


def _check_square(C: torch.Tensor) -> None:
    if C.ndim < 2 or C.shape[-1] != C.shape[-2]:
        raise ValueError(f"expected a batch of square matrices, got shape {tuple(C.shape)}")


def effective_rank(C: torch.Tensor) -> torch.Tensor:
    r""":math:`(\operatorname{tr}C)^2/\|C\|_F^2` for symmetric PSD ``C`` (batched).
    NaN for the zero matrix, which has no shape to measure."""
    _check_square(C)
    trace = torch.diagonal(C, dim1=-2, dim2=-1).sum(-1)
    frob2 = C.square().sum(dim=(-2, -1))
    return torch.where(frob2 > 0, trace.square() / frob2.clamp_min(torch.finfo(C.dtype).tiny), torch.nan)


def isotropy(C: torch.Tensor) -> torch.Tensor:
    r"""Effective rank over dimension, in :math:`(0, 1]`; 1 iff :math:`C \propto I`."""
    return effective_rank(C) / C.shape[-1]


def distance_from_identity(C: torch.Tensor) -> torch.Tensor:
    r""":math:`\|C/\bar\lambda - I\|_F/\sqrt n` with :math:`\bar\lambda = \operatorname{tr}C/n`;
    0 iff :math:`C \propto I`. Equals :math:`\sqrt{1/\text{isotropy} - 1}`."""
    _check_square(C)
    n = C.shape[-1]
    mean_eig = torch.diagonal(C, dim1=-2, dim2=-1).sum(-1) / n
    eye = torch.eye(n, dtype=C.dtype, device=C.device)
    return torch.linalg.matrix_norm(C / mean_eig[..., None, None] - eye) / n**0.5


def feature_isotropy(X: torch.Tensor, side: str = "gram") -> torch.Tensor:
    r"""Isotropy of a batch ``X`` of shape ``(..., b, d)``: ``side="gram"`` measures
    :math:`XX^\top` (:math:`\le \min(b,d)/b`), ``side="covariance"`` measures
    :math:`X^\top X` (:math:`\le \min(b,d)/d`). Computed from whichever matrix is
    smaller, since both share the effective rank."""
    if side not in ("gram", "covariance"):
        raise ValueError(f"side must be 'gram' or 'covariance', got {side!r}")
    b, d = X.shape[-2], X.shape[-1]
    small = X.transpose(-1, -2) @ X if d <= b else X @ X.transpose(-1, -2)
    rank = effective_rank(small)
    return rank / (b if side == "gram" else d)
