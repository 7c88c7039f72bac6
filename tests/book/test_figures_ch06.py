"""Chapter 6's figure module: every figure draws and shows what its caption says, the
monomial transforms do what §6.5 says of them, and the explorable keeps its caption's
promises (and the Adam promise would fail on the transforms the chapter once claimed
were the only ones)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

from isolab import updates
from isolab.book.explorable import MIN_MAIN_VALUES
from isolab.book.figures import ch06
from isolab.book.seeding import generator


pytestmark = pytest.mark.usefixtures("one_thread")


def gaussian(gen, *shape):
    return torch.randn(*shape, generator=gen, dtype=torch.float64)


def test_hero_shows_iso_unchanged_and_sgd_stretched():
    data = ch06.hero_data()
    before, after = data["sv"]["Iso"]
    torch.testing.assert_close(after, before, atol=1e-12, rtol=0)
    sgd_before, sgd_after = data["sv"]["SGD"]
    assert (sgd_after[0] / sgd_before[0]).item() > 2
    # whitened clouds: identity covariance, and one is the other turned by M_X
    torch.testing.assert_close(data["white_twin"], data["white"] @ data["M"], atol=1e-10, rtol=0)
    assert torch.linalg.det(data["M"]).item() > 0           # a rotation, as the title says
    fig = ch06.hero()
    assert isinstance(fig, Figure)
    titles = " ".join(fig.axes[1].get_title(loc) for loc in ("left", "center", "right"))  # the style titles left
    assert f"{abs(data['angle']):.0f}°" in titles


def test_random_monomial_is_a_permutation_times_a_rescaling():
    gen = generator(0)
    M = ch06.random_monomial(7, 100.0, generator=gen, sample_shape=(5,))
    nonzero = M != 0
    assert (nonzero.sum(-1) == 1).all() and (nonzero.sum(-2) == 1).all()
    torch.testing.assert_close(torch.linalg.cond(M), torch.full((5,), 100.0, dtype=torch.float64))
    S = ch06.random_monomial(7, 1.0, generator=gen, sample_shape=(5,))
    torch.testing.assert_close(S.mT @ S, torch.eye(7, dtype=torch.float64).expand(5, 7, 7))
    assert (S.abs().sum((-1, -2)) == 7).all()


def test_adam_turns_by_the_sign_part_of_a_monomial_transform():
    """sgn(A^T g B) = S_A^T sgn(g) S_B for monomial A, B: the spectrum of Adam's first step
    is unchanged, which the chapter once denied for anything but positive diagonals."""
    gen = generator(3)
    X, G = gaussian(gen, 128, 6), gaussian(gen, 128, 5)
    A, B = ch06.random_monomial(6, 30.0, generator=gen), ch06.random_monomial(5, 30.0, generator=gen)
    step, step_AB = updates.adam_first_step(X, G), updates.adam_first_step(X @ A, G @ B)
    assert torch.equal(step_AB.sign(), A.sign().T @ step.sign() @ B.sign())
    torch.testing.assert_close(torch.linalg.svdvals(step_AB), torch.linalg.svdvals(step), atol=1e-3, rtol=0)
    assert not torch.equal(A.abs(), torch.diag(torch.diagonal(A).abs())), "the test needs a permutation in A"


def test_invariance_ranges_name_each_rules_group():
    gen = generator(55)
    X, G = gaussian(gen, 256, 8), gaussian(gen, 256, 6)
    ranges = ch06.invariance_ranges(X, G, draws=10)

    def kept(name):
        return [k for k in ch06.TRANSFORM_KINDS if max(abs(r - 1) for r in ranges[name, k, 2]) < 1e-3]

    assert kept("Adam") == ["positive diagonal", "signed permutation", "monomial"]
    assert kept("IsoAdam") == ["signed permutation"]
    assert kept("SGD") == ["signed permutation", "orthogonal"]
    assert kept("Iso") == list(ch06.TRANSFORM_KINDS)
    assert isinstance(ch06.invariance_map(ranges), Figure)


def test_principal_angle_cosine_is_isos_step():
    fig = ch06.principal_angle()
    assert isinstance(fig, Figure)
    title = fig.axes[0].get_title(loc="center")
    line = title.split("\n")[1]                       # "cos = 0.785 = Iso's step 0.785"
    cos, step = line.split("=")[1].strip(), line.split()[-1]
    assert cos == step


def test_damping_figure_draws():
    assert isinstance(ch06.damping(), Figure)


def test_explorable_keeps_its_promises_over_the_grid():
    explorable = ch06.twin_explorable()
    assert explorable.main_slider.name == "kappa" and len(explorable.main_slider.values) >= MIN_MAIN_VALUES
    assert len(ch06.TWIN_DIRECTIONS) >= 5
    for promise in explorable.promises:
        assert promise.text in explorable.caption
    assert not explorable.broken_promises()


def test_twin_promises_can_fail():
    """Each predicate rejects what the caption rules out: a whitened twin that is not the
    turned original, Iso's bars moving, SGD's staying put, Adam's moving at 0°."""
    turned, iso, sgd, adam = (p.holds for p in ch06.twin_explorable().promises)
    assert not turned([0.0] * 8 + [1e-3])
    assert not iso([0.0, 0.02])
    assert not sgd([1.0] * len(ch06.TWIN_KAPPAS))
    assert not adam([(0, 0.0), (0, 0.5)])
    assert adam([(36, 0.0), (36, 1.0)])          # off the axes the sentence promises nothing


def test_adams_bars_move_off_the_axes():
    """The caption's contrast: along the axes (0°, a positive diagonal) Adam's first step
    keeps its singular values at every κ; at 36° and 72° they change from κ = 1.5 on."""
    assert all(ch06._adam_drift(k, 0)[1] < 1e-6 for k in ch06.TWIN_KAPPAS)
    for direction in (36, 72):
        assert all(ch06._adam_drift(k, direction)[1] > 0.1 for k in ch06.TWIN_KAPPAS[1:])


def test_centerpiece_reads_on_a_phone():
    explorable = ch06.twin_explorable()
    assert explorable.narrow == "panels" and len(explorable.panel_strips()) == 4


def test_whitened_twin_is_the_layer_turned_at_every_setting():
    """At every grid point the induced map M_X is a rotation (det +1, what the title's
    angle measures) and the whitened twin is the whitened layer times M_X."""
    for kappa, direction in itertools.product(ch06.TWIN_KAPPAS, ch06.TWIN_DIRECTIONS):
        d = ch06.hero_data(kappa, direction)
        M = d["M"]
        torch.testing.assert_close(M.T @ M, torch.eye(2, dtype=torch.float64), atol=1e-12, rtol=0)
        assert torch.linalg.det(M).item() > 0
        torch.testing.assert_close(d["white_twin"], d["white"] @ M, atol=1e-10, rtol=0)
        torch.testing.assert_close(torch.linalg.cond(d["A"]), torch.tensor(float(kappa), dtype=torch.float64))
    assert ch06.hero_data(1, 72)["angle"] == pytest.approx(0, abs=1e-9)   # κ = 1: the twin is the layer


def test_explorable_draws_every_extreme():
    explorable = ch06.twin_explorable()
    for kappa, direction in itertools.product((1, 30), ch06.TWIN_DIRECTIONS):
        fig = explorable.render(strict=True, kappa=kappa, direction=direction)
        assert len(fig.axes) == 3
        assert not explorable.clipped_text(kappa=kappa, direction=direction)


def test_things_to_try():
    """§6.10's things to try: the twin's cloud stretches along the chosen direction as κ
    grows (its spread along that direction is √κ times the layer's) and shrinks across it;
    at κ = 30 SGD's factor depends on the direction of the stretch (by more than a factor 2
    across the five directions) while Iso's stays 1."""
    import math

    for direction in ch06.TWIN_DIRECTIONS:
        a = math.radians(direction)
        along = torch.tensor([math.cos(a), math.sin(a)], dtype=torch.float64)
        across = torch.tensor([-math.sin(a), math.cos(a)], dtype=torch.float64)
        for kappa in ch06.TWIN_KAPPAS:
            d = ch06.hero_data(kappa, direction)
            spread = lambda Z, u: (Z @ u).square().mean().sqrt().item()   # noqa: E731
            assert spread(d["XA"], along) == pytest.approx(kappa**0.5 * spread(d["X"], along), rel=1e-12)
            assert spread(d["XA"], across) == pytest.approx(kappa**-0.5 * spread(d["X"], across), rel=1e-12)
    factors = [ch06._sgd_ratio(30, direction) for direction in ch06.TWIN_DIRECTIONS]
    assert max(factors) / min(factors) > 2
    assert all(ch06._iso_drift(30, direction) < 1e-10 for direction in ch06.TWIN_DIRECTIONS)
