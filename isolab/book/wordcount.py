r"""How long a chapter's main line is: the words a reader meets without opening anything.

The book keeps each chapter's main line under about :data:`MAX_MAIN_LINE_WORDS` words.
They are counted here, in one place, as:

* the words of the chapter's markdown cells (code cells and their outputs do not count);
* without math: ``$…$``, ``$$…$$`` and ``\begin{…}…\end{…}`` blocks;
* without code: fenced code blocks (`````` ``` ``````, ``~~~``) and code-like directives
  (``{code}``, ``{code-cell}``, ``{math}``, ``{raw}``, ...);
* without what is collapsed: the whole content of a directive that opens only on a
  click (``:class: dropdown`` on an admonition or any other directive, ``{dropdown}``,
  ``{toggle}``): exercise solutions, asides, appendix notes. Other directives (a
  ``{tip}``, an ``{admonition}`` shown open) count, title and body;
* without the appendix: a level-2 section whose title starts with "Appendix", from its
  heading to the next level-2 heading (forensic detail moved out of the main line).

A word is a run of letters or digits (``0.893``, ``b/d_in``'s parts, ``don't`` count as
words; MyST role names such as ``{doc}``, link targets and citation keys do not).

``python -m isolab.book.wordcount book/*.ipynb`` prints the count of each chapter.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

__all__ = ["MAX_MAIN_LINE_WORDS", "main_line_text", "count_words", "main_line_words"]

#: The longest main line a chapter should have (BOOK_STYLE: "under ~4,500 words").
MAX_MAIN_LINE_WORDS = 4500

_FENCE = re.compile(r"^\s*(?P<fence>`{3,}|~{3,}|:{3,})\s*(?:\{(?P<directive>[\w:.-]+)\})?\s*(?P<argument>.*)$")
_OPTION = re.compile(r"^\s*:[\w-]+:")
#: Directives whose body is code, math or markup, not prose.
_CODE_DIRECTIVES = {"code", "code-block", "code-cell", "sourcecode", "math", "raw", "literalinclude",
                    "eval-rst", "glue:figure", "mermaid", "graphviz"}
#: Directives that are collapsed whatever their options say.
_COLLAPSED_DIRECTIVES = {"dropdown", "toggle"}

_DISPLAY_MATH = re.compile(r"\$\$.*?\$\$", re.DOTALL)
_ENVIRONMENT = re.compile(r"\\begin\{(?P<env>[\w*]+)\}.*?\\end\{(?P=env)\}", re.DOTALL)
_INLINE_MATH = re.compile(r"(?<![\\$])\$(?!\$)(?:[^$\\]|\\.)+?\$")
_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
_CITATION = re.compile(r"\{cite(?::\w+)?\}`[^`]*`")     # a citation's keys are not words
_ROLE = re.compile(r"\{[\w:.-]+\}")
_TARGET = re.compile(r"<[^<>\n]*>")        # role targets (`Chapter 4 <ch04_muon>`) and HTML tags
_URL = re.compile(r"\]\([^)\s]*\)")
_WORD = re.compile(r"[^\W_]+(?:['’.][^\W_]+)*")
_SECTION = re.compile(r"^##(?!#)\s*(?P<title>.*)$", re.MULTILINE)


def _closes(line: str, fence: str) -> bool:
    """Whether ``line`` closes a block opened by ``fence``: the same character, at least
    as many of them, and nothing else."""
    stripped = line.strip()
    return len(stripped) >= len(fence) and set(stripped) == {fence[0]}


def _kept_lines(lines: list[str]) -> list[str]:
    """The lines of ``lines`` that belong to the main line (fenced blocks resolved)."""
    kept: list[str] = []
    i = 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if not match:
            kept.append(lines[i])
            i += 1
            continue
        fence, directive = match.group("fence"), match.group("directive")
        end = next((j for j in range(i + 1, len(lines)) if _closes(lines[j], fence)), len(lines))
        body = lines[i + 1:end]
        options = []
        while body and _OPTION.match(body[0]):
            options.append(body.pop(0))
        collapsed = directive in _COLLAPSED_DIRECTIVES or any(
            re.match(r"^\s*:class:.*\bdropdown\b", option) for option in options)
        if directive is not None and directive not in _CODE_DIRECTIVES and not collapsed:
            kept.append(match.group("argument"))          # an admonition's title is read
            kept.extend(_kept_lines(body))
        i = end + 1
    return kept


def main_line_text(markdown: str) -> str:
    """The prose of one markdown cell that counts towards the main line."""
    text = "\n".join(_kept_lines(markdown.splitlines()))
    for pattern in (_COMMENT, _DISPLAY_MATH, _ENVIRONMENT, _INLINE_MATH, _URL, _CITATION, _ROLE, _TARGET):
        text = pattern.sub(" ", text)
    return text


def count_words(text: str) -> int:
    """The number of words (runs of letters or digits) in ``text``."""
    return len(_WORD.findall(text))


def _outside_appendix(markdown_cells: list[str]) -> list[str]:
    """The markdown of the cells with the appendix sections cut out (a section starts at
    a level-2 heading and ends at the next one)."""
    kept, in_appendix = [], False
    for text in markdown_cells:
        pieces, last = [], 0
        for match in _SECTION.finditer(text):
            if not in_appendix:
                pieces.append(text[last:match.start()])
            in_appendix, last = match.group("title").strip().lower().startswith("appendix"), match.start()
        if not in_appendix:
            pieces.append(text[last:])
        kept.append("".join(pieces))
    return kept


def main_line_words(notebook: dict | str | Path) -> int:
    """The main line's length of a notebook (a path or its parsed JSON), in words."""
    if not isinstance(notebook, dict):
        notebook = json.loads(Path(notebook).read_text())
    cells = ["".join(cell["source"]) for cell in notebook["cells"] if cell["cell_type"] == "markdown"]
    return sum(count_words(main_line_text(text)) for text in _outside_appendix(cells))


def main(paths: list[str]) -> int:
    over = 0
    for path in paths:
        words = main_line_words(path)
        over += words > MAX_MAIN_LINE_WORDS
        flag = "" if words <= MAX_MAIN_LINE_WORDS else f"   over {MAX_MAIN_LINE_WORDS:,}"
        print(f"{Path(path).stem:32s} {words:6,d}{flag}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
