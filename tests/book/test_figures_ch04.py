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
from isolab.book.figures import ch04


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


# ---------------------------------------------------------------- feature moves (4.4)
def test_feature_alignment_figure_and_the_metric_disagreement():
    assert isinstance(ch04.feature_alignment(), Figure)
    iso = ch04.feature_sweep(1)
    i16 = ch04.FEATURE_BATCHES.index(16)
    # by the descent efficiency Muon is less steep than SGD; by the Frobenius cosine it looks better
    assert iso["muon"][i16] < iso["sgd"][i16] < iso["muon_cos"][i16]
    # b > d_in: against -G both fall; against the reachable best SGD climbs back towards 1
    assert iso["sgd"][-1] < 0.3 and iso["sgd_reach"][-1] > 0.95
    assert iso["sgd_reach"][-3] == pytest.approx(0.89, abs=0.02)
    assert ch04.feature_sweep(100)["sgd_reach"][-1] < 0.7
    # for b <= d_in every move is reachable: the two measures agree
    for k in ("sgd", "muon"):
        for b in (2, 16, 64):
            i = ch04.FEATURE_BATCHES.index(b)
            assert iso[k][i] == pytest.approx(iso[k + "_reach"][i], rel=1e-9)


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
    sgd_mean = lambda theta, kappa: ch04.turned_basis(kappa)["efficiency"]["sgd"][ch04._turn_index(theta)].mean().item()  # noqa: E731
    fake = Explorable(ch04.draw_alignment, [Slider("theta", list(ch04.THETAS)), Slider("kappa", list(ch04.TURN_KAPPAS))],
                      main="theta", caption=ch04.ALIGNMENT_CAPTION, promises=[Promise(falls.text, sgd_mean, falls.holds)])
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
    assert isinstance(ch04.newton_schulz_maps(0.682, 1.134), Figure)
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


def test_newton_schulz_old_claim_fails():
    """The old text said the quintic "never gets below 0.32" (its plateau is 0.318); even 0.3 fails at κ = 1."""
    e = ch04.newton_schulz_explorable()
    caption = "the quintic's error never gets below 0.3"
    old = Explorable(e.draw, e.sliders, main="steps", caption=caption,
                     promises=[Promise(caption, ch04.ns_error("quintic"), always(lambda v: v >= 0.3, ">= 0.3"))])
    broken = old.broken_promises()
    assert broken and all(b.setting["kappa"] == 1 for b in broken)


def test_every_builder_is_listed():
    assert ch04.EXPLORABLES == (ch04.alignment_explorable, ch04.newton_schulz_explorable)
