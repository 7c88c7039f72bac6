"""Chapter 8's figure module: the figures build, the runs they draw say what the chapter
says, the explorable keeps its caption's promises over the whole grid (and the promises
can fail: the old caption's claims break them), the saved runs behind the explorable are
what the code computes, and the optimizers are built with explicit hyperparameters."""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.figure import Figure

from isolab import linalg

from isolab.book import residual
from isolab.book.explorable import MIN_MAIN_VALUES, Explorable, always
from isolab.book.figures import ch08
from isolab.book.seeding import generator


pytestmark = pytest.mark.usefixtures("book_figures")


# ----------------------------------------------------------------------------- hero (8.4)
def test_hero_and_training_figures_show_the_twin_runs():
    runs = ch08.twin_runs()
    for name in ch08.EQUIVARIANT:                 # identical up to rounding for 200 steps
        assert runs[name].gap.max().item() < 1e-10, name
    for name in ch08.ELEMENTWISE:                 # percent-level drift from the first steps
        assert runs[name].gap[1:].min().item() > 1e-4 and runs[name].gap.max().item() > 0.1, name
    for run in runs.values():                     # and every optimizer trains
        assert run.loss[-1] < 0.2 * run.loss[0]
    fig = ch08.hero(runs)
    assert isinstance(fig, Figure) and len(fig.axes) == 1
    ax = fig.axes[0]
    assert len(ax.get_lines()) == len(ch08.NAMES) + 1             # six curves and the float64 line
    labels = {t.get_text() for t in ax.texts}
    assert set(ch08.NAMES) <= labels                              # labelled on the curves, no legend
    assert ax.get_legend() is None
    assert "13%" in ax.get_title(loc="left")                                # the number the section is about
    assert isinstance(ch08.training(runs), Figure)


# ----------------------------------------------------------------------------- 8.5
def test_iso_bump_is_not_caused_by_the_rank_8_covariance():
    """The chapter once blamed the first block's rank-8 covariance; with d_in = d the bump stays."""
    wide = ch08.network(d_in=16)
    wide_twin = residual.rotate_stream(wide, linalg.random_orthogonal(16, generator(3)))
    stale = ch08.train("Iso", wide, wide_twin, steps=20).gap.max().item()
    fresh = ch08.train("Iso", wide, wide_twin, steps=20, root_interval=1).gap.max().item()
    assert 1e-14 < stale < 1e-11 and fresh < 1e-14
    fig = ch08.iso_bump({"stale": ch08.train("Iso", wide, wide_twin, steps=20)})
    assert isinstance(fig, Figure)


def test_linear_decay_wrapper_lowers_every_group_to_zero():
    net = ch08.network()
    opt = ch08.LinearDecay(ch08.optimizer("Muon", 0.02)(net), steps=4)
    x, y, _, _ = ch08.problem()
    for t in range(4):
        opt.zero_grad()
        (net(x[t]) - y[t]).square().mean().backward()
        opt.step()
    assert all(g["lr"] == 0.0 for g in opt.opt.param_groups)
    opt.remove_hooks()


# ----------------------------------------------------------------------------- optimizers
def test_optimizers_are_built_with_explicit_hyperparameters():
    net = ch08.network()
    weights = {id(p) for n, p in net.named_parameters() if n.endswith("weight")}
    for name in ("Muon", "Iso", "IsoAdam"):
        opt = ch08.optimizer(name, ch08.LR[name])(net)
        matrix = [g for g in opt.param_groups if g.get("algorithm") != "adam"]
        routed = {id(p) for g in matrix for p in g["params"]}
        assert routed == weights, f"{name}: every weight matrix (input projection and head too) gets the matrix rule"
        for g in matrix:
            assert g["lr"] == ch08.LR[name] and g["weight_decay"] == 0.0
            if name != "Muon":
                assert g["damping"] == 1e-3 and g["root_interval"] == 10 and g["beta_cov"] == 0.95
                assert not g.get("shrinkage", False)
        getattr(opt, "remove_hooks", lambda: None)()
    ends = ch08.optimizer("Muon", 0.02, ends_to_adam=True)(net)
    adam = {id(p) for g in ends.param_groups if g.get("algorithm") == "adam" for p in g["params"]}
    assert id(net.embed.weight) in adam and id(net.head.weight) in adam


# ----------------------------------------------------------------------------- explorable (8.7)
def test_rotation_explorable_keeps_its_promises():
    e = ch08.rotation_explorable()
    assert isinstance(e, Explorable) and e.main == "theta" and len(e.main_slider.values) >= MIN_MAIN_VALUES
    assert len(e.promises) == 3 and not e.broken_promises()
    for theta in (0.0, 0.01, 1.0, 3.0):
        for scale in ch08.LR_SCALES:
            assert isinstance(e.render(strict=True, theta=theta, lr_scale=scale), Figure)


def test_rotation_explorable_promises_can_fail():
    """The old caption said the equivariant optimizers 'stay near the float64 floor whatever the
    angle' and that Adam's gap grows with θ: over the full grid both are false."""
    muon = [ch08._max_gap(t, 3.0, "Muon") for t in ch08.THETAS]
    assert not always(lambda g: g < 1e-10, "below 1e-10")(muon)           # Muon at 3x: ~1e-5
    assert any(not ch08.GrowsUpTo(3.0)([ch08.adam_gap(t, s) for t in ch08.THETAS]) for s in ch08.LR_SCALES)
    assert ch08.GrowsUpTo(1.0)([ch08.adam_gap(t, 1.0) for t in ch08.THETAS])


def test_rotation_explorable_fits_the_website_budget():
    e = ch08.rotation_explorable()
    assert len(e.static_html()) <= 2_000_000


def test_saved_rotation_runs_are_what_the_code_computes():
    """Recompute one grid point of ``scripts/ch08_rotation_runs.py`` and compare with the file."""
    saved = ch08.rotation_runs()
    theta, scale = 0.5, 0.3
    i, j = ch08.THETAS.index(theta), ch08.LR_SCALES.index(scale)
    for k, name in enumerate(ch08.NAMES):
        run = ch08.rotation_run(name, theta, scale)
        gap, loss = run.gap.numpy(), run.loss.numpy()
        np.testing.assert_allclose(loss, saved["loss"][i, j, k], rtol=1e-8, err_msg=name)
        if name in ch08.ELEMENTWISE:
            np.testing.assert_allclose(gap[1:], saved["gap"][i, j, k, 1:], rtol=1e-6, err_msg=name)
        else:  # rounding-level gaps: their digits depend on the CPU, their size does not
            assert gap.max() < 1e-10 and saved["gap"][i, j, k].max() < 1e-10, name
    assert (saved["gap"][0] == 0).all()          # θ = 0: the twin is the network itself


def test_saved_muon_controls_are_what_the_code_computes():
    """Rerun two of ``scripts/ch08_muon_controls.py``'s runs and compare with the file."""
    saved = ch08.muon_controls()
    decay = ch08.muon_control("learning rate falling to 0").gap.numpy()
    # no amplification: the gap is the 1e-12 perturbation itself, the same on every CPU to a percent
    np.testing.assert_allclose(decay, saved["learning rate falling to 0", "shadow"], rtol=1e-2)
    assert decay.max() / decay[0] < 10
    exact = ch08.muon_control("exact polar factor").gap.numpy()
    growth, saved_growth = exact.max() / exact[0], (lambda g: g.max() / g[0])(saved["exact polar factor", "shadow"])
    assert 10 < growth < 1000 and 10 < saved_growth < 1000    # amplified, digits CPU-dependent
    assert saved["no momentum", "twin"].max() > 1e-3 and saved["no momentum", "shadow"].max() / 1e-12 > 1000


def test_explorable_shows_the_angle_and_theta_zero():
    """The right panel carries what the main slider changes (each optimizer's largest gap
    at every θ, the chosen θ marked), so θ = 0 is a frame with content, not a message:
    its left panel says why there are no curves and names the optimizers."""
    e = ch08.rotation_explorable()
    fig = e.render(strict=True, theta=0.0, lr_scale=1.0)
    left, right = fig.axes
    texts = " ".join(t.get_text() for t in left.texts)
    assert "exactly 0" in texts and left.get_legend() is not None
    assert len(right.lines) == len(ch08.NAMES) + 1          # one curve per optimizer and the marker
    gaps = ch08.max_gaps(1.0)
    assert all(g[0] == 0 for g in gaps.values())            # θ = 0: the twin is the network
    assert gaps["Adam"][ch08.THETAS.index(1.0)] > 1e3 * gaps["Muon"][ch08.THETAS.index(1.0)]


def test_things_to_try_of_section_8_7():
    """The section's things to try, on the stored grid: Adam's largest gap grows roughly in
    proportion to θ up to 0.2 (gap/θ within a factor 1.5) and levels off beyond θ = 1 (the
    gap at θ = 3 within 30% of the gap at θ = 1); at three times its learning rate Muon's
    gap climbs to about 1e-5 and Iso's run diverges within ten steps at every θ > 0."""
    for scale in ch08.LR_SCALES:
        per_radian = [ch08.adam_gap(t, scale) / t for t in ch08.THETAS if 0 < t <= 0.2]
        assert max(per_radian) / min(per_radian) < 1.5
        assert abs(ch08.adam_gap(3.0, scale) / ch08.adam_gap(1.0, scale) - 1) < 0.3
    muon = [ch08._max_gap(t, 3.0, "Muon") for t in ch08.THETAS[1:]]
    assert 1e-6 < max(muon) < 1e-4
    d = ch08.rotation_runs()
    j, k = ch08.LR_SCALES.index(3.0), ch08.NAMES.index("Iso")
    for i, theta in enumerate(ch08.THETAS):
        if theta > 0:
            assert np.flatnonzero(np.isfinite(d["gap"][i, j, k]))[-1] < 10
