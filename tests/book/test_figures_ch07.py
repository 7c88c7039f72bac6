"""Chapter 7's figure module: every figure function returns a figure, the numbers the
figures and the chapter show come from the real optimizers, the explorable keeps its
caption's promises over its whole grid, and those promises can fail (on the computation
the chapter used before: the one-batch Iso formula set against multi-step Adam)."""

from __future__ import annotations

import math

import numpy as np

import pytest
import torch
from matplotlib.figure import Figure

from isolab import updates

from isolab.book import batch_noise
from isolab.book.explorable import MIN_MAIN_VALUES, Explorable, constant
from isolab.book.figures import ch07
from isolab.book.seeding import generator


pytestmark = pytest.mark.usefixtures("book_figures")


# ----------------------------------------------------------------------------- the Iso optimizer on noise
def test_iso_steps_is_the_formula_without_memory():
    """With no averaging, no momentum and no damping the optimizer's step is the paper's
    one-batch formula, stream by stream (rows may differ between pairs)."""
    gen = generator(0)
    pairs = [batch_noise.noise_batch(8, 8, b, generator=gen, sample_shape=(4, 2)) for b in (4, 64)]
    steps = batch_noise.iso_steps(pairs, momentum=0.0, nesterov=True, beta_cov=0.0, damping=0.0, root_interval=1)
    for (X, G), d in zip(pairs, steps):
        assert d.shape == (4, 2, 8, 8)
        assert torch.allclose(d, updates.iso_update(X, G), atol=1e-12)


def test_iso_steps_match_one_layer_by_hand():
    """The many-stream helper and a single Linear layer trained by Iso agree step by step."""
    from isolab.optim import Iso

    X, G = batch_noise.noise_batch(8, 8, 256, generator=generator(3), sample_shape=(40,))
    (d,) = batch_noise.iso_steps([(X, G)], **ch07.ISO_HYPER)
    layer = torch.nn.Linear(8, 8, bias=False, dtype=torch.float64)
    opt = Iso(layer, lr=1.0, momentum=0.95, nesterov=True, beta_cov=0.95, damping=1e-3, stat_interval=1,
              root_interval=10, root_method="eigh", warmup_steps=0, weight_decay=0.0, stats_dtype=torch.float64,
              params=[{"params": [layer.weight]}])
    for t in range(40):
        before = layer.weight.detach().clone()
        layer(X[t]).backward(G[t])
        opt.step()
        opt.zero_grad()
        assert torch.allclose((before - layer.weight.detach()).T, d[t], atol=1e-12)


def test_noise_runs_levels_and_slopes():
    """What 7.7 prints: SGD and the Iso optimizer fall like 1/sqrt(b) over all 13 decades
    (Iso at the momentum's 0.174 sqrt(nm/b), also at b = 1 where the one-batch formula is
    1/8 of that law), Adam stays at 0.229 sqrt(nm)."""
    runs = ch07.noise_runs()
    root_b = torch.tensor(ch07.NOISE_BATCHES, dtype=torch.float64).sqrt()
    for key in ("sgd", "iso"):
        assert ch07.noise_slopes(key, low=1).mean().item() == pytest.approx(-0.5, abs=0.01)
    iso = ch07.stationary(runs["iso"]) * root_b / 8
    assert iso.min() > 0.16 and iso.max() < 0.19
    assert (ch07.stationary(runs["iso_formula"]) * root_b / 8)[0].item() == pytest.approx(0.125, abs=1e-9)
    adam = ch07.stationary(runs["adam", 0.999, 1e-8]) / 8
    assert adam.min() > 0.22 and adam.max() < 0.235
    assert abs(ch07.noise_slopes(("adam", 0.999, 1e-8), low=1).mean().item()) < 0.01


# ----------------------------------------------------------------------------- figures
@pytest.mark.parametrize("build", [ch07.hero, ch07.sign_limit])
def test_static_figures(build):
    fig = build()
    assert isinstance(fig, Figure) and fig.axes


def test_hero_shows_its_numbers():
    fig = ch07.hero()
    assert len(fig.axes) == 2
    texts = " ".join(t.get_text() for t in fig.axes[1].texts)
    assert "SGD -0.50" in texts and "Iso -0.50" in texts and "Adam +0.00" in texts
    clouds = ch07.sign_limit_clouds()
    d = [clouds["distance"][b] for b in ch07.CLOUD_BATCHES]
    assert all(b < a for a, b in zip(d, d[1:])) and d[-1] < 0.05       # the cloud closes in on sgn(mu)
    assert f"{d[-1]:.2f}" in fig.axes[0].get_title(loc="left")


def test_section_figures():
    batches = [1, 16, 256]
    assert isinstance(ch07.distance_figure(batches, {1e-3: [0.9, 0.6, 0.4]}, [0.85, 0.6, 0.33]), Figure)
    X, G = batch_noise.noise_batch(8, 8, 64, generator=generator(1), sample_shape=(2,))
    norms = {"SGD": torch.linalg.matrix_norm(updates.sgd_update(X, G))[:, None].expand(2, 3),
             "Iso": torch.ones(2, 3), "Adam first step": torch.full((2, 3), 8.0)}
    assert isinstance(ch07.noise_figure([1, 2, 4], norms, 8, 8), Figure)


# ----------------------------------------------------------------------------- explorable
def test_explorable_promises_hold():
    e = ch07.batch_noise_explorable()
    assert isinstance(e, Explorable) and ch07.batch_noise_explorable in ch07.EXPLORABLES
    assert e.main == "batch" and len(e.main_slider.values) >= max(9, MIN_MAIN_VALUES)
    assert len(e.promises) == 4 and e.narrow == "panels"
    assert e.broken_promises() == []
    for promise in e.promises:
        assert promise.text in e.caption
    assert "compare slopes, not heights" in e.caption
    assert isinstance(e.render(batch=10**12, beta2=0.1, eps=1e-2), Figure)


def test_promise_fails_on_the_old_computation():
    """The old figure set Adam's multi-step runs against Iso's one-batch formula; on that
    computation "Iso's steps shrink like 1/√b" is false (below b = 8 the formula grows), so
    the same promise must fail there."""
    iso_promise = next(p for p in ch07.batch_noise_explorable().promises if "Iso" in p.text)
    root_b = torch.tensor(ch07.NOISE_BATCHES, dtype=torch.float64).sqrt()
    old = (ch07.stationary(ch07.noise_runs()["iso_formula"]) * root_b / 8).tolist()
    new = [iso_promise.measure(batch=b, beta2=0.999, eps=1e-8) for b in ch07.NOISE_BATCHES]
    assert iso_promise.holds(new)
    assert not iso_promise.holds(old)
    # and Adam's "stays the same size" is not a law of the formula-like SGD line
    assert not constant(rtol=0.15)([ch07._stationary("sgd")[i] for i in range(2, 13)])


def test_adam_promises_fail_when_eps_is_ignored():
    """The 'falls like 1/√b beyond b*' promise reads the ε-dependent runs: fed the ε = 1e-8
    run at ε = 1e-2 it fails (Adam would still be flat there)."""
    promise = next(p for p in ch07.batch_noise_explorable().promises if "beyond" in p.text)
    flat = ch07._stationary(("adam", 0.999, 1e-8))
    law = [math.sqrt(0.1 / 1.9) * math.sqrt(64 / b) / 1e-2 for b in ch07.NOISE_BATCHES]
    wrong = [flat[i] / law[i] if b >= 100 / 1e-4 else None for i, b in enumerate(ch07.NOISE_BATCHES)]
    assert not promise.holds(wrong)


def test_batch_slider_moves_both_panels():
    """The reviewers' complaint: the batch slider moved only a cursor over a panel that never
    changed. Now the left panel draws one run's steps at the chosen b (SGD's and Iso's traces
    fall a decade per two decades of b, Adam's does not), labelled and with y ticks; the
    right panel draws every curve whole on fixed axes (no replay revealed up to b), labelled,
    with the chosen b marked on each."""
    e = ch07.batch_noise_explorable()
    levels = {}
    for batch in (10**2, 10**6):
        fig = e.render(strict=True, batch=batch, beta2=0.999, eps=1e-8)
        left, right = fig.axes[:2]
        assert {t.get_text() for t in left.texts} >= {"SGD", "Iso", "Adam"}
        assert len(left.get_yticks()) >= 3
        levels[batch] = [np.median(line.get_ydata()[100:]) for line in left.lines[:3]]  # SGD, Iso, Adam
        curves = [line for line in right.lines if len(line.get_xdata()) == len(ch07.NOISE_BATCHES)]
        marks = [line for line in right.lines if len(line.get_xdata()) == 1]
        assert len(curves) == 3 and len(marks) >= 3
        assert all(m.get_xdata()[0] == math.log10(batch) for m in marks[-3:])
        assert {t.get_text() for t in right.texts} >= {"SGD", "Iso", "Adam"}
        assert right.get_ylim() == left.get_ylim() == ch07._LOG_YLIM
    drop = [a - b for a, b in zip(levels[10**2], levels[10**6])]                        # decades
    assert abs(drop[0] - 2) < 0.2 and abs(drop[1] - 2) < 0.3 and abs(drop[2]) < 0.2


def test_short_memory_things_to_try():
    """'Lower β2 to 0.1: the trace gets rougher, the level about twice as high': over the
    stationary steps, Adam's β2 = 0.1 run fluctuates more (relative spread) and sits 1.7 to
    2.5 times higher than the β2 = 0.999 run, at every batch size from 10 on."""
    runs = ch07.noise_runs()
    short, long = runs["adam", 0.1, 1e-8], runs["adam", 0.999, 1e-8]
    for i in range(1, len(ch07.NOISE_BATCHES)):
        a, b = short[ch07.STATIONARY_FROM:, 0, i], long[ch07.STATIONARY_FROM:, 0, i]
        assert (a.std() / a.mean()) > (b.std() / b.mean())
        assert 1.7 < (a.mean() / b.mean()).item() < 2.5
