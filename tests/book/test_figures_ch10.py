"""Chapter 10's figures and its reading of the saved protocol results (protocol 3.1).

- the centerpiece (:func:`isolab.book.figures.ch10.edges`) keeps its promises over its whole
  grid, the promises could fail, its text is never clipped, and the saved grid is what
  ``scripts/explorable_sweeps.py`` computes (one setting retrained here);
- ``ch10_protocol`` reads the saved results set by set, ranks by the protocol's rule, states
  the paper's claims with the verdict the chapter states, treats a threshold inside the
  grid's resolution as unresolved, and counts divergences per set.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

from isolab.book.engine.intervals import Interval
from isolab.book.explorable import MIN_MAIN_VALUES
from isolab.book.figures import ch10
from isolab.book.figures import ch10_protocol as P
from isolab.book.figures.saved import saved_result
from isolab.book.results import load
from scripts_loader import load_script

script = load_script("explorable_sweeps")


@pytest.fixture(scope="module")
def grid():
    return ch10.EdgeGrid(saved_result("sweeps_explorable.npz"))


def test_centerpiece_main_slider_promises_and_text(grid):
    e = ch10.edges(grid)
    assert e.main == "kappa" and len(e.main_slider.values) >= MIN_MAIN_VALUES and e.narrow == "panels"
    assert not e.broken_promises()
    assert not e.clipped_text_over_grid()
    fig = e.render(strict=True, kappa=grid.kappas[-1], scale=ch10.SCALE_LABELS["floor"], axes="aligned")
    assert isinstance(fig, Figure)


def test_the_promises_could_fail(grid):
    """The edge's promises are about SGD: with Iso's edges in SGD's place (flat) the product
    with the largest eigenvalue would grow by far more than 5 where lambda_max is 10^4."""
    iso = [grid.edge("iso", k, "floor", 45.0) * grid.largest_eigenvalue(k, "floor") for k in grid.kappas]
    assert max(iso) / min(iso) > 1000
    sgd = [grid.edge("sgd", k, "floor", 45.0) for k in grid.kappas]
    assert sgd[0] / sgd[-1] > 1000                     # it does fall, a lot


def test_the_saved_grid_is_the_scripts_grid(grid):
    assert grid.kappas == list(script.KAPPAS) and grid.scales == list(script.SCALES)
    assert grid.names == list(script.OPTIMIZERS) and grid.meta["steps"] == script.STEPS
    for name in script.OPTIMIZERS:
        assert grid.meta["hyper"][name]["weight_decay"] == 0.0
    lam = [grid.largest_eigenvalue(k, "floor") for k in grid.kappas]
    np.testing.assert_allclose(lam, grid.kappas, rtol=1e-9)   # the smallest eigenvalue 1: the largest is kappa


@pytest.mark.parametrize("name, kappa, scale, angle", [("sgd", 1000.0, "floor", 45.0), ("iso", 100.0, "trace", 0.0)])
def test_a_setting_retrained_equals_the_saved_one(grid, name, kappa, scale, angle):
    """The saved losses up to each best rate, within 1 % (float32 chaos above it), and the
    same stability edge within one rate."""
    live = script.relative_losses(name, kappa, scale, angle)
    saved = grid.values(name, kappa, scale, angle)
    ok = np.isfinite(saved).all(axis=0)
    best = int(np.argmin(ch10._seed_median(saved)))
    np.testing.assert_allclose(live[:, :best + 1], saved[:, :best + 1], rtol=0.01)
    edge = lambda x: int(np.flatnonzero(~np.isfinite(x).all(axis=0))[0]) if (~np.isfinite(x).all(axis=0)).any() \
        else x.shape[1]
    assert abs(edge(live) - edge(saved)) <= 1 and ok.any()


def test_verdicts_rank_only_when_both_sets_agree():
    def summary(values):
        return {n: {"values": np.asarray(v, dtype=float)} for n, v in values.items()}

    held = summary({"a": [1.0] * 20, "b": [2.0] * 20})
    fresh = summary({"a": [1.0] * 19 + [3.0], "b": [2.0] * 20})
    assert P.verdict([held, held], "a", "b") == "ahead"
    assert P.verdict([held, fresh], "a", "b") == "ahead"        # one seed of 20 does not move the interval
    fresh = summary({"a": [1.0] * 10 + [3.0] * 10, "b": [2.0] * 20})
    assert P.verdict([held, fresh], "a", "b") == "unresolved"
    row = P.pair_row([held, fresh], "a", "b", "unresolved")
    assert row.holds and "·" in row.measured                    # printed set by set


def test_the_saved_protocol_results_follow_the_rules():
    fig3 = P.both_sets(load(saved_result("protocol_fig3.npz")), "fig3/")
    assert set(fig3[0]) == set(fig3[1]) and len(fig3[0]) == 10
    for s in fig3[0].values():
        assert s["trials"] == 66 and len(s["values"]) == 20
    text = P.table(fig3, digits=None)
    assert "held-out" in text and "fresh" in text and "diverged" in text
    assert "·" in text.splitlines()[1]                         # divergences per set
    positions = P.range_positions(fig3[0])
    assert all(0 <= v <= 1.5 for v in positions.values())


def test_paper_claims_treat_a_threshold_within_the_grid_as_unresolved():
    from isolab.book.engine.intervals import against_threshold

    assert against_threshold(2.34, 2.0, 1.23) == "unresolved"
    assert against_threshold(3.0, 2.0, 1.23) == "fails"


def test_figures_build_and_survive_divergence():
    s = {"iso": {"median": 1.0, "low": 0.8, "high": math.inf, "values": [0.8, 1.0, math.inf], "coverage": 0.75},
         "adam": {"median": 2.0, "low": 1.5, "high": 2.5, "values": [1.5, 2.0, 2.5], "coverage": 0.75}}
    fig = Figure()
    ax = fig.add_subplot()
    assert ch10.interval_panel(ax, [s, s], "x") == ["iso", "adam"]
    fig.canvas.draw()
    fig = ch10.protocol_figure([([s, s], "x", "panel")], "title")
    assert isinstance(fig, Figure)


def test_prefix_check_notices_a_changed_rate():
    fig3 = P.both_sets(load(saved_result("protocol_fig3.npz")), "fig3/")
    from isolab.book.problems import DeepLinearRegression

    row = P.prefix_check(fig3[0]["iso"]["sweep"], DeepLinearRegression(32, 5, 128), "iso")
    assert row.holds
    gap = P.prefix_gap(fig3[0]["iso"]["sweep"], DeepLinearRegression(32, 5, 128), 7, 1.05)
    assert gap > P.NOTICED


def test_step_lengths_measure_the_update_over_the_rate():
    """Plain SGD's update over the rate is the gradient: its length is the gradient's norm."""
    from isolab.book.problems import DeepLinearRegression

    problem = DeepLinearRegression(8, 3, 16)
    lengths = P.step_lengths(problem, "sgd", 0.01, {"momentum": 0.0}, 1, seed=0)
    model = problem.reference_model(problem.initial_weights(0).to(torch.float64))
    X, T = problem.batch(0, 0)
    problem.reference_loss(model(X.to(torch.float64)), T.to(torch.float64)).backward()
    np.testing.assert_allclose(lengths[0], [float(m.weight.grad.norm()) for m in model], rtol=1e-10)
    assert lengths.shape == (1, 3)


def test_edge_problem_fixes_the_scale_by_the_trace_or_the_smallest_eigenvalue():
    for scale, check in (("trace", lambda e: math.isclose(float(e.sum()), 16, rel_tol=1e-9)),
                         ("floor", lambda e: math.isclose(float(e.min()), 1, rel_tol=1e-9)
                          and math.isclose(float(e.max()), 100, rel_tol=1e-6))):
        sigma = P.edge_problem(16, 2, 8, 100.0, scale, 45.0).features.sigma
        assert check(torch.linalg.eigvalsh(sigma))
    with pytest.raises(ValueError, match="'diagonal'"):
        P.edge_problem(16, 2, 8, 100.0, "diagonal", 0.0)
