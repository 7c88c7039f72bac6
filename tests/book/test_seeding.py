"""isolab.book.seeding: seeds, and the jitter that stands in for another CPU."""

import os
import subprocess
import sys

import pytest
import torch

from isolab.book import seeding
from isolab.book.problems import DeepLinearRegression, derived_generator
from isolab.book.seeding import generator, jitter_in_effect, jittered


def _draws():
    g = generator(3)
    return {"randn64": torch.randn(500, generator=g, dtype=torch.float64),
            "randn32": torch.randn(500, generator=g),
            "rand": torch.rand(500, generator=g, dtype=torch.float64),
            "normal": torch.normal(0.0, 2.0, (500,), generator=g, dtype=torch.float64),
            "normal_": torch.empty(500, dtype=torch.float64).normal_(generator=g),
            "uniform_": torch.empty(500, dtype=torch.float64).uniform_(-1, 1, generator=g)}


def test_the_jitter_is_a_relative_rounding_sized_change_of_every_float_draw():
    plain = _draws()
    with jittered(1e-6, seed=0):
        assert jitter_in_effect() == {"eps": 1e-6, "seed": 0}
        shaken = _draws()
    assert jitter_in_effect() is None
    for name, value in plain.items():
        e = 1e-6
        ratio = shaken[name].double() / value.double() - 1
        assert 0 < ratio.abs().max() < 6 * e, name          # |e u| with u ~ N(0, 1), 500 draws
        assert 0.8 * e < ratio.std() < 1.2 * e, name        # an N(0, 1) per draw, not a fixed factor
        assert abs(ratio.mean()) < 0.2 * e, name
    # the seeded stream itself is undisturbed: what follows a draw is the same with or without it
    assert torch.equal(_draws()["randn64"], plain["randn64"])


def test_the_same_draw_made_twice_is_perturbed_the_same_way():
    """As on another CPU, whose random streams are identical: a batch drawn again from its
    seed equals the first draw, under the jitter too."""
    with jittered(1e-6, seed=0):
        a = torch.randn(100, generator=generator(5))
        b = torch.randn(100, generator=generator(5))
    assert torch.equal(a, b)


def test_the_jitter_seed_chooses_the_perturbation_and_repeats():
    with jittered(1e-6, seed=1):
        a = torch.randn(50, generator=generator(0), dtype=torch.float64)
    with jittered(1e-6, seed=1):
        b = torch.randn(50, generator=generator(0), dtype=torch.float64)
    with jittered(1e-6, seed=2):
        c = torch.randn(50, generator=generator(0), dtype=torch.float64)
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_the_jitter_reaches_the_problems_and_torch_init_but_not_integers():
    problem = DeepLinearRegression(n=8, depth=2, batch=4)
    plain_w, plain_x = problem.initial_weights(seed=0), problem.batch(0, seed=0)
    torch.manual_seed(0)
    plain_layer = torch.nn.Linear(8, 8).weight.detach().clone()
    plain_int = torch.randint(0, 100, (20,), generator=derived_generator(0, "data"))
    with jittered(1e-6, seed=0):
        w, x = problem.initial_weights(seed=0), problem.batch(0, seed=0)
        torch.manual_seed(0)
        layer = torch.nn.Linear(8, 8).weight.detach().clone()
        ints = torch.randint(0, 100, (20,), generator=derived_generator(0, "data"))
    for new, old in [(w[0], plain_w[0]), (x[0], plain_x[0]), (layer, plain_layer)]:
        assert not torch.equal(new, old) and torch.allclose(new, old, rtol=1e-5, atol=0)
    assert torch.equal(ints, plain_int)


def test_requires_grad_draws_stay_leaves_and_nested_jitters_restore():
    with jittered(1e-6, seed=0):
        w = torch.randn(3, requires_grad=True)
        with jittered(1e-5, seed=4):
            assert jitter_in_effect()["eps"] == 1e-5
        assert jitter_in_effect() == {"eps": 1e-6, "seed": 0}
    assert w.is_leaf and w.requires_grad and torch.randn is seeding._ORIGINAL["randn"]


@pytest.mark.parametrize("eps,seed", [(0.0, 0), (0.5, 0), (float("nan"), 0), (1e-6, -1)])
def test_bad_jitter_settings_are_named(eps, seed):
    with pytest.raises(ValueError, match="jitter"):
        with jittered(eps, seed):
            pass
    assert jitter_in_effect() is None


def test_importing_the_book_changes_nothing_of_torch():
    code = ("import torch; draw = torch.randn; import isolab.book, isolab.book.figures, isolab.book.seeding as s; "
            "print(torch.randn is draw, s.jitter_in_effect())")
    env = dict(os.environ, ISOLAB_JITTER="1e-6", ISOLAB_JITTER_SEED="5")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "True None"


def test_the_environment_switches_it_on_when_a_chapter_seeds():
    code = ("import torch, isolab.book; from isolab.book.seeding import jitter_in_effect, seed_everything; "
            "seed_everything(0); print(jitter_in_effect())")
    env = dict(os.environ, ISOLAB_JITTER="1e-6", ISOLAB_JITTER_SEED="5")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "{'eps': 1e-06, 'seed': 5}"
    env["ISOLAB_JITTER"] = "tiny"
    bad = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert bad.returncode != 0 and "ISOLAB_JITTER='tiny'" in bad.stderr
    env.pop("ISOLAB_JITTER")
    off = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert off.strip() == "None"
