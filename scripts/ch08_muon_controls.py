#!/usr/bin/env python
r"""The Muon runs behind Chapter 8's test of why Muon amplifies rounding (section 8.5).

Section 8.5 trains the chapter's network against a copy perturbed by a relative 1e-12 and
asks which feature of Muon makes that difference grow: the Newton–Schulz polynomial
(switched off by the exact polar factor), the step size that does not shrink near a
minimum (switched off by a learning rate falling linearly to 0), and, for comparison,
Muon without momentum (also against the rotated twin). Each is 200 steps of training;
together they would cost the chapter several seconds, so they are computed here once and
saved in ``results/ch08_muon_controls.npz``. ``tests/book/test_figures_ch08.py`` recomputes one
of them and compares it with the file.

The variants, the network and every hyperparameter are those of
:mod:`isolab.book.figures.ch08` (``MUON_VARIANTS``, ``optimizer``, ``muon_control``).

Usage::

    python scripts/ch08_muon_controls.py          # -> results/ch08_muon_controls.npz (under a minute)
"""

from __future__ import annotations

import numpy as np
import torch

from isolab.book.figures import ch08
from isolab.book.figures.saved import machine_note, write_result

RUNS = [(label, "shadow") for label in ch08.MUON_VARIANTS] + [("no momentum", "twin")]


def compute() -> dict:
    torch.set_num_threads(1)
    gaps = np.stack([ch08.muon_control(label, against).gap.numpy() for label, against in RUNS])
    return dict(gap=gaps, labels=np.array([r[0] for r in RUNS]), against=np.array([r[1] for r in RUNS]),
                info=np.array(machine_note()))


def main(argv=None):
    write_result(__doc__.splitlines()[0], ch08.MUON_RESULTS, compute, argv)


if __name__ == "__main__":
    main()
