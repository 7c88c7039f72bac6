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

import math

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


# ----------------------------------------------------------------------------- Chapter 2
# Norms and angles of Gaussian vectors, the best batch for b > d (a tight frame), and what
# a Gaussian batch achieves on average. Added for Chapter 2; the functions above are the
# measure itself and keep their meaning.

__all__ += ["norm_moments", "norm_density", "angle_density", "pairwise_cosines", "tight_frame", "gaussian_gram_isotropy"]


def norm_moments(d) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Exact mean and variance of :math:`\|x\|` for :math:`x \sim \mathcal N(0, I_d)`.

    :math:`\|x\|^2 \sim \chi^2_d` has mean :math:`d` and variance :math:`2d`; the norm
    itself has

    .. math:: \mathbb E\|x\| = \sqrt 2\,\frac{\Gamma(\tfrac{d+1}{2})}{\Gamma(\tfrac d2)},
              \qquad \operatorname{Var}\|x\| = d - (\mathbb E\|x\|)^2
              = \tfrac12 - \tfrac1{8d} + O(d^{-2}).

    ``d`` is a positive number or a tensor of them (batched). The result is float64 and
    accurate to about :math:`10^{-12}` (relative) for every ``d``: ``lgamma`` for small
    ``d``, Stirling's series for large ``d``, where the variance is a small difference of
    large numbers.
    """
    d = torch.as_tensor(d, dtype=torch.float64)
    if (d <= 0).any() or not torch.isfinite(d).all():
        raise ValueError("the dimension d must be positive and finite")
    # log((E||x||)^2 / d). For small d straight from lgamma; for large d the difference
    # of two large lgamma values cancels, so use Stirling's series for it instead:
    # L = d log(1 + 1/d) - 1 + 2 (S((d+1)/2) - S(d/2)), S(z) = 1/(12z) - 1/(360z^3) + 1/(1260z^5).
    small = torch.log(2 / d) + 2 * (torch.lgamma((d + 1) / 2) - torch.lgamma(d / 2))

    def stirling_tail(z):
        return 1 / (12 * z) - 1 / (360 * z**3) + 1 / (1260 * z**5)

    big_d = d.clamp_min(50.0)
    h = 1 / big_d
    # d log(1 + 1/d) - 1, by its series once 1/d is small enough for the subtraction to cancel
    log_term = torch.where(big_d > 1000, h * (-1 / 2 + h * (1 / 3 + h * (-1 / 4 + h * (1 / 5 - h / 6)))),
                           big_d * torch.log1p(h) - 1)
    large = log_term + 2 * (stirling_tail((big_d + 1) / 2) - stirling_tail(big_d / 2))
    log_ratio = torch.where(d >= 50, large, small)
    mean = torch.sqrt(d * torch.exp(log_ratio))
    return mean, -d * torch.expm1(log_ratio)


def norm_density(r, d: int) -> torch.Tensor:
    r"""Density of :math:`\|x\|` at ``r >= 0`` for :math:`x \sim \mathcal N(0, I_d)` (the
    :math:`\chi_d` distribution):

    .. math:: p(r) = \frac{r^{d-1} e^{-r^2/2}}{2^{d/2-1}\,\Gamma(d/2)}.

    Evaluated in log space, so large ``d`` neither overflows nor underflows near the
    peak at :math:`r = \sqrt{d-1}`. ``r`` is a tensor (any shape) or a number."""
    if not isinstance(d, int) or d < 1:
        raise ValueError(f"d must be a positive int, got {d!r}")
    r = torch.as_tensor(r, dtype=torch.float64)
    log_p = (d - 1) * torch.log(r.clamp_min(1e-300)) - r.square() / 2 - (d / 2 - 1) * math.log(2) - math.lgamma(d / 2)
    return torch.where(r >= 0, torch.exp(log_p), torch.zeros_like(r))


def angle_density(theta, d: int) -> torch.Tensor:
    r"""Density of the angle :math:`\theta \in [0, \pi]` (radians) between two independent
    :math:`\mathcal N(0, I_d)` vectors, :math:`d \ge 2`:

    .. math:: p(\theta) = \frac{\Gamma(d/2)}{\sqrt\pi\,\Gamma(\tfrac{d-1}{2})}\,\sin^{d-2}\theta .

    Equivalently :math:`t = \cos\theta` has density proportional to
    :math:`(1 - t^2)^{(d-3)/2}`, with mean 0 and variance :math:`1/d`: the angle
    concentrates at :math:`\pi/2` with a spread of about :math:`1/\sqrt d`."""
    if not isinstance(d, int) or d < 2:
        raise ValueError(f"d must be an int >= 2, got {d!r}")
    theta = torch.as_tensor(theta, dtype=torch.float64)
    log_c = math.lgamma(d / 2) - math.lgamma((d - 1) / 2) - 0.5 * math.log(math.pi)
    sin = torch.sin(theta).clamp_min(0)
    inside = (theta >= 0) & (theta <= math.pi)
    if d == 2:
        return torch.where(inside, torch.full_like(theta, math.exp(log_c)), torch.zeros_like(theta))
    return torch.where(inside, torch.exp(log_c + (d - 2) * torch.log(sin.clamp_min(1e-300))), torch.zeros_like(theta))


def pairwise_cosines(X: torch.Tensor) -> torch.Tensor:
    r"""Cosines :math:`\langle x_i, x_j\rangle/(\|x_i\|\|x_j\|)` between the distinct rows
    :math:`i < j` of ``X`` (shape ``(..., b, d)``), as ``(..., b(b-1)/2)`` in row-major
    order of the upper triangle. Zero rows give NaN (no direction)."""
    if X.ndim < 2:
        raise ValueError(f"expected a batch of rows (..., b, d), got shape {tuple(X.shape)}")
    b = X.shape[-2]
    norms = torch.linalg.vector_norm(X, dim=-1)
    safe = torch.where(norms > 0, norms, torch.nan)
    U = X / safe[..., None]
    C = U @ U.transpose(-1, -2)
    i, j = torch.triu_indices(b, b, offset=1, device=X.device)
    # index_select rather than C[..., i, j]: same values, but advanced indexing runs a
    # parallel kernel whose start-up dominates (tens of ms on a busy machine) at these sizes
    return C.flatten(-2).index_select(-1, i * b + j)


def tight_frame(b: int, d: int, *, dtype=torch.float64, device=None) -> torch.Tensor:
    r"""``b`` unit vectors in :math:`\mathbb R^d` (``b >= d``) forming an equal-norm tight
    frame: the rows :math:`x_k` of the result satisfy :math:`\|x_k\| = 1` and

    .. math:: X^\top X = \tfrac bd\, I_d, \qquad XX^\top = \tfrac bd\, P,

    with :math:`P` an orthogonal projector of rank :math:`d`. The Gram matrix therefore
    has :math:`d` equal nonzero eigenvalues and Gram-side isotropy exactly :math:`d/b`, the
    largest any ``b`` points in ``d`` dimensions can have; among unit vectors these are
    also the minimizers of the frame potential :math:`\|XX^\top\|_F^2 = b^2/d`
    (Benedetto and Fickus, 2003): points spread as evenly as possible over the sphere.

    The construction is the *harmonic frame*: row :math:`k` holds
    :math:`\sqrt{2/d}\,(\cos\frac{2\pi k m}{b}, \sin\frac{2\pi k m}{b})` for
    :math:`m = 1, \dots, \lfloor d/2\rfloor`, plus the constant :math:`1/\sqrt d` when
    :math:`d` is odd; for :math:`d = 2` these are ``b`` points equally spaced on the
    circle. For ``b == d`` the result is the identity (an orthonormal basis).
    """
    if not isinstance(b, int) or not isinstance(d, int) or b < 1 or d < 1:
        raise ValueError(f"b and d must be positive ints, got b={b!r}, d={d!r}")
    if b < d:
        raise ValueError(f"a tight frame needs b >= d vectors, got b={b} < d={d}; for b <= d use orthonormal rows")
    if b == d:
        return torch.eye(d, dtype=dtype, device=device)
    k = torch.arange(b, dtype=torch.float64)[:, None]
    m = torch.arange(1, d // 2 + 1, dtype=torch.float64)[None, :]
    phase = 2 * torch.pi * k * m / b
    columns = [torch.cos(phase), torch.sin(phase)]
    frame = torch.stack(columns, dim=-1).reshape(b, 2 * (d // 2)) * (2.0 / d) ** 0.5
    if d % 2:
        frame = torch.cat([torch.full((b, 1), d**-0.5, dtype=torch.float64), frame], dim=1)
    return frame.to(dtype=dtype, device=device)


def gaussian_gram_isotropy(batch: int, C: torch.Tensor) -> torch.Tensor:
    r"""The Gram-side isotropy a Gaussian batch reaches: for ``batch`` rows drawn from
    :math:`\mathcal N(0, C)` and :math:`K = XX^\top`,

    .. math:: \frac{\mathbb E[(\operatorname{tr}K)^2]}{b\,\mathbb E\|K\|_F^2}
              = \frac{b\rho + 2}{b\,(\rho + b + 1)},
              \qquad \rho = r(C) = \frac{(\operatorname{tr}C)^2}{\|C\|_F^2},

    from :math:`\mathbb E\|x\|^4 = (\operatorname{tr}C)^2 + 2\operatorname{tr}C^2` and
    :math:`\mathbb E\langle x, y\rangle^2 = \operatorname{tr}C^2` for independent
    :math:`x, y`. It is a ratio of expectations, close to the mean isotropy once the
    batch is not tiny. Only the effective rank :math:`\rho` of :math:`C` enters: it is
    :math:`\approx 1` for :math:`b \ll \rho` and :math:`\approx \rho/b` for
    :math:`b \gg \rho`. ``C`` may carry leading batch dimensions."""
    if not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch must be a positive int, got {batch!r}")
    rho = effective_rank(C)
    return (batch * rho + 2) / (batch * (rho + batch + 1))
