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

Other optimizers move the features through the same layer: any weight update
:math:`U` gives :math:`\Delta Y = -\eta X U`. Muon (:math:`U = \operatorname{msign}(X^\top G)`)
and SignSGD (:math:`U = \operatorname{sign}(X^\top G)`) are compared with the steepest
feature move *in their own geometry* (spectral norm, max-entry norm) by
:func:`optimizer_feature_alignment` and :func:`descent_efficiency` (Chapter 4).

Everything here is batched over leading dimensions.
"""

from __future__ import annotations

import torch

from . import updates
from .linalg import msign

__all__ = [
    "gram",
    "feature_change",
    "cosine_similarity",
    "feature_alignment",
    "NORMS",
    "OPTIMIZERS",
    "matrix_norm",
    "dual_norm",
    "steepest_direction",
    "descent_efficiency",
    "update_feature_change",
    "optimizer_feature_change",
    "optimizer_feature_alignment",
]


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


# ----------------------------------------------------------------------------- Chapter 4
#: The three geometries of the book's steepest-descent table: the norm measuring a step,
#: the optimizer that is steepest descent under it, and the name used by the functions below.
NORMS = ("frobenius", "spectral", "max")

#: Optimizer name -> the norm under which its weight update is steepest descent.
OPTIMIZERS = {"sgd": "frobenius", "muon": "spectral", "sign": "max"}


def _check_norm(norm: str) -> str:
    if norm not in NORMS:
        raise ValueError(f"norm must be one of {NORMS}, got {norm!r}")
    return norm


def _check_optimizer(optimizer: str) -> str:
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {tuple(OPTIMIZERS)}, got {optimizer!r}")
    return optimizer


def matrix_norm(D: torch.Tensor, norm: str) -> torch.Tensor:
    r"""The size of a step :math:`D` (last two dimensions): ``"frobenius"``
    :math:`\|D\|_F`, ``"spectral"`` :math:`\|D\|_2 = \sigma_{\max}(D)`, ``"max"``
    :math:`\max_{ij}|D_{ij}|`."""
    norm = _check_norm(norm)
    if norm == "frobenius":
        return torch.linalg.matrix_norm(D)
    if norm == "spectral":
        return torch.linalg.matrix_norm(D, ord=2)
    return D.abs().amax(dim=(-2, -1))


def dual_norm(G: torch.Tensor, norm: str) -> torch.Tensor:
    r"""The dual norm :math:`\|G\|^\dagger = \max_{\|D\| \le 1} \langle G, D\rangle`:
    Frobenius for ``"frobenius"``, the nuclear norm :math:`\sum_i \sigma_i(G)` for
    ``"spectral"``, the entrywise :math:`\sum_{ij} |G_{ij}|` for ``"max"``. It is the
    largest first-order decrease a unit step can buy."""
    norm = _check_norm(norm)
    if norm == "frobenius":
        return torch.linalg.matrix_norm(G)
    if norm == "spectral":
        return torch.linalg.matrix_norm(G, ord="nuc")
    return G.abs().sum(dim=(-2, -1))


def steepest_direction(G: torch.Tensor, norm: str) -> torch.Tensor:
    r"""A maximizer of :math:`\langle G, D\rangle` over the unit ball of ``norm``:
    :math:`G/\|G\|_F` (Frobenius), :math:`\operatorname{msign}(G) = UV^\top` (spectral)
    or :math:`\operatorname{sign}(G)` (max-entry). Steepest descent steps along minus
    this direction: normalized SGD, Muon and SignSGD. Its inner product with ``G`` equals
    :func:`dual_norm`. A zero ``G`` gives zeros (NaN for Frobenius, which has no
    direction to normalize)."""
    norm = _check_norm(norm)
    if norm == "frobenius":
        return G / torch.linalg.matrix_norm(G)[..., None, None]
    if norm == "spectral":
        return msign(G)
    return torch.sign(G)


def descent_efficiency(D: torch.Tensor, G: torch.Tensor, norm: str) -> torch.Tensor:
    r"""How close a move :math:`D` comes to steepest descent under ``norm``:

    .. math:: e(D) = \frac{\langle -G, D\rangle}{\|D\|\,\|G\|^\dagger} \in [-1, 1].

    The numerator is the first-order decrease of the loss, the denominator the best
    decrease any move of the same length can buy, so :math:`e = 1` exactly when
    :math:`D` is a positive multiple of a steepest-descent direction
    (minus :func:`steepest_direction`). For ``"frobenius"`` it is the cosine
    :math:`\cos(D, -G)`. NaN when ``D`` or ``G`` is zero."""
    if D.shape != G.shape:
        raise ValueError(f"shapes differ: {tuple(D.shape)} vs {tuple(G.shape)}")
    decrease = -(G * D).sum(dim=(-2, -1))
    scale = matrix_norm(D, norm) * dual_norm(G, norm)
    return torch.where(scale > 0, decrease / scale.clamp_min(torch.finfo(D.dtype).tiny), torch.nan)


def update_feature_change(X: torch.Tensor, update: torch.Tensor, lr: float) -> torch.Tensor:
    r"""The output change :math:`\Delta Y = X(W - \eta U) - XW = -\eta\, X U` of the
    weight step :math:`W \leftarrow W - \eta U`, for any update ``U`` of shape
    ``(..., d_in, d_out)``."""
    if X.shape[:-2] != update.shape[:-2] or X.shape[-1] != update.shape[-2]:
        raise ValueError(
            f"X (..., b, d_in) and update (..., d_in, d_out) do not match: X {tuple(X.shape)}, "
            f"update {tuple(update.shape)}"
        )
    return -lr * (X @ update)


def optimizer_feature_change(X: torch.Tensor, G: torch.Tensor, lr: float, optimizer: str) -> torch.Tensor:
    r"""The output change of one step of ``optimizer`` (no momentum) on ``Y = XW``:

    - ``"sgd"``: :math:`-\eta X X^\top G` (as :func:`feature_change`; the weight gradient
      of the summed loss, :math:`X^\top G`),
    - ``"muon"``: :math:`-\eta X \operatorname{msign}(X^\top G)
      = -\eta X X^\top G (G^\top X X^\top G)^{-1/2}` (pseudo-inverse when singular),
    - ``"sign"``: :math:`-\eta X \operatorname{sign}(X^\top G)`.

    Muon and SignSGD come from :func:`isolab.updates.muon_update` and
    :func:`isolab.updates.sign_sgd_update`; both are invariant to scaling the gradient,
    so their ``1/b`` convention does not matter. With :math:`XX^\top = I` Muon's change
    is exactly :math:`-\eta\operatorname{msign}(G)`; SignSGD's is not
    :math:`-\eta\operatorname{sign}(G)` unless the rows of ``X`` are (signed) coordinate
    vectors.
    """
    optimizer = _check_optimizer(optimizer)
    if X.shape[:-1] != G.shape[:-1]:
        raise ValueError(
            f"X and G must share the batch dimensions, got X {tuple(X.shape)} and G {tuple(G.shape)}"
        )
    if optimizer == "sgd":
        return feature_change(X, G, lr)
    if optimizer == "muon":
        return update_feature_change(X, updates.muon_update(X, G), lr)
    return update_feature_change(X, updates.sign_sgd_update(X, G), lr)


def optimizer_feature_alignment(X: torch.Tensor, G: torch.Tensor, optimizer: str) -> torch.Tensor:
    r"""Cosine between an optimizer's feature move and the same optimizer's steepest move
    *for the features*: :math:`\cos(\Delta Y, -T)` with :math:`T = G` (SGD),
    :math:`\operatorname{msign}(G)` (Muon) or :math:`\operatorname{sign}(G)` (SignSGD).

    It is 1 when the step on the weights is also steepest descent on the features, in
    the optimizer's own norm. ``"sgd"`` reproduces :func:`feature_alignment`.
    """
    optimizer = _check_optimizer(optimizer)
    target = steepest_direction(G, OPTIMIZERS[optimizer])
    return cosine_similarity(optimizer_feature_change(X, G, 1.0, optimizer), -target)
