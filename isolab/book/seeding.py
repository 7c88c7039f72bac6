"""Seed every random number generator a chapter touches, and jitter the draws on request.

A chapter's printed numbers are compared by nbval against the committed notebook, so
they must be the same on every run: call :func:`seed_everything` once at the top, and
pass explicit ``torch.Generator`` objects (from :func:`generator`) to anything whose
numbers are printed, so that reordering cells cannot change them.

Seeds make a run repeatable on one machine; they do not make it repeatable on another.
A different CPU picks different BLAS and ATen kernels, which round differently, and a
float32 training run amplifies that rounding until its fourth digit is noise. The
kernel switches (``ATEN_CPU_CAPABILITY=default``, ``MKL_CBWR=COMPATIBLE``, one thread)
try a few other kernels, but the machine that wrote the outputs and the machine that
checks them can still agree by luck. The *jitter* stands in for any CPU: with
``ISOLAB_JITTER=1e-6`` in the environment, :func:`seed_everything` makes every
random draw of a floating dtype (``torch.randn``, ``torch.rand``, ``torch.normal``, their
``_like`` forms, and the in-place ``Tensor.normal_`` and ``Tensor.uniform_`` that
``torch.nn.init`` uses) come out multiplied by ``1 + e * u``, elementwise, with

- ``u ~ N(0, 1)`` a function of the drawn value itself (a hash of its bits and of
  ``ISOLAB_JITTER_SEED``, default 0): the seeded streams are not disturbed, and the same
  draw made twice (a batch drawn again from its seed, a problem rebuilt for another
  lane) is perturbed the same way, as on another CPU, whose random streams are the same
  bit for bit and only its arithmetic differs;
- ``e = ISOLAB_JITTER`` in every dtype. 1e-6 is about 8 ulps of float32, the size of the
  change another CPU's float32 kernels make; on a float64 draw it is far more than
  float64's own rounding, on purpose: the book draws most data in float64 and trains on
  it in float32 (the deep linear sweeps), so only a float32-sized change of the float64
  draws reaches the float32 computation the way another CPU's rounding does. A float64
  result checked to more digits than such a change leaves stable is printed to fewer.

Data, initial weights and targets then differ from the unjittered ones by a
rounding-sized amount, and a checked output that still prints the same is one that
another CPU will print too. ``make test`` runs its second execution of the chapters
under the jitter; :func:`jittered` applies it inside a block (the reproduction tests use
it).
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import random

import numpy as np
import torch

__all__ = ["seed_everything", "generator", "jittered", "jitter_in_effect", "JITTER_ENV", "JITTER_SEED_ENV"]

#: Environment variables that switch the jitter on (its size) and choose its own seed.
JITTER_ENV = "ISOLAB_JITTER"
JITTER_SEED_ENV = "ISOLAB_JITTER_SEED"


def seed_everything(seed: int) -> torch.Generator:
    """Seed Python's ``random``, NumPy's global generator and torch's default generator.

    With ``ISOLAB_JITTER`` set in the environment this also switches the jitter on (see the
    module docstring): a chapter asks for it by seeding, and nothing else changes torch.

    Returns a fresh ``torch.Generator`` seeded with ``seed`` for explicit use.
    """
    if not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    install_from_environment()
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    return generator(seed)


def generator(seed: int, device: torch.device | str | None = None) -> torch.Generator:
    """A ``torch.Generator`` on ``device`` seeded with ``seed``."""
    if not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    g = torch.Generator(device=device or "cpu")
    g.manual_seed(seed)
    return g


# --- the jitter ----------------------------------------------------------------------

_DRAWS = ("randn", "rand", "normal", "randn_like", "rand_like")  # torch.<name>, returning a tensor
_IN_PLACE = ("normal_", "uniform_")                                # torch.Tensor.<name>, filling self
_ORIGINAL = {name: getattr(torch, name) for name in _DRAWS}
_ORIGINAL.update({name: getattr(torch.Tensor, name) for name in _IN_PLACE})
_active: dict | None = None  # {"eps": float, "seed": int}

_BITS = {torch.float64: torch.int64, torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16}
_M1, _M2, _GOLDEN = 0xBF58476D1CE4E5B9 - 2**64, 0x94D049BB133111EB - 2**64, 0x9E3779B97F4A7C15 - 2**64


def _shift_right(z, k):  # a logical shift of int64 (torch's >> is arithmetic)
    return (z >> k) & ((1 << (64 - k)) - 1)


def _unit_normal_of(t, seed: int):
    """``u ~ N(0, 1)`` per element, a function of the element's bits and ``seed`` only
    (splitmix64's finalizer as the hash, then the inverse normal CDF)."""
    key = (seed * _GOLDEN) % 2**64
    key = key - 2**64 if key >= 2**63 else key                        # as a signed int64
    z = t.detach().contiguous().view(_BITS[t.dtype]).to(torch.int64).cpu() + key
    z = (z ^ _shift_right(z, 30)) * _M1
    z = (z ^ _shift_right(z, 27)) * _M2
    z = z ^ _shift_right(z, 31)
    uniform = (_shift_right(z, 11).to(torch.float64) + 0.5) / 2.0**53   # in (0, 1)
    return torch.erfinv(2.0 * uniform - 1.0) * math.sqrt(2.0)


def _perturb(t):
    """Multiply a fresh draw by ``1 + e * u`` in place (a no-op for non-float tensors)."""
    if _active is None or not isinstance(t, torch.Tensor) or t.dtype not in _BITS or t.numel() == 0:
        return t
    factor = (1.0 + _active["eps"] * _unit_normal_of(t, _active["seed"])).to(t.device)
    with torch.no_grad():
        if t.dtype == torch.float64:
            t.mul_(factor)
        else:  # form the product in float64, round once
            t.copy_(t.to(torch.float64).mul_(factor))
    return t


def _wrap_draw(name):
    original = _ORIGINAL[name]

    @functools.wraps(original)
    def draw(*args, **kwargs):
        return _perturb(original(*args, **kwargs))

    return draw


def _wrap_in_place(name):
    original = _ORIGINAL[name]

    @functools.wraps(original)
    def fill(self, *args, **kwargs):
        original(self, *args, **kwargs)
        return _perturb(self)

    return fill


def _install(eps: float, seed: int) -> None:
    global _active
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not math.isfinite(eps) or not 0 < eps < 1e-2:
        raise ValueError(f"the jitter must be a float in (0, 1e-2), a rounding-sized change; got {eps!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"the jitter's seed must be a non-negative int, got {seed!r}")
    _active = {"eps": float(eps), "seed": seed}
    for name in _DRAWS:
        setattr(torch, name, _wrap_draw(name))
    for name in _IN_PLACE:
        setattr(torch.Tensor, name, _wrap_in_place(name))


def _uninstall() -> None:
    global _active
    _active = None
    for name in _DRAWS:
        setattr(torch, name, _ORIGINAL[name])
    for name in _IN_PLACE:
        setattr(torch.Tensor, name, _ORIGINAL[name])


def jitter_in_effect() -> dict | None:
    """``{"eps": ..., "seed": ...}`` while the jitter is on, else ``None``."""
    return None if _active is None else dict(_active)


@contextlib.contextmanager
def jittered(eps: float = 1e-6, seed: int = 0):
    """Within the block, every random draw is multiplied by ``1 + eps * u`` (see the module
    docstring); the jitter in effect before (if any) is restored after."""
    before = jitter_in_effect()
    _install(eps, seed)
    try:
        yield
    finally:
        _uninstall()
        if before is not None:
            _install(before["eps"], before["seed"])


def install_from_environment() -> None:
    """Switch the jitter on if ``ISOLAB_JITTER`` is set (called by :func:`seed_everything`); a
    malformed value is an error naming the variable."""
    value = os.environ.get(JITTER_ENV, "").strip()
    if not value or _active is not None:
        return
    try:
        eps = float(value)
        seed = int(os.environ.get(JITTER_SEED_ENV, "0") or 0)
    except ValueError:
        raise ValueError(f"{JITTER_ENV}={value!r} and {JITTER_SEED_ENV}={os.environ.get(JITTER_SEED_ENV)!r} "
                         "must be a float and an int") from None
    _install(eps, seed)
