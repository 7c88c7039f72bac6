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
    assert t.score == min(s for _, _, s in t.trials[-12:])
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
