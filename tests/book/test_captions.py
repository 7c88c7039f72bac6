"""Every explorable of Parts I and II keeps its caption's promises over the whole slider grid.

A chapter's figure module (``isolab.book.figures.chNN``) lists its explorables in
``EXPLORABLES`` (functions that build them). Each names its main slider, which has at
least :data:`isolab.book.explorable.MIN_MAIN_VALUES` values, and states at least one promise of
its caption; the promise is computed with the figure's own computation at every grid point.
"""

from __future__ import annotations

import importlib

import pytest

from isolab.book.explorable import MIN_MAIN_VALUES

PART_ONE = ["ch01", "ch02", "ch03", "ch04"]
PART_TWO = ["ch05", "ch06", "ch07", "ch08", "ch09"]
PART_THREE = ["ch10", "ch11", "ch12", "ch13"]


def explorables(chapters):
    for chapter in chapters:
        module = importlib.import_module(f"isolab.book.figures.{chapter}")
        for build in module.EXPLORABLES:
            yield pytest.param(build, id=f"{chapter}.{build.__name__}")


@pytest.mark.parametrize("build", list(explorables(PART_ONE + PART_TWO + PART_THREE)))
def test_main_slider_and_promises(build):
    explorable = build()
    main = explorable.main_slider
    assert main is not None, "declare the main slider (main=...)"
    assert len(main.values) >= MIN_MAIN_VALUES, f"main slider {main.name!r} has {len(main.values)} values"
    assert explorable.promises, "state what the caption promises (promises=[Promise(...)])"
    broken = explorable.broken_promises()
    assert not broken, "the caption promises what the figure does not show:\n" + "\n".join(map(str, broken[:5]))


@pytest.mark.parametrize("build", list(explorables(PART_ONE + PART_TWO + PART_THREE)))
def test_text_is_readable(build):
    """BOOK_STYLE: every label, tick and annotation of a figure at 10 pt or more (drawn at
    the defaults), and at a contrast of 4.5:1 or more against the page."""
    from matplotlib.text import Text

    from isolab.book.figures import style

    fig = build().render(strict=True)
    texts = [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]
    small = sorted({(round(t.get_fontsize(), 1), t.get_text()[:30]) for t in texts if t.get_fontsize() < 10})
    assert not small, f"text under 10 pt: {small[:6]}"
    light = sorted({(t.get_text()[:30], round(style.contrast(t.get_color(), "white"), 2)) for t in texts
                    if style.contrast(t.get_color(), "white") < 4.5})
    assert not light, f"text under 4.5:1 contrast: {light[:6]}"
