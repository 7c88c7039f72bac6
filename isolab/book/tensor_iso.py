r"""Two-sided preconditioners beyond Iso and Shampoo: the exponent family, K-FAC, a SOAP step,
and Iso's generalization to a three-factor (bilinear) layer.

Row convention as in :mod:`isolab.updates`: a linear layer ``Y = X W`` with inputs
``X`` ``(..., b, n)``, weights ``W`` ``(n, m)``, per-sample output gradients ``G``
``(..., b, m)`` and weight gradient ``g = X^T G / b``.  Every function returns the
*direction to subtract* (``W <- W - lr * update``).

Matrix layers
-------------
- :func:`power_update`: ``Cov(X)^{-p} g Cov(G)^{-p}``.  ``p = 0`` is SGD, ``p = 1/2`` is
  Iso (:func:`isolab.updates.iso_update`), ``p = 1`` is K-FAC's single-batch step.
- :func:`kfac_update`: ``(Cov(X) + lambda I)^{-1} g (Cov(G) + lambda I)^{-1}``
  (Martens & Grosse, 2015), built from :func:`isolab.updates.two_sided`.  It transforms
  like the weights under invertible reparametrizations (``X -> X A``, ``G -> G B`` gives
  ``A^{-1} K B^{-T}``), so the step it causes in function space does not depend on the
  coordinates; Iso's keeps the *norm* of the step instead.
- :func:`soap_step`: one step of SOAP (Vyas et al., 2024) in our reading of its
  algorithm: Adam run in the eigenbasis of Shampoo's accumulators ``L``, ``R``.
- :func:`random_transform`: a Haar-rotated invertible matrix of condition number ``kappa``
  and ``|det| = 1``, the changes of coordinates of Chapter 12.
- :func:`coordinate_ratios`, :func:`shampoo_after`: what a change of coordinates
  ``X -> X A``, ``G -> G B`` does to an update's size and to its predicted loss decrease.

Cost
----
:func:`extra_flops` counts the flops of each optimizer's extra work on one ``n x m``
layer per step (statistics, applying the preconditioner, roots or eigenbases amortized
over their refresh interval, Newton-Schulz), to compare with the layer's own forward and
backward pass, :func:`forward_backward_flops` ``= 6 b n m`` for ``b`` rows (tokens).

Bilinear (three-factor) layers
------------------------------
A tensor ``W`` ``(n, m, p)`` maps two inputs ``a`` ``(n,)``, ``b`` ``(m,)`` to
``c_k = sum_ij W_ijk a_i b_j``.  With per-sample output gradients ``g = dL_r/dc`` and a
batch-mean loss, ``dL/dW = (1/B) sum_r a_r (x) b_r (x) g_r`` (:func:`bilinear_gradient`).
Iso's preconditioner multiplies this tensor by ``Cov(a)^{-1/2}`` along dimension 1,
``Cov(b)^{-1/2}`` along dimension 2 and ``Cov(g)^{-1/2}`` along dimension 3
(:func:`tensor_iso_update`), which is the gradient computed from *whitened* samples.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
from torch import Tensor, nn

from isolab import rules, updates
from isolab.linalg import covariance, random_orthogonal, symmetric_inverse_root

from .scaling import EIGH_FLOPS

__all__ = [
    "power_update",
    "kfac_update",
    "soap_step",
    "mode_multiply",
    "bilinear_gradient",
    "tensor_iso_update",
    "tensor_iso_update_modes",
    "BilinearLayer",
    "random_transform",
    "coordinate_ratios",
    "shampoo_after",
    "COST_METHODS",
    "extra_flops",
    "forward_backward_flops",
]


# ----------------------------------------------------------------------------- matrix layers
def _check_pair(X: Tensor, G: Tensor) -> None:
    if X.ndim < 2 or G.ndim < 2 or X.shape[-2] != G.shape[-2] or X.shape[-2] == 0:
        raise ValueError(f"X (..., b, n) and G (..., b, m) need the same b >= 1, got {tuple(X.shape)}, {tuple(G.shape)}")


def power_update(X: Tensor, G: Tensor, p: float, damping: float = 0.0) -> Tensor:
    r"""``(Cov(X) + lambda I)^{-p} (X^T G / b) (Cov(G) + lambda I)^{-p}``: the exponent family.

    ``p = 0`` is SGD's direction, ``p = 1/2`` Iso's, ``p = 1`` K-FAC's (single batch).
    Under ``X -> X A``, ``G -> G B`` (``A``, ``B`` invertible) only ``p = 1/2`` keeps the
    Frobenius norm (indeed every singular value) and only ``p = 1`` transforms like the
    weights, ``U -> A^{-1} U B^{-T}``.  ``damping`` is relative (``lambda = damping tr(C)/n``
    per side); with ``damping = 0`` singular covariances get the pseudo-inverse root.
    """
    _check_pair(X, G)
    g = updates.weight_gradient(X, G)
    if p == 0:
        return g
    left = symmetric_inverse_root(covariance(X), 1.0 / p, damping)
    right = symmetric_inverse_root(covariance(G), 1.0 / p, damping)
    return updates.two_sided(g, left, right)


def kfac_update(X: Tensor, G: Tensor, damping: float = 0.0) -> Tensor:
    r"""K-FAC's single-batch step ``(Cov(X) + lambda I)^{-1} g (Cov(G) + lambda I)^{-1}``.

    The Fisher of a linear layer is approximated by the Kronecker product
    ``E[x x^T] (x) E[g g^T]`` (per-sample output gradients ``g``); inverting it factor by
    factor gives exponent ``-1`` on each side.  Same as :func:`power_update` with ``p = 1``.
    """
    return power_update(X, G, 1.0, damping)


def soap_step(
    grad: Tensor,
    state: dict,
    betas: tuple = (0.9, 0.999),
    shampoo_beta: float = 0.95,
    eps: float = 1e-8,
    interval: int = 10,
) -> Tensor:
    r"""One SOAP direction for the weight gradient ``grad`` ``(..., n, m)``; updates ``state``.

    Our reading of SOAP (Vyas et al., 2024, their Algorithm 3): keep Shampoo's accumulators
    ``L <- beta_s L + (1 - beta_s) g g^T`` and ``R <- beta_s R + (1 - beta_s) g^T g``, their
    eigenvector bases ``Q_L``, ``Q_R`` (recomputed every ``interval`` steps, at the first
    step from the first gradient), the first moment ``M`` in the original coordinates and
    Adam's second moment ``V`` in the rotated ones:

        g' = Q_L^T g Q_R,  M <- b1 M + (1-b1) g,  V <- b2 V + (1-b2) g'^2,
        direction = Q_L [ (Q_L^T M Q_R / (1-b1^t)) / (sqrt(V / (1-b2^t)) + eps) ] Q_R^T.

    ``V`` is not rotated when the basis changes (the paper's simplification).  With one
    step the rotated gradient is diagonal (the SVD of ``g``), so the first direction is
    ``msign(g)`` up to ``eps``: SOAP starts like Shampoo and Muon.  Rotating every
    gradient, ``g -> Q g U`` with orthogonal ``Q``, ``U``, rotates every direction the same
    way (eigenvector signs cancel because ``V`` holds squares).

    ``state`` is a dict (start with ``{}``); keys ``step``, ``L``, ``R``, ``QL``, ``QR``,
    ``M``, ``V``.
    """
    if grad.ndim < 2:
        raise ValueError(f"grad must be (..., n, m), got {tuple(grad.shape)}")
    step = state.get("step", 0) + 1
    state["step"] = step
    state["L"] = rules.ema(grad @ grad.mT, state.get("L"), shampoo_beta)
    state["R"] = rules.ema(grad.mT @ grad, state.get("R"), shampoo_beta)
    if rules.refresh_due(step, interval) or "QL" not in state:
        state["QL"] = torch.linalg.eigh(state["L"]).eigenvectors
        state["QR"] = torch.linalg.eigh(state["R"]).eigenvectors
    QL, QR = state["QL"], state["QR"]
    if "M" not in state:
        state["M"] = torch.zeros_like(grad)
        state["V"] = torch.zeros_like(grad)
    rotated = QL.mT @ grad @ QR
    beta1, beta2 = betas
    state["M"] = state["M"].lerp(grad, 1 - beta1)
    state["V"] = state["V"].mul(beta2).addcmul(rotated, rotated, value=1 - beta2)
    direction = rules.adam_direction(QL.mT @ state["M"] @ QR, state["V"], step, betas, eps)
    return QL @ direction @ QR.mT


# ----------------------------------------------------------------------------- bilinear layers
def mode_multiply(T: Tensor, M: Tensor, dim: int) -> Tensor:
    r"""Multiply tensor ``T`` along dimension ``dim`` by the matrix ``M``: ``T x_dim M``.

    ``out[..., j, ...] = sum_i T[..., i, ...] M[i, j]`` (the row convention of ``X M``; for
    the symmetric preconditioners used here the side does not matter).
    """
    if M.ndim != 2 or M.shape[0] != T.shape[dim]:
        raise ValueError(f"M must be ({T.shape[dim]}, k) to multiply dim {dim} of {tuple(T.shape)}, got {tuple(M.shape)}")
    return torch.movedim(torch.movedim(T, dim, -1) @ M, -1, dim)


def _check_triple(A: Tensor, B: Tensor, G: Tensor) -> None:
    for name, T in (("A", A), ("B", B), ("G", G)):
        if T.ndim < 2:
            raise ValueError(f"{name} must be (..., batch, d), got {tuple(T.shape)}")
    if not (A.shape[-2] == B.shape[-2] == G.shape[-2]) or A.shape[-2] == 0:
        raise ValueError(
            f"A, B, G must share a batch size >= 1 (dim -2), got {tuple(A.shape)}, {tuple(B.shape)}, {tuple(G.shape)}"
        )


def bilinear_gradient(A: Tensor, B: Tensor, G: Tensor) -> Tensor:
    r"""``dL/dW = (1/batch) sum_r a_r (x) b_r (x) g_r`` for ``c_k = sum_ij W_ijk a_i b_j``.

    ``A`` ``(..., batch, n)``, ``B`` ``(..., batch, m)``, ``G`` ``(..., batch, p)`` (per-sample
    gradients of a batch-mean loss, i.e. ``batch * dL/dc``); returns ``(..., n, m, p)``.
    """
    _check_triple(A, B, G)
    return torch.einsum("...ri,...rj,...rk->...ijk", A, B, G) / A.shape[-2]


def tensor_iso_update(A: Tensor, B: Tensor, G: Tensor, damping: float = 0.0) -> Tensor:
    r"""Iso for a bilinear layer: the gradient tensor whitened along each of its three dimensions.

    ``U = dL/dW x_1 Cov(a)^{-1/2} x_2 Cov(b)^{-1/2} x_3 Cov(g)^{-1/2}`` with uncentered
    covariances ``Cov(a) = A^T A / batch`` (relative ``damping`` per factor, pseudo-inverse
    roots when ``damping = 0``).  Because the gradient is multilinear in the samples this
    equals the gradient computed from whitened samples ``a Cov(a)^{-1/2}``, ``b Cov(b)^{-1/2}``,
    ``g Cov(g)^{-1/2}``, which is how it is computed (``O(batch (n^2 + m^2 + p^2 + nmp))``).

    Properties (damping 0): for invertible ``A_1, A_2, A_3`` applied to every sample,
    ``a -> a A_1``, ``b -> b A_2``, ``g -> g A_3``, the whitened samples change by fixed
    orthogonal matrices, so ``||U||_F`` (indeed the norm of every unfolding's singular
    values) is unchanged; for orthogonal ``Q_1, Q_2, Q_3`` the update rotates with them:
    ``U' = U x_1 Q_1 x_2 Q_2 x_3 Q_3``.  With ``m = 1`` and ``b = 1`` it is
    :func:`isolab.updates.iso_update` of ``(A, G)``.
    """
    _check_triple(A, B, G)
    whitened = [T @ symmetric_inverse_root(covariance(T), 2, damping) for T in (A, B, G)]
    return bilinear_gradient(*whitened)


def tensor_iso_update_modes(A: Tensor, B: Tensor, G: Tensor, damping: float = 0.0) -> Tensor:
    r"""The same update computed as the paper states it: gradient tensor, then three mode products.

    A direct transcription, kept as an independent check of :func:`tensor_iso_update`
    (unbatched inputs only).
    """
    _check_triple(A, B, G)
    if A.ndim != 2:
        raise ValueError("tensor_iso_update_modes takes unbatched (batch, d) inputs")
    U = bilinear_gradient(A, B, G)
    for dim, T in enumerate((A, B, G)):
        U = mode_multiply(U, symmetric_inverse_root(covariance(T), 2, damping), dim)
    return U


class BilinearLayer(nn.Module):
    r"""``c_k = sum_ij W_ijk a_i b_j`` with a weight tensor ``W`` ``(n, m, p)``.

    ``forward(a, b)`` takes ``(..., n)`` and ``(..., m)`` and returns ``(..., p)``.
    Initialized ``W ~ N(0, 1) / sqrt(n m)`` so that ``c`` has unit scale for unit inputs.
    """

    def __init__(self, n: int, m: int, p: int, dtype: Optional[torch.dtype] = None,
                 generator: Optional[torch.Generator] = None):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, m, p, generator=generator, dtype=dtype) / (n * m) ** 0.5)

    def forward(self, a: Tensor, b: Tensor) -> Tensor:
        return torch.einsum("...i,...j,ijk->...k", a, b, self.weight)


# ----------------------------------------------------------------------------- coordinates
def random_transform(n: int, kappa: float, gen: torch.Generator, batch: tuple = (), dtype=torch.float64) -> Tensor:
    r"""``U diag(s) V^T`` with Haar-random orthogonal ``U``, ``V`` and singular values ``s``
    log-spaced from ``sqrt(kappa)`` down to ``1/sqrt(kappa)``: condition number ``kappa`` and
    ``|det| = 1``. ``batch`` prepends batch dimensions (independent draws)."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    if not kappa >= 1:
        raise ValueError(f"kappa must be >= 1 (a condition number), got {kappa!r}")
    half = 0.5 * math.log10(kappa)
    s = torch.logspace(half, -half, n, dtype=dtype)
    U, V = (random_orthogonal(n, gen, sample_shape=batch, dtype=dtype) for _ in range(2))
    return (U * s) @ V.mT


def coordinate_ratios(update, X: Tensor, G: Tensor, A: Tensor, B: Tensor) -> tuple[Tensor, Tensor]:
    r"""``(‖U'‖ / ‖U‖, <g', U'> / <g, U>)`` for ``U = update(X, G)``, ``U' = update(X A, G B)``
    and the weight gradients ``g``, ``g'`` of the two batches: how much the change of
    coordinates moves the step size and the predicted (first-order) loss decrease."""
    _check_pair(X, G)
    if A.shape != (X.shape[-1], X.shape[-1]) or B.shape != (G.shape[-1], G.shape[-1]):
        raise ValueError(f"A must be ({X.shape[-1]}, {X.shape[-1]}) and B ({G.shape[-1]}, {G.shape[-1]}), "
                         f"got {tuple(A.shape)} and {tuple(B.shape)}")
    U0, U1 = update(X, G), update(X @ A, G @ B)
    g0, g1 = updates.weight_gradient(X, G), updates.weight_gradient(X @ A, G @ B)
    return U1.norm() / U0.norm(), (g1 * U1).sum() / (g0 * U0).sum()


def shampoo_after(history, A: Optional[Tensor] = None, B: Optional[Tensor] = None) -> tuple[Tensor, Tensor]:
    r"""Shampoo's rule on the batches ``history`` (a list of ``(X, G)``), each transformed to
    ``(X A, G B)``: accumulate ``L = sum g g^T``, ``R = sum g^T g`` (no decay), then return
    ``(L^{-1/4} g R^{-1/4}, g)`` for the last batch's gradient ``g``. ``A``, ``B`` default to
    the identity."""
    if not history:
        raise ValueError("shampoo_after needs at least one (X, G) batch in history, got none")
    L = R = g = None
    for X, G in history:
        X = X if A is None else X @ A
        G = G if B is None else G @ B
        g = updates.weight_gradient(X, G)
        L, R = rules.accumulate(g @ g.mT, L, 1.0), rules.accumulate(g.mT @ g, R, 1.0)
    return updates.two_sided(g, symmetric_inverse_root(L, 4), symmetric_inverse_root(R, 4)), g


# ----------------------------------------------------------------------------- cost
COST_METHODS = ("Adam", "K-FAC", "Shampoo", "Muon", "SOAP", "Iso")


def forward_backward_flops(n: int, m: int, b: int) -> float:
    """Flops of an ``n x m`` linear layer's forward and backward pass over ``b`` rows:
    ``2bnm`` forward, ``4bnm`` backward (input and weight gradients)."""
    return 6.0 * b * n * m


def extra_flops(method: str, n: int, m: int, b: int, *, root_interval: int = 10, stat_interval: int = 1,
                stat_rows: int | None = None, eig_constant: float = EIGH_FLOPS, ns_steps: int = 5) -> float:
    r"""Flops per step of ``method``'s work beyond SGD on an ``n x m`` layer with ``b`` rows.

    - statistics from the layer's rows (K-FAC, Iso): ``X^T X`` and ``G^T G``, ``2N(n^2 + m^2)``
      every ``stat_interval`` steps, from ``N = min(b, stat_rows)`` rows (``stat_rows=None``:
      all ``b``; ``isolab.optim``'s Iso and IsoAdam default to ``max(1024, 2 max(n, m))``);
    - statistics from the gradient (Shampoo, SOAP): ``g g^T`` and ``g^T g``, ``2nm(n + m)``;
    - applying ``P_L g P_R``: ``2nm(n + m)`` (SOAP rotates in and out: three times that);
    - every ``root_interval`` steps, an eigendecomposition per side, ``eig_constant (n^3 + m^3)``
      (:data:`isolab.book.scaling.EIGH_FLOPS`, Chapter 13's model), plus ``2(n^3 + m^3)`` to
      form ``V diag(w) V^T`` where a matrix function is applied (K-FAC, Shampoo, Iso); SOAP
      keeps only the eigenvectors;
    - Muon: ``ns_steps`` quintic Newton-Schulz steps, each ``4 s^2 l + 2 s^3`` with
      ``s = min(n, m)``, ``l = max(n, m)``;
    - Adam: ``10 nm`` elementwise.
    """
    if method not in COST_METHODS:
        raise ValueError(f"unknown method {method!r}; expected one of {COST_METHODS}")
    for name, value in (("n", n), ("m", m), ("b", b), ("root_interval", root_interval), ("stat_interval", stat_interval),
                        ("stat_rows", 1 if stat_rows is None else stat_rows)):
        if not isinstance(value, (int,)) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    used = b if stat_rows is None else min(b, stat_rows)
    n, m, b = float(n), float(m), float(b)
    rows = 2 * float(used) * (n * n + m * m) / stat_interval
    grads = 2 * n * m * (n + m)
    apply = 2 * n * m * (n + m)
    eigenbases = eig_constant * (n ** 3 + m ** 3) / root_interval
    roots = eigenbases + 2 * (n ** 3 + m ** 3) / root_interval
    s, l = min(n, m), max(n, m)
    return {"Adam": 10 * n * m,
            "K-FAC": rows + apply + roots,
            "Shampoo": grads + apply + roots,
            "Muon": ns_steps * (4 * s * s * l + 2 * s ** 3),
            "SOAP": grads + 3 * apply + eigenbases,
            "Iso": rows + apply + roots}[method]
