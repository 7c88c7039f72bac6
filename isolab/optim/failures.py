"""What can go wrong in a step, as types: the failure codes processes exchange, and the error a
user sees.

A step validates everything before it changes anything (gradients, captured statistics,
inverse roots); a failure found there raises with no parameter or optimizer state changed. Under
FSDP2 and DDP a failure can happen on one process only (the owner of a matrix, or the process
whose rows were non-finite): the processes exchange a :class:`Failure` code per matrix, and every
process raises the same error.
"""

from __future__ import annotations

from enum import IntEnum

__all__ = ["Failure", "StepFailed", "UNCHANGED", "UNCHANGED_ANYWHERE"]

#: The promise every step error ends with.
UNCHANGED = "no parameter or optimizer state was changed"
UNCHANGED_ANYWHERE = UNCHANGED + " on any rank"


class Failure(IntEnum):
    """Why a matrix's step failed (0: it did not). The value travels between processes."""

    OK = 0
    NONFINITE_STATISTICS = 1  # the captured XᵀX or GᵀG hold NaN or Inf
    STATISTICS_NOT_COLLECTED = 2  # the hooks saw rows but formed no sums (enabled switched off)
    STATISTICS_SHAPE = 3  # the sums do not match the weight
    STALE_STATISTICS = 4  # the rows do not belong to the gradient being stepped on
    ROOT_X = 5  # Cov(X)^(-1/2) (or Shampoo's L root) could not be computed
    ROOT_G = 6  # Cov(G)^(-1/2) (or Shampoo's R root) could not be computed
    REBUILD = 7  # the lean state's averages could not be rebuilt from their roots
    MATRIX_FUNCTION = 8  # anything else the whole-matrix computation raised

    @property
    def numeric(self) -> bool:
        """Whether the failure is arithmetic (``FloatingPointError``) rather than a misuse of the
        optimizer (``RuntimeError``)."""
        return self in (Failure.NONFINITE_STATISTICS, Failure.ROOT_X, Failure.ROOT_G, Failure.REBUILD,
                        Failure.MATRIX_FUNCTION)


class StepFailed(Exception):
    """Raised inside a step's validation: ``failure`` says why, ``message`` says it to the user.

    :meth:`error` turns it into the exception the user sees: ``FloatingPointError`` for an
    arithmetic failure, ``RuntimeError`` for a misuse.
    """

    def __init__(self, failure: Failure, message: str, param=None):
        super().__init__(message)
        self.failure = Failure(failure)
        self.message = message
        self.param = param  # the parameter it concerns, where one does

    def error(self, suffix: str = "") -> Exception:
        cls = FloatingPointError if self.failure.numeric else RuntimeError
        return cls(self.message + suffix)
