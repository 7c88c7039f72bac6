r"""Reparametrizations of a linear layer and how an update rule responds to them.

A linear layer ``Y = X W`` (row convention, ``X`` of shape ``(..., b, n)``, output
gradients ``G`` of shape ``(..., b, m)``) can be reparametrized by invertible matrices
``A`` (``n x n``) and ``B`` (``m x m``): the layer then sees the inputs ``X A`` and, when
the loss reads its outputs through ``B^T``, the output gradients ``G B``.  An update rule
``update(X, G)`` (any function of :mod:`isolab.updates`) satisfies the paper's *invariant
step-size principle* when ``||update(X A, G B)|| = ||update(X, G)||``.

This module draws such transforms with a chosen condition number and measures the
response:

- :func:`random_orthogonal`: Haar-distributed orthogonal matrices (condition number 1), from
  :func:`isolab.linalg.random_orthogonal`.
- :func:`random_invertible`: ``U diag(s) V^T`` with Haar ``U``, ``V`` and singular values
  ``s`` spaced geometrically from ``sqrt(kappa)`` down to ``1/sqrt(kappa)`` (so the
  condition number is exactly ``kappa`` and ``|det| = 1``).  ``kappa = 1`` gives a random
  orthogonal matrix.
- :func:`random_positive_diagonal`: positive diagonal matrices with the same geometric
  spectrum in a random order (the transforms Adam is invariant to).
- :func:`norm_ratio`: ``||update(X A, G B)|| / ||update(X, G)||`` in the Frobenius,
  spectral or nuclear norm.
- :func:`relative_change`: ``||new - old||_F / ||old||_F``.
- :func:`induced_rotation`: the orthogonal matrix ``M = msign(Cov(X)^{1/2} A)`` by which a
  reparametrization acts on the *whitened* inputs, ``X A Cov(X A)^{-1/2} = X Cov(X)^{-1/2} M``;
  hence ``iso_update(X A, G B) = M_X^T iso_update(X, G) M_G``, which is why Iso's singular
  values (not only its norm) are invariant.

All functions are pure, batched over leading dimensions, and take an explicit
``generator`` where they sample.
"""

from __future__ import annotations

import math
from numbers import Real
from typing import Callable, Sequence

import torch
from torch import Tensor

from isolab.linalg import _check_matrix, covariance, msign, random_orthogonal  # noqa: F401 (kept as invariance.random_orthogonal)

__all__ = [
    "random_invertible",
    "random_positive_diagonal",
    "geometric_spectrum",
    "norm_ratio",
    "relative_change",
    "induced_rotation",
]

_ORDS = ("fro", 2, "nuc")


def _check_n(n) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    return n


def _check_kappa(kappa) -> float:
    if isinstance(kappa, bool) or not isinstance(kappa, Real) or not math.isfinite(kappa) or kappa < 1:
        raise ValueError(f"condition_number must be a finite real number >= 1, got {kappa!r}")
    return float(kappa)


def _shape(sample_shape: Sequence[int]) -> tuple[int, ...]:
    shape = tuple(sample_shape)
    if not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape):
        raise ValueError(f"sample_shape must be a sequence of non-negative ints, got {sample_shape!r}")
    return shape


def geometric_spectrum(n: int, condition_number: float, *, dtype=torch.float64, device=None) -> Tensor:
    r"""``s_i = kappa^{1/2 - (i-1)/(n-1)}``, ``i = 1..n``: from ``sqrt(kappa)`` down to ``1/sqrt(kappa)``.

    The ratio of the largest to the smallest value is exactly ``kappa`` and the product is 1
    (geometric mean 1), so a matrix with these singular values neither grows nor shrinks
    volumes.  For ``n = 1`` the single value is 1 (only ``kappa = 1`` is possible).
    """
    n = _check_n(n)
    kappa = _check_kappa(condition_number)
    if n == 1:
        if kappa != 1.0:
            raise ValueError(f"a 1 x 1 matrix has condition number 1, got condition_number={condition_number!r}")
        return torch.ones(1, dtype=dtype, device=device)
    exponents = torch.linspace(0.5, -0.5, n, dtype=dtype, device=device)
    return torch.as_tensor(kappa, dtype=dtype, device=device) ** exponents


def random_invertible(
    n: int,
    condition_number: float,
    *,
    generator: torch.Generator,
    sample_shape: Sequence[int] = (),
    dtype=torch.float64,
    device=None,
) -> Tensor:
    r"""Random invertible ``A = U diag(s) V^T`` with condition number exactly ``kappa``.

    ``U``, ``V`` Haar-orthogonal (independent), ``s`` = :func:`geometric_spectrum`
    (``sqrt(kappa)`` down to ``1/sqrt(kappa)``, ``|det A| = 1``).  Both the singular
    directions and the amount of stretching are generic, so ``A`` mixes coordinates *and*
    rescales them.  ``kappa = 1`` gives ``U V^T``: a random orthogonal matrix.
    Shape ``(*sample_shape, n, n)``.
    """
    s = geometric_spectrum(n, condition_number, dtype=dtype, device=device)
    shape = _shape(sample_shape)
    U = random_orthogonal(n, generator=generator, sample_shape=shape, dtype=dtype, device=device)
    V = random_orthogonal(n, generator=generator, sample_shape=shape, dtype=dtype, device=device)
    return (U * s) @ V.mT


def random_positive_diagonal(
    n: int,
    condition_number: float,
    *,
    generator: torch.Generator,
    sample_shape: Sequence[int] = (),
    dtype=torch.float64,
    device=None,
) -> Tensor:
    r"""Positive diagonal matrices ``D`` with condition number exactly ``kappa``.

    The diagonal is :func:`geometric_spectrum` in an independent random order per sample:
    each coordinate is rescaled by a factor between ``1/sqrt(kappa)`` and ``sqrt(kappa)``
    and nothing is mixed.  Shape ``(*sample_shape, n, n)``.
    """
    s = geometric_spectrum(n, condition_number, dtype=dtype, device=device)
    shape = _shape(sample_shape)
    keys = torch.rand(*shape, n, generator=generator, dtype=dtype, device=device)
    order = keys.argsort(dim=-1)
    return torch.diag_embed(s[order])


def _matrix_norm(M: Tensor, ord) -> Tensor:
    if ord == "fro":
        return torch.linalg.matrix_norm(M, ord="fro")
    if ord == 2:
        return torch.linalg.svdvals(M)[..., 0]
    return torch.linalg.svdvals(M).sum(-1)


def norm_ratio(
    update: Callable[[Tensor, Tensor], Tensor],
    X: Tensor,
    G: Tensor,
    A: Tensor,
    B: Tensor,
    ord="fro",
) -> Tensor:
    r"""``||update(X A, G B)|| / ||update(X, G)||``: how a reparametrization changes a step size.

    ``update`` is any rule ``(X, G) -> (n, m) direction`` such as
    :func:`isolab.updates.iso_update`; ``X`` ``(..., b, n)``, ``G`` ``(..., b, m)``,
    ``A`` ``(..., n, n)``, ``B`` ``(..., m, m)`` broadcast over leading dimensions.
    ``ord``: ``"fro"`` (Frobenius), ``2`` (spectral: the largest singular value) or
    ``"nuc"`` (nuclear: the sum of singular values).  A ratio of 1 for every invertible
    ``A``, ``B`` is the invariant step-size principle.  Returns shape ``(...)``; NaN where
    the untransformed update is zero (0/0).
    """
    for name, M in (("X", X), ("G", G)):
        _check_matrix(name, M)
    _check_matrix("A", A, square=True)
    _check_matrix("B", B, square=True)
    if A.shape[-1] != X.shape[-1]:
        raise ValueError(f"A must be ({X.shape[-1]}, {X.shape[-1]}) to act on X {tuple(X.shape)}, got {tuple(A.shape)}")
    if B.shape[-1] != G.shape[-1]:
        raise ValueError(f"B must be ({G.shape[-1]}, {G.shape[-1]}) to act on G {tuple(G.shape)}, got {tuple(B.shape)}")
    if ord not in _ORDS:
        raise ValueError(f"ord must be one of {_ORDS}, got {ord!r}")
    before = _matrix_norm(update(X, G), ord)
    after = _matrix_norm(update(X @ A, G @ B), ord)
    return after / before


def relative_change(new: Tensor, old: Tensor) -> Tensor:
    r"""``||new - old||_F / ||old||_F`` over the last two dimensions (batched)."""
    _check_matrix("new", new)
    _check_matrix("old", old)
    return torch.linalg.matrix_norm(new - old) / torch.linalg.matrix_norm(old)


def induced_rotation(X: Tensor, A: Tensor) -> Tensor:
    r"""The orthogonal ``M = msign(Cov(X)^{1/2} A)`` that ``X -> X A`` induces on whitened inputs.

    With ``C = Cov(X) = X^T X / b`` nonsingular and ``A`` invertible,
    ``M = C^{1/2} A (A^T C A)^{-1/2}`` satisfies ``M^T M = I`` and

        ``X A Cov(X A)^{-1/2} = X C^{-1/2} M``:

    whitening the transformed inputs gives the whitened original inputs, rotated by ``M``.
    Applied on both sides of Iso's update ``Xw^T Gw / b`` this gives
    ``iso_update(X A, G B) = M_X^T iso_update(X, G) M_G``: the singular values are
    unchanged, while the update itself changes unless ``M_X = A``, ``M_G = B`` (``A``, ``B``
    orthogonal).  ``X`` ``(..., b, n)`` with ``b >= n`` and full column rank; ``A``
    ``(..., n, n)``.
    """
    _check_matrix("X", X)
    _check_matrix("A", A, square=True)
    if A.shape[-1] != X.shape[-1]:
        raise ValueError(f"A must be ({X.shape[-1]}, {X.shape[-1]}) to act on X {tuple(X.shape)}, got {tuple(A.shape)}")
    C = covariance(X)
    w, V = torch.linalg.eigh(0.5 * (C + C.mT))
    if not bool((w > w.amax(-1, keepdim=True) * w.shape[-1] * torch.finfo(w.dtype).eps).all()):
        raise ValueError("induced_rotation needs Cov(X) nonsingular (b >= n and X of full column rank)")
    root = (V * w.sqrt().unsqueeze(-2)) @ V.mT
    return msign(root @ A)
