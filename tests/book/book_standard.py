"""The chapters not yet converted to the book's page standard (issue 34), in one place.

A converted chapter shows one audit panel per section (``isolab.book.checks.audit``: a
verdict that names its section, claims in rendered maths, no claim that cannot fail), has
at most one code toggle per section on average, reads on a phone (no squashed figure,
nothing wider than the screen, explorable text of 9 CSS px or more at 390 px) and its
explorables show no clipped text anywhere on their slider grids. The tests that check this
(``test_chapters.py``, ``test_site_browser.py``, ``test_captions.py``) run on every page and
every chapter, and mark a failure of a chapter listed here as an expected failure (xfail),
so the report still says, page by page, what is left to do.

Converting a chapter ends by deleting its name from :data:`NOT_YET_CONVERTED` (the recipe
is in the docstring of ``isolab/book/checks.py``, *Converting a chapter*).
"""

from __future__ import annotations

from pathlib import PurePosixPath

import pytest

#: Chapters (and notebook pages) not yet held to the standard: a notebook's or a built
#: page's file name starts with one of these.
NOT_YET_CONVERTED: set[str] = set()


def pending(name: str) -> bool:
    """Whether the notebook, page or figure module ``name`` (a path, a page such as
    ``book/ch02_isotropy.html`` or a name such as ``ch02``) is not yet converted."""
    stem = PurePosixPath(str(name)).name
    return any(stem.startswith(prefix) for prefix in NOT_YET_CONVERTED)


def marks(name: str) -> list:
    """The marks of a test parameter for ``name``: an expected failure while the chapter is
    listed in :data:`NOT_YET_CONVERTED` (reported per page; a pass is reported as XPASS,
    the sign that the name can go)."""
    if pending(name):
        return [pytest.mark.xfail(reason=f"{PurePosixPath(str(name)).name} is not yet converted "
                                         "(tests/book/book_standard.py)", strict=False)]
    return []


def params(names, ids=None) -> list:
    """``pytest.param`` for each name, marked by :func:`marks`."""
    return [pytest.param(n, marks=marks(n), id=(ids(n) if ids else None)) for n in names]
