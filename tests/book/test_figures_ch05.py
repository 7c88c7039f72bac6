"""Chapter 5's figure module: every figure function returns a figure, the stored runs are
what the training computes, the explorable keeps its caption's promises over its whole
grid, and the promises (and the title's rule for printing a rate) can fail."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

from isolab.book import noise_dynamics as nd
from isolab.book.engine import sweep
from isolab.book.explorable import MIN_MAIN_VALUES
from isolab.book.figures import ch05


pytestmark = pytest.mark.usefixtures("book_figures")


def test_static_figures_are_figures():
    assert isinstance(ch05.hero(), Figure)
    assert isinstance(ch05.phase_plane(), Figure)
    logs = ch05.scalar_runs(0.5, 100, runs=2000)
    assert isinstance(ch05.scalar_noise(logs, 1.53), Figure)
    norms = torch.exp(torch.linspace(0, 1, 51)).repeat(4, 5, 1)
    rates = np.zeros((4, 5))
    assert isinstance(ch05.weight_decay_figure(norms, np.logspace(-2, 0, 5), 1.0, rates, np.zeros(5)), Figure)


def test_hero_numbers():
    """The hero's message: SGD's two layers grow exponentially at lr 0.1, one layer and
    Adam and Iso with two do not (a random walk's log-log slope)."""
    sgd2 = ch05.run_summary(2, "SGD", 0.0, 0.1)
    assert sgd2["exponential"] and sgd2["rate"] > 0.05
    for opt, depth in (("SGD", 1), ("Adam", 2), ("Iso", 2)):
        s = ch05.run_summary(depth, opt, 0.0, 0.1)
        assert not s["exponential"] and 0.3 < s["slope"] < 0.8, (opt, depth, s)


def test_stored_runs_are_the_training():
    """The file written by scripts/ch05_explore_runs.py holds what compute_run trains."""
    assert ch05.RESULTS.exists(), "run scripts/ch05_explore_runs.py"
    for setting in [(2, "SGD", 0.0), (1, "Adam", 0.3), (2, "Iso", 0.0)]:
        stored = ch05._stored()[ch05.run_key(*setting)]
        fresh = ch05.encode(ch05.compute_run(*setting))
        np.testing.assert_array_equal(stored, fresh)
    np.testing.assert_array_equal(ch05._stored()["compare_sgd_k2"], ch05.encode(ch05.compute_comparison("sgd", 2)))


def test_title_prints_a_rate_only_where_growth_is_exponential():
    # the old title printed an exponential rate for every run, a one-layer random walk included
    walk = ch05.run_summary(1, "SGD", 0.0, 0.1)
    assert walk["rate"] > 0.002, "the misleading 'rate' a random walk still has"
    assert "rate" not in ch05.describe(1, "SGD", 0.0, 0.1)
    assert "rate +0.06" in ch05.describe(2, "SGD", 0.0, 0.1)
    assert "faster than exponential" in ch05.describe(4, "SGD", 0.0, 0.1)
    assert "exponential decay" in ch05.describe(4, "Adam", 0.3, 0.1)   # AdamW's collapse, all four seeds


def test_explorable_main_slider_and_promises():
    e = ch05.pure_noise_explorable()
    assert e.main == "lr" and len(e.main_slider.values) >= MIN_MAIN_VALUES
    assert e.broken_promises() == []


def test_promises_can_fail():
    """Each predicate rejects what the caption rules out."""
    rising, split, slow = (p.holds for p in ch05.pure_noise_explorable().promises)
    assert not rising([0.01, 0.005, None])
    assert not split([(0.01, -0.01), (0.02, +0.01)])          # grows below eta* = 0.037
    # SGD's two layers fail the random-walk promise that Adam and Iso keep
    sgd = [ch05.run_summary(2, "SGD", 0.0, lr)["slope"] for lr in ch05.EXPLORE_LRS[:5]]
    assert not slow(sgd)


def test_weight_decay_is_a_rescaled_learning_rate():
    """SGD with coupled weight decay on the pure noise problem: W_t = (1 - eta lam)^t V_t,
    V the run without decay at eta / (1 - eta lam) (the chapter's explanation of the
    rate at eta = 0.1)."""
    lr, lam, steps = 0.1, 1.0, 300
    with_decay = sweep(nd.SharedPureNoise(16, 2, 1), "sgd", [lr], steps, seeds=(0,), hyper={"weight_decay": lam},
                       dtype=torch.float64, progress=False)
    plain = sweep(nd.SharedPureNoise(16, 2, 1), "sgd", [lr / (1 - lr * lam)], steps, seeds=(0,), dtype=torch.float64,
                  progress=False)
    a = nd.total_norm(with_decay.weight_norm)[0, 0]
    b = nd.total_norm(plain.weight_norm)[0, 0] * (1 - lr * lam) ** torch.arange(steps + 1.0, dtype=torch.float64)
    assert torch.allclose(a, b, rtol=1e-10, atol=0)


def test_lyapunov_threshold_and_scalar_runs():
    assert ch05.lyapunov_threshold() == pytest.approx(1.53, abs=0.005)
    assert ch05.lyapunov([0.5])[0] < 0 < ch05.lyapunov([2.0])[0]
    logs = ch05.scalar_runs(0.5, 100, runs=5000)
    assert np.median(logs[100]) < np.median(logs[10]) < math.log10(math.hypot(1.0, 0.3))


def test_title_names_a_steady_collapse():
    """SGD with weight decay below η* collapses exponentially, slowly at lr 0.01 (log-log
    slope above -1 over 400 steps): the title says so and prints the rate, instead of "no
    exponential trend"; a run that settles (Iso with weight decay) still gets the slope."""
    assert "shrinks exponentially, rate -0.00" in ch05.describe(2, "SGD", 0.3, 0.01)
    assert "no exponential trend" in ch05.describe(2, "Iso", 0.3, 0.1)
    assert "no exponential trend" in ch05.describe(2, "Adam", 0.0, 0.1)


def test_y_axis_fits_each_optimizer():
    """The y axis is scaled per optimizer, depth and weight decay: Adam's and Iso's runs
    without decay fill most of a few decades instead of a sliver of fifteen, and every
    finite seed at every learning rate stays inside it."""
    import itertools

    for depth, opt, wd in itertools.product((2, 4), ch05.OPTIMIZERS, ch05.WEIGHT_DECAYS):
        lo, hi = ch05.y_range(depth, opt, wd)
        _, low, high = ch05._log_curves(depth, opt, wd)
        finite = np.isfinite(low) & np.isfinite(high)
        assert lo <= low[finite].min() and high[finite].max() <= hi or hi == ch05.Y_CEILING
        if opt != "SGD" and not wd:
            assert hi - lo < 4 and (high[finite].max() - low[finite].min()) / (hi - lo) > 0.6


def test_things_to_try_of_section_5_9():
    """The section's things to try, over the explorable's grid: with SGD and two layers the
    title reports a rate from lr ≈ 0.03 on and not below; four layers overflow within
    seventy steps at every lr; with weight decay the title reports a collapse below η*
    (except at 0.0316, next to it) and a growth above it."""
    star = 2 * 0.3 / (0.3**2 + 16)
    for lr in ch05.EXPLORE_LRS:
        plain, decayed = ch05.describe(2, "SGD", 0.0, lr), ch05.describe(2, "SGD", 0.3, lr)
        assert ("rate" in plain) == (lr > 0.03)
        assert ch05.run_summary(4, "SGD", 0.0, lr)["last"] < 71
        if lr < 0.03:
            assert "shrinks exponentially" in decayed
        elif lr > star:
            assert "exponential growth" in decayed
