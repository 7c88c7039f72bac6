"""Every explorable keeps its caption's promises, and shows every label whole, over its whole grid.

A chapter's figure module (``isolab.book.figures.chNN``) lists its explorables in
``EXPLORABLES`` (functions that build them). Each names its main slider, which has at
least :data:`isolab.book.explorable.MIN_MAIN_VALUES` values, and states at least one promise of
its caption; the promise is computed with the figure's own computation at every grid point.

Two tests hold an explorable to the page (issue 34), generic over every chapter's
``EXPLORABLES``: no title, label or annotation runs off the figure, is cut by its axes or
(for ``narrow="panels"``) straddles the cut between two panels, at any point of the grid;
and its smallest text reads on a phone. A chapter listed in ``tests/book/book_standard.py``
is an expected failure there until it is converted.
"""

from __future__ import annotations

import importlib

import pytest
from book_standard import marks

from isolab.book.explorable import MIN_MAIN_VALUES

PART_ONE = ["ch01", "ch02", "ch03", "ch04"]
PART_TWO = ["ch05", "ch06", "ch07", "ch08", "ch09"]
PART_THREE = ["ch10", "ch11", "ch12", "ch13", "ch14"]


def explorables(chapters, held: bool = False):
    """Every explorable of ``chapters`` as a test parameter (``held``: marked by
    ``book_standard.marks``, an expected failure for a chapter not yet converted)."""
    for chapter in chapters:
        module = importlib.import_module(f"isolab.book.figures.{chapter}")
        for build in module.EXPLORABLES:
            yield pytest.param(build, id=f"{chapter}.{build.__name__}", marks=marks(chapter) if held else [])


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


ALL = PART_ONE + PART_TWO + PART_THREE


@pytest.mark.slow
@pytest.mark.parametrize("build", list(explorables(ALL, held=True)))
def test_no_text_is_clipped_anywhere_on_the_grid(build, book_figures):
    """At every combination of slider values (the frames the website shows), every drawn
    text lies whole inside the figure, inside the box it is clipped to, and inside one
    panel's strip when the phone layout cuts the frame into panels."""
    explorable = build()
    problems = explorable.clipped_text_over_grid()
    assert not problems, (f"{len(problems)} clipped text(s) over {explorable.n_frames} frames:\n  "
                          + "\n  ".join(problems[:15]))


@pytest.mark.parametrize("build", list(explorables(ALL, held=True)))
def test_text_reads_on_a_phone(build, book_figures):
    """On a 390-px phone (a column of PHONE_COLUMN_PX) the smallest text of the figure at
    its defaults lands at MIN_PHONE_TEXT_PX or more: a single panel drawn at most
    NARROW_WIDTH_IN wide, or panels cut into strips (narrow="panels"), each shown as wide as
    the phone's column allows (at most 1.5 times its share of the drawn width, as
    ``book/_static/explorable.js`` lays them out). The browser test measures the same on
    the built page; this finds it without a build."""
    from isolab.book.explorable import DISPLAY_DPI, MIN_PHONE_TEXT_PX, PHONE_COLUMN_PX, smallest_text

    explorable = build()
    font = smallest_text(explorable.render(strict=True))
    drawn = explorable.figsize[0] * DISPLAY_DPI                  # CSS px at the column's width
    cuts = explorable.panel_strips() or (0.0, 1.0)
    scales = [min(PHONE_COLUMN_PX, 1.5 * (b - a) * drawn, drawn) / ((b - a) * drawn) for a, b in zip(cuts, cuts[1:])]
    px = font * DISPLAY_DPI / 72 * min(scales)
    assert px >= MIN_PHONE_TEXT_PX, (
        f"its smallest text, {font:g} pt, lands at {px:.1f} CSS px on a phone: declare narrow='panels' "
        "(panels side by side) or draw a single panel at most NARROW_WIDTH_IN wide")
