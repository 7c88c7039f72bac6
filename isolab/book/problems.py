r"""Small seeded training problems with the paper's and the blog's exact setups.

Every problem is a stack of ``depth`` square linear layers (row convention, as in the
book): ``Y = X W_1 W_2 ... W_k`` with ``X`` of shape ``(b, n)`` and each ``W_i`` of shape
``(n, n)``.  A problem fixes the data distribution, the initialization and the loss; the
randomness is a pure function of an integer ``seed``:

- :meth:`LinearProblem.initial_weights` ``(seed)`` -> ``(depth, n, n)``,
- :meth:`LinearProblem.batch` ``(step, seed)`` -> ``(X, T)``, the inputs and the targets
  (or, for the pure noise problem, the noise ``Z``) of training step ``step``.

Each step's batch comes from its own generator derived from ``(seed, step)``, so the
batch of step 500 is the same whether a run starts at 0 or asks for it alone, and every
learning rate of a sweep sees exactly the same data: lanes differ only by learning rate.

Problems
--------
- :class:`GaussianFeatures`: inputs ``x ~ N(0, Sigma)`` with a chosen condition number and
  rotation (:mod:`isolab.book.features`).
- :class:`DeepLinearRegression`: the paper's experiment (Figures 3 and 4): ``y = A x``,
  ``A ~ N(0, I)``, ``W_i ~ N(0, I)/sqrt(n)``, mean-squared error; optional ``Sigma`` on the
  inputs.
- :class:`PureNoise`: the paper's pure noise problem: ``x, z ~ N(0, I)`` independent,
  loss ``y^T z`` (batch mean), so the output gradient is pure noise ``z``.
- :class:`OneStepRegression`: the paper's first-step analysis: ``x = Sigma z``, ``Y = X A``,
  one layer initialised at ``W = 0``; with the closed-form large-batch first steps.

The engine (:mod:`isolab.book.engine`) trains many learning rates at once on these problems;
:meth:`LinearProblem.reference_model` and :meth:`LinearProblem.reference_loss` give the
same problem as an ``nn.Module`` and a loss for one-at-a-time ``torch.optim`` runs.

Exact batch compression
-----------------------
For a deep linear network the data enter training only through products with ``X``.
With a thin QR factorization ``X = Q R`` (``R`` of size ``n x n``) every layer's input
is ``X_i = Q (R W_1 ... W_{i-1})`` and, when the targets lie in the column space of
``X`` (regression, ``T = X M``), every output gradient is ``G_i = Q H_i``.  Since
``Q^T Q = I``, all the quantities any optimizer here uses are unchanged when the ``b``
rows are replaced by the ``n`` rows of ``R``: ``X_i^T G_i``, ``X_i^T X_i``,
``G_i^T G_i`` and the loss ``||X P - T||^2`` (the residual lies in ``col(Q)``).
:meth:`LinearProblem.compressed` returns these ``r``-row batches (``r = n`` for
regression, ``r = 2n`` for the pure noise problem, whose noise is compressed jointly
with ``X``; no compression when ``b <= r``); the true batch size ``b`` still sets every
``1/b``.  The engine thus costs ``O(n^3)`` per layer and lane instead of ``O(b n^2)``.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import features as _features
from isolab import linalg

__all__ = [
    "GaussianFeatures",
    "LinearProblem",
    "DeepLinearRegression",
    "PureNoise",
    "OneStepRegression",
    "derived_generator",
]

_STREAMS = {"init": 1, "target": 2, "data": 3}


def derived_generator(seed: int, stream: str, index: int = 0) -> torch.Generator:
    """A CPU ``torch.Generator`` seeded from ``(seed, stream, index)`` by NumPy's ``SeedSequence``.

    Independent streams for initialization, targets and each step's data, all a pure
    function of ``seed``.
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    state = np.random.SeedSequence([int(seed), _STREAMS[stream], int(index)]).generate_state(2, dtype=np.uint32)
    g = torch.Generator()
    g.manual_seed(int(state[0]) | (int(state[1]) & 0x7FFFFFFF) << 32)
    return g


def _check_int(name, value, low=1):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    return int(value)


class GaussianFeatures:
    r"""Inputs ``x = Sigma^{1/2} z``, ``z ~ N(0, I_n)``: covariance ``Sigma`` with condition
    number ``condition_number`` and rotation ``angle`` (see :mod:`isolab.book.features`;
    ``tr Sigma = n``, or ``n * scale`` with ``scale``).  ``sample(batch, generator)`` has the distribution of
    :func:`isolab.book.features.gaussian_features`, and the same values at ``angle = 0``; at
    other angles it multiplies by the symmetric root :math:`\Sigma^{1/2}` (the saved sweeps
    of Part III were drawn this way) where ``gaussian_features`` rotates one fixed cloud."""

    def __init__(self, n: int, condition_number: float = 1.0, angle: float = 0.0, scale: float = 1.0):
        self.n = _check_int("n", n)
        self.condition_number = float(condition_number)
        self.angle = float(angle)
        self.scale = float(scale)
        if not (math.isfinite(self.scale) and self.scale > 0):
            raise ValueError(f"scale must be a positive number, got {scale!r}")
        self.sigma = _features.covariance(self.n, self.condition_number, self.angle)
        self.sigma_sqrt = _features.covariance_sqrt(self.n, self.condition_number, self.angle)
        if self.scale != 1.0:  # Sigma times scale (tr Sigma = n * scale)
            self.sigma = self.sigma * self.scale
            self.sigma_sqrt = self.sigma_sqrt * math.sqrt(self.scale)

    def sample(self, batch: int, generator: torch.Generator) -> Tensor:
        """A ``(batch, n)`` float64 batch."""
        z = torch.randn(batch, self.n, generator=generator, dtype=torch.float64)
        return z @ self.sigma_sqrt

    def describe(self) -> dict:
        out = {"n": self.n, "condition_number": self.condition_number, "angle": self.angle}
        return out if self.scale == 1.0 else {**out, "scale": self.scale}

    def __repr__(self):
        scale = "" if self.scale == 1.0 else f", scale={self.scale:g}"
        return (f"GaussianFeatures(n={self.n}, condition_number={self.condition_number:g}, "
                f"angle={self.angle:g}{scale})")


class LinearProblem:
    r"""A deep linear network problem: ``depth`` layers ``n x n``, batches of ``batch`` rows.

    Subclasses fix ``loss_kind`` (``"mse"``: ``||Y - T||_F^2/(b n)``, torch's
    ``mse_loss``; ``"linear"``: ``sum(Y * T)/b``, i.e. the batch mean of ``y^T z``), the
    target (:meth:`target_map`, or ``None`` for independent noise targets) and the
    initialization.  All data are produced in float64.
    """

    loss_kind = "mse"
    name = "linear"

    def __init__(self, n: int, depth: int, batch: int, features: Optional[GaussianFeatures] = None,
                 init_scale: Optional[float] = None):
        self.n = _check_int("n", n)
        self.depth = _check_int("depth", depth)
        self.batch_size = _check_int("batch", batch)
        if features is not None and features.n != self.n:
            raise ValueError(f"features.n ({features.n}) must equal n ({self.n})")
        self.features = features
        self.init_scale = 1.0 / math.sqrt(self.n) if init_scale is None else float(init_scale)

    # -- randomness ---------------------------------------------------------------------
    def initial_weights(self, seed: int) -> Tensor:
        """``(depth, n, n)`` float64: ``W_i ~ N(0, I) * init_scale`` (zeros when ``init_scale == 0``)."""
        g = derived_generator(seed, "init")
        return torch.randn(self.depth, self.n, self.n, generator=g, dtype=torch.float64) * self.init_scale

    def target_map(self, seed: int) -> Optional[Tensor]:
        """The ``(n, n)`` matrix ``M`` with targets ``T = X M``; ``None`` for noise targets."""
        return None

    def _inputs(self, g: torch.Generator) -> Tensor:
        if self.features is None:
            return torch.randn(self.batch_size, self.n, generator=g, dtype=torch.float64)
        return self.features.sample(self.batch_size, g)

    def batch(self, step: int, seed: int) -> tuple[Tensor, Tensor]:
        """``(X, T)`` of training step ``step``, each ``(batch, n)`` float64."""
        _check_int("step", step, 0)
        g = derived_generator(seed, "data", step)
        X = self._inputs(g)
        M = self.target_map(seed)
        if M is None:
            T = torch.randn(self.batch_size, self.n, generator=g, dtype=torch.float64)
        else:
            T = X @ M
        return X, T

    def batches(self, start: int, stop: int, seed: int) -> tuple[Tensor, Tensor]:
        """Steps ``start, ..., stop-1`` stacked: ``(stop-start, batch, n)`` each."""
        Xs, Ts = zip(*(self.batch(t, seed) for t in range(start, stop)))
        return torch.stack(Xs), torch.stack(Ts)

    # -- compression ----------------------------------------------------------------------
    @property
    def rows(self) -> int:
        """Rows of a compressed batch: ``n`` (regression) or ``2n`` (noise), or ``batch`` if smaller."""
        r = self.n if self._realizable else 2 * self.n
        return min(r, self.batch_size)

    @property
    def _realizable(self) -> bool:
        return type(self).target_map is not LinearProblem.target_map

    def compressed(self, start: int, stop: int, seed: int) -> tuple[Tensor, Tensor]:
        r"""Exactly compressed batches ``(Xc, Tc)`` of shape ``(stop-start, rows, n)``, float64.

        For every ``P``: ``Xc^T Xc = X^T X``, ``Xc^T Tc = X^T T``, and the loss of ``Xc P``
        against ``Tc`` (with the true ``b``) equals that of ``X P`` against ``T`` (see the
        module docstring).
        """
        X, T = self.batches(start, stop, seed)
        if self.batch_size <= self.rows:
            return X, T
        if self._realizable:
            R = torch.linalg.qr(X, mode="r")[1]
            return R, R @ self.target_map(seed)
        R = torch.linalg.qr(torch.cat([X, T], dim=-1), mode="r")[1]
        return R[..., :, : self.n], R[..., :, self.n :]

    # -- loss -------------------------------------------------------------------------------
    def loss(self, Y: Tensor, T: Tensor) -> Tensor:
        """Per-lane loss of outputs ``Y`` ``(..., rows, n)`` against ``T`` (batched, true ``b``)."""
        b = self.batch_size
        if self.loss_kind == "mse":
            R = Y - T
            return (R * R).sum(dim=(-2, -1)) / (b * self.n)
        return (Y * T).sum(dim=(-2, -1)) / b

    # -- the exact expected loss ----------------------------------------------------------
    @property
    def has_expected_loss(self) -> bool:
        """Whether :meth:`expected_loss` exists: a mean-squared error with a fixed target map."""
        return self.loss_kind == "mse" and self._realizable

    def input_covariance(self) -> Tensor:
        """``E[x x^T]``, ``(n, n)`` float64: ``I`` or the features' ``Sigma``."""
        if self.features is None:
            return torch.eye(self.n, dtype=torch.float64)
        return self.features.sigma.to(torch.float64)

    def expected_loss(self, product: Tensor, seed: int) -> Tensor:
        r"""The loss of the network whose end-to-end map (row convention) is ``product``
        ``(..., n, n)``, in expectation over the input distribution rather than on a batch:
        :math:`\mathbb E\,\|x^\top (P - M)\|^2 / n = \operatorname{tr}((P - M)^\top \Sigma (P - M)) / n`
        with ``M`` the target map of ``seed`` (Chapter 10, §10.1). Free of the minibatch's
        sampling noise, so it is the score Part III's protocol uses."""
        if not self.has_expected_loss:
            raise ValueError(f"{type(self).__name__} has no expected loss (it needs a mean-squared error and a "
                             "fixed target map)")
        E = product.to(torch.float64) - self.target_map(seed)
        S = self.input_covariance()
        return (E * (S @ E)).sum(dim=(-2, -1)) / self.n

    def output_grad(self, Y: Tensor, T: Tensor) -> Tensor:
        """``G = dL/dY`` for :meth:`loss` (carrying the batch mean's ``1/b``, as autograd does)."""
        b = self.batch_size
        if self.loss_kind == "mse":
            return (Y - T) * (2.0 / (b * self.n))
        return T / b

    # -- one-at-a-time reference ----------------------------------------------------------
    def reference_model(self, weights: Tensor) -> nn.Sequential:
        """``nn.Sequential`` of ``depth`` bias-free ``nn.Linear(n, n)`` computing ``X W_1 ... W_k``
        (torch stores ``weight = W_i^T``); dtype of ``weights``."""
        layers = []
        for W in weights:
            lin = nn.Linear(self.n, self.n, bias=False, dtype=weights.dtype)
            with torch.no_grad():
                lin.weight.copy_(W.T)
            layers.append(lin)
        return nn.Sequential(*layers)

    def reference_loss(self, Y: Tensor, T: Tensor) -> Tensor:
        """The same loss as :meth:`loss` for an uncompressed batch, as a torch scalar."""
        if self.loss_kind == "mse":
            return F.mse_loss(Y, T)
        return (Y * T).sum(-1).mean()

    @staticmethod
    def weights_of(model: nn.Sequential) -> Tensor:
        """``(depth, n, n)`` row-convention weights of a :meth:`reference_model`."""
        return torch.stack([m.weight.detach().T for m in model])

    # -- description ----------------------------------------------------------------------
    def describe(self) -> dict:
        """JSON-ready description (stored with results)."""
        return {
            "problem": self.name, "n": self.n, "depth": self.depth, "batch": self.batch_size,
            "loss": self.loss_kind, "init_scale": self.init_scale,
            "features": None if self.features is None else self.features.describe(),
        }

    def __repr__(self):
        d = self.describe()
        return f"{type(self).__name__}(" + ", ".join(f"{k}={v!r}" for k, v in d.items() if k != "problem") + ")"


class DeepLinearRegression(LinearProblem):
    r"""The paper's deep linear regression: ``y = A x``, ``A ~ N(0, I_{n x n})`` (fixed per seed),
    ``x ~ N(0, I)`` (or ``N(0, Sigma)`` with ``features``), model
    ``f(x) = (W_1 ... W_k)^T x`` with ``W_i ~ N(0, I)/sqrt(n)``, loss ``mse_loss``
    (mean over the batch and the ``n`` outputs).  Row convention: ``T = X A^T``.

    Paper's settings: ``n = 32``, ``batch = 128``; Figure 3 ``depth = 5`` (iterations to
    convergence), Figure 4 ``depth = 40`` (loss after 1000 iterations).
    """

    name = "deep_linear_regression"

    def __init__(self, n: int = 32, depth: int = 5, batch: int = 128, features: Optional[GaussianFeatures] = None):
        super().__init__(n, depth, batch, features)

    def target_matrix(self, seed: int) -> Tensor:
        """``A`` ``(n, n)`` float64, ``A ~ N(0, I)``."""
        return torch.randn(self.n, self.n, generator=derived_generator(seed, "target"), dtype=torch.float64)

    def target_map(self, seed: int) -> Tensor:
        return self.target_matrix(seed).T


class PureNoise(LinearProblem):
    r"""The paper's pure noise problem: ``k`` layers, ``x, z ~ N(0, I_n)`` independent, loss ``y^T z``.

    The output gradient is the noise ``z`` itself (``G = Z/b`` for the batch mean), so there
    is nothing to learn; a good optimizer keeps the weight norm bounded.  Weights start at
    ``N(0, I) * init_scale`` (default ``1/sqrt(n)``).
    """

    loss_kind = "linear"
    name = "pure_noise"

    def __init__(self, n: int = 16, depth: int = 2, batch: int = 1, init_scale: Optional[float] = None):
        super().__init__(n, depth, batch, None, init_scale)


class OneStepRegression(LinearProblem):
    r"""The paper's first-step analysis of linear regression.

    ``x = Sigma z`` with ``z ~ N(0, I)`` (so ``Cov(x) = Sigma^2``), ``Sigma`` the symmetric
    matrix of :func:`isolab.book.features.covariance` (``condition_number``, ``angle``), targets
    ``Y = X A`` (``A ~ N(0, I)``), one layer initialised at ``W = 0``, loss ``mse_loss``.
    For large batches the first steps' directions are (:meth:`predicted_first_steps`):
    SGD ``Sigma^2 A``, Adam ``sign(Sigma^2 A)``, Iso ``msign(Sigma A)``.
    """

    name = "one_step_regression"

    def __init__(self, n: int = 16, batch: int = 1024, condition_number: float = 10.0, angle: float = 0.0):
        super().__init__(n, 1, batch, None, 0.0)
        self.condition_number = float(condition_number)
        self.angle = float(angle)
        self.sigma = _features.covariance(self.n, self.condition_number, self.angle)

    def _inputs(self, g):
        z = torch.randn(self.batch_size, self.n, generator=g, dtype=torch.float64)
        return z @ self.sigma

    def target_matrix(self, seed: int) -> Tensor:
        return torch.randn(self.n, self.n, generator=derived_generator(seed, "target"), dtype=torch.float64)

    def target_map(self, seed: int) -> Tensor:
        return self.target_matrix(seed)

    def predicted_first_steps(self, seed: int) -> dict:
        """Large-batch first-step directions (to subtract with the sign flipped: ``W_1 = +lr * d``)."""
        A = self.target_matrix(seed)
        S = self.sigma
        return {"sgd": S @ S @ A, "adam": torch.sign(S @ S @ A), "iso": linalg.msign(S @ A)}

    def describe(self) -> dict:
        d = super().describe()
        d.update(condition_number=self.condition_number, angle=self.angle)
        return d
