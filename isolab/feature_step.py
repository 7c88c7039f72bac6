r"""What a weight update does to a layer's output features.

For a linear layer :math:`Y = XW` with :math:`X \in \mathbb R^{b\times d_{in}}` and
upstream gradient :math:`G = \partial L/\partial Y \in \mathbb R^{b\times d_{out}}`,
a gradient step :math:`W \leftarrow W - \eta X^\top G` moves the outputs by

.. math:: \Delta Y = X(W - \eta X^\top G) - XW = -\eta\, X X^\top G.

Steepest descent *for the features* would move them along :math:`-G`; the Gram matrix
:math:`X X^\top` is what stands between the two. An affine layer
:math:`Y = XW + \mathbf 1 c^\top` whose bias :math:`c` takes the step too adds
:math:`\mathbf 1\mathbf 1^\top` to the Gram matrix: :math:`\Delta Y = -\eta (XX^\top +
\mathbf 1\mathbf 1^\top) G`, which for one sample is the factor
:math:`\|x\|^2 + 1`.

Everything here is batched over leading dimensions.
"""

from __future__ import annotations

import torch

__all__ = ["gram", "feature_change", "cosine_similarity", "feature_alignment"]


def gram(X: torch.Tensor, *, bias: bool = False) -> torch.Tensor:
    r"""The Gram matrix :math:`XX^\top` (plus :math:`\mathbf 1\mathbf 1^\top` when
    ``bias``), shape ``(..., b, b)``."""
    K = X @ X.transpose(-1, -2)
    if bias:
        K = K + 1.0
    return K


def feature_change(X: torch.Tensor, G: torch.Tensor, lr: float, *, bias: bool = False) -> torch.Tensor:
    r"""The output change :math:`\Delta Y = -\eta\,(XX^\top [+ \mathbf 1\mathbf 1^\top])\,G`
    caused by one gradient step of size ``lr`` on the weight (and bias) of ``Y = XW [+ c]``.
    """
    if X.shape[:-1] != G.shape[:-1]:
        raise ValueError(
            f"X and G must share the batch dimensions, got X {tuple(X.shape)} and G {tuple(G.shape)}"
        )
    return -lr * (gram(X, bias=bias) @ G)


def cosine_similarity(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    r"""Cosine :math:`\langle A, B\rangle_F / (\|A\|_F \|B\|_F)` over the last two
    dimensions. Undefined (NaN) when either matrix is zero: there is no direction to
    compare, and returning a number would hide that."""
    if A.shape != B.shape:
        raise ValueError(f"shapes differ: {tuple(A.shape)} vs {tuple(B.shape)}")
    inner = (A * B).sum(dim=(-1, -2))
    norms = torch.linalg.matrix_norm(A) * torch.linalg.matrix_norm(B)
    return torch.where(norms > 0, inner / norms.clamp_min(torch.finfo(A.dtype).tiny), torch.nan)


def feature_alignment(X: torch.Tensor, G: torch.Tensor, *, bias: bool = False) -> torch.Tensor:
    r"""Cosine between the feature change of a gradient step and the steepest-descent
    direction for the features, :math:`\cos(\Delta Y, -G)`; the step size drops out.

    It is 1 exactly when :math:`XX^\top G \propto G`, for instance when the rows of
    :math:`X` are orthonormal (possible only for :math:`b \le d_{in}`).
    """
    return cosine_similarity(feature_change(X, G, 1.0, bias=bias), -G)
