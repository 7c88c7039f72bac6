"""Chapter 8's figure module: the figures build, the runs they draw say what the chapter
says, the centerpiece keeps its caption's promises over the whole grid (and the promises
can fail), the mixed optimizers give Adam exactly the matrices named, the saved Muon
controls are what the code computes, and the optimizers are built with explicit
hyperparameters."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

from isolab import linalg

from isolab.book import residual
from isolab.book.explorable import MIN_MAIN_VALUES, Explorable
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


# ----------------------------------------------------------------------------- 8.6
def test_iso_bump_is_not_caused_by_the_rank_8_covariance():
    """The chapter once blamed the first block's rank-8 covariance; with d_in = d the bump stays."""
    wide = ch08.network(d_in=16)
    wide_twin = residual.rotate_stream(wide, linalg.random_orthogonal(16, generator(3)))
    stale = ch08.train("Iso", wide, wide_twin, steps=20).gap.max().item()
    fresh = ch08.train("Iso", wide, wide_twin, steps=20, root_interval=1).gap.max().item()
    assert 1e-14 < stale < 1e-11 and fresh < 1e-14


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


# ----------------------------------------------------------------------------- centerpiece (8.5)
def test_share_explorable_keeps_its_promises():
    e = ch08.share_explorable()
    assert isinstance(e, Explorable) and e.main == "share" and len(e.main_slider.values) >= MIN_MAIN_VALUES
    assert e.narrow == "panels" and len(e.promises) == 4 and not e.broken_promises()
    for share in (0, 6, 100):
        for partner in ch08.PARTNERS:
            assert isinstance(e.render(strict=True, share=share, partner=partner), Figure)


def test_share_explorable_promises_can_fail():
    """The promises are not vacuous: a larger gap at share 0, growth for Muon or a partner
    matrix that stays put would break them, and the grid has such values."""
    assert ch08.untouched(4, "Iso")[1] > 1e-10                    # share 0 is special
    muon = [ch08.largest_gap(s, "Muon") for s in ch08.SHARES]
    assert not ch08.GrowsFor(("Muon",))(muon)                      # Muon's gap does not grow
    assert ch08.GrowsFor(("SGD",))([ch08.largest_gap(s, "SGD") for s in ch08.SHARES])
    assert ch08.partner_drift(0, "Muon")[1] < 1e-10                # no Adam: nothing drifts


def test_mixed_optimizer_gives_adam_exactly_the_chosen_matrices():
    net = ch08.network()
    for partner in ch08.PARTNERS:
        for k in (0, 3, 8):
            opt = ch08.mixed_optimizer(partner, k)(net)
            chosen = {id(net.get_submodule(n).weight) for n in ch08.ADAM_ORDER[:k]}
            groups = opt.opts if hasattr(opt, "opts") else [opt]
            adam = set()
            for o in groups:
                for g in o.param_groups:
                    if isinstance(o, torch.optim.Adam) or g.get("algorithm") == "adam":
                        adam |= {id(p) for p in g["params"] if p.ndim == 2}
            assert adam == chosen if k < 8 or partner == "SGD" else adam >= chosen, (partner, k)
            getattr(opt, "remove_hooks", lambda: None)()
    assert ch08.SHARES == (0, 4, 6, 22, 37, 53, 69, 84, 100)


def test_share_grid_says_what_the_section_says():
    grid = ch08.share_grid()
    for p in ch08.PARTNERS:
        assert grid[p, 0].gap.max() < 1e-10 and grid[p, 4].gap.max() > 1e-3
        assert grid[p, 100].gap.max() > 0.05
    assert grid["Muon", 4].gap.max() > 0.05                          # one matrix: Muon far apart already


def test_share_explorable_fits_the_website_budget():
    e = ch08.share_explorable()
    assert len(e.static_html()) <= 2_000_000


def test_matrix_drift_is_zero_for_the_untrained_twin():
    net, twin = ch08._net_and_twin()
    drift = ch08.matrix_drift(net, twin, ch08._rotation())
    assert set(drift) == set(ch08.STREAM_ORDER) and max(drift.values()) < 1e-14


# ----------------------------------------------------------------------------- 8.3: a careless exact msign
def test_plain_svd_msign_is_not_equivariant_on_a_rank_deficient_gradient():
    gen = generator(0)
    M = torch.randn(16, 8, generator=gen, dtype=torch.float64) @ torch.randn(8, 32, generator=gen,
                                                                             dtype=torch.float64)
    Q = linalg.random_orthogonal(16, generator(1))
    plain = ch08.plain_svd_msign(Q.T @ M) - Q.T @ ch08.plain_svd_msign(M)
    exact = linalg.msign(Q.T @ M) - Q.T @ linalg.msign(M)
    assert plain.norm() > 0.1 and exact.norm() < 1e-12
    full = torch.randn(16, 32, generator=gen, dtype=torch.float64)    # full rank: the two agree
    torch.testing.assert_close(ch08.plain_svd_msign(full), linalg.msign(full), rtol=0, atol=1e-12)
    assert ch08.plain_svd_run(steps=20).gap.max().item() > 1e-4


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


