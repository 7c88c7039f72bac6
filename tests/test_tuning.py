"""The tuning protocol: one budget for every optimizer, edges avoided, held-out seeds, intervals."""

import math

import numpy as np
import pytest
import torch

from isolab.book.engine import DEFAULTS, bootstrap_interval, evaluate, sweep, trial_grid, tune
from isolab.book.engine.tuning import scores
from isolab.book.problems import DeepLinearRegression

SMALL = DeepLinearRegression(n=6, depth=2, batch=12)


def test_the_budget_is_shared_between_knobs_and_learning_rates():
    alone = trial_grid({}, 24, (1e-3, 1e0))
    with_momentum = trial_grid({"momentum": [0.0, 0.9, 0.95]}, 24, (1e-3, 1e0))
    assert len(alone) == len(with_momentum) == 24
    assert len({t.lr for t in alone}) == 24 and len({t.lr for t in with_momentum}) == 8
    assert {t.hyper["momentum"] for t in with_momentum} == {0.0, 0.9, 0.95}
    uneven = trial_grid({"momentum": [0.0, 0.9], "nesterov": [False, True], "weight_decay": [0.0, 1e-2]}, 26, (1e-3, 1))
    assert len(uneven) == 24, "never more trials than the budget"
    assert min(t.lr for t in alone) == pytest.approx(1e-3) and max(t.lr for t in alone) == pytest.approx(1.0)


@pytest.mark.parametrize("kwargs,match", [
    (dict(knobs={"momentum": [0, 0.5, 0.9], "nesterov": [False, True]}, budget=12), "leaves 2 learning rates"),
    (dict(knobs={}, budget=2), "budget must be an int >= 3, got 2"),
    (dict(knobs={}, budget=12, lr_range=(1.0, 0.1)), "0 < low < high, got \\(1.0, 0.1\\)"),
    (dict(knobs={"momentum": []}, budget=12), "knob 'momentum' has no values"),
])
def test_trial_grid_errors_name_what_was_passed(kwargs, match):
    kwargs = {"lr_range": (1e-3, 1.0), **kwargs}
    with pytest.raises(ValueError, match=match):
        trial_grid(**kwargs)


def test_tune_picks_the_best_trial_inside_its_grid_and_names_every_hyperparameter():
    t = tune(SMALL, "sgd", 30, budget=12, lr_range=(1e-3, 3.0), knobs={"momentum": [0.0, 0.9]},
             tuning_seeds=(0, 1), dtype=torch.float64)
    assert set(t.hyper) == set(DEFAULTS["sgd"]), "every hyperparameter by name"
    assert len(t.trials) == 12 * (t.shifts + 1)
    assert t.score == min(s for _, _, s in t.trials)           # every trial ran all 30 steps: the best of all
    assert t.interior and t.lr not in (t.lr_range[0], t.lr_range[1])
    # the choice is the median over the tuning seeds of the engine's own scores
    s = sweep(SMALL, "sgd", [t.lr], 30, seeds=(0, 1), hyper=t.hyper, dtype=torch.float64, progress=False)
    assert np.median(scores(s, "final_loss")[:, 0]) == pytest.approx(t.score, rel=1e-12)
    assert t.as_dict()["hyper"]["momentum"] in (0.0, 0.9)


def test_a_best_rate_at_the_edge_moves_the_grid():
    low = tune(SMALL, "sgd", 20, budget=6, lr_range=(1e-5, 1e-4), max_shifts=0, dtype=torch.float64)
    assert not low.interior and low.lr == pytest.approx(1e-4), "too small a range: the best rate is its top"
    moved = tune(SMALL, "sgd", 20, budget=6, lr_range=(1e-5, 1e-4), max_shifts=6, dtype=torch.float64)
    assert moved.shifts >= 1 and moved.lr > 1e-4
    assert len(moved.trials) == 6 * (moved.shifts + 1), "every shift costs the same budget again, recorded"


def test_the_kept_setting_is_the_best_full_length_trial_of_every_search(monkeypatch):
    """Successive halving on a moved grid can drop the earlier winner in its first rung
    (short runs favour larger rates here); the setting kept is still the best one that ran
    all the steps, and it is interior to the rates searched."""
    from isolab.book.engine import tuning

    top = 1e-2  # the long runs' optimum, the first grid's top edge; short runs prefer 10x more

    def fake_run(problem, optimizer, hyper, lrs, steps, seeds, metric, threshold, sweep_kw):
        best = math.log10(top) + (1.0 if steps < 81 else 0.0)
        return np.array([[(math.log10(lr) - best) ** 2 for lr in lrs] for _ in seeds])

    monkeypatch.setattr(tuning, "_run", fake_run)
    t = tune(SMALL, "sgd", 81, budget=9, lr_range=(1e-4, top), halving=3, rungs=3, max_shifts=1)
    last = [r for r in t.rungs if r["steps"] == 81]
    assert len(last) == 2 and t.shifts == 1
    first_best = min(last[0]["trials"], key=lambda x: x[2])
    moved_best = min(last[1]["trials"], key=lambda x: x[2])
    assert first_best[1] == pytest.approx(top) and moved_best[2] > first_best[2]   # the move made it worse
    assert t.lr == pytest.approx(top) and t.score == pytest.approx(0.0, abs=1e-24)
    assert t.interior                                                               # inside the two grids


def test_iterations_metric_ranks_slow_lanes_and_needs_a_threshold():
    with pytest.raises(ValueError, match="needs a threshold"):
        tune(SMALL, "adam", 20, budget=6, lr_range=(1e-3, 1e-1), metric="iterations")
    t = tune(SMALL, "adam", 200, budget=6, lr_range=(1e-3, 3e-1), metric="iterations", threshold=0.1,
             max_shifts=3, dtype=torch.float64)
    assert math.isfinite(t.score) and t.score <= 200


def test_held_out_seeds_are_enforced_and_scored():
    t = tune(SMALL, "adam", 25, budget=6, lr_range=(1e-3, 3e-1), tuning_seeds=(0, 1), dtype=torch.float64)
    with pytest.raises(ValueError, match=r"seeds \[1\] were used to tune adam"):
        evaluate(SMALL, t, seeds=(1, 2, 3))
    held = evaluate(SMALL, t, seeds=(2, 3, 4), dtype=torch.float64)
    assert held.shape == (3,) and np.isfinite(held).all()
    direct = sweep(SMALL, "adam", [t.lr], 25, seeds=(2, 3, 4), hyper=t.hyper, dtype=torch.float64, progress=False)
    np.testing.assert_array_equal(held, direct.final_loss()[:, 0])


def test_knob_names_are_checked_before_any_training():
    with pytest.raises(ValueError, match="unknown hyperparameter 'momentum'"):
        tune(SMALL, "adam", 5, budget=6, lr_range=(1e-3, 1e-1), knobs={"momentum": [0.0, 0.9]})
    with pytest.raises(ValueError, match="both tuned"):
        tune(SMALL, "sgd", 5, budget=6, lr_range=(1e-3, 1e-1), knobs={"momentum": [0.0]}, fixed={"momentum": 0.9})


def test_bootstrap_interval_is_reproducible_and_brackets_the_median():
    x = [3.1, 2.9, 3.4, 3.0, 5.2]
    med, lo, hi = bootstrap_interval(x)
    assert med == 3.1 and lo <= med <= hi and (lo, hi) == bootstrap_interval(x)[1:]
    assert lo >= min(x) and hi <= max(x)
    tight = bootstrap_interval([3.0, 3.0, 3.0, 3.0, 3.01])
    assert tight[2] - tight[1] < hi - lo
    with_divergence = bootstrap_interval([1.0, 1.1, math.inf, 1.2, 1.05])
    assert with_divergence[0] == 1.1 and math.isinf(with_divergence[2]), "a diverged seed is the worst score"
    with pytest.raises(ValueError, match="at least 2"):
        bootstrap_interval([1.0])


def test_rung_lengths_of_successive_halving():
    from isolab.book.engine.tuning import rung_steps

    assert rung_steps(900, None, 3) == [900]
    assert rung_steps(900, 3, 3) == [100, 300, 900]
    assert rung_steps(10, 3, 3) == [2, 4, 10]
    assert rung_steps(2, 3, 4) == [1, 2], "repeated lengths are merged"


def test_successive_halving_keeps_the_best_third_and_chooses_among_the_survivors():
    t = tune(SMALL, "sgd", 27, budget=18, lr_range=(1e-3, 3.0), knobs={"momentum": [0.0, 0.9]},
             halving=3, rungs=3, max_shifts=0, dtype=torch.float64)
    assert [r["steps"] for r in t.rungs] == [3, 9, 27]
    assert [len(r["trials"]) - r["backfilled"] for r in t.rungs] == [18, 6, 2], "promoted: the best third"
    assert len(t.trials) == 18, "every trial recorded once, with its score at the last rung it reached"
    assert t.rungs[1]["backfilled"] >= 1, "here a promoted rate blows up at 9 steps and is replaced"
    for before, after in zip(t.rungs, t.rungs[1:]):
        # the survivors are the best third of their rung (by the tuning seeds' median score)
        ranked = sorted(s for _, _, s in before["trials"])
        kept = [before["trials"][i] for i in before["kept"]]
        assert sorted(s for _, _, s in kept) == ranked[:len(kept)]
        assert [(h, lr) for h, lr, _ in kept] == [(h, lr) for h, lr, _ in after["trials"][:len(kept)]]
    final = t.rungs[-1]["trials"]
    assert t.score == min(s for _, _, s in final) and t.halving == 3
    # a survivor's score at full length is a plain 27-step run of it
    s = sweep(SMALL, "sgd", [t.lr], 27, seeds=(0, 1), hyper=t.hyper, dtype=torch.float64, progress=False)
    assert np.median(scores(s, "final_loss")[:, 0]) == pytest.approx(t.score, rel=1e-12)
    assert t.as_dict()["rungs"][0]["steps"] == 3


@pytest.mark.parametrize("kwargs,match", [(dict(halving=1), "halving"), (dict(halving=3, rungs=1), "rungs")])
def test_halving_arguments_are_checked(kwargs, match):
    with pytest.raises(ValueError, match=match):
        tune(SMALL, "sgd", 9, budget=6, lr_range=(1e-3, 1.0), **kwargs)


def test_knobs_may_be_listed_as_combinations_that_go_together():
    combos = [{"momentum": 0.0, "nesterov": False}, {"momentum": 0.9, "nesterov": True}]
    grid = trial_grid(combos, 12, (1e-3, 1.0))
    assert len(grid) == 12 and [t.hyper for t in grid[::6]] == combos
    t = tune(SMALL, "sgd", 10, budget=6, lr_range=(1e-3, 1.0), knobs=combos, max_shifts=0, dtype=torch.float64)
    assert {(h["momentum"], h["nesterov"]) for h, _, _ in t.trials} == {(0.0, False), (0.9, True)}
    with pytest.raises(ValueError, match="same hyperparameters"):
        trial_grid([{"momentum": 0.0}, {"nesterov": True}], 12, (1e-3, 1.0))
    with pytest.raises(ValueError, match="nesterov=True needs momentum"):  # checked before any training
        tune(SMALL, "sgd", 10, budget=6, lr_range=(1e-3, 1.0), knobs={"momentum": [0.9, 0.0], "nesterov": [True]})


def test_a_grid_where_every_trial_diverges_moves_below_itself():
    with pytest.raises(RuntimeError, match="every trial over lr"):
        tune(SMALL, "sgd", 20, budget=3, lr_range=(1e2, 1e3), max_shifts=0, dtype=torch.float64)
    t = tune(SMALL, "sgd", 20, budget=3, lr_range=(1e2, 1e3), max_shifts=4, dtype=torch.float64)
    assert t.shifts >= 1 and math.isfinite(t.score) and t.lr < 1e2


def test_a_promoted_rate_that_diverges_later_is_replaced_by_the_next_best(monkeypatch):
    """Successive halving at the edge of stability: the largest rates win the short rung and
    blow up in the long one; the next best of the short rung take their places (back-fill),
    so the search ends inside the stable range instead of declaring every trial diverged."""
    from isolab.book.engine import tuning

    calls = []

    def fake_run(problem, optimizer, hyper, lrs, steps, seeds, metric, threshold, sweep_kw):
        calls.append((steps, list(lrs)))
        lrs = np.asarray(lrs)
        # fast at large rates; above 0.1 unstable once a run is longer than 30 steps
        score = np.where((lrs > 0.1) & (steps > 30), np.inf, 1.0 / lrs)
        return np.tile(score, (len(seeds), 1))

    monkeypatch.setattr(tuning, "_run", fake_run)
    t = tune(SMALL, "sgd", 90, budget=9, lr_range=(1e-3, 1.0), halving=3, rungs=2, max_shifts=0)
    short, long = t.rungs
    assert short["steps"] == 30 and long["steps"] == 90
    assert [x[1] for x in long["trials"][:3]] == [short["trials"][i][1] for i in short["kept"]]
    assert long["backfilled"] >= 1, "the rates that blew up were replaced"
    assert t.lr <= 0.1 and math.isfinite(t.score) and t.interior
    assert len(t.trials) == 9 and sum(len(r["trials"]) for r in t.rungs) == 9 + 3 + long["backfilled"]
    assert {lr for _, lr, s in t.trials if s == math.inf} == {lr for _, lr, s in long["trials"] if s == math.inf}
