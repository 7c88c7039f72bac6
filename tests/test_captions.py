"""Every explorable of Part I keeps its caption's promises over the whole slider grid.

A chapter's figure module (``isolab.figures.chNN``) lists its explorables in
``EXPLORABLES`` (functions that build them). Each names its main slider, which has at
least :data:`isolab.explorable.MIN_MAIN_VALUES` values, and states at least one promise of
its caption; the promise is computed with the figure's own computation at every grid point.
"""

from __future__ import annotations

import importlib

import pytest

from isolab.explorable import MIN_MAIN_VALUES

PART_ONE = ["ch01", "ch02", "ch03", "ch04"]


def explorables(chapters):
    for chapter in chapters:
        module = importlib.import_module(f"isolab.figures.{chapter}")
        for build in module.EXPLORABLES:
            yield pytest.param(build, id=f"{chapter}.{build.__name__}")


@pytest.mark.parametrize("build", list(explorables(PART_ONE)))
def test_main_slider_and_promises(build):
    explorable = build()
    main = explorable.main_slider
    assert main is not None, "declare the main slider (main=...)"
    assert len(main.values) >= MIN_MAIN_VALUES, f"main slider {main.name!r} has {len(main.values)} values"
    assert explorable.promises, "state what the caption promises (promises=[Promise(...)])"
    broken = explorable.broken_promises()
    assert not broken, "the caption promises what the figure does not show:\n" + "\n".join(map(str, broken[:5]))
