"""Chapter 13's figures and saved results: the hero, the explorable's promises over its
whole grid, the figures drawn from the saved sweeps, and one saved run recomputed."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure
from matplotlib.text import Text

from isolab.book import scaling
from isolab.book.explorable import MIN_MAIN_VALUES
from isolab.book.figures import ch13
from isolab.book.figures.saved import saved_result


@pytest.fixture(autouse=True)
def one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def _small_text(fig: Figure) -> list:
    fig.canvas.draw()
    return [(t.get_text(), t.get_fontsize()) for t in fig.findobj(Text) if t.get_text() and t.get_fontsize() < 10]


def test_hero_is_a_figure_with_readable_text():
    fig = ch13.hero()
    assert isinstance(fig, Figure) and len(fig.axes) == 2
    assert not _small_text(fig)


def test_explorable_keeps_its_promises_over_the_whole_grid():
    explorable = ch13.cost_bill()
    assert explorable.main_slider.name == "b"
    assert len(explorable.main_slider.values) >= MIN_MAIN_VALUES
    assert explorable.promises
    for promise in explorable.promises:
        assert promise.text in explorable.caption
    assert not explorable.broken_promises()
    assert not explorable.clipped_text_over_grid()


def test_explorable_b_slider_dilutes_the_roots_and_their_application_not_the_statistics():
    """What the promises mean: over the slider's 2^10 .. 2^18 rows the roots and their
    application fall by exactly 256 (a cost per step that does not grow with b), the
    statistics not at all; TF32 divides the statistics' modelled time by 495/67."""
    lo, hi = (ch13.parts_of(b, 10, "float32", True) for b in (ch13.ROWS[0], ch13.ROWS[-1]))
    for part in ("roots", "apply roots"):
        assert lo["Iso, eigh", part] / hi["Iso, eigh", part] == pytest.approx(256, rel=1e-12)
    assert lo["Iso, eigh", "statistics"] == hi["Iso, eigh", "statistics"]
    tf = ch13.parts_of(ch13.ROWS[0], 10, "TF32", True)
    assert lo["Iso, eigh", "statistics"] / tf["Iso, eigh", "statistics"] == pytest.approx(494.7 / 67.0, rel=1e-9)


def test_the_distributed_model_moves_the_roots_and_not_the_statistics():
    """What the promise means, at one setting: at W = 24 each of Iso's 24 root jobs has its
    own process (1/24 of the one-process cost), Muon's 12 jobs stop shrinking at W = 12."""
    one, many = ch13.bill(ch13.WIDTH, 4096, 10, 1), ch13.bill(ch13.WIDTH, 4096, 10, 24)
    assert many["Iso, eigh"]["roots"] == pytest.approx(one["Iso, eigh"]["roots"] / 24, rel=1e-12)
    assert many["Iso, eigh"]["statistics"] == one["Iso, eigh"]["statistics"]
    assert many["Iso, eigh"]["apply roots"] == one["Iso, eigh"]["apply roots"]
    twelve = ch13.bill(ch13.WIDTH, 4096, 10, 12)
    assert many["Muon"]["Newton-Schulz"] == twelve["Muon"]["Newton-Schulz"]
    assert twelve["Muon"]["Newton-Schulz"] == pytest.approx(one["Muon"]["Newton-Schulz"] / 12, rel=1e-12)


def test_explorable_frames_have_readable_text():
    fig = ch13.cost_bill().render(strict=True, b=1024, k=1, precision="float32")
    assert not _small_text(fig)


def test_staleness_figure_and_file():
    saved = np.load(saved_result("ch13_staleness.npz", download=False))
    lanes = list(saved["lanes"])
    assert lanes[0] == "adam" and "isoadam_1_1" in lanes and "isoadam_100_100" in lanes
    assert saved["heldout_loss"].shape == (len(lanes), len(saved["heldout_seeds"]))
    assert len(saved["heldout_seeds"]) >= 20 and len(saved["tuning_seeds"]) >= 5
    assert not set(saved["heldout_seeds"]) & set(saved["tuning_seeds"])
    assert saved["tried_lr"].shape == (len(lanes), int(saved["budget"])), "every lane tried the same count"
    assert saved["lr_interior"].all(), "a tuned learning rate sits at the edge of its grid"
    assert "ch13_staleness.py" in str(saved["command"])
    fig = ch13.staleness_figure(saved)
    assert not _small_text(fig)


def test_staleness_and_subsample_tables_label_their_intervals():
    saved = np.load(saved_result("ch13_staleness.npz", download=False))
    text = ch13.staleness_table(saved)
    assert "95.9 % interval" in text and "90%" not in text
    assert len(text.splitlines()) == 3 + len(saved["lanes"])
    assert max(len(line) for line in text.splitlines()) <= 88
    diffs = ch13.staleness_differences(saved["lanes"], saved["heldout_loss"])
    assert diffs.splitlines()[1].startswith("isoadam_1_1      - adam")
    sub = np.load(saved_result("ch13_subsample.npz", download=False))
    lines = ch13.subsample_table(sub).splitlines()
    assert lines[1].split()[0] == "256" and "+0.0000 [+0.0000, +0.0000]" in lines[1]  # every row minus itself


def test_the_jitter_reruns_match_the_saved_runs():
    """The reruns under the jitter hold the same lanes, learning rates and seeds as the saved
    runs, and move each held-out median by a rounding-sized amount, not more."""
    for name, jitter in (("ch13_staleness.npz", "ch13_staleness_jitter.npz"),
                         ("ch13_subsample.npz", "ch13_subsample_jitter.npz")):
        saved, again = (np.load(saved_result(n, download=False)) for n in (name, jitter))
        assert np.array_equal(saved["lr"], again["lr"]) and np.array_equal(saved["heldout_seeds"], again["heldout_seeds"])
        assert again["heldout_loss"].shape == (len(again["jitter_seeds"]),) + saved["heldout_loss"].shape
        moved = np.abs(np.median(again["heldout_loss"], axis=-1) / np.median(saved["heldout_loss"], axis=-1) - 1)
        assert moved.max() < 0.05, f"{jitter}: a median moved by {moved.max():.1%} under the jitter"


def test_one_saved_staleness_run_is_reproduced():
    saved = np.load(saved_result("ch13_staleness.npz", download=False))
    lanes = list(saved["lanes"])
    i = lanes.index("isoadam_10_10")
    seed = int(saved["heldout_seeds"][0])
    again = scaling.staleness_run("isoadam_10_10", float(saved["lr"][i]), seed)["eval_loss"]
    assert again == pytest.approx(float(saved["heldout_loss"][i, 0]), rel=0.02)


def test_subsample_figure_and_file():
    saved = np.load(saved_result("ch13_subsample.npz", download=False))
    assert int(saved["rows"][0]) == scaling.STALENESS_TASK["batch"]       # the reference: every row
    assert saved["heldout_loss"].shape[0] == len(saved["rows"])
    assert list(saved["timing_configs"])[0] == "adam"
    assert "ch13_subsample.py" in str(saved["command"])
    assert not _small_text(ch13.subsample_figure(saved))


def test_ddp_timing_file_carries_blocks_and_command():
    data = json.loads(saved_result("ch13_ddp_timing.json", download=False).read_text())
    assert "ch13_ddp_timing.py" in data["command"]
    blocks = data["block_seconds_per_step"]
    assert set(blocks) == {"Adam", "Muon", "IsoAdam", "Iso"}
    for name, ratios in data["ratio_to_adam"].items():
        assert ratios == pytest.approx([t / a for t, a in zip(blocks[name], blocks["Adam"])])
        assert data["summary"][name]["min"] <= data["summary"][name]["median"] <= data["summary"][name]["max"]
    assert data["settings"]["threads"] == 1
