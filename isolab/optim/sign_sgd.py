"""SignSGD (signum): the elementwise sign of the (momentum-averaged) gradient."""

from __future__ import annotations

import torch
from torch.optim import Optimizer

from .. import rules
from ._base import RoutedOptimizer, as_float, check_beta, check_lr, check_nonneg

__all__ = ["SignSGD"]


class SignSGD(Optimizer):
    r"""Sign descent with optional momentum (signum, Bernstein et al. 2018).

    .. math::
        m_t = \mu\, m_{t-1} + (1-\mu)\, g_t, \qquad
        p_t = p_{t-1}(1 - \eta\lambda) - \eta\, \operatorname{sign}(m_t)

    With ``momentum=0`` this is ``p ← p − lr·sign(g)``: Adam's first step without
    ``ε`` (``g/|g|``), the elementwise analogue of Muon's ``msign``. ``sign(0) = 0``, so a
    zero gradient gives a zero update. Works on parameters of any shape (it is
    elementwise, so there is no routing).

    Args:
        params: iterable of parameters or of parameter-group dicts (or an ``nn.Module``,
            whose trainable parameters are all used).
        lr: step size, ``>= 0``.
        momentum: ``μ ∈ [0, 1)``; the buffer is an exponential average of gradients.
        weight_decay: decoupled weight decay ``λ >= 0``.
    """

    def __init__(self, params, lr: float = 1e-3, momentum: float = 0.0, weight_decay: float = 0.0):
        self._names = {}
        if isinstance(params, torch.nn.Module):
            named = [(n, p) for n, p in params.named_parameters() if p.requires_grad]
            self._names = {id(p): n for n, p in named}
            params = [p for _, p in named]
        defaults = dict(lr=lr, momentum=momentum, weight_decay=weight_decay)
        super().__init__(params, defaults)

    def add_param_group(self, param_group):
        super().add_param_group(param_group)
        g = self.param_groups[-1]
        try:
            check_lr(g["lr"])
            check_beta(g["momentum"], "momentum")
            check_nonneg(g["weight_decay"], "weight_decay")
        except Exception:
            self.param_groups.pop()
            raise

    def load_state_dict(self, state_dict):
        """Load a state dict saved by :class:`SignSGD` (another class's raises ``ValueError``)."""
        for i, g in enumerate(state_dict.get("param_groups", []) if isinstance(state_dict, dict) else []):
            foreign = ("algorithm", "betas", "dampening", "nesterov", "maximize")  # isolab's routed / torch's
            if any(k in g for k in foreign) or any(k not in g for k in ("lr", "momentum", "weight_decay")):
                raise ValueError(
                    f"SignSGD.load_state_dict: parameter group {i} was not saved by SignSGD (keys "
                    f"{sorted(k for k in g if k != 'params')}); load it into the class that saved it"
                )
        super().load_state_dict(state_dict)

    _name = RoutedOptimizer._name
    _diagnose_parameters = lambda self, symptom="gradient": ""  # noqa: E731
    _check_grads = RoutedOptimizer._check_grads
    _first_nonfinite = RoutedOptimizer._first_nonfinite
    _sharding = None  # elementwise: DTensor parameters are stepped by DTensor ops, nothing to agree on

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._check_grads()
        for group in self.param_groups:
            lr, mu, wd = as_float(group["lr"]), group["momentum"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad
                state = self.state[p]
                state["step"] = state.get("step", 0) + 1
                if mu > 0:
                    buf = state.get("momentum_buffer")
                    if buf is None:
                        buf = state["momentum_buffer"] = torch.zeros_like(p)
                    g = rules.momentum_(buf, g, mu, nesterov=False)
                rules.decoupled_weight_decay_(p, lr, wd)
                rules.descend_(p, torch.sign(g), lr)
        return loss
