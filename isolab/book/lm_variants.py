r"""Variants of Iso's step for the language-model benchmark, each a few lines on the library.

Iso's whitened step ``D = P_X ∇W P_G`` has Frobenius norm ``√Σρᵢ²`` (``ρᵢ`` the canonical
correlations of a layer's inputs and output gradients; with momentum and averaged
statistics, the same quantity for the momentum): how far a matrix moves depends on how
correlated ``X`` and ``G`` happen to be. Muon's step has a fixed norm, ``√rank`` times its
shape factor. Each variant here changes one thing about Iso's step (in
:meth:`~isolab.optim.Iso._transform_direction`, the library's one hook for this, which
receives the whitened matrix in the weight's layout and returns the direction the step
uses), so that the benchmark can say which change matters:

- :class:`IsoNormalized`: the same direction, rescaled to Muon's norm
  ``√min(n, m) · √max(1, m/n)`` (``n`` inputs, ``m`` outputs): Iso's size problem alone.
- :class:`IsoPolar`: the polar factor of the whitened matrix by Muon's five quintic
  Newton–Schulz steps, times Muon's shape factor: Muon in Iso's coordinates.
- :class:`IsoNormalizedSecondMoment`: a per-output-neuron second moment after the
  whitening (as NorMuon adds one after the orthogonalization): each output row of the
  whitened matrix divided by the root of an exponential average of its mean square
  (``β₂ = 0.95``, bias-corrected), then rescaled to Muon's norm.
- :class:`DiagonalPolar`: the polar step in a *diagonal* input/output metric: the roots
  are ``diag(Ĉ)^{-1/2}`` (the diagonals of Iso's own averaged statistics, with Iso's
  relative damping) instead of the full ``Ĉ^{-1/2}``, then the polar factor as in
  :class:`IsoPolar`. This one also overrides ``_inverse_sqrt`` (the library's private method
  that computes an inverse root from a covariance), because the diagonal metric needs
  different roots, not a different use of them; it still forms the full covariances
  and applies the diagonal roots as dense matrices, so its step time here is an upper
  bound on what a diagonal implementation costs. (Our reading of the NanoGPT
  speedrun's "IsoMuon": a polar step in a diagonal metric; its calibration to the
  gradient noise is not reproduced.)

IsoAdam's variants need no code: tuned damping, warm-up and statistics schedule are
keyword arguments of :class:`isolab.optim.IsoAdam`.
"""

from __future__ import annotations

import math

import torch

from isolab.optim import Iso

__all__ = ["muon_norm", "IsoNormalized", "IsoPolar", "IsoNormalizedSecondMoment", "DiagonalPolar", "VARIANTS"]

#: NorMuon's β₂ for the per-neuron second moment, and the floor under its root
SECOND_MOMENT_BETA, SECOND_MOMENT_EPS = 0.95, 1e-8


def muon_norm(n_in: int, n_out: int) -> float:
    """The Frobenius norm of Muon's step direction for an ``n_in → n_out`` layer (exact
    polar factor): ``√min(n_in, n_out)`` (the rank) times the shape factor ``√max(1, n_out/n_in)``."""
    return math.sqrt(min(n_in, n_out)) * math.sqrt(max(1.0, n_out / n_in))


class _Shaped(Iso):
    """Iso with each weight's input and output sizes at hand (``nn.Linear`` stores ``(out, in)``,
    transformers' ``Conv1D`` ``(in, out)``: the library's layouts)."""

    def _sizes(self, p) -> tuple[int, int]:
        """``(n_in, n_out)`` of weight ``p``."""
        return self._dims(p)

    def _output_axis(self, p) -> int:
        """The axis of ``p`` (2-D) that indexes output neurons."""
        return 1 if self._layouts.get(p) == "in_out" else 0


class IsoNormalized(_Shaped):
    """Iso's whitened direction rescaled to Muon's Frobenius norm (see the module docstring)."""

    def _transform_direction(self, group, p, d, st):
        norm = torch.linalg.vector_norm(d)
        return d * (muon_norm(*self._sizes(p)) / norm) if norm > 0 else d


class IsoPolar(_Shaped):
    """The polar factor of Iso's whitened direction, with Muon's shape factor: the library's
    ``Iso(direction="polar")``, which this benchmark's verdicts put there."""

    def __init__(self, model, *args, **kwargs):
        kwargs.setdefault("direction", "polar")
        super().__init__(model, *args, **kwargs)


class IsoNormalizedSecondMoment(_Shaped):
    """Iso's whitened direction, each output neuron divided by the root of its averaged mean
    square (NorMuon's second moment), then rescaled to Muon's norm."""

    def _transform_direction(self, group, p, d, st):
        m = d.reshape(d.shape[0], -1)
        axis = self._output_axis(p)
        square = m.pow(2).mean(dim=1 - axis)
        v = st["neuron_sq"] = st["neuron_sq"].lerp(square, 1 - SECOND_MOMENT_BETA) if "neuron_sq" in st else \
            square * (1 - SECOND_MOMENT_BETA)
        st["neuron_steps"] = k = st.get("neuron_steps", 0) + 1
        scale = (v / (1 - SECOND_MOMENT_BETA**k)).sqrt().add_(SECOND_MOMENT_EPS)
        e = m / (scale[:, None] if axis == 0 else scale[None, :])
        norm = torch.linalg.vector_norm(e)
        return (e * (muon_norm(*self._sizes(p)) / norm) if norm > 0 else e).reshape(d.shape)


class DiagonalPolar(IsoPolar):
    """The polar step in the diagonal metric of Iso's statistics (module docstring)."""

    def _inverse_sqrt(self, C, group, previous, damping, lean):
        diag = C.diagonal().clamp_min(0)
        shift = damping * diag.mean() if damping > 0 else diag.new_tensor(0.0)
        inv = torch.where(diag + shift > 0, (diag + shift).rsqrt(), torch.zeros_like(diag))
        if not bool(torch.isfinite(inv).all()):
            raise ValueError("the diagonal root is not finite")
        return torch.diag(inv), None


#: the variant classes by the benchmark's name for them
VARIANTS = {"iso_norm": IsoNormalized, "iso_polar": IsoPolar, "iso_nor": IsoNormalizedSecondMoment,
            "diag_polar": DiagonalPolar}
