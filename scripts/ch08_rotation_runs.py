#!/usr/bin/env python
r"""The training runs behind Chapter 8's explorable, precomputed for every slider setting.

Chapter 8's explorable (section 8.7) rotates the residual stream of the chapter's network
by ``Q(θ) = exp(θK)`` and trains the network and its twin for 100 steps with six
optimizers, at a factor on every learning rate. One setting trains six pairs (about three
seconds on one CPU thread), far over what a slider move may take, and the website needs
all 30 settings when the page is built; so the grid is computed here once and saved in
``results/ch08_rotation_runs.npz``, which the chapter draws in Jupyter as on the website.
``tests/book/test_figures_ch08.py`` recomputes one setting and compares it with the file.

The grid, the network and every hyperparameter are those of
:mod:`isolab.book.figures.ch08` (``THETAS``, ``LR_SCALES``, ``optimizer``); θ = 0 is stored as
exact zeros (the twin is the network itself).

Usage::

    python scripts/ch08_rotation_runs.py          # -> results/ch08_rotation_runs.npz (1-2 minutes)
"""

from __future__ import annotations

import numpy as np
import torch

from isolab.book.figures import ch08
from isolab.book.figures.saved import machine_note, write_result


def compute() -> dict:
    torch.set_num_threads(1)
    shape = (len(ch08.THETAS), len(ch08.LR_SCALES), len(ch08.NAMES), ch08.EXPLORE_STEPS + 1)
    gap, loss = np.zeros(shape), np.zeros(shape)
    for i, theta in enumerate(ch08.THETAS):
        for j, scale in enumerate(ch08.LR_SCALES):
            for k, name in enumerate(ch08.NAMES):
                if theta == 0:  # Q = I: the twin is the network itself; the gap is exactly 0
                    base = ch08.rotation_run(name, theta, scale)
                    gap[i, j, k], loss[i, j, k] = 0.0, base.loss.numpy()
                    continue
                run = ch08.rotation_run(name, theta, scale)
                gap[i, j, k], loss[i, j, k] = run.gap.numpy(), run.loss.numpy()
    return dict(gap=gap, loss=loss, thetas=np.array(ch08.THETAS), lr_scales=np.array(ch08.LR_SCALES),
                names=np.array(ch08.NAMES), info=np.array(machine_note()))


def main(argv=None):
    write_result(__doc__.splitlines()[0], ch08.RESULTS, compute, argv)


if __name__ == "__main__":
    main()
