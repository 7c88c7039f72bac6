"""Every chapter notebook: the Colab cell, the anatomy, clean metadata, checked outputs.

The repository is named once, in ``_config.yml``; the Colab launch buttons of the built
site and the install cell of every chapter must both point at it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from unittest import mock

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
REPO_URL = CONFIG["repository"]["url"].rstrip("/")
BRANCH = CONFIG["repository"]["branch"]
CHAPTERS = sorted((ROOT / "book").glob("*.ipynb"))
SITE = ROOT / "_build" / "html"


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def code_cells(nb: dict) -> list[str]:
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


def markdown(nb: dict) -> str:
    return "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")


PART_ONE = [p for p in CHAPTERS if p.name[:4] in ("ch01", "ch02", "ch03", "ch04")]
PART_TWO = [p for p in CHAPTERS if p.name[:4] in ("ch05", "ch06", "ch07", "ch08", "ch09")]
#: Part III's chapters
PART_THREE = [p for p in CHAPTERS if p.name[:4] in ("ch10", "ch11", "ch12", "ch13", "ch14")]
BACK_MATTER = {"using_isolab"}  # notebooks of recipes, not chapters: no explorable figure
HIDDEN = {"hide-input", "remove-input", "remove-cell"}
COLOUR_LITERAL = re.compile(r"""["']#[0-9a-fA-F]{3,8}["']|\b(?:face|edge)?colou?rs?\s*=\s*["'](?!none["'])""")
SMALL_FONT = re.compile(r"fontsize\s*=\s*[1-9](?:\.\d+)?\b(?!\.)")
BARE_BOOL = re.compile(r"(^|[\s:=(])(True|False)($|[\s,.)])", re.MULTILINE)


def visible_code(nb: dict) -> list[dict]:
    """Code cells whose input the website shows."""
    return [c for c in nb["cells"] if c["cell_type"] == "code" and not HIDDEN & set(c.get("metadata", {}).get("tags", []))]


def checked_text(cell: dict) -> str:
    """A cell's printed text: its streams and the plain-text form of what it displays."""
    return "".join("".join(o["text"]) if o["output_type"] == "stream" else "".join(o.get("data", {}).get("text/plain", ""))
                   for o in cell.get("outputs", []))


def checked_cells(nb: dict) -> list[dict]:
    """The code cells whose outputs nbval compares (tagged ``nbval-check-output``)."""
    return [c for c in nb["cells"] if c["cell_type"] == "code" and "nbval-check-output" in c.get("metadata", {}).get("tags", [])]


def toc_files() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]
    for part in toc.get("parts", []):
        files += [ch["file"] for ch in part["chapters"]]
    return files


def test_there_are_chapters_and_the_config_names_a_repository():
    assert CHAPTERS, "no chapter notebooks in book/"
    assert re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", REPO_URL)
    assert BRANCH == "main"


def test_toc_lists_exactly_the_existing_files():
    listed = toc_files()
    for entry in listed:
        assert any((ROOT / f"{entry}{ext}").exists() for ext in (".md", ".ipynb")), f"_toc.yml lists missing {entry}"
    for chapter in CHAPTERS:
        assert f"book/{chapter.stem}" in listed, f"{chapter.name} is not in _toc.yml"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
class TestChapter:
    def test_first_code_cell_installs_isolab_from_the_configured_repository_in_colab_only(self, chapter):
        first = code_cells(load(chapter))[0]
        assert '"google.colab" in sys.modules' in first
        assert f"git+{REPO_URL}@{BRANCH}" in first, "the install URL must match _config.yml"
        with mock.patch("subprocess.run") as run, mock.patch("os.system") as system:
            exec(compile(first, str(chapter), "exec"), {})
        run.assert_not_called()
        system.assert_not_called()
        with mock.patch.dict("sys.modules", {"google.colab": object()}), mock.patch("subprocess.run") as run:
            exec(compile(first, str(chapter), "exec"), {})
        assert any(f"git+{REPO_URL}@{BRANCH}" in str(arg) for arg in run.call_args.args[0])

    def test_colab_cell_is_first_and_hidden_on_the_website(self, chapter):
        first = next(c for c in load(chapter)["cells"] if c["cell_type"] == "code")
        assert "google.colab" in "".join(first["source"])
        assert "remove-input" in first.get("metadata", {}).get("tags", []), "the Colab cell needs the remove-input tag"

    def test_setup_applies_the_book_style(self, chapter):
        assert any("style.use()" in src for src in code_cells(load(chapter))[:2]), "the setup cell must call style.use()"

    def test_figures_name_optimizers_and_roles_not_colours(self, chapter):
        """Colours come from isolab.book.figures.style (one per optimizer, colour-blind safe)."""
        bad = [m.group(0) for src in code_cells(load(chapter)) for m in COLOUR_LITERAL.finditer(src)]
        assert not bad, f"colour literals in the chapter's code (use isolab.book.figures.style): {bad[:8]}"

    def test_no_text_smaller_than_ten_points(self, chapter):
        bad = [m.group(0) for src in code_cells(load(chapter)) for m in SMALL_FONT.finditer(src)]
        assert not bad, f"font sizes under 10 pt: {bad[:8]}"

    def test_metadata_has_no_widget_state(self, chapter):
        assert "widgets" not in load(chapter)["metadata"]

    def test_checked_cells_have_committed_outputs_and_no_errors(self, chapter):
        nb = load(chapter)
        checked = checked_cells(nb)
        assert checked, "a chapter must print numerical checks in cells tagged nbval-check-output"
        for cell in checked:
            assert cell["outputs"], f"checked cell without a committed output:\n{''.join(cell['source'])[:200]}"
        for cell in nb["cells"]:
            for out in cell.get("outputs", []):
                assert out["output_type"] != "error"

    def test_no_test_marker_in_the_code_and_no_failed_claim_in_the_outputs(self, chapter):
        """nbval's markers live in the cells' tags (no reader sees them); a claim the book
        makes raises when it fails, so no committed output can show one failing."""
        nb = load(chapter)
        marked = [src[:60] for src in code_cells(nb) if "NBVAL_" in src]
        assert not marked, f"nbval markers in the code (use the cell tag nbval-check-output): {marked}"
        text = "\n".join(checked_text(c) for c in nb["cells"] if c["cell_type"] == "code")
        failed = [line for line in text.splitlines() if re.match(r"^(NO\b|✗ \d+ of \d+ checks fail)", line.strip())]
        assert not failed, f"committed outputs show failed checks: {failed[:5]}"

    def test_anatomy(self, chapter):
        nb = load(chapter)
        text = markdown(nb)
        for heading in ("What you will learn", "## Exercises", "## Summary", "## References"):
            assert heading in text, f"missing section: {heading}"
        assert text.count(":class: dropdown") >= 2, "exercises need hidden solutions"
        assert "{cite" in text, "a chapter cites its sources"
        if chapter.stem not in BACK_MATTER:
            assert any(".show()" in src and ("Explorable(" in src or "figures" in src or "ch" in src) for src in code_cells(nb)), "no explorable figure"
        assert any("seed_everything" in src for src in code_cells(nb)[:3]), "seed everything near the top"

    def test_built_page_has_a_colab_button_for_this_notebook(self, chapter):
        page = SITE / "book" / f"{chapter.stem}.html"
        assert page.exists(), f"{page} missing: run `make book` first"
        org_repo = REPO_URL.removeprefix("https://github.com/")
        expected = f"https://colab.research.google.com/github/{org_repo}/blob/{BRANCH}/book/{chapter.name}"
        assert expected in page.read_text(), "Colab launch button missing or pointing elsewhere"


@pytest.mark.parametrize("chapter", PART_ONE + PART_TWO + PART_THREE, ids=lambda p: p.stem)
class TestTeachesAtAGlance:
    """BOOK_STYLE.md, checked where a machine can check it (Parts I and II, and Part III's chapters in PART_THREE)."""

    def test_visible_code_cells_are_short(self, chapter):
        long = [(len("".join(c["source"]).splitlines()), "".join(c["source"])[:60])
                for c in visible_code(load(chapter)) if len("".join(c["source"]).splitlines()) > 15]
        assert not long, f"visible code cells over 15 lines (hide them or move the code to isolab.book.figures): {long}"

    def test_checked_cells_print_claims_not_bare_booleans(self, chapter):
        cells = checked_cells(load(chapter))
        bare = [checked_text(c)[:80] for c in cells if BARE_BOOL.search(checked_text(c))]
        assert not bare, f"checked outputs print bare True/False (use isolab.book.checks.report): {bare}"

    def test_opens_with_a_hero_figure(self, chapter):
        """Right after "What you will learn" (and the hidden setup cells): a figure cell,
        marked by a ``# hero figure`` comment, whose code the website hides."""
        cells = load(chapter)["cells"]
        learn = next(i for i, c in enumerate(cells) if "What you will learn" in "".join(c["source"]))
        hero = [i for i, c in enumerate(cells) if c["cell_type"] == "code" and "# hero figure" in "".join(c["source"]).lower()]
        assert hero, "no cell marked '# hero figure'"
        cell = cells[hero[0]]
        assert hero[0] <= learn + 4, "the hero figure must come right after 'What you will learn'"
        assert all(c["cell_type"] == "code" for c in cells[learn + 1:hero[0]]), "no text between the opening and the hero"
        assert HIDDEN & set(cell.get("metadata", {}).get("tags", [])), "the hero's code is hidden on the website"
        setup = [c for c in cells[learn + 1:hero[0]] if "google.colab" not in "".join(c["source"])]
        assert all(HIDDEN & set(c.get("metadata", {}).get("tags", [])) for c in setup), "no code above the hero on the website"

    def test_built_page_shows_the_hero_before_the_first_section(self, chapter):
        """On the website a figure comes before the first numbered section (committed
        notebooks keep text outputs only, so this is checked on the built page)."""
        page = SITE / "book" / (chapter.stem + ".html")
        assert page.exists(), f"{page} not built: run `make book` first"
        html = page.read_text()
        body = html[html.index('id="what-you-will-learn"') if 'id="what-you-will-learn"' in html else 0:]
        first_section = body.find("<h2")
        first_image = body.find("<img")
        assert 0 <= first_image < first_section, "no figure between the opening and the first section"


# ---------------------------------------------------------------------------------------
# The page reads like a book (issue 28): numbered, captioned and described figures, code
# that fits the column, and a main line of bounded length.
from isolab.book.wordcount import MAX_MAIN_LINE_WORDS, main_line_words  # noqa: E402

CHAPTER_NOTEBOOKS = [p for p in CHAPTERS if p.stem not in BACK_MATTER]
FIGURE_LABEL = re.compile(r"^\*\*Figure (\d+)\.(\d+)\.\*\* \S")
#: The longest visible code line the 684-px column shows without scrolling.
MAX_CODE_COLUMNS = 88


def chapter_number(path: Path) -> int:
    return int(re.match(r"ch(\d\d)_", path.stem).group(1))


def shows_a_figure(cell: dict) -> bool:
    """A code cell that shows a figure: the hero, an explorable (``.show()``), a cell whose
    committed output is a Matplotlib figure, or one that carries alt text for its image."""
    if cell["cell_type"] != "code":
        return False
    source = "".join(cell["source"])
    return ("# hero figure" in source.lower() or ".show()" in source or checked_text(cell).startswith("<Figure size")
            or "alt" in cell.get("metadata", {}).get("mystnb", {}).get("image", {}))


def figure_alt(cell: dict) -> str:
    alt = cell.get("metadata", {}).get("mystnb", {}).get("image", {}).get("alt", "")
    return alt.strip() if isinstance(alt, str) else ""


@pytest.mark.parametrize("chapter", CHAPTER_NOTEBOOKS, ids=lambda p: p.stem)
class TestReadsLikeABook:
    def test_main_line_length(self, chapter):
        """The main line (isolab.book.wordcount: markdown without math, code and collapsed
        asides) stays under the book's length."""
        words = main_line_words(chapter)
        print(f"{chapter.stem}: main line {words:,} words")
        assert words <= MAX_MAIN_LINE_WORDS, (
            f"{chapter.stem}: the main line has {words:,} words, over {MAX_MAIN_LINE_WORDS:,}: move forensic "
            "detail, alternative readings, implementation notes and long tables into dropdown asides or an appendix")

    def test_figures_are_numbered_captioned_and_described(self, chapter):
        """Every figure cell carries alt text (``mystnb.image.alt``) and is followed by a
        markdown cell opening with its label ``**Figure N.k.**``, k = 1, 2, ... in order;
        no label stands anywhere else."""
        cells, number = load(chapter)["cells"], chapter_number(chapter)
        problems, k = [], 0
        for i, cell in enumerate(cells):
            following = "".join(cells[i + 1]["source"]) if i + 1 < len(cells) else ""
            if shows_a_figure(cell):
                k += 1
                if not figure_alt(cell):
                    problems.append(f"cell {i} (figure {number}.{k}): no alt text in metadata mystnb.image.alt")
                label = FIGURE_LABEL.match(following) if cells[i + 1]["cell_type"] == "markdown" else None
                if not label or (int(label.group(1)), int(label.group(2))) != (number, k):
                    problems.append(f"cell {i} (figure {number}.{k}): the next cell does not open with "
                                    f"'**Figure {number}.{k}.** ' but with {following[:40]!r}")
            elif cell["cell_type"] == "markdown" and "".join(cell["source"]).startswith("**Figure"):
                if not (i > 0 and shows_a_figure(cells[i - 1])):
                    problems.append(f"cell {i}: a figure label that follows no figure: {''.join(cell['source'])[:40]!r}")
        assert k, f"{chapter.stem}: no figure found"
        assert not problems, f"{chapter.stem}: {len(problems)} figure problem(s):\n  " + "\n  ".join(problems)


# ---------------------------------------------------------------------------------------
# Nothing scrolls sideways (issue 28), on every page the notebooks make, recipes included:
# the browser test measures the built site; this reads the notebooks, so a line too long
# for the column is caught (and named) without a build.
#: Tags whose cell shows no output on the page (or only on a click).
OUTPUT_HIDDEN = {"hide-output", "remove-output", "remove-cell", "hide-cell"}
FENCE = re.compile(r"^\s*(?P<fence>`{3,}|~{3,}|:{3,})\s*(?P<info>.*)$")
#: Directives whose body is shown as code.
CODE_DIRECTIVES = {"code", "code-block", "code-cell", "sourcecode"}


def fenced_code_lines(source: str) -> list[str]:
    """The lines shown as code in a markdown cell: inside code fences (```` ``` ````,
    ``~~~``, ```` ```python ````) and code directives, not inside other directives
    (```` ```{admonition} ````), whose body is markdown."""
    lines, stack = [], []          # stack of (fence, is_code)
    for line in source.splitlines():
        match = FENCE.match(line)
        if match:
            fence, info = match.group("fence"), match.group("info").strip()
            if stack and stack[-1][1]:                    # inside code: only its own fence closes it
                if fence == stack[-1][0] and not info:
                    stack.pop()
                    continue
            elif not info and stack and fence == stack[-1][0]:
                stack.pop()                               # a directive's closing fence
                continue
            else:
                directive = re.match(r"\{([\w:.-]+)\}", info)
                stack.append((fence, directive is None or directive.group(1) in CODE_DIRECTIVES))
                continue
        if stack and stack[-1][1]:
            lines.append(line)
    return lines


def shown_text_outputs(cell: dict) -> list[str]:
    """The printed text a cell shows on the page: its streams and plain-text results (an
    output with HTML, such as a check's verdict, or an image shows that instead)."""
    if OUTPUT_HIDDEN & set(cell.get("metadata", {}).get("tags", [])):
        return []
    texts = []
    for out in cell.get("outputs", []):
        if out["output_type"] == "stream":
            texts.append("".join(out["text"]))
        elif not any(k.startswith("image/") or k == "text/html" for k in out.get("data", {})):
            texts.append("".join(out.get("data", {}).get("text/plain", "")))
    return texts


def too_wide(nb: dict) -> list[str]:
    """Every line the page shows in monospace wider than the column: visible code, fenced
    code in the prose, and printed output."""
    wide = []
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "markdown":
            places = [("code in the prose", line) for line in fenced_code_lines("".join(cell["source"]))]
        else:
            shown = cell in visible_code(nb) or 'class="isolab-audit"' in "".join(
                "".join(o.get("data", {}).get("text/html", "")) for o in cell.get("outputs", []))  # a panel shows its code
            places = [("code", line) for line in "".join(cell["source"]).splitlines()] if shown else []
            places += [("output", line) for text in shown_text_outputs(cell) for line in text.splitlines()]
        wide += [f"cell {i}, {kind} ({len(line)} characters): {line.strip()[:50]}"
                 for kind, line in places if len(line) > MAX_CODE_COLUMNS]
    return wide


@pytest.mark.parametrize("notebook", CHAPTERS, ids=lambda p: p.stem)
def test_visible_code_and_output_fit_the_column(notebook):
    wide = too_wide(load(notebook))
    assert not wide, (f"{notebook.stem}: {len(wide)} lines shown over {MAX_CODE_COLUMNS} characters (break them, "
                      "print a narrower table, move the code to the chapter's module, or hide the cell):\n  "
                      + "\n  ".join(wide[:25]))


def test_too_wide_reads_code_prose_and_output():
    long = "x" * (MAX_CODE_COLUMNS + 1)
    nb = {"cells": [
        {"cell_type": "markdown", "source": ["```{admonition} Aside\n", "Text " + long + "\n", "```\n", "Text\n",
                                             "````{note}\n", "```python\n", long + "\n", "```\n", "````\n"]},
        {"cell_type": "code", "metadata": {}, "source": [long], "outputs": [
            {"output_type": "stream", "name": "stdout", "text": [long + "\n"]},
            {"output_type": "display_data", "data": {"text/plain": [long], "text/html": ["<b>ok</b>"]}}]},
        {"cell_type": "code", "metadata": {"tags": ["hide-input", "hide-output"]}, "source": [long],
         "outputs": [{"output_type": "stream", "name": "stdout", "text": [long]}]},
    ]}
    kinds = [w.split(" (")[0] for w in too_wide(nb)]
    assert kinds == ["cell 0, code in the prose", "cell 1, code", "cell 1, output"], kinds


# ---------------------------------------------------------------------------------------
# One audit panel per section (issue 34; isolab.book.checks, "Converting a chapter"): on
# the notebooks, each section's checks are one panel whose title names the section, with
# about one code toggle per section at most; on the built site, no verdict is a bare
# count, no claim is in ASCII maths, and no claim is a check that cannot fail. A chapter
# listed in tests/book/book_standard.py is an expected failure here until it is converted.
import ast  # noqa: E402

from book_standard import params as held  # noqa: E402

from isolab.book.checks import Check, ascii_maths, cannot_fail  # noqa: E402

#: A numbered section's heading (``## 1.3 …``; a ``### 1.3.2`` subsection belongs to 1.3).
SECTION_HEADING = re.compile(r"^#{2,4} (\d+\.\d+)(?:\.\d+)*\b", re.MULTILINE)
#: A verdict that names its section and what it establishes, then the counts.
COUNT = r"\d+ (?:claims?|reproduced|refuted|unresolved|illustrations?)"
VERDICT = re.compile(rf"^[✓✗?] §\d+(?:\.\d+)*[a-z]? \S.{{8,}} — {COUNT}(?: · {COUNT})*$")
#: The tags that fold a cell's code or output behind a toggle on the page.
TOGGLES = {"hide-input", "hide-output", "hide-cell"}


def outputs_html(cell: dict) -> str:
    return "".join("".join(out.get("data", {}).get("text/html", "")) for out in cell.get("outputs", []))


def audit_cells(nb: dict) -> list[tuple[int, dict]]:
    """The cells that show an audit panel (``isolab.book.checks.audit``)."""
    return [(i, c) for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code"
            and 'class="isolab-audit"' in outputs_html(c)]


def legacy_cells(nb: dict) -> list[tuple[int, dict]]:
    """The cells that show a verdict of the older ``report`` (one per cell, no section)."""
    return [(i, c) for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code"
            and 'class="isolab-checks"' in outputs_html(c)]


def section_of(nb: dict, index: int) -> str | None:
    """The number (``1.3``) of the numbered section the cell at ``index`` sits in."""
    found = None
    for cell in nb["cells"][:index]:
        if cell["cell_type"] == "markdown":
            for match in SECTION_HEADING.finditer("".join(cell["source"])):
                found = match.group(1)
    return found


def code_toggles(nb: dict) -> int:
    """The "Show code cell …" bars the page shows: one per cell that hides its code or
    its output behind a click (a hidden part that is removed shows no bar)."""
    count = 0
    for cell in nb["cells"]:
        tags = set(cell.get("metadata", {}).get("tags", []))
        if cell["cell_type"] == "code" and ("hide-cell" in tags or ("hide-input" in tags and "remove-input" not in tags)
                                            or ("hide-output" in tags and "remove-output" not in tags)):
            count += 1
    return count


def numbered_sections(nb: dict) -> list[str]:
    return sorted({m.group(1) for c in nb["cells"] if c["cell_type"] == "markdown"
                   for m in SECTION_HEADING.finditer("".join(c["source"]))})


@pytest.mark.parametrize("chapter", held(CHAPTER_NOTEBOOKS, ids=lambda p: p.stem))
def test_one_audit_panel_per_section(chapter):
    """Every verdict is an audit panel (no older one-per-cell verdicts), its title names
    the section it sits in, no section has two, and its cell hides its code (the panel
    shows it) and is compared by nbval."""
    nb = load(chapter)
    problems = [f"cell {i}: an older verdict (isolab.book.checks.report): {checked_text(c).splitlines()[0][:60]!r}"
                for i, c in legacy_cells(nb)]
    seen: dict[str, int] = {}
    for i, cell in audit_cells(nb):
        title = checked_text(cell).splitlines()[0]
        number = re.match(r"^. §(\d+(?:\.\d+)*)", title)
        where = section_of(nb, i)
        if not number or number.group(1) != where:
            problems.append(f"cell {i}: the panel {title[:50]!r} sits in §{where}")
        elif where in seen:
            problems.append(f"cell {i}: a second panel in §{where} (the first is cell {seen[where]})")
        seen.setdefault(where, i)
        tags = set(cell.get("metadata", {}).get("tags", []))
        if not {"remove-input", "nbval-check-output"} <= tags:
            problems.append(f"cell {i}: a panel's cell is tagged remove-input and nbval-check-output, not {sorted(tags)}")
    assert audit_cells(nb), f"{chapter.stem}: no audit panel"
    assert not problems, f"{chapter.stem}:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("chapter", held(CHAPTER_NOTEBOOKS, ids=lambda p: p.stem))
def test_at_most_one_code_toggle_per_section(chapter):
    """BOOK_STYLE: at most about one code toggle per section (a check's code is in its
    panel, a figure's drawing code in the chapter's module)."""
    nb = load(chapter)
    toggles, sections = code_toggles(nb), len(numbered_sections(nb))
    assert toggles <= max(1, sections), (f"{chapter.stem}: {toggles} code toggles for {sections} sections: fold "
                                         "checks into the section's panel, move drawing code into the figure module, "
                                         "or show short code as it is")


def literally_true(source: str) -> list[str]:
    """Rows made with ``holds`` written as the constant ``True``."""
    found = []
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return found
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) in (
                "Check", "illustration", "reproduced", "refuted", "unresolved"):
            holds = [k.value for k in node.keywords if k.arg in ("holds", "undecided")]
            holds += node.args[3:4] if getattr(node.func, "id", "") in ("Check", "illustration") else node.args[4:5]
            if any(isinstance(h, ast.Constant) and h.value is True for h in holds):
                found.append(ast.get_source_segment(source, node)[:70])
    return found


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_no_check_holds_by_fiat(chapter):
    """A row whose ``holds`` is the constant True checks nothing."""
    bad = [found for src in code_cells(load(chapter)) for found in literally_true(src)]
    assert not bad, f"{chapter.stem}: rows that hold by fiat: {bad}"


def test_literally_true_sees_constant_verdicts():
    assert literally_true('Check("c", "1", "1", True)') == ['Check("c", "1", "1", True)']
    assert literally_true('illustration("c", "1", "1", holds=True)')
    assert literally_true('refuted("p", "c", "1", "2", True)')
    assert literally_true('Check("c", "1", "1", x < 1)') == []


def site_panels(page: Path) -> list[dict]:
    """Every verdict on a built page, new panels and older ones: its summary and its rows
    (kind, claim, measured, expected), maths written back between dollars."""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(page.read_text(), "html.parser")
    for math in soup.select("span.math"):
        inner = math.get_text().strip()
        inner = inner[2:-2] if inner.startswith("\\(") and inner.endswith("\\)") else inner
        math.replace_with(f"${inner}$")
    panels = []
    for details in soup.select("details.isolab-audit, details.isolab-checks"):
        summary = " ".join(details.find("summary").get_text().split())
        rows = []
        if "isolab-audit" in details["class"]:
            for li in details.select("li.isolab-claim"):
                rows.append((li["data-kind"], " ".join(li.select_one(".isolab-claim-text").get_text().split()),
                             li.select_one(".isolab-measured").get_text(), li.select_one(".isolab-expected").get_text()))
        else:
            for tr in details.select("tbody tr"):
                cells = [td.get_text() for td in tr.find_all("td")]
                kind = next((k for k in ("refuted", "reproduced", "unresolved") if cells[1].endswith(f" — {k}")),
                            "claim")
                rows.append((kind, cells[1], cells[2], cells[3]))
        panels.append({"summary": summary, "rows": rows})
    return panels


def built_page(chapter: Path) -> Path:
    page = SITE / "book" / f"{chapter.stem}.html"
    assert page.exists(), f"{page} not built: run `make book` first"
    return page


@pytest.mark.parametrize("chapter", held(CHAPTERS, ids=lambda p: p.stem))
def test_no_bare_verdict_on_the_site(chapter):
    """Every verdict on the page reads '✓ §N.k what the section establishes — N claims'
    (never a bare '✓ 3 claims hold')."""
    bare = [p["summary"][:80] for p in site_panels(built_page(chapter)) if not VERDICT.match(p["summary"])]
    assert not bare, f"{chapter.stem}: {len(bare)} bare verdict(s):\n  " + "\n  ".join(bare)


@pytest.mark.parametrize("chapter", held(CHAPTERS, ids=lambda p: p.stem))
def test_claims_are_in_rendered_maths_on_the_site(chapter):
    """No verdict title and no claim on the page writes maths as text outside $…$
    (isolab.book.checks.ascii_maths: a caret, ||, an underscore subscript, sqrt or a
    spelled Greek letter, <= or ->, Unicode maths symbols)."""
    found = []
    for panel in site_panels(built_page(chapter)):
        title = panel["summary"][2:].rpartition(" — ")[0] or panel["summary"]
        found += [f"title {title[:50]!r}: {why}" for why in ascii_maths(title)]
        found += [f"claim {claim[:50]!r}: {why}" for _, claim, _, _ in panel["rows"] for why in ascii_maths(claim)]
    assert not found, f"{chapter.stem}: {len(found)} piece(s) of ASCII maths:\n  " + "\n  ".join(found[:25])


@pytest.mark.parametrize("chapter", held(CHAPTERS, ids=lambda p: p.stem))
def test_no_claim_on_the_site_cannot_fail(chapter):
    """No row counted as a claim expects a bound that every value of its kind meets (a
    cosine below 1, a norm above 0): such a row is an illustration, or should check the
    bound its sentence states."""
    vacuous = [f"{claim[:60]!r}: {reason}" for panel in site_panels(built_page(chapter))
               for kind, claim, measured, expected in panel["rows"]
               for reason in [cannot_fail(Check(claim, measured, expected, True, kind))] if reason]
    assert not vacuous, f"{chapter.stem}: claims that cannot fail:\n  " + "\n  ".join(vacuous)


#: The main line a converted chapter may have (issue 34: 3,000 words, wordcount's definition).
STANDARD_MAIN_LINE_WORDS = 3000


@pytest.mark.parametrize("chapter", held(CHAPTER_NOTEBOOKS, ids=lambda p: p.stem))
def test_a_converted_chapters_main_line_is_at_most_3000_words(chapter):
    words = main_line_words(chapter)
    assert words <= STANDARD_MAIN_LINE_WORDS, (
        f"{chapter.stem}: the main line has {words:,} words, over {STANDARD_MAIN_LINE_WORDS:,}: fold detail "
        "into dropdown asides or the appendix")
