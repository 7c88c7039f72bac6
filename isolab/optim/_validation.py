"""Argument checks shared by isolab's optimizers: each returns the validated value or raises
``ValueError`` naming the argument and the value the user passed (the optimizer adds its own
name in front, see :meth:`isolab.optim._base.RoutedOptimizer.add_param_group`)."""

from __future__ import annotations

import math
from numbers import Real

import torch


def check_float(name: str, value, *, low=None, high=None, low_open=False, high_open=False) -> float:
    """Return ``float(value)`` or raise ``ValueError`` naming the argument and the value."""
    if isinstance(value, bool) or not isinstance(value, Real) or isinstance(value, torch.Tensor):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"{name} must be finite, got {value!r}")
    if low is not None and (v < low or (low_open and v == low)):
        raise ValueError(f"{name} must be {'>' if low_open else '>='} {low}, got {value!r}")
    if high is not None and (v > high or (high_open and v == high)):
        raise ValueError(f"{name} must be {'<' if high_open else '<='} {high}, got {value!r}")
    return v


def check_lr(value, name="lr"):
    """A learning rate ``>= 0``: a real number, or (as ``torch.optim`` accepts) a one-element
    tensor, which is returned as is so that schedulers can ``fill_`` it in place."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"{name} as a Tensor must have one element, got shape {tuple(value.shape)}")
        if value.is_complex() or not value.is_floating_point():
            raise ValueError(f"{name} as a Tensor must be a floating-point tensor, got {value.dtype}")
        check_float(name, float(value), low=0.0)
        return value
    return check_float(name, value, low=0.0)


def as_float(value):
    """A hyperparameter as a Python float (a one-element tensor lr is read once per step)."""
    return float(value) if isinstance(value, torch.Tensor) else value


def check_beta(value, name) -> float:
    """A decay rate in ``[0, 1)``."""
    return check_float(name, value, low=0.0, high=1.0, high_open=True)


def check_betas(value, name="betas") -> tuple[float, float]:
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise ValueError(f"{name} must be a pair (beta1, beta2), got {value!r}")
    return (check_beta(value[0], f"{name}[0]"), check_beta(value[1], f"{name}[1]"))


def check_eps(value, name="eps") -> float:
    return check_float(name, value, low=0.0, low_open=True)


def check_nonneg(value, name) -> float:
    return check_float(name, value, low=0.0)


def check_positive_int(value, name) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


def check_nonneg_int(value, name) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a non-negative int, got {value!r}")
    return value


def check_bool(value, name) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return value


def check_choice(value, name, choices) -> str:
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")
    return value


def check_dtype(value, name="stats_dtype") -> torch.dtype:
    if value not in (torch.float32, torch.float64):
        raise ValueError(f"{name} must be torch.float32 or torch.float64, got {value!r}")
    return value


