"""The elementwise parts of a step, on lists of tensors: the AdamW fallback, masked writes for
steps skipped on the device, the host-side check for non-finite gradients."""

from __future__ import annotations

import math

import torch

from .. import fsdp, rules
from ._validation import check_betas, check_eps, check_lr, check_nonneg

__all__ = ["NONFINITE", "Writer", "adam_step_", "adam_fallback_defaults", "validate_adam_group", "as_float",
           "first_nonfinite"]

#: ``nonfinite=`` choices (see :mod:`isolab.optim._base`).
NONFINITE = ("auto", "raise", "skip")


def validate_adam_group(group: dict) -> None:
    check_lr(group["lr"])
    group["betas"] = check_betas(group["betas"])
    check_eps(group["eps"])
    check_nonneg(group["weight_decay"], "weight_decay")


def adam_fallback_defaults(adam_lr, adam_betas, adam_eps, adam_weight_decay,
                           names=("adam_lr", "adam_betas", "adam_eps", "adam_weight_decay")):
    """Validated hyperparameters of the AdamW fallback group. ``names`` are the arguments the
    caller passed (``adam_lr``…, or ``lr``… where IsoAdam's fallback inherits its own)."""
    check_lr(adam_lr, names[0])
    check_betas(adam_betas, names[1])
    check_eps(adam_eps, names[2])
    check_nonneg(adam_weight_decay, names[3])
    return dict(lr=adam_lr, betas=tuple(adam_betas), eps=adam_eps, weight_decay=adam_weight_decay)


def as_float(value):
    """A hyperparameter as a Python float (a one-element tensor ``lr`` is read once per step)."""
    return float(value) if isinstance(value, torch.Tensor) else value


class Writer:
    """Apply in-place updates, or (``skip`` a device bool) keep the old values where ``skip``
    is set, without reading it on the host: ``write(t, f)`` runs ``f`` on ``t`` (``f`` updates
    its argument in place and returns it)."""

    def __init__(self, skip: torch.Tensor | None):
        self.skip = skip

    def __call__(self, target: torch.Tensor, update) -> None:
        if self.skip is None:
            update(target)
        else:
            new = update(target.clone())
            target.copy_(torch.where(self.skip, target, new))

    def foreach(self, targets: list[torch.Tensor], update) -> None:
        """``update(list)`` on a list of tensors (``torch._foreach_*`` ops), masked as above."""
        self.many(targets, lambda ts: update(ts) or ts)

    def many(self, targets: list[torch.Tensor], update) -> None:
        """``update(list)`` changes the tensors of the list in place (several lists concatenated,
        for a rule that updates parameters and moments together), masked as above."""
        if self.skip is None:
            update(targets)
            return
        clones = [t.clone() for t in targets]
        update(clones)
        for t, n in zip(targets, clones):
            t.copy_(torch.where(self.skip, t, n))

    def value(self, old, new):
        """A replaced state entry: ``new``, or ``old`` where the step is skipped."""
        if self.skip is None or not isinstance(new, torch.Tensor):
            return new
        return torch.where(self.skip, torch.zeros_like(new) if old is None else old.to(new.dtype), new)


def adam_step_(params, grads, states, lr, betas, eps, weight_decay, write: Writer, count_key="step") -> None:
    """AdamW on a list of parameters (:func:`isolab.rules.adam_update_foreach_`, ``torch.optim.Adam``'s
    arithmetic); ``states[i]`` holds the count under ``count_key`` and ``exp_avg``, ``exp_avg_sq``
    (created here, zero). Under FSDP2 each process updates its own rows."""
    if not params:
        return
    for p, st in zip(params, states):
        if "exp_avg" not in st:
            st[count_key] = 0
            st["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            st["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        st[count_key] += 1
    local = [fsdp.local(p) for p in params]
    grads = [fsdp.local(g) for g in grads]
    m = [fsdp.local(st["exp_avg"]) for st in states]
    v = [fsdp.local(st["exp_avg_sq"]) for st in states]
    steps = [st[count_key] for st in states]
    if isinstance(lr, torch.Tensor):  # a per-tensor learning rate: one at a time
        for p, g, a, b, t in zip(local, grads, m, v, steps):
            write.many([p, a, b], lambda ts, g=g, t=t: rules.adam_update_(*ts[:1], g, *ts[1:], t, lr, betas, eps,
                                                                          weight_decay))
        return
    write.many(local + m + v, lambda ts: rules.adam_update_foreach_(
        ts[:len(local)], grads, ts[len(local):2 * len(local)], ts[2 * len(local):], steps, lr, betas, eps,
        weight_decay))


def first_nonfinite(grads) -> int | None:
    """Index of the first gradient with a NaN or Inf, or ``None`` (one host read when all are
    finite: a NaN or Inf anywhere makes the sum non-finite)."""
    if not grads:
        return None
    device = grads[0].device
    total = torch.stack([g.sum(dtype=torch.float32).to(device) for g in grads]).sum()
    if math.isfinite(float(total)):
        return None
    flags = torch.stack([torch.isfinite(g).all().to(device) for g in grads])
    if bool(flags.all()):  # finite gradients whose sum overflowed
        return None
    return int((~flags).nonzero()[0, 0])


