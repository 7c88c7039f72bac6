"""SignSGD (signum): the elementwise sign of the (momentum-averaged) gradient."""

from __future__ import annotations

import torch
from torch.optim import Optimizer

from .elementwise import NONFINITE, Writer, as_float, first_nonfinite
from ._validation import check_beta, check_choice, check_lr, check_nonneg
from .failures import UNCHANGED

__all__ = ["SignSGD"]


class SignSGD(Optimizer):
    r"""Sign descent with optional momentum (signum, Bernstein et al. 2018).

    .. math::
        m_t = \mu\, m_{t-1} + (1-\mu)\, g_t, \qquad
        p_t = p_{t-1}(1 - \eta\lambda) - \eta\, \operatorname{sign}(m_t)

    With ``momentum=0`` this is ``p ← p − lr·sign(g)``: Adam's first step without ``ε``
    (``g/|g|``), the elementwise analogue of Muon's ``msign``. ``sign(0) = 0``, so a zero gradient
    gives a zero update. Elementwise, so any shape and no routing; the update is
    ``torch._foreach_*`` ops over each group.

    Args:
        params: parameters, parameter-group dicts, or an ``nn.Module`` (all its parameters, frozen
            ones too: a parameter unfrozen later is trained from then on).
        lr: step size ``>= 0``.
        momentum: ``μ ∈ [0, 1)``; the buffer is an exponential average of gradients.
        weight_decay: decoupled weight decay ``λ >= 0``.
        nonfinite: ``"auto"``, ``"raise"`` or ``"skip"`` (see :mod:`isolab.optim._base`).
    """

    def __init__(self, params, lr: float = 1e-3, momentum: float = 0.0, *, weight_decay: float = 0.0,
                 nonfinite: str = "auto"):
        self._names = {}
        if isinstance(params, torch.nn.Module):
            named = list(params.named_parameters())
            self._names = {p: n for n, p in named}
            params = [p for _, p in named]
        super().__init__(params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay, nonfinite=nonfinite))
        self._skipped = None

    def add_param_group(self, param_group):
        super().add_param_group(param_group)
        g = self.param_groups[-1]
        try:
            check_lr(g["lr"])
            check_beta(g["momentum"], "momentum")
            check_nonneg(g["weight_decay"], "weight_decay")
            check_choice(g["nonfinite"], "nonfinite", NONFINITE)
        except ValueError as e:
            self.param_groups.pop()
            raise ValueError(f"SignSGD: {e}") from None

    def load_state_dict(self, state_dict):
        """Load a state dict saved by :class:`SignSGD` (another class's raises ``ValueError``)."""
        for i, g in enumerate(state_dict.get("param_groups", []) if isinstance(state_dict, dict) else []):
            foreign = ("algorithm", "betas", "dampening", "nesterov", "maximize")  # isolab's routed / torch's
            if any(k in g for k in foreign) or any(k not in g for k in ("lr", "momentum", "weight_decay")):
                raise ValueError(
                    f"SignSGD.load_state_dict: parameter group {i} was not saved by SignSGD (keys "
                    f"{sorted(k for k in g if k != 'params')}); load it into the class that saved it")
        super().load_state_dict(state_dict)
        for g in self.param_groups:
            g.setdefault("nonfinite", "auto")

    def __setstate__(self, state):
        super().__setstate__(state)
        self.__dict__.setdefault("_skipped", None)
        self.__dict__.setdefault("_names", {})

    @property
    def skipped_steps(self) -> int:
        """Steps skipped on the device because a gradient was not finite (``nonfinite="skip"``)."""
        return 0 if self._skipped is None else int(self._skipped)

    def _skip_flag(self, grads):
        """``None`` (go on) or a device bool (skip mode); raise mode raises naming the parameter."""
        if not grads:
            return None
        device = grads[0][1].device
        mode = self.param_groups[0]["nonfinite"]
        if mode == "skip" or (mode == "auto" and device.type not in ("cpu", "meta")):
            flag = ~torch.stack([torch.isfinite(g).all() for _, g in grads]).all()
            self._skipped = flag.to(torch.int64) if self._skipped is None else self._skipped + flag
            return flag
        bad = first_nonfinite([g for _, g in grads])
        if bad is not None:
            p = grads[bad][0]
            name = self._names.get(p)
            what = f"parameter {name!r}" if name else "a parameter"
            raise FloatingPointError(f"SignSGD: non-finite (NaN or Inf) gradient in {what} of shape "
                                     f"{tuple(p.shape)}; {UNCHANGED}")
        return None

    @torch.no_grad()
    def step(self, closure=None):
        """Perform one optimization step (``closure``: re-evaluates the model and returns the loss)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        grads = [(p, p.grad) for g in self.param_groups for p in g["params"] if p.grad is not None]
        for _, g in grads:
            if g.is_sparse:
                raise ValueError("SignSGD: sparse gradients are not supported")
        write = Writer(self._skip_flag(grads))
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            lr, mu, wd = as_float(group["lr"]), group["momentum"], group["weight_decay"]
            g = [p.grad for p in params]
            for p in params:
                st = self.state[p]
                st["step"] = st.get("step", 0) + 1
            if mu > 0:
                bufs = [self.state[p].setdefault("momentum_buffer", torch.zeros_like(p)) for p in params]
                write.foreach(bufs, lambda b: torch._foreach_lerp_(b, g, 1 - mu) or b)
                g = bufs
            signs = torch._foreach_sign(g)

            def update(ps):
                if wd:
                    torch._foreach_mul_(ps, 1 - lr * wd)
                torch._foreach_add_(ps, signs, alpha=-lr)
                return ps

            write.foreach(params, update)
        return loss
