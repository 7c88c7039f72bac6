"""isolab.book.wordcount: what counts towards a chapter's main line."""

from __future__ import annotations

import pytest

from isolab.book.wordcount import count_words, main_line_text, main_line_words


def notebook(*markdown: str) -> dict:
    return {"cells": [{"cell_type": "markdown", "source": [text]} for text in markdown]
            + [{"cell_type": "code", "source": ["words in code do not count at all"]}]}


def test_words_are_runs_of_letters_or_digits():
    assert count_words("A cosine of 0.893, don't b/d_in") == 8   # A cosine of 0.893 don't b d in
    assert count_words("  —  ") == 0


@pytest.mark.parametrize("markdown, words", [
    ("one $x^2 + y$ two", 2),                                    # inline math
    ("one\n\n$$\na = b\nc = d\n$$\n\ntwo", 2),                    # display math
    ("one \\begin{align} x &= y \\end{align} two", 2),            # an environment
    ("one\n```python\nprint('not prose')\n```\ntwo", 2),          # a code fence
    ("see {doc}`Chapter 4 <ch04_muon>` and {cite:p}`key2024`", 4),   # see Chapter 4 and (role names, targets out)
    ("```{admonition} Aside\n:class: dropdown\nmany hidden words here\n```\nshown", 1),
    ("````{admonition} Aside\n:class: tip, dropdown\n```python\ncode\n```\nhidden\n````\nshown", 1),
    ("```{admonition} What you will learn\n:class: tip\n- one bullet\n```", 6),   # an open admonition counts
    (":::{note}\nA note counts.\n:::", 3),
    ("```{dropdown} Details\nhidden\n```\nshown", 1),
    ("```{math}\na = b\n```\nshown", 1),
])
def test_main_line_text(markdown, words):
    assert count_words(main_line_text(markdown)) == words, main_line_text(markdown)


def test_an_appendix_section_is_not_main_line_up_to_the_next_section():
    nb = notebook("## 1.1 One\none two three\n## Appendix: Newton–Schulz\nhidden words",
                  "still in the appendix\n### a subsection of it",
                  "## Exercises\nfour five")
    assert main_line_words(nb) == 2 + 3 + 1 + 2           # '1.1 One', 'one two three', 'Exercises', 'four five'


def test_code_cells_do_not_count():
    assert main_line_words(notebook("one two")) == 2
