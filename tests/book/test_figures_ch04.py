"""Chapter 4's figure module: every figure function returns a figure, the numbers the
figures show are the ones the chapter states, each explorable keeps its caption's
promises over its whole grid, and the promises can fail (a claim the old figures made, or
a measurement that ignores the rotation, breaks them)."""

from __future__ import annotations

import io
import math

import pytest
import torch
from matplotlib.figure import Figure

from isolab import linalg

from isolab.book import feature_step
from isolab.book.explorable import MIN_MAIN_VALUES, Explorable, Promise, Slider, always
from isolab.book.figures import ch04, ch04_newton_schulz, ch04_sign


pytestmark = pytest.mark.usefixtures("book_figures")


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=40)
    return buf.getvalue()


# ----------------------------------------------------------------------------- hero
def test_hero_is_a_figure_with_the_numbers_it_shows():
    fig = ch04.hero()
    assert isinstance(fig, Figure) and len(fig.axes) == 2
    n = ch04.hero_numbers()
    eff = n["spectral_efficiency"]
    assert eff["muon"] == pytest.approx(1.0, abs=1e-12)
    assert eff["sgd"] == pytest.approx(0.829, abs=1e-3) and eff["sign"] == pytest.approx(0.722, abs=1e-3)
    assert n["points"]["muon"] == pytest.approx((-1.0, 0.0)) and n["points"]["sign"] == pytest.approx((-1.0, -1.0))
    # the three unit balls on the slice [[x, y], [y, x]]: each steepest step lies on its own ball
    for opt, norm in feature_step.OPTIMIZERS.items():
        assert feature_step.matrix_norm(n["steps"][opt], norm).item() == pytest.approx(1.0, rel=1e-12)
    assert torch.allclose(n["s_M"], torch.tensor([2.2, 0.7], dtype=torch.float64))
    assert torch.allclose(n["s_msign"], torch.ones(2, dtype=torch.float64))
    assert "0.83" in "".join(t.get_text() for t in fig.axes[0].texts)   # the key number is in the figure


# ------------------------------------------------------------ the centerpiece (4.4)
def test_centerpiece_promises_hold_and_both_sliders_move_it():
    e = ch04.ruler_explorable()
    assert e.main == "kappa" and len(e.main_slider.values) >= MIN_MAIN_VALUES and e.narrow == "panels"
    assert not e.broken_promises()
    frames = {(k, m): _png(e.render(strict=True, kappa=k, method=m)) for k in (1, 10_000) for m in ("SVD", "Jordan ×5")}
    assert len(set(frames.values())) == 4
    assert e.sliders[1].is_toggle


def test_each_move_is_steepest_under_its_own_ruler_at_kappa_one():
    s = ch04.ruler_state(1, "SVD")
    assert s.efficiency["SGD", "frobenius"] == pytest.approx(1, abs=1e-12)
    assert s.efficiency["Muon", "spectral"] == pytest.approx(1, abs=1e-12)
    assert s.efficiency["SGD", "spectral"] < 0.8 and s.efficiency["Muon", "frobenius"] < 0.95
    assert s.lengths == pytest.approx([1.0] * ch04.CENTER_D_OUT, abs=1e-10) and s.longest == pytest.approx(1, abs=1e-10)
    X = ch04.gram_inputs(1)
    assert torch.allclose(X @ X.mT, torch.eye(ch04.CENTER_B, dtype=torch.float64).expand_as(X @ X.mT), atol=1e-12)
    assert torch.linalg.cond(ch04.gram_inputs(100)[0] @ ch04.gram_inputs(100)[0].T).item() == pytest.approx(100, rel=1e-8)


def test_the_reviewers_comparison_fails_as_a_promise():
    """The old chapter compared Muon's spectral efficiency with SGD's Frobenius one ("Muon's move is
    less steep than SGD's"). As a promise over the grid measured with one ruler it fails: under the
    spectral ruler Muon is ahead everywhere."""
    e = ch04.ruler_explorable()
    text = "Muon's move is less steep than SGD's"

    def one_ruler(kappa, method):
        eff = ch04.ruler_state(kappa, method).efficiency
        return eff["SGD", "spectral"] - eff["Muon", "spectral"]

    fake = Explorable(e.draw, e.sliders, main="kappa", caption=text,
                      promises=[Promise(text, one_ruler, always(lambda v: v > 0, "SGD ahead"))])
    assert len(fake.broken_promises()) == len(ch04.MSIGN_METHODS)


def test_frobenius_lead_changes_hands():
    first, last = ch04.ruler_state(1, "SVD").efficiency, ch04.ruler_state(10_000, "SVD").efficiency
    assert first["SGD", "frobenius"] > first["Muon", "frobenius"]
    assert last["Muon", "frobenius"] > last["SGD", "frobenius"]


# ---------------------------------------------------------------- feature moves (4.5)
def test_feature_alignment_figure_and_both_rulers():
    assert isinstance(ch04.feature_alignment(), Figure)
    iso = ch04.feature_sweep(1)
    i16 = ch04.FEATURE_BATCHES.index(16)
    # one ruler at a time: each move is the steeper under its own norm
    assert iso["Muon", "spectral"][i16] > iso["SGD", "spectral"][i16]
    assert iso["SGD", "frobenius"][i16] > iso["Muon", "frobenius"][i16]
    assert iso["Muon", "spectral"][i16] == pytest.approx(0.73, abs=0.01)
    assert iso["SGD", "frobenius"][i16] == pytest.approx(0.89, abs=0.01)
    # b > d_in: against -G both fall; against the reachable best SGD climbs back towards 1
    assert iso["SGD", "frobenius"][-1] < 0.3 and iso["SGD", "frobenius", "reach"][-1] > 0.95
    assert ch04.feature_sweep(100)["SGD", "frobenius", "reach"][-1] < 0.7
    for name in ("SGD", "Muon"):                   # b <= d_in: every move is reachable
        for ruler in ch04.RULERS:
            for b in (2, 16, 64):
                i = ch04.FEATURE_BATCHES.index(b)
                assert iso[name, ruler][i] == pytest.approx(iso[name, ruler, "reach"][i], rel=1e-9)


# ------------------------------------------------------ the turned basis (4.6)
def test_alignment_explorable_promises_hold_and_its_panels_respond():
    e = ch04.alignment_explorable()
    assert e.main == "theta" and len(e.main_slider.values) >= MIN_MAIN_VALUES
    assert {p.text for p in e.promises} and not e.broken_promises()
    # both sliders change the picture (not only a marker)
    frames = {(t, k): _png(e.render(strict=True, theta=t, kappa=k)) for t in (0, 90) for k in (1, 100)}
    assert len(set(frames.values())) == 4
    data = ch04.turned_basis(1)
    for opt in ("sgd", "muon"):                 # the same Gram matrix: identical at every θ
        assert torch.allclose(data["efficiency"][opt], data["efficiency"][opt][:1].expand_as(data["efficiency"][opt]), atol=1e-12)
    assert torch.allclose(data["efficiency"]["sign"][0], torch.ones(len(ch04.TURN_BATCHES), dtype=torch.float64))
    assert data["efficiency"]["sign"][-1].max() < 0.8                     # turned: far from steepest
    target, move = data["entries"]["sign"]                                 # the scatter panel moves with θ
    assert not torch.allclose(move[0], move[-1]) and torch.equal(target[0], target[-1])


def test_alignment_promise_can_fail():
    """The SignSGD promise fails for a measurement that does not see the rotation (SGD's)."""
    falls = next(p for p in ch04.alignment_explorable().promises if "SignSGD" in p.text)
    sgd_mean = lambda theta, kappa: ch04.turned_basis(kappa)["efficiency"]["sgd"][ch04_sign._turn_index(theta)].mean().item()  # noqa: E731
    fake = Explorable(ch04_sign.draw_alignment, [Slider("theta", list(ch04.THETAS)), Slider("kappa", list(ch04.TURN_KAPPAS))],
                      main="theta", caption=ch04_sign.ALIGNMENT_CAPTION, promises=[Promise(falls.text, sgd_mean, falls.holds)])
    assert fake.broken_promises()


def test_plane_rotation_turns_every_vector_by_theta():
    U = linalg.random_orthogonal(8, torch.Generator().manual_seed(0))
    Q = ch04.plane_rotation(U, math.radians(30))
    assert torch.allclose(Q @ Q.T, torch.eye(8, dtype=torch.float64), atol=1e-12)
    x = torch.randn(8, 5, dtype=torch.float64)
    cosines = (x * (Q @ x)).sum(0) / x.square().sum(0)
    assert torch.allclose(cosines, torch.full((5,), math.cos(math.radians(30)), dtype=torch.float64), atol=1e-12)
    assert torch.allclose(ch04.plane_rotation(U, 0.0), torch.eye(8, dtype=torch.float64), atol=1e-12)


# ------------------------------------------------------------------ training (4.7)
def test_training_is_fair_and_shows_the_basis_effect():
    assert isinstance(ch04.training(), Figure)
    runs = ch04.training_runs()
    assert all(r["inside"] for r in runs.values()), "every chosen lr inside the grid, not at an edge"
    assert len(ch04.LR_GRID) >= 5 and ch04.TRAIN["seeds"] >= 3
    s = ch04.training_summary()
    assert s["inside"] and s["turned"] < 1e-6                # SGD and Muon do not see the rotation
    end = s["end"]
    assert end["sign", "rotated"] > 2 * end["sign", "axis-aligned"]
    assert end["sign", "axis-aligned"] < min(end["sgd", "axis-aligned"], end["muon", "axis-aligned"])


def test_train_linear_rotation_turns_the_same_problem():
    a = ch04.train_linear("sgd", 0.0, lrs=(0.05,), steps=5, seeds=2)
    b = ch04.train_linear("sgd", math.pi / 4, lrs=(0.05,), steps=5, seeds=2)
    c = ch04.train_linear("sign", 0.0, lrs=(0.01,), steps=5, seeds=2)
    d = ch04.train_linear("sign", math.pi / 4, lrs=(0.01,), steps=5, seeds=2)
    assert a.shape == (1, 2, 6) and torch.allclose(a, b, rtol=1e-10)
    assert not torch.allclose(c, d, rtol=1e-3)
    with pytest.raises(ValueError, match="optimizer"):
        ch04.train_linear("adam", 0.0)


# ------------------------------------------------------------- Newton–Schulz (4.8)
def test_newton_schulz_figures():
    assert isinstance(ch04.newton_schulz_maps(0.682, 1.134), Figure) and isinstance(ch04.newton_schulz_maps(), Figure)
    M = ch04.spread_matrix(64, 16, 1e3, seed=3)
    assert torch.allclose(torch.linalg.svdvals(M), torch.logspace(0, -3, 16, dtype=torch.float64), rtol=1e-10)
    errors = {("spread", c): ch04.ns_errors(M, coeffs, max_steps=10) for c, coeffs in ch04.NS_POLYNOMIALS.items()}
    assert len(errors["spread", "cubic"]) == 11 and errors["spread", "cubic"][0] == pytest.approx(1.0, abs=1e-2)
    assert isinstance(ch04.newton_schulz_errors(errors), Figure)
    assert isinstance(ch04.large_inputs(), Figure)
    # the two polynomials are drawn differently (not one colour for both)
    assert ch04.POLYNOMIAL_LOOKS["cubic"]["color"] != ch04.POLYNOMIAL_LOOKS["quintic"]["color"]


def test_newton_schulz_explorable_promises_hold():
    e = ch04.newton_schulz_explorable()
    assert e.main == "steps" and len(e.main_slider.values) >= MIN_MAIN_VALUES
    assert len(e.promises) >= 3 and not e.broken_promises()


def test_newton_schulz_promises_can_fail():
    """Said of Jordan's quintic, the promise Polar Express keeps (rounding level by k = 20) fails at
    every spread: the quintic stays on its plateau."""
    e = ch04.newton_schulz_explorable()
    kept = next(p for p in e.promises if p.text.startswith("Polar Express"))
    caption = "the quintic reaches rounding level by k = 20"
    old = Explorable(e.draw, e.sliders, main="steps", caption=caption,
                     promises=[Promise(caption, ch04_newton_schulz.ns_error("quintic"), kept.holds)])
    assert len(old.broken_promises()) == len(ch04_newton_schulz.NS_SPREADS) * 3


def test_every_builder_is_listed():
    assert ch04.EXPLORABLES == (ch04.ruler_explorable, ch04.alignment_explorable, ch04.newton_schulz_explorable)


def test_held_out_ranking_has_intervals():
    iv = ch04.ranking(("sign", "axis-aligned"), ("sign", "rotated"))
    assert iv.n == ch04.HELD_OUT_SEEDS and iv.high < 0 and iv.coverage > 0.9


def test_trapping_interval():
    low, high = ch04.trapping_interval()
    assert low == pytest.approx(0.6818, abs=1e-4) and high == pytest.approx(1.1344, abs=1e-4)


def test_figure_modules_stay_short():
    import inspect
    for module in (ch04, ch04_sign, ch04_newton_schulz):
        assert len(inspect.getsource(module).splitlines()) < 600
