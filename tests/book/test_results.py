"""Results: labelled arrays, lossless save/load, plots."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from isolab.book.engine import sweep  # noqa: E402
from isolab.book.problems import DeepLinearRegression  # noqa: E402
from isolab.book.results import Results, Sweep, load, plot_loss_curves, plot_sweep, plot_weight_norm, save  # noqa: E402

P = DeepLinearRegression(n=6, depth=2, batch=12)


@pytest.fixture(scope="module")
def results():
    r = Results()
    r.add(sweep(P, "adam", [1e-3, 1e-2, 1e4], 15, seeds=(0, 1), threshold=0.5, relative_threshold=True,
                keep_weights=True))
    r.add(sweep(P, "isoadam", [1e-3, 1e-2], 15, hyper=dict(betas=(0.8, 0.99)), record_norms=False))
    return r


def test_labels_and_shapes(results):
    s = results["adam"]
    assert results.labels == ["adam", "isoadam"]
    assert s.loss.shape == (2, 3, 16) and s.weight_norm.shape == (2, 3, 16, 2)
    assert s.weights.shape == (2, 3, 2, 6, 6) and s.steps == 15
    assert s.diverged[:, 2].all() and not s.diverged[:, :2].any()
    assert np.isinf(s.final_loss()[:, 2]).all()
    assert s.best()[0] in (1e-3, 1e-2)
    assert results["isoadam"].weight_norm is None and results["isoadam"].hyper["betas"] == (0.8, 0.99)
    rows = results.summary()
    assert rows[0]["diverged"] == 2 and rows[0]["lanes"] == 6


def test_save_load_round_trip(results, tmp_path):
    path = save(results, tmp_path / "sweeps.npz")
    back = load(path)
    assert back == results
    for a, b in zip(results, back):
        for k in ("loss", "hit_at", "diverged_at", "lrs", "threshold"):
            x, y = getattr(a, k), getattr(b, k)
            assert x.dtype == y.dtype and np.array_equal(x, y, equal_nan=True)
        assert a.hyper == b.hyper and a.info == b.info and a.problem == b.problem
    single = save(results["isoadam"], tmp_path / "one.npz")
    assert load(single)["isoadam"] == results["isoadam"]


def test_plots(results):
    fig, axes = plt.subplots(1, 3)
    assert plot_sweep(axes[0], results) is axes[0]
    assert len(axes[0].lines) >= 2 and axes[0].get_xscale() == "log"
    plot_sweep(axes[0], results["adam"], metric="iterations")
    plot_weight_norm(axes[1], results["adam"], lrs=[1e-3, 1e-2])
    assert len(axes[1].lines) == 2
    plot_loss_curves(axes[2], results["isoadam"])
    assert len(axes[2].lines) == 2
    plt.close(fig)


def test_total_weight_norm_does_not_overflow_for_exploding_runs():
    import warnings

    from isolab.book.results import Sweep

    norms = np.full((1, 1, 2, 2), 1e200)
    norms[0, 0, 0] = [3.0, 4.0]
    sweep = Sweep("sgd", "sgd", np.array([1.0]), np.array([0]), np.zeros((1, 1, 2)), norms,
                  np.array([[-1]]), np.array([[-1]]), np.array([[np.nan]]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        total = sweep.total_weight_norm()
    assert total[0, 0, 0] == pytest.approx(5.0)
    assert total[0, 0, 1] == pytest.approx(np.sqrt(2) * 1e200)


# ------------------------------------------------------------ compare_outcomes
from isolab.book.results import compare_outcomes  # noqa: E402


def test_compare_outcomes_allows_moved_steps_but_not_changed_outcomes():
    saved_hit, saved_div = np.array([100, -1, -1, 400]), np.array([-1, 56, -1, -1])
    # converged 3% later, diverged 5 steps later, still neither, and beyond the horizon both times
    same = compare_outcomes(np.array([103, -1, -1, -1]), np.array([-1, 61, -1, -1]), saved_hit, saved_div, horizon=300)
    assert same.same_outcomes and same.mismatched == ()
    assert same.max_relative_step_gap == pytest.approx(0.03)
    assert same.describe() == "steps 3% apart"
    changed = compare_outcomes(np.array([-1, -1, 250, -1]), np.array([-1, 61, -1, -1]), saved_hit, saved_div, horizon=300)
    assert not changed.same_outcomes and changed.mismatched == (0, 2)
    assert "lanes [0, 2]" in changed.describe()


def test_compare_outcomes_rejects_bad_input():
    with pytest.raises(ValueError, match="horizon"):
        compare_outcomes([1], [1], [1], [1], horizon=0)
    with pytest.raises(ValueError, match="one shape"):
        compare_outcomes([1, 2], [1], [1], [1], horizon=10)


def test_edge_of_divergence_marks_the_last_stable_rate_before_a_diverged_one():
    from isolab.book.results import edge_of_divergence

    diverged = np.array([[False, False, True, True], [False, True, False, True], [False] * 4])
    assert edge_of_divergence(diverged).tolist() == [[False, True, False, False], [True, False, True, False], [False] * 4]


def test_update_lengths_are_recorded_and_saved(tmp_path):
    """``record_steps``: ||W_{t+1} - W_t||_F per layer and step; with Muon (no momentum,
    exact msign) each layer's update has length lr * sqrt(n) at every step."""
    import numpy as np

    from isolab.book.engine import sweep
    from isolab.book.problems import DeepLinearRegression
    from isolab.book.results import Results, load

    p = DeepLinearRegression(8, 3, 32)
    s = sweep(p, "muon", [0.01, 0.02], 6, seeds=[0], hyper={"momentum": 0.0, "exact": True},
              dtype=torch.float64, record_steps=True, progress=False)
    assert s.step_norm.shape == (1, 2, 6, 3)
    np.testing.assert_allclose(s.step_norm[0, 0], 0.01 * np.sqrt(8), rtol=1e-9)
    np.testing.assert_allclose(s.step_norm[0, 1], 0.02 * np.sqrt(8), rtol=1e-9)
    Results([s]).save(tmp_path / "r.npz")
    np.testing.assert_array_equal(load(tmp_path / "r.npz")[s.label].step_norm, s.step_norm)
