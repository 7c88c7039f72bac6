"""Constants shared by the modules of :mod:`isolab.book.scaling`."""

from __future__ import annotations

import torch


#: Flops of a symmetric eigendecomposition with eigenvectors, as a multiple of ``n³``
#: (Golub & Van Loan's count for the symmetric QR algorithm, about ``9n³``). A model, not a
#: measurement: :func:`count_flops` charges it for every ``torch.linalg.eigh``.
EIGH_FLOPS = 9.0


aten = torch.ops.aten

