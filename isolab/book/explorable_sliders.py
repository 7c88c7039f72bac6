"""The controls of an explorable figure: sliders and toggles, and the promises a caption makes about
what moving them does (each tested over the slider's grid)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence


class FigureMessage(Exception):
    """Raised by a drawing function for a parameter combination it cannot show.

    The figure shows ``str(exc)`` in place of the plot, e.g.
    ``raise FigureMessage("b > d_in: no b orthonormal rows exist in d_in dimensions")``.
    """


@dataclass(frozen=True)
class Slider:
    """A named parameter and the grid of values its slider steps through.

    ``values`` are shown in the given order; ``default`` (one of ``values``, the middle
    one when omitted) is where the slider starts. ``fmt`` formats a value for its label.
    Values that are names (strings, or ``True``/``False``) make a categorical choice,
    shown as toggle buttons rather than a range (:attr:`is_toggle`); ``toggle`` forces
    either form.
    """

    name: str
    values: Sequence[Any]
    label: str | None = None
    default: Any = None
    fmt: str = "{:g}"
    toggle: bool | None = None
    _index: int = field(init=False, repr=False, compare=False, default=0)

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise ValueError(f"slider name must be a Python identifier, got {self.name!r}")
        values = tuple(self.values)
        if len(values) < 2:
            raise ValueError(f"slider {self.name!r} needs at least two values, got {values!r}")
        if len(set(map(repr, values))) != len(values):
            raise ValueError(f"slider {self.name!r} has repeated values: {values!r}")
        object.__setattr__(self, "values", values)
        default = values[len(values) // 2] if self.default is None else self.default
        if default not in values:
            raise ValueError(f"default {default!r} of slider {self.name!r} is not one of its values {values!r}")
        object.__setattr__(self, "default", default)
        object.__setattr__(self, "_index", values.index(default))

    @property
    def default_index(self) -> int:
        return self._index

    @property
    def text(self) -> str:
        return self.label or self.name

    @property
    def is_toggle(self) -> bool:
        """Whether the choice is categorical (toggle buttons): forced by ``toggle``, else
        when every value is a name (a string or a bool)."""
        if self.toggle is not None:
            return bool(self.toggle)
        return all(isinstance(v, (str, bool)) for v in self.values)

    def format(self, value: Any) -> str:
        if isinstance(value, bool) and self.fmt == "{:g}":
            return "on" if value else "off"
        try:
            return self.fmt.format(value)
        except (ValueError, TypeError):
            return str(value)


class _Predicate:
    """A named test of the values a promise measures along the main slider."""

    def __init__(self, description: str, test: Callable[[list], bool]):
        self.description, self._test = description, test

    def __call__(self, values: list) -> bool:
        return bool(self._test(values))

    def __repr__(self) -> str:
        return self.description


def _spread(values) -> tuple[float, float]:
    import numpy as np

    v = np.asarray(values, dtype=float)
    return float(v.max() - v.min()), float(np.abs(v).max())


def constant(*, atol: float = 0.0, rtol: float = 0.0) -> _Predicate:
    """The measured value does not change along the main slider: max − min ≤ atol + rtol·max|v|."""
    def test(values):
        spread, size = _spread(values)
        return spread <= atol + rtol * size
    return _Predicate(f"constant (max - min <= {atol:g} + {rtol:g}·max|value|)", test)


def nondecreasing(*, tol: float = 0.0) -> _Predicate:
    """Each value is at least the one before it, up to ``tol``."""
    return _Predicate(f"non-decreasing (tolerance {tol:g})",
                      lambda v: all(float(b) >= float(a) - tol for a, b in zip(v, v[1:])))


def nonincreasing(*, tol: float = 0.0) -> _Predicate:
    """Each value is at most the one before it, up to ``tol``."""
    return _Predicate(f"non-increasing (tolerance {tol:g})",
                      lambda v: all(float(b) <= float(a) + tol for a, b in zip(v, v[1:])))


def always(test: Callable[[Any], bool], description: str) -> _Predicate:
    """``test(value)`` holds at every value of the main slider."""
    return _Predicate(description, lambda values: all(bool(test(v)) for v in values))


@dataclass(frozen=True)
class Promise:
    """One thing an explorable's caption promises the reader will see.

    ``text`` is the caption's words (it must appear in the caption); ``measure(**params)``
    computes the quantity with the figure's own computation at one grid point; ``holds``
    (see :func:`constant`, :func:`nondecreasing`, :func:`nonincreasing`, :func:`always`)
    tests the measured values along the main slider, for every setting of the others.
    """

    text: str
    measure: Callable[..., Any]
    holds: Callable[[list], bool]


@dataclass(frozen=True)
class BrokenPromise:
    """Where a promise fails: the other sliders' setting and the values along the main one."""

    promise: Promise
    setting: dict
    values: list

    def __str__(self) -> str:
        shown = ", ".join(f"{v:.4g}" if isinstance(v, float) else repr(v) for v in self.values)
        return f"{self.promise.text!r} is not {self.promise.holds!r} at {self.setting}: [{shown}]"


