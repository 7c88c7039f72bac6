"""Chapter 5's figure modules: every figure function returns a figure, the stored runs are
what the training computes, the centerpiece keeps its caption's promises over its whole
grid on a fixed axis, and the promises (and the left panel's verdict) can fail."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

from isolab.book import noise_dynamics as nd
from isolab.book.engine import sweep
from isolab.book.explorable import MIN_MAIN_VALUES
from isolab.book.figures import ch05, ch05_runs

pytestmark = pytest.mark.usefixtures("book_figures")


def test_static_figures_are_figures():
    assert isinstance(ch05.hero(), Figure)
    assert isinstance(ch05.phase_plane(), Figure)
    logs = ch05.scalar_runs(0.5, 100, runs=2000)
    assert isinstance(ch05.scalar_noise(logs, 1.53), Figure)
    norms = torch.exp(torch.linspace(0, 1, 51)).repeat(4, 5, 1)
    rates = np.zeros((4, 5))
    assert isinstance(ch05.weight_decay_figure(norms, np.logspace(-2, 0, 5), 1.0, rates), Figure)
    assert isinstance(ch05.comparison(ch05.comparison_runs()), Figure)


def test_modules_stay_short():
    """BOOK_STYLE: a chapter's figure module stays under 600 lines (ch05.py was split)."""
    for name in ("ch05", "ch05_runs", "ch05_sections"):
        path = Path(ch05.__file__).with_name(f"{name}.py")
        assert len(path.read_text().splitlines()) < 600, name


def test_hero_numbers():
    """The hero's message: SGD's two layers grow exponentially at lr 0.1, one layer and
    Adam and Iso with two do not (a random walk's log-log slope)."""
    sgd2 = ch05.run_summary(2, "SGD", 0.0, 0.1)
    assert sgd2["exponential"] and sgd2["rate"] > 0.05
    for opt, depth in (("SGD", 1), ("Adam", 2), ("Iso", 2)):
        s = ch05.run_summary(depth, opt, 0.0, 0.1)
        assert not s["exponential"] and 0.3 < s["slope"] < 0.8, (opt, depth, s)
    # the caption: Adam and Iso grow only about tenfold at the hero's setting, SGD by 10^11
    i = ch05.EXPLORE_LRS.index(ch05.HERO_LR)
    assert max(ch05.end_growth(2, name, 0.0)[i] for name in ("Adam", "Iso")) < math.log10(15)
    assert ch05.end_growth(2, "SGD", 0.0)[i] > 8


def test_stored_runs_are_the_training():
    """The file written by scripts/ch05_explore_runs.py holds what compute_run trains."""
    assert ch05.RESULTS.exists(), "run scripts/ch05_explore_runs.py"
    for setting in [(2, "SGD", 0.0), (1, "Adam", 0.3), (2, "Iso", 0.0)]:
        stored = ch05_runs._stored()[ch05.run_key(*setting)]
        fresh = ch05.encode(ch05.compute_run(*setting))
        np.testing.assert_array_equal(stored, fresh)
    np.testing.assert_array_equal(ch05_runs._stored()["compare_sgd_k2"],
                                  ch05.encode(ch05.compute_comparison("sgd", 2)))


def test_describe_prints_a_rate_only_where_growth_is_exponential():
    walk = ch05.run_summary(1, "SGD", 0.0, 0.1)
    assert walk["rate"] > 0.002, "the misleading 'rate' a random walk still has"
    assert "rate" not in ch05.describe(1, "SGD", 0.0, 0.1)
    assert "rate +0.06" in ch05.describe(2, "SGD", 0.0, 0.1)
    assert "faster than exponential" in ch05.describe(4, "SGD", 0.0, 0.1)
    assert "exponential decay" in ch05.describe(4, "Adam", 0.3, 0.1)


def test_left_panel_verdict():
    """The left panel's title names what SGD does: a rate only where the growth (or a steady
    collapse) is exponential, an overflow where the run overflowed."""
    assert ch05.sgd_verdict(1, 0.0, 0.1).startswith("SGD: no exponential trend")
    assert "grows exponentially, +0.06" in ch05.sgd_verdict(2, 0.0, 0.1)
    assert "overflows float64" in ch05.sgd_verdict(4, 0.0, 0.01)
    assert "shrinks exponentially, -0.00" in ch05.sgd_verdict(2, 0.3, 0.01)
    for lr in ch05.EXPLORE_LRS:   # the things to try: a rate from lr ≈ 0.03 on, not below
        verdict = ch05.sgd_verdict(2, 0.0, lr)
        assert ("exponentially" in verdict or "overflows" in verdict) == (lr > 0.03)
        assert ch05.run_summary(4, "SGD", 0.0, lr)["last"] < 71


def test_explorable_main_slider_and_promises():
    e = ch05.growth_explorable()
    assert e.main == "lr" and len(e.main_slider.values) >= MIN_MAIN_VALUES
    assert e.narrow == "panels"
    assert e.broken_promises() == []


def test_axes_are_fixed_and_show_the_contrast():
    """Every frame draws both panels on the same fixed y axis (no rescaling per optimizer,
    which hid the contrast), and on it, with two layers, SGD ends at least eight decades
    above Adam and Iso from lr 0.1 on."""
    e = ch05.growth_explorable()
    for lr, depth, wd in itertools.product(ch05.EXPLORE_LRS[::4], ch05.DEPTHS, ch05.DECAYS):
        fig = e.render(strict=True, lr=lr, depth=depth, weight_decay=wd)
        assert [tuple(ax.get_ylim()) for ax in fig.axes] == [ch05.Y_LIM, ch05.Y_LIM]
    for lr in ch05.EXPLORE_LRS[4:]:
        i = ch05.EXPLORE_LRS.index(lr)
        sgd = ch05.end_growth(2, "SGD", 0.0)[i]
        assert all(sgd - ch05.end_growth(2, name, 0.0)[i] > 8 for name in ("Adam", "Iso"))


def test_promises_can_fail():
    """Each predicate rejects what its sentence rules out."""
    rising, exponential, bounded, split, settles, collapse = (p.holds for p in ch05.growth_explorable().promises)
    assert not rising([1.0, 0.5, None])
    assert not exponential([(0.01, False), (0.0316, False)])
    assert not bounded([1.0, 2.5])                                  # a factor above 200
    assert not split([(0.01, -0.01), (0.02, +0.01)])               # grows below eta* = 0.037
    assert not settles([0.1, 0.7])
    assert not collapse([(0.1, -1.0)])
    # SGD's two layers break the bound that Adam and Iso keep
    assert not bounded([float(ch05.log_growth(2, "SGD", 0.0)[:, i].max()) for i in range(4, 6)])


def test_adamw_collapse_rate_law():
    """Section 5.7: four layers of AdamW (λ = 0.3) shrink at max(log(1 − ηλ), log β1) per
    step for η >= 0.1, each seed within 5 %: pure decay at η = 0.1 and 0.32, the momentum's
    log 0.9 at η = 0.56 and 1 (not log 0.7 = −0.357 at η = 1)."""
    late = nd.growth_rate(torch.from_numpy(ch05.explore_run(4, "Adam", 0.3)), start=200)
    for i, lr in enumerate(ch05.EXPLORE_LRS):
        if lr < 0.1:
            continue
        law = max(math.log(1 - 0.3 * lr), math.log(0.9))
        assert torch.allclose(late[:, i], torch.full((4,), law, dtype=late.dtype), rtol=0.05), (lr, late[:, i], law)
    assert abs(late[:, -1].mean().item() - math.log(0.7)) > 0.2


def test_weight_decay_is_a_rescaled_learning_rate():
    """SGD with coupled weight decay on the pure noise problem: W_t = (1 - eta lam)^t V_t,
    V the run without decay at eta / (1 - eta lam)."""
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
