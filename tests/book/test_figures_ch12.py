"""Chapter 12's figures: the training figure (rows ordered by the median, both sets of seeds, every
optimizer in its look), the centerpiece (the schedule's end), the exponent family, the saved
experiment under protocol v3."""

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
    fresh = {k: median_interval(np.asarray(v) * 1.1) for k, v in scores.items()}
    fig = ch12.family_training(curves, [scores, scores], [intervals, fresh])
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
    assert {"SGD", "Shampoo*", "Iso", "K-FAC"} <= labels   # * Shampoo only in the noise regime (§12.5)
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

    assert ch12.EXPLORABLES == (ch12.schedule_end, ch12.exponent_family)
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


def test_the_saved_family_experiment_follows_the_protocol_and_its_first_steps_rerun_on_any_cpu():
    """results/ch12_family.npz (scripts/ch12_family.py): every member ran the protocol's 54 + 12
    trials over exactly its knobs (isolab.book.engine.tuning.check_entry), its range from its
    pilot, the library's defaults but no weight decay, on the protocol's seeds, with held-out and
    fresh scores and their divergences; the saved held-out curve of a member whose early steps do
    not amplify rounding (IsoAdam) reruns to 1e-4 over 10 steps (float64) under a jitter, and a
    learning rate 5 % off does not."""
    import torch

    from isolab.book import family
    from isolab.book.engine import sweep
    from isolab.book.engine.defaults import library_defaults
    from isolab.book.engine.tuning import PROTOCOL, TUNED_KNOBS, check_entry
    from isolab.book.figures.saved import saved_result
    from isolab.book.seeding import jittered

    data = family.load(saved_result("ch12_family.npz"))
    runs, curves = data["runs"], data["curves"]
    assert set(runs) == set(curves) == set(family.FAMILY)
    for label, v in runs.items():
        name, t = family.FAMILY[label], v["tuned"]
        mom, damp = TUNED_KNOBS[name]
        keys = ["betas" if mom == "beta1" else "momentum"] + ([damp] if damp else [])
        combos = {tuple((k, tuple(x["hyper"][k]) if k == "betas" else x["hyper"][k]) for k in keys)
                  for x in t["trials"]}
        check_entry(name, [dict(c) for c in combos], len(t["trials"]))
        assert t["lr_range"] == list(v["pilot"]["0.0"]["range"]) and t["tuning_seeds"] == list(PROTOCOL["tuning_seeds"])
        assert t["schedule"] == family.SCHEDULE and (t["interior"] or label == "K-FAC"), label  # K-FAC: the top edge, stated
        assert t["hyper"]["weight_decay"] == 0.0
        for k, value in library_defaults(name).items():
            if k not in keys and k != "weight_decay":
                assert (tuple(t["hyper"][k]) if isinstance(value, tuple) else t["hyper"][k]) == value, (label, k)
        for which, seeds in (("heldout", family.HELD_OUT), ("fresh", family.FRESH)):
            assert len(v[which]["scores"]) == len(seeds) == 20
            assert v[which]["diverged"] == int(np.isinf(v[which]["scores"]).sum())
    for label in ("Muon", "Iso"):
        s = data["schedule"][label]
        assert s["loss"].shape == (len(family.FLOORS), family.STEPS + 1) and s["final"].shape == (9, 20)
    t = runs["IsoAdam"]["tuned"]
    hyper = {k: tuple(v) if isinstance(v, list) else v for k, v in t["hyper"].items()}

    def rerun(lr):
        return sweep(family.problem(), "isoadam", [lr], 10, seeds=family.HELD_OUT, hyper=hyper, dtype=torch.float64,
                     schedule=family.SCHEDULE, schedule_steps=family.STEPS, progress=False).loss[:, 0]

    saved = curves["IsoAdam"][:, :11]
    with jittered(1e-6, 2):
        assert np.max(np.abs(rerun(t["lr"]) / saved - 1)) < 1e-4
    assert np.max(np.abs(rerun(t["lr"] * 1.05) / saved - 1)) > 1e-3


def test_the_centerpiece_keeps_its_promises_and_its_schedule_runs_rerun():
    """The schedule's end: the promises hold over the grid, no text is clipped, and one saved
    schedule run (Muon, the decay to 0.1) is what the engine computes now (float64)."""
    import torch

    from isolab.book import family
    from isolab.book.engine import sweep
    from isolab.book.figures.saved import saved_result

    data = family.load(saved_result("ch12_family.npz"))
    explorable = ch12.schedule_end(data)
    assert explorable.main == "floor" and not explorable.broken_promises()
    assert not explorable.clipped_text_over_grid()
    t = data["runs"]["Muon"]["tuned"]
    hyper = {k: tuple(v) if isinstance(v, list) else v for k, v in t["hyper"].items()}
    i = family.FLOORS.index(0.1)
    s = sweep(family.problem(), "muon", [t["lr"]], family.STEPS, seeds=family.HELD_OUT, hyper=hyper,
              dtype=torch.float64, schedule={**family.SCHEDULE, "floor": 0.1}, expected_loss_from=0, progress=False)
    np.testing.assert_allclose(np.nanmedian(s.expected_loss[:, 0], axis=0)[:50], data["schedule"]["Muon"]["loss"][i][:50],
                               rtol=1e-6)
