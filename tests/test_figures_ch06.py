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
    fig = ch06.hero(data)
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
    cos, step = (part.split("=")[1].strip() for part in title.split("\n")[1].split(","))
    assert cos == step


def test_damping_figure_draws():
    assert isinstance(ch06.damping(), Figure)


def test_explorable_keeps_its_promises_over_the_grid():
    explorable = ch06.invariance_explorable()
    assert explorable.main_slider.name == "kappa" and len(explorable.main_slider.values) >= MIN_MAIN_VALUES
    for promise in explorable.promises:
        assert promise.text in explorable.caption
    assert not explorable.broken_promises()


def test_adam_promise_would_fail_for_general_transforms():
    """The promise that Adam's dots stay on the line is tested where it applies (monomial):
    measured on general transforms of the same condition numbers it fails, so it can fail."""
    promise = next(p for p in ch06.invariance_explorable().promises if "Adam" in p.text)
    values = [("monomial", promise.measure(kappa=k, kind="general", batch=256)[1]) for k in ch06.KAPPAS]
    assert not promise.holds(values)


def test_things_to_try_at_kappa_one():
    """The section's 'things to try': rotations move Adam and IsoAdam but not SGD; signed
    permutations move nothing."""
    def spread(name, kind):
        ratios = ch06.invariance_data(1, kind, 256)["rules"][name]["ratios"][2]
        return float(np.abs(np.log2(ratios)).max())

    assert spread("SGD", "general") < 1e-9
    assert spread("Adam", "general") > 0.05 and spread("IsoAdam", "general") > 0.05
    assert all(spread(name, "monomial") < 1e-9 for name in ch06.RULES)


def test_explorable_draws_two_kinds_of_mark_and_every_extreme():
    explorable = ch06.invariance_explorable()
    for kappa, kind, batch in itertools.product((1, 10000), ch06.KINDS, (4, 256)):
        fig = explorable.render(strict=True, kappa=kappa, kind=kind, batch=batch)
        dots = fig.axes[0].collections
        assert len(dots) == 2
        spectral, frobenius = (c.get_paths()[0].vertices for c in dots)
        assert spectral.shape != frobenius.shape or not np.allclose(spectral, frobenius), \
            "filled dots and crosses must differ in shape, not only in fill"


def test_isoadam_leaves_the_line_under_stretching_monomials():
    """'push κ up and Adam stays on the line while IsoAdam leaves it' (monomial transforms)."""
    for batch in ch06.BATCHES:
        for kappa in ch06.KAPPAS[1:]:
            ratios = ch06.invariance_data(kappa, "monomial", batch)["rules"]
            assert float(np.abs(np.log2(ratios["IsoAdam"]["ratios"][2])).max()) > 0.05
            assert float(np.abs(np.log2(ratios["Adam"]["ratios"][2])).max()) < 0.01
