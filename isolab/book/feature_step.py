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

Not every feature move can be made: :math:`\Delta Y = -\eta XU` always lies in the column
space of :math:`X`, which for :math:`b > d_{in}` is a :math:`d_{in}`-dimensional part of
:math:`\mathbb R^b`. :func:`reachable_descent_efficiency` compares a move with the best
*reachable* one, whose direction is the steepest direction of :math:`P_X G`
(:func:`column_space_projector`).

Everything here is batched over leading dimensions.
"""

from __future__ import annotations

import torch

from isolab import updates
from isolab.linalg import msign

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
    "optimizer_feature_efficiency",
    "column_space_projector",
    "reachable_steepest_direction",
    "reachable_descent_efficiency",
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


def optimizer_feature_efficiency(X: torch.Tensor, G: torch.Tensor, optimizer: str, *, reachable: bool = False) -> torch.Tensor:
    r"""Descent efficiency of an optimizer's feature move in the optimizer's *own* norm
    (Frobenius for SGD, spectral for Muon, max-entry for SignSGD; see
    :func:`descent_efficiency`): 1 exactly when the step on the weights is also steepest
    descent on the features in that norm.

    With ``reachable=True`` the move is compared with the best move the layer can make
    (:func:`reachable_descent_efficiency`); only for SGD and Muon, whose norms have a
    closed-form reachable optimum.
    """
    optimizer = _check_optimizer(optimizer)
    norm = OPTIMIZERS[optimizer]
    move = optimizer_feature_change(X, G, 1.0, optimizer)
    if reachable:
        return reachable_descent_efficiency(move, G, X, norm)
    return descent_efficiency(move, G, norm)


def column_space_projector(X: torch.Tensor, *, rtol: float | None = None) -> torch.Tensor:
    r"""The orthogonal projector :math:`P_X = X(X^\top X)^{+}X^\top = U_r U_r^\top`
    onto the column space of :math:`X` (shape ``(..., b, b)``), from the thin SVD
    :math:`X = USV^\top`; singular values below ``rtol`` times the largest (default
    :math:`\max(b, d)\,\epsilon`) count as zero.

    Every feature move of a weight step, :math:`-\eta XU`, satisfies
    :math:`P_X\,\Delta Y = \Delta Y`; for :math:`b \le d_{in}` and full row rank
    :math:`P_X = I`. With whitened inputs (:math:`X^\top X = I`) it is :math:`XX^\top`.
    """
    basis = _column_basis(X, rtol)
    return basis @ basis.transpose(-1, -2)


def _column_basis(X: torch.Tensor, rtol: float | None = None) -> torch.Tensor:
    """Orthonormal columns spanning col(X), as ``(..., b, min(b, d))`` with the columns
    beyond the rank set to zero (so ``B B^T = P_X`` and ``P_X G = B (B^T G)``)."""
    U, S, _ = torch.linalg.svd(X, full_matrices=False)
    if rtol is None:
        rtol = max(X.shape[-2], X.shape[-1]) * torch.finfo(X.dtype).eps
    keep = (S > rtol * S.amax(dim=-1, keepdim=True)).to(X.dtype)
    return U * keep.unsqueeze(-2)


def _project(X: torch.Tensor, G: torch.Tensor) -> torch.Tensor:
    """:math:`P_X G` without forming the ``b x b`` projector."""
    basis = _column_basis(X)
    return basis @ (basis.transpose(-1, -2) @ G)


_REACHABLE_NORMS = ("frobenius", "spectral")


def _check_reachable_norm(norm: str) -> str:
    norm = _check_norm(norm)
    if norm not in _REACHABLE_NORMS:
        raise ValueError(
            f"the best reachable move has a closed form for {_REACHABLE_NORMS} only, not {norm!r} "
            "(for the max-entry norm it is a linear program)"
        )
    return norm


def reachable_steepest_direction(X: torch.Tensor, G: torch.Tensor, norm: str) -> torch.Tensor:
    r"""The steepest direction among the feature moves a layer with inputs ``X`` can make
    (those :math:`D` with :math:`P_X D = D`): the steepest direction of :math:`P_X G`,
    :math:`P_XG/\|P_XG\|_F` (Frobenius) or :math:`\operatorname{msign}(P_X G)`
    (spectral). Both lie in the column space of :math:`X`, and for such :math:`D`,
    :math:`\langle G, D\rangle = \langle P_X G, D\rangle`, so the best value is
    :math:`\|P_X G\|^\dagger`. Only ``"frobenius"`` and ``"spectral"``."""
    norm = _check_reachable_norm(norm)
    if X.shape[:-1] != G.shape[:-1]:
        raise ValueError(f"X and G must share the batch dimensions, got X {tuple(X.shape)} and G {tuple(G.shape)}")
    return steepest_direction(_project(X, G), norm)


def reachable_descent_efficiency(D: torch.Tensor, G: torch.Tensor, X: torch.Tensor, norm: str) -> torch.Tensor:
    r"""Descent efficiency against the best *reachable* move:

    .. math:: e_X(D) = \frac{\langle -G, D\rangle}{\|D\|\;\|P_X G\|^\dagger},

    the decrease a move :math:`D` buys divided by the most that any move of the same length
    *in the column space of* :math:`X` could buy (:func:`reachable_steepest_direction`).
    For a reachable :math:`D` it lies in :math:`[-1, 1]` and is 1 exactly for the steepest
    reachable move; it equals :func:`descent_efficiency` when :math:`P_X = I`. SGD's move
    :math:`-\eta XX^\top G` has :math:`e_X = \cos(XX^\top G, P_X G)` (Frobenius); with
    whitened inputs (:math:`X^\top X = I`) it is :math:`-\eta P_X G` and Muon's is
    :math:`-\eta\operatorname{msign}(P_X G)`: both exactly 1. Only ``"frobenius"`` and
    ``"spectral"``; NaN when ``D`` or :math:`P_X G` is zero."""
    norm = _check_reachable_norm(norm)
    if D.shape != G.shape:
        raise ValueError(f"shapes differ: {tuple(D.shape)} vs {tuple(G.shape)}")
    if X.shape[:-1] != G.shape[:-1]:
        raise ValueError(f"X and G must share the batch dimensions, got X {tuple(X.shape)} and G {tuple(G.shape)}")
    decrease = -(G * D).sum(dim=(-2, -1))
    scale = matrix_norm(D, norm) * dual_norm(_project(X, G), norm)
    return torch.where(scale > 0, decrease / scale.clamp_min(torch.finfo(D.dtype).tiny), torch.nan)
