r"""Gradient noise and batch size: what Adam, SGD and Iso do as the batch grows.

A linear layer ``Y = X W`` (row convention) sees the batch-mean gradient
``g = X^T G / b``.  Its expectation is the *true gradient* ``E[x g^T]``; its noise is the
average of ``b`` independent per-sample terms, so every entry has variance
``sigma^2 / b`` where ``sigma^2`` is the variance of one sample's term.  This module
holds the pieces Chapter 7 needs to watch that noise at work:

- :func:`equivalent_batch`, :func:`noise_batch`: standard Gaussian batches of *any* size
  ``b`` (up to ``1e12`` and beyond) represented by at most ``dim`` rows whose covariance
  ``Z^T Z / rows`` has exactly the distribution of a real ``b``-row batch's
  ``Z^T Z / b`` (Bartlett's decomposition of the Wishart matrix).  Every quantity of
  :mod:`isolab.updates` (``X^T G / b``, ``Cov(X)``, ``Cov(G)``) is a function of that
  covariance, so SGD, Adam and Iso updates computed from the small stand-in have exactly
  the distribution of those of the huge batch.
- :func:`outer_product_moments`, :func:`gradient_moments`: the true gradient and the
  per-sample variance of every gradient entry of a problem in :mod:`isolab.book.problems`, in
  closed form (Isserlis' theorem for Gaussian inputs).
- :func:`balles_hennig`: the large-sample value of Adam's ``m / sqrt(v)``,
  ``mu / sqrt(mu^2 + s^2) = sgn(mu) / sqrt(1 + s^2/mu^2)`` (Balles and Hennig, 2018).
- :func:`adam_run`: real ``torch.optim.Adam`` on a problem, recording at every step
  Adam's update direction, the true gradient and the gradient variance at the weights
  where the step was taken.
- :func:`adam_directions`: real ``torch.optim.Adam`` fed a given sequence of gradients
  (Adam is elementwise, so many independent streams share one parameter tensor).
- :func:`adam_first_step_moment`: ``E[(|g| / (|g| + eps))^p]`` for
  ``g ~ N(0, scale^2)``, the size of Adam's first step on pure noise.
- :func:`distance_to_sign`, :func:`loglog_slopes`: the two measurements the chapter
  prints.

All functions are pure (the runs build their own model and optimizer), take explicit
generators or seeds, and compute in float64.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Optional, Sequence

import torch
from torch import Tensor

from isolab import rules
from .problems import LinearProblem, OneStepRegression, derived_generator

__all__ = [
    "equivalent_batch",
    "noise_batch",
    "equivalent_problem_batch",
    "input_covariance",
    "outer_product_moments",
    "gradient_moments",
    "balles_hennig",
    "AdamRun",
    "adam_run",
    "adam_directions",
    "adam_first_step_moment",
    "distance_to_sign",
    "loglog_slopes",
]

F64 = torch.float64


def _check_count(name: str, value, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral) or value < low:
        raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    return int(value)


def _check_shape(sample_shape) -> tuple:
    shape = tuple(sample_shape)
    if not all(isinstance(s, Integral) and not isinstance(s, bool) and s >= 0 for s in shape):
        raise ValueError(f"sample_shape must be a tuple of ints >= 0, got {sample_shape!r}")
    return tuple(int(s) for s in shape)


# ----------------------------------------------------------------------------- batches of any size
def _chi2(dof: Tensor, generator: Optional[torch.Generator]) -> Tensor:
    """``chi^2`` samples with (float) degrees of freedom ``dof``: ``2 * Gamma(dof/2, 1)``."""
    return 2.0 * torch._standard_gamma(dof / 2.0, generator=generator)


def equivalent_batch(
    batch: int, dim: int, *, generator: Optional[torch.Generator] = None, sample_shape: Sequence[int] = (),
    compress: bool = True,
) -> Tensor:
    r"""A batch of ``batch`` standard Gaussian rows in ``R^dim``, stored in ``min(batch, dim)`` rows.

    For ``batch <= dim`` (or ``compress=False``) this is an ordinary sample: ``batch`` rows
    with i.i.d. ``N(0, 1)`` entries.  For ``batch > dim`` it returns ``r = dim`` rows
    ``Z_c = sqrt(r / b) L^T`` with ``L`` the lower-triangular Bartlett factor of a
    Wishart matrix: ``L_ii = sqrt(chi^2_{b-i})`` (``i = 0, ..., dim-1``) and
    ``L_ij ~ N(0, 1)`` below the diagonal, all independent.  Bartlett's theorem says
    ``L L^T`` has the distribution of ``Z^T Z`` for a real ``b x dim`` Gaussian ``Z``, so

        ``Z_c^T Z_c / r = L L^T / b  ~  Z^T Z / b``:

    the stand-in's covariance (the convention of :func:`isolab.linalg.covariance` and of
    :mod:`isolab.updates`, which divide by the number of rows) has exactly the
    distribution of the real batch's.  Splitting the columns into ``X`` and ``G``
    (:func:`noise_batch`) therefore gives ``sgd_update``, ``adam_first_step`` and
    ``iso_update`` exactly the joint distribution they have on the real batch, at a cost
    ``O(dim^2)`` instead of ``O(b dim)``.  (Only functions of the covariance carry over:
    the rows themselves are not Gaussian samples.)

    Returns a float64 tensor of shape ``(*sample_shape, min(batch, dim), dim)`` (``batch``
    rows when ``compress=False``).
    """
    batch = _check_count("batch", batch)
    dim = _check_count("dim", dim)
    shape = _check_shape(sample_shape)
    if not isinstance(compress, bool):
        raise ValueError(f"compress must be a bool, got {compress!r}")
    if batch <= dim or not compress:
        return torch.randn(*shape, batch, dim, generator=generator, dtype=F64)
    dof = torch.arange(batch, batch - dim, -1, dtype=F64).expand(*shape, dim).contiguous()
    diag = _chi2(dof, generator).sqrt()
    below = torch.randn(*shape, dim, dim, generator=generator, dtype=F64).tril(-1)
    L = below + torch.diag_embed(diag)
    return math.sqrt(dim / batch) * L.mT


def noise_batch(
    n: int, m: int, batch: int, *, generator: Optional[torch.Generator] = None, sample_shape: Sequence[int] = (),
    compress: bool = True,
) -> tuple[Tensor, Tensor]:
    r"""Inputs ``X`` and output gradients ``G`` of a layer with *zero true gradient*.

    ``x ~ N(0, I_n)`` and ``g ~ N(0, I_m)`` independent (the paper's pure noise problem
    seen by one layer), so ``E[x g^T] = 0`` and every update computed from the batch is
    estimation noise.  Jointly drawn by :func:`equivalent_batch` with ``dim = n + m``:
    ``(X, G)`` each with ``min(batch, n + m)`` rows (``batch`` rows with
    ``compress=False``), whose covariances and cross-covariance ``X^T G / rows`` have
    exactly the joint distribution of a real ``batch``-row sample.
    """
    n = _check_count("n", n)
    m = _check_count("m", m)
    Z = equivalent_batch(batch, n + m, generator=generator, sample_shape=sample_shape, compress=compress)
    return Z[..., :n], Z[..., n:]


def _input_map(problem: LinearProblem) -> Optional[Tensor]:
    """``S`` with inputs ``x = z S`` (``z ~ N(0, I)``), or ``None`` for ``x = z``."""
    if isinstance(problem, OneStepRegression):
        return problem.sigma
    if problem.features is not None:
        return problem.features.sigma_sqrt.to(F64)
    return None


def equivalent_problem_batch(problem: LinearProblem, step: int, seed: int = 0) -> tuple[Tensor, Tensor]:
    r"""A stand-in for ``problem.batch(step, seed)`` with at most ``n`` (regression) or ``2n`` rows.

    A batch-mean loss of a linear network sees its batch only through averages over the
    rows: for regression (targets ``T = X M``) through ``X^T X / b``, for the pure noise
    problem through the joint covariance of ``[X, Z]``.  This draws standard Gaussian
    rows with :func:`equivalent_batch` (``dim = n`` or ``2n``), maps them to inputs as the
    problem does (``x = z Sigma^{1/2}`` for :class:`~isolab.book.problems.GaussianFeatures`,
    ``x = z Sigma`` for :class:`~isolab.book.problems.OneStepRegression`) and forms the
    targets, so that the problem's ``reference_loss`` (a mean over the rows), its
    gradient and every covariance have exactly the distribution they have on a real
    batch of ``problem.batch_size`` rows.  Not the same numbers as ``problem.batch``
    (a different draw from the same ``(seed, step)`` stream), the same distribution.
    """
    _check_count("step", step, 0)
    return _equivalent(problem, step, seed, problem.target_map(seed), _input_map(problem))


def _equivalent(problem, step, seed, M, S):
    g = derived_generator(seed, "data", step)
    n, b = problem.n, problem.batch_size
    if M is None:
        Z = equivalent_batch(b, 2 * n, generator=g)
        return Z[..., :n], Z[..., n:]
    X = equivalent_batch(b, n, generator=g)
    if S is not None:
        X = X @ S
    return X, X @ M


# ----------------------------------------------------------------------------- true gradient and noise
def input_covariance(problem: LinearProblem) -> Tensor:
    r"""``E[x x^T]`` of a problem's inputs (float64, ``n x n``).

    ``I`` by default; ``Sigma`` of its :class:`isolab.book.problems.GaussianFeatures`;
    ``Sigma^2`` for :class:`isolab.book.problems.OneStepRegression` (``x = Sigma z``).
    """
    if isinstance(problem, OneStepRegression):
        return problem.sigma @ problem.sigma
    if problem.features is not None:
        return problem.features.sigma.to(F64)
    return torch.eye(problem.n, dtype=F64)


def outer_product_moments(U: Tensor, V: Tensor, cov: Tensor, cov_z: Optional[Tensor] = None) -> tuple[Tensor, Tensor]:
    r"""Mean and variance of every entry of the outer product ``(U^T x)(V^T y)^T``.

    With ``x ~ N(0, cov)`` and ``y = x`` (``cov_z=None``), Isserlis' theorem gives for the
    entry ``a_i b_j`` (``a = U^T x``, ``b = V^T x``):

        ``E[a_i b_j] = (U^T cov V)_ij``,
        ``Var[a_i b_j] = (U^T cov U)_ii (V^T cov V)_jj + (U^T cov V)_ij^2``.

    With ``y = z ~ N(0, cov_z)`` independent of ``x``: mean 0 and variance
    ``(U^T cov U)_ii (V^T cov_z V)_jj``.  ``U`` is ``(..., d, p)``, ``V`` ``(..., d', q)``;
    returns two ``(..., p, q)`` tensors.  A per-sample weight gradient ``x_l g_l^T`` of a
    linear network is such an outer product, with ``U``, ``V`` built from the weights
    (:func:`gradient_moments`).
    """
    if cov_z is None:
        mean = U.mT @ cov @ V
        var = torch.diagonal(U.mT @ cov @ U, dim1=-2, dim2=-1)[..., :, None] * \
            torch.diagonal(V.mT @ cov @ V, dim1=-2, dim2=-1)[..., None, :] + mean.square()
        return mean, var
    var = torch.diagonal(U.mT @ cov @ U, dim1=-2, dim2=-1)[..., :, None] * \
        torch.diagonal(V.mT @ cov_z @ V, dim1=-2, dim2=-1)[..., None, :]
    return torch.zeros_like(var), var


def gradient_moments(problem: LinearProblem, weights: Tensor, seed: int = 0) -> tuple[Tensor, Tensor]:
    r"""True gradient and per-sample gradient variance of every layer, in closed form.

    For the deep linear network ``y = x W_1 ... W_k`` (row convention, ``weights`` of shape
    ``(k, n, n)``) layer ``l`` sees the input ``x_l = x P_{<l}`` and the output gradient
    ``g_l = dL/dy P_{>l}^T`` (``P_{<l} = W_1 ... W_{l-1}``, ``P_{>l} = W_{l+1} ... W_k``),
    and its per-sample weight gradient is the outer product ``x_l^T g_l``:

    - regression (``mse``, targets ``t = x M``, per-sample loss ``||y - t||^2 / n``):
      ``dL/dy = (2/n) x (P - M)``, so ``U = P_{<l}``, ``V = (2/n)(P - M) P_{>l}^T`` read
      the same ``x``: ``E = U^T Sigma V`` (for one layer ``(2/n) Sigma (W - M)``);
    - pure noise (loss ``y^T z``): ``dL/dy = z`` independent of ``x``: mean 0.

    Moments from :func:`outer_product_moments` with ``Sigma`` = :func:`input_covariance`.
    Returns ``(mean, variance)``, each ``(k, n, n)`` float64 in row convention; the
    batch-mean gradient of ``b`` samples has the same mean and variance ``variance / b``.
    ``seed`` fixes the problem's target matrix.
    """
    W = torch.as_tensor(weights, dtype=F64)
    k, n = problem.depth, problem.n
    if W.shape != (k, n, n):
        raise ValueError(f"weights must have shape {(k, n, n)}, got {tuple(W.shape)}")
    M = problem.target_map(seed) if problem.loss_kind == "mse" else None
    if problem.loss_kind == "mse" and M is None:
        raise ValueError(f"{type(problem).__name__} has no target map: no closed-form moments")
    return _moments(problem, W, M, input_covariance(problem))


def _moments(problem, W, M, Sigma):
    k, n = problem.depth, problem.n
    eye = torch.eye(n, dtype=F64)
    prefix, suffix = [eye], [eye]
    for i in range(k - 1):
        prefix.append(prefix[-1] @ W[i])
        suffix.append(W[k - 1 - i] @ suffix[-1])
    suffix = suffix[::-1]  # suffix[l] = W_{l+1} ... W_k
    P = prefix[-1] @ W[-1]
    U = torch.stack(prefix)
    if problem.loss_kind == "mse":
        V = torch.stack([(2.0 / n) * (P - M) @ s.mT for s in suffix])
        return outer_product_moments(U, V, Sigma)
    V = torch.stack([s.mT for s in suffix])
    return outer_product_moments(U, V, Sigma, eye)


def balles_hennig(mean: Tensor, variance: Tensor) -> Tensor:
    r"""``mu / sqrt(mu^2 + s^2) = sgn(mu) / sqrt(1 + s^2 / mu^2)``, entrywise.

    If Adam's moments settle at their expectations, ``m -> E g = mu`` and
    ``v -> E g^2 = mu^2 + s^2`` (``s^2`` the variance of the gradient entry *at the batch
    size used*), so the update ``m / sqrt(v)`` is the sign of the true gradient shrunk by
    the factor ``1/sqrt(1 + s^2/mu^2)``: close to ``+-1`` where the signal-to-noise ratio
    ``|mu|/s`` is large, close to 0 where noise dominates (Balles and Hennig, 2018).
    Zero where ``mu = s = 0``.
    """
    mean = torch.as_tensor(mean, dtype=F64)
    denom = (mean.square() + torch.as_tensor(variance, dtype=F64)).sqrt()
    return torch.where(denom > 0, mean / denom.clamp_min(torch.finfo(F64).tiny), torch.zeros_like(mean))


# ----------------------------------------------------------------------------- real Adam
@dataclass(frozen=True)
class AdamRun:
    r"""What :func:`adam_run` recorded, at steps ``record_from, ..., steps - 1``.

    Every array is ``(recorded steps, k, n, n)`` float64 in row convention (the book's
    ``W``; torch stores ``W^T``):

    - ``directions``: Adam's update direction ``m_hat / (sqrt(v_hat) + eps)`` after the
      step (``isolab.rules.adam_direction`` of ``torch.optim.Adam``'s state);
    - ``displacements``: ``W_t - W_{t+1}``, what the step did (``lr * directions``);
    - ``true_gradients``: ``E[x g^T]`` at ``W_t``, where the step's gradient was taken;
    - ``variances``: the per-sample variance of each gradient entry at ``W_t`` (the batch
      gradient's is ``variances / batch``).
    """

    directions: Tensor
    displacements: Tensor
    true_gradients: Tensor
    variances: Tensor
    batch: int
    lr: float
    betas: tuple
    eps: float
    steps: tuple


def adam_run(
    problem: LinearProblem, lr: float, steps: int, *, seed: int = 0, betas=(0.9, 0.999), eps: float = 1e-8,
    record_from: int = 0, equivalent_batches: bool = False,
) -> AdamRun:
    r"""Train ``problem`` with ``torch.optim.Adam`` for ``steps`` steps and watch every step.

    The model is :meth:`~isolab.book.problems.LinearProblem.reference_model` of the problem's
    initial weights for ``seed`` (float64), the data are the problem's own batches
    ``problem.batch(t, seed)`` and the loss its ``reference_loss``: an ordinary training
    loop.  From step ``record_from`` on, it records the true gradient and gradient
    variance (:func:`gradient_moments`) at the current weights, takes the step, and
    records Adam's direction and the displacement (see :class:`AdamRun`).  ``lr = 0`` is
    allowed: the weights then stay put and the moments average i.i.d. gradients, the
    ``lr -> 0`` limit exactly.  With ``equivalent_batches=True`` the batches come from
    :func:`equivalent_problem_batch` (same distribution, at most ``2n`` rows): batch sizes
    of millions then cost no more than small ones.
    """
    steps = _check_count("steps", steps)
    record_from = _check_count("record_from", record_from, 0)
    if record_from >= steps:
        raise ValueError(f"record_from ({record_from}) must be < steps ({steps})")
    if isinstance(lr, bool) or not isinstance(lr, Real) or not math.isfinite(lr) or lr < 0:
        raise ValueError(f"lr must be a finite number >= 0, got {lr!r}")
    betas = tuple(float(b) for b in betas)
    model = problem.reference_model(problem.initial_weights(seed))
    params = list(model.parameters())
    opt = torch.optim.Adam(params, lr=float(lr), betas=betas, eps=float(eps))
    rec = {key: [] for key in ("directions", "displacements", "true_gradients", "variances")}
    M = problem.target_map(seed) if problem.loss_kind == "mse" else None
    S, Sigma = _input_map(problem), input_covariance(problem)
    for t in range(steps):
        X, T = _equivalent(problem, t, seed, M, S) if equivalent_batches else problem.batch(t, seed)
        record = t >= record_from
        if record:
            before = problem.weights_of(model).clone()
            mean, var = _moments(problem, before, M, Sigma)
        opt.zero_grad(set_to_none=True)
        problem.reference_loss(model(X), T).backward()
        opt.step()
        if record:
            d = []
            for p in params:
                st = opt.state[p]
                d.append(rules.adam_direction(st["exp_avg"], st["exp_avg_sq"], int(st["step"]), betas, eps).mT)
            rec["directions"].append(torch.stack(d))
            rec["displacements"].append(before - problem.weights_of(model))
            rec["true_gradients"].append(mean)
            rec["variances"].append(var)
    out = {key: torch.stack(v) for key, v in rec.items()}
    return AdamRun(**out, batch=problem.batch_size, lr=float(lr), betas=betas, eps=float(eps),
                   steps=(record_from, steps))


def adam_directions(grads: Tensor, *, betas=(0.9, 0.999), eps: float = 1e-8) -> Tensor:
    r"""Feed the gradients ``grads[0], grads[1], ...`` to ``torch.optim.Adam``; return its directions.

    A parameter of shape ``grads.shape[1:]`` (float64) receives ``grads[t]`` as its
    ``.grad`` at step ``t``; the returned ``(steps, ...)`` tensor holds Adam's direction
    ``m_hat / (sqrt(v_hat) + eps)`` after each step (``isolab.rules.adam_direction`` of the
    optimizer's state), which is the step divided by the learning rate.  Adam acts on
    every entry separately (no weight decay, no AMSGrad), so independent gradient streams,
    say several batch sizes and seeds, can share the parameter tensor.  Where the
    gradient does not depend on the weights (a one-layer pure noise problem) this is
    exactly Adam training on that problem.
    """
    grads = torch.as_tensor(grads, dtype=F64)
    if grads.ndim < 1 or grads.shape[0] < 1:
        raise ValueError(f"grads must have a leading step dimension of size >= 1, got {tuple(grads.shape)}")
    betas = tuple(float(b) for b in betas)
    p = torch.zeros(grads.shape[1:], dtype=F64, requires_grad=True)
    opt = torch.optim.Adam([p], lr=1.0, betas=betas, eps=float(eps))
    out = torch.empty_like(grads)
    st = None
    for t in range(grads.shape[0]):
        p.grad = grads[t].clone()
        opt.step()
        st = opt.state[p]
        out[t] = rules.adam_direction(st["exp_avg"], st["exp_avg_sq"], int(st["step"]), betas, eps)
    return out


# ----------------------------------------------------------------------------- predictions and measurements
def adam_first_step_moment(scale, eps: float, power: float = 2.0) -> Tensor:
    r"""``E[(|g| / (|g| + eps))^power]`` for ``g ~ N(0, scale^2)``: the size of Adam's first step on noise.

    Adam's first step is ``g / (|g| + eps)`` entrywise (``isolab.updates.adam_first_step``),
    so on pure noise, where every entry of ``g`` is about ``N(0, scale^2)``, its expected
    squared Frobenius norm is ``n m`` times this moment with ``power = 2``.  The entries
    sit near ``+-1`` while ``scale >> eps`` and shrink like ``scale / eps`` once ``eps``
    dominates.  Computed as ``int_0^inf 2 phi(t) (s t / (s t + eps))^power dt`` by the
    trapezoid rule on a log-spaced grid, normalised by the same rule's integral of
    ``2 phi`` (relative error below ``1e-5``).  ``scale`` is a
    tensor of standard deviations (for the batch-mean gradient of unit-variance
    per-sample terms, ``scale = 1/sqrt(b)``); returns a tensor of its shape.
    """
    scale = torch.as_tensor(scale, dtype=F64)
    if isinstance(eps, bool) or not isinstance(eps, Real) or not math.isfinite(eps) or eps <= 0:
        raise ValueError(f"eps must be a finite number > 0, got {eps!r}")
    if isinstance(power, bool) or not isinstance(power, Real) or not power > 0:
        raise ValueError(f"power must be a number > 0, got {power!r}")
    t = torch.cat([torch.zeros(1, dtype=F64), torch.logspace(-14, math.log10(14.0), 6000, dtype=F64)])
    phi2 = 2.0 * torch.exp(-0.5 * t.square()) / math.sqrt(2 * math.pi)
    st = scale[..., None] * t
    # a ratio of two quadratures on the same grid: exact at both limits (0 and 1)
    return torch.trapezoid(phi2 * (st / (st + eps)) ** power, t, dim=-1) / torch.trapezoid(phi2, t)


def distance_to_sign(direction: Tensor, gradient: Tensor) -> Tensor:
    r"""``||d - sgn(mu)||_F / ||sgn(mu)||_F`` over the last two dimensions.

    0 exactly when the update direction ``d`` is sign descent on the true gradient ``mu``;
    about 1 for a direction unrelated to it (``d = 0`` gives exactly 1).
    """
    s = torch.sign(gradient)
    return torch.linalg.matrix_norm(direction - s) / torch.linalg.matrix_norm(s)


def loglog_slopes(x, y) -> Tensor:
    r"""Least-squares slope of ``log y`` against ``log x`` along the last dimension.

    ``y`` is ``(..., len(x))`` with positive entries; returns ``(...)``: one fitted
    exponent ``alpha`` of ``y ~ c x^alpha`` per leading index (for instance per seed, so
    that the spread across seeds gives the uncertainty of the exponent).
    """
    lx = torch.as_tensor(x, dtype=F64).log()
    ly = torch.as_tensor(y, dtype=F64).log()
    if lx.ndim != 1 or ly.shape[-1] != lx.shape[0] or lx.shape[0] < 2:
        raise ValueError(f"x must be 1-D with >= 2 points matching y's last dimension; got {tuple(lx.shape)}, {tuple(ly.shape)}")
    cx = lx - lx.mean()
    return ((ly - ly.mean(-1, keepdim=True)) * cx).sum(-1) / cx.square().sum()


# ----------------------------------------------------------------------------- the Iso optimizer on a stream of batches
def iso_steps(
    batches, *, momentum: float, nesterov: bool, beta_cov: float, damping: float, root_interval: int,
    stats_dtype: torch.dtype = F64,
) -> list[Tensor]:
    r"""Feed batches to the :class:`isolab.optim.Iso` optimizer; return its steps divided by the learning rate.

    ``batches`` is a list of pairs ``(X, G)`` of shapes ``(steps, *streams, rows, n)`` and
    ``(steps, *streams, rows, m)`` (for instance :func:`noise_batch` with
    ``sample_shape=(steps, seeds)``; ``rows`` may differ from pair to pair). Every stream
    gets its own bias-free ``nn.Linear(n, m)`` (float64) and Iso keeps its own statistics,
    roots and momentum for it. At step ``t`` layer ``k`` sees the inputs ``X[t]`` and, as
    the gradient of the loss with respect to its outputs, ``G[t]``, so its weight gradient
    is ``X^T G`` and Iso whitens ``X^T G / rows`` with its averaged covariances. Where the
    gradient does not depend on the weights (a one-layer pure noise problem) this is exactly
    Iso training on that problem. The hyperparameters are passed to Iso explicitly
    (``lr = 1``, statistics every step, roots by ``eigh`` every ``root_interval`` steps, no
    warm-up, no weight decay, the plain relative damping ``δ·tr(Ĉ)/d``: ``shrinkage=False``
    where the optimizer has that option), and every layer is given to Iso as one explicit
    parameter group (no routing), so the result does not depend on Iso's defaults.

    Returns, for each pair, the ``(steps, *streams, n, m)`` float64 steps ``W_t - W_{t+1}``
    in row convention.
    """
    from torch import nn

    from isolab.optim import Iso

    pairs = [(torch.as_tensor(X, dtype=F64), torch.as_tensor(G, dtype=F64)) for X, G in batches]
    if not pairs:
        raise ValueError("iso_steps needs at least one (X, G) pair")
    steps = pairs[0][0].shape[0]
    flat = []
    for X, G in pairs:
        if X.ndim < 3 or X.shape[:-1] != G.shape[:-1] or X.shape[0] != steps:
            raise ValueError(f"X and G must be (steps, *streams, rows, n/m) with the same steps and rows; "
                             f"got {tuple(X.shape)} and {tuple(G.shape)}")
        flat.append((X.reshape(steps, -1, *X.shape[-2:]), G.reshape(steps, -1, *G.shape[-2:])))
    layers = nn.ModuleList([nn.Linear(X.shape[-1], G.shape[-1], bias=False, dtype=F64)
                            for X, G in flat for _ in range(X.shape[1])])
    opt = Iso(layers, lr=1.0, momentum=momentum, nesterov=nesterov, beta_cov=beta_cov, damping=damping,
              stat_interval=1, stat_rows=None, root_interval=root_interval, root_method="eigh", warmup_steps=0,
              weight_decay=0.0, stats_dtype=stats_dtype, params=[{"params": list(layers.parameters())}],
              shrinkage=False)  # the plain rule at every batch size (no extra damping when b < n)
    out = [torch.empty(steps, X.shape[1], X.shape[-1], G.shape[-1], dtype=F64) for X, G in flat]
    try:
        for t in range(steps):
            before = torch.stack([layer.weight.detach() for layer in layers]).clone()
            outputs, grads = [], []
            k = 0
            for X, G in flat:
                for s in range(X.shape[1]):
                    outputs.append(layers[k](X[t, s]))
                    grads.append(G[t, s])
                    k += 1
            opt.zero_grad(set_to_none=True)
            torch.autograd.backward(outputs, grads)           # dL/dY = G for every layer
            opt.step()
            moved = (before - torch.stack([layer.weight.detach() for layer in layers])).mT
            k = 0
            for o, (X, _) in zip(out, flat):
                o[t] = moved[k:k + X.shape[1]]
                k += X.shape[1]
    finally:
        opt.remove_hooks()
    return [o.reshape(*X.shape[:-2], X.shape[-1], G.shape[-1]) for o, (X, G) in zip(out, pairs)]
