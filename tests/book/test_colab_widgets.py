"""The live explorable under Colab's own ipywidgets (7.7.1) as well as under 8.x.

Colab ships ipywidgets 7.7.x, and its front end renders ipywidgets 8 widgets only through
a custom widget manager. The chapters' install cell therefore must not upgrade it, and
the live explorable must work with what Colab has. ``make test`` prepares
``.venv/colab-ipywidgets7``: an interpreter that sees the book's environment through a
``.pth`` file but has ipywidgets 7.7.1 (and the widgetsnbextension it needs) installed
in front of it, as Colab has.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COLAB_ENV = ROOT / ".venv" / "colab-ipywidgets7"
COLAB_PYTHON = COLAB_ENV / "bin" / "python"

#: Moves the first slider of a live explorable and presses a toggle button of another;
#: prints what changed as JSON.
MOVE_A_SLIDER = r"""
import json, os
os.environ["ISOLAB_EXPLORABLE"] = "live"
import ipywidgets
from isolab.book.explorable import Explorable, Slider

def draw(fig, slope, offset):
    ax = fig.add_subplot()
    ax.plot([0, 1], [offset, offset + slope])
    ax.set_ylim(-3, 3)

box = Explorable(draw, [Slider("slope", [0.5, 1, 2], fmt="{:.1f}"), Slider("offset", [-1, 1])],
                 figsize=(3, 2)).widget()
slider, image = box.children[0].children[0], box.children[-1]
before_image, before_label = bytes(image.value), slider.label
slider.value = 2

def draw_choice(fig, optimizer, k):
    fig.add_subplot().plot([0, k], color={"Iso": "green", "Muon": "navy"}[optimizer])

choice = Explorable(draw_choice, [Slider("optimizer", ["Iso", "Muon"], default="Iso"), Slider("k", [1, 2])],
                    figsize=(3, 2)).widget()
toggle, toggle_image = choice.children[0].children[0], choice.children[-1]
toggle_before = bytes(toggle_image.value)
toggle.value = "Muon"
print(json.dumps({"version": ipywidgets.__version__, "image_changed": bytes(image.value) != before_image,
                  "label_before": before_label, "label_after": slider.label,
                  "png": bytes(image.value)[:8].hex(),
                  "toggle": type(toggle).__name__, "toggle_labels": list(toggle._options_labels),
                  "toggle_description": toggle.description, "toggle_label": toggle.label,
                  "toggle_changed": bytes(toggle_image.value) != toggle_before}))
"""


def colab_python() -> Path:
    if not COLAB_PYTHON.exists():
        pytest.fail(f"{COLAB_ENV} is missing: `make test` creates it (make colab-env)", pytrace=False)
    return COLAB_PYTHON


def move_a_slider(python) -> dict:
    result = subprocess.run([str(python), "-c", MOVE_A_SLIDER], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("flavour", ["colab-ipywidgets7", "book-ipywidgets8"])
def test_live_explorable_redraws_and_relabels_when_a_slider_or_toggle_moves(flavour):
    python = colab_python() if flavour == "colab-ipywidgets7" else sys.executable
    moved = move_a_slider(python)
    assert moved["version"].split(".")[0] == ("7" if flavour == "colab-ipywidgets7" else "8"), moved
    if flavour == "colab-ipywidgets7":
        assert moved["version"] == "7.7.1", moved
    assert moved["image_changed"], moved
    assert moved["png"] == b"\x89PNG\r\n\x1a\n".hex(), "the widget's image is not a PNG"
    assert (moved["label_before"], moved["label_after"]) == ("1.0", "2.0"), moved
    # a categorical choice is toggle buttons, and pressing one redraws
    assert moved["toggle"] == "ToggleButtons" and moved["toggle_labels"] == ["Iso", "Muon"], moved
    assert moved["toggle_description"] == "optimizer" and moved["toggle_label"] == "Muon", moved
    assert moved["toggle_changed"], moved


def test_installing_the_book_extra_into_colab_changes_nothing(tmp_path):
    """pip, asked to install ``isolab[book]`` where ipywidgets 7.7.1 is installed, would
    install isolab alone: nothing Colab ships is upgraded or replaced."""
    report = tmp_path / "report.json"
    result = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(colab_python()), "install", "--dry-run", "--quiet",
         "--report", str(report), f"{ROOT}[book]"],
        capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    would_install = sorted(item["metadata"]["name"] for item in json.loads(report.read_text())["install"])
    assert would_install == ["isolab"], f"installing isolab[book] would also install or replace {would_install}"
