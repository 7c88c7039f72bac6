r"""Weight-norm dynamics on the pure noise problem (the book's Chapter 5).

The pure noise problem (:class:`isolab.book.problems.PureNoise`) trains ``k`` square linear
layers ``Y = X W_1 ... W_k`` (row convention) on the loss ``sum(Y * Z)/b`` with ``x`` and
``z`` independent ``N(0, I_n)``: the output gradient ``G = Z/b`` carries no information
about ``X``.  This module holds what the chapter needs beyond the engine:

- :class:`SharedPureNoise`: the same problem, bit for bit, with its batches generated
  once per ``(n, batch, seed)`` and shared by every instance (any depth, any optimizer),
  so that many sweeps on the same data do not regenerate it.
- :func:`layer_gradients`: every layer's gradient ``X_i^T G_i`` of a deep linear network,
  batched, with ``X_i = X W_1 ... W_{i-1}`` and ``G_i = G (W_{i+1} ... W_k)^T``.
- :func:`sgd_second_moment_map`, :func:`predicted_rate`, :func:`mean_square_norms`,
  :func:`weight_decay_threshold`: the exact recursion of ``E||W_i||_F^2`` under SGD for
  ``k = 1`` and ``k = 2``.
- :func:`growth_rate`, :func:`loglog_slope`: least-squares fits of ``log||W||`` against
  the step (exponential growth) and against ``log`` step (power laws), batched, on the
  finite part of each trajectory.
- :func:`gaussian_expectation`: the expectation of a SymPy polynomial in independent
  standard normal symbols (Isserlis / Wick by moments), for the symbolic derivations.

The second-moment recursion
---------------------------
SGD with learning rate ``eta`` and (coupled, ``torch.optim.SGD``) weight decay ``lam``
updates ``W_i <- (1 - eta lam) W_i - eta g_i``.  For ``k = 2``,
``g_1 = X^T Z W_2^T / b`` and ``g_2 = W_1^T X^T Z / b``.  Because ``Z`` has mean zero and
is independent of ``X`` and of the current weights, the cross terms vanish in
expectation, and ``E||X^T Z M||_F^2 = b n ||M||_F^2`` for any fixed ``M``
(``E||x||^2 = n``, ``E||M^T z||^2 = ||M||_F^2``).  With ``a_i = ||W_i||_F^2``,
``q = (1 - eta lam)^2`` and ``c = eta^2 n / b``:

    ``E[a_1'] = q a_1 + c a_2``,   ``E[a_2'] = c a_1 + q a_2``,

a linear map with eigenvalues ``q + c`` (eigenvector ``(1, 1)``: the total) and ``q - c``.
Without weight decay the total ``E||W||^2`` grows by exactly ``1 + eta^2 n/b`` per step,
from any initialization and at any ``eta > 0``.  For ``k = 1`` the gradient
``X^T Z/b`` does not depend on ``W``: ``E[a'] = q a + eta^2 n^2/b``, additive growth
(a random walk, ``||W|| ~ sqrt(t)``) or, with weight decay, a bounded stationary level.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import torch
from torch import Tensor

from .problems import PureNoise, _check_int

__all__ = [
    "SharedPureNoise",
    "layer_gradients",
    "sgd_second_moment_map",
    "predicted_rate",
    "mean_square_norms",
    "weight_decay_threshold",
    "total_norm",
    "growth_rate",
    "loglog_slope",
    "crossing_steps",
    "gaussian_expectation",
]


# ----------------------------------------------------------------------------- shared data
class SharedPureNoise(PureNoise):
    r""":class:`isolab.book.problems.PureNoise` whose batches are generated once and shared.

    The data of the pure noise problem depend only on ``(n, batch, seed, step)`` (not on
    the depth or the initialization), so every instance with the same ``n`` and ``batch``
    reads one store per seed, extended on demand.  :meth:`batch` and :meth:`batches`
    return exactly (bitwise) what :class:`~isolab.book.problems.PureNoise` returns; the
    returned tensors are views of the store and must not be modified in place (the engine
    copies them).  :meth:`clear` empties the store.
    """

    _store: dict = {}

    def _data(self, stop: int, seed: int) -> tuple[Tensor, Tensor]:
        key = (self.n, self.batch_size, int(seed))
        X, T = self._store.get(key, (None, None))
        have = 0 if X is None else X.shape[0]
        if have < stop:
            new = max(stop, 2 * have)
            parts = [PureNoise.batch(self, t, seed) for t in range(have, new)]
            Xn = torch.stack([p[0] for p in parts])
            Tn = torch.stack([p[1] for p in parts])
            X = Xn if X is None else torch.cat([X, Xn])
            T = Tn if T is None else torch.cat([T, Tn])
            self._store[key] = (X, T)
        return X, T

    def batch(self, step: int, seed: int) -> tuple[Tensor, Tensor]:
        step = _check_int("step", step, 0)
        X, T = self._data(step + 1, seed)
        return X[step], T[step]

    def batches(self, start: int, stop: int, seed: int) -> tuple[Tensor, Tensor]:
        start, stop = _check_int("start", start, 0), _check_int("stop", stop, 0)
        if not start < stop:
            raise ValueError(f"need 0 <= start < stop, got {start}, {stop}")
        X, T = self._data(stop, seed)
        return X[start:stop], T[start:stop]

    @classmethod
    def clear(cls) -> None:
        """Forget every stored batch."""
        cls._store.clear()


# ----------------------------------------------------------------------------- gradients
def layer_gradients(X: Tensor, G: Tensor, weights: Sequence[Tensor]) -> list[Tensor]:
    r"""Every layer's weight gradient of ``Y = X W_1 ... W_k`` given ``G = dL/dY``.

    ``dL/dW_i = X_i^T G_i`` with the layer's input ``X_i = X W_1 ... W_{i-1}`` and its
    output gradient ``G_i = G (W_{i+1} ... W_k)^T`` (backpropagation through the layers
    above).  For ``k = 2``: ``X^T G W_2^T`` and ``W_1^T X^T G``; per sample, with the
    paper's ``y = W^T x`` and ``G = z``, these are the paper's ``x z^T W_2^T`` and
    ``W_1^T x z^T``.  Batched over leading dimensions of ``X``, ``G`` and the weights
    (``X``: ``(..., b, n_0)``, ``G``: ``(..., b, n_k)``, ``W_i``: ``(..., n_{i-1}, n_i)``).
    ``G`` carries the loss's ``1/b`` (as autograd's ``Y.grad``).
    """
    weights = list(weights)
    if not weights:
        raise ValueError("need at least one weight matrix")
    inputs = [X]
    for W in weights[:-1]:
        inputs.append(inputs[-1] @ W)
    out_grads = [G]
    for W in reversed(weights[1:]):
        out_grads.append(out_grads[-1] @ W.mT)
    out_grads.reverse()
    return [Xi.mT @ Gi for Xi, Gi in zip(inputs, out_grads)]


# ----------------------------------------------------------------------------- predictions
def _check_positive(name, value, allow_zero=False):
    v = float(value)
    if not math.isfinite(v) or v < 0 or (v == 0 and not allow_zero):
        raise ValueError(f"{name} must be a finite number {'>=' if allow_zero else '>'} 0, got {value!r}")
    return v


def sgd_second_moment_map(n: int, batch: int, lr: float, weight_decay: float = 0.0) -> Tensor:
    r"""The ``2 x 2`` matrix ``M`` with ``E[(a_1', a_2')] = M (a_1, a_2)`` for two layers.

    ``a_i = ||W_i||_F^2``; ``M = [[q, c], [c, q]]`` with ``q = (1 - lr wd)^2`` and
    ``c = lr^2 n / batch`` (see the module docstring).  Float64.
    """
    n, batch = int(n), int(batch)
    lr = _check_positive("lr", lr, allow_zero=True)
    wd = _check_positive("weight_decay", weight_decay, allow_zero=True)
    q = (1.0 - lr * wd) ** 2
    c = lr * lr * n / batch
    return torch.tensor([[q, c], [c, q]], dtype=torch.float64)


def predicted_rate(n: int, batch: int, lr, weight_decay=0.0) -> Tensor:
    r"""Growth rate per step of the root-mean-square norm ``sqrt(E||W||^2)`` for two layers.

    ``(1/2) log(q + c)``: half the log of the top eigenvalue of
    :func:`sgd_second_moment_map`.  Without weight decay ``(1/2) log(1 + lr^2 n/b) > 0``
    for every ``lr > 0``.  ``lr`` and ``weight_decay`` broadcast (tensors or floats).
    This is the rate of the *mean square*; a single run's ``log||W||`` grows at the
    (smaller, by Jensen's inequality) Lyapunov rate.
    """
    lr = torch.as_tensor(lr, dtype=torch.float64)
    wd = torch.as_tensor(weight_decay, dtype=torch.float64)
    q = (1.0 - lr * wd) ** 2
    c = lr * lr * n / batch
    return 0.5 * torch.log(q + c)


def mean_square_norms(n: int, batch: int, lr: float, steps: int, initial: Sequence[float],
                      weight_decay: float = 0.0) -> Tensor:
    r"""``E||W_i||_F^2`` after ``0..steps`` SGD steps, for one or two layers: ``(steps+1, k)``.

    ``initial`` holds the initial squared norms ``a_i(0)`` (``k = len(initial)``, 1 or 2).
    One layer: ``a' = q a + lr^2 n^2/b``; two layers: :func:`sgd_second_moment_map`.
    Exact expectations (over the data) of SGD on the pure noise problem.
    """
    a = torch.as_tensor(list(initial), dtype=torch.float64)
    if a.ndim != 1 or a.numel() not in (1, 2):
        raise ValueError(f"initial must hold 1 or 2 squared norms, got {initial!r}")
    lr = _check_positive("lr", lr, allow_zero=True)
    wd = _check_positive("weight_decay", weight_decay, allow_zero=True)
    out = torch.empty(int(steps) + 1, a.numel(), dtype=torch.float64)
    out[0] = a
    if a.numel() == 1:
        q, add = (1.0 - lr * wd) ** 2, lr * lr * n * n / batch
        for t in range(1, steps + 1):
            out[t] = q * out[t - 1] + add
    else:
        M = sgd_second_moment_map(n, batch, lr, wd)
        for t in range(1, steps + 1):
            out[t] = M @ out[t - 1]
    return out


def weight_decay_threshold(n: int, batch: int, lr) -> Tensor:
    r"""The weight decay at which two layers' mean square stops growing: ``q + c = 1``.

    ``(1 - lr wd)^2 + lr^2 n/b = 1`` gives ``wd* = (1 - sqrt(1 - lr^2 n/b))/lr``
    (``~ lr n/(2b)`` for small ``lr``); above it the mean square decays exponentially
    (collapse), below it it grows.  ``inf`` when ``lr^2 n/b >= 1``: then ``q + c >= c >= 1``
    and no weight decay stops the mean square from growing.
    """
    lr = torch.as_tensor(lr, dtype=torch.float64)
    c = lr * lr * n / batch
    inside = 1.0 - c
    return torch.where(inside > 0, (1.0 - torch.sqrt(inside.clamp(min=0))) / lr, torch.full_like(lr, math.inf))


# ----------------------------------------------------------------------------- fits
def total_norm(layer_norms) -> Tensor:
    r"""``sqrt(sum_i ||W_i||_F^2)`` over the last axis, without overflow.

    ``layer_norms`` is ``(..., layers)`` (e.g. :attr:`isolab.book.results.Sweep.weight_norm`);
    computed as ``m sqrt(sum (x_i/m)^2)`` with ``m = max_i x_i``, so norms up to the
    float64 limit stay finite (squaring first overflows above ``~1e154``).  NaN stays NaN.
    """
    x = torch.as_tensor(layer_norms, dtype=torch.float64)
    m = x.amax(dim=-1, keepdim=True)
    safe = torch.where((m > 0) & torch.isfinite(m), m, torch.ones_like(m))
    out = safe * torch.sqrt(((x / safe) ** 2).sum(-1, keepdim=True))
    out = torch.where(m == 0, torch.zeros_like(out), out)
    out = torch.where(torch.isinf(m), m, out)
    return out.squeeze(-1)


def _fit_mask(norms: Tensor, start: int, stop: Optional[int], max_norm: float, min_norm: float) -> Tensor:
    """Steps ``start <= t < stop`` before the first bad value (non-finite or outside the bounds) at or after ``start``."""
    T = norms.shape[-1]
    stop = T if stop is None else min(int(stop), T)
    steps = torch.arange(T)
    ok = torch.isfinite(norms) & (norms > min_norm) & (norms < max_norm)
    ok = ok | (steps < start)  # values before the window do not cut it
    valid = torch.cumprod(ok.to(torch.int64), dim=-1).bool()
    return valid & (steps >= start) & (steps < stop)


def _weighted_slope(x: Tensor, y: Tensor, w: Tensor) -> Tensor:
    y = torch.where(w, y, torch.zeros_like(y))
    wf = w.to(torch.float64)
    count = wf.sum(-1, keepdim=True)
    xm = (wf * x).sum(-1, keepdim=True) / count
    ym = (wf * y).sum(-1, keepdim=True) / count
    dx = (x - xm) * wf
    num = (dx * (y - ym)).sum(-1)
    den = (dx * (x - xm)).sum(-1)
    out = num / den
    return torch.where(count.squeeze(-1) >= 3, out, torch.full_like(out, math.nan))


def growth_rate(norms, start: int = 0, stop: Optional[int] = None, max_norm: float = 1e100,
                min_norm: float = 1e-100) -> Tensor:
    r"""Exponential growth rate per step: the least-squares slope of ``log norms`` against the step.

    ``norms`` is ``(..., steps+1)`` (step ``t`` at index ``t``, as in
    :class:`isolab.book.results.Sweep`); the fit uses steps ``start <= t < stop`` up to the
    first non-finite value or value outside ``(min_norm, max_norm)`` (an overflowing or
    collapsing run is fitted on its finite part).  ``rate > 0``: ``||W|| ~ e^{rate t}``
    grows exponentially; ``rate < 0``: it decays exponentially.  NaN where fewer than 3
    steps are usable.  Returns float64, shape ``(...)``.
    """
    x = torch.as_tensor(norms, dtype=torch.float64)
    w = _fit_mask(x, int(start), stop, max_norm, min_norm)
    steps = torch.arange(x.shape[-1], dtype=torch.float64)
    return _weighted_slope(steps.expand_as(x), torch.log(torch.where(w, x, torch.ones_like(x))), w)


def loglog_slope(norms, start: int = 1, stop: Optional[int] = None, max_norm: float = 1e100,
                 min_norm: float = 1e-100) -> Tensor:
    r"""Power-law exponent: the least-squares slope of ``log norms`` against ``log t``.

    Same conventions as :func:`growth_rate` (steps ``start <= t < stop``, ``start >= 1``,
    finite prefix only).  A random walk started at the origin gives ``1/2``
    (``||W|| ~ sqrt(t)``); exponential growth gives a slope that keeps increasing with
    the window.
    """
    if start < 1:
        raise ValueError(f"start must be >= 1 for a log-log fit, got {start}")
    x = torch.as_tensor(norms, dtype=torch.float64)
    w = _fit_mask(x, int(start), stop, max_norm, min_norm)
    logt = torch.log(torch.arange(x.shape[-1], dtype=torch.float64).clamp(min=1.0))
    return _weighted_slope(logt.expand_as(x), torch.log(torch.where(w, x, torch.ones_like(x))), w)


def crossing_steps(norms, levels) -> Tensor:
    r"""The first step at which ``norms`` reaches each of ``levels``: ``(..., len(levels))``.

    ``norms`` is ``(..., steps+1)``; a level never reached gives ``-1``.  For exponential
    growth the steps between successive decades (``levels = 10^j``) are equal; for faster
    than exponential growth they shrink; for a power law they grow.
    """
    x = torch.as_tensor(norms, dtype=torch.float64)
    lv = torch.as_tensor(levels, dtype=torch.float64)
    reached = x[..., None, :] >= lv[:, None]  # (..., levels, steps+1); NaN compares False
    any_ = reached.any(-1)
    first = reached.to(torch.int64).argmax(-1)
    return torch.where(any_, first, torch.full_like(first, -1))


# ----------------------------------------------------------------------------- symbolic
def gaussian_expectation(expr, variables):
    r"""``E[expr]`` for a SymPy polynomial in independent standard normal ``variables``.

    Expands ``expr`` and replaces each monomial ``prod_j v_j^{p_j}`` by its moment
    ``prod_j E[v^{p_j}]`` with ``E[v^p] = (p-1)!!`` for even ``p`` and ``0`` for odd ``p``
    (Isserlis' theorem for independent coordinates).  Other symbols are constants.
    """
    import sympy as sp

    variables = list(variables)
    poly = sp.Poly(sp.expand(expr), *variables)
    total = sp.Integer(0)
    for powers, coeff in poly.terms():
        moment = sp.Integer(1)
        for p in powers:
            if p % 2:
                moment = sp.Integer(0)
                break
            moment *= sp.factorial2(p - 1) if p else 1
        total += coeff * moment
    return sp.expand(total)
