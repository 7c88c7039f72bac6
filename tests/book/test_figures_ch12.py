"""Chapter 12's training figure: rows ordered by the median, every optimizer drawn in its look."""

import math

import numpy as np
import pytest
from matplotlib.figure import Figure

from isolab.book.engine.intervals import median_interval
from isolab.book.figures import ch12, style


def test_family_training_orders_rows_by_median_and_survives_divergence():
    rng = np.random.default_rng(0)
    curves = {"Adam": np.exp(-rng.random((5, 1)) * np.arange(31)), "Shampoo": np.full((5, 31), 2.0),
              "Shampoo, grafted": np.exp(-2 * np.arange(31) / 30)[None].repeat(5, 0)}
    curves["Shampoo"][0, 10:] = math.inf  # a diverged seed
    scores = {"Adam": [0.01, 0.005, 0.02, 0.01, 0.012], "Shampoo": [2.0, 2.0, math.inf, 2.1, 2.0],
              "Shampoo, grafted": [0.14] * 5}
    intervals = {k: median_interval(v) for k, v in scores.items()}
    fig = ch12.family_training(curves, scores, intervals)
    assert isinstance(fig, Figure) and len(fig.axes) == 2
    labels = [t.get_text() for t in fig.axes[1].get_yticklabels()]
    assert labels == ["Adam", "Shampoo, grafted", "Shampoo"]
    colours = {line.get_label(): line.get_color() for line in fig.axes[0].get_lines()}
    assert colours["Adam"] == style.color("Adam") and colours["Shampoo, grafted"] == style.color("Shampoo")
    fig.canvas.draw()  # infinite values are clipped, not an error


def test_hero_marks_the_exponents_that_are_optimizers_and_zeros_where_promised():
    fig = ch12.hero()
    ax = fig.axes[0]
    size, effect = (np.asarray(line.get_ydata()) for line in ax.get_lines()[:2])
    p = np.asarray(ax.get_lines()[0].get_xdata())
    assert size[np.isclose(p, 0.5)][0] < 1e-9 and effect[np.isclose(p, 1.0)][0] < 1e-9
    assert size.min() == size[np.isclose(p, 0.5)][0] and size[0] > 0.5 and effect[0] > 0.5
    labels = {t.get_text() for t in ax.texts}
    assert {"SGD", "Shampoo", "Iso", "K-FAC"} <= labels
    assert "κ = 100" in " ".join(ax.get_title(loc=loc) for loc in ("left", "center", "right"))  # the style may move titles


def test_cost_draws_one_marker_per_layer_and_method_and_no_bars_on_its_log_axis():
    percent = {"a": {"Adam": 0.01, "Muon": 125.0, "Iso": 90.0}, "b": {"Adam": 0.001, "Muon": 0.5, "Iso": 140.0}}
    fig = ch12.cost(percent)
    ax = fig.axes[0]
    assert not ax.patches, "no bars on a log axis"
    points = [line for line in ax.get_lines() if line.get_marker() not in (None, "None", "")]
    assert sorted(x for line in points for x in line.get_xdata()) == sorted([0.01, 125.0, 90.0, 0.001, 0.5, 140.0])
    assert [t.get_text() for t in ax.get_yticklabels()] == ["Adam", "Muon", "Iso"]
    assert ax.get_xscale() == "log"
    with pytest.raises(ValueError, match="at least one layer"):
        ch12.cost({})


def test_exponent_family_keeps_its_caption_promises_and_readable_text():
    """What tests/book/test_captions.py checks for Parts I and II, here for Chapter 12's explorable."""
    from matplotlib.text import Text

    from isolab.book.explorable import MIN_MAIN_VALUES

    assert ch12.EXPLORABLES == (ch12.exponent_family,)
    explorable = ch12.exponent_family()
    assert len(explorable.main_slider.values) >= MIN_MAIN_VALUES and explorable.promises
    assert not explorable.broken_promises()
    fig = explorable.render(strict=True)
    small = [t.get_text() for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip() and t.get_fontsize() < 10]
    assert not small, small
    with pytest.raises(ValueError, match="both X and G"):
        ch12.exponent_family(X=ch12.chapter_batch()[0])


def test_hero_and_cost_have_no_text_under_ten_points():
    from matplotlib.text import Text

    for fig in (ch12.hero(), ch12.cost({"a": {"Muon": 1.0, "SOAP": 2.0}})):
        fig.canvas.draw()
        small = [t.get_text() for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip() and t.get_fontsize() < 10]
        assert not small, small


def test_the_saved_family_experiment_is_well_formed_and_its_first_steps_rerun_on_any_cpu():
    """results/ch12_family.npz (scripts/ch12_family.py): every member ran the same 24 trials
    on the same seeds, plainly and under three jitters; the saved held-out curve of a member
    whose early steps do not amplify rounding (IsoAdam) reruns to 1e-4 over 10 steps (float64)
    under a jitter, and a learning rate 5 % off does not."""
    import torch

    from isolab.book import family
    from isolab.book.engine import sweep
    from isolab.book.figures.saved import saved_result
    from isolab.book.seeding import jittered

    runs, curves = family.load(saved_result("ch12_family.npz"))
    assert set(runs) == {"plain", "jitter1", "jitter2", "jitter3"} and set(curves) == set(family.FAMILY)
    for run in runs.values():
        assert set(run) == set(family.FAMILY)
        for label, v in run.items():
            t = v["tuned"]
            assert len(t["trials"]) == t["budget"] == 24 and len(v["scores"]) == len(family.HELD_OUT), label
            assert t["tuning_seeds"] == list(family.TUNING_SEEDS) and t["schedule"] == family.SCHEDULE
    t = runs["plain"]["IsoAdam"]["tuned"]
    hyper = {k: tuple(v) if isinstance(v, list) else v for k, v in t["hyper"].items()}

    def rerun(lr):
        return sweep(family.problem(), "isoadam", [lr], 10, seeds=family.HELD_OUT, hyper=hyper, dtype=torch.float64,
                     schedule=family.SCHEDULE, schedule_steps=family.STEPS, progress=False).loss[:, 0]

    saved = curves["IsoAdam"][:, :11]
    with jittered(1e-6, 2):
        assert np.max(np.abs(rerun(t["lr"]) / saved - 1)) < 1e-4
    assert np.max(np.abs(rerun(t["lr"] * 1.05) / saved - 1)) > 1e-3
