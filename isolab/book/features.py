r"""Gaussian features with a chosen spectrum and rotation.

The book's experiments draw a batch of inputs ``X`` (one row per sample) from
:math:`\mathcal N(0, \Sigma)` and turn two knobs of :math:`\Sigma`:

* its **condition number** :math:`\kappa`: eigenvalues spaced geometrically from
  :math:`1` to :math:`\kappa` and rescaled so that :math:`\operatorname{tr}\Sigma = d`.
  The mean eigenvalue is 1 for every :math:`\kappa`, so :math:`\mathbb E\|x\|^2 = d`:
  moving :math:`\kappa` changes the *shape* of the cloud, not its size.
* its **rotation** :math:`\theta`: :math:`\Sigma = R(\theta)\,\Lambda\,R(\theta)^\top`,
  where :math:`R(\theta)` turns each pair of eigen-directions ``(i, d-1-i)`` — the
  largest with the smallest, the second largest with the second smallest, and so on —
  by the angle :math:`\theta`. At :math:`\theta = 0` the covariance is diagonal (each
  coordinate is an eigen-direction); at :math:`\theta = \pi/4` every coordinate mixes a
  large and a small eigenvalue, so the diagonal of :math:`\Sigma` is nearly flat even
  when :math:`\kappa` is large. Anything that only looks at single coordinates
  (sign, per-coordinate scaling, BatchNorm) sees the rotation; anything built from the
  Gram matrix or from :math:`X^\top X` as a whole sees only the spectrum.

All functions are pure and take an explicit ``generator`` for sampling.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch

__all__ = [
    "spectrum",
    "pair_rotation",
    "covariance",
    "covariance_sqrt",
    "gaussian_features",
]


def _check_dim(d: int) -> None:
    if not isinstance(d, int) or d < 1:
        raise ValueError(f"dimension d must be a positive int, got {d!r}")


def spectrum(d: int, condition_number: float = 1.0, *, dtype=torch.float64, device=None) -> torch.Tensor:
    r"""Eigenvalues :math:`\lambda_1 \ge \dots \ge \lambda_d`, geometric from
    :math:`\kappa` down to 1 in ratio, normalised to mean 1 (so :math:`\sum\lambda_i = d`).

    ``condition_number`` is :math:`\kappa = \lambda_1/\lambda_d \ge 1`.
    """
    _check_dim(d)
    kappa = float(condition_number)
    if not math.isfinite(kappa) or kappa < 1.0:
        raise ValueError(f"condition_number must be a finite number >= 1, got {condition_number!r}")
    if d == 1:
        return torch.ones(1, dtype=dtype, device=device)
    exponents = torch.linspace(1.0, 0.0, d, dtype=dtype, device=device)
    lam = torch.as_tensor(kappa, dtype=dtype, device=device) ** exponents
    return lam * (d / lam.sum())


def pair_rotation(d: int, angle: float, *, dtype=torch.float64, device=None) -> torch.Tensor:
    r"""Orthogonal :math:`R(\theta)` that turns each coordinate pair ``(i, d-1-i)`` by
    ``angle`` radians (the middle coordinate of an odd ``d`` stays put)."""
    _check_dim(d)
    if not math.isfinite(float(angle)):
        raise ValueError(f"angle must be finite, got {angle!r}")
    R = torch.eye(d, dtype=dtype, device=device)
    c, s = math.cos(angle), math.sin(angle)
    for i in range(d // 2):
        j = d - 1 - i
        R[i, i], R[i, j] = c, -s
        R[j, i], R[j, j] = s, c
    return R


def covariance(d: int, condition_number: float = 1.0, angle: float = 0.0, *, dtype=torch.float64, device=None) -> torch.Tensor:
    r""":math:`\Sigma = R(\theta)\,\operatorname{diag}(\lambda)\,R(\theta)^\top` (see module docstring)."""
    lam = spectrum(d, condition_number, dtype=dtype, device=device)
    R = pair_rotation(d, angle, dtype=dtype, device=device)
    return (R * lam) @ R.T


def covariance_sqrt(d: int, condition_number: float = 1.0, angle: float = 0.0, *, dtype=torch.float64, device=None) -> torch.Tensor:
    r"""The symmetric square root :math:`\Sigma^{1/2} = R\,\operatorname{diag}(\sqrt\lambda)\,R^\top`."""
    lam = spectrum(d, condition_number, dtype=dtype, device=device)
    R = pair_rotation(d, angle, dtype=dtype, device=device)
    return (R * lam.sqrt()) @ R.T


def gaussian_features(
    batch: int,
    d: int,
    condition_number: float = 1.0,
    angle: float = 0.0,
    *,
    generator: torch.Generator | None = None,
    sample_shape: Sequence[int] = (),
    dtype=torch.float64,
    device=None,
) -> torch.Tensor:
    r"""A batch ``X`` of shape ``(*sample_shape, batch, d)`` with rows
    :math:`x = R(\theta)\,\Lambda^{1/2} z`, :math:`z \sim \mathcal N(0, I_d)`, so that
    :math:`\operatorname{Cov}(x) = R\Lambda R^\top = \Sigma`.

    The rotation acts on the samples themselves: with the same generator, changing
    ``angle`` turns the *same* cloud of points (``X(θ) = X(0) R(θ)ᵀ``), and everything
    that depends only on the Gram matrix :math:`XX^\top` stays exactly the same. (Multiplying
    ``z`` by the symmetric root :math:`\Sigma^{1/2}` would give the same distribution but a
    different cloud for every angle, mixing the effect of the rotation with that of a
    new draw.) ``sample_shape`` adds independent leading dimensions (for example one batch
    per seed or per learning rate).
    """
    if not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch must be a positive int, got {batch!r}")
    _check_dim(d)
    z = torch.randn(*sample_shape, batch, d, generator=generator, dtype=dtype, device=device)
    lam = spectrum(d, condition_number, dtype=dtype, device=device)
    scaled = z * lam.sqrt()
    if angle == 0:
        return scaled
    return scaled @ pair_rotation(d, angle, dtype=dtype, device=device).T
