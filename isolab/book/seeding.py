"""Seed every random number generator a chapter touches.

A chapter's printed numbers are compared by nbval against the committed notebook, so
they must be the same on every run: call :func:`seed_everything` once at the top, and
pass explicit ``torch.Generator`` objects (from :func:`generator`) to anything whose
numbers are printed, so that reordering cells cannot change them.
"""

from __future__ import annotations

import random

import numpy as np
import torch

__all__ = ["seed_everything", "generator"]


def seed_everything(seed: int) -> torch.Generator:
    """Seed Python's ``random``, NumPy's global generator and torch's default generator.

    Returns a fresh ``torch.Generator`` seeded with ``seed`` for explicit use.
    """
    if not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
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
