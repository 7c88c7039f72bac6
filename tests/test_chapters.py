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

ROOT = Path(__file__).resolve().parent.parent
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

    def test_metadata_has_no_widget_state(self, chapter):
        assert "widgets" not in load(chapter)["metadata"]

    def test_checked_cells_have_committed_outputs_and_no_errors(self, chapter):
        nb = load(chapter)
        checked = [c for c in nb["cells"] if c["cell_type"] == "code" and "NBVAL_CHECK_OUTPUT" in "".join(c["source"])]
        assert checked, "a chapter must print numerical checks in NBVAL_CHECK_OUTPUT cells"
        for cell in checked:
            assert cell["outputs"], f"checked cell without a committed output:\n{''.join(cell['source'])[:200]}"
        for cell in nb["cells"]:
            for out in cell.get("outputs", []):
                assert out["output_type"] != "error"

    def test_anatomy(self, chapter):
        nb = load(chapter)
        text = markdown(nb)
        for heading in ("What you will learn", "## Exercises", "## Summary", "## References"):
            assert heading in text, f"missing section: {heading}"
        assert text.count(":class: dropdown") >= 2, "exercises need hidden solutions"
        assert "{cite" in text, "a chapter cites its sources"
        assert any("Explorable(" in src and ".show()" in src for src in code_cells(nb)), "no explorable figure"
        assert any("seed_everything" in src for src in code_cells(nb)[:3]), "seed everything near the top"

    def test_built_page_has_a_colab_button_for_this_notebook(self, chapter):
        page = SITE / "book" / f"{chapter.stem}.html"
        assert page.exists(), f"{page} missing: run `make book` first"
        org_repo = REPO_URL.removeprefix("https://github.com/")
        expected = f"https://colab.research.google.com/github/{org_repo}/blob/{BRANCH}/book/{chapter.name}"
        assert expected in page.read_text(), "Colab launch button missing or pointing elsewhere"
