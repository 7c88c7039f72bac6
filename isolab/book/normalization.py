r"""Normalization layers as diagonal approximations of whitening: pure, batched functions.

Row convention, as everywhere in the book: a batch of features ``X`` has shape
``(..., b, d)``, one row per sample, and the next linear layer computes ``X W``.

**Full whitening** (:func:`isolab.linalg.whiten`) multiplies on the right by a
:math:`d\times d` matrix :math:`A` with :math:`A^\top (X^\top X/b) A = I`. The blog's
problem :math:`\min_A \|XAA^\top X^\top - I\|_F` (:func:`whitening_objective`) is solved
by :math:`AA^\top = (X^\top X)^{-1}`, i.e. :math:`A = (X^\top X)^{-1/2}`.

**Diagonal approximations** keep only one diagonal:

* :func:`batch_norm` -- a *diagonal* :math:`A`: each feature (column) is centered and
  scaled to unit variance over the batch, so the diagonal of the covariance
  :math:`X^\top X/b` becomes 1 (after centering).
* :func:`instance_norm` -- the same per-column standardization, but over the positions
  of *one* sample: data of shape ``(..., b, L, c)`` (``L`` positions, ``c`` channels per
  sample) is standardized channel by channel within each sample.
* :func:`layer_norm`, :func:`rms_norm` -- a diagonal matrix on the *left*: each sample
  (row) is rescaled (LayerNorm centers it first), so the diagonal of the Gram matrix
  :math:`XX^\top` becomes :math:`d`.

None of them has a learnable affine transform unless ``weight``/``bias`` are given; the
defaults match ``torch.nn.functional`` (``batch_norm(training=True)``, ``instance_norm``,
``layer_norm``, ``rms_norm``) with biased variances.

Helpers for the whitening chapter: :func:`normalize` (one entry point for every method
by name), :func:`whitening_objective`, :func:`whitening_matrix` and
:func:`coordinate_correlation`.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch
from torch import Tensor

from isolab.linalg import whiten

__all__ = [
    "METHODS",
    "batch_norm",
    "instance_norm",
    "layer_norm",
    "rms_norm",
    "normalize",
    "whitening_objective",
    "whitening_matrix",
    "coordinate_correlation",
]

#: Names accepted by :func:`normalize`, in the order the book shows them.
METHODS = ("none", "batch", "layer", "rms", "zca", "pca")


def _check(X: Tensor, min_dim: int, what: str) -> None:
    if not isinstance(X, Tensor):
        raise TypeError(f"X must be a torch.Tensor, got {type(X).__name__}")
    if X.ndim < min_dim:
        raise ValueError(f"{what} needs at least {min_dim} dimensions, got shape {tuple(X.shape)}")
    if not X.is_floating_point():
        raise ValueError(f"X must be a floating-point tensor, got dtype {X.dtype}")


def _check_eps(eps: float) -> float:
    eps = float(eps)
    if not eps >= 0:
        raise ValueError(f"eps must be a number >= 0, got {eps!r}")
    return eps


def _affine(Z: Tensor, weight: Optional[Tensor], bias: Optional[Tensor]) -> Tensor:
    """Elementwise ``Z * weight + bias`` along the last dimension (features/channels)."""
    if weight is not None:
        Z = Z * weight
    if bias is not None:
        Z = Z + bias
    return Z


def _standardize(X: Tensor, dims: Sequence[int], eps: float, center: bool = True) -> Tensor:
    r""":math:`(x - \mu)/\sqrt{\sigma^2 + \epsilon}` with the mean and the *biased* variance
    taken over ``dims`` (without centering: :math:`x/\sqrt{\overline{x^2} + \epsilon}`)."""
    dims = tuple(dims)
    if center:
        X = X - X.mean(dim=dims, keepdim=True)
    second_moment = X.square().mean(dim=dims, keepdim=True)
    return X * torch.rsqrt(second_moment + eps)


def batch_norm(
    X: Tensor,
    eps: float = 1e-5,
    *,
    positions: bool = False,
    weight: Optional[Tensor] = None,
    bias: Optional[Tensor] = None,
) -> Tensor:
    r"""BatchNorm in training mode: standardize every feature over the batch.

    For ``X`` of shape ``(..., b, d)``: :math:`\hat x_{ij} = (x_{ij} - \mu_j)/
    \sqrt{\sigma_j^2 + \epsilon}` with :math:`\mu_j, \sigma_j^2` the mean and biased
    variance of column :math:`j` over the ``b`` rows. Equivalently
    :math:`\hat X = (X - \mathbf 1\mu^\top)\, D^{-1/2}` with
    :math:`D = \operatorname{diag}(\operatorname{Cov}(X)) + \epsilon I`: whitening with
    the covariance replaced by its diagonal.

    With ``positions=True`` the input is ``(..., b, L, c)`` (``L`` positions of ``c``
    channels per sample, as after a convolution) and each channel is standardized over
    all samples *and* positions, like ``torch.nn.BatchNorm1d`` on ``(b, c, L)``.
    Leading dimensions are independent batches. Equals
    ``F.batch_norm(X, None, None, training=True, eps=eps)`` (channels-first layout).
    """
    _check(X, 3 if positions else 2, "batch_norm" + (" with positions" if positions else ""))
    eps = _check_eps(eps)
    dims = (-3, -2) if positions else (-2,)
    return _affine(_standardize(X, dims, eps), weight, bias)


def instance_norm(
    X: Tensor,
    eps: float = 1e-5,
    *,
    weight: Optional[Tensor] = None,
    bias: Optional[Tensor] = None,
) -> Tensor:
    r"""InstanceNorm: standardize every channel of every sample over its positions.

    ``X`` has shape ``(..., b, L, c)``: ``b`` samples, each a matrix of ``L`` positions
    (rows) by ``c`` channels (columns) -- the rows a pointwise (1x1) linear layer sees.
    Channel :math:`k` of sample :math:`n` is centered and scaled by its own mean and
    biased variance over the ``L`` positions. This is :func:`batch_norm` applied to
    each sample's ``(L, c)`` matrix on its own: the "batch" of InstanceNorm is one
    sample's positions. Equals ``F.instance_norm`` on the channels-first ``(b, c, L)``
    layout.
    """
    _check(X, 3, "instance_norm")
    eps = _check_eps(eps)
    if X.shape[-2] < 2:
        raise ValueError("instance_norm needs at least 2 positions per sample (dim -2); "
                         "with one position every output would be 0")
    return _affine(_standardize(X, (-2,), eps), weight, bias)


def layer_norm(
    X: Tensor,
    eps: float = 1e-5,
    *,
    weight: Optional[Tensor] = None,
    bias: Optional[Tensor] = None,
) -> Tensor:
    r"""LayerNorm: center and scale each sample (row) over its ``d`` features.

    :math:`\hat x = (x - \bar x\mathbf 1)/\sqrt{s^2 + \epsilon}` with :math:`\bar x, s^2`
    the mean and biased variance of the row. Then :math:`\|\hat x\|^2 \approx d` for every
    sample: the diagonal of the Gram matrix is equalized, and every row is orthogonal
    to :math:`\mathbf 1`. Equals ``F.layer_norm(X, (d,), eps=eps)``.
    """
    _check(X, 1, "layer_norm")
    eps = _check_eps(eps)
    return _affine(_standardize(X, (-1,), eps), weight, bias)


def rms_norm(X: Tensor, eps: Optional[float] = None, *, weight: Optional[Tensor] = None) -> Tensor:
    r"""RMSNorm: scale each sample (row) to root-mean-square 1, without centering.

    :math:`\hat x = x/\sqrt{\|x\|^2/d + \epsilon}`, so :math:`\|\hat x\|^2 \approx d`: a
    diagonal matrix on the left, :math:`\hat X = D X`, that makes the diagonal of the
    Gram matrix :math:`d`. It commutes with rotations of the features,
    :math:`\operatorname{rms}(XQ) = \operatorname{rms}(X)Q`. ``eps=None`` means the
    machine epsilon of ``X.dtype``, as in ``F.rms_norm``, which it equals.
    """
    _check(X, 1, "rms_norm")
    eps = torch.finfo(X.dtype).eps if eps is None else _check_eps(eps)
    return _affine(_standardize(X, (-1,), eps, center=False), weight, None)


def normalize(X: Tensor, method: str) -> Tensor:
    r"""Apply one of :data:`METHODS` to a batch ``X`` of shape ``(..., b, d)``.

    ``"none"`` (a copy), ``"batch"`` (:func:`batch_norm`), ``"layer"``
    (:func:`layer_norm`), ``"rms"`` (:func:`rms_norm`), and full whitening by
    :func:`isolab.linalg.whiten` without centering, as in the whitening problem:
    ``"zca"`` (:math:`X\operatorname{Cov}(X)^{-1/2}`) and ``"pca"`` (coordinates along
    the principal axes). All use the functions' default ``eps``.
    """
    if method == "none":
        return X.clone()
    if method == "batch":
        return batch_norm(X)
    if method == "layer":
        return layer_norm(X)
    if method == "rms":
        return rms_norm(X)
    if method in ("zca", "pca"):
        return whiten(X, center=False, kind=method)
    raise ValueError(f"method must be one of {METHODS}, got {method!r}")


def whitening_objective(X: Tensor, A: Tensor) -> Tensor:
    r"""The blog's whitening objective :math:`\|XAA^\top X^\top - I_b\|_F` (batched).

    ``X`` is ``(..., b, d)`` and ``A`` is ``(..., d, k)``. Its minimum over ``A`` is
    :math:`\sqrt{b - \operatorname{rank} X}`, reached by every ``A`` with
    :math:`AA^\top = (X^\top X)^{+}` (the pseudo-inverse; the inverse when ``X`` has full
    column rank): with the thin SVD :math:`X = USV^\top`, the Gram matrix
    :math:`XAA^\top X^\top` lives in the column space of :math:`U` and can at best equal
    the projector :math:`UU^\top`, whose distance from :math:`I_b` is
    :math:`\sqrt{b - \operatorname{rank}X}`.
    """
    _check(X, 2, "whitening_objective")
    XA = X @ A
    K = XA @ XA.mT
    eye = torch.eye(K.shape[-1], dtype=K.dtype, device=K.device)
    return torch.linalg.matrix_norm(K - eye)


def whitening_matrix(X: Tensor, kind: str = "zca", center: bool = False) -> Tensor:
    r"""The :math:`d\times d` matrix :math:`W` behind :func:`isolab.linalg.whiten`:
    ``whiten(X, center, kind) == X_c @ W`` (``X_c`` = ``X``, centered if ``center``).

    Read off as :math:`W = X_c^{+}\,\mathrm{whiten}(X)`; both whitenings have their range
    in the row space of :math:`X_c`, so this is exact, also when :math:`b < d`. For
    ``kind="zca"`` it is the symmetric :math:`\operatorname{Cov}(X)^{-1/2}`; for
    ``kind="pca"`` it is :math:`V\Lambda^{-1/2}` (eigenvectors in columns, descending
    variance), which equals :math:`\operatorname{Cov}(X)^{-1/2} V`: the two differ by the
    rotation :math:`V`. Applying ``W`` to *another* batch whitens it with this batch's
    statistics.
    """
    _check(X, 2, "whitening_matrix")
    Xc = X - X.mean(dim=-2, keepdim=True) if center else X
    return torch.linalg.pinv(Xc) @ whiten(X, center=center, kind=kind)


def coordinate_correlation(X: Tensor, Z: Tensor) -> Tensor:
    r"""Pearson correlation between column :math:`j` of ``X`` and column :math:`j` of
    ``Z`` over the batch, for every :math:`j`: shape ``(..., d)``.

    Measures whether a transform keeps the *identity* of each coordinate: close to 1
    when output coordinate :math:`j` still tracks input coordinate :math:`j`, near 0 or
    negative when the transform moved it elsewhere. NaN for a constant column.
    """
    if X.shape != Z.shape:
        raise ValueError(f"X and Z must have the same shape, got {tuple(X.shape)} and {tuple(Z.shape)}")
    _check(X, 2, "coordinate_correlation")
    Xc = X - X.mean(dim=-2, keepdim=True)
    Zc = Z - Z.mean(dim=-2, keepdim=True)
    inner = (Xc * Zc).sum(dim=-2)
    norms = torch.linalg.vector_norm(Xc, dim=-2) * torch.linalg.vector_norm(Zc, dim=-2)
    return torch.where(norms > 0, inner / norms.clamp_min(torch.finfo(X.dtype).tiny), torch.nan)
