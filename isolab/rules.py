r"""The stateful pieces of the optimizers, as small functions shared by every caller.

:mod:`isolab.updates` holds the *stateless* update directions (one batch, no memory).
The optimizers in :mod:`isolab.optim` add state across steps: Adam's moments and their
bias correction, momentum, exponential averages of covariances, Gram accumulators, a
refresh schedule, Muon's shape factor.  Those rules live here, once, and are called both
by the ``torch.optim`` optimizers (one parameter at a time, a Python float ``lr``) and by
the vectorized engine :mod:`isolab.book.engine` (a whole learning-rate sweep at once: every
tensor carries a lane dimension and ``lr`` is a tensor that broadcasts against it, e.g.
shape ``(1, lanes, 1, 1)`` for weights of shape ``(layers, lanes, n, m)``).

The optimizers' elementwise parts use the list forms (``torch._foreach_*``,
:func:`adam_update_foreach_`), which perform the same operations as the single-tensor forms and
are tested bitwise equal to them.

Every function is batched over leading dimensions.  Functions whose name ends in ``_``
modify their first tensor arguments in place (like ``torch``'s own convention); the others
are pure.  With a float ``lr`` each function performs exactly the operations the
optimizer performed before it was factored out (so a resumed run and the comparison with
``torch.optim.Adam`` stay bitwise); with a tensor ``lr`` the same arithmetic is done with
a per-lane scalar, which equals the float path to rounding.
"""

from __future__ import annotations

from typing import Optional, Union

import torch
from torch import Tensor

from . import linalg

__all__ = [
    "LR",
    "soap_eigenbasis",
    "soap_refresh_eigenbasis",
    "soap_rotate",
    "soap_unrotate",
    "decoupled_weight_decay_",
    "descend_",
    "momentum_",
    "heavy_ball_",
    "adam_moments_",
    "adam_bias_corrections",
    "adam_direction",
    "adam_update_",
    "adam_update_foreach_",
    "ema",
    "accumulate",
    "bias_correction",
    "refresh_due",
    "muon_scale",
    "muon_msign",
]

#: A learning rate: a Python float (one parameter) or a tensor broadcasting against the
#: parameter (one value per lane of a sweep).
LR = Union[float, Tensor]


# ----------------------------------------------------------------------------- applying a step
def decoupled_weight_decay_(param: Tensor, lr: LR, weight_decay: float) -> Tensor:
    r"""Decoupled (AdamW-style) weight decay ``p <- p (1 - lr * wd)``, in place; no-op if ``wd == 0``."""
    if weight_decay:
        param.mul_(1 - lr * weight_decay)
    return param


def descend_(param: Tensor, direction: Tensor, lr: LR) -> Tensor:
    r"""``p <- p - lr * direction``, in place (``direction`` cast to ``p``'s dtype)."""
    direction = direction.to(param.dtype)
    if isinstance(lr, Tensor):
        param.sub_(direction * lr)
    else:
        param.add_(direction, alpha=-lr)
    return param


# ----------------------------------------------------------------------------- momentum
def momentum_(buf: Tensor, grad: Tensor, momentum: float, nesterov: bool) -> Tensor:
    r"""Exponential-average momentum (Muon, Iso, SignSGD): ``B <- mu B + (1 - mu) g``.

    Updates ``buf`` in place and returns the direction to use: the Nesterov form
    ``(1 - mu) g + mu B`` (a new tensor) or ``B`` itself.
    """
    buf.lerp_(grad, 1 - momentum)
    return grad.lerp(buf, momentum) if nesterov else buf


def heavy_ball_(
    buf: Optional[Tensor], grad: Tensor, param: Tensor, momentum: float, nesterov: bool, weight_decay: float
) -> Tensor:
    r"""``torch.optim.SGD``'s direction (dampening 0): coupled weight decay, heavy-ball momentum.

    ``d = g + wd p``; with momentum ``B <- mu B + d`` (``buf`` zero-initialised, updated in
    place; its first value is ``d``, as torch's clone) and ``d = d + mu B`` (Nesterov) or
    ``B``.  Returns the direction to subtract; ``buf`` may be ``None`` when ``momentum == 0``.
    """
    d = grad.add(param, alpha=weight_decay) if weight_decay else grad
    if momentum:
        buf.mul_(momentum).add_(d)
        d = d.add(buf, alpha=momentum) if nesterov else buf
    return d


# ----------------------------------------------------------------------------- Adam
def adam_moments_(exp_avg: Tensor, exp_avg_sq: Tensor, grad: Tensor, betas) -> None:
    r"""Adam's moment updates in place: ``m <- b1 m + (1-b1) g``, ``v <- b2 v + (1-b2) g^2``."""
    beta1, beta2 = betas
    exp_avg.lerp_(grad, 1 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)


def adam_bias_corrections(step: int, betas) -> tuple[float, float]:
    r"""``(1 - b1^t, 1 - b2^t)`` for the step count ``t >= 1``."""
    beta1, beta2 = betas
    return 1 - beta1**step, 1 - beta2**step


def adam_direction(exp_avg: Tensor, exp_avg_sq: Tensor, step: int, betas, eps: float) -> Tensor:
    r"""Adam's bias-corrected direction ``m_hat / (sqrt(v_hat) + eps)`` (a new tensor)."""
    bc1, bc2 = adam_bias_corrections(step, betas)
    denom = (exp_avg_sq.sqrt() / bc2**0.5).add_(eps)
    return exp_avg.div(denom).div_(bc1)


def adam_update_(
    param: Tensor, grad: Tensor, exp_avg: Tensor, exp_avg_sq: Tensor, step: int, lr: LR, betas, eps: float,
    weight_decay: float = 0.0,
) -> Tensor:
    r"""One AdamW step in place, operation for operation as ``torch.optim.Adam``'s single-tensor path.

    ``step`` is the step count *after* this step (1 at the first).  Weight decay is
    decoupled: ``p <- p (1 - lr wd)``.  With a float ``lr`` the parameter update is
    ``p.addcdiv_(m, denom, value=-lr/bc1)`` exactly as torch does; with a tensor ``lr``
    it is ``p - (lr/bc1) * (m/denom)``, equal to rounding.
    """
    decoupled_weight_decay_(param, lr, weight_decay)
    adam_moments_(exp_avg, exp_avg_sq, grad, betas)
    bc1, bc2 = adam_bias_corrections(step, betas)
    step_size = lr / bc1
    denom = (exp_avg_sq.sqrt() / bc2**0.5).add_(eps)
    if isinstance(lr, Tensor):
        param.sub_(exp_avg.div(denom).mul_(step_size))
    else:
        param.addcdiv_(exp_avg, denom, value=-step_size)
    return param


def adam_update_foreach_(
    params: list[Tensor], grads: list[Tensor], exp_avgs: list[Tensor], exp_avg_sqs: list[Tensor], steps: list[int],
    lr: float, betas, eps: float, weight_decay: float = 0.0,
) -> None:
    r""":func:`adam_update_` on lists of tensors with ``torch._foreach_*`` ops: the same operations in
    the same order (bitwise equal, tested), one kernel launch per operation for the whole list.
    ``steps[i]`` is tensor ``i``'s count after this step; ``lr`` a float."""
    beta1, beta2 = betas
    corrections = [adam_bias_corrections(t, betas) for t in steps]
    if weight_decay:
        torch._foreach_mul_(params, 1 - lr * weight_decay)
    torch._foreach_lerp_(exp_avgs, grads, 1 - beta1)
    torch._foreach_mul_(exp_avg_sqs, beta2)
    torch._foreach_addcmul_(exp_avg_sqs, grads, grads, 1 - beta2)
    denom = torch._foreach_sqrt(exp_avg_sqs)
    torch._foreach_div_(denom, [bc2**0.5 for _, bc2 in corrections])
    torch._foreach_add_(denom, eps)
    torch._foreach_addcdiv_(params, exp_avgs, denom, [-lr / bc1 for bc1, _ in corrections])


# ----------------------------------------------------------------------------- statistics over time
def ema(new: Tensor, previous: Optional[Tensor], beta: float) -> Tensor:
    r"""Zero-initialised exponential average ``C <- beta C + (1 - beta) new`` (a new tensor).

    With no previous value the average starts from 0: ``(1 - beta) new`` (``new`` itself
    when ``beta == 0``).  Divide by :func:`bias_correction` to undo the zero start.  This
    is the rule of Iso's covariance averages.
    """
    if previous is not None:
        return new.lerp(previous, beta)
    if beta > 0:
        return new * (1 - beta)
    return new


def accumulate(new: Tensor, previous: Optional[Tensor], beta: float) -> Tensor:
    r"""Decayed sum ``S <- beta S + new`` (Shampoo's Gram accumulators; ``beta = 1`` sums forever)."""
    if previous is None:
        return new
    return new.add(previous, alpha=beta)


def bias_correction(beta: float, count: int) -> float:
    r"""``1 - beta^count``: divide a zero-initialised average of ``count`` terms by it."""
    return 1 - beta**count


def refresh_due(step: int, interval: int) -> bool:
    r"""Whether a quantity refreshed every ``interval`` steps is recomputed at ``step`` (1, 1+interval, ...)."""
    return (step - 1) % interval == 0


# ----------------------------------------------------------------------------- Muon
def muon_scale(rows: int, cols: int) -> float:
    r"""Muon's shape factor ``sqrt(max(1, rows/cols))`` (``rows x cols`` in torch's ``(out, in)`` layout)."""
    return max(1.0, rows / cols) ** 0.5


def muon_msign(M: Tensor, *, steps: int = 5, exact: bool = False, compute_dtype=None,
               coefficients=linalg.QUINTIC) -> Tensor:
    r"""Muon's direction for (a batch of) matrices ``M`` (last two dims): ``msign(M)`` times :func:`muon_scale`.

    ``msign`` by ``steps`` Newton--Schulz iterations with ``coefficients`` (Keller Jordan's
    quintic by default, or a schedule such as ``"polar_express"``:
    :func:`isolab.linalg.msign_newton_schulz`) or exactly by SVD (``exact=True``).  The shape
    factor uses ``M``'s last two dimensions read as ``(out, in)``.
    """
    if exact:
        o = linalg.msign(M)
    else:
        o = linalg.msign_newton_schulz(M, steps=steps, coefficients=coefficients, compute_dtype=compute_dtype)
    scale = muon_scale(M.shape[-2], M.shape[-1])
    return o * scale if scale != 1.0 else o


# ----------------------------------------------------------------------------- SOAP
# SOAP (Vyas et al. 2024) runs Adam in the eigenbasis of Shampoo's two factors
# L = EMA(g g^T) and R = EMA(g^T g): rotate the gradient to Q_L^T g Q_R, keep Adam's second
# moment there, rotate the normalized step back. The functions below follow the reference
# implementation (pytorch-optimizer's SOAP, after the authors' code) operation for
# operation, batched over leading dimensions, so that the engine's lanes can be tested
# against it.
def soap_eigenbasis(M: Tensor) -> Tensor:
    r"""Eigenvectors of the symmetric ``M`` (last two dims), columns by *decreasing*
    eigenvalue: SOAP's first basis. A ``1e-30 I`` shift, as the reference, keeps ``eigh``
    defined on an all-zero factor."""
    eye = torch.eye(M.shape[-1], dtype=M.dtype, device=M.device)
    _, Q = torch.linalg.eigh(M + 1e-30 * eye)
    return Q.flip(-1)


def soap_refresh_eigenbasis(M: Tensor, Q: Tensor, second_moment: Tensor, dim: int) -> tuple[Tensor, Tensor]:
    r"""One power-iteration refresh of SOAP's basis ``Q`` of the factor ``M``.

    The columns of ``M Q`` are sorted by the Rayleigh quotients ``diag(Q^T M Q)`` (largest
    first) and orthonormalized by a QR decomposition, done in float32 as the reference does.
    Adam's second moment lives in the old basis: its entries along ``dim`` (of the matrix:
    ``-2`` for the left factor, ``-1`` for the right) are permuted the same way.
    Returns the new basis and the permuted second moment."""
    MQ = M @ Q
    order = torch.argsort((Q * MQ).sum(dim=-2), dim=-1, descending=True)  # (..., m)
    columns = order.unsqueeze(-2).expand_as(MQ)
    power = torch.gather(MQ, -1, columns)
    if dim == -2:
        index = order.unsqueeze(-1).expand_as(second_moment)
    else:
        index = order.unsqueeze(-2).expand_as(second_moment)
    second_moment = torch.gather(second_moment, dim, index)
    q, _ = torch.linalg.qr(power.to(torch.float32))
    return q.to(power.dtype), second_moment


def soap_rotate(g: Tensor, Q_left: Tensor, Q_right: Tensor) -> Tensor:
    r"""``Q_L^T g Q_R``: the gradient in SOAP's basis."""
    return Q_left.mT @ g @ Q_right


def soap_unrotate(u: Tensor, Q_left: Tensor, Q_right: Tensor) -> Tensor:
    r"""``Q_L u Q_R^T``: a step from SOAP's basis back to the parameter's."""
    return Q_left @ u @ Q_right.mT
